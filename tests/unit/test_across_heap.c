/*
 * test_across_heap.c - runs placed across pageblock boundaries in a heap
 * of more than 1 GiB (zone.c take_across(), extent.c
 * ucma_extent_find_across()).
 *
 * A run whose length neither a buddy block nor whole pageblocks hold
 * exactly (300 pages here) goes, when no hole holds it, across the
 * boundary between a pageblock in use that ends (or starts) with free
 * pages and a wholly free one next to it.  The search looks only at
 * pageblocks in use that have a wholly free neighbour, found 64 at a time
 * in the level bitmaps, so it finds such a place however many pageblocks
 * in use lie above it: here 535 pageblocks with free pages but no free
 * neighbour, more than the 512 a search once walked one by one before it
 * gave up and took a whole pageblock (with that walk, the three deep
 * cases fail).  The places chosen sit at a word boundary of the bitmaps:
 * pageblock 63 (the first word's last bit) is found as a candidate
 * through its free neighbour 64 in the next word, and pageblock 64 (the
 * second word's first bit) through its free neighbour 63 in the word
 * before; a third case crosses from 64 into 65.  First, a run goes from the top
 * pageblock in use into the one above it, which was never used
 * (deferred: wholly free, but in no level); that pageblock is then taken
 * whole, so that the deep cases find no free pageblock above them.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "pcp.h"
#include "tap.h"
#include "testutil.h"
#include "zones.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA (1280u << 20)
#define CMA   (16u << 20)
#define PB    UCMA_PAGEBLOCK_PAGES
#define FILL  600u	/* pageblocks taken from the zone's start */
#define KEEP  500u	/* pages each keeps: 12 free pages end each one */
#define RUN   300u	/* the packed run placed */

static struct ucma_arena *a;
static uint32_t heads[FILL];	/* heads[i]: the run in pageblock i of the zone */
static uint32_t cap = UCMA_PFN_NONE;	/* a run filling pageblock FILL */

static struct ucma_zone *normal(void) { return &a->zones[UCMA_ZONE_NORMAL]; }

/* First pfn of pageblock @i of the zone. */
static uint32_t pb_start(uint32_t i)
{
	return normal()->start_pfn + i * PB;
}

/* Fail the set-up unless pageblock @i of the zone is wholly free. */
static void need_free(uint32_t i)
{
	if (a->blocks[pb_start(i) >> UCMA_PAGEBLOCK_ORDER].nr_free != PB)
		bail_out("set-up: pageblock %u is not wholly free", i);
}

/* Allocate a run of RUN pages and check that it starts at @want; the check
 * says where it went, as "a run of RUN pages goes <@fmt...> (at pageblock
 * b + offset)".  Returns the run, or UCMA_PFN_NONE. */
__attribute__((format(printf, 2, 3))) static uint32_t place_run(uint32_t want, const char *fmt,
								 ...)
{
	uint32_t r = ucma_pages_alloc(a, RUN, UCMA_GFP_UNMOVABLE);
	int b = r == UCMA_PFN_NONE ? -1 : (int)((r - normal()->start_pfn) / PB);
	int off = r == UCMA_PFN_NONE ? -1 : (int)((r - normal()->start_pfn) % PB);
	char where[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(where, sizeof(where), fmt, ap);
	va_end(ap);
	ok(r == want, "a run of %u pages goes %s (at pageblock %d + %d)", RUN, where, b, off);
	return r;
}

/* Fill FILL pageblocks with whole-pageblock runs, each trimmed to its first
 * KEEP pages: all of them in use with a little room, none wholly free. */
static void fill(void)
{
	for (uint32_t i = 0; i < FILL; i++) {
		uint32_t r = ucma_pages_alloc(a, PB, UCMA_GFP_UNMOVABLE);

		if (r == UCMA_PFN_NONE)
			bail_out("set-up: pageblock %u: %s", i, strerror(errno));
		if (r != pb_start(i))
			bail_out("set-up: pageblock %u of the zone came at pfn %u, not %u", i, r,
				 pb_start(i));
		ucma_pages_trim(a, r, r, KEEP);
		heads[i] = r;
	}
	ucma_pcp_drain_zone(normal());
}

/* The pageblock above the filled ones was never used (deferred, in no
 * level): a run still goes across into it from the top one. */
static void test_into_deferred(void)
{
	uint32_t top = FILL - 1, r;

	if (!a->blocks[pb_start(FILL) >> UCMA_PAGEBLOCK_ORDER].deferred)
		bail_out("set-up: pageblock %u of the zone has been used", FILL);
	ucma_pages_trim(a, heads[top], heads[top], RUN);
	ucma_pcp_drain_zone(normal());
	r = place_run(pb_start(top) + RUN,
		      "across the end of pageblock %u into %u, never used before", top, FILL);
	ok(tu_zones_ok(a, "a run into a deferred pageblock"), "invariants hold");
	if (r != UCMA_PFN_NONE)
		ucma_pages_free(a, r);
	/* Back to KEEP pages, and the pageblock above taken whole, so that
	 * the deep tests below find no free pageblock above pageblock 65. */
	if (!ucma_pages_grow(a, heads[top], KEEP, false))
		bail_out("set-up: pageblock %u's run does not grow back", top);
	cap = ucma_pages_alloc(a, PB, UCMA_GFP_UNMOVABLE);
	if (cap != pb_start(FILL))
		bail_out("set-up: a pageblock's run went to %u, not %u", cap, pb_start(FILL));
	ucma_pcp_drain_zone(normal());
}

static void test_deep_tail(void)
{
	uint32_t r;

	/* pageblock 64 wholly free, 63 ends in 212 free pages */
	ucma_pages_free(a, heads[64]);
	heads[64] = UCMA_PFN_NONE;
	ucma_pages_trim(a, heads[63], heads[63], RUN);
	ucma_pcp_drain_zone(normal());
	need_free(64);
	ok(tu_zones_ok(a, "set-up"), "%u pageblocks in use, 64 free: invariants hold", FILL - 1);

	r = place_run(pb_start(63) + RUN,
		      "across the end of pageblock 63 into 64, below %u pageblocks in use with room",
		      FILL - 65);
	ok(r != UCMA_PFN_NONE && ucma_run_head(a, r + RUN - 1) == r &&
		   tu_zones_ok(a, "a deep run across"),
	   "its last page leads to its head; invariants hold");
	if (r != UCMA_PFN_NONE)
		ucma_pages_free(a, r);
	ucma_pcp_drain_zone(normal());
}

static void test_deep_head(void)
{
	uint32_t r, keep = pb_start(65) + 250;

	/* pageblock 65 starts with 250 free pages: more than the 212 that
	 * end pageblock 63, so the run goes the other way */
	ucma_pages_trim(a, heads[65], keep, KEEP - 250);
	heads[65] = keep;
	ucma_pcp_drain_zone(normal());
	need_free(64);

	r = place_run(keep - RUN, "across the start of pageblock 65, from the end of 64");
	ok(r != UCMA_PFN_NONE && tu_zones_ok(a, "a deep run across, downwards"),
	   "invariants hold");
	if (r != UCMA_PFN_NONE)
		ucma_pages_free(a, r);
}

/*
 * Pageblock 64 (bit 0 of the bitmaps' second word) starts with free pages
 * and pageblock 63 (bit 63 of the first) is wholly free: the candidate is
 * found only through the carry from the word below.  Pageblock 62 ends in
 * 12 free pages next to 63 too, a worse candidate.
 */
static void test_deep_head_carry(void)
{
	uint32_t r, keep = pb_start(64) + 250;

	heads[64] = ucma_pages_alloc(a, PB, UCMA_GFP_UNMOVABLE);
	if (heads[64] != pb_start(64))
		bail_out("set-up: a pageblock's run went to %u, not %u", heads[64], pb_start(64));
	ucma_pages_trim(a, heads[64], keep, PB - 250);
	heads[64] = keep;
	ucma_pages_free(a, heads[63]);
	heads[63] = UCMA_PFN_NONE;
	ucma_pcp_drain_zone(normal());
	need_free(63);

	r = place_run(keep - RUN,
		      "across the start of pageblock 64, from the end of 63, a word of the bitmaps "
		      "below");
	ok(r != UCMA_PFN_NONE && tu_zones_ok(a, "a deep run across two words, downwards"),
	   "invariants hold");
	if (r != UCMA_PFN_NONE)
		ucma_pages_free(a, r);
}

static void release(void)
{
	for (uint32_t i = 0; i < FILL; i++)
		if (heads[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, heads[i]);
	if (cap != UCMA_PFN_NONE)
		ucma_pages_free(a, cap);
	ucma_pcp_drain_zone(normal());
	bool whole = true;

	for (uint32_t i = 0; i <= FILL; i++)
		whole &= a->blocks[pb_start(i) >> UCMA_PAGEBLOCK_ORDER].nr_free == PB;
	ok(whole && tu_zones_ok(a, "all freed"), "all freed: every pageblock whole again");
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = ARENA,
		.cma_size = CMA,
		.hugepages = UCMA_BACKING_NONE,
		.hugepages_normal = UCMA_BACKING_NONE,
		/* The free counts are the buddy allocator's alone. */
		.cma_policy = UCMA_CMA_LEND_HANDLES,
	};

	/* The arena is reserved, never written: prefaulting it would make
	 * 1.25 GiB resident for nothing. */
	unsetenv("UCMA_POPULATE");
	plan_no_plan();
	if (ucma_init(&cfg) != 0) {
		if (errno == ENOMEM)
			skip_all("no room for an arena of %u MiB here: %s", ARENA >> 20,
				 strerror(errno));
		bail_out("ucma_init: %s", strerror(errno));
	}
	a = ucma_arena_get();
	if (normal()->managed_pages < FILL * PB)
		bail_out("set-up: the zone has %lu pages, fewer than %u",
			 (unsigned long)normal()->managed_pages, FILL * PB);
	fill();
	test_into_deferred();
	test_deep_tail();
	test_deep_head();
	test_deep_head_carry();
	release();
	return done();
}
