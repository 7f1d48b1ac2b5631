/*
 * rcu.h - read-side sections and grace periods (rcu.c), on liburcu-bp.
 *
 * Every read-side section of ucma, the user's (ucma_read_lock()) and the
 * library's own, goes through ucma_rcu_read_lock() and
 * ucma_rcu_read_unlock(), and every grace-period wait through
 * ucma_rcu_synchronize().  This file owns the rules that keep those
 * waits from deadlocking:
 *
 *  - a thread inside a section never waits for a grace period (it would
 *    wait for itself): ucma_rcu_synchronize() fails with EDEADLK there;
 *  - no ucma lock that a reader may need is held across a wait;
 *  - fork() made inside a section cannot take liburcu's locks (a grace
 *    period in another thread may be waiting for that very section), so
 *    such a fork skips them, and the child cannot wait for grace periods
 *    at all: ucma_rcu_degraded() is true there, and every wait fails with
 *    EDEADLK (see fork.c and ucma(7)).
 *
 * Nesting is counted here, per thread, so only the outermost section
 * touches liburcu: a nested lock or unlock is one increment.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_RCU_H
#define UCMA_RCU_H

#include "internal.h"

/*
 * struct ucma_rcu_thread - the calling thread's sections.  Only the
 * thread itself reads or writes it (initial-exec TLS: no call to reach it).
 */
struct ucma_rcu_thread {
	unsigned long depth;	/* sections open through ucma */
	bool in_urcu;		/* the outermost one entered liburcu */
	/* Grace periods this thread waited for: the process-wide count
	 * (rcu_grace_periods) also holds the compaction thread's and the
	 * deferred-free worker's, so a caller that wants to know what one
	 * call cost reads this before and after. */
	unsigned long grace_periods;
};

UCMA_INTERNAL extern __thread struct ucma_rcu_thread ucma_rcu_self
	__attribute__((tls_model("initial-exec")));

/* Enter and leave a read-side section; sections nest. */
UCMA_INTERNAL void ucma_rcu_read_lock(void);
UCMA_INTERNAL void ucma_rcu_read_unlock(void);

/* Sections the calling thread has open through ucma. */
static inline unsigned long ucma_rcu_depth(void)
{
	return ucma_rcu_self.depth;
}
/*
 * Is the calling thread inside a read-side section, ucma's or one it
 * opened with liburcu-bp directly?  (The second is why this is more than
 * ucma_rcu_depth(): a grace period would wait for it too.)
 */
UCMA_INTERNAL bool ucma_rcu_in_section(void);
/* May the calling thread wait for a grace period?  False inside a
 * section and in the child of a fork made inside one. */
UCMA_INTERNAL bool ucma_rcu_can_wait(void);
/* Wait until every section open at the call has ended.  0, or -1 with
 * errno EDEADLK when ucma_rcu_can_wait() is false.  Counts the wait in
 * rcu_grace_periods and rcu_grace_ns, and in rcu_grace_slow when it took
 * longer than UCMA_RCU_SLOW_GRACE_NS: without a reader inside a section
 * a grace period takes some microseconds, so a longer one says a reader
 * held it up (liburcu-bp then polls every 10 ms). */
#define UCMA_RCU_SLOW_GRACE_NS (1000ull * 1000)
UCMA_INTERNAL int ucma_rcu_synchronize(void);
/* Grace periods the calling thread has waited for so far. */
static inline unsigned long ucma_rcu_own_grace_periods(void)
{
	return ucma_rcu_self.grace_periods;
}
/* Is this the child of a fork made inside a section (no grace periods)? */
UCMA_INTERNAL bool ucma_rcu_degraded(void);

/* Fork handlers (fork.c's table): liburcu-bp's own, and the child of a
 * fork that had to skip them. */
UCMA_INTERNAL void ucma_rcu_fork_prepare(void);
UCMA_INTERNAL void ucma_rcu_fork_parent(void);
UCMA_INTERNAL void ucma_rcu_fork_child(void);
UCMA_INTERNAL void ucma_rcu_fork_child_unprepared(void);

#endif /* UCMA_RCU_H */
