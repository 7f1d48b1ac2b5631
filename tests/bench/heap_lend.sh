#!/bin/sh
# heap_lend.sh - the ZONE_CMA experiment for an unmodified program: the
# same allocation-heavy C program (heap_lend_workload, linked against
# nothing of ucma) with glibc, and under libucma-preload.so with no
# reservation, with the CMA area reserved, lent to handles only, and lent
# to the heap.  The arena is the memory the workload may use, half of it
# the CMA area; the heap is larger than the other half.  The CMA area is a
# shmem file (UCMA_HUGEPAGES=none): its frames are the reserve, counted
# in full whether used or not.  `make bench-heap-lend`.
#
# Environment: HL_HEAP_MB (192), HL_CMA_MB (128), HL_ROUNDS (20), HL_PASSES
# (40, churn passes of the timed phase).
#
# SPDX-License-Identifier: MIT
: "${top_builddir:=.}"
: "${HL_HEAP_MB:=192}" "${HL_CMA_MB:=128}" "${HL_ROUNDS:=20}"
export HL_HEAP_MB HL_CMA_MB HL_ROUNDS
W=$top_builddir/tests/bench/heap_lend_workload
P=$(cd "$top_builddir" && pwd)/.libs/libucma-preload.so
ARENA=$((HL_CMA_MB * 2))
[ -x "$W" ] && [ -f "$P" ] || { echo "heap_lend: build $W and $P first" >&2; exit 1; }

field() {	# field KEY LINE
	echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

echo "heap_lend: heap ${HL_HEAP_MB} MiB, arena ${ARENA} MiB, CMA area ${HL_CMA_MB} MiB" \
	"(shmem), $HL_ROUNDS rounds of malloc(${HL_CMA_MB} MiB) = ucma_alloc of the whole area"
echo
echo "| run | run time s | heap MiB | lent to heap, peak MiB | reserve + anon MiB | contiguous ok | p50 / p99 ms | take-back ms (MiB copied) | memcpy ms (dst prefaulted / written) | take-back / memcpy (prefaulted / written) | stall p50 / p99 us | data intact |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for run in glibc none reserved lend-handles lend; do
	case $run in
	glibc) line=$(nice -n 10 "$W"); reserve=0 ;;
	none)
		line=$(nice -n 10 env LD_PRELOAD="$P" UCMA_ARENA_SIZE=${ARENA}M UCMA_CMA_SIZE=2M \
			UCMA_HUGEPAGES=none UCMA_PRELOAD_CONTIG_MIN=${HL_CMA_MB}M "$W")
		reserve=2 ;;
	*)
		line=$(nice -n 10 env LD_PRELOAD="$P" UCMA_ARENA_SIZE=${ARENA}M \
			UCMA_CMA_SIZE=${HL_CMA_MB}M UCMA_HUGEPAGES=none UCMA_CMA_POLICY=$run \
			UCMA_PRELOAD_CONTIG_MIN=${HL_CMA_MB}M "$W")
		reserve=$HL_CMA_MB ;;
	esac
	[ -n "$line" ] || { echo "| $run | failed |"; continue; }
	echo "| $run | $(field run_s "$line") | $(field heap_mib "$line") |" \
		"$(field lent_peak_mib "$line") | $((reserve + $(field rss_anon_mib "$line"))) |" \
		"$(field contig_ok "$line") |" \
		"$(field contig_p50_ms "$line") / $(field contig_p99_ms "$line") |" \
		"$(field take_back_ms "$line") ($(field copied_mib "$line")) |" \
		"$(field memcpy_ms "$line") / $(field memcpy_written_ms "$line") |" \
		"$(field take_back_vs_memcpy "$line") / $(field take_back_vs_memcpy_written "$line") |" \
		"$(field stall_p50_us "$line") / $(field stall_p99_us "$line") |" \
		"$(field intact "$line") |"
done
