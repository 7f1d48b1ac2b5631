/*
 * bench_frag.c - DPDK's fragmentation workload against ucma: how much of
 * what the free memory could hold can be had as large contiguous buffers?
 *
 * The workload (as the DPDK memory fragmentation measurement does with
 * rte_malloc): buffers of 16 to 512 KiB (uniform, whole pages) fill 80%
 * of a 512 MiB CMA area; each is a movable object (ucma_halloc) or a
 * contiguous buffer (ucma_alloc) at random (30% contiguous by default).
 * Then 60% of them, chosen at random, are freed.  From that state, as many
 * 2, 8 and 32 MiB contiguous buffers as possible are taken, each size in
 * a fresh process that rebuilds the same state (same seed), in four modes:
 *
 *   static        UCMA_ALLOC_NOWAIT: only runs that are already free, as an
 *                 allocator that cannot move anything (DPDK, IOVA as VA);
 *   lending       plain ucma_alloc(): the area was lent to the movable
 *                 objects, which are migrated out of each run taken;
 *   phys static   UCMA_ALLOC_PHYS_CONTIG | UCMA_ALLOC_NOWAIT (DPDK, IOVA
 *                 as PA: physically contiguous, nothing moved);
 *   phys lending  UCMA_ALLOC_PHYS_CONTIG with migration.
 * The physical modes need root and hugetlb frames in physical order; they
 * are reported as skipped otherwise.
 *
 * "What the free memory could hold" (the denominator) is computed from
 * the state before the buffers are taken: a buffer must lie in a gap
 * between the contiguous buffers left (they cannot move), and in one
 * physical run of frames for the physical modes, and all of them together
 * cannot exceed the free memory of the arena (the movable data has to go
 * somewhere: the CMA area or the NORMAL zone):
 *   capacity = min(sum over gaps of floor(gap / size), floor(free / size)).
 *
 * Also printed: the time ucma_init() spends reading, sorting and mapping
 * the frames of the 512 MiB area, and the longest physically contiguous
 * run of frames it found.
 *
 * Environment: UCMA_BENCH_FRAG_CMA_MB (512), UCMA_BENCH_FRAG_NORMAL_MB
 * (32), UCMA_BENCH_FRAG_CONTIG_PCT (30), UCMA_BENCH_FRAG_SEED (1).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)
#define MAXBUF 16384
#define MAXTAKEN 1024

enum mode { M_STATIC, M_LENDING, M_PHYS_STATIC, M_PHYS_LENDING, NR_MODES };
static const char *const mode_name[NR_MODES] = { "static", "lending", "phys static",
						  "phys lending" };
static const unsigned mode_flags[NR_MODES] = {
	UCMA_ALLOC_NOWAIT, 0, UCMA_ALLOC_PHYS_CONTIG | UCMA_ALLOC_NOWAIT, UCMA_ALLOC_PHYS_CONTIG
};
static const size_t sizes[] = { 2 * MiB, 8 * MiB, 32 * MiB };
#define NR_SIZES UCMA_ARRAY_SIZE(sizes)

static size_t cma_mb = 512, normal_mb = 32;
static unsigned contig_pct = 30;
static uint64_t seed0 = 1;
static bool hugetlb;

struct buf {
	char *contig;			/* a ucma_alloc() buffer, or NULL */
	ucma_handle_t h;		/* else a movable object */
	size_t size;
};

/* What one case (a mode and a size, in a process of its own) found. */
struct result {
	int done;
	int skipped;			/* no physical addresses here */
	unsigned got, capacity, gap_capacity, free_capacity;
	uint64_t free_bytes, live_contig, live_movable;
	uint64_t ns;			/* taking the buffers */
	uint64_t init_ns, sort_ns, run_max;
	int fail_errno;
	char backing[32];
};

static struct buf bufs[MAXBUF];
static unsigned nbufs;
static void *taken[MAXTAKEN];

static size_t env_size(const char *name, size_t dflt)
{
	const char *v = getenv(name);

	return v && *v ? (size_t)strtoull(v, NULL, 10) : dflt;
}

/* Fill 80% of the area, free 60% of the buffers at random. */
static int build_state(uint64_t *rng)
{
	size_t target = cma_mb * MiB * 8 / 10, filled = 0;

	nbufs = 0;
	while (filled < target && nbufs < MAXBUF) {
		struct buf *b = &bufs[nbufs];
		size_t pages = 4 + (size_t)(tu_rand(rng) % (128 - 4 + 1));	/* 16..512 KiB */

		b->size = pages * UCMA_PAGE_SIZE;
		b->contig = NULL;
		b->h = 0;
		if (tu_rand(rng) % 100 < contig_pct) {
			b->contig = ucma_alloc(b->size, 0, 0);
			if (!b->contig)
				return -1;
			b->contig[0] = 1;
		} else {
			char *p;

			b->h = ucma_halloc(b->size, 0);
			p = b->h ? ucma_pin(b->h, 0) : NULL;
			if (!p)
				return -1;
			p[0] = 1;
			p[b->size - 1] = 1;
			ucma_unpin(b->h);
		}
		filled += b->size;
		nbufs++;
	}
	/* Free 60% of them, chosen at random (a partial Fisher-Yates). */
	for (unsigned i = 0, nfree = nbufs * 6 / 10; i < nfree; i++) {
		unsigned j = i + (unsigned)(tu_rand(rng) % (nbufs - i));
		struct buf tmp = bufs[i];

		bufs[i] = bufs[j];
		bufs[j] = tmp;
		if (bufs[i].contig)
			ucma_release(bufs[i].contig);
		else
			ucma_hfree(bufs[i].h);
		bufs[i].contig = NULL;
		bufs[i].h = 0;
		bufs[i].size = 0;
	}
	/* Freed movable objects wait for readers: let their space count. */
	ucma_defer_drain();
	return 0;
}

static int cmp_ptr(const void *x, const void *y)
{
	const char *a = *(char *const *)x, *b = *(char *const *)y;

	return a < b ? -1 : a > b;
}

/* Blocks of @size that fit in [lo, hi), cut further where the physical
 * contiguity of the frames breaks when @phys. */
static unsigned fit(char *lo, char *hi, size_t size, bool phys)
{
	unsigned n = 0;

	if (!phys)
		return hi > lo ? (unsigned)((size_t)(hi - lo) / size) : 0;
	while (lo < hi) {
		uint64_t pa;
		size_t run;

		if (ucma_vtophys(lo, &pa, &run) != 0)
			return n;
		if (run > (size_t)(hi - lo))
			run = (size_t)(hi - lo);
		n += (unsigned)(run / size);
		lo += run;
	}
	return n;
}

/* The denominator: see the head comment. */
static void capacity(struct result *r, size_t size, bool phys)
{
	struct ucma_arena *a = ucma_arena_get();
	char *starts[MAXBUF], *lo = ucma_pfn_to_addr(a, a->areas[0].base_pfn);
	char *end = lo + ((size_t)a->areas[0].npages << UCMA_PAGE_SHIFT);
	unsigned n = 0, gaps = 0;
	uint64_t free_cma = 0, free_normal = 0;

	for (unsigned i = 0; i < nbufs; i++) {
		if (bufs[i].contig) {
			starts[n++] = bufs[i].contig;
			r->live_contig += bufs[i].size;
		} else if (bufs[i].h) {
			r->live_movable += bufs[i].size;
		}
	}
	qsort(starts, n, sizeof(*starts), cmp_ptr);
	for (unsigned i = 0; i < n; i++) {
		gaps += fit(lo, starts[i], size, phys);
		lo = starts[i] + ucma_alloc_size(starts[i]);
	}
	gaps += fit(lo, end, size, phys);
	ucma_stat("nr_free_pages_cma", &free_cma);
	ucma_stat("nr_free_pages_normal", &free_normal);
	r->free_bytes = (free_cma + free_normal) << UCMA_PAGE_SHIFT;
	r->gap_capacity = gaps;
	r->free_capacity = (unsigned)(r->free_bytes / size);
	r->capacity = gaps < r->free_capacity ? gaps : r->free_capacity;
}

static void run_case(int mode, size_t size, struct result *r)
{
	struct ucma_config cfg = {
		.arena_size = (cma_mb + normal_mb) * MiB,
		.cma_size = cma_mb * MiB,
		.hugepages = hugetlb ? UCMA_BACKING_HUGETLB_2M : UCMA_BACKING_AUTO,
		.hugepages_normal = UCMA_BACKING_NONE,
	};
	bool phys = mode == M_PHYS_STATIC || mode == M_PHYS_LENDING;
	uint64_t rng = seed0, t0, v = 0;

	memset(r, 0, sizeof(*r));
	t0 = tu_now_ns();
	if (ucma_init(&cfg) != 0) {
		r->fail_errno = errno;
		return;
	}
	r->init_ns = tu_now_ns() - t0;
	snprintf(r->backing, sizeof(r->backing), "%s", ucma_backing_name("cma"));
	ucma_stat("cma_default_frames_sort_ns", &r->sort_ns);
	ucma_stat("cma_default_phys_run_max", &r->run_max);
	ucma_stat("cma_default_file", &v);
	if (phys && (v != 2 || r->run_max == 0)) {
		r->skipped = 1;
		r->done = 1;
		return;
	}
	if (build_state(&rng) != 0) {
		r->fail_errno = errno;
		return;
	}
	capacity(r, size, phys);
	t0 = tu_now_ns();
	while (r->got < MAXTAKEN) {
		void *p = ucma_alloc(size, 0, mode_flags[mode]);

		if (!p) {
			r->fail_errno = errno;
			break;
		}
		taken[r->got++] = p;
	}
	r->ns = tu_now_ns() - t0;
	r->done = 1;
}

int main(void)
{
	struct result res[NR_MODES][NR_SIZES];
	char why[256] = "not root";
	long pages;

	cma_mb = env_size("UCMA_BENCH_FRAG_CMA_MB", cma_mb);
	normal_mb = env_size("UCMA_BENCH_FRAG_NORMAL_MB", normal_mb);
	contig_pct = (unsigned)env_size("UCMA_BENCH_FRAG_CONTIG_PCT", contig_pct);
	seed0 = env_size("UCMA_BENCH_FRAG_SEED", seed0);
	tu_clear_env();		/* the library's own settings: defaults only */
	if (cma_mb < 64 || cma_mb % 2 || normal_mb < 8 || normal_mb % 2 || contig_pct > 100) {
		fprintf(stderr, "bench_frag: UCMA_BENCH_FRAG_CMA_MB (>= 64, even), _NORMAL_MB "
				"(>= 8, even) or _CONTIG_PCT (0..100) out of range\n");
		return 2;
	}
	pages = (long)(cma_mb / 2);
	hugetlb = geteuid() == 0 && tu_hugepages_reserve(2048, pages, why, sizeof(why)) == 0;
	printf("# frag: CMA area %zu MiB (%s), NORMAL %zu MiB; buffers 16-512 KiB, %u%% "
	       "contiguous, filling 80%%, 60%% freed at random; seed %llu\n", cma_mb,
	       hugetlb ? "hugetlb-2M, pool pages reserved for the run" : why, normal_mb,
	       contig_pct, (unsigned long long)seed0);
	for (int m = 0; m < NR_MODES; m++) {
		for (size_t s = 0; s < NR_SIZES; s++) {
			struct result *r = &res[m][s];
			int fds[2], status;
			pid_t pid;

			memset(r, 0, sizeof(*r));
			if (pipe(fds) != 0)
				return 1;
			fflush(NULL);
			pid = fork();
			if (pid == 0) {
				close(fds[0]);
				run_case(m, sizes[s], r);
				_exit(write(fds[1], r, sizeof(*r)) == (ssize_t)sizeof(*r) ? 0 : 1);
			}
			close(fds[1]);
			if (pid < 0 || read(fds[0], r, sizeof(*r)) != (ssize_t)sizeof(*r))
				r->done = 0;
			close(fds[0]);
			if (pid > 0)
				waitpid(pid, &status, 0);
		}
	}
	printf("# ucma_init of the %zu MiB area: %.1f ms, of which reading, sorting and mapping "
	       "frames %.2f ms; longest physically contiguous run of frames %llu MiB; "
	       "backing %s\n", cma_mb, (double)res[0][0].init_ns / 1e6,
	       (double)res[0][0].sort_ns / 1e6, (unsigned long long)res[0][0].run_max >> 20,
	       res[0][0].backing);
	printf("%-13s %5s %9s %9s %9s %7s %7s %8s %10s  %s\n", "mode", "size", "free",
	       "live-cont", "live-mov", "could", "got", "fraction", "time", "stopped by");
	for (int m = 0; m < NR_MODES; m++) {
		for (size_t s = 0; s < NR_SIZES; s++) {
			const struct result *r = &res[m][s];

			if (!r->done) {
				printf("%-13s %4zuM  failed (%s)\n", mode_name[m], sizes[s] >> 20,
				       strerror(r->fail_errno));
				continue;
			}
			if (r->skipped) {
				printf("%-13s %4zuM  skipped: no hugetlb frames with known physical "
				       "addresses\n", mode_name[m], sizes[s] >> 20);
				continue;
			}
			printf("%-13s %4zuM %8lluM %8lluM %8lluM %7u %7u ", mode_name[m],
			       sizes[s] >> 20, (unsigned long long)(r->free_bytes >> 20),
			       (unsigned long long)(r->live_contig >> 20),
			       (unsigned long long)(r->live_movable >> 20), r->capacity, r->got);
			if (r->capacity)
				printf("%7.1f%%", 100.0 * r->got / r->capacity);
			else
				printf("%8s", "n/a");
			printf(" %8.1fms  %s\n", (double)r->ns / 1e6, strerror(r->fail_errno));
		}
	}
	printf("# could = min(blocks fitting the gaps between the contiguous buffers left%s, "
	       "free memory of the arena / size); got = buffers ucma_alloc() returned\n",
	       hugetlb ? " (and, for phys, one physical run of frames)" : "");
	printf("# DPDK 22.11 on the same workload (it cannot move anything): 35 / 27 / 27%% "
	       "(IOVA as VA), at most 6.5%% (IOVA as PA)\n");
	return 0;
}
