#!/bin/sh
# preload_compilers.sh - gcc and g++ under libucma-preload.so: the driver,
# cc1, as and ld all run with the preload library and must produce the
# same object code as without it; the compiled program must print the
# same, also when it runs with the preload library itself.
#
# SPDX-License-Identifier: MIT
. "${top_srcdir:-.}/tests/integration/common.sh"

export LC_ALL=C
unset UCMA_PRELOAD_CONTIG_MIN UCMA_CONF UCMA_STATS

# ---- gcc ----------------------------------------------------------------------
# A generated program with enough functions to keep cc1 busy for a moment.
gen_c() {
	echo '#include <stdio.h>'
	echo '#include <stdlib.h>'
	echo '#include <string.h>'
	i=0
	while [ $i -lt 150 ]; do
		cat <<CEOF
static unsigned long f$i(unsigned long x)
{
	char buf[64];
	unsigned long h = x * $((i * 2 + 1))ul;

	snprintf(buf, sizeof(buf), "%lu-%d", x, $i);
	for (size_t k = 0; buf[k]; k++)
		h = h * 31 + (unsigned char)buf[k];
	return h ^ (h >> $((i % 13 + 1)));
}
CEOF
		i=$((i + 1))
	done
	echo 'int main(void)'
	echo '{'
	echo '	unsigned long h = 0;'
	echo '	char *p = NULL;'
	echo '	size_t n = 0;'
	i=0
	while [ $i -lt 150 ]; do
		echo "	h = f$i(h + $i);"
		echo "	p = realloc(p, n += $((i * 37 % 5000 + 1)));"
		echo "	memset(p, $((i % 256)), n);"
		echo "	h += (unsigned char)p[n / 2];"
		i=$((i + 1))
	done
	echo '	free(p);'
	printf '%s\n' '	printf("%lu %zu\n", h, n);'
	echo '	return 0;'
	echo '}'
}

if command -v gcc >/dev/null 2>&1; then
	mkdir -p "$T/plain" "$T/preload"
	gen_c >"$T/plain/prog.c"
	cp "$T/plain/prog.c" "$T/preload/prog.c"
	(cd "$T/plain" && limited gcc -O2 -c prog.c -o prog.o && limited gcc prog.o -o prog) \
		>"$T/gcc.plain.out" 2>"$T/gcc.plain.err"
	rc_plain=$?
	(cd "$T/preload" && preloaded gcc -O2 -c prog.c -o prog.o && preloaded gcc prog.o -o prog) \
		>"$T/gcc.preload.out" 2>"$T/gcc.preload.err"
	rc_pre=$?
	if [ "$rc_plain" -eq 0 ] && [ "$rc_pre" -eq 0 ] &&
	   cmp -s "$T/plain/prog.o" "$T/preload/prog.o"; then
		ok 0 "gcc -O2 makes the same object code under the preload library"
	else
		ok 1 "gcc -O2 makes the same object code under the preload library"
		[ "$rc_plain" -eq 0 ] || explain gcc plain "$rc_plain"
		[ "$rc_pre" -eq 0 ] || explain gcc preload "$rc_pre"
	fi
	if [ -x "$T/plain/prog" ] && [ -x "$T/preload/prog" ]; then
		limited "$T/plain/prog" >"$T/prog.plain.out" 2>&1
		r1=$?
		limited "$T/preload/prog" >"$T/prog.built.out" 2>&1
		r2=$?
		preloaded "$T/preload/prog" >"$T/prog.preload.out" 2>"$T/prog.preload.err"
		r3=$?
		if [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ] &&
		   cmp -s "$T/prog.plain.out" "$T/prog.built.out" &&
		   cmp -s "$T/prog.plain.out" "$T/prog.preload.out"; then
			ok 0 "the compiled program prints the same, also under the preload library"
		else
			ok 1 "the compiled program prints the same, also under the preload library"
			diag "statuses $r1 $r2 $r3"
			diag_file "$T/prog.preload.err"
		fi
	else
		ok 1 "the compiled program prints the same (it was not built)"
	fi
	binds_malloc gcc "cc1's malloc and free bind to libucma-preload.so" \
		gcc -O2 -c "$T/plain/prog.c" -o "$T/bind.o"
else
	skip "gcc is not installed"
	skip "gcc is not installed"
	skip "gcc is not installed"
fi

# ---- g++ ----------------------------------------------------------------------
# A real C++ translation unit: the standard headers make cc1plus allocate.
if command -v g++ >/dev/null 2>&1; then
	mkdir -p "$T/plain" "$T/preload"
	cp "$IT_SRC/cxx_workload.cc" "$T/plain/w.cc"
	cp "$IT_SRC/cxx_workload.cc" "$T/preload/w.cc"
	(cd "$T/plain" && limited g++ -std=gnu++17 -O1 -c w.cc -o w.o) \
		>"$T/gxx.plain.out" 2>"$T/gxx.plain.err"
	rc_plain=$?
	(cd "$T/preload" && preloaded g++ -std=gnu++17 -O1 -c w.cc -o w.o) \
		>"$T/gxx.preload.out" 2>"$T/gxx.preload.err"
	rc_pre=$?
	if [ "$rc_plain" -eq 0 ] && [ "$rc_pre" -eq 0 ] &&
	   cmp -s "$T/plain/w.o" "$T/preload/w.o"; then
		ok 0 "g++ -O1 makes the same object code under the preload library"
	else
		ok 1 "g++ -O1 makes the same object code under the preload library"
		[ "$rc_plain" -eq 0 ] || explain gxx plain "$rc_plain"
		[ "$rc_pre" -eq 0 ] || explain gxx preload "$rc_pre"
	fi
else
	skip "g++ is not installed"
fi
finish
