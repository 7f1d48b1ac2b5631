/*
 * bench_malloc.c - one case of the malloc benchmark, in one process.
 *
 *   bench_malloc [--ucma] CASE
 *
 * Runs the workload CASE and prints one line "CASE ms maxrss_kib cpu_ms"
 * (wall time of the workload, peak RSS, CPU time of the process).  By
 * default it calls malloc/free/realloc, which are glibc's, or jemalloc's
 * or ucma's when the driver (malloc.sh) preloads them; with --ucma it calls
 * ucma_malloc() and friends directly.  Either way the calls go through
 * function pointers, so every allocator pays the same call overhead.
 *
 * The cases (each small enough to run in about a second):
 *   small      random replacement in 10000 slots, 16-64 bytes
 *   small-batch  allocate 100000 blocks of 16-64 bytes, free them in order
 *   mixed      random replacement in 10000 slots, 16 bytes - 4 KiB
 *   large      random replacement in 1000 slots, 4 - 64 KiB
 *   prodcons   one thread allocates 16 - 1024 bytes, another frees them
 *   realloc    strings grown by realloc in steps of 16 - 80 bytes to 256 KiB
 *   mt-small   the small case in two threads at once
 *   mt-mixed   the mixed case in two threads at once
 * Every block is written (its first 64 bytes and one byte per page), so
 * the resident set reflects what a program touching its memory would see.
 * BENCH_MALLOC_DIV=n in the environment runs 1/n of the work (for
 * valgrind --tool=callgrind).
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ucma.h"

static unsigned long work_div = 1;	/* BENCH_MALLOC_DIV */

static void *(*bm_malloc)(size_t) = malloc;
static void (*bm_free)(void *) = free;
static void *(*bm_realloc)(void *, size_t) = realloc;

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

/* Write the block as a program would: its head and every page. */
static void touch(void *p, size_t size, uint64_t v)
{
	char *c = p;

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
	struct rusage ru;
	const char *c;
	double t0, t1;
	int i = 1;

	if (i < argc && strcmp(argv[i], "--ucma") == 0) {
		bm_malloc = ucma_malloc;
		bm_free = ucma_free;
		bm_realloc = ucma_realloc;
		i++;
	}
	if (i >= argc) {
		fprintf(stderr, "usage: %s [--ucma] small|small-batch|mixed|large|prodcons|"
				"realloc|mt-small|mt-mixed\n", argv[0]);
		return 2;
	}
	c = argv[i];
	/* BENCH_MALLOC_DIV=n runs 1/n of the work (for callgrind and friends) */
	if (getenv("BENCH_MALLOC_DIV") && atol(getenv("BENCH_MALLOC_DIV")) > 1) {
		work_div = (unsigned long)atol(getenv("BENCH_MALLOC_DIV"));
		small.ops /= work_div;
		mixed.ops /= work_div;
		large.ops /= work_div;
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
	} else if (strcmp(c, "mt-small") == 0) {
		small.ops /= 2;
		two_threads(&small);
	} else if (strcmp(c, "mt-mixed") == 0) {
		mixed.ops /= 2;
		two_threads(&mixed);
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
