/*
 * test_malloc_overflow.c - when the NORMAL zone is exhausted, the malloc
 * family goes on with plain mappings outside the arena: small blocks from
 * overflow chunks, large ones in mappings of their own.  A tiny arena
 * (16 MiB, 4 MiB of it CMA) is configured before the first malloc; the
 * test then allocates far more than NORMAL holds, checks the overflow
 * counters, ownership, usable sizes and alignment, and verifies every
 * byte written.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	if (ucma_stat(name, &v) != 0)
		bail_out("ucma_stat(%s): %s", name, strerror(errno));
	return v;
}

enum { NSMALL = 40000, NLARGE = 64 };

struct blk {
	char *p;
	size_t size;
};

static struct blk small[NSMALL], large[NLARGE];

static void *other_thread(void *arg)
{
	int *bad = arg;

	/* A second thread frees half of the small blocks (overflow remote
	 * frees) and allocates its own. */
	for (int i = 0; i < NSMALL; i += 2) {
		if (!tu_check(small[i].p, small[i].size, (uint64_t)i))
			(*bad)++;
		ucma_free(small[i].p);
		small[i].p = NULL;
	}
	for (int i = 0; i < 1000; i++) {
		void *p = ucma_malloc(3000);

		memset(p, 1, 3000);
		ucma_free(p);
	}
	return NULL;
}

int main(void)
{
	struct ucma_config cfg = { .arena_size = 16u << 20, .cma_size = 4u << 20 };
	struct ucma_malloc_info mi;
	uint64_t ovf0;
	int bad = 0, notowned = 0;
	pthread_t t;

	plan(12);
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init(16M arena): %s", strerror(errno));
	ovf0 = stat_of("overflow_alloc");

	/* About 24 MiB of small blocks and 64 MiB of large ones: several
	 * times the 12 MiB of NORMAL. */
	for (int i = 0; i < NSMALL; i++) {
		small[i].size = 16 + (size_t)(i % 97) * 13;
		small[i].p = ucma_malloc(small[i].size);
		if (!small[i].p)
			bail_out("small malloc %d failed", i);
		tu_fill(small[i].p, small[i].size, (uint64_t)i);
	}
	for (int i = 0; i < NLARGE; i++) {
		large[i].size = (size_t)(i + 1) * 33000;
		large[i].p = ucma_malloc(large[i].size);
		if (!large[i].p)
			bail_out("large malloc %d failed", i);
		tu_fill(large[i].p, large[i].size, (uint64_t)i + 1000000);
	}
	ok(stat_of("overflow_alloc") > ovf0, "overflow_alloc counted %llu overflow allocations",
	   (unsigned long long)(stat_of("overflow_alloc") - ovf0));
	ucma_malloc_info(&mi);
	ok(mi.overflow > 0, "malloc_info reports %zu bytes mapped outside the arena",
	   mi.overflow);

	for (int i = 0; i < NSMALL; i++) {
		if (!ucma_owns(small[i].p))
			notowned++;
		if (ucma_usable_size(small[i].p) < small[i].size)
			bad++;
	}
	for (int i = 0; i < NLARGE; i++) {
		if (!ucma_owns(large[i].p))
			notowned++;
		if (ucma_usable_size(large[i].p) < large[i].size)
			bad++;
	}
	ok(notowned == 0, "ucma_owns() knows every block, overflow ones too");
	ok(bad == 0, "usable sizes cover the requests");

	bad = 0;
	for (int i = 0; i < NLARGE; i++)
		if (!tu_check(large[i].p, large[i].size, (uint64_t)i + 1000000))
			bad++;
	ok(bad == 0, "every large block verifies");

	/* Aligned and zeroed requests in overflow. */
	char *al = ucma_aligned_alloc((size_t)4 << 20, 100000);
	unsigned char *z = ucma_calloc(1, 5 << 20);
	int nz = 0;

	ok(al && !((uintptr_t)al & ((4u << 20) - 1)), "4 MiB-aligned block in overflow");
	for (size_t k = 0; z && k < (5u << 20); k += 512)
		nz += z[k] != 0;
	ok(z && nz == 0, "calloc in overflow is zeroed");
	ucma_free(al);
	ucma_free(z);

	/* Grow a block across the arena boundary. */
	char *r = ucma_malloc(1000);

	tu_fill(r, 1000, 42);
	r = ucma_realloc(r, 9u << 20);
	ok(r && tu_check(r, 1000, 42), "realloc into an overflow mapping keeps the contents");
	ucma_free(r);

	bad = 0;
	pthread_create(&t, NULL, other_thread, &bad);
	pthread_join(t, NULL);
	for (int i = 1; i < NSMALL; i += 2) {
		if (!tu_check(small[i].p, small[i].size, (uint64_t)i))
			bad++;
		ucma_free(small[i].p);
	}
	ok(bad == 0, "every small block verifies, freed by two threads");
	for (int i = 0; i < NLARGE; i++)
		ucma_free(large[i].p);
	ucma_trim();
	ok(stat_of("overflow_free") > 0, "overflow memory went back (overflow_free %llu)",
	   (unsigned long long)stat_of("overflow_free"));
	ucma_malloc_info(&mi);
	ok(mi.allocated == 0, "nothing is counted allocated at the end (%zu)", mi.allocated);

	/* The arena is usable again after the overflow was given back. */
	void *again = ucma_malloc(100000);

	ok(again && ucma_owns(again), "malloc works after the overflow was released");
	ucma_free(again);
	return done();
}
