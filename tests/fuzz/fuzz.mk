## Fuzzing.  tests/fuzz/fuzz_ops.c drives the whole API from arbitrary bytes
## and checks every result against a model.  `make check` replays the
## committed inputs (tests/fuzz/corpus and tests/fuzz/regressions) once each
## with an ordinary build of the target (fuzz_replay).  With
## `configure --enable-fuzz`, `make fuzz` builds the libFuzzer target with
## clang and runs it for UCMA_FUZZ_SECONDS (default 60) through
## tests/fuzz/run-fuzz.sh; `make fuzz-build` only builds it.
check_PROGRAMS += tests/fuzz/fuzz_replay
TESTS += tests/fuzz/fuzz_replay
tests_fuzz_fuzz_replay_SOURCES = tests/fuzz/fuzz_ops.c tests/fuzz/fuzz_replay.c
tests_fuzz_fuzz_replay_CPPFLAGS = $(TEST_CPPFLAGS)
tests_fuzz_fuzz_replay_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/fuzz/run-fuzz.sh tests/fuzz/corpus tests/fuzz/regressions

.PHONY: fuzz fuzz-build
if ENABLE_FUZZ
fuzz: config.h
	$(SHELL) $(top_srcdir)/tests/fuzz/run-fuzz.sh $(abs_top_builddir)
fuzz-build: config.h
	$(SHELL) $(top_srcdir)/tests/fuzz/run-fuzz.sh --build-only $(abs_top_builddir)
else
fuzz fuzz-build:
	@echo "the fuzzer needs clang: configure with --enable-fuzz"; exit 1
endif
