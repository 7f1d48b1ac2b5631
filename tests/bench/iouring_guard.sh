#!/bin/sh
# iouring_guard.sh - the cost of the io_uring guard (preload/
# iouring_guard.c) on syscall(SYS_io_uring_enter): iouring_guard_cost
# under the library with lending off and with lending on and a pageblock
# borrowed.  Each row gives the thread's CPU time in ns per submission
# of one entry, reaped, for a ring the library saw set up (read from the
# ring), a ring it did not see (read from /proc/self/fdinfo), and the C
# library's own syscall() (no guard), all measured in the same run, and
# the first two as ratios to the third; then how many pageblocks were
# borrowed and how many guarded submissions went each way.  `make bench-iouring-guard`; lending needs a userfaultfd
# (root).
#
# SPDX-License-Identifier: MIT
. "$(dirname "$0")/common.sh"
bench_programs iouring_guard iouring_guard_cost

echo "iouring_guard: ns of CPU time per submission, best of 5 rounds; ring / fdinfo / no guard, same run"
echo
echo "| run | op | ring ns | fdinfo ns | no guard ns | ring / no guard | fdinfo / no guard | borrowed | by ring | by fdinfo |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for run in lend-off lend-on; do
	case $run in
	lend-off) line=$(env LD_PRELOAD="$P" "$W") ;;
	lend-on)
		line=$(env LD_PRELOAD="$P" UCMA_ARENA_SIZE=96M UCMA_CMA_SIZE=32M \
			UCMA_CMA_POLICY=lend UCMA_HUGEPAGES=none "$W") ;;
	esac
	[ -n "$line" ] || { echo "| $run | failed |"; continue; }
	[ "$(field failed "$line")" = 0 ] || echo "| $run | a submission failed |"
	for op in nop read; do
		r=$(field ${op}_ring_ns "$line")
		f=$(field ${op}_fdinfo_ns "$line")
		l=$(field ${op}_libc_ns "$line")
		echo "| $run | $op | $r | $f | $l | $(ratio "$r" "$l") | $(ratio "$f" "$l") |" \
			"$(field borrowed_pageblocks "$line") | $(field enter_ring "$line") |" \
			"$(field enter_fdinfo "$line") |"
	done
done
