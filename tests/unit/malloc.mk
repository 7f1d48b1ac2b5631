## The malloc family: size classes, thread caches, overflow, start-up,
## and the hostile-input policy (children that must abort).

MALLOC_TESTS = \
	tests/unit/test_malloc \
	tests/unit/test_malloc_abort \
	tests/unit/test_malloc_overflow \
	tests/unit/test_malloc_start \
	tests/unit/test_overflow_cache \
	tests/unit/test_slab_keep

check_PROGRAMS += $(MALLOC_TESTS)
TESTS += $(MALLOC_TESTS)
tests_unit_test_malloc_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_malloc_LDADD = $(TEST_LDADD)
tests_unit_test_malloc_abort_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_malloc_abort_LDADD = $(TEST_LDADD)
tests_unit_test_malloc_overflow_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_malloc_overflow_LDADD = $(TEST_LDADD)
tests_unit_test_malloc_start_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_malloc_start_LDADD = $(TEST_LDADD)
tests_unit_test_overflow_cache_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_overflow_cache_LDADD = $(TEST_LDADD)
tests_unit_test_slab_keep_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_slab_keep_LDADD = $(TEST_LDADD)
