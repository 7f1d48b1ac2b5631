## Reliability of the foundation: every backing mode, placement options,
## injected operating-system faults, (ASan build) poisoned free pages, and
## the hugepage pool the tests reserve, given back however they end.

check_PROGRAMS += tests/unit/test_backing tests/unit/test_faults tests/unit/test_asan_uaf \
	tests/unit/test_testutil
TESTS += tests/unit/test_backing tests/unit/test_faults tests/unit/test_asan_uaf \
	tests/unit/test_testutil
tests_unit_test_backing_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_backing_LDADD = $(TEST_LDADD)
tests_unit_test_faults_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_faults_LDADD = $(TEST_LDADD)
tests_unit_test_asan_uaf_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_asan_uaf_LDADD = $(TEST_LDADD)
tests_unit_test_testutil_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_testutil_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/RELIABILITY.md

## The fail-nth sweep (tests/unit/test_fail_nth.c): for each failing entry
## of the operating-system table and N = 1, 2, ..., a run of one workload
## in which only the N-th call of that entry fails.  One test per op, so
## that make -j spreads the ops over the cores and each op has its own
## .log and .trs: each op is a one-line file tests/unit/fail-nth/OP.fnth
## that the program takes as the op to sweep.  A test extension with its
## own LOG_COMPILER says that once, where fifteen scripts would say it
## fifteen times.  madvise, by far the longest, comes first of them so
## that it starts first.
FAIL_NTH_TESTS = tests/unit/fail-nth/madvise.fnth tests/unit/fail-nth/uffd_ioctl.fnth \
	tests/unit/fail-nth/mmap.fnth tests/unit/fail-nth/mremap.fnth \
	tests/unit/fail-nth/pread.fnth tests/unit/fail-nth/pwrite.fnth \
	tests/unit/fail-nth/munmap.fnth tests/unit/fail-nth/thread_create.fnth \
	tests/unit/fail-nth/memfd_create.fnth tests/unit/fail-nth/ftruncate.fnth \
	tests/unit/fail-nth/userfaultfd.fnth tests/unit/fail-nth/mlock.fnth \
	tests/unit/fail-nth/munlock.fnth tests/unit/fail-nth/mbind.fnth \
	tests/unit/fail-nth/fallocate.fnth
check_PROGRAMS += tests/unit/test_fail_nth
tests_unit_test_fail_nth_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_fail_nth_LDADD = $(TEST_LDADD)
TESTS += $(FAIL_NTH_TESTS)
EXTRA_DIST += $(FAIL_NTH_TESTS)
TEST_EXTENSIONS += .fnth
FNTH_LOG_DRIVER = $(LOG_DRIVER)
## Each run has its own time limit (30 s, in the program); the sweep of one
## op is up to a few hundred runs, so the whole test gets 30 minutes
## rather than time-limit.sh's 600 s, unless TEST_TIMEOUT says otherwise.
FNTH_LOG_COMPILER = env TEST_TIMEOUT=$${TEST_TIMEOUT:-1800} \
	$(SHELL) $(top_srcdir)/tests/time-limit.sh ./tests/unit/test_fail_nth$(EXEEXT)
## The sanitizer builds sweep a few runs of each op (-m), spread over its
## calls so that they reach past start-up: a run costs about 1 s in the
## normal build, 2 s under AddressSanitizer and 10 s under
## ThreadSanitizer, and the normal build sweeps every run.  The counts keep
## each sanitizer build's sweep near three minutes with -j2 on a virtual
## machine whose page faults are slow (there, -m 20 in the ASan build
## was 514 s of test time over its fifteen ops).
if ENABLE_ASAN
AM_FNTH_LOG_FLAGS = -m 10
endif
if ENABLE_TSAN
AM_FNTH_LOG_FLAGS = -m 2
endif
