/*
 * tcache.h - the per-thread caches of the malloc family (tcache.c), as
 * malloc.c's fast paths see them.
 *
 * Each thread owns one struct ucma_tcache, reached through a TLS pointer:
 * per size class a stack of parked objects (the blocks it freed lately,
 * which its malloc pops first) and the slabs it allocates from, with a
 * cursor on the bitmap of one of them.  malloc, and the owner's frees,
 * touch only the thread's own bins and the bits of its own slabs: plain
 * loads and relaxed atomic stores, no lock, no atomic read-modify-write.
 * A block of a slab another thread owns goes back to it with an atomic
 * fetch-or on the slab's remote bitmap (tcache.c).  ucma_tcache_dummy owns
 * nothing: it stands for "no cache" (a thread before its first call, one
 * whose cache is being created or could not be, one past its destructor)
 * and sends every request to the slow paths: the first call of a thread
 * makes its cache there, the others go to the central bins.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_TCACHE_H
#define UCMA_TCACHE_H

#include "slab.h"

/*
 * Free objects carry a marker: a per-process random word in their second
 * word (AddressSanitizer builds poison them instead).  A free that finds
 * the marker looks further before it concludes "double free" (live data
 * that happens to hold it is freed normally), so the fast paths need not
 * look anywhere but the block and its slab.  malloc clears it.
 */
UCMA_INTERNAL extern uint64_t ucma_free_key;

static inline bool ucma_obj_marked_free(const void *p)
{
#ifdef UCMA_ASAN
	return __asan_address_is_poisoned(p);
#else
	return ((const uint64_t *)p)[1] == ucma_free_key;
#endif
}

static inline void ucma_obj_mark_free(void *p, size_t size)
{
#ifdef UCMA_ASAN
	UCMA_POISON(p, size);
#else
	(void)size;
	((uint64_t *)p)[1] = ucma_free_key;
#endif
}

/* The same two, with the marker already loaded (the fast paths load it
 * once: the compiler may not keep it across their atomic accesses). */
static inline bool ucma_obj_marked_free_k(const void *p, uint64_t key)
{
#ifdef UCMA_ASAN
	(void)key;
	return __asan_address_is_poisoned(p);
#else
	return ((const uint64_t *)p)[1] == key;
#endif
}

static inline void ucma_obj_mark_free_k(void *p, size_t size, uint64_t key)
{
#ifdef UCMA_ASAN
	(void)key;
	UCMA_POISON(p, size);
#else
	(void)size;
	((uint64_t *)p)[1] = key;
#endif
}

static inline void ucma_obj_mark_live(void *p, size_t size)
{
#ifdef UCMA_ASAN
	UCMA_UNPOISON(p, size);
#else
	(void)size;
	((uint64_t *)p)[1] = 0;
#endif
}

/* The most objects a bin parks: the bin is then 1 KiB. */
#define UCMA_TBIN_SLOTS 118u

/*
 * struct ucma_tbin - one size class of one thread's cache: a stack of
 * parked objects, which its malloc pops and its free pushes (LIFO, so a
 * random working set stays in the CPU cache), and a cursor on one word of
 * the bitmap of one of its slabs, which malloc takes the lowest free
 * object of when the stack is empty.  A parked object stays allocated in
 * its slab's bitmap and carries the free marker; a free that finds the
 * stack full gives the object back to its slab's bitmap instead.  So
 * nothing ever moves objects between caches and shared bins in batches.
 *
 * Locking and atomicity: only the owning thread writes a bin, and it reads
 * its own fields with plain loads (no other thread writes them, so those
 * reads race with nothing).  Other threads read only what follows:
 *  - the slots stack[i]: every store is a relaxed atomic store, because
 *    ucma_tcache_any_holds() reads them from other threads under the
 *    registry lock (which keeps the cache from being recycled meanwhile);
 *  - @n: stored atomically, release when it grows (ucma_tbin_push()), so
 *    a reader that loads it with acquire sees the slots below it as
 *    pushed; relaxed on pop, which writes no slot;
 *  - @npop, @ncur, @nfree_direct, @nflush: written by the owner alone
 *    (ucma_owner_inc(), relaxed atomic stores), read relaxed by the
 *    counters walk under the registry lock: a statistic may be a moment
 *    old, never torn.  Parking a block counts
 *    nothing: the frees are the pops plus the flushed plus the parked
 *    plus the direct ones, so the push needs no counter of its own.
 * @usedw_off, @wbase, @full, @slab (the cursor) are the owner's alone
 * (other threads reach its slabs through the bins' registries, slab.c);
 * @size and @cap are 0 until the owner's first slow-path call of the
 * class sets them (tcache.c bin_start()), constant after.
 *
 * The cursor's word is kept as an offset from the bin, so that a bin
 * without a cursor needs no pointer: @usedw_off 0 makes malloc read
 * @usedw_off itself, 0, which equals @full, 0: no room.  A bin of all
 * zeros is then a valid empty one, and ucma_tcache_dummy lives in .bss:
 * its pages, only ever read, stay the kernel's zero page.  With pointers
 * in it, the dynamic linker's relocations had made all 44 KiB of it
 * resident in every process.
 */
struct ucma_tbin {
	intptr_t usedw_off;		/* &slab->used[w] - (char *)this bin; 0: no cursor */
	uintptr_t wbase;		/* address of object w * 64 of the slab */
	uint64_t full;			/* the cursor word's value when it has no room */
	uint32_t size;			/* object size */
	uint16_t n;			/* objects parked in @stack */
	uint16_t cap;			/* room in @stack */
	uint64_t npop;			/* objects handed out from @stack */
	uint64_t ncur;			/* objects handed out by the cursor */
	struct ucma_slab *slab;		/* the cursor's slab (owned, PARTIAL), or NULL */
	uint64_t nfree_direct;		/* frees of this class not parked (see tcache.c) */
	void *stack[UCMA_TBIN_SLOTS];	/* stack[0..n): parked objects, top at n-1 */
	uint64_t nflush;		/* parked objects given back to their slabs */
	uint64_t pad;
};
_Static_assert(offsetof(struct ucma_tbin, stack) == 64 && sizeof(struct ucma_tbin) == 1024,
	       "a bin: a line for the fast paths, then its stack; a power of two, so that "
	       "indexing the bins is a shift");

/*
 * Count one more in a counter of the calling thread's own cache, which
 * other threads only read (relaxed).  Nobody else writes it, so no locked
 * instruction is needed: on x86-64 one add to memory, whose aligned
 * 8-byte store no reader sees torn; elsewhere, and under ThreadSanitizer
 * (which must see the store as atomic), a relaxed load and store.
 */
static inline void ucma_owner_inc(uint64_t *p)
{
#if defined(__x86_64__) && !defined(UCMA_TSAN)
	__asm__ volatile("addq $1, %0" : "+m"(*p));
#else
	__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
#endif
}

/* Add @v to such a counter (the same, for any amount). */
static inline void ucma_owner_add(uint64_t *p, uint64_t v)
{
#if defined(__x86_64__) && !defined(UCMA_TSAN)
	__asm__ volatile("addq %1, %0" : "+m"(*p) : "er"(v));
#else
	__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
#endif
}

/*
 * Push @p on bin @b holding @n objects (n < cap).  Other threads look for
 * blocks in the stack (ucma_tcache_any_holds()), so the entry is stored
 * atomically and published by the release store of the new count: a
 * reader that sees the count sees the entries below it.  Both are plain
 * moves on x86.
 */
static inline void ucma_tbin_push(struct ucma_tbin *b, size_t n, void *p)
{
	__atomic_store_n(&b->stack[n], p, __ATOMIC_RELAXED);
	__atomic_store_n(&b->n, (uint16_t)(n + 1), __ATOMIC_RELEASE);
}

/* The bitmap word of @b's cursor (@b's own first word when it has none). */
static inline uint64_t *ucma_tbin_word(struct ucma_tbin *b)
{
	return (uint64_t *)((uintptr_t)b + (uintptr_t)b->usedw_off);
}

/* Point @b's cursor at word @w of @s, an owned slab on the partial list. */
static inline void ucma_tbin_point(struct ucma_tbin *b, struct ucma_slab *s, unsigned w)
{
	b->slab = s;
	/* (As integers: the word and the bin are different objects.) */
	b->usedw_off = (intptr_t)((uintptr_t)&s->used[w] - (uintptr_t)b);
	b->wbase = s->base + (uintptr_t)w * 64 * s->size;
	b->full = ucma_slab_word_full(s, w);
}

/*
 * Take the lowest free object of bin @b's cursor word, or NULL when the
 * word is full (the slow path looks further).  The owner alone writes the
 * bits of its slabs; the store is atomic because other threads read them.
 */
static inline void *ucma_tbin_alloc(struct ucma_tbin *b)
{
	uint64_t *wp = ucma_tbin_word(b), u = *wp;
	void *p;

	if (UCMA_UNLIKELY(u == b->full))
		return NULL;
	__atomic_store_n(wp, u | (u + 1), __ATOMIC_RELAXED);
	ucma_owner_inc(&b->ncur);
	p = (void *)(b->wbase + (uintptr_t)(unsigned)__builtin_ctzll(~u) * b->size);
	ucma_obj_mark_live(p, b->size);
	return p;
}

/* The owned slabs of one class (the owner's alone). */
struct ucma_tlists {
	struct ucma_slab *partial;	/* with room at the last look; the cursor's among them */
	struct ucma_slab *fulls;	/* without room at the last look */
	struct ucma_slab *empty;	/* wholly free, kept for reuse */
	unsigned nempty;
	uint32_t gc_mark;		/* bin activity at the GC's last look */
};

/*
 * A thread keeps a few freed large runs (up to UCMA_TLARGE_MAX_PAGES pages
 * each, UCMA_TLARGE_KEEP_PAGES pages and UCMA_TLARGE_SLOTS runs in all),
 * and a large malloc of the same number of pages takes one back without
 * the zone lock and the buddy allocator's splitting and merging: a program
 * that frees and allocates blocks of a few tens of KiB does so at the
 * speed of the small ones.  They are kept in a stack per size (the newest
 * taken first), so that taking one is an index, not a search; when the
 * cache is full, the oldest run of the size with the most runs goes back
 * to the zone, which keeps as many sizes at hand as it can.  64 runs and
 * 4 MiB: with 32 and 2 MiB, bench_malloc's `large` (random blocks of 4 to
 * 64 KiB) missed the cache on 12% of its large mallocs and took 1.1x
 * the time (1.24x the instructions), at the same peak RSS (the runs a
 * thread keeps were resident anyway); tests/bench/RESULTS.md.
 */
#define UCMA_TLARGE_SLOTS       64u
#define UCMA_TLARGE_DEPTH       16u	/* runs of one size */
#define UCMA_TLARGE_MAX_PAGES   64u	/* 256 KiB */
#define UCMA_TLARGE_KEEP_PAGES  1024u	/* 4 MiB */

/*
 * struct ucma_tcache - one thread's cache.
 *
 * Locking and atomicity:
 *  - @bins: see struct ucma_tbin.
 *  - @remote_hint: remote_hint[c] is set (seq_cst store, after the remote
 *    free's fetch-or) by a thread that freed into a slab of class c this
 *    cache owns, and exchanged to 0 by the owner before it merges the
 *    remote bits of its full slabs: so either the owner sees the bit or the
 *    freer sees the hint still set.  A line of its own, so that those
 *    stores do not disturb the bins.  Caches are never freed (recycled),
 *    so a stale store lands in some cache's hint: a needless look.
 *  - @lists: the owner's alone.  No other thread walks them: the fork
 *    child, which reclaims the slabs of threads it does not have, and the
 *    statistics use the bins' registries (slab.c) instead.
 *  - @binset, @gc_events, @gc_next, @kept_classes, @kept_bytes: the
 *    owner's alone, plain.
 *  - @large_nmalloc, @large_nfree, @large_bytes, @large_pages,
 *    @large_kept_pages: relaxed atomic stores by the owner, read relaxed
 *    by the counters walk under the registry lock.
 *  - @large_kept, @large_have, @nlarge_kept, @large_gc_mark: the owner's
 *    alone.  A kept
 *    run is allocated in its zone, its head page owned by nobody
 *    (UCMA_OWN_NONE), so a free of it is refused as the free of a block
 *    that is not live.
 *  - @next, @prev: the registry lock (tcache.c reg_lock), which also
 *    guards retiring a cache (thread exit, the fork child) and recycling
 *    its memory, so a walker holding it never sees a cache disappear.
 */
struct ucma_tcache {
	struct ucma_tbin bins[UCMA_NR_CLASSES];
	uint8_t remote_hint[UCMA_NR_CLASSES] __attribute__((aligned(64)));
	unsigned binset __attribute__((aligned(64)));		/* central bin set new slabs come from */
	unsigned gc_events;		/* slow-path calls since the last GC step */
	unsigned gc_next;		/* next bin the GC looks at */
	struct ucma_tlists lists[UCMA_NR_CLASSES];
	uint64_t kept_classes;		/* bit c: lists[c].empty holds slabs */
	uint32_t kept_bytes;		/* bytes of the slabs on those lists */
	uint64_t large_nmalloc;
	uint64_t large_nfree;
	uint64_t large_bytes;		/* usable bytes allocated minus freed */
	uint64_t large_pages;		/* arena pages held: allocated and kept */
	/* large_kept[n][0..large_have[n]): heads of kept runs of n pages, newest last */
	uint32_t large_kept[UCMA_TLARGE_MAX_PAGES + 1][UCMA_TLARGE_DEPTH];
	uint8_t large_have[UCMA_TLARGE_MAX_PAGES + 1];
	uint32_t nlarge_kept;
	uint32_t large_kept_pages;	/* atomic: the statistics read it */
	uint32_t large_gc_mark;		/* large activity at the GC's last look */
	struct ucma_tcache *next, *prev;	/* registry (registry lock) */
};

/* The most bytes of wholly free slabs a thread keeps, over all its
 * classes (tcache.c keep_empty()).  64 KiB: with 128, bench_malloc's
 * `simple` (one size after another) peaked 250 KiB higher, and no case
 * ran faster (tests/bench/RESULTS.md). */
#define UCMA_TCACHE_KEEP_EMPTY (64u << 10)

/* The calling thread's cache: the dummy until its first malloc-family
 * call made one (never NULL, so the fast paths need no test for it). */
UCMA_INTERNAL extern __thread struct ucma_tcache *ucma_tcache_tls
	__attribute__((tls_model("initial-exec")));
/* Set once the thread began making its cache (ucma_tcache_create()):
 * the dummy then means "no cache", not "not yet". */
UCMA_INTERNAL extern __thread bool ucma_tcache_started
	__attribute__((tls_model("initial-exec")));
UCMA_INTERNAL extern struct ucma_tcache ucma_tcache_dummy;

/* Has the calling thread, whose cache is @tc, still to make one? */
static inline bool ucma_tcache_unstarted(const struct ucma_tcache *tc)
{
	return tc == &ucma_tcache_dummy && !ucma_tcache_started;
}

/*
 * Bin @cls of @tc.  The empty asm hides how the address was made, so
 * that the compiler addresses the bin's fields and stack from it instead
 * of recomputing them from @tc and @cls at each use (which it does
 * otherwise, at the cost of a few instructions on every fast path).
 */
static inline struct ucma_tbin *ucma_tbin_of(struct ucma_tcache *tc, size_t cls)
{
	struct ucma_tbin *b = &tc->bins[cls];

	__asm__("" : "+r"(b));
	return b;
}

/* The offset of the bin of each request size's class in struct
 * ucma_tcache, indexed like ucma_class_of_size: malloc's fast path finds
 * its bin with one load (ucma_tcache_init()). */
UCMA_INTERNAL extern uint16_t ucma_tbin_off_of_size[UCMA_SMALL_MAX / 16 + 1];

UCMA_INTERNAL void ucma_tcache_init(void);
/* A cache for the calling thread (or the dummy when none can be made). */
UCMA_INTERNAL struct ucma_tcache *ucma_tcache_create(void);
/* Bin @cls of @tc has no room in its current word: find room (another
 * word, remote frees, another slab, a new one) and allocate; NULL with
 * ENOMEM.  @tc may be the dummy. */
UCMA_INTERNAL void *ucma_tcache_alloc_slow(struct ucma_tcache *tc, unsigned cls);
/* Free object @idx (at @p) of slab @s where the fast path would not:
 * @tc (the caller's cache, NULL or the dummy) does not own @s, or its
 * stack is full, or the object carries the free marker (a double free,
 * which aborts naming @who, unless live data just looked like it). */
UCMA_INTERNAL void ucma_tcache_free_slow(struct ucma_tcache *tc, struct ucma_slab *s,
					 unsigned idx, void *p, const char *who);
/* The owner's free emptied a word of @s: is the whole slab free? */
UCMA_INTERNAL void ucma_tcache_word_emptied(struct ucma_tcache *tc, struct ucma_slab *s);
/* Give back every wholly free slab of @self, the caller's own cache. */
UCMA_INTERNAL void ucma_tcache_trim(struct ucma_tcache *self);
/* Does @self (the caller's own cache) keep wholly free slabs for reuse? */
static inline bool ucma_tcache_keeps_empty(const struct ucma_tcache *self)
{
	return self->kept_bytes != 0;
}
/* Give the wholly free slabs @self (the caller's own cache) keeps for
 * reuse up, to the central bins, whatever their class (slab.c, before a
 * new slab takes pages that are not resident yet). */
UCMA_INTERNAL void ucma_tcache_release_kept(struct ucma_tcache *self);
/* Is object @idx (at @p) of @s free already: free in its slab, freed by
 * another thread and not merged, or parked in any thread's stack?  The
 * walk over the stacks is taken only when the block carries the free
 * marker, which live data matches by chance only. */
UCMA_INTERNAL bool ucma_tcache_obj_is_freed(const struct ucma_slab *s, unsigned idx,
					    const void *p);
/* Is @p parked in bin @cls of any thread's cache? */
UCMA_INTERNAL bool ucma_tcache_any_holds(unsigned cls, const void *p);
/* A kept run of exactly @npages pages of arena @a for @tc, its head owned
 * by nobody (the caller makes it its own again), or UCMA_PFN_NONE. */
UCMA_INTERNAL uint32_t ucma_tcache_large_get(struct ucma_tcache *tc, struct ucma_arena *a,
					     uint32_t npages);
/* Keep the freed large run at @pfn for @tc, clearing the owner of its
 * head; false when @tc keeps no runs of that size (the caller frees it). */
UCMA_INTERNAL bool ucma_tcache_large_put(struct ucma_tcache *tc, struct ucma_arena *a,
					 uint32_t pfn);
/* Count a large block allocated (+1) or freed (-1) by the calling thread. */
UCMA_INTERNAL void ucma_tcache_count_large(int dir, size_t usable, size_t arena_pages);
/* A large block of the arena resized in place from @old to @usable bytes
 * (its pages with it): neither a malloc nor a free. */
UCMA_INTERNAL void ucma_tcache_count_large_resize(size_t old, size_t usable);
/* Sum every thread's counters (and those of exited threads) into @out. */
UCMA_INTERNAL void ucma_tcache_counters(struct ucma_malloc_counters *out);
UCMA_INTERNAL void ucma_tcache_atfork_prepare(void);
UCMA_INTERNAL void ucma_tcache_atfork_parent(void);
UCMA_INTERNAL void ucma_tcache_atfork_child(void);

/* A counter that other threads read: the owner adds with a relaxed load
 * and store (no read-modify-write: nobody else writes it). */
static inline void ucma_relaxed_add(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

#endif /* UCMA_TCACHE_H */
