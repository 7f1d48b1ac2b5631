## The library.  The same sources are built twice: libucma.la, installed,
## with only the public ucma_* names exported; libucma_test.la, for the test
## programs, with the fault-injection hooks compiled in (UCMA_TEST_HOOKS).
UCMA_SOURCES = \
	src/internal.h \
	src/util.c \
	src/os.h \
	src/os.c \
	src/config.c \
	src/arena.c \
	src/frames.h \
	src/frames.c \
	src/memevent.h \
	src/memevent.c \
	src/buddy.c \
	src/extent.h \
	src/extent.c \
	src/zone.c \
	src/pcp.h \
	src/pcp.c \
	src/lend.h \
	src/lend.c \
	src/raw_syscall.h \
	src/meta.c \
	src/handle.h \
	src/handle.c \
	src/mslab.c \
	src/migrate.c \
	src/copy.c \
	src/copy.h \
	src/cma.h \
	src/cma.c \
	src/compact.c \
	src/compactd.c \
	src/lock.h \
	src/overflow.h \
	src/overflow.c \
	src/slab.h \
	src/slab.c \
	src/tcache.h \
	src/tcache.c \
	src/malloc_fast.h \
	src/malloc_hooks.h \
	src/malloc.c \
	src/stats.c \
	src/shm.h \
	src/shm_writer.h \
	src/shm.c \
	src/shm_server.c \
	src/init.c \
	src/fork.h \
	src/fork.c \
	src/rcu.h \
	src/rcu.c \
	src/node.h \
	src/node.c

## libnuma is not linked: node.c opens it when a placement asks for it.
UCMA_LIBADD = $(URCU_LIBS) -lpthread

lib_LTLIBRARIES += libucma.la
libucma_la_SOURCES = $(UCMA_SOURCES)
libucma_la_CFLAGS = $(AM_CFLAGS) $(NUMA_CFLAGS) $(URCU_CFLAGS) -fvisibility=hidden \
	-ftls-model=initial-exec
libucma_la_LIBADD = $(UCMA_LIBADD)
libucma_la_LDFLAGS = $(AM_LDFLAGS) -version-info $(UCMA_LT_VERSION) \
	-Wl,--version-script=$(top_srcdir)/src/libucma.map -Wl,-z,nodelete
EXTRA_libucma_la_DEPENDENCIES = src/libucma.map
EXTRA_DIST += src/libucma.map

noinst_LTLIBRARIES += libucma_test.la
libucma_test_la_SOURCES = $(UCMA_SOURCES)
libucma_test_la_CFLAGS = $(AM_CFLAGS) $(NUMA_CFLAGS) $(URCU_CFLAGS) -DUCMA_TEST_HOOKS=1 \
	-ftls-model=initial-exec
libucma_test_la_LIBADD = $(UCMA_LIBADD)

## ucmastat: reads the live statistics segment of another process; it does
## not link the library, only shares the segment layout (src/shm.h).
bin_PROGRAMS += ucmastat
ucmastat_SOURCES = src/ucmastat.c src/shm.h
