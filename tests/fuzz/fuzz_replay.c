/*
 * fuzz_replay.c - runs the fuzz target of fuzz_ops.c once on each
 * committed input, without libFuzzer, as a TAP test of `make check`.
 *
 * With arguments, each is a file or a directory of inputs; without, the
 * directories tests/fuzz/corpus and tests/fuzz/regressions under
 * $top_srcdir (set by the test harness).  An input on which the target
 * finds a model mismatch aborts the program with the target's message, so
 * the harness reports the test as failed; every input that passes is one
 * "ok" line.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tap.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_file(const char *path)
{
	static uint8_t buf[1 << 16];
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f) {
		ok(0, "%s: %s", path, strerror(errno));
		return;
	}
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	printf("# %s (%zu bytes)\n", path, n);
	fflush(stdout);
	LLVMFuzzerTestOneInput(buf, n);
	ok(1, "%s", path);
}

/* Every regular file of @dir, in name order, so runs are reproducible. */
static void run_dir(const char *dir)
{
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	DIR *d = opendir(dir);

	if (!d) {
		diag("%s: %s", dir, strerror(errno));
		return;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || strcmp(e->d_name, "README") == 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			names = realloc(names, cap * sizeof(*names));
			if (!names)
				bail_out("out of memory");
		}
		if (asprintf(&names[n], "%s/%s", dir, e->d_name) < 0)
			bail_out("out of memory");
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), name_cmp);
	for (size_t i = 0; i < n; i++) {
		struct stat st;

		if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
			run_file(names[i]);
		free(names[i]);
	}
	free(names);
}

static void run_path(const char *path)
{
	struct stat st;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		run_dir(path);
	else
		run_file(path);
}

int main(int argc, char **argv)
{
	plan_no_plan();
	LLVMFuzzerInitialize(&argc, &argv);
	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			run_path(argv[i]);
	} else {
		const char *top = getenv("top_srcdir");
		char path[4096];

		if (!top)
			top = ".";
		snprintf(path, sizeof(path), "%s/tests/fuzz/corpus", top);
		run_dir(path);
		snprintf(path, sizeof(path), "%s/tests/fuzz/regressions", top);
		run_dir(path);
	}
	if (tap_n == 0)
		skip_all("no inputs found (top_srcdir is %s)",
			 getenv("top_srcdir") ? getenv("top_srcdir") : "unset");
	return done();
}
