/*
 * preload.c - a plain C program that knows nothing of ucma: it only calls
 * malloc and free.  Run it under LD_PRELOAD to put its heap in the ucma
 * arena; with UCMA_PRELOAD_CONTIG_MIN its large buffers become contiguous,
 * device-ready buffers from the CMA areas:
 *
 *   LD_PRELOAD=libucma-preload.so UCMA_PRELOAD_CONTIG_MIN=1M UCMA_STATS=1 ./preload
 *
 * The statistics printed at exit (cma_alloc_success) show which requests
 * ucma served as contiguous buffers.
 *
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	char *small[1000];
	char *large;
	size_t total = 0;

	for (int i = 0; i < 1000; i++) {
		small[i] = malloc(16 + (size_t)i * 8);
		if (!small[i])
			return 1;
		memset(small[i], i, 16 + (size_t)i * 8);
		total += 16 + (size_t)i * 8;
	}
	large = malloc(8u << 20);	/* a frame buffer, say */
	if (!large)
		return 1;
	memset(large, 0xff, 8u << 20);
	printf("preload: %zu bytes in 1000 small blocks, one 8 MiB buffer at %p\n", total,
	       (void *)large);
	free(large);
	for (int i = 0; i < 1000; i++)
		free(small[i]);
	return 0;
}
