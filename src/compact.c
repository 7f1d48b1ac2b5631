/*
 * compact.c - memory compaction: moving movable objects so that free
 * memory forms large blocks, up to whole pageblocks (the kernel's
 * mm/compaction.c), plus the public ucma_compact() and
 * ucma_compact_order(), and direct compaction for failed allocations.
 *
 * Direction.  In each zone the migrate scanner walks pageblocks upward
 * from the start of the zone and empties them; the free scanner walks
 * downward from the end and hands out the pageblocks that receive the
 * moved objects.  So free space collects at the LOW end of each zone.
 * That is where contiguous allocations look first: cma.c's
 * find_zero_area() searches a CMA area from its start and ucma_alloc()
 * takes the first candidate it can empty, so after compaction its first
 * candidates are free already and need no migration at all (NOWAIT
 * allocations then succeed too).  The objects alloc-contig-range moves
 * out of a run go upward as well (zone.c's ucma_pages_alloc_avoid()
 * searches above the run first), so the two never undo each other's
 * work.  The kernel's scanners run the same way.
 *
 * A run.  All state of one run over one zone lives in a struct
 * ucma_compact_control.  compact_zone() is the kernel's loop: while
 * compact_finished() says UCMA_COMPACT_CONTINUE, the migrate scanner takes
 * the next pageblock, snapshots its runs of pages under the zone lock,
 * selects what is worth moving, isolates the pageblock (so nothing new is
 * placed there and emptied movable slabs are destroyed, not kept), moves
 * the selected runs with ucma_migrate_run(), waits for a grace period so
 * the old copies are really free, and undoes the isolation.
 *
 * Targets.  The free scanner keeps a window [free_pfn, end of zone): the
 * copies go there and nowhere else.  It is expressed as a migrate target
 * avoiding [0, free_pfn) (the NORMAL zone, which lies below the CMA zone,
 * adds no_cma), which the allocators honour by searching: movable slabs
 * with room in range first, and zone.c's ucma_pages_alloc_in(), best fit
 * among the extents of free pages in range, so holes are filled tightly
 * and before a free pageblock is broken.  When a copy finds no room, the
 * free scanner moves down to the next pageblock that can take objects; it
 * never passes the pageblock above the one being emptied.
 *
 * Meeting.  The kernel's run ends when the scanners meet, which is right
 * for pages: any free page takes any page.  Objects here are up to 256 KiB
 * and the holes left above are often smaller, so a pageblock whose largest
 * object finds no room above is passed over instead (runs are moved
 * largest first, so usually nothing was moved in vain), and the migrate
 * scanner goes on upward, the window shrinking with it, to empty sparse
 * pageblocks into what room is left above them.  The run is complete
 * (UCMA_COMPACT_COMPLETE) when the migrate scanner reaches the last
 * pageblock.  Objects only ever move up within a run, so it cannot cycle.
 *
 * Worth moving.  A run for an order (ucma_compact_order(), direct
 * compaction) looks at its pageblock in aligned chunks of that order and
 * moves the contents of a chunk only if the whole chunk can come free: a
 * chunk holding unmovable memory, a run longer than a pageblock, or (below
 * SYNC_FULL) a pinned object is left alone, as the kernel's async
 * compaction gives up an order-aligned block at the first page it cannot
 * isolate.  A pass without an order (ucma_compact(), the background
 * thread) at ASYNC uses pageblock-sized chunks (the fragmentation score
 * counts whole pageblocks); at SYNC_LIGHT and SYNC_FULL it moves every
 * movable run.
 *
 * Skip hints and cached positions.  A pageblock from which nothing could
 * be moved gets UCMA_PB_SKIP, with the order it was useless for; the
 * hint is honoured only by requests of that order or larger, so an order-9
 * failure never stops an order-2 request (the kernel needed that fix).
 * Where the scanners stopped is cached in the zone, so the next bounded
 * run goes on from there; when the migrate scanner has crossed the zone,
 * the positions start over.
 * Hints are forgotten when a SYNC_FULL run starts (it rebuilds them),
 * when the background thread finishes a cycle, and when direct
 * compaction restarts after the longest deferral.
 *
 * Priorities.  ASYNC: cached positions, hints, pinned objects skipped
 * without waiting, at most ucma_compact_async_pageblocks pageblocks looked
 * into (free, hinted and unsuitable ones are passed by) per zone and run.  SYNC_LIGHT: the same without the bound, waiting for one
 * pin per run.  SYNC_FULL: the whole zone from both ends, ignoring cached
 * positions and hints (the kernel's whole_zone fix: a whole-zone run that
 * started from cached positions missed what lay behind them), waiting
 * briefly for up to COMPACT_PIN_WAITS pins per run.
 *
 * Grace periods.  The old copies of what a pageblock held are freed after
 * a grace period, and the pageblock stays isolated until then, so they
 * come back to it and it comes free whole.  A run for an order checks for
 * a free block of that order after each pageblock: one grace period per
 * pageblock.  A SYNC_FULL run without one (ucma_compact()) empties
 * COMPACT_DRAIN_BATCH pageblocks, holding them isolated, before it waits:
 * the freed pageblocks are wanted only when the run ends, and a grace
 * period that finds a reader inside a section waits for it (liburcu-bp
 * polls every 10 ms).  bench_highalloc's ucma_compact() drained after each
 * of 250 pageblocks (112 grace periods with a reader about), now 32 times
 * (15).  Never more than an eighth of a small zone's pageblocks are
 * held so: other threads find their free pages unusable meanwhile.  A
 * grace period longer than UCMA_RCU_SLOW_GRACE_NS says a reader held it
 * up, and the next ones will be as long: the batch doubles, up to an
 * eighth of the zone (COMPACT_DRAIN_BATCH_MAX at most).  Every slow grace
 * period since the last release counts, also one that a full queue of
 * deferred frees waited for in the middle of a migration (migrate.c):
 * that wait lets the next drain find the reader outside its section, and
 * timing only the drain at the end of a batch missed it.  With a reader
 * thread, bench_highalloc's compaction waits 7 times instead of 15.
 *
 * Suitability and deferral are the kernel's: compaction for an order runs
 * only with 2^order + (2 << order) free pages, and, above order 3 (small
 * orders are always worth a try), when the fragmentation index says a
 * failure comes from fragmentation (> 500), not shortage.  Direct
 * compaction that fails at SYNC_FULL defers the zone for 1, 3, 7 ... 63
 * further attempts (defer_compaction()); success resets it.
 *
 * What the kernel had to fix later, done here from the start: a
 * whole-zone run ignores the cached positions (it used to start from them
 * and miss what lay behind) and the skip hints; hints do not make small
 * orders fail for the sake of large ones; every order is compacted, not
 * only huge blocks; the fragmentation index vetoes only costly orders;
 * async compaction gives up an aligned block at the first object it cannot
 * move instead of moving the rest in vain; proactive compaction backs off
 * when it does not help (compactd.c).
 *
 * Locking: zone->compact_lock serialises runs over a zone and protects the
 * compaction fields of struct ucma_zone and the skip hints of the zone's
 * pageblocks.  It is taken before anything a run needs (slab class locks,
 * the zone lock, drains) and never while holding one of them; the first
 * of fork.c's stages takes it.  The zone lock is held only to
 * snapshot one pageblock or to read counters.  Nothing here runs inside a
 * read-side section: a run waits for grace periods.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"

#include "copy.h"
#include "handle.h"
#include "pcp.h"
#include "rcu.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define COMPACT_MAX_DEFER_SHIFT   6	/* defer up to 63 attempts */
#define COMPACT_COSTLY_ORDER      3	/* PAGE_ALLOC_COSTLY_ORDER */
#define COMPACT_EXTFRAG_THRESHOLD 500	/* sysctl_extfrag_threshold */
#define COMPACT_PIN_WAITS         4	/* SYNC_FULL: pins waited for per run */
#define COMPACT_DRAIN_BATCH       8	/* SYNC_FULL, no order: pageblocks per grace period */
#define COMPACT_DRAIN_BATCH_MAX   64	/* ... after grace periods that readers held up */

unsigned ucma_compact_async_pageblocks = 16;

/* One allocated run of pages found by the migrate scanner. */
struct compact_run {
	uint32_t head;
	uint32_t npages;
	uint64_t owner;
	uint8_t owner_type;	/* enum ucma_run_owner */
	bool blocked;		/* cannot be moved now */
	bool selected;		/* to be moved */
};

/*
 * struct ucma_compact_control - one compaction run over one zone.
 *
 * @order is the block the caller wants (-1 for a pass without one);
 * @chunk_order the granularity at which "can this come free" is judged
 * (-1: move every movable run).  The migrate scanner is at @migrate_pfn,
 * the pageblock it looks at next; the copies go to [@free_pfn, end of
 * zone), and @free_pfn only goes down, never to or below the pageblock
 * being emptied, so a copy never lands where the migrate scanner works or
 * has worked.  @target says the same to the allocators.  @budget counts
 * the pageblocks an ASYNC run may still scan; @pin_waits the pinned
 * objects it may still wait for.  @abort, when set, asks the run to stop
 * at the next pageblock.  The counters go to the vmstat at the end.
 * @runs holds the snapshot of the current pageblock.  Owned by the thread
 * running compact_zone(), with the zone's compact_lock held.
 */
struct ucma_compact_control {
	struct ucma_arena *arena;
	struct ucma_zone *zone;
	int order;
	int prio;
	int chunk_order;
	bool whole_zone;		/* SYNC_FULL: zone ends, hints ignored */
	bool skip_on_failure;		/* a pinned object blocks its chunk */
	uint32_t migrate_pfn;
	uint32_t free_pfn;
	unsigned budget;
	unsigned pin_waits;
	const _Atomic int *abort;
	struct ucma_migrate_target target;
	uint64_t migrate_scanned;	/* pages of pageblocks looked into */
	uint64_t free_scanned;		/* pages of pageblocks the free scanner passed */
	uint64_t isolated;		/* pages of runs selected for moving */
	unsigned moved;			/* runs emptied in the current pageblock */
	unsigned nr_isolated;		/* pageblocks waiting for a grace period */
	unsigned drain_batch;		/* at most; COMPACT_DRAIN_BATCH or less at first */
	unsigned drain_batch_max;	/* an eighth of the zone, up to COMPACT_DRAIN_BATCH_MAX; 1 but for SYNC_FULL without an order */
	uint64_t slow_graces;		/* rcu_grace_slow at the last release */
	uint32_t isolated_pfn[COMPACT_DRAIN_BATCH_MAX];
	unsigned nr_runs;
	struct compact_run runs[UCMA_PAGEBLOCK_PAGES];
};

static unsigned order_for(uint32_t npages)
{
	return npages <= 1 ? 0 : 32u - (unsigned)__builtin_clz(npages - 1);
}

/* ------------------------------------------------------------------------ */
/* Zone predicates and formulas                                              */
/* ------------------------------------------------------------------------ */

bool ucma_zone_has_free_block(struct ucma_zone *z, unsigned order)
{
	bool found = false;

	ucma_mutex_lock(&z->lock);
	for (unsigned o = order; o < UCMA_NR_ORDERS && !found; o++)
		for (int mt = 0; mt < UCMA_MT_NR && !found; mt++)
			found = mt != UCMA_MT_ISOLATE && z->free_area[o].nr_free[mt];
	ucma_mutex_unlock(&z->lock);
	return found;
}

int ucma_fragmentation_index(struct ucma_zone *z, unsigned order)
{
	uint64_t counts[UCMA_NR_ORDERS];

	ucma_zone_free_counts(z, counts);
	return ucma_extfrag_index(counts, order);
}

unsigned ucma_fragmentation_score(struct ucma_zone *z)
{
	uint64_t counts[UCMA_NR_ORDERS];

	ucma_zone_free_counts(z, counts);
	return ucma_extfrag_score(counts, UCMA_PAGEBLOCK_ORDER);
}

int ucma_compaction_suitable(struct ucma_zone *z, unsigned order)
{
	uint64_t free_pages;

	if (ucma_zone_has_free_block(z, order))
		return UCMA_COMPACT_SUCCESS;
	ucma_mutex_lock(&z->lock);
	free_pages = z->free_pages - z->isolated_free_pages;
	ucma_mutex_unlock(&z->lock);
	/* Runs on per-CPU lists are free too: compaction drains them. */
	free_pages += ucma_pcp_pages(z);
	/* Room for the block plus a gap for the copies (compact_gap()). */
	if (free_pages < (1ull << order) + (2ull << order))
		return UCMA_COMPACT_SKIPPED;
	if (order > COMPACT_COSTLY_ORDER) {
		int fragindex = ucma_fragmentation_index(z, order);

		if (fragindex >= 0 && fragindex <= COMPACT_EXTFRAG_THRESHOLD)
			return UCMA_COMPACT_SKIPPED;
	}
	return UCMA_COMPACT_CONTINUE;
}

/* ------------------------------------------------------------------------ */
/* Deferral (the kernel's defer_compaction() family); compact_lock held      */
/* ------------------------------------------------------------------------ */

static void defer_compaction(struct ucma_zone *z, int order)
{
	z->compact_considered = 0;
	z->compact_defer_shift++;
	if (order < z->compact_order_failed)
		z->compact_order_failed = order;
	if (z->compact_defer_shift > COMPACT_MAX_DEFER_SHIFT)
		z->compact_defer_shift = COMPACT_MAX_DEFER_SHIFT;
}

/* Returns true if compaction for @order should be skipped this time. */
static bool compaction_deferred(struct ucma_zone *z, int order)
{
	unsigned defer_limit = 1u << z->compact_defer_shift;

	if (order < z->compact_order_failed)
		return false;
	if (++z->compact_considered >= defer_limit) {
		z->compact_considered = defer_limit;
		return false;
	}
	return true;
}

static void compaction_defer_reset(struct ucma_zone *z, int order, bool alloc_success)
{
	if (alloc_success) {
		z->compact_considered = 0;
		z->compact_defer_shift = 0;
	}
	if (order >= z->compact_order_failed)
		z->compact_order_failed = order + 1;
}

/* Returns true if compaction restarts after the longest deferral. */
static bool compaction_restarting(struct ucma_zone *z, int order)
{
	if (order < z->compact_order_failed)
		return false;
	return z->compact_defer_shift == COMPACT_MAX_DEFER_SHIFT &&
	       z->compact_considered >= 1u << z->compact_defer_shift;
}

/* ------------------------------------------------------------------------ */
/* Skip hints and cached positions; compact_lock held                        */
/* ------------------------------------------------------------------------ */

static void reset_hints_locked(struct ucma_zone *z)
{
	struct ucma_arena *a = z->arena;
	uint32_t last = z->end_pfn >> UCMA_PAGEBLOCK_ORDER;

	for (uint32_t b = z->start_pfn >> UCMA_PAGEBLOCK_ORDER; b < last; b++)
		a->blocks[b].flags &= (uint8_t)~(UCMA_PB_SKIP | (0xfu << UCMA_PB_SKIP_ORDER_SHIFT));
	z->compact_cached_migrate_pfn = z->start_pfn;
	z->compact_cached_free_pfn = z->end_pfn;
}

void ucma_compact_reset_hints(struct ucma_zone *z)
{
	ucma_mutex_lock(&z->compact_lock);
	reset_hints_locked(z);
	ucma_mutex_unlock(&z->compact_lock);
}

/* The order a hint is set for and checked against in this run. */
static unsigned hint_order(const struct ucma_compact_control *cc)
{
	return cc->order >= 0 ? (unsigned)cc->order : UCMA_PAGEBLOCK_ORDER;
}

/* Returns true if the pageblock at @pfn is worth scanning for this run. */
static bool isolation_suitable(const struct ucma_compact_control *cc, uint32_t pfn)
{
	uint8_t flags = ucma_pfn_block(cc->arena, pfn)->flags;

	if (cc->whole_zone || !(flags & UCMA_PB_SKIP))
		return true;
	return hint_order(cc) < (unsigned)(flags >> UCMA_PB_SKIP_ORDER_SHIFT);
}

/* Nothing could be moved out of the pageblock at @pfn for this order. */
static void set_skip_hint(struct ucma_compact_control *cc, uint32_t pfn)
{
	struct ucma_pageblock *pb = ucma_pfn_block(cc->arena, pfn);
	unsigned order = hint_order(cc), had = pb->flags >> UCMA_PB_SKIP_ORDER_SHIFT;

	if ((pb->flags & UCMA_PB_SKIP) && had <= order)
		return;
	pb->flags = (uint8_t)((pb->flags & ((1u << UCMA_PB_SKIP_ORDER_SHIFT) - 1)) | UCMA_PB_SKIP |
			      (order << UCMA_PB_SKIP_ORDER_SHIFT));
}

/* Where this run starts: the zone ends, or where the last run stopped. */
static void init_scanners(struct ucma_compact_control *cc)
{
	struct ucma_zone *z = cc->zone;
	uint32_t m = z->compact_cached_migrate_pfn, f = z->compact_cached_free_pfn;

	if (cc->whole_zone || m < z->start_pfn || f > z->end_pfn || m >= f ||
	    m + UCMA_PAGEBLOCK_PAGES >= z->end_pfn) {
		m = z->start_pfn;
		f = z->end_pfn;
	}
	cc->migrate_pfn = m;
	cc->free_pfn = f;
	cc->target.avoid_start = 0;
	cc->target.avoid_end = f;
}

static void update_cached_positions(struct ucma_compact_control *cc, int ret)
{
	struct ucma_zone *z = cc->zone;

	if (ret == UCMA_COMPACT_COMPLETE) {
		z->compact_cached_migrate_pfn = z->start_pfn;
		z->compact_cached_free_pfn = z->end_pfn;
	} else if (!cc->whole_zone) {
		z->compact_cached_migrate_pfn = cc->migrate_pfn;
		z->compact_cached_free_pfn = cc->free_pfn;
	}
}

/* ------------------------------------------------------------------------ */
/* The free scanner                                                          */
/* ------------------------------------------------------------------------ */

/* Returns true if pageblock @pb can receive moved objects (zone lock). */
static bool suitable_migration_target(const struct ucma_compact_control *cc,
				      const struct ucma_pageblock *pb)
{
	if (pb->isolate_count || pb->nr_free == 0)
		return false;
	return pb->mt == (cc->zone->id == UCMA_ZONE_CMA ? UCMA_MT_CMA : UCMA_MT_MOVABLE);
}

/*
 * isolate_freepages() - move the free scanner down to the next pageblock
 * that can take objects, widening the window of targets.  The kernel's
 * free scanner takes the free pages off the lists; here they stay there
 * and the allocators are told where to look, so nothing is left to give
 * back when the run ends.  Returns false when the scanners meet.
 */
static bool isolate_freepages(struct ucma_compact_control *cc)
{
	struct ucma_zone *z = cc->zone;
	uint32_t low = cc->migrate_pfn + UCMA_PAGEBLOCK_PAGES;
	uint32_t pfn = cc->free_pfn;
	bool found = false;

	ucma_mutex_lock(&z->lock);
	while (pfn > low && !found) {
		pfn -= UCMA_PAGEBLOCK_PAGES;
		cc->free_scanned += UCMA_PAGEBLOCK_PAGES;
		found = suitable_migration_target(cc, ucma_pfn_block(cc->arena, pfn));
	}
	ucma_mutex_unlock(&z->lock);
	cc->free_pfn = found ? pfn : low;
	cc->target.avoid_end = cc->free_pfn;
	return found;
}

/* ------------------------------------------------------------------------ */
/* The migrate scanner                                                       */
/* ------------------------------------------------------------------------ */

static void record_run(struct ucma_compact_control *cc, uint32_t head, uint32_t start)
{
	const struct ucma_page *p = &cc->arena->pages[head];
	struct compact_run *r = &cc->runs[cc->nr_runs++];

	r->head = head;
	r->npages = p->aux;
	r->owner_type = __atomic_load_n(&p->owner_type, __ATOMIC_ACQUIRE);
	r->owner = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
	r->selected = false;
	/* Runs longer than a pageblock are never moved: moving one frees as
	 * many pageblocks as it takes (the kernel skips such compound pages). */
	r->blocked = (r->owner_type != UCMA_OWN_MOVABLE && r->owner_type != UCMA_OWN_MSLAB) ||
		     r->npages > UCMA_PAGEBLOCK_PAGES || head < start;
}

/*
 * Snapshot the allocated runs of the pageblock at cc->migrate_pfn, walking
 * head to head under the zone lock as cma.c does.  Returns false if the
 * pageblock is no migration source: free, isolated, or (ASYNC) not a
 * movable pageblock, as the kernel's async compaction scans MOVABLE and
 * CMA pageblocks only.
 */
static bool snapshot_pageblock(struct ucma_compact_control *cc)
{
	struct ucma_arena *a = cc->arena;
	struct ucma_zone *z = cc->zone;
	uint32_t start = cc->migrate_pfn, end = start + UCMA_PAGEBLOCK_PAGES;
	const struct ucma_pageblock *pb = ucma_pfn_block(a, start);
	bool ok;

	cc->nr_runs = 0;
	ucma_mutex_lock(&z->lock);
	ok = !pb->isolate_count && pb->nr_free < UCMA_PAGEBLOCK_PAGES;
	if (cc->prio == UCMA_COMPACT_ASYNC)
		ok = ok && (pb->mt == UCMA_MT_MOVABLE || pb->mt == UCMA_MT_CMA);
	for (uint32_t pfn = start; ok && pfn < end;) {
		const struct ucma_page *p = &a->pages[pfn];

		if (p->kind == UCMA_PK_FREE) {
			pfn += 1u << p->order;
		} else if (p->kind == UCMA_PK_RUN) {
			record_run(cc, pfn, start);
			pfn += p->aux;
		} else if (p->kind == UCMA_PK_TAIL) {
			record_run(cc, p->aux, start);	/* a run from an earlier pageblock */
			pfn = p->aux + a->pages[p->aux].aux;
		} else {
			pfn++;
		}
	}
	ucma_mutex_unlock(&z->lock);
	return ok;
}

/*
 * select_runs() - mark the runs of the snapshot worth moving; returns how
 * many.  With a chunk order, only chunks that can come free whole are
 * worth it: a run is moved when some chunk it overlaps holds nothing
 * blocked.
 */
static unsigned select_runs(struct ucma_compact_control *cc)
{
	uint32_t start = cc->migrate_pfn, cs;
	unsigned nsel = 0, first = 0;

	if (cc->chunk_order < 0) {
		for (unsigned i = 0; i < cc->nr_runs; i++) {
			cc->runs[i].selected = !cc->runs[i].blocked;
			nsel += cc->runs[i].selected;
		}
		return nsel;
	}
	if (cc->skip_on_failure) {
		for (unsigned i = 0; i < cc->nr_runs; i++)
			if (!cc->runs[i].blocked && ucma_run_pinned(cc->arena, cc->runs[i].head))
				cc->runs[i].blocked = true;
	}
	cs = 1u << cc->chunk_order;
	for (uint32_t c = start; c < start + UCMA_PAGEBLOCK_PAGES; c += cs) {
		bool any = false, blocked = false;
		unsigned j;

		while (first < cc->nr_runs && cc->runs[first].head + cc->runs[first].npages <= c)
			first++;
		for (j = first; j < cc->nr_runs && cc->runs[j].head < c + cs; j++) {
			any = true;
			blocked |= cc->runs[j].blocked;
		}
		if (!any || blocked)
			continue;
		for (j = first; j < cc->nr_runs && cc->runs[j].head < c + cs; j++) {
			if (!cc->runs[j].selected) {
				cc->runs[j].selected = true;
				nsel++;
			}
		}
	}
	return nsel;
}

/* Largest first: packs the holes above better (first fit decreasing), and
 * when the largest finds no room, the small ones have not been moved in
 * vain. */
static int by_size_desc(const void *x, const void *y)
{
	const struct compact_run *r = x, *s = y;

	return (r->npages < s->npages) - (r->npages > s->npages);
}

#define SORT_INSERTION_MAX 64	/* runs; more go to qsort() */

/* The snapshot's runs, largest first.  A pageblock holds a few dozen runs
 * as a rule, and sorting them in place costs less than qsort()'s copies
 * and indirect calls (8 % of ucma_compact()'s instructions in
 * bench_highalloc). */
static void sort_runs(struct ucma_compact_control *cc)
{
	if (cc->nr_runs > SORT_INSERTION_MAX) {
		qsort(cc->runs, cc->nr_runs, sizeof(cc->runs[0]), by_size_desc);
		return;
	}
	for (unsigned i = 1; i < cc->nr_runs; i++) {
		struct compact_run r = cc->runs[i];
		unsigned j = i;

		for (; j > 0 && cc->runs[j - 1].npages < r.npages; j--)
			cc->runs[j] = cc->runs[j - 1];
		cc->runs[j] = r;
	}
}

/* After a grace period, the emptied pageblocks go back to their
 * migratetypes, with the old copies freed into them. */
static void release_isolated(struct ucma_compact_control *cc)
{
	uint64_t slow;

	if (cc->nr_isolated == 0)
		return;
	/* The waits for readers alone: freeing the old copies may take long
	 * too (a slow machine, a sanitizer), without any reader about.  The
	 * count is the process's: a slow wait of another thread also says
	 * readers hold sections open now. */
	ucma_defer_drain();
	slow = ucma_vmstat_read(UCMA_STAT_RCU_GRACE_SLOW);
	if (slow != cc->slow_graces)
		cc->drain_batch = cc->drain_batch * 2 < cc->drain_batch_max ? cc->drain_batch * 2 :
									      cc->drain_batch_max;
	for (unsigned i = 0; i < cc->nr_isolated; i++)
		ucma_undo_isolate_range(cc->arena, cc->isolated_pfn[i],
					cc->isolated_pfn[i] + UCMA_PAGEBLOCK_PAGES);
	cc->nr_isolated = 0;
	cc->slow_graces = slow;
}

/* Move one run out of the pageblock, widening the target window as
 * needed.  Returns false when it finds no room above the pageblock. */
static bool migrate_one(struct ucma_compact_control *cc, const struct compact_run *r)
{
	for (;;) {
		bool waiting = cc->target.wait_pins;
		unsigned pinned = 0;
		int m = ucma_migrate_run(cc->arena, r->head, &cc->target, &pinned, NULL);

		if (waiting && pinned) {
			cc->pin_waits = pinned >= cc->pin_waits ? 0 : cc->pin_waits - pinned;
			cc->target.wait_pins = cc->pin_waits > 0;
		}
		if (m == UCMA_MIGRATE_NOMEM) {
			if (!isolate_freepages(cc))
				return false;
			continue;
		}
		if (m == UCMA_MIGRATE_OK && !pinned)
			cc->moved++;
		return true;
	}
}

/*
 * compact_pageblock() - the migrate scanner's work on one pageblock.
 * Returns UCMA_COMPACT_CONTINUE, or UCMA_COMPACT_COMPLETE when there is
 * nothing above it to move things to.  A run that finds no room above
 * ends the work on this pageblock only (see "Meeting" above).
 */
static int compact_pageblock(struct ucma_compact_control *cc)
{
	struct ucma_arena *a = cc->arena;
	uint32_t start = cc->migrate_pfn, end = start + UCMA_PAGEBLOCK_PAGES;
	int ret = UCMA_COMPACT_CONTINUE;
	unsigned nsel;

	if (!isolation_suitable(cc, start) || !snapshot_pageblock(cc))
		return UCMA_COMPACT_CONTINUE;
	cc->migrate_scanned += UCMA_PAGEBLOCK_PAGES;
	nsel = select_runs(cc);
	if (nsel == 0) {
		set_skip_hint(cc, start);
		return UCMA_COMPACT_CONTINUE;
	}
	if (cc->free_pfn == cc->zone->end_pfn && !isolate_freepages(cc))
		return UCMA_COMPACT_COMPLETE;	/* the last pageblock */
	if (ucma_isolate_range(a, start, end) != 0)
		return UCMA_COMPACT_CONTINUE;
	sort_runs(cc);
	cc->moved = 0;
	for (unsigned i = 0; i < cc->nr_runs; i++) {
		if (!cc->runs[i].selected)
			continue;
		if (cc->abort && atomic_load_explicit(cc->abort, memory_order_relaxed))
			break;
		cc->isolated += cc->runs[i].npages;
		if (!migrate_one(cc, &cc->runs[i]))
			break;	/* no room: the pageblock stays */
	}
	/*
	 * The old copies are free only after readers have left; drained
	 * while the pageblock is still isolated, so a movable slab emptied
	 * here is destroyed instead of being kept for reuse.
	 */
	cc->isolated_pfn[cc->nr_isolated++] = start;
	if (cc->nr_isolated >= cc->drain_batch)
		release_isolated(cc);
	if (cc->moved == 0)
		set_skip_hint(cc, start);
	return ret;
}

/* Returns UCMA_COMPACT_CONTINUE while the run should go on. */
static int compact_finished(struct ucma_compact_control *cc)
{
	if (cc->abort && atomic_load_explicit(cc->abort, memory_order_relaxed))
		return UCMA_COMPACT_CONTENDED;
	if (cc->order >= 0 && ucma_zone_has_free_block(cc->zone, (unsigned)cc->order))
		return UCMA_COMPACT_SUCCESS;
	if (cc->migrate_pfn + UCMA_PAGEBLOCK_PAGES >= cc->zone->end_pfn)
		return UCMA_COMPACT_COMPLETE;
	if (cc->budget == 0)
		return UCMA_COMPACT_PARTIAL_SKIPPED;
	return UCMA_COMPACT_CONTINUE;
}

static int compact_zone(struct ucma_compact_control *cc)
{
	int ret;

	if (cc->order >= 0) {
		ret = ucma_compaction_suitable(cc->zone, (unsigned)cc->order);
		if (ret != UCMA_COMPACT_CONTINUE)
			return ret;
	}
	if (cc->whole_zone)
		reset_hints_locked(cc->zone);
	init_scanners(cc);
	while ((ret = compact_finished(cc)) == UCMA_COMPACT_CONTINUE) {
		uint64_t scanned = cc->migrate_scanned;

		ret = compact_pageblock(cc);
		/* The budget counts pageblocks looked into, not those passed by. */
		if (cc->budget != UINT_MAX && cc->migrate_scanned != scanned)
			cc->budget--;
		if (ret != UCMA_COMPACT_CONTINUE)
			break;
		cc->migrate_pfn += UCMA_PAGEBLOCK_PAGES;
		/* Past the meeting point the window shrinks with the scanner. */
		if (cc->free_pfn < cc->migrate_pfn + UCMA_PAGEBLOCK_PAGES) {
			cc->free_pfn = cc->migrate_pfn + UCMA_PAGEBLOCK_PAGES;
			cc->target.avoid_end = cc->free_pfn;
		}
	}
	release_isolated(cc);
	if (ret == UCMA_COMPACT_COMPLETE && cc->order >= 0 &&
	    ucma_zone_has_free_block(cc->zone, (unsigned)cc->order))
		ret = UCMA_COMPACT_SUCCESS;
	update_cached_positions(cc, ret);
	ucma_count(UCMA_STAT_COMPACT_MIGRATE_SCANNED, cc->migrate_scanned);
	ucma_count(UCMA_STAT_COMPACT_FREE_SCANNED, cc->free_scanned);
	ucma_count(UCMA_STAT_COMPACT_ISOLATED, cc->isolated);
	return ret;
}

static void cc_init(struct ucma_compact_control *cc, struct ucma_zone *z, int order, int prio,
		    const _Atomic int *abort)
{
	memset(cc, 0, offsetof(struct ucma_compact_control, runs));
	cc->arena = z->arena;
	cc->zone = z;
	cc->order = order;
	cc->prio = prio;
	cc->whole_zone = prio == UCMA_COMPACT_SYNC_FULL;
	cc->skip_on_failure = prio != UCMA_COMPACT_SYNC_FULL;
	if (order >= 0)
		cc->chunk_order = order;
	else
		cc->chunk_order = prio == UCMA_COMPACT_ASYNC ? (int)UCMA_PAGEBLOCK_ORDER : -1;
	cc->budget = prio == UCMA_COMPACT_ASYNC ? ucma_compact_async_pageblocks : UINT_MAX;
	cc->pin_waits = prio == UCMA_COMPACT_SYNC_FULL	? COMPACT_PIN_WAITS :
			prio == UCMA_COMPACT_SYNC_LIGHT ? 1 :
							  0;
	cc->abort = abort;
	cc->drain_batch_max = (unsigned)(z->managed_pages >> UCMA_PAGEBLOCK_ORDER) / 8;
	if (cc->drain_batch_max > COMPACT_DRAIN_BATCH_MAX)
		cc->drain_batch_max = COMPACT_DRAIN_BATCH_MAX;
	if (cc->drain_batch_max == 0)
		cc->drain_batch_max = 1;
	/* A run for an order looks for its block after each pageblock. */
	if (order >= 0 || prio != UCMA_COMPACT_SYNC_FULL)
		cc->drain_batch_max = 1;
	cc->drain_batch = cc->drain_batch_max < COMPACT_DRAIN_BATCH ? cc->drain_batch_max :
								       COMPACT_DRAIN_BATCH;
	cc->slow_graces = ucma_vmstat_read(UCMA_STAT_RCU_GRACE_SLOW);
	cc->target.no_cma = z->id == UCMA_ZONE_NORMAL;
	cc->target.wait_pins = cc->pin_waits > 0;
	/* A compaction a thread waits for (no abort flag: not compactd's)
	 * shares smaller copies with the helpers; the background thread
	 * leaves the program's other CPUs alone for them. */
	cc->target.copy_split_min = abort ? 0 : UCMA_COPY_SPLIT_MIN_COMPACT;
}

int ucma_compact_zone(struct ucma_zone *z, int order, int prio, const _Atomic int *abort)
{
	struct ucma_compact_control *cc;
	int ret;

	if (z->managed_pages == 0 || !ucma_rcu_can_wait())
		return UCMA_COMPACT_SKIPPED;
	cc = ucma_meta_alloc(sizeof(*cc));
	if (!cc)
		return UCMA_COMPACT_SKIPPED;
	if (!abort) {
		ucma_mutex_lock(&z->compact_lock);
	} else if (ucma_mutex_trylock(&z->compact_lock) != 0) {
		ucma_meta_free(cc, sizeof(*cc));
		return UCMA_COMPACT_CONTENDED;
	}
	/* Runs on per-CPU lists look allocated to the scanners, and keep
	 * pageblocks from coming free: back to the buddy lists first. */
	ucma_pcp_drain_zone(z);
	cc_init(cc, z, order, prio, abort);
	ret = compact_zone(cc);
	if (ret == UCMA_COMPACT_SUCCESS && order >= 0)
		compaction_defer_reset(z, order, false);
	ucma_mutex_unlock(&z->compact_lock);
	ucma_meta_free(cc, sizeof(*cc));
	return ret;
}

/* ------------------------------------------------------------------------ */
/* Direct compaction                                                         */
/* ------------------------------------------------------------------------ */

/* Zones in zonelist order: the CMA areas first, as for movable memory. */
static const int zonelist[UCMA_ZONE_NR] = { UCMA_ZONE_CMA, UCMA_ZONE_NORMAL };

/* Deferral is kept per order; runs of several pageblocks count as order 9. */
static int defer_order(const struct ucma_compact_direct *dc)
{
	return dc->order >= 0 ? dc->order : (int)UCMA_PAGEBLOCK_ORDER;
}

void ucma_compact_direct_init(struct ucma_compact_direct *dc, int order, unsigned zones)
{
	dc->order = order;
	dc->zones = zones;
	dc->prio = -1;
	dc->ran = 0;
	dc->succeeded = 0;
}

/*
 * ucma_compact_direct_next() - compact at the next priority.  Returns
 * false when there is nothing (more) to try: direct compaction disabled
 * (UCMA_COMPACT_DIRECT=off), inside a read-side section, every zone
 * deferred or unsuitable, or SYNC_FULL already tried.  The first run that
 * compacts a zone counts a compact_stall, as the kernel's
 * __alloc_pages_direct_compact() does once compaction was not skipped.
 */
bool ucma_compact_direct_next(struct ucma_compact_direct *dc)
{
	struct ucma_arena *a = ucma_arena_peek();
	bool first, any = false;
	unsigned emptied;

	if (!a || !ucma_opt.compact_direct || !ucma_rcu_can_wait() ||
	    dc->prio >= UCMA_COMPACT_SYNC_FULL)
		return false;
	if (dc->prio < 0) {
		for (int i = 0; i < UCMA_ZONE_NR; i++) {
			struct ucma_zone *z = &a->zones[i];

			if (!(dc->zones & (1u << i)))
				continue;
			if (z->managed_pages == 0) {
				dc->zones &= ~(1u << i);
				continue;
			}
			ucma_mutex_lock(&z->compact_lock);
			if (compaction_deferred(z, defer_order(dc)))
				dc->zones &= ~(1u << i);
			else if (compaction_restarting(z, defer_order(dc)))
				reset_hints_locked(z);
			ucma_mutex_unlock(&z->compact_lock);
		}
		if (!dc->zones)
			return false;
	}
	dc->prio++;
	first = !dc->ran;
	/* Sparse slabs first: consolidating them frees whole slab runs. */
	emptied = ucma_mslab_consolidate(dc->prio);
	for (int k = 0; k < UCMA_ZONE_NR; k++) {
		int i = zonelist[k], r;

		if (!(dc->zones & (1u << i)))
			continue;
		r = ucma_compact_zone(&a->zones[i], dc->order, dc->prio, NULL);
		if (r == UCMA_COMPACT_SKIPPED)
			continue;	/* compaction cannot help there */
		any = true;
		dc->ran |= 1u << i;
		if (r == UCMA_COMPACT_SUCCESS)
			dc->succeeded |= 1u << i;
	}
	if (first && dc->ran)
		ucma_count(UCMA_STAT_COMPACT_STALL, 1);
	return any || emptied;
}

/*
 * ucma_compact_direct_done() - the allocation after compaction succeeded
 * or finally failed: count it, and reset or extend the deferral of the
 * zones compacted (a zone is deferred only after SYNC_FULL failed in it).
 */
void ucma_compact_direct_done(struct ucma_compact_direct *dc, bool success)
{
	struct ucma_arena *a = ucma_arena_peek();

	if (!dc->ran || !a)
		return;
	ucma_count(success ? UCMA_STAT_COMPACT_SUCCESS : UCMA_STAT_COMPACT_FAIL, 1);
	for (int i = 0; i < UCMA_ZONE_NR; i++) {
		struct ucma_zone *z = &a->zones[i];

		if (!(dc->ran & (1u << i)))
			continue;
		ucma_mutex_lock(&z->compact_lock);
		if (success)
			compaction_defer_reset(z, defer_order(dc), true);
		else if (dc->prio == UCMA_COMPACT_SYNC_FULL)
			defer_compaction(z, defer_order(dc));
		ucma_mutex_unlock(&z->compact_lock);
	}
	dc->ran = 0;
}

int ucma_compact_contig_order(uint32_t npages, uint32_t align_pages)
{
	unsigned order, align_order;

	if (npages > UCMA_PAGEBLOCK_PAGES)
		return -1;
	order = order_for(npages);
	align_order = align_pages > 1 ? (unsigned)__builtin_ctz(align_pages) : 0;
	if (align_order > order)
		order = align_order;
	return (int)(order > UCMA_MAX_ORDER ? UCMA_MAX_ORDER : order);
}

void *ucma_compact_direct_movable(size_t size, uint32_t index)
{
	struct ucma_compact_direct dc;
	unsigned zones = 1u << UCMA_ZONE_NORMAL;
	uint64_t npages = (size + UCMA_PAGE_SIZE - 1) >> UCMA_PAGE_SHIFT;
	int order;
	void *p = NULL;

	if (ucma_opt.cma_policy != UCMA_CMA_RESERVED)
		zones |= 1u << UCMA_ZONE_CMA;
	if (size <= UCMA_MSLAB_MAX_SIZE)
		order = UCMA_MSLAB_RUN_ORDER;	/* a new slab */
	else
		order = npages > UCMA_PAGEBLOCK_PAGES ? -1 : (int)order_for((uint32_t)npages);
	ucma_compact_direct_init(&dc, order, zones);
	while (!p && ucma_compact_direct_next(&dc))
		p = ucma_movable_storage_alloc(size, index, NULL);
	ucma_compact_direct_done(&dc, p != NULL);
	return p;
}

/* ------------------------------------------------------------------------ */
/* Public interface                                                          */
/* ------------------------------------------------------------------------ */

static bool valid_prio(int prio)
{
	return prio == UCMA_COMPACT_ASYNC || prio == UCMA_COMPACT_SYNC_LIGHT ||
	       prio == UCMA_COMPACT_SYNC_FULL;
}

/**
 * ucma_compact() - compact every zone of the arena at priority @prio.
 *
 * Consolidates the movable slabs, then runs one pass over each zone (the
 * CMA zone first), ignoring deferral and suitability.  Returns after a
 * grace period, when the space it freed is free.
 * Return: 0, or -1 with errno EINVAL (unknown priority), EDEADLK (inside
 * ucma_read_lock()), or the error of the library's initialisation.
 */
/*
 * The checks every explicit compaction starts with: a known priority, not
 * inside a read-side section (the grace period would never end), and an
 * arena.  Returns the arena, or NULL with errno.
 */
static struct ucma_arena *compact_entry(int prio, bool order_ok)
{
	if (!order_ok || !valid_prio(prio)) {
		errno = EINVAL;
		return NULL;
	}
	if (!ucma_rcu_can_wait()) {
		errno = EDEADLK;	/* the grace periods could never end */
		return NULL;
	}
	return ucma_arena_get();
}

int ucma_compact(int prio)
{
	struct ucma_arena *a = compact_entry(prio, true);
	int rc;

	if (!a)
		return -1;
	ucma_mslab_consolidate(prio);
	for (int k = 0; k < UCMA_ZONE_NR; k++)
		ucma_compact_zone(&a->zones[zonelist[k]], -1, prio, NULL);
	rc = ucma_defer_drain();
	ucma_shm_update();	/* the map a user looks at after compacting */
	return rc;
}

/**
 * ucma_compact_order() - compact until a free block of 2^@order pages
 * exists in some zone.
 *
 * Zones where compaction cannot help (the suitability check) are left
 * alone; deferral is ignored.  ASYNC runs are bounded and may stop short.
 * Return: 0 when such a block is free; -1 with errno EINVAL (@order above
 * 9 or unknown priority), EDEADLK (inside ucma_read_lock()), ENOMEM (no
 * block of that order could be formed).
 */
int ucma_compact_order(unsigned order, int prio)
{
	struct ucma_arena *a = compact_entry(prio, order <= UCMA_MAX_ORDER);

	if (!a)
		return -1;
	for (int i = 0; i < UCMA_ZONE_NR; i++)
		if (a->zones[i].managed_pages && ucma_zone_has_free_block(&a->zones[i], order))
			return 0;
	ucma_mslab_consolidate(prio);
	for (int k = 0; k < UCMA_ZONE_NR; k++) {
		struct ucma_zone *z = &a->zones[zonelist[k]];

		if (z->managed_pages && ucma_zone_has_free_block(z, order))
			return 0;
		if (ucma_compact_zone(z, (int)order, prio, NULL) == UCMA_COMPACT_SUCCESS)
			return 0;
	}
	if (ucma_defer_drain() != 0)
		return -1;
	for (int i = 0; i < UCMA_ZONE_NR; i++)
		if (a->zones[i].managed_pages && ucma_zone_has_free_block(&a->zones[i], order))
			return 0;
	errno = ENOMEM;
	return -1;
}
