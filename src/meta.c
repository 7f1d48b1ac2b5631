/*
 * meta.c - memory for the allocator's own metadata (slab descriptors,
 * handle-table chunks, deferred-free records).
 *
 * Metadata never comes from malloc (under LD_PRELOAD that is ourselves)
 * and never from the arena (a user's overflow must not reach it).  Sizes
 * are rounded to a power of two from 64 bytes to 64 KiB; each class keeps
 * a free list threaded through the freed blocks and carves new blocks from
 * 2 MiB chunks mapped on demand.  Larger requests get their own mapping.
 * One lock: metadata is allocated on slow paths only.  It is the innermost
 * lock (nothing else is taken under it), so its fork handler comes last
 * (fork.c): a child never inherits it held by a thread it does not have.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"

#include "fork.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define META_MIN_SHIFT 6
#define META_MAX_SHIFT 16
#define META_NR_CLASSES (META_MAX_SHIFT - META_MIN_SHIFT + 1)
#define META_CHUNK (2u << 20)

struct meta_free {
	struct meta_free *next;
	uint64_t marker;	/* debug builds: META_FREED while on a free list */
};

#define META_FREED 0x6d65746166726565ull	/* "metafree" */

static pthread_mutex_t UCMA_FORK_LOCK meta_lock = PTHREAD_MUTEX_INITIALIZER;
static struct meta_free *meta_free_list[META_NR_CLASSES];
static char *meta_cur, *meta_end;

void ucma_meta_fork_prepare(void)
{
	ucma_mutex_lock(&meta_lock);
}

void ucma_meta_fork_parent(void)
{
	ucma_mutex_unlock(&meta_lock);
}

static unsigned meta_class(size_t size)
{
	unsigned shift = META_MIN_SHIFT;

	while (((size_t)1 << shift) < size)
		shift++;
	return shift - META_MIN_SHIFT;
}

static void *map_meta(size_t len)
{
	void *p = ucma_os.mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0);

	return p == MAP_FAILED ? NULL : p;
}

static void *meta_alloc(size_t size, bool zero)
{
	unsigned c;
	size_t csize;
	void *p;

	if (size > ((size_t)1 << META_MAX_SHIFT)) {
		p = map_meta(UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE));
		if (!p)
			errno = ENOMEM;
		return p;
	}
	c = meta_class(size);
	csize = (size_t)1 << (c + META_MIN_SHIFT);
	ucma_mutex_lock(&meta_lock);
	if (meta_free_list[c]) {
		p = meta_free_list[c];
		meta_free_list[c] = meta_free_list[c]->next;
		((struct meta_free *)p)->marker = 0;
		ucma_mutex_unlock(&meta_lock);
		if (zero)
			memset(p, 0, csize);
		return p;
	}
	if (!meta_cur || (size_t)(meta_end - meta_cur) < csize) {
		/* The rest of the old chunk is too small for this class; hand
		 * it out as smaller blocks later is not worth the code. */
		char *chunk = map_meta(META_CHUNK);

		if (!chunk) {
			ucma_mutex_unlock(&meta_lock);
			errno = ENOMEM;
			return NULL;
		}
		meta_cur = chunk;
		meta_end = chunk + META_CHUNK;
	}
	/* Blocks are naturally aligned to their size within a chunk. */
	meta_cur = (char *)UCMA_ALIGN_UP((uintptr_t)meta_cur, csize);
	if ((size_t)(meta_end - meta_cur) < csize) {
		ucma_mutex_unlock(&meta_lock);
		return meta_alloc(size, zero);	/* next chunk */
	}
	p = meta_cur;
	meta_cur += csize;
	ucma_mutex_unlock(&meta_lock);
	return p;	/* fresh anonymous memory is zero */
}

void *ucma_meta_alloc(size_t size)
{
	return meta_alloc(size, true);
}

void *ucma_meta_alloc_uninit(size_t size)
{
	return meta_alloc(size, false);
}

void ucma_meta_free(void *p, size_t size)
{
	struct meta_free *f = p;
	unsigned c;

	if (!p)
		return;
	if (size > ((size_t)1 << META_MAX_SHIFT)) {
		ucma_os.munmap(p, UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE));
		return;
	}
	c = meta_class(size);
	ucma_mutex_lock(&meta_lock);
	/* Debug builds: a block freed twice would be handed out twice. */
	if (ucma_config_debug && f->marker == META_FREED)
		for (struct meta_free *q = meta_free_list[c]; q; q = q->next)
			if (q == f)
				ucma_fatal("internal error: metadata block %p freed twice", p);
	f->next = meta_free_list[c];
	f->marker = META_FREED;
	meta_free_list[c] = f;
	ucma_mutex_unlock(&meta_lock);
}
