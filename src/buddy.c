/*
 * buddy.c - the binary buddy allocator of one zone: free lists per order
 * and migratetype, splitting and merging.
 *
 * Mechanism only; zone.c decides which list to take from (zone rules,
 * fallback, stealing).  Every function here is called with z->lock held;
 * stores to page fields that others read without it are atomic
 * (UCMA_PG_SET, see struct ucma_page).
 *
 * Invariants (checked by ucma_zone_check()):
 *  - a free block of order o is 2^o pages aligned to 2^o pages, never
 *    larger than a pageblock, so it never crosses a pageblock boundary;
 *  - its head page has kind FREE and order o, and it sits on the list
 *    free_area[o].head[mt] where mt is the migratetype of its pageblock;
 *  - kind FREE appears on current free heads only: a buddy absorbed by a
 *    merge, and a block taken off the lists, lose it at once.  So "which
 *    free block holds page p" is answered by looking at the (at most ten)
 *    aligned candidates p & ~(2^o - 1), as the kernel's PageBuddy does;
 *  - two free buddies of the same order never coexist: they are merged;
 *  - pb->nr_free counts the free pages of a pageblock, z->free_pages those
 *    of the zone (ISOLATE lists included), deferred pageblocks included;
 *  - the pageblock's bit in the levels of pageblocks with room (extent.h)
 *    follows nr_free (free_count()) and is raised to it when a free may
 *    grow an extent (free_block()).
 *
 * Deferred initialisation (the kernel's DEFERRED_STRUCT_PAGE_INIT).
 * Linking every pageblock at start-up wrote the head page of each: one
 * 4 KiB page of metadata per 2 MiB, 2 MiB of resident memory per GiB of
 * arena however little of it a program used.  So at start-up no pageblock
 * is linked: each is "deferred" (pb->deferred), wholly free, clean (never
 * touched: zero-filled), of the migratetype pb->mt says, with its page
 * metadata untouched zeros.  The rules:
 *  - counters count a deferred pageblock as one free order-9 block of its
 *    migratetype: free_area[9].nr_free[mt], z->free_pages, pb->nr_free
 *    (512), z->isolated_free_pages never (a deferred pageblock is never
 *    ISOLATE); z->nr_deferred[mt] counts them apart.  So watermarks,
 *    buddyinfo, the fragmentation index and suitability see the free
 *    memory, and "nr_free[mt] > 0" no longer implies "head[mt] is a
 *    block": list walks see linked blocks only;
 *  - nothing reads or writes the page metadata of a deferred pageblock:
 *    who needs one links it first (materialise(): the head becomes a FREE
 *    order-9 block, the counters do not change), or knows from
 *    pb->deferred that it is wholly free.  Linked here: buddy_take() when
 *    the lists have no block for the request (the lowest deferred
 *    pageblock of the type, so the lowest pageblocks are used first, as
 *    before), ucma_buddy_first() (the fallbacks' look at an empty order-9
 *    list), ucma_buddy_take_range() (claims, ucma_alloc()), and
 *    ucma_buddy_move_block_mt() (isolation, stealing, runs of
 *    pageblocks), so a deferred pageblock never changes migratetype and
 *    is never isolated.  zone.c links before reading a pageblock's head
 *    (ucma_zone_set_free_dirty_locked(), runs of pageblocks, heap lending's
 *    pick) and asks ucma_buddy_deferred_in() where its own walks of page
 *    metadata pass deferred pageblocks by (extent.c's walks);
 *  - every other walk over page metadata passes a deferred pageblock by
 *    or never reaches one: compaction scans only pageblocks with pages in
 *    use (nr_free < 512) and isolates what it empties, the purge walks the
 *    lists (a deferred pageblock is clean: nothing to give back), the
 *    fork child's copy of the CMA zone (frames.c) skips it, statistics
 *    and ucmastat's map read counters and pb fields only;
 *  - linking is one-way: a pageblock freed whole stays linked.
 * A forked child inherits the state as it is (it is under the zone lock).
 *
 * Dirty tracking for decay: a free block whose pages may hold data (and
 * so cost the kernel memory) carries UCMA_PF_DIRTY and, in aux, the purge
 * epoch in which it was freed.  Merging ORs the flag and keeps the older
 * epoch; splitting copies both.  A block that is not dirty is known to be
 * zero-filled (never touched, or returned with MADV_DONTNEED), and unmapped
 * unless the arena was prefaulted or is on hugetlb pages: migration maps
 * such pages in bulk before copying into them, and marks the free blocks
 * it maps ahead dirty (ucma_buddy_dirty_clean_after()).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "extent.h"

static inline struct ucma_page *pg(const struct ucma_zone *z, uint32_t pfn)
{
	return &z->arena->pages[pfn];
}

static inline int block_mt(const struct ucma_zone *z, uint32_t pfn)
{
	return z->arena->blocks[pfn >> UCMA_PAGEBLOCK_ORDER].mt;
}

/* Count a free block in (@n = 1) or out (@n = -1) of the counters. */
static void free_count(struct ucma_zone *z, uint32_t pfn, unsigned order, int mt, int n)
{
	uint32_t pages = 1u << order, b = pfn >> UCMA_PAGEBLOCK_ORDER;

	z->free_area[order].nr_free[mt] += (uint64_t)(int64_t)n;
	z->free_pages += (uint64_t)(int64_t)n * pages;
	if (mt == UCMA_MT_ISOLATE)
		z->isolated_free_pages += (uint64_t)(int64_t)n * pages;
	z->arena->blocks[b].nr_free += (uint16_t)(n * (int)pages);
	ucma_extent_levels_changed(z->arena, b);
}

/* Put a block at the front of its list and mark its head FREE; the
 * counters are the caller's. */
static void free_list_link(struct ucma_zone *z, uint32_t pfn, unsigned order, int mt,
			   uint8_t flags, uint32_t epoch)
{
	struct ucma_free_area *fa = &z->free_area[order];
	struct ucma_page *p = pg(z, pfn);
	uint32_t first = fa->head[mt];

	UCMA_PG_SET(p, kind, UCMA_PK_FREE);
	p->order = (uint8_t)order;
	UCMA_PG_SET(p, owner_type, UCMA_OWN_NONE);
	p->flags = flags;
	UCMA_PG_SET(p, aux, epoch);
	UCMA_PG_SET(p, link.prev, UCMA_PFN_NONE);
	UCMA_PG_SET(p, link.next, first);
	if (first != UCMA_PFN_NONE)
		UCMA_PG_SET(pg(z, first), link.prev, pfn);
	fa->head[mt] = pfn;
	z->list_gen++;
}

/* Put a block at the front of its list, mark its head FREE, count it. */
static void free_list_add(struct ucma_zone *z, uint32_t pfn, unsigned order, int mt,
			  uint8_t flags, uint32_t epoch)
{
	free_list_link(z, pfn, order, mt, flags, epoch);
	free_count(z, pfn, order, mt, 1);
}

/* Take a block off its list; its head stops being FREE. */
static void free_list_del(struct ucma_zone *z, uint32_t pfn, unsigned order, int mt)
{
	struct ucma_free_area *fa = &z->free_area[order];
	struct ucma_page *p = pg(z, pfn);

	if (p->link.prev != UCMA_PFN_NONE)
		UCMA_PG_SET(pg(z, p->link.prev), link.next, p->link.next);
	else
		fa->head[mt] = p->link.next;
	if (p->link.next != UCMA_PFN_NONE)
		UCMA_PG_SET(pg(z, p->link.next), link.prev, p->link.prev);
	UCMA_PG_SET(p, kind, UCMA_PK_UNUSED);
	free_count(z, pfn, order, mt, -1);
	z->list_gen++;
}

/*
 * Every pageblock of the zone starts deferred: counted as a free order-9
 * block of its migratetype, on no list, its page metadata not written.
 */
void ucma_buddy_init_zone(struct ucma_zone *z)
{
	struct ucma_pageblock *blocks = z->arena->blocks;

	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++) {
		for (int mt = 0; mt < UCMA_MT_NR; mt++) {
			z->free_area[o].head[mt] = UCMA_PFN_NONE;
			z->free_area[o].nr_free[mt] = 0;
		}
	}
	for (int mt = 0; mt < UCMA_MT_NR; mt++)
		z->nr_deferred[mt] = 0;
	z->free_pages = 0;
	z->isolated_free_pages = 0;
	z->deferred_first = z->start_pfn >> UCMA_PAGEBLOCK_ORDER;
	for (uint32_t pfn = z->start_pfn; pfn < z->end_pfn; pfn += UCMA_PAGEBLOCK_PAGES) {
		struct ucma_pageblock *pb = &blocks[pfn >> UCMA_PAGEBLOCK_ORDER];

		if (pb->mt == UCMA_MT_ISOLATE)
			ucma_fatal("internal error: pageblock %u starts isolated",
				   pfn >> UCMA_PAGEBLOCK_ORDER);
		pb->deferred = 1;
		ucma_extent_deferred_note(z->arena, pfn >> UCMA_PAGEBLOCK_ORDER, true);
		pb->nr_free = 0;
		pb->longest_levels = 0;
		z->nr_deferred[pb->mt]++;
		free_count(z, pfn, UCMA_MAX_ORDER, pb->mt, 1);
	}
}

/* Link deferred pageblock @b: its first page becomes a clean free block of
 * order 9 on its list.  Already counted, so the counters stay. */
static void materialise(struct ucma_zone *z, uint32_t b)
{
	struct ucma_pageblock *pb = &z->arena->blocks[b];

	pb->deferred = 0;
	ucma_extent_deferred_note(z->arena, b, false);
	z->nr_deferred[pb->mt]--;
	ucma_extent_levels_refresh(z->arena, b);	/* out of level 0 (extent.h) */
	free_list_link(z, b << UCMA_PAGEBLOCK_ORDER, UCMA_MAX_ORDER, pb->mt, 0, 0);
	while (z->deferred_first < (z->end_pfn >> UCMA_PAGEBLOCK_ORDER) &&
	       !z->arena->blocks[z->deferred_first].deferred)
		z->deferred_first++;
}

void ucma_buddy_materialise(struct ucma_zone *z, uint32_t start, uint32_t end)
{
	uint32_t first, last;

	if (start < z->start_pfn)
		start = z->start_pfn;
	if (end > z->end_pfn)
		end = z->end_pfn;
	if (start >= end)
		return;
	first = start >> UCMA_PAGEBLOCK_ORDER;
	last = (end - 1) >> UCMA_PAGEBLOCK_ORDER;
	if (first < z->deferred_first)
		first = z->deferred_first;
	for (uint32_t b = first; b <= last; b++)
		if (z->arena->blocks[b].deferred)
			materialise(z, b);
}

/* Link the lowest deferred pageblock of migratetype @mt; false if none. */
static bool materialise_lowest(struct ucma_zone *z, int mt)
{
	const struct ucma_pageblock *blocks = z->arena->blocks;
	uint32_t last = z->end_pfn >> UCMA_PAGEBLOCK_ORDER;

	if (z->nr_deferred[mt] == 0)
		return false;
	for (uint32_t b = z->deferred_first; b < last; b++) {
		if (blocks[b].deferred && blocks[b].mt == mt) {
			materialise(z, b);
			return true;
		}
	}
	ucma_fatal("internal error: zone %s counts %u deferred pageblocks of type %d, finds none",
		   z->name, z->nr_deferred[mt], mt);
}

uint32_t ucma_buddy_first(struct ucma_zone *z, unsigned order, int mt)
{
	if (z->free_area[order].head[mt] == UCMA_PFN_NONE && order == UCMA_MAX_ORDER)
		materialise_lowest(z, mt);
	return z->free_area[order].head[mt];
}

uint32_t ucma_buddy_deferred_in(const struct ucma_zone *z, uint32_t npages, int mt, uint32_t lo,
				uint32_t hi)
{
	const struct ucma_pageblock *blocks = z->arena->blocks;
	uint32_t first = z->deferred_first;

	if (z->nr_deferred[mt] == 0 || npages == 0)
		return UCMA_PFN_NONE;
	if (hi > z->end_pfn)
		hi = z->end_pfn;
	if (lo >> UCMA_PAGEBLOCK_ORDER > first)
		first = lo >> UCMA_PAGEBLOCK_ORDER;
	for (uint32_t b = (hi + UCMA_PAGEBLOCK_PAGES - 1) >> UCMA_PAGEBLOCK_ORDER; b > first;) {
		uint32_t s, e;

		b--;
		if (!blocks[b].deferred || blocks[b].mt != mt)
			continue;
		s = b << UCMA_PAGEBLOCK_ORDER;
		e = s + UCMA_PAGEBLOCK_PAGES;
		if (s < lo)
			s = lo;
		if (e > hi)
			e = hi;
		if (e > s && e - s >= npages)
			return s;
	}
	return UCMA_PFN_NONE;
}

uint32_t ucma_buddy_deferred_highest(const struct ucma_zone *z, int mt,
				     bool (*usable)(const struct ucma_arena *a, uint32_t pfn))
{
	const struct ucma_pageblock *blocks = z->arena->blocks;

	if (z->nr_deferred[mt] == 0)
		return UCMA_PFN_NONE;
	for (uint32_t b = z->end_pfn >> UCMA_PAGEBLOCK_ORDER; b > z->deferred_first;) {
		b--;
		if (blocks[b].deferred && blocks[b].mt == mt &&
		    usable(z->arena, b << UCMA_PAGEBLOCK_ORDER))
			return b << UCMA_PAGEBLOCK_ORDER;
	}
	return UCMA_PFN_NONE;
}

bool ucma_page_is_free_head(const struct ucma_arena *a, uint32_t pfn)
{
	if (ucma_pageblock_deferred(a, pfn))
		return (pfn & (UCMA_PAGEBLOCK_PAGES - 1)) == 0;
	return a->pages[pfn].kind == UCMA_PK_FREE;
}

/* The free block holding @pfn, or UCMA_PFN_NONE if the page is not free. */
static uint32_t find_free_head(const struct ucma_zone *z, uint32_t pfn)
{
	/* (Also ucma_buddy_free_head(), for zone.c's purge.) */
	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++) {
		uint32_t h = pfn & ~((1u << o) - 1);
		const struct ucma_page *p = pg(z, h);

		if (h < z->start_pfn)
			break;
		if (p->kind == UCMA_PK_FREE && p->order >= o)
			return h;
	}
	return UCMA_PFN_NONE;
}

uint32_t ucma_buddy_free_head(const struct ucma_zone *z, uint32_t pfn)
{
	return find_free_head(z, pfn);
}

/*
 * Split a block of order @high taken from list @mt down to @low, giving
 * the upper halves back (the kernel's expand()).
 */
static void expand(struct ucma_zone *z, uint32_t pfn, unsigned low, unsigned high, int mt,
		   uint8_t flags, uint32_t epoch)
{
	while (high > low) {
		high--;
		free_list_add(z, pfn + (1u << high), high, mt, flags, epoch);
	}
}

/*
 * ucma_buddy_take() - take a block of exactly 2^order pages from the lists
 * of migratetype @mt, splitting a larger one if needed.  The head's kind is
 * UNUSED afterwards; the caller marks it.  Returns the pfn or UCMA_PFN_NONE.
 * *@was_dirty (if not NULL) tells whether the pages may hold old data.
 */
/* Take block @pfn, first on the list of order @o and migratetype @mt, and
 * split it down to @order; the halves given back keep its flags, which
 * are returned. */
static uint8_t take_head(struct ucma_zone *z, uint32_t pfn, unsigned order, unsigned o, int mt)
{
	uint8_t flags = pg(z, pfn)->flags;
	uint32_t epoch = pg(z, pfn)->aux;

	free_list_del(z, pfn, o, mt);
	expand(z, pfn, order, o, mt, flags, epoch);
	return flags;
}

static uint32_t buddy_take(struct ucma_zone *z, unsigned order, int mt, bool *was_dirty)
{
	do {
		for (unsigned o = order; o < UCMA_NR_ORDERS; o++) {
			uint32_t pfn = z->free_area[o].head[mt];
			uint8_t flags;

			if (pfn == UCMA_PFN_NONE)
				continue;
			flags = take_head(z, pfn, order, o, mt);
			if (was_dirty)
				*was_dirty = flags & UCMA_PF_DIRTY;
			return pfn;
		}
		/* Nothing linked fits: a deferred pageblock does. */
	} while (materialise_lowest(z, mt));
	return UCMA_PFN_NONE;
}

/*
 * ucma_buddy_take_resident() - like ucma_buddy_take(), from the first list
 * of order >= @order whose first block may hold data (is dirty), so that
 * its pages are resident already; UCMA_PFN_NONE when no list starts with
 * one.  Only the first block of each list is looked at: a free goes to
 * the front, so the blocks freed last come first.  Looking further finds
 * more blocks marked dirty, but a merged block is marked so when any part
 * of it was, and taking those gave bench_malloc "small-batch" a higher
 * peak (9.5 MiB against 8.9 with eight looks per list).
 */
uint32_t ucma_buddy_take_resident(struct ucma_zone *z, unsigned order, int mt)
{
	for (unsigned o = order; o < UCMA_NR_ORDERS; o++) {
		uint32_t pfn = z->free_area[o].head[mt];

		if (pfn == UCMA_PFN_NONE || !(pg(z, pfn)->flags & UCMA_PF_DIRTY))
			continue;
		take_head(z, pfn, order, o, mt);
		return pfn;
	}
	return UCMA_PFN_NONE;
}

uint32_t ucma_buddy_take(struct ucma_zone *z, unsigned order, int mt)
{
	return buddy_take(z, order, mt, NULL);
}

uint32_t ucma_buddy_take_dirty(struct ucma_zone *z, unsigned order, int mt, bool *was_dirty)
{
	return buddy_take(z, order, mt, was_dirty);
}

/* Free one aligned block, merging with free buddies (the kernel's
 * __free_one_page()).  The block's pages are dirty as of the zone's epoch.
 * @grows: the pages were not free before, so free extents may have grown
 * and the pageblock's extent note (extent.h) no longer holds; false for
 * the rest of a free block split by a take, which merges at most back
 * into what it was split from. */
static void free_block(struct ucma_zone *z, uint32_t pfn, unsigned order, uint8_t flags,
		       uint32_t epoch, bool grows)
{
	int mt = block_mt(z, pfn);

	if (grows) {
		uint32_t pb = pfn >> UCMA_PAGEBLOCK_ORDER;

		/* When the count wraps, a note written 2^32 frees ago would
		 * match it again: the pageblock's note goes (it has one).
		 * An extent may grow: what the note said of the longest no
		 * longer bounds it (the counts below refresh the levels). */
		if (UCMA_UNLIKELY(++z->arena->blocks[pb].free_seq == 0))
			z->arena->extents[pb].seq = 0;
		z->arena->blocks[pb].longest_levels = 0;
	}
	while (order < UCMA_MAX_ORDER) {
		uint32_t buddy = pfn ^ (1u << order);
		struct ucma_page *b = pg(z, buddy);

		if (b->kind != UCMA_PK_FREE || b->order != order)
			break;
		if (b->flags & UCMA_PF_DIRTY) {
			if (!(flags & UCMA_PF_DIRTY) || b->aux < epoch)
				epoch = b->aux;
			flags |= UCMA_PF_DIRTY;
		}
		free_list_del(z, buddy, order, mt);
		pfn &= ~(1u << order);
		order++;
	}
	free_list_add(z, pfn, order, mt, flags, epoch);
}

void ucma_buddy_free_block(struct ucma_zone *z, uint32_t pfn, unsigned order)
{
	free_block(z, pfn, order, UCMA_PF_DIRTY, z->purge_epoch, true);
}

/* Free any page range: the largest aligned blocks that fit, in order. */
static void free_range(struct ucma_zone *z, uint32_t pfn, uint32_t npages, uint8_t flags,
		       uint32_t epoch, bool grows)
{
	uint32_t end = pfn + npages;

	while (pfn < end) {
		unsigned order = pfn ? (unsigned)__builtin_ctz(pfn) : UCMA_MAX_ORDER;

		if (order > UCMA_MAX_ORDER)
			order = UCMA_MAX_ORDER;
		while ((1u << order) > end - pfn)
			order--;
		free_block(z, pfn, order, flags, epoch, grows);
		pfn += 1u << order;
	}
}

void ucma_buddy_free_range(struct ucma_zone *z, uint32_t pfn, uint32_t npages)
{
	free_range(z, pfn, npages, UCMA_PF_DIRTY, z->purge_epoch, true);
}

/* Give back the pages of a taken block that the caller does not want. */
void ucma_buddy_free_clean_range(struct ucma_zone *z, uint32_t pfn, uint32_t npages, bool dirty)
{
	free_range(z, pfn, npages, dirty ? UCMA_PF_DIRTY : 0, z->purge_epoch, true);
}

uint32_t ucma_buddy_free_before(const struct ucma_zone *z, uint32_t end)
{
	uint32_t pfn = end, pb = UCMA_ALIGN_DOWN(end - 1, UCMA_PAGEBLOCK_PAGES);

	while (pfn > pb) {
		uint32_t h = find_free_head(z, pfn - 1);

		if (h == UCMA_PFN_NONE)
			break;
		pfn = h;	/* a block never crosses the pageblock's start */
	}
	return pfn;
}

uint32_t ucma_buddy_free_from(const struct ucma_zone *z, uint32_t pfn)
{
	uint32_t end = UCMA_ALIGN_DOWN(pfn, UCMA_PAGEBLOCK_PAGES) + UCMA_PAGEBLOCK_PAGES;

	while (pfn < end) {
		uint32_t h = find_free_head(z, pfn);

		if (h == UCMA_PFN_NONE)
			break;
		pfn = h + (1u << pg(z, h)->order);
	}
	return pfn;
}

/*
 * ucma_buddy_take_range() - take exactly the pages [start, end) off the
 * free lists, splitting the blocks at both ends.  All-or-nothing: returns
 * false, changing nothing, when any page of the range is not free.
 */
bool ucma_buddy_range_free(const struct ucma_zone *z, uint32_t start, uint32_t end)
{
	for (uint32_t pfn = start; pfn < end;) {
		uint32_t h;

		if (ucma_pageblock_deferred(z->arena, pfn)) {
			pfn = UCMA_ALIGN_DOWN(pfn, UCMA_PAGEBLOCK_PAGES) + UCMA_PAGEBLOCK_PAGES;
			continue;
		}
		h = find_free_head(z, pfn);
		if (h == UCMA_PFN_NONE)
			return false;
		pfn = h + (1u << pg(z, h)->order);
	}
	return true;
}

bool ucma_buddy_take_range(struct ucma_zone *z, uint32_t start, uint32_t end)
{
	uint32_t pfn;

	if (!ucma_buddy_range_free(z, start, end))
		return false;
	ucma_buddy_materialise(z, start, end);
	for (pfn = start; pfn < end;) {
		uint32_t h = find_free_head(z, pfn);
		unsigned order = pg(z, h)->order;
		uint32_t bend = h + (1u << order);
		uint8_t flags = pg(z, h)->flags;
		uint32_t epoch = pg(z, h)->aux;

		free_list_del(z, h, order, block_mt(z, h));
		if (h < start)
			free_range(z, h, start - h, flags, epoch, false);
		if (bend > end)
			free_range(z, end, bend - end, flags, epoch, false);
		pfn = bend;
	}
	return true;
}

/*
 * ucma_buddy_clean_tail() - where the clean end of the free range [start,
 * end) begins: the first page from which every page up to @end is known
 * to be zero-filled and unmapped (in blocks without UCMA_PF_DIRTY, or in
 * deferred pageblocks); @end when the last page is not.  So @start means
 * the whole range is clean.  Asked before the range is taken, while its
 * blocks still carry their flags.  A range that starts in pages mapped
 * ahead of it (ucma_buddy_dirty_clean_after()) and runs on into clean
 * ones is the usual mixed case.
 */
uint32_t ucma_buddy_clean_tail(const struct ucma_zone *z, uint32_t start, uint32_t end)
{
	uint32_t tail = end;

	for (uint32_t pfn = start; pfn < end;) {
		uint32_t h, next;
		bool clean;

		if (ucma_pageblock_deferred(z->arena, pfn)) {
			h = UCMA_ALIGN_DOWN(pfn, UCMA_PAGEBLOCK_PAGES);
			next = h + UCMA_PAGEBLOCK_PAGES;
			clean = true;
		} else {
			h = find_free_head(z, pfn);
			if (h == UCMA_PFN_NONE)
				return end;
			next = h + (1u << pg(z, h)->order);
			clean = !(pg(z, h)->flags & UCMA_PF_DIRTY);
		}
		if (!clean)
			tail = end;
		else if (tail == end)
			tail = pfn;
		pfn = next;
	}
	return tail;
}

bool ucma_buddy_range_resident(const struct ucma_zone *z, uint32_t start, uint32_t end)
{
	for (uint32_t pfn = start; pfn < end;) {
		uint32_t h;

		if (ucma_pageblock_deferred(z->arena, pfn))
			return false;	/* never touched */
		h = find_free_head(z, pfn);
		if (h == UCMA_PFN_NONE || !(pg(z, h)->flags & UCMA_PF_DIRTY))
			return false;
		pfn = h + (1u << pg(z, h)->order);
	}
	return true;
}

/*
 * ucma_buddy_dirty_clean_after() - the clean free blocks that follow @pfn
 * without a gap, inside its pageblock, whole, as many as fit in @max
 * pages: marked dirty, because the caller is about to map their pages
 * (they stay free, and the decay purge gives them back if nobody takes
 * them).  Returns how many pages that is.  @pfn's pageblock is linked.
 */
uint32_t ucma_buddy_dirty_clean_after(struct ucma_zone *z, uint32_t pfn, uint32_t max)
{
	uint32_t end = UCMA_ALIGN_DOWN(pfn, UCMA_PAGEBLOCK_PAGES) + UCMA_PAGEBLOCK_PAGES;
	uint32_t n = 0;

	if (pfn >= z->end_pfn || (pfn & (UCMA_PAGEBLOCK_PAGES - 1)) == 0)
		return 0;	/* the next pageblock: another extent */
	while (pfn < end) {
		struct ucma_page *p = pg(z, pfn);
		uint32_t size;

		if (p->kind != UCMA_PK_FREE || (p->flags & UCMA_PF_DIRTY))
			break;
		size = 1u << p->order;
		if (size > max - n)
			break;
		p->flags |= UCMA_PF_DIRTY;
		UCMA_PG_SET(p, aux, z->purge_epoch);
		n += size;
		pfn += size;
	}
	return n;
}

/*
 * ucma_buddy_move_block_mt() - change the migratetype of pageblock
 * @pb_index and move its free blocks to the lists of the new type (the
 * kernel's move_freepages_block() plus set_pageblock_migratetype()).
 */
void ucma_buddy_move_block_mt(struct ucma_zone *z, uint32_t pb_index, int new_mt)
{
	struct ucma_pageblock *pb = &z->arena->blocks[pb_index];
	uint32_t start = pb_index << UCMA_PAGEBLOCK_ORDER;
	uint32_t end = start + UCMA_PAGEBLOCK_PAGES;
	int old_mt = pb->mt;

	if (old_mt == new_mt)
		return;
	/* A deferred pageblock keeps its migratetype: link it first. */
	if (pb->deferred)
		materialise(z, pb_index);
	for (uint32_t pfn = start; pfn < end;) {
		struct ucma_page *p = pg(z, pfn);

		if (p->kind == UCMA_PK_FREE) {
			unsigned order = p->order;
			uint8_t flags = p->flags;
			uint32_t epoch = p->aux;

			free_list_del(z, pfn, order, old_mt);
			free_list_add(z, pfn, order, new_mt, flags, epoch);
			pfn += 1u << order;
		} else if (p->kind == UCMA_PK_RUN) {
			pfn += p->aux;
		} else if (p->kind == UCMA_PK_TAIL) {
			pfn = p->aux + pg(z, p->aux)->aux;
		} else {
			/* Cannot happen while the invariants hold. */
			ucma_fatal("internal error: page %u of pageblock %u is no head", pfn,
				   pb_index);
		}
	}
	/* Atomic: a free to a per-CPU list reads it without the lock (pcp.c). */
	__atomic_store_n(&pb->mt, (uint8_t)new_mt, __ATOMIC_RELAXED);
}
