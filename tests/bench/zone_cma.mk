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
