#!/bin/sh
# heap_lend.sh - the ZONE_CMA experiment for an unmodified program: the
# same allocation-heavy C program (heap_lend_workload, linked against
# nothing of ucma) with glibc, and under libucma-preload.so with no
# reservation, with the CMA area reserved, lent to handles only, and lent
# to the heap.  The arena is the memory the workload may use, half of it
# the CMA area; the heap is larger than the other half.  The CMA area's
# frames are the reserve, counted in full whether used or not: 2 MiB
# hugetlb pages when run as root (the pool grown for the run under the
# tests' lock file, exactly those pages given back after), a shmem file
# (UCMA_HUGEPAGES=none) otherwise or with HL_BACKING=shmem.
# `make bench-heap-lend`.
#
# Environment: HL_HEAP_MB (192), HL_CMA_MB (128), HL_ROUNDS (20), HL_PASSES
# (40, churn passes of the timed phase), HL_BACKING (hugetlb or shmem).
#
# SPDX-License-Identifier: MIT
. "$(dirname "$0")/common.sh"
: "${HL_HEAP_MB:=192}" "${HL_CMA_MB:=128}" "${HL_ROUNDS:=20}"
export HL_HEAP_MB HL_CMA_MB HL_ROUNDS
bench_programs heap_lend heap_lend_workload
ARENA=$((HL_CMA_MB * 2))

# The reserve: hugetlb pages as root, a shmem file otherwise.
HP=/sys/kernel/mm/hugepages/hugepages-2048kB
: "${HL_BACKING:=$([ "$(id -u)" = 0 ] && [ -w $HP/nr_hugepages ] && echo hugetlb || echo shmem)}"
added=0
if [ "$HL_BACKING" = hugetlb ]; then
	# The lock the tests take around the pool (tests/testutil.h), held
	# by this shell until it exits.
	exec 9>/tmp/ucma-test-hugepages.lock
	flock 9
	want=$((HL_CMA_MB / 2 + 1))
	before=$(cat $HP/nr_hugepages)
	echo $((before + want)) >$HP/nr_hugepages 2>/dev/null
	added=$(($(cat $HP/nr_hugepages) - before))
	trap 'echo $(($(cat $HP/nr_hugepages) - added)) >$HP/nr_hugepages' EXIT
	trap 'exit 130' INT TERM
	if [ "$(cat $HP/free_hugepages)" -lt "$want" ]; then
		echo "heap_lend: the kernel gave fewer than $want free 2 MiB pages: shmem reserve" >&2
		HL_BACKING=shmem
	fi
fi
case $HL_BACKING in
hugetlb) BACK=2M ;;
shmem) BACK=none ;;
*) echo "heap_lend: HL_BACKING=$HL_BACKING: hugetlb or shmem" >&2; exit 1 ;;
esac

echo "heap_lend: heap ${HL_HEAP_MB} MiB, arena ${ARENA} MiB, CMA area ${HL_CMA_MB} MiB" \
	"($HL_BACKING), $HL_ROUNDS rounds of malloc(${HL_CMA_MB} MiB) = ucma_alloc of the whole area"
echo
echo "| run | run time s | heap MiB | lent to heap, peak MiB | reserve + anon MiB | contiguous ok | p50 / p99 ms | take-back ms (MiB copied) | memcpy ms (dst prefaulted / written) | take-back / memcpy (prefaulted / written) | stall p50 / p99 us | data intact |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for run in glibc none reserved lend-handles lend; do
	case $run in
	glibc) line=$(nice -n 10 "$W"); reserve=0 ;;
	none)
		line=$(nice -n 10 env LD_PRELOAD="$P" UCMA_ARENA_SIZE=${ARENA}M UCMA_CMA_SIZE=2M \
			UCMA_HUGEPAGES=$BACK UCMA_PRELOAD_CONTIG_MIN=${HL_CMA_MB}M "$W")
		reserve=2 ;;
	*)
		line=$(nice -n 10 env LD_PRELOAD="$P" UCMA_ARENA_SIZE=${ARENA}M \
			UCMA_CMA_SIZE=${HL_CMA_MB}M UCMA_HUGEPAGES=$BACK UCMA_CMA_POLICY=$run \
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

# Run times move by tens of percent between single runs on a shared
# machine: the comparison the goal is about (lend against no reservation)
# alternates the two HL_REPEAT times (5), timed phase only, and compares
# the medians.
: "${HL_REPEAT:=5}"
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
: >"${TMPDIR:-/tmp}/heap_lend.$$.none"
: >"${TMPDIR:-/tmp}/heap_lend.$$.lend"
i=0
while [ $i -lt "$HL_REPEAT" ]; do
	for run in none lend; do
		if [ $run = none ]; then cma=2M; pol=lend-handles; else cma=${HL_CMA_MB}M; pol=lend; fi
		line=$(HL_ROUNDS=0 nice -n 10 env LD_PRELOAD="$P" UCMA_ARENA_SIZE=${ARENA}M \
			UCMA_CMA_SIZE=$cma UCMA_HUGEPAGES=$BACK UCMA_CMA_POLICY=$pol "$W")
		field run_s "$line" >>"${TMPDIR:-/tmp}/heap_lend.$$.$run"
	done
	i=$((i + 1))
done
none_s=$(median <"${TMPDIR:-/tmp}/heap_lend.$$.none")
lend_s=$(median <"${TMPDIR:-/tmp}/heap_lend.$$.lend")
echo
echo "run time, median of $HL_REPEAT alternating runs: none $none_s s, lend $lend_s s," \
	"lend / none $(awk -v a="$lend_s" -v b="$none_s" 'BEGIN { printf "%.3f", (b > 0) ? a / b : 0 }')" \
	"(runs: none $(tr '\n' ' ' <"${TMPDIR:-/tmp}/heap_lend.$$.none")| lend $(tr '\n' ' ' <"${TMPDIR:-/tmp}/heap_lend.$$.lend"))"
rm -f "${TMPDIR:-/tmp}/heap_lend.$$.none" "${TMPDIR:-/tmp}/heap_lend.$$.lend"
