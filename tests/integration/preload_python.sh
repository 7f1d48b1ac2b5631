#!/bin/sh
# preload_python.sh - python3 under libucma-preload.so: an allocation-heavy
# script (dicts, lists, strings, big integers, JSON), once more with large
# requests served as contiguous CMA buffers (UCMA_PRELOAD_CONTIG_MIN), and a
# subset of Python's own test suite, each compared with a run without the
# preload library; and a check that Python's objects really live in ucma's
# arena.
# UCMA_TEST_LONG=1 runs a larger part of the test suite.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

command -v python3 >/dev/null 2>&1 || skip_all "python3 is not installed"
# The interpreter itself, not a wrapper script (pyenv, for one) in front of it.
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
[ -n "$PY" ] && [ -x "$PY" ] || skip_all "cannot locate the python3 interpreter"
export PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1
unset PYTHONMALLOC PYTHONDEVMODE PYTHONSTARTUP
diag "interpreter: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"

compare workload "python3 allocation-heavy script prints the same" \
	"$PY" "$IT_SRC/py_workload.py"

# Objects larger than 512 bytes come from malloc: ask ucma whether it owns
# one.  ucma_owns() is visible through the preload library's dependency.
cat >"$T/owns.py" <<'PYEOF'
import ctypes
lib = ctypes.CDLL(None)
owns = lib.ucma_owns
owns.argtypes = [ctypes.c_void_p]
owns.restype = ctypes.c_int
big = [bytes(100000 + i) for i in range(10)]
print("owned", sum(owns(id(b)) for b in big), "of", len(big))
PYEOF
out=$(preloaded "$PY" "$T/owns.py" 2>"$T/owns.preload.err")
rc=$?
if [ "$rc" -eq 0 ] && [ "$out" = "owned 10 of 10" ]; then
	ok 0 "python3's objects live in ucma's arena ($out)"
else
	ok 1 "python3's objects live in ucma's arena (${out:-no output})"
	explain owns preload "$rc"
fi

# The same script with large requests served from a CMA area: malloc,
# calloc and growing realloc of 256 KiB and more become contiguous buffers.
cat >"$T/contig.py" <<'PYEOF'
import ctypes, runpy, sys
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
stat = ctypes.CDLL(None).ucma_stat
stat.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]
v = ctypes.c_uint64()
stat(b"cma_alloc_success", ctypes.byref(v))
print(v.value, file=sys.stderr)
PYEOF
UCMA_PRELOAD_CONTIG_MIN=256K preloaded "$PY" "$T/contig.py" "$IT_SRC/py_workload.py" \
	>"$T/contig.preload.out" 2>"$T/contig.preload.err"
rc=$?
ncontig=$(tail -n 1 "$T/contig.preload.err")
if [ "$rc" -eq 0 ] && cmp -s "$T/workload.plain.out" "$T/contig.preload.out" &&
   [ "${ncontig:-0}" -gt 0 ] 2>/dev/null; then
	ok 0 "python3 script with UCMA_PRELOAD_CONTIG_MIN=256K prints the same ($ncontig contiguous buffers)"
else
	ok 1 "python3 script with UCMA_PRELOAD_CONTIG_MIN=256K prints the same"
	explain contig preload "$rc"
fi

tests="test_dict test_list test_long test_re test_collections test_heapq test_sort test_string"
[ -n "${UCMA_TEST_LONG:-}" ] &&
	tests="$tests test_bytes test_json test_unicode test_set test_tuple test_deque test_itertools"
if "$PY" -c 'import test.support, test.regrtest' >/dev/null 2>&1; then
	# Timings differ from run to run: compare the exit status and the
	# per-file results only.
	limited "$PY" -m test -q $tests >"$T/regr.plain.out" 2>&1
	rc_plain=$?
	preloaded "$PY" -m test -q $tests >"$T/regr.preload.out" 2>&1
	rc_pre=$?
	for m in plain preload; do
		grep -E '^(Result|Total tests|Total test files)|tests? (OK|failed|skipped)' \
			"$T/regr.$m.out" >"$T/regr.$m.summary"
	done
	if [ "$rc_plain" -eq "$rc_pre" ] && [ "$rc_pre" -ne 124 ] &&
	   cmp -s "$T/regr.plain.summary" "$T/regr.preload.summary"; then
		ok 0 "python3 -m test ($(echo $tests | wc -w) test files): same results, status $rc_pre"
	else
		ok 1 "python3 -m test ($(echo $tests | wc -w) test files): same results"
		diag "exit status $rc_plain without, $rc_pre with the preload library"
		diag "without:"
		diag_file "$T/regr.plain.summary"
		diag "with:"
		tail -n 30 "$T/regr.preload.out" | sed 's/^/#   /'
	fi
	[ "$rc_plain" -eq 0 ] || diag "note: the test suite fails here even without the preload library"
else
	diag "Python's test package is not installed: a larger workload instead"
	compare workload3 "python3 allocation-heavy script at three times the size" \
		"$PY" "$IT_SRC/py_workload.py" 3
fi
finish
