/*
 * ucmastat.c - statistics of a process using ucma, read from outside it.
 *
 * Every process using ucma publishes its counters and a map of its arena
 * in /dev/shm/ucma.<pid> (see shm.h).  This program reads that segment;
 * it does not link the library.  It prints the counters (/proc/vmstat
 * style), watches them change (like vmstat 1), lists the processes that
 * publish one, and draws the arena as a map of pageblocks, as text or SVG.
 *
 * Consistency: the owner rewrites the segment under a sequence counter;
 * every read here copies the whole segment and retries until the counter
 * was even and unchanged across the copy, so one snapshot never mixes two
 * refreshes.
 *
 * Exit status: 0 success, 1 the process or its statistics could not be
 * read, 2 bad usage.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm.h"

#define MAP_WIDTH 64		/* pageblocks per line of the map */

static const char *prog = "ucmastat";

/* ------------------------------------------------------------------------ */
/* Pageblock states: characters, names, colours                              */
/* ------------------------------------------------------------------------ */

static const struct pb_style {
	char ch;
	const char *name;
	const char *ansi;	/* SGR parameters */
	const char *rgb;	/* SVG fill */
} pb_styles[UCMA_SHM_PB_NR] = {
	[UCMA_SHM_PB_FREE] = { '.', "free", "2", "#e6e6e6" },
	[UCMA_SHM_PB_UNMOVABLE] = { 'U', "unmovable", "31", "#d62728" },
	[UCMA_SHM_PB_MOVABLE] = { 'M', "movable", "33", "#ff9f1c" },
	[UCMA_SHM_PB_CMA_FREE] = { 'c', "CMA free", "32", "#a6dba0" },
	[UCMA_SHM_PB_CMA_LENT] = { 'L', "CMA lent to movable", "36", "#17becf" },
	[UCMA_SHM_PB_CONTIG] = { 'C', "contiguous allocation", "1;34", "#1f4e9c" },
	[UCMA_SHM_PB_ISOLATED] = { 'I', "isolated", "1;35", "#9467bd" },
};

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", prog);
	exit(2);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory");
	return p;
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * Read /proc/PID/stat: the state (field 3) into @state and the start time
 * (field 22, clock ticks after boot) into @start.  Returns false when the
 * file cannot be read (no such process, or /proc hides it).
 */
static bool pid_stat(pid_t pid, char *state, uint64_t *start)
{
	char path[64], buf[1024];
	ssize_t n;
	char *p;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return false;
	p += 2;
	*state = *p;
	for (int field = 3; field < 22 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	*start = p ? strtoull(p, NULL, 10) : 0;
	return true;
}

/* Returns true if process @pid exists (whoever owns it) and has not ended. */
static bool pid_alive(pid_t pid)
{
	uint64_t start;
	char state;

	if (kill(pid, 0) != 0 && errno != EPERM)
		return false;
	/* A zombie has ended: only its exit status is left. */
	return !pid_stat(pid, &state, &start) || (state != 'Z' && state != 'X');
}

/* Start time of @pid, or 0 when unknown. */
static uint64_t pid_start_time(pid_t pid)
{
	uint64_t start = 0;
	char state;

	return pid_stat(pid, &state, &start) ? start : 0;
}

static void pid_comm(pid_t pid, char *buf, size_t len)
{
	char path[64];
	FILE *f;

	snprintf(buf, len, "?");
	snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
}

static pid_t parse_pid(const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v <= 0 || v > INT_MAX)
		usage_error("'%s' is not a process id", s);
	return (pid_t)v;
}

/* ------------------------------------------------------------------------ */
/* The segment                                                               */
/* ------------------------------------------------------------------------ */

/*
 * struct seg - one process's segment: the live mapping and the last
 * consistent copy of it, which everything else reads.
 */
struct seg {
	pid_t pid;
	const void *live;
	size_t size;
	char *copy;
	const struct ucma_shm_header *h;	/* = copy */
	const struct ucma_shm_counter *ctr;
	const uint8_t *map;
};

enum seg_error { SEG_OK, SEG_NOPROC, SEG_NOTUCMA, SEG_STALE, SEG_ACCESS, SEG_BAD, SEG_BUSY };

static void seg_path(pid_t pid, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s%ld", UCMA_SHM_DIR, UCMA_SHM_PREFIX, (long)pid);
}

/* Check the geometry of a header; returns a reason, or NULL if usable. */
static const char *header_problem(const struct ucma_shm_header *h, size_t size, pid_t pid)
{
	if (h->magic != UCMA_SHM_MAGIC)
		return "bad magic number";
	if (h->version != UCMA_SHM_VERSION || h->header_size != sizeof(*h))
		return "unknown layout version (ucmastat and the library differ)";
	if (h->total_size != size)
		return "size does not match the header";
	if (h->pid != pid)
		return "published under another process id";
	if (h->nr_zones > UCMA_SHM_MAX_ZONES || h->nr_areas > UCMA_SHM_MAX_AREAS)
		return "too many zones or areas";
	if (h->counters_offset < sizeof(*h) ||
	    (uint64_t)h->counters_offset + (uint64_t)h->nr_counters * sizeof(struct ucma_shm_counter) >
		    h->map_offset ||
	    (uint64_t)h->map_offset + h->nr_pageblocks > size)
		return "offsets out of bounds";
	for (uint32_t i = 0; i < h->nr_zones; i++)
		if (h->zones[i].start_pb > h->zones[i].end_pb || h->zones[i].end_pb > h->nr_pageblocks)
			return "zone out of bounds";
	for (uint32_t i = 0; i < h->nr_areas; i++)
		if (h->areas[i].start_pb > h->areas[i].end_pb || h->areas[i].end_pb > h->nr_pageblocks)
			return "area out of bounds";
	return NULL;
}

/*
 * Copy the live segment into s->copy under the sequence counter.  Returns
 * false if the owner kept writing for a whole second.
 */
static bool seg_snapshot(struct seg *s)
{
	const struct ucma_shm_header *live = s->live;

	for (int attempt = 0; attempt < 2000; attempt++) {
		uint64_t s1 = __atomic_load_n(&live->seq, __ATOMIC_ACQUIRE), s2;

		if (!(s1 & 1)) {
			memcpy(s->copy, s->live, s->size);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			s2 = __atomic_load_n(&live->seq, __ATOMIC_RELAXED);
			if (s1 == s2)
				return true;
		}
		if (attempt > 10)
			nanosleep(&(struct timespec){ .tv_nsec = 500000 }, NULL);
	}
	return false;
}

/*
 * Map the segment of @pid and take a first snapshot.  On failure returns
 * the reason, with a message in @why.
 */
static enum seg_error seg_open(pid_t pid, struct seg *s, char *why, size_t whylen)
{
	char path[128];
	const char *problem;
	struct stat st;
	uint64_t start;
	void *p;
	int fd;

	memset(s, 0, sizeof(*s));
	s->pid = pid;
	seg_path(pid, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int err = errno;

		if (!pid_alive(pid)) {
			snprintf(why, whylen, "no process with id %ld", (long)pid);
			return SEG_NOPROC;
		}
		if (err == ENOENT) {
			char comm[64];

			pid_comm(pid, comm, sizeof(comm));
			snprintf(why, whylen, "process %ld (%s) does not use ucma: no %s", (long)pid,
				 comm, path);
			return SEG_NOTUCMA;
		}
		if (err == EACCES || err == EPERM) {
			snprintf(why, whylen,
				 "%s: permission denied: the statistics of process %ld can be read "
				 "by its owner and by root only",
				 path, (long)pid);
			return SEG_ACCESS;
		}
		snprintf(why, whylen, "%s: %s", path, strerror(err));
		return SEG_BAD;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (size_t)st.st_size < sizeof(struct ucma_shm_header)) {
		close(fd);
		if (!pid_alive(pid)) {
			snprintf(why, whylen, "no process with id %ld", (long)pid);
			return SEG_NOPROC;
		}
		snprintf(why, whylen, "%s: not a ucma statistics segment (being created?)", path);
		return SEG_BUSY;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return SEG_BAD;
	}
	s->live = p;
	s->size = (size_t)st.st_size;
	/* The owner stores magic last: give a segment being created a moment. */
	for (int i = 0; i < 100 && __atomic_load_n(&((const struct ucma_shm_header *)p)->magic,
						   __ATOMIC_ACQUIRE) != UCMA_SHM_MAGIC;
	     i++)
		nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
	s->copy = xmalloc(s->size);
	if (!seg_snapshot(s)) {
		snprintf(why, whylen, "%s: the owner kept it busy for a second", path);
		return SEG_BUSY;
	}
	s->h = (const void *)s->copy;
	problem = header_problem(s->h, s->size, pid);
	if (problem) {
		snprintf(why, whylen, "%s: not a usable ucma statistics segment: %s", path, problem);
		return SEG_BAD;
	}
	if (!pid_alive(pid)) {
		snprintf(why, whylen, "no process with id %ld (%s is left from a process that ended)",
			 (long)pid, path);
		return SEG_STALE;
	}
	start = pid_start_time(pid);
	if (s->h->start_time && start && start != s->h->start_time) {
		snprintf(why, whylen,
			 "process %ld does not use ucma (%s is left from an earlier process with "
			 "the same id)",
			 (long)pid, path);
		return SEG_STALE;
	}
	s->ctr = (const void *)(s->copy + s->h->counters_offset);
	s->map = (const uint8_t *)(s->copy + s->h->map_offset);
	return SEG_OK;
}

static void seg_close(struct seg *s)
{
	if (s->live)
		munmap((void *)s->live, s->size);
	free(s->copy);
	memset(s, 0, sizeof(*s));
}

/* Open or exit with the reason. */
static void seg_open_or_die(pid_t pid, struct seg *s)
{
	char why[512];

	if (seg_open(pid, s, why, sizeof(why)) != SEG_OK)
		die("%s", why);
}

static void seg_refresh_or_die(struct seg *s)
{
	if (!seg_snapshot(s))
		die("process %ld kept its statistics busy for a second", (long)s->pid);
}

static const struct ucma_shm_counter *counter_find(const struct seg *s, const char *name)
{
	for (uint32_t i = 0; i < s->h->nr_counters; i++)
		if (strncmp(s->ctr[i].name, name, sizeof(s->ctr[i].name)) == 0)
			return &s->ctr[i];
	return NULL;
}

/* A counter's value, or @dflt when the segment does not have it. */
static uint64_t counter_value(const struct seg *s, const char *name, uint64_t dflt)
{
	const struct ucma_shm_counter *c = counter_find(s, name);

	return c ? c->value : dflt;
}

/* Sum of cma_<area>_<suffix> over every area. */
static uint64_t area_sum(const struct seg *s, const char *suffix)
{
	uint64_t sum = 0;
	char name[UCMA_SHM_NAME_MAX + 32];

	for (uint32_t i = 0; i < s->h->nr_areas; i++) {
		snprintf(name, sizeof(name), "cma_%.*s_%s", UCMA_SHM_RANGE_NAME,
			 s->h->areas[i].name, suffix);
		sum += counter_value(s, name, 0);
	}
	return sum;
}

/* "2 MiB", "1 GiB", "1536 KiB": the largest unit that divides @bytes. */
static const char *size_str(uint64_t bytes, char sbuf[32])
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;

	while (u + 1 < sizeof(units) / sizeof(units[0]) && bytes >= 1024 && bytes % 1024 == 0) {
		bytes /= 1024;
		u++;
	}
	snprintf(sbuf, 32, "%llu %s", (unsigned long long)bytes, units[u]);
	return sbuf;
}

static void print_counter(const struct ucma_shm_counter *c)
{
	if (c->flags & UCMA_SHM_CTR_SIGNED)
		printf("%.*s %lld\n", UCMA_SHM_NAME_MAX, c->name, (long long)(int64_t)c->value);
	else
		printf("%.*s %llu\n", UCMA_SHM_NAME_MAX, c->name, (unsigned long long)c->value);
}

/* ------------------------------------------------------------------------ */
/* ucmastat PID [NAME...]                                                    */
/* ------------------------------------------------------------------------ */

static int cmd_counters(pid_t pid, char **names, int nnames)
{
	struct seg s;
	int rc = 0;

	seg_open_or_die(pid, &s);
	if (nnames == 0) {
		for (uint32_t i = 0; i < s.h->nr_counters; i++)
			print_counter(&s.ctr[i]);
	}
	for (int i = 0; i < nnames; i++) {
		const struct ucma_shm_counter *c = counter_find(&s, names[i]);

		if (c) {
			print_counter(c);
		} else {
			fprintf(stderr, "%s: process %ld has no statistic named '%s'\n", prog,
				(long)pid, names[i]);
			rc = 1;
		}
	}
	seg_close(&s);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* ucmastat -w SECONDS [-n COUNT] [-a] PID                                    */
/* ------------------------------------------------------------------------ */

enum col_kind { COL_GAUGE_MIB, COL_GAUGE_BYTES_MIB, COL_EVENT, COL_GAUGE };

static const struct column {
	const char *title;
	const char *counter;	/* NULL: computed (contiguous pages in use) */
	enum col_kind kind;
} columns[] = {
	{ "free_n", "nr_free_pages_normal", COL_GAUGE_MIB },
	{ "free_c", "nr_free_pages_cma", COL_GAUGE_MIB },
	{ "contig", NULL, COL_GAUGE_MIB },
	{ "malloc", "malloc_active", COL_GAUGE_BYTES_MIB },
	{ "halloc", "halloc", COL_EVENT },
	{ "hfree", "hfree", COL_EVENT },
	{ "migr", "pgmigrate_success", COL_EVENT },
	{ "mfail", "pgmigrate_fail", COL_EVENT },
	{ "cma_ok", "cma_alloc_success", COL_EVENT },
	{ "cma_ng", "cma_alloc_fail", COL_EVENT },
	{ "stall", "compact_stall", COL_EVENT },
	{ "frag_n", "fragmentation_score_normal", COL_GAUGE },
	{ "frag_c", "fragmentation_score_cma", COL_GAUGE },
};
#define NR_COLUMNS (sizeof(columns) / sizeof(columns[0]))

/* Column groups, vmstat style: "----memory----" over the columns they span. */
static const struct {
	const char *title;
	unsigned ncols;
} groups[] = {
	{ "MiB", 4 },
	{ "events", 7 },
	{ "frag", 2 },
};

static void print_groups(void)
{
	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
		int width = (int)groups[g].ncols * 8 - 1;
		int len = (int)strlen(groups[g].title) + 2;
		int left = (width - len) / 2, right = width - len - left;

		printf(" %.*s %s %.*s", left, "--------------------------------", groups[g].title,
		       right, "--------------------------------");
	}
	printf("\n");
}

static uint64_t column_value(const struct seg *s, const struct column *c)
{
	if (!c->counter)
		return area_sum(s, "used");
	return counter_value(s, c->counter, 0);
}

static void print_row(const struct seg *s, const uint64_t *prev)
{
	for (size_t i = 0; i < NR_COLUMNS; i++) {
		uint64_t v = column_value(s, &columns[i]);

		switch (columns[i].kind) {
		case COL_GAUGE_MIB:
			v = v * s->h->page_size >> 20;
			break;
		case COL_GAUGE_BYTES_MIB:
			v >>= 20;
			break;
		case COL_EVENT:
			if (prev)
				v -= prev[i];
			break;
		case COL_GAUGE:
			break;
		}
		printf(" %7llu", (unsigned long long)v);
	}
	printf("\n");
	fflush(stdout);
}

static void sleep_seconds(double secs)
{
	struct timespec ts = { .tv_sec = (time_t)secs };

	ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int cmd_watch(pid_t pid, double interval, long count, bool all)
{
	struct seg s;
	uint64_t *prev_vals;
	uint64_t prev_cols[NR_COLUMNS];

	seg_open_or_die(pid, &s);
	prev_vals = xmalloc(s.h->nr_counters * sizeof(uint64_t));
	if (!all) {
		print_groups();
		for (size_t i = 0; i < NR_COLUMNS; i++)
			printf(" %7s", columns[i].title);
		printf("\n");
	}
	for (long row = 0; count <= 0 || row < count; row++) {
		if (row > 0) {
			sleep_seconds(interval);
			if (!pid_alive(pid)) {
				fprintf(stderr, "%s: process %ld ended\n", prog, (long)pid);
				break;
			}
			seg_refresh_or_die(&s);
		}
		if (all) {
			/* Every statistic that changed, with its change. */
			printf("%s--- %ld (process %ld, %s)\n", row ? "\n" : "", row, (long)pid,
			       row ? "changes" : "values");
			unsigned changed = 0;

			for (uint32_t i = 0; i < s.h->nr_counters; i++) {
				const struct ucma_shm_counter *c = &s.ctr[i];

				if (row == 0) {
					print_counter(c);
				} else if (c->value != prev_vals[i]) {
					printf("%.*s %lld (%+lld)\n", UCMA_SHM_NAME_MAX, c->name,
					       (long long)c->value,
					       (long long)(c->value - prev_vals[i]));
					changed++;
				}
			}
			if (row > 0 && !changed)
				printf("(no change)\n");
			fflush(stdout);
		} else {
			print_row(&s, row ? prev_cols : NULL);
		}
		for (uint32_t i = 0; i < s.h->nr_counters; i++)
			prev_vals[i] = s.ctr[i].value;
		for (size_t i = 0; i < NR_COLUMNS; i++)
			prev_cols[i] = column_value(&s, &columns[i]);
	}
	free(prev_vals);
	seg_close(&s);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* ucmastat --list [--prune]                                                 */
/* ------------------------------------------------------------------------ */

static int cmd_list(bool prune)
{
	DIR *d = opendir(UCMA_SHM_DIR);
	struct dirent *e;
	bool header = false;
	int rc = 0;

	if (!d)
		die("%s: %s", UCMA_SHM_DIR, strerror(errno));
	while ((e = readdir(d))) {
		size_t plen = strlen(UCMA_SHM_PREFIX);
		char why[512], path[128];
		const char *digits = e->d_name + plen;
		struct seg s;
		enum seg_error err;
		pid_t pid;

		if (strncmp(e->d_name, UCMA_SHM_PREFIX, plen) != 0 || !*digits ||
		    strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9)
			continue;
		pid = (pid_t)atol(digits);
		if (pid <= 0)
			continue;
		err = seg_open(pid, &s, why, sizeof(why));
		if (err == SEG_NOPROC || err == SEG_STALE) {
			seg_close(&s);
			if (!prune)
				continue;
			seg_path(pid, path, sizeof(path));
			if (unlink(path) == 0) {
				printf("removed %s (process %ld ended)\n", path, (long)pid);
			} else {
				fprintf(stderr, "%s: cannot remove %s: %s\n", prog, path,
					strerror(errno));
				rc = 1;
			}
			continue;
		}
		if (prune) {
			seg_close(&s);
			continue;
		}
		if (!header) {
			printf("%8s %-16s %8s %8s %8s %8s %5s %5s\n", "PID", "COMMAND", "ARENA",
			       "FREE", "CMA", "CONTIG", "FRAG", "AGE");
			header = true;
		}
		if (err == SEG_OK) {
			struct timespec now;
			uint64_t page = s.h->page_size;
			uint64_t cma = 0;
			double age;

			for (uint32_t i = 0; i < s.h->nr_areas; i++)
				cma += (uint64_t)(s.h->areas[i].end_pb - s.h->areas[i].start_pb) *
				       s.h->pageblock_pages;
			clock_gettime(CLOCK_REALTIME, &now);
			age = ((double)now.tv_sec * 1e9 + (double)now.tv_nsec -
			       (double)s.h->update_time_ns) /
			      1e9;
			printf("%8ld %-16.16s %7lluM %7lluM %7lluM %7lluM %5llu %4.0fs\n",
			       (long)pid, s.h->comm, (unsigned long long)(s.h->arena_size >> 20),
			       (unsigned long long)(counter_value(&s, "nr_free_pages", 0) * page >>
						    20),
			       (unsigned long long)(cma * page >> 20),
			       (unsigned long long)(area_sum(&s, "used") * page >> 20),
			       (unsigned long long)counter_value(&s, "fragmentation_score", 0),
			       age < 0 ? 0 : age);
		} else {
			char comm[64];

			pid_comm(pid, comm, sizeof(comm));
			printf("%8ld %-16.16s %8s %8s %8s %8s %5s %5s  (%s)\n", (long)pid, comm,
			       "-", "-", "-", "-", "-", "-",
			       err == SEG_ACCESS ? "permission denied" : "unreadable");
		}
		seg_close(&s);
	}
	closedir(d);
	if (!header && !prune)
		printf("no process publishes ucma statistics\n");
	return rc;
}

/* ------------------------------------------------------------------------ */
/* The map                                                                   */
/* ------------------------------------------------------------------------ */

/* A stretch of pageblocks shown under one title: a zone, or a CMA area. */
struct section {
	char title[192];
	uint32_t start, end;
};

#define MAX_SECTIONS (UCMA_SHM_MAX_AREAS * 2 + UCMA_SHM_MAX_ZONES + 2)

/*
 * What backs CMA area @name, from its counters: ", hugetlb file, 256
 * frames of 2 MiB, physical runs up to 68 MiB"; empty when the segment
 * has no such counters (an older library).
 */
static void frames_note(const struct seg *s, const char *name, char *buf, size_t len)
{
	static const char *const files[] = { "anonymous", "shmem file", "hugetlb file" };
	char key[UCMA_SHM_NAME_MAX];
	uint64_t kind, fsize, frames, run;

	buf[0] = '\0';
	snprintf(key, sizeof(key), "cma_%s_file", name);
	if (!counter_find(s, key))
		return;
	kind = counter_value(s, key, 0);
	snprintf(key, sizeof(key), "cma_%s_frame_size", name);
	fsize = counter_value(s, key, 0);
	snprintf(key, sizeof(key), "cma_%s_frames", name);
	frames = counter_value(s, key, 0);
	snprintf(key, sizeof(key), "cma_%s_phys_run_max", name);
	run = counter_value(s, key, 0);
	if (!fsize) {
		snprintf(buf, len, ", %s, no frames", files[kind < 3 ? kind : 0]);
		return;
	}
	snprintf(buf, len, ", %s, %llu frames of %llu KiB", files[kind < 3 ? kind : 0],
		 (unsigned long long)frames, (unsigned long long)(fsize >> 10));
	if (run)
		snprintf(buf + strlen(buf), len - strlen(buf), ", physical runs up to %llu MiB",
			 (unsigned long long)(run >> 20));
}

static int build_sections(const struct seg *s, struct section *out)
{
	const struct ucma_shm_header *h = s->h;
	int n = 0;

	for (uint32_t zi = 0; zi < h->nr_zones; zi++) {
		const struct ucma_shm_range *z = &h->zones[zi];
		uint32_t pos = z->start_pb;

		if (z->start_pb == z->end_pb)
			continue;
		for (;;) {
			/* The area starting first at or after pos, inside this zone. */
			const struct ucma_shm_range *next = NULL;

			for (uint32_t i = 0; i < h->nr_areas; i++) {
				const struct ucma_shm_range *ar = &h->areas[i];

				if (ar->start_pb >= pos && ar->start_pb < z->end_pb &&
				    ar->end_pb > ar->start_pb &&
				    (!next || ar->start_pb < next->start_pb))
					next = ar;
			}
			uint32_t stop = next ? next->start_pb : z->end_pb;

			if (stop > pos) {
				snprintf(out[n].title, sizeof(out[n].title), "zone %.32s (%.16s)",
					 z->name, z->backing);
				out[n].start = pos;
				out[n].end = stop;
				n++;
			}
			if (!next || n >= MAX_SECTIONS - 1)
				break;
			{
				char note[96];

				frames_note(s, next->name, note, sizeof(note));
				snprintf(out[n].title, sizeof(out[n].title),
					 "zone %.32s, CMA area %.32s (%.16s%s)", z->name,
					 next->name, next->backing, note);
			}
			out[n].start = next->start_pb;
			out[n].end = next->end_pb < z->end_pb ? next->end_pb : z->end_pb;
			pos = out[n].end;
			n++;
		}
	}
	return n;
}

static void state_counts(const struct seg *s, uint64_t counts[UCMA_SHM_PB_NR])
{
	memset(counts, 0, sizeof(uint64_t) * UCMA_SHM_PB_NR);
	for (uint32_t b = 0; b < s->h->nr_pageblocks; b++) {
		unsigned st = UCMA_SHM_PB_STATE(s->map[b]);

		if (st < UCMA_SHM_PB_NR)
			counts[st]++;
	}
}

static double seg_age(const struct seg *s)
{
	struct timespec now;
	double age;

	clock_gettime(CLOCK_REALTIME, &now);
	age = ((double)now.tv_sec * 1e9 + (double)now.tv_nsec - (double)s->h->update_time_ns) / 1e9;
	return age < 0 ? 0 : age;
}

/* The summary: pageblocks per state into @counts_buf, the scores into @score_buf. */
static void summary_text(const struct seg *s, char *counts_buf, size_t len, char *score_buf,
			 size_t score_len)
{
	uint64_t counts[UCMA_SHM_PB_NR];
	size_t n = 0;

	state_counts(s, counts);
	counts_buf[0] = '\0';
	for (int st = 0; st < UCMA_SHM_PB_NR && n < len; st++)
		n += (size_t)snprintf(counts_buf + n, len - n, "%s%llu %s", st ? ", " : "",
				      (unsigned long long)counts[st], pb_styles[st].name);
	snprintf(score_buf, score_len, "fragmentation score: normal %llu, cma %llu",
		 (unsigned long long)counter_value(s, "fragmentation_score_normal", 0),
		 (unsigned long long)counter_value(s, "fragmentation_score_cma", 0));
}

static int cmd_map(pid_t pid, bool color)
{
	struct section sec[MAX_SECTIONS];
	char summary[512], score[128], sz1[32], sz2[32];
	struct seg s;
	int nsec;

	seg_open_or_die(pid, &s);
	printf("ucma arena of process %ld (%.16s): %s, %u pageblocks of %s, updated %.1f s ago\n",
	       (long)pid, s.h->comm, size_str(s.h->arena_size, sz1), s.h->nr_pageblocks,
	       size_str((uint64_t)s.h->pageblock_pages * s.h->page_size, sz2), seg_age(&s));
	nsec = build_sections(&s, sec);
	for (int i = 0; i < nsec; i++) {
		printf("%s: pageblocks %u-%u\n", sec[i].title, sec[i].start, sec[i].end - 1);
		for (uint32_t row = sec[i].start; row < sec[i].end; row += MAP_WIDTH) {
			uint32_t stop = row + MAP_WIDTH < sec[i].end ? row + MAP_WIDTH : sec[i].end;
			int cur = -1;

			printf("%8u  ", row);
			for (uint32_t b = row; b < stop; b++) {
				unsigned st = UCMA_SHM_PB_STATE(s.map[b]);

				if (st >= UCMA_SHM_PB_NR)
					st = UCMA_SHM_PB_FREE;
				if (color && (int)st != cur) {
					printf("\033[0;%sm", pb_styles[st].ansi);
					cur = (int)st;
				}
				putchar(pb_styles[st].ch);
			}
			if (color)
				printf("\033[0m");
			putchar('\n');
		}
	}
	printf("legend:");
	for (int st = 0; st < UCMA_SHM_PB_NR; st++) {
		if (color)
			printf("  \033[0;%sm%c\033[0m %s", pb_styles[st].ansi, pb_styles[st].ch,
			       pb_styles[st].name);
		else
			printf("  %c %s", pb_styles[st].ch, pb_styles[st].name);
	}
	printf("\n");
	summary_text(&s, summary, sizeof(summary), score, sizeof(score));
	printf("summary: %s; %s\n", summary, score);
	seg_close(&s);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The map as SVG                                                            */
/* ------------------------------------------------------------------------ */

#define SVG_CELL   10
#define SVG_PITCH  12
#define SVG_MARGIN 12
#define SVG_LABEL  64
#define SVG_LINE   18

static void xml_text(FILE *f, const char *s, size_t max)
{
	for (size_t i = 0; i < max && s[i]; i++) {
		switch (s[i]) {
		case '&':
			fputs("&amp;", f);
			break;
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		case '\'':
			fputs("&apos;", f);
			break;
		default:
			/* Control characters are not allowed in XML 1.0. */
			fputc((unsigned char)s[i] < 0x20 ? '?' : s[i], f);
		}
	}
}

static int cmd_svg(pid_t pid, const char *file)
{
	struct section sec[MAX_SECTIONS];
	char summary[512], score[128], title[160], sz1[32], sz2[32];
	int nsec, width, height, y;
	struct seg s;
	FILE *f;

	seg_open_or_die(pid, &s);
	nsec = build_sections(&s, sec);
	width = SVG_MARGIN * 2 + SVG_LABEL + MAP_WIDTH * SVG_PITCH;
	height = SVG_MARGIN + 2 * SVG_LINE;
	for (int i = 0; i < nsec; i++)
		height += SVG_LINE +
			  (int)((sec[i].end - sec[i].start + MAP_WIDTH - 1) / MAP_WIDTH) * SVG_PITCH +
			  6;
	height += 2 * SVG_LINE + 3 * SVG_LINE + SVG_MARGIN;	/* legend, summary */

	f = strcmp(file, "-") == 0 ? stdout : fopen(file, "w");
	if (!f)
		die("%s: %s", file, strerror(errno));
	snprintf(title, sizeof(title), "ucma arena of process %ld (%.16s)", (long)pid, s.h->comm);
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"monospace\" font-size=\"12\">\n",
		width, height, width, height);
	fprintf(f, "<title>");
	xml_text(f, title, sizeof(title));
	fprintf(f, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width, height);
	y = SVG_MARGIN + 12;
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\">", SVG_MARGIN, y);
	xml_text(f, title, sizeof(title));
	fprintf(f, "</text>\n");
	y += SVG_LINE;
	fprintf(f,
		"<text x=\"%d\" y=\"%d\">%s, %u pageblocks of %s, one square per "
		"pageblock</text>\n",
		SVG_MARGIN, y, size_str(s.h->arena_size, sz1), s.h->nr_pageblocks,
		size_str((uint64_t)s.h->pageblock_pages * s.h->page_size, sz2));
	y += SVG_LINE;
	for (int i = 0; i < nsec; i++) {
		y += SVG_LINE;
		fprintf(f, "<text x=\"%d\" y=\"%d\">", SVG_MARGIN, y - 5);
		xml_text(f, sec[i].title, sizeof(sec[i].title));
		fprintf(f, ": pageblocks %u-%u</text>\n", sec[i].start, sec[i].end - 1);
		fprintf(f, "<g>\n");
		for (uint32_t b = sec[i].start; b < sec[i].end; b++) {
			uint32_t col = (b - sec[i].start) % MAP_WIDTH;
			uint32_t row = (b - sec[i].start) / MAP_WIDTH;
			unsigned st = UCMA_SHM_PB_STATE(s.map[b]), used = UCMA_SHM_PB_USED(s.map[b]);
			int x = SVG_MARGIN + SVG_LABEL + (int)col * SVG_PITCH;
			int cy = y + (int)row * SVG_PITCH;

			if (st >= UCMA_SHM_PB_NR)
				st = UCMA_SHM_PB_FREE;
			if (col == 0)
				fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%u</text>\n",
					SVG_MARGIN + SVG_LABEL - 6, cy + SVG_CELL, b);
			fprintf(f,
				"<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">"
				"<title>pageblock %u: %s, %u/16 in use</title></rect>\n",
				x, cy, SVG_CELL, SVG_CELL, pb_styles[st].rgb, b, pb_styles[st].name,
				used);
		}
		fprintf(f, "</g>\n");
		y += (int)((sec[i].end - sec[i].start + MAP_WIDTH - 1) / MAP_WIDTH) * SVG_PITCH + 6;
	}
	/* Legend: two rows of squares with their names. */
	y += SVG_LINE;
	for (int st = 0; st < UCMA_SHM_PB_NR; st++) {
		int x = SVG_MARGIN + (st % 4) * 200;
		int ly = y + (st / 4) * SVG_LINE;

		fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>", x,
			ly - SVG_CELL, SVG_CELL, SVG_CELL, pb_styles[st].rgb);
		fprintf(f, "<text x=\"%d\" y=\"%d\">%c %s</text>\n", x + SVG_CELL + 6, ly,
			pb_styles[st].ch, pb_styles[st].name);
	}
	y += 2 * SVG_LINE;
	summary_text(&s, summary, sizeof(summary), score, sizeof(score));
	fprintf(f, "<text x=\"%d\" y=\"%d\">", SVG_MARGIN, y);
	xml_text(f, summary, sizeof(summary));
	fprintf(f, "</text>\n<text x=\"%d\" y=\"%d\">", SVG_MARGIN, y + SVG_LINE);
	xml_text(f, score, sizeof(score));
	fprintf(f, "</text>\n</svg>\n");
	if (f != stdout ? fclose(f) != 0 : fflush(f) != 0)
		die("%s: %s", file, strerror(errno));
	seg_close(&s);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Command line                                                              */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s [OPTION]... PID [NAME]...\n"
		"       %s -w SECONDS [-n COUNT] [-a] PID\n"
		"       %s --map [--color=WHEN] PID\n"
		"       %s --svg FILE PID\n"
		"       %s --list [--prune]\n"
		"Show the ucma statistics of process PID, read from its live statistics\n"
		"segment in " UCMA_SHM_DIR "/" UCMA_SHM_PREFIX "PID.\n\n"
		"  (no option)          every statistic as 'name value', or only the NAMEs\n"
		"  -w, --wait=SECONDS   print the changes every SECONDS, like vmstat\n"
		"  -n, --count=COUNT    with -w: stop after COUNT lines\n"
		"  -a, --all            with -w: every statistic that changed\n"
		"  -m, --map            draw the arena, one character per pageblock\n"
		"      --color[=WHEN]   colour the map: auto (default), always, never\n"
		"      --svg=FILE       write the map as an SVG image ('-': stdout)\n"
		"  -l, --list           list the processes that publish statistics\n"
		"      --prune          remove segments left by processes that ended\n"
		"  -h, --help           show this help\n"
		"  -V, --version        show the version\n\n"
		"Exit status: 0 success, 1 the statistics could not be read, 2 bad usage.\n",
		prog, prog, prog, prog, prog);
}

int main(int argc, char **argv)
{
	enum { OPT_COLOR = 256, OPT_SVG, OPT_PRUNE };
	static const struct option longopts[] = {
		{ "wait", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'n' },
		{ "all", no_argument, NULL, 'a' },
		{ "map", no_argument, NULL, 'm' },
		{ "color", optional_argument, NULL, OPT_COLOR },
		{ "colour", optional_argument, NULL, OPT_COLOR },
		{ "svg", required_argument, NULL, OPT_SVG },
		{ "list", no_argument, NULL, 'l' },
		{ "prune", no_argument, NULL, OPT_PRUNE },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	double interval = 0;
	long count = 0;
	bool all = false, map = false, list = false, prune = false, watch = false;
	const char *svg = NULL, *color = "auto";
	bool use_color;
	pid_t pid;
	int opt;

	if (argc > 0 && argv[0] && strrchr(argv[0], '/'))
		prog = strrchr(argv[0], '/') + 1;
	else if (argc > 0 && argv[0] && *argv[0])
		prog = argv[0];
	while ((opt = getopt_long(argc, argv, "w:n:amlhV", longopts, NULL)) != -1) {
		char *end;

		switch (opt) {
		case 'w':
			errno = 0;
			interval = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(interval > 0) || interval > 86400)
				usage_error("invalid interval '%s' (seconds, > 0)", optarg);
			watch = true;
			break;
		case 'n':
			errno = 0;
			count = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || count <= 0)
				usage_error("invalid count '%s' (a positive number)", optarg);
			break;
		case 'a':
			all = true;
			break;
		case 'm':
			map = true;
			break;
		case OPT_COLOR:
			color = optarg ? optarg : "always";
			if (strcmp(color, "auto") && strcmp(color, "always") && strcmp(color, "never"))
				usage_error("invalid --color '%s' (auto, always or never)", color);
			break;
		case OPT_SVG:
			svg = optarg;
			break;
		case 'l':
			list = true;
			break;
		case OPT_PRUNE:
			prune = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("ucmastat (%s) %s\n", PACKAGE_NAME, PACKAGE_VERSION);
			return 0;
		default:
			fprintf(stderr, "Try '%s --help' for more information.\n", prog);
			return 2;
		}
	}
	if (list || prune) {
		if (optind != argc || watch || map || svg)
			usage_error("--list and --prune take no process id or other mode");
		return cmd_list(prune);
	}
	if (optind >= argc)
		usage_error("missing process id");
	pid = parse_pid(argv[optind++]);
	if ((count || all) && !watch)
		usage_error("-n and -a go with -w");
	if (watch + map + (svg != NULL) > 1)
		usage_error("choose one of -w, --map and --svg");
	if ((watch || map || svg) && optind != argc)
		usage_error("statistic names go without -w, --map or --svg");
	if (watch)
		return cmd_watch(pid, interval, count, all);
	if (svg)
		return cmd_svg(pid, svg);
	if (map) {
		use_color = strcmp(color, "always") == 0 ||
			    (strcmp(color, "auto") == 0 && isatty(STDOUT_FILENO) &&
			     !getenv("NO_COLOR") &&
			     !(getenv("TERM") && strcmp(getenv("TERM"), "dumb") == 0));
		return cmd_map(pid, use_color);
	}
	return cmd_counters(pid, argv + optind, argc - optind);
}
