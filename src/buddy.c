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
 *    of the zone (ISOLATE lists included).
 *
 * Dirty tracking for decay: a free block whose pages may hold data (and
 * so cost the kernel memory) carries UCMA_PF_DIRTY and, in aux, the purge
 * epoch in which it was freed.  Merging ORs the flag and keeps the older
 * epoch; splitting copies both.  A block that is not dirty is known to be
 * zero-filled (never touched, or returned with MADV_DONTNEED).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

static inline struct ucma_page *pg(const struct ucma_zone *z, uint32_t pfn)
{
	return &z->arena->pages[pfn];
}

static inline int block_mt(const struct ucma_zone *z, uint32_t pfn)
{
	return z->arena->blocks[pfn >> UCMA_PAGEBLOCK_ORDER].mt;
}

/* Put a block at the front of its list and mark its head FREE. */
static void free_list_add(struct ucma_zone *z, uint32_t pfn, unsigned order, int mt,
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
	fa->nr_free[mt]++;
	z->free_pages += 1u << order;
	if (mt == UCMA_MT_ISOLATE)
		z->isolated_free_pages += 1u << order;
	z->arena->blocks[pfn >> UCMA_PAGEBLOCK_ORDER].nr_free += (uint16_t)(1u << order);
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
	fa->nr_free[mt]--;
	z->free_pages -= 1u << order;
	if (mt == UCMA_MT_ISOLATE)
		z->isolated_free_pages -= 1u << order;
	z->arena->blocks[pfn >> UCMA_PAGEBLOCK_ORDER].nr_free -= (uint16_t)(1u << order);
}

void ucma_buddy_init_zone(struct ucma_zone *z)
{
	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++) {
		for (int mt = 0; mt < UCMA_MT_NR; mt++) {
			z->free_area[o].head[mt] = UCMA_PFN_NONE;
			z->free_area[o].nr_free[mt] = 0;
		}
	}
	z->free_pages = 0;
	z->isolated_free_pages = 0;
	/* Add in descending address order so the lowest blocks are used first. */
	for (uint32_t pfn = z->end_pfn; pfn > z->start_pfn;) {
		pfn -= UCMA_PAGEBLOCK_PAGES;
		free_list_add(z, pfn, UCMA_MAX_ORDER, block_mt(z, pfn), 0, 0);
	}
}

bool ucma_page_is_free_head(const struct ucma_arena *a, uint32_t pfn)
{
	return a->pages[pfn].kind == UCMA_PK_FREE;
}

/* The free block holding @pfn, or UCMA_PFN_NONE if the page is not free. */
static uint32_t find_free_head(const struct ucma_zone *z, uint32_t pfn)
{
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
static uint32_t buddy_take(struct ucma_zone *z, unsigned order, int mt, bool *was_dirty)
{
	for (unsigned o = order; o < UCMA_NR_ORDERS; o++) {
		uint32_t pfn = z->free_area[o].head[mt];
		uint8_t flags;
		uint32_t epoch;

		if (pfn == UCMA_PFN_NONE)
			continue;
		flags = pg(z, pfn)->flags;
		epoch = pg(z, pfn)->aux;
		free_list_del(z, pfn, o, mt);
		expand(z, pfn, order, o, mt, flags, epoch);
		if (was_dirty)
			*was_dirty = flags & UCMA_PF_DIRTY;
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
 * __free_one_page()).  The block's pages are dirty as of the zone's epoch. */
static void free_block(struct ucma_zone *z, uint32_t pfn, unsigned order, uint8_t flags,
		       uint32_t epoch)
{
	int mt = block_mt(z, pfn);

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
	free_block(z, pfn, order, UCMA_PF_DIRTY, z->purge_epoch);
}

/* Free any page range: the largest aligned blocks that fit, in order. */
static void free_range(struct ucma_zone *z, uint32_t pfn, uint32_t npages, uint8_t flags,
		       uint32_t epoch)
{
	uint32_t end = pfn + npages;

	while (pfn < end) {
		unsigned order = pfn ? (unsigned)__builtin_ctz(pfn) : UCMA_MAX_ORDER;

		if (order > UCMA_MAX_ORDER)
			order = UCMA_MAX_ORDER;
		while ((1u << order) > end - pfn)
			order--;
		free_block(z, pfn, order, flags, epoch);
		pfn += 1u << order;
	}
}

void ucma_buddy_free_range(struct ucma_zone *z, uint32_t pfn, uint32_t npages)
{
	free_range(z, pfn, npages, UCMA_PF_DIRTY, z->purge_epoch);
}

/* Give back the pages of a taken block that the caller does not want. */
void ucma_buddy_free_clean_range(struct ucma_zone *z, uint32_t pfn, uint32_t npages, bool dirty)
{
	free_range(z, pfn, npages, dirty ? UCMA_PF_DIRTY : 0, z->purge_epoch);
}

/*
 * ucma_buddy_take_range() - take exactly the pages [start, end) off the
 * free lists, splitting the blocks at both ends.  All-or-nothing: returns
 * false, changing nothing, when any page of the range is not free.
 */
bool ucma_buddy_take_range(struct ucma_zone *z, uint32_t start, uint32_t end)
{
	uint32_t pfn;

	for (pfn = start; pfn < end;) {
		uint32_t h = find_free_head(z, pfn);

		if (h == UCMA_PFN_NONE)
			return false;
		pfn = h + (1u << pg(z, h)->order);
	}
	for (pfn = start; pfn < end;) {
		uint32_t h = find_free_head(z, pfn);
		unsigned order = pg(z, h)->order;
		uint32_t bend = h + (1u << order);
		uint8_t flags = pg(z, h)->flags;
		uint32_t epoch = pg(z, h)->aux;

		free_list_del(z, h, order, block_mt(z, h));
		if (h < start)
			free_range(z, h, start - h, flags, epoch);
		if (bend > end)
			free_range(z, end, bend - end, flags, epoch);
		pfn = bend;
	}
	return true;
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
