/*
 * node.c - libnuma, loaded on first use.
 *
 * Placement is asked for by UCMA_NODE (a node, local or interleave);
 * without it (the default) ucma never needs libnuma.  Linked as a
 * dependency, libnuma ran its constructor in every process: it reads
 * /proc/self/status and the node directories of sysfs through stdio.
 * A program that does nothing (/bin/true) under libucma-preload.so had a
 * peak RSS of 2112 KiB with it loaded, 1324-1388 KiB without (the
 * library's pages and the libc code its start-up touched; mimalloc's
 * 1336, tests/bench/RESULTS.md).  So it is opened with
 * dlopen() when a placement needs it, once, and its few entry points are
 * looked up by name.  The mbind() itself is a system call (os.c).
 *
 * Locking: pthread_once() around the loading; afterwards the table of
 * entry points is read-only.  The loading happens while the arena is
 * created, under init.c's init_lock, and dlopen() takes the dynamic
 * linker's lock: a thread inside dlopen() that waited for init_lock
 * would deadlock with it.  None does: under LD_PRELOAD the arena is
 * created by the process's first malloc, before the program has a
 * thread, and a program that links -lucma has glibc's malloc inside
 * dlopen(), which never reaches ucma.
 *
 * SPDX-License-Identifier: MIT
 */
#include "node.h"

#include <dlfcn.h>
#include <numa.h>
#include <pthread.h>

#define LIBNUMA_SONAME "libnuma.so.1"

/* libnuma's entry points, or all NULL when it is not there. */
static struct {
	int (*max_node)(void);
	int (*node_of_cpu)(int cpu);
	int (*bitmask_isbitset)(const struct bitmask *bmp, unsigned int n);
	struct bitmask **nodes_ptr;	/* the nodes the machine has, or NULL */
	bool usable;			/* loaded, and numa_available() >= 0 */
} numa;

static pthread_once_t numa_once = PTHREAD_ONCE_INIT;

static void numa_load(void)
{
	/* RTLD_NODELETE: the pointers stay valid for the process's life. */
	void *h = dlopen(LIBNUMA_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	int (*available)(void);

	if (!h) {
		if (ucma_opt.verbose)
			ucma_log("%s not loaded (%s): NUMA placement left to the kernel",
				 LIBNUMA_SONAME, dlerror());
		return;
	}
	available = (int (*)(void))dlsym(h, "numa_available");
	numa.max_node = (int (*)(void))dlsym(h, "numa_max_node");
	numa.node_of_cpu = (int (*)(int))dlsym(h, "numa_node_of_cpu");
	numa.bitmask_isbitset = (int (*)(const struct bitmask *, unsigned int))dlsym(
		h, "numa_bitmask_isbitset");
	numa.nodes_ptr = (struct bitmask **)dlsym(h, "numa_nodes_ptr");
	numa.usable = available && numa.max_node && numa.node_of_cpu && available() >= 0;
	if (!numa.usable && ucma_opt.verbose)
		ucma_log("%s: NUMA unavailable here: placement left to the kernel",
			 LIBNUMA_SONAME);
}

static bool numa_ready(void)
{
	pthread_once(&numa_once, numa_load);
	return numa.usable;
}

int ucma_node_max(void)
{
	return numa_ready() ? numa.max_node() : -1;
}

int ucma_node_exists(int node)
{
	if (!numa_ready())
		return -1;
	if (node < 0 || node > numa.max_node())
		return 0;
	if (!numa.nodes_ptr || !*numa.nodes_ptr || !numa.bitmask_isbitset)
		return 1;	/* every number up to the highest, as libnuma counts them */
	return numa.bitmask_isbitset(*numa.nodes_ptr, (unsigned int)node) != 0;
}

int ucma_node_of_cpu(int cpu)
{
	return numa_ready() ? numa.node_of_cpu(cpu) : -1;
}
