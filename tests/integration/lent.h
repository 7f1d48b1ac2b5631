/*
 * lent.h - what the preloaded heap-lending test programs share: the CMA
 * area the script configures, the check that the heap really borrows
 * frames here, and blocks kept to the end.  Include after tap.h and
 * testutil.h.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_TEST_LENT_H
#define UCMA_TEST_LENT_H

#include <stdint.h>
#include <stdlib.h>

#include "ucma.h"

/* The CMA area the script configures (UCMA_CMA_SIZE, "<n>M"). */
static size_t cma_size;

static inline uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	return ucma_stat(name, &v) == 0 ? v : UINT64_MAX;
}

/* Read UCMA_CMA_SIZE into cma_size; the whole test is skipped without it. */
static inline void lent_cma_size(void)
{
	const char *cma = getenv("UCMA_CMA_SIZE");

	cma_size = cma ? (size_t)strtoull(cma, NULL, 10) << 20 : 0;
	if (!cma_size)
		skip_all("UCMA_CMA_SIZE (in MiB) is not set");
}

/* The whole test is skipped unless @probe, a fresh block, lies on a CMA
 * frame lent to the heap. */
static inline void lent_require(const void *probe)
{
	if (!probe || !tu_on_frame(probe) || stat_of("lend_heap_pageblocks") == 0)
		skip_all("the heap borrows no CMA frames here (lending needs a userfaultfd "
			 "with write-protection: root, or vm.unprivileged_userfaultfd=1)");
}

/*
 * Blocks stay allocated until the end: a freed block is dirty memory the
 * heap hands out again as it is (only wholly free, clean pageblocks are
 * lent), so each case's malloc must break into fresh pageblocks.
 */
static char *kept[32] __attribute__((unused));
static int nkept __attribute__((unused));

static inline void keep(char *b)
{
	if (b && nkept < (int)(sizeof(kept) / sizeof(kept[0])))
		kept[nkept++] = b;
	else
		free(b);
}

static inline void free_kept(void)
{
	while (nkept)
		free(kept[--nkept]);
}

#endif /* UCMA_TEST_LENT_H */
