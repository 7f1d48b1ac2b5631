/*
 * test_lend.c - the CMA areas' frames lent to the malloc heap, and taken
 * back (lend.c).
 *
 * Each case runs in a process of its own (a fork of this one, which never
 * starts the library nor a thread), so that "single-threaded" means what
 * it says for the fork cases.  Every case needs a userfaultfd with
 * write-protection (root, or vm.unprivileged_userfaultfd=1, or
 * /dev/userfaultfd); without one the whole test is skipped, and one case
 * checks that lending is then off and says so.
 *
 *  - lending: large malloc blocks land on CMA frames (the heap's mapping is
 *    the area's file, the counters agree); ucma_alloc() of the whole area
 *    takes them back (same address, same data, private memory again);
 *    freed and trimmed, the heap lends again, and calloc() on a frame that
 *    held a device buffer's data returns zeros;
 *  - a wholly free borrowed pageblock is given back without copying;
 *  - writer threads keep writing lent memory while ucma_alloc() takes it
 *    back, round after round: no write is lost, no byte changes;
 *  - the kernel writing into a page being taken back (read(2) from a
 *    pipe, recv() of a datagram, accept4(), getrandom()) and a signal
 *    handler writing there: each waits, then completes with the right
 *    data, never EFAULT; the case holds the take-back inside its
 *    write-protected window (a hook on mremap) until the writer is seen
 *    blocked, so it does not depend on timing;
 *  - fork with live lent memory, single-threaded (the child copies, the
 *    parent keeps lending) and with threads (the parent takes everything
 *    back first): parent and child data stay separate; vfork and
 *    posix_spawn with lent memory;
 *  - after ucma_unlend(), the program's madvise(MADV_DONTNEED) and
 *    mprotect() on its block keep their meaning across later take-backs;
 *    a page the program unmapped does not stop a take-back;
 *  - ucma_unlend_all() made between a frame's reservation and its mapping
 *    (from the UNMAP event's callback): nothing stays lent;
 *  - injected faults: no userfaultfd (lending off, said once, everything
 *    else as before), registration refused (the frame stays lent, data
 *    intact, a later take-back works), mremap failing half way through a
 *    pageblock (resumed later, data intact), the frame not mappable at the
 *    heap (private memory, counted as a fallback);
 *  - as root with a hugetlb pool (2 MiB pages reserved here and given back
 *    at exit): the same with hugetlb frames.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "memevent.h"
#include "frames.h"
#include "lend.h"
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/single_threaded.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

#define MiB ((size_t)1 << 20)
#define PB UCMA_PAGEBLOCK_SIZE
#define PAGE UCMA_PAGE_SIZE
#define CMA_MB 16
#define NFRAMES (CMA_MB / 2)

extern char **environ;

static struct ucma_arena *a;
static struct ucma_os_ops real;		/* the table as the library set it up */
static int cma_backing = UCMA_BACKING_NONE;
static int normal_backing = UCMA_BACKING_NONE;

static struct ucma_config cfg_of(size_t arena, size_t cma)
{
	struct ucma_config cfg = {
		.arena_size = arena,
		.cma_size = cma,
		.hugepages = cma_backing,
		.hugepages_normal = normal_backing,
	};

	return cfg;
}

static bool start(void)
{
	struct ucma_config cfg = cfg_of(64 * MiB, CMA_MB * MiB);

	ucma_defer_drain();
	ucma_test_reset();
	a = NULL;
	if (ucma_init(&cfg) != 0)
		return false;
	a = ucma_arena_get();
	return a != NULL;
}

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	if (ucma_stat(name, &v) != 0)
		return UINT64_MAX;
	return v;
}

/* Is @addr on a CMA frame? */
static bool on_frame(const void *addr)
{
	return tu_on_frame(addr);
}

/* The permissions field of the mapping holding @addr ("rw-p"...). */
static void perms_of(const void *addr, char out[5])
{
	char line[512], perms[8];

	strcpy(out, "????");
	if (tu_maps_line(addr, line, sizeof(line)) && sscanf(line, "%*x-%*x %7s", perms) == 1) {
		memcpy(out, perms, 4);
		out[4] = '\0';
	}
}

static bool zones_ok(void)
{
	char why[256];

	for (int z = 0; z < UCMA_ZONE_NR; z++)
		if (ucma_zone_check(&a->zones[z], why, sizeof(why)) != 0) {
			diag("zone %d: %s", z, why);
			return false;
		}
	return true;
}

/* Stamped blocks: every page holds a pattern of its own. */
static char *block_new(size_t size, uint64_t seed)
{
	char *b = ucma_malloc(size);

	if (b)
		for (size_t off = 0; off < size; off += PAGE)
			tu_fill(b + off, PAGE, seed + off / PAGE);
	return b;
}

static bool block_good(const char *b, size_t size, uint64_t seed)
{
	for (size_t off = 0; off < size; off += PAGE)
		if (!tu_check(b + off, PAGE, seed + off / PAGE))
			return false;
	return true;
}

/* Free everything and let the heap lend again: freed pageblocks are
 * purged (clean), so the next allocation breaks into fresh ones. */
static void blocks_free(char **b, int n)
{
	for (int i = 0; i < n; i++)
		ucma_free(b[i]);
	ucma_trim();
}

/* ------------------------------------------------------------------------ */
/* Lending and taking back                                                   */
/* ------------------------------------------------------------------------ */

static void case_basic(void)
{
	char *b[4], *buf, *z;
	bool good = true, framed = true, zero = true;
	uint64_t lent;
	struct ucma_frames *f;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	f = ucma_area_frames(&a->areas[0]);
	ok(f->fd >= 0 && f->frame_size == PB, "the CMA area is a file of 2 MiB frames (%s)",
	   ucma_frame_file_str(f->kind));
	/* Whole pageblocks: blocks of 3 MiB are packed across pageblock
	 * boundaries (zone.c take_across()), four of them in six. */
	for (int i = 0; i < 4; i++) {
		b[i] = block_new(4 * MiB, 100 + (uint64_t)i * 1000);
		framed &= b[i] && on_frame(b[i]) && on_frame(b[i] + 4 * MiB - 1);
	}
	lent = stat_of("lend_heap_pageblocks");
	ok(framed && lent == NFRAMES && stat_of("lend_heap_lent") == NFRAMES &&
		   stat_of("cma_default_frames_lent") == NFRAMES &&
		   stat_of("nr_free_pages_cma") == 0,
	   "four 4 MiB blocks lie on CMA frames: %llu pageblocks borrowed, the area's %d frames "
	   "counted lent", (unsigned long long)lent, NFRAMES);
	ok(zones_ok(), "zone invariants hold while lent");
	buf = ucma_alloc(CMA_MB * MiB, 0, 0);
	for (int i = 0; i < 4; i++)
		good &= block_good(b[i], 4 * MiB, 100 + (uint64_t)i * 1000) && !on_frame(b[i]);
	ok(buf && good && stat_of("lend_heap_pageblocks") == 0 &&
		   stat_of("lend_heap_migrated") == NFRAMES &&
		   stat_of("lend_heap_bytes_copied") == (uint64_t)CMA_MB * MiB &&
		   stat_of("cma_default_frames_lent") == 0,
	   "ucma_alloc of the whole area takes every frame back: same addresses, same data, "
	   "private memory (%llu migrated, %llu bytes copied)",
	   (unsigned long long)stat_of("lend_heap_migrated"),
	   (unsigned long long)stat_of("lend_heap_bytes_copied"));
	ok(stat_of("lend_heap_stall_count") > 0 && stat_of("lend_heap_stall_p99_ns") > 0,
	   "writer stalls are recorded (%llu windows, p99 %llu ns)",
	   (unsigned long long)stat_of("lend_heap_stall_count"),
	   (unsigned long long)stat_of("lend_heap_stall_p99_ns"));
	if (buf)
		memset(buf, 0x5a, CMA_MB * MiB);	/* the frames now hold data */
	ucma_release(buf);
	blocks_free(b, 4);
	z = ucma_calloc(1, 4 * MiB);	/* whole pageblocks: fresh ones */
	for (size_t i = 0; z && i < 4 * MiB; i += 64)
		zero &= z[i] == 0;
	ok(z && on_frame(z) && zero && stat_of("lend_heap_lent") > NFRAMES,
	   "freed and trimmed, the heap lends again; calloc on a frame that held other data "
	   "returns zeros");
	ucma_free(z);
	ok(ucma_owns_fd(f->fd) == 1 && ucma_owns_fd(0) == 0 && ucma_owns_fd(-1) == 0,
	   "ucma_owns_fd: the area's file yes, others no");
	errno = 0;
	ok(ucma_unlend(NULL, 0) == 0 && ucma_unlend(&a, sizeof(a)) == 0 &&
		   ucma_unlend((void *)(UINTPTR_MAX - PAGE + 1), 2 * PAGE) == -1 && errno == EINVAL &&
		   ucma_unlend((void *)UINTPTR_MAX, 1) == 0 &&
		   ucma_unlend((void *)(UINTPTR_MAX - PAGE + 1), PAGE) == 0,
	   "ucma_unlend: nothing lent there is no error; a range that wraps is EINVAL, one "
	   "that ends at the top of the address space is not");
	ok(zones_ok(), "zone invariants hold at the end");
}

static void case_return_free(void)
{
	char *b[2];
	uint64_t returned, migrated;
	void *buf;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	b[0] = block_new(4 * MiB, 1);
	b[1] = block_new(4 * MiB, 2);
	ok(stat_of("lend_heap_pageblocks") == 4, "two 4 MiB blocks on 4 frames");
	ucma_free(b[0]);
	ucma_free(b[1]);
	returned = stat_of("lend_heap_returned");
	ucma_trim();
	ok(stat_of("lend_heap_returned") == returned + 4 && stat_of("lend_heap_pageblocks") == 0,
	   "wholly free borrowed pageblocks give their frames back when trimmed, no copy");
	migrated = stat_of("lend_heap_migrated");
	b[0] = block_new(2 * MiB, 3);
	ucma_free(b[0]);
	buf = ucma_alloc(CMA_MB * MiB, 0, 0);
	ok(buf && stat_of("lend_heap_migrated") == migrated && stat_of("lend_heap_pageblocks") == 0,
	   "ucma_alloc takes a wholly free borrowed pageblock back without copying it");
	ucma_release(buf);
	ok(zones_ok(), "zone invariants hold");

	/* A borrowed pageblock freed whole waits on a per-CPU list (pcp.c),
	 * allocated to the buddy allocator: taking it back drains it first
	 * and gives the frame back, no copy. */
	ucma_trim();
	{
		uint32_t pfn = ucma_pages_alloc(a, UCMA_PAGEBLOCK_PAGES, UCMA_GFP_UNMOVABLE);
		bool borrowed, listed;

		borrowed = pfn != UCMA_PFN_NONE && ucma_lend_borrowed(a, pfn >> UCMA_PAGEBLOCK_ORDER);
		if (pfn != UCMA_PFN_NONE)
			ucma_pages_free(a, pfn);
		listed = pfn != UCMA_PFN_NONE && (a->pages[pfn].flags & UCMA_PF_PCP);
		migrated = stat_of("lend_heap_migrated");
		returned = stat_of("lend_heap_returned");
		if (!borrowed || !listed) {
			skip(1, "the pageblock was %s", !borrowed ? "not lent" : "not listed");
		} else {
			int rc = ucma_unlend(ucma_pfn_to_addr(a, pfn), PB);

			ok(rc == 0 && stat_of("lend_heap_migrated") == migrated &&
				   stat_of("lend_heap_returned") == returned + 1 &&
				   !(a->pages[pfn].flags & UCMA_PF_PCP),
			   "a borrowed pageblock on a per-CPU list is taken back by giving its "
			   "frame back, not copied (migrated %llu -> %llu, returned %llu -> %llu)",
			   (unsigned long long)migrated,
			   (unsigned long long)stat_of("lend_heap_migrated"),
			   (unsigned long long)returned,
			   (unsigned long long)stat_of("lend_heap_returned"));
		}
	}
	ok(zones_ok(), "zone invariants hold");
}

/*
 * A device's view of the CMA areas through memory events: a frame lent to
 * the heap is UNMAPped, one given back is MAPped, and the view is up to
 * date when the call that changed it returns.  The purge of ucma_trim()
 * (and the periodic one of free()) gives frames back under the zone lock,
 * where nothing can be delivered; their MAP events stayed queued, so a
 * later ucma_alloc() handed out a buffer its callbacks had not been told
 * of (a device layer would refuse to register it).
 */
#define VIEW_PAGES (128 * MiB / PAGE)	/* of the arena: 64 MiB and the CMA area */

static struct {
	uintptr_t base;
	unsigned char mapped[VIEW_PAGES];
	bool bad;
} view;

static void view_event(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	size_t first = ((uintptr_t)addr - view.base) / PAGE;

	(void)arg;
	for (size_t i = first; i < first + len / PAGE; i++) {
		if (i >= VIEW_PAGES || view.mapped[i] == (ev == UCMA_MEM_EVENT_MAP)) {
			view.bad = true;
			return;
		}
		view.mapped[i] = ev == UCMA_MEM_EVENT_MAP;
	}
}

static bool view_covers(const void *p, size_t len)
{
	size_t first = ((uintptr_t)p - view.base) / PAGE;

	for (size_t i = first; i < first + len / PAGE; i++)
		if (i >= VIEW_PAGES || !view.mapped[i])
			return false;
	return true;
}

static void case_events_delivered(void)
{
	char *b[2];
	void *buf;
	size_t cma_first;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	memset(&view, 0, sizeof(view));
	view.base = a->base;
	if (ucma_mem_event_register("view", view_event, NULL) != 0) {
		ok(0, "ucma_mem_event_register: %s", strerror(errno));
		return;
	}
	cma_first = (uintptr_t)ucma_pfn_to_addr(a, a->zones[UCMA_ZONE_CMA].start_pfn) - a->base;
	ok(view_covers((char *)a->base + cma_first, CMA_MB * MiB) && !view.bad,
	   "registered: the whole CMA area is mapped");
	b[0] = block_new(4 * MiB, 11);
	b[1] = block_new(4 * MiB, 12);
	ok(stat_of("lend_heap_pageblocks") == 4 && !view_covers((char *)a->base + cma_first,
								  CMA_MB * MiB) && !view.bad,
	   "two 4 MiB blocks on 4 lent frames, which the view no longer holds");
	ucma_free(b[0]);
	ucma_free(b[1]);
	ucma_trim();
	ok(stat_of("lend_heap_pageblocks") == 0 &&
		   view_covers((char *)a->base + cma_first, CMA_MB * MiB) && !view.bad,
	   "ucma_trim() gives the frames back, and their MAP events arrive before it returns");
	buf = ucma_alloc(CMA_MB * MiB, 0, 0);
	ok(buf && view_covers(buf, CMA_MB * MiB) && !view.bad,
	   "a buffer from the frames given back lies in the view when ucma_alloc() returns");
	ucma_release(buf);
	ucma_mem_event_unregister("view");
	ok(zones_ok(), "zone invariants hold");
}

/*
 * The heap's window onto lent frames: with lending, the NORMAL zone spans
 * the whole arena size, so a heap larger than arena - CMA lives in the
 * arena on borrowed frames instead of overflowing while they sit idle.
 * Without lending it keeps arena - CMA and the rest overflows.
 */
static bool heap_fill(char **b, int n, size_t size, bool *framed)
{
	bool all = true;

	*framed = false;
	for (int i = 0; i < n; i++) {
		b[i] = block_new(size, 7000 + (uint64_t)i * 100);
		all &= b[i] != NULL;
		*framed |= b[i] && on_frame(b[i]);
	}
	return all;
}

static void case_heap_window(void)
{
	/* 56 MiB of heap in a 64 MiB arena of which 16 MiB is CMA: more
	 * than the 48 MiB the CMA area leaves to NORMAL. */
	enum { NB = 28 };
	const size_t bs = 2 * MiB;
	char *b[NB], *buf;
	bool good = true, framed, filled;
	uint64_t ovf, lent;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	ok(a->zones[UCMA_ZONE_NORMAL].managed_pages == (64 * MiB) / PAGE &&
		   a->zones[UCMA_ZONE_CMA].managed_pages == (CMA_MB * MiB) / PAGE,
	   "lending: NORMAL spans the whole 64 MiB arena size (%llu pages), the CMA area "
	   "its 16 MiB beside it",
	   (unsigned long long)a->zones[UCMA_ZONE_NORMAL].managed_pages);
	ovf = stat_of("overflow_alloc");
	filled = heap_fill(b, NB, bs, &framed);
	ovf = stat_of("overflow_alloc") - ovf;
	lent = stat_of("lend_heap_pageblocks");
	ok(filled && framed && ovf == 0 && lent == NFRAMES,
	   "a 56 MiB heap fits in the arena: %llu pageblocks on lent frames, %llu blocks "
	   "overflowed", (unsigned long long)lent, (unsigned long long)ovf);
	buf = ucma_alloc(CMA_MB * MiB, 0, 0);
	for (int i = 0; i < NB; i++)
		good &= b[i] && block_good(b[i], bs, 7000 + (uint64_t)i * 100) && !on_frame(b[i]);
	ok(buf && good && stat_of("lend_heap_pageblocks") == 0,
	   "ucma_alloc of the whole area takes the frames back from under the heap, data "
	   "intact");
	ucma_release(buf);
	blocks_free(b, NB);
	ok(zones_ok(), "zone invariants hold");
}

/* Mappings of this process that overlap [lo, hi). */
static int mappings_over(uintptr_t lo, uintptr_t hi)
{
	return tu_maps_count(lo, hi, NULL, 0, 0);
}

/*
 * A growing heap on lent frames: each pageblock lent next to a lent one
 * gets the frame whose file offset continues its neighbour's, so the
 * kernel merges their mappings (one per lent pageblock cost a GiB of heap
 * a thousand of vm.max_map_count's 65,530).  Taking back a pageblock in
 * the middle of a merged mapping splits it, data intact.
 */
static void case_mappings_merge(void)
{
	enum { NB = 32 };
	const size_t bs = 3 * MiB;
	struct ucma_config cfg = cfg_of(256 * MiB, 128 * MiB);
	char *b[NB], *buf;
	bool good = true, framed, filled, moved;
	uint64_t lent;
	uintptr_t lo, hi;
	int maps, after;

	ucma_defer_drain();
	ucma_test_reset();
	if (ucma_init(&cfg) != 0 || !(a = ucma_arena_get())) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	lo = (uintptr_t)ucma_pfn_to_addr(a, a->zones[UCMA_ZONE_NORMAL].start_pfn);
	hi = (uintptr_t)ucma_pfn_to_addr(a, a->zones[UCMA_ZONE_NORMAL].end_pfn);
	filled = heap_fill(b, NB, bs, &framed);
	lent = stat_of("lend_heap_pageblocks");
	maps = mappings_over(lo, hi);
	ok(filled && framed && lent >= 32 && maps > 0 && (uint64_t)maps <= lent / 16 + 4,
	   "%llu pageblocks of a growing heap lent, in %d mappings over the heap's %zu MiB "
	   "(one per pageblock before)",
	   (unsigned long long)lent, maps, (size_t)(hi - lo) / MiB);
	errno = 0;
	moved = ucma_unlend(b[NB / 2], bs) == 0;
	after = mappings_over(lo, hi);
	for (int i = 0; i < NB; i++)
		good &= b[i] && block_good(b[i], bs, 7000 + (uint64_t)i * 100);
	ok(moved && !on_frame(b[NB / 2]) && !on_frame(b[NB / 2] + bs - 1) && good &&
		   stat_of("lend_heap_pageblocks") < lent && after > maps,
	   "ucma_unlend in the middle of a merged mapping splits it (%d mappings), data "
	   "intact: %s", after, moved ? "taken back" : strerror(errno));
	buf = ucma_alloc(128 * MiB, 0, 0);
	good = true;
	for (int i = 0; i < NB; i++)
		good &= block_good(b[i], bs, 7000 + (uint64_t)i * 100) && !on_frame(b[i]);
	ok(buf && good && stat_of("lend_heap_pageblocks") == 0,
	   "ucma_alloc of the whole area takes every merged run back, data intact");
	ucma_release(buf);
	blocks_free(b, NB);
	ok(zones_ok(), "zone invariants hold");
}

/* The same heap without lending: the CMA area is reserved beside it. */
static void case_no_heap_window(void)
{
	enum { NB = 28 };
	const size_t bs = 2 * MiB;
	char *b[NB];
	bool framed, filled;
	uint64_t ovf;

	setenv("UCMA_CMA_POLICY", "lend-handles", 1);
	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		setenv("UCMA_CMA_POLICY", "lend", 1);
		return;
	}
	ok(a->zones[UCMA_ZONE_NORMAL].managed_pages == ((64 - CMA_MB) * MiB) / PAGE,
	   "without lending NORMAL keeps what the CMA area leaves (%llu pages)",
	   (unsigned long long)a->zones[UCMA_ZONE_NORMAL].managed_pages);
	ovf = stat_of("overflow_alloc");
	filled = heap_fill(b, NB, bs, &framed);
	ovf = stat_of("overflow_alloc") - ovf;
	ok(filled && !framed && ovf > 0, "and the same heap overflows (%llu blocks)",
	   (unsigned long long)ovf);
	blocks_free(b, NB);
	setenv("UCMA_CMA_POLICY", "lend", 1);
}

/* ------------------------------------------------------------------------ */
/* Writers during take-backs                                                 */
/* ------------------------------------------------------------------------ */

struct writer {
	pthread_t t;
	char *buf;
	size_t len;
	uint64_t seed;
	uint64_t *last;			/* per page: the last value written (test memory) */
	_Atomic uint64_t passes;
	_Atomic bool stop;
};

/* Word 0 of each page counts up; the rest keeps its stamp. */
static void *writer_fn(void *arg)
{
	struct writer *w = arg;
	size_t pages = w->len / PAGE;
	uint64_t n = 0;

	while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
		for (size_t i = 0; i < pages; i++) {
			*(volatile uint64_t *)(w->buf + i * PAGE) = ++n;
			w->last[i] = n;
		}
		atomic_fetch_add(&w->passes, 1);
	}
	return NULL;
}

static bool writer_good(const struct writer *w)
{
	for (size_t i = 0; i < w->len / PAGE; i++) {
		const char *p = w->buf + i * PAGE;
		uint64_t v;
		char stamp[PAGE];

		memcpy(&v, p, sizeof(v));
		if (v != w->last[i])
			return false;
		tu_fill(stamp, PAGE, w->seed + i);
		if (memcmp(p + 8, stamp + 8, PAGE - 8) != 0)
			return false;
	}
	return true;
}

static void case_writers(void)
{
	enum { NW = 2, ROUNDS = 10 };
	struct writer w[NW];
	int rounds_ok = 0;
	bool lost = false, lent_each = true;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	for (int r = 0; r < ROUNDS; r++) {
		void *buf;

		for (int i = 0; i < NW; i++) {
			w[i].len = 3 * MiB;
			w[i].seed = (uint64_t)r * 100 + (uint64_t)i * 10000;
			w[i].buf = block_new(w[i].len, w[i].seed);
			w[i].last = calloc(w[i].len / PAGE, sizeof(uint64_t));
			atomic_store(&w[i].passes, 0);
			atomic_store(&w[i].stop, false);
			lent_each &= w[i].buf && on_frame(w[i].buf);
		}
		for (int i = 0; i < NW; i++) {
			if (pthread_create(&w[i].t, NULL, writer_fn, &w[i]) != 0)
				bail_out("pthread_create");
		}
		/* Every page written once before the frames go. */
		for (int i = 0; i < NW; i++)
			while (atomic_load(&w[i].passes) == 0)
				sched_yield();
		buf = ucma_alloc(CMA_MB * MiB, 0, 0);
		for (int i = 0; i < NW; i++) {
			atomic_store(&w[i].stop, true);
			pthread_join(w[i].t, NULL);
			lost |= !writer_good(&w[i]);
		}
		rounds_ok += buf != NULL;
		ucma_release(buf);
		for (int i = 0; i < NW; i++) {
			ucma_free(w[i].buf);
			free(w[i].last);
		}
		ucma_trim();
	}
	ok(lent_each, "each round's blocks were lent");
	ok(rounds_ok == ROUNDS && !lost,
	   "%d rounds of ucma_alloc of the whole area while %d threads write the lent blocks: "
	   "%d succeeded, %s", ROUNDS, NW, rounds_ok, lost ? "a write was lost" : "no write lost, "
	   "every stamp intact");
	ok(zones_ok(), "zone invariants hold");
}

/* ------------------------------------------------------------------------ */
/* Writers held inside the write-protected window                            */
/* ------------------------------------------------------------------------ */

/*
 * The hook: ucma_os.mremap is called by a take-back once a piece is
 * write-protected and copied.  When it is about to move the piece holding
 * hook.page, it lets the writer go (hook.go) and waits until the writer
 * is blocked on the page, then moves the piece (and the take-back wakes
 * the writer).
 */
static struct {
	char *page;			/* the page the writer writes */
	_Atomic pid_t tid;		/* the writer thread */
	_Atomic int go;			/* set by the hook: write now */
	_Atomic bool entered;		/* the writer is about to write */
	bool blocked;			/* the hook saw it blocked */
	void (*kick)(void);		/* how the hook starts the writer (or NULL) */
} hook;

/* Is thread @tid asleep (in the page fault on the protected page)? */
static bool thread_sleeping(pid_t tid)
{
	char path[64], buf[512], *rp;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && (rp[2] == 'S' || rp[2] == 'D');
}

static void *hook_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	if (hook.page && hook.page >= (char *)new_addr && hook.page < (char *)new_addr + new_len) {
		uint64_t t0 = tu_now_ns();

		if (hook.kick)
			hook.kick();
		atomic_store(&hook.go, 1);
		while (!atomic_load(&hook.entered) && tu_now_ns() - t0 < 10000000000ull)
			sched_yield();
		/* Entered, then asleep: on a loaded machine this takes what it
		 * takes; 10 s means it is not coming. */
		while (!thread_sleeping(hook.tid) && tu_now_ns() - t0 < 10000000000ull)
			sched_yield();
		hook.blocked = thread_sleeping(hook.tid);
		hook.page = NULL;
	}
	return real.mremap(old, old_len, new_len, flags, new_addr);
}

enum kernel_write { KW_READ, KW_RECV, KW_ACCEPT, KW_GETRANDOM, KW_NR };
static const char *const kw_names[KW_NR] = { "read(2) from a pipe", "recv() of a datagram",
					     "accept4()", "getrandom()" };

struct kw_ctx {
	enum kernel_write kind;
	int fd;				/* pipe read end, datagram socket, listener */
	char *dst;			/* in the lent block */
	ssize_t rc;
	int err;
};

static void *kw_thread(void *arg)
{
	struct kw_ctx *c = arg;

	hook.tid = (pid_t)syscall(SYS_gettid);
	while (!atomic_load(&hook.go))
		sched_yield();
	atomic_store(&hook.entered, true);
	switch (c->kind) {
	case KW_READ:
		c->rc = read(c->fd, c->dst, 3000);
		break;
	case KW_RECV:
		c->rc = recv(c->fd, c->dst, 4000, 0);
		break;
	case KW_ACCEPT:
		/* The address and its length both live in the lent page (the
		 * length was set before the page was protected). */
		c->rc = accept4(c->fd, (struct sockaddr *)(void *)c->dst,
				(socklen_t *)(void *)(c->dst + 1024), SOCK_CLOEXEC);
		break;
	default:
		c->rc = getrandom(c->dst + 100, 256, 0);
		break;
	}
	c->err = errno;
	return NULL;
}

/* One kernel write into a page of a lent block, held in the window. */
static bool kernel_write_case(enum kernel_write kind)
{
	char msg[3000], *blk = block_new(3 * MiB, 77), *page;
	struct kw_ctx c = { kind, -1, NULL, -1, 0 };
	int fds[2] = { -1, -1 }, client = -1;
	bool good = false;
	pthread_t t;

	if (!blk || !on_frame(blk))
		return false;
	/* The block starts a pageblock: a page in the second piece of the
	 * second pageblock. */
	page = blk + PB + 300 * 1024;
	c.dst = page;
	tu_fill(msg, sizeof(msg), 5 + kind);
	switch (kind) {
	case KW_READ:
		if (pipe(fds) != 0 || write(fds[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
			return false;
		c.fd = fds[0];
		break;
	case KW_RECV:
		if (socketpair(AF_UNIX, SOCK_DGRAM, 0, fds) != 0 ||
		    send(fds[1], msg, sizeof(msg), 0) != (ssize_t)sizeof(msg))
			return false;
		c.fd = fds[0];
		break;
	case KW_ACCEPT: {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/ucma-test-lend.%d", (int)getpid());
		unlink(sa.sun_path);
		c.fd = socket(AF_UNIX, SOCK_STREAM, 0);
		client = socket(AF_UNIX, SOCK_STREAM, 0);
		if (c.fd < 0 || client < 0 || bind(c.fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
		    listen(c.fd, 1) != 0 || connect(client, (struct sockaddr *)&sa, sizeof(sa)) != 0)
			return false;
		unlink(sa.sun_path);
		*(socklen_t *)(void *)(page + 1024) = sizeof(struct sockaddr_un);
		break;
	}
	default:
		break;
	}
	memset(&hook, 0, sizeof(hook));
	hook.page = page;
	if (pthread_create(&t, NULL, kw_thread, &c) != 0)
		return false;
	while (!hook.tid)
		sched_yield();
	ucma_os.mremap = hook_mremap;
	if (ucma_unlend(page, 1) != 0)
		diag("%s: ucma_unlend: %s", kw_names[kind], strerror(errno));
	ucma_os.mremap = real.mremap;
	atomic_store(&hook.go, 1);
	pthread_join(t, NULL);
	switch (kind) {
	case KW_READ:
	case KW_RECV:
		good = c.rc == (ssize_t)sizeof(msg) && memcmp(page, msg, sizeof(msg)) == 0;
		break;
	case KW_ACCEPT: {
		char byte = 'x', got = 0;

		good = c.rc >= 0 && ((struct sockaddr *)(void *)page)->sa_family == AF_UNIX &&
		       write(client, &byte, 1) == 1 && read((int)c.rc, &got, 1) == 1 && got == 'x';
		if (c.rc >= 0)
			close((int)c.rc);
		break;
	}
	default:
		good = c.rc == 256;
		break;
	}
	if (!good)
		diag("%s: returned %zd (%s)", kw_names[kind], c.rc, strerror(c.err));
	ok(good && hook.blocked && !on_frame(page) && block_good(blk, 300 * 1024, 77),
	   "%s into a page being taken back: %s, completes with its data%s", kw_names[kind],
	   hook.blocked ? "waits" : "did not wait", c.rc < 0 && c.err == EFAULT ? " (EFAULT!)" : "");
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (kind == KW_ACCEPT) {
		close(c.fd);
		close(client);
	}
	ucma_free(blk);
	ucma_trim();
	return good;
}

static void case_kernel_writes(void)
{
	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	for (int k = 0; k < KW_NR; k++)
		kernel_write_case((enum kernel_write)k);
	ok(zones_ok(), "zone invariants hold");
}

static volatile uint64_t *sig_target;
static pthread_t sig_thread;

static void sig_handler(int sig)
{
	(void)sig;
	atomic_store(&hook.entered, true);
	*sig_target = 0x51605160;
}

static void *sig_thread_fn(void *arg)
{
	(void)arg;
	hook.tid = (pid_t)syscall(SYS_gettid);
	/* Not pause(): a signal between the test and the pause would leave
	 * it waiting for ever. */
	while (!atomic_load(&hook.go))
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	return NULL;
}

static void sig_kick(void)
{
	pthread_kill(sig_thread, SIGUSR1);
}

/* A thread whose stack is heap memory (coroutines, pthread_attr_setstack
 * with malloc) asks for its own stack to be taken back. */
struct own_stack {
	char *lo;
	size_t len;
	int rc, err;
};

static _Atomic bool own_stack_done;

static void *own_stack_fn(void *arg)
{
	struct own_stack *s = arg;

	errno = 0;
	s->rc = ucma_unlend(s->lo, s->len);
	s->err = errno;
	atomic_store(&own_stack_done, true);
	return NULL;
}

static void case_own_stack(void)
{
	struct own_stack s = { NULL, MiB, 1, 0 };
	pthread_attr_t attr;
	pthread_t t;
	struct timespec until;
	char *b;
	int joined;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	b = block_new(3 * MiB, 77);
	if (!b || !on_frame(b + MiB)) {
		ok(0, "a 3 MiB block on CMA frames to run a thread on");
		return;
	}
	s.lo = b + MiB;
	pthread_attr_init(&attr);
	pthread_attr_setstack(&attr, s.lo, s.len);
	if (pthread_create(&t, &attr, own_stack_fn, &s) != 0) {
		ok(0, "pthread_create on a heap stack: %s", strerror(errno));
		return;
	}
	/* Joined once it is done: a join waiting while the thread's
	 * descriptor moves off the frame is never woken (RELIABILITY.md). */
	{
		uint64_t t0 = tu_now_ns();

		while (!atomic_load(&own_stack_done) && tu_now_ns() - t0 < 20000000000ull)
			sched_yield();
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	joined = pthread_timedjoin_np(t, NULL, &until);
	ok(joined == 0 && s.rc == 0 && !on_frame(s.lo + s.len - PAGE) && block_good(b, MiB, 77),
	   "a thread running on a lent stack takes its own stack's pageblock back (a helper "
	   "moves the pieces holding its stack), no hang, data intact (joined %d, rc %d, %s)",
	   joined, s.rc, strerror(s.err));
	if (joined != 0) {
		/* The thread is stuck holding the lending lock: leave at once,
		 * without the exit handlers that would wait for it. */
		fflush(NULL);
		_exit(1);
	}
	ok(ucma_unlend(b, 3 * MiB) == 0 && !on_frame(b + 2 * MiB) && block_good(b, MiB, 77),
	   "another thread takes the rest back, the data before the stack intact");
	ucma_free(b);
	ok(zones_ok(), "zone invariants hold");
}

static void case_signal(void)
{
	struct sigaction sa = { .sa_handler = sig_handler };
	char *blk;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	blk = block_new(2 * MiB, 9);
	sigaction(SIGUSR1, &sa, NULL);
	memset(&hook, 0, sizeof(hook));
	sig_target = (volatile uint64_t *)(void *)(blk + 8 * PAGE);
	hook.page = (char *)(uintptr_t)sig_target;
	hook.kick = sig_kick;
	if (pthread_create(&sig_thread, NULL, sig_thread_fn, NULL) != 0)
		bail_out("pthread_create");
	while (!hook.tid)
		sched_yield();
	ucma_os.mremap = hook_mremap;
	ucma_unlend(blk, 2 * MiB);
	ucma_os.mremap = real.mremap;
	atomic_store(&hook.go, 1);
	pthread_kill(sig_thread, SIGUSR1);	/* out of pause() if still there */
	pthread_join(sig_thread, NULL);
	ok(hook.blocked && *sig_target == 0x51605160 && !on_frame(blk) && block_good(blk, 8 * PAGE, 9),
	   "a signal handler writing a page being taken back waits, then its write is there");
	ucma_free(blk);
}

/* ------------------------------------------------------------------------ */
/* Fork, vfork, posix_spawn                                                  */
/* ------------------------------------------------------------------------ */

/* The child checks the parent's data, overwrites its copy, and reports. */
static int fork_child_check(char **b, int n)
{
	for (int i = 0; i < n; i++) {
		if (!block_good(b[i], 3 * MiB, 500 + (uint64_t)i) || on_frame(b[i]))
			return 1;
		memset(b[i], 0xee, 3 * MiB);
	}
	/* Its own heap works, and so do its own CMA areas. */
	{
		char *x = block_new(3 * MiB, 4242);
		void *buf = ucma_alloc(CMA_MB * MiB, 0, 0);
		int rc = x && block_good(x, 3 * MiB, 4242) && buf ? 0 : 2;

		ucma_release(buf);
		ucma_free(x);
		return rc;
	}
}

/* start() for a fork case: no compaction thread, so that a process of
 * one thread stays "single-threaded"; false (reported) when it fails. */
static bool start_single(void)
{
	setenv("UCMA_COMPACT", "0", 1);
	if (start())
		return true;
	ok(0, "ucma_init: %s", strerror(errno));
	return false;
}

static void *idle_thread(void *arg)
{
	return arg;
}

static void fork_case(bool threads)
{
	char *b[3];
	bool lent = true, parent_good = true;
	pid_t pid;
	int status = -1;
	uint64_t copied, evacuated;

	if (!start_single())
		return;
	if (threads) {
		pthread_t t;

		if (pthread_create(&t, NULL, idle_thread, NULL) != 0)
			bail_out("pthread_create");
		pthread_join(t, NULL);
	}
	for (int i = 0; i < 3; i++) {
		b[i] = block_new(3 * MiB, 500 + (uint64_t)i);
		lent &= b[i] && on_frame(b[i]);
	}
	copied = stat_of("lend_heap_fork_copied");
	evacuated = stat_of("lend_heap_fork_evacuated");
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(fork_child_check(b, 3));
	if (pid > 0)
		waitpid(pid, &status, 0);
	for (int i = 0; i < 3; i++)
		parent_good &= block_good(b[i], 3 * MiB, 500 + (uint64_t)i);
	ok(lent && pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "fork %s, 9 MiB of the heap on CMA frames: the child has the data, not on "
	   "frames, and its own heap and CMA area work (status 0x%x)",
	   threads ? "with threads" : "single-threaded", status);
	ok(parent_good, "the parent's data is untouched by the child's writes");
	if (threads)
		ok(stat_of("lend_heap_fork_evacuated") > evacuated &&
			   stat_of("lend_heap_pageblocks") == 0 && !on_frame(b[0]),
		   "with threads, the parent took its heap back before the fork (%llu pageblocks)",
		   (unsigned long long)(stat_of("lend_heap_fork_evacuated") - evacuated));
	else if (!__libc_single_threaded)
		skip(1, "this process had a thread before (ThreadSanitizer's?): the parent took "
			"its heap back instead");
	else
		ok(stat_of("lend_heap_fork_copied") > copied && on_frame(b[0]) &&
			   stat_of("lend_heap_pageblocks") > 0,
		   "single-threaded, the child copied (%llu pageblocks) and the parent keeps "
		   "lending", (unsigned long long)(stat_of("lend_heap_fork_copied") - copied));
	{
		void *buf = ucma_alloc(CMA_MB * MiB, 0, 0);

		parent_good = buf != NULL;
		for (int i = 0; i < 3; i++)
			parent_good &= block_good(b[i], 3 * MiB, 500 + (uint64_t)i);
		ok(parent_good, "after the fork the parent takes its frames back, data intact");
		ucma_release(buf);
	}
	blocks_free(b, 3);
	ok(zones_ok(), "zone invariants hold");
	unsetenv("UCMA_COMPACT");
}

static void case_fork_single(void)
{
	fork_case(false);
}

static void case_fork_threads(void)
{
	fork_case(true);
}

/*
 * A program that registered fork handlers before its first call into the
 * library: the library's own were registered when it was loaded, so its
 * child handler runs first and gives the child its own heap and CMA area
 * before the program's handler writes there, and its parent handler waits
 * for the child's copy before the program's writes.  (Registered at the
 * first use, the program's handlers ran first: the child wrote its pid
 * into the parent's memory and saw the parent's increment.)
 */
static struct {
	long *heap;	/* ucma_calloc(): a lent heap pageblock */
	long *buf;	/* ucma_alloc(): the CMA area */
} handlers_seen;

static void program_parent_handler(void)
{
	if (handlers_seen.heap) {
		handlers_seen.heap[1]++;
		handlers_seen.buf[1]++;
	}
}

static void program_child_handler(void)
{
	if (handlers_seen.heap) {
		handlers_seen.heap[0] = getpid();
		handlers_seen.buf[0] = getpid();
	}
}

static void case_fork_handlers_first(void)
{
	long *heap, *buf;
	bool lent;
	pid_t pid;
	int status = -1;

	if (pthread_atfork(NULL, program_parent_handler, program_child_handler) != 0)
		bail_out("pthread_atfork");
	if (!start_single())
		return;
	heap = ucma_calloc(1, 3 * MiB);
	buf = ucma_alloc(MiB, 0, UCMA_ALLOC_ZERO);
	if (!heap || !buf)
		bail_out("no memory for the blocks");
	lent = on_frame(heap);
	heap[0] = buf[0] = getpid();
	handlers_seen.heap = heap;
	handlers_seen.buf = buf;
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(heap[1] != 0 || buf[1] != 0 || heap[0] != getpid() || buf[0] != getpid());
	if (pid > 0)
		waitpid(pid, &status, 0);
	handlers_seen.heap = NULL;
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "fork handlers the program registered first: the child's see its own memory, "
	   "not the parent's writes after the fork (status 0x%x, heap %s)", status,
	   lent ? "lent" : "not lent");
	ok(heap[0] == getpid() && buf[0] == getpid() && heap[1] == 1 && buf[1] == 1,
	   "and they wrote nothing of the parent's: heap %ld/%ld, CMA buffer %ld/%ld",
	   heap[0], heap[1], buf[0], buf[1]);
	ucma_release(buf);
	ucma_free(heap);
	unsetenv("UCMA_COMPACT");
}

/*
 * Fork from a thread whose stack (pthread_attr_setstack) is on a lent
 * pageblock, while another thread writes the same pageblock: records of
 * 64 bytes, each written whole with the next number of one counter, in
 * order, pass after pass.  Whatever instant a snapshot shows, every record
 * holds a number of one pass of the writer: the numbers seen lie within
 * one pass (all above max - NB), but for the one record being written
 * then.  A child that copies the pageblock while the writer runs on (what
 * a fork did when the forking thread could not take its own stack back)
 * sees numbers from several passes.  And none of them may be later than
 * what the counter said when fork() returned in the parent.
 */
#define FO_NB 8192			/* records: the first 512 KiB of the pageblock */

static struct {
	uint64_t (*rec)[8];
	_Atomic uint64_t seq;		/* the last number handed out */
	_Atomic bool stop;
	struct fo_report {		/* MAP_SHARED: what the child saw */
		uint64_t min, max;
		int torn, done;
	} *report;
	uint64_t after;			/* the counter right after fork() returned */
	_Atomic bool finished;		/* the forking thread is done (see fo_join()) */
	pid_t pid;
	int status;
} fo;

static void *fo_writer(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&fo.stop, memory_order_relaxed)) {
		uint64_t n = atomic_fetch_add(&fo.seq, 1) + 1;
		volatile uint64_t *r = fo.rec[(n - 1) % FO_NB];

		for (int k = 0; k < 8; k++)
			r[k] = n;
	}
	return NULL;
}

static void fo_child(void)
{
	struct fo_report rep = { UINT64_MAX, 0, 0, 1 };

	for (int i = 0; i < FO_NB; i++) {
		uint64_t lo = fo.rec[i][0], hi = lo;

		for (int k = 1; k < 8; k++) {
			lo = fo.rec[i][k] < lo ? fo.rec[i][k] : lo;
			hi = fo.rec[i][k] > hi ? fo.rec[i][k] : hi;
		}
		if (lo != hi) {
			rep.torn++;
			continue;
		}
		rep.min = lo < rep.min ? lo : rep.min;
		rep.max = lo > rep.max ? lo : rep.max;
	}
	*fo.report = rep;
}

static void *fo_forker(void *arg)
{
	(void)arg;
	fo.pid = fork();
	if (fo.pid == 0) {
		fo_child();
		_exit(0);
	}
	fo.after = atomic_load(&fo.seq);
	if (fo.pid > 0)
		waitpid(fo.pid, &fo.status, 0);
	atomic_store(&fo.finished, true);
	return NULL;
}

static void case_fork_own_stack(void)
{
	enum { ROUNDS = 3 };
	int good = 0, ran = 0;
	uint64_t failed = 0;

#if defined(__SANITIZE_THREAD__)
	/* ThreadSanitizer ends this case's process ("starting new threads
	 * after multi-threaded fork is not supported"); with
	 * TSAN_OPTIONS=die_after_fork=0 it passes without a report. */
	if (!getenv("TSAN_OPTIONS") || !strstr(getenv("TSAN_OPTIONS"), "die_after_fork=0")) {
		skip(3, "ThreadSanitizer stops it (run with TSAN_OPTIONS=die_after_fork=0)");
		return;
	}
#endif
	/* No compaction thread for the child to start again. */
	setenv("UCMA_COMPACT", "0", 1);
	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	fo.report = tu_shared_results(PAGE);
	for (int r = 0; r < ROUNDS; r++) {
		/* whole pageblocks, fresh ones (3 MiB would be packed behind
		 * the last round's block, on pages the fork took back) */
		char *b = block_new(4 * MiB, 900 + (uint64_t)r);
		pthread_t w, t;
		pthread_attr_t attr;
		struct fo_report rep;

		if (!b || !on_frame(b) || !on_frame(b + 2 * MiB - PAGE)) {
			diag("round %d: the block is not on CMA frames", r);
			continue;
		}
		memset(fo.report, 0, sizeof(*fo.report));
		fo.rec = (uint64_t (*)[8])(void *)b;
		atomic_store(&fo.seq, 0);
		atomic_store(&fo.stop, false);
		fo.status = -1;
		if (pthread_create(&w, NULL, fo_writer, NULL) != 0)
			bail_out("pthread_create");
		while (atomic_load(&fo.seq) < 3 * FO_NB)
			sched_yield();
		pthread_attr_init(&attr);
		pthread_attr_setstack(&attr, b + MiB, MiB);
		atomic_store(&fo.finished, false);
		if (pthread_create(&t, &attr, fo_forker, NULL) != 0)
			bail_out("pthread_create on a heap stack");
		/* Not pthread_join() at once: a join waiting while the thread's
		 * descriptor moves off the frame is never woken (RELIABILITY.md). */
		while (!atomic_load(&fo.finished))
			sched_yield();
		pthread_join(t, NULL);
		atomic_store(&fo.stop, true);
		pthread_join(w, NULL);
		rep = *fo.report;
		ran++;
		if (fo.pid > 0 && WIFEXITED(fo.status) && WEXITSTATUS(fo.status) == 0 && rep.done &&
		    rep.torn <= 1 && rep.max >= rep.min && rep.max - rep.min < FO_NB &&
		    rep.max <= fo.after)
			good++;
		else
			diag("round %d: the child saw numbers %llu to %llu (one pass is %d), %d torn "
			     "records; the counter was %llu when fork returned (status 0x%x)",
			     r, (unsigned long long)rep.min, (unsigned long long)rep.max, FO_NB,
			     rep.torn, (unsigned long long)fo.after, fo.status);
		pthread_attr_destroy(&attr);
	}
	failed = stat_of("lend_heap_migrate_fail");
	ok(ran == ROUNDS && good == ROUNDS,
	   "fork from a thread whose stack is on a lent pageblock that another thread writes: "
	   "the child sees one instant of the writer, nothing written after fork returned "
	   "(%d of %d rounds; %llu take-backs failed)", good, ROUNDS, (unsigned long long)failed);
	ok(failed == 0 && stat_of("lend_heap_pageblocks") == 0,
	   "the forking thread's own pageblock was taken back before the fork, like the rest");
	munmap(fo.report, PAGE);
	ok(zones_ok(), "zone invariants hold");
	unsetenv("UCMA_COMPACT");
}

static void case_vfork_spawn(void)
{
	char *blk, *argv[] = { "true", NULL };
	pid_t pid;
	int status = -1, rc;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	blk = block_new(3 * MiB, 31);
	rc = posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ);
	if (rc == 0)
		waitpid(pid, &status, 0);
	ok(rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && on_frame(blk) &&
		   block_good(blk, 3 * MiB, 31),
	   "posix_spawn with lent memory: the child runs, the parent's data stays (rc %d)", rc);
	pid = vfork();
	if (pid == 0)
		_exit(tu_check(blk, PAGE, 31) && tu_check(blk + 2 * MiB, PAGE, 31 + 512) ? 0 : 1);
	status = -1;
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 && block_good(blk, 3 * MiB, 31),
	   "vfork: the child reads the lent memory it shares, the parent's data stays");
	ucma_free(blk);
}

/* ------------------------------------------------------------------------ */
/* The program's own calls on its blocks                                     */
/* ------------------------------------------------------------------------ */

static void case_program_calls(void)
{
	char *b[3], perms[5];
	bool zero = true;
	void *buf;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	for (int i = 0; i < 3; i++)
		b[i] = block_new(4 * MiB, 700 + (uint64_t)i);
	ok(ucma_unlend(b[0], 4 * MiB) == 0 && !on_frame(b[0]) && on_frame(b[1]) &&
		   block_good(b[0], 4 * MiB, 700),
	   "ucma_unlend takes exactly the block's pageblocks back, data intact");
	ok(madvise(b[0], 4 * MiB, MADV_DONTNEED) == 0, "madvise(MADV_DONTNEED) on the block");
	for (size_t i = 0; i < 4 * MiB; i += 512)
		zero &= b[0][i] == 0;
	ok(zero, "it reads back zeros, as private memory does");
	ucma_unlend(b[1], 4 * MiB);
	ok(mprotect(b[1], 2 * MiB, PROT_READ) == 0, "mprotect(PROT_READ) on half of a block");
	/* A page of the third block, still lent, unmapped behind ucma's back. */
	ok(munmap(b[2] + 3 * MiB, PAGE) == 0, "munmap of a page of a lent block");
	buf = ucma_alloc(CMA_MB * MiB, 0, 0);
	perms_of(b[1], perms);
	ok(buf && strcmp(perms, "r--p") == 0 && block_good(b[1], 4 * MiB, 701) &&
		   block_good(b[2], 3 * MiB, 702),
	   "later take-backs leave the protection alone (%s) and manage around the hole", perms);
	ucma_release(buf);
	mprotect(b[1], 2 * MiB, PROT_READ | PROT_WRITE);
	/* The page is mapped again by the take-back: the block is whole. */
	ok(!on_frame(b[2]), "the third block is on private memory");
	blocks_free(b, 3);
}

/*
 * ucma_unlend_all() while a pageblock is between its reservation and its
 * mapping: the frame's UNMAP event is delivered there, and the callback
 * makes the call at exactly that moment.  Nothing may be lent once it has
 * returned (it used to pass over the reserved pageblock, whose frame was
 * mapped just after).
 */
static _Atomic int unlend_calls;
static int unlend_rc = -2;

static void unlend_on_unmap(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	(void)addr;
	(void)len;
	(void)arg;
	if (ev == UCMA_MEM_EVENT_UNMAP && atomic_fetch_add(&unlend_calls, 1) == 0)
		unlend_rc = ucma_unlend_all();
}

static void case_unlend_all_race(void)
{
	uint64_t lent, fallback;
	char *b;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	if (ucma_mem_event_register("unlend", unlend_on_unmap, NULL) != 0) {
		ok(0, "ucma_mem_event_register: %s", strerror(errno));
		return;
	}
	lent = stat_of("lend_heap_lent");
	fallback = stat_of("lend_heap_fallback");
	b = block_new(3 * MiB, 900);
	ok(unlend_calls > 0 && unlend_rc == 0 && b && !on_frame(b) && !on_frame(b + 3 * MiB - 1) &&
		   stat_of("lend_heap_pageblocks") == 0 && stat_of("lend_heap_lent") == lent &&
		   stat_of("lend_heap_fallback") == fallback && block_good(b, 3 * MiB, 900),
	   "ucma_unlend_all() between a frame's reservation and its mapping: nothing lent "
	   "afterwards (%llu pageblocks), the block on private memory, no fallback counted",
	   (unsigned long long)stat_of("lend_heap_pageblocks"));
	ucma_mem_event_unregister("unlend");
	ucma_free(b);
	ucma_trim();
	b = block_new(3 * MiB, 901);
	ok(b && !on_frame(b) && stat_of("lend_heap_pageblocks") == 0,
	   "and later allocations are not lent either");
	ucma_free(b);
	ok(zones_ok(), "zone invariants hold");
}

/*
 * A callback may take memory back (ucma_mem_event_register(3): callbacks
 * run with no lock of the library held): it holds the delivery lock,
 * which the count of locks held (lock.h) must not count there, or every
 * take-back in a callback would be refused as if from a signal handler.
 */
static char *cb_block;
static int cb_rc = -2, cb_errno;

static void unlend_block_on_unmap(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	(void)addr;
	(void)len;
	(void)arg;
	if (ev == UCMA_MEM_EVENT_UNMAP && cb_rc == -2 && cb_block) {
		cb_rc = ucma_unlend(cb_block, 3 * MiB);
		cb_errno = errno;
	}
}

static void case_callback_takes_back(void)
{
	char *b;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	cb_block = block_new(3 * MiB, 910);
	if (!cb_block || !on_frame(cb_block) ||
	    ucma_mem_event_register("take back", unlend_block_on_unmap, NULL) != 0) {
		ok(0, "set-up: a lent block and a callback (%s)", strerror(errno));
		return;
	}
	b = block_new(3 * MiB, 911);	/* lends a frame: its UNMAP is delivered */
	ok(cb_rc == 0 && !on_frame(cb_block) && block_good(cb_block, 3 * MiB, 910),
	   "ucma_unlend() inside a memory-event callback takes the block back (rc %d, %s)", cb_rc,
	   cb_rc ? strerror(cb_errno) : "-");
	ok(ucma_locks_held == 0, "no lock of the library counted after the delivery");
	ucma_mem_event_unregister("take back");
	ucma_free(b);
	ucma_free(cb_block);
}

/*
 * A callback that trims and allocates a large block.  The allocation
 * reserved a frame for the heap (posting UNMAP), which the commit then
 * refused inside a callback (posting MAP): two events for the delivery
 * under way each time, which therefore never ended, inside
 * ucma_mem_event_register().  A callback's allocation now lends nothing.
 * And a delivery ends anyway once it passed on a bound of events beyond
 * those queued when it began (here a callback that posts one each time
 * it runs), leaving the rest to later calls.
 */
static unsigned long cb_calls;
static bool cb_lent;

static void trim_and_allocate(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	char *p;

	(void)ev;
	(void)addr;
	(void)len;
	(void)arg;
	cb_calls++;
	ucma_trim();
	p = ucma_malloc(3 * MiB);
	if (p) {
		memset(p, 1, 4096);
		cb_lent |= on_frame(p) || on_frame(p + 3 * MiB - 1);
	}
	ucma_free(p);
}

static void post_one_more(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	(void)arg;
	cb_calls++;
	ucma_mem_event_post(ev, addr, len);
}

static void case_callback_posts(void)
{
	char *b;
	int rc;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	alarm(120);	/* a hang fails the case */
	rc = ucma_mem_event_register("allocates", trim_and_allocate, NULL);
	ok(rc == 0 && cb_calls > 0 && cb_calls < 100 && !cb_lent,
	   "a callback that trims and allocates: registered after %lu calls, its blocks on "
	   "no frame (%s)", cb_calls, cb_lent ? "one was" : "none was");
	b = block_new(3 * MiB, 912);
	ok(b && block_good(b, 3 * MiB, 912), "calls that deliver still work");
	ucma_free(b);
	ok(ucma_mem_event_unregister("allocates") == 0, "unregistered");

	cb_calls = 0;
	rc = ucma_mem_event_register("posts", post_one_more, NULL);
	ok(rc == 0 && cb_calls > 4096 && cb_calls < 8192,
	   "a callback that posts an event each time: registration returns after %lu calls",
	   cb_calls);
	ok(ucma_mem_event_unregister("posts") == 0, "and it is unregistered");
	alarm(0);
}

/*
 * A callback that waits for readers (ucma_alloc() drains the objects
 * freed lately: a grace period) while a reader, inside ucma_read_lock(),
 * allocates heap memory whose lending must deliver its UNMAP first: the
 * reader waited for the delivery lock, the callback for the reader, for
 * ever (at once, in the first second).  A reader no longer waits for the
 * delivery lock; its pageblock is then not lent.
 */
static atomic_long rd_rounds, rd_callbacks;
static atomic_bool rd_stop;

static void alloc_in_callback(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	void *p;

	(void)ev;
	(void)addr;
	(void)len;
	(void)arg;
	rd_callbacks++;
	p = ucma_alloc(64 << 10, 0, 0);
	if (p)
		ucma_release(p);
}

static void *heap_reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&rd_stop)) {
		char *p[4];

		ucma_read_lock();
		for (int i = 0; i < 4; i++) {
			p[i] = ucma_malloc(3 * MiB);
			if (p[i])
				memset(p[i], 1, 4096);
		}
		for (int i = 0; i < 4; i++)
			ucma_free(p[i]);
		ucma_trim();
		ucma_read_unlock();
		rd_rounds++;
	}
	return NULL;
}

static void case_reader_vs_callback(void)
{
	uint64_t end;
	pthread_t t;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	alarm(120);	/* a hang fails the case */
	if (ucma_mem_event_register("allocates", alloc_in_callback, NULL) != 0 ||
	    pthread_create(&t, NULL, heap_reader, NULL) != 0) {
		ok(0, "set-up: %s", strerror(errno));
		return;
	}
	end = tu_now_ns() + 1500 * 1000000ull;
	while (tu_now_ns() < end || !atomic_load(&rd_rounds) || !atomic_load(&rd_callbacks)) {
		ucma_handle_t h = ucma_halloc(100000, 0);
		char *p = ucma_malloc(3 * MiB);

		ucma_hfree(h);
		if (p)
			memset(p, 2, 4096);
		ucma_free(p);
		ucma_trim();
	}
	atomic_store(&rd_stop, true);
	pthread_join(t, NULL);
	ok(atomic_load(&rd_rounds) > 0 && atomic_load(&rd_callbacks) > 0,
	   "a reader allocating while a callback waits for readers: %ld rounds, %ld callbacks",
	   atomic_load(&rd_rounds), atomic_load(&rd_callbacks));
	ok(ucma_mem_event_unregister("allocates") == 0, "the callback is unregistered");
	ok(zones_ok(), "zone invariants hold");
	alarm(0);
}

/* ------------------------------------------------------------------------ */
/* Injected faults                                                           */
/* ------------------------------------------------------------------------ */

static int fake_userfaultfd(int flags)
{
	(void)flags;
	errno = EPERM;
	return -1;
}

static unsigned long fail_req;
static int fail_after;		/* calls of @fail_req that succeed first */
static int fail_errno;		/* what they fail with (0: EBUSY) */

static int fake_uffd_ioctl(int fd, unsigned long req, void *arg)
{
	if (req == fail_req && fail_after-- <= 0) {
		errno = fail_errno ? fail_errno : EBUSY;
		return -1;
	}
	return real.uffd_ioctl(fd, req, arg);
}

/*
 * The kernel refuses UFFDIO_WAKE after a piece has moved: its writers
 * sleep on the registration until woken.  Each write-protection is held a
 * moment, so the writer is caught in it.
 */
static int slow_protect_no_wake_ioctl(int fd, unsigned long req, void *arg)
{
	int rc;

	if (req == UFFDIO_WAKE) {
		errno = EINVAL;
		return -1;
	}
	rc = real.uffd_ioctl(fd, req, arg);
	if (req == UFFDIO_WRITEPROTECT && rc == 0 &&
	    (((struct uffdio_writeprotect *)arg)->mode & UFFDIO_WRITEPROTECT_MODE_WP)) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	return rc;
}

static void case_wake_refused(void)
{
	struct writer w = { .len = 2 * MiB, .seed = 77 };
	uint64_t before;
	int rc, tries = 0;
	bool moving = true;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	w.buf = block_new(w.len, w.seed);
	w.last = calloc(w.len / PAGE, sizeof(uint64_t));
	if (!w.buf || !w.last || !on_frame(w.buf) ||
	    pthread_create(&w.t, NULL, writer_fn, &w) != 0) {
		ok(0, "a lent block and its writer");
		return;
	}
	while (atomic_load(&w.passes) == 0)
		sched_yield();
	ucma_os.uffd_ioctl = slow_protect_no_wake_ioctl;
	/* Each refusal closes the descriptor and the take-back resumes with a
	 * new one, a piece further on. */
	do {
		rc = ucma_unlend(w.buf, w.len);
	} while (rc != 0 && errno == EBUSY && ++tries < 64);
	ucma_os.uffd_ioctl = real.uffd_ioctl;
	before = atomic_load(&w.passes);
	for (int i = 0; i < 2000 && atomic_load(&w.passes) < before + 3; i++) {
		struct timespec ts = { 0, 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	moving = atomic_load(&w.passes) >= before + 3;
	ok(rc == 0 && moving && !on_frame(w.buf),
	   "UFFDIO_WAKE refused after each piece: the take-back completes (%d tries) and the "
	   "writer runs on (%s)", tries + 1, moving ? "it does" : "asleep for good");
	if (!moving)
		return;		/* the child ends with the writer asleep */
	atomic_store(&w.stop, true);
	pthread_join(w.t, NULL);
	ok(writer_good(&w), "every write of the writer is there");
	ucma_free(w.buf);
	free(w.last);
	ok(zones_ok(), "zone invariants hold");
}

static int mremap_fail_at;	/* fail the n-th call (1-based), 0: never */

static void *fake_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	if (mremap_fail_at && --mremap_fail_at == 0) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return real.mremap(old, old_len, new_len, flags, new_addr);
}

static bool fail_shared_fixed;
static bool fail_all_fixed;		/* as at vm.max_map_count: no mapping may split */

static void *fake_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if ((fail_all_fixed || (fail_shared_fixed && fd >= 0 && (flags & MAP_SHARED))) &&
	    (flags & MAP_FIXED) && ucma_addr_in_arena(a, addr) &&
	    ucma_pfn_zone(a, ucma_addr_to_pfn(a, addr))->id == UCMA_ZONE_NORMAL) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return real.mmap(addr, len, prot, flags, fd, off);
}

/* start() with the automatic backing of the areas and UCMA_VERBOSE=1;
 * what the library said goes to @msg. */
static void start_auto_verbose(char *msg, size_t len)
{
	FILE *cap = tmpfile();
	int saved = dup(2);
	size_t n = 0;

	setenv("UCMA_VERBOSE", "1", 1);
	fflush(stderr);
	if (cap)
		dup2(fileno(cap), 2);
	cma_backing = UCMA_BACKING_AUTO;
	start();
	cma_backing = UCMA_BACKING_NONE;
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	unsetenv("UCMA_VERBOSE");
	if (cap) {
		rewind(cap);
		n = fread(msg, 1, len - 1, cap);
		fclose(cap);
	}
	msg[n] = '\0';
}

static void case_no_uffd(void)
{
	char msg[4096];
	char *blk;

	ucma_os.userfaultfd = fake_userfaultfd;
	start_auto_verbose(msg, sizeof(msg));
	ok(a && strstr(msg, "lending the CMA areas to the heap is off: no userfaultfd") &&
		   strstr(strstr(msg, "is off") + 1, "is off") == NULL,
	   "no userfaultfd: UCMA_VERBOSE says once that lending to the heap is off, and why");
	if (!a)
		return;
	blk = block_new(3 * MiB, 3);
	ok(blk && !on_frame(blk) && stat_of("lend_heap_pageblocks") == 0 &&
		   stat_of("lend_heap_lent") == 0,
	   "nothing is lent");
	ok(ucma_os_shmem_thp_available() || ucma_area_frames(&a->areas[0])->fd < 0 ||
		   a->zones[UCMA_ZONE_CMA].backing != UCMA_BACKING_NONE,
	   "the automatic backing of the areas is what it was without lending (%s)",
	   ucma_backing_name("cma"));
	{
		void *buf = ucma_alloc(CMA_MB * MiB, 0, 0);

		ok(buf != NULL, "ucma_alloc works as before");
		ucma_release(buf);
	}
	ucma_free(blk);
	ucma_os_reset();
}

/*
 * The automatic backing where the CMA area gets no frames on a file (no
 * free 2 MiB hugetlb pages, shmem without huge pages): lending does not
 * turn the area into a shmem file of 4 KiB pages; it stays on private
 * transparent huge pages, the heap borrows nothing and says why, and
 * NORMAL keeps what the area leaves (no heap window).
 */
static long no_hugetlb_pages(size_t page_size)
{
	(void)page_size;
	return 0;
}

static void case_auto_no_frames(void)
{
	char msg[4096];

	if (ucma_os_shmem_thp_available() || !ucma_os_thp_available()) {
		skip(1, "shmem gets huge pages here (the area would have frames), or there are "
			"no transparent huge pages");
		return;
	}
	ucma_os.hugetlb_free_pages = no_hugetlb_pages;	/* whoever holds the pool now */
	start_auto_verbose(msg, sizeof(msg));
	ok(a && a->zones[UCMA_ZONE_CMA].backing == UCMA_BACKING_THP &&
		   ucma_area_frames(&a->areas[0])->fd < 0,
	   "automatic backing, no frames to be had: the area stays on private transparent "
	   "huge pages (%s)", a ? ucma_backing_str(a->zones[UCMA_ZONE_CMA].backing) : "no arena");
	ok(strstr(msg, "lending the CMA areas to the heap is off: no CMA area has 2 MiB frames") !=
		   NULL,
	   "UCMA_VERBOSE says lending to the heap is off, and why");
	if (!a)
		return;
	ok(a->zones[UCMA_ZONE_NORMAL].managed_pages == ((64 - CMA_MB) * MiB) / PAGE,
	   "NORMAL keeps what the area leaves: no heap window (%llu pages)",
	   (unsigned long long)a->zones[UCMA_ZONE_NORMAL].managed_pages);
	ucma_os_reset();
}

/* ------------------------------------------------------------------------ */
/* One userfaultfd for the process's life                                    */
/* ------------------------------------------------------------------------ */

/* The process's userfaultfds (/proc/self/fd): how many, the last one. */
static int uffds_open(int *last)
{
	int n = 0;

	*last = -1;
	for (int fd = 0; fd < 4096; fd++) {
		char path[64], link[128];
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (strstr(link, "userfaultfd")) {
			n++;
			*last = fd;
		}
	}
	return n;
}

/* Take every free descriptor number up to the soft limit; how many. */
static int fds_exhaust(int *held, int max)
{
	int n = 0, fd;

	while (n < max && (fd = dup(0)) >= 0)
		held[n++] = fd;
	return n;
}

static void case_uffd_kept(void)
{
	static int held[256];
	struct rlimit saved, low;
	int uffd, n, nheld, status = -1;
	char *b[2];
	void *buf;
	pid_t pid;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	n = uffds_open(&uffd);
	ok(n == 1 && ucma_owns_fd(uffd) == 1,
	   "with lending on, the process holds one userfaultfd (%d open, fd %d), and "
	   "ucma_owns_fd() says it is the library's", n, uffd);
	b[0] = block_new(3 * MiB, 81);
	b[1] = block_new(3 * MiB, 82);
	ok(b[0] && b[1] && on_frame(b[0]) && on_frame(b[1]), "two blocks on CMA frames");

	/* The right to open one is gone (a seccomp filter, a privilege drop). */
	ucma_os.userfaultfd = fake_userfaultfd;
	errno = 0;
	ok(ucma_unlend(b[0], 3 * MiB) == 0 && !on_frame(b[0]) && block_good(b[0], 3 * MiB, 81),
	   "userfaultfd() refused after lending started: a take-back still works, data intact "
	   "(%s)", strerror(errno));
	ucma_os.userfaultfd = real.userfaultfd;

	/* No descriptor number left at all. */
	getrlimit(RLIMIT_NOFILE, &saved);
	low = saved;
	low.rlim_cur = 64;
	setrlimit(RLIMIT_NOFILE, &low);
	nheld = fds_exhaust(held, 256);
	errno = 0;
	buf = ucma_alloc(CMA_MB * MiB, 0, 0);
	ok(dup(0) < 0 && errno == EMFILE && buf && !on_frame(b[1]) &&
		   block_good(b[1], 3 * MiB, 82) && block_good(b[0], 3 * MiB, 81),
	   "RLIMIT_NOFILE exhausted: ucma_alloc of the whole area takes the frames back, data "
	   "intact");
	while (nheld)
		close(held[--nheld]);
	setrlimit(RLIMIT_NOFILE, &saved);
	ucma_release(buf);

	/* The child's is its own: the inherited one acts on the parent. */
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int cfd, cn = uffds_open(&cfd);
		long same = syscall(SYS_kcmp, getppid(), getpid(), 0 /* KCMP_FILE */, uffd, cfd);
		char *x = block_new(3 * MiB, 83);
		bool taken;

		ucma_os.userfaultfd = fake_userfaultfd;
		taken = x && on_frame(x) && ucma_unlend(x, 3 * MiB) == 0 && !on_frame(x) &&
			block_good(x, 3 * MiB, 83);
		_exit(cn != 1 || ucma_owns_fd(cfd) != 1 ? 1 : same == 0 ? 2 : !taken ? 3 : 0);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "the child of a fork holds a userfaultfd of its own, not the parent's, and takes "
	   "back with it (status 0x%x: 1 none, 2 the parent's, 3 take-back failed)", status);
	ucma_free(b[0]);
	ucma_free(b[1]);
	ok(uffds_open(&n) == 1 && zones_ok(), "still one userfaultfd; zone invariants hold");
}

/*
 * A fork while a take-back that failed half way left a pageblock partly
 * moved: the child gets all of it, and once the take-back is finished, so
 * does the child of a later fork (the moved pieces once kept the
 * MADV_DONTFORK of the frame part, and that child faulted on them).
 */
static void case_fork_interrupted_takeback(void)
{
	char *blk;
	pid_t pid;
	int first = -1, second = -1;
	bool lent, resumed;

	if (!start_single())
		return;
	blk = block_new(4 * MiB, 64);
	lent = blk && on_frame(blk);
	mremap_fail_at = 4;
	ucma_os.mremap = fake_mremap;
	resumed = ucma_unlend(blk, 4 * MiB) == -1;
	mremap_fail_at = 0;
	ucma_os.mremap = real.mremap;
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(block_good(blk, 4 * MiB, 64) ? 0 : 1);
	if (pid > 0)
		waitpid(pid, &first, 0);
	resumed &= ucma_unlend(blk, 4 * MiB) == 0 && !on_frame(blk);
	pid = fork();
	if (pid == 0)
		_exit(block_good(blk, 4 * MiB, 64) ? 0 : 1);
	if (pid > 0)
		waitpid(pid, &second, 0);
	ok(lent && resumed && WIFEXITED(first) && WEXITSTATUS(first) == 0 && WIFEXITED(second) &&
		   WEXITSTATUS(second) == 0 && block_good(blk, 4 * MiB, 64),
	   "fork during a take-back stopped half way, then after it is finished: both children "
	   "have the whole block (status 0x%x, 0x%x%s)", first, second,
	   __libc_single_threaded ? "" : "; with threads the fork took it back");
	ucma_free(blk);
	unsetenv("UCMA_COMPACT");
}

/*
 * A single-threaded fork with its descriptor table full: no pipe for the
 * parent to wait on while the child copies the lent heap, so the heap is
 * taken back first; the child does not see what the parent writes after
 * fork() returns (it did: the parent ran on while the child copied).
 */
static void case_fork_no_descriptor(void)
{
	_Atomic int *flag;
	struct rlimit old, low;
	int fds[256], nfd = 0, status = -1;
	uint64_t evacuated;
	char *blk;
	pid_t pid;
	bool lent;

	if (!start_single())
		return;
	flag = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (flag == MAP_FAILED || getrlimit(RLIMIT_NOFILE, &old) != 0)
		bail_out("mmap or getrlimit: %s", strerror(errno));
	blk = block_new(4 * MiB, 65);
	lent = blk && on_frame(blk);
	evacuated = stat_of("lend_heap_fork_evacuated");
	low = old;
	low.rlim_cur = 64;
	if (setrlimit(RLIMIT_NOFILE, &low) != 0)
		bail_out("setrlimit: %s", strerror(errno));
	while (nfd < 256 && (fds[nfd] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		nfd++;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		for (int i = 0; i < 5000 && !atomic_load(flag); i++)
			usleep(1000);
		_exit(block_good(blk, 4 * MiB, 65) ? 0 : 1);
	}
	memset(blk, 0x5a, 4 * MiB);
	atomic_store(flag, 1);
	if (pid > 0)
		waitpid(pid, &status, 0);
	while (nfd > 0)
		close(fds[--nfd]);
	setrlimit(RLIMIT_NOFILE, &old);
	ok(lent && pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
		   stat_of("lend_heap_fork_evacuated") > evacuated,
	   "fork with no descriptor to spare: the heap is taken back first, the child has it "
	   "as it was at the fork (status 0x%x, %llu pageblocks taken back)", status,
	   (unsigned long long)(stat_of("lend_heap_fork_evacuated") - evacuated));
	munmap((void *)flag, PAGE);
	ucma_free(blk);
	unsetenv("UCMA_COMPACT");
}

#if !defined(UCMA_ASAN) && !defined(UCMA_TSAN)
/* The process's address space in bytes (VmSize), or 0. */
static size_t vm_size(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (size_t)kb * 1024;
}
#endif

/*
 * A single-threaded fork with lent heap memory near RLIMIT_AS, where a
 * plain fork still works (it needs no new address space): the child
 * replaces the shared pageblock by private memory in place when it has no
 * room for a staging copy, instead of dying in ucma_fatal().
 */
static void case_fork_near_rlimit_as(void)
{
#if defined(UCMA_ASAN) || defined(UCMA_TSAN)
	skip(1, "a sanitizer's runtime needs address space of its own in the child");
#else
	struct rlimit old, low;
	int status = -1;
	char *blk;
	pid_t pid;
	bool lent;

	if (!start_single())
		return;
	blk = block_new(4 * MiB, 66);
	lent = blk && on_frame(blk);
	if (getrlimit(RLIMIT_AS, &old) != 0)
		bail_out("getrlimit: %s", strerror(errno));
	low = old;
	low.rlim_cur = vm_size() + MiB;
	fflush(NULL);
	if (setrlimit(RLIMIT_AS, &low) != 0)
		bail_out("setrlimit: %s", strerror(errno));
	pid = fork();
	if (pid == 0)
		_exit(block_good(blk, 4 * MiB, 66) ? 0 : 1);
	setrlimit(RLIMIT_AS, &old);
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(lent && pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "fork 1 MiB short of RLIMIT_AS with 4 MiB of the heap lent: the child has it "
	   "(status 0x%x)", status);
	ucma_free(blk);
	unsetenv("UCMA_COMPACT");
#endif
}

/* A 3 MiB block made while fake_mmap() refuses what *@refuse selects: on
 * private memory with its data, counted as a fallback, nothing lent. */
static bool block_falls_back(bool *refuse, uint64_t seed)
{
	uint64_t fails = stat_of("lend_heap_fallback");
	char *blk;
	bool good;

	*refuse = true;
	ucma_os.mmap = fake_mmap;
	blk = block_new(3 * MiB, seed);
	ucma_os.mmap = real.mmap;
	*refuse = false;
	good = blk && !on_frame(blk) && block_good(blk, 3 * MiB, seed) &&
	       stat_of("lend_heap_fallback") > fails && stat_of("lend_heap_pageblocks") == 0;
	ucma_free(blk);
	return good;
}

/* MADV_POPULATE_WRITE refused for want of memory; the rest as it is. */
static int populate_nomem(void *addr, size_t len, int advice)
{
	if (advice == MADV_POPULATE_WRITE) {
		errno = ENOMEM;
		return -1;
	}
	return real.madvise(addr, len, advice);
}

static void case_faults(void)
{
	char *blk;
	uint64_t fails;
	int rc, err;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	blk = block_new(4 * MiB, 61);
	fails = stat_of("lend_heap_migrate_fail");
	fail_req = UFFDIO_REGISTER;
	fail_after = 0;
	ucma_os.uffd_ioctl = fake_uffd_ioctl;
	errno = 0;
	ok(ucma_unlend(blk, 4 * MiB) == -1 && errno == EBUSY && on_frame(blk) &&
		   block_good(blk, 4 * MiB, 61) && stat_of("lend_heap_migrate_fail") == fails + 1,
	   "registration refused: ucma_unlend fails (EBUSY), the block stays on its frame, "
	   "data intact, counted");
	/* The kernel's own errors mean other things in ucma_unlend(3): EINVAL
	 * is a range that wraps, EAGAIN a call inside the allocator. */
	{
		fail_errno = EINVAL;
		rc = ucma_unlend(blk, 4 * MiB);
		err = errno;
		ok(rc == -1 && err == EBUSY && block_good(blk, 4 * MiB, 61),
		   "registration refused with EINVAL: ucma_unlend says EBUSY (%s)",
		   strerror(err));
		fail_req = UFFDIO_WRITEPROTECT;
		fail_errno = EAGAIN;
		fail_after = 0;
		rc = ucma_unlend(blk, 4 * MiB);
		err = errno;
		ok(rc == -1 && err == EBUSY && block_good(blk, 4 * MiB, 61),
		   "write-protection refused with EAGAIN: ucma_unlend says EBUSY (%s)",
		   strerror(err));
	}
	fail_errno = 0;
	fail_after = 2;
	ok(ucma_unlend(blk, 4 * MiB) == -1 && block_good(blk, 4 * MiB, 61),
	   "write-protection refused at the third piece: fails, data intact");
	ucma_os.uffd_ioctl = real.uffd_ioctl;
	ok(ucma_unlend(blk, 4 * MiB) == 0 && !on_frame(blk) && block_good(blk, 4 * MiB, 61),
	   "then it works: resumed where it stopped, data intact");
	ucma_free(blk);
	ucma_trim();

	blk = block_new(4 * MiB, 62);
	mremap_fail_at = 4;
	ucma_os.mremap = fake_mremap;
	ok(ucma_unlend(blk, 4 * MiB) == -1 && block_good(blk, 4 * MiB, 62),
	   "mremap fails half way through a pageblock: fails, data intact");
	memset(blk + 3 * 256 * 1024, 0x77, 2 * 256 * 1024);	/* across the half */
	mremap_fail_at = 0;
	ucma_os.mremap = real.mremap;
	{
		void *buf = ucma_alloc(CMA_MB * MiB, 0, 0);
		bool good = true;

		for (size_t i = 0; i < 2 * 256 * 1024; i++)
			good &= (unsigned char)blk[3 * 256 * 1024 + i] == 0x77;
		ok(buf && good && block_good(blk, 3 * 256 * 1024, 62) &&
			   block_good(blk + 5 * 256 * 1024, 4 * MiB - 5 * 256 * 1024, 62 + 5 * 64) &&
			   !on_frame(blk),
		   "ucma_alloc finishes the take-back: writes on both sides of the break kept");
		ucma_release(buf);
	}
	ucma_free(blk);
	ucma_trim();

	/* No memory for the copy: refused before anything moves (the copy's
	 * faults waited for good in a memory cgroup whose OOM killer is off). */
	blk = block_new(4 * MiB, 65);
	fails = stat_of("lend_heap_migrate_fail");
	ucma_os.madvise = populate_nomem;
	errno = 0;
	rc = ucma_unlend(blk, 4 * MiB);
	err = errno;
	ok(rc == -1 && err == ENOMEM && on_frame(blk) && block_good(blk, 4 * MiB, 65) &&
		   stat_of("lend_heap_migrate_fail") > fails,
	   "no memory to populate the copy: ucma_unlend fails with ENOMEM, the block stays "
	   "on its frame, data intact (%s)", strerror(err));
	ucma_os.madvise = real.madvise;
	ok(ucma_unlend(blk, 4 * MiB) == 0 && !on_frame(blk) && block_good(blk, 4 * MiB, 65),
	   "then it works, data intact");
	ucma_free(blk);
	ucma_trim();

	ok(block_falls_back(&fail_shared_fixed, 63),
	   "the frame cannot be mapped at the heap: private memory, counted as a fallback");
	ucma_trim();
	/* At the map count limit every mapping that splits one is refused,
	 * the private memory's too: the pageblock keeps the memory it has
	 * (it aborted in malloc(), mapping private memory again). */
	ok(block_falls_back(&fail_all_fixed, 64),
	   "no mapping possible at the heap (vm.max_map_count): the pageblocks keep their "
	   "private memory, counted as a fallback");
	ok(zones_ok(), "zone invariants hold");
}

/*
 * Where a take-back copies from: the area's file (pread), or the frame's
 * mapping when the descriptor is not the area's file any more or a read
 * fails.  A take-back that read the other file would bring its bytes.
 */
static int pread_fails;

static ssize_t fake_pread(int fd, void *buf, size_t len, off_t off)
{
	(void)fd, (void)buf, (void)len, (void)off;
	pread_fails++;
	errno = EIO;
	return -1;
}

static void case_copy_source(void)
{
	struct ucma_frames *f;
	char *blk, *other_map;
	int saved, other;
	bool good;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	f = ucma_area_frames(&a->areas[0]);
	/* Another file of the same size, full of something else, under the
	 * area's descriptor number. */
	other = memfd_create("not-the-area", MFD_CLOEXEC);
	saved = dup(f->fd);
	other_map = other >= 0 && ftruncate(other, (off_t)(CMA_MB * MiB)) == 0 ?
			    mmap(NULL, CMA_MB * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, other, 0) :
			    MAP_FAILED;
	if (saved < 0 || other_map == MAP_FAILED) {
		ok(0, "a second file: %s", strerror(errno));
		return;
	}
	memset(other_map, 0xee, CMA_MB * MiB);
	blk = block_new(4 * MiB, 71);
	dup2(other, f->fd);
	good = blk && on_frame(blk) && ucma_unlend(blk, 4 * MiB) == 0 && !on_frame(blk) &&
	       block_good(blk, 4 * MiB, 71);
	dup2(saved, f->fd);
	ok(good, "another file under the area's descriptor: the take-back reads the frame's "
		 "mapping, data intact");
	ucma_free(blk);
	ucma_trim();

	blk = block_new(4 * MiB, 72);
	pread_fails = 0;
	ucma_os.pread = fake_pread;
	good = blk && on_frame(blk) && ucma_unlend(blk, 4 * MiB) == 0 && !on_frame(blk) &&
	       block_good(blk, 4 * MiB, 72);
	ucma_os.pread = real.pread;
	ok(good && pread_fails > 0, "reading the file fails (%d reads): the take-back copies "
				    "from the frame's mapping, data intact", pread_fails);
	ucma_free(blk);
	munmap(other_map, CMA_MB * MiB);
	close(other);
	close(saved);
	ok(zones_ok(), "zone invariants hold");
}

/* The heap on transparent huge pages: a take-back moves each pageblock
 * in one step (one window per pageblock), writers lose nothing. */
static void case_writers_thp(void)
{
	uint64_t windows, migrated;
	bool good;
	char *b[2];

	normal_backing = UCMA_BACKING_THP;
	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	if (a->zones[UCMA_ZONE_NORMAL].backing != UCMA_BACKING_THP) {
		skip(1, "no transparent huge pages for the NORMAL zone here");
		return;
	}
	b[0] = block_new(3 * MiB, 81);
	b[1] = block_new(3 * MiB, 82);
	windows = stat_of("lend_heap_stall_count");
	migrated = stat_of("lend_heap_migrated");
	good = b[0] && b[1] && on_frame(b[0]) && on_frame(b[1]) &&
	       ucma_unlend(b[0], 3 * MiB) == 0 && ucma_unlend(b[1], 3 * MiB) == 0 &&
	       !on_frame(b[0]) && !on_frame(b[1]) && block_good(b[0], 3 * MiB, 81) &&
	       block_good(b[1], 3 * MiB, 82);
	windows = stat_of("lend_heap_stall_count") - windows;
	migrated = stat_of("lend_heap_migrated") - migrated;
	ok(good && migrated > 0 && windows == migrated,
	   "heap on huge pages: each pageblock moves in one step (%llu windows, %llu "
	   "migrated), data intact", (unsigned long long)windows, (unsigned long long)migrated);
	blocks_free(b, 2);
	case_writers();
}

/* ------------------------------------------------------------------------ */

/*
 * A signal handler that interrupted the allocator: this thread's count of
 * the library's locks is up (lock.h), as it is while the allocator holds
 * a zone or per-CPU list lock.  Taking back must fail with EAGAIN rather
 * than wait for a lock the interrupted code holds, the data staying
 * where it is; with the count down again it works.  (The real thing,
 * timer signals against a malloc loop, is tests/integration/
 * preload_sighandler.)
 */
static void case_inside_allocator(void)
{
	char *blk, *plain;
	int rc, err;

	if (!start()) {
		ok(0, "ucma_init: %s", strerror(errno));
		return;
	}
	blk = block_new(2 * MiB, 31);
	plain = malloc(64 * 1024);
	ok(blk && on_frame(blk), "a block on a lent frame");
	ucma_locks_held_inc();
	errno = 0;
	rc = ucma_unlend(blk, 2 * MiB);
	err = errno;
	ok(rc == -1 && err == EAGAIN && on_frame(blk) && block_good(blk, 2 * MiB, 31),
	   "inside the allocator: ucma_unlend() fails with EAGAIN, the block stays lent and "
	   "intact (rc %d, %s)", rc, strerror(err));
	ok(ucma_unlend(plain, 64 * 1024) == 0,
	   "inside the allocator: ucma_unlend() of memory not lent succeeds");
	/* A malloc made holding a lock of the library (a thread created
	 * under the compaction lock allocates its thread data) gets no
	 * frame: the frame's UNMAP could not be delivered before it. */
	{
		uint64_t lent = stat_of("lend_heap_lent");
		char *b = block_new(3 * MiB, 32);

		ok(b && !on_frame(b) && !on_frame(b + 3 * MiB - 1) &&
			   stat_of("lend_heap_lent") == lent && block_good(b, 3 * MiB, 32),
		   "inside the allocator: a fresh block is not lent (lent %llu -> %llu)",
		   (unsigned long long)lent, (unsigned long long)stat_of("lend_heap_lent"));
		ucma_free(b);
	}
	errno = 0;
	rc = ucma_unlend_all();
	err = errno;
	ok(rc == -1 && err == EAGAIN && on_frame(blk), "inside the allocator: ucma_unlend_all() fails "
	   "with EAGAIN (rc %d, %s)", rc, strerror(err));
	errno = 0;
	rc = ucma_lend_raw_fork_prepare();
	err = errno;
	ok(rc == -1 && err == EAGAIN && on_frame(blk),
	   "inside the allocator: a raw fork is refused with EAGAIN (rc %d, %s)", rc, strerror(err));
	ucma_locks_held_dec();
	ok(ucma_unlend(blk, 2 * MiB) == 0 && !on_frame(blk) && block_good(blk, 2 * MiB, 31),
	   "outside: ucma_unlend() takes the block back, intact");
	ok(ucma_locks_held == 0, "the count of locks held is back at zero");
	free(plain);
	ucma_free(blk);
}

/* Each case in a process of its own; no lock of the library may stay
 * counted on its thread afterwards (lock.h): every later take-back there
 * would fail. */
static void (*run_fn)(void);
static const char *run_what;

static void run_counted(void)
{
	run_fn();
	if (ucma_locks_held != 0)
		ok(0, "%s: %u locks of the library still counted as held", run_what,
		   ucma_locks_held);
}

static void run(const char *what, void (*fn)(void))
{
	run_fn = fn;
	run_what = what;
	tap_in_child(what, run_counted, NULL);
}

static void hugetlb_cases(void)
{
	char why[256];

	if (tu_hugepages_reserve(2048, NFRAMES + 2, why, sizeof(why)) != 0) {
		skip(1, "hugetlb frames: %s", why);
		return;
	}
	cma_backing = UCMA_BACKING_HUGETLB_2M;
	if (!start() || ucma_area_frames(&a->areas[0])->kind != UCMA_FILE_HUGETLB) {
		skip(1, "hugetlb frames: the area did not get them");
		return;
	}
	diag("with hugetlb frames:");
	case_basic();
	case_writers();
	case_kernel_writes();
}

int main(void)
{
	tu_clear_env();
	/* Heap lending is off by default. */
	setenv("UCMA_CMA_POLICY", "lend", 1);
	real = ucma_os;
	if (!tu_uffd_wp_available(real.userfaultfd))
		skip_all("no userfaultfd with write-protection for shmem here (root, "
			 "vm.unprivileged_userfaultfd=1 or /dev/userfaultfd, Linux 6.4)");
	plan_no_plan();
	run("basic", case_basic);
	run("return free", case_return_free);
	run("memory events delivered", case_events_delivered);
	run("heap window", case_heap_window);
	run("no heap window", case_no_heap_window);
	run("lent mappings merge", case_mappings_merge);
	run("writers", case_writers);
	run("kernel writes", case_kernel_writes);
	run("signal handler", case_signal);
	run("inside the allocator", case_inside_allocator);
	run("own stack", case_own_stack);
	run("fork single-threaded", case_fork_single);
	run("fork with threads", case_fork_threads);
	run("fork handlers the program registered first", case_fork_handlers_first);
	run("fork from a heap stack", case_fork_own_stack);
	run("vfork and posix_spawn", case_vfork_spawn);
	run("program calls", case_program_calls);
	run("unlend_all while lending", case_unlend_all_race);
	run("a callback takes back", case_callback_takes_back);
	run("callbacks that post events", case_callback_posts);
	run("a reader and a callback that waits for readers", case_reader_vs_callback);
	run("no userfaultfd", case_no_uffd);
	run("automatic backing without frames", case_auto_no_frames);
	run("faults", case_faults);
	run("wake refused", case_wake_refused);
	run("fork during an interrupted take-back", case_fork_interrupted_takeback);
	run("fork with no descriptor to spare", case_fork_no_descriptor);
	run("fork near RLIMIT_AS", case_fork_near_rlimit_as);
	run("copy source", case_copy_source);
	run("writers, heap on huge pages", case_writers_thp);
	run("one userfaultfd", case_uffd_kept);
	run("hugetlb", hugetlb_cases);
	return done();
}
