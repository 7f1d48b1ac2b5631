/*
 * lock.h - the small futex lock of the malloc family (central bins in
 * slab.c, thread caches in tcache.c).
 *
 * Three states (0 free, 1 held, 2 held and maybe waited for), as in
 * Drepper's "Futexes Are Tricky": taking a free lock is one
 * compare-and-swap, releasing an uncontended one one exchange.  A waiter
 * spins briefly first: these locks are held for a few list and bit
 * operations.  Not pthread mutexes because the fork handlers hold every
 * one of them at once, which is more than ThreadSanitizer's deadlock
 * detector can track; TSan still sees the acquire/release pairs.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_LOCK_H
#define UCMA_LOCK_H

#include "internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline void ucma_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
}

/* The futex calls leave errno alone: a successful malloc or any free
 * must not change it. */
static __attribute__((noinline, unused)) void ucma_lock_slow(uint32_t *l)
{
	int saved = errno;
	uint32_t c;

	for (int i = 0; i < 100; i++) {
		c = 0;
		if (__atomic_load_n(l, __ATOMIC_RELAXED) == 0 &&
		    __atomic_compare_exchange_n(l, &c, 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return;
		ucma_cpu_relax();
	}
	c = __atomic_exchange_n(l, 2, __ATOMIC_ACQUIRE);
	while (c != 0) {
		syscall(SYS_futex, l, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
		c = __atomic_exchange_n(l, 2, __ATOMIC_ACQUIRE);
	}
	errno = saved;
}

static __attribute__((noinline, unused)) void ucma_unlock_wake(uint32_t *l)
{
	int saved = errno;

	syscall(SYS_futex, l, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	errno = saved;
}

static inline void ucma_lock(uint32_t *l)
{
	uint32_t c = 0;

	if (UCMA_UNLIKELY(!__atomic_compare_exchange_n(l, &c, 1, false, __ATOMIC_ACQUIRE,
						       __ATOMIC_RELAXED)))
		ucma_lock_slow(l);
}

static inline void ucma_unlock(uint32_t *l)
{
	if (UCMA_UNLIKELY(__atomic_exchange_n(l, 0, __ATOMIC_RELEASE) == 2))
		ucma_unlock_wake(l);
}

#endif /* UCMA_LOCK_H */
