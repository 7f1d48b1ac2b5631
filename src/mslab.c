/*
 * mslab.c - movable slabs: small movable objects share runs of pages of
 * one size class, so that a run can be emptied by migrating its objects.
 *
 * A slab is a run of UCMA_MSLAB_PAGES pages allocated as movable (CMA zone
 * first).  Its descriptor lives out of band (meta.c) and holds the slot
 * bitmap and, per slot, the index of the handle that owns it: that is the
 * reverse map compaction and alloc-contig-range use to find, from a page,
 * the objects on it.  Every page of the run records the descriptor as its
 * owner (UCMA_OWN_MSLAB), so any address finds its slab with one load.
 *
 * No per-thread caches: a slot is handed out under the class lock, after
 * checking that the slab's pageblock is not isolated and not in the range a
 * caller wants to empty.  A free slot is reused only after the caller has
 * waited for an RCU grace period (migrate.c's deferred frees), because
 * readers may still be looking at the old object.
 *
 * Consolidation (ucma_mslab_consolidate(), called by compaction), as
 * zsmalloc compacts its size classes: per class, the sparsest slabs are
 * emptied into the fullest ones, so that their runs come free.  The slabs
 * being emptied are marked `draining` for the pass: no new object lands in
 * them, and one that becomes empty is destroyed rather than kept for
 * reuse.  The partial list is reordered fullest first, so the moved
 * objects (and later allocations) fill the fullest slabs.  Only slabs whose
 * objects fit in the free slots of the remaining ones are emptied: a pass
 * never creates a slab.
 *
 * Locking: one mutex per size class protects its lists and the bitmaps and
 * handle arrays of its slabs.  It nests outside zone locks (a new slab is
 * allocated with the class lock dropped).  Consolidation passes are
 * serialised by an atomic flag, not a lock: a pass waits for grace periods,
 * and a flag left set by a thread that does not exist in a forked child is
 * simply cleared there.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"

#include "fork.h"
#include "rcu.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define UCMA_MSLAB_PAGES 16u
#define MSLAB_MAX_OBJS ((UCMA_MSLAB_PAGES * 4096u) / 16u)
#define CONSOLIDATE_MAX_SLABS 4096u	/* partial slabs considered per class and pass */
#define CONSOLIDATE_ASYNC_SLABS 8u	/* slabs emptied per class by an ASYNC pass */
_Static_assert(UCMA_MSLAB_PAGES == 1u << UCMA_MSLAB_RUN_ORDER, "compact.c knows the slab size");

static const uint32_t class_sizes[] = {
	16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512,
	640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
};
#define NR_CLASSES UCMA_ARRAY_SIZE(class_sizes)

/*
 * struct ucma_mslab - descriptor of one movable slab (meta.c, out of band).
 *
 * Locking: pfn, cls, nr_objs, obj_size and alloc_size are set before the
 * slab's pages name it as their owner and never change, so they are read
 * without a lock (ucma_mslab_free() finds the class lock through cls).
 * Everything else - the list links and on_partial, nr_free, dead,
 * draining, the bitmap and the handle array - belongs to the class lock.
 * Lifetime: readers reach a descriptor through page metadata without any
 * lock, inside a read-side section; so it is freed only a grace period
 * after dead was set and its pages were freed.  A slab is listed
 * (on_partial or on the full list) from its first slot on; before that
 * only ucma_mslab_alloc() may touch it.
 */
struct ucma_mslab {
	struct ucma_mslab *next, *prev;	/* class list (partial or full) */
	uint32_t pfn;			/* first page of the run */
	uint16_t cls;			/* index into class_sizes */
	uint16_t nr_objs;
	uint16_t nr_free;
	uint8_t on_partial;		/* on the partial list (not: full, or not yet listed) */
	uint8_t dead;			/* destroyed; descriptor freed after a grace period */
	uint8_t draining;		/* being emptied by consolidation: no new objects */
	uint32_t obj_size;
	uint32_t alloc_size;		/* bytes of this descriptor */
	uint64_t *bitmap;		/* nr_objs bits, 1 = allocated */
	uint32_t *handles;		/* nr_objs handle indices */
};

struct mslab_class {
	pthread_mutex_t lock;
	struct ucma_mslab *partial;	/* slabs with free slots */
	struct ucma_mslab *full;
	unsigned nr_empty;		/* empty slabs kept on the partial list */
};

/* The locks exist from the start, so the fork handlers (fork.c) can take
 * them whether or not a movable slab was ever made. */
static struct mslab_class UCMA_FORK_LOCK classes[NR_CLASSES] = {
	[0 ... NR_CLASSES - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER },
};
static _Atomic int consolidating;	/* a consolidation pass runs */
static _Atomic bool classes_ready;	/* a movable slab may exist */

void ucma_mslab_fork_prepare(void)
{
	for (size_t i = 0; i < NR_CLASSES; i++)
		ucma_mutex_lock(&classes[i].lock);
}

void ucma_mslab_fork_parent(void)
{
	for (size_t i = NR_CLASSES; i-- > 0;)
		ucma_mutex_unlock(&classes[i].lock);
}

static void undrain_class(struct mslab_class *c);

/* In the child, a consolidation pass of another thread never finishes:
 * forget it and its marks. */
void ucma_mslab_fork_child(void)
{
	for (size_t i = 0; i < NR_CLASSES; i++)
		undrain_class(&classes[i]);
	atomic_store_explicit(&consolidating, 0, memory_order_relaxed);
	ucma_mslab_fork_parent();
}

static int class_of(size_t size)
{
	for (size_t i = 0; i < NR_CLASSES; i++)
		if (size <= class_sizes[i])
			return (int)i;
	return -1;
}

size_t ucma_mslab_class_size(size_t size)
{
	int c = class_of(size ? size : 1);

	return c < 0 ? 0 : class_sizes[c];
}

static void list_del(struct ucma_mslab **head, struct ucma_mslab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		*head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
}

static void list_add(struct ucma_mslab **head, struct ucma_mslab *s)
{
	s->prev = NULL;
	s->next = *head;
	if (*head)
		(*head)->prev = s;
	*head = s;
}

/* Can a new object go into slab @s?  (class lock held) */
static bool slab_usable(const struct ucma_arena *a, const struct ucma_mslab *s, bool no_cma,
			uint32_t avoid_start, uint32_t avoid_end)
{
	const struct ucma_pageblock *pb = &a->blocks[s->pfn >> UCMA_PAGEBLOCK_ORDER];

	if (__atomic_load_n(&pb->isolate_count, __ATOMIC_ACQUIRE) || s->draining)
		return false;
	if (s->pfn < avoid_end && s->pfn + UCMA_MSLAB_PAGES > avoid_start)
		return false;
	if (no_cma && s->pfn >= a->zones[UCMA_ZONE_CMA].start_pfn)
		return false;
	return true;
}

static void *slot_take(struct ucma_arena *a, struct mslab_class *c, struct ucma_mslab *s,
		       uint32_t index)
{
	for (uint32_t w = 0; w < (s->nr_objs + 63u) / 64u; w++) {
		uint64_t freebits = ~s->bitmap[w];
		uint32_t slot;

		if (w == (s->nr_objs - 1u) / 64u && s->nr_objs % 64u)
			freebits &= (1ull << (s->nr_objs % 64u)) - 1;
		if (!freebits)
			continue;
		slot = w * 64u + (uint32_t)__builtin_ctzll(freebits);
		s->bitmap[w] |= 1ull << (slot % 64u);
		s->handles[slot] = index;
		if (s->nr_free-- == s->nr_objs)
			c->nr_empty--;
		if (s->nr_free == 0) {
			list_del(&c->partial, s);
			s->on_partial = 0;
			list_add(&c->full, s);
		}
		return (char *)ucma_pfn_to_addr(a, s->pfn) + (size_t)slot * s->obj_size;
	}
	ucma_fatal("internal error: movable slab %p has no free slot", (void *)s);
}

static struct ucma_mslab *slab_new(struct ucma_arena *a, int cls, bool no_cma,
				   const struct ucma_migrate_target *t, unsigned gfp)
{
	uint32_t nr_objs = (UCMA_MSLAB_PAGES << UCMA_PAGE_SHIFT) / class_sizes[cls];
	size_t words = (nr_objs + 63u) / 64u;
	size_t bytes = sizeof(struct ucma_mslab) + words * 8 + (size_t)nr_objs * 4;
	struct ucma_mslab *s;
	uint32_t pfn;

	pfn = ucma_pages_alloc_avoid(a, UCMA_MSLAB_PAGES,
				     gfp | UCMA_GFP_MOVABLE | (no_cma ? UCMA_GFP_NO_CMA : 0),
				     t->avoid_start, t->avoid_end, t->batch);
	if (pfn == UCMA_PFN_NONE)
		return NULL;
	s = ucma_meta_alloc(bytes);
	if (!s) {
		ucma_pages_free(a, pfn);
		return NULL;
	}
	s->pfn = pfn;
	s->cls = (uint16_t)cls;
	s->nr_objs = (uint16_t)nr_objs;
	s->nr_free = (uint16_t)nr_objs;
	s->obj_size = class_sizes[cls];
	s->alloc_size = (uint32_t)bytes;
	s->bitmap = (uint64_t *)(s + 1);
	s->handles = (uint32_t *)(s->bitmap + words);
	ucma_run_set_owner(a, pfn, UCMA_OWN_MSLAB, (uint64_t)(uintptr_t)s);
	return s;
}

/*
 * The pages go back at once (the caller waited for readers of the
 * objects); the descriptor only after a grace period, because a scanner
 * may have found it through the page metadata inside a read-side section.
 */
static void slab_destroy(struct ucma_arena *a, struct ucma_mslab *s)
{
	ucma_pages_free(a, s->pfn);
	ucma_defer_meta_free(s, s->alloc_size);
}

void *ucma_mslab_alloc(size_t size, uint32_t index, const struct ucma_migrate_target *t,
		       unsigned gfp)
{
	struct ucma_arena *a = ucma_arena_get();
	int cls = class_of(size ? size : 1);
	uint32_t avoid_start = t->avoid_start, avoid_end = t->avoid_end;
	bool no_cma = t->no_cma;
	struct mslab_class *c;
	struct ucma_mslab *s, *fresh;

	if (!a || cls < 0)
		return NULL;
	/* Without lending, movable objects stay out of the CMA areas. */
	no_cma |= ucma_opt.cma_policy == UCMA_CMA_RESERVED;
	if (UCMA_UNLIKELY(!atomic_load_explicit(&classes_ready, memory_order_relaxed)))
		atomic_store_explicit(&classes_ready, true, memory_order_release);
	c = &classes[cls];
	ucma_mutex_lock(&c->lock);
	for (s = c->partial; s; s = s->next) {
		if (slab_usable(a, s, no_cma, avoid_start, avoid_end)) {
			void *p = slot_take(a, c, s, index);

			ucma_mutex_unlock(&c->lock);
			return p;
		}
	}
	ucma_mutex_unlock(&c->lock);

	fresh = slab_new(a, cls, no_cma, t, gfp);
	if (!fresh)
		return NULL;
	if (fresh->pfn < avoid_end && fresh->pfn + UCMA_MSLAB_PAGES > avoid_start) {
		slab_destroy(a, fresh);
		errno = ENOMEM;
		return NULL;
	}
	ucma_mutex_lock(&c->lock);
	list_add(&c->partial, fresh);
	fresh->on_partial = 1;
	c->nr_empty++;
	{
		void *p = slot_take(a, c, fresh, index);

		ucma_mutex_unlock(&c->lock);
		return p;
	}
}

void ucma_mslab_free(void *addr)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t pfn = ucma_addr_to_pfn(a, addr);
	struct ucma_mslab *s = (struct ucma_mslab *)(uintptr_t)UCMA_PG_GET(&a->pages[pfn], owner);
	struct mslab_class *c = &classes[s->cls];
	size_t off = (size_t)((char *)addr - (char *)ucma_pfn_to_addr(a, s->pfn));
	uint32_t slot = (uint32_t)(off / s->obj_size);
	bool destroy = false;

	ucma_mutex_lock(&c->lock);
	if (off % s->obj_size || slot >= s->nr_objs ||
	    !(s->bitmap[slot / 64u] & (1ull << (slot % 64u))))
		ucma_fatal("internal error: movable slot %p is not allocated", addr);
	s->bitmap[slot / 64u] &= ~(1ull << (slot % 64u));
	s->handles[slot] = 0;
	if (s->nr_free++ == 0) {
		list_del(&c->full, s);
		list_add(&c->partial, s);
		s->on_partial = 1;
	}
	if (s->nr_free == s->nr_objs) {
		/* Keep one empty slab per class to absorb churn, unless its
		 * pageblock or the slab itself is being emptied. */
		bool isolated = __atomic_load_n(&a->blocks[s->pfn >> UCMA_PAGEBLOCK_ORDER]
							  .isolate_count,
						__ATOMIC_ACQUIRE);

		if (isolated || s->draining || c->nr_empty >= 1) {
			list_del(&c->partial, s);
			s->dead = 1;
			destroy = true;
		} else {
			c->nr_empty++;
		}
	}
	ucma_mutex_unlock(&c->lock);
	if (destroy)
		slab_destroy(a, s);
}

uint32_t ucma_mslab_slot_handle(struct ucma_mslab *s, void *addr)
{
	struct ucma_arena *a = ucma_arena_peek();
	struct mslab_class *c = &classes[s->cls];
	size_t off = (size_t)((char *)addr - (char *)ucma_pfn_to_addr(a, s->pfn));
	uint32_t slot = (uint32_t)(off / s->obj_size), index = 0;

	ucma_mutex_lock(&c->lock);
	if (!s->dead && slot < s->nr_objs && (s->bitmap[slot / 64u] & (1ull << (slot % 64u))))
		index = s->handles[slot];
	ucma_mutex_unlock(&c->lock);
	return index;
}

/*
 * Snapshot the live slots of @s under the class lock: their handle
 * indexes and addresses, in *@out (free it with ucma_mslab_slots_free()).
 * The caller found @s inside an RCU read-side section, which keeps the
 * descriptor alive; the snapshot needs no descriptor, so the caller may
 * leave the section before walking it.  A slab destroyed meanwhile has no
 * live slots.  Returns the number of slots, or -1 when there is no memory
 * for the snapshot.
 */
int ucma_mslab_live_slots(struct ucma_mslab *s, struct ucma_mslab_slot **out)
{
	struct ucma_arena *a = ucma_arena_peek();
	struct mslab_class *c = &classes[s->cls];
	struct ucma_mslab_slot *v;
	char *base = ucma_pfn_to_addr(a, s->pfn);
	bool destroy = false;
	int n = 0;

	v = ucma_meta_alloc_uninit(sizeof(*v) * MSLAB_MAX_OBJS);
	*out = v;
	if (!v)
		return -1;
	ucma_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < s->nr_objs && !s->dead; i++) {
		if (s->bitmap[i / 64u] & (1ull << (i % 64u))) {
			v[n].index = s->handles[i];
			v[n++].addr = base + (size_t)i * s->obj_size;
		}
	}
	/*
	 * The empty slab kept for reuse (ucma_mslab_free) in a pageblock
	 * being emptied: nothing else would ever free it, and
	 * alloc-contig-range would wait for it in vain.  Its slots were
	 * freed after a grace period, so no reader is left on its pages.
	 * Only a slab on the partial list: a new slab is found through its
	 * pages (their owner is set when it is made) before ucma_mslab_alloc()
	 * lists it and takes its first slot; destroying that one unlisted
	 * emptied the class's partial list and handed out a slot of a
	 * destroyed slab.
	 */
	if (!s->dead && s->on_partial && s->nr_free == s->nr_objs &&
	    __atomic_load_n(&a->blocks[s->pfn >> UCMA_PAGEBLOCK_ORDER].isolate_count,
			    __ATOMIC_ACQUIRE)) {
		list_del(&c->partial, s);
		s->on_partial = 0;
		s->dead = 1;
		c->nr_empty--;
		destroy = true;
	}
	ucma_mutex_unlock(&c->lock);
	if (destroy)
		slab_destroy(a, s);
	return n;
}

void ucma_mslab_slots_free(struct ucma_mslab_slot *v)
{
	if (v)
		ucma_meta_free(v, sizeof(*v) * MSLAB_MAX_OBJS);
}

/*
 * Call @fn for each live slot of @s (a snapshot, taken under the class
 * lock; @fn runs without it, since migration allocates and may need this
 * very class lock).  Stops at the first non-zero return of @fn and
 * returns it.
 */
int ucma_mslab_for_each(struct ucma_mslab *s, int (*fn)(uint32_t index, void *addr, void *arg),
			void *arg)
{
	struct ucma_mslab_slot *v;
	int n = ucma_mslab_live_slots(s, &v), rc = 0;

	if (n < 0)
		return UCMA_MIGRATE_NOMEM;
	for (int i = 0; i < n && rc == 0; i++)
		rc = fn(v[i].index, v[i].addr, arg);
	ucma_mslab_slots_free(v);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Consolidation                                                             */
/* ------------------------------------------------------------------------ */

/* The pass is over: slabs that kept objects (pinned) take new ones again. */
static void undrain_class(struct mslab_class *c)
{
	for (struct ucma_mslab *s = c->partial; s; s = s->next)
		s->draining = 0;
	for (struct ucma_mslab *s = c->full; s; s = s->next)
		s->draining = 0;
}

static int by_fullness(const void *x, const void *y)
{
	const struct ucma_mslab *s = *(struct ucma_mslab *const *)x;
	const struct ucma_mslab *t = *(struct ucma_mslab *const *)y;

	return (s->nr_free > t->nr_free) - (s->nr_free < t->nr_free);
}

/*
 * Choose the slabs of class @c to empty and mark them draining; their pfns
 * go to @src.  The slabs are sorted fullest first; the sparsest are taken
 * as long as their live objects fit in the free slots of the slabs not
 * taken.  Then the partial list is rebuilt with the targets fullest first,
 * so the allocator's first fit fills them in that order.  Class lock held.
 */
static unsigned plan_class(struct mslab_class *c, struct ucma_mslab **arr, uint32_t *src,
			   unsigned max_src)
{
	unsigned n = 0, nsrc = 0, total = 0;
	uint64_t avail = 0, need = 0;

	for (struct ucma_mslab *s = c->partial; s; s = s->next, total++) {
		if (n < CONSOLIDATE_MAX_SLABS && !s->dead) {
			arr[n++] = s;
			avail += s->nr_free;
		}
	}
	if (n < 2)
		return 0;
	qsort(arr, n, sizeof(*arr), by_fullness);
	for (unsigned k = n - 1; k > 0 && nsrc < max_src; k--) {
		struct ucma_mslab *s = arr[k];
		unsigned live = s->nr_objs - s->nr_free;

		avail -= s->nr_free;	/* no longer a target */
		if (live == 0)
			continue;	/* the empty slab kept for churn */
		if (need + live > avail)
			break;
		need += live;
		s->draining = 1;
		src[nsrc++] = s->pfn;
	}
	if (nsrc && n == total) {
		c->partial = NULL;
		for (unsigned i = n; i-- > 0;)
			if (arr[i]->draining)
				list_add(&c->partial, arr[i]);
		for (unsigned i = n; i-- > 0;)
			if (!arr[i]->draining)
				list_add(&c->partial, arr[i]);
	}
	return nsrc;
}

/**
 * ucma_mslab_consolidate() - empty sparse movable slabs into fuller ones of
 * the same size class, so that their runs of pages come free.
 * @prio: enum ucma_compact_priority.  ASYNC empties at most a few slabs per
 *        class and does not wait for pinned objects; SYNC_FULL waits
 *        briefly for pins.
 *
 * Objects are moved with ucma_migrate_run(), slab by slab, found again
 * through the page metadata (a slab may have died since it was chosen).
 * Returns after a grace period, when the emptied slabs are free.
 * Return: the number of slabs emptied.
 */
unsigned ucma_mslab_consolidate(int prio)
{
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_migrate_target t = { .wait_pins = prio == UCMA_COMPACT_SYNC_FULL };
	unsigned max_src = prio == UCMA_COMPACT_ASYNC ? CONSOLIDATE_ASYNC_SLABS
						       : CONSOLIDATE_MAX_SLABS;
	struct ucma_mslab **arr;
	uint32_t *src;
	unsigned emptied = 0;
	bool moved = false;

	/* Before the first movable slab there is nothing to do. */
	if (!a || !ucma_rcu_can_wait() ||
	    !atomic_load_explicit(&classes_ready, memory_order_acquire))
		return 0;
	if (atomic_exchange_explicit(&consolidating, 1, memory_order_acquire))
		return 0;	/* another thread consolidates */
	arr = ucma_meta_alloc(CONSOLIDATE_MAX_SLABS * (sizeof(*arr) + sizeof(*src)));
	if (!arr)
		goto out;
	src = (uint32_t *)(arr + CONSOLIDATE_MAX_SLABS);
	for (size_t ci = 0; ci < NR_CLASSES; ci++) {
		struct mslab_class *c = &classes[ci];
		unsigned nsrc;

		ucma_mutex_lock(&c->lock);
		nsrc = plan_class(c, arr, src, max_src);
		ucma_mutex_unlock(&c->lock);
		for (unsigned i = 0; i < nsrc; i++) {
			unsigned pinned = 0;

			if (ucma_migrate_run(a, src[i], &t, &pinned, NULL) == UCMA_MIGRATE_OK && !pinned)
				emptied++;
		}
		moved |= nsrc > 0;
	}
	ucma_meta_free(arr, CONSOLIDATE_MAX_SLABS * (sizeof(*arr) + sizeof(*src)));
	if (moved) {
		/* The old copies are freed after readers leave; the emptied
		 * slabs, still draining, are destroyed as their last slot goes. */
		ucma_defer_drain();
		for (size_t ci = 0; ci < NR_CLASSES; ci++) {
			ucma_mutex_lock(&classes[ci].lock);
			undrain_class(&classes[ci]);
			ucma_mutex_unlock(&classes[ci].lock);
		}
	}
out:
	atomic_store_explicit(&consolidating, 0, memory_order_release);
	return emptied;
}
