#!/bin/sh
# preload_tools.sh - everyday programs under libucma-preload.so, each
# compared with a run without it: sort(1) of a few megabytes (in memory and
# with an external merge), a git session in a scratch repository, a C++
# program, and a C program that forks while its threads allocate.  Also:
# sort's malloc and free really bind to the preload library, a bad
# UCMA_ARENA_SIZE gives one message while the program still runs right,
# UCMA_STATS=1 reports at exit though ls closes its standard error, and
# libnuma is loaded only when UCMA_NODE asks for a placement.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

export LC_ALL=C TZ=UTC
unset UCMA_PRELOAD_CONTIG_MIN UCMA_CONF UCMA_ARENA_SIZE UCMA_STATS

# ---- sort -------------------------------------------------------------------
# About 4 MiB of lines with a random word and a number, always the same.
awk 'BEGIN {
	srand(20240101);
	for (i = 0; i < 120000; i++) {
		w = "";
		n = 3 + int(rand() * 20);
		for (j = 0; j < n; j++)
			w = w sprintf("%c", 97 + int(rand() * 26));
		printf "%s %d %s\n", w, int(rand() * 1000000), substr(w, 1, 5);
	}
}' >"$T/sort.in"
diag "sort input: $(wc -c <"$T/sort.in") bytes"
if command -v sort >/dev/null 2>&1; then
	compare sort "sort of a generated file prints the same" \
		sort "$T/sort.in"
	mkdir -p "$T/sorttmp"
	compare sort_merge "sort -S 256K -k2,2n (external merge, 2 threads) prints the same" \
		sort -S 256K -T "$T/sorttmp" --parallel=2 -k2,2n -k1,1 "$T/sort.in"
	compare sort_uniq "sort -u -r prints the same" sort -u -r "$T/sort.in"
	binds_malloc sort "sort's malloc and free bind to libucma-preload.so" \
		sort "$T/sort.in"
else
	skip "sort is not installed"
	skip "sort is not installed"
	skip "sort is not installed"
	skip "sort is not installed"
fi

# ---- git --------------------------------------------------------------------
# A session whose output depends on nothing but its inputs: fixed identity
# and dates, no user or system configuration, no pager.
git_session() {	# git_session DIR: the transcript on standard output
	mkdir -p "$1" && cd "$1" || return 1
	git init -q -b main . || return 1
	i=0
	while [ $i -lt 40 ]; do
		awk -v n=$i 'BEGIN { for (k = 0; k < 400 + n * 10; k++) print "file", n, "line", k, k * n }' \
			>"f$i.txt"
		i=$((i + 1))
	done
	git add . && git commit -q -m "first: 40 files" || return 1
	git checkout -q -b topic
	sed -i 's/line 1[0-9]/LINE/' f1.txt f2.txt f3.txt
	echo "topic" >topic.txt
	git add -A && git commit -q -m "topic: edits" || return 1
	git checkout -q main
	sed -i 's/line 30/line thirty/' f30.txt
	git commit -q -a -m "main: one edit" || return 1
	git merge -q --no-edit topic || return 1
	git log --graph --stat --format='%H %an <%ae> %ad %s' --date=iso-strict
	git show --format=%H HEAD~1 | head -n 40
	git diff --stat HEAD~2 HEAD
	git gc -q && git fsck --no-progress --strict && git log --oneline | wc -l
	git cat-file -p HEAD^{tree} | head -n 5
}

if command -v git >/dev/null 2>&1; then
	export GIT_AUTHOR_NAME="ucma test" GIT_AUTHOR_EMAIL="test@example.org"
	export GIT_COMMITTER_NAME="ucma test" GIT_COMMITTER_EMAIL="test@example.org"
	export GIT_AUTHOR_DATE="2024-01-02T03:04:05+0000"
	export GIT_COMMITTER_DATE="2024-01-02T03:04:05+0000"
	export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_PAGER=cat PAGER=cat
	export HOME="$T/home"
	mkdir -p "$HOME"
	# Every git process runs under the time limit; the second session
	# also under the preload library.
	mkdir -p "$T/bin-plain" "$T/bin-preload"
	GIT=$(command -v git)
	printf '#!/bin/sh\nexec timeout -k 10 %s %s "$@"\n' "$TIMEOUT" "$GIT" >"$T/bin-plain/git"
	printf '#!/bin/sh\nexec timeout -k 10 %s env LD_PRELOAD="%s" LD_LIBRARY_PATH="%s" %s "$@"\n' \
		"$TIMEOUT" "$PRELOAD_LIB" "$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		"$GIT" >"$T/bin-preload/git"
	chmod +x "$T/bin-plain/git" "$T/bin-preload/git"
	(PATH="$T/bin-plain:$PATH"; git_session "$T/git-plain") >"$T/git.plain.out" 2>"$T/git.plain.err"
	rc_plain=$?
	(PATH="$T/bin-preload:$PATH"; git_session "$T/git-preload") >"$T/git.preload.out" \
		2>"$T/git.preload.err"
	rc_pre=$?
	if [ "$rc_plain" -eq 0 ] && [ "$rc_pre" -eq 0 ] && [ -s "$T/git.plain.out" ] &&
	   cmp -s "$T/git.plain.out" "$T/git.preload.out" &&
	   cmp -s "$T/git.plain.err" "$T/git.preload.err"; then
		ok 0 "git init/add/commit/merge/log/gc/fsck: same transcript ($(wc -l <"$T/git.plain.out") lines)"
	else
		ok 1 "git init/add/commit/merge/log/gc/fsck: same transcript"
		[ "$rc_plain" -eq 0 ] || explain git plain "$rc_plain"
		[ "$rc_pre" -eq 0 ] || explain git preload "$rc_pre"
		diff "$T/git.plain.out" "$T/git.preload.out" >"$T/git.diff"
		diff "$T/git.plain.err" "$T/git.preload.err" >>"$T/git.diff"
		diag_file "$T/git.diff" 20
	fi
else
	skip "git is not installed"
fi

# ---- C++ and fork with threads ------------------------------------------------
compare cxx "C++ program (new/delete, vector, string, map, shared_ptr, exceptions)" \
	"$IT_BIN/cxx_workload"
compare fork_threads "fork while threads allocate: parent and children keep their data" \
	"$IT_BIN/fork_threads"

# ---- a bad variable ---------------------------------------------------------
UCMA_ARENA_SIZE=junk preloaded "$IT_BIN/cxx_workload" >"$T/junk.preload.out" \
	2>"$T/junk.preload.err"
rc=$?
nmsg=$(grep -c 'UCMA_ARENA_SIZE' "$T/junk.preload.err")
if [ "$rc" -eq 0 ] && [ "$nmsg" -eq 1 ] && cmp -s "$T/cxx.plain.out" "$T/junk.preload.out"; then
	ok 0 "UCMA_ARENA_SIZE=junk: one message, and the program runs as before"
	diag_file "$T/junk.preload.err" 3
else
	ok 1 "UCMA_ARENA_SIZE=junk: one message, and the program runs as before"
	diag "status $rc, $nmsg lines naming UCMA_ARENA_SIZE"
	diag_file "$T/junk.preload.err"
fi

# ---- the report at exit of a program that closes its standard error ---------
# ls(1) closes descriptor 2 at exit (gnulib's close_stdout), before the
# report of UCMA_STATS=1 is written: the report goes to the standard error
# the program started with.
UCMA_STATS=1 preloaded ls "$T" >/dev/null 2>"$T/stats_ls.err"
rc=$?
n=$(grep -c '^compact_stall ' "$T/stats_ls.err")
if [ "$rc" -eq 0 ] && [ "$n" -eq 1 ]; then
	ok 0 "UCMA_STATS=1 ls: the report reaches standard error though ls closed it"
else
	ok 1 "UCMA_STATS=1 ls: the report reaches standard error though ls closed it"
	diag "status $rc, $n report lines seen"
	diag_file "$T/stats_ls.err"
fi

# The program closes the library's copy of standard error and puts a file
# of its own at its number (256) before it closes descriptor 2: the report
# must not land in the program's file.
UCMA_STATS=1 preloaded "$IT_BIN/preload_check" stats_fd "$T/stats_fd.out" \
	2>"$T/stats_fd.err"
rc=$?
if [ "$rc" -eq 0 ] && [ "$(cat "$T/stats_fd.out")" = "program data" ]; then
	ok 0 "UCMA_STATS=1: a file the program put at the number of the library's copy of standard error gets no report"
else
	ok 1 "UCMA_STATS=1: a file the program put at the number of the library's copy of standard error gets no report"
	diag "status $rc; the program's file:"
	diag_file "$T/stats_fd.out" 5
fi

# ---- NUMA placement ---------------------------------------------------------
# libnuma is opened only when UCMA_NODE asks for a placement: its start-up
# (stdio reads of /proc and sysfs) made every preloaded program larger.
# And a node number is checked after libnuma has started: checked before,
# under the preload library, node 0 itself was refused.
maps_numa() {	# maps_numa NAME [VAR=VALUE...]: libnuma's mappings in cat(1),
	name=$1	# which allocates its buffer, so ucma starts
	shift
	timeout -k 10 "$TIMEOUT" env "$@" LD_PRELOAD="$PRELOAD_LIB" \
		LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR" cat /proc/self/maps >"$T/$name.out" \
		2>"$T/$name.err"
	rc=$?
	n=$(grep -c 'libnuma' "$T/$name.out")
}
maps_numa numa_default
if [ "$rc" -eq 0 ] && [ "$n" -eq 0 ] && [ ! -s "$T/numa_default.err" ]; then
	ok 0 "without UCMA_NODE, libnuma is not loaded"
else
	ok 1 "without UCMA_NODE, libnuma is not loaded"
	diag "status $rc, $n mappings of libnuma"
	diag_file "$T/numa_default.err"
fi
maps_numa numa_node0 UCMA_NODE=0
if [ "$rc" -eq 0 ] && [ "$n" -gt 0 ] && ! grep -q 'UCMA_NODE' "$T/numa_node0.err"; then
	ok 0 "UCMA_NODE=0: libnuma is loaded and node 0 is accepted"
else
	ok 1 "UCMA_NODE=0: libnuma is loaded and node 0 is accepted"
	diag "status $rc, $n mappings of libnuma"
	diag_file "$T/numa_node0.err"
fi
maps_numa numa_node1023 UCMA_NODE=1023
if [ "$rc" -eq 0 ] && [ "$(grep -c "UCMA_NODE='1023': unknown node" "$T/numa_node1023.err")" -eq 1 ]; then
	ok 0 "UCMA_NODE=1023, a node this machine lacks: one message naming it"
else
	ok 1 "UCMA_NODE=1023, a node this machine lacks: one message naming it"
	diag "status $rc"
	diag_file "$T/numa_node1023.err"
fi
finish
