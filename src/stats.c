/*
 * stats.c - event counters, computed statistics and the statistics report.
 *
 * Counters are named as in the kernel's /proc/vmstat where one exists, so
 * that a failed contiguous allocation can be explained in familiar terms.
 * Slow-path events are global relaxed atomics (ucma_count()); fast-path
 * malloc counters are kept per thread by malloc.c and summed when read.
 *
 * Every readable name comes from one table of families (stat_families[]):
 * a family is a name pattern, the dimension it ranges over (nothing, the
 * vmstat items, the zones, zone x order, zone x migratetype, the CMA
 * areas) and a callback that computes the value.  ucma_stat(), the report
 * and the shared-memory segment (shm.c) all enumerate that one table, so
 * every name the report prints can be read back with ucma_stat(), and a
 * new statistic is one new row.
 *
 * Computed values read the zones and areas through a snapshot (struct
 * stats_snap) filled lazily, part by part: ucma_stat() on one name takes
 * only the locks that name needs; the report reads each zone once.  Zone
 * data is read under the zone lock (by the zone.c helpers), area data under
 * the area lock; no lock is held while printing, and none is held across
 * another file's call except those helpers.
 *
 * Nothing here allocates through ucma: the report formats into the
 * caller's FILE or into a stack buffer written with write(2), so it can run
 * at exit in a preloaded process whose malloc is ucma's.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "pcp.h"
#include "frames.h"
#include "lend.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Atomic uint64_t ucma_vmstat[UCMA_STAT_NR];

const char *const ucma_vmstat_names[UCMA_STAT_NR] = {
	[UCMA_STAT_COMPACT_STALL] = "compact_stall",
	[UCMA_STAT_COMPACT_SUCCESS] = "compact_success",
	[UCMA_STAT_COMPACT_FAIL] = "compact_fail",
	[UCMA_STAT_COMPACT_MIGRATE_SCANNED] = "compact_migrate_scanned",
	[UCMA_STAT_COMPACT_FREE_SCANNED] = "compact_free_scanned",
	[UCMA_STAT_COMPACT_ISOLATED] = "compact_isolated",
	[UCMA_STAT_COMPACT_DAEMON_WAKE] = "compact_daemon_wake",
	[UCMA_STAT_PGMIGRATE_SUCCESS] = "pgmigrate_success",
	[UCMA_STAT_PGMIGRATE_FAIL] = "pgmigrate_fail",
	[UCMA_STAT_PGMIGRATE_POPULATED] = "pgmigrate_populated",
	[UCMA_STAT_PGMIGRATE_POPULATE_FAIL] = "pgmigrate_populate_fail",
	[UCMA_STAT_PGMIGRATE_COPY_HELPED] = "pgmigrate_copy_helped_bytes",
	[UCMA_STAT_PGMIGRATE_COPY_HELPER_LATE] = "pgmigrate_copy_helper_late",
	[UCMA_STAT_PGMIGRATE_COPY_NO_CPU] = "pgmigrate_copy_no_cpu",
	[UCMA_STAT_CMA_ALLOC_SUCCESS] = "cma_alloc_success",
	[UCMA_STAT_CMA_ALLOC_FAIL] = "cma_alloc_fail",
	[UCMA_STAT_CMA_RELEASE] = "cma_release",
	[UCMA_STAT_CMA_MIGRATED_IN_VAIN] = "cma_migrated_in_vain",
	[UCMA_STAT_PIN_LONGTERM_MIGRATED] = "pin_longterm_migrated",
	[UCMA_STAT_HALLOC] = "halloc",
	[UCMA_STAT_HFREE] = "hfree",
	[UCMA_STAT_HALLOC_FAIL] = "halloc_fail",
	[UCMA_STAT_PAGE_ALLOC] = "page_alloc",
	[UCMA_STAT_PAGE_FREE] = "page_free",
	[UCMA_STAT_PAGE_ALLOC_FAIL] = "page_alloc_fail",
	[UCMA_STAT_PAGEBLOCK_STEAL] = "pageblock_steal",
	[UCMA_STAT_PURGED_PAGES] = "purged_pages",
	[UCMA_STAT_OVERFLOW_ALLOC] = "overflow_alloc",
	[UCMA_STAT_OVERFLOW_FREE] = "overflow_free",
	[UCMA_STAT_OVERFLOW_REUSED] = "overflow_reused",
	[UCMA_STAT_MEM_EVENT_MAP] = "mem_event_map",
	[UCMA_STAT_MEM_EVENT_UNMAP] = "mem_event_unmap",
	[UCMA_STAT_PHYS_CONTIG_MOVED] = "phys_contig_frames_moved",
	[UCMA_STAT_LEND_HEAP_LENT] = "lend_heap_lent",
	[UCMA_STAT_LEND_HEAP_RETURNED] = "lend_heap_returned",
	[UCMA_STAT_LEND_HEAP_MIGRATED] = "lend_heap_migrated",
	[UCMA_STAT_LEND_HEAP_BYTES_COPIED] = "lend_heap_bytes_copied",
	[UCMA_STAT_LEND_HEAP_FALLBACK] = "lend_heap_fallback",
	[UCMA_STAT_LEND_HEAP_MIGRATE_FAIL] = "lend_heap_migrate_fail",
	[UCMA_STAT_LEND_HEAP_UNPREFAULTED] = "lend_heap_unprefaulted",
	[UCMA_STAT_LEND_HEAP_FORK_EVACUATED] = "lend_heap_fork_evacuated",
	[UCMA_STAT_LEND_HEAP_FORK_COPIED] = "lend_heap_fork_copied",
	[UCMA_STAT_LEND_IOURING_ENTER_RING] = "lend_iouring_enter_ring",
	[UCMA_STAT_LEND_IOURING_ENTER_FDINFO] = "lend_iouring_enter_fdinfo",
	[UCMA_STAT_RCU_GRACE_PERIODS] = "rcu_grace_periods",
	[UCMA_STAT_RCU_GRACE_NS] = "rcu_grace_ns",
	[UCMA_STAT_RCU_GRACE_SLOW] = "rcu_grace_slow",
};

/* Names used inside statistic names (lower case) and in the tables. */
static const char *const zone_names[UCMA_ZONE_NR] = { "normal", "cma" };
static const char *const zone_titles[UCMA_ZONE_NR] = { "Normal", "CMA" };
static const char *const mt_names[UCMA_MT_NR] = { "unmovable", "movable", "cma", "isolate" };
static const char *const mt_titles[UCMA_MT_NR] = { "Unmovable", "Movable", "CMA", "Isolate" };

/* ------------------------------------------------------------------------ */
/* Latency of ucma_alloc()                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Power-of-two buckets of nanoseconds: bucket b counts calls that took
 * [2^b, 2^(b+1)) ns (bucket 0 also counts 0 ns); the last bucket is open.
 * Index 0 of the first dimension: runs that found their pages free;
 * index 1: runs that had to migrate movable objects out first.
 */
#define LAT_BUCKETS 40

static _Atomic uint64_t lat_hist[2][LAT_BUCKETS];

void ucma_stats_alloc_latency(uint64_t ns, bool migrated)
{
	unsigned b = ns ? 63u - (unsigned)__builtin_clzll(ns) : 0;

	if (b >= LAT_BUCKETS)
		b = LAT_BUCKETS - 1;
	atomic_fetch_add_explicit(&lat_hist[migrated ? 1 : 0][b], 1, memory_order_relaxed);
}

/*
 * Heap lending (lend.c): how long the writers of a piece of heap being
 * taken back may have waited, from write-protection to wake-up; buckets
 * as above.
 */
static _Atomic uint64_t stall_hist[LAT_BUCKETS];

void ucma_stats_lend_stall(uint64_t ns)
{
	unsigned b = ns ? 63u - (unsigned)__builtin_clzll(ns) : 0;

	if (b >= LAT_BUCKETS)
		b = LAT_BUCKETS - 1;
	atomic_fetch_add_explicit(&stall_hist[b], 1, memory_order_relaxed);
}

/*
 * The @pct-th percentile of a histogram, interpolated linearly inside the
 * bucket that holds it: exact to within that bucket's factor of two.
 */
static uint64_t hist_percentile(const uint64_t *h, unsigned pct)
{
	uint64_t total = 0, rank, cum = 0;

	for (unsigned b = 0; b < LAT_BUCKETS; b++)
		total += h[b];
	if (total == 0)
		return 0;
	rank = (total * pct + 99) / 100;
	if (rank == 0)
		rank = 1;
	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		if (cum + h[b] >= rank) {
			uint64_t lo = b ? 1ull << b : 0, hi = 1ull << (b + 1);

			/* The k-th of n samples in a bucket sits at (k - 1/2) / n. */
			return lo + (uint64_t)((double)(hi - lo) * ((double)(rank - cum) - 0.5) /
					       (double)h[b]);
		}
		cum += h[b];
	}
	return 1ull << LAT_BUCKETS;
}

/* ------------------------------------------------------------------------ */
/* Fragmentation (the kernel's mm/vmstat.c and mm/compaction.c formulas)     */
/* ------------------------------------------------------------------------ */

struct contig_info {
	uint64_t free_pages;
	uint64_t free_blocks_total;
	uint64_t free_blocks_suitable;	/* in blocks of the requested order */
};

static void fill_contig_info(const uint64_t counts[UCMA_NR_ORDERS], unsigned order,
			     struct contig_info *info)
{
	info->free_pages = info->free_blocks_total = info->free_blocks_suitable = 0;
	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++) {
		info->free_blocks_total += counts[o];
		info->free_pages += counts[o] << o;
		if (o >= order)
			info->free_blocks_suitable += counts[o] << (o - order);
	}
}

/**
 * ucma_extfrag_index() - the kernel's fragmentation index for @order.
 * @counts: free blocks per order of one zone.
 * @order:  requested order, at most UCMA_MAX_ORDER.
 *
 * Return: the index times 1000: -1000 when a block of @order is free (an
 * allocation would succeed, the index does not apply); 0 when nothing is
 * free; towards 0 a failure would be for lack of memory, towards 1000 for
 * fragmentation.  As in the kernel, the value can be slightly negative
 * when very few blocks are free.
 */
int ucma_extfrag_index(const uint64_t counts[UCMA_NR_ORDERS], unsigned order)
{
	struct contig_info info;
	uint64_t requested = 1ull << order;

	if (order > UCMA_MAX_ORDER)
		return 0;
	fill_contig_info(counts, order, &info);
	if (info.free_blocks_total == 0)
		return 0;
	if (info.free_blocks_suitable)
		return -1000;
	return 1000 - (int)((1000 + info.free_pages * 1000 / requested) / info.free_blocks_total);
}

/**
 * ucma_extfrag_score() - share of free memory not in free blocks of @order,
 * in percent (0..100): the kernel's extfrag_for_order(), which compaction
 * uses with the pageblock order as the fragmentation score of a zone.
 */
unsigned ucma_extfrag_score(const uint64_t counts[UCMA_NR_ORDERS], unsigned order)
{
	struct contig_info info;

	if (order > UCMA_MAX_ORDER)
		return 0;
	fill_contig_info(counts, order, &info);
	if (info.free_pages == 0)
		return 0;
	return (unsigned)((info.free_pages - (info.free_blocks_suitable << order)) * 100 /
			  info.free_pages);
}

/* Longest run of clear bits strictly between two set bits of @w (w != 0). */
static unsigned word_inner_zero_run(unsigned long w)
{
	unsigned best = 0;

	w >>= __builtin_ctzl(w);	/* the lowest set bit is now bit 0 */
	for (;;) {
		unsigned gap;

		w >>= 1;
		if (!w)
			return best;
		gap = (unsigned)__builtin_ctzl(w);
		best = gap > best ? gap : best;
		w >>= gap;
	}
}

/**
 * ucma_bitmap_max_zero_run() - length of the longest run of clear bits in
 * the first @nbits bits of @bm (the largest free chunk of a CMA area).
 *
 * A word at a time: a run that crosses words grows by the clear bits below
 * a word's lowest set bit (ctz) and starts again with those above its
 * highest (clz).  Runs inside one word are shorter than a word, so they are
 * looked at only while the best run found is shorter than that.  Bits past
 * @nbits count as set.
 */
uint32_t ucma_bitmap_max_zero_run(const unsigned long *bm, uint32_t nbits)
{
	const unsigned bpl = sizeof(unsigned long) * CHAR_BIT;
	uint32_t best = 0, cur = 0, nwords = (nbits + bpl - 1) / bpl;

	for (uint32_t k = 0; k < nwords; k++) {
		unsigned long w = bm[k];

		if (k == nwords - 1 && nbits % bpl)
			w |= ~0ul << (nbits % bpl);
		if (w == 0) {
			cur += bpl;
			continue;
		}
		cur += (uint32_t)__builtin_ctzl(w);
		best = cur > best ? cur : best;
		if (best + 1 < bpl) {
			unsigned inner = word_inner_zero_run(w);

			best = inner > best ? inner : best;
		}
		cur = (uint32_t)__builtin_clzl(w);
	}
	return cur > best ? cur : best;
}

/* ------------------------------------------------------------------------ */
/* Snapshot                                                                  */
/* ------------------------------------------------------------------------ */

#define SNAP_MALLOC     0x01u
#define SNAP_ZONES      0x02u	/* free blocks per order */
#define SNAP_AREAS      0x04u
#define SNAP_LATENCY    0x08u
#define SNAP_PAGEBLOCKS 0x10u	/* pageblocks per migratetype: a walk */

enum area_field { AREA_SIZE, AREA_USED, AREA_MAXCHUNK, AREA_ALLOCS, AREA_SUCCESS, AREA_FAIL,
		  /* the frames behind the area (frames.c), printed in a table of their own */
		  AREA_FILE, AREA_FRAME_SIZE, AREA_FRAMES, AREA_PHYS_RUN_MAX, AREA_PHYS_RUN_FREE,
		  AREA_FRAMES_LENT, AREA_SORT_NS,
		  AREA_NR_FIELDS };
#define AREA_NR_BITMAP_FIELDS AREA_FILE

/*
 * struct stats_snap - the values one report (or one ucma_stat() call) reads,
 * filled part by part on first use, so that each zone is locked once per
 * report and every line of a report agrees with its neighbours.
 */
struct stats_snap {
	struct ucma_arena *a;		/* NULL before the arena exists */
	unsigned have;			/* SNAP_* parts filled */
	struct ucma_malloc_counters m;
	struct {
		uint64_t free[UCMA_NR_ORDERS];	/* SNAP_ZONES: free blocks per order */
		uint64_t free_pages;		/* SNAP_ZONES */
		uint64_t pageblocks[UCMA_MT_NR];	/* SNAP_PAGEBLOCKS */
	} z[UCMA_ZONE_NR];
	uint64_t area[UCMA_MAX_CMA_AREAS][AREA_NR_FIELDS];
	uint64_t lat[2][LAT_BUCKETS];
};

static void snap_init(struct stats_snap *s, struct ucma_arena *a)
{
	memset(s, 0, sizeof(*s));
	s->a = a;
}

static void snap_malloc(struct stats_snap *s)
{
	if (s->have & SNAP_MALLOC)
		return;
	s->have |= SNAP_MALLOC;
	ucma_malloc_counters_read(&s->m);
}

static void snap_zones(struct stats_snap *s)
{
	if (s->have & SNAP_ZONES)
		return;
	s->have |= SNAP_ZONES;
	if (!s->a)
		return;
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		struct ucma_zone *z = &s->a->zones[zi];

		ucma_zone_free_counts(z, s->z[zi].free);
		s->z[zi].free_pages = 0;
		for (unsigned o = 0; o < UCMA_NR_ORDERS; o++)
			s->z[zi].free_pages += s->z[zi].free[o] << o;
	}
}

static void snap_pageblocks(struct stats_snap *s)
{
	if (s->have & SNAP_PAGEBLOCKS)
		return;
	s->have |= SNAP_PAGEBLOCKS;
	if (!s->a)
		return;
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++)
		ucma_zone_pageblock_counts(s->a, zi, s->z[zi].pageblocks);
}

static void snap_areas(struct stats_snap *s)
{
	if (s->have & SNAP_AREAS)
		return;
	s->have |= SNAP_AREAS;
	if (!s->a)
		return;
	for (int i = 0; i < s->a->nr_areas && i < UCMA_MAX_CMA_AREAS; i++) {
		struct ucma_cma_area *ar = &s->a->areas[i];
		uint64_t *v = s->area[i];

		ucma_mutex_lock(&ar->lock);
		v[AREA_SIZE] = ar->npages;
		v[AREA_USED] = ar->nr_allocated_pages;
		v[AREA_MAXCHUNK] = ar->bitmap ? ucma_bitmap_max_zero_run(ar->bitmap, ar->npages) : 0;
		v[AREA_ALLOCS] = ar->nr_allocs;
		v[AREA_SUCCESS] = ar->alloc_success;
		v[AREA_FAIL] = ar->alloc_fail;
		{
			struct ucma_frames_stats fs;

			ucma_frames_stats_locked(ar, &fs);
			v[AREA_FILE] = fs.kind;
			v[AREA_FRAME_SIZE] = fs.frame_size;
			v[AREA_FRAMES] = fs.nr_frames;
			v[AREA_PHYS_RUN_MAX] = fs.phys_run_max;
			v[AREA_PHYS_RUN_FREE] = fs.phys_run_free;
			v[AREA_FRAMES_LENT] = fs.nr_lent;
			v[AREA_SORT_NS] = fs.sort_ns;
		}
		ucma_mutex_unlock(&ar->lock);
	}
}

static void snap_latency(struct stats_snap *s)
{
	if (s->have & SNAP_LATENCY)
		return;
	s->have |= SNAP_LATENCY;
	for (int m = 0; m < 2; m++)
		for (unsigned b = 0; b < LAT_BUCKETS; b++)
			s->lat[m][b] = atomic_load_explicit(&lat_hist[m][b], memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* The table of statistics                                                   */
/* ------------------------------------------------------------------------ */

enum stat_dim {
	DIM_ONE,		/* one name: the pattern itself */
	DIM_VMSTAT,		/* ucma_vmstat_names[i] */
	DIM_ZONE,		/* pattern with %s = zone name */
	DIM_ZONE_ORDER,		/* %s = zone, %u = order */
	DIM_ZONE_MT,		/* %s = zone, %s = migratetype */
	DIM_AREA,		/* %s = CMA area name */
};

struct stat_family;
typedef uint64_t (*stat_get_fn)(struct stats_snap *s, const struct stat_family *f, unsigned i,
				unsigned j);

/*
 * struct stat_family - one row of the table: a pattern, what it ranges
 * over, how to compute a value.  @arena: the family describes the arena
 * and is left out of the report until the arena exists (ucma_stat() still
 * reads it, as 0, when it does not range over areas).
 */
struct stat_family {
	const char *pattern;
	uint8_t dim;			/* enum stat_dim */
	uint8_t flags;			/* UCMA_STAT_F_* */
	bool arena;
	stat_get_fn get;
	size_t arg;
};

static uint64_t get_vmstat(struct stats_snap *s, const struct stat_family *f, unsigned i,
			   unsigned j)
{
	uint64_t v = atomic_load_explicit(&ucma_vmstat[i], memory_order_relaxed);

	/* The per-CPU page lists count their own (pcp.h). */
	if (i == UCMA_STAT_PAGE_ALLOC || i == UCMA_STAT_PAGE_FREE)
		v += ucma_pcp_events(ucma_arena_peek(), i == UCMA_STAT_PAGE_ALLOC);
	return v;
}

static uint64_t get_malloc(struct stats_snap *s, const struct stat_family *f, unsigned i,
			   unsigned j)
{
	uint64_t v;

	snap_malloc(s);
	memcpy(&v, (const char *)&s->m + f->arg, sizeof(v));
	return v;
}

static uint64_t get_free_total(struct stats_snap *s, const struct stat_family *f, unsigned i,
			       unsigned j)
{
	snap_zones(s);
	return s->z[UCMA_ZONE_NORMAL].free_pages + s->z[UCMA_ZONE_CMA].free_pages;
}

static uint64_t get_zone_free(struct stats_snap *s, const struct stat_family *f, unsigned i,
			      unsigned j)
{
	snap_zones(s);
	return s->z[i].free_pages;
}

static uint64_t get_zone_managed(struct stats_snap *s, const struct stat_family *f, unsigned i,
				 unsigned j)
{
	/* Geometry never changes after the arena is created: no lock. */
	return s->a ? s->a->zones[i].managed_pages : 0;
}

static uint64_t get_zone_pageblocks(struct stats_snap *s, const struct stat_family *f,
				    unsigned i, unsigned j)
{
	snap_pageblocks(s);
	return s->z[i].pageblocks[j];
}

static uint64_t get_zone_score(struct stats_snap *s, const struct stat_family *f, unsigned i,
			       unsigned j)
{
	snap_zones(s);
	return ucma_extfrag_score(s->z[i].free, UCMA_PAGEBLOCK_ORDER);
}

/* The kernel's node score: zone scores weighted by zone size. */
static uint64_t get_score_total(struct stats_snap *s, const struct stat_family *f, unsigned i,
				unsigned j)
{
	uint64_t total = 0, score = 0;

	if (!s->a)
		return 0;
	snap_zones(s);
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++)
		total += s->a->zones[zi].managed_pages;
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++)
		score += ucma_extfrag_score(s->z[zi].free, UCMA_PAGEBLOCK_ORDER) *
			 s->a->zones[zi].managed_pages / (total + 1);
	return score;
}

static uint64_t get_extfrag(struct stats_snap *s, const struct stat_family *f, unsigned i,
			    unsigned j)
{
	snap_zones(s);
	return (uint64_t)(int64_t)ucma_extfrag_index(s->z[i].free, j);
}

static uint64_t get_area(struct stats_snap *s, const struct stat_family *f, unsigned i,
			 unsigned j)
{
	snap_areas(s);
	return s->area[i][f->arg];
}

#define LAT_COUNT 0
static uint64_t get_latency(struct stats_snap *s, const struct stat_family *f, unsigned i,
			    unsigned j)
{
	unsigned pct = (unsigned)(f->arg & 0xff);
	bool migrated_only = f->arg & 0x100;
	uint64_t h[LAT_BUCKETS], n = 0;

	snap_latency(s);
	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		h[b] = s->lat[1][b] + (migrated_only ? 0 : s->lat[0][b]);
		n += h[b];
	}
	return pct == LAT_COUNT ? n : hist_percentile(h, pct);
}

static uint64_t get_stall(struct stats_snap *s, const struct stat_family *f, unsigned i,
			  unsigned j)
{
	uint64_t h[LAT_BUCKETS], n = 0;

	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		h[b] = atomic_load_explicit(&stall_hist[b], memory_order_relaxed);
		n += h[b];
	}
	return f->arg == LAT_COUNT ? n : hist_percentile(h, (unsigned)f->arg);
}

static uint64_t get_lend_borrowed(struct stats_snap *s, const struct stat_family *f, unsigned i,
				  unsigned j)
{
	return ucma_lend_borrowed_now();
}

#define EV UCMA_STAT_F_EVENT
#define MALLOC(name, field, fl) \
	{ name, DIM_ONE, fl, false, get_malloc, offsetof(struct ucma_malloc_counters, field) }
#define AREA(name, field, fl) { name, DIM_AREA, fl, true, get_area, field }
#define LAT(name, arg, fl) { name, DIM_ONE, fl, false, get_latency, arg }

/*
 * The report prints the families in this order.  Fixed names come before
 * patterns over CMA areas, so that a lookup of a fixed name can never be
 * taken by an area whose name makes a pattern spell it.
 */
static const struct stat_family stat_families[] = {
	{ NULL, DIM_VMSTAT, EV, false, get_vmstat, 0 },
	MALLOC("malloc_nmalloc", nmalloc, EV),
	MALLOC("malloc_nfree", nfree, EV),
	MALLOC("malloc_allocated", allocated_bytes, 0),
	MALLOC("malloc_active", active_bytes, 0),
	MALLOC("malloc_large", large_allocs, 0),
	MALLOC("malloc_overflow_bytes", overflow_bytes, 0),
	MALLOC("malloc_overflow_cached_bytes", overflow_cached_bytes, 0),
	MALLOC("malloc_slab_kept_bytes", slab_kept_bytes, 0),
	MALLOC("malloc_tcache_bytes", tcache_bytes, 0),
	{ "nr_free_pages", DIM_ONE, 0, true, get_free_total, 0 },
	{ "nr_free_pages_%s", DIM_ZONE, 0, true, get_zone_free, 0 },
	{ "nr_managed_pages_%s", DIM_ZONE, 0, true, get_zone_managed, 0 },
	{ "nr_pageblocks_%s_%s", DIM_ZONE_MT, 0, true, get_zone_pageblocks, 0 },
	{ "fragmentation_score", DIM_ONE, 0, true, get_score_total, 0 },
	{ "fragmentation_score_%s", DIM_ZONE, 0, true, get_zone_score, 0 },
	{ "extfrag_index_%s_%u", DIM_ZONE_ORDER, UCMA_STAT_F_SIGNED, true, get_extfrag, 0 },
	LAT("cma_alloc_latency_count", LAT_COUNT, EV),
	LAT("cma_alloc_latency_p50_ns", 50, 0),
	LAT("cma_alloc_latency_p99_ns", 99, 0),
	LAT("cma_alloc_migrate_latency_count", 0x100 | LAT_COUNT, EV),
	LAT("cma_alloc_migrate_latency_p50_ns", 0x100 | 50, 0),
	LAT("cma_alloc_migrate_latency_p99_ns", 0x100 | 99, 0),
	{ "lend_heap_pageblocks", DIM_ONE, 0, true, get_lend_borrowed, 0 },
	{ "lend_heap_stall_count", DIM_ONE, EV, false, get_stall, LAT_COUNT },
	{ "lend_heap_stall_p50_ns", DIM_ONE, 0, false, get_stall, 50 },
	{ "lend_heap_stall_p99_ns", DIM_ONE, 0, false, get_stall, 99 },
	AREA("cma_%s_size", AREA_SIZE, 0),
	AREA("cma_%s_used", AREA_USED, 0),
	AREA("cma_%s_maxchunk", AREA_MAXCHUNK, 0),
	AREA("cma_%s_allocs", AREA_ALLOCS, 0),
	AREA("cma_%s_alloc_success", AREA_SUCCESS, EV),
	AREA("cma_%s_alloc_fail", AREA_FAIL, EV),
	AREA("cma_%s_file", AREA_FILE, 0),
	AREA("cma_%s_frame_size", AREA_FRAME_SIZE, 0),
	AREA("cma_%s_frames", AREA_FRAMES, 0),
	AREA("cma_%s_phys_run_max", AREA_PHYS_RUN_MAX, 0),
	AREA("cma_%s_phys_run_free", AREA_PHYS_RUN_FREE, 0),
	AREA("cma_%s_frames_lent", AREA_FRAMES_LENT, 0),
	AREA("cma_%s_frames_sort_ns", AREA_SORT_NS, 0),
};

/*
 * Visit every name of every family.  With @report, families that describe
 * the arena are skipped while there is none.  @visit returns true to stop;
 * then so does the walk, returning true.
 */
typedef bool (*stat_visit_fn)(void *ctx, const struct stat_family *f, unsigned i, unsigned j,
			      const char *name);

static bool stats_walk(struct stats_snap *s, bool report, stat_visit_fn visit, void *ctx)
{
	char name[UCMA_STAT_NAME_MAX];

	for (size_t k = 0; k < UCMA_ARRAY_SIZE(stat_families); k++) {
		const struct stat_family *f = &stat_families[k];
		unsigned ni = 1, nj = 1;

		if (report && f->arena && !s->a)
			continue;
		switch (f->dim) {
		case DIM_VMSTAT:
			ni = UCMA_STAT_NR;
			break;
		case DIM_ZONE:
			ni = UCMA_ZONE_NR;
			break;
		case DIM_ZONE_ORDER:
			ni = UCMA_ZONE_NR;
			nj = UCMA_NR_ORDERS;
			break;
		case DIM_ZONE_MT:
			ni = UCMA_ZONE_NR;
			nj = UCMA_MT_NR;
			break;
		case DIM_AREA:
			ni = s->a ? (unsigned)s->a->nr_areas : 0;
			break;
		}
		for (unsigned i = 0; i < ni; i++) {
			for (unsigned j = 0; j < nj; j++) {
				switch (f->dim) {
				case DIM_ONE:
					snprintf(name, sizeof(name), "%s", f->pattern);
					break;
				case DIM_VMSTAT:
					snprintf(name, sizeof(name), "%s", ucma_vmstat_names[i]);
					break;
				case DIM_ZONE:
					snprintf(name, sizeof(name), f->pattern, zone_names[i]);
					break;
				case DIM_ZONE_ORDER:
					snprintf(name, sizeof(name), f->pattern, zone_names[i], j);
					break;
				case DIM_ZONE_MT:
					snprintf(name, sizeof(name), f->pattern, zone_names[i],
						 mt_names[j]);
					break;
				case DIM_AREA:
					snprintf(name, sizeof(name), f->pattern,
						 s->a->areas[i].name);
					break;
				}
				if (visit(ctx, f, i, j, name))
					return true;
			}
		}
	}
	return false;
}

bool ucma_stats_areas_clash(const char *a, const char *b, char *clash, size_t len)
{
	char na[128], nb[128];

	for (size_t i = 0; i < UCMA_ARRAY_SIZE(stat_families); i++) {
		const struct stat_family *fa = &stat_families[i];

		if (fa->dim != DIM_AREA)
			continue;
		snprintf(na, sizeof(na), fa->pattern, a);
		for (size_t k = 0; k < UCMA_ARRAY_SIZE(stat_families); k++) {
			const struct stat_family *fb = &stat_families[k];

			if (fb->dim != DIM_AREA)
				continue;
			snprintf(nb, sizeof(nb), fb->pattern, b);
			if (strcmp(na, nb) == 0) {
				snprintf(clash, len, "%s", na);
				return true;
			}
		}
	}
	return false;
}

/* Does @name possibly belong to family @f?  (A cheap test on the prefix.) */
static bool family_may_match(const struct stat_family *f, const char *name)
{
	const char *pct;

	if (!f->pattern)
		return true;
	pct = strchr(f->pattern, '%');
	if (!pct)
		return strcmp(f->pattern, name) == 0;
	return strncmp(f->pattern, name, (size_t)(pct - f->pattern)) == 0;
}

struct lookup {
	struct stats_snap *s;
	const char *name;
	uint64_t value;
	bool found;
};

static bool lookup_visit(void *ctx, const struct stat_family *f, unsigned i, unsigned j,
			 const char *name)
{
	struct lookup *l = ctx;

	if (!family_may_match(f, l->name) || strcmp(name, l->name) != 0)
		return false;
	l->value = f->get(l->s, f, i, j);
	l->found = true;
	return true;
}

/**
 * ucma_stat() - read one statistic by name.
 * @name:  a name as printed by ucma_stats_print(), e.g. "compact_stall",
 *         "nr_free_pages_cma", "cma_default_maxchunk", "extfrag_index_cma_9".
 * @value: where to store the value.  Names flagged signed (extfrag_index_*)
 *         hold an int64_t cast to uint64_t.
 *
 * Never initialises the library: before the arena exists, zone statistics
 * read 0 and no CMA area names exist.
 * Return: 0, or -1 with errno EINVAL (NULL argument) or ENOENT (unknown
 * name).
 */
int ucma_stat(const char *name, uint64_t *value)
{
	struct stats_snap s;
	struct lookup l;

	if (!name || !value) {
		errno = EINVAL;
		return -1;
	}
	if (strnlen(name, UCMA_STAT_NAME_MAX) >= UCMA_STAT_NAME_MAX) {
		errno = ENOENT;
		return -1;
	}
	snap_init(&s, ucma_arena_peek());
	l = (struct lookup){ .s = &s, .name = name };
	stats_walk(&s, false, lookup_visit, &l);
	if (!l.found) {
		errno = ENOENT;
		return -1;
	}
	*value = l.value;
	return 0;
}

struct foreach_ctx {
	struct stats_snap *s;
	bool values;
	ucma_stat_visit_fn fn;
	void *ctx;
	unsigned n;
};

static bool foreach_visit(void *ctx, const struct stat_family *f, unsigned i, unsigned j,
			  const char *name)
{
	struct foreach_ctx *c = ctx;

	c->fn(c->ctx, name, c->values ? f->get(c->s, f, i, j) : 0, f->flags);
	c->n++;
	return false;
}

/**
 * ucma_stats_foreach() - call @fn for every statistic of the report's
 * vmstat section, in order, with its value (0 unless @values) and its
 * UCMA_STAT_F_* flags.  @a is the arena (NULL: counters only).
 * @pageblocks: pageblocks per zone and migratetype that the caller has
 * just counted (shm.c, while it walks the pageblocks for its map), or NULL
 * to count them here: the walk is the costliest part on a large arena and
 * need not be made twice.  Takes zone and area locks: call it without
 * holding any ucma lock.
 * Return: the number of statistics visited.
 */
unsigned ucma_stats_foreach(struct ucma_arena *a, const uint64_t (*pageblocks)[UCMA_MT_NR],
			    bool values, ucma_stat_visit_fn fn, void *ctx)
{
	struct stats_snap s;
	struct foreach_ctx c = { .s = &s, .values = values, .fn = fn, .ctx = ctx };

	snap_init(&s, a);
	if (a && pageblocks) {
		for (int zi = 0; zi < UCMA_ZONE_NR; zi++)
			memcpy(s.z[zi].pageblocks, pageblocks[zi], sizeof(s.z[zi].pageblocks));
		s.have |= SNAP_PAGEBLOCKS;
	}
	stats_walk(&s, true, foreach_visit, &c);
	return c.n;
}

/* ------------------------------------------------------------------------ */
/* The report                                                                */
/* ------------------------------------------------------------------------ */

/*
 * struct sink - where the report goes: the caller's FILE, or a file
 * descriptor written through a stack buffer (at exit, where stdio's
 * buffers would come from malloc, which may be ucma's own).
 */
struct sink {
	FILE *f;
	int fd;
	int fallback;	/* written to when @fd is found closed, or -1 */
	int err;	/* the first write error, 0 if none */
	size_t len;
	char buf[4096];
};

static void sink_flush(struct sink *k)
{
	size_t off = 0;

	while (off < k->len) {
		ssize_t w = write(k->fd, k->buf + off, k->len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EBADF && k->fallback >= 0) {
			k->fd = k->fallback;
			k->fallback = -1;
			continue;
		}
		if (w <= 0) {
			if (!k->err)
				k->err = w < 0 ? errno : EIO;
			break;
		}
		off += (size_t)w;
	}
	k->len = 0;
}

__attribute__((format(printf, 2, 3))) static void sink_printf(struct sink *k, const char *fmt,
							      ...)
{
	va_list ap;

	if (k->f) {
		va_start(ap, fmt);
		vfprintf(k->f, fmt, ap);
		va_end(ap);
		return;
	}
	for (int attempt = 0; attempt < 2; attempt++) {
		size_t room = sizeof(k->buf) - k->len;
		int n;

		va_start(ap, fmt);
		n = vsnprintf(k->buf + k->len, room, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < room) {
			k->len += (size_t)n;
			return;
		}
		if (k->len == 0) {	/* longer than the buffer: cut */
			k->len = sizeof(k->buf) - 1;
			break;
		}
		sink_flush(k);
	}
	sink_flush(k);
}

struct print_ctx {
	struct sink *k;
	struct stats_snap *s;
};

static bool print_visit(void *ctx, const struct stat_family *f, unsigned i, unsigned j,
			const char *name)
{
	struct print_ctx *p = ctx;
	uint64_t v = f->get(p->s, f, i, j);

	if (f->flags & UCMA_STAT_F_SIGNED)
		sink_printf(p->k, "%s %lld\n", name, (long long)(int64_t)v);
	else
		sink_printf(p->k, "%s %llu\n", name, (unsigned long long)v);
	return false;
}

/* /proc/buddyinfo: free blocks per zone and order. */
static void print_buddyinfo(struct sink *k, struct stats_snap *s)
{
	snap_zones(s);
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		sink_printf(k, "Node 0, zone %8s ", zone_titles[zi]);
		for (unsigned o = 0; o < UCMA_NR_ORDERS; o++)
			sink_printf(k, "%6llu ", (unsigned long long)s->z[zi].free[o]);
		sink_printf(k, "\n");
	}
}

/* /proc/pagetypeinfo: pageblocks per migratetype. */
static void print_pagetypeinfo(struct sink *k, struct stats_snap *s)
{
	snap_pageblocks(s);
	sink_printf(k, "Page block order: %u\n", UCMA_PAGEBLOCK_ORDER);
	sink_printf(k, "Pages per block:  %u\n\n", UCMA_PAGEBLOCK_PAGES);
	sink_printf(k, "%-23s", "Number of blocks type");
	for (int mt = 0; mt < UCMA_MT_NR; mt++)
		sink_printf(k, " %12s", mt_titles[mt]);
	sink_printf(k, "\n");
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		sink_printf(k, "Node 0, zone %8s  ", zone_titles[zi]);
		for (int mt = 0; mt < UCMA_MT_NR; mt++)
			sink_printf(k, " %12llu", (unsigned long long)s->z[zi].pageblocks[mt]);
		sink_printf(k, "\n");
	}
	/* Lent to the heap: CMA pageblocks whose frames back NORMAL ones. */
	sink_printf(k, "%-23s %12llu\n", "CMA lent to the heap",
		    (unsigned long long)ucma_lend_borrowed_now());
}

/* The kernel's debugfs cma/<area>/ files, one line per area (in pages). */
static void print_areas(struct sink *k, struct stats_snap *s)
{
	static const char *const titles[AREA_NR_BITMAP_FIELDS] = { "size",   "used",    "maxchunk",
								   "allocs", "success", "fail" };

	snap_areas(s);
	sink_printf(k, "%-20s", "CMA area (pages)");
	for (int fi = 0; fi < AREA_NR_BITMAP_FIELDS; fi++)
		sink_printf(k, " %10s", titles[fi]);
	sink_printf(k, "\n");
	for (int i = 0; i < s->a->nr_areas; i++) {
		sink_printf(k, "%-20s", s->a->areas[i].name);
		for (int fi = 0; fi < AREA_NR_BITMAP_FIELDS; fi++)
			sink_printf(k, " %10llu", (unsigned long long)s->area[i][fi]);
		sink_printf(k, "\n");
	}
}

/* What backs each area: its file, its frames, its physically contiguous
 * runs (KiB; 0 where physical addresses are unknown). */
static void print_frames(struct sink *k, struct stats_snap *s)
{
	snap_areas(s);
	sink_printf(k, "%-20s %10s %10s %10s %12s %12s %8s\n", "CMA area frames", "file",
		    "frame KiB", "frames", "run max KiB", "run free KiB", "lent");
	for (int i = 0; i < s->a->nr_areas; i++) {
		const uint64_t *v = s->area[i];

		sink_printf(k, "%-20s %10s %10llu %10llu %12llu %12llu %8llu\n",
			    s->a->areas[i].name, ucma_frame_file_str((int)v[AREA_FILE]),
			    (unsigned long long)v[AREA_FRAME_SIZE] >> 10,
			    (unsigned long long)v[AREA_FRAMES],
			    (unsigned long long)v[AREA_PHYS_RUN_MAX] >> 10,
			    (unsigned long long)v[AREA_PHYS_RUN_FREE] >> 10,
			    (unsigned long long)v[AREA_FRAMES_LENT]);
	}
}

/* debugfs extfrag/extfrag_index: the index with three decimals. */
static void print_extfrag(struct sink *k, struct stats_snap *s)
{
	snap_zones(s);
	sink_printf(k, "Fragmentation index (extfrag_index)\n");
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		sink_printf(k, "Node 0, zone %8s ", zone_titles[zi]);
		for (unsigned o = 0; o < UCMA_NR_ORDERS; o++) {
			int idx = ucma_extfrag_index(s->z[zi].free, o);
			unsigned mag = (unsigned)(idx < 0 ? -idx : idx);

			sink_printf(k, "%s%u.%03u ", idx < 0 ? "-" : " ", mag / 1000, mag % 1000);
		}
		sink_printf(k, "\n");
	}
}

static void print_latency(struct sink *k, struct stats_snap *s)
{
	uint64_t n = 0;

	snap_latency(s);
	for (unsigned b = 0; b < LAT_BUCKETS; b++)
		n += s->lat[0][b] + s->lat[1][b];
	if (n == 0) {
		sink_printf(k, "ucma_alloc latency: no calls\n");
		return;
	}
	sink_printf(k, "ucma_alloc latency (ns)  %14s %14s\n", "no migration", "migration");
	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		if (!s->lat[0][b] && !s->lat[1][b])
			continue;
		sink_printf(k, "[%10llu, %10llu%s %14llu %14llu\n",
			    (unsigned long long)(b ? 1ull << b : 0),
			    (unsigned long long)(1ull << (b + 1)), b == LAT_BUCKETS - 1 ? "+)" : ") ",
			    (unsigned long long)s->lat[0][b], (unsigned long long)s->lat[1][b]);
	}
}

static void report(struct sink *k, struct ucma_arena *a)
{
	struct stats_snap s;
	struct print_ctx p = { .k = k, .s = &s };

	snap_init(&s, a);
	stats_walk(&s, true, print_visit, &p);
	if (a) {
		sink_printf(k, "\n");
		print_buddyinfo(k, &s);
		sink_printf(k, "\n");
		print_pagetypeinfo(k, &s);
		sink_printf(k, "\n");
		print_areas(k, &s);
		sink_printf(k, "\n");
		print_frames(k, &s);
		sink_printf(k, "\n");
		print_extfrag(k, &s);
	}
	sink_printf(k, "\n");
	print_latency(k, &s);
}

/**
 * ucma_stats_print() - write the statistics report to @f.
 * @f: an open stream; NULL is ignored.
 *
 * First every statistic as "name value" lines, /proc/vmstat style (the
 * names ucma_stat() reads), ending at the first empty line; then, once the
 * arena exists, free blocks per zone and order (/proc/buddyinfo style),
 * pageblocks per migratetype (/proc/pagetypeinfo style), one line per CMA
 * area, the fragmentation index per zone and order; last, the latency
 * histogram of ucma_alloc().  Also refreshes the live statistics segment.
 */
int ucma_stats_refresh(void)
{
	if (!ucma_arena_get())
		return -1;
	return ucma_shm_sync();
}

void ucma_stats_print(FILE *f)
{
	struct sink k = { .f = f, .fd = -1, .fallback = -1 };

	if (!f) {
		errno = EINVAL;
		return;
	}
	ucma_shm_update();
	report(&k, ucma_arena_peek());
}

/*
 * Expand UCMA_STATS_FILE: "%p" becomes the process id, "%%" a percent
 * sign.  Returns false when the result does not fit.
 */
static bool expand_path(const char *pattern, char *out, size_t outlen)
{
	size_t n = 0;

	for (const char *p = pattern; *p; p++) {
		char num[24];
		const char *add = num;

		if (p[0] == '%' && p[1] == 'p') {
			snprintf(num, sizeof(num), "%ld", (long)getpid());
			p++;
		} else if (p[0] == '%' && p[1] == '%') {
			num[0] = '%';
			num[1] = '\0';
			p++;
		} else {
			num[0] = *p;
			num[1] = '\0';
		}
		size_t len = strlen(add);

		if (n + len >= outlen)
			return false;
		memcpy(out + n, add, len);
		n += len;
	}
	out[n] = '\0';
	return true;
}

/*
 * The standard error the process started with, for the report at exit:
 * programs that check their output close descriptor 2 at exit, before
 * atexit handlers registered earlier run (GNU ls and sort do), and the
 * report went nowhere.  Written to only when descriptor 2 is found
 * closed, so a program that redirects its standard error still gets the
 * report where it sent it.  Above the low numbers programs expect to get
 * from open() (ucma_os_dup_high()); close-on-exec.  The program may close
 * the copy (closefrom()) and get the number back for a file of its own:
 * the report goes there only while the number still names the file the
 * copy was made of (@stats_stderr_id).
 */
static int stats_stderr = -1;
static struct stat stats_stderr_id;

void ucma_stats_keep_stderr(void)
{
	if (!ucma_opt.stats || ucma_opt.stats_file[0] || stats_stderr >= 0)
		return;
	stats_stderr = ucma_os_dup_high(2);
	if (stats_stderr >= 0 && fstat(stats_stderr, &stats_stderr_id) != 0) {
		ucma_os_close(stats_stderr);
		stats_stderr = -1;
	}
}

/* The copy of the standard error, if it still is one, else -1. */
static int stats_stderr_still(void)
{
	struct stat st;

	if (stats_stderr < 0 || fstat(stats_stderr, &st) != 0 ||
	    st.st_dev != stats_stderr_id.st_dev || st.st_ino != stats_stderr_id.st_ino)
		return -1;
	return stats_stderr;
}

/**
 * ucma_stats_at_exit() - print the report at exit when UCMA_STATS=1 or
 * UCMA_STATS_FILE is set: to stderr, or to the file (created or truncated,
 * mode 0644 less the umask).  Registered with atexit() by init.c.  Formats
 * into a stack buffer and writes with write(2): it allocates nothing.
 */
void ucma_stats_at_exit(void)
{
	char path[PATH_MAX];
	struct sink k = { .f = NULL, .fd = 2, .fallback = stats_stderr_still() };

	if (!ucma_opt.stats && !ucma_opt.stats_file[0])
		return;
	if (ucma_opt.stats_file[0]) {
		if (!expand_path(ucma_opt.stats_file, path, sizeof(path))) {
			ucma_log("UCMA_STATS_FILE: path too long: %s", ucma_opt.stats_file);
			return;
		}
		/* Without a reader, opening a FIFO would block the exiting
		 * program for good: O_NONBLOCK makes it fail (ENXIO) instead,
		 * and is taken off again for the writes. */
		k.fallback = -1;
		k.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
		if (k.fd < 0) {
			ucma_log("UCMA_STATS_FILE: cannot write %s: %s%s", path, strerror(errno),
				 errno == ENXIO ? " (a FIFO nobody reads)" : "");
			return;
		}
		(void)fcntl(k.fd, F_SETFL, fcntl(k.fd, F_GETFL) & ~O_NONBLOCK);
	}
	report(&k, ucma_arena_peek());
	sink_flush(&k);
	/* (Not the copy of standard error the sink may have moved to.) */
	if (ucma_opt.stats_file[0]) {
		if (close(k.fd) != 0 && !k.err && errno != EINTR)
			k.err = errno;
		if (k.err)
			ucma_log("UCMA_STATS_FILE: the report to %s is incomplete: %s", path,
				 strerror(k.err));
	}
}
