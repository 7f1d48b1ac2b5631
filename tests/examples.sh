#!/bin/sh
# examples.sh - every example program builds (make did that) and runs.
# TAP output; run by `make check` from the build directory.
b=${top_builddir:-.}
n=0 failed=0
run() {
	what=$1; shift
	n=$((n + 1))
	if out=$(timeout 120 "$@" 2>&1); then
		echo "ok $n - $what"
	else
		echo "not ok $n - $what"
		echo "$out" | tail -20 | sed 's/^/# /'
		failed=$((failed + 1))
	fi
}
run "demo runs (fragment, map, compact, allocate)" env UCMASTAT="$b/ucmastat" "$b/examples/demo"
run "device_buffer reads a file into a contiguous buffer" "$b/examples/device_buffer"
run "phys_contig asks for 8 MiB physically contiguous (or says why not)" "$b/examples/phys_contig"
run "handles: pin/RCU reads while compaction runs" "$b/examples/handles"
run "numa places the arena on node 0" "$b/examples/numa" 0
if [ -n "${UCMA_TEST_SANITIZER:-}" ]; then
	n=$((n + 1)); echo "ok $n # SKIP preload example: the ${UCMA_TEST_SANITIZER} runtime owns malloc, LD_PRELOAD cannot replace it"
else
	run "preload example under LD_PRELOAD with UCMA_PRELOAD_CONTIG_MIN" \
		env LD_PRELOAD="$b/.libs/libucma-preload.so" UCMA_PRELOAD_CONTIG_MIN=1M \
		"$b/examples/preload"
fi
echo "1..$n"
[ "$failed" -eq 0 ]
