## DPDK's fragmentation workload: after filling a 512 MiB CMA area with
## 16-512 KiB movable and contiguous buffers and freeing 60% at random, how
## many 2, 8 and 32 MiB contiguous (and physically contiguous) buffers can
## be had, as a fraction of what the free memory could hold; the time
## ucma_init spends sorting frames.  `make bench-frag` (also `make bench`).
check_PROGRAMS += tests/bench/bench_frag
tests_bench_bench_frag_CPPFLAGS = $(TEST_CPPFLAGS)
tests_bench_bench_frag_LDADD = $(TEST_LDADD)

.PHONY: bench bench-frag
bench: bench-frag
bench-frag: tests/bench/bench_frag$(EXEEXT)
	./tests/bench/bench_frag$(EXEEXT)
