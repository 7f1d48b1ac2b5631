/*
 * preload_futex.c - under libucma-preload.so with heap lending on, a
 * thread waiting across a take-back of the heap's frames is still woken
 * (preload/futex_guard.c): shared futex words and heap thread stacks leave
 * the lent frames when they are set up.
 *
 * A shared futex on a lent page is keyed by the frame's file and offset,
 * on the private memory a take-back puts there by the address; a waiter
 * that went to sleep before the take-back would never be woken by a wake
 * after it.  Each case puts the word on a fresh malloc block that the heap
 * backs with CMA frames (seen in /proc/self/maps), lets a thread go to
 * sleep on it (seen in /proc/self/task/TID/syscall), takes every lent
 * frame back with ucma_alloc() of the whole CMA area, then wakes the
 * sleeper, which waits at most a few seconds:
 *   - pthread_join() of a thread whose stack (so glibc's descriptor and
 *     the tid word joined on) is the block, the thread exiting after the
 *     take-back; the stack set with pthread_attr_setstack(), with
 *     pthread_attr_setstackaddr(), and with the C library's own setter
 *     (left to pthread_create());
 *   - pthread_mutex_timedlock() of a process-shared mutex;
 *   - pthread_cond_timedwait() on a process-shared condition variable;
 *   - sem_timedwait() on a process-shared semaphore;
 *   - syscall(SYS_futex, FUTEX_WAIT) without FUTEX_PRIVATE_FLAG, and
 *     futex_waitv() of a shared word;
 * and a robust mutex, a process-shared rwlock and barrier leave the frames
 * when they are initialised.
 * A TAP program; preload_futex.sh runs it.  SIGALRM ends it should
 * anything else hang.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ucma.h"
#include "tap.h"
#include "testutil.h"
#include "lent.h"

#define MiB ((size_t)1 << 20)
/* Whole pageblocks, fresh ones: blocks of other sizes are packed across
 * pageblock boundaries (zone.c take_across()), partly onto pages that are
 * not lent. */
#define BLOCK (4 * MiB)
#define PAGE ((size_t)4096)
#define WAIT_S 4		/* how long a sleeper waits for its wake */

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
#ifndef FUTEX2_SIZE_U32
#define FUTEX2_SIZE_U32 0x02
#endif

struct waitv {
	uint64_t val;
	uint64_t uaddr;
	uint32_t flags;
	uint32_t reserved;
};

/* A fresh block whose pages are all on CMA frames, or NULL (diagnosed). */
static char *lent_block(void)
{
	char *b = malloc(BLOCK);

	if (!b)
		return NULL;
	memset(b, 0, BLOCK);
	for (size_t off = 0; off < BLOCK; off += PAGE)
		if (!tu_on_frame(b + off)) {
			diag("a fresh %zu-byte block at %p is not all on CMA frames", BLOCK,
			     (void *)b);
			keep(b);
			return NULL;
		}
	keep(b);
	return b;
}

/* ucma_alloc() of the whole CMA area takes every lent frame back. */
static bool take_everything_back(void)
{
	void *p = ucma_alloc(cma_size, 0, 0);

	if (!p) {
		diag("ucma_alloc(%zu): %s", cma_size, strerror(errno));
		return false;
	}
	ucma_release(p);
	return true;
}

/* Is thread @tid asleep in a futex call?  Waits up to 5 s for it. */
static bool sleeping_in_futex(pid_t tid)
{
	char path[64], line[128];
	uint64_t t0 = tu_now_ns();

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	while (tu_now_ns() - t0 < 5000000000ull) {
		FILE *f = fopen(path, "r");
		long nr = -1;

		if (f) {
			if (fgets(line, sizeof(line), f))
				nr = strtol(line, NULL, 10);
			fclose(f);
		}
		if (nr == SYS_futex || nr == SYS_futex_waitv)
			return true;
		usleep(1000);
	}
	diag("thread %d never went to sleep in a futex call", (int)tid);
	return false;
}

static struct timespec deadline(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	ts.tv_sec += WAIT_S;
	return ts;
}

/* ------------------------------------------------------------------------ */
/* pthread_join() of a thread on a heap stack                                */
/* ------------------------------------------------------------------------ */

/* The word the stack thread waits on before it exits (static memory,
 * private futex: nothing to do with the heap). */
static _Atomic int go;

static void *exit_when_told(void *arg)
{
	(void)arg;
	while (!atomic_load(&go))
		syscall(SYS_futex, &go, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
	return NULL;
}

static void tell_go(void)
{
	atomic_store(&go, 1);
	syscall(SYS_futex, &go, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* The thread that takes everything back while another one sleeps. */
struct taker {
	pid_t sleeper;
	bool saw_sleep, took;
	void (*then)(void);	/* once taken back: the wake */
};

static void *taker_fn(void *arg)
{
	struct taker *t = arg;

	t->saw_sleep = sleeping_in_futex(t->sleeper);
	t->took = take_everything_back();
	t->then();
	return NULL;
}

/* How the stack gets into the attribute. */
enum stack_by {
	BY_SETSTACK,		/* pthread_attr_setstack(), interposed */
	BY_SETSTACKADDR,	/* pthread_attr_setstacksize() + setstackaddr() */
	BY_LIBC			/* the C library's own setter, not seen: left to
				 * pthread_create() */
};

static const char *const by_name[] = {
	"pthread_attr_setstack()",
	"pthread_attr_setstackaddr()",
	"the C library's pthread_attr_setstack() (not interposed)",
};

typedef int (*setstack_fn)(pthread_attr_t *, void *, size_t);

/* The C library's own definition, past the preloaded one. */
static setstack_fn libc_setstack(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);

	return libc ? (setstack_fn)dlsym(libc, "pthread_attr_setstack") : NULL;
}

static void case_join(enum stack_by by)
{
	char *b = lent_block(), *stack;
	struct taker tk = { getpid(), false, false, tell_go };
	setstack_fn set = by == BY_LIBC ? libc_setstack() : NULL;
	pthread_attr_t attr;
	pthread_t t, h;
	struct timespec until;
	int rc;

	if (!b || (by == BY_LIBC && !set)) {
		skip(2, "no lent block for a thread stack, or no C library setter");
		return;
	}
	stack = b + MiB;
	atomic_store(&go, 0);
	pthread_attr_init(&attr);
	if (by == BY_SETSTACK) {
		pthread_attr_setstack(&attr, stack, MiB);
	} else if (by == BY_SETSTACKADDR) {
		pthread_attr_setstacksize(&attr, MiB);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
		pthread_attr_setstackaddr(&attr, stack + MiB);	/* the top */
#pragma GCC diagnostic pop
	} else {
		set(&attr, stack, MiB);
	}
	rc = pthread_create(&t, &attr, exit_when_told, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		ok(0, "pthread_create on a heap stack: %s", strerror(rc));
		return;
	}
	ok(!tu_on_frame(stack) && !tu_on_frame(stack + MiB - PAGE),
	   "a thread on malloc memory on a lent frame, stack set with %s: the stack is "
	   "off the frames", by_name[by]);
	pthread_create(&h, NULL, taker_fn, &tk);
	/* Joined while the frames are taken back; the thread exits after. */
	until = deadline(CLOCK_REALTIME);
	rc = pthread_timedjoin_np(t, NULL, &until);
	pthread_join(h, NULL);
	ok(rc == 0 && tk.saw_sleep && tk.took,
	   "pthread_join() waiting across a take-back returns once the heap-stack thread "
	   "exits (join %s, seen asleep %d, taken back %d)",
	   rc ? strerror(rc) : "done", tk.saw_sleep, tk.took);
	if (rc != 0) {
		/* It has exited; its stack stays allocated (kept). */
		tell_go();
	}
}

/* The other process-shared and robust objects leave the frames at init. */
static void case_other_objects(void)
{
	char *b = lent_block();
	pthread_mutexattr_t ma;
	pthread_rwlockattr_t ra;
	pthread_barrierattr_t ba;
	int r1, r2, r3;

	if (!b) {
		skip(1, "no lent block for a rwlock, a barrier, a robust mutex");
		return;
	}
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setpshared(&ra, PTHREAD_PROCESS_SHARED);
	pthread_barrierattr_init(&ba);
	pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
	r1 = pthread_mutex_init((void *)b, &ma);
	r2 = pthread_rwlock_init((void *)(b + MiB), &ra);
	r3 = pthread_barrier_init((void *)(b + 2 * MiB), &ba, 2);
	ok(r1 == 0 && r2 == 0 && r3 == 0 && !tu_on_frame(b) && !tu_on_frame(b + MiB) &&
		   !tu_on_frame(b + 2 * MiB),
	   "a robust mutex, a process-shared rwlock and barrier on lent frames leave them at "
	   "init (%d %d %d)", r1, r2, r3);
	pthread_barrier_destroy((void *)(b + 2 * MiB));
	pthread_rwlock_destroy((void *)(b + MiB));
	pthread_mutex_destroy((void *)b);
	pthread_barrierattr_destroy(&ba);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutexattr_destroy(&ma);
}

/* ------------------------------------------------------------------------ */
/* Process-shared mutex, condition variable, semaphore                       */
/* ------------------------------------------------------------------------ */

/* One sleeper on the shared object at @obj; its result in @rc. */
struct sleeper {
	void *obj, *obj2;
	_Atomic pid_t tid;
	int rc;
	bool flag;		/* the condition, under the mutex */
};

static struct sleeper *cur;

static pid_t start_sleeper(pthread_t *t, void *(*fn)(void *), struct sleeper *s)
{
	uint64_t t0 = tu_now_ns();

	cur = s;
	atomic_store(&s->tid, 0);
	if (pthread_create(t, NULL, fn, s) != 0)
		return 0;
	while (!atomic_load(&s->tid) && tu_now_ns() - t0 < 5000000000ull)
		usleep(100);
	return atomic_load(&s->tid);
}

static void *mutex_sleeper(void *arg)
{
	struct sleeper *s = arg;
	struct timespec until = deadline(CLOCK_REALTIME);

	atomic_store(&s->tid, gettid());
	s->rc = pthread_mutex_timedlock(s->obj, &until);
	if (s->rc == 0)
		pthread_mutex_unlock(s->obj);
	return NULL;
}

static void unlock_cur_mutex(void)
{
	pthread_mutex_unlock(cur->obj);
}

/* Run @fn as the sleeper on @s; the taker wakes it with @wake once every
 * frame is taken back.  Returns the sleeper's result, or -1 when it never
 * slept or nothing was taken back. */
static int across_take_back(void *(*fn)(void *), struct sleeper *s, void (*wake)(void))
{
	struct taker tk = { 0, false, false, wake };
	pthread_t t;

	tk.sleeper = start_sleeper(&t, fn, s);
	if (!tk.sleeper) {
		diag("no sleeper thread");
		return -1;
	}
	taker_fn(&tk);
	pthread_join(t, NULL);
	return tk.saw_sleep && tk.took ? s->rc : -1;
}

static void case_mutex(void)
{
	char *b = lent_block();
	pthread_mutexattr_t ma;
	struct sleeper s = { 0 };
	int rc;

	if (!b) {
		skip(2, "no lent block for a mutex");
		return;
	}
	s.obj = b + MiB;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	rc = pthread_mutex_init(s.obj, &ma);
	pthread_mutexattr_destroy(&ma);
	ok(rc == 0 && !tu_on_frame(s.obj),
	   "pthread_mutex_init(PTHREAD_PROCESS_SHARED) on a lent frame takes it off (%s)",
	   strerror(rc));
	pthread_mutex_lock(s.obj);
	rc = across_take_back(mutex_sleeper, &s, unlock_cur_mutex);
	ok(rc == 0, "a thread blocked on a process-shared heap mutex across a take-back gets "
	   "it when it is unlocked (%s)", rc > 0 ? strerror(rc) : rc ? "did not run" : "got it");
	pthread_mutex_destroy(s.obj);
}

static void *cond_sleeper(void *arg)
{
	struct sleeper *s = arg;
	struct timespec until = deadline(CLOCK_REALTIME);
	int rc = 0;

	pthread_mutex_lock(s->obj);
	atomic_store(&s->tid, gettid());
	while (!s->flag && rc == 0)
		rc = pthread_cond_timedwait(s->obj2, s->obj, &until);
	/* Woken by the signal, not by the time limit: 0. */
	s->rc = rc;
	pthread_mutex_unlock(s->obj);
	return NULL;
}

static void signal_cur_cond(void)
{
	pthread_mutex_lock(cur->obj);
	cur->flag = true;
	pthread_cond_signal(cur->obj2);
	pthread_mutex_unlock(cur->obj);
}

static void case_cond(void)
{
	char *b = lent_block();
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;
	struct sleeper s = { 0 };
	int rc, rc2;

	if (!b) {
		skip(2, "no lent block for a condition variable");
		return;
	}
	s.obj = b + MiB;
	s.obj2 = b + 2 * MiB;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_condattr_init(&ca);
	pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
	rc = pthread_mutex_init(s.obj, &ma);
	rc2 = pthread_cond_init(s.obj2, &ca);
	pthread_mutexattr_destroy(&ma);
	pthread_condattr_destroy(&ca);
	ok(rc == 0 && rc2 == 0 && !tu_on_frame(s.obj2),
	   "pthread_cond_init(PTHREAD_PROCESS_SHARED) on a lent frame takes it off");
	rc = across_take_back(cond_sleeper, &s, signal_cur_cond);
	ok(rc == 0, "a thread waiting on a process-shared heap condition variable across a "
	   "take-back is woken by the signal (%s)",
	   rc > 0 ? strerror(rc) : rc ? "did not run" : "woken");
	pthread_cond_destroy(s.obj2);
	pthread_mutex_destroy(s.obj);
	{
		/* Default attributes: the static initializer, as glibc's own
		 * init makes it, and a condition variable that works. */
		static const pthread_cond_t init = PTHREAD_COND_INITIALIZER;
		pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
		pthread_cond_t c;
		struct timespec ts;
		bool same;

		memset(&c, 0xa5, sizeof(c));
		rc = pthread_cond_init(&c, NULL);
		same = memcmp(&c, &init, sizeof(c)) == 0;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&m);
		rc2 = pthread_cond_timedwait(&c, &m, &ts);
		pthread_mutex_unlock(&m);
		ok(rc == 0 && same && rc2 == ETIMEDOUT,
		   "pthread_cond_init(NULL attributes): the static initializer, and a timed "
		   "wait on it times out (%s)", strerror(rc2));
		pthread_cond_destroy(&c);
	}
}

static void *sem_sleeper(void *arg)
{
	struct sleeper *s = arg;
	struct timespec until = deadline(CLOCK_REALTIME);

	atomic_store(&s->tid, gettid());
	s->rc = sem_timedwait(s->obj, &until) == 0 ? 0 : errno;
	return NULL;
}

static void post_cur_sem(void)
{
	sem_post(cur->obj);
}

static void case_sem(void)
{
	char *b = lent_block();
	struct sleeper s = { 0 };
	int rc;

	if (!b) {
		skip(2, "no lent block for a semaphore");
		return;
	}
	s.obj = b + MiB;
	rc = sem_init(s.obj, 1, 0);
	ok(rc == 0 && !tu_on_frame(s.obj),
	   "sem_init(pshared 1) on a lent frame takes it off (%s)", rc ? strerror(errno) : "0");
	rc = across_take_back(sem_sleeper, &s, post_cur_sem);
	ok(rc == 0, "a thread in sem_timedwait() on a process-shared heap semaphore across a "
	   "take-back is woken by sem_post() (%s)",
	   rc > 0 ? strerror(rc) : rc ? "did not run" : "woken");
	sem_destroy(s.obj);
}

/* ------------------------------------------------------------------------ */
/* syscall() of futex calls                                                  */
/* ------------------------------------------------------------------------ */

static void *futex_sleeper(void *arg)
{
	struct sleeper *s = arg;
	struct timespec rel = { WAIT_S, 0 };
	long rc;

	atomic_store(&s->tid, gettid());
	do
		rc = syscall(SYS_futex, s->obj, FUTEX_WAIT, 0, &rel, NULL, 0);
	while (rc != 0 && errno == EINTR);
	s->rc = rc == 0 ? (__atomic_load_n((int *)s->obj, __ATOMIC_ACQUIRE) ? 0 : EINTR) : errno;
	return NULL;
}

static void *waitv_sleeper(void *arg)
{
	struct sleeper *s = arg;
	struct waitv w = { 0, (uintptr_t)s->obj, FUTEX2_SIZE_U32, 0 };
	struct timespec until = deadline(CLOCK_MONOTONIC);
	long rc;

	atomic_store(&s->tid, gettid());
	rc = syscall(SYS_futex_waitv, &w, 1, 0, &until, CLOCK_MONOTONIC);
	s->rc = rc == 0 ? 0 : rc > 0 ? EINVAL : errno;
	return NULL;
}

static void wake_cur_word(void)
{
	__atomic_store_n((int *)cur->obj, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, cur->obj, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void case_futex(void *(*fn)(void *), const char *what)
{
	char *b = lent_block();
	struct sleeper s = { 0 };
	int rc;

	if (!b) {
		skip(1, "no lent block for a futex word");
		return;
	}
	s.obj = b + MiB;
	rc = across_take_back(fn, &s, wake_cur_word);
	ok(rc == 0, "%s on a lent heap word across a take-back is woken by FUTEX_WAKE (%s)",
	   what, rc > 0 ? strerror(rc) : rc ? "did not run" : "woken");
}

static void on_alarm(int sig)
{
	static const char msg[] = "Bail out! a case hung\n";

	(void)sig;
	if (write(1, msg, sizeof(msg) - 1) < 0)
		_exit(2);
	_exit(1);
}

int main(void)
{
	lent_cma_size();
	lent_require(lent_block());
	signal(SIGALRM, on_alarm);
	alarm(120);
	plan_no_plan();
	case_join(BY_SETSTACK);
	case_join(BY_SETSTACKADDR);
	case_join(BY_LIBC);
	case_mutex();
	case_cond();
	case_sem();
	case_other_objects();
	case_futex(futex_sleeper, "syscall(SYS_futex, FUTEX_WAIT)");
	case_futex(waitv_sleeper, "syscall(SYS_futex_waitv) of a shared word");
	free_kept();
	return done();
}
