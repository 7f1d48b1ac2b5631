/*
 * bench_zone_cma.c - the kernel's ZONE_CMA experiment, in user space.
 *
 * The kernel's measurement: with half of a 1 GiB machine reserved for CMA,
 * a build that needs more than the other half ran twice as slowly because
 * the reserved memory sat idle; with ZONE_CMA lending it to movable pages,
 * full speed came back and contiguous allocations still succeeded.
 *
 * Here: an arena half of which is a CMA area.  The same movable workload
 * (objects of 4 KiB to 256 KiB churning around a working set larger than
 * the NORMAL zone) runs with lending on (UCMA_CMA_POLICY=lend) and off
 * (reserved), while a "device" periodically takes a contiguous buffer
 * with ucma_alloc() and gives it back.  Each run is a child process with
 * its own arena.  Reported in one table: peak movable bytes, movable
 * allocation failures, ucma_alloc successes, and ucma_alloc latency p50/p99
 * for runs that were already free and for runs that needed migration.
 * A third run repeats the lending one with the arena prefaulted
 * (UCMA_POPULATE), which separates the kernel's first-touch faults of the
 * new copies from ucma's own migration cost.
 * Then: migration throughput as a ratio of memcpy bandwidth measured in
 * the same run, and the backing and physical contiguity of the buffers.
 *
 * As root the CMA area is put on 2 MiB hugetlb pages reserved for the run
 * (and the pool restored); otherwise it runs on what the machine allows.
 *
 * Environment: UCMA_BENCH_ARENA_MB (default 512), UCMA_BENCH_OPS (default
 * 400000).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define MAXLIVE 200000
#define MAXLAT 4096
#define NRUNS 3

struct result {
	uint64_t peak_bytes, halloc_fail, halloc_ok;
	uint64_t cma_ok, cma_try;
	uint64_t lat_free[MAXLAT], lat_mig[MAXLAT];
	unsigned nfree, nmig;
	uint64_t phys_contig, phys_checked;
	char backing[32];
};

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

static double pct(uint64_t *v, unsigned n, double p)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_u64);
	return (double)v[(unsigned)((n - 1) * p)] / 1000.0;	/* us */
}

static void check_phys(struct result *r, void *b, size_t len)
{
	uint64_t first, cur;
	bool contig = true;

	if (ucma_virt2phys(b, &first) != 0)
		return;
	for (size_t off = 4096; off < len; off += 4096) {
		if (ucma_virt2phys((char *)b + off, &cur) != 0 || cur != first + off) {
			contig = false;
			break;
		}
	}
	r->phys_checked++;
	r->phys_contig += contig;
}

static void workload(int policy, int populate, size_t arena_mb, uint64_t ops, struct result *r)
{
	static ucma_handle_t live[MAXLIVE];
	static uint32_t live_size[MAXLIVE];
	struct ucma_config cfg = {
		.arena_size = arena_mb << 20,
		.cma_size = (arena_mb / 2) << 20,
		.hugepages = UCMA_BACKING_AUTO,
		.cma_policy = policy,
		.populate = populate,
	};
	uint64_t seed = 1234, bytes = 0, target = (uint64_t)arena_mb * 3 / 4 << 20;
	unsigned nlive = 0;
	void *dev = NULL;
	uint64_t dev_until = 0;

	memset(r, 0, sizeof(*r));
	if (ucma_init(&cfg) != 0) {
		fprintf(stderr, "ucma_init: %s\n", strerror(errno));
		exit(1);
	}
	snprintf(r->backing, sizeof(r->backing), "%s", ucma_backing_name("cma"));
	for (uint64_t op = 0; op < ops; op++) {
		uint64_t x = tu_rand(&seed);

		/* Grow towards the working set, then churn around it. */
		if ((bytes < target && x % 8 != 0) || nlive == 0) {
			uint32_t size = 4096u << (tu_rand(&seed) % 7);
			ucma_handle_t h = nlive < MAXLIVE ? ucma_halloc(size, 0) : 0;

			if (!h) {
				r->halloc_fail++;
				/* Under pressure the application drops old data. */
				for (int k = 0; k < 4 && nlive; k++) {
					unsigned i = (unsigned)(tu_rand(&seed) % nlive);

					ucma_hfree(live[i]);
					bytes -= live_size[i];
					live[i] = live[--nlive];
					live_size[i] = live_size[nlive];
				}
			} else {
				r->halloc_ok++;
				live[nlive] = h;
				live_size[nlive++] = size;
				bytes += size;
				if (bytes > r->peak_bytes)
					r->peak_bytes = bytes;
			}
		} else {
			unsigned i = (unsigned)(tu_rand(&seed) % nlive);

			ucma_hfree(live[i]);
			bytes -= live_size[i];
			live[i] = live[--nlive];
			live_size[i] = live_size[nlive];
		}
		/* The device: every 2000 operations a 16 MiB buffer for a while,
		 * on the same schedule whatever the movable allocations did, so
		 * that every policy tries the same number of times. */
		if (dev && op >= dev_until) {
			ucma_release(dev);
			dev = NULL;
		}
		if (!dev && op % 2000 == 1999) {
			uint64_t m0, m1, t0, t1;

			ucma_stat("pgmigrate_success", &m0);
			t0 = tu_now_ns();
			dev = ucma_alloc(16u << 20, 0, UCMA_ALLOC_POPULATE);
			t1 = tu_now_ns();
			ucma_stat("pgmigrate_success", &m1);
			r->cma_try++;
			if (dev) {
				r->cma_ok++;
				if (m1 == m0 && r->nfree < MAXLAT)
					r->lat_free[r->nfree++] = t1 - t0;
				else if (m1 != m0 && r->nmig < MAXLAT)
					r->lat_mig[r->nmig++] = t1 - t0;
				if (r->phys_checked < 8)
					check_phys(r, dev, 16u << 20);
				dev_until = op + 500;
			}
		}
	}
}

/* Migration throughput vs memcpy, in one process. */
static void throughput(size_t arena_mb)
{
	struct ucma_config cfg = {
		.arena_size = arena_mb << 20,
		.cma_size = (arena_mb / 2) << 20,
		.hugepages = UCMA_BACKING_AUTO,
		/* Prefaulted, so the kernel's zeroing of fresh pages on first
		 * touch is not counted as migration cost. */
		.populate = 1,
	};
	size_t cma = (arena_mb / 2) << 20, moved = 0;
	ucma_handle_t *h;
	unsigned n = 0;
	uint64_t m0, m1, t0, t1;
	double memcpy_gbs, mig_gbs;
	char *src, *dst;
	void *b;

	if (ucma_init(&cfg) != 0)
		exit(1);
	h = calloc(cma / 65536, sizeof(*h));
	/* Fill the CMA area with 64 KiB objects. */
	while (n < cma / 65536) {
		ucma_handle_t x = ucma_halloc(65536, 0);
		void *p;

		if (!x)
			break;
		p = ucma_pin(x, 0);
		memset(p, (int)n, 65536);
		ucma_unpin(x);
		h[n++] = x;
	}
	ucma_stat("pgmigrate_success", &m0);
	t0 = tu_now_ns();
	b = ucma_alloc(cma / 2, 0, 0);
	t1 = tu_now_ns();
	ucma_stat("pgmigrate_success", &m1);
	if (!b) {
		/* A failed call moved objects in vain: no throughput to speak of. */
		printf("\nmigration: ucma_alloc(%zu MiB) over %u live 64 KiB objects failed: %s "
		       "(%llu objects moved first); no throughput measured\n",
		       (cma / 2) >> 20, n, strerror(errno), (unsigned long long)(m1 - m0));
		free(h);
		return;
	}
	moved = (size_t)(m1 - m0) * 65536;
	mig_gbs = (double)moved / (double)(t1 - t0);
	/* memcpy of the same amount between two warmed buffers. */
	src = malloc(cma / 2);
	dst = malloc(cma / 2);
	memset(src, 1, cma / 2);
	memset(dst, 2, cma / 2);
	t0 = tu_now_ns();
	for (int i = 0; i < 4; i++)
		memcpy(dst, src, cma / 2);
	t1 = tu_now_ns();
	memcpy_gbs = 4.0 * (double)(cma / 2) / (double)(t1 - t0);
	printf("\nmigration: %zu MiB moved in one ucma_alloc(%zu MiB): %.2f GB/s; "
	       "memcpy %.2f GB/s; ratio %.2f\n",
	       moved >> 20, (cma / 2) >> 20, mig_gbs, memcpy_gbs, mig_gbs / memcpy_gbs);
	printf("(arena prefaulted; the ucma_alloc time includes isolating, scanning, allocating "
	       "the new copies and an RCU grace period)\n");
	ucma_release(b);
	free(src);
	free(dst);
	free(h);
}

int main(void)
{
	const char *e = getenv("UCMA_BENCH_ARENA_MB");
	size_t arena_mb = e ? strtoul(e, NULL, 10) : 512;
	uint64_t ops = getenv("UCMA_BENCH_OPS") ? strtoull(getenv("UCMA_BENCH_OPS"), NULL, 10)
						: 400000;
	struct result *res = mmap(NULL, NRUNS * sizeof(struct result), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	/* The third run is the first with the arena prefaulted (UCMA_POPULATE):
	 * what a latency-sensitive user does, and how much of the migrating
	 * latency is the kernel's first-touch faults of the new copies. */
	static const char *const names[NRUNS] = { "lend (ZONE_CMA)", "reserved (static)",
						  "lend, prefaulted" };
	static const int policy[NRUNS] = { UCMA_CMA_LEND, UCMA_CMA_RESERVED, UCMA_CMA_LEND };
	char why[256];
	pid_t pid;
	int st;

	if (tu_hugepages_reserve(2048, (long)(arena_mb / 2 / 2), why, sizeof(why)) != 0)
		printf("note: CMA area not on reserved 2 MiB hugetlb pages: %s\n", why);
	printf("zone_cma: arena %zu MiB, CMA area %zu MiB, %llu operations per run, "
	       "movable working set %zu MiB\n",
	       arena_mb, arena_mb / 2, (unsigned long long)ops, arena_mb * 3 / 4);
	for (int p = 0; p < NRUNS; p++) {
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			workload(policy[p], p == 2, arena_mb, ops, &res[p]);
			_exit(0);
		}
		waitpid(pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			printf("run %s failed\n", names[p]);
			return 1;
		}
	}
	printf("\nCMA backing: %s\n\n", res[0].backing);
	printf("| policy | peak movable MiB | halloc ok | halloc failures | ucma_alloc ok/tried "
	       "| free run p50/p99 us | migrating run p50/p99 us | phys contiguous |\n");
	printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (int p = 0; p < NRUNS; p++) {
		struct result *r = &res[p];
		char phys[32];

		if (r->phys_checked)
			snprintf(phys, sizeof(phys), "%llu/%llu",
				 (unsigned long long)r->phys_contig,
				 (unsigned long long)r->phys_checked);
		else
			snprintf(phys, sizeof(phys), "unknown");
		printf("| %s | %llu | %llu | %llu | %llu/%llu | %.0f / %.0f (%u) | %.0f / %.0f (%u) | %s |\n",
		       names[p], (unsigned long long)(r->peak_bytes >> 20),
		       (unsigned long long)r->halloc_ok, (unsigned long long)r->halloc_fail,
		       (unsigned long long)r->cma_ok, (unsigned long long)r->cma_try,
		       pct(r->lat_free, r->nfree, 0.5), pct(r->lat_free, r->nfree, 0.99), r->nfree,
		       pct(r->lat_mig, r->nmig, 0.5), pct(r->lat_mig, r->nmig, 0.99), r->nmig, phys);
	}
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		throughput(arena_mb);
		fflush(stdout);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	return 0;
}
