/*
 * races.c - regression tests for races between legal calls.
 *
 * 1. Pin versus free and reuse of a handle-table entry.  One thread
 *    recycles one entry (halloc, pin, write, unpin, hfree) as fast as it
 *    can; others pin and unpin whatever handle it last published, which is
 *    legal: they pin the live object, or get EINVAL for a freed one.  The
 *    entry's state word once lost a transient pin of a stale handle when
 *    the entry was reused, and the owner then hung (a pin count of
 *    0xffffffff) or a real pin was dropped.  A watchdog fails the test if
 *    the owner stops making progress.
 * 2. fork() right after the compaction thread started, many times: the
 *    park handshake of the fork handler once lost a wake-up and fork()
 *    waited forever.
 * 3. ucma_read_unlock() without ucma_read_lock(): ignored, and grace
 *    periods in other threads still end.
 * 4. Compaction racing frees: one thread compacts without pause while
 *    another frees and allocates objects (their contents stamped and
 *    checked) and the background thread runs too.  Compaction read a
 *    page's metadata without the zone lock while a free rewrote it, a
 *    data race that ThreadSanitizer reported about once in two suite runs.
 * 5. ucma_hrealloc() racing readers that check size and contents
 *    together: ucma_deref_size() must give an address and a size of the
 *    same version of the object (ucma_hsize() after ucma_deref() gave a
 *    64 KiB size with a 16-byte slot about once in 2000 reads), and the
 *    first bytes, kept by every resize, must read as written.
 * 6. fork() while threads free large blocks into their caches and take
 *    them back: a child gives back the runs its absent threads kept.  It
 *    has their lists as they were at one instant, which may fall inside
 *    a change (an entry listed twice, or a stale one past the count), and
 *    one child in 70 to 400 freed such a run a second time and aborted
 *    ("free already").  The threads also hand large blocks to the
 *    forking thread, which frees them into its own cache, so that a stale
 *    entry may name a run that cache keeps.  Each child allocates, checks
 *    and frees blocks and exits 0.
 *
 * 7. Pins racing exclusive holds: threads pin and unpin one object (and
 *    check its first bytes) while another resizes it with
 *    ucma_hrealloc() and migrates it, both of which hold the entry.  A
 *    pin adds one to the entry's state before it looks and takes it back
 *    when it finds the entry held; the hold's release must keep such
 *    passing additions.  Afterwards the state must be 0 again (a passing
 *    one lost or kept for good would show as a pin nobody holds, and
 *    ucma_hfree() would fail with EBUSY for ever).
 *
 * Duration of parts 1, 4, 5 and 7: UCMA_STRESS_SECONDS (default 2) each,
 * counted once their threads are set up, and longer (up to a minute) until
 * the racing thread has done something.
 *
 * SPDX-License-Identifier: MIT
 */
#include "tap.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucma.h>

#include "internal.h"
#include "handle.h"

#define ATTACKERS 3

/*
 * A part's time window: @seconds from when its threads are set up, and
 * longer, up to a minute more, until the other thread made progress.
 * Under a sanitizer on a loaded machine, the set-up or a thread's start
 * can take the whole window, and a part that raced nothing proves nothing.
 */
struct window {
	uint64_t end, limit;
};

static struct window window_start(unsigned seconds)
{
	uint64_t now = tu_now_ns();

	return (struct window){ now + (uint64_t)seconds * 1000000000ull,
				now + (uint64_t)(seconds + 60) * 1000000000ull };
}

static int window_open(const struct window *w, long progress)
{
	uint64_t now = tu_now_ns();

	return now < w->end || (progress == 0 && now < w->limit);
}

static _Atomic ucma_handle_t published;
static atomic_int stop;
static atomic_long iterations, attacker_pins, unpin_failures;

static void *attacker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		ucma_handle_t h = atomic_load(&published);

		if (h && ucma_pin(h, 0)) {
			atomic_fetch_add(&attacker_pins, 1);
			if (ucma_unpin(h) != 0)
				atomic_fetch_add(&unpin_failures, 1);
		}
	}
	return NULL;
}

/* Exits the process when the owner makes no progress for 5 seconds. */
static void *watchdog(void *arg)
{
	long last = -1;
	int still = 0;

	(void)arg;
	while (!atomic_load(&stop)) {
		long now;

		sleep(1);
		now = atomic_load(&iterations);
		still = now == last ? still + 1 : 0;
		last = now;
		if (still == 5) {
			printf("not ok - the owner of the entry hangs after %ld iterations\n", now);
			fflush(stdout);
			_exit(1);
		}
	}
	return NULL;
}

static void test_pin_versus_reuse(unsigned seconds)
{
	pthread_t t[ATTACKERS], w;
	long anomalies = 0;
	struct window win;

	for (int i = 0; i < ATTACKERS; i++)
		if (pthread_create(&t[i], NULL, attacker, NULL) != 0)
			bail_out("pthread_create");
	if (pthread_create(&w, NULL, watchdog, NULL) != 0)
		bail_out("pthread_create");
	win = window_start(seconds);
	while (window_open(&win, atomic_load(&attacker_pins)) && !anomalies) {
		for (int k = 0; k < 1000; k++) {
			ucma_handle_t h = ucma_halloc(64, 0);
			char *p;

			if (!h)
				bail_out("ucma_halloc: %s", strerror(errno));
			p = ucma_pin(h, 0);
			if (!p || (memset(p, 0x5a, 64), ucma_unpin(h) != 0)) {
				diag("the owner's pin or unpin of a live object failed: %s",
				     strerror(errno));
				anomalies++;
				break;
			}
			atomic_store(&published, h);
			while (ucma_hfree(h) != 0) {
				if (errno != EBUSY) {
					diag("ucma_hfree: %s", strerror(errno));
					anomalies++;
					break;
				}
			}
			atomic_fetch_add(&iterations, 1);
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < ATTACKERS; i++)
		pthread_join(t[i], NULL);
	pthread_join(w, NULL);
	ok(anomalies == 0 && atomic_load(&unpin_failures) == 0,
	   "pin of a handle being freed and its entry reused: %ld cycles, %ld pins by "
	   "other threads, no lost pin", atomic_load(&iterations), atomic_load(&attacker_pins));
}

static void test_fork_handshake(void)
{
	int bad = 0, i;
	uint64_t t0 = tu_now_ns();

	/* A movable object starts the compaction thread. */
	ucma_handle_t h = ucma_halloc(10, 0);

	for (i = 0; i < 300 && !bad && tu_fork_loop_on(i, 50, t0); i++) {
		int status;
		pid_t pid = fork();

		if (pid == 0)
			_exit(0);
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
			bad = 1;
	}
	ok(!bad, "%d forks in a row with the compaction thread running", i);
	ucma_hfree(h);
}

static atomic_int keep_stop;

/* Blocks of HANDOFF_LEN bytes, filled with their first byte, that the
 * churning threads hand to the forking thread. */
enum { HANDOFF = 8, HANDOFF_LEN = 12 << 12 };
static _Atomic(unsigned char *) handoff[HANDOFF];

static long handoff_check_free(unsigned char *p)
{
	long bad = 0;

	if (p) {
		bad = p[HANDOFF_LEN - 1] != p[0] || p[HANDOFF_LEN / 2] != p[0];
		ucma_free(p);
	}
	return bad;
}

/* Large blocks (9 to 24 pages, kept by the thread cache when freed) and
 * small ones, replaced at random, written and checked. */
static void *keep_churn(void *arg)
{
	uint64_t rs = (uintptr_t)arg;
	struct {
		unsigned char *p;
		size_t n;
	} slot[32] = { { 0 } };
	long bad = 0;

	for (unsigned i = 0; !atomic_load_explicit(&keep_stop, memory_order_relaxed); i++) {
		uint64_t x = tu_rand(&rs);
		unsigned k = (unsigned)(x % 32);

		if (slot[k].p) {
			bad += !tu_check(slot[k].p, slot[k].n, k);
			ucma_free(slot[k].p);
		}
		slot[k].n = (x >> 8) & 1 ? (size_t)((x >> 16) % 16 + 9) << 12 : (x >> 16) % 3000 + 1;
		slot[k].p = ucma_malloc(slot[k].n);
		if (!slot[k].p) {
			bad++;
			continue;
		}
		tu_fill(slot[k].p, slot[k].n, k);
		if ((x >> 40) % 16 == 0) {
			unsigned char *h = ucma_malloc(HANDOFF_LEN);

			if (!h) {
				bad++;
				continue;
			}
			memset(h, (int)(x >> 48), HANDOFF_LEN);
			bad += handoff_check_free(atomic_exchange(&handoff[(x >> 44) % HANDOFF], h));
		}
		if (i % 64 == 0)
			usleep(50);	/* leave the children some CPU */
	}
	for (int k = 0; k < 32; k++) {
		if (slot[k].p)
			bad += !tu_check(slot[k].p, slot[k].n, k);
		ucma_free(slot[k].p);
	}
	return (void *)bad;
}

static void test_fork_kept_runs(void)
{
	enum { ROUNDS = 400 };
	pthread_t t[3];
	int failed = 0, r;
	long bad = 0;
	uint64_t t0 = tu_now_ns();

	for (uintptr_t i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, keep_churn, (void *)(i * 7919 + 1));
	for (r = 0; r < ROUNDS && tu_fork_loop_on(r, 50, t0); r++) {
		int status = 0;
		pid_t pid;

		for (int k = 0; k < HANDOFF; k++)
			bad += handoff_check_free(atomic_exchange(&handoff[k], NULL));
		pid = tu_fork();

		if (pid == 0) {
			void *p[200];

			for (int i = 0; i < 200; i++) {
				p[i] = ucma_malloc((size_t)(i % 25 + 1) * 1000);
				if (!p[i])
					_exit(2);
				tu_fill(p[i], (size_t)(i % 25 + 1) * 1000, (uint64_t)i);
			}
			for (int i = 0; i < 200; i++) {
				if (!tu_check(p[i], (size_t)(i % 25 + 1) * 1000, (uint64_t)i))
					_exit(3);
				ucma_free(p[i]);
			}
			ucma_trim();
			_exit(0);
		}
		status = tu_wait(pid);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			if (failed++ < 3)
				diag("round %d: the child %s %d", r,
				     WIFSIGNALED(status) ? "died of signal" : "exited with",
				     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		}
	}
	atomic_store(&keep_stop, 1);
	for (int i = 0; i < 3; i++) {
		void *ret;

		pthread_join(t[i], &ret);
		bad += (long)ret;
	}
	for (int k = 0; k < HANDOFF; k++)
		bad += handoff_check_free(atomic_exchange(&handoff[k], NULL));
	ok(failed == 0 && bad == 0,
	   "%d forks while 3 threads keep and take back large runs: %d children failed, "
	   "%ld blocks bad", r, failed, bad);
}

static void *compact_in_thread(void *arg)
{
	int *rc = arg;

	*rc = ucma_compact(UCMA_COMPACT_SYNC_FULL);
	return NULL;
}

static void test_stray_unlock(void)
{
	pthread_t t;
	int rc = -1;

	ucma_read_unlock();	/* without a lock: ignored */
	ucma_read_lock();
	ucma_read_unlock();
	ucma_read_unlock();	/* one more than taken: ignored */
	ok(ucma_compact(UCMA_COMPACT_ASYNC) == 0,
	   "after stray unlocks this thread is not inside a read-side section");
	if (pthread_create(&t, NULL, compact_in_thread, &rc) != 0)
		bail_out("pthread_create");
	pthread_join(t, NULL);
	ok(rc == 0, "another thread's grace period still ends");
}

/* ------------------------------------------------------------------------ */
/* 4. compaction racing frees                                                */
/* ------------------------------------------------------------------------ */

#define RACE_N 2048

struct race_obj {
	ucma_handle_t h;
	size_t size;
	uint64_t seed;
};
static struct race_obj robj[RACE_N];	/* the freeing thread's own */
static atomic_long race_corrupt, race_compactions;

/* Mostly page runs (whose frees rewrite page metadata), some slab objects. */
static size_t race_size(uint64_t *s)
{
	return tu_rand(s) % 8 ? 4097 + tu_rand(s) % 60000 : 16 + tu_rand(s) % 4000;
}

static void *compactor(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		ucma_compact(atomic_load(&race_compactions) % 2 ? UCMA_COMPACT_SYNC_LIGHT
								  : UCMA_COMPACT_ASYNC);
		atomic_fetch_add(&race_compactions, 1);
	}
	return NULL;
}

static int race_check(struct race_obj *o)
{
	const void *p;
	int good;

	ucma_read_lock();
	p = ucma_deref(o->h);
	good = p && tu_check(p, o->size, o->seed);
	ucma_read_unlock();
	return good;
}

static void test_compaction_vs_frees(unsigned seconds)
{
	uint64_t s = 42;
	long frees = 0;
	struct window w;
	pthread_t c;

	atomic_store(&stop, 0);
	for (int i = 0; i < RACE_N; i++) {
		struct race_obj *o = &robj[i];
		void *p;

		o->size = race_size(&s);
		o->seed = tu_rand(&s);
		o->h = ucma_halloc(o->size, 0);
		if (!o->h || !(p = ucma_pin(o->h, 0)))
			bail_out("ucma_halloc: %s", strerror(errno));
		tu_fill(p, o->size, o->seed);
		ucma_unpin(o->h);
	}
	if (pthread_create(&c, NULL, compactor, NULL) != 0)
		bail_out("pthread_create");
	w = window_start(seconds);
	while (window_open(&w, frees > 0 ? atomic_load(&race_compactions) : 0)) {
		/*
		 * Free a batch, then drain it at once (ucma_compact() ends with
		 * a drain) while the compactor's scanners walk the same
		 * pageblocks: a scanner that began looking at a run after the
		 * drain's grace period started reads the run's metadata while
		 * the drain frees it.
		 */
		unsigned first = (unsigned)(tu_rand(&s) % RACE_N), batch = RACE_N / 2;

		for (unsigned k = 0; k < batch; k++) {
			struct race_obj *o = &robj[(first + k) % RACE_N];

			if (!race_check(o))
				atomic_fetch_add(&race_corrupt, 1);
			if (ucma_hfree(o->h) != 0)
				bail_out("ucma_hfree: %s", strerror(errno));
			frees++;
		}
		ucma_compact(UCMA_COMPACT_ASYNC);
		for (unsigned k = 0; k < batch; k++) {
			struct race_obj *o = &robj[(first + k) % RACE_N];
			void *p;

			o->size = race_size(&s);
			o->seed = tu_rand(&s);
			o->h = ucma_halloc(o->size, 0);
			if (!o->h || !(p = ucma_pin(o->h, 0)))
				bail_out("ucma_halloc: %s", strerror(errno));
			tu_fill(p, o->size, o->seed);
			ucma_unpin(o->h);
		}
	}
	atomic_store(&stop, 1);
	pthread_join(c, NULL);
	for (int i = 0; i < RACE_N; i++) {
		if (!race_check(&robj[i]))
			atomic_fetch_add(&race_corrupt, 1);
		ucma_hfree(robj[i].h);
	}
	ok(atomic_load(&race_corrupt) == 0 && atomic_load(&race_compactions) > 0,
	   "compaction racing frees: %ld frees, %ld compactions, %ld corrupt objects", frees,
	   atomic_load(&race_compactions), atomic_load(&race_corrupt));
}

/* ------------------------------------------------------------------------ */
/* 5. hrealloc racing readers of size and contents                           */
/* ------------------------------------------------------------------------ */

static ucma_handle_t resized;
static atomic_long resizes;

/* Bytes of storage behind @p, from the page metadata (test build). */
static size_t storage_behind(const void *p)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t pfn = ucma_addr_to_pfn(a, p), head;
	const struct ucma_page *pg = &a->pages[pfn];
	uint8_t type = __atomic_load_n(&pg->owner_type, __ATOMIC_ACQUIRE);

	if (type == UCMA_OWN_MSLAB)
		return ucma_mslab_class_size(16);	/* the only small size used */
	if (type != UCMA_OWN_MOVABLE)
		return 0;
	head = ucma_run_head(a, pfn);
	return head == UCMA_PFN_NONE ? 0 :
	       (size_t)(head + UCMA_PG_GET(&a->pages[head], aux) - pfn) << UCMA_PAGE_SHIFT;
}

static void *resizer(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		if (ucma_hrealloc(resized, 65536) == 0)
			atomic_fetch_add(&resizes, 1);
		if (ucma_hrealloc(resized, 16) == 0)
			atomic_fetch_add(&resizes, 1);
	}
	return NULL;
}

static void test_hrealloc_vs_readers(unsigned seconds)
{
	long reads = 0, torn = 0, bad_bytes = 0;
	struct window w;
	pthread_t t;
	char *p;

	atomic_store(&stop, 0);
	resized = ucma_halloc(16, 0);
	if (!resized || !(p = ucma_pin(resized, 0)))
		bail_out("ucma_halloc: %s", strerror(errno));
	memset(p, 0x77, 16);	/* every resize keeps these bytes */
	ucma_unpin(resized);
	if (pthread_create(&t, NULL, resizer, NULL) != 0)
		bail_out("pthread_create");
	w = window_start(seconds);
	while (window_open(&w, atomic_load(&resizes))) {
		for (int k = 0; k < 1000; k++, reads++) {
			const unsigned char *q;
			size_t n = 0;

			ucma_read_lock();
			q = ucma_deref_size(resized, &n);
			if (!q || (n != 16 && n != 65536) || n > storage_behind(q))
				torn++;
			else
				for (int b = 0; b < 16; b++)
					bad_bytes += q[b] != 0x77;
			ucma_read_unlock();
		}
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	ok(torn == 0 && bad_bytes == 0 && atomic_load(&resizes) > 0,
	   "ucma_deref_size under ucma_hrealloc: %ld reads, %ld resizes, %ld torn pairs, "
	   "%ld wrong bytes", reads, atomic_load(&resizes), torn, bad_bytes);
	ucma_hfree(resized);
}

/* ------------------------------------------------------------------------ */
/* 7. pins racing exclusive holds                                            */
/* ------------------------------------------------------------------------ */

#define HELD_PINNERS 2

static ucma_handle_t held;
static atomic_long held_pins, held_holds, held_bad, held_changes;

static void *held_pinner(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		const unsigned char *p = ucma_pin(held, 0);

		if (!p) {
			atomic_fetch_add(&held_bad, 1);
			continue;
		}
		for (int b = 0; b < 16; b++)
			if (p[b] != 0x3c)
				atomic_fetch_add(&held_bad, 1);
		if (ucma_unpin(held) != 0)
			atomic_fetch_add(&held_bad, 1);
		atomic_fetch_add(&held_pins, 1);
	}
	return NULL;
}

static void test_pins_vs_holds(unsigned seconds)
{
	struct ucma_migrate_target t = { .no_cma = false };
	struct ucma_hentry *e;
	pthread_t th[HELD_PINNERS];
	long failed = 0;
	struct window w;
	char *p;
	uint32_t s;

	atomic_store(&stop, 0);
	held = ucma_halloc(16, 0);
	if (!held || !(p = ucma_pin(held, 0)))
		bail_out("ucma_halloc: %s", strerror(errno));
	memset(p, 0x3c, 16);	/* every resize and move keeps these bytes */
	ucma_unpin(held);
	e = ucma_handle_entry((uint32_t)held);
	for (int i = 0; i < HELD_PINNERS; i++)
		if (pthread_create(&th[i], NULL, held_pinner, NULL) != 0)
			bail_out("pthread_create");
	w = window_start(seconds);
	while (window_open(&w, atomic_load(&held_pins))) {
		const void *q;
		int r;

		r = ucma_hrealloc(held, atomic_load(&held_holds) & 1 ? 16 : 4096);
		if (r != 0 && errno != EBUSY)
			failed++;
		held_changes += r == 0;
		ucma_read_lock();
		q = ucma_deref(held);
		ucma_read_unlock();
		/* (The address is a hint: a resize may come first.) */
		r = ucma_migrate_object((uint32_t)held, (void *)q, &t);
		if (r != UCMA_MIGRATE_OK && r != UCMA_MIGRATE_PINNED && r != UCMA_MIGRATE_GONE)
			failed++;
		held_changes += r == UCMA_MIGRATE_OK;
		if ((atomic_fetch_add(&held_holds, 1) & 255) == 255)
			ucma_defer_drain();	/* the old copies */
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < HELD_PINNERS; i++)
		pthread_join(th[i], NULL);
	s = atomic_load(&e->state);
	ok(s == 0 && failed == 0 && atomic_load(&held_bad) == 0 && atomic_load(&held_pins) > 0 &&
		   held_changes > 0,
	   "pins racing resizes and moves: %ld pins, %ld rounds, %ld resizes and moves done, "
	   "%ld failed calls, %ld bad pins, state %#x afterwards", atomic_load(&held_pins),
	   atomic_load(&held_holds), atomic_load(&held_changes), failed, atomic_load(&held_bad), s);
	ok(ucma_hfree(held) == 0, "and the object is freed");
	ucma_defer_drain();
}

int main(void)
{
	const char *env = getenv("UCMA_STRESS_SECONDS");
	unsigned seconds = env ? (unsigned)strtoul(env, NULL, 10) : 2;

	plan_no_plan();
	test_stray_unlock();
	test_fork_handshake();
	test_fork_kept_runs();
	test_pin_versus_reuse(seconds ? seconds : 1);
	test_compaction_vs_frees(seconds ? seconds : 1);
	test_hrealloc_vs_readers(seconds ? seconds : 1);
	test_pins_vs_holds(seconds ? seconds : 1);
	return done();
}
