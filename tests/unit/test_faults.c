/*
 * test_faults.c - the foundation under injected operating-system faults.
 *
 * Every memory system call of the library goes through the table ucma_os
 * (os.c).  Each case here replaces entries with failing versions, starts
 * the library (ucma_test_reset(), ucma_init()), checks the documented
 * behaviour, and puts the real calls back with ucma_os_reset():
 *
 *  - the reservation mmap fails: ucma_init() returns -1 with ENOMEM, every
 *    call after that fails cleanly, and a later ucma_init() works;
 *  - a metadata mmap fails (page array, pageblock array, area bitmaps):
 *    ENOMEM, and nothing mapped by the attempt is left behind;
 *  - the pool claims many free hugetlb pages but mmap refuses MAP_HUGETLB:
 *    both zones fall back to THP without an error;
 *  - madvise(MADV_HUGEPAGE) fails: the zone is reported as "none";
 *  - mbind fails: one message, no placement, the arena works;
 *  - madvise(MADV_DONTFORK) or MADV_POPULATE_WRITE fails: one message each,
 *    start-up succeeds;
 *  - madvise(MADV_DONTNEED) fails during a purge: the blocks stay dirty,
 *    the zone invariants hold, and a later purge returns them.
 *
 * Messages go to fd 2, which each case captures to count them.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

extern char **environ;

static struct ucma_arena *a;
static struct ucma_os_ops real;		/* the table as the library set it up */
static bool thp_ok;

/* ------------------------------------------------------------------------ */
/* Fault injection                                                           */
/* ------------------------------------------------------------------------ */

/* What the fake calls do; set by each case, cleared by os_restore(). */
static struct {
	bool fail_reservation;		/* mmap(PROT_NONE) fails */
	int fail_meta_nth;		/* the nth metadata mmap fails (1-based), 0: none */
	bool refuse_hugetlb;		/* mmap(MAP_HUGETLB) fails with ENOMEM */
	long fake_hugetlb_free;		/* >= 0: hugetlb_free_pages() claims this */
	int fail_advice[4];		/* madvise with these advices fails; 0 ends */
	bool fail_mbind;
} fault;

/* What the fake calls saw. */
static struct {
	int meta_mmaps;			/* metadata mmaps attempted */
	int hugetlb_mmaps;		/* MAP_HUGETLB attempts */
	int advice_failed;		/* madvise calls failed on purpose */
	int mbind_calls;
} seen;

/* Mappings made through the table and not unmapped yet (leak check). */
#define MAX_LIVE 64
static struct {
	uintptr_t addr;
	size_t len;
} live[MAX_LIVE];

static void live_add(void *p, size_t len)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (!live[i].addr) {
			live[i].addr = (uintptr_t)p;
			live[i].len = len;
			return;
		}
	}
}

static int live_count(void)
{
	int n = 0;

	for (int i = 0; i < MAX_LIVE; i++)
		n += live[i].addr != 0;
	return n;
}

static void *fake_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p;

	if (prot == PROT_NONE && fault.fail_reservation) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	if (flags & MAP_HUGETLB) {
		seen.hugetlb_mmaps++;
		if (fault.refuse_hugetlb) {
			errno = ENOMEM;
			return MAP_FAILED;
		}
	}
	if (prot != PROT_NONE && !(flags & MAP_FIXED)) {
		if (++seen.meta_mmaps == fault.fail_meta_nth) {
			errno = ENOMEM;
			return MAP_FAILED;
		}
	}
	p = real.mmap(addr, len, prot, flags, fd, off);
	/* MAP_FIXED mappings lie inside the reservation, unmapped with it. */
	if (p != MAP_FAILED && !(flags & MAP_FIXED))
		live_add(p, len);
	return p;
}

static int fake_munmap(void *addr, size_t len)
{
	uintptr_t lo = (uintptr_t)addr, hi = lo + len;

	for (int i = 0; i < MAX_LIVE; i++)
		if (live[i].addr >= lo && live[i].addr + live[i].len <= hi)
			live[i].addr = 0;
	return real.munmap(addr, len);
}

static int fake_madvise(void *addr, size_t len, int advice)
{
	for (int i = 0; i < 4 && fault.fail_advice[i]; i++) {
		if (fault.fail_advice[i] == advice) {
			seen.advice_failed++;
			errno = EINVAL;
			return -1;
		}
	}
	return real.madvise(addr, len, advice);
}

static long fake_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
		       unsigned long maxnode, unsigned flags)
{
	seen.mbind_calls++;
	if (fault.fail_mbind) {
		errno = EIO;
		return -1;
	}
	return real.mbind(addr, len, mode, nodemask, maxnode, flags);
}

static long fake_hugetlb_free_pages(size_t page_size)
{
	if (fault.fake_hugetlb_free >= 0)
		return fault.fake_hugetlb_free;
	return real.hugetlb_free_pages(page_size);
}

/* Install the fakes (which pass through while no fault is set). */
static void os_fake(void)
{
	memset(&fault, 0, sizeof(fault));
	memset(&seen, 0, sizeof(seen));
	fault.fake_hugetlb_free = -1;
	ucma_os.mmap = fake_mmap;
	ucma_os.munmap = fake_munmap;
	ucma_os.madvise = fake_madvise;
	ucma_os.mbind = fake_mbind;
	ucma_os.hugetlb_free_pages = fake_hugetlb_free_pages;
}

static void os_restore(void)
{
	ucma_os_reset();
	memset(&fault, 0, sizeof(fault));
	fault.fake_hugetlb_free = -1;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static char msg[4096];		/* what the last captured call wrote to fd 2 */

static int count_lines(const char *needle)
{
	int n = 0;

	for (const char *p = msg; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* ucma_init(@cfg) after a reset (unless @retry), fd 2 captured into msg. */
static int init_captured(const struct ucma_config *cfg, bool retry)
{
	FILE *cap = tmpfile();
	int saved, rc, err;
	size_t n;

	fflush(stderr);
	saved = dup(STDERR_FILENO);
	if (!cap || saved < 0 || dup2(fileno(cap), STDERR_FILENO) < 0)
		bail_out("cannot capture stderr: %s", strerror(errno));
	if (!retry)
		ucma_test_reset();
	a = NULL;
	rc = ucma_init(cfg);
	err = errno;
	if (rc == 0)
		a = ucma_arena_get();
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(cap);
	n = fread(msg, 1, sizeof(msg) - 1, cap);
	msg[n] = '\0';
	fclose(cap);
	for (char *p = msg, *nl; (nl = strchr(p, '\n')); p = nl + 1)
		diag("  stderr: %.*s", (int)(nl - p), p);
	errno = err;
	return rc;
}

static struct ucma_config cfg_of(size_t arena, size_t cma, int cma_b, int normal_b)
{
	struct ucma_config cfg = {
		.arena_size = arena,
		.cma_size = cma,
		.hugepages = cma_b,
		.hugepages_normal = normal_b,
	};

	return cfg;
}

static bool zones_ok(void)
{
	char why[256];

	for (int z = 0; z < UCMA_ZONE_NR; z++) {
		if (ucma_zone_check(&a->zones[z], why, sizeof(why)) != 0) {
			diag("zone %s: %s", a->zones[z].name, why);
			return false;
		}
	}
	return true;
}

/* Write and read back a run in each zone. */
static bool arena_works(void)
{
	for (int z = 0; z < UCMA_ZONE_NR; z++) {
		unsigned gfp = z == UCMA_ZONE_CMA ? UCMA_GFP_MOVABLE : UCMA_GFP_UNMOVABLE;
		uint32_t pfn = ucma_pages_alloc(a, 64, gfp);
		size_t len = 64 * UCMA_PAGE_SIZE;
		bool good;

		if (pfn == UCMA_PFN_NONE || ucma_pfn_zone(a, pfn)->id != z)
			return false;
		tu_fill(ucma_pfn_to_addr(a, pfn), len, pfn);
		good = tu_check(ucma_pfn_to_addr(a, pfn), len, pfn);
		ucma_pages_free(a, pfn);
		if (!good)
			return false;
	}
	return zones_ok();
}

static const char *thp_or_none(void)
{
	return thp_ok ? "thp" : "none";
}

static bool names_are(const char *cma, const char *normal)
{
	const char *c = ucma_backing_name("cma"), *n = ucma_backing_name("normal");

	if (!c || !n || strcmp(c, cma) != 0 || strcmp(n, normal) != 0) {
		diag("backing: cma %s, normal %s; expected %s, %s", c ? c : "NULL",
		     n ? n : "NULL", cma, normal);
		return false;
	}
	return true;
}

/* ------------------------------------------------------------------------ */
/* Cases                                                                     */
/* ------------------------------------------------------------------------ */

static void test_reservation_fails(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);

	os_fake();
	fault.fail_reservation = true;
	ok(init_captured(&cfg, false) == -1 && errno == ENOMEM,
	   "reservation mmap fails: ucma_init returns -1 with ENOMEM");
	ok(count_lines("ucma: ") == 1, "one message says so");
	ok(live_count() == 0 && ucma_arena_peek() == NULL, "nothing is left mapped, no arena");
	errno = 0;
	ok(ucma_backing_name("cma") == NULL && errno == ENOMEM,
	   "calls after the failure return an error (ucma_backing_name: ENOMEM)");
	ok(ucma_alloc(UCMA_PAGE_SIZE, 0, 0) == NULL, "ucma_alloc fails cleanly too (errno %d)",
	   errno);
	os_restore();
	ok(init_captured(&cfg, true) == 0 && a && arena_works(),
	   "after ucma_os_reset a later ucma_init works, without a test reset");
}

static void test_metadata_fails(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 0, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	static const char *const what[] = { "page array", "pageblock array",
					    "first area bitmap", "second area bitmap" };

	cfg.cma_areas = "one:4M,two:4M";
	for (int nth = 1; nth <= 4; nth++) {
		os_fake();
		fault.fail_meta_nth = nth;
		ok(init_captured(&cfg, false) == -1 && errno == ENOMEM,
		   "mmap of the %s fails: ENOMEM", what[nth - 1]);
		ok(live_count() == 0, "nothing mapped by the attempt is left (%d mappings)",
		   live_count());
	}
	os_restore();
	ok(init_captured(&cfg, true) == 0 && a && a->nr_areas == 2 && arena_works(),
	   "a later ucma_init works");
}

static void test_hugetlb_refused(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 16 * MiB, UCMA_BACKING_AUTO,
					UCMA_BACKING_HUGETLB_2M);

	os_fake();
	fault.fake_hugetlb_free = 1 << 20;
	fault.refuse_hugetlb = true;
	ok(init_captured(&cfg, false) == 0 && a, "pool claims 2^20 free pages, mmap refuses "
	   "MAP_HUGETLB: ucma_init succeeds");
	ok(seen.hugetlb_mmaps >= 2, "both zones tried hugetlb (%d attempts)", seen.hugetlb_mmaps);
	ok(a && names_are(thp_or_none(), thp_or_none()), "both zones fell back to %s",
	   thp_or_none());
	ok(msg[0] == '\0', "falling back is no error: no message");
	ok(a && arena_works(), "the reservation is intact: both zones usable");

	/* 1 GiB CMA zone asking for 1 GiB pages: 1G and 2M refused. */
	cfg = cfg_of(GiB + 16 * MiB, GiB, UCMA_BACKING_HUGETLB_1G, UCMA_BACKING_NONE);
	seen.hugetlb_mmaps = 0;
	ok(init_captured(&cfg, false) == 0 && a && seen.hugetlb_mmaps == 2 &&
		   names_are(thp_or_none(), "none") && arena_works(),
	   "1G then 2M refused for a 1 GiB CMA zone: %s, usable", thp_or_none());
	os_restore();
}

static void test_madv_hugepage_fails(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 16 * MiB, UCMA_BACKING_THP, UCMA_BACKING_THP);

	os_fake();
	fault.fail_advice[0] = MADV_HUGEPAGE;
	ok(init_captured(&cfg, false) == 0 && a, "madvise(MADV_HUGEPAGE) fails: ucma_init works");
	ok(!thp_ok || seen.advice_failed == 2, "MADV_HUGEPAGE was tried for both zones (%d)",
	   seen.advice_failed);
	ok(a && names_are("none", "none"), "both zones are reported as none");
	ok(a && arena_works(), "and work");
	os_restore();
}

static void test_mbind_fails(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);

	if (numa_available() < 0) {
		skip(4, "libnuma reports no NUMA support: mbind is never called");
		return;
	}
	cfg.node = UCMA_NODE_LOCAL;
	os_fake();
	fault.fail_mbind = true;
	ok(init_captured(&cfg, false) == 0 && a, "mbind fails: ucma_init works");
	ok(seen.mbind_calls == 1 && count_lines("mbind") == 1,
	   "one mbind call, one message naming it (%d calls)", seen.mbind_calls);
	ok(a && a->node == UCMA_NODE_DEFAULT, "no placement is claimed");
	ok(a && arena_works(), "the arena works");
	os_restore();
}

static void test_advice_fails(void)
{
	struct ucma_config cfg = cfg_of(16 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);

	cfg.cma_dontfork = 1;
	cfg.populate = 1;
	os_fake();
	fault.fail_advice[0] = MADV_DONTFORK;
	fault.fail_advice[1] = MADV_POPULATE_WRITE;
	ok(init_captured(&cfg, false) == 0 && a,
	   "MADV_DONTFORK and MADV_POPULATE_WRITE fail: ucma_init works");
	ok(seen.advice_failed == 2 && count_lines("UCMA_CMA_DONTFORK") == 1 &&
		   count_lines("UCMA_POPULATE") == 1,
	   "one message for each, naming the variable");
	ok(a && arena_works(), "the arena works");
	os_restore();
}

/* Dirty free pages of zone @z (free heads carrying UCMA_PF_DIRTY). */
static uint64_t dirty_pages(struct ucma_zone *z)
{
	uint64_t n = 0;

	pthread_mutex_lock(&z->lock);
	for (unsigned o = 0; o < UCMA_NR_ORDERS; o++)
		for (int mt = 0; mt < UCMA_MT_NR; mt++)
			for (uint32_t pfn = z->free_area[o].head[mt]; pfn != UCMA_PFN_NONE;
			     pfn = a->pages[pfn].link.next)
				if (a->pages[pfn].flags & UCMA_PF_DIRTY)
					n += 1u << o;
	pthread_mutex_unlock(&z->lock);
	return n;
}

static void test_purge_fails(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	struct ucma_zone *z;
	uint32_t pfns[64];
	uint64_t dirty, purged_before;
	bool zero = true;

	/* No decay while the test frees: it purges by hand. */
	setenv("UCMA_DECAY_MS", "0", 1);
	if (init_captured(&cfg, false) != 0 || !a) {
		unsetenv("UCMA_DECAY_MS");
		ok(0, "purge: ucma_init: %s", strerror(errno));
		skip(5, "no arena");
		return;
	}
	unsetenv("UCMA_DECAY_MS");
	z = &a->zones[UCMA_ZONE_NORMAL];
	for (int i = 0; i < 64; i++) {
		pfns[i] = ucma_pages_alloc(a, 16, UCMA_GFP_UNMOVABLE);
		if (pfns[i] != UCMA_PFN_NONE)
			memset(ucma_pfn_to_addr(a, pfns[i]), 0xa5, 16 * UCMA_PAGE_SIZE);
	}
	for (int i = 0; i < 64; i++)
		if (pfns[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, pfns[i]);
	dirty = dirty_pages(z);
	purged_before = atomic_load(&ucma_vmstat[UCMA_STAT_PURGED_PAGES]);

	os_fake();
	fault.fail_advice[0] = MADV_DONTNEED;
	ucma_zone_purge(z, true);
	ok(dirty >= 64 * 16 && seen.advice_failed > 0,
	   "purge with MADV_DONTNEED failing: %d calls failed, %llu dirty pages before",
	   seen.advice_failed, (unsigned long long)dirty);
	ok(dirty_pages(z) == dirty, "the blocks stay dirty");
	ok(atomic_load(&ucma_vmstat[UCMA_STAT_PURGED_PAGES]) == purged_before,
	   "nothing is counted as purged");
	ok(zones_ok() && arena_works(), "zone check passes, the arena works");
	os_restore();

	ucma_zone_purge(z, true);
	ok(dirty_pages(z) == 0 &&
		   atomic_load(&ucma_vmstat[UCMA_STAT_PURGED_PAGES]) >= purged_before + dirty,
	   "a later purge returns them (%llu pages purged)",
	   (unsigned long long)(atomic_load(&ucma_vmstat[UCMA_STAT_PURGED_PAGES]) -
				purged_before));
	for (int i = 0; i < 64; i++) {
		uint32_t pfn = ucma_pages_alloc(a, 16, UCMA_GFP_UNMOVABLE);
		const unsigned char *p = ucma_pfn_to_addr(a, pfn);

		for (size_t j = 0; pfn != UCMA_PFN_NONE && j < 16 * UCMA_PAGE_SIZE; j += 512)
			zero &= p[j] == 0;
		pfns[i] = pfn;
	}
	for (int i = 0; i < 64; i++)
		if (pfns[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, pfns[i]);
	ok(zero && zones_ok(), "purged pages read back as zeros");
}

static void test_init_twice(void)
{
	struct ucma_config cfg = cfg_of(16 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);

	ok(init_captured(&cfg, false) == 0, "ucma_init");
	ok(ucma_init(&cfg) == -1 && errno == EBUSY, "a second ucma_init with a config: EBUSY");
	ok(ucma_init(NULL) == 0, "ucma_init(NULL) once running: 0");
}

int main(void)
{
	char **e;

	plan_no_plan();
	/* Options from the harness's environment would change the cases. */
	for (;;) {
		char name[256];

		for (e = environ; *e; e++)
			if (strncmp(*e, "UCMA_", 5) == 0 && strncmp(*e, "UCMA_TEST_", 10) != 0)
				break;
		if (!*e)
			break;
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
		unsetenv(name);
	}
	real = ucma_os;
	thp_ok = ucma_os_thp_available();

	test_reservation_fails();
	test_metadata_fails();
	test_hugetlb_refused();
	test_madv_hugepage_fails();
	test_mbind_fails();
	test_advice_fails();
	test_purge_fails();
	test_init_twice();
	ucma_test_reset();
	return done();
}
