/*
 * fork.h - fork handling (fork.c): one table of every lock owner's
 * handlers, run in lock order around fork().
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_FORK_H
#define UCMA_FORK_H

#include "internal.h"
#include "lock.h"

/*
 * Register the handlers with pthread_atfork, once per process.  Called
 * by every way into the library that may take a lock (ucma_arena_get(),
 * the malloc family's start-up) before it takes one; cheap afterwards.
 */
UCMA_INTERNAL void ucma_fork_init(void);
/* Has this process never had a second thread?  Then nobody but a signal
 * handler of the one thread runs library code beside it. */
UCMA_INTERNAL bool ucma_fork_lone(void);
/* The program made a thread with the clone system call itself. */
UCMA_INTERNAL void ucma_fork_note_raw_thread(void);
/* In a fork handler: does this fork take the library's locks?  Not in a
 * process with one thread (fork.c), where the handlers that always run
 * skip theirs. */
UCMA_INTERNAL bool ucma_fork_takes_locks(void);

/* A fork handler's take and release of @m: only when the fork takes
 * locks. */
static inline void ucma_fork_lock(pthread_mutex_t *m)
{
	if (ucma_fork_takes_locks())
		ucma_mutex_lock(m);
}

static inline void ucma_fork_unlock(pthread_mutex_t *m)
{
	if (ucma_fork_takes_locks())
		ucma_mutex_unlock(m);
}

/*
 * Handlers of each lock owner, listed in fork.c in the order their
 * prepare stages run.  Each prepare takes that owner's locks (or
 * quiesces its thread); parent and child release them; the child also
 * repairs what threads that do not exist there left behind.  A stage
 * that may wait for a grace period also has a child_unprepared handler:
 * a fork made inside a read-side section skips the stage's prepare and
 * parent handlers and runs child_unprepared in the child instead (rcu.h).
 */
/* init.c: the start-up lock. */
UCMA_INTERNAL void ucma_init_fork_prepare(void);
UCMA_INTERNAL void ucma_init_fork_parent(void);
/* compactd.c: park the thread, take every zone's compact_lock. */
UCMA_INTERNAL void ucma_compactd_fork_prepare(void);
UCMA_INTERNAL void ucma_compactd_fork_parent(void);
UCMA_INTERNAL void ucma_compactd_fork_child(void);
UCMA_INTERNAL void ucma_compactd_fork_child_unprepared(void);
/* migrate.c: the deferred-free queue and the drain lock. */
UCMA_INTERNAL void ucma_defer_fork_prepare(void);
UCMA_INTERNAL void ucma_defer_fork_parent(void);
UCMA_INTERNAL void ucma_defer_fork_child(void);
UCMA_INTERNAL void ucma_defer_fork_child_unprepared(void);
/* malloc.c: thread-cache registry, slab bins, overflow. */
UCMA_INTERNAL void ucma_malloc_atfork_prepare(void);
UCMA_INTERNAL void ucma_malloc_atfork_parent(void);
UCMA_INTERNAL void ucma_malloc_atfork_child(void);
/* shm_server.c: the thread that answers ucmastat's requests. */
UCMA_INTERNAL void ucma_shm_server_fork_prepare(void);
UCMA_INTERNAL void ucma_shm_server_fork_parent(void);
UCMA_INTERNAL void ucma_shm_server_fork_child(void);
/* handle.c: the table lock; waits for entries held MIGRATING. */
UCMA_INTERNAL void ucma_handle_fork_prepare(void);
UCMA_INTERNAL void ucma_handle_fork_parent(void);
UCMA_INTERNAL void ucma_handle_fork_child(void);
/* mslab.c: the size-class locks. */
UCMA_INTERNAL void ucma_mslab_fork_prepare(void);
UCMA_INTERNAL void ucma_mslab_fork_parent(void);
UCMA_INTERNAL void ucma_mslab_fork_child(void);
/* lend.c: the heap-lending lock (no frame lent or taken back meanwhile). */
UCMA_INTERNAL void ucma_lend_fork_prepare(void);
UCMA_INTERNAL void ucma_lend_fork_parent(void);
UCMA_INTERNAL void ucma_lend_fork_child(void);
/* init.c: CMA area locks, then zone locks; the child also undoes or
 * finishes the absent threads' allocations and releases (cma.h). */
UCMA_INTERNAL void ucma_zones_fork_prepare(void);
UCMA_INTERNAL void ucma_zones_fork_parent(void);
UCMA_INTERNAL void ucma_zones_fork_child(void);
/* frames.c: the frame tables; the child gets CMA areas of its own, with
 * a copy of what the parent had allocated there (the parent waits). */
UCMA_INTERNAL void ucma_frames_fork_prepare(void);
UCMA_INTERNAL void ucma_frames_fork_parent(void);
UCMA_INTERNAL void ucma_frames_fork_child(void);
/* lend.c: the heap's borrowed pageblocks; the child copies them to memory
 * of its own (the parent waits), before frames.c's child handler. */
UCMA_INTERNAL void ucma_lend_frames_fork_prepare(void);
UCMA_INTERNAL void ucma_lend_frames_fork_parent(void);
UCMA_INTERNAL void ucma_lend_frames_fork_child(void);
/* memevent.c: the queue of memory events. */
UCMA_INTERNAL void ucma_mem_event_fork_prepare(void);
UCMA_INTERNAL void ucma_mem_event_fork_parent(void);
UCMA_INTERNAL void ucma_mem_event_fork_child(void);
/* config.c: the lock of the area lists ucma_config_from_env() keeps. */
UCMA_INTERNAL void ucma_config_fork_prepare(void);
UCMA_INTERNAL void ucma_config_fork_parent(void);
/* meta.c: the metadata lock, innermost of all. */
UCMA_INTERNAL void ucma_meta_fork_prepare(void);
UCMA_INTERNAL void ucma_meta_fork_parent(void);

#endif /* UCMA_FORK_H */
