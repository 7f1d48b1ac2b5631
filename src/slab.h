/*
 * slab.h - size classes and slabs of the malloc family (slab.c), as
 * malloc.c and tcache.c see them.
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
#define UCMA_SLAB_WORDS      (UCMA_SLAB_MAX_OBJS / 64)
#define UCMA_MAX_BINSETS     16u
#define UCMA_SLAB_MAX_PAGES  64u

/* Geometry of one size class: written once by ucma_slab_init() before
 * the first allocation (under malloc.c's start-up lock), constant after. */
struct ucma_class {
	uint32_t size;		/* object size, a multiple of 16 */
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
 * Where a slab is.  A slab is owned by one thread's cache (tcache.c),
 * which alone allocates from it, or it is central: unowned, in the bin of
 * its class and bin set (slab.c).  A descriptor that holds no slab is DEAD.
 */
enum ucma_slab_state {
	UCMA_SLAB_DEAD = 0,	/* in the descriptor pool */
	UCMA_SLAB_PARTIAL,	/* owned: on its bin's partial list (room at the last look) */
	UCMA_SLAB_FULL,		/* owned: on its bin's full list (no room at the last look) */
	UCMA_SLAB_EMPTY,	/* owned: on its bin's list of wholly free slabs */
	UCMA_SLAB_C_PARTIAL,	/* central: on the partial list (some room) */
	UCMA_SLAB_C_EMPTY,	/* central: on the empty list */
	UCMA_SLAB_C_FULL,	/* central: on no list (no room at the last look) */
};

struct ucma_tcache;

/* Bit 0 of an owned slab's @owner: the slab is on its owner's full list
 * (caches are 64-byte aligned, so the bit is otherwise clear). */
#define UCMA_SLAB_OWNER_FULL ((uintptr_t)1)


/* The owner of a central slab: an address no thread's cache has (not
 * NULL, which a thread without a cache has, nor the dummy cache). */
UCMA_INTERNAL extern struct ucma_tcache ucma_slab_unowned;

/*
 * struct ucma_slab - descriptor of one slab, out of band (three cache
 * lines from slab.c's descriptor pool: the remote bitmap has a line of its
 * own, so frees from other threads do not take the owner's bitmap line
 * away from it).  Object i is in its slab iff bit i of @used is clear or
 * bit i of @remote is set; otherwise it is allocated, or parked in a
 * thread's cache (tcache.h).
 *
 * Descriptors are type stable: a destroyed slab's descriptor goes back to
 * the pool and may describe another slab later, but never becomes other
 * memory, so a thread that touched a slab just before it was destroyed
 * (a remote free telling the owner) reads a descriptor, perhaps stale.
 *
 * Locking and atomicity:
 *  - @base, @divisor, @size, @nobjs, @nwords, @lastfull, @where, @pfn:
 *    written by slab_create() before the slab is published, then constant
 *    while it exists.  Publication is the release store of the pages' owner_type
 *    (ucma_run_set_owner()) or of the overflow chunk's owner entries; a
 *    thread reaches the descriptor through a block it was handed, after
 *    that store, so free() reads them without a lock.
 *  - @cls, @binset: the same, but stored and loaded atomically, because a
 *    stale reader (above) uses them to find a bin to lock.
 *  - @owner: the owning thread's cache, or &ucma_slab_unowned.  Changes
 *    hands only under the lock of the slab's central bin (adoption,
 *    release) or at creation; stored and loaded atomically (seq_cst where
 *    the remote free protocol of tcache.c needs it).  A thread that reads
 *    itself as the owner stays the owner until it gives the slab up.  The
 *    owner sets UCMA_SLAB_OWNER_FULL in it while the slab is on its full
 *    list, so that the one comparison of free()'s bitmap path with the
 *    caller's cache also sends a free into a full slab to the slow path
 *    (which puts the slab back where malloc looks); others mask it off.
 *  - @used: an owned slab's bits are written by its owner alone (relaxed
 *    atomic stores, since others read them); a central slab's under its
 *    bin lock.  Read by anyone with relaxed loads.  The bits of indices
 *    from @nobjs on are always clear, and so is @pad_used, which follows
 *    it: free()'s fast path reads the bit of an index before it compares
 *    the index with @nobjs (only in its slow path), and no slab's pages
 *    hold more than 2 * UCMA_SLAB_MAX_OBJS object starts (slab.c).
 *  - @remote: set by frees from threads other than the owner (atomic
 *    fetch-or, whose old value catches a second such free), taken by the
 *    owner or, for a central slab, the bin lock holder (atomic exchange)
 *    and cleared from @used.
 *  - @state: owned states are written by the owner, central states under
 *    the bin lock; atomic, because stale readers look at it under a bin
 *    lock that may not be the slab's any more.
 *  - @next, @prev: links of the list @state names: its owner's alone, or
 *    the bin lock; the pool's free list while DEAD (pool lock).
 *  - @queued: central slabs: set once a remote free has asked for the slab
 *    to be listed as partial, cleared on adoption (atomic exchange, so
 *    only the first such free takes the bin lock).
 *  - @rnext, @rprev: the registry of every live slab of the bin, owned or
 *    central, changed at creation and destruction under the bin lock; the
 *    statistics and the fork child walk it instead of the owners' lists,
 *    which only their owners touch.
 */
struct ucma_slab {
	/* first cache line: what free() reads, then the list links */
	uintptr_t base;			/* address of object 0 (slab start) */
	uint64_t divisor;		/* ceil(2^64 / size): see ucma_slab_index() */
	struct ucma_tcache *owner;	/* owning cache, or &ucma_slab_unowned */
	uint32_t size;			/* object size */
	uint16_t nobjs;			/* objects in the slab */
	uint8_t cls;			/* size class */
	uint8_t state;			/* enum ucma_slab_state */
	uint8_t nwords;			/* words of the bitmaps in use */
	uint8_t where;			/* UCMA_SLAB_ARENA or UCMA_SLAB_OVERFLOW */
	uint8_t binset;			/* central bin set it returns to */
	uint8_t queued;			/* central: listed on a remote free's request */
	uint32_t pfn;			/* run head, arena slabs only */
	struct ucma_slab *next, *prev;	/* the list @state names */
	uint64_t lastfull;		/* used[nwords - 1] when that word is full */
	/* second cache line: the owner's bitmap */
	uint64_t used[UCMA_SLAB_WORDS];		/* 1 = allocated */
	uint64_t pad_used[UCMA_SLAB_WORDS];	/* always 0: the bits of indices past the bitmap */
	/* third cache line: what other threads write, apart from the owner's */
	uint64_t remote[UCMA_SLAB_WORDS];	/* 1 = freed by a non-owner, not merged */
	struct ucma_slab *rnext, *rprev;	/* every slab of its bin (bin lock) */
	uint32_t kept_tick;		/* central empty: decay tick it was kept at (bin lock) */
	uint32_t pad_remote[3];
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct ucma_slab, used) == 64 && offsetof(struct ucma_slab, remote) == 128 &&
	       sizeof(struct ucma_slab) == 192,
	       "slab descriptor: constants and links, the owner's bitmap, the remote bitmap");

/* remote[w] is this many words after used[w]. */
#define UCMA_SLAB_REMOTE_OFF ((offsetof(struct ucma_slab, remote) - \
			       offsetof(struct ucma_slab, used)) / sizeof(uint64_t))

/* The cache that owns @s (or &ucma_slab_unowned), without the flag. */
static inline struct ucma_tcache *ucma_slab_owner(const struct ucma_slab *s, int order)
{
	return (struct ucma_tcache *)((uintptr_t)__atomic_load_n(&s->owner, order) &
				      ~UCMA_SLAB_OWNER_FULL);
}

/* Push @s on the list at @head, or take it off: through @next and @prev,
 * under whatever guards that list (see struct ucma_slab). */
static inline void ucma_slab_list_add(struct ucma_slab **head, struct ucma_slab *s)
{
	s->prev = NULL;
	s->next = *head;
	if (*head)
		(*head)->prev = s;
	*head = s;
}

static inline void ucma_slab_list_del(struct ucma_slab **head, struct ucma_slab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		*head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
}

#define UCMA_SLAB_ARENA    0
#define UCMA_SLAB_OVERFLOW 1

/*
 * The index of the object at @p in slab @s, or -1 when @p starts no
 * object.  One multiplication decides both: for n, d < 2^32 and
 * M = ceil(2^64 / d), the high word of n * M is n / d, and d divides n iff
 * the low word is below M (Lemire, Kaser and Kurz, "Faster remainder by
 * direct computation", 2019).  Offsets past the last object give an index
 * of at least nobjs.  @p must lie in the slab's pages (its page metadata
 * said so), so the offset is below 2^32.
 */
static inline int ucma_slab_index(const struct ucma_slab *s, const void *p)
{
	uintptr_t off = (uintptr_t)p - s->base;
	unsigned __int128 prod = (unsigned __int128)off * s->divisor;
	uint64_t idx = (uint64_t)(prod >> 64);

	if (UCMA_UNLIKELY((uint64_t)prod >= s->divisor || idx >= s->nobjs))
		return -1;
	return (int)idx;
}

/* The value of used[w] when every object of word @w is allocated. */
static inline uint64_t ucma_slab_word_full(const struct ucma_slab *s, unsigned w)
{
	return w + 1 == s->nwords ? s->lastfull : ~0ull;
}

/* Is object @idx of @s free: never allocated, freed by its owner, or
 * freed by another thread and not yet merged? */
static inline bool ucma_slab_idx_free(const struct ucma_slab *s, unsigned idx)
{
	uint64_t bit = 1ull << (idx & 63);

	return !(__atomic_load_n(&s->used[idx >> 6], __ATOMIC_RELAXED) & bit) ||
	       (__atomic_load_n(&s->remote[idx >> 6], __ATOMIC_RELAXED) & bit);
}

/* Free objects of @s (relaxed loads: exact for its owner or bin lock
 * holder, a moment's picture for anyone else). */
UCMA_INTERNAL unsigned ucma_slab_nfree(const struct ucma_slab *s);

UCMA_INTERNAL void ucma_slab_init(void);
/* Central bins come in sets (like jemalloc's arenas): a thread takes its
 * new slabs from one set, so threads running at once carve different
 * slabs; a slab goes back to the set it came from. */
UCMA_INTERNAL unsigned ucma_slab_binset_next(void);
/* A slab of class @cls for cache @tc to own, state PARTIAL: a central one
 * of bin set @set (partial first, then empty; its remote frees merged),
 * else a new one.  NULL with ENOMEM.  Called by @tc's thread. */
UCMA_INTERNAL struct ucma_slab *ucma_slab_adopt(unsigned set, unsigned cls,
					       struct ucma_tcache *tc);
/* A thread with cache @tc frees into the central slab @s: adopt it, so
 * that this free and the next ones into it are the owner's (no atomic
 * read-modify-write each), state PARTIAL, its remote frees merged.  False
 * when @s is no longer central.  @s is live (the caller frees one of its
 * objects), so this takes its bin lock directly. */
UCMA_INTERNAL bool ucma_slab_adopt_freed(struct ucma_slab *s, struct ucma_tcache *tc);
/* The owner gives @s up: it becomes central (listed by how much room it
 * has) or, wholly free beyond what the bin keeps, is destroyed. */
UCMA_INTERNAL void ucma_slab_release(struct ucma_slab *s);
/* Destroy @s, which has no allocated object and is on no list: its pages
 * go back, its descriptor to the pool. */
UCMA_INTERNAL void ucma_slab_destroy(struct ucma_slab *s);
/* The owner of @s merges the remote frees into @used.  Returns how many
 * objects that freed; aborts on a block freed both ways (double free). */
UCMA_INTERNAL unsigned ucma_slab_collect(struct ucma_slab *s);
/* One object of class @cls straight from the central bins of set 0 (no
 * cache: thread start-up and exit, bootstrap).  NULL with ENOMEM. */
UCMA_INTERNAL void *ucma_slab_central_alloc(unsigned cls);
/* A remote free into word @w found @s central: list it as partial if it
 * was full, destroy it if it became wholly free.  @s may be stale (see
 * struct ucma_slab); that is checked under the bin lock.  errno is left
 * alone. */
UCMA_INTERNAL void ucma_slab_central_freed(struct ucma_slab *s, unsigned w);
/* The slab holding @p (arena or overflow), or NULL. */
UCMA_INTERNAL struct ucma_slab *ucma_slab_of(const void *p);
/* Is the object at @p free in its slab @s? */
UCMA_INTERNAL bool ucma_slab_obj_is_free(struct ucma_slab *s, const void *p);
/* Bytes of the free objects in slabs that threads own (the registries,
 * under each bin lock). */
UCMA_INTERNAL uint64_t ucma_slab_owned_free_bytes(void);
/* The fork child: every slab owned by a cache other than @self belongs
 * to a thread the child does not have; make it central. */
UCMA_INTERNAL void ucma_slab_release_foreign(struct ucma_tcache *self);
/* Destroy every wholly free central slab; the number of bytes released. */
UCMA_INTERNAL size_t ucma_slab_trim(void);
/* Destroy the wholly free arena slabs of the central bins (the few each
 * bin keeps too): true if any was.  For a request that found no run. */
UCMA_INTERNAL bool ucma_slab_drop_empty(void);
/* Bytes of the wholly free slabs the central bins keep. */
UCMA_INTERNAL size_t ucma_slab_kept_bytes(void);
/* One decay tick (the NORMAL zone's purge): destroy the central bins'
 * wholly free arena slabs kept beyond each bin's few since the tick before
 * the last.  Takes bin locks only if free. */
UCMA_INTERNAL void ucma_slab_decay(void);
/* Bytes of arena pages in slabs (cached empty ones included). */
UCMA_INTERNAL uint64_t ucma_slab_active_bytes(void);
UCMA_INTERNAL void ucma_slab_atfork_prepare(void);
UCMA_INTERNAL void ucma_slab_atfork_parent(void);
UCMA_INTERNAL void ucma_slab_atfork_child(void);

/* Round a large size (above 16 bytes) up to four classes per doubling:
 * growth by realloc then copies O(log n) times, not once per page
 * (malloc.c), and the overflow's kept blocks come in classes (overflow.c). */
static inline size_t ucma_large_round(size_t size)
{
	unsigned lg = 63u - (unsigned)__builtin_clzll((unsigned long long)size - 1);
	size_t delta = (size_t)1 << (lg - 2);

	return (size + delta - 1) & ~(delta - 1);
}

#endif /* UCMA_SLAB_H */
