/*
 * slab.h - size classes, slabs and the overflow mappings of the malloc
 * family (slab.c), as malloc.c and tcache.c see them.
 *
 * Size classes: 16 to 128 bytes in steps of 16, then four classes per
 * doubling up to UCMA_SMALL_MAX (internal fragmentation at most 20%).
 * Larger requests are page runs (UCMA_OWN_LARGE, owner = pfn of the run
 * head, which is the address handed out: an aligned request's slack is
 * given back, ucma_pages_trim()).  Small objects live in slabs: runs of
 * pages of one class (UCMA_OWN_SLAB, owner = struct ucma_slab *), or spans
 * of overflow chunks outside the arena when the NORMAL zone is full.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_SLAB_H
#define UCMA_SLAB_H

#include "internal.h"

#define UCMA_NR_CLASSES      40
#define UCMA_SMALL_MAX       32768u
#define UCMA_SLAB_MAX_OBJS   256u
#define UCMA_MAX_BINSETS     16u
#define UCMA_SLAB_MAX_PAGES  64u

/* Geometry of one size class: written once by ucma_slab_init() before
 * the first allocation (under malloc.c's start-up lock), constant after. */
struct ucma_class {
	uint32_t size;		/* object size, a multiple of 16 */
	uint32_t magic;		/* ceil(2^32 / size): offset -> index by multiplication */
	uint32_t limit;		/* nobjs * size: no object starts at or past it */
	uint16_t nobjs;		/* objects per slab */
	uint16_t npages;	/* pages per slab */
};

/* slab.c: class geometry, filled once by ucma_slab_init(). */
UCMA_INTERNAL extern struct ucma_class ucma_classes[UCMA_NR_CLASSES];
UCMA_INTERNAL extern uint8_t ucma_class_of_size[UCMA_SMALL_MAX / 16 + 1];

static inline unsigned ucma_size_class(size_t size)
{
	return ucma_class_of_size[(size + 15) >> 4];
}

/*
 * struct ucma_slab - descriptor of one slab, out of band (meta.c, 128
 * bytes, naturally aligned).  A slab exists while any of its objects is
 * allocated or parked in a thread cache: the bitmap counts both as taken,
 * so a valid pointer always finds a live descriptor.
 *
 * Locking and atomicity:
 *  - First cache line (base .. pfn): written by slab_create() before the
 *    slab is published, then never while the slab exists.  Publication is
 *    the release store of the pages' owner_type (ucma_run_set_owner()) or
 *    of the overflow chunk's owner entries (ovf_span_alloc()); a thread
 *    reaches the descriptor only through a block it was handed, after
 *    that store, so free() reads the line without a lock.  Keeping it
 *    apart from the second line means those reads do not contend with the
 *    bin lock holder.
 *  - Second cache line (nfree .. free_bits): read and written only under
 *    the lock of the central bin bins[binset][cls] (slab.c), including the
 *    double-free look of ucma_slab_obj_is_free().
 */
struct ucma_slab {
	/* first cache line: constant while the slab exists, read without a lock */
	uintptr_t base;			/* address of object 0 (slab start) */
	uint64_t divisor;		/* ceil(2^64 / size): see ucma_slab_offset_bad() */
	uint32_t size;			/* object size */
	uint32_t limit;			/* nobjs * size */
	uint8_t cls;			/* size class */
	uint8_t where;			/* UCMA_SLAB_ARENA or UCMA_SLAB_OVERFLOW */
	uint8_t binset;			/* central bin set it belongs to */
	uint8_t pad;
	uint32_t pfn;			/* run head, arena slabs only */
	uint8_t pad_line[32];
	/* second cache line: the bin lock of bins[binset][cls] */
	uint16_t nfree;			/* objects free in the slab */
	uint8_t list;			/* which bin list holds it */
	uint8_t pad2[5];
	struct ucma_slab *next, *prev;	/* bin list links */
	uint64_t free_bits[UCMA_SLAB_MAX_OBJS / 64];	/* 1 = free */
};
_Static_assert(offsetof(struct ucma_slab, nfree) == 64 && sizeof(struct ucma_slab) <= 128,
	       "slab descriptor: a constant line, then a line for the bin lock holder");

#define UCMA_SLAB_ARENA    0
#define UCMA_SLAB_OVERFLOW 1

/*
 * Does @p fail to start an object of slab @s?  The offset must be below
 * the slab's limit and a multiple of the size, which one multiplication
 * decides exactly: for n, d < 2^32 and M = ceil(2^64 / d), d divides n
 * iff n * M mod 2^64 < M (Lemire, Kaser and Kurz, "Faster remainder by
 * direct computation", 2019).
 */
static inline bool ucma_slab_offset_bad(const struct ucma_slab *s, const void *p)
{
	uintptr_t off = (uintptr_t)p - s->base;

	return off >= s->limit || (uint64_t)off * s->divisor >= s->divisor;
}

UCMA_INTERNAL void ucma_slab_init(void);
/* Central bins come in sets (like jemalloc's arenas): a thread fills its
 * cache from one set, so threads running at once carve different slabs
 * and do not share cache lines; frees go back to the set of the slab. */
UCMA_INTERNAL unsigned ucma_slab_binset_next(void);
/* Take up to @want objects of class @cls from the slabs of bin set @set,
 * lowest address first in out[0]; creates slabs as needed.  out[] may be
 * a cache bin's stack, which other threads read: it is written with
 * relaxed atomic stores.  Returns how many (0: ENOMEM). */
UCMA_INTERNAL unsigned ucma_slab_alloc_batch(unsigned set, unsigned cls, void **out,
					     unsigned want);
/* Give objects of class @cls back to their slabs; aborts on a double free.
 * Reorders objs[]. */
UCMA_INTERNAL void ucma_slab_free_batch(unsigned cls, void **objs, unsigned n);
/* The slab holding @p (arena or overflow), or NULL. */
UCMA_INTERNAL struct ucma_slab *ucma_slab_of(const void *p);
/* Is the object at @p free in its slab (not allocated, not in a cache)? */
UCMA_INTERNAL bool ucma_slab_obj_is_free(struct ucma_slab *s, const void *p);
/* Return every cached empty slab; the number of bytes released. */
UCMA_INTERNAL size_t ucma_slab_trim(void);
/* Bytes of arena pages in slabs (cached empty ones included). */
UCMA_INTERNAL uint64_t ucma_slab_active_bytes(void);
UCMA_INTERNAL void ucma_slab_atfork_prepare(void);
UCMA_INTERNAL void ucma_slab_atfork_parent(void);
UCMA_INTERNAL void ucma_slab_atfork_child(void);

/* slab.c: overflow outside the arena (plain mmap), found through a radix
 * tree keyed by address >> 21 that readers walk without a lock. */
enum ucma_ovf_kind { UCMA_OVF_NONE = 0, UCMA_OVF_SLAB, UCMA_OVF_LARGE, UCMA_OVF_OTHER };
struct ucma_ovf_ref {
	int kind;			/* enum ucma_ovf_kind */
	struct ucma_slab *slab;		/* UCMA_OVF_SLAB */
	void *user;			/* UCMA_OVF_LARGE: the address handed out */
	size_t usable;			/* UCMA_OVF_LARGE: bytes from user on */
	void *region;			/* the mapping's descriptor */
};
/* Classify @p; UCMA_OVF_NONE when it is in no overflow mapping,
 * UCMA_OVF_OTHER when it is in one but on no object. */
UCMA_INTERNAL int ucma_overflow_find(const void *p, struct ucma_ovf_ref *ref);
/* A large block of its own mapping, zeroed; NULL with ENOMEM. */
UCMA_INTERNAL void *ucma_overflow_large_alloc(size_t size, size_t align, size_t *usable);
UCMA_INTERNAL void ucma_overflow_large_free(const struct ucma_ovf_ref *ref);
UCMA_INTERNAL uint64_t ucma_overflow_bytes(void);

/* AddressSanitizer: free objects and free slab space are poisoned. */
#ifdef UCMA_ASAN
#include <sanitizer/asan_interface.h>
#define UCMA_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UCMA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define UCMA_POISON(p, n)   ((void)(p), (void)(n))
#define UCMA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#endif /* UCMA_SLAB_H */
