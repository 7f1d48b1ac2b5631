#!/bin/sh
# preload_sighandler.sh - calls that take lent heap memory back, made from
# a signal handler that interrupted the allocator, are done or refused
# with EAGAIN, never stuck: runs preload_sighandler (a TAP program) under
# libucma-preload.so with a small arena whose CMA area the heap borrows
# (UCMA_CMA_POLICY=lend).
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

run_lent preload_sighandler
