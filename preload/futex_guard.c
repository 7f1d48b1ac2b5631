/*
 * futex_guard.c - futex words that the kernel keys by the frame behind
 * them, and thread descriptors on the heap, kept off the CMA frames lent
 * to the heap.
 *
 * With UCMA_CMA_POLICY=lend a pageblock of the heap may be backed by a
 * frame of a CMA area (a MAP_SHARED page of the area's file), and taking
 * it back puts private memory at the same address (lend.c).  Two things
 * do not survive that:
 *
 *   - a shared futex (one without FUTEX_PRIVATE_FLAG) on a MAP_SHARED page
 *     is keyed by the file and offset, on private memory by the address:
 *     a thread that went to sleep before a take-back is never woken by a
 *     wake after it (measured: it sleeps for good);
 *   - the kernel's write of a thread's clear_child_tid word at its exit
 *     into a page that is write-protected for a take-back is lost (the
 *     kernel does not wait on a userfaultfd for an exiting task), and so
 *     is the robust-list write of a thread dying with a robust mutex held;
 *     the writes of the priority-inheritance calls fail there (EFAULT).
 *
 * Both are the kernel holding on to memory by its frame, the case of a
 * long-term pin (longterm.c): the memory must leave the frames before
 * that can happen, and a pageblock holding live blocks is never lent
 * again.  So, before forwarding, every lent pageblock of these is taken
 * back (ucma_unlend()):
 *
 *   pthread_attr_setstack(), pthread_attr_setstackaddr()
 *                      the stack range (the top stacksize bytes below the
 *                      address for setstackaddr): glibc puts the thread's
 *                      descriptor, with its tid word (clear_child_tid,
 *                      and the word pthread_join() waits on as a shared
 *                      futex), its robust list and its static TLS at the
 *                      top of a stack it is given;
 *   pthread_create()   the same for an attribute that carries a stack,
 *                      whoever set it (an attribute set up before the
 *                      pageblock was taken back cannot be on a frame now,
 *                      but one set by code this library does not see can);
 *   pthread_mutex_init()   with a process-shared, a robust or a
 *                      priority-inheritance attribute (glibc waits on
 *                      robust mutexes as shared futexes: the kernel's wake
 *                      at a holder's death is shared);
 *   pthread_cond_init(), pthread_rwlock_init(), pthread_barrier_init()
 *                      with a process-shared attribute;
 *   sem_init()         with pshared nonzero;
 *   syscall()          SYS_futex without FUTEX_PRIVATE_FLAG, or with it
 *                      for the priority-inheritance calls (the word, and
 *                      the second word of the requeue and wake-op calls),
 *                      futex_waitv(), futex_wait(), futex_wake() and
 *                      futex_requeue() for each word without FUTEX2_PRIVATE
 *                      (longterm.c's syscall() asks here).
 *
 * When a pageblock cannot be taken back (no memory for the copy), the
 * call fails rather than leave the word where a take-back would lose a
 * wake: EAGAIN from pthread_create() and the pthread_*_init() calls,
 * ENOSPC from sem_init(), the take-back's errno from syscall(); the
 * setters succeed and leave it to pthread_create().
 *
 * Not seen here, and so still exposed on lent memory: futex calls made
 * with the system call instruction (statically linked code, a C library's
 * inline calls on words the program set up by hand), a process-shared
 * object made by copying an initialised one (memcpy()) or by setting its
 * fields instead of its init call, threads made with a raw clone() whose
 * CLONE_CHILD_CLEARTID word or stack is on the heap, and programs that
 * call the C library's functions by other names (__pthread_mutex_init()).
 * A binary linked against the condition variables of glibc before 2.3.2
 * (pthread_cond_init@GLIBC_2.2.5, x86-64 only) would get the current
 * ones from here: no such binary is expected.
 * UCMA_CMA_POLICY=lend-handles is the setting for such programs.
 *
 * Cost with nothing lent (lending off, the default): one load
 * (ucma_lend_any_borrowed()) before the real call, which is found with
 * dlsym(RTLD_NEXT) on first use.  The library's own calls come here too
 * (-Bsymbolic-functions, preload.mk): its pthread_mutex_init() (without
 * dlsym() at start-up, see there), pthread_cond_init() and
 * pthread_create() pass no attribute and only forward; its futex calls
 * are private.
 *
 * Locking: none here; ucma_unlend() takes what it needs.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#if defined(__x86_64__) || defined(__aarch64__)

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <sys/syscall.h>

#include "ucma.h"
#include "lend.h"
#include "interpose.h"

#define FUTEX_GUARD_EXPORT __attribute__((visibility("default")))

/* Newer than some headers (Linux 5.16, 6.7). */
#ifndef FUTEX2_SIZE_MASK
#define FUTEX2_SIZE_MASK 0x03
#endif
#ifndef FUTEX2_PRIVATE
#define FUTEX2_PRIVATE FUTEX_PRIVATE_FLAG
#endif
#define FUTEX_WAITV_MAX_WORDS 128

/* struct futex_waitv as the kernel reads it. */
struct waitv {
	uint64_t val;
	uint64_t uaddr;
	uint32_t flags;
	uint32_t reserved;
};

/* The real function @name of type @type, or a return of ENOSYS. */
#define NEXT_OR_ENOSYS(type, fn, name)                                   \
	static void *fn##_cache;                                          \
	type fn = (type)ucma_preload_next(&fn##_cache, name);             \
	if (!fn)                                                          \
		return ENOSYS

/* ------------------------------------------------------------------------ */
/* Thread stacks                                                             */
/* ------------------------------------------------------------------------ */

/* Take back [@top - @size, @top), the stack that ends at @top; false with
 * errno when a pageblock of it stays lent. */
static bool unlend_stack(const char *top, size_t size)
{
	uintptr_t hi = (uintptr_t)top;

	if (!top || !size)
		return true;
	if (size > hi)
		size = hi;
	return ucma_unlend(top - size, size) == 0;
}

/*
 * The stack an attribute carries, as [top - size, top): glibc's getter
 * gives the lowest address as the top less the size, and a fresh
 * attribute has no top (NULL); a size never set reads as the default
 * (pthread_attr_getstacksize()), which is what glibc then uses.
 */
static bool attr_stack(const pthread_attr_t *attr, const char **top, size_t *size)
{
	void *lo;
	size_t sz;

	if (pthread_attr_getstack(attr, &lo, &sz) != 0)
		return false;
	*top = (const char *)((uintptr_t)lo + sz);	/* wraps back to NULL when unset */
	return *top && pthread_attr_getstacksize(attr, size) == 0;
}

typedef int (*setstack_fn)(pthread_attr_t *, void *, size_t);
typedef int (*setstackaddr_fn)(pthread_attr_t *, void *);
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

FUTEX_GUARD_EXPORT int pthread_attr_setstack(pthread_attr_t *attr, void *stackaddr,
					     size_t stacksize)
{
	NEXT_OR_ENOSYS(setstack_fn, real, "pthread_attr_setstack");
	int rc = real(attr, stackaddr, stacksize);

	/* A failure is pthread_create()'s to report (EAGAIN). */
	if (rc == 0 && ucma_lend_any_borrowed())
		unlend_stack((const char *)stackaddr + stacksize, stacksize);
	return rc;
}

FUTEX_GUARD_EXPORT int pthread_attr_setstackaddr(pthread_attr_t *attr, void *stackaddr)
{
	NEXT_OR_ENOSYS(setstackaddr_fn, real, "pthread_attr_setstackaddr");
	int rc = real(attr, stackaddr);
	const char *top;
	size_t size;

	if (rc == 0 && ucma_lend_any_borrowed() && attr_stack(attr, &top, &size))
		unlend_stack(top, size);
	return rc;
}

FUTEX_GUARD_EXPORT int pthread_create(pthread_t *thread, const pthread_attr_t *attr,
				      void *(*start)(void *), void *arg)
{
	NEXT_OR_ENOSYS(create_fn, real, "pthread_create");
	const char *top;
	size_t size;

	if (attr && ucma_lend_any_borrowed() && attr_stack(attr, &top, &size) &&
	    !unlend_stack(top, size))
		return EAGAIN;
	return real(thread, attr, start, arg);
}

/* ------------------------------------------------------------------------ */
/* Process-shared and robust synchronisation objects                         */
/* ------------------------------------------------------------------------ */

typedef int (*mutex_init_fn)(pthread_mutex_t *, const pthread_mutexattr_t *);
typedef int (*cond_init_fn)(pthread_cond_t *, const pthread_condattr_t *);
typedef int (*rwlock_init_fn)(pthread_rwlock_t *, const pthread_rwlockattr_t *);
typedef int (*barrier_init_fn)(pthread_barrier_t *, const pthread_barrierattr_t *, unsigned);
typedef int (*sem_init_fn)(sem_t *, int, unsigned);

/* Take back the object at [@obj, @obj + @len) when @shared: false if
 * that failed. */
static bool unlend_object(bool shared, const void *obj, size_t len)
{
	return !shared || ucma_unlend(obj, len) == 0;
}

/*
 * The library's own mutexes come here too, the first ones from its
 * start-up inside the first malloc, which may run before the C library's
 * constructors: no dlsym() there.  Without an attribute the initializer
 * is what POSIX says it is equivalent to.
 */
FUTEX_GUARD_EXPORT int pthread_mutex_init(pthread_mutex_t *mutex, const pthread_mutexattr_t *attr)
{
	static void *real_cache;
	mutex_init_fn real;
	int pshared = PTHREAD_PROCESS_PRIVATE, robust = PTHREAD_MUTEX_STALLED;
	int protocol = PTHREAD_PRIO_NONE;

	if (attr && ucma_lend_any_borrowed()) {
		pthread_mutexattr_getpshared(attr, &pshared);
		pthread_mutexattr_getrobust(attr, &robust);
		pthread_mutexattr_getprotocol(attr, &protocol);
		if (!unlend_object(pshared == PTHREAD_PROCESS_SHARED ||
					   robust == PTHREAD_MUTEX_ROBUST ||
					   protocol == PTHREAD_PRIO_INHERIT,
				   mutex, sizeof(*mutex)))
			return EAGAIN;
	}
	if (!attr) {
		*mutex = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
		return 0;
	}
	real = (mutex_init_fn)ucma_preload_next(&real_cache, "pthread_mutex_init");
	return real ? real(mutex, attr) : ENOSYS;
}

FUTEX_GUARD_EXPORT int pthread_cond_init(pthread_cond_t *cond, const pthread_condattr_t *attr)
{
	int pshared = PTHREAD_PROCESS_PRIVATE;

	/* The default attributes are the static initializer (glibc's own
	 * init clears the object): no dlsym(), which the library's fork
	 * child handler would otherwise pay in every child. */
	if (!attr) {
		*cond = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
		return 0;
	}
	NEXT_OR_ENOSYS(cond_init_fn, real, "pthread_cond_init");
	if (ucma_lend_any_borrowed()) {
		pthread_condattr_getpshared(attr, &pshared);
		if (!unlend_object(pshared == PTHREAD_PROCESS_SHARED, cond, sizeof(*cond)))
			return EAGAIN;
	}
	return real(cond, attr);
}

FUTEX_GUARD_EXPORT int pthread_rwlock_init(pthread_rwlock_t *rwlock,
					   const pthread_rwlockattr_t *attr)
{
	NEXT_OR_ENOSYS(rwlock_init_fn, real, "pthread_rwlock_init");
	int pshared = PTHREAD_PROCESS_PRIVATE;

	if (attr && ucma_lend_any_borrowed()) {
		pthread_rwlockattr_getpshared(attr, &pshared);
		if (!unlend_object(pshared == PTHREAD_PROCESS_SHARED, rwlock, sizeof(*rwlock)))
			return EAGAIN;
	}
	return real(rwlock, attr);
}

FUTEX_GUARD_EXPORT int pthread_barrier_init(pthread_barrier_t *barrier,
					    const pthread_barrierattr_t *attr, unsigned count)
{
	NEXT_OR_ENOSYS(barrier_init_fn, real, "pthread_barrier_init");
	int pshared = PTHREAD_PROCESS_PRIVATE;

	if (attr && ucma_lend_any_borrowed()) {
		pthread_barrierattr_getpshared(attr, &pshared);
		if (!unlend_object(pshared == PTHREAD_PROCESS_SHARED, barrier, sizeof(*barrier)))
			return EAGAIN;
	}
	return real(barrier, attr, count);
}

FUTEX_GUARD_EXPORT int sem_init(sem_t *sem, int pshared, unsigned value)
{
	static void *cache;
	sem_init_fn real = (sem_init_fn)ucma_preload_next(&cache, "sem_init");

	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	if (pshared && ucma_lend_any_borrowed() && !unlend_object(true, sem, sizeof(*sem))) {
		errno = ENOSPC;	/* POSIX: "a resource ... has been exhausted" */
		return -1;
	}
	return real(sem, pshared, value);
}

/* ------------------------------------------------------------------------ */
/* syscall() of the futex calls                                              */
/* ------------------------------------------------------------------------ */

static long unlend_word(long addr, size_t len)
{
	return addr && ucma_unlend((const void *)addr, len) != 0 ? -errno : 0;
}

/* Take back the futex2 word at @addr, of the size in @flags, unless it is
 * private; 0 or -errno. */
static long unlend_futex2(long addr, unsigned long flags)
{
	if (flags & FUTEX2_PRIVATE)
		return 0;
	return unlend_word(addr, (size_t)1 << (flags & FUTEX2_SIZE_MASK));
}

/* The @nr futex_waitv entries at @uw; an array the kernel cannot read is
 * left to it (EFAULT, EINVAL). */
static long unlend_waitv_array(const void *uw, unsigned long nr)
{
	struct waitv w[FUTEX_WAITV_MAX_WORDS];
	long rc = 0;

	if (!uw || nr == 0 || nr > FUTEX_WAITV_MAX_WORDS ||
	    !ucma_preload_read_user(w, uw, nr * sizeof(w[0])))
		return 0;
	for (unsigned long i = 0; i < nr && rc == 0; i++)
		rc = unlend_futex2((long)w[i].uaddr, w[i].flags);
	return rc;
}

/* The priority-inheritance calls: the kernel writes the word itself, and
 * such a write into a page being taken back fails (EFAULT) whether the
 * futex is private or not. */
static bool futex_pi_op(int op)
{
	switch (op & FUTEX_CMD_MASK) {
	case FUTEX_LOCK_PI:
	case FUTEX_UNLOCK_PI:
	case FUTEX_TRYLOCK_PI:
	case FUTEX_WAIT_REQUEUE_PI:
	case FUTEX_CMP_REQUEUE_PI:
#ifdef FUTEX_LOCK_PI2
	case FUTEX_LOCK_PI2:
#endif
		return true;
	default:
		return false;
	}
}

/* The calls with a second word (uaddr2, the fifth argument). */
static bool futex_has_uaddr2(int op)
{
	switch (op & FUTEX_CMD_MASK) {
	case FUTEX_REQUEUE:
	case FUTEX_CMP_REQUEUE:
	case FUTEX_WAKE_OP:
	case FUTEX_WAIT_REQUEUE_PI:
	case FUTEX_CMP_REQUEUE_PI:
		return true;
	default:
		return false;
	}
}

long ucma_preload_futex_unlend(long nr, const long a[6])
{
	long rc;

	/* Memory in use while nothing is lent never will be (lend.h). */
	if (!ucma_lend_any_borrowed())
		return 0;
	switch (nr) {
	case SYS_futex: {
		int op = (int)a[1];

		if ((op & FUTEX_PRIVATE_FLAG) && !futex_pi_op(op))
			return 0;
		rc = unlend_word(a[0], sizeof(uint32_t));
		if (rc == 0 && futex_has_uaddr2(op))
			rc = unlend_word(a[4], sizeof(uint32_t));
		return rc;
	}
	case UCMA_SYS_futex_wake:	/* (uaddr, mask, nr, flags) */
	case UCMA_SYS_futex_wait:	/* (uaddr, val, mask, flags, timeout, clockid) */
		return unlend_futex2(a[0], (unsigned long)a[3]);
	case UCMA_SYS_futex_waitv:	/* (waiters, nr, flags, timeout, clockid) */
		return unlend_waitv_array((const void *)a[0], (unsigned long)a[1]);
	case UCMA_SYS_futex_requeue:	/* (waiters[2], flags, nr_wake, nr_requeue) */
		return unlend_waitv_array((const void *)a[0], 2);
	default:
		return 0;
	}
}

#endif /* __x86_64__ || __aarch64__ */
