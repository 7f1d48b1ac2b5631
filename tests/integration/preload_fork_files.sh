#!/bin/sh
# preload_fork_files.sh - a child of fork() under the preload library lets
# go of the parent's CMA area files and keeps only its own (areas of plain
# pages on shmem, lent to the heap).
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_CONF UCMA_CMA_AREAS UCMA_CMA_DONTFORK
timeout -k 10 "$TIMEOUT" env \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	UCMA_HUGEPAGES=none UCMA_ARENA_SIZE=256M UCMA_CMA_SIZE=64M \
	"$IT_BIN/preload_check" fork_files
exit $?
