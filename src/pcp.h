/*
 * pcp.h - per-CPU page lists of a zone (pcp.c): small runs freed and
 * allocated again without the zone lock, splitting or merging.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_PCP_H
#define UCMA_PCP_H

#include "internal.h"

/*
 * Runs with per-CPU lists: any length from 1 to UCMA_PCP_MAX_PAGES pages
 * (4 to 64 KiB), one list per length, so a run of 3 pages is kept as 3
 * pages (not rounded up to 4); and whole pageblocks (2 MiB), at most
 * pcp_pb_high of them per CPU, as the kernel keeps lists for the THP
 * order.  Anything else goes to the buddy lists.  tests/bench/RESULTS.md
 * has the measurement behind the bounds.
 */
#define UCMA_PCP_MAX_PAGES 16
/* List classes: class c < UCMA_PCP_MAX_PAGES holds runs of c + 1 pages,
 * class UCMA_PCP_PB_CLASS whole pageblocks. */
#define UCMA_PCP_PB_CLASS UCMA_PCP_MAX_PAGES
#define UCMA_PCP_NR_CLASSES (UCMA_PCP_MAX_PAGES + 1)
/* One list per migratetype a run can be allocated from: UNMOVABLE,
 * MOVABLE (NORMAL) and CMA (the CMA zone); ISOLATE never has one. */
#define UCMA_PCP_NR_MT UCMA_MT_ISOLATE

/* Pages of a run of list class @c. */
static inline uint32_t ucma_pcp_class_pages(unsigned c)
{
	return c == UCMA_PCP_PB_CLASS ? UCMA_PAGEBLOCK_PAGES : c + 1;
}

/*
 * struct ucma_pcp - the lists of one CPU for one zone (the kernel's
 * per_cpu_pages).  A page on a list is the head of an allocated run of
 * the list's length (kind RUN, aux = its pages, tails TAIL), inside one
 * pageblock, that nobody owns: owner_type NONE, UCMA_PF_PCP in its flags,
 * and the next run of its list in link.next.  To the buddy allocator and
 * every walk of the zone it is allocated; to the zone's statistics it is
 * free.
 *
 * Locking: @lock (lock.h) protects the lists, the counts and, for the
 * runs on the lists, what their owner would own (head flags, owner,
 * owner_type, link).  Lock order: the pcp locks of a zone in ascending
 * CPU order, then that zone's lock (refill and drain take it inside);
 * nothing takes a pcp lock while holding its zone's lock.  With
 * zone locks: pcp(NORMAL) < zone(NORMAL) < pcp(CMA) < zone(CMA), so a
 * caller holding NORMAL's zone lock may drain the CMA zone's lists.
 * A thread uses the entry of the CPU it runs on (sched_getcpu()); being
 * moved to another CPU meanwhile only costs contention, never
 * correctness.
 */
struct ucma_pcp {
	uint32_t lock;
	uint32_t count;		/* pages on the lists of runs (bounded by pcp_high) */
	uint32_t nr_dirty;	/* of those, pages in runs that may hold data */
	uint32_t nr_pb;		/* pageblocks on the pageblock lists (pcp_pb_high) */
	uint32_t head[UCMA_PCP_NR_CLASSES][UCMA_PCP_NR_MT];	/* first run, or NONE */
	uint32_t nr[UCMA_PCP_NR_CLASSES][UCMA_PCP_NR_MT];	/* runs per list */
	/* refills of other lists since this one was last used (pcp.c) */
	uint8_t idle[UCMA_PCP_NR_CLASSES][UCMA_PCP_NR_MT];
	/* page_alloc and page_free events served here: counted per CPU, as
	 * one counter shared by every CPU would cost each of them a cache
	 * miss per run (stats.c adds them up) */
	uint64_t nr_alloc, nr_free;
} __attribute__((aligned(64)));

/* Set up and tear down the lists of @z (arena.c); 0 or -1 with errno. */
UCMA_INTERNAL int ucma_pcp_init(struct ucma_zone *z);
UCMA_INTERNAL void ucma_pcp_fini(struct ucma_zone *z);

/* Does a run of @npages go through the lists of @z? */
static inline bool ucma_pcp_eligible(const struct ucma_zone *z, uint32_t npages)
{
	return z->pcp && npages > 0 &&
	       (npages <= UCMA_PCP_MAX_PAGES ||
		(npages == UCMA_PAGEBLOCK_PAGES && z->pcp_pb_high));
}

/*
 * A run of @npages (ucma_pcp_eligible()) from this CPU's list of @mt.  An
 * empty list of runs is refilled from the buddy lists
 * (ucma_zone_pcp_refill()); an empty pageblock list is not (a batch of
 * pageblocks would hold megabytes nobody asked for): UCMA_PFN_NONE, and
 * the caller takes one from the buddy lists.  UCMA_PFN_NONE also when the
 * zone has none, or when heap lending asks for *@lend_pb (zone.c).
 * *@dirty: whether its pages may hold old data; *@wake, *@grow: see
 * ucma_zone_pcp_refill().
 */
UCMA_INTERNAL uint32_t ucma_pcp_alloc(struct ucma_zone *z, uint32_t npages, int mt, unsigned gfp,
				      uint32_t *lend_pb, bool *dirty, bool *wake, bool *grow);
/* Put the run at @pfn (@npages, ucma_pcp_eligible(), inside one
 * pageblock, owned by the caller) on this CPU's list: 1, or 2 when that
 * sent pages on to the buddy lists (the caller may purge); 0 when its
 * pageblock is isolated or this CPU holds pcp_pb_high pageblocks already:
 * then the caller frees it to the buddy lists. */
UCMA_INTERNAL int ucma_pcp_free(struct ucma_zone *z, uint32_t pfn, uint32_t npages);

/* drain_all_pages: every list of @z back to the buddy lists. */
UCMA_INTERNAL void ucma_pcp_drain_zone(struct ucma_zone *z);
/*
 * The runs on @z's lists that may hold data (dirty), on every CPU, back to
 * the buddy lists, where they merge; before them, the clean runs of
 * @npages and migratetype @mt on this CPU's lists, which the next request
 * for @npages would be handed before any of those (npages 0: none).  The
 * other clean runs, which cost no memory, stay.  For a caller that was
 * handed fresh pages and asks again (slab.c).
 */
UCMA_INTERNAL void ucma_pcp_drain_dirty(struct ucma_zone *z, uint32_t npages, int mt);
/* Do @z's lists, on any CPU, hold runs that may hold data?  Read without
 * the locks: a hint for a caller about to touch fresh pages (slab.c). */
UCMA_INTERNAL bool ucma_pcp_has_dirty(const struct ucma_zone *z);
/* Every pcp lock of @z, ascending, and back (isolation, checks, fork,
 * a heap pageblock's take-back). */
UCMA_INTERNAL void ucma_pcp_lock_all(struct ucma_zone *z);
UCMA_INTERNAL void ucma_pcp_unlock_all(struct ucma_zone *z);
/* With every pcp lock and the zone lock held: runs of [start, end) leave
 * the lists for the buddy lists (isolation; lend.c before taking a
 * borrowed pageblock back, so a wholly free one gives its frame back
 * instead of being copied). */
UCMA_INTERNAL void ucma_pcp_drain_range_locked(struct ucma_zone *z, uint32_t start, uint32_t end);
/* With every pcp lock held: add the runs on the lists to @counts, blocks
 * per order (buddyinfo; a run of 3 pages counts as one block of order 1
 * and one of order 0, the blocks it would free as). */
UCMA_INTERNAL void ucma_pcp_counts_locked(struct ucma_zone *z, uint64_t counts[UCMA_NR_ORDERS]);
/* With every pcp lock and the zone lock held: verify the lists; 0, or -1
 * with a description in @why (ucma_zone_check()). */
UCMA_INTERNAL int ucma_pcp_check_locked(struct ucma_zone *z, char *why, size_t whylen);
/* page_alloc (@alloc) or page_free events the lists of @a served. */
UCMA_INTERNAL uint64_t ucma_pcp_events(const struct ucma_arena *a, bool alloc);
/* Pages on the lists of @z, without their locks (a statistic). */
UCMA_INTERNAL uint64_t ucma_pcp_pages(const struct ucma_zone *z);

/*
 * zone.c, for the lists.  refill: with the pcp lock held, take up to @n
 * runs of @npages (at most UCMA_PCP_MAX_PAGES) for requests of kind @gfp
 * (kind RUN, no owner) under the zone lock, into @pfns and their
 * dirtiness into @dirty; returns how many, 0 with *@lend_pb set when heap
 * lending wants the pageblock the first one broke into; *@wake and *@grow
 * set: wake the compaction thread, ask for huge pages, once no lock is
 * held (zone.c).  release: the zone lock held, the run at @pfn (@npages)
 * back to the buddy lists.
 */
UCMA_INTERNAL unsigned ucma_zone_pcp_refill(struct ucma_zone *z, uint32_t npages, unsigned gfp,
					    uint32_t *pfns, bool *dirty, unsigned n,
					    uint32_t *lend_pb, bool *wake, bool *grow);
UCMA_INTERNAL void ucma_zone_pcp_release_locked(struct ucma_zone *z, uint32_t pfn,
						uint32_t npages, bool dirty);

#endif /* UCMA_PCP_H */
