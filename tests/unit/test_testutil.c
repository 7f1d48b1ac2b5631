/*
 * test_testutil.c - the hugepage pool that tests and benchmarks reserve
 * goes back as it was however their process ends: by exit(), by a signal
 * that skips atexit() (SIGPIPE from "| head", SIGINT from ^C, SIGTERM,
 * abort()), and not by the end of a forked child, which never added the
 * pages.  A pool left grown makes every later hugetlb test skip.
 *
 * Each case runs in a child; this process reads the pool before and after
 * under the lock the children take, so other tests running in parallel
 * (which give their pages back before they release it) do not disturb the
 * reading.  Needs root and a 2 MiB pool on the kernel; skipped otherwise.
 *
 * SPDX-License-Identifier: MIT
 */
#include "tap.h"
#include "testutil.h"

#include <signal.h>
#include <sys/wait.h>

#define POOL "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"

enum ending { END_EXIT, END_SIGTERM, END_SIGPIPE, END_ABORT, END_CHILD_SIGNALLED };

static const char *const ending_name[] = {
	"exit()", "SIGTERM", "SIGPIPE from a closed pipe", "abort()",
	"a forked child killed by SIGTERM, then exit()",
};

/* The pool's size, read under the reservation lock. */
static long pool_locked(void)
{
	int fd = open(TU_HUGEPAGES_LOCK, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	long v;

	if (fd < 0 || flock(fd, LOCK_EX) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	v = tu_read_long(POOL);
	close(fd);
	return v;
}

/* In the child: reserve two pages, check they are there, end as asked.
 * Exit status 3: the reservation failed; 4: the pool did not grow; 5: a
 * grandchild's death gave the pages back. */
static void child(enum ending how, long before)
{
	char why[256];
	int fds[2];
	pid_t pid;
	int st;

	if (tu_hugepages_reserve(2048, 2, why, sizeof(why)) != 0) {
		fprintf(stderr, "reserve: %s\n", why);
		_exit(3);
	}
	if (tu_read_long(POOL) < before + 2)
		_exit(4);
	switch (how) {
	case END_EXIT:
		exit(0);
	case END_SIGTERM:
		raise(SIGTERM);
		break;
	case END_SIGPIPE:
		if (pipe(fds) == 0) {
			close(fds[0]);
			if (write(fds[1], "x", 1) < 0)
				break;
		}
		break;
	case END_ABORT:
		abort();
	case END_CHILD_SIGNALLED:
		pid = fork();
		if (pid == 0) {
			raise(SIGTERM);
			_exit(0);
		}
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			_exit(6);
		if (tu_read_long(POOL) < before + 2)
			_exit(5);
		exit(0);
	}
	_exit(7);	/* the signal did not end the process */
}

static void one_case(enum ending how)
{
	static const int expect_sig[] = { 0, SIGTERM, SIGPIPE, SIGABRT, 0 };
	long before = pool_locked(), after;
	pid_t pid;
	int st = 0;

	fflush(stdout);
	pid = fork();
	if (pid == 0)
		child(how, before);
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		ok(0, "%s: fork/wait: %s", ending_name[how], strerror(errno));
		ok(0, "%s: no pool reading", ending_name[how]);
		return;
	}
	after = pool_locked();
	if (expect_sig[how])
		ok(WIFSIGNALED(st) && WTERMSIG(st) == expect_sig[how],
		   "%s: the child died of signal %d (status %#x)", ending_name[how], expect_sig[how],
		   st);
	else
		ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the child exited 0 (status %#x)",
		   ending_name[how], st);
	ok(before >= 0 && after == before, "%s: the pool is back to %ld pages (now %ld)",
	   ending_name[how], before, after);
}

int main(void)
{
	char why[256];

	if (geteuid() != 0)
		skip_all("reserving hugepages needs root");
	if (access(POOL, W_OK) != 0)
		skip_all("no 2 MiB hugepage pool on this kernel");
	/* Can the kernel grow the pool at all?  (A child tries; this
	 * process must not hold the lock its cases take.) */
	fflush(stdout);
	if (fork() == 0)	/* exit(), not _exit(): the pages go back */
		exit(tu_hugepages_reserve(2048, 2, why, sizeof(why)) == 0 ? 0 : 3);
	{
		int st = 0;

		wait(&st);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			skip_all("the kernel does not give 2 free 2 MiB hugepages here");
	}
	plan(10);
	for (int how = END_EXIT; how <= END_CHILD_SIGNALLED; how++)
		one_case((enum ending)how);
	return done();
}
