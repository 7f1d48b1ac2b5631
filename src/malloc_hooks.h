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

#endif /* UCMA_MALLOC_HOOKS_H */
