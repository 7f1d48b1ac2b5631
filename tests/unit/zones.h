/*
 * zones.h - checks of an arena's zones shared by the unit tests that
 * reach inside the library (include internal.h, pcp.h and tap.h first).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_TEST_ZONES_H
#define UCMA_TEST_ZONES_H

/* Every zone of @a passes ucma_zone_check(); otherwise the first failure
 * is a TAP diagnostic, prefixed with @when. */
static inline bool tu_zones_ok(struct ucma_arena *a, const char *when)
{
	char why[256];

	for (int z = 0; z < UCMA_ZONE_NR; z++) {
		if (ucma_zone_check(&a->zones[z], why, sizeof(why)) != 0) {
			diag("%s: zone %s: %s", when, a->zones[z].name, why);
			return false;
		}
	}
	return true;
}

/* Free pages of a zone: on its buddy lists and its per-CPU lists (pcp.c). */
static inline uint64_t tu_zone_free(const struct ucma_zone *z)
{
	return z->free_pages + ucma_pcp_pages(z);
}

/* Runs on the per-CPU lists of @z that start in [start, end), every list
 * lock held meanwhile; with @pages, their pages are added to *@pages. */
static inline unsigned tu_pcp_runs_in(struct ucma_zone *z, uint32_t start, uint32_t end,
				      uint64_t *pages)
{
	unsigned n = 0;

	if (!z->pcp)
		return 0;
	ucma_pcp_lock_all(z);
	for (unsigned c = 0; c < z->nr_pcp; c++)
		for (unsigned k = 0; k < UCMA_PCP_NR_CLASSES; k++)
			for (int mt = 0; mt < UCMA_PCP_NR_MT; mt++)
				for (uint32_t p = z->pcp[c].head[k][mt]; p != UCMA_PFN_NONE;
				     p = z->arena->pages[p].link.next) {
					if (p < start || p >= end)
						continue;
					n++;
					if (pages)
						*pages += ucma_pcp_class_pages(k);
				}
	ucma_pcp_unlock_all(z);
	return n;
}

#endif /* UCMA_TEST_ZONES_H */
