/*
 * memevent.c - memory events: telling RDMA, VFIO or CUDA code which
 * memory of the CMA areas it may register with a device (MAP) and when a
 * registration must be dropped because the backing is about to go or to
 * change (UNMAP).  The model is DPDK's rte_mem_event_callback_register()
 * and SPDK's mem-map notify: named callbacks, and a late registrant gets
 * the ranges mapped at that moment replayed as MAP events.
 *
 * State, all under `me_lock`:
 *   - the registry: up to UCMA_MEM_EVENT_MAX named callbacks, each with
 *     the number of the last event its replay covered (`seen`);
 *   - the mapped set: the ranges announced by MAP and not withdrawn by
 *     UNMAP, sorted and merged: what a registrant is replayed;
 *   - the queue: events posted and not yet delivered.
 * Every posted event gets the next sequence number and is applied to the
 * set at once.  A registration takes its snapshot of the set and records
 * the current number in the same critical section, so its replay covers
 * exactly the events numbered up to `seen`, and delivery gives it only
 * later ones: no event is missed and none is seen twice.  An event posted
 * while nobody is registered only changes the set.
 *
 * Locking: `me_lock` is innermost but for meta.c's (the set and the queue
 * grow with ucma_meta_alloc): producers post under their own locks.  No
 * callback ever runs under it.  `deliver_lock` makes delivery one thread
 * at a time, in event order; registration replays under it and
 * unregistration takes it, so when ucma_mem_event_unregister() returns,
 * the callback is not running and never will again.  It is only taken
 * with no other ucma lock held.  A thread inside a callback (`in_callback`)
 * never takes it again: register and unregister fail with EDEADLK there,
 * and deliver returns at once (the outer loop delivers what was posted
 * meanwhile, up to DELIVER_EXTRA events).
 *
 * Fork (order 58, between the frames at 55 and meta.c at 60): prepare
 * takes `me_lock`; the child releases it and re-initialises `deliver_lock`
 * (a thread that is not in the child may have been delivering), keeps the
 * queue, and frames.c's
 * child handler then posts UNMAP and MAP for the areas it re-creates;
 * init.c delivers them once every fork handler has run.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "memevent.h"
#include "fork.h"
#include "rcu.h"

#include <errno.h>
#include <string.h>

#define UCMA_MEM_EVENT_MAX	32	/* callbacks registered at once */
#define UCMA_MEM_EVENT_NAME_MAX	64	/* bytes of a name, NUL included */
#define INITIAL_SLOTS		32	/* ranges and queued events without allocating */

typedef void (*mem_event_fn)(enum ucma_mem_event ev, void *addr, size_t len, void *arg);

struct mem_event_cb {
	char name[UCMA_MEM_EVENT_NAME_MAX];
	mem_event_fn fn;		/* NULL: the slot is free */
	void *arg;
	uint64_t seen;			/* events up to this one were replayed */
};

struct mem_range {
	uintptr_t start, end;
};

struct mem_event {
	uint64_t seq;
	int ev;				/* enum ucma_mem_event */
	uintptr_t addr;
	size_t len;
};

/* A growable array living in static storage until it outgrows it. */
struct grow_array {
	void *v;
	size_t n, cap, elem;
	void *initial;
};

static struct mem_range initial_ranges[INITIAL_SLOTS];
static struct mem_event initial_queue[INITIAL_SLOTS];

/* The event lock, with the locks every fork takes (lock.h, UCMA_FORK_LOCK). */
static pthread_mutex_t UCMA_FORK_LOCK me_lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
	pthread_mutex_t deliver_lock;
	struct mem_event_cb cbs[UCMA_MEM_EVENT_MAX];
	unsigned nr_cbs;
	uint64_t seq;			/* number of the last event posted */
	struct grow_array set;		/* struct mem_range, sorted, disjoint */
	struct grow_array queue;	/* struct mem_event, oldest first */
	size_t queue_head;		/* events before it were delivered */
	_Atomic bool pending;		/* the queue is not empty */
} me = {
	.deliver_lock = PTHREAD_MUTEX_INITIALIZER,
	.set = { initial_ranges, 0, INITIAL_SLOTS, sizeof(struct mem_range), initial_ranges },
	.queue = { initial_queue, 0, INITIAL_SLOTS, sizeof(struct mem_event), initial_queue },
};

static __thread bool in_callback __attribute__((tls_model("initial-exec")));

/* Events a delivery passes on beyond those queued when it began (posted
 * by the callbacks meanwhile): see ucma_mem_event_deliver(). */
#define DELIVER_EXTRA 4096
static atomic_bool endless_reported;

/* Room for one more element; false (and nothing changed) without memory. */
static bool grow(struct grow_array *g)
{
	void *nv;

	if (g->n < g->cap)
		return true;
	nv = ucma_meta_alloc(g->cap * 2 * g->elem);
	if (!nv)
		return false;
	memcpy(nv, g->v, g->n * g->elem);
	if (g->v != g->initial)
		ucma_meta_free(g->v, g->cap * g->elem);
	g->v = nv;
	g->cap *= 2;
	return true;
}

/* Add [start, end) to the mapped set, merging with its neighbours. */
static void set_add(uintptr_t start, uintptr_t end)
{
	struct mem_range *r = me.set.v;
	size_t i = 0, j;

	while (i < me.set.n && r[i].end < start)
		i++;
	/* r[i..j) touch or overlap [start, end): they become one range. */
	for (j = i; j < me.set.n && r[j].start <= end; j++) {
		start = r[j].start < start ? r[j].start : start;
		end = r[j].end > end ? r[j].end : end;
	}
	if (j == i) {
		if (!grow(&me.set)) {
			ucma_log("memory events: no memory to record a mapping; a late "
				 "registrant will not be told of %#lx-%#lx",
				 (unsigned long)start, (unsigned long)end);
			return;
		}
		r = me.set.v;
		memmove(&r[i + 1], &r[i], (me.set.n - i) * sizeof(*r));
		me.set.n++;
		j = i + 1;
	}
	r[i].start = start;
	r[i].end = end;
	memmove(&r[i + 1], &r[j], (me.set.n - j) * sizeof(*r));
	me.set.n -= j - i - 1;
}

/* Take [start, end) out of the mapped set, splitting a range if need be. */
static void set_remove(uintptr_t start, uintptr_t end)
{
	struct mem_range *r = me.set.v;

	for (size_t i = 0; i < me.set.n;) {
		struct mem_range cur = r[i];

		if (cur.end <= start || cur.start >= end) {
			i++;
			continue;
		}
		if (cur.start < start && cur.end > end) {
			/* [start, end) lies inside: two pieces remain. */
			if (!grow(&me.set)) {
				r[i].end = start;	/* the tail is forgotten, not replayed */
				return;
			}
			r = me.set.v;
			memmove(&r[i + 1], &r[i], (me.set.n - i) * sizeof(*r));
			me.set.n++;
			r[i].end = start;
			r[i + 1].start = end;
			return;
		}
		if (cur.start < start) {
			r[i++].end = start;
		} else if (cur.end > end) {
			r[i++].start = end;
		} else {
			memmove(&r[i], &r[i + 1], (me.set.n - i - 1) * sizeof(*r));
			me.set.n--;
		}
	}
}

void ucma_mem_event_fork_prepare(void)
{
	ucma_mutex_lock(&me_lock);
}

void ucma_mem_event_fork_parent(void)
{
	ucma_mutex_unlock(&me_lock);
}

void ucma_mem_event_fork_child(void)
{
	/* `lock` is this thread's (prepare took it); `deliver_lock` may be
	 * held by a thread that does not exist here. */
	ucma_mutex_unlock(&me_lock);
	pthread_mutex_init(&me.deliver_lock, NULL);
}

void ucma_mem_event_post(enum ucma_mem_event ev, void *addr, size_t len)
{
	uintptr_t start = (uintptr_t)addr;

	if (len == 0)
		return;
	ucma_mutex_lock(&me_lock);
	me.seq++;
	if (ev == UCMA_MEM_EVENT_MAP)
		set_add(start, start + len);
	else
		set_remove(start, start + len);
	if (me.nr_cbs) {
		if (grow(&me.queue)) {
			((struct mem_event *)me.queue.v)[me.queue.n++] =
				(struct mem_event){ me.seq, ev, start, len };
			atomic_store_explicit(&me.pending, true, memory_order_release);
		} else {
			ucma_log("memory events: no memory to queue an event for %#lx-%#lx",
				 (unsigned long)start, (unsigned long)(start + len));
		}
	}
	ucma_mutex_unlock(&me_lock);
}

void ucma_mem_event_post_replaced(void *addr, size_t len)
{
	if (!__atomic_load_n(&me.nr_cbs, __ATOMIC_RELAXED))
		return;
	ucma_mem_event_post(UCMA_MEM_EVENT_UNMAP, addr, len);
	ucma_mem_event_post(UCMA_MEM_EVENT_MAP, addr, len);
}

static void count(int ev, uint64_t n)
{
	ucma_count(ev == UCMA_MEM_EVENT_MAP ? UCMA_STAT_MEM_EVENT_MAP : UCMA_STAT_MEM_EVENT_UNMAP, n);
}

bool ucma_mem_event_in_callback(void)
{
	return in_callback;
}

/*
 * The callbacks are the program's code, which may take memory back
 * (ucma_alloc(), a preloaded mlock()): inside them this thread counts no
 * lock of the library (lock.h), though it holds deliver_lock, which only
 * serialises the callbacks.  in_callback is set first, so a signal
 * handler that finds the count at zero there does not deliver.
 */
static void callbacks_begin(void)
{
	in_callback = true;
	ucma_locks_held_dec();
}

static void callbacks_end(void)
{
	ucma_locks_held_inc();
	in_callback = false;
}

bool ucma_mem_event_deliver(void)
{
	/*
	 * Nothing is delivered while this thread holds another lock of the
	 * library (lock.h): it may be a signal handler that interrupted the
	 * library holding the event locks, or code inside a lock (a thread
	 * being started under the compaction lock allocates), and a callback
	 * run there could deadlock on what is held (a fork in it waits for
	 * that lock).  The events stay queued for the next delivery; a
	 * commit that needs its UNMAP delivered first lends nothing then
	 * (lend.c).
	 */
	size_t budget = SIZE_MAX;

	if (!atomic_load_explicit(&me.pending, memory_order_acquire))
		return true;
	if (in_callback || ucma_locks_held)
		return false;
	/*
	 * A reader (inside ucma_read_lock()) must not wait for the delivery
	 * lock: a callback holding it may be waiting for readers (an
	 * ucma_alloc() there waits for a grace period), and the two waited
	 * for each other for ever.  It delivers only when nobody else is.
	 */
	if (ucma_rcu_in_section()) {
		if (ucma_mutex_trylock(&me.deliver_lock) != 0)
			return false;
	} else {
		ucma_mutex_lock(&me.deliver_lock);
	}
	for (;;) {
		struct { mem_event_fn fn; void *arg; } calls[UCMA_MEM_EVENT_MAX];
		struct mem_event e;
		unsigned n = 0;

		ucma_mutex_lock(&me_lock);
		if (me.queue_head == me.queue.n) {
			me.queue_head = me.queue.n = 0;
			atomic_store_explicit(&me.pending, false, memory_order_relaxed);
			ucma_mutex_unlock(&me_lock);
			break;
		}
		/*
		 * What was queued when delivery began, and what the callbacks
		 * post meanwhile, up to DELIVER_EXTRA events more.  Events
		 * posted without end (by a callback whose calls make events of
		 * their own, as an allocating one did when the heap could
		 * borrow frames inside callbacks) would otherwise keep this
		 * loop going for ever, inside ucma_mem_event_register() or any
		 * call that delivers.  The rest stays queued for the next call
		 * that delivers.
		 */
		if (budget == SIZE_MAX)
			budget = me.queue.n - me.queue_head + DELIVER_EXTRA;
		if (budget-- == 0) {
			ucma_mutex_unlock(&me_lock);
			if (!atomic_exchange(&endless_reported, true))
				ucma_log("memory events: the callbacks post events as fast as they "
					 "are delivered (do their own calls post events?); the rest is "
					 "delivered by later calls");
			break;
		}
		e = ((struct mem_event *)me.queue.v)[me.queue_head++];
		for (unsigned i = 0; i < UCMA_MEM_EVENT_MAX; i++) {
			const struct mem_event_cb *c = &me.cbs[i];

			if (c->fn && c->seen < e.seq) {
				calls[n].fn = c->fn;
				calls[n++].arg = c->arg;
			}
		}
		ucma_mutex_unlock(&me_lock);
		callbacks_begin();
		for (unsigned i = 0; i < n; i++)
			calls[i].fn(e.ev, (void *)e.addr, e.len, calls[i].arg);
		callbacks_end();
		count(e.ev, n);
	}
	ucma_mutex_unlock(&me.deliver_lock);
	/* Every event queued when it began was delivered: the bound counts
	 * them all. */
	return true;
}

static struct mem_event_cb *find(const char *name)
{
	for (unsigned i = 0; i < UCMA_MEM_EVENT_MAX; i++)
		if (me.cbs[i].fn && strcmp(me.cbs[i].name, name) == 0)
			return &me.cbs[i];
	return NULL;
}

/**
 * ucma_mem_event_register() - call @cb for every MAP and UNMAP event,
 * the ranges mapped now first (as MAP events, before this returns).
 */
int ucma_mem_event_register(const char *name,
			    void (*cb)(enum ucma_mem_event ev, void *addr, size_t len, void *arg),
			    void *arg)
{
	struct mem_range *snap = NULL, few[INITIAL_SLOTS];
	struct mem_event_cb *slot = NULL;
	size_t n = 0, snap_bytes = 0;
	int err = 0;

	if (!name || !cb || !name[0] || strlen(name) >= UCMA_MEM_EVENT_NAME_MAX) {
		errno = EINVAL;
		return -1;
	}
	if (in_callback) {
		errno = EDEADLK;
		return -1;
	}
	ucma_mutex_lock(&me.deliver_lock);
	ucma_mutex_lock(&me_lock);
	if (find(name)) {
		err = EEXIST;
		goto out;
	}
	for (unsigned i = 0; i < UCMA_MEM_EVENT_MAX && !slot; i++)
		if (!me.cbs[i].fn)
			slot = &me.cbs[i];
	if (!slot) {
		err = ENOSPC;
		goto out;
	}
	n = me.set.n;
	snap = few;
	if (n > INITIAL_SLOTS) {
		snap_bytes = n * sizeof(*snap);
		snap = ucma_meta_alloc(snap_bytes);
		if (!snap) {
			err = ENOMEM;
			goto out;
		}
	}
	memcpy(snap, me.set.v, n * sizeof(*snap));
	snprintf(slot->name, sizeof(slot->name), "%s", name);
	slot->fn = cb;
	slot->arg = arg;
	slot->seen = me.seq;
	me.nr_cbs++;
out:
	ucma_mutex_unlock(&me_lock);
	if (!err) {
		callbacks_begin();
		for (size_t i = 0; i < n; i++)
			cb(UCMA_MEM_EVENT_MAP, (void *)snap[i].start, snap[i].end - snap[i].start,
			   arg);
		callbacks_end();
		count(UCMA_MEM_EVENT_MAP, n);
	}
	ucma_mutex_unlock(&me.deliver_lock);
	if (snap_bytes)
		ucma_meta_free(snap, snap_bytes);
	if (err) {
		errno = err;
		return -1;
	}
	/* What others were posted while this one replayed. */
	ucma_mem_event_deliver();
	return 0;
}

/**
 * ucma_mem_event_unregister() - stop calling the callback named @name.
 * When this returns the callback is not running and will not be called.
 */
int ucma_mem_event_unregister(const char *name)
{
	struct mem_event_cb *c;

	if (!name) {
		errno = EINVAL;
		return -1;
	}
	if (in_callback) {
		errno = EDEADLK;
		return -1;
	}
	ucma_mutex_lock(&me.deliver_lock);
	ucma_mutex_lock(&me_lock);
	c = find(name);
	if (c) {
		memset(c, 0, sizeof(*c));
		me.nr_cbs--;
	}
	ucma_mutex_unlock(&me_lock);
	ucma_mutex_unlock(&me.deliver_lock);
	if (!c) {
		errno = ENOENT;
		return -1;
	}
	return 0;
}
