/*
 * zone.c - runs of pages under the zone rules, isolation, and decay.
 *
 * The rules (DESIGN.md, lessons 1 and 2):
 *  - Unmovable requests are served from NORMAL only.  They take UNMOVABLE
 *    pageblocks first; when none has room they steal a MOVABLE pageblock
 *    of NORMAL, largest free block first, and claim the whole pageblock
 *    (all its free pages move to the UNMOVABLE lists), so unmovable pages
 *    cluster instead of sprinkling every pageblock.  A CMA pageblock is
 *    never stolen: a CMA area can always be emptied.
 *  - Movable requests walk the zonelist CMA, NORMAL: CMA pageblocks first
 *    (unless the policy is "reserved" or the caller asks UCMA_GFP_NO_CMA),
 *    then MOVABLE pageblocks of NORMAL, then free space in UNMOVABLE ones.
 *  - Nothing is allocated from an ISOLATE pageblock.
 *
 * Runs: a request for n pages takes a block of order ceil(log2 n) and gives
 * the tail back at once, so a 3 MiB request does not consume 4 MiB.  A run
 * longer than a pageblock takes whole, consecutive, free pageblocks and
 * gives back the tail of the last one.  Unmovable runs (large mallocs)
 * that neither hold exactly (no power of two below a pageblock, no
 * multiple of one above) are packed instead: into a hole of a pageblock in
 * use, else across the boundaries between one and wholly free pageblocks
 * next to it, else into free pageblocks, at the end that keeps the rest
 * next to a free neighbour (packed(), take_hole(), take_across(),
 * at_end()).  So an unmovable run of NORMAL may cross pageblock
 * boundaries anywhere (run_may_cross()).  The head page of a run has kind
 * RUN with aux = n; every other page has kind TAIL with aux = head pfn.
 *
 * Placement in a range: ucma_pages_alloc_in() finds room for a run inside
 * [lo, hi) (compaction puts the copies of moved objects on the far side of
 * its scanners this way), and ucma_pages_alloc_avoid() finds a run outside
 * a range being emptied.  These runs are placed by best fit among extents
 * of adjacent free blocks, so they need not be aligned to their order: a
 * run is any pages [pfn, pfn + n) inside one pageblock, and frees as such.
 * An allocation that takes a zone below a quarter free wakes the
 * compaction thread (compactd.c).  The copies of migrated objects ask
 * UCMA_GFP_POPULATE: the fresh (clean) part of their run, and the clean
 * free pages after it up to what the caller still moves, are mapped with
 * one MADV_POPULATE_WRITE before the copy (zone_alloc_in()).
 *
 * Decay: freed pages are dirty; once per decay interval the zone's purge
 * epoch advances and dirty free blocks of an older epoch are returned to the
 * kernel with MADV_DONTNEED (order >= UCMA_PURGE_MIN_ORDER, so the cost of
 * the system call is amortised; whole pageblocks only where the zone is on
 * transparent huge pages, which a smaller purge would split), a batch at a
 * time with no lock held across the calls, about a millisecond's worth per
 * free of pages (ucma_zone_purge(), maybe_purge()).  Zones on
 * hugetlb pages are not purged: hugetlb memory is reserved and cannot be
 * given back in pieces.  Nor are
 * CMA areas on files (frames.c): their frames are the reservation, and
 * MADV_DONTNEED would not even free a shared page, only unmap it.
 *
 * Heap lending (lend.c): an unmovable request that would break into a
 * fresh NORMAL pageblock (wholly free and clean: no memory behind it yet)
 * may have that pageblock backed by an idle CMA frame first.  Under the
 * lock the pages are given back, a frame is reserved and the pageblock
 * isolated; ucma_pages_alloc() then has lend.c map the frame with no lock
 * held and tries again.  Purging skips borrowed pageblocks (their pages
 * are the frame's, MADV_DONTNEED would not clear them) and gives the frame
 * of a wholly free one back instead.
 *
 * Per-CPU lists (pcp.c): runs of up to UCMA_PCP_MAX_PAGES pages, and
 * whole pageblocks, are allocated from and freed to the lists of the CPU,
 * which visit the buddy lists in batches (ucma_zone_pcp_refill(),
 * _release_locked()); a pageblock the lists do not have is taken here.
 * An allocation the buddy lists cannot serve drains every list of the zone
 * and tries once more; isolation drains the runs of its range.
 *
 * Locking: each zone's lock protects its free lists and the metadata of its
 * free pages and pageblocks (see struct ucma_zone).  Functions here take the
 * lock themselves; none holds two zone locks at once.  The per-CPU list
 * locks come before the zone lock (pcp.h).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "extent.h"
#include "lend.h"
#include "overflow.h"
#include "pcp.h"
#include "slab.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

/* ------------------------------------------------------------------------ */
/* AddressSanitizer builds: free pages are poisoned                          */
/* ------------------------------------------------------------------------ */

/*
 * With --enable-asan every page on a free list is poisoned, so a write
 * through a stale pointer into a freed run is reported ("use-after-poison")
 * instead of corrupting whatever the pages hold next.  A run is poisoned by
 * the thread freeing it before it reaches the free lists, and unpoisoned by
 * the thread that took it off them, so no other thread can be using those
 * pages at either moment.  The arena is poisoned whole when it is created
 * and unpoisoned whole when it is destroyed, so an unrelated mapping made
 * later at the same address is not reported.
 */
#ifdef UCMA_ASAN
#include <sanitizer/asan_interface.h>

static void pages_poison(struct ucma_arena *a, uint32_t pfn, uint32_t npages)
{
	ASAN_POISON_MEMORY_REGION(ucma_pfn_to_addr(a, pfn), (size_t)npages << UCMA_PAGE_SHIFT);
}

static void pages_unpoison(struct ucma_arena *a, uint32_t pfn, uint32_t npages)
{
	ASAN_UNPOISON_MEMORY_REGION(ucma_pfn_to_addr(a, pfn), (size_t)npages << UCMA_PAGE_SHIFT);
}
#else
static inline void pages_poison(struct ucma_arena *a, uint32_t pfn, uint32_t npages) {}
static inline void pages_unpoison(struct ucma_arena *a, uint32_t pfn, uint32_t npages) {}
#endif

void ucma_arena_poison(struct ucma_arena *a, bool poison)
{
	if (poison)
		pages_poison(a, 0, a->npages);
	else
		pages_unpoison(a, 0, a->npages);
}

static unsigned order_for(uint32_t npages)
{
	return npages <= 1 ? 0 : 32u - (unsigned)__builtin_clz(npages - 1);
}

static bool zone_keeps_memory(const struct ucma_zone *z)
{
	return z->file_backed || z->backing == UCMA_BACKING_HUGETLB_1G ||
	       z->backing == UCMA_BACKING_HUGETLB_2M;
}

/* Mark [pfn, pfn + npages) as an allocated run (caller holds the lock). */
/* Make [start, end) tail pages of the run at @pfn, with its flags and
 * its owner (owner_type stored last, with release: a lookup that reads
 * it with acquire sees the owner). */
static void set_tails(struct ucma_arena *a, uint32_t pfn, uint32_t start, uint32_t end)
{
	/* The head's fields and the table, read once: the compiler cannot
	 * tell that the stores below leave them alone, and read them again
	 * for every page (12 instructions a page, 9 now). */
	struct ucma_page *pages = a->pages;
	const struct ucma_page *head = &pages[pfn];
	uint64_t owner = UCMA_PG_GET(head, owner);
	uint8_t owner_type = UCMA_PG_GET(head, owner_type), flags = head->flags;

	for (struct ucma_page *t = pages + start, *t_end = pages + end; t < t_end; t++) {
		UCMA_PG_SET(t, kind, UCMA_PK_TAIL);
		t->order = 0;
		t->flags = flags;
		UCMA_PG_SET(t, aux, pfn);
		UCMA_PG_SET(t, owner, owner);
		__atomic_store_n(&t->owner_type, owner_type, __ATOMIC_RELEASE);
	}
}

/*
 * May a run of @z with these page @flags start inside a pageblock and run
 * past its end?  An unmovable run of NORMAL may (take_across()): nothing
 * walks those pageblock by pageblock to move or claim them.  Others start
 * on a pageblock when they cross one (isolation and compaction rely on
 * it), contiguous buffers aside (ucma_zone_check()).
 */
static inline bool run_may_cross(const struct ucma_zone *z, uint8_t flags)
{
	return z->id == UCMA_ZONE_NORMAL && !(flags & UCMA_PF_MOVABLE);
}

static void set_run(struct ucma_arena *a, uint32_t pfn, uint32_t npages, bool movable)
{
	struct ucma_page *head = &a->pages[pfn];

	UCMA_PG_SET(head, kind, UCMA_PK_RUN);
	head->order = 0;
	UCMA_PG_SET(head, owner_type, UCMA_OWN_NONE);
	head->flags = movable ? UCMA_PF_MOVABLE : 0;
	UCMA_PG_SET(head, aux, npages);
	UCMA_PG_SET(head, owner, 0);
	set_tails(a, pfn, pfn + 1, pfn + npages);
}

/* Pageblock @b of @z joins migratetype @to for a request of another kind:
 * a steal, counted.  The callers: rmqueue()'s fallback, and the runs that
 * take free pageblocks whole (alloc_pageblocks(), take_across(),
 * ucma_pages_grow()).  Lock held. */
static void steal_pageblock(struct ucma_zone *z, uint32_t b, int to)
{
	if (z->arena->blocks[b].mt == to)
		return;
	ucma_buddy_move_block_mt(z, b, to);
	ucma_count(UCMA_STAT_PAGEBLOCK_STEAL, 1);
}

/*
 * Steal for an unmovable or movable request that found nothing of its own
 * type in NORMAL: the largest free block of a @from pageblock; claim the
 * pageblock for @to when the whole pageblock (or at least half of it) is
 * free, as the kernel's steal_suitable_fallback() does.  Returns true when
 * the lists of @to gained a block of at least @order.
 */
static bool steal_fallback(struct ucma_zone *z, unsigned order, int from, int to, bool always)
{
	for (int o = UCMA_MAX_ORDER; o >= (int)order; o--) {
		uint32_t pfn = ucma_buddy_first(z, (unsigned)o, from);
		struct ucma_pageblock *pb;
		uint32_t pb_index;

		if (pfn == UCMA_PFN_NONE)
			continue;
		pb_index = pfn >> UCMA_PAGEBLOCK_ORDER;
		pb = &z->arena->blocks[pb_index];
		if (pb->isolate_count)
			continue;
		if (always || pb->nr_free >= UCMA_PAGEBLOCK_PAGES / 2) {
			steal_pageblock(z, pb_index, to);
			return true;
		}
		return false;
	}
	return false;
}

/* The migratetype a request of kind @gfp takes its pages from in @z. */
static int gfp_mt(const struct ucma_zone *z, unsigned gfp)
{
	if (z->id == UCMA_ZONE_CMA)
		return UCMA_MT_CMA;
	return (gfp & UCMA_GFP_MOVABLE) ? UCMA_MT_MOVABLE : UCMA_MT_UNMOVABLE;
}

/* One block of 2^order pages from zone @z for a request of kind @gfp. */
static uint32_t rmqueue(struct ucma_zone *z, unsigned order, unsigned gfp, bool *dirty)
{
	uint32_t pfn;

	if (gfp & UCMA_GFP_RESIDENT) {
		pfn = ucma_buddy_take_resident(z, order, gfp_mt(z, gfp));
		if (pfn != UCMA_PFN_NONE) {
			*dirty = true;
			return pfn;
		}
	}
	if (z->id == UCMA_ZONE_CMA)
		return ucma_buddy_take_dirty(z, order, UCMA_MT_CMA, dirty);

	if (!(gfp & UCMA_GFP_MOVABLE)) {
		pfn = ucma_buddy_take_dirty(z, order, UCMA_MT_UNMOVABLE, dirty);
		if (pfn != UCMA_PFN_NONE)
			return pfn;
		if (steal_fallback(z, order, UCMA_MT_MOVABLE, UCMA_MT_UNMOVABLE, true))
			return ucma_buddy_take_dirty(z, order, UCMA_MT_UNMOVABLE, dirty);
		return UCMA_PFN_NONE;
	}
	pfn = ucma_buddy_take_dirty(z, order, UCMA_MT_MOVABLE, dirty);
	if (pfn != UCMA_PFN_NONE)
		return pfn;
	/* A wholly free UNMOVABLE pageblock goes back to MOVABLE. */
	if (z->free_area[UCMA_MAX_ORDER].head[UCMA_MT_UNMOVABLE] != UCMA_PFN_NONE &&
	    steal_fallback(z, UCMA_MAX_ORDER, UCMA_MT_UNMOVABLE, UCMA_MT_MOVABLE, false))
		return ucma_buddy_take_dirty(z, order, UCMA_MT_MOVABLE, dirty);
	/* Last resort, as the kernel's fallback: movable pages in an
	 * unmovable pageblock, without claiming it. */
	return ucma_buddy_take_dirty(z, order, UCMA_MT_UNMOVABLE, dirty);
}

/* ------------------------------------------------------------------------ */
/* Isolation of one pageblock, and heap lending                              */
/* ------------------------------------------------------------------------ */

/* Isolate pageblock @b of @z (lock held): see ucma_isolate_range(). */
static void isolate_pageblock_locked(struct ucma_zone *z, uint32_t b)
{
	struct ucma_pageblock *pb = &z->arena->blocks[b];
	uint16_t n = pb->isolate_count;

	/* Atomic store: slabs read the count without the zone lock. */
	__atomic_store_n(&pb->isolate_count, (uint16_t)(n + 1), __ATOMIC_RELEASE);
	if (n == 0) {
		pb->saved_mt = pb->mt;
		ucma_buddy_move_block_mt(z, b, UCMA_MT_ISOLATE);
	}
}

void ucma_undo_isolate_locked(struct ucma_zone *z, uint32_t b)
{
	struct ucma_pageblock *pb = &z->arena->blocks[b];

	if (pb->isolate_count == 0)
		ucma_fatal("internal error: pageblock %u is not isolated", b);
	__atomic_store_n(&pb->isolate_count, (uint16_t)(pb->isolate_count - 1), __ATOMIC_RELEASE);
	if (pb->isolate_count == 0)
		ucma_buddy_move_block_mt(z, b, pb->saved_mt);
}

/*
 * Heap lending: fresh pageblock @b of NORMAL (wholly free and clean, or
 * so once the @n pages taken at @taken are given back) is about to get
 * its first pages.  When lend.c reserves a CMA frame for it, those pages
 * go back, the pageblock is isolated, *@lend_pb says which, and the caller
 * gives up this attempt.  Lock held.
 */
static bool lend_fresh(struct ucma_zone *z, uint32_t b, uint32_t taken, uint32_t n,
		       uint32_t *lend_pb)
{
	if (ucma_lend_borrowed(z->arena, b) || !ucma_lend_reserve_locked(z->arena, b))
		return false;
	if (n)
		ucma_buddy_free_clean_range(z, taken, n, false);
	isolate_pageblock_locked(z, b);
	*lend_pb = b;
	return true;
}

/* The first fresh pageblock of the @n from @b that lending takes (lock held). */
static bool lend_one_of(struct ucma_zone *z, uint32_t b, uint32_t n, uint32_t *lend_pb)
{
	for (uint32_t i = b; i < b + n; i++)
		if (!(z->arena->pages[i << UCMA_PAGEBLOCK_ORDER].flags & UCMA_PF_DIRTY) &&
		    lend_fresh(z, i, 0, 0, lend_pb))
			return true;
	return false;
}

/* The clean block of 2^@order pages just taken at @pfn broke into a
 * pageblock that was all free before: lend it instead?  Lock held. */
static bool lend_instead(struct ucma_zone *z, uint32_t pfn, unsigned order, uint32_t *lend_pb)
{
	uint32_t b = pfn >> UCMA_PAGEBLOCK_ORDER;

	return z->arena->blocks[b].nr_free + (1u << order) == UCMA_PAGEBLOCK_PAGES &&
	       lend_fresh(z, b, pfn, 1u << order, lend_pb);
}

void ucma_zone_set_free_dirty_locked(struct ucma_zone *z, uint32_t b, bool dirty)
{
	struct ucma_page *p = &z->arena->pages[b << UCMA_PAGEBLOCK_ORDER];

	ucma_buddy_materialise(z, b << UCMA_PAGEBLOCK_ORDER, (b + 1) << UCMA_PAGEBLOCK_ORDER);
	if (p->kind != UCMA_PK_FREE || p->order != UCMA_MAX_ORDER)
		ucma_fatal("internal error: pageblock %u of zone %s is not wholly free", b, z->name);
	if (dirty) {
		p->flags |= UCMA_PF_DIRTY;
		UCMA_PG_SET(p, aux, z->purge_epoch);
	} else {
		p->flags &= (uint8_t)~UCMA_PF_DIRTY;
	}
}

/*
 * A run of more than one pageblock: whole free pageblocks of a type the
 * request may use, consecutive, not isolated.  Linear in pageblocks, which
 * is fine for requests this large.
 */
static uint32_t alloc_pageblocks(struct ucma_zone *z, uint32_t npages, unsigned gfp, bool *dirty,
				 uint32_t *lend_pb)
{
	struct ucma_arena *a = z->arena;
	uint32_t need = (npages + UCMA_PAGEBLOCK_PAGES - 1) >> UCMA_PAGEBLOCK_ORDER;
	uint32_t first = z->start_pfn >> UCMA_PAGEBLOCK_ORDER;
	uint32_t last = z->end_pfn >> UCMA_PAGEBLOCK_ORDER;
	uint32_t run = 0;
	int to;

	for (uint32_t b = first; b < last; b++) {
		struct ucma_pageblock *pb = &a->blocks[b];
		bool ok = pb->nr_free == UCMA_PAGEBLOCK_PAGES && !pb->isolate_count;

		if (ok && z->id == UCMA_ZONE_CMA)
			ok = pb->mt == UCMA_MT_CMA;
		else if (ok)
			ok = pb->mt == UCMA_MT_MOVABLE || pb->mt == UCMA_MT_UNMOVABLE;
		run = ok ? run + 1 : 0;
		if (run < need)
			continue;

		uint32_t start = (b + 1 - need) << UCMA_PAGEBLOCK_ORDER;

		/* Their heads are read below (buddy.c: deferred pageblocks). */
		ucma_buddy_materialise(z, start, start + need * UCMA_PAGEBLOCK_PAGES);
		if (lend_pb && lend_one_of(z, start >> UCMA_PAGEBLOCK_ORDER, need, lend_pb))
			return UCMA_PFN_NONE;
		to = gfp_mt(z, gfp);
		*dirty = false;
		for (uint32_t i = 0; i < need; i++) {
			uint32_t pbi = (start >> UCMA_PAGEBLOCK_ORDER) + i;

			*dirty |= a->pages[pbi << UCMA_PAGEBLOCK_ORDER].flags & UCMA_PF_DIRTY;
			steal_pageblock(z, pbi, to);
		}
		if (!ucma_buddy_take_range(z, start, start + need * UCMA_PAGEBLOCK_PAGES))
			ucma_fatal("internal error: free pageblocks %u+%u not free", start, need);
		return start;
	}
	return UCMA_PFN_NONE;
}

static void maybe_purge(struct ucma_zone *z);

/* The zone's free pages, those a purge batch holds off the lists among
 * them (zone lock held; here and below). */
static uint64_t zone_free_pages(const struct ucma_zone *z)
{
	return z->free_pages + z->purge.held;
}

/*
 * Did taking @npages just take the zone below the low watermark that wakes
 * the compaction thread?  Only the crossing counts, so an allocation
 * costs one comparison and the thread is woken once per descent.  Called
 * with the zone lock held.
 */
static bool crossed_low_wmark(const struct ucma_zone *z, uint32_t npages)
{
	uint64_t wmark = UCMA_COMPACTD_WMARK(z), free = zone_free_pages(z);

	return free < wmark && free + npages >= wmark;
}

/* The zone's use just grew: is it time to ask for huge pages (once: the
 * answer is true only the first time)?  Zone lock held; the caller calls
 * thp_grow() after unlocking. */
static bool thp_due(struct ucma_zone *z)
{
	if (UCMA_LIKELY(!z->thp_deferred) ||
	    z->managed_pages - zone_free_pages(z) < UCMA_THP_GROW_PAGES)
		return false;
	z->thp_deferred = false;
	return true;
}

/* The zone grew past UCMA_THP_GROW_PAGES: ask for huge pages from now on. */
static void thp_grow(struct ucma_zone *z)
{
	struct ucma_arena *a = z->arena;

	if (ucma_os.madvise(ucma_pfn_to_addr(a, z->start_pfn),
			    (size_t)z->managed_pages << UCMA_PAGE_SHIFT, MADV_HUGEPAGE) != 0 &&
	    ucma_opt.verbose)
		ucma_log("zone %s: madvise(MADV_HUGEPAGE) failed: %s; staying on plain pages",
			 z->name, strerror(errno));
}

/*
 * Packed runs: unmovable runs of more pages than the per-CPU lists take
 * (large mallocs) that neither a buddy block of their order nor whole
 * pageblocks would hold exactly: no power of two below a pageblock, no
 * multiple of one above.  Below a pageblock, take_hole() places one by
 * best fit in a hole of a pageblock already in use, with the lock held;
 * UCMA_PFN_NONE when none fits.  Then (any length) take_across(), then a
 * buddy block or whole pageblocks, the run at the end at_end() says.
 * The buddy block of its order would leave the rest of that block to
 * smaller requests only: 300 blocks of 512 KiB + 57 bytes (129 pages) went
 * two to a pageblock at offsets 0 and 256, the second touching 128 pages
 * the block of 1 MiB + 57 bytes before it had not (bench_malloc
 * large-odd; packed, three to a pageblock on the pages already resident).
 * Wholly free pageblocks are left to rmqueue(), which knows about lending
 * them a frame and stealing them; *@dirty as rmqueue() says it.  Movable
 * runs are left where the buddy lists put them: where they go is
 * compaction's business, measured with that placement (bench_highalloc).
 * So are slabs (UCMA_GFP_RESIDENT), which want the blocks that may hold
 * data, not the best fit: slabs of 18-28 pages placed by fit cost
 * bench_malloc "large" 1.4 MiB of peak RSS without huge pages.  And so are
 * the blocks realloc() moves (UCMA_GFP_GROWS): fitted behind another one,
 * a block could not grow in place again, and bench_malloc "realloc-big"
 * (two buffers grown side by side) peaked 2.2 MiB higher.
 */
static bool packed(uint32_t npages, unsigned gfp)
{
	return !(gfp & (UCMA_GFP_MOVABLE | UCMA_GFP_RESIDENT | UCMA_GFP_GROWS)) &&
	       npages > UCMA_PCP_MAX_PAGES && (npages & (UCMA_PAGEBLOCK_PAGES - 1)) &&
	       (npages > UCMA_PAGEBLOCK_PAGES || (npages & (npages - 1)));
}

static uint32_t take_hole(struct ucma_zone *z, uint32_t npages, int mt, bool *dirty)
{
	uint32_t pfn = ucma_extent_find_hole(z, npages, mt), end;

	if (pfn == UCMA_PFN_NONE)
		return UCMA_PFN_NONE;
	/* A hole that starts its pageblock is filled from its end, so that
	 * its rest stays at the boundary, where a run can cross into it
	 * (take_across()); one that ends its pageblock from its start. */
	if (!(pfn & (UCMA_PAGEBLOCK_PAGES - 1))) {
		end = ucma_buddy_free_from(z, pfn);
		if (end & (UCMA_PAGEBLOCK_PAGES - 1))
			pfn = end - npages;
	}
	*dirty = ucma_buddy_clean_tail(z, pfn, pfn + npages) != pfn;
	if (!ucma_buddy_take_range(z, pfn, pfn + npages))
		ucma_fatal("internal error: free block %u of zone %s is not free", pfn, z->name);
	ucma_extent_taken(z, pfn, npages);
	return pfn;
}

/*
 * A packed run that no hole holds, across pageblock boundaries: the free
 * pages that end a pageblock in use and the start of the wholly free
 * pageblocks after it, or the free start of a pageblock in use and the
 * end of the wholly free ones before it (ucma_extent_find_across()), lock
 * held.  On huge pages a run of a pageblock's start makes the whole
 * pageblock resident, so blocks of 1 MiB + 57 bytes (257 pages), which no
 * pageblock holds two of, cost 2 MiB each (bench_malloc large-odd), and
 * blocks of 2 MiB + 57 bytes 4 MiB; packed across boundaries, each takes
 * the rest of the last one's pageblock and the start of the next.  The
 * free pageblocks join the run's migratetype, as a pageblock stolen by
 * rmqueue() does, and, fresh, may be lent a frame first (UCMA_PFN_NONE
 * with *@lend_pb set, as alloc_pageblocks()).  Such a run is unmovable:
 * compaction never moves it and no per-CPU list holds it
 * (ucma_pages_free()); zone_check(), ucma_pages_trim() and
 * grow_allowed() allow it.
 */
static uint32_t take_across(struct ucma_zone *z, uint32_t npages, int mt, bool *dirty,
			    uint32_t *lend_pb)
{
	struct ucma_arena *a = z->arena;
	uint32_t head = z->free_area[UCMA_MAX_ORDER].head[mt], pfn, end;
	struct ucma_extent_across f;

	if (!ucma_extent_find_across(z, npages, mt, &f))
		return UCMA_PFN_NONE;
	/* Into a pageblock never touched only when rmqueue() would not hand
	 * out one that may hold data: the pageblock freed last, first on
	 * its list, costs no new memory.  (Without this, blocks freed by the
	 * hundred were never used again: each run crossed into the next
	 * fresh pageblock above the last, large-odd linked directly 772 MiB.)
	 * A run longer than a pageblock goes across in any case: whole
	 * pageblocks (alloc_pageblocks()) are the lowest free ones, resident
	 * or not, and leave most of the last one to nobody. */
	if (npages < UCMA_PAGEBLOCK_PAGES && !f.resident && head != UCMA_PFN_NONE &&
	    (a->pages[head].flags & UCMA_PF_DIRTY))
		return UCMA_PFN_NONE;
	pfn = f.pfn;
	end = pfn + npages;
	ucma_buddy_materialise(z, f.free_pb << UCMA_PAGEBLOCK_ORDER,
			       (f.free_pb + f.nr_free_pb) << UCMA_PAGEBLOCK_ORDER);
	if (lend_pb && lend_one_of(z, f.free_pb, f.nr_free_pb, lend_pb))
		return UCMA_PFN_NONE;
	for (uint32_t b = f.free_pb; b < f.free_pb + f.nr_free_pb; b++)
		steal_pageblock(z, b, mt);
	*dirty = ucma_buddy_clean_tail(z, pfn, end) != pfn;
	if (!ucma_buddy_take_range(z, pfn, end))
		ucma_fatal("internal error: free pages %u+%u of zone %s are not free", pfn, npages,
			   z->name);
	/* The pieces of the run, pageblock by pageblock. */
	for (uint32_t p = pfn, next; p < end; p = next) {
		next = UCMA_ALIGN_DOWN(p, UCMA_PAGEBLOCK_PAGES) + UCMA_PAGEBLOCK_PAGES;
		if (next > end)
			next = end;
		ucma_extent_taken(z, p, next - p);
	}
	return pfn;
}

/*
 * Should a packed run that takes the @span wholly free pages at @pfn (whole
 * pageblocks) sit at their end?  When the pageblock before them is wholly
 * free too and the one after them is not: the rest then lies next to the
 * free one, and the next such run crosses the boundary between them
 * (take_across()).  Pageblocks freed in a row come back from the top
 * down.  Lock held.
 */
static bool at_end(const struct ucma_zone *z, uint32_t pfn, uint32_t span)
{
	const struct ucma_pageblock *pb = z->arena->blocks + (pfn >> UCMA_PAGEBLOCK_ORDER);

	return pfn >= z->start_pfn + UCMA_PAGEBLOCK_PAGES && pb[-1].nr_free == UCMA_PAGEBLOCK_PAGES &&
	       (pfn + span >= z->end_pfn ||
		pb[span >> UCMA_PAGEBLOCK_ORDER].nr_free != UCMA_PAGEBLOCK_PAGES);
}

/*
 * Give back what a run of @npages does not use of the @span free pages it
 * took at @pfn (a buddy block or whole pageblocks, *@dirty as taken), and
 * return where the run starts: at the end when it is @pack-ed and at_end()
 * says so, else at @pfn.  Lock held.
 */
static uint32_t place_in(struct ucma_zone *z, uint32_t pfn, uint32_t span, uint32_t npages,
			 bool pack, bool dirty)
{
	if (span == npages)
		return pfn;
	if (pack && at_end(z, pfn, span)) {
		ucma_buddy_free_clean_range(z, pfn, span - npages, dirty);
		return pfn + span - npages;
	}
	ucma_buddy_free_clean_range(z, pfn + npages, span - npages, dirty);
	return pfn;
}

/*
 * A full zone: the heap past the arena (overflow.c) asks the zone first for
 * every large block, and the search for a run that is not there cost about
 * a thousand instructions each time (take_hole(), take_across(), rmqueue()
 * with its steals: 40 of the 83 million instructions of bench_malloc
 * past-arena).  The search is a function of the buddy lists (which blocks,
 * their migratetypes, dirty or clean) and of the request, so an unmovable
 * request of a length that found nothing, or a longer one of the same kind
 * (packed or not, within a pageblock or beyond), finds nothing while the
 * lists are as they were: @list_gen counts their changes.  A run packed
 * into a hole is looked for everywhere a buddy block is, and more, so a
 * packed request that found nothing answers for the others too (the others
 * only ask rmqueue(), which it asked last).  A request that had a frame
 * lent instead found something; one that found nothing found no free
 * pageblock to lend either.  Movable requests are not remembered.  Zone
 * lock held.
 */
static bool nofit_kind_matches(uint32_t npages, uint32_t nofit)
{
	return nofit && npages >= nofit && (npages > UCMA_PAGEBLOCK_PAGES) ==
						    (nofit > UCMA_PAGEBLOCK_PAGES);
}

static bool nofit_known(const struct ucma_zone *z, uint32_t npages, unsigned gfp)
{
	if ((gfp & UCMA_GFP_MOVABLE) || z->nofit_gen != z->list_gen)
		return false;
	return nofit_kind_matches(npages, z->nofit_npages[1]) ||
	       (!packed(npages, gfp) && nofit_kind_matches(npages, z->nofit_npages[0]));
}

static void nofit_note(struct ucma_zone *z, uint32_t npages, unsigned gfp)
{
	bool pack = packed(npages, gfp);

	if (gfp & UCMA_GFP_MOVABLE)
		return;
	if (z->nofit_gen != z->list_gen) {
		z->nofit_gen = z->list_gen;
		z->nofit_npages[0] = z->nofit_npages[1] = 0;
	}
	if (!z->nofit_npages[pack] || npages < z->nofit_npages[pack])
		z->nofit_npages[pack] = npages;
}

/*
 * A run of @npages from zone @z.  With @lend_pb (unmovable requests in
 * NORMAL), a fresh pageblock may be reserved for lending instead: then
 * UCMA_PFN_NONE with *@lend_pb set (see ucma_pages_alloc()).
 */
static uint32_t alloc_zone_once(struct ucma_zone *z, uint32_t npages, unsigned gfp,
				uint32_t *lend_pb, bool *was_dirty)
{
	struct ucma_arena *a = z->arena;
	bool dirty = true, wake = false, grow = false, listed = false;
	uint32_t pfn;

	if (ucma_pcp_eligible(z, npages)) {
		pfn = ucma_pcp_alloc(z, npages, gfp_mt(z, gfp), gfp, lend_pb, &dirty, &wake, &grow);
		listed = true;	/* counted there */
		/* No pageblock listed: from the buddy lists below. */
		if (pfn != UCMA_PFN_NONE || npages <= UCMA_PCP_MAX_PAGES)
			goto done;
		listed = false;
	}
	ucma_mutex_lock(&z->lock);
	if (nofit_known(z, npages, gfp)) {
		pfn = UCMA_PFN_NONE;
	} else if (npages > UCMA_PAGEBLOCK_PAGES) {
		bool pack = packed(npages, gfp);

		pfn = pack ? take_across(z, npages, gfp_mt(z, gfp), &dirty, lend_pb) : UCMA_PFN_NONE;
		if (pfn == UCMA_PFN_NONE && !(lend_pb && *lend_pb != UCMA_PFN_NONE)) {
			pfn = alloc_pageblocks(z, npages, gfp, &dirty, lend_pb);
			if (pfn != UCMA_PFN_NONE)
				pfn = place_in(z, pfn, UCMA_ALIGN_UP(npages, UCMA_PAGEBLOCK_PAGES),
					       npages, pack, dirty);
		}
	} else {
		unsigned order = order_for(npages);
		bool hole = packed(npages, gfp);

		pfn = UCMA_PFN_NONE;
		if (hole) {
			/* A hole, else across a pageblock boundary, else a
			 * free pageblock, its rest one hole for the next such
			 * run, not the halves of the buddy block the run's
			 * order would split. */
			pfn = take_hole(z, npages, gfp_mt(z, gfp), &dirty);
			if (pfn == UCMA_PFN_NONE)
				pfn = take_across(z, npages, gfp_mt(z, gfp), &dirty, lend_pb);
			if (pfn != UCMA_PFN_NONE)
				order = 0;	/* exact: no rest to give back */
			else if (lend_pb && *lend_pb != UCMA_PFN_NONE)
				goto unlock;	/* lent first: asked again */
			else if ((pfn = rmqueue(z, UCMA_MAX_ORDER, gfp, &dirty)) != UCMA_PFN_NONE)
				order = UCMA_MAX_ORDER;
		}
		if (pfn == UCMA_PFN_NONE)
			pfn = rmqueue(z, order, gfp, &dirty);
		if (pfn != UCMA_PFN_NONE && order && lend_pb && !dirty &&
		    lend_instead(z, pfn, order, lend_pb)) {
			pfn = UCMA_PFN_NONE;
		} else if (pfn != UCMA_PFN_NONE && order) {
			/* (only a whole pageblock may go at its end) */
			pfn = place_in(z, pfn, 1u << order, npages, hole && order == UCMA_MAX_ORDER,
				       dirty);
		}
	}
	if (pfn != UCMA_PFN_NONE) {
		if (pfn < z->start_pfn || pfn + npages > z->end_pfn)
			ucma_fatal("internal error: zone %s handed out pfn %u+%u outside it",
				   z->name, pfn, npages);
		set_run(a, pfn, npages, gfp & UCMA_GFP_MOVABLE);
		wake = crossed_low_wmark(z, npages);
		grow = thp_due(z);
	} else if (!(lend_pb && *lend_pb != UCMA_PFN_NONE)) {
		nofit_note(z, npages, gfp);
	}
unlock:
	ucma_mutex_unlock(&z->lock);
done:
	if (UCMA_UNLIKELY(wake))
		ucma_compactd_wakeup();
	if (UCMA_UNLIKELY(grow))
		thp_grow(z);
	if (pfn == UCMA_PFN_NONE)
		return pfn;
	if (was_dirty)
		*was_dirty = dirty;
	pages_unpoison(a, pfn, npages);
	if (!listed)
		ucma_count(UCMA_STAT_PAGE_ALLOC, 1);
	if ((gfp & UCMA_GFP_ZERO) && dirty)
		memset(ucma_pfn_to_addr(a, pfn), 0, (size_t)npages << UCMA_PAGE_SHIFT);
	return pfn;
}

/*
 * A run of @npages from zone @z; when the buddy lists have none, the
 * per-CPU lists are drained into them and the request tried once more
 * (the kernel's drain_all_pages() before an allocation fails), and once
 * more after the batch of a purge that holds pages of the zone.
 */
static uint32_t alloc_zone(struct ucma_zone *z, uint32_t npages, unsigned gfp, uint32_t *lend_pb,
			   bool *was_dirty)
{
	uint32_t pfn, seq;

	if (npages == 0 || npages > z->managed_pages)
		return UCMA_PFN_NONE;
	if (z->id == UCMA_ZONE_CMA && !(gfp & UCMA_GFP_MOVABLE))
		return UCMA_PFN_NONE;	/* lesson 1: never unmovable in CMA */
	seq = ucma_zone_purge_seq(z);
	pfn = alloc_zone_once(z, npages, gfp, lend_pb, was_dirty);
	if (pfn == UCMA_PFN_NONE && !(lend_pb && *lend_pb != UCMA_PFN_NONE) && z->pcp &&
	    ucma_pcp_pages(z)) {
		ucma_pcp_drain_zone(z);
		pfn = alloc_zone_once(z, npages, gfp, lend_pb, was_dirty);
	}
	/* A purge may have held the pages for a moment (purge_step()). */
	if (pfn == UCMA_PFN_NONE && !(lend_pb && *lend_pb != UCMA_PFN_NONE) &&
	    ucma_zone_purge_hold_off(z, seq)) {
		pfn = alloc_zone_once(z, npages, gfp, lend_pb, was_dirty);
		ucma_zone_purge_resume(z);
	}
	return pfn;
}

/*
 * ucma_zone_pcp_refill() - see pcp.h.  The blocks come from rmqueue(), so
 * the zone rules (fallback, stealing) hold for them as for any request.
 * A clean block that breaks into a wholly free pageblock is where heap
 * lending may step in (alloc_zone_once()): as the first block it is
 * offered to lending, later in the batch it is given back and the batch
 * ends there, so that the request that needs it makes that decision.
 * *@wake and *@grow: what the caller does once no lock is held.
 */
unsigned ucma_zone_pcp_refill(struct ucma_zone *z, uint32_t npages, unsigned gfp, uint32_t *pfns,
			      bool *dirty, unsigned n, uint32_t *lend_pb, bool *wake, bool *grow)
{
	struct ucma_arena *a = z->arena;
	unsigned order = order_for(npages);
	uint32_t size = 1u << order;
	unsigned got = 0;

	ucma_mutex_lock(&z->lock);
	while (got < n && !nofit_known(z, npages, gfp)) {
		bool d = true;
		uint32_t pfn = rmqueue(z, order, gfp, &d);

		if (pfn == UCMA_PFN_NONE) {
			nofit_note(z, npages, gfp);
			break;
		}
		if (lend_pb && !d) {
			if (got == 0 && lend_instead(z, pfn, order, lend_pb))
				break;
			if (got > 0 && a->blocks[pfn >> UCMA_PAGEBLOCK_ORDER].nr_free + size ==
					       UCMA_PAGEBLOCK_PAGES) {
				ucma_buddy_free_clean_range(z, pfn, size, false);
				break;
			}
		}
		if (pfn < z->start_pfn || pfn + size > z->end_pfn)
			ucma_fatal("internal error: zone %s handed out pfn %u+%u outside it",
				   z->name, pfn, size);
		/* The rest of the block back at once, as alloc_zone_once()
		 * does: the run stays aligned to its order. */
		if (size > npages)
			ucma_buddy_free_clean_range(z, pfn + npages, size - npages, d);
		set_run(a, pfn, npages, gfp & UCMA_GFP_MOVABLE);
		pfns[got] = pfn;
		dirty[got] = d;
		got++;
	}
	if (got) {
		*wake = crossed_low_wmark(z, got * npages);
		if (thp_due(z))
			*grow = true;
	}
	ucma_mutex_unlock(&z->lock);
	return got;
}

/* The pages of [pfn, pfn + npages) belong to no run any more (the table's
 * address read once, as in set_tails()). */
static void run_forget(struct ucma_arena *a, uint32_t pfn, uint32_t npages)
{
	for (struct ucma_page *p = a->pages + pfn, *end = p + npages; p < end; p++) {
		UCMA_PG_SET(p, kind, UCMA_PK_UNUSED);
		UCMA_PG_SET(p, owner_type, UCMA_OWN_NONE);
		UCMA_PG_SET(p, owner, 0);
	}
}

void ucma_zone_pcp_release_locked(struct ucma_zone *z, uint32_t pfn, uint32_t npages, bool dirty)
{
	run_forget(z->arena, pfn, npages);
	ucma_buddy_free_clean_range(z, pfn, npages, dirty);
}

uint32_t ucma_pages_alloc_zone(struct ucma_zone *z, uint32_t npages, unsigned gfp)
{
	return alloc_zone(z, npages, gfp, NULL, NULL);
}

/*
 * NORMAL, for any request.  An unmovable one that would break into a
 * fresh pageblock may have it backed by a CMA frame first: lend.c maps the
 * frame with no lock held (so memory events can be delivered) and the
 * request is tried again.  Each round lends one more pageblock or
 * allocates, so the loop ends; a failed lending is not tried again here.
 */
static uint32_t alloc_normal(struct ucma_arena *a, uint32_t npages, unsigned gfp, bool *was_dirty)
{
	struct ucma_zone *z = &a->zones[UCMA_ZONE_NORMAL];
	bool lend = !(gfp & (UCMA_GFP_MOVABLE | UCMA_GFP_NO_LEND));

	for (;;) {
		uint32_t lend_pb = UCMA_PFN_NONE;
		uint32_t pfn = alloc_zone(z, npages, gfp, lend ? &lend_pb : NULL, was_dirty);

		if (pfn != UCMA_PFN_NONE || lend_pb == UCMA_PFN_NONE)
			return pfn;
		if (!ucma_lend_commit(a, lend_pb))
			lend = false;
	}
}

uint32_t ucma_pages_alloc(struct ucma_arena *a, uint32_t npages, unsigned gfp)
{
	return ucma_pages_alloc_dirty(a, npages, gfp, NULL);
}

uint32_t ucma_pages_alloc_dirty(struct ucma_arena *a, uint32_t npages, unsigned gfp,
				bool *was_dirty)
{
	uint32_t pfn = UCMA_PFN_NONE;

	if (!a || npages == 0) {
		errno = EINVAL;
		return UCMA_PFN_NONE;
	}
	if ((gfp & UCMA_GFP_MOVABLE) && !(gfp & UCMA_GFP_NO_CMA) &&
	    ucma_opt.cma_policy != UCMA_CMA_RESERVED)
		pfn = alloc_zone(&a->zones[UCMA_ZONE_CMA], npages, gfp, NULL, was_dirty);
	if (pfn == UCMA_PFN_NONE)
		pfn = alloc_normal(a, npages, gfp, was_dirty);
	if (pfn == UCMA_PFN_NONE) {
		ucma_count(UCMA_STAT_PAGE_ALLOC_FAIL, 1);
		errno = ENOMEM;
	}
	return pfn;
}

/*
 * Map the fresh (clean) pages [pfn, pfn + n) in one call before a
 * migration copy writes them: the copy would otherwise take one kernel
 * fault per page (zeroing and charging it), which costs far more than
 * the copy itself where faults are expensive (virtual machines).  A
 * failure leaves the copy to fault, as before: counted, except where the
 * kernel lacks MADV_POPULATE_WRITE (os.c stops asking).
 */
static void populate_fresh(struct ucma_arena *a, uint32_t pfn, uint32_t n)
{
	if (ucma_os_populate(ucma_pfn_to_addr(a, pfn), (size_t)n << UCMA_PAGE_SHIFT) == 0)
		ucma_count(UCMA_STAT_PGMIGRATE_POPULATED, n);
	else if (errno != ENOTSUP)
		ucma_count(UCMA_STAT_PGMIGRATE_POPULATE_FAIL, 1);
}

/*
 * One run of @npages inside [lo, hi) of zone @z, in pageblocks a request
 * of kind @gfp may use here: the best-fitting extent of free pages (buddy
 * alignment leaves holes that no aligned block of the run's order fits,
 * but the run does; packing them tightly is what lets compaction empty
 * pageblocks), or for single pages the first free block of the lists.
 * Movable requests in NORMAL take MOVABLE pageblocks only, as the kernel's
 * compaction targets do: a movable object placed in an UNMOVABLE pageblock
 * would keep that pageblock from ever being emptied.
 */
static uint32_t zone_alloc_in(struct ucma_zone *z, uint32_t npages, unsigned gfp, uint32_t lo,
			      uint32_t hi, struct ucma_populate_batch *batch)
{
	struct ucma_arena *a = z->arena;
	unsigned order = order_for(npages);
	bool dirty = true, wake = false, extent = false;
	/*
	 * Clean pages are unmapped (never touched, or purged), except on
	 * hugetlb pages (allocated at start-up, mapped a huge page per fault:
	 * nothing to gain) and in a prefaulted zone (mapped until a purge).
	 * Mapping mapped pages again is not free: a page-table walk per page.
	 * A shmem file's clean pages were never touched: populated too.
	 */
	bool populate = (gfp & UCMA_GFP_POPULATE) &&
			!__atomic_load_n(&z->prefaulted, __ATOMIC_RELAXED) &&
			z->backing != UCMA_BACKING_HUGETLB_1G && z->backing != UCMA_BACKING_HUGETLB_2M;
	uint32_t pfn = UCMA_PFN_NONE, extra = 0, fresh = 0;
	int mt = gfp_mt(z, gfp);

	ucma_mutex_lock(&z->lock);
	if (order > 0) {
		pfn = ucma_extent_find(z, npages, mt, lo, hi);
		extent = pfn != UCMA_PFN_NONE;
	}
	/* Every block on the lists lies in an extent the search saw or knew
	 * too short, so the lists are walked for single pages only: a walk
	 * of lists holding mostly blocks outside the range cost a seventh of
	 * ucma_compact()'s time in bench_highalloc. */
	for (unsigned o = 0; order == 0 && o < UCMA_NR_ORDERS && pfn == UCMA_PFN_NONE; o++) {
		for (uint32_t b = z->free_area[o].head[mt]; b != UCMA_PFN_NONE;
		     b = a->pages[b].link.next) {
			if (b >= lo && b + npages <= hi) {
				pfn = b;
				dirty = a->pages[pfn].flags & UCMA_PF_DIRTY;
				break;
			}
		}
	}
	if (pfn == UCMA_PFN_NONE) {
		/* Last, a pageblock never used (clean); linked by take_range. */
		pfn = ucma_buddy_deferred_in(z, npages, mt, lo, hi);
		dirty = false;
	}
	if (pfn != UCMA_PFN_NONE) {
		/* Fresh from here on.  An extent may span blocks of either
		 * kind: often pages mapped ahead for the copies before it,
		 * then clean ones. */
		if (extent)
			fresh = ucma_buddy_clean_tail(z, pfn, pfn + npages);
		else
			fresh = dirty ? pfn + npages : pfn;
		dirty = fresh != pfn;
		/* Takes [pfn, pfn + npages) and frees the rest of the block. */
		if (!ucma_buddy_take_range(z, pfn, pfn + npages))
			ucma_fatal("internal error: free block %u of zone %s is not free", pfn,
				   z->name);
		if (extent)
			ucma_extent_taken(z, pfn, npages);
		set_run(a, pfn, npages, gfp & UCMA_GFP_MOVABLE);
		wake = crossed_low_wmark(z, npages);
		if (batch) {
			/* A copy placed in pages mapped ahead was counted. */
			if (pfn < batch->start || pfn + npages > batch->end)
				batch->pages -= batch->pages < npages ? batch->pages : npages;
			/* The copies still to come land next to this one
			 * (best fit keeps the rest of its extent for them):
			 * one call maps theirs too. */
			if (populate && fresh < pfn + npages && batch->pages) {
				extra = ucma_buddy_dirty_clean_after(z, pfn + npages, batch->pages);
				batch->pages -= extra;
				if (extra) {
					batch->start = pfn + npages;
					batch->end = pfn + npages + extra;
				}
			}
		}
	}
	ucma_mutex_unlock(&z->lock);
	if (pfn == UCMA_PFN_NONE)
		return pfn;
	if (UCMA_UNLIKELY(wake))
		ucma_compactd_wakeup();
	pages_unpoison(a, pfn, npages);
	ucma_count(UCMA_STAT_PAGE_ALLOC, 1);
	if ((gfp & UCMA_GFP_ZERO) && dirty)
		memset(ucma_pfn_to_addr(a, pfn), 0, (size_t)npages << UCMA_PAGE_SHIFT);
	if (populate && fresh < pfn + npages)
		populate_fresh(a, fresh, pfn + npages + extra - fresh);
	return pfn;
}

/*
 * ucma_pages_alloc_in() - a run of @npages (at most a pageblock) inside
 * [lo, hi), under the zone rules, zones in zonelist order.  This is how
 * compaction places the copies of the objects it moves on the far side of
 * its scanners.  Best fit, so holes are filled before a free pageblock is
 * broken; the search walks the pageblocks of the range that have enough
 * free pages, from the top, and stops a few pageblocks after the first fit.
 */
static uint32_t alloc_in(struct ucma_arena *a, uint32_t npages, unsigned gfp, uint32_t lo,
			 uint32_t hi, struct ucma_populate_batch *batch)
{
	int zonelist[UCMA_ZONE_NR], nz = 0;

	if (!a || npages == 0 || npages > UCMA_PAGEBLOCK_PAGES || lo >= hi || hi > a->npages) {
		errno = EINVAL;
		return UCMA_PFN_NONE;
	}
	if ((gfp & UCMA_GFP_MOVABLE) && !(gfp & UCMA_GFP_NO_CMA) &&
	    ucma_opt.cma_policy != UCMA_CMA_RESERVED)
		zonelist[nz++] = UCMA_ZONE_CMA;
	zonelist[nz++] = UCMA_ZONE_NORMAL;
	for (int i = 0; i < nz; i++) {
		struct ucma_zone *z = &a->zones[zonelist[i]];
		uint32_t pfn;

		if (z->start_pfn >= hi || z->end_pfn <= lo || z->managed_pages == 0)
			continue;
		pfn = zone_alloc_in(z, npages, gfp, lo, hi, batch);
		if (pfn != UCMA_PFN_NONE)
			return pfn;
	}
	errno = ENOMEM;
	return UCMA_PFN_NONE;
}

uint32_t ucma_pages_alloc_in(struct ucma_arena *a, uint32_t npages, unsigned gfp, uint32_t lo,
			     uint32_t hi)
{
	return alloc_in(a, npages, gfp, lo, hi, NULL);
}

/*
 * ucma_pages_alloc_avoid() - a run that does not overlap [avoid_start,
 * avoid_end).  Searching beats allocating and checking: the block the
 * free lists offer first is often the one just freed, inside the range.
 * Above the range first, so that what is moved out of a range drifts the
 * way compaction moves things (free space collects low).  Then the zone
 * rules proper, for what the search does not do: stealing pageblocks,
 * UNMOVABLE pageblocks as the last resort, runs of several pageblocks.
 */
uint32_t ucma_pages_alloc_avoid(struct ucma_arena *a, uint32_t npages, unsigned gfp,
				uint32_t avoid_start, uint32_t avoid_end,
				struct ucma_populate_batch *batch)
{
	uint32_t pfn;

	if (!a || avoid_start >= avoid_end)
		return ucma_pages_alloc(a, npages, gfp);
	if (npages > 0 && npages <= UCMA_PAGEBLOCK_PAGES) {
		if (avoid_end < a->npages) {
			pfn = alloc_in(a, npages, gfp, avoid_end, a->npages, batch);
			if (pfn != UCMA_PFN_NONE)
				return pfn;
		}
		if (avoid_start > 0) {
			pfn = alloc_in(a, npages, gfp, 0, avoid_start, batch);
			if (pfn != UCMA_PFN_NONE)
				return pfn;
		}
	}
	pfn = ucma_pages_alloc(a, npages, gfp);
	if (pfn != UCMA_PFN_NONE && pfn < avoid_end && pfn + npages > avoid_start) {
		ucma_pages_free(a, pfn);
		errno = ENOMEM;
		return UCMA_PFN_NONE;
	}
	return pfn;
}

void ucma_pages_free_locked(struct ucma_zone *z, uint32_t pfn)
{
	struct ucma_arena *a = z->arena;
	struct ucma_page *head = &a->pages[pfn];
	uint32_t npages;

	if (head->kind != UCMA_PK_RUN)
		ucma_fatal("internal error: freeing page %u which is no run head", pfn);
	npages = head->aux;
	/* Forget the run first, so a stale pointer into it finds nothing. */
	run_forget(a, pfn, npages);
	pages_poison(a, pfn, npages);
	ucma_buddy_free_range(z, pfn, npages);
}

/* Free the run at @pfn of @z to the buddy lists; *@note (unless NULL)
 * cleared in the same critical section. */
static void free_to_buddy(struct ucma_zone *z, uint32_t pfn, bool *note)
{
	ucma_mutex_lock(&z->lock);
	ucma_pages_free_locked(z, pfn);
	if (note)
		*note = false;
	ucma_mutex_unlock(&z->lock);
	ucma_count(UCMA_STAT_PAGE_FREE, 1);
	maybe_purge(z);
}

void ucma_pages_free(struct ucma_arena *a, uint32_t pfn)
{
	struct ucma_zone *z = ucma_pfn_zone(a, pfn);
	struct ucma_page *head = &a->pages[pfn];
	uint32_t npages = UCMA_PG_GET(head, aux);

	/* The caller owns the run: its head is stable without the lock.  A
	 * contiguous buffer may cross a pageblock boundary: not listed, so
	 * that isolating a pageblock finds all of a listed run inside it. */
	if (UCMA_PG_GET(head, kind) == UCMA_PK_RUN && ucma_pcp_eligible(z, npages) &&
	    (pfn & (UCMA_PAGEBLOCK_PAGES - 1)) + npages <= UCMA_PAGEBLOCK_PAGES) {
		int listed;

		if (head->flags & UCMA_PF_PCP)
			ucma_fatal("internal error: freeing page %u which is free already", pfn);
		pages_poison(a, pfn, npages);
		listed = ucma_pcp_free(z, pfn, npages);
		if (listed) {	/* counted there */
			if (listed > 1)
				maybe_purge(z);
			return;
		}
	}
	free_to_buddy(z, pfn, NULL);
}

void ucma_pages_free_noted(struct ucma_arena *a, uint32_t pfn, bool *note)
{
	free_to_buddy(ucma_pfn_zone(a, pfn), pfn, note);
}

void ucma_pages_free_unused(struct ucma_arena *a, uint32_t pfn)
{
	struct ucma_zone *z = ucma_pfn_zone(a, pfn);
	uint32_t npages;

	ucma_mutex_lock(&z->lock);
	if (a->pages[pfn].kind != UCMA_PK_RUN)
		ucma_fatal("internal error: freeing page %u which is no run head", pfn);
	npages = a->pages[pfn].aux;
	pages_poison(a, pfn, npages);
	ucma_zone_pcp_release_locked(z, pfn, npages, false);
	ucma_mutex_unlock(&z->lock);
	ucma_count(UCMA_STAT_PAGE_FREE, 1);
}

void ucma_pages_trim(struct ucma_arena *a, uint32_t head, uint32_t keep, uint32_t nkeep)
{
	struct ucma_zone *z = ucma_pfn_zone(a, head);
	struct ucma_page *h = &a->pages[head];
	uint32_t end, kend = keep + nkeep;
	bool one_pageblock = nkeep && (keep >> UCMA_PAGEBLOCK_ORDER) ==
					      ((kend - 1) >> UCMA_PAGEBLOCK_ORDER);
	bool movable;

	ucma_mutex_lock(&z->lock);
	end = head + h->aux;
	/* What is kept is a run as the allocator makes them. */
	if (h->kind != UCMA_PK_RUN || nkeep == 0 || keep < head || kend > end ||
	    !(one_pageblock || !(keep & (UCMA_PAGEBLOCK_PAGES - 1)) || run_may_cross(z, h->flags)))
		ucma_fatal("internal error: cannot trim the run %u+%u to %u+%u", head,
			   h->kind == UCMA_PK_RUN ? h->aux : 0, keep, nkeep);
	movable = h->flags & UCMA_PF_MOVABLE;
	/* Forget the whole run, then mark the kept part as one. */
	for (uint32_t pfn = head; pfn < end; pfn++) {
		UCMA_PG_SET(&a->pages[pfn], kind, UCMA_PK_UNUSED);
		UCMA_PG_SET(&a->pages[pfn], owner_type, UCMA_OWN_NONE);
		UCMA_PG_SET(&a->pages[pfn], owner, 0);
	}
	set_run(a, keep, nkeep, movable);
	/* The run may have held data before: its slack counts as dirty. */
	if (keep > head) {
		pages_poison(a, head, keep - head);
		ucma_buddy_free_range(z, head, keep - head);
	}
	if (end > kend) {
		pages_poison(a, kend, end - kend);
		ucma_buddy_free_range(z, kend, end - kend);
	}
	ucma_mutex_unlock(&z->lock);
}

/*
 * May the run at @pfn, now ending at @end, take the free pages [end,
 * new_end) of @z?  They must be free on the buddy lists (not on a per-CPU
 * list: those count as taken), in pageblocks that are not isolated (a
 * claim or a compaction owns their free pages).  A run that grows into
 * another pageblock starts on one unless run_may_cross(), and the
 * pageblocks it reaches into
 * must be wholly free and of a type alloc_pageblocks() would give it, as
 * if it had been allocated at this size.  Zone lock held.
 */
static bool grow_allowed(struct ucma_zone *z, uint32_t pfn, uint32_t end, uint32_t new_end)
{
	struct ucma_arena *a = z->arena;
	uint32_t last_pb = (end - 1) >> UCMA_PAGEBLOCK_ORDER;
	uint32_t new_last_pb = (new_end - 1) >> UCMA_PAGEBLOCK_ORDER;

	if (new_end > z->end_pfn || a->blocks[last_pb].isolate_count)
		return false;
	if (new_last_pb > last_pb && (pfn & (UCMA_PAGEBLOCK_PAGES - 1)) &&
	    !run_may_cross(z, a->pages[pfn].flags))
		return false;
	for (uint32_t b = last_pb + 1; b <= new_last_pb; b++) {
		const struct ucma_pageblock *pb = &a->blocks[b];

		if (pb->nr_free != UCMA_PAGEBLOCK_PAGES || pb->isolate_count)
			return false;
		if (z->id == UCMA_ZONE_CMA ? pb->mt != UCMA_MT_CMA :
					     pb->mt != UCMA_MT_MOVABLE && pb->mt != UCMA_MT_UNMOVABLE)
			return false;
	}
	return ucma_buddy_range_free(z, end, new_end);
}

bool ucma_pages_grow(struct ucma_arena *a, uint32_t pfn, uint32_t npages, bool resident_only)
{
	struct ucma_zone *z = ucma_pfn_zone(a, pfn);
	struct ucma_page *h = &a->pages[pfn];
	uint32_t end, new_end = pfn + npages;
	bool wake, grow;
	int mt;

	ucma_mutex_lock(&z->lock);
	if (h->kind != UCMA_PK_RUN)
		ucma_fatal("internal error: growing page %u which is no run head", pfn);
	end = pfn + h->aux;
	if (new_end <= end || !grow_allowed(z, pfn, end, new_end) ||
	    (resident_only && !ucma_buddy_range_resident(z, end, new_end))) {
		ucma_mutex_unlock(&z->lock);
		return false;
	}
	/* Whole pageblocks join the run's type, as alloc_pageblocks() does
	 * (their heads are read there: linked first, see buddy.c). */
	mt = z->id == UCMA_ZONE_CMA	  ? UCMA_MT_CMA :
	     h->flags & UCMA_PF_MOVABLE ? UCMA_MT_MOVABLE :
					  UCMA_MT_UNMOVABLE;
	for (uint32_t b = ((end - 1) >> UCMA_PAGEBLOCK_ORDER) + 1;
	     b <= (new_end - 1) >> UCMA_PAGEBLOCK_ORDER; b++) {
		ucma_buddy_materialise(z, b << UCMA_PAGEBLOCK_ORDER, (b + 1) << UCMA_PAGEBLOCK_ORDER);
		steal_pageblock(z, b, mt);
	}
	if (!ucma_buddy_take_range(z, end, new_end))
		ucma_fatal("internal error: free pages %u-%u of zone %s are not free", end,
			   new_end, z->name);
	/*
	 * The new tails first, with the head's owner (the mirror a lookup
	 * by any page relies on), then the head's length: a page the run
	 * does not cover yet is never reached through it.
	 */
	set_tails(a, pfn, end, new_end);
	__atomic_store_n(&h->aux, npages, __ATOMIC_RELEASE);
	wake = crossed_low_wmark(z, new_end - end);
	/* The zone's use grows as by an allocation: the same switch to huge
	 * pages (alloc_zone_once()), or a heap grown by realloc alone would
	 * never get them. */
	grow = thp_due(z);
	ucma_mutex_unlock(&z->lock);
	pages_unpoison(a, end, new_end - end);
	if (UCMA_UNLIKELY(wake))
		ucma_compactd_wakeup();
	if (UCMA_UNLIKELY(grow))
		thp_grow(z);
	return true;
}

/* Without the zone lock: the caller owns the run, or revalidates. */
uint32_t ucma_run_head(const struct ucma_arena *a, uint32_t pfn)
{
	const struct ucma_page *p = &a->pages[pfn];
	uint8_t kind = UCMA_PG_GET(p, kind);

	if (kind == UCMA_PK_RUN)
		return pfn;
	if (kind == UCMA_PK_TAIL)
		return UCMA_PG_GET(p, aux);
	return UCMA_PFN_NONE;
}

void ucma_run_set_owner(struct ucma_arena *a, uint32_t pfn, int owner_type, uint64_t owner)
{
	struct ucma_page *head = &a->pages[pfn], *end = head + head->aux;

	/* Atomic stores: compaction and lookups read owner and owner_type
	 * without the run's allocator (owner_type with acquire, then owner).
	 * (The bound as a pointer, read once, as in set_tails().) */
	for (struct ucma_page *p = head; p < end; p++) {
		__atomic_store_n(&p->owner, owner, __ATOMIC_RELAXED);
		__atomic_store_n(&p->owner_type, (uint8_t)owner_type, __ATOMIC_RELEASE);
	}
}

/* ------------------------------------------------------------------------ */
/* Isolation                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * ucma_isolate_range_noted() - isolate the pageblocks of [start, end)
 * (pageblock aligned, inside one zone): their free pages leave the usable
 * free lists and nothing new is placed there until
 * ucma_undo_isolate_range().  Isolation nests.  *@note (unless NULL) is
 * set in the same critical section.  Returns 0, or -1 with EINVAL for a
 * bad range.
 */
int ucma_isolate_range_noted(struct ucma_arena *a, uint32_t start, uint32_t end, bool *note)
{
	struct ucma_zone *z;

	if (start >= end || end > a->npages || (start | end) & (UCMA_PAGEBLOCK_PAGES - 1)) {
		errno = EINVAL;
		return -1;
	}
	z = ucma_pfn_zone(a, start);
	if (ucma_pfn_zone(a, end - 1) != z) {
		errno = EINVAL;
		return -1;
	}
	/* Every list lock first: no list takes or hands out a page of the
	 * range between the isolation and the drain (pcp.c). */
	ucma_pcp_lock_all(z);
	ucma_mutex_lock(&z->lock);
	for (uint32_t b = start >> UCMA_PAGEBLOCK_ORDER; b < end >> UCMA_PAGEBLOCK_ORDER; b++)
		isolate_pageblock_locked(z, b);
	ucma_pcp_drain_range_locked(z, start, end);
	if (note)
		*note = true;
	ucma_mutex_unlock(&z->lock);
	ucma_pcp_unlock_all(z);
	return 0;
}

void ucma_undo_isolate_range_noted(struct ucma_arena *a, uint32_t start, uint32_t end,
				   bool *note)
{
	struct ucma_zone *z = ucma_pfn_zone(a, start);

	ucma_mutex_lock(&z->lock);
	for (uint32_t b = start >> UCMA_PAGEBLOCK_ORDER; b < end >> UCMA_PAGEBLOCK_ORDER; b++)
		ucma_undo_isolate_locked(z, b);
	if (note)
		*note = false;
	ucma_mutex_unlock(&z->lock);
}

/* Returns true if every page of [start, end) is free (any free list). */
bool ucma_range_free(struct ucma_arena *a, uint32_t start, uint32_t end)
{
	struct ucma_zone *z = ucma_pfn_zone(a, start);
	bool is_free;

	ucma_mutex_lock(&z->lock);
	is_free = ucma_buddy_range_free(z, start, end);
	ucma_mutex_unlock(&z->lock);
	return is_free;
}

/*
 * ucma_claim_free_range_noted() - make the free pages [start, end) one
 * allocated run owned by (@owner_type, @owner), and set *@note (unless
 * NULL) in the same critical section.  Returns 0, or -1 with EBUSY when a
 * page of the range is not free.
 */
int ucma_claim_free_range_noted(struct ucma_arena *a, uint32_t start, uint32_t end,
				int owner_type, uint64_t owner, bool *note)
{
	struct ucma_zone *z = ucma_pfn_zone(a, start);

	if (start >= end || end > z->end_pfn || start < z->start_pfn) {
		errno = EINVAL;
		return -1;
	}
	ucma_mutex_lock(&z->lock);
	if (!ucma_buddy_take_range(z, start, end)) {
		ucma_mutex_unlock(&z->lock);
		errno = EBUSY;
		return -1;
	}
	set_run(a, start, end - start, false);
	if (note)
		*note = true;
	ucma_mutex_unlock(&z->lock);
	pages_unpoison(a, start, end - start);
	ucma_run_set_owner(a, start, owner_type, owner);
	return 0;
}

/* Is the pageblock at @pfn of CMA zone @z wholly free, of the CMA type
 * (not isolated), and accepted by @usable?  Under the zone lock. */
static bool pageblock_free_whole(const struct ucma_zone *z, uint32_t pfn,
				 bool (*usable)(const struct ucma_arena *a, uint32_t pfn))
{
	return pfn >= z->start_pfn && pfn + UCMA_PAGEBLOCK_PAGES <= z->end_pfn &&
	       ucma_pfn_block(z->arena, pfn)->mt == UCMA_MT_CMA &&
	       ucma_buddy_range_free(z, pfn, pfn + UCMA_PAGEBLOCK_PAGES) && usable(z->arena, pfn);
}

/*
 * ucma_zone_take_free_pageblock() - a wholly free pageblock of the CMA
 * zone @z that @usable accepts (isolated ones are on no list it looks
 * at), as one allocated run of (@owner_type, @owner).  @prefer, when it
 * is such a pageblock, is taken: the caller asks for the frame whose file
 * offset continues a neighbour's mapping, so that the kernel merges the
 * two mappings.  Otherwise the highest one, or rather the lowest of the
 * free pageblocks just below it, up to @grow - 1 of them: the ones that
 * follow can then continue upwards from it, @grow pageblocks to one
 * mapping, while they all stay at the top of the zone.  Highest: the
 * lowest runs stay for ucma_alloc(), which looks there first.  *@dirty:
 * whether its pages may hold old data.  Returns its first pfn, or
 * UCMA_PFN_NONE.  Takes the zone lock (callers may hold NORMAL's).  When
 * none is free, the per-CPU lists are drained and the search runs again:
 * a pageblock whose last pages sit on a list is free all the same.
 */
uint32_t ucma_zone_take_free_pageblock(struct ucma_zone *z,
				       bool (*usable)(const struct ucma_arena *a, uint32_t pfn),
				       int owner_type, uint64_t owner, uint32_t prefer,
				       unsigned grow, bool *dirty)
{
	struct ucma_arena *a = z->arena;
	uint32_t best = UCMA_PFN_NONE, d;

	for (int pass = 0;; pass++) {
		ucma_mutex_lock(&z->lock);
		if (prefer != UCMA_PFN_NONE && pageblock_free_whole(z, prefer, usable)) {
			best = prefer;
			break;
		}
		for (uint32_t pfn = z->free_area[UCMA_MAX_ORDER].head[UCMA_MT_CMA];
		     pfn != UCMA_PFN_NONE; pfn = a->pages[pfn].link.next)
			if ((best == UCMA_PFN_NONE || pfn > best) && usable(a, pfn))
				best = pfn;
		d = ucma_buddy_deferred_highest(z, UCMA_MT_CMA, usable);
		if (d != UCMA_PFN_NONE && (best == UCMA_PFN_NONE || d > best))
			best = d;
		if (best != UCMA_PFN_NONE || pass > 0 || !z->pcp || !ucma_pcp_pages(z))
			break;
		ucma_mutex_unlock(&z->lock);
		ucma_pcp_drain_zone(z);
	}
	if (best != UCMA_PFN_NONE && best != prefer)
		for (unsigned k = 1; k < grow && best >= UCMA_PAGEBLOCK_PAGES &&
				     pageblock_free_whole(z, best - UCMA_PAGEBLOCK_PAGES, usable);
		     k++)
			best -= UCMA_PAGEBLOCK_PAGES;
	if (best != UCMA_PFN_NONE) {
		ucma_buddy_materialise(z, best, best + UCMA_PAGEBLOCK_PAGES);
		*dirty = a->pages[best].flags & UCMA_PF_DIRTY;
		if (!ucma_buddy_take_range(z, best, best + UCMA_PAGEBLOCK_PAGES))
			ucma_fatal("internal error: free pageblock %u is not free", best);
		set_run(a, best, UCMA_PAGEBLOCK_PAGES, false);
		ucma_run_set_owner(a, best, owner_type, owner);
	}
	ucma_mutex_unlock(&z->lock);
	if (best != UCMA_PFN_NONE)
		pages_unpoison(a, best, UCMA_PAGEBLOCK_PAGES);
	return best;
}

/* ------------------------------------------------------------------------ */
/* Reports and checks                                                        */
/* ------------------------------------------------------------------------ */

/* Free blocks per order: the buddy lists' and the runs on per-CPU lists. */
void ucma_zone_free_counts(struct ucma_zone *z, uint64_t counts[UCMA_NR_ORDERS])
{
	ucma_pcp_lock_all(z);
	ucma_mutex_lock(&z->lock);
	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++) {
		counts[o] = 0;
		for (int mt = 0; mt < UCMA_MT_NR; mt++)
			counts[o] += z->free_area[o].nr_free[mt];
	}
	ucma_pcp_counts_locked(z, counts);
	ucma_mutex_unlock(&z->lock);
	ucma_pcp_unlock_all(z);
}

void ucma_zone_pageblock_counts(struct ucma_arena *a, int zone, uint64_t counts[UCMA_MT_NR])
{
	struct ucma_zone *z = &a->zones[zone];

	for (int mt = 0; mt < UCMA_MT_NR; mt++)
		counts[mt] = 0;
	ucma_mutex_lock(&z->lock);
	for (uint32_t b = z->start_pfn >> UCMA_PAGEBLOCK_ORDER; b < z->end_pfn >> UCMA_PAGEBLOCK_ORDER;
	     b++)
		counts[a->blocks[b].mt]++;
	ucma_mutex_unlock(&z->lock);
}

#define CHECK(cond, ...)                                      \
	do {                                                  \
		if (!(cond)) {                                \
			snprintf(why, whylen, __VA_ARGS__);   \
			goto bad;                             \
		}                                             \
	} while (0)

/*
 * ucma_zone_check() - verify every invariant of the zone's buddy state.
 * Returns 0, or -1 with a description of the first violation in @why.
 * Takes the per-CPU list locks and the zone lock; O(pages).  For tests and
 * debug builds.  Runs on per-CPU lists are allocated runs to the buddy
 * invariants; ucma_pcp_check_locked() verifies the lists themselves.
 */
int ucma_zone_check(struct ucma_zone *z, char *why, size_t whylen)
{
	struct ucma_arena *a = z->arena;
	uint64_t listed = 0, walked = 0;
	uint32_t deferred[UCMA_MT_NR] = { 0 }, run_end = 0;

	ucma_pcp_lock_all(z);
	ucma_mutex_lock(&z->lock);
	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++) {
		for (int mt = 0; mt < UCMA_MT_NR; mt++) {
			uint64_t n = 0;
			uint32_t prev = UCMA_PFN_NONE;

			for (uint32_t pfn = z->free_area[o].head[mt]; pfn != UCMA_PFN_NONE;
			     pfn = a->pages[pfn].link.next) {
				struct ucma_page *p = &a->pages[pfn];

				CHECK(pfn >= z->start_pfn && pfn < z->end_pfn,
				      "order %u mt %d: pfn %u outside zone", o, mt, pfn);
				CHECK(p->kind == UCMA_PK_FREE && p->order == o,
				      "order %u mt %d: pfn %u kind %u order %u", o, mt, pfn,
				      p->kind, p->order);
				CHECK((pfn & ((1u << o) - 1)) == 0, "pfn %u misaligned for order %u",
				      pfn, o);
				CHECK(!ucma_pageblock_deferred(a, pfn),
				      "pfn %u on list %d in a deferred pageblock", pfn, mt);
				CHECK(a->blocks[pfn >> UCMA_PAGEBLOCK_ORDER].mt == mt,
				      "pfn %u on list %d but pageblock is %d", pfn, mt,
				      a->blocks[pfn >> UCMA_PAGEBLOCK_ORDER].mt);
				CHECK(p->link.prev == prev, "pfn %u: broken prev link", pfn);
				if (o < UCMA_MAX_ORDER) {
					struct ucma_page *b = &a->pages[pfn ^ (1u << o)];

					CHECK(!(b->kind == UCMA_PK_FREE && b->order == o),
					      "free buddies %u and %u of order %u not merged", pfn,
					      pfn ^ (1u << o), o);
				}
				prev = pfn;
				n++;
				listed += 1u << o;
				CHECK(n <= z->managed_pages, "order %u mt %d: list loops", o, mt);
			}
			/* Deferred pageblocks count as order-9 blocks (buddy.c). */
			if (o == UCMA_MAX_ORDER) {
				n += z->nr_deferred[mt];
				listed += (uint64_t)z->nr_deferred[mt] << UCMA_MAX_ORDER;
			}
			CHECK(n == z->free_area[o].nr_free[mt], "order %u mt %d: count %llu != %llu",
			      o, mt, (unsigned long long)n,
			      (unsigned long long)z->free_area[o].nr_free[mt]);
		}
	}
	CHECK(listed == z->free_pages, "listed free pages %llu != free_pages %llu",
	      (unsigned long long)listed, (unsigned long long)z->free_pages);
	for (uint32_t b = z->start_pfn >> UCMA_PAGEBLOCK_ORDER; b < z->end_pfn >> UCMA_PAGEBLOCK_ORDER;
	     b++) {
		uint32_t start = b << UCMA_PAGEBLOCK_ORDER, end = start + UCMA_PAGEBLOCK_PAGES;
		uint32_t nfree = 0, longest = 0, ext_start = 0, ext_end = UCMA_PFN_NONE;

		CHECK(z->id != UCMA_ZONE_CMA || a->blocks[b].mt == UCMA_MT_CMA ||
			      a->blocks[b].mt == UCMA_MT_ISOLATE,
		      "CMA pageblock %u has migratetype %d", b, a->blocks[b].mt);
		CHECK(z->id == UCMA_ZONE_CMA || a->blocks[b].mt != UCMA_MT_CMA,
		      "NORMAL pageblock %u has migratetype CMA", b);
		CHECK(ucma_extent_levels_hold(a, b),
		      "pageblock %u: its bit in the levels of pageblocks with room is not at its "
		      "level, %u, or its deferred bit is not %u", b, a->blocks[b].levels,
		      a->blocks[b].deferred);
		if (a->blocks[b].deferred) {
			/* Wholly free, never isolated, its metadata not read. */
			CHECK(b >= z->deferred_first, "deferred pageblock %u below the first, %u", b,
			      z->deferred_first);
			CHECK(a->blocks[b].mt != UCMA_MT_ISOLATE && !a->blocks[b].isolate_count,
			      "deferred pageblock %u is isolated", b);
			CHECK(a->blocks[b].nr_free == UCMA_PAGEBLOCK_PAGES,
			      "deferred pageblock %u counts %u free pages", b, a->blocks[b].nr_free);
			CHECK(a->blocks[b].levels == 0,
			      "deferred pageblock %u reaches %u levels", b, a->blocks[b].levels);
			CHECK(run_end <= start, "a run reaches into deferred pageblock %u", b);
			deferred[a->blocks[b].mt]++;
			walked += UCMA_PAGEBLOCK_PAGES;
			continue;
		}
		for (uint32_t pfn = start; pfn < end;) {
			struct ucma_page *p = &a->pages[pfn];

			if (p->kind == UCMA_PK_FREE) {
				if (pfn != ext_end)
					ext_start = pfn;
				nfree += 1u << p->order;
				pfn += 1u << p->order;
				ext_end = pfn;
				if (ext_end - ext_start > longest)
					longest = ext_end - ext_start;
			} else if (p->kind == UCMA_PK_RUN) {
				CHECK(p->aux > 0, "run at %u has no pages", pfn);
				/* Only contiguous buffers (alloc-contig-range
				 * claims any free range) and unmovable runs of
				 * NORMAL (take_across()) may start inside a
				 * pageblock and run past its end. */
				if (pfn + p->aux > end)
					CHECK(pfn == start ||
						      UCMA_PG_GET(p, owner_type) == UCMA_OWN_CONTIG ||
						      run_may_cross(z, p->flags),
					      "run at %u crosses a pageblock", pfn);
				run_end = pfn + p->aux;
				pfn += p->aux;
			} else if (p->kind == UCMA_PK_TAIL) {
				CHECK(pfn == start && a->pages[p->aux].kind == UCMA_PK_RUN &&
					      p->aux + a->pages[p->aux].aux > pfn,
				      "stray tail page %u", pfn);
				pfn = p->aux + a->pages[p->aux].aux;
			} else {
				CHECK(0, "page %u is neither free nor allocated", pfn);
			}
		}
		CHECK(nfree == a->blocks[b].nr_free, "pageblock %u: %u free pages, counted %u", b,
		      nfree, a->blocks[b].nr_free);
		CHECK(a->blocks[b].levels >= ucma_extent_level_count(longest),
		      "pageblock %u has a free extent of %u pages but reaches %u levels", b,
		      longest, a->blocks[b].levels);
		walked += nfree;
	}
	CHECK(walked == z->free_pages, "walked free pages %llu != %llu",
	      (unsigned long long)walked, (unsigned long long)z->free_pages);
	for (int mt = 0; mt < UCMA_MT_NR; mt++)
		CHECK(deferred[mt] == z->nr_deferred[mt], "mt %d: %u deferred pageblocks, counted %u",
		      mt, deferred[mt], z->nr_deferred[mt]);
	if (ucma_pcp_check_locked(z, why, whylen) != 0)
		goto bad;
	ucma_mutex_unlock(&z->lock);
	ucma_pcp_unlock_all(z);
	return 0;
bad:
	ucma_mutex_unlock(&z->lock);
	ucma_pcp_unlock_all(z);
	return -1;
}

/* ------------------------------------------------------------------------ */
/* Decay                                                                     */
/* ------------------------------------------------------------------------ */

/*
 * A purge of a fragmented zone makes thousands of madvise calls, and held
 * the zone lock for all of them, so every allocation of the zone waited as
 * long: 30-35 ms for a trim (malloc_trim(), ucma_trim()) of 8,192
 * scattered 40 KiB holes, 22-24 ms for the decay's pass over 4,096 of
 * 128 KiB (make bench-trim, tests/bench/RESULTS.md).  It
 * works as the kernel's free page reporting does instead: a
 * few dirty free blocks at a time are taken off the free lists under the
 * lock, given back to the kernel with no lock held, and freed again,
 * clean.  Taken, they are a run owned by nobody (UCMA_OWN_NONE): every
 * walk of the page metadata sees pages in use, nothing can allocate them,
 * and a free beside them cannot merge with them.
 *
 * A batch holds at most PURGE_BATCH_BLOCKS blocks and one pageblock's
 * worth of pages, so an allocation that fails only because a purge held
 * what it needed is rare.  Such an allocation (alloc_zone()) sees that
 * batches came and went while it tried (@purge.seq), pauses the zone's
 * purges, waits for the batch held, and tries once more, with nothing
 * held then; the pause covers that one try, which waits for nothing.  A
 * contiguous buffer (cma.c) needs no retry: a purge takes nothing from
 * isolated pageblocks, so once its range is isolated and the batch held
 * then is back (ucma_zone_purge_settle()), every free page of the range
 * is on the lists.  Without either, a trim looping in another thread made
 * a whole-area ucma_alloc() fail with EBUSY.  The zone's @purge.lock is
 * held for a batch, from its taking to its freeing, so that a fork (which
 * takes it, ucma_zone_purge_fork_prepare()) never leaves the child with
 * blocks that nobody will give back, and so that such an allocation has
 * something to wait on.  Its place in the locking order: after the CMA
 * area locks (a free of pages may purge under one), before the per-CPU
 * list locks and the zone lock; a purge takes only the zone lock while it
 * holds it (the per-CPU lists are drained before).  The state is the
 * zone's (struct ucma_zone_purge), so a zone made anew starts afresh.
 */
#define PURGE_BATCH_BLOCKS 32u
#define PURGE_BATCH_PAGES  UCMA_PAGEBLOCK_PAGES
/* Pageblocks one look under the lock walks at most, batch or not. */
#define PURGE_SCAN_PAGEBLOCKS 64u

struct purge_batch {
	uint32_t pfn[PURGE_BATCH_BLOCKS];
	uint32_t npages[PURGE_BATCH_BLOCKS];
	unsigned n;
	uint32_t pages;
};

/*
 * Take the dirty free blocks of at least @min_order pages, freed in a
 * purge epoch before @before, from pfn *@cursor on into @b, until it is
 * full, PURGE_SCAN_PAGEBLOCKS pageblocks were looked at, or the zone
 * ends; *@cursor is where the next look goes on.  The walk follows the
 * page metadata (a free head, a run's head, a run's tail; a page inside a
 * free block, which happens only where a block merged across the cursor
 * since the last look, sends it back to that block's head), and passes
 * over pageblocks without free pages, deferred ones (clean) and isolated
 * ones whole.  A borrowed pageblock's pages are a frame's: a wholly free
 * one gives its frame back instead.  Zone lock held.
 */
static void purge_collect(struct ucma_zone *z, uint32_t *cursor, unsigned min_order,
			  uint32_t before, struct purge_batch *b)
{
	struct ucma_arena *a = z->arena;
	uint32_t pfn = *cursor, last_pb = UINT32_MAX;
	unsigned looked = 0;

	while (pfn < z->end_pfn && b->n < PURGE_BATCH_BLOCKS) {
		uint32_t pb = pfn >> UCMA_PAGEBLOCK_ORDER;
		uint32_t pb_end = (pb + 1) << UCMA_PAGEBLOCK_ORDER;
		struct ucma_page *p;

		if (pb != last_pb) {
			if (looked++ == PURGE_SCAN_PAGEBLOCKS)
				break;
			last_pb = pb;
		}

		/* (An isolated pageblock is being emptied for a contiguous
		 * buffer: its free pages are about to be used.) */
		if (a->blocks[pb].deferred || a->blocks[pb].nr_free == 0 ||
		    a->blocks[pb].mt == UCMA_MT_ISOLATE) {
			pfn = pb_end;
			continue;
		}
		if (ucma_lend_borrowed(a, pb)) {
			if (a->blocks[pb].nr_free == UCMA_PAGEBLOCK_PAGES)
				ucma_lend_return_free_locked(z, pb);
			pfn = pb_end;
			continue;
		}
		p = &a->pages[pfn];
		if (p->kind == UCMA_PK_FREE) {
			uint32_t n = 1u << p->order;

			if (p->order >= min_order && (p->flags & UCMA_PF_DIRTY) && p->aux < before) {
				if (b->pages + n > PURGE_BATCH_PAGES && b->n)
					break;	/* the next batch's */
				if (!ucma_buddy_take_range(z, pfn, pfn + n))
					ucma_fatal("internal error: zone %s: free block %u+%u "
						   "could not be taken", z->name, pfn, n);
				set_run(a, pfn, n, false);
				b->pfn[b->n] = pfn;
				b->npages[b->n++] = n;
				b->pages += n;
			}
			pfn += n;
		} else if (p->kind == UCMA_PK_RUN && p->aux > 0) {
			pfn += p->aux;
		} else if (p->kind == UCMA_PK_TAIL && p->aux < pfn &&
			   a->pages[p->aux].kind == UCMA_PK_RUN &&
			   p->aux + a->pages[p->aux].aux > pfn) {
			pfn = p->aux + a->pages[p->aux].aux;
		} else {
			/* Inside a free block: one that merged across the
			 * cursor since the last look (a batch given back, a
			 * free beside it).  From its head, so that its part
			 * on this side, dirty before the purge began, goes
			 * too (the part already given back, again). */
			uint32_t h = ucma_buddy_free_head(z, pfn);

			pfn = h != UCMA_PFN_NONE && h < pfn ? h : pfn + 1;
		}
	}
	*cursor = pfn;
}

/* Give the blocks of @b back to the kernel, no lock held; ok[i] false for
 * each that madvise refused (it stays dirty).  Adjacent blocks go in one
 * call. */
static void purge_advise(struct ucma_zone *z, const struct purge_batch *b, bool *ok)
{
	struct ucma_arena *a = z->arena;

	for (unsigned i = 0; i < b->n;) {
		unsigned j = i + 1;
		uint32_t end = b->pfn[i] + b->npages[i];
		bool done;

		while (j < b->n && b->pfn[j] == end)
			end += b->npages[j++];
		done = ucma_os.madvise(ucma_pfn_to_addr(a, b->pfn[i]),
				       (size_t)(end - b->pfn[i]) << UCMA_PAGE_SHIFT,
				       MADV_DONTNEED) == 0;
		while (i < j)
			ok[i++] = done;
	}
}

/* One look from *@cursor on (purge_collect()) and its batch given back,
 * the pages given back added to *@purged; false, doing nothing, while an
 * allocation has the purges paused. */
static bool purge_step(struct ucma_zone *z, uint32_t *cursor, unsigned min_order,
		       uint32_t before, uint64_t *purged)
{
	struct purge_batch b = { .n = 0 };
	bool ok[PURGE_BATCH_BLOCKS];

	ucma_mutex_lock(&z->purge.lock);
	ucma_mutex_lock(&z->lock);
	/* (Looked at under the zone lock: see ucma_zone_purge_hold_off().) */
	if (atomic_load_explicit(&z->purge.pause, memory_order_seq_cst)) {
		ucma_mutex_unlock(&z->lock);
		ucma_mutex_unlock(&z->purge.lock);
		return false;
	}
	purge_collect(z, cursor, min_order, before, &b);
	if (b.n == 0) {
		ucma_mutex_unlock(&z->lock);
		ucma_mutex_unlock(&z->purge.lock);
		return true;
	}
	z->purge.held = b.pages;
	atomic_fetch_add_explicit(&z->purge.seq, 1, memory_order_release);
	ucma_mutex_unlock(&z->lock);
	purge_advise(z, &b, ok);
	ucma_mutex_lock(&z->lock);
	for (unsigned i = 0; i < b.n; i++) {
		run_forget(z->arena, b.pfn[i], b.npages[i]);
		ucma_buddy_free_clean_range(z, b.pfn[i], b.npages[i], !ok[i]);
		if (ok[i])
			*purged += b.npages[i];
	}
	z->list_gen++;	/* clean now: nofit_known() */
	z->purge.held = 0;
	atomic_fetch_add_explicit(&z->purge.seq, 1, memory_order_release);
	ucma_mutex_unlock(&z->lock);
	ucma_mutex_unlock(&z->purge.lock);
	return true;
}

/* After pages were given back: counted, and clean pages are no longer all
 * mapped, so migration copies populate their destinations again
 * (zone_alloc_in()). */
static void purge_note(struct ucma_zone *z, uint64_t purged)
{
	if (!purged)
		return;
	if (__atomic_load_n(&z->prefaulted, __ATOMIC_RELAXED))
		__atomic_store_n(&z->prefaulted, false, __ATOMIC_RELAXED);
	ucma_count(UCMA_STAT_PURGED_PAGES, purged);
}

/* Every dirty free block of @z of at least @min_order pages freed before
 * epoch @before, batch by batch; the number of pages given back. */
static uint64_t purge_all(struct ucma_zone *z, unsigned min_order, uint32_t before)
{
	uint32_t cursor = z->start_pfn;
	uint64_t purged = 0;

	while (cursor < z->end_pfn) {
		if (!purge_step(z, &cursor, min_order, before, &purged)) {
			struct timespec ts = { 0, 100 * 1000 };	/* an allocation first */

			nanosleep(&ts, NULL);
		}
	}
	return purged;
}

uint32_t ucma_zone_purge_seq(const struct ucma_zone *z)
{
	return atomic_load_explicit(&z->purge.seq, memory_order_acquire);
}

void ucma_zone_purge_settle(struct ucma_zone *z)
{
	if (atomic_load_explicit(&z->purge.seq, memory_order_acquire) & 1) {
		ucma_mutex_lock(&z->purge.lock);
		ucma_mutex_unlock(&z->purge.lock);
	}
}

bool ucma_zone_purge_hold_off(struct ucma_zone *z, uint32_t since)
{
	uint32_t now = atomic_load_explicit(&z->purge.seq, memory_order_acquire);

	if (now == since && !(now & 1))
		return false;	/* no batch since, none now */
	atomic_fetch_add_explicit(&z->purge.pause, 1, memory_order_seq_cst);
	/* A step that looked before the pause took its batch in the same
	 * critical section: held by now, if not given back. */
	ucma_mutex_lock(&z->lock);
	ucma_mutex_unlock(&z->lock);
	ucma_zone_purge_settle(z);
	return true;
}

void ucma_zone_purge_resume(struct ucma_zone *z)
{
	atomic_fetch_sub_explicit(&z->purge.pause, 1, memory_order_release);
}

void ucma_zone_purge_fork_prepare(struct ucma_arena *a)
{
	for (int i = 0; i < UCMA_ZONE_NR; i++)
		ucma_mutex_lock(&a->zones[i].purge.lock);
}

void ucma_zone_purge_fork_parent(struct ucma_arena *a)
{
	for (int i = UCMA_ZONE_NR - 1; i >= 0; i--)
		ucma_mutex_unlock(&a->zones[i].purge.lock);
}

/*
 * The smallest block a purge of @z gives back.  On transparent huge pages
 * the periodic purge gives back whole pageblocks only: a smaller piece
 * would split its huge page, and every later first touch of it would fault
 * page by page until khugepaged rebuilds it, which by default
 * (max_ptes_none 511) it does around a single used page, taking the memory
 * back anyway.  malloc_trim() (@all) gives back everything in NORMAL, and
 * whole pageblocks in the CMA zone (see ucma_zone_purge()).
 */
static unsigned purge_min_order(const struct ucma_zone *z, bool all)
{
	bool thp = z->backing == UCMA_BACKING_THP && !z->thp_deferred;

	if (all)
		return thp && z->id == UCMA_ZONE_CMA ? UCMA_PAGEBLOCK_ORDER : 0;
	return thp ? UCMA_PAGEBLOCK_ORDER : UCMA_PURGE_MIN_ORDER;
}

/* A new purge epoch of @z; the one it ends (blocks freed in it or before
 * are the decay's). */
static uint32_t purge_epoch_next(struct ucma_zone *z)
{
	uint32_t epoch;

	ucma_mutex_lock(&z->lock);
	epoch = z->purge_epoch++;
	ucma_mutex_unlock(&z->lock);
	return epoch;
}

/*
 * ucma_zone_purge() - return dirty free blocks to the kernel, in batches
 * without the zone lock across madvise (purge_all()); the number of pages
 * given back.  With @all (malloc_trim()), every dirty block of any order,
 * except in the CMA zone on transparent huge pages: whole pageblocks there
 * too, since the areas' huge pages are runs of physically contiguous
 * frames that device buffers want, and a smaller piece given back would
 * split its huge page under a live buffer beside it; the per-CPU lists
 * are drained first, so their pages merge and go too.  Without @all (the
 * decay), blocks of at least UCMA_PURGE_MIN_ORDER (whole pageblocks on
 * transparent huge pages) freed before the current epoch; the per-CPU
 * lists keep theirs, as pages about to be used again.
 */
uint64_t ucma_zone_purge(struct ucma_zone *z, bool all)
{
	uint64_t purged;
	uint32_t epoch;

	if (zone_keeps_memory(z))
		return 0;
	if (all && z->pcp)
		ucma_pcp_drain_zone(z);
	epoch = purge_epoch_next(z);
	purged = purge_all(z, purge_min_order(z, all), all ? UINT32_MAX : epoch);
	purge_note(z, purged);
	/* Frames given back above posted MAP events, delivered by the public
	 * call that purged (ucma_trim()), or else by the next ucma_alloc():
	 * not here, where free() may be in the middle of its own work and a
	 * callback's malloc() would run inside it. */
	return purged;
}

/*
 * The decay's pass over a zone goes a little at a time: each free of pages
 * gives back what DECAY_STEP_NS allows (whole batches), and the next frees
 * go on where it stopped.  A pass in one go made the free() that ran it
 * wait for all of it: 22-24 ms for 4,096 dirty 128 KiB holes (bench_trim
 * decay, tests/bench/RESULTS.md), 1.1-1.2 ms a free now.  Its state is the zone's (struct ucma_zone_purge);
 * a tick finds a pass unfinished and starts it again from the zone's
 * start, with the new epoch.  The fork child clears @busy
 * (ucma_zone_purge_fork_child()): its holder is not there.
 */
#define DECAY_STEP_NS 1000000ull

/* A tick: a new pass over @z from its start, if no other thread is in
 * one. */
static void decay_start(struct ucma_zone *z)
{
	if (atomic_exchange_explicit(&z->purge.busy, 1, memory_order_acquire))
		return;
	z->purge.before = purge_epoch_next(z);
	z->purge.cursor = z->start_pfn;
	z->purge.min_order = purge_min_order(z, false);
	atomic_store_explicit(&z->purge.active, true, memory_order_relaxed);
	atomic_store_explicit(&z->purge.busy, 0, memory_order_release);
}

/* Some more of @z's pass, if one is under way and no other thread is in
 * it. */
static void decay_step(struct ucma_zone *z)
{
	uint64_t t0, purged = 0;

	if (!atomic_load_explicit(&z->purge.active, memory_order_relaxed) ||
	    atomic_exchange_explicit(&z->purge.busy, 1, memory_order_acquire))
		return;
	t0 = ucma_os_now_ns();
	while (z->purge.cursor < z->end_pfn) {
		if (!purge_step(z, &z->purge.cursor, z->purge.min_order,
				z->purge.before, &purged) ||
		    ucma_os_now_ns() - t0 >= DECAY_STEP_NS)
			break;	/* paused by an allocation, or enough for this free */
	}
	if (z->purge.cursor >= z->end_pfn)
		atomic_store_explicit(&z->purge.active, false, memory_order_relaxed);
	atomic_store_explicit(&z->purge.busy, 0, memory_order_release);
	purge_note(z, purged);
}

void ucma_zone_purge_fork_child(struct ucma_arena *a)
{
	/* The pauses and the pass were other threads': the forking thread is
	 * in fork(), not in an allocation or a free of pages. */
	for (int i = 0; i < UCMA_ZONE_NR; i++) {
		atomic_store_explicit(&a->zones[i].purge.busy, 0, memory_order_relaxed);
		atomic_store_explicit(&a->zones[i].purge.pause, 0, memory_order_relaxed);
	}
}

static void maybe_purge(struct ucma_zone *z)
{
	uint64_t now, next;

	/* NORMAL ticks even where it keeps its own memory (hugetlb): the
	 * malloc family's kept slabs and blocks decay by its ticks. */
	if (ucma_opt.decay_ms == 0 || (zone_keeps_memory(z) && z->id != UCMA_ZONE_NORMAL))
		return;
	now = ucma_os_now_ns();
	next = atomic_load_explicit(&z->purge.next_tick_ns, memory_order_relaxed);
	if (now < next ||
	    !atomic_compare_exchange_strong(&z->purge.next_tick_ns, &next,
					    now + (uint64_t)ucma_opt.decay_ms * 500000ull)) {
		/* Not a tick, or another thread's: the pass goes on. */
		if (!zone_keeps_memory(z))
			decay_step(z);
		return;
	}
	if (next != 0 && !zone_keeps_memory(z)) {
		decay_start(z);
		decay_step(z);
	}
	/* The malloc family's blocks kept outside the arena decay too,
	 * when a program frees no more of them, and the wholly free slabs
	 * the central bins keep (before the zone's next purge, which takes
	 * their pages). */
	if (z->id == UCMA_ZONE_NORMAL) {
		ucma_overflow_decay();
		ucma_slab_decay();
	}
}
