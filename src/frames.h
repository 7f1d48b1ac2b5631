/*
 * frames.h - the frame layer: each CMA area is a file that ucma creates,
 * and ucma decides which page of that file (which frame) backs which
 * address of the area.
 *
 * Glossary:
 *   frame      one mapping unit of an area's file: a hugetlb page (2 MiB or
 *              1 GiB) of a hugetlb file, a pageblock (2 MiB) of a shmem
 *              file.  Frames are what ucma can map elsewhere (lend) and
 *              what it knows the physical address of.
 *   slot       the place of a frame in the area's virtual range: slot s
 *              covers [base + s * frame_size, base + (s + 1) * frame_size).
 *              With physical order the frame in slot s + 1 follows the
 *              frame in slot s in physical memory whenever any frame does.
 *   run        slots whose frames are physically consecutive: one range of
 *              physical memory mapped at one range of addresses.
 *
 * An area without a file (memfd_create refused, or private transparent
 * huge pages chosen because shmem gets none on this kernel) is mapped as
 * before, private and anonymous: it has no frames (nr_frames 0), the
 * kernel decides its physical pages, and the fork rule is the old one.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_FRAMES_H
#define UCMA_FRAMES_H

#include "internal.h"

/* What backs a CMA area (the cma_<area>_file statistic). */
enum ucma_frame_file {
	UCMA_FILE_ANON = 0,	/* no file: private anonymous memory */
	UCMA_FILE_SHMEM = 1,	/* memfd on shmem (huge pages where the kernel allows) */
	UCMA_FILE_HUGETLB = 2,	/* memfd with MFD_HUGETLB, pre-allocated from the pool */
};

#define UCMA_FRAME_LENT 0x1u	/* mapped elsewhere by its borrower (ucma_frames_set_lent) */

/*
 * struct ucma_frame - one slot of an area and the frame mapped there.
 * @phys is what pagemap said when the frame was last looked at: hugetlb
 * pages stay where they are unless the kernel migrates them (memory
 * hot-unplug, mbind with MPOL_MF_MOVE), so it is checked again before a
 * physically contiguous buffer is handed out.
 */
struct ucma_frame {
	uint64_t phys;			/* physical address of its first byte; 0: unknown */
	uint64_t file_off;		/* byte offset of the frame in the area's file */
	uint32_t run_end;		/* first slot after the run holding this slot */
	uint32_t flags;			/* UCMA_FRAME_* */
};

/*
 * struct ucma_frames - the backing of one CMA area.
 *
 * Locking: everything but the table's phys, run_end and flags and the
 * counters below them is set when the area is created (start-up, or the
 * child of a fork, both single-threaded) and read without a lock.  @lock
 * protects the rest; it nests inside the area lock and outside the
 * memory-event lock (memevent.c), and no other ucma lock is taken under it.
 */
struct ucma_frames {
	pthread_mutex_t lock;
	int fd;				/* the area's file; -1 without one */
	uint64_t file_dev, file_ino;	/* which file fd is (the program may close it) */
	int kind;			/* enum ucma_frame_file */
	int backing;			/* enum ucma_backing in effect */
	uintptr_t base;			/* the area's first byte */
	size_t size;			/* the area's bytes */
	size_t frame_size;		/* 0 without a file */
	uint32_t frame_pages;		/* frame_size in pages */
	uint32_t nr_frames;		/* 0 without a file */
	bool phys_known;		/* table[].phys was read (needs CAP_SYS_ADMIN) */
	bool phys_order;		/* frames were mapped sorted by physical address */
	bool announced;			/* a MAP event was posted for the area */
	uint64_t sort_ns;		/* time spent reading, sorting and remapping */
	struct ucma_frame *table;	/* nr_frames slots, meta.c memory */
	/* under @lock: */
	uint32_t longest_run;		/* slots in the longest run */
	uint32_t nr_lent;		/* slots flagged UCMA_FRAME_LENT */
	uint64_t phys_moved;		/* frames found moved when checked again */
};

/* The frames of @area (always set once the arena exists). */
static inline struct ucma_frames *ucma_area_frames(const struct ucma_cma_area *area)
{
	return area->frames;
}

/*
 * Before the arena is laid out (arena.c): will the CMA areas described by
 * @o have 2 MiB frames on a file, which heap lending can borrow?  Foreseen
 * from the hugetlb pools and the kernel's shmem settings as they are now;
 * ucma_frames_map_areas() makes the choice.
 */
UCMA_INTERNAL bool ucma_frames_expect_lendable(const struct ucma_options *o);

/*
 * arena.c: back every CMA area of @a (names, base_pfn and npages set, the
 * reservation PROT_NONE there), in two phases so the caller can apply the
 * arena's NUMA policy in between, before any page is allocated.
 *
 * map_areas walks the chain from @o->hugepages: hugetlb 1 GiB and 2 MiB
 * files (when every area is a multiple of the page, aligned to it, and the
 * pool has the free pages), a shmem file with huge pages where shmem gets
 * them (private transparent huge pages where it does not), a shmem file of
 * plain pages.  A step whose file cannot be made (memfd_create refused)
 * uses private memory of the same kind, as before frames existed; a step
 * the pool cannot hold is skipped.  Returns 0, or -1 with ENOMEM.
 *
 * allocate fallocates the hugetlb files, maps their frames in physical
 * order when pagemap shows frame numbers, populates what UCMA_POPULATE
 * asks for and applies MADV_DONTFORK; a step failing here is undone and
 * the next one is mapped, placed with @place and allocated.  Returns the
 * backing in effect for all areas, or -1 with ENOMEM.
 */
UCMA_INTERNAL int ucma_frames_map_areas(struct ucma_arena *a, const struct ucma_options *o);
UCMA_INTERNAL int ucma_frames_allocate(struct ucma_arena *a,
				       void (*place)(struct ucma_arena *a, void *addr, size_t len));
/* arena.c, once the arena is complete: post a MAP event per area. */
UCMA_INTERNAL void ucma_frames_announce(struct ucma_arena *a);
/* arena.c, teardown: UNMAP events (delivered before anything is unmapped),
 * then close the files and free the tables; the reservation stays. */
UCMA_INTERNAL void ucma_frames_unmap_areas(struct ucma_arena *a);
/* "hugetlb", "shmem" or "anonymous". */
UCMA_INTERNAL const char *ucma_frame_file_str(int kind);

/*
 * Physical contiguity from the table (cma.c, UCMA_ALLOC_PHYS_CONTIG).
 * by_table: does the table know the physical address of every frame of
 * @area, so that contiguity is read from it instead of probed?
 * table_run: of the @npages pages from page @off of the area, how many
 * lead a physically contiguous stretch (@npages: all of them), from the
 * table alone.  verify: the same, after reading the frames of that range
 * from pagemap again (a frame found elsewhere updates the table).
 */
UCMA_INTERNAL bool ucma_frames_by_table(struct ucma_cma_area *area);
UCMA_INTERNAL uint32_t ucma_frames_table_run(struct ucma_cma_area *area, uint32_t off,
					     uint32_t npages);
UCMA_INTERNAL uint32_t ucma_frames_verify(struct ucma_cma_area *area, uint32_t off,
					  uint32_t npages);

/* What the statistics report per area (stats.c). */
struct ucma_frames_stats {
	uint64_t kind;			/* enum ucma_frame_file */
	uint64_t frame_size;		/* bytes; 0 without a file */
	uint64_t nr_frames;
	uint64_t phys_run_max;		/* bytes of the longest run; 0: unknown */
	uint64_t phys_run_free;		/* bytes of the longest run of pages no buffer holds */
	uint64_t nr_lent;
	uint64_t sort_ns;
};
/* Fill @st for @area; the caller holds the area lock (the bitmap is read). */
UCMA_INTERNAL void ucma_frames_stats_locked(struct ucma_cma_area *area,
					    struct ucma_frames_stats *st);

/*
 * For the borrowers of frames (the heap, DESIGN.md "Heap lending").
 * map_at: map the frames of slots [@slot, @slot + @n) of @area at @addr,
 * MAP_SHARED | MAP_FIXED, read-write, MADV_DONTFORK, populated when
 * @populate; @addr must be aligned to the frame size and lie in a range
 * ucma reserved (whatever is mapped there is replaced).  Their own slots
 * keep mapping them too: taking a frame away from its slot (and from the
 * zone) is the borrower's job.  restore: map the frames of those slots at
 * their slots again.  set_lent: count slots as lent or given back.  All
 * return 0 or -1 with errno (EINVAL: no file, slots out of range, @addr
 * misaligned; EBADF: the program closed the file's descriptor; what mmap
 * said); map_at sets *@touched once it has mapped anything at @addr
 * (before that, a failure left @addr as it was).  None posts memory
 * events: the borrower
 * posts UNMAP before taking a range away and MAP after giving it back.
 */
UCMA_INTERNAL int ucma_frames_map_at(struct ucma_cma_area *area, uint32_t slot, uint32_t n,
				     void *addr, bool populate, bool *touched);
UCMA_INTERNAL int ucma_frames_restore(struct ucma_cma_area *area, uint32_t slot, uint32_t n);
UCMA_INTERNAL int ucma_frames_set_lent(struct ucma_cma_area *area, uint32_t slot, uint32_t n,
				       bool lent);

/*
 * The descriptor and byte offset of frame @slot in the area's file, for
 * reading it with pread() (the kernel copies from the page cache, touching
 * no mapping of the frame); -1 when the area has no file or the program
 * closed its descriptor or put another file under that number.
 */
UCMA_INTERNAL int ucma_frames_file_of(const struct ucma_cma_area *area, uint32_t slot,
				      uint64_t *off);

#endif /* UCMA_FRAMES_H */
