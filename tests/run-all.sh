#!/bin/sh
# run-all.sh - the whole test suite, from a clean checkout, on Debian 12 as
# root: installs the build dependencies, builds the library in the normal
# configuration with warnings as errors and runs `make check` (with a
# one-minute soak), runs the fuzzer for a minute, builds everything with
# clang and warnings as errors, then `make distcheck`, then the sanitizer
# builds (AddressSanitizer with UBSan, ThreadSanitizer for the concurrency
# tests).  Ends with one line
# "N passed, N failed, N skipped" counted over every run.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
jobs=${UCMA_JOBS:-2}
out=${UCMA_BUILD_ROOT:-$top/build-ci}
quick=${UCMA_QUICK:-}
check_args=${UCMA_CHECK_ARGS:-}
fuzz_seconds=${UCMA_FUZZ_SECONDS:-60}
# These knobs belong to this script, not to ucma: keep them out of the
# tests' environment, where the library would warn about unknown UCMA_*
# names and tests comparing standard error would fail.
unset UCMA_JOBS UCMA_BUILD_ROOT UCMA_QUICK UCMA_CHECK_ARGS UCMA_FUZZ_SECONDS
# RUN_ALL_COUNTS=FILE (.ci/run sets it): the counts so far are kept there
# before every step, and "printed" is added once the closing line is out,
# so that a caller can still give the line if this script is killed
# outright (SIGKILL from an outside time limit runs no trap).
counts_file=${RUN_ALL_COUNTS:-}

deps="build-essential autoconf automake libtool pkg-config libnuma-dev liburcu-dev \
liburing-dev libjemalloc-dev libjemalloc2 libmimalloc-dev libgoogle-perftools-dev \
clang libclang-rt-14-dev groff-base man-db python3 git gcc g++ numactl"

pass=0 fail=0 skip=0
failed_runs=""
summary_done=""

# summary: the closing line, printed exactly once on every way out (a
# failed installation, an interrupted run, or the normal end).
summary() {
	[ -n "$summary_done" ] && return
	summary_done=1
	echo "$pass passed, $fail failed, $skip skipped"
	[ -n "$counts_file" ] && echo printed >>"$counts_file"
}

# record: the counts so far, for RUN_ALL_COUNTS.
record() {
	[ -n "$counts_file" ] && echo "$pass $fail $skip" >"$counts_file"
	return 0
}
trap summary EXIT
trap 'fail=$((fail + 1)); exit 130' INT TERM

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	missing=""
	for p in $deps; do
		dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
	done
	if [ -n "$missing" ]; then
		echo "== installing:$missing"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null && apt-get install -y -qq $missing >/dev/null ||
			{ echo "apt-get install failed"; fail=1; exit 1; }
	fi
fi

# count_trs DIR: add the results of every .trs file under DIR.
count_trs() {
	p=$(find "$1" -name '*.trs' -exec grep -h '^:test-result: PASS' {} + | wc -l)
	x=$(find "$1" -name '*.trs' -exec grep -h '^:test-result: XFAIL' {} + | wc -l)
	f=$(find "$1" -name '*.trs' -exec grep -hE '^:test-result: (FAIL|ERROR|XPASS)' {} + | wc -l)
	s=$(find "$1" -name '*.trs' -exec grep -h '^:test-result: SKIP' {} + | wc -l)
	pass=$((pass + p + x)); fail=$((fail + f)); skip=$((skip + s))
}

# step NAME COMMAND...: run a build step; a failure counts as one failed test.
step() {
	name=$1; shift
	record
	echo "== $name"
	if ! "$@" > "$out/$name.log" 2>&1; then
		echo "!! $name failed; last lines of $out/$name.log:"
		tail -40 "$out/$name.log"
		fail=$((fail + 1)); failed_runs="$failed_runs $name"
		return 1
	fi
	return 0
}

rm -rf "$out"; mkdir -p "$out"
# The builds below are out of tree; Automake refuses them while the source
# tree itself is configured (say, by an in-tree ./configure): clean it.
if [ -f "$top/config.status" ]; then
	echo "== the source tree is configured in place: make distclean there first"
	(cd "$top" && make distclean >/dev/null 2>&1) || rm -f "$top/config.status"
fi
cd "$top" && step autoreconf autoreconf -fi || exit 1

# build VARIANT CONFIGURE-ARGS...: configure, build and `make check` one variant.
build() {
	v=$1; shift
	mkdir -p "$out/$v"
	cd "$out/$v" || return
	if step "$v-configure" "$top/configure" --enable-werror "$@" &&
	   step "$v-make" make -j"$jobs"; then
		step "$v-check" make -j"$jobs" check $check_args
		count_trs "$out/$v"
	fi
	cd "$top" || exit 1
}

# The normal build soaks for a minute (tests/stress/soak.c; 10 s by default).
if [ -z "${UCMA_SOAK_SECONDS:-}" ]; then
	UCMA_SOAK_SECONDS=60; export UCMA_SOAK_SECONDS
	build normal
	unset UCMA_SOAK_SECONDS
else
	build normal
fi

# Fuzzing: tests/fuzz/run-fuzz.sh, through `make fuzz` of a build configured
# with --enable-fuzz, runs the regression inputs and then libFuzzer for
# UCMA_FUZZ_SECONDS (60 s).  One test: passed, or failed on a crash.
fuzz_run() {
	mkdir -p "$out/fuzz" && cd "$out/fuzz" &&
		"$top/configure" --enable-fuzz &&
		UCMA_FUZZ_SECONDS=$fuzz_seconds make fuzz
}
step fuzz fuzz_run && pass=$((pass + 1))
cd "$top" || exit 1

# clang: the library, the tools and every test program built by the other
# compiler users have, warnings as errors (its warnings differ from
# GCC's).  The tests themselves run in the GCC builds.  One test.
clang_build() {
	mkdir -p "$out/clang" && cd "$out/clang" &&
		"$top/configure" --enable-werror CC=clang CXX=clang++ &&
		make -j"$jobs" && make -j"$jobs" check TESTS=
}
if [ -z "$quick" ]; then
	step clang clang_build && pass=$((pass + 1))
	cd "$top" || exit 1
fi

# distcheck runs make check once more in the unpacked tarball: there the
# fail-nth sweep takes 5 runs of each entry (the normal build's check
# above swept every run; more again would add minutes and test nothing
# the tarball changes: with 20 runs each, the distcheck step took 8
# minutes of a 53-minute run on a virtual machine whose page faults are
# slow; with 5, 4.3 minutes).
if [ -z "$quick" ]; then
	cd "$out/normal" && step distcheck make -j"$jobs" distcheck FNTH_LOG_FLAGS="-m 5" &&
		pass=$((pass + 1))
	cd "$top"
	build asan --enable-asan --enable-debug
	build tsan --enable-tsan --enable-debug
fi

# Forked test children that end with _exit() leave their statistics
# segment in /dev/shm (ucma(7)); remove those of processes that ended.
[ -x "$out/normal/ucmastat" ] && "$out/normal/ucmastat" --list --prune >/dev/null 2>&1

# report LOG: what failed in one test's log, readable from the CI log alone:
# its first sanitizer report (ThreadSanitizer, AddressSanitizer, UBSan) or,
# without one, its failed assertions and the lines around them.
report() {
	if grep -qE 'WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer|runtime error:' "$1"; then
		awk '/WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer|runtime error:/ { on = 1 }
		     on { print "    " $0; n++ }
		     on && /^SUMMARY: / { exit }
		     n >= 80 { exit }' "$1"
	else
		grep -E -B3 -A3 '^(not ok|Bail out!)|hung|internal error' "$1" | head -40 |
			sed 's/^/    /'
	fi
}

echo "== summary"
[ -n "$failed_runs" ] && echo "failed steps:$failed_runs"
for trs in $(find "$out" -name '*.trs' -exec grep -lE '^:test-result: (FAIL|ERROR|XPASS)' {} + 2>/dev/null); do
	log=${trs%.trs}.log
	echo "failed: $log"
	report "$log"
done
summary
[ "$fail" -eq 0 ]
