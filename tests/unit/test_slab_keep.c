/*
 * test_slab_keep.c - wholly free slabs kept by the central bins (slab.c):
 * a thread that frees a batch of small blocks and allocates as many
 * again reuses its slabs (no new pages), every byte of both batches
 * intact; the bytes kept stay within the budget (1/32 of the NORMAL zone
 * here); ucma_trim() gives them all back; the decay gives back all but
 * each bin's few after a decay interval; and when the NORMAL zone has no
 * run left, the kept slabs make room before anything goes outside the
 * arena: for a large block, and for a slab of another size class; and
 * slabs outside the arena, which could not decay, are kept only as each
 * bin's few.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

#define ARENA  (68u << 20)
#define CMA    (4u << 20)
#define NORMAL (ARENA - CMA)
#define BUDGET (NORMAL / 32)	/* below slab.c's 8 MiB: the zone's share */

enum { NBLK = 100000, SMALL = 48, OTHER = 112 };

static void *blk[NBLK];

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	if (ucma_stat(name, &v) != 0)
		bail_out("ucma_stat(%s): %s", name, strerror(errno));
	return v;
}

static size_t kept(void)
{
	return (size_t)stat_of("malloc_slab_kept_bytes");
}

static bool in_arena(const void *p)
{
	return ucma_addr_in_arena(ucma_arena_peek(), p);
}

/* 1 MiB blocks into @fill[*@nfill...] until one is outside the arena:
 * NORMAL then has less than a megabyte of room. */
static void fill_normal(void **fill, int *nfill)
{
	for (;;) {
		if (*nfill == 128)
			bail_out("128 MiB of blocks and still inside the arena");
		fill[*nfill] = ucma_malloc(1u << 20);
		if (!fill[*nfill])
			bail_out("filling NORMAL: %s", strerror(errno));
		if (!in_arena(fill[(*nfill)++]))
			break;
	}
}

/* @n blocks of @size bytes, each stamped with its index (+ @seed). */
static void alloc_batch(int n, size_t size, uint64_t seed)
{
	for (int i = 0; i < n; i++) {
		blk[i] = ucma_malloc(size);
		if (!blk[i])
			bail_out("malloc(%zu) #%d: %s", size, i, strerror(errno));
		tu_fill(blk[i], size, seed + (uint64_t)i);
	}
}

/* Check and free them: the number of blocks whose bytes changed. */
static int free_batch(int n, size_t size, uint64_t seed)
{
	int bad = 0;

	for (int i = 0; i < n; i++) {
		bad += !tu_check(blk[i], size, seed + (uint64_t)i);
		ucma_free(blk[i]);
	}
	return bad;
}

/* Free the pages of a 1 MiB block every 50 ms (the NORMAL zone's purge
 * ticks the decay on page frees) until at most @floor bytes are kept, for
 * two seconds at most.  Returns the bytes still kept. */
static size_t tick_until_decayed(size_t floor)
{
	for (int k = 0; k < 40 && kept() > floor; k++) {
		void *p;

		usleep(50 * 1000);
		p = ucma_malloc(1u << 20);
		if (!p)
			bail_out("malloc(1 MiB): %s", strerror(errno));
		ucma_free(p);
	}
	return kept();
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = ARENA,
		.cma_size = CMA,
		.cma_policy = UCMA_CMA_RESERVED,
	};
	uint64_t pages0, pages1;
	size_t k, k1, free_bytes, in_other = 0, slab_bytes_other;
	static void *fill[128];
	int nfill = 0, n, bad, outside;

	tu_clear_env();
	plan(13);
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	/* No decay but in the decay case (0 turns it off: nothing decays by
	 * accident, and the zone's first tick is the case's own). */
	ucma_opt.decay_ms = 0;

	/* 1. A batch of 20,000 blocks (about 80 slabs of 12 KiB), freed and
	 * allocated again: the slabs are the same ones. */
	alloc_batch(20000, SMALL, 1);
	bad = free_batch(20000, SMALL, 1);
	k = kept();
	ok(k > (512u << 10) && k <= BUDGET, "20,000 blocks freed: %zu KiB of slabs kept (budget %u KiB)",
	   k >> 10, BUDGET >> 10);
	pages0 = stat_of("page_alloc");
	alloc_batch(20000, SMALL, 2);
	pages1 = stat_of("page_alloc");
	ok(pages1 - pages0 <= 2, "the same batch again took %llu page runs (the kept slabs, not new ones)",
	   (unsigned long long)(pages1 - pages0));
	bad += free_batch(20000, SMALL, 2);
	ok(bad == 0, "every byte of both batches intact (%d blocks wrong)", bad);

	/* 2. A batch five times the budget: no more than the budget kept. */
	alloc_batch(NBLK, SMALL, 3);
	bad = free_batch(NBLK, SMALL, 3);
	k = kept();
	ok(k <= BUDGET && k >= BUDGET / 2, "100,000 blocks freed: %zu KiB kept, within the budget of %u KiB",
	   k >> 10, BUDGET >> 10);
	ok(bad == 0, "every byte intact (%d blocks wrong)", bad);

	/* 3. ucma_trim() */
	ucma_trim();
	ok(kept() == 0, "ucma_trim() gives every kept slab back (%zu bytes kept)", kept());

	/* 4. The decay: all but the bin's few go back. */
	alloc_batch(20000, SMALL, 4);
	bad = free_batch(20000, SMALL, 4);
	k = kept();
	ucma_opt.decay_ms = 100;
	k1 = tick_until_decayed(64u << 10);
	ok(k > (512u << 10) && k1 <= (64u << 10),
	   "%zu KiB kept, %zu KiB after the decay interval (the bin's few)", k >> 10, k1 >> 10);
	ok(bad == 0, "every byte intact (%d blocks wrong)", bad);
	ucma_opt.decay_ms = 0;

	/* 5. No run left in NORMAL: the kept slabs go first, a large
	 * block stays in the arena while they can make room. */
	alloc_batch(20000, SMALL, 5);
	bad = free_batch(20000, SMALL, 5);
	k = kept();
	fill_normal(fill, &nfill);
	ok(k > 0 && kept() == 0,
	   "NORMAL filled with 1 MiB blocks: the %zu KiB of kept slabs went back before a "
	   "block left the arena (%d blocks)", k >> 10, nfill);
	/* Two blocks' room made again. */
	ucma_free(fill[0]);
	ucma_free(fill[1]);
	fill[0] = fill[1] = NULL;

	/* 6. Slabs of one class kept, then another class wants the pages. */
	alloc_batch(20000, SMALL, 6);
	bad = free_batch(20000, SMALL, 6);
	k = kept();
	free_bytes = (size_t)stat_of("nr_free_pages_normal") << 12;
	slab_bytes_other = 7u << 12;	/* 256 blocks of 112 bytes: 7 pages */
	/* Blocks of 112 bytes until one is outside the arena. */
	for (n = 0; n < NBLK;) {
		blk[n] = ucma_malloc(OTHER);
		if (!blk[n])
			bail_out("malloc(%d) #%d: %s", OTHER, n, strerror(errno));
		tu_fill(blk[n], OTHER, 7 + (uint64_t)n);
		if (!in_arena(blk[n++]))
			break;
		in_other++;
	}
	ok(k > 0 && in_other * OTHER > free_bytes + slab_bytes_other,
	   "blocks of another size: %zu in the arena before the first outside, %zu KiB, more "
	   "than the %zu KiB free beside %zu KiB of kept slabs", in_other,
	   in_other * OTHER >> 10, free_bytes >> 10, k >> 10);
	bad += free_batch(n, OTHER, 7);
	ok(bad == 0, "every byte intact (%d blocks wrong)", bad);

	/* 7. NORMAL full again: 20,000 blocks outside the arena, freed.  Of
	 * their slabs the bin keeps its few (2 slabs of at most 8 pages):
	 * one outside the arena never decays.  Case 6 gave its blocks back,
	 * and the room that left varied by a megabyte from run to run
	 * (3148 or 4172 KiB free before its blocks); once it held all but
	 * 18,080 of these 100,000 blocks.  So NORMAL is filled with 1 MiB
	 * blocks first, as in case 5: less than a megabyte of room stays.
	 * Then ucma_trim(): the slabs of case 6's class that this thread
	 * keeps would otherwise go to the central bins when the frees below
	 * make it keep others, and count there beside the bin's few. */
	fill_normal(fill, &nfill);
	ucma_trim();
	for (n = 0, outside = 0; outside < 20000;) {
		if (n == NBLK)
			bail_out("%d blocks and only %d outside the arena", n, outside);
		blk[n] = ucma_malloc(SMALL);
		if (!blk[n])
			bail_out("malloc(%d) #%d: %s", SMALL, n, strerror(errno));
		tu_fill(blk[n], SMALL, 8 + (uint64_t)n);
		outside += !in_arena(blk[n++]);
	}
	k = kept();
	bad = 0;
	for (int i = n; i-- > 0;) {
		if (in_arena(blk[i]))
			continue;
		bad += !tu_check(blk[i], SMALL, 8 + (uint64_t)i);
		ucma_free(blk[i]);
		blk[i] = NULL;
	}
	k1 = kept();
	ok(k1 <= k + (2u * 8u << 12) && bad == 0,
	   "20,000 blocks outside the arena freed: %zu KiB kept beside the %zu KiB before (at "
	   "most the bin's few slabs), every byte intact (%d blocks wrong)",
	   k1 >> 10, k >> 10, bad);
	for (int i = 0; i < n; i++)
		if (blk[i]) {
			bad += !tu_check(blk[i], SMALL, 8 + (uint64_t)i);
			ucma_free(blk[i]);
		}
	for (int i = 0; i < nfill; i++)
		ucma_free(fill[i]);
	ucma_trim();
	ok(kept() == 0 && stat_of("malloc_allocated") == 0,
	   "all freed and trimmed: nothing kept, nothing allocated");
	return done();
}
