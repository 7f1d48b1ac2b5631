## Unit tests of the foundation: buddy allocator, zones, arena, options.

check_PROGRAMS += tests/unit/test_buddy
TESTS += tests/unit/test_buddy
tests_unit_test_buddy_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_buddy_LDADD = $(TEST_LDADD)

## Runs across pageblock boundaries found below more than 1 GiB of
## pageblocks in use.
check_PROGRAMS += tests/unit/test_across_heap
TESTS += tests/unit/test_across_heap
tests_unit_test_across_heap_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_across_heap_LDADD = $(TEST_LDADD)

## Deferred initialisation of pageblocks: the metadata of pageblocks never
## used stays untouched (mincore), and every walk still sees them free.
check_PROGRAMS += tests/unit/test_deferred
TESTS += tests/unit/test_deferred
tests_unit_test_deferred_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_deferred_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/unit/test_config
TESTS += tests/unit/test_config
tests_unit_test_config_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_config_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/unit/test_handles tests/unit/test_cma
TESTS += tests/unit/test_handles tests/unit/test_cma
tests_unit_test_handles_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_handles_LDADD = $(TEST_LDADD)
tests_unit_test_cma_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_cma_LDADD = $(TEST_LDADD)

## The frame layer: CMA areas on files, physical order, PHYS_CONTIG from
## the frame table, ucma_vtophys, memory events, fork.
check_PROGRAMS += tests/unit/test_frames
TESTS += tests/unit/test_frames
tests_unit_test_frames_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_frames_LDADD = $(TEST_LDADD)

## Heap lending: CMA frames behind the malloc heap, taken back with
## userfaultfd write-protection (lend.c).
check_PROGRAMS += tests/unit/test_lend
TESTS += tests/unit/test_lend
tests_unit_test_lend_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_lend_LDADD = $(TEST_LDADD)

## The per-CPU page lists (pcp.c): reuse, the drain on isolation, a
## multithreaded storm under the zone checks, free counts across a drain.
check_PROGRAMS += tests/unit/test_pcp
TESTS += tests/unit/test_pcp
tests_unit_test_pcp_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_pcp_LDADD = $(TEST_LDADD)

## Migration destinations mapped in bulk before the copies (zone.c), and
## migration when MADV_POPULATE_WRITE fails or is unknown.
check_PROGRAMS += tests/unit/test_populate
TESTS += tests/unit/test_populate
tests_unit_test_populate_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_populate_LDADD = $(TEST_LDADD)

## The copy of migrated objects with helper threads (copy.c): every size
## and alignment, threads at once, migration, fork, no helper.
check_PROGRAMS += tests/unit/test_copy
TESTS += tests/unit/test_copy
tests_unit_test_copy_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_copy_LDADD = $(TEST_LDADD)
