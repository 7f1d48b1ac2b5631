/*
 * ucma.h - the public interface of ucma, a contiguous memory allocator for
 * user processes.
 *
 * ucma reserves a hugepage-backed arena, splits it into a NORMAL zone and
 * named CMA areas, serves movable objects through handles, and relocates
 * them so that large contiguous buffers can be carved out on demand while
 * the memory reserved for them is lent to movable objects in between.
 * See ucma(7) for the concepts and every UCMA_* environment variable.
 *
 * Every function returns an error code or sets errno; none aborts on bad
 * arguments.  All functions are thread-safe.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_H
#define UCMA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; these names are its API. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define UCMA_VERSION_MAJOR 0
#define UCMA_VERSION_MINOR 1

/* ---------------------------------------------------------------------------
 * Initialisation and configuration
 * ------------------------------------------------------------------------- */

/* struct ucma_config.node: node n is UCMA_NODE_ID(n), so that 0 can keep
 * meaning "not set"; or one of the negative values below. */
#define UCMA_NODE_ID(n)      ((n) + 1)
/* UCMA_NODE values other than a node number. */
#define UCMA_NODE_DEFAULT    (-1)	/* no placement policy */
#define UCMA_NODE_LOCAL      (-2)	/* the node of the initialising thread */
#define UCMA_NODE_INTERLEAVE (-3)	/* interleave over all allowed nodes */

/* Backing modes (UCMA_HUGEPAGES, UCMA_HUGEPAGES_NORMAL). */
enum ucma_backing {
	UCMA_BACKING_AUTO = 0,	/* best available: 1G, then 2M, then THP, then plain */
	UCMA_BACKING_HUGETLB_1G,
	UCMA_BACKING_HUGETLB_2M,
	UCMA_BACKING_THP,
	UCMA_BACKING_NONE	/* plain 4 KiB pages */
};

/* CMA policy (UCMA_CMA_POLICY). */
enum ucma_cma_policy {
	UCMA_CMA_LEND = 0,	/* free CMA memory serves movable objects and, where
				 * the areas have 2 MiB frames on a file, the heap
				 * (the default); in struct ucma_config, 0 keeps
				 * UCMA_CMA_POLICY or the default */
	UCMA_CMA_RESERVED,	/* CMA areas serve ucma_alloc() only */
	UCMA_CMA_LEND_HANDLES	/* free CMA memory serves movable objects only */
};

/**
 * struct ucma_config - explicit configuration for ucma_init().
 *
 * A zero field means "the default" (or the environment's value when the
 * structure was filled by ucma_config_from_env()).  Sizes are in bytes.
 */
struct ucma_config {
	size_t arena_size;		/* whole arena, NORMAL + CMA */
	size_t cma_size;		/* CMA zone; ignored when cma_areas is set */
	const char *cma_areas;		/* "name:size,name:size" or NULL */
	int hugepages;			/* enum ucma_backing for the CMA areas */
	int hugepages_normal;		/* enum ucma_backing for NORMAL; 0 = THP */
	int node;			/* UCMA_NODE_ID(n) or UCMA_NODE_*; 0 = default */
	int populate;			/* prefault the arena at start-up */
	int strict;			/* refuse to start on a bad value */
	int cma_dontfork;		/* children of fork() get empty CMA areas */
	int cma_policy;			/* enum ucma_cma_policy */
	int reserved[8];		/* must be zero */
};

/**
 * ucma_init() - initialise the library explicitly.
 * @cfg: the configuration, or NULL to read the UCMA_* environment.
 *
 * The library also initialises itself on first use, from the environment.
 * Return: 0; -1 with errno EINVAL for a bad configuration, EBUSY when the
 * library already runs and @cfg is not NULL, ENOMEM when the arena cannot
 * be reserved.
 */
int ucma_init(const struct ucma_config *cfg);

/**
 * ucma_config_from_env() - fill @cfg from the UCMA_* environment.
 * Return: 0, or -1 with errno EINVAL when a value is bad and UCMA_STRICT=1.
 */
int ucma_config_from_env(struct ucma_config *cfg);

/**
 * ucma_backing_name() - the backing mode in effect for a zone.
 * @zone: "normal", "cma", or the name of a CMA area.
 * Return: "hugetlb-1G", "hugetlb-2M", "thp", "none", or NULL with errno.
 */
const char *ucma_backing_name(const char *zone);

/* ---------------------------------------------------------------------------
 * Contiguous allocations (cma_alloc-style)
 * ------------------------------------------------------------------------- */

#define UCMA_ALLOC_ZERO        0x01u	/* zero the buffer */
#define UCMA_ALLOC_POPULATE    0x02u	/* fault every page in now */
#define UCMA_ALLOC_MLOCK       0x04u	/* mlock the buffer */
#define UCMA_ALLOC_PHYS_CONTIG 0x08u	/* physically contiguous, or fail */
#define UCMA_ALLOC_NOWAIT      0x10u	/* no migration: only already free runs */

/**
 * ucma_alloc() - allocate a contiguous buffer from the default CMA area.
 * @size:  bytes, rounded up to whole pages.
 * @align: a power of two, 0 for page alignment; at most the area's size.
 * @flags: UCMA_ALLOC_*.
 *
 * Movable objects in the chosen run are migrated out of it first.
 * Return: the buffer, or NULL with errno EINVAL (bad size, alignment or
 * flags), ENOMEM (no run that large), EBUSY (every candidate run holds a
 * pinned object), ENOTSUP (PHYS_CONTIG without physical addresses),
 * EDEADLK (called inside ucma_read_lock() when migration would be needed).
 */
void *ucma_alloc(size_t size, size_t align, unsigned flags);

/** ucma_alloc_area() - as ucma_alloc(), from the named CMA area. */
void *ucma_alloc_area(const char *area, size_t size, size_t align, unsigned flags);

/**
 * ucma_release() - return a buffer from ucma_alloc() to its CMA area.
 * Return: 0, or -1 with errno EINVAL when @ptr is not such a buffer, or
 * munlock(2)'s errno for a UCMA_ALLOC_MLOCK buffer it could not unlock
 * (the buffer stays allocated).
 */
int ucma_release(void *ptr);

/**
 * ucma_alloc_size() - size in bytes of the buffer from ucma_alloc() that
 * starts at @ptr.
 * Return: the size (whole pages), or 0 with errno EINVAL for any other
 * pointer.
 */
size_t ucma_alloc_size(const void *ptr);

/**
 * ucma_virt2phys() - physical address of the byte at @ptr.
 * Return: 0, or -1 with errno EINVAL (no page present there yet), EPERM (frame numbers
 * hidden from this process), ENOTSUP (no pagemap).
 */
int ucma_virt2phys(const void *ptr, uint64_t *phys);

/**
 * ucma_vtophys() - physical address of the byte at @ptr and how many bytes
 * from it on are physically contiguous (SPDK's spdk_vtophys()).
 * @ptr:        an address in ucma's memory (the arena or its overflow).
 * @phys:       where to store the physical address.
 * @contig_len: where to store the number of bytes from @ptr on that are
 *              physically contiguous, up to the end of the CMA area or
 *              zone holding @ptr; may be NULL.
 *
 * Hugetlb frames of a CMA area are answered from the frame table without
 * a system call; other memory is read from /proc/self/pagemap at the call,
 * page by page as far as the run goes.  Never reports address 0.
 * Return: 0, or -1 with errno EINVAL (NULL @ptr or @phys, memory ucma does
 * not own, or no page present at @ptr yet), EPERM (frame numbers hidden
 * from this process: it needs CAP_SYS_ADMIN), ENOTSUP (no pagemap).
 */
int ucma_vtophys(const void *ptr, uint64_t *phys, size_t *contig_len);

/* ---------------------------------------------------------------------------
 * Memory events, for code that registers memory with a device
 * ------------------------------------------------------------------------- */

/*
 * The CMA areas are files that ucma maps itself (ucma(7), FRAMES).  Code
 * that registers memory with a device (ibv_reg_mr, VFIO_IOMMU_MAP_DMA,
 * cudaHostRegister) learns through these events which ranges are backed
 * and when a backing is about to go away or change, as with DPDK's
 * rte_mem_event_callback_register() and SPDK's memory map notifications.
 */
enum ucma_mem_event {
	UCMA_MEM_EVENT_MAP = 1,		/* the range is backed and may be registered */
	UCMA_MEM_EVENT_UNMAP = 2	/* the range is about to be unbacked or remapped:
					 * drop its registrations before returning */
};

/**
 * ucma_mem_event_register() - call @cb for every memory event from now on.
 * @name: a unique name, 1 to 63 bytes (copied).
 * @cb:   the callback: @ev, the range [@addr, @addr + @len), and @arg.
 * @arg:  passed to @cb.
 *
 * Before this returns, @cb is called with UCMA_MEM_EVENT_MAP for every
 * range mapped at this moment (a late registrant sees everything).
 * Callbacks run in the thread whose call changed the mapping (or the
 * registering thread, for the replay), one event at a time, in order,
 * with no ucma lock held.  A callback may call any ucma function except
 * ucma_mem_event_register(), ucma_mem_event_unregister() (both fail with
 * EDEADLK there) and ucma_init(); it must not fork() and must not wait for
 * a thread that registers, unregisters or delivers events.
 * Return: 0, or -1 with errno EINVAL (NULL or empty @name or @cb, @name too
 * long), EEXIST (@name is registered), ENOSPC (32 callbacks registered),
 * ENOMEM, EDEADLK (called from a callback).
 */
int ucma_mem_event_register(const char *name,
			    void (*cb)(enum ucma_mem_event ev, void *addr, size_t len, void *arg),
			    void *arg);

/**
 * ucma_mem_event_unregister() - stop calling the callback named @name.
 * When this returns, the callback is not running and is never called again.
 * Return: 0, or -1 with errno EINVAL (NULL @name), ENOENT (no such
 * callback), EDEADLK (called from a callback).
 */
int ucma_mem_event_unregister(const char *name);

/* ---------------------------------------------------------------------------
 * Movable objects and handles
 * ------------------------------------------------------------------------- */

typedef uint64_t ucma_handle_t;		/* 0 is never a valid handle */

#define UCMA_H_ZERO       0x01u		/* ucma_halloc(): zero the object */
#define UCMA_PIN_LONGTERM 0x01u		/* ucma_pin(): move out of CMA first */

ucma_handle_t ucma_halloc(size_t size, unsigned flags);
int ucma_hfree(ucma_handle_t h);
int ucma_hrealloc(ucma_handle_t h, size_t size);
size_t ucma_hsize(ucma_handle_t h);
void *ucma_pin(ucma_handle_t h, unsigned flags);
int ucma_unpin(ucma_handle_t h);
void ucma_read_lock(void);
void ucma_read_unlock(void);
const void *ucma_deref(ucma_handle_t h);
/* Address and size as one consistent pair, inside a read-side section:
 * ucma_hsize() and ucma_deref() called one after the other may straddle
 * an ucma_hrealloc() of another thread.  @size may be NULL. */
const void *ucma_deref_size(ucma_handle_t h, size_t *size);

/* ---------------------------------------------------------------------------
 * Compaction
 * ------------------------------------------------------------------------- */

/*
 * Compaction moves movable objects so that free memory collects in whole
 * 2 MiB pageblocks at the start of each zone, where ucma_alloc() looks
 * first.  The library compacts by itself (directly when a movable or
 * contiguous allocation fails, UCMA_COMPACT_DIRECT; in a background thread
 * started with the first movable or contiguous allocation, UCMA_COMPACT,
 * UCMA_COMPACT_INTERVAL_MS, UCMA_COMPACT_PROACTIVENESS); these calls are
 * for programs that know when a quiet moment comes.
 */
enum ucma_compact_priority {
	UCMA_COMPACT_ASYNC = 0,		/* background: skip pinned, honour hints, bounded */
	UCMA_COMPACT_SYNC_LIGHT = 1,	/* unbounded, honour hints, wait for one pin */
	UCMA_COMPACT_SYNC_FULL = 2	/* whole zone, ignore hints, wait for pins */
};

/**
 * ucma_compact() - compact every zone at priority @prio.
 * @prio: enum ucma_compact_priority.  ASYNC does a bounded amount of work
 *        per call, going on from where the last call stopped.
 *
 * Sparse movable slabs are emptied into fuller ones, then each zone is
 * compacted.  Returns once the memory freed is free (after a grace period
 * for readers of the old copies).
 * Return: 0, or -1 with errno EINVAL (unknown priority) or EDEADLK (called
 * inside ucma_read_lock()).
 */
int ucma_compact(int prio);

/**
 * ucma_compact_order() - compact until a free block of 2^@order pages
 * exists in some zone.
 * @order: 0 (a page) to 9 (a 2 MiB pageblock).
 * @prio:  enum ucma_compact_priority.
 *
 * A zone where compaction cannot help (too few free pages, or a
 * fragmentation index saying a failure is due to shortage, for orders
 * above 3) is left alone.
 * Return: 0 when such a block is free; -1 with errno EINVAL (@order above
 * 9, unknown priority), EDEADLK (inside ucma_read_lock()), ENOMEM (no
 * block of that order could be formed; an ASYNC call may have stopped
 * short, a SYNC_FULL one did what it could).
 */
int ucma_compact_order(unsigned order, int prio);

/* ---------------------------------------------------------------------------
 * General-purpose (unmovable) allocation
 * ------------------------------------------------------------------------- */

/*
 * The malloc family serves unmovable memory from the NORMAL zone: small
 * requests (up to 32 KiB) from size-class slabs through per-thread caches,
 * larger ones as exact runs of pages.  When the NORMAL zone is exhausted,
 * or the arena cannot be created, memory comes from plain mappings outside
 * the arena (counted as overflow_alloc), so these calls fail only where the
 * system allocator would.  Every block is aligned to 16 bytes.
 *
 * Corruption is not survivable: a double free, the free or realloc of a
 * pointer into an allocation or of one the family never returned, prints
 * one line naming the call and the address to standard error and aborts.
 * A small block counts as freed while it is parked in any thread's cache
 * or free in its slab, whichever thread freed it first, and a large block
 * while its pages are free.  Not detected: a second free after the block
 * was handed out again (it then frees the new owner's block), after the
 * program overwrote the block's second word following the first free
 * (the free marker), or racing the first free (or the block's move from
 * a cache to its slab) in another thread at the same moment.
 */

/*
 * The calls that hand out blocks carry the attributes glibc gives
 * malloc(): the block aliases nothing (malloc), the compiler knows its
 * size (alloc_size: _FORTIFY_SOURCE and -Warray-bounds check accesses
 * against it), and from GCC 11 on which call gives it back:
 * -Wmismatched-dealloc then warns of a block of ucma's given to free(),
 * glibc's in a program that is not preloaded.  They also tell it the
 * alignment GCC assumes of a malloc() block on x86-64, 8 bytes
 * (assume_aligned), though every block is aligned to 16: so the code
 * around the calls is what it is around malloc().  Told 16, GCC 12
 * expanded a short memset() of a new block with a loop of byte stores
 * for its tail, whose branches mispredict when the length varies: a
 * program that writes the head of each new block ran up to a third
 * slower than with 8 (tests/bench/RESULTS.md).  Elsewhere the header
 * states the blocks' true alignment, 16.
 * Neither ucma_realloc() nor ucma_try_free() is named a deallocator: a
 * failed realloc keeps the block, and ucma_try_free() takes any pointer
 * and frees only ucma's, so GCC would warn of correct uses after both.
 */
void ucma_free(void *ptr);
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define UCMA_MALLOC_ATTR __attribute__((__malloc__, __malloc__(ucma_free, 1)))
#elif defined(__GNUC__)
#define UCMA_MALLOC_ATTR __attribute__((__malloc__))
#else
#define UCMA_MALLOC_ATTR
#endif
#if defined(__GNUC__)
#define UCMA_ALLOC_SIZE(...) __attribute__((__alloc_size__(__VA_ARGS__)))
#if defined(__x86_64__)
#define UCMA_MALLOC_ALIGNED  __attribute__((__assume_aligned__(8)))
#else
#define UCMA_MALLOC_ALIGNED  __attribute__((__assume_aligned__(16)))
#endif
#define UCMA_ALLOC_ALIGN(i)  __attribute__((__alloc_align__(i)))
#else
#define UCMA_ALLOC_SIZE(...)
#define UCMA_MALLOC_ALIGNED
#define UCMA_ALLOC_ALIGN(i)
#endif

/**
 * ucma_malloc() - allocate @size bytes of unmovable memory.
 * @size: bytes; 0 returns a unique minimal block.
 * Return: the block, aligned to 16 bytes, or NULL with errno ENOMEM.
 */
void *ucma_malloc(size_t size) UCMA_MALLOC_ATTR UCMA_ALLOC_SIZE(1) UCMA_MALLOC_ALIGNED;

/**
 * ucma_calloc() - allocate a zeroed array of @nmemb elements of @size bytes.
 * Return: the block, or NULL with errno ENOMEM (also when @nmemb * @size
 * overflows).
 */
void *ucma_calloc(size_t nmemb, size_t size) UCMA_MALLOC_ATTR UCMA_ALLOC_SIZE(1, 2)
	UCMA_MALLOC_ALIGNED;

/**
 * ucma_realloc() - resize the block at @ptr to @size bytes.
 * @ptr:  a block of the malloc family, or NULL (then as ucma_malloc()).
 * @size: the new size; 0 frees @ptr and returns NULL, as glibc does.
 *
 * The block stays in place while @size fits its size class (or run of
 * pages) and does not shrink below half of it; otherwise it moves to the
 * class of @size, so growth in small steps copies only once per class.
 * Return: the block (contents kept up to the smaller size), or NULL with
 * errno ENOMEM, leaving @ptr untouched.
 */
void *ucma_realloc(void *ptr, size_t size) UCMA_ALLOC_SIZE(2) UCMA_MALLOC_ALIGNED;

/**
 * ucma_aligned_alloc() - allocate @size bytes aligned to @alignment.
 * @alignment: a power of two; anything up to the size of the address space
 *             (alignments up to 4 KiB come from size classes that are
 *             multiples of them; larger ones are page runs).
 * Return: the block, or NULL with errno EINVAL (@alignment is no power of
 * two) or ENOMEM.
 */
void *ucma_aligned_alloc(size_t alignment, size_t size) UCMA_MALLOC_ATTR UCMA_ALLOC_SIZE(2)
	UCMA_ALLOC_ALIGN(1) UCMA_MALLOC_ALIGNED;

/**
 * ucma_posix_memalign() - as posix_memalign(): store a block of @size
 * bytes aligned to @alignment in *@memptr.
 * Return: 0; EINVAL when @alignment is no power of two or smaller than a
 * pointer (or @memptr is NULL); ENOMEM.  errno is left alone.
 */
int ucma_posix_memalign(void **memptr, size_t alignment, size_t size);

/**
 * ucma_memalign() - as glibc's memalign(): an alignment that is no power
 * of two is rounded up to the next one.
 * Return: the block, or NULL with errno EINVAL or ENOMEM.
 */
void *ucma_memalign(size_t alignment, size_t size) UCMA_MALLOC_ATTR UCMA_ALLOC_SIZE(2)
	UCMA_MALLOC_ALIGNED;

/**
 * ucma_free() - free a block of the malloc family.
 * @ptr: the block, or NULL (nothing happens).
 *
 * Aborts with a message for a double free, a pointer into a block, or a
 * pointer the family did not return (use ucma_owns() first when @ptr may
 * come from another allocator).  errno is left alone.
 */
void ucma_free(void *ptr);

/**
 * ucma_try_free() - free @ptr if it is ucma's, in one call: what
 * "if (ucma_owns(ptr)) ucma_free(ptr);" does, with one look-up instead of
 * two (the free of a preloaded program).
 * @ptr: any pointer, or NULL.
 * Return: 1 when @ptr was ucma's and is freed (or NULL), 0 when it is not
 * ucma's and nothing was done.  errno is left alone.
 */
int ucma_try_free(void *ptr);

/**
 * ucma_usable_size() - bytes usable in the block at @ptr (at least the
 * size requested).  The allocating calls tell the compiler the size asked
 * for (alloc_size), so a program built with _FORTIFY_SOURCE stops at a
 * write past it, as with glibc's malloc_usable_size(): to use the rest,
 * ask for it with ucma_realloc(ptr, ucma_usable_size(ptr)), which keeps
 * the block where it is.
 * Return: the size; 0 for NULL, and 0 with errno EINVAL for a pointer that
 * is no block of the malloc family or a block already freed.
 */
size_t ucma_usable_size(const void *ptr);

/**
 * ucma_trim() - give memory back: the calling thread's cache is flushed,
 * wholly free slabs go back to the page allocator, and the free pages of
 * the NORMAL zone are returned to the kernel at once (instead of after
 * UCMA_DECAY_MS).
 * Return: 1 if memory was released, 0 otherwise (as malloc_trim()).
 */
int ucma_trim(void);

/**
 * ucma_owns() - does @ptr come from ucma's malloc family (ucma_malloc() and
 * friends, in the arena or in its overflow mappings)?
 *
 * Any address in the arena counts except the live blocks of other kinds
 * (movable objects and their slabs, ucma_alloc() buffers), so that
 * ucma_free() reports a stale or bad pointer into the arena instead of
 * another allocator crashing on it.  Cheap: meant to be asked before every
 * free of a preloaded program.
 * Return: 1 if so, 0 otherwise (including NULL).
 */
int ucma_owns(const void *ptr);

/* ---------------------------------------------------------------------------
 * Heap lending (UCMA_CMA_POLICY=lend)
 * ------------------------------------------------------------------------- */

/*
 * With the policy "lend", a 2 MiB pageblock of the malloc heap may be
 * backed by an idle frame of a CMA area, and ucma_alloc() takes the frame
 * back by copying the heap's data to memory of its own at the same address
 * (ucma(7), "Heap lending").  Memory that a device or the kernel holds on to
 * (mlock(), io_uring fixed buffers, ibv_reg_mr(), cudaHostRegister()) must
 * not lie on a lent frame when it is registered: the kernel would go on
 * using the frame while ucma copies the data away.  The preloaded library
 * calls ucma_unlend() before mlock() and io_uring buffer registration
 * (ucma_unlend(3) lists what it cannot see); a program using the C API
 * calls it itself before registering malloc memory with a device.
 */

/**
 * ucma_unlend() - make sure no byte of [@addr, @addr + @len) lies on a CMA
 * frame lent to the heap.
 *
 * Every lent pageblock the range touches gets memory of its own first, at
 * the same address and with the same contents (threads writing there
 * meanwhile wait, readers do not).  Only wholly free pageblocks are ever
 * lent, so memory allocated now stays on its own memory while it lives.
 * Addresses outside the heap are no error: nothing is lent there.
 * A @len of 0 is no error.
 * Return: 0, or -1 with errno EINVAL (the range wraps),
 * EBUSY, ENOMEM or EMFILE (a pageblock could not be taken back: it stays
 * lent, so do not register it).
 */
int ucma_unlend(const void *addr, size_t len);

/**
 * ucma_unlend_all() - take back every frame lent to the heap, and lend none
 * from now on in this process (what mlockall() needs).
 * Return: 0, or -1 with errno as ucma_unlend() (lending stays off).
 */
int ucma_unlend_all(void);

/**
 * ucma_owns_fd() - is @fd a descriptor the library relies on: the file of
 * a CMA area, or the userfaultfd that takes lent frames back (kept for the
 * process's life)?  For a program that closes descriptors by means the
 * preloaded close(), close_range() and closefrom() do not see.  Async-
 * signal-safe.
 * Return: 1 if so, 0 otherwise.
 */
int ucma_owns_fd(int fd);

/**
 * struct ucma_malloc_info - the state of the malloc family, summed over all
 * threads (for mallinfo2()).
 */
struct ucma_malloc_info {
	size_t allocated;	/* usable bytes of live blocks */
	size_t active;		/* bytes of arena pages held: slabs and runs */
	size_t overflow;	/* bytes of blocks outside the arena (kept freed ones too) */
	size_t cached;		/* free bytes threads keep: parked, or in their slabs */
	uint64_t nmalloc;	/* blocks handed out so far */
	uint64_t nfree;		/* blocks freed so far */
	size_t large_allocs;	/* live page-run blocks */
	size_t reserved[5];
};

/**
 * ucma_malloc_info() - fill @info.
 * Return: 0, or -1 with errno EINVAL for NULL.
 */
int ucma_malloc_info(struct ucma_malloc_info *info);

/* ---------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------- */

/**
 * ucma_stat() - read one counter by its kernel-style name.
 * Return: 0, or -1 with errno ENOENT for an unknown name, EINVAL for NULL.
 */
int ucma_stat(const char *name, uint64_t *value);

/** ucma_stats_print() - the whole report, /proc/vmstat style, to @f. */
void ucma_stats_print(FILE *f);

/**
 * ucma_stats_refresh() - bring the live statistics that ucmastat(1) reads
 * up to date now.  The library refreshes them on its own (the compaction
 * thread on each wake-up, allocations at most every 100 ms); call this
 * before pointing ucmastat at a moment that matters.
 * Return: 0, or -1 with errno (EAGAIN: another thread's refresh did not
 * end; or why the segment in /dev/shm cannot be created).
 */
int ucma_stats_refresh(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* UCMA_H */
