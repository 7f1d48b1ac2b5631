/*
 * test_copy.c - the copy of a migrated object with helper threads
 * (copy.c).
 *
 * Copies of sizes around every edge (both split sizes, a piece, the
 * streaming threshold) to aligned and misaligned places arrive whole;
 * the helpers copy part of large ones (pgmigrate_copy_helped_bytes),
 * and of objects from 64 KiB when the caller says so: a compaction a
 * thread waits for does, the compaction thread's does not,
 * and the copy is whole when it returns even when they are slow;
 * a helper late at every piece is waited for once, then rested, and
 * copies again once it is on time;
 * four threads copying at once, each checking its data, while only one
 * of them at a time has the helpers; migration of large movable objects
 * out of the CMA area by ucma_alloc() keeps every byte; a child of fork()
 * has no helpers, starts its own and copies correctly, also when a
 * thread of the parent was in the middle of a copy at the fork; one
 * allowed CPU, UCMA_COPY_HELPERS=0 and a failing thread creation all
 * leave the copy to the caller, and correct.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE 1
#include "internal.h"
#include "copy.h"
#include "tap.h"
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ARENA (256u << 20)
#define CMA   (128u << 20)
#define BUF   (17u << 20)	/* largest copy, plus room for offsets */

/*
 * ThreadSanitizer cannot follow threads created in the child of a
 * multi-threaded process: under it, the children that would start
 * helpers are not made.
 */
#ifdef UCMA_TSAN
static const bool under_tsan = true;
#else
static const bool under_tsan = false;
#endif

static unsigned cpus;
static const struct ucma_config cfg = {
	.arena_size = ARENA,
	.cma_size = CMA,
	.hugepages = UCMA_BACKING_NONE,
};

/* In a child that runs before the test's own start-up. */
static void init(void)
{
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
}

static uint64_t helped(void)
{
	uint64_t v = 0;

	ucma_stat("pgmigrate_copy_helped_bytes", &v);
	return v;
}

/* Times a helper was seen to lose its CPU, which rests the helpers. */
static uint64_t late(void)
{
	uint64_t v = 0;

	ucma_stat("pgmigrate_copy_helper_late", &v);
	return v;
}

static uint64_t migrations(void)
{
	uint64_t v = 0;

	ucma_stat("pgmigrate_success", &v);
	return v;
}

static void *map(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		bail_out("mmap of %zu bytes: %s", n, strerror(errno));
	return p;
}

/*
 * Copy @n bytes from @src + @soff to @dst + @doff, the bytes around the
 * destination holding a guard pattern; true when the copy is exact and
 * no byte outside it changed.
 */
static bool copy_checked_split(char *dst, const char *src, size_t n, size_t doff, size_t soff,
			       uint64_t seed, size_t split_min)
{
	const size_t guard = 4096;

	tu_fill((char *)src + soff, n, seed);
	memset(dst + doff - guard, 0xa5, guard);
	memset(dst + doff + n, 0x5a, guard);
	ucma_copy_object(dst + doff, src + soff, n, split_min);
	for (size_t i = 0; i < guard; i++)
		if ((unsigned char)dst[doff - guard + i] != 0xa5 ||
		    (unsigned char)dst[doff + n + i] != 0x5a)
			return false;
	return tu_check(dst + doff, n, seed) && memcmp(dst + doff, src + soff, n) == 0;
}

/* The same, split as a migration on its own is. */
static bool copy_checked(char *dst, const char *src, size_t n, size_t doff, size_t soff,
			 uint64_t seed)
{
	return copy_checked_split(dst, src, n, doff, soff, seed, UCMA_COPY_SPLIT_MIN);
}

static void test_sizes(void)
{
	static const size_t sizes[] = {
		1, 127, 128, 4095, (16u << 10) - 1, 16u << 10, (16u << 10) + 1,
		UCMA_COPY_SPLIT_MIN_COMPACT - 1, UCMA_COPY_SPLIT_MIN_COMPACT,
		UCMA_COPY_SPLIT_MIN_COMPACT + 1, UCMA_COPY_SPLIT_MIN_COMPACT + UCMA_COPY_PIECE - 1,
		UCMA_COPY_SPLIT_MIN - 1, UCMA_COPY_SPLIT_MIN, UCMA_COPY_SPLIT_MIN + 1,
		UCMA_COPY_SPLIT_MIN + UCMA_COPY_PIECE - 1, 77u << 10, (1u << 20) + 37,
		4u << 20, 16u << 20,
	};
	static const size_t doffs[] = { 4096, 4096 + 8, 4096 + 32, 4096 + 4095 };
	static const size_t splits[] = { UCMA_COPY_SPLIT_MIN, UCMA_COPY_SPLIT_MIN_COMPACT };
	char *src = map(BUF), *dst = map(BUF);
	uint64_t h0 = helped(), l0 = late(), seed = 1;
	int bad = 0, cases = 0;

	for (size_t i = 0; i < UCMA_ARRAY_SIZE(sizes); i++)
		for (size_t j = 0; j < UCMA_ARRAY_SIZE(doffs); j++)
			for (size_t k = 0; k < UCMA_ARRAY_SIZE(splits); k++) {
				size_t soff = (j * 24) % 64;

				cases++;
				if (!copy_checked_split(dst, src, sizes[i], doffs[j], soff, seed++,
							splits[k])) {
					diag("copy of %zu bytes to offset %zu from offset %zu, split "
					     "from %zu, is wrong",
					     sizes[i], doffs[j], soff, splits[k]);
					bad++;
				}
			}
	ok(bad == 0, "%d copies of 1 byte to 16 MiB, aligned and not, arrive whole and touch "
		     "nothing around them", cases);
	if (cpus > 1) {
		ok(ucma_copy_helpers_running() == 1,
		   "one helper thread runs by default (%u allowed CPUs)", cpus);
		/* (Or it lost its CPU to other work on a loaded machine,
		 * and the helpers rested.) */
		ok(helped() > h0 || late() > l0,
		   "the helper copied %llu of the bytes (rested %llu times)",
		   (unsigned long long)(helped() - h0), (unsigned long long)(late() - l0));
	} else {
		ok(ucma_copy_helpers_running() == 0, "no helper with one allowed CPU");
		skip(1, "one allowed CPU: no helper to copy anything");
	}
	munmap(src, BUF);
	munmap(dst, BUF);
}

/*
 * The helpers slowed down (2 ms before each piece): the owner must wait
 * for the pieces they took, and the copy is whole when it returns.  The
 * last bytes are checked first, right after the return.
 */
static void test_slow_helper(void)
{
	char *src = map(BUF), *dst = map(BUF);
	uint64_t h0 = helped();
	int bad = 0;

	atomic_store(&ucma_copy_test_helper_delay_ns, 2000000);
	/* At least 10 copies, and on until the helper took pieces (it may
	 * wait for a CPU on a loaded machine), 5 s at most. */
	uint64_t until = tu_now_ns() + 5000000000ull;
	int r;

	for (r = 0; r < 10 || (cpus > 1 && helped() == h0 && tu_now_ns() < until); r++) {
		size_t n = (1u << 20) + (size_t)(r % 16) * 4096;

		tu_fill(src, n, (uint64_t)r + 50);
		memset(dst, 0, n);
		ucma_copy_object(dst, src, n, UCMA_COPY_SPLIT_MIN);
		if (memcmp(dst, src, n) != 0)
			bad++;
	}
	atomic_store(&ucma_copy_test_helper_delay_ns, 0);
	ok(bad == 0, "a slow helper: every copy whole when it returns (%d of %d not)", bad, r);
	if (cpus > 1)
		ok(helped() > h0, "the slow helper took pieces (%llu bytes)",
		   (unsigned long long)(helped() - h0));
	else
		skip(1, "one allowed CPU");
	munmap(src, BUF);
	munmap(dst, BUF);
}

/* Wait out the longest rest (0.5 s) that a helper late on a loaded
 * machine may have given the helpers (copy.c), before a round that wants
 * them. */
static void rest_over(void)
{
	usleep(600 * 1000);
}

/* Copy @n bytes (1 MiB and a little, by @r) and check them; false if wrong. */
static bool copy_round(char *dst, const char *src, int r)
{
	size_t n = (1u << 20) + (size_t)(r % 16) * 4096;

	tu_fill((char *)src, n, (uint64_t)r + 500);
	memset(dst, 0, n);
	ucma_copy_object(dst, src, n, UCMA_COPY_SPLIT_MIN);
	return memcmp(dst, src, n) == 0;
}

/*
 * A helper late at every piece, as one that lost its CPU is (it sleeps
 * 2 ms after taking a piece): the owner waits for it once, then copies
 * alone for a while, the rest doubling at each late wait after it; so
 * over 0.3 s of copies only a few wait for it, not every one.  Then the
 * helper is on time again, and once the rest is over it copies again.
 */
static void test_late_helper(void)
{
	char *src, *dst;
	uint64_t l0 = late(), l1, h1, until;
	int r = 0, bad = 0, n;

	if (cpus < 2) {
		skip(3, "one allowed CPU: no helper to be late");
		return;
	}
	src = map(BUF);
	dst = map(BUF);
	atomic_store(&ucma_copy_test_helper_delay_ns, 2000000);
	/* On until the helper took a piece and was waited for (it may wait
	 * for a CPU on a loaded machine), 5 s at most. */
	until = tu_now_ns() + 5000000000ull;
	while (late() == l0 && tu_now_ns() < until)
		bad += !copy_round(dst, src, r++);
	ok(late() > l0 && bad == 0,
	   "a helper 2 ms late at each piece: its wait counted late after %d copies, "
	   "every copy whole", r);
	l1 = late();
	until = tu_now_ns() + 300000000ull;
	for (n = 0; tu_now_ns() < until; n++)
		bad += !copy_round(dst, src, r++);
	/* Rests of 16, 32, 64, 128 ms: 4 late waits fill 0.24 s. */
	ok(late() - l1 <= 6 && bad == 0,
	   "then %llu of %d copies in 0.3 s waited for it (at most 6), every copy whole",
	   (unsigned long long)(late() - l1), n);
	atomic_store(&ucma_copy_test_helper_delay_ns, 0);
	/* Past the longest rest, on until the helper copied again. */
	rest_over();
	h1 = helped();
	until = tu_now_ns() + 5000000000ull;
	for (n = 0; (n < 10 || helped() == h1) && tu_now_ns() < until; n++)
		bad += !copy_round(dst, src, r++);
	ok(helped() > h1 && bad == 0, "on time again: the helper copies again (%llu bytes), "
	   "every copy whole", (unsigned long long)(helped() - h1));
	munmap(src, BUF);
	munmap(dst, BUF);
}

static uint64_t no_cpu(void)
{
	uint64_t v = 0;

	ucma_stat("pgmigrate_copy_no_cpu", &v);
	return v;
}

/*
 * More threads runnable than CPUs (the count set through the test hook):
 * the owner's look, every 16 ms, finds no CPU for the helpers, and the
 * copies are made alone, whole, while that lasts; once CPUs are free
 * again, the helpers copy again.  And the system's count, read from
 * /proc/loadavg, counts this thread at least.
 */
static void test_no_cpu(void)
{
	char *src, *dst;
	uint64_t n0 = no_cpu(), h0, until;
	long run = ucma_os_threads_runnable();
	int r = 0, bad = 0, n;
	FILE *f = fopen("/proc/loadavg", "r");
	long want = 0;

	/* Some sandboxes give /proc/loadavg as all zeros, or none. */
	if (f && fscanf(f, "%*s %*s %*s %ld/", &want) == 1 && want > 0)
		ok(run >= 1, "threads runnable now, from /proc/loadavg: %ld (this one among "
			     "them)", run);
	else
		skip(1, "no count of runnable threads in /proc/loadavg here");
	if (f)
		fclose(f);
	if (cpus < 2 || (long)cpus != sysconf(_SC_NPROCESSORS_ONLN)) {
		skip(2, "one allowed CPU, or not all of them: the look for a free CPU is not made");
		return;
	}
	src = map(BUF);
	dst = map(BUF);
	atomic_store(&ucma_copy_test_runnable, 1000);
	rest_over();	/* past any rest, so that the next copy looks */
	until = tu_now_ns() + 5000000000ull;
	while (no_cpu() == n0 && tu_now_ns() < until)
		bad += !copy_round(dst, src, r++);
	h0 = helped();
	for (n = 0; n < 50; n++)
		bad += !copy_round(dst, src, r++);
	ok(no_cpu() > n0 && helped() == h0 && bad == 0,
	   "1000 threads runnable: no CPU for the helpers (%llu looks), 50 copies made alone "
	   "(%llu bytes helped), every copy whole",
	   (unsigned long long)(no_cpu() - n0), (unsigned long long)(helped() - h0));
	atomic_store(&ucma_copy_test_runnable, -1);
	rest_over();
	h0 = helped();
	until = tu_now_ns() + 5000000000ull;
	for (n = 0; (n < 10 || helped() == h0) && tu_now_ns() < until; n++)
		bad += !copy_round(dst, src, r++);
	ok(helped() > h0 && bad == 0, "CPUs free again: the helper copies again (%llu bytes)",
	   (unsigned long long)(helped() - h0));
	munmap(src, BUF);
	munmap(dst, BUF);
}

struct copier {
	unsigned id;
	int rounds;
	int bad;
};

static void *copier_main(void *arg)
{
	struct copier *c = arg;
	char *src = map(4u << 20), *dst = map(4u << 20);
	uint64_t seed = 1000u * c->id;

	for (int r = 0; r < c->rounds; r++) {
		size_t n = UCMA_COPY_SPLIT_MIN + (size_t)(tu_rand(&seed) % ((3u << 20) - 64));

		if (!copy_checked(dst, src, n, 4096 + 32 * (r % 3), (size_t)r % 7, seed))
			c->bad++;
	}
	munmap(src, 4u << 20);
	munmap(dst, 4u << 20);
	return NULL;
}

static void test_threads(void)
{
	struct copier c[4];
	pthread_t t[4];
	int bad = 0;

	for (unsigned i = 0; i < 4; i++) {
		c[i] = (struct copier){ i + 1, 100, 0 };
		if (pthread_create(&t[i], NULL, copier_main, &c[i]) != 0)
			bail_out("pthread_create: %s", strerror(errno));
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		bad += c[i].bad;
	}
	ok(bad == 0, "four threads copying 256 KiB-3 MiB at once, 400 copies: %d wrong", bad);
}

enum { MAXOBJ = 1024 };
static ucma_handle_t h[MAXOBJ];
static uint32_t sz[MAXOBJ];

/* Fill the arena with movable objects of @lo to @lo << (@doublings - 1)
 * bytes (and up to 4 KiB more), each stamped whole, and free every other
 * one. */
static int fill_half_sized(uint64_t *seed, uint32_t lo, unsigned doublings)
{
	int n = 0;

	while (n < MAXOBJ) {
		uint32_t s = lo << (tu_rand(seed) % doublings);
		ucma_handle_t x = ucma_halloc(s + (uint32_t)(tu_rand(seed) % 4096), 0);
		void *p;

		if (!x)
			break;
		sz[n] = (uint32_t)ucma_hsize(x);
		p = ucma_pin(x, 0);
		tu_fill(p, sz[n], (uint64_t)n);
		ucma_unpin(x);
		h[n++] = x;
	}
	for (int i = 0; i < n; i += 2) {
		ucma_hfree(h[i]);
		h[i] = 0;
	}
	ucma_defer_drain();
	return n;
}

/* The same, with objects of 32 KiB to 2 MiB. */
static int fill_half(uint64_t *seed)
{
	return fill_half_sized(seed, 32u << 10, 7);
}

/* Objects that do not hold their stamps; then every one is freed. */
static int check_free(int n)
{
	int bad = 0;

	ucma_read_lock();
	for (int i = 0; i < n; i++)
		if (h[i] && !tu_check(ucma_deref(h[i]), sz[i], (uint64_t)i))
			bad++;
	ucma_read_unlock();
	for (int i = 0; i < n; i++)
		if (h[i])
			ucma_hfree(h[i]);
	ucma_defer_drain();
	return bad;
}

/*
 * Movable objects in the CMA area moved out of it by a contiguous
 * allocation, and moved by a full compaction: the copies of 256 KiB and
 * more are split with the helper.  Rounds until the helper took part (it
 * may wait for a CPU on a loaded machine), four at most.
 */
static void test_migration(void)
{
	uint64_t seed = 7, h0 = helped(), l0 = late(), m0;
	int bad = 0, failed = 0, rounds = 0;
	unsigned long long moved = 0;

	do {
		int n;
		void *buf;

		if (rounds)
			rest_over();
		n = fill_half(&seed);

		m0 = migrations();
		buf = ucma_alloc(CMA / 2, 0, 0);
		failed += buf == NULL;
		if (buf)
			ucma_release(buf);
		ucma_compact(UCMA_COMPACT_SYNC_FULL);
		moved += migrations() - m0;
		bad += check_free(n);
		rounds++;
	} while (cpus > 1 && helped() == h0 && rounds < 4);
	ok(failed == 0, "ucma_alloc() of half the CMA area among large objects, %d rounds", rounds);
	ok(moved > 0, "it and full compactions moved %llu objects", moved);
	ok(bad == 0, "every byte of every object arrived (%d objects wrong)", bad);
	if (cpus > 1)
		ok(helped() > h0 || late() > l0,
		   "the helper copied %llu bytes of the moves (rested %llu times)",
		   (unsigned long long)(helped() - h0), (unsigned long long)(late() - l0));
	else
		skip(1, "one allowed CPU");
}

/*
 * Objects of 64 KiB to 132 KiB, below the split size of a migration on
 * its own: a full compaction that a thread waits for copies them with the
 * helper, the compaction thread's (the one with an abort flag, compactd.c)
 * alone.  Rounds until the helper took part, four at most.
 */
static void test_compaction_split(void)
{
	static const _Atomic int no_abort;
	struct ucma_zone *z = &ucma_arena_peek()->zones[UCMA_ZONE_CMA];
	uint64_t seed = 11, h0 = helped(), l0, m0, m1;
	unsigned long long moved = 0;
	int bad = 0, rounds = 0, n;

	n = fill_half_sized(&seed, 64u << 10, 2);
	m0 = migrations();
	/* With an abort flag the zone's compaction lock is only tried: the
	 * compaction thread, woken by the fill, may hold it for a while. */
	for (int tries = 0; tries < 2000; tries++) {
		if (ucma_compact_zone(z, -1, UCMA_COMPACT_SYNC_FULL, &no_abort) !=
		    UCMA_COMPACT_CONTENDED)
			break;
		usleep(1000);
	}
	m1 = migrations();
	bad += check_free(n);
	ok(m1 > m0 && helped() == h0,
	   "the compaction thread's moves of such objects (%llu) are not shared (%llu bytes "
	   "helped)",
	   (unsigned long long)(m1 - m0), (unsigned long long)(helped() - h0));
	l0 = late();
	do {
		if (rounds)
			rest_over();
		n = fill_half_sized(&seed, 64u << 10, 2);
		m0 = migrations();
		ucma_compact(UCMA_COMPACT_SYNC_FULL);
		moved += migrations() - m0;
		bad += check_free(n);
		rounds++;
	} while (cpus > 1 && helped() == h0 && rounds < 4);
	ok(moved > 0, "full compactions of 64-132 KiB objects moved %llu, %d rounds", moved,
	   rounds);
	ok(bad == 0, "every byte of every object arrived (%d objects wrong)", bad);
	if (cpus > 1)
		ok(helped() > h0 || late() > l0,
		   "the helper copied %llu bytes of the waited-for compactions (rested %llu times)",
		   (unsigned long long)(helped() - h0), (unsigned long long)(late() - l0));
	else
		skip(1, "one allowed CPU");
}

/* In a child of fork(): the helpers are gone, come back, and copy. */
static void child_copies(void)
{
	char *src = map(BUF), *dst = map(BUF);
	uint64_t h0 = helped();
	bool good = true;

	uint64_t until = tu_now_ns() + 5000000000ull;

	ok(ucma_copy_helpers_running() == 0, "the child of fork() starts with no helper");
	/* On until the new helper took part (it may wait for a CPU), 5 s
	 * at most. */
	for (int r = 0; r < 8 || (cpus > 1 && helped() == h0 && tu_now_ns() < until); r++)
		good &= copy_checked(dst, src, (2u << 20) + (size_t)(r % 16) * 4096, 4096, 0,
				     (uint64_t)r);
	ok(good, "the child's copies arrive whole");
	if (cpus > 1) {
		ok(ucma_copy_helpers_running() == 1, "the child started its own helper");
		ok(helped() > h0, "which copied %llu bytes", (unsigned long long)(helped() - h0));
	} else {
		skip(2, "one allowed CPU");
	}
}

static _Atomic int copying_stop;

static void *busy_copier(void *arg)
{
	char *src = map(8u << 20), *dst = map(8u << 20);

	(void)arg;
	while (!atomic_load(&copying_stop))
		ucma_copy_object(dst, src, 8u << 20, UCMA_COPY_SPLIT_MIN);
	munmap(src, 8u << 20);
	munmap(dst, 8u << 20);
	return NULL;
}

static void test_fork(void)
{
	pthread_t t;
	int forks = 0;

	if (under_tsan) {
		skip(4, "ThreadSanitizer: no threads in the children of a threaded process");
		return;
	}
	tap_in_child("fork after copies", child_copies, NULL);
	/* Forks while another thread copies: its job may be open at the
	 * fork; the child's helpers must not copy by it, and the child
	 * must have the job for itself. */
	atomic_store(&copying_stop, 0);
	if (pthread_create(&t, NULL, busy_copier, NULL) != 0)
		bail_out("pthread_create: %s", strerror(errno));
	for (int i = 0; i < 12; i++) {
		struct timespec ts = { 0, 300000 };

		nanosleep(&ts, NULL);
		tap_in_child("fork while a thread copies", child_copies, NULL);
		forks++;
	}
	atomic_store(&copying_stop, 1);
	pthread_join(t, NULL);
	diag("%d forks while a thread copied", forks);
}

/* In a child with no helper to be had: copies by the caller alone,
 * and correct. */
static void copies_alone(const char *why)
{
	char *src = map(BUF), *dst = map(BUF);
	uint64_t h0 = helped();
	bool good = true;

	for (int r = 0; r < 5; r++)
		good &= copy_checked(dst, src, 4u << 20, 4096, 0, (uint64_t)r);
	ok(good && ucma_copy_helpers_running() == 0 && helped() == h0,
	   "%s: no helper, the caller copies alone, correctly", why);
}

static void one_cpu(void)
{
	cpu_set_t set;

	init();
	CPU_ZERO(&set);
	CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		bail_out("sched_setaffinity: %s", strerror(errno));
	copies_alone("one allowed CPU");
}

static void no_helpers(void)
{
	init();
	ucma_opt.copy_helpers = 0;
	copies_alone("copy_helpers 0");
}

/* Thread creation fails: a message, and the caller copies alone. */
static void create_fails(void)
{
	init();
	ucma_os.thread_create = tu_thread_create_fails;
	copies_alone("no thread can be made");
}

int main(void)
{
	cpu_set_t set;

	tu_clear_env();
	plan_no_plan();
	/* The helpers' work is tested whatever else runs on the machine:
	 * the look for a free CPU always finds one, but in test_no_cpu(). */
	atomic_store(&ucma_copy_test_runnable, -1);
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		bail_out("sched_getaffinity: %s", strerror(errno));
	cpus = (unsigned)CPU_COUNT(&set);
	/* Before any copy, so these children start their helpers themselves. */
	tap_in_child("one allowed CPU", one_cpu, NULL);
	tap_in_child("no helpers", no_helpers, NULL);
	tap_in_child("thread creation fails", create_fails, NULL);
	init();
	ok(ucma_opt.copy_helpers == 1, "UCMA_COPY_HELPERS defaults to 1");
	test_sizes();
	test_slow_helper();
	test_late_helper();
	test_no_cpu();
	test_threads();
	test_migration();
	test_compaction_split();
	test_fork();
	return done();
}
