/*
 * fork.c - fork handling: every lock of the library is taken before
 * fork() and released after it, in one fixed order, so a child never
 * inherits a lock held by a thread it does not have.
 *
 * One table, fixed at compile time, lists each lock owner's handlers in
 * lock order (outermost first); pthread_atfork() gets one entry that runs
 * the table, registered once when the library is loaded (or first runs,
 * where no constructor ran).  A table rather
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
 *     the copy helpers hold nothing: the child forgets them (copy.c);
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
 *     which waits for nothing held here); 7. CMA area locks, then the
 *     zones' purge locks (no purge batch is off the lists, zone.c), then
 *     per zone its per-CPU page list locks (pcp.c) and its lock: no list is
 *     in the middle of a change, and the child has the parent's pages on
 *     the same lists; an allocation or release in the areas by another
 *     thread, which holds none of these locks throughout, is undone or
 *     finished in the child from the record it keeps (cma.h);
 *  8. the frame tables: the child gets CMA areas of its own, a copy of
 *     what the parent had allocated there, while the parent waits in its
 *     handler (frames.c); then the heap's borrowed pageblocks: the child
 *     copies them to memory of its own (its handler runs before frames.c's,
 *     while the areas it reads are still the parent's), the parent waits
 *     (lend.c); 9. the memory-event queue;
 * 10. the lock of the area lists ucma_config_from_env() keeps (config.c),
 *     which holds nothing, then the metadata lock, innermost of all.
 * Parent and child handlers run in the reverse order; after the last
 * child handler, with no ucma lock held, the child's memory events (its
 * new CMA areas) are delivered before fork() returns to the program.
 *
 * A process that has never had a second thread (ucma_fork_lone())
 * skips the stages marked lone_skip: they only take locks, park or
 * forget other threads, and with no other thread nobody can hold a lock
 * or be half way through a change at the fork (the forking thread is in
 * fork(), not in the library).  The C library's fork() skips its own
 * malloc locks the same way.  Taking them anyway wrote every page that
 * holds one of them (a dozen of the library's pages, and liburcu's) on
 * both sides of the fork, so parent and child each took a copy-on-write
 * fault per page while the other still shared it: 60-62 page faults per
 * fork and wait against the C library's 17-19, 1.4-1.5 ms against
 * 0.65-0.69 ms (make bench-fork, tests/bench/RESULTS.md).
 * The stages that give the child state of its own (the heap's
 * userfaultfd, its CMA areas and their copies, the statistics thread)
 * always run, and take their locks only when other threads exist
 * (ucma_fork_takes_locks()).
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
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#endif

#include "copy.h"
#include "memevent.h"
#include "rcu.h"

struct fork_stage {
	void (*prepare)(void);
	void (*parent)(void);
	void (*child)(void);
	/* Non-NULL: the stage may wait for a grace period (see above). */
	void (*child_unprepared)(void);
	/* Nothing to do in a process with one thread (see above). */
	bool lone_skip;
};

/* A stage with nothing to do on one side. */
static void fork_nothing(void)
{
}

static const struct fork_stage stages[] = {
	{ ucma_init_fork_prepare, ucma_init_fork_parent, ucma_init_fork_parent, NULL, true },
	{ ucma_compactd_fork_prepare, ucma_compactd_fork_parent, ucma_compactd_fork_child,
	  ucma_compactd_fork_child_unprepared, true },
	{ fork_nothing, fork_nothing, ucma_copy_fork_child, NULL, true },
	{ ucma_defer_fork_prepare, ucma_defer_fork_parent, ucma_defer_fork_child,
	  ucma_defer_fork_child_unprepared, true },
	{ ucma_rcu_fork_prepare, ucma_rcu_fork_parent, ucma_rcu_fork_child,
	  ucma_rcu_fork_child_unprepared, true },
	{ ucma_shm_server_fork_prepare, ucma_shm_server_fork_parent, ucma_shm_server_fork_child,
	  NULL, false },
	{ ucma_malloc_atfork_prepare, ucma_malloc_atfork_parent, ucma_malloc_atfork_child, NULL,
	  true },
	{ ucma_handle_fork_prepare, ucma_handle_fork_parent, ucma_handle_fork_child, NULL, true },
	{ ucma_mslab_fork_prepare, ucma_mslab_fork_parent, ucma_mslab_fork_child, NULL, true },
	{ ucma_lend_fork_prepare, ucma_lend_fork_parent, ucma_lend_fork_child, NULL, false },
	{ ucma_zones_fork_prepare, ucma_zones_fork_parent, ucma_zones_fork_child, NULL, true },
	{ ucma_frames_fork_prepare, ucma_frames_fork_parent, ucma_frames_fork_child, NULL, false },
	{ ucma_lend_frames_fork_prepare, ucma_lend_frames_fork_parent,
	  ucma_lend_frames_fork_child, NULL, false },
	{ ucma_mem_event_fork_prepare, ucma_mem_event_fork_parent, ucma_mem_event_fork_child, NULL,
	  true },
	{ ucma_config_fork_prepare, ucma_config_fork_parent, ucma_config_fork_parent, NULL, true },
	{ ucma_meta_fork_prepare, ucma_meta_fork_parent, ucma_meta_fork_parent, NULL, true },
};
#define NR_STAGES UCMA_ARRAY_SIZE(stages)

/*
 * Did this fork skip the stages that wait for grace periods?  Written by
 * the prepare handler and read by the parent and child handlers of the
 * same fork; forks of one process are serialised by glibc's atfork lock.
 */
static bool skip_grace_stages;
/* Does this fork skip the lone_skip stages?  As skip_grace_stages. */
static bool lone_fork;

/* Threads made with the clone system call itself, which the C library
 * does not count (preload/longterm.c sees them). */
static _Atomic bool raw_threads;

void ucma_fork_note_raw_thread(void)
{
	atomic_store(&raw_threads, true);
}

bool ucma_fork_takes_locks(void)
{
	return !lone_fork;
}

bool ucma_fork_lone(void)
{
#if __has_include(<sys/single_threaded.h>)
	return __libc_single_threaded && !atomic_load(&raw_threads);
#else
	return false;
#endif
}

static bool stage_runs(const struct fork_stage *s)
{
	if (lone_fork && s->lone_skip)
		return false;
	return !(skip_grace_stages && s->child_unprepared);
}

static void fork_prepare(void)
{
	bool skip = ucma_rcu_in_section() || ucma_rcu_degraded();
	/* A fork inside a read-side section keeps to its own rules. */
	bool lone = !skip && ucma_fork_lone();

	/* Stored only when changed: the previous fork's child may still
	 * share the page, and a store would copy it. */
	if (skip_grace_stages != skip)
		skip_grace_stages = skip;
	if (lone_fork != lone)
		lone_fork = lone;
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
		else if (!lone_fork)
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

/*
 * Registered when the library is loaded, not at its first use: glibc
 * runs the child handlers in the order they were registered, and a
 * program's own handler registered before ucma's would run in the child
 * while the CMA areas and the lent heap are still shared with the parent
 * (ucma's child handler gives the child its own copies), writing into the
 * parent's memory; its parent handler would likewise write before the
 * child has its copy.  Loaded first (a dependency of the program, or
 * preloaded), ucma registers before the program's constructors and
 * main() can; only a library initialised before this one can still come
 * first (ucma(7), "Fork").
 */
#ifdef UCMA_PRELOAD
/* Says that the preloaded library is in the process: see below. */
__attribute__((visibility("default"))) extern const int ucma_preload_instance;
const int ucma_preload_instance = 1;
#else
__attribute__((weak)) extern const int ucma_preload_instance;
#endif

__attribute__((constructor)) static void fork_register_at_load(void)
{
#ifndef UCMA_PRELOAD
	/* A program linked with -lucma and run under the preload library has
	 * two copies of the library, and every call binds to the preloaded
	 * one (preload.mk): this one must not register handlers of its own
	 * (two would run liburcu-bp's fork hook twice, and the second would
	 * wait for the lock the first took). */
	if (&ucma_preload_instance != NULL)
		return;
#endif
	ucma_fork_init();
}
