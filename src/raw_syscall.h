/*
 * raw_syscall.h - a system call without the C library, for the few places
 * that may not go through it: the preloaded syscall() itself (longterm.c,
 * which replaces the C library's) and the helper task that moves the
 * stack of the thread taking a lent pageblock back (lend.c), which must
 * not write errno or run any instrumented or lazily bound code.
 *
 * x86_64 and aarch64 only; UCMA_HAVE_RAW_SYSCALL says whether it exists.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_RAW_SYSCALL_H
#define UCMA_RAW_SYSCALL_H

#include <errno.h>

/* A kernel result (-errno on failure) as the C library returns it: -1
 * and errno. */
static inline __attribute__((unused)) long ucma_raw_result(long ret)
{
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

#if defined(__x86_64__) || defined(__aarch64__)
#define UCMA_HAVE_RAW_SYSCALL 1

/* The system call @nr with six arguments: the kernel's result (-errno on
 * failure), errno untouched.  Always inlined, so that an uninstrumented
 * caller stays uninstrumented. */
static inline __attribute__((always_inline, unused)) long
ucma_raw_syscall6(long nr, long a1, long a2, long a3, long a4, long a5, long a6)
{
#if defined(__x86_64__)
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#else
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a1;
	register long x1 __asm__("x1") = a2;
	register long x2 __asm__("x2") = a3;
	register long x3 __asm__("x3") = a4;
	register long x4 __asm__("x4") = a5;
	register long x5 __asm__("x5") = a6;

	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory", "cc");
	return x0;
#endif
}
#endif /* __x86_64__ || __aarch64__ */

#endif /* UCMA_RAW_SYSCALL_H */
