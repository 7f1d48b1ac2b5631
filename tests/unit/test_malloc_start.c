/*
 * test_malloc_start.c - start-up of the malloc family.
 *
 *  - Re-entry: under LD_PRELOAD, libnuma and liburcu call malloc while the
 *    arena is being created, and those calls come back to ucma.  Here the
 *    operating-system hook for mmap (test build) calls ucma_malloc() and
 *    friends from inside the arena's creation; they must be served from
 *    the bootstrap buffer, and the blocks must stay usable afterwards.
 *  - No arena: when the arena cannot be reserved at all, malloc goes on
 *    from overflow mappings.
 *
 *  - The stand-in cache: a thread's calls before its cache exists, and
 *    after its destructor ran, go through ucma_tcache_dummy, which must
 *    stay all zeros: then it lives in .bss and costs no resident memory
 *    (tcache.h, struct ucma_tbin).
 *  - A new cache's bins stay zeros until the thread uses their class, so
 *    that their pages are not resident; a thread whose first call of a
 *    class is a free parks the block all the same.
 *  - A recycled cache: a thread's exit, and the threads its cache goes to
 *    next, write none of the bins they did not use.
 *
 * Each scenario needs a fresh process (the library initialises once), so
 * each runs in a child that reports through its exit status.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "tcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static bool in_hook;
static char *boot_small, *boot_grown, *boot_big;
static void *boot_aligned;
static size_t boot_usable;

/* An mmap that allocates re-entrantly, as libnuma would under preload. */
static void *reentrant_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (!in_hook && !boot_small) {
		char *tmp;

		in_hook = true;
		boot_small = ucma_malloc(100);
		if (boot_small)
			strcpy(boot_small, "bootstrap");
		boot_usable = ucma_usable_size(boot_small);
		tmp = ucma_calloc(10, 10);
		if (tmp && tmp[99] == 0)
			ucma_free(tmp);		/* ignored, but must not crash */
		boot_grown = ucma_realloc(ucma_malloc(10), 5000);
		if (boot_grown)
			memset(boot_grown, 7, 5000);
		boot_aligned = ucma_aligned_alloc(256, 64);
		boot_big = ucma_malloc(300000);
		if (boot_big)
			memset(boot_big, 9, 300000);
		in_hook = false;
	}
	return real_mmap(addr, len, prot, flags, fd, off);
}

static int scenario_reentry(void)
{
	void *p;

	real_mmap = ucma_os.mmap;
	ucma_os.mmap = reentrant_mmap;
	p = ucma_malloc(64);	/* initialises; the hook re-enters */
	ucma_os.mmap = real_mmap;
	if (!p || !ucma_arena_peek())
		return 10;
	if (!boot_small || strcmp(boot_small, "bootstrap") != 0 || boot_usable < 100)
		return 11;
	if (!ucma_owns(boot_small) || ucma_usable_size(boot_small) < 100)
		return 12;
	if (!boot_grown || boot_grown[4999] != 7 || ucma_usable_size(boot_grown) < 5000)
		return 13;
	if (!boot_aligned || ((uintptr_t)boot_aligned & 255))
		return 14;
	if (!boot_big || boot_big[299999] != 9)
		return 15;
	/* Bootstrap blocks live outside the arena. */
	if (ucma_addr_in_arena(ucma_arena_peek(), boot_small))
		return 16;
	/* After start-up: realloc out of the bootstrap buffer, free it. */
	boot_small = ucma_realloc(boot_small, 10000);
	if (!boot_small || strcmp(boot_small, "bootstrap") != 0 ||
	    !ucma_addr_in_arena(ucma_arena_peek(), boot_small))
		return 17;
	ucma_free(boot_small);
	ucma_free(boot_grown);
	ucma_free(boot_aligned);
	ucma_free(boot_big);
	ucma_free(p);
	return 0;
}

/* An mmap that refuses the arena's reservation (the large mappings) but
 * lets the smaller metadata and overflow mappings through. */
static void *no_arena_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (len >= ((size_t)256 << 20)) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return real_mmap(addr, len, prot, flags, fd, off);
}

static void *thread_allocs(void *arg)
{
	int *bad = arg;

	for (int i = 0; i < 2000; i++) {
		size_t size = (size_t)(i % 200) * 300 + 1;
		char *p = ucma_malloc(size);

		if (!p) {
			(*bad)++;
			continue;
		}
		tu_fill(p, size, (uint64_t)i);
		if (!tu_check(p, size, (uint64_t)i) || !ucma_owns(p))
			(*bad)++;
		ucma_free(p);
	}
	return NULL;
}

static int scenario_no_arena(void)
{
	void *p[500];
	uint64_t ovf = 0;
	pthread_t t;
	int bad = 0;

	real_mmap = ucma_os.mmap;
	ucma_os.mmap = no_arena_mmap;
	for (int i = 0; i < 500; i++) {
		size_t size = (size_t)(i % 50) * 1000 + 1;

		p[i] = ucma_malloc(size);
		if (!p[i])
			return 20;
		tu_fill(p[i], size, (uint64_t)i);
	}
	if (ucma_arena_peek())
		return 21;
	ucma_stat("overflow_alloc", &ovf);
	if (ovf == 0)
		return 22;
	for (int i = 0; i < 500; i++) {
		size_t size = (size_t)(i % 50) * 1000 + 1;

		if (!tu_check(p[i], size, (uint64_t)i) || !ucma_owns(p[i]) ||
		    ucma_usable_size(p[i]) < size)
			return 23;
		p[i] = ucma_realloc(p[i], size + 5000);
		if (!p[i] || !tu_check(p[i], size, (uint64_t)i))
			return 24;
		ucma_free(p[i]);
	}
	pthread_create(&t, NULL, thread_allocs, &bad);
	pthread_join(t, NULL);
	if (bad)
		return 25;
	ucma_trim();
	ucma_os.mmap = real_mmap;
	return 0;
}

/* A key whose destructor allocates: it runs after the thread's cache is
 * gone (the cache's own key was created first), on the dummy. */
static pthread_key_t late_key;

static void late_destructor(void *arg)
{
	void *q = ucma_malloc(48);

	ucma_free(arg);
	ucma_free(q);
}

static void *thread_first_calls(void *arg)
{
	void *p[64];

	(void)arg;
	for (int i = 0; i < 64; i++)
		p[i] = ucma_malloc((size_t)(i % 16) * 64 + 1);
	for (int i = 0; i < 64; i++)
		ucma_free(p[i]);
	pthread_setspecific(late_key, ucma_malloc(100));
	return NULL;
}

/* Are the @n bytes at @p all zero? */
static bool all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		if (c[i])
			return false;
	return true;
}

static int scenario_dummy_zero(void)
{
	pthread_t t[4];

	ucma_free(ucma_malloc(1));	/* the library and this thread's cache first */
	if (pthread_key_create(&late_key, late_destructor) != 0)
		return 30;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 4; i++)
			if (pthread_create(&t[i], NULL, thread_first_calls, NULL) != 0)
				return 31;
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
	}
	return all_zero(&ucma_tcache_dummy, sizeof(ucma_tcache_dummy)) ? 0 : 32;
}

struct first_free {
	void *block;		/* allocated by the main thread, freed first here */
	int result;
};

static void *thread_one_class(void *arg)
{
	struct first_free *ff = arg;
	unsigned used = ucma_size_class(64), freed = ucma_size_class(1000);
	struct ucma_tcache *tc;
	void *p = ucma_malloc(64);

	ucma_free(p);
	tc = ucma_tcache_tls;
	ucma_free(ff->block);	/* this thread's first call of its class */
	ff->result = 0;
	if (tc == &ucma_tcache_dummy || used == freed)
		ff->result = 40;
	else if (tc->bins[freed].n != 1)
		ff->result = 41;	/* not parked */
	else if (tc->bins[used].cap == 0)
		ff->result = 42;
	for (unsigned c = 0; c < UCMA_NR_CLASSES && !ff->result; c++)
		if (c != used && c != freed &&
		    !all_zero(&tc->bins[c], offsetof(struct ucma_tbin, stack)))
			ff->result = 43;
	return NULL;
}

static int scenario_bins_untouched(void)
{
	struct first_free ff = { .block = ucma_malloc(1000) };
	pthread_t t;

	if (!ff.block || pthread_create(&t, NULL, thread_one_class, &ff) != 0)
		return 44;
	pthread_join(t, NULL);
	return ff.result;
}

/*
 * A cache a thread leaves behind is given to the next thread: the bins
 * neither thread used must not be written, or their pages become memory
 * of their own in every program that starts and ends threads.  Once the
 * first thread has used its one class, every whole page of its bins but
 * the one holding that class's bin is made read-only; that thread's exit
 * and two more threads taking the same cache must not fault.  (Reading
 * is allowed: a page that was only read is the kernel's zero page.)
 */
static struct ucma_tcache *first_cache;
static uintptr_t ro_lo, ro_hi;	/* the read-only part of the bins */
static int reused;		/* later threads given the first one's cache */

static void *thread_one_class_again(void *arg)
{
	struct ucma_tcache *tc;
	unsigned used = ucma_size_class(48);
	uintptr_t keep_lo, keep_hi;

	(void)arg;
	for (int i = 0; i < 1000; i++)
		ucma_free(ucma_malloc(48));
	tc = ucma_tcache_tls;
	reused += first_cache && tc == first_cache;
	if (first_cache || tc == &ucma_tcache_dummy)
		return NULL;
	first_cache = tc;
	/* The pages wholly inside the bins, below or above the used bin's. */
	keep_lo = (uintptr_t)&tc->bins[used] & ~(uintptr_t)4095;
	keep_hi = UCMA_ALIGN_UP((uintptr_t)&tc->bins[used + 1], 4096);
	ro_lo = keep_hi;
	ro_hi = (uintptr_t)&tc->bins[UCMA_NR_CLASSES] & ~(uintptr_t)4095;
	if (keep_lo > UCMA_ALIGN_UP((uintptr_t)&tc->bins[0], 4096) + 4096 * 2) {
		ro_lo = UCMA_ALIGN_UP((uintptr_t)&tc->bins[0], 4096);
		ro_hi = keep_lo;
	}
	if (ro_hi <= ro_lo || mprotect((void *)ro_lo, ro_hi - ro_lo, PROT_READ) != 0)
		ro_lo = ro_hi = 0;
	return NULL;
}

static int scenario_recycled_untouched(void)
{
	pthread_t t;

	ucma_free(ucma_malloc(1));
	for (int round = 0; round < 3; round++) {
		if (pthread_create(&t, NULL, thread_one_class_again, NULL) != 0)
			return 50;
		pthread_join(t, NULL);
	}
	if (!first_cache || !ro_lo)
		return 51;	/* no cache, or nothing to protect */
	if (ro_hi - ro_lo < 4 * 4096)
		return 52;	/* the bins are 40 KiB: most of them should be here */
	if (reused != 2)
		return 53;	/* the cache was not handed on: nothing tested */
	mprotect((void *)ro_lo, ro_hi - ro_lo, PROT_READ | PROT_WRITE);
	return 0;
}

static int run(int (*fn)(void))
{
	int status = 0;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(fn());
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	if (!WIFEXITED(status))
		return 100 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return WEXITSTATUS(status);
}

int main(void)
{
	int r;

	plan(5);
	r = run(scenario_reentry);
	ok(r == 0, "malloc re-entered during start-up is served and stays usable (%d)", r);
	r = run(scenario_no_arena);
	ok(r == 0, "without an arena, malloc goes on from overflow mappings (%d)", r);
	r = run(scenario_dummy_zero);
	ok(r == 0, "the stand-in cache of threads without one stays all zeros (%d)", r);
	r = run(scenario_bins_untouched);
	ok(r == 0, "a cache's bins stay zeros until used; a first free parks (%d)", r);
	r = run(scenario_recycled_untouched);
	ok(r == 0, "a thread's exit, and the threads its cache goes to, write no bin "
		   "neither used (%d)", r);
	return done();
}
