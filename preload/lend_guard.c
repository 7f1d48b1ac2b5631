/*
 * lend_guard.c - the program's close(), close_range(), closefrom(), dup2()
 * and dup3() kept off the library's own descriptors.
 *
 * The library holds a few descriptors for the life of the process: the
 * file of each CMA area, and, with heap lending, the userfaultfd that
 * takes lent frames back (lend.c).  Programs close descriptors wholesale
 * (daemons at start-up, a child before exec: closefrom(3), close_range(3,
 * ~0U, 0), a loop of close()), and they dup2() onto numbers they believe
 * free.  Closing the userfaultfd would make every later take-back fail
 * (ucma_alloc() could never have those frames again), and a take-back in
 * flight would lose it half way (closing a userfaultfd wakes the writers
 * waiting on it, which then write into the old frame while it is being
 * copied: a lost update); closing an area's file stops lending.  So,
 * seen from the program, the library's descriptors are not open:
 *
 *   close(fd)          on one of them fails with EBADF, what close() says
 *                      for a number that is not open.  The program never
 *                      opened it, so it cannot mean to close it; a loop
 *                      closing every number ignores the error, as it does
 *                      for the numbers that are free.
 *   close_range()      closes everything else in the range: the range is
 *                      split around the library's descriptors.  The flags
 *                      keep their meaning: CLOSE_RANGE_CLOEXEC marks the
 *                      pieces; CLOSE_RANGE_UNSHARE unshares the descriptor
 *                      table first (unshare(CLONE_FILES)), then closes the
 *                      pieces in the thread's own table.  Flags the kernel
 *                      does not know go to it unsplit (it refuses them).
 *   closefrom(lowfd)   close_range(lowfd, ~0U, 0) as above.
 *   dup2(), dup3()     onto one of them: the program gets the number it
 *                      asked for, as it would if that number were free;
 *                      the library's descriptor moves out of the way first
 *                      (F_DUPFD_CLOEXEC to a free number from 256 on,
 *                      ucma_lend_move_fd(), under the lock its users
 *                      hold).  Refusing would break the common
 *                      dup2(null, 0) of a daemon that had closed its
 *                      standard descriptors before the library opened
 *                      its own.  When no number is free the call fails
 *                      with EMFILE and nothing changes.  With one of them
 *                      as the descriptor to duplicate, dup2() and dup3()
 *                      fail with EBADF, as close() does.
 *
 *   syscall()          with SYS_close, SYS_close_range, SYS_dup2 or
 *                      SYS_dup3: the same as the functions (longterm.c's
 *                      syscall() comes here, x86-64 and AArch64).
 *
 * Not covered: the C library's own closes (fclose() of a FILE the
 * program made on such a number with fdopen(), which it cannot have been
 * given), io_uring's close operation, and statically linked code.
 * ucma_owns_fd() is public for programs that close descriptors by such
 * means.
 *
 * The real calls are system calls, made with the system call instruction
 * where raw_syscall.h has it (the preloaded syscall() comes here, so it
 * cannot be what this file calls), so nothing here needs dlsym() or the
 * C library's wrappers, which this library replaces.
 * close() is async-signal-safe and stays so: ucma_owns_fd() and
 * ucma_lend_owned_fds() only read (the set changes at start-up, in the
 * child of a fork before it returns, and under lend.lock in
 * ucma_lend_move_fd(), which a signal handler's dup2() may take: lend.c
 * blocks signals wherever it holds that lock, but across a fork).
 *
 * Locking: none here.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ucma.h"
#include "lend.h"
#include "raw_syscall.h"
#include "interpose.h"

#define GUARD_EXPORT __attribute__((visibility("default")))

/* Newer than some headers (linux/close_range.h, Linux 5.9 and 5.11). */
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The system call itself: -1 and errno on failure, as syscall() says. */
static long sys3(long nr, long a, long b, long c)
{
#ifdef UCMA_HAVE_RAW_SYSCALL
	return ucma_raw_result(ucma_raw_syscall6(nr, a, b, c, 0, 0, 0));
#else
	return syscall(nr, a, b, c);
#endif
}

static int sys_close_range(unsigned first, unsigned last, unsigned flags)
{
	return (int)sys3(SYS_close_range, first, last, flags);
}

/* close_range() of the program's descriptors in [@first, @last], flags
 * without CLOSE_RANGE_UNSHARE: the pieces between the library's. */
static int close_pieces(unsigned first, unsigned last, unsigned flags)
{
	int fds[UCMA_LEND_MAX_FDS], n = ucma_lend_owned_fds(fds);

	for (int i = 0; i < n && first <= last; i++) {
		unsigned fd = (unsigned)fds[i];

		if (fd < first || fd > last)
			continue;
		if (fd > first && sys_close_range(first, fd - 1, flags) != 0)
			return -1;
		if (fd == UINT_MAX)
			return 0;
		first = fd + 1;
	}
	return first <= last ? sys_close_range(first, last, flags) : 0;
}

GUARD_EXPORT int close(int fd)
{
	int rc;

	if (ucma_owns_fd(fd)) {
		errno = EBADF;
		return -1;
	}
	rc = (int)sys3(SYS_close, fd, 0, 0);
	/* Closed even when the kernel says EINTR or EIO. */
	if (fd >= 0)
		ucma_preload_dio_forget((unsigned)fd, (unsigned)fd);
	return rc;
}

GUARD_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	unsigned f = (unsigned)flags;
	int rc;

	if (first > last || (f & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)))
		return sys_close_range(first, last, f);	/* EINVAL from the kernel */
	if (f & CLOSE_RANGE_UNSHARE) {
		if (unshare(CLONE_FILES) != 0)
			return -1;
		f &= ~CLOSE_RANGE_UNSHARE;
	}
	rc = close_pieces(first, last, f);
	if (!(f & CLOSE_RANGE_CLOEXEC))
		ucma_preload_dio_forget(first, last);
	return rc;
}

/*
 * As the C library's: close_range() first; a kernel without it (before
 * 5.9) gets close() of every number up to the limit, the library's
 * skipped.
 */
GUARD_EXPORT void closefrom(int lowfd)
{
	long max;

	if (lowfd < 0)
		lowfd = 0;
	if (close_range((unsigned)lowfd, ~0U, 0) == 0 || errno != ENOSYS)
		return;
	max = sysconf(_SC_OPEN_MAX);
	for (long fd = lowfd; fd < (max > 0 && max < INT_MAX ? max : 65536); fd++)
		close((int)fd);
}

/* dup2() and dup3() onto @newfd: the library's descriptor there moves;
 * false with errno when @oldfd is the library's or nothing can move. */
static bool dup_target_free(int oldfd, int newfd)
{
	if (ucma_owns_fd(oldfd)) {
		errno = EBADF;
		return false;
	}
	if (oldfd != newfd && ucma_owns_fd(newfd) && ucma_lend_move_fd(newfd) != 0) {
		/* Refused from a signal handler inside the allocator: EBUSY,
		 * dup2()'s "try again"; otherwise no number was free. */
		errno = errno == EAGAIN ? EBUSY : EMFILE;
		return false;
	}
	return true;
}

/* A number now names another file (dio_guard.c's cache). */
static int dup_done(int newfd)
{
	if (newfd >= 0)
		ucma_preload_dio_forget((unsigned)newfd, (unsigned)newfd);
	return newfd;
}

GUARD_EXPORT int dup2(int oldfd, int newfd)
{
	if (!dup_target_free(oldfd, newfd))
		return -1;
	if (oldfd == newfd)	/* dup2() of a number onto itself: is it open? */
		return sys3(SYS_fcntl, oldfd, F_GETFD, 0) < 0 ? -1 : newfd;
	return dup_done((int)sys3(SYS_dup3, oldfd, newfd, 0));
}

GUARD_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	if (!dup_target_free(oldfd, newfd))
		return -1;
	return dup_done((int)sys3(SYS_dup3, oldfd, newfd, flags));
}

bool ucma_preload_guard_syscall(long nr, const long a[6], long *ret)
{
	switch (nr) {
	case SYS_close:
		*ret = close((int)a[0]);
		return true;
	case SYS_close_range:
		*ret = close_range((unsigned)a[0], (unsigned)a[1], (int)a[2]);
		return true;
#ifdef SYS_dup2
	case SYS_dup2:
		*ret = dup2((int)a[0], (int)a[1]);
		return true;
#endif
	case SYS_dup3:
		*ret = dup3((int)a[0], (int)a[1], (int)a[2]);
		return true;
	default:
		return false;
	}
}
