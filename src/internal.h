/*
 * internal.h - types and interfaces shared by the files of the library.
 *
 * Glossary (see DESIGN.md for the full vocabulary):
 *   pfn        page frame number *relative to the arena base* (uint32_t).
 *   page       4 KiB; its metadata is a 16-byte struct ucma_page, out of band.
 *   pageblock  512 pages (2 MiB), the unit of zone and migratetype assignment.
 *   block      a buddy block: 2^order pages, aligned to 2^order pages,
 *              never larger than a pageblock (UCMA_MAX_ORDER == 9).
 *   run        pages handed out by ucma_pages_alloc(): any count, exact.
 *              A run lies in one pageblock or starts on a pageblock
 *              boundary, except an unmovable run of NORMAL, which may start
 *              anywhere (zone.c take_across()), and a contiguous buffer
 *              (any free range of CMA).
 *
 * Naming: public symbols are ucma_* and declared in ucma.h; internal symbols
 * shared between files are ucma_* too but carry UCMA_INTERNAL, which hides
 * them from the shared object (the version script exports only the public
 * names).  File-local symbols are static.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_INTERNAL_H
#define UCMA_INTERNAL_H

#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ucma.h"

#define UCMA_INTERNAL __attribute__((visibility("hidden")))
#define UCMA_LIKELY(x)   __builtin_expect(!!(x), 1)
#define UCMA_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* A function its callers know nothing of beyond its declaration (GCC's
 * noipa: not inlined, and nothing its body implies, such as never
 * returning, is used at the call).  Clang has no such attribute; it does
 * not inline it at least. */
#if defined(__clang__)
#define UCMA_NOIPA __attribute__((noinline))
#else
#define UCMA_NOIPA __attribute__((noipa))
#endif

#ifdef UCMA_DEBUG
static const bool ucma_config_debug = true;
#else
static const bool ucma_config_debug = false;
#endif

/* ------------------------------------------------------------------------ */
/* Geometry                                                                  */
/* ------------------------------------------------------------------------ */

#define UCMA_PAGE_SHIFT       12
#define UCMA_PAGE_SIZE        ((size_t)1 << UCMA_PAGE_SHIFT)
#define UCMA_PAGEBLOCK_ORDER  9
#define UCMA_PAGEBLOCK_PAGES  ((uint32_t)1 << UCMA_PAGEBLOCK_ORDER)
#define UCMA_PAGEBLOCK_SIZE   ((size_t)UCMA_PAGEBLOCK_PAGES << UCMA_PAGE_SHIFT)
#define UCMA_MAX_ORDER        UCMA_PAGEBLOCK_ORDER
#define UCMA_NR_ORDERS        (UCMA_MAX_ORDER + 1)
#define UCMA_PFN_NONE         UINT32_MAX
#define UCMA_HUGE_1G          ((size_t)1 << 30)

#define UCMA_ALIGN_UP(x, a)   (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define UCMA_ALIGN_DOWN(x, a) ((x) & ~((__typeof__(x))(a) - 1))
#define UCMA_ARRAY_SIZE(a)    (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* Page metadata (out of band, 16 bytes per page, touched lazily)            */
/* ------------------------------------------------------------------------ */

enum ucma_page_kind {
	UCMA_PK_UNUSED = 0,	/* not a head: inside a free block, or unmanaged */
	UCMA_PK_FREE,		/* head of a free buddy block of 2^order pages */
	UCMA_PK_RUN,		/* head of an allocated run of aux pages */
	UCMA_PK_TAIL,		/* non-head page of an allocated run; aux = head pfn */
};

/* What an allocated run holds; set by whoever allocated it. */
enum ucma_run_owner {
	UCMA_OWN_NONE = 0,	/* raw pages (tests, internal) */
	UCMA_OWN_SLAB,		/* unmovable slab: owner = struct ucma_slab * */
	UCMA_OWN_LARGE,		/* unmovable large malloc block */
	UCMA_OWN_MOVABLE,	/* one movable object: owner = handle index */
	UCMA_OWN_MSLAB,		/* movable slab: owner = struct ucma_mslab * */
	UCMA_OWN_CONTIG,	/* ucma_alloc() buffer: owner = struct ucma_cma_area * */
	UCMA_OWN_LENT,		/* CMA pageblock lent to the heap: owner = NORMAL pageblock (lend.h) */
};

/* page flags */
#define UCMA_PF_DIRTY    0x0001u	/* free but not returned to the kernel */
#define UCMA_PF_MOVABLE  0x0002u	/* run was allocated as movable */
/* 0x0004u: UCMA_PF_MLOCKED, a contiguous buffer's head (cma.c) */
#define UCMA_PF_PCP      0x0008u	/* run head on a per-CPU list (pcp.h) */
/* 0x0010u: UCMA_PF_FROM_MALLOC, a contiguous buffer the preload library's
 * malloc() made (cma.c) */

/*
 * struct ucma_page - metadata of one 4 KiB page.
 *
 * Only the head page of a free block or of an allocated run carries
 * meaning, plus the tail pages of allocated runs (kind TAIL, aux = head;
 * owner_type and owner mirror the head's, see ucma_run_set_owner()).
 * Tail pages of free blocks may hold stale data: nobody reads them, because
 * every walk steps from head to head.
 *
 * Locking, field by field:
 *  - kind, aux, link: written only under the lock of the page's zone.
 *    Read under it by the buddy allocator and the walks of zone.c, cma.c
 *    and compact.c; read WITHOUT it by pointer classification (free(),
 *    ucma_owns(), ucma_alloc_size()) and by migration looking at a run it
 *    found earlier (migrate.c).  Those readers revalidate what they find
 *    (a generation, an owner, a second look under the lock), so a stale
 *    value is harmless; but the accesses must be atomic, so every store
 *    and every lock-free load goes through UCMA_PG_SET()/UCMA_PG_GET()
 *    (relaxed: they order nothing else; plain loads under the lock are
 *    fine, since all stores hold it).  link shares its bytes with owner,
 *    which lock-free readers load.
 *  - owner_type, owner: of an allocated run, written by the run's
 *    allocator without the zone lock (ucma_run_set_owner(): owner, then
 *    owner_type with release), and reset under the zone lock when the run
 *    is made or freed.  Readers load owner_type with acquire, then owner.
 *  - order, flags: under the zone lock, except the flags of an allocated
 *    run's head, which belong to the run's owner until it is freed.
 */
struct ucma_page {
	uint8_t kind;		/* enum ucma_page_kind */
	uint8_t order;		/* FREE: buddy order */
	uint8_t owner_type;	/* RUN: enum ucma_run_owner */
	uint8_t flags;		/* UCMA_PF_* */
	uint32_t aux;		/* FREE: purge epoch; RUN: npages; TAIL: head pfn */
	union {
		struct {
			uint32_t next;	/* FREE: free-list links (pfns) */
			uint32_t prev;
		} link;
		uint64_t owner;		/* RUN: see enum ucma_run_owner */
	};
};
_Static_assert(sizeof(struct ucma_page) == 16, "page metadata is 16 bytes");

/* AddressSanitizer builds: memory not in use (free objects, free pages)
 * is poisoned; UCMA_UNPOISON before touching it legitimately. */
#ifdef UCMA_ASAN
#include <sanitizer/asan_interface.h>
#define UCMA_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UCMA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define UCMA_POISON(p, n)   ((void)(p), (void)(n))
#define UCMA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Atomic (relaxed) access to the fields of struct ucma_page that are read
 * without the zone lock; see the rule above the struct. */
#define UCMA_PG_SET(p, field, v) \
	__atomic_store_n(&(p)->field, (__typeof__((p)->field))(v), __ATOMIC_RELAXED)
#define UCMA_PG_GET(p, field) __atomic_load_n(&(p)->field, __ATOMIC_RELAXED)

/* ------------------------------------------------------------------------ */
/* Pageblocks, migratetypes, zones                                           */
/* ------------------------------------------------------------------------ */

enum ucma_migratetype {
	UCMA_MT_UNMOVABLE = 0,
	UCMA_MT_MOVABLE,
	UCMA_MT_CMA,		/* movable-only and sticky: CMA zone only */
	UCMA_MT_ISOLATE,	/* being emptied: nothing is allocated from it */
	UCMA_MT_NR
};

#define UCMA_PB_SKIP      0x01u	/* compaction skip hint */

/*
 * struct ucma_pageblock - state of one 2 MiB pageblock, out of band.
 *
 * Locking: mt, saved_mt and nr_free belong to the zone lock (readers hold
 * it too); zone is set when the arena is made and never changes.
 * isolate_count is written under the zone lock with an atomic store, and
 * movable slabs read it without the lock (an acquire load): a stale
 * count either passes over a pageblock just released, or lets one new
 * object into a pageblock being emptied, which the emptier's next round
 * (cma.c, compact.c) finds and moves out again.  flags (the skip
 * hints) belong to the zone's compact_lock; a byte of its own, so their
 * writes never touch the fields the zone lock guards.  free_seq belongs
 * to the zone lock too (buddy.c free_block(); the extent notes, extent.h,
 * hold while it stays).
 */
struct ucma_pageblock {
	uint8_t mt;		/* enum ucma_migratetype */
	uint8_t saved_mt;	/* migratetype before isolation */
	uint8_t zone;		/* enum ucma_zone_id */
	uint8_t flags;		/* UCMA_PB_* */
	uint16_t isolate_count;	/* nested isolations */
	uint16_t nr_free;	/* free pages in this pageblock (zone lock) */
	uint8_t deferred;	/* wholly free, on no list yet (buddy.c; zone lock) */
	uint8_t levels;		/* levels its free extents may reach, 0-11 (extent.h; zone lock) */
	uint8_t longest_levels;	/* 1 + levels its note's longest extent reaches; 0: not known */
	uint32_t free_seq;	/* blocks freed into this pageblock (wraps: buddy.c) */
};

enum ucma_zone_id { UCMA_ZONE_NORMAL = 0, UCMA_ZONE_CMA, UCMA_ZONE_NR };

struct ucma_pcp;

struct ucma_free_area {
	uint32_t head[UCMA_MT_NR];	/* first free block per migratetype */
	uint64_t nr_free[UCMA_MT_NR];	/* blocks per migratetype */
};

/*
 * A zone on transparent huge pages starts on plain pages and asks for huge
 * ones (MADV_HUGEPAGE, zone.c) once this much of it is in use: a small
 * program would otherwise pay 2 MiB of resident memory for its first few
 * objects, and huge TLB entries only matter for a heap larger than the TLB
 * covers with 4 KiB pages.
 */
#define UCMA_THP_GROW_PAGES ((16u << 20) >> UCMA_PAGE_SHIFT)

/*
 * struct ucma_zone - one zone of an arena: a pfn range, its buddy free
 * lists per order and migratetype, and its counters.
 *
 * Deferred initialisation (buddy.c, the kernel's DEFERRED_STRUCT_PAGE_INIT):
 * a pageblock that has never been used is on no free list and its page
 * metadata is untouched zeros (blocks[].deferred); it is linked as one
 * order-9 block only when something needs it.  The counters include
 * deferred pageblocks as free order-9 blocks of their migratetype:
 * free_pages, free_area[9].nr_free[mt] and blocks[].nr_free are what they
 * would be had every pageblock been linked at start-up, so nr_free[mt] > 0
 * no longer means that head[mt] is a block.  Code that follows the lists
 * or reads page metadata by address asks buddy.c first (see there).
 *
 * Locking: @lock protects free_area, free_pages, the deferred state, the
 * metadata of every free page in the zone, and the migratetype of its
 * pageblocks.  Never take two zone locks at once except in ascending zone
 * id order.  The per-CPU lists (pcp.h) have locks of their own, taken
 * before @lock.  @purge: see struct ucma_zone_purge.
 */
/*
 * struct ucma_zone_purge - a zone's purges (zone.c): the batches of dirty
 * free blocks taken off the lists and given back to the kernel with no
 * lock held, and the decay's pass, a little per free of pages.  All zeros
 * when the zone is made, but @lock, which init_zone() initialises.
 *
 * Locking: @lock is held for a batch, from its taking to its freeing;
 * after the CMA area locks, before the per-CPU list locks and the zone
 * lock.  @held belongs to the zone lock.  @seq is advanced under the zone
 * lock (odd while a batch is held) and read without it; @pause is changed
 * without a lock and read under the zone lock before a batch is taken.
 * @next_tick_ns is advanced by compare-and-swap.  @cursor, @before and
 * @min_order belong to the thread that set @busy (an atomic exchange).
 */
struct ucma_zone_purge {
	pthread_mutex_t lock;
	uint32_t held;			/* pages a batch holds off the lists */
	_Atomic uint32_t seq;		/* batches taken and given back */
	_Atomic unsigned pause;		/* allocations trying again: no new batch */
	_Atomic uint64_t next_tick_ns;	/* the decay's next tick; 0: not started */
	_Atomic int busy;		/* a thread is in the decay's pass */
	_Atomic bool active;		/* a pass is under way */
	uint32_t cursor;		/* where the pass goes on */
	uint32_t before;		/* it takes blocks freed before this epoch */
	unsigned min_order;		/* and of at least this order */
};

struct ucma_zone {
	pthread_mutex_t lock;
	struct ucma_arena *arena;
	int id;				/* enum ucma_zone_id */
	const char *name;		/* "normal" or "cma" */
	uint32_t start_pfn;		/* pageblock aligned */
	uint32_t end_pfn;		/* exclusive, pageblock aligned */
	int backing;			/* enum ucma_backing in effect */
	struct ucma_free_area free_area[UCMA_NR_ORDERS];
	uint64_t free_pages;		/* on any free list, ISOLATE included */
	/* Changes of the buddy lists (zone lock): a block linked or taken off,
	 * or a purge.  The last unmovable request that found no run, and its
	 * length, at the count it found none at (zone.c, nofit_known()). */
	uint64_t list_gen;
	uint64_t nofit_gen;
	uint32_t nofit_npages[2];	/* [packed]; 0: none */
	uint64_t isolated_free_pages;	/* on ISOLATE lists */
	uint64_t managed_pages;		/* end_pfn - start_pfn */
	uint32_t deferred_first;	/* no deferred pageblock has a lower index */
	uint32_t nr_deferred[UCMA_MT_NR];	/* deferred pageblocks per migratetype */
	uint32_t purge_epoch;		/* decay: epoch of the last purge */
	bool thp_deferred;		/* THP backing, not yet asked for (zone.c) */
	bool file_backed;		/* CMA areas on files (frames.c): never purged */
	bool prefaulted;		/* UCMA_POPULATE: clean pages are mapped, until the
					 * first purge clears it (atomic, relaxed) */
	uint64_t extent_looked;		/* pageblocks a search for room looked at (extent.c) */
	uint64_t extent_walks;		/* pageblocks walked for their extents (extent.c) */
	uint64_t extent_stale;		/* extent notes found wrong when read (extent.c) */

	/* per-CPU page lists (pcp.h); set once when the zone is made */
	struct ucma_pcp *pcp;		/* nr_pcp entries, or NULL: none */
	unsigned nr_pcp;
	uint32_t pcp_batch;		/* pages one refill or drain moves */
	uint32_t pcp_high;		/* most pages one CPU's lists of runs keep */
	uint32_t pcp_pb_high;		/* most whole pageblocks one CPU keeps */

	/* compaction state (compact.c); protected by compact_lock */
	pthread_mutex_t compact_lock;
	uint32_t compact_cached_migrate_pfn;
	uint32_t compact_cached_free_pfn;
	unsigned compact_considered;
	unsigned compact_defer_shift;
	int compact_order_failed;

	struct ucma_zone_purge purge;	/* zone.c */
};

/* ------------------------------------------------------------------------ */
/* CMA areas                                                                 */
/* ------------------------------------------------------------------------ */

struct ucma_extent_note;
#include "cma.h"	/* struct ucma_cma_area */

/* ------------------------------------------------------------------------ */
/* Arena                                                                     */
/* ------------------------------------------------------------------------ */

/*
 * struct ucma_arena - the one reservation: [NORMAL zone][CMA zone].
 * The CMA zone is the concatenation of the CMA areas.  Geometry never
 * changes after ucma_arena_create().
 */
struct ucma_arena {
	uintptr_t base;			/* aligned to the largest backing page */
	size_t size;			/* bytes, a multiple of a pageblock */
	uint32_t npages;
	uint32_t nr_pageblocks;
	struct ucma_page *pages;	/* npages entries, out of band */
	struct ucma_pageblock *blocks;	/* nr_pageblocks entries, out of band */
	struct ucma_extent_note *extents;	/* nr_pageblocks entries (extent.h) */
	uint64_t *free_levels;		/* pageblocks with room, by level (extent.h) */
	void *reservation;		/* what mmap returned (with alignment slack) */
	size_t reservation_size;
	struct ucma_zone zones[UCMA_ZONE_NR];
	struct ucma_cma_area areas[UCMA_MAX_CMA_AREAS];
	int nr_areas;
	int node;			/* placement in effect */
};

/* The arena of this process, or NULL before initialisation. */
UCMA_INTERNAL extern struct ucma_arena *ucma_the_arena;

static inline void *ucma_pfn_to_addr(const struct ucma_arena *a, uint32_t pfn)
{
	return (void *)(a->base + ((uintptr_t)pfn << UCMA_PAGE_SHIFT));
}

static inline bool ucma_addr_in_arena(const struct ucma_arena *a, const void *p)
{
	return a && (uintptr_t)p - a->base < a->size;
}

static inline uint32_t ucma_addr_to_pfn(const struct ucma_arena *a, const void *p)
{
	return (uint32_t)(((uintptr_t)p - a->base) >> UCMA_PAGE_SHIFT);
}

static inline struct ucma_page *ucma_pfn_page(const struct ucma_arena *a, uint32_t pfn)
{
	return &a->pages[pfn];
}

static inline struct ucma_pageblock *ucma_pfn_block(const struct ucma_arena *a, uint32_t pfn)
{
	return &a->blocks[pfn >> UCMA_PAGEBLOCK_ORDER];
}

/* Is the pageblock of @pfn deferred: wholly free, clean, its page metadata
 * never written (buddy.c)?  Under the zone lock. */
static inline bool ucma_pageblock_deferred(const struct ucma_arena *a, uint32_t pfn)
{
	return a->blocks[pfn >> UCMA_PAGEBLOCK_ORDER].deferred;
}

static inline struct ucma_zone *ucma_pfn_zone(struct ucma_arena *a, uint32_t pfn)
{
	return pfn >= a->zones[UCMA_ZONE_CMA].start_pfn &&
	       pfn < a->zones[UCMA_ZONE_CMA].end_pfn ?
		       &a->zones[UCMA_ZONE_CMA] : &a->zones[UCMA_ZONE_NORMAL];
}

/* arena.c */
struct ucma_options;
UCMA_INTERNAL int ucma_arena_create(const struct ucma_options *o, struct ucma_arena **out);
/* The address space an arena of @o spans: its size, and the heap's window
 * onto lent frames where the CMA areas will lend (arena.c). */
UCMA_INTERNAL size_t ucma_arena_span(const struct ucma_options *o);
/* UCMA_POPULATE: 0 when prefaulting @len bytes more leaves the rest of the
 * system its share of the memory available (the process's memory cgroup's,
 * where that is less); else the bytes available. */
UCMA_INTERNAL uint64_t ucma_populate_short(size_t len);
UCMA_INTERNAL void ucma_arena_destroy(struct ucma_arena *a);
UCMA_INTERNAL const char *ucma_backing_str(int backing);
UCMA_INTERNAL struct ucma_cma_area *ucma_area_find(struct ucma_arena *a, const char *name);
UCMA_INTERNAL struct ucma_cma_area *ucma_area_of_pfn(struct ucma_arena *a, uint32_t pfn);

/* ------------------------------------------------------------------------ */
/* Buddy allocator and zone rules (buddy.c, zone.c)                          */
/* ------------------------------------------------------------------------ */

/* Allocation request kinds (the "gfp" of ucma). */
#define UCMA_GFP_UNMOVABLE   0x00u	/* NORMAL only, may steal MOVABLE pageblocks */
#define UCMA_GFP_MOVABLE     0x01u	/* zonelist CMA, NORMAL */
#define UCMA_GFP_NO_CMA      0x02u	/* with MOVABLE: skip the CMA zone */
#define UCMA_GFP_ZERO        0x04u	/* zero the run */
#define UCMA_GFP_NO_COMPACT  0x08u	/* do not run direct compaction */
#define UCMA_GFP_POPULATE    0x10u	/* written whole at once (a migration copy): map fresh pages
					 * in one call first (zone.c, ucma_pages_alloc_in()) */
#define UCMA_GFP_RESIDENT    0x20u	/* rather a free block that may hold data (resident) than
					 * a clean one, whose pages would add to the RSS: taken
					 * from the buddy lists and per-CPU refills (zone.c); a
					 * run already on a per-CPU list is taken as it is */
#define UCMA_GFP_NO_LEND     0x40u	/* an unmovable request that must not have a CMA frame
					 * lent for it (a probe that may be given back unused) */
#define UCMA_GFP_GROWS       0x80u	/* a large block realloc() moved, which may grow again:
					 * where the buddy lists put it, with room after it, not
					 * fitted into a hole (zone.c take_hole()) */

/* buddy.c: primitives; the caller holds z->lock. */
UCMA_INTERNAL void ucma_buddy_init_zone(struct ucma_zone *z);
UCMA_INTERNAL uint32_t ucma_buddy_take(struct ucma_zone *z, unsigned order, int mt);
UCMA_INTERNAL uint32_t ucma_buddy_take_dirty(struct ucma_zone *z, unsigned order, int mt,
					     bool *was_dirty);
UCMA_INTERNAL uint32_t ucma_buddy_take_resident(struct ucma_zone *z, unsigned order, int mt);
UCMA_INTERNAL void ucma_buddy_free_clean_range(struct ucma_zone *z, uint32_t pfn, uint32_t npages,
					       bool dirty);
UCMA_INTERNAL void ucma_buddy_free_block(struct ucma_zone *z, uint32_t pfn, unsigned order);
UCMA_INTERNAL void ucma_buddy_free_range(struct ucma_zone *z, uint32_t pfn, uint32_t npages);
UCMA_INTERNAL bool ucma_buddy_take_range(struct ucma_zone *z, uint32_t start, uint32_t end);
/* Fresh pages (buddy.c, "Dirty tracking"): where the clean end of a free
 * range begins; mark the clean free blocks right after @pfn dirty, up to
 * @max pages. */
UCMA_INTERNAL uint32_t ucma_buddy_clean_tail(const struct ucma_zone *z, uint32_t start,
					     uint32_t end);
UCMA_INTERNAL uint32_t ucma_buddy_dirty_clean_after(struct ucma_zone *z, uint32_t pfn, uint32_t max);
UCMA_INTERNAL void ucma_buddy_move_block_mt(struct ucma_zone *z, uint32_t pb_index, int new_mt);
/* Deferred pageblocks (see struct ucma_zone): link those of [start, end). */
UCMA_INTERNAL void ucma_buddy_materialise(struct ucma_zone *z, uint32_t start, uint32_t end);
/* The first block of list (@order, @mt), linking a deferred pageblock of
 * @mt first when the order-9 list is empty; UCMA_PFN_NONE if none. */
UCMA_INTERNAL uint32_t ucma_buddy_first(struct ucma_zone *z, unsigned order, int mt);
/* Where a run of @npages fits inside [lo, hi) in a deferred pageblock of
 * @mt (the highest such pageblock), or UCMA_PFN_NONE.  Links nothing. */
UCMA_INTERNAL uint32_t ucma_buddy_deferred_in(const struct ucma_zone *z, uint32_t npages, int mt,
					      uint32_t lo, uint32_t hi);
/* The first pfn of the highest deferred pageblock of @mt that @usable
 * accepts, or UCMA_PFN_NONE.  Links nothing. */
UCMA_INTERNAL uint32_t ucma_buddy_deferred_highest(const struct ucma_zone *z, int mt,
						   bool (*usable)(const struct ucma_arena *a,
								  uint32_t pfn));
/* The first of the free pages that end at @end, inside the pageblock of
 * page @end - 1 (linked); @end when that page is not free. */
UCMA_INTERNAL uint32_t ucma_buddy_free_before(const struct ucma_zone *z, uint32_t end);
/* The end of the free pages that start at @pfn, inside its pageblock
 * (linked); @pfn when that page is not free. */
UCMA_INTERNAL uint32_t ucma_buddy_free_from(const struct ucma_zone *z, uint32_t pfn);
/* The head of the free block that holds page @pfn (linked), or
 * UCMA_PFN_NONE when the page is not free. */
UCMA_INTERNAL uint32_t ucma_buddy_free_head(const struct ucma_zone *z, uint32_t pfn);
/* Is every page of [start, end) free?  Links nothing. */
UCMA_INTERNAL bool ucma_buddy_range_free(const struct ucma_zone *z, uint32_t start, uint32_t end);
/* Is every page of [start, end) free in a block that may hold data
 * (UCMA_PF_DIRTY: resident), none of it in a clean block or a deferred
 * pageblock? */
UCMA_INTERNAL bool ucma_buddy_range_resident(const struct ucma_zone *z, uint32_t start,
					     uint32_t end);
UCMA_INTERNAL bool ucma_page_is_free_head(const struct ucma_arena *a, uint32_t pfn);

/* zone.c: runs of pages with the zone rules; takes the zone locks itself. */
UCMA_INTERNAL uint32_t ucma_pages_alloc(struct ucma_arena *a, uint32_t npages, unsigned gfp);
/* The same, telling in *@was_dirty (when a run is returned) whether its
 * pages may hold data: false means they are not resident yet. */
UCMA_INTERNAL uint32_t ucma_pages_alloc_dirty(struct ucma_arena *a, uint32_t npages, unsigned gfp,
					      bool *was_dirty);
UCMA_INTERNAL uint32_t ucma_pages_alloc_zone(struct ucma_zone *z, uint32_t npages, unsigned gfp);
UCMA_INTERNAL void ucma_pages_free(struct ucma_arena *a, uint32_t pfn);
/* Give back a run that ucma_pages_alloc_dirty() returned clean and that
 * nothing wrote: to the buddy lists, clean, not to a per-CPU list (where
 * it would count as dirty). */
UCMA_INTERNAL void ucma_pages_free_unused(struct ucma_arena *a, uint32_t pfn);
/* Keep only [keep, keep + nkeep) of the allocated run at @head and give
 * the pages before and after back (an aligned request's slack, as dirty).
 * The kept part must lie in one pageblock or start on a pageblock
 * boundary; its owner is cleared, for the caller to record. */
UCMA_INTERNAL void ucma_pages_trim(struct ucma_arena *a, uint32_t head, uint32_t keep,
				   uint32_t nkeep);
/* Extend the allocated run at @pfn to @npages pages where it lies, when
 * the pages after it are free and may join it (zone.c grow_allowed()),
 * and with @resident_only when they are all resident (dirty); false,
 * changing nothing, otherwise.  The new pages get the head's owner; they
 * hold what they held (nothing is zeroed).  No CMA frame is lent for
 * them (lend.c lends only to allocations): they stay on the zone's own
 * backing. */
UCMA_INTERNAL bool ucma_pages_grow(struct ucma_arena *a, uint32_t pfn, uint32_t npages,
				   bool resident_only);
UCMA_INTERNAL uint32_t ucma_run_head(const struct ucma_arena *a, uint32_t pfn);
/* Record who owns an allocated run: written into the head and every tail
 * page, so that any pointer into the run finds its owner with one load. */
UCMA_INTERNAL void ucma_run_set_owner(struct ucma_arena *a, uint32_t pfn, int owner_type,
				      uint64_t owner);
/*
 * Isolation, its undo, and taking a free range as one run.  The _noted
 * forms also set (isolated, taken) or clear (undone) *@note under the
 * zone lock together with the change, for the record of an operation in
 * flight (cma.h: struct ucma_cma_op).
 */
UCMA_INTERNAL int ucma_isolate_range_noted(struct ucma_arena *a, uint32_t start, uint32_t end,
					   bool *note);
UCMA_INTERNAL void ucma_undo_isolate_range_noted(struct ucma_arena *a, uint32_t start,
						 uint32_t end, bool *note);
UCMA_INTERNAL int ucma_claim_free_range_noted(struct ucma_arena *a, uint32_t start, uint32_t end,
					      int owner_type, uint64_t owner, bool *note);
static inline int ucma_isolate_range(struct ucma_arena *a, uint32_t start, uint32_t end)
{
	return ucma_isolate_range_noted(a, start, end, NULL);
}

static inline void ucma_undo_isolate_range(struct ucma_arena *a, uint32_t start, uint32_t end)
{
	ucma_undo_isolate_range_noted(a, start, end, NULL);
}

static inline int ucma_claim_free_range(struct ucma_arena *a, uint32_t start, uint32_t end,
					int owner_type, uint64_t owner)
{
	return ucma_claim_free_range_noted(a, start, end, owner_type, owner, NULL);
}

UCMA_INTERNAL bool ucma_range_free(struct ucma_arena *a, uint32_t start, uint32_t end);
/* ucma_pages_free() of a contiguous buffer's run, @note cleared under the
 * zone lock as the run is freed (never through a per-CPU list). */
UCMA_INTERNAL void ucma_pages_free_noted(struct ucma_arena *a, uint32_t pfn, bool *note);
UCMA_INTERNAL void ucma_zone_free_counts(struct ucma_zone *z, uint64_t counts[UCMA_NR_ORDERS]);
UCMA_INTERNAL void ucma_zone_pageblock_counts(struct ucma_arena *a, int zone,
					      uint64_t counts[UCMA_MT_NR]);
UCMA_INTERNAL int ucma_zone_check(struct ucma_zone *z, char *why, size_t whylen);
/* The smallest free block the periodic purge gives back (64 KiB). */
#define UCMA_PURGE_MIN_ORDER 4
UCMA_INTERNAL uint64_t ucma_zone_purge(struct ucma_zone *z, bool all);
/* A purge of @z takes batches of its free pages off the lists for a
 * moment (zone.c): an allocation notes ucma_zone_purge_seq() before it
 * tries.  After a failure, ucma_zone_purge_hold_off() tells whether a
 * batch was taken or given back since; if so, it has paused the zone's
 * purges and waited for the batch held, if any, and the caller tries
 * once more, then calls ucma_zone_purge_resume().  No zone, per-CPU list
 * or area lock held. */
UCMA_INTERNAL uint32_t ucma_zone_purge_seq(const struct ucma_zone *z);
UCMA_INTERNAL bool ucma_zone_purge_hold_off(struct ucma_zone *z, uint32_t since);
UCMA_INTERNAL void ucma_zone_purge_resume(struct ucma_zone *z);
/* Wait until no purge batch of @z is held.  A purge takes nothing from
 * isolated pageblocks, so after this a range the caller isolated has
 * every free page on the lists (ucma_alloc(), cma.c).  No zone, per-CPU
 * list or area lock held. */
UCMA_INTERNAL void ucma_zone_purge_settle(struct ucma_zone *z);
/* The purge locks of @a's zones, in the zone stage of a fork (init.c). */
UCMA_INTERNAL void ucma_zone_purge_fork_prepare(struct ucma_arena *a);
UCMA_INTERNAL void ucma_zone_purge_fork_parent(struct ucma_arena *a);
/* The child: no thread is in a decay pass or has the purges paused
 * (zone.c); the locks are released as in the parent. */
UCMA_INTERNAL void ucma_zone_purge_fork_child(struct ucma_arena *a);
/* zone.c, AddressSanitizer builds: poison the whole arena (arena.c, once
 * created: every page is free) or unpoison it (before it is unmapped).
 * Nothing elsewhere. */
UCMA_INTERNAL void ucma_arena_poison(struct ucma_arena *a, bool poison);

/* The operating system interface (os.c): see os.h. */
#include "os.h"

/* ------------------------------------------------------------------------ */
/* Options (config.c)                                                        */
/* ------------------------------------------------------------------------ */

/*
 * struct ucma_options - every tunable, parsed once.  Filled from defaults,
 * then the UCMA_* variables, then UCMA_CONF (later keys win), or from a
 * struct ucma_config passed to ucma_init().
 */
struct ucma_area_spec {
	char name[UCMA_AREA_NAME_MAX];
	size_t size;
};

struct ucma_options {
	size_t arena_size;
	size_t cma_size;
	struct ucma_area_spec areas[UCMA_MAX_CMA_AREAS];
	int nr_areas;			/* 0: one area "default" of cma_size */
	bool cma_chosen;		/* CMA size or areas given; else they follow the arena */
	int hugepages;			/* enum ucma_backing, CMA areas */
	int hugepages_normal;		/* enum ucma_backing, NORMAL */
	int node;			/* >= 0 or UCMA_NODE_* */
	bool populate;
	bool strict;
	bool cma_dontfork;
	int cma_policy;			/* enum ucma_cma_policy */
	bool compact;			/* background compaction thread */
	bool compact_direct;		/* direct compaction on failure */
	unsigned compact_interval_ms;
	unsigned compact_proactiveness;	/* 0..100 */
	unsigned decay_ms;		/* NORMAL free pages go back after this */
	unsigned copy_helpers;		/* threads helping to copy large migrated objects */
	bool stats;			/* print the report at exit */
	char stats_file[256];		/* "" = stderr; %p = pid */
	int stats_shm;			/* enum ucma_shm_mode (shm_writer.h) */
	size_t preload_contig_min;	/* 0 = off */
	size_t overflow_cache;		/* bytes of freed overflow blocks kept */
	bool verbose;
};

UCMA_INTERNAL extern struct ucma_options ucma_opt;
UCMA_INTERNAL void ucma_options_defaults(struct ucma_options *o);
/* Parse the environment into @o.  Returns the number of bad values. */
UCMA_INTERNAL int ucma_options_from_env(struct ucma_options *o);
/* Apply an explicit struct ucma_config; returns the number of bad values. */
UCMA_INTERNAL int ucma_options_from_config(struct ucma_options *o, const struct ucma_config *cfg);
/* Parse "1G", "512M", "4096" ... into bytes; -1 with errno on error. */
UCMA_INTERNAL int ucma_parse_size(const char *s, size_t *out);
/* Print the options in effect, one "ucma: UCMA_X=value" line each. */
UCMA_INTERNAL void ucma_options_print(int fd, const struct ucma_options *o);
/* Print the option table: variable, key, default, limits, form, description. */
UCMA_INTERNAL void ucma_options_describe(int fd);
/* The environment, trusted only outside set-user-ID programs. */
UCMA_INTERNAL const char *ucma_getenv(const char *name);

/* ------------------------------------------------------------------------ */
/* Start-up and messages (init.c, util.c)                                    */
/* ------------------------------------------------------------------------ */

/* Initialise from the environment if nobody did; returns the arena or NULL
 * with errno.  Cheap after the first call. */
UCMA_INTERNAL struct ucma_arena *ucma_arena_get(void);
UCMA_INTERNAL void ucma_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Has initialisation finished (successfully or not)?  Never initialises. */
UCMA_INTERNAL struct ucma_arena *ucma_arena_peek(void);

UCMA_INTERNAL void ucma_fatal(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

#ifdef UCMA_TEST_HOOKS
/* init.c, test builds only: forget the arena so a test can start again. */
UCMA_INTERNAL void ucma_test_reset(void);
#endif

/* ------------------------------------------------------------------------ */
/* Statistics (stats.c)                                                      */
/* ------------------------------------------------------------------------ */

/* Global event counters, named as in /proc/vmstat where one exists.
 * Keep in step with the name table in stats.c. */
enum ucma_vmstat_item {
	UCMA_STAT_COMPACT_STALL,
	UCMA_STAT_COMPACT_SUCCESS,
	UCMA_STAT_COMPACT_FAIL,
	UCMA_STAT_COMPACT_MIGRATE_SCANNED,
	UCMA_STAT_COMPACT_FREE_SCANNED,
	UCMA_STAT_COMPACT_ISOLATED,
	UCMA_STAT_COMPACT_DAEMON_WAKE,
	UCMA_STAT_PGMIGRATE_SUCCESS,
	UCMA_STAT_PGMIGRATE_FAIL,
	UCMA_STAT_PGMIGRATE_POPULATED,
	UCMA_STAT_PGMIGRATE_POPULATE_FAIL,
	UCMA_STAT_PGMIGRATE_COPY_HELPED,
	UCMA_STAT_PGMIGRATE_COPY_HELPER_LATE,
	UCMA_STAT_PGMIGRATE_COPY_NO_CPU,
	UCMA_STAT_CMA_ALLOC_SUCCESS,
	UCMA_STAT_CMA_ALLOC_FAIL,
	UCMA_STAT_CMA_RELEASE,
	UCMA_STAT_CMA_MIGRATED_IN_VAIN,
	UCMA_STAT_PIN_LONGTERM_MIGRATED,
	UCMA_STAT_HALLOC,
	UCMA_STAT_HFREE,
	UCMA_STAT_HALLOC_FAIL,
	UCMA_STAT_PAGE_ALLOC,
	UCMA_STAT_PAGE_FREE,
	UCMA_STAT_PAGE_ALLOC_FAIL,
	UCMA_STAT_PAGEBLOCK_STEAL,
	UCMA_STAT_PURGED_PAGES,
	UCMA_STAT_OVERFLOW_ALLOC,
	UCMA_STAT_OVERFLOW_FREE,
	UCMA_STAT_OVERFLOW_REUSED,
	UCMA_STAT_MEM_EVENT_MAP,
	UCMA_STAT_MEM_EVENT_UNMAP,
	UCMA_STAT_PHYS_CONTIG_MOVED,
	UCMA_STAT_LEND_HEAP_LENT,
	UCMA_STAT_LEND_HEAP_RETURNED,
	UCMA_STAT_LEND_HEAP_MIGRATED,
	UCMA_STAT_LEND_HEAP_BYTES_COPIED,
	UCMA_STAT_LEND_HEAP_FALLBACK,
	UCMA_STAT_LEND_HEAP_MIGRATE_FAIL,
	UCMA_STAT_LEND_HEAP_UNPREFAULTED,
	UCMA_STAT_LEND_HEAP_FORK_EVACUATED,
	UCMA_STAT_LEND_HEAP_FORK_COPIED,
	UCMA_STAT_LEND_IOURING_ENTER_RING,
	UCMA_STAT_LEND_IOURING_ENTER_FDINFO,
	UCMA_STAT_RCU_GRACE_PERIODS,
	UCMA_STAT_RCU_GRACE_NS,
	UCMA_STAT_RCU_GRACE_SLOW,
	UCMA_STAT_NR
};

UCMA_INTERNAL extern _Atomic uint64_t ucma_vmstat[UCMA_STAT_NR];
UCMA_INTERNAL extern const char *const ucma_vmstat_names[UCMA_STAT_NR];

static inline void ucma_count(enum ucma_vmstat_item i, uint64_t n)
{
	atomic_fetch_add_explicit(&ucma_vmstat[i], n, memory_order_relaxed);
}

static inline uint64_t ucma_vmstat_read(enum ucma_vmstat_item i)
{
	return atomic_load_explicit(&ucma_vmstat[i], memory_order_relaxed);
}

/* stats.c: the report at exit (init.c registers it with atexit), the
 * fragmentation formulas (also for compaction), and the walk over every
 * statistic that the live statistics segment publishes. */
UCMA_INTERNAL void ucma_stats_at_exit(void);
/* Keep a copy of descriptor 2 for the report at exit (UCMA_STATS=1). */
UCMA_INTERNAL void ucma_stats_keep_stderr(void);
/* Would CMA areas named @a and @b give two statistics the same name
 * (area "a" and area "a_frame" both have cma_a_frame_size)?  The name
 * goes to @clash when they would. */
UCMA_INTERNAL bool ucma_stats_areas_clash(const char *a, const char *b, char *clash,
					  size_t len);
UCMA_INTERNAL int ucma_extfrag_index(const uint64_t counts[UCMA_NR_ORDERS], unsigned order);
UCMA_INTERNAL unsigned ucma_extfrag_score(const uint64_t counts[UCMA_NR_ORDERS], unsigned order);
UCMA_INTERNAL uint32_t ucma_bitmap_max_zero_run(const unsigned long *bm, uint32_t nbits);

#define UCMA_STAT_NAME_MAX  52		/* longest statistic name, NUL included */
#define UCMA_STAT_F_EVENT   0x1u	/* counts events: only grows */
#define UCMA_STAT_F_SIGNED  0x2u	/* value is an int64_t */
typedef void (*ucma_stat_visit_fn)(void *ctx, const char *name, uint64_t value, unsigned flags);
UCMA_INTERNAL unsigned ucma_stats_foreach(struct ucma_arena *a,
					  const uint64_t (*pageblocks)[UCMA_MT_NR], bool values,
					  ucma_stat_visit_fn fn, void *ctx);

/* The live statistics segment read by ucmastat: shm.c, shm_server.c. */
#include "shm_writer.h"

/* ------------------------------------------------------------------------ */
/* Internal metadata memory (meta.c): never from malloc, never in the arena  */
/* ------------------------------------------------------------------------ */

/* Zeroed memory for allocator metadata, in power-of-two classes up to
 * 64 KiB (larger requests get their own mapping).  NULL with ENOMEM. */
UCMA_INTERNAL void *ucma_meta_alloc(size_t size);
/* The same without zeroing a reused block, for what is written before it
 * is read (a 64 KiB snapshot, for one). */
UCMA_INTERNAL void *ucma_meta_alloc_uninit(size_t size);
UCMA_INTERNAL void ucma_meta_free(void *p, size_t size);

/* ------------------------------------------------------------------------ */
/* Handles, movable slabs, migration (handle.c, mslab.c, migrate.c)          */
/* ------------------------------------------------------------------------ */

/* handle.h: the handle table's entries and the rules for changing them. */
/* Live handles and their bytes, for the statistics. */
UCMA_INTERNAL void ucma_handle_counters(uint64_t *live, uint64_t *bytes);

/* Movable slabs: small movable objects share pages of one size class. */
#define UCMA_MSLAB_MAX_SIZE 4096u

struct ucma_mslab;
/* Allocate a slot of the class fitting @size for handle @index; returns its
 * address.  Never in an isolated pageblock, nor in [avoid_start, avoid_end).
 * @no_cma keeps it out of the CMA zone. */
struct ucma_migrate_target;
UCMA_INTERNAL void *ucma_mslab_alloc(size_t size, uint32_t index,
				     const struct ucma_migrate_target *t, unsigned gfp);
/* Free the slot at @addr now (the caller waited for readers). */
UCMA_INTERNAL void ucma_mslab_free(void *addr);
UCMA_INTERNAL size_t ucma_mslab_class_size(size_t size);
/* The handle index stored for the slot at @addr, or 0 if the slot is free. */
UCMA_INTERNAL uint32_t ucma_mslab_slot_handle(struct ucma_mslab *s, void *addr);
/* Call @fn for every live slot of slab @s (class lock held during each
 * call is NOT held; the callback must tolerate the slot being freed). */
UCMA_INTERNAL int ucma_mslab_for_each(struct ucma_mslab *s,
				      int (*fn)(uint32_t index, void *addr, void *arg), void *arg);
/* One live slot of a movable slab, as ucma_mslab_live_slots() saw it. */
struct ucma_mslab_slot {
	uint32_t index;		/* handle index */
	void *addr;
};
/* Snapshot of the live slots of @s into *@out (ucma_mslab_slots_free());
 * the count, or -1 without memory.  Called inside a read-side section
 * that found @s; the snapshot may be walked after leaving it. */
UCMA_INTERNAL int ucma_mslab_live_slots(struct ucma_mslab *s, struct ucma_mslab_slot **out);
UCMA_INTERNAL void ucma_mslab_slots_free(struct ucma_mslab_slot *v);

/* Where a migrated object may go. */
struct ucma_migrate_target {
	uint32_t avoid_start, avoid_end;	/* pfn range to stay out of */
	bool no_cma;				/* long-term pin: NORMAL only */
	bool wait_pins;				/* wait briefly for pins to drop */
	/* The copies the caller is about to make (NULL: unknown): fresh
	 * destinations are mapped that far ahead in one call (zone.c). */
	struct ucma_populate_batch *batch;
	/* Objects of this size or more are copied with the helper threads
	 * (copy.h); 0: UCMA_COPY_SPLIT_MIN. */
	uint32_t copy_split_min;
};

enum ucma_migrate_result {
	UCMA_MIGRATE_OK = 0,
	UCMA_MIGRATE_PINNED,	/* pinned or busy: not moved */
	UCMA_MIGRATE_NOMEM,	/* no room for the new copy */
	UCMA_MIGRATE_GONE,	/* freed meanwhile: nothing to move */
};

/* Move the object of handle @index (if it still lives at @old_addr). */
UCMA_INTERNAL int ucma_migrate_object(uint32_t index, void *old_addr,
				      const struct ucma_migrate_target *t);
/* Move every movable object out of the allocated run at @head. */
UCMA_INTERNAL int ucma_migrate_run(struct ucma_arena *a, uint32_t head,
				   const struct ucma_migrate_target *t, unsigned *pinned,
				   unsigned *moved);
/* Does the run at @head hold something that cannot be moved right now? */
UCMA_INTERNAL bool ucma_run_pinned(struct ucma_arena *a, uint32_t head);
/* Storage of a movable object, freed after an RCU grace period. */
UCMA_INTERNAL void ucma_defer_free(void *addr);
/* Metadata (meta.c) freed after an RCU grace period. */
UCMA_INTERNAL void ucma_defer_meta_free(void *p, size_t size);
/* Wait for a grace period and free what was deferred before the call.
 * Returns 0, or -1 with EDEADLK where no grace period can be waited for
 * (rcu.h: inside a read-side section, or in a degraded child). */
UCMA_INTERNAL int ucma_defer_drain(void);
UCMA_INTERNAL void ucma_movable_storage_free(void *addr);
/* Allocate storage for a movable object of @size for handle @index. */
UCMA_INTERNAL void *ucma_movable_storage_alloc(size_t size, uint32_t index,
					       const struct ucma_migrate_target *t);

/* stats.c: latency of one ucma_alloc(), for the histograms. */
UCMA_INTERNAL void ucma_stats_alloc_latency(uint64_t ns, bool migrated);
/* stats.c: how long writers of a heap range taken back may have waited. */
UCMA_INTERNAL void ucma_stats_lend_stall(uint64_t ns);

/* malloc.c: counters kept per thread and summed when read. */
struct ucma_malloc_counters {
	uint64_t nmalloc;		/* calls that returned memory */
	uint64_t nfree;
	uint64_t allocated_bytes;	/* usable bytes currently allocated */
	uint64_t active_bytes;		/* bytes of arena pages held by malloc */
	uint64_t large_allocs;		/* live page-run allocations */
	uint64_t overflow_bytes;	/* bytes of blocks and chunks outside the arena */
	uint64_t overflow_cached_bytes;	/* of which freed large blocks kept */
	uint64_t slab_kept_bytes;	/* wholly free slabs the central bins keep */
	uint64_t tcache_bytes;		/* free bytes threads keep: parked, or in their slabs */
};
UCMA_INTERNAL void ucma_malloc_counters_read(struct ucma_malloc_counters *out);

/* The general-purpose (unmovable) allocator declares its parts beside its
 * code: slab.h (size classes, slabs, overflow) and tcache.h (thread
 * caches). */

/* ------------------------------------------------------------------------ */
/* Compaction (compact.c, compactd.c) and what it needs from zone.c, mslab.c */
/* ------------------------------------------------------------------------ */

/* zone.c: a run of @npages (at most a pageblock) lying inside [lo, hi),
 * placed by best fit among extents of free pages (not necessarily aligned
 * to its order), for compaction targets.  Movable requests use CMA and
 * MOVABLE pageblocks only.  UCMA_PFN_NONE with ENOMEM when the range has
 * no room, EINVAL for a bad size or range. */
UCMA_INTERNAL uint32_t ucma_pages_alloc_in(struct ucma_arena *a, uint32_t npages, unsigned gfp,
					   uint32_t lo, uint32_t hi);
/*
 * struct ucma_populate_batch - the copies one migrating caller is about to
 * place (ucma_alloc() emptying a range): @pages still to place, and the
 * pages [@start, @end) last mapped ahead for them, where placing a copy
 * takes nothing more from @pages.  Owned by the calling thread.
 */
struct ucma_populate_batch {
	uint32_t pages;
	uint32_t start, end;
};

/* zone.c: a run outside [avoid_start, avoid_end): the range above it is
 * searched first, then the one below, then the ordinary zone rules (and a
 * run that lands inside is given back: ENOMEM).  An empty range is no
 * constraint.  Used for the copies of migrated objects.  With
 * UCMA_GFP_POPULATE and a @batch (may be NULL), a fresh run found by the
 * search is mapped together with the clean free pages right after it, up
 * to @batch->pages, which the run and those pages are taken from. */
UCMA_INTERNAL uint32_t ucma_pages_alloc_avoid(struct ucma_arena *a, uint32_t npages, unsigned gfp,
					      uint32_t avoid_start, uint32_t avoid_end,
					      struct ucma_populate_batch *batch);

/* A movable slab is one run of this many pages (mslab.c): the block that
 * direct compaction must form when a small movable object finds no slot. */
#define UCMA_MSLAB_RUN_ORDER 4

/* mslab.c: empty the sparsest movable slabs of each size class into the
 * fullest ones (zsmalloc's compaction).  @prio as ucma_compact(): ASYNC
 * moves a bounded number of slabs and skips pinned objects.  Returns the
 * number of slabs emptied.  Not inside ucma_read_lock(). */
UCMA_INTERNAL unsigned ucma_mslab_consolidate(int prio);

/* Skip hints: UCMA_PB_SKIP in struct ucma_pageblock.flags, and in the
 * bits above UCMA_PB_SKIP_ORDER_SHIFT the lowest order that the pageblock
 * was found useless for.  A hint blocks requests of that order or higher
 * only, so a failed huge request never stops a small one. */
#define UCMA_PB_SKIP_ORDER_SHIFT 4

/* What one compaction run of a zone ended with (the kernel's compact_result). */
enum ucma_compact_result {
	UCMA_COMPACT_SKIPPED,		/* not suitable: too little free memory */
	UCMA_COMPACT_DEFERRED,		/* recent failures: not tried */
	UCMA_COMPACT_CONTINUE,		/* (internal) go on scanning */
	UCMA_COMPACT_PARTIAL_SKIPPED,	/* ASYNC budget spent before the scanners met */
	UCMA_COMPACT_CONTENDED,		/* zone busy (background), or asked to stop */
	UCMA_COMPACT_COMPLETE,		/* the scanners met */
	UCMA_COMPACT_SUCCESS,		/* a free block of the order exists */
};

/* compact.c: the kernel's fragmentation index of a zone for @order (times
 * 1000; -1000 when a block of @order is free, so the index does not
 * apply), and its fragmentation score (0..100: the share of free memory
 * not in free pageblocks).  Take the zone lock. */
UCMA_INTERNAL int ucma_fragmentation_index(struct ucma_zone *z, unsigned order);
UCMA_INTERNAL unsigned ucma_fragmentation_score(struct ucma_zone *z);
/* Is a block of at least @order free in @z (outside isolated pageblocks)? */
UCMA_INTERNAL bool ucma_zone_has_free_block(struct ucma_zone *z, unsigned order);
/* compact.c: the kernel's compaction_suitable(): enough free pages for
 * @order plus a gap, and (above order 3) a fragmentation index saying a
 * failure is due to fragmentation.  UCMA_COMPACT_SUCCESS when a block is
 * already free, UCMA_COMPACT_SKIPPED when compaction cannot help, else
 * UCMA_COMPACT_CONTINUE. */
UCMA_INTERNAL int ucma_compaction_suitable(struct ucma_zone *z, unsigned order);

/* compact.c: one compaction run of zone @z for @order (-1: no order, a
 * pass over the zone) at priority @prio.  With @abort (the background
 * thread) the zone is skipped when another compaction holds it, and the
 * run stops soon after *@abort becomes non-zero.  Returns an
 * enum ucma_compact_result.  Not inside ucma_read_lock(). */
UCMA_INTERNAL int ucma_compact_zone(struct ucma_zone *z, int order, int prio,
				    const _Atomic int *abort);
/* compact.c: forget every skip hint and cached scanner position of @z. */
UCMA_INTERNAL void ucma_compact_reset_hints(struct ucma_zone *z);
/* compact.c: ASYNC budget, in pageblocks scanned by the migrate scanner per
 * zone and run (tests may lower it). */
UCMA_INTERNAL extern unsigned ucma_compact_async_pageblocks;

/*
 * Direct compaction for an allocation that failed (compact.c).  The caller
 * retries its allocation after each call of ucma_compact_direct_next()
 * that returned true; each runs compaction at the next priority (ASYNC,
 * SYNC_LIGHT, SYNC_FULL) on the zones of @zones not deferred.  done()
 * counts compact_success or compact_fail, resets the deferral on success
 * and backs off (the kernel's defer_compaction) on failure.
 */
struct ucma_compact_direct {
	int order;			/* block wanted; -1: runs of several pageblocks */
	unsigned zones;			/* 1u << enum ucma_zone_id, zones to compact */
	int prio;			/* last priority run; -1 before the first */
	unsigned ran;			/* zones compacted at least once */
	unsigned succeeded;		/* zones that reported a free block */
};
UCMA_INTERNAL void ucma_compact_direct_init(struct ucma_compact_direct *dc, int order,
					    unsigned zones);
UCMA_INTERNAL bool ucma_compact_direct_next(struct ucma_compact_direct *dc);
UCMA_INTERNAL void ucma_compact_direct_done(struct ucma_compact_direct *dc, bool success);
/* The order direct compaction forms for ucma_alloc() of @npages aligned to
 * @align_pages: -1 beyond a pageblock. */
UCMA_INTERNAL int ucma_compact_contig_order(uint32_t npages, uint32_t align_pages);
/* handle.c: storage for movable object @index of @size after compaction,
 * or NULL (direct compaction disabled, deferred, or it did not help). */
UCMA_INTERNAL void *ucma_compact_direct_movable(size_t size, uint32_t index);

/* compactd.c: the background compaction thread (the arena's kcompactd).
 * start_once: start it if UCMA_COMPACT allows and it does not run; cheap
 * after the first call; called by ucma_halloc() and ucma_alloc(), so a
 * program that only mallocs never gains a thread.  wakeup: ask for a pass
 * soon (zone.c, when an allocation takes a zone below its low watermark);
 * one atomic load when there is no thread.  stop: stop and join it (test
 * builds, teardown; ucma_test_reset() should call it first).  running:
 * is it running? */
UCMA_INTERNAL void ucma_compactd_start_once(void);
UCMA_INTERNAL void ucma_compactd_wakeup(void);
UCMA_INTERNAL void ucma_compactd_stop(void);
UCMA_INTERNAL bool ucma_compactd_running(void);
/* The low watermark that wakes the compaction thread: a quarter of the
 * zone free. */
#define UCMA_COMPACTD_WMARK(z) ((z)->managed_pages / 4)

#endif /* UCMA_INTERNAL_H */
