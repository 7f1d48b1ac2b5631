/*
 * heap_lend_workload.c - the unmodified program of the heap-lending
 * benchmark (heap_lend.sh): it knows nothing of ucma, is linked against
 * nothing of it, and only calls malloc and free.
 *
 * Phase 1 builds a heap of HL_HEAP_MB MiB in blocks of 512 KiB to 4 MiB,
 * every page stamped, and churns it (frees a quarter, allocates again)
 * for HL_PASSES passes (40): its time is the run time.  Then, with the heap live,
 * HL_ROUNDS times: churn a little (so the heap breaks into fresh
 * pageblocks again and may borrow CMA frames), malloc(HL_CMA_MB MiB) and
 * time it.  Under libucma-preload.so with UCMA_PRELOAD_CONTIG_MIN at that
 * size this malloc is ucma_alloc() of the whole CMA area, which must take
 * back every frame lent to the heap.  The same run times memcpy() of as
 * many bytes as were taken back, between two prefaulted mappings, for
 * the ratio (rounds that copied at least 8 MiB: the heap borrows again
 * only when it breaks into fresh pageblocks, so usually the first), and
 * again into a destination written once before the timed copy.  At the end every stamp is checked.
 *
 * What the allocator did is read through ucma_stat() when the preloaded
 * library provides it (dlsym: the program still links nothing of ucma).
 * Prints one line of key=value pairs.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define PAGE ((size_t)4096)
#define MAXBLOCKS 4096
#define MAXROUNDS 256

struct block {
	uint64_t *p;
	size_t size;
	uint64_t seed;
};

static struct block blocks[MAXBLOCKS];
static int nblocks;
static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int (*stat_fn)(const char *, uint64_t *);

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	return stat_fn && stat_fn(name, &v) == 0 ? v : 0;
}

/* One word per page: enough to see a page that was lost or mixed up. */
static void stamp(struct block *b)
{
	for (size_t off = 0; off < b->size; off += PAGE)
		b->p[off / 8] = b->seed ^ off;
}

static bool stamped(const struct block *b)
{
	for (size_t off = 0; off < b->size; off += PAGE)
		if (b->p[off / 8] != (b->seed ^ off))
			return false;
	return true;
}

static bool block_new(struct block *b)
{
	b->size = (512 * KiB + next_rand() % (7 * 512 * KiB)) & ~(PAGE - 1);
	b->p = malloc(b->size);
	b->seed = next_rand();
	if (!b->p)
		return false;
	memset(b->p, 0x5a, b->size);	/* the heap is really used */
	stamp(b);
	return true;
}

/* Free every @k-th block and allocate it again. */
static bool churn(int k)
{
	for (int i = (int)(next_rand() % (unsigned)k); i < nblocks; i += k) {
		free(blocks[i].p);
		if (!block_new(&blocks[i]))
			return false;
	}
	return true;
}

static long status_kb(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t n = strlen(key);

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/* Seconds to memcpy @bytes between two prefaulted private mappings;
 * @written: the destination written once before (a virtual machine that
 * shadows page tables makes the first touch of a prefaulted page cost a
 * fault of its own). */
static double memcpy_time(size_t bytes, bool written)
{
	char *src, *dst;
	double t;

	if (!bytes)
		return 0;
	src = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		   -1, 0);
	dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
		   -1, 0);
	if (src == MAP_FAILED || dst == MAP_FAILED)
		return -1;
	memset(src, 1, bytes);
	if (written)
		memset(dst, 2, bytes);
	t = now();
	memcpy(dst, src, bytes);
	t = now() - t;
	munmap(src, bytes);
	munmap(dst, bytes);
	return t;
}

int main(void)
{
	size_t heap = (size_t)strtoull(getenv("HL_HEAP_MB") ? getenv("HL_HEAP_MB") : "192", NULL,
				       10) * MiB;
	size_t cma = (size_t)strtoull(getenv("HL_CMA_MB") ? getenv("HL_CMA_MB") : "128", NULL, 10) *
		     MiB;
	int rounds = atoi(getenv("HL_ROUNDS") ? getenv("HL_ROUNDS") : "20");
	int passes = atoi(getenv("HL_PASSES") ? getenv("HL_PASSES") : "40");
	double lat[MAXROUNDS], t_run, t_copy, t_warm, copy_ratio_sum = 0, warm_ratio_sum = 0;
	double take_back_sum = 0, copy_sum = 0, warm_sum = 0;
	size_t live = 0, (*alloc_size)(const void *);
	uint64_t lent_peak = 0, copied0, copied;
	int ok_rounds = 0, ratio_rounds = 0;
	bool intact = true;
	long anon, shmem;

	stat_fn = (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "ucma_stat");
	alloc_size = (size_t (*)(const void *))dlsym(RTLD_DEFAULT, "ucma_alloc_size");
	if (rounds > MAXROUNDS)
		rounds = MAXROUNDS;

	t_run = now();
	while (live < heap && nblocks < MAXBLOCKS) {
		if (!block_new(&blocks[nblocks]))
			break;
		live += blocks[nblocks++].size;
	}
	for (int pass = 0; pass < passes; pass++)
		churn(4);
	t_run = now() - t_run;
	lent_peak = stat_of("lend_heap_pageblocks");
	anon = status_kb("RssAnon");
	shmem = status_kb("RssShmem");

	copied0 = stat_of("lend_heap_bytes_copied");
	for (int r = 0; r < rounds; r++) {
		uint64_t lent_now, before = stat_of("lend_heap_bytes_copied");
		void *p;
		double t;

		churn(8);
		lent_now = stat_of("lend_heap_pageblocks");
		lent_peak = lent_now > lent_peak ? lent_now : lent_peak;
		t = now();
		p = malloc(cma);
		lat[r] = now() - t;
		ok_rounds += p && alloc_size && alloc_size(p) >= cma;
		if (p) {
			uint64_t bytes = stat_of("lend_heap_bytes_copied") - before;

			if (bytes >= 8 * MiB) {
				t_copy = memcpy_time(bytes, false);
				t_warm = memcpy_time(bytes, true);
				if (t_copy > 0 && t_warm > 0) {
					copy_ratio_sum += lat[r] / t_copy;
					warm_ratio_sum += lat[r] / t_warm;
					take_back_sum += lat[r];
					copy_sum += t_copy;
					warm_sum += t_warm;
					ratio_rounds++;
				}
			}
		}
		free(p);
	}
	copied = stat_of("lend_heap_bytes_copied") - copied0;
	qsort(lat, (size_t)rounds, sizeof(lat[0]), cmp_double);
	for (int i = 0; i < nblocks; i++)
		intact &= stamped(&blocks[i]);

	printf("run_s=%.3f heap_mib=%zu lent_peak_mib=%llu rss_anon_mib=%ld rss_shmem_mib=%ld "
	       "contig_ok=%d/%d contig_p50_ms=%.2f contig_p99_ms=%.2f copied_mib=%llu "
	       "take_backs=%d take_back_ms=%.1f memcpy_ms=%.1f memcpy_written_ms=%.1f "
	       "take_back_vs_memcpy=%.2f take_back_vs_memcpy_written=%.2f migrated=%llu "
	       "migrate_fail=%llu unprefaulted=%llu returned=%llu stall_p50_us=%.0f stall_p99_us=%.0f intact=%s\n",
	       t_run, live / MiB, (unsigned long long)(lent_peak * 2), anon / 1024, shmem / 1024,
	       ok_rounds, rounds, rounds ? lat[rounds / 2] * 1e3 : 0,
	       rounds ? lat[(rounds * 99) / 100] * 1e3 : 0,
	       (unsigned long long)(copied / MiB), ratio_rounds,
	       ratio_rounds ? take_back_sum / ratio_rounds * 1e3 : 0,
	       ratio_rounds ? copy_sum / ratio_rounds * 1e3 : 0,
	       ratio_rounds ? warm_sum / ratio_rounds * 1e3 : 0,
	       ratio_rounds ? copy_ratio_sum / ratio_rounds : 0,
	       ratio_rounds ? warm_ratio_sum / ratio_rounds : 0,
	       (unsigned long long)stat_of("lend_heap_migrated"),
	       (unsigned long long)stat_of("lend_heap_migrate_fail"),
	       (unsigned long long)stat_of("lend_heap_unprefaulted"),
	       (unsigned long long)stat_of("lend_heap_returned"),
	       (double)stat_of("lend_heap_stall_p50_ns") / 1e3,
	       (double)stat_of("lend_heap_stall_p99_ns") / 1e3, intact ? "yes" : "NO");
	for (int i = 0; i < nblocks; i++)
		free(blocks[i].p);
	return intact ? 0 : 1;
}
