/*
 * test_cma.c - contiguous allocations and lending (the ZONE_CMA idea).
 *
 * A 256 MiB arena with a 128 MiB CMA area is filled beyond 90% with
 * checksummed movable objects of 4 KiB to 256 KiB (so the CMA area is
 * lent); a random quarter is freed; then ucma_alloc() of 64 MiB must
 * succeed by migrating live objects out of its run, every remaining object
 * must verify, and after ucma_release() the space is lent again.  With the
 * reserved policy the same fill stops near the NORMAL zone's size.  Objects
 * of odd sizes arrive whole when moved.  Pinned objects are never moved;
 * bad input gets an errno.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "tap.h"
#include "testutil.h"

#include <errno.h>
#include <string.h>

#define ARENA (256u << 20)
#define CMA   (128u << 20)
#define MAXOBJ 20000

static struct ucma_arena *a;
static ucma_handle_t h[MAXOBJ];
static uint32_t sizes[MAXOBJ];
static int nobj;

/* Fill with movable objects until allocation fails; returns bytes. */
static uint64_t fill(uint64_t *seed)
{
	uint64_t bytes = 0;

	nobj = 0;
	while (nobj < MAXOBJ) {
		uint32_t sz = 4096u << (tu_rand(seed) % 7);	/* 4 KiB .. 256 KiB */
		ucma_handle_t x = ucma_halloc(sz, 0);
		void *p;

		if (!x)
			break;
		p = ucma_pin(x, 0);
		tu_fill(p, 64, (uint64_t)nobj);	/* stamp head and tail */
		tu_fill((char *)p + sz - 64, 64, (uint64_t)nobj + 7);
		ucma_unpin(x);
		h[nobj] = x;
		sizes[nobj++] = sz;
		bytes += sz;
	}
	return bytes;
}

static int verify_all(void)
{
	int bad = 0;

	ucma_read_lock();
	for (int i = 0; i < nobj; i++) {
		const char *p;

		if (!h[i])
			continue;
		p = ucma_deref(h[i]);
		if (!p || !tu_check(p, 64, (uint64_t)i) ||
		    !tu_check(p + sizes[i] - 64, 64, (uint64_t)i + 7))
			bad++;
	}
	ucma_read_unlock();
	return bad;
}

static int verify_full(void)
{
	int bad = 0;

	ucma_read_lock();
	for (int i = 0; i < nobj; i++) {
		const void *p = ucma_deref(h[i]);

		if (!p || !tu_check(p, sizes[i], (uint64_t)i))
			bad++;
	}
	ucma_read_unlock();
	return bad;
}

static void free_all(void)
{
	for (int i = 0; i < nobj; i++)
		if (h[i])
			ucma_hfree(h[i]);
	nobj = 0;
	ucma_defer_drain();
}

static void test_lending(void)
{
	uint64_t seed = 42, bytes, mig0, mig1;
	void *buf;
	int freed = 0;

	bytes = fill(&seed);
	ok(bytes > ARENA / 10 * 9, "movable objects fill %.1f%% of the whole arena (CMA lent)",
	   100.0 * (double)bytes / ARENA);
	for (int i = 0; i < nobj; i++) {
		if (tu_rand(&seed) % 4 == 0) {
			ucma_hfree(h[i]);
			h[i] = 0;
			freed++;
		}
	}
	ucma_defer_drain();
	diag("%d objects, %d freed", nobj, freed);
	ucma_stat("pgmigrate_success", &mig0);
	buf = ucma_alloc(64u << 20, 0, UCMA_ALLOC_ZERO);
	ucma_stat("pgmigrate_success", &mig1);
	ok(buf != NULL, "ucma_alloc(64 MiB) succeeds in the fragmented arena (%s)",
	   buf ? "ok" : strerror(errno));
	ok(mig1 > mig0, "by migrating %llu live objects out of its run",
	   (unsigned long long)(mig1 - mig0));
	ok(verify_all() == 0, "every remaining object still verifies");
	if (buf) {
		uint32_t pfn = ucma_addr_to_pfn(a, buf);
		const unsigned char *b = buf;
		size_t nonzero = 0;

		ok(pfn >= a->zones[UCMA_ZONE_CMA].start_pfn, "the buffer lies in the CMA zone");
		/* Every byte: old objects' data could survive anywhere in a page. */
		for (size_t i = 0; i < (64u << 20); i++)
			nonzero += b[i] != 0;
		ok(nonzero == 0,
		   "UCMA_ALLOC_ZERO returned zeroed memory over old object data (%zu of 64 MiB "
		   "bytes not zero)",
		   nonzero);
		memset(buf, 0x5a, 64u << 20);
		ok(verify_all() == 0, "writing the whole buffer corrupts no object");
		ok(ucma_alloc_size(buf) == (64u << 20), "ucma_alloc_size reports 64 MiB");
		ok(ucma_release(buf) == 0, "ucma_release");
		ok(ucma_release(buf) == -1 && errno == EINVAL, "a double release: EINVAL");
	}
	/* Lent again: movable objects can use the released space. */
	{
		uint64_t more = 0;

		while (nobj < MAXOBJ) {
			ucma_handle_t x = ucma_halloc(65536, 0);
			void *p;

			if (!x)
				break;
			p = ucma_pin(x, 0);
			tu_fill(p, 64, (uint64_t)nobj);
			tu_fill((char *)p + 65536 - 64, 64, (uint64_t)nobj + 7);
			ucma_unpin(x);
			h[nobj] = x;
			sizes[nobj++] = 65536;
			more += 65536;
		}
		ok(more >= (60u << 20), "after release %llu MiB more movable data fit (lent again)",
		   (unsigned long long)(more >> 20));
		ok(verify_all() == 0, "all objects verify after refilling");
	}
	free_all();
}

/*
 * Objects from 16 KiB up, whose copies a migration writes with streaming
 * stores, of sizes that are no multiple of a store's width or a page: the
 * CMA area is filled with them, wholly stamped, and taken back whole by
 * one ucma_alloc(); every byte of every object must arrive.
 */
static void test_copy_sizes(void)
{
	static const uint32_t odd[] = { 16384 + 48, 16384 + 4000, 65536 - 16, 100000,
					131072 + 80, 262144 - 48 };
	uint64_t mig0, mig1, bytes = 0;
	void *buf;

	nobj = 0;
	while (nobj < MAXOBJ && bytes < CMA / 2) {
		uint32_t sz = odd[nobj % UCMA_ARRAY_SIZE(odd)];
		ucma_handle_t x = ucma_halloc(sz, 0);
		void *p;

		if (!x)
			break;
		p = ucma_pin(x, 0);
		tu_fill(p, sz, (uint64_t)nobj);
		ucma_unpin(x);
		h[nobj] = x;
		sizes[nobj++] = sz;
		bytes += sz;
	}
	ucma_stat("pgmigrate_success", &mig0);
	buf = ucma_alloc(CMA, 0, 0);
	ucma_stat("pgmigrate_success", &mig1);
	ok(buf != NULL && mig1 > mig0,
	   "ucma_alloc() of the whole CMA area moves the %d objects of odd sizes out of it "
	   "(%llu moved)", nobj, (unsigned long long)(mig1 - mig0));
	ok(verify_full() == 0, "every byte of every moved object arrived");
	if (buf)
		ucma_release(buf);
	free_all();
}

/* Objects whose storage lies in the CMA zone, in address order. */
static int cma_objects(int *idx, void **addr)
{
	int n = 0;

	ucma_read_lock();
	for (int i = 0; i < nobj; i++) {
		const void *p = ucma_deref(h[i]);
		uint32_t pfn;

		if (!p) {
			diag("object %d (handle %llx): deref failed: %s", i,
			     (unsigned long long)h[i], strerror(errno));
			continue;
		}
		pfn = ucma_addr_to_pfn(a, p);
		if (pfn >= a->zones[UCMA_ZONE_CMA].start_pfn) {
			idx[n] = i;
			addr[n++] = (void *)p;
		}
	}
	ucma_read_unlock();
	return n;
}

static void test_reserved(void)
{
	uint64_t seed = 7, bytes;
	/* ARENA - CMA, or all of ARENA where the heap may borrow the CMA
	 * area's frames (lend.c: the heap's window). */
	uint64_t normal = (uint64_t)a->zones[UCMA_ZONE_NORMAL].managed_pages << UCMA_PAGE_SHIFT;

	uint64_t cma_free = a->zones[UCMA_ZONE_CMA].free_pages;

	ucma_opt.cma_policy = UCMA_CMA_RESERVED;
	bytes = fill(&seed);
	diag("reserved fill: %llu bytes, NORMAL %llu bytes, CMA free %llu of %llu pages",
	     (unsigned long long)bytes, (unsigned long long)normal,
	     (unsigned long long)a->zones[UCMA_ZONE_CMA].free_pages, (unsigned long long)cma_free);
	{
		static int idx2[MAXOBJ];
		static void *addr2[MAXOBJ];
		int incma = cma_objects(idx2, addr2);

		ok(incma == 0, "no object was placed in the CMA zone (%d)", incma);
		for (int i = 0; i < incma && i < 3; i++)
			diag("object %d size %u at pfn %u owner %u", idx2[i], sizes[idx2[i]],
			     ucma_addr_to_pfn(a, addr2[i]),
			     a->pages[ucma_addr_to_pfn(a, addr2[i])].owner_type);
	}
	ok(bytes <= normal && bytes > normal / 10 * 8,
	   "with the reserved policy the fill stops near NORMAL's size (%llu of %llu MiB)",
	   (unsigned long long)(bytes >> 20), (unsigned long long)(normal >> 20));
	ok(a->zones[UCMA_ZONE_CMA].free_pages == cma_free,
	   "and no movable object went into the CMA zone");
	free_all();
	ucma_opt.cma_policy = UCMA_CMA_LEND;
}

static void test_pinned(void)
{
	static int idx[MAXOBJ];
	static void *addr[MAXOBJ];
	uint64_t seed = 3, moved0 = 0, moved1 = 0, vain0 = 0, vain1 = 0;
	int n, first, pinned_ok = 1;
	void *buf, *at;
	uintptr_t cma_base = (uintptr_t)ucma_pfn_to_addr(a, a->zones[UCMA_ZONE_CMA].start_pfn);

	nobj = 0;
	while (nobj < 2000) {	/* 2000 x 64 KiB: CMA holds them all */
		ucma_handle_t x = ucma_halloc(65536, 0);
		void *p = ucma_pin(x, 0);

		tu_fill(p, 65536, (uint64_t)nobj);
		ucma_unpin(x);
		h[nobj] = x;
		sizes[nobj++] = 65536;
	}
	(void)seed;
	n = cma_objects(idx, addr);
	/* Pin the object nearest the start of the area. */
	first = 0;
	for (int i = 1; i < n; i++)
		if (addr[i] < addr[first])
			first = i;
	at = ucma_pin(h[idx[first]], 0);
	ok(at == addr[first] && (uintptr_t)at - cma_base < (32u << 20),
	   "an object in the area's first 32 MiB is pinned");
	buf = ucma_alloc(32u << 20, 0, 0);
	ok(buf != NULL, "ucma_alloc(32 MiB) takes another run (%s)", buf ? "ok" : strerror(errno));
	ok(buf && ((uintptr_t)buf >= (uintptr_t)at + 65536 || (uintptr_t)buf + (32u << 20) <= (uintptr_t)at),
	   "a run that does not contain the pinned object");
	ucma_read_lock();
	ok(ucma_deref(h[idx[first]]) == at, "the pinned object was not moved");
	ucma_read_unlock();
	ok(tu_check(at, 65536, (uint64_t)idx[first]), "and its data is intact");
	if (buf)
		ucma_release(buf);

	/* A pin in every 16 MiB: no 64 MiB run can be emptied. */
	n = cma_objects(idx, addr);
	{
		int npinned = 0;
		uintptr_t last = 0;
		bool direct = ucma_opt.compact_direct, compact = ucma_opt.compact;

		for (uintptr_t off = 0; off < CMA; off += 16u << 20) {
			int best = -1;

			for (int i = 0; i < n; i++) {
				uintptr_t o = (uintptr_t)addr[i] - cma_base;

				if (o >= off && o < off + (16u << 20) &&
				    (best < 0 || addr[i] < addr[best]))
					best = i;
			}
			if (best >= 0 && (uintptr_t)addr[best] != last) {
				ucma_pin(h[idx[best]], 0);
				last = (uintptr_t)addr[best];
				npinned++;
			}
		}
		pinned_ok = npinned >= (int)(CMA >> 24) - 2;
		ok(pinned_ok, "%d objects pinned across the area", npinned);
		/* The counters below are global: the background thread must
		 * not move anything while they are read. */
		ucma_opt.compact = false;
		ucma_compactd_stop();
		ucma_stat("pgmigrate_success", &moved0);
		ucma_stat("cma_migrated_in_vain", &vain0);
		/* The candidates alone: direct compaction after they all fail
		 * may move objects (whether it does depends on where the free
		 * pages lie), which is no move made in vain by a candidate. */
		ucma_opt.compact_direct = false;
		buf = ucma_alloc(64u << 20, 0, 0);
		ucma_opt.compact_direct = direct;
		ok(buf == NULL && errno == EBUSY, "ucma_alloc(64 MiB) fails with EBUSY (%s)",
		   buf ? "succeeded" : strerror(errno));
		/* Every candidate holds a pin: seen before anything is moved. */
		ucma_stat("pgmigrate_success", &moved1);
		ucma_stat("cma_migrated_in_vain", &vain1);
		ok(moved1 == moved0 && vain1 == vain0,
		   "the failing call moved nothing in vain (%llu objects moved, %llu counted in vain)",
		   (unsigned long long)(moved1 - moved0), (unsigned long long)(vain1 - vain0));
		ok(verify_full() == 0, "every object, pinned or not, is intact");
		ucma_opt.compact = compact;
		ucma_compactd_start_once();
		for (int i = 0; i < nobj; i++)
			while (ucma_unpin(h[i]) == 0)
				;
	}
	buf = ucma_alloc(64u << 20, 0, UCMA_ALLOC_NOWAIT);
	ok(buf == NULL && errno == EBUSY, "UCMA_ALLOC_NOWAIT does not migrate: EBUSY");
	buf = ucma_alloc(64u << 20, 0, 0);
	ok(buf != NULL, "after unpinning, ucma_alloc(64 MiB) succeeds");
	ok(verify_full() == 0, "every object is intact after the migration");
	if (buf)
		ucma_release(buf);
	free_all();
}

static void test_bad_input(void)
{
	int x;
	void *p;

	ok(ucma_alloc(0, 0, 0) == NULL && errno == EINVAL, "ucma_alloc(0): EINVAL");
	ok(ucma_alloc(4096, 3000, 0) == NULL && errno == EINVAL,
	   "a non-power-of-two alignment: EINVAL");
	ok(ucma_alloc(4096, (size_t)1 << 40, 0) == NULL && errno == EINVAL,
	   "an alignment larger than the area: EINVAL");
	ok(ucma_alloc(SIZE_MAX, 0, 0) == NULL && errno == ENOMEM, "ucma_alloc(SIZE_MAX): ENOMEM");
	ok(ucma_alloc(CMA + 4096, 0, 0) == NULL && errno == ENOMEM,
	   "larger than the area: ENOMEM");
	ok(ucma_alloc(4096, 0, 0x4000) == NULL && errno == EINVAL, "unknown flags: EINVAL");
	ok(ucma_alloc_area("nosuch", 4096, 0, 0) == NULL && errno == ENOENT,
	   "an unknown area: ENOENT");
	ok(ucma_alloc_area(NULL, 4096, 0, 0) == NULL && errno == EINVAL, "a NULL area: EINVAL");
	ok(ucma_release(&x) == -1 && errno == EINVAL, "release of a stack pointer: EINVAL");
	ok(ucma_release(NULL) == -1 && errno == EINVAL, "release of NULL: EINVAL");
	p = ucma_alloc(1u << 20, 1u << 21, 0);
	ok(p && ((uintptr_t)p & ((1u << 21) - 1)) == 0, "a 2 MiB aligned 1 MiB buffer");
	ok(ucma_release((char *)p + 4096) == -1 && errno == EINVAL,
	   "release of an interior pointer: EINVAL");
	ok(ucma_alloc_size((char *)p + 4096) == 0 && errno == EINVAL,
	   "alloc_size of an interior pointer: EINVAL");
	{
		ucma_handle_t hh = ucma_halloc(8192, 0);
		void *q = ucma_pin(hh, 0);

		ok(ucma_release(q) == -1 && errno == EINVAL,
		   "release of a movable object's address: EINVAL");
		ucma_unpin(hh);
		ucma_hfree(hh);
	}
	ok(ucma_release(p) == 0, "the aligned buffer is released");
	{
		uint64_t phys;
		void *q = ucma_alloc(8192, 0, UCMA_ALLOC_POPULATE);
		int rc = ucma_virt2phys(q, &phys);

		if (geteuid() == 0)
			ok(rc == 0 && phys != 0, "virt2phys as root gives an address");
		else
			ok(rc == -1 && errno == EPERM, "virt2phys without privilege: EPERM");
		ok(ucma_virt2phys(NULL, &phys) == -1 && errno == EINVAL, "virt2phys(NULL): EINVAL");
		ok(ucma_virt2phys((void *)-4096, &phys) == -1 && errno == EINVAL,
		   "virt2phys of an address outside the process: EINVAL");
		ucma_release(q);
	}
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = ARENA,
		.cma_size = CMA,
		.hugepages = UCMA_BACKING_NONE,
	};
	char why[256];

	plan_no_plan();
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	a = ucma_arena_get();
	test_lending();
	test_copy_sizes();
	test_reserved();
	test_pinned();
	test_bad_input();
	ok(ucma_zone_check(&a->zones[0], why, sizeof(why)) == 0 &&
		   ucma_zone_check(&a->zones[1], why, sizeof(why)) == 0,
	   "zone invariants hold at the end");
	return done();
}
