/*
 * fake_verbs.c - a stand-in for libibverbs's memory registration, for
 * preload_verbs: the functions that preload/device_guard.c interposes,
 * under libibverbs's symbol versions (fake_verbs.map), each recording
 * what it was given and whether any page of the range lay on a CMA frame
 * lent to the heap when it was called.  No device is needed: what is
 * tested is that the preloaded library takes the range back before the
 * registration reaches libibverbs.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "fake_verbs.h"

struct fake_verbs_call fake_verbs_last;

/* The two versions of ibv_reg_mr (see the end of the file). */
struct ibv_mr *fake_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
struct ibv_mr *fake_reg_mr_1_0(struct ibv_pd *pd, void *addr, size_t len, int access);

/* The address returned for a registration: any non-NULL pointer will do,
 * nobody looks inside it. */
static char fake_mr[64];

static void record(const char *fn, const void *addr, size_t len, int access)
{
	memset(&fake_verbs_last, 0, sizeof(fake_verbs_last));
	snprintf(fake_verbs_last.fn, sizeof(fake_verbs_last.fn), "%s", fn);
	fake_verbs_last.addr = addr;
	fake_verbs_last.len = len;
	fake_verbs_last.access = access;
	for (size_t off = 0; addr && off < len; off += 4096)
		if (tu_on_frame((const char *)addr + off))
			fake_verbs_last.on_frame = 1;
}

struct ibv_mr *fake_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	(void)pd;
	record("ibv_reg_mr", addr, len, access);
	return (struct ibv_mr *)(void *)fake_mr;
}

struct ibv_mr *fake_reg_mr_1_0(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	(void)pd;
	record("ibv_reg_mr@IBVERBS_1.0", addr, len, access);
	return (struct ibv_mr *)(void *)fake_mr;
}

/* Through ibv_reg_mr_iova2() and the PLT, as libibverbs passes its
 * older entry points on to the newest: that call binds to the preload
 * library, which must find this library's ibv_reg_mr_iova2() next even
 * when this library was loaded by dlopen() without RTLD_GLOBAL. */
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
			       int access)
{
	struct ibv_mr *mr = ibv_reg_mr_iova2(pd, addr, len, iova, (unsigned)access);

	if (mr)
		record("ibv_reg_mr_iova", addr, len, access);
	return mr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				unsigned access)
{
	(void)pd;
	(void)iova;
	record("ibv_reg_mr_iova2", addr, len, (int)access);
	return (struct ibv_mr *)(void *)fake_mr;
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
		 int access)
{
	(void)mr;
	(void)pd;
	record("ibv_rereg_mr", addr, len, access);
	fake_verbs_last.flags = flags;
	return 0;
}

/* ibv_reg_mr in two versions, as libibverbs has it: the first ABI's and
 * the current default. */
__asm__(".symver fake_reg_mr_1_0, ibv_reg_mr@IBVERBS_1.0");
__asm__(".symver fake_reg_mr, ibv_reg_mr@@IBVERBS_1.1");
