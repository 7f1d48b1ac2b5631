/*
 * slab.c - size classes, slabs and the central bins of the malloc family,
 * and the overflow mappings outside the arena.
 *
 * Size classes: 16..128 bytes in steps of 16, then four classes per
 * doubling up to UCMA_SMALL_MAX (32 KiB), like jemalloc's; a request is
 * rounded up by at most 20%.  A slab is a run of pages of one class from
 * the NORMAL zone (ucma_pages_alloc(UCMA_GFP_UNMOVABLE)), sized so that
 * the tail that fits no object is at most 1/16 of the slab where possible.
 * Its descriptor (struct ucma_slab) lives out of band, in meta.c memory,
 * and is recorded as the owner of every page of the run, so a pointer
 * finds its slab with one load and a user's buffer overflow cannot reach
 * the allocator's metadata.
 *
 * Central bins: one per class and bin set, each with its own lock, holding
 * the slabs that have free objects (partial list, most recently refilled
 * first, so nearly full slabs fill up and sparse ones drain) and a few
 * wholly free slabs kept for reuse; further empty slabs go back to the
 * buddy allocator at once.  There are two bin sets per CPU (like
 * jemalloc's arenas), handed to threads in turn: threads running at once
 * fill their caches from different slabs, so their objects do not share
 * cache lines.  Thread caches take and give objects in batches, so a bin
 * lock is taken once per batch; a freed object goes back to the bin set of
 * its slab, so frees from other threads (remote frees) spread over the
 * locks of the classes and sets they touch.
 *
 * Invariants (bin lock): a slab is on the partial list iff 0 < nfree <
 * nobjs, on the empty list iff nfree == nobjs, on no list iff it is full.
 * A set bit in free_bits is a free object; objects parked in thread caches
 * count as taken, so a slab is never released while a cache holds one of
 * its objects, and giving back an object whose bit is already set is a
 * double free, detected before anything is changed.
 *
 * Overflow: when the NORMAL zone is exhausted (or there is no arena at
 * all), slabs are carved from 4 MiB chunks mapped with ucma_os.mmap, and
 * large blocks get mappings of their own.  Every overflow mapping starts
 * on a 2 MiB boundary, so each 2 MiB granule of the address space meets at
 * most one of them; a two-level radix tree keyed by address >> 21 maps a
 * granule to its mapping's descriptor.  Readers (free, ucma_owns) walk it
 * without a lock; writers hold ovf_lock.  Freed chunk spans are returned
 * to the kernel with MADV_DONTNEED and kept on per-size free lists, linked
 * through the chunk's page-owner array (tagged with bit 0, so a stale
 * pointer into a free span finds no slab).
 *
 * Lock order: bin locks are never nested (fork takes them all, in set and
 * class order); a bin lock is dropped before a
 * slab is created or destroyed (zone, meta and overflow locks are taken
 * there).  ovf_lock is innermost.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "slab.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct ucma_class ucma_classes[UCMA_NR_CLASSES];
uint8_t ucma_class_of_size[UCMA_SMALL_MAX / 16 + 1];

enum { SLAB_ON_NONE = 0, SLAB_ON_PARTIAL, SLAB_ON_EMPTY };

/*
 * struct slab_bin - the central state of one size class.  @lock protects
 * the lists and every field of their slabs except base/cls/where.
 * @nslabs_arena is read without the lock by the statistics.  The struct
 * fills one cache line, so bins do not share lines.
 */
struct slab_bin {
	uint32_t lock;			/* see bin_lock() */
	struct ucma_slab *partial;	/* 0 < nfree < nobjs */
	struct ucma_slab *empty;	/* nfree == nobjs, kept for reuse */
	unsigned nempty;
	unsigned keep_empty;		/* how many empty slabs to keep */
	uint64_t nslabs_arena;		/* arena slabs of this class (atomic) */
} __attribute__((aligned(64)));

static struct slab_bin bins[UCMA_MAX_BINSETS][UCMA_NR_CLASSES];

/*
 * Bin locks are futex locks with three states (0 free, 1 held, 2 held and
 * maybe waited for), as in Drepper's "Futexes Are Tricky": taking a free
 * lock is one compare-and-swap, releasing an uncontended one one exchange.
 * A waiter spins briefly first: bin locks are held for a batch of bit
 * operations.  Not pthread mutexes because the fork handler holds every
 * one of them at once, which is more than ThreadSanitizer's deadlock
 * detector can track; TSan still sees the acquire/release pairs.
 */
static void futex_wait(uint32_t *addr, uint32_t val)
{
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
}

static __attribute__((noinline)) void bin_lock_slow(uint32_t *l)
{
	uint32_t c;

	for (int i = 0; i < 100; i++) {
		c = 0;
		if (__atomic_load_n(l, __ATOMIC_RELAXED) == 0 &&
		    __atomic_compare_exchange_n(l, &c, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
		cpu_relax();
	}
	c = __atomic_exchange_n(l, 2, __ATOMIC_ACQUIRE);
	while (c != 0) {
		futex_wait(l, 2);
		c = __atomic_exchange_n(l, 2, __ATOMIC_ACQUIRE);
	}
}

static inline void bin_lock(struct slab_bin *b)
{
	uint32_t c = 0;

	if (UCMA_UNLIKELY(!__atomic_compare_exchange_n(&b->lock, &c, 1, false, __ATOMIC_ACQUIRE,
						       __ATOMIC_RELAXED)))
		bin_lock_slow(&b->lock);
}

static inline void bin_unlock(struct slab_bin *b)
{
	if (UCMA_UNLIKELY(__atomic_exchange_n(&b->lock, 0, __ATOMIC_RELEASE) == 2))
		futex_wake(&b->lock);
}
static unsigned nbinsets = 1;
static unsigned binset_turn;	/* atomic */

/* ------------------------------------------------------------------------ */
/* Size classes                                                              */
/* ------------------------------------------------------------------------ */

/*
 * Pages per slab: at least 8 KiB and room for 4 objects (8 while that stays
 * within 128 KiB), at most what the bitmap holds; then the first size whose
 * unusable tail is at most 1/16 of the slab, else the one with the
 * smallest tail.
 */
static void class_geometry(struct ucma_class *c)
{
	size_t size = c->size;
	size_t minbytes = size * 8 < 131072 ? size * 8 : 131072;
	unsigned np_min, best = 0;
	double best_waste = 2.0;

	if (minbytes < size * 4)
		minbytes = size * 4;
	if (minbytes < 8192)
		minbytes = 8192;
	if (minbytes > size * UCMA_SLAB_MAX_OBJS)
		minbytes = size * UCMA_SLAB_MAX_OBJS;
	np_min = (unsigned)((minbytes + UCMA_PAGE_SIZE - 1) / UCMA_PAGE_SIZE);
	for (unsigned np = np_min; np <= np_min + 16 && np <= UCMA_SLAB_MAX_PAGES; np++) {
		size_t bytes = (size_t)np * UCMA_PAGE_SIZE;
		size_t n = bytes / size;
		double waste;

		if (n > UCMA_SLAB_MAX_OBJS)
			break;
		waste = (double)(bytes - n * size) / (double)bytes;
		if (waste < best_waste) {
			best_waste = waste;
			best = np;
		}
		if ((bytes - n * size) * 16 <= bytes)
			break;
	}
	if (best == 0)
		best = np_min;	/* unreachable with the classes above */
	c->npages = (uint16_t)best;
	c->nobjs = (uint16_t)(((size_t)best * UCMA_PAGE_SIZE) / size);
	if (c->nobjs > UCMA_SLAB_MAX_OBJS)
		c->nobjs = UCMA_SLAB_MAX_OBJS;
	c->limit = (uint32_t)(c->nobjs * size);
	c->magic = (uint32_t)(((1ull << 32) + size - 1) / size);
}

/* Two bin sets per CPU this process may run on. */
static unsigned count_binsets(void)
{
	cpu_set_t cpus;
	unsigned n = 1;

	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 0)
		n = (unsigned)CPU_COUNT(&cpus) * 2;
	return n < UCMA_MAX_BINSETS ? n : UCMA_MAX_BINSETS;
}

void ucma_slab_init(void)
{
	unsigned n = 0;

	for (uint32_t s = 16; s <= 128; s += 16)
		ucma_classes[n++].size = s;
	for (unsigned lg = 7; n < UCMA_NR_CLASSES; lg++)
		for (uint32_t k = 1; k <= 4 && n < UCMA_NR_CLASSES; k++)
			ucma_classes[n++].size = (1u << lg) + k * (1u << (lg - 2));
	if (ucma_classes[UCMA_NR_CLASSES - 1].size != UCMA_SMALL_MAX)
		ucma_fatal("internal error: size classes end at %u",
			   ucma_classes[UCMA_NR_CLASSES - 1].size);

	for (unsigned c = 0, i = 0; i <= UCMA_SMALL_MAX / 16; i++) {
		while (ucma_classes[c].size < i * 16)
			c++;
		ucma_class_of_size[i] = (uint8_t)c;
	}
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++)
		class_geometry(&ucma_classes[c]);

	nbinsets = count_binsets();
	for (unsigned set = 0; set < nbinsets; set++)
		for (unsigned c = 0; c < UCMA_NR_CLASSES; c++)
			/* Small slabs are cheap to keep; a 128 KiB one is not. */
			bins[set][c].keep_empty = ucma_classes[c].npages <= 8 ? 2 : 1;
}

unsigned ucma_slab_binset_next(void)
{
	return __atomic_fetch_add(&binset_turn, 1, __ATOMIC_RELAXED) % nbinsets;
}

/* ------------------------------------------------------------------------ */
/* Overflow: mappings outside the arena                                      */
/* ------------------------------------------------------------------------ */

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
static pthread_mutex_t ovf_lock = PTHREAD_MUTEX_INITIALIZER;
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
static void *ovf_span_alloc(uint32_t npages, struct ucma_slab *s)
{
	struct ovf_region *r;
	uintptr_t addr;
	uint32_t first;

	pthread_mutex_lock(&ovf_lock);
	addr = ovf_span_free[npages];
	if (addr) {
		r = ovf_region_of((void *)addr);
		first = (uint32_t)((addr - r->base) >> UCMA_PAGE_SHIFT);
		ovf_span_free[npages] = r->owner[first] & ~OVF_FREE_TAG;
	} else {
		if (!ovf_chunk || ovf_chunk->bump + npages > OVF_CHUNK_PAGES) {
			r = ovf_chunk_new();
			if (!r) {
				pthread_mutex_unlock(&ovf_lock);
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
	pthread_mutex_unlock(&ovf_lock);
	return (void *)addr;
}

static void ovf_span_free_pages(void *addr, uint32_t npages)
{
	struct ovf_region *r = ovf_region_of(addr);
	uint32_t first = (uint32_t)(((uintptr_t)addr - r->base) >> UCMA_PAGE_SHIFT);

	/* The span is still ours: give its memory back before listing it. */
	ucma_os.madvise(addr, (size_t)npages << UCMA_PAGE_SHIFT, MADV_DONTNEED);
	pthread_mutex_lock(&ovf_lock);
	for (uint32_t i = 1; i < npages; i++)
		__atomic_store_n(&r->owner[first + i], OVF_FREE_TAG, __ATOMIC_RELAXED);
	__atomic_store_n(&r->owner[first], ovf_span_free[npages] | OVF_FREE_TAG,
			 __ATOMIC_RELAXED);
	ovf_span_free[npages] = (uintptr_t)addr;
	pthread_mutex_unlock(&ovf_lock);
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
	pthread_mutex_lock(&ovf_lock);
	if (ovf_register(r->base, r->len, r) != 0) {
		ovf_register(r->base, r->len, NULL);
		pthread_mutex_unlock(&ovf_lock);
		ucma_os.munmap(m, len);
		ucma_meta_free(r, sizeof(*r));
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_unlock(&ovf_lock);
	__atomic_fetch_add(&ovf_bytes, len, __ATOMIC_RELAXED);
	ucma_count(UCMA_STAT_OVERFLOW_ALLOC, 1);
	*usable = len;
	return m;
}

void ucma_overflow_large_free(const struct ucma_ovf_ref *ref)
{
	struct ovf_region *r = ref->region;
	size_t len = r->len;

	pthread_mutex_lock(&ovf_lock);
	ovf_register(r->base, len, NULL);
	pthread_mutex_unlock(&ovf_lock);
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
/* Slabs                                                                     */
/* ------------------------------------------------------------------------ */

struct ucma_slab *ucma_slab_of(const void *p)
{
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_ovf_ref ref;

	if (ucma_addr_in_arena(a, p)) {
		const struct ucma_page *pg = &a->pages[ucma_addr_to_pfn(a, p)];

		if (__atomic_load_n(&pg->owner_type, __ATOMIC_ACQUIRE) != UCMA_OWN_SLAB)
			return NULL;
		return (struct ucma_slab *)(uintptr_t)pg->owner;
	}
	if (ucma_overflow_find(p, &ref) == UCMA_OVF_SLAB)
		return ref.slab;
	return NULL;
}

/* A new slab of class @cls for bin set @set, all objects free; NULL with
 * ENOMEM.  Called without any bin lock. */
static struct ucma_slab *slab_create(unsigned set, unsigned cls)
{
	const struct ucma_class *c = &ucma_classes[cls];
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_slab *s = ucma_meta_alloc(sizeof(*s));
	uint32_t pfn = UCMA_PFN_NONE;
	int saved = errno;

	if (!s)
		return NULL;
	if (a)
		pfn = ucma_pages_alloc(a, c->npages, UCMA_GFP_UNMOVABLE);
	if (pfn != UCMA_PFN_NONE) {
		s->base = (uintptr_t)ucma_pfn_to_addr(a, pfn);
		s->where = UCMA_SLAB_ARENA;
		s->pfn = pfn;
	} else {
		void *m = ovf_span_alloc(c->npages, s);

		if (!m) {
			ucma_meta_free(s, sizeof(*s));
			errno = ENOMEM;
			return NULL;
		}
		s->base = (uintptr_t)m;
		s->where = UCMA_SLAB_OVERFLOW;
		s->pfn = UCMA_PFN_NONE;
		ucma_count(UCMA_STAT_OVERFLOW_ALLOC, 1);
	}
	errno = saved;
	s->size = c->size;
	s->divisor = UINT64_MAX / c->size + 1;
	s->limit = c->limit;
	s->cls = (uint8_t)cls;
	s->binset = (uint8_t)set;
	s->list = SLAB_ON_NONE;
	s->nfree = c->nobjs;
	for (unsigned w = 0; w < UCMA_SLAB_MAX_OBJS / 64; w++) {
		unsigned lo = w * 64;

		if (lo + 64 <= c->nobjs)
			s->free_bits[w] = ~0ull;
		else if (lo < c->nobjs)
			s->free_bits[w] = (1ull << (c->nobjs - lo)) - 1;
		else
			s->free_bits[w] = 0;
	}
	UCMA_POISON((void *)s->base, (size_t)c->npages << UCMA_PAGE_SHIFT);
	if (s->where == UCMA_SLAB_ARENA) {
		ucma_run_set_owner(a, pfn, UCMA_OWN_SLAB, (uint64_t)(uintptr_t)s);
		__atomic_fetch_add(&bins[set][cls].nslabs_arena, 1, __ATOMIC_RELAXED);
	}
	return s;
}

/* Give a wholly free slab back (no bin lock held). */
static void slab_destroy(struct ucma_slab *s)
{
	const struct ucma_class *c = &ucma_classes[s->cls];
	size_t bytes = (size_t)c->npages << UCMA_PAGE_SHIFT;

	UCMA_UNPOISON((void *)s->base, bytes);
	if (s->where == UCMA_SLAB_ARENA) {
		__atomic_fetch_sub(&bins[s->binset][s->cls].nslabs_arena, 1, __ATOMIC_RELAXED);
		ucma_pages_free(ucma_arena_peek(), s->pfn);
	} else {
		ovf_span_free_pages((void *)s->base, c->npages);
		ucma_count(UCMA_STAT_OVERFLOW_FREE, 1);
	}
	ucma_meta_free(s, sizeof(*s));
}

static void list_add(struct ucma_slab **head, struct ucma_slab *s)
{
	s->prev = NULL;
	s->next = *head;
	if (*head)
		(*head)->prev = s;
	*head = s;
}

static void list_del(struct ucma_slab **head, struct ucma_slab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		*head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
}

/* Debug builds: the free count matches the bitmap (bin lock held). */
static void slab_check(const struct ucma_slab *s, const struct ucma_class *c)
{
	unsigned n = 0;

	for (unsigned w = 0; w < UCMA_SLAB_MAX_OBJS / 64; w++)
		n += (unsigned)__builtin_popcountll(s->free_bits[w]);
	if (n != s->nfree || n > c->nobjs)
		ucma_fatal("internal error: slab %p of class %u counts %u free objects, bitmap %u",
			   (void *)s->base, c->size, s->nfree, n);
}

/* Take up to @want free objects of slab @s into out[], lowest first. */
static unsigned slab_take(struct ucma_slab *s, const struct ucma_class *c, void **out,
			  unsigned want)
{
	unsigned got = 0;

	for (unsigned w = 0; w < UCMA_SLAB_MAX_OBJS / 64 && got < want; w++) {
		uint64_t bits = s->free_bits[w];

		while (bits && got < want) {
			unsigned idx = w * 64 + (unsigned)__builtin_ctzll(bits);

			bits &= bits - 1;
			/* out[] is a cache bin's stack, which other threads
			 * may read (ucma_tcache_any_holds()): atomic stores. */
			__atomic_store_n(&out[got++], (void *)(s->base + (uintptr_t)idx * c->size),
					 __ATOMIC_RELAXED);
		}
		s->free_bits[w] = bits;
	}
	s->nfree = (uint16_t)(s->nfree - got);
	return got;
}

unsigned ucma_slab_alloc_batch(unsigned set, unsigned cls, void **out, unsigned want)
{
	struct slab_bin *b = &bins[set][cls];
	const struct ucma_class *c = &ucma_classes[cls];
	unsigned got = 0;

	bin_lock(b);
	while (got < want) {
		struct ucma_slab *s = b->partial;

		if (!s) {
			s = b->empty;
			if (s) {
				list_del(&b->empty, s);
				b->nempty--;
			} else {
				bin_unlock(b);
				s = slab_create(set, cls);
				bin_lock(b);
				if (!s)
					break;
			}
			s->list = SLAB_ON_PARTIAL;
			list_add(&b->partial, s);
		}
		got += slab_take(s, c, out + got, want - got);
		if (ucma_config_debug)
			slab_check(s, c);
		if (s->nfree == 0) {
			list_del(&b->partial, s);
			s->list = SLAB_ON_NONE;
		}
	}
	bin_unlock(b);
	if (got == 0)
		errno = ENOMEM;
	return got;
}

static struct ucma_slab *slab_of_checked(void *p, unsigned cls)
{
	struct ucma_slab *s = ucma_slab_of(p);

	if (UCMA_UNLIKELY(!s || s->cls != cls))
		ucma_fatal("free(): invalid pointer %p (not an object of class %u)", p,
			   ucma_classes[cls].size);
	return s;
}

/* Give @p back to its slab @s (bin lock held); a slab that became empty
 * is kept or queued on @release. */
static void slab_put(struct slab_bin *b, const struct ucma_class *c, struct ucma_slab *s, void *p,
		     struct ucma_slab **release)
{
	uintptr_t off = (uintptr_t)p - s->base;
	unsigned idx = (unsigned)((off * c->magic) >> 32);
	uint64_t bit = 1ull << (idx & 63);

	if (ucma_config_debug && (off >= c->limit || (uintptr_t)idx * c->size != off))
		ucma_fatal("free(): invalid pointer %p (inside an object)", p);
	if (UCMA_UNLIKELY(s->free_bits[idx >> 6] & bit))
		ucma_fatal("free(): double free of %p", p);
	s->free_bits[idx >> 6] |= bit;
	if (s->nfree++ == 0) {
		s->list = SLAB_ON_PARTIAL;
		list_add(&b->partial, s);
	}
	if (s->nfree == c->nobjs) {
		if (ucma_config_debug)
			slab_check(s, c);
		list_del(&b->partial, s);
		if (b->nempty < b->keep_empty) {
			s->list = SLAB_ON_EMPTY;
			list_add(&b->empty, s);
			b->nempty++;
		} else {
			s->list = SLAB_ON_NONE;
			s->next = *release;
			*release = s;
		}
	}
}

void ucma_slab_free_batch(unsigned cls, void **objs, unsigned n)
{
	const struct ucma_class *c = &ucma_classes[cls];

	/* One pass per bin set met: the set of the first object left is
	 * locked, its objects given back, the others kept for the next pass.
	 * A cache's objects nearly always come from one set. */
	while (n) {
		unsigned set = slab_of_checked(objs[0], cls)->binset;
		struct slab_bin *b = &bins[set][cls];
		struct ucma_slab *release = NULL;
		unsigned left = 0;

		bin_lock(b);
		for (unsigned i = 0; i < n; i++) {
			void *p = objs[i];
			struct ucma_slab *s = slab_of_checked(p, cls);

			if (s->binset != set)
				objs[left++] = p;
			else
				slab_put(b, c, s, p, &release);
		}
		bin_unlock(b);
		while (release) {
			struct ucma_slab *s = release;

			release = s->next;
			slab_destroy(s);
		}
		n = left;
	}
}

bool ucma_slab_obj_is_free(struct ucma_slab *s, const void *p)
{
	const struct ucma_class *c = &ucma_classes[s->cls];
	uintptr_t off = (uintptr_t)p - s->base;
	unsigned idx = (unsigned)((off * c->magic) >> 32);
	bool is_free;

	bin_lock(&bins[s->binset][s->cls]);
	is_free = s->free_bits[idx >> 6] & (1ull << (idx & 63));
	bin_unlock(&bins[s->binset][s->cls]);
	return is_free;
}

size_t ucma_slab_trim(void)
{
	size_t released = 0;

	for (unsigned set = 0; set < nbinsets; set++) {
		for (unsigned cls = 0; cls < UCMA_NR_CLASSES; cls++) {
			struct slab_bin *b = &bins[set][cls];
			struct ucma_slab *list;

			bin_lock(b);
			list = b->empty;
			b->empty = NULL;
			b->nempty = 0;
			bin_unlock(b);
			while (list) {
				struct ucma_slab *s = list;

				list = s->next;
				released += (size_t)ucma_classes[cls].npages << UCMA_PAGE_SHIFT;
				slab_destroy(s);
			}
		}
	}
	return released;
}

uint64_t ucma_slab_active_bytes(void)
{
	uint64_t bytes = 0;

	for (unsigned set = 0; set < nbinsets; set++)
		for (unsigned cls = 0; cls < UCMA_NR_CLASSES; cls++)
			bytes += __atomic_load_n(&bins[set][cls].nslabs_arena, __ATOMIC_RELAXED) *
				 ((uint64_t)ucma_classes[cls].npages << UCMA_PAGE_SHIFT);
	return bytes;
}

/* ------------------------------------------------------------------------ */
/* Fork                                                                      */
/* ------------------------------------------------------------------------ */

void ucma_slab_atfork_prepare(void)
{
	for (unsigned set = 0; set < nbinsets; set++)
		for (unsigned c = 0; c < UCMA_NR_CLASSES; c++)
			bin_lock(&bins[set][c]);
	pthread_mutex_lock(&ovf_lock);
}

void ucma_slab_atfork_parent(void)
{
	pthread_mutex_unlock(&ovf_lock);
	for (unsigned set = nbinsets; set-- > 0;)
		for (unsigned c = UCMA_NR_CLASSES; c-- > 0;)
			bin_unlock(&bins[set][c]);
}

/* The child has one thread, the one that forked, and it holds every lock:
 * release them (the state they protect is consistent). */
void ucma_slab_atfork_child(void)
{
	ucma_slab_atfork_parent();
}
