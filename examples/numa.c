/*
 * numa.c - placing the arena on a NUMA node.
 *
 * The same can be done without code: UCMA_NODE=0 (a node number),
 * UCMA_NODE=local (the node of the thread that initialises ucma) or
 * UCMA_NODE=interleave.  Here the program asks for node 0 explicitly,
 * touches a contiguous buffer and asks the kernel where its pages are.
 *
 * Build: cc numa.c $(pkg-config --cflags --libs ucma) -lnuma
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucma.h>

int main(int argc, char **argv)
{
	int node = argc > 1 ? atoi(argv[1]) : 0;
	struct ucma_config cfg = {
		.arena_size = 256u << 20,
		.cma_size = 64u << 20,
		.node = UCMA_NODE_ID(node),
	};
	void *pages[1];
	int status[1] = { -1 };
	char *buf;

	if (numa_available() < 0)
		printf("numa: this kernel has no NUMA support; the arena is placed as usual\n");
	else
		printf("numa: %d node(s); asking for node %d\n", numa_max_node() + 1, node);
	if (ucma_init(&cfg) != 0) {
		fprintf(stderr, "numa: ucma_init: %s\n", strerror(errno));
		return 1;
	}
	buf = ucma_alloc(2u << 20, 0, UCMA_ALLOC_POPULATE);
	if (!buf) {
		fprintf(stderr, "numa: ucma_alloc: %s\n", strerror(errno));
		return 1;
	}
	pages[0] = buf;
	if (move_pages(0, 1, pages, NULL, status, 0) == 0 && status[0] >= 0)
		printf("numa: the contiguous buffer's first page is on node %d\n", status[0]);
	else
		printf("numa: the kernel did not say where the page is (%s)\n",
		       strerror(status[0] < 0 ? -status[0] : errno));
	ucma_release(buf);
	return 0;
}
