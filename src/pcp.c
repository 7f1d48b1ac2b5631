/*
 * pcp.c - per-CPU page lists: the kernel's per_cpu_pages for ucma's zones.
 *
 * Without them every run of pages costs a trip through the zone lock, and
 * the buddy allocator splits a large block down to the order asked for on
 * each allocation and merges it back on each free.  Two threads allocating
 * pages took 2.3 times one thread's time per operation, on one lock.
 *
 * Runs of 1 to UCMA_PCP_MAX_PAGES pages are freed to a list of the CPU
 * the thread runs on and allocated from it again, under a small lock of
 * that list only.  An empty list is refilled with pcp_batch pages' worth
 * of runs in one visit to the zone lock; a CPU whose lists hold more than
 * pcp_high pages gives pcp_batch back in one visit, and a list nobody
 * took from during a few refills of the CPU's other lists goes back whole
 * (release_idle()).  One list per length and migratetype: a page freed in
 * a MOVABLE pageblock goes to the MOVABLE list, and an unmovable request
 * never takes from it.
 *
 * Per length, not per order as in the kernel: a run of 3 pages (a 12 KiB
 * malloc) kept on an order-2 list would hold a fourth page for nothing,
 * or need splitting under the zone lock each time it is handed out, which
 * is the lock the lists are there to avoid.  A refill takes each run as a
 * buddy block of its order and gives the rest of the block back at once,
 * as an allocation without the lists does, so a listed run is aligned to
 * its order as callers expect (malloc's aligned runs rely on it).
 *
 * Whole pageblocks (2 MiB: large mallocs, huge-page sized buffers) have a
 * list too, as the kernel keeps one for the THP order: at most
 * pcp_pb_high pageblocks per CPU, 1, and none in a zone of fewer than 8
 * pageblocks per CPU, so the lists never hold more than an eighth of a
 * zone in pageblocks.  It is not refilled in batches: a pageblock freed
 * is kept for the next allocation of one on that CPU, which is what a
 * thread that frees and allocates 2 MiB runs in turn needs; past the
 * bound the free goes to the buddy lists.  Its pages do not count
 * towards pcp_high, which would otherwise be gone at once.
 *
 * Per CPU, not per thread.  The lists are indexed by sched_getcpu() (an
 * rseq read in glibc, no system call), each behind a lock that is
 * uncontended unless a thread is moved or preempted while holding it.
 * Per-thread lists would need no lock at all, but hold up to pcp_high
 * pages for every thread: memory that grows with the thread count and is
 * lost to everyone else while a thread sleeps.  Per CPU, the pages held
 * are bounded by CPUs x pcp_high per zone, whatever the program does.
 *
 * What a page on a list is: an allocated run with no owner (pcp.h), so
 * the buddy allocator, compaction and alloc-contig-range see it as in use
 * and leave it alone, and its owner fields are the list's.  The rules
 * that keep that safe:
 *  - Isolation (ucma_isolate_range()) takes every list lock of the zone,
 *    then the zone lock, marks the pageblocks isolated and moves the runs
 *    of the range from the lists to the buddy lists (which are then the
 *    ISOLATE lists), in one critical section.  A free checks isolation
 *    under its list lock and sends a run of an isolated pageblock to the
 *    buddy lists.  So no list ever holds, or hands out, a page of an
 *    isolated pageblock.  (Heap lending isolates only wholly free
 *    pageblocks, which no list can hold a page of.)
 *  - A page on a list counts as free where free memory is reported or
 *    judged: buddyinfo (ucma_zone_free_counts(), per order as the runs
 *    are), nr_free_pages, the compaction suitability check.  It does not
 *    count in z->free_pages, which stays the sum of the buddy lists that
 *    ucma_zone_check() verifies; that check also verifies every list.
 *  - What needs free pages merged drains first: an allocation that finds
 *    nothing in the buddy lists drains every list of the zone and tries
 *    again (the kernel's drain_all_pages() before giving up), as do
 *    compaction, malloc_trim's purge, and the search for a wholly free
 *    CMA pageblock to lend.  A new slab that would take pages not resident
 *    yet while a list of any CPU holds runs that may hold data (counted
 *    per CPU in nr_dirty, ucma_pcp_has_dirty()) drains those runs
 *    (ucma_pcp_drain_dirty(), slab.c), so that it takes them instead: a
 *    thread moved to another CPU leaves what it freed on the lists of the
 *    one it left.  The decay purge does not: pages on a list are the ones
 *    about to be used again.
 *  - fork: the zones' fork stage takes every list lock of a zone before
 *    its zone lock and releases them in both processes; the lists are
 *    memory, so the child has the same pages on the same lists.
 *
 * Sizing: pcp_batch is 32 pages (a 1/1024 of the zone when that is
 * smaller), pcp_high 4 x pcp_batch: about 512 KiB per CPU and zone at most
 * in runs (a refill may add up to a batch past it until the next free
 * drains), plus pcp_pb_high pageblocks.  Runs up to 16 pages (64 KiB),
 * more than the kernel's order 3: large mallocs and movable objects of up
 * to 64 KiB are common here, and pcp_high bounds the lists whatever the
 * lengths (tests/bench/RESULTS.md).
 *
 * Locking: see struct ucma_pcp (pcp.h).
 *
 * SPDX-License-Identifier: MIT
 */
#include "pcp.h"
#include "lock.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#define PCP_MAX_BATCH 32u
#define PCP_HIGH_BATCHES 4u
#define PCP_MAX_CPUS 4096
/* Pageblocks of the zone per CPU below which no pageblock is listed. */
#define PCP_PB_MIN_PER_CPU 8u

static size_t pcp_bytes(unsigned n)
{
	return UCMA_ALIGN_UP((size_t)n * sizeof(struct ucma_pcp), UCMA_PAGE_SIZE);
}

int ucma_pcp_init(struct ucma_zone *z)
{
	int ncpu = get_nprocs_conf();
	unsigned n = ncpu < 1 ? 1 : ncpu > PCP_MAX_CPUS ? PCP_MAX_CPUS : (unsigned)ncpu;
	uint64_t batch = z->managed_pages / 1024;
	void *p;

	z->pcp = NULL;
	z->nr_pcp = 0;
	if (z->managed_pages == 0)
		return 0;
	p = ucma_os.mmap(NULL, pcp_bytes(n), PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	z->pcp = p;
	z->nr_pcp = n;
	z->pcp_batch = batch < 1 ? 1 : batch > PCP_MAX_BATCH ? PCP_MAX_BATCH : (uint32_t)batch;
	z->pcp_high = PCP_HIGH_BATCHES * z->pcp_batch;
	z->pcp_pb_high = (z->managed_pages >> UCMA_PAGEBLOCK_ORDER) >= PCP_PB_MIN_PER_CPU * n;
	for (unsigned c = 0; c < n; c++)
		for (unsigned k = 0; k < UCMA_PCP_NR_CLASSES; k++)
			for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++)
				z->pcp[c].head[k][mt] = UCMA_PFN_NONE;
	return 0;
}

void ucma_pcp_fini(struct ucma_zone *z)
{
	if (z->pcp)
		ucma_os.munmap(z->pcp, pcp_bytes(z->nr_pcp));
	z->pcp = NULL;
	z->nr_pcp = 0;
}

static struct ucma_pcp *this_pcp(struct ucma_zone *z)
{
	int cpu = sched_getcpu();

	return &z->pcp[cpu < 0 ? 0 : (unsigned)cpu % z->nr_pcp];
}

/* The list class of a run of @npages (ucma_pcp_eligible()). */
static unsigned class_of(uint32_t npages)
{
	return npages == UCMA_PAGEBLOCK_PAGES ? UCMA_PCP_PB_CLASS : npages - 1;
}

/* The counts are read without the lock (ucma_pcp_pages(),
 * ucma_pcp_has_dirty()): atomic stores.  A run of class @k joins (@n = 1)
 * or leaves (@n = -1) the lists, holding data or not (@dirty). */
static void count_add(struct ucma_pcp *pcp, unsigned k, int n, bool dirty)
{
	int64_t pages = n * (int64_t)(k + 1);

	if (k == UCMA_PCP_PB_CLASS) {
		__atomic_store_n(&pcp->nr_pb, (uint32_t)((int)pcp->nr_pb + n), __ATOMIC_RELAXED);
		return;
	}
	__atomic_store_n(&pcp->count, (uint32_t)((int64_t)pcp->count + pages), __ATOMIC_RELAXED);
	if (dirty)
		__atomic_store_n(&pcp->nr_dirty, (uint32_t)((int64_t)pcp->nr_dirty + pages),
				 __ATOMIC_RELAXED);
}

bool ucma_pcp_has_dirty(const struct ucma_zone *z)
{
	for (unsigned c = 0; c < z->nr_pcp; c++)
		if (__atomic_load_n(&z->pcp[c].nr_dirty, __ATOMIC_RELAXED))
			return true;
	return false;
}

uint64_t ucma_pcp_pages(const struct ucma_zone *z)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < z->nr_pcp; c++)
		n += __atomic_load_n(&z->pcp[c].count, __ATOMIC_RELAXED) +
		     ((uint64_t)__atomic_load_n(&z->pcp[c].nr_pb, __ATOMIC_RELAXED)
		      << UCMA_PAGEBLOCK_ORDER);
	return n;
}

uint64_t ucma_pcp_events(const struct ucma_arena *a, bool alloc)
{
	uint64_t n = 0;

	for (int zi = 0; a && zi < UCMA_ZONE_NR; zi++) {
		const struct ucma_zone *z = &a->zones[zi];

		for (unsigned c = 0; c < z->nr_pcp; c++)
			n += __atomic_load_n(alloc ? &z->pcp[c].nr_alloc : &z->pcp[c].nr_free,
					     __ATOMIC_RELAXED);
	}
	return n;
}

/* Put the run at @pfn on list (@k, @mt); lock held. */
static void list_push(struct ucma_zone *z, struct ucma_pcp *pcp, uint32_t pfn, unsigned k, int mt,
		      bool dirty)
{
	struct ucma_page *p = &z->arena->pages[pfn];

	p->flags = (uint8_t)(UCMA_PF_PCP | (dirty ? UCMA_PF_DIRTY : 0));
	UCMA_PG_SET(p, link.next, pcp->head[k][mt]);
	pcp->head[k][mt] = pfn;
	pcp->nr[k][mt]++;
	pcp->idle[k][mt] = 0;
	count_add(pcp, k, 1, dirty);
}

/* Take the first run of list (@k, @mt); lock held, list not empty. */
static uint32_t list_pop(struct ucma_zone *z, struct ucma_pcp *pcp, unsigned k, int mt)
{
	uint32_t pfn = pcp->head[k][mt];

	pcp->head[k][mt] = z->arena->pages[pfn].link.next;
	pcp->nr[k][mt]--;
	pcp->idle[k][mt] = 0;
	count_add(pcp, k, -1, z->arena->pages[pfn].flags & UCMA_PF_DIRTY);
	return pfn;
}

/* Give the first run of list (@k, @mt) back; both locks held. */
static void release_one(struct ucma_zone *z, struct ucma_pcp *pcp, unsigned k, int mt)
{
	uint32_t pfn = list_pop(z, pcp, k, mt);
	bool dirty = z->arena->pages[pfn].flags & UCMA_PF_DIRTY;

	ucma_zone_pcp_release_locked(z, pfn, ucma_pcp_class_pages(k), dirty);
}

/*
 * Give back the run that *@link names, inside list (@k, @mt) (@link: the
 * list's head, or the link word of the run before it); both locks held.
 * A run's link word is also its owner word, which lock-free readers load:
 * stored atomically.
 */
static void release_after(struct ucma_zone *z, struct ucma_pcp *pcp, unsigned k, int mt,
			  uint32_t *link)
{
	struct ucma_page *pages = z->arena->pages;
	uint32_t pfn = *link;
	bool dirty = pages[pfn].flags & UCMA_PF_DIRTY;

	__atomic_store_n(link, pages[pfn].link.next, __ATOMIC_RELAXED);
	pcp->nr[k][mt]--;
	count_add(pcp, k, -1, dirty);
	ucma_zone_pcp_release_locked(z, pfn, ucma_pcp_class_pages(k), dirty);
}

/*
 * Down to pcp_high - pcp_batch pages in runs (lock held): the longest
 * runs of the other lists first (they are what the buddy lists can merge
 * into what others need), then of list (@hot, @hot_mt) all but its head,
 * the run just freed, which is the one the next allocation wants.  The
 * pageblock lists have their own bound and are left alone.
 */
static void drain_some(struct ucma_zone *z, struct ucma_pcp *pcp, unsigned hot, int hot_mt)
{
	uint32_t target = z->pcp_high - z->pcp_batch;
	struct ucma_page *pages = z->arena->pages;
	uint32_t head = pcp->head[hot][hot_mt];

	ucma_mutex_lock(&z->lock);
	for (int k = UCMA_PCP_MAX_PAGES - 1; k >= 0 && pcp->count > target; k--)
		for (int mt = 0; mt < UCMA_PCP_NR_MT && pcp->count > target; mt++)
			while (pcp->nr[k][mt] && pcp->count > target &&
			       !((unsigned)k == hot && mt == hot_mt))
				release_one(z, pcp, (unsigned)k, mt);
	while (pcp->count > target && pcp->nr[hot][hot_mt] > 1)
		release_after(z, pcp, hot, hot_mt, &pages[head].link.next);
	ucma_mutex_unlock(&z->lock);
}

/*
 * A refill of list (@hot, @hot_mt) ages the other lists of runs; one that
 * was not used for PCP_IDLE_REFILLS refills goes back to the buddy lists
 * whole (lock held).  A program whose slabs or blocks moved on to another
 * length would otherwise touch fresh pages for it while up to pcp_high of
 * its old ones wait on lists nobody takes from; given back, they merge
 * into what the refill takes (bench_malloc "small-batch", preloaded: peak
 * RSS 10.1 -> 8.7 MiB, tests/bench/RESULTS.md).  Lists in use are left
 * alone, whatever they hold.
 */
#define PCP_IDLE_REFILLS 4u

static void release_idle(struct ucma_zone *z, struct ucma_pcp *pcp, unsigned hot, int hot_mt)
{
	bool locked = false;

	for (unsigned k = 0; k < UCMA_PCP_PB_CLASS; k++)
		for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++) {
			if (!pcp->nr[k][mt] || (k == hot && mt == hot_mt) ||
			    ++pcp->idle[k][mt] < PCP_IDLE_REFILLS)
				continue;
			if (!locked) {
				ucma_mutex_lock(&z->lock);
				locked = true;
			}
			while (pcp->nr[k][mt])
				release_one(z, pcp, k, mt);
		}
	if (locked)
		ucma_mutex_unlock(&z->lock);
}

uint32_t ucma_pcp_alloc(struct ucma_zone *z, uint32_t npages, int mt, unsigned gfp,
			uint32_t *lend_pb, bool *dirty, bool *wake, bool *grow)
{
	struct ucma_arena *a = z->arena;
	struct ucma_pcp *pcp = this_pcp(z);
	uint8_t flags = (gfp & UCMA_GFP_MOVABLE) ? UCMA_PF_MOVABLE : 0;
	unsigned k = class_of(npages);
	uint32_t pfn;

	ucma_lock(&pcp->lock);
	if (pcp->head[k][mt] != UCMA_PFN_NONE) {
		pfn = list_pop(z, pcp, k, mt);
		*dirty = a->pages[pfn].flags & UCMA_PF_DIRTY;
	} else if (k == UCMA_PCP_PB_CLASS) {
		ucma_unlock(&pcp->lock);
		return UCMA_PFN_NONE;	/* not refilled: see above */
	} else {
		uint32_t pfns[PCP_MAX_BATCH];
		bool d[PCP_MAX_BATCH];
		unsigned want = z->pcp_batch / npages, got;

		release_idle(z, pcp, k, mt);
		got = ucma_zone_pcp_refill(z, npages, gfp, pfns, d, want ? want : 1, lend_pb, wake,
					   grow);
		if (got == 0) {
			ucma_unlock(&pcp->lock);
			return UCMA_PFN_NONE;
		}
		/* The lowest run is handed out, the rest listed so that the
		 * next allocations go up in address. */
		for (unsigned i = got; i-- > 1;)
			list_push(z, pcp, pfns[i], k, mt, d[i]);
		pfn = pfns[0];
		*dirty = d[0];
	}
	/* The run's flags are its owner's from here on. */
	for (uint32_t i = 0; i < npages; i++)
		a->pages[pfn + i].flags = flags;
	UCMA_PG_SET(&a->pages[pfn], owner, 0);
	__atomic_store_n(&pcp->nr_alloc, pcp->nr_alloc + 1, __ATOMIC_RELAXED);
	ucma_unlock(&pcp->lock);
	return pfn;
}

int ucma_pcp_free(struct ucma_zone *z, uint32_t pfn, uint32_t npages)
{
	struct ucma_arena *a = z->arena;
	struct ucma_pageblock *pb = ucma_pfn_block(a, pfn);
	struct ucma_pcp *pcp = this_pcp(z);
	unsigned k = class_of(npages);
	int mt, listed = 1;

	ucma_lock(&pcp->lock);
	/* Stable under any pcp lock: isolation holds all of them. */
	if (__atomic_load_n(&pb->isolate_count, __ATOMIC_ACQUIRE) ||
	    (k == UCMA_PCP_PB_CLASS && pcp->nr_pb >= z->pcp_pb_high)) {
		ucma_unlock(&pcp->lock);
		return 0;
	}
	mt = __atomic_load_n(&pb->mt, __ATOMIC_RELAXED);
	if (mt >= UCMA_PCP_NR_MT) {
		ucma_unlock(&pcp->lock);
		return 0;
	}
	/* Forget the owner first, so a stale pointer into the run finds none
	 * (owner_type with release, as ucma_run_set_owner() writes it). */
	for (uint32_t i = 0; i < npages; i++) {
		__atomic_store_n(&a->pages[pfn + i].owner, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&a->pages[pfn + i].owner_type, (uint8_t)UCMA_OWN_NONE,
				 __ATOMIC_RELEASE);
	}
	list_push(z, pcp, pfn, k, mt, true);
	__atomic_store_n(&pcp->nr_free, pcp->nr_free + 1, __ATOMIC_RELAXED);
	if (pcp->count > z->pcp_high) {
		drain_some(z, pcp, k, mt);
		listed = 2;
	}
	ucma_unlock(&pcp->lock);
	return listed;
}

/* Every list of @pcp back to the buddy lists; both locks held. */
static void drain_pcp_locked(struct ucma_zone *z, struct ucma_pcp *pcp)
{
	for (unsigned k = 0; k < UCMA_PCP_NR_CLASSES; k++)
		for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++)
			while (pcp->nr[k][mt])
				release_one(z, pcp, k, mt);
}

void ucma_pcp_drain_zone(struct ucma_zone *z)
{
	for (unsigned c = 0; c < z->nr_pcp; c++) {
		struct ucma_pcp *pcp = &z->pcp[c];

		ucma_lock(&pcp->lock);
		if (pcp->count || pcp->nr_pb) {
			ucma_mutex_lock(&z->lock);
			drain_pcp_locked(z, pcp);
			ucma_mutex_unlock(&z->lock);
		}
		ucma_unlock(&pcp->lock);
	}
}

/* The runs of list (@k, @mt) that may hold data (@dirty), or the clean
 * ones, back to the buddy lists; both locks held. */
static void release_by_dirt_locked(struct ucma_zone *z, struct ucma_pcp *pcp, unsigned k, int mt,
				   bool dirty)
{
	struct ucma_page *pages = z->arena->pages;

	for (uint32_t *link = &pcp->head[k][mt]; *link != UCMA_PFN_NONE;) {
		if (!(pages[*link].flags & UCMA_PF_DIRTY) == !dirty)
			release_after(z, pcp, k, mt, link);
		else
			link = &pages[*link].link.next;
	}
}

void ucma_pcp_drain_dirty(struct ucma_zone *z, uint32_t npages, int mt)
{
	struct ucma_pcp *self = this_pcp(z);

	/* The clean runs first, so that the dirty ones end up on top of the
	 * buddy lists, where a request for resident pages looks. */
	if (npages >= 1 && npages <= UCMA_PCP_MAX_PAGES && mt >= 0 && mt < UCMA_PCP_NR_MT) {
		ucma_lock(&self->lock);
		if (self->nr[class_of(npages)][mt]) {
			ucma_mutex_lock(&z->lock);
			release_by_dirt_locked(z, self, class_of(npages), mt, false);
			ucma_mutex_unlock(&z->lock);
		}
		ucma_unlock(&self->lock);
	}
	for (unsigned c = 0; c < z->nr_pcp; c++) {
		struct ucma_pcp *pcp = &z->pcp[c];

		if (!__atomic_load_n(&pcp->nr_dirty, __ATOMIC_RELAXED))
			continue;
		ucma_lock(&pcp->lock);
		if (pcp->nr_dirty) {
			ucma_mutex_lock(&z->lock);
			for (unsigned k = 0; k < UCMA_PCP_PB_CLASS; k++)
				for (int t = 0; t < UCMA_PCP_NR_MT; t++)
					release_by_dirt_locked(z, pcp, k, t, true);
			ucma_mutex_unlock(&z->lock);
		}
		ucma_unlock(&pcp->lock);
	}
}

void ucma_pcp_lock_all(struct ucma_zone *z)
{
	for (unsigned c = 0; c < z->nr_pcp; c++)
		ucma_lock(&z->pcp[c].lock);
}

void ucma_pcp_unlock_all(struct ucma_zone *z)
{
	for (unsigned c = z->nr_pcp; c-- > 0;)
		ucma_unlock(&z->pcp[c].lock);
}

void ucma_pcp_drain_range_locked(struct ucma_zone *z, uint32_t start, uint32_t end)
{
	struct ucma_page *pages = z->arena->pages;

	for (unsigned c = 0; c < z->nr_pcp; c++) {
		struct ucma_pcp *pcp = &z->pcp[c];

		for (unsigned k = 0; k < UCMA_PCP_NR_CLASSES; k++) {
			for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++) {
				uint32_t *link = &pcp->head[k][mt];

				while (*link != UCMA_PFN_NONE) {
					if (*link < start || *link >= end)
						link = &pages[*link].link.next;
					else
						release_after(z, pcp, k, mt, link);
				}
			}
		}
	}
}

void ucma_pcp_counts_locked(struct ucma_zone *z, uint64_t counts[UCMA_NR_ORDERS])
{
	for (unsigned c = 0; c < z->nr_pcp; c++)
		for (unsigned k = 0; k < UCMA_PCP_NR_CLASSES; k++)
			for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++)
				for (unsigned o = 0; o < UCMA_NR_ORDERS; o++)
					if (ucma_pcp_class_pages(k) & (1u << o))
						counts[o] += z->pcp[c].nr[k][mt];
}

#define CHECK(cond, ...)                                      \
	do {                                                  \
		if (!(cond)) {                                \
			snprintf(why, whylen, __VA_ARGS__);   \
			return -1;                            \
		}                                             \
	} while (0)

int ucma_pcp_check_locked(struct ucma_zone *z, char *why, size_t whylen)
{
	struct ucma_arena *a = z->arena;

	for (unsigned c = 0; c < z->nr_pcp; c++) {
		const struct ucma_pcp *pcp = &z->pcp[c];
		uint64_t pages = 0, dirty = 0, pbs = 0;

		for (unsigned k = 0; k < UCMA_PCP_NR_CLASSES; k++) {
			uint32_t len = ucma_pcp_class_pages(k);

			for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++) {
				uint64_t n = 0;

				for (uint32_t pfn = pcp->head[k][mt]; pfn != UCMA_PFN_NONE;
				     pfn = a->pages[pfn].link.next) {
					const struct ucma_page *p = &a->pages[pfn];
					const struct ucma_pageblock *pb = ucma_pfn_block(a, pfn);

					CHECK(pfn >= z->start_pfn && pfn + len <= z->end_pfn,
					      "pcp %u list %u mt %d: pfn %u outside the zone", c, len,
					      mt, pfn);
					CHECK(p->kind == UCMA_PK_RUN && p->aux == len &&
						      (p->flags & UCMA_PF_PCP) &&
						      p->owner_type == UCMA_OWN_NONE,
					      "pcp %u list %u mt %d: pfn %u is no unowned run of "
					      "%u pages (kind %u aux %u flags %#x owner_type %u)",
					      c, len, mt, pfn, len, p->kind, p->aux, p->flags,
					      p->owner_type);
					for (uint32_t i = 1; i < len; i++)
						CHECK(a->pages[pfn + i].kind == UCMA_PK_TAIL &&
							      a->pages[pfn + i].aux == pfn,
						      "pcp %u: run %u has a bad tail %u", c, pfn,
						      pfn + i);
					CHECK(!pb->isolate_count && pb->mt != UCMA_MT_ISOLATE,
					      "pcp %u list %u mt %d: pfn %u in an isolated "
					      "pageblock", c, len, mt, pfn);
					CHECK((pfn >> UCMA_PAGEBLOCK_ORDER) ==
						      ((pfn + len - 1) >> UCMA_PAGEBLOCK_ORDER),
					      "pcp %u: run %u crosses a pageblock", c, pfn);
					/* A whole pageblock has no free page a steal
					 * could change its type for. */
					CHECK(k != UCMA_PCP_PB_CLASS || pb->mt == mt,
					      "pcp %u: pageblock %u of type %d on list %d", c,
					      pfn >> UCMA_PAGEBLOCK_ORDER, pb->mt, mt);
					n++;
					if (k != UCMA_PCP_PB_CLASS && (p->flags & UCMA_PF_DIRTY))
						dirty += len;
					CHECK(n <= z->managed_pages, "pcp %u list %u mt %d: loops",
					      c, len, mt);
				}
				CHECK(n == pcp->nr[k][mt], "pcp %u list %u mt %d: %llu runs, "
				      "counted %u", c, len, mt, (unsigned long long)n,
				      pcp->nr[k][mt]);
				if (k == UCMA_PCP_PB_CLASS)
					pbs += n;
				else
					pages += n * len;
			}
		}
		CHECK(pages == pcp->count, "pcp %u: %llu pages listed, counted %u", c,
		      (unsigned long long)pages, pcp->count);
		CHECK(dirty == pcp->nr_dirty, "pcp %u: %llu dirty pages listed, counted %u", c,
		      (unsigned long long)dirty, pcp->nr_dirty);
		CHECK(pbs == pcp->nr_pb && pbs <= z->pcp_pb_high,
		      "pcp %u: %llu pageblocks listed, counted %u, at most %u", c,
		      (unsigned long long)pbs, pcp->nr_pb, z->pcp_pb_high);
	}
	return 0;
}
