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

/* The start of @npages free pages in [lo, hi) of @z, in pageblocks of
 * migratetype @mt, by best fit; UCMA_PFN_NONE when there is none.  The
 * zone lock is held. */
UCMA_INTERNAL uint32_t ucma_extent_find(struct ucma_zone *z, uint32_t npages, int mt,
					uint32_t lo, uint32_t hi);
/* [pfn, pfn + npages), found by ucma_extent_find(), has been taken. */
UCMA_INTERNAL void ucma_extent_taken(struct ucma_zone *z, uint32_t pfn, uint32_t npages);

#endif
