/*
 * test_overflow_cache.c - large blocks past the NORMAL zone (overflow.c)
 * are kept mapped when freed, for the next ones of their size class:
 * reuse without a new mapping, zeroed calloc() from a kept block, the
 * byte and count bounds, the decay, ucma_trim(), aligned requests, a
 * second free of a kept block, threads exchanging blocks with their data
 * checked, a fork child with the parent's kept blocks, and the cache
 * turned off (UCMA_OVERFLOW_CACHE=0).  And realloc() of such blocks, which
 * moves page tables (mremap) rather than bytes: growth step by step,
 * shrinking in place, and the copy when mremap fails.  A 16 MiB arena (4 MiB CMA, kept
 * for contiguous allocations) is filled first, so that every later large
 * block is an overflow one.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

/* The test compares a freed block's address with the next one handed
 * out, and its abort cases are the misuse they test. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	if (ucma_stat(name, &v) != 0)
		bail_out("ucma_stat(%s): %s", name, strerror(errno));
	return v;
}

/* Mappings the library makes (ucma_os.mmap), counted. */
static unsigned long nr_mmap;

/* munmap refused once while @munmap_refuse is set (vm.max_map_count). */
static bool munmap_refuse;

static int count_munmap(void *addr, size_t len)
{
	if (munmap_refuse) {
		munmap_refuse = false;
		errno = ENOMEM;
		return -1;
	}
	return munmap(addr, len);
}

/* The next mapping's address hint (a test places another block where
 * the kernel has just freed a range). */
static void *mmap_hint;

static void *count_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	__atomic_fetch_add(&nr_mmap, 1, __ATOMIC_RELAXED);
	if (!addr && mmap_hint) {
		addr = mmap_hint;
		mmap_hint = NULL;
	}
	return mmap(addr, len, prot, flags, fd, off);
}

/* mremap calls, counted; refused while @mremap_refuse is set.  With
 * @mremap_intrude set, a move or a shrink is followed at once, before
 * the resize can do anything else, by another overflow block of
 * INTRUDER bytes placed where the kernel freed a range (what another
 * thread's malloc may do then). */
enum { INTRUDER = 300000 };
static unsigned long nr_mremap;
static bool mremap_refuse, mremap_intrude;
static void *intruder, *intruder_at;

static void *count_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	void *m;

	__atomic_fetch_add(&nr_mremap, 1, __ATOMIC_RELAXED);
	if (mremap_refuse) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	m = mremap(old, old_len, new_len, flags, new_addr);
	if (m != MAP_FAILED && mremap_intrude && ((flags & MREMAP_FIXED) || new_len < old_len)) {
		mremap_intrude = false;
		intruder_at = (flags & MREMAP_FIXED) ?
				      old :
				      (void *)UCMA_ALIGN_UP((uintptr_t)old + new_len, 2u << 20);
		mmap_hint = intruder_at;
		intruder = ucma_malloc(INTRUDER);
	}
	return m;
}

static bool in_arena(const void *p)
{
	return ucma_addr_in_arena(ucma_arena_peek(), p);
}

/* A block outside the arena, or the test ends. */
static void *ovf_malloc(size_t n)
{
	void *p = ucma_malloc(n);

	if (!p || in_arena(p))
		bail_out("malloc(%zu) = %p: not an overflow block", n, p);
	return p;
}

static size_t cached(void)
{
	return (size_t)stat_of("malloc_overflow_cached_bytes");
}

static void **victim;

static void case_double_free_kept(void)
{
	void *p = ovf_malloc(100000);

	*victim = p;
	ucma_free(p);
	ucma_free(p);
}

static void case_realloc_kept(void)
{
	void *p = ovf_malloc(100000);

	*victim = p;
	ucma_free(p);
	(void)!ucma_realloc(p, 200000);
}

/* Threads replacing blocks at random in their own slots and in a shared
 * exchange, so that blocks are freed by other threads than their own. */
enum { NTHREADS = 4, SLOTS = 32, OPS = 4000, XCHG = 16 };

struct tblk {
	unsigned char *p;
	size_t n;
	uint64_t seed;
};

static struct tblk xchg[XCHG];
static pthread_mutex_t xchg_lock = PTHREAD_MUTEX_INITIALIZER;

static bool release(struct tblk *b)
{
	bool good = true;

	if (b->p) {
		good = tu_check(b->p, b->n, b->seed);
		ucma_free(b->p);
		b->p = NULL;
	}
	return good;
}

static void *worker(void *arg)
{
	uint64_t rs = (uintptr_t)arg * 7919 + 1;
	struct tblk mine[SLOTS] = { { 0 } };
	long bad = 0;

	for (int i = 0; i < OPS; i++) {
		uint64_t x = tu_rand(&rs);
		struct tblk nb = { .n = 33000 + (size_t)(x >> 20) % 300000, .seed = x };

		nb.p = ucma_malloc(nb.n);
		if (!nb.p) {
			bad++;
			continue;
		}
		tu_fill(nb.p, nb.n, nb.seed);
		if (x & 1) {
			struct tblk *b = &mine[(x >> 8) % SLOTS];

			bad += !release(b);
			*b = nb;
		} else {
			struct tblk old;

			pthread_mutex_lock(&xchg_lock);
			old = xchg[(x >> 8) % XCHG];
			xchg[(x >> 8) % XCHG] = nb;
			pthread_mutex_unlock(&xchg_lock);
			bad += !release(&old);
		}
	}
	for (int k = 0; k < SLOTS; k++)
		bad += !release(&mine[k]);
	return (void *)bad;
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = 16u << 20,
		.cma_size = 4u << 20,
		.cma_policy = UCMA_CMA_RESERVED,
	};
	void *fill[64], *p, *q, *blocks[300];
	size_t usable, before, after;
	uint64_t reused0;
	char err[4096];
	int nfill = 0, same = 0, bad = 0;

	plan(34);
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init(16M arena): %s", strerror(errno));
	ucma_os.mmap = count_mmap;
	ucma_os.mremap = count_mremap;
	ucma_os.munmap = count_munmap;
	victim = tu_shared_results(4096);
	/* Fill NORMAL with 1 MiB blocks until one lands outside. */
	for (;;) {
		if (nfill == 64)
			bail_out("64 MiB of blocks and still inside the arena");
		fill[nfill] = ucma_malloc(1u << 20);
		if (!fill[nfill])
			bail_out("filling NORMAL: %s", strerror(errno));
		if (!in_arena(fill[nfill++]))
			break;
	}
	diag("NORMAL full after %d blocks of 1 MiB", nfill - 1);

	/* The decay, lowered for the test before the first free (the cache
	 * looks again 1/8 of the decay time after it last looked). */
	ucma_opt.decay_ms = 100;
	p = ovf_malloc(300000);
	q = ovf_malloc(300000);
	usable = ucma_usable_size(q);
	ucma_free(p);
	usleep(250 * 1000);
	ucma_free(q);
	ok(cached() == usable, "a block kept longer than UCMA_DECAY_MS is unmapped (%zu cached)",
	   cached());
	/* The NORMAL zone's purge looks too: the first free of NORMAL pages
	 * in the process (none was freed before) arms the zone's timer
	 * (decay / 2), a second one after it purges.  (Runs of 1 MiB are
	 * too large for the thread cache to keep.) */
	ucma_trim();
	p = ovf_malloc(300000);
	ucma_free(p);
	ucma_free(fill[0]);
	usleep(250 * 1000);
	ucma_free(fill[1]);
	ok(cached() == 0, "the NORMAL zone's purge unmaps it too (%zu cached)", cached());
	fill[0] = ucma_malloc(1u << 20);
	fill[1] = ucma_malloc(1u << 20);
	if (!fill[0] || !fill[1] || !in_arena(fill[0]) || !in_arena(fill[1]))
		bail_out("NORMAL not refilled");
	/* UCMA_DECAY_MS=0: kept until ucma_trim(). */
	ucma_opt.decay_ms = 0;
	p = ovf_malloc(300000);
	q = ovf_malloc(300000);
	ucma_free(p);
	usleep(150 * 1000);
	ucma_free(q);
	ok(cached() == 2 * usable, "with UCMA_DECAY_MS=0 nothing decays (%zu cached)", cached());
	ucma_opt.decay_ms = 10000;
	ucma_trim();

	/* Reuse. */
	p = ovf_malloc(100000);
	usable = ucma_usable_size(p);
	tu_fill(p, 100000, 1);
	ucma_free(p);
	ok(cached() == usable, "a freed overflow block is kept (%zu bytes cached, usable %zu)",
	   cached(), usable);
	q = ovf_malloc(100000);
	ok(q == p && cached() == 0, "the next malloc of its size takes it back (%p, then %p)", p,
	   q);
	ucma_free(q);
	reused0 = stat_of("overflow_reused");
	nr_mmap = 0;
	for (int i = 0; i < 1000; i++) {
		q = ovf_malloc(100000 + (size_t)i % 8);
		same += q == p;
		ucma_free(q);
	}
	ok(nr_mmap == 0 && same == 1000,
	   "1000 malloc/free pairs of one size map nothing (%lu mappings, %d times the same block)",
	   nr_mmap, same);
	ok(stat_of("overflow_reused") - reused0 == 1000, "overflow_reused counts them (%llu)",
	   (unsigned long long)(stat_of("overflow_reused") - reused0));

	/* A block of the next class serves when its own has none; two
	 * classes up does not. */
	ucma_trim();
	p = ovf_malloc(120000);
	ucma_free(p);
	q = ovf_malloc(100000);
	ok(q == p && ucma_usable_size(q) == 32 * 4096,
	   "a kept block of the next class serves (%zu bytes for 100000)", ucma_usable_size(q));
	ucma_free(q);
	ucma_trim();
	p = ovf_malloc(160000);
	ucma_free(p);
	q = ovf_malloc(100000);
	ok(q != p && cached() == 40 * 4096, "one two classes up does not (%zu bytes kept)",
	   cached());
	ucma_free(q);
	ucma_trim();

	/* calloc() of a kept block whose pages hold the last user's data. */
	p = ovf_malloc(200000);
	__asm__("" : "+r"(p));	/* (all its usable size is the program's: not
				 * only what malloc's alloc_size says) */
	memset(p, 0xab, ucma_usable_size(p));
	ucma_free(p);
	{
		unsigned char *z = ucma_calloc(1, 200000);
		size_t zn = z ? ucma_usable_size(z) : 0;
		int nz = 0;

		__asm__("" : "+r"(z));

		for (size_t k = 0; k < zn; k++)
			nz += z[k] != 0;
		ok(z == p && zn > 200000 && nz == 0,
		   "calloc() of a kept block is zeroed, all %zu usable bytes (%d not zero)", zn, nz);
		ucma_free(z);
	}

	/* A second free, and realloc() of a kept block, abort. */
	ok(tu_dies_with(case_double_free_kept, victim, "double free or invalid pointer",
			err, sizeof(err)),
	   "a second free of a kept block aborts naming it");
	if (!strstr(err, "double free"))
		diag("child wrote: %s", err);
	ok(tu_dies_with(case_realloc_kept, victim, "realloc(): double free or invalid",
			err, sizeof(err)),
	   "realloc() of a kept block aborts naming it");

	/* The count bound: 300 blocks of 40 KiB freed, 256 kept. */
	ucma_trim();
	for (int i = 0; i < 300; i++)
		blocks[i] = ovf_malloc(40000);
	for (int i = 0; i < 300; i++)
		ucma_free(blocks[i]);
	ok(cached() == 256 * 40960, "at most 256 blocks are kept (%zu bytes cached)", cached());

	/* ucma_trim() unmaps them. */
	before = (size_t)stat_of("malloc_overflow_bytes");
	ok(ucma_trim() == 1 && cached() == 0, "ucma_trim() gives the kept blocks back");
	after = (size_t)stat_of("malloc_overflow_bytes");
	ok(before - after == 256 * 40960, "overflow mappings shrink by as much (%zu -> %zu)",
	   before, after);

	/* The byte bound, lowered for the test: 20 blocks of 1 MiB, 8 kept. */
	ucma_opt.overflow_cache = 8u << 20;
	for (int i = 0; i < 20; i++)
		blocks[i] = ovf_malloc(1u << 20);
	for (int i = 0; i < 20; i++)
		ucma_free(blocks[i]);
	ok(cached() == 8u << 20, "UCMA_OVERFLOW_CACHE bounds the bytes kept (%zu)", cached());
	/* A block larger than the bound is unmapped when freed. */
	p = ovf_malloc(12u << 20);
	before = (size_t)stat_of("malloc_overflow_bytes");
	ucma_free(p);
	after = (size_t)stat_of("malloc_overflow_bytes");
	ok(before - after == 12u << 20 && cached() == 8u << 20,
	   "a block larger than the bound is unmapped (%zu bytes fewer)", before - after);
	ucma_opt.overflow_cache = 64u << 20;
	ucma_trim();

	/* Aligned requests, with kept blocks on 2 MiB but maybe not 4 MiB
	 * boundaries. */
	for (int i = 0; i < 8; i++)
		blocks[i] = ovf_malloc(100000);
	for (int i = 0; i < 8; i++)
		ucma_free(blocks[i]);
	for (int i = 0; i < 8; i++) {
		blocks[i] = ucma_aligned_alloc(4u << 20, 100000);
		bad += !blocks[i] || ((uintptr_t)blocks[i] & ((4u << 20) - 1));
	}
	ok(bad == 0, "aligned_alloc(4 MiB) among kept blocks is aligned");
	for (int i = 0; i < 8; i++)
		ucma_free(blocks[i]);

	/* Threads. */
	{
		pthread_t t[NTHREADS];
		long tbad = 0;

		reused0 = stat_of("overflow_reused");
		for (long i = 0; i < NTHREADS; i++)
			pthread_create(&t[i], NULL, worker, (void *)i);
		for (int i = 0; i < NTHREADS; i++) {
			void *r;

			pthread_join(t[i], &r);
			tbad += (long)r;
		}
		for (int k = 0; k < XCHG; k++)
			tbad += !release(&xchg[k]);
		ok(tbad == 0, "%d threads exchanging overflow blocks: every block verifies",
		   NTHREADS);
		ok(stat_of("overflow_reused") - reused0 >= OPS,
		   "and they reused kept blocks (%llu of %d blocks)",
		   (unsigned long long)(stat_of("overflow_reused") - reused0), NTHREADS * OPS);
	}

	/* fork: the child has the parent's kept blocks, as copies. */
	ucma_trim();
	p = ovf_malloc(500000);
	tu_fill(p, 500000, 9);
	ucma_free(p);
	{
		pid_t pid = tu_fork();
		int st;

		if (pid == 0) {
			unsigned char *c = ucma_malloc(500000);

			if (c != p)
				_exit(2);
			memset(c, 0x5a, 500000);
			ucma_free(c);
			_exit(0);
		}
		st = tu_wait(pid);
		ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		   "a fork child takes back a block its parent kept (status %#x)", st);
		q = ovf_malloc(500000);
		ok(q == p && tu_check(q, 500000, 9),
		   "the parent's copy is its own: same block, its data intact");
		ucma_free(q);
	}

	/* realloc(): a buffer grown an eighth at a time from 100 KB to
	 * 64 MiB, each step's new bytes stamped with the step; then shrunk
	 * in place; then grown with mremap refused. */
	{
		static size_t ends[200];
		size_t n = 100000, steps = 0, moved = 0, errno_kept = 0, big, bytes0;
		unsigned char *b = ovf_malloc(n), *prev;
		unsigned long maps0 = nr_mmap;

		memset(b, 0x11, n);
		nr_mremap = 0;
		bad = 0;
		while (n < (64u << 20) && steps < 200) {
			size_t m = n + n / 8 + 1;

			prev = b;
			errno = EDOM;
			b = ucma_realloc(b, m);
			if (!b)
				bail_out("realloc(%zu): %s", m, strerror(errno));
			errno_kept += errno == EDOM;
			moved += b != prev;
			memset(b + n, (int)(steps & 0xff), m - n);
			ends[steps++] = n = m;
		}
		for (size_t k = 0, i = 0; k < n; k++) {
			while (k >= ends[i])
				i++;
			bad += b[k] != (k < 100000 ? 0x11 : (unsigned char)((i) & 0xff));
		}
		ok(bad == 0 && nr_mremap > 0 && nr_mremap <= steps,
		   "realloc to 64 MiB in %zu steps keeps every byte (%d bad), by %lu mremap calls, "
		   "%zu moves, %lu new mappings", steps, bad, nr_mremap, moved, nr_mmap - maps0);
		big = ucma_usable_size(b);
		ok(ucma_owns(b) && big >= n, "the grown block is known at its address (usable %zu)",
		   big);
		bytes0 = (size_t)stat_of("malloc_overflow_bytes");
		prev = b;
		b = ucma_realloc(b, 100000);
		ok(b == prev && ucma_usable_size(b) == 28 * 4096 && b[99999] == 0x11 &&
			   bytes0 - (size_t)stat_of("malloc_overflow_bytes") == big - 28 * 4096,
		   "shrinking by realloc stays in place and unmaps the rest (%zu bytes fewer)",
		   bytes0 - (size_t)stat_of("malloc_overflow_bytes"));
		mremap_refuse = true;
		prev = b;
		b = ucma_realloc(b, 3u << 20);
		mremap_refuse = false;
		ok(b && b != prev && b[0] == 0x11 && b[99999] == 0x11,
		   "with mremap refused, realloc copies the block");
		ok(moved > 0, "growth moved the block %zu times (mremap to a new granule)", moved);
		ok(errno_kept == steps, "realloc left errno alone in %zu of %zu steps", errno_kept,
		   steps);

		/* Another block mapped where a move, then a shrink, has just
		 * freed a range: it stays known (the resize forgot that range
		 * before the kernel freed it). */
		for (int shrink = 0; shrink < 2; shrink++) {
			void *blocker = NULL;
			bool there;

			ucma_trim();	/* the intruder gets a mapping, not a kept block */
			if (!shrink) {
				/* something right after b, so that growth moves */
				blocker = ucma_malloc(INTRUDER);
				mremap_intrude = true;
				b = ucma_realloc(b, 40u << 20);
			} else {
				mremap_intrude = true;
				b = ucma_realloc(b, 100000);
			}
			mremap_intrude = false;
			there = intruder && (uintptr_t)intruder >= (uintptr_t)intruder_at &&
				(uintptr_t)intruder < (uintptr_t)intruder_at + (8u << 20);
			ok(b && there && ucma_owns(intruder) && ucma_usable_size(intruder) >= INTRUDER,
			   "a block mapped in the range a %s freed stays ours (%p, %s the range)",
			   shrink ? "shrink" : "move", intruder, there ? "in" : "not in");
			ucma_free(intruder);
			intruder = NULL;
			ucma_free(blocker);
		}
		ucma_free(b);
	}

	/* Blocks of whole granules placed one below the other are few
	 * kernel mappings, not one each (vm.max_map_count). */
	{
		enum { NB = 4000 };
		static void *v[NB];
		uintptr_t lo = UINTPTR_MAX, hi = 0;
		int vmas;

		ucma_trim();
		for (int i = 0; i < NB; i++) {
			v[i] = ovf_malloc(40000);
			memset(v[i], 1, 64);
			if ((uintptr_t)v[i] < lo)
				lo = (uintptr_t)v[i];
			if ((uintptr_t)v[i] > hi)
				hi = (uintptr_t)v[i];
		}
		vmas = tu_maps_count(lo, hi + 40000, NULL, 0, 0);
		ok(vmas > 0 && vmas <= NB / 40,
		   "%d blocks of 40 KB past the arena are %d kernel mappings", NB, vmas);
		for (int i = 0; i < NB; i++)
			ucma_free(v[i]);
		ucma_trim();
	}

	/* mlockall(MCL_FUTURE) fills and locks every new mapping: the first
	 * block found resident gives up the rest of its granules, and the
	 * later ones map their own length (in a child: it stays so). */
	if (geteuid() == 0) {
		pid_t pid;
		int st;

		ucma_trim();
		pid = tu_fork();
		if (pid == 0) {
			long rss0, rss1;

			if (mlockall(MCL_FUTURE) != 0)
				_exit(3);
			rss0 = tu_rss_kb();
			for (int i = 0; i < 200; i++)
				if (!ucma_malloc(40000))
					_exit(4);
			rss1 = tu_rss_kb();
			printf("# 200 blocks of 40 KB under mlockall: RSS %ld -> %ld KiB\n", rss0, rss1);
			fflush(stdout);
			_exit(rss1 - rss0 < 200 * 40 + 4096 ? 0 : 5);
		}
		st = tu_wait(pid);
		ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		   "under mlockall(MCL_FUTURE) blocks lock their own length, not 2 MiB (status %#x)",
		   st);
	} else {
		skip(1, "mlockall(MCL_FUTURE) needs root's RLIMIT_MEMLOCK");
	}

	/* A block that leaves the cache when the kernel refuses to unmap it
	 * still gives its memory back. */
	{
		long rss0, rss1, rss2;

		ucma_trim();
		p = ovf_malloc(4u << 20);
		__asm__("" : "+r"(p));
		memset(p, 7, 4u << 20);
		ucma_free(p);	/* kept */
		rss0 = tu_rss_kb();
		munmap_refuse = true;
		ucma_trim();
		munmap_refuse = false;
		rss1 = tu_rss_kb();
		rss2 = rss0 - rss1;
		ok(rss2 >= 3 * 1024, "munmap refused: the memory goes back anyway (RSS %ld -> %ld KiB)",
		   rss0, rss1);
	}

	/* UCMA_OVERFLOW_CACHE=0: every block is mapped and unmapped. */
	ucma_opt.overflow_cache = 0;
	ucma_trim();
	nr_mmap = 0;
	for (int i = 0; i < 10; i++)
		ucma_free(ovf_malloc(100000));
	ok(nr_mmap >= 10 && cached() == 0, "with UCMA_OVERFLOW_CACHE=0 nothing is kept (%lu mappings)",
	   nr_mmap);

	for (int i = 0; i < nfill; i++)
		ucma_free(fill[i]);
	return done();
}
