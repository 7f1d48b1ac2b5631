/*
 * util.c - messages, and the per-thread count of the library's locks
 * held (lock.h).
 *
 * Messages go to fd 2 with write(2) from a stack buffer: this code may run
 * inside malloc under LD_PRELOAD, where stdio could allocate or deadlock.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__thread unsigned ucma_locks_held __attribute__((tls_model("initial-exec")));

static void ucma_vlog(const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;
	ssize_t w;

	memcpy(buf, "ucma: ", 6);
	vsnprintf(buf + 6, sizeof(buf) - 7, fmt, ap);
	n = strlen(buf);
	if (n == 0 || buf[n - 1] != '\n')
		buf[n++] = '\n';
	for (size_t off = 0; off < n; off += (size_t)w) {
		w = write(2, buf + off, n - off);
		if (w <= 0)
			break;
	}
}

void ucma_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ucma_vlog(fmt, ap);
	va_end(ap);
}

void ucma_fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ucma_vlog(fmt, ap);
	va_end(ap);
	abort();
}
