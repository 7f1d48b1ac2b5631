/*
 * test_handles.c - movable objects: the handle API, its errors, pins,
 * RCU reads, migration, and the generation rules for stale handles.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "handle.h"
#include "tap.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static struct ucma_arena *a;

static bool in_cma(const void *p)
{
	uint32_t pfn = ucma_addr_to_pfn(a, p);

	return pfn >= a->zones[UCMA_ZONE_CMA].start_pfn && pfn < a->zones[UCMA_ZONE_CMA].end_pfn;
}

static void test_basic(void)
{
	ucma_handle_t h = ucma_halloc(100, UCMA_H_ZERO), h2;
	unsigned char *p;
	bool zero = true;
	const void *r;

	ok(h != 0, "halloc(100) returns a handle");
	ok(ucma_hsize(h) == 100, "hsize is the requested size");
	p = ucma_pin(h, 0);
	ok(p != NULL, "pin returns the address");
	for (int i = 0; i < 100; i++)
		zero &= p[i] == 0;
	ok(zero, "UCMA_H_ZERO zeroes the object");
	ok(in_cma(p), "a movable object is lent CMA memory first");
	memset(p, 0xab, 100);
	ok(ucma_hfree(h) == -1 && errno == EBUSY, "hfree of a pinned object fails with EBUSY");
	ok(p[0] == 0xab && p[99] == 0xab, "and the object is intact");
	ok(ucma_unpin(h) == 0, "unpin");
	ok(ucma_unpin(h) == -1 && errno == EINVAL, "unpin without a pin fails with EINVAL");

	ucma_read_lock();
	r = ucma_deref(h);
	ok(r && ((const unsigned char *)r)[50] == 0xab, "deref inside the read lock reads it");
	ucma_read_unlock();
	ok(ucma_deref(h) == NULL && errno == EPERM, "deref outside the read lock: EPERM");

	ok(ucma_hrealloc(h, 10000) == 0, "hrealloc grows to 10000 bytes");
	p = ucma_pin(h, 0);
	ok(p && p[0] == 0xab && p[99] == 0xab && ucma_hsize(h) == 10000,
	   "the same handle keeps the old contents");
	ucma_unpin(h);
	ok(ucma_hrealloc(h, 50) == 0 && ucma_hsize(h) == 50, "hrealloc shrinks to 50 bytes");
	p = ucma_pin(h, 0);
	ok(p && p[49] == 0xab, "and keeps the first 50 bytes");
	ok(ucma_hrealloc(h, 60) == -1 && errno == EBUSY, "hrealloc of a pinned object: EBUSY");
	ucma_unpin(h);

	ok(ucma_hfree(h) == 0, "hfree");
	ok(ucma_hfree(h) == -1 && errno == EINVAL, "double hfree: EINVAL");
	ok(ucma_pin(h, 0) == NULL && errno == EINVAL, "pin of a freed handle: EINVAL");
	ok(ucma_hsize(h) == 0 && errno == EINVAL, "hsize of a freed handle: EINVAL");
	ucma_read_lock();
	ok(ucma_deref(h) == NULL && errno == EINVAL, "deref of a freed handle: EINVAL");
	ucma_read_unlock();
	h2 = ucma_halloc(100, 0);
	ok(h2 != h && (uint32_t)h2 == (uint32_t)h, "a reused entry gets a new generation");
	ok(ucma_pin(h, 0) == NULL && errno == EINVAL, "the stale handle stays invalid after reuse");
	ucma_hfree(h2);

	ok(ucma_halloc(0, 0) == 0 && errno == EINVAL, "halloc(0): EINVAL");
	ok(ucma_halloc(SIZE_MAX, 0) == 0 && errno == ENOMEM, "halloc(SIZE_MAX): ENOMEM");
	ok(ucma_halloc(10, 0x80) == 0 && errno == EINVAL, "halloc with unknown flags: EINVAL");
	ok(ucma_hfree(0) == -1 && errno == EINVAL, "hfree(0): EINVAL");
	ok(ucma_hfree(0x12345678deadbeefull) == -1 && errno == EINVAL, "forged handle: EINVAL");
	ok(ucma_pin(((uint64_t)1 << 32) | 0xfffff0, 0) == NULL && errno == EINVAL,
	   "forged index beyond the table: EINVAL");
}

static void test_generation_wrap(void)
{
	ucma_handle_t h = ucma_halloc(16, 0), h2;
	uint32_t index = (uint32_t)h;
	struct ucma_hentry *e = ucma_handle_entry(index);

	/* Age the entry to the last odd generation. */
	ucma_hfree(h);
	atomic_store(&e->gen, UINT32_MAX - 1);
	h2 = ucma_halloc(16, 0);
	while (h2 && (uint32_t)h2 != index) {	/* the entry sits somewhere in the free list */
		ucma_handle_t next = ucma_halloc(16, 0);

		(void)next;
		h2 = next;
	}
	ok(h2 && (h2 >> 32) == UINT32_MAX, "an entry reaches the last generation");
	ok(ucma_hfree(h2) == 0, "and is freed");
	ok(atomic_load(&e->gen) == 0, "its entry is retired, never reused");
	for (int i = 0; i < 100; i++) {
		ucma_handle_t x = ucma_halloc(16, 0);

		if ((uint32_t)x == index)
			ok(0, "retired entry handed out again");
	}
	ok(ucma_pin(h2, 0) == NULL && errno == EINVAL, "its last handle is stale for good");
}

static void test_migration(void)
{
	enum { N = 64 };
	ucma_handle_t h[N];
	void *before[N];
	int moved = 0, intact = 1;
	struct ucma_migrate_target t = { .no_cma = true };

	for (int i = 0; i < N; i++) {
		size_t sz = i % 2 ? 40000 : 300;
		void *p;

		h[i] = ucma_halloc(sz, 0);
		p = ucma_pin(h[i], 0);
		tu_fill(p, sz, (uint64_t)i);
		before[i] = p;
		ucma_unpin(h[i]);
	}
	/* Keep one pinned: it must not move. */
	ucma_pin(h[0], 0);
	for (int i = 0; i < N; i++) {
		int r = ucma_migrate_object((uint32_t)h[i], before[i], &t);

		if (i == 0)
			ok(r == UCMA_MIGRATE_PINNED, "a pinned object is not migrated");
		else
			moved += r == UCMA_MIGRATE_OK;
	}
	ok(moved == N - 1, "every unpinned object migrated (%d)", moved);
	ok(ucma_defer_drain() == 0, "drain the old copies after a grace period");
	for (int i = 0; i < N; i++) {
		const void *p;

		ucma_read_lock();
		p = ucma_deref(h[i]);
		intact &= tu_check(p, ucma_hsize(h[i]), (uint64_t)i);
		if (i > 0)
			intact &= p != before[i] && !in_cma(p);
		else
			intact &= p == before[0];
		ucma_read_unlock();
	}
	ok(intact, "contents survive migration; moved objects left CMA; the pinned one stayed");
	ucma_unpin(h[0]);

	ucma_read_lock();
	ok(ucma_defer_drain() == -1 && errno == EDEADLK, "a drain inside the read lock: EDEADLK");
	ok(ucma_pin(h[1], UCMA_PIN_LONGTERM) == NULL && errno == EDEADLK,
	   "a long-term pin inside the read lock: EDEADLK");
	ucma_read_unlock();

	{
		ucma_handle_t x = ucma_halloc(2000, 0);
		void *p = ucma_pin(x, 0), *q;

		tu_fill(p, 2000, 99);
		ok(in_cma(p), "a fresh object sits in CMA");
		ucma_unpin(x);
		q = ucma_pin(x, UCMA_PIN_LONGTERM);
		ok(q && !in_cma(q) && tu_check(q, 2000, 99),
		   "a long-term pin moves the object out of CMA first, contents intact");
		ucma_unpin(x);
		ucma_hfree(x);
	}
	for (int i = 0; i < N; i++)
		ucma_hfree(h[i]);
	ucma_defer_drain();
}

/* A pinner that finds the entry held: it adds one, takes it back and
 * sleeps until the holder lets go. */
struct held_pin {
	ucma_handle_t h;
	void *got;
	atomic_int done;
};

static void *pin_held(void *arg)
{
	struct held_pin *hp = arg;

	hp->got = ucma_pin(hp->h, 0);
	atomic_store(&hp->done, 1);
	return NULL;
}

static void test_pin_state(void)
{
	ucma_handle_t h = ucma_halloc(64, 0);
	struct ucma_hentry *e = ucma_handle_entry((uint32_t)h);
	struct held_pin hp = { .h = h };
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	pthread_t t;
	uint32_t s = 0;
	void *p;

	ok(e && ucma_entry_grab(e), "an exclusive hold of a fresh entry");
	if (pthread_create(&t, NULL, pin_held, &hp) != 0)
		bail_out("pthread_create");
	/* Until the pinner sleeps: it took its one back and set WAITERS. */
	for (int i = 0; i < 100; i++) {
		s = atomic_load(&e->state);
		if (s == (UCMA_HS_MIGRATING | UCMA_HS_WAITERS))
			break;
		nanosleep(&ts, NULL);
	}
	ok(s == (UCMA_HS_MIGRATING | UCMA_HS_WAITERS) && !atomic_load(&hp.done),
	   "a pin of a held entry takes its one back and waits (state %#x)", s);
	/* A passing addition of another pinner survives the release. */
	atomic_fetch_add(&e->state, 1);
	ucma_entry_release(e);
	pthread_join(t, NULL);
	p = hp.got;
	ok(p != NULL && atomic_load(&e->state) == 2,
	   "the release woke it and kept the passing one: state %#x", atomic_load(&e->state));
	atomic_fetch_sub(&e->state, 1);	/* that pinner's taking back */
	ok(ucma_unpin(h) == 0 && atomic_load(&e->state) == 0, "one unpin: state 0");
	ok(ucma_unpin(h) == -1 && errno == EINVAL && atomic_load(&e->state) == 0,
	   "an unpin too many: EINVAL, state left at 0");

	/* An unpin without a pin may take a passing one for a real pin (it
	 * cannot tell them apart); the pinner's taking back then finds 0 and
	 * leaves it, where a fetch-sub made 0xffffffff: MIGRATING for good. */
	ok(ucma_entry_grab(e), "held again");
	atomic_fetch_add(&e->state, 1);	/* a pinner that found it held */
	ucma_entry_release(e);
	ok(ucma_unpin(h) == 0 && atomic_load(&e->state) == 0,
	   "an unpin without a pin takes the passing one");
	ucma_entry_take_back(e);
	s = atomic_load(&e->state);
	ok(s == 0, "the pinner's taking back leaves 0: state %#x", s);
	if (s != 0)	/* (a pin would sleep for ever on it) */
		atomic_store(&e->state, 0);
	ok(ucma_pin(h, 0) == p && ucma_unpin(h) == 0, "pins work as before");

	/* The limit: the last pin is taken, the next refused, nothing lost. */
	atomic_store(&e->state, UCMA_HS_PIN_MAX - 1);
	ok(ucma_pin(h, 0) == p, "the pin that reaches the limit");
	errno = 0;
	ok(ucma_pin(h, 0) == NULL && errno == EOVERFLOW &&
		   atomic_load(&e->state) == UCMA_HS_PIN_MAX,
	   "one past it: EOVERFLOW, the count unchanged");
	ok(ucma_unpin(h) == 0 && atomic_load(&e->state) == UCMA_HS_PIN_MAX - 1,
	   "an unpin at the limit");
	atomic_store(&e->state, 0);
	ok(ucma_hfree(h) == 0, "the entry is freed afterwards");

	/* A fork while a pinner of the stale handle sits between its
	 * addition and its taking back: the child, which has no such thread,
	 * clears the free entry's count (its next ucma_halloc() of the entry
	 * waited for ever). */
	atomic_fetch_add(&e->state, 1);
	{
		pid_t pid = fork();
		int status = 0;

		if (pid == 0)
			_exit(atomic_load(&e->state) == 0 ? 0 : 1);
		ok(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
			   WEXITSTATUS(status) == 0,
		   "a fork child clears a free entry's passing count");
	}
	ucma_entry_take_back(e);
	ok(atomic_load(&e->state) == 0, "and the parent's pinner takes it back: state %#x",
	   atomic_load(&e->state));
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = 64u << 20,
		.cma_size = 32u << 20,
		.hugepages = UCMA_BACKING_NONE,
	};

	plan_no_plan();
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	a = ucma_arena_get();
	test_basic();
	test_generation_wrap();
	test_migration();
	test_pin_state();
	{
		char why[256];

		ok(ucma_zone_check(&a->zones[0], why, sizeof(why)) == 0 &&
			   ucma_zone_check(&a->zones[1], why, sizeof(why)) == 0,
		   "zone invariants hold at the end");
	}
	return done();
}
