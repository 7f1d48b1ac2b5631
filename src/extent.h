/*
 * extent.h - the free extents of each pageblock, noted for best-fit
 * placement of runs (compaction's copies, ucma_pages_alloc_in()).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_EXTENT_H
#define UCMA_EXTENT_H

#include "internal.h"

#define UCMA_EXTENT_SLOTS 14		/* fills one cache line */
#define UCMA_EXTENT_OVERFLOW 0xffffu	/* nr: more extents than slots */

/*
 * What one walk of a pageblock's page metadata found: its free extents
 * (adjacent free blocks of any orders) of two pages or more, as offsets
 * in the pageblock.  One per pageblock, in struct ucma_arena's extents[].
 *
 * Locking: the zone lock of the pageblock's zone, for every field.
 *
 * A note holds while no block was freed into the pageblock since it was
 * written (seq == the pageblock's free_seq + 1): frees are the only way an
 * extent grows, and buddy.c counts them; when the 32-bit count wraps,
 * buddy.c drops the note, which would otherwise hold again 2^32 frees
 * after it was written.  Takes only shorten extents.  The
 * takes of ucma_extent_find()'s own results are written into the note
 * (ucma_extent_taken()); others (a list head taken, a range claimed) leave
 * it listing pages no longer free, so a result read from a note is checked
 * against the page metadata before it is returned, and a wrong note is
 * dropped and the pageblock walked again.
 */
struct ucma_extent_note {
	uint32_t seq;		/* free_seq + 1 when written; 0: no note */
	uint16_t nr;		/* extents listed, or UCMA_EXTENT_OVERFLOW */
	uint16_t longest;	/* at least the longest free extent, pages */
	struct {
		uint16_t off;	/* first page, from the pageblock's start */
		uint16_t len;	/* pages */
	} ext[UCMA_EXTENT_SLOTS];
};
_Static_assert(sizeof(struct ucma_extent_note) == 64, "an extent note is one cache line");

/*
 * Which pageblocks may hold a run, by level: a pageblock whose longest
 * free extent may be longer than 2^(j-1) pages but not longer than 2^j
 * has its bit set in level j (level 0: one page), and in no other; level
 * 10 holds the wholly free pageblocks (2^9 pages) alone, so that level 9
 * stops at 511 pages.  Level j is the UCMA_EXTENT_LEVEL_WORDS(a) words
 * from free_levels + j * UCMA_EXTENT_LEVEL_WORDS(a), in the mapping of
 * the notes (arena.c).  A search for n pages ORs the words of the levels
 * from n's own up, and passes 64 pageblocks without such an extent per
 * word instead of looking at each: compaction searches once per object
 * it moves, from the top of the zone down past the pageblocks it has
 * filled, and that walk grew with the zone (ucma_extent_find() took 26 %
 * of ucma_compact()'s instructions over a 2 GiB area, 10 % over 512
 * MiB).  One bit per pageblock, not one per level reached, so that a
 * change of level costs two bit operations, not eleven: allocating and
 * freeing whole pageblocks changes it every time.
 *
 * Why a level ends at a power of two rather than starting at one: the
 * holes of a buddy allocator are most often a power of two long (a freed
 * block of one order), and the runs placed in holes never are (zone.c
 * packed()).  With levels from 2^j to 2^(j+1) - 1, a run of 257 pages
 * looked at every pageblock whose hole is 256 pages and found each too
 * short: 128 of them a malloc, most of its instructions, in bench_malloc
 * large-holes.  A search for exactly 2^j pages now looks at pageblocks
 * of 2^(j-1) + 1 .. 2^j - 1 pages that cannot hold it, and passes none
 * that can.  Which pageblocks a search looks at decides where its
 * best-fit window (extent.c) ends, so the result may differ from the
 * old levels' when a pageblock that cannot hold the run has no note:
 * its walk took one of the window's looks; passed now, the window
 * reaches one pageblock further.
 *
 * How far a pageblock's extents may reach (pb->levels, 0 .. 11 levels
 * reached; 0 sets no bit) is the smaller of what its free pages reach
 * (nr_free: an extent is no longer) and what its longest extent reached
 * when its note last said (pb->longest_levels, forgotten when a block is
 * freed into the pageblock, which may grow an extent; takes only shorten
 * extents).  That is the note's longest, copied into the pageblock, so
 * that free_count() finds everything it needs on the pageblock's line
 * and never reads the note's.  So a pageblock with a free extent of n
 * pages is always found by a search for n: the levels may make the
 * search look at a pageblock that has no room, never pass one that has
 * (ucma_zone_check() verifies both the bit and the bound).  Deferred
 * pageblocks (buddy.c), which the search passes by in any case, are in
 * no level until their first use.
 *
 * Locking: a pageblock's bits change under its zone lock; one word may
 * hold the bits of pageblocks of both zones, so bits are changed with
 * atomic read-modify-writes, and the holder of a zone's lock reads its
 * pageblocks' bits with relaxed loads.
 */
#define UCMA_EXTENT_LEVELS 11		/* up to 2^0 .. 2^9 pages, then wholly free */
#define UCMA_EXTENT_LEVEL_WORDS(a) (((size_t)(a)->nr_pageblocks + 63) / 64)
/*
 * After the levels, one more row of as many words: the deferred
 * pageblocks (buddy.c), which are wholly free but in no level.  A search
 * for room across a pageblock boundary (ucma_extent_find_across()) may
 * reach into one, and finds the pageblocks next to one by these bits.
 * Changed under the zone lock with atomic read-modify-writes, as the
 * levels.
 */
#define UCMA_EXTENT_DEFERRED_ROW UCMA_EXTENT_LEVELS
#define UCMA_EXTENT_ROWS (UCMA_EXTENT_LEVELS + 1)

/* Note pageblock @b as deferred or not (zone lock). */
static inline void ucma_extent_deferred_note(struct ucma_arena *a, uint32_t b, bool deferred)
{
	uint64_t bit = 1ull << (b % 64);
	uint64_t *w = a->free_levels + UCMA_EXTENT_DEFERRED_ROW * UCMA_EXTENT_LEVEL_WORDS(a) + b / 64;

	if (deferred)
		__atomic_fetch_or(w, bit, __ATOMIC_RELAXED);
	else
		__atomic_fetch_and(w, ~bit, __ATOMIC_RELAXED);
}

/* The levels a free extent (or a count of free pages) of @pages reaches,
 * 0 .. 11: one more than its level, 0 for none. */
static inline unsigned ucma_extent_level_count(unsigned pages)
{
	if (pages >= UCMA_PAGEBLOCK_PAGES)
		return UCMA_EXTENT_LEVELS;
	return pages > 1 ? 33u - (unsigned)__builtin_clz(pages - 1) : pages;
}

/* The levels pageblock @pb should be set in: none while it is deferred
 * (search() passes those by; zone_alloc_in() takes them last, through
 * ucma_buddy_deferred_in()), so that a zone mostly never used costs a
 * search no stop per such pageblock. */
static inline unsigned ucma_extent_levels_due(const struct ucma_pageblock *pb)
{
	unsigned n = pb->deferred ? 0 : ucma_extent_level_count(pb->nr_free);

	return pb->longest_levels && pb->longest_levels - 1u < n ? pb->longest_levels - 1u : n;
}

/* Set pageblock @b in the levels it is due (zone lock). */
UCMA_INTERNAL void ucma_extent_levels_refresh(struct ucma_arena *a, uint32_t b);

/* The same, for a caller that changed nr_free or longest_levels: a call
 * only when the count changes. */
static inline void ucma_extent_levels_changed(struct ucma_arena *a, uint32_t b)
{
	if (ucma_extent_levels_due(&a->blocks[b]) != a->blocks[b].levels)
		ucma_extent_levels_refresh(a, b);
}

/* Is pageblock @b's bit set in the level its pb->levels says, and no other,
 * and in the deferred row exactly when it is deferred? */
UCMA_INTERNAL bool ucma_extent_levels_hold(const struct ucma_arena *a, uint32_t b);

/* The start of @npages free pages in [lo, hi) of @z, in pageblocks of
 * migratetype @mt, by best fit; UCMA_PFN_NONE when there is none.  The
 * zone lock is held. */
UCMA_INTERNAL uint32_t ucma_extent_find(struct ucma_zone *z, uint32_t npages, int mt,
					uint32_t lo, uint32_t hi);
/* The same among the pageblocks of @z that are in use (not wholly free),
 * which the search passes by without looking at the free ones. */
UCMA_INTERNAL uint32_t ucma_extent_find_hole(struct ucma_zone *z, uint32_t npages, int mt);
/*
 * Room for a run of @npages (no multiple of a pageblock) that no hole
 * holds, across pageblock boundaries: the free pages that end a pageblock
 * in use of migratetype @mt and the start of the wholly free pageblocks
 * after it, as many as the rest needs, or the free pages that start such
 * a pageblock and the end of the wholly free ones before it; free
 * pageblocks the run may take (not isolated, of its type, or MOVABLE for
 * an UNMOVABLE run when no UNMOVABLE pageblock is free).  Free
 * pageblocks that all hold data (resident) first, then the most pages in
 * the pageblock in use.  False when there is none.
 */
struct ucma_extent_across {
	uint32_t pfn;		/* the run's first page */
	uint32_t free_pb;	/* the first wholly free pageblock it reaches into */
	uint32_t nr_free_pb;	/* how many */
	uint32_t in_use;	/* its pages in the pageblock in use */
	bool resident;		/* all those pageblocks may hold data */
};
UCMA_INTERNAL bool ucma_extent_find_across(struct ucma_zone *z, uint32_t npages, int mt,
					   struct ucma_extent_across *f);
/* [pfn, pfn + npages), found by ucma_extent_find(), has been taken. */
UCMA_INTERNAL void ucma_extent_taken(struct ucma_zone *z, uint32_t pfn, uint32_t npages);

#endif
