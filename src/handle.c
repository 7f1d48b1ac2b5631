/*
 * handle.c - the handle table and the movable-object API: ucma_halloc,
 * ucma_hfree, ucma_hrealloc, ucma_hsize, ucma_pin, ucma_unpin and the RCU
 * read side (ucma_read_lock, ucma_deref, ucma_read_unlock).
 *
 * The table is two-level: a directory of chunk pointers reserved once in
 * static storage (no reallocation, so no reader ever sees the table move)
 * and chunks of 65536 entries mapped lazily.  A handle is
 * (generation << 32) | index; index 0 is never used, so handle 0 is never
 * valid.  An entry's generation is odd while live and even while free; an
 * entry whose generation would wrap is retired for good, so a stale handle
 * is always detected and never silently used.
 *
 * Pins and migration share the entry's state word (see struct
 * ucma_hentry): ucma_pin() adds one, takes it back if MIGRATING was set
 * and then sleeps on the word (futex); the mover and ucma_hfree() swap 0
 * for MIGRATING.  So a pinned object is never moved or freed, and a pin never
 * sees an object half-moved.
 *
 * Readers without a pin use RCU (rcu.c).  ucma_deref() and
 * ucma_deref_size() read generation, address and size as one snapshot
 * (struct ucma_hentry's sequence count), so a handle freed, reused or
 * resized concurrently yields EINVAL or a consistent old or new object,
 * never the new size with the old address.
 *
 * An entry is published only once its storage exists: ucma_halloc()
 * allocates (and drains and compacts if it must) while the entry is still
 * free, and holds it exclusively only for the few stores that publish it.
 * No exclusive hold spans a wait, so ucma_pin() inside a read-side
 * section, which sleeps while an entry is held, cannot wait for a grace
 * period.
 *
 * Locking: table_lock protects the free list and the high-water mark;
 * entries are otherwise changed only with atomics (handle.h).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fork.h"
#include "handle.h"
#include "rcu.h"

#define CHUNK_SHIFT 16
#define CHUNK_ENTRIES (1u << CHUNK_SHIFT)
#define DIR_ENTRIES (1u << 14)		/* 2^30 handles at most */
#define GEN_RETIRED 0u			/* even, and never reused */

static struct ucma_hentry *dir[DIR_ENTRIES];
static pthread_mutex_t UCMA_FORK_LOCK table_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_index = 1;		/* high-water mark */
static uint32_t free_head;		/* 0 = empty */
static _Atomic uint64_t live_handles, live_bytes;

/* ------------------------------------------------------------------------ */
/* Exclusive holds, and fork                                                 */
/* ------------------------------------------------------------------------ */

/*
 * A fork waits for every exclusive hold to end (fork.c): a child must not
 * inherit an entry held by a thread it does not have, or its pins and
 * frees of that handle would wait forever.  ucma_entry_grab() swaps the
 * state first and then looks at fork_pending; the fork handler sets
 * fork_pending first and then looks at every entry's state.  Both are
 * sequentially consistent, so either the grab sees the fork coming (and
 * backs off until it is over) or the fork sees the hold (and waits for
 * it): the grab pays one load of a word that changes only at fork.
 */
static _Atomic uint32_t UCMA_FORK_LOCK fork_pending;	/* futex word: 1 while a fork prepares */

#define FORK_HOLD_WAIT_NS (2ull * 1000 * 1000 * 1000)

/* This fork's wait for holds gave up on one (table lock held). */
static bool fork_hold_stuck;

bool ucma_entry_grab(struct ucma_hentry *e)
{
	for (;;) {
		uint32_t idle = 0;

		if (!atomic_compare_exchange_strong(&e->state, &idle, UCMA_HS_MIGRATING))
			return false;
		if (UCMA_LIKELY(!atomic_load(&fork_pending)))
			return true;
		/* A fork is waiting for holds to end: let it go first. */
		ucma_entry_release(e);
		while (atomic_load(&fork_pending)) {
			struct timespec ts = { 0, 10 * 1000 * 1000 };

			ucma_futex_wait(&fork_pending, 1, &ts);
		}
	}
}

void ucma_entry_release(struct ucma_hentry *e)
{
	/* The flags only: pinners that found MIGRATING may have added one
	 * each, which they take back (handle.h). */
	uint32_t old = atomic_fetch_and_explicit(&e->state, ~(UCMA_HS_MIGRATING | UCMA_HS_WAITERS),
						 memory_order_release);

	if (old & UCMA_HS_WAITERS)
		ucma_futex_wake_all(&e->state);
}

/* The entry at index *@i, or the first after it below @end whose chunk
 * exists (*@i moves to it); NULL when none is left. */
static struct ucma_hentry *entry_from(uint32_t *i, uint32_t end)
{
	for (; *i < end; (*i)++) {
		struct ucma_hentry *e = ucma_handle_entry(*i);

		if (e)
			return e;
		*i |= CHUNK_ENTRIES - 1;	/* no chunk: skip it */
	}
	return NULL;
}

/* Wait until no entry is held.  Bounded, so a hold that can never end (a
 * fork from a signal handler that interrupted one) costs a message, not a
 * hang. */
static void wait_for_holds(void)
{
	uint64_t deadline = ucma_os_now_ns() + FORK_HOLD_WAIT_NS;
	uint32_t end = next_index;	/* table lock held */
	struct ucma_hentry *e;

	fork_hold_stuck = false;
	for (uint32_t i = 1; (e = entry_from(&i, end)) != NULL; i++) {
		while (atomic_load(&e->state) & UCMA_HS_MIGRATING) {
			if (ucma_os_now_ns() > deadline) {
				ucma_log("fork: handle entry %u stays held; the child cannot use it", i);
				fork_hold_stuck = true;
				return;
			}
			sched_yield();
		}
	}
}

/*
 * The table lock first: an entry handed out after it is read (next_index)
 * is handed out after this fork's flag was set, so its first hold sees the
 * flag; holders never take the table lock while they hold an entry, so
 * waiting for them with it held is safe.
 */
void ucma_handle_fork_prepare(void)
{
	atomic_store(&fork_pending, 1);
	ucma_mutex_lock(&table_lock);
	wait_for_holds();
}

void ucma_handle_fork_parent(void)
{
	ucma_mutex_unlock(&table_lock);
	atomic_store(&fork_pending, 0);
	ucma_futex_wake_all(&fork_pending);
}

/*
 * A grab that backs off for this fork swapped the entry's state before it
 * saw fork_pending, and released it after: the fork may have copied the
 * memory in between, and the child then had an entry held by a thread it
 * does not have (tests/stress/hangs, in the ThreadSanitizer build: a
 * child's pin waited for ever, at forks 66, 143 and 199 of runs of 200).  Once every hold
 * ended before the fork, only such grabs can show here: the child lets
 * them go.  A hold that never ended (a fork from a signal handler that
 * interrupted one) stays, as the message said.
 */
void ucma_handle_fork_child(void)
{
	struct ucma_hentry *e;

	for (uint32_t i = 1; !fork_hold_stuck && (e = entry_from(&i, next_index)) != NULL; i++) {
		uint32_t s = atomic_load_explicit(&e->state, memory_order_relaxed);

		/* While MIGRATING, the count is only the passing additions of
		 * pinners (handle.h), none of which the child has; and a free
		 * entry (even generation) holds no real pin either: a count
		 * there is a pinner of a stale handle between its addition
		 * and its taking back, which its next ucma_halloc() would
		 * wait for for ever.  (A live entry's count may be a real pin
		 * of an absent thread: it stays, as documented.) */
		if ((s & UCMA_HS_MIGRATING) ||
		    (s && !(atomic_load_explicit(&e->gen, memory_order_relaxed) & 1)))
			atomic_store_explicit(&e->state, 0, memory_order_relaxed);
	}
	ucma_mutex_unlock(&table_lock);
	atomic_store(&fork_pending, 0);
}

/* ------------------------------------------------------------------------ */
/* Entries                                                                   */
/* ------------------------------------------------------------------------ */

/* The entry of @index, inlined on the hot paths. */
static inline struct ucma_hentry *handle_entry(uint32_t index)
{
	struct ucma_hentry *chunk;

	if (index == 0 || (index >> CHUNK_SHIFT) >= DIR_ENTRIES)
		return NULL;
	chunk = __atomic_load_n(&dir[index >> CHUNK_SHIFT], __ATOMIC_ACQUIRE);
	return chunk ? &chunk[index & (CHUNK_ENTRIES - 1)] : NULL;
}

struct ucma_hentry *ucma_handle_entry(uint32_t index)
{
	return handle_entry(index);
}

/* One write section of the entry's sequence count (see handle.h). */
static void entry_write(struct ucma_hentry *e, uint32_t gen, void *addr, size_t size)
{
	uint32_t seq = atomic_load_explicit(&e->seq, memory_order_relaxed);

	atomic_store_explicit(&e->seq, seq + 1, memory_order_relaxed);
	atomic_store_explicit(&e->gen, gen, memory_order_release);
	__atomic_store_n(&e->addr, addr, __ATOMIC_RELEASE);
	__atomic_store_n(&e->size, size, __ATOMIC_RELEASE);
	atomic_store_explicit(&e->seq, seq + 2, memory_order_release);
}

void ucma_entry_set(struct ucma_hentry *e, void *addr, size_t size)
{
	entry_write(e, atomic_load_explicit(&e->gen, memory_order_relaxed), addr, size);
}

/* One try at a snapshot; false when a writer's section was open. */
static inline bool entry_read_once(struct ucma_hentry *e, struct ucma_entry_view *v)
{
	uint32_t seq = atomic_load_explicit(&e->seq, memory_order_acquire);

	if (UCMA_UNLIKELY(seq & 1))
		return false;
	v->gen = atomic_load_explicit(&e->gen, memory_order_acquire);
	v->addr = __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE);
	v->size = __atomic_load_n(&e->size, __ATOMIC_ACQUIRE);
	return atomic_load_explicit(&e->seq, memory_order_acquire) == seq;
}

/* A writer's section is a few stores; one found open is waited out,
 * yielding after a few tries in case the writer was preempted in it. */
static __attribute__((noinline)) void entry_read_slow(struct ucma_hentry *e,
						      struct ucma_entry_view *v)
{
	for (unsigned tries = 0; !entry_read_once(e, v); tries++)
		if (tries > 16)
			sched_yield();
}

/*
 * Acquire loads throughout: the second load of the count cannot be
 * answered before the loads of the fields, on any architecture, and the
 * object behind a new address is visible with it.
 */
static inline void entry_read(struct ucma_hentry *e, struct ucma_entry_view *v)
{
	if (UCMA_UNLIKELY(!entry_read_once(e, v)))
		entry_read_slow(e, v);
}

void ucma_handle_counters(uint64_t *live, uint64_t *bytes)
{
	*live = atomic_load_explicit(&live_handles, memory_order_relaxed);
	*bytes = atomic_load_explicit(&live_bytes, memory_order_relaxed);
}

/*
 * A free entry for a new object.  It stays free (even generation, state
 * untouched) until ucma_halloc() publishes it, so nothing waits on it
 * while its storage is found.
 */
static uint32_t entry_alloc(void)
{
	uint32_t index;

	ucma_mutex_lock(&table_lock);
	if (free_head) {
		index = free_head;
		free_head = ucma_handle_entry(index)->next_free;
	} else {
		index = next_index;
		if ((index >> CHUNK_SHIFT) >= DIR_ENTRIES) {
			ucma_mutex_unlock(&table_lock);
			errno = ENOMEM;
			return 0;
		}
		if (!dir[index >> CHUNK_SHIFT]) {
			void *chunk = ucma_os.mmap(NULL, CHUNK_ENTRIES * sizeof(struct ucma_hentry),
						   PROT_READ | PROT_WRITE,
						   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
						   -1, 0);

			if (chunk == MAP_FAILED) {
				ucma_mutex_unlock(&table_lock);
				errno = ENOMEM;
				return 0;
			}
			__atomic_store_n(&dir[index >> CHUNK_SHIFT], chunk, __ATOMIC_RELEASE);
		}
		__atomic_store_n(&next_index, index + 1, __ATOMIC_RELEASE);
	}
	if (UCMA_UNLIKELY(!ucma_handle_entry(index)))
		ucma_fatal("internal error: handle entry %u has no chunk", index);
	ucma_mutex_unlock(&table_lock);
	return index;
}

/* Give an entry back; its generation is already even (or retired). */
static void entry_free(uint32_t index)
{
	struct ucma_hentry *e = ucma_handle_entry(index);

	if (atomic_load_explicit(&e->gen, memory_order_relaxed) == GEN_RETIRED &&
	    e->next_free == UINT32_MAX)
		return;	/* retired: its generation would wrap */
	ucma_mutex_lock(&table_lock);
	e->next_free = free_head;
	free_head = index;
	ucma_mutex_unlock(&table_lock);
}

/*
 * Look up a live handle.  Returns the entry, or NULL with errno EINVAL for
 * handle 0, a forged index, or a stale or freed generation.
 */
static inline struct ucma_hentry *lookup(ucma_handle_t h, uint32_t *index)
{
	uint32_t idx = (uint32_t)h, gen = (uint32_t)(h >> 32);
	struct ucma_hentry *e;

	if (!(gen & 1) || !(e = handle_entry(idx)) ||
	    atomic_load_explicit(&e->gen, memory_order_acquire) != gen) {
		errno = EINVAL;
		return NULL;
	}
	if (index)
		*index = idx;
	return e;
}

/* Exclusive access for freeing or resizing: 0 -> MIGRATING.  Pinned: EBUSY.
 * Being moved: wait until the mover is done (it never takes long). */
static int grab_exclusive(struct ucma_hentry *e, uint32_t gen)
{
	while (!ucma_entry_grab(e)) {
		uint32_t s = atomic_load_explicit(&e->state, memory_order_relaxed);

		/* (Under MIGRATING, a count is pinners passing: handle.h.) */
		if ((s & UCMA_HS_PINS) && !(s & UCMA_HS_MIGRATING)) {
			errno = EBUSY;
			return -1;
		}
		sched_yield();
	}
	if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen) {
		ucma_entry_release(e);
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/**
 * ucma_halloc() - allocate a movable object of @size bytes.
 * @flags: UCMA_H_ZERO to zero it.
 *
 * Return: a handle, or 0 with errno EINVAL (size 0, unknown flags) or
 * ENOMEM.
 */
ucma_handle_t ucma_halloc(size_t size, unsigned flags)
{
	struct ucma_arena *a;
	struct ucma_hentry *e;
	uint32_t index, gen;
	void *p;

	if (size == 0 || (flags & ~UCMA_H_ZERO)) {
		errno = EINVAL;
		return 0;
	}
	a = ucma_arena_get();
	if (!a)
		return 0;
	if (size > a->size) {
		errno = ENOMEM;
		return 0;
	}
	index = entry_alloc();
	if (!index)
		return 0;
	e = ucma_handle_entry(index);
	/*
	 * The entry is still free: these waits (a drain, direct compaction)
	 * hold nothing that a pin of the entry's previous handle could wait
	 * for.  Compaction finds the new storage by the index and leaves it
	 * alone, as it leaves every object of a free entry.
	 */
	p = ucma_movable_storage_alloc(size, index, NULL);
	if (!p && ucma_rcu_can_wait() && ucma_defer_drain() == 0)
		p = ucma_movable_storage_alloc(size, index, NULL);
	if (!p)	/* direct compaction (compact.c): compact, retry after each priority */
		p = ucma_compact_direct_movable(size, index);
	if (!p) {
		entry_free(index);
		ucma_count(UCMA_STAT_HALLOC_FAIL, 1);
		errno = ENOMEM;
		return 0;
	}
	if (flags & UCMA_H_ZERO)
		memset(p, 0, size);
	/* Publish.  A pin of the previous handle may hold the state for a
	 * moment before its generation check lets go: wait it out. */
	while (!ucma_entry_grab(e))
		sched_yield();
	gen = atomic_load_explicit(&e->gen, memory_order_relaxed) + 1;
	entry_write(e, gen, p, size);
	ucma_entry_release(e);
	atomic_fetch_add_explicit(&live_handles, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&live_bytes, size, memory_order_relaxed);
	ucma_count(UCMA_STAT_HALLOC, 1);
	ucma_compactd_start_once();	/* the process has movable memory (compactd.c) */
	ucma_shm_check_request(true);	/* has ucmastat asked? (shm_server.c) */
	return ((uint64_t)gen << 32) | index;
}

/**
 * ucma_hfree() - free a movable object.
 * Return: 0, or -1 with errno EINVAL (stale, freed or forged handle) or
 * EBUSY (the object is pinned; it stays intact).
 */
int ucma_hfree(ucma_handle_t h)
{
	uint32_t index, gen = (uint32_t)(h >> 32);
	struct ucma_hentry *e = lookup(h, &index);
	void *addr;
	size_t size;

	if (!e || grab_exclusive(e, gen) != 0)
		return -1;
	addr = e->addr;
	size = e->size;
	if (gen == UINT32_MAX) {
		/* The next generation would wrap: retire the entry. */
		entry_write(e, GEN_RETIRED, NULL, 0);
		e->next_free = UINT32_MAX;
	} else {
		entry_write(e, gen + 1, NULL, 0);
		e->next_free = 0;
	}
	ucma_entry_release(e);
	ucma_defer_free(addr);
	entry_free(index);
	atomic_fetch_sub_explicit(&live_handles, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&live_bytes, size, memory_order_relaxed);
	ucma_count(UCMA_STAT_HFREE, 1);
	ucma_shm_check_request(true);
	return 0;
}

/**
 * ucma_hrealloc() - resize a movable object, keeping its handle and the
 * first min(old, new) bytes.
 * Return: 0, or -1 with errno EINVAL, EBUSY (pinned) or ENOMEM (the old
 * object is left intact).
 */
int ucma_hrealloc(ucma_handle_t h, size_t size)
{
	uint32_t index, gen = (uint32_t)(h >> 32);
	struct ucma_hentry *e;
	struct ucma_arena *a = ucma_arena_peek();
	void *was = NULL, *p;
	size_t old;

	if (size == 0) {
		errno = EINVAL;
		return -1;
	}
	e = lookup(h, &index);
	if (!e)
		return -1;
	if (a && size > a->size) {
		errno = ENOMEM;
		return -1;
	}
	if (grab_exclusive(e, gen) != 0)
		return -1;
	old = e->size;
	p = e->addr;
	if (!((old <= UCMA_MSLAB_MAX_SIZE && size <= UCMA_MSLAB_MAX_SIZE &&
	       ucma_mslab_class_size(old) == ucma_mslab_class_size(size)) ||
	      (old > UCMA_MSLAB_MAX_SIZE && size > UCMA_MSLAB_MAX_SIZE &&
	       UCMA_ALIGN_UP(old, UCMA_PAGE_SIZE) == UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE)))) {
		/* It does not fit where it is: a new copy (no waiting here). */
		was = p;
		p = ucma_movable_storage_alloc(size, index, NULL);
		if (!p) {
			ucma_entry_release(e);
			errno = ENOMEM;
			return -1;
		}
		memcpy(p, was, old < size ? old : size);
	}
	entry_write(e, gen, p, size);
	ucma_entry_release(e);
	if (was)
		ucma_defer_free(was);
	if (size > old)
		atomic_fetch_add_explicit(&live_bytes, size - old, memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(&live_bytes, old - size, memory_order_relaxed);
	return 0;
}

/*
 * The entry's current snapshot for handle @h, or -1 with errno EINVAL when
 * the handle is not live (stale, freed, forged).
 */
static inline int entry_view(ucma_handle_t h, struct ucma_entry_view *v)
{
	struct ucma_hentry *e = lookup(h, NULL);

	if (!e)
		return -1;
	entry_read(e, v);
	if (v->gen != (uint32_t)(h >> 32) || !v->addr) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/**
 * ucma_hsize() - the size of a movable object, or 0 with errno EINVAL.
 * The size alone: with ucma_hrealloc() running concurrently, an address
 * from a separate call may belong to another size (ucma_deref_size()).
 */
size_t ucma_hsize(ucma_handle_t h)
{
	struct ucma_entry_view v;

	return entry_view(h, &v) == 0 ? v.size : 0;
}

void ucma_entry_take_back(struct ucma_hentry *e)
{
	uint32_t s = atomic_load_explicit(&e->state, memory_order_relaxed);

	while (s & UCMA_HS_PINS)
		if (atomic_compare_exchange_weak_explicit(&e->state, &s, s - 1,
							  memory_order_release,
							  memory_order_relaxed))
			return;
}

/* Take one pin, sleeping while the object is being moved. */
static __attribute__((noinline)) int pin_once(struct ucma_hentry *e, uint32_t gen)
{
	for (;;) {
		uint32_t s = atomic_load_explicit(&e->state, memory_order_relaxed);

		if (s & UCMA_HS_MIGRATING) {
			if (!(s & UCMA_HS_WAITERS) &&
			    !atomic_compare_exchange_weak_explicit(&e->state, &s,
								   s | UCMA_HS_WAITERS,
								   memory_order_relaxed,
								   memory_order_relaxed))
				continue;
			ucma_futex_wait(&e->state, s | UCMA_HS_WAITERS, NULL);
			continue;
		}
		if ((s & UCMA_HS_PINS) >= UCMA_HS_PIN_MAX) {
			errno = EOVERFLOW;
			return -1;
		}
		if (atomic_compare_exchange_weak_explicit(&e->state, &s, s + 1,
							  memory_order_acquire,
							  memory_order_relaxed))
			break;
	}
	if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen) {
		ucma_entry_take_back(e);
		errno = EINVAL;
		return -1;
	}
	return 0;
}

static bool in_cma(const struct ucma_arena *a, const void *p)
{
	uint32_t pfn = ucma_addr_to_pfn(a, p);

	return pfn >= a->zones[UCMA_ZONE_CMA].start_pfn && pfn < a->zones[UCMA_ZONE_CMA].end_pfn;
}

/**
 * ucma_pin() - pin a movable object and return its address, valid and
 * writable until ucma_unpin().  With UCMA_PIN_LONGTERM the object is first
 * moved out of the CMA areas, so a long pin never blocks ucma_alloc().
 *
 * Return: the address, or NULL with errno EINVAL (bad handle or flags),
 * EOVERFLOW (too many pins), EBUSY (long-term: others pin it in a CMA
 * area), ENOMEM (long-term: no room outside CMA), EDEADLK (long-term
 * inside ucma_read_lock()).
 */
static void *pin_longterm(struct ucma_hentry *e, uint32_t index, uint32_t gen);

/* The fast path's one came back with MIGRATING, the limit or another
 * generation in the entry (@s is what the fetch-add found): take it back,
 * then wait for the mover or fail. */
static __attribute__((noinline)) void *pin_back_off(struct ucma_hentry *e, uint32_t gen,
						    uint32_t s)
{
	ucma_entry_take_back(e);
	if (!(s & UCMA_HS_MIGRATING) && (s & UCMA_HS_PINS) < UCMA_HS_PIN_MAX) {
		/* Freed and reused between the look-up and the pin. */
		errno = EINVAL;
		return NULL;
	}
	if (pin_once(e, gen) != 0)
		return NULL;
	return __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE);
}

/* Everything but a plain pin of a live handle. */
static __attribute__((noinline)) void *pin_slow(ucma_handle_t h, unsigned flags)
{
	uint32_t index, gen = (uint32_t)(h >> 32);
	struct ucma_hentry *e = lookup(h, &index);

	if (flags & ~UCMA_PIN_LONGTERM) {
		errno = EINVAL;
		return NULL;
	}
	if (!e)
		return NULL;
	/* (Without flags, ucma_pin() came here only for a handle that is
	 * not live, which a generation never becomes again.) */
	return pin_longterm(e, index, gen);
}

/* The entry of a live handle, or NULL; errno is the callers' (the fast
 * paths below leave the errors to their slow paths, which need no stack
 * frame of theirs). */
static inline struct ucma_hentry *lookup_quiet(ucma_handle_t h)
{
	uint32_t gen = (uint32_t)(h >> 32);
	struct ucma_hentry *e;

	if (!(gen & 1) || !(e = handle_entry((uint32_t)h)) ||
	    atomic_load_explicit(&e->gen, memory_order_acquire) != gen)
		return NULL;
	return e;
}

void *ucma_pin(ucma_handle_t h, unsigned flags)
{
	struct ucma_hentry *e = lookup_quiet(h);

	if (UCMA_LIKELY(e && flags == 0)) {
		/* The common case, one fetch-add: not held, not at the limit,
		 * not freed since the look-up.  Otherwise the one is taken
		 * back (handle.h). */
		uint32_t s = atomic_fetch_add_explicit(&e->state, 1, memory_order_acquire);

		if (UCMA_LIKELY(!(s & UCMA_HS_MIGRATING) && (s & UCMA_HS_PINS) < UCMA_HS_PIN_MAX &&
				atomic_load_explicit(&e->gen, memory_order_acquire) ==
					(uint32_t)(h >> 32)))
			/* Stable while pinned; acquire: the copy a mover
			 * made is seen. */
			return __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE);
		return pin_back_off(e, (uint32_t)(h >> 32), s);
	}
	return pin_slow(h, flags);
}

/* UCMA_PIN_LONGTERM: out of the CMA areas first (lesson 3). */
static void *pin_longterm(struct ucma_hentry *e, uint32_t index, uint32_t gen)
{
	struct ucma_arena *a = ucma_arena_peek();

	if (!ucma_rcu_can_wait()) {
		errno = EDEADLK;
		return NULL;
	}
	for (int attempt = 0; attempt < 8; attempt++) {
		struct ucma_migrate_target t = { .no_cma = true, .wait_pins = true };
		void *p;
		int r;

		if (pin_once(e, gen) != 0)
			return NULL;
		p = __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE);
		if (!in_cma(a, p))
			return p;
		/* In a CMA area: drop our pin and move the object out. */
		ucma_entry_take_back(e);
		r = ucma_migrate_object(index, p, &t);
		if (r == UCMA_MIGRATE_NOMEM) {
			errno = ENOMEM;
			return NULL;
		}
		if (r == UCMA_MIGRATE_OK) {
			ucma_count(UCMA_STAT_PIN_LONGTERM_MIGRATED, 1);
			ucma_defer_drain();	/* the CMA space is free on return */
		}
		if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen) {
			errno = EINVAL;
			return NULL;
		}
	}
	errno = EBUSY;
	return NULL;
}

/**
 * ucma_unpin() - drop one pin.
 * Return: 0, or -1 with errno EINVAL (bad handle, or not pinned).
 */
static __attribute__((noinline)) int unpin_slow(ucma_handle_t h)
{
	struct ucma_hentry *e = lookup(h, NULL);
	uint32_t s;

	if (!e)
		return -1;
	s = atomic_load_explicit(&e->state, memory_order_relaxed);
	do {
		if ((s & UCMA_HS_PINS) == 0 || (s & UCMA_HS_MIGRATING)) {
			errno = EINVAL;
			return -1;
		}
	} while (!atomic_compare_exchange_weak_explicit(&e->state, &s, s - 1, memory_order_release,
							memory_order_relaxed));
	return 0;
}

int ucma_unpin(ucma_handle_t h)
{
	struct ucma_hentry *e = lookup_quiet(h);

	if (UCMA_LIKELY(e)) {
		/* A compare-and-swap, not a fetch-sub: an unpin of an object
		 * nobody pinned must not take the count below 0 for a moment,
		 * where a mover's release and its undoing would corrupt the
		 * flags. */
		uint32_t s = atomic_load_explicit(&e->state, memory_order_relaxed);

		if (UCMA_LIKELY((s & UCMA_HS_PINS) && !(s & UCMA_HS_MIGRATING) &&
				atomic_compare_exchange_strong_explicit(&e->state, &s, s - 1,
									memory_order_release,
									memory_order_relaxed)))
			return 0;
	}
	return unpin_slow(h);
}

static atomic_bool unbalanced_reported;

/** ucma_read_lock() - enter an RCU read-side section (nests). */
void ucma_read_lock(void)
{
	ucma_rcu_read_lock();
}

/**
 * ucma_read_unlock() - leave an RCU read-side section.  An unlock without
 * a matching ucma_read_lock() in this thread is ignored, with one message
 * per process on stderr: liburcu's nesting counter must never go negative
 * (a crash, or every later grace period waiting forever).  The library's
 * own sections never stay open across a return to the caller, so the
 * depth the thread has open is the caller's.
 */
void ucma_read_unlock(void)
{
	if (UCMA_UNLIKELY(ucma_rcu_depth() == 0)) {
		if (!atomic_exchange(&unbalanced_reported, true))
			ucma_log("ucma_read_unlock() without ucma_read_lock() in this thread: "
				 "ignored");
		return;
	}
	ucma_rcu_read_unlock();
}

/**
 * ucma_deref_size() - the current address and size of a movable object,
 * one consistent pair, for reading inside ucma_read_lock() ...
 * ucma_read_unlock().  @size may be NULL.
 * Return: the address, or NULL with errno EINVAL (bad handle) or EPERM
 * (called outside a read-side section).
 */
const void *ucma_deref_size(ucma_handle_t h, size_t *size)
{
	struct ucma_entry_view v;

	if (UCMA_UNLIKELY(ucma_rcu_depth() == 0)) {
		errno = EPERM;
		return NULL;
	}
	if (entry_view(h, &v) != 0)
		return NULL;
	if (size)
		*size = v.size;
	return v.addr;
}

/**
 * ucma_deref() - the current address of a movable object, for reading
 * inside ucma_read_lock() ... ucma_read_unlock().
 * Return: the address, or NULL with errno EINVAL (bad handle) or EPERM
 * (called outside a read-side section).
 */
const void *ucma_deref(ucma_handle_t h)
{
	return ucma_deref_size(h, NULL);
}
