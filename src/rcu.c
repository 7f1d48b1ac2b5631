/*
 * rcu.c - read-side sections and grace periods on liburcu-bp (the
 * bulletproof flavour: a library cannot ask its callers to register their
 * threads, and urcu-bp has the fork hooks a preloaded library needs).
 *
 * Sections.  Each thread counts the sections it opened through ucma in
 * ucma_rcu_self.depth; only the outermost lock and unlock reach liburcu
 * (a store of the grace-period counter and a compiler barrier, with
 * sys_membarrier on the writer's side).  liburcu's nesting stays correct
 * when the program also uses liburcu-bp directly.  This is liburcu's
 * inline read side (_urcu_bp_read_lock() of its static header) written
 * out here, with one difference: liburcu 0.13 declares its per-thread
 * reader 128-byte aligned but allocates readers 64 bytes apart, so its
 * own inline functions access a misaligned struct (undefined behaviour,
 * which UBSan reports); here the reader's counter, its first member, is
 * reached as a plain unsigned long.  Calling liburcu's out-of-line
 * functions instead costs a __tls_get_addr() each (1.5x the instructions
 * of a whole lock + deref + unlock).
 *
 * Grace periods.  ucma_rcu_synchronize() refuses to wait (EDEADLK) where
 * the wait could never end: inside any section of the calling thread, and
 * in a degraded child (below).  Callers hold no lock that a reader might
 * need while they wait (see migrate.c and compact.c).
 *
 * Fork.  liburcu-bp's before-fork hook takes its grace-period lock, which
 * a thread inside urcu_bp_synchronize_rcu() holds while it waits for
 * readers.  If the forking thread is itself inside a section, that wait
 * waits for the fork, and the hook for the wait: a deadlock no ordering
 * avoids.  fork.c therefore skips the hooks for a fork made inside a
 * section.  The child then inherits liburcu's state as it was, possibly
 * with its locks held by threads the child does not have; it is marked
 * degraded: sections no longer reach liburcu (so no thread of the child
 * ever takes those locks), grace periods are refused, and memory that
 * would be freed after one is kept instead.  The sections the forking
 * thread had open end normally.  ucma(7) documents what this costs.
 *
 * ThreadSanitizer: liburcu is not instrumented and orders with its own
 * barriers, so the grace period is stated with annotations: the outermost
 * unlock releases a token that ucma_rcu_synchronize() acquires after the
 * wait.  This is a little stronger than RCU (a reader that began after the
 * wait started is also ordered before its end), which can only hide a
 * race, never invent one.
 *
 * SPDX-License-Identifier: MIT
 */
#define _LGPL_SOURCE
#include "rcu.h"

#include <errno.h>
#include <stddef.h>
#include <urcu-bp.h>

_Static_assert(offsetof(struct urcu_bp_reader, ctr) == 0,
	       "liburcu-bp's reader starts with its counter");

/* The calling thread's liburcu counter, registering the thread first. */
static inline unsigned long *reader_ctr(void)
{
	struct urcu_bp_reader *r = URCU_TLS(urcu_bp_reader);

	if (UCMA_UNLIKELY(!r)) {
		urcu_bp_register();
		cmm_barrier();
		r = URCU_TLS(urcu_bp_reader);
	}
	return (unsigned long *)(void *)r;
}

/* liburcu's _urcu_bp_read_lock(): the outermost section takes the current
 * grace-period phase; a nested one (the program's own) counts up. */
static void urcu_lock(void)
{
	unsigned long *ctr = reader_ctr(), tmp = CMM_LOAD_SHARED(*ctr);

	if (UCMA_LIKELY(!(tmp & URCU_BP_GP_CTR_NEST_MASK))) {
		CMM_STORE_SHARED(*ctr, CMM_LOAD_SHARED(urcu_bp_gp.ctr));
		urcu_bp_smp_mb_slave();
	} else {
		CMM_STORE_SHARED(*ctr, tmp + URCU_BP_GP_COUNT);
	}
}

/* liburcu's _urcu_bp_read_unlock(). */
static void urcu_unlock(void)
{
	unsigned long *ctr = (unsigned long *)(void *)URCU_TLS(urcu_bp_reader);

	urcu_bp_smp_mb_slave();
	CMM_STORE_SHARED(*ctr, CMM_LOAD_SHARED(*ctr) - URCU_BP_GP_COUNT);
	cmm_barrier();
}

#ifdef UCMA_TSAN
#include <sanitizer/tsan_interface.h>
static char grace_period_token;
#define TSAN_RELEASE_READER() __tsan_release(&grace_period_token)
#define TSAN_ACQUIRE_GRACE()  __tsan_acquire(&grace_period_token)
#else
#define TSAN_RELEASE_READER() ((void)0)
#define TSAN_ACQUIRE_GRACE()  ((void)0)
#endif

__thread struct ucma_rcu_thread ucma_rcu_self __attribute__((tls_model("initial-exec")));

/* Set once, in the child of a fork made inside a section (single-threaded
 * then; threads made later see it through pthread_create). */
static _Atomic bool degraded;

void ucma_rcu_read_lock(void)
{
	struct ucma_rcu_thread *t = &ucma_rcu_self;

	if (t->depth++ == 0 &&
	    UCMA_LIKELY(!atomic_load_explicit(&degraded, memory_order_relaxed))) {
		urcu_lock();
		t->in_urcu = true;
	}
}

void ucma_rcu_read_unlock(void)
{
	struct ucma_rcu_thread *t = &ucma_rcu_self;

	if (--t->depth == 0 && t->in_urcu) {
		t->in_urcu = false;
		TSAN_RELEASE_READER();
		urcu_unlock();
	}
}

/* A section the thread opened with liburcu-bp itself.  Looks at liburcu's
 * reader without registering the thread (which takes its registry lock). */
static bool foreign_section(void)
{
	unsigned long *ctr = (unsigned long *)(void *)URCU_TLS(urcu_bp_reader);

	return ctr && (CMM_LOAD_SHARED(*ctr) & URCU_BP_GP_CTR_NEST_MASK);
}

bool ucma_rcu_in_section(void)
{
	return ucma_rcu_self.depth > 0 ||
	       (!atomic_load_explicit(&degraded, memory_order_relaxed) && foreign_section());
}

bool ucma_rcu_degraded(void)
{
	return atomic_load_explicit(&degraded, memory_order_relaxed);
}

bool ucma_rcu_can_wait(void)
{
	return !ucma_rcu_degraded() && !ucma_rcu_in_section();
}

int ucma_rcu_synchronize(void)
{
	uint64_t t0, waited;
	int cancel;

	if (!ucma_rcu_can_wait()) {
		errno = EDEADLK;
		return -1;
	}
	t0 = ucma_os_now_ns();
	/* liburcu's wait (poll()) is a cancellation point, and callers wait
	 * holding locks (the drain lock, a zone's compaction lock) and half
	 * way through a change: a thread is not cancelled here. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	urcu_bp_synchronize_rcu();
	pthread_setcancelstate(cancel, NULL);
	TSAN_ACQUIRE_GRACE();
	ucma_count(UCMA_STAT_RCU_GRACE_PERIODS, 1);
	ucma_rcu_self.grace_periods++;
	waited = ucma_os_now_ns() - t0;
	ucma_count(UCMA_STAT_RCU_GRACE_NS, waited);
	if (waited > UCMA_RCU_SLOW_GRACE_NS)
		ucma_count(UCMA_STAT_RCU_GRACE_SLOW, 1);
	return 0;
}

void ucma_rcu_fork_prepare(void)
{
	urcu_bp_before_fork();
}

void ucma_rcu_fork_parent(void)
{
	urcu_bp_after_fork_parent();
}

void ucma_rcu_fork_child(void)
{
	urcu_bp_after_fork_child();
}

void ucma_rcu_fork_child_unprepared(void)
{
	atomic_store_explicit(&degraded, true, memory_order_relaxed);
}
