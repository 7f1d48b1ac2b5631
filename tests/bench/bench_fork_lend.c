/*
 * bench_fork_lend.c - what fork() costs a process whose heap lies on
 * frames lent by a CMA area.
 *
 * A heap of FL_HEAP_MB MiB (256) in 4 MiB blocks, every page written, on
 * a CMA area of as many MiB (shmem frames, heap lending on).  Three
 * ways, FL_FORKS forks each (10), the child exiting at once; the time is
 * from fork() to its return in the parent:
 *  - single-threaded, lent: the child copies every borrowed pageblock to
 *    memory of its own while the parent waits in its fork handler, and
 *    the parent keeps lending;
 *  - multi-threaded, lent: the prepare handler takes every borrowed
 *    pageblock back first (the heap is lent again before each fork);
 *  - not lent: the same heap on the NORMAL zone's own memory (after
 *    ucma_unlend_all()), with the thread.
 * Needs a userfaultfd with write-protection (root); says why and exits 0
 * without one.  `make bench-fork-lend`.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ucma.h"

#define MiB ((size_t)1 << 20)
#define BLOCK (4 * MiB)
#define MAXFORKS 64

static char *blocks[1024];
static int nblocks;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	return ucma_stat(name, &v) == 0 ? v : 0;
}

/* The heap, afresh: freed and trimmed pageblocks are clean, so the new
 * blocks break into fresh ones and borrow frames again. */
static void heap_build(size_t heap)
{
	for (int i = 0; i < nblocks; i++)
		ucma_free(blocks[i]);
	ucma_trim();
	nblocks = 0;
	for (size_t have = 0; have < heap && nblocks < 1024; have += BLOCK) {
		blocks[nblocks] = ucma_malloc(BLOCK);
		if (!blocks[nblocks])
			break;
		memset(blocks[nblocks], 0x40 + nblocks % 64, BLOCK);
		nblocks++;
	}
}

static bool heap_good(void)
{
	for (int i = 0; i < nblocks; i++)
		for (size_t off = 0; off < BLOCK; off += 4096)
			if (blocks[i][off] != (char)(0x40 + i % 64))
				return false;
	return true;
}

/* One fork: seconds until it returns in the parent; the child checks
 * the heap and exits with 0 when it is intact. */
static double fork_once(bool *child_ok)
{
	double t = now();
	pid_t pid = fork();
	int status;

	if (pid == 0)
		_exit(heap_good() ? 0 : 1);
	t = now() - t;
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		*child_ok = false;
	return pid < 0 ? -1 : t;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* Median and maximum of @n samples, in ms. */
static void report(const char *what, double *t, int n, uint64_t lent_mib, bool ok)
{
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	printf("| %s | %llu | %.2f | %.2f | %s |\n", what, (unsigned long long)lent_mib,
	       t[n / 2] * 1e3, t[n - 1] * 1e3, ok ? "yes" : "NO");
}

static void *idle(void *arg)
{
	pause();
	return arg;
}

int main(void)
{
	size_t heap = (size_t)strtoull(getenv("FL_HEAP_MB") ? getenv("FL_HEAP_MB") : "256", NULL,
				       10) * MiB;
	int forks = atoi(getenv("FL_FORKS") ? getenv("FL_FORKS") : "10");
	struct ucma_config cfg = {
		.arena_size = 2 * heap + 64 * MiB,
		.cma_size = heap,
		.hugepages = UCMA_BACKING_NONE,
	};
	double t[MAXFORKS];
	uint64_t lent, lent_max = 0;
	bool ok = true;
	pthread_t th;

	if (forks < 1 || forks > MAXFORKS)
		forks = 10;
	setenv("UCMA_CMA_POLICY", "lend", 1);
	if (ucma_init(&cfg) != 0) {
		printf("fork_lend: ucma_init: %s\n", strerror(errno));
		return 1;
	}
	heap_build(heap);
	lent = stat_of("lend_heap_pageblocks") * 2;
	if (lent == 0) {
		printf("fork_lend: nothing is lent to the heap (no userfaultfd with "
		       "write-protection here? run as root); nothing measured\n");
		return 0;
	}
	printf("fork_lend: heap %zu MiB in %d blocks of 4 MiB, CMA area %zu MiB (shmem), "
	       "%d forks each, time from fork() to its return in the parent\n\n",
	       heap / MiB, nblocks, heap / MiB, forks);
	printf("| process | lent MiB at the fork | fork p50 ms | fork max ms | child's heap intact |\n");
	printf("| --- | ---: | ---: | ---: | ---: |\n");

	/* Single-threaded: the parent keeps lending, fork after fork. */
	for (int i = 0; i < forks; i++) {
		lent = stat_of("lend_heap_pageblocks") * 2;
		lent_max = lent > lent_max ? lent : lent_max;
		t[i] = fork_once(&ok);
	}
	report("single-threaded, lent (the child copies)", t, forks, lent_max, ok && heap_good());

	if (pthread_create(&th, NULL, idle, NULL) != 0) {
		printf("fork_lend: pthread_create failed\n");
		return 1;
	}
	lent_max = 0;
	for (int i = 0; i < forks; i++) {
		heap_build(heap);
		lent = stat_of("lend_heap_pageblocks") * 2;
		lent_max = lent > lent_max ? lent : lent_max;
		t[i] = fork_once(&ok);
	}
	report("multi-threaded, lent (taken back before the fork)", t, forks, lent_max,
	       ok && heap_good());

	ucma_unlend_all();
	for (int i = 0; i < forks; i++)
		t[i] = fork_once(&ok);
	report("multi-threaded, not lent", t, forks, stat_of("lend_heap_pageblocks") * 2,
	       ok && heap_good());
	return ok ? 0 : 1;
}
