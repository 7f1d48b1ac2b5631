/*
 * hangs.c - regression tests for deadlocks between fork, grace periods
 * and pins.  Each scenario runs in a child process of its own (its own
 * arena and environment) that the test waits for with a time limit: a
 * scenario that does not finish in time is a hang, reported with the
 * scenario's name, and the child is killed.
 *
 * 1. fork() in a program that only makes contiguous allocations, while
 *    two threads allocate and release: the fork handlers of the drain
 *    lock used to be registered by the first ucma_halloc() only, and a
 *    child inherited the lock held and hung in its first ucma_alloc().
 * 2. ucma_pin() inside a read-side section of a handle whose entry is
 *    being freed and reused while memory is full: ucma_halloc() used to
 *    keep the new entry held through a drain, and the drain's grace
 *    period waited for the pinning reader, which waited for the entry.
 * 3. fork() inside a read-side section while another thread's ucma_hfree()
 *    drains and the compaction thread runs: the fork handler waited for
 *    the compaction thread, which waited for the drain, whose grace period
 *    waited for the forking thread.  The child of such a fork cannot wait
 *    for grace periods: it must say so (EDEADLK) and otherwise work.
 * 4. fork() while other threads hold handle-table entries exclusively
 *    (compaction moving objects, frees): a child that inherited an entry
 *    held by a thread it does not have waited forever to pin it.
 * 5. fork() while other threads call ucma_config_from_env(): the lock of
 *    the area lists it keeps was taken by no fork handler, and a child
 *    that inherited it held waited forever in its own call.
 *
 * Duration of 2: UCMA_STRESS_SECONDS (default 2).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include "tap.h"
#include "testutil.h"

#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucma.h>

/*
 * ThreadSanitizer cannot follow threads created in the child of a
 * multi-threaded process: under it, no child may start the compaction
 * thread, which the first contiguous allocation of a child would.
 */
#ifdef UCMA_TSAN
static const bool under_tsan = true;
#else
static const bool under_tsan = false;
#endif

#define SCENARIO_LIMIT_S 120	/* generous: sanitizer builds on a loaded machine */
#define CHILD_LIMIT_S 20	/* a grandchild that takes longer has hung */

static atomic_int stop;
static int seconds = 2;

/*
 * Wait for @pid at most @limit_s seconds.  Returns its wait status, or -1
 * after killing it when it did not end in time.
 */
static int wait_limited(pid_t pid, int limit_s)
{
	uint64_t end = tu_now_ns() + (uint64_t)limit_s * 1000000000ull;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return st;
		if (r < 0 && errno != EINTR)
			return -1;
		if (tu_now_ns() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(2000);
	}
}

/* Fork @forks times, each child exiting with what @child() returns, until
 * a child hangs or fails: 1 then, else 0. */
static int forks_checked(int forks, int (*child)(void))
{
	uint64_t t0 = tu_now_ns();

	for (int i = 0; i < forks && tu_fork_loop_on(i, 50, t0); i++) {
		pid_t p = fork();
		int st;

		if (p == 0)
			_exit(child());
		st = wait_limited(p, CHILD_LIMIT_S);
		if (st == -1) {
			printf("# fork %d: the child hung\n", i);
			return 1;
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			return 1;
	}
	return 0;
}

/* Run @fn in a child; ok() on its exit status; a hang is a failure. */
static void scenario(const char *name, int (*fn)(void))
{
	pid_t pid;
	int st;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		bail_out("fork: %s", strerror(errno));
	if (pid == 0) {
		int rc = fn();

		fflush(stdout);
		_exit(rc);
	}
	st = wait_limited(pid, SCENARIO_LIMIT_S);
	if (st == -1)
		ok(0, "%s: hung (killed after %d s)", name, SCENARIO_LIMIT_S);
	else
		ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s (status %#x)", name, st);
}

/* ------------------------------------------------------------------------ */
/* 1. fork with contiguous buffers only                                      */
/* ------------------------------------------------------------------------ */

static void *contig_worker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		void *p = ucma_alloc(64 << 10, 0, 0);

		if (p)
			ucma_release(p);
	}
	return NULL;
}

static int fork_contig(void)
{
	pthread_t t[2];
	int bad = 0, hung = 0;

	if (under_tsan)
		setenv("UCMA_COMPACT", "0", 1);
	uint64_t t0 = tu_now_ns();

	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, contig_worker, NULL);
	for (int i = 0; i < 200 && !hung && tu_fork_loop_on(i, 50, t0); i++) {
		pid_t p = fork();
		int st;

		if (p == 0) {
			void *b = ucma_alloc(64 << 10, 0, 0);

			_exit(b ? 0 : 1);
		}
		st = wait_limited(p, CHILD_LIMIT_S);
		if (st == -1) {
			printf("# fork %d: the child hung\n", i);
			hung = 1;
		} else if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			bad++;
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	if (bad)
		printf("# %d children could not allocate\n", bad);
	return hung || bad;
}

/* ------------------------------------------------------------------------ */
/* 2. pins inside read-side sections versus entry reuse under pressure       */
/* ------------------------------------------------------------------------ */

static _Atomic ucma_handle_t shared;
static atomic_long reader_loops;

/* Stretches the reader's sections: a signal that spins 30 us every 70 us. */
static void spin_handler(int sig)
{
	uint64_t t0 = tu_now_ns();

	(void)sig;
	while (tu_now_ns() - t0 < 30000)
		;
}

static void *pin_reader(void *arg)
{
	struct sigevent sev = { 0 };
	struct itimerspec its = { { 0, 70000 }, { 0, 70000 } };
	timer_t tm;

	(void)arg;
	signal(SIGRTMIN, spin_handler);
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = SIGRTMIN;
	sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
	if (timer_create(CLOCK_MONOTONIC, &sev, &tm) == 0)
		timer_settime(tm, 0, &its, NULL);
	while (!atomic_load(&stop)) {
		ucma_handle_t h = atomic_load(&shared);
		void *p;

		ucma_read_lock();
		p = ucma_pin(h, 0);
		if (p)
			ucma_unpin(h);
		ucma_read_unlock();
		atomic_fetch_add(&reader_loops, 1);
	}
	return NULL;
}

static int pin_reuse(void)
{
	enum { SZ = 65536, MAX = 4096 };
	static ucma_handle_t fill[MAX];
	uint64_t end;
	long recycles = 0;
	int n = 0;
	pthread_t r;

	setenv("UCMA_ARENA_SIZE", "64M", 1);
	while (n < MAX && (fill[n] = ucma_halloc(SZ, 0)) != 0)
		n++;
	if (n < 2) {
		printf("# could not fill the arena (%d objects)\n", n);
		return 1;
	}
	atomic_store(&shared, fill[--n]);
	pthread_create(&r, NULL, pin_reader, NULL);
	end = tu_now_ns() + (uint64_t)seconds * 1000000000ull;
	while (tu_now_ns() < end) {
		ucma_handle_t h;

		if (ucma_hfree(atomic_load(&shared)) != 0)
			continue;	/* pinned right now */
		h = ucma_halloc(SZ, 0);	/* no free page: must drain first */
		if (!h) {
			printf("# halloc after hfree failed: %s\n", strerror(errno));
			atomic_store(&stop, 1);
			pthread_join(r, NULL);
			return 1;
		}
		atomic_store(&shared, h);
		recycles++;
	}
	atomic_store(&stop, 1);
	pthread_join(r, NULL);
	printf("# %ld recycles, %ld reader loops\n", recycles, (long)atomic_load(&reader_loops));
	return recycles == 0 || atomic_load(&reader_loops) == 0;
}

/* ------------------------------------------------------------------------ */
/* 3. fork inside a read-side section                                        */
/* ------------------------------------------------------------------------ */

#define CHURN_N 20000
static ucma_handle_t churn_h[CHURN_N];

static void *churn(void *arg)
{
	uint64_t s = 7;

	(void)arg;
	while (!atomic_load(&stop)) {
		unsigned i = (unsigned)(tu_rand(&s) % CHURN_N);

		if (churn_h[i]) {
			ucma_hfree(churn_h[i]);
			churn_h[i] = 0;
		} else {
			churn_h[i] = ucma_halloc(16 + tu_rand(&s) % 20000, 0);
		}
	}
	return NULL;
}

/*
 * The child of a fork made inside a section: it closes the section it
 * inherited, then checks that waits fail cleanly and the rest works.
 */
static int degraded_child(void)
{
	ucma_handle_t h;
	void *p;

	ucma_read_unlock();
	if (ucma_compact(UCMA_COMPACT_SYNC_FULL) != -1 || errno != EDEADLK)
		return 2;
	h = ucma_halloc(100, UCMA_H_ZERO);
	if (!h)
		return 3;
	p = ucma_pin(h, 0);
	if (!p)
		return 4;
	memset(p, 1, 100);
	if (ucma_unpin(h) != 0 || ucma_hfree(h) != 0)
		return 5;
	ucma_read_lock();
	if (ucma_deref(h) != NULL || errno != EINVAL)
		return 6;
	ucma_read_unlock();
	p = ucma_malloc(1000);
	if (!p)
		return 7;
	ucma_free(p);
	return 0;
}

static int fork_in_section(void)
{
	pthread_t t;
	int bad = 0;
	uint64_t t0;

	setenv("UCMA_HUGEPAGES", "thp", 1);
	setenv("UCMA_COMPACT_PROACTIVENESS", "100", 1);
	setenv("UCMA_COMPACT_INTERVAL_MS", "1", 1);
	for (int i = 0; i < CHURN_N; i++)
		churn_h[i] = ucma_halloc(16 + (unsigned)(i * 7919) % 20000, 0);
	for (int i = 0; i < CHURN_N; i += 2) {
		ucma_hfree(churn_h[i]);
		churn_h[i] = 0;
	}
	pthread_create(&t, NULL, churn, NULL);
	t0 = tu_now_ns();
	for (int i = 0; i < 300 && !bad && tu_fork_loop_on(i, 50, t0); i++) {
		pid_t p;
		int st;

		ucma_read_lock();
		p = fork();
		if (p == 0)
			_exit(degraded_child());
		ucma_read_unlock();
		st = wait_limited(p, CHILD_LIMIT_S);
		if (st == -1) {
			printf("# fork %d: the child hung\n", i);
			bad = 1;
		} else if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			printf("# fork %d: the child failed check %d\n", i,
			       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
			bad = 1;
		}
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	return bad;
}

/* ------------------------------------------------------------------------ */
/* 4. fork while entries are held                                            */
/* ------------------------------------------------------------------------ */

#define HOLD_N 4096
static _Atomic ucma_handle_t hold_h[HOLD_N];

static void *compactor(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		ucma_compact(UCMA_COMPACT_SYNC_LIGHT);
	return NULL;
}

static void *recycler(void *arg)
{
	uint64_t s = 11;

	(void)arg;
	while (!atomic_load(&stop)) {
		unsigned i = (unsigned)(tu_rand(&s) % HOLD_N);
		ucma_handle_t h = atomic_exchange(&hold_h[i], 0);

		if (h)
			ucma_hfree(h);
		atomic_store(&hold_h[i], ucma_halloc(16 + tu_rand(&s) % 8000, 0));
	}
	return NULL;
}

/* Every live handle can be pinned and freed in the child. */
static int held_child(void)
{
	for (int i = 0; i < HOLD_N; i++) {
		ucma_handle_t h = atomic_load(&hold_h[i]);

		if (h && ucma_pin(h, 0)) {
			ucma_unpin(h);
			ucma_hfree(h);
		}
	}
	return 0;
}

static int fork_holds(void)
{
	pthread_t c, r;
	int bad;

	for (int i = 0; i < HOLD_N; i++)
		atomic_store(&hold_h[i], ucma_halloc(16 + (unsigned)(i * 131) % 8000, 0));
	pthread_create(&c, NULL, compactor, NULL);
	pthread_create(&r, NULL, recycler, NULL);
	bad = forks_checked(200, held_child);
	atomic_store(&stop, 1);
	pthread_join(c, NULL);
	pthread_join(r, NULL);
	return bad;
}

/* ------------------------------------------------------------------------ */
/* 5. fork while other threads call ucma_config_from_env()                   */
/* ------------------------------------------------------------------------ */

static void *config_caller(void *arg)
{
	struct ucma_config c;

	(void)arg;
	while (!atomic_load(&stop))
		ucma_config_from_env(&c);
	return NULL;
}

static int config_child(void)
{
	struct ucma_config c;

	return ucma_config_from_env(&c) == 0 ? 0 : 1;
}

static int fork_config(void)
{
	enum { LISTS = 64, FORKS = 300 };
	struct ucma_config c;
	char buf[32];
	pthread_t t[2];
	int bad;

	/* Lists kept before: the threads ask for the first, last on the
	 * list, so that each call walks them all under the lock. */
	for (int i = LISTS; i > 0; i--) {
		snprintf(buf, sizeof(buf), "dev:%dM", 2 * i);
		setenv("UCMA_CMA_AREAS", buf, 1);
		if (ucma_config_from_env(&c) != 0)
			return 1;
	}
	snprintf(buf, sizeof(buf), "dev:%dM", 2 * LISTS);
	setenv("UCMA_CMA_AREAS", buf, 1);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, config_caller, NULL);
	bad = forks_checked(FORKS, config_child);
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return bad;
}

int main(void)
{
	const char *env = getenv("UCMA_STRESS_SECONDS");

	if (env && atoi(env) > 0)
		seconds = atoi(env);
	plan(5);
	/* HANGS_ONLY=N runs scenario N alone (when chasing one). */
	if (getenv("HANGS_ONLY")) {
		int only = atoi(getenv("HANGS_ONLY"));
		int (*fns[])(void) = { fork_contig, pin_reuse, fork_in_section, fork_holds,
				       fork_config };

		if (only < 1 || only > 5)
			bail_out("HANGS_ONLY=%d: scenarios are 1 to 5", only);
		scenario("the scenario asked for", fns[only - 1]);
		for (int i = 1; i < 5; i++)
			skip(1, "HANGS_ONLY=%d", only);
		return done();
	}
	scenario("fork with contiguous buffers only, threads allocating", fork_contig);
	scenario("pin inside a read-side section, entries reused under pressure", pin_reuse);
	scenario("fork inside a read-side section, drains and compaction running",
		 fork_in_section);
	scenario("fork while other threads hold handle entries", fork_holds);
	scenario("fork while other threads call ucma_config_from_env()", fork_config);
	return done();
}
