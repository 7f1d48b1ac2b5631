/*
 * preload_verbs.c - under libucma-preload.so with heap lending on, memory
 * registered for RDMA through libibverbs's functions leaves the CMA
 * frames lent to the heap before libibverbs gets it (preload/
 * device_guard.c): the device would otherwise read and write the frame
 * after a take-back gave it to ucma_alloc().  libibverbs is stood in for
 * by libfake_verbs (fake_verbs.c), which records whether the range lay on
 * a lent frame when it was called: no RDMA device is needed.  On-demand
 * paging regions, which pin nothing, a re-registration that keeps the
 * range, and a caller of libibverbs's first ABI (IBVERBS_1.0) leave the
 * memory lent.  A TAP program; preload_verbs.sh runs it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucma.h"
#include "tap.h"
#include "testutil.h"
#include "lent.h"
#include "fake_verbs.h"

#define BLOCK ((size_t)4 << 20)
#define PAGE ((size_t)4096)
#define MR_LEN (16 * PAGE)

/* <infiniband/verbs.h>'s values. */
#define ACCESS_LOCAL_WRITE 1
#define ACCESS_ON_DEMAND (1 << 6)
#define REREG_CHANGE_TRANSLATION 1
#define REREG_CHANGE_ACCESS 4

/* A fresh block wholly on lent frames holding pattern @seed, or NULL
 * (diagnosed; kept to the end). */
static char *lent_block(uint64_t seed)
{
	char *b = malloc(BLOCK);

	if (!b)
		return NULL;
	tu_fill(b, BLOCK, seed);
	for (size_t off = 0; off < BLOCK; off += PAGE)
		if (!tu_on_frame(b + off)) {
			diag("a fresh block at %p is not wholly on CMA frames", (void *)b);
			keep(b);
			return NULL;
		}
	keep(b);
	return b;
}

static bool any_on_frame(const char *b, size_t len)
{
	for (size_t off = 0; off < len; off += PAGE)
		if (tu_on_frame(b + off))
			return true;
	return false;
}

/* The last registration reached the stand-in as @fn, its range off the
 * frames then and now, the block's data intact. */
static bool taken_back(const char *fn, const char *b, uint64_t seed)
{
	return b && strcmp(fake_verbs_last.fn, fn) == 0 && fake_verbs_last.addr == b &&
	       !fake_verbs_last.on_frame && !any_on_frame(b, MR_LEN) && tu_check(b, BLOCK, seed);
}

/* ... or reached it with its range still lent. */
static bool left_lent(const char *fn, const char *b)
{
	return b && strcmp(fake_verbs_last.fn, fn) == 0 && fake_verbs_last.addr == b &&
	       fake_verbs_last.on_frame && tu_on_frame(b);
}

int main(void)
{
	struct ibv_mr *(*reg_mr_1_0)(struct ibv_pd *, void *, size_t, int);
	char *b[7];
	struct ibv_mr *mr;
	int rc;

	lent_cma_size();
	b[0] = malloc(BLOCK);
	lent_require(b[0]);
	free(b[0]);
	plan_no_plan();
	for (int i = 0; i < 7; i++)
		b[i] = lent_block(100 + (uint64_t)i);

	mr = b[0] ? ibv_reg_mr(NULL, b[0], MR_LEN, ACCESS_LOCAL_WRITE) : NULL;
	ok(mr && taken_back("ibv_reg_mr", b[0], 100),
	   "ibv_reg_mr() of a lent block: off the frames before libibverbs gets it");
	mr = b[1] ? ibv_reg_mr_iova(NULL, b[1], MR_LEN, 0x1000, ACCESS_LOCAL_WRITE) : NULL;
	ok(mr && taken_back("ibv_reg_mr_iova", b[1], 101), "ibv_reg_mr_iova() the same");
	mr = b[2] ? ibv_reg_mr_iova2(NULL, b[2], MR_LEN, 0x1000, ACCESS_LOCAL_WRITE) : NULL;
	ok(mr && taken_back("ibv_reg_mr_iova2", b[2], 102), "ibv_reg_mr_iova2() the same");
	rc = b[3] ? ibv_rereg_mr(mr, REREG_CHANGE_TRANSLATION, NULL, b[3], MR_LEN,
				 ACCESS_LOCAL_WRITE) : -1;
	ok(rc == 0 && taken_back("ibv_rereg_mr", b[3], 103),
	   "ibv_rereg_mr() to a lent range (IBV_REREG_MR_CHANGE_TRANSLATION) the same");

	rc = b[4] ? ibv_rereg_mr(mr, REREG_CHANGE_ACCESS, NULL, b[4], MR_LEN,
				 ACCESS_LOCAL_WRITE) : -1;
	ok(rc == 0 && left_lent("ibv_rereg_mr", b[4]),
	   "ibv_rereg_mr() of the access only: the range it is given is not the region's, "
	   "left lent");
	mr = b[5] ? ibv_reg_mr(NULL, b[5], MR_LEN, ACCESS_LOCAL_WRITE | ACCESS_ON_DEMAND) : NULL;
	ok(mr && left_lent("ibv_reg_mr", b[5]),
	   "an on-demand paging region (IBV_ACCESS_ON_DEMAND) pins nothing: left lent");

	reg_mr_1_0 = (struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, int))
		dlvsym(RTLD_DEFAULT, "ibv_reg_mr", "IBVERBS_1.0");
	mr = reg_mr_1_0 && b[6] ? reg_mr_1_0(NULL, b[6], MR_LEN, ACCESS_LOCAL_WRITE) : NULL;
	ok(mr && left_lent("ibv_reg_mr@IBVERBS_1.0", b[6]),
	   "libibverbs's first ABI (ibv_reg_mr@IBVERBS_1.0) is not interposed: its "
	   "structures differ");

	/* Registered memory stays off the frames: ucma_alloc() of the whole
	 * area takes back what is still lent, and the registered blocks keep
	 * their data where they are. */
	{
		void *area = ucma_alloc(cma_size, 0, 0);

		ok(area && tu_check(b[0], BLOCK, 100) && tu_check(b[3], BLOCK, 103) &&
			   tu_check(b[6], BLOCK, 106),
		   "after ucma_alloc() of the whole area, every block keeps its data");
		ucma_release(area);
	}
	free_kept();
	return done();
}
