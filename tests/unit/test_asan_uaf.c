/*
 * test_asan_uaf.c - in the AddressSanitizer build, free pages of the arena
 * are poisoned (zone.c), so a write through a stale pointer into a freed
 * run is reported as "use-after-poison" instead of silently corrupting
 * whatever the pages hold next.
 *
 * Each bad access runs in a child process, whose standard error the parent
 * reads: the child must die with ASan's report.  The same accesses to live
 * runs must go unreported.  Other builds skip the test.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

#ifdef UCMA_ASAN

static struct ucma_arena *a;

/*
 * Fork a child that writes one byte at @p.  Returns the child's wait
 * status; its standard error is copied into @err.
 */
static int child_writes(volatile char *p, char *err, size_t errlen)
{
	int fds[2], status = -1;
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
		*p = 42;
		_exit(0);
	}
	close(fds[1]);
	while (n < errlen - 1 && (r = read(fds[0], err + n, errlen - 1 - n)) > 0)
		n += (size_t)r;
	err[n] = '\0';
	/* drain anything longer so the child never blocks on the pipe */
	while (read(fds[0], &(char){ 0 }, 1) > 0)
		;
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, &status, 0);
	return status;
}

static bool reported(int status, const char *err)
{
	return status != -1 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
	       strstr(err, "use-after-poison") != NULL;
}

static bool quiet(int status, const char *err)
{
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(err, "ERROR:") == NULL;
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = 32u << 20,
		.cma_size = 16u << 20,
		.hugepages = UCMA_BACKING_NONE,
		.hugepages_normal = UCMA_BACKING_NONE,
	};
	static char err[65536];
	uint32_t pfn, pfn2;
	int status;
	char *p;

	plan_no_plan();
	/* One CPU: a freed run waits on that CPU's list (pcp.c) and the next
	 * request of its length gets it back, whichever CPU the scheduler
	 * would have moved this thread to. */
	{
		cpu_set_t one;
		int cpu = sched_getcpu();

		CPU_ZERO(&one);
		CPU_SET(cpu < 0 ? 0 : cpu, &one);
		if (sched_setaffinity(0, sizeof(one), &one) != 0)
			diag("sched_setaffinity: %s", strerror(errno));
	}
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	a = ucma_arena_get();

	/* An unmovable run in NORMAL, written while live, then freed. */
	pfn = ucma_pages_alloc(a, 4, UCMA_GFP_UNMOVABLE);
	p = ucma_pfn_to_addr(a, pfn);
	status = child_writes(p + 100, err, sizeof(err));
	ok(quiet(status, err), "a write into a live NORMAL run is not reported");
	memset(p, 1, 4 * UCMA_PAGE_SIZE);
	ucma_pages_free(a, pfn);
	status = child_writes(p + 100, err, sizeof(err));
	ok(reported(status, err), "a write into a freed NORMAL run dies with use-after-poison");
	if (!reported(status, err))
		diag("child status %#x, stderr: %.300s", status, err);

	/* A movable run in the CMA zone. */
	pfn = ucma_pages_alloc(a, 3, UCMA_GFP_MOVABLE);
	p = ucma_pfn_to_addr(a, pfn);
	ok(ucma_pfn_zone(a, pfn)->id == UCMA_ZONE_CMA, "a movable run in the CMA zone");
	status = child_writes(p + 3 * UCMA_PAGE_SIZE, err, sizeof(err));
	ok(reported(status, err), "the page after a 3-page run (given back at once) is poisoned");
	ucma_pages_free(a, pfn);
	status = child_writes(p + 2 * UCMA_PAGE_SIZE + 4095, err, sizeof(err));
	ok(reported(status, err), "the last byte of a freed CMA run is poisoned");

	/* Never-allocated memory is poisoned from the start. */
	p = ucma_pfn_to_addr(a, a->zones[UCMA_ZONE_CMA].end_pfn - 1);
	status = child_writes(p, err, sizeof(err));
	ok(reported(status, err), "never-allocated arena pages are poisoned");

	/* Allocating again unpoisons; a claimed free range too. */
	pfn2 = ucma_pages_alloc(a, 3, UCMA_GFP_MOVABLE);
	status = child_writes(ucma_pfn_to_addr(a, pfn2), err, sizeof(err));
	ok(pfn2 == pfn && quiet(status, err), "the same pages allocated again are usable");
	if (!quiet(status, err))
		diag("child status %#x, stderr: %.300s", status, err);
	ucma_pages_free(a, pfn2);
	pfn = a->zones[UCMA_ZONE_CMA].start_pfn + 1000;
	ok(ucma_claim_free_range(a, pfn, pfn + 10, UCMA_OWN_NONE, 0) == 0,
	   "claim a free CMA range");
	status = child_writes(ucma_pfn_to_addr(a, pfn + 9), err, sizeof(err));
	ok(quiet(status, err), "a claimed range is unpoisoned");
	ucma_pages_free(a, pfn);
	status = child_writes(ucma_pfn_to_addr(a, pfn + 9), err, sizeof(err));
	ok(reported(status, err), "and poisoned again when freed");

	/* Teardown unpoisons the address range it gives back. */
	p = (char *)a->base;
	ucma_test_reset();
	{
		char *q = mmap(p, UCMA_PAGE_SIZE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

		if (q == p) {
			status = child_writes(q, err, sizeof(err));
			ok(quiet(status, err), "a new mapping where the arena was is not poisoned");
			munmap(q, UCMA_PAGE_SIZE);
		} else {
			skip(1, "cannot map the old arena address again");
			if (q != MAP_FAILED)
				munmap(q, UCMA_PAGE_SIZE);
		}
	}
	return done();
}

#else

int main(void)
{
	skip_all("arena poisoning exists only in the AddressSanitizer build (--enable-asan)");
}

#endif
