/*
 * overflow.c - the malloc family's memory outside the arena.
 *
 * When the NORMAL zone is exhausted (or there is no arena at all), slabs
 * are carved from 4 MiB chunks mapped with ucma_os.mmap, and large blocks
 * get mappings of their own, of whole granules (ovf_map()).  Every overflow mapping starts on a 2 MiB
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
#include <sys/resource.h>

#define OVF_GRANULE_SHIFT 21
#define OVF_GRANULE       ((uintptr_t)1 << OVF_GRANULE_SHIFT)
#define OVF_LEAF_BITS     13
#define OVF_ROOT_BITS     13	/* 21 + 13 + 13 = 47 bits of user address space */
#define OVF_ADDR_BITS     (OVF_GRANULE_SHIFT + OVF_LEAF_BITS + OVF_ROOT_BITS)
#define OVF_CHUNK_SIZE    ((size_t)4 << 20)
#define OVF_CHUNK_PAGES   ((uint32_t)(OVF_CHUNK_SIZE >> UCMA_PAGE_SHIFT))
#define OVF_FREE_TAG      ((uintptr_t)1)

#define OVF_CACHE_MAX     256u	/* regions kept at most */
#define OVF_CLASSES       208u	/* size classes of large regions (ovf_class()) */

enum { OVF_REGION_CHUNK = 1, OVF_REGION_LARGE, OVF_REGION_CACHED };

/*
 * struct ovf_region - one overflow mapping.  Writers hold ovf_lock;
 * readers look without it.  base/len/user of a chunk never change; those
 * of a large block change only when its owner resizes it (realloc), so a
 * lookup of another block never sees them change.  @kind changes between
 * OVF_REGION_LARGE (a block handed out) and OVF_REGION_CACHED (freed,
 * kept for reuse), and readers load it atomically.  The links of a cached
 * region are ovf_lock's.  For chunks, @owner[i] is the
 * slab holding page i, or a tagged word (bit 0 set) for pages of a free
 * span: the head page of a free span holds the address of the next free
 * span of the same size | 1.  @owner and @bump are protected by ovf_lock,
 * except that readers load owner entries of allocated spans without it.
 */
struct ovf_region {
	uintptr_t base;
	size_t len;
	size_t map;			/* bytes mapped from @base: whole granules */
	int kind;
	uint32_t bump;			/* chunk: first never-used page */
	uintptr_t user;			/* large: the address handed out */
	uint64_t freed_ns;		/* cached: when it was freed */
	struct ovf_region *older, *newer;	/* cached: the cache's age list */
	struct ovf_region *next_same;	/* cached: its class's list */
	struct ovf_region *prev_same;
	uintptr_t owner[];		/* chunk: OVF_CHUNK_PAGES entries */
};

struct ovf_leaf {
	struct ovf_region *r[1u << OVF_LEAF_BITS];
};

static struct ovf_leaf *ovf_root[1u << OVF_ROOT_BITS];
static pthread_mutex_t UCMA_FORK_LOCK ovf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ovf_region *ovf_chunk;			/* being carved */
static uintptr_t ovf_span_free[UCMA_SLAB_MAX_PAGES + 1];	/* free spans by size */
static uint64_t ovf_bytes;	/* chunks' and large blocks' lengths (atomic) */

/*
 * struct ovf_cache - freed large regions kept mapped and registered (kind
 * OVF_REGION_CACHED) for the next large blocks of their size class: at
 * most OVF_CACHE_MAX of them and UCMA_OVERFLOW_CACHE bytes, each kept at
 * most UCMA_DECAY_MS.  Every region the cache may keep is mapped at the
 * length of its class, four classes per doubling (ovf_class()), so a
 * request takes the last one freed of its class, or else of the next
 * class, without a search.  The
 * age list, oldest first, says which go first when the cache is full and
 * which have decayed.  All of it under ovf_lock; @nr and @bytes are also
 * read without it (atomic loads) to skip the lock when the cache is empty,
 * and for the statistics.
 */
struct ovf_cache {
	unsigned nr;
	size_t bytes;
	uint64_t next_decay_ns;		/* the decay looks again from then on */
	struct ovf_region *oldest, *newest;
	struct ovf_region *by_class[OVF_CLASSES];	/* last freed first */
};

static struct ovf_cache ovf_cache;

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

/* Point the granules of [base, base + len) at @r.  Returns -1 when a
 * leaf cannot be allocated.  Called with ovf_lock held. */
static int ovf_register(uintptr_t base, size_t len, struct ovf_region *r)
{
	for (uintptr_t g = base >> OVF_GRANULE_SHIFT; g <= (base + len - 1) >> OVF_GRANULE_SHIFT;
	     g++) {
		struct ovf_leaf *leaf = ovf_root[g >> OVF_LEAF_BITS];

		if (!leaf) {
			leaf = ucma_meta_alloc(sizeof(*leaf));
			if (!leaf)
				return -1;
			__atomic_store_n(&ovf_root[g >> OVF_LEAF_BITS], leaf, __ATOMIC_RELEASE);
		}
		__atomic_store_n(&leaf->r[g & ((1u << OVF_LEAF_BITS) - 1)], r, __ATOMIC_RELEASE);
	}
	return 0;
}

/* Forget the granules of [base, base + len): all of them, or with @only
 * those that still point at it (another mapping may have taken the others
 * since the kernel freed them).  Called with ovf_lock held. */
static void ovf_forget(uintptr_t base, size_t len, const struct ovf_region *only)
{
	for (uintptr_t g = base >> OVF_GRANULE_SHIFT; g <= (base + len - 1) >> OVF_GRANULE_SHIFT;
	     g++) {
		struct ovf_leaf *leaf = ovf_root[g >> OVF_LEAF_BITS];
		struct ovf_region **slot;

		if (!leaf)
			continue;
		slot = &leaf->r[g & ((1u << OVF_LEAF_BITS) - 1)];
		if (!only || *slot == only)
			__atomic_store_n(slot, NULL, __ATOMIC_RELEASE);
	}
}

/*
 * Map @len bytes (a multiple of the page size) starting on an @align
 * boundary (at least a granule).  Whole granules, so that the kernel's
 * top-down placement puts the next mapping right below this one (or in
 * the hole a freed one left, which is whole granules too), on a boundary
 * already and continuing it: first tried as it is; else over-mapped,
 * keeping the highest piece on a boundary.  Adjacent mappings of the same
 * kind are then one kernel VMA, not one a block: a heap of 80,000 blocks
 * of 40 KB past the arena, each trimmed to its own length, took every one
 * of vm.max_map_count's 65,530.
 */
static void *ovf_map(size_t len, size_t align)
{
	size_t total;
	uintptr_t raw, base;
	void *m;

	if (align < OVF_GRANULE)
		align = OVF_GRANULE;
	if (!(len & (OVF_GRANULE - 1))) {
		m = ucma_os.mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
				 0);
		if (m == MAP_FAILED)
			return NULL;
		if (!((uintptr_t)m & (align - 1)) && !(((uintptr_t)m + len - 1) >> OVF_ADDR_BITS))
			return m;
		ucma_os.munmap(m, len);
	}
	if (__builtin_add_overflow(len, align, &total))
		return NULL;
	m = ucma_os.mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	raw = (uintptr_t)m;
	base = UCMA_ALIGN_DOWN(raw + total - len, align);
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

/*
 * Whole granules for a large block's mapping (see ovf_map()), unless the
 * part past the block would cost more than address space: where the
 * kernel counts every writable mapping's memory (vm.overcommit_memory=2),
 * where address space or data size is limited (RLIMIT_AS, RLIMIT_DATA:
 * 2 MiB a 40 KB block would reach them 50 times sooner), and once a new
 * mapping came back resident (mlockall(MCL_FUTURE) fills and locks every
 * new mapping): then a block maps its own length, one kernel mapping
 * each, as before.  Decided at the first large block, the last condition
 * at every new mapping; sticky.
 */
static int ovf_whole = -1;	/* -1 not decided yet; atomic */

static bool whole_granules(void)
{
	int w = __atomic_load_n(&ovf_whole, __ATOMIC_RELAXED);

	if (w < 0) {
		struct rlimit as, data;
		int saved = errno;

		w = !ucma_os_overcommit_strict() && getrlimit(RLIMIT_AS, &as) == 0 &&
		    as.rlim_cur == RLIM_INFINITY && getrlimit(RLIMIT_DATA, &data) == 0 &&
		    data.rlim_cur == RLIM_INFINITY;
		errno = saved;
		__atomic_store_n(&ovf_whole, w, __ATOMIC_RELAXED);
	}
	return w;
}

/* The bytes a large block of @len bytes maps. */
static size_t map_length(size_t len)
{
	return whole_granules() ? UCMA_ALIGN_UP(len, OVF_GRANULE) : len;
}

/*
 * A new mapping of whole granules for a block of @len bytes at @m: under
 * THP "always" it refuses huge pages (all such mappings do, so that
 * neighbours still merge), or the first touch of a 40 KB block would take
 * a 2 MiB page; and should its last page be resident already (locked), the
 * part past the block goes and no later block maps whole granules.
 * Returns the bytes that stay mapped.
 */
static size_t whole_granules_check(void *m, size_t len, size_t map)
{
	static int thp_always = -1;	/* unknown yet; atomic */
	int a = __atomic_load_n(&thp_always, __ATOMIC_RELAXED);
	int saved = errno;
	unsigned char resident = 0;

	if (a < 0) {
		a = ucma_os_thp_always();
		__atomic_store_n(&thp_always, a, __ATOMIC_RELAXED);
	}
	if (a)
		ucma_os.madvise(m, map, MADV_NOHUGEPAGE);
	if (map > len && mincore((char *)m + map - UCMA_PAGE_SIZE, UCMA_PAGE_SIZE, &resident) == 0 &&
	    (resident & 1)) {
		__atomic_store_n(&ovf_whole, 0, __ATOMIC_RELAXED);
		ucma_os.munmap((char *)m + len, map - len);
		map = len;
	}
	errno = saved;
	return map;
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
	r->map = OVF_CHUNK_SIZE;
	r->kind = OVF_REGION_CHUNK;
	r->bump = 0;
	if (ovf_register(r->base, r->len, r) != 0) {
		ovf_forget(r->base, r->len, NULL);
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
	int kind;

	memset(ref, 0, sizeof(*ref));
	if (!r)
		return ref->kind = UCMA_OVF_NONE;
	ref->region = r;
	kind = __atomic_load_n(&r->kind, __ATOMIC_ACQUIRE);
	if (kind == OVF_REGION_LARGE) {
		ref->kind = UCMA_OVF_LARGE;
		ref->user = (void *)r->user;
		ref->usable = r->base + r->len - r->user;
		return ref->kind;
	}
	if (kind == OVF_REGION_CACHED)
		return ref->kind = UCMA_OVF_OTHER;	/* a freed large block */
	uintptr_t o = __atomic_load_n(&r->owner[((uintptr_t)p - r->base) >> UCMA_PAGE_SHIFT],
				      __ATOMIC_ACQUIRE);
	if (o == 0 || (o & OVF_FREE_TAG))
		return ref->kind = UCMA_OVF_OTHER;
	ref->slab = (struct ucma_slab *)o;
	return ref->kind = UCMA_OVF_SLAB;
}

/* ------------------------------------------------------------------------ */
/* Large blocks, and the cache of freed ones                                 */
/* ------------------------------------------------------------------------ */

/*
 * The size class of a large block of @pages pages, ucma_large_round()'s
 * four per doubling: 1, 2, 3, 4, then 5..8 in steps of 1, 9..16 in steps
 * of 2, and so on.  *@rounded gets the class's length in pages.
 */
static unsigned ovf_class(size_t pages, size_t *rounded)
{
	unsigned lg;

	if (pages <= 4) {
		*rounded = pages;
		return (unsigned)pages - 1;
	}
	*rounded = ucma_large_round(pages << UCMA_PAGE_SHIFT) >> UCMA_PAGE_SHIFT;
	lg = 63u - (unsigned)__builtin_clzll((unsigned long long)*rounded - 1);	/* >= 2 */
	return 4 * (lg - 1) + (unsigned)(*rounded >> (lg - 2)) - 5;	/* 5..8 steps */
}

/* Take @r out of the cache (ovf_lock held). */
static void cache_unlink(struct ovf_region *r)
{
	size_t pages;
	unsigned c = ovf_class(r->len >> UCMA_PAGE_SHIFT, &pages);

	if (r->older)
		r->older->newer = r->newer;
	else
		ovf_cache.oldest = r->newer;
	if (r->newer)
		r->newer->older = r->older;
	else
		ovf_cache.newest = r->older;
	if (r->prev_same)
		r->prev_same->next_same = r->next_same;
	else
		ovf_cache.by_class[c] = r->next_same;
	if (r->next_same)
		r->next_same->prev_same = r->prev_same;
	__atomic_store_n(&ovf_cache.nr, ovf_cache.nr - 1, __ATOMIC_RELAXED);
	__atomic_store_n(&ovf_cache.bytes, ovf_cache.bytes - r->len, __ATOMIC_RELAXED);
}

/* Keep @r, freed at @now, in class @c (ovf_lock held). */
static void cache_link(struct ovf_region *r, unsigned c, uint64_t now)
{
	r->freed_ns = now;
	r->older = ovf_cache.newest;
	r->newer = NULL;
	if (ovf_cache.newest)
		ovf_cache.newest->newer = r;
	else
		ovf_cache.oldest = r;
	ovf_cache.newest = r;
	r->prev_same = NULL;
	r->next_same = ovf_cache.by_class[c];
	if (r->next_same)
		r->next_same->prev_same = r;
	ovf_cache.by_class[c] = r;
	__atomic_store_n(&ovf_cache.nr, ovf_cache.nr + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&ovf_cache.bytes, ovf_cache.bytes + r->len, __ATOMIC_RELAXED);
}

/*
 * Regions that leave the cache (by the bound, the decay or ucma_trim())
 * or are freed past it: unregistered under ovf_lock and chained through
 * @older, then unmapped after it.
 */
static void cache_evict(struct ovf_region *r, struct ovf_region **victims)
{
	if (__atomic_load_n(&r->kind, __ATOMIC_RELAXED) == OVF_REGION_CACHED)
		cache_unlink(r);
	__atomic_store_n(&r->kind, OVF_REGION_CACHED, __ATOMIC_RELAXED);	/* not live */
	ovf_forget(r->base, r->map, NULL);
	r->older = *victims;
	*victims = r;
}

/*
 * The decay, under ovf_lock: regions kept longer than UCMA_DECAY_MS leave
 * the cache.  Looked at most every 1/8 of the decay time, by the frees of
 * large overflow blocks and by the NORMAL zone's purge
 * (ucma_overflow_decay()).
 */
static void cache_decay(uint64_t now, struct ovf_region **victims)
{
	uint64_t keep = (uint64_t)ucma_opt.decay_ms * 1000000ull;

	if (keep == 0 || now < ovf_cache.next_decay_ns)
		return;
	while (ovf_cache.oldest && ovf_cache.oldest->freed_ns + keep <= now)
		cache_evict(ovf_cache.oldest, victims);
	ovf_cache.next_decay_ns = now + keep / 8;
}

/* Unmap what left the cache (without ovf_lock). */
static void victims_release(struct ovf_region *victims)
{
	while (victims) {
		struct ovf_region *r = victims;

		victims = r->older;
		/* Refused (unmapping from the middle of merged neighbours
		 * splits a kernel mapping, which vm.max_map_count may not
		 * allow): the memory goes back at least; the address space
		 * stays, unregistered. */
		if (ucma_os.munmap((void *)r->base, r->map) != 0)
			ucma_os.madvise((void *)r->base, r->map, MADV_DONTNEED);
		__atomic_fetch_sub(&ovf_bytes, r->len, __ATOMIC_RELAXED);
		ucma_meta_free(r, sizeof(*r));
	}
}

/* A kept region of class @c that starts on @align (ovf_lock held); every
 * region starts on a granule, and more is rarely asked. */
static struct ovf_region *cache_take(unsigned c, size_t align)
{
	struct ovf_region *r = ovf_cache.by_class[c];

	while (r && (r->base & (align - 1)))
		r = r->next_same;
	if (r)
		cache_unlink(r);
	return r;
}

void *ucma_overflow_large_alloc(size_t size, size_t align, bool zero, size_t *usable)
{
	size_t len, pages;
	struct ovf_region *r;
	unsigned c;
	void *m;

	if (align < UCMA_PAGE_SIZE)
		align = UCMA_PAGE_SIZE;
	if (size > SIZE_MAX / 2 || size == 0) {
		errno = ENOMEM;
		return NULL;
	}
	len = UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE);
	c = ovf_class(len >> UCMA_PAGE_SHIFT, &pages);
	if (((size_t)pages << UCMA_PAGE_SHIFT) <= ucma_opt.overflow_cache) {
		/* One the cache may keep: mapped at its class's length. */
		len = (size_t)pages << UCMA_PAGE_SHIFT;
		if (__atomic_load_n(&ovf_cache.nr, __ATOMIC_RELAXED)) {
			ucma_mutex_lock(&ovf_lock);
			/* Of the next class when its own has none, at most
			 * half again the pages asked: bench_malloc past-arena
			 * then ran in 523 ms instead of 722 (RESULTS.md). */
			r = cache_take(c, align);
			if (!r && c + 1 < OVF_CLASSES)
				r = cache_take(c + 1, align);
			if (r) {
				r->user = r->base;
				__atomic_store_n(&r->kind, OVF_REGION_LARGE, __ATOMIC_RELEASE);
			}
			ucma_mutex_unlock(&ovf_lock);
			if (r) {
				/* Its pages hold the last user's data: all of
				 * its usable size cleared, as a new mapping is. */
				if (zero)
					memset((void *)r->base, 0, r->len);
				ucma_count(UCMA_STAT_OVERFLOW_ALLOC, 1);
				ucma_count(UCMA_STAT_OVERFLOW_REUSED, 1);
				*usable = r->len;
				return (void *)r->base;
			}
		}
	}
	r = ucma_meta_alloc(sizeof(*r));
	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	r->map = map_length(len);
	m = r->map >= len ? ovf_map(r->map, align) : NULL;	/* (wrapped: too large) */
	if (!m) {
		ucma_meta_free(r, sizeof(*r));
		errno = ENOMEM;
		return NULL;
	}
	if (r->map > len)
		r->map = whole_granules_check(m, len, r->map);
	r->base = (uintptr_t)m;
	r->len = len;
	r->kind = OVF_REGION_LARGE;
	r->user = (uintptr_t)m;
	ucma_mutex_lock(&ovf_lock);
	if (ovf_register(r->base, r->map, r) != 0) {
		ovf_forget(r->base, r->map, NULL);
		ucma_mutex_unlock(&ovf_lock);
		ucma_os.munmap(m, r->map);
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

bool ucma_overflow_large_free(const struct ucma_ovf_ref *ref)
{
	struct ovf_region *r = ref->region, *victims = NULL;
	size_t bound = ucma_opt.overflow_cache, pages;
	unsigned c = ovf_class(r->len >> UCMA_PAGE_SHIFT, &pages);

	ucma_mutex_lock(&ovf_lock);
	if (__atomic_load_n(&r->kind, __ATOMIC_RELAXED) != OVF_REGION_LARGE) {
		/* Another thread freed it since the caller looked. */
		ucma_mutex_unlock(&ovf_lock);
		return false;
	}
	if (r->len <= bound && ((size_t)pages << UCMA_PAGE_SHIFT) == r->len) {
		/* Kept, still mapped and registered, for the next large block
		 * of its class; the oldest kept make room. */
		uint64_t now = ucma_os_now_ns();

		cache_decay(now, &victims);
		while (ovf_cache.oldest &&
		       (ovf_cache.nr == OVF_CACHE_MAX || ovf_cache.bytes + r->len > bound))
			cache_evict(ovf_cache.oldest, &victims);
		__atomic_store_n(&r->kind, OVF_REGION_CACHED, __ATOMIC_RELEASE);
		cache_link(r, c, now);
	} else {
		cache_evict(r, &victims);
	}
	ucma_mutex_unlock(&ovf_lock);
	victims_release(victims);
	ucma_count(UCMA_STAT_OVERFLOW_FREE, 1);
	return true;
}

/* Give back the reservation @to of a move that the kernel refused.  It
 * unmaps the target before it checks the rest, so the range may be free
 * already, or another thread's mapping since: only a range taken again
 * here (MAP_FIXED_NOREPLACE) is unmapped; one still mapped stays, as
 * address space that nothing touched. */
static void reservation_release(void *to, size_t len)
{
	void *m = ucma_os.mmap(to, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
			       -1, 0);

	if (m != MAP_FAILED)
		ucma_os.munmap(m, len);	/* (an older kernel may have put it elsewhere) */
}

/*
 * Resizing moves page tables, not bytes (glibc's realloc of its mmapped
 * chunks does the same): a buffer grown step by step past the arena was
 * copied into a new mapping at every step.  The new length is its size
 * class's (the headroom of realloc's ucma_large_round()).  Whatever the kernel
 * is about to free leaves the radix tree first: once free, another thread
 * may map it and register its own block there.  The block itself is not
 * found meanwhile, which only its owner's own concurrent use could see.
 */
void *ucma_overflow_large_resize(const struct ucma_ovf_ref *ref, size_t size, size_t *usable)
{
	struct ovf_region *r = ref->region;
	uintptr_t base = r->base;
	size_t len = r->len, map = r->map, newlen, newmap, pages;
	int saved = errno;
	void *m, *to;

	if (size == 0 || size > SIZE_MAX / 4 ||
	    __atomic_load_n(&r->kind, __ATOMIC_ACQUIRE) != OVF_REGION_LARGE)
		return NULL;	/* (freed meanwhile: the caller's free finds out) */
	ovf_class(UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE) >> UCMA_PAGE_SHIFT, &pages);
	newlen = (size_t)pages << UCMA_PAGE_SHIFT;
	newmap = map_length(newlen);
	if (newmap < map) {
		/* Shrink the mapping in place: the granules past its new end
		 * go first. */
		ucma_mutex_lock(&ovf_lock);
		ovf_forget(base + newmap, map - newmap, NULL);
		ucma_mutex_unlock(&ovf_lock);
		if (ucma_os.mremap((void *)base, map, newmap, 0, NULL) == MAP_FAILED) {
			ucma_mutex_lock(&ovf_lock);
			ovf_register(base + newmap, map - newmap, r);	/* (leaves there) */
			ucma_mutex_unlock(&ovf_lock);
			errno = saved;
			return NULL;
		}
		map = newmap;
	} else if (newmap > map) {
		/* Grow the mapping: in place when nothing is mapped after it
		 * (and the radix tree reaches the new end), else moved. */
		if (!((base + newmap - 1) >> OVF_ADDR_BITS) &&
		    ucma_os.mremap((void *)base, map, newmap, 0, NULL) != MAP_FAILED) {
			ucma_mutex_lock(&ovf_lock);
			if (ovf_register(base, newmap, r) != 0) {
				/* A granule cannot be registered: back to
				 * the old length (the pages stay mapped, past
				 * the block, should even that be refused). */
				ovf_forget(base + map, newmap - map, r);
				ucma_mutex_unlock(&ovf_lock);
				ucma_os.mremap((void *)base, newmap, map, 0, NULL);
				errno = saved;
				return NULL;
			}
			ucma_mutex_unlock(&ovf_lock);
		} else {
			/* A range on granules of its own, registered before
			 * the move (a lookup there finds the block's old base
			 * and length, so no address of it is ours yet), the
			 * old range forgotten. */
			to = ovf_map(newmap, OVF_GRANULE);
			if (!to) {
				errno = saved;
				return NULL;
			}
			ucma_mutex_lock(&ovf_lock);
			if (ovf_register((uintptr_t)to, newmap, r) != 0) {
				ovf_forget((uintptr_t)to, newmap, r);
				ucma_mutex_unlock(&ovf_lock);
				ucma_os.munmap(to, newmap);
				errno = saved;
				return NULL;
			}
			ovf_forget(base, map, NULL);
			ucma_mutex_unlock(&ovf_lock);
			m = ucma_os.mremap((void *)base, map, newmap, MREMAP_MAYMOVE | MREMAP_FIXED,
					   to);
			if (m == MAP_FAILED) {
				ucma_mutex_lock(&ovf_lock);
				ovf_register(base, map, r);	/* (leaves there) */
				ovf_forget((uintptr_t)to, newmap, r);
				ucma_mutex_unlock(&ovf_lock);
				reservation_release(to, newmap);
				errno = saved;
				return NULL;
			}
			base = (uintptr_t)to;
		}
		map = newmap;
		if (map > newlen) {	/* (the grown part may have come back locked) */
			size_t kept = whole_granules_check((void *)base, newlen, map);
			uintptr_t past = UCMA_ALIGN_UP(base + kept, OVF_GRANULE);

			if (past < base + map) {
				ucma_mutex_lock(&ovf_lock);
				ovf_forget(past, base + map - past, r);
				ucma_mutex_unlock(&ovf_lock);
			}
			map = kept;
		}
	}
	/* The pages a shrink leaves behind the block, inside its mapping,
	 * go back to the kernel (a grown block's were never touched). */
	if (newlen < len && base + newlen < base + map)
		ucma_os.madvise((void *)(base + newlen), map - newlen, MADV_DONTNEED);
	ucma_mutex_lock(&ovf_lock);
	r->base = base;
	r->user = base;
	r->len = newlen;
	r->map = map;
	ucma_mutex_unlock(&ovf_lock);
	if (newlen > len)
		__atomic_fetch_add(&ovf_bytes, newlen - len, __ATOMIC_RELAXED);
	else
		__atomic_fetch_sub(&ovf_bytes, len - newlen, __ATOMIC_RELAXED);
	errno = saved;
	*usable = newlen;
	return (void *)base;
}

size_t ucma_overflow_trim(void)
{
	struct ovf_region *victims = NULL;
	size_t bytes;

	ucma_mutex_lock(&ovf_lock);
	bytes = ovf_cache.bytes;
	while (ovf_cache.oldest)
		cache_evict(ovf_cache.oldest, &victims);
	ucma_mutex_unlock(&ovf_lock);
	victims_release(victims);
	return bytes;
}

void ucma_overflow_decay(void)
{
	struct ovf_region *victims = NULL;
	uint64_t now;

	if (!__atomic_load_n(&ovf_cache.nr, __ATOMIC_RELAXED))
		return;
	now = ucma_os_now_ns();
	/* Not waiting: the caller frees NORMAL pages, maybe while it holds
	 * a handle entry for a migration, and a fork that holds ovf_lock
	 * waits for those entries (fork.c's stages). */
	if (ucma_mutex_trylock(&ovf_lock) != 0)
		return;
	cache_decay(now, &victims);
	ucma_mutex_unlock(&ovf_lock);
	victims_release(victims);
}

uint64_t ucma_overflow_cached_bytes(void)
{
	return __atomic_load_n(&ovf_cache.bytes, __ATOMIC_RELAXED);
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
