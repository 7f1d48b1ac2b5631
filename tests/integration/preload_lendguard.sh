#!/bin/sh
# preload_lendguard.sh - a program closing descriptors wholesale leaves the
# library's userfaultfd and CMA area files alone: runs preload_lendguard (a
# TAP program) under libucma-preload.so with a small arena whose CMA area
# the heap borrows (UCMA_CMA_POLICY=lend).
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

run_lent preload_lendguard
