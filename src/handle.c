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
 * ucma_hentry): ucma_pin() adds one while MIGRATING is clear and otherwise
 * sleeps on the word (futex), the mover and ucma_hfree() swap 0 for
 * MIGRATING.  So a pinned object is never moved or freed, and a pin never
 * sees an object half-moved.
 *
 * Readers without a pin use RCU (liburcu's bulletproof flavour: a library
 * cannot ask its callers to register threads).  ucma_deref() checks the
 * generation before and after loading the address, so a handle freed and
 * reused concurrently yields EINVAL rather than another object.
 *
 * Locking: table_lock protects the free list and the high-water mark;
 * entries are otherwise changed only with atomics.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <urcu-bp.h>

#define CHUNK_SHIFT 16
#define CHUNK_ENTRIES (1u << CHUNK_SHIFT)
#define DIR_ENTRIES (1u << 14)		/* 2^30 handles at most */
#define GEN_RETIRED 0u			/* even, and never reused */

static struct ucma_hentry *dir[DIR_ENTRIES];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_index = 1;		/* high-water mark */
static uint32_t free_head;		/* 0 = empty */
static _Atomic uint64_t live_handles, live_bytes;
static pthread_once_t handle_once = PTHREAD_ONCE_INIT;

static void table_prepare(void)
{
	pthread_mutex_lock(&table_lock);
}

static void table_release(void)
{
	pthread_mutex_unlock(&table_lock);
}

static void handle_init(void)
{
	ucma_atfork_register(30, table_prepare, table_release, table_release);
	ucma_migrate_init_once();
	/* liburcu-bp's own fork hooks, after our locks that nest outside its
	 * grace-period lock (drains hold drain_lock around synchronize). */
	ucma_atfork_register(33, urcu_bp_before_fork, urcu_bp_after_fork_parent,
			     urcu_bp_after_fork_child);
}

struct ucma_hentry *ucma_handle_entry(uint32_t index)
{
	struct ucma_hentry *chunk;

	if (index == 0 || (index >> CHUNK_SHIFT) >= DIR_ENTRIES)
		return NULL;
	chunk = __atomic_load_n(&dir[index >> CHUNK_SHIFT], __ATOMIC_ACQUIRE);
	return chunk ? &chunk[index & (CHUNK_ENTRIES - 1)] : NULL;
}

bool ucma_in_read_section(void)
{
	return urcu_bp_read_ongoing();
}

void ucma_handle_counters(uint64_t *live, uint64_t *bytes)
{
	*live = atomic_load_explicit(&live_handles, memory_order_relaxed);
	*bytes = atomic_load_explicit(&live_bytes, memory_order_relaxed);
}

/* A free entry, with state MIGRATING so nobody touches it until ready. */
static uint32_t entry_alloc(void)
{
	struct ucma_hentry *e;
	uint32_t index;

	pthread_mutex_lock(&table_lock);
	if (free_head) {
		index = free_head;
		e = ucma_handle_entry(index);
		free_head = e->next_free;
	} else {
		index = next_index;
		if ((index >> CHUNK_SHIFT) >= DIR_ENTRIES) {
			pthread_mutex_unlock(&table_lock);
			errno = ENOMEM;
			return 0;
		}
		if (!dir[index >> CHUNK_SHIFT]) {
			void *chunk = ucma_os.mmap(NULL, CHUNK_ENTRIES * sizeof(struct ucma_hentry),
						   PROT_READ | PROT_WRITE,
						   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
						   -1, 0);

			if (chunk == MAP_FAILED) {
				pthread_mutex_unlock(&table_lock);
				errno = ENOMEM;
				return 0;
			}
			__atomic_store_n(&dir[index >> CHUNK_SHIFT], chunk, __ATOMIC_RELEASE);
		}
		next_index++;
		e = ucma_handle_entry(index);
	}
	if (UCMA_UNLIKELY(!e))
		ucma_fatal("internal error: handle entry %u has no chunk", index);
	pthread_mutex_unlock(&table_lock);
	/*
	 * Take the state word from 0, never store over it: a ucma_pin() of
	 * the entry's previous, freed handle may hold a pin for a moment
	 * before its generation check makes it let go.  A plain store would
	 * lose that pin, and its later release would wrap the word around.
	 */
	for (;;) {
		uint32_t idle = 0;

		if (atomic_compare_exchange_weak_explicit(&e->state, &idle, UCMA_HS_MIGRATING,
							  memory_order_acquire,
							  memory_order_relaxed))
			break;
		sched_yield();
	}
	return index;
}

/* Give an entry back; its generation is already even (or retired). */
static void entry_free(uint32_t index)
{
	struct ucma_hentry *e = ucma_handle_entry(index);

	if (atomic_load_explicit(&e->gen, memory_order_relaxed) == GEN_RETIRED &&
	    e->next_free == UINT32_MAX)
		return;	/* retired: its generation would wrap */
	pthread_mutex_lock(&table_lock);
	e->next_free = free_head;
	free_head = index;
	pthread_mutex_unlock(&table_lock);
}

/*
 * Look up a live handle.  Returns the entry, or NULL with errno EINVAL for
 * handle 0, a forged index, or a stale or freed generation.
 */
static struct ucma_hentry *lookup(ucma_handle_t h, uint32_t *index)
{
	uint32_t idx = (uint32_t)h, gen = (uint32_t)(h >> 32);
	struct ucma_hentry *e;

	if (!(gen & 1) || !(e = ucma_handle_entry(idx)) ||
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
	for (;;) {
		uint32_t s = 0;

		if (atomic_compare_exchange_strong_explicit(&e->state, &s, UCMA_HS_MIGRATING,
							    memory_order_acquire,
							    memory_order_relaxed))
			break;
		if (s & UCMA_HS_PINS) {
			errno = EBUSY;
			return -1;
		}
		sched_yield();
	}
	if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen) {
		ucma_handle_state_release(e);
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
	pthread_once(&handle_once, handle_init);
	index = entry_alloc();
	if (!index)
		return 0;
	e = ucma_handle_entry(index);
	p = ucma_movable_storage_alloc(size, index, NULL);
	if (!p && !ucma_in_read_section() && ucma_defer_drain() == 0)
		p = ucma_movable_storage_alloc(size, index, NULL);
	if (!p)	/* direct compaction (compact.c): compact, retry after each priority */
		p = ucma_compact_direct_movable(size, index);
	if (!p) {
		ucma_handle_state_release(e);
		entry_free(index);
		ucma_count(UCMA_STAT_HALLOC_FAIL, 1);
		errno = ENOMEM;
		return 0;
	}
	if (flags & UCMA_H_ZERO)
		memset(p, 0, size);
	e->size = size;
	rcu_assign_pointer(e->addr, p);
	gen = atomic_load_explicit(&e->gen, memory_order_relaxed) + 1;
	atomic_store_explicit(&e->gen, gen, memory_order_release);
	ucma_handle_state_release(e);
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
		atomic_store_explicit(&e->gen, GEN_RETIRED, memory_order_release);
		e->next_free = UINT32_MAX;
	} else {
		atomic_store_explicit(&e->gen, gen + 1, memory_order_release);
		e->next_free = 0;
	}
	rcu_assign_pointer(e->addr, NULL);
	ucma_handle_state_release(e);
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
	size_t old;
	void *p;

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
	if ((old <= UCMA_MSLAB_MAX_SIZE && size <= UCMA_MSLAB_MAX_SIZE &&
	     ucma_mslab_class_size(old) == ucma_mslab_class_size(size)) ||
	    (old > UCMA_MSLAB_MAX_SIZE && size > UCMA_MSLAB_MAX_SIZE &&
	     UCMA_ALIGN_UP(old, UCMA_PAGE_SIZE) == UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE))) {
		e->size = size;	/* fits where it is */
	} else {
		p = ucma_movable_storage_alloc(size, index, NULL);
		if (!p) {
			ucma_handle_state_release(e);
			errno = ENOMEM;
			return -1;
		}
		memcpy(p, e->addr, old < size ? old : size);
		void *was = e->addr;

		e->size = size;
		rcu_assign_pointer(e->addr, p);
		ucma_defer_free(was);
	}
	ucma_handle_state_release(e);
	if (size > old)
		atomic_fetch_add_explicit(&live_bytes, size - old, memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(&live_bytes, old - size, memory_order_relaxed);
	return 0;
}

/** ucma_hsize() - the size of a movable object, or 0 with errno EINVAL. */
size_t ucma_hsize(ucma_handle_t h)
{
	struct ucma_hentry *e = lookup(h, NULL);
	size_t size;

	if (!e)
		return 0;
	size = e->size;
	if (atomic_load_explicit(&e->gen, memory_order_acquire) != (uint32_t)(h >> 32)) {
		errno = EINVAL;
		return 0;
	}
	return size;
}

/* Take one pin, sleeping while the object is being moved. */
static int pin_once(struct ucma_hentry *e, uint32_t gen)
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
			syscall(SYS_futex, &e->state, FUTEX_WAIT_PRIVATE, s | UCMA_HS_WAITERS,
				NULL, NULL, 0);
			continue;
		}
		if ((s & UCMA_HS_PINS) == UCMA_HS_PINS) {
			errno = EOVERFLOW;
			return -1;
		}
		if (atomic_compare_exchange_weak_explicit(&e->state, &s, s + 1,
							  memory_order_acquire,
							  memory_order_relaxed))
			break;
	}
	if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen) {
		atomic_fetch_sub_explicit(&e->state, 1, memory_order_release);
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
void *ucma_pin(ucma_handle_t h, unsigned flags)
{
	uint32_t index, gen = (uint32_t)(h >> 32);
	struct ucma_hentry *e;
	struct ucma_arena *a = ucma_arena_peek();

	if (flags & ~UCMA_PIN_LONGTERM) {
		errno = EINVAL;
		return NULL;
	}
	e = lookup(h, &index);
	if (!e)
		return NULL;
	if (!(flags & UCMA_PIN_LONGTERM)) {
		if (pin_once(e, gen) != 0)
			return NULL;
		return e->addr;
	}
	if (ucma_in_read_section()) {
		errno = EDEADLK;
		return NULL;
	}
	for (int attempt = 0; attempt < 8; attempt++) {
		void *p = __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE);
		struct ucma_migrate_target t = { 0, 0, true, true };
		int r;

		if (pin_once(e, gen) != 0)
			return NULL;
		if (!in_cma(a, e->addr))
			return e->addr;
		/* In a CMA area: drop our pin and move the object out. */
		atomic_fetch_sub_explicit(&e->state, 1, memory_order_release);
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
int ucma_unpin(ucma_handle_t h)
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

/*
 * Sections the calling thread opened with ucma_read_lock(): an unlock
 * without a lock must not reach liburcu, whose nesting counter would go
 * negative (a crash, or every later grace period waiting forever).
 */
static __thread unsigned long user_read_depth;
static atomic_bool unbalanced_reported;

/** ucma_read_lock() - enter an RCU read-side section (nests). */
void ucma_read_lock(void)
{
	urcu_bp_read_lock();
	user_read_depth++;
}

/**
 * ucma_read_unlock() - leave an RCU read-side section.  An unlock without
 * a matching ucma_read_lock() in this thread is ignored, with one message
 * per process on stderr.
 */
void ucma_read_unlock(void)
{
	if (UCMA_UNLIKELY(user_read_depth == 0)) {
		if (!atomic_exchange(&unbalanced_reported, true))
			ucma_log("ucma_read_unlock() without ucma_read_lock() in this thread: "
				 "ignored");
		return;
	}
	user_read_depth--;
	urcu_bp_read_unlock();
}

/**
 * ucma_deref() - the current address of a movable object, for reading
 * inside ucma_read_lock() ... ucma_read_unlock().
 * Return: the address, or NULL with errno EINVAL (bad handle) or EPERM
 * (called outside a read-side section).
 */
const void *ucma_deref(ucma_handle_t h)
{
	uint32_t gen = (uint32_t)(h >> 32);
	struct ucma_hentry *e;
	const void *p;

	if (!urcu_bp_read_ongoing()) {
		errno = EPERM;
		return NULL;
	}
	e = lookup(h, NULL);
	if (!e)
		return NULL;
	p = rcu_dereference(e->addr);
	if (atomic_load_explicit(&e->gen, memory_order_acquire) != gen || !p) {
		errno = EINVAL;
		return NULL;
	}
	return p;
}
