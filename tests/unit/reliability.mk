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
## in which only the N-th call of that entry fails.
check_PROGRAMS += tests/unit/test_fail_nth
tests_unit_test_fail_nth_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_fail_nth_LDADD = $(TEST_LDADD)
