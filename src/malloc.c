/*
 * malloc.c - the general-purpose (unmovable) allocator: ucma_malloc() and
 * friends.
 *
 * Requests up to UCMA_SMALL_MAX bytes are rounded to a size class and
 * served by the calling thread's cache (tcache.c): the blocks it freed
 * lately, else the slabs it owns (slab.c).  The fast paths are a table
 * look-up and a pop or push on a per-thread stack, or a bit taken from a
 * slab's out-of-band bitmap: no locks, no atomic read-modify-write
 * (malloc_fast.h, which the preload library inlines as well).  Larger
 * requests are exact runs of pages from the NORMAL zone (zone.c), recorded
 * as UCMA_OWN_LARGE with the pfn of the address handed out as owner.  When
 * the zone is exhausted, or the arena could not be created, memory comes
 * from plain mappings outside the arena (overflow.c), so a program
 * never fails where glibc would not.
 *
 * A pointer is classified by address: inside the arena, the owner of its
 * page says slab or large run (one load, out of band); otherwise the
 * bootstrap buffer or the overflow radix tree.  Anything else is not ours:
 * ucma_free() reports it, ucma_owns() tells the preload layer beforehand,
 * ucma_try_free() does both in one call.
 *
 * Hostile input: a freed small object carries a per-process random marker
 * in its second word (AddressSanitizer builds poison it instead), and its
 * slab's bitmap says whether it is allocated.  free() finding the marker
 * looks for the object in the stack of its class in every thread's cache
 * and in the slab's bitmaps before it concludes "double free" (live data
 * that happens to hold the marker is freed normally); a block whose bit
 * says it is free is one whatever its second word holds.  The fast paths
 * never look further than the marker and the bit, so correct programs pay
 * nothing for the walk.  What escapes: a block whose marker the program
 * overwrote after the first free while it is parked (use after free), a
 * block already handed out again, and a second free racing the first or
 * racing the block's move from a cache to its slab.  Interior pointers
 * fail the exact index check (one multiplication by the class's
 * reciprocal).  Every such error prints one line naming the call and the
 * address and aborts before any metadata changes.
 *
 * Start-up: the first call may come before the library is initialised,
 * and re-entrantly while the initialising thread creates the arena
 * (libnuma and liburcu allocate).  ucma_arena_get() then fails with
 * EAGAIN, and the request is served from a static bootstrap buffer (bump
 * allocation, a header with the size; frees of it are ignored).  No lock
 * of this file is held while ucma_arena_get() runs.
 *
 * Locking: this file takes no lock of its own after initialisation; see
 * slab.c and tcache.c.  Fork handlers take every malloc lock in prepare
 * (registry, then bins, then overflow) and release them in parent and
 * child.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "malloc_fast.h"
#include "malloc_hooks.h"
#include "memevent.h"
#include "overflow.h"
#include "rcu.h"
#include "slab.h"
#include "tcache.h"

#include "fork.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* The largest request we try: beyond it sizes overflow page arithmetic. */
#define LARGE_MAX ((SIZE_MAX >> 1) - ((size_t)1 << 30))

/* The arena's geometry for the fast paths (malloc_fast.h). */
struct ucma_malloc_geometry ucma_mg;

/* The marker in the second word of every free small object (tcache.h). */
uint64_t ucma_free_key;

static pthread_mutex_t UCMA_FORK_LOCK minit_lock = PTHREAD_MUTEX_INITIALIZER;
static bool minit_done;

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */
/* ------------------------------------------------------------------------ */

/*
 * Fork handlers of the malloc family (fork.c's table): every malloc lock
 * in prepare (registry, then bins, then overflow), released in parent and
 * child.  fork.c runs them on every fork, also before the family was ever
 * used: the prepare handler remembers whether it took the locks, so the
 * parent and child handlers of the same fork release exactly those.
 */
static bool fork_locked;

void ucma_malloc_atfork_prepare(void)
{
	ucma_mutex_lock(&minit_lock);
	if (fork_locked != minit_done)	/* (a store may copy a page a child shares) */
		fork_locked = minit_done;
	if (fork_locked) {
		ucma_tcache_atfork_prepare();
		ucma_slab_atfork_prepare();
	}
}

void ucma_malloc_atfork_parent(void)
{
	if (fork_locked) {
		ucma_slab_atfork_parent();
		ucma_tcache_atfork_parent();
	}
	ucma_mutex_unlock(&minit_lock);
}

void ucma_malloc_atfork_child(void)
{
	if (fork_locked) {
		ucma_slab_atfork_child();
		ucma_tcache_atfork_child();
	}
	ucma_mutex_unlock(&minit_lock);
}

static uint64_t make_key(void)
{
	uint64_t k = 0;

	if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k)) {
		/* splitmix64 over whatever varies between processes */
		k = ucma_os_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&k;
		k += 0x9e3779b97f4a7c15ull;
		k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
		k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
		k ^= k >> 31;
	}
	return k | 1;	/* never 0, the value a live object's word gets */
}

static void malloc_init_once(void)
{
	if (__atomic_load_n(&minit_done, __ATOMIC_ACQUIRE))
		return;
	ucma_fork_init();	/* before the first malloc lock exists in use */
	ucma_mutex_lock(&minit_lock);
	if (!minit_done) {
		ucma_slab_init();
		ucma_free_key = make_key();
		ucma_tcache_init();
		__atomic_store_n(&minit_done, true, __ATOMIC_RELEASE);
	}
	ucma_mutex_unlock(&minit_lock);
}

/* The arena, initialising on first use; copies its geometry for the fast
 * paths.  NULL with errno EAGAIN (re-entered during start-up) or the
 * reason the arena could not be created. */
static struct ucma_arena *arena_known(void)
{
	struct ucma_arena *a = ucma_arena_get();

	if (a && !__atomic_load_n(&ucma_mg.size, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&ucma_mg.base, a->base, __ATOMIC_RELAXED);
		__atomic_store_n(&ucma_mg.pages, a->pages, __ATOMIC_RELAXED);
		__atomic_store_n(&ucma_mg.size, a->size, __ATOMIC_RELEASE);
	}
	return a;
}

/*
 * First malloc-family call of a thread: initialise, find the arena, make
 * the thread's cache.  Returns NULL when the call must be served from the
 * bootstrap buffer (re-entered while the arena is being created).  Without
 * an arena at all (ENOMEM) the cache is made anyway and serves overflow.
 */
static struct ucma_tcache *thread_start(void)
{
	int saved = errno;
	struct ucma_tcache *tc;

	malloc_init_once();
	if (!arena_known() && errno == EAGAIN) {
		errno = saved;
		return NULL;
	}
	tc = ucma_tcache_create();
	errno = saved;
	return tc;
}

/* ------------------------------------------------------------------------ */
/* Bootstrap buffer                                                          */
/* ------------------------------------------------------------------------ */

#define BOOT_SIZE ((size_t)1 << 20)
#define BOOT_HDR  16u

static char boot_buf[BOOT_SIZE] __attribute__((aligned(4096)));
static size_t boot_top;

static inline bool is_boot(const void *p)
{
	return (uintptr_t)p - (uintptr_t)boot_buf < BOOT_SIZE;
}

static size_t boot_usable(const void *p)
{
	return *(const size_t *)((const char *)p - BOOT_HDR);
}

static void *large_alloc(size_t size, size_t align, unsigned gfp);

/* Memory for a call re-entered during start-up. */
static void *boot_alloc(size_t size, size_t align)
{
	size_t old, start, end;

	if (align < 16)
		align = 16;
	if (size <= BOOT_SIZE && align <= BOOT_SIZE / 2) {
		old = __atomic_load_n(&boot_top, __ATOMIC_RELAXED);
		do {
			start = UCMA_ALIGN_UP(old + BOOT_HDR, align);
			end = start + UCMA_ALIGN_UP(size ? size : 1, 16);
			if (end > BOOT_SIZE)
				goto exhausted;
		} while (!__atomic_compare_exchange_n(&boot_top, &old, end, false,
						      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
		*(size_t *)(boot_buf + start - BOOT_HDR) = end - start;
		return boot_buf + start;
	}
exhausted:
	/* Without the arena: slabs and blocks of the overflow mappings,
	 * through the central bins (no thread cache yet). */
	malloc_init_once();
	if (size <= UCMA_SMALL_MAX && align <= UCMA_PAGE_SIZE) {
		for (unsigned cls = ucma_size_class(size); cls < UCMA_NR_CLASSES; cls++) {
			if (ucma_classes[cls].size & (align - 1))
				continue;
			return ucma_tcache_alloc_slow(&ucma_tcache_dummy, cls);
		}
	}
	return large_alloc(size, align, 0);
}

/* ------------------------------------------------------------------------ */
/* Pointer classification                                                    */
/* ------------------------------------------------------------------------ */

enum ptr_kind { PK_FOREIGN = 0, PK_BAD, PK_SMALL, PK_LARGE, PK_OVF_LARGE, PK_BOOT };

struct ptr_info {
	struct ucma_slab *slab;		/* PK_SMALL */
	int idx;			/* PK_SMALL: object index in the slab */
	struct ucma_arena *a;		/* PK_LARGE */
	uint32_t head;			/* PK_LARGE: run head */
	size_t usable;
	struct ucma_ovf_ref ovf;	/* PK_OVF_LARGE */
};

/*
 * What is @p?  With @who set (the caller's name for messages), a pointer
 * into our memory that is no allocation aborts with a message; with NULL
 * it is reported as PK_BAD.  PK_FOREIGN: not ours at all.
 */
static int classify(const void *p, struct ptr_info *pi, const char *who)
{
	struct ucma_arena *a = ucma_arena_peek();
	const char *why;

	if (ucma_addr_in_arena(a, p)) {
		uint32_t pfn = ucma_addr_to_pfn(a, p);
		const struct ucma_page *pg = &a->pages[pfn];
		int type = __atomic_load_n(&pg->owner_type, __ATOMIC_ACQUIRE);

		if (type == UCMA_OWN_SLAB) {
			pi->slab = (struct ucma_slab *)(uintptr_t)UCMA_PG_GET(pg, owner);
			pi->idx = ucma_slab_index(pi->slab, p);
			if (pi->idx < 0) {
				why = "inside a small object";
				goto bad;
			}
			pi->usable = pi->slab->size;
			return PK_SMALL;
		}
		if (type == UCMA_OWN_LARGE) {
			if (UCMA_PG_GET(pg, owner) != pfn || ((uintptr_t)p & (UCMA_PAGE_SIZE - 1))) {
				why = "inside a large block";
				goto bad;
			}
			pi->a = a;
			pi->head = ucma_run_head(a, pfn);
			pi->usable = (size_t)(pi->head + UCMA_PG_GET(&a->pages[pi->head], aux) - pfn)
				     << UCMA_PAGE_SHIFT;
			return PK_LARGE;
		}
		if (type == UCMA_OWN_NONE &&
		    __atomic_load_n(&pg->kind, __ATOMIC_RELAXED) != UCMA_PK_RUN &&
		    __atomic_load_n(&pg->kind, __ATOMIC_RELAXED) != UCMA_PK_TAIL) {
			if (who)
				ucma_fatal("%s: double free or invalid pointer %p (its page is free)",
					   who, p);
			return PK_BAD;
		}
		if (type == UCMA_OWN_NONE) {
			/* a run nobody owns: raw pages, or a large run freed
			 * and kept for reuse (ucma_tcache_large_put()) */
			if (who)
				ucma_fatal("%s: double free or invalid pointer %p (no live block there)",
					   who, p);
			return PK_BAD;
		}
		/* Name what lies there: a program that mixes up the two
		 * families learns which call it meant. */
		if (type == UCMA_OWN_CONTIG && ucma_contig_from_malloc(p))
			why = ((uintptr_t)p & (UCMA_PAGE_SIZE - 1)) || ucma_run_head(a, pfn) != pfn ?
				      "inside a contiguous block of malloc: only its start may be "
				      "freed or resized" :
				      "a contiguous block of the preloaded malloc: free() takes it back";
		else if (type == UCMA_OWN_CONTIG)
			why = "a ucma_alloc() buffer or inside one, not from malloc: "
			      "ucma_release() takes it back";
		else if (type == UCMA_OWN_MOVABLE || type == UCMA_OWN_MSLAB)
			why = "memory of a movable object, not from malloc: "
			      "ucma_hfree() takes its handle back";
		else
			why = "not from malloc";
		goto bad;
	}
	if (is_boot(p)) {
		pi->usable = boot_usable(p);
		return PK_BOOT;
	}
	switch (ucma_overflow_find(p, &pi->ovf)) {
	case UCMA_OVF_SLAB:
		pi->slab = pi->ovf.slab;
		pi->idx = ucma_slab_index(pi->slab, p);
		if (pi->idx < 0) {
			why = "inside a small object";
			goto bad;
		}
		pi->usable = pi->slab->size;
		return PK_SMALL;
	case UCMA_OVF_LARGE:
		if (p != pi->ovf.user) {
			why = "inside a large block";
			goto bad;
		}
		pi->usable = pi->ovf.usable;
		return PK_OVF_LARGE;
	case UCMA_OVF_OTHER:
		if (who)
			ucma_fatal("%s: double free or invalid pointer %p (its page is free)", who,
				   p);
		return PK_BAD;
	default:
		return PK_FOREIGN;
	}
bad:
	if (who)
		ucma_fatal("%s: invalid pointer %p (%s)", who, p, why);
	return PK_BAD;
}

/* ------------------------------------------------------------------------ */
/* Small objects                                                             */
/* ------------------------------------------------------------------------ */

static __attribute__((noinline)) void *small_alloc_slow(struct ucma_tcache *tc, unsigned cls)
{
	void *p = ucma_tcache_alloc_slow(tc, cls);

	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	ucma_obj_mark_live(p, ucma_classes[cls].size);
	if (ucma_config_debug) {
		struct ucma_slab *s = ucma_slab_of(p);

		if (!s || s->cls != cls || ucma_slab_index(s, p) < 0)
			ucma_fatal("internal error: cache of class %u gave %p", cls, p);
	}
	return p;
}

static inline void *small_alloc(struct ucma_tcache *tc, unsigned cls)
{
	struct ucma_tbin *b = &tc->bins[cls];
	unsigned n = b->n;
	void *p;

	if (n)
		return ucma_stack_pop(b, n);
	p = ucma_tbin_alloc(b);
	if (UCMA_UNLIKELY(!p))
		return small_alloc_slow(tc, cls);
	return p;
}

/* ------------------------------------------------------------------------ */
/* Large blocks                                                              */
/* ------------------------------------------------------------------------ */

/*
 * A run of exactly @npages pages whose address is aligned to @align, for
 * a request of kind UCMA_GFP_UNMOVABLE | @gfp (UCMA_GFP_ZERO, _GROWS).  The
 * first try takes an exact run, which the buddy allocator aligns to its
 * order anyway; only when that one is misaligned is the request repeated
 * with room to align: a block of the alignment itself when it is at most a
 * pageblock (a buddy block is aligned to its size), else align - 1 pages
 * of slack.  The head and tail around the aligned pages go back at once,
 * as glibc gives back the ends of an over-sized chunk, so an aligned
 * block holds what it was asked for and no more.
 */
static uint32_t run_alloc(struct ucma_arena *a, uint32_t npages, size_t align, unsigned gfp)
{
	uintptr_t mask = align > UCMA_PAGE_SIZE ? align - 1 : 0;
	uint64_t align_pages = align >> UCMA_PAGE_SHIFT, total;
	uint32_t pfn, h;

	pfn = ucma_pages_alloc(a, npages, gfp);
	if (pfn == UCMA_PFN_NONE || !((uintptr_t)ucma_pfn_to_addr(a, pfn) & mask))
		return pfn;
	ucma_pages_free(a, pfn);
	if (align_pages <= UCMA_PAGEBLOCK_PAGES && npages <= align_pages)
		total = align_pages;
	else
		total = (uint64_t)npages + align_pages - 1;
	if (total > a->zones[UCMA_ZONE_NORMAL].managed_pages)
		return UCMA_PFN_NONE;
	h = ucma_pages_alloc(a, (uint32_t)total, gfp);
	if (h == UCMA_PFN_NONE)
		return UCMA_PFN_NONE;
	pfn = ucma_addr_to_pfn(a, (void *)UCMA_ALIGN_UP((uintptr_t)ucma_pfn_to_addr(a, h),
							(uintptr_t)align));
	ucma_pages_trim(a, h, pfn, npages);
	return pfn;
}

/* A large block; @gfp: UCMA_GFP_ZERO (calloc), UCMA_GFP_GROWS (realloc). */
static void *large_alloc(size_t size, size_t align, unsigned gfp)
{
	struct ucma_arena *a = ucma_arena_peek();
	int saved;
	size_t npages, usable;
	void *p;

	if (UCMA_UNLIKELY(size > LARGE_MAX || align > LARGE_MAX)) {
		errno = ENOMEM;
		return NULL;
	}
	if (size == 0)
		size = 1;
	npages = (size + UCMA_PAGE_SIZE - 1) >> UCMA_PAGE_SHIFT;
	if (a && npages <= a->zones[UCMA_ZONE_NORMAL].managed_pages && align < a->size) {
		struct ucma_tcache *tc = ucma_tcache_tls;
		uint32_t pfn = UCMA_PFN_NONE;

		/* A run this thread freed lately, when no alignment beyond a
		 * page is asked for (every run starts on one). */
		if (align <= UCMA_PAGE_SIZE) {
			pfn = ucma_tcache_large_get(tc, a, (uint32_t)npages);
			if (pfn != UCMA_PFN_NONE) {
				usable = npages << UCMA_PAGE_SHIFT;
				/* its tails still say so: only the head changes */
				__atomic_store_n(&a->pages[pfn].owner_type, UCMA_OWN_LARGE,
						 __ATOMIC_RELEASE);
				ucma_tcache_count_large(1, usable, 0);	/* pages kept counted */
				if (gfp & UCMA_GFP_ZERO)
					memset(ucma_pfn_to_addr(a, pfn), 0, usable);
				ucma_shm_check_request(true);	/* as below */
				return ucma_pfn_to_addr(a, pfn);
			}
		}
		saved = errno;	/* a kept run touches nothing that sets it */
		pfn = run_alloc(a, (uint32_t)npages, align, gfp);
		/* Wholly free slabs the central bins keep give way first. */
		if (pfn == UCMA_PFN_NONE && ucma_slab_drop_empty())
			pfn = run_alloc(a, (uint32_t)npages, align, gfp);
		if (pfn != UCMA_PFN_NONE) {
			uint32_t run = a->pages[pfn].aux;

			ucma_run_set_owner(a, pfn, UCMA_OWN_LARGE, pfn);
			usable = (size_t)run << UCMA_PAGE_SHIFT;
			ucma_tcache_count_large(1, usable, run);
			/* A malloc-only process has no ucma thread: here it
			 * notices that ucmastat asks for its statistics. */
			ucma_shm_check_request(true);
			errno = saved;
			return ucma_pfn_to_addr(a, pfn);
		}
	}
	saved = errno;
	p = ucma_overflow_large_alloc(size, align, gfp & UCMA_GFP_ZERO, &usable);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	ucma_tcache_count_large(1, usable, 0);
	errno = saved;
	return p;
}

/* Free a block that classify() found; @p is ours and checked. */
static void free_classified(void *p, int kind, struct ptr_info *pi, const char *who)
{
	switch (kind) {
	case PK_SMALL:
		ucma_small_free(pi->slab, (unsigned)pi->idx, p, who);
		return;
	case PK_LARGE: {
		uint32_t run = pi->a->pages[pi->head].aux;

		/* Kept for this thread's next large malloc of the size, its
		 * head owned by nobody meanwhile (a second free is refused). */
		if (ucma_tcache_large_put(ucma_tcache_tls, pi->a, pi->head)) {
			ucma_tcache_count_large(-1, pi->usable, 0);
			return;
		}
		ucma_tcache_count_large(-1, pi->usable, run);
		ucma_pages_free(pi->a, pi->head);
		return;
	}
	case PK_OVF_LARGE:
		if (!ucma_overflow_large_free(&pi->ovf))
			ucma_fatal("%s: double free of %p (a large block freed meanwhile)", who,
				   p);
		ucma_tcache_count_large(-1, pi->usable, 0);
		return;
	case PK_BOOT:
		return;	/* the bootstrap buffer is never reused */
	default:
		ucma_fatal("%s: invalid pointer %p", who, p);
	}
}

/* ------------------------------------------------------------------------ */
/* Public interface                                                          */
/* ------------------------------------------------------------------------ */

static __attribute__((noinline)) void *malloc_slow(size_t size)
{
	struct ucma_tcache *tc = ucma_tcache_tls;

	if (ucma_tcache_unstarted(tc)) {
		tc = thread_start();
		if (!tc)
			return boot_alloc(size, 16);
	}
	if (size <= UCMA_SMALL_MAX)
		return small_alloc(tc, ucma_size_class(size));
	return large_alloc(size, 0, 0);
}

/* Bin @b of @tc had nothing at hand for a request of @size bytes.  A
 * thread's first call comes here too, with the dummy cache (whose bins
 * are all full): its bin may be the wrong one, since the table of bins
 * by size is empty until the library is initialised. */
__attribute__((noinline)) void *ucma_malloc_miss(struct ucma_tcache *tc, struct ucma_tbin *b, size_t size)
{
	if (UCMA_UNLIKELY(ucma_tcache_unstarted(tc)))
		return malloc_slow(size);
	return small_alloc_slow(tc, (unsigned)(b - tc->bins));
}

/* The fast path (malloc_fast.h): a pop, or a bit of the cursor's word. */
void *ucma_malloc(size_t size)
{
	return ucma_malloc_fast(size, UCMA_SMALL_MAX + 1, malloc_slow);
}

void *ucma_calloc(size_t nmemb, size_t size)
{
	size_t bytes;
	void *p;

	if (__builtin_mul_overflow(nmemb, size, &bytes)) {
		errno = ENOMEM;
		return NULL;
	}
	if (bytes <= UCMA_SMALL_MAX) {
		p = ucma_malloc(bytes);
		if (p)
			memset(p, 0, bytes);
		return p;
	}
	if (ucma_tcache_unstarted(ucma_tcache_tls) && !thread_start()) {
		p = boot_alloc(bytes, 16);
		if (p)
			memset(p, 0, bytes);
		return p;
	}
	return large_alloc(bytes, 0, UCMA_GFP_ZERO);
}

static __attribute__((noinline)) void free_slow(void *p)
{
	struct ptr_info pi;
	int saved = errno;	/* free() leaves errno alone */

	if (p)
		free_classified(p, classify(p, &pi, "free()"), &pi, "free()");
	errno = saved;
}

/* The rest of ucma_small_free() (malloc_fast.h). */
__attribute__((noinline)) void ucma_small_free_slow(struct ucma_tcache *tc, struct ucma_slab *s, void *p,
						  const char *who)
{
	int idx = ucma_slab_index(s, p);

	/* The fast path leaves an index past the last object to the bit,
	 * always clear there (slab.h): the address is in the slab's tail. */
	if (idx < 0)
		ucma_fatal("%s: invalid pointer %p (past the last object of its slab)", who, p);
	ucma_tcache_free_slow(tc, s, (unsigned)idx, p, who);
}

/* Not declared noreturn, so that the fast path reaches it by a jump and
 * needs no stack frame for a call. */
UCMA_NOIPA void ucma_free_interior(void *p)
{
	ucma_fatal("free(): invalid pointer %p (inside a small object)", p);
}

/*
 * A large block of the arena, from the fast path (the head page's owner
 * said UCMA_OWN_LARGE): classify()'s checks for it, without its walk.
 * Anything but the address handed out goes to free_slow(), which reports it.
 */
__attribute__((noinline)) void ucma_free_large(void *p)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t pfn = (uint32_t)(((uintptr_t)p - a->base) >> UCMA_PAGE_SHIFT);
	struct ptr_info pi;
	int saved;

	if (UCMA_PG_GET(&a->pages[pfn], owner) != pfn || ((uintptr_t)p & (UCMA_PAGE_SIZE - 1))) {
		free_slow(p);
		return;
	}
	saved = errno;	/* free() leaves errno alone */
	pi.a = a;
	pi.head = ucma_run_head(a, pfn);
	pi.usable = (size_t)(pi.head + UCMA_PG_GET(&a->pages[pi.head], aux) - pfn) << UCMA_PAGE_SHIFT;
	free_classified(p, PK_LARGE, &pi, "free()");
	errno = saved;
}


void ucma_free(void *p)
{
	if (!ucma_free_fast(p))
		free_slow(p);
}

static __attribute__((noinline)) int owns_slow(const void *p);

__attribute__((noinline)) void ucma_free_or_slow(void *p, void (*foreign_free)(void *))
{
	struct ptr_info pi;
	int kind, saved;

	/* Outside the arena one look at the overflow's tree tells ours
	 * (classified for the free at the same time) from foreign: the heap
	 * past the arena paid that look twice. */
	if (p && !ucma_addr_in_arena(ucma_arena_peek(), p)) {
		saved = errno;	/* free() leaves errno alone */
		kind = classify(p, &pi, "free()");
		if (kind != PK_FOREIGN)
			free_classified(p, kind, &pi, "free()");
		errno = saved;
		if (kind == PK_FOREIGN)
			foreign_free(p);
		return;
	}
	if (!owns_slow(p)) {
		foreign_free(p);
		return;
	}
	free_slow(p);
}

int ucma_try_free(void *p)
{
	if (ucma_free_fast(p))
		return 1;
	if (!p)
		return 1;
	if (!owns_slow(p))
		return 0;
	free_slow(p);
	return 1;
}

/*
 * Does the live block at @p, a block of a slab or the head of a large run
 * of the arena, stay where it is for @size bytes (the size still needs
 * more than half of it)?  Read as free()'s fast path reads it, from the
 * page and slab metadata alone.  false when it does not fit, and for
 * everything this does not settle: a block that may be free (its bit
 * clear, its remote bit set, or the free marker on it), a pointer inside
 * a block, a block of the overflow mappings or the boot buffer;
 * ucma_realloc() then classifies it in full.  Most reallocations of a
 * program that grows its buffers in small steps stay in place: in
 * bench_malloc's `realloc`, 94 % of them.
 */
static inline __attribute__((always_inline)) bool realloc_in_place(const void *p, size_t size)
{
	const struct ucma_page *pg;
	uintptr_t off;
	size_t old;
	unsigned type;

	if (UCMA_UNLIKELY(!ucma_mg_page(p, &pg, &off)))
		return false;
	type = __atomic_load_n(&pg->owner_type, __ATOMIC_ACQUIRE);
	if (type == UCMA_OWN_SLAB) {
		const struct ucma_slab *s =
			(const struct ucma_slab *)(uintptr_t)UCMA_PG_GET(pg, owner);
		int idx = ucma_slab_index(s, p);

		if (idx < 0 || ucma_slab_idx_free(s, (unsigned)idx) || ucma_obj_marked_free(p))
			return false;
		old = s->size;
	} else if (type == UCMA_OWN_LARGE) {
		/* The address handed out names its own page the owner, and
		 * at the head of its run (kind RUN) aux is the run's length;
		 * a block that starts inside its run is classify()'s. */
		if (UCMA_PG_GET(pg, owner) != (off >> UCMA_PAGE_SHIFT) ||
		    (off & (UCMA_PAGE_SIZE - 1)) || UCMA_PG_GET(pg, kind) != UCMA_PK_RUN)
			return false;
		old = (size_t)UCMA_PG_GET(pg, aux) << UCMA_PAGE_SHIFT;
	} else {
		return false;
	}
	return size <= old && size > old / 2;
}

/*
 * Grow the large block @p (@pi: PK_LARGE, its head) for @size bytes,
 * rounded as a moved block is (ucma_large_round()), without going through
 * malloc: where it grows matters for both the copy and the memory.
 *  - Into the pages after it, when they are free and resident (blocks
 *    freed earlier, still mapped): no copy, no page fault.
 *  - Otherwise to a new run when that run is resident: the copy costs
 *    less than first touches of fresh pages, which the kernel zeroes one
 *    by one (and a virtual machine's host backs), and the old copy's
 *    pages stay resident for the next block anyway.
 *  - Into fresh pages after it when the new run would be fresh too, as
 *    mremap() grows glibc's mapped chunks: moving would copy, and leave
 *    the old copy resident, for nothing.  A buffer built up by realloc()
 *    then holds what it holds and no more (bench_malloc realloc-big).
 * The run that tells which of the last two applies is a probe: it lends
 * no CMA frame (it may go back unused), and a fresh one goes back before
 * the block tries to grow, because the allocator places runs lowest
 * first, so the fresh pages it found are often the very pages after the
 * block.  NULL when the block cannot grow here: the caller moves it as
 * any block.
 */
static void *large_grow(void *p, struct ptr_info *pi, size_t size)
{
	struct ucma_arena *a = pi->a;
	const unsigned probe_gfp = UCMA_GFP_UNMOVABLE | UCMA_GFP_RESIDENT | UCMA_GFP_NO_LEND;
	uint64_t npages;
	uint32_t pfn, n;
	int saved = errno;	/* realloc() leaves errno alone on success */
	bool dirty = false;
	void *q;

	/* (Tested before rounding: ucma_large_round() wraps near SIZE_MAX.) */
	if (size > LARGE_MAX)
		return NULL;
	npages = (ucma_large_round(size) + UCMA_PAGE_SIZE - 1) >> UCMA_PAGE_SHIFT;
	if (npages > a->zones[UCMA_ZONE_NORMAL].managed_pages)
		return NULL;
	if (ucma_pages_grow(a, pi->head, (uint32_t)npages, true))
		goto grown;
	pfn = ucma_pages_alloc_dirty(a, (uint32_t)npages, probe_gfp, &dirty);
	if (pfn == UCMA_PFN_NONE || !dirty) {
		if (pfn != UCMA_PFN_NONE)
			ucma_pages_free_unused(a, pfn);
		if (ucma_pages_grow(a, pi->head, (uint32_t)npages, false))
			goto grown;
		errno = saved;
		return NULL;
	}
	n = a->pages[pfn].aux;
	ucma_run_set_owner(a, pfn, UCMA_OWN_LARGE, pfn);
	ucma_tcache_count_large(1, (size_t)n << UCMA_PAGE_SHIFT, n);
	q = ucma_pfn_to_addr(a, pfn);
	memcpy(q, p, pi->usable);
	free_classified(p, PK_LARGE, pi, "realloc()");
	ucma_shm_check_request(true);	/* as large_alloc() */
	errno = saved;
	return q;
grown:
	ucma_tcache_count_large_resize(pi->usable, (size_t)npages << UCMA_PAGE_SHIFT);
	errno = saved;
	return p;
}

/*
 * Shrink the large block @pi to @size bytes where it lies, giving back
 * the pages of its tail (mremap() again).  Not for a block that shrinks
 * into the small classes: a slab holds it with less waste.  false: the
 * caller moves it.
 */
static bool large_shrink(struct ptr_info *pi, size_t size)
{
	uint32_t npages = (uint32_t)((size + UCMA_PAGE_SIZE - 1) >> UCMA_PAGE_SHIFT);

	if (size <= UCMA_SMALL_MAX)
		return false;
	ucma_pages_trim(pi->a, pi->head, pi->head, npages);
	/* (trim cleared the owner; nothing else holds the block) */
	ucma_run_set_owner(pi->a, pi->head, UCMA_OWN_LARGE, pi->head);
	ucma_tcache_count_large_resize(pi->usable, (size_t)npages << UCMA_PAGE_SHIFT);
	return true;
}

static __attribute__((noinline)) void *realloc_slow(void *p, size_t size)
{
	struct ptr_info pi;
	size_t old, want = size;
	int kind;
	void *q;

	if (!p)
		return ucma_malloc(size);
	if (size == 0) {
		ucma_free(p);
		return NULL;
	}
	kind = classify(p, &pi, "realloc()");
	old = pi.usable;
	switch (kind) {
	case PK_SMALL:
		if (ucma_tcache_obj_is_freed(pi.slab, (unsigned)pi.idx, p))
			ucma_fatal("realloc(): invalid pointer %p (already freed)", p);
		/* Same class, or a smaller one that still needs half of it. */
		if (size <= old && size > old / 2)
			return p;
		break;
	case PK_LARGE:
		if (size <= old && size > old / 2)
			return p;
		if (size > old && (q = large_grow(p, &pi, size)) != NULL)
			return q;
		if (size < old && large_shrink(&pi, size))
			return p;
		break;
	case PK_OVF_LARGE: {
		size_t usable;

		if (size <= old && size > old / 2)
			return p;
		/* By moving page tables (overflow.c), else copied below; a
		 * block that shrinks into the size classes goes to a slab. */
		if (size > UCMA_SMALL_MAX)
			q = ucma_overflow_large_resize(&pi.ovf, size, &usable);
		else
			q = NULL;
		if (q) {
			ucma_tcache_count_large(-1, old, 0);
			ucma_tcache_count_large(1, usable, 0);
			return q;
		}
		break;
	}
	case PK_BOOT:
		if (size <= old)
			return p;
		break;
	default:
		ucma_fatal("realloc(): invalid pointer %p", p);
	}
	if (size > old && size > UCMA_SMALL_MAX && size <= LARGE_MAX) {
		/* Placed where it has room to grow in place next time. */
		want = ucma_large_round(size);
		q = ucma_tcache_unstarted(ucma_tcache_tls) ? ucma_malloc(want)
							   : large_alloc(want, 0, UCMA_GFP_GROWS);
	} else {
		q = ucma_malloc(want);
	}
	if (!q)
		return NULL;	/* errno ENOMEM; the old block stays */
	memcpy(q, p, old < size ? old : size);
	free_classified(p, kind, &pi, "realloc()");
	return q;
}

/* In place without a stack frame (the common case: see realloc_in_place()),
 * everything else in realloc_slow(). */
void *ucma_realloc(void *p, size_t size)
{
	if (UCMA_LIKELY(p && size && realloc_in_place(p, size)))
		return p;
	return realloc_slow(p, size);
}

static void *aligned_impl(size_t align, size_t size)
{
	struct ucma_tcache *tc = ucma_tcache_tls;

	if (align <= 16)
		return ucma_malloc(size);
	if (ucma_tcache_unstarted(tc)) {
		tc = thread_start();
		if (!tc)
			return boot_alloc(size, align);
	}
	/* A class whose size is a multiple of @align: objects start at
	 * multiples of it from a page boundary. */
	if (size <= UCMA_SMALL_MAX && align <= UCMA_PAGE_SIZE) {
		for (unsigned cls = ucma_size_class(size); cls < UCMA_NR_CLASSES; cls++)
			if (!(ucma_classes[cls].size & (align - 1)))
				return small_alloc(tc, cls);
	}
	return large_alloc(size, align, 0);
}

void *ucma_aligned_alloc(size_t alignment, size_t size)
{
	if (alignment == 0 || (alignment & (alignment - 1))) {
		errno = EINVAL;
		return NULL;
	}
	return aligned_impl(alignment, size);
}

int ucma_posix_memalign(void **memptr, size_t alignment, size_t size)
{
	int saved = errno;
	void *p;

	if (!memptr || alignment < sizeof(void *) || (alignment & (alignment - 1)))
		return EINVAL;
	p = aligned_impl(alignment, size);
	/* Left alone either way: a request that succeeded on a second try
	 * (another zone, the overflow mappings) saw ENOMEM on the way. */
	errno = saved;
	if (!p)
		return ENOMEM;
	*memptr = p;
	return 0;
}

void *ucma_memalign(size_t alignment, size_t size)
{
	/* glibc's memalign() rounds an alignment that is no power of two up
	 * to the next one. */
	if (alignment & (alignment - 1)) {
		if (alignment > (SIZE_MAX >> 1) + 1) {
			errno = EINVAL;
			return NULL;
		}
		alignment = (size_t)1 << (64 - __builtin_clzll((unsigned long long)alignment));
	}
	return aligned_impl(alignment ? alignment : 1, size);
}

size_t ucma_usable_size(const void *p)
{
	struct ptr_info pi;

	if (!p)
		return 0;
	switch (classify(p, &pi, NULL)) {
	case PK_SMALL:
		/* A freed block is no block: its size would invite a write
		 * into memory the next malloc hands out. */
		if (ucma_tcache_obj_is_freed(pi.slab, (unsigned)pi.idx, p))
			break;
		return pi.usable;
	case PK_LARGE:
	case PK_OVF_LARGE:
	case PK_BOOT:
		return pi.usable;
	default:
		break;
	}
	errno = EINVAL;
	return 0;
}

/*
 * Live runs of other owners (movable objects, movable slabs, ucma_alloc()
 * buffers) are not ours; every other arena address is, so that a stale or
 * bad pointer into the arena still meets ucma_free()'s checks.
 */
static bool arena_page_ours(const struct ucma_arena *a, const void *p)
{
	const struct ucma_page *pg = &a->pages[ucma_addr_to_pfn(a, p)];
	uint8_t kind = __atomic_load_n(&pg->kind, __ATOMIC_RELAXED);
	uint8_t owner = __atomic_load_n(&pg->owner_type, __ATOMIC_RELAXED);

	if (kind != UCMA_PK_RUN && kind != UCMA_PK_TAIL)
		return true;
	return owner != UCMA_OWN_MOVABLE && owner != UCMA_OWN_MSLAB && owner != UCMA_OWN_CONTIG;
}

bool ucma_addr_is_ours(const void *p)
{
	struct ucma_ovf_ref ref;

	return p && (ucma_addr_in_arena(ucma_arena_peek(), p) || is_boot(p) ||
		     ucma_overflow_find(p, &ref) != UCMA_OVF_NONE);
}

static __attribute__((noinline)) int owns_slow(const void *p)
{
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_ovf_ref ref;

	if (!p)
		return 0;
	if (ucma_addr_in_arena(a, p))
		return arena_page_ours(a, p);
	if (is_boot(p))
		return 1;
	return ucma_overflow_find(p, &ref) != UCMA_OVF_NONE;
}

/* A block of a slab or a large run, told after two loads: the common
 * case of every free() and realloc() of a preloaded program.  false
 * leaves the question to owns_slow(). */
static inline __attribute__((always_inline)) bool owns_fast(const void *p)
{
	const struct ucma_page *pg;
	uintptr_t off;
	unsigned type;

	if (UCMA_UNLIKELY(!ucma_mg_page(p, &pg, &off)))
		return false;
	type = UCMA_PG_GET(pg, owner_type);
	return type == UCMA_OWN_SLAB || type == UCMA_OWN_LARGE;
}

int ucma_owns(const void *p)
{
	return owns_fast(p) ? 1 : owns_slow(p);
}

static __attribute__((noinline)) void *realloc_or_slow(void *p, size_t size,
						      void *(*foreign_realloc)(void *, size_t))
{
	if (!owns_slow(p))
		return foreign_realloc(p, size);
	return ucma_realloc(p, size);
}

/* (The slow half out of line, so that the common case saves nothing on
 * the stack before its tail call.) */
void *ucma_realloc_or(void *p, size_t size, void *(*foreign_realloc)(void *, size_t))
{
	if (UCMA_LIKELY(owns_fast(p)))
		return ucma_realloc(p, size);
	return realloc_or_slow(p, size, foreign_realloc);
}

int ucma_trim(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint64_t purged = 0;
	size_t released = 0;

	/* The malloc family's caches, once it runs; the zones whenever the
	 * arena exists (a program of ucma_alloc() and ucma_halloc() alone
	 * has free pages to give back too). */
	if (__atomic_load_n(&minit_done, __ATOMIC_ACQUIRE)) {
		ucma_tcache_trim(ucma_tcache_tls);
		released = ucma_slab_trim();
		released += ucma_overflow_trim();
	}
	if (a) {
		/* Freed movable objects wait for readers before their pages
		 * are free (migrate.c): let them count, where the caller may
		 * wait for a grace period: not inside ucma_read_lock(), nor
		 * inside a memory-event callback, which holds the delivery
		 * while a reader may be waiting to deliver. */
		if (ucma_rcu_can_wait() && !ucma_mem_event_in_callback())
			ucma_defer_drain();
		purged = ucma_zone_purge(&a->zones[UCMA_ZONE_NORMAL], true);
		/* The CMA zone's free pages too: those of released contiguous
		 * buffers (a preloaded program's large malloc() blocks with
		 * UCMA_PRELOAD_CONTIG_MIN) stayed resident until the decay
		 * otherwise, hundreds of MiB after malloc_trim(0).  (Its own
		 * count: the process-wide statistic also counts other
		 * threads' purges meanwhile.) */
		if (a->zones[UCMA_ZONE_CMA].end_pfn > a->zones[UCMA_ZONE_CMA].start_pfn)
			purged += ucma_zone_purge(&a->zones[UCMA_ZONE_CMA], true);
		/* The MAP events of frames the purge gave back, before this
		 * returns (a top-level call: the callbacks may allocate). */
		ucma_mem_event_deliver();
	}
	return released || purged;
}

int ucma_malloc_info(struct ucma_malloc_info *info)
{
	struct ucma_malloc_counters m;

	if (!info) {
		errno = EINVAL;
		return -1;
	}
	ucma_malloc_counters_read(&m);
	memset(info, 0, sizeof(*info));
	info->allocated = m.allocated_bytes;
	info->active = m.active_bytes;
	info->overflow = m.overflow_bytes;
	info->cached = m.tcache_bytes;
	info->nmalloc = m.nmalloc;
	info->nfree = m.nfree;
	info->large_allocs = m.large_allocs;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */

void ucma_malloc_counters_read(struct ucma_malloc_counters *out)
{
	memset(out, 0, sizeof(*out));
	if (!__atomic_load_n(&minit_done, __ATOMIC_ACQUIRE))
		return;
	ucma_tcache_counters(out);
	out->active_bytes += ucma_slab_active_bytes();
	out->overflow_bytes = ucma_overflow_bytes();
	out->overflow_cached_bytes = ucma_overflow_cached_bytes();
	out->slab_kept_bytes = ucma_slab_kept_bytes();
}
