# common.sh - what the benchmark scripts share; sourced, not run.
#
#   bench_programs NAME PROG: W (the benchmark program) and P (the
#       preload library) of the build tree, or exit saying what to build
#   field KEY LINE: the value of KEY=value in a line of key=value pairs
#   ratio A B: A / B to two places ("-" when B is not positive)
#   install_lib FILE PACKAGE: make sure FILE exists, installing Debian's
#       PACKAGE when root and apt-get can; false when it is still missing
#   JEMALLOC, MIMALLOC, TCMALLOC: the baseline allocators (Debian's
#       libjemalloc2, libmimalloc2.0, libtcmalloc-minimal4), or where
#       JEMALLOC_SO, MIMALLOC_SO and TCMALLOC_SO say
#   bench_lib IMPL: the LD_PRELOAD library of glibc (none), jemalloc,
#       mimalloc, tcmalloc or ucma-preload; false when it is missing
#   bench_cpu: the CPU that single-threaded runs are pinned to: BENCH_CPU,
#       by default the last CPU this script may run on; "none" when
#       BENCH_CPU says so or taskset is missing (a virtual machine's CPUs
#       need not be alike: tests/bench/malloc.sh says why)
#
# SPDX-License-Identifier: MIT

: "${top_builddir:=.}"
P=$(cd "$top_builddir" && pwd)/.libs/libucma-preload.so
libdir=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
JEMALLOC=${JEMALLOC_SO:-$libdir/libjemalloc.so.2}
MIMALLOC=${MIMALLOC_SO:-$libdir/libmimalloc.so.2}
TCMALLOC=${TCMALLOC_SO:-$libdir/libtcmalloc_minimal.so.4}

bench_programs() {
	W=$top_builddir/tests/bench/$2
	[ -x "$W" ] && [ -f "$P" ] || { echo "$1: build $W and $P first" >&2; exit 1; }
}

field() {
	echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'
}

install_lib() {
	[ -f "$1" ] && return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "# installing $2 for $1" >&2
		apt-get install -y -q "$2" >/dev/null 2>&1 ||
			{ apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$2" >/dev/null 2>&1; } ||
			true
	fi
	[ -f "$1" ]
}

bench_lib() {
	case $1 in
	glibc) echo "" ;;
	jemalloc) install_lib "$JEMALLOC" libjemalloc2 && echo "$JEMALLOC" ;;
	mimalloc) install_lib "$MIMALLOC" libmimalloc2.0 && echo "$MIMALLOC" ;;
	tcmalloc) install_lib "$TCMALLOC" libtcmalloc-minimal4 && echo "$TCMALLOC" ;;
	ucma-preload) [ -f "$P" ] && echo "$P" ;;
	*) return 1 ;;
	esac
}

bench_cpu() {
	c=${BENCH_CPU:-}
	if [ "$c" = none ]; then
		echo none
	elif ! command -v taskset >/dev/null 2>&1; then
		echo "# taskset not found: runs are not pinned to one CPU" >&2
		echo none
	elif [ -n "$c" ]; then
		echo "$c"
	else
		# the last CPU of this process's affinity list, e.g. "0-1" or "0,2-5"
		taskset -pc $$ | sed 's/.*: //; s/.*[,-]//'
	fi
}
