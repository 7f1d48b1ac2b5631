#!/bin/sh
# malloc.sh - the malloc benchmark: every case of bench_malloc under glibc,
# jemalloc (LD_PRELOAD) and ucma (direct calls, and through
# libucma-preload.so when it is built), each run in its own process, the
# implementations taking turns; the best time of RUNS runs and the largest
# peak RSS are reported, with the ratios of ucma to jemalloc and to glibc,
# as one Markdown table.
#
#   make bench-malloc            (from the build directory)
#   RUNS=5 CASES="small mixed" sh tests/bench/malloc.sh
#
# Environment: top_builddir (default .), RUNS (3), CASES (all), IMPLS
# ("glibc jemalloc ucma ucma-preload"; also ucma-4k: direct calls with the
# NORMAL zone on plain 4 KiB pages instead of transparent huge pages),
# JEMALLOC_SO, METRIC (wall: elapsed time of the workload, the default;
# cpu: user + system time of the process, which other jobs on a shared
# machine disturb less).
#
# SPDX-License-Identifier: MIT
set -eu

b=${top_builddir:-.}
bench=$b/tests/bench/bench_malloc
runs=${RUNS:-3}
cases=${CASES:-"small small-batch mixed large prodcons realloc mt-small mt-mixed"}
impls=${IMPLS:-"glibc jemalloc ucma ucma-preload"}
jemalloc=${JEMALLOC_SO:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}
metric=${METRIC:-wall}
preload=$b/.libs/libucma-preload.so

if [ ! -x "$bench" ]; then
	echo "malloc.sh: $bench not built (make check_PROGRAMS or make bench)" >&2
	exit 1
fi
avail=""
for impl in $impls; do
	case $impl in
	jemalloc) [ -f "$jemalloc" ] || { echo "# jemalloc not found at $jemalloc: skipped"; continue; } ;;
	ucma-preload) [ -f "$preload" ] || { echo "# $preload not built: skipped"; continue; } ;;
	esac
	avail="$avail $impl"
done

# run IMPL CASE: one process; prints "ms rss_kib", or fails
run() {
	case $1 in
	glibc) out=$("$bench" "$2") ;;
	jemalloc) out=$(LD_PRELOAD=$jemalloc "$bench" "$2") ;;
	ucma) out=$("$bench" --ucma "$2") ;;
	ucma-4k) out=$(UCMA_HUGEPAGES_NORMAL=none "$bench" --ucma "$2") ;;
	ucma-preload) out=$(LD_PRELOAD=$preload "$bench" "$2") ;;
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

awk -v impls="$avail" -v metric="$metric" '
{
	k = $1 SUBSEP $2
	if (!(k in t) || $3 < t[k]) t[k] = $3
	if (!(k in r) || $4 > r[k]) r[k] = $4
	if (!($1 in seen)) { seen[$1] = 1; order[++nc] = $1 }
}
function ratio(a, b) { return (b > 0 && a != "") ? sprintf("%.2f", a / b) : "-" }
END {
	ni = split(impls, im, " ")
	hdr = "| case |"; sep = "| --- |"
	for (i = 1; i <= ni; i++) { hdr = hdr " " im[i] " " metric " ms |"; sep = sep " ---: |" }
	for (i = 1; i <= ni; i++) if (im[i] ~ /^ucma/) {
		hdr = hdr " " im[i] "/jemalloc |" " " im[i] "/glibc |"; sep = sep " ---: | ---: |"
	}
	for (i = 1; i <= ni; i++) { hdr = hdr " " im[i] " RSS MiB |"; sep = sep " ---: |" }
	for (i = 1; i <= ni; i++) if (im[i] ~ /^ucma/) {
		hdr = hdr " " im[i] " RSS/jemalloc |"; sep = sep " ---: |"
	}
	print hdr; print sep
	for (n = 1; n <= nc; n++) {
		c = order[n]; line = "| " c " |"
		for (i = 1; i <= ni; i++) line = line " " t[c, im[i]] " |"
		for (i = 1; i <= ni; i++) if (im[i] ~ /^ucma/)
			line = line " " ratio(t[c, im[i]], t[c, "jemalloc"]) " | " ratio(t[c, im[i]], t[c, "glibc"]) " |"
		for (i = 1; i <= ni; i++) line = line " " sprintf("%.1f", r[c, im[i]] / 1024) " |"
		for (i = 1; i <= ni; i++) if (im[i] ~ /^ucma/)
			line = line " " ratio(r[c, im[i]], r[c, "jemalloc"]) " |"
		print line
	}
}' "$results"
