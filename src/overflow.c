/*
 * overflow.c - the malloc family's memory outside the arena.
 *
 * When the NORMAL zone is exhausted (or there is no arena at all), slabs
 * are carved from 4 MiB chunks mapped with ucma_os.mmap, and large blocks
 * get mappings of their own.  Every overflow mapping starts on a 2 MiB
 * boundary, so each 2 MiB granule of the address space meets at most one
 * of them; a two-level radix tree keyed by address >> 21 maps a granule to
 * its mapping's descriptor.  Readers (free, ucma_owns) walk it without a
 * lock; writers hold ovf_lock.  Freed chunk spans are returned to the
 * kernel with MADV_DONTNEED and kept on per-size free lists, linked
 * through the chunk's page-owner array (tagged with bit 0, so a stale
 * pointer into a free span finds no slab).
 *
 * ovf_lock is innermost: slab.c calls in with a bin lock dropped, and
 * nothing here takes another lock but meta.c's.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "overflow.h"
#include "slab.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define OVF_GRANULE_SHIFT 21
#define OVF_GRANULE       ((uintptr_t)1 << OVF_GRANULE_SHIFT)
#define OVF_LEAF_BITS     13
#define OVF_ROOT_BITS     13	/* 21 + 13 + 13 = 47 bits of user address space */
#define OVF_ADDR_BITS     (OVF_GRANULE_SHIFT + OVF_LEAF_BITS + OVF_ROOT_BITS)
#define OVF_CHUNK_SIZE    ((size_t)4 << 20)
#define OVF_CHUNK_PAGES   ((uint32_t)(OVF_CHUNK_SIZE >> UCMA_PAGE_SHIFT))
#define OVF_FREE_TAG      ((uintptr_t)1)

enum { OVF_REGION_CHUNK = 1, OVF_REGION_LARGE };

/*
 * struct ovf_region - one overflow mapping.  base/len/kind/user never
 * change while the region is registered.  For chunks, @owner[i] is the
 * slab holding page i, or a tagged word (bit 0 set) for pages of a free
 * span: the head page of a free span holds the address of the next free
 * span of the same size | 1.  @owner and @bump are protected by ovf_lock,
 * except that readers load owner entries of allocated spans without it.
 */
struct ovf_region {
	uintptr_t base;
	size_t len;
	int kind;
	uint32_t bump;			/* chunk: first never-used page */
	uintptr_t user;			/* large: the address handed out */
	uintptr_t owner[];		/* chunk: OVF_CHUNK_PAGES entries */
};

struct ovf_leaf {
	struct ovf_region *r[1u << OVF_LEAF_BITS];
};

static struct ovf_leaf *ovf_root[1u << OVF_ROOT_BITS];
static pthread_mutex_t UCMA_FORK_LOCK ovf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ovf_region *ovf_chunk;			/* being carved */
static uintptr_t ovf_span_free[UCMA_SLAB_MAX_PAGES + 1];	/* free spans by size */
static uint64_t ovf_bytes;				/* mapped (atomic) */

static struct ovf_region *ovf_region_of(const void *p)
{
	uintptr_t g = (uintptr_t)p >> OVF_GRANULE_SHIFT;
	struct ovf_leaf *leaf;
	struct ovf_region *r;

	if ((uintptr_t)p >> OVF_ADDR_BITS)
		return NULL;
	leaf = __atomic_load_n(&ovf_root[g >> OVF_LEAF_BITS], __ATOMIC_ACQUIRE);
	if (!leaf)
		return NULL;
	r = __atomic_load_n(&leaf->r[g & ((1u << OVF_LEAF_BITS) - 1)], __ATOMIC_ACQUIRE);
	if (!r || (uintptr_t)p - r->base >= r->len)
		return NULL;
	return r;
}

/* Point the granules of [base, base + len) at @r (NULL: forget).  Returns
 * -1 when a leaf cannot be allocated.  Called with ovf_lock held. */
static int ovf_register(uintptr_t base, size_t len, struct ovf_region *r)
{
	for (uintptr_t g = base >> OVF_GRANULE_SHIFT; g <= (base + len - 1) >> OVF_GRANULE_SHIFT;
	     g++) {
		struct ovf_leaf *leaf = ovf_root[g >> OVF_LEAF_BITS];

		if (!leaf) {
			if (!r)
				continue;
			leaf = ucma_meta_alloc(sizeof(*leaf));
			if (!leaf)
				return -1;
			__atomic_store_n(&ovf_root[g >> OVF_LEAF_BITS], leaf, __ATOMIC_RELEASE);
		}
		__atomic_store_n(&leaf->r[g & ((1u << OVF_LEAF_BITS) - 1)], r, __ATOMIC_RELEASE);
	}
	return 0;
}

/*
 * Map @len bytes (a multiple of the page size) starting on an @align
 * boundary (at least 2 MiB): over-map, then unmap the slack on both sides.
 */
static void *ovf_map(size_t len, size_t align)
{
	size_t total;
	uintptr_t raw, base;
	void *m;

	if (align < OVF_GRANULE)
		align = OVF_GRANULE;
	if (__builtin_add_overflow(len, align, &total))
		return NULL;
	m = ucma_os.mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	raw = (uintptr_t)m;
	base = UCMA_ALIGN_UP(raw, align);
	if (base > raw)
		ucma_os.munmap(m, base - raw);
	if (raw + total > base + len)
		ucma_os.munmap((void *)(base + len), raw + total - (base + len));
	if ((base + len - 1) >> OVF_ADDR_BITS) {
		/* Beyond what the radix tree covers (5-level paging with a
		 * hint): not usable for overflow. */
		ucma_os.munmap((void *)base, len);
		return NULL;
	}
	return (void *)base;
}

/* A new chunk for slab spans (ovf_lock held). */
static struct ovf_region *ovf_chunk_new(void)
{
	size_t rsize = sizeof(struct ovf_region) + OVF_CHUNK_PAGES * sizeof(uintptr_t);
	struct ovf_region *r = ucma_meta_alloc(rsize);
	void *m;

	if (!r)
		return NULL;
	m = ovf_map(OVF_CHUNK_SIZE, OVF_GRANULE);
	if (!m) {
		ucma_meta_free(r, rsize);
		return NULL;
	}
	r->base = (uintptr_t)m;
	r->len = OVF_CHUNK_SIZE;
	r->kind = OVF_REGION_CHUNK;
	r->bump = 0;
	if (ovf_register(r->base, r->len, r) != 0) {
		ovf_register(r->base, r->len, NULL);
		ucma_os.munmap(m, OVF_CHUNK_SIZE);
		ucma_meta_free(r, rsize);
		return NULL;
	}
	__atomic_fetch_add(&ovf_bytes, OVF_CHUNK_SIZE, __ATOMIC_RELAXED);
	return r;
}

/* @npages pages for slab @s outside the arena; NULL with ENOMEM. */
void *ucma_overflow_span_alloc(uint32_t npages, struct ucma_slab *s)
{
	struct ovf_region *r;
	uintptr_t addr;
	uint32_t first;

	ucma_mutex_lock(&ovf_lock);
	addr = ovf_span_free[npages];
	if (addr) {
		r = ovf_region_of((void *)addr);
		first = (uint32_t)((addr - r->base) >> UCMA_PAGE_SHIFT);
		ovf_span_free[npages] = r->owner[first] & ~OVF_FREE_TAG;
	} else {
		if (!ovf_chunk || ovf_chunk->bump + npages > OVF_CHUNK_PAGES) {
			r = ovf_chunk_new();
			if (!r) {
				ucma_mutex_unlock(&ovf_lock);
				errno = ENOMEM;
				return NULL;
			}
			ovf_chunk = r;
		}
		r = ovf_chunk;
		first = r->bump;
		r->bump += npages;
		addr = r->base + ((uintptr_t)first << UCMA_PAGE_SHIFT);
	}
	for (uint32_t i = 0; i < npages; i++)
		__atomic_store_n(&r->owner[first + i], (uintptr_t)s, __ATOMIC_RELEASE);
	ucma_mutex_unlock(&ovf_lock);
	return (void *)addr;
}

void ucma_overflow_span_free(void *addr, uint32_t npages)
{
	struct ovf_region *r = ovf_region_of(addr);
	uint32_t first = (uint32_t)(((uintptr_t)addr - r->base) >> UCMA_PAGE_SHIFT);

	/* The span is still ours: give its memory back before listing it. */
	ucma_os.madvise(addr, (size_t)npages << UCMA_PAGE_SHIFT, MADV_DONTNEED);
	ucma_mutex_lock(&ovf_lock);
	for (uint32_t i = 1; i < npages; i++)
		__atomic_store_n(&r->owner[first + i], OVF_FREE_TAG, __ATOMIC_RELAXED);
	__atomic_store_n(&r->owner[first], ovf_span_free[npages] | OVF_FREE_TAG,
			 __ATOMIC_RELAXED);
	ovf_span_free[npages] = (uintptr_t)addr;
	ucma_mutex_unlock(&ovf_lock);
}

int ucma_overflow_find(const void *p, struct ucma_ovf_ref *ref)
{
	struct ovf_region *r = ovf_region_of(p);

	memset(ref, 0, sizeof(*ref));
	if (!r)
		return ref->kind = UCMA_OVF_NONE;
	ref->region = r;
	if (r->kind == OVF_REGION_LARGE) {
		ref->kind = UCMA_OVF_LARGE;
		ref->user = (void *)r->user;
		ref->usable = r->base + r->len - r->user;
		return ref->kind;
	}
	uintptr_t o = __atomic_load_n(&r->owner[((uintptr_t)p - r->base) >> UCMA_PAGE_SHIFT],
				      __ATOMIC_ACQUIRE);
	if (o == 0 || (o & OVF_FREE_TAG))
		return ref->kind = UCMA_OVF_OTHER;
	ref->slab = (struct ucma_slab *)o;
	return ref->kind = UCMA_OVF_SLAB;
}

void *ucma_overflow_large_alloc(size_t size, size_t align, size_t *usable)
{
	size_t len;
	struct ovf_region *r;
	void *m;

	if (align < UCMA_PAGE_SIZE)
		align = UCMA_PAGE_SIZE;
	if (size > SIZE_MAX / 2 || size == 0) {
		errno = ENOMEM;
		return NULL;
	}
	len = UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE);
	r = ucma_meta_alloc(sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	m = ovf_map(len, align);
	if (!m) {
		ucma_meta_free(r, sizeof(*r));
		errno = ENOMEM;
		return NULL;
	}
	r->base = (uintptr_t)m;
	r->len = len;
	r->kind = OVF_REGION_LARGE;
	r->user = (uintptr_t)m;
	ucma_mutex_lock(&ovf_lock);
	if (ovf_register(r->base, r->len, r) != 0) {
		ovf_register(r->base, r->len, NULL);
		ucma_mutex_unlock(&ovf_lock);
		ucma_os.munmap(m, len);
		ucma_meta_free(r, sizeof(*r));
		errno = ENOMEM;
		return NULL;
	}
	ucma_mutex_unlock(&ovf_lock);
	__atomic_fetch_add(&ovf_bytes, len, __ATOMIC_RELAXED);
	ucma_count(UCMA_STAT_OVERFLOW_ALLOC, 1);
	*usable = len;
	return m;
}

void ucma_overflow_large_free(const struct ucma_ovf_ref *ref)
{
	struct ovf_region *r = ref->region;
	size_t len = r->len;

	ucma_mutex_lock(&ovf_lock);
	ovf_register(r->base, len, NULL);
	ucma_mutex_unlock(&ovf_lock);
	ucma_os.munmap((void *)r->base, len);
	ucma_meta_free(r, sizeof(*r));
	__atomic_fetch_sub(&ovf_bytes, len, __ATOMIC_RELAXED);
	ucma_count(UCMA_STAT_OVERFLOW_FREE, 1);
}

uint64_t ucma_overflow_bytes(void)
{
	return __atomic_load_n(&ovf_bytes, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------ */
/* Fork                                                                      */
/* ------------------------------------------------------------------------ */

void ucma_overflow_atfork_prepare(void)
{
	ucma_mutex_lock(&ovf_lock);
}

/* In the parent and in the child (one thread, which holds the lock; the
 * state it protects is consistent). */
void ucma_overflow_atfork_release(void)
{
	ucma_mutex_unlock(&ovf_lock);
}
