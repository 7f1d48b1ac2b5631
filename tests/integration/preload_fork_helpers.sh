#!/bin/sh
# preload_fork_helpers.sh - forks made while another thread's migration
# starts the copy helper thread, whose creation allocates through the
# preloaded calloc(): no fork may wait for a hold whose holder waits for
# the malloc locks the fork took, and no child may inherit the object's
# entry held (preload_check fork_helpers).  The helpers start once per
# process, so the check runs in ROUNDS processes (40 by default): before
# the fix, one process in four to ten failed.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

unset UCMA_CONF UCMA_CMA_AREAS UCMA_CMA_DONTFORK
rounds=${ROUNDS:-40}
failed=0
i=0
while [ "$i" -lt "$rounds" ]; do
	i=$((i + 1))
	preloaded env UCMA_COMPACT=off "$IT_BIN/preload_check" fork_helpers \
		>"$T/fh.$i.out" 2>"$T/fh.$i.err"
	rc=$?
	if [ "$rc" -ne 0 ] || grep -q "stays held" "$T/fh.$i.err"; then
		# (A failing process stalls 2 s a fork: one is enough.)
		failed=1
		diag "process $i exited with status $rc"
		diag_file "$T/fh.$i.out"
		diag_file "$T/fh.$i.err"
		break
	fi
done
ok "$failed" "$i processes forking while a move starts the copy helpers"
finish
