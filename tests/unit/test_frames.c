/*
 * test_frames.c - the frame layer: CMA areas on files that ucma maps
 * itself, physical order, physically contiguous buffers from the frame
 * table, ucma_vtophys(), memory events, and fork.
 *
 * Without root or a hugetlb pool:
 *  - an area of plain pages is a shmem file mapped shared, with frames of
 *    2 MiB, reported by the statistics;
 *  - a UCMA_ALLOC_PHYS_CONTIG request that fails on transparent huge or
 *    plain pages faults in at most about twice its size, not the area;
 *  - ucma_vtophys() refuses memory that is not ucma's, and agrees with
 *    pagemap where pagemap answers;
 *  - memory events: MAP for every area when the library starts (a
 *    callback registered before), the same ranges replayed to a late
 *    registrant, UNMAP before teardown while the memory is still there,
 *    UNMAP then MAP in the child of a fork, nothing after unregistering,
 *    and the documented errors (EDEADLK from inside a callback);
 *  - fork with live buffers and movable objects: the child has its own
 *    copy, the parent never sees the child's writes; with
 *    UCMA_CMA_DONTFORK the child starts with empty areas;
 *  - the interfaces for borrowers of frames: a frame mapped at another
 *    address shows the same memory, lent frames are counted.
 *
 * As root, with 64 free 2 MiB pool pages (reserved here on top of what
 * the pool holds, and taken back at exit, in a child process; the cases
 * with movable objects run in children too, because movable slabs outlive
 * ucma_test_reset()): the frames
 * are mapped in ascending physical order; PHYS_CONTIG buffers of 4, 8 and
 * 16 MiB succeed exactly when pagemap shows a run of frames that long
 * (also when the area is lent to movable objects and must be emptied
 * first), and every 4 KiB page of each agrees with pagemap; vtophys
 * lengths agree with pagemap page by page; the statistics report the
 * longest run; a forked child copies without taking pool pages.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "frames.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define FRAME ((size_t)2 << 20)

static struct ucma_arena *a;

static struct ucma_config cfg_of(size_t arena, size_t cma, int cma_b)
{
	struct ucma_config cfg = {
		.arena_size = arena,
		.cma_size = cma,
		.hugepages = cma_b,
		.hugepages_normal = UCMA_BACKING_NONE,
	};

	return cfg;
}

/* Forget the arena; objects freed before wait for readers no longer. */
static void reset(void)
{
	ucma_defer_drain();
	ucma_test_reset();
}

static struct ucma_arena *start(const struct ucma_config *cfg)
{
	reset();
	a = NULL;
	if (ucma_init(cfg) != 0)
		return NULL;
	a = ucma_arena_get();
	return a;
}

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	if (ucma_stat(name, &v) != 0)
		return UINT64_MAX;
	return v;
}


static int open_fds(void)
{
	char path[64];
	int n = 0;

	for (int fd = 0; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n += access(path, F_OK) == 0;
	}
	return n;
}

static void *area_base(int i)
{
	return ucma_pfn_to_addr(a, a->areas[i].base_pfn);
}

static size_t area_bytes(int i)
{
	return (size_t)a->areas[i].npages << UCMA_PAGE_SHIFT;
}

/* ------------------------------------------------------------------------ */
/* Backing without hugetlb                                                   */
/* ------------------------------------------------------------------------ */

static void test_shmem_file(void)
{
	struct ucma_config cfg = cfg_of(64 * MiB, 32 * MiB, UCMA_BACKING_NONE);
	char line[512];
	uint64_t v;

	if (!start(&cfg)) {
		ok(0, "plain pages: ucma_init: %s", strerror(errno));
		return;
	}
	tu_maps_line(area_base(0), line, sizeof(line));
	diag("%s", line);
	ok(stat_of("cma_default_file") == UCMA_FILE_SHMEM &&
		   strstr(line, " rw-s ") && strstr(line, "memfd:ucma:default"),
	   "plain pages: the area is a shmem file named after it, mapped shared");
	ok(stat_of("cma_default_frame_size") == FRAME && stat_of("cma_default_frames") == 16 &&
		   stat_of("cma_default_phys_run_max") == 0,
	   "statistics: 16 frames of 2 MiB, physical runs unknown (shmem)");
	ok(ucma_stat("cma_default_frames_lent", &v) == 0 && v == 0 &&
		   ucma_stat("cma_default_frames_sort_ns", &v) == 0 && v == 0,
	   "no frame lent, nothing sorted");
	{
		char *p = ucma_alloc(4 * MiB, 0, UCMA_ALLOC_ZERO);
		bool good = p != NULL;

		for (size_t i = 0; p && i < 4 * MiB; i += 4096)
			good &= p[i] == 0;
		if (p) {
			tu_fill(p, 4 * MiB, 11);
			good &= tu_check(p, 4 * MiB, 11) && ucma_release(p) == 0;
		}
		ok(good, "a 4 MiB buffer on the file is zeroed, written and read back");
	}
}

/*
 * A failing PHYS_CONTIG request on transparent huge or plain pages must
 * not fault in the area to find out: RSS grows by at most twice the
 * request (plus a little) each time.
 */
static void test_phys_fail_fast(void)
{
	static const size_t sizes[] = { 8192, 1 * MiB, 4 * MiB, 16 * MiB };
	struct ucma_config cfg = cfg_of(512 * MiB, 256 * MiB,
					ucma_os_thp_available() ? UCMA_BACKING_THP :
								  UCMA_BACKING_NONE);

	if (!start(&cfg)) {
		ok(0, "fail fast: ucma_init: %s", strerror(errno));
		return;
	}
	diag("fail fast: backing %s (%s)", ucma_backing_name("cma"),
	     ucma_frame_file_str((int)stat_of("cma_default_file")));
	for (size_t i = 0; i < UCMA_ARRAY_SIZE(sizes); i++) {
		long before = tu_rss_kb(), grown;
		void *p;
		int err;

		errno = 0;
		p = ucma_alloc(sizes[i], 0, UCMA_ALLOC_PHYS_CONTIG);
		err = errno;
		grown = tu_rss_kb() - before;
		ok((p || err == ENOMEM || err == ENOTSUP) &&
			   grown <= (long)((2 * sizes[i] + 4 * MiB) >> 10),
		   "PHYS_CONTIG %zu KiB on %s: %s, RSS grew %ld KiB (at most %zu)",
		   sizes[i] >> 10, ucma_backing_name("cma"), p ? "contiguous" : strerror(err),
		   grown, (2 * sizes[i] + 4 * MiB) >> 10);
		if (p)
			ucma_release(p);
	}
}

static void test_vtophys_errors(void)
{
	struct ucma_config cfg = cfg_of(32 * MiB, 16 * MiB, UCMA_BACKING_NONE);
	uint64_t phys = 0, ref;
	size_t len = 0;
	int here = 0;
	char *p;

	if (!start(&cfg)) {
		ok(0, "vtophys: ucma_init: %s", strerror(errno));
		return;
	}
	errno = 0;
	ok(ucma_vtophys(&here, &phys, &len) == -1 && errno == EINVAL,
	   "ucma_vtophys of a stack variable: EINVAL (not ucma's memory)");
	errno = 0;
	ok(ucma_vtophys(NULL, &phys, NULL) == -1 && errno == EINVAL &&
		   ucma_vtophys(area_base(0), NULL, NULL) == -1 && errno == EINVAL,
	   "NULL pointer or NULL phys: EINVAL");
	p = ucma_alloc(1 * MiB, 0, 0);
	errno = 0;
	ok(p && ucma_vtophys(p, &phys, &len) == -1 && errno == EINVAL,
	   "a page not present yet: EINVAL");
	if (p)
		memset(p, 1, 1 * MiB);
	if (p && ucma_virt2phys(p, &ref) != 0) {
		errno = 0;
		ok(ucma_vtophys(p, &phys, &len) == -1 && (errno == EPERM || errno == ENOTSUP),
		   "frame numbers hidden: EPERM (%s), never address 0", strerror(errno));
	} else if (p) {
		int rc = ucma_vtophys(p + 100, &phys, &len);
		bool agree = rc == 0 && phys == ref + 100 && len >= UCMA_PAGE_SIZE - 100 &&
			     len <= 16 * MiB;

		for (size_t off = UCMA_PAGE_SIZE; agree && off < len + 100 && off < 1 * MiB;
		     off += UCMA_PAGE_SIZE)
			agree = ucma_virt2phys(p + off, &ref) == 0 && ref == phys - 100 + off;
		ok(agree, "vtophys agrees with pagemap over its %zu bytes", len);
	}
	if (p)
		ucma_release(p);
	{
		void *m = ucma_malloc(100);
		int rc;

		if (m)
			memset(m, 1, 100);
		rc = m ? ucma_vtophys(m, &phys, &len) : -1;

		ok(rc == 0 || errno == EPERM, "malloc memory is ucma's: answered or EPERM (%s)",
		   rc == 0 ? "answered" : strerror(errno));
		ucma_free(m);
	}
}

/* ------------------------------------------------------------------------ */
/* Memory events                                                             */
/* ------------------------------------------------------------------------ */

#define MAX_EVENTS 64

struct ev_log {
	int n;
	bool deadlk_ok;		/* register from inside said EDEADLK */
	bool mapped_ok;		/* an UNMAP came while the memory was there */
	bool vtophys_ok;	/* ucma_vtophys worked from inside */
	struct {
		int ev;
		uintptr_t start, end;
	} e[MAX_EVENTS];
};

static struct ev_log early_log, late_log;

static void record(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	struct ev_log *l = arg;
	uint64_t phys;
	char line[512];

	if (l->n < MAX_EVENTS) {
		l->e[l->n].ev = ev;
		l->e[l->n].start = (uintptr_t)addr;
		l->e[l->n].end = (uintptr_t)addr + len;
		l->n++;
	}
	errno = 0;
	l->deadlk_ok = ucma_mem_event_register("nested", record, l) == -1 && errno == EDEADLK;
	if (ev == UCMA_MEM_EVENT_UNMAP) {
		tu_maps_line(addr, line, sizeof(line));
		l->mapped_ok = strstr(line, "rw-") != NULL;
	} else {
		/* Free pages are not touched (poisoned in AddressSanitizer
		 * builds): a page not present yet is EINVAL, which is fine. */
		l->vtophys_ok = ucma_vtophys(addr, &phys, NULL) == 0 || errno == EPERM ||
				errno == EINVAL;
	}
}

/* The span of the CMA areas (back to back) of the arena now. */
static uintptr_t span_lo, span_hi;

static void note_span(void)
{
	span_lo = (uintptr_t)area_base(0);
	span_hi = (uintptr_t)area_base(a->nr_areas - 1) + area_bytes(a->nr_areas - 1);
}

/* Do the @ev events of @l from @from on cover the span noted last exactly
 * (their union is the areas' union)? */
static bool covers(const struct ev_log *l, int from, int ev)
{
	uintptr_t lo = span_lo, hi = span_hi;

	/* Every 2 MiB piece must be in some event, and no event may reach
	 * outside. */
	for (int i = from; i < l->n; i++)
		if (l->e[i].ev == ev && (l->e[i].start < lo || l->e[i].end > hi))
			return false;
	for (uintptr_t p = lo; p < hi; p += FRAME) {
		bool in = false;

		for (int i = from; i < l->n && !in; i++)
			in = l->e[i].ev == ev && p >= l->e[i].start && p < l->e[i].end;
		if (!in)
			return false;
	}
	return true;
}

static int count_ev(const struct ev_log *l, int from, int ev)
{
	int n = 0;

	for (int i = from; i < l->n; i++)
		n += l->e[i].ev == ev;
	return n;
}

static void test_events(void)
{
	struct ucma_config cfg = cfg_of(64 * MiB, 0, UCMA_BACKING_NONE);
	int mark_early, mark_late, status = -1, fds[2];
	struct ev_log child_log;
	pid_t pid;

	cfg.cma_areas = "one:8M,two:16M";
	reset();
	memset(&early_log, 0, sizeof(early_log));
	memset(&late_log, 0, sizeof(late_log));
	ok(ucma_mem_event_register("early", record, &early_log) == 0,
	   "a callback registered before the library starts");
	errno = 0;
	ok(ucma_mem_event_register("early", record, &early_log) == -1 && errno == EEXIST,
	   "the same name again: EEXIST");
	errno = 0;
	ok(ucma_mem_event_register(NULL, record, NULL) == -1 && errno == EINVAL &&
		   ucma_mem_event_register("x", NULL, NULL) == -1 && errno == EINVAL &&
		   ucma_mem_event_register("", record, NULL) == -1 && errno == EINVAL,
	   "NULL or empty name, NULL callback: EINVAL");
	{
		char longname[80];

		memset(longname, 'n', sizeof(longname) - 1);
		longname[sizeof(longname) - 1] = '\0';
		errno = 0;
		ok(ucma_mem_event_register(longname, record, NULL) == -1 && errno == EINVAL,
		   "a 79-byte name: EINVAL");
	}
	if (ucma_init(&cfg) != 0 || !(a = ucma_arena_get())) {
		ok(0, "events: ucma_init: %s", strerror(errno));
		return;
	}
	note_span();
	ok(covers(&early_log, 0, UCMA_MEM_EVENT_MAP) && count_ev(&early_log, 0,
								 UCMA_MEM_EVENT_UNMAP) == 0,
	   "the library starts: MAP events cover both areas (%d events)", early_log.n);
	ok(early_log.deadlk_ok && early_log.vtophys_ok,
	   "inside a callback: register fails with EDEADLK, vtophys works");
	{
		int rc = ucma_mem_event_register("late", record, &late_log);

		ok(rc == 0 && covers(&late_log, 0, UCMA_MEM_EVENT_MAP) &&
			   count_ev(&late_log, 0, UCMA_MEM_EVENT_UNMAP) == 0,
		   "a late registrant is replayed MAP events covering both areas (%d events)",
		   late_log.n);
	}
	ok(early_log.n == 2, "the early one saw nothing again (%d events)", early_log.n);

	/* Fork: the child is told its areas are new. */
	if (pipe(fds) != 0)
		bail_out("pipe: %s", strerror(errno));
	mark_early = early_log.n;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		ssize_t w = write(fds[1], &early_log, sizeof(early_log));

		_exit(w == (ssize_t)sizeof(early_log) ? 0 : 1);
	}
	close(fds[1]);
	memset(&child_log, 0, sizeof(child_log));
	if (pid > 0) {
		if (read(fds[0], &child_log, sizeof(child_log)) != (ssize_t)sizeof(child_log))
			child_log.n = -1;
		waitpid(pid, &status, 0);
	}
	close(fds[0]);
	ok(WIFEXITED(status) && child_log.n >= mark_early + 4 &&
		   covers(&child_log, mark_early, UCMA_MEM_EVENT_UNMAP) &&
		   covers(&child_log, mark_early, UCMA_MEM_EVENT_MAP) &&
		   child_log.e[mark_early].ev == UCMA_MEM_EVENT_UNMAP,
	   "in the child of fork: UNMAP then MAP for every area before fork returns "
	   "(%d events)", child_log.n - mark_early);
	ok(early_log.n == mark_early, "the parent got no event from the fork");

	/* Teardown: UNMAP while the memory is still mapped. */
	mark_early = early_log.n;
	mark_late = late_log.n;
	early_log.mapped_ok = late_log.mapped_ok = false;
	reset();
	ok(covers(&early_log, mark_early, UCMA_MEM_EVENT_UNMAP) &&
		   covers(&late_log, mark_late, UCMA_MEM_EVENT_UNMAP) && early_log.mapped_ok &&
		   late_log.mapped_ok,
	   "teardown: UNMAP for every area to both callbacks, delivered before the unmap");

	ok(ucma_mem_event_unregister("late") == 0, "unregister");
	errno = 0;
	ok(ucma_mem_event_unregister("late") == -1 && errno == ENOENT,
	   "unregister it again: ENOENT");
	errno = 0;
	ok(ucma_mem_event_unregister(NULL) == -1 && errno == EINVAL, "unregister NULL: EINVAL");
	mark_early = early_log.n;
	mark_late = late_log.n;
	cfg.cma_areas = NULL;
	cfg.cma_size = 8 * MiB;
	if (!start(&cfg)) {
		ok(0, "events: ucma_init again: %s", strerror(errno));
		return;
	}
	note_span();
	ok(late_log.n == mark_late && covers(&early_log, mark_early, UCMA_MEM_EVENT_MAP),
	   "after unregistering nothing is delivered; the other callback sees the new area");
	ucma_mem_event_unregister("early");
	ok(stat_of("mem_event_map") > 0 && stat_of("mem_event_unmap") > 0,
	   "mem_event_map %llu, mem_event_unmap %llu", (unsigned long long)stat_of("mem_event_map"),
	   (unsigned long long)stat_of("mem_event_unmap"));
}

/* ------------------------------------------------------------------------ */
/* Fork                                                                      */
/* ------------------------------------------------------------------------ */


#define NOBJ 64

struct live {
	char *buf;
	size_t buf_len;
	ucma_handle_t h[NOBJ];
	size_t sz[NOBJ];
};

static bool live_make(struct live *l)
{
	memset(l, 0, sizeof(*l));
	l->buf_len = 3 * MiB + 4096;
	l->buf = ucma_alloc(l->buf_len, 0, 0);
	if (!l->buf)
		return false;
	tu_fill(l->buf, l->buf_len, 1);
	for (int i = 0; i < NOBJ; i++) {
		char *p;

		l->sz[i] = 100 + (size_t)i * 4099;
		l->h[i] = ucma_halloc(l->sz[i], 0);
		p = l->h[i] ? ucma_pin(l->h[i], 0) : NULL;
		if (!p)
			return false;
		tu_fill(p, l->sz[i], 100 + (uint64_t)i);
		ucma_unpin(l->h[i]);
	}
	return true;
}

static bool live_check(const struct live *l)
{
	bool good = tu_check(l->buf, l->buf_len, 1);

	if (!good)
		diag("pid %d: the buffer at %p is not what was written", (int)getpid(),
		     (void *)l->buf);
	for (int i = 0; good && i < NOBJ; i++) {
		const char *p = ucma_pin(l->h[i], 0);

		good = p && tu_check(p, l->sz[i], 100 + (uint64_t)i);
		if (!good)
			diag("pid %d: object %d at %p is not what was written", (int)getpid(), i,
			     (const void *)p);
		ucma_unpin(l->h[i]);
	}
	return good;
}

/*
 * Fork with @l live.  Child exit status: 0 good, 2 its copy is wrong, 3 it
 * saw something where it should see zeros, 4 its own allocations fail, 5
 * its area is not a shmem file of its own.  With @expect_empty the child
 * checks that its areas start empty instead.
 */
static int fork_with(const struct live *l, bool expect_empty)
{
	int status = -1;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		char *c;

		/* Its own file: never the parent's hugetlb pages. */
		if (stat_of("cma_default_file") != UCMA_FILE_SHMEM)
			_exit(5);
		if (expect_empty) {
			for (size_t i = 0; i < l->buf_len; i += 4096)
				if (l->buf[i])
					_exit(3);
		} else {
			if (!live_check(l))
				_exit(2);
			tu_fill(l->buf, l->buf_len, 77);	/* the parent must not see this */
			for (int i = 0; i < NOBJ; i++)
				if (ucma_hfree(l->h[i]) != 0)
					_exit(4);
			if (ucma_release(l->buf) != 0)
				_exit(4);
		}
		c = ucma_alloc(4 * MiB, 0, UCMA_ALLOC_ZERO);
		if (!c || c[4 * MiB - 1] != 0)
			_exit(4);
		tu_fill(c, 4 * MiB, 5);
		_exit(tu_check(c, 4 * MiB, 5) && ucma_release(c) == 0 ? 0 : 4);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return status;
}

/*
 * The movable slabs of one arena outlive ucma_test_reset(): every case
 * that makes movable objects runs in a process of its own (tap_in_child).
 */
static void case_fork(void)
{
	struct ucma_config cfg = cfg_of(96 * MiB, 48 * MiB, UCMA_BACKING_NONE);
	struct live l;
	int status, fds_before;

	if (!start(&cfg) || !live_make(&l)) {
		ok(0, "fork: setup: %s", strerror(errno));
		return;
	}
	fds_before = open_fds();
	status = fork_with(&l, false);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "fork with a live buffer and %d movable objects: the child has all of them, "
	   "frees them, allocates its own (status %#x)", NOBJ, status);
	ok(live_check(&l), "the parent's buffer and objects are untouched by the child's writes");
	ok(open_fds() == fds_before, "the fork left no file descriptor behind in the parent");
	ok(stat_of("cma_default_file") == UCMA_FILE_SHMEM, "the parent's area is still its file");
	status = fork_with(&l, false);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && live_check(&l),
	   "a second fork works the same");

	/* A program that closes every descriptor and reuses the numbers. */
	{
		int fd = a->areas[0].frames->fd, other;
		pid_t pid;

		close(fd);
		other = open("/dev/null", O_RDONLY | O_CLOEXEC);
		diag("the area's descriptor %d closed, %d now names /dev/null", fd, other);
		fflush(NULL);
		pid = fork();
		if (pid == 0)
			_exit(!live_check(&l) ? 2 : fcntl(other, F_GETFD) == -1 ? 6 : 0);
		status = -1;
		if (pid > 0)
			waitpid(pid, &status, 0);
		ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && live_check(&l),
		   "with its descriptor closed and the number reused, fork still copies the "
		   "areas and the child keeps the program's file open (status %#x)", status);
		bool touched = false;

		errno = 0;
		ok(ucma_frames_map_at(&a->areas[0], 0, 1, area_base(0), false, &touched) == -1 &&
			   errno == EBADF && !touched,
		   "mapping frames without the file: EBADF, nothing mapped");
		close(other);
	}
}

static void case_fork_dontfork(void)
{
	struct ucma_config cfg = cfg_of(96 * MiB, 48 * MiB, UCMA_BACKING_NONE);
	struct live l;
	int status;

	cfg.cma_dontfork = 1;
	if (!start(&cfg) || !live_make(&l)) {
		ok(0, "fork, dontfork: setup: %s", strerror(errno));
		return;
	}
	status = fork_with(&l, true);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "UCMA_CMA_DONTFORK: the child's areas start empty and work (status %#x)", status);
	ok(live_check(&l), "the parent's data is intact");
}

/* ------------------------------------------------------------------------ */
/* Borrowing frames                                                          */
/* ------------------------------------------------------------------------ */

static void test_map_at(void)
{
	struct ucma_config cfg = cfg_of(64 * MiB, 32 * MiB, UCMA_BACKING_NONE);
	struct ucma_cma_area *area;
	uint32_t pfn, s;
	bool touched = false;
	char *at, *slot;

	/* The interfaces by hand: the heap must not borrow frames itself
	 * meanwhile (test_lend.c tests that). */
	cfg.cma_policy = UCMA_CMA_LEND_HANDLES;
	if (!start(&cfg)) {
		ok(0, "map_at: ucma_init: %s", strerror(errno));
		return;
	}
	area = &a->areas[0];
	/* A pageblock of the NORMAL zone stands for a borrower's address, a
	 * contiguous buffer of one frame for the frame lent. */
	pfn = ucma_pages_alloc(a, UCMA_PAGEBLOCK_PAGES, UCMA_GFP_UNMOVABLE);
	slot = ucma_alloc(FRAME, FRAME, 0);
	if (pfn == UCMA_PFN_NONE || !slot) {
		ok(0, "a NORMAL pageblock for the borrower and a frame to lend");
		return;
	}
	at = ucma_pfn_to_addr(a, pfn);
	s = (uint32_t)((slot - (char *)area_base(0)) / FRAME);
	errno = 0;
	ok(ucma_frames_map_at(area, s, 1, at + 4096, false, &touched) == -1 && errno == EINVAL &&
		   ucma_frames_map_at(area, 16, 1, at, false, &touched) == -1 && errno == EINVAL &&
		   !touched,
	   "map_at: a misaligned address or a slot out of range: EINVAL, nothing mapped");
	ok(ucma_frames_map_at(area, s, 1, at, true, &touched) == 0 && touched,
	   "the frame of slot %u mapped at a NORMAL pageblock", s);
	strcpy(slot + 100, "through the slot");
	ok(strcmp(at + 100, "through the slot") == 0, "both addresses show the same frame");
	ok(ucma_frames_set_lent(area, s, 1, true) == 0 && stat_of("cma_default_frames_lent") == 1 &&
		   ucma_frames_set_lent(area, s, 1, true) == 0 &&
		   stat_of("cma_default_frames_lent") == 1 &&
		   ucma_frames_set_lent(area, s, 1, false) == 0 &&
		   stat_of("cma_default_frames_lent") == 0,
	   "lent frames are counted once, and given back");
	ok(ucma_frames_restore(area, s, 1) == 0 && strcmp(slot + 100, "through the slot") == 0,
	   "restore maps the frame at its slot again");
	/* Give the borrower's address its private memory back. */
	mmap(at, FRAME, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	ucma_pages_free(a, pfn);
	ucma_release(slot);
}

/* ------------------------------------------------------------------------ */
/* Hugetlb frames in physical order (root)                                   */
/* ------------------------------------------------------------------------ */

#define POOL_PAGES 64

/* The physical address of each frame of area 0, read from pagemap. */
static bool read_frames(uint64_t *phys, uint32_t n)
{
	for (uint32_t s = 0; s < n; s++)
		if (ucma_virt2phys((char *)area_base(0) + s * FRAME, &phys[s]) != 0)
			return false;
	return true;
}

/* Longest run of physically consecutive frames (in frames). */
static uint32_t longest_run(const uint64_t *phys, uint32_t n)
{
	uint32_t best = n ? 1 : 0, cur = 1;

	for (uint32_t s = 1; s < n; s++) {
		cur = phys[s] == phys[s - 1] + FRAME ? cur + 1 : 1;
		best = cur > best ? cur : best;
	}
	return best;
}

/* Is every 4 KiB page of [p, p + len) where the first one says? */
static bool pages_agree(const char *p, size_t len)
{
	uint64_t first, cur;

	if (ucma_virt2phys(p, &first) != 0)
		return false;
	for (size_t off = UCMA_PAGE_SIZE; off < len; off += UCMA_PAGE_SIZE)
		if (ucma_virt2phys(p + off, &cur) != 0 || cur != first + off)
			return false;
	return true;
}

/* PHYS_CONTIG of 2, 4, 8, 16 MiB: success exactly when a run exists. */
static void phys_sizes(const char *when, uint32_t run)
{
	static const size_t sizes[] = { 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB };

	for (size_t i = 0; i < UCMA_ARRAY_SIZE(sizes); i++) {
		bool exists = (size_t)run * FRAME >= sizes[i];
		void *p;
		int err;

		errno = 0;
		p = ucma_alloc(sizes[i], 0, UCMA_ALLOC_PHYS_CONTIG);
		err = errno;
		if (exists)
			ok(p && pages_agree(p, sizes[i]),
			   "%s: PHYS_CONTIG %zu MiB (a %u-frame run exists): %s, every page "
			   "agrees with pagemap", when, sizes[i] >> 20, run,
			   p ? "allocated" : strerror(err));
		else
			ok(!p && err == ENOMEM, "%s: PHYS_CONTIG %zu MiB (longest run %u frames): "
			   "ENOMEM (%s)", when, sizes[i] >> 20, run, p ? "allocated" : strerror(err));
		if (p)
			ucma_release(p);
	}
}

/* ucma_vtophys at @p: does its length match pagemap page by page, and end
 * where the physical run (or the area) ends? */
static bool vtophys_agrees(const char *p, const char *area_end)
{
	size_t in_page = (uintptr_t)p & (UCMA_PAGE_SIZE - 1), len;
	const char *page = p - in_page;
	uint64_t phys, page_phys, cur;

	if (ucma_vtophys(p, &phys, &len) != 0 || ucma_virt2phys(p, &cur) != 0 || cur != phys)
		return false;
	page_phys = phys - in_page;
	for (size_t off = UCMA_PAGE_SIZE; off < in_page + len; off += UCMA_PAGE_SIZE)
		if (ucma_virt2phys(page + off, &cur) != 0 || cur != page_phys + off)
			return false;
	/* The run really ends there. */
	if (p + len < area_end && ucma_virt2phys(p + len, &cur) == 0 && cur == phys + len)
		return false;
	return true;
}

static void case_hugetlb(void)
{
	struct ucma_config cfg = cfg_of(128 * MiB + 16 * MiB, 128 * MiB, UCMA_BACKING_HUGETLB_2M);
	uint64_t phys[POOL_PAGES], t0;
	char why[256];
	uint32_t run;
	bool sorted = true;

	if (tu_hugepages_reserve(2048, POOL_PAGES, why, sizeof(why)) != 0) {
		skip(1, "hugetlb frames: %s", why);
		return;
	}
	t0 = tu_now_ns();
	if (!start(&cfg) || a->zones[UCMA_ZONE_CMA].backing != UCMA_BACKING_HUGETLB_2M) {
		ok(0, "hugetlb frames: the CMA area on %d pool pages (%s)", POOL_PAGES,
		   a ? ucma_backing_name("cma") : strerror(errno));
		return;
	}
	diag("ucma_init with a 128 MiB hugetlb area: %.1f ms, of which reading, sorting and "
	     "mapping frames %.2f ms", (double)(tu_now_ns() - t0) / 1e6,
	     (double)stat_of("cma_default_frames_sort_ns") / 1e6);
	ok(stat_of("cma_default_file") == UCMA_FILE_HUGETLB &&
		   stat_of("cma_default_frames") == POOL_PAGES,
	   "the area is a hugetlb file of %d frames", POOL_PAGES);
	if (!read_frames(phys, POOL_PAGES)) {
		ok(0, "pagemap gives every frame's address: %s", strerror(errno));
		return;
	}
	for (uint32_t s = 1; s < POOL_PAGES; s++)
		sorted &= phys[s] > phys[s - 1];
	run = longest_run(phys, POOL_PAGES);
	diag("longest physically contiguous run: %u frames (%u MiB) of %d", run, run * 2,
	     POOL_PAGES);
	ok(sorted, "frames are mapped in ascending physical order");
	ok(stat_of("cma_default_phys_run_max") == (uint64_t)run * FRAME &&
		   stat_of("cma_default_phys_run_free") == (uint64_t)run * FRAME,
	   "statistics: longest run %llu KiB, of free pages %llu KiB (pagemap: %u frames)",
	   (unsigned long long)stat_of("cma_default_phys_run_max") >> 10,
	   (unsigned long long)stat_of("cma_default_phys_run_free") >> 10, run);

	phys_sizes("empty area", run);

	/* Lend the whole area to movable objects: the runs must be emptied. */
	{
		enum { OBJ = 256 * 1024 };
		ucma_handle_t *hs = calloc(4096, sizeof(*hs));
		unsigned n = 0;

		while (hs && n < 4096 &&
		       stat_of("nr_free_pages_cma") > (128 * MiB / 10) / UCMA_PAGE_SIZE) {
			ucma_handle_t h = ucma_halloc(OBJ, UCMA_H_ZERO);

			if (!h)
				break;
			hs[n++] = h;
		}
		diag("%u movable objects of 256 KiB lent the area (%llu pages free)", n,
		     (unsigned long long)stat_of("nr_free_pages_cma"));
		phys_sizes("area lent to movable objects", run);
		for (unsigned i = 0; i < n; i++)
			ucma_hfree(hs[i]);
		free(hs);
	}

	/* vtophys at many places. */
	{
		const char *base = area_base(0), *end = base + area_bytes(0);
		uint64_t seed = 42;
		bool good = true;
		int tried = 0;

		for (; tried < 200 && good; tried++) {
			size_t off = (size_t)(tu_rand(&seed) % area_bytes(0));

			good = vtophys_agrees(base + off, end);
			if (!good)
				diag("vtophys disagrees with pagemap at offset %#zx", off);
		}
		ok(good, "ucma_vtophys lengths agree with pagemap page by page (%d places)", tried);
	}

	/* After a buffer takes part of the longest run, the free run shrinks. */
	{
		void *p = run >= 2 ? ucma_alloc(4 * MiB, 0, UCMA_ALLOC_PHYS_CONTIG) : NULL;

		/* The pool's frames are where the kernel put them: without
		 * two adjacent ones there is no 4 MiB buffer to take.  Said
		 * so, so that the plan does not change from run to run. */
		if (run >= 2)
			ok(p && stat_of("cma_default_phys_run_free") < (uint64_t)run * FRAME + 1,
			   "phys_run_free with a 4 MiB buffer live: %llu KiB",
			   (unsigned long long)stat_of("cma_default_phys_run_free") >> 10);
		else
			skip(1, "phys_run_free with a 4 MiB buffer live: the longest physical run "
				"is %u frame", run);
		if (p)
			ucma_release(p);
	}

	/* A child copies into a file of its own, taking no pool pages. */
	{
		struct live l;
		int status;

		if (!live_make(&l)) {
			ok(0, "hugetlb fork: setup");
			return;
		}
		status = fork_with(&l, false);
		ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && live_check(&l),
		   "fork over hugetlb frames: the child copies into a shmem file of its own, "
		   "the parent is intact (status %#x)", status);
	}
}

/* The end of a child process of tap_in_child(). */
static void child_exit(void)
{
	reset();
}

int main(void)
{
	plan_no_plan();
	tu_clear_env();
	/* ThreadSanitizer cannot follow threads started in the child of a
	 * multi-threaded process: no background compaction thread there. */
	if (getenv("UCMA_TEST_SANITIZER") && strcmp(getenv("UCMA_TEST_SANITIZER"), "tsan") == 0)
		setenv("UCMA_COMPACT", "0", 1);
	diag("shmem huge pages %s; THP %s; %s", ucma_os_shmem_thp_available() ? "on" : "off",
	     ucma_os_thp_available() ? "on" : "off", geteuid() == 0 ? "root" : "not root");
	test_shmem_file();
	test_phys_fail_fast();
	test_vtophys_errors();
	test_events();
	test_map_at();
	reset();
	tap_in_child("fork", case_fork, child_exit);
	tap_in_child("fork with UCMA_CMA_DONTFORK", case_fork_dontfork, child_exit);
	tap_in_child("hugetlb frames", case_hugetlb, child_exit);
	return done();
}
