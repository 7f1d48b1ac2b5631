## Observability: statistics, the live statistics segment, ucmastat and
## the manual pages.
check_PROGRAMS += tests/unit/test_stats tests/integration/ucma_stat_helper
TESTS += tests/unit/test_stats tests/integration/test_ucmastat.sh tests/man_check.sh
tests_unit_test_stats_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_stats_LDADD = $(TEST_LDADD)
tests_integration_ucma_stat_helper_CPPFLAGS = $(TEST_CPPFLAGS)
tests_integration_ucma_stat_helper_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/integration/test_ucmastat.sh tests/man_check.sh
