# common.sh - sourced by the integration scripts (POSIX sh).
#
# Finds libucma-preload.so ($UCMA_TEST_LIBDIR, exported by the test
# harness), makes a scratch directory that is removed at exit, prints TAP,
# and runs programs with and without the preload library.  Every program
# runs under timeout(1), so a hang fails its test instead of blocking the
# suite; UCMA_TEST_TIMEOUT overrides the limit in seconds.
#
# SPDX-License-Identifier: MIT

: "${top_srcdir:=.}"
: "${top_builddir:=.}"
: "${UCMA_TEST_LIBDIR:=$top_builddir/.libs}"
PRELOAD_LIB=$UCMA_TEST_LIBDIR/libucma-preload.so
TIMEOUT=${UCMA_TEST_TIMEOUT:-120}
IT_SRC=$top_srcdir/tests/integration
IT_BIN=$top_builddir/tests/integration
tap_n=0
tap_failed=0

skip_all() {
	echo "1..0 # SKIP $*"
	exit 0
}

if [ -n "${UCMA_TEST_SANITIZER:-}" ]; then
	skip_all "a sanitizer runtime owns malloc in this build"
fi
[ -f "$PRELOAD_LIB" ] || skip_all "$PRELOAD_LIB is not built"
command -v timeout >/dev/null 2>&1 || skip_all "timeout(1) is not installed"
case $PRELOAD_LIB in
/*) ;;
*) PRELOAD_LIB=$(pwd)/$PRELOAD_LIB ;;
esac

T=$(mktemp -d "${TMPDIR:-/tmp}/ucma-it.XXXXXX") || exit 99
trap 'rm -rf "$T"' EXIT
trap 'exit 130' HUP INT TERM

ok() {	# ok STATUS DESCRIPTION: a TAP line, passing when STATUS is 0
	tap_n=$((tap_n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $tap_n - $2"
	else
		echo "not ok $tap_n - $2"
		tap_failed=$((tap_failed + 1))
	fi
}

skip() {	# skip REASON
	tap_n=$((tap_n + 1))
	echo "ok $tap_n # SKIP $*"
}

diag() {
	echo "# $*"
}

diag_file() {	# diag_file FILE [LINES]: the first lines of FILE as diagnostics
	[ -s "$1" ] && head -n "${2:-15}" "$1" | sed 's/^/#   /'
	return 0
}

finish() {
	echo "1..$tap_n"
	[ "$tap_failed" -eq 0 ] && exit 0
	exit 1
}

# limited CMD...: CMD under the time limit.
limited() {
	timeout -k 10 "$TIMEOUT" "$@"
}

# preloaded CMD...: CMD under the time limit with libucma-preload.so.  The
# directory goes into LD_LIBRARY_PATH too, so that the uninstalled preload
# library finds the uninstalled libucma.so it depends on.
preloaded() {
	timeout -k 10 "$TIMEOUT" env \
		LD_PRELOAD="$PRELOAD_LIB${LD_PRELOAD:+:$LD_PRELOAD}" \
		LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		"$@"
}

# Explain a failed run: its status, then its standard error.
explain() {	# explain NAME MODE STATUS
	diag "$2 run exited with status $3$( [ "$3" -eq 124 ] && echo ' (timed out)')"
	diag_file "$T/$1.$2.err"
}

# compare NAME DESCRIPTION CMD...: run CMD without, then with the preload
# library; one TAP line, passing when both exit 0 and print the same
# standard output and standard error (the library must not add a word of
# its own).  The outputs stay in $T/NAME.{plain,preload}.{out,err}.
compare() {
	name=$1
	desc=$2
	shift 2
	limited "$@" >"$T/$name.plain.out" 2>"$T/$name.plain.err"
	rc_plain=$?
	preloaded "$@" >"$T/$name.preload.out" 2>"$T/$name.preload.err"
	rc_pre=$?
	if [ "$rc_plain" -eq 0 ] && [ "$rc_pre" -eq 0 ] &&
	   cmp -s "$T/$name.plain.out" "$T/$name.preload.out" &&
	   cmp -s "$T/$name.plain.err" "$T/$name.preload.err"; then
		ok 0 "$desc"
		return 0
	fi
	ok 1 "$desc"
	[ "$rc_plain" -eq 0 ] || explain "$name" plain "$rc_plain"
	[ "$rc_pre" -eq 0 ] || explain "$name" preload "$rc_pre"
	if ! cmp -s "$T/$name.plain.out" "$T/$name.preload.out"; then
		diag "standard output differs:"
		diff "$T/$name.plain.out" "$T/$name.preload.out" >"$T/$name.diff"
		diag_file "$T/$name.diff" 20
		diag "standard error under the preload library:"
		diag_file "$T/$name.preload.err"
	elif ! cmp -s "$T/$name.plain.err" "$T/$name.preload.err"; then
		diag "standard error differs:"
		diff "$T/$name.plain.err" "$T/$name.preload.err" >"$T/$name.diff"
		diag_file "$T/$name.diff" 20
	fi
	return 1
}

# binds_malloc NAME DESCRIPTION CMD...: run CMD with the preload library
# and the dynamic linker's binding log; passes when some process bound
# malloc and free to libucma-preload.so.
binds_malloc() {
	name=$1
	desc=$2
	shift 2
	mkdir -p "$T/$name.ld"
	LD_DEBUG=bindings LD_DEBUG_OUTPUT="$T/$name.ld/log" preloaded "$@" \
		>/dev/null 2>"$T/$name.ld.err"
	rc=$?
	if [ "$rc" -eq 0 ] &&
	   cat "$T/$name.ld"/log* | grep -q "libucma-preload\.so.*normal symbol \`malloc'" &&
	   cat "$T/$name.ld"/log* | grep -q "libucma-preload\.so.*normal symbol \`free'"; then
		ok 0 "$desc"
		return 0
	fi
	ok 1 "$desc"
	[ "$rc" -eq 0 ] || explain "$name" ld "$rc"
	diag "binding log lines naming malloc:"
	cat "$T/$name.ld"/log* 2>/dev/null | grep "\`malloc'" | head -n 5 | sed 's/^/#   /'
	return 1
}

# run_lent PROGRAM: run a TAP program of $IT_BIN under the preload library
# with a small arena whose 32 MiB CMA area (a file of 4 KiB pages, so that
# it has frames whatever the hugetlb pool holds) the heap borrows; exits
# with its status.
run_lent() {
	unset UCMA_PRELOAD_CONTIG_MIN UCMA_CONF
	timeout -k 10 "$TIMEOUT" env \
		UCMA_ARENA_SIZE=96M UCMA_CMA_SIZE=32M UCMA_CMA_POLICY=lend UCMA_HUGEPAGES=none \
		LD_PRELOAD="$PRELOAD_LIB" \
		LD_LIBRARY_PATH="$UCMA_TEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		"$IT_BIN/$1"
	exit $?
}
