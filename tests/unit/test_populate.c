/*
 * test_populate.c - ucma_alloc() maps the fresh destinations of the objects
 * it migrates in bulk (MADV_POPULATE_WRITE) before copying them, and still
 * migrates when that call fails.
 *
 * Each case runs in a child process with an arena of its own (64 MiB, a
 * 32 MiB CMA area on private memory, never touched), fills the lowest
 * 4 MiB of the CMA area with stamped objects of 4 KiB to 256 KiB, and
 * takes that run with ucma_alloc(), whose copies go to pages above it
 * that were never touched.  The madvise entry of the ucma_os table
 * (os.c) watches or refuses MADV_POPULATE_WRITE:
 *
 *  - watched: every page of every moved object lies inside a range
 *    populated during the call, each such range still held only zeros when it was populated
 *    (so before its copy) and was resident right after (mincore), the
 *    calls are fewer than the objects (in bulk), and pgmigrate_populated
 *    counts the pages;
 *  - refused with ENOMEM, then EFAULT: the migration succeeds, every
 *    object holds its stamp, and pgmigrate_populate_fail counts;
 *  - refused with EINVAL (a kernel without the advice): the migration
 *    succeeds, the advice is asked once, never again, and nothing counts
 *    as a failure;
 *  - arena prefaulted (UCMA_POPULATE=1): its clean pages are mapped
 *    already, and nothing is populated again;
 *  - prefaulting stops while the system still has memory to give
 *    (MemAvailable, faked through the ucma_os table), where an arena
 *    larger than memory (UCMA_ARENA_SIZE=1T) ended in the OOM killer;
 *    the CMA area's too, which was prefaulted whatever was left;
 *  - (root) in a memory cgroup smaller than the arena the cgroup's limit
 *    is what is available, and UCMA_POPULATE stops there: the program
 *    was killed by the cgroup's OOM killer before main().
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "pcp.h"
#include "tap.h"
#include "testutil.h"
#include "zones.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define FILL (4 * MiB)
#define MAXOBJ 1024
#define MAXRANGES 4096

/* What a child saw, in memory shared with the parent. */
struct result {
	int init_ok, alloc_ok, alloc_errno, zones_ok;
	unsigned nobj, moved, intact, uncovered;
	unsigned calls, calls_later;	/* POPULATE_WRITE asked: first, second ucma_alloc() */
	unsigned written_before, absent_after;	/* ranges not zero / not resident */
	uint64_t populated, populate_fail;	/* counter deltas */
	int cma_private;
	int prefaulted_after_trim;	/* the CMA zone's flag after ucma_trim() */
};

/* The watched calls: ranges populated, and what the hook does with them. */
static struct {
	int refuse;			/* errno to fail with, 0 to pass through */
	unsigned calls;
	unsigned nranges;
	uintptr_t start[MAXRANGES], end[MAXRANGES];
	unsigned written_before, absent_after;
} watch;

/* Pages populated ahead are still free, and poisoned in AddressSanitizer
 * builds (zone.c): read them uninstrumented. */
__attribute__((no_sanitize_address)) static bool all_zero(const unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

static int watch_madvise(void *addr, size_t len, int advice)
{
	unsigned char vec[512];
	int rc;

	if (advice != MADV_POPULATE_WRITE)
		return madvise(addr, len, advice);
	watch.calls++;
	if (watch.refuse) {
		errno = watch.refuse;
		return -1;
	}
	rc = madvise(addr, len, advice);
	if (rc != 0)
		return rc;
	if (!all_zero(addr, len))
		watch.written_before++;
	for (size_t off = 0; off < len; off += sizeof(vec) * UCMA_PAGE_SIZE) {
		size_t n = (len - off) / UCMA_PAGE_SIZE;

		if (n > sizeof(vec))
			n = sizeof(vec);
		if (mincore((char *)addr + off, n * UCMA_PAGE_SIZE, vec) != 0)
			watch.absent_after++;
		for (size_t i = 0; i < n; i++)
			if (!(vec[i] & 1))
				watch.absent_after++;
	}
	if (watch.nranges < MAXRANGES) {
		watch.start[watch.nranges] = (uintptr_t)addr;
		watch.end[watch.nranges++] = (uintptr_t)addr + len;
	}
	return 0;
}

/* Does every page of [p, p + len) lie in a range populated meanwhile?
 * (An object may take pages populated ahead by an earlier call and pages
 * of its own call.) */
static bool covered(const void *p, size_t len)
{
	for (uintptr_t pg = (uintptr_t)p; pg < (uintptr_t)p + len; pg += UCMA_PAGE_SIZE) {
		unsigned i = 0;

		while (i < watch.nranges && !(pg >= watch.start[i] && pg < watch.end[i]))
			i++;
		if (i == watch.nranges)
			return false;
	}
	return true;
}

static ucma_handle_t h[MAXOBJ];
static uint32_t sizes[MAXOBJ];
static void *before[MAXOBJ];

/* Stamped objects until @bytes are placed; returns how many. */
static unsigned fill(size_t bytes)
{
	size_t placed = 0;
	unsigned n = 0;

	while (placed < bytes && n < MAXOBJ) {
		uint32_t size = 4096u << (n % 7);
		void *p;

		h[n] = ucma_halloc(size, 0);
		if (!h[n])
			break;
		p = ucma_pin(h[n], 0);
		tu_fill(p, size, n);
		before[n] = p;
		ucma_unpin(h[n]);
		sizes[n++] = size;
		placed += size;
	}
	return n;
}

static void empty(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		ucma_hfree(h[i]);
	ucma_defer_drain();
}

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	ucma_stat(name, &v);
	return v;
}

/* One ucma_alloc() over freshly filled objects, the hook set up by the
 * caller; fills @r. */
static void *migrate_once(struct result *r)
{
	uint64_t m0 = stat_of("pgmigrate_success"), p0 = stat_of("pgmigrate_populated");
	uint64_t f0 = stat_of("pgmigrate_populate_fail");
	void *b;

	r->nobj = fill(FILL);
	ucma_os.madvise = watch_madvise;
	b = ucma_alloc(FILL, 0, 0);
	r->alloc_errno = b ? 0 : errno;
	r->alloc_ok = b != NULL;
	r->moved = (unsigned)(stat_of("pgmigrate_success") - m0);
	r->populated = stat_of("pgmigrate_populated") - p0;
	r->populate_fail = stat_of("pgmigrate_populate_fail") - f0;
	for (unsigned i = 0; i < r->nobj; i++) {
		const void *p = ucma_pin(h[i], 0);

		if (p && tu_check(p, sizes[i], i))
			r->intact++;
		if (p && p != before[i] && !covered(p, sizes[i]))
			r->uncovered++;
		ucma_unpin(h[i]);
	}
	return b;
}

static void child(struct result *r, int refuse, bool prefault, bool purge_first)
{
	struct ucma_config cfg = {
		.arena_size = 64 * MiB,
		.cma_size = 32 * MiB,
		.hugepages = UCMA_BACKING_THP,	/* private memory where THP exists */
		.hugepages_normal = UCMA_BACKING_NONE,
		.populate = prefault,
	};
	void *b;

	/* No purge behind the test's back; no background compaction. */
	setenv("UCMA_DECAY_MS", "0", 1);
	setenv("UCMA_COMPACT_PROACTIVENESS", "0", 1);
	if (ucma_init(&cfg) != 0)
		_exit(1);
	r->init_ok = 1;
	r->cma_private = !ucma_arena_get()->zones[UCMA_ZONE_CMA].file_backed;
	watch.refuse = refuse;
	if (purge_first) {
		/* Pages written, freed and given back: unmapped again. */
		empty(fill(FILL));
		ucma_trim();
		r->prefaulted_after_trim = ucma_arena_get()->zones[UCMA_ZONE_CMA].prefaulted;
	}
	b = migrate_once(r);
	r->calls = watch.calls;
	r->written_before = watch.written_before;
	r->absent_after = watch.absent_after;
	if (b && refuse == EINVAL) {
		/* Once refused as unknown, never asked again. */
		ucma_release(b);
		empty(r->nobj);
		watch.calls = 0;
		b = ucma_alloc(FILL, 0, 0);
		r->calls_later = watch.calls;
		if (!b)
			r->alloc_ok = 0;
	}
	ucma_os_reset();
	r->zones_ok = tu_zones_ok(ucma_arena_get(), "after the migration");
	_exit(0);
}

static struct result *run(int refuse, bool prefault, bool purge_first)
{
	static struct result *shared;
	pid_t pid;
	int st;

	if (!shared)
		shared = tu_shared_results(sizeof(*shared));
	memset(shared, 0, sizeof(*shared));
	pid = tu_fork();
	if (pid == 0)
		child(shared, refuse, prefault, purge_first);
	st = tu_wait(pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !shared->init_ok)
		diag("child: status %#x, init %d", st, shared->init_ok);
	return shared;
}

static void test_populated_before_copy(void)
{
	struct result *r = run(0, false, false);

	ok(r->alloc_ok && r->moved > 0,
	   "ucma_alloc(4 MiB) over %u objects migrates (%u moved, errno %d)", r->nobj, r->moved,
	   r->alloc_errno);
	if (!r->cma_private)
		diag("CMA area on a file here: never-touched pages are populated all the same");
	ok(r->calls > 0 && r->uncovered == 0,
	   "every moved object lies in ranges populated during the call (%u calls, %u not)",
	   r->calls, r->uncovered);
	ok(r->calls > 0 && r->written_before == 0 && r->absent_after == 0,
	   "each range held zeros when populated, before its copies (%u did not), and was "
	   "resident after (%u pages absent)", r->written_before, r->absent_after);
	ok(r->calls > 0 && r->calls < r->moved, "in bulk: %u calls for %u objects", r->calls,
	   r->moved);
	ok(r->populated >= FILL / UCMA_PAGE_SIZE / 2 && r->populate_fail == 0,
	   "pgmigrate_populated counts them (%llu pages), no failure",
	   (unsigned long long)r->populated);
	ok(r->intact == r->nobj && r->zones_ok, "every object intact (%u/%u), zones check",
	   r->intact, r->nobj);
}

static void test_populate_fails(void)
{
	static const int errs[] = { ENOMEM, EFAULT };

	for (size_t k = 0; k < UCMA_ARRAY_SIZE(errs); k++) {
		struct result *r = run(errs[k], false, false);

		ok(r->alloc_ok && r->moved > 0 && r->intact == r->nobj && r->zones_ok,
		   "MADV_POPULATE_WRITE fails with %s: ucma_alloc works, %u moved, %u/%u intact",
		   strerror(errs[k]), r->moved, r->intact, r->nobj);
		ok(r->calls > 0 && r->populate_fail == r->calls && r->populated == 0,
		   "each failure is counted in pgmigrate_populate_fail (%llu of %u calls)",
		   (unsigned long long)r->populate_fail, r->calls);
	}
}

static void test_populate_unknown(void)
{
	struct result *r = run(EINVAL, false, false);

	ok(r->alloc_ok && r->moved > 0 && r->intact == r->nobj && r->zones_ok,
	   "MADV_POPULATE_WRITE unknown (EINVAL): two ucma_alloc() work, %u/%u intact", r->intact,
	   r->nobj);
	ok(r->calls == 1 && r->calls_later == 0 && r->populate_fail == 0,
	   "asked once, then never (%u, then %u calls), no failure counted", r->calls,
	   r->calls_later);
}

static void test_prefaulted(void)
{
	struct result *r = run(0, true, false);

	ok(r->alloc_ok && r->moved > 0 && r->intact == r->nobj,
	   "prefaulted arena: ucma_alloc works (%u moved)", r->moved);
	ok(r->calls == 0 && r->populated == 0,
	   "nothing is populated again (%u calls)", r->calls);
}

/* A trim gives pages of the prefaulted areas back: from then on their
 * clean pages may be unmapped, and migration populates again. */
static void test_prefaulted_purged(void)
{
	struct result *r = run(0, true, true);

	if (!r->cma_private) {
		skip(2, "the CMA area is on a file here: its memory is kept, never purged");
		return;
	}
	ok(r->alloc_ok && r->moved > 0 && r->intact == r->nobj && r->zones_ok,
	   "prefaulted arena after ucma_trim(): ucma_alloc works (%u moved, %u/%u intact)",
	   r->moved, r->intact, r->nobj);
	ok(!r->prefaulted_after_trim && r->calls > 0 && r->uncovered == 0,
	   "the zone is not taken as prefaulted any more: destinations populated again "
	   "(%u calls, %u objects outside them)", r->calls, r->uncovered);
}

/*
 * UCMA_POPULATE over a 256 MiB NORMAL zone, on a system that has 400 MiB
 * available less what was populated: two pieces of 64 MiB leave 272 MiB,
 * less than a piece and the 256 MiB left to the rest of the system, so
 * prefaulting stops there; the arena works, and counts as not prefaulted.
 */
static uint64_t populated_bytes;

static int count_madvise(void *addr, size_t len, int advice)
{
	int rc = madvise(addr, len, advice);

	if (rc == 0 && advice == MADV_POPULATE_WRITE)
		populated_bytes += len;
	return rc;
}

static uint64_t fake_available(void)
{
	return ((uint64_t)400 << 20) - populated_bytes;
}

/* Mappings made with MAP_POPULATE (a shmem CMA area's prefaulting). */
static uint64_t populate_mapped;

static void *count_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p = mmap(addr, len, prot, flags, fd, off);

	if (p != MAP_FAILED && (flags & MAP_POPULATE))
		populate_mapped += len;
	return p;
}

static void test_populate_bounded(void)
{
	static struct {
		uint64_t populated, mapped;
		int init_ok, prefaulted, cma_prefaulted, alloc_ok;
	} *r;
	pid_t pid;
	int st;

	r = tu_shared_results(sizeof(*r));
	pid = tu_fork();
	if (pid == 0) {
		struct ucma_config cfg = {
			.arena_size = 288 * MiB,
			.cma_size = 32 * MiB,
			.hugepages = UCMA_BACKING_NONE,
			.hugepages_normal = UCMA_BACKING_NONE,
			.populate = 1,
		};
		void *p;

		ucma_os.madvise = count_madvise;
		ucma_os.mmap = count_mmap;
		ucma_os.mem_available = fake_available;
		if (ucma_init(&cfg) != 0)
			_exit(1);
		r->init_ok = 1;
		r->populated = populated_bytes;
		r->mapped = populate_mapped;
		r->prefaulted = ucma_arena_get()->zones[UCMA_ZONE_NORMAL].prefaulted;
		r->cma_prefaulted = ucma_arena_get()->zones[UCMA_ZONE_CMA].prefaulted;
		p = ucma_malloc(100 * MiB);
		if (p)
			tu_fill(p, 100 * MiB, 7);
		r->alloc_ok = p && tu_check(p, 100 * MiB, 7);
		_exit(0);
	}
	st = tu_wait(pid);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && r->init_ok && r->alloc_ok,
	   "UCMA_POPULATE beyond available memory: init succeeds, 100 MiB work (status %#x)", st);
	ok(r->populated == 128 * MiB && !r->prefaulted,
	   "prefaulting stopped at 128 of 256 MiB, 256 MiB left to the system (%llu MiB); "
	   "the zone is not taken as prefaulted", (unsigned long long)(r->populated >> 20));
	ok(r->mapped == 0 && !r->cma_prefaulted,
	   "the 32 MiB CMA area is not prefaulted either: 272 MiB left (%llu MiB mapped with "
	   "MAP_POPULATE)", (unsigned long long)(r->mapped >> 20));
	munmap(r, sizeof(*r));
}

/*
 * A memory cgroup of the process's own: v1's memory controller, or v2's
 * where the root's subtree has it.  Its directory in @dir; false when
 * neither can be had (not root, no controller).
 */
static bool cgroup_make(char *dir, size_t len, size_t limit)
{
	char path[600], want[32];
	FILE *f;

	snprintf(want, sizeof(want), "%zu", limit);
	if (access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0) {
		snprintf(dir, len, "/sys/fs/cgroup/memory/ucma-test.%d", (int)getpid());
		snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", dir);
	} else {
		char ctl[256] = "";

		f = fopen("/sys/fs/cgroup/cgroup.subtree_control", "r");
		if (!f)
			return false;
		if (!fgets(ctl, sizeof(ctl), f))
			ctl[0] = '\0';
		fclose(f);
		if (!strstr(ctl, "memory"))
			return false;
		snprintf(dir, len, "/sys/fs/cgroup/ucma-test.%d", (int)getpid());
		snprintf(path, sizeof(path), "%s/memory.max", dir);
	}
	if (mkdir(dir, 0755) != 0)
		return false;
	f = fopen(path, "w");
	if (!f || fputs(want, f) < 0 || fclose(f) != 0) {
		rmdir(dir);
		return false;
	}
	return true;
}

/* Move the calling process into the cgroup at @dir. */
static bool cgroup_enter(const char *dir)
{
	char path[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "w");
	return f && fprintf(f, "%d\n", (int)getpid()) > 0 && fclose(f) == 0;
}

static void test_populate_cgroup(void)
{
	static struct { uint64_t avail; int init_ok, alloc_ok; } *r;
	const size_t limit = 256 * MiB;
	char dir[512];
	pid_t pid;
	int st;

	if (geteuid() != 0 || !cgroup_make(dir, sizeof(dir), limit)) {
		skip(2, "no memory cgroup of our own to make here (root and a memory "
			"controller needed)");
		return;
	}
	r = tu_shared_results(sizeof(*r));
	pid = tu_fork();
	if (pid == 0) {
		struct ucma_config cfg = {
			.arena_size = 768 * MiB,
			.cma_size = 256 * MiB,
			.hugepages = UCMA_BACKING_NONE,
			.hugepages_normal = UCMA_BACKING_NONE,
			.populate = 1,
		};
		void *p;

		if (!cgroup_enter(dir))
			_exit(2);
		r->avail = ucma_os_mem_available();
		if (ucma_init(&cfg) != 0)
			_exit(1);
		r->init_ok = 1;
		p = ucma_malloc(16 * MiB);
		if (p)
			tu_fill(p, 16 * MiB, 9);
		r->alloc_ok = p && tu_check(p, 16 * MiB, 9);
		_exit(0);
	}
	st = tu_wait(pid);
	rmdir(dir);
	ok(r->avail > 0 && r->avail <= limit,
	   "in a memory cgroup of 256 MiB, %llu MiB count as available",
	   (unsigned long long)(r->avail >> 20));
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && r->init_ok && r->alloc_ok,
	   "UCMA_POPULATE with a 768 MiB arena there: prefaulting stops, init succeeds, 16 MiB "
	   "work (status %#x; killed by the cgroup's OOM killer before)", st);
	munmap(r, sizeof(*r));
}

int main(void)
{
	plan_no_plan();
	/* Options from the harness's environment would change the cases. */
	tu_clear_env();
	test_populated_before_copy();
	test_populate_fails();
	test_populate_unknown();
	test_prefaulted();
	test_prefaulted_purged();
	test_populate_bounded();
	test_populate_cgroup();
	return done();
}
