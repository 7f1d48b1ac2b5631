#!/bin/sh
# man_check.sh - the manual pages: each renders without a warning, each .so
# page points at a page that exists and names the function, every function
# declared in include/ucma.h (all exported: src/libucma.map exports ucma_*)
# has a page, every UCMA_* variable of src/config.c is in ucma(7), and every
# page is installed (listed in man/man.mk).
#
# SPDX-License-Identifier: MIT

srcdir=${top_srcdir:-.}
mandir=$srcdir/man
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

if [ ! -d "$mandir" ]; then
	echo "1..0 # SKIP no $mandir"
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/man-check.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# How to render: man(1) as a reader would, else groff alone.
render=
if command -v man >/dev/null 2>&1 && man --help 2>&1 | grep -q -- '--warnings'; then
	render=man
elif command -v groff >/dev/null 2>&1; then
	render=groff
fi

for page in "$mandir"/*.[1-8]; do
	name=${page##*/}
	target=$(sed -n '1s/^\.so  *//p' "$page")
	if [ -n "$target" ]; then
		# A link page: one .so line to an existing page naming this function.
		func=${name%.*}
		lines=$(wc -l <"$page")
		[ "$lines" -eq 1 ] && [ -f "$mandir/${target##*/}" ] &&
			sed -n '/^\.SH NAME/,/^\.SH/p' "$mandir/${target##*/}" |
			grep -q "\\<$func\\>"
		ok $? "$name links to $target, which names $func"
		continue
	fi
	case $render in
	man)
		LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 \
			man --warnings -E UTF-8 -l "$page" >"$tmp/out" 2>"$tmp/err"
		;;
	groff)
		groff -ww -man -z "$page" >"$tmp/out" 2>"$tmp/err"
		;;
	*)
		n=$((n + 1))
		echo "ok $n # SKIP $name: neither man nor groff is installed"
		continue
		;;
	esac
	rc=$?
	[ $rc -eq 0 ] && [ ! -s "$tmp/err" ]
	ok $? "$name renders without warnings ($render)"
	if [ -s "$tmp/err" ]; then
		sed 's/^/# /' "$tmp/err" | head -n 20
	fi
	for section in NAME SYNOPSIS DESCRIPTION "SEE ALSO"; do
		grep -q "^\\.SH \"*$section\"*\$" "$page" || {
			ok 1 "$name has a $section section"
		}
	done
	case $name in
	*.3)
		missing=
		for section in "RETURN VALUE" ERRORS "THREAD SAFETY" EXAMPLES; do
			grep -q "^\\.SH \"*$section\"*\$" "$page" || missing="$missing '$section'"
		done
		[ -z "$missing" ]
		ok $? "$name has RETURN VALUE, ERRORS, THREAD SAFETY, EXAMPLES${missing:+ (missing$missing)}"
		;;
	esac
done

# Every function of the public header has a page.
funcs=$(sed -n 's/.*\<\(ucma_[a-z_0-9]*\)(.*/\1/p' "$srcdir/include/ucma.h" | sort -u)
[ -n "$funcs" ]
ok $? "include/ucma.h declares functions"
for f in $funcs; do
	[ -f "$mandir/$f.3" ]
	ok $? "$f has a manual page"
done

# Every UCMA_* variable of the option table is in ucma(7).
if [ -f "$srcdir/src/config.c" ]; then
	vars=$(sed -n 's/.*"\(UCMA_[A-Z_0-9]*\)", T_[A-Z]*.*/\1/p' "$srcdir/src/config.c" | sort -u)
	for v in $vars UCMA_CONF; do
		grep -q "^\\.B[IR]* $v" "$mandir/ucma.7"
		ok $? "ucma(7) describes $v"
	done
fi

# Every page is installed.
for page in "$mandir"/*.[1-8]; do
	name=${page##*/}
	grep -q "man/$name\\>" "$mandir/man.mk"
	ok $? "$name is listed in man/man.mk"
done

echo "1..$n"
[ $failed -eq 0 ]
