#!/bin/sh
# preload_contig_small.sh - UCMA_PRELOAD_CONTIG_MIN below the largest size
# class (32 KiB): malloc()'s fast path takes only the requests below the
# threshold, so the small sizes at or above it become contiguous buffers
# and those below stay in the malloc family.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_CONF UCMA_CMA_AREAS UCMA_PRELOAD_CONTIG_MIN
timeout -k 10 "$TIMEOUT" env \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	UCMA_PRELOAD_CONTIG_MIN=8K UCMA_ARENA_SIZE=256M UCMA_CMA_SIZE=64M \
	"$IT_BIN/preload_check" contig_small
exit $?
