## The LD_PRELOAD malloc interposer (libucma-preload.so).
## A libtool module, so the installed file is exactly libucma-preload.so.
## It links against libucma.la: a program that preloads it and also links
## -lucma has one arena.  -fno-builtin: this file defines malloc and its
## kin, and the compiler must not treat its own calls to them as the
## standard functions (it could turn malloc + memset into calloc here).
lib_LTLIBRARIES += libucma-preload.la
libucma_preload_la_SOURCES = preload/preload.c
libucma_preload_la_CFLAGS = $(AM_CFLAGS) -fno-builtin -ftls-model=initial-exec
libucma_preload_la_LIBADD = libucma.la -ldl
libucma_preload_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared -no-undefined
