#!/bin/sh
# preload_verbs_dl.sh - a libibverbs loaded by dlopen() without
# RTLD_GLOBAL still registers memory under libucma-preload.so, its range
# taken back first: runs preload_verbs_dl (a TAP program) with the
# stand-in libibverbs's path, under the preload library with a small
# arena whose CMA area the heap borrows.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_PRELOAD_CONTIG_MIN UCMA_CONF
timeout -k 10 "$TIMEOUT" env \
	UCMA_ARENA_SIZE=96M UCMA_CMA_SIZE=32M UCMA_CMA_POLICY=lend UCMA_HUGEPAGES=none \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	"$IT_BIN/preload_verbs_dl" "$IT_BIN/.libs/libfake_verbs.so"
exit $?
