## Concurrency stress tests: short runs in `make check`, longer on request
## (UCMA_STRESS_SECONDS, UCMA_SOAK_SECONDS).
check_PROGRAMS += tests/stress/stress_handles
TESTS += tests/stress/stress_handles
tests_stress_stress_handles_CPPFLAGS = $(TEST_CPPFLAGS)
tests_stress_stress_handles_LDADD = $(TEST_LDADD)

## Soak: every kind of allocation from several threads with checksums;
## UCMA_SOAK_SECONDS (default 10; tests/run-all.sh sets 60 for its normal
## build).  fork_ops: fork and exec amid allocations and compaction, and a
## thread cancelled while it holds a pin.
check_PROGRAMS += tests/stress/soak tests/stress/fork_ops
TESTS += tests/stress/soak tests/stress/fork_ops
tests_stress_soak_CPPFLAGS = $(TEST_CPPFLAGS)
tests_stress_soak_LDADD = $(TEST_LDADD)
tests_stress_fork_ops_CPPFLAGS = $(TEST_CPPFLAGS)
tests_stress_fork_ops_LDADD = $(TEST_LDADD)

## races: legal calls racing each other (pin against the free and reuse of
## a handle, fork against the compaction thread's park handshake, an
## unlock without a lock).
check_PROGRAMS += tests/stress/races
TESTS += tests/stress/races
tests_stress_races_CPPFLAGS = $(TEST_CPPFLAGS)
tests_stress_races_LDADD = $(TEST_LDADD)

## hangs: deadlocks between fork, grace periods and pins, each scenario in
## a child process waited for with a time limit.
check_PROGRAMS += tests/stress/hangs
TESTS += tests/stress/hangs
tests_stress_hangs_CPPFLAGS = $(TEST_CPPFLAGS)
tests_stress_hangs_LDADD = $(TEST_LDADD)
