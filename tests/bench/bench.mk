## The malloc benchmark: glibc, jemalloc, mimalloc, tcmalloc and ucma on the
## same workloads, each case in its own process (tests/bench/malloc.sh
## installs the other allocators if it can and prints the tables).
## `make bench-malloc`, or `make bench` for every benchmark.
## Two programs from one source: bench_malloc links nothing of ucma, so
## that the runs under glibc and the preloaded allocators carry no
## library but theirs (libucma.so and libnuma added half a MiB to every
## one of them); bench_malloc_ucma calls ucma_malloc() and friends
## directly (--ucma).
check_PROGRAMS += tests/bench/bench_malloc tests/bench/bench_malloc_ucma
tests_bench_bench_malloc_SOURCES = tests/bench/bench_malloc.c
tests_bench_bench_malloc_CPPFLAGS = $(AM_CPPFLAGS)
tests_bench_bench_malloc_LDADD = -lpthread
## Real executables in the build tree (no libtool wrapper script), so the
## driver can preload allocators into the program itself.
tests_bench_bench_malloc_LDFLAGS = $(AM_LDFLAGS) -no-install
tests_bench_bench_malloc_ucma_SOURCES = tests/bench/bench_malloc.c
tests_bench_bench_malloc_ucma_CPPFLAGS = $(AM_CPPFLAGS) -DBENCH_MALLOC_UCMA
tests_bench_bench_malloc_ucma_LDADD = libucma.la -lpthread
tests_bench_bench_malloc_ucma_LDFLAGS = $(AM_LDFLAGS) -no-install
EXTRA_DIST += tests/bench/malloc.sh tests/bench/common.sh tests/bench/RESULTS.md

.PHONY: bench bench-malloc
bench: bench-malloc
bench-malloc: tests/bench/bench_malloc$(EXEEXT) tests/bench/bench_malloc_ucma$(EXEEXT) \
	      libucma-preload.la
	top_builddir=$(top_builddir) $(SHELL) $(top_srcdir)/tests/bench/malloc.sh

## The resident memory of a tiny program (1000 blocks of 64 B) under glibc,
## mimalloc and libucma-preload.so: the allocators' fixed cost.  The program
## links nothing of ucma.  `make bench-small-rss`.
check_PROGRAMS += tests/bench/small_heap_rss
tests_bench_small_heap_rss_SOURCES = tests/bench/small_heap_rss.c
tests_bench_small_heap_rss_CPPFLAGS =
tests_bench_small_heap_rss_LDFLAGS = -no-install

.PHONY: bench-small-rss
bench: bench-small-rss
bench-small-rss: tests/bench/small_heap_rss$(EXEEXT) libucma-preload.la
	@mi=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2; \
	for run in 1 2 3; do \
		echo "glibc        $$(./tests/bench/small_heap_rss$(EXEEXT))"; \
		if [ -f "$$mi" ]; then \
			echo "mimalloc     $$(LD_PRELOAD=$$mi ./tests/bench/small_heap_rss$(EXEEXT))"; \
		fi; \
		echo "ucma-preload $$(LD_PRELOAD=$(abs_top_builddir)/.libs/libucma-preload.so \
			./tests/bench/small_heap_rss$(EXEEXT))"; \
	done

## Reaching a movable object: pin + unpin and the read side against two
## compare-and-swap and a plain load.  `make bench-handles`.
check_PROGRAMS += tests/bench/bench_handles
tests_bench_bench_handles_SOURCES = tests/bench/bench_handles.c
tests_bench_bench_handles_CPPFLAGS = $(AM_CPPFLAGS)
tests_bench_bench_handles_LDADD = libucma.la -lpthread

.PHONY: bench-handles
bench: bench-handles
bench-handles: tests/bench/bench_handles$(EXEEXT)
	UCMA_COMPACT=0 ./tests/bench/bench_handles$(EXEEXT)

## The ZONE_CMA experiment for an unmodified program: heap lending on and
## off under LD_PRELOAD.  heap_lend_workload links nothing of ucma.
## `make bench-heap-lend`.
check_PROGRAMS += tests/bench/heap_lend_workload
tests_bench_heap_lend_workload_SOURCES = tests/bench/heap_lend_workload.c
tests_bench_heap_lend_workload_CPPFLAGS =
tests_bench_heap_lend_workload_LDADD = -ldl
tests_bench_heap_lend_workload_LDFLAGS = -no-install
EXTRA_DIST += tests/bench/heap_lend.sh

.PHONY: bench-heap-lend
bench: bench-heap-lend
bench-heap-lend: tests/bench/heap_lend_workload$(EXEEXT) libucma-preload.la
	top_builddir=$(top_builddir) $(SHELL) $(top_srcdir)/tests/bench/heap_lend.sh

## The cost of the preloaded futex guards: interposed calls against the C
## library's own, without the library, with lending off and on.
## futex_guard_cost links nothing of ucma.  `make bench-futex-guard`.
check_PROGRAMS += tests/bench/futex_guard_cost
tests_bench_futex_guard_cost_SOURCES = tests/bench/futex_guard_cost.c
tests_bench_futex_guard_cost_CPPFLAGS =
tests_bench_futex_guard_cost_LDADD = -ldl -lpthread
tests_bench_futex_guard_cost_LDFLAGS = -no-install
EXTRA_DIST += tests/bench/futex_guard.sh

.PHONY: bench-futex-guard
bench: bench-futex-guard
bench-futex-guard: tests/bench/futex_guard_cost$(EXEEXT) libucma-preload.la
	top_builddir=$(top_builddir) $(SHELL) $(top_srcdir)/tests/bench/futex_guard.sh

## What a fork costs under each allocator, in a process that never had a
## thread and in one that has.  fork_cost links nothing of ucma.
## `make bench-fork`.
check_PROGRAMS += tests/bench/fork_cost
tests_bench_fork_cost_SOURCES = tests/bench/fork_cost.c
tests_bench_fork_cost_CPPFLAGS =
tests_bench_fork_cost_LDADD = -lpthread
tests_bench_fork_cost_LDFLAGS = -no-install
EXTRA_DIST += tests/bench/fork_cost.sh

.PHONY: bench-fork
bench: bench-fork
bench-fork: tests/bench/fork_cost$(EXEEXT) libucma-preload.la
	top_builddir=$(top_builddir) $(SHELL) $(top_srcdir)/tests/bench/fork_cost.sh

## The cost of the io_uring guard on syscall(SYS_io_uring_enter): a ring
## the library saw set up, one it did not (the fdinfo listing), and no
## guard, in one run.  iouring_guard_cost links nothing of ucma.
## `make bench-iouring-guard`.
check_PROGRAMS += tests/bench/iouring_guard_cost
tests_bench_iouring_guard_cost_SOURCES = tests/bench/iouring_guard_cost.c
tests_bench_iouring_guard_cost_CPPFLAGS =
tests_bench_iouring_guard_cost_LDADD = -ldl
tests_bench_iouring_guard_cost_LDFLAGS = -no-install
EXTRA_DIST += tests/bench/iouring_guard.sh

.PHONY: bench-iouring-guard
bench: bench-iouring-guard
bench-iouring-guard: tests/bench/iouring_guard_cost$(EXEEXT) libucma-preload.la
	top_builddir=$(top_builddir) $(SHELL) $(top_srcdir)/tests/bench/iouring_guard.sh
