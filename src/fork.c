/*
 * fork.c - fork handling: every lock of the library is taken before
 * fork() and released after it, in one fixed order, so a child never
 * inherits a lock held by a thread it does not have.
 *
 * One table, fixed at compile time, lists each lock owner's handlers in
 * lock order (outermost first); pthread_atfork() gets one entry that runs
 * the table, registered once when the library first runs.  A table rather
 * than handlers registered by each file on first use: a lock exists from
 * the start of the process, and a handler registered only with the first
 * use of one feature missed the locks another feature took (a program
 * that only made contiguous allocations forked while a thread drained,
 * and its child hung on the drain lock).  Every handler is therefore safe
 * to run before its subsystem is used.
 *
 * The order.  A prepare stage may wait for threads to finish what they
 * do; whatever they need to finish must not be held by an earlier stage.
 *  0. the start-up lock (a thread creating the arena finishes first);
 *  1. the compaction thread parks at the top of its loop, and every
 *     zone's compact_lock is taken (a compaction waits for grace periods);
 *  2. the drain lock (held across grace periods) and the queue lock;
 *  3. liburcu-bp's own hooks (its grace-period and registry locks);
 *     these three come before every lock a reader inside a read-side
 *     section might wait for, since the grace periods they wait for wait
 *     for such readers;
 *  4. the thread answering ucmastat (it creates its thread holding its
 *     lock, and thread creation may allocate), then the malloc family
 *     (thread-cache registry, bins, overflow);
 *  5. the handle table, after waiting for every entry held MIGRATING to
 *     be released (those holds are short and wait for nothing held here);
 *  6. movable-slab class locks; then the heap-lending lock (lend.c: no
 *     frame is being lent or taken back across the fork; with threads,
 *     every pageblock of the heap on a CMA frame is taken back first,
 *     which waits for nothing held here); 7. CMA area locks, then per
 *     zone its per-CPU page list locks (pcp.c) and its lock: no list is
 *     in the middle of a change, and the child has the parent's pages on
 *     the same lists;
 *  8. the frame tables: the child gets CMA areas of its own, a copy of
 *     what the parent had allocated there, while the parent waits in its
 *     handler (frames.c); then the heap's borrowed pageblocks: the child
 *     copies them to memory of its own (its handler runs before frames.c's,
 *     while the areas it reads are still the parent's), the parent waits
 *     (lend.c); 9. the memory-event queue;
 * 10. the metadata lock, innermost of all.
 * Parent and child handlers run in the reverse order; after the last
 * child handler, with no ucma lock held, the child's memory events (its
 * new CMA areas) are delivered before fork() returns to the program.
 *
 * A fork inside a read-side section cannot run stages 1-3: each may wait
 * for a grace period, and a grace period waits for the forking thread's
 * section, which cannot end before fork() returns.  Such a fork skips
 * them (no thread is parked, no drain is waited for), and the child runs
 * their child_unprepared handlers, which leave it unable to wait for
 * grace periods (rcu.h: degraded).  The parent is not affected.
 *
 * SPDX-License-Identifier: MIT
 */
#include "fork.h"

#include <sched.h>
#include <unistd.h>

#include "memevent.h"
#include "rcu.h"

struct fork_stage {
	void (*prepare)(void);
	void (*parent)(void);
	void (*child)(void);
	/* Non-NULL: the stage may wait for a grace period (see above). */
	void (*child_unprepared)(void);
};

static const struct fork_stage stages[] = {
	{ ucma_init_fork_prepare, ucma_init_fork_parent, ucma_init_fork_parent, NULL },
	{ ucma_compactd_fork_prepare, ucma_compactd_fork_parent, ucma_compactd_fork_child,
	  ucma_compactd_fork_child_unprepared },
	{ ucma_defer_fork_prepare, ucma_defer_fork_parent, ucma_defer_fork_child,
	  ucma_defer_fork_child_unprepared },
	{ ucma_rcu_fork_prepare, ucma_rcu_fork_parent, ucma_rcu_fork_child,
	  ucma_rcu_fork_child_unprepared },
	{ ucma_shm_server_fork_prepare, ucma_shm_server_fork_parent, ucma_shm_server_fork_child,
	  NULL },
	{ ucma_malloc_atfork_prepare, ucma_malloc_atfork_parent, ucma_malloc_atfork_child, NULL },
	{ ucma_handle_fork_prepare, ucma_handle_fork_parent, ucma_handle_fork_child, NULL },
	{ ucma_mslab_fork_prepare, ucma_mslab_fork_parent, ucma_mslab_fork_child, NULL },
	{ ucma_lend_fork_prepare, ucma_lend_fork_parent, ucma_lend_fork_child, NULL },
	{ ucma_zones_fork_prepare, ucma_zones_fork_parent, ucma_zones_fork_parent, NULL },
	{ ucma_frames_fork_prepare, ucma_frames_fork_parent, ucma_frames_fork_child, NULL },
	{ ucma_lend_frames_fork_prepare, ucma_lend_frames_fork_parent,
	  ucma_lend_frames_fork_child, NULL },
	{ ucma_mem_event_fork_prepare, ucma_mem_event_fork_parent, ucma_mem_event_fork_child, NULL },
	{ ucma_meta_fork_prepare, ucma_meta_fork_parent, ucma_meta_fork_parent, NULL },
};
#define NR_STAGES UCMA_ARRAY_SIZE(stages)

/*
 * Did this fork skip the stages that wait for grace periods?  Written by
 * the prepare handler and read by the parent and child handlers of the
 * same fork; forks of one process are serialised by glibc's atfork lock.
 */
static bool skip_grace_stages;

static bool stage_runs(const struct fork_stage *s)
{
	return !(skip_grace_stages && s->child_unprepared);
}

static void fork_prepare(void)
{
	skip_grace_stages = ucma_rcu_in_section() || ucma_rcu_degraded();
	for (size_t i = 0; i < NR_STAGES; i++)
		if (stage_runs(&stages[i]))
			stages[i].prepare();
}

static void fork_parent(void)
{
	for (size_t i = NR_STAGES; i-- > 0;)
		if (stage_runs(&stages[i]))
			stages[i].parent();
}

static void fork_child(void)
{
	for (size_t i = NR_STAGES; i-- > 0;) {
		if (stage_runs(&stages[i]))
			stages[i].child();
		else
			stages[i].child_unprepared();
	}
	ucma_mem_event_deliver();
}

/*
 * Registration: 0 not yet, REGISTERED done, otherwise the pid of the
 * process one of whose threads is registering.  Not pthread_once():
 * pthread_atfork() may allocate, and under LD_PRELOAD that allocation
 * comes back here; the nested call (marked in TLS) must return at once
 * rather than wait for the outer one.  Any other thread waits until the
 * handlers are registered, before it takes a lock: a thread that went on
 * while another was still registering took the start-up lock, a fork in
 * between ran no handler, and the child waited for that lock forever.
 * The pid tells a child of such a fork, where the registering thread does
 * not exist, that it must register itself.
 */
#define REGISTERED (-1)
static _Atomic pid_t registration;
static __thread bool registering __attribute__((tls_model("initial-exec")));

void ucma_fork_init(void)
{
	pid_t me = 0;

	for (;;) {
		pid_t state = atomic_load_explicit(&registration, memory_order_acquire);

		if (UCMA_LIKELY(state == REGISTERED) || registering)
			return;
		if (!me)
			me = getpid();
		if (state == 0 || state != me) {
			/* Nobody registers, or a thread of the parent did. */
			if (!atomic_compare_exchange_strong(&registration, &state, me))
				continue;
			registering = true;
			if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
				ucma_log("pthread_atfork failed: a child of fork() may inherit "
					 "held locks");
			registering = false;
			atomic_store_explicit(&registration, REGISTERED, memory_order_release);
			return;
		}
		/* Another thread of this process is inside pthread_atfork(),
		 * which waits at most for a fork() in progress. */
		sched_yield();
	}
}
