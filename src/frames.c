/*
 * frames.c - the CMA areas as pools of frames that ucma maps itself.
 *
 * Each CMA area is a file ucma creates with memfd_create(): a hugetlb file
 * (MFD_HUGETLB, 1 GiB or 2 MiB pages) when the pool can hold the area, a
 * shmem file otherwise (with MADV_HUGEPAGE where the kernel gives shmem
 * huge pages).  Where shmem gets no huge pages the transparent-huge-page
 * step is private memory without frames, also when the heap would borrow
 * frames (lend.c): huge pages in the areas, with their 2 MiB physical
 * runs for devices, and freed memory given back, are worth more than
 * frames the heap could borrow (a shmem file of plain pages, whose
 * written pages stay in the file: UCMA_HUGEPAGES=none asks for it).
 * The area's addresses are that file mapped MAP_SHARED |
 * MAP_FIXED over the arena's reservation, so any frame (page of the file)
 * can be mapped at any address ucma owns: the foundation for lending
 * frames to the heap (DESIGN.md) and for mapping frames in physical order.
 *
 * The library's closes of these files are the raw system call
 * (ucma_os_close()): the preloaded close() keeps the program's own off
 * them (ucma_owns_fd()).
 *
 * Reserving: a hugetlb file is mapped first (a shared hugetlb mapping
 * reserves its pool pages at mmap, so a short pool fails here, cleanly),
 * placed with the arena's NUMA policy, then allocated whole with
 * fallocate(): the pages are ours from start-up and no later fault can
 * raise SIGBUS.  Shmem files are not allocated ahead (a small program
 * pays only for what it touches) unless UCMA_POPULATE asks.  Areas on a
 * file are never purged: their memory is the reservation (zone.c).
 *
 * Physical order (as DPDK's legacy memory mode does with one file per
 * page): when this process sees frame numbers in /proc/self/pagemap
 * (CAP_SYS_ADMIN), the frames of a hugetlb file are read, sorted by
 * physical address and mapped again slot by slot, so physically
 * consecutive frames become virtually consecutive.  The frame table then
 * knows every run, and UCMA_ALLOC_PHYS_CONTIG reads contiguity from it
 * instead of probing memory.  Without frame numbers the file stays in
 * file order and contiguity is probed as before (cma.c).
 *
 * Fork: a MAP_SHARED area would be shared with the child.  Every area on
 * a file carries MADV_DONTFORK, so a child made without the fork handlers
 * (raw clone()) gets nothing there; during a fork() the prepare handler
 * lifts it, so that the child inherits the mapping and no hole opens in
 * its address space before its handler runs.  That handler replaces the
 * mapping with areas of the child's own on a new shmem file (physical
 * order is not kept: the child has no pool pages to spare) and, unless
 * UCMA_CMA_DONTFORK=1, copies into it every allocated run of the parent's
 * areas (movable objects and contiguous buffers), read through the
 * inherited mapping (not the file descriptor: the program may have closed
 * it and reused the number), while the parent waits inside fork() with
 * every zone lock held; then both go on with separate memory, as with
 * private memory.  Memory that other threads of the parent write
 * meanwhile without synchronising with the forking thread may show those
 * writes in the child.  With UCMA_CMA_DONTFORK=1 the child's areas start
 * empty.  Areas without a file keep the old rule (copy-on-write, or
 * MADV_DONTFORK and fresh memory with UCMA_CMA_DONTFORK=1).  Children made
 * with raw clone() skip the handlers and find no CMA areas mapped.
 *
 * Memory events (memevent.c): MAP per area once the arena is complete,
 * UNMAP before an area is torn down, and UNMAP then MAP for every area in
 * the child of a fork.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "frames.h"
#include "fork.h"
#include "memevent.h"
#include "overflow.h"
#include "pcp.h"
#include "slab.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LONG_BITS (8u * (uint32_t)sizeof(unsigned long))

/* The areas' frames live in static storage: creating them must not call
 * malloc (under LD_PRELOAD that is ourselves, starting up). */
static struct ucma_frames frames_storage[UCMA_MAX_CMA_AREAS];

const char *ucma_frame_file_str(int kind)
{
	switch (kind) {
	case UCMA_FILE_HUGETLB: return "hugetlb";
	case UCMA_FILE_SHMEM: return "shmem";
	default: return "anonymous";
	}
}

static bool is_hugetlb(int backing)
{
	return backing == UCMA_BACKING_HUGETLB_1G || backing == UCMA_BACKING_HUGETLB_2M;
}

static size_t hugetlb_page(int backing)
{
	return backing == UCMA_BACKING_HUGETLB_1G ? UCMA_HUGE_1G : UCMA_PAGEBLOCK_SIZE;
}

static bool any_file(const struct ucma_arena *a)
{
	for (int k = 0; k < a->nr_areas; k++)
		if (a->areas[k].frames && a->areas[k].frames->fd >= 0)
			return true;
	return false;
}

/* Remember which file f->fd is, to know it later even if the program
 * closed the descriptor and its number was reused. */
static void file_identify(struct ucma_frames *f)
{
	struct stat st;

	if (fstat(f->fd, &st) == 0) {
		f->file_dev = (uint64_t)st.st_dev;
		f->file_ino = (uint64_t)st.st_ino;
	}
}

/* Is f->fd still the area's file? */
static bool fd_ours(const struct ucma_frames *f)
{
	struct stat st;

	return f->fd >= 0 && fstat(f->fd, &st) == 0 && (uint64_t)st.st_dev == f->file_dev &&
	       (uint64_t)st.st_ino == f->file_ino;
}

int ucma_frames_file_of(const struct ucma_cma_area *area, uint32_t slot, uint64_t *off)
{
	const struct ucma_frames *f = ucma_area_frames(area);

	if (!f || !fd_ours(f) || slot >= f->nr_frames)
		return -1;
	*off = f->table[slot].file_off;
	return f->fd;
}

/* Give [addr, addr + len) back to the reservation: PROT_NONE, nothing behind it. */
static void restore_reservation(void *addr, size_t len)
{
	ucma_os.mmap(addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
		     -1, 0);
}

/* ------------------------------------------------------------------------ */
/* The frame table                                                           */
/* ------------------------------------------------------------------------ */

static bool consecutive(const struct ucma_frames *f, uint32_t s)
{
	const struct ucma_frame *t = f->table;

	return t[s].phys && t[s + 1].phys && t[s + 1].phys == t[s].phys + f->frame_size;
}

/* Recompute run_end of every slot and the longest run (f->lock held, or
 * the table not yet visible to other threads). */
static void table_runs(struct ucma_frames *f)
{
	uint32_t n = f->nr_frames, best = 0;

	if (n == 0)
		return;
	f->table[n - 1].run_end = n;
	for (uint32_t s = n - 1; s-- > 0;)
		f->table[s].run_end = consecutive(f, s) ? f->table[s + 1].run_end : s + 1;
	for (uint32_t s = 0; s < n; s = f->table[s].run_end)
		if (f->table[s].run_end - s > best)
			best = f->table[s].run_end - s;
	f->longest_run = best;
}

/* Identity order: slot s holds the frame at file offset s * frame_size. */
static void table_identity(struct ucma_frames *f)
{
	for (uint32_t s = 0; s < f->nr_frames; s++)
		f->table[s] = (struct ucma_frame){ 0, (uint64_t)s * f->frame_size, s + 1, 0 };
	f->longest_run = 0;
}

static int table_alloc(struct ucma_frames *f, size_t frame_size)
{
	f->frame_size = frame_size;
	f->frame_pages = (uint32_t)(frame_size >> UCMA_PAGE_SHIFT);
	f->nr_frames = (uint32_t)(f->size / frame_size);
	f->table = ucma_meta_alloc((size_t)f->nr_frames * sizeof(*f->table));
	if (!f->table) {
		f->nr_frames = 0;
		return -1;
	}
	table_identity(f);
	return 0;
}

static void table_free(struct ucma_frames *f)
{
	if (f->table)
		ucma_meta_free(f->table, (size_t)f->nr_frames * sizeof(*f->table));
	f->table = NULL;
	f->nr_frames = 0;
	f->frame_size = 0;
	f->frame_pages = 0;
}

/* Heapsort by physical address: no allocation (qsort may call malloc,
 * which under LD_PRELOAD is this library starting up). */
static void sift_down(struct ucma_frame *t, uint32_t root, uint32_t n)
{
	for (;;) {
		uint32_t child = 2 * root + 1;
		struct ucma_frame tmp;

		if (child >= n)
			return;
		if (child + 1 < n && t[child + 1].phys > t[child].phys)
			child++;
		if (t[root].phys >= t[child].phys)
			return;
		tmp = t[root];
		t[root] = t[child];
		t[child] = tmp;
		root = child;
	}
}

static void sort_by_phys(struct ucma_frame *t, uint32_t n)
{
	for (uint32_t i = n / 2; i-- > 0;)
		sift_down(t, i, n);
	for (uint32_t end = n; end-- > 1;) {
		struct ucma_frame tmp = t[0];

		t[0] = t[end];
		t[end] = tmp;
		sift_down(t, 0, end);
	}
}

/* Read the physical address of every slot's frame into the table; false
 * when some frame is not present or frame numbers are hidden. */
static bool table_read_phys(struct ucma_frames *f)
{
	uint64_t *phys = ucma_meta_alloc((size_t)f->nr_frames * sizeof(*phys));
	bool good;

	if (!phys)
		return false;
	good = ucma_os_pagemap_stride((void *)f->base, f->frame_size, f->nr_frames, phys) == 0;
	for (uint32_t s = 0; good && s < f->nr_frames; s++) {
		good = phys[s] != 0;
		f->table[s].phys = phys[s];
	}
	ucma_meta_free(phys, (size_t)f->nr_frames * sizeof(*phys));
	return good;
}

/*
 * Map the frames of the table at their slots, one mmap per stretch of
 * slots whose frames are consecutive in the file.  Returns 0 or -1.
 */
static int map_slots(struct ucma_frames *f, uint32_t first, uint32_t end, int extra_flags)
{
	for (uint32_t s = first; s < end;) {
		uint32_t e = s + 1;
		void *at = (void *)(f->base + (uintptr_t)s * f->frame_size);

		while (e < end && f->table[e].file_off == f->table[e - 1].file_off + f->frame_size)
			e++;
		if (ucma_os.mmap(at, (size_t)(e - s) * f->frame_size, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_FIXED | extra_flags, f->fd,
				 (off_t)f->table[s].file_off) == MAP_FAILED)
			return -1;
		s = e;
	}
	return 0;
}

/*
 * Physical order: populate the file in file order, read where each frame
 * is, sort, map slot by slot, and read again to be sure.  On any failure
 * the file goes back to file order, frames unknown.  The table is not yet
 * visible to other threads.
 */
static void sort_frames(struct ucma_frames *f)
{
	uint64_t t0 = ucma_os_now_ns();

	if (ucma_os.mmap((void *)f->base, f->size, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED | MAP_POPULATE, f->fd, 0) == MAP_FAILED ||
	    !table_read_phys(f))
		goto unknown;
	sort_by_phys(f->table, f->nr_frames);
	if (map_slots(f, 0, f->nr_frames, MAP_POPULATE) != 0 || !table_read_phys(f)) {
		ucma_log("CMA area at %p: cannot map its frames in physical order (%s); file "
			 "order kept", (void *)f->base, strerror(errno));
		table_identity(f);
		if (ucma_os.mmap((void *)f->base, f->size, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_FIXED, f->fd, 0) == MAP_FAILED)
			ucma_fatal("CMA area at %p: cannot map its file again: %s",
				   (void *)f->base, strerror(errno));
		goto unknown;
	}
	f->phys_known = true;
	f->phys_order = true;
	table_runs(f);
	f->sort_ns = ucma_os_now_ns() - t0;
	return;
unknown:
	for (uint32_t s = 0; s < f->nr_frames; s++)
		f->table[s].phys = 0;
	table_runs(f);
	f->phys_known = false;
	f->sort_ns = ucma_os_now_ns() - t0;
}

/* ------------------------------------------------------------------------ */
/* Creating the areas                                                        */
/* ------------------------------------------------------------------------ */

/*
 * struct frames_build - one start-up's walk down the backing chain.  Each
 * step is tried in two phases for every area: map (make the file and map
 * it, which reserves hugetlb pool pages, or map private memory), then,
 * once the caller has applied the NUMA policy to the new mappings,
 * allocate (fallocate the hugetlb files, sort their frames, populate what
 * UCMA_POPULATE asks for, advise).  A step that fails in either phase is
 * undone for every area and the next one is tried.  Start-up is single
 * threaded: one static context.
 */
static struct frames_build {
	struct ucma_arena *a;
	const struct ucma_options *o;
	size_t step;			/* index in chain[] being tried */
	bool frame_numbers;		/* pagemap shows this process frame numbers */
	bool unpopulated;		/* UCMA_POPULATE left an area as it was */
	int file_err;			/* why an area's file could not be made, or 0 */
} fb;

static const int chain[] = { UCMA_BACKING_HUGETLB_1G, UCMA_BACKING_HUGETLB_2M, UCMA_BACKING_THP,
			     UCMA_BACKING_NONE };

/* What trying one step for one area came to. */
enum step_result {
	STEP_OK,
	STEP_DEGRADED,		/* mapped, but MADV_HUGEPAGE was refused: plain pages */
	STEP_NO_FILE,		/* no file could be made: private memory may do */
	STEP_SKIP,		/* this kind of page cannot be had: the next step */
};

/* Phase 1 with a file: make it and map it (hugetlb: reserving the pool
 * pages).  On failure nothing is left and the reservation is intact. */
static int map_area_file(struct ucma_cma_area *area, int backing)
{
	struct ucma_frames *f = area->frames;
	bool huge = is_hugetlb(backing);
	unsigned mfd = MFD_CLOEXEC;
	char name[16 + UCMA_AREA_NAME_MAX];

	if (huge)
		mfd |= MFD_HUGETLB | (backing == UCMA_BACKING_HUGETLB_1G ? MFD_HUGE_1GB : MFD_HUGE_2MB);
	snprintf(name, sizeof(name), "ucma:%s", area->name);
	f->fd = ucma_os_fd_high(ucma_os.memfd_create(name, mfd));
	if (f->fd < 0) {
		fb.file_err = errno;
		return STEP_NO_FILE;
	}
	if (ucma_os.ftruncate(f->fd, (off_t)f->size) != 0 ||
	    ucma_os.mmap((void *)f->base, f->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			 f->fd, 0) == MAP_FAILED) {
		/* A hugetlb mapping the pool cannot back fails here, cleanly. */
		int rc = huge && errno == ENOMEM ? STEP_SKIP : STEP_NO_FILE;

		fb.file_err = errno;
		ucma_os_close(f->fd);
		f->fd = -1;
		return rc;
	}
	f->kind = huge ? UCMA_FILE_HUGETLB : UCMA_FILE_SHMEM;
	f->backing = backing;
	file_identify(f);
	return STEP_OK;
}

/* Phase 1 without a file: private anonymous memory, as before frames. */
static int map_area_anon(struct ucma_cma_area *area, int backing)
{
	struct ucma_frames *f = area->frames;
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE;

	if (backing == UCMA_BACKING_HUGETLB_1G)
		flags = (flags & ~MAP_NORESERVE) | MAP_HUGETLB | MAP_HUGE_1GB;
	else if (backing == UCMA_BACKING_HUGETLB_2M)
		flags = (flags & ~MAP_NORESERVE) | MAP_HUGETLB | MAP_HUGE_2MB;
	if (ucma_os.mmap((void *)f->base, f->size, PROT_READ | PROT_WRITE, flags, -1, 0) ==
	    MAP_FAILED)
		return STEP_SKIP;
	f->fd = -1;
	f->kind = UCMA_FILE_ANON;
	f->backing = backing;
	return STEP_OK;
}

/* Phase 2 for one area; STEP_SKIP when a hugetlb file cannot be allocated. */
static int allocate_area(struct ucma_cma_area *area)
{
	struct ucma_frames *f = area->frames;
	bool populate = fb.o->populate;
	void *base = (void *)f->base;
	uint64_t short_of;

	/* Hugetlb pages are the pool's, reserved at mmap: they pass.  The
	 * rest stops where the arena's populating stops (arena.c). */
	if (populate && f->kind != UCMA_FILE_HUGETLB && (short_of = ucma_populate_short(f->size))) {
		ucma_log("UCMA_POPULATE: CMA area %s not prefaulted: %llu MiB available "
			 "(MemAvailable, or the memory cgroup's limit less its use where that is "
			 "less) for its %zu MiB", area->name, (unsigned long long)(short_of >> 20),
			 f->size >> 20);
		populate = false;
		fb.unpopulated = true;
	}
	if (f->kind == UCMA_FILE_ANON) {
		if (populate && ucma_os.madvise(base, f->size, MADV_POPULATE_WRITE) != 0) {
			ucma_log("UCMA_POPULATE: could not prefault CMA area %s: %s", area->name,
				 strerror(errno));
			fb.unpopulated = true;
		}
	} else if (f->kind == UCMA_FILE_HUGETLB) {
		/* Every page now, where the policy just applied puts it. */
		if (ucma_os.fallocate(f->fd, 0, 0, (off_t)f->size) != 0 ||
		    table_alloc(f, hugetlb_page(f->backing)) != 0)
			return STEP_SKIP;
		if (fb.frame_numbers)
			sort_frames(f);
		else if (populate && ucma_os.mmap(base, f->size, PROT_READ | PROT_WRITE,
						  MAP_SHARED | MAP_FIXED | MAP_POPULATE, f->fd,
						  0) == MAP_FAILED)
			return STEP_SKIP;
	} else {
		/* Mapping the file again keeps its NUMA policy: a shared
		 * mapping's policy belongs to the file. */
		if ((populate && ucma_os.mmap(base, f->size, PROT_READ | PROT_WRITE,
					      MAP_SHARED | MAP_FIXED | MAP_POPULATE, f->fd,
					      0) == MAP_FAILED) ||
		    table_alloc(f, UCMA_PAGEBLOCK_SIZE) != 0)
			return STEP_SKIP;
	}
	if (f->backing == UCMA_BACKING_THP && ucma_os.madvise(base, f->size, MADV_HUGEPAGE) != 0) {
		/* Still usable memory, just not huge: report it as plain. */
		f->backing = UCMA_BACKING_NONE;
		return STEP_DEGRADED;
	}
	return STEP_OK;
}

/* Undo one area's backing: the reservation is PROT_NONE there again. */
static void unmap_area(struct ucma_cma_area *area)
{
	struct ucma_frames *f = area->frames;

	restore_reservation((void *)f->base, f->size);
	if (f->fd >= 0)
		ucma_os_close(f->fd);
	f->fd = -1;
	table_free(f);
	f->phys_known = f->phys_order = false;
	f->sort_ns = 0;
}

/* Can the kernel give @total bytes of areas pages of kind @backing now? */
static bool backing_available(int backing, size_t total)
{
	switch (backing) {
	case UCMA_BACKING_HUGETLB_1G:
	case UCMA_BACKING_HUGETLB_2M: {
		size_t page = hugetlb_page(backing);

		return ucma_os_hugetlb_free_pages(page) >= (long)(total / page);
	}
	case UCMA_BACKING_THP:
		return ucma_os_shmem_thp_available() || ucma_os_thp_available();
	default:
		return true;
	}
}

/* Bytes of all the areas of @a. */
static size_t areas_bytes(const struct ucma_arena *a)
{
	size_t total = 0;

	for (int i = 0; i < a->nr_areas; i++)
		total += (size_t)a->areas[i].npages << UCMA_PAGE_SHIFT;
	return total;
}

/* Does every area of @a start and end on a @page boundary? */
static bool areas_whole_pages(const struct ucma_arena *a, size_t page)
{
	for (int i = 0; i < a->nr_areas; i++) {
		const struct ucma_frames *f = a->areas[i].frames;

		if (f->size % page || f->base % page)
			return false;
	}
	return true;
}

/* Can step @backing work for every area of @a at all? */
static bool step_possible(struct ucma_arena *a, int backing)
{
	if (is_hugetlb(backing) && !areas_whole_pages(a, hugetlb_page(backing)))
		return false;
	return backing_available(backing, areas_bytes(a));
}

/* UCMA_VERBOSE: why a hugetlb step was passed over (the pool is the one
 * reason not said elsewhere). */
static void say_step_skipped(struct ucma_arena *a, int backing)
{
	size_t page;

	if (!fb.o->verbose || !is_hugetlb(backing))
		return;
	page = hugetlb_page(backing);
	if (!areas_whole_pages(a, page)) {
		ucma_log("CMA areas: no %s: the areas are not whole %zu MiB pages",
			 ucma_backing_str(backing), page >> 20);
		return;
	}
	if (ucma_os_hugetlb_free_pages(page) < 0) {
		ucma_log("CMA areas: no %s: the pool's counts cannot be read (%s)",
			 ucma_backing_str(backing), strerror(errno));
		return;
	}
	ucma_log("CMA areas: no %s: %ld pages of %zu MiB to be had (free in the pool, and "
		 "what nr_overcommit_hugepages allows), %zu needed",
		 ucma_backing_str(backing), ucma_os_hugetlb_free_pages(page), page >> 20,
		 areas_bytes(a) / page);
}

/* Would step @backing use a file but for strict overcommit?  Hugetlb and
 * plain pages do; transparent huge pages only where shmem gets them
 * (private memory has them anyway). */
static bool step_wants_file(int backing)
{
	return backing != UCMA_BACKING_THP || ucma_os_shmem_thp_available();
}

/* Does step @backing use a file?  As step_wants_file() says, except: no
 * shmem file under strict overcommit accounting (vm.overcommit_memory
 * = 2): the kernel charges a shmem page when it is first touched, and a
 * page it refuses then is SIGBUS in whoever touched it, the program or the
 * compaction thread, where ucma_alloc() had said yes.  Private memory is
 * charged whole at mmap, where a refusal is a clean ENOMEM; a hugetlb
 * file reserves its pool pages at mmap too. */
static bool step_has_file(int backing)
{
	return is_hugetlb(backing) || (step_wants_file(backing) && !ucma_os_overcommit_strict());
}

/* Phase 1 of the first step from fb.step on that every area can have;
 * -1 when none (not even plain memory). */
static int map_next_step(void)
{
	struct ucma_arena *a = fb.a;

	for (; fb.step < UCMA_ARRAY_SIZE(chain); fb.step++) {
		int backing = chain[fb.step], i;

		/* Heap lending does not change this choice: a CMA area of
		 * private transparent huge pages keeps its 2 MiB physical runs
		 * and gives freed memory back, where a shmem file of 4 KiB
		 * pages (which lending could borrow) would do neither; lending
		 * is then off (lend.c says why), and UCMA_HUGEPAGES=none asks
		 * for that file. */
		if (!step_possible(a, backing)) {
			say_step_skipped(a, backing);
			continue;
		}
		if (fb.o->verbose && step_wants_file(backing) && !step_has_file(backing))
			ucma_log("CMA areas: private memory, no file: vm.overcommit_memory is 2 "
				 "(strict), which charges a file's pages only when first touched, "
				 "and a page refused then is SIGBUS");
		for (i = 0; i < a->nr_areas; i++) {
			int rc = step_has_file(backing) ? map_area_file(&a->areas[i], backing) :
							  STEP_NO_FILE;

			if (rc == STEP_NO_FILE)
				rc = map_area_anon(&a->areas[i], backing);
			if (rc == STEP_SKIP)
				break;
		}
		if (i == a->nr_areas)
			return 0;
		while (i-- > 0)
			unmap_area(&a->areas[i]);
	}
	return -1;
}

bool ucma_frames_expect_lendable(const struct ucma_options *o)
{
	size_t total = o->cma_size;
	int backing = o->hugepages;
	bool all_1g = total % UCMA_HUGE_1G == 0;
	size_t i = 0;

	for (int k = 0; k < o->nr_areas; k++)
		all_1g &= o->areas[k].size % UCMA_HUGE_1G == 0;
	/* chain[] as map_next_step() will walk it, from the backing asked
	 * for (or the top), with the pools as they are now (a 1 GiB step
	 * needs areas of whole 1 GiB pages).  A backing asked for by name
	 * that the pool cannot give falls to the next step there too: taken
	 * as it was, the NORMAL zone got the heap's window onto lent frames
	 * while lending stayed off. */
	while (backing != UCMA_BACKING_AUTO && i < UCMA_ARRAY_SIZE(chain) && chain[i] != backing)
		i++;
	for (backing = UCMA_BACKING_AUTO; backing == UCMA_BACKING_AUTO && i < UCMA_ARRAY_SIZE(chain);
	     i++)
		if ((chain[i] != UCMA_BACKING_HUGETLB_1G || (all_1g && total)) &&
		    backing_available(chain[i], total))
			backing = chain[i];
	switch (backing) {
	case UCMA_BACKING_HUGETLB_2M:
		return true;
	case UCMA_BACKING_NONE:
	case UCMA_BACKING_THP:
		return step_has_file(backing);
	default:
		return false;
	}
}

int ucma_frames_map_areas(struct ucma_arena *a, const struct ucma_options *o)
{
	uint64_t probe = 0;

	fb = (struct frames_build){ .a = a, .o = o };
	/* Frame numbers are visible or hidden for the whole process: ask
	 * about a page that surely is present (this stack). */
	fb.frame_numbers = ucma_os_pagemap(&probe, &probe) == 0;
	for (int k = 0; k < a->nr_areas; k++) {
		struct ucma_frames *f = &frames_storage[k];

		memset(f, 0, sizeof(*f));
		pthread_mutex_init(&f->lock, NULL);
		f->fd = -1;
		f->base = (uintptr_t)ucma_pfn_to_addr(a, a->areas[k].base_pfn);
		f->size = (size_t)a->areas[k].npages << UCMA_PAGE_SHIFT;
		a->areas[k].frames = f;
	}
	if (o->hugepages != UCMA_BACKING_AUTO)
		while (fb.step < UCMA_ARRAY_SIZE(chain) && chain[fb.step] != o->hugepages)
			fb.step++;
	if (map_next_step() != 0) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

/* Apply MADV_DONTFORK where it is due: always on a file (a shared mapping
 * must not reach the child), with UCMA_CMA_DONTFORK on private memory. */
static void apply_dontfork(struct ucma_arena *a, const struct ucma_options *o)
{
	int failed = 0, err = 0;

	for (int i = 0; i < a->nr_areas; i++) {
		struct ucma_frames *f = a->areas[i].frames;

		if ((f->fd >= 0 || o->cma_dontfork) &&
		    ucma_os.madvise((void *)f->base, f->size, MADV_DONTFORK) != 0) {
			failed++;
			err = errno;
		}
	}
	if (failed && o->cma_dontfork)
		ucma_log("UCMA_CMA_DONTFORK: madvise(MADV_DONTFORK) failed: %s", strerror(err));
	else if (failed)
		ucma_log("CMA areas: madvise(MADV_DONTFORK) failed: %s; children made by fork() "
			 "still get their own copy, children of a raw clone() would share them",
			 strerror(err));
}

/* UCMA_VERBOSE: what backs each area, and why when it has no frames. */
static void report(const struct ucma_cma_area *area)
{
	const struct ucma_frames *f = area->frames;

	if (f->fd < 0 && fb.file_err)
		ucma_log("CMA area %s: private anonymous memory (%s), no frames: its file could "
			 "not be made (%s)", area->name, ucma_backing_str(f->backing),
			 strerror(fb.file_err));
	else if (f->fd < 0)
		ucma_log("CMA area %s: private anonymous memory (%s), no frames%s", area->name,
			 ucma_backing_str(f->backing),
			 ucma_os_overcommit_strict() ? ": vm.overcommit_memory is 2 (strict)" :
			 f->backing == UCMA_BACKING_THP ?
				 ": shmem gets no huge pages on this kernel "
				 "(transparent_hugepage/shmem_enabled); UCMA_HUGEPAGES=none "
				 "gives frames of plain pages" : "");
	else if (f->phys_order)
		ucma_log("CMA area %s: %s file, %u frames of %zu KiB in physical order (read, "
			 "sorted and mapped in %.2f ms), longest physically contiguous run "
			 "%zu KiB", area->name, ucma_frame_file_str(f->kind), f->nr_frames,
			 f->frame_size >> 10, (double)f->sort_ns / 1e6,
			 (size_t)f->longest_run * (f->frame_size >> 10));
	else
		ucma_log("CMA area %s: %s file, %u frames of %zu KiB in file order: %s",
			 area->name, ucma_frame_file_str(f->kind), f->nr_frames,
			 f->frame_size >> 10,
			 f->kind == UCMA_FILE_HUGETLB ?
				 "physical addresses are hidden from this process (they need "
				 "CAP_SYS_ADMIN)" : "shmem frames have no fixed physical address");
}

int ucma_frames_allocate(struct ucma_arena *a,
			 void (*place)(struct ucma_arena *a, void *addr, size_t len))
{
	int backing;

	for (;;) {
		int i;

		backing = chain[fb.step];
		for (i = 0; i < a->nr_areas; i++) {
			int rc = allocate_area(&a->areas[i]);

			if (rc == STEP_SKIP)
				break;
			if (rc == STEP_DEGRADED)
				backing = UCMA_BACKING_NONE;
		}
		if (i == a->nr_areas)
			break;
		for (int k = 0; k < a->nr_areas; k++)
			unmap_area(&a->areas[k]);
		fb.step++;
		if (map_next_step() != 0) {
			errno = ENOMEM;
			return -1;
		}
		place(a, (void *)a->areas[0].frames->base,
		      (size_t)a->zones[UCMA_ZONE_CMA].managed_pages << UCMA_PAGE_SHIFT);
	}
	apply_dontfork(a, fb.o);
	a->zones[UCMA_ZONE_CMA].file_backed = any_file(a);
	/* Not prefaulted after all: zone.c populates migration copies. */
	if (fb.unpopulated)
		a->zones[UCMA_ZONE_CMA].prefaulted = false;
	for (int k = 0; fb.o->verbose && k < a->nr_areas; k++)
		report(&a->areas[k]);
	return backing;
}

void ucma_frames_announce(struct ucma_arena *a)
{
	for (int k = 0; k < a->nr_areas; k++) {
		struct ucma_frames *f = a->areas[k].frames;

		if (f && !f->announced) {
			ucma_mem_event_post(UCMA_MEM_EVENT_MAP, (void *)f->base, f->size);
			f->announced = true;
		}
	}
}

void ucma_frames_unmap_areas(struct ucma_arena *a)
{
	bool posted = false;

	for (int k = 0; k < a->nr_areas; k++) {
		struct ucma_frames *f = a->areas[k].frames;

		if (f && f->announced) {
			ucma_mem_event_post(UCMA_MEM_EVENT_UNMAP, (void *)f->base, f->size);
			f->announced = false;
			posted = true;
		}
	}
	/* Registrations are dropped before the memory goes. */
	if (posted)
		ucma_mem_event_deliver();
	for (int k = 0; k < a->nr_areas; k++) {
		struct ucma_frames *f = a->areas[k].frames;

		if (!f)
			continue;
		if (fd_ours(f))
			ucma_os_close(f->fd);
		f->fd = -1;
		table_free(f);
		a->areas[k].frames = NULL;
	}
}

/* ------------------------------------------------------------------------ */
/* Physical contiguity and addresses                                         */
/* ------------------------------------------------------------------------ */

bool ucma_frames_by_table(struct ucma_cma_area *area)
{
	const struct ucma_frames *f = area->frames;

	return f && f->kind == UCMA_FILE_HUGETLB && f->phys_known;
}

/* The table's answer for [off, off + npages) of the area (f->lock held). */
static uint32_t run_locked(const struct ucma_frames *f, uint32_t off, uint32_t npages)
{
	uint32_t first = off / f->frame_pages, last = (off + npages - 1) / f->frame_pages;
	uint32_t end = f->table[first].run_end;

	if (end > last)
		return npages;
	return end * f->frame_pages - off;
}

uint32_t ucma_frames_table_run(struct ucma_cma_area *area, uint32_t off, uint32_t npages)
{
	struct ucma_frames *f = area->frames;
	uint32_t k;

	ucma_mutex_lock(&f->lock);
	k = run_locked(f, off, npages);
	ucma_mutex_unlock(&f->lock);
	return k;
}

uint32_t ucma_frames_verify(struct ucma_cma_area *area, uint32_t off, uint32_t npages)
{
	struct ucma_frames *f = area->frames;
	uint32_t first = off / f->frame_pages, last = (off + npages - 1) / f->frame_pages;
	uint32_t n = last - first + 1, k, moved = 0;
	uint64_t few[16], *phys = n <= 16 ? few : ucma_meta_alloc((size_t)n * sizeof(*phys));

	if (!phys)
		return 0;
	if (ucma_os_pagemap_stride((void *)(f->base + (uintptr_t)first * f->frame_size),
				   f->frame_size, n, phys) != 0) {
		k = 0;	/* cannot tell: not contiguous as far as anyone knows */
		goto out;
	}
	ucma_mutex_lock(&f->lock);
	for (uint32_t i = 0; i < n; i++) {
		if (f->table[first + i].phys != phys[i]) {
			f->table[first + i].phys = phys[i];
			moved++;
		}
	}
	if (moved) {
		f->phys_moved += moved;
		table_runs(f);
	}
	k = run_locked(f, off, npages);
	ucma_mutex_unlock(&f->lock);
	if (moved)
		ucma_count(UCMA_STAT_PHYS_CONTIG_MOVED, moved);
out:
	if (phys != few)
		ucma_meta_free(phys, (size_t)n * sizeof(*phys));
	return k;
}

/* Is @p memory of ucma's (the arena, or its overflow mappings)?  *@limit:
 * how far a physically contiguous run from @p may be reported. */
static bool owned(struct ucma_arena *a, const void *p, uintptr_t *limit)
{
	struct ucma_ovf_ref ref;

	if (a && ucma_addr_in_arena(a, p)) {
		uint32_t pfn = ucma_addr_to_pfn(a, p);
		struct ucma_cma_area *area = ucma_area_of_pfn(a, pfn);
		const struct ucma_zone *z = ucma_pfn_zone(a, pfn);

		*limit = area ? (uintptr_t)ucma_pfn_to_addr(a, area->base_pfn + area->npages) :
				(uintptr_t)ucma_pfn_to_addr(a, z->end_pfn);
		return true;
	}
	if (ucma_overflow_find(p, &ref) != UCMA_OVF_NONE) {
		/* Overflow pages are ordinary private memory: report no more
		 * than the page, as nothing says what lies beyond it. */
		*limit = UCMA_ALIGN_UP((uintptr_t)p + 1, UCMA_PAGE_SIZE);
		return true;
	}
	return false;
}

/**
 * ucma_vtophys() - physical address of @ptr and the physically contiguous
 * bytes from it on.
 */
int ucma_vtophys(const void *ptr, uint64_t *phys, size_t *contig_len)
{
	struct ucma_arena *a = ucma_arena_peek();
	uintptr_t p = (uintptr_t)ptr, limit, page = UCMA_ALIGN_DOWN(p, UCMA_PAGE_SIZE);
	struct ucma_cma_area *area;
	uint64_t first;
	bool absent;
	long k;

	if (!ptr || !phys || !owned(a, ptr, &limit)) {
		errno = EINVAL;
		return -1;
	}
	area = ucma_addr_in_arena(a, ptr) ? ucma_area_of_pfn(a, ucma_addr_to_pfn(a, ptr)) : NULL;
	if (area && ucma_frames_by_table(area)) {
		struct ucma_frames *f = area->frames;
		uint32_t slot = (uint32_t)((p - f->base) / f->frame_size);
		size_t in_frame = (p - f->base) % f->frame_size;

		ucma_mutex_lock(&f->lock);
		first = f->table[slot].phys;
		k = (long)(f->table[slot].run_end - slot);
		ucma_mutex_unlock(&f->lock);
		if (first) {
			*phys = first + in_frame;
			if (contig_len)
				*contig_len = (size_t)k * f->frame_size - in_frame;
			return 0;
		}
	}
	if (ucma_os_pagemap(ptr, &first) != 0)
		return -1;
	*phys = first;
	if (!contig_len)
		return 0;
	k = ucma_os_phys_run((void *)page, (limit - page) >> UCMA_PAGE_SHIFT, &absent);
	if (k <= 0) {
		/* The page was present a moment ago: it counts on its own. */
		k = 1;
	}
	*contig_len = ((size_t)k << UCMA_PAGE_SHIFT) - (p - page);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */

void ucma_frames_stats_locked(struct ucma_cma_area *area, struct ucma_frames_stats *st)
{
	struct ucma_frames *f = area->frames;

	memset(st, 0, sizeof(*st));
	if (!f)
		return;
	st->kind = (uint64_t)f->kind;
	st->frame_size = f->frame_size;
	st->nr_frames = f->nr_frames;
	st->sort_ns = f->sort_ns;
	ucma_mutex_lock(&f->lock);
	st->nr_lent = f->nr_lent;
	if (f->phys_known) {
		uint32_t best = 0;

		st->phys_run_max = (uint64_t)f->longest_run * f->frame_size;
		/* Frames start on whole words of the bitmap (frame_pages is a
		 * multiple of the word), so each run is scanned word by word. */
		for (uint32_t s = 0; s < f->nr_frames && area->bitmap; s = f->table[s].run_end) {
			uint32_t pages = (f->table[s].run_end - s) * f->frame_pages;
			uint32_t z = ucma_bitmap_max_zero_run(
				area->bitmap + (size_t)s * f->frame_pages / LONG_BITS, pages);

			best = z > best ? z : best;
		}
		st->phys_run_free = (uint64_t)best << UCMA_PAGE_SHIFT;
	}
	ucma_mutex_unlock(&f->lock);
}

/* ------------------------------------------------------------------------ */
/* Lending frames                                                            */
/* ------------------------------------------------------------------------ */

static int check_slots(const struct ucma_cma_area *area, uint32_t slot, uint32_t n)
{
	const struct ucma_frames *f = area->frames;

	if (!f || f->fd < 0 || n == 0 || slot >= f->nr_frames || n > f->nr_frames - slot) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* Mapping frames needs the file: EBADF when the program closed it. */
static int check_file(const struct ucma_cma_area *area, uint32_t slot, uint32_t n)
{
	if (check_slots(area, slot, n) != 0)
		return -1;
	if (!fd_ours(area->frames)) {
		errno = EBADF;
		return -1;
	}
	return 0;
}

int ucma_frames_map_at(struct ucma_cma_area *area, uint32_t slot, uint32_t n, void *addr,
		       bool populate, bool *touched)
{
	struct ucma_frames *f = area->frames;
	uintptr_t at = (uintptr_t)addr;

	if (check_file(area, slot, n) != 0)
		return -1;
	if (at % f->frame_size) {
		errno = EINVAL;
		return -1;
	}
	for (uint32_t s = slot; s < slot + n;) {
		uint32_t e = s + 1;

		while (e < slot + n && f->table[e].file_off == f->table[e - 1].file_off + f->frame_size)
			e++;
		if (ucma_os.mmap((void *)(at + (uintptr_t)(s - slot) * f->frame_size),
				 (size_t)(e - s) * f->frame_size, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_FIXED | (populate ? MAP_POPULATE : 0), f->fd,
				 (off_t)f->table[s].file_off) == MAP_FAILED)
			return -1;
		*touched = true;
		s = e;
	}
	return ucma_os.madvise(addr, (size_t)n * f->frame_size, MADV_DONTFORK);
}

int ucma_frames_restore(struct ucma_cma_area *area, uint32_t slot, uint32_t n)
{
	struct ucma_frames *f = area->frames;

	if (check_file(area, slot, n) != 0)
		return -1;
	if (map_slots(f, slot, slot + n, f->kind == UCMA_FILE_HUGETLB ? MAP_POPULATE : 0) != 0)
		return -1;
	return ucma_os.madvise((void *)(f->base + (uintptr_t)slot * f->frame_size),
			       (size_t)n * f->frame_size, MADV_DONTFORK);
}

int ucma_frames_set_lent(struct ucma_cma_area *area, uint32_t slot, uint32_t n, bool lent)
{
	struct ucma_frames *f = area->frames;

	if (check_slots(area, slot, n) != 0)
		return -1;
	ucma_mutex_lock(&f->lock);
	for (uint32_t s = slot; s < slot + n; s++) {
		bool was = f->table[s].flags & UCMA_FRAME_LENT;

		if (was == lent)
			continue;
		f->table[s].flags ^= UCMA_FRAME_LENT;
		f->nr_lent = lent ? f->nr_lent + 1 : f->nr_lent - 1;
	}
	ucma_mutex_unlock(&f->lock);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Fork                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * struct frames_fork - one fork, from the prepare handler to the parent's
 * and the child's (which also put MADV_DONTFORK back on the areas).  The parent waits on @wait_rd until the child has
 * copied (one byte, or end of file if the child dies); the child needs no
 * copy when nothing is allocated in the CMA zone or UCMA_CMA_DONTFORK is
 * set, and then nobody waits.  Written by the forking thread only, with
 * every zone lock held.
 */
static struct frames_fork {
	bool copy;		/* the child copies the parent's allocated runs */
	int wait_rd, wait_wr;	/* the pipe the parent waits on, or -1 */
	uint32_t unshared;	/* areas (bit k) madvise(MADV_DOFORK) refused */
} fork_ctx = { false, -1, -1, 0 };

/* Back to "nothing to do", storing only where needed: after a fork, a
 * page the child still shares is copied by the first store (the previous
 * fork's reset mostly leaves it as it should be). */
static void fork_ctx_clear(void)
{
	if (fork_ctx.copy || fork_ctx.wait_rd >= 0 || fork_ctx.wait_wr >= 0 || fork_ctx.unshared)
		fork_ctx = (struct frames_fork){ false, -1, -1, 0 };
}

void ucma_frames_fork_prepare(void)
{
	struct ucma_arena *a = ucma_the_arena;
	const struct ucma_zone *z;
	int fds[2];

	fork_ctx_clear();
	if (!a)
		return;
	for (int k = 0; k < a->nr_areas; k++) {
		struct ucma_frames *f = a->areas[k].frames;

		ucma_fork_lock(&f->lock);
		/* This fork lets the child inherit the mapping, which its
		 * handler replaces at once: no hole in the child's address
		 * space that something else could take before the handler
		 * runs.  Raw clone() children, which skip the handlers, never
		 * get it (MADV_DONTFORK again right after). */
		if (f->fd >= 0 && ucma_os.madvise((void *)f->base, f->size, MADV_DOFORK) != 0)
			fork_ctx.unshared |= 1u << k;	/* the child reads the file */
	}
	z = &a->zones[UCMA_ZONE_CMA];
	/* fork.c's zone stage, before this one, holds the zone lock and
	 * the per-CPU list locks: the free pages are still. */
	if (!any_file(a) || ucma_opt.cma_dontfork ||
	    z->free_pages + ucma_pcp_pages(z) == z->managed_pages)
		return;
	fork_ctx.copy = true;
	/* Without a pipe the child still copies, with the parent running on:
	 * fork itself must not fail here. */
	if (pipe2(fds, O_CLOEXEC) == 0) {
		fork_ctx.wait_rd = fds[0];
		fork_ctx.wait_wr = fds[1];
	}
}

void ucma_frames_fork_parent(void)
{
	struct ucma_arena *a = ucma_the_arena;
	char c;

	if (fork_ctx.wait_rd >= 0) {
		close(fork_ctx.wait_wr);
		while (read(fork_ctx.wait_rd, &c, 1) < 0 && errno == EINTR)
			;
		close(fork_ctx.wait_rd);
	}
	if (!a)
		return;
	for (int k = a->nr_areas - 1; k >= 0; k--) {
		struct ucma_frames *f = a->areas[k].frames;

		if (f->fd >= 0)
			ucma_os.madvise((void *)f->base, f->size, MADV_DONTFORK);
		ucma_fork_unlock(&f->lock);
	}
}

/* Where the child puts one area: a new file, or private memory. */
struct child_area {
	bool copy;			/* the parent's allocated runs are copied */
	bool unshared;			/* not inherited: read through the parent's file */
	int fd;				/* the child's new file, or -1 */
	char *scratch;			/* without a file: private memory to copy into */
};

/* @len bytes from @buf into the child's new file at @off; 0 or -1. */
static int child_write(int fd, const char *buf, size_t len, uint64_t off)
{
	for (size_t done = 0; done < len;) {
		ssize_t w = ucma_os.pwrite(fd, buf + done, len - done, (off_t)(off + done));

		if (w <= 0) {
			if (w < 0 && errno == EINTR)
				continue;
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

/*
 * The copy of [@off, @off + @len) of an area the child did not inherit
 * (madvise(MADV_DOFORK) failed in the parent, at vm.max_map_count say),
 * read frame by frame through the parent's file, which the child still
 * has open unless the program closed it.  Returns 0, or -1 with errno
 * (EBADF: no file to read).
 */
static int child_copy_from_file(const struct ucma_cma_area *area, const struct child_area *c,
				uint64_t off, size_t len)
{
	static char bounce[1 << 16];	/* address space only, until a fork needs it */
	const struct ucma_frames *f = area->frames;

	while (len) {
		uint64_t in_frame = off % f->frame_size, file_off;
		size_t in_this = f->frame_size - in_frame;
		/* Once a frame: the look-up asks fstat() whether the
		 * descriptor is still the area's. */
		int fd = ucma_frames_file_of(area, (uint32_t)(off / f->frame_size), &file_off);

		if (fd < 0) {
			errno = EBADF;
			return -1;
		}
		file_off += in_frame;
		if (in_this > len)
			in_this = len;
		while (in_this) {
			size_t n = in_this < sizeof(bounce) ? in_this : sizeof(bounce);
			ssize_t r = ucma_os.pread(fd, bounce, n, (off_t)file_off);

			if (r <= 0) {
				if (r < 0 && errno == EINTR)
					continue;
				if (r == 0)
					errno = EIO;
				return -1;
			}
			if (c->scratch)
				memcpy(c->scratch + off, bounce, (size_t)r);
			else if (child_write(c->fd, bounce, (size_t)r, off) != 0)
				return -1;
			off += (uint64_t)r;
			file_off += (uint64_t)r;
			in_this -= (size_t)r;
			len -= (size_t)r;
		}
	}
	return 0;
}

/*
 * Copy pages [pfn, pfn + n) of an area, read through the mapping the child
 * inherited (the parent's frames, in the area's own order), into the
 * child's new file, or its scratch memory.  Returns 0 or -1.
 */
static int child_copy(struct ucma_arena *a, const struct ucma_cma_area *area,
		      const struct child_area *c, uint32_t pfn, uint32_t n)
{
	uint64_t off = (uint64_t)(pfn - area->base_pfn) << UCMA_PAGE_SHIFT;
	const char *from = ucma_pfn_to_addr(a, pfn);
	size_t len = (size_t)n << UCMA_PAGE_SHIFT;

	/*
	 * AddressSanitizer builds: a run claimed by a thread of the parent is
	 * unpoisoned by that thread after it drops the zone lock; a fork in
	 * between leaves it poisoned here, and that thread is not in the
	 * child to unpoison it.
	 */
	if (c->unshared)
		return child_copy_from_file(area, c, off, len);
	UCMA_UNPOISON((void *)from, len);
	if (c->scratch) {
		memcpy(c->scratch + off, from, len);
		return 0;
	}
	return child_write(c->fd, from, len, off);
}

/* Copy every allocated run of the CMA zone that lies in an area being
 * re-created.  Single-threaded (the child), so the walk needs no lock. */
static int child_copy_runs(struct ucma_arena *a, struct child_area *c)
{
	const struct ucma_zone *z = &a->zones[UCMA_ZONE_CMA];

	for (uint32_t pfn = z->start_pfn; pfn < z->end_pfn;) {
		const struct ucma_page *p = &a->pages[pfn];
		uint32_t n;

		/* Never used: nothing to copy, metadata not to be read (buddy.c). */
		if (ucma_pageblock_deferred(a, pfn)) {
			pfn = UCMA_ALIGN_DOWN(pfn, UCMA_PAGEBLOCK_PAGES) + UCMA_PAGEBLOCK_PAGES;
			continue;
		}
		if (p->kind == UCMA_PK_FREE) {
			pfn += 1u << p->order;
			continue;
		}
		if (p->kind != UCMA_PK_RUN) {
			pfn++;
			continue;
		}
		/* A run on a per-CPU list (pcp.c) is free: nothing of it to keep,
		 * and in AddressSanitizer builds it stays poisoned (copying
		 * unpoisoned it, so a stale write into it went unreported). */
		if (p->flags & UCMA_PF_PCP) {
			pfn += p->aux;
			continue;
		}
		/* A run may cross from one area into the next: piece by piece. */
		for (n = p->aux; n;) {
			struct ucma_cma_area *area = ucma_area_of_pfn(a, pfn);
			int k = (int)(area - a->areas);
			uint32_t piece = area->base_pfn + area->npages - pfn;

			if (piece > n)
				piece = n;
			if (c[k].copy && child_copy(a, area, &c[k], pfn, piece) != 0)
				return -1;
			pfn += piece;
			n -= piece;
		}
	}
	return 0;
}

/* The child's new file for an area, sized, or -1. */
static int child_file(const struct ucma_cma_area *area)
{
	char name[16 + UCMA_AREA_NAME_MAX];
	int fd;

	snprintf(name, sizeof(name), "ucma:%s", area->name);
	fd = ucma_os_fd_high(ucma_os.memfd_create(name, MFD_CLOEXEC));
	if (fd >= 0 && ucma_os.ftruncate(fd, (off_t)area->frames->size) != 0) {
		ucma_os_close(fd);
		fd = -1;
	}
	return fd;
}

/* Map private memory over an area of the child, or die: the child has no
 * memory there otherwise. */
static void child_map_anon(struct ucma_frames *f)
{
	if (ucma_os.mmap((void *)f->base, f->size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
			 0) == MAP_FAILED)
		ucma_fatal("fork: cannot map the CMA areas in the child: %s", strerror(errno));
}

/*
 * Give every area on a file a new file of the child's own (copying the
 * parent's allocated runs when asked), and fresh private memory to areas
 * without a file under UCMA_CMA_DONTFORK.  The copy reads the parent's
 * frames through the mapping the child inherited, not through the file
 * descriptor, which the program may have closed or reused; only an area
 * the child did not inherit is read through the file, when it is still
 * the area's (child_copy_from_file()).  Where no file
 * can be made the copy goes to private scratch memory moved into place.
 * Failing to copy is fatal: the child would otherwise read zeros where its
 * objects are.
 */
static void child_recreate(struct ucma_arena *a, bool copy)
{
	struct child_area c[UCMA_MAX_CMA_AREAS];
	bool shmem_thp = ucma_os_shmem_thp_available();
	int backing = UCMA_BACKING_NONE;

	for (int k = 0; k < a->nr_areas; k++) {
		struct ucma_frames *f = a->areas[k].frames;

		c[k] = (struct child_area){ false, false, -1, NULL };
		if (f->fd < 0)
			continue;
		c[k].copy = copy;
		c[k].unshared = fork_ctx.unshared >> k & 1;
		/* Strict overcommit: private memory, as at start-up
		 * (step_has_file()). */
		c[k].fd = ucma_os_overcommit_strict() ? -1 : child_file(&a->areas[k]);
		if (c[k].fd < 0 && copy) {
			c[k].scratch = ucma_os.mmap(NULL, f->size, PROT_READ | PROT_WRITE,
						    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
						    0);
			if (c[k].scratch == MAP_FAILED)
				ucma_fatal("fork: no memory to copy CMA area %s into the child: %s",
					   a->areas[k].name, strerror(errno));
		}
	}
	if (copy && child_copy_runs(a, c) != 0)
		ucma_fatal("fork: cannot copy the CMA areas into the child: %s", strerror(errno));
	for (int k = 0; k < a->nr_areas; k++) {
		struct ucma_frames *f = a->areas[k].frames;

		if (f->fd < 0) {
			if (ucma_opt.cma_dontfork)
				child_map_anon(f);
			backing = f->backing;
			continue;
		}
		/* The parent's descriptor, unless the program closed it and the
		 * number now names something else. */
		if (fd_ours(f))
			ucma_os_close(f->fd);
		f->fd = c[k].fd;
		f->phys_known = f->phys_order = false;
		f->sort_ns = 0;
		f->nr_lent = 0;
		f->phys_moved = 0;
		if (f->fd < 0) {
			if (c[k].scratch &&
			    ucma_os.mremap(c[k].scratch, f->size, f->size,
					   MREMAP_MAYMOVE | MREMAP_FIXED, (void *)f->base) == MAP_FAILED)
				ucma_fatal("fork: cannot move the copy of CMA area %s into place: %s",
					   a->areas[k].name, strerror(errno));
			if (!c[k].scratch)
				child_map_anon(f);
			f->kind = UCMA_FILE_ANON;
			f->backing = UCMA_BACKING_NONE;
			table_free(f);
			continue;
		}
		if (ucma_os.mmap((void *)f->base, f->size, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_FIXED, f->fd, 0) == MAP_FAILED)
			ucma_fatal("fork: cannot map CMA area %s in the child: %s",
				   a->areas[k].name, strerror(errno));
		file_identify(f);
		ucma_os.madvise((void *)f->base, f->size, MADV_DONTFORK);
		f->kind = UCMA_FILE_SHMEM;
		f->backing = shmem_thp && ucma_os.madvise((void *)f->base, f->size,
							  MADV_HUGEPAGE) == 0 ?
				     UCMA_BACKING_THP : UCMA_BACKING_NONE;
		if (f->frame_size != UCMA_PAGEBLOCK_SIZE) {
			table_free(f);
			if (table_alloc(f, UCMA_PAGEBLOCK_SIZE) != 0)
				ucma_fatal("fork: no memory for the frame table of CMA area %s",
					   a->areas[k].name);
		} else {
			table_identity(f);
		}
		backing = f->backing;
	}
	a->zones[UCMA_ZONE_CMA].backing = backing;
	a->zones[UCMA_ZONE_CMA].file_backed = any_file(a);
}

void ucma_frames_fork_child(void)
{
	struct ucma_arena *a = ucma_the_arena;

	if (fork_ctx.wait_rd >= 0)
		close(fork_ctx.wait_rd);
	if (a) {
		if (any_file(a) || ucma_opt.cma_dontfork)
			child_recreate(a, fork_ctx.copy);
		/* The child's devices know nothing yet: whatever the parent had
		 * registered is gone (UNMAP), the child's areas are new (MAP). */
		for (int k = 0; k < a->nr_areas; k++) {
			struct ucma_frames *f = a->areas[k].frames;

			if (f->announced)
				ucma_mem_event_post_replaced((void *)f->base, f->size);
		}
		for (int k = a->nr_areas - 1; k >= 0; k--)
			ucma_fork_unlock(&a->areas[k].frames->lock);
	}
	if (fork_ctx.wait_wr >= 0) {
		char done = 1;

		while (write(fork_ctx.wait_wr, &done, 1) < 0 && errno == EINTR)
			;
		close(fork_ctx.wait_wr);
	}
	fork_ctx_clear();
}

