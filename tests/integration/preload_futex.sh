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

run_lent preload_futex
