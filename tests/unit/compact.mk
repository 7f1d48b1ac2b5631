## Compaction: scanners, skip hints, orders, deferral, slab consolidation,
## and the background thread.
check_PROGRAMS += tests/unit/test_compact tests/unit/test_compact_grace
TESTS += tests/unit/test_compact tests/unit/test_compact_grace
tests_unit_test_compact_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_compact_LDADD = $(TEST_LDADD)
tests_unit_test_compact_grace_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_compact_grace_LDADD = $(TEST_LDADD)
