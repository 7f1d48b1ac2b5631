/*
 * shm_writer.h - the library's side of the live statistics segment that
 * ucmastat reads (the layout and the request protocol are in shm.h).
 *
 * Two files keep it:
 *  - shm.c, the segment itself: creating /dev/shm/ucma.<pid>, refreshing
 *    its counters and pageblock map, removing it.  One writer at a time.
 *  - shm_server.c, when the segment exists and who refreshes it:
 *    UCMA_STATS_SHM, the requests of readers, and the thread that answers
 *    them while someone inspects the process.
 *
 * No allocation path refreshes the segment: the most an allocation does
 * is ucma_shm_check_request(), a clock read on every 64th call and, at
 * most every 100 ms and only while no thread answers requests, one
 * lstat() of the request file.
 *
 * Every function here is called without any ucma lock held: a refresh
 * takes CMA area, zone and malloc counter locks.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_SHM_WRITER_H
#define UCMA_SHM_WRITER_H

#include <stdbool.h>
#include <stdint.h>

/* UCMA_STATS_SHM: when the segment exists.  Zero is the default. */
enum ucma_shm_mode {
	UCMA_SHM_REQUEST = 0,	/* while a reader asks for it (ucmastat) */
	UCMA_SHM_ON,		/* from start-up to exit, and on request */
	UCMA_SHM_OFF,		/* never; requests are ignored */
};

/* ---- shm_server.c: the entry points of the rest of the library ---- */

/* init.c, once the arena exists: create the segment if UCMA_STATS_SHM=on. */
UCMA_INTERNAL void ucma_shm_publish(void);
/* The compaction thread on each wake-up, ucma_compact(), ucma_stats_print():
 * refresh the segment if it exists (never create it), and look for a
 * request. */
UCMA_INTERNAL void ucma_shm_update(void);
/* Allocation paths: notice a reader's request and start the thread that
 * answers it.  Never refreshes.  @sampled: look at the clock on every 64th
 * call of a thread only (paths taken millions of times a second).  Leaves
 * errno alone. */
UCMA_INTERNAL void ucma_shm_check_request(bool sampled);
/* ucma_stats_refresh(): create the segment if needed (it then stays until
 * exit) and refresh it now, waiting for another thread's refresh.  0, or
 * -1 with errno (ENOTSUP with UCMA_STATS_SHM=off). */
UCMA_INTERNAL int ucma_shm_sync(void);
/* Teardown (test builds): stop the thread, remove the segment. */
UCMA_INTERNAL void ucma_shm_unpublish(void);

#ifdef UCMA_TEST_HOOKS
/* How long the thread keeps answering after the last request (test builds
 * shorten it); 0 means the default. */
UCMA_INTERNAL extern uint64_t ucma_shm_test_lease_ns;
/* Is the answering thread running? */
UCMA_INTERNAL bool ucma_shm_test_server_running(void);
/* Refreshes that answered no request (shm.c), so a test can tell them from
 * the answers to readers that may ask at any time. */
UCMA_INTERNAL extern _Atomic uint64_t ucma_shm_test_unasked_refreshes;
#endif

/* ---- shm.c: the segment, for shm_server.c ---- */

enum ucma_shm_refresh_how {
	UCMA_SHM_IF_PUBLISHED,	/* refresh only a segment this process has */
	UCMA_SHM_CREATE,	/* create it first if needed */
};

/*
 * Refresh the segment, recording @answer_ns (the request it answers, 0 for
 * none) and, with @keep, marking it to stay after the last request.
 * @wait: wait up to a second for another thread's refresh instead of
 * returning at once.  Returns 0; or -1 with errno: EAGAIN (busy), ENOENT
 * (no segment and UCMA_SHM_IF_PUBLISHED), ESHUTDOWN (the process is
 * exiting), or why it could not be created.
 */
UCMA_INTERNAL int ucma_shm_segment_refresh(enum ucma_shm_refresh_how how, uint64_t answer_ns,
					   bool keep, bool wait);
/* Remove the segment, unless it was marked to stay and !@force. */
UCMA_INTERNAL void ucma_shm_segment_remove(bool force);
/* Has the process begun to exit?  Then nothing is created any more. */
UCMA_INTERNAL bool ucma_shm_segment_exiting(void);

#endif /* UCMA_SHM_WRITER_H */
