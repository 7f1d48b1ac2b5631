/*
 * demo.c - the guided tour behind `make demo`: reserve the arena, show the
 * backing of each zone, and print the statistics report.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <ucma.h>

int main(void)
{
	if (ucma_init(NULL) != 0) {
		fprintf(stderr, "demo: ucma_init: %s\n", strerror(errno));
		return 1;
	}
	printf("ucma demo: NORMAL zone backed by %s, CMA zone by %s\n",
	       ucma_backing_name("normal"), ucma_backing_name("cma"));
	ucma_stats_print(stdout);
	return 0;
}
