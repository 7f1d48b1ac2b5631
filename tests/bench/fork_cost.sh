#!/bin/sh
# fork_cost.sh - what a fork costs a program under glibc's malloc,
# jemalloc, mimalloc, tcmalloc (each by LD_PRELOAD, where installed) and
# the ucma preload library: fork_cost in a process that never had a
# thread and in one that has, each allocator in the same run, with the
# ratio of the fork-and-wait time to glibc's.  Single-threaded rows are
# pinned to one CPU (BENCH_CPU, by default the last; `none` not to), as
# in malloc.sh: the two vCPUs of a virtual machine are not alike.
# `make bench-fork`.
#
# SPDX-License-Identifier: MIT
. "$(dirname "$0")/common.sh"
bench_programs fork_cost fork_cost
cpu=$(bench_cpu)
pin=""
[ "$cpu" = none ] || pin="taskset -c $cpu"

echo "fork_cost: fork() of a process with a 1 MiB heap block, the child exiting at once; best of 5 rounds of 200${pin:+; pinned to CPU $cpu}"
echo
echo "| allocator | process | fork+wait us | fork() in the parent us | page faults per fork+wait | fork+wait / glibc |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
for mode in lone threads; do
	base=""
	for impl in glibc jemalloc mimalloc tcmalloc ucma-preload; do
		lib=$(bench_lib "$impl") || { echo "# $impl not found: skipped"; continue; }
		line=$($pin env ${lib:+LD_PRELOAD="$lib"} "$W" "$mode")
		[ -n "$line" ] || { echo "| $impl | $mode | failed |"; continue; }
		cycle=$(field cycle_us "$line")
		[ -n "$base" ] || base=$cycle
		echo "| $impl | $mode | $cycle | $(field parent_us "$line") | $(field faults "$line") |" \
			"$(ratio "$cycle" "$base") |"
	done
done
