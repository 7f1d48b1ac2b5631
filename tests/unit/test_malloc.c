/*
 * test_malloc.c - the malloc family: size classes and their boundaries,
 * alignment (and what aligned page runs hold), usable sizes, realloc
 * growth and shrinking (large blocks in place where the pages allow),
 * calloc zeroing and overflow checks, ownership, counters, trimming,
 * threads freeing each other's blocks (data stamped and checked), and
 * fork in a multi-threaded process.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "pcp.h"
#include "slab.h"
#include "tcache.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"
#include "zones.h"

/* Bad alignments, out of the compiler's sight (clang refuses them at
 * compile time otherwise). */
static volatile size_t align_3 = 3, align_0 = 0, align_2_63 = (size_t)1 << 63;

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	if (ucma_stat(name, &v) != 0)
		bail_out("ucma_stat(%s): %s", name, strerror(errno));
	return v;
}

/* Every size up to 4 KiB, then around every class boundary and page
 * multiple up to 1 MiB: usable >= requested, 16-byte alignment, bounded
 * rounding, and the whole usable size writable without touching others. */
static void test_sizes(void)
{
	int bad = 0, badalign = 0, badfrag = 0, badstamp = 0;
	static void *keep[5000];
	static size_t ksize[5000];
	int nk = 0;

	for (size_t size = 0; size <= 4096; size++) {
		void *p = ucma_malloc(size);
		size_t u = ucma_usable_size(p);

		if (!p || u < size)
			bad++;
		if ((uintptr_t)p & 15)
			badalign++;
		if (size > 128 && (u - size) * 5 > u)
			badfrag++;
		memset(p, 0xa5, u);
		if (nk < 5000) {
			tu_fill(p, size, size);
			keep[nk] = p;
			ksize[nk++] = size;
		} else {
			ucma_free(p);
		}
	}
	for (int i = 0; i < nk; i++) {
		if (!tu_check(keep[i], ksize[i], ksize[i]))
			badstamp++;
		ucma_free(keep[i]);
	}
	ok(bad == 0, "usable size >= requested for every size up to 4096 (%d bad)", bad);
	ok(badalign == 0, "16-byte alignment (%d bad)", badalign);
	ok(badfrag == 0, "rounding wastes at most 20%% above 128 bytes (%d bad)", badfrag);
	ok(badstamp == 0, "writing whole usable sizes disturbed no neighbour (%d bad)", badstamp);

	bad = badfrag = 0;
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		size_t s = ucma_classes[c].size;
		size_t tries[3] = { s - 1, s, s + 1 };

		for (int k = 0; k < 3; k++) {
			void *p = ucma_malloc(tries[k]);
			size_t u = ucma_usable_size(p);

			if (!p || u < tries[k])
				bad++;
			if (k < 2 && u != s)
				bad++;
			if (k == 2 && c + 1 < UCMA_NR_CLASSES && u != ucma_classes[c + 1].size)
				bad++;
			memset(p, 1, u);
			ucma_free(p);
		}
	}
	ok(bad == 0, "each class boundary s-1, s, s+1 lands in the right class (%d bad)", bad);

	bad = 0;
	for (size_t size = 4096; size <= (1u << 20); size += size / 7 + 1) {
		size_t tries[3] = { size - 1, size, size + 1 };

		for (int k = 0; k < 3; k++) {
			void *p = ucma_malloc(tries[k]);
			size_t u = ucma_usable_size(p);

			if (!p || u < tries[k])
				bad++;
			if (tries[k] > UCMA_SMALL_MAX && u - tries[k] >= UCMA_PAGE_SIZE)
				bad++;	/* large blocks are exact page runs */
			if (p) {
				tu_fill(p, tries[k], tries[k]);
				if (!tu_check(p, tries[k], tries[k]))
					bad++;
			}
			ucma_free(p);
		}
	}
	ok(bad == 0, "large sizes up to 1 MiB: usable >= requested, within a page (%d bad)",
	   bad);

	void *z = ucma_malloc(0), *z2 = ucma_malloc(0);

	ok(z && z2 && z != z2 && ucma_usable_size(z) >= 1, "malloc(0) returns unique blocks");
	ucma_free(z);
	ucma_free(z2);
	ucma_free(NULL);
	ok(1, "free(NULL) is harmless");

	size_t big[] = { (size_t)3 << 20, (size_t)17 << 20 };

	bad = 0;
	for (int i = 0; i < 2; i++) {
		char *p = ucma_malloc(big[i]);

		if (!p || ucma_usable_size(p) < big[i])
			bad++;
		else {
			p[0] = 1;
			p[big[i] - 1] = 2;
		}
		ucma_free(p);
	}
	ok(bad == 0, "blocks larger than a pageblock (3 MiB, 17 MiB)");
}

static void test_alignment(void)
{
	int bad = 0;
	size_t sizes[] = { 1, 24, 100, 1000, 5000, 40000, 300000 };

	for (size_t al = 1; al <= ((size_t)1 << 22); al <<= 1) {
		for (unsigned i = 0; i < UCMA_ARRAY_SIZE(sizes); i++) {
			void *p = ucma_aligned_alloc(al, sizes[i]);

			if (!p || ((uintptr_t)p & (al - 1)) || ucma_usable_size(p) < sizes[i]) {
				diag("aligned_alloc(%zu, %zu) = %p", al, sizes[i], p);
				bad++;
			} else {
				memset(p, 0x5a, sizes[i]);
			}
			ucma_free(p);
		}
	}
	ok(bad == 0, "aligned_alloc for alignments 1..4 MiB and several sizes (%d bad)", bad);

	/* Small alignments are served from a size class, not a page run. */
	void *p = ucma_aligned_alloc(64, 100);

	ok(p && !((uintptr_t)p & 63) && ucma_usable_size(p) == 128,
	   "aligned_alloc(64, 100) takes the 128-byte class");
	ucma_free(p);

	p = ucma_aligned_alloc((size_t)1 << 30, 100);
	ok(p && !((uintptr_t)p & (((size_t)1 << 30) - 1)), "aligned_alloc(1 GiB, 100)");
	if (p)
		memset(p, 1, 100);
	ucma_free(p);

	errno = 0;
	ok(ucma_aligned_alloc(align_3, 16) == NULL && errno == EINVAL, "alignment 3: EINVAL");
	errno = 0;
	ok(ucma_aligned_alloc(align_0, 16) == NULL && errno == EINVAL, "alignment 0: EINVAL");
	errno = 0;
	ok(ucma_aligned_alloc(align_2_63, 16) == NULL && errno == ENOMEM,
	   "alignment 2^63: ENOMEM");

	void *q = (void *)1;

	ok(ucma_posix_memalign(&q, 4, 16) == EINVAL && q == (void *)1,
	   "posix_memalign below pointer size: EINVAL, *memptr untouched");
	ok(ucma_posix_memalign(&q, 24, 16) == EINVAL, "posix_memalign(24): EINVAL");
	ok(ucma_posix_memalign(&q, 256, 1000) == 0 && !((uintptr_t)q & 255),
	   "posix_memalign(256, 1000)");
	ucma_free(q);
	q = ucma_memalign(24, 100);
	ok(q && !((uintptr_t)q & 31), "memalign(24) rounds the alignment up to 32");
	ucma_free(q);
}

/* Bytes the malloc family holds: arena pages and overflow mappings. */
static uint64_t held_bytes(void)
{
	struct ucma_malloc_info mi;

	if (ucma_malloc_info(&mi) != 0)
		bail_out("ucma_malloc_info: %s", strerror(errno));
	return mi.active + mi.overflow;
}

static bool normal_zone_ok(const char *when)
{
	struct ucma_arena *a = ucma_arena_peek();
	char why[256];

	if (!a)
		return true;	/* no arena: every block is an overflow mapping */
	if (ucma_zone_check(&a->zones[UCMA_ZONE_NORMAL], why, sizeof(why)) == 0)
		return true;
	diag("zone check %s: %s", when, why);
	return false;
}

/*
 * Aligned page runs hold what was asked for: the slack taken to align
 * them goes back (glibc gives back the ends of its over-sized chunk too),
 * and the usable size is the request rounded to pages.
 */
static void aligned_holds(size_t align, size_t size, int n)
{
	static void *v[1000];
	uint64_t before = held_bytes(), held;
	size_t want = UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE);
	int bad = 0;

	if (n > (int)UCMA_ARRAY_SIZE(v))
		bail_out("aligned_holds: %d blocks", n);
	for (int i = 0; i < n; i++) {
		v[i] = ucma_aligned_alloc(align, size);
		if (!v[i] || ((uintptr_t)v[i] & (align - 1)) || ucma_usable_size(v[i]) != want)
			bad++;
		else
			memset(v[i], 0x3c, size);
	}
	held = held_bytes() - before;
	ok(bad == 0, "%d x aligned_alloc(%zu, %zu): aligned, usable size %zu (%d bad)", n, align,
	   size, want, bad);
	ok(held <= (uint64_t)n * want + (uint64_t)n * want / 8,
	   "they hold %.2fx the %zu KiB asked for (at most 1.125x)",
	   (double)held / ((double)n * (double)want), (size_t)n * want / 1024);
	ok(normal_zone_ok("with the blocks"), "zone invariants hold with them");
	for (int i = 0; i < n; i++)
		ucma_free(v[i]);
	ok(normal_zone_ok("after freeing them"), "zone invariants hold after freeing them");
}

static void test_aligned_slack(void)
{
	void *p;

	aligned_holds(65536, 4096, 1000);
	aligned_holds((size_t)2 << 20, 4096, 100);
	aligned_holds((size_t)2 << 20, 20000, 100);
	aligned_holds((size_t)8 << 20, (size_t)3 << 20, 10);
	p = ucma_aligned_alloc((size_t)1 << 29, 1);
	ok(p && !((uintptr_t)p & (((size_t)1 << 29) - 1)) && ucma_usable_size(p) == UCMA_PAGE_SIZE,
	   "aligned_alloc(512 MiB, 1): usable size %zu", ucma_usable_size(p));
	ucma_free(p);
	ok(normal_zone_ok("after aligned_alloc(512 MiB, 1)"), "zone invariants hold after it");

	/* posix_memalign() leaves errno alone when it succeeds, also after a
	 * try that did not (the zone full, the block made elsewhere). */
	{
		enum { N = 80 };
		void *v[N];
		int n = 0, changed = 0;

		for (; n < N; n++) {
			errno = EXDEV;
			if (ucma_posix_memalign(&v[n], 4096, (size_t)16 << 20) != 0)
				break;
			changed += errno != EXDEV;
		}
		ok(n > 0 && changed == 0,
		   "posix_memalign of 16 MiB blocks until the arena is full and beyond: errno "
		   "left alone (%d of %d calls changed it)", changed, n);
		while (n-- > 0)
			ucma_free(v[n]);
	}
}

/* These two ask for sizes no object can have, on purpose: ucma.h's
 * alloc_size attributes make GCC say so, as it does for malloc(). */
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Walloc-size-larger-than="
#endif
/* Reallocate @b to its usable size, write all of it and free it: did it
 * stay where it was, with the same usable size? */
static bool realloc_to_usable_stays(char *b)
{
	size_t n = ucma_usable_size(b);
	char *q = ucma_realloc(b, n);
	bool stayed = q == b && ucma_usable_size(q) == n;

	memset(q, 1, n);
	ucma_free(q);
	return stayed;
}

static void test_realloc(void)
{
	size_t size = 2, moves = 0;
	char *p = ucma_realloc(NULL, size);
	int bad = 0;
	uint64_t seed = 7;

	p[0] = 'x';
	p[1] = 2;
	/* Grow in small steps up to 2 MiB; the prefix must survive. */
	while (size < ((size_t)2 << 20)) {
		size_t next = size + 1 + tu_rand(&seed) % (size / 8 + 64);
		char *q = ucma_realloc(p, next);

		if (!q) {
			bad++;
			break;
		}
		if (q != p)
			moves++;
		if (q[0] != 'x' || q[size - 1] != (char)(size & 0x7f))
			bad++;
		for (size_t i = size; i < next; i++)
			q[i] = (char)(next & 0x7f);
		q[0] = 'x';
		p = q;
		size = next;
	}
	ok(bad == 0, "realloc growth to 2 MiB keeps the contents");
	ok(moves < 100, "growth in small steps moved the block %zu times (< 100)", moves);

	/* Shrink in steps down to 1 byte. */
	tu_fill(p, size, 99);
	bad = 0;
	while (size > 1) {
		size_t next = size - size / 3 - 1;
		char *q;

		if (next == 0)
			next = 1;
		q = ucma_realloc(p, next);
		if (!q || !tu_check(q, next, 99) || ucma_usable_size(q) < next)
			bad++;
		/* Shrinking far gives the memory back: the block moves down. */
		if (q && ucma_usable_size(q) > 2 * next + 4096 && next > 16)
			bad++;
		p = q;
		tu_fill(p, next, 99);
		size = next;
	}
	ok(bad == 0, "realloc shrinking keeps the contents and releases the excess");

	errno = 0;
	ok(ucma_realloc(p, 0) == NULL, "realloc(p, 0) frees and returns NULL");

	p = ucma_malloc(100);
	tu_fill(p, 100, 5);
	errno = 0;
	ok(ucma_realloc(p, SIZE_MAX) == NULL && errno == ENOMEM && tu_check(p, 100, 5),
	   "realloc to SIZE_MAX: ENOMEM, block untouched");
	ok(ucma_realloc(p, 110) == p, "realloc within the class stays in place");
	ucma_free(p);

	p = ucma_malloc(100000);
	ok(ucma_realloc(p, 99000) == p, "large realloc within the run stays in place");
	ucma_free(p);

	/* What ucma.h offers a program built with _FORTIFY_SOURCE that wants
	 * the slack of its block: ask for it, and the block stays. */
	{
		static const size_t sizes[] = { 1, 10, 100, 1000, 5000, 40000, 100000, 1 << 20 };
		size_t moved = 0;

		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			moved += !realloc_to_usable_stays(ucma_malloc(sizes[i]));
			moved += !realloc_to_usable_stays(ucma_aligned_alloc(4096, sizes[i]));
		}
		ok(moved == 0, "realloc to the usable size keeps every block in place (%zu moved)",
		   moved);
	}
}

/* The arena page of @p, and the page after its run. */
static uint32_t pfn_of(const void *p)
{
	return ucma_addr_to_pfn(ucma_arena_peek(), p);
}

static uint32_t run_end(const void *p)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t h = pfn_of(p);

	return h + a->pages[h].aux;
}

/* Make the free pages [start, start + n) resident: written, then freed
 * (as a block a program freed; the decay gives them back seconds later). */
static bool make_resident(uint32_t start, uint32_t n)
{
	struct ucma_arena *a = ucma_arena_peek();

	if (ucma_claim_free_range(a, start, start + n, UCMA_OWN_NONE, 0) != 0)
		return false;
	memset(ucma_pfn_to_addr(a, start), 0x77, (size_t)n << UCMA_PAGE_SHIFT);
	ucma_pages_free(a, start);
	return true;
}

enum room_where { ROOM_INSIDE, ROOM_ALIGNED };

/*
 * A large block of at least @size bytes with @room free pages after its
 * run, which either lie inside the run's pageblock (ROOM_INSIDE) or
 * follow a run that starts on a pageblock (ROOM_ALIGNED: aligned to one,
 * since blocks of no multiple of a pageblock are packed across pageblock
 * boundaries, zone.c take_across()); NULL when a few tries found none
 * (the misses are kept until the end, so that each try lands elsewhere).
 */
static char *block_with_room(size_t size, uint32_t room, enum room_where where)
{
	struct ucma_arena *a = ucma_arena_peek();
	void *miss[16];
	char *p = NULL;
	int n = 0;

	while (n < (int)UCMA_ARRAY_SIZE(miss)) {
		uint32_t h, e;

		p = where == ROOM_ALIGNED ? ucma_aligned_alloc(UCMA_PAGEBLOCK_SIZE, size)
					  : ucma_malloc(size);
		if (!p)
			break;
		h = pfn_of(p);
		e = run_end(p);
		if ((where == ROOM_INSIDE ? (e + room - 1) >> UCMA_PAGEBLOCK_ORDER ==
						    h >> UCMA_PAGEBLOCK_ORDER :
					    !(h & (UCMA_PAGEBLOCK_PAGES - 1))) &&
		    e + room <= a->zones[UCMA_ZONE_NORMAL].end_pfn && ucma_range_free(a, e, e + room))
			break;
		miss[n++] = p;
		p = NULL;
	}
	while (n > 0)
		ucma_free(miss[--n]);
	return p;
}

/*
 * @p, a run of 3 MiB starting on a pageblock with free pageblocks after
 * it: with every free page given back to the kernel first (so that a move
 * would take fresh pages too), it grows into them; but not into an
 * isolated one.
 */
static void grow_across(char *p)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t end;
	char *q;

	tu_fill(p, 3 << 20, 23);
	ucma_trim();
	q = ucma_realloc(p, 9 << 20);
	ok(q == p && tu_check(q, 3 << 20, 23),
	   "a run of pageblocks grows into the fresh pageblocks after it in place");
	if (!q) {
		skip(3, "realloc to 9 MiB failed: %s", strerror(errno));
		ucma_free(p);
		return;
	}
	ok(normal_zone_ok("after growing across pageblocks"),
	   "zone invariants hold after growing across pageblocks");

	/* ...but not into an isolated one (a claim or a compaction owns its
	 * free pages): then it moves, and the pageblock stays free. */
	end = UCMA_ALIGN_UP(run_end(q), UCMA_PAGEBLOCK_PAGES);
	if (end + UCMA_PAGEBLOCK_PAGES <= a->zones[UCMA_ZONE_NORMAL].end_pfn &&
	    ucma_range_free(a, end, end + UCMA_PAGEBLOCK_PAGES) &&
	    ucma_isolate_range(a, end, end + UCMA_PAGEBLOCK_PAGES) == 0) {
		p = ucma_realloc(q, (size_t)(end - pfn_of(q) + 16) << UCMA_PAGE_SHIFT);
		ok(p && p != q && tu_check(p, 3 << 20, 23) &&
		   ucma_range_free(a, end, end + UCMA_PAGEBLOCK_PAGES),
		   "growth into an isolated pageblock moves the block instead");
		ucma_undo_isolate_range(a, end, end + UCMA_PAGEBLOCK_PAGES);
		q = p;
	} else {
		skip(1, "no free pageblock to isolate after the block");
	}
	ok(normal_zone_ok("after the isolated pageblock"),
	   "zone invariants hold after the isolated pageblock");
	ucma_free(q);
}

/*
 * A large block grows into the free pages after it (resident ones, or
 * fresh ones where a move would take fresh pages too) and shrinks by
 * giving back its tail, where it lies: no copy.  It moves when those
 * pages are taken or may not join it (an isolated pageblock, a run that
 * would cross a pageblock it does not start on), and then its neighbour
 * is untouched.  The zone's invariants and the counters hold throughout.
 */
static void test_realloc_large_in_place(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_malloc_info m0, m1;
	char *p, *q, *blocker;
	uint32_t end;

	if (!a) {
		skip(11, "no arena");
		return;
	}
	/* Within its pageblock: 40 KiB to 200 KiB into pages that blocks
	 * freed earlier left resident, then back to 60 KiB. */
	p = block_with_room(40 << 10, 60, ROOM_INSIDE);
	if (!p || !make_resident(run_end(p), 60)) {
		skip(11, "no 40 KiB block with 240 KiB free after it");
		ucma_free(p);
		return;
	}
	tu_fill(p, 40 << 10, 21);
	ucma_malloc_info(&m0);
	q = ucma_realloc(p, 200 << 10);
	ucma_malloc_info(&m1);
	ok(q == p && tu_check(q, 40 << 10, 21) && ucma_usable_size(q) >= (200 << 10),
	   "a large block grows into the resident free pages after it in place");
	ok(m1.active - m0.active == ucma_usable_size(q) - (40 << 10) &&
	   m1.nmalloc == m0.nmalloc && m1.nfree == m0.nfree,
	   "the counters see it grow by %zu KiB, no malloc nor free",
	   (size_t)(m1.active - m0.active) >> 10);
	tu_fill(q, 200 << 10, 22);
	end = run_end(q);
	p = ucma_realloc(q, 60 << 10);
	ok(p == q && tu_check(p, 60 << 10, 22) && ucma_usable_size(p) == (60 << 10) &&
	   ucma_range_free(a, run_end(p), end),
	   "it shrinks in place, and the tail it gave back is free");
	ok(normal_zone_ok("after growing and shrinking in place"),
	   "zone invariants hold after growing and shrinking in place");

	/* Its pageblock isolated (a compaction empties it): the free pages
	 * after it are not its to take, and it moves. */
	ucma_free(p);
	p = block_with_room(40 << 10, 60, ROOM_INSIDE);
	if (p) {
		uint32_t pb = UCMA_ALIGN_DOWN(pfn_of(p), UCMA_PAGEBLOCK_PAGES);

		end = run_end(p);
		tu_fill(p, 40 << 10, 24);
		if (ucma_isolate_range(a, pb, pb + UCMA_PAGEBLOCK_PAGES) != 0)
			bail_out("ucma_isolate_range: %s", strerror(errno));
		q = ucma_realloc(p, 200 << 10);
		ok(q && q != p && tu_check(q, 40 << 10, 24) && ucma_range_free(a, end, end + 46),
		   "in an isolated pageblock it moves, the free pages after it stay free");
		ucma_undo_isolate_range(a, pb, pb + UCMA_PAGEBLOCK_PAGES);
		p = ucma_realloc(q, 60 << 10);
		tu_fill(p, 60 << 10, 22);
	} else {
		skip(1, "no second 40 KiB block with 240 KiB free after it");
		p = ucma_malloc(60 << 10);
		tu_fill(p, 60 << 10, 22);
	}

	/* A page taken right after it: the block moves, the page stays. */
	end = run_end(p);
	if (ucma_claim_free_range(a, end, end + 1, UCMA_OWN_NONE, 0) == 0) {
		blocker = ucma_pfn_to_addr(a, end);
		memset(blocker, 0x5a, UCMA_PAGE_SIZE);
		q = ucma_realloc(p, 400 << 10);
		ok(q && q != p && tu_check(q, 60 << 10, 22) && blocker[0] == 0x5a &&
		   blocker[UCMA_PAGE_SIZE - 1] == 0x5a,
		   "with the next page taken it moves, the neighbour untouched");
		ucma_pages_free(a, end);
		p = q;
	} else {
		skip(1, "the page after the block was taken meanwhile");
	}
	ucma_free(p);

	/* Across pageblocks: a run that starts on one takes the whole free
	 * pageblocks after it... */
	p = block_with_room(3 << 20, 4 * UCMA_PAGEBLOCK_PAGES, ROOM_ALIGNED);
	if (!p)
		skip(4, "no 3 MiB block with 8 MiB free after it");
	else
		grow_across(p);


	/* A run that does not start on a pageblock grows across its end
	 * when the pages up to and past the boundary are free: an unmovable
	 * run of NORMAL may lie across boundaries anywhere (zone.c
	 * take_across()).  (Trimmed back after: malloc's counters know the
	 * block at its size.) */
	{
		void *v[32];
		int n = 0, tried = 0;

		for (; n < (int)UCMA_ARRAY_SIZE(v); n++) {
			uint32_t h, to_next;

			v[n] = p = ucma_malloc(64 << 10);
			if (!p)
				break;
			h = pfn_of(p);
			to_next = UCMA_ALIGN_UP(h + 1, UCMA_PAGEBLOCK_PAGES) - h;
			if (!(h & (UCMA_PAGEBLOCK_PAGES - 1)) ||
			    h + to_next + UCMA_PAGEBLOCK_PAGES > a->zones[UCMA_ZONE_NORMAL].end_pfn ||
			    !ucma_range_free(a, run_end(p), h + to_next + UCMA_PAGEBLOCK_PAGES))
				continue;
			tried = 1;
			ok(ucma_pages_grow(a, h, to_next + 1, false) && run_end(p) == h + to_next + 1 &&
				   tu_zones_ok(a, "grown across a boundary"),
			   "a 64 KiB run inside a pageblock grows across its end: invariants hold");
			ucma_pages_trim(a, h, h, 16);	/* as large_shrink() */
			ucma_run_set_owner(a, h, UCMA_OWN_LARGE, h);
			n++;
			break;
		}
		if (!tried)
			skip(1, "no 64 KiB block inside a pageblock with free pages past its end");
		while (n > 0)
			ucma_free(v[--n]);
	}
}

/* The pages a large block of @size bytes takes (malloc.c large_round():
 * four sizes per doubling), at most: for the range a growth may reach. */
static uint32_t grown_pages(size_t size)
{
	return (uint32_t)((size + size / 4 + UCMA_PAGE_SIZE - 1) >> UCMA_PAGE_SHIFT);
}

/*
 * A buffer built up by realloc() over fresh memory grows where it lies.
 * Growth first asks whether resident memory exists elsewhere (a copy
 * there beats first touches); the run that answers must not be the very
 * fresh pages after the block, which the allocator, placing runs lowest
 * first, often finds: the block was then copied into its own tail,
 * leaving its old copy behind.
 */
static void test_realloc_fresh_tail(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	const size_t top = 24u << 20;
	unsigned could = 0, in_place = 0, into_tail = 0, bad = 0;
	struct ucma_zone *z;
	char *p;

	if (!a) {
		skip(2, "no arena");
		return;
	}
	z = &a->zones[UCMA_ZONE_NORMAL];
	p = block_with_room(3 << 20, grown_pages(top), ROOM_ALIGNED);
	if (!p) {
		skip(2, "no 3 MiB block with %zu MiB free after it", top >> 20);
		return;
	}
	tu_fill(p, 3 << 20, 31 + 3);	/* the seed of each size: 31 + its MiB */
	ucma_trim();	/* every free page fresh */
	for (size_t n = 4 << 20, size = 3 << 20; n <= top; size = n, n += 1 << 20) {
		uint32_t h = pfn_of(p), e = run_end(p), ne = h + grown_pages(n);
		bool fresh = ne <= z->end_pfn && ucma_range_free(a, e, ne) &&
			     ucma_buddy_clean_tail(z, e, ne) == e;
		char *q = ucma_realloc(p, n);

		if (!q || !tu_check(q, size, 31 + (unsigned)(size >> 20))) {
			bad++;
			break;
		}
		if (fresh) {
			could++;
			in_place += q == p;
			into_tail += q != p && pfn_of(q) == e;
		}
		p = q;
		tu_fill(p, n, 31 + (unsigned)(n >> 20));
	}
	ok(bad == 0 && could > 0 && into_tail == 0,
	   "growth over fresh pages: %u of %u steps in place, %u copied into the block's own tail "
	   "(%u bad)", in_place, could, into_tail, bad);
	ok(normal_zone_ok("after growing over fresh pages"),
	   "zone invariants hold after growing over fresh pages");
	ucma_free(p);
}

/*
 * A zone on transparent huge pages asks for them once 16 MiB of it are in
 * use (zone.c): growth in place is use too, also when it takes resident
 * pages and no allocation happens on the way.
 */
static void test_realloc_thp_switch(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	const size_t top = 20u << 20;
	struct ucma_zone *z;
	char *p, *q;

	if (!a || !a->zones[UCMA_ZONE_NORMAL].thp_deferred) {
		skip(1, "the zone is not waiting to switch to huge pages");
		return;
	}
	z = &a->zones[UCMA_ZONE_NORMAL];
	p = block_with_room(3 << 20, grown_pages(top), ROOM_ALIGNED);
	if (!p || !make_resident(run_end(p), grown_pages(top) - (3u << (20 - UCMA_PAGE_SHIFT)))) {
		skip(1, "no 3 MiB block with %zu MiB free after it", top >> 20);
		ucma_free(p);
		return;
	}
	/* (Read unlocked: no other thread allocates in this test.) */
	if (!z->thp_deferred) {
		skip(1, "making the pages resident switched the zone already");
		ucma_free(p);
		return;
	}
	q = ucma_realloc(p, top);
	ok(q == p && !z->thp_deferred,
	   "growing in place into resident pages to %zu MiB switches the zone to huge pages "
	   "(%s, %zu MiB of the zone in use)", top >> 20, q == p ? "in place" : "moved",
	   (size_t)(z->managed_pages - z->free_pages) >> (20 - UCMA_PAGE_SHIFT));
	ucma_free(q ? q : p);
}

/*
 * Threads each grow their own buffer by realloc in random steps to 8 MiB
 * and shrink it again, checking every byte written so far at each step,
 * while the others do the same next to them: growing in place must never
 * take a page another block holds.
 */
/*
 * Resizes *p from *size to next, checks the bytes both sizes share (filled
 * with tag ^ *size) and refills the block for next. False when realloc
 * failed or a byte changed.
 */
static bool realloc_step(char **p, size_t *size, size_t next, uint64_t tag)
{
	char *q = ucma_realloc(*p, next);
	size_t kept = next < *size ? next : *size;

	if (!q || !tu_check(q, kept, tag ^ *size))
		return false;
	tu_fill(q, next, tag ^ next);
	*p = q;
	*size = next;
	return true;
}

static void *realloc_worker(void *arg)
{
	uint64_t tag = (uint64_t)(uintptr_t)arg, seed = tag;
	size_t size = 1, bad = 0;
	char *p = ucma_malloc(size);

	tu_fill(p, size, tag ^ size);
	while (p && size < (8u << 20) && !bad)
		bad += !realloc_step(&p, &size,
				     size + 1 + tu_rand(&seed) % (size / 2 + 4096),
				     tag);
	while (p && size > 4096 && !bad)
		bad += !realloc_step(&p, &size, size / 3, tag);
	ucma_free(p);
	return (void *)bad;
}

static void test_realloc_threads(void)
{
	enum { N = 4, ROUNDS = 6 };
	size_t bad = 0;

	for (int r = 0; r < ROUNDS; r++) {
		pthread_t t[N];

		for (int i = 0; i < N; i++)
			if (pthread_create(&t[i], NULL, realloc_worker,
					   (void *)(uintptr_t)(r * N + i + 1)) != 0)
				bail_out("pthread_create: %s", strerror(errno));
		for (int i = 0; i < N; i++) {
			void *res;

			pthread_join(t[i], &res);
			bad += (size_t)res;
		}
	}
	ok(bad == 0, "%d threads growing and shrinking buffers by realloc: contents intact "
	   "(%zu bad)", N, bad);
	ok(normal_zone_ok("after the realloc threads"), "zone invariants hold after them");
}

static void test_calloc(void)
{
	size_t sizes[] = { 1, 16, 100, 4096, 20000, 40000, 1 << 20 };
	int bad = 0;

	for (int round = 0; round < 3; round++) {
		for (unsigned i = 0; i < UCMA_ARRAY_SIZE(sizes); i++) {
			/* dirty a block of the same size first, so calloc can
			 * get recycled memory */
			char *d = ucma_malloc(sizes[i]);

			memset(d, 0xff, sizes[i]);
			ucma_free(d);
			unsigned char *p = ucma_calloc(1, sizes[i]);

			for (size_t k = 0; p && k < sizes[i]; k++)
				if (p[k]) {
					bad++;
					break;
				}
			if (!p)
				bad++;
			memset(p, 0xee, sizes[i]);
			ucma_free(p);
		}
	}
	ok(bad == 0, "calloc zeroes, also recycled memory (%d bad)", bad);
	errno = 0;
	ok(ucma_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM, "calloc n*m overflow: ENOMEM");
	errno = 0;
	ok(ucma_calloc((size_t)1 << 40, (size_t)1 << 40) == NULL && errno == ENOMEM,
	   "calloc 2^40 * 2^40: ENOMEM");
	errno = 0;
	ok(ucma_malloc(SIZE_MAX) == NULL && errno == ENOMEM, "malloc(SIZE_MAX): ENOMEM");
	errno = 0;
	ok(ucma_malloc(SIZE_MAX - 4095) == NULL && errno == ENOMEM,
	   "malloc(SIZE_MAX - 4095): ENOMEM");
	void *z = ucma_calloc(0, 5);

	ok(z != NULL, "calloc(0, 5) returns a block");
	ucma_free(z);
}
#pragma GCC diagnostic pop

static void test_owns(void)
{
	int local;
	void *g = malloc(64);
	void *s = ucma_malloc(64), *l = ucma_malloc(100000);

	ok(ucma_owns(NULL) == 0, "owns(NULL) = 0");
	ok(ucma_owns(&local) == 0, "owns(stack) = 0");
	ok(ucma_owns(g) == 0, "owns(glibc block) = 0");
	ok(ucma_owns(s) == 1 && ucma_owns(l) == 1, "owns(small), owns(large) = 1");
	errno = 0;
	ok(ucma_usable_size(g) == 0 && errno == EINVAL, "usable_size(foreign) = 0, EINVAL");
	ok(ucma_usable_size(NULL) == 0, "usable_size(NULL) = 0");
	{
		/* A freed block has no size, whether it is parked in this
		 * thread's stack, back in its slab's bitmap, or a kept run. */
		enum { N = 300 };
		/* volatile: the compiler would see the use after free */
		void *volatile v[N], *volatile big = ucma_malloc(100000);
		int bad = 0;

		for (int i = 0; i < N; i++)
			v[i] = ucma_malloc(48);
		for (int i = 0; i < N; i++)
			ucma_free(v[i]);	/* the first ones parked, the rest in the bitmap */
		ucma_free(big);
		for (int i = 0; i < N; i++) {
			errno = 0;
			if (ucma_usable_size(v[i]) != 0 || errno != EINVAL)
				bad++;
		}
		errno = 0;
		ok(bad == 0 && ucma_usable_size(big) == 0 && errno == EINVAL,
		   "usable_size of freed blocks (parked, in the bitmap, a kept run) = 0, EINVAL "
		   "(%d of %d small ones had a size)", bad, N);
	}
	ok(ucma_try_free(g) == 0, "try_free(glibc block) = 0, nothing done");
	ok(ucma_try_free(NULL) == 1, "try_free(NULL) = 1");
	{
		void *a = ucma_malloc(40), *b = ucma_malloc(70000);
		struct ucma_malloc_info m0, m1;

		ucma_malloc_info(&m0);
		ok(ucma_try_free(a) == 1 && ucma_try_free(b) == 1,
		   "try_free(small), try_free(large) = 1");
		ucma_malloc_info(&m1);
		ok(m1.nfree - m0.nfree == 2, "try_free freed both");
	}
	free(g);
	errno = 1234;
	ucma_free(s);
	ucma_free(l);
	ok(errno == 1234, "free leaves errno alone");
	errno = 4321;
	s = ucma_malloc(300000);
	ucma_free(s);
	ok(s && errno == 4321, "a successful malloc leaves errno alone");
}

static void test_counters(void)
{
	struct ucma_malloc_info mi0, mi1, mi2;
	void *p[100];

	ok(ucma_malloc_info(NULL) == -1 && errno == EINVAL, "malloc_info(NULL): EINVAL");
	ucma_malloc_info(&mi0);
	for (int i = 0; i < 100; i++)
		p[i] = ucma_malloc(1000);
	void *l = ucma_malloc(200000);

	ucma_malloc_info(&mi1);
	ok(mi1.nmalloc - mi0.nmalloc == 101, "nmalloc counts 101 calls (%llu)",
	   (unsigned long long)(mi1.nmalloc - mi0.nmalloc));
	ok(mi1.allocated - mi0.allocated == 100 * 1024 + ucma_usable_size(l),
	   "allocated bytes grew by the usable sizes");
	ok(mi1.large_allocs == mi0.large_allocs + 1, "one more live large block");
	for (int i = 0; i < 100; i++)
		ucma_free(p[i]);
	ucma_free(l);
	ucma_malloc_info(&mi2);
	ok(mi2.nfree - mi1.nfree == 101 && mi2.allocated == mi0.allocated,
	   "nfree counts 101 frees, allocated bytes back where they were");
	ok(stat_of("malloc_nmalloc") >= mi2.nmalloc, "ucma_stat(\"malloc_nmalloc\") agrees");
}

static void test_trim(void)
{
	enum { N = 40000 };
	static void *p[N];
	uint64_t before, after;
	int r;

	for (int i = 0; i < N; i++)
		p[i] = ucma_malloc(16 + (size_t)(i % 64) * 16 * (i % 7 + 1));
	for (int i = 0; i < N; i++)
		ucma_free(p[i]);
	before = stat_of("malloc_active");
	r = ucma_trim();
	after = stat_of("malloc_active");
	ok(r == 1 && after < before, "trim returned %d; active bytes fell from %llu to %llu", r,
	   (unsigned long long)before, (unsigned long long)after);
	ok(stat_of("malloc_tcache_bytes") < 1u << 20, "the thread cache was flushed");
}

/*
 * A thread that went through eight sizes one after the other, each in
 * many slabs' worth of blocks freed again, keeps at most
 * UCMA_TCACHE_KEEP_EMPTY bytes of wholly free slabs over all of them (it
 * kept up to 128 KiB per class before, 600 KiB here), counted exactly,
 * and still some of the size it uses last.
 */
static void *kept_empties_thread(void *arg)
{
	static const size_t sizes[] = { 16, 32, 48, 64, 96, 128, 192, 256 };
	enum { N = 1600 };
	void **p = malloc(N * sizeof(*p));
	struct ucma_tcache *tc;
	uint64_t sum = 0;
	unsigned last;
	int bad = 0;

	(void)arg;
	if (!p)
		return (void *)1;
	for (size_t si = 0; si < UCMA_ARRAY_SIZE(sizes); si++)
		for (int round = 0; round < 3; round++) {
			for (int j = 0; j < N; j++)
				if ((p[j] = ucma_malloc(sizes[si])) == NULL)
					bad = 1;
				else
					memset(p[j], (int)j, sizes[si]);
			for (int j = 0; j < N; j++)
				ucma_free(p[j]);
		}
	free(p);
	tc = ucma_tcache_tls;
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		sum += (uint64_t)tc->lists[c].nempty * ucma_classes[c].npages * UCMA_PAGE_SIZE;
		bad |= !!(tc->kept_classes & (1ull << c)) != (tc->lists[c].nempty > 0);
	}
	last = ucma_class_of_size[(256 + 15) >> 4];
	diag("kept empty slabs: %llu bytes (%u of them of the last size)",
	     (unsigned long long)tc->kept_bytes, tc->lists[last].nempty);
	if (bad || sum != tc->kept_bytes || tc->kept_bytes > UCMA_TCACHE_KEEP_EMPTY ||
	    tc->lists[last].nempty == 0)
		return (void *)1;
	return NULL;
}

static void test_kept_empties(void)
{
	pthread_t t;
	void *r = (void *)1;

	if (pthread_create(&t, NULL, kept_empties_thread, NULL) == 0)
		pthread_join(t, &r);
	ok(r == NULL, "a thread keeps at most %u KiB of wholly free slabs over all its sizes, "
		      "counted exactly, the last size's among them",
	   UCMA_TCACHE_KEEP_EMPTY >> 10);
}

/*
 * A large run the thread freed is kept for its next large malloc of the
 * same number of pages: it counts as cached and still held, comes back
 * for that malloc, and goes back to the page allocator on trim.
 */
static void test_large_kept(void)
{
	uint64_t cached0, cached1, active0, active1;
	void *p, *q;

	ucma_trim();
	cached0 = stat_of("malloc_tcache_bytes");
	p = ucma_malloc(100000);	/* 25 pages */
	memset(p, 7, 100000);
	active0 = stat_of("malloc_active");
	ucma_free(p);
	cached1 = stat_of("malloc_tcache_bytes");
	active1 = stat_of("malloc_active");
	ok(cached1 >= cached0 + 25 * UCMA_PAGE_SIZE && active1 == active0,
	   "a freed 100000-byte block is kept: cached %llu -> %llu, active %llu -> %llu",
	   (unsigned long long)cached0, (unsigned long long)cached1,
	   (unsigned long long)active0, (unsigned long long)active1);
	q = ucma_malloc(99000);		/* 25 pages too */
	ok(q == p && ucma_usable_size(q) == 25 * UCMA_PAGE_SIZE,
	   "the next malloc of as many pages takes it back");
	ucma_free(q);
	ucma_trim();
	ok(stat_of("malloc_active") < active1, "trim gives the kept run back");
}

/*
 * Large blocks whose page count is no power of two share pageblocks: 512
 * KiB + 57 bytes is 129 pages, and three fit in a pageblock of 512.  As
 * buddy blocks of their order (256 pages) they went two to a pageblock,
 * at offsets 0 and 256, the second touching pages the first never had
 * (zone.c take_hole(); bench_malloc large-odd).  30 such blocks take at
 * most 11 pageblocks (10 full ones and the rest of one another block
 * started), every block writable whole and intact.
 */
static void test_large_packed(void)
{
	enum { N = 30, SIZE = (512 << 10) + 57 };
	struct ucma_arena *a = ucma_arena_peek();
	static unsigned char *p[N];
	uint32_t blocks[N];
	unsigned nblocks = 0, bad = 0;

	for (int i = 0; i < N; i++) {
		uint32_t pb;
		bool seen = false;

		p[i] = ucma_malloc(SIZE);
		if (!p[i])
			bail_out("malloc(%d): %s", SIZE, strerror(errno));
		memset(p[i], i + 1, SIZE);
		pb = ucma_addr_to_pfn(a, p[i]) >> UCMA_PAGEBLOCK_ORDER;
		for (unsigned k = 0; k < nblocks; k++)
			seen |= blocks[k] == pb;
		if (!seen)
			blocks[nblocks++] = pb;
	}
	for (int i = 0; i < N; i++)
		for (size_t j = 0; j < SIZE; j += 4096 / 4)
			bad += p[i][j] != (unsigned char)(i + 1) || p[i][SIZE - 1] != (unsigned char)(i + 1);
	ok(nblocks <= N / 3 + 1 && bad == 0,
	   "%d blocks of 512 KiB + 57 bytes in %u pageblocks (at most %d), every byte checked "
	   "intact (%u bad)", N, nblocks, N / 3 + 1, bad);
	for (int i = 0; i < N; i++)
		ucma_free(p[i]);
}

/*
 * Blocks of 1 MiB + 57 bytes (257 pages, what a Python bytearray of 1 MiB
 * asks for): no pageblock holds two, and one to a pageblock each made its
 * whole pageblock resident on huge pages.  Packed across pageblock
 * boundaries (zone.c take_across()), 30 of them touch at most 17
 * pageblocks (30 * 257 pages fill 15.06), and some do cross.  A crossing
 * block shrunk by realloc() to less than half stays where it is (its
 * tail given back), grown it keeps its bytes,
 * and every byte of the others stays intact throughout.
 */
static void test_large_across(void)
{
	enum { N = 30, SIZE = (1 << 20) + 57 };
	struct ucma_arena *a = ucma_arena_peek();
	static unsigned char *p[N];
	size_t size[N];
	uint32_t blocks[2 * N];
	unsigned nblocks = 0, bad = 0, crossing = 0;
	int x = -1;

	for (int i = 0; i < N; i++) {
		uint32_t pb[2];

		p[i] = ucma_malloc(SIZE);
		if (!p[i])
			bail_out("malloc(%d): %s", SIZE, strerror(errno));
		size[i] = SIZE;
		memset(p[i], i + 1, SIZE);
		pb[0] = ucma_addr_to_pfn(a, p[i]) >> UCMA_PAGEBLOCK_ORDER;
		pb[1] = ucma_addr_to_pfn(a, p[i] + SIZE - 1) >> UCMA_PAGEBLOCK_ORDER;
		/* (A kept part that still crosses is test_buddy's.) */
		if (pb[0] != pb[1]) {
			crossing++;
			x = i;
		}
		for (int e = 0; e < 2; e++) {
			bool seen = false;

			for (unsigned k = 0; k < nblocks; k++)
				seen |= blocks[k] == pb[e];
			if (!seen)
				blocks[nblocks++] = pb[e];
		}
	}
	ok(nblocks <= 17 && crossing > 0,
	   "%d blocks of 1 MiB + 57 bytes touch %u pageblocks (at most 17), %u of them cross a "
	   "boundary", N, nblocks, crossing);
	if (x >= 0) {
		unsigned char *q = ucma_realloc(p[x], 400 << 10);	/* trimmed in place */

		ok(q == p[x] && ucma_usable_size(q) == 400 << 10,
		   "a crossing block shrunk to 400 KiB stays in place, 400 KiB usable (%zu)",
		   ucma_usable_size(q));
		p[x] = q;
		size[x] = 400 << 10;
		q = ucma_realloc(p[x], (1 << 20) + 300000);
		if (!q)
			bail_out("realloc to grow: %s", strerror(errno));
		for (size_t j = 0; j < size[x]; j += 997)
			bad += q[j] != (unsigned char)(x + 1);
		memset(q, x + 1, (1 << 20) + 300000);
		p[x] = q;
		size[x] = (1 << 20) + 300000;
	}
	for (int i = 0; i < N; i++)
		for (size_t j = 0; j < size[i]; j += 4096 / 4)
			bad += p[i][j] != (unsigned char)(i + 1) ||
			       p[i][size[i] - 1] != (unsigned char)(i + 1);
	ok(bad == 0, "every block intact after the shrink and growth (%u bad)", bad);
	for (int i = 0; i < N; i++)
		ucma_free(p[i]);
}

/* Note the pageblocks [p, p + size) touches in @seen (a set of @n). */
static void note_pageblocks(const void *p, size_t size, uint32_t *seen, unsigned *n)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t lo = ucma_addr_to_pfn(a, p) >> UCMA_PAGEBLOCK_ORDER;
	uint32_t hi = ucma_addr_to_pfn(a, (const char *)p + size - 1) >> UCMA_PAGEBLOCK_ORDER;

	for (uint32_t b = lo; b <= hi; b++) {
		bool known = false;

		for (unsigned k = 0; k < *n; k++)
			known |= seen[k] == b;
		if (!known)
			seen[(*n)++] = b;
	}
}

/*
 * Rounds of large-odd's shape: 30 blocks of 1 MiB + 57 bytes, all freed
 * in the order allocated, then 30 of 512 KiB + 57 bytes, freed, twice.
 * The pageblocks freed come back last-freed first, from the top down;
 * packed across boundaries in both directions (zone.c take_across(),
 * at_end()), the later rounds use the pageblocks the first one did, and
 * all rounds together touch at most 17.  Runs that crossed only upwards,
 * into the next free pageblock above, took one pageblock each on the way
 * down, and the rounds spread over more and more (bench_malloc_ucma
 * large-odd 377 MiB peak against 305).
 */
static void test_large_rounds(void)
{
	enum { N = 30 };
	static const size_t sizes[] = { (1 << 20) + 57, (512 << 10) + 57 };
	static unsigned char *p[N];
	uint32_t seen[4 * N];
	unsigned n = 0, bad = 0;

	for (int r = 0; r < 2; r++) {
		for (int k = 0; k < 2; k++) {
			for (int i = 0; i < N; i++) {
				p[i] = ucma_malloc(sizes[k]);
				if (!p[i])
					bail_out("malloc(%zu): %s", sizes[k], strerror(errno));
				memset(p[i], i + 1, sizes[k]);
				note_pageblocks(p[i], sizes[k], seen, &n);
			}
			for (int i = 0; i < N; i++) {
				for (size_t j = 0; j < sizes[k]; j += 4096)
					bad += p[i][j] != (unsigned char)(i + 1);
				ucma_free(p[i]);
			}
		}
	}
	ok(n <= 17 && bad == 0,
	   "two rounds of 30 blocks of 1 MiB + 57 bytes, then of 512 KiB + 57 bytes, touch %u "
	   "pageblocks (at most 17), every block intact (%u bad)", n, bad);
}

/*
 * Blocks of 2 MiB + 57 bytes (513 pages) took two pageblocks each, the
 * second with one page in use, which transparent huge pages make resident
 * whole: twice the memory asked for.  Packed across boundaries, 12 of them
 * touch at most 14 pageblocks (12 * 513 pages fill 12.02), and every byte
 * of each stays intact.
 */
static void test_large_long(void)
{
	enum { N = 12, SIZE = (2 << 20) + 57 };
	static unsigned char *p[N];
	uint32_t seen[3 * N];
	unsigned n = 0, bad = 0;

	for (int i = 0; i < N; i++) {
		p[i] = ucma_malloc(SIZE);
		if (!p[i])
			bail_out("malloc(%d): %s", SIZE, strerror(errno));
		memset(p[i], i + 1, SIZE);
		note_pageblocks(p[i], SIZE, seen, &n);
	}
	for (int i = 0; i < N; i++) {
		for (size_t j = 0; j < SIZE; j += 4096)
			bad += p[i][j] != (unsigned char)(i + 1);
		bad += p[i][SIZE - 1] != (unsigned char)(i + 1);
		ucma_free(p[i]);
	}
	ok(n <= 14 && bad == 0,
	   "%d blocks of 2 MiB + 57 bytes touch %u pageblocks (at most 14), every block intact "
	   "(%u bad)", N, n, bad);
}

/*
 * Two buffers grown side by side by realloc(), an eighth more each step,
 * to 2 MiB (bench_malloc realloc-big's shape): how many of the steps
 * above 32 KiB moved a buffer; UINT_MAX when one lost its contents.
 */
static unsigned grow_side_by_side(unsigned *steps)
{
	unsigned moves = 0, bad = 0;
	unsigned char *p[2] = { NULL, NULL };
	size_t size[2] = { 0, 0 };

	*steps = 0;
	for (bool grew = true; grew;) {
		grew = false;
		for (int k = 0; k < 2; k++) {
			size_t next = size[k] + size[k] / 8 + 4096;
			unsigned char *q;

			if (size[k] >= ((size_t)2 << 20) - (64 << 10))
				continue;
			q = ucma_realloc(p[k], next);
			if (!q)
				return UINT_MAX;
			for (size_t i = 0; i < size[k]; i += 4096)
				bad += q[i] != (unsigned char)(k + 1);
			if (size[k] > 32768) {
				(*steps)++;
				moves += q != p[k];
			}
			memset(q + size[k], k + 1, next - size[k]);
			p[k] = q;
			size[k] = next;
			grew = true;
		}
	}
	ucma_free(p[0]);
	ucma_free(p[1]);
	return bad ? UINT_MAX : moves;
}

/*
 * The same in a fresh process (this program run again), whose zone has
 * the holes of nothing else: a block realloc() moves is placed with room
 * after it (UCMA_GFP_GROWS), so most steps grow in place.  Fitted into a
 * hole right behind the other buffer instead, 21 of the 60 steps moved,
 * against 8-11.  The child reports its count as its exit status.
 */
static void test_realloc_side_by_side(void)
{
	pid_t pid = fork();
	int status = 0;

	if (pid == 0) {
		setenv("UCMA_TEST_GROW_CHILD", "1", 1);
		execl("/proc/self/exe", "test_malloc", (char *)NULL);
		_exit(254);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) >= 250) {
		ok(0, "two buffers grown side by side by realloc in a child: status %#x", status);
		return;
	}
	ok(WEXITSTATUS(status) <= 15,
	   "two buffers grown side by side by realloc to 2 MiB in a fresh process: %d of 60 steps "
	   "moved (at most 15), contents kept", WEXITSTATUS(status));
}

/*
 * Many kept runs of many sizes: the cache keeps at most its budget (each
 * bound on its own: test_large_kept_bounds()), each malloc of a kept size
 * takes the newest run of that size, blocks of sizes it gave back come
 * from the zone again, every block stays intact, and trim gives
 * everything back.
 */
static void test_large_kept_sizes(void)
{
	enum { N = 96 };
	static void *p[N];
	uint64_t active0, cached;
	int bad = 0, same = 0;

	ucma_trim();
	active0 = stat_of("malloc_active");
	/* 9 to 16 pages, twelve of each, freed in one go */
	for (int i = 0; i < N; i++) {
		size_t sz = (size_t)(9 + i % 8) * UCMA_PAGE_SIZE - 100;

		p[i] = ucma_malloc(sz);
		if (!p[i])
			bad++;
		else
			memset(p[i], i, sz);
	}
	for (int i = 0; i < N; i++)
		ucma_free(p[i]);
	cached = stat_of("malloc_tcache_bytes");
	ok(bad == 0 && cached >= (uint64_t)UCMA_TLARGE_SLOTS * 9 * UCMA_PAGE_SIZE &&
	   cached <= (uint64_t)UCMA_TLARGE_SLOTS * 16 * UCMA_PAGE_SIZE + (1u << 20),
	   "96 freed runs of 8 sizes: the cache keeps its budget (%llu bytes cached)",
	   (unsigned long long)cached);
	/* the newest run of a size comes back first */
	for (int i = N - 1; i >= 0; i--) {
		size_t sz = (size_t)(9 + i % 8) * UCMA_PAGE_SIZE - 100;
		void *q = ucma_malloc(sz);

		if (!q || ucma_usable_size(q) != (size_t)(9 + i % 8) * UCMA_PAGE_SIZE)
			bad++;
		if (q == p[i])
			same++;
		p[i] = q;
		if (q)
			memset(q, i + 1, sz);
	}
	for (int i = 0; i < N; i++) {
		size_t sz = (size_t)(9 + i % 8) * UCMA_PAGE_SIZE - 100;
		const unsigned char *c = p[i];

		for (size_t k = 0; c && k < sz; k += 997)
			if (c[k] != (unsigned char)(i + 1))
				bad++;
	}
	ok(bad == 0 && same >= 24,
	   "mallocs of those sizes get exact runs, the last freed of each size back first (%d of %d, %d bad)",
	   same, N, bad);
	for (int i = 0; i < N; i++)
		ucma_free(p[i]);
	ucma_trim();
	ok(stat_of("malloc_active") <= active0 && stat_of("malloc_tcache_bytes") < 1u << 20,
	   "trim gives every kept run back (active %llu -> %llu)", (unsigned long long)active0,
	   (unsigned long long)stat_of("malloc_active"));
}

/*
 * Free @n runs, run i of (@first + i % @nsizes) pages, in one go, and
 * return how many bytes more the thread's cache holds than before
 * (UINT64_MAX when a malloc failed).  Trim gives them back after.
 */
static uint64_t kept_after_freeing(int n, unsigned first, unsigned nsizes)
{
	static void *p[128];
	uint64_t cached0, cached;
	bool failed = false;

	ucma_trim();
	cached0 = stat_of("malloc_tcache_bytes");
	for (int i = 0; i < n; i++) {
		p[i] = ucma_malloc((size_t)(first + (unsigned)i % nsizes) * UCMA_PAGE_SIZE - 100);
		failed |= !p[i];
	}
	for (int i = 0; i < n; i++)
		ucma_free(p[i]);
	cached = stat_of("malloc_tcache_bytes");
	ucma_trim();
	return failed ? UINT64_MAX : cached - cached0;
}

/*
 * Each bound of the cache of freed runs, where it alone binds.  Runs:
 * 96 runs of 9 to 14 pages (16 of each size, what one size may hold) are
 * 1104 pages, beyond the page bound too, but the run bound keeps 64 of
 * them, at most 64 * 14 = 896 pages; a cache bounded by pages alone would
 * keep about 1024.  Pages: 48 runs of 17 to 32 pages (3 of each) are
 * 1176 pages in fewer runs than the run bound: the page bound keeps at
 * most 1024 of them.
 */
static void test_large_kept_bounds(void)
{
	uint64_t runs = kept_after_freeing(96, 9, 6);
	uint64_t pages = kept_after_freeing(48, 17, 16);
	const uint64_t slack = 64 << 10;	/* a kept slab, parked blocks */

	_Static_assert(UCMA_TLARGE_SLOTS == 64 && UCMA_TLARGE_KEEP_PAGES == 1024 &&
		       UCMA_TLARGE_DEPTH >= 16, "the sizes below are chosen for these bounds");
	ok(runs != UINT64_MAX && runs >= (uint64_t)UCMA_TLARGE_SLOTS * 9 * UCMA_PAGE_SIZE &&
	   runs <= (uint64_t)UCMA_TLARGE_SLOTS * 14 * UCMA_PAGE_SIZE + slack,
	   "96 freed runs of 9-14 pages: the cache keeps %u runs (%llu bytes more cached)",
	   UCMA_TLARGE_SLOTS, (unsigned long long)runs);
	ok(pages != UINT64_MAX && pages >= (uint64_t)(UCMA_TLARGE_KEEP_PAGES - 64) * UCMA_PAGE_SIZE &&
	   pages <= (uint64_t)UCMA_TLARGE_KEEP_PAGES * UCMA_PAGE_SIZE + slack,
	   "48 freed runs of 17-32 pages: the cache keeps %u pages (%llu bytes more cached)",
	   UCMA_TLARGE_KEEP_PAGES, (unsigned long long)pages);
}

/* ------------------------------------------------------------------------ */
/* Threads freeing each other's blocks                                       */
/* ------------------------------------------------------------------------ */

#define NTHREADS 4
#define QLEN 256

struct item {
	void *p;
	size_t size;
	uint64_t seed;
};

struct queue {
	pthread_mutex_t lock;
	struct item items[QLEN];
	int head, tail, count;
};

static struct queue queues[NTHREADS];
static int thread_errors;
static int thread_iters = 10000;
static int threads_done;

static bool q_try_push(struct queue *q, struct item it)
{
	bool done = false;

	pthread_mutex_lock(&q->lock);
	if (q->count < QLEN) {
		q->items[q->tail] = it;
		q->tail = (q->tail + 1) % QLEN;
		q->count++;
		done = true;
	}
	pthread_mutex_unlock(&q->lock);
	return done;
}

static bool q_pop(struct queue *q, struct item *it)
{
	bool got = false;

	pthread_mutex_lock(&q->lock);
	if (q->count) {
		*it = q->items[q->head];
		q->head = (q->head + 1) % QLEN;
		q->count--;
		got = true;
	}
	pthread_mutex_unlock(&q->lock);
	return got;
}

static void check_free(struct item *it)
{
	if (!tu_check(it->p, it->size, it->seed) || ucma_usable_size(it->p) < it->size)
		__atomic_fetch_add(&thread_errors, 1, __ATOMIC_RELAXED);
	ucma_free(it->p);
}

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint64_t rng = (uint64_t)id * 1234567 + 1;
	struct queue *out = &queues[(id + 1) % NTHREADS], *in = &queues[id];
	void *local[64] = { 0 };
	size_t lsize[64];
	struct item it, got;

	for (int i = 0; i < thread_iters; i++) {
		uint64_t r = tu_rand(&rng);
		size_t size = r % 64 == 0 ? 32768 + r % 40000 : 1 + r % 1024;
		unsigned k = (unsigned)(r >> 40) % 64;

		/* own blocks: allocate, stamp, check, free */
		if (local[k]) {
			if (!tu_check(local[k], lsize[k], (uint64_t)k))
				__atomic_fetch_add(&thread_errors, 1, __ATOMIC_RELAXED);
			ucma_free(local[k]);
		}
		lsize[k] = size / 4 + 1;
		local[k] = ucma_malloc(lsize[k]);
		tu_fill(local[k], lsize[k], (uint64_t)k);

		/* a block for the next thread to check and free */
		it.size = size;
		it.seed = r;
		it.p = ucma_malloc(size);
		tu_fill(it.p, size, r);
		/* never wait on a full queue without draining our own:
		 * the ring would deadlock */
		while (!q_try_push(out, it)) {
			while (q_pop(in, &got))
				check_free(&got);
			sched_yield();
		}
		while (q_pop(in, &got))
			check_free(&got);
	}
	for (int k = 0; k < 64; k++)
		ucma_free(local[k]);
	/* keep draining until every thread stopped pushing */
	__atomic_fetch_add(&threads_done, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&threads_done, __ATOMIC_ACQUIRE) < NTHREADS) {
		while (q_pop(in, &got))
			check_free(&got);
		sched_yield();
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[NTHREADS];
	struct ucma_malloc_info mi0, mi1;
	struct item it;

	ucma_malloc_info(&mi0);
	for (int i = 0; i < NTHREADS; i++)
		pthread_mutex_init(&queues[i].lock, NULL);
	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < NTHREADS; i++)
		while (q_pop(&queues[i], &it))
			check_free(&it);
	ok(thread_errors == 0, "%d threads x %d blocks freed by another thread: all stamps intact",
	   NTHREADS, thread_iters);
	ucma_malloc_info(&mi1);
	ok(mi1.allocated == mi0.allocated,
	   "after the threads exited every block is counted free (%zu -> %zu)", mi0.allocated,
	   mi1.allocated);
	ok(mi1.nmalloc - mi0.nmalloc == mi1.nfree - mi0.nfree,
	   "exited threads' counters are kept (nmalloc %llu, nfree %llu)",
	   (unsigned long long)(mi1.nmalloc - mi0.nmalloc),
	   (unsigned long long)(mi1.nfree - mi0.nfree));
}

/* ------------------------------------------------------------------------ */
/* Blocks freed by other threads make room where they came from               */
/* ------------------------------------------------------------------------ */

#define REUSE_N    20000
#define REUSE_SIZE 48

static void *reuse_blocks[REUSE_N];

static void *free_all_blocks(void *arg)
{
	(void)arg;
	for (int i = 0; i < REUSE_N; i++)
		ucma_free(reuse_blocks[i]);
	return NULL;
}

static void *alloc_all_blocks(void *arg)
{
	(void)arg;
	for (int i = 0; i < REUSE_N; i++) {
		reuse_blocks[i] = ucma_malloc(REUSE_SIZE);
		tu_fill(reuse_blocks[i], REUSE_SIZE, (uint64_t)i);
	}
	return NULL;
}

static int check_all_blocks(void)
{
	int bad = 0;

	for (int i = 0; i < REUSE_N; i++)
		if (!tu_check(reuse_blocks[i], REUSE_SIZE, (uint64_t)i))
			bad++;
	return bad;
}

static void run_thread(void *(*fn)(void *))
{
	pthread_t t;

	pthread_create(&t, NULL, fn, NULL);
	pthread_join(t, NULL);
}

/*
 * The slabs of a thread fill up, another thread frees every block, and the
 * owner allocates as many again: the room the remote frees made must be
 * found (the owner merges them), not new slabs taken.  Then the same with
 * an owner that exits before its blocks are freed: its slabs go central,
 * and the next thread adopts them.
 */
static void test_remote_reuse(void)
{
	uint64_t active0, active1, active2;
	int bad;

	ucma_trim();
	alloc_all_blocks(NULL);
	active0 = stat_of("malloc_active");
	run_thread(free_all_blocks);
	alloc_all_blocks(NULL);
	bad = check_all_blocks();
	active1 = stat_of("malloc_active");
	ok(bad == 0 && active1 <= active0 + (256u << 10),
	   "blocks freed by another thread are reused by their owner (slab bytes %llu -> %llu, "
	   "%d stamps bad)", (unsigned long long)active0, (unsigned long long)active1, bad);
	free_all_blocks(NULL);

	ucma_trim();
	run_thread(alloc_all_blocks);
	active0 = stat_of("malloc_active");
	free_all_blocks(NULL);	/* their owner is gone */
	run_thread(alloc_all_blocks);
	active2 = stat_of("malloc_active");
	bad = check_all_blocks();
	ok(bad == 0 && active2 <= active0 + (256u << 10),
	   "blocks of an exited thread freed elsewhere are reused by the next thread (slab bytes "
	   "%llu -> %llu, %d stamps bad)", (unsigned long long)active0, (unsigned long long)active2,
	   bad);
	free_all_blocks(NULL);
}

/* ------------------------------------------------------------------------ */
/* fork with other threads running                                           */
/* ------------------------------------------------------------------------ */

static bool churn_stop;	/* atomic */

static void *churn(void *arg)
{
	uint64_t rng = (uint64_t)(intptr_t)arg;
	void *slot[32] = { 0 };

	for (unsigned i = 0; !__atomic_load_n(&churn_stop, __ATOMIC_RELAXED); i++) {
		unsigned k = (unsigned)(tu_rand(&rng) % 32);

		/* leave the forked children some of the two CPUs */
		if (i % 64 == 0)
			usleep(100);

		ucma_free(slot[k]);
		slot[k] = ucma_malloc(tu_rand(&rng) % 70000);
	}
	for (int k = 0; k < 32; k++)
		ucma_free(slot[k]);
	return NULL;
}

static void *child_thread(void *arg)
{
	void *p[100];

	for (int i = 0; i < 100; i++)
		p[i] = ucma_malloc((size_t)i * 100 + 1);
	for (int i = 0; i < 100; i++)
		ucma_free(p[i]);
	return arg;
}

static void test_fork(void)
{
	pthread_t t[3];
	int good = 0, rounds = 10;

	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, churn, (void *)(intptr_t)(i + 1));
	for (int r = 0; r < rounds; r++) {
		pid_t pid;
		int status = 0;

		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			pthread_t ct;
			void *p[1000];

			for (int i = 0; i < 1000; i++) {
				p[i] = ucma_malloc((size_t)(i % 50) * 70 + 1);
				tu_fill(p[i], (size_t)(i % 50) * 70 + 1, (uint64_t)i);
			}
			for (int i = 0; i < 1000; i++) {
				if (!tu_check(p[i], (size_t)(i % 50) * 70 + 1, (uint64_t)i))
					_exit(2);
				ucma_free(p[i]);
			}
#ifndef UCMA_TSAN	/* TSan cannot start threads after such a fork */
			if (pthread_create(&ct, NULL, child_thread, NULL) != 0 ||
			    pthread_join(ct, NULL) != 0)
				_exit(3);
#else
			(void)ct;
			child_thread(NULL);
#endif
			ucma_trim();
			_exit(0);
		}
		if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		    WEXITSTATUS(status) == 0)
			good++;
		else if (pid < 0)
			diag("round %d: fork: %s", r, strerror(errno));
		else	/* 2: data lost, 3: no thread; a signal: died */
			diag("round %d: the child %s %d", r,
			     WIFSIGNALED(status) ? "died of signal" : "exited with",
			     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	}
	__atomic_store_n(&churn_stop, true, __ATOMIC_RELAXED);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	ok(good == rounds, "fork while 3 threads allocate: %d of %d children could malloc, "
	   "free and start a thread", good, rounds);
}

/* A thread that freed small blocks into its cache and sleeps there. */
static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_cond = PTHREAD_COND_INITIALIZER;
static int parked_state;	/* 1: its frees are parked; 2: may end */

static void *parking_thread(void *arg)
{
	void *p[100];

	for (int i = 0; i < 100; i++)
		p[i] = ucma_malloc(64);
	for (int i = 0; i < 100; i++)
		ucma_free(p[i]);
	pthread_mutex_lock(&parked_lock);
	parked_state = 1;
	pthread_cond_broadcast(&parked_cond);
	while (parked_state != 2)
		pthread_cond_wait(&parked_cond, &parked_lock);
	pthread_mutex_unlock(&parked_lock);
	return arg;
}

/*
 * The child of a fork gives the blocks parked in the caches of threads it
 * does not have back to their slabs: those were frees all the same, so
 * malloc_nmalloc - malloc_nfree is the same in the child as in the parent
 * at the fork (it used to grow by the parked blocks).
 */
static void test_fork_counts(void)
{
	uint64_t live_parent, live_child = 0;
	pthread_t t;
	int pipefd[2], status = -1;
	pid_t pid;

	if (pipe(pipefd) != 0 || pthread_create(&t, NULL, parking_thread, NULL) != 0) {
		ok(0, "set-up: %s", strerror(errno));
		return;
	}
	pthread_mutex_lock(&parked_lock);
	while (parked_state != 1)
		pthread_cond_wait(&parked_cond, &parked_lock);
	pthread_mutex_unlock(&parked_lock);
	live_parent = stat_of("malloc_nmalloc") - stat_of("malloc_nfree");
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		uint64_t live = stat_of("malloc_nmalloc") - stat_of("malloc_nfree");

		_exit(write(pipefd[1], &live, sizeof(live)) == (ssize_t)sizeof(live) ? 0 : 1);
	}
	if (pid > 0) {
		if (read(pipefd[0], &live_child, sizeof(live_child)) != (ssize_t)sizeof(live_child))
			live_child = UINT64_MAX;
		waitpid(pid, &status, 0);
	}
	close(pipefd[0]);
	close(pipefd[1]);
	pthread_mutex_lock(&parked_lock);
	parked_state = 2;
	pthread_cond_broadcast(&parked_cond);
	pthread_mutex_unlock(&parked_lock);
	pthread_join(t, NULL);
	ok(pid > 0 && status == 0 && live_child == live_parent,
	   "a fork's child counts the frees parked in other threads' caches: live blocks "
	   "%llu in the child, %llu in the parent at the fork",
	   (unsigned long long)live_child, (unsigned long long)live_parent);
}

/* Resident pages of the NORMAL zone (mincore). */
static size_t normal_resident(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	const struct ucma_zone *z = &a->zones[UCMA_ZONE_NORMAL];
	size_t n = z->end_pfn - z->start_pfn, res = 0;
	unsigned char *vec = malloc(n);

	if (!vec || mincore(ucma_pfn_to_addr(a, z->start_pfn), n << UCMA_PAGE_SHIFT, vec) != 0)
		bail_out("mincore of the NORMAL zone: %s", strerror(errno));
	for (size_t i = 0; i < n; i++)
		res += vec[i] & 1;
	free(vec);
	return res;
}

/*
 * Move to the next CPU of @allowed after the one this thread is on; false
 * when there is no other (one CPU allowed) or the move is refused.
 */
static bool move_to_next_cpu(const cpu_set_t *allowed)
{
	int cpu = sched_getcpu();
	cpu_set_t one;

	if (CPU_COUNT(allowed) < 2 || cpu < 0)
		return false;
	for (int i = 1; i < CPU_SETSIZE; i++) {
		int next = (cpu + i) % CPU_SETSIZE;

		if (CPU_ISSET(next, allowed)) {
			CPU_ZERO(&one);
			CPU_SET(next, &one);
			return sched_setaffinity(0, sizeof(one), &one) == 0;
		}
	}
	return false;
}

/*
 * Eight sizes one after the other, as glibc-bench's "simple" goes through
 * them: 1600 blocks of a size allocated, written and freed, three times,
 * then the next size.  Each size's slabs have a length of their own (1 to
 * 16 pages), and the sizes before keep some wholly free ones for reuse.
 * The slabs of a new size must come from the pages the earlier sizes
 * freed, not from fresh ones, and so must the slabs of the next round of
 * a size: on one CPU the zone's resident pages grow by 214 here, where
 * the largest size needs 100 (1600 x 256 bytes); with the slabs of each
 * size kept apart, by 351.
 *
 * The thread moves to another CPU before each round and halfway through
 * its frees, as the scheduler moves a thread on a busy machine: the runs
 * it freed wait on the lists of the CPU it left, and a slab made on the
 * new one must still find them (pcp.c, slab.c).  Without that the zone
 * grew by 289 pages here (and by 266 once in a test run on a loaded
 * machine, where the scheduler moved it); with it, by 202.  Run first,
 * while the zone is small enough to be on plain pages, where mincore()
 * counts what was touched page by page.
 */
static void test_sizes_in_turn(void)
{
	static const size_t sizes[] = { 16, 32, 48, 64, 96, 128, 192, 256 };
	enum { N = 1600 };
	static void *p[N];
	size_t before, after;
	unsigned moves = 0;
	cpu_set_t saved;
	bool can_move = sched_getaffinity(0, sizeof(saved), &saved) == 0;

	ucma_free(ucma_malloc(16));
	before = normal_resident();
	for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (int round = 0; round < 3; round++) {
			if (can_move && move_to_next_cpu(&saved))
				moves++;
			for (int i = 0; i < N; i++) {
				p[i] = ucma_malloc(sizes[s]);
				if (!p[i])
					bail_out("malloc(%zu): %s", sizes[s], strerror(errno));
				memset(p[i], i, sizes[s]);
			}
			for (int i = 0; i < N; i++) {
				if (i == N / 2 && can_move && move_to_next_cpu(&saved))
					moves++;
				ucma_free(p[i]);
			}
		}
	after = normal_resident();
	if (can_move)
		sched_setaffinity(0, sizeof(saved), &saved);
	if (moves == 0)
		diag("eight sizes in turn: the thread could not move between CPUs (%d allowed)",
		     can_move ? CPU_COUNT(&saved) : 0);
	ok(after - before <= 250, "eight sizes in turn, %u moves between CPUs: the zone's resident "
				  "pages grow by %zu (at most 250; the largest size needs 100)",
	   moves, after - before);
}

int main(void)
{
	if (getenv("UCMA_TEST_GROW_CHILD")) {
		unsigned steps, moves = grow_side_by_side(&steps);

		_exit(moves == UINT_MAX ? 253 : steps != 60 ? 252 : (int)moves);
	}
	if (getenv("UCMA_TEST_LONG"))
		thread_iters = 400000;
	plan_no_plan();
	test_sizes_in_turn();
	/* Before anything takes 16 MiB of the zone. */
	test_realloc_thp_switch();
	test_sizes();
	test_alignment();
	test_aligned_slack();
	test_realloc();
	test_realloc_large_in_place();
	test_realloc_fresh_tail();
	test_realloc_threads();
	test_calloc();
	test_owns();
	test_counters();
	test_trim();
	test_kept_empties();
	test_large_kept();
	test_large_kept_sizes();
	test_large_kept_bounds();
	test_large_packed();
	test_large_across();
	test_large_rounds();
	test_large_long();
	test_realloc_side_by_side();
	test_threads();
	test_remote_reuse();
	test_fork();
	test_fork_counts();
	return done();
}
