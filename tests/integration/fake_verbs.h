/*
 * fake_verbs.h - the stand-in libibverbs of preload_verbs (fake_verbs.c):
 * its functions' prototypes, as <infiniband/verbs.h> gives them, and
 * what the last call saw.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_TEST_FAKE_VERBS_H
#define UCMA_TEST_FAKE_VERBS_H

#include <stddef.h>
#include <stdint.h>

struct ibv_pd;
struct ibv_mr;

struct fake_verbs_call {
	char fn[32];		/* which function, and version */
	const void *addr;
	size_t len;
	int access, flags;
	int on_frame;		/* a page of the range lay on a lent CMA frame */
};

extern struct fake_verbs_call fake_verbs_last;

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
			       int access);
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				unsigned access);
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
		 int access);

#endif /* UCMA_TEST_FAKE_VERBS_H */
