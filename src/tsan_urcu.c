/*
 * tsan_urcu.c - ThreadSanitizer builds only: tell TSan what liburcu's
 * barriers guarantee.
 *
 * liburcu 0.13 orders RCU with its own assembly barriers, inside a library
 * that is not instrumented, so ThreadSanitizer sees neither of the two
 * orderings that ucma's handles rely on and reports every migration as a
 * data race:
 *
 *  - publication: the mover copies an object, then rcu_assign_pointer()
 *    publishes the new address; a reader's rcu_dereference() of that
 *    address is ordered after the copy;
 *  - grace period: every read-side section that was running when
 *    urcu_bp_synchronize_rcu() started has ended when it returns, so the
 *    caller may free or reuse what those readers looked at.
 *
 * Suppressing the reports would hide real races in ucma's own code, so
 * instead the four liburcu entry points involved are wrapped here, and the
 * wrappers state the orderings with TSan's annotations before calling the
 * real functions (found with dlsym(RTLD_NEXT)):
 *
 *  - rcu_set_pointer_sym(p, v) releases on the object @v, and
 *    rcu_dereference_sym(v) acquires on it: per object, as precise as the
 *    dependency ordering RCU promises;
 *  - urcu_bp_read_unlock() releases on one token and
 *    urcu_bp_synchronize_rcu() acquires on it after the grace period.
 *    This is a little stronger than RCU (a reader that started after the
 *    grace period began is also ordered before its end), which can only
 *    hide a race, never invent one.
 *
 * The wrappers bind before liburcu's definitions: in a test program they
 * are part of the executable, in libucma.so the version script keeps them
 * local, so calls from ucma reach them and nothing else does.  In other
 * builds this file is empty.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#ifdef UCMA_TSAN

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

/* liburcu's prototypes (not included: its headers map these names). */
void *rcu_set_pointer_sym(void **p, void *v);
void *rcu_dereference_sym(void *p);
void urcu_bp_read_unlock(void);
void urcu_bp_synchronize_rcu(void);

/* Stands for "a grace period has passed since this reader finished". */
static char grace_period_token;

/* The next definition of @name (liburcu's), looked up once. */
static void *real_fn(void **cache, const char *name)
{
	void *fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);

	if (!fn) {
		fn = dlsym(RTLD_NEXT, name);
		if (!fn)
			ucma_fatal("ThreadSanitizer build: %s not found in liburcu", name);
		__atomic_store_n(cache, fn, __ATOMIC_RELEASE);
	}
	return fn;
}

void *rcu_set_pointer_sym(void **p, void *v)
{
	static void *real;
	void *(*fn)(void **, void *) = (void *(*)(void **, void *))real_fn(&real, __func__);

	if (v)
		__tsan_release(v);
	return fn(p, v);
}

void *rcu_dereference_sym(void *p)
{
	static void *real;
	void *(*fn)(void *) = (void *(*)(void *))real_fn(&real, __func__);

	p = fn(p);
	if (p)
		__tsan_acquire(p);
	return p;
}

void urcu_bp_read_unlock(void)
{
	static void *real;
	void (*fn)(void) = (void (*)(void))real_fn(&real, __func__);

	__tsan_release(&grace_period_token);
	fn();
}

void urcu_bp_synchronize_rcu(void)
{
	static void *real;
	void (*fn)(void) = (void (*)(void))real_fn(&real, __func__);

	fn();
	__tsan_acquire(&grace_period_token);
}

#else

/* Nothing without ThreadSanitizer; keeps the translation unit non-empty. */
typedef int ucma_tsan_urcu_unused;

#endif /* UCMA_TSAN */
