/*
 * preload_check.c - the C allocation interface under libucma-preload.so.
 *
 * Run by preload_api.sh, preload_contig.sh and others with LD_PRELOAD set;
 * linked with -lucma too, so it also checks that the preloaded library and the
 * linked one are the same arena: what malloc() returns is something
 * ucma_owns() recognises.  Checks glibc's documented behaviour of every
 * interposed function (error codes, alignment, realloc(p, 0)), pointers
 * that glibc's own allocator made (freed, resized and measured through the
 * interposer), threads and fork.
 *
 * With the argument "contig" (and UCMA_PRELOAD_CONTIG_MIN=1M, or its
 * UCMA_CONF key, in the environment) it checks instead that large
 * requests become contiguous buffers of a CMA area and that
 * free/realloc/malloc_usable_size handle them; with "contig_small" (and
 * UCMA_PRELOAD_CONTIG_MIN=8K) that a threshold below the largest size
 * class splits the small sizes.  With "contig_dontfork"
 * (and UCMA_CMA_DONTFORK=1 as well) that they stay in the malloc family,
 * so that a child of fork() still has them.  With "fork_helpers" it checks
 * forks made while another thread's migration starts the copy helpers
 * (check_fork_helpers()).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"
#include "ucma.h"

/* glibc's own allocator, to make foreign pointers. */
extern void *__libc_malloc(size_t size);

#define MiB ((size_t)1 << 20)

/* Sizes the compiler must not reason about (no -Walloc-size-larger-than). */
static volatile size_t huge_size = SIZE_MAX;
static volatile size_t half_huge = SIZE_MAX / 2 + 2;
/* Alignments that are no powers of two, out of the compiler's sight too
 * (clang refuses them at compile time otherwise). */
static volatile size_t align_3 = 3, align_0 = 0, align_48 = 48;

static int aligned_to(const void *p, size_t a)
{
	return p && ((uintptr_t)p & (a - 1)) == 0;
}

static void check_interposed(void)
{
	Dl_info info;
	const char *pre = getenv("LD_PRELOAD");

	if (!pre || !strstr(pre, "libucma-preload.so"))
		bail_out("run this under LD_PRELOAD=libucma-preload.so");
	if (!dladdr((void *)(uintptr_t)malloc, &info) || !info.dli_fname)
		info.dli_fname = "?";
	ok(strstr(info.dli_fname, "libucma-preload.so") != NULL,
	   "malloc resolves to libucma-preload.so (%s)", info.dli_fname);
}

static void check_basic(void)
{
	char *p, *q, *s;
	size_t i, n;
	int zero = 1;

	p = malloc(100);
	ok(p && ucma_owns(p), "malloc(100) comes from ucma's arena (one arena for -lucma "
	   "and the preload)");
	memset(p, 0xab, 100);
	ok(malloc_usable_size(p) >= 100, "malloc_usable_size %zu >= 100", malloc_usable_size(p));
	q = realloc(p, 10000);
	ok(q && ucma_owns(q), "realloc grows within ucma");
	for (i = 0; q && i < 100; i++)
		if ((unsigned char)q[i] != 0xab)
			break;
	ok(i == 100, "realloc keeps the contents");
	errno = 0;
	ok(realloc(q, 0) == NULL, "realloc(p, 0) frees and returns NULL, as glibc does");
	p = realloc(NULL, 10);
	ok(p && ucma_owns(p), "realloc(NULL, 10) allocates");
	free(p);
	free(NULL);
	ok(1, "free(NULL) is harmless");

	s = strdup("a string copied by libc");
	ok(s && ucma_owns(s), "libc's internal allocations (strdup) come from ucma");
	free(s);

	p = calloc(1000, 8);
	for (i = 0; p && i < 8000; i++)
		zero &= p[i] == 0;
	ok(p && ucma_owns(p) && zero, "calloc(1000, 8) is zeroed and from ucma");
	free(p);

	errno = 0;
	ok(calloc(huge_size, 2) == NULL && errno == ENOMEM, "calloc overflow: NULL, ENOMEM");
	errno = 0;
	ok(malloc(huge_size) == NULL && errno == ENOMEM, "malloc(SIZE_MAX): NULL, ENOMEM");
	errno = 0;
	ok(reallocarray(NULL, huge_size, 2) == NULL && errno == ENOMEM,
	   "reallocarray overflow: NULL, ENOMEM");
	p = reallocarray(NULL, 10, 10);
	ok(p && malloc_usable_size(p) >= 100, "reallocarray(NULL, 10, 10)");
	free(p);

	errno = 4321;
	free(malloc(64));
	n = (size_t)errno;
	ok(n == 4321, "free leaves errno alone");

	p = malloc(0);
	ok(p != NULL, "malloc(0) returns a unique pointer");
	free(p);
}

static void check_aligned(void)
{
	void *p = (void *)&p, *q;
	static const size_t bad[] = { 0, 1, 2, 4, 3, 24, 48, 100 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		q = p;
		ok(posix_memalign(&q, bad[i], 16) == EINVAL && q == p,
		   "posix_memalign alignment %zu: EINVAL, *memptr untouched", bad[i]);
	}
	for (size_t a = sizeof(void *); a <= 2 * MiB; a <<= 3) {
		q = NULL;
		ok(posix_memalign(&q, a, 100) == 0 && aligned_to(q, a) && ucma_owns(q),
		   "posix_memalign alignment %zu", a);
		free(q);
	}
	q = NULL;
	ok(posix_memalign(&q, 64, huge_size) == ENOMEM, "posix_memalign too large: ENOMEM");

	errno = 0;
	ok(aligned_alloc(align_3, 16) == NULL && errno == EINVAL,
	   "aligned_alloc(3, ...): NULL, EINVAL (C23, glibc 2.38)");
	errno = 0;
	ok(aligned_alloc(align_0, 16) == NULL && errno == EINVAL, "aligned_alloc(0, ...): EINVAL");
	q = aligned_alloc(256, 1000);
	ok(aligned_to(q, 256) && ucma_owns(q), "aligned_alloc(256, 1000)");
	free(q);
	q = aligned_alloc(4096, 10);	/* size not a multiple: glibc allows it */
	ok(aligned_to(q, 4096), "aligned_alloc(4096, 10)");
	free(q);

	q = memalign(64, 10);
	ok(aligned_to(q, 64) && ucma_owns(q), "memalign(64, 10)");
	free(q);
	q = memalign(align_48, 10);
	ok(aligned_to(q, 64), "memalign(48, ...) rounds the alignment up to 64, as glibc");
	free(q);
	errno = 0;
	ok(memalign(half_huge, 1) == NULL && errno == EINVAL,
	   "memalign with an alignment beyond SIZE_MAX/2+1: EINVAL");

	q = valloc(100);
	ok(aligned_to(q, (size_t)sysconf(_SC_PAGESIZE)), "valloc is page aligned");
	free(q);
	q = pvalloc(100);
	ok(aligned_to(q, (size_t)sysconf(_SC_PAGESIZE)) &&
	   malloc_usable_size(q) >= (size_t)sysconf(_SC_PAGESIZE),
	   "pvalloc(100) is a whole page (usable %zu)", malloc_usable_size(q));
	free(q);
	errno = 0;
	ok(pvalloc(huge_size) == NULL && errno == ENOMEM, "pvalloc(SIZE_MAX): ENOMEM");
}

static void check_glibc_extras(void)
{
	struct mallinfo2 mi;
	char *big;
	char buf[4096];
	FILE *tmp;
	int fd, saved;
	size_t n;

	ok(mallopt(M_TRIM_THRESHOLD, 1 << 20) == 1, "mallopt(M_TRIM_THRESHOLD) accepted");
	ok(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1, "mallopt(M_MMAP_THRESHOLD) accepted");
	ok(mallopt(M_MXFAST, 100000) == 0, "mallopt(M_MXFAST, too big) refused, as glibc");
	ok(mallopt(12345, 1) == 1, "mallopt(unknown) returns 1, as glibc");
	n = (size_t)malloc_trim(0);
	ok(n == 0 || n == 1, "malloc_trim returns 0 or 1");

	big = malloc(4 * MiB);
	if (big)
		memset(big, 1, 4 * MiB);
	mi = mallinfo2();
	/*
	 * With the preload active, mallinfo2 is ucma's and must count the
	 * block: all zeros would mean glibc's mallinfo2 answered for a heap
	 * it does not have.  Only a block ucma does not own proves the
	 * preload inactive, and only then is there nothing to check.
	 */
	if (big && ucma_owns(big))
		ok(mi.uordblks >= 4 * MiB && mi.arena + mi.hblkhd >= 4 * MiB,
		   "mallinfo2 counts a live 4 MiB block (uordblks %zu, arena %zu, hblkhd %zu)",
		   mi.uordblks, mi.arena, mi.hblkhd);
	else
		skip(1, "malloc(4 MiB) did not come from ucma: the preload library is not active");
	free(big);

	/* malloc_stats() prints ucma's report on stderr */
	tmp = tmpfile();
	fflush(stderr);
	saved = dup(2);
	fd = tmp ? fileno(tmp) : -1;
	if (fd >= 0 && saved >= 0 && dup2(fd, 2) == 2) {
		malloc_stats();
		fflush(stderr);
		dup2(saved, 2);
		rewind(tmp);
		n = fread(buf, 1, sizeof(buf) - 1, tmp);
		buf[n] = '\0';
		ok(n > 0 && strstr(buf, "cma_alloc_success"),
		   "malloc_stats prints ucma's report (%zu bytes)", n);
	} else {
		ok(0, "redirect stderr for malloc_stats");
	}
	if (saved >= 0)
		close(saved);
	if (tmp)
		fclose(tmp);
}

/* Pointers made by glibc's allocator go back to glibc. */
static void check_foreign(void)
{
	char *f, *r;
	size_t i;

	f = __libc_malloc(100);
	ok(f && !ucma_owns(f), "__libc_malloc makes a pointer ucma does not own");
	ok(malloc_usable_size(f) >= 100, "malloc_usable_size of a foreign pointer: %zu",
	   malloc_usable_size(f));
	for (i = 0; i < 100; i++)
		f[i] = (char)i;
	r = realloc(f, 5000);
	for (i = 0; r && i < 100; i++)
		if (r[i] != (char)i)
			break;
	ok(r && ucma_owns(r) && i == 100,
	   "realloc of a foreign pointer moves it into ucma with its contents");
	free(r);
	f = __libc_malloc(50);
	free(f);
	ok(1, "free of a foreign pointer goes to glibc");
	f = __libc_malloc(200000);	/* an mmapped glibc chunk */
	memset(f, 7, 200000);
	r = realloc(f, 100);
	ok(r && ucma_owns(r) && r[99] == 7, "realloc shrinking a foreign mmapped block");
	free(r);
}

/* Many sizes, stamped, freed in a scrambled order. */
static void check_pattern(void)
{
	enum { N = 2000 };
	static char *p[N];
	static size_t sz[N];
	uint64_t seed = 42;
	int bad = 0, owned = 1;

	for (int i = 0; i < N; i++) {
		sz[i] = (size_t)(tu_rand(&seed) % (i % 50 == 0 ? 300000 : 2000)) + 1;
		p[i] = malloc(sz[i]);
		if (!p[i]) {
			bad++;
			continue;
		}
		owned &= ucma_owns(p[i]);
		tu_fill(p[i], sz[i], (uint64_t)i);
	}
	for (int k = 0; k < N; k++) {
		int i = (int)((uint64_t)k * 7919 % N);

		if (p[i] && !tu_check(p[i], sz[i], (uint64_t)i))
			bad++;
		free(p[i]);
	}
	ok(!bad && owned, "2000 stamped blocks of mixed sizes survive and free");
}

static void *thread_main(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;
	void *keep[64] = { 0 };
	size_t ksz[64] = { 0 };
	long bad = 0;

	for (int it = 0; it < 20000; it++) {
		int k = (int)(tu_rand(&seed) % 64);

		if (keep[k]) {
			if (!tu_check(keep[k], ksz[k], (uint64_t)k + ksz[k]))
				bad++;
			free(keep[k]);
		}
		ksz[k] = (size_t)(tu_rand(&seed) % 4096) + 1;
		keep[k] = malloc(ksz[k]);
		if (!keep[k] || !ucma_owns(keep[k])) {
			bad++;
			continue;
		}
		tu_fill(keep[k], ksz[k], (uint64_t)k + ksz[k]);
	}
	for (int k = 0; k < 64; k++)
		free(keep[k]);
	return (void *)bad;
}

static void check_threads_and_fork(void)
{
	pthread_t t[4];
	long bad = 0;
	pid_t pid;
	int status = -1;

	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, thread_main, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < 4; i++) {
		void *r;

		pthread_join(t[i], &r);
		bad += (long)r;
	}
	ok(bad == 0, "4 threads x 20000 stamped allocations");

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		char *c = malloc(1000);

		tu_fill(c, 1000, 9);
		_exit(c && ucma_owns(c) && tu_check(c, 1000, 9) ? 0 : 1);
	}
	waitpid(pid, &status, 0);
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "a forked child allocates from ucma");
}

static void expect_ucma_abort(const char *what, void (*fn)(void), const char *needle);
static void free_contig(void);
static void realloc_inside_malloc_contig(void);
static void ucma_free_malloc_contig(void);

/* The size of the contiguous block of malloc() at @p, else 0: a block
 * of the preloaded malloc() that is not of ucma's malloc family
 * (ucma_owns() is false for contiguous buffers), starting on a page.
 * ucma_alloc_size() is for the program's own ucma_alloc() buffers. */
static size_t contig_of_malloc(void *p)
{
	return p && !ucma_owns(p) && !((uintptr_t)p & 4095) ? malloc_usable_size(p) : 0;
}

/* A contiguous block of malloc() is free()'s alone: ucma_release() and
 * ucma_alloc_size() refuse it.  ucma_release() used to free it under its
 * owner, whose free() then freed the next owner of the address. */
static void contig_not_released(void)
{
	char *p = malloc(2 * MiB), *q;
	size_t n;
	int rc, err;

	if (p)
		tu_fill(p, 2 * MiB, 9);
	errno = 0;
	rc = p ? ucma_release(p) : 0;
	err = errno;
	ok(p && rc == -1 && err == EINVAL, "ucma_release() of a contiguous block of malloc: "
	   "EINVAL (rc %d, %s)", rc, strerror(err));
	errno = 0;
	n = p ? ucma_alloc_size(p) : 1;
	ok(n == 0 && errno == EINVAL, "ucma_alloc_size() of it: 0, EINVAL (%zu)", n);
	q = malloc(2 * MiB);
	ok(p && q && q != p && contig_of_malloc(p) >= 2 * MiB && tu_check(p, 2 * MiB, 9),
	   "the block stays its owner's: the next malloc() gets another address, data intact");
	free(q);
	free(p);
	expect_ucma_abort("realloc() inside a contiguous block of malloc",
			  realloc_inside_malloc_contig, "inside a contiguous block of malloc");
	expect_ucma_abort("ucma_free() of a contiguous block of malloc",
			  ucma_free_malloc_contig, "preloaded malloc: free() takes it back");
}

/* Does the mapping holding @p name a file (a memfd, hugetlbfs, or
 * anon_hugepage for private hugetlb pages) in /proc/self/maps? */
static bool mapped_from_file(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	bool named = false;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		int path = 0;

		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path) < 2 ||
		    (uintptr_t)p < lo || (uintptr_t)p >= hi)
			continue;
		named = path > 0 && line[path] != '\n' && line[path] != '\0';
		break;
	}
	if (f)
		fclose(f);
	return named;
}

static void check_contig(void)
{
	const char *min = getenv("UCMA_PRELOAD_CONTIG_MIN"), *conf = getenv("UCMA_CONF");
	uint64_t succ0 = 0, succ1 = 0, rel0 = 0, rel1 = 0;
	char *p, *q, *z;
	size_t i, n;
	int zero = 1;

	if ((!min || strcmp(min, "1M") != 0) && (!conf || !strcasestr(conf, "preload_contig_min=1M")))
		bail_out("run this with UCMA_PRELOAD_CONTIG_MIN=1M or UCMA_CONF=preload_contig_min=1M");
	ucma_stat("cma_alloc_success", &succ0);
	ucma_stat("cma_release", &rel0);

	p = malloc(2 * MiB);
	n = p ? contig_of_malloc(p) : 0;
	ok(n >= 2 * MiB, "malloc(2 MiB) is a contiguous CMA buffer (%zu bytes)", n);
	ok(p && ucma_usable_size(p) == 0, "... not a block of the malloc family");
	ok(malloc_usable_size(p) == n && n == (n & ~(size_t)4095),
	   "malloc_usable_size of it is its size, in whole pages");
	tu_fill(p, 2 * MiB, 1);
	q = realloc(p, 3 * MiB);
	ok(q && contig_of_malloc(q) >= 3 * MiB && tu_check(q, 2 * MiB, 1),
	   "realloc grows it to a contiguous 3 MiB with its contents");
	p = realloc(q, 2 * MiB);
	ok(p == q, "realloc shrinking by a third keeps it in place");
	q = realloc(p, 1000);
	ok(q && ucma_owns(q) && tu_check(q, 1000, 1),
	   "realloc to 1000 bytes moves it back to the malloc family");
	free(q);

	p = malloc(MiB);
	ok(p && contig_of_malloc(p) >= MiB, "malloc of exactly the threshold is contiguous");
	free(p);
	p = malloc(MiB - 1);
	ok(p && ucma_owns(p) && contig_of_malloc(p) == 0, "malloc below the threshold is not");
	q = realloc(p, 3 * MiB);
	ok(q && contig_of_malloc(q) >= 3 * MiB, "realloc growing past the threshold becomes "
	   "contiguous");
	free(q);
	p = malloc(100);
	ok(p && ucma_owns(p), "small malloc stays in the malloc family");
	free(p);

	z = calloc(4, MiB);
	for (i = 0; z && i < 4 * MiB; i += 511)
		zero &= z[i] == 0;
	ok(z && contig_of_malloc(z) >= 4 * MiB && zero, "calloc(4, 1 MiB) is contiguous and zero");
	free(z);

	/* malloc_trim(0) gives back the pages of freed contiguous blocks (the
	 * decay is off: UCMA_DECAY_MS=0 in preload_contig.sh), which stayed
	 * resident before. */
	{
		long before, after;
		bool on_file;
		int r;

		p = malloc(32 * MiB);
		ok(p && contig_of_malloc(p) >= 32 * MiB, "malloc(32 MiB) is contiguous");
		if (p)
			memset(p, 1, 32 * MiB);
		on_file = p && mapped_from_file(p);
		free(p);
		before = tu_rss_kb();
		r = malloc_trim(0);
		after = tu_rss_kb();
		if (on_file)	/* hugetlb pages, or frames of a file: kept (ucma(7)) */
			skip(1, "the CMA area is on a file or hugetlb pages, whose memory is kept");
		else
			ok(r == 1 && before > 0 && before - after >= 24 * 1024,
			   "malloc_trim(0) gives back a freed 32 MiB contiguous block's pages: "
			   "%ld -> %ld KiB resident, returned %d", before, after, r);
	}

	/* more than any CMA area holds: served by the malloc family instead */
	p = malloc(2048 * MiB);
	ok(p && ucma_owns(p), "a request no CMA area can hold falls back to malloc");
	free(p);

	/* Once malloc() made contiguous buffers, free() still tells the
	 * program's own ucma_alloc() buffers from them: it used to release
	 * any, and report them before the first. */
	expect_ucma_abort("free() of the program's ucma_alloc() buffer, in contiguous mode",
			  free_contig, "ucma_alloc() buffer");
	p = ucma_alloc(MiB, 0, 0);
	ok(p && malloc_usable_size(p) == 0 && ucma_release(p) == 0,
	   "malloc_usable_size does not take the program's own buffer for malloc's");

	contig_not_released();
	ucma_stat("cma_alloc_success", &succ1);
	ucma_stat("cma_release", &rel1);
	ok(succ1 - succ0 >= 5 && rel1 - rel0 >= 5,
	   "statistics: %llu contiguous allocations, %llu releases",
	   (unsigned long long)(succ1 - succ0), (unsigned long long)(rel1 - rel0));
}

/*
 * Run @fn in a child whose standard error is read back: true when it died
 * of SIGABRT after a message of ucma's that holds @needle (a crash inside
 * glibc, a glibc message or no message at all fails).  @what names the
 * case in the test line.
 */
static void expect_ucma_abort(const char *what, void (*fn)(void), const char *needle)
{
	int pipefd[2], status = -1;
	char msg[512];
	ssize_t n = 0;
	pid_t pid;

	if (pipe(pipefd) != 0) {
		ok(0, "pipe for the child of: %s", what);
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 2);
		fn();
		_exit(0);
	}
	close(pipefd[1]);
	while (n < (ssize_t)sizeof(msg) - 1) {
		ssize_t r = read(pipefd[0], msg + n, sizeof(msg) - 1 - (size_t)n);

		if (r <= 0)
			break;
		n += r;
	}
	msg[n > 0 ? n : 0] = '\0';
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(msg, "ucma:") &&
	   strstr(msg, needle),
	   "%s: ucma's message and abort (%s)", what,
	   n > 0 ? strtok(msg, "\n") :
	   WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "no message");
}

static void double_free(void)
{
	char *volatile p = malloc(100);

	free(p);
	free(p);
}

/* The memory of a pinned movable object: ucma_owns() says no, and glibc
 * crashed on it when free() and realloc() handed it over. */
static void *pinned_object(void)
{
	ucma_handle_t h = ucma_halloc(64, 0);
	void *p = h ? ucma_pin(h, 0) : NULL;

	if (!p)
		_exit(3);
	memset(p, 0x22, 64);
	return p;
}

static void free_movable(void)
{
	free(pinned_object());
}

static void realloc_movable(void)
{
	void *volatile q = realloc(pinned_object(), 200);

	(void)q;
}

/* The program's own ucma_alloc() buffer is ucma_release()'s, not free()'s. */
static void free_contig(void)
{
	void *volatile b = ucma_alloc(8192, 0, 0);

	if (!b)
		_exit(3);
	free(b);
}

/* ucma_free() of the start of a contiguous block that malloc() made:
 * free()'s to take, and said so (not "inside" it). */
static void ucma_free_malloc_contig(void)
{
	char *b = malloc(2 * MiB);

	if (!b || !contig_of_malloc(b))
		_exit(3);
	ucma_free(b);
}

/* A page into a contiguous block that malloc() made. */
static void realloc_inside_malloc_contig(void)
{
	char *b = malloc(2 * MiB);
	void *volatile q;

	if (!b || !contig_of_malloc(b))
		_exit(3);
	q = realloc(b + 4096, 100);
	(void)q;
}

/* Inside a ucma_alloc() buffer, behind 16 bytes that look like the header
 * of one of glibc's mmapped chunks (prev_size 0, size 0x4002): glibc
 * unmapped 16 KiB of the live buffer when free() handed it over. */
static void free_inside_contig(void)
{
	char *b = ucma_alloc(32768, 0, 0);
	char *volatile inside;

	if (!b)
		_exit(3);
	memset(b, 0x33, 32768);
	((uint64_t *)(void *)b)[0] = 0;
	((uint64_t *)(void *)b)[1] = 0x4002;
	inside = b + 16;
	free(inside);
}

/* Every address of ucma's that is no malloc block stops the program with
 * ucma's message naming what lies there, never glibc's checks. */
static void check_not_blocks(void)
{
	expect_ucma_abort("double free of an arena block", double_free, "double free");
	expect_ucma_abort("free() of a pinned movable object", free_movable, "movable object");
	expect_ucma_abort("realloc() of a pinned movable object", realloc_movable,
			  "movable object");
	expect_ucma_abort("free() of the program's ucma_alloc() buffer", free_contig,
			  "ucma_alloc() buffer");
	expect_ucma_abort("free() inside a ucma_alloc() buffer", free_inside_contig,
			  "ucma_alloc() buffer");
	{
		ucma_handle_t h = ucma_halloc(64, 0);
		void *p = h ? ucma_pin(h, 0) : NULL;

		errno = 0;
		ok(p && malloc_usable_size(p) == 0,
		   "malloc_usable_size of a movable object's memory is 0");
		if (p) {
			ucma_unpin(h);
			ucma_hfree(h);
		}
	}
}

/*
 * With "stats_fd FILE": a program that closes every descriptor of its
 * own from 3 on (the library's copy of standard error too), then puts a
 * file of its own at the number that copy had (256, or half the
 * descriptor limit), closes standard error and exits: with UCMA_STATS=1
 * the report must not land in that file.  No TAP; the script reads the
 * file.
 */
static int stats_fd_case(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	void *p = malloc(100);	/* the library runs */

	if (fd < 0 || !p)
		return 2;
	for (int k = 3; k < 1024; k++)
		if (k != fd && !ucma_owns_fd(k))
			close(k);
	if (dup2(fd, 256) != 256 || write(256, "program data\n", 13) != 13)
		return 2;
	free(p);
	close(2);
	return 0;
}

/* UCMA_CMA_DONTFORK=1 gives a child empty CMA areas: malloc() must not
 * put the program's memory there, or the child reads zeros. */
static void check_contig_dontfork(void)
{
	char *p = malloc(2 * MiB);
	int status = -1;
	pid_t pid;

	ok(p && contig_of_malloc(p) == 0 && ucma_owns(p),
	   "with UCMA_CMA_DONTFORK=1, malloc(2 MiB) stays in the malloc family");
	if (!p)
		return;
	tu_fill(p, 2 * MiB, 5);
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(tu_check(p, 2 * MiB, 5) ? 0 : 1);
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "a child of fork() has its contents (status 0x%x)", status);
	free(p);
}

/* The next descriptor of the walk of /proc/self/fd at @d, its link's
 * target in @link (@len bytes); -1 at the end. */
static int next_fd_link(DIR *d, char *link, size_t len)
{
	struct dirent *e;

	while ((e = readdir(d))) {
		char path[64];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, link, len - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		return atoi(e->d_name);
	}
	return -1;
}

/* The inodes of the files behind this process's CMA areas (descriptors
 * whose link reads /memfd:ucma:...), at most @max; how many. */
static int area_inodes(ino_t *ino, int max)
{
	DIR *d = opendir("/proc/self/fd");
	char link[256];
	int n = 0, fd;

	if (!d)
		return -1;
	while (n < max && (fd = next_fd_link(d, link, sizeof(link))) >= 0) {
		char path[64];
		struct stat st;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (strncmp(link, "/memfd:ucma:", 12) == 0 && stat(path, &st) == 0)
			ino[n++] = st.st_ino;
	}
	closedir(d);
	return n;
}

/*
 * The child of a fork gets CMA areas of its own and lets go of the
 * parent's files: kept open, they held the parent's whole area (hugetlb
 * pool pages, or shmem) until the last descendant exited.  The library's
 * close of them went through the preloaded syscall(), whose close guard
 * refused it as a close of the library's own descriptor.
 */
static void check_fork_area_files(void)
{
	ino_t mine[16];
	int n, status = -1;
	void *p = malloc(64);	/* the library runs */
	pid_t pid;

	n = area_inodes(mine, 16);
	if (n <= 0) {
		skip(1, "no CMA area on a file here (%d)", n);
		free(p);
		return;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		ino_t child[32];
		int m = area_inodes(child, 32), shared = 0;

		for (int i = 0; i < m; i++)
			for (int j = 0; j < n; j++)
				shared += child[i] == mine[j];
		_exit(m == n && shared == 0 ? 0 : 10 + shared);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "a child of fork() keeps none of the parent's %d CMA area files open, only its own "
	   "(status 0x%x)", n, status);
	free(p);
}

/*
 * The descriptors the library keeps open (its CMA areas' files, the
 * userfaultfd of heap lending): how many, and the lowest number among
 * them in *@lowest.
 */
static int library_fds(int *lowest)
{
	DIR *d = opendir("/proc/self/fd");
	char link[256];
	int n = 0, fd;

	*lowest = -1;
	if (!d)
		return -1;
	while ((fd = next_fd_link(d, link, sizeof(link))) >= 0) {
		if (strncmp(link, "/memfd:ucma:", 12) != 0 &&
		    strcmp(link, "anon_inode:[userfaultfd]") != 0)
			continue;
		n++;
		if (*lowest < 0 || fd < *lowest)
			*lowest = fd;
	}
	closedir(d);
	return n;
}

/*
 * The library's own descriptors are numbered from 256 on (half the
 * descriptor limit when that is lower), in a child of fork() too: a
 * program gets 3 from its first open() as it would without the library.
 * They had 3 and 4.
 */
static void check_library_fds(void)
{
	struct rlimit rl;
	int bound = 256, lowest, n, status = -1;
	void *p = malloc(64);	/* the library runs */
	pid_t pid;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 2 < (rlim_t)bound)
		bound = (int)(rl.rlim_cur / 2);
	n = library_fds(&lowest);
	if (n <= 0) {
		skip(2, "the library keeps no descriptor open here (%d)", n);
		free(p);
		return;
	}
	ok(lowest >= bound, "the library's %d descriptors are numbered from %d on (lowest %d)", n,
	   bound, lowest);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		n = library_fds(&lowest);
		_exit(n > 0 && lowest >= bound ? 0 : n <= 0 ? 1 : 2);
	}
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "and in a child of fork(), with its own area files (status 0x%x)", status);
	free(p);
}

/*
 * "fork_helpers": a thread moves a 1 MiB object out of the CMA areas (a
 * long-term pin, the process's first copy that can use the helper thread,
 * which it starts) while the main thread forks back to back.  Creating the
 * helper allocates its TLS with the preloaded calloc().  Started while the
 * mover held the object's entry, a fork that had taken the malloc locks
 * waited 2 s for the hold, gave up ("stays held"), and its child inherited
 * the entry held: the child's pin waited for ever (in 8 runs of 20 before
 * the helpers were started ahead of the hold).  One try per process:
 * preload_fork_helpers.sh runs it several times.
 */
static ucma_handle_t fh_obj;
static _Atomic int fh_done;

static void *fh_mover(void *arg)
{
	(void)arg;
	if (ucma_pin(fh_obj, UCMA_PIN_LONGTERM))
		ucma_unpin(fh_obj);
	atomic_store(&fh_done, 1);
	return NULL;
}

static int fh_reap(int flags)
{
	int status, hung = 0;

	while (waitpid(-1, &status, flags) > 0)
		hung += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	return hung;
}

static void check_fork_helpers(void)
{
	uint64_t moved = 0;
	int forks = 0, bad = 0;
	pthread_t t;
	void *p;

	fh_obj = ucma_halloc(MiB, 0);
	p = fh_obj ? ucma_pin(fh_obj, 0) : NULL;
	if (!p) {
		ok(0, "a movable object of 1 MiB (%s)", strerror(errno));
		return;
	}
	memset(p, 0x5a, MiB);
	ucma_unpin(fh_obj);
	pthread_create(&t, NULL, fh_mover, NULL);
	while (!atomic_load(&fh_done) && forks < 20000) {
		pid_t pid = fork();

		if (pid == 0) {
			alarm(5);
			p = ucma_pin(fh_obj, 0);
			_exit(p && ucma_unpin(fh_obj) == 0 ? 0 : 1);
		}
		forks += pid > 0;
		bad += fh_reap(WNOHANG);
	}
	pthread_join(t, NULL);
	bad += fh_reap(0);
	ucma_stat("pin_longterm_migrated", &moved);
	if (!moved)
		skip(1, "the object was not in a CMA area: nothing moved");
	else
		ok(bad == 0, "%d forks while another thread's move starts the copy helpers: "
		   "%d children could not pin the object", forks, bad);
}

/*
 * A threshold below the largest small size class (32 KiB): malloc()'s
 * fast path takes only the requests below it, so the sizes at and above
 * it that a size class would hold become contiguous buffers too, and
 * those below stay in the malloc family (run with
 * UCMA_PRELOAD_CONTIG_MIN=8K).
 */
static void check_contig_small(void)
{
	static const size_t below[] = { 1, 100, 4096, 8191 };
	static const size_t at_or_above[] = { 8192, 8193, 16384, 32768, 32769, 100000 };
	const char *min = getenv("UCMA_PRELOAD_CONTIG_MIN");
	char *p, *z;
	size_t i;
	int zero = 1;

	if (!min || strcmp(min, "8K") != 0)
		bail_out("run this with UCMA_PRELOAD_CONTIG_MIN=8K");
	for (i = 0; i < sizeof(below) / sizeof(below[0]); i++) {
		p = malloc(below[i]);
		ok(p && ucma_owns(p) && contig_of_malloc(p) == 0,
		   "malloc(%zu), below the threshold, is a block of the malloc family", below[i]);
		free(p);
	}
	for (i = 0; i < sizeof(at_or_above) / sizeof(at_or_above[0]); i++) {
		p = malloc(at_or_above[i]);
		ok(p && contig_of_malloc(p) >= at_or_above[i],
		   "malloc(%zu), at or above the threshold, is a contiguous buffer", at_or_above[i]);
		if (p)
			tu_fill(p, at_or_above[i], 3);
		ok(p && tu_check(p, at_or_above[i], 3), "... which holds what was written");
		free(p);
	}
	z = calloc(2, 8192);
	for (i = 0; z && i < 16384; i++)
		zero &= z[i] == 0;
	ok(z && contig_of_malloc(z) >= 16384 && zero, "calloc(2, 8 KiB) is contiguous and zero");
	free(z);
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "stats_fd") == 0)
		return stats_fd_case(argv[2]);
	plan_no_plan();
	check_interposed();
	if (argc > 1 && strcmp(argv[1], "contig") == 0) {
		check_contig();
		return done();
	}
	if (argc > 1 && strcmp(argv[1], "contig_small") == 0) {
		check_contig_small();
		return done();
	}
	if (argc > 1 && strcmp(argv[1], "contig_dontfork") == 0) {
		check_contig_dontfork();
		return done();
	}
	if (argc > 1 && strcmp(argv[1], "fork_helpers") == 0) {
		check_fork_helpers();
		return done();
	}
	if (argc > 1 && strcmp(argv[1], "fork_files") == 0) {
		check_fork_area_files();
		check_library_fds();
		return done();
	}
	check_basic();
	check_aligned();
	check_glibc_extras();
	check_foreign();
	check_pattern();
	check_threads_and_fork();
	check_not_blocks();
	return done();
}
