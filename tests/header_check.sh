#!/bin/sh
# header_check.sh - include/ucma.h as a program's compiler sees it: it
# compiles alone as C and as C++ with every warning an error, correct use
# of the malloc family draws no warning (a failed ucma_realloc() keeps the
# block, so using it afterwards is no use after free), and the attributes
# on the allocating calls reach the compiler: it knows a block's size
# (__builtin_object_size, an access past the end), and with GCC 11 and
# later that ucma_free() gives the block back and free() does not; and
# GCC makes the same code around ucma_malloc() as around malloc().
#
# SPDX-License-Identifier: MIT

srcdir=${top_srcdir:-.}
cc=${CC:-cc}
cxx=${CXX:-c++}
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

if ! command -v "${cc%% *}" >/dev/null 2>&1; then
	echo "1..0 # SKIP no C compiler ($cc)"
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/header-check.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
flags="-I$srcdir/include -O2 -Wall -Wextra -Werror"

# compile LANG-COMPILER FILE [FLAGS...]: compile FILE to $tmp/out.o, the
# compiler's messages in $tmp/log
compile() {
	c=$1 f=$2
	shift 2
	# shellcheck disable=SC2086 # $c and $flags are word lists
	$c $flags "$@" -c "$f" -o "$tmp/out.o" >"$tmp/log" 2>&1
}

printf '#include <ucma.h>\n' >"$tmp/alone.c"
compile "$cc" "$tmp/alone.c" -std=c11 -pedantic
ok $? "ucma.h compiles alone as C11 with -pedantic -Werror"
if command -v "${cxx%% *}" >/dev/null 2>&1; then
	cp "$tmp/alone.c" "$tmp/alone.cc"
	compile "$cxx" "$tmp/alone.cc" -std=c++11
	ok $? "ucma.h compiles alone as C++11 with -Werror"
else
	echo "ok $((n = n + 1)) # SKIP no C++ compiler ($cxx)"
fi

cat >"$tmp/good.c" <<'EOF'
#include <string.h>
#include <ucma.h>

int use(void);
int use(void)
{
	char *p = ucma_malloc(100), *q;
	int *v = ucma_calloc(8, sizeof(int));
	void *a = ucma_aligned_alloc(64, 256), *m = ucma_memalign(32, 48);
	int r;

	if (!p)
		return -1;
	memset(p, 1, 100);
	q = ucma_realloc(p, 200);
	if (!q) {
		r = p[99];	/* the block stays when realloc fails */
		ucma_free(p);
		return r;
	}
	r = q[0] + (v ? v[7] : 0);
	ucma_free(q);
	ucma_try_free(v);	/* no deallocator to the compiler, no warning */
	ucma_free(a);
	ucma_free(m);
	return r;
}
EOF
compile "$cc" "$tmp/good.c"
ok $? "correct use of the malloc family compiles without a warning"
[ -s "$tmp/log" ] && sed 's/^/# /' "$tmp/log"

# The size of a block is known: the test of a size the compiler cannot
# prove leaves a call to an undefined function in the object.
cat >"$tmp/size.c" <<'EOF'
#include <ucma.h>

void size_unknown(void);
void *sizes(void);
void *sizes(void)
{
	char *p = ucma_malloc(100);
	int *v = ucma_calloc(10, sizeof(int));

	if (__builtin_object_size(p, 0) != 100 || __builtin_object_size(v, 0) != 40)
		size_unknown();
	ucma_free(v);
	return p;
}
EOF
if compile "$cc" "$tmp/size.c" && ! nm "$tmp/out.o" | grep -q size_unknown; then
	ok 0 "the compiler knows the size of a block from ucma_malloc() and ucma_calloc()"
else
	ok 1 "the compiler knows the size of a block from ucma_malloc() and ucma_calloc()"
	sed 's/^/# /' "$tmp/log"
fi

# GCC's warnings: an access past the end needs its object-size analysis,
# a deallocator its malloc(dealloc) attribute, which came with GCC 11.
gcc_major=0
$cc --version 2>/dev/null | grep -qi clang ||
	gcc_major=$($cc -dumpversion 2>/dev/null | cut -d. -f1)
case $gcc_major in '' | *[!0-9]*) gcc_major=0 ;; esac

if [ "$gcc_major" -lt 11 ]; then
	echo "ok $((n = n + 1)) # SKIP compile-time bounds warnings: GCC 11 or later ($cc)"
else
	cat >"$tmp/past.c" <<'EOF'
#include <ucma.h>

void past(void);
void past(void)
{
	char *p = ucma_malloc(8);

	if (p)
		p[12] = 1;
	ucma_free(p);
}
EOF
	compile "$cc" "$tmp/past.c"
	rc=$?
	[ $rc -ne 0 ] && grep -Eq 'array-bounds|stringop-overflow' "$tmp/log"
	ok $? "a store past the end of an 8-byte block is an error at compile time"
fi

if [ "$gcc_major" -lt 11 ]; then
	echo "ok $((n = n + 1)) # SKIP deallocator attributes need GCC 11 or later ($cc)"
else
	cat >"$tmp/mismatch.c" <<'EOF'
#include <stdlib.h>
#include <ucma.h>

void mismatch(void);
void mismatch(void)
{
	free(ucma_malloc(8));
}
EOF
	compile "$cc" "$tmp/mismatch.c"
	rc=$?
	[ $rc -ne 0 ] && grep -q 'mismatched-dealloc' "$tmp/log"
	ok $? "free() of a block from ucma_malloc() is an error at compile time"
fi

# The code around the calls is the code around malloc(): GCC knows the
# alignment of what its builtin malloc() returns, and the header's
# assume_aligned must say the same, or GCC expands a short memset() of
# the block otherwise (with 16, a loop of byte stores for the tail).
# The assembly of one function written twice, once with each call.
if [ "$gcc_major" -eq 0 ]; then
	echo "ok $((n = n + 1)) # SKIP code around malloc(): GCC only ($cc)"
elif ! $cc -dumpmachine 2>/dev/null | grep -q '^x86_64'; then
	echo "ok $((n = n + 1)) # SKIP code around malloc(): x86-64 only, where ucma.h states GCC's 8 bytes"
else
	for fn in malloc ucma_malloc; do
		cat >"$tmp/fill_$fn.c" <<EOF
#include <stdlib.h>
#include <string.h>
#include <ucma.h>

void *fill(size_t n, int v);
void *fill(size_t n, int v)
{
	char *p = $fn(n);

	if (p)
		memset(p, v, n < 64 ? n : 64);
	return p;
}
EOF
		# shellcheck disable=SC2086 # $cc and $flags are word lists
		$cc $flags -fno-asynchronous-unwind-tables -S "$tmp/fill_$fn.c" \
			-o "$tmp/fill_$fn.s" >"$tmp/log" 2>&1 || break
		grep -Ev '^[[:space:]]*\.(file|ident)' "$tmp/fill_$fn.s" |
			sed 's/ucma_malloc/malloc/g' >"$tmp/fill_$fn.cmp"
	done
	cmp -s "$tmp/fill_malloc.cmp" "$tmp/fill_ucma_malloc.cmp"
	ok $? "GCC makes the same code around ucma_malloc() as around malloc()"
	[ -s "$tmp/log" ] && sed 's/^/# /' "$tmp/log"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
