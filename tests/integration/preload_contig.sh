#!/bin/sh
# preload_contig.sh - UCMA_PRELOAD_CONTIG_MIN: large malloc, calloc and
# growing realloc requests of a preloaded program become contiguous buffers
# of a CMA area, and free, realloc and malloc_usable_size recognise them.
# The threshold comes from UCMA_CONF, its key in mixed case: config.c
# matches the keys in any case, and the preload library must read it so
# (preload_python.sh sets UCMA_PRELOAD_CONTIG_MIN itself).
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_CONF UCMA_CMA_AREAS UCMA_PRELOAD_CONTIG_MIN
timeout -k 10 "$TIMEOUT" env \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	UCMA_CONF=Preload_Contig_MIN=1M UCMA_ARENA_SIZE=256M UCMA_CMA_SIZE=64M UCMA_DECAY_MS=0 \
	"$IT_BIN/preload_check" contig
exit $?
