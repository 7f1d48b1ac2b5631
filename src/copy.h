/*
 * copy.h - copying a migrated object to its new place (copy.c): around
 * the caches, and for a large object with helper threads copying parts
 * of it beside the migrating thread.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_COPY_H
#define UCMA_COPY_H

#include "internal.h"

/*
 * Objects from a split size on are cut into pieces of at least
 * UCMA_COPY_PIECE that the helper threads (UCMA_COPY_HELPERS) copy beside
 * the caller; smaller ones are copied by the caller alone.  The split size
 * is the caller's: UCMA_COPY_SPLIT_MIN for a migration made on its own
 * (ucma_alloc() clearing its run, a long-term pin), the lower
 * UCMA_COPY_SPLIT_MIN_COMPACT for a compaction that a thread waits for,
 * which moves its objects back to back (copy.c says why each).
 */
#define UCMA_COPY_PIECE			(16u << 10)
#define UCMA_COPY_SPLIT_MIN		(256u << 10)
#define UCMA_COPY_SPLIT_MIN_COMPACT	(64u << 10)
/* Most helper threads a process may have. */
#define UCMA_COPY_HELPERS_MAX	8u

/*
 * ucma_copy_object() - copy @n bytes from @src to @dst, which do not
 * overlap, for a migration: nobody writes @src meanwhile (the object is
 * held MIGRATING) and nobody reads @dst before the caller publishes it
 * (with a release store: every store of the copy, the helpers' too, is
 * ordered before it).  The helpers take part when @n is @split_min or
 * more (see above).  Never fails: a copy that finds no helper (none
 * configured or started, another migration has them, a fork took them
 * away) is made by the caller alone.
 *
 * Locking: none taken.  One copy at a time has the helpers: a flag taken
 * with a compare-and-swap, never waited for.
 */
UCMA_INTERNAL void ucma_copy_object(void *dst, const void *src, size_t n, size_t split_min);

/*
 * ucma_copy_prepare() - start the helper threads now if a copy of @n
 * bytes at @split_min would use them and they are not started yet.  A
 * mover calls it before it holds the object's entry (migrate.c): creating
 * a thread may allocate (glibc's pthread_create() allocates the thread's
 * TLS with the preloaded calloc()), and a fork that holds the malloc
 * family's locks waits for every hold to end (fork.c, handle.c).
 */
UCMA_INTERNAL void ucma_copy_prepare(size_t n, size_t split_min);

/* fork.c's stage: the child has no helper threads; it starts its own
 * on demand. */
UCMA_INTERNAL void ucma_copy_fork_child(void);

/* How many helper threads run now. */
UCMA_INTERNAL unsigned ucma_copy_helpers_running(void);

#ifdef UCMA_TEST_HOOKS
/* Test builds: a helper sleeps this long before each piece it copies, so
 * that an owner that did not wait for its helpers would be caught. */
UCMA_INTERNAL extern _Atomic uint64_t ucma_copy_test_helper_delay_ns;
/* Test builds: when not 0, the count of threads running or runnable the
 * owners' look for a free CPU sees instead of the system's; below 0, it
 * finds a free CPU always. */
UCMA_INTERNAL extern _Atomic long ucma_copy_test_runnable;
#endif

#endif
