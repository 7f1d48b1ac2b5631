/*
 * bench_pages.c - the cost of the page allocator (buddy.c, zone.c) in ns.
 *
 * Every other part of ucma gets its memory here, so this is the figure a
 * slab refill, a large malloc or a movable object pays.  Measured, for
 * runs of 1, 16 and 512 pages (4 KiB, 64 KiB, one 2 MiB pageblock) and for
 * a run that is no power of two (3 pages, split exactly):
 *
 *   lifo    alloc then free of the same run, repeated: the hot path, where
 *           the block is split and merged again each time;
 *   batch   BATCH runs allocated, then freed in random order, repeated:
 *           splitting from and merging into a fragmented free list;
 *   2 thr   lifo in two threads at once: contention on the zone lock,
 *           or none where the per-CPU lists (pcp.c) serve the run.
 *
 * Then the cost of the second thread, "2 thr" over "lifo" of the same
 * run, for each size and allocator.
 *
 * In the same run, the same sizes through the kernel (mmap + munmap, no
 * page touched, which is what a page-granular allocator replaces) and
 * through glibc's malloc/free, as ratios.  No page is touched by ucma
 * either: this is the bookkeeping alone.
 *
 * Environment: UCMA_BENCH_OPS (pairs per case, default 2000000).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define BATCH 256

static unsigned long ops = 2000000;

struct pages_case {
	uint32_t npages;
	const char *label;
};

static const struct pages_case cases[] = {
	{ 1, "4K" }, { 3, "12K" }, { 16, "64K" }, { 512, "2M" },
};

/* ---- the three allocators, as one interface --------------------------- */

enum impl { IMPL_UCMA, IMPL_MMAP, IMPL_GLIBC, IMPL_NR };
static const char *const impl_name[IMPL_NR] = { "ucma", "mmap", "glibc" };

static struct ucma_arena *arena;

static void *impl_alloc(enum impl im, uint32_t npages)
{
	size_t len = (size_t)npages << UCMA_PAGE_SHIFT;
	uint32_t pfn;
	void *p;

	switch (im) {
	case IMPL_UCMA:
		pfn = ucma_pages_alloc(arena, npages, UCMA_GFP_UNMOVABLE);
		return pfn == UCMA_PFN_NONE ? NULL : ucma_pfn_to_addr(arena, pfn);
	case IMPL_MMAP:
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return p == MAP_FAILED ? NULL : p;
	default:
		return malloc(len);
	}
}

static void impl_free(enum impl im, void *p, uint32_t npages)
{
	switch (im) {
	case IMPL_UCMA:
		ucma_pages_free(arena, ucma_addr_to_pfn(arena, p));
		break;
	case IMPL_MMAP:
		munmap(p, (size_t)npages << UCMA_PAGE_SHIFT);
		break;
	default:
		free(p);
	}
}

static void *must(void *p, enum impl im, uint32_t npages)
{
	if (!p) {
		fprintf(stderr, "bench_pages: %s: allocation of %u pages failed\n",
			impl_name[im], npages);
		exit(1);
	}
	return p;
}

/* ---- the workloads ------------------------------------------------------ */

struct job {
	enum impl im;
	uint32_t npages;
	unsigned long n;
	double ns;		/* per alloc+free pair */
	double cpu_ns;		/* the same in the thread's CPU time */
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *lifo(void *arg)
{
	struct job *j = arg;
	uint64_t c0 = thread_cpu_ns(), t0 = tu_now_ns();

	for (unsigned long i = 0; i < j->n; i++) {
		void *p = must(impl_alloc(j->im, j->npages), j->im, j->npages);

		/* keep the compiler from pairing the calls away */
		__asm__ volatile("" : : "r"(p) : "memory");
		impl_free(j->im, p, j->npages);
	}
	j->ns = (double)(tu_now_ns() - t0) / (double)j->n;
	j->cpu_ns = (double)(thread_cpu_ns() - c0) / (double)j->n;
	return NULL;
}

static void batch(struct job *j)
{
	void *v[BATCH];
	unsigned perm[BATCH];
	uint64_t seed = 42, t0;
	unsigned long rounds = j->n / BATCH;

	if (!rounds)
		rounds = 1;
	for (unsigned i = 0; i < BATCH; i++)
		perm[i] = i;
	t0 = tu_now_ns();
	for (unsigned long r = 0; r < rounds; r++) {
		for (unsigned i = 0; i < BATCH; i++)
			v[i] = must(impl_alloc(j->im, j->npages), j->im, j->npages);
		/* a new random order every round, outside nothing: it is cheap */
		for (unsigned i = BATCH - 1; i > 0; i--) {
			unsigned k = (unsigned)(tu_rand(&seed) % (i + 1)), t = perm[i];

			perm[i] = perm[k];
			perm[k] = t;
		}
		for (unsigned i = 0; i < BATCH; i++)
			impl_free(j->im, v[perm[i]], j->npages);
	}
	j->ns = (double)(tu_now_ns() - t0) / (double)(rounds * BATCH);
}

static double two_threads(enum impl im, uint32_t npages, unsigned long n, double *cpu_ns)
{
	struct job j[2] = { { im, npages, n, 0, 0 }, { im, npages, n, 0, 0 } };
	pthread_t t;

	if (pthread_create(&t, NULL, lifo, &j[1]) != 0) {
		perror("bench_pages: pthread_create");
		exit(1);
	}
	lifo(&j[0]);
	pthread_join(t, NULL);
	*cpu_ns = (j[0].cpu_ns + j[1].cpu_ns) / 2;
	return (j[0].ns + j[1].ns) / 2;
}

int main(void)
{
	const char *env = getenv("UCMA_BENCH_OPS");
	struct ucma_config cfg;

	if (env)
		ops = strtoul(env, NULL, 10);
	if (ops < BATCH)
		ops = BATCH;
	/* NORMAL only is used: the bookkeeping alone, on any machine. */
	ucma_config_from_env(&cfg);
	cfg.arena_size = 1ull << 30;
	if (ucma_init(&cfg) != 0 || !(arena = ucma_arena_get())) {
		perror("bench_pages: ucma_init");
		return 1;
	}
	printf("# page allocator: ns per alloc+free pair, %lu pairs per case; "
	       "NORMAL zone of %zu MiB (%s)\n",
	       ops, (size_t)(arena->zones[UCMA_ZONE_NORMAL].managed_pages << UCMA_PAGE_SHIFT) >> 20,
	       ucma_backing_name("normal"));
	printf("%-6s %-6s %10s %10s %10s %12s %12s\n", "size", "case", "ucma ns", "mmap ns",
	       "glibc ns", "ucma/mmap", "ucma/glibc");
	double scaling[UCMA_ARRAY_SIZE(cases)][IMPL_NR], cpu_scaling[UCMA_ARRAY_SIZE(cases)][IMPL_NR];

	for (size_t c = 0; c < UCMA_ARRAY_SIZE(cases); c++) {
		uint32_t np = cases[c].npages;
		double r[3][IMPL_NR], cpu1[IMPL_NR], cpu2[IMPL_NR];

		for (int im = 0; im < IMPL_NR; im++) {
			struct job j = { (enum impl)im, np, ops, 0, 0 };
			/* mmap is two system calls: fewer of them tell as much */
			unsigned long n = im == IMPL_MMAP ? ops / 10 : ops;

			j.n = n;
			lifo(&j);
			r[0][im] = j.ns;
			cpu1[im] = j.cpu_ns;
			j.n = n;
			batch(&j);
			r[1][im] = j.ns;
			r[2][im] = two_threads((enum impl)im, np, n / 2, &cpu2[im]);
		}
		for (int k = 0; k < 3; k++) {
			static const char *const kname[3] = { "lifo", "batch", "2 thr" };

			printf("%-6s %-6s %10.1f %10.1f %10.1f %12.3f %12.3f\n", cases[c].label,
			       kname[k], r[k][IMPL_UCMA], r[k][IMPL_MMAP], r[k][IMPL_GLIBC],
			       r[k][IMPL_UCMA] / r[k][IMPL_MMAP], r[k][IMPL_UCMA] / r[k][IMPL_GLIBC]);
		}
		for (int im = 0; im < IMPL_NR; im++) {
			scaling[c][im] = r[2][im] / r[0][im];
			cpu_scaling[c][im] = cpu2[im] / cpu1[im];
		}
	}
	/* The cost of a second thread: 1.0 is perfect scaling, 2.0 is one
	 * lock serialising both threads. */
	printf("\n# 2 threads / 1 thread: ns per pair of \"2 thr\" over \"lifo\", same run;\n"
	       "# wall clock, and the threads' own CPU time (what the pair costs while it\n"
	       "# runs: unlike the wall clock, not inflated when other processes hold the CPUs)\n");
	printf("%-6s %10s %10s %10s %10s %10s %10s\n", "size", "ucma", "mmap", "glibc", "ucma cpu",
	       "mmap cpu", "glibc cpu");
	for (size_t c = 0; c < UCMA_ARRAY_SIZE(cases); c++)
		printf("%-6s %9.2fx %9.2fx %9.2fx %9.2fx %9.2fx %9.2fx\n", cases[c].label,
		       scaling[c][IMPL_UCMA], scaling[c][IMPL_MMAP], scaling[c][IMPL_GLIBC],
		       cpu_scaling[c][IMPL_UCMA], cpu_scaling[c][IMPL_MMAP],
		       cpu_scaling[c][IMPL_GLIBC]);
	return 0;
}
