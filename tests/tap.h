/*
 * tap.h - a minimal Test Anything Protocol producer for ucma's tests.
 *
 * Usage: plan(N) or plan_no_plan(); ok(cond, "what"); ... ; return done();
 * skip_all("reason") ends a test that cannot run here (no root, no
 * hugepages): Automake's TAP driver counts it as SKIP.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_TAP_H
#define UCMA_TAP_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int tap_n, tap_failed, tap_planned = -1;

static inline void plan(int n)
{
	tap_planned = n;
	printf("1..%d\n", n);
	fflush(stdout);
}

static inline void plan_no_plan(void)
{
	tap_planned = -1;
}

__attribute__((format(printf, 2, 3))) static inline int ok(int cond, const char *fmt, ...)
{
	va_list ap;

	tap_n++;
	printf("%s %d - ", cond ? "ok" : "not ok", tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!cond)
		tap_failed++;
	return cond;
}

__attribute__((format(printf, 1, 2))) static inline void diag(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

__attribute__((format(printf, 1, 2), noreturn)) static inline void skip_all(const char *fmt, ...)
{
	va_list ap;

	printf("1..0 # SKIP ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(0);
}

__attribute__((format(printf, 2, 3))) static inline void skip(int n, const char *fmt, ...)
{
	va_list ap;
	char why[256];

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	while (n-- > 0) {
		tap_n++;
		printf("ok %d # SKIP %s\n", tap_n, why);
	}
	fflush(stdout);
}

__attribute__((format(printf, 1, 2), noreturn)) static inline void bail_out(const char *fmt, ...)
{
	va_list ap;

	printf("Bail out! ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

/*
 * tap_in_child() - run @fn in a child process, which continues the TAP
 * numbering and sends its counters back through a pipe, then calls
 * @before_exit (if any) and exit() (so its atexit handlers run: a hugetlb
 * pool reserved there is given back).  A child that dies counts as one
 * failure.  For cases that need a process of their own.
 */
static inline void tap_in_child(const char *what, void (*fn)(void), void (*before_exit)(void))
{
	int fds[2], status;
	int counts[2] = { 0, 0 };
	pid_t pid;

	if (pipe(fds) != 0)
		bail_out("pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		fn();
		counts[0] = tap_n;
		counts[1] = tap_failed;
		if (write(fds[1], counts, sizeof(counts)) != (ssize_t)sizeof(counts))
			_exit(2);
		if (before_exit)
			before_exit();
		exit(0);
	}
	close(fds[1]);
	if (pid < 0 || read(fds[0], counts, sizeof(counts)) != (ssize_t)sizeof(counts)) {
		close(fds[0]);
		if (pid > 0)
			waitpid(pid, &status, 0);
		ok(0, "%s: the child process died", what);
		return;
	}
	close(fds[0]);
	waitpid(pid, &status, 0);
	tap_n = counts[0];
	tap_failed += counts[1];
}

static inline int done(void)
{
	if (tap_planned < 0)
		printf("1..%d\n", tap_n);
	else if (tap_planned != tap_n)
		printf("# planned %d tests but ran %d\n", tap_planned, tap_n);
	fflush(stdout);
	return tap_failed || (tap_planned >= 0 && tap_planned != tap_n) ? 1 : 0;
}

#endif /* UCMA_TAP_H */
