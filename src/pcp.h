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
 * Orders with per-CPU lists: runs of exactly 1, 2, 4, 8 and 16 pages
 * (4 to 64 KiB).  A run of another length (3 pages: a block of 4 with a
 * page given back) goes to the buddy lists, as does anything larger.
 * tests/bench/RESULTS.md has the measurement behind the bound.
 */
#define UCMA_PCP_MAX_ORDER 4
#define UCMA_PCP_NR_ORDERS (UCMA_PCP_MAX_ORDER + 1)
/* One list per migratetype a run can be allocated from: UNMOVABLE,
 * MOVABLE (NORMAL) and CMA (the CMA zone); ISOLATE never has one. */
#define UCMA_PCP_NR_MT UCMA_MT_ISOLATE

/*
 * struct ucma_pcp - the lists of one CPU for one zone (the kernel's
 * per_cpu_pages).  A page on a list is the head of an allocated run of
 * 2^order pages (kind RUN, aux = 2^order, tails TAIL) nobody owns:
 * owner_type NONE, UCMA_PF_PCP in its flags, and the next run of its list
 * in link.next.  To the buddy allocator and every walk of the zone it is
 * allocated; to the zone's statistics it is free.
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
	uint32_t count;					/* pages on all lists */
	uint32_t head[UCMA_PCP_NR_ORDERS][UCMA_PCP_NR_MT];	/* first run, or NONE */
	uint32_t nr[UCMA_PCP_NR_ORDERS][UCMA_PCP_NR_MT];	/* runs per list */
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
	return z->pcp && npages <= (1u << UCMA_PCP_MAX_ORDER) && !(npages & (npages - 1));
}

/*
 * A run of 2^@order pages from this CPU's list of @mt, refilled from the
 * buddy lists (ucma_zone_pcp_refill()) when empty.  UCMA_PFN_NONE when
 * the zone has none, or when heap lending asks for *@lend_pb (zone.c).
 * *@dirty: whether its pages may hold old data; *@wake, *@grow: see
 * ucma_zone_pcp_refill().
 */
UCMA_INTERNAL uint32_t ucma_pcp_alloc(struct ucma_zone *z, unsigned order, int mt, unsigned gfp,
				      uint32_t *lend_pb, bool *dirty, bool *wake, bool *grow);
/* Put the run at @pfn (2^order pages, owned by the caller) on this CPU's
 * list: 1, or 2 when that sent pages on to the buddy lists (the caller
 * may purge); 0 when its pageblock is isolated: then the caller frees it
 * to the buddy lists. */
UCMA_INTERNAL int ucma_pcp_free(struct ucma_zone *z, uint32_t pfn, unsigned order);

/* drain_all_pages: every list of @z back to the buddy lists. */
UCMA_INTERNAL void ucma_pcp_drain_zone(struct ucma_zone *z);
/* Every pcp lock of @z, ascending, and back (isolation, checks, fork). */
UCMA_INTERNAL void ucma_pcp_lock_all(struct ucma_zone *z);
UCMA_INTERNAL void ucma_pcp_unlock_all(struct ucma_zone *z);
/* With every pcp lock and the zone lock held: runs of [start, end) leave
 * the lists for the buddy lists (isolation). */
UCMA_INTERNAL void ucma_pcp_drain_range_locked(struct ucma_zone *z, uint32_t start, uint32_t end);
/* With every pcp lock held: add the runs on the lists to @counts, blocks
 * per order (buddyinfo). */
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
 * blocks of 2^@order pages for requests of kind @gfp as runs (kind RUN,
 * no owner) under the zone lock, into @pfns and their dirtiness into
 * @dirty; returns how many, 0 with *@lend_pb set when heap lending wants
 * the pageblock the first one broke into; *@wake and *@grow set: wake the
 * compaction thread, ask for huge pages, once no lock is held (zone.c).
 * release: the zone lock held, the run at @pfn (2^@order pages) back to
 * the buddy lists.
 */
UCMA_INTERNAL unsigned ucma_zone_pcp_refill(struct ucma_zone *z, unsigned order, unsigned gfp,
					    uint32_t *pfns, bool *dirty, unsigned n,
					    uint32_t *lend_pb, bool *wake, bool *grow);
UCMA_INTERNAL void ucma_zone_pcp_release_locked(struct ucma_zone *z, uint32_t pfn, unsigned order,
						bool dirty);

#endif /* UCMA_PCP_H */
