/*
 * races.c - regression tests for races between legal calls.
 *
 * 1. Pin versus free and reuse of a handle-table entry.  One thread
 *    recycles one entry (halloc, pin, write, unpin, hfree) as fast as it
 *    can; others pin and unpin whatever handle it last published, which is
 *    legal: they pin the live object, or get EINVAL for a freed one.  The
 *    entry's state word once lost a transient pin of a stale handle when
 *    the entry was reused, and the owner then hung (a pin count of
 *    0xffffffff) or a real pin was dropped.  A watchdog fails the test if
 *    the owner stops making progress.
 * 2. fork() right after the compaction thread started, many times: the
 *    park handshake of the fork handler once lost a wake-up and fork()
 *    waited forever.
 * 3. ucma_read_unlock() without ucma_read_lock(): ignored, and grace
 *    periods in other threads still end.
 *
 * Duration of part 1: UCMA_STRESS_SECONDS (default 2).
 *
 * SPDX-License-Identifier: MIT
 */
#include "tap.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucma.h>

#define ATTACKERS 3

static _Atomic ucma_handle_t published;
static atomic_int stop;
static atomic_long iterations, attacker_pins, unpin_failures;

static void *attacker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		ucma_handle_t h = atomic_load(&published);

		if (h && ucma_pin(h, 0)) {
			atomic_fetch_add(&attacker_pins, 1);
			if (ucma_unpin(h) != 0)
				atomic_fetch_add(&unpin_failures, 1);
		}
	}
	return NULL;
}

/* Exits the process when the owner makes no progress for 5 seconds. */
static void *watchdog(void *arg)
{
	long last = -1;
	int still = 0;

	(void)arg;
	while (!atomic_load(&stop)) {
		long now;

		sleep(1);
		now = atomic_load(&iterations);
		still = now == last ? still + 1 : 0;
		last = now;
		if (still == 5) {
			printf("not ok - the owner of the entry hangs after %ld iterations\n", now);
			fflush(stdout);
			_exit(1);
		}
	}
	return NULL;
}

static void test_pin_versus_reuse(unsigned seconds)
{
	pthread_t t[ATTACKERS], w;
	uint64_t end = tu_now_ns() + (uint64_t)seconds * 1000000000ull;
	long anomalies = 0;

	for (int i = 0; i < ATTACKERS; i++)
		if (pthread_create(&t[i], NULL, attacker, NULL) != 0)
			bail_out("pthread_create");
	if (pthread_create(&w, NULL, watchdog, NULL) != 0)
		bail_out("pthread_create");
	while (tu_now_ns() < end && !anomalies) {
		for (int k = 0; k < 1000; k++) {
			ucma_handle_t h = ucma_halloc(64, 0);
			char *p;

			if (!h)
				bail_out("ucma_halloc: %s", strerror(errno));
			p = ucma_pin(h, 0);
			if (!p || (memset(p, 0x5a, 64), ucma_unpin(h) != 0)) {
				diag("the owner's pin or unpin of a live object failed: %s",
				     strerror(errno));
				anomalies++;
				break;
			}
			atomic_store(&published, h);
			while (ucma_hfree(h) != 0) {
				if (errno != EBUSY) {
					diag("ucma_hfree: %s", strerror(errno));
					anomalies++;
					break;
				}
			}
			atomic_fetch_add(&iterations, 1);
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < ATTACKERS; i++)
		pthread_join(t[i], NULL);
	pthread_join(w, NULL);
	ok(anomalies == 0 && atomic_load(&unpin_failures) == 0,
	   "pin of a handle being freed and its entry reused: %ld cycles, %ld pins by "
	   "other threads, no lost pin", atomic_load(&iterations), atomic_load(&attacker_pins));
}

static void test_fork_handshake(void)
{
	int bad = 0;

	/* A movable object starts the compaction thread. */
	ucma_handle_t h = ucma_halloc(10, 0);

	for (int i = 0; i < 300 && !bad; i++) {
		int status;
		pid_t pid = fork();

		if (pid == 0)
			_exit(0);
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
			bad = 1;
	}
	ok(!bad, "300 forks in a row with the compaction thread running");
	ucma_hfree(h);
}

static void *compact_in_thread(void *arg)
{
	int *rc = arg;

	*rc = ucma_compact(UCMA_COMPACT_SYNC_FULL);
	return NULL;
}

static void test_stray_unlock(void)
{
	pthread_t t;
	int rc = -1;

	ucma_read_unlock();	/* without a lock: ignored */
	ucma_read_lock();
	ucma_read_unlock();
	ucma_read_unlock();	/* one more than taken: ignored */
	ok(ucma_compact(UCMA_COMPACT_ASYNC) == 0,
	   "after stray unlocks this thread is not inside a read-side section");
	if (pthread_create(&t, NULL, compact_in_thread, &rc) != 0)
		bail_out("pthread_create");
	pthread_join(t, NULL);
	ok(rc == 0, "another thread's grace period still ends");
}

int main(void)
{
	const char *env = getenv("UCMA_STRESS_SECONDS");
	unsigned seconds = env ? (unsigned)strtoul(env, NULL, 10) : 2;

	plan_no_plan();
	test_stray_unlock();
	test_fork_handshake();
	test_pin_versus_reuse(seconds ? seconds : 1);
	return done();
}
