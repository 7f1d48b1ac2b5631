/*
 * ucmastat.c - statistics of a process using ucma, read from outside it.
 *
 * A process using ucma publishes its counters and a map of its arena in
 * /dev/shm/ucma.<pid> when a reader asks, refreshes them on each request,
 * and removes them some seconds after the last (see shm.h for both).  This
 * program asks, waits for the answer and reads the segment; it does not
 * link the library.  It prints the counters (/proc/vmstat style), watches
 * them change (like vmstat 1), lists the processes that use ucma, and
 * draws the arena as a map of pageblocks, as text or SVG.
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
#include <sys/file.h>
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
/* Requests                                                                  */
/* ------------------------------------------------------------------------ */

/* How long to wait for a process to answer (-t). */
static double answer_timeout = 2.0;

/* Set by SIGINT, SIGTERM or SIGHUP while requests are open. */
static volatile sig_atomic_t stop_signal;

/*
 * struct request - this program's request for the statistics of one
 * process (the protocol is in shm.h): the request file, held open with a
 * shared lock so that no other reader removes it meanwhile.  Every open
 * request is on one list, so that an exit on any path withdraws it.
 */
struct request {
	int fd;				/* -1: none */
	pid_t pid;
	char path[128];
	uint64_t mtime_ns;		/* what the last renewal set */
	struct request *next;
};

static struct request *open_requests;

static uint64_t timespec_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

static uint64_t now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return timespec_ns(&ts);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L };

	nanosleep(&ts, NULL);	/* a signal ends it early: callers look at stop_signal */
}

/* The owner of process @pid (of its /proc directory), or (uid_t)-1. */
static uid_t pid_uid(pid_t pid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%ld", (long)pid);
	return stat(path, &st) == 0 ? st.st_uid : (uid_t)-1;
}

/*
 * Open (creating it if needed) the request file of @pid and take a shared
 * lock on it.  Returns false with the reason in @why.
 */
static bool request_open(struct request *r, pid_t pid, char *why, size_t whylen)
{
	uid_t owner = pid_uid(pid);

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	r->pid = pid;
	snprintf(r->path, sizeof(r->path), "%s/%s%ld%s", UCMA_SHM_DIR, UCMA_SHM_PREFIX, (long)pid,
		 UCMA_SHM_REQUEST_SUFFIX);
	for (int attempt = 0; attempt < 10; attempt++) {
		struct stat fst, lst;
		int fd = open(r->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

		if (fd < 0) {
			snprintf(why, whylen, "%s: cannot ask process %ld for its statistics: %s",
				 r->path, (long)pid, strerror(errno));
			return false;
		}
		/* The name must still be this file once we hold the lock: the
		 * last reader removes it under an exclusive lock. */
		if (flock(fd, LOCK_SH) != 0 || fstat(fd, &fst) != 0 || lstat(r->path, &lst) != 0 ||
		    fst.st_dev != lst.st_dev || fst.st_ino != lst.st_ino) {
			close(fd);
			continue;
		}
		if (fst.st_uid != geteuid() && fst.st_uid != owner && fst.st_uid != 0) {
			/* The process ignores another user's request: replace it if we may. */
			close(fd);
			if (unlink(r->path) != 0) {
				snprintf(why, whylen, "%s belongs to another user: cannot ask process %ld "
					 "for its statistics", r->path, (long)pid);
				return false;
			}
			continue;
		}
		r->fd = fd;
		r->next = open_requests;
		open_requests = r;
		return true;
	}
	snprintf(why, whylen, "%s: kept changing under us", r->path);
	return false;
}

/* Ask again: a new modification time, which the process answers once. */
static void request_renew(struct request *r)
{
	struct stat st;

	if (r->fd < 0)
		return;
	if (futimens(r->fd, NULL) == 0 && fstat(r->fd, &st) == 0)
		r->mtime_ns = timespec_ns(&st.st_mtim);
}

/* Withdraw the request: the last reader (no other lock held) removes the file. */
static void request_close(struct request *r)
{
	struct stat fst, lst;

	if (r->fd < 0)
		return;
	for (struct request **pp = &open_requests; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	}
	if (flock(r->fd, LOCK_EX | LOCK_NB) == 0 && fstat(r->fd, &fst) == 0 &&
	    lstat(r->path, &lst) == 0 && fst.st_dev == lst.st_dev && fst.st_ino == lst.st_ino)
		unlink(r->path);
	close(r->fd);
	r->fd = -1;
}

static void request_close_all(void)
{
	while (open_requests)
		request_close(open_requests);
}

static void on_stop_signal(int sig)
{
	stop_signal = sig;
}

/* Withdraw every request and end as the signal would have ended us. */
static void stop_if_signalled(void)
{
	int sig = stop_signal;

	if (!sig)
		return;
	request_close_all();
	signal(sig, SIG_DFL);
	raise(sig);
	exit(128 + sig);
}

static void catch_stop_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;	/* no SA_RESTART: sleeps end at once */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	atexit(request_close_all);
}

/* ------------------------------------------------------------------------ */
/* The segment                                                               */
/* ------------------------------------------------------------------------ */

/*
 * struct seg - one process's segment: the live mapping and the last
 * consistent copy of it, which everything else reads, and the request
 * that keeps it coming.
 */
struct seg {
	pid_t pid;
	const void *live;
	size_t size;
	dev_t dev;			/* of the mapped file */
	ino_t ino;
	char *copy;
	const struct ucma_shm_header *h;	/* = copy */
	const struct ucma_shm_counter *ctr;
	const uint8_t *map;
	struct request req;
	bool answered;			/* the copy answers req's last renewal */
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
			if (s1 == s2) {
				s->answered = s->req.fd >= 0 &&
					      s->h->answered_request_ns >= s->req.mtime_ns;
				return true;
			}
		}
		if (attempt > 10)
			nanosleep(&(struct timespec){ .tv_nsec = 500000 }, NULL);
	}
	return false;
}

static void seg_unmap(struct seg *s)
{
	if (s->live)
		munmap((void *)s->live, s->size);
	free(s->copy);
	s->live = NULL;
	s->copy = NULL;
	s->h = NULL;
	s->ctr = NULL;
	s->map = NULL;
	s->size = 0;
}

/*
 * Map the segment file of s->pid as it is now and take a snapshot, without
 * asking for anything.  On failure returns the reason, with a message in
 * @why; SEG_NOTUCMA means there is no file.
 */
static enum seg_error seg_map(struct seg *s, char *why, size_t whylen)
{
	char path[128];
	const char *problem;
	struct stat st;
	uint64_t start;
	pid_t pid = s->pid;
	void *p;
	int fd;

	seg_unmap(s);
	seg_path(pid, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		int err = errno;

		if (err == ENOENT) {
			snprintf(why, whylen, "no %s", path);
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
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	/* The owner stores magic last: give a segment being created a moment. */
	for (int i = 0; i < 100 && __atomic_load_n(&((const struct ucma_shm_header *)p)->magic,
						   __ATOMIC_ACQUIRE) != UCMA_SHM_MAGIC;
	     i++)
		nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
	s->copy = xmalloc(s->size);
	s->h = (const void *)s->copy;
	if (!seg_snapshot(s)) {
		snprintf(why, whylen, "%s: the owner kept it busy for a second", path);
		return SEG_BUSY;
	}
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

/* Returns true if the file now at the segment's name is not the one mapped. */
static bool seg_replaced(const struct seg *s)
{
	char path[128];
	struct stat st;

	seg_path(s->pid, path, sizeof(path));
	return stat(path, &st) == 0 && (st.st_dev != s->dev || st.st_ino != s->ino);
}

/*
 * One step of waiting for the answer to s->req: map the segment if it is
 * not mapped (or was replaced), copy it, and say whether the copy answers.
 * Returns SEG_OK with s->answered, SEG_NOTUCMA or SEG_STALE while there is
 * nothing usable yet (the process creates or replaces the file when it
 * answers), or another error that waiting will not cure.
 */
static enum seg_error seg_poll(struct seg *s, char *why, size_t whylen)
{
	enum seg_error err;

	if (s->live && !seg_replaced(s)) {
		if (!seg_snapshot(s)) {
			snprintf(why, whylen, "process %ld kept its statistics busy for a second",
				 (long)s->pid);
			return SEG_BUSY;
		}
		return SEG_OK;
	}
	err = seg_map(s, why, whylen);
	if (err != SEG_OK && err != SEG_BUSY)
		seg_unmap(s);
	return err == SEG_BUSY ? SEG_NOTUCMA : err;
}

/*
 * Wait until the process answers the request, it ends, or the timeout
 * passes.  Returns SEG_OK with s->answered true, or false when only an
 * older copy could be had; otherwise the reason, with a message in @why.
 */
static enum seg_error seg_wait_answer(struct seg *s, char *why, size_t whylen)
{
	uint64_t deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)(answer_timeout * 1e9);
	enum seg_error err;

	for (;;) {
		err = seg_poll(s, why, whylen);
		if (err == SEG_OK && s->answered)
			return SEG_OK;
		if (err != SEG_OK && err != SEG_NOTUCMA && err != SEG_STALE)
			return err;
		if (!pid_alive(s->pid)) {
			snprintf(why, whylen, "no process with id %ld", (long)s->pid);
			return SEG_NOPROC;
		}
		stop_if_signalled();
		if (now_ns(CLOCK_MONOTONIC) >= deadline)
			break;
		sleep_ms(5);
	}
	if (err == SEG_OK)
		return SEG_OK;	/* an older copy: better than nothing, and says its age */
	if (err == SEG_NOTUCMA) {
		char comm[64];

		pid_comm(s->pid, comm, sizeof(comm));
		snprintf(why, whylen,
			 "process %ld (%s) does not use ucma, or did not answer within %g s: a "
			 "process answers from its ucma calls or its compaction thread, and not "
			 "at all with UCMA_STATS_SHM=off; UCMA_STATS_SHM=on publishes from "
			 "start-up",
			 (long)s->pid, comm, answer_timeout);
	}
	return err;
}

static void seg_close(struct seg *s)
{
	seg_unmap(s);
	request_close(&s->req);
	s->pid = 0;
}

static double seg_age(const struct seg *s)
{
	struct timespec now;
	double age;

	clock_gettime(CLOCK_REALTIME, &now);
	age = ((double)now.tv_sec * 1e9 + (double)now.tv_nsec - (double)s->h->update_time_ns) / 1e9;
	return age < 0 ? 0 : age;
}

static void warn_unanswered(const struct seg *s)
{
	fprintf(stderr, "%s: process %ld did not answer within %g s; these figures are %.1f s old\n",
		prog, (long)s->pid, answer_timeout, seg_age(s));
}

/*
 * Ask @pid for its statistics and wait for them.  On failure returns the
 * reason, with a message in @why.
 */
static enum seg_error seg_open(pid_t pid, struct seg *s, char *why, size_t whylen)
{
	uid_t owner;

	memset(s, 0, sizeof(*s));
	s->pid = pid;
	s->req.fd = -1;
	if (!pid_alive(pid)) {
		snprintf(why, whylen, "no process with id %ld", (long)pid);
		return SEG_NOPROC;
	}
	owner = pid_uid(pid);
	if (geteuid() != 0 && owner != (uid_t)-1 && owner != geteuid()) {
		char path[128];

		seg_path(pid, path, sizeof(path));
		snprintf(why, whylen,
			 "%s: permission denied: the statistics of process %ld can be read by its "
			 "owner and by root only",
			 path, (long)pid);
		return SEG_ACCESS;
	}
	if (!request_open(&s->req, pid, why, whylen))
		return SEG_BAD;
	request_renew(&s->req);
	return seg_wait_answer(s, why, whylen);
}

/* Open or exit with the reason; warn when the figures are not fresh. */
static void seg_open_or_die(pid_t pid, struct seg *s)
{
	char why[512];

	if (seg_open(pid, s, why, sizeof(why)) != SEG_OK)
		die("%s", why);
	if (!s->answered)
		warn_unanswered(s);
}

/* Ask again and wait for the answer (ucmastat -w). */
static void seg_refresh_or_die(struct seg *s)
{
	char why[512];

	request_renew(&s->req);
	if (seg_wait_answer(s, why, sizeof(why)) != SEG_OK)
		die("%s", why);
	if (!s->answered)
		warn_unanswered(s);
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

/*
 * Sleep @secs seconds, renewing the request at least every
 * UCMA_SHM_RENEW_S so that the process keeps its segment meanwhile.
 */
static void sleep_seconds(struct seg *s, double secs)
{
	uint64_t end = now_ns(CLOCK_MONOTONIC) + (uint64_t)(secs * 1e9);

	for (;;) {
		uint64_t now = now_ns(CLOCK_MONOTONIC), left, chunk;
		struct timespec ts;

		stop_if_signalled();
		if (now >= end)
			return;
		left = end - now;
		chunk = left < UCMA_SHM_RENEW_S * 1000000000ull ? left :
								  UCMA_SHM_RENEW_S * 1000000000ull;
		ts.tv_sec = (time_t)(chunk / 1000000000ull);
		ts.tv_nsec = (long)(chunk % 1000000000ull);
		nanosleep(&ts, NULL);
		if (chunk < left)
			request_renew(&s->req);	/* keeps the lease; no answer needed */
	}
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
			sleep_seconds(&s, interval);
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

/* A process that --list looks at. */
struct listed {
	pid_t pid;
	struct seg s;
	enum seg_error err;
	bool done;			/* answered, or will not */
	char why[512];
};

struct listed_set {
	struct listed *v;
	size_t n, cap;
};

static void listed_add(struct listed_set *set, pid_t pid)
{
	for (size_t i = 0; i < set->n; i++)
		if (set->v[i].pid == pid)
			return;
	if (set->n == set->cap) {
		set->cap = set->cap ? set->cap * 2 : 16;
		set->v = realloc(set->v, set->cap * sizeof(*set->v));
		if (!set->v)
			die("out of memory");
	}
	memset(&set->v[set->n], 0, sizeof(set->v[set->n]));
	set->v[set->n].pid = pid;
	set->v[set->n].s.req.fd = -1;
	set->n++;
}

/* The pid a name of /dev/shm or /proc stands for, or 0; @suffix must follow. */
static pid_t name_pid(const char *name, const char *prefix, const char *suffix)
{
	size_t plen = strlen(prefix), digits;
	long v;

	if (strncmp(name, prefix, plen) != 0)
		return 0;
	name += plen;
	digits = strspn(name, "0123456789");
	if (digits == 0 || digits > 9 || name[0] == '0' || strcmp(name + digits, suffix) != 0)
		return 0;
	v = atol(name);
	return v > 0 ? (pid_t)v : 0;
}

/* Returns true if process @pid has a ucma library mapped. */
static bool maps_ucma(pid_t pid)
{
	char path[64], *line = NULL;
	size_t len = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/maps", (long)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && getline(&line, &len, f) > 0)
		found = strstr(line, "/libucma") != NULL;
	free(line);
	fclose(f);
	return found;
}

/*
 * The processes to list: those with a segment file, and those that map a
 * ucma library (a program linked statically with it shows up once some
 * reader has asked it, or with UCMA_STATS_SHM=on).
 */
static void list_candidates(struct listed_set *set)
{
	DIR *d = opendir(UCMA_SHM_DIR);
	struct dirent *e;
	pid_t pid;

	if (!d)
		die("%s: %s", UCMA_SHM_DIR, strerror(errno));
	while ((e = readdir(d)))
		if ((pid = name_pid(e->d_name, UCMA_SHM_PREFIX, "")) && pid_alive(pid))
			listed_add(set, pid);
	closedir(d);
	d = opendir("/proc");
	if (!d)
		return;
	while ((e = readdir(d)))
		if ((pid = name_pid(e->d_name, "", "")) && pid != getpid() && maps_ucma(pid))
			listed_add(set, pid);
	closedir(d);
}

static void list_print(struct listed *l, bool *header)
{
	const struct seg *s = &l->s;

	if (!*header) {
		printf("%8s %-16s %8s %8s %8s %8s %5s %5s\n", "PID", "COMMAND", "ARENA", "FREE", "CMA",
		       "CONTIG", "FRAG", "AGE");
		*header = true;
	}
	if (l->err == SEG_OK) {
		uint64_t page = s->h->page_size;
		uint64_t cma = 0;

		for (uint32_t i = 0; i < s->h->nr_areas; i++)
			cma += (uint64_t)(s->h->areas[i].end_pb - s->h->areas[i].start_pb) *
			       s->h->pageblock_pages;
		printf("%8ld %-16.16s %7lluM %7lluM %7lluM %7lluM %5llu %4.0fs%s\n", (long)l->pid,
		       s->h->comm, (unsigned long long)(s->h->arena_size >> 20),
		       (unsigned long long)(counter_value(s, "nr_free_pages", 0) * page >> 20),
		       (unsigned long long)(cma * page >> 20),
		       (unsigned long long)(area_sum(s, "used") * page >> 20),
		       (unsigned long long)counter_value(s, "fragmentation_score", 0), seg_age(s),
		       s->answered ? "" : "  (no answer: old figures)");
	} else {
		char comm[64];

		pid_comm(l->pid, comm, sizeof(comm));
		printf("%8ld %-16.16s %8s %8s %8s %8s %5s %5s  (%s)\n", (long)l->pid, comm, "-", "-",
		       "-", "-", "-", "-",
		       l->err == SEG_ACCESS ? "permission denied" :
		       l->err == SEG_NOTUCMA ? "no answer" :
					       "unreadable");
	}
}

/* ucmastat --list: ask every candidate at once, wait for all, print. */
static int cmd_list(void)
{
	struct listed_set set = { 0 };
	uint64_t deadline;
	bool header = false, waiting = true;

	list_candidates(&set);
	for (size_t i = 0; i < set.n; i++) {
		struct listed *l = &set.v[i];
		uid_t owner = pid_uid(l->pid);

		l->s.pid = l->pid;
		if (geteuid() != 0 && owner != (uid_t)-1 && owner != geteuid()) {
			l->err = SEG_ACCESS;
			l->done = true;
		} else if (!request_open(&l->s.req, l->pid, l->why, sizeof(l->why))) {
			l->err = SEG_BAD;
			l->done = true;
		} else {
			request_renew(&l->s.req);
		}
	}
	deadline = now_ns(CLOCK_MONOTONIC) + (uint64_t)(answer_timeout * 1e9);
	while (waiting) {
		waiting = false;
		for (size_t i = 0; i < set.n; i++) {
			struct listed *l = &set.v[i];

			if (l->done)
				continue;
			l->err = seg_poll(&l->s, l->why, sizeof(l->why));
			if ((l->err == SEG_OK && l->s.answered) ||
			    (l->err != SEG_OK && l->err != SEG_NOTUCMA && l->err != SEG_STALE))
				l->done = true;
			else
				waiting = true;
		}
		stop_if_signalled();
		if (waiting && now_ns(CLOCK_MONOTONIC) >= deadline)
			break;
		if (waiting)
			sleep_ms(5);
	}
	for (size_t i = 0; i < set.n; i++) {
		struct listed *l = &set.v[i];

		if (!pid_alive(l->pid)) {
			seg_close(&l->s);
			continue;	/* ended meanwhile */
		}
		if (l->err == SEG_STALE)
			l->err = SEG_NOTUCMA;	/* an old file, and no answer */
		list_print(l, &header);
		seg_close(&l->s);
	}
	free(set.v);
	if (!header)
		printf("no process using ucma found\n");
	return 0;
}

/*
 * Remove a request file nobody holds (an exclusive lock without waiting)
 * when its process has ended or it is older than the lease.
 */
static bool prune_request(pid_t pid, const char *path, int *rc)
{
	struct stat fst, lst;
	const char *why = NULL;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return false;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &fst) == 0 && lstat(path, &lst) == 0 &&
	    fst.st_dev == lst.st_dev && fst.st_ino == lst.st_ino) {
		if (!pid_alive(pid))
			why = "process ended";
		else if (timespec_ns(&fst.st_mtim) + UCMA_SHM_LEASE_S * 1000000000ull <
			 now_ns(CLOCK_REALTIME))
			why = "request no longer renewed";
	}
	if (why) {
		if (unlink(path) == 0) {
			printf("removed %s (%s)\n", path, why);
		} else {
			fprintf(stderr, "%s: cannot remove %s: %s\n", prog, path, strerror(errno));
			*rc = 1;
		}
	}
	close(fd);
	return why != NULL;
}

/* ucmastat --prune: files left by processes that ended, and old requests. */
static int cmd_prune(void)
{
	DIR *d = opendir(UCMA_SHM_DIR);
	struct dirent *e;
	int rc = 0;

	if (!d)
		die("%s: %s", UCMA_SHM_DIR, strerror(errno));
	while ((e = readdir(d))) {
		char why[512], path[128];
		struct seg s = { 0 };
		enum seg_error err;
		pid_t pid;

		if ((pid = name_pid(e->d_name, UCMA_SHM_PREFIX, UCMA_SHM_REQUEST_SUFFIX))) {
			snprintf(path, sizeof(path), "%s/%s%ld%s", UCMA_SHM_DIR, UCMA_SHM_PREFIX,
				 (long)pid, UCMA_SHM_REQUEST_SUFFIX);
			prune_request(pid, path, &rc);
			continue;
		}
		if (!(pid = name_pid(e->d_name, UCMA_SHM_PREFIX, "")))
			continue;
		seg_path(pid, path, sizeof(path));
		s.pid = pid;
		s.req.fd = -1;
		err = seg_map(&s, why, sizeof(why));
		seg_close(&s);
		if (err != SEG_STALE && pid_alive(pid))
			continue;
		if (unlink(path) == 0) {
			printf("removed %s (process %ld ended)\n", path, (long)pid);
		} else {
			fprintf(stderr, "%s: cannot remove %s: %s\n", prog, path, strerror(errno));
			rc = 1;
		}
	}
	closedir(d);
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
		"Show the ucma statistics of process PID, which it publishes in\n"
		UCMA_SHM_DIR "/" UCMA_SHM_PREFIX "PID when asked (and removes "
		"10 s after the last request).\n\n"
		"  (no option)          every statistic as 'name value', or only the NAMEs\n"
		"  -w, --wait=SECONDS   print the changes every SECONDS, like vmstat\n"
		"  -n, --count=COUNT    with -w: stop after COUNT lines\n"
		"  -a, --all            with -w: every statistic that changed\n"
		"  -m, --map            draw the arena, one character per pageblock\n"
		"      --color[=WHEN]   colour the map: auto (default), always, never\n"
		"      --svg=FILE       write the map as an SVG image ('-': stdout)\n"
		"  -l, --list           list the processes that use ucma, with their figures\n"
		"      --prune          remove files left by processes that ended\n"
		"  -t, --timeout=SECS   wait up to SECS for the process to answer (default 2)\n"
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
		{ "timeout", required_argument, NULL, 't' },
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
	while ((opt = getopt_long(argc, argv, "w:n:amlt:hV", longopts, NULL)) != -1) {
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
		case 't':
			errno = 0;
			answer_timeout = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(answer_timeout >= 0) ||
			    answer_timeout > 3600)
				usage_error("invalid timeout '%s' (seconds, 0 to 3600)", optarg);
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
	catch_stop_signals();
	if (list || prune) {
		if (optind != argc || watch || map || svg)
			usage_error("--list and --prune take no process id or other mode");
		return prune ? cmd_prune() : cmd_list();
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
