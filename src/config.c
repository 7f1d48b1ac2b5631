/*
 * config.c - the options of ucma: one table, read once at start-up.
 *
 * Every tunable is one row of opt_table[]: its UCMA_CONF key, its
 * environment variable, its type, its default (as text, parsed by the same
 * code as a user's value, so that the documented default is the one in
 * effect), its limits, the form it accepts and a one-line description.  The
 * table is the single source of truth: the parsers, the messages, the
 * settings dump and the ucma(7) manual page all follow it.
 *
 * Values are applied in this order: the defaults, then each UCMA_* variable,
 * then the items of UCMA_CONF="key=value,key=value" from left to right, so
 * that a later setting wins.  UCMA_STRICT (or the key strict) is read before
 * everything else so that strictness covers every other value.  A bad value
 * never stops parsing: it prints one line naming the variable, the value,
 * the accepted form and the value kept instead, and it is counted; the
 * caller decides whether strict mode turns the count into a refusal to
 * start.  Unknown UCMA_* names are reported too, because a misspelt variable
 * would otherwise be ignored without a word.  The CMA zone is checked
 * against the arena only once everything is read, since either may come
 * from any of the sources.
 *
 * This code runs while the library starts, possibly inside malloc() of a
 * program that preloads it: it must not allocate.  Hence no stdio streams,
 * no strdup and no copies of the environment; strings are parsed in place
 * or in small stack buffers, and messages go to fd 2 with write(2).  The
 * environment is trusted only outside set-user-ID and set-group-ID programs.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1	/* secure_getenv(), environ */
#endif
#include "internal.h"
#include "lock.h"
#include "copy.h"
#include "node.h"
#include "fork.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <unistd.h>

extern char **environ;

/* Print the options in effect, one "ucma: UCMA_X=value" line each. */
UCMA_INTERNAL void ucma_options_print(int fd, const struct ucma_options *o);
/* Print the table itself: name, key, default, limits, form, description. */
UCMA_INTERNAL void ucma_options_describe(int fd);

struct ucma_options ucma_opt;

#define MiB(x)			((uint64_t)(x) << 20)
#define TiB(x)			((uint64_t)(x) << 40)
#define OPT_NORMAL_MIN		MiB(4)	/* NORMAL zone left beside the CMA zone */
#define OPT_NODE_MAX		1023
#define OPT_STR(x)		OPT_STR2(x)
#define OPT_STR2(x)		#x

/* Longest UCMA_CONF value and longest value quoted in a message. */
#define OPT_VALUE_MAX		1024
#define OPT_QUOTE_MAX		64

enum opt_type {
	T_BOOL,		/* bool */
	T_UINT,		/* unsigned, decimal */
	T_SIZE,		/* size_t, with K/M/G/T suffixes */
	T_ENUM,		/* int, one of the words of the entry */
	T_NODE,		/* int, a node number or UCMA_NODE_* */
	T_AREAS,	/* the CMA area list: areas, nr_areas and cma_size */
	T_STRING,	/* char[], NUL-terminated */
};

#define F_ROUND_2M	0x1u	/* a size rounded up to a pageblock */
#define F_CMA		0x2u	/* sets the CMA zone: replaces any area list */

struct opt_word {
	const char *word;	/* matched without regard to case */
	int value;
};

/*
 * struct opt_def - one option.  @min and @max bound numbers and sizes (after
 * rounding); @accepted is quoted in messages about a malformed value and
 * @desc is the line of the manual page.
 */
struct opt_def {
	const char *key;		/* UCMA_CONF key */
	const char *env;		/* environment variable */
	enum opt_type type;
	unsigned flags;			/* F_* */
	const char *def;		/* default, in the accepted form */
	uint64_t min, max;
	const struct opt_word *words;	/* T_ENUM: the words; T_NODE: the names */
	size_t offset;			/* in struct ucma_options */
	size_t len;			/* T_STRING: size of the buffer */
	const char *accepted;
	const char *desc;
};

/* The first word of a value is its canonical name. */
static const struct opt_word backing_words[] = {
	{ "auto", UCMA_BACKING_AUTO },
	{ "1G", UCMA_BACKING_HUGETLB_1G },
	{ "2M", UCMA_BACKING_HUGETLB_2M },
	{ "thp", UCMA_BACKING_THP },
	{ "none", UCMA_BACKING_NONE },
	/* the names ucma_backing_name() reports, so they can be fed back */
	{ "hugetlb-1G", UCMA_BACKING_HUGETLB_1G },
	{ "hugetlb-2M", UCMA_BACKING_HUGETLB_2M },
	{ NULL, 0 }
};

static const struct opt_word policy_words[] = {
	{ "lend", UCMA_CMA_LEND },
	{ "reserved", UCMA_CMA_RESERVED },
	{ "lend-handles", UCMA_CMA_LEND_HANDLES },
	{ NULL, 0 }
};

static const struct opt_word stats_shm_words[] = {
	{ "request", UCMA_SHM_REQUEST },
	{ "on", UCMA_SHM_ON },
	{ "off", UCMA_SHM_OFF },
	{ "1", UCMA_SHM_ON },
	{ "0", UCMA_SHM_OFF },
	{ NULL, 0 }
};

static const struct opt_word node_words[] = {
	{ "default", UCMA_NODE_DEFAULT },
	{ "local", UCMA_NODE_LOCAL },
	{ "interleave", UCMA_NODE_INTERLEAVE },
	{ NULL, 0 }
};

#define SIZE_FORM	"a number of bytes with an optional K, M, G or T suffix, e.g. 512M"
#define BOOL_FORM	"1, 0, yes, no, on, off, true or false"
#define BACKING_FORM	"auto, 1G, 2M, thp or none"
#define AREAS_FORM	"name:size[,name:size...] (';' between areas inside UCMA_CONF), " \
			"at most " OPT_STR(UCMA_MAX_CMA_AREAS) " areas, names of 1 to 31 " \
			"letters, digits, '_' or '-', sizes above 0"

#define OFF(field)	offsetof(struct ucma_options, field)

enum opt_id {
	O_STRICT,
	O_ARENA,
	O_CMA,
	O_CMA_AREAS,
	O_HUGEPAGES,
	O_HUGEPAGES_NORMAL,
	O_NODE,
	O_POPULATE,
	O_CMA_DONTFORK,
	O_CMA_POLICY,
	O_COMPACT,
	O_COMPACT_DIRECT,
	O_COMPACT_INTERVAL_MS,
	O_COMPACT_PROACTIVENESS,
	O_COPY_HELPERS,
	O_DECAY_MS,
	O_OVERFLOW_CACHE,
	O_STATS,
	O_STATS_FILE,
	O_STATS_SHM,
	O_PRELOAD_CONTIG_MIN,
	O_VERBOSE,
	O_NR
};

/*
 * The options, in the order they are read from the environment.  strict
 * comes first because it is read before all others anyway; cma_areas comes
 * after cma so that, when both variables are set, the area list wins.
 */
static const struct opt_def opt_table[O_NR] = {
	[O_STRICT] = {
		"strict", "UCMA_STRICT", T_BOOL, 0, "0", 0, 1, NULL, OFF(strict), 0,
		BOOL_FORM,
		"refuse to start when any UCMA_* value is bad, instead of keeping its default" },
	[O_ARENA] = {
		"arena", "UCMA_ARENA_SIZE", T_SIZE, F_ROUND_2M, "1G", MiB(8), TiB(1), NULL,
		OFF(arena_size), 0, SIZE_FORM,
		"size of the arena, NORMAL zone and CMA areas together" },
	[O_CMA] = {
		"cma", "UCMA_CMA_SIZE", T_SIZE, F_ROUND_2M | F_CMA, "256M", MiB(2), TiB(1), NULL,
		OFF(cma_size), 0, SIZE_FORM,
		"size of the CMA zone, one area named default; at least 4M of the arena stay "
		"NORMAL; when not given, a quarter of the arena, at most 256M" },
	[O_CMA_AREAS] = {
		"cma_areas", "UCMA_CMA_AREAS", T_AREAS, F_ROUND_2M | F_CMA, "", MiB(2), TiB(1),
		NULL, OFF(areas), 0, AREAS_FORM,
		"named CMA areas instead of the default one; the CMA zone is their sum" },
	[O_HUGEPAGES] = {
		"hugepages", "UCMA_HUGEPAGES", T_ENUM, 0, "auto", 0, 0, backing_words,
		OFF(hugepages), 0, BACKING_FORM,
		"backing of the CMA areas: the best available (auto), hugetlb 1G or 2M pages, "
		"transparent huge pages, or plain pages" },
	[O_HUGEPAGES_NORMAL] = {
		"hugepages_normal", "UCMA_HUGEPAGES_NORMAL", T_ENUM, 0, "thp", 0, 0,
		backing_words, OFF(hugepages_normal), 0, BACKING_FORM,
		"backing of the NORMAL zone, as for hugepages (auto means thp; thp from 16M in use)" },
	[O_NODE] = {
		"node", "UCMA_NODE", T_NODE, 0, "default", 0, OPT_NODE_MAX, node_words,
		OFF(node), 0, "a NUMA node number, local, interleave or default",
		"NUMA placement of the arena: one node, the node of the initialising thread "
		"(local), interleaved over the allowed nodes, or no policy (default)" },
	[O_POPULATE] = {
		"populate", "UCMA_POPULATE", T_BOOL, 0, "0", 0, 1, NULL, OFF(populate), 0,
		BOOL_FORM, "fault the whole arena in at start-up" },
	[O_CMA_DONTFORK] = {
		"cma_dontfork", "UCMA_CMA_DONTFORK", T_BOOL, 0, "0", 0, 1, NULL,
		OFF(cma_dontfork), 0, BOOL_FORM,
		"children of fork() get empty CMA areas instead of a copy of the parent's "
		"(and private hugetlb areas need no free pool pages at fork)" },
	[O_CMA_POLICY] = {
		"cma_policy", "UCMA_CMA_POLICY", T_ENUM, 0, "lend", 0, 0, policy_words,
		OFF(cma_policy), 0, "lend, lend-handles or reserved",
		"lend: free CMA memory serves movable objects and backs the malloc heap until "
		"ucma_alloc() needs it; lend-handles: movable objects only; reserved: it serves "
		"ucma_alloc() only" },
	[O_COMPACT] = {
		"compact", "UCMA_COMPACT", T_BOOL, 0, "on", 0, 1, NULL, OFF(compact), 0,
		BOOL_FORM, "run the background compaction thread" },
	[O_COMPACT_DIRECT] = {
		"compact_direct", "UCMA_COMPACT_DIRECT", T_BOOL, 0, "on", 0, 1, NULL,
		OFF(compact_direct), 0, BOOL_FORM,
		"compact at once when a movable or contiguous allocation fails" },
	[O_COMPACT_INTERVAL_MS] = {
		"compact_interval_ms", "UCMA_COMPACT_INTERVAL_MS", T_UINT, 0, "500", 1, 3600000,
		NULL, OFF(compact_interval_ms), 0, "a whole number of milliseconds",
		"period of the background compaction thread, in milliseconds" },
	[O_COMPACT_PROACTIVENESS] = {
		"compact_proactiveness", "UCMA_COMPACT_PROACTIVENESS", T_UINT, 0, "20", 0, 100,
		NULL, OFF(compact_proactiveness), 0, "a whole number",
		"how much free memory background compaction keeps in whole 2M blocks: 0 "
		"compacts on demand only, 100 as much as it can" },
	[O_COPY_HELPERS] = {
		"copy_helpers", "UCMA_COPY_HELPERS", T_UINT, 0, "1", 0, UCMA_COPY_HELPERS_MAX, NULL,
		OFF(copy_helpers), 0, "a whole number",
		"threads that copy parts of a migrated object of 256K or more beside the "
		"migrating thread, at most the allowed CPUs less one; 0: it copies alone" },
	[O_DECAY_MS] = {
		"decay_ms", "UCMA_DECAY_MS", T_UINT, 0, "10000", 0, 3600000, NULL,
		OFF(decay_ms), 0, "a whole number of milliseconds",
		"time free NORMAL pages and freed overflow blocks are kept before they go "
		"back to the kernel, in milliseconds" },
	[O_OVERFLOW_CACHE] = {
		"overflow_cache", "UCMA_OVERFLOW_CACHE", T_SIZE, 0, "64M", 0, TiB(1), NULL,
		OFF(overflow_cache), 0, SIZE_FORM,
		"bytes of freed large blocks outside the arena kept mapped for the next "
		"ones of about their size; 0: each is unmapped when freed" },
	[O_STATS] = {
		"stats", "UCMA_STATS", T_BOOL, 0, "0", 0, 1, NULL, OFF(stats), 0, BOOL_FORM,
		"print the statistics report at exit" },
	[O_STATS_FILE] = {
		"stats_file", "UCMA_STATS_FILE", T_STRING, 0, "", 0, 0, NULL, OFF(stats_file),
		sizeof(((struct ucma_options *)0)->stats_file),
		"a path shorter than 256 bytes, %p standing for the process id",
		"file for the report at exit, %p replaced by the process id; empty: standard "
		"error" },
	[O_STATS_SHM] = {
		"stats_shm", "UCMA_STATS_SHM", T_ENUM, 0, "request", 0, 0, stats_shm_words,
		OFF(stats_shm), 0, "request, on (1) or off (0)",
		"live statistics for ucmastat in /dev/shm: only while ucmastat asks (request), "
		"from start-up to exit (on), or never (off)" },
	[O_PRELOAD_CONTIG_MIN] = {
		"preload_contig_min", "UCMA_PRELOAD_CONTIG_MIN", T_SIZE, 0, "0", 0, TiB(1), NULL,
		OFF(preload_contig_min), 0, SIZE_FORM,
		"with LD_PRELOAD, malloc() requests of at least this size get contiguous "
		"memory from a CMA area; 0: off" },
	[O_VERBOSE] = {
		"verbose", "UCMA_VERBOSE", T_BOOL, 0, "0", 0, 1, NULL, OFF(verbose), 0, BOOL_FORM,
		"print the settings in effect and the backing chosen at start-up" },
};

/*
 * UCMA_* names that other parts of ucma read for themselves (the tests and
 * benchmarks); a name matches when it starts with one of these, and a name
 * without a trailing '_' must match exactly.
 */
static const char *const foreign_names[] = {
	"UCMA_CONF", "UCMA_SOAK_SECONDS", "UCMA_STRESS_", "UCMA_TEST_", "UCMA_BENCH_",
};

/* One parsed value, before it is checked and stored. */
struct opt_value {
	uint64_t num;			/* T_BOOL, T_UINT, T_SIZE */
	int ival;			/* T_ENUM, T_NODE */
	const char *str;		/* T_STRING */
	int nr_areas;			/* T_AREAS */
	struct ucma_area_spec areas[UCMA_MAX_CMA_AREAS];
};

/* Why a value was refused; @accepted empty means the entry's own text. */
struct opt_err {
	char problem[192];
	char accepted[400];
};

/*
 * struct parse_ctx - the state of one ucma_options_from_env() or
 * ucma_options_from_config() call.  The CMA zone is checked against the
 * arena at the end, and the message then names whoever set it in this call.
 */
struct parse_ctx {
	struct ucma_options *o;
	int bad;			/* bad values so far */
	char cma_subject[128];		/* who set the CMA zone in this call */
	char arena_subject[128];	/* who set the arena in this call */
};

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

static void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

/* Write what snprintf() put in @buf of @size bytes, @n as it returned. */
static void write_formatted(int fd, const char *buf, size_t size, int n)
{
	if (n > 0)
		write_all(fd, buf, (size_t)n < size ? (size_t)n : size - 1);
}

/*
 * Copy at most OPT_QUOTE_MAX bytes of @s for a message.  Control characters
 * become '?' so that one bad value is always exactly one line.
 */
static void quote(char *dst, size_t dlen, const char *s, size_t len)
{
	size_t n = 0, i;

	for (i = 0; i < len && i < OPT_QUOTE_MAX && n + 1 < dlen; i++) {
		unsigned char ch = (unsigned char)s[i];

		dst[n++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	if (i < len && n + 4 <= dlen) {
		memcpy(dst + n, "...", 3);
		n += 3;
	}
	dst[n] = '\0';
}

/* "ucma: <subject>: <problem> (accepted: <accepted>); <outcome>" */
static void report(struct parse_ctx *c, const char *subject, const char *problem,
		   const char *accepted, const char *outcome)
{
	char msg[768];
	int n;

	/* Strictness is read first: under it no default is used at all. */
	if (c->o->strict)
		outcome = "refused (UCMA_STRICT=1)";
	n = snprintf(msg, sizeof(msg) - 1, "ucma: %s: %s (accepted: %s); %s",
		     subject, problem, accepted, outcome);
	if (n < 0)
		n = 0;
	if ((size_t)n > sizeof(msg) - 2)
		n = (int)sizeof(msg) - 2;
	msg[n++] = '\n';
	write_all(STDERR_FILENO, msg, (size_t)n);
	c->bad++;
}

static void format_size(char *buf, size_t len, uint64_t v)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (u < 3 && v != 0 && (v & 1023) == 0) {
		v >>= 10;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", (unsigned long long)v);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)v, units[u]);
}

static const char *word_of(const struct opt_word *w, int value)
{
	for (; w->word; w++)
		if (w->value == value)
			return w->word;
	return NULL;
}

static void format_areas(char *buf, size_t len, const struct ucma_options *o)
{
	size_t n = 0;
	char size[32];

	buf[0] = '\0';
	if (o->nr_areas == 0) {
		format_size(size, sizeof(size), o->cma_size);
		snprintf(buf, len, "default:%s", size);
		return;
	}
	for (int i = 0; i < o->nr_areas && n < len; i++) {
		int k;

		format_size(size, sizeof(size), o->areas[i].size);
		k = snprintf(buf + n, len - n, "%s%s:%s", i ? "," : "", o->areas[i].name, size);
		if (k < 0)
			break;
		n += (size_t)k;
	}
}

/* The value @d holds in @o, in the accepted form. */
static void opt_format(const struct opt_def *d, const struct ucma_options *o,
		       char *buf, size_t len)
{
	const void *p = (const char *)o + d->offset;
	const char *w;

	switch (d->type) {
	case T_BOOL:
		snprintf(buf, len, "%s", *(const bool *)p ? "on" : "off");
		break;
	case T_UINT:
		snprintf(buf, len, "%u", *(const unsigned *)p);
		break;
	case T_SIZE:
		format_size(buf, len, *(const size_t *)p);
		break;
	case T_ENUM:
	case T_NODE:
		w = word_of(d->words, *(const int *)p);
		if (w)
			snprintf(buf, len, "%s", w);
		else
			snprintf(buf, len, "%d", *(const int *)p);
		break;
	case T_AREAS:
		format_areas(buf, len, o);
		break;
	case T_STRING:
		snprintf(buf, len, "'%s'", (const char *)p);
		break;
	}
}

/* Report a refused value of @d; @o keeps what it held. */
static void opt_fail(struct parse_ctx *c, const struct opt_def *d, const char *subject,
		     const struct opt_err *e)
{
	char cur[256], outcome[270];

	opt_format(d, c->o, cur, sizeof(cur));
	snprintf(outcome, sizeof(outcome), "using %s", cur);
	report(c, subject, e->problem, e->accepted[0] ? e->accepted : d->accepted, outcome);
}

/* ------------------------------------------------------------------------ */
/* Parsers                                                                   */
/* ------------------------------------------------------------------------ */

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/*
 * A decimal number: digits only, so "-1", " 1" and "0x10" are refused.  On
 * overflow the digits are still consumed and @out is UINT64_MAX.
 */
static int parse_u64(const char *s, const char **end, uint64_t *out)
{
	uint64_t v = 0;
	bool overflow = false;

	if (!is_digit(*s)) {
		errno = EINVAL;
		return -1;
	}
	for (; is_digit(*s); s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (UINT64_MAX - d) / 10)
			overflow = true;
		else
			v = v * 10 + d;
	}
	*end = s;
	if (overflow) {
		*out = UINT64_MAX;	/* so that a range check refuses it */
		errno = ERANGE;
		return -1;
	}
	*out = v;
	return 0;
}

int ucma_parse_size(const char *s, size_t *out)
{
	const char *p;
	uint64_t v;
	unsigned shift = 0;
	int rc;

	if (!s || !out) {
		errno = EINVAL;
		return -1;
	}
	rc = parse_u64(s, &p, &v);
	if (rc != 0 && errno != ERANGE)
		return -1;
	switch (*p) {
	case 'k': case 'K': shift = 10; p++; break;
	case 'm': case 'M': shift = 20; p++; break;
	case 'g': case 'G': shift = 30; p++; break;
	case 't': case 'T': shift = 40; p++; break;
	}
	/* "512MiB", "512MB", "4096B": the unit is binary either way */
	if (shift && (*p == 'i' || *p == 'I') && (p[1] == 'b' || p[1] == 'B'))
		p += 2;
	else if (*p == 'b' || *p == 'B')
		p++;
	if (*p != '\0') {
		errno = EINVAL;
		return -1;
	}
	if (rc != 0 || v > (uint64_t)SIZE_MAX >> shift) {
		errno = ERANGE;
		return -1;
	}
	*out = (size_t)(v << shift);
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "yes", "on", "true" };
	static const char *const no[] = { "0", "no", "off", "false" };

	for (size_t i = 0; i < UCMA_ARRAY_SIZE(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

static int parse_word(const struct opt_word *w, const char *s, int *out)
{
	for (; w->word; w++) {
		if (strcasecmp(s, w->word) == 0) {
			*out = w->value;
			return 0;
		}
	}
	return -1;
}

static bool area_name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || is_digit(ch) ||
	       ch == '_' || ch == '-';
}

/*
 * Parse "name:size[,name:size...]"; ',' and ';' both separate areas, ';'
 * being the only one possible inside UCMA_CONF.  A trailing separator is
 * tolerated.  The whole list is refused at its first fault.
 */
static int parse_areas(const char *s, struct opt_value *v, struct opt_err *e)
{
	char q[OPT_QUOTE_MAX + 4], num[32];

	v->nr_areas = 0;
	if (*s == '\0') {
		snprintf(e->problem, sizeof(e->problem), "empty value");
		return -1;
	}
	while (*s) {
		size_t nlen = strcspn(s, ":,;"), slen;
		const char *sz;
		struct ucma_area_spec *a;
		size_t size = 0;
		int err = 0;

		quote(q, sizeof(q), s, nlen);
		if (nlen == 0) {
			snprintf(e->problem, sizeof(e->problem), "empty area name");
			return -1;
		}
		if (s[nlen] != ':') {
			snprintf(e->problem, sizeof(e->problem), "area '%s' has no size", q);
			return -1;
		}
		if (nlen >= UCMA_AREA_NAME_MAX) {
			snprintf(e->problem, sizeof(e->problem),
				 "area name '%s' longer than %d characters", q,
				 UCMA_AREA_NAME_MAX - 1);
			return -1;
		}
		for (size_t i = 0; i < nlen; i++) {
			if (!area_name_char(s[i])) {
				snprintf(e->problem, sizeof(e->problem), "bad area name '%s'", q);
				return -1;
			}
		}
		/* ucma_backing_name() takes these for the zones. */
		if ((nlen == 6 && memcmp(s, "normal", 6) == 0) ||
		    (nlen == 3 && memcmp(s, "cma", 3) == 0)) {
			snprintf(e->problem, sizeof(e->problem),
				 "area name '%s' is a zone's (normal, cma)", q);
			return -1;
		}
		for (int i = 0; i < v->nr_areas; i++) {
			char name[UCMA_AREA_NAME_MAX], clash[64];

			if (strlen(v->areas[i].name) == nlen &&
			    memcmp(v->areas[i].name, s, nlen) == 0) {
				snprintf(e->problem, sizeof(e->problem),
					 "duplicate area name '%s'", q);
				return -1;
			}
			/* Both areas' statistics must stay readable by name. */
			memcpy(name, s, nlen);
			name[nlen] = '\0';
			if (ucma_stats_areas_clash(v->areas[i].name, name, clash, sizeof(clash))) {
				snprintf(e->problem, sizeof(e->problem),
					 "areas '%s' and '%s' would both have a statistic "
					 "named %s", v->areas[i].name, name, clash);
				return -1;
			}
		}
		if (v->nr_areas == UCMA_MAX_CMA_AREAS) {
			snprintf(e->problem, sizeof(e->problem), "more than %d areas",
				 UCMA_MAX_CMA_AREAS);
			return -1;
		}
		a = &v->areas[v->nr_areas];
		memcpy(a->name, s, nlen);
		a->name[nlen] = '\0';

		sz = s + nlen + 1;
		slen = strcspn(sz, ",;");
		if (slen >= sizeof(num)) {
			err = EINVAL;
		} else {
			memcpy(num, sz, slen);
			num[slen] = '\0';
			if (ucma_parse_size(num, &size) != 0)
				err = errno;
		}
		quote(num, sizeof(num), sz, slen);
		if (err) {
			snprintf(e->problem, sizeof(e->problem), err == ERANGE ?
				 "size '%s' of area '%s' too large" : "bad size '%s' for area '%s'",
				 num, a->name);
			return -1;
		}
		if (size == 0) {
			snprintf(e->problem, sizeof(e->problem), "area '%s' has size 0", a->name);
			return -1;
		}
		if (size > TiB(1)) {
			snprintf(e->problem, sizeof(e->problem),
				 "size '%s' of area '%s' too large", num, a->name);
			snprintf(e->accepted, sizeof(e->accepted), "area sizes up to 1T");
			return -1;
		}
		a->size = UCMA_ALIGN_UP(size, UCMA_PAGEBLOCK_SIZE);
		v->nr_areas++;
		s = sz + slen;
		if (*s)
			s++;
	}
	return 0;
}

/* A malformed number is told its range as well as its form. */
static void uint_accepted(const struct opt_def *d, struct opt_err *e)
{
	snprintf(e->accepted, sizeof(e->accepted), "%s, %llu to %llu", d->accepted,
		 (unsigned long long)d->min, (unsigned long long)d->max);
}

/* Syntax: turn @s into @v.  Limits are opt_check()'s business. */
static int opt_parse(const struct opt_def *d, const char *s, struct opt_value *v,
		     struct opt_err *e)
{
	const char *end;
	size_t size;
	bool b;

	e->problem[0] = e->accepted[0] = '\0';
	if (*s == '\0' && d->type != T_STRING && d->type != T_AREAS) {
		snprintf(e->problem, sizeof(e->problem), "empty value");
		if (d->type == T_UINT)
			uint_accepted(d, e);
		return -1;
	}
	switch (d->type) {
	case T_BOOL:
		if (parse_bool(s, &b) != 0)
			goto bad_value;
		v->num = b;
		return 0;
	case T_UINT:
		if (*s == '-') {
			snprintf(e->problem, sizeof(e->problem), "negative number");
			uint_accepted(d, e);
			return -1;
		}
		if ((parse_u64(s, &end, &v->num) != 0 && errno != ERANGE) || *end != '\0')
			goto bad_number;
		return 0;
	case T_SIZE:
		if (ucma_parse_size(s, &size) == 0) {
			v->num = size;
			return 0;
		}
		if (*s == '-')
			snprintf(e->problem, sizeof(e->problem), "negative size");
		else if (errno == ERANGE)
			snprintf(e->problem, sizeof(e->problem), "size too large");
		else
			snprintf(e->problem, sizeof(e->problem), "bad size");
		return -1;
	case T_ENUM:
		if (parse_word(d->words, s, &v->ival) != 0) {
			snprintf(e->problem, sizeof(e->problem), "unknown value");
			return -1;
		}
		return 0;
	case T_NODE:
		if (parse_word(d->words, s, &v->ival) == 0)
			return 0;
		if ((parse_u64(s, &end, &v->num) != 0 && errno != ERANGE) || *end != '\0')
			goto bad_value;
		v->ival = v->num > OPT_NODE_MAX ? INT_MAX : (int)v->num;
		return 0;
	case T_AREAS:
		return parse_areas(s, v, e);
	case T_STRING:
		if (strlen(s) >= d->len) {
			snprintf(e->problem, sizeof(e->problem), "too long");
			return -1;
		}
		v->str = s;
		return 0;
	}
bad_value:
	snprintf(e->problem, sizeof(e->problem), "bad value");
	return -1;
bad_number:
	snprintf(e->problem, sizeof(e->problem), "bad number");
	uint_accepted(d, e);
	return -1;
}

/* An unknown node is refused only when libnuma can tell which exist. */
static int node_check(int node, struct opt_err *e)
{
	int exists = ucma_node_exists(node);

	if (exists != 0)
		return 0;
	snprintf(e->problem, sizeof(e->problem), "unknown node");
	snprintf(e->accepted, sizeof(e->accepted),
		 "a node of this machine, 0 to %d, local, interleave or default", ucma_node_max());
	return -1;
}

/* Limits: range, rounding and, for a node, existence. */
static int opt_check(const struct opt_def *d, struct opt_value *v, struct opt_err *e)
{
	char lo[32], hi[32];

	e->problem[0] = e->accepted[0] = '\0';
	switch (d->type) {
	case T_SIZE:
		/* compare before rounding, which could wrap */
		if (v->num <= d->max && (d->flags & F_ROUND_2M))
			v->num = UCMA_ALIGN_UP(v->num, (uint64_t)UCMA_PAGEBLOCK_SIZE);
		if (v->num >= d->min && v->num <= d->max)
			return 0;
		format_size(lo, sizeof(lo), d->min);
		format_size(hi, sizeof(hi), d->max);
		snprintf(e->problem, sizeof(e->problem), "out of range");
		snprintf(e->accepted, sizeof(e->accepted), "%s to %s%s", lo, hi,
			 d->flags & F_ROUND_2M ? ", rounded up to 2M" : "");
		return -1;
	case T_UINT:
		if (v->num >= d->min && v->num <= d->max)
			return 0;
		snprintf(e->problem, sizeof(e->problem), "out of range");
		snprintf(e->accepted, sizeof(e->accepted), "%llu to %llu",
			 (unsigned long long)d->min, (unsigned long long)d->max);
		return -1;
	case T_ENUM:
		if (word_of(d->words, v->ival))
			return 0;
		snprintf(e->problem, sizeof(e->problem), "unknown value");
		return -1;
	case T_NODE:
		if (v->ival < 0 && word_of(d->words, v->ival))
			return 0;
		if (v->ival < 0 || v->ival > OPT_NODE_MAX) {
			snprintf(e->problem, sizeof(e->problem), "out of range");
			snprintf(e->accepted, sizeof(e->accepted),
				 "a node from 0 to %d, local, interleave or default", OPT_NODE_MAX);
			return -1;
		}
		return node_check(v->ival, e);
	case T_BOOL:
	case T_AREAS:
	case T_STRING:
		break;
	}
	return 0;
}

static void opt_store(struct ucma_options *o, const struct opt_def *d,
		      const struct opt_value *v)
{
	void *p = (char *)o + d->offset;
	size_t sum = 0;

	switch (d->type) {
	case T_BOOL:
		*(bool *)p = v->num != 0;
		break;
	case T_UINT:
		*(unsigned *)p = (unsigned)v->num;
		break;
	case T_SIZE:
		*(size_t *)p = (size_t)v->num;
		if (d->flags & F_CMA)
			o->nr_areas = 0;
		break;
	case T_ENUM:
	case T_NODE:
		*(int *)p = v->ival;
		break;
	case T_AREAS:
		memset(o->areas, 0, sizeof(o->areas));
		memcpy(o->areas, v->areas, (size_t)v->nr_areas * sizeof(v->areas[0]));
		o->nr_areas = v->nr_areas;
		for (int i = 0; i < v->nr_areas; i++)
			sum += v->areas[i].size;
		o->cma_size = sum;
		break;
	case T_STRING:
		memcpy(p, v->str, strlen(v->str) + 1);
		break;
	}
}

/* Store a checked value and remember who set the zones, for the cross-check. */
static void opt_commit(struct parse_ctx *c, const struct opt_def *d, const char *subject,
		       const struct opt_value *v)
{
	opt_store(c->o, d, v);
	if (d->flags & F_CMA) {
		c->o->cma_chosen = true;
		snprintf(c->cma_subject, sizeof(c->cma_subject), "%s", subject);
	} else if (d == &opt_table[O_ARENA]) {
		snprintf(c->arena_subject, sizeof(c->arena_subject), "%s", subject);
	}
}

/* Apply the text @s given for @d under @name ("UCMA_ARENA_SIZE", ...). */
static void opt_apply_text(struct parse_ctx *c, const struct opt_def *d, const char *name,
			   const char *s)
{
	char q[OPT_QUOTE_MAX + 4], subject[200];
	struct opt_value v;
	struct opt_err e;

	quote(q, sizeof(q), s, strlen(s));
	snprintf(subject, sizeof(subject), "%s='%s'", name, q);
	if (opt_parse(d, s, &v, &e) != 0 || opt_check(d, &v, &e) != 0) {
		opt_fail(c, d, subject, &e);
		return;
	}
	opt_commit(c, d, subject, &v);
}

/* ------------------------------------------------------------------------ */
/* Defaults and the CMA cross-check                                          */
/* ------------------------------------------------------------------------ */

void ucma_options_defaults(struct ucma_options *o)
{
	memset(o, 0, sizeof(*o));
	for (int i = 0; i < O_NR; i++) {
		const struct opt_def *d = &opt_table[i];
		struct opt_value v;
		struct opt_err e;

		/* the default area list is none: one area "default" of cma_size */
		if (d->type == T_AREAS)
			continue;
		if (opt_parse(d, d->def, &v, &e) == 0 && opt_check(d, &v, &e) == 0)
			opt_store(o, d, &v);
	}
}

/* The CMA zone when none was given: a quarter of the arena, at most 256M. */
static size_t default_cma(size_t arena_size)
{
	size_t def = 0, quarter;

	ucma_parse_size(opt_table[O_CMA].def, &def);
	quarter = UCMA_ALIGN_DOWN(arena_size / 4, UCMA_PAGEBLOCK_SIZE);
	if (quarter < UCMA_PAGEBLOCK_SIZE)
		quarter = UCMA_PAGEBLOCK_SIZE;
	return def < quarter ? def : quarter;
}

static void ctx_init(struct parse_ctx *c, struct ucma_options *o)
{
	memset(c, 0, sizeof(*c));
	c->o = o;
}

/*
 * The CMA zone must leave OPT_NORMAL_MIN of the arena to NORMAL.  A CMA size
 * nobody gave follows the arena; one that was given and does not fit is a
 * bad value, replaced by the default rule.
 */
static void cma_cross_check(struct parse_ctx *c)
{
	struct ucma_options *o = c->o;
	size_t fit = o->arena_size > OPT_NORMAL_MIN ? o->arena_size - OPT_NORMAL_MIN : 0;
	size_t def = default_cma(o->arena_size);
	char accepted[128], outcome[64], why[96], fits[32], defs[32];
	const char *subject;

	/* A CMA size nobody gave follows the arena silently.  Whether one
	 * was given is remembered (cma_chosen), not guessed from the value: a
	 * size chosen equal to the default for the arena of the moment used
	 * to change with a later arena size. */
	if (!o->cma_chosen) {
		o->cma_size = def;
		o->nr_areas = 0;
		return;
	}
	if (o->cma_size <= fit)
		return;

	format_size(fits, sizeof(fits), fit);
	format_size(defs, sizeof(defs), def);
	snprintf(accepted, sizeof(accepted), "at most the arena size less 4M, here %s", fits);
	if (c->cma_subject[0]) {
		subject = c->cma_subject;
		snprintf(why, sizeof(why), "CMA larger than the arena");
		snprintf(outcome, sizeof(outcome), "using %s%s",
			 o->nr_areas ? "default:" : "", defs);
	} else {
		char cmas[32];

		/* the CMA zone came from an earlier call; the arena changed */
		format_size(cmas, sizeof(cmas), o->cma_size);
		subject = c->arena_subject[0] ? c->arena_subject : "arena_size";
		snprintf(why, sizeof(why), "CMA of %s larger than the arena", cmas);
		snprintf(outcome, sizeof(outcome), "using CMA %s", defs);
	}
	report(c, subject, why, accepted, outcome);
	o->cma_size = def;
	o->nr_areas = 0;
	o->cma_chosen = false;	/* the default rule's now: it follows the arena */
}

/* ------------------------------------------------------------------------ */
/* The environment                                                           */
/* ------------------------------------------------------------------------ */

const char *ucma_getenv(const char *name)
{
	return secure_getenv(name);
}

/* Optimal string alignment distance, ignoring case; UINT_MAX when too long. */
static unsigned edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
	enum { LMAX = 40 };
	unsigned row[3][LMAX + 1];

	if (la > LMAX || lb > LMAX)
		return UINT_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[0][j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		unsigned *cur = row[i % 3], *prev = row[(i - 1) % 3], *prev2 = row[(i + 1) % 3];

		cur[0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			char x = a[i - 1], y = b[j - 1];
			unsigned cost, best;

			if (x >= 'a' && x <= 'z')
				x = (char)(x - 'a' + 'A');
			if (y >= 'a' && y <= 'z')
				y = (char)(y - 'a' + 'A');
			cost = x != y;
			best = prev[j - 1] + cost;
			if (prev[j] + 1 < best)
				best = prev[j] + 1;
			if (cur[j - 1] + 1 < best)
				best = cur[j - 1] + 1;
			if (i > 1 && j > 1 && cost) {
				char x2 = a[i - 2], y2 = b[j - 2];

				if (x2 >= 'a' && x2 <= 'z')
					x2 = (char)(x2 - 'a' + 'A');
				if (y2 >= 'a' && y2 <= 'z')
					y2 = (char)(y2 - 'a' + 'A');
				if (x == y2 && x2 == y && prev2[j - 2] + 1 < best)
					best = prev2[j - 2] + 1;
			}
			cur[j] = best;
		}
	}
	return row[la % 3][lb];
}

/* The known name closest to a misspelt one, or NULL when none is close. */
static const char *suggest(const char *name, size_t len, bool env)
{
	const char *best = NULL;
	unsigned best_d = UINT_MAX, limit = len >= 10 ? 3 : 2;

	for (int i = 0; i <= O_NR; i++) {
		const char *cand = i < O_NR ? (env ? opt_table[i].env : opt_table[i].key) :
					      (env ? "UCMA_CONF" : NULL);
		unsigned d;

		if (!cand)
			continue;
		d = edit_distance(name, len, cand, strlen(cand));
		if (d < best_d) {
			best_d = d;
			best = cand;
		}
	}
	return best_d <= limit && best_d < len ? best : NULL;
}

static bool known_env_name(const char *name, size_t len)
{
	for (int i = 0; i < O_NR; i++)
		if (strlen(opt_table[i].env) == len && memcmp(opt_table[i].env, name, len) == 0)
			return true;
	for (size_t i = 0; i < UCMA_ARRAY_SIZE(foreign_names); i++) {
		const char *f = foreign_names[i];
		size_t flen = strlen(f);

		if (f[flen - 1] == '_' ? len > flen && memcmp(f, name, flen) == 0 :
					 len == flen && memcmp(f, name, len) == 0)
			return true;
	}
	return false;
}

/*
 * Report every UCMA_* variable nobody reads: a misspelt name would
 * otherwise leave its option at the default without a word.
 */
static void env_check_names(struct parse_ctx *c)
{
	/* secure_getenv() hides the environment from set-ID programs: so do we */
	if (getauxval(AT_SECURE) || !environ)
		return;
	for (char **e = environ; *e; e++) {
		size_t len;
		const char *value, *near;
		char qn[OPT_QUOTE_MAX + 4], qv[OPT_QUOTE_MAX + 4], subject[200], accepted[160];

		if (strncmp(*e, "UCMA_", 5) != 0)
			continue;
		len = strcspn(*e, "=");
		if (known_env_name(*e, len))
			continue;
		value = (*e)[len] ? *e + len + 1 : "";
		quote(qn, sizeof(qn), *e, len);
		quote(qv, sizeof(qv), value, strlen(value));
		snprintf(subject, sizeof(subject), "%s='%s'", qn, qv);
		near = suggest(*e, len, true);
		if (near)
			snprintf(accepted, sizeof(accepted),
				 "the UCMA_* variables of ucma(7); did you mean %s?", near);
		else
			snprintf(accepted, sizeof(accepted), "the UCMA_* variables of ucma(7)");
		report(c, subject, "unknown variable", accepted, "ignored");
	}
}

static const struct opt_def *find_key(const char *key, size_t len)
{
	for (int i = 0; i < O_NR; i++)
		if (strlen(opt_table[i].key) == len && strncasecmp(opt_table[i].key, key, len) == 0)
			return &opt_table[i];
	return NULL;
}

static bool is_blank(char ch)
{
	return ch == ' ' || ch == '\t';
}

enum conf_pass { CONF_STRICT_ONLY, CONF_ALL_BUT_STRICT };

/* One "key=value" item of UCMA_CONF, @len bytes at @s, not NUL-terminated. */
static void conf_item(struct parse_ctx *c, const char *s, size_t len, enum conf_pass pass)
{
	const char *eq, *key, *val;
	size_t klen, vlen;
	const struct opt_def *d;
	char qk[OPT_QUOTE_MAX + 4], qv[OPT_QUOTE_MAX + 4], name[96], subject[200];
	char value[OPT_VALUE_MAX];

	while (len && is_blank(*s)) {
		s++;
		len--;
	}
	while (len && is_blank(s[len - 1]))
		len--;
	if (len == 0)
		return;		/* "a=1,,b=2" and a trailing ',' are harmless */

	eq = memchr(s, '=', len);
	key = s;
	klen = eq ? (size_t)(eq - s) : len;
	while (klen && is_blank(key[klen - 1]))
		klen--;
	d = find_key(key, klen);
	if ((pass == CONF_STRICT_ONLY) != (d == &opt_table[O_STRICT]))
		return;

	quote(qk, sizeof(qk), key, klen);
	snprintf(name, sizeof(name), "UCMA_CONF key '%s'", qk);
	if (!eq) {
		report(c, name, "missing '=value'", "key=value[,key=value...]", "ignored");
		return;
	}
	val = eq + 1;
	vlen = (size_t)(s + len - val);
	while (vlen && is_blank(*val)) {
		val++;
		vlen--;
	}
	quote(qv, sizeof(qv), val, vlen);
	snprintf(subject, sizeof(subject), "%s='%s'", name, qv);
	if (!d) {
		char accepted[400];
		const char *near = suggest(key, klen, false);
		size_t n = 0;

		accepted[0] = '\0';
		for (int i = 0; i < O_NR && n < sizeof(accepted); i++) {
			int k = snprintf(accepted + n, sizeof(accepted) - n, "%s%s",
					 i ? ", " : "", opt_table[i].key);

			if (k < 0)
				break;
			n += (size_t)k;
		}
		if (near && n < sizeof(accepted))
			snprintf(accepted + n, sizeof(accepted) - n, "; did you mean '%s'?", near);
		report(c, subject, "unknown key", accepted, "ignored");
		return;
	}
	if (vlen >= sizeof(value)) {
		struct opt_err e;

		snprintf(e.problem, sizeof(e.problem), "value too long");
		snprintf(e.accepted, sizeof(e.accepted), "at most %zu bytes", sizeof(value) - 1);
		opt_fail(c, d, subject, &e);
		return;
	}
	memcpy(value, val, vlen);
	value[vlen] = '\0';
	opt_apply_text(c, d, name, value);
}

/* UCMA_CONF="key=value,key=value": items in order, so later keys win. */
static void conf_apply(struct parse_ctx *c, const char *conf, enum conf_pass pass)
{
	while (*conf) {
		size_t len = strcspn(conf, ",");

		conf_item(c, conf, len, pass);
		conf += len;
		if (*conf)
			conf++;
	}
}

int ucma_options_from_env(struct ucma_options *o)
{
	struct parse_ctx c;
	const char *conf = ucma_getenv("UCMA_CONF");
	const char *s;

	ctx_init(&c, o);

	/* strictness first, from both places, so that it covers everything */
	s = ucma_getenv(opt_table[O_STRICT].env);
	if (s)
		opt_apply_text(&c, &opt_table[O_STRICT], opt_table[O_STRICT].env, s);
	if (conf)
		conf_apply(&c, conf, CONF_STRICT_ONLY);

	for (int i = 0; i < O_NR; i++) {
		if (i == O_STRICT)
			continue;
		s = ucma_getenv(opt_table[i].env);
		if (s)
			opt_apply_text(&c, &opt_table[i], opt_table[i].env, s);
	}
	env_check_names(&c);
	if (conf)
		conf_apply(&c, conf, CONF_ALL_BUT_STRICT);
	cma_cross_check(&c);
	return c.bad;
}

/* ------------------------------------------------------------------------ */
/* struct ucma_config                                                        */
/* ------------------------------------------------------------------------ */

/* Apply a number given in field @field of struct ucma_config. */
static void cfg_apply_num(struct parse_ctx *c, enum opt_id id, const char *field,
			  long long value)
{
	const struct opt_def *d = &opt_table[id];
	char subject[128];
	struct opt_value v;
	struct opt_err e;

	if (d->type == T_SIZE)
		snprintf(subject, sizeof(subject), "ucma_config.%s=%llu", field,
			 (unsigned long long)value);
	else
		snprintf(subject, sizeof(subject), "ucma_config.%s=%lld", field, value);
	memset(&v, 0, sizeof(v));
	v.num = (uint64_t)value;
	v.ival = value < INT_MIN || value > INT_MAX ? INT_MAX : (int)value;
	if (opt_check(d, &v, &e) != 0) {
		/* in C the names of the enum are the accepted form, not the words */
		if (d->type == T_ENUM)
			snprintf(e.accepted, sizeof(e.accepted), "%s", id == O_CMA_POLICY ?
				 "UCMA_CMA_LEND, UCMA_CMA_RESERVED or UCMA_CMA_LEND_HANDLES" :
				 "UCMA_BACKING_AUTO to UCMA_BACKING_NONE");
		opt_fail(c, d, subject, &e);
		return;
	}
	opt_commit(c, d, subject, &v);
}

int ucma_options_from_config(struct ucma_options *o, const struct ucma_config *cfg)
{
	struct parse_ctx c;

	if (!cfg)
		return 0;
	ctx_init(&c, o);

	if (cfg->strict)
		cfg_apply_num(&c, O_STRICT, "strict", 1);
	if (cfg->arena_size)
		cfg_apply_num(&c, O_ARENA, "arena_size", (long long)cfg->arena_size);
	if (cfg->cma_areas)
		opt_apply_text(&c, &opt_table[O_CMA_AREAS], "ucma_config.cma_areas",
			       cfg->cma_areas);
	else if (cfg->cma_size)
		cfg_apply_num(&c, O_CMA, "cma_size", (long long)cfg->cma_size);
	if (cfg->hugepages)
		cfg_apply_num(&c, O_HUGEPAGES, "hugepages", cfg->hugepages);
	if (cfg->hugepages_normal)
		cfg_apply_num(&c, O_HUGEPAGES_NORMAL, "hugepages_normal", cfg->hugepages_normal);
	/* The structure says node n as UCMA_NODE_ID(n) = n + 1: 0 is "keep". */
	if (cfg->node > 0)
		cfg_apply_num(&c, O_NODE, "node", cfg->node - 1);
	else if (cfg->node < 0)
		cfg_apply_num(&c, O_NODE, "node", cfg->node);
	if (cfg->populate)
		cfg_apply_num(&c, O_POPULATE, "populate", 1);
	if (cfg->cma_dontfork)
		cfg_apply_num(&c, O_CMA_DONTFORK, "cma_dontfork", 1);
	if (cfg->cma_policy)
		cfg_apply_num(&c, O_CMA_POLICY, "cma_policy", cfg->cma_policy);
	for (size_t i = 0; i < UCMA_ARRAY_SIZE(cfg->reserved); i++) {
		char subject[64];

		if (cfg->reserved[i] == 0)
			continue;
		snprintf(subject, sizeof(subject), "ucma_config.reserved[%zu]=%d", i,
			 cfg->reserved[i]);
		report(&c, subject, "reserved field set", "0", "ignored");
	}
	cma_cross_check(&c);
	return c.bad;
}

/* The longest area list, as format_areas() writes it. */
#define AREAS_TEXT_MAX (UCMA_MAX_CMA_AREAS * (UCMA_AREA_NAME_MAX + 24))

/*
 * The area lists handed out by ucma_config_from_env(), in the form
 * ucma_options_from_config() reads, each kept for the life of the
 * process: a result stays valid whatever later calls return.  (One buffer
 * rewritten by each call changed the areas of an earlier result under its
 * caller.)  Equal lists share one copy, so a program asking again and
 * again keeps one per distinct list.
 */
struct env_areas {
	struct env_areas *next;
	char text[];
};
static struct env_areas *env_areas_list;	/* env_areas_lock */
/* A futex lock (lock.h), not a pthread mutex: the fork handlers hold it
 * with every other lock of the library. */
static uint32_t UCMA_FORK_LOCK env_areas_lock;

/*
 * Fork (fork.c's table): another thread may be inside the walk below, and
 * a child that inherited the lock held waited for ever in its next
 * ucma_config_from_env().  Nothing is taken under it, so any stage will
 * do; it sits beside meta.c's, innermost.
 */
void ucma_config_fork_prepare(void)
{
	ucma_lock(&env_areas_lock);
}

void ucma_config_fork_parent(void)
{
	ucma_unlock(&env_areas_lock);
}

/* The kept copy of @text, or NULL with errno ENOMEM.  The lock is held
 * for the search and the link only, never across malloc() (a fork while
 * another thread held it across malloc's fork locks left the child's
 * next call waiting for good). */
static const char *env_areas_keep(const char *text)
{
	struct env_areas *e, *fresh = NULL;

	for (int pass = 0; pass < 2; pass++) {
		ucma_lock(&env_areas_lock);
		for (e = env_areas_list; e && strcmp(e->text, text) != 0; e = e->next)
			;
		if (!e && fresh) {
			fresh->next = env_areas_list;
			env_areas_list = e = fresh;
			fresh = NULL;
		}
		ucma_unlock(&env_areas_lock);
		if (e || pass)
			break;
		fresh = malloc(sizeof(*fresh) + strlen(text) + 1);
		if (!fresh)
			break;
		strcpy(fresh->text, text);
	}
	free(fresh);	/* another thread kept the same list meanwhile */
	if (!e) {
		errno = ENOMEM;
		return NULL;
	}
	return e->text;
}

int ucma_config_from_env(struct ucma_config *cfg)
{
	struct ucma_options o;
	int bad;

	if (!cfg) {
		errno = EINVAL;
		return -1;
	}
	ucma_options_defaults(&o);
	bad = ucma_options_from_env(&o);

	memset(cfg, 0, sizeof(*cfg));
	cfg->arena_size = o.arena_size;
	/*
	 * A CMA size nobody chose follows the arena: left 0, so a caller who
	 * changes arena_size afterwards gets the default for the new size
	 * instead of a complaint about a value it never set.
	 */
	cfg->cma_size = o.nr_areas == 0 && !o.cma_chosen ? 0 : o.cma_size;
	if (o.nr_areas) {
		char areas[AREAS_TEXT_MAX];

		format_areas(areas, sizeof(areas), &o);
		cfg->cma_areas = env_areas_keep(areas);
		if (!cfg->cma_areas)
			return -1;
	}
	cfg->hugepages = o.hugepages;
	cfg->hugepages_normal = o.hugepages_normal;
	cfg->node = o.node >= 0 ? UCMA_NODE_ID(o.node) : o.node == UCMA_NODE_DEFAULT ? 0 : o.node;
	cfg->populate = o.populate;
	cfg->strict = o.strict;
	cfg->cma_dontfork = o.cma_dontfork;
	cfg->cma_policy = o.cma_policy;

	if (bad && o.strict) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

void ucma_options_print(int fd, const struct ucma_options *o)
{
	for (int i = 0; i < O_NR; i++) {
		char val[AREAS_TEXT_MAX], line[AREAS_TEXT_MAX + 64];
		int n;

		opt_format(&opt_table[i], o, val, sizeof(val));
		n = snprintf(line, sizeof(line), "ucma: %s=%s\n", opt_table[i].env, val);
		write_formatted(fd, line, sizeof(line), n);
	}
}

/*
 * The reference of every option, from the table, for the manual page and
 * for anyone asking the library itself:
 *
 *   UCMA_ARENA_SIZE, UCMA_CONF key arena, default 1G, 8M to 1T
 *       size of the arena, ...
 *       accepted: a number of bytes ...
 */
void ucma_options_describe(int fd)
{
	for (int i = 0; i < O_NR; i++) {
		const struct opt_def *d = &opt_table[i];
		char range[96] = "", text[1024];
		int n;

		if (d->type == T_SIZE || d->type == T_AREAS) {
			char lo[32], hi[32];

			format_size(lo, sizeof(lo), d->min);
			format_size(hi, sizeof(hi), d->max);
			snprintf(range, sizeof(range), ", %s to %s%s", lo, hi,
				 d->flags & F_ROUND_2M ? ", rounded up to 2M" : "");
		} else if (d->type == T_UINT || d->type == T_NODE) {
			snprintf(range, sizeof(range), ", %llu to %llu",
				 (unsigned long long)d->min, (unsigned long long)d->max);
		}
		n = snprintf(text, sizeof(text),
			     "%s, UCMA_CONF key %s, default %s%s\n    %s\n    accepted: %s\n",
			     d->env, d->key,
			     d->def[0] ? d->def : d->type == T_STRING ? "empty" : "none",
			     range, d->desc, d->accepted);
		write_formatted(fd, text, sizeof(text), n);
	}
}
