/*
 * bench_highalloc.c - the kernel's stress-highalloc test, in user space:
 * after a long fragmenting workload, how much of the free memory of the
 * CMA areas can still be had as large contiguous blocks?
 *
 * Each case is a child process with its own arena (CMA areas on 2 MiB
 * hugetlb pages when run as root; the pool is reserved for the run and
 * restored).  The workload: movable objects (ucma_halloc, 16 B to 256 KiB)
 * and unmovable ones (ucma_malloc, 16 B to 64 KiB) are allocated until the
 * CMA areas are 90% full, half are freed at random, then random frees and
 * allocations churn on around that level, so free memory ends up in holes
 * all over the arena.  Then as many blocks of 2, 8 and 32 MiB (aligned to
 * their size) as possible are taken with ucma_alloc(), in three modes:
 *
 *   off         no compaction at all; ucma_alloc(UCMA_ALLOC_NOWAIT) takes
 *               only runs that happen to be free;
 *   background  the compaction thread runs (UCMA_COMPACT_PROACTIVENESS as
 *               below, short interval) during the workload and a few
 *               intervals after it; then NOWAIT allocations;
 *   direct      no thread; plain ucma_alloc(), which migrates the objects
 *               out of its run and compacts directly when it fails.
 *
 * Success is reported as a percentage of what the free memory of the CMA
 * areas could hold (free bytes / block size, measured just before the
 * allocations), with the latency of each ucma_alloc() (p50/p99) and
 * whether each buffer is physically contiguous (ucma_virt2phys, root).
 * Then: pin latency (ucma_pin + ucma_unpin) while the thread compacts
 * against idle, and the throughput of ucma_compact(SYNC_FULL) in bytes
 * moved per second as a ratio of memcpy bandwidth measured in the same
 * run, right before and right after the compaction (between two buffers
 * of the C library's heap), and after it between two contiguous buffers
 * of the arena, the memory the compaction copies on; and the same again
 * while a reader thread reads objects through their handles inside
 * read-side sections, one object per section, since the grace periods
 * compaction waits for wait for such readers; and again while a thread
 * that touches no memory of ucma spins beside it, as another busy thread
 * of the program or another process would, so that on a machine of two
 * CPUs the copy helper has no CPU of its own.
 *
 * Environment: UCMA_BENCH_HA_CMA_MB (default 512), UCMA_BENCH_HA_NORMAL_MB
 * (256), UCMA_BENCH_HA_CHURN (50000 operations), UCMA_BENCH_HA_PROACTIVENESS
 * (90), UCMA_BENCH_HA_SEED (1), UCMA_BENCH_PART (the parts to run, any of
 * "alloc", "pin", "throughput", "reader" and "busy" separated by commas; default
 * all),
 * UCMA_BENCH_PERF_CTL (perf's control FIFO: only ucma_compact() of the
 * throughput part is sampled).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define MAXMOV 400000
#define MAXUNMOV 200000
#define MAXBLOCKS 1024
#define MAXPIN (4u << 20)

enum mode { MODE_OFF, MODE_BACKGROUND, MODE_DIRECT, NR_MODES };
static const char *const mode_name[] = { "off", "background", "direct" };
static const size_t block_sizes[] = { 2u << 20, 8u << 20, 32u << 20 };
#define NR_SIZES UCMA_ARRAY_SIZE(block_sizes)

struct alloc_result {
	int done;
	uint64_t cma_free;		/* bytes free in the CMA zone before allocating */
	unsigned score;			/* fragmentation score of the CMA zone then */
	unsigned got, max;
	uint64_t lat[MAXBLOCKS];
	uint64_t fail_lat;		/* the call that failed */
	int fail_errno;
	unsigned phys_ok, phys_checked;
	uint64_t stall, migrated;
	unsigned waited_ms;		/* background: waited after the workload */
	char backing[32];
};

struct pin_result {
	int done;
	uint64_t idle_p50, idle_p99, idle_max, busy_p50, busy_p99, busy_max;
	uint64_t idle_n, busy_n, migrated_during;
};

/* The throughput part's runs: compaction alone, beside a reader thread,
 * beside a busy thread. */
enum tput_kind { TPUT_ALONE, TPUT_READER, TPUT_BUSY, NR_TPUT };
static const char *const tput_part[NR_TPUT] = { "throughput", "reader", "busy" };
static const char *const tput_what[NR_TPUT] = { "", " with a reader thread",
						" with a busy thread" };

struct tput_result {
	int done;
	uint64_t bytes_moved, objects_moved, ns;
	double memcpy_before, memcpy_after;	/* GB/s, right before and right after */
	double memcpy_arena;		/* GB/s, between two buffers of the arena, after */
	unsigned o9_before, o9_after;
	uint64_t grace_periods;		/* rcu_grace_periods during the run */
	uint64_t reader_sections;	/* the reader thread's, during the run */
	uint64_t helped;		/* bytes the copy helpers copied (UCMA_COPY_HELPERS) */
	uint64_t late;			/* helpers seen to lose their CPU (pgmigrate_copy_helper_late) */
	uint64_t no_cpu;		/* looks that found no CPU for them (pgmigrate_copy_no_cpu) */
};

struct shared {
	struct alloc_result alloc[NR_MODES][NR_SIZES];
	struct pin_result pin;
	struct tput_result tput[3];	/* enum tput_kind */
	uint64_t pin_samples[MAXPIN];	/* scratch for the pin child */
};

static struct shared *sh;
static size_t cma_mb = 512, normal_mb = 256;
static unsigned churn = 50000, proactiveness = 90;
static uint64_t seed0 = 1;
static int cma_backing = UCMA_BACKING_AUTO;

/* The workload's objects (per child). */
static ucma_handle_t mov[MAXMOV];
static uint32_t mov_size[MAXMOV];
static unsigned nmov;
static void *unmov[MAXUNMOV];
static unsigned nunmov;

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

static uint64_t pct(uint64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i];
}

static unsigned long env_num(const char *name, unsigned long def)
{
	const char *s = getenv(name);

	return s && *s ? strtoul(s, NULL, 0) : def;
}

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	ucma_stat(name, &v);
	return v;
}

static struct ucma_arena *start_arena(bool thread, bool direct)
{
	struct ucma_config cfg = {
		.arena_size = (cma_mb + normal_mb) << 20,
		.cma_size = cma_mb << 20,
		.hugepages = cma_backing,
	};

	if (ucma_init(&cfg) != 0) {
		fprintf(stderr, "ucma_init: %s\n", strerror(errno));
		_exit(2);
	}
	ucma_opt.compact = thread;
	ucma_opt.compact_direct = direct;
	ucma_opt.compact_interval_ms = 50;
	ucma_opt.compact_proactiveness = proactiveness;
	return ucma_arena_get();
}

static uint32_t movable_size(uint64_t *seed)
{
	uint64_t r = tu_rand(seed);

	if (r % 10 < 3)
		return 16u + (uint32_t)(r >> 8) % 4080u;
	return 4096u * (2u + (uint32_t)(r >> 8) % 63u);
}

static size_t unmovable_size(uint64_t *seed)
{
	uint64_t r = tu_rand(seed);

	return (size_t)16 << ((r >> 4) % 13);	/* 16 B .. 64 KiB */
}

static bool alloc_movable(uint64_t *seed, uint64_t *live)
{
	uint32_t sz = movable_size(seed);
	ucma_handle_t h;
	void *p;

	if (nmov == MAXMOV)
		return false;
	h = ucma_halloc(sz, 0);
	if (!h)
		return false;
	p = ucma_pin(h, 0);
	memset(p, (int)(nmov & 0xff), sz);	/* touch it: moving it costs real copies */
	ucma_unpin(h);
	mov[nmov] = h;
	mov_size[nmov++] = sz;
	*live += sz;
	return true;
}

static void free_movable(unsigned i, uint64_t *live)
{
	ucma_hfree(mov[i]);
	*live -= mov_size[i];
	mov[i] = mov[--nmov];
	mov_size[i] = mov_size[nmov];
}

static bool alloc_unmovable(uint64_t *seed, uint64_t *live)
{
	size_t sz = unmovable_size(seed);
	void *p;

	if (nunmov == MAXUNMOV)
		return false;
	p = ucma_malloc(sz);
	if (!p)
		return false;
	memset(p, 1, sz);
	unmov[nunmov++] = p;
	*live += sz;
	return true;
}

/*
 * Fill the CMA areas to 90% with movable objects (and NORMAL to 20% with
 * unmovable ones, interleaved), free half at random, and churn.
 */
static void fragment(uint64_t seed)
{
	uint64_t live = 0, ulive = 0, target = (uint64_t)cma_mb << 20;
	uint64_t utarget = ((uint64_t)normal_mb << 20) / 5;

	while (live < target / 10 * 9) {
		if (!alloc_movable(&seed, &live))
			break;
		if (ulive < utarget && tu_rand(&seed) % 4 == 0)
			alloc_unmovable(&seed, &ulive);
	}
	while (live > target / 100 * 45 && nmov)
		free_movable((unsigned)(tu_rand(&seed) % nmov), &live);
	for (unsigned op = 0; op < churn; op++) {
		uint64_t r = tu_rand(&seed);

		if (r % 8 == 0 && nunmov) {
			unsigned i = (unsigned)((r >> 8) % nunmov);

			ucma_free(unmov[i]);
			unmov[i] = unmov[--nunmov];
			alloc_unmovable(&seed, &ulive);
		} else if (live > target / 2 && nmov) {
			free_movable((unsigned)((r >> 8) % nmov), &live);
		} else if (!alloc_movable(&seed, &live) && nmov) {
			free_movable((unsigned)((r >> 8) % nmov), &live);
		}
	}
	ucma_defer_drain();
}

/* Physically contiguous?  Every 2 MiB step for hugetlb backing (a huge
 * page is contiguous inside), every page otherwise.  -1: unknown. */
static int phys_contig(char *p, size_t len, bool huge)
{
	size_t step = huge ? UCMA_PAGEBLOCK_SIZE : UCMA_PAGE_SIZE;
	uint64_t first, cur;

	for (size_t off = 0; off < len; off += step)
		p[off] = 0;	/* fault it in */
	if (ucma_virt2phys(p, &first) != 0)
		return -1;
	for (size_t off = step; off < len; off += step) {
		if (ucma_virt2phys(p + off, &cur) != 0)
			return -1;
		if (cur != first + off)
			return 0;
	}
	return 1;
}

static void run_alloc(enum mode m, unsigned si)
{
	struct alloc_result *r = &sh->alloc[m][si];
	struct ucma_arena *a = start_arena(m == MODE_BACKGROUND, m == MODE_DIRECT);
	struct ucma_zone *z = &a->zones[UCMA_ZONE_CMA];
	size_t size = block_sizes[si];
	unsigned flags = m == MODE_DIRECT ? 0 : UCMA_ALLOC_NOWAIT;
	const char *backing = ucma_backing_name("cma");
	bool huge = backing && strncmp(backing, "hugetlb", 7) == 0;
	void *blocks[MAXBLOCKS];

	uint64_t t_frag;

	snprintf(r->backing, sizeof(r->backing), "%s", backing ? backing : "?");
	fragment(seed0);
	t_frag = tu_now_ns();
	if (m == MODE_BACKGROUND) {
		uint64_t prev = UINT64_MAX;
		int quiet = 0;

		/* Intervals until the thread rests (4 without scanning), 5 s at most. */
		for (int i = 0; i < 100 && quiet < 4; i++) {
			uint64_t scanned;

			usleep(ucma_opt.compact_interval_ms * 1000u);
			scanned = stat_of("compact_migrate_scanned");
			quiet = scanned == prev ? quiet + 1 : 0;
			prev = scanned;
		}
		r->waited_ms = (unsigned)(tu_now_ns() - t_frag) / 1000000u;
	}
	r->cma_free = z->free_pages << UCMA_PAGE_SHIFT;
	r->score = ucma_fragmentation_score(z);
	r->max = (unsigned)(r->cma_free / size);
	r->stall = stat_of("compact_stall");
	r->migrated = stat_of("pgmigrate_success");
	while (r->got < MAXBLOCKS) {
		uint64_t t0 = tu_now_ns();
		void *p = ucma_alloc(size, size, flags);
		uint64_t t1 = tu_now_ns();

		if (!p) {
			r->fail_lat = t1 - t0;
			r->fail_errno = errno;
			break;
		}
		r->lat[r->got] = t1 - t0;
		blocks[r->got++] = p;
	}
	r->stall = stat_of("compact_stall") - r->stall;
	r->migrated = stat_of("pgmigrate_success") - r->migrated;
	if (geteuid() == 0) {
		for (unsigned i = 0; i < r->got && i < 64; i++) {
			int c = phys_contig(blocks[i], size, huge);

			if (c < 0)
				break;
			r->phys_checked++;
			r->phys_ok += c;
		}
	}
	r->done = 1;
}

static void pin_loop(uint64_t *samples, size_t max, uint64_t ns, size_t *n, uint64_t *seed)
{
	uint64_t end = tu_now_ns() + ns;

	*n = 0;
	while (*n < max) {
		ucma_handle_t h = mov[tu_rand(seed) % nmov];
		uint64_t t0 = tu_now_ns(), t1;

		if (ucma_pin(h, 0))
			ucma_unpin(h);
		t1 = tu_now_ns();
		samples[(*n)++] = t1 - t0;
		if (t1 > end)
			break;
	}
}

static void run_pin(void)
{
	struct pin_result *r = &sh->pin;
	struct ucma_arena *a = start_arena(false, false);
	uint64_t seed = seed0 + 7, mig0;
	size_t n;

	(void)a;
	fragment(seed0);
	pin_loop(sh->pin_samples, MAXPIN, 300000000ull, &n, &seed);
	r->idle_n = n;
	r->idle_max = pct(sh->pin_samples, n, 1.0);
	r->idle_p50 = pct(sh->pin_samples, n, 0.5);
	r->idle_p99 = pct(sh->pin_samples, n, 0.99);
	/* Now with the thread compacting: short interval, compact all it can. */
	ucma_opt.compact = true;
	ucma_opt.compact_interval_ms = 5;
	ucma_opt.compact_proactiveness = 100;
	mig0 = stat_of("pgmigrate_success");
	ucma_compactd_start_once();
	pin_loop(sh->pin_samples, MAXPIN, 300000000ull, &n, &seed);
	r->migrated_during = stat_of("pgmigrate_success") - mig0;
	r->busy_n = n;
	r->busy_max = pct(sh->pin_samples, n, 1.0);
	r->busy_p50 = pct(sh->pin_samples, n, 0.5);
	r->busy_p99 = pct(sh->pin_samples, n, 0.99);
	r->done = 1;
}

/* The best of five memcpy() of @len bytes from @src to @dst, in GB/s. */
static double copy_gbs(char *dst, char *src, size_t len)
{
	uint64_t best = UINT64_MAX;

	memset(src, 3, len);
	memset(dst, 4, len);
	for (int i = 0; i < 5; i++) {
		uint64_t t0 = tu_now_ns();

		memcpy(dst, src, len);
		__asm__ volatile("" : : "r"(dst) : "memory");
		if (tu_now_ns() - t0 < best)
			best = tu_now_ns() - t0;
	}
	return (double)len / (double)best;
}

/* memcpy between two 64 MiB buffers of the C library's heap. */
static double memcpy_gbs(void)
{
	size_t len = 64u << 20;
	char *src = malloc(len), *dst = malloc(len);
	double gbs = src && dst ? copy_gbs(dst, src, len) : 0;

	free(src);
	free(dst);
	return gbs;
}

/* The same between two 32 MiB contiguous buffers of the arena, the
 * memory the compaction copies on (its backing, its pages); 0 when the
 * arena has no room for them. */
static double memcpy_arena_gbs(void)
{
	size_t len = 32u << 20;
	char *src = ucma_alloc(len, 0, 0), *dst = src ? ucma_alloc(len, 0, 0) : NULL;
	double gbs = src && dst ? copy_gbs(dst, src, len) : 0;

	if (dst)
		ucma_release(dst);
	if (src)
		ucma_release(src);
	return gbs;
}

static unsigned free_pageblocks(struct ucma_zone *z)
{
	uint64_t c[UCMA_NR_ORDERS];

	ucma_zone_free_counts(z, c);
	return (unsigned)c[UCMA_MAX_ORDER];
}

static atomic_bool reader_stop;
static _Atomic uint64_t reader_sections;

/*
 * A reader as a program has them: read one object through its handle
 * inside a read-side section (a few microseconds to tens of them), again
 * and again.  A grace period that finds it inside a section waits for it
 * (liburcu-bp polls every 10 ms once a short spin has not seen it leave).
 */
static void *reader(void *arg)
{
	uint64_t seed = 99, sum = 0;

	(void)arg;
	while (!atomic_load_explicit(&reader_stop, memory_order_relaxed)) {
		unsigned i = (unsigned)(tu_rand(&seed) % nmov);
		const uint64_t *p;

		ucma_read_lock();
		p = ucma_deref(mov[i]);
		for (size_t k = 0; p && k < mov_size[i] / 8; k += 8)
			sum += p[k];
		ucma_read_unlock();
		atomic_fetch_add_explicit(&reader_sections, 1, memory_order_relaxed);
	}
	return (void *)(uintptr_t)sum;
}

/* A thread that only spins, touching no memory of ucma. */
static void *busy(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&reader_stop, memory_order_relaxed))
		;
	return NULL;
}

static enum tput_kind tput_kind;

static void run_tput(void)
{
	struct tput_result *r = &sh->tput[tput_kind];
	struct ucma_arena *a = start_arena(false, false);
	static const void *before[MAXMOV];
	uint64_t t0, gp0, rs0, hb0, lt0, nc0;
	pthread_t rd;

	fragment(seed0);
	r->memcpy_before = memcpy_gbs();
	ucma_read_lock();
	for (unsigned i = 0; i < nmov; i++)
		before[i] = ucma_deref(mov[i]);
	ucma_read_unlock();
	r->o9_before = free_pageblocks(&a->zones[UCMA_ZONE_CMA]) +
		       free_pageblocks(&a->zones[UCMA_ZONE_NORMAL]);
	if (tput_kind != TPUT_ALONE &&
	    pthread_create(&rd, NULL, tput_kind == TPUT_READER ? reader : busy, NULL) != 0) {
		fprintf(stderr, "bench_highalloc: no%s: %s\n", tput_what[tput_kind],
			strerror(errno));
		return;
	}
	gp0 = stat_of("rcu_grace_periods");
	hb0 = stat_of("pgmigrate_copy_helped_bytes");
	lt0 = stat_of("pgmigrate_copy_helper_late");
	nc0 = stat_of("pgmigrate_copy_no_cpu");
	rs0 = atomic_load(&reader_sections);
	tu_profile(true);
	t0 = tu_now_ns();
	ucma_compact(UCMA_COMPACT_SYNC_FULL);
	r->ns = tu_now_ns() - t0;
	tu_profile(false);
	r->reader_sections = atomic_load(&reader_sections) - rs0;
	r->grace_periods = stat_of("rcu_grace_periods") - gp0;
	r->helped = stat_of("pgmigrate_copy_helped_bytes") - hb0;
	r->late = stat_of("pgmigrate_copy_helper_late") - lt0;
	r->no_cpu = stat_of("pgmigrate_copy_no_cpu") - nc0;
	if (tput_kind != TPUT_ALONE) {
		atomic_store(&reader_stop, true);
		pthread_join(rd, NULL);
	}
	r->memcpy_after = memcpy_gbs();
	r->memcpy_arena = memcpy_arena_gbs();
	r->o9_after = free_pageblocks(&a->zones[UCMA_ZONE_CMA]) +
		      free_pageblocks(&a->zones[UCMA_ZONE_NORMAL]);
	ucma_read_lock();
	for (unsigned i = 0; i < nmov; i++) {
		if (ucma_deref(mov[i]) != before[i]) {
			r->objects_moved++;
			r->bytes_moved += mov_size[i];
		}
	}
	ucma_read_unlock();
	r->done = 1;
}

static void in_child(void (*fn)(void))
{
	pid_t pid = fork();
	int status = -1;

	if (pid == 0) {
		fn();
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		fprintf(stderr, "bench_highalloc: a case failed (status %d)\n", status);
}

static enum mode cur_mode;
static unsigned cur_size;

static void alloc_case(void)
{
	run_alloc(cur_mode, cur_size);
}

static void print_alloc(void)
{
	printf("%-10s %5s %8s %6s %5s %8s %10s %10s %10s %7s %6s %s\n", "mode", "block", "cma_free",
	       "score", "max", "got", "success", "p50", "p99", "stalls", "moved", "phys-contig");
	for (int m = 0; m < NR_MODES; m++) {
		for (unsigned si = 0; si < NR_SIZES; si++) {
			struct alloc_result *r = &sh->alloc[m][si];
			char contig[32];

			if (!r->done) {
				printf("%-10s %4zuM   (failed)\n", mode_name[m],
				       block_sizes[si] >> 20);
				continue;
			}
			if (r->phys_checked)
				snprintf(contig, sizeof(contig), "%u/%u", r->phys_ok,
					 r->phys_checked);
			else
				snprintf(contig, sizeof(contig), "n/a");
			printf("%-10s %4zuM %7lluM %6u %5u %8u %9.1f%% %8.1fus %8.1fus %7llu "
			       "%6llu %s\n",
			       mode_name[m], block_sizes[si] >> 20,
			       (unsigned long long)(r->cma_free >> 20), r->score, r->max, r->got,
			       r->max ? 100.0 * r->got / r->max : 0.0,
			       pct(r->lat, r->got, 0.5) / 1e3, pct(r->lat, r->got, 0.99) / 1e3,
			       (unsigned long long)r->stall, (unsigned long long)r->migrated,
			       contig);
		}
	}
}

/* The table of the allocation cases, with its backing and legend. */
static void print_alloc_cases(void)
{
	printf("# backing of the CMA areas: %s\n", sh->alloc[0][0].backing);
	print_alloc();
	printf("# success: blocks obtained / (free bytes of the CMA areas before allocating / "
	       "block size); off and background use UCMA_ALLOC_NOWAIT; score = fragmentation "
	       "score of the CMA zone then; moved = objects migrated during the allocations; "
	       "phys-contig = buffers whose physical frames are contiguous / checked\n");
}

static void print_pin(void)
{
	printf("pin+unpin latency: idle p50 %llu ns p99 %llu ns max %llu ns (%llu calls); "
	       "thread compacting p50 %llu ns p99 %llu ns max %llu ns (%llu calls, %llu "
	       "objects moved meanwhile)\n",
	       (unsigned long long)sh->pin.idle_p50, (unsigned long long)sh->pin.idle_p99,
	       (unsigned long long)sh->pin.idle_max, (unsigned long long)sh->pin.idle_n,
	       (unsigned long long)sh->pin.busy_p50, (unsigned long long)sh->pin.busy_p99,
	       (unsigned long long)sh->pin.busy_max, (unsigned long long)sh->pin.busy_n,
	       (unsigned long long)sh->pin.migrated_during);
}

static void print_tput(const struct tput_result *t, enum tput_kind kind)
{
	double gbs = (double)t->bytes_moved / (double)t->ns;
	double b = t->memcpy_before, a = t->memcpy_after;
	double fast = b > a ? b : a, slow = b > a ? a : b;

	/* The host's memcpy bandwidth drifts between runs and within one
	 * (12 to 20 GB/s here): the ratio is given against the baseline
	 * taken right before the compaction and right after it, the lower
	 * ratio first, so that a drift shows instead of being averaged. */
	printf("compaction throughput%s: ucma_compact(SYNC_FULL) moved %llu objects, "
	       "%.1f MiB in %.1f ms = %.2f GB/s; memcpy %.2f GB/s before, %.2f after; "
	       "ratio %.2f-%.2f; free pageblocks %u -> %u; %llu grace periods",
	       tput_what[kind], (unsigned long long)t->objects_moved,
	       (double)t->bytes_moved / (1 << 20), (double)t->ns / 1e6, gbs, t->memcpy_before,
	       t->memcpy_after, fast > 0 ? gbs / fast : 0, slow > 0 ? gbs / slow : 0, t->o9_before,
	       t->o9_after, (unsigned long long)t->grace_periods);
	if (t->memcpy_arena > 0)
		printf("; memcpy between arena buffers %.2f GB/s, ratio %.2f", t->memcpy_arena,
		       gbs / t->memcpy_arena);
	printf("; %.0f%% of the bytes copied by helper threads",
	       t->bytes_moved ? 100.0 * (double)t->helped / (double)t->bytes_moved : 0.0);
	printf("; helpers rested %llu times for a lost CPU, %llu for none free",
	       (unsigned long long)t->late, (unsigned long long)t->no_cpu);
	if (kind == TPUT_READER)
		printf("; %llu read-side sections meanwhile",
		       (unsigned long long)t->reader_sections);
	printf("\n");
}

int main(void)
{
	char why[256];
	const char *mode_cma = "auto";

	cma_mb = env_num("UCMA_BENCH_HA_CMA_MB", 512);
	normal_mb = env_num("UCMA_BENCH_HA_NORMAL_MB", 256);
	churn = (unsigned)env_num("UCMA_BENCH_HA_CHURN", 50000);
	proactiveness = (unsigned)env_num("UCMA_BENCH_HA_PROACTIVENESS", 90);
	seed0 = env_num("UCMA_BENCH_HA_SEED", 1);
	cma_mb = UCMA_ALIGN_UP(cma_mb, 2);
	normal_mb = UCMA_ALIGN_UP(normal_mb, 2);
	if (tu_hugepages_reserve(2048, (long)(cma_mb / 2) + 8, why, sizeof(why)) == 0) {
		cma_backing = UCMA_BACKING_HUGETLB_2M;
		mode_cma = "hugetlb-2M (reserved for the run)";
	} else {
		printf("# no hugetlb pool for the CMA areas: %s\n", why);
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	printf("# highalloc: arena %zu MiB = NORMAL %zu MiB + CMA %zu MiB (%s); churn %u ops; "
	       "background: proactiveness %u, interval 50 ms; seed %llu\n",
	       cma_mb + normal_mb, normal_mb, cma_mb, mode_cma, churn, proactiveness,
	       (unsigned long long)seed0);
	for (int m = 0; m < NR_MODES && tu_bench_part("alloc"); m++) {
		for (unsigned si = 0; si < NR_SIZES; si++) {
			cur_mode = (enum mode)m;
			cur_size = si;
			in_child(alloc_case);
		}
	}
	if (tu_bench_part("alloc"))
		print_alloc_cases();
	if (tu_bench_part("pin"))
		in_child(run_pin);
	if (sh->pin.done)
		print_pin();
	for (int k = 0; k < NR_TPUT; k++) {
		tput_kind = (enum tput_kind)k;
		if (tu_bench_part(tput_part[k]))
			in_child(run_tput);
		if (sh->tput[k].done && sh->tput[k].ns)
			print_tput(&sh->tput[k], tput_kind);
	}
	return 0;
}
