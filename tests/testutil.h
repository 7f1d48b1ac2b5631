/*
 * testutil.h - helpers shared by ucma's tests: hugepage pool reservation
 * (serialised across parallel tests by a lock file and restored at exit),
 * data stamps with checksums, and timing.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_TESTUTIL_H
#define UCMA_TESTUTIL_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TU_HUGEPAGES_LOCK "/tmp/ucma-test-hugepages.lock"

static char tu_hp_path[128];
static long tu_hp_added = -1;	/* pages this process added to the pool; -1: none */
static int tu_hp_lockfd = -1;
static pid_t tu_hp_pid;		/* the process that added them (not its children) */

static inline long tu_read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static inline int tu_write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	int rc;

	if (!f)
		return -1;
	rc = fprintf(f, "%ld\n", v) < 0 ? -1 : 0;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

/* Take back what this process added, whatever others did meanwhile. */
static void tu_hugepages_restore(void)
{
	long now = tu_hp_added > 0 ? tu_read_long(tu_hp_path) : -1;

	if (now >= 0)
		tu_write_long(tu_hp_path, now > tu_hp_added ? now - tu_hp_added : 0);
	tu_hp_added = -1;
	if (tu_hp_lockfd >= 0)
		close(tu_hp_lockfd);	/* drops the flock */
	tu_hp_lockfd = -1;
}

/*
 * The same as tu_hugepages_restore() from a signal handler: open, read and
 * write only.  A benchmark piped into head(1) dies of SIGPIPE, and one
 * stopped by ^C of SIGINT, without running atexit(); the pool kept its
 * pages, and every hugetlb test skipped afterwards because it found free
 * pages it had not made.  A forked child inherits the handler but never
 * added the pages: it leaves them.
 */
static void tu_hugepages_on_signal(int sig)
{
	int saved = errno;

	if (tu_hp_added > 0 && getpid() == tu_hp_pid) {
		char buf[32];
		int fd = open(tu_hp_path, O_RDONLY);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		long now = 0;

		if (fd >= 0)
			close(fd);
		for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
			now = now * 10 + (buf[i] - '0');
		if (n > 0) {
			char out[24];
			size_t len = 0;

			now = now > tu_hp_added ? now - tu_hp_added : 0;
			do {
				out[sizeof(out) - 1 - len++] = (char)('0' + now % 10);
				now /= 10;
			} while (now);
			fd = open(tu_hp_path, O_WRONLY);
			if (fd >= 0) {
				if (write(fd, out + sizeof(out) - len, len) < 0)
					(void)0;	/* nothing more to do in a dying process */
				close(fd);
			}
		}
		tu_hp_added = -1;
	}
	errno = saved;
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Restore the pool on the signals that end a process without atexit(),
 * where the process has not chosen a handler of its own. */
static inline void tu_hugepages_catch_signals(void)
{
	static const int sigs[] = { SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGTERM, SIGABRT };

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old, sa = { .sa_handler = tu_hugepages_on_signal };

		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
			sigaction(sigs[i], &sa, NULL);
	}
}

/*
 * tu_hugepages_reserve() - make @count free hugetlb pages of @kb KiB
 * available to this test, as root.  Holds an exclusive lock file for the
 * life of the process so parallel tests do not race on the pool.  The
 * pages are added to the pool whatever it holds already (free pages there
 * may belong to another program that is about to use them), and exactly
 * those are taken back at exit, so concurrent users of the pool keep
 * theirs.  Returns 0, or -1 with a reason (not root, kernel refused, not
 * enough memory) in @why.
 */
static inline int tu_hugepages_reserve(long kb, long count, char *why, size_t whylen)
{
	long total, freep;
	char freepath[128];

	if (geteuid() != 0) {
		snprintf(why, whylen, "reserving hugepages needs root");
		return -1;
	}
	snprintf(tu_hp_path, sizeof(tu_hp_path),
		 "/sys/kernel/mm/hugepages/hugepages-%ldkB/nr_hugepages", kb);
	snprintf(freepath, sizeof(freepath),
		 "/sys/kernel/mm/hugepages/hugepages-%ldkB/free_hugepages", kb);
	if (access(tu_hp_path, W_OK) != 0) {
		snprintf(why, whylen, "no %ld KiB hugepage pool on this kernel", kb);
		return -1;
	}
	tu_hp_lockfd = open(TU_HUGEPAGES_LOCK, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	if (tu_hp_lockfd < 0 || flock(tu_hp_lockfd, LOCK_EX) != 0) {
		snprintf(why, whylen, "cannot lock %s: %s", TU_HUGEPAGES_LOCK, strerror(errno));
		return -1;
	}
	total = tu_read_long(tu_hp_path);
	freep = tu_read_long(freepath);
	if (total < 0 || freep < 0) {
		snprintf(why, whylen, "cannot read the hugepage pool");
		tu_hugepages_restore();
		return -1;
	}
	if (tu_write_long(tu_hp_path, total + count) != 0) {
		snprintf(why, whylen, "cannot grow the %ld KiB hugepage pool", kb);
		tu_hugepages_restore();
		return -1;
	}
	tu_hp_added = tu_read_long(tu_hp_path) - total;
	tu_hp_pid = getpid();
	atexit(tu_hugepages_restore);
	tu_hugepages_catch_signals();
	if (tu_hp_added < count || tu_read_long(freepath) < count) {
		snprintf(why, whylen, "the kernel gave fewer than %ld free %ld KiB hugepages",
			 count, kb);
		tu_hugepages_restore();
		return -1;
	}
	return 0;
}

/* Unset every UCMA_* option variable, so the harness's environment does
 * not change a test's cases (the UCMA_TEST_* ones stay). */
static inline void tu_clear_env(void)
{
	extern char **environ;
	char name[256];

	for (;;) {
		char **e;

		for (e = environ; *e; e++)
			if (strncmp(*e, "UCMA_", 5) == 0 && strncmp(*e, "UCMA_TEST_", 10) != 0)
				break;
		if (!*e)
			return;
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
		unsetenv(name);
	}
}

/*
 * Results a child leaves for its parent: @len zeroed bytes shared with
 * the children forked later.  Exits the test (status 99, as the harness's
 * hard error) when they cannot be mapped.
 */
static inline void *tu_shared_results(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		printf("Bail out! mmap of %zu shared bytes: %s\n", len, strerror(errno));
		exit(99);
	}
	return p;
}

/*
 * fork() for a child that does its part and leaves: stdout is flushed
 * first (the child would print the parent's buffered lines again).
 * Returns 0 in the child, the child's pid in the parent; exits the test
 * when there is no child.
 */
static inline pid_t tu_fork(void)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		printf("Bail out! fork: %s\n", strerror(errno));
		exit(99);
	}
	return pid;
}

/* For ucma_os.thread_create (test builds): a thread creation that
 * fails as one would with no memory or thread left. */
static inline int tu_thread_create_fails(pthread_t *t, const pthread_attr_t *attr,
					 void *(*fn)(void *), void *arg)
{
	(void)t;
	(void)attr;
	(void)fn;
	(void)arg;
	return EAGAIN;
}

/* The wait status of child @pid. */
static inline int tu_wait(pid_t pid)
{
	int st = -1;

	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return st;
}

/*
 * Run @fn in a child with its standard error captured into @err (@errlen
 * bytes, NUL-terminated).  True when the child died of SIGABRT after
 * writing exactly one line that contains @want and, as %p prints it, the
 * address the child left in *@victim (shared memory: tu_shared_results())
 * before the bad call.
 */
static inline bool tu_dies_with(void (*fn)(void), void **victim, const char *want, char *err,
				size_t errlen)
{
	int fds[2], status = 0;
	char addr[32];
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	*victim = NULL;
	if (pipe(fds) != 0) {
		printf("Bail out! pipe: %s\n", strerror(errno));
		exit(99);
	}
	pid = tu_fork();
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], STDERR_FILENO);
		fn();
		_exit(0);	/* not reached when the case aborts */
	}
	close(fds[1]);
	while (n < errlen - 1 && (r = read(fds[0], err + n, errlen - 1 - n)) > 0)
		n += (size_t)r;
	err[n] = '\0';
	close(fds[0]);
	status = tu_wait(pid);
	snprintf(addr, sizeof(addr), "%p", *victim);
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(err, want) &&
	       strstr(err, addr) && n > 0 && strchr(err, '\n') == err + n - 1;
}

/* A 64-bit FNV-1a checksum; good enough to detect any corrupted byte. */
static inline uint64_t tu_checksum(const void *p, size_t n)
{
	const unsigned char *c = p;
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* Fill @n bytes with a pattern derived from @seed. */
static inline void tu_fill(void *p, size_t n, uint64_t seed)
{
	unsigned char *c = p;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		c[i] = (unsigned char)x;
	}
}

/* Does the buffer hold exactly the pattern of tu_fill(seed)? */
static inline int tu_check(const void *p, size_t n, uint64_t seed)
{
	const unsigned char *c = p;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (c[i] != (unsigned char)x)
			return 0;
	}
	return 1;
}

/* This process's resident memory in KiB (/proc/self/statm), or -1. */
static inline long tu_rss_kb(void)
{
	long size, resident;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static inline uint64_t tu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Loops of forks: go on with round @round of a loop started at @t0_ns?
 * The first @min rounds always; then until the loop has taken
 * TU_FORK_LOOP_SECONDS.  On a virtual machine whose page faults are slow,
 * races' 400 forks of part 6 took 36 s in the normal build, and the
 * sanitizer builds spent 112-197 s in hangs and 154-180 s in races, most
 * of it in such loops: the CI run's time limit counts them all.
 */
#define TU_FORK_LOOP_SECONDS 20

static inline bool tu_fork_loop_on(int round, int min, uint64_t t0_ns)
{
	return round < min || tu_now_ns() - t0_ns < (uint64_t)TU_FORK_LOOP_SECONDS * 1000000000ull;
}

/* Is part @name of a benchmark asked for in UCMA_BENCH_PART (names
 * separated by commas; unset or empty: every part)?  One part alone is
 * what a profiler wants to look at. */
static inline bool tu_bench_part(const char *name)
{
	const char *parts = getenv("UCMA_BENCH_PART");
	size_t n = strlen(name);

	if (!parts || !*parts)
		return true;
	for (const char *p = parts; (p = strstr(p, name)) != NULL; p += n)
		if ((p == parts || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
			return true;
	return false;
}

/*
 * tu_profile(true) before the code a benchmark times, tu_profile(false)
 * after: with UCMA_BENCH_PERF_CTL naming the control FIFO of a
 * "perf record -D -1 --control fifo:PATH" that runs the benchmark, only
 * that code is sampled (a setup of seconds around a measurement of
 * milliseconds otherwise fills the profile).  No-op without the variable.
 */
static inline void tu_profile(bool on)
{
	const char *path = getenv("UCMA_BENCH_PERF_CTL");
	const char *cmd = on ? "enable\n" : "disable\n";
	int fd;

	if (!path || !*path)
		return;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "UCMA_BENCH_PERF_CTL: %s: %s\n", path, strerror(errno));
		return;
	}
	if (write(fd, cmd, strlen(cmd)) < 0)
		fprintf(stderr, "UCMA_BENCH_PERF_CTL: %s: %s\n", path, strerror(errno));
	close(fd);
}

/* xorshift64* for reproducible test randomness */
static inline uint64_t tu_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 2685821657736338717ull;
}

/*
 * The line of /proc/self/maps of the mapping holding @addr, without its
 * newline, in @out (@len bytes, "" when none); false when no mapping
 * holds it or the file cannot be read.
 */
static inline bool tu_maps_line(const void *addr, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	bool found = false;

	if (len)
		out[0] = '\0';
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo &&
		    (uintptr_t)addr < hi) {
			if (len)
				snprintf(out, len, "%.*s", (int)strcspn(line, "\n"), line);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/*
 * How many mappings of /proc/self/maps overlap [lo, hi) and, with
 * @needle, have it in their line; those wholly inside [skip_lo, skip_hi)
 * are not counted.  -1 when the file cannot be read.
 */
static inline int tu_maps_count(uintptr_t lo, uintptr_t hi, const char *needle, uintptr_t skip_lo,
				uintptr_t skip_hi)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long l, h;

		if (sscanf(line, "%lx-%lx", &l, &h) != 2 || l >= hi || h <= lo ||
		    (l >= skip_lo && h <= skip_hi))
			continue;
		n += !needle || strstr(line, needle) != NULL;
	}
	fclose(f);
	return n;
}

/* Is @addr mapped from a file of the library (a CMA frame: its memfds are
 * named "ucma:...")? */
static inline int tu_on_frame(const void *addr)
{
	char line[512];

	return tu_maps_line(addr, line, sizeof(line)) && strstr(line, "ucma:") != NULL;
}

/*
 * Can this process write-protect shmem with a userfaultfd (heap lending)?
 * Asked with @open_uffd, the test's saved copy of the library's
 * userfaultfd entry, not through the library, which remembers its answer.
 */
static inline bool tu_uffd_wp_available(int (*open_uffd)(int flags))
{
	struct uffdio_api api = {
		.api = UFFD_API,
		.features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM | (1 << 13),	/* WP_UNPOPULATED */
	};
	int fd = open_uffd(O_CLOEXEC | O_NONBLOCK);
	bool good;

	if (fd < 0)
		return false;
	good = ioctl(fd, UFFDIO_API, &api) == 0;
	close(fd);
	return good;
}

#endif /* UCMA_TESTUTIL_H */
