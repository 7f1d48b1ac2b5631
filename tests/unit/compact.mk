## Compaction: scanners, skip hints, orders, deferral, slab consolidation,
## and the background thread.
check_PROGRAMS += tests/unit/test_compact
TESTS += tests/unit/test_compact
tests_unit_test_compact_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_compact_LDADD = $(TEST_LDADD)
