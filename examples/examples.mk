## Example programs a user copies from; built by `make`, each run by
## `make check` (tests/examples.sh), and the guided tour `make demo`.
noinst_PROGRAMS += examples/demo examples/device_buffer examples/handles examples/numa \
	examples/preload examples/phys_contig
examples_demo_LDADD = libucma.la
examples_device_buffer_LDADD = libucma.la $(URING_LIBS)
examples_device_buffer_CFLAGS = $(AM_CFLAGS) $(URING_CFLAGS)
examples_handles_LDADD = libucma.la
examples_numa_LDADD = libucma.la $(NUMA_LIBS)
examples_preload_SOURCES = examples/preload.c
examples_phys_contig_LDADD = libucma.la

TESTS += tests/examples.sh
EXTRA_DIST += tests/examples.sh

## The demonstration: an unmodified program under LD_PRELOAD, then the tour
## (fragment, map, contiguous buffers, compact, map, statistics).  Needs no
## hugepages.
.PHONY: demo
demo: all
	@echo "== 1. an unmodified program under LD_PRELOAD: sort of 200000 lines"
	@seq 200000 | sed 's/^/line /' | shuf --random-source=/dev/zero > demo-input.txt
	LD_PRELOAD=$(abs_top_builddir)/.libs/libucma-preload.so UCMA_STATS=1 \
	  UCMA_STATS_FILE=demo-sort-stats.txt sort demo-input.txt > demo-sorted.txt
	@sort demo-input.txt | cmp - demo-sorted.txt && echo "   same output as without ucma"
	@grep -E '^(malloc_nmalloc|malloc_active|overflow_alloc) ' demo-sort-stats.txt | sed 's/^/   /'
	@echo "== 2. a plain malloc program whose 8 MiB buffer becomes contiguous"
	LD_PRELOAD=$(abs_top_builddir)/.libs/libucma-preload.so UCMA_PRELOAD_CONTIG_MIN=1M \
	  UCMA_STATS=1 UCMA_STATS_FILE=demo-preload-stats.txt ./examples/preload$(EXEEXT)
	@grep -E '^cma_alloc_success ' demo-preload-stats.txt | sed 's/^/   /'
	@echo "== 3. fragmentation, compaction and contiguous buffers"
	UCMASTAT=./ucmastat$(EXEEXT) ./examples/demo$(EXEEXT)
	@rm -f demo-input.txt demo-sorted.txt demo-sort-stats.txt demo-preload-stats.txt
CLEANFILES += demo-input.txt demo-sorted.txt demo-sort-stats.txt demo-preload-stats.txt
