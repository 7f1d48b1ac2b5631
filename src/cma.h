/*
 * cma.h - the CMA areas (cma.c): each a named range of the CMA zone with
 * a bitmap of the pages ucma_alloc() has claimed (the kernel's struct
 * cma), and the record of every allocation and release in flight there.
 *
 * Included by internal.h, where struct ucma_arena holds the areas.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_CMA_H
#define UCMA_CMA_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define UCMA_MAX_CMA_AREAS 16
#define UCMA_AREA_NAME_MAX 32

struct ucma_frames;
struct ucma_arena;

/*
 * struct ucma_cma_op - an allocation or a release in flight in an area,
 * on its caller's stack.  Neither takes one lock from start to end (a
 * migration in between waits for readers), so a fork() can come in the
 * middle, and the child, which does not have the calling thread, would
 * keep what the thread had half done: pageblocks isolated for ever (their
 * free pages on no usable list), bits claimed that no buffer accounts
 * for, a run that no buffer is returned for.  The record says how far the
 * operation got, each part written under the lock that the change it
 * describes is made under, and every one of those locks is held across
 * fork() (init.c): the child finds each record exactly as far as the
 * change itself and finishes or undoes it (ucma_cma_fork_child_locked()).
 *
 * Locking: @next and the record's presence on the area's list: the area
 * lock, which is also the lock the bits are claimed and cleared under;
 * the record is on the list exactly while its bits are set and not yet
 * a counted buffer's.  @isolated and @run: once listed, the CMA zone
 * lock, under which isolation and its undo, and taking and freeing the
 * run, happen.  Everything is set before the record is listed.  The
 * thread is not cancelled while its record is listed: an allocation runs
 * with cancellation disabled, and a release meets no cancellation point.
 */
struct ucma_cma_op {
	struct ucma_cma_op *next;
	pid_t owner;		/* the thread doing it (its tid: a thread made with
				 * clone() alone has its creator's pthread_self()) */
	bool release;		/* a release (else an allocation) */
	uint32_t start, end;	/* the pfns whose bits are set */
	uint32_t iso_start, iso_end;	/* the pageblocks it isolates */
	bool isolated;		/* [iso_start, iso_end) isolated by it */
	bool run;		/* [start, end) is an allocated run */
};

/*
 * struct ucma_cma_area - a named range of the CMA zone with a bitmap of the
 * pages claimed by ucma_alloc() (the kernel's struct cma).  A set bit means
 * the page belongs to a contiguous allocation or is being claimed for one.
 * @lock protects the bitmap, the counters and the list of operations in
 * flight; it nests outside zone locks.
 */
struct ucma_cma_area {
	char name[UCMA_AREA_NAME_MAX];
	uint32_t base_pfn;		/* pageblock aligned */
	uint32_t npages;
	pthread_mutex_t lock;
	unsigned long *bitmap;		/* npages bits */
	uint64_t nr_allocated_pages;
	uint64_t nr_allocs;		/* live allocations */
	uint64_t alloc_success;
	uint64_t alloc_fail;
	struct ucma_cma_op *ops;	/* in flight (struct ucma_cma_op) */
	struct ucma_frames *frames;	/* its backing (frames.h); set once */
};

/*
 * In the child of a fork, every area and zone lock held: finish or undo
 * what threads the child does not have were doing in the areas (struct
 * ucma_cma_op), all but those of @forker, the tid in the parent of the
 * thread that forked.  init.c's child handler.
 */
UCMA_INTERNAL void ucma_cma_fork_child_locked(struct ucma_arena *a, pid_t forker);

#endif /* UCMA_CMA_H */
