#!/bin/sh
# tsan-repeat.sh - hunt data races: run every test that starts threads
# again and again in a ThreadSanitizer build, then the race and soak
# stress tests for longer.  A race that shows once in twenty runs is a
# race; this is how it is found before it fails somebody's CI run.
#
# Usage, from a build configured with --enable-tsan (`make check-tsan-repeat`
# runs it there):
#   tests/tsan-repeat.sh [ROUNDS]        ROUNDS defaults to 20
# Environment: UCMA_TSAN_REPEAT_SOAK (seconds of soak and races at the end,
# default 60; 0 skips that part).
#
# Every round runs the tests through `make check`, so each is counted and
# logged by the harness as usual.  The first round with a failure stops the
# hunt and prints the name of each failed test and its first sanitizer
# report.  Exit status: 0 when every round passed.
set -u
rounds=${1:-20}
soak=${UCMA_TSAN_REPEAT_SOAK:-60}
here=$(pwd)
if ! grep -q 'UCMA_TSAN 1' "$here/config.h" 2>/dev/null; then
	echo "tsan-repeat.sh: $here is not a ThreadSanitizer build (configure --enable-tsan)" >&2
	exit 2
fi

make -s check TESTS= >/dev/null 2>&1	# build the programs once

# Every test program: nearly all start a thread, their own or the
# compaction thread that the first movable or contiguous allocation
# starts.  The shell tests run programs under LD_PRELOAD, which a TSan
# build skips.  Found in the build tree, so new tests are hunted too.
# test_fail_nth is not one: without arguments it sweeps every op in full,
# hours in this build (make check runs the first runs of each op).
present=""
for f in tests/unit/test_* tests/stress/* tests/fuzz/fuzz_replay; do
	case $f in *.o|*.log|*.trs|*.c|tests/unit/test_fail_nth) continue ;; esac
	[ -f "$f" ] && [ -x "$f" ] && present="$present $f"
done
present=$(echo $present)
[ -n "$present" ] || { echo "tsan-repeat.sh: no test programs built here" >&2; exit 2; }

# report LOG: the first sanitizer report of a test's log.
report() {
	awk '/^(WARNING: ThreadSanitizer|==[0-9]+==ERROR)/ { on = 1 }
	     on { print; n++ }
	     on && /^SUMMARY: / { exit }
	     n >= 80 { exit }' "$1"
}

# failed_tests: the logs of the tests that did not pass in the last run.
failed_tests() {
	for t in $present; do
		trs="$t.trs"
		[ -f "$trs" ] || continue
		grep -qE '^:test-result: (FAIL|ERROR|XPASS)' "$trs" && echo "$t.log"
	done
}

run_round() {
	# Soak and fuzz replay stay short here: the long run comes at the end.
	UCMA_SOAK_SECONDS=5 make -s check TESTS="$present" >/dev/null 2>&1
	bad=$(failed_tests)
	[ -z "$bad" ] && return 0
	for log in $bad; do
		echo "!! failed: ${log%.log}"
		report "$log"
	done
	return 1
}

i=1
while [ "$i" -le "$rounds" ]; do
	if ! run_round; then
		echo "tsan-repeat: round $i of $rounds failed"
		exit 1
	fi
	echo "tsan-repeat: round $i of $rounds passed ($(echo $present | wc -w) tests)"
	i=$((i + 1))
done

if [ "$soak" -gt 0 ]; then
	for t in tests/stress/races tests/stress/soak; do
		UCMA_SOAK_SECONDS=$soak UCMA_STRESS_SECONDS=$soak make -s check TESTS="$t" \
			>/dev/null 2>&1
		if grep -qE '^:test-result: (FAIL|ERROR|XPASS)' "$t.trs" 2>/dev/null; then
			echo "!! failed: $t ($soak s)"
			report "$t.log"
			exit 1
		fi
		echo "tsan-repeat: $t for $soak s passed"
	done
fi
echo "tsan-repeat: $rounds rounds passed, no report"
