#!/bin/sh
# malloc.sh - the malloc benchmark: every case of bench_malloc under glibc,
# jemalloc, mimalloc and tcmalloc (each by LD_PRELOAD) and ucma (direct
# calls, and through libucma-preload.so), each run in its own process, the
# implementations taking turns; the best time of RUNS runs and the largest
# peak RSS are reported as two Markdown tables (time, peak RSS), with the
# ratios of each ucma variant to every other allocator and to the better of
# jemalloc and mimalloc, and a closing summary against the goals (time
# within 1.1x of the better of jemalloc and mimalloc, peak RSS within 1.2x
# of mimalloc).
#
#   make bench-malloc            (from the build directory)
#   RUNS=5 CASES="simple larson" sh tests/bench/malloc.sh
#
# Set-up: the other allocators are Debian's libjemalloc2, libmimalloc2.0
# and libtcmalloc-minimal4; when one is missing and apt-get can install it
# (root), it is installed, otherwise that allocator is skipped.
#
# Environment: top_builddir (default .), RUNS (3), CASES (all), IMPLS
# ("glibc jemalloc mimalloc tcmalloc ucma ucma-preload"; also ucma-4k:
# direct calls with the NORMAL zone on plain 4 KiB pages instead of
# transparent huge pages), JEMALLOC_SO, MIMALLOC_SO, TCMALLOC_SO, METRIC
# (wall: elapsed time of the workload, the default; cpu: user + system
# time of the process, which other jobs on a shared machine disturb less),
# UCMA_BENCH_CMA_BACKING (UCMA_HUGEPAGES of the ucma runs, default thp),
# BENCH_CPU (the CPU every run of a single-threaded case is pinned to;
# default the last CPU this script may run on, "none" to leave them
# unpinned).  The ucma runs of past-arena get UCMA_ARENA_SIZE=8M (the
# case measures the overflow past the arena); the others keep the
# caller's UCMA_ARENA_SIZE, if any.
#
# Why pin: on a virtual machine the CPUs need not be alike.  On the 2-vCPU
# host of tests/bench/RESULTS.md, vCPU 0 (which takes most interrupts) ran
# small-batch 1.55x slower than vCPU 1 under every allocator, so an
# unpinned run's time depended on where the scheduler put it, and "best
# of the runs" compared one allocator's lucky run with another's unlucky
# ones.  The multi-threaded cases (thread larson burst prodcons mt-small
# mt-mixed) stay unpinned: they need every CPU.
#
# SPDX-License-Identifier: MIT
set -eu

. "$(dirname "$0")/common.sh"
b=$top_builddir
bench=$b/tests/bench/bench_malloc
# The direct calls (ucma, ucma-4k) need the program linked with libucma;
# every other run uses the one that links nothing of ucma.
bench_ucma=$b/tests/bench/bench_malloc_ucma
runs=${RUNS:-3}
cases=${CASES:-"simple thread larson burst small small-batch mixed large large-odd large-odd-2m large-holes past-arena prodcons realloc realloc-big mt-small mt-mixed"}
impls=${IMPLS:-"glibc jemalloc mimalloc tcmalloc ucma ucma-preload"}
jemalloc=$JEMALLOC
mimalloc=$MIMALLOC
tcmalloc=$TCMALLOC
metric=${METRIC:-wall}
mt_cases="thread larson burst prodcons mt-small mt-mixed"
cpu=$(bench_cpu)
preload=$b/.libs/libucma-preload.so

for prog in "$bench" "$bench_ucma"; do
	if [ ! -x "$prog" ]; then
		echo "malloc.sh: $prog not built (make check_PROGRAMS or make bench)" >&2
		exit 1
	fi
done

avail=""
for impl in $impls; do
	case $impl in
	jemalloc) install_lib "$jemalloc" libjemalloc2 ||
		{ echo "# jemalloc not found at $jemalloc: skipped"; continue; } ;;
	mimalloc) install_lib "$mimalloc" libmimalloc2.0 ||
		{ echo "# mimalloc not found at $mimalloc: skipped"; continue; } ;;
	tcmalloc) install_lib "$tcmalloc" libtcmalloc-minimal4 ||
		{ echo "# tcmalloc not found at $tcmalloc: skipped"; continue; } ;;
	ucma-preload) [ -f "$preload" ] || { echo "# $preload not built: skipped"; continue; } ;;
	esac
	avail="$avail $impl"
done

# The CMA areas on shmem frames for every ucma run: with heap lending the
# heap may live on their frames, and getrusage's peak RSS counts shmem
# pages but not hugetlb ones (a hugetlb-backed area would hide the lent
# heap from the figure: 4 MiB instead of 58 for `large`).
cma_backing=${UCMA_BENCH_CMA_BACKING:-thp}
user_arena=${UCMA_ARENA_SIZE-}

# pin CASE: the command prefix that runs CASE on its CPU (nothing for the
# multi-threaded cases, or with BENCH_CPU=none)
pin() {
	case " $mt_cases " in *" $1 "*) return 0 ;; esac
	[ "$cpu" = none ] || printf 'taskset -c %s' "$cpu"
}

# run IMPL CASE: one process; prints "ms rss_kib", or fails
run() {
	p=$(pin "$2")
	case $1 in ucma*) export UCMA_HUGEPAGES=$cma_backing ;; *) unset UCMA_HUGEPAGES ;; esac
	# past-arena: ucma's heap in the overflow past an 8 MiB arena
	case $1:$2 in
	ucma*:past-arena) export UCMA_ARENA_SIZE=8M ;;
	*) if [ -n "$user_arena" ]; then export UCMA_ARENA_SIZE=$user_arena; else unset UCMA_ARENA_SIZE; fi ;;
	esac
	case $1 in
	glibc) out=$($p "$bench" "$2") ;;
	jemalloc) out=$(LD_PRELOAD=$jemalloc $p "$bench" "$2") ;;
	mimalloc) out=$(LD_PRELOAD=$mimalloc $p "$bench" "$2") ;;
	tcmalloc) out=$(LD_PRELOAD=$tcmalloc $p "$bench" "$2") ;;
	ucma) out=$($p "$bench_ucma" --ucma "$2") ;;
	ucma-4k) out=$(UCMA_HUGEPAGES_NORMAL=none $p "$bench_ucma" --ucma "$2") ;;
	ucma-preload) out=$(LD_PRELOAD=$preload $p "$bench" "$2") ;;
	esac || { echo "malloc.sh: case $2 failed under $1" >&2; return 1; }
	if [ "$metric" = cpu ]; then
		echo "$out" | awk '{ print $4, $3 }'
	else
		echo "$out" | awk '{ print $2, $3 }'
	fi
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
# Implementations take turns run by run, so that they see the same load
# on a shared machine; the best time of the runs counts.
for c in $cases; do
	i=0
	while [ $i -lt "$runs" ]; do
		for impl in $avail; do
			line=$(run "$impl" "$c") || exit 1
			echo "$c $impl $line" >>"$results"
		done
		i=$((i + 1))
	done
done

awk -v impls="$avail" -v metric="$metric" -v cpu="$cpu" -v mt="$mt_cases" '
{
	k = $1 SUBSEP $2
	if (!(k in t) || $3 < t[k]) t[k] = $3
	if (!(k in r) || $4 > r[k]) r[k] = $4
	if (!($1 in seen)) { seen[$1] = 1; order[++nc] = $1 }
}
function ratio(a, b) { return (b > 0 && a != "") ? sprintf("%.2f", a / b) : "-" }
function best(v, c,   x, y) {
	x = ((c SUBSEP "jemalloc") in v) ? v[c, "jemalloc"] : ""
	y = ((c SUBSEP "mimalloc") in v) ? v[c, "mimalloc"] : ""
	if (x == "") return y
	if (y == "") return x
	return x < y ? x : y
}
# table(v, unit, fmt, scale, bestname): one row per case, the value of
# every implementation, then each ucma variant over every other one and,
# unless bestname is mimalloc (already a column), over the better of
# jemalloc and mimalloc
function table(v, unit, fmt, scale, bestname,   n, i, j, c, hdr, sep, line) {
	hdr = "| case |"; sep = "| --- |"
	for (i = 1; i <= ni; i++) { hdr = hdr " " im[i] " " unit " |"; sep = sep " ---: |" }
	for (i = 1; i <= ni; i++) if (im[i] ~ /^ucma/) {
		for (j = 1; j <= ni; j++) if (im[j] !~ /^ucma/) {
			hdr = hdr " " im[i] "/" im[j] " |"; sep = sep " ---: |"
		}
		if (bestname != "mimalloc") { hdr = hdr " " im[i] "/" bestname " |"; sep = sep " ---: |" }
	}
	print hdr; print sep
	for (n = 1; n <= nc; n++) {
		c = order[n]; line = "| " c " |"
		for (i = 1; i <= ni; i++) line = line " " sprintf(fmt, v[c, im[i]] / scale) " |"
		for (i = 1; i <= ni; i++) if (im[i] ~ /^ucma/) {
			for (j = 1; j <= ni; j++) if (im[j] !~ /^ucma/)
				line = line " " ratio(v[c, im[i]], v[c, im[j]]) " |"
			if (bestname != "mimalloc")
				line = line " " ratio(v[c, im[i]], best(v, c)) " |"
		}
		print line
	}
	print ""
}
END {
	ni = split(impls, im, " ")
	if (cpu == "none") print "# runs not pinned to a CPU"
	else print "# single-threaded cases pinned to CPU " cpu " (multi-threaded, unpinned: " mt ")"
	print ""
	print "Time (" metric ", best of the runs):"; print ""
	table(t, metric " ms", "%.1f", 1, "best(je,mi)")
	print "Peak RSS (largest of the runs):"; print ""
	table(r, "RSS MiB", "%.1f", 1024, "mimalloc")
	for (i = 1; i <= ni; i++) if (im[i] ~ /^ucma/) {
		okt = okr = 0; lg = 0; cnt = 0
		for (n = 1; n <= nc; n++) {
			c = order[n]; bt = best(t, c)
			if (bt != "" && t[c, im[i]] <= 1.1 * bt) okt++
			if (((c SUBSEP "mimalloc") in r) && r[c, im[i]] <= 1.2 * r[c, "mimalloc"]) okr++
			if (((c SUBSEP "mimalloc") in t) && t[c, "mimalloc"] > 0) {
				lg += log(t[c, im[i]] / t[c, "mimalloc"]); cnt++
			}
		}
		printf("%s: time within 1.1x of the better of jemalloc and mimalloc in %d of %d cases; " \
		       "peak RSS within 1.2x of mimalloc in %d of %d; geomean time / mimalloc %s\n",
		       im[i], okt, nc, okr, nc, cnt ? sprintf("%.2f", exp(lg / cnt)) : "-")
	}
}' "$results"
