## Concurrency stress tests: short runs in `make check`, longer on request
## (UCMA_STRESS_SECONDS, UCMA_SOAK_SECONDS).
check_PROGRAMS += tests/stress/stress_handles
TESTS += tests/stress/stress_handles
tests_stress_stress_handles_CPPFLAGS = $(TEST_CPPFLAGS)
tests_stress_stress_handles_LDADD = $(TEST_LDADD)
