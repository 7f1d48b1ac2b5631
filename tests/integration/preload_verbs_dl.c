/*
 * preload_verbs_dl.c - the stand-in libibverbs (fake_verbs.c) loaded by
 * dlopen() without RTLD_GLOBAL, as a plug-in linked to libibverbs or a
 * program that loads it itself does: its ibv_reg_mr_iova() calls
 * ibv_reg_mr_iova2() through its PLT, which binds to the preload library
 * (first in the global scope), and the preload library must then find
 * the stand-in's own definition to call, where RTLD_NEXT sees nothing.
 * The registration must succeed, its range off the lent frames.  A TAP
 * program; preload_verbs.sh runs it with the stand-in's path.
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

typedef struct ibv_mr *(*reg_mr_iova_fn)(struct ibv_pd *, void *, size_t, uint64_t, int);

int main(int argc, char **argv)
{
	const struct fake_verbs_call *last;
	reg_mr_iova_fn reg;
	struct ibv_mr *mr;
	bool off = true;
	void *h;
	char *b;

	lent_cma_size();
	if (argc < 2)
		bail_out("usage: preload_verbs_dl LIBFAKE_VERBS");
	b = malloc(BLOCK);
	lent_require(b);
	plan_no_plan();
	tu_fill(b, BLOCK, 7);
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	reg = h ? (reg_mr_iova_fn)dlvsym(h, "ibv_reg_mr_iova", "IBVERBS_1.7") : NULL;
	last = h ? dlsym(h, "fake_verbs_last") : NULL;
	if (!reg || !last)
		bail_out("%s: %s", argv[1], dlerror());
	errno = 0;
	mr = reg(NULL, b, MR_LEN, 0x1000, 1);
	for (size_t o = 0; o < MR_LEN; o += PAGE)
		off &= !tu_on_frame(b + o);
	ok(mr && strcmp(last->fn, "ibv_reg_mr_iova") == 0 && !last->on_frame && off &&
		   tu_check(b, BLOCK, 7),
	   "a libibverbs loaded with RTLD_LOCAL: its own call of ibv_reg_mr_iova2() goes "
	   "through the preload library, which takes the range back and finds libibverbs's "
	   "definition (%s)", mr ? "registered" : strerror(errno));
	dlclose(h);
	free(b);
	return done();
}
