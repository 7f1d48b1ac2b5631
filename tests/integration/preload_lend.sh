#!/bin/sh
# preload_lend.sh - unmodified programs whose heap lives on frames the CMA
# area lends it (UCMA_CMA_POLICY=lend), while contiguous buffers
# (UCMA_PRELOAD_CONTIG_MIN) make the library take those frames back by
# write-protect, copy and remap during the run.  Each program's output is
# compared with a run without the preload library, and its statistics
# must show that lending and taking back really happened: a run in which
# nothing was taken back would prove nothing.
#
# Heap lending needs a userfaultfd with write-protection for shmem
# (root, CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1 or /dev/userfaultfd)
# and Linux 6.4 or later; without it every test is skipped with the
# library's own reason.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

export LC_ALL=C TZ=UTC
unset UCMA_PRELOAD_CONTIG_MIN UCMA_CONF UCMA_ARENA_SIZE UCMA_CMA_SIZE UCMA_STATS \
	UCMA_STATS_FILE UCMA_HUGEPAGES UCMA_VERBOSE

# A small arena: a NORMAL zone of 224 MiB and a CMA area of 32 MiB on shmem
# frames, so that the heap borrows frames as soon as it grows and the
# contiguous buffers soon need them back.
LEND_ENV="UCMA_ARENA_SIZE=256M UCMA_CMA_SIZE=32M UCMA_CMA_POLICY=lend UCMA_HUGEPAGES=none"

# Can this process lend its heap at all?  The library says why not.
env $LEND_ENV UCMA_VERBOSE=1 LD_PRELOAD="$PRELOAD_LIB" \
	LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	"$IT_BIN/cxx_workload" >/dev/null 2>"$T/probe.err"
if ! grep -q 'lending the CMA areas to the heap: on' "$T/probe.err"; then
	why=$(grep 'lending the CMA areas to the heap' "$T/probe.err" | head -n 1 | sed 's/^ucma: //')
	skip_all "${why:-heap lending did not start}"
fi

# stat FILE NAME: the value of one counter in a statistics report (0 if absent).
stat() {
	v=$(awk -v n="$2" '$1 == n { print $2; exit }' "$1" 2>/dev/null)
	echo "${v:-0}"
}

# lent_and_taken NAME DESCRIPTION: one TAP line, passing when the report
# $T/NAME.st.* of the program's main process shows frames lent to the heap
# and taken back by copying, and no contiguous allocation failed.
lent_and_taken() {
	f=$(grep -l '^lend_heap_lent' "$T/$1".st.* 2>/dev/null | head -n 1)
	lent=$(stat "$f" lend_heap_lent)
	moved=$(stat "$f" lend_heap_migrated)
	cfail=$(stat "$f" cma_alloc_fail)
	if [ -n "$f" ] && [ "$lent" -gt 0 ] && [ "$moved" -gt 0 ] && [ "$cfail" -eq 0 ]; then
		ok 0 "$2 ($lent pageblocks lent, $moved taken back by copying)"
	else
		ok 1 "$2"
		diag "report ${f:-missing}: lend_heap_lent $lent, lend_heap_migrated $moved, cma_alloc_fail $cfail"
	fi
}

# ---- python3: dicts, strings and a second thread on lent frames ------------
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
if [ -n "$PY" ] && [ -x "$PY" ]; then
	export PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 PYTHONMALLOC=malloc
	compare python "python3 with its heap on lent frames, 1 MiB buffers taking them back: same digest" \
		env $LEND_ENV UCMA_PRELOAD_CONTIG_MIN=512K UCMA_STATS=1 \
		UCMA_STATS_FILE="$T/python.st.%p" "$PY" "$IT_SRC/lend_workload.py"
	lent_and_taken python "python3: the heap borrowed frames and gave them back by copying"
	unset PYTHONMALLOC
else
	skip "python3 is not installed"
	skip "python3 is not installed"
fi

# ---- sort: an external merge with two threads ------------------------------
awk 'BEGIN {
	srand(20241204);
	for (i = 0; i < 200000; i++)
		printf "%08d %s\n", int(rand() * 100000000), substr("abcdefghijklmnopqrstuvwxyz", 1 + int(rand() * 20), 6);
}' >"$T/sort.in"
if command -v sort >/dev/null 2>&1; then
	mkdir -p "$T/sorttmp"
	compare sort "sort -S 8M --parallel=2 with its buffers contiguous and its heap on lent frames" \
		env $LEND_ENV UCMA_PRELOAD_CONTIG_MIN=256K UCMA_STATS=1 UCMA_STATS_FILE="$T/sort.st.%p" \
		sort -S 8M -T "$T/sorttmp" --parallel=2 -k1,1n "$T/sort.in"
	f=$(ls "$T"/sort.st.* 2>/dev/null | head -n 1)
	lent=$(stat "$f" lend_heap_lent)
	if [ "$lent" -gt 0 ]; then
		ok 0 "sort: its heap borrowed $lent pageblocks"
	else
		ok 1 "sort: its heap borrowed frames"
		diag "report ${f:-missing}: lend_heap_lent $lent"
	fi
else
	skip "sort is not installed"
	skip "sort is not installed"
fi

# ---- fork while threads allocate, heap on lent frames ----------------------
compare fork_threads "fork while threads allocate on lent frames: parent and children keep their data" \
	env $LEND_ENV "$IT_BIN/fork_threads"

finish
