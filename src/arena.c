/*
 * arena.c - the reservation: one virtually contiguous range holding the
 * NORMAL zone followed by the CMA zone (the CMA areas, back to back), its
 * out-of-band page and pageblock metadata, backing and NUMA placement.
 *
 * Reservation: a PROT_NONE, MAP_NORESERVE mapping with alignment slack is
 * taken first, so the address range is ours and costs nothing; each zone
 * is then mapped over its part with MAP_FIXED and the backing chosen for
 * it.  A small program pays only for what it touches.
 *
 * Backing (DESIGN.md): the CMA areas are files that frames.c creates and
 * maps, following the chain hugetlb 1 GiB, hugetlb 2 MiB, transparent huge
 * pages, plain pages (where the heap borrows their frames, lend.c, shmem
 * files of plain pages come before private transparent huge pages).  The NORMAL zone is private memory on the same chain
 * (map_zone_chain() here), trying each step only when it can work
 * (hugetlb reserves at mmap, so the pool must have enough free pages; a
 * refused mapping falls through to the next step); it uses THP unless
 * UCMA_HUGEPAGES_NORMAL asks otherwise, from the moment its heap reaches
 * 16 MiB (plain pages before).  Falling back is never an error; the mode
 * in effect is reported.
 *
 * Metadata lives in separate anonymous mappings (MAP_NORESERVE, touched
 * lazily): 16 bytes per page and 10 per pageblock, so a buffer overflow in
 * the arena cannot corrupt the allocator.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "frames.h"
#include "lend.h"
#include "extent.h"
#include "pcp.h"
#include "node.h"

#include <errno.h>
#include <numaif.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>

/* The arena lives in static storage: creating it must not call malloc. */
static struct ucma_arena the_arena_storage;

const char *ucma_backing_str(int backing)
{
	switch (backing) {
	case UCMA_BACKING_HUGETLB_1G: return "hugetlb-1G";
	case UCMA_BACKING_HUGETLB_2M: return "hugetlb-2M";
	case UCMA_BACKING_THP: return "thp";
	case UCMA_BACKING_NONE: return "none";
	default: return "auto";
	}
}

static void *map_anon(size_t len)
{
	void *p = ucma_os.mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* The extent notes, then the levels of pageblocks with room (extent.h). */
static size_t extents_size(const struct ucma_arena *a)
{
	return UCMA_ALIGN_UP((size_t)a->nr_pageblocks * sizeof(struct ucma_extent_note) +
				     UCMA_EXTENT_ROWS * UCMA_EXTENT_LEVEL_WORDS(a) * sizeof(uint64_t),
			     UCMA_PAGE_SIZE);
}

/*
 * Map [addr, addr + len) of the reservation with one backing.  Returns 0,
 * or -1 when this backing is not possible here (the caller falls back).
 */
static int map_zone(void *addr, size_t len, int backing)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE;
	void *p;

	switch (backing) {
	case UCMA_BACKING_HUGETLB_1G:
		if (len % UCMA_HUGE_1G || (uintptr_t)addr % UCMA_HUGE_1G)
			return -1;
		if (ucma_os_hugetlb_free_pages(UCMA_HUGE_1G) < (long)(len / UCMA_HUGE_1G))
			return -1;
		flags = (flags & ~MAP_NORESERVE) | MAP_HUGETLB | MAP_HUGE_1GB;
		break;
	case UCMA_BACKING_HUGETLB_2M:
		if (ucma_os_hugetlb_free_pages(UCMA_PAGEBLOCK_SIZE) <
		    (long)(len / UCMA_PAGEBLOCK_SIZE))
			return -1;
		flags = (flags & ~MAP_NORESERVE) | MAP_HUGETLB | MAP_HUGE_2MB;
		break;
	case UCMA_BACKING_THP:
		if (!ucma_os_thp_available())
			return -1;
		break;
	default:
		break;
	}
	/*
	 * MAP_FIXED over our own PROT_NONE reservation: nothing else can be
	 * there.  A refused hugetlb mapping leaves the reservation intact.
	 */
	p = ucma_os.mmap(addr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	if (backing == UCMA_BACKING_THP && ucma_os.madvise(addr, len, MADV_HUGEPAGE) != 0) {
		/* Still usable memory, just not huge: report it as plain. */
		return 1;
	}
	return 0;
}

/* Map a zone, walking the fallback chain from @want; returns the backing
 * in effect. */
static int map_zone_chain(void *addr, size_t len, int want)
{
	static const int chain[] = { UCMA_BACKING_HUGETLB_1G, UCMA_BACKING_HUGETLB_2M,
				     UCMA_BACKING_THP, UCMA_BACKING_NONE };
	size_t i = 0;

	if (want != UCMA_BACKING_AUTO) {
		while (i < UCMA_ARRAY_SIZE(chain) && chain[i] != want)
			i++;
	}
	for (; i < UCMA_ARRAY_SIZE(chain); i++) {
		int rc = map_zone(addr, len, chain[i]);

		if (rc == 0)
			return chain[i];
		if (rc == 1)
			return UCMA_BACKING_NONE;
	}
	return -1;
}

/*
 * A backing asked for by name that this machine could not give.  The
 * fallback is the design (hugetlb pools come and go), and silent by
 * default, since a preloaded setting reaches every process of a script;
 * UCMA_STRICT=1 asks to hear of settings not honoured, so it says so.
 */
static void report_fallback(const struct ucma_options *o, const char *var, int want, int got)
{
	if (!o->strict || want == UCMA_BACKING_AUTO || want == got)
		return;
	ucma_log("%s=%s: not available here, %s instead (UCMA_VERBOSE=1 says why)", var,
		 ucma_backing_str(want), ucma_backing_str(got));
}

/*
 * UCMA_POPULATE: fault the arena's memory in now, a piece at a time, and
 * stop while the kernel still has memory to give: an arena larger than
 * what is free (UCMA_ARENA_SIZE=1T), or than the memory cgroup allows (a
 * container), would otherwise end in the OOM killer.
 * Pieces on hugetlb pages, reserved at mmap() time, cost nothing of what
 * MemAvailable counts, so they pass.
 */
#define POPULATE_PIECE   ((size_t)64 << 20)
#define POPULATE_SPARE   ((uint64_t)256 << 20)	/* left to the rest of the system */

size_t ucma_arena_span(const struct ucma_options *o)
{
	return o->arena_size +
	       (ucma_lend_wants_frames(o) && ucma_frames_expect_lendable(o) ? o->cma_size : 0);
}

uint64_t ucma_populate_short(size_t len)
{
	uint64_t avail = ucma_os_mem_available();

	return avail && avail < len + POPULATE_SPARE ? avail : 0;
}

static bool populate_arena(struct ucma_arena *a, size_t len)
{
	size_t done = 0;

	while (done < len) {
		size_t n = len - done < POPULATE_PIECE ? len - done : POPULATE_PIECE;
		uint64_t avail = ucma_populate_short(n);

		if (avail) {
			ucma_log("UCMA_POPULATE: stopped after %zu of %zu MiB: %llu MiB available "
				 "(MemAvailable, or the memory cgroup's limit less its use where "
				 "that is less; UCMA_ARENA_SIZE is larger than what can be "
				 "prefaulted)", done >> 20, len >> 20,
				 (unsigned long long)(avail >> 20));
			return false;
		}
		if (ucma_os.madvise((void *)(a->base + done), n, MADV_POPULATE_WRITE) != 0) {
			ucma_log("UCMA_POPULATE: could not prefault the arena: %s",
				 strerror(errno));
			return false;
		}
		done += n;
	}
	return true;
}

/* NUMA placement of a mapping; failures are reported, not fatal. */
static void place(struct ucma_arena *a, void *addr, size_t len, int node)
{
	unsigned long mask[16] = { 0 };	/* up to 1024 nodes, no allocation */
	int maxnode, mode;

	if (node == UCMA_NODE_DEFAULT || (maxnode = ucma_node_max()) < 0)
		return;
	if (maxnode >= (int)(sizeof(mask) * 8))
		maxnode = (int)(sizeof(mask) * 8) - 1;
	if (node == UCMA_NODE_INTERLEAVE) {
		for (int n = 0; n <= maxnode; n++)
			mask[n / 64] |= 1ul << (n % 64);
		mode = MPOL_INTERLEAVE;
	} else {
		if (node == UCMA_NODE_LOCAL) {
			int cpu = sched_getcpu();

			node = cpu >= 0 ? ucma_node_of_cpu(cpu) : 0;
			if (node < 0)
				node = 0;
		}
		if (node > maxnode) {
			ucma_log("UCMA_NODE=%d: no such node (0..%d); placement left to the kernel",
				 node, maxnode);
			return;
		}
		mask[node / 64] |= 1ul << (node % 64);
		mode = MPOL_PREFERRED;
	}
	if (ucma_os.mbind(addr, len, mode, mask, (unsigned long)maxnode + 2, 0) != 0)
		ucma_log("mbind of the arena failed (%s); placement left to the kernel",
			 strerror(errno));
	else
		a->node = node;
}

static void init_zone(struct ucma_arena *a, int id, uint32_t start, uint32_t end, int backing)
{
	struct ucma_zone *z = &a->zones[id];
	int mt = id == UCMA_ZONE_CMA ? UCMA_MT_CMA : UCMA_MT_MOVABLE;

	pthread_mutex_init(&z->lock, NULL);
	pthread_mutex_init(&z->compact_lock, NULL);
	pthread_mutex_init(&z->purge.lock, NULL);
	z->arena = a;
	z->id = id;
	z->name = id == UCMA_ZONE_CMA ? "cma" : "normal";
	z->start_pfn = start;
	z->end_pfn = end;
	z->backing = backing;
	z->managed_pages = end - start;
	z->compact_cached_migrate_pfn = start;
	z->compact_cached_free_pfn = end;
	z->compact_order_failed = UCMA_MAX_ORDER + 1;
	for (uint32_t b = start >> UCMA_PAGEBLOCK_ORDER; b < end >> UCMA_PAGEBLOCK_ORDER; b++) {
		a->blocks[b].mt = (uint8_t)mt;
		a->blocks[b].saved_mt = (uint8_t)mt;
		a->blocks[b].zone = (uint8_t)id;
	}
	ucma_buddy_init_zone(z);
	/* Without its per-CPU lists a zone works, on its lock alone. */
	if (ucma_pcp_init(z) != 0 && ucma_opt.verbose)
		ucma_log("zone %s: no per-CPU page lists: %s", z->name, strerror(errno));
}

/* The NUMA placement in effect for a CMA area mapped again (frames.c). */
static int cma_place_node;

static void place_cma(struct ucma_arena *a, void *addr, size_t len)
{
	place(a, addr, len, cma_place_node);
}

/* Names, geometry and bitmaps of the CMA areas, from @pfn on. */
static int init_areas(struct ucma_arena *a, const struct ucma_options *o, uint32_t pfn)
{
	int n = o->nr_areas;

	for (int i = 0; i < (n ? n : 1); i++) {
		struct ucma_cma_area *area = &a->areas[i];
		size_t size = n ? o->areas[i].size : o->cma_size;
		size_t bitmap_bytes;

		strncpy(area->name, n ? o->areas[i].name : "default", UCMA_AREA_NAME_MAX - 1);
		area->base_pfn = pfn;
		area->npages = (uint32_t)(size >> UCMA_PAGE_SHIFT);
		pthread_mutex_init(&area->lock, NULL);
		bitmap_bytes = UCMA_ALIGN_UP((size_t)area->npages, 64) / 8;
		area->bitmap = map_anon(UCMA_ALIGN_UP(bitmap_bytes, UCMA_PAGE_SIZE));
		if (!area->bitmap)
			return -1;
		pfn += area->npages;
		a->nr_areas = i + 1;
	}
	return 0;
}

/**
 * ucma_arena_create() - reserve and map the arena described by @o.
 *
 * Return: 0 and the arena in *@out, or -1 with errno ENOMEM (the address
 * space or the metadata could not be mapped) or EINVAL (bad geometry).
 */
int ucma_arena_create(const struct ucma_options *o, struct ucma_arena **out)
{
	struct ucma_arena *a = &the_arena_storage;
	size_t cma_size = o->cma_size, normal_size, own_size, heap_window, cma_align;
	bool populated;
	uintptr_t res;
	int cma_backing, normal_backing;

	if (o->arena_size < 2 * UCMA_PAGEBLOCK_SIZE || o->arena_size % UCMA_PAGEBLOCK_SIZE ||
	    cma_size % UCMA_PAGEBLOCK_SIZE || cma_size >= o->arena_size) {
		errno = EINVAL;
		return -1;
	}
	/*
	 * Lending to the heap: the NORMAL zone's address range is the whole
	 * arena size, not what the CMA areas leave of it, so that the heap
	 * can grow onto as much as they lend.  Otherwise a heap larger than
	 * arena - CMA overflows to mappings of its own beside the reserve:
	 * lending would only change which frames back NORMAL's pageblocks,
	 * not give the heap more room.
	 * The window is address space: its pageblocks cost nothing until
	 * the heap uses them, lent frames first (zone.c).  Where the areas
	 * will have no frames to lend (private memory, 1 GiB pages), NORMAL
	 * keeps what they leave, as without lending.
	 */
	own_size = o->arena_size - cma_size;
	heap_window = ucma_arena_span(o) - o->arena_size;
	normal_size = own_size + heap_window;
	if (((o->arena_size + heap_window) >> UCMA_PAGE_SHIFT) >= UCMA_PFN_NONE) {
		errno = EINVAL;
		return -1;
	}
	memset(a, 0, sizeof(*a));
	/* A 1 GiB-backed CMA zone must start on a 1 GiB boundary. */
	cma_align = (o->hugepages == UCMA_BACKING_AUTO || o->hugepages == UCMA_BACKING_HUGETLB_1G) &&
				    cma_size && cma_size % UCMA_HUGE_1G == 0 ?
			    UCMA_HUGE_1G : UCMA_PAGEBLOCK_SIZE;
	/* So must a 1 GiB-backed NORMAL zone: with normal_size a multiple of
	 * 1 GiB, aligning the CMA zone aligns the base too. */
	if (o->hugepages_normal == UCMA_BACKING_HUGETLB_1G && normal_size % UCMA_HUGE_1G == 0)
		cma_align = UCMA_HUGE_1G;
	a->reservation_size = o->arena_size + heap_window + cma_align;
	a->reservation = ucma_os.mmap(NULL, a->reservation_size, PROT_NONE,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a->reservation == MAP_FAILED) {
		a->reservation = NULL;
		errno = ENOMEM;
		return -1;
	}
	res = (uintptr_t)a->reservation;
	a->base = UCMA_ALIGN_UP(res + normal_size, cma_align) - normal_size;
	if (a->base < res)
		a->base += cma_align;
	a->size = o->arena_size + heap_window;
	a->npages = (uint32_t)(a->size >> UCMA_PAGE_SHIFT);
	a->nr_pageblocks = a->npages >> UCMA_PAGEBLOCK_ORDER;
	a->node = UCMA_NODE_DEFAULT;

	a->pages = map_anon((size_t)a->npages * sizeof(struct ucma_page));
	a->blocks = map_anon(UCMA_ALIGN_UP((size_t)a->nr_pageblocks * sizeof(struct ucma_pageblock),
					   UCMA_PAGE_SIZE));
	a->extents = map_anon(extents_size(a));
	if (!a->pages || !a->blocks || !a->extents)
		goto nomem;
	a->free_levels = (uint64_t *)(a->extents + a->nr_pageblocks);
	/* The page metadata is touched 4 KiB at a time as the heap grows
	 * (buddy.c: deferred pageblocks); where THP is "always", a touch
	 * would fault in 2 MiB of it.  A refusal costs only that memory. */
	ucma_os.madvise(a->pages, (size_t)a->npages * sizeof(struct ucma_page), MADV_NOHUGEPAGE);

	normal_backing = map_zone_chain((void *)a->base, normal_size,
					o->hugepages_normal == UCMA_BACKING_AUTO ?
						UCMA_BACKING_THP : o->hugepages_normal);
	if (normal_backing < 0)
		goto nomem;
	if (cma_size && (init_areas(a, o, (uint32_t)(normal_size >> UCMA_PAGE_SHIFT)) != 0 ||
			 ucma_frames_map_areas(a, o) != 0))
		goto nomem;
	/* Placement before any page is allocated: hugetlb files are
	 * allocated whole right after, where the policy says. */
	place(a, (void *)a->base, a->size, o->node);
	/* Not the heap window: lent frames are to back it, and lending takes
	 * only pageblocks that have no memory behind them yet. */
	populated = o->populate && (!own_size || populate_arena(a, own_size));

	init_zone(a, UCMA_ZONE_NORMAL, 0, (uint32_t)(normal_size >> UCMA_PAGE_SHIFT),
		  normal_backing);
	init_zone(a, UCMA_ZONE_CMA, (uint32_t)(normal_size >> UCMA_PAGE_SHIFT), a->npages,
		  UCMA_BACKING_NONE);
	/* Their clean pages are mapped (until a purge): zone.c does not
	 * populate them again for migration copies. */
	a->zones[UCMA_ZONE_NORMAL].prefaulted = populated;
	a->zones[UCMA_ZONE_CMA].prefaulted = populated;
	cma_backing = UCMA_BACKING_NONE;
	if (cma_size) {
		cma_place_node = o->node;
		cma_backing = ucma_frames_allocate(a, place_cma);
		if (cma_backing < 0)
			goto nomem;
		a->zones[UCMA_ZONE_CMA].backing = cma_backing;
	}
	/*
	 * NORMAL on THP starts on plain pages (also where THP is "always") and
	 * asks for huge ones when the heap grows (zone.c, UCMA_THP_GROW_PAGES):
	 * a small program keeps a small footprint.
	 */
	if (normal_backing == UCMA_BACKING_THP &&
	    ucma_os.madvise((void *)a->base, normal_size, MADV_NOHUGEPAGE) == 0)
		a->zones[UCMA_ZONE_NORMAL].thp_deferred = true;
	ucma_arena_poison(a, true);
	report_fallback(o, "UCMA_HUGEPAGES_NORMAL", o->hugepages_normal, normal_backing);
	if (cma_size)
		report_fallback(o, "UCMA_HUGEPAGES", o->hugepages, cma_backing);
	if (o->verbose)
		ucma_log("arena %p: %zu MiB, normal %zu MiB (%s; %zu MiB of it the heap's window "
			 "onto lent frames), cma %zu MiB (%s), %d area(s)",
			 (void *)a->base, a->size >> 20, normal_size >> 20,
			 ucma_backing_str(normal_backing), heap_window >> 20, cma_size >> 20,
			 ucma_backing_str(cma_backing), a->nr_areas);
	ucma_lend_init(a, o);
	ucma_frames_announce(a);
	*out = a;
	return 0;
nomem:
	ucma_arena_destroy(a);
	errno = ENOMEM;
	return -1;
}

void ucma_arena_destroy(struct ucma_arena *a)
{
	if (!a)
		return;
	if (a->base)
		ucma_arena_poison(a, false);
	ucma_lend_fini(a);
	for (int z = 0; z < UCMA_ZONE_NR; z++)
		ucma_pcp_fini(&a->zones[z]);
	ucma_frames_unmap_areas(a);
	for (int i = 0; i < a->nr_areas; i++) {
		size_t bytes = UCMA_ALIGN_UP((size_t)a->areas[i].npages, 64) / 8;

		if (a->areas[i].bitmap)
			ucma_os.munmap(a->areas[i].bitmap, UCMA_ALIGN_UP(bytes, UCMA_PAGE_SIZE));
	}
	if (a->pages)
		ucma_os.munmap(a->pages, (size_t)a->npages * sizeof(struct ucma_page));
	if (a->blocks)
		ucma_os.munmap(a->blocks,
			       UCMA_ALIGN_UP((size_t)a->nr_pageblocks * sizeof(struct ucma_pageblock),
					     UCMA_PAGE_SIZE));
	if (a->extents)
		ucma_os.munmap(a->extents, extents_size(a));
	if (a->reservation)
		ucma_os.munmap(a->reservation, a->reservation_size);
	memset(a, 0, sizeof(*a));
}

struct ucma_cma_area *ucma_area_find(struct ucma_arena *a, const char *name)
{
	for (int i = 0; i < a->nr_areas; i++)
		if (strcmp(a->areas[i].name, name) == 0)
			return &a->areas[i];
	return NULL;
}

struct ucma_cma_area *ucma_area_of_pfn(struct ucma_arena *a, uint32_t pfn)
{
	for (int i = 0; i < a->nr_areas; i++)
		if (pfn >= a->areas[i].base_pfn && pfn - a->areas[i].base_pfn < a->areas[i].npages)
			return &a->areas[i];
	return NULL;
}

/**
 * ucma_backing_name() - the backing in effect for "normal", "cma" or the
 * name of a CMA area (which share the CMA zone's backing).
 */
const char *ucma_backing_name(const char *zone)
{
	struct ucma_arena *a;

	if (!zone) {
		errno = EINVAL;
		return NULL;
	}
	a = ucma_arena_get();
	if (!a)
		return NULL;
	if (strcmp(zone, "normal") == 0)
		return ucma_backing_str(a->zones[UCMA_ZONE_NORMAL].backing);
	if (strcmp(zone, "cma") == 0 || ucma_area_find(a, zone))
		return ucma_backing_str(a->zones[UCMA_ZONE_CMA].backing);
	errno = ENOENT;
	return NULL;
}
