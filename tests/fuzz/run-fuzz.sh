#!/bin/sh
# run-fuzz.sh - build the libFuzzer target tests/fuzz/fuzz_ops.c with clang
# and run it for a bounded time.
#
# Usage: run-fuzz.sh [--build-only] BUILDDIR [libFuzzer options...]
#
# BUILDDIR is a configured build directory: its config.h is copied, and
# everything this script makes goes to BUILDDIR/tests/fuzz/libfuzzer/.
# The library sources are the UCMA_SOURCES list of src/src.mk, compiled
# together with the target by clang with -fsanitize=fuzzer,address,undefined
# and the test build's hooks (UCMA_TEST_HOOKS, UCMA_ASAN, UCMA_DEBUG).
#
# Then, in order:
#   1. every input of tests/fuzz/regressions runs once: a bug found before
#      must stay fixed;
#   2. libFuzzer runs for UCMA_FUZZ_SECONDS seconds (default 60) from the
#      committed seeds (tests/fuzz/corpus, read only) and the inputs kept
#      from earlier runs in this build directory.
# The exit status is 0 when nothing crashed.  A crash leaves its input as
# BUILDDIR/tests/fuzz/libfuzzer/crash-*: the script prints how to replay
# it; a fixed bug's input belongs in tests/fuzz/regressions (see the
# README there).  CC_FUZZ overrides the compiler (default clang).
#
# SPDX-License-Identifier: MIT
set -eu

build_only=no
if [ "${1:-}" = "--build-only" ]; then
	build_only=yes
	shift
fi
if [ $# -lt 1 ] || [ ! -f "$1/config.h" ]; then
	echo "usage: $0 [--build-only] BUILDDIR [libFuzzer options...]" >&2
	echo "BUILDDIR must be a configured build directory (it has config.h)" >&2
	exit 2
fi
build=$(cd "$1" && pwd)
shift
top=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC_FUZZ:-clang}
seconds=${UCMA_FUZZ_SECONDS:-60}
# The library warns about UCMA_* variables it does not know: this one is ours.
unset UCMA_FUZZ_SECONDS

if ! command -v "$cc" >/dev/null 2>&1; then
	echo "run-fuzz.sh: $cc not found; libFuzzer needs clang" \
		"(Debian: apt-get install clang libclang-rt-14-dev)" >&2
	exit 2
fi

work=$build/tests/fuzz/libfuzzer
mkdir -p "$work/obj" "$work/include" "$work/corpus" "$work/artifacts"
cmp -s "$build/config.h" "$work/include/config.h" 2>/dev/null ||
	cp "$build/config.h" "$work/include/config.h"

# The library's sources, from the one list that the Makefile uses too.
sources=$(sed -n '/^UCMA_SOURCES[ 	]*=/,/[^\\]$/p' "$top/src/src.mk" |
	tr -d '\\' | tr ' \t' '\n\n' | grep '\.c$')
[ -n "$sources" ] || { echo "run-fuzz.sh: no UCMA_SOURCES in src/src.mk" >&2; exit 2; }

deps_cflags=$(pkg-config --cflags liburcu-bp numa 2>/dev/null || true)
cflags="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
	-fno-sanitize-recover=undefined -pthread -std=gnu11
	-DUCMA_TEST_HOOKS=1 -DUCMA_ASAN=1 -DUCMA_DEBUG=1
	-I$work/include -I$top/include -I$top/src -I$top/tests $deps_cflags
	-Wall -Wextra -Wno-unused-parameter"

# Compile what changed, two at a time (the machine is shared), then link.
obj_of() {
	echo "$work/obj/$(echo "$1" | tr '/' '_' | sed 's/\.c$/.o/')"
}
compile() {
	# shellcheck disable=SC2086
	$cc $cflags -c "$top/$1" -o "$2.tmp" && mv "$2.tmp" "$2"
}
objs=""
running=0
for s in $sources tests/fuzz/fuzz_ops.c; do
	o=$(obj_of "$s")
	objs="$objs $o"
	stale=no
	[ -f "$o" ] || stale=yes
	for dep in "$top/$s" "$top"/src/*.h "$top/include/ucma.h" "$work/include/config.h"; do
		[ "$dep" -nt "$o" ] && stale=yes
	done
	[ $stale = yes ] || continue
	echo "   CC $s"
	rm -f "$o"
	compile "$s" "$o" &
	running=$((running + 1))
	if [ $running -ge 2 ]; then
		wait
		running=0
	fi
done
wait
for o in $objs; do
	[ -f "$o" ] || { echo "run-fuzz.sh: compiling failed ($o)" >&2; exit 1; }
done
bin=$work/fuzz_ops
# shellcheck disable=SC2086
"$cc" -fsanitize=fuzzer,address,undefined -pthread $objs -o "$bin" \
	$(pkg-config --libs liburcu-bp numa 2>/dev/null || echo -lnuma -lurcu-bp)
echo "== built $bin"
[ $build_only = yes ] && exit 0

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="suppressions=$top/tests/lsan.supp:print_suppressions=0"
common="-timeout=30 -rss_limit_mb=4096 -artifact_prefix=$work/artifacts/ -print_final_stats=1"

status=0
regressions=$(find "$top/tests/fuzz/regressions" -type f ! -name README 2>/dev/null | sort)
if [ -n "$regressions" ]; then
	echo "== regression inputs: $(echo "$regressions" | wc -l)"
	# shellcheck disable=SC2086
	"$bin" $common "$@" $regressions || status=$?
	if [ $status -ne 0 ]; then
		echo "!! a regression input fails again (exit $status)"
		exit $status
	fi
fi

echo "== fuzzing for $seconds s"
# New inputs go to the first directory; the committed seeds stay untouched.
# shellcheck disable=SC2086
"$bin" $common -max_total_time="$seconds" "$@" "$work/corpus" "$top/tests/fuzz/corpus" ||
	status=$?
if [ $status -ne 0 ]; then
	echo "!! the fuzzer found a problem (exit $status); inputs:"
	ls -1 "$work/artifacts/" 2>/dev/null | sed "s|^|   $work/artifacts/|"
	echo "   replay one with: $bin FILE  (or tests/fuzz/fuzz_replay FILE)"
	echo "   once fixed, copy it to tests/fuzz/regressions/ (see the README there)"
	exit $status
fi
echo "== no crash in $seconds s; corpus: $(ls "$work/corpus" | wc -l) inputs in $work/corpus"
