/*
 * node.h - NUMA nodes for placement (UCMA_NODE), through libnuma, which
 * is loaded when a placement is first asked for (node.c).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_NODE_H
#define UCMA_NODE_H

#include "internal.h"

/*
 * The answers libnuma gives, or "unknown" where it cannot be loaded or
 * says NUMA is unavailable: ucma_node_max() is then -1, and placement is
 * left to the kernel.  Safe from any thread; the first call loads the
 * library (dlopen), so it must not come from a context that may not call
 * malloc: ucma's own start-up serves such calls from its bootstrap
 * buffer.
 */
/* The highest node number, or -1 when libnuma cannot tell. */
UCMA_INTERNAL int ucma_node_max(void);
/* Is @node a node of this machine?  -1: libnuma cannot tell. */
UCMA_INTERNAL int ucma_node_exists(int node);
/* The node of CPU @cpu, or -1. */
UCMA_INTERNAL int ucma_node_of_cpu(int cpu);

#endif
