/*
 * bench_trim.c - what a trim of a fragmented heap costs the thread that
 * asks for it and the threads that go on allocating meanwhile.
 *
 * The heap: NBLOCKS blocks of 40 KiB (page runs in ucma, chunks of the
 * main heap in glibc: below its mmap threshold), every byte written, then
 * every other one freed: NBLOCKS / 2 dirty free holes that no neighbour
 * merges with, one madvise(MADV_DONTNEED) each.  Then, for each of
 * ucma (ucma_trim()) and glibc (malloc_trim(0)), in this one process:
 *
 *   alone    the trim with no other thread running;
 *   busy     the trim while a second thread allocates, writes the first
 *            word of and frees 300 KiB blocks in a loop: the trim's time,
 *            the second thread's worst and 99th percentile malloc+free,
 *            and how many it did during the trim.
 *
 * Environment: UCMA_BENCH_BLOCKS (NBLOCKS, default 16384).  ucma runs with
 * a 2 GiB arena, so that the heap is in its NORMAL zone.
 *
 * `bench_trim decay` (UCMA_DECAY_MS=200 in the environment): the decay's
 * pass instead of a trim.  NBLOCKS / 2 blocks of 128 KiB + 1 byte in a
 * NORMAL zone on plain pages (so that the decay gives back blocks from
 * 64 KiB up, not only whole pageblocks; each hole holds at least one),
 * every other one freed; a second thread allocates 300 KiB blocks (and
 * frees none: it never runs the decay itself); after two decay ticks, the
 * free() that starts the pass, the frees after it that go on with it
 * (until 256 in a row give nothing back), and the other thread's worst
 * malloc.
 *
 * SPDX-License-Identifier: MIT
 */
#include <ucma.h>

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (40u << 10)
#define OTHER (300u << 10)
#define MAX_SAMPLES (1u << 20)

struct heap_ops {
	const char *name;
	void *(*alloc)(size_t);
	void (*free)(void *);
	int (*trim)(void);
};

static int glibc_trim(void)
{
	return malloc_trim(0);
}

static const struct heap_ops ucma_ops = { "ucma", ucma_malloc, ucma_free, ucma_trim };
static const struct heap_ops glibc_ops = { "glibc", malloc, free, glibc_trim };

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The second thread's state for one busy run. */
static struct {
	const struct heap_ops *ops;
	atomic_int phase;		/* 0: wait, 1: run, 2: stop */
	atomic_int running;		/* set once it loops */
	float *lat;			/* ms per malloc+free during the trim */
	unsigned n;
} other;

static void *other_thread(void *arg)
{
	(void)arg;
	while (atomic_load(&other.phase) == 0)
		;
	atomic_store(&other.running, 1);
	while (atomic_load(&other.phase) == 1) {
		double t0 = now_ms();
		char *p = other.ops->alloc(OTHER);

		if (p)
			*(volatile char *)p = 1;
		other.ops->free(p);
		if (other.n < MAX_SAMPLES)
			other.lat[other.n++] = (float)(now_ms() - t0);
	}
	return NULL;
}

static int cmp_float(const void *x, const void *y)
{
	float a = *(const float *)x, b = *(const float *)y;

	return (a > b) - (a < b);
}

/* Build the fragmented heap; the blocks still live are returned in @keep. */
static void fragment(const struct heap_ops *ops, void **keep, unsigned nblocks)
{
	for (unsigned i = 0; i < nblocks; i++) {
		keep[i] = ops->alloc(BLOCK);
		if (!keep[i]) {
			fprintf(stderr, "bench_trim: %s: malloc failed\n", ops->name);
			exit(1);
		}
		memset(keep[i], 0x5a, BLOCK);
	}
	for (unsigned i = 0; i < nblocks; i += 2) {
		ops->free(keep[i]);
		keep[i] = NULL;
	}
}

static void release(const struct heap_ops *ops, void **keep, unsigned nblocks)
{
	for (unsigned i = 0; i < nblocks; i++)
		ops->free(keep[i]);
	ops->trim();
}

static double trim_alone(const struct heap_ops *ops, void **keep, unsigned nblocks)
{
	double t0, t;

	fragment(ops, keep, nblocks);
	t0 = now_ms();
	ops->trim();
	t = now_ms() - t0;
	release(ops, keep, nblocks);
	return t;
}

static void trim_busy(const struct heap_ops *ops, void **keep, unsigned nblocks, double *t,
		      double *worst, double *p99, unsigned *n)
{
	pthread_t th;
	double t0;

	fragment(ops, keep, nblocks);
	other.ops = ops;
	other.n = 0;
	atomic_store(&other.running, 0);
	atomic_store(&other.phase, 0);
	if (pthread_create(&th, NULL, other_thread, NULL) != 0) {
		fprintf(stderr, "bench_trim: pthread_create failed\n");
		exit(1);
	}
	atomic_store(&other.phase, 1);
	while (!atomic_load(&other.running))
		;
	usleep(20000);		/* warm: its block is allocated and freed */
	other.n = 0;		/* (a race with its store: a sample or two) */
	t0 = now_ms();
	ops->trim();
	*t = now_ms() - t0;
	atomic_store(&other.phase, 2);
	pthread_join(th, NULL);
	*n = other.n;
	qsort(other.lat, other.n, sizeof(float), cmp_float);
	*worst = other.n ? other.lat[other.n - 1] : 0;
	*p99 = other.n ? other.lat[(size_t)other.n * 99 / 100] : 0;
	release(ops, keep, nblocks);
}

static uint64_t purged_pages(void)
{
	uint64_t v = 0;

	ucma_stat("purged_pages", &v);
	return v;
}

static atomic_int decay_go, decay_done;
static double decay_worst;
static unsigned decay_ops;

static void *decay_other(void *arg)
{
	(void)arg;
	while (!atomic_load(&decay_go))
		;
	while (!atomic_load(&decay_done) && decay_ops < 3000) {
		double t0 = now_ms();
		char *p = ucma_malloc(OTHER);
		double d = now_ms() - t0;

		if (p)
			*(volatile char *)p = 1;
		if (d > decay_worst)
			decay_worst = d;
		decay_ops++;
		usleep(100);
	}
	return NULL;
}

static int decay_case(unsigned nblocks)
{
	struct ucma_config cfg = { .arena_size = (size_t)4 << 30,
				   .hugepages_normal = UCMA_BACKING_NONE };
	void **b = calloc(nblocks, sizeof(void *));
	double t0, first, rest = 0, worst_free = 0;
	uint64_t before, after_first;
	unsigned frees = 0, idle = 0;
	size_t size = (128u << 10) + 1;
	pthread_t th;

	nblocks /= 2;
	if (!b || ucma_init(&cfg) != 0) {
		perror("bench_trim: ucma_init");
		return 1;
	}
	for (unsigned i = 0; i < nblocks; i++) {
		b[i] = ucma_malloc(size);
		if (!b[i]) {
			fprintf(stderr, "bench_trim: malloc failed\n");
			return 1;
		}
		memset(b[i], 0x5a, size);
	}
	for (unsigned i = 0; i < nblocks; i += 2)
		ucma_free(b[i]);
	if (pthread_create(&th, NULL, decay_other, NULL) != 0)
		return 1;
	/* The first tick starts the epoch the holes are older than. */
	usleep(300000);
	ucma_free(b[1]);
	usleep(300000);
	atomic_store(&decay_go, 1);
	usleep(10000);
	before = purged_pages();
	t0 = now_ms();
	ucma_free(b[3]);
	first = now_ms() - t0;
	after_first = purged_pages();
	/* The frees after it go on with the pass. */
	for (unsigned i = 5; i < nblocks && idle < 256; i += 2) {
		uint64_t p0 = purged_pages();
		double d;

		t0 = now_ms();
		ucma_free(b[i]);
		d = now_ms() - t0;
		if (purged_pages() == p0) {
			idle++;
			continue;
		}
		idle = 0;
		rest += d;
		if (d > worst_free)
			worst_free = d;
		frees++;
	}
	atomic_store(&decay_done, 1);
	pthread_join(th, NULL);
	printf("decay's pass over %u dirty 128 KiB holes (UCMA_DECAY_MS=%s)\n", nblocks / 2,
	       getenv("UCMA_DECAY_MS") ? getenv("UCMA_DECAY_MS") : "default");
	printf("  the free() that starts it: %.2f ms, %llu pages given back\n", first,
	       (unsigned long long)(after_first - before));
	printf("  %u more frees gave back pages: %.2f ms in all, worst %.2f ms; %llu pages in all\n",
	       frees, rest, worst_free, (unsigned long long)(purged_pages() - before));
	printf("  other thread: worst malloc(300 KiB) %.2f ms over %u\n", decay_worst, decay_ops);
	return 0;
}

int main(int argc, char **argv)
{
	const struct heap_ops *impls[] = { &ucma_ops, &glibc_ops };
	struct ucma_config cfg = { .arena_size = (size_t)2 << 30 };
	const char *e = getenv("UCMA_BENCH_BLOCKS");
	unsigned nblocks = e ? (unsigned)strtoul(e, NULL, 10) : 16384;
	double alone[2], busy[2], worst[2], p99[2];
	unsigned n[2];
	void **keep;

	if (nblocks < 8 || nblocks > (1u << 20)) {
		fprintf(stderr, "bench_trim: UCMA_BENCH_BLOCKS must be 8 to 1048576\n");
		return 2;
	}
	if (argc > 1 && strcmp(argv[1], "decay") == 0)
		return decay_case(nblocks);
	if (ucma_init(&cfg) != 0) {
		perror("bench_trim: ucma_init");
		return 1;
	}
	keep = calloc(nblocks, sizeof(void *));
	other.lat = malloc(MAX_SAMPLES * sizeof(float));
	if (!keep || !other.lat)
		return 1;
	printf("trim of %u dirty 40 KiB holes (%u blocks, every other freed)\n", nblocks / 2,
	       nblocks);
	printf("%-6s %10s %10s %12s %12s %10s\n", "", "alone ms", "busy ms", "worst op ms",
	       "p99 op ms", "ops");
	for (int i = 0; i < 2; i++) {
		alone[i] = trim_alone(impls[i], keep, nblocks);
		trim_busy(impls[i], keep, nblocks, &busy[i], &worst[i], &p99[i], &n[i]);
		printf("%-6s %10.2f %10.2f %12.3f %12.3f %10u\n", impls[i]->name, alone[i], busy[i],
		       worst[i], p99[i], n[i]);
	}
	printf("ucma / glibc: alone %.2f, busy %.2f, worst concurrent op %.3f\n",
	       alone[0] / alone[1], busy[0] / busy[1], worst[1] > 0 ? worst[0] / worst[1] : 0);
	free(other.lat);
	free(keep);
	return 0;
}
