/*
 * preload_lendguard.c - under libucma-preload.so with heap lending on, a
 * program that closes descriptors wholesale (closefrom(), close_range()
 * with and without CLOSE_RANGE_CLOEXEC and CLOSE_RANGE_UNSHARE, close()
 * of every number, dup2() onto a number it believes free, and the same
 * calls by number through syscall()) leaves the
 * library's userfaultfd and CMA area files alone (preload/lend_guard.c),
 * so that lending goes on and a later ucma_alloc() of the whole CMA area
 * still takes the heap's frames back with the data intact; its own
 * descriptors are closed, marked or replaced as it asked.  A TAP program;
 * preload_lendguard.sh runs it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ucma.h"
#include "tap.h"
#include "testutil.h"
#include "lent.h"

#define MiB ((size_t)1 << 20)
#define BLOCK (4 * MiB)
#define PAGE ((size_t)4096)
#define MAX_FD 1024

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif


static char *block_new(uint64_t seed)
{
	char *b = malloc(BLOCK);

	if (b)
		for (size_t off = 0; off < BLOCK; off += PAGE)
			tu_fill(b + off, PAGE, seed + off / PAGE);
	return b;
}

static bool block_good(const char *b, uint64_t seed)
{
	for (size_t off = 0; off < BLOCK; off += PAGE)
		if (!tu_check(b + off, PAGE, seed + off / PAGE))
			return false;
	return true;
}

static bool is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* The library's descriptors, by asking it about every number. */
static int owned(int *fds, int max)
{
	int n = 0;

	for (int fd = 0; fd < MAX_FD && n < max; fd++)
		if (ucma_owns_fd(fd))
			fds[n++] = fd;
	return n;
}

static bool all_open(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (!is_open(fds[i]))
			return false;
	return true;
}

/* What /proc/self/fd says @fd is ("anon_inode:[userfaultfd]", ...). */
static void fd_target(int fd, char *out, size_t len)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, out, len - 1);
	out[n > 0 ? n : 0] = '\0';
}

int main(void)
{
	int mine[8], n, again[8], m, p[2], extra, uffd = -1, null;
	char *b[3], what[128];
	bool lent = true, good = true;
	void *area;

	lent_cma_size();
	b[0] = block_new(1);
	lent_require(b[0]);
	plan_no_plan();
	n = owned(mine, 8);
	for (int i = 0; i < n; i++) {
		fd_target(mine[i], what, sizeof(what));
		if (strstr(what, "userfaultfd"))
			uffd = mine[i];
	}
	ok(n >= 2 && uffd >= 0, "the library holds its area's file and a userfaultfd (%d "
	   "descriptors, the userfaultfd is %d)", n, uffd);

	if (pipe(p) != 0)
		bail_out("pipe");
	closefrom(3);
	ok(!is_open(p[0]) && !is_open(p[1]) && all_open(mine, n),
	   "closefrom(3): the program's pipe is closed, the library's descriptors are not");

	errno = 0;
	ok(close(uffd) == -1 && errno == EBADF && is_open(uffd),
	   "close() of the library's userfaultfd: EBADF, as for a number not open; it stays");

	extra = open("/dev/null", O_RDONLY);
	ok(extra >= 3 && close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0 &&
		   (fcntl(extra, F_GETFD) & FD_CLOEXEC) && all_open(mine, n),
	   "close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) marks the program's descriptor");
	ok(close_range(3, ~0U, CLOSE_RANGE_UNSHARE) == 0 && !is_open(extra) && all_open(mine, n),
	   "close_range(3, ~0U, CLOSE_RANGE_UNSHARE) closes it, the library's stay");
	errno = 0;
	ok(close_range(5, 4, 0) == -1 && errno == EINVAL && all_open(mine, n),
	   "close_range with first > last: the kernel's EINVAL");

	/* Lending goes on (the area's file is there) after all this. */
	b[1] = block_new(2);
	lent &= b[1] && tu_on_frame(b[1]);

	null = open("/dev/null", O_RDONLY);
	errno = 0;
	ok(null >= 0 && dup2(null, uffd) == uffd, "dup2() onto the library's userfaultfd's "
	   "number returns that number (%s)", strerror(errno));
	fd_target(uffd, what, sizeof(what));
	m = owned(again, 8);
	{
		int moved = -1;

		for (int i = 0; i < m; i++) {
			char t[128];

			fd_target(again[i], t, sizeof(t));
			if (strstr(t, "userfaultfd"))
				moved = again[i];
		}
		ok(strcmp(what, "/dev/null") == 0 && !ucma_owns_fd(uffd) && m == n && moved >= 0 &&
			   moved != uffd,
		   "the program's file is there (%s), the library's userfaultfd moved to %d", what,
		   moved);
	}
	close(null);
	errno = 0;
	ok(dup2(again[0], 50) == -1 && errno == EBADF && !is_open(50),
	   "dup2() of a library descriptor: EBADF, as for a number not open");

	/* A loop closing every number, as older daemons do. */
	for (int fd = 3; fd < MAX_FD; fd++)
		close(fd);
	ok(all_open(again, m), "close() of every number from 3 on leaves the library's");

	/* The same calls by number, through syscall(). */
	extra = open("/dev/null", O_RDONLY);
	ok(extra >= 3 && syscall(SYS_close_range, 3, ~0U, 0) == 0 && !is_open(extra) &&
		   all_open(again, m),
	   "syscall(SYS_close_range, 3, ~0U, 0) closes the program's descriptor, not the "
	   "library's");
	errno = 0;
	ok(syscall(SYS_close, again[0]) == -1 && errno == EBADF && all_open(again, m),
	   "syscall(SYS_close) of a library descriptor: EBADF, it stays");
	null = open("/dev/null", O_RDONLY);
	{
		int target = again[0], after[8], k;

		errno = 0;
		ok(null >= 0 && syscall(SYS_dup3, null, target, 0) == target &&
			   (fd_target(target, what, sizeof(what)), strcmp(what, "/dev/null") == 0) &&
			   !ucma_owns_fd(target) && (k = owned(after, 8)) == m && all_open(after, k),
		   "syscall(SYS_dup3) onto a library descriptor's number: the program gets it, "
		   "the library's moved (%s)", strerror(errno));
		close(target);
		m = owned(again, 8);
	}
#ifdef SYS_dup2
	errno = 0;
	ok(syscall(SYS_dup2, again[0], 60) == -1 && errno == EBADF && !is_open(60),
	   "syscall(SYS_dup2) of a library descriptor: EBADF");
#endif
	close(null);

	b[2] = block_new(3);
	lent &= b[2] && tu_on_frame(b[2]);
	ok(lent, "fresh blocks are still lent afterwards");

	area = ucma_alloc(cma_size, 0, 0);
	for (int i = 0; i < 3; i++)
		good &= b[i] && block_good(b[i], (uint64_t)i + 1) && !tu_on_frame(b[i]);
	ok(area && good && stat_of("lend_heap_pageblocks") == 0,
	   "ucma_alloc of the whole CMA area takes every frame back: data intact (%s)",
	   area ? "allocated" : strerror(errno));
	ucma_release(area);
	for (int i = 0; i < 3; i++)
		free(b[i]);
	return done();
}
