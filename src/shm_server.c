/*
 * shm_server.c - when the live statistics segment exists and who keeps it
 * fresh: UCMA_STATS_SHM, and the requests of readers (the protocol is in
 * shm.h; the segment itself is shm.c's).
 *
 * UCMA_STATS_SHM=request, the default: no segment and no thread until a
 * reader (ucmastat) asks.  Noticing a request costs one lstat() of
 * /dev/shm/ucma.<pid>.request, made
 *  - by an allocation call, at most once every CHECK_INTERVAL_NS for the
 *    whole process and only while no answering thread runs
 *    (ucma_shm_check_request(); otherwise it costs one atomic load, and a
 *    clock read on every 64th call of a sampled path);
 *  - by the compaction thread on each wake-up, ucma_compact() and
 *    ucma_stats_print() (ucma_shm_update(), through the same limit).
 * The first request noticed starts the answering thread, "ucma_stats".  It
 * looks for a new request every UCMA_SHM_POLL_MS, answers each with a
 * refresh (creating the segment the first time), and once no request has
 * come for the lease (UCMA_SHM_LEASE_S) it removes the segment and ends.
 * So a process that nobody inspects creates no file and no thread, and
 * leaves nothing behind however it ends (_exit, a signal, kill -9); one
 * that was inspected is back in that state a lease after the last request.
 *
 * UCMA_STATS_SHM=on: the segment is created with the arena and stays until
 * exit, so ucmastat --list sees the process even while it sleeps; requests
 * are answered as above.  ucma_stats_refresh() does the same for its
 * caller in the default mode: the program asked.  UCMA_STATS_SHM=off:
 * nothing is ever created; requests are ignored and ucma_stats_refresh()
 * fails with ENOTSUP.
 *
 * No allocation call refreshes the segment.  What one may pay is the
 * check above and, once per inspection, the creation of the thread.
 *
 * A request counts only if its file is a regular file owned by the
 * process's effective user or by root (another user cannot make the
 * process publish), and is younger than the lease (a file left by a reader
 * that was killed does not start a thread days later).
 *
 * Fork: the handler (fork.c, after the compaction thread, which may be
 * starting this one, has parked, and before the malloc locks, which
 * creating the thread may take) takes server.lock, so the child never
 * inherits it held.  The child has no answering thread and marks it so;
 * requests for the child's pid start its own.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"

#include "fork.h"
#include "shm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* How often allocation paths may look for a request, for the whole process. */
#define CHECK_INTERVAL_NS (100ull * 1000 * 1000)
#define NS_PER_S	  1000000000ull

enum server_state {
	SERVER_IDLE,		/* no thread (one that ended by itself is detached) */
	SERVER_RUNNING,		/* the thread answers requests (or is being created) */
	SERVER_STOPPING,	/* ucma_shm_unpublish() is joining it */
	SERVER_FAILED,		/* it could not be created: do not retry */
};

/*
 * struct shm_server - the answering thread.
 *
 * Locking: @lock serialises starting the thread, its decision to end,
 * stopping it and the fork handlers; @state is written under it and read
 * without it (atomic) by the allocation paths.  The thread sleeps on
 * @wake between polls, so that a stop is prompt.  @lock nests outside the
 * segment's writer word (shm.c), never inside it.
 */
static struct shm_server {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	_Atomic int state;		/* enum server_state */
	bool stop;			/* @lock: end now (ucma_shm_unpublish) */
	pthread_t thread;		/* valid while RUNNING or STOPPING */
} server UCMA_FORK_LOCK = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, SERVER_IDLE,
				   false, 0 };

/* Modification time of the newest request handled, so each is answered once. */
static _Atomic uint64_t handled_request_ns;
/* When an allocation path last looked for a request (ucma_os_now_ns()). */
static _Atomic uint64_t last_check_ns;

#ifdef UCMA_TEST_HOOKS
uint64_t ucma_shm_test_lease_ns;
#endif

static uint64_t lease_ns(void)
{
#ifdef UCMA_TEST_HOOKS
	/* Tests change it while the thread runs. */
	uint64_t test_ns = __atomic_load_n(&ucma_shm_test_lease_ns, __ATOMIC_RELAXED);

	if (test_ns)
		return test_ns;
#endif
	return UCMA_SHM_LEASE_S * NS_PER_S;
}

static uint64_t timespec_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * NS_PER_S + (uint64_t)ts->tv_nsec;
}

/*
 * Returns true if a request this process has not handled is waiting, with
 * its modification time in @mtime_ns.  One lstat(); allocates nothing.
 */
static bool request_pending(uint64_t *mtime_ns)
{
	char path[64];
	struct stat st;
	struct timespec now;
	uint64_t m;

	snprintf(path, sizeof(path), UCMA_SHM_DIR "/" UCMA_SHM_PREFIX "%ld" UCMA_SHM_REQUEST_SUFFIX,
		 (long)getpid());
	if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return false;
	if (st.st_uid != geteuid() && st.st_uid != 0)
		return false;
	m = timespec_ns(&st.st_mtim);
	if (m == 0 || m == atomic_load_explicit(&handled_request_ns, memory_order_relaxed))
		return false;
	clock_gettime(CLOCK_REALTIME, &now);
	if (m + lease_ns() < timespec_ns(&now))
		return false;	/* left by a reader long gone */
	*mtime_ns = m;
	return true;
}

/* Refresh (creating the segment if needed) and say which request it answers. */
static void answer(uint64_t mtime_ns)
{
	atomic_store_explicit(&handled_request_ns, mtime_ns, memory_order_relaxed);
	(void)ucma_shm_segment_refresh(UCMA_SHM_CREATE, mtime_ns, false, true);
}

/* ------------------------------------------------------------------------ */
/* The answering thread                                                      */
/* ------------------------------------------------------------------------ */

static void sleep_poll(void)
{
	struct timespec until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += UCMA_SHM_POLL_MS * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_cond_clockwait(&server.wake, &server.lock, CLOCK_MONOTONIC, &until);
}

static void *server_main(void *arg)
{
	uint64_t last_request = ucma_os_now_ns();

	(void)arg;
	pthread_setname_np(pthread_self(), "ucma_stats");
	ucma_mutex_lock(&server.lock);
	while (!server.stop) {
		uint64_t m;
		bool pending;

		ucma_mutex_unlock(&server.lock);
		pending = request_pending(&m);
		if (pending) {
			answer(m);
			last_request = ucma_os_now_ns();
		}
		ucma_mutex_lock(&server.lock);
		if (!pending && ucma_os_now_ns() - last_request > lease_ns()) {
			/*
			 * The lease is over.  Look once more under the lock: a
			 * request that comes after this look finds the thread
			 * ended, and the next check starts a new one.
			 */
			if (request_pending(&m))
				continue;
			ucma_shm_segment_remove(false);
			break;
		}
		if (!server.stop)
			sleep_poll();
	}
	if (atomic_load(&server.state) == SERVER_RUNNING) {
		/* Ended by its lease: nobody joins it. */
		pthread_detach(pthread_self());
		atomic_store(&server.state, SERVER_IDLE);
	}
	ucma_mutex_unlock(&server.lock);
	return NULL;
}

void ucma_shm_server_fork_prepare(void)
{
	ucma_fork_lock(&server.lock);
}

void ucma_shm_server_fork_parent(void)
{
	ucma_fork_unlock(&server.lock);
}

/* The thread is not in the child: forget it (it cannot be joined here). */
void ucma_shm_server_fork_child(void)
{
	/* Stores only where something changes: each copies the page. */
	if (atomic_load(&server.state) != SERVER_IDLE)
		atomic_store(&server.state, SERVER_IDLE);
	if (server.stop)
		server.stop = false;
	if (atomic_load(&last_check_ns))
		atomic_store(&last_check_ns, 0);
	/* Only a thread, which a process with one never had, waits on it. */
	if (ucma_fork_takes_locks())
		pthread_cond_init(&server.wake, NULL);
	ucma_fork_unlock(&server.lock);
}

static void server_start(void)
{
	int rc, st;

	ucma_mutex_lock(&server.lock);
	st = atomic_load(&server.state);
	if (st == SERVER_RUNNING || st == SERVER_STOPPING || st == SERVER_FAILED ||
	    ucma_shm_segment_exiting())
		goto out;
	server.stop = false;
	/* RUNNING before the thread exists: a malloc inside thread creation
	 * that comes back here (LD_PRELOAD) must not start a second one. */
	atomic_store(&server.state, SERVER_RUNNING);
	rc = ucma_thread_start(&server.thread, NULL, server_main);
	if (rc != 0) {
		atomic_store(&server.state, SERVER_FAILED);
		ucma_log("cannot start the thread that answers ucmastat (%s); no live statistics",
			 strerror(rc > 0 ? rc : errno));
	}
out:
	ucma_mutex_unlock(&server.lock);
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

void ucma_shm_check_request(bool sampled)
{
	static __thread unsigned calls;
	uint64_t now, last, m;
	int st, saved;

	if (sampled && (++calls & 63u))
		return;
	st = atomic_load_explicit(&server.state, memory_order_relaxed);
	if (st == SERVER_RUNNING || st == SERVER_STOPPING || st == SERVER_FAILED ||
	    ucma_opt.stats_shm == UCMA_SHM_OFF)
		return;
	now = ucma_os_now_ns();
	last = atomic_load_explicit(&last_check_ns, memory_order_relaxed);
	if (now - last < CHECK_INTERVAL_NS)
		return;
	/* One thread looks; the others see the new time. */
	if (!atomic_compare_exchange_strong(&last_check_ns, &last, now))
		return;
	saved = errno;
	if (request_pending(&m))
		server_start();
	errno = saved;
}

void ucma_shm_update(void)
{
	int saved = errno;

	if (ucma_opt.stats_shm == UCMA_SHM_OFF)
		return;
	/* Skips when another thread refreshes: that refresh is as fresh. */
	(void)ucma_shm_segment_refresh(UCMA_SHM_IF_PUBLISHED, 0, false, false);
	errno = saved;
	ucma_shm_check_request(false);
}

void ucma_shm_publish(void)
{
	int saved = errno;

	if (ucma_opt.stats_shm == UCMA_SHM_ON)
		(void)ucma_shm_segment_refresh(UCMA_SHM_CREATE, 0, true, true);
	errno = saved;
}

int ucma_shm_sync(void)
{
	if (ucma_opt.stats_shm == UCMA_SHM_OFF) {
		errno = ENOTSUP;
		return -1;
	}
	return ucma_shm_segment_refresh(UCMA_SHM_CREATE, 0, true, true);
}

void ucma_shm_unpublish(void)
{
	int st;

	ucma_mutex_lock(&server.lock);
	st = atomic_load(&server.state);
	if (st == SERVER_RUNNING) {
		atomic_store(&server.state, SERVER_STOPPING);
		server.stop = true;
		pthread_cond_broadcast(&server.wake);
		ucma_mutex_unlock(&server.lock);
		pthread_join(server.thread, NULL);
		ucma_mutex_lock(&server.lock);
	}
	atomic_store(&server.state, SERVER_IDLE);
	server.stop = false;
	ucma_mutex_unlock(&server.lock);
	ucma_shm_segment_remove(true);
	atomic_store(&handled_request_ns, 0);
	atomic_store(&last_check_ns, 0);
}

#ifdef UCMA_TEST_HOOKS
bool ucma_shm_test_server_running(void)
{
	return atomic_load(&server.state) == SERVER_RUNNING;
}
#endif
