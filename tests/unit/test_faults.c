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
 *    the zone invariants hold, and a later purge returns them;
 *  - the files behind the CMA areas cannot be made (memfd_create or
 *    ftruncate refused): each step of the chain falls back to private
 *    memory of the same kind, without a message, and works as before
 *    frames; fallocate of a hugetlb file fails: the next step is taken;
 *  - the child of a fork cannot copy the CMA areas (pwrite refused, or no
 *    file for it): it copies into private memory, or says why and aborts,
 *    never runs on with missing data.
 *
 * Messages go to fd 2, which each case captures to count them.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "pcp.h"

#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frames.h"
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
	int advice_errno;		/* with this errno (0: EINVAL) */
	long slow_dontneed_ns;		/* MADV_DONTNEED sleeps this long first */
	bool fail_mbind;
	bool fail_munlock;		/* munlock fails with ENOMEM */
	bool fail_memfd;		/* memfd_create fails with EMFILE */
	bool fail_ftruncate;		/* ftruncate fails with EFBIG */
	bool fail_fallocate;		/* fallocate fails with ENOSPC */
	bool fail_pwrite;		/* pwrite fails with ENOSPC */
} fault;

/* What the fake calls saw. */
static struct {
	int meta_mmaps;			/* metadata mmaps attempted */
	int hugetlb_mmaps;		/* MAP_HUGETLB attempts */
	int advice_failed;		/* madvise calls failed on purpose */
	int mbind_calls;
	int hugetlb_files;		/* memfd_create(MFD_HUGETLB) attempts */
	int memfds;			/* memfd_create attempts */
	int fallocates;
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

static void purge_hook(void *addr);
/* Called at the first MADV_DONTNEED, then cleared. */
static void (*on_first_dontneed)(void);

static int fake_madvise(void *addr, size_t len, int advice)
{
	if (advice == MADV_DONTNEED) {
		void (*fn)(void) = on_first_dontneed;

		on_first_dontneed = NULL;
		if (fn)
			fn();
		purge_hook(addr);
		if (fault.slow_dontneed_ns) {
			struct timespec ts = { 0, fault.slow_dontneed_ns };

			nanosleep(&ts, NULL);
		}
	}
	for (int i = 0; i < 4 && fault.fail_advice[i]; i++) {
		if (fault.fail_advice[i] == advice) {
			seen.advice_failed++;
			errno = fault.advice_errno ? fault.advice_errno : EINVAL;
			return -1;
		}
	}
	return real.madvise(addr, len, advice);
}

static int fake_munlock(const void *addr, size_t len)
{
	if (fault.fail_munlock) {
		errno = ENOMEM;
		return -1;
	}
	return real.munlock(addr, len);
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

static int fake_memfd_create(const char *name, unsigned flags)
{
	seen.memfds++;
	if (flags & MFD_HUGETLB) {
		seen.hugetlb_files++;
		if (fault.refuse_hugetlb) {
			errno = ENOMEM;
			return -1;
		}
	}
	if (fault.fail_memfd) {
		errno = EMFILE;
		return -1;
	}
	return real.memfd_create(name, flags);
}

static int fake_ftruncate(int fd, off_t len)
{
	if (fault.fail_ftruncate) {
		errno = EFBIG;
		return -1;
	}
	return real.ftruncate(fd, len);
}

static int fake_fallocate(int fd, int mode, off_t off, off_t len)
{
	seen.fallocates++;
	if (fault.fail_fallocate) {
		errno = ENOSPC;
		return -1;
	}
	return real.fallocate(fd, mode, off, len);
}

static ssize_t fake_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	if (fault.fail_pwrite) {
		errno = ENOSPC;
		return -1;
	}
	return real.pwrite(fd, buf, len, off);
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
	ucma_os.munlock = fake_munlock;
	ucma_os.hugetlb_free_pages = fake_hugetlb_free_pages;
	ucma_os.memfd_create = fake_memfd_create;
	ucma_os.ftruncate = fake_ftruncate;
	ucma_os.fallocate = fake_fallocate;
	ucma_os.pwrite = fake_pwrite;
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

/* ucma_init() of @cfg with UCMA_DECAY_MS=@decay_ms; false, reported as a
 * failure of @what, when it fails. */
static bool init_decay(const struct ucma_config *cfg, const char *decay_ms, const char *what)
{
	int rc, err;

	setenv("UCMA_DECAY_MS", decay_ms, 1);
	rc = init_captured(cfg, false);
	err = errno;
	unsetenv("UCMA_DECAY_MS");
	if (rc != 0 || !a) {
		ok(0, "%s: ucma_init: %s", what, strerror(err));
		return false;
	}
	return true;
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
	   "MAP_HUGETLB and memfd_create refuses MFD_HUGETLB: ucma_init succeeds");
	ok(seen.hugetlb_mmaps >= 2 && seen.hugetlb_files >= 1,
	   "both zones tried hugetlb (%d mappings, %d files)", seen.hugetlb_mmaps,
	   seen.hugetlb_files);
	ok(a && names_are(thp_or_none(), thp_or_none()), "both zones fell back to %s",
	   thp_or_none());
	ok(msg[0] == '\0', "falling back is no error: no message");
	ok(a && arena_works(), "the reservation is intact: both zones usable");

	/* UCMA_STRICT=1 asks to hear of settings not honoured: one line per
	 * zone, naming the variable, what was asked and what it got. */
	cfg.strict = 1;
	os_fake();
	fault.fake_hugetlb_free = 1 << 20;
	fault.refuse_hugetlb = true;
	ok(init_captured(&cfg, false) == 0 && a &&
	   strstr(msg, "UCMA_HUGEPAGES_NORMAL=hugetlb-2M: not available here") &&
	   !strstr(msg, "UCMA_HUGEPAGES="),
	   "strict: the NORMAL zone's fallback is said, the CMA zone asked for nothing");
	cfg.strict = 0;

	/* 1 GiB CMA zone asking for 1 GiB pages: 1G and 2M refused, each as
	 * a file and then as private memory. */
	cfg = cfg_of(GiB + 16 * MiB, GiB, UCMA_BACKING_HUGETLB_1G, UCMA_BACKING_NONE);
	seen.hugetlb_mmaps = seen.hugetlb_files = 0;
	ok(init_captured(&cfg, false) == 0 && a && seen.hugetlb_mmaps == 2 &&
		   seen.hugetlb_files == 2 && names_are(thp_or_none(), "none") && arena_works(),
	   "1G then 2M refused for a 1 GiB CMA zone: %s, usable (%d mappings, %d files)",
	   thp_or_none(), seen.hugetlb_mmaps, seen.hugetlb_files);
	os_restore();
}

/* The cma_<area>_file statistic of the default area, or -1. */
static long area_file(void)
{
	uint64_t v;

	return ucma_stat("cma_default_file", &v) == 0 ? (long)v : -1;
}

/*
 * No file for the CMA areas: the chain goes on with private memory of the
 * same kind, silently, and the arena works as before frames existed;
 * movable objects and a contiguous buffer there survive a fork in the
 * child (copy-on-write, the old rule).
 */
static void test_no_file(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	static const char *const how[] = { "memfd_create", "ftruncate" };

	for (int i = 0; i < 2; i++) {
		os_fake();
		fault.fail_memfd = i == 0;
		fault.fail_ftruncate = i == 1;
		ok(init_captured(&cfg, false) == 0 && a && msg[0] == '\0',
		   "%s fails: ucma_init works, no message", how[i]);
		ok(a && seen.memfds >= 1 && names_are("none", "none") && area_file() == 0 &&
			   a->areas[0].frames->nr_frames == 0 && arena_works(),
		   "%s fails: the CMA area is private memory without frames, and works", how[i]);
		os_restore();
	}
	{
		char *p = ucma_alloc(64 * 1024, 0, UCMA_ALLOC_ZERO);
		int status = -1;
		pid_t pid;

		if (p)
			memset(p, 0x5a, 64 * 1024);
		fflush(NULL);
		pid = p ? fork() : -1;
		if (pid == 0)
			_exit(p[4095] == 0x5a && p[65535] == 0x5a ? 0 : 1);
		if (pid > 0)
			waitpid(pid, &status, 0);
		ok(p && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		   "without frames a child still sees the parent's buffer (status %#x)", status);
		if (p)
			ucma_release(p);
	}

	/* A hugetlb file that cannot be allocated: the next step. */
	cfg = cfg_of(32 * MiB, 16 * MiB, UCMA_BACKING_HUGETLB_2M, UCMA_BACKING_NONE);
	os_fake();
	fault.fake_hugetlb_free = 1 << 20;
	fault.fail_fallocate = true;
	fault.refuse_hugetlb = false;
	ok(init_captured(&cfg, false) == 0 && a && msg[0] == '\0',
	   "fallocate of the hugetlb file fails: ucma_init works, no message");
	ok(a && (seen.fallocates >= 1 || seen.hugetlb_files >= 1) &&
		   strcmp(ucma_backing_name("cma"), "hugetlb-2M") != 0 && arena_works(),
	   "the CMA area went down the chain (%s, %d fallocates) and works",
	   a ? ucma_backing_name("cma") : "-", seen.fallocates);
	os_restore();
}

/*
 * The child of a fork must copy the parent's live CMA memory.  pwrite into
 * its new file refused: the child says so and aborts (it must not run on
 * with zeros where its objects are).  No file for the child: it copies
 * into private memory and its data is intact.
 */
static void test_fork_copy_fails(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	char *p;

	if (init_captured(&cfg, false) != 0 || !a || area_file() != 1) {
		skip(4, "the CMA area has no shmem file here (file kind %ld)", area_file());
		return;
	}
	p = ucma_alloc(256 * 1024, 0, 0);
	if (!p) {
		ok(0, "a contiguous buffer for the fork checks: %s", strerror(errno));
		skip(3, "no buffer");
		return;
	}
	memset(p, 0x3c, 256 * 1024);
	for (int i = 0; i < 3; i++) {
		int fds[2], status = -1, saved;
		char why[512] = "";
		ssize_t n = 0;
		pid_t pid;

		/* The child speaks from inside fork(): its fd 2 is the pipe. */
		fflush(NULL);
		saved = dup(STDERR_FILENO);
		if (pipe(fds) != 0 || saved < 0 || dup2(fds[1], STDERR_FILENO) < 0)
			bail_out("pipe: %s", strerror(errno));
		os_fake();
		fault.fail_pwrite = i == 0;
		fault.fail_memfd = i == 1;
		if (i == 2)
			fault.fail_advice[0] = MADV_DOFORK;
		pid = fork();
		if (pid == 0)
			_exit(p[0] == 0x3c && p[256 * 1024 - 1] == 0x3c ? 0 : 1);
		os_restore();
		dup2(saved, STDERR_FILENO);
		close(saved);
		close(fds[1]);
		if (pid > 0) {
			n = read(fds[0], why, sizeof(why) - 1);
			waitpid(pid, &status, 0);
		}
		close(fds[0]);
		why[n > 0 ? n : 0] = '\0';
		if (i == 0)
			ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT &&
				   strstr(why, "fork: cannot copy") != NULL,
			   "pwrite refused in the child: it aborts, saying why (status %#x: %.80s)",
			   status, why);
		else if (i == 1)
			ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			   "no file for the child: it copies into private memory, data intact "
			   "(status %#x)", status);
		else
			ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			   "MADV_DOFORK refused in the parent: the child reads the area through "
			   "its file, data intact (status %#x: %.80s)", status, why);
	}
	ok(p[0] == 0x3c && ucma_release(p) == 0, "the parent's buffer is untouched");
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

/*
 * UCMA_ALLOC_POPULATE when the kernel cannot give the pages (ENOMEM from
 * MADV_POPULATE_WRITE: a full shmem or hugetlb file, a cgroup's limit):
 * ucma_alloc() fails with ENOMEM and keeps nothing.  It returned the
 * buffer unpopulated, to fail at first touch.  A kernel without the
 * advice (EINVAL) gets its pages written one by one instead.
 */
static void test_populate_refused(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 16 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	unsigned char vec[256];
	bool resident = true;
	char *p;

	os_fake();
	if (init_captured(&cfg, false) != 0 || !a) {
		ok(0, "ucma_init: %s", strerror(errno));
		os_restore();
		return;
	}
	fault.fail_advice[0] = MADV_POPULATE_WRITE;
	fault.advice_errno = ENOMEM;
	errno = 0;
	p = ucma_alloc(MiB, 0, UCMA_ALLOC_POPULATE);
	ok(!p && errno == ENOMEM && a->areas[0].nr_allocs == 0,
	   "MADV_POPULATE_WRITE refused with ENOMEM: ucma_alloc(UCMA_ALLOC_POPULATE) fails "
	   "with ENOMEM, nothing kept (%p, %s)", (void *)p, strerror(errno));
	if (p)
		ucma_release(p);
	fault.advice_errno = EINVAL;
	p = ucma_alloc(MiB, 0, UCMA_ALLOC_POPULATE);
	if (p && mincore(p, MiB, vec) == 0)
		for (size_t i = 0; i < MiB / UCMA_PAGE_SIZE; i++)
			resident &= vec[i] & 1;
	ok(p && resident, "a kernel without MADV_POPULATE_WRITE: every page written in instead");
	if (p)
		ucma_release(p);
	fault.fail_advice[0] = 0;

	/* A locked buffer that cannot be unlocked is not given back: lent
	 * on, its pages would stay locked for good. */
	p = ucma_alloc(MiB, 0, UCMA_ALLOC_MLOCK);
	if (!p) {
		skip(1, "UCMA_ALLOC_MLOCK: %s", strerror(errno));
	} else {
		int rc, err;

		fault.fail_munlock = true;
		rc = ucma_release(p);
		err = errno;
		fault.fail_munlock = false;
		ok(rc == -1 && err == ENOMEM && ucma_alloc_size(p) == MiB &&
			   ucma_release(p) == 0 && a->areas[0].nr_allocs == 0,
		   "munlock refused: ucma_release fails with its errno, the buffer stays "
		   "allocated, and a second release gives it back (%d, %s)", rc, strerror(err));
	}
	os_restore();
}

/* Dirty free pages of zone @z (free heads carrying UCMA_PF_DIRTY). */
/* Dirty free pages of @z in blocks of order @lo to @hi - 1. */
static uint64_t dirty_in_orders(struct ucma_zone *z, unsigned lo, unsigned hi)
{
	uint64_t n = 0;

	pthread_mutex_lock(&z->lock);
	for (unsigned o = lo; o < hi; o++)
		for (int mt = 0; mt < UCMA_MT_NR; mt++)
			for (uint32_t pfn = z->free_area[o].head[mt]; pfn != UCMA_PFN_NONE;
			     pfn = a->pages[pfn].link.next)
				if (a->pages[pfn].flags & UCMA_PF_DIRTY)
					n += 1u << o;
	pthread_mutex_unlock(&z->lock);
	return n;
}

static uint64_t dirty_pages(struct ucma_zone *z)
{
	return dirty_in_orders(z, 0, UCMA_NR_ORDERS);
}

/* @n runs of 16 pages of NORMAL zone @z written and freed: dirty free
 * blocks on the buddy lists (drained from the per-CPU lists, as a purge
 * of everything would). */
static void dirty_runs(struct ucma_zone *z, int n)
{
	uint32_t pfns[64];

	for (int i = 0; i < n && i < 64; i++) {
		pfns[i] = ucma_pages_alloc(a, 16, UCMA_GFP_UNMOVABLE);
		if (pfns[i] != UCMA_PFN_NONE)
			memset(ucma_pfn_to_addr(a, pfns[i]), 0xa5, 16 * UCMA_PAGE_SIZE);
	}
	for (int i = 0; i < n && i < 64; i++)
		if (pfns[i] != UCMA_PFN_NONE)
			ucma_pages_free(a, pfns[i]);
	ucma_pcp_drain_zone(z);
}

/*
 * The periodic purge of a zone on transparent huge pages gives back whole
 * pageblocks only; before the zone asks for huge pages (or without them),
 * blocks of 64 KiB and more go too.  One page stays allocated at the
 * front, so the freed runs merge into blocks smaller than a pageblock.
 */
static void test_purge_thp(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_THP);
	struct ucma_zone *z;
	uint32_t hold;
	uint64_t small0, small1, small2, whole1;

	if (!thp_ok) {
		skip(2, "no transparent huge pages here");
		return;
	}
	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;
	/* No decay: purged by hand below. */
	if (!init_decay(&cfg, "0", "purge on THP")) {
		skip(1, "no arena");
		return;
	}
	z = &a->zones[UCMA_ZONE_NORMAL];
	if (z->backing != UCMA_BACKING_THP) {
		skip(2, "the NORMAL zone is not on THP (%d)", z->backing);
		return;
	}
	hold = ucma_pages_alloc(a, 1, UCMA_GFP_UNMOVABLE);
	dirty_runs(z, 32);
	small0 = dirty_in_orders(z, UCMA_PURGE_MIN_ORDER, UCMA_PAGEBLOCK_ORDER);

	/* The zone has asked for huge pages (it grew, zone.c thp_grow()). */
	pthread_mutex_lock(&z->lock);
	z->thp_deferred = false;
	pthread_mutex_unlock(&z->lock);
	ucma_zone_purge(z, false);	/* the blocks' epoch passes */
	ucma_zone_purge(z, false);
	small1 = dirty_in_orders(z, UCMA_PURGE_MIN_ORDER, UCMA_PAGEBLOCK_ORDER);
	whole1 = dirty_in_orders(z, UCMA_PAGEBLOCK_ORDER, UCMA_NR_ORDERS);
	ok(small0 >= 16 * 16 && small1 == small0 && whole1 == 0,
	   "on huge pages the periodic purge leaves the %llu dirty pages in blocks of 64 KiB "
	   "to 1 MiB (%llu left) and gives back whole pageblocks (%llu dirty left)",
	   (unsigned long long)small0, (unsigned long long)small1, (unsigned long long)whole1);

	pthread_mutex_lock(&z->lock);
	z->thp_deferred = true;
	pthread_mutex_unlock(&z->lock);
	ucma_zone_purge(z, false);
	small2 = dirty_in_orders(z, UCMA_PURGE_MIN_ORDER, UCMA_PAGEBLOCK_ORDER);
	ok(small2 == 0 && zones_ok(),
	   "on small pages it gives those back (%llu dirty left)", (unsigned long long)small2);
	if (hold != UCMA_PFN_NONE)
		ucma_pages_free(a, hold);
}

static void test_purge_fails(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	struct ucma_zone *z;
	uint32_t pfns[64];
	uint64_t dirty, purged_before;
	bool zero = true;

	/* Purging private memory: a pageblock backed by a CMA frame lent to
	 * the heap is not purged but given back (test_lend.c). */
	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;

	/* No decay while the test frees: it purges by hand. */
	if (!init_decay(&cfg, "0", "purge")) {
		skip(5, "no arena");
		return;
	}
	z = &a->zones[UCMA_ZONE_NORMAL];
	dirty_runs(z, 64);
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

/*
 * A full purge gives its blocks back to the kernel in batches, with no
 * zone lock held: test_purge_batches() looks from inside its madvise
 * calls (purge_hook(), in the purging thread, a batch held).
 */
static struct {
	struct ucma_zone *z;		/* set: the hook looks */
	struct ucma_zone *zone;		/* the zone, for the threads it starts */
	bool spawn;			/* the first call starts the threads below */
	int calls;
	int lock_busy;			/* calls that found the zone lock taken */
	int not_held;			/* calls whose pages were not a held run */
	bool alloc_ok;			/* another run allocated meanwhile */
	uint32_t first;			/* the first call's pfn */
	uint64_t free_before;		/* the zone's free pages before the purge */
	pthread_t waiter, forker;
	uint32_t seq;			/* the purges' sequence before the purge */
	bool waited;			/* ucma_zone_purge_hold_off() said it held off */
	bool back_after_wait;		/* and the batch was back when it returned */
	int child_status;
} ph;

/* Another thread: an allocation's failure path, while the batch is held. */
static void *purge_waiter(void *arg)
{
	(void)arg;
	ph.waited = ucma_zone_purge_hold_off(ph.zone, ph.seq);
	pthread_mutex_lock(&ph.zone->lock);
	ph.back_after_wait = a->pages[ph.first].kind != UCMA_PK_RUN;
	pthread_mutex_unlock(&ph.zone->lock);
	if (ph.waited)
		ucma_zone_purge_resume(ph.zone);
	return NULL;
}

/* Another thread forks while the batch is held: the child must not
 * inherit it (the pages would be lost to it). */
static void *purge_forker(void *arg)
{
	pid_t pid;

	(void)arg;
	pid = fork();
	if (pid == 0) {
		bool good = ph.zone->free_pages == ph.free_before && zones_ok();

		_exit(good ? 0 : 1);
	}
	ph.child_status = -1;
	if (pid > 0)
		waitpid(pid, &ph.child_status, 0);
	return NULL;
}

static void purge_hook(void *addr)
{
	uint32_t pfn;

	if (!ph.z)
		return;
	pfn = ucma_addr_to_pfn(a, addr);
	if (pthread_mutex_trylock(&ph.z->lock) != 0) {
		ph.lock_busy++;
		return;
	}
	if (a->pages[pfn].kind != UCMA_PK_RUN || a->pages[pfn].owner_type != UCMA_OWN_NONE)
		ph.not_held++;
	pthread_mutex_unlock(&ph.z->lock);
	if (ph.calls++ == 0 && ph.spawn) {
		uint32_t r = ucma_pages_alloc(a, 16, UCMA_GFP_UNMOVABLE);
		struct timespec ts = { 0, 50 * 1000 * 1000 };

		ph.alloc_ok = r != UCMA_PFN_NONE;
		if (r != UCMA_PFN_NONE)
			ucma_pages_free(a, r);
		ucma_pcp_drain_zone(ph.zone);	/* its pages free on the lists again */
		ph.first = pfn;
		if (pthread_create(&ph.waiter, NULL, purge_waiter, NULL) != 0 ||
		    pthread_create(&ph.forker, NULL, purge_forker, NULL) != 0)
			bail_out("pthread_create failed");
		nanosleep(&ts, NULL);	/* both wait for this batch */
	}
}

static void test_purge_batches(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	struct ucma_zone *z;
	uint32_t pfns[256];
	uint64_t dirty;

	/* Private memory: the heap's pageblocks on lent CMA frames are not
	 * purged but given back (test_lend.c). */
	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;
	/* No decay: purged by hand. */
	if (!init_decay(&cfg, "0", "purge in batches")) {
		skip(5, "no arena");
		return;
	}
	z = &a->zones[UCMA_ZONE_NORMAL];
	/* 128 scattered free runs of 4 pages: 128 madvise calls, 4 batches. */
	for (int i = 0; i < 256; i++) {
		pfns[i] = ucma_pages_alloc(a, 4, UCMA_GFP_UNMOVABLE);
		if (pfns[i] == UCMA_PFN_NONE)
			bail_out("ucma_pages_alloc: %s", strerror(errno));
		memset(ucma_pfn_to_addr(a, pfns[i]), 0x5a, 4 * UCMA_PAGE_SIZE);
	}
	for (int i = 0; i < 256; i += 2)
		ucma_pages_free(a, pfns[i]);
	ucma_pcp_drain_zone(z);
	dirty = dirty_pages(z);

	os_fake();
	ph.free_before = z->free_pages;
	ph.seq = ucma_zone_purge_seq(z);
	ph.zone = z;
	ph.spawn = true;
	ph.z = z;
	ph.child_status = -1;
	ucma_zone_purge(z, true);
	ph.z = NULL;
	/* (Joined first: the fork reads the table os_restore() writes.) */
	pthread_join(ph.waiter, NULL);
	pthread_join(ph.forker, NULL);
	os_restore();

	ok(ph.calls >= 128 / 32 && ph.lock_busy == 0 && ph.not_held == 0,
	   "a full purge calls madvise without the zone lock, on runs it holds (%d calls, "
	   "%d with the lock taken, %d on pages not held)", ph.calls, ph.lock_busy,
	   ph.not_held);
	ok(ph.alloc_ok, "another run is allocated while a batch is given back");
	ok(ph.waited && ph.back_after_wait,
	   "ucma_zone_purge_hold_off() waits until the batch is back on the lists");
	ok(WIFEXITED(ph.child_status) && WEXITSTATUS(ph.child_status) == 0,
	   "a fork meanwhile gives the child every free page, none held (status %#x)",
	   ph.child_status);
	ok(dirty >= 128 * 4 && dirty_pages(z) == 0 && z->free_pages == ph.free_before &&
		   zones_ok() && arena_works(),
	   "all %llu dirty pages are given back, every page is free again, the zones check",
	   (unsigned long long)dirty);

	/* The decay's purge goes the same way. */
	dirty_runs(z, 32);
	ucma_zone_purge(z, false);	/* the blocks' epoch passes */
	dirty = dirty_in_orders(z, UCMA_PURGE_MIN_ORDER, UCMA_NR_ORDERS);
	memset(&ph, 0, sizeof(ph));
	os_fake();
	ph.z = z;
	ucma_zone_purge(z, false);
	ph.z = NULL;
	os_restore();
	ok(dirty >= 32 * 16 && ph.calls > 0 && ph.lock_busy == 0 && ph.not_held == 0 &&
		   dirty_in_orders(z, UCMA_PURGE_MIN_ORDER, UCMA_NR_ORDERS) == 0 && zones_ok(),
	   "so does the decay's: %llu dirty pages in %d calls, %d with the lock taken, %d on "
	   "pages not held", (unsigned long long)dirty, ph.calls, ph.lock_busy, ph.not_held);
	for (int i = 1; i < 256; i += 2)
		ucma_pages_free(a, pfns[i]);
}

/* Free a run of 600 pages (past the per-CPU lists): a free of pages,
 * which looks at the decay. */
static void free_something(void)
{
	uint32_t r = ucma_pages_alloc(a, 600, UCMA_GFP_UNMOVABLE);

	if (r == UCMA_PFN_NONE)
		bail_out("ucma_pages_alloc: %s", strerror(errno));
	ucma_pages_free(a, r);
}

static unsigned dirty_of(const uint32_t *pfns, int n)
{
	unsigned d = 0;

	pthread_mutex_lock(&a->zones[UCMA_ZONE_NORMAL].lock);
	for (int i = 0; i < n; i += 2)
		d += a->pages[pfns[i]].kind == UCMA_PK_FREE &&
		     (a->pages[pfns[i]].flags & UCMA_PF_DIRTY);
	pthread_mutex_unlock(&a->zones[UCMA_ZONE_NORMAL].lock);
	return d;
}

/*
 * The decay's pass goes a little at a time: a free of pages gives back
 * about a millisecond's worth, whole batches, and the frees after it go
 * on.  With each madvise slowed to 200 us, a batch of 32 takes more than
 * the millisecond: one batch per free.
 */
static void test_decay_steps(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	struct timespec tick = { 0, 60 * 1000 * 1000 };	/* past half of 50 ms */
	uint32_t pfns[256];
	unsigned first, after_one, frees = 0;

	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;	/* private memory (test_purge_batches()) */
	if (!init_decay(&cfg, "50", "decay steps")) {
		skip(1, "no arena");
		return;
	}
	/* 128 scattered dirty free blocks of 16 pages: 4 batches. */
	for (int i = 0; i < 256; i++) {
		pfns[i] = ucma_pages_alloc(a, 16, UCMA_GFP_UNMOVABLE);
		if (pfns[i] == UCMA_PFN_NONE)
			bail_out("ucma_pages_alloc: %s", strerror(errno));
		memset(ucma_pfn_to_addr(a, pfns[i]), 0x5a, 16 * UCMA_PAGE_SIZE);
	}
	for (int i = 0; i < 256; i += 2)
		ucma_pages_free(a, pfns[i]);
	ucma_pcp_drain_zone(&a->zones[UCMA_ZONE_NORMAL]);
	first = dirty_of(pfns, 256);

	os_fake();
	fault.slow_dontneed_ns = 200 * 1000;
	/* The first look sets the clock, the first tick starts the epoch the
	 * blocks are older than, the second purges them. */
	for (int t = 0; t < 3; t++) {
		nanosleep(&tick, NULL);
		free_something();
	}
	after_one = dirty_of(pfns, 256);
	while (dirty_of(pfns, 256) && frees < 40) {
		free_something();
		frees++;
	}
	os_restore();
	ok(first == 128 && after_one > 0 && after_one < first && dirty_of(pfns, 256) == 0 &&
		   zones_ok(),
	   "the decay gives back %u blocks over several frees: %u left after the first, none "
	   "after %u more", first, after_one, frees);
	for (int i = 1; i < 256; i += 2)
		ucma_pages_free(a, pfns[i]);
}

/*
 * A free by another thread while a batch is held merges the batch's last
 * block, when it comes back, with a dirty block the cursor has not
 * reached: the purge goes back to that block's head and gives it back.
 * Pageblocks Q and P = Q + 512: Q[0,256) in use, Q[256,512) free and
 * dirty, X = P[0,128) free and dirty, W = P[128,256) in use, Y =
 * P[256,512) free and dirty.  The first batch is Q[256,512) and X; Y
 * would make it more than 512 pages, so the cursor stops at Y; W is freed
 * during the batch.
 */
static uint32_t merged_w;

static void *free_w(void *arg)
{
	(void)arg;
	ucma_pages_free(a, merged_w);	/* 128 pages: straight to the buddy lists */
	return NULL;
}

static void free_w_meanwhile(void)
{
	pthread_t t;

	if (pthread_create(&t, NULL, free_w, NULL) != 0)
		bail_out("pthread_create failed");
	pthread_join(t, NULL);
}

static void test_purge_merged(void)
{
	struct ucma_config cfg = cfg_of(40 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	struct ucma_zone *z;
	unsigned char v[256];
	uint32_t q, p, resident = 0;

	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;
	if (!init_decay(&cfg, "0", "merged across the cursor")) {
		return;
	}
	z = &a->zones[UCMA_ZONE_NORMAL];
	q = ucma_pages_alloc(a, 2 * UCMA_PAGEBLOCK_PAGES, UCMA_GFP_UNMOVABLE);
	if (q == UCMA_PFN_NONE || (q & (UCMA_PAGEBLOCK_PAGES - 1)))
		bail_out("no two aligned pageblocks");
	memset(ucma_pfn_to_addr(a, q), 0x5a, 2 * UCMA_PAGEBLOCK_SIZE);
	ucma_pages_free(a, q);
	p = q + UCMA_PAGEBLOCK_PAGES;
	merged_w = p + 128;
	if (ucma_claim_free_range_noted(a, q, q + 256, UCMA_OWN_NONE, 0, NULL) != 0 ||
	    ucma_claim_free_range_noted(a, merged_w, merged_w + 128, UCMA_OWN_NONE, 0, NULL) != 0)
		bail_out("claim: %s", strerror(errno));
	ucma_pcp_drain_zone(z);

	os_fake();
	on_first_dontneed = free_w_meanwhile;
	ucma_zone_purge(z, true);
	os_restore();
	mincore(ucma_pfn_to_addr(a, p + 256), 256 * UCMA_PAGE_SIZE, v);
	for (int i = 0; i < 256; i++)
		resident += v[i] & 1;
	ok(resident == 0 && dirty_pages(z) == 0 && zones_ok(),
	   "a block merged across the purge's cursor goes too: %u of its 256 pages left "
	   "resident, %llu dirty free pages", resident, (unsigned long long)dirty_pages(z));
	ucma_pages_free(a, q);
}

/*
 * The pages a batch holds are free as far as the zone's state goes: an
 * allocation during a batch does not take the NORMAL zone past the use
 * at which it asks for huge pages (16 MiB) with 14 MiB in use.
 */
static uint32_t held_alloc = UCMA_PFN_NONE;

static void alloc_meanwhile(void)
{
	held_alloc = ucma_pages_alloc(a, 1, UCMA_GFP_UNMOVABLE);
}

static void test_purge_held_free(void)
{
	struct ucma_config cfg = cfg_of(72 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_THP);
	struct ucma_zone *z;
	uint32_t spare, used;

	if (!thp_ok) {
		skip(1, "no transparent huge pages here");
		return;
	}
	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;
	setenv("UCMA_COMPACT", "0", 1);
	if (!init_decay(&cfg, "0", "held pages")) {
		unsetenv("UCMA_COMPACT");
		return;
	}
	unsetenv("UCMA_COMPACT");
	z = &a->zones[UCMA_ZONE_NORMAL];
	if (z->backing != UCMA_BACKING_THP || !z->thp_deferred) {
		skip(1, "the NORMAL zone is not on deferred THP (%d, %d)", z->backing,
		     z->thp_deferred);
		return;
	}
	/* A pageblock written and freed (the batch), then 14 MiB in use
	 * beside it, claimed: no allocation looks at the threshold. */
	spare = ucma_pages_alloc(a, UCMA_PAGEBLOCK_PAGES, UCMA_GFP_UNMOVABLE);
	if (spare == UCMA_PFN_NONE)
		bail_out("ucma_pages_alloc: %s", strerror(errno));
	memset(ucma_pfn_to_addr(a, spare), 1, UCMA_PAGEBLOCK_SIZE);
	ucma_pages_free(a, spare);
	ucma_pcp_drain_zone(z);
	used = spare + UCMA_PAGEBLOCK_PAGES;
	if (ucma_claim_free_range_noted(a, used, used + 7 * UCMA_PAGEBLOCK_PAGES, UCMA_OWN_NONE,
					0, NULL) != 0)
		bail_out("claim: %s", strerror(errno));
	os_fake();
	on_first_dontneed = alloc_meanwhile;
	ucma_zone_purge(z, true);
	os_restore();
	ok(held_alloc != UCMA_PFN_NONE && z->thp_deferred,
	   "an allocation during a batch does not count the held pages as used: huge pages "
	   "still deferred with 14 MiB in use");
	if (held_alloc != UCMA_PFN_NONE)
		ucma_pages_free(a, held_alloc);
	ucma_pages_free(a, used);
}

/*
 * A trim looping in another thread does not make ucma_alloc() of a whole
 * CMA area fail: an allocation that finds a batch came and went pauses
 * the purges and tries once more.  Two seconds of it, with and without
 * UCMA_ALLOC_NOWAIT.
 */
static atomic_int trim_stop;

static void *trim_loop(void *arg)
{
	(void)arg;
	while (!atomic_load(&trim_stop))
		ucma_trim();
	return NULL;
}

static void test_alloc_during_trim(void)
{
	struct ucma_config cfg = cfg_of(72 * MiB, 8 * MiB, UCMA_BACKING_THP, UCMA_BACKING_NONE);
	unsigned cycles = 0, failed = 0, purged_cycles = 0;
	pthread_t t;

	if (!thp_ok) {
		skip(1, "no transparent huge pages here: the CMA area is on a file, never purged");
		return;
	}
	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;
	if (!init_decay(&cfg, "0", "alloc during trim")) {
		return;
	}
	if (a->zones[UCMA_ZONE_CMA].file_backed) {
		skip(1, "the CMA area is on a file here: never purged");
		return;
	}
	atomic_store(&trim_stop, 0);
	if (pthread_create(&t, NULL, trim_loop, NULL) != 0)
		bail_out("pthread_create failed");
	for (time_t end = time(NULL) + 2; time(NULL) < end; cycles++) {
		unsigned flags = cycles & 1 ? UCMA_ALLOC_NOWAIT : 0;
		uint64_t p0 = atomic_load(&ucma_vmstat[UCMA_STAT_PURGED_PAGES]);
		void *p = ucma_alloc(8 * MiB, 0, flags);
		struct timespec ts = { 0, (long)(cycles % 400) * 1000 };

		if (!p) {
			failed++;
			continue;
		}
		memset(p, 1, 8 * MiB);	/* dirty: the next trim has work */
		ucma_release(p);
		nanosleep(&ts, NULL);
		purged_cycles += atomic_load(&ucma_vmstat[UCMA_STAT_PURGED_PAGES]) != p0;
	}
	atomic_store(&trim_stop, 1);
	pthread_join(t, NULL);
	ok(failed == 0 && purged_cycles > 0,
	   "ucma_alloc() of the whole 8 MiB area beside a looping trim: %u of %u failed "
	   "(%u cycles saw pages purged)", failed, cycles, purged_cycles);
}

/*
 * A fork while another thread has the purges paused (an allocation's
 * retry, alloc_zone()): the child, where that thread is not, must not
 * keep the pause, or its ucma_trim() would wait for ever.
 */
static atomic_int pauser_state;	/* 1: paused, 2: may resume */

static void *pauser(void *arg)
{
	struct ucma_zone *z = arg;

	/* (A sequence that is not the zone's: as after batches came and went.) */
	if (!ucma_zone_purge_hold_off(z, ucma_zone_purge_seq(z) + 2))
		bail_out("no pause");
	atomic_store(&pauser_state, 1);
	while (atomic_load(&pauser_state) != 2)
		sched_yield();
	ucma_zone_purge_resume(z);
	return NULL;
}

static void test_fork_while_paused(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);
	struct ucma_zone *z;
	pthread_t t;
	pid_t pid;
	int st = -1;

	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;
	if (!init_decay(&cfg, "0", "fork while paused")) {
		return;
	}
	z = &a->zones[UCMA_ZONE_NORMAL];
	atomic_store(&pauser_state, 0);
	if (pthread_create(&t, NULL, pauser, z) != 0)
		bail_out("pthread_create failed");
	while (atomic_load(&pauser_state) != 1)
		sched_yield();
	pid = fork();
	if (pid == 0) {
		alarm(10);	/* a child that waits for ever is killed */
		dirty_runs(z, 16);
		ucma_trim();
		_exit(dirty_pages(z) == 0 ? 0 : 1);
	}
	if (pid > 0)
		waitpid(pid, &st, 0);
	atomic_store(&pauser_state, 2);
	pthread_join(t, NULL);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	   "a fork while another thread has the purges paused: the child's ucma_trim() "
	   "returns, every dirty page given back (status %#x)", st);
}

static void test_init_twice(void)
{
	struct ucma_config cfg = cfg_of(16 * MiB, 8 * MiB, UCMA_BACKING_NONE, UCMA_BACKING_NONE);

	ok(init_captured(&cfg, false) == 0, "ucma_init");
	ok(ucma_init(&cfg) == -1 && errno == EBUSY, "a second ucma_init with a config: EBUSY");
	ok(ucma_init(NULL) == 0, "ucma_init(NULL) once running: 0");
}

/*
 * A backing asked for by name that the pool cannot give: the layout
 * (whether the NORMAL zone gets a window onto lent frames) expects what
 * the fallback will give, as for the automatic choice.  It took the name
 * as given, and the window was there with lending off.
 */
static void test_layout_follows_fallback(void)
{
	struct ucma_options o;
	bool auto_says;

	os_fake();
	fault.fake_hugetlb_free = 0;
	ucma_options_defaults(&o);
	o.cma_size = 16 * MiB;
	o.hugepages = UCMA_BACKING_AUTO;
	auto_says = ucma_frames_expect_lendable(&o);
	o.hugepages = UCMA_BACKING_HUGETLB_2M;
	ok(ucma_frames_expect_lendable(&o) == auto_says,
	   "UCMA_HUGEPAGES=2M with an empty pool: the layout expects what the fallback gives "
	   "(lendable: %s)", auto_says ? "yes" : "no");
	fault.fake_hugetlb_free = 1000;
	ok(ucma_frames_expect_lendable(&o), "with the pages in the pool: lendable frames expected");
	os_restore();
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
	test_layout_follows_fallback();
	test_no_file();
	test_fork_copy_fails();
	test_madv_hugepage_fails();
	test_mbind_fails();
	test_advice_fails();
	test_populate_refused();
	test_purge_fails();
	test_purge_thp();
	test_purge_batches();
	test_decay_steps();
	test_purge_merged();
	test_purge_held_free();
	test_alloc_during_trim();
	test_fork_while_paused();
	test_init_twice();
	ucma_test_reset();
	return done();
}
