/*
 * test_malloc_abort.c - the hostile-input policy of the malloc family:
 * double frees (in the thread cache, in the slab, through another
 * thread, in another thread's cache), frees of interior pointers, of
 * slots never handed out and of the tail of a slab, realloc of a freed block
 * (its free marker intact or overwritten) or of an interior pointer, frees of
 * pointers that malloc never returned.  Each case runs in a child whose
 * standard error the parent reads: the child must die of SIGABRT after
 * one line naming the problem and the address.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "slab.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

/* Each case is the misuse it tests.  ucma.h's attributes let GCC see some
 * of them at compile time, as it sees the same ones with free(). */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free"
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#endif

/* Where a child leaves the address it is about to misuse, before the bad
 * call (shared memory: the child dies right after). */
static void **victim;

#define SET_VICTIM(p) (*victim = (p))

/* tu_dies_with(), and the child's output when it did not die as wanted. */
static bool dies_with(void (*fn)(void), const char *want, const char *name)
{
	char err[4096];
	bool good = tu_dies_with(fn, victim, want, err, sizeof(err));

	if (!good)
		diag("%s: wanted \"%s\" and %p in: %s", name, want, *victim, err);
	return good;
}

static void case_double_free_cached(void)
{
	void *p = ucma_malloc(48);

	SET_VICTIM(p);
	ucma_free(p);
	ucma_free(p);
}

/* A block of 200 bytes freed and pushed out of the thread cache back into
 * its slab, whose bit for it is then clear; it is the victim. */
static void *freed_into_slab(void)
{
	void *keep = ucma_malloc(200), *p = ucma_malloc(200), *others[2000];

	/* @keep stays allocated, so the slab of @p stays (they are
	 * neighbours: a fresh thread cache hands out in address order) */
	if (ucma_slab_of(keep) != ucma_slab_of(p))
		_exit(8);
	for (int i = 0; i < 2000; i++)
		others[i] = ucma_malloc(200);
	SET_VICTIM(p);
	ucma_free(p);
	/* push p out of the thread cache into its slab */
	for (int i = 0; i < 2000; i++)
		ucma_free(others[i]);
	ucma_trim();
	return p;
}

static void case_double_free_slab(void)
{
	ucma_free(freed_into_slab());
}

static void *free_it(void *p)
{
	ucma_free(p);
	return NULL;
}

static void case_double_free_other_thread(void)
{
	void *p = ucma_malloc(1000);
	pthread_t t;

	SET_VICTIM(p);
	pthread_create(&t, NULL, free_it, p);
	pthread_join(t, NULL);	/* its cache went back to the slabs at exit */
	ucma_free(p);
}

/* The second free comes from a thread whose own cache never saw the
 * block: it is parked in the first thread's cache, and its slab counts it
 * as taken. */
static void case_double_free_cached_other_thread(void)
{
	void *p = ucma_malloc(32);
	pthread_t t;

	SET_VICTIM(p);
	ucma_free(p);	/* p sits in this thread's cache */
	pthread_create(&t, NULL, free_it, p);
	pthread_join(t, NULL);
}

static void case_double_free_large(void)
{
	void *p = ucma_malloc(100000);

	SET_VICTIM(p);
	ucma_free(p);
	ucma_free(p);
}

static void case_interior_small(void)
{
	char *p = ucma_malloc(64);

	SET_VICTIM(p + 16);
	ucma_free(p + 16);
}

static void case_interior_large(void)
{
	char *p = ucma_malloc(100000);

	SET_VICTIM(p + 8192);
	ucma_free(p + 8192);
}

static void case_realloc_freed(void)
{
	void *p = ucma_malloc(300);

	SET_VICTIM(p);
	ucma_free(p);
	ucma_realloc(p, 600);
}

/*
 * realloc() finds most blocks in place from the slab's bits and the free
 * marker alone (malloc.c realloc_in_place()).  A program that freed a
 * block and then wrote over its second word has wiped the marker; the
 * bits still say free, and realloc must not hand the block back as live.
 * (AddressSanitizer builds poison freed blocks instead of marking them,
 * and would report the write itself: there the poison is the check.)
 */
static void wipe_marker(void *p)
{
#ifndef UCMA_ASAN
	((volatile uint64_t *)p)[1] = 0;
#else
	(void)p;
#endif
}

/* Back in its slab: the block's bit is clear. */
static void case_realloc_freed_slab_wiped(void)
{
	void *p = freed_into_slab();

	wipe_marker(p);
	ucma_realloc(p, 190);	/* the same class: in place if it were live */
}

/* Freed by another thread into a slab this thread owns: its remote bit is
 * set until the owner merges it, its own bit still says taken. */
static void case_realloc_freed_remote_wiped(void)
{
	void *p = ucma_malloc(1000);
	pthread_t t;

	SET_VICTIM(p);
	pthread_create(&t, NULL, free_it, p);
	pthread_join(t, NULL);
	wipe_marker(p);
	ucma_realloc(p, 900);
}

static void case_realloc_interior_large(void)
{
	char *p = ucma_malloc(100000);

	SET_VICTIM(p + 8192);
	ucma_realloc(p + 8192, 50000);
}

/* A slot of a slab that malloc never handed out: its bit says so. */
static void case_free_unallocated_slot(void)
{
	char *p = ucma_malloc(64);

	SET_VICTIM(p + 64);
	ucma_free(p + 64);
}

/* An object start past the last object of a slab, in the tail its pages
 * leave: free()'s fast path leaves that index to its bit (always clear
 * there), its slow path reports it. */
static void case_free_slab_tail(void)
{
	for (unsigned c = 0; c < UCMA_NR_CLASSES; c++) {
		const struct ucma_class *k = &ucma_classes[c];
		struct ucma_slab *s;
		char *p;

		if (k->limit >= (size_t)k->npages << UCMA_PAGE_SHIFT)
			continue;
		p = ucma_malloc(k->size);
		s = p ? ucma_slab_of(p) : NULL;
		if (!s || s->where != UCMA_SLAB_ARENA)
			_exit(7);
		SET_VICTIM((char *)s->base + k->limit);
		ucma_free((char *)s->base + k->limit);
	}
	_exit(8);	/* no class leaves a tail */
}

static void case_free_stack(void)
{
	char buf[64];

	SET_VICTIM(buf);
	ucma_free(buf);
}

static void case_free_contig(void)
{
	void *p = ucma_alloc(65536, 0, 0);

	if (!p)
		_exit(7);
	SET_VICTIM(p);
	ucma_free(p);
}

static void case_free_free_page(void)
{
	/* beyond the runs a thread keeps for reuse (UCMA_TLARGE_MAX_PAGES),
	 * so its pages go back to the zone at once */
	char *p = ucma_malloc(400000);

	ucma_free(p);
	SET_VICTIM(p + 4096);
	ucma_free(p + 4096);
}

#ifdef UCMA_ASAN
/* AddressSanitizer build: freed objects are poisoned, so a write through
 * a stale pointer is reported (and the process exits non-zero). */
static bool asan_reports(void (*fn)(void))
{
	int fds[2], status = 0;
	char err[8192];
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	if (pipe(fds) != 0)
		bail_out("pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], STDERR_FILENO);
		fn();
		_exit(0);
	}
	close(fds[1]);
	while (n < sizeof(err) - 1 && (r = read(fds[0], err + n, sizeof(err) - 1 - n)) > 0)
		n += (size_t)r;
	err[n] = '\0';
	while (read(fds[0], &(char){ 0 }, 1) > 0)
		;
	close(fds[0]);
	waitpid(pid, &status, 0);
	return !(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
	       strstr(err, "use-after-poison");
}

static void case_use_after_free(void)
{
	volatile char *p = ucma_malloc(64);

	ucma_free((void *)p);
	p[3] = 1;
}

static void case_use_after_free_slab(void)
{
	void *keep = ucma_malloc(3000);
	volatile char *p = ucma_malloc(3000);

	ucma_free((void *)p);
	ucma_trim();	/* back in its slab, which @keep keeps */
	p[100] = 1;
	ucma_free(keep);
}
#endif

int main(void)
{
	victim = tu_shared_results(4096);
	/* Initialise in the parent, so every child starts from the same
	 * arena and key. */
	ucma_free(ucma_malloc(1));
	plan(18);
	ok(dies_with(case_double_free_cached, "free(): double free of", "cached"),
	   "double free of a block still in the thread cache aborts");
	ok(dies_with(case_double_free_slab, "free(): double free of", "slab"),
	   "double free of a block back in its slab aborts");
	ok(dies_with(case_double_free_other_thread, "free(): double free of", "thread"),
	   "double free after another thread freed the block aborts");
	ok(dies_with(case_double_free_cached_other_thread, "free(): double free of", "other cache"),
	   "double free by another thread while the block sits in the first thread's cache aborts");
	ok(dies_with(case_double_free_large, "free(): double free or invalid pointer", "large"),
	   "double free of a large block aborts");
	ok(dies_with(case_interior_small, "free(): invalid pointer", "interior small"),
	   "free of a pointer inside a small block aborts");
	ok(dies_with(case_interior_large, "free(): invalid pointer", "interior large"),
	   "free of a pointer inside a large block aborts");
	ok(dies_with(case_realloc_freed, "realloc(): invalid pointer", "realloc"),
	   "realloc of a freed block aborts");
	ok(dies_with(case_realloc_freed_slab_wiped, "realloc(): invalid pointer", "realloc wiped"),
	   "realloc of a block back in its slab, its free marker overwritten, aborts");
	ok(dies_with(case_realloc_freed_remote_wiped, "realloc(): invalid pointer",
		     "realloc remote wiped"),
	   "realloc of a block another thread freed, its free marker overwritten, aborts");
	ok(dies_with(case_realloc_interior_large, "realloc(): invalid pointer", "realloc interior"),
	   "realloc of a pointer inside a large block aborts");
	/* "invalid pointer"; "double free" with AddressSanitizer, where a
	 * slot never handed out is poisoned like a freed one */
	ok(dies_with(case_free_unallocated_slot, "free(): ", "unallocated slot"),
	   "free of a slot malloc never handed out aborts");
	ok(dies_with(case_free_slab_tail, "free(): invalid pointer", "slab tail"),
	   "free of an address past the last object of a slab aborts");
	ok(dies_with(case_free_stack, "free(): invalid pointer", "stack"),
	   "free of a stack address aborts");
	ok(dies_with(case_free_contig, "free(): invalid pointer", "contig"),
	   "free of a contiguous buffer (ucma_alloc) aborts");
	ok(dies_with(case_free_free_page, "free(): double free or invalid pointer", "free page"),
	   "free of a pointer into a free page aborts");
#ifdef UCMA_ASAN
	ok(asan_reports(case_use_after_free), "AddressSanitizer reports a write to a freed block");
	ok(asan_reports(case_use_after_free_slab),
	   "AddressSanitizer reports a write to a block back in its slab");
#else
	skip(2, "use-after-free reports need the AddressSanitizer build");
#endif
	return done();
}
