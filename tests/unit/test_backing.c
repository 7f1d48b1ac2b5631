/*
 * test_backing.c - every backing mode of the CMA zone and of the NORMAL
 * zone, and the placement options of the arena.
 *
 * For each configuration the test starts the library afresh
 * (ucma_test_reset(), then ucma_init()), checks that ucma_backing_name()
 * reports the mode in effect, that pages of the zone can be written and
 * read back, and that the kernel agrees: /proc/self/smaps shows a
 * KernelPageSize of 2048 kB or 1048576 kB over a hugetlb zone and the
 * MADV_HUGEPAGE flag ("hg") over a THP zone.  `auto` with a pool too small
 * must fall back to THP (plain pages when THP is "never").
 *
 * Hugetlb pages are reserved with tu_hugepages_reserve(), which holds one
 * lock file and restores the pool at exit; it handles one pool size per
 * process, so each hugetlb case runs in a child process that reports its
 * TAP results back to the parent.  Without root, or when the kernel cannot
 * provide the pages, those cases are skipped with the reason.
 *
 * Also here: the 1 GiB alignment of a CMA zone backed by (or eligible for)
 * 1 GiB pages, UCMA_NODE on this machine's nodes, UCMA_CMA_DONTFORK (the
 * child of a fork has no CMA range) and UCMA_POPULATE (the arena is
 * resident after start-up).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "frames.h"

#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static struct ucma_arena *a;
static bool thp_ok;		/* THP is not "never" */
static int (*real_overcommit_mode)(void);

/* Start again with @cfg; returns the arena or NULL (errno set). */
static struct ucma_arena *start(const struct ucma_config *cfg)
{
	ucma_test_reset();
	a = NULL;
	if (ucma_init(cfg) != 0)
		return NULL;
	a = ucma_arena_get();
	return a;
}

static void *zone_addr(int zone)
{
	return ucma_pfn_to_addr(a, a->zones[zone].start_pfn);
}

/* An address of the zone's own mapping: NORMAL's first pageblocks may be
 * backed by CMA frames lent to the heap (lend.c), its last one is not in
 * these cases (the heap never grows that far). */
static void *zone_own_addr(int zone)
{
	if (zone == UCMA_ZONE_NORMAL)
		return ucma_pfn_to_addr(a, a->zones[zone].end_pfn - UCMA_PAGEBLOCK_PAGES);
	return zone_addr(zone);
}

/*
 * Copy the value of @field ("KernelPageSize:", "VmFlags:") of the mapping
 * of /proc/self/smaps that holds @addr into @out.  Returns 0 or -1.
 */
static int smaps_field(const void *addr, const char *field, char *out, size_t outlen)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool inside = false;
	int rc = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (inside && strncmp(line, field, strlen(field)) == 0) {
			const char *v = line + strlen(field);

			v += strspn(v, " \t");
			snprintf(out, outlen, "%.*s", (int)strcspn(v, "\n"), v);
			rc = 0;
			break;
		}
	}
	fclose(f);
	return rc;
}

static long kernel_page_kb(const void *addr)
{
	char v[64];

	return smaps_field(addr, "KernelPageSize:", v, sizeof(v)) == 0 ? atol(v) : -1;
}

static bool has_vmflag(const void *addr, const char *flag)
{
	char v[256];

	if (smaps_field(addr, "VmFlags:", v, sizeof(v)) != 0)
		return false;
	for (char *t = strtok(v, " "); t; t = strtok(NULL, " "))
		if (strcmp(t, flag) == 0)
			return true;
	return false;
}

/* Is @addr inside any mapping of /proc/self/maps? */
static bool mapped(const void *addr)
{
	return tu_maps_line(addr, NULL, 0);
}

/*
 * Allocate @npages from zone @zone (movable requests go to CMA first,
 * unmovable ones only to NORMAL), write a stamp every 512 bytes, read them
 * back, free.  Sparse, so that sanitizer builds stay fast; every page is
 * still written and read several times.
 */
static bool touch_zone(int zone, uint32_t npages)
{
	unsigned gfp = zone == UCMA_ZONE_CMA ? UCMA_GFP_MOVABLE : UCMA_GFP_UNMOVABLE;
	uint32_t pfn = ucma_pages_alloc(a, npages, gfp);
	size_t len = (size_t)npages << UCMA_PAGE_SHIFT;
	bool good = true;
	volatile uint64_t *p;

	if (pfn == UCMA_PFN_NONE || ucma_pfn_zone(a, pfn)->id != zone) {
		diag("no %u-page run in zone %d (pfn %u)", npages, zone, pfn);
		if (pfn != UCMA_PFN_NONE)
			ucma_pages_free(a, pfn);
		return false;
	}
	p = ucma_pfn_to_addr(a, pfn);
	for (size_t i = 0; i < len / 8; i += 64)
		p[i] = (uint64_t)pfn << 32 ^ i;
	for (size_t i = 0; i < len / 8; i += 64)
		good &= p[i] == ((uint64_t)pfn << 32 ^ i);
	ucma_pages_free(a, pfn);
	return good;
}

static const char *name_of(int backing)
{
	return ucma_backing_str(backing);
}

/* The backing a THP request ends up with on this machine. */
static int thp_or_none(void)
{
	return thp_ok ? UCMA_BACKING_THP : UCMA_BACKING_NONE;
}

/*
 * One configuration @cfg, expected backings @want_cma and @want_normal.
 * Six checks; @touch false skips writing the zones (the first write to a
 * 1 GiB page makes the kernel clear all of it, which takes a second).
 */
static void check_config_touch(const char *what, struct ucma_config cfg, int want_cma,
			       int want_normal, bool touch)
{
	const char *cn, *nn;

	if (!start(&cfg)) {
		ok(0, "%s: ucma_init: %s", what, strerror(errno));
		skip(5, "%s: no arena", what);
		return;
	}
	cn = ucma_backing_name("cma");
	nn = ucma_backing_name("normal");
	ok(cn && strcmp(cn, name_of(want_cma)) == 0, "%s: CMA zone reports %s (got %s)", what,
	   name_of(want_cma), cn ? cn : "NULL");
	ok(nn && strcmp(nn, name_of(want_normal)) == 0, "%s: NORMAL zone reports %s (got %s)",
	   what, name_of(want_normal), nn ? nn : "NULL");
	{
		const char *dn = ucma_backing_name(a->areas[0].name);

		ok(dn && cn && strcmp(dn, cn) == 0, "%s: area \"%s\" reports the CMA zone's mode",
		   what, a->areas[0].name);
	}
	if (touch)
		ok(touch_zone(UCMA_ZONE_CMA, 2 * UCMA_PAGEBLOCK_PAGES) &&
			   touch_zone(UCMA_ZONE_NORMAL, 2 * UCMA_PAGEBLOCK_PAGES),
		   "%s: 4 MiB of each zone written and read back", what);
	else
		skip(1, "%s: zones not written (another 1 GiB page to clear)", what);
	for (int z = 0; z < UCMA_ZONE_NR; z++) {
		int b = a->zones[z].backing;
		void *addr = zone_own_addr(z);
		long kb = kernel_page_kb(addr);
		bool good;

		if (b == UCMA_BACKING_HUGETLB_2M)
			good = kb == 2048;
		else if (b == UCMA_BACKING_HUGETLB_1G)
			good = kb == 1048576;
		else if (b == UCMA_BACKING_THP && a->zones[z].thp_deferred)
			/* NORMAL asks for huge pages once its heap grows */
			good = kb == 4 && has_vmflag(addr, "nh");
		else if (b == UCMA_BACKING_THP)
			good = kb == 4 && has_vmflag(addr, "hg");
		else
			good = kb == 4 && !has_vmflag(addr, "hg");
		ok(good, "%s: the kernel agrees for %s (KernelPageSize %ld kB%s)", what,
		   a->zones[z].name, kb, has_vmflag(addr, "hg") ? ", MADV_HUGEPAGE" : "");
	}
}

static void check_config(const char *what, struct ucma_config cfg, int want_cma, int want_normal)
{
	check_config_touch(what, cfg, want_cma, want_normal, true);
}

#define CASE_CHECKS 6

static struct ucma_config base_cfg(size_t arena, size_t cma, int cma_b, int normal_b)
{
	struct ucma_config cfg = {
		.arena_size = arena,
		.cma_size = cma,
		.hugepages = cma_b,
		.hugepages_normal = normal_b,
	};

	return cfg;
}

/* ------------------------------------------------------------------------ */
/* Cases that need no hugetlb pool                                           */
/* ------------------------------------------------------------------------ */

static void test_plain_and_thp(void)
{
	long free2m = ucma_os_hugetlb_free_pages(UCMA_PAGEBLOCK_SIZE);

	check_config("none", base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE),
		     UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	check_config("thp", base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_THP, UCMA_BACKING_THP),
		     thp_or_none(), thp_or_none());
	/* The NORMAL zone's default (0 in struct ucma_config) is THP. */
	check_config("default", base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, 0),
		     UCMA_BACKING_NONE, thp_or_none());

	/* auto with a pool too small for 8 pages of 2 MiB falls back to THP. */
	if (free2m >= 8) {
		skip(CASE_CHECKS, "the 2 MiB pool already has %ld free pages: auto would use them",
		     free2m);
	} else {
		check_config("auto, empty pool",
			     base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_AUTO, UCMA_BACKING_NONE),
			     thp_or_none(), UCMA_BACKING_NONE);
	}

	/* NORMAL "auto" (only the environment can say it) means THP. */
	setenv("UCMA_HUGEPAGES_NORMAL", "auto", 1);
	check_config("normal auto", base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, 0),
		     UCMA_BACKING_NONE, thp_or_none());
	unsetenv("UCMA_HUGEPAGES_NORMAL");
}

/* Pages of [@p, @p + @len) resident (mincore), or -1. */
static long resident_pages(const void *p, size_t len)
{
	size_t n = len >> UCMA_PAGE_SHIFT;
	unsigned char *vec = calloc(n, 1);
	long count = 0;

	if (!vec || mincore((void *)p, len, vec) != 0) {
		free(vec);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		count += vec[i] & 1;
	free(vec);
	return count;
}

/*
 * ucma_trim() in a program that never called the malloc family gives the
 * free pages of the CMA areas back too: a released 8 MiB buffer's pages
 * go.  (It returned 0 and purged nothing when the malloc family had not
 * started.)  Runs first, before anything here starts the family.  On
 * THP: without it the areas are frames of a file, kept by design.
 */
static void test_trim_without_malloc(void)
{
	size_t len = 8 * MiB;
	long before, after;
	char *p;
	int r;

	if (!thp_ok) {
		skip(4, "THP is \"never\": the CMA areas are on a file, whose memory is kept");
		return;
	}
	if (!start(&(struct ucma_config){ .arena_size = 64 * MiB, .cma_size = 32 * MiB,
					   .hugepages = UCMA_BACKING_THP,
					   .hugepages_normal = UCMA_BACKING_NONE }))
		bail_out("ucma_init: %s", strerror(errno));
	p = ucma_alloc(len, 0, 0);
	if (!p)
		bail_out("ucma_alloc: %s", strerror(errno));
	memset(p, 0x5a, len);
	before = resident_pages(p, len);
	ok(before == (long)(len >> UCMA_PAGE_SHIFT) && ucma_release(p) == 0,
	   "a written 8 MiB buffer is resident (%ld pages), and released", before);
	r = ucma_trim();
	after = resident_pages(p, len);
	ok(r == 1 && after == 0,
	   "ucma_trim() without the malloc family gives its pages back: returned %d, %ld "
	   "pages resident", r, after);

	/* A freed movable object's pages wait for readers: trim lets them
	 * go too. */
	{
		ucma_handle_t h = ucma_halloc(2 * MiB, 0);
		char *q = h ? ucma_pin(h, 0) : NULL;

		if (!q)
			bail_out("ucma_halloc: %s", strerror(errno));
		memset(q, 0x3c, 2 * MiB);
		ucma_unpin(h);
		ucma_hfree(h);
		r = ucma_trim();
		after = resident_pages(q, 2 * MiB);
		ok(r == 1 && after == 0,
		   "ucma_trim() after ucma_hfree() gives the object's pages back: returned %d, "
		   "%ld pages resident", r, after);
	}

	/* On transparent huge pages the CMA areas give back whole pageblocks
	 * only: the free half of one whose other half holds a buffer stays,
	 * and so does its huge page (a physically contiguous 2 MiB). */
	{
		char *x = ucma_alloc(MiB, 2 * MiB, 0), *y = ucma_alloc(MiB, 0, 0);

		if (!x || !y)
			bail_out("ucma_alloc: %s", strerror(errno));
		memset(x, 1, MiB);
		memset(y, 2, MiB);
		if (y != x + MiB) {
			skip(1, "the second buffer is not beside the first (%p, %p)", (void *)x,
			     (void *)y);
		} else {
			ucma_release(y);
			ucma_trim();
			after = resident_pages(y, MiB);
			ok(after == (long)(MiB >> UCMA_PAGE_SHIFT),
			   "trim keeps the free half of a pageblock whose other half is a "
			   "buffer: %ld of %ld pages resident", after, (long)(MiB >> UCMA_PAGE_SHIFT));
			y = NULL;
		}
		ucma_release(x);
		if (y)
			ucma_release(y);
	}
}

/*
 * The library starts at the program's first call, which may come when the
 * descriptor table is full (a server that used up RLIMIT_NOFILE).  The
 * THP settings file cannot be opened then (EMFILE): that says nothing
 * about THP, and the zones on THP stay on THP (they fell back to plain
 * pages, and UCMA_VERBOSE never said why).
 */
static void test_fds_full(void)
{
	static int *r;
	pid_t pid;
	int st;

	if (!thp_ok) {
		skip(1, "THP is \"never\" here");
		return;
	}
	r = tu_shared_results(2 * sizeof(*r));
	pid = tu_fork();
	if (pid == 0) {
		struct ucma_config cfg = base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_THP,
						  UCMA_BACKING_THP);
		struct rlimit rl = { 64, 64 };

		ucma_test_reset();
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			_exit(2);
		while (dup(0) >= 0)
			;
		if (ucma_init(&cfg) != 0)
			_exit(1);
		r[0] = ucma_arena_get()->zones[UCMA_ZONE_NORMAL].backing;
		r[1] = ucma_arena_get()->zones[UCMA_ZONE_CMA].backing;
		_exit(0);
	}
	st = tu_wait(pid);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && r[0] == UCMA_BACKING_THP &&
		   r[1] == UCMA_BACKING_THP,
	   "descriptor table full at start-up: both zones still on THP (%s, %s; status %#x)",
	   ucma_backing_str(r[0]), ucma_backing_str(r[1]), st);
	munmap(r, 2 * sizeof(*r));
}

/* In a fork child: a new movable object comes zeroed, and can be written. */
static bool halloc_works(void)
{
	ucma_handle_t h = ucma_halloc(5000, UCMA_H_ZERO);
	char *q = h ? ucma_pin(h, 0) : NULL;

	if (!q || q[4999] != 0)
		return false;
	memset(q, 9, 5000);
	ucma_unpin(h);
	return true;
}

/* vm.overcommit_memory as the library sees it, for the strict cases. */
static int strict_mode(void)
{
	return 2;
}

/*
 * A fork child's view of the CMA area under strict overcommit: @p, a page
 * of it the parent filled with 7s, is there with its data, on private
 * memory (no file), and a new movable object can be written.
 */
static int fork_strict_child(volatile char *p)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		const struct ucma_frames *f = ucma_area_frames(&ucma_arena_get()->areas[0]);

		if (p[0] != 7 || p[UCMA_PAGE_SIZE - 1] != 7)
			_exit(3);
		if (f->fd >= 0 || f->kind != UCMA_FILE_ANON)
			_exit(4);
		if (!halloc_works())
			_exit(5);
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

/*
 * Under strict overcommit accounting (vm.overcommit_memory = 2) the kernel
 * charges a shmem page when it is first touched, and one it refuses then
 * is SIGBUS in whoever touched it, where ucma_halloc() had said yes.  So
 * no CMA area is a shmem file there: private memory, charged at mmap.
 * The sysctl is the system's; the library is told it through its table.
 */
static void test_strict_overcommit(void)
{
	struct ucma_config cfg = base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	int (*mode)(void) = ucma_os.overcommit_mode;
	const struct ucma_frames *f;

	ok(start(&cfg) && ucma_area_frames(&a->areas[0])->kind == UCMA_FILE_SHMEM,
	   "UCMA_HUGEPAGES=none: the CMA area is a shmem file of 4 KiB pages");
	ucma_os.overcommit_mode = strict_mode;
	f = start(&cfg) ? ucma_area_frames(&a->areas[0]) : NULL;
	ok(f && f->fd < 0 && f->kind == UCMA_FILE_ANON && !ucma_frames_expect_lendable(&ucma_opt),
	   "under vm.overcommit_memory=2 it is private memory, no file, nothing to lend (%s)",
	   f ? ucma_frame_file_str(f->kind) : strerror(errno));
	ok(f && touch_zone(UCMA_ZONE_CMA, 2 * UCMA_PAGEBLOCK_PAGES),
	   "under vm.overcommit_memory=2: 4 MiB of the CMA zone written and read back");
	cfg = base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_AUTO, UCMA_BACKING_NONE);
	f = start(&cfg) ? ucma_area_frames(&a->areas[0]) : NULL;
	ok(f && f->kind != UCMA_FILE_SHMEM,
	   "under vm.overcommit_memory=2 the automatic backing makes no shmem file either (%s)",
	   f ? ucma_frame_file_str(f->kind) : strerror(errno));
	ucma_os.overcommit_mode = mode;
}

/*
 * NORMAL on THP starts on plain pages (MADV_NOHUGEPAGE, so a small program
 * stays small even where THP is "always") and asks for huge pages once
 * 16 MiB of it are in use; the backing reported stays "thp".
 */
static void test_thp_grows(void)
{
	struct ucma_config cfg = base_cfg(64 * MiB, 16 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_THP);
	uint32_t pfn[8];
	int n = 0;

	if (!thp_ok) {
		skip(4, "transparent huge pages are \"never\" here");
		return;
	}
	if (!start(&cfg)) {
		ok(0, "thp growth: ucma_init: %s", strerror(errno));
		skip(3, "thp growth: no arena");
		return;
	}
	ok(a->zones[UCMA_ZONE_NORMAL].thp_deferred && has_vmflag(zone_addr(UCMA_ZONE_NORMAL), "nh"),
	   "thp growth: a new NORMAL zone is on plain pages (MADV_NOHUGEPAGE)");
	/* 2 MiB runs up to 14 MiB: still below the 16 MiB threshold. */
	while (n < 7 && (pfn[n] = ucma_pages_alloc(a, UCMA_PAGEBLOCK_PAGES, 0)) != UCMA_PFN_NONE)
		n++;
	ok(n == 7 && a->zones[UCMA_ZONE_NORMAL].thp_deferred,
	   "thp growth: 14 MiB in use, still plain pages (%d runs)", n);
	if (n == 7 && (pfn[n] = ucma_pages_alloc(a, UCMA_PAGEBLOCK_PAGES, 0)) != UCMA_PFN_NONE)
		n++;
	ok(n == 8 && !a->zones[UCMA_ZONE_NORMAL].thp_deferred &&
		   has_vmflag(zone_addr(UCMA_ZONE_NORMAL), "hg"),
	   "thp growth: at 16 MiB the zone asks for huge pages (MADV_HUGEPAGE)");
	while (n > 0)
		ucma_pages_free(a, pfn[--n]);
	ok(strcmp(ucma_backing_name("normal"), "thp") == 0,
	   "thp growth: the backing reported is thp throughout");
}

static void test_names(void)
{
	struct ucma_config cfg = base_cfg(32 * MiB, 0, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	const char *n;

	cfg.cma_areas = "dev:8M,aux:4M";
	if (!start(&cfg)) {
		ok(0, "named areas: ucma_init: %s", strerror(errno));
		skip(4, "no arena");
		return;
	}
	n = ucma_backing_name("dev");
	ok(n && strcmp(n, "none") == 0, "ucma_backing_name(\"dev\") names the area's mode");
	n = ucma_backing_name("aux");
	ok(n && strcmp(n, "none") == 0, "ucma_backing_name(\"aux\") too");
	errno = 0;
	ok(ucma_backing_name("nosuch") == NULL && errno == ENOENT,
	   "an unknown zone name gives NULL with ENOENT");
	errno = 0;
	ok(ucma_backing_name(NULL) == NULL && errno == EINVAL, "NULL gives EINVAL");
}

/* A CMA zone that 1 GiB pages could back starts on a 1 GiB boundary. */
static void test_alignment(void)
{
	struct ucma_config cfg = base_cfg(GiB + 16 * MiB, GiB, UCMA_BACKING_AUTO, UCMA_BACKING_NONE);
	long free1g = ucma_os_hugetlb_free_pages(UCMA_HUGE_1G);

	if (!start(&cfg)) {
		ok(0, "1 GiB CMA zone (address space only): ucma_init: %s", strerror(errno));
		skip(2, "no arena");
		return;
	}
	diag("1 GiB CMA zone, auto: backing %s (1 GiB pool: %ld free)",
	     ucma_backing_name("cma"), free1g);
	ok((uintptr_t)zone_addr(UCMA_ZONE_CMA) % GiB == 0,
	   "auto: a 1 GiB CMA zone starts 1 GiB aligned (%p)", zone_addr(UCMA_ZONE_CMA));
	ok(a->base % UCMA_PAGEBLOCK_SIZE == 0, "the arena base is 2 MiB aligned");
	cfg = base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	ok(start(&cfg) && a->base % UCMA_PAGEBLOCK_SIZE == 0 &&
		   (uintptr_t)zone_addr(UCMA_ZONE_CMA) % UCMA_PAGEBLOCK_SIZE == 0,
	   "plain arena and CMA zone are 2 MiB aligned");
}

/* ------------------------------------------------------------------------ */
/* NUMA placement                                                            */
/* ------------------------------------------------------------------------ */

static int policy_of(void *addr, unsigned long *mask)
{
	int mode = -1;

	*mask = 0;
	if (get_mempolicy(&mode, mask, sizeof(*mask) * 8, addr, MPOL_F_ADDR) != 0)
		return -1;
	return mode;
}

/* Run ucma_init(@cfg) with fd 2 captured; returns its result, the text in @buf. */
static int init_captured(const struct ucma_config *cfg, char *buf, size_t len)
{
	FILE *cap = tmpfile();
	int saved, rc, err;
	size_t n;

	fflush(stderr);
	saved = dup(STDERR_FILENO);
	if (!cap || saved < 0 || dup2(fileno(cap), STDERR_FILENO) < 0)
		bail_out("cannot capture stderr: %s", strerror(errno));
	ucma_test_reset();
	a = NULL;
	rc = ucma_init(cfg);
	err = errno;
	if (rc == 0)
		a = ucma_arena_get();
	dup2(saved, STDERR_FILENO);
	close(saved);
	rewind(cap);
	n = fread(buf, 1, len - 1, cap);
	buf[n] = '\0';
	fclose(cap);
	for (char *p = buf, *nl; (nl = strchr(p, '\n')); p = nl + 1)
		diag("  stderr: %.*s", (int)(nl - p), p);
	errno = err;
	return rc;
}

static void test_node(void)
{
	struct ucma_config cfg = base_cfg(16 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	unsigned long mask = 0;
	char msg[2048];
	int mode;

	if (numa_available() < 0 || numa_max_node() != 0) {
		skip(10, "the NUMA checks expect one node (libnuma: %s, max node %d)",
		     numa_available() < 0 ? "unavailable" : "available",
		     numa_available() < 0 ? -1 : numa_max_node());
		return;
	}
	setenv("UCMA_NODE", "0", 1);
	ok(start(&cfg) && a->node == 0, "UCMA_NODE=0: placement on node 0");
	unsetenv("UCMA_NODE");
	cfg.node = UCMA_NODE_ID(0);
	ok(start(&cfg) && a->node == 0, "ucma_config.node = UCMA_NODE_ID(0): node 0");
	mode = a ? policy_of(zone_addr(UCMA_ZONE_CMA), &mask) : -1;
	ok(mode == MPOL_PREFERRED && mask == 1, "the arena's policy is preferred node 0 "
	   "(mode %d mask %#lx)", mode, mask);
	ok(a && touch_zone(UCMA_ZONE_CMA, 64) && touch_zone(UCMA_ZONE_NORMAL, 64),
	   "memory placed on node 0 is usable");

	cfg.node = UCMA_NODE_LOCAL;
	ok(start(&cfg) && a->node == 0, "UCMA_NODE=local resolves to node 0");
	mode = a ? policy_of(zone_addr(UCMA_ZONE_NORMAL), &mask) : -1;
	ok(mode == MPOL_PREFERRED && mask == 1 && touch_zone(UCMA_ZONE_NORMAL, 64),
	   "local: preferred node 0, memory usable");

	cfg.node = UCMA_NODE_INTERLEAVE;
	ok(start(&cfg) && a->node == UCMA_NODE_INTERLEAVE, "UCMA_NODE=interleave accepted");
	mode = a ? policy_of(zone_addr(UCMA_ZONE_CMA), &mask) : -1;
	ok(mode == MPOL_INTERLEAVE && mask == 1 && touch_zone(UCMA_ZONE_CMA, 64),
	   "interleave over all (one) nodes, memory usable");

	cfg.node = UCMA_NODE_ID(5);
	cfg.strict = 1;
	ok(init_captured(&cfg, msg, sizeof(msg)) == -1 && errno == EINVAL &&
		   strstr(msg, "node") != NULL,
	   "node 5 with strict: ucma_init fails with EINVAL and names the node");
	cfg.strict = 0;
	ok(init_captured(&cfg, msg, sizeof(msg)) == 0 && a && a->node == UCMA_NODE_DEFAULT &&
		   strstr(msg, "node") != NULL,
	   "node 5 without strict: one message, the arena starts with no placement");
}

/* ------------------------------------------------------------------------ */
/* UCMA_CMA_DONTFORK and UCMA_POPULATE                                       */
/* ------------------------------------------------------------------------ */

static void segv_exit(int sig)
{
	(void)sig;
	_exit(42);
}

/*
 * Fork; the child reports whether the CMA range is in its maps (exit bit 0)
 * and then writes to @p, a page of an allocated CMA run: exit 42 from the
 * SIGSEGV handler when it is not mapped.  Returns the wait status.
 */
static int fork_and_touch(volatile char *p, bool *child_mapped)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct sigaction sa = { .sa_handler = segv_exit };

		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		if (mapped((const void *)p))
			_exit(3);	/* mapped: the write below must work */
		*p = 1;
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	*child_mapped = WIFEXITED(status) && WEXITSTATUS(status) == 3;
	return status;
}

/*
 * Fork with UCMA_CMA_DONTFORK, the parent having written 7 at @p in a CMA
 * run: the child must not see the parent's CMA memory, yet its new
 * movable and contiguous allocations must work (the library maps the CMA
 * areas again in the child).  Child exit status: 0 good, 4 the parent's
 * data is there, 5 a movable object fails, 6 a contiguous buffer fails,
 * 42 a fault.  Returns the wait status.
 */
static int fork_dontfork(volatile char *p)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct sigaction sa = { .sa_handler = segv_exit };
		char *c;

		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		if (*p == 7)
			_exit(4);
		if (!halloc_works())
			_exit(5);
		c = ucma_alloc(64 * 1024, 0, UCMA_ALLOC_ZERO);
		if (!c || c[100] != 0)
			_exit(6);
		c[100] = 1;
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

static void test_dontfork(void)
{
	struct ucma_config cfg = base_cfg(16 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	bool child_mapped = false;
	uint32_t pfn;
	int status;

	if (!start(&cfg)) {
		ok(0, "dontfork: ucma_init: %s", strerror(errno));
		skip(2, "no arena");
		return;
	}
	pfn = ucma_pages_alloc(a, 1, UCMA_GFP_MOVABLE);
	status = fork_and_touch(ucma_pfn_to_addr(a, pfn), &child_mapped);
	ok(status != -1 && child_mapped, "without UCMA_CMA_DONTFORK the child has the CMA range");
	ucma_pages_free(a, pfn);

	cfg.cma_dontfork = 1;
	if (!start(&cfg)) {
		ok(0, "dontfork: ucma_init: %s", strerror(errno));
		skip(1, "no arena");
		return;
	}
	pfn = ucma_pages_alloc(a, 1, UCMA_GFP_MOVABLE);
	if (pfn != UCMA_PFN_NONE)
		memset(ucma_pfn_to_addr(a, pfn), 7, UCMA_PAGE_SIZE);
	status = pfn != UCMA_PFN_NONE ? fork_dontfork(ucma_pfn_to_addr(a, pfn)) : -1;
	ok(pfn != UCMA_PFN_NONE && ucma_pfn_zone(a, pfn)->id == UCMA_ZONE_CMA &&
		   WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "with UCMA_CMA_DONTFORK the child sees none of the parent's CMA memory, and its "
	   "own movable and contiguous allocations work (status %#x)",
	   status);
	ok(touch_zone(UCMA_ZONE_CMA, 16), "the parent still uses its CMA zone");
	ucma_pages_free(a, pfn);
}

static long rss_kb(void)
{
	long size, resident;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_populate(void)
{
	const size_t arena = 16 * MiB;
	struct ucma_config cfg = base_cfg(arena, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	long before, plain, populated;

	ucma_test_reset();
	before = rss_kb();
	start(&cfg);
	plain = rss_kb() - before;
	ucma_test_reset();
	cfg.populate = 1;
	before = rss_kb();
	start(&cfg);
	populated = rss_kb() - before;
	diag("RSS growth at start-up: %ld kB plain, %ld kB with UCMA_POPULATE (arena %zu kB)",
	     plain, populated, arena >> 10);
	ok(a && populated >= (long)(arena >> 10) * 95 / 100,
	   "UCMA_POPULATE: RSS grows by about the arena (%ld of %zu kB)", populated, arena >> 10);
	ok(plain < (long)(arena >> 10) / 2, "without it the arena costs little (%ld kB)", plain);
}

/* ------------------------------------------------------------------------ */
/* Hugetlb cases, each in a child process holding the pool lock             */
/* ------------------------------------------------------------------------ */

#define HUGE2M_CHECKS (3 * CASE_CHECKS + 6)

/* Is every page of [p, p + len) physically where the first one says? */
static bool phys_verified(const char *p, size_t len)
{
	uint64_t first, cur;

	if (ucma_virt2phys(p, &first) != 0)
		return false;
	for (size_t off = UCMA_PAGE_SIZE; off < len; off += UCMA_PAGE_SIZE)
		if (ucma_virt2phys(p + off, &cur) != 0 || cur != first + off)
			return false;
	return true;
}

/*
 * UCMA_ALLOC_PHYS_CONTIG over hugetlb pages (root, so frames are known):
 * one aligned 2 MiB page always is contiguous; 8 MiB is only when the
 * kernel happened to hand out adjacent pages, and must then be verified,
 * or fail with ENOMEM, quickly either way (each hugetlb page boundary is
 * checked once, not every page offset of the area).
 */
static void check_phys_contig(void)
{
	uint64_t t0;
	void *p;
	int err;

	p = ucma_alloc(2 * MiB, 2 * MiB, UCMA_ALLOC_PHYS_CONTIG);
	ok(p && phys_verified(p, 2 * MiB),
	   "PHYS_CONTIG: an aligned 2 MiB buffer on hugetlb is physically contiguous");
	if (p)
		ucma_release(p);
	t0 = tu_now_ns();
	p = ucma_alloc(8 * MiB, 0, UCMA_ALLOC_PHYS_CONTIG);
	err = errno;
	ok(((p && phys_verified(p, 8 * MiB)) || (!p && err == ENOMEM)) &&
		   tu_now_ns() - t0 < 10ull * 1000 * 1000 * 1000,
	   "PHYS_CONTIG: 8 MiB is verified contiguous or ENOMEM, in %.3f s (%s)",
	   (double)(tu_now_ns() - t0) / 1e9, p ? "contiguous" : strerror(err));
	if (p)
		ucma_release(p);
}

static void case_hugetlb_2m(void)
{
	char why[256];
	struct ucma_config cfg;
	uint32_t pfn;
	int status;

	/* 16 MiB CMA + 16 MiB NORMAL: 16 pages of 2 MiB. */
	if (tu_hugepages_reserve(2048, 16, why, sizeof(why)) != 0) {
		skip(HUGE2M_CHECKS, "hugetlb 2M: %s", why);
		return;
	}
	check_config("cma 2M", base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_HUGETLB_2M,
					UCMA_BACKING_NONE),
		     UCMA_BACKING_HUGETLB_2M, UCMA_BACKING_NONE);
	check_config("normal 2M", base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_NONE,
					   UCMA_BACKING_HUGETLB_2M),
		     UCMA_BACKING_NONE, UCMA_BACKING_HUGETLB_2M);
	/* auto with a pool that has the pages (1 GiB pages need a 1 GiB zone) */
	check_config("auto, 2M pool", base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_AUTO,
					       UCMA_BACKING_HUGETLB_2M),
		     UCMA_BACKING_HUGETLB_2M, UCMA_BACKING_HUGETLB_2M);

	/* Private hugetlb memory and fork: DONTFORK spares the pool. */
	cfg = base_cfg(32 * MiB, 16 * MiB, UCMA_BACKING_HUGETLB_2M, UCMA_BACKING_NONE);
	cfg.cma_dontfork = 1;
	ok(start(&cfg) && a->zones[UCMA_ZONE_CMA].backing == UCMA_BACKING_HUGETLB_2M,
	   "cma 2M with UCMA_CMA_DONTFORK");
	pfn = a ? ucma_pages_alloc(a, 1, UCMA_GFP_MOVABLE) : UCMA_PFN_NONE;
	if (pfn == UCMA_PFN_NONE) {
		ok(0, "a CMA page for the fork check");
		ok(0, "the parent's hugetlb CMA zone after fork");
		return;
	}
	memset(ucma_pfn_to_addr(a, pfn), 7, UCMA_PAGE_SIZE);
	status = fork_dontfork(ucma_pfn_to_addr(a, pfn));
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "the child of a fork gets fresh CMA memory, not the parent's hugetlb pages "
	   "(status %#x)", status);
	ok(((char *)ucma_pfn_to_addr(a, pfn))[0] == 7 && touch_zone(UCMA_ZONE_CMA, 512),
	   "the parent's hugetlb CMA zone is intact after fork");
	ucma_pages_free(a, pfn);

	/* Under strict overcommit the child's copy of a hugetlb area goes
	 * to private memory, not to a shmem file (test_strict_overcommit()). */
	cfg.cma_dontfork = 0;
	ucma_os.overcommit_mode = strict_mode;
	pfn = start(&cfg) ? ucma_pages_alloc(a, 1, UCMA_GFP_MOVABLE) : UCMA_PFN_NONE;
	if (pfn != UCMA_PFN_NONE)
		memset(ucma_pfn_to_addr(a, pfn), 7, UCMA_PAGE_SIZE);
	status = pfn != UCMA_PFN_NONE ? fork_strict_child(ucma_pfn_to_addr(a, pfn)) : -1;
	ucma_os.overcommit_mode = real_overcommit_mode;
	ok(pfn != UCMA_PFN_NONE && ucma_area_frames(&a->areas[0])->kind == UCMA_FILE_HUGETLB &&
		   WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "under vm.overcommit_memory=2 a hugetlb area stays a file, and a fork child gets "
	   "its data on private memory, no shmem file (status %#x)", status);
	if (pfn != UCMA_PFN_NONE)
		ucma_pages_free(a, pfn);
	check_phys_contig();
}

/*
 * The overcommit limit counts as pages to be had: with none free in the
 * pool and nr_overcommit_hugepages raised, a CMA area asks for hugetlb
 * pages and gets surplus pages (it used to fall back to THP).  The limit
 * goes back to what it was, under the test lock of the pool.
 */
#define OVERCOMMIT_CHECKS (CASE_CHECKS + 1)

static void case_hugetlb_overcommit(void)
{
	static const char over_path[] =
		"/sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages";
	long over, before;
	int lockfd;
	void *probe;

	if (geteuid() != 0 || access(over_path, W_OK) != 0) {
		skip(OVERCOMMIT_CHECKS, "hugetlb overcommit: needs root and a 2 MiB pool");
		return;
	}
	lockfd = open(TU_HUGEPAGES_LOCK, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX) != 0) {
		skip(OVERCOMMIT_CHECKS, "hugetlb overcommit: cannot lock the pool");
		return;
	}
	over = tu_read_long(over_path);
	before = ucma_os_hugetlb_free_pages(UCMA_PAGEBLOCK_SIZE);
	if (over < 0 || before < 0 || before >= 8 || tu_write_long(over_path, over + 16) != 0) {
		skip(OVERCOMMIT_CHECKS, "hugetlb overcommit: pool not as needed (%ld free, limit %ld)",
		     before, over);
		close(lockfd);
		return;
	}
	ok(ucma_os_hugetlb_free_pages(UCMA_PAGEBLOCK_SIZE) >= before + 8,
	   "the overcommit limit counts: %ld pages to be had, %ld before",
	   ucma_os_hugetlb_free_pages(UCMA_PAGEBLOCK_SIZE), before);
	/* Can the kernel make 8 surplus pages now (memory not too fragmented)? */
	probe = mmap(NULL, 16 * MiB, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
	if (probe == MAP_FAILED) {
		skip(CASE_CHECKS, "hugetlb overcommit: the kernel made no surplus pages");
	} else {
		munmap(probe, 16 * MiB);
		check_config("cma 2M on surplus pages", base_cfg(32 * MiB, 16 * MiB,
								 UCMA_BACKING_HUGETLB_2M,
								 UCMA_BACKING_NONE),
			     UCMA_BACKING_HUGETLB_2M, UCMA_BACKING_NONE);
	}
	ucma_test_reset();
	tu_write_long(over_path, over);
	close(lockfd);
}

#define HUGE1G_CHECKS (3 * CASE_CHECKS + 2)

static void case_hugetlb_1g(void)
{
	char why[256];

	if (getenv("UCMA_TEST_NO_1G")) {
		skip(HUGE1G_CHECKS, "hugetlb 1G: UCMA_TEST_NO_1G is set");
		return;
	}
	if (tu_hugepages_reserve(1048576, 1, why, sizeof(why)) != 0) {
		skip(HUGE1G_CHECKS, "hugetlb 1G: %s", why);
		return;
	}
	check_config("cma 1G", base_cfg(GiB + 16 * MiB, GiB, UCMA_BACKING_HUGETLB_1G,
					UCMA_BACKING_NONE),
		     UCMA_BACKING_HUGETLB_1G, UCMA_BACKING_NONE);
	ok(a && (uintptr_t)zone_addr(UCMA_ZONE_CMA) % GiB == 0,
	   "a CMA zone on 1 GiB pages starts 1 GiB aligned (%p)",
	   a ? zone_addr(UCMA_ZONE_CMA) : NULL);
	check_config_touch("auto, 1G pool", base_cfg(GiB + 16 * MiB, GiB, UCMA_BACKING_AUTO,
						     UCMA_BACKING_NONE),
			   UCMA_BACKING_HUGETLB_1G, UCMA_BACKING_NONE, false);
	check_config_touch("normal 1G", base_cfg(GiB + 16 * MiB, 16 * MiB, UCMA_BACKING_NONE,
						 UCMA_BACKING_HUGETLB_1G),
			   UCMA_BACKING_NONE, UCMA_BACKING_HUGETLB_1G, true);
	ok(a && a->base % GiB == 0, "a NORMAL zone on 1 GiB pages starts 1 GiB aligned (%p)",
	   a ? (void *)a->base : NULL);
}

int main(void)
{
	plan_no_plan();
	tu_clear_env();
	thp_ok = ucma_os_thp_available();
	real_overcommit_mode = ucma_os.overcommit_mode;
	diag("THP %s; free hugetlb pages: 2M %ld, 1G %ld; %s", thp_ok ? "usable" : "never",
	     ucma_os_hugetlb_free_pages(UCMA_PAGEBLOCK_SIZE), ucma_os_hugetlb_free_pages(GiB),
	     geteuid() == 0 ? "root" : "not root");

	test_trim_without_malloc();
	test_plain_and_thp();
	test_strict_overcommit();
	test_fds_full();
	test_thp_grows();
	test_names();
	test_alignment();
	test_node();
	test_dontfork();
	test_populate();
	ucma_test_reset();
	tap_in_child("hugetlb 2M", case_hugetlb_2m, ucma_test_reset);
	tap_in_child("hugetlb overcommit", case_hugetlb_overcommit, ucma_test_reset);
	tap_in_child("hugetlb 1G", case_hugetlb_1g, ucma_test_reset);
	return done();
}
