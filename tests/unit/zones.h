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

#endif /* UCMA_TEST_ZONES_H */
