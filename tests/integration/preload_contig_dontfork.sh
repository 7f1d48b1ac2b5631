#!/bin/sh
# preload_contig_dontfork.sh - UCMA_PRELOAD_CONTIG_MIN together with
# UCMA_CMA_DONTFORK=1: large requests stay in the malloc family, so that a
# child of fork() (which gets empty CMA areas) still has them.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_CONF UCMA_CMA_AREAS
timeout -k 10 "$TIMEOUT" env \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	UCMA_PRELOAD_CONTIG_MIN=1M UCMA_CMA_DONTFORK=1 UCMA_ARENA_SIZE=256M UCMA_CMA_SIZE=64M \
	"$IT_BIN/preload_check" contig_dontfork 2>/dev/null
exit $?
