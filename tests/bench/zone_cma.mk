## The ZONE_CMA experiment: lending on and off, ucma_alloc latency,
## migration throughput against memcpy.  `make bench-zone-cma`.
check_PROGRAMS += tests/bench/bench_zone_cma
tests_bench_bench_zone_cma_CPPFLAGS = $(TEST_CPPFLAGS)
tests_bench_bench_zone_cma_LDADD = $(TEST_LDADD)

.PHONY: bench bench-zone-cma
bench: bench-zone-cma
bench-zone-cma: tests/bench/bench_zone_cma$(EXEEXT)
	./tests/bench/bench_zone_cma$(EXEEXT)

## The page allocator's cost per alloc+free pair against mmap and glibc.
## `make bench-pages`.
check_PROGRAMS += tests/bench/bench_pages
tests_bench_bench_pages_CPPFLAGS = $(TEST_CPPFLAGS)
tests_bench_bench_pages_LDADD = $(TEST_LDADD)

.PHONY: bench-pages
bench: bench-pages
bench-pages: tests/bench/bench_pages$(EXEEXT)
	./tests/bench/bench_pages$(EXEEXT)

## fork() of a process with its heap on lent CMA frames, single- and
## multi-threaded, against the same heap not lent.  `make bench-fork-lend`
## (as root: heap lending needs userfaultfd).
check_PROGRAMS += tests/bench/bench_fork_lend
tests_bench_bench_fork_lend_CPPFLAGS = $(TEST_CPPFLAGS)
tests_bench_bench_fork_lend_LDADD = $(TEST_LDADD)

.PHONY: bench-fork-lend
bench: bench-fork-lend
bench-fork-lend: tests/bench/bench_fork_lend$(EXEEXT)
	./tests/bench/bench_fork_lend$(EXEEXT)

## malloc_trim() of a fragmented heap, alone and while another thread
## allocates: ucma against glibc; then the decay's pass over such a heap.
## `make bench-trim`.
check_PROGRAMS += tests/bench/bench_trim
tests_bench_bench_trim_CPPFLAGS = $(TEST_CPPFLAGS)
tests_bench_bench_trim_LDADD = $(TEST_LDADD)

.PHONY: bench-trim
bench: bench-trim
bench-trim: tests/bench/bench_trim$(EXEEXT)
	./tests/bench/bench_trim$(EXEEXT)
	UCMA_DECAY_MS=200 ./tests/bench/bench_trim$(EXEEXT) decay
