/*
 * extent.c - best-fit placement of runs by free extents, for compaction's
 * copies and ucma_pages_alloc_in().
 *
 * Buddy alignment leaves holes that no aligned block of a run's order fits
 * but the run does: a free extent is any stretch of adjacent free blocks.
 * Packing copies into the extent with the least room to spare keeps the
 * larger holes for the larger objects, which is what lets compaction
 * empty pageblocks.  Finding the extents means walking a pageblock's page
 * metadata, run by run; a profile of ucma_compact() in bench_highalloc
 * (perf, call graphs) put the walks at as much time as the copies, since
 * each copy looked at the first pageblock that fits and the
 * EXTENT_BESTFIT_PAGEBLOCKS after it, and its own take had changed the
 * pageblock it would look at first next time.
 *
 * So a walk writes down what it found (struct ucma_extent_note, extent.h),
 * and the search reads the notes, one cache line per pageblock: a
 * pageblock is walked again only after a block was freed into it, or when
 * its note turns out wrong (pages taken by another path), or when it has
 * more extents than a note holds.  A result read from a note is checked
 * against the page metadata before it is returned; the search's own takes
 * are written into the note (ucma_extent_taken()).
 *
 * The search passes pageblocks without room for the request by the
 * levels of extent.h (free_levels), a word of 64 pageblocks at a time.
 *
 * Everything here runs under the zone lock.
 *
 * SPDX-License-Identifier: MIT
 */
#include "extent.h"

#define EXTENT_BESTFIT_PAGEBLOCKS 8	/* looked at after the first that fits */
/*
 * Candidates (pageblocks in use with room next to a wholly free one) that
 * a search for room across a boundary looks at in all.  Candidates that
 * fail count too: those of another migratetype (MOVABLE pageblocks next
 * to free MOVABLE ones, for an unmovable run while an UNMOVABLE pageblock
 * is free), of the other zone sharing a word of the bitmaps, or whose
 * neighbours are too few for the run.  The old walk stopped after 512
 * pageblocks in use, whether next to a free one or not.
 */
#define EXTENT_ACROSS_CANDIDATES 512

/* The best fit for a request seen so far. */
struct extent_fit {
	uint32_t npages, lo, hi;	/* the request */
	uint32_t pfn;			/* best start, or UCMA_PFN_NONE */
	uint32_t slack;			/* its extent's pages beyond npages */
	bool from_note;			/* pfn was read from a note, not walked */
	unsigned top;			/* levels searched: below this one */
};

static inline bool note_holds(const struct ucma_extent_note *n, const struct ucma_pageblock *b)
{
	return n->seq != 0 && n->seq == b->free_seq + 1;
}

void ucma_extent_levels_refresh(struct ucma_arena *a, uint32_t b)
{
	struct ucma_pageblock *pb = &a->blocks[b];
	unsigned from = pb->levels, to = ucma_extent_levels_due(pb);
	uint64_t bit = 1ull << (b % 64), *w = a->free_levels + b / 64;
	size_t words = UCMA_EXTENT_LEVEL_WORDS(a);

	if (from)
		__atomic_fetch_and(w + (from - 1) * words, ~bit, __ATOMIC_RELAXED);
	if (to)
		__atomic_fetch_or(w + (to - 1) * words, bit, __ATOMIC_RELAXED);
	pb->levels = (uint8_t)to;
}

bool ucma_extent_levels_hold(const struct ucma_arena *a, uint32_t b)
{
	size_t words = UCMA_EXTENT_LEVEL_WORDS(a);
	uint64_t d = __atomic_load_n(a->free_levels + UCMA_EXTENT_DEFERRED_ROW * words + b / 64,
				     __ATOMIC_RELAXED);

	for (unsigned j = 0; j < UCMA_EXTENT_LEVELS; j++) {
		uint64_t w = __atomic_load_n(a->free_levels + j * words + b / 64, __ATOMIC_RELAXED);

		if (((w >> (b % 64)) & 1) != (j + 1 == a->blocks[b].levels))
			return false;
	}
	return ((d >> (b % 64)) & 1) == a->blocks[b].deferred;
}

/*
 * What a note now says of its pageblock @b's longest extent, for the
 * levels.  A note lists the extents of two pages or more only, so one
 * that lists none still allows single free pages: the bound is then 1,
 * not 0 (ucma_extent_levels_due() gives 0 when no page is free).
 */
static void note_longest(struct ucma_arena *a, uint32_t b, unsigned longest)
{
	a->blocks[b].longest_levels = (uint8_t)(ucma_extent_level_count(longest ? longest : 1) + 1);
	ucma_extent_levels_changed(a, b);
}

/* The free extent [start, end) as a candidate for @f. */
static void consider(struct extent_fit *f, uint32_t start, uint32_t end, bool from_note)
{
	uint32_t s = start < f->lo ? f->lo : start, e = end > f->hi ? f->hi : end;

	if (e > s && e - s >= f->npages && e - s - f->npages < f->slack) {
		f->pfn = s;
		f->slack = e - s - f->npages;
		f->from_note = from_note;
	}
}

/* List the extent [off, off + len) of a pageblock in note @n if it is two
 * pages or more; false when the note is full. */
static bool note_add(struct ucma_extent_note *n, uint32_t off, uint32_t len)
{
	if (len < 2)
		return true;	/* fits no request that reads notes */
	if (n->nr == UCMA_EXTENT_SLOTS)
		return false;
	n->ext[n->nr].off = (uint16_t)off;
	n->ext[n->nr++].len = (uint16_t)len;
	return true;
}

/* Write pageblock @pb's note from its page metadata, offering each extent
 * to @f on the way. */
static void note_walk(struct ucma_zone *z, uint32_t pb, struct ucma_extent_note *n,
		      struct extent_fit *f)
{
	struct ucma_arena *a = z->arena;
	uint32_t end = pb + UCMA_PAGEBLOCK_PAGES, ext = UCMA_PFN_NONE, longest = 0;
	bool overflow = false;

	z->extent_walks++;
	n->nr = 0;
	for (uint32_t pfn = pb; pfn <= end;) {
		const struct ucma_page *p = pfn < end ? &a->pages[pfn] : NULL;

		if (p && p->kind == UCMA_PK_FREE) {
			if (ext == UCMA_PFN_NONE)
				ext = pfn;
			pfn += 1u << p->order;
			continue;
		}
		if (ext != UCMA_PFN_NONE) {
			uint32_t len = pfn - ext;

			consider(f, ext, pfn, false);
			if (len > longest)
				longest = len;
			if (!overflow && !note_add(n, ext - pb, len))
				overflow = true;
			ext = UCMA_PFN_NONE;
		}
		if (!p)
			break;
		pfn = p->kind == UCMA_PK_RUN  ? pfn + p->aux :
		      p->kind == UCMA_PK_TAIL ? p->aux + a->pages[p->aux].aux :
						pfn + 1;
	}
	if (overflow)
		n->nr = UCMA_EXTENT_OVERFLOW;
	n->longest = (uint16_t)longest;
	n->seq = a->blocks[pb >> UCMA_PAGEBLOCK_ORDER].free_seq + 1;
	note_longest(a, pb >> UCMA_PAGEBLOCK_ORDER, longest);
}

/* Word @w of the levels from @level up to below @below: a pageblock's bit
 * is set when its longest free extent may reach one of those levels. */
static uint64_t levels_word(const struct ucma_arena *a, uint32_t w, unsigned level,
			    unsigned below)
{
	size_t words = UCMA_EXTENT_LEVEL_WORDS(a);
	uint64_t word = 0;

	for (unsigned j = level; j < below; j++)
		word |= __atomic_load_n(a->free_levels + j * words + w, __ATOMIC_RELAXED);
	return word;
}

/* Word @w of the wholly free pageblocks: the top level and the
 * deferred row. */
static uint64_t whole_word(const struct ucma_arena *a, uint32_t w)
{
	size_t words = UCMA_EXTENT_LEVEL_WORDS(a);

	return __atomic_load_n(a->free_levels + (UCMA_EXTENT_LEVELS - 1) * words + w,
			       __ATOMIC_RELAXED) |
	       __atomic_load_n(a->free_levels + UCMA_EXTENT_DEFERRED_ROW * words + w,
			       __ATOMIC_RELAXED);
}

/*
 * Word @w of the pageblocks in use with free pages (in a level below the
 * top one) next to a wholly free one (whole_word()): where a run across a
 * boundary may start or end.  The bits are a filter (they may list a
 * pageblock of another zone or type, or an isolated one);
 * ucma_extent_find_across() checks each candidate.
 */
static uint64_t across_word(const struct ucma_arena *a, uint32_t w)
{
	size_t words = UCMA_EXTENT_LEVEL_WORDS(a);
	uint64_t free = whole_word(a, w), up, down;

	/* bit i: pageblock 64w + i + 1 is free; then 64w + i - 1 */
	up = free >> 1;
	if (w + 1 < words)
		up |= whole_word(a, w + 1) << 63;
	down = free << 1;
	if (w > 0)
		down |= whole_word(a, w - 1) >> 63;
	return levels_word(a, w, 0, UCMA_EXTENT_LEVELS - 1) & (up | down);
}

/*
 * The highest pageblock below @end and at or above @lo whose bit is set in
 * the levels from @level up to below @below, or with @across among the
 * candidates of across_word(); UINT32_MAX when there is none.  64
 * pageblocks a word, so that a stretch of pageblocks with nothing to offer
 * costs one look per 64, not one per pageblock.
 */
static inline __attribute__((always_inline)) uint32_t
prev_bit(const struct ucma_arena *a, uint32_t end, uint32_t lo, bool across, unsigned level,
	 unsigned below)
{
	while (end > lo) {
		uint32_t w = (end - 1) / 64, top = (end - 1) % 64;
		uint64_t word = across ? across_word(a, w) : levels_word(a, w, level, below);

		if (top < 63)
			word &= (2ull << top) - 1;
		if (word) {
			uint32_t i = w * 64 + 63 - (uint32_t)__builtin_clzll(word);

			return i >= lo ? i : UINT32_MAX;
		}
		end = w * 64;
	}
	return UINT32_MAX;
}

/* The highest pageblock below @end and at or above @lo whose bit is set
 * in any of the levels from @level up to below @below, or UINT32_MAX. */
static uint32_t prev_set(const struct ucma_arena *a, unsigned level, unsigned below, uint32_t end,
			 uint32_t lo)
{
	return prev_bit(a, end, lo, false, level, below);
}

/* The highest candidate of across_word() below @end and at or above @lo,
 * or UINT32_MAX. */
static uint32_t prev_across(const struct ucma_arena *a, uint32_t end, uint32_t lo)
{
	return prev_bit(a, end, lo, true, 0, 0);
}

/*
 * The best fit for @f among the pageblocks of [lo, hi) with migratetype
 * @mt, highest first, up to EXTENT_BESTFIT_PAGEBLOCKS pageblocks after the
 * first that fits; an exact fit ends the search.  Pageblocks with too few
 * free pages, or a note whose longest extent is too short, are passed at
 * once.  A deferred pageblock's metadata is not read (zone_alloc_in()
 * takes those last).
 */
static void search(struct ucma_zone *z, int mt, struct extent_fit *f)
{
	struct ucma_arena *a = z->arena;
	uint32_t first = UCMA_ALIGN_DOWN(f->lo > z->start_pfn ? f->lo : z->start_pfn,
					 UCMA_PAGEBLOCK_PAGES);
	uint32_t last = f->hi < z->end_pfn ? f->hi : z->end_pfn;
	unsigned level, looked = 0;

	/* An extent lies within one pageblock; 0 pages has no level (no
	 * caller asks for it). */
	if (!f->npages || f->npages > UCMA_PAGEBLOCK_PAGES)
		return;
	/* Pageblocks whose extents may reach the request's level: every one
	 * that can hold it, and a few more (extent.h). */
	level = ucma_extent_level_count(f->npages) - 1;

	for (uint32_t bi = UCMA_ALIGN_UP(last, UCMA_PAGEBLOCK_PAGES) >> UCMA_PAGEBLOCK_ORDER;
	     (bi = prev_set(a, level, f->top, bi, first >> UCMA_PAGEBLOCK_ORDER)) != UINT32_MAX;) {
		uint32_t pb = bi << UCMA_PAGEBLOCK_ORDER;
		struct ucma_pageblock *b = &a->blocks[bi];
		struct ucma_extent_note *n;

		z->extent_looked++;
		if (b->mt != mt || b->nr_free < f->npages || b->deferred)
			continue;
		n = &a->extents[bi];
		if (note_holds(n, b) && n->longest < f->npages)
			continue;
		if (f->pfn != UCMA_PFN_NONE && ++looked > EXTENT_BESTFIT_PAGEBLOCKS)
			return;
		if (!note_holds(n, b) || n->nr == UCMA_EXTENT_OVERFLOW) {
			note_walk(z, pb, n, f);
		} else {
			for (unsigned i = 0; i < n->nr; i++)
				consider(f, pb + n->ext[i].off, pb + n->ext[i].off + n->ext[i].len,
					 true);
		}
		if (f->pfn != UCMA_PFN_NONE && f->slack == 0)
			return;
	}
}

static uint32_t find(struct ucma_zone *z, uint32_t npages, int mt, uint32_t lo, uint32_t hi,
		     unsigned top)
{
	for (;;) {
		struct extent_fit f = {
			.npages = npages, .lo = lo, .hi = hi,
			.pfn = UCMA_PFN_NONE, .slack = UINT32_MAX, .top = top,
		};

		search(z, mt, &f);
		if (f.pfn == UCMA_PFN_NONE || !f.from_note ||
		    ucma_buddy_range_free(z, f.pfn, f.pfn + npages))
			return f.pfn;
		/* The note listed pages taken since by another path: drop it;
		 * the search walks that pageblock again. */
		z->arena->extents[f.pfn >> UCMA_PAGEBLOCK_ORDER].seq = 0;
		z->extent_stale++;
	}
}

uint32_t ucma_extent_find(struct ucma_zone *z, uint32_t npages, int mt, uint32_t lo, uint32_t hi)
{
	return find(z, npages, mt, lo, hi, UCMA_EXTENT_LEVELS);
}

/* Wholly free pageblocks are the only ones in the top level. */
uint32_t ucma_extent_find_hole(struct ucma_zone *z, uint32_t npages, int mt)
{
	if (npages >= UCMA_PAGEBLOCK_PAGES)
		return UCMA_PFN_NONE;
	return find(z, npages, mt, z->start_pfn, z->end_pfn, UCMA_EXTENT_LEVELS - 1);
}

/*
 * May a run of migratetype @mt reach into pageblock @b of @z, wholly free?
 * One of its own type, or a MOVABLE one for an UNMOVABLE run when no
 * UNMOVABLE pageblock is free, as rmqueue() steals one only then: unmovable
 * pages cluster.
 */
static bool across_free(const struct ucma_zone *z, uint32_t b, int mt)
{
	const struct ucma_pageblock *pb = &z->arena->blocks[b];

	if (b < z->start_pfn >> UCMA_PAGEBLOCK_ORDER || b >= z->end_pfn >> UCMA_PAGEBLOCK_ORDER ||
	    pb->nr_free != UCMA_PAGEBLOCK_PAGES || pb->isolate_count)
		return false;
	return pb->mt == mt ||
	       (pb->mt == UCMA_MT_MOVABLE && mt == UCMA_MT_UNMOVABLE &&
		z->free_area[UCMA_MAX_ORDER].nr_free[UCMA_MT_UNMOVABLE] == 0);
}

/* Does wholly free pageblock @b hold data?  (A deferred one is clean; a
 * linked one is one block, its head at its start.) */
static bool across_resident(const struct ucma_arena *a, uint32_t b)
{
	return !a->blocks[b].deferred &&
	       (a->pages[b << UCMA_PAGEBLOCK_ORDER].flags & UCMA_PF_DIRTY);
}

/*
 * The @n pageblocks from @b on are wholly free and may be taken; 0 when
 * not, 1 when they may, 2 when they may and all hold data.
 */
static int across_span(const struct ucma_zone *z, uint32_t b, uint32_t n, int mt)
{
	bool resident = true;

	for (uint32_t i = 0; i < n; i++) {
		if (!across_free(z, b + i, mt))
			return 0;
		resident = resident && across_resident(z->arena, b + i);
	}
	return resident ? 2 : 1;
}

/* A candidate: the run at @cand, the @count wholly free pageblocks from
 * @free_b that it reaches into (@kind from across_span()), and @len of its
 * pages in the pageblock in use; kept in @f when better. */
static void across_consider(struct ucma_extent_across *f, uint32_t cand, uint32_t free_b,
			    uint32_t count, int kind, uint32_t len)
{
	bool res = kind == 2;

	if (f->pfn == UCMA_PFN_NONE || res > f->resident ||
	    (res == f->resident && len > f->in_use)) {
		f->pfn = cand;
		f->free_pb = free_b;
		f->nr_free_pb = count;
		f->in_use = len;
		f->resident = res;
	}
}

/*
 * The pageblocks in use with room next to a wholly free one are found 64
 * at a time from the top of the zone down (prev_across()); one that ends
 * in free pages with enough wholly free pageblocks after it, or starts
 * with free pages after enough wholly free ones, is a candidate, and the
 * search ends EXTENT_BESTFIT_PAGEBLOCKS candidates after the first, or
 * EXTENT_ACROSS_CANDIDATES in all.  Free pageblocks
 * that hold data win over ones never touched (their pages cost no new
 * memory), then the most pages in the pageblock in use: the run takes the
 * least of the free ones, whose rest stays one hole.  Both directions,
 * since pageblocks freed in a row come back last-freed first, from the top
 * down.
 */
bool ucma_extent_find_across(struct ucma_zone *z, uint32_t npages, int mt,
			     struct ucma_extent_across *f)
{
	struct ucma_arena *a = z->arena;
	uint32_t first = z->start_pfn >> UCMA_PAGEBLOCK_ORDER;
	uint32_t last = z->end_pfn >> UCMA_PAGEBLOCK_ORDER;
	unsigned looked = 0, candidates = 0;

	f->pfn = UCMA_PFN_NONE;
	f->resident = false;
	for (uint32_t bi = last; (bi = prev_across(a, bi, first)) != UINT32_MAX;) {
		const struct ucma_pageblock *b = &a->blocks[bi];
		uint32_t start = bi << UCMA_PAGEBLOCK_ORDER, end = start + UCMA_PAGEBLOCK_PAGES;
		uint32_t tail, head, n;
		int kind;

		if (++candidates > EXTENT_ACROSS_CANDIDATES)
			break;
		if (b->mt != mt || b->isolate_count || b->deferred)
			continue;
		/* (the pageblock next to it is free whatever the length) */
		tail = across_free(z, bi + 1, mt) ? end - ucma_buddy_free_before(z, end) : 0;
		if (tail && tail < npages) {
			n = (npages - tail + UCMA_PAGEBLOCK_PAGES - 1) >> UCMA_PAGEBLOCK_ORDER;
			if ((kind = across_span(z, bi + 1, n, mt)))
				across_consider(f, end - tail, bi + 1, n, kind, tail);
		}
		head = bi > first && across_free(z, bi - 1, mt)
			       ? ucma_buddy_free_from(z, start) - start
			       : 0;
		if (head && head < npages) {
			n = (npages - head + UCMA_PAGEBLOCK_PAGES - 1) >> UCMA_PAGEBLOCK_ORDER;
			if (bi >= first + n && (kind = across_span(z, bi - n, n, mt)))
				across_consider(f, start + head - npages, bi - n, n, kind, head);
		}
		if (f->pfn != UCMA_PFN_NONE && ++looked > EXTENT_BESTFIT_PAGEBLOCKS)
			break;
	}
	return f->pfn != UCMA_PFN_NONE;
}

void ucma_extent_taken(struct ucma_zone *z, uint32_t pfn, uint32_t npages)
{
	struct ucma_arena *a = z->arena;
	uint32_t pb = UCMA_ALIGN_DOWN(pfn, UCMA_PAGEBLOCK_PAGES), off = pfn - pb;
	struct ucma_extent_note *n = &a->extents[pb >> UCMA_PAGEBLOCK_ORDER];
	unsigned i, longest = 0;
	uint32_t ext_start, ext_end;

	if (!note_holds(n, &a->blocks[pb >> UCMA_PAGEBLOCK_ORDER]) ||
	    n->nr == UCMA_EXTENT_OVERFLOW)
		return;	/* walked again when next looked at */
	for (i = 0; i < n->nr; i++)
		if (off >= n->ext[i].off && off + npages <= n->ext[i].off + n->ext[i].len)
			break;
	if (i == n->nr) {
		n->seq = 0;	/* taken from outside what the note knows */
		return;
	}
	/* The extent gives way to what is left of it on either side (the
	 * search takes from the start of an extent, or of its part inside
	 * the request's range). */
	ext_start = n->ext[i].off;
	ext_end = ext_start + n->ext[i].len;
	n->ext[i] = n->ext[--n->nr];
	if (!note_add(n, ext_start, off - ext_start) ||
	    !note_add(n, off + npages, ext_end - (off + npages))) {
		n->nr = UCMA_EXTENT_OVERFLOW;
		return;
	}
	for (i = 0; i < n->nr; i++)
		if (n->ext[i].len > longest)
			longest = n->ext[i].len;
	n->longest = (uint16_t)longest;
	note_longest(a, pb >> UCMA_PAGEBLOCK_ORDER, longest);
}
