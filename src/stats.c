/*
 * stats.c - event counters and the statistics report.
 *
 * Counters are named as in the kernel's /proc/vmstat where one exists, so
 * that a failed contiguous allocation can be explained in familiar terms.
 * Slow-path events are global relaxed atomics (ucma_count()); fast-path
 * malloc counters are kept per thread by malloc.c and summed when read.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#include <errno.h>
#include <string.h>

_Atomic uint64_t ucma_vmstat[UCMA_STAT_NR];

const char *const ucma_vmstat_names[UCMA_STAT_NR] = {
	[UCMA_STAT_COMPACT_STALL] = "compact_stall",
	[UCMA_STAT_COMPACT_SUCCESS] = "compact_success",
	[UCMA_STAT_COMPACT_FAIL] = "compact_fail",
	[UCMA_STAT_COMPACT_MIGRATE_SCANNED] = "compact_migrate_scanned",
	[UCMA_STAT_COMPACT_FREE_SCANNED] = "compact_free_scanned",
	[UCMA_STAT_COMPACT_ISOLATED] = "compact_isolated",
	[UCMA_STAT_COMPACT_DAEMON_WAKE] = "compact_daemon_wake",
	[UCMA_STAT_PGMIGRATE_SUCCESS] = "pgmigrate_success",
	[UCMA_STAT_PGMIGRATE_FAIL] = "pgmigrate_fail",
	[UCMA_STAT_CMA_ALLOC_SUCCESS] = "cma_alloc_success",
	[UCMA_STAT_CMA_ALLOC_FAIL] = "cma_alloc_fail",
	[UCMA_STAT_CMA_RELEASE] = "cma_release",
	[UCMA_STAT_PIN_LONGTERM_MIGRATED] = "pin_longterm_migrated",
	[UCMA_STAT_HALLOC] = "halloc",
	[UCMA_STAT_HFREE] = "hfree",
	[UCMA_STAT_HALLOC_FAIL] = "halloc_fail",
	[UCMA_STAT_PAGE_ALLOC] = "page_alloc",
	[UCMA_STAT_PAGE_FREE] = "page_free",
	[UCMA_STAT_PAGE_ALLOC_FAIL] = "page_alloc_fail",
	[UCMA_STAT_PAGEBLOCK_STEAL] = "pageblock_steal",
	[UCMA_STAT_PURGED_PAGES] = "purged_pages",
	[UCMA_STAT_OVERFLOW_ALLOC] = "overflow_alloc",
	[UCMA_STAT_OVERFLOW_FREE] = "overflow_free",
};

int ucma_stat(const char *name, uint64_t *value)
{
	if (!name || !value) {
		errno = EINVAL;
		return -1;
	}
	for (int i = 0; i < UCMA_STAT_NR; i++) {
		if (strcmp(name, ucma_vmstat_names[i]) == 0) {
			*value = atomic_load_explicit(&ucma_vmstat[i], memory_order_relaxed);
			return 0;
		}
	}
	errno = ENOENT;
	return -1;
}

void ucma_stats_print(FILE *f)
{
	if (!f)
		return;
	for (int i = 0; i < UCMA_STAT_NR; i++)
		fprintf(f, "%s %llu\n", ucma_vmstat_names[i],
			(unsigned long long)atomic_load_explicit(&ucma_vmstat[i],
								 memory_order_relaxed));
}

void ucma_stats_alloc_latency(uint64_t ns, bool migrated)
{
	(void)ns;
	(void)migrated;
}
