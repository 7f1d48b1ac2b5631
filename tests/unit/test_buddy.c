/*
 * test_buddy.c - the buddy allocator and the zone rules against a model.
 *
 * Randomised runs of page allocations and frees are checked against a
 * bitmap of the arena (no page handed out twice, every free page accounted
 * for), the zone invariants are verified with ucma_zone_check(), and after
 * everything is freed the zones must have merged back to whole pageblocks.
 * Then the rules: unmovable memory never in CMA, movable memory in CMA
 * first, isolation keeps allocations out, exact splitting, policy reserved.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "extent.h"
#include "pcp.h"
#include "tap.h"
#include "testutil.h"
#include "zones.h"

#include <errno.h>
#include <string.h>

#define ARENA (64u << 20)
#define CMA   (16u << 20)

struct run {
	uint32_t pfn, npages;
	bool movable;
};

static struct ucma_arena *a;
static unsigned char *owned;	/* model: 1 if the page is allocated */

static struct ucma_zone *normal(void) { return &a->zones[UCMA_ZONE_NORMAL]; }
static struct ucma_zone *cma(void) { return &a->zones[UCMA_ZONE_CMA]; }



static bool mark(struct run *r, unsigned char v)
{
	for (uint32_t i = 0; i < r->npages; i++) {
		if (owned[r->pfn + i] == v)
			return false;	/* handed out twice, or freed twice */
		owned[r->pfn + i] = v;
	}
	return true;
}

static uint64_t model_free_pages(void)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < a->npages; i++)
		n += !owned[i];
	return n;
}

static void test_random(void)
{
	enum { MAXRUNS = 4000, STEPS = 20000 };
	static struct run runs[MAXRUNS];
	uint64_t seed = 0x5eed;
	int nruns = 0, overlaps = 0, rule_breaks = 0, checks_ok = 1;
	uint64_t fails = 0;

	for (int step = 0; step < STEPS; step++) {
		uint64_t r = tu_rand(&seed);

		if (nruns < MAXRUNS && (r % 100 < 55 || nruns == 0)) {
			struct run *x = &runs[nruns];
			uint64_t sz = tu_rand(&seed);

			/* Mostly small runs, some large, a few multi-pageblock. */
			if (sz % 100 < 80)
				x->npages = 1 + (uint32_t)(sz >> 8) % 16;
			else if (sz % 100 < 97)
				x->npages = 1 + (uint32_t)(sz >> 8) % 512;
			else
				x->npages = 513 + (uint32_t)(sz >> 8) % 1200;
			x->movable = (r >> 32) & 1;
			x->pfn = ucma_pages_alloc(a, x->npages,
						  x->movable ? UCMA_GFP_MOVABLE : UCMA_GFP_UNMOVABLE);
			if (x->pfn == UCMA_PFN_NONE) {
				fails++;
				continue;
			}
			if (!mark(x, 1))
				overlaps++;
			if (!x->movable && ucma_pfn_zone(a, x->pfn)->id != UCMA_ZONE_NORMAL)
				rule_breaks++;
			if (a->pages[x->pfn].kind != UCMA_PK_RUN || a->pages[x->pfn].aux != x->npages)
				rule_breaks++;
			nruns++;
		} else {
			int i = (int)((r >> 16) % (uint64_t)nruns);

			if (!mark(&runs[i], 0))
				overlaps++;
			ucma_pages_free(a, runs[i].pfn);
			runs[i] = runs[--nruns];
		}
		if (step % 2000 == 0) {
			checks_ok &= tu_zones_ok(a, "random step");
			checks_ok &= model_free_pages() == tu_zone_free(normal()) + tu_zone_free(cma());
		}
	}
	ok(overlaps == 0, "no page handed out twice in %d steps", STEPS);
	ok(rule_breaks == 0, "unmovable runs only in NORMAL, run heads exact");
	ok(checks_ok, "zone invariants and model free count hold during the run");
	diag("allocation failures (arena full): %llu", (unsigned long long)fails);
	while (nruns > 0) {
		mark(&runs[nruns - 1], 0);
		ucma_pages_free(a, runs[--nruns].pfn);
	}
	ok(tu_zones_ok(a, "after freeing all"), "invariants hold after freeing everything");
	ok(tu_zone_free(normal()) == normal()->managed_pages && tu_zone_free(cma()) == cma()->managed_pages,
	   "every page is free again");
	/* The runs left on per-CPU lists merge once drained. */
	ucma_pcp_drain_zone(normal());
	ucma_pcp_drain_zone(cma());
	ok(normal()->free_pages == normal()->managed_pages &&
		   cma()->free_pages == cma()->managed_pages && tu_zones_ok(a, "after the drain"),
	   "every page is on the buddy lists after a drain");
	{
		uint64_t counts[UCMA_NR_ORDERS];
		uint64_t blocks = 0;

		ucma_zone_free_counts(normal(), counts);
		blocks += counts[UCMA_MAX_ORDER];
		ucma_zone_free_counts(cma(), counts);
		blocks += counts[UCMA_MAX_ORDER];
		ok(blocks == a->nr_pageblocks, "merged back to %llu whole pageblocks of %u",
		   (unsigned long long)blocks, a->nr_pageblocks);
	}
}

static void test_exact_split(void)
{
	uint64_t before = tu_zone_free(normal());
	uint32_t pfn = ucma_pages_alloc(a, 768, UCMA_GFP_UNMOVABLE);	/* 3 MiB */
	uint32_t p5;

	ok(pfn != UCMA_PFN_NONE, "3 MiB unmovable run allocated");
	ok(before - tu_zone_free(normal()) == 768, "3 MiB consumed exactly 768 pages (took %llu)",
	   (unsigned long long)(before - tu_zone_free(normal())));
	ok(ucma_run_head(a, pfn + 700) == pfn && ucma_run_head(a, pfn) == pfn,
	   "tail pages lead to the head");
	before = tu_zone_free(normal());
	p5 = ucma_pages_alloc(a, 5, UCMA_GFP_UNMOVABLE);
	ok(p5 != UCMA_PFN_NONE && before - tu_zone_free(normal()) == 5,
	   "5 pages consume exactly 5 pages");
	ucma_pages_free(a, p5);
	ucma_pages_free(a, pfn);
	ok(tu_zones_ok(a, "exact split"), "invariants hold after exact splits");
}

/*
 * Unmovable runs of 17-511 pages that are no power of two are packed
 * (zone.c take_hole(), take_across()): 257 pages (a malloc of 1 MiB + 57
 * bytes) at the start of a free pageblock, then the next 257 across its
 * end into the free pageblock after it, which turns UNMOVABLE, then a
 * third in the hole that leaves.  A crossing run trims to a shorter run
 * that still crosses, and everything merges back to whole pageblocks.
 * A run does not cross into a never-used pageblock while one that holds
 * data is free.  Movable runs of the same length never cross a boundary.
 */
static void test_across(void)
{
	enum { N = 257 };
	uint32_t r1, r2, r3, m[2], next;
	bool crossed, movable_inside = true;

	ucma_pcp_drain_zone(normal());
	r1 = ucma_pages_alloc(a, N, UCMA_GFP_UNMOVABLE);
	r2 = ucma_pages_alloc(a, N, UCMA_GFP_UNMOVABLE);
	r3 = ucma_pages_alloc(a, N, UCMA_GFP_UNMOVABLE);
	if (r1 == UCMA_PFN_NONE || r2 == UCMA_PFN_NONE || r3 == UCMA_PFN_NONE)
		bail_out("set-up: three runs of %d pages: %s", N, strerror(errno));
	next = UCMA_ALIGN_UP(r2, UCMA_PAGEBLOCK_PAGES);
	crossed = r2 < next && r2 + N > next;
	ok(r1 % UCMA_PAGEBLOCK_PAGES == 0 && r2 == r1 + N && crossed,
	   "257 pages at a pageblock's start (%u), the next 257 right after, across its end "
	   "(%u)", r1 % UCMA_PAGEBLOCK_PAGES, r2 - r1);
	ok(a->blocks[next >> UCMA_PAGEBLOCK_ORDER].mt == UCMA_MT_UNMOVABLE,
	   "the pageblock it reached into is UNMOVABLE");
	ok(r3 == r2 + N, "the third in the hole after it (%d pages on)", (int)(r3 - r2));
	ok(ucma_run_head(a, next) == r2 && ucma_run_head(a, r2 + N - 1) == r2,
	   "its pages in the next pageblock lead to its head");
	ok(tu_zones_ok(a, "runs across a boundary"), "invariants hold with a run across a boundary");
	ucma_pages_trim(a, r2, r2 + 1, N - 2);
	ok(a->pages[r2 + 1].kind == UCMA_PK_RUN && a->pages[r2 + 1].aux == N - 2 &&
		   tu_zones_ok(a, "a crossing run trimmed"),
	   "trimmed to %d pages, still across the boundary: invariants hold", N - 2);
	ucma_pages_free(a, r1);
	ucma_pages_free(a, r2 + 1);
	ucma_pages_free(a, r3);
	ok(a->blocks[r1 >> UCMA_PAGEBLOCK_ORDER].nr_free == UCMA_PAGEBLOCK_PAGES &&
		   a->blocks[next >> UCMA_PAGEBLOCK_ORDER].nr_free == UCMA_PAGEBLOCK_PAGES &&
		   tu_zones_ok(a, "runs across a boundary freed"),
	   "freed, both pageblocks are wholly free again");
	/*
	 * Both now hold data (dirty), the second freed last, first on its
	 * list: the next run takes its start, and the one after does not
	 * cross into the never-used pageblock above it while the other
	 * resident one is free: it takes that.
	 */
	r1 = ucma_pages_alloc(a, N, UCMA_GFP_UNMOVABLE);
	r2 = ucma_pages_alloc(a, N, UCMA_GFP_UNMOVABLE);
	ok(r1 == next && r2 == next - UCMA_PAGEBLOCK_PAGES,
	   "with resident free pageblocks, no run crosses into a fresh one (%d, %d pageblocks "
	   "from the first)", ((int)r1 - (int)next) / (int)UCMA_PAGEBLOCK_PAGES,
	   ((int)r2 - (int)next) / (int)UCMA_PAGEBLOCK_PAGES);
	ucma_pages_free(a, r1);
	ucma_pages_free(a, r2);
	ok(tu_zones_ok(a, "resident pageblocks first"), "invariants hold");
	for (int i = 0; i < 2; i++) {
		m[i] = ucma_pages_alloc(a, N, UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA);
		if (m[i] == UCMA_PFN_NONE)
			bail_out("set-up: a movable run of %d pages: %s", N, strerror(errno));
		movable_inside &= (m[i] >> UCMA_PAGEBLOCK_ORDER) ==
				  ((m[i] + N - 1) >> UCMA_PAGEBLOCK_ORDER);
	}
	ok(movable_inside, "movable runs of 257 pages stay inside their pageblocks (%u, %u)",
	   m[0] % UCMA_PAGEBLOCK_PAGES, m[1] % UCMA_PAGEBLOCK_PAGES);
	ucma_pages_free(a, m[0]);
	ucma_pages_free(a, m[1]);
}

/*
 * Crossing a boundary may take a free MOVABLE pageblock for an unmovable
 * run only when no UNMOVABLE pageblock is free, as rmqueue() steals one
 * only then.  On the fresh arena: two pageblocks taken whole (stolen,
 * UNMOVABLE) and given back unused (clean), a run of 257 pages at the
 * start of the one freed last; the next does not cross into the MOVABLE
 * pageblock above it but takes the other free UNMOVABLE one.
 */
static void test_across_steal(void)
{
	enum { N = 257 };
	uint32_t x[2], r1, r2, above;

	for (int i = 0; i < 2; i++) {
		x[i] = ucma_pages_alloc(a, UCMA_PAGEBLOCK_PAGES, UCMA_GFP_UNMOVABLE);
		if (x[i] == UCMA_PFN_NONE)
			bail_out("set-up: a pageblock: %s", strerror(errno));
	}
	ucma_pages_free_unused(a, x[0]);
	ucma_pages_free_unused(a, x[1]);
	r1 = ucma_pages_alloc(a, N, UCMA_GFP_UNMOVABLE);
	above = (r1 >> UCMA_PAGEBLOCK_ORDER) + 1;
	if (r1 == UCMA_PFN_NONE || a->blocks[above].mt != UCMA_MT_MOVABLE ||
	    a->blocks[above].nr_free != UCMA_PAGEBLOCK_PAGES)
		bail_out("set-up: a run below a free MOVABLE pageblock");
	r2 = ucma_pages_alloc(a, N, UCMA_GFP_UNMOVABLE);
	ok(r2 != UCMA_PFN_NONE && (r2 >> UCMA_PAGEBLOCK_ORDER) + 1 != above &&
		   a->blocks[above].mt == UCMA_MT_MOVABLE,
	   "with an UNMOVABLE pageblock free, no run crosses into a MOVABLE one (pageblock %u "
	   "is %s)", above, a->blocks[above].mt == UCMA_MT_MOVABLE ? "MOVABLE" : "taken");
	ucma_pages_free(a, r1);
	ucma_pages_free(a, r2);
	ok(tu_zones_ok(a, "steal rule"), "invariants hold");
}

/*
 * A run of whole pageblocks takes the lowest free ones, MOVABLE or
 * UNMOVABLE, and those of the other type join its own: each such change
 * counts in pageblock_steal, as a steal by rmqueue() does.  A movable run
 * turns the lowest free UNMOVABLE pageblocks MOVABLE, then an unmovable
 * one turns them back.
 */
static void steal_count(unsigned gfp, int mt, const char *what)
{
	enum { N = 2 * UCMA_PAGEBLOCK_PAGES };
	uint32_t first = normal()->start_pfn >> UCMA_PAGEBLOCK_ORDER;
	uint32_t last = normal()->end_pfn >> UCMA_PAGEBLOCK_ORDER, r, other = 0;
	uint8_t *was = calloc(last, 1);
	uint64_t before = ucma_vmstat_read(UCMA_STAT_PAGEBLOCK_STEAL), after;

	if (!was)
		bail_out("set-up: out of memory");
	for (uint32_t b = first; b < last; b++)
		was[b] = a->blocks[b].mt;
	r = ucma_pages_alloc(a, N, gfp);
	if (r == UCMA_PFN_NONE || r < normal()->start_pfn || r >= normal()->end_pfn)
		bail_out("set-up: %s run of %d pages in NORMAL: %s", what, N, strerror(errno));
	for (uint32_t b = r >> UCMA_PAGEBLOCK_ORDER; b < (r + N) >> UCMA_PAGEBLOCK_ORDER; b++)
		other += was[b] != mt;
	after = ucma_vmstat_read(UCMA_STAT_PAGEBLOCK_STEAL);
	ok(other > 0 && after - before == other,
	   "%s run of two whole pageblocks, %u of them of another type before: "
	   "pageblock_steal counts %u", what, other, (unsigned)(after - before));
	ucma_pages_free(a, r);
	free(was);
}

/* A run grown in place into a free pageblock of the other type turns it
 * too (ucma_pages_grow()). */
static void grow_steal_count(void)
{
	enum { PB = UCMA_PAGEBLOCK_PAGES };
	uint32_t r = ucma_pages_alloc(a, 2 * PB, UCMA_GFP_UNMOVABLE), m, next;
	uint64_t before, steals;
	bool grown;

	if (r == UCMA_PFN_NONE)
		bail_out("set-up: a run of two pageblocks: %s", strerror(errno));
	ucma_pages_trim(a, r, r, PB);
	/* the pageblock given back is the lowest free one: a movable run of
	 * two takes it and the next, which turns them MOVABLE */
	m = ucma_pages_alloc(a, 2 * PB, UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA);
	next = r + PB;
	if (m != next)
		bail_out("set-up: the movable run went to %u, not %u", m, next);
	ucma_pages_free(a, m);
	if (a->blocks[next >> UCMA_PAGEBLOCK_ORDER].mt != UCMA_MT_MOVABLE ||
	    a->blocks[next >> UCMA_PAGEBLOCK_ORDER].nr_free != PB)
		bail_out("set-up: pageblock %u is not free and MOVABLE", next >> UCMA_PAGEBLOCK_ORDER);
	before = ucma_vmstat_read(UCMA_STAT_PAGEBLOCK_STEAL);
	grown = ucma_pages_grow(a, r, 2 * PB, false);
	steals = ucma_vmstat_read(UCMA_STAT_PAGEBLOCK_STEAL) - before;
	ok(grown && a->blocks[next >> UCMA_PAGEBLOCK_ORDER].mt == UCMA_MT_UNMOVABLE && steals == 1,
	   "an unmovable run grown into a free MOVABLE pageblock turns it: pageblock_steal counts "
	   "%u", (unsigned)steals);
	ucma_pages_free(a, r);
}

static void test_steal_count(void)
{
	ucma_pcp_drain_zone(normal());
	steal_count(UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA, UCMA_MT_MOVABLE, "a movable");
	steal_count(UCMA_GFP_UNMOVABLE, UCMA_MT_UNMOVABLE, "an unmovable");
	grow_steal_count();
	ok(tu_zones_ok(a, "steals counted"), "invariants hold");
}

/*
 * Runs longer than a pageblock whose length is no multiple of one are
 * packed too: 513 pages (a malloc of 2 MiB + 57 bytes) take a whole
 * pageblock and one page of the next, and the next 513 go across, from
 * the 511 free pages ending that one through the start of the one after,
 * instead of a pageblock and a page of their own.  A trimmed crossing run
 * that still spans three pageblocks keeps the invariants, and everything
 * merges back.  Runs that are whole pageblocks still start on one.
 */
static void test_across_long(void)
{
	enum { N = 513 };
	uint32_t r[3], whole;
	bool packed = true;

	ucma_pcp_drain_zone(normal());
	for (int i = 0; i < 3; i++) {
		r[i] = ucma_pages_alloc(a, N, UCMA_GFP_UNMOVABLE);
		if (r[i] == UCMA_PFN_NONE)
			bail_out("set-up: three runs of %d pages: %s", N, strerror(errno));
		packed &= i == 0 || r[i] == r[i - 1] + N;
	}
	ok(packed && (r[1] & (UCMA_PAGEBLOCK_PAGES - 1)) != 0,
	   "three runs of 513 pages back to back (%u, %u, %u pages on), the second starting "
	   "inside a pageblock", 0, r[1] - r[0], r[2] - r[0]);
	ok(ucma_run_head(a, r[1] + N - 1) == r[1] && tu_zones_ok(a, "long runs across"),
	   "its last page leads to its head; invariants hold");
	whole = ucma_pages_alloc(a, 2 * UCMA_PAGEBLOCK_PAGES, UCMA_GFP_UNMOVABLE);
	ok(whole != UCMA_PFN_NONE && (whole & (UCMA_PAGEBLOCK_PAGES - 1)) == 0,
	   "a run of two whole pageblocks still starts on one");
	ucma_pages_trim(a, r[1], r[1] + 1, N - 2);
	ok(a->pages[r[1] + 1].aux == N - 2 && tu_zones_ok(a, "a long crossing run trimmed"),
	   "trimmed to %d pages, still across a boundary: invariants hold", N - 2);
	ucma_pages_free(a, whole);
	ucma_pages_free(a, r[0]);
	ucma_pages_free(a, r[1] + 1);
	ucma_pages_free(a, r[2]);
	/* A run across a boundary grows in place inside the pageblock it
	 * reached into, past a pageblock's length: still one run. */
	r[0] = ucma_pages_alloc(a, 257, UCMA_GFP_UNMOVABLE);
	r[1] = ucma_pages_alloc(a, 257, UCMA_GFP_UNMOVABLE);
	if (r[0] == UCMA_PFN_NONE || r[1] == UCMA_PFN_NONE)
		bail_out("set-up: two runs of 257 pages: %s", strerror(errno));
	if ((r[1] >> UCMA_PAGEBLOCK_ORDER) == ((r[1] + 256) >> UCMA_PAGEBLOCK_ORDER)) {
		skip(1, "the second run of 257 pages did not cross a boundary here");
	} else {
		uint32_t room = UCMA_ALIGN_UP(r[1], UCMA_PAGEBLOCK_PAGES) + UCMA_PAGEBLOCK_PAGES -
				r[1];

		ok(room > UCMA_PAGEBLOCK_PAGES && ucma_pages_grow(a, r[1], room, false) &&
			   a->pages[r[1]].aux == room && tu_zones_ok(a, "grown across"),
		   "a run across a boundary grows to %u pages, to the end of the pageblock it "
		   "reached into: invariants hold", room);
		bool next_free = (r[1] + room) < normal()->end_pfn &&
				 a->blocks[(r[1] + room) >> UCMA_PAGEBLOCK_ORDER].nr_free ==
					 UCMA_PAGEBLOCK_PAGES;

		ok(ucma_pages_grow(a, r[1], room + 1, false) == next_free &&
			   tu_zones_ok(a, "grown across two boundaries"),
		   "and on into the pageblock after that when it is free (it is %s): invariants "
		   "hold", next_free ? "free" : "not");
	}
	ucma_pages_free(a, r[0]);
	ucma_pages_free(a, r[1]);
	ok(tu_zones_ok(a, "long runs freed") &&
		   a->blocks[(r[2] + N - 1) >> UCMA_PAGEBLOCK_ORDER].nr_free == UCMA_PAGEBLOCK_PAGES &&
		   a->blocks[r[0] >> UCMA_PAGEBLOCK_ORDER].nr_free == UCMA_PAGEBLOCK_PAGES,
	   "freed, the pageblocks are wholly free again");
}

/*
 * UCMA_GFP_RESIDENT: a clean order-3 block first on its list and a dirty
 * order-4 block first on its own.  A plain take of order 3 gets the clean
 * block; a resident one splits the dirty block instead (its pages are
 * resident already), leaving its dirty half first on the order-3 list.
 */
static void test_resident(void)
{
	struct ucma_zone *z = normal();
	const int mt = UCMA_MT_MOVABLE;
	uint32_t clean, clean_buddy, dirty, dirty_buddy, r;

	ucma_pcp_drain_zone(z);
	pthread_mutex_lock(&z->lock);
	clean = ucma_buddy_take(z, 3, mt);
	clean_buddy = ucma_buddy_take(z, 3, mt);
	dirty = ucma_buddy_take(z, 4, mt);
	dirty_buddy = ucma_buddy_take(z, 4, mt);
	/* Each stays a block of its own once freed: its buddy is taken. */
	if (clean_buddy != (clean ^ 8) ||
	    ((dirty ^ 16) != dirty_buddy && (dirty ^ 16) != (clean & ~15u))) {
		pthread_mutex_unlock(&z->lock);
		bail_out("set-up: blocks %u, %u, %u and %u: a buddy is free", clean, clean_buddy,
			 dirty, dirty_buddy);
	}
	ucma_buddy_free_clean_range(z, dirty, 16, true);
	ucma_buddy_free_clean_range(z, clean, 8, false);
	r = ucma_buddy_take(z, 3, mt);
	ok(r == clean, "a plain take of order 3 gets the clean block %u first on its list (%u)",
	   clean, r);
	ucma_buddy_free_clean_range(z, r, 8, false);
	r = ucma_buddy_take_resident(z, 3, mt);
	ok(r == dirty, "a resident take splits the dirty order-4 block %u instead (%u)", dirty, r);
	ok(z->free_area[3].head[mt] == dirty + 8 && (a->pages[dirty + 8].flags & UCMA_PF_DIRTY),
	   "its other half, dirty, is first on the order-3 list");
	ucma_buddy_free_clean_range(z, r, 8, true);
	ucma_buddy_free_clean_range(z, clean_buddy, 8, true);
	ucma_buddy_free_clean_range(z, dirty_buddy, 16, true);
	pthread_mutex_unlock(&z->lock);
	ok(tu_zones_ok(a, "resident"), "invariants hold after resident takes");
}

/* A whole pageblock of the NORMAL zone taken as single pages, one by one,
 * into @page; returns its first page. */
static uint32_t pageblock_of_single_pages(uint32_t *page)
{
	const unsigned gfp = UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA;
	uint32_t pb = ucma_pages_alloc(a, UCMA_PAGEBLOCK_PAGES, gfp), end;
	unsigned n = 0;

	if (pb == UCMA_PFN_NONE)
		bail_out("set-up: a whole pageblock: %s", strerror(errno));
	end = pb + UCMA_PAGEBLOCK_PAGES;
	ucma_pages_free(a, pb);
	ucma_pcp_drain_zone(normal());
	while (n < UCMA_PAGEBLOCK_PAGES &&
	       (page[n] = ucma_pages_alloc_in(a, 1, gfp, pb, end)) != UCMA_PFN_NONE)
		n++;
	if (n != UCMA_PAGEBLOCK_PAGES)
		bail_out("set-up: %u single pages of pageblock %u", n, pb);
	return pb;
}

/*
 * The search for a free extent (ucma_pages_alloc_in()) notes a pageblock's
 * free extents and passes the pageblock while its longest is too short;
 * a free into it must make it look again.  One pageblock filled with
 * single pages, every other one freed: no room for 2 pages.  Then the
 * page between two holes is freed and a hole elsewhere filled (as many
 * free pages as before): 3 pages now fit, and the search must find them.
 */
static void test_extent_note(void)
{
	const unsigned gfp = UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA;
	static uint32_t page[UCMA_PAGEBLOCK_PAGES];
	uint32_t pb, got, filler;

	pb = pageblock_of_single_pages(page);
	/* Free the pages at even offsets from the pageblock's start. */
	for (unsigned i = 0; i < UCMA_PAGEBLOCK_PAGES; i++)
		if (!((page[i] - pb) & 1))
			ucma_pages_free(a, page[i]);
	ucma_pcp_drain_zone(normal());
	got = ucma_pages_alloc_in(a, 2, gfp, pb, pb + UCMA_PAGEBLOCK_PAGES);
	ok(got == UCMA_PFN_NONE, "a pageblock of single free pages has no room for 2 (%u)", got);
	for (unsigned i = 0; i < UCMA_PAGEBLOCK_PAGES; i++)
		if (page[i] == pb + 101)
			ucma_pages_free(a, page[i]);	/* 100, 101, 102 free */
	ucma_pcp_drain_zone(normal());
	filler = ucma_pages_alloc_in(a, 1, gfp, pb + 200, pb + 201);
	got = ucma_pages_alloc_in(a, 3, gfp, pb, pb + UCMA_PAGEBLOCK_PAGES);
	ok(filler == pb + 200 && got == pb + 100,
	   "after a free next to two holes (and a hole filled), 3 pages fit there: %u", got);
	if (got != UCMA_PFN_NONE)
		ucma_pages_free(a, got);
	if (filler != UCMA_PFN_NONE)
		ucma_pages_free(a, filler);
	for (unsigned i = 0; i < UCMA_PAGEBLOCK_PAGES; i++)
		if ((page[i] - pb) & 1 && page[i] != pb + 101)
			ucma_pages_free(a, page[i]);
	ucma_pcp_drain_zone(normal());
	ok(tu_zones_ok(a, "extent note"), "invariants hold after it");
}

/*
 * A note lists extents of two pages or more: a take of the last such
 * extent of a pageblock that keeps single free pages must keep the
 * pageblock's level bit (ucma_zone_check() finds a free extent above its
 * level otherwise).  Holes at 10 (one page) and 20-21 (two), the two taken.
 */
static void test_extent_levels_single(void)
{
	const unsigned gfp = UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA;
	static uint32_t page[UCMA_PAGEBLOCK_PAGES];
	uint32_t pb, got, b;

	pb = pageblock_of_single_pages(page);
	b = pb >> UCMA_PAGEBLOCK_ORDER;
	for (unsigned i = 0; i < UCMA_PAGEBLOCK_PAGES; i++)
		if (page[i] - pb == 10 || page[i] - pb == 20 || page[i] - pb == 21) {
			ucma_pages_free(a, page[i]);
			page[i] = UCMA_PFN_NONE;
		}
	ucma_pcp_drain_zone(normal());
	ok(tu_zones_ok(a, "holes of 1 and 2 pages"), "invariants hold with holes of 1 and 2 pages");
	got = ucma_pages_alloc_in(a, 2, gfp, pb, pb + UCMA_PAGEBLOCK_PAGES);
	ok(got == pb + 20 && a->blocks[b].nr_free == 1 && a->blocks[b].levels == 1,
	   "2 pages taken from the 2-page hole (offset %d): 1 page left free, level bit kept "
	   "(levels %u)", got == UCMA_PFN_NONE ? -1 : (int)(got - pb), a->blocks[b].levels);
	ok(tu_zones_ok(a, "after the 2-page hole is taken"),
	   "invariants hold after it (a 1-page hole is left)");
	if (got != UCMA_PFN_NONE)
		ucma_pages_free(a, got);
	for (unsigned i = 0; i < UCMA_PAGEBLOCK_PAGES; i++)
		if (page[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, page[i]);
	ucma_pcp_drain_zone(normal());
	ok(tu_zones_ok(a, "levels, single pages"), "and after the pageblock is freed");
}

/* Free the pages of @page[] (one per page of the pageblock at @pb, in any
 * order) whose offsets lie in [from, to). */
static void free_offsets(uint32_t *page, uint32_t pb, uint32_t from, uint32_t to)
{
	for (unsigned i = 0; i < UCMA_PAGEBLOCK_PAGES; i++)
		if (page[i] != UCMA_PFN_NONE && page[i] - pb >= from && page[i] - pb < to) {
			ucma_pages_free(a, page[i]);
			page[i] = UCMA_PFN_NONE;
		}
	ucma_pcp_drain_zone(normal());
}

/*
 * A level of pageblocks with room ends at a power of two (extent.h): a
 * pageblock whose hole is 256 pages is in the level of 129-256, so a
 * search for 257 pages (a run of 1 MiB + 57 bytes, which never fits such
 * a hole) passes it by its bit without looking at it, and searches for
 * 256 and 129 pages still find the hole.  (With levels of 256-511, the
 * search for 257 looked at every such pageblock.)
 */
static void test_extent_levels_power(void)
{
	static uint32_t page[UCMA_PAGEBLOCK_PAGES];
	struct ucma_zone *z = normal();
	uint32_t pb, end, b, got[3];
	uint64_t looked[3];
	int mt;

	pb = pageblock_of_single_pages(page);
	end = pb + UCMA_PAGEBLOCK_PAGES;
	b = pb >> UCMA_PAGEBLOCK_ORDER;
	free_offsets(page, pb, 0, 256);
	mt = a->blocks[b].mt;
	ok(a->blocks[b].nr_free == 256 && a->blocks[b].levels == 9,
	   "a hole of 256 pages: level 8, up to 256 pages (levels %u)", a->blocks[b].levels);
	pthread_mutex_lock(&z->lock);
	for (unsigned i = 0; i < 3; i++) {
		static const uint32_t npages[3] = { 257, 256, 129 };
		uint64_t before = z->extent_looked;

		got[i] = ucma_extent_find(z, npages[i], mt, pb, end);
		looked[i] = z->extent_looked - before;
	}
	pthread_mutex_unlock(&z->lock);
	ok(got[0] == UCMA_PFN_NONE && looked[0] == 0,
	   "257 pages: no room, and the pageblock not looked at (%d, looked at %llu)",
	   got[0] == UCMA_PFN_NONE ? -1 : (int)(got[0] - pb), (unsigned long long)looked[0]);
	ok(got[1] == pb && looked[1] == 1, "256 pages: the hole, one look (%d, %llu)",
	   got[1] == UCMA_PFN_NONE ? -1 : (int)(got[1] - pb), (unsigned long long)looked[1]);
	ok(got[2] == pb && looked[2] == 1, "129 pages: the hole, one look (%d, %llu)",
	   got[2] == UCMA_PFN_NONE ? -1 : (int)(got[2] - pb), (unsigned long long)looked[2]);
	free_offsets(page, pb, 0, UCMA_PAGEBLOCK_PAGES);
	ok(tu_zones_ok(a, "levels, power of two"), "invariants hold after it");
}

/*
 * The notes are read instead of the page metadata (extent.c): one walk of
 * a pageblock serves the searches after it, by best fit, as the search's
 * own takes are written into the note; pages taken by another path make
 * the note wrong, and a result read from it is checked before it is given
 * out; a free makes the search walk again.  Holes of 5, 3, 8 and 2 pages
 * in a pageblock of single pages.
 */
static void test_extent_cache(void)
{
	const unsigned gfp = UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA;
	static uint32_t page[UCMA_PAGEBLOCK_PAGES];
	struct ucma_zone *z = normal();
	uint32_t pb, end, got[4], one, again;
	uint64_t walks, stale;

	pb = pageblock_of_single_pages(page);
	end = pb + UCMA_PAGEBLOCK_PAGES;
	free_offsets(page, pb, 10, 15);
	free_offsets(page, pb, 40, 43);
	free_offsets(page, pb, 100, 108);
	free_offsets(page, pb, 200, 202);

	walks = z->extent_walks;
	got[0] = ucma_pages_alloc_in(a, 3, gfp, pb, end);
	got[1] = ucma_pages_alloc_in(a, 4, gfp, pb, end);
	got[2] = ucma_pages_alloc_in(a, 2, gfp, pb, end);
	got[3] = ucma_pages_alloc_in(a, 2, gfp, pb, end);
	ok(got[0] == pb + 40 && got[1] == pb + 10 && got[2] == pb + 200 && got[3] == pb + 100,
	   "best fit from the note: 3 in the hole of 3, 4 in that of 5, 2 in that of 2, 2 in "
	   "that of 8 (offsets %d %d %d %d)", (int)(got[0] - pb), (int)(got[1] - pb),
	   (int)(got[2] - pb), (int)(got[3] - pb));
	ok(z->extent_walks - walks == 1, "one walk of the pageblock for four searches (%llu)",
	   (unsigned long long)(z->extent_walks - walks));

	/* Page 104 taken as a single page: the note still says 102..108. */
	one = ucma_pages_alloc_in(a, 1, gfp, pb + 104, pb + 105);
	stale = z->extent_stale;
	again = ucma_pages_alloc_in(a, 5, gfp, pb, end);
	ok(one == pb + 104 && again == UCMA_PFN_NONE && z->extent_stale - stale == 1,
	   "a note made wrong by a take elsewhere is caught: no room for 5 (%d), 1 stale note",
	   again == UCMA_PFN_NONE ? -1 : (int)(again - pb));
	if (again != UCMA_PFN_NONE)
		ucma_pages_free(a, again);
	if (one != UCMA_PFN_NONE)
		ucma_pages_free(a, one);
	ucma_pcp_drain_zone(z);
	walks = z->extent_walks;
	again = ucma_pages_alloc_in(a, 6, gfp, pb, end);
	ok(again == pb + 102 && z->extent_walks - walks == 1,
	   "after the page is freed, the search walks again and 6 fit at 102 (%d)",
	   again == UCMA_PFN_NONE ? -1 : (int)(again - pb));
	if (again != UCMA_PFN_NONE)
		ucma_pages_free(a, again);
	for (unsigned i = 0; i < 4; i++)
		if (got[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, got[i]);
	free_offsets(page, pb, 0, UCMA_PAGEBLOCK_PAGES);
	ok(tu_zones_ok(a, "extent cache"), "invariants hold after it");
}

/* Set the free count of pageblock @b of @z, as if that many frees had
 * come. */
static void set_free_seq(struct ucma_zone *z, struct ucma_pageblock *b, uint32_t v)
{
	pthread_mutex_lock(&z->lock);
	b->free_seq = v;
	pthread_mutex_unlock(&z->lock);
}

/*
 * A note holds while the pageblock's 32-bit count of frees is what it was
 * when the note was written.  After 2^32 frees the count comes round
 * again: the note must not hold then.  The count is set by hand around
 * one real free that wraps it (2^32 frees would take minutes).
 */
static void test_extent_seq_wrap(void)
{
	const unsigned gfp = UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA;
	static uint32_t page[UCMA_PAGEBLOCK_PAGES];
	struct ucma_zone *z = normal();
	struct ucma_pageblock *b;
	uint32_t pb, end, got, none;

	pb = pageblock_of_single_pages(page);
	end = pb + UCMA_PAGEBLOCK_PAGES;
	b = &a->blocks[pb >> UCMA_PAGEBLOCK_ORDER];
	free_offsets(page, pb, 10, 15);
	free_offsets(page, pb, 100, 102);

	/* A note written at count 5: extents of 5 and 2 pages, no room for 6
	 * (7 free pages, so the search reads the pageblock). */
	pthread_mutex_lock(&z->lock);
	a->extents[pb >> UCMA_PAGEBLOCK_ORDER].seq = 0;
	pthread_mutex_unlock(&z->lock);
	set_free_seq(z, b, 5);
	none = ucma_pages_alloc_in(a, 6, gfp, pb, end);
	/* 2^32 frees later the count is 5 again; the one that wraps it
	 * frees page 15, which makes the extent 6 pages long. */
	set_free_seq(z, b, UINT32_MAX);
	free_offsets(page, pb, 15, 16);
	set_free_seq(z, b, 5);
	got = ucma_pages_alloc_in(a, 6, gfp, pb, end);
	ok(none == UCMA_PFN_NONE && got == pb + 10,
	   "a note 2^32 frees old does not hold: 6 pages found at 10 (%d)",
	   got == UCMA_PFN_NONE ? -1 : (int)(got - pb));
	if (none != UCMA_PFN_NONE)
		ucma_pages_free(a, none);
	if (got != UCMA_PFN_NONE)
		ucma_pages_free(a, got);
	free_offsets(page, pb, 0, UCMA_PAGEBLOCK_PAGES);
	ok(tu_zones_ok(a, "extent note wrap"), "invariants hold after it");
}

static void test_zone_rules(void)
{
	uint32_t pfn, *list;
	size_t n = 0, cap = a->npages;
	bool in_cma = true, all_normal = true;
	uint64_t cma_free;

	list = calloc(cap, sizeof(*list));
	pfn = ucma_pages_alloc(a, 1, UCMA_GFP_MOVABLE);
	ok(pfn != UCMA_PFN_NONE && ucma_pfn_zone(a, pfn)->id == UCMA_ZONE_CMA,
	   "a movable page goes to the CMA zone first");
	ucma_pages_free(a, pfn);

	/* Fill CMA with movable pages: the next movable page goes to NORMAL. */
	for (;;) {
		pfn = ucma_pages_alloc(a, 64, UCMA_GFP_MOVABLE);
		if (pfn == UCMA_PFN_NONE || ucma_pfn_zone(a, pfn)->id != UCMA_ZONE_CMA)
			break;
		list[n++] = pfn;
	}
	ok(pfn != UCMA_PFN_NONE && ucma_pfn_zone(a, pfn)->id == UCMA_ZONE_NORMAL &&
		   tu_zone_free(cma()) == 0,
	   "movable pages overflow to NORMAL once CMA is full");
	if (pfn != UCMA_PFN_NONE)
		ucma_pages_free(a, pfn);
	while (n)
		ucma_pages_free(a, list[--n]);

	/* Fill NORMAL with unmovable pages: they never spill into CMA. */
	cma_free = tu_zone_free(cma());
	for (;;) {
		pfn = ucma_pages_alloc(a, 37, UCMA_GFP_UNMOVABLE);
		if (pfn == UCMA_PFN_NONE)
			break;
		if (ucma_pfn_zone(a, pfn)->id != UCMA_ZONE_NORMAL)
			in_cma = false;
		list[n++] = pfn;
	}
	ok(in_cma && errno == ENOMEM, "unmovable allocation fails with ENOMEM when NORMAL is full");
	ok(tu_zone_free(cma()) == cma_free, "no unmovable page ever landed in the CMA zone");
	{
		uint64_t counts[UCMA_MT_NR];

		ucma_zone_pageblock_counts(a, UCMA_ZONE_NORMAL, counts);
		ok(counts[UCMA_MT_UNMOVABLE] > 0 && counts[UCMA_MT_CMA] == 0,
		   "unmovable requests stole NORMAL pageblocks (%llu UNMOVABLE)",
		   (unsigned long long)counts[UCMA_MT_UNMOVABLE]);
	}
	while (n)
		ucma_pages_free(a, list[--n]);

	/* Reserved policy: movable memory stays out of CMA. */
	ucma_opt.cma_policy = UCMA_CMA_RESERVED;
	for (int i = 0; i < 100; i++) {
		pfn = ucma_pages_alloc(a, 8, UCMA_GFP_MOVABLE);
		if (pfn == UCMA_PFN_NONE || ucma_pfn_zone(a, pfn)->id != UCMA_ZONE_NORMAL)
			all_normal = false;
		if (pfn != UCMA_PFN_NONE)
			list[n++] = pfn;
	}
	ok(all_normal, "with the reserved policy movable pages stay in NORMAL");
	ucma_opt.cma_policy = UCMA_CMA_LEND_HANDLES;
	while (n)
		ucma_pages_free(a, list[--n]);
	ok(tu_zones_ok(a, "zone rules"), "invariants hold after the zone-rule tests");
	free(list);
}

static void test_isolation(void)
{
	uint32_t start = cma()->start_pfn, end = start + 2 * UCMA_PAGEBLOCK_PAGES;
	uint32_t pfn, *list = calloc(a->npages, sizeof(*list));
	size_t n = 0;
	bool outside = true;
	uint64_t free_before = tu_zone_free(cma());

	ok(ucma_isolate_range(a, start, end) == 0, "isolate two CMA pageblocks");
	ok(cma()->isolated_free_pages == 2 * UCMA_PAGEBLOCK_PAGES,
	   "their free pages moved to the isolate lists");
	for (;;) {
		pfn = ucma_pages_alloc(a, 16, UCMA_GFP_MOVABLE);
		if (pfn == UCMA_PFN_NONE || ucma_pfn_zone(a, pfn)->id != UCMA_ZONE_CMA)
			break;
		if (pfn >= start && pfn < end)
			outside = false;
		list[n++] = pfn;
	}
	if (pfn != UCMA_PFN_NONE)
		ucma_pages_free(a, pfn);
	ok(outside, "no allocation landed in isolated pageblocks (%zu runs)", n);
	ok(ucma_range_free(a, start, end), "the isolated range is still entirely free");
	ok(ucma_isolate_range(a, start + 1, end) == -1 && errno == EINVAL,
	   "an unaligned isolation range is refused with EINVAL");
	ucma_undo_isolate_range(a, start, end);
	ok(a->blocks[start >> UCMA_PAGEBLOCK_ORDER].mt == UCMA_MT_CMA &&
		   cma()->isolated_free_pages == 0,
	   "undoing isolation restores the CMA migratetype");
	pfn = ucma_pages_alloc(a, 16, UCMA_GFP_MOVABLE);
	ok(pfn >= start && pfn < end, "after undo the range serves movable pages again");
	ucma_pages_free(a, pfn);
	while (n)
		ucma_pages_free(a, list[--n]);
	ok(tu_zone_free(cma()) == free_before, "CMA free pages back to %llu",
	   (unsigned long long)free_before);

	/* Claiming a free range splits blocks exactly at both ends. */
	ok(ucma_claim_free_range(a, start + 3, start + 700, UCMA_OWN_CONTIG, 1) == 0,
	   "claim an unaligned free range [3, 700)");
	ok(tu_zone_free(cma()) == free_before - 697, "exactly 697 pages were taken");
	ok(ucma_claim_free_range(a, start + 600, start + 800, UCMA_OWN_CONTIG, 1) == -1 &&
		   errno == EBUSY,
	   "claiming a range that is not free fails with EBUSY");
	ok(tu_zone_free(cma()) == free_before - 697, "and takes nothing");
	ok(a->pages[start + 3].owner_type == UCMA_OWN_CONTIG &&
		   a->pages[start + 650].owner_type == UCMA_OWN_CONTIG,
	   "the owner is recorded on head and tail pages");
	ucma_pages_free(a, start + 3);
	ok(tu_zones_ok(a, "isolation"), "invariants hold after isolation and claims");
	free(list);
}

/*
 * A full zone remembers the length it found no unmovable run for, at the
 * state of its lists (zone.c, nofit_known()): asked again it answers at
 * once; a run freed into its lists is found by the next request.
 */
static void test_nofit(void)
{
	struct ucma_zone *z = normal();
	uint32_t *list = calloc(a->npages, sizeof(*list)), pfn, freed;
	size_t n = 0;
	uint64_t gen;

	/* 20-page runs (packed into holes), then single pages, until none
	 * is left. */
	while ((pfn = ucma_pages_alloc(a, 20, UCMA_GFP_UNMOVABLE)) != UCMA_PFN_NONE)
		list[n++] = pfn;
	while ((pfn = ucma_pages_alloc(a, 1, UCMA_GFP_UNMOVABLE)) != UCMA_PFN_NONE)
		list[n++] = pfn;
	pfn = ucma_pages_alloc(a, 20, UCMA_GFP_UNMOVABLE);
	ok(pfn == UCMA_PFN_NONE && z->nofit_npages[1] != 0 && z->nofit_npages[1] <= 20 &&
		   z->nofit_gen == z->list_gen,
	   "NORMAL full: no run of 20 pages, remembered (%u pages)", z->nofit_npages[1]);
	gen = z->list_gen;
	pfn = ucma_pages_alloc(a, 37, UCMA_GFP_UNMOVABLE);
	ok(pfn == UCMA_PFN_NONE && z->list_gen == gen,
	   "a longer request fails too, its lists untouched");
	/* The first 20-page run back: the same request finds it. */
	freed = list[0];
	ucma_pages_free(a, freed);
	pfn = ucma_pages_alloc(a, 20, UCMA_GFP_UNMOVABLE);
	ok(pfn == freed, "a run of 20 pages freed: the next request takes it (%u, freed %u)", pfn,
	   freed);
	if (pfn != UCMA_PFN_NONE)
		list[0] = pfn;
	else
		list[0] = list[--n];
	while (n)
		ucma_pages_free(a, list[--n]);
	ok(tu_zones_ok(a, "nofit"), "invariants hold after the full-zone tests");
	free(list);
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = ARENA,
		.cma_size = CMA,
		.hugepages = UCMA_BACKING_NONE,
		.hugepages_normal = UCMA_BACKING_NONE,
		/* The free counts are the buddy allocator's alone: no CMA
		 * frames lent to the heap (test_lend.c tests that). */
		.cma_policy = UCMA_CMA_LEND_HANDLES,
	};

	plan_no_plan();
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	a = ucma_arena_get();
	owned = calloc(a->npages, 1);
	ok(a && a->size == ARENA && cma()->managed_pages == CMA >> UCMA_PAGE_SHIFT,
	   "arena of 64 MiB with a 16 MiB CMA zone");
	ok(a->base % UCMA_PAGEBLOCK_SIZE == 0, "arena is 2 MiB aligned");
	ok(tu_zones_ok(a, "start"), "invariants hold at start");
	test_across_steal();
	test_across();
	test_across_long();
	test_steal_count();
	test_exact_split();
	test_resident();
	test_extent_note();
	test_extent_levels_single();
	test_extent_levels_power();
	test_extent_cache();
	test_extent_seq_wrap();
	test_random();
	test_zone_rules();
	test_nofit();
	test_isolation();
	return done();
}
