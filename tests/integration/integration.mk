## Integration tests: real programs (python3, sort, gcc, git, a C++ program,
## a forking multi-threaded C program) run under libucma-preload.so and
## compared with runs without it, plus a C check of the whole interposed
## interface.  The scripts print TAP and find the library through
## $UCMA_TEST_LIBDIR.  The check programs link the installed flavour of the
## library (libucma.la), the one the preload library links too, so that
## the program and the preload share one arena; -no-install builds them
## without libtool's wrapper script, so they can run under LD_PRELOAD
## directly.

check_PROGRAMS += tests/integration/preload_check
tests_integration_preload_check_SOURCES = tests/integration/preload_check.c
tests_integration_preload_check_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
tests_integration_preload_check_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_integration_preload_check_LDADD = libucma.la -ldl
tests_integration_preload_check_LDFLAGS = -no-install

check_PROGRAMS += tests/integration/preload_longterm
tests_integration_preload_longterm_SOURCES = tests/integration/preload_longterm.c
tests_integration_preload_longterm_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
tests_integration_preload_longterm_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS) -fno-builtin
tests_integration_preload_longterm_LDADD = libucma.la $(URING_LIBS)
tests_integration_preload_longterm_LDFLAGS = -no-install

check_PROGRAMS += tests/integration/preload_lendguard
tests_integration_preload_lendguard_SOURCES = tests/integration/preload_lendguard.c
tests_integration_preload_lendguard_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
tests_integration_preload_lendguard_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_integration_preload_lendguard_LDADD = libucma.la
tests_integration_preload_lendguard_LDFLAGS = -no-install

## preload_verbs links a stand-in for libibverbs (fake_verbs.c), built as
## a shared library with libibverbs's symbol versions: no RDMA device or
## rdma-core is needed.  -rpath makes libtool build it shared.  Its calls
## of its own exported functions go through the PLT, as libibverbs's do
## (built by GCC, which keeps them interposable): clang binds them inside
## the library otherwise, where the preload library never sees them.
check_LTLIBRARIES += tests/integration/libfake_verbs.la
tests_integration_libfake_verbs_la_SOURCES = tests/integration/fake_verbs.c \
	tests/integration/fake_verbs.h
tests_integration_libfake_verbs_la_CFLAGS = $(AM_CFLAGS) -fsemantic-interposition
tests_integration_libfake_verbs_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
tests_integration_libfake_verbs_la_LDFLAGS = -avoid-version -rpath /nowhere \
	-Wl,--version-script=$(top_srcdir)/tests/integration/fake_verbs.map
EXTRA_tests_integration_libfake_verbs_la_DEPENDENCIES = tests/integration/fake_verbs.map

check_PROGRAMS += tests/integration/preload_verbs
tests_integration_preload_verbs_SOURCES = tests/integration/preload_verbs.c
tests_integration_preload_verbs_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
tests_integration_preload_verbs_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_integration_preload_verbs_LDADD = libucma.la tests/integration/libfake_verbs.la -ldl
tests_integration_preload_verbs_LDFLAGS = -no-install

check_PROGRAMS += tests/integration/preload_verbs_dl
tests_integration_preload_verbs_dl_SOURCES = tests/integration/preload_verbs_dl.c
tests_integration_preload_verbs_dl_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
tests_integration_preload_verbs_dl_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_integration_preload_verbs_dl_LDADD = libucma.la -ldl
tests_integration_preload_verbs_dl_LDFLAGS = -no-install
EXTRA_tests_integration_preload_verbs_dl_DEPENDENCIES = tests/integration/libfake_verbs.la

check_PROGRAMS += tests/integration/preload_futex
tests_integration_preload_futex_SOURCES = tests/integration/preload_futex.c
tests_integration_preload_futex_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
tests_integration_preload_futex_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_integration_preload_futex_LDADD = libucma.la -ldl
tests_integration_preload_futex_LDFLAGS = -no-install

check_PROGRAMS += tests/integration/preload_sighandler
tests_integration_preload_sighandler_SOURCES = tests/integration/preload_sighandler.c
tests_integration_preload_sighandler_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
tests_integration_preload_sighandler_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_integration_preload_sighandler_LDADD = libucma.la
tests_integration_preload_sighandler_LDFLAGS = -no-install

check_PROGRAMS += tests/integration/fork_threads tests/integration/cxx_workload
tests_integration_fork_threads_SOURCES = tests/integration/fork_threads.c
tests_integration_fork_threads_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_integration_cxx_workload_SOURCES = tests/integration/cxx_workload.cc
tests_integration_cxx_workload_CXXFLAGS = $(AM_CXXFLAGS) -std=gnu++17 -Wall -Wextra

TESTS += \
	tests/integration/preload_api.sh \
	tests/integration/preload_longterm.sh \
	tests/integration/preload_verbs.sh \
	tests/integration/preload_verbs_dl.sh \
	tests/integration/preload_lendguard.sh \
	tests/integration/preload_futex.sh \
	tests/integration/preload_sighandler.sh \
	tests/integration/preload_contig.sh \
	tests/integration/preload_contig_small.sh \
	tests/integration/preload_contig_dontfork.sh \
	tests/integration/preload_fork_files.sh \
	tests/integration/preload_fork_helpers.sh \
	tests/integration/preload_python.sh \
	tests/integration/preload_tools.sh \
	tests/integration/preload_lend.sh \
	tests/integration/preload_compilers.sh
EXTRA_DIST += \
	tests/integration/fake_verbs.map \
	tests/integration/preload_verbs.sh \
	tests/integration/preload_verbs_dl.sh \
	tests/integration/common.sh \
	tests/integration/lent.h \
	tests/integration/py_workload.py \
	tests/integration/lend_workload.py \
	tests/integration/preload_lend.sh \
	tests/integration/preload_api.sh \
	tests/integration/preload_longterm.sh \
	tests/integration/preload_lendguard.sh \
	tests/integration/preload_futex.sh \
	tests/integration/preload_sighandler.sh \
	tests/integration/preload_contig.sh \
	tests/integration/preload_contig_small.sh \
	tests/integration/preload_contig_dontfork.sh \
	tests/integration/preload_fork_files.sh \
	tests/integration/preload_fork_helpers.sh \
	tests/integration/preload_python.sh \
	tests/integration/preload_tools.sh \
	tests/integration/preload_compilers.sh
