/*
 * tcache.h - the per-thread caches of the malloc family (tcache.c), as
 * malloc.c's fast paths see them.
 *
 * Each thread owns one struct ucma_tcache, reached through a TLS pointer;
 * malloc pops and free pushes the stack of a bin without a lock and
 * without an atomic read-modify-write.  ucma_tcache_dummy has no room in
 * any bin: it stands for "no cache" (a thread being created or past its
 * destructor) and sends every request to the central bins.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_TCACHE_H
#define UCMA_TCACHE_H

#include "slab.h"

#define UCMA_TBIN_MAX_CAP 128u	/* the largest bin (tcache.c, cap_for()) */

/*
 * struct ucma_tbin - the cache of one size class in one thread.
 *
 * Locking and atomicity: only the owning thread writes a bin, and it
 * reads its own fields with plain loads (no other thread writes them, so
 * those reads race with nothing).  Other threads read, never write:
 *  - @stack (the pointer), @cap, @fill: set by tcache_setup() before the
 *    cache is put on the registry (registry lock), constant after.
 *  - the slots stack[i]: every store is a relaxed atomic store (pushes,
 *    refills, flushes), because ucma_tcache_any_holds() reads them from
 *    other threads under the registry lock, which keeps the cache from
 *    being recycled meanwhile.
 *  - @n: stored atomically; release when it grows (ucma_tbin_push(),
 *    refills) and when a flush shrinks it after moving slots, so a reader
 *    that loads it with acquire sees the slots below it as pushed; relaxed
 *    on pop, which writes no slot.  Read by ucma_tcache_any_holds()
 *    (acquire) and by the counters walk (relaxed).
 *  - @nmalloc, @held: relaxed atomic stores (ucma_relaxed_add()), read
 *    relaxed by the counters walk under the registry lock: a statistic may
 *    be a moment old, never torn.
 */
struct ucma_tbin {
	void **stack;			/* stack[0..n): cached objects, top at n-1 */
	uint16_t n;
	uint16_t cap;
	uint16_t fill;			/* objects taken per refill */
	uint16_t pad;
	uint64_t nmalloc;		/* objects handed out from this bin */
	uint64_t held;			/* taken from slabs minus given back */
};
/* Frees need no counter of their own: held - n objects went out through
 * this bin and were not freed into it, so nfree = nmalloc - held + n. */

/*
 * Push @p on bin @b holding @n objects (n < cap).  Other threads look for
 * blocks in the stack (ucma_tcache_any_holds()), so the entry is stored
 * atomically and published by the release store of the new count: a
 * reader that sees the count sees the entries below it.  Both are plain
 * moves on x86.
 */
static inline void ucma_tbin_push(struct ucma_tbin *b, unsigned n, void *p)
{
	__atomic_store_n(&b->stack[n], p, __ATOMIC_RELAXED);
	__atomic_store_n(&b->n, (uint16_t)(n + 1), __ATOMIC_RELEASE);
}

/*
 * struct ucma_tcache - one thread's cache.
 *
 * Locking and atomicity: the owning thread alone writes every field but
 * the registry links; other threads read only what the rules of struct
 * ucma_tbin and the lines below allow.
 *  - @bins: see struct ucma_tbin.
 *  - @binset, @gc_events, @gc_next, @gc_mark: the owner's alone, plain.
 *  - @large_*: relaxed atomic stores by the owner, read relaxed by the
 *    counters walk under the registry lock.
 *  - @next, @prev: the registry lock (tcache.c reg_lock), which also
 *    guards retiring a cache (thread exit, the fork child) and recycling
 *    its memory, so a walker holding it never sees a cache disappear.
 *  - @slots: the bins' stacks, see struct ucma_tbin.
 */
struct ucma_tcache {
	struct ucma_tbin bins[UCMA_NR_CLASSES];
	unsigned binset;		/* central bin set refills come from */
	unsigned gc_events;		/* slow-path calls since the last GC step */
	unsigned gc_next;		/* next bin the GC looks at */
	uint32_t gc_mark[UCMA_NR_CLASSES];	/* bin activity at the last look */
	uint64_t large_nmalloc;
	uint64_t large_nfree;
	uint64_t large_bytes;		/* usable bytes allocated minus freed */
	uint64_t large_pages;		/* arena pages allocated minus freed */
	struct ucma_tcache *next, *prev;	/* registry (registry lock) */
	void *slots[];			/* the bins' stacks */
};

UCMA_INTERNAL extern __thread struct ucma_tcache *ucma_tcache_tls
	__attribute__((tls_model("initial-exec")));
UCMA_INTERNAL extern struct ucma_tcache ucma_tcache_dummy;

UCMA_INTERNAL void ucma_tcache_init(void);
/* A cache for the calling thread (or the dummy when none can be made). */
UCMA_INTERNAL struct ucma_tcache *ucma_tcache_create(void);
/* Bin @cls of @tc is empty: refill it and pop one; NULL with ENOMEM. */
UCMA_INTERNAL void *ucma_tcache_alloc_slow(struct ucma_tcache *tc, unsigned cls);
/* Bin @cls of @tc is full (or @tc is the dummy): make room and push @p. */
UCMA_INTERNAL void ucma_tcache_free_slow(struct ucma_tcache *tc, unsigned cls, void *p);
UCMA_INTERNAL void ucma_tcache_flush_all(struct ucma_tcache *tc);
/* Is @p parked in bin @cls of any thread's cache?  For free()'s slow
 * path, taken only for a block that carries the free marker. */
UCMA_INTERNAL bool ucma_tcache_any_holds(unsigned cls, const void *p);
/* Count a large block allocated (+1) or freed (-1) by the calling thread. */
UCMA_INTERNAL void ucma_tcache_count_large(int dir, size_t usable, size_t arena_pages);
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
