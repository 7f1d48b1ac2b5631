#!/bin/sh
# preload_longterm.sh - malloc memory handed to mlock(), mlockall() or
# io_uring buffer registration leaves the CMA frames lent to the heap:
# runs preload_longterm (a TAP program) under libucma-preload.so with a
# small arena whose CMA area the heap borrows (UCMA_CMA_POLICY=lend).
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_PRELOAD_CONTIG_MIN UCMA_CONF
timeout -k 10 "$TIMEOUT" env \
	UCMA_ARENA_SIZE=96M UCMA_CMA_SIZE=32M UCMA_CMA_POLICY=lend UCMA_HUGEPAGES=none \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	"$IT_BIN/preload_longterm"
exit $?
