/*
 * lock.h - the small futex lock of the malloc family (central bins in
 * slab.c, per-CPU page lists in pcp.c), and the count of the library's
 * locks that the calling thread holds.
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
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * Every lock of the library is taken through ucma_lock() or
 * ucma_mutex_lock() below, which count it in ucma_locks_held, this
 * thread's number of the library's locks held (or being taken).  The
 * count is for signal handlers: a handler that interrupted this thread
 * inside the allocator may call what the preloaded library turns into a
 * take-back of lent heap memory (madvise(), mlock(), _Fork(), direct I/O
 * are all async-signal-safe), and that take-back needs the zone and
 * per-CPU list locks that the interrupted code may hold: it would wait on
 * its own thread for ever.  Blocking signals around each lock instead
 * would cost two system calls per page allocation.  So the take-back
 * paths that a handler can reach check the count and fail with EAGAIN
 * when it is not zero (lend.c, ucma_lend_locks_held()).  The count goes up
 * before the lock is taken and down after it is released, with compiler
 * barriers, so a handler never sees zero while a lock is held; a plain
 * increment is enough, a handler leaves the count as it found it.
 */
UCMA_INTERNAL extern __thread unsigned ucma_locks_held __attribute__((tls_model("initial-exec")));

/*
 * The static locks that every fork takes and releases (fork.c) sit
 * together in one section, a page or two, each on a cache line of its
 * own.  The release after a fork writes every page that holds one while
 * parent and child still share it: a copy-on-write fault per page on
 * each side.  Gathered here, a fork and wait with a thread took 59 page
 * faults instead of 69 (make bench-fork, tests/bench/RESULTS.md).
 */
#define UCMA_FORK_LOCK __attribute__((section("ucma_fork_locks"), aligned(64)))

static inline void ucma_locks_held_inc(void)
{
	ucma_locks_held++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline void ucma_locks_held_dec(void)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	ucma_locks_held--;
}

/* Sleep while *@word holds @val (until @ts passes, if not NULL), or wake
 * every thread asleep on @word: the library's own futex words, private
 * to the process. */
static inline void ucma_futex_wait(void *word, uint32_t val, const struct timespec *ts)
{
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, ts, NULL, 0);
}

static inline void ucma_futex_wake_all(void *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

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

	ucma_locks_held_inc();
	if (UCMA_UNLIKELY(!__atomic_compare_exchange_n(l, &c, 1, false, __ATOMIC_ACQUIRE,
						       __ATOMIC_RELAXED)))
		ucma_lock_slow(l);
}

/* Take @l if nobody holds it: true when taken.  For paths that may run
 * while the caller holds what a lock holder waits for (see its callers). */
static inline bool ucma_trylock(uint32_t *l)
{
	uint32_t c = 0;

	if (!__atomic_compare_exchange_n(l, &c, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return false;
	ucma_locks_held_inc();
	return true;
}

static inline void ucma_unlock(uint32_t *l)
{
	if (UCMA_UNLIKELY(__atomic_exchange_n(l, 0, __ATOMIC_RELEASE) == 2))
		ucma_unlock_wake(l);
	ucma_locks_held_dec();
}

/* The library's pthread mutexes, counted as above. */
static inline void ucma_mutex_lock(pthread_mutex_t *m)
{
	ucma_locks_held_inc();
	pthread_mutex_lock(m);
}

static inline int ucma_mutex_trylock(pthread_mutex_t *m)
{
	int rc;

	ucma_locks_held_inc();
	rc = pthread_mutex_trylock(m);
	if (rc != 0)
		ucma_locks_held_dec();
	return rc;
}

static inline void ucma_mutex_unlock(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
	ucma_locks_held_dec();
}

#endif /* UCMA_LOCK_H */
