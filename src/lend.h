/*
 * lend.h - the CMA areas' idle frames backing the malloc heap, and taking
 * them back for ucma_alloc() (lend.c; DESIGN.md, "Frames and heap
 * lending").
 *
 * Glossary:
 *   borrowed pageblock  a 2 MiB pageblock of the NORMAL zone whose address
 *                       range maps a frame of a CMA area (MAP_SHARED from
 *                       the area's file) instead of private memory.
 *   lent pageblock      the CMA pageblock whose frame that is: an
 *                       allocated run of the CMA zone, owner UCMA_OWN_LENT,
 *                       owner = the borrowed pageblock's index.
 *   take back           give a borrowed pageblock private memory of its
 *                       own at the same address with the same contents
 *                       (userfaultfd write-protection holds writers while
 *                       the data is copied), then free the lent pageblock.
 *
 * The zone code (zone.c) decides when: a request of the malloc family that
 * would break into a fresh NORMAL pageblock (wholly free and clean, so no
 * memory is behind it yet) reserves a frame for it instead
 * (ucma_lend_reserve_locked(), under the NORMAL zone lock), and once no
 * lock is held ucma_lend_commit() maps the frame there.  ucma_alloc()
 * (cma.c) takes lent pageblocks back when it needs their frames; the
 * preloaded library does it before memory goes to mlock() or a device
 * (ucma_unlend(), ucma.h).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_LEND_H
#define UCMA_LEND_H

#include "internal.h"

/*
 * Before the arena is laid out (arena.c): may the heap borrow the CMA
 * areas' frames, if they have any?  True with UCMA_CMA_POLICY=lend, a
 * NORMAL zone of private memory, and a userfaultfd with write-protection
 * for shmem and hugetlbfs that this process may open (asked once,
 * cached).
 */
UCMA_INTERNAL bool ucma_lend_wants_frames(const struct ucma_options *o);

/* arena.c: once the zones and areas exist, switch lending on where it can
 * work (UCMA_VERBOSE says once why not); teardown forgets it. */
UCMA_INTERNAL void ucma_lend_init(struct ucma_arena *a, const struct ucma_options *o);
UCMA_INTERNAL void ucma_lend_fini(struct ucma_arena *a);

/*
 * zone.c, NORMAL zone lock held: NORMAL pageblock @pb is wholly free and
 * clean and an unmovable request is about to break into it.  Returns true
 * when a frame was reserved for it (a free CMA pageblock taken as a lent
 * run, its memory event posted); the caller then isolates @pb, drops its
 * locks and calls ucma_lend_commit().
 */
UCMA_INTERNAL bool ucma_lend_reserve_locked(struct ucma_arena *a, uint32_t pb);

/*
 * zone.c, no lock held: map the frame reserved for @pb there and end the
 * isolation of @pb.  Returns false when that failed (the pageblock stays
 * on private memory, counted as lend_heap_fallback).
 */
UCMA_INTERNAL bool ucma_lend_commit(struct ucma_arena *a, uint32_t pb);

/* Is NORMAL pageblock @pb borrowed, reserved or being taken back?  Any
 * lock or none (a look: only the NORMAL zone lock makes it final). */
UCMA_INTERNAL bool ucma_lend_borrowed(const struct ucma_arena *a, uint32_t pb);

/*
 * zone.c's purge, NORMAL zone lock held: borrowed pageblock @pb is wholly
 * free.  Give its frame back to its area without copying (private memory
 * is mapped there again, clean); nothing when @pb is reserved or being
 * taken back.
 */
UCMA_INTERNAL void ucma_lend_return_free_locked(struct ucma_zone *z, uint32_t pb);

/*
 * cma.c, no lock held: take back the lent run at CMA pfn @head.  Returns
 * an enum ucma_migrate_result: OK (freed, or gone meanwhile), PINNED
 * (reserved and not mapped yet, or the take-back failed: try later), NOMEM.
 */
UCMA_INTERNAL int ucma_lend_take_back_run(struct ucma_arena *a, uint32_t head);

/*
 * zone.c, for lending.  take_free_pageblock: see zone.c.  set_free_dirty:
 * wholly free pageblock @b of @z is (or is not) to be zeroed before use.
 * undo_isolate_locked, pages_free_locked: ucma_undo_isolate_range() of one
 * pageblock and ucma_pages_free(), the caller holding the zone lock (the
 * child of a fork, which holds them all).
 */
UCMA_INTERNAL uint32_t ucma_zone_take_free_pageblock(
	struct ucma_zone *z, bool (*usable)(const struct ucma_arena *a, uint32_t pfn),
	int owner_type, uint64_t owner, uint32_t prefer, unsigned grow, bool *dirty);
UCMA_INTERNAL void ucma_zone_set_free_dirty_locked(struct ucma_zone *z, uint32_t b, bool dirty);
UCMA_INTERNAL void ucma_undo_isolate_locked(struct ucma_zone *z, uint32_t b);
UCMA_INTERNAL void ucma_pages_free_locked(struct ucma_zone *z, uint32_t pfn);

/*
 * The library's descriptors, for the preloaded close(), close_range(),
 * closefrom(), dup2() and dup3() (preload/lend_guard.c):
 * owned_fds stores them in ascending order in @fds (room for
 * UCMA_LEND_MAX_FDS) and returns how many; any lock or none (they change
 * only at start-up, in the child of a fork, and by move_fd).
 * move_fd: if @fd is one of them, give it another number (from 256
 * on where one is free) and close @fd, so that
 * the program can put a descriptor of its own there.  Returns 0 (moved,
 * or not the library's), or -1 with errno (no free number: @fd stays).
 */
#define UCMA_LEND_MAX_FDS (UCMA_MAX_CMA_AREAS + 1)
UCMA_INTERNAL int ucma_lend_owned_fds(int *fds);
UCMA_INTERNAL int ucma_lend_move_fd(int fd);

/*
 * NORMAL pageblocks borrowed now (or being taken back); 0 whenever lending
 * is off.  ucma_lend_any_borrowed() is the one load with which the
 * preloaded interposers (preload/futex_guard.c) learn that nothing can be
 * on a frame: memory that is in use when it reads 0 never will be (only
 * wholly free pageblocks are lent).
 */
UCMA_INTERNAL extern _Atomic uint32_t ucma_lend_nr_borrowed;
/* How many times a pageblock was lent while none was: the preloaded
 * guards look at nothing while none is, so what they learnt before may
 * be stale (preload/dio_guard.c). */
UCMA_INTERNAL extern _Atomic uint32_t ucma_lend_epoch;

static inline bool ucma_lend_any_borrowed(void)
{
	return atomic_load_explicit(&ucma_lend_nr_borrowed, memory_order_acquire) != 0;
}

/*
 * A fork made without the fork handlers: the preloaded syscall() with
 * SYS_fork, or SYS_clone or SYS_clone3 without CLONE_VM, and the
 * preloaded clone() (preload/longterm.c).  Such a child gets nothing of
 * a borrowed pageblock (MADV_DONTFORK) and no fork handler copies it, so
 * prepare takes every borrowed pageblock back first and holds lend.lock,
 * with every signal blocked, until the fork is made: no frame is mapped
 * at the heap meanwhile.  Returns 0, or -1 with errno EAGAIN when a
 * pageblock could not be taken back (the fork must then be refused: the
 * child would fault on that memory).  After a prepare that returned 0,
 * exactly one of parent (the fork failed, or in the parent) and child
 * (in the child; @shared_files: it shares the parent's descriptor table,
 * CLONE_FILES) must follow.  The child lends nothing (its fork handlers
 * did not run: it has no CMA area mapped) and forgets the parent's
 * userfaultfd.
 */
UCMA_INTERNAL int ucma_lend_raw_fork_prepare(void);
UCMA_INTERNAL void ucma_lend_raw_fork_parent(void);
UCMA_INTERNAL void ucma_lend_raw_fork_child(bool shared_files);

/*
 * Does [@addr, @addr + @len) touch a borrowed pageblock (or one being
 * taken back)?  A look without a lock, for the preloaded interposers'
 * fast path: memory that is allocated when it says no never will be
 * lent (only wholly free pageblocks are).
 */
UCMA_INTERNAL bool ucma_lend_range_borrowed(const void *addr, size_t len);

/* Counted for the statistics (stats.c): pageblocks borrowed now. */
UCMA_INTERNAL uint64_t ucma_lend_borrowed_now(void);

#endif /* UCMA_LEND_H */
