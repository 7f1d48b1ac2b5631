## Unit tests of the foundation: buddy allocator, zones, arena, options.

check_PROGRAMS += tests/unit/test_buddy
TESTS += tests/unit/test_buddy
tests_unit_test_buddy_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_buddy_LDADD = $(TEST_LDADD)
