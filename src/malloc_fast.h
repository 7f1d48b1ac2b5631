/*
 * malloc_fast.h - the fast paths of malloc() and free() (malloc.c), as
 * inline functions: ucma_malloc() and ucma_free() are made of them, and so
 * are the preload library's malloc() and free() (preload/preload.c), which
 * then reach a block without a second jump through a wrapper.  Everything
 * else they leave to out-of-line functions of malloc.c, by tail calls, so
 * that the paths need no stack frame.
 *
 * Locking: none; see tcache.h for what each field they touch may race
 * with.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_MALLOC_FAST_H
#define UCMA_MALLOC_FAST_H

#include "slab.h"
#include "tcache.h"

/* The out-of-line ends of the paths below (malloc.c). */
UCMA_INTERNAL void ucma_small_free_slow(struct ucma_tcache *tc, struct ucma_slab *s, void *p,
					const char *who);
UCMA_INTERNAL void ucma_free_interior(void *p);
UCMA_INTERNAL void ucma_free_large(void *p);
/* free() of a non-NULL @p that ucma_free_fast() did not take: ours is
 * freed (or reported), anything else goes to @foreign_free. */
UCMA_INTERNAL void ucma_free_or_slow(void *p, void (*foreign_free)(void *));
/* Bin @b of @tc had nothing at hand for a request of @size bytes (at
 * most UCMA_SMALL_MAX). */
UCMA_INTERNAL void *ucma_malloc_miss(struct ucma_tcache *tc, struct ucma_tbin *b, size_t size);

/*
 * The arena's geometry for the fast paths, copied once it exists (size 0
 * until then, so every free takes the slow path).  Written with relaxed
 * atomics by whoever sees the arena first; the values never change.
 */
struct ucma_malloc_geometry {
	uintptr_t base;
	const struct ucma_page *pages;
	size_t size;
} __attribute__((aligned(64)));
UCMA_INTERNAL extern struct ucma_malloc_geometry ucma_mg;

/* Is @p in the arena?  Then *@pg is its page's descriptor and *@off its
 * offset from the arena's base (false before the arena is known).  The
 * first step of every fast path that takes a pointer: free(),
 * ucma_owns(), realloc().  (A bool and not a NULL page: a test of the
 * returned pointer would be one more branch on each of them.) */
static inline __attribute__((always_inline)) bool ucma_mg_page(const void *p,
							  const struct ucma_page **pg,
							  uintptr_t *off)
{
	uintptr_t o = (uintptr_t)p - __atomic_load_n(&ucma_mg.base, __ATOMIC_RELAXED);

	if (UCMA_UNLIKELY(o >= __atomic_load_n(&ucma_mg.size, __ATOMIC_ACQUIRE)))
		return false;
	*off = o;
	*pg = &ucma_mg.pages[o >> UCMA_PAGE_SHIFT];
	return true;
}


/* Pop the newest parked object of bin @b, clearing its marker. */
static inline void *ucma_stack_pop(struct ucma_tbin *b, size_t n)
{
	void *p = b->stack[n - 1];

	__atomic_store_n(&b->n, (uint16_t)(n - 1), __ATOMIC_RELAXED);
	ucma_owner_inc(&b->npop);
	ucma_obj_mark_live(p, b->size);
	return p;
}

/*
 * Free object @idx (at @p) of slab @s.  The fast path: the block carries
 * no free marker and its bit says it is allocated; then it gets the
 * marker and is parked on the calling thread's stack for the class, for
 * its next malloc, whoever owns the slab.  When the stack is full, a
 * block of a slab the thread owns (and that was not full: a full slab's
 * owner carries a flag), which no other thread freed meanwhile, goes back
 * to the slab's bitmap at once, written out here as well: a program that
 * frees more blocks than a stack holds pays no call for it.  The rest is
 * ucma_tcache_free_slow()'s.  Its loads are the slab's first line and the
 * block's bitmap word, the block's second word and the thread's bin (and
 * the remote bitmap's word when the stack is full).  The marker is loaded
 * once: the compiler may not reuse it across the atomic load otherwise.
 */
static inline __attribute__((always_inline)) void ucma_small_free(struct ucma_slab *s, uint64_t idx,
							      void *p, const char *who)
{
	struct ucma_tcache *tc = ucma_tcache_tls;
	uint64_t key = ucma_free_key;

	if (UCMA_LIKELY(!ucma_obj_marked_free_k(p, key))) {
		/* The bitmap word is loaded atomically: its owner may be
		 * another thread, writing it meanwhile.  The shifts by the
		 * index modulo 64 are single bit instructions on x86. */
		uint64_t *wp = &s->used[idx >> 6];
		uint64_t u;

		if (UCMA_LIKELY((__atomic_load_n(wp, __ATOMIC_RELAXED) >> (idx & 63)) & 1)) {
			struct ucma_tbin *b = ucma_tbin_of(tc, s->cls);
			size_t n = b->n;

			if (UCMA_LIKELY(n < b->cap)) {
				ucma_obj_mark_free_k(p, b->size, key);
				ucma_tbin_push(b, n, p);
				return;
			}
			/* Owned, so the word is this thread's to write.  It
			 * is loaded again: keeping the first value costs the
			 * push above two registers to save. */
			if (UCMA_LIKELY(__atomic_load_n(&s->owner, __ATOMIC_RELAXED) == tc)) {
				uint64_t i = idx;

				/* (Hidden from the compiler, which would work
				 * out the mask before the push otherwise, in
				 * a register of its own.) */
				__asm__("" : "+r"(i));
				if (UCMA_UNLIKELY((__atomic_load_n(wp + UCMA_SLAB_REMOTE_OFF,
								   __ATOMIC_RELAXED) >> (i & 63)) & 1))
					goto slow;
				u = __atomic_load_n(wp, __ATOMIC_RELAXED) & ~(1ull << (i & 63));
				ucma_obj_mark_free_k(p, b->size, key);
				__atomic_store_n(wp, u, __ATOMIC_RELAXED);
				ucma_owner_inc(&b->nfree_direct);
				if (UCMA_UNLIKELY(!u))
					ucma_tcache_word_emptied(tc, s);
				return;
			}
		}
	}
slow:
	ucma_small_free_slow(tc, s, p, who);
}

/*
 * The fast path: a small block of the arena.  Returns false for
 * everything else, leaving it to the caller's slow path; the rest leaves
 * through tail calls, so this path needs no stack frame.  Its loads are
 * the arena geometry, the page's owner, the slab's two lines and the bin.
 */
static inline __attribute__((always_inline)) bool ucma_free_fast(void *p)
{
	const struct ucma_page *pg;
	uintptr_t off;

	if (UCMA_LIKELY(ucma_mg_page(p, &pg, &off))) {
		unsigned type = __atomic_load_n(&pg->owner_type, __ATOMIC_ACQUIRE);

		if (UCMA_LIKELY(type == UCMA_OWN_SLAB)) {
			struct ucma_slab *s = (struct ucma_slab *)(uintptr_t)UCMA_PG_GET(pg, owner);
			/* ucma_slab_index(), kept in 64 bits */
			uint64_t lo, idx;

#if defined(__x86_64__)
			/* One mul; written out, so that the compiler sees
			 * which two registers it takes (it saves a third
			 * otherwise). */
			__asm__("mulq %3" : "=a"(lo), "=d"(idx)
				: "0"((uintptr_t)p - s->base), "rm"(s->divisor) : "cc");
#else
			unsigned __int128 prod = (unsigned __int128)((uintptr_t)p - s->base) * s->divisor;

			lo = (uint64_t)prod;
			idx = (uint64_t)(prod >> 64);
#endif
			/* An index past the last object finds its bit clear
			 * (slab.h) and leaves through the slow path. */
			if (UCMA_UNLIKELY(lo >= s->divisor))
				ucma_free_interior(p);
			else
				ucma_small_free(s, idx, p, "free()");
			return true;
		}
		if (type == UCMA_OWN_LARGE) {
			ucma_free_large(p);
			return true;
		}
	}
	return false;
}

/*
 * malloc() of @size bytes: when @size is below @below (at most
 * UCMA_SMALL_MAX + 1), the newest parked object of the class (the block
 * this thread freed last, still cache-hot), else the lowest free object
 * of the cursor's word (tcache.h), written out here; everything else goes
 * to @slow(@size) by a tail call.  ucma_malloc() passes UCMA_SMALL_MAX + 1,
 * the preload library the smaller of that and its contiguous threshold,
 * so that one comparison on its fast path covers both.
 */
static inline __attribute__((always_inline)) void *ucma_malloc_fast(size_t size, size_t below,
								     void *(*slow)(size_t))
{
	struct ucma_tcache *tc = ucma_tcache_tls;

	if (UCMA_LIKELY(size < below)) {
		/* Relaxed: a thread's first call, on the dummy cache, may read
		 * the table while another thread's initialisation fills it; any
		 * offset then finds an empty bin of the dummy and misses. */
		struct ucma_tbin *b = (struct ucma_tbin *)((char *)tc +
			__atomic_load_n(&ucma_tbin_off_of_size[(size + 15) >> 4], __ATOMIC_RELAXED));
		size_t n = b->n;
		uint64_t *wp, u;
		void *p;

		if (UCMA_LIKELY(n))
			return ucma_stack_pop(b, n);
		wp = ucma_tbin_word(b);
		u = *wp;
		if (UCMA_UNLIKELY(u == b->full))
			return ucma_malloc_miss(tc, b, size);
		__atomic_store_n(wp, u | (u + 1), __ATOMIC_RELAXED);
		ucma_owner_inc(&b->ncur);
		p = (void *)(b->wbase + (uintptr_t)(unsigned)__builtin_ctzll(~u) * b->size);
		ucma_obj_mark_live(p, b->size);
		return p;
	}
	return slow(size);
}

/*
 * ucma_free_or() - free @p if the malloc family owns it, else hand it to
 * @foreign_free (glibc's __libc_free() for blocks made before the
 * interposition took effect): the preload library's free().  One look-up,
 * as ucma_try_free(), but every way out is a tail call, so free() needs
 * no stack frame.  NULL is ignored; errno is left alone.
 */
static inline __attribute__((always_inline)) void ucma_free_or(void *p,
								void (*foreign_free)(void *))
{
	if (ucma_free_fast(p) || !p)
		return;
	ucma_free_or_slow(p, foreign_free);
}

#endif /* UCMA_MALLOC_FAST_H */
