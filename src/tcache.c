/*
 * tcache.c - per-thread caches of the malloc family: the slabs a thread
 * owns, and frees from threads that do not own the slab.
 *
 * A thread parks the small blocks it frees on the stack of their class
 * (out of band, in its cache: tcache.h), whoever owns their slabs, and
 * its malloc pops the newest first, so a working set of blocks stays hot
 * in the CPU cache.  A parked block stays allocated in its slab's bitmap
 * and carries the free marker (malloc.c).  When the stack is empty malloc
 * takes the lowest free bit of the cursor's word, in a slab the thread
 * owns; when it is full, a block of an own slab goes straight back to its
 * bitmap.  So blocks never move between caches and shared bins in batches
 * under a lock, and neither path takes a lock or an atomic
 * read-modify-write: the owner is the only writer of its slabs'
 * allocation bits.
 *
 * A thread's slabs, per size class: a partial list (room at the last
 * look, the cursor's among them), a full list (no room at the last look)
 * and a few wholly free slabs kept for reuse.  When the cursor's word is
 * full the slow path looks at the other words of the cursor's slab,
 * merges its remote frees, then moves the cursor to the next partial
 * slab, a full one that remote frees gave room, a kept empty one, a
 * central one (slab.c) or a new one, in that order.
 *
 * A block that goes back to a slab the thread does not own (a parked one
 * given back when the stack is flushed, or a free that found the stack
 * full) is a remote free.  Into a central slab, a thread with a cache
 * adopts the slab and frees as its owner (as mimalloc reclaims abandoned
 * pages on free), so the blocks of an exited thread cost one adoption per
 * slab, not an atomic operation each.  Otherwise it sets the block's bit
 * in the slab's remote bitmap with an atomic fetch-or (whose old value
 * catches a second remote free), and tells the owner by setting the
 * owner's hint for the class, so that the owner merges the remote bits of
 * its full slabs the next time it needs room; a central slab's bin is told
 * instead (ucma_slab_central_freed()).  The protocol (all seq_cst):
 *   freer:  fetch-or remote[w]; owner = load(s->owner); set owner's hint
 *   owner:  exchange(hint, 0); load and exchange remote[w] of its slabs
 *   release (slab.c): store(owner = unowned); exchange remote[w]
 * so a remote free is either merged by the one who gives the slab up or
 * seen as central by the freer, and either the owner sees the bit or the
 * freer sees the hint still set.
 *
 * Double frees: a free checks the block's marker and bit before it
 * changes anything; a marked block is looked for in every thread's stack
 * (ucma_tcache_any_holds(), race free: see struct ucma_tbin), a block
 * whose bit is clear or whose remote bit is set, or a fetch-or that finds
 * the remote bit already set, is free already; the process aborts naming
 * the call and the address.
 *
 * The TLS slot (initial-exec, one pointer) points to ucma_tcache_dummy,
 * whose bins have no room, until the thread's first malloc-family call
 * creates the cache (a second TLS flag, ucma_tcache_started, tells that
 * call from the later ones), and again while the cache is being created
 * and after the thread's destructor ran: then every malloc goes to the
 * central bins and every free is remote.  Never NULL, so the fast paths
 * of malloc.c need no test for it.  A pthread key's destructor
 * gives an exiting thread's parked blocks and slabs back (central) and
 * folds its counters into the totals of exited threads; the structure is
 * recycled for the next thread.
 *
 * A bin nobody used for a while gives back its parked blocks and then its
 * wholly free slabs, the cursor's included (the GC, run from the slow
 * paths);
 * ucma_trim() gives back every wholly free slab of the calling thread
 * (other threads' caches are theirs alone; their GC gives theirs back).
 *
 * Counters: each bin counts the objects it popped and those its cursor
 * handed out, those it flushed and the frees it did not park (relaxed
 * stores by the owner); parking counts nothing, the frees follow from
 * these and the stack's fill.  The statistics sum them over the registry
 * of live caches plus the totals of exited threads (and of calls made
 * without a cache).  The bytes "cached" are the parked blocks and the
 * free room in slabs that threads own (slab.c counts that).
 *
 * Locking: reg_lock protects the registry, the recycled structures and
 * the exited totals.  A cache's lists, current slabs and the states of its
 * slabs are its thread's alone: no lock (other threads find those slabs
 * through the bins' registries in slab.c, under the bin locks).  Order:
 * reg_lock, then a bin lock.  Fork: the prepare handler takes reg_lock
 * (slab.c's takes the bin locks after it); the child makes the slabs of
 * the threads it does not have central and retires their caches, keeping
 * their counters.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "tcache.h"

#include <errno.h>
#include <string.h>

/* All zeros: its bins have nothing parked and no cursor (struct
 * ucma_tbin), so a thread's first call, which may come before the
 * library is initialised, finds no room and goes slow. */
struct ucma_tcache ucma_tcache_dummy;
__thread struct ucma_tcache *ucma_tcache_tls __attribute__((tls_model("initial-exec"))) =
	&ucma_tcache_dummy;
__thread bool ucma_tcache_started __attribute__((tls_model("initial-exec")));
struct ucma_tcache ucma_slab_unowned;

/* Totals of exited threads and of calls made without a cache. */
struct tc_totals {
	uint64_t nmalloc[UCMA_NR_CLASSES];
	uint64_t nfree[UCMA_NR_CLASSES];
	uint64_t large_nmalloc, large_nfree, large_bytes, large_pages;
};

static pthread_mutex_t UCMA_FORK_LOCK reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ucma_tcache *reg_list;	/* live caches */
static struct ucma_tcache *reg_free;	/* recycled structures */
static struct tc_totals totals;		/* reg_lock, or atomics */
static pthread_key_t tc_key;
static bool tc_key_ok;

/*
 * Wholly free slabs a class keeps: enough that a thread freeing and
 * refilling a few slabs' worth does not make and destroy slabs each time,
 * at most KEEP_EMPTY_MAX and UCMA_TCACHE_KEEP_EMPTY bytes of them (at
 * least one); the GC gives them back when the class idles.  The same
 * bytes bound the thread's kept slabs over all its classes: the class
 * that keeps one more gives up another class's first.  With the bound
 * per class alone, a thread that went through eight sizes one after the
 * other kept 600 KiB of them (test_malloc).
 */
#define KEEP_EMPTY_MAX 4u

static void tcache_destroy(void *arg);
static void bin_flush(struct ucma_tcache *tc, unsigned cls, unsigned keep);
static void large_flush(struct ucma_tcache *tc);

static void bin_set_none(struct ucma_tbin *b)
{
	b->slab = NULL;
	b->usedw_off = 0;
	b->wbase = 0;
	b->full = 0;
}

uint16_t ucma_tbin_off_of_size[UCMA_SMALL_MAX / 16 + 1];
_Static_assert(offsetof(struct ucma_tcache, bins[UCMA_NR_CLASSES - 1]) <= UINT16_MAX,
	       "a bin's offset fits ucma_tbin_off_of_size");

void ucma_tcache_init(void)
{
	/* Atomic stores: ucma_malloc() may read the table meanwhile, from a
	 * thread still on the dummy cache. */
	for (unsigned i = 0; i <= UCMA_SMALL_MAX / 16; i++)
		__atomic_store_n(&ucma_tbin_off_of_size[i],
				 (uint16_t)offsetof(struct ucma_tcache, bins[ucma_class_of_size[i]]),
				 __ATOMIC_RELAXED);
	tc_key_ok = pthread_key_create(&tc_key, tcache_destroy) == 0;
}

/*
 * Room in a bin's stack: many small objects, few large ones, so a cache
 * parks a bounded number of bytes (under 1.8 MiB if every stack were
 * full, under half of it in the 8 classes above 8 KiB; the GC empties
 * stacks that fall idle).  A free that finds the stack full gives its
 * object to the slab's bitmap instead, which costs about as much: the
 * stack is for reuse order, not for batching.
 */
static uint16_t cap_for(uint32_t size)
{
	if (size <= 128)
		return UCMA_TBIN_SLOTS;
	if (size <= 512)
		return 64;
	if (size <= 2048)
		return 32;
	if (size <= 4096)
		return 16;
	if (size <= 16384)
		return 8;
	return 4;
}

/*
 * A cache starts all zeros: ucma_meta_alloc() hands out zeroed memory,
 * and a bin of zeros is an empty one without a cursor (struct ucma_tbin),
 * with room for nothing until its first slow-path call gives it its size
 * and room (bin_start()).  So a thread's cache costs resident memory for
 * the classes it uses only: the bins are 1 KiB apart, and setting up all
 * 40 at creation wrote to every page of them.
 */
static void bin_start(struct ucma_tbin *b, unsigned cls)
{
	b->size = ucma_classes[cls].size;
	b->cap = cap_for(b->size);
}

/*
 * A recycled cache back to the zeros of a fresh one (the stacks need no
 * clearing: only stack[0..n) is read).  A bin its last thread never
 * started (@cap 0) is all zeros still: a push needs room, a pop a count,
 * the cursor and the counters a started bin or a slab this cache owns,
 * which it gets only through a started bin.  Left alone, its page stays
 * untouched, and a program that starts and ends threads keeps the
 * saving of lazily started bins (test_malloc_start).
 */
static void tcache_reset(struct ucma_tcache *tc)
{
	memset((char *)tc + offsetof(struct ucma_tcache, bins) + sizeof(tc->bins), 0,
	       sizeof(*tc) - offsetof(struct ucma_tcache, bins) - sizeof(tc->bins));
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		struct ucma_tbin *b = &tc->bins[c];

		if (!b->cap)
			continue;
		memset(b, 0, offsetof(struct ucma_tbin, stack));
		b->nflush = 0;
	}
}

struct ucma_tcache *ucma_tcache_create(void)
{
	struct ucma_tcache *tc;

	/* Calls made while the cache is being created (pthread_setspecific
	 * may allocate) are served without one. */
	ucma_tcache_started = true;
	ucma_tcache_tls = &ucma_tcache_dummy;
	ucma_mutex_lock(&reg_lock);
	tc = reg_free;
	if (tc)
		reg_free = tc->next;
	ucma_mutex_unlock(&reg_lock);
	if (tc)
		tcache_reset(tc);
	else
		tc = ucma_meta_alloc(sizeof(*tc));
	if (!tc)
		return &ucma_tcache_dummy;
	tc->binset = ucma_slab_binset_next();
	ucma_mutex_lock(&reg_lock);
	tc->next = reg_list;
	if (reg_list)
		reg_list->prev = tc;
	reg_list = tc;
	ucma_mutex_unlock(&reg_lock);
	if (tc_key_ok)
		pthread_setspecific(tc_key, tc);
	ucma_tcache_tls = tc;
	return tc;
}

/* ------------------------------------------------------------------------ */
/* Lists of owned slabs (the owner's alone)                                  */
/* ------------------------------------------------------------------------ */

/* The owner changes the state of its slab @s; a full one carries the
 * flag in @owner too (see UCMA_SLAB_OWNER_FULL). */
static void set_state(struct ucma_slab *s, int state)
{
	uintptr_t owner = (uintptr_t)ucma_slab_owner(s, __ATOMIC_RELAXED);

	if (state == UCMA_SLAB_FULL)
		owner |= UCMA_SLAB_OWNER_FULL;
	__atomic_store_n(&s->owner, (struct ucma_tcache *)owner, __ATOMIC_RELAXED);
	__atomic_store_n(&s->state, (uint8_t)state, __ATOMIC_RELAXED);
}

/* The first word of @s with room, or -1. */
static int slab_room(const struct ucma_slab *s)
{
	for (unsigned w = 0; w < s->nwords; w++)
		if (s->used[w] != ucma_slab_word_full(s, w))
			return (int)w;
	return -1;
}

static bool slab_empty(const struct ucma_slab *s)
{
	for (unsigned w = 0; w < s->nwords; w++)
		if (s->used[w])
			return false;
	return true;
}


/* The owner gives @s, wholly free, up (to the central bins). */
static void give_up(struct ucma_tcache *tc, unsigned cls, struct ucma_slab *s)
{
	(void)tc;
	(void)cls;
	ucma_slab_release(s);
}

_Static_assert(UCMA_NR_CLASSES <= 64, "kept_classes has a bit per class");

static uint32_t slab_bytes(unsigned cls)
{
	return (uint32_t)ucma_classes[cls].npages << UCMA_PAGE_SHIFT;
}

/* Take a kept empty slab of @cls off its list (NULL if none). */
static struct ucma_slab *kept_pop(struct ucma_tcache *tc, unsigned cls)
{
	struct ucma_tlists *l = &tc->lists[cls];
	struct ucma_slab *s = l->empty;

	if (!s)
		return NULL;
	ucma_slab_list_del(&l->empty, s);
	if (--l->nempty == 0)
		tc->kept_classes &= ~(1ull << cls);
	tc->kept_bytes -= slab_bytes(cls);
	return s;
}

/* Give up one kept empty slab of a class other than @cls: false if none. */
static bool evict_other(struct ucma_tcache *tc, unsigned cls)
{
	uint64_t others = tc->kept_classes & ~(1ull << cls);
	unsigned c;

	if (!others)
		return false;
	c = (unsigned)__builtin_ctzll(others);
	give_up(tc, c, kept_pop(tc, c));
	return true;
}

/* Keep the wholly free slab @s (on no list) for reuse, or give it up. */
static void keep_empty(struct ucma_tcache *tc, unsigned cls, struct ucma_slab *s)
{
	struct ucma_tlists *l = &tc->lists[cls];
	uint32_t bytes = slab_bytes(cls);
	unsigned keep = UCMA_TCACHE_KEEP_EMPTY / bytes;

	if (keep > KEEP_EMPTY_MAX)
		keep = KEEP_EMPTY_MAX;
	if (l->nempty < (keep ? keep : 1)) {
		while (tc->kept_bytes + bytes > UCMA_TCACHE_KEEP_EMPTY && evict_other(tc, cls))
			;
		/* (One slab larger than the budget is still kept: at least one.) */
		if (tc->kept_bytes + bytes <= UCMA_TCACHE_KEEP_EMPTY || !tc->kept_bytes) {
			set_state(s, UCMA_SLAB_EMPTY);
			ucma_slab_list_add(&l->empty, s);
			l->nempty++;
			tc->kept_classes |= 1ull << cls;
			tc->kept_bytes += bytes;
			return;
		}
	}
	give_up(tc, cls, s);
}

static void release_empties(struct ucma_tcache *tc, unsigned cls)
{
	struct ucma_slab *s;

	while ((s = kept_pop(tc, cls)) != NULL)
		give_up(tc, cls, s);
}

void ucma_tcache_release_kept(struct ucma_tcache *self)
{
	while (self->kept_classes)
		release_empties(self, (unsigned)__builtin_ctzll(self->kept_classes));
}

/* Remote frees gave room in full slabs of @cls: move those to partial
 * (the wholly free ones to the kept empties). */
static void rescan_fulls(struct ucma_tcache *tc, unsigned cls)
{
	struct ucma_tlists *l = &tc->lists[cls];
	struct ucma_slab *s, *next;

	for (s = l->fulls; s; s = next) {
		next = s->next;
		if (!ucma_slab_collect(s))
			continue;
		ucma_slab_list_del(&l->fulls, s);
		if (slab_empty(s)) {
			keep_empty(tc, cls, s);
		} else {
			set_state(s, UCMA_SLAB_PARTIAL);
			ucma_slab_list_add(&l->partial, s);
		}
	}
}

/* The next slab for bin @cls to look for room in, on the partial list:
 * its head (which may have filled up since it was put there), else a
 * kept empty one, else an adopted or new one.  NULL with ENOMEM. */
static struct ucma_slab *next_slab(struct ucma_tcache *tc, unsigned cls)
{
	struct ucma_tlists *l = &tc->lists[cls];
	struct ucma_slab *s;

	if (!l->partial && __atomic_load_n(&tc->remote_hint[cls], __ATOMIC_RELAXED) &&
	    __atomic_exchange_n(&tc->remote_hint[cls], 0, __ATOMIC_SEQ_CST))
		rescan_fulls(tc, cls);
	if (l->partial)
		return l->partial;
	if ((s = kept_pop(tc, cls)) == NULL) {
		s = ucma_slab_adopt(tc->binset, cls, tc);
		if (!s)
			return NULL;
	}
	set_state(s, UCMA_SLAB_PARTIAL);
	ucma_slab_list_add(&l->partial, s);
	return s;
}

/* Give the parked objects of class @cls back to their slabs, then the
 * wholly free slabs back: the kept ones, and those on the partial list,
 * the cursor's included. */
static void trim_class(struct ucma_tcache *tc, unsigned cls)
{
	struct ucma_tbin *b = &tc->bins[cls];
	struct ucma_tlists *l = &tc->lists[cls];
	struct ucma_slab *s, *next;

	bin_flush(tc, cls, 0);
	for (s = l->partial; s; s = next) {
		next = s->next;
		ucma_slab_collect(s);
		if (slab_empty(s)) {
			if (b->slab == s)
				bin_set_none(b);
			ucma_slab_list_del(&l->partial, s);
			give_up(tc, cls, s);
		}
	}
	release_empties(tc, cls);
}

/*
 * Garbage collection: a bin that nobody used between two looks gives back
 * its wholly free slabs (trim_class()), so a class a thread stopped using
 * does not keep memory.  Activity is read
 * from the bin's counters, so the fast paths pay nothing; the GC runs a
 * step every GC_EVENTS slow-path calls, looking at GC_BINS bins a step.
 */
#define GC_EVENTS 64
#define GC_BINS   8

static void tcache_gc_step(struct ucma_tcache *tc)
{
	uint32_t large_now = (uint32_t)(tc->large_nmalloc + tc->large_nfree);

	tc->gc_events = 0;
	if (large_now == tc->large_gc_mark)
		large_flush(tc);
	tc->large_gc_mark = large_now;
	for (unsigned k = 0; k < GC_BINS; k++) {
		unsigned c = tc->gc_next++ % UCMA_NR_CLASSES;
		struct ucma_tbin *b = &tc->bins[c];
		uint32_t now = (uint32_t)(b->npop + b->ncur + b->nfree_direct + b->n);

		if (now == tc->lists[c].gc_mark)
			trim_class(tc, c);
		tc->lists[c].gc_mark = now;
	}
}

void *ucma_tcache_alloc_slow(struct ucma_tcache *tc, unsigned cls)
{
	struct ucma_tbin *b = &tc->bins[cls];
	struct ucma_tlists *l = &tc->lists[cls];

	if (tc == &ucma_tcache_dummy) {
		void *p = ucma_slab_central_alloc(cls);

		if (p)
			__atomic_fetch_add(&totals.nmalloc[cls], 1, __ATOMIC_RELAXED);
		return p;
	}
	if (UCMA_UNLIKELY(!b->cap))
		bin_start(b, cls);
	if (UCMA_UNLIKELY(++tc->gc_events >= GC_EVENTS))
		tcache_gc_step(tc);
	for (;;) {
		struct ucma_slab *s = b->slab;
		int w;

		if (s) {
			w = slab_room(s);
			if (w < 0 && ucma_slab_collect(s))
				w = slab_room(s);
			if (w >= 0) {
				ucma_tbin_point(b, s, (unsigned)w);
				break;
			}
			/* No room: off the partial list, until frees make some. */
			ucma_slab_list_del(&l->partial, s);
			set_state(s, UCMA_SLAB_FULL);
			ucma_slab_list_add(&l->fulls, s);
			bin_set_none(b);
		}
		s = next_slab(tc, cls);
		if (!s)
			return NULL;
		ucma_tbin_point(b, s, 0);
	}
	return ucma_tbin_alloc(b);
}

/* ------------------------------------------------------------------------ */
/* Frees                                                                     */
/* ------------------------------------------------------------------------ */

static __attribute__((noinline, noreturn)) void double_free(const char *who, void *p)
{
	ucma_fatal("%s: double free of %p", who, p);
}

void ucma_tcache_word_emptied(struct ucma_tcache *tc, struct ucma_slab *s)
{
	unsigned cls = s->cls;
	int saved;

	/* A wholly free slab leaves the partial list for the kept empties,
	 * unless the cursor is on it: then malloc reuses it at once, and the
	 * GC or trim gives it back if it stays free. */
	if (s->state != UCMA_SLAB_PARTIAL || tc->bins[cls].slab == s || !slab_empty(s))
		return;
	saved = errno;	/* free() leaves errno alone */
	ucma_slab_list_del(&tc->lists[cls].partial, s);
	keep_empty(tc, cls, s);
	errno = saved;
}

/*
 * Give object @idx of @s, which @tc owns and which is allocated in its
 * bitmap, back to the bitmap (the free marker or poison is already on
 * it): a full slab goes back on the partial list, a slab that falls
 * wholly free to the kept empties.
 */
static void bitmap_free(struct ucma_tcache *tc, struct ucma_slab *s, unsigned idx, void *p,
			const char *who)
{
	unsigned w = idx >> 6, cls = s->cls;
	uint64_t bit = 1ull << (idx & 63), u = s->used[w];

	if (!(u & bit) || (__atomic_load_n(&s->remote[w], __ATOMIC_RELAXED) & bit))
		double_free(who, p);
	if (s->state == UCMA_SLAB_FULL) {
		/* Room again: the allocator may look at it. */
		ucma_slab_list_del(&tc->lists[cls].fulls, s);
		set_state(s, UCMA_SLAB_PARTIAL);
		ucma_slab_list_add(&tc->lists[cls].partial, s);
	}
	__atomic_store_n(&s->used[w], u & ~bit, __ATOMIC_RELAXED);
	if (!(u & ~bit))
		ucma_tcache_word_emptied(tc, s);
}

bool ucma_tcache_obj_is_freed(const struct ucma_slab *s, unsigned idx, const void *p)
{
	if (ucma_slab_idx_free(s, idx))
		return true;
	if (!ucma_obj_marked_free(p))
		return false;
#ifdef UCMA_ASAN
	return true;	/* poisoning is exact: a poisoned object is free or parked */
#else
	return ucma_tcache_any_holds(s->cls, p);
#endif
}

/* A free by a thread that does not own @s (see the protocol above); the
 * block carries the free marker already. */
static void free_remote(struct ucma_slab *s, unsigned idx, void *p, const char *who)
{
	unsigned w = idx >> 6, cls = s->cls;
	uint64_t bit = 1ull << (idx & 63);
	struct ucma_tcache *owner;

	if (__atomic_fetch_or(&s->remote[w], bit, __ATOMIC_SEQ_CST) & bit)
		double_free(who, p);
	/* From here on the slab may be merged and destroyed by others: only
	 * the type-stable fields of its descriptor are read. */
	owner = ucma_slab_owner(s, __ATOMIC_SEQ_CST);
	if (owner == &ucma_slab_unowned) {
		ucma_slab_central_freed(s, w);
		return;
	}
	if (!__atomic_load_n(&owner->remote_hint[cls], __ATOMIC_SEQ_CST))
		__atomic_store_n(&owner->remote_hint[cls], 1, __ATOMIC_SEQ_CST);
}

/*
 * Give object @idx (at @p, marked free) of @s back to its slab: into the
 * bitmap when @tc owns the slab; a central slab is adopted first (its
 * frees are then the owner's, as mimalloc reclaims abandoned pages on
 * free); otherwise a remote free.
 */
static void release_object(struct ucma_tcache *tc, struct ucma_slab *s, unsigned idx, void *p,
			   const char *who)
{
	struct ucma_tcache *owner = ucma_slab_owner(s, __ATOMIC_RELAXED);

	if (owner == tc) {
		bitmap_free(tc, s, idx, p, who);
		return;
	}
	if (owner == &ucma_slab_unowned && ucma_slab_adopt_freed(s, tc)) {
		ucma_slab_list_add(&tc->lists[s->cls].partial, s);
		bitmap_free(tc, s, idx, p, who);	/* merged remote frees may include it */
		return;
	}
	free_remote(s, idx, p, who);
}

void ucma_tcache_free_slow(struct ucma_tcache *tc, struct ucma_slab *s, unsigned idx, void *p,
			   const char *who)
{
	unsigned cls = s->cls;
	struct ucma_tbin *b;

	if (ucma_tcache_obj_is_freed(s, idx, p)) {
		if (!ucma_obj_marked_free(p))
			ucma_fatal("%s: invalid pointer %p (no block is allocated there)", who, p);
		double_free(who, p);
	}
	/* The marker goes on before the block is published anywhere: from
	 * then on it may be handed out again. */
	ucma_obj_mark_free(p, s->size);
	if (!tc || tc == &ucma_tcache_dummy) {
		__atomic_fetch_add(&totals.nfree[cls], 1, __ATOMIC_RELAXED);
		free_remote(s, idx, p, who);
		return;
	}
	b = &tc->bins[cls];
	if (UCMA_UNLIKELY(!b->cap))
		bin_start(b, cls);	/* the thread's first free of the class */
	if (b->n < b->cap) {	/* live data looked like the marker, or a first free */
		ucma_tbin_push(b, b->n, p);
		return;
	}
	ucma_owner_inc(&b->nfree_direct);
	release_object(tc, s, idx, p, who);
}

/*
 * Give the oldest parked objects of bin @cls back to their slabs so that
 * @keep remain.  They leave the stack before they reach their slabs:
 * another thread's ucma_tcache_any_holds() may miss them for a moment,
 * but never finds a block in a stale slot after its slab handed it out
 * again.
 */
static void bin_flush(struct ucma_tcache *tc, unsigned cls, unsigned keep)
{
	struct ucma_tbin *b = &tc->bins[cls];
	void *out[UCMA_TBIN_SLOTS];
	unsigned n = b->n, nflush = n - keep;

	if (n <= keep)
		return;
	memcpy(out, b->stack, nflush * sizeof(void *));
	for (unsigned i = 0; i < keep; i++)
		__atomic_store_n(&b->stack[i], b->stack[nflush + i], __ATOMIC_RELAXED);
	__atomic_store_n(&b->n, (uint16_t)keep, __ATOMIC_RELEASE);
	__atomic_store_n(&b->nflush, b->nflush + nflush, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < nflush; i++) {
		struct ucma_slab *s = ucma_slab_of(out[i]);

		release_object(tc, s, (unsigned)ucma_slab_index(s, out[i]), out[i], "free()");
	}
}

/*
 * The registry lock keeps every listed cache (and its stacks) in place
 * while we look; the owners go on pushing and popping.  The acquire load
 * of a bin's count pairs with the release store of ucma_tbin_push(), so
 * the entries below the count we read are the ones pushed, never older
 * values of those slots; entries are read atomically because their owner
 * may overwrite them meanwhile.  A block that moves between a stack and
 * its slab during the walk may be missed, never found where it is not.
 */
bool ucma_tcache_any_holds(unsigned cls, const void *p)
{
	bool found = false;

	ucma_mutex_lock(&reg_lock);
	for (struct ucma_tcache *tc = reg_list; tc && !found; tc = tc->next) {
		struct ucma_tbin *b = &tc->bins[cls];
		unsigned n = __atomic_load_n(&b->n, __ATOMIC_ACQUIRE);

		for (unsigned i = 0; i < n && !found; i++)
			found = __atomic_load_n(&b->stack[i], __ATOMIC_RELAXED) == p;
	}
	ucma_mutex_unlock(&reg_lock);
	return found;
}

/* ------------------------------------------------------------------------ */
/* Kept large runs                                                           */
/* ------------------------------------------------------------------------ */

uint32_t ucma_tcache_large_get(struct ucma_tcache *tc, struct ucma_arena *a, uint32_t npages)
{
	uint32_t pfn;

	if (tc == &ucma_tcache_dummy || npages > UCMA_TLARGE_MAX_PAGES || !tc->large_have[npages])
		return UCMA_PFN_NONE;
	pfn = tc->large_kept[npages][--tc->large_have[npages]];
	tc->nlarge_kept--;
	__atomic_store_n(&tc->large_kept_pages, tc->large_kept_pages - npages, __ATOMIC_RELAXED);
	UCMA_UNPOISON(ucma_pfn_to_addr(a, pfn), (size_t)npages << UCMA_PAGE_SHIFT);
	return pfn;
}

/* Take the oldest kept run of @npages pages out of @tc (it has one). */
static uint32_t large_take_oldest(struct ucma_tcache *tc, uint32_t npages)
{
	uint32_t *k = tc->large_kept[npages], pfn = k[0];

	memmove(&k[0], &k[1], (tc->large_have[npages] - 1u) * sizeof(k[0]));
	tc->large_have[npages]--;
	tc->nlarge_kept--;
	__atomic_store_n(&tc->large_kept_pages, tc->large_kept_pages - npages, __ATOMIC_RELAXED);
	ucma_relaxed_add(&tc->large_pages, -(uint64_t)npages);
	return pfn;
}

/* Give back the oldest kept run of @npages pages of @tc (it has one). */
static void large_evict(struct ucma_tcache *tc, struct ucma_arena *a, uint32_t npages)
{
	uint32_t pfn = large_take_oldest(tc, npages);

	UCMA_UNPOISON(ucma_pfn_to_addr(a, pfn), (size_t)npages << UCMA_PAGE_SHIFT);
	ucma_pages_free(a, pfn);
}

/* The size with the most kept runs (the largest such on a tie). */
static uint32_t large_most(const struct ucma_tcache *tc)
{
	uint32_t best = 0;

	for (uint32_t n = 1; n <= UCMA_TLARGE_MAX_PAGES; n++)
		if (tc->large_have[n] >= tc->large_have[best])
			best = n;
	return best;
}

bool ucma_tcache_large_put(struct ucma_tcache *tc, struct ucma_arena *a, uint32_t pfn)
{
	uint32_t npages = a->pages[pfn].aux;

	if (!tc || tc == &ucma_tcache_dummy || npages > UCMA_TLARGE_MAX_PAGES)
		return false;
	if (tc->large_have[npages] == UCMA_TLARGE_DEPTH)
		large_evict(tc, a, npages);
	while (tc->nlarge_kept == UCMA_TLARGE_SLOTS ||
	       (tc->nlarge_kept && tc->large_kept_pages + npages > UCMA_TLARGE_KEEP_PAGES))
		large_evict(tc, a, large_most(tc));
	/* Only the head: a pointer to a block is a pointer to its head
	 * page, and the tails already refuse any other. */
	__atomic_store_n(&a->pages[pfn].owner_type, UCMA_OWN_NONE, __ATOMIC_RELEASE);
	UCMA_POISON(ucma_pfn_to_addr(a, pfn), (size_t)npages << UCMA_PAGE_SHIFT);
	/* The entry before the count that lists it, in this order (a fork
	 * child reads this list as it was at one instant, maybe between
	 * the two: large_flush_foreign()). */
	tc->large_kept[npages][tc->large_have[npages]] = pfn;
	__atomic_store_n(&tc->large_have[npages], (uint8_t)(tc->large_have[npages] + 1),
			 __ATOMIC_RELEASE);
	tc->nlarge_kept++;
	__atomic_store_n(&tc->large_kept_pages, tc->large_kept_pages + npages, __ATOMIC_RELAXED);
	return true;
}

static void large_flush(struct ucma_tcache *tc)
{
	struct ucma_arena *a = ucma_arena_peek();

	for (uint32_t n = 1; n <= UCMA_TLARGE_MAX_PAGES; n++)
		while (tc->large_have[n])
			large_evict(tc, a, n);
}

/*
 * In a fork child, whether @pfn, listed by the cache of a thread the child
 * does not have, is a run of @npages pages to give back: the head of an
 * allocated run of that length that nobody owns, no per-CPU list holds,
 * and the forking thread's own cache (@self) does not keep.  The child
 * has the other threads' memory as it was at one instant, which may fall
 * inside a change of a list: large_take_oldest()'s shift lists an entry
 * twice for a moment, and large_put() (before it stored its entry ahead
 * of the count) could list a slot's stale entry, a run since allocated
 * again, on a per-CPU list, or kept by another cache.  test_malloc's fork
 * case failed so in 1 of 30 runs: a second free stopped as "free
 * already".
 */
static bool looks_kept(const struct ucma_arena *a, const struct ucma_tcache *self, uint32_t pfn,
		       uint32_t npages)
{
	const struct ucma_page *h;

	if (pfn >= a->npages)
		return false;
	h = &a->pages[pfn];
	if (UCMA_PG_GET(h, kind) != UCMA_PK_RUN || UCMA_PG_GET(h, aux) != npages ||
	    __atomic_load_n(&h->owner_type, __ATOMIC_RELAXED) != UCMA_OWN_NONE ||
	    (h->flags & UCMA_PF_PCP))
		return false;
	if (self != &ucma_tcache_dummy)
		for (unsigned i = 0; i < self->large_have[npages]; i++)
			if (self->large_kept[npages][i] == pfn)
				return false;
	return true;
}

/* The kept runs of a cache whose thread the fork child does not have:
 * those that do not look kept stay where they are (lost to the child)
 * rather than be freed twice or taken from under their user. */
static void large_flush_foreign(struct ucma_tcache *tc, const struct ucma_tcache *self)
{
	struct ucma_arena *a = ucma_arena_peek();

	for (uint32_t n = 1; n <= UCMA_TLARGE_MAX_PAGES; n++)
		while (tc->large_have[n]) {
			uint32_t pfn = tc->large_kept[n][0];

			if (looks_kept(a, self, pfn, n))
				large_evict(tc, a, n);
			else
				(void)large_take_oldest(tc, n);
		}
}

/* ------------------------------------------------------------------------ */
/* Thread exit, trim                                                         */
/* ------------------------------------------------------------------------ */

/* Give every slab of @tc back (its thread is about to be gone). */
static void tcache_release_all(struct ucma_tcache *tc)
{
	/* First every parked object (giving back a foreign one may adopt
	 * its slab), then every slab. */
	large_flush(tc);
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++)
		bin_flush(tc, c, 0);
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		struct ucma_tlists *l = &tc->lists[c];
		struct ucma_slab *s;

		if (tc->bins[c].cap)	/* (a bin never started has no cursor) */
			bin_set_none(&tc->bins[c]);
		while ((s = l->partial) != NULL) {
			ucma_slab_list_del(&l->partial, s);
			ucma_slab_release(s);
		}
		while ((s = l->fulls) != NULL) {
			ucma_slab_list_del(&l->fulls, s);
			ucma_slab_release(s);
		}
		release_empties(tc, c);
	}
}

/* The counters of bin @b (relaxed loads: its owner may be running). */
static uint64_t bin_nmalloc(const struct ucma_tbin *b)
{
	return __atomic_load_n(&b->npop, __ATOMIC_RELAXED) +
	       __atomic_load_n(&b->ncur, __ATOMIC_RELAXED);
}

static uint64_t bin_nfree(const struct ucma_tbin *b)
{
	return __atomic_load_n(&b->npop, __ATOMIC_RELAXED) +
	       __atomic_load_n(&b->nflush, __ATOMIC_RELAXED) +
	       __atomic_load_n(&b->n, __ATOMIC_RELAXED) +
	       __atomic_load_n(&b->nfree_direct, __ATOMIC_RELAXED);
}

/* Fold @tc's counters into the totals and unlink it (reg_lock held). */
static void tcache_retire_locked(struct ucma_tcache *tc)
{
	/* Atomics: calls without a cache add to the totals without the lock. */
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		const struct ucma_tbin *b = &tc->bins[c];

		__atomic_fetch_add(&totals.nmalloc[c], bin_nmalloc(b), __ATOMIC_RELAXED);
		__atomic_fetch_add(&totals.nfree[c], bin_nfree(b), __ATOMIC_RELAXED);
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
	tcache_release_all(tc);
	ucma_mutex_lock(&reg_lock);
	tcache_retire_locked(tc);
	ucma_mutex_unlock(&reg_lock);
}

/* The caller owns @tc: give back every wholly free slab, the current
 * ones included. */
static void trim_own(struct ucma_tcache *tc)
{
	large_flush(tc);
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++)
		bin_flush(tc, c, 0);
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		rescan_fulls(tc, c);
		trim_class(tc, c);
	}
}

void ucma_tcache_trim(struct ucma_tcache *self)
{
	if (self && self != &ucma_tcache_dummy)
		trim_own(self);
}

/* ------------------------------------------------------------------------ */
/* Counters                                                                  */
/* ------------------------------------------------------------------------ */

/* Add @bytes and @pages (modulo 2^64: a decrease adds the complement) to
 * the calling thread's large-block counters, and count a malloc (@dir > 0),
 * a free (< 0) or neither (0, a resize in place). */
static void count_large_delta(int dir, uint64_t bytes, uint64_t pages)
{
	struct ucma_tcache *tc = ucma_tcache_tls;

	if (tc && tc != &ucma_tcache_dummy) {
		if (dir)
			ucma_owner_inc(dir > 0 ? &tc->large_nmalloc : &tc->large_nfree);
		ucma_owner_add(&tc->large_bytes, bytes);
		if (pages)
			ucma_owner_add(&tc->large_pages, pages);
		return;
	}
	if (dir)
		__atomic_fetch_add(dir > 0 ? &totals.large_nmalloc : &totals.large_nfree, 1,
				   __ATOMIC_RELAXED);
	__atomic_fetch_add(&totals.large_bytes, bytes, __ATOMIC_RELAXED);
	__atomic_fetch_add(&totals.large_pages, pages, __ATOMIC_RELAXED);
}

void ucma_tcache_count_large(int dir, size_t usable, size_t arena_pages)
{
	count_large_delta(dir, dir > 0 ? (uint64_t)usable : -(uint64_t)usable,
			  dir > 0 ? (uint64_t)arena_pages : -(uint64_t)arena_pages);
}

void ucma_tcache_count_large_resize(size_t old, size_t usable)
{
	count_large_delta(0, (uint64_t)usable - (uint64_t)old,
			  (uint64_t)(usable >> UCMA_PAGE_SHIFT) - (uint64_t)(old >> UCMA_PAGE_SHIFT));
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
	/* Objects live per class: one thread's frees may be of another's
	 * mallocs, and the counters are a moment's picture, so only the sum
	 * over every cache means something, and it is kept at 0 or above. */
	int64_t live[UCMA_NR_CLASSES];

	ucma_mutex_lock(&reg_lock);
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		uint64_t m = ld(&totals.nmalloc[c]), f = ld(&totals.nfree[c]);

		out->nmalloc += m;
		out->nfree += f;
		live[c] = (int64_t)(m - f);
	}
	add_large(out, &totals.large_nmalloc, &totals.large_nfree, &totals.large_bytes,
		  &totals.large_pages);
	for (struct ucma_tcache *tc = reg_list; tc; tc = tc->next) {
		for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
			const struct ucma_tbin *b = &tc->bins[c];
			uint64_t m = bin_nmalloc(b), f = bin_nfree(b);

			out->nmalloc += m;
			out->nfree += f;
			live[c] += (int64_t)(m - f);
			out->tcache_bytes += (uint64_t)__atomic_load_n(&b->n, __ATOMIC_RELAXED) *
					     ucma_classes[c].size;
		}
		add_large(out, &tc->large_nmalloc, &tc->large_nfree, &tc->large_bytes,
			  &tc->large_pages);
		out->tcache_bytes += (uint64_t)__atomic_load_n(&tc->large_kept_pages,
							       __ATOMIC_RELAXED) << UCMA_PAGE_SHIFT;
	}
	ucma_mutex_unlock(&reg_lock);
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++)
		if (live[c] > 0)
			out->allocated_bytes += (uint64_t)live[c] * ucma_classes[c].size;
	out->tcache_bytes += ucma_slab_owned_free_bytes();
}

/* ------------------------------------------------------------------------ */
/* Fork                                                                      */
/* ------------------------------------------------------------------------ */

void ucma_tcache_atfork_prepare(void)
{
	ucma_mutex_lock(&reg_lock);
}

void ucma_tcache_atfork_parent(void)
{
	ucma_mutex_unlock(&reg_lock);
}

/*
 * The child runs after slab.c's child handler released the bin locks.
 * The threads it does not have may have been in the middle of changing
 * their own lists, so those are not walked: the bins' registries find
 * their slabs, which go central, where the child's thread can adopt them.
 */
void ucma_tcache_atfork_child(void)
{
	struct ucma_tcache *self = ucma_tcache_tls;
	struct ucma_tcache *tc, *next;

	/* Their parked objects are allocated in the bitmaps: free them
	 * there, without touching the lists (release_foreign files the
	 * slabs by their bitmaps). */
	for (tc = reg_list; tc; tc = tc->next) {
		if (tc == self)
			continue;
		for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
			struct ucma_tbin *b = &tc->bins[c];

			/* (Only bins with parked blocks are written: a store to
			 * every bin would copy every page of every cache into
			 * the child.) */
			if (!b->n)
				continue;
			for (unsigned i = 0; i < b->n; i++) {
				struct ucma_slab *s = ucma_slab_of(b->stack[i]);
				unsigned idx = (unsigned)ucma_slab_index(s, b->stack[i]);

				__atomic_store_n(&s->used[idx >> 6],
						 s->used[idx >> 6] & ~(1ull << (idx & 63)),
						 __ATOMIC_RELAXED);
			}
			/* Still frees the program made: counted as given back,
			 * or the child's malloc_nfree would lose them. */
			b->nflush += b->n;
			b->n = 0;
		}
	}
	for (tc = reg_list; tc; tc = tc->next)
		if (tc != self)
			large_flush_foreign(tc, self);
	ucma_slab_release_foreign(self);
	for (tc = reg_list; tc; tc = next) {
		next = tc->next;
		if (tc != self)
			tcache_retire_locked(tc);
	}
	ucma_mutex_unlock(&reg_lock);
}
