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

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
