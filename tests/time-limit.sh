#!/bin/sh
# time-limit.sh TEST [ARGS...]: run one test under a time limit, so that a
# test that hangs fails with its name and the stacks of its threads instead
# of holding the whole suite until an outside limit kills everything
# without a word.
#
# The limit is TEST_TIMEOUT seconds (600 by default, 0 for none).  It is
# far above any test's normal time (the one-minute soak and the fork storms
# of tests/stress/hangs.c under ThreadSanitizer take two to three minutes
# at most on two loaded cores): reaching it means no progress, not a slow
# machine.  On reaching it the script prints a failing TAP line, then every
# thread's stack of the test and of its children (gdb, where installed) as
# TAP comments, and kills them all; the harness then reports the test as
# failed with exit status 137.
#
# The name is not UCMA_*: the library warns about UCMA_* variables it does
# not know, and tests that compare standard error would see that warning.
set -u
limit=${TEST_TIMEOUT:-600}
case $limit in
'' | *[!0-9]*) echo "time-limit.sh: TEST_TIMEOUT='$limit' is not a number of seconds" >&2; exit 99 ;;
esac
[ "$limit" -eq 0 ] && exec "$@"

# descendants PID: PID's children, grandchildren, ..., one per line.
descendants() {
	for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		echo "$c"
		descendants "$c"
	done
}

"$@" &
pid=$!
(
	# Whatever happens to the output, the test must still be killed.
	trap '' PIPE
	waited=0
	while [ "$waited" -lt "$limit" ]; do
		# Not on the test's output: the harness reads it to its end.
		sleep 1 </dev/null >/dev/null 2>&1
		kill -0 "$pid" 2>/dev/null || exit 0
		waited=$((waited + 1))
	done
	procs="$pid $(descendants "$pid")"
	echo "not ok - hung: $1 still running after $limit s (TEST_TIMEOUT); killed"
	for p in $procs; do
		echo "# process $p: $(tr '\0' ' ' < /proc/"$p"/cmdline 2>/dev/null)"
		if command -v gdb >/dev/null 2>&1; then
			gdb -p "$p" -batch -ex 'thread apply all bt 16' 2>/dev/null |
				grep -E '^(#|Thread)' | head -120 | sed 's/^/#   /'
		fi
	done
	kill -KILL $procs 2>/dev/null
	exit 0
) &
watchdog=$!
wait "$pid"
rc=$?
# KILL: the watchdog holds the test's output open, and must not make the
# harness wait for the rest of its second of sleep.
# The braces: the shell reports the killed job on its own standard error.
{ kill -KILL "$watchdog"; wait "$watchdog"; } 2>/dev/null
exit "$rc"
