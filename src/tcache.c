/*
 * tcache.c - per-thread caches of the malloc family.
 *
 * Each thread has one struct ucma_tcache: per size class a bin, a stack of
 * freed objects that malloc pops and free pushes without atomics or locks.
 * An empty bin is refilled with a batch from the central bin (slab.c); a
 * full one gives its older half back in one batch, under one bin lock.  A
 * cached object keeps its slab pinned (the slab bitmap counts it as taken),
 * and its memory holds the free marker written by malloc.c, so nothing of
 * the cache lives in the user's memory but that marker.
 *
 * The TLS slot (initial-exec, one pointer) is NULL until the thread's
 * first malloc-family call creates the cache; while the cache is being
 * created and after the thread's destructor ran it points to
 * ucma_tcache_dummy, whose bins have no room, so every call goes to the
 * central bins.  A pthread key's destructor returns the cache's objects
 * when the thread exits and folds its counters into the totals of exited
 * threads; the structure is recycled for the next thread.
 *
 * A bin nobody used for a while gives half its objects back (the GC, run
 * from the slow paths); ucma_trim() and thread exit flush everything.
 *
 * Counters: each bin counts the objects it handed out (malloc's fast path)
 * and the balance of objects it took from and gave back to the slabs (slow
 * paths only); the frees follow from these and the fill level, so free's
 * fast path counts nothing.  The statistics sum them over the registry of
 * live caches plus the totals of exited threads (and of calls made without
 * a cache), weighting by class size for the allocated bytes.  Other
 * threads read a cache's counters, fill levels and stack slots (the
 * statistics, and free()'s double-free look), so the owner writes them
 * with atomic stores; tcache.h states the rule of every field.
 *
 * Locking: reg_lock protects the registry, the recycled structures and
 * the exited totals; it is never held while a bin lock is taken.  Fork:
 * the child keeps the forking thread's cache; the caches of the threads
 * that do not exist in the child are retired (their objects are lost to
 * the child, their counters kept).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "tcache.h"

#include <errno.h>
#include <string.h>

__thread struct ucma_tcache *ucma_tcache_tls __attribute__((tls_model("initial-exec")));
struct ucma_tcache ucma_tcache_dummy;

/* Totals of exited threads and of calls made without a cache. */
struct tc_totals {
	uint64_t nmalloc[UCMA_NR_CLASSES];
	uint64_t nfree[UCMA_NR_CLASSES];
	uint64_t large_nmalloc, large_nfree, large_bytes, large_pages;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ucma_tcache *reg_list;	/* live caches */
static struct ucma_tcache *reg_free;	/* recycled structures */
static struct tc_totals totals;		/* reg_lock, or atomics */
static pthread_key_t tc_key;
static bool tc_key_ok;
static size_t tc_size;			/* bytes of one cache */
static uint16_t bin_cap[UCMA_NR_CLASSES];

/*
 * Capacity of a bin: many small objects, few large ones, so a cache holds
 * a bounded number of bytes (2.7 MiB if every bin were full, half of it in
 * the 8 classes above 8 KiB; the GC empties bins that fall idle) and a
 * refill of half a bin takes one lock for a useful batch.
 */
static uint16_t cap_for(uint32_t size)
{
	if (size <= 128)
		return UCMA_TBIN_MAX_CAP;
	if (size <= 512)
		return 64;
	if (size <= 2048)
		return 32;
	if (size <= 8192)
		return 16;
	return 8;
}

static void tcache_destroy(void *arg);

void ucma_tcache_init(void)
{
	size_t nslots = 0;

	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		bin_cap[c] = cap_for(ucma_classes[c].size);
		nslots += bin_cap[c];
	}
	tc_size = sizeof(struct ucma_tcache) + nslots * sizeof(void *);
	tc_key_ok = pthread_key_create(&tc_key, tcache_destroy) == 0;
}

static void tcache_setup(struct ucma_tcache *tc)
{
	void **slot = tc->slots;

	memset(tc, 0, sizeof(*tc));
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		struct ucma_tbin *b = &tc->bins[c];

		b->stack = slot;
		b->cap = bin_cap[c];
		b->fill = (uint16_t)(bin_cap[c] / 2 ? bin_cap[c] / 2 : 1);
		slot += bin_cap[c];
	}
}

struct ucma_tcache *ucma_tcache_create(void)
{
	struct ucma_tcache *tc;

	/* Calls made while the cache is being created (pthread_setspecific
	 * may allocate) are served without one. */
	ucma_tcache_tls = &ucma_tcache_dummy;
	pthread_mutex_lock(&reg_lock);
	tc = reg_free;
	if (tc)
		reg_free = tc->next;
	pthread_mutex_unlock(&reg_lock);
	if (!tc)
		tc = ucma_meta_alloc(tc_size);
	if (!tc)
		return &ucma_tcache_dummy;
	tcache_setup(tc);
	tc->binset = ucma_slab_binset_next();
	pthread_mutex_lock(&reg_lock);
	tc->next = reg_list;
	if (reg_list)
		reg_list->prev = tc;
	reg_list = tc;
	pthread_mutex_unlock(&reg_lock);
	if (tc_key_ok)
		pthread_setspecific(tc_key, tc);
	ucma_tcache_tls = tc;
	return tc;
}

/* Fold @tc's counters into the totals and unlink it (reg_lock held). */
static void tcache_retire_locked(struct ucma_tcache *tc)
{
	/* Atomics: calls without a cache add to the totals without the lock. */
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		const struct ucma_tbin *b = &tc->bins[c];

		__atomic_fetch_add(&totals.nmalloc[c], b->nmalloc, __ATOMIC_RELAXED);
		__atomic_fetch_add(&totals.nfree[c], b->nmalloc - b->held + b->n,
				   __ATOMIC_RELAXED);
	}
	__atomic_fetch_add(&totals.large_nmalloc, tc->large_nmalloc, __ATOMIC_RELAXED);
	__atomic_fetch_add(&totals.large_nfree, tc->large_nfree, __ATOMIC_RELAXED);
	__atomic_fetch_add(&totals.large_bytes, tc->large_bytes, __ATOMIC_RELAXED);
	__atomic_fetch_add(&totals.large_pages, tc->large_pages, __ATOMIC_RELAXED);
	if (tc->prev)
		tc->prev->next = tc->next;
	else
		reg_list = tc->next;
	if (tc->next)
		tc->next->prev = tc->prev;
	tc->prev = NULL;
	tc->next = reg_free;
	reg_free = tc;
}

/* Thread exit: the key's destructor. */
static void tcache_destroy(void *arg)
{
	struct ucma_tcache *tc = arg;

	ucma_tcache_tls = &ucma_tcache_dummy;
	ucma_tcache_flush_all(tc);
	pthread_mutex_lock(&reg_lock);
	tcache_retire_locked(tc);
	pthread_mutex_unlock(&reg_lock);
}

/*
 * Give the oldest objects of bin @b back so that @keep remain.  They
 * leave the stack before they reach their slabs: another thread's
 * ucma_tcache_any_holds() may miss them for a moment, but never finds a
 * block in a stale slot after a slab handed it out again.
 */
static void bin_flush(struct ucma_tbin *b, unsigned cls, unsigned keep)
{
	void *out[UCMA_TBIN_MAX_CAP];
	unsigned n = b->n;
	unsigned nflush = n - keep;

	if (n <= keep)
		return;
	memcpy(out, b->stack, nflush * sizeof(void *));
	for (unsigned i = 0; i < keep; i++)
		__atomic_store_n(&b->stack[i], b->stack[nflush + i], __ATOMIC_RELAXED);
	__atomic_store_n(&b->n, (uint16_t)keep, __ATOMIC_RELEASE);
	ucma_slab_free_batch(cls, out, nflush);
	ucma_relaxed_add(&b->held, -(uint64_t)nflush);
}

/*
 * Garbage collection: a bin that nobody used between two looks gives half
 * of its objects back, so a class a thread stopped using does not keep
 * slabs pinned.  Activity is read from the bin's counters, so the fast
 * paths pay nothing; the GC runs a step every GC_EVENTS slow-path calls,
 * looking at GC_BINS bins a step.
 */
#define GC_EVENTS 64
#define GC_BINS   8

static void tcache_gc_step(struct ucma_tcache *tc)
{
	tc->gc_events = 0;
	for (unsigned k = 0; k < GC_BINS; k++) {
		unsigned c = tc->gc_next++ % UCMA_NR_CLASSES;
		struct ucma_tbin *b = &tc->bins[c];
		uint32_t now = (uint32_t)(b->nmalloc + b->held + b->n);

		if (now == tc->gc_mark[c] && b->n)
			bin_flush(b, c, b->n / 2u);
		tc->gc_mark[c] = now;
	}
}

static inline void tcache_event(struct ucma_tcache *tc)
{
	if (UCMA_UNLIKELY(++tc->gc_events >= GC_EVENTS))
		tcache_gc_step(tc);
}

void *ucma_tcache_alloc_slow(struct ucma_tcache *tc, unsigned cls)
{
	struct ucma_tbin *b = &tc->bins[cls];
	unsigned got;
	void *p;

	if (tc == &ucma_tcache_dummy) {
		if (ucma_slab_alloc_batch(0, cls, &p, 1) == 0)
			return NULL;
		__atomic_fetch_add(&totals.nmalloc[cls], 1, __ATOMIC_RELAXED);
		return p;
	}
	tcache_event(tc);
	got = ucma_slab_alloc_batch(tc->binset, cls, b->stack, b->fill);
	if (got == 0)
		return NULL;
	/* Pop in address order: the lowest object goes on top.  Atomic
	 * stores: the slots may be read by ucma_tcache_any_holds(), which
	 * looks below the count only, but may have read an older count. */
	for (unsigned i = 0, j = got - 1; i < j; i++, j--) {
		void *t = b->stack[i];

		__atomic_store_n(&b->stack[i], b->stack[j], __ATOMIC_RELAXED);
		__atomic_store_n(&b->stack[j], t, __ATOMIC_RELAXED);
	}
	p = b->stack[got - 1];
	__atomic_store_n(&b->n, (uint16_t)(got - 1), __ATOMIC_RELEASE);
	ucma_relaxed_add(&b->held, got);
	ucma_relaxed_add(&b->nmalloc, 1);
	return p;
}

void ucma_tcache_free_slow(struct ucma_tcache *tc, unsigned cls, void *p)
{
	struct ucma_tbin *b = &tc->bins[cls];

	if (tc == &ucma_tcache_dummy) {
		ucma_slab_free_batch(cls, &p, 1);
		__atomic_fetch_add(&totals.nfree[cls], 1, __ATOMIC_RELAXED);
		return;
	}
	tcache_event(tc);
	if (b->n >= b->cap)
		bin_flush(b, cls, b->cap / 2);
	ucma_tbin_push(b, b->n, p);
}

void ucma_tcache_flush_all(struct ucma_tcache *tc)
{
	if (!tc || tc == &ucma_tcache_dummy)
		return;
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++)
		bin_flush(&tc->bins[c], c, 0);
}

/*
 * The registry lock keeps every listed cache (and its stack) in place
 * while we look; the owners go on pushing and popping.  The acquire load
 * of a bin's count pairs with the release store of ucma_tbin_push(), so
 * the entries below the count we read are the ones pushed, never older
 * values of those slots; entries are read atomically because their owner
 * may overwrite them meanwhile.  A block that moves between a cache and
 * its slab during the walk may be missed (see malloc.c), never found
 * where it is not.
 */
bool ucma_tcache_any_holds(unsigned cls, const void *p)
{
	bool found = false;

	pthread_mutex_lock(&reg_lock);
	for (struct ucma_tcache *tc = reg_list; tc && !found; tc = tc->next) {
		struct ucma_tbin *b = &tc->bins[cls];
		unsigned n = __atomic_load_n(&b->n, __ATOMIC_ACQUIRE);

		for (unsigned i = 0; i < n && !found; i++)
			found = __atomic_load_n(&b->stack[i], __ATOMIC_RELAXED) == p;
	}
	pthread_mutex_unlock(&reg_lock);
	return found;
}

void ucma_tcache_count_large(int dir, size_t usable, size_t arena_pages)
{
	struct ucma_tcache *tc = ucma_tcache_tls;
	uint64_t bytes = dir > 0 ? (uint64_t)usable : -(uint64_t)usable;
	uint64_t pages = dir > 0 ? (uint64_t)arena_pages : -(uint64_t)arena_pages;

	if (tc && tc != &ucma_tcache_dummy) {
		ucma_relaxed_add(dir > 0 ? &tc->large_nmalloc : &tc->large_nfree, 1);
		ucma_relaxed_add(&tc->large_bytes, bytes);
		ucma_relaxed_add(&tc->large_pages, pages);
		return;
	}
	__atomic_fetch_add(dir > 0 ? &totals.large_nmalloc : &totals.large_nfree, 1,
			   __ATOMIC_RELAXED);
	__atomic_fetch_add(&totals.large_bytes, bytes, __ATOMIC_RELAXED);
	__atomic_fetch_add(&totals.large_pages, pages, __ATOMIC_RELAXED);
}

static uint64_t ld(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void add_large(struct ucma_malloc_counters *out, const uint64_t *large_nmalloc,
		      const uint64_t *large_nfree, const uint64_t *large_bytes,
		      const uint64_t *large_pages)
{
	out->nmalloc += ld(large_nmalloc);
	out->nfree += ld(large_nfree);
	out->large_allocs += ld(large_nmalloc) - ld(large_nfree);
	out->allocated_bytes += ld(large_bytes);
	out->active_bytes += ld(large_pages) << UCMA_PAGE_SHIFT;
}

void ucma_tcache_counters(struct ucma_malloc_counters *out)
{
	pthread_mutex_lock(&reg_lock);
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		uint64_t m = ld(&totals.nmalloc[c]), f = ld(&totals.nfree[c]);

		out->nmalloc += m;
		out->nfree += f;
		out->allocated_bytes += (m - f) * ucma_classes[c].size;
	}
	add_large(out, &totals.large_nmalloc, &totals.large_nfree, &totals.large_bytes,
		  &totals.large_pages);
	for (struct ucma_tcache *tc = reg_list; tc; tc = tc->next) {
		for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
			const struct ucma_tbin *b = &tc->bins[c];
			uint64_t m = ld(&b->nmalloc), h = ld(&b->held);
			uint64_t n = __atomic_load_n(&b->n, __ATOMIC_RELAXED);

			out->nmalloc += m;
			out->nfree += m - h + n;
			out->allocated_bytes += (h - n) * ucma_classes[c].size;
			out->tcache_bytes += n * ucma_classes[c].size;
		}
		add_large(out, &tc->large_nmalloc, &tc->large_nfree, &tc->large_bytes,
			  &tc->large_pages);
	}
	pthread_mutex_unlock(&reg_lock);
}

void ucma_tcache_atfork_prepare(void)
{
	pthread_mutex_lock(&reg_lock);
}

void ucma_tcache_atfork_parent(void)
{
	pthread_mutex_unlock(&reg_lock);
}

void ucma_tcache_atfork_child(void)
{
	struct ucma_tcache *self = ucma_tcache_tls;
	struct ucma_tcache *tc = reg_list, *next;

	for (; tc; tc = next) {
		next = tc->next;
		if (tc != self)
			tcache_retire_locked(tc);
	}
	pthread_mutex_unlock(&reg_lock);
}
