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
 * the same run, over 64 KiB objects, and over large ones with the copy
 * helpers (UCMA_COPY_HELPERS) off and on in turn; and the backing and
 * physical contiguity of the buffers.
 *
 * As root the CMA area is put on 2 MiB hugetlb pages reserved for the run
 * (and the pool restored); otherwise it runs on what the machine allows.
 *
 * Environment: UCMA_BENCH_ARENA_MB (default 512), UCMA_BENCH_OPS (default
 * 400000), UCMA_BENCH_PART (the parts to run, any of "workload",
 * "throughput" and "fresh" separated by commas; default all three: one part
 * alone is what a profiler wants to look at), UCMA_BENCH_ZC_LARGE_KB (the
 * large objects of the throughput part, default 1024, 64 to an eighth of
 * the CMA area).
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
	uint64_t populated;	/* destination pages mapped in bulk during ucma_alloc() */
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
			uint64_t m0, m1, t0, t1, p0, p1;

			ucma_stat("pgmigrate_populated", &p0);
			ucma_stat("pgmigrate_success", &m0);
			t0 = tu_now_ns();
			dev = ucma_alloc(16u << 20, 0, UCMA_ALLOC_POPULATE);
			t1 = tu_now_ns();
			ucma_stat("pgmigrate_success", &m1);
			ucma_stat("pgmigrate_populated", &p1);
			r->populated += p1 - p0;
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

/* Rounds of the throughput measurement: the first pays the kernel's
 * first touch of destination pages that were purged or never used; the
 * later ones show what migration itself costs. */
#define TP_ROUNDS 7

/* Fill the CMA area of the arena with objects of @obj bytes, each
 * stamped. */
static unsigned fill_cma(ucma_handle_t *h, unsigned max, size_t obj)
{
	unsigned n = 0;

	while (n < max) {
		ucma_handle_t x = ucma_halloc(obj, 0);
		void *p;

		if (!x)
			break;
		p = ucma_pin(x, 0);
		memset(p, (int)n, obj);
		ucma_unpin(x);
		h[n++] = x;
	}
	return n;
}

/* Every object still holds its stamp after being moved. */
static bool stamps_intact(const ucma_handle_t *h, unsigned n, size_t obj)
{
	for (unsigned i = 0; i < n; i++) {
		const unsigned char *p = ucma_pin(h[i], 0);
		bool ok = p && p[0] == (unsigned char)i && p[obj / 2] == (unsigned char)i &&
			  p[obj - 1] == (unsigned char)i;

		ucma_unpin(h[i]);
		if (!ok)
			return false;
	}
	return true;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/*
 * One round of the throughput measurement: fill the CMA area with
 * objects of @obj bytes, take half of it with one ucma_alloc() (every
 * object there is migrated to the NORMAL zone), then memcpy() as many
 * bytes between two warmed buffers, right after, so both see the same
 * machine (the fastest of three copies); release and free everything.
 * Returns migration / memcpy, or exits when ucma_alloc() fails.
 */
static double tp_round(int r, const char *what, size_t cma, size_t obj, ucma_handle_t *h,
		       unsigned max, char *src, char *dst)
{
	double mig_gbs, memcpy_gbs = 0, ratio;
	uint64_t m0, m1, hb0, hb1, t0, t1;
	size_t moved;
	unsigned n;
	void *b;

	n = fill_cma(h, max, obj);
	ucma_stat("pgmigrate_success", &m0);
	ucma_stat("pgmigrate_copy_helped_bytes", &hb0);
	t0 = tu_now_ns();
	b = ucma_alloc(cma / 2, 0, 0);
	t1 = tu_now_ns();
	ucma_stat("pgmigrate_success", &m1);
	ucma_stat("pgmigrate_copy_helped_bytes", &hb1);
	if (!b) {
		/* A failed call moved objects in vain: no throughput. */
		printf("round %d: ucma_alloc(%zu MiB) over %u live %zu KiB objects failed: %s "
		       "(%llu objects moved first); no throughput measured\n",
		       r, (cma / 2) >> 20, n, obj >> 10, strerror(errno),
		       (unsigned long long)(m1 - m0));
		exit(1);
	}
	moved = (size_t)(m1 - m0) * obj;
	mig_gbs = (double)moved / (double)(t1 - t0);
	/* The best of three: a copy that lost the CPU for a moment must not
	 * make migration look faster than it is. */
	for (int k = 0; k < 3; k++) {
		double gbs;

		t0 = tu_now_ns();
		memcpy(dst, src, cma / 2);
		t1 = tu_now_ns();
		gbs = (double)(cma / 2) / (double)(t1 - t0);
		if (gbs > memcpy_gbs)
			memcpy_gbs = gbs;
	}
	ratio = mig_gbs / memcpy_gbs;
	printf("round %d%s: %zu MiB moved: %.2f GB/s; memcpy %.2f GB/s; ratio %.2f; %.0f%% "
	       "copied by helpers; data %s\n",
	       r, what, moved >> 20, mig_gbs, memcpy_gbs, ratio,
	       moved ? 100.0 * (double)(hb1 - hb0) / (double)moved : 0.0,
	       stamps_intact(h, n, obj) ? "intact" : "CORRUPTED");
	ucma_release(b);
	for (unsigned i = 0; i < n; i++)
		ucma_hfree(h[i]);
	/* The old copies' space is free only after a grace period. */
	ucma_compact(UCMA_COMPACT_SYNC_FULL);
	return ratio;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return v[(n - 1) / 2];
}

/*
 * Migration throughput vs memcpy, in one process: TP_ROUNDS rounds over
 * 64 KiB objects (the first reported apart, the goal judged on the
 * median of the others); then rounds over large objects (1 MiB, or
 * UCMA_BENCH_ZC_LARGE_KB) that alternate the copy helpers off and on
 * (UCMA_COPY_HELPERS), so that both see the same machine.
 */
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
	const char *e = getenv("UCMA_BENCH_ZC_LARGE_KB");
	size_t cma = (arena_mb / 2) << 20, large = (e ? strtoul(e, NULL, 10) : 1024) << 10;
	unsigned max = (unsigned)(cma / 65536), helpers;
	double ratio[TP_ROUNDS], off[TP_ROUNDS], on[TP_ROUNDS];
	ucma_handle_t *h;
	char *src, *dst;

	if (ucma_init(&cfg) != 0)
		exit(1);
	helpers = ucma_opt.copy_helpers;
	h = calloc(max, sizeof(*h));
	src = malloc(cma / 2);
	dst = malloc(cma / 2);
	if (!h || !src || !dst || large < 65536 || large > cma / 8)
		exit(1);
	memset(src, 1, cma / 2);
	memset(dst, 2, cma / 2);
	printf("\nmigration: %u rounds of ucma_alloc(%zu MiB) over a CMA area full of 64 KiB "
	       "objects, each followed by the fastest of three memcpy() of as many bytes\n",
	       TP_ROUNDS, (cma / 2) >> 20);
	for (int r = 0; r < TP_ROUNDS; r++)
		ratio[r] = tp_round(r + 1, "", cma, 65536, h, max, src, dst);
	printf("migration / memcpy: first round %.2f, median of rounds 2-%d %.2f (goal 0.8)\n",
	       ratio[0], TP_ROUNDS, median(ratio + 1, TP_ROUNDS - 1));
	printf("(arena prefaulted; ucma_alloc's time includes isolating, scanning, allocating the "
	       "new copies and an RCU grace period; the first round also pays the kernel's first "
	       "touch of destination pages)\n");
	printf("\nmigration of %zu KiB objects, the same rounds, copy helpers off and on in turn "
	       "(UCMA_COPY_HELPERS %u)\n",
	       large >> 10, helpers);
	for (int r = 0; r < TP_ROUNDS; r++) {
		ucma_opt.copy_helpers = 0;
		off[r] = tp_round(r + 1, ", helpers off", cma, large, h, (unsigned)(cma / large),
				  src, dst);
		ucma_opt.copy_helpers = helpers;
		on[r] = tp_round(r + 1, ", helpers on", cma, large, h, (unsigned)(cma / large),
				 src, dst);
	}
	printf("migration / memcpy of %zu KiB objects, median of rounds 2-%d: helpers off %.2f, "
	       "on %.2f\n",
	       large >> 10, TP_ROUNDS, median(off + 1, TP_ROUNDS - 1),
	       median(on + 1, TP_ROUNDS - 1));
	free(src);
	free(dst);
}

/* Rounds of the fresh-destination measurement, alternating the two ways. */
#define FRESH_ROUNDS 40

static unsigned populate_calls;

static int count_populate(void *addr, size_t len, int advice)
{
	populate_calls += advice == MADV_POPULATE_WRITE;
	return madvise(addr, len, advice);
}

static int refuse_populate(void *addr, size_t len, int advice)
{
	if (advice == MADV_POPULATE_WRITE) {
		errno = EINVAL;	/* as a kernel before 5.14 answers */
		return -1;
	}
	return madvise(addr, len, advice);
}

/*
 * ucma_alloc(16 MiB) whose objects move to pages never touched or given
 * back to the kernel (rare in the workload above, where the CMA area is
 * on hugetlb pages as root and never purged): each round fills the lowest
 * 16 MiB of a CMA area on private memory (transparent huge pages, split
 * into 4 KiB pages where pieces were purged) with objects of 4-256 KiB,
 * gives every free page back (as the decay purge does after its time),
 * then takes that run.  Rounds alternate between mapping the destinations
 * in bulk before the copies (MADV_POPULATE_WRITE) and leaving the copies
 * to fault page by page (the advice refused through the ucma_os table, as
 * a kernel that lacks it does), in one process.
 */
static void fresh_destinations(size_t arena_mb)
{
	struct ucma_config cfg = {
		.arena_size = arena_mb << 20,
		.cma_size = (arena_mb / 2) << 20,
		.hugepages = UCMA_BACKING_THP,	/* private memory, purged */
		.hugepages_normal = UCMA_BACKING_NONE,
	};
	static ucma_handle_t h[8192];
	uint64_t lat[2][FRESH_ROUNDS], pop[2] = { 0, 0 }, moved[2] = { 0, 0 }, calls = 0;
	unsigned nlat[2] = { 0, 0 };

	if (ucma_init(&cfg) != 0)
		exit(1);
	for (int r = 0; r < FRESH_ROUNDS; r++) {
		int way = r % 2;	/* 0: populate in bulk, 1: copies fault */
		uint64_t bytes = 0, p0, p1, m0, m1, t0, t1;
		unsigned n = 0;
		void *b;

		while (bytes < (15u << 20) && n < 8192) {
			uint32_t size = 4096u << (n % 7);
			void *p;

			h[n] = ucma_halloc(size, 0);
			if (!h[n])
				break;
			p = ucma_pin(h[n], 0);
			memset(p, (int)n, size);
			ucma_unpin(h[n]);
			bytes += size;
			n++;
		}
		/* The last round's objects wait for a grace period; then
		 * every free page goes back to the kernel, as after the decay
		 * time (ucma_trim() purges the NORMAL zone only). */
		ucma_defer_drain();
		ucma_zone_purge(&ucma_arena_peek()->zones[UCMA_ZONE_CMA], true);
		ucma_zone_purge(&ucma_arena_peek()->zones[UCMA_ZONE_NORMAL], true);
		ucma_os.madvise = way == 1 ? refuse_populate : count_populate;
		populate_calls = 0;
		ucma_stat("pgmigrate_populated", &p0);
		ucma_stat("pgmigrate_success", &m0);
		t0 = tu_now_ns();
		b = ucma_alloc(16u << 20, 0, 0);
		t1 = tu_now_ns();
		ucma_stat("pgmigrate_populated", &p1);
		ucma_stat("pgmigrate_success", &m1);
		ucma_os_reset();
		if (!b) {
			printf("fresh destinations: round %d: ucma_alloc(16 MiB) failed: %s\n", r + 1,
			       strerror(errno));
			exit(1);
		}
		for (unsigned i = 0; i < n; i++) {
			const unsigned char *p = ucma_pin(h[i], 0);
			bool ok = p && p[0] == (unsigned char)i;

			ucma_unpin(h[i]);
			if (!ok) {
				printf("fresh destinations: object %u CORRUPTED\n", i);
				exit(1);
			}
			ucma_hfree(h[i]);
		}
		ucma_release(b);
		if (m1 == m0)
			continue;	/* the run was free: nothing measured */
		lat[way][nlat[way]++] = t1 - t0;
		if (way == 0)
			calls += populate_calls;
		pop[way] += p1 - p0;
		moved[way] += m1 - m0;
	}
	printf("\nfresh destinations: %d rounds of ucma_alloc(16 MiB) over objects of 4-256 KiB whose "
	       "copies go to pages given back to the kernel (CMA area on private memory, %s), "
	       "alternating:\n",
	       FRESH_ROUNDS, ucma_backing_name("cma"));
	for (int w = 0; w < 2; w++)
		printf("%s: p50/p99 %.0f / %.0f us over %u rounds, %.0f objects moved and %.0f pages "
		       "populated per round\n",
		       w == 0 ? "destinations populated in bulk" : "copies fault page by page  ",
		       pct(lat[w], nlat[w], 0.5), pct(lat[w], nlat[w], 0.99), nlat[w],
		       nlat[w] ? (double)moved[w] / nlat[w] : 0, nlat[w] ? (double)pop[w] / nlat[w] : 0);
	if (nlat[0])
		printf("populated in %.1f calls of MADV_POPULATE_WRITE per round\n",
		       (double)calls / nlat[0]);
	if (nlat[0] && nlat[1])
		printf("median faulting / median populated: %.2f\n",
		       pct(lat[1], nlat[1], 0.5) / pct(lat[0], nlat[0], 0.5));
}

/* The workload under each policy, and its table. */
static int workloads(size_t arena_mb, uint64_t ops)
{
	struct result *res = mmap(NULL, NRUNS * sizeof(struct result), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	/* The third run is the first with the arena prefaulted (UCMA_POPULATE):
	 * what a latency-sensitive user does, and how much of the migrating
	 * latency is the kernel's first-touch faults of the new copies. */
	static const char *const names[NRUNS] = { "lend (ZONE_CMA)", "reserved (static)",
						  "lend, prefaulted" };
	static const int policy[NRUNS] = { UCMA_CMA_LEND, UCMA_CMA_RESERVED, UCMA_CMA_LEND };
	pid_t pid;
	int st;

	if (res == MAP_FAILED) {
		printf("mmap of the results: %s\n", strerror(errno));
		return 1;
	}
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
	printf("\ndestination pages mapped in bulk before their copies (fresh: never touched or "
	       "purged), all ucma_alloc() calls: %llu, %llu, %llu\n",
	       (unsigned long long)res[0].populated, (unsigned long long)res[1].populated,
	       (unsigned long long)res[2].populated);
	return 0;
}

/* Run @fn(@arena_mb) in a child process, with an arena of its own. */
static void in_child(void (*fn)(size_t), size_t arena_mb)
{
	pid_t pid;
	int st;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		fn(arena_mb);
		fflush(stdout);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, &st, 0);
}

int main(void)
{
	const char *e = getenv("UCMA_BENCH_ARENA_MB");
	size_t arena_mb = e ? strtoul(e, NULL, 10) : 512;
	uint64_t ops = getenv("UCMA_BENCH_OPS") ? strtoull(getenv("UCMA_BENCH_OPS"), NULL, 10)
						: 400000;
	char why[256];

	if (tu_hugepages_reserve(2048, (long)(arena_mb / 2 / 2), why, sizeof(why)) != 0)
		printf("note: CMA area not on reserved 2 MiB hugetlb pages: %s\n", why);
	printf("zone_cma: arena %zu MiB, CMA area %zu MiB, %llu operations per run, "
	       "movable working set %zu MiB\n",
	       arena_mb, arena_mb / 2, (unsigned long long)ops, arena_mb * 3 / 4);
	if (tu_bench_part("workload") && workloads(arena_mb, ops) != 0)
		return 1;
	if (tu_bench_part("throughput"))
		in_child(throughput, arena_mb);
	if (tu_bench_part("fresh"))
		in_child(fresh_destinations, arena_mb);
	return 0;
}
