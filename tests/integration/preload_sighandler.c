/*
 * preload_sighandler.c - under libucma-preload.so with heap lending on,
 * the async-signal-safe calls that take lent heap memory back (madvise(),
 * mlock(), syscall(SYS_fork), _Fork()) made from a signal handler that
 * interrupted malloc() or free() on the same thread never deadlock: each
 * is done, or fails with EAGAIN when the interrupted code holds the
 * allocator's locks (src/lock.h), and the heap's data stays intact.
 * Before, such a handler waited for ever on a zone lock its own thread
 * held, and with a memory-event callback registered, on the event locks
 * (the events wait for the interrupted code to deliver them).  Each case
 * runs in a child process with a deadline: a child that
 * does not finish in time is killed and the case fails.  A TAP program;
 * preload_sighandler.sh runs it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ucma.h"
#include "tap.h"
#include "testutil.h"
#include "lent.h"

#define MiB ((size_t)1 << 20)
#define PAGE ((size_t)4096)
#define BIG (6 * MiB)
#define WORK_NS (1500ull * 1000 * 1000)	/* each case's allocating loop */
#define DEADLINE_S 30			/* a child still running then is stuck */

/* What a case's child leaves for the parent. */
struct results {
	long signals;		/* handler runs */
	long done;		/* calls that succeeded */
	long eagain;		/* calls refused with EAGAIN */
	long other;		/* calls that failed otherwise */
	int other_errno;
	long loops;
	bool data_ok;		/* every big block kept its contents */
	bool finished;
};

static struct results *res;
static char *volatile target;	/* a page of a big block, or NULL */
static volatile bool fork_armed;	/* the handler may fork once */

enum call { CALL_MADVISE, CALL_MLOCK, CALL_SYS_FORK, CALL_FORK_LIBC };
static enum call call;
static bool with_callback;	/* a memory-event callback is registered */
static bool churn;		/* the loop only lends and takes back pageblocks */

static void no_op(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	(void)ev;
	(void)addr;
	(void)len;
	(void)arg;
}

static void count(long rc)
{
	if (rc >= 0) {
		res->done++;
	} else if (errno == EAGAIN) {
		res->eagain++;
	} else {
		res->other++;
		res->other_errno = errno;
	}
}

static void handler(int sig)
{
	char *page = target;
	int saved = errno;
	long rc;

	(void)sig;
	res->signals++;
	switch (call) {
	case CALL_MADVISE:
		/* Not a hint: the preloaded madvise() takes the range back. */
		if (page)
			count(madvise(page, PAGE, MADV_DODUMP));
		break;
	case CALL_MLOCK:
		if (page) {
			rc = mlock(page, PAGE);
			count(rc);
			if (rc == 0)
				munlock(page, PAGE);
		}
		break;
	case CALL_SYS_FORK:
	case CALL_FORK_LIBC:
		/* Once per loop, while the big block is there: a fork takes
		 * its lent pageblocks back (and every other), after which
		 * nothing is lent until the next loop's, and a fork every
		 * 50 us would leave the loop no time. */
		if (churn ? res->signals % 20 != 0 : !page || !fork_armed)
			break;
		fork_armed = false;
		rc = call == CALL_SYS_FORK ? syscall(SYS_fork) : (long)_Fork();
		if (rc == 0)
			_exit(0);
		count(rc);
		break;
	}
	errno = saved;
}

/* A word every 256 bytes of the big block: cheap enough that the loop
 * spends its time in malloc() and free(), where the handler must land. */
static void stamp(uint64_t *b, uint64_t seed)
{
	for (size_t i = 0; i < BIG / 8; i += 32)
		b[i] = seed * 0x9e3779b97f4a7c15ull ^ i;
}

static bool stamped(const uint64_t *b, uint64_t seed)
{
	for (size_t i = 0; i < BIG / 8; i += 32)
		if (b[i] != (seed * 0x9e3779b97f4a7c15ull ^ i))
			return false;
	return true;
}

/*
 * The child's part: the handler runs every 50 us while this thread
 * allocates and frees blocks of every size in a loop (often inside the
 * allocator's locks), and a big block on fresh pageblocks (lent frames)
 * gives the handler a page to act on.
 */
static void work(void)
{
	struct sigaction sa = { .sa_handler = handler, .sa_flags = SA_RESTART };
	struct itimerval it = { { 0, 50 }, { 0, 50 } };
	static void *small[256];
	uint64_t end = tu_now_ns() + WORK_NS;

	/* Events queued by the handler's take-backs must wait for the
	 * interrupted code, which may hold the event locks. */
	if (with_callback && ucma_mem_event_register("sighandler", no_op, NULL) != 0)
		res->other++;
	sigemptyset(&sa.sa_mask);
	signal(SIGCHLD, SIG_IGN);	/* the handler's children are not waited for */
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	res->data_ok = true;
	while (churn && tu_now_ns() < end) {
		/* Each malloc lends fresh pageblocks (delivering the frames'
		 * UNMAP events), each trim gives them back. */
		char *big = malloc(BIG);

		if (big) {
			big[0] = 1;
			target = big;
			if (big[0] != 1)
				res->data_ok = false;
			target = NULL;
		}
		free(big);
		malloc_trim(0);
		res->loops++;
	}
	while (!churn && tu_now_ns() < end) {
		char *big = malloc(BIG);

		if (!big)
			continue;
		stamp((uint64_t *)big, (uint64_t)res->loops);
		target = big + BIG / 2;
		fork_armed = true;
		for (int k = 0; k < 20000; k++) {
			int i = k & 255;

			free(small[i]);
			small[i] = malloc(16 + (size_t)(k % 4000));
		}
		target = NULL;
		if (!stamped((const uint64_t *)big, (uint64_t)res->loops))
			res->data_ok = false;
		free(big);
		if (res->loops % 4 == 0)
			malloc_trim(0);
		res->loops++;
	}
	it = (struct itimerval){ { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &it, NULL);
	res->finished = true;
}

/* Run @c in a child; false when it did not finish before the deadline. */
static bool run_case(enum call c, int *status)
{
	pid_t pid;

	memset(res, 0, sizeof(*res));
	call = c;
	pid = tu_fork();
	if (pid == 0) {
		work();
		_exit(0);
	}
	for (int i = 0; i < DEADLINE_S * 10; i++) {
		pid_t got = waitpid(pid, status, WNOHANG);

		if (got == pid)
			return true;
		usleep(100 * 1000);
	}
	kill(pid, SIGKILL);
	tu_wait(pid);
	return false;
}

static void check_case(enum call c, const char *name)
{
	int status = -1;
	bool ended = run_case(c, &status);

	ok(ended, "%s from a signal handler: the process finishes (no deadlock)", name);
	if (!ended) {
		diag("stuck after %ld loops, %ld signals, %ld calls done, %ld refused", res->loops,
		     res->signals, res->done, res->eagain);
		skip(3, "the process was killed");
		return;
	}
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && res->finished,
	   "%s: the process exits normally (status 0x%x)", name, status);
	ok(res->data_ok && res->other == 0,
	   "%s: heap data intact, every call done or refused with EAGAIN (%ld done, %ld EAGAIN, "
	   "%ld other, last errno %d)",
	   name, res->done, res->eagain, res->other, res->other_errno);
	ok(res->done > 0, "%s: calls from the handler are done (%ld of %ld, %ld signals, %ld loops)",
	   name, res->done, res->done + res->eagain + res->other, res->signals, res->loops);
}

int main(void)
{
	char *probe;

	lent_cma_size();
	probe = malloc(4 * MiB);
	lent_require(probe);
	free(probe);
	res = tu_shared_results(sizeof(*res));
	plan(28);
	check_case(CALL_MADVISE, "madvise(MADV_DODUMP)");
	check_case(CALL_MLOCK, "mlock()");
	check_case(CALL_SYS_FORK, "syscall(SYS_fork)");
	check_case(CALL_FORK_LIBC, "_Fork()");
	with_callback = true;
	check_case(CALL_FORK_LIBC, "_Fork() with a memory-event callback");
	check_case(CALL_MADVISE, "madvise(MADV_DODUMP) with a memory-event callback");
	churn = true;
	check_case(CALL_FORK_LIBC, "_Fork() with a callback, while pageblocks are lent and given back");
	return done();
}
