#!/bin/sh
# preload_contig.sh - UCMA_PRELOAD_CONTIG_MIN: large malloc, calloc and
# growing realloc requests of a preloaded program become contiguous buffers
# of a CMA area, and free, realloc and malloc_usable_size recognise them.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_CONF UCMA_CMA_AREAS
timeout -k 10 "$TIMEOUT" env \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	UCMA_PRELOAD_CONTIG_MIN=1M UCMA_ARENA_SIZE=256M UCMA_CMA_SIZE=64M \
	"$IT_BIN/preload_check" contig
exit $?
