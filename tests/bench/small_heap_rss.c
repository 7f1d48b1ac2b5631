/*
 * small_heap_rss.c - the resident memory of a small heap: malloc COUNT
 * blocks of SIZE bytes (default 1000 x 64 B), write them, and print the
 * process's VmRSS and VmHWM (kB) from /proc/self/status.  Links nothing
 * of ucma: run it plain (glibc) or with LD_PRELOAD of an allocator, so
 * the figures compare the allocators' fixed costs on a tiny program.
 *
 *   ./tests/bench/small_heap_rss [COUNT [SIZE]]
 *   LD_PRELOAD=.libs/libucma-preload.so ./tests/bench/small_heap_rss
 *
 * Output: "rss_kb N hwm_kb N".
 *
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long status_kb(const char *key)
{
	char line[256];
	size_t n = strlen(key);
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, n) == 0 && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	long count = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
	long size = argc > 2 ? strtol(argv[2], NULL, 10) : 64;
	char **blocks;

	if (count <= 0 || size <= 0) {
		fprintf(stderr, "usage: %s [COUNT [SIZE]] (both positive)\n", argv[0]);
		return 2;
	}
	blocks = malloc((size_t)count * sizeof(*blocks));
	if (!blocks) {
		perror("malloc");
		return 1;
	}
	for (long i = 0; i < count; i++) {
		blocks[i] = malloc((size_t)size);
		if (!blocks[i]) {
			perror("malloc");
			return 1;
		}
		memset(blocks[i], (int)i, (size_t)size);
	}
	printf("rss_kb %ld hwm_kb %ld\n", status_kb("VmRSS"), status_kb("VmHWM"));
	for (long i = 0; i < count; i++)
		free(blocks[i]);
	free(blocks);
	return 0;
}
