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
	UCMA_CMA_LEND = 0,	/* CMA areas serve movable objects while free */
	UCMA_CMA_RESERVED	/* CMA areas serve ucma_alloc() only */
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
	int node;			/* node number or UCMA_NODE_* */
	int populate;			/* prefault the arena at start-up */
	int strict;			/* refuse to start on a bad value */
	int cma_dontfork;		/* MADV_DONTFORK on the CMA areas */
	int cma_policy;			/* enum ucma_cma_policy */
	int reserved[8];		/* must be zero */
};

/**
 * ucma_init() - initialise the library explicitly.
 * @cfg: the configuration, or NULL to read the UCMA_* environment.
 *
 * The library also initialises itself on first use, from the environment.
 * Return: 0; -1 with errno EINVAL for a bad configuration, EBUSY when the
 * library is already initialised with another configuration, ENOMEM when
 * the arena cannot be reserved.
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
 * Return: 0, or -1 with errno EINVAL when @ptr is not such a buffer.
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
 * Return: 0, or -1 with errno EINVAL (not mapped), EPERM (frame numbers
 * hidden from this process), ENOTSUP (no pagemap).
 */
int ucma_virt2phys(const void *ptr, uint64_t *phys);

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

/* ---------------------------------------------------------------------------
 * Compaction
 * ------------------------------------------------------------------------- */

enum ucma_compact_priority {
	UCMA_COMPACT_ASYNC = 0,		/* background: skip pinned, honour hints */
	UCMA_COMPACT_SYNC_LIGHT = 1,
	UCMA_COMPACT_SYNC_FULL = 2	/* whole zone, ignore hints, wait for pins */
};

int ucma_compact(int prio);
int ucma_compact_order(unsigned order, int prio);

/* ---------------------------------------------------------------------------
 * General-purpose (unmovable) allocation
 * ------------------------------------------------------------------------- */

void *ucma_malloc(size_t size);
void *ucma_calloc(size_t nmemb, size_t size);
void *ucma_realloc(void *ptr, size_t size);
void *ucma_aligned_alloc(size_t alignment, size_t size);
void ucma_free(void *ptr);
size_t ucma_usable_size(const void *ptr);
int ucma_trim(void);

/**
 * ucma_owns() - does @ptr come from ucma's malloc family (ucma_malloc() and
 * friends, in the arena or in its overflow mappings)?
 * Return: 1 if so, 0 otherwise (including NULL).
 */
int ucma_owns(const void *ptr);

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

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* UCMA_H */
