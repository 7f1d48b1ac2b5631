/*
 * migrate.c - moving movable objects, and freeing their old copies only
 * after every reader has left.
 *
 * Migration of one object (DESIGN.md, "Handles and migration"):
 *   1. compare-and-swap the entry state from 0 to MIGRATING; a pinned (or
 *      otherwise busy) object is not moved: pgmigrate_fail;
 *   2. allocate the new copy where the caller allows (struct
 *      ucma_migrate_target), copy (copy.c: around the caches, large
 *      objects with helper threads); fresh pages for the copy are mapped
 *      in one call first (zone.c, UCMA_GFP_POPULATE), and as far ahead
 *      as the caller says more copies follow (struct
 *      ucma_populate_batch);
 *   3. publish the new address (handle.h: a release store inside the
 *      entry's write section);
 *   4. clear the state and wake pinners that sleep on it;
 *   5. queue the old copy; it is freed after an RCU grace period, so a
 *      reader inside ucma_read_lock() that loaded the old address keeps
 *      reading valid (and unchanged: writers need a pin) memory.
 *
 * Deferred frees: ucma_defer_free() queues; ucma_defer_drain() waits for a
 * grace period and frees what was queued before it started.  Drains are
 * serialised so that a caller whose result depends on the space (emptying
 * a run, compaction, a long-term pin) finds it free when the drain returns.
 * A drain from inside a read-side section would wait for itself: EDEADLK.
 *
 * Locking: queue_lock protects the queue; drain_lock serialises drains and
 * is held across the grace period (readers never take it).  Neither is
 * held while migrating.  A fork takes both (fork.c, second stage), unless
 * it is made inside a read-side section: its child keeps what it would
 * free after a grace period instead (rcu.h, degraded).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "copy.h"
#include "fork.h"
#include "handle.h"
#include "rcu.h"

#define DEFER_AUTO_DRAIN 1024	/* queue length that triggers a drain on free */
#define PIN_WAIT_NS (20ull * 1000 * 1000)

struct deferred {
	struct deferred *next;
	void *ptr;
	size_t meta_size;	/* 0: object storage in the arena; else metadata */
};

static pthread_mutex_t UCMA_FORK_LOCK queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t UCMA_FORK_LOCK drain_lock = PTHREAD_MUTEX_INITIALIZER;
static struct deferred *queue;
static unsigned long queue_len;

static void defer_push(void *ptr, size_t meta_size)
{
	struct deferred *d;
	unsigned long len;

	/* No grace period will ever end in this process (rcu.h): keep it. */
	if (UCMA_UNLIKELY(ucma_rcu_degraded()))
		return;
	d = ucma_meta_alloc(sizeof(*d));
	if (!d) {
		/*
		 * No memory to remember it: waiting for readers here is the
		 * only safe choice; where that is impossible, leak it rather
		 * than free memory a reader may hold.
		 */
		if (ucma_rcu_synchronize() == 0) {
			if (meta_size)
				ucma_meta_free(ptr, meta_size);
			else
				ucma_movable_storage_free(ptr);
		}
		return;
	}
	d->ptr = ptr;
	d->meta_size = meta_size;
	ucma_mutex_lock(&queue_lock);
	d->next = queue;
	queue = d;
	len = ++queue_len;
	ucma_mutex_unlock(&queue_lock);
	if (len >= DEFER_AUTO_DRAIN && ucma_rcu_can_wait() &&
	    ucma_mutex_trylock(&drain_lock) == 0) {
		ucma_mutex_unlock(&drain_lock);
		ucma_defer_drain();
	}
}

void ucma_defer_free(void *addr)
{
	defer_push(addr, 0);
}

void ucma_defer_meta_free(void *p, size_t size)
{
	defer_push(p, size);
}

int ucma_defer_drain(void)
{
	struct deferred *list, *next;

	if (!ucma_rcu_can_wait()) {
		errno = EDEADLK;
		return -1;
	}
	ucma_mutex_lock(&drain_lock);
	ucma_mutex_lock(&queue_lock);
	list = queue;
	queue = NULL;
	queue_len = 0;
	ucma_mutex_unlock(&queue_lock);
	if (list) {
		ucma_rcu_synchronize();
		for (; list; list = next) {
			next = list->next;
			if (list->meta_size)
				ucma_meta_free(list->ptr, list->meta_size);
			else
				ucma_movable_storage_free(list->ptr);
			ucma_meta_free(list, sizeof(*list));
		}
	}
	ucma_mutex_unlock(&drain_lock);
	return 0;
}

void ucma_defer_fork_prepare(void)
{
	ucma_mutex_lock(&drain_lock);
	ucma_mutex_lock(&queue_lock);
}

void ucma_defer_fork_parent(void)
{
	ucma_mutex_unlock(&queue_lock);
	ucma_mutex_unlock(&drain_lock);
}

void ucma_defer_fork_child(void)
{
	ucma_defer_fork_parent();
}

/*
 * A fork made inside a read-side section took neither lock: a thread
 * that does not exist here may hold them, and the queue may be half
 * taken.  This child never drains (rcu.h): forget the queue (what it
 * held stays allocated) and make the locks anew.
 */
void ucma_defer_fork_child_unprepared(void)
{
	pthread_mutex_init(&queue_lock, NULL);
	pthread_mutex_init(&drain_lock, NULL);
	queue = NULL;
	queue_len = 0;
}

/* ------------------------------------------------------------------------ */
/* Storage of movable objects                                                */
/* ------------------------------------------------------------------------ */

void *ucma_movable_storage_alloc(size_t size, uint32_t index, const struct ucma_migrate_target *t)
{
	static const struct ucma_migrate_target anywhere = { 0 };
	struct ucma_arena *a = ucma_arena_get();
	uint32_t npages, pfn;
	unsigned gfp = UCMA_GFP_MOVABLE;

	if (!a)
		return NULL;
	/* A target is a migration, whose copy writes the whole object at
	 * once: fresh pages are better mapped in one call (zone.c). */
	if (t)
		gfp |= UCMA_GFP_POPULATE;
	else
		t = &anywhere;
	if (size <= UCMA_MSLAB_MAX_SIZE)
		return ucma_mslab_alloc(size, index, t, gfp);
	npages = (uint32_t)((size + UCMA_PAGE_SIZE - 1) >> UCMA_PAGE_SHIFT);
	/* Searched outside the avoided range (zone.c), not allocated and checked. */
	pfn = ucma_pages_alloc_avoid(a, npages, gfp | (t->no_cma ? UCMA_GFP_NO_CMA : 0),
				     t->avoid_start, t->avoid_end, t->batch);
	if (pfn == UCMA_PFN_NONE)
		return NULL;
	ucma_run_set_owner(a, pfn, UCMA_OWN_MOVABLE, index);
	return ucma_pfn_to_addr(a, pfn);
}

void ucma_movable_storage_free(void *addr)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t pfn = ucma_addr_to_pfn(a, addr);

	switch (__atomic_load_n(&a->pages[pfn].owner_type, __ATOMIC_ACQUIRE)) {
	case UCMA_OWN_MSLAB:
		ucma_mslab_free(addr);
		break;
	case UCMA_OWN_MOVABLE:
		ucma_pages_free(a, ucma_run_head(a, pfn));
		break;
	default:
		ucma_fatal("internal error: %p is no movable storage (owner %u)", addr,
			   a->pages[pfn].owner_type);
	}
}

/* ------------------------------------------------------------------------ */
/* Migration                                                                 */
/* ------------------------------------------------------------------------ */

/* Take the object for moving: state 0 -> MIGRATING, waiting for pins if
 * asked (the hold itself never waits: it is taken only when free).
 * Returns true on success. */
static bool grab(struct ucma_hentry *e, bool wait_pins)
{
	uint64_t deadline = 0;

	for (;;) {
		if (ucma_entry_grab(e))
			return true;
		if (!wait_pins)
			return false;
		if (!deadline)
			deadline = ucma_os_now_ns() + PIN_WAIT_NS;
		else if (ucma_os_now_ns() > deadline)
			return false;
		{
			struct timespec ts = { 0, 100000 };	/* 100 us */
			int cancel;

			/* Not a cancellation point: the caller is half way
			 * through a migration. */
			pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
			nanosleep(&ts, NULL);
			pthread_setcancelstate(cancel, NULL);
		}
	}
}

int ucma_migrate_object(uint32_t index, void *old_addr, const struct ucma_migrate_target *t)
{
	struct ucma_hentry *e = ucma_handle_entry(index);
	uint32_t gen;
	void *new_addr;
	size_t size;

	if (!e)
		return UCMA_MIGRATE_GONE;
	gen = atomic_load_explicit(&e->gen, memory_order_acquire);
	if (!(gen & 1) || __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE) != old_addr)
		return UCMA_MIGRATE_GONE;
	/* The helpers before the hold (copy.h): starting them allocates. */
	ucma_copy_prepare(__atomic_load_n(&e->size, __ATOMIC_RELAXED),
			  t->copy_split_min ? t->copy_split_min : UCMA_COPY_SPLIT_MIN);
	if (!grab(e, t->wait_pins)) {
		ucma_count(UCMA_STAT_PGMIGRATE_FAIL, 1);
		return UCMA_MIGRATE_PINNED;
	}
	/* Freed, reused or moved between the first look and the grab? */
	if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen ||
	    __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE) != old_addr) {
		ucma_entry_release(e);
		return UCMA_MIGRATE_GONE;
	}
	size = e->size;
	new_addr = ucma_movable_storage_alloc(size, index, t);
	if (!new_addr) {
		ucma_entry_release(e);
		ucma_count(UCMA_STAT_PGMIGRATE_FAIL, 1);
		return UCMA_MIGRATE_NOMEM;
	}
	ucma_copy_object(new_addr, old_addr, size,
			 t->copy_split_min ? t->copy_split_min : UCMA_COPY_SPLIT_MIN);
	ucma_entry_set(e, new_addr, size);
	ucma_entry_release(e);
	ucma_defer_free(old_addr);
	ucma_count(UCMA_STAT_PGMIGRATE_SUCCESS, 1);
	return UCMA_MIGRATE_OK;
}

struct run_ctx {
	const struct ucma_migrate_target *t;
	unsigned pinned;
	unsigned moved;
	int worst;
};

static int migrate_slot(uint32_t index, void *addr, void *arg)
{
	struct run_ctx *rc = arg;
	int r = ucma_migrate_object(index, addr, rc->t);

	if (r == UCMA_MIGRATE_PINNED)
		rc->pinned++;
	if (r == UCMA_MIGRATE_OK)
		rc->moved++;
	if (r == UCMA_MIGRATE_NOMEM)
		return r;	/* no room anywhere: stop early */
	if (r > rc->worst && r != UCMA_MIGRATE_GONE)
		rc->worst = r;
	return 0;
}

/*
 * ucma_migrate_run() - move every movable object out of the allocated run
 * whose head is @head: one object, or every live object of a movable slab.
 * Returns UCMA_MIGRATE_OK when nothing movable is left in it (apart from
 * what waits for a grace period), else the reason; *@pinned counts objects
 * that were pinned, *@moved (may be NULL) those moved.  Runs that are not
 * movable are UCMA_MIGRATE_PINNED.
 */
int ucma_migrate_run(struct ucma_arena *a, uint32_t head, const struct ucma_migrate_target *t,
		     unsigned *pinned, unsigned *moved)
{
	struct run_ctx rc = { t, 0, 0, UCMA_MIGRATE_OK };
	struct ucma_page *p = &a->pages[head];
	uint8_t type;
	uint64_t owner;
	int r;

	/*
	 * The page's metadata changes under the zone lock while this runs
	 * without it: atomic loads, and a section that keeps a movable
	 * slab's descriptor alive (it is freed after a grace period).
	 */
	ucma_rcu_read_lock();
	type = __atomic_load_n(&p->owner_type, __ATOMIC_ACQUIRE);
	owner = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
	if (__atomic_load_n(&p->kind, __ATOMIC_RELAXED) != UCMA_PK_RUN) {
		ucma_rcu_read_unlock();
		return UCMA_MIGRATE_GONE;
	}
	switch (type) {
	case UCMA_OWN_MOVABLE:
		ucma_rcu_read_unlock();
		r = ucma_migrate_object((uint32_t)owner, ucma_pfn_to_addr(a, head), t);
		if (r == UCMA_MIGRATE_PINNED)
			rc.pinned++;
		if (pinned)
			*pinned += rc.pinned;
		if (moved && r == UCMA_MIGRATE_OK)
			(*moved)++;
		return r == UCMA_MIGRATE_GONE ? UCMA_MIGRATE_OK : r;
	case UCMA_OWN_MSLAB: {
		struct ucma_mslab_slot *v;
		int n = ucma_mslab_live_slots((struct ucma_mslab *)(uintptr_t)owner, &v);

		/*
		 * Migrate outside the read-side section: moving a slab's
		 * objects takes long, and a grace period that finds a reader
		 * inside a section waits (liburcu-bp polls every 10 ms).
		 * Each object is checked against its handle as it is moved.
		 */
		ucma_rcu_read_unlock();
		r = n < 0 ? UCMA_MIGRATE_NOMEM : 0;
		for (int i = 0; i < n && r == 0; i++)
			r = migrate_slot(v[i].index, v[i].addr, &rc);
		ucma_mslab_slots_free(v);
		if (pinned)
			*pinned += rc.pinned;
		if (moved)
			*moved += rc.moved;
		return r ? r : rc.worst;
	}
	default:
		ucma_rcu_read_unlock();
		return UCMA_MIGRATE_PINNED;	/* unmovable: cannot be emptied */
	}
}

static int slot_pinned(uint32_t index, void *addr, void *arg)
{
	struct ucma_hentry *e = ucma_handle_entry(index);

	(void)addr;
	(void)arg;
	return e && (atomic_load_explicit(&e->state, memory_order_relaxed) &
		     (UCMA_HS_PINS | UCMA_HS_MIGRATING));
}

/*
 * ucma_run_pinned() - does the allocated run at @head hold an object that
 * cannot be moved right now: pinned, held by another mover, or a run that
 * is not movable at all?  A look, not a promise (a pin may come or go the
 * next moment): callers use it to skip work that would be in vain.  A
 * slab's descriptor is alive only inside a read-side section, so it is
 * looked up again there, as ucma_migrate_run() does.
 */
bool ucma_run_pinned(struct ucma_arena *a, uint32_t head)
{
	const struct ucma_page *p = &a->pages[head];
	bool pinned = true;
	uint8_t type;

	ucma_rcu_read_lock();
	type = __atomic_load_n(&p->owner_type, __ATOMIC_ACQUIRE);
	if (UCMA_PG_GET(p, kind) != UCMA_PK_RUN)
		pinned = false;	/* freed meanwhile: nothing to move */
	else if (type == UCMA_OWN_MOVABLE)
		pinned = slot_pinned((uint32_t)UCMA_PG_GET(p, owner), NULL, NULL);
	else if (type == UCMA_OWN_MSLAB)
		pinned = ucma_mslab_for_each((struct ucma_mslab *)(uintptr_t)UCMA_PG_GET(p, owner),
					     slot_pinned, NULL) != 0;
	ucma_rcu_read_unlock();
	return pinned;
}
