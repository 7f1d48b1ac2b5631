/*
 * test_pcp.c - the per-CPU page lists (pcp.c).
 *
 *  - a run freed to a list is the next one handed out, for lengths of 1
 *    to 16 pages (3 pages kept as 3, aligned to its order) and whole
 *    pageblocks, and counts as free meanwhile, exactly: the free page
 *    counts (buddyinfo, free_pages + listed pages) agree to the page;
 *  - isolation drains the runs of its range: ucma_alloc() of the whole CMA
 *    area succeeds while runs of it sit on the lists (direct compaction,
 *    which drains too, is off here), with a pageblock isolated no
 *    allocation is handed a page of it, and a listed 3-page run or whole
 *    pageblock leaves the lists for the ISOLATE free lists;
 *  - no more than pcp_pb_high pageblocks per CPU are kept;
 *  - the zone invariants, lists included, hold during and after threads
 *    allocating and freeing runs of every kind at once, and no page is
 *    handed to two threads (each stamps every page of its runs); two
 *    threads allocating 3-page runs and pageblocks in turn with the whole
 *    run written and read back;
 *  - the free pages per order (buddyinfo) count the runs on the lists,
 *    and a drain leaves the total unchanged and the lists empty;
 *  - a list nobody takes from while other lengths are refilled goes back
 *    to the buddy lists, and one in use stays;
 *  - draining the dirty runs gives back a freed run and keeps the clean
 *    runs a refill listed.
 *
 * The thread stays on one CPU where it checks what one list hands out.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "pcp.h"
#include "tap.h"
#include "testutil.h"
#include "zones.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define ARENA (96u << 20)
#define CMA   (32u << 20)

static struct ucma_arena *a;

static struct ucma_zone *normal(void) { return &a->zones[UCMA_ZONE_NORMAL]; }
static struct ucma_zone *cma(void) { return &a->zones[UCMA_ZONE_CMA]; }


static uint64_t free_total(struct ucma_zone *z)
{
	uint64_t counts[UCMA_NR_ORDERS], n = 0;

	ucma_zone_free_counts(z, counts);
	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++)
		n += counts[o] << o;
	return n;
}

static void drain_all(void)
{
	ucma_pcp_drain_zone(normal());
	ucma_pcp_drain_zone(cma());
}

/* Stay on the CPU the thread runs on now; false if that cannot be had. */
static bool stay_on_cpu(cpu_set_t *saved)
{
	cpu_set_t one;
	int cpu = sched_getcpu();

	CPU_ZERO(&one);
	CPU_SET(cpu < 0 ? 0 : cpu, &one);
	return sched_getaffinity(0, sizeof(*saved), saved) == 0 &&
	       sched_setaffinity(0, sizeof(one), &one) == 0;
}

static unsigned order_of(uint32_t n)
{
	return n <= 1 ? 0 : 32u - (unsigned)__builtin_clz(n - 1);
}

static void test_reuse(void)
{
	static const uint32_t lens[] = { 1, 2, 3, 4, 5, 7, 8, 12, 15, 16, UCMA_PAGEBLOCK_PAGES };
	cpu_set_t saved;
	bool pinned = stay_on_cpu(&saved);

	if (!pinned)
		diag("could not stay on one CPU: %s", strerror(errno));
	for (size_t l = 0; l < UCMA_ARRAY_SIZE(lens); l++) {
		static const unsigned gfps[] = { UCMA_GFP_UNMOVABLE, UCMA_GFP_MOVABLE };

		for (size_t g = 0; g < UCMA_ARRAY_SIZE(gfps); g++) {
			uint32_t n = lens[l], p1, p2;
			const char *kind = g ? "movable" : "unmovable";
			struct ucma_zone *z;
			uint64_t listed, nfree;

			/* Empty lists: the run comes from a refill, and a
			 * pageblock finds room on its list. */
			drain_all();
			p1 = ucma_pages_alloc(a, n, gfps[g]);
			if (p1 == UCMA_PFN_NONE) {
				ok(0, "%u pages %s: allocation failed", n, kind);
				continue;
			}
			z = ucma_pfn_zone(a, p1);
			if (n == UCMA_PAGEBLOCK_PAGES && !z->pcp_pb_high) {
				skip(4, "zone %s too small for a pageblock per CPU", z->name);
				ucma_pages_free(a, p1);
				continue;
			}
			ok(n > UCMA_PCP_MAX_PAGES || !(p1 & ((1u << order_of(n)) - 1)),
			   "%u pages %s: a run aligned to its order (%u)", n, kind, p1);
			nfree = free_total(z);
			ucma_pages_free(a, p1);
			/* Past pcp_high the free sends other runs on to the
			 * buddy lists, never the one just freed. */
			listed = ucma_pcp_pages(z);
			ok(listed >= n && (a->pages[p1].flags & UCMA_PF_PCP) &&
				   a->pages[p1].kind == UCMA_PK_RUN && a->pages[p1].aux == n &&
				   free_total(z) == nfree + n && free_total(z) == tu_zone_free(z),
			   "%u pages %s: the freed run is listed as %u pages and counts as free "
			   "(%llu -> %llu, buddy lists and lists %llu)",
			   n, kind, a->pages[p1].aux, (unsigned long long)nfree,
			   (unsigned long long)free_total(z), (unsigned long long)tu_zone_free(z));
			p2 = ucma_pages_alloc(a, n, gfps[g]);
			ok(!pinned || p2 == p1, "%u pages %s: and is handed out again (%u, then %u)",
			   n, kind, p1, p2);
			ok(p2 != UCMA_PFN_NONE && a->pages[p2].kind == UCMA_PK_RUN &&
				   a->pages[p2].aux == n && !(a->pages[p2].flags & UCMA_PF_PCP) &&
				   !!(a->pages[p2].flags & UCMA_PF_MOVABLE) == !!gfps[g],
			   "%u pages: an allocated run again, movable as asked", n);
			if (p2 != UCMA_PFN_NONE)
				ucma_pages_free(a, p2);
		}
	}
	ok(tu_zones_ok(a, "reuse"), "invariants hold with runs on the lists");
	if (pinned)
		sched_setaffinity(0, sizeof(saved), &saved);
}

/* One CPU keeps pcp_pb_high pageblocks at most: the next ones freed go
 * to the buddy lists, and the counts stay exact. */
static void test_pageblock_bound(void)
{
	struct ucma_zone *z = normal();
	uint32_t pb[4];
	unsigned n = 0;
	cpu_set_t saved;
	bool pinned = stay_on_cpu(&saved);
	uint64_t nfree;

	if (!pinned || !z->pcp_pb_high) {
		skip(3, "%s", !pinned ? "cannot stay on one CPU" : "no pageblock lists");
		if (pinned)
			sched_setaffinity(0, sizeof(saved), &saved);
		return;
	}
	drain_all();
	nfree = free_total(z);
	while (n < UCMA_ARRAY_SIZE(pb) &&
	       (pb[n] = ucma_pages_alloc(a, UCMA_PAGEBLOCK_PAGES, UCMA_GFP_UNMOVABLE)) !=
		       UCMA_PFN_NONE)
		n++;
	for (unsigned i = 0; i < n; i++)
		ucma_pages_free(a, pb[i]);
	ok(n == UCMA_ARRAY_SIZE(pb) && ucma_pcp_pages(z) == (uint64_t)z->pcp_pb_high *
								    UCMA_PAGEBLOCK_PAGES,
	   "%u pageblocks freed on one CPU, %llu pages listed (at most %u pageblocks)", n,
	   (unsigned long long)ucma_pcp_pages(z), z->pcp_pb_high);
	ok(free_total(z) == nfree && tu_zone_free(z) == nfree,
	   "free pages exact: %llu before, %llu per buddyinfo, %llu buddy + listed",
	   (unsigned long long)nfree, (unsigned long long)free_total(z),
	   (unsigned long long)tu_zone_free(z));
	ok(tu_zones_ok(a, "pageblock bound"), "invariants hold");
	sched_setaffinity(0, sizeof(saved), &saved);
}

/* Allocate @n single movable pages in CMA into @pfns, then free them all:
 * the lists then hold runs of the zone's first pageblocks. */
static unsigned list_cma_pages(uint32_t *pfns, unsigned n)
{
	unsigned got = 0;

	while (got < n) {
		uint32_t pfn = ucma_pages_alloc(a, 1, UCMA_GFP_MOVABLE);

		if (pfn == UCMA_PFN_NONE)
			break;
		pfns[got++] = pfn;
	}
	for (unsigned i = 0; i < got; i++)
		ucma_pages_free(a, pfns[i]);
	return got;
}

static void test_isolation_drains(void)
{
	static uint32_t pfns[4096];
	struct ucma_zone *z = cma();
	uint32_t pb = UCMA_PFN_NONE, in_pb = 0, listed_in_pb = 0;
	bool direct = ucma_opt.compact_direct, handed = false;
	void *buf;

	drain_all();
	list_cma_pages(pfns, 40);
	ok(ucma_pcp_pages(z) > 0, "%llu pages of the CMA zone sit on per-CPU lists",
	   (unsigned long long)ucma_pcp_pages(z));

	/* The whole area: the one candidate holds the listed runs. */
	ucma_opt.compact_direct = false;
	buf = ucma_alloc(CMA, 0, 0);
	ucma_opt.compact_direct = direct;
	ok(buf != NULL, "ucma_alloc() of the whole area succeeds while its pages were listed (%s)",
	   buf ? "ok" : strerror(errno));
	ok(ucma_pcp_pages(z) == 0, "no page of the area is left on a list");
	ok(tu_zones_ok(a, "contiguous allocation"), "invariants hold with the area allocated");
	if (buf)
		ucma_release(buf);

	/* Isolate the first pageblock with runs of it on the lists: no list
	 * may hand one out.  Then allocate more than the lists held. */
	drain_all();
	list_cma_pages(pfns, 40);
	/* The pageblock of the first run listed, and how many of its runs are. */
	for (unsigned c = 0; c < z->nr_pcp; c++) {
		for (unsigned k = 0; k < UCMA_PCP_NR_CLASSES; k++) {
			for (uint32_t p = z->pcp[c].head[k][UCMA_MT_CMA]; p != UCMA_PFN_NONE;
			     p = a->pages[p].link.next) {
				if (pb == UCMA_PFN_NONE)
					pb = UCMA_ALIGN_DOWN(p, UCMA_PAGEBLOCK_PAGES);
				listed_in_pb += p >> UCMA_PAGEBLOCK_ORDER == pb >> UCMA_PAGEBLOCK_ORDER;
			}
		}
	}
	if (pb == UCMA_PFN_NONE)
		pb = z->start_pfn;
	ok(listed_in_pb > 0, "%u runs of pageblock %u are listed", listed_in_pb,
	   pb >> UCMA_PAGEBLOCK_ORDER);
	ok(ucma_isolate_range(a, pb, pb + UCMA_PAGEBLOCK_PAGES) == 0, "pageblock isolated");
	ok(tu_zones_ok(a, "isolated"), "invariants hold: no list holds a page of it");
	{
		unsigned n = 0;

		while (n < UCMA_ARRAY_SIZE(pfns)) {
			uint32_t pfn = ucma_pages_alloc(a, 1, UCMA_GFP_MOVABLE);

			if (pfn == UCMA_PFN_NONE || ucma_pfn_zone(a, pfn) != z)
				break;
			pfns[n++] = pfn;
			if (pfn >= pb && pfn < pb + UCMA_PAGEBLOCK_PAGES) {
				handed = true;
				in_pb = pfn;
			}
			if (n >= 4 * z->pcp_high * z->nr_pcp)
				break;
		}
		ok(!handed, "%u allocations, none in the isolated pageblock (%u)", n, in_pb);
		while (n)
			ucma_pages_free(a, pfns[--n]);
	}
	ok(cma()->isolated_free_pages == UCMA_PAGEBLOCK_PAGES,
	   "all of the isolated pageblock is free on the ISOLATE lists (%llu)",
	   (unsigned long long)cma()->isolated_free_pages);
	ucma_undo_isolate_range(a, pb, pb + UCMA_PAGEBLOCK_PAGES);
	ok(tu_zones_ok(a, "isolation undone"), "invariants hold after the isolation is undone");
}

/*
 * A run of @n pages freed to a list, then its pageblock isolated: the
 * run leaves the lists, and the whole pageblock is free on the ISOLATE
 * lists (nothing else of it is allocated).
 */
static void isolate_listed(uint32_t n)
{
	struct ucma_zone *z = cma();
	uint32_t pfn, pb;
	uint64_t nfree, after;
	unsigned left;
	bool isolated;

	drain_all();
	pfn = ucma_pages_alloc(a, n, UCMA_GFP_MOVABLE);
	if (pfn == UCMA_PFN_NONE || ucma_pfn_zone(a, pfn) != z) {
		ok(0, "%u movable pages from CMA", n);
		return;
	}
	pb = UCMA_ALIGN_DOWN(pfn, UCMA_PAGEBLOCK_PAGES);
	ucma_pages_free(a, pfn);
	nfree = free_total(z);
	if (n == UCMA_PAGEBLOCK_PAGES && !z->pcp_pb_high) {
		skip(3, "no pageblock lists in CMA");
		return;
	}
	ok((a->pages[pfn].flags & UCMA_PF_PCP) &&
		   tu_pcp_runs_in(z, pb, pb + UCMA_PAGEBLOCK_PAGES, NULL) > 0,
	   "%u pages: the run is listed, %u runs of its pageblock are", n,
	   tu_pcp_runs_in(z, pb, pb + UCMA_PAGEBLOCK_PAGES, NULL));
	isolated = ucma_isolate_range(a, pb, pb + UCMA_PAGEBLOCK_PAGES) == 0;
	left = tu_pcp_runs_in(z, pb, pb + UCMA_PAGEBLOCK_PAGES, NULL);
	after = free_total(z);
	ok(isolated && left == 0 && z->isolated_free_pages == UCMA_PAGEBLOCK_PAGES && after == nfree,
	   "%u pages: isolation drains them (%u runs left); the pageblock free on the ISOLATE "
	   "lists (%llu pages), free pages unchanged (%llu -> %llu)",
	   n, left, (unsigned long long)z->isolated_free_pages, (unsigned long long)nfree,
	   (unsigned long long)after);
	if (isolated)
		ucma_undo_isolate_range(a, pb, pb + UCMA_PAGEBLOCK_PAGES);
	ok(tu_zones_ok(a, "isolated and undone"), "%u pages: invariants hold", n);
}

static void test_isolation_new_lists(void)
{
	isolate_listed(3);
	isolate_listed(12);
	isolate_listed(UCMA_PAGEBLOCK_PAGES);
}

/* ---- many threads at once ---------------------------------------------- */

#define STORM_THREADS 4
#define STORM_STEPS 40000
#define STORM_LIVE 256

struct storm {
	uint64_t seed;
	unsigned fails;
	bool overlap;
};

static _Atomic bool storm_done;

static void *storm_thread(void *arg)
{
	static const uint32_t sizes[] = { 1, 1, 1, 2, 3, 4, 8, 16, 5, 33, 3, 7, 12,
					  UCMA_PAGEBLOCK_PAGES };
	struct storm *s = arg;
	uint32_t live[STORM_LIVE], npages[STORM_LIVE];
	unsigned nlive = 0, nbig = 0;

	for (int step = 0; step < STORM_STEPS; step++) {
		uint64_t r = tu_rand(&s->seed);

		if (nlive < STORM_LIVE && (r % 100 < 55 || nlive == 0)) {
			uint32_t n = sizes[(r >> 8) % UCMA_ARRAY_SIZE(sizes)];
			unsigned gfp = (r >> 16) & 1 ? UCMA_GFP_MOVABLE : UCMA_GFP_UNMOVABLE;
			uint32_t pfn;

			/* Two pageblocks per thread at most: the arena has 48. */
			if (n == UCMA_PAGEBLOCK_PAGES && nbig >= 2)
				n = 3;
			pfn = ucma_pages_alloc(a, n, gfp);
			if (pfn == UCMA_PFN_NONE) {
				s->fails++;
				continue;
			}
			/* Stamp every page of the run: two threads given the
			 * same page would see each other's stamp. */
			for (uint32_t p = 0; p < n; p++) {
				uint32_t *w = ucma_pfn_to_addr(a, pfn + p);

				w[0] = pfn + p;
				w[1] = (uint32_t)(uintptr_t)s;
			}
			nbig += n == UCMA_PAGEBLOCK_PAGES;
			live[nlive] = pfn;
			npages[nlive++] = n;
		} else {
			unsigned i = (unsigned)((r >> 8) % nlive);

			for (uint32_t p = 0; p < npages[i]; p++) {
				uint32_t *w = ucma_pfn_to_addr(a, live[i] + p);

				if (w[0] != live[i] + p || w[1] != (uint32_t)(uintptr_t)s)
					s->overlap = true;
			}
			if (a->pages[live[i]].aux != npages[i])
				s->overlap = true;
			nbig -= npages[i] == UCMA_PAGEBLOCK_PAGES;
			ucma_pages_free(a, live[i]);
			live[i] = live[--nlive];
			npages[i] = npages[nlive];
		}
	}
	while (nlive)
		ucma_pages_free(a, live[--nlive]);
	return NULL;
}

static void *checker_thread(void *arg)
{
	bool *good = arg;

	while (!atomic_load(&storm_done)) {
		if (!tu_zones_ok(a, "during the storm"))
			*good = false;
		sched_yield();
	}
	return NULL;
}

static void test_storm(void)
{
	pthread_t t[STORM_THREADS], checker;
	struct storm s[STORM_THREADS];
	bool during_ok = true, overlap = false;
	unsigned fails = 0;

	for (int i = 0; i < STORM_THREADS; i++) {
		s[i] = (struct storm){ .seed = 0x9e3779b9u * (uint64_t)(i + 1) };
		if (pthread_create(&t[i], NULL, storm_thread, &s[i]) != 0)
			bail_out("pthread_create: %s", strerror(errno));
	}
	if (pthread_create(&checker, NULL, checker_thread, &during_ok) != 0)
		bail_out("pthread_create: %s", strerror(errno));
	for (int i = 0; i < STORM_THREADS; i++) {
		pthread_join(t[i], NULL);
		fails += s[i].fails;
		overlap |= s[i].overlap;
	}
	atomic_store(&storm_done, true);
	pthread_join(checker, NULL);
	diag("%d threads x %d steps, %u allocations failed", STORM_THREADS, STORM_STEPS, fails);
	ok(!overlap, "no run handed to two threads at once");
	ok(during_ok, "zone invariants, lists included, hold during the storm");
	ok(tu_zones_ok(a, "after the storm"), "and after it");
	ok(free_total(normal()) == normal()->managed_pages && free_total(cma()) == cma()->managed_pages,
	   "every page counts as free again, listed or not");
}

/* ---- two threads, 3-page runs and pageblocks, every byte checked ------- */

#define DUO_STEPS 3000
#define DUO_WINDOW 8

struct duo {
	unsigned id;
	unsigned fails;
	uint64_t bad;		/* bytes found changed by someone else */
};

static void *duo_thread(void *arg)
{
	static const uint32_t lens[] = { 3, 3, 12, 5, 3, 7, 1, 3 };
	struct duo *d = arg;
	uint32_t run[DUO_WINDOW], len[DUO_WINDOW];
	uint8_t fill[DUO_WINDOW];

	for (unsigned i = 0; i < DUO_WINDOW; i++)
		run[i] = UCMA_PFN_NONE;
	for (unsigned step = 0; step < DUO_STEPS + DUO_WINDOW; step++) {
		unsigned i = step % DUO_WINDOW;

		if (run[i] != UCMA_PFN_NONE) {
			const uint8_t *b = ucma_pfn_to_addr(a, run[i]);

			for (size_t k = 0; k < (size_t)len[i] << UCMA_PAGE_SHIFT; k++)
				d->bad += b[k] != fill[i];
			ucma_pages_free(a, run[i]);
			run[i] = UCMA_PFN_NONE;
		}
		if (step >= DUO_STEPS)
			continue;
		/* Every 32nd a pageblock, unmovable (NORMAL) or movable (CMA). */
		len[i] = step % 32 == 0 ? UCMA_PAGEBLOCK_PAGES : lens[step % UCMA_ARRAY_SIZE(lens)];
		run[i] = ucma_pages_alloc(a, len[i], (step >> 3) & 1 ? UCMA_GFP_MOVABLE :
								       UCMA_GFP_UNMOVABLE);
		if (run[i] == UCMA_PFN_NONE) {
			d->fails++;
			continue;
		}
		fill[i] = (uint8_t)(d->id * 0x40 + step);
		memset(ucma_pfn_to_addr(a, run[i]), fill[i], (size_t)len[i] << UCMA_PAGE_SHIFT);
	}
	return NULL;
}

static void test_two_threads(void)
{
	struct duo d[2] = { { .id = 1 }, { .id = 2 } };
	pthread_t t;

	drain_all();
	if (pthread_create(&t, NULL, duo_thread, &d[1]) != 0)
		bail_out("pthread_create: %s", strerror(errno));
	duo_thread(&d[0]);
	pthread_join(t, NULL);
	ok(d[0].bad == 0 && d[1].bad == 0 && d[0].fails == 0 && d[1].fails == 0,
	   "two threads, 3-page runs and pageblocks: every byte as written (%llu and %llu "
	   "changed), no allocation failed (%u, %u)",
	   (unsigned long long)d[0].bad, (unsigned long long)d[1].bad, d[0].fails, d[1].fails);
	ok(tu_zones_ok(a, "two threads"), "invariants hold after them");
	ok(free_total(normal()) == normal()->managed_pages &&
		   free_total(cma()) == cma()->managed_pages &&
		   tu_zone_free(normal()) == normal()->managed_pages &&
		   tu_zone_free(cma()) == cma()->managed_pages,
	   "every page free again, to the page (NORMAL %llu/%llu, CMA %llu/%llu)",
	   (unsigned long long)free_total(normal()), (unsigned long long)normal()->managed_pages,
	   (unsigned long long)free_total(cma()), (unsigned long long)cma()->managed_pages);
}

static void test_counts_drain(void)
{
	uint64_t before[UCMA_ZONE_NR], after[UCMA_ZONE_NR], buddy[UCMA_ZONE_NR];
	uint64_t counts[UCMA_NR_ORDERS];
	uint32_t keep[64];
	static uint32_t pfns[256];
	bool exact = true, counted = true;

	/* Something allocated, and runs of several orders listed. */
	for (unsigned i = 0; i < UCMA_ARRAY_SIZE(keep); i++)
		keep[i] = ucma_pages_alloc(a, 1 + i % UCMA_PCP_MAX_PAGES,
					   i & 1 ? UCMA_GFP_MOVABLE : UCMA_GFP_UNMOVABLE);
	/* Runs of 1, 2, 3 and 7 pages, and a pageblock now and then. */
	for (unsigned i = 0; i < UCMA_ARRAY_SIZE(pfns); i++)
		pfns[i] = ucma_pages_alloc(a, i % 64 == 0 ? UCMA_PAGEBLOCK_PAGES :
					      (uint32_t[]){ 1, 2, 3, 7 }[i % 4],
					   UCMA_GFP_UNMOVABLE);
	for (unsigned i = 0; i < UCMA_ARRAY_SIZE(pfns); i += 2)
		if (pfns[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, pfns[i]);
	ok(ucma_pcp_pages(normal()) > 0, "%llu NORMAL pages listed",
	   (unsigned long long)ucma_pcp_pages(normal()));
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		before[zi] = free_total(&a->zones[zi]);
		counted &= before[zi] == tu_zone_free(&a->zones[zi]);
	}
	ok(counted, "buddyinfo counts the listed runs to the page (NORMAL %llu, buddy + listed %llu)",
	   (unsigned long long)before[0], (unsigned long long)tu_zone_free(normal()));
	drain_all();
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		struct ucma_zone *z = &a->zones[zi];

		after[zi] = free_total(z);
		buddy[zi] = 0;
		ucma_zone_free_counts(z, counts);
		for (unsigned o = 0; o < UCMA_NR_ORDERS; o++) {
			uint64_t b = 0;

			for (int mt = 0; mt < UCMA_MT_NR; mt++)
				b += z->free_area[o].nr_free[mt];
			exact &= counts[o] == b;
			buddy[zi] += b << o;
		}
	}
	ok(before[0] == after[0] && before[1] == after[1],
	   "free pages unchanged by the drain (NORMAL %llu -> %llu, CMA %llu -> %llu)",
	   (unsigned long long)before[0], (unsigned long long)after[0],
	   (unsigned long long)before[1], (unsigned long long)after[1]);
	ok(ucma_pcp_pages(normal()) == 0 && ucma_pcp_pages(cma()) == 0, "the lists are empty");
	ok(exact && buddy[0] == normal()->free_pages && buddy[1] == cma()->free_pages,
	   "free blocks per order are the buddy lists' alone after the drain");
	ok(tu_zones_ok(a, "after the drain"), "invariants hold after the drain");
	for (unsigned i = 1; i < UCMA_ARRAY_SIZE(pfns); i += 2)
		if (pfns[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, pfns[i]);
	for (unsigned i = 0; i < UCMA_ARRAY_SIZE(keep); i++)
		if (keep[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, keep[i]);
	drain_all();
	ok(normal()->free_pages == normal()->managed_pages &&
		   cma()->free_pages == cma()->managed_pages,
	   "everything freed and drained: every page on the buddy lists");
}

/* Runs on this CPU's lists of @npages in zone @z, every migratetype. */
static uint32_t listed_runs(struct ucma_zone *z, uint32_t npages)
{
	int cpu = sched_getcpu();
	const struct ucma_pcp *pcp = &z->pcp[(unsigned)(cpu < 0 ? 0 : cpu) % z->nr_pcp];
	uint32_t n = 0;

	for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++)
		n += __atomic_load_n(&pcp->nr[npages - 1][mt], __ATOMIC_RELAXED);
	return n;
}

/*
 * A list nobody took from for a few refills of other lengths goes back to
 * the buddy lists; a list in use stays.  @busy: a 3-page run is taken
 * and given back between the 5-page allocations.
 */
static void idle_case(bool busy)
{
	static uint32_t five[64];
	uint32_t three[6], n5 = 0, left, refills;
	struct ucma_zone *z = normal();
	bool got = true;

	drain_all();
	for (unsigned i = 0; i < UCMA_ARRAY_SIZE(three); i++)
		got &= (three[i] = ucma_pages_alloc(a, 3, UCMA_GFP_UNMOVABLE)) != UCMA_PFN_NONE;
	for (unsigned i = 0; got && i < UCMA_ARRAY_SIZE(three); i++)
		ucma_pages_free(a, three[i]);
	if (!got || listed_runs(z, 3) < UCMA_ARRAY_SIZE(three)) {
		ok(0, "%s: six 3-page runs listed (%u)", busy ? "busy" : "idle", listed_runs(z, 3));
		return;
	}
	/* 64 runs of 5 pages: a refill lists pcp_batch / 5 of them, so
	 * about ten refills. */
	for (; n5 < UCMA_ARRAY_SIZE(five); n5++) {
		if ((five[n5] = ucma_pages_alloc(a, 5, UCMA_GFP_UNMOVABLE)) == UCMA_PFN_NONE)
			break;
		if (busy) {
			uint32_t t = ucma_pages_alloc(a, 3, UCMA_GFP_UNMOVABLE);

			if (t != UCMA_PFN_NONE)
				ucma_pages_free(a, t);
		}
	}
	left = listed_runs(z, 3);
	refills = n5 / (z->pcp_batch >= 5 ? z->pcp_batch / 5 : 1);
	if (busy)
		ok(n5 == UCMA_ARRAY_SIZE(five) && left > 0,
		   "a 3-page list in use stays listed through %u refills of 5-page runs (%u runs)",
		   refills, left);
	else
		ok(n5 == UCMA_ARRAY_SIZE(five) && left == 0,
		   "an idle 3-page list goes back to the buddy lists during %u refills of 5-page "
		   "runs (%u runs still listed)",
		   refills, left);
	ok(tu_zones_ok(a, busy ? "busy list" : "idle list"), "invariants hold");
	for (unsigned i = 0; i < n5; i++)
		ucma_pages_free(a, five[i]);
	drain_all();
}

static void test_idle_lists(void)
{
	cpu_set_t saved;

	if (!stay_on_cpu(&saved)) {
		skip(4, "cannot stay on one CPU: %s", strerror(errno));
		return;
	}
	idle_case(false);
	idle_case(true);
	sched_setaffinity(0, sizeof(saved), &saved);
}

/* Is the run at @pfn on this CPU's lists of @npages in zone @z? */
static bool listed_run(struct ucma_zone *z, uint32_t pfn, uint32_t npages)
{
	int cpu = sched_getcpu();
	const struct ucma_pcp *pcp = &z->pcp[(unsigned)(cpu < 0 ? 0 : cpu) % z->nr_pcp];

	for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++)
		for (uint32_t p = pcp->head[npages - 1][mt]; p != UCMA_PFN_NONE;
		     p = a->pages[p].link.next)
			if (p == pfn)
				return true;
	return false;
}

/*
 * ucma_pcp_drain_dirty(): a run freed to a list (dirty: it may hold data)
 * goes back to the buddy lists; the runs a refill listed but nobody used
 * (clean, not resident) stay, except those of the length and type the
 * caller asks for next on this CPU, which would be handed out before
 * anything the drain gave back.  ucma_pcp_has_dirty() says whether any
 * list holds a dirty run.
 */
static void test_drain_dirty(void)
{
	struct ucma_zone *z = normal();
	uint32_t r, clean, r1;
	bool dirty;
	cpu_set_t saved;

	if (!stay_on_cpu(&saved)) {
		skip(7, "cannot stay on one CPU: %s", strerror(errno));
		return;
	}
	drain_all();
	ucma_zone_purge(z, true);	/* every free page clean: back to the kernel */
	r = ucma_pages_alloc(a, 3, UCMA_GFP_UNMOVABLE);
	clean = listed_runs(z, 3);
	if (r == UCMA_PFN_NONE || clean == 0) {
		ok(0, "set-up: a 3-page run, and a refill that listed more (%u)", clean);
		sched_setaffinity(0, sizeof(saved), &saved);
		return;
	}
	ok(!ucma_pcp_has_dirty(z), "only the refill's clean runs listed: no dirty run");
	ucma_pages_free(a, r);
	ok(listed_run(z, r, 3) && listed_runs(z, 3) == clean + 1 && ucma_pcp_has_dirty(z),
	   "the freed 3-page run is listed, dirty, with the %u clean runs of the refill", clean);
	ucma_pcp_drain_dirty(z, 0, UCMA_MT_UNMOVABLE);
	ok(!listed_run(z, r, 3) && listed_runs(z, 3) == clean && !ucma_pcp_has_dirty(z),
	   "draining the dirty runs gives it back and keeps the %u clean ones (%u listed)", clean,
	   listed_runs(z, 3));
	ok(tu_zones_ok(a, "drain dirty"), "invariants hold");

	/* Asked for with the next request's length: its clean runs go too,
	 * before the dirty ones, which a request for resident pages then
	 * finds on top of the buddy lists. */
	r1 = ucma_pages_alloc(a, 1, UCMA_GFP_UNMOVABLE);
	if (r1 == UCMA_PFN_NONE) {
		ok(0, "set-up: a 1-page run: %s", strerror(errno));
		sched_setaffinity(0, sizeof(saved), &saved);
		return;
	}
	memset(ucma_pfn_to_addr(a, r1), 1, UCMA_PAGE_SIZE);
	ucma_pages_free(a, r1);
	ucma_pcp_drain_dirty(z, 3, UCMA_MT_UNMOVABLE);
	ok(listed_runs(z, 3) == 0 && !listed_run(z, r1, 1),
	   "draining for 3-page requests gives back the dirty 1-page run and the clean 3-page "
	   "ones (%u listed)", listed_runs(z, 3));
	dirty = false;
	r = ucma_pages_alloc_dirty(a, 3, UCMA_GFP_UNMOVABLE | UCMA_GFP_RESIDENT, &dirty);
	ok(r != UCMA_PFN_NONE && dirty,
	   "a request for 3 resident pages is handed a block that may hold data (%u), not a clean "
	   "run", r);
	if (r != UCMA_PFN_NONE)
		ucma_pages_free(a, r);
	ok(tu_zones_ok(a, "drain for a length"), "invariants hold");
	sched_setaffinity(0, sizeof(saved), &saved);
	drain_all();
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = ARENA,
		.cma_size = CMA,
		.hugepages = UCMA_BACKING_NONE,
		.hugepages_normal = UCMA_BACKING_NONE,
		/* No CMA frames lent to the heap: the counts are the zones'. */
		.cma_policy = UCMA_CMA_LEND_HANDLES,
	};

	plan_no_plan();
	/* No compaction thread: it drains the lists, and the checks look at
	 * them at moments no other thread may. */
	setenv("UCMA_COMPACT", "0", 1);
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	a = ucma_arena_get();
	if (!normal()->pcp || !cma()->pcp) {
		skip(1, "no per-CPU lists");
		return done();
	}
	diag("%u CPUs, batch %u and high %u pages, %u pageblocks (NORMAL), %u, %u and %u (CMA)",
	     normal()->nr_pcp, normal()->pcp_batch, normal()->pcp_high, normal()->pcp_pb_high,
	     cma()->pcp_batch, cma()->pcp_high, cma()->pcp_pb_high);
	test_reuse();
	test_isolation_drains();
	test_isolation_new_lists();
	test_pageblock_bound();
	test_storm();
	test_two_threads();
	test_counts_drain();
	test_idle_lists();
	test_drain_dirty();
	return done();
}
