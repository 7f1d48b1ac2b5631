/*
 * malloc_hooks.h - what the LD_PRELOAD interposer (preload/preload.c), which
 * is linked with the allocator, uses of malloc.c besides the public
 * interface of ucma.h.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_MALLOC_HOOKS_H
#define UCMA_MALLOC_HOOKS_H

#include "internal.h"

/*
 * ucma_free_or() - free @p if the malloc family owns it, else hand it to
 * @foreign_free (glibc's __libc_free() for blocks made before the
 * interposition took effect).  One look-up, as ucma_try_free(), but every
 * way out is a tail call, so free() needs no stack frame.  NULL is
 * ignored; errno is left alone.
 */
UCMA_INTERNAL void ucma_free_or(void *p, void (*foreign_free)(void *));

/*
 * ucma_realloc_or() - ucma_realloc(@p, @size) if the malloc family owns
 * @p, else @foreign_realloc(@p, @size): what ucma_owns() and then one of
 * the two would do, with the ownership test inlined and both ways out
 * tail calls, so that realloc()'s common case needs no stack frame of
 * its own.  @p is not NULL and @size not 0 (the caller's cases).
 */
UCMA_INTERNAL void *ucma_realloc_or(void *p, size_t size,
				    void *(*foreign_realloc)(void *, size_t));

#endif /* UCMA_MALLOC_HOOKS_H */
