## The kernel's stress-highalloc in user space: how much of the free memory
## of the CMA areas can be had as 2, 8 and 32 MiB contiguous blocks after a
## fragmenting workload, with compaction off, in the background only, and
## direct; pin latency while compacting; compaction throughput against
## memcpy, alone, beside a reader thread and beside a busy thread.
## `make bench-highalloc` (also part of `make bench`).
check_PROGRAMS += tests/bench/bench_highalloc
tests_bench_bench_highalloc_CPPFLAGS = $(TEST_CPPFLAGS)
tests_bench_bench_highalloc_LDADD = $(TEST_LDADD)

.PHONY: bench bench-highalloc
bench: bench-highalloc
bench-highalloc: tests/bench/bench_highalloc$(EXEEXT)
	./tests/bench/bench_highalloc$(EXEEXT)
