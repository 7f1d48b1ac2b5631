/*
 * malloc_hooks.h - what the LD_PRELOAD interposer (preload/preload.c), which
 * is linked with the allocator, uses of malloc.c and cma.c besides the
 * public interface of ucma.h.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_MALLOC_HOOKS_H
#define UCMA_MALLOC_HOOKS_H

#include "internal.h"

/*
 * ucma_realloc_or() - ucma_realloc(@p, @size) if the malloc family owns
 * @p, else @foreign_realloc(@p, @size): what ucma_owns() and then one of
 * the two would do, with the ownership test inlined and both ways out
 * tail calls, so that realloc()'s common case needs no stack frame of
 * its own.  @p is not NULL and @size not 0 (the caller's cases).
 */
UCMA_INTERNAL void *ucma_realloc_or(void *p, size_t size,
				    void *(*foreign_realloc)(void *, size_t));

/*
 * ucma_addr_is_ours() - does @p lie in memory ucma manages (the arena with
 * its CMA areas, the overflow mappings, the bootstrap buffer), whatever is
 * there: a block of the malloc family, a movable object, a contiguous
 * buffer, free pages?  Such a pointer is never glibc's, so the interposer
 * hands it to ucma's checks (which name what it is) rather than to glibc
 * (which would crash on it or, worse, unmap part of the arena).
 */
UCMA_INTERNAL bool ucma_addr_is_ours(const void *p);

/*
 * ucma_alloc_for_malloc() - ucma_alloc(@size, 0, @flags), marked as made by
 * the interposer's malloc(): free() and realloc() take back such buffers
 * and no others (a buffer of the program's own ucma_alloc() call goes back
 * through ucma_release(), and free() of it is reported; ucma_release()
 * and ucma_alloc_size() refuse these).  NULL, said once, with
 * UCMA_CMA_DONTFORK=1, whose children get empty CMA areas.
 */
UCMA_INTERNAL void *ucma_alloc_for_malloc(size_t size, unsigned flags);

/*
 * ucma_malloc_contig_size() - the size of the buffer at @ptr if
 * ucma_alloc_for_malloc() made it and it is live, else 0.  errno is left
 * alone.
 */
UCMA_INTERNAL size_t ucma_malloc_contig_size(const void *ptr);

/*
 * ucma_release_for_malloc() - ucma_release() of a buffer that
 * ucma_alloc_for_malloc() made (ucma_release() refuses those, as it
 * refuses anything else that ucma_alloc() did not hand out).
 */
UCMA_INTERNAL int ucma_release_for_malloc(void *ptr);

/* Is @ptr inside a live contiguous buffer that ucma_alloc_for_malloc()
 * made?  For messages. */
UCMA_INTERNAL bool ucma_contig_from_malloc(const void *ptr);

#endif /* UCMA_MALLOC_HOOKS_H */
