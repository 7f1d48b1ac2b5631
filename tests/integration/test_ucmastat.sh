#!/bin/sh
# test_ucmastat.sh - ucmastat against a live process: counters, one name,
# the map, -w, --list, --svg, and the errors for a missing process, a
# process without ucma, a segment it may not read, and a process that ended.
# Also the segment's life: none until ucmastat asks (UCMA_STATS_SHM=request,
# the default), none left by processes that end with _exit or SIGKILL
# without being asked (preloaded ones too), an answer from a process whose
# only ucma calls are mallocs, UCMA_STATS_SHM=on and off, and --prune after
# a process that was being inspected is killed.
#
# SPDX-License-Identifier: MIT

builddir=${top_builddir:-.}
ucmastat=$builddir/ucmastat
helper=$builddir/tests/integration/ucma_stat_helper
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ucmastat-test.XXXXXX") || exit 1
helper_pid=
other_pid=
# Answers normally come within 100 ms; the limit only matters on failure,
# and a loaded machine must not make the test fail.
wait_s=10

n=0
failed=0
ok() {
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		failed=$((failed + 1))
	fi
}
skip() {
	n=$((n + 1))
	echo "ok $n # SKIP $1"
}
cleanup() {
	[ -n "$helper_pid" ] && kill "$helper_pid" 2>/dev/null
	[ -n "$other_pid" ] && kill "$other_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

if [ ! -x "$ucmastat" ] || [ ! -x "$helper" ]; then
	echo "1..0 # SKIP ucmastat or the helper is not built"
	exit 0
fi
if [ ! -d /dev/shm ] || [ ! -w /dev/shm ]; then
	echo "1..0 # SKIP no writable /dev/shm"
	exit 0
fi

export UCMA_ARENA_SIZE=64M UCMA_CMA_SIZE=16M UCMA_HUGEPAGES=none UCMA_HUGEPAGES_NORMAL=none
unset UCMA_STATS_SHM UCMA_COMPACT UCMA_CONF

# start_helper NAME [MODE]: run the helper in the background until "ready"
# (its pid in $started).
start_helper() {
	"$helper" $2 >"$tmp/$1.out" 2>"$tmp/$1.err" &
	started=$!
	i=0
	while [ $i -lt 100 ] && ! grep -q '^ready' "$tmp/$1.out" 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	if ! grep -q '^ready' "$tmp/$1.out"; then
		echo "Bail out! the helper ($1) did not start: $(cat "$tmp/$1.err")"
		exit 1
	fi
}

start_helper main
helper_pid=$started
pid=$helper_pid
seg=/dev/shm/ucma.$pid

# Nothing until someone asks.
[ ! -e "$seg" ]
ok $? "nobody asked yet: no $seg"
# answering_threads PID: how many threads named ucma_stats the process runs.
answering_threads() {
	cat /proc/"$1"/task/*/comm 2>/dev/null | grep -c '^ucma_stats$'
}
[ "$(answering_threads "$pid")" -eq 0 ]
ok $? "and no thread to answer ucmastat"

# Counters.
"$ucmastat" -t $wait_s "$pid" >"$tmp/counters" 2>"$tmp/err"
ok $? "ucmastat PID exits 0 (the compaction thread noticed the request) $(cat "$tmp/err")"
[ -e "$seg" ] && [ ! -e "$seg.request" ] && [ "$(answering_threads "$pid")" -eq 1 ]
ok $? "the process created its segment and its answering thread; ucmastat removed its request"
! grep -q 'did not answer' "$tmp/err"
ok $? "the figures answer this request (no 'did not answer' warning)"
grep -q '^compact_stall [0-9]' "$tmp/counters" && grep -q '^nr_free_pages [0-9]' "$tmp/counters" &&
	grep -q '^cma_default_size 4096$' "$tmp/counters"
ok $? "counters are printed as 'name value'"
grep -q '^halloc 64$' "$tmp/counters"
ok $? "the helper's 64 movable objects are counted"
out=$("$ucmastat" -t $wait_s "$pid" cma_default_used 2>&1)
ok $? "ucmastat PID NAME exits 0"
case $out in
"cma_default_used "*) ok 0 "one named statistic: $out" ;;
*) ok 1 "one named statistic: $out" ;;
esac
"$ucmastat" -t $wait_s "$pid" no_such_statistic >/dev/null 2>&1
[ $? -eq 1 ]
ok $? "an unknown statistic name exits 1"

# The map.
"$ucmastat" -t $wait_s --map --color=never "$pid" >"$tmp/map" 2>"$tmp/err"
ok $? "--map exits 0"
grep -q '^legend:' "$tmp/map" && grep -q '^summary: .*fragmentation score' "$tmp/map" &&
	grep -q 'CMA area default' "$tmp/map"
ok $? "--map has the areas, a legend and a summary"
! grep -q "$(printf '\033')" "$tmp/map"
ok $? "--color=never writes no escape sequences"
grep -q '^ *[0-9][0-9]*  [.UMcLCI]*C' "$tmp/map"
ok $? "the contiguous buffer shows as C"
"$ucmastat" -t $wait_s --map --color=always "$pid" | grep -q "$(printf '\033')\["
ok $? "--color=always colours the map"
long=$(awk '$1 ~ /^[0-9]+$/ && length($2) > 64' "$tmp/map" | wc -l)
[ "$long" -eq 0 ]
ok $? "map lines hold at most 64 pageblocks"

# Watching.
start=$(date +%s)
"$ucmastat" -t $wait_s -w 1 -n 2 "$pid" >"$tmp/watch" 2>"$tmp/err"
ok $? "-w 1 -n 2 exits 0"
lines=$(grep -c '^ *[0-9]' "$tmp/watch")
[ "$lines" -eq 2 ] && grep -q 'free_n' "$tmp/watch"
ok $? "-w 1 -n 2 prints a header and 2 lines ($lines)"
[ $(($(date +%s) - start)) -le 5 ]
ok $? "-w 1 -n 2 takes about a second"
"$ucmastat" -t $wait_s -w 0.2 -n 2 -a "$pid" >"$tmp/watch_all" 2>"$tmp/err"
ok $? "-w 0.2 -n 2 -a exits 0"

# Listing.
"$ucmastat" -t $wait_s --list >"$tmp/list" 2>"$tmp/err"
ok $? "--list exits 0"
awk -v p="$pid" '$1 == p { found = 1 } END { exit !found }' "$tmp/list"
ok $? "--list includes the helper"

# SVG.
"$ucmastat" -t $wait_s --svg "$tmp/map.svg" "$pid" 2>"$tmp/err"
ok $? "--svg exits 0"
if command -v xmllint >/dev/null 2>&1; then
	xmllint --noout "$tmp/map.svg" 2>"$tmp/err"
	ok $? "the SVG is well-formed XML (xmllint)"
else
	grep -q '<svg ' "$tmp/map.svg" && tail -n 1 "$tmp/map.svg" | grep -q '</svg>'
	ok $? "the SVG opens and closes (no xmllint)"
fi
grep -q 'pageblock 0: ' "$tmp/map.svg" && grep -q 'contiguous allocation' "$tmp/map.svg"
ok $? "the SVG has squares with titles and a legend"

# Errors.
missing=$(($(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 4194304) + 1))
"$ucmastat" "$missing" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q 'no process' "$tmp/err"
ok $? "a missing process: exit 1 and 'no process' (rc $rc)"
"$ucmastat" -t 0.5 $$ >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q 'does not use ucma' "$tmp/err"
ok $? "a process without ucma: exit 1 and 'does not use ucma' (rc $rc)"
"$ucmastat" notapid >/dev/null 2>&1
[ $? -eq 2 ]
ok $? "a bad argument exits 2"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1 &&
	setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
	setpriv --reuid=65534 --regid=65534 --clear-groups "$ucmastat" "$pid" >/dev/null 2>"$tmp/err"
	rc=$?
	if [ $rc -eq 126 ] || [ $rc -eq 127 ]; then
		skip "user 65534 cannot run $ucmastat"
	else
		[ $rc -eq 1 ] && grep -q 'permission denied' "$tmp/err"
		ok $? "another user's segment: exit 1 and 'permission denied' (rc $rc)"
	fi
else
	skip "needs root and setpriv to read as another user"
fi

# The end of the process removes its segment.
kill "$helper_pid"
wait "$helper_pid"
ok $? "the helper exits 0 on SIGTERM"
helper_pid=
[ ! -e "$seg" ] && [ ! -e "$seg.request" ]
rc=$?
ok $rc "its segment is removed at exit"
[ $rc -eq 0 ] || echo "# left behind: $(ls -l --time-style=+%T.%N "$seg" "$seg.request" 2>&1)"
"$ucmastat" "$pid" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ]
ok $? "ucmastat on the ended process exits 1: $(cat "$tmp/err")"

# Processes nobody inspects leave nothing behind, however they end.
for how in _exit kill; do
	"$helper" $how >"$tmp/$how.out" 2>"$tmp/$how.err"
	p=$(sed -n 's/^ready //p' "$tmp/$how.out")
	[ -n "$p" ] && [ ! -e "/dev/shm/ucma.$p" ]
	ok $? "a process that ends with $how leaves no /dev/shm/ucma.${p:-?}"
done
preload=${UCMA_TEST_LIBDIR:-$builddir/.libs}/libucma-preload.so
if [ -n "${UCMA_TEST_SANITIZER:-}" ]; then
	skip "a sanitizer runtime owns malloc in this build: no preloaded programs"
	skip "a sanitizer runtime owns malloc in this build: no preloaded programs"
elif [ ! -f "$preload" ]; then
	skip "$preload is not built"
	skip "$preload is not built"
else
	LD_PRELOAD=$preload sh -c 'echo $$ >"$1"; ls / >/dev/null; kill -KILL $$' sh "$tmp/p1" \
		2>/dev/null
	p=$(cat "$tmp/p1")
	[ -n "$p" ] && [ ! -e "/dev/shm/ucma.$p" ]
	ok $? "a preloaded shell killed by SIGKILL leaves no /dev/shm/ucma.${p:-?}"
	LD_PRELOAD=$preload sh -c 'echo $$ >"$1"; sort "$2" >/dev/null | cat; exec true' sh \
		"$tmp/p2" "$tmp/counters"
	p=$(cat "$tmp/p2")
	[ -n "$p" ] && [ ! -e "/dev/shm/ucma.$p" ]
	ok $? "a preloaded pipeline leaves no /dev/shm/ucma.${p:-?}"
fi

# A process whose only ucma calls are mallocs, without a compaction
# thread: its allocations notice the request and start the answering thread.
UCMA_COMPACT=off start_helper loop malloc-loop
other_pid=$started
[ ! -e "/dev/shm/ucma.$other_pid" ]
ok $? "a malloc-only process that nobody asked has no segment"
out=$("$ucmastat" -t $wait_s "$other_pid" malloc_nmalloc 2>"$tmp/err")
rc=$?
[ $rc -eq 0 ] && case $out in "malloc_nmalloc "*) true ;; *) false ;; esac &&
	! grep -q 'did not answer' "$tmp/err"
ok $? "ucmastat reads a malloc-only process without the compaction thread: $out"
# Inspected, then killed: the segment stays behind; --prune removes it.
kill -KILL "$other_pid"
wait "$other_pid" 2>/dev/null
[ -e "/dev/shm/ucma.$other_pid" ]
ok $? "a process killed while being inspected leaves its segment"
"$ucmastat" --prune >"$tmp/prune" 2>"$tmp/err"
ok $? "--prune exits 0"
grep -q "removed /dev/shm/ucma.$other_pid (process $other_pid ended)" "$tmp/prune" &&
	[ ! -e "/dev/shm/ucma.$other_pid" ]
ok $? "--prune removes it"
other_pid=

# UCMA_STATS_SHM=on: published from start-up, read even while the process
# sleeps with no ucma thread to answer (the figures then say how old they are).
UCMA_STATS_SHM=on UCMA_COMPACT=off start_helper on
other_pid=$started
[ -e "/dev/shm/ucma.$other_pid" ]
ok $? "UCMA_STATS_SHM=on: the segment exists from start-up"
"$ucmastat" -t 0.5 "$other_pid" halloc >"$tmp/on" 2>"$tmp/err"
rc=$?
# (Published before the helper's allocations: halloc is still 0 there.)
[ $rc -eq 0 ] && grep -q '^halloc 0$' "$tmp/on" && grep -q 'did not answer' "$tmp/err"
ok $? "an idle process without a ucma thread: its start-up figures, with a warning: $(cat "$tmp/err")"
kill "$other_pid"
wait "$other_pid"
[ ! -e "/dev/shm/ucma.$other_pid" ]
ok $? "and removed at exit"
other_pid=

# UCMA_STATS_SHM=off: never.
UCMA_STATS_SHM=off start_helper off
other_pid=$started
"$ucmastat" -t 1 "$other_pid" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ ! -e "/dev/shm/ucma.$other_pid" ] && [ ! -e "/dev/shm/ucma.$other_pid.request" ]
ok $? "UCMA_STATS_SHM=off: no answer, no segment (rc $rc): $(cat "$tmp/err")"
kill "$other_pid"
wait "$other_pid"
other_pid=

echo "1..$n"
[ $failed -eq 0 ]
