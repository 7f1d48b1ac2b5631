/*
 * demo.c - the guided tour behind `make demo`.
 *
 * 1. Reserve an arena: a NORMAL zone and a CMA area.
 * 2. Fill it with movable objects and free most of them at random: the
 *    free memory is now scattered in small holes (fragmented).
 * 3. Show the arena as a map of pageblocks (ucmastat --map, reading this
 *    process's live statistics segment from outside).
 * 4. Ask for contiguous buffers without migration (UCMA_ALLOC_NOWAIT): few
 *    succeed, however much memory is free.
 * 5. Compact, and show the map again: the free memory is contiguous.
 * 6. Ask again: the buffers come at once; one more ucma_alloc() migrates
 *    what is in its way.  Every object's data is checked throughout.
 * 7. Print the statistics report.
 *
 * Works with or without hugepages.  UCMASTAT names the ucmastat program
 * (default: ./ucmastat, as `make demo` runs it from the build directory).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucma.h>

#define ARENA (256u << 20)
#define CMA   (128u << 20)
#define MAXOBJ 40000
#define BLOCK (2u << 20)

static ucma_handle_t obj[MAXOBJ];
static int nobj;

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void show_map(const char *title)
{
	const char *tool = getenv("UCMASTAT") ? getenv("UCMASTAT") : "./ucmastat";
	char cmd[512];

	printf("\n== %s\n", title);
	fflush(stdout);
	/* The map ucmastat draws is the one this process last published. */
	if (ucma_stats_refresh() != 0)
		printf("(live statistics unavailable: %s)\n", strerror(errno));
	snprintf(cmd, sizeof(cmd), "%s --map %d", tool, (int)getpid());
	if (system(cmd) != 0)
		printf("(the map needs the ucmastat program: set UCMASTAT)\n");
}

/* How many 2 MiB blocks can be had now without moving anything? */
static int grab_blocks(void **blocks, int max, unsigned flags)
{
	int n = 0;

	while (n < max && (blocks[n] = ucma_alloc(BLOCK, BLOCK, flags)) != NULL)
		n++;
	return n;
}

static int verify(void)
{
	int bad = 0;

	ucma_read_lock();
	for (int i = 0; i < nobj; i++) {
		const unsigned char *p;

		if (!obj[i])
			continue;
		p = ucma_deref(obj[i]);
		if (!p || p[0] != (unsigned char)i || p[ucma_hsize(obj[i]) - 1] != (unsigned char)~i)
			bad++;
	}
	ucma_read_unlock();
	return bad;
}

int main(void)
{
	struct ucma_config cfg = { .arena_size = ARENA, .cma_size = CMA };
	void *blocks[64];
	uint64_t s = 88172645463325252ull, v;
	size_t live = 0;
	int n, m, freed = 0;

	printf("ucma demo: a %u MiB arena with a %u MiB CMA area\n", ARENA >> 20, CMA >> 20);
	if (ucma_init(&cfg) != 0) {
		fprintf(stderr, "demo: ucma_init: %s\n", strerror(errno));
		return 1;
	}
	printf("backing: NORMAL zone %s, CMA area %s\n", ucma_backing_name("normal"),
	       ucma_backing_name("cma"));

	/* Fill: movable objects go to the CMA area first (it is lent). */
	while (nobj < MAXOBJ) {
		size_t size = 1024u << (next_rand(&s) % 7);	/* 1 KiB .. 64 KiB */
		unsigned char *p;

		obj[nobj] = ucma_halloc(size, 0);
		if (!obj[nobj])
			break;
		p = ucma_pin(obj[nobj], 0);
		p[0] = (unsigned char)nobj;
		p[size - 1] = (unsigned char)~nobj;
		ucma_unpin(obj[nobj]);
		live += size;
		nobj++;
	}
	for (int i = 0; i < nobj; i++) {
		if (next_rand(&s) % 10 < 7) {
			live -= ucma_hsize(obj[i]);
			ucma_hfree(obj[i]);
			obj[i] = 0;
			freed++;
		}
	}
	printf("filled the arena with %d movable objects, freed %d at random: %zu MiB live\n",
	       nobj, freed, live >> 20);
	show_map("the arena, fragmented");

	n = grab_blocks(blocks, 64, UCMA_ALLOC_NOWAIT);
	printf("\n2 MiB contiguous blocks available without moving anything: %d\n", n);
	while (n > 0)
		ucma_release(blocks[--n]);

	if (ucma_compact(UCMA_COMPACT_SYNC_FULL) != 0)
		printf("ucma_compact: %s\n", strerror(errno));
	show_map("after ucma_compact(UCMA_COMPACT_SYNC_FULL)");

	n = grab_blocks(blocks, 64, UCMA_ALLOC_NOWAIT);
	printf("\n2 MiB contiguous blocks available without moving anything: %d\n", n);
	m = grab_blocks(blocks + n, 64 - n, 0);
	printf("and %d more by migrating what is in their way\n", m);
	printf("objects whose data changed: %d (of %d live)\n", verify(), nobj - freed);
	show_map("with the contiguous blocks allocated");
	for (int i = 0; i < n + m; i++)
		ucma_release(blocks[i]);

	printf("\n== statistics\n");
	ucma_stat("pgmigrate_success", &v);
	printf("(%llu objects migrated in all)\n", (unsigned long long)v);
	ucma_stats_print(stdout);
	return verify() != 0;
}
