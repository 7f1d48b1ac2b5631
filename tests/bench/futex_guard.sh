#!/bin/sh
# futex_guard.sh - the cost of the preloaded futex guards (preload/
# futex_guard.c) and of the direct I/O guard on read() (preload/
# dio_guard.c): futex_guard_cost without the library, under it with
# nothing lent (the defaults where the CMA areas get no 2 MiB frames on a
# file, as with no hugetlb pool and shmem without huge pages), and with
# lending on and a pageblock borrowed.  Each row compares the interposed call with the C library's
# own, measured in the same run.  `make bench-futex-guard`; lending needs
# a userfaultfd (root).
#
# SPDX-License-Identifier: MIT
. "$(dirname "$0")/common.sh"
bench_programs futex_guard futex_guard_cost

echo "futex_guard: ns per call, best of 5 rounds; interposed / the C library's own, same run"
echo
echo "| run | pthread_mutex_init(pshared) | sem_init(pshared) | syscall(SYS_futex, FUTEX_WAKE) | read(64 B) |"
echo "| --- | ---: | ---: | ---: | ---: |"
for run in glibc lend-off lend-on; do
	case $run in
	glibc) line=$("$W") ;;
	lend-off) line=$(env LD_PRELOAD="$P" "$W") ;;
	lend-on)
		line=$(env LD_PRELOAD="$P" UCMA_ARENA_SIZE=96M UCMA_CMA_SIZE=32M \
			UCMA_CMA_POLICY=lend UCMA_HUGEPAGES=none "$W") ;;
	esac
	[ -n "$line" ] || { echo "| $run | failed |"; continue; }
	echo "| $run | $(field mutex_init_ns "$line") / $(field mutex_init_libc_ns "$line") |" \
		"$(field sem_init_ns "$line") / $(field sem_init_libc_ns "$line") |" \
		"$(field futex_wake_ns "$line") / $(field futex_wake_libc_ns "$line") |" \
		"$(field read_ns "$line") / $(field read_libc_ns "$line") |"
done
