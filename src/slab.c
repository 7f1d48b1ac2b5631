/*
 * slab.c - size classes, slabs and the central bins of the malloc family.
 *
 * Size classes: 16..128 bytes in steps of 16, then four classes per
 * doubling up to UCMA_SMALL_MAX (32 KiB), like jemalloc's; a request is
 * rounded up by at most 20%.  A slab is a run of pages of one class from
 * the NORMAL zone (ucma_pages_alloc(UCMA_GFP_UNMOVABLE)) holding up to 256
 * objects in at most 64 KiB (128 KiB for the largest classes), sized so
 * that the tail that fits no object is at most 1/16 of the slab where
 * possible.  Its descriptor (struct ucma_slab) lives out of band and is
 * recorded as the owner of every page of the run, so a pointer finds its
 * slab with one load and a user's buffer overflow cannot reach the
 * allocator's metadata.  The descriptor's bitmaps say which objects are
 * allocated: nothing of the allocator is ever stored in a free object.
 *
 * Ownership: a slab belongs to one thread's cache (tcache.c), which
 * allocates from it and frees into it without locks or atomic
 * read-modify-writes, while other threads' frees set bits in its remote
 * bitmap; or it is central, kept here in the bin of its class and bin set.
 * A thread that needs a slab adopts a central one (partial first, then
 * wholly free) or creates one; a thread gives its slabs back when it exits
 * and when a slab it cannot keep falls wholly free.  So a bin lock is
 * taken when a slab changes hands, not per object, and blocks freed by
 * other threads, exited ones included, return to the slab they came from.
 *
 * Central bins: one per class and bin set, each with its own lock: a
 * partial list, wholly free slabs kept for reuse (a few per bin, more for
 * a while within a byte budget: see central_keep_budget()), and the full
 * ones on no list until a remote free makes room (then the first such
 * free lists the slab, see ucma_slab_central_freed()).  There are two bin
 * sets per CPU, handed to threads in turn, so threads adopting at once do
 * not meet on one lock.
 *
 * Descriptors come from a pool and go back to it, never to other use:
 * see "type stable" in slab.h.
 *
 * Overflow: when the NORMAL zone is exhausted (or there is no arena at
 * all), slabs take their pages from overflow.c's chunks outside the arena.
 *
 * Lock order: a cache's lock (tcache.c), then one bin lock (bin locks are
 * never nested but by fork, which takes them all in set and class order),
 * then the pool lock; a bin lock is dropped before a slab is created or
 * destroyed (zone, meta and overflow locks are taken there).  ovf_lock is
 * innermost.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "overflow.h"
#include "pcp.h"
#include "slab.h"
#include "tcache.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct ucma_class ucma_classes[UCMA_NR_CLASSES];
uint8_t ucma_class_of_size[UCMA_SMALL_MAX / 16 + 1];

/*
 * struct slab_bin - the central slabs of one size class in one bin set.
 * @lock (lock.h) protects the lists, the registry of all the bin's slabs,
 * the central states of their slabs, and the @used bits of every central
 * slab of the bin.  @nslabs_arena is
 * read without the lock by the statistics.  The struct fills one cache
 * line, so bins do not share lines.
 */
struct slab_bin {
	uint32_t lock;
	unsigned nempty;
	struct ucma_slab *partial;	/* C_PARTIAL */
	struct ucma_slab *empty;	/* C_EMPTY */
	struct ucma_slab *all;		/* registry: every live slab (rnext) */
	uint64_t nslabs_arena;		/* arena slabs of this class (atomic) */
} __attribute__((aligned(64)));

static struct slab_bin bins[UCMA_MAX_BINSETS][UCMA_NR_CLASSES];
static unsigned nbinsets = 1;
static unsigned binset_turn;	/* atomic */
/* Slabs on the empty lists of all bins, and their bytes: changed under a
 * bin lock, read without one (atomic), so a slab creation finds out
 * cheaply whether any are kept (slab_pages()). */
static unsigned central_nempty;
static unsigned central_arena_nempty;	/* of which arena slabs */
static size_t central_empty_bytes;
/* Decay ticks so far (atomic): ucma_slab_decay(). */
static uint32_t central_tick;

/* Wholly free slabs a central bin of class @cls keeps until trimmed or
 * pressed for memory: small slabs are cheap to keep, a 128 KiB one is
 * not. */
static unsigned central_keep_empty(unsigned cls)
{
	return ucma_classes[cls].npages <= 8 ? 2 : 1;
}

/*
 * Beyond those few, the central bins keep wholly free slabs up to this
 * many bytes in all, for a decay interval: a thread that frees a few MiB
 * of small blocks and allocates as many again (a batch, a request, a
 * round of bench_malloc's small-batch: 374 slabs) finds its slabs made,
 * where it destroyed and created each of them, their pages through the
 * page allocator, every time.  The kernel's per-CPU lists and jemalloc's
 * dirty extents keep freed memory the same way.  The pages of a kept
 * slab are resident as the zone's free pages would be until its decay
 * purged them.  Those in the arena go back at the second decay tick
 * after they were kept (ucma_slab_decay(): between UCMA_DECAY_MS / 2 and
 * UCMA_DECAY_MS, looked at when pages are freed, as the zone's) and when
 * the NORMAL zone has no run for a request (ucma_slab_drop_empty()); all
 * of them at ucma_trim() and when a new slab would otherwise take pages
 * that are not resident (slab_pages()).  Only arena slabs are kept beyond
 * the few: one outside the arena could not decay (its unmapping takes
 * ovf_lock, which the decay may not wait for: cull_empty()) and would
 * stay resident until ucma_trim().  A small arena is not held by them
 * either: at most 1/32 of the NORMAL zone.
 */
#define CENTRAL_KEEP_MAX (8u << 20)

static size_t central_keep_budget(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	size_t share;

	if (!a)
		return CENTRAL_KEEP_MAX;
	share = ((size_t)a->zones[UCMA_ZONE_NORMAL].managed_pages << UCMA_PAGE_SHIFT) / 32;
	return share < CENTRAL_KEEP_MAX ? share : CENTRAL_KEEP_MAX;
}

static size_t slab_bytes(const struct ucma_slab *s)
{
	return (size_t)ucma_classes[s->cls].npages << UCMA_PAGE_SHIFT;
}

/* Keep the wholly free slab @s on bin @b's empty list (bin lock held). */
static void empty_add(struct slab_bin *b, struct ucma_slab *s)
{
	s->kept_tick = __atomic_load_n(&central_tick, __ATOMIC_RELAXED);
	ucma_slab_list_add(&b->empty, s);
	__atomic_store_n(&b->nempty, b->nempty + 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&central_nempty, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&central_arena_nempty, s->where == UCMA_SLAB_ARENA, __ATOMIC_RELAXED);
	__atomic_fetch_add(&central_empty_bytes, slab_bytes(s), __ATOMIC_RELAXED);
}

/* Take slab @s off bin @b's empty list (bin lock held). */
static void empty_del(struct slab_bin *b, struct ucma_slab *s)
{
	ucma_slab_list_del(&b->empty, s);
	__atomic_store_n(&b->nempty, b->nempty - 1, __ATOMIC_RELAXED);
	__atomic_fetch_sub(&central_nempty, 1, __ATOMIC_RELAXED);
	__atomic_fetch_sub(&central_arena_nempty, s->where == UCMA_SLAB_ARENA, __ATOMIC_RELAXED);
	__atomic_fetch_sub(&central_empty_bytes, slab_bytes(s), __ATOMIC_RELAXED);
}

/* Take the first slab of bin @b's empty list, the last kept, or NULL (bin
 * lock held). */
static struct ucma_slab *empty_take(struct slab_bin *b)
{
	struct ucma_slab *s = b->empty;

	if (s)
		empty_del(b, s);
	return s;
}

/* May bin @b keep one more wholly free slab @s (bin lock held)?  Beyond
 * its few, only one in the arena, which decays. */
static bool empty_keeps(const struct slab_bin *b, const struct ucma_slab *s)
{
	return b->nempty < central_keep_empty(s->cls) ||
	       (s->where == UCMA_SLAB_ARENA &&
		__atomic_load_n(&central_empty_bytes, __ATOMIC_RELAXED) + slab_bytes(s) <=
			central_keep_budget());
}

/* ------------------------------------------------------------------------ */
/* Size classes                                                              */
/* ------------------------------------------------------------------------ */

/*
 * Pages per slab: room for 256 objects within 64 KiB, at least a page and
 * 4 objects (so the largest classes get 128 KiB); then the first size
 * whose unusable tail is at most 1/16 of the slab, else the one with the
 * smallest tail.  Slabs this large change hands seldom, and a fresh slab
 * costs memory only for the pages its objects touch.
 */
static void class_geometry(struct ucma_class *c)
{
	size_t size = c->size;
	size_t minbytes = size * UCMA_SLAB_MAX_OBJS;
	unsigned np_min, best = 0;
	double best_waste = 2.0;

	if (minbytes > 65536)
		minbytes = 65536;
	if (minbytes < size * 4)
		minbytes = size * 4;
	if (minbytes < UCMA_PAGE_SIZE)
		minbytes = UCMA_PAGE_SIZE;
	np_min = (unsigned)((minbytes + UCMA_PAGE_SIZE - 1) / UCMA_PAGE_SIZE);
	for (unsigned np = np_min; np <= np_min + 16 && np <= UCMA_SLAB_MAX_PAGES; np++) {
		size_t bytes = (size_t)np * UCMA_PAGE_SIZE;
		size_t n = bytes / size;
		double waste;

		if (n > UCMA_SLAB_MAX_OBJS)
			n = UCMA_SLAB_MAX_OBJS;
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
	/* free()'s fast path looks up the bit of any object index the
	 * slab's pages hold, past nobjs too: used[] and pad_used[] (always
	 * zero) must cover them all (malloc.c free_fast()). */
	if (((size_t)best * UCMA_PAGE_SIZE) / size >= 2 * UCMA_SLAB_MAX_OBJS)
		ucma_fatal("internal error: class of %zu bytes: %u pages outgrow the bitmap", size,
			   best);
}

/* Two bin sets per CPU this process may run on. */
static unsigned count_binsets(void)
{
	unsigned n = ucma_cpus_allowed() * 2;

	if (n == 0)
		n = 1;
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

	/* (The bins need no setting up: zeros are empty bins, so the pages
	 * of bin sets no thread uses are never touched.) */
	nbinsets = count_binsets();
}

unsigned ucma_slab_binset_next(void)
{
	return __atomic_fetch_add(&binset_turn, 1, __ATOMIC_RELAXED) % nbinsets;
}

/* ------------------------------------------------------------------------ */
/* Descriptors                                                               */
/* ------------------------------------------------------------------------ */

/* The descriptor pool: descriptors never return to meta.c, so a stale
 * pointer to one always points at a descriptor.  They are carved from
 * 64 KiB blocks of meta.c memory (cache-line aligned, zeroed).  pool_lock
 * protects the free list, linked through @next, and the block being
 * carved. */
#define POOL_BLOCK 65536u

static uint32_t UCMA_FORK_LOCK pool_lock;
static struct ucma_slab *pool_free;
static char *pool_cur, *pool_end;
/* Descriptors given back where pool_lock may not be waited for (the
 * decay, ucma_slab_decay()): pushed without a lock, taken all at once by
 * desc_alloc().  A stack whose only pop takes everything has no ABA. */
static struct ucma_slab *pool_pending;

static struct ucma_slab *desc_alloc(void)
{
	struct ucma_slab *s;

	ucma_lock(&pool_lock);
	if (!pool_free)
		pool_free = __atomic_exchange_n(&pool_pending, NULL, __ATOMIC_ACQUIRE);
	s = pool_free;
	if (s) {
		pool_free = s->next;
	} else {
		if ((size_t)(pool_end - pool_cur) < sizeof(*s)) {
			char *block = ucma_meta_alloc(POOL_BLOCK);

			if (block) {
				pool_cur = block;
				pool_end = block + POOL_BLOCK;
			}
		}
		if ((size_t)(pool_end - pool_cur) >= sizeof(*s)) {
			s = (struct ucma_slab *)pool_cur;
			pool_cur += sizeof(*s);
		}
	}
	ucma_unlock(&pool_lock);
	/* A thread cache's hint keeps an object index in the top 16 bits of
	 * a descriptor's address (tcache.h). */
	if (UCMA_UNLIKELY((uintptr_t)s >> 48))
		ucma_fatal("internal error: slab descriptor at %p beyond 48 bits", (void *)s);
	return s;
}

static void desc_free(struct ucma_slab *s)
{
	ucma_lock(&pool_lock);
	s->next = pool_free;
	pool_free = s;
	ucma_unlock(&pool_lock);
}

static void desc_free_nowait(struct ucma_slab *s)
{
	struct ucma_slab *head = __atomic_load_n(&pool_pending, __ATOMIC_RELAXED);

	do
		s->next = head;
	while (!__atomic_compare_exchange_n(&pool_pending, &head, s, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED));
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
		return (struct ucma_slab *)(uintptr_t)UCMA_PG_GET(pg, owner);
	}
	if (ucma_overflow_find(p, &ref) == UCMA_OVF_SLAB)
		return ref.slab;
	return NULL;
}

unsigned ucma_slab_nfree(const struct ucma_slab *s)
{
	unsigned n = s->nobjs;

	for (unsigned w = 0; w < s->nwords; w++) {
		uint64_t u = __atomic_load_n(&s->used[w], __ATOMIC_RELAXED);
		uint64_t r = __atomic_load_n(&s->remote[w], __ATOMIC_RELAXED);

		n -= (unsigned)__builtin_popcountll(u & ~r);
	}
	return n;
}

/* Does @s look wholly free?  Only the bitmaps are read, which a stale
 * reader may do (bits past nobjs are never set). */
static bool slab_looks_empty(const struct ucma_slab *s)
{
	for (unsigned w = 0; w < UCMA_SLAB_WORDS; w++)
		if (__atomic_load_n(&s->used[w], __ATOMIC_RELAXED) &
		    ~__atomic_load_n(&s->remote[w], __ATOMIC_RELAXED))
			return false;
	return true;
}

/* Has @s (merged) room for one more object? */
static bool slab_has_room(const struct ucma_slab *s)
{
	for (unsigned w = 0; w < s->nwords; w++)
		if (__atomic_load_n(&s->used[w], __ATOMIC_RELAXED) != ucma_slab_word_full(s, w))
			return true;
	return false;
}

static void registry_add(struct slab_bin *b, struct ucma_slab *s)
{
	ucma_lock(&b->lock);
	s->rprev = NULL;
	s->rnext = b->all;
	if (b->all)
		b->all->rprev = s;
	b->all = s;
	ucma_unlock(&b->lock);
}

/*
 * The pages of a new slab: rather memory that is resident already than
 * fresh pages, which would add to the process's RSS (UCMA_GFP_RESIDENT).
 * Wholly free slabs kept for reuse, by the creating thread's cache
 * (@owner) and by the central bins, hold pages of their own length that
 * nothing else uses, and freed runs wait on the per-CPU lists by length:
 * a program that went from one size to the next found them splitting the
 * freed pages, and its new slabs took fresh pages instead; a thread the
 * scheduler moved finds its freed runs on the lists of the CPU it left.
 * So when the page allocator hands out a run that is not resident while
 * slabs are kept or any CPU's lists hold runs that may hold data, the run
 * goes back, the kept slabs go back to the page allocator and the dirty
 * runs of the per-CPU lists to the buddy lists (after this CPU's clean
 * runs of the length asked for, which would be handed out first), where
 * they merge, and the run is asked for again (bench_malloc "simple" under
 * the preload: peak RSS in tests/bench/RESULTS.md; test_malloc's first
 * check).  A program that grows with nothing kept and nothing freed pays
 * a look at two counters per slab and one per CPU.  When the zone has no
 * run at all, the central bins' kept slabs go back and the run is asked
 * for once more, before the slab goes outside the arena.
 */
static size_t release_central(bool partials);

static uint32_t slab_pages(struct ucma_arena *a, uint32_t npages, struct ucma_tcache *owner)
{
	const unsigned gfp = UCMA_GFP_UNMOVABLE | UCMA_GFP_RESIDENT;
	bool dirty = true;
	uint32_t pfn = ucma_pages_alloc_dirty(a, npages, gfp, &dirty);

	if (pfn == UCMA_PFN_NONE) {
		/* No run: the slabs the bins keep make room first. */
		if (ucma_slab_drop_empty())
			pfn = ucma_pages_alloc(a, npages, gfp);
		return pfn;
	}
	if (dirty)
		return pfn;
	if ((owner == &ucma_slab_unowned || !ucma_tcache_keeps_empty(owner)) &&
	    !__atomic_load_n(&central_nempty, __ATOMIC_RELAXED) &&
	    !ucma_pcp_has_dirty(&a->zones[UCMA_ZONE_NORMAL]))
		return pfn;
	/* Back first, so that what follows is freed after it: the buddy
	 * lists hand out the blocks freed last first. */
	ucma_pages_free_unused(a, pfn);
	if (owner != &ucma_slab_unowned)
		ucma_tcache_release_kept(owner);
	release_central(false);
	ucma_pcp_drain_dirty(&a->zones[UCMA_ZONE_NORMAL], npages, UCMA_MT_UNMOVABLE);
	return ucma_pages_alloc(a, npages, gfp);
}

/*
 * A new slab of class @cls, all objects free, owned by @owner (a cache,
 * or &ucma_slab_unowned) in state @state, returning to bin set @set.
 * NULL with ENOMEM.  Called without any bin lock.
 */
static struct ucma_slab *slab_create(unsigned set, unsigned cls, struct ucma_tcache *owner,
				     int state)
{
	const struct ucma_class *c = &ucma_classes[cls];
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_slab *s = desc_alloc();
	uint32_t pfn = UCMA_PFN_NONE;
	int saved = errno;

	if (!s)
		return NULL;
	if (a)
		pfn = slab_pages(a, c->npages, owner);
	if (pfn != UCMA_PFN_NONE) {
		s->base = (uintptr_t)ucma_pfn_to_addr(a, pfn);
		s->where = UCMA_SLAB_ARENA;
		s->pfn = pfn;
	} else {
		void *m = ucma_overflow_span_alloc(c->npages, s);

		if (!m) {
			desc_free(s);
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
	s->nobjs = c->nobjs;
	s->nwords = (uint8_t)((c->nobjs + 63) / 64);
	s->lastfull = c->nobjs % 64 ? (1ull << (c->nobjs % 64)) - 1 : ~0ull;
	s->next = s->prev = NULL;
	/* What a stale reader of the descriptor may look at: atomics. */
	__atomic_store_n(&s->cls, (uint8_t)cls, __ATOMIC_RELAXED);
	__atomic_store_n(&s->binset, (uint8_t)set, __ATOMIC_RELAXED);
	__atomic_store_n(&s->queued, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->state, (uint8_t)state, __ATOMIC_RELAXED);
	for (unsigned w = 0; w < UCMA_SLAB_WORDS; w++) {
		__atomic_store_n(&s->used[w], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->remote[w], 0, __ATOMIC_RELAXED);
		s->pad_used[w] = 0;
	}
	__atomic_store_n(&s->owner, owner, __ATOMIC_RELEASE);
	UCMA_POISON((void *)s->base, (size_t)c->npages << UCMA_PAGE_SHIFT);
	if (s->where == UCMA_SLAB_ARENA) {
		ucma_run_set_owner(a, pfn, UCMA_OWN_SLAB, (uint64_t)(uintptr_t)s);
		__atomic_fetch_add(&bins[set][cls].nslabs_arena, 1, __ATOMIC_RELAXED);
	}
	registry_add(&bins[set][cls], s);
	return s;
}

/* Take @s, wholly free, off bin @b's registry: dead from here (bin lock
 * held). */
static void registry_del_locked(struct slab_bin *b, struct ucma_slab *s)
{
	if (ucma_config_debug && !slab_looks_empty(s))
		ucma_fatal("internal error: destroying slab %p of class %u with %u objects in use",
			   (void *)s->base, s->size, s->nobjs - ucma_slab_nfree(s));
	if (s->rprev)
		s->rprev->rnext = s->rnext;
	else
		b->all = s->rnext;
	if (s->rnext)
		s->rnext->rprev = s->rprev;
	s->rnext = s->rprev = NULL;
	__atomic_store_n(&s->state, UCMA_SLAB_DEAD, __ATOMIC_RELAXED);
	__atomic_store_n(&s->owner, &ucma_slab_unowned, __ATOMIC_RELAXED);
}

/* The pages of @s, off the registry, back (without any bin lock). */
static void slab_pages_free(struct slab_bin *b, struct ucma_slab *s)
{
	unsigned npages = ucma_classes[s->cls].npages;

	UCMA_UNPOISON((void *)s->base, (size_t)npages << UCMA_PAGE_SHIFT);
	if (s->where == UCMA_SLAB_ARENA) {
		__atomic_fetch_sub(&b->nslabs_arena, 1, __ATOMIC_RELAXED);
		ucma_pages_free(ucma_arena_peek(), s->pfn);
	} else {
		ucma_overflow_span_free((void *)s->base, npages);
		ucma_count(UCMA_STAT_OVERFLOW_FREE, 1);
	}
}

void ucma_slab_destroy(struct ucma_slab *s)
{
	struct slab_bin *b = &bins[s->binset][s->cls];

	ucma_lock(&b->lock);
	registry_del_locked(b, s);
	ucma_unlock(&b->lock);
	slab_pages_free(b, s);
	desc_free(s);
}

static __attribute__((noinline, noreturn)) void double_free_in(const struct ucma_slab *s,
								unsigned w, uint64_t bits)
{
	ucma_fatal("free(): double free of %p",
		   (void *)(s->base + ((uintptr_t)w * 64 + (unsigned)__builtin_ctzll(bits)) * s->size));
}

unsigned ucma_slab_collect(struct ucma_slab *s)
{
	unsigned n = 0;

	for (unsigned w = 0; w < s->nwords; w++) {
		uint64_t r, u;

		/* seq_cst: pairs with the remote free's fetch-or and its
		 * look at the hint or owner (tcache.c). */
		if (!__atomic_load_n(&s->remote[w], __ATOMIC_SEQ_CST))
			continue;
		r = __atomic_exchange_n(&s->remote[w], 0, __ATOMIC_SEQ_CST);
		u = __atomic_load_n(&s->used[w], __ATOMIC_RELAXED);
		if (UCMA_UNLIKELY(r & ~u))
			double_free_in(s, w, r & ~u);	/* freed here and by its owner */
		__atomic_store_n(&s->used[w], u & ~r, __ATOMIC_RELAXED);
		n += (unsigned)__builtin_popcountll(r);
	}
	return n;
}

/* Debug builds: the bitmaps of a slab whose @used bits we may write. */
static void slab_check(const struct ucma_slab *s)
{
	for (unsigned w = 0; w < UCMA_SLAB_WORDS; w++) {
		uint64_t u = __atomic_load_n(&s->used[w], __ATOMIC_RELAXED);
		uint64_t valid = w < s->nwords ? ucma_slab_word_full(s, w) : 0;

		if (u & ~valid)
			ucma_fatal("internal error: slab %p of class %u: word %u has bits %#llx "
				   "past its objects", (void *)s->base, s->size, w,
				   (unsigned long long)(u & ~valid));
	}
}

struct ucma_slab *ucma_slab_adopt(unsigned set, unsigned cls, struct ucma_tcache *tc)
{
	struct slab_bin *b = &bins[set][cls];
	struct ucma_slab *s;

	ucma_lock(&b->lock);
	s = b->partial;
	if (s) {
		ucma_slab_list_del(&b->partial, s);
	} else {
		s = empty_take(b);
	}
	if (s) {
		__atomic_store_n(&s->queued, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->state, UCMA_SLAB_PARTIAL, __ATOMIC_RELAXED);
		/* seq_cst: a remote free either reads us as the owner or
		 * had its bit set before our collect below (tcache.c). */
		__atomic_store_n(&s->owner, tc, __ATOMIC_SEQ_CST);
	}
	ucma_unlock(&b->lock);
	if (!s)
		return slab_create(set, cls, tc, UCMA_SLAB_PARTIAL);
	ucma_slab_collect(s);
	if (ucma_config_debug)
		slab_check(s);
	return s;
}

bool ucma_slab_adopt_freed(struct ucma_slab *s, struct ucma_tcache *tc)
{
	struct slab_bin *b = &bins[s->binset][s->cls];
	bool ok;
	int state;

	ucma_lock(&b->lock);
	state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
	ok = __atomic_load_n(&s->owner, __ATOMIC_RELAXED) == &ucma_slab_unowned &&
	     (state == UCMA_SLAB_C_PARTIAL || state == UCMA_SLAB_C_FULL);
	if (ok) {
		if (state == UCMA_SLAB_C_PARTIAL)
			ucma_slab_list_del(&b->partial, s);
		__atomic_store_n(&s->queued, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&s->state, UCMA_SLAB_PARTIAL, __ATOMIC_RELAXED);
		__atomic_store_n(&s->owner, tc, __ATOMIC_SEQ_CST);
	}
	ucma_unlock(&b->lock);
	if (ok)
		ucma_slab_collect(s);
	return ok;
}

/* File @s, central and merged, by its room (bin lock held).  Returns true
 * when it is wholly free and the bin keeps enough: the caller destroys it
 * after dropping the lock. */
static bool central_file(struct slab_bin *b, struct ucma_slab *s, int old_state)
{
	int state = slab_looks_empty(s) ? UCMA_SLAB_C_EMPTY :
		    slab_has_room(s) ? UCMA_SLAB_C_PARTIAL : UCMA_SLAB_C_FULL;

	if (state == old_state)
		return false;
	if (old_state == UCMA_SLAB_C_PARTIAL)
		ucma_slab_list_del(&b->partial, s);
	if (state == UCMA_SLAB_C_EMPTY) {
		if (!empty_keeps(b, s)) {
			__atomic_store_n(&s->state, UCMA_SLAB_DEAD, __ATOMIC_RELAXED);
			return true;
		}
		empty_add(b, s);
	} else if (state == UCMA_SLAB_C_PARTIAL) {
		ucma_slab_list_add(&b->partial, s);
	}
	/* Listed slabs need no remote free to ask for them; a full one
	 * keeps whatever @queued says (a remote free may be waiting for
	 * our lock to list it). */
	if (state != UCMA_SLAB_C_FULL)
		__atomic_store_n(&s->queued, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&s->state, (uint8_t)state, __ATOMIC_RELAXED);
	return false;
}

void ucma_slab_release(struct ucma_slab *s)
{
	struct slab_bin *b = &bins[s->binset][s->cls];
	bool destroy;

	ucma_lock(&b->lock);
	/* Clear @queued before giving the slab up, so that the first
	 * remote free to find it central takes the lock (see
	 * ucma_slab_central_freed()); seq_cst as in ucma_slab_adopt(). */
	__atomic_store_n(&s->queued, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->owner, &ucma_slab_unowned, __ATOMIC_SEQ_CST);
	ucma_slab_collect(s);
	/* Its owner took it off every list of its own. */
	destroy = central_file(b, s, __atomic_load_n(&s->state, __ATOMIC_RELAXED));
	ucma_unlock(&b->lock);
	if (destroy)
		ucma_slab_destroy(s);
}

void ucma_slab_central_freed(struct ucma_slab *s, unsigned w)
{
	unsigned set, cls;
	struct slab_bin *b;
	bool destroy = false;

	/* A listed slab needs nothing until it falls wholly free; of the
	 * frees into a full one, the first takes the lock.  The word just
	 * freed into usually shows the slab is not empty. */
	if ((__atomic_load_n(&s->used[w], __ATOMIC_RELAXED) &
	     ~__atomic_load_n(&s->remote[w], __ATOMIC_RELAXED) || !slab_looks_empty(s)) &&
	    (__atomic_load_n(&s->queued, __ATOMIC_RELAXED) ||
	     __atomic_exchange_n(&s->queued, 1, __ATOMIC_SEQ_CST)))
		return;
	set = __atomic_load_n(&s->binset, __ATOMIC_RELAXED);
	cls = __atomic_load_n(&s->cls, __ATOMIC_RELAXED);
	if (set >= nbinsets || cls >= UCMA_NR_CLASSES)
		return;
	b = &bins[set][cls];
	ucma_lock(&b->lock);
	/* The descriptor may have been destroyed and reused meanwhile: act
	 * only on a central slab of this bin. */
	if (__atomic_load_n(&s->owner, __ATOMIC_SEQ_CST) == &ucma_slab_unowned &&
	    __atomic_load_n(&s->binset, __ATOMIC_RELAXED) == set &&
	    __atomic_load_n(&s->cls, __ATOMIC_RELAXED) == cls) {
		int state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);

		if (state == UCMA_SLAB_C_FULL || state == UCMA_SLAB_C_PARTIAL) {
			ucma_slab_collect(s);
			destroy = central_file(b, s, state);
		}
	}
	ucma_unlock(&b->lock);
	if (destroy) {
		int saved = errno;	/* free() leaves errno alone */

		ucma_slab_destroy(s);
		errno = saved;
	}
}

void *ucma_slab_central_alloc(unsigned cls)
{
	struct slab_bin *b = &bins[0][cls];
	struct ucma_slab *s;
	void *p = NULL;

	ucma_lock(&b->lock);
	while (!p) {
		s = b->partial;
		if (!s && (s = empty_take(b)) != NULL) {
			ucma_slab_list_add(&b->partial, s);
			__atomic_store_n(&s->state, UCMA_SLAB_C_PARTIAL, __ATOMIC_RELAXED);
		}
		if (!s) {
			/* Created DEAD, so that a stale reader leaves it alone
			 * until it is listed under the lock. */
			ucma_unlock(&b->lock);
			s = slab_create(0, cls, &ucma_slab_unowned, UCMA_SLAB_DEAD);
			if (!s)
				return NULL;
			ucma_lock(&b->lock);
			ucma_slab_list_add(&b->partial, s);
			__atomic_store_n(&s->queued, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&s->state, UCMA_SLAB_C_PARTIAL, __ATOMIC_RELAXED);
		}
		ucma_slab_collect(s);
		for (unsigned w = 0; w < s->nwords; w++) {
			uint64_t u = s->used[w];

			if (u == ucma_slab_word_full(s, w))
				continue;
			__atomic_store_n(&s->used[w], u | (u + 1), __ATOMIC_RELAXED);
			p = (void *)(s->base +
				     ((uintptr_t)w * 64 + (unsigned)__builtin_ctzll(~u)) * s->size);
			break;
		}
		/* A slab without room leaves the list (also when our pick
		 * took its last object). */
		if (!p || !slab_has_room(s))
			central_file(b, s, UCMA_SLAB_C_PARTIAL);
	}
	ucma_unlock(&b->lock);
	UCMA_UNPOISON(p, ucma_classes[cls].size);
	return p;
}

bool ucma_slab_obj_is_free(struct ucma_slab *s, const void *p)
{
	int idx = ucma_slab_index(s, p);

	return idx < 0 || ucma_slab_idx_free(s, (unsigned)idx);
}

uint64_t ucma_slab_owned_free_bytes(void)
{
	uint64_t bytes = 0;

	for (unsigned set = 0; set < nbinsets; set++) {
		for (unsigned cls = 0; cls < UCMA_NR_CLASSES; cls++) {
			struct slab_bin *b = &bins[set][cls];

			ucma_lock(&b->lock);
			for (const struct ucma_slab *s = b->all; s; s = s->rnext)
				if (ucma_slab_owner(s, __ATOMIC_RELAXED) != &ucma_slab_unowned)
					bytes += (uint64_t)ucma_slab_nfree(s) * s->size;
			ucma_unlock(&b->lock);
		}
	}
	return bytes;
}

void ucma_slab_release_foreign(struct ucma_tcache *self)
{
	for (unsigned set = 0; set < nbinsets; set++) {
		for (unsigned cls = 0; cls < UCMA_NR_CLASSES; cls++) {
			struct slab_bin *b = &bins[set][cls];
			struct ucma_slab *s, *next, *doomed = NULL;

			ucma_lock(&b->lock);
			for (s = b->all; s; s = next) {
				struct ucma_tcache *owner = ucma_slab_owner(s, __ATOMIC_RELAXED);

				next = s->rnext;
				if (owner == &ucma_slab_unowned || owner == self)
					continue;
				/* Its owner's lists are gone with its thread. */
				__atomic_store_n(&s->owner, &ucma_slab_unowned, __ATOMIC_RELAXED);
				__atomic_store_n(&s->queued, 0, __ATOMIC_RELAXED);
				ucma_slab_collect(s);
				if (central_file(b, s, UCMA_SLAB_PARTIAL)) {
					s->next = doomed;
					doomed = s;
				}
			}
			ucma_unlock(&b->lock);
			for (s = doomed; s; s = next) {
				next = s->next;
				ucma_slab_destroy(s);
			}
		}
	}
}

/* Destroy the wholly free slabs of the central bins: the kept ones, and
 * with @partials those that remote frees emptied on the partial lists.
 * Returns the bytes given back. */
static size_t release_central(bool partials)
{
	size_t released = 0;

	for (unsigned set = 0; set < nbinsets; set++) {
		for (unsigned cls = 0; cls < UCMA_NR_CLASSES; cls++) {
			struct slab_bin *b = &bins[set][cls];
			struct ucma_slab *list = NULL, *s, *next;

			if (!partials && !__atomic_load_n(&b->nempty, __ATOMIC_RELAXED))
				continue;	/* (a stale look costs a slab kept) */
			ucma_lock(&b->lock);
			for (s = partials ? b->partial : NULL; s; s = next) {
				next = s->next;
				ucma_slab_collect(s);
				if (slab_looks_empty(s)) {
					ucma_slab_list_del(&b->partial, s);
					empty_add(b, s);
					__atomic_store_n(&s->state, UCMA_SLAB_C_EMPTY, __ATOMIC_RELAXED);
				}
			}
			while ((s = empty_take(b)) != NULL) {
				__atomic_store_n(&s->state, UCMA_SLAB_DEAD, __ATOMIC_RELAXED);
				ucma_slab_list_add(&list, s);
			}
			ucma_unlock(&b->lock);
			for (s = list; s; s = next) {
				next = s->next;
				released += (size_t)ucma_classes[cls].npages << UCMA_PAGE_SHIFT;
				ucma_slab_destroy(s);
			}
		}
	}
	return released;
}

size_t ucma_slab_trim(void)
{
	return release_central(true);
}

size_t ucma_slab_kept_bytes(void)
{
	return __atomic_load_n(&central_empty_bytes, __ATOMIC_RELAXED);
}

/*
 * Destroy arena slabs on the central bins' empty lists (outside the arena
 * destroying one would give the zone nothing).  All of them, for a request
 * that found no run; or, for the decay (@decay), those beyond each bin's
 * few that were kept before the tick before @tick, without waiting for
 * any lock of the malloc family: ucma_slab_decay() is called from the
 * NORMAL zone's purge, at the end of ucma_pages_free(), which a migrating
 * thread may call holding a handle entry that a fork waits for while it
 * holds every bin lock and pool_lock (fork.c's stages).  There a bin whose
 * lock is taken is looked at next tick, and the descriptors go back
 * without pool_lock.  (The zone's locks, which that caller takes anyway,
 * are taken as usual.)  True if any slab went.
 */
static bool cull_empty(bool decay, uint32_t tick)
{
	bool any = false;

	for (unsigned set = 0; set < nbinsets; set++) {
		for (unsigned cls = 0; cls < UCMA_NR_CLASSES; cls++) {
			struct slab_bin *b = &bins[set][cls];
			unsigned keep = decay ? central_keep_empty(cls) : 0, i = 0;
			struct ucma_slab *list = NULL, *s, *next;

			if (__atomic_load_n(&b->nempty, __ATOMIC_RELAXED) <= keep)
				continue;
			if (!decay)
				ucma_lock(&b->lock);
			else if (!ucma_trylock(&b->lock))
				continue;
			/* Newest first: the bin's few stay, whatever their age. */
			for (s = b->empty; s; s = next) {
				next = s->next;
				if (i++ < keep || s->where != UCMA_SLAB_ARENA ||
				    (decay && tick - s->kept_tick < 2))
					continue;
				empty_del(b, s);
				registry_del_locked(b, s);
				ucma_slab_list_add(&list, s);
			}
			ucma_unlock(&b->lock);
			for (s = list; s; s = next) {
				next = s->next;
				slab_pages_free(b, s);
				if (decay)
					desc_free_nowait(s);
				else
					desc_free(s);
				any = true;
			}
		}
	}
	return any;
}

bool ucma_slab_drop_empty(void)
{
	return __atomic_load_n(&central_arena_nempty, __ATOMIC_RELAXED) && cull_empty(false, 0);
}

void ucma_slab_decay(void)
{
	uint32_t tick = __atomic_add_fetch(&central_tick, 1, __ATOMIC_RELAXED);

	if (__atomic_load_n(&central_arena_nempty, __ATOMIC_RELAXED))
		cull_empty(true, tick);
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
			ucma_lock(&bins[set][c].lock);
	ucma_lock(&pool_lock);
	ucma_overflow_atfork_prepare();
}

void ucma_slab_atfork_parent(void)
{
	ucma_overflow_atfork_release();
	ucma_unlock(&pool_lock);
	for (unsigned set = nbinsets; set-- > 0;)
		for (unsigned c = UCMA_NR_CLASSES; c-- > 0;)
			ucma_unlock(&bins[set][c].lock);
}

/* The child has one thread, the one that forked, and it holds every lock:
 * release them (the state they protect is consistent). */
void ucma_slab_atfork_child(void)
{
	ucma_slab_atfork_parent();
}
