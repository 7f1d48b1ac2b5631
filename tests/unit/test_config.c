/*
 * test_config.c - the option parser: every option's accepted forms, every
 * kind of bad value, the order of the sources, strict mode and the CMA
 * cross-check.  Each call runs with fd 2 redirected to a temporary file so
 * that the test can check that a bad value gives exactly one line, naming
 * the variable and the value, and a good one gives none.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

extern char **environ;

/* config.c; not in internal.h yet */
void ucma_options_print(int fd, const struct ucma_options *o);
void ucma_options_describe(int fd);

#define M(x) ((size_t)(x) << 20)
#define G(x) ((size_t)(x) << 30)
#define T(x) ((size_t)(x) << 40)

static char out[16384];		/* what the last call wrote to fd 2 */
static int nlines;
static int saved_fd = -1;
static FILE *cap;

static void cap_begin(void)
{
	fflush(stderr);
	cap = tmpfile();
	if (!cap)
		bail_out("tmpfile: %s", strerror(errno));
	saved_fd = dup(STDERR_FILENO);
	if (saved_fd < 0 || dup2(fileno(cap), STDERR_FILENO) < 0)
		bail_out("dup2: %s", strerror(errno));
}

static void cap_end(void)
{
	size_t n;

	dup2(saved_fd, STDERR_FILENO);
	close(saved_fd);
	rewind(cap);
	n = fread(out, 1, sizeof(out) - 1, cap);
	out[n] = '\0';
	fclose(cap);
	nlines = 0;
	for (char *p = out, *nl; (nl = strchr(p, '\n')); p = nl + 1) {
		nlines++;
		printf("#   %.*s\n", (int)(nl - p), p);
	}
}

/* Unset every UCMA_* variable, the harness's included. */
static void clear_env(void)
{
	char name[256];

	for (;;) {
		char **e;

		for (e = environ; *e && strncmp(*e, "UCMA_", 5) != 0; e++)
			;
		if (!*e)
			return;
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
		unsetenv(name);
	}
}

/* Defaults, then the environment, with fd 2 captured. */
static int env_run(struct ucma_options *o)
{
	int bad;

	cap_begin();
	ucma_options_defaults(o);
	bad = ucma_options_from_env(o);
	cap_end();
	return bad;
}

static int cfg_run(struct ucma_options *o, const struct ucma_config *cfg)
{
	int bad;

	cap_begin();
	bad = ucma_options_from_config(o, cfg);
	cap_end();
	return bad;
}

/* Exactly one line, a ucma message, holding both @a and @b. */
static int one_line(const char *a, const char *b)
{
	return nlines == 1 && strncmp(out, "ucma: ", 6) == 0 && strstr(out, a) &&
	       (!b || strstr(out, b));
}

/* How a message starts for @var='@val': long values are shortened. */
static const char *subject(const char *var, const char *val)
{
	static char buf[256];

	if (strlen(val) > 64)
		snprintf(buf, sizeof(buf), "ucma: %s='%.64s...': ", var, val);
	else
		snprintf(buf, sizeof(buf), "ucma: %s='%s': ", var, val);
	return buf;
}

static struct ucma_options o, def;

/* One good value of one variable: no message, and @cond holds. */
#define GOOD(var, val, cond)                                                        \
	do {                                                                        \
		int bad_;                                                           \
		clear_env();                                                        \
		setenv(var, val, 1);                                                \
		bad_ = env_run(&o);                                                 \
		ok(bad_ == 0 && nlines == 0 && (cond), "%s='%s': %s", var, val, #cond); \
	} while (0)

/*
 * One bad value: counted once, @cond holds (the previous value stayed), and
 * one line names the variable and value and contains @sub.
 */
#define BAD(var, val, cond, sub)                                                   \
	do {                                                                        \
		int bad_;                                                           \
		clear_env();                                                        \
		setenv(var, val, 1);                                                \
		bad_ = env_run(&o);                                                 \
		ok(bad_ == 1 && (cond), "%s='%s' refused: %s", var, val, #cond);    \
		ok(one_line(subject(var, val), sub), "%s='%s': one line with '%s'", \
		   var, val, sub);                                                  \
	} while (0)

static void test_parse_size(void)
{
	static const struct {
		const char *s;
		size_t v;
	} good[] = {
		{ "0", 0 }, { "4096", 4096 }, { "1K", 1024 }, { "1k", 1024 },
		{ "512M", M(512) }, { "512MiB", M(512) }, { "512mb", M(512) },
		{ "2G", G(2) }, { "1T", T(1) }, { "4096B", 4096 }, { "3KiB", 3072 },
		{ "16777215T", (size_t)16777215 << 40 },
	};
	static const struct {
		const char *s;
		int err;
	} bad[] = {
		{ "", EINVAL }, { "-1", EINVAL }, { "12Q", EINVAL }, { "1.5G", EINVAL },
		{ " 1G", EINVAL }, { "1G ", EINVAL }, { "G", EINVAL }, { "1GG", EINVAL },
		{ "1iB", EINVAL }, { "0x10", EINVAL }, { "99999999999T", ERANGE },
		{ "18446744073709551616", ERANGE }, { "16777216T", ERANGE },
	};
	size_t v;

	for (size_t i = 0; i < UCMA_ARRAY_SIZE(good); i++) {
		v = 1;
		ok(ucma_parse_size(good[i].s, &v) == 0 && v == good[i].v,
		   "ucma_parse_size('%s') = %zu", good[i].s, good[i].v);
	}
	for (size_t i = 0; i < UCMA_ARRAY_SIZE(bad); i++) {
		errno = 0;
		ok(ucma_parse_size(bad[i].s, &v) == -1 && errno == bad[i].err,
		   "ucma_parse_size('%s') fails with %s", bad[i].s,
		   bad[i].err == ERANGE ? "ERANGE" : "EINVAL");
	}
}

static void test_defaults(void)
{
	ucma_options_defaults(&def);
	ok(def.arena_size == G(1) && def.cma_size == M(256) && def.nr_areas == 0,
	   "defaults: arena 1G, one CMA area of 256M");
	ok(def.hugepages == UCMA_BACKING_AUTO && def.hugepages_normal == UCMA_BACKING_THP &&
	   def.node == UCMA_NODE_DEFAULT && def.cma_policy == UCMA_CMA_LEND,
	   "defaults: hugepages auto, NORMAL thp, no node policy, lend");
	ok(!def.populate && !def.strict && !def.cma_dontfork && def.compact &&
	   def.compact_direct && !def.stats && !def.verbose,
	   "defaults: booleans");
	ok(def.compact_interval_ms == 500 && def.compact_proactiveness == 20 &&
	   def.decay_ms == 10000 && def.preload_contig_min == 0 && def.stats_file[0] == '\0' &&
	   def.copy_helpers == 1 && def.overflow_cache == M(64),
	   "defaults: numbers and stats file");

	clear_env();
	ok(env_run(&o) == 0 && nlines == 0 && memcmp(&o, &def, sizeof(o)) == 0,
	   "an empty environment gives the defaults and no message");
}

static void test_sizes(void)
{
	GOOD("UCMA_ARENA_SIZE", "2G", o.arena_size == G(2));
	GOOD("UCMA_ARENA_SIZE", "9M", o.arena_size == M(10));
	GOOD("UCMA_ARENA_SIZE", "8M", o.arena_size == M(8));
	GOOD("UCMA_ARENA_SIZE", "1T", o.arena_size == T(1));
	GOOD("UCMA_ARENA_SIZE", "1536MiB", o.arena_size == M(1536));

	clear_env();
	setenv("UCMA_ARENA_SIZE", "12Q", 1);
	ok(env_run(&o) == 1 && o.arena_size == G(1), "UCMA_ARENA_SIZE='12Q' keeps 1G");
	ok(strcmp(out, "ucma: UCMA_ARENA_SIZE='12Q': bad size (accepted: a number of bytes "
		       "with an optional K, M, G or T suffix, e.g. 512M); using 1G\n") == 0,
	   "the message is exactly the documented line");
	BAD("UCMA_ARENA_SIZE", "", o.arena_size == G(1), "empty value");
	BAD("UCMA_ARENA_SIZE", "-1G", o.arena_size == G(1), "negative size");
	BAD("UCMA_ARENA_SIZE", "99999999999T", o.arena_size == G(1), "size too large");
	BAD("UCMA_ARENA_SIZE", "4M", o.arena_size == G(1),
	    "out of range (accepted: 8M to 1T, rounded up to 2M); using 1G");
	BAD("UCMA_ARENA_SIZE", "2T", o.arena_size == G(1), "out of range");

	GOOD("UCMA_CMA_SIZE", "512M", o.cma_size == M(512) && o.nr_areas == 0);
	GOOD("UCMA_CMA_SIZE", "1", o.cma_size == M(2));
	GOOD("UCMA_CMA_SIZE", "1020M", o.cma_size == M(1020));
	BAD("UCMA_CMA_SIZE", "0", o.cma_size == M(256), "out of range");
	BAD("UCMA_CMA_SIZE", "x", o.cma_size == M(256), "bad size");
	BAD("UCMA_CMA_SIZE", "1022M", o.cma_size == M(256),
	    "CMA larger than the arena (accepted: at most the arena size less 4M, here "
	    "1020M); using 256M");

	GOOD("UCMA_PRELOAD_CONTIG_MIN", "1M", o.preload_contig_min == M(1));
	GOOD("UCMA_PRELOAD_CONTIG_MIN", "5000", o.preload_contig_min == 5000);
	BAD("UCMA_PRELOAD_CONTIG_MIN", "x", o.preload_contig_min == 0, "bad size");
	GOOD("UCMA_OVERFLOW_CACHE", "0", o.overflow_cache == 0);
	GOOD("UCMA_OVERFLOW_CACHE", "256M", o.overflow_cache == M(256));
	BAD("UCMA_OVERFLOW_CACHE", "lots", o.overflow_cache == M(64), "bad size");
}

static void test_areas(void)
{
	char many[1024], name32[64];
	size_t n = 0;

	GOOD("UCMA_CMA_AREAS", "dma:64M,rdma:33M",
	     o.nr_areas == 2 && strcmp(o.areas[0].name, "dma") == 0 &&
	     o.areas[0].size == M(64) && strcmp(o.areas[1].name, "rdma") == 0 &&
	     o.areas[1].size == M(34) && o.cma_size == M(98));
	GOOD("UCMA_CMA_AREAS", "a:1M;B-2_x:1M,", o.nr_areas == 2 && o.cma_size == M(4));
	BAD("UCMA_CMA_AREAS", "a:64M,a:32M", o.nr_areas == 0, "duplicate area name 'a'");
	/* Area "a" has cma_a_frame_size, its frames' size; area "a_frame"
	 * has cma_a_frame_size too, its own size: ucma_stat() read one. */
	BAD("UCMA_CMA_AREAS", "a:4M,a_frame:8M", o.nr_areas == 0,
	    "areas 'a' and 'a_frame' would both have a statistic named cma_a_frame_size");
	BAD("UCMA_CMA_AREAS", "b_frame:4M,b:4M", o.nr_areas == 0,
	    "areas 'b_frame' and 'b' would both have a statistic named cma_b_frame_size");
	GOOD("UCMA_CMA_AREAS", "a_b:4M,a_c:4M", o.nr_areas == 2);
	BAD("UCMA_CMA_AREAS", "a b:4M", o.nr_areas == 0, "bad area name 'a b'");
	BAD("UCMA_CMA_AREAS", "x!:4M", o.nr_areas == 0, "bad area name 'x!'");
	/* ucma_backing_name() answered for the NORMAL zone for area "normal". */
	BAD("UCMA_CMA_AREAS", "normal:4M,x:4M", o.nr_areas == 0,
	    "area name 'normal' is a zone's (normal, cma)");
	BAD("UCMA_CMA_AREAS", "x:4M,cma:4M", o.nr_areas == 0,
	    "area name 'cma' is a zone's (normal, cma)");
	GOOD("UCMA_CMA_AREAS", "Normal:4M,cma2:4M", o.nr_areas == 2);
	BAD("UCMA_CMA_AREAS", "a:0", o.nr_areas == 0 && o.cma_size == M(256),
	    "area 'a' has size 0");
	BAD("UCMA_CMA_AREAS", "a", o.nr_areas == 0, "area 'a' has no size");
	BAD("UCMA_CMA_AREAS", "a:12Q", o.nr_areas == 0, "bad size '12Q' for area 'a'");
	BAD("UCMA_CMA_AREAS", "a:4M,:4M", o.nr_areas == 0, "empty area name");
	BAD("UCMA_CMA_AREAS", "", o.nr_areas == 0, "empty value");
	BAD("UCMA_CMA_AREAS", "a:2T", o.nr_areas == 0, "too large");
	BAD("UCMA_CMA_AREAS", "a:600M,b:600M", o.nr_areas == 0 && o.cma_size == M(256),
	    "CMA larger than the arena (accepted: at most the arena size less 4M, here "
	    "1020M); using default:256M");

	memset(name32, 'n', 32);
	name32[32] = '\0';
	strcat(name32, ":4M");
	BAD("UCMA_CMA_AREAS", name32, o.nr_areas == 0, "longer than 31 characters");
	name32[31] = ':';
	strcpy(name32 + 32, "4M");
	GOOD("UCMA_CMA_AREAS", name32, o.nr_areas == 1 && strlen(o.areas[0].name) == 31);

	for (int i = 0; i < UCMA_MAX_CMA_AREAS; i++)
		n += (size_t)snprintf(many + n, sizeof(many) - n, "%sa%d:2M", i ? "," : "", i);
	GOOD("UCMA_CMA_AREAS", many,
	     o.nr_areas == UCMA_MAX_CMA_AREAS && o.cma_size == M(2) * UCMA_MAX_CMA_AREAS);
	snprintf(many + n, sizeof(many) - n, ",z:2M");
	BAD("UCMA_CMA_AREAS", many, o.nr_areas == 0, "more than 16 areas");
}

static void test_words(void)
{
	GOOD("UCMA_HUGEPAGES", "auto", o.hugepages == UCMA_BACKING_AUTO);
	GOOD("UCMA_HUGEPAGES", "1G", o.hugepages == UCMA_BACKING_HUGETLB_1G);
	GOOD("UCMA_HUGEPAGES", "1g", o.hugepages == UCMA_BACKING_HUGETLB_1G);
	GOOD("UCMA_HUGEPAGES", "2m", o.hugepages == UCMA_BACKING_HUGETLB_2M);
	GOOD("UCMA_HUGEPAGES", "THP", o.hugepages == UCMA_BACKING_THP);
	GOOD("UCMA_HUGEPAGES", "none", o.hugepages == UCMA_BACKING_NONE);
	GOOD("UCMA_HUGEPAGES", "hugetlb-2M", o.hugepages == UCMA_BACKING_HUGETLB_2M);
	BAD("UCMA_HUGEPAGES", "3M", o.hugepages == UCMA_BACKING_AUTO,
	    "unknown value (accepted: auto, 1G, 2M, thp or none); using auto");
	GOOD("UCMA_HUGEPAGES_NORMAL", "none", o.hugepages_normal == UCMA_BACKING_NONE);
	GOOD("UCMA_HUGEPAGES_NORMAL", "Auto", o.hugepages_normal == UCMA_BACKING_AUTO);
	BAD("UCMA_HUGEPAGES_NORMAL", "huge", o.hugepages_normal == UCMA_BACKING_THP,
	    "using thp");

	GOOD("UCMA_CMA_POLICY", "reserved", o.cma_policy == UCMA_CMA_RESERVED);
	GOOD("UCMA_CMA_POLICY", "LEND", o.cma_policy == UCMA_CMA_LEND);
	GOOD("UCMA_CMA_POLICY", "lend-handles", o.cma_policy == UCMA_CMA_LEND_HANDLES);
	BAD("UCMA_CMA_POLICY", "borrow", o.cma_policy == UCMA_CMA_LEND,
	    "unknown value (accepted: lend, lend-handles or reserved); using lend");
}

static void test_node(void)
{
	int max = numa_available() >= 0 ? numa_max_node() : -1;

	GOOD("UCMA_NODE", "0", o.node == 0);
	GOOD("UCMA_NODE", "local", o.node == UCMA_NODE_LOCAL);
	GOOD("UCMA_NODE", "interleave", o.node == UCMA_NODE_INTERLEAVE);
	GOOD("UCMA_NODE", "DEFAULT", o.node == UCMA_NODE_DEFAULT);
	BAD("UCMA_NODE", "-1", o.node == UCMA_NODE_DEFAULT, "bad value");
	BAD("UCMA_NODE", "abc", o.node == UCMA_NODE_DEFAULT, "using default");
	BAD("UCMA_NODE", "1024", o.node == UCMA_NODE_DEFAULT, "out of range");
	BAD("UCMA_NODE", "99999999999999999999999", o.node == UCMA_NODE_DEFAULT,
	    "out of range");
	if (max >= 0 && max < 1023) {
		char num[16];

		snprintf(num, sizeof(num), "%d", max + 1);
		BAD("UCMA_NODE", num, o.node == UCMA_NODE_DEFAULT, "unknown node");
	} else {
		skip(2, "libnuma not available: nodes are not checked");
	}
}

static void test_bools(void)
{
	static const char *const yes[] = { "1", "yes", "on", "true", "TRUE", "On" };
	static const char *const no[] = { "0", "no", "off", "false", "NO" };

	for (size_t i = 0; i < UCMA_ARRAY_SIZE(yes); i++)
		GOOD("UCMA_POPULATE", yes[i], o.populate);
	for (size_t i = 0; i < UCMA_ARRAY_SIZE(no); i++)
		GOOD("UCMA_COMPACT", no[i], !o.compact);
	GOOD("UCMA_STRICT", "1", o.strict);
	GOOD("UCMA_CMA_DONTFORK", "yes", o.cma_dontfork);
	GOOD("UCMA_COMPACT_DIRECT", "off", !o.compact_direct);
	GOOD("UCMA_STATS", "on", o.stats);
	GOOD("UCMA_VERBOSE", "true", o.verbose);
	BAD("UCMA_POPULATE", "maybe", !o.populate,
	    "bad value (accepted: 1, 0, yes, no, on, off, true or false); using off");
	BAD("UCMA_COMPACT", "2", o.compact, "using on");
}

static void test_numbers(void)
{
	char path[300];

	GOOD("UCMA_COMPACT_INTERVAL_MS", "1", o.compact_interval_ms == 1);
	GOOD("UCMA_COMPACT_INTERVAL_MS", "3600000", o.compact_interval_ms == 3600000);
	BAD("UCMA_COMPACT_INTERVAL_MS", "0", o.compact_interval_ms == 500,
	    "out of range (accepted: 1 to 3600000); using 500");
	BAD("UCMA_COMPACT_INTERVAL_MS", "3600001", o.compact_interval_ms == 500,
	    "out of range");
	BAD("UCMA_COMPACT_INTERVAL_MS", "abc", o.compact_interval_ms == 500,
	    "bad number (accepted: a whole number of milliseconds, 1 to 3600000); using 500");
	BAD("UCMA_COMPACT_INTERVAL_MS", "10ms", o.compact_interval_ms == 500, "bad number");
	BAD("UCMA_COMPACT_INTERVAL_MS", "99999999999999999999", o.compact_interval_ms == 500,
	    "out of range");
	BAD("UCMA_COMPACT_INTERVAL_MS", "-5", o.compact_interval_ms == 500,
	    "negative number");
	GOOD("UCMA_COMPACT_PROACTIVENESS", "0", o.compact_proactiveness == 0);
	GOOD("UCMA_COMPACT_PROACTIVENESS", "100", o.compact_proactiveness == 100);
	BAD("UCMA_COMPACT_PROACTIVENESS", "101", o.compact_proactiveness == 20,
	    "out of range (accepted: 0 to 100); using 20");
	GOOD("UCMA_COPY_HELPERS", "0", o.copy_helpers == 0);
	GOOD("UCMA_COPY_HELPERS", "8", o.copy_helpers == 8);
	BAD("UCMA_COPY_HELPERS", "9", o.copy_helpers == 1,
	    "out of range (accepted: 0 to 8); using 1");
	BAD("UCMA_COPY_HELPERS", "two", o.copy_helpers == 1, "bad number");
	GOOD("UCMA_DECAY_MS", "0", o.decay_ms == 0);
	BAD("UCMA_DECAY_MS", "", o.decay_ms == 10000, "empty value");

	GOOD("UCMA_STATS_FILE", "/tmp/ucma-%p.txt", strcmp(o.stats_file, "/tmp/ucma-%p.txt") == 0);
	GOOD("UCMA_STATS_FILE", "", o.stats_file[0] == '\0');
	memset(path, 'p', 299);
	path[299] = '\0';
	clear_env();
	setenv("UCMA_STATS_FILE", path, 1);
	ok(env_run(&o) == 1 && o.stats_file[0] == '\0', "a 299-byte stats file is refused");
	ok(one_line("ucma: UCMA_STATS_FILE='pppp", "...': too long"),
	   "the message quotes the value shortened");
}

static void test_names(void)
{
	clear_env();
	setenv("UCMA_AREAN_SIZE", "2G", 1);
	ok(env_run(&o) == 1 && o.arena_size == G(1), "UCMA_AREAN_SIZE counts as bad");
	ok(one_line("ucma: UCMA_AREAN_SIZE='2G': unknown variable",
		    "did you mean UCMA_ARENA_SIZE?); ignored"),
	   "a misspelt name gets a suggestion");

	clear_env();
	setenv("UCMA_FROBNICATE", "1", 1);
	ok(env_run(&o) == 1 && one_line("UCMA_FROBNICATE='1': unknown variable", NULL) &&
	   !strstr(out, "did you mean"), "an unrelated name gets no suggestion");

	clear_env();
	setenv("UCMA_SOAK_SECONDS", "5", 1);
	setenv("UCMA_TEST_LIBDIR", "/x", 1);
	setenv("UCMA_BENCH_ITERATIONS", "7", 1);
	setenv("UCMA_CONF", "", 1);
	ok(env_run(&o) == 0 && nlines == 0, "names read elsewhere are accepted");

	clear_env();
	setenv("UCMA_ARENA_SIZE", "1\nG", 1);
	ok(env_run(&o) == 1 && one_line("UCMA_ARENA_SIZE='1?G'", "bad size"),
	   "a newline in a value does not break the message line");

	clear_env();
	setenv("UCMA_ARENA_SIZE", "x", 1);
	setenv("UCMA_DECAY_MS", "y", 1);
	setenv("UCMA_NODE", "z", 1);
	ok(env_run(&o) == 3 && nlines == 3, "three bad values: three counted, three lines");
}

static void test_conf(void)
{
	clear_env();
	setenv("UCMA_CONF", "arena=2G,cma=512M,hugepages=2m,node=local,populate=on,"
	       "cma_policy=reserved,decay_ms=0,stats_file=/tmp/s,compact=off", 1);
	ok(env_run(&o) == 0 && nlines == 0 && o.arena_size == G(2) && o.cma_size == M(512) &&
	   o.hugepages == UCMA_BACKING_HUGETLB_2M && o.node == UCMA_NODE_LOCAL &&
	   o.populate && o.cma_policy == UCMA_CMA_RESERVED && o.decay_ms == 0 &&
	   strcmp(o.stats_file, "/tmp/s") == 0 && !o.compact,
	   "UCMA_CONF sets many keys");

	clear_env();
	setenv("UCMA_CONF", " arena = 2G , , Cma=64M ,", 1);
	ok(env_run(&o) == 0 && nlines == 0 && o.arena_size == G(2) && o.cma_size == M(64),
	   "blanks, empty items and key case are tolerated");

	clear_env();
	setenv("UCMA_ARENA_SIZE", "2G", 1);
	setenv("UCMA_CONF", "arena=4G", 1);
	ok(env_run(&o) == 0 && o.arena_size == G(4), "UCMA_CONF wins over UCMA_ARENA_SIZE");

	clear_env();
	setenv("UCMA_CONF", "arena=2G,arena=3G", 1);
	ok(env_run(&o) == 0 && o.arena_size == G(3), "the later UCMA_CONF key wins");

	clear_env();
	setenv("UCMA_CONF", "cma_areas=a:64M;b:32M", 1);
	ok(env_run(&o) == 0 && o.nr_areas == 2 && o.cma_size == M(96),
	   "cma_areas in UCMA_CONF uses ';'");

	clear_env();
	setenv("UCMA_CMA_AREAS", "a:64M", 1);
	setenv("UCMA_CONF", "cma=128M", 1);
	ok(env_run(&o) == 0 && o.nr_areas == 0 && o.cma_size == M(128),
	   "a later cma replaces an area list");

	clear_env();
	setenv("UCMA_CMA_SIZE", "128M", 1);
	setenv("UCMA_CMA_AREAS", "x:64M", 1);
	ok(env_run(&o) == 0 && o.nr_areas == 1 && o.cma_size == M(64),
	   "UCMA_CMA_AREAS wins over UCMA_CMA_SIZE");

	clear_env();
	setenv("UCMA_CONF", "arnea=2G", 1);
	ok(env_run(&o) == 1 && o.arena_size == G(1), "an unknown key counts as bad");
	ok(one_line("ucma: UCMA_CONF key 'arnea'='2G': unknown key (accepted: strict, arena,",
		    "did you mean 'arena'?); ignored"),
	   "the message names the key and suggests one");

	clear_env();
	setenv("UCMA_CONF", "arena=12Q", 1);
	ok(env_run(&o) == 1 && o.arena_size == G(1), "a bad UCMA_CONF value is refused");
	ok(one_line("ucma: UCMA_CONF key 'arena'='12Q': bad size", "using 1G"),
	   "the message names the UCMA_CONF key");

	clear_env();
	setenv("UCMA_ARENA_SIZE", "2G", 1);
	setenv("UCMA_CONF", "arena=12Q", 1);
	ok(env_run(&o) == 1 && o.arena_size == G(2) && one_line("'12Q'", "using 2G"),
	   "a bad UCMA_CONF value keeps the environment's value");

	clear_env();
	setenv("UCMA_CONF", "arena", 1);
	ok(env_run(&o) == 1 && one_line("UCMA_CONF key 'arena'", "missing '=value'"),
	   "an item without '=' is refused");
}

static void test_strict(void)
{
	struct ucma_config cfg;
	int rc, err;

	clear_env();
	setenv("UCMA_STRICT", "1", 1);
	setenv("UCMA_ARENA_SIZE", "12Q", 1);
	ok(env_run(&o) == 1 && o.strict && nlines == 1, "UCMA_STRICT=1 with a bad value");
	ok(one_line("UCMA_ARENA_SIZE='12Q'", "; refused (UCMA_STRICT=1)") && !strstr(out, "using"),
	   "under UCMA_STRICT=1 the message says the value is refused, not replaced");

	clear_env();
	setenv("UCMA_POPULATE", "maybe", 1);
	setenv("UCMA_CONF", "verbose=1,strict=1", 1);
	ok(env_run(&o) == 1 && o.strict && o.verbose && nlines == 1,
	   "strict in UCMA_CONF applies, one message only");

	clear_env();
	setenv("UCMA_STRICT", "1", 1);
	setenv("UCMA_CONF", "strict=0", 1);
	ok(env_run(&o) == 0 && !o.strict, "UCMA_CONF strict=0 wins over UCMA_STRICT=1");

	clear_env();
	setenv("UCMA_STRICT", "perhaps", 1);
	ok(env_run(&o) == 1 && !o.strict && one_line("UCMA_STRICT='perhaps'", "using off"),
	   "a bad UCMA_STRICT is refused");

	clear_env();
	setenv("UCMA_STRICT", "1", 1);
	setenv("UCMA_DECAY_MS", "soon", 1);
	cap_begin();
	errno = 0;
	rc = ucma_config_from_env(&cfg);
	err = errno;
	cap_end();
	ok(rc == -1 && err == EINVAL && nlines == 1,
	   "ucma_config_from_env: EINVAL for a bad value in strict mode");

	clear_env();
	setenv("UCMA_DECAY_MS", "soon", 1);
	cap_begin();
	rc = ucma_config_from_env(&cfg);
	cap_end();
	ok(rc == 0 && nlines == 1 && cfg.arena_size == G(1),
	   "ucma_config_from_env: a bad value is only reported without strict mode");
}

static void test_cross_check(void)
{
	GOOD("UCMA_ARENA_SIZE", "64M", o.cma_size == M(16) && o.nr_areas == 0);
	GOOD("UCMA_ARENA_SIZE", "8M", o.cma_size == M(2));
	GOOD("UCMA_ARENA_SIZE", "4G", o.cma_size == M(256));

	clear_env();
	setenv("UCMA_ARENA_SIZE", "64M", 1);
	setenv("UCMA_CMA_SIZE", "60M", 1);
	ok(env_run(&o) == 0 && o.cma_size == M(60), "CMA may leave exactly 4M to NORMAL");

	clear_env();
	setenv("UCMA_ARENA_SIZE", "64M", 1);
	setenv("UCMA_CMA_SIZE", "62M", 1);
	ok(env_run(&o) == 1 && o.cma_size == M(16), "CMA leaving 2M falls back to a quarter");
	ok(one_line("ucma: UCMA_CMA_SIZE='62M': CMA larger than the arena", "using 16M"),
	   "the message names the CMA variable");

	clear_env();
	setenv("UCMA_ARENA_SIZE", "64M", 1);
	setenv("UCMA_CONF", "cma_areas=a:32M;b:32M", 1);
	ok(env_run(&o) == 1 && o.nr_areas == 0 && o.cma_size == M(16),
	   "areas too large for the arena revert to one default area");
	ok(one_line("UCMA_CONF key 'cma_areas'='a:32M;b:32M': CMA larger than the arena",
		    "using default:16M"), "the message names the UCMA_CONF key");
}

static void test_from_config(void)
{
	struct ucma_config cfg;
	struct ucma_options before;

	ucma_options_defaults(&o);
	ok(cfg_run(&o, NULL) == 0 && nlines == 0, "ucma_options_from_config(NULL) is a no-op");
	memset(&cfg, 0, sizeof(cfg));
	ok(cfg_run(&o, &cfg) == 0 && nlines == 0 && memcmp(&o, &def, sizeof(o)) == 0,
	   "a zero ucma_config keeps everything");

	cfg.arena_size = G(2) + 1;
	cfg.cma_size = M(512);
	cfg.hugepages = UCMA_BACKING_HUGETLB_2M;
	cfg.hugepages_normal = UCMA_BACKING_NONE;
	cfg.node = UCMA_NODE_LOCAL;
	cfg.populate = 1;
	cfg.strict = 1;
	cfg.cma_dontfork = 1;
	cfg.cma_policy = UCMA_CMA_RESERVED;
	ok(cfg_run(&o, &cfg) == 0 && nlines == 0 && o.arena_size == G(2) + M(2) &&
	   o.cma_size == M(512) && o.hugepages == UCMA_BACKING_HUGETLB_2M &&
	   o.hugepages_normal == UCMA_BACKING_NONE && o.node == UCMA_NODE_LOCAL &&
	   o.populate && o.strict && o.cma_dontfork && o.cma_policy == UCMA_CMA_RESERVED,
	   "every field of ucma_config applies");

	memset(&cfg, 0, sizeof(cfg));
	cfg.cma_size = G(1);
	cfg.cma_areas = "x:64M,y:64M";
	ucma_options_defaults(&o);
	ok(cfg_run(&o, &cfg) == 0 && o.nr_areas == 2 && o.cma_size == M(128),
	   "cma_areas wins over cma_size");

	memset(&cfg, 0, sizeof(cfg));
	cfg.arena_size = 1;
	ucma_options_defaults(&o);
	ok(cfg_run(&o, &cfg) == 1 && o.arena_size == G(1), "a tiny arena_size is refused");
	ok(one_line("ucma: ucma_config.arena_size=1: out of range (accepted: 8M to 1T",
		    "using 1G"), "the message names the field");

	memset(&cfg, 0, sizeof(cfg));
	cfg.hugepages = 9;
	cfg.cma_policy = 7;
	cfg.node = -7;
	cfg.reserved[3] = 1;
	ucma_options_defaults(&o);
	ok(cfg_run(&o, &cfg) == 4 && nlines == 4 && o.hugepages == UCMA_BACKING_AUTO &&
	   o.cma_policy == UCMA_CMA_LEND && o.node == UCMA_NODE_DEFAULT,
	   "bad enum, node and reserved fields: four counted, defaults kept");
	ok(strstr(out, "ucma: ucma_config.hugepages=9: unknown value (accepted: "
		       "UCMA_BACKING_AUTO to UCMA_BACKING_NONE); using auto\n") &&
	   strstr(out, "ucma: ucma_config.cma_policy=7: ") &&
	   strstr(out, "ucma: ucma_config.node=-7: out of range") &&
	   strstr(out, "ucma: ucma_config.reserved[3]=1: reserved field set"),
	   "each bad field is named");

	memset(&cfg, 0, sizeof(cfg));
	cfg.node = UCMA_NODE_ID(5000);	/* node n is n + 1 in the structure */
	ucma_options_defaults(&o);
	ok(cfg_run(&o, &cfg) == 1 && one_line("ucma_config.node=5000", "out of range"),
	   "node 5000 is refused");

	memset(&cfg, 0, sizeof(cfg));
	cfg.cma_areas = "bad name:1M";
	ucma_options_defaults(&o);
	ok(cfg_run(&o, &cfg) == 1 && o.nr_areas == 0 &&
	   one_line("ucma: ucma_config.cma_areas='bad name:1M': bad area name", NULL),
	   "a bad area list in ucma_config is refused");

	memset(&cfg, 0, sizeof(cfg));
	cfg.cma_size = G(2);
	ucma_options_defaults(&o);
	ok(cfg_run(&o, &cfg) == 1 && o.cma_size == M(256) &&
	   one_line("ucma: ucma_config.cma_size=2147483648: CMA larger than the arena", NULL),
	   "a CMA size larger than the arena is refused");

	/* an explicit CMA from the environment, then a smaller arena in C */
	clear_env();
	setenv("UCMA_CMA_SIZE", "512M", 1);
	env_run(&o);
	before = o;
	memset(&cfg, 0, sizeof(cfg));
	cfg.arena_size = M(256);
	ok(before.cma_size == M(512) && cfg_run(&o, &cfg) == 1 && o.cma_size == M(64) &&
	   one_line("ucma: ucma_config.arena_size=268435456: CMA of 512M larger than the arena",
		    "using CMA 64M"), "a smaller arena that no longer holds the CMA is named");

	/* the default CMA follows a smaller arena silently */
	ucma_options_defaults(&o);
	ok(cfg_run(&o, &cfg) == 0 && nlines == 0 && o.cma_size == M(64),
	   "the default CMA follows the arena given in C");
}

static void test_config_from_env(void)
{
	struct ucma_config cfg;
	struct ucma_options back;
	const char *v;
	int rc;

	errno = 0;
	ok(ucma_config_from_env(NULL) == -1 && errno == EINVAL,
	   "ucma_config_from_env(NULL): EINVAL");

	clear_env();
	setenv("UCMA_ARENA_SIZE", "2G", 1);
	setenv("UCMA_CMA_AREAS", "a:64M,b:33M", 1);
	setenv("UCMA_NODE", "local", 1);
	setenv("UCMA_HUGEPAGES", "2M", 1);
	setenv("UCMA_CMA_DONTFORK", "1", 1);
	cap_begin();
	rc = ucma_config_from_env(&cfg);
	cap_end();
	ok(rc == 0 && nlines == 0 && cfg.arena_size == G(2) && cfg.cma_size == M(98) &&
	   cfg.cma_areas && strcmp(cfg.cma_areas, "a:64M,b:34M") == 0 &&
	   cfg.node == UCMA_NODE_LOCAL && cfg.hugepages == UCMA_BACKING_HUGETLB_2M &&
	   cfg.cma_dontfork && cfg.hugepages_normal == UCMA_BACKING_THP,
	   "ucma_config_from_env fills the structure");

	ucma_options_defaults(&back);
	ok(cfg_run(&back, &cfg) == 0 && back.arena_size == G(2) && back.nr_areas == 2 &&
	   back.areas[1].size == M(34) && back.cma_size == M(98) && back.cma_dontfork &&
	   back.node == UCMA_NODE_LOCAL, "its result reads back through ucma_config");

	clear_env();
	setenv("UCMA_CONF", "cma_areas=x:4M;y:4M,arena=1G", 1);
	cap_begin();
	rc = ucma_config_from_env(&cfg);
	cap_end();
	ok(rc == 0 && cfg.cma_areas && strcmp(cfg.cma_areas, "x:4M,y:4M") == 0,
	   "areas from UCMA_CONF come back with ','");

	{
		/* Each result keeps its areas: they lived in one buffer that
		 * the next call rewrote, and ucma_init() of the first result
		 * made the second's areas. */
		struct ucma_config first, second;

		clear_env();
		setenv("UCMA_CMA_AREAS", "video:64M", 1);
		rc = ucma_config_from_env(&first);
		setenv("UCMA_CMA_AREAS", "net:8M", 1);
		rc |= ucma_config_from_env(&second);
		ok(rc == 0 && first.cma_areas && strcmp(first.cma_areas, "video:64M") == 0 &&
			   second.cma_areas && strcmp(second.cma_areas, "net:8M") == 0,
		   "a later ucma_config_from_env leaves an earlier result's areas alone");
		setenv("UCMA_CMA_AREAS", "video:64M", 1);
		rc = ucma_config_from_env(&second);
		ok(rc == 0 && second.cma_areas == first.cma_areas,
		   "the same list again shares the copy kept");
	}

	/* A CMA size that was chosen is kept whatever its value: 128M is
	 * also the default for a 512M arena, and used to be taken for it. */
	clear_env();
	setenv("UCMA_ARENA_SIZE", "512M", 1);
	setenv("UCMA_CMA_SIZE", "128M", 1);
	cap_begin();
	rc = ucma_config_from_env(&cfg);
	cap_end();
	ok(rc == 0 && nlines == 0 && cfg.cma_size == M(128),
	   "a chosen CMA size equal to the default comes back (%zu)", cfg.cma_size);
	{
		struct ucma_config k;

		memset(&k, 0, sizeof(k));
		k.arena_size = G(4);
		cap_begin();
		ucma_options_defaults(&back);
		rc = ucma_options_from_env(&back);
		rc += ucma_options_from_config(&back, &k);
		cap_end();
		ok(rc == 0 && nlines == 0 && back.arena_size == G(4) && back.cma_size == M(128),
		   "... and stays when ucma_config changes the arena (%zu)", back.cma_size);
	}
	clear_env();
	setenv("UCMA_ARENA_SIZE", "512M", 1);
	rc = ucma_config_from_env(&cfg);
	ok(rc == 0 && cfg.cma_size == 0, "a CMA size nobody chose is left 0");

	clear_env();
	setenv("UCMA_TEST_CONFIG_X", "abc", 1);
	v = ucma_getenv("UCMA_TEST_CONFIG_X");
	ok(v && strcmp(v, "abc") == 0 && !ucma_getenv("UCMA_TEST_CONFIG_Y"),
	   "ucma_getenv reads the environment");
}

static void test_print(void)
{
	ucma_options_defaults(&o);
	cap_begin();
	ucma_options_print(STDERR_FILENO, &o);
	cap_end();
	ok(nlines == 22 && strstr(out, "ucma: UCMA_ARENA_SIZE=1G\n") &&
	   strstr(out, "ucma: UCMA_OVERFLOW_CACHE=64M\n") &&
	   strstr(out, "ucma: UCMA_COPY_HELPERS=1\n") &&
	   strstr(out, "ucma: UCMA_CMA_AREAS=default:256M\n") &&
	   strstr(out, "ucma: UCMA_HUGEPAGES_NORMAL=thp\n") &&
	   strstr(out, "ucma: UCMA_STATS_FILE=''\n") &&
	   strstr(out, "ucma: UCMA_STATS_SHM=request\n"), "ucma_options_print shows every option");

	cap_begin();
	ucma_options_describe(STDERR_FILENO);
	cap_end();
	ok(nlines == 3 * 22 && strstr(out, "UCMA_ARENA_SIZE, UCMA_CONF key arena, default 1G, "
					   "8M to 1T, rounded up to 2M\n    size of the arena") &&
	   strstr(out, "UCMA_CMA_AREAS, UCMA_CONF key cma_areas, default none") &&
	   strstr(out, "UCMA_STATS_FILE, UCMA_CONF key stats_file, default empty\n"),
	   "ucma_options_describe gives three lines per option");
}

/*
 * ucma_init() refused in strict mode: the other functions keep failing
 * with EINVAL (they started the library from the environment, dropping
 * the caller's configuration), and a later ucma_init() with a good
 * configuration starts it.  In a child, which may start an arena.
 */
static void test_refused_init_sticks(void)
{
	struct res { int init_rc, init_errno, alloc_null, alloc_errno, halloc_zero, retry_rc,
		     alloc_ok; } *r;
	pid_t pid;
	int st;

	r = tu_shared_results(sizeof(*r));
	pid = tu_fork();
	if (pid == 0) {
		struct ucma_config bad = { .strict = 1, .hugepages = 99 };
		struct ucma_config good = { .arena_size = 64 << 20, .cma_size = 16 << 20,
					    .hugepages = UCMA_BACKING_NONE,
					    .hugepages_normal = UCMA_BACKING_NONE };
		void *p;

		r->init_rc = ucma_init(&bad);
		r->init_errno = errno;
		errno = 0;
		p = ucma_alloc(4096, 0, 0);
		r->alloc_null = p == NULL;
		r->alloc_errno = errno;
		r->halloc_zero = ucma_halloc(64, 0) == 0;
		r->retry_rc = ucma_init(&good);
		p = ucma_alloc(4096, 0, 0);
		r->alloc_ok = p && ucma_release(p) == 0;
		_exit(0);
	}
	st = tu_wait(pid);
	ok(WIFEXITED(st) && r->init_rc == -1 && r->init_errno == EINVAL,
	   "ucma_init(strict, bad backing): -1, EINVAL");
	ok(r->alloc_null && r->alloc_errno == EINVAL && r->halloc_zero,
	   "after it, ucma_alloc() and ucma_halloc() fail with the first error (errno %d)",
	   r->alloc_errno);
	ok(r->retry_rc == 0 && r->alloc_ok, "a later ucma_init() with a good configuration starts");
	munmap(r, sizeof(*r));
}

int main(void)
{
	plan_no_plan();
	test_parse_size();
	test_defaults();
	test_sizes();
	test_areas();
	test_words();
	test_node();
	test_bools();
	test_numbers();
	test_names();
	test_conf();
	test_strict();
	test_cross_check();
	test_from_config();
	test_config_from_env();
	test_print();
	clear_env();
	test_refused_init_sticks();
	return done();
}
