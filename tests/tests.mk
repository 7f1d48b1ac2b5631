## Tests: TAP programs under Automake's parallel harness.  Each part of the
## tree keeps its own list in tests/<topic>.mk, included here.
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
TEST_EXTENSIONS = .sh
SH_LOG_DRIVER = $(LOG_DRIVER)
## Every test runs under a time limit (TEST_TIMEOUT seconds, 600 by
## default): a hang fails that test by name, with its threads' stacks.
LOG_COMPILER = $(SHELL) $(top_srcdir)/tests/time-limit.sh
SH_LOG_COMPILER = $(SHELL) $(top_srcdir)/tests/time-limit.sh
## The sanitizers' options the suite needs, then the caller's own, which
## win where they name the same option (TSAN_OPTIONS=die_after_fork=0
## make check).
AM_TESTS_ENVIRONMENT = \
	top_srcdir='$(top_srcdir)'; export top_srcdir; \
	top_builddir='$(top_builddir)'; export top_builddir; \
	UCMA_TEST_LIBDIR='$(abs_top_builddir)/.libs'; export UCMA_TEST_LIBDIR; \
	LSAN_OPTIONS="suppressions=$(abs_top_srcdir)/tests/lsan.supp:print_suppressions=0$${LSAN_OPTIONS:+:$$LSAN_OPTIONS}"; export LSAN_OPTIONS; \
	TSAN_OPTIONS="suppressions=$(abs_top_srcdir)/tests/tsan.supp:halt_on_error=1:second_deadlock_stack=1$${TSAN_OPTIONS:+:$$TSAN_OPTIONS}"; export TSAN_OPTIONS; \
	UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1$${UBSAN_OPTIONS:+:$$UBSAN_OPTIONS}"; export UBSAN_OPTIONS; \
	CC='$(CC)'; export CC; CXX='$(CXX)'; export CXX;
EXTRA_DIST += tests/tap.h tests/testutil.h tests/unit/zones.h tests/lsan.supp tests/tsan.supp tests/time-limit.sh

include tests/unit/unit.mk
include tests/unit/compact.mk
include tests/bench/highalloc.mk
include tests/stress/stress.mk
include tests/bench/zone_cma.mk
include tests/obs.mk
include tests/unit/reliability.mk
include tests/integration/integration.mk
include tests/fuzz/fuzz.mk
include tests/unit/malloc.mk
include tests/bench/bench.mk
include tests/bench/frag.mk
EXTRA_DIST += tests/run-all.sh
## The public header as programs compile it.
TESTS += tests/header_check.sh
EXTRA_DIST += tests/header_check.sh
if ENABLE_ASAN
AM_TESTS_ENVIRONMENT += UCMA_TEST_SANITIZER=asan; export UCMA_TEST_SANITIZER;
endif
if ENABLE_TSAN
AM_TESTS_ENVIRONMENT += UCMA_TEST_SANITIZER=tsan; export UCMA_TEST_SANITIZER;
endif

# TEST_LDADD comes from configure, so Automake cannot see that the test
# programs depend on the test build of the library: say it here.
$(check_PROGRAMS): libucma_test.la

## Race hunting in a ThreadSanitizer build: every threaded test ROUNDS
## times (20 by default), then races and the soak for a minute each.
EXTRA_DIST += tests/tsan-repeat.sh
check-tsan-repeat: $(check_PROGRAMS)
	$(SHELL) $(top_srcdir)/tests/tsan-repeat.sh $(ROUNDS)
.PHONY: check-tsan-repeat
