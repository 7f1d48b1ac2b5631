## The LD_PRELOAD malloc interposer (libucma-preload.so).
## A libtool module, so the installed file is exactly libucma-preload.so.
## The allocator is compiled into it, so that malloc and free are
## ucma_malloc()'s and ucma_free()'s fast paths inlined (src/malloc_fast.h)
## and reach the rest with direct calls instead of a PLT call into
## libucma.so (-Bsymbolic-functions binds the library's own calls to its
## own definitions).  It exports the ucma_* interface too,
## under libucma.so's symbol version: in a program that also links -lucma,
## every ucma_* reference binds to the preloaded library, which comes
## first in the lookup order, so the program and its malloc share one
## arena (the libucma.so.0 the program needs is loaded but never called).
## -fno-builtin: preload.c defines malloc and its kin, and the compiler
## must not treat their calls as the standard functions (it could turn
## malloc + memset into calloc there).  longterm.c keeps memory handed to
## mlock() or io_uring registration off CMA frames lent to the heap;
## lend_guard.c keeps the program's close(), close_range(), closefrom(),
## dup2() and dup3() off the library's own descriptors; futex_guard.c keeps
## shared futex words and heap thread stacks off those frames;
## dio_guard.c keeps direct I/O (O_DIRECT reads and writes, io_submit())
## off them, iouring_guard.c the direct reads and writes and the zero-copy
## sends that io_uring submits, zc_guard.c zero-copy sends (MSG_ZEROCOPY)
## and vmsplice(), device_guard.c RDMA regions, VFIO and iommufd DMA
## mappings and AF_XDP areas (interpose.h: what longterm.c shares with
## them).
## UCMA_PRELOAD: the library's own memory calls do not go through those
## interposers at all (src/os.c).
lib_LTLIBRARIES += libucma-preload.la
libucma_preload_la_SOURCES = $(UCMA_SOURCES) preload/preload.c preload/longterm.c \
	preload/lend_guard.c preload/futex_guard.c preload/dio_guard.c preload/zc_guard.c \
	preload/device_guard.c \
	preload/iouring_guard.c \
	preload/interpose.h
libucma_preload_la_CFLAGS = $(AM_CFLAGS) $(NUMA_CFLAGS) $(URCU_CFLAGS) -fvisibility=hidden -DUCMA_PRELOAD=1 \
	-ftls-model=initial-exec -fno-builtin
libucma_preload_la_LIBADD = $(UCMA_LIBADD) -ldl
libucma_preload_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared -no-undefined \
	-Wl,--version-script=$(top_srcdir)/preload/preload.map -Wl,-Bsymbolic-functions \
	-Wl,-z,nodelete
EXTRA_libucma_preload_la_DEPENDENCIES = preload/preload.map
EXTRA_DIST += preload/preload.map
