/*
 * overflow.h - the malloc family's memory outside the arena (overflow.c):
 * spans of 4 MiB chunks for slabs, and large blocks in mappings of their
 * own, found through a radix tree keyed by address >> 21 that readers walk
 * without a lock.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_OVERFLOW_H
#define UCMA_OVERFLOW_H

#include "internal.h"

struct ucma_slab;

enum ucma_ovf_kind { UCMA_OVF_NONE = 0, UCMA_OVF_SLAB, UCMA_OVF_LARGE, UCMA_OVF_OTHER };

/*
 * struct ucma_ovf_ref - what ucma_overflow_find() saw of an address: a
 * copy, on the caller's stack, read without a lock (a concurrent free of
 * the same block is the caller's double free, caught under the lock).
 */
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
/* A large block of a mapping of its own: a freed one of about its size
 * when one is kept, else a new one.  Zeroed (all its usable size) when
 * @zero; NULL with ENOMEM. */
UCMA_INTERNAL void *ucma_overflow_large_alloc(size_t size, size_t align, bool zero,
					      size_t *usable);
/* Free the large block @ref found: kept for reuse within
 * UCMA_OVERFLOW_CACHE, else unmapped.  False when it was no longer live
 * (another thread freed it since ucma_overflow_find()). */
UCMA_INTERNAL bool ucma_overflow_large_free(const struct ucma_ovf_ref *ref);
/* Resize the large block @ref found to the length of @size's class by
 * mremap(), in place or at a new address (the old one is then gone);
 * NULL, the block unchanged, when that cannot be done. */
UCMA_INTERNAL void *ucma_overflow_large_resize(const struct ucma_ovf_ref *ref, size_t size,
					       size_t *usable);
/* Unmap every kept large block; returns the bytes given back. */
UCMA_INTERNAL size_t ucma_overflow_trim(void);
/* Unmap the kept large blocks older than UCMA_DECAY_MS; nothing when
 * another thread holds the overflow's lock (the zone's purge calls it). */
UCMA_INTERNAL void ucma_overflow_decay(void);
/* Bytes of chunks and large blocks outside the arena, kept ones included
 * (a large block's mapping may be longer: whole granules). */
UCMA_INTERNAL uint64_t ucma_overflow_bytes(void);
/* Bytes of freed large blocks kept mapped for reuse. */
UCMA_INTERNAL uint64_t ucma_overflow_cached_bytes(void);

/* @npages pages (at most UCMA_SLAB_MAX_PAGES) for slab @s, recorded as
 * their owner; NULL with ENOMEM. */
UCMA_INTERNAL void *ucma_overflow_span_alloc(uint32_t npages, struct ucma_slab *s);
/* Give back a span of ucma_overflow_span_alloc(); its memory goes back to
 * the kernel. */
UCMA_INTERNAL void ucma_overflow_span_free(void *addr, uint32_t npages);

/* fork(): ovf_lock held across it (taken last, after the slab locks). */
UCMA_INTERNAL void ucma_overflow_atfork_prepare(void);
UCMA_INTERNAL void ucma_overflow_atfork_release(void);

#endif /* UCMA_OVERFLOW_H */
