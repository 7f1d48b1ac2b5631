#!/bin/sh
# preload_api.sh - the C allocation interface under libucma-preload.so:
# runs preload_check (a TAP program) with the preload library.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_PRELOAD_CONTIG_MIN UCMA_CONF
timeout -k 10 "$TIMEOUT" env \
	LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	"$IT_BIN/preload_check"
exit $?
