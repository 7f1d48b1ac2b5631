/*
 * bench_malloc.c - one case of the malloc benchmark, in one process.
 *
 *   bench_malloc CASE
 *   bench_malloc_ucma [--ucma] CASE
 *
 * Runs the workload CASE and prints one line "CASE ms maxrss_kib cpu_ms"
 * (wall time of the workload, peak RSS, CPU time of the process).  By
 * default it calls malloc/free/realloc, which are glibc's, or jemalloc's
 * or ucma's when the driver (malloc.sh) preloads them; bench_malloc_ucma
 * (BENCH_MALLOC_UCMA), which needs --ucma, calls ucma_malloc() and
 * friends.  Both make direct calls, as programs do (the compiler had
 * already turned bench_malloc's calls through never-changed function
 * pointers into direct ones).  Only bench_malloc_ucma links libucma: the
 * other allocators' runs load nothing of ucma's, whose libraries would
 * count in their peak RSS.
 *
 * The cases (each small enough to run in about a second):
 *   small      random replacement in 10000 slots, 16-64 bytes
 *   small-batch  allocate 100000 blocks of 16-64 bytes, free them in order
 *   mixed      random replacement in 10000 slots, 16 bytes - 4 KiB
 *   large      random replacement in 1000 slots, 4 - 64 KiB
 *   prodcons   one thread allocates 16 - 1024 bytes, another frees them
 *   realloc    strings grown by realloc in steps of 16 - 80 bytes to 256 KiB
 *   realloc-big  two buffers built up side by side by realloc, an eighth
 *              more each step (each step written), to 24 MiB, then freed
 *   large-odd  300 live blocks of 1 MiB + 57 bytes, then of 512 KiB + 57
 *              bytes, every page written (sizes just above a power of two)
 *   large-odd-2m  100 live blocks of 2 MiB + 57 bytes, then of 3 MiB + 57
 *   large-holes  a heap of 1 MiB blocks with 1 MiB holes, then blocks of
 *              1 MiB + 57 bytes (which no hole holds) allocated and freed
 *   past-arena  random replacement in 1000 slots, 16 bytes - 300 KB; the
 *              driver runs ucma with an 8 MiB arena, so that its heap lives
 *              in the overflow mappings past the NORMAL zone
 *   mt-small   the small case in two threads at once
 *   mt-mixed   the mixed case in two threads at once
 * and four shapes of the well-known allocator benchmarks, written here:
 *   simple     glibc-bench "simple": one thread allocates a batch of 25,
 *              100, 400 or 1600 blocks of one size (16 - 256 bytes) and
 *              frees it, over and over
 *   thread     glibc-bench "thread" in two threads: each replaces random
 *              blocks of a working set of 1024, sizes 16 B - 32 KiB with
 *              small ones far more likely
 *   larson     larson's server simulation: two threads replace random
 *              blocks (10 - 1000 bytes) of their share of the blocks; every
 *              round a thread hands its share to a new thread and exits,
 *              so most blocks are freed by a thread that did not allocate
 *              them, and the allocating thread is gone
 *   burst      mstress-like: 16 threads at once, started afresh for each of
 *              10 rounds, allocate bursts of blocks (mostly small, a few up
 *              to 64 KiB), pass some to other threads through a shared
 *              array and free the rest; peak RSS shows what the allocator
 *              keeps per thread and after bursts
 * Every block is written (its first 64 bytes and one byte per page), so
 * the resident set reflects what a program touching its memory would see.
 * BENCH_MALLOC_DIV=n in the environment runs 1/n of the work (for
 * valgrind --tool=callgrind).
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifdef BENCH_MALLOC_UCMA
#include "ucma.h"
#endif

static unsigned long work_div = 1;	/* BENCH_MALLOC_DIV */

/* Direct calls, as a program makes them: malloc() through the PLT to
 * whichever library defines it, or ucma's functions in
 * bench_malloc_ucma. */
#ifdef BENCH_MALLOC_UCMA
#define bm_malloc ucma_malloc
#define bm_free ucma_free
#define bm_realloc ucma_realloc
#else
#define bm_malloc malloc
#define bm_free free
#define bm_realloc realloc
#endif

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 2685821657736338717ull;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * Write the block as a program would: its head and every page.
 *
 * The compiler expands the memset below inline (it is at most 64 bytes),
 * and how depends on what it knows of the block's alignment: GCC assumes
 * 8 bytes of a malloc() block, and when ucma.h declared ucma_malloc()'s
 * result 16-byte aligned it made a loop of byte stores for the tail here,
 * whose branches mispredict: bench_malloc_ucma's own loop ran a third
 * slower than bench_malloc's, and the direct-call column charged that to
 * ucma.  So the empty asm hides where the block came from, and touch() is
 * told what is true of every allocator here, 8 bytes: bench_malloc and
 * bench_malloc_ucma run the same instructions whatever the declarations
 * say (tests/header_check.sh checks that ucma.h says what malloc() does).
 */
static void touch(void *p, size_t size, uint64_t v)
{
	char *c = p;

	__asm__("" : "+r"(c));
	c = __builtin_assume_aligned(c, 8);
	memset(c, (int)v, size < 64 ? size : 64);
	for (size_t off = 4096; off < size; off += 4096)
		c[off] = (char)v;
}

static size_t size_small(uint64_t *s)
{
	return 16 + rnd(s) % 49;
}

/* 16 bytes to 4 KiB, each power of two equally likely: small sizes
 * dominate the count, as in real programs. */
static size_t size_mixed(uint64_t *s)
{
	uint64_t r = rnd(s);
	size_t base = (size_t)16 << (r % 8);

	return base + (r >> 8) % base;
}

static size_t size_large(uint64_t *s)
{
	return 4096 + rnd(s) % (60 * 1024);
}

static size_t size_past(uint64_t *s)
{
	return 16 + rnd(s) % 300000;
}

struct replace_args {
	size_t (*size)(uint64_t *);
	unsigned slots;
	unsigned long ops;
	uint64_t seed;
};

/* Random replacement over a working set: free a random slot, refill it. */
static void *replace(void *arg)
{
	struct replace_args *ra = arg;
	void **slot = calloc(ra->slots, sizeof(void *));
	uint64_t s = ra->seed;

	for (unsigned long i = 0; i < ra->ops; i++) {
		uint64_t r = rnd(&s);
		unsigned k = (unsigned)(r % ra->slots);
		size_t size = ra->size(&s);

		bm_free(slot[k]);
		slot[k] = bm_malloc(size);
		touch(slot[k], size, r);
	}
	for (unsigned k = 0; k < ra->slots; k++)
		bm_free(slot[k]);
	free(slot);
	return NULL;
}

static void small_batch(void)
{
	enum { N = 100000, ROUNDS = 60 };
	void **p = calloc(N, sizeof(void *));
	uint64_t s = 11;

	for (int r = 0; r < ROUNDS / (int)work_div + 1; r++) {
		for (int i = 0; i < N; i++) {
			size_t size = size_small(&s);

			p[i] = bm_malloc(size);
			touch(p[i], size, (uint64_t)i);
		}
		for (int i = 0; i < N; i++)
			bm_free(p[i]);
	}
	free(p);
}

/* Producer/consumer: a single-producer single-consumer ring of pointers. */
#define RING 4096
static void *ring[RING];
static _Atomic unsigned long ring_head, ring_tail;
static unsigned long pc_total = 6000000;

static void *consumer(void *arg)
{
	unsigned long t = 0;

	(void)arg;
	while (t < pc_total) {
		unsigned long h = atomic_load_explicit(&ring_head, memory_order_acquire);

		if (h == t) {
			sched_yield();
			continue;
		}
		while (t < h) {
			bm_free(ring[t % RING]);
			t++;
		}
		atomic_store_explicit(&ring_tail, t, memory_order_release);
	}
	return NULL;
}

static void prodcons(void)
{
	pthread_t c;
	uint64_t s = 5;

	pc_total /= work_div;
	pthread_create(&c, NULL, consumer, NULL);
	for (unsigned long h = 0; h < pc_total; h++) {
		size_t size = 16 + rnd(&s) % 1009;
		void *p = bm_malloc(size);

		touch(p, size, h);
		while (h - atomic_load_explicit(&ring_tail, memory_order_acquire) >= RING)
			sched_yield();
		ring[h % RING] = p;
		if (h % 64 == 63 || h + 1 == pc_total)
			atomic_store_explicit(&ring_head, h + 1, memory_order_release);
	}
	pthread_join(c, NULL);
}

static void realloc_growth(void)
{
	enum { LIVE = 8, ROUNDS = 300 };
	uint64_t s = 3;

	for (int r = 0; r < ROUNDS / (int)work_div + 1; r++) {
		char *p[LIVE];
		size_t size[LIVE];

		/* a few strings grow side by side, as buffers of a parser do */
		for (int k = 0; k < LIVE; k++) {
			size[k] = 16;
			p[k] = bm_malloc(16);
			memset(p[k], 'a', 16);
		}
		for (int step = 0; step < 4000; step++) {
			int k = (int)(rnd(&s) % LIVE);
			size_t next = size[k] + 16 + rnd(&s) % 65;

			if (next > 256 * 1024)
				continue;
			p[k] = bm_realloc(p[k], next);
			p[k][next - 1] = 'z';
			size[k] = next;
		}
		for (int k = 0; k < LIVE; k++)
			bm_free(p[k]);
	}
}

/*
 * Buffers built up by appending, as a program reading a file or writing a
 * document into memory does: each step asks for an eighth more and writes
 * the new part.  Two grow side by side, so each may find the other in
 * its way.  Peak RSS shows whether old copies stay resident.
 */
static void realloc_big(void)
{
	enum { LIVE = 2, ROUNDS = 4 };
	const size_t max = (size_t)24 << 20;

	for (int r = 0; r < ROUNDS / (int)work_div + 1; r++) {
		char *p[LIVE] = { NULL };
		size_t size[LIVE] = { 0 };
		bool growing = true;

		while (growing) {
			growing = false;
			for (int k = 0; k < LIVE; k++) {
				size_t next = size[k] + size[k] / 8 + 4096;

				if (size[k] >= max)
					continue;
				p[k] = bm_realloc(p[k], next);
				if (!p[k]) {
					perror("realloc");
					exit(1);
				}
				memset(p[k] + size[k], r + k, next - size[k]);
				size[k] = next;
				growing = true;
			}
		}
		for (int k = 0; k < LIVE; k++)
			bm_free(p[k]);
	}
}

/*
 * large-odd: 300 live blocks of 1 MiB + 57 bytes (what a Python bytearray
 * of 1 MiB asks for), then 300 of 512 KiB + 57 bytes, every page written,
 * freed, a few rounds: sizes just above a power of two, where the pages a
 * large block does not use may become resident with it.  large-odd-2m:
 * the same with 100 blocks of 2 MiB + 57 bytes (an array of 2 MiB with a
 * header), then 100 of 3 MiB + 57, where the pages left are those of a
 * whole 2 MiB page.
 */
static void large_odd(int live, size_t size0, size_t size1)
{
	enum { ROUNDS = 3 };
	const size_t sizes[] = { size0, size1 };
	static void *p[300];

	for (int r = 0; r < ROUNDS / (int)work_div + 1; r++) {
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			for (int i = 0; i < live; i++) {
				p[i] = bm_malloc(sizes[k]);
				if (!p[i]) {
					perror("malloc");
					exit(1);
				}
				touch(p[i], sizes[k], (uint64_t)(r + i));
			}
			for (int i = 0; i < live; i++)
				bm_free(p[i]);
		}
	}
}

/*
 * large-holes: 512 live blocks of 1 MiB, every page written, every fourth
 * freed, so that every other 2 MiB of the heap holds a hole of 1 MiB; then
 * blocks of 1 MiB + 57 bytes allocated and freed one at a time, the first
 * page of each written.  No hole holds such a block and no free memory
 * lies next to a hole, so ucma looks for room in a heap full of holes
 * that are all too small.  The first writes of the 512 MiB weigh on every
 * allocator's time (on 4 KiB pages most of it), so the case compares
 * ucma's builds with each other rather than with the other allocators.
 */
static void large_holes(void)
{
	enum { LIVE = 512 };
	static void *p[LIVE];
	unsigned long ops = 100000 / work_div;

	for (int i = 0; i < LIVE; i++) {
		p[i] = bm_malloc((size_t)1 << 20);
		if (!p[i]) {
			perror("malloc");
			exit(1);
		}
		touch(p[i], (size_t)1 << 20, (uint64_t)i);
	}
	for (int i = 0; i < LIVE; i += 4) {
		bm_free(p[i]);
		p[i] = NULL;
	}
	for (unsigned long k = 0; k < ops; k++) {
		char *q = bm_malloc(((size_t)1 << 20) + 57);

		if (!q) {
			perror("malloc");
			exit(1);
		}
		*(volatile char *)q = (char)k;
		bm_free(q);
	}
	for (int i = 0; i < LIVE; i++)
		bm_free(p[i]);
}

/* ------------------------------------------------------------------------ */
/* simple: batches of one size                                               */
/* ------------------------------------------------------------------------ */

static void simple(void)
{
	static const unsigned counts[] = { 25, 100, 400, 1600 };
	static const size_t sizes[] = { 16, 32, 48, 64, 96, 128, 192, 256 };
	static void *a[1600];
	unsigned long total = 24000000 / work_div;

	for (unsigned ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		unsigned n = counts[ci];

		for (unsigned si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			unsigned long rounds = total / 32 / n;

			for (unsigned long r = 0; r < rounds; r++) {
				for (unsigned j = 0; j < n; j++) {
					a[j] = bm_malloc(sizes[si]);
					*(volatile uint64_t *)a[j] = j;
				}
				for (unsigned j = 0; j < n; j++)
					bm_free(a[j]);
			}
		}
	}
}

/* ------------------------------------------------------------------------ */
/* thread: glibc-bench's random working set, two threads                     */
/* ------------------------------------------------------------------------ */

/* 16 B - 32 KiB, probability falling as 1/size (each doubling equally
 * likely, as glibc-bench draws them). */
static size_t size_thread(uint64_t *s)
{
	uint64_t r = rnd(s);
	unsigned lg = 4 + (unsigned)(r % 11);	/* 16 B .. 16 KiB, doubled */
	size_t base = (size_t)1 << lg;

	return base + (r >> 8) % base;
}

/* ------------------------------------------------------------------------ */
/* larson: a server's threads hand their blocks on                           */
/* ------------------------------------------------------------------------ */

#define LARSON_THREADS 2
#define LARSON_BLOCKS  4000		/* per thread */
#define LARSON_OPS     8000		/* replacements per thread lifetime */

struct larson_share {
	void *blk[LARSON_BLOCKS];
	uint64_t seed;
	_Atomic unsigned long lives_left;	/* 0: the last thread finished */
};

static void *larson_thread(void *arg)
{
	struct larson_share *sh = arg;
	pthread_t next;

	for (unsigned long i = 0; i < LARSON_OPS; i++) {
		uint64_t r = rnd(&sh->seed);
		unsigned k = (unsigned)(r % LARSON_BLOCKS);
		size_t size = 10 + (r >> 32) % 991;

		bm_free(sh->blk[k]);
		sh->blk[k] = bm_malloc(size);
		*(volatile char *)sh->blk[k] = (char)r;
	}
	/* Hand the blocks on to a successor and exit: it frees what this
	 * thread allocated, after this thread is gone. */
	if (atomic_fetch_sub_explicit(&sh->lives_left, 1, memory_order_acq_rel) > 1) {
		pthread_create(&next, NULL, larson_thread, sh);
		pthread_detach(next);
	}
	return NULL;
}

static void larson(void)
{
	static struct larson_share share[LARSON_THREADS];
	pthread_t t[LARSON_THREADS];
	unsigned long lives = 375 / work_div + 1;

	for (int i = 0; i < LARSON_THREADS; i++) {
		uint64_t s = 17 + (uint64_t)i;

		share[i].seed = s;
		atomic_store_explicit(&share[i].lives_left, lives, memory_order_relaxed);
		for (int k = 0; k < LARSON_BLOCKS; k++) {
			share[i].blk[k] = bm_malloc(10 + rnd(&s) % 991);
			*(volatile char *)share[i].blk[k] = 1;
		}
	}
	/* Only the first generation can be joined: the others detach. */
	for (int i = 0; i < LARSON_THREADS; i++)
		pthread_create(&t[i], NULL, larson_thread, &share[i]);
	for (int i = 0; i < LARSON_THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < LARSON_THREADS; i++)
		while (atomic_load_explicit(&share[i].lives_left, memory_order_acquire) > 0)
			usleep(100);
	for (int i = 0; i < LARSON_THREADS; i++)
		for (int k = 0; k < LARSON_BLOCKS; k++)
			bm_free(share[i].blk[k]);
}

/* ------------------------------------------------------------------------ */
/* burst: many threads allocate and free in bursts                           */
/* ------------------------------------------------------------------------ */

#define BURST_THREADS  16
#define BURST_ROUNDS   10
#define BURST_TRANSFER 4096

static void *_Atomic burst_transfer[BURST_TRANSFER];

/* Mostly small; one in 100 up to 64 KiB. */
static size_t size_burst(uint64_t *s)
{
	uint64_t r = rnd(s);

	if (r % 100 == 0)
		return 4096 + (r >> 8) % (60 * 1024);
	if (r % 10 == 0)
		return 256 + (r >> 8) % 3840;
	return 16 + (r >> 8) % 240;
}

static void *burst_thread(void *arg)
{
	uint64_t s = (uint64_t)(uintptr_t)arg;
	unsigned iters = 40 / (unsigned)work_div + 1;
	void **v = bm_malloc(2000 * sizeof(void *));

	for (unsigned it = 0; it < iters; it++) {
		unsigned n = 500 + (unsigned)(rnd(&s) % 1500);

		for (unsigned i = 0; i < n; i++) {
			size_t size = size_burst(&s);

			v[i] = bm_malloc(size);
			touch(v[i], size, i);
		}
		for (unsigned i = 0; i < n; i++) {
			uint64_t r = rnd(&s);

			/* one block in 8 goes to whichever thread next takes
			 * its slot of the transfer array */
			if (r % 8 == 0)
				v[i] = atomic_exchange_explicit(&burst_transfer[(r >> 8) % BURST_TRANSFER],
								v[i], memory_order_acq_rel);
			bm_free(v[i]);
		}
	}
	bm_free(v);
	return NULL;
}

static void burst(void)
{
	pthread_t t[BURST_THREADS];

	for (unsigned r = 0; r < BURST_ROUNDS; r++) {
		for (uintptr_t i = 0; i < BURST_THREADS; i++)
			pthread_create(&t[i], NULL, burst_thread, (void *)(r * 100 + i + 1));
		for (int i = 0; i < BURST_THREADS; i++)
			pthread_join(t[i], NULL);
	}
	for (int i = 0; i < BURST_TRANSFER; i++)
		bm_free(atomic_load_explicit(&burst_transfer[i], memory_order_relaxed));
}

static void two_threads(struct replace_args *ra)
{
	pthread_t t[2];
	struct replace_args a[2] = { *ra, *ra };

	a[1].seed = ra->seed * 7 + 1;
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, replace, &a[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
}

int main(int argc, char **argv)
{
	struct replace_args small = { size_small, 10000, 20000000, 1 };
	struct replace_args mixed = { size_mixed, 10000, 8000000, 2 };
	struct replace_args large = { size_large, 1000, 1500000, 3 };
	struct replace_args past = { size_past, 1000, 400000, 4 };
	struct rusage ru;
	const char *c;
	double t0, t1;
	bool direct;
	int i = 1;

	direct = i < argc && strcmp(argv[i], "--ucma") == 0;
	i += direct;
#ifdef BENCH_MALLOC_UCMA
	if (!direct) {
		fprintf(stderr, "%s: calls ucma_malloc() and friends only: give --ucma; "
				"bench_malloc calls malloc()\n", argv[0]);
		return 2;
	}
#else
	if (direct) {
		fprintf(stderr, "%s: --ucma: this program links nothing of ucma; "
				"bench_malloc_ucma calls it directly\n", argv[0]);
		return 2;
	}
#endif
	if (i >= argc) {
		fprintf(stderr, "usage: %s [--ucma] small|small-batch|mixed|large|prodcons|"
				"realloc|realloc-big|large-odd|large-odd-2m|large-holes|past-arena|mt-small|mt-mixed|simple|thread|larson|burst\n", argv[0]);
		return 2;
	}
	c = argv[i];
	/* BENCH_MALLOC_DIV=n runs 1/n of the work (for callgrind and friends) */
	if (getenv("BENCH_MALLOC_DIV") && atol(getenv("BENCH_MALLOC_DIV")) > 1) {
		work_div = (unsigned long)atol(getenv("BENCH_MALLOC_DIV"));
		small.ops /= work_div;
		mixed.ops /= work_div;
		large.ops /= work_div;
		past.ops /= work_div;
	}
	t0 = now_ms();
	if (strcmp(c, "small") == 0) {
		replace(&small);
	} else if (strcmp(c, "small-batch") == 0) {
		small_batch();
	} else if (strcmp(c, "mixed") == 0) {
		replace(&mixed);
	} else if (strcmp(c, "large") == 0) {
		replace(&large);
	} else if (strcmp(c, "prodcons") == 0) {
		prodcons();
	} else if (strcmp(c, "realloc") == 0) {
		realloc_growth();
	} else if (strcmp(c, "large-odd") == 0) {
		large_odd(300, ((size_t)1 << 20) + 57, ((size_t)512 << 10) + 57);
	} else if (strcmp(c, "large-odd-2m") == 0) {
		large_odd(100, ((size_t)2 << 20) + 57, ((size_t)3 << 20) + 57);
	} else if (strcmp(c, "large-holes") == 0) {
		large_holes();
	} else if (strcmp(c, "past-arena") == 0) {
		replace(&past);
	} else if (strcmp(c, "realloc-big") == 0) {
		realloc_big();
	} else if (strcmp(c, "mt-small") == 0) {
		small.ops /= 2;
		two_threads(&small);
	} else if (strcmp(c, "mt-mixed") == 0) {
		mixed.ops /= 2;
		two_threads(&mixed);
	} else if (strcmp(c, "simple") == 0) {
		simple();
	} else if (strcmp(c, "thread") == 0) {
		struct replace_args th = { size_thread, 1024, 4000000 / work_div, 9 };

		two_threads(&th);
	} else if (strcmp(c, "larson") == 0) {
		larson();
	} else if (strcmp(c, "burst") == 0) {
		burst();
	} else {
		fprintf(stderr, "unknown case %s\n", c);
		return 2;
	}
	t1 = now_ms();
	getrusage(RUSAGE_SELF, &ru);
	printf("%s %.1f %ld %.1f\n", c, t1 - t0, ru.ru_maxrss,
	       (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
		       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3);
	return 0;
}
