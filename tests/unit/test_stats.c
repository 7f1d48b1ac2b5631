/*
 * test_stats.c - statistics: the fragmentation formulas, the bitmap scan,
 * the latency histogram, ucma_stat() on every name the report prints, the
 * report's sections, the live statistics segment (requests and their lease,
 * layout, mode, fork, removal, no refresh from allocation calls,
 * UCMA_STATS_SHM) and the report at exit (UCMA_STATS=1, UCMA_STATS_FILE
 * with %p) in children.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "shm.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_NAMES 1024

/* The child of the at-exit tests: start, allocate, exit normally. */
static int child_main(void)
{
	ucma_handle_t h;

	if (ucma_init(NULL) != 0)
		return 3;
	h = ucma_halloc(10000, 0);
	ucma_hfree(h);
	return 0;
}

/* ------------------------------------------------------------------------ */

static void test_arguments(void)
{
	uint64_t v = 42;

	errno = 0;
	ok(ucma_stat(NULL, &v) == -1 && errno == EINVAL, "ucma_stat(NULL) fails with EINVAL");
	errno = 0;
	ok(ucma_stat("compact_stall", NULL) == -1 && errno == EINVAL,
	   "ucma_stat(name, NULL) fails with EINVAL");
	errno = 0;
	ok(ucma_stat("no_such_counter", &v) == -1 && errno == ENOENT && v == 42,
	   "unknown name fails with ENOENT and leaves the value alone");
	errno = 0;
	ok(ucma_stat("", &v) == -1 && errno == ENOENT, "empty name fails with ENOENT");

	char longname[300];

	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	errno = 0;
	ok(ucma_stat(longname, &v) == -1 && errno == ENOENT, "overlong name fails with ENOENT");
	ok(ucma_stat("compact_stall", &v) == 0, "compact_stall is readable before start-up");
	ucma_stats_print(NULL);	/* must not crash */
	ok(1, "ucma_stats_print(NULL) is ignored");
}

/* The longest run of clear bits, one bit at a time: the reference. */
static uint32_t max_zero_run_by_bits(const unsigned long *bm, uint32_t nbits)
{
	const unsigned bpl = sizeof(unsigned long) * CHAR_BIT;
	uint32_t best = 0, cur = 0;

	for (uint32_t i = 0; i < nbits; i++) {
		cur = (bm[i / bpl] >> (i % bpl)) & 1ul ? 0 : cur + 1;
		best = cur > best ? cur : best;
	}
	return best;
}

/*
 * The word-at-a-time scan against the reference on bitmaps of every
 * density, including runs inside one word and lengths that end mid-word.
 */
static void test_max_zero_run_random(void)
{
	unsigned long bm[8];
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	int bad = 0;

	for (int t = 0; t < 20000; t++) {
		unsigned density = (unsigned)t % 7;	/* 0: all clear ... 6: mostly set */
		uint32_t nbits = 1 + (uint32_t)(t * 37) % (8 * 64);

		for (int k = 0; k < 8; k++) {
			unsigned long w = 0;

			for (unsigned d = 0; d < density; d++) {
				seed ^= seed << 13;
				seed ^= seed >> 7;
				seed ^= seed << 17;
				w = d == 0 ? (unsigned long)seed : w | (unsigned long)seed;
			}
			bm[k] = density == 0 ? 0 : density == 1 ? w & (w >> 7) & (w >> 13) : w;
		}
		if (ucma_bitmap_max_zero_run(bm, nbits) != max_zero_run_by_bits(bm, nbits)) {
			if (bad++ < 3)
				diag("nbits %u: word scan %u, bit scan %u", nbits,
				     ucma_bitmap_max_zero_run(bm, nbits), max_zero_run_by_bits(bm, nbits));
		}
	}
	ok(bad == 0, "word-at-a-time maxchunk agrees with a bit-by-bit scan on 20000 bitmaps");
}

static void test_formulas(void)
{
	uint64_t c[UCMA_NR_ORDERS] = { 0 };
	unsigned long bm[4] = { 0 };

	ok(ucma_extfrag_index(c, 3) == 0, "extfrag index 0 with nothing free");
	ok(ucma_extfrag_score(c, 9) == 0, "score 0 with nothing free");
	c[0] = 8;	/* 8 single pages: an order-3 request fails by fragmentation */
	ok(ucma_extfrag_index(c, 3) == 750, "extfrag index of 8 order-0 blocks for order 3 is 750 (%d)",
	   ucma_extfrag_index(c, 3));
	ok(ucma_extfrag_index(c, 0) == -1000, "extfrag index -1000 when the order is available");
	c[0] = 0;
	c[2] = 1;	/* one order-2 block: index for order 3 is 1 - (1 + 4/8) / 1 */
	ok(ucma_extfrag_index(c, 3) == -500, "kernel formula kept for a single small block (%d)",
	   ucma_extfrag_index(c, 3));
	memset(c, 0, sizeof(c));
	c[9] = 1;
	c[0] = 512;
	ok(ucma_extfrag_score(c, 9) == 50, "half the free memory outside pageblocks: score 50 (%u)",
	   ucma_extfrag_score(c, 9));
	c[0] = 0;
	ok(ucma_extfrag_score(c, 9) == 0, "all free memory in pageblocks: score 0");
	memset(c, 0, sizeof(c));
	c[3] = 10;
	ok(ucma_extfrag_score(c, 9) == 100, "no free pageblock: score 100");

	ok(ucma_bitmap_max_zero_run(bm, 256) == 256, "empty bitmap: one run of every bit");
	memset(bm, 0xff, sizeof(bm));
	ok(ucma_bitmap_max_zero_run(bm, 256) == 0, "full bitmap: no run");
	memset(bm, 0, sizeof(bm));
	bm[0] = 1ul << 10;	/* bits 0-9 free, 10 used, 11-199 free */
	bm[3] = ~0ul;
	ok(ucma_bitmap_max_zero_run(bm, 256) == 3 * 64 - 11,
	   "run across words is measured (%u)", ucma_bitmap_max_zero_run(bm, 256));
	ok(ucma_bitmap_max_zero_run(bm, 5) == 5, "bits past nbits are ignored");
	memset(bm, 0, sizeof(bm));
	bm[1] = 1ul << 63;
	ok(ucma_bitmap_max_zero_run(bm, 200) == 127, "run ending inside a partial word (%u)",
	   ucma_bitmap_max_zero_run(bm, 200));
	test_max_zero_run_random();
}

static uint64_t stat_of(const char *name)
{
	uint64_t v = UINT64_MAX;

	if (ucma_stat(name, &v) != 0)
		return UINT64_MAX;
	return v;
}

static void test_latency(void)
{
	uint64_t p50, p99;

	for (int i = 0; i < 100; i++)
		ucma_stats_alloc_latency(1500, false);
	for (int i = 0; i < 10; i++)
		ucma_stats_alloc_latency(100000, true);
	ok(stat_of("cma_alloc_latency_count") == 110, "110 latency samples counted");
	ok(stat_of("cma_alloc_migrate_latency_count") == 10, "10 with migration");
	p50 = stat_of("cma_alloc_latency_p50_ns");
	p99 = stat_of("cma_alloc_latency_p99_ns");
	ok(p50 >= 1024 && p50 < 2048, "p50 %llu ns in the bucket of 1500 ns",
	   (unsigned long long)p50);
	ok(p99 >= 65536 && p99 < 131072, "p99 %llu ns in the bucket of 100 us",
	   (unsigned long long)p99);
	p50 = stat_of("cma_alloc_migrate_latency_p50_ns");
	ok(p50 >= 65536 && p50 < 131072, "migration p50 %llu ns in the bucket of 100 us",
	   (unsigned long long)p50);
	ucma_stats_alloc_latency(UINT64_MAX, false);	/* lands in the open bucket */
	ok(stat_of("cma_alloc_latency_count") == 111, "a huge sample is counted, not lost");
}

/* ------------------------------------------------------------------------ */
/* The report                                                                */
/* ------------------------------------------------------------------------ */

struct report {
	char *text;
	size_t len;
	int n;
	char *names[MAX_NAMES];
	long long values[MAX_NAMES];
};

static void report_free(struct report *r)
{
	for (int i = 0; i < r->n; i++)
		free(r->names[i]);
	free(r->text);
	memset(r, 0, sizeof(*r));
}

/* Print the report and parse its vmstat section (up to the first empty line). */
static bool report_take(struct report *r)
{
	FILE *f = tmpfile();
	char line[512];
	bool ok_format = true;
	long size;

	memset(r, 0, sizeof(*r));
	if (!f)
		return false;
	ucma_stats_print(f);
	size = ftell(f);
	rewind(f);
	r->text = calloc(1, (size_t)size + 1);
	if (fread(r->text, 1, (size_t)size, f) != (size_t)size)
		ok_format = false;
	r->len = (size_t)size;
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		char name[256];
		long long v;
		char extra;

		if (line[0] == '\n')
			break;
		if (sscanf(line, "%255s %lld %c", name, &v, &extra) != 2 || r->n == MAX_NAMES) {
			diag("unparsable line in the vmstat section: %s", line);
			ok_format = false;
			continue;
		}
		r->names[r->n] = strdup(name);
		r->values[r->n] = v;
		r->n++;
	}
	fclose(f);
	return ok_format;
}

static long long report_value(const struct report *r, const char *name)
{
	for (int i = 0; i < r->n; i++)
		if (strcmp(r->names[i], name) == 0)
			return r->values[i];
	return LLONG_MIN;
}

/* Every printed name reads back, once each. */
static void check_names(const struct report *r, const char *when)
{
	int unreadable = 0, dup = 0;

	for (int i = 0; i < r->n; i++) {
		uint64_t v;

		if (ucma_stat(r->names[i], &v) != 0) {
			diag("%s: ucma_stat(\"%s\") fails: %s", when, r->names[i], strerror(errno));
			unreadable++;
		}
		for (int j = 0; j < i; j++)
			if (strcmp(r->names[i], r->names[j]) == 0)
				dup++;
	}
	ok(r->n > 0 && unreadable == 0, "%s: all %d names of the vmstat section are readable",
	   when, r->n);
	ok(dup == 0, "%s: no name is printed twice", when);
}

static void test_report_before_arena(void)
{
	struct report r;

	ok(report_take(&r), "report before start-up parses");
	check_names(&r, "before start-up");
	ok(!strstr(r.text, "Node 0, zone"), "no zone tables before the arena exists");
	ok(report_value(&r, "nr_free_pages") == LLONG_MIN, "no zone counters printed yet");
	ok(stat_of("nr_free_pages") == 0, "but nr_free_pages reads as 0");
	errno = 0;
	ok(ucma_stat("cma_default_size", &(uint64_t){ 0 }) == -1 && errno == ENOENT,
	   "no CMA area names before the arena exists");
	report_free(&r);
}

static void test_report(struct ucma_arena *a, bool contig)
{
	struct report r;
	long long normal, cma;

	ok(report_take(&r), "report parses: 'name value' lines, then an empty line");
	check_names(&r, "running");
	normal = report_value(&r, "nr_free_pages_normal");
	cma = report_value(&r, "nr_free_pages_cma");
	ok(report_value(&r, "nr_free_pages") == normal + cma && normal > 0,
	   "nr_free_pages = normal %lld + cma %lld", normal, cma);
	ok(report_value(&r, "nr_managed_pages_normal") ==
		   (long long)a->zones[UCMA_ZONE_NORMAL].managed_pages &&
		   report_value(&r, "nr_managed_pages_cma") ==
			   (long long)a->zones[UCMA_ZONE_CMA].managed_pages,
	   "managed pages per zone");
	ok(report_value(&r, "cma_default_size") == a->areas[0].npages,
	   "cma_default_size is the area's pages");
	ok(stat_of("cma_default_size") == a->areas[0].npages, "and reads back the same");
	/* The 4 MiB buffer comes from a 16 MiB area nothing else uses: its
	 * failure is a failure of the test, not a reason to skip checks. */
	ok(contig, "ucma_alloc(4 MiB) from the empty 16 MiB area succeeded");
	{
		long long used = report_value(&r, "cma_default_used");
		long long maxchunk = report_value(&r, "cma_default_maxchunk");

		ok(used >= 1024, "cma_default_used counts the 4 MiB buffer (%lld pages)", used);
		ok(maxchunk >= 0 && maxchunk <= (long long)a->areas[0].npages - used,
		   "maxchunk %lld fits in what is not used", maxchunk);
		ok(report_value(&r, "cma_default_allocs") >= 1 &&
			   report_value(&r, "cma_default_alloc_success") >= 1,
		   "area allocation counters");
	}

	int bad_index = 0, nidx = 0;

	for (int i = 0; i < r.n; i++) {
		if (strncmp(r.names[i], "extfrag_index_", 14) == 0) {
			nidx++;
			if (r.values[i] < -1000 || r.values[i] > 1000)
				bad_index++;
		}
	}
	ok(nidx == 2 * UCMA_NR_ORDERS && bad_index == 0,
	   "%d fragmentation indexes, all in [-1000, 1000]", nidx);
	ok(report_value(&r, "fragmentation_score_normal") >= 0 &&
		   report_value(&r, "fragmentation_score_normal") <= 100 &&
		   report_value(&r, "fragmentation_score_cma") <= 100,
	   "fragmentation scores in 0..100");
	ok(report_value(&r, "extfrag_index_cma_9") == (long long)(int64_t)stat_of("extfrag_index_cma_9"),
	   "signed values read back as int64_t");
	ok(strstr(r.text, "\nNode 0, zone   Normal ") && strstr(r.text, "\nNode 0, zone      CMA "),
	   "buddyinfo lines per zone");
	ok(strstr(r.text, "Number of blocks type") && strstr(r.text, "Unmovable") &&
		   strstr(r.text, "Isolate"),
	   "pagetypeinfo table");
	ok(strstr(r.text, "CMA area (pages)") && strstr(r.text, "\ndefault "), "CMA area table");
	ok(strstr(r.text, "Fragmentation index") != NULL, "extfrag_index table");
	ok(strstr(r.text, "ucma_alloc latency (ns)") != NULL, "latency histogram");
	report_free(&r);
}

/* ------------------------------------------------------------------------ */
/* The live statistics segment                                               */
/* ------------------------------------------------------------------------ */

static char *shm_path_of(pid_t pid, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s%ld", UCMA_SHM_DIR, UCMA_SHM_PREFIX, (long)pid);
	return buf;
}

/* The pid in the header of the segment at @path, or -1. */
static pid_t header_pid(const char *path)
{
	struct ucma_shm_header h;
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, &h, sizeof(h));
	close(fd);
	return n == (ssize_t)sizeof(h) && h.magic == UCMA_SHM_MAGIC ? h.pid : -1;
}

static void test_segment(struct ucma_arena *a, bool contig)
{
	char path[128];
	struct stat st;
	struct report r;
	const struct ucma_shm_header *h;
	const struct ucma_shm_counter *c;
	const uint8_t *map;
	uint64_t counts[UCMA_SHM_PB_NR] = { 0 }, updates;
	void *p;
	int fd, same = 0;

	if (access(UCMA_SHM_DIR, W_OK | X_OK) != 0) {
		skip(1, "%s: %s: nowhere to publish", UCMA_SHM_DIR, strerror(errno));
		return;
	}
	ok(ucma_stats_refresh() == 0, "ucma_stats_refresh() publishes the segment");
	shm_path_of(getpid(), path, sizeof(path));
	if (stat(path, &st) != 0) {
		ok(0, "%s exists: %s", path, strerror(errno));
		return;
	}
	ok((st.st_mode & 07777) == 0600, "segment mode is 0600 (%o)", st.st_mode & 07777);
	fd = open(path, O_RDONLY);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		bail_out("cannot map %s", path);
	h = p;
	ok(h->magic == UCMA_SHM_MAGIC && h->version == UCMA_SHM_VERSION &&
		   h->header_size == sizeof(*h) && h->total_size == (uint64_t)st.st_size,
	   "header: magic, version, sizes");
	ok(h->pid == getpid() && h->page_size == UCMA_PAGE_SIZE &&
		   h->pageblock_pages == UCMA_PAGEBLOCK_PAGES && h->nr_pageblocks == a->nr_pageblocks &&
		   h->arena_size == a->size && h->start_time > 0,
	   "header: pid, geometry, start time");
	ok(h->nr_zones == 2 && h->zones[1].start_pb == a->zones[UCMA_ZONE_CMA].start_pfn / 512 &&
		   h->nr_areas == (uint32_t)a->nr_areas && strcmp(h->areas[0].name, "default") == 0,
	   "header: zones and areas");
	ok(h->seq % 2 == 0, "sequence counter even outside a refresh");

	ok(report_take(&r), "report for comparison");
	c = (const void *)((const char *)p + h->counters_offset);
	for (uint32_t i = 0; i < h->nr_counters && (int)i < r.n; i++)
		same += strcmp(c[i].name, r.names[i]) == 0;
	ok(h->nr_counters == (uint32_t)r.n && same == r.n,
	   "segment has the report's %d names in order (%u, %d same)", r.n, h->nr_counters, same);
	for (uint32_t i = 0; i < h->nr_counters; i++)
		if (strcmp(c[i].name, "cma_default_size") == 0)
			ok(c[i].value == a->areas[0].npages, "segment value of cma_default_size");
	report_free(&r);

	map = (const uint8_t *)p + h->map_offset;
	int bad = 0;

	for (uint32_t b = 0; b < h->nr_pageblocks; b++) {
		unsigned s = UCMA_SHM_PB_STATE(map[b]);

		if (s >= UCMA_SHM_PB_NR)
			bad++;
		else
			counts[s]++;
		/* NORMAL states stay in NORMAL, CMA states in CMA. */
		bool in_cma = b >= h->zones[1].start_pb;

		if (in_cma != (s == UCMA_SHM_PB_CMA_FREE || s == UCMA_SHM_PB_CMA_LENT ||
			       s == UCMA_SHM_PB_CONTIG || s == UCMA_SHM_PB_ISOLATED))
			bad++;
	}
	ok(bad == 0, "every pageblock state valid for its zone");
	ok(contig && counts[UCMA_SHM_PB_CONTIG] >= 2,
	   "the 4 MiB buffer shows as %llu contiguous pageblocks",
	   (unsigned long long)counts[UCMA_SHM_PB_CONTIG]);
	{
		uint64_t pb = 0;

		for (uint32_t i = 0; i < h->nr_counters; i++)
			if (strncmp(c[i].name, "nr_pageblocks_", 14) == 0)
				pb += c[i].value;
		ok(pb == h->nr_pageblocks,
		   "the pageblocks counted during the map walk add up to the arena's (%llu)",
		   (unsigned long long)pb);
	}
	updates = h->updates;
	ucma_shm_update();
	ok(h->updates > updates, "ucma_shm_update() refreshes the segment");
	munmap(p, (size_t)st.st_size);

	/*
	 * A forked child: its statistics are its own, the parent's segment
	 * stays; unpublish and republish.  In a child because no other thread
	 * runs there to republish behind the test's back.
	 */
	pid_t child = fork();

	if (child == 0) {
		char cpath[128];
		int fails = 0;

		ucma_stats_refresh();
		shm_path_of(getpid(), cpath, sizeof(cpath));
		if (header_pid(cpath) != getpid())
			fails |= 1;
		if (header_pid(path) != getppid())
			fails |= 2;
		ucma_shm_unpublish();
		if (access(cpath, F_OK) == 0)
			fails |= 4;
		ucma_stats_refresh();
		if (header_pid(cpath) != getpid())
			fails |= 8;
		/* exit(), not _exit(): the segment goes in an atexit handler. */
		exit(fails);
	}
	int status = 0;
	char cpath[128];

	waitpid(child, &status, 0);
	ok(WIFEXITED(status) && !(WEXITSTATUS(status) & 3),
	   "a forked child publishes its own segment and leaves the parent's alone");
	ok(WIFEXITED(status) && !(WEXITSTATUS(status) & 4),
	   "ucma_shm_unpublish() removes the segment");
	ok(WIFEXITED(status) && !(WEXITSTATUS(status) & 8),
	   "the next ucma_stats_refresh() publishes it again");
	shm_path_of(child, cpath, sizeof(cpath));
	ok(access(cpath, F_OK) != 0 && header_pid(path) == getpid(),
	   "the child's segment is removed at its exit, the parent's is intact");
}

/* Pageblocks of the segment's map in @state. */
static unsigned map_count(const struct ucma_shm_header *h, unsigned state)
{
	const uint8_t *map = (const uint8_t *)h + h->map_offset;
	unsigned n = 0;

	for (uint32_t b = 0; b < h->nr_pageblocks; b++)
		n += UCMA_SHM_PB_STATE(map[b]) == state;
	return n;
}

/* Map the segment at @path read-only; NULL if it is not there. */
static const struct ucma_shm_header *map_segment(const char *path, size_t *size)
{
	struct stat st;
	void *p;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct ucma_shm_header)) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	*size = (size_t)st.st_size;
	return p;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * No allocation call refreshes the segment, however long since the last
 * refresh (it used to, inline, every 100 ms); ucma_stats_refresh() does, at
 * once, and the map then shows what changed.  No compaction thread runs
 * here; a ucmastat --list elsewhere on the machine may ask at any time, and
 * its answers are not counted.
 */
static void test_no_refresh_from_allocations(void)
{
	char path[128];
	const struct ucma_shm_header *h;
	uint64_t updates;
	unsigned left;
	size_t size;
	void *buf;

	shm_path_of(getpid(), path, sizeof(path));
	h = map_segment(path, &size);
	if (!h) {
		ok(0, "the segment published by ucma_stats_refresh() is there: %s", path);
		return;
	}
	updates = atomic_load(&ucma_shm_test_unasked_refreshes);
	for (int round = 0; round < 6; round++) {
		void *c = ucma_alloc(2u << 20, 2u << 20, 0);

		ucma_release(c);
		for (int i = 0; i < 256; i++) {
			ucma_hfree(ucma_halloc(100, 0));
			ucma_free(ucma_malloc(40000));
		}
		usleep(50 * 1000);	/* 300 ms in all: three of the old 100 ms ticks */
	}
	updates = atomic_load(&ucma_shm_test_unasked_refreshes) - updates;
	ok(updates == 0,
	   "300 ms of contiguous, movable and page-run allocations refreshed nothing (%llu "
	   "refreshes)",
	   (unsigned long long)updates);

	buf = ucma_alloc(2u << 20, 2u << 20, 0);
	updates = h->updates;
	ok(buf && ucma_stats_refresh() == 0 && h->updates > updates,
	   "ucma_stats_refresh() refreshes the segment at once");
	ok(buf && map_count(h, UCMA_SHM_PB_CONTIG) >= 3,
	   "the map shows the new 2 MiB buffer (%u contiguous pageblocks)",
	   map_count(h, UCMA_SHM_PB_CONTIG));
	ucma_release(buf);
	if (ucma_stats_refresh() != 0)
		diag("ucma_stats_refresh: %s", strerror(errno));
	left = map_count(h, UCMA_SHM_PB_CONTIG);
	ok(left == 2, "after the release the map shows only the 4 MiB buffer (%u contiguous "
	   "pageblocks)", left);
	munmap((void *)h, size);
}

/* Set the request file's modification time to now; returns it, 0 on error. */
static uint64_t request_now(const char *req)
{
	struct stat st;
	int fd = open(req, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0)
		return 0;
	if (futimens(fd, NULL) != 0 || fstat(fd, &st) != 0) {
		close(fd);
		return 0;
	}
	close(fd);
	return (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
}

/* Allocations that check for a request (page runs), for @ms milliseconds. */
static void allocate_for(unsigned ms)
{
	uint64_t end = mono_ms() + ms;

	while (mono_ms() < end) {
		for (int i = 0; i < 64; i++)
			ucma_free(ucma_malloc(40000));
		usleep(2000);
	}
}

/*
 * Wait (allocating, so the allocation paths can notice a request) until
 * the segment at @path answers the request of time @m.  Up to 10 s: the
 * answer is normally there within 100 ms, and the test must not depend on
 * how loaded the machine is.
 */
static bool wait_answer(const char *path, uint64_t m, bool allocate)
{
	uint64_t end = mono_ms() + 10000;

	while (mono_ms() < end) {
		size_t size;
		const struct ucma_shm_header *h = map_segment(path, &size);
		bool answered = false;

		if (h) {
			answered = h->magic == UCMA_SHM_MAGIC &&
				   __atomic_load_n(&h->answered_request_ns, __ATOMIC_ACQUIRE) >= m;
			munmap((void *)h, size);
		}
		if (answered)
			return true;
		if (allocate)
			allocate_for(10);
		else
			usleep(10 * 1000);
	}
	return false;
}

/*
 * The default mode, UCMA_STATS_SHM=request: nothing until a reader asks;
 * an allocation notices the request and starts the thread that answers;
 * the thread answers new requests by itself; a lease after the last one
 * the segment and the thread are gone.  Requests of another user and
 * requests long past are ignored.
 */
static void test_requests(void)
{
	char path[128], req[160];
	const struct ucma_shm_header *h;
	uint64_t m, updates, end;
	size_t size;

	if (access(UCMA_SHM_DIR, W_OK | X_OK) != 0) {
		skip(1, "%s: %s: nowhere to publish", UCMA_SHM_DIR, strerror(errno));
		return;
	}
	ucma_shm_test_lease_ns = 300ull * 1000 * 1000;
	shm_path_of(getpid(), path, sizeof(path));
	snprintf(req, sizeof(req), "%s%s", path, UCMA_SHM_REQUEST_SUFFIX);
	unlink(req);
	allocate_for(300);
	ok(access(path, F_OK) != 0 && !ucma_shm_test_server_running(),
	   "nobody asked: no segment and no thread after 300 ms of allocations");

	m = request_now(req);
	ok(m != 0, "a request file can be made: %s", req);
	ok(wait_answer(path, m, true), "an allocation notices the request; the segment answers it");
	ok(ucma_shm_test_server_running(), "the answering thread runs");

	h = map_segment(path, &size);
	if (!h)
		bail_out("cannot map %s", path);
	updates = h->updates;
	m = h->answered_request_ns;
	usleep(100 * 1000);
	/* A refresh now must answer a new request (another reader's). */
	ok(h->updates == updates || h->answered_request_ns != m,
	   "without a new request the thread does not refresh");
	m = request_now(req);
	ok(wait_answer(path, m, false), "the thread answers the next request by itself");
	munmap((void *)h, size);

	/*
	 * fork while the thread runs: the child has none, and answers its own
	 * requests with a thread of its own (not under ThreadSanitizer, which
	 * cannot start threads after a multi-threaded fork).
	 */
	const char *san = getenv("UCMA_TEST_SANITIZER");
	bool child_threads = !san || strcmp(san, "tsan") != 0;
	pid_t child;

	/* The parent's segment must outlive the child's look at it, however
	 * slowly a loaded machine runs the child: a long lease for that. */
	__atomic_store_n(&ucma_shm_test_lease_ns, 60ull * 1000 * 1000 * 1000, __ATOMIC_RELAXED);
	m = request_now(req);
	if (!wait_answer(path, m, false))
		diag("the request before the fork got no answer");
	child = fork();

	if (child == 0) {
		char cpath[128], creq[160];
		uint64_t cm;
		int fails = 0;

		shm_path_of(getpid(), cpath, sizeof(cpath));
		snprintf(creq, sizeof(creq), "%s%s", cpath, UCMA_SHM_REQUEST_SUFFIX);
		if (ucma_shm_test_server_running() || header_pid(path) != getppid())
			fails |= 1;
		if (child_threads) {
			cm = request_now(creq);
			if (!wait_answer(cpath, cm, true) || !ucma_shm_test_server_running())
				fails |= 2;
			unlink(creq);
		}
		exit(fails);	/* exit(): the segment goes in an atexit handler */
	}
	int status = 0;
	char cpath[128];

	waitpid(child, &status, 0);
	shm_path_of(child, cpath, sizeof(cpath));
	ok(WIFEXITED(status) && !(WEXITSTATUS(status) & 1),
	   "a child forked while the thread runs has no such thread and leaves the parent's "
	   "segment alone (status %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	if (child_threads)
		ok(WIFEXITED(status) && !(WEXITSTATUS(status) & 2) && access(cpath, F_OK) != 0,
		   "it answers its own requests and removes its segment at exit");
	else
		skip(1, "ThreadSanitizer cannot start threads in the child of a multi-threaded fork");

	unlink(req);
	__atomic_store_n(&ucma_shm_test_lease_ns, 300ull * 1000 * 1000, __ATOMIC_RELAXED);
	end = mono_ms() + 10000;
	while (mono_ms() < end && (access(path, F_OK) == 0 || ucma_shm_test_server_running()))
		usleep(20 * 1000);
	ok(access(path, F_OK) != 0, "a lease after the last request the segment is removed");
	ok(!ucma_shm_test_server_running(), "and the thread has ended");

	/* A request long past (a reader killed an hour ago) starts nothing. */
	request_now(req);
	utimensat(AT_FDCWD, req,
		  (struct timespec[2]){ { .tv_nsec = UTIME_OMIT },
					{ .tv_sec = time(NULL) - 3600 } },
		  0);
	allocate_for(300);
	ok(access(path, F_OK) != 0 && !ucma_shm_test_server_running(),
	   "a request an hour old is ignored");
	if (geteuid() == 0) {
		request_now(req);
		if (chown(req, 65534, 65534) != 0)
			diag("chown %s: %s", req, strerror(errno));
		allocate_for(300);
		ok(access(path, F_OK) != 0 && !ucma_shm_test_server_running(),
		   "a request file of another user is ignored");
	} else {
		skip(1, "needs root to make a request file of another user");
	}
	unlink(req);
	ucma_shm_test_lease_ns = 0;
}

/*
 * UCMA_STATS_SHM in children of this program: "on" publishes at start-up,
 * "off" never publishes, not even on request or ucma_stats_refresh().
 */
static int child_mode_main(const char *mode)
{
	char path[128], req[160];
	uint64_t m;

	if (ucma_init(NULL) != 0)
		return 3;
	shm_path_of(getpid(), path, sizeof(path));
	snprintf(req, sizeof(req), "%s%s", path, UCMA_SHM_REQUEST_SUFFIX);
	if (strcmp(mode, "on") == 0)
		return access(path, F_OK) == 0 ? 0 : 10;
	/* off */
	if (access(path, F_OK) == 0)
		return 11;
	errno = 0;
	if (ucma_stats_refresh() != -1 || errno != ENOTSUP)
		return 12;
	m = request_now(req);
	allocate_for(300);
	unlink(req);
	if (m == 0 || access(path, F_OK) == 0 || ucma_shm_test_server_running())
		return 13;
	return 0;
}

static void test_modes(void)
{
	static const char *const modes[] = { "on", "off" };

	for (int i = 0; i < 2; i++) {
		int status;
		pid_t pid = fork();

		if (pid == 0) {
			setenv("UCMA_ARENA_SIZE", "32M", 1);
			setenv("UCMA_CMA_SIZE", "8M", 1);
			setenv("UCMA_HUGEPAGES", "none", 1);
			setenv("UCMA_HUGEPAGES_NORMAL", "none", 1);
			setenv("UCMA_STATS_SHM", modes[i], 1);
			execl("/proc/self/exe", "test_stats", "--mode-child", modes[i], (char *)NULL);
			_exit(127);
		}
		waitpid(pid, &status, 0);
		ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		   i == 0 ? "UCMA_STATS_SHM=on: the segment exists from start-up (status %d)" :
			    "UCMA_STATS_SHM=off: no segment, not on request nor on "
			    "ucma_stats_refresh() (ENOTSUP) (status %d)",
		   WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}
}

/* ------------------------------------------------------------------------ */
/* The report at exit                                                        */
/* ------------------------------------------------------------------------ */

/* Run this program as a child with extra environment; returns its stderr. */
static char *run_child(const char *const *env, pid_t *pid_out, int *status)
{
	int pfd[2];
	size_t cap = 1 << 16, len = 0;
	char *buf = calloc(1, cap + 1);
	pid_t pid;
	ssize_t n;

	if (pipe(pfd) != 0)
		bail_out("pipe: %s", strerror(errno));
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 2);
		close(pfd[0]);
		close(pfd[1]);
		for (int i = 0; env[i]; i += 2)
			setenv(env[i], env[i + 1], 1);
		alarm(30);	/* a child that hangs at exit fails its test, not the run */
		execl("/proc/self/exe", "test_stats", "--child", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	while (len < cap && (n = read(pfd[0], buf + len, cap - len)) > 0)
		len += (size_t)n;
	close(pfd[0]);
	waitpid(pid, status, 0);
	*pid_out = pid;
	return buf;
}

static void test_at_exit(void)
{
	static const char *const base[] = { "UCMA_ARENA_SIZE", "32M", "UCMA_CMA_SIZE", "8M",
					    "UCMA_HUGEPAGES", "none", "UCMA_HUGEPAGES_NORMAL", "none" };
	const char *env[16];
	char file[PATH_MAX], pattern[PATH_MAX], *out;
	int status;
	pid_t pid;
	FILE *f;

	memcpy(env, base, sizeof(base));
	env[8] = "UCMA_STATS";
	env[9] = "1";
	env[10] = NULL;
	out = run_child(env, &pid, &status);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child with UCMA_STATS=1 exits 0");
	ok(strncmp(out, "compact_stall ", 14) == 0 || strstr(out, "\ncompact_stall "),
	   "UCMA_STATS=1 prints the report on stderr at exit");
	ok(strstr(out, "\nNode 0, zone   Normal ") && strstr(out, "halloc 1\n"),
	   "with the zone tables and the child's own counters");
	free(out);

	snprintf(pattern, sizeof(pattern), "/tmp/ucma-test-stats-%ld.%%p", (long)getpid());
	env[8] = "UCMA_STATS_FILE";
	env[9] = pattern;
	out = run_child(env, &pid, &status);
	snprintf(file, sizeof(file), "/tmp/ucma-test-stats-%ld.%ld", (long)getpid(), (long)pid);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && !strstr(out, "compact_stall"),
	   "UCMA_STATS_FILE: nothing on stderr");
	f = fopen(file, "r");
	ok(f != NULL, "UCMA_STATS_FILE: %%p became the child's pid (%s)", file);
	if (f) {
		char line[256];
		bool found = false;

		while (fgets(line, sizeof(line), f))
			found |= strcmp(line, "halloc 1\n") == 0;
		fclose(f);
		ok(found, "the file holds the child's report");
		unlink(file);
	} else {
		skip(1, "no file");
	}
	free(out);

	env[9] = "/nonexistent-dir/stats";
	out = run_child(env, &pid, &status);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(out, "UCMA_STATS_FILE"),
	   "an unwritable UCMA_STATS_FILE is reported, the program still exits 0");
	free(out);

	/* A FIFO nobody reads: opening it for writing blocked the exiting
	 * program for good. */
	snprintf(file, sizeof(file), "/tmp/ucma-test-stats-fifo-%ld", (long)getpid());
	unlink(file);
	if (mkfifo(file, 0600) == 0) {
		env[9] = file;
		out = run_child(env, &pid, &status);
		ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(out, "FIFO"),
		   "UCMA_STATS_FILE naming a FIFO nobody reads: reported, no hang (%s)",
		   WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exited");
		free(out);
		unlink(file);
	} else {
		skip(1, "mkfifo: %s", strerror(errno));
	}

	/* A device that fails every write: the report is lost, and said so. */
	if (access("/dev/full", W_OK) == 0) {
		env[9] = "/dev/full";
		out = run_child(env, &pid, &status);
		ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(out, "incomplete"),
		   "UCMA_STATS_FILE=/dev/full: the failed write is reported");
		free(out);
	} else {
		skip(1, "no writable /dev/full");
	}
}

int main(int argc, char **argv)
{
	struct ucma_config cfg = { 0 };
	struct ucma_arena *a;
	ucma_handle_t h[32];
	void *contig;

	if (argc > 1 && strcmp(argv[1], "--child") == 0)
		return child_main();
	if (argc > 2 && strcmp(argv[1], "--mode-child") == 0)
		return child_mode_main(argv[2]);

	plan_no_plan();
	test_arguments();
	test_formulas();
	test_latency();
	test_report_before_arena();

	/* No compaction thread: nothing refreshes or moves behind the test. */
	setenv("UCMA_COMPACT", "off", 1);
	cfg.arena_size = 64u << 20;
	cfg.cma_size = 16u << 20;
	cfg.hugepages = UCMA_BACKING_NONE;
	cfg.hugepages_normal = UCMA_BACKING_NONE;
	if (ucma_init(&cfg) != 0) {
		diag("ucma_init: %s", strerror(errno));
		ok(0, "the arena starts");
		return done();
	}
	a = ucma_arena_peek();
	for (int i = 0; i < 32; i++)
		h[i] = ucma_halloc((size_t)(i + 1) * 3000, 0);
	contig = ucma_alloc(4u << 20, 0, 0);
	if (!contig)
		diag("ucma_alloc: %s", strerror(errno));

	test_report(a, contig != NULL);
	test_requests();
	test_segment(a, contig != NULL);
	test_no_refresh_from_allocations();
	test_modes();
	test_at_exit();

	if (contig)
		ucma_release(contig);
	for (int i = 0; i < 32; i++)
		ucma_hfree(h[i]);
	return done();
}
