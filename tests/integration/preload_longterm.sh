#!/bin/sh
# preload_longterm.sh - malloc memory handed to mlock(), mlockall(),
# io_uring buffer registration or direct I/O (io_uring's included) leaves
# the CMA frames lent to the heap:
# runs preload_longterm (a TAP program) under libucma-preload.so with a
# small arena whose CMA area the heap borrows (UCMA_CMA_POLICY=lend).
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

run_lent preload_longterm
