/*
 * test_deferred.c - deferred initialisation of the buddy allocator's
 * pageblocks (buddy.c): the page metadata of a pageblock nobody has used
 * stays untouched, and everything that looks at free memory still sees it.
 *
 * "Untouched" is what the kernel says: mincore() on the page-metadata
 * mapping (a->pages, 16 bytes per page, so two 4 KiB pages per 2 MiB
 * pageblock) reports the metadata pages of such a pageblock as not
 * resident; even reading them would map them.  Linking every pageblock at
 * start-up touched all of them.
 *
 * Then, with pageblocks that were never used around: small allocations
 * touch only the pageblocks they take; a claim and a ucma_alloc() of
 * ranges in never-used pageblocks work; isolation, a placement inside a
 * range (compaction's targets), heap lending's pick of a free CMA
 * pageblock, compaction itself and a forked child work; buddyinfo, the
 * free counts and ucma_zone_check() agree throughout; and allocating
 * whole zones then freeing everything leaves whole pageblocks on
 * consistent lists.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "pcp.h"
#include "lend.h"
#include "tap.h"
#include "testutil.h"
#include "zones.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define ARENA (64u << 20)
#define CMA   (16u << 20)
#define PB    UCMA_PAGEBLOCK_PAGES

static struct ucma_arena *a;
static size_t os_page;

static struct ucma_zone *normal(void) { return &a->zones[UCMA_ZONE_NORMAL]; }
static struct ucma_zone *cma(void) { return &a->zones[UCMA_ZONE_CMA]; }
static uint32_t pb_first(const struct ucma_zone *z) { return z->start_pfn / PB; }
static uint32_t pb_end(const struct ucma_zone *z) { return z->end_pfn / PB; }

/* Is any page of pageblock @b's page metadata resident? */
static bool touched(uint32_t b)
{
	uintptr_t lo = (uintptr_t)&a->pages[(size_t)b * PB];
	uintptr_t hi = (uintptr_t)&a->pages[(size_t)(b + 1) * PB];
	unsigned char vec[64];
	size_t n;

	lo &= ~(uintptr_t)(os_page - 1);
	hi = (hi + os_page - 1) & ~(uintptr_t)(os_page - 1);
	n = (hi - lo) / os_page;
	if (n > sizeof(vec) || mincore((void *)lo, hi - lo, vec) != 0)
		bail_out("mincore of the page metadata: %s", strerror(errno));
	for (size_t i = 0; i < n; i++)
		if (vec[i] & 1)
			return true;
	return false;
}

static unsigned touched_in(const struct ucma_zone *z)
{
	unsigned n = 0;

	for (uint32_t b = pb_first(z); b < pb_end(z); b++)
		n += touched(b);
	return n;
}

/* A pageblock that is wholly free and whose metadata was never touched. */
static uint32_t untouched_free_pb(const struct ucma_zone *z, bool highest)
{
	for (uint32_t i = 0; i < pb_end(z) - pb_first(z); i++) {
		uint32_t b = highest ? pb_end(z) - 1 - i : pb_first(z) + i;

		if (!touched(b) && a->blocks[b].nr_free == PB)
			return b;
	}
	return UCMA_PFN_NONE;
}


/*
 * buddyinfo against the pageblocks: the free counts per order add up to
 * the zone's free pages, the order-9 count is at least the number of
 * wholly free pageblocks (each is one order-9 block) and at most that,
 * and the statistic says the same.
 */
static bool buddyinfo_agrees(struct ucma_zone *z, const char *stat)
{
	uint64_t counts[UCMA_NR_ORDERS], pages = 0, whole = 0, v = 0;

	/* Pages on the per-CPU lists (pcp.c) are free for buddyinfo but on
	 * no buddy list: back to the buddy lists first, so the two agree. */
	ucma_pcp_drain_zone(z);
	ucma_zone_free_counts(z, counts);
	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++)
		pages += counts[o] << o;
	for (uint32_t b = pb_first(z); b < pb_end(z); b++)
		whole += a->blocks[b].nr_free == PB;
	if (ucma_stat(stat, &v) != 0)
		return false;
	if (pages != z->free_pages || counts[UCMA_MAX_ORDER] != whole || v != z->free_pages) {
		diag("zone %s: buddyinfo %llu pages, %llu order-9 blocks; %llu free pages, "
		     "%llu whole pageblocks, %s %llu",
		     z->name, (unsigned long long)pages,
		     (unsigned long long)counts[UCMA_MAX_ORDER], (unsigned long long)z->free_pages,
		     (unsigned long long)whole, stat, (unsigned long long)v);
		return false;
	}
	return true;
}

static void test_start(void)
{
	unsigned tn = touched_in(normal()), tc = touched_in(cma());

	diag("after start-up: page metadata touched in %u of %u NORMAL and %u of %u CMA "
	     "pageblocks",
	     tn, pb_end(normal()) - pb_first(normal()), tc, pb_end(cma()) - pb_first(cma()));
	ok(tn <= 2 && tc == 0, "start-up touches the metadata of at most 2 pageblocks (%u + %u)",
	   tn, tc);
	ok(tu_zone_free(normal()) + tu_zone_free(cma()) + (uint64_t)tn * PB >= a->npages,
	   "the untouched pageblocks count as free");
	ok(buddyinfo_agrees(normal(), "nr_free_pages_normal") &&
		   buddyinfo_agrees(cma(), "nr_free_pages_cma"),
	   "buddyinfo counts the untouched pageblocks as order-9 blocks");
	ok(tu_zones_ok(a, "start"), "zone check passes at start");
}

static void test_small(void)
{
	static void *blocks[1000];
	uint32_t pfns[64];
	unsigned tn0 = touched_in(normal()), tc0 = touched_in(cma()), tn, tc;
	bool got = true;

	for (int i = 0; i < 1000; i++) {
		blocks[i] = ucma_malloc(64);
		got &= blocks[i] != NULL;
		if (blocks[i])
			memset(blocks[i], i, 64);
	}
	for (int i = 0; i < 32; i++) {
		pfns[i] = ucma_pages_alloc(a, 1 + i % 4, UCMA_GFP_UNMOVABLE);
		pfns[32 + i] = ucma_pages_alloc(a, 1 + i % 4, UCMA_GFP_MOVABLE);
		got &= pfns[i] != UCMA_PFN_NONE && pfns[32 + i] != UCMA_PFN_NONE;
	}
	tn = touched_in(normal());
	tc = touched_in(cma());
	ok(got, "1000 x 64 B malloc, 32 unmovable and 32 movable page runs");
	ok(tn <= tn0 + 2 && tc <= tc0 + 1,
	   "they touch the metadata of the pageblocks they use only (NORMAL %u -> %u, CMA %u -> "
	   "%u)",
	   tn0, tn, tc0, tc);
	ok(tu_zones_ok(a, "small allocations"), "zone check passes");
	ok(buddyinfo_agrees(normal(), "nr_free_pages_normal") &&
		   buddyinfo_agrees(cma(), "nr_free_pages_cma"),
	   "buddyinfo agrees");
	for (int i = 0; i < 64; i++)
		ucma_pages_free(a, pfns[i]);
	for (int i = 0; i < 1000; i++)
		ucma_free(blocks[i]);
	ok(tu_zones_ok(a, "small frees"), "zone check passes after freeing them");
}

static void test_contig(void)
{
	uint32_t b = untouched_free_pb(cma(), false), start;
	uint64_t before = tu_zone_free(cma());
	char *p;
	bool zero = true;

	if (b == UCMA_PFN_NONE || b + 1 >= pb_end(cma()) || touched(b + 1)) {
		ok(0, "two untouched CMA pageblocks to claim from");
		return;
	}
	/* A range across two never-used pageblocks, unaligned at both ends. */
	start = b * PB;
	ok(ucma_range_free(a, start + 3, start + PB + 200) && !touched(b) && !touched(b + 1),
	   "a never-used range is free, and asking does not touch it");
	ok(ucma_claim_free_range(a, start + 3, start + PB + 200, UCMA_OWN_CONTIG, 1) == 0,
	   "claim [3, 712) of two never-used CMA pageblocks");
	ok(tu_zone_free(cma()) == before - (PB + 197), "exactly %u pages were taken (%llu)", PB + 197,
	   (unsigned long long)(before - tu_zone_free(cma())));
	ok(a->pages[start + 3].kind == UCMA_PK_RUN && a->pages[start + 3].aux == PB + 197 &&
		   a->pages[start + PB + 199].kind == UCMA_PK_TAIL,
	   "the run is recorded");
	ok(tu_zones_ok(a, "claim"), "zone check passes with the claimed range");
	ok(buddyinfo_agrees(cma(), "nr_free_pages_cma"), "buddyinfo agrees");
	ucma_pages_free(a, start + 3);
	ok(tu_zone_free(cma()) == before && tu_zones_ok(a, "claim freed"),
	   "freed: the free count is back and the zone check passes");
	ok(buddyinfo_agrees(cma(), "nr_free_pages_cma"),
	   "buddyinfo agrees: the two pageblocks merged whole again");

	/* ucma_alloc() over never-used pageblocks: no migration needed.  The
	 * area is searched from its start: 8 MiB reach past what was used. */
	b = untouched_free_pb(cma(), false);
	p = ucma_alloc_area("default", 8u << 20, 2u << 20, UCMA_ALLOC_NOWAIT | UCMA_ALLOC_ZERO);
	ok(p != NULL, "ucma_alloc(8 MiB, NOWAIT) in the CMA zone (%s)", p ? "ok" : strerror(errno));
	if (!p)
		return;
	ok(b != UCMA_PFN_NONE && ucma_addr_to_pfn(a, p) / PB <= b &&
		   (ucma_addr_to_pfn(a, p) + (8u << 20) / 4096) / PB > b,
	   "it covers never-used pageblock %u (pageblocks %u-%u)", b, ucma_addr_to_pfn(a, p) / PB,
	   (ucma_addr_to_pfn(a, p) + (8u << 20) / 4096) / PB - 1);
	for (size_t i = 0; i < (8u << 20); i += 4096)
		zero &= p[i] == 0;
	memset(p, 0x5a, 8u << 20);
	ok(zero, "it reads zeros and takes writes");
	ok(tu_zones_ok(a, "ucma_alloc"), "zone check passes");
	ok(ucma_release(p) == 0 && tu_zones_ok(a, "ucma_release"), "ucma_release; zone check passes");
	ok(buddyinfo_agrees(cma(), "nr_free_pages_cma"), "buddyinfo agrees");
}

static void test_isolation(void)
{
	uint32_t b = untouched_free_pb(normal(), true), start, end, pfn;
	uint32_t list[1024];
	unsigned n = 0;
	bool outside = true;
	int mt;

	if (b == UCMA_PFN_NONE || b == pb_first(normal()) || touched(b - 1)) {
		ok(0, "two untouched NORMAL pageblocks to isolate");
		return;
	}
	start = (b - 1) * PB;
	end = start + 2 * PB;
	mt = a->blocks[b].mt;
	ok(ucma_isolate_range(a, start, end) == 0, "isolate two never-used NORMAL pageblocks");
	ok(normal()->isolated_free_pages == 2 * PB && a->blocks[b].mt == UCMA_MT_ISOLATE &&
		   a->blocks[b - 1].mt == UCMA_MT_ISOLATE,
	   "their free pages are on the isolate lists (%llu)",
	   (unsigned long long)normal()->isolated_free_pages);
	ok(tu_zones_ok(a, "isolated"), "zone check passes while they are isolated");
	ok(buddyinfo_agrees(normal(), "nr_free_pages_normal"), "buddyinfo agrees");
	while (n < UCMA_ARRAY_SIZE(list) &&
	       (pfn = ucma_pages_alloc(a, 64, UCMA_GFP_UNMOVABLE)) != UCMA_PFN_NONE) {
		outside &= pfn + 64 <= start || pfn >= end;
		list[n++] = pfn;
	}
	ok(outside && normal()->free_pages - normal()->isolated_free_pages < 64,
	   "no allocation lands there, the rest of the NORMAL zone filled (%u runs)", n);
	ok(ucma_range_free(a, start, end), "the isolated range is free");
	ucma_undo_isolate_range(a, start, end);
	ok(normal()->isolated_free_pages == 0 && a->blocks[b].mt == mt, "undone: type %d again",
	   a->blocks[b].mt);
	ok(tu_zones_ok(a, "isolation undone"), "zone check passes");
	while (n)
		ucma_pages_free(a, list[--n]);
	ok(tu_zones_ok(a, "isolation freed"), "zone check passes after freeing");
	ok(buddyinfo_agrees(normal(), "nr_free_pages_normal"), "buddyinfo agrees");
}

static bool always(const struct ucma_arena *ar, uint32_t pfn)
{
	(void)ar;
	(void)pfn;
	return true;
}

static void test_placement(void)
{
	uint32_t b = untouched_free_pb(normal(), true), e, pfn, pfn2, pfn3,
		 before = touched_in(normal());
	bool dirty = true;

	if (b == UCMA_PFN_NONE) {
		ok(0, "an untouched NORMAL pageblock");
		return;
	}
	/* Compaction's targets: a run inside a range of never-used pages. */
	pfn = ucma_pages_alloc_in(a, 8, UCMA_GFP_MOVABLE | UCMA_GFP_NO_CMA, b * PB + 100,
				  b * PB + 300);
	ok(pfn != UCMA_PFN_NONE && pfn >= b * PB + 100 && pfn + 8 <= b * PB + 300,
	   "ucma_pages_alloc_in() finds room inside a never-used range (pfn %u)", pfn);
	ok(touched_in(normal()) == before + 1, "touching that pageblock only");
	ok(tu_zones_ok(a, "alloc_in"), "zone check passes");
	if (pfn != UCMA_PFN_NONE)
		ucma_pages_free(a, pfn);

	/* Heap lending's pick: the highest wholly free CMA pageblock. */
	b = untouched_free_pb(cma(), true);
	for (uint32_t c = b + 1; b != UCMA_PFN_NONE && c < pb_end(cma()); c++)
		if (a->blocks[c].nr_free == PB)
			b = UCMA_PFN_NONE;	/* a higher one was used before */
	before = touched_in(cma());
	pfn = ucma_zone_take_free_pageblock(cma(), always, UCMA_OWN_LENT, 0, UCMA_PFN_NONE, 1,
					    &dirty);
	ok(b != UCMA_PFN_NONE && pfn == b * PB && !dirty && touched_in(cma()) == before + 1,
	   "the highest free CMA pageblock, never used, is picked whole and clean (pfn %u, "
	   "pageblock %u)",
	   pfn, b);
	ok(tu_zones_ok(a, "take_free_pageblock"), "zone check passes");
	if (pfn != UCMA_PFN_NONE)
		ucma_pages_free(a, pfn);
	ok(tu_zones_ok(a, "take_free_pageblock freed"), "and after giving it back");

	/* Asked to leave room to grow, it takes the lowest of the free
	 * pageblocks just below the highest (up to grow - 1 of them); a
	 * preferred free pageblock is taken as it is. */
	b = UCMA_PFN_NONE;
	for (uint32_t c = pb_end(cma()); b == UCMA_PFN_NONE && c-- > pb_first(cma());)
		if (a->blocks[c].deferred || a->blocks[c].nr_free == PB)
			b = c;
	e = b;		/* the lowest of up to three free ones below it */
	while (e != UCMA_PFN_NONE && b - e < 3 && e > pb_first(cma()) &&
	       (a->blocks[e - 1].deferred || a->blocks[e - 1].nr_free == PB))
		e--;
	pfn = ucma_zone_take_free_pageblock(cma(), always, UCMA_OWN_LENT, 0, UCMA_PFN_NONE, 4,
					    &dirty);
	ok(b != UCMA_PFN_NONE && e < b && pfn == e * PB,
	   "grow 4: the free pageblocks below the highest one (up to three) are left above the "
	   "one taken (pfn %u, pageblocks %u-%u free)", pfn, e, b);
	pfn2 = ucma_zone_take_free_pageblock(cma(), always, UCMA_OWN_LENT, 0, pfn + PB, 4,
					     &dirty);
	ok(pfn2 == pfn + PB, "the pageblock after it, preferred, is taken (pfn %u)", pfn2);
	if (pfn2 != UCMA_PFN_NONE) {
		pfn3 = ucma_zone_take_free_pageblock(cma(), always, UCMA_OWN_LENT, 0, pfn2, 1,
						     &dirty);
		ok(pfn3 == b * PB && pfn2 != b * PB, "a preferred pageblock that is not free is passed over: the "
		   "highest (pfn %u)", pfn3);
		if (pfn3 != UCMA_PFN_NONE)
			ucma_pages_free(a, pfn3);
		ucma_pages_free(a, pfn2);
	}
	if (pfn != UCMA_PFN_NONE)
		ucma_pages_free(a, pfn);
	ok(tu_zones_ok(a, "take_free_pageblock grow"), "zone check passes");
}

static void test_compaction(void)
{
	enum { N = 600 };
	static ucma_handle_t h[N];
	static bool before[ARENA / UCMA_PAGEBLOCK_SIZE];
	unsigned idle = 0;
	int bad = 0;

	for (int i = 0; i < N; i++) {
		void *p;

		h[i] = ucma_halloc(4096 * (1 + i % 3), 0);
		p = ucma_pin(h[i], 0);
		if (!p)
			bail_out("ucma_halloc/pin: %s", strerror(errno));
		tu_fill(p, 4096, (uint64_t)i);
		ucma_unpin(h[i]);
	}
	for (int i = 0; i < N; i += 2)
		ucma_hfree(h[i]);
	for (uint32_t b = 0; b < a->nr_pageblocks; b++)
		before[b] = touched(b);
	ok(ucma_compact(UCMA_COMPACT_SYNC_FULL) == 0, "ucma_compact(SYNC_FULL)");
	for (int i = 1; i < N; i += 2) {
		void *p = ucma_pin(h[i], 0);

		bad += !p || !tu_check(p, 4096, (uint64_t)i);
		if (p)
			ucma_unpin(h[i]);
	}
	ok(bad == 0, "every object is intact");
	/* It may put objects into never-used pageblocks (at the top, where
	 * its free scanner starts), but reads no other. */
	for (uint32_t b = 0; b < a->nr_pageblocks; b++)
		idle += !before[b] && touched(b) && a->blocks[b].nr_free == PB;
	ok(idle == 0, "compaction touches no never-used pageblock it does not fill (%u did)", idle);
	ok(tu_zones_ok(a, "compaction"), "zone check passes");
	for (int i = 1; i < N; i += 2)
		ucma_hfree(h[i]);
}

static void test_fork(void)
{
	pid_t pid = fork();
	int status = -1;

	if (pid == 0) {
		uint32_t b = untouched_free_pb(cma(), false);
		uint32_t p1 = ucma_pages_alloc(a, 3, UCMA_GFP_UNMOVABLE);
		uint32_t p2 = ucma_pages_alloc(a, 5, UCMA_GFP_MOVABLE);
		int rc = b == UCMA_PFN_NONE ? 2 : 0;

		if (!rc && ucma_claim_free_range(a, b * PB, b * PB + 10, UCMA_OWN_CONTIG, 1) != 0)
			rc = 3;
		if (!rc && (p1 == UCMA_PFN_NONE || p2 == UCMA_PFN_NONE))
			rc = 4;
		if (!rc && !tu_zones_ok(a, "child"))
			rc = 5;
		_exit(rc);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "a forked child allocates, claims a never-used range and passes the zone check "
	   "(status %d)",
	   status);
}

/* Whole pageblocks free in zone @z. */
static uint64_t whole_free(const struct ucma_zone *z)
{
	uint64_t n = 0;

	for (uint32_t b = pb_first(z); b < pb_end(z); b++)
		n += a->blocks[b].nr_free == PB;
	return n;
}

static void test_whole(void)
{
	uint32_t *list = calloc(a->npages, sizeof(*list));
	size_t n = 0;
	uint32_t pfn;
	uint64_t free_n, free_c, whole_n, whole_c, counts[UCMA_NR_ORDERS];

	/* What is still cached (slabs kept for reuse) stays; freed objects
	 * waiting for readers are freed first, and runs on the per-CPU lists
	 * go back to the buddy lists, as they do after the frees below. */
	ucma_defer_drain();
	ucma_pcp_drain_zone(normal());
	ucma_pcp_drain_zone(cma());
	free_n = tu_zone_free(normal());
	free_c = tu_zone_free(cma());
	whole_n = whole_free(normal());
	whole_c = whole_free(cma());
	while ((pfn = ucma_pages_alloc_zone(cma(), 64, UCMA_GFP_MOVABLE)) != UCMA_PFN_NONE)
		list[n++] = pfn;
	while ((pfn = ucma_pages_alloc_zone(cma(), 1, UCMA_GFP_MOVABLE)) != UCMA_PFN_NONE)
		list[n++] = pfn;
	while ((pfn = ucma_pages_alloc(a, 37, UCMA_GFP_UNMOVABLE)) != UCMA_PFN_NONE)
		list[n++] = pfn;
	while ((pfn = ucma_pages_alloc(a, 1, UCMA_GFP_UNMOVABLE)) != UCMA_PFN_NONE)
		list[n++] = pfn;
	ok(cma()->free_pages == 0 && normal()->free_pages == 0,
	   "both zones allocated whole in %zu runs (NORMAL %llu pages left, CMA %llu)", n,
	   (unsigned long long)normal()->free_pages, (unsigned long long)cma()->free_pages);
	ok(touched_in(normal()) == pb_end(normal()) - pb_first(normal()) &&
		   touched_in(cma()) == pb_end(cma()) - pb_first(cma()),
	   "every pageblock's metadata is in use now");
	ok(tu_zones_ok(a, "full"), "zone check passes with the zones full");
	ok(buddyinfo_agrees(normal(), "nr_free_pages_normal") &&
		   buddyinfo_agrees(cma(), "nr_free_pages_cma"),
	   "buddyinfo agrees");
	while (n)
		ucma_pages_free(a, list[--n]);
	ucma_pcp_drain_zone(normal());
	ucma_pcp_drain_zone(cma());
	ok(tu_zones_ok(a, "emptied"), "zone check passes after freeing everything");
	ok(tu_zone_free(normal()) == free_n && tu_zone_free(cma()) == free_c,
	   "the free counts are back (NORMAL %llu, CMA %llu)",
	   (unsigned long long)tu_zone_free(normal()), (unsigned long long)tu_zone_free(cma()));
	ucma_zone_free_counts(normal(), counts);
	ok(counts[UCMA_MAX_ORDER] == whole_n && whole_free(normal()) == whole_n,
	   "NORMAL merged back to %llu whole pageblocks (%llu before)",
	   (unsigned long long)counts[UCMA_MAX_ORDER], (unsigned long long)whole_n);
	ucma_zone_free_counts(cma(), counts);
	ok(counts[UCMA_MAX_ORDER] == whole_c && whole_free(cma()) == whole_c,
	   "CMA merged back to %llu whole pageblocks (%llu before)",
	   (unsigned long long)counts[UCMA_MAX_ORDER], (unsigned long long)whole_c);
	free(list);
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = ARENA,
		.cma_size = CMA,
		.hugepages = UCMA_BACKING_NONE,
		.hugepages_normal = UCMA_BACKING_NONE,
		.cma_policy = UCMA_CMA_LEND_HANDLES,
	};

	plan_no_plan();
	os_page = (size_t)sysconf(_SC_PAGESIZE);
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	a = ucma_arena_get();
	if (!a)
		bail_out("no arena: %s", strerror(errno));
	test_start();
	test_small();
	test_fork();
	test_contig();
	test_compaction();
	test_placement();
	test_isolation();
	test_whole();
	return done();
}
