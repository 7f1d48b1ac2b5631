#!/bin/sh
# preload_verbs.sh - memory registered for RDMA leaves the CMA frames lent
# to the heap: runs preload_verbs (a TAP program, linked to a stand-in for
# libibverbs) under libucma-preload.so with a small arena whose CMA area
# the heap borrows (UCMA_CMA_POLICY=lend).
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

run_lent preload_verbs
