/*
 * fork_ops.c - fork, exec and thread cancellation while ucma is busy.
 *
 * 1. Fork while other threads allocate.  Before the threads start, the
 *    parent creates a "frozen" set: malloc blocks, movable objects and a
 *    contiguous buffer, each filled from a seed, that nobody changes
 *    afterwards.  Then two threads loop over malloc/realloc/free and
 *    halloc/pin/write/unpin/hfree of their own objects, one thread runs
 *    ucma_compact() and ucma_compact_order(), and the background
 *    compaction thread runs too (UCMA_COMPACT_INTERVAL_MS=5).  Meanwhile the
 *    main thread forks several times.  Each child, within a time limit:
 *    verifies the frozen set (it inherited it), pins and frees inherited
 *    objects, allocates and frees objects of its own (also from a new
 *    thread), runs ucma_compact() and ucma_alloc()/ucma_release(), releases
 *    the inherited contiguous buffer, and exits 0 only if every step
 *    worked.  A lock left held across fork would hang the child: the time
 *    limit turns that into a failure.
 * 2. Exec after fork: a child of the busy parent executes this program
 *    again with --exec-workload, which starts ucma afresh, runs a small
 *    workload and exits 0.
 * 3. A thread cancelled while it holds a pin: the pin is not released by
 *    itself (a pin is a count, not owned by a thread), so ucma_hfree()
 *    fails with EBUSY until somebody unpins.  A thread that pushes a
 *    cleanup handler which calls ucma_unpin() (the pattern the manual
 *    recommends) leaves nothing pinned when cancelled, and ucma_hfree()
 *    succeeds at once.
 *
 * 4. Fork in the middle of another thread's ucma_alloc() or ucma_release():
 *    neither holds one lock throughout (the migration in between waits
 *    for readers), and a child of a fork in between used to keep the
 *    pageblocks the allocation had isolated isolated for ever (their free
 *    pages on no usable list) and the area's bits set for a buffer nobody
 *    has.  One thread allocates and releases contiguous buffers (every
 *    other one locked, so that its release takes longer) from CMA memory
 *    that movable objects fill, while the main thread forks; each child
 *    checks that no CMA pageblock is isolated, that no operation is
 *    listed in flight, that the set bits are the counted buffers' pages,
 *    that every run of the CMA zone that is no movable memory and on no
 *    per-CPU list is a counted buffer, that the zone's invariants hold,
 *    and that it can allocate and release a buffer itself.
 * 5. A thread cancelled while it allocates and releases contiguous
 *    buffers: ucma_alloc() waits for readers (liburcu's poll()) and for
 *    pins (nanosleep()) at cancellation points, and a thread cancelled
 *    there left its operation's record listed on a stack that is gone,
 *    the drain lock held and pageblocks isolated.  Each round a reader
 *    holds a read-side section while the thread is cancelled; then no
 *    operation is listed, no CMA pageblock is isolated, and a fork's
 *    child works.
 *
 * Every wait is bounded, so a deadlock fails instead of hanging: the
 * parent kills a child that takes longer than CHILD_SECONDS and reports
 * the step it was in (the child writes it to memory shared with the
 * parent), and an alarm ends the whole program after TEST_SECONDS.
 *
 * Under ThreadSanitizer, which cannot follow threads created in the child
 * of a multi-threaded process, the children start no thread and the
 * background compaction thread is off.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "tap.h"
#include "testutil.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define NFROZEN 64
#define NFORKS 8
#define NALLOCATORS 2
#define CHILD_SECONDS 20	/* a child that takes longer is hung */
#define TEST_SECONDS 120	/* the whole program */

struct frozen_block {
	unsigned char *p;
	size_t size;
	uint64_t seed;
};

struct frozen_obj {
	ucma_handle_t h;
	size_t size;
	uint64_t seed;
};

static struct frozen_block fblocks[NFROZEN];
static struct frozen_obj fobjs[NFROZEN];
static unsigned char *fcontig;
static const size_t fcontig_size = 1u << 20;
static _Atomic bool stop;
static _Atomic uint64_t thread_errors, thread_ops;

/*
 * ThreadSanitizer cannot follow threads created in the child of a
 * multi-threaded process (it mixes them up with the parent's): under it,
 * children start no thread and the library runs no background thread.
 */
#ifdef UCMA_TSAN
static const bool under_tsan = true;
#else
static const bool under_tsan = false;
#endif

/*
 * What the child is doing, in memory shared with the parent, so that the
 * parent can say where a child hung.  The parent enforces the time limit
 * (a signal handler in the child may never run when it hangs in a lock
 * under a sanitizer).
 */
static char *child_step;

static void set_step(const char *what)
{
	if (child_step)
		snprintf(child_step, 128, "%s", what);
}

static void on_timeout(int sig)
{
	static const char msg[] = "Bail out! timed out: a fork, exec or cancel test hangs\n";

	(void)sig;
	if (write(1, msg, sizeof(msg) - 1) < 0)
		_exit(2);
	_exit(1);
}

/* ------------------------------------------------------------------------ */
/* Busy threads                                                              */
/* ------------------------------------------------------------------------ */

static void *allocator(void *arg)
{
	uint64_t s = 1234 + (uintptr_t)arg;
	struct {
		unsigned char *p;
		size_t size;
		uint64_t seed;
		ucma_handle_t h;
		size_t hsize;
		uint64_t hseed;
	} slot[32] = { { 0 } };

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		int i = (int)(tu_rand(&s) % 32);
		unsigned char *p;

		if (tu_rand(&s) % 2) {
			if (slot[i].p) {
				if (!tu_check(slot[i].p, slot[i].size, slot[i].seed))
					atomic_fetch_add(&thread_errors, 1);
				ucma_free(slot[i].p);
				slot[i].p = NULL;
			} else {
				slot[i].size = 1 + tu_rand(&s) % 20000;
				slot[i].seed = tu_rand(&s);
				slot[i].p = ucma_malloc(slot[i].size);
				if (!slot[i].p) {
					atomic_fetch_add(&thread_errors, 1);
					continue;
				}
				tu_fill(slot[i].p, slot[i].size, slot[i].seed);
			}
		} else if (slot[i].h) {
			p = ucma_pin(slot[i].h, 0);
			if (!p || !tu_check(p, slot[i].hsize, slot[i].hseed))
				atomic_fetch_add(&thread_errors, 1);
			if (p)
				ucma_unpin(slot[i].h);
			if (ucma_hfree(slot[i].h) != 0)
				atomic_fetch_add(&thread_errors, 1);
			slot[i].h = 0;
		} else {
			slot[i].hsize = 1 + tu_rand(&s) % 30000;
			slot[i].hseed = tu_rand(&s);
			slot[i].h = ucma_halloc(slot[i].hsize, 0);
			p = slot[i].h ? ucma_pin(slot[i].h, 0) : NULL;
			if (!p) {
				atomic_fetch_add(&thread_errors, 1);
				continue;
			}
			tu_fill(p, slot[i].hsize, slot[i].hseed);
			ucma_unpin(slot[i].h);
		}
		atomic_fetch_add_explicit(&thread_ops, 1, memory_order_relaxed);
	}
	for (int i = 0; i < 32; i++) {
		if (slot[i].p)
			ucma_free(slot[i].p);
		if (slot[i].h)
			ucma_hfree(slot[i].h);
	}
	return NULL;
}

static void *compactor(void *arg)
{
	uint64_t s = 77;

	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		struct timespec ts = { 0, 2 * 1000 * 1000 };
		int prio = tu_rand(&s) % 3 ? UCMA_COMPACT_ASYNC : UCMA_COMPACT_SYNC_LIGHT;

		if (tu_rand(&s) % 2) {
			if (ucma_compact(prio) != 0)
				atomic_fetch_add(&thread_errors, 1);
		} else if (ucma_compact_order((unsigned)(tu_rand(&s) % 10), UCMA_COMPACT_ASYNC) &&
			   errno != ENOMEM) {
			atomic_fetch_add(&thread_errors, 1);
		}
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* The frozen set                                                            */
/* ------------------------------------------------------------------------ */

static void frozen_create(void)
{
	uint64_t s = 42;

	for (int i = 0; i < NFROZEN; i++) {
		unsigned char *p;

		fblocks[i].size = 1 + tu_rand(&s) % 50000;
		fblocks[i].seed = tu_rand(&s);
		fblocks[i].p = ucma_malloc(fblocks[i].size);
		if (!fblocks[i].p)
			bail_out("ucma_malloc: %s", strerror(errno));
		tu_fill(fblocks[i].p, fblocks[i].size, fblocks[i].seed);

		fobjs[i].size = 1 + tu_rand(&s) % 50000;
		fobjs[i].seed = tu_rand(&s);
		fobjs[i].h = ucma_halloc(fobjs[i].size, 0);
		p = fobjs[i].h ? ucma_pin(fobjs[i].h, 0) : NULL;
		if (!p)
			bail_out("ucma_halloc: %s", strerror(errno));
		tu_fill(p, fobjs[i].size, fobjs[i].seed);
		ucma_unpin(fobjs[i].h);
	}
	fcontig = ucma_alloc(fcontig_size, 0, 0);
	if (!fcontig)
		bail_out("ucma_alloc: %s", strerror(errno));
	tu_fill(fcontig, fcontig_size, 4242);
}

/* How many frozen objects fail to verify. */
static int frozen_check(void)
{
	int bad = 0;

	for (int i = 0; i < NFROZEN; i++)
		bad += !tu_check(fblocks[i].p, fblocks[i].size, fblocks[i].seed);
	ucma_read_lock();
	for (int i = 0; i < NFROZEN; i++) {
		const void *p;

		if (!fobjs[i].h)
			continue;
		p = ucma_deref(fobjs[i].h);
		bad += !p || !tu_check(p, fobjs[i].size, fobjs[i].seed);
	}
	ucma_read_unlock();
	bad += !tu_check(fcontig, fcontig_size, 4242);
	return bad;
}

/* ------------------------------------------------------------------------ */
/* The child                                                                 */
/* ------------------------------------------------------------------------ */

static void *child_thread(void *arg)
{
	uint64_t s = 5;
	int *bad = arg;

	for (int i = 0; i < 200; i++) {
		size_t n = 1 + tu_rand(&s) % 8000;
		unsigned char *p = ucma_malloc(n);
		ucma_handle_t h = ucma_halloc(n, 0);
		unsigned char *q = h ? ucma_pin(h, 0) : NULL;

		if (!p || !q) {
			(*bad)++;
			break;
		}
		tu_fill(p, n, (uint64_t)i);
		tu_fill(q, n, (uint64_t)i + 1);
		*bad += !tu_check(p, n, (uint64_t)i) || !tu_check(q, n, (uint64_t)i + 1);
		ucma_unpin(h);
		ucma_free(p);
		*bad += ucma_hfree(h) != 0;
	}
	return NULL;
}

/* The child's work; returns the exit code: a bit per failed step. */
static int child_main(void)
{
	int code = 0, tbad = 0;
	pthread_t t;
	void *buf;

	set_step("verifying the inherited objects");
	if (frozen_check())
		code |= 1;
	/* Inherited objects can be pinned, written and freed. */
	set_step("pinning and freeing inherited objects");
	for (int i = 0; i < NFROZEN; i += 2) {
		unsigned char *p = ucma_pin(fobjs[i].h, 0);

		if (!p || !tu_check(p, fobjs[i].size, fobjs[i].seed)) {
			code |= 2;
			continue;
		}
		fobjs[i].seed ^= 1;
		tu_fill(p, fobjs[i].size, fobjs[i].seed);
		ucma_unpin(fobjs[i].h);
		if (i % 4 == 0) {
			if (ucma_hfree(fobjs[i].h) != 0)
				code |= 2;
			fobjs[i].h = 0;
		}
	}
	set_step("freeing and allocating malloc blocks");
	for (int i = 0; i < NFROZEN; i += 3) {
		ucma_free(fblocks[i].p);
		fblocks[i].p = ucma_malloc(fblocks[i].size);
		if (!fblocks[i].p) {
			code |= 4;
			break;
		}
		tu_fill(fblocks[i].p, fblocks[i].size, fblocks[i].seed);
	}
	/* New objects, from this thread and from a new one. */
	set_step("allocating new objects");
	if (!under_tsan &&
	    (pthread_create(&t, NULL, child_thread, &tbad) != 0 || pthread_join(t, NULL) != 0))
		code |= 8;
	child_thread(&tbad);
	if (tbad)
		code |= 8;
	set_step("ucma_compact");
	if (ucma_compact(UCMA_COMPACT_SYNC_FULL) != 0)
		code |= 16;
	if (ucma_compact_order(4, UCMA_COMPACT_SYNC_LIGHT) != 0 && errno != ENOMEM)
		code |= 16;
	set_step("ucma_alloc");
	buf = ucma_alloc(2u << 20, 0, UCMA_ALLOC_ZERO);
	if (!buf || ((char *)buf)[0] || ((char *)buf)[(2u << 20) - 1]) {
		code |= 32;
	} else {
		tu_fill(buf, 2u << 20, 7);
		if (!tu_check(buf, 2u << 20, 7) || ucma_release(buf) != 0)
			code |= 32;
	}
	set_step("verifying again, releasing");
	if (frozen_check())
		code |= 1;
	if (ucma_release(fcontig) != 0)
		code |= 64;
	if (code)
		fprintf(stderr, "fork_ops child %d: failed steps %#x\n", (int)getpid(), code);
	return code;
}

/* Run by the child of test 2 after exec: ucma from scratch in a new image. */
static int exec_workload(void)
{
	struct ucma_config cfg = {
		.arena_size = 32u << 20,
		.cma_size = 16u << 20,
		.hugepages = UCMA_BACKING_NONE,
	};
	ucma_handle_t h;
	unsigned char *p, *m, *c;
	int bad = 0;

	alarm(CHILD_SECONDS);
	if (ucma_init(&cfg) != 0)
		return 10;
	m = ucma_malloc(1000);
	h = ucma_halloc(5000, 0);
	p = h ? ucma_pin(h, UCMA_PIN_LONGTERM) : NULL;
	c = ucma_alloc(1u << 20, 0, 0);
	if (!m || !p || !c)
		return 11;
	tu_fill(m, 1000, 1);
	tu_fill(p, 5000, 2);
	tu_fill(c, 1u << 20, 3);
	bad += ucma_unpin(h) != 0;
	bad += ucma_compact(UCMA_COMPACT_SYNC_FULL) != 0;
	ucma_read_lock();
	bad += !tu_check(ucma_deref(h), 5000, 2);
	ucma_read_unlock();
	bad += !tu_check(m, 1000, 1) || !tu_check(c, 1u << 20, 3);
	bad += ucma_release(c) != 0 || ucma_hfree(h) != 0;
	ucma_free(m);
	return bad ? 12 : 0;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* Wait for @pid at most CHILD_SECONDS; kill it if it hangs.  Returns its
 * status, or -1 when it had to be killed. */
static int wait_child(pid_t pid)
{
	uint64_t deadline = tu_now_ns() + (uint64_t)CHILD_SECONDS * 1000000000ull;
	int st;

	for (;;) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return st;
		if (r < 0)
			bail_out("waitpid: %s", strerror(errno));
		if (tu_now_ns() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		nanosleep(&ts, NULL);
	}
}

static const char *exit_text(int st, char *buf, size_t len)
{
	if (st == -1)
		snprintf(buf, len, "hung for %d s in: %s", CHILD_SECONDS,
			 child_step ? child_step : "?");
	else if (WIFEXITED(st))
		snprintf(buf, len, "exit %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(st));
	else
		snprintf(buf, len, "status %#x", st);
	return buf;
}

static void test_fork_busy(void)
{
	pthread_t th[NALLOCATORS + 1];
	int n = 0, children_ok = 0;
	char why[64];

	frozen_create();
	for (int i = 0; i < NALLOCATORS; i++)
		pthread_create(&th[n++], NULL, allocator, (void *)(uintptr_t)i);
	pthread_create(&th[n++], NULL, compactor, NULL);
	diag("background compaction thread: %s",
	     ucma_compactd_running() ? "running" : "not running");

	for (int k = 0; k < NFORKS; k++) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		pid_t pid;
		int st;

		nanosleep(&ts, NULL);	/* let the threads get going */
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			bail_out("fork: %s", strerror(errno));
		set_step("starting");
		if (pid == 0)
			_exit(child_main());
		st = wait_child(pid);
		if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			children_ok++;
		else
			diag("child %d: %s", k, exit_text(st, why, sizeof(why)));
	}
	ok(children_ok == NFORKS,
	   "%d of %d children forked amid allocations and compaction verified the inherited "
	   "data, allocated, compacted, used ucma_alloc and exited 0",
	   children_ok, NFORKS);

	/* Exec from a child of the busy process. */
	{
		pid_t pid;
		int st;

		fflush(stdout);
		pid = fork();
		if (pid < 0)
			bail_out("fork: %s", strerror(errno));
		set_step("exec");
		if (pid == 0) {
			execl("/proc/self/exe", "fork_ops", "--exec-workload", (char *)NULL);
			_exit(127);
		}
		st = wait_child(pid);
		ok(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		   "a child execs this program, which runs a fresh ucma workload (%s)",
		   exit_text(st, why, sizeof(why)));
	}

	atomic_store(&stop, true);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	ok(atomic_load(&thread_errors) == 0 && atomic_load(&thread_ops) > 0,
	   "the parent's threads saw no error (%llu operations)",
	   (unsigned long long)atomic_load(&thread_ops));
	ok(frozen_check() == 0, "the parent's frozen set is intact after the forks");
	for (int i = 0; i < NFROZEN; i++) {
		ucma_free(fblocks[i].p);
		ucma_hfree(fobjs[i].h);
	}
	ok(ucma_release(fcontig) == 0, "the parent releases its contiguous buffer");
}

/* ------------------------------------------------------------------------ */
/* Cancellation inside a pin                                                 */
/* ------------------------------------------------------------------------ */

struct pin_job {
	ucma_handle_t h;
	bool cleanup;		/* push a cleanup handler that unpins */
	_Atomic bool pinned;
};

static void unpin_cleanup(void *arg)
{
	ucma_unpin(*(ucma_handle_t *)arg);
}

static void *pin_and_sleep(void *arg)
{
	struct pin_job *job = arg;
	unsigned char *p = ucma_pin(job->h, 0);

	if (!p)
		return NULL;
	if (job->cleanup) {
		/* The recommended pattern: the pin is dropped on any exit. */
		pthread_cleanup_push(unpin_cleanup, &job->h);
		p[0] = 1;
		atomic_store(&job->pinned, true);
		for (;;)
			sleep(10);	/* a cancellation point */
		pthread_cleanup_pop(1);
	} else {
		p[0] = 1;
		atomic_store(&job->pinned, true);
		for (;;)
			sleep(10);
	}
	return NULL;
}

static void cancel_pinned(struct pin_job *job)
{
	pthread_t t;
	void *ret = NULL;

	atomic_store(&job->pinned, false);
	pthread_create(&t, NULL, pin_and_sleep, job);
	while (!atomic_load(&job->pinned)) {
		struct timespec ts = { 0, 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	pthread_cancel(t);
	pthread_join(t, &ret);
	if (ret != PTHREAD_CANCELED)
		diag("the pinning thread was not cancelled");
}

static void test_cancel(void)
{
	struct pin_job job = { 0 };

	job.h = ucma_halloc(4096, 0);
	job.cleanup = false;
	cancel_pinned(&job);
	errno = 0;
	ok(ucma_hfree(job.h) == -1 && errno == EBUSY,
	   "a thread cancelled while holding a pin leaves it pinned: hfree fails with EBUSY");
	ok(ucma_unpin(job.h) == 0 && ucma_unpin(job.h) == -1 && errno == EINVAL,
	   "another thread can drop that pin, and there was exactly one");
	ok(ucma_hfree(job.h) == 0, "then hfree succeeds");

	job.h = ucma_halloc(4096, 0);
	job.cleanup = true;
	cancel_pinned(&job);
	ok(ucma_hfree(job.h) == 0,
	   "with a pthread_cleanup_push() handler calling ucma_unpin(), hfree succeeds at once");
}

/* ------------------------------------------------------------------------ */
/* 4. Fork in the middle of another thread's ucma_alloc() or ucma_release()  */
/* ------------------------------------------------------------------------ */

#define CONTIG_SIZE (64u << 10)
#define CONTIG_KEEP 4		/* buffers the thread keeps at a time */
#define CONTIG_SECONDS 30	/* forks stop after this long */
#define CANCEL_SIZE (8u << 20)	/* scenario 5: moves many objects */
/* Forks: fewer under the sanitizers, where each costs several times more. */
#if defined(UCMA_TSAN) || defined(UCMA_ASAN)
#define CONTIG_FORKS 40
#else
#define CONTIG_FORKS 150
#endif

static void *contig_worker(void *arg)
{
	void *keep[CONTIG_KEEP] = { NULL };
	unsigned i = 0;

	(void)arg;
	while (!atomic_load(&stop)) {
		unsigned k = i++ % CONTIG_KEEP;

		if (keep[k] && ucma_release(keep[k]) != 0)
			atomic_fetch_add(&thread_errors, 1);
		keep[k] = ucma_alloc(CONTIG_SIZE, 0, (i & 1) ? UCMA_ALLOC_MLOCK : 0);
		atomic_fetch_add(&thread_ops, 1);
	}
	for (unsigned k = 0; k < CONTIG_KEEP; k++)
		if (keep[k] && ucma_release(keep[k]) != 0)
			atomic_fetch_add(&thread_errors, 1);
	return NULL;
}

/* Movable objects into the CMA zone, for ucma_alloc() to migrate. */
static void *contig_filler(void *arg)
{
	enum { N = 256 };
	ucma_handle_t h[N] = { 0 };
	unsigned i = 0;

	(void)arg;
	while (!atomic_load(&stop)) {
		unsigned k = i++ % N;

		if (h[k])
			ucma_hfree(h[k]);
		h[k] = ucma_halloc(4096 << (k % 4), 0);
	}
	for (unsigned k = 0; k < N; k++)
		if (h[k])
			ucma_hfree(h[k]);
	return NULL;
}

static unsigned bits_count(const unsigned long *map, uint32_t n)
{
	unsigned c = 0;

	for (uint32_t i = 0; i < n; i++)
		c += (map[i / (8 * sizeof(long))] >> (i % (8 * sizeof(long)))) & 1;
	return c;
}

/* The child's checks; the exit status says which failed. */
static int contig_child(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_zone *z = &a->zones[UCMA_ZONE_CMA];
	char why[256];

	set_step("contig child: checks");
	for (uint32_t pfn = z->start_pfn; pfn < z->end_pfn; pfn += UCMA_PAGEBLOCK_PAGES)
		if (ucma_pfn_block(a, pfn)->isolate_count)
			return 10;
	for (int i = 0; i < a->nr_areas; i++) {
		struct ucma_cma_area *area = &a->areas[i];

		if (area->ops)
			return 11;
		if (bits_count(area->bitmap, area->npages) != area->nr_allocated_pages)
			return 12;
	}
	if (ucma_zone_check(z, why, sizeof(why)) != 0)
		return 13;
	/* Every run is movable memory (an absent thread's unfinished
	 * migration or object included), on a per-CPU list, lent to the
	 * heap, or a counted buffer: none was left behind half made or half
	 * given back. */
	{
		uint64_t contig = 0, counted = 0;

		for (uint32_t pfn = z->start_pfn; pfn < z->end_pfn;) {
			const struct ucma_page *pg = &a->pages[pfn];

			if (pg->kind != UCMA_PK_RUN) {
				pfn++;
				continue;
			}
			if (pg->owner_type == UCMA_OWN_CONTIG)
				contig += pg->aux;
			else if (!(pg->flags & (UCMA_PF_PCP | UCMA_PF_MOVABLE)) &&
				 pg->owner_type != UCMA_OWN_MOVABLE &&
				 pg->owner_type != UCMA_OWN_MSLAB && pg->owner_type != UCMA_OWN_LENT)
				return 14;
			pfn += pg->aux ? pg->aux : 1;
		}
		for (int i = 0; i < a->nr_areas; i++)
			counted += a->areas[i].nr_allocated_pages;
		if (contig != counted)
			return 14;
	}
	set_step("contig child: a buffer of its own");
	{
		void *p = ucma_alloc(4 * CONTIG_SIZE, 0, 0);

		if (!p || ucma_release(p) != 0)
			return 15;
	}
	return 0;
}

static void test_fork_contig(void)
{
	static const char *const what[] = {
		[10] = "a CMA pageblock stayed isolated",
		[11] = "an operation of an absent thread stayed listed",
		[12] = "the set bits are not the counted buffers' pages",
		[13] = "the CMA zone's invariants are broken",
		[14] = "a run of the CMA zone is neither movable, listed, lent nor a counted buffer",
		[15] = "no buffer of its own",
	};
	unsigned bad[16] = { 0 };
	unsigned failed = 0, hung = 0, forks = 0;
	uint64_t t0 = tu_now_ns();
	uint64_t ops0 = atomic_load(&thread_ops);
	pthread_t w, f;
	char buf[160];

	atomic_store(&stop, false);
	atomic_store(&thread_errors, 0);
	pthread_create(&w, NULL, contig_worker, NULL);
	pthread_create(&f, NULL, contig_filler, NULL);
	for (int i = 0; i < CONTIG_FORKS; i++) {
		struct timespec ts = { 0, (long)(i % 7) * 100 * 1000 };

		if (tu_now_ns() - t0 > (uint64_t)CONTIG_SECONDS * 1000000000ull)
			break;
		forks++;
		pid_t pid;
		int st;

		nanosleep(&ts, NULL);
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			bail_out("fork: %s", strerror(errno));
		if (pid == 0)
			_exit(contig_child());
		st = wait_child(pid);
		if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			continue;
		failed++;
		if (st == -1)
			hung++;
		else if (WIFEXITED(st) && WEXITSTATUS(st) < 16)
			bad[WEXITSTATUS(st)]++;
		if (failed <= 3)
			diag("fork %d: child %s", i, exit_text(st, buf, sizeof(buf)));
	}
	atomic_store(&stop, true);
	pthread_join(w, NULL);
	pthread_join(f, NULL);
	for (unsigned k = 10; k < 16; k++)
		if (bad[k])
			diag("%u of %u children: %s", bad[k], forks, what[k]);
	ok(failed == 0 && forks >= 20,
	   "%u forks amid another thread's ucma_alloc()/ucma_release(): every child has no "
	   "isolated pageblock, no operation in flight, bits and runs as counted, and a buffer "
	   "of its own (%u failed, %u hung)",
	   forks, failed, hung);
	ok(atomic_load(&thread_errors) == 0 && atomic_load(&thread_ops) > ops0,
	   "the allocating thread worked throughout (%llu operations, %llu errors)",
	   (unsigned long long)(atomic_load(&thread_ops) - ops0),
	   (unsigned long long)atomic_load(&thread_errors));
}

/* ------------------------------------------------------------------------ */
/* 5. A thread cancelled in the middle of ucma_alloc() or ucma_release()     */
/* ------------------------------------------------------------------------ */

static _Atomic bool reader_holds, reader_in;

/* A read-side section held while reader_holds: grace periods wait. */
static void *section_holder(void *arg)
{
	(void)arg;
	ucma_read_lock();
	atomic_store(&reader_in, true);
	while (atomic_load(&reader_holds)) {
		struct timespec ts = { 0, 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	ucma_read_unlock();
	return NULL;
}

static void *contig_cancellable(void *arg)
{
	(void)arg;
	pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
	for (;;) {
		void *p = ucma_alloc(CANCEL_SIZE, 0, 0);

		if (p)
			ucma_release(p);
		pthread_testcancel();
	}
	return NULL;
}

static void test_cancel_contig(void)
{
	enum { ROUNDS = 8, NOBJ = 8192 };
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_zone *z = &a->zones[UCMA_ZONE_CMA];
	unsigned listed = 0, isolated = 0, bad_children = 0;
	static ucma_handle_t h[NOBJ];

	/* Movable objects all over the CMA zone, for ucma_alloc() to move. */
	for (int i = 0; i < NOBJ; i++)
		h[i] = ucma_halloc(4096, 0);
	for (int r = 0; r < ROUNDS; r++) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		pthread_t t, reader;
		pid_t pid;
		int st;

		/* The thread is cancelled while a reader holds the grace
		 * period its migrations wait for. */
		atomic_store(&reader_holds, true);
		atomic_store(&reader_in, false);
		pthread_create(&reader, NULL, section_holder, NULL);
		while (!atomic_load(&reader_in))
			sched_yield();
		pthread_create(&t, NULL, contig_cancellable, NULL);
		nanosleep(&ts, NULL);
		pthread_cancel(t);
		atomic_store(&reader_holds, false);
		pthread_join(reader, NULL);
		pthread_join(t, NULL);
		for (int i = 0; i < a->nr_areas; i++) {
			ucma_mutex_lock(&a->areas[i].lock);
			listed += a->areas[i].ops != NULL;
			ucma_mutex_unlock(&a->areas[i].lock);
		}
		ucma_mutex_lock(&z->lock);
		for (uint32_t pfn = z->start_pfn; pfn < z->end_pfn; pfn += UCMA_PAGEBLOCK_PAGES)
			isolated += ucma_pfn_block(a, pfn)->isolate_count != 0;
		ucma_mutex_unlock(&z->lock);
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			bail_out("fork: %s", strerror(errno));
		if (pid == 0) {
			void *p;

			set_step("cancel child: ucma_alloc");
			p = ucma_alloc(CONTIG_SIZE, 0, 0);
			_exit(p && ucma_release(p) == 0 ? 0 : 1);
		}
		st = wait_child(pid);
		bad_children += st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	for (int i = 0; i < NOBJ; i++)
		if (h[i])
			ucma_hfree(h[i]);
	ok(listed == 0 && isolated == 0 && bad_children == 0,
	   "%d threads cancelled in ucma_alloc()'s wait for readers: no operation left listed "
	   "(%u), no pageblock left isolated (%u), every fork's child allocates (%u failed or "
	   "hung)",
	   ROUNDS, listed, isolated, bad_children);
}

int main(int argc, char **argv)
{
	struct ucma_config cfg = {
		.arena_size = 128u << 20,
		.cma_size = 64u << 20,
		.hugepages = UCMA_BACKING_NONE,
	};

	if (argc > 1 && strcmp(argv[1], "--exec-workload") == 0)
		return exec_workload();
	plan_no_plan();
	signal(SIGALRM, on_timeout);
	alarm(TEST_SECONDS);
	child_step = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (child_step == MAP_FAILED)
		child_step = NULL;
	/* A busy background compaction thread. */
	setenv("UCMA_COMPACT_INTERVAL_MS", "5", 0);
	if (under_tsan) {
		setenv("UCMA_COMPACT", "0", 1);
		diag("ThreadSanitizer: no background compaction, no threads in the children");
	}
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	test_fork_busy();
	test_cancel();
	test_fork_contig();
	test_cancel_contig();
	ucma_defer_drain();
	{
		struct ucma_arena *a = ucma_arena_get();
		char why[256];

		ok(ucma_zone_check(&a->zones[0], why, sizeof(why)) == 0 &&
			   ucma_zone_check(&a->zones[1], why, sizeof(why)) == 0,
		   "zone invariants hold at the end");
	}
	return done();
}
