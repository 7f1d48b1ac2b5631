#!/bin/sh
# preload_futex.sh - threads sleeping on shared futex words in the heap
# (pthread_join() of a thread on a heap stack, process-shared mutexes,
# condition variables and semaphores, raw futex calls) are still woken
# after the heap's lent frames are taken back: runs preload_futex (a TAP
# program) under libucma-preload.so with a small arena whose CMA area the
# heap borrows (UCMA_CMA_POLICY=lend).
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_PRELOAD_CONTIG_MIN UCMA_CONF
timeout -k 10 "$TIMEOUT" env \
	UCMA_ARENA_SIZE=96M UCMA_CMA_SIZE=32M UCMA_CMA_POLICY=lend UCMA_HUGEPAGES=none \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	"$IT_BIN/preload_futex"
exit $?
