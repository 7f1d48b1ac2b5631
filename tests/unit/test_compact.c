/*
 * test_compact.c - compaction: the scanners, skip hints and cached
 * positions, orders, deferral, slab consolidation, and the background
 * thread's life (start, fault, fork, UCMA_COMPACT=off).
 *
 * A 128 MiB arena (64 MiB CMA, 64 MiB NORMAL) is filled with movable
 * objects stamped with a checksum pattern, then fragmented by freeing
 * half of them.  Every test checks that the data survives and that
 * pinned objects stay where they are.  The background thread is stopped
 * for the deterministic tests and started again for its own.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "handle.h"
#include "pcp.h"
#include "rcu.h"
#include "tap.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ARENA (128u << 20)
#define CMA   (64u << 20)
#define MAXOBJ 60000

static struct ucma_arena *a;
static struct ucma_zone *zcma, *znormal;
static ucma_handle_t h[MAXOBJ];
static uint32_t sizes[MAXOBJ];
static bool stamp_whole[MAXOBJ];
static void *pin_addr[MAXOBJ];	/* test_orders: where pinned objects were */
static int nobj;

/*
 * ThreadSanitizer cannot follow threads created in the child of a
 * multi-threaded process: under it, no child starts a thread.
 */
#ifdef UCMA_TSAN
static const bool under_tsan = true;
#else
static const bool under_tsan = false;
#endif

static int count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	ucma_stat(name, &v);
	return v;
}

static uint64_t free_blocks(unsigned order)
{
	uint64_t c[UCMA_NR_ORDERS], n = 0;

	for (int z = 0; z < UCMA_ZONE_NR; z++) {
		ucma_zone_free_counts(&a->zones[z], c);
		for (unsigned o = order; o < UCMA_NR_ORDERS; o++)
			n += c[o] << (o - order);
	}
	return n;
}

/* One object, stamped whole (or head and tail only, for speed). */
static bool add_object(uint32_t sz, bool whole)
{
	ucma_handle_t x = ucma_halloc(sz, 0);
	void *p;

	if (!x || nobj == MAXOBJ) {
		if (x)
			ucma_hfree(x);
		return false;
	}
	p = ucma_pin(x, 0);
	if (whole) {
		tu_fill(p, sz, (uint64_t)nobj);
	} else {
		tu_fill(p, sz < 64 ? sz : 64, (uint64_t)nobj);
		if (sz > 128)
			tu_fill((char *)p + sz - 64, 64, (uint64_t)nobj + 7);
	}
	ucma_unpin(x);
	h[nobj] = x;
	sizes[nobj] = sz;
	stamp_whole[nobj++] = whole;
	return true;
}

static bool object_ok(int i, const char *p)
{
	uint32_t sz = sizes[i];

	if (!p)
		return false;
	if (stamp_whole[i])
		return tu_check(p, sz, (uint64_t)i);
	if (!tu_check(p, sz < 64 ? sz : 64, (uint64_t)i))
		return false;
	return sz <= 128 || tu_check(p + sz - 64, 64, (uint64_t)i + 7);
}

static int verify_all(void)
{
	int bad = 0;

	ucma_read_lock();
	for (int i = 0; i < nobj; i++)
		if (h[i] && !object_ok(i, ucma_deref(h[i])))
			bad++;
	ucma_read_unlock();
	return bad;
}

static void free_all(void)
{
	for (int i = 0; i < nobj; i++) {
		if (h[i]) {
			while (ucma_unpin(h[i]) == 0)
				;
			ucma_hfree(h[i]);
		}
		h[i] = 0;
	}
	nobj = 0;
	ucma_defer_drain();
}

/* Mixed sizes, mostly page runs, until @bytes are live or memory ends. */
static void fill_mixed(uint64_t bytes, uint64_t *seed)
{
	uint64_t live = 0;

	while (live < bytes) {
		uint64_t r = tu_rand(seed);
		uint32_t sz = r % 4 == 0 ? 16u + (uint32_t)(r >> 8) % 4080u
					 : 4096u * (2u + (uint32_t)(r >> 8) % 63u);

		if (!add_object(sz, true))
			break;
		live += sz;
	}
}

static void free_random_half(uint64_t *seed)
{
	for (int i = 0; i < nobj; i++) {
		if (h[i] && tu_rand(seed) % 2) {
			ucma_hfree(h[i]);
			h[i] = 0;
		}
	}
	ucma_defer_drain();
}

static uint32_t pfn_of(int i)
{
	const void *p;
	uint32_t pfn;

	ucma_read_lock();
	p = ucma_deref(h[i]);
	pfn = p ? ucma_addr_to_pfn(a, p) : UCMA_PFN_NONE;
	ucma_read_unlock();
	return pfn;
}

static uint16_t pb_free(uint32_t pfn)
{
	uint16_t n;

	pthread_mutex_lock(&ucma_pfn_zone(a, pfn)->lock);
	n = ucma_pfn_block(a, pfn)->nr_free;
	pthread_mutex_unlock(&ucma_pfn_zone(a, pfn)->lock);
	return n;
}

/* ------------------------------------------------------------------------ */

static void test_bad_input(void)
{
	int n0 = count_threads();

	ok(ucma_compact(99) == -1 && errno == EINVAL, "ucma_compact(99): EINVAL");
	ok(ucma_compact(-1) == -1 && errno == EINVAL, "ucma_compact(-1): EINVAL");
	ok(ucma_compact_order(10, UCMA_COMPACT_ASYNC) == -1 && errno == EINVAL,
	   "ucma_compact_order(10): EINVAL");
	ok(ucma_compact_order(2, 7) == -1 && errno == EINVAL,
	   "ucma_compact_order with an unknown priority: EINVAL");
	ucma_read_lock();
	ok(ucma_compact(UCMA_COMPACT_ASYNC) == -1 && errno == EDEADLK,
	   "ucma_compact inside ucma_read_lock: EDEADLK");
	ok(ucma_compact_order(9, UCMA_COMPACT_SYNC_FULL) == -1 && errno == EDEADLK,
	   "ucma_compact_order inside ucma_read_lock: EDEADLK");
	ucma_read_unlock();
	ok(ucma_compact(UCMA_COMPACT_SYNC_FULL) == 0, "ucma_compact on an empty arena");
	ok(ucma_compact_order(9, UCMA_COMPACT_ASYNC) == 0, "a free pageblock exists already");
	ok(count_threads() == n0 && !ucma_compactd_running(),
	   "compaction alone starts no thread (%d threads)", count_threads());
}

/* The thread starts with the first movable object, not before. */
static void test_thread_start(void)
{
	int n0 = count_threads(), n1;
	ucma_handle_t x;

	ok(!ucma_compactd_running(), "no compaction thread before the first halloc (%d threads)",
	   n0);
	x = ucma_halloc(100, 0);
	n1 = count_threads();
	/* More than one new thread only under ThreadSanitizer (its own). */
	ok(x && ucma_compactd_running() && (n1 == n0 + 1 || (under_tsan && n1 > n0)),
	   "the first halloc starts it (%d threads)", n1);
	ucma_hfree(x);
	x = ucma_halloc(100, 0);
	ok(count_threads() == n1, "and only one");
	ucma_hfree(x);
}

/* A re-executed copy of this program with UCMA_COMPACT=off. */
static int compact_off_child(void)
{
	struct ucma_config cfg = { .arena_size = 16u << 20, .cma_size = 8u << 20,
				   .hugepages = UCMA_BACKING_NONE };
	int n0;
	ucma_handle_t x;

	if (ucma_init(&cfg) != 0)
		return 2;
	n0 = count_threads();
	x = ucma_halloc(1000, 0);
	usleep(20000);
	if (!x || ucma_opt.compact || ucma_compactd_running() || count_threads() != n0)
		return 1;
	return ucma_compact(UCMA_COMPACT_SYNC_FULL) == 0 ? 0 : 3;
}

static void test_compact_off(void)
{
	pid_t pid = fork();
	int status = -1;

	if (pid == 0) {
		char *argv[] = { "test_compact", "--compact-off-child", NULL };
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		setenv("UCMA_COMPACT", "off", 1);
		execv("/proc/self/exe", argv);
		_exit(4);
	}
	waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "UCMA_COMPACT=off: halloc starts no thread, explicit compaction works (status %d)",
	   status);
}

/* In a forked child: no thread there, and creating one fails. */
static void test_create_fails(void)
{
	int pipefd[2];
	pid_t pid;
	int status = -1;
	char buf[1024];
	size_t len = 0;
	ssize_t n;
	int lines = 0;

	if (pipe(pipefd) != 0)
		bail_out("pipe: %s", strerror(errno));
	pid = fork();
	if (pid == 0) {
		int bad = 0;

		close(pipefd[0]);
		dup2(pipefd[1], 2);
		if (ucma_compactd_running() || count_threads() != 1)
			bad |= 1;
		ucma_os.thread_create = tu_thread_create_fails;
		for (int i = 0; i < 3; i++) {
			ucma_handle_t x = ucma_halloc(5000, 0);

			if (!x)
				bad |= 2;
			ucma_hfree(x);
		}
		if (ucma_compactd_running() || count_threads() != 1)
			bad |= 4;
		if (ucma_compact(UCMA_COMPACT_SYNC_LIGHT) != 0)
			bad |= 8;
		_exit(bad);
	}
	close(pipefd[1]);
	while (len < sizeof(buf) - 1 && (n = read(pipefd[0], buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	for (char *p = buf; (p = strstr(p, "compaction thread")); p++)
		lines++;
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "forked child: no thread until halloc; a failed thread creation leaves "
	   "allocation and compaction working (status %d)",
	   status);
	ok(lines == 1, "one message about it (%d): %.*s", lines, (int)strcspn(buf, "\n"), buf);
}

static void test_priorities(void)
{
	static const char *name[] = { "ASYNC", "SYNC_LIGHT", "SYNC_FULL" };

	for (int prio = UCMA_COMPACT_ASYNC; prio <= UCMA_COMPACT_SYNC_FULL; prio++) {
		uint64_t seed = 1000 + (uint64_t)prio, before, after, mig0, gp;
		int pinned[8], np = 0, moved_pinned = 0;
		void *at[8];

		fill_mixed((uint64_t)CMA / 100 * 95, &seed);
		free_random_half(&seed);
		for (int i = nobj / 9; i < nobj && np < 8; i += nobj / 9) {
			while (i < nobj && !h[i])
				i++;
			if (i < nobj) {
				at[np] = ucma_pin(h[i], 0);
				pinned[np++] = i;
			}
		}
		before = free_blocks(9);
		mig0 = stat_of("pgmigrate_success");
		/* This thread's own waits: the compaction thread may wait
		 * for grace periods of its own meanwhile. */
		gp = ucma_rcu_own_grace_periods();
		ok(ucma_compact(prio) == 0, "ucma_compact(%s)", name[prio]);
		gp = ucma_rcu_own_grace_periods() - gp;
		after = free_blocks(9);
		ok(after > before, "%s: free order-9 blocks %llu -> %llu (%llu objects moved)",
		   name[prio], (unsigned long long)before, (unsigned long long)after,
		   (unsigned long long)(stat_of("pgmigrate_success") - mig0));
		/* SYNC_FULL waits once per 8 pageblocks it empties, and at the
		 * end; the others once per pageblock they move objects from. */
		if (prio == UCMA_COMPACT_SYNC_FULL)
			ok(after - before >= 8 && gp <= (after - before) / 2,
			   "SYNC_FULL: %llu grace periods for %llu pageblocks emptied",
			   (unsigned long long)gp, (unsigned long long)(after - before));
		else
			diag("%s: %llu grace periods for %llu pageblocks emptied", name[prio],
			     (unsigned long long)gp, (unsigned long long)(after - before));
		ok(verify_all() == 0, "%s: every object keeps its checksum", name[prio]);
		ucma_read_lock();
		for (int k = 0; k < np; k++)
			moved_pinned += ucma_deref(h[pinned[k]]) != at[k] ||
					!object_ok(pinned[k], at[k]);
		ucma_read_unlock();
		ok(np == 8 && moved_pinned == 0, "%s: no pinned object moved (%d of %d)",
		   name[prio], moved_pinned, np);
		free_all();
	}
}

/*
 * Cached positions: an ASYNC run stops after a few pageblocks and caches
 * where; the pinned pageblocks it passed get skip hints.  Once the pins
 * are gone, later ASYNC runs still do not look there; SYNC_FULL does.
 */
static void test_whole_zone(void)
{
	uint64_t seed = 77;
	uint32_t pb[2] = { zcma->start_pfn + 1 * UCMA_PAGEBLOCK_PAGES,
			   zcma->start_pfn + 3 * UCMA_PAGEBLOCK_PAGES };
	int pin[2] = { -1, -1 };
	unsigned saved = ucma_compact_async_pageblocks;
	bool still = true;

	fill_mixed((uint64_t)CMA / 100 * 95, &seed);
	for (int i = 1; i < nobj; i += 2) {
		ucma_hfree(h[i]);
		h[i] = 0;
	}
	ucma_defer_drain();
	for (int i = 0; i < nobj; i += 2) {
		uint32_t pfn = pfn_of(i);

		for (int k = 0; k < 2; k++)
			if (pin[k] < 0 && pfn >= pb[k] && pfn < pb[k] + UCMA_PAGEBLOCK_PAGES)
				pin[k] = i;
	}
	if (pin[0] < 0 || pin[1] < 0) {
		skip(5, "no objects in the chosen pageblocks");
		free_all();
		return;
	}
	ucma_pin(h[pin[0]], 0);
	ucma_pin(h[pin[1]], 0);
	ucma_compact_async_pageblocks = 8;
	ucma_compact(UCMA_COMPACT_ASYNC);
	ok(zcma->compact_cached_migrate_pfn >= zcma->start_pfn + 8 * UCMA_PAGEBLOCK_PAGES &&
		   (ucma_pfn_block(a, pb[0])->flags & UCMA_PB_SKIP) &&
		   (ucma_pfn_block(a, pb[1])->flags & UCMA_PB_SKIP),
	   "an ASYNC run cached its position (pageblock %u) past two pinned pageblocks, "
	   "now hinted",
	   (zcma->compact_cached_migrate_pfn - zcma->start_pfn) / UCMA_PAGEBLOCK_PAGES);
	for (int k = 0; k < 2; k++) {
		ucma_unpin(h[pin[k]]);
		ucma_hfree(h[pin[k]]);
		h[pin[k]] = 0;
	}
	ucma_defer_drain();
	for (int round = 0; round < 12; round++) {
		ucma_compact(UCMA_COMPACT_ASYNC);
		still &= pb_free(pb[0]) < UCMA_PAGEBLOCK_PAGES;
		still &= pb_free(pb[1]) < UCMA_PAGEBLOCK_PAGES;
	}
	ok(still, "after the pins are gone, 12 more ASYNC runs leave those pageblocks alone "
		  "(%u and %u pages free)",
	   pb_free(pb[0]), pb_free(pb[1]));
	ok(ucma_compact(UCMA_COMPACT_SYNC_FULL) == 0, "ucma_compact(SYNC_FULL)");
	/* The runs compaction freed may wait on per-CPU lists (pcp.c), which
	 * the pageblock's free count does not see: back to the buddy first. */
	ucma_pcp_drain_zone(zcma);
	ok(pb_free(pb[0]) == UCMA_PAGEBLOCK_PAGES && pb_free(pb[1]) == UCMA_PAGEBLOCK_PAGES,
	   "the whole-zone run empties them (%u and %u pages free)", pb_free(pb[0]),
	   pb_free(pb[1]));
	ok(verify_all() == 0, "every object keeps its checksum");
	ucma_compact_async_pageblocks = saved;
	free_all();
}

/* Pins everywhere: no pageblock can come free, small blocks can. */
static int fill_pinned_8k(void)
{
	int npinned = 0;
	uint32_t last_pb = UINT32_MAX;

	/*
	 * The last, failing halloc would compact directly: not here.  Filled
	 * until a fill after draining the per-CPU lists adds nothing: a run
	 * another CPU's list held when a fill ended (the thread moved) would
	 * stay free, and the buddy could merge it with a freed neighbour.
	 * Two fills were not always enough under ThreadSanitizer on a busy
	 * machine (an order-2 block was left once in tsan-repeat).
	 */
	ucma_opt.compact_direct = false;
	for (bool added = true; added;) {
		ucma_pcp_drain_zone(zcma);
		ucma_pcp_drain_zone(znormal);
		added = false;
		while (add_object(8192, false))
			added = true;
	}
	ucma_opt.compact_direct = true;
	/*
	 * Every other 8 KiB block by address, not by allocation order: two
	 * buddies are then never both freed, however the allocations were
	 * spread (the per-CPU page lists hand out blocks in batches, and
	 * allocation order and address order part where a batch ends).
	 */
	for (int i = 0; i < nobj; i++) {
		uint32_t pfn = pfn_of(i);

		if (pfn != UCMA_PFN_NONE && (pfn >> 1) & 1) {
			ucma_hfree(h[i]);
			h[i] = 0;
		}
	}
	ucma_defer_drain();
	for (int i = 0; i < nobj; i++) {
		uint32_t b;

		if (!h[i])
			continue;
		b = pfn_of(i) >> UCMA_PAGEBLOCK_ORDER;
		if (b != last_pb) {
			pin_addr[i] = ucma_pin(h[i], 0);
			last_pb = b;
			npinned++;
		}
	}
	return npinned;
}

static int pinned_moved(void)
{
	int moved = 0;

	ucma_read_lock();
	for (int i = 0; i < nobj; i++) {
		struct ucma_hentry *e;

		if (!h[i])
			continue;
		e = ucma_handle_entry((uint32_t)h[i]);
		if (atomic_load(&e->state) & UCMA_HS_PINS)
			moved += ucma_deref(h[i]) != pin_addr[i] || !object_ok(i, pin_addr[i]);
	}
	ucma_read_unlock();
	return moved;
}

/* Free blocks per order, for a failed check on them. */
static void diag_free_counts(void)
{
	struct ucma_zone *zones[2] = { zcma, znormal };

	for (int k = 0; k < 2; k++) {
		uint64_t c[UCMA_NR_ORDERS];

		ucma_zone_free_counts(zones[k], c);
		diag("%s: free blocks of order 0-3: %llu %llu %llu %llu, %llu pages on "
		     "per-CPU lists, %d objects",
		     zones[k]->name, (unsigned long long)c[0], (unsigned long long)c[1],
		     (unsigned long long)c[2], (unsigned long long)c[3],
		     (unsigned long long)ucma_pcp_pages(zones[k]), nobj);
	}
}

static void test_orders(void)
{
	int npinned = fill_pinned_8k(), hinted = 0;
	uint64_t stall0;

	diag("%d objects of 8 KiB, every other one freed, %d pinned (one per pageblock)", nobj,
	     npinned);
	if (!ok(!ucma_zone_has_free_block(zcma, 2) && !ucma_zone_has_free_block(znormal, 2),
		"no free block of order 2 anywhere"))
		diag_free_counts();
	ok(ucma_compact_order(9, UCMA_COMPACT_ASYNC) == -1 && errno == ENOMEM,
	   "order 9 at ASYNC: ENOMEM, every pageblock holds a pin");
	ok(ucma_compact_order(9, UCMA_COMPACT_SYNC_LIGHT) == -1 && errno == ENOMEM,
	   "order 9 at SYNC_LIGHT: ENOMEM");
	for (uint32_t b = zcma->start_pfn; b < zcma->end_pfn; b += UCMA_PAGEBLOCK_PAGES) {
		uint8_t f = ucma_pfn_block(a, b)->flags;

		hinted += (f & UCMA_PB_SKIP) && (f >> UCMA_PB_SKIP_ORDER_SHIFT) == 9;
	}
	ok(hinted > 0, "%d CMA pageblocks carry an order-9 skip hint", hinted);
	stall0 = stat_of("pgmigrate_success");
	ok(ucma_compact_order(2, UCMA_COMPACT_ASYNC) == 0,
	   "order 2 at ASYNC succeeds regardless of those hints");
	ok(ucma_zone_has_free_block(zcma, 2) || ucma_zone_has_free_block(znormal, 2),
	   "a free block of order 2 exists (%llu objects moved)",
	   (unsigned long long)(stat_of("pgmigrate_success") - stall0));
	ok(pinned_moved() == 0 && verify_all() == 0, "pinned objects stayed, data intact");
}

/* One direct compaction attempt for order 9 in the CMA zone. */
static bool direct_attempt(bool *ran)
{
	struct ucma_compact_direct dc;
	bool got = false;

	*ran = false;
	ucma_compact_direct_init(&dc, 9, 1u << UCMA_ZONE_CMA);
	while (!got && ucma_compact_direct_next(&dc)) {
		*ran = true;
		got = ucma_zone_has_free_block(zcma, 9);
	}
	ucma_compact_direct_done(&dc, got);
	return got;
}

static void test_deferral(void)
{
	static const bool expect[] = { true, false, true, false, false, false, true };
	bool pattern = true, ran, got = false;
	unsigned shifts[UCMA_ARRAY_SIZE(expect)];
	uint64_t stall0 = stat_of("compact_stall"), fail0 = stat_of("compact_fail"), runs = 0;
	int tries = 0;

	/* test_orders() left a pin in every pageblock: order 9 cannot succeed. */
	zcma->compact_defer_shift = 0;
	zcma->compact_considered = 0;
	zcma->compact_order_failed = UCMA_MAX_ORDER + 1;
	for (size_t k = 0; k < UCMA_ARRAY_SIZE(expect); k++) {
		got |= direct_attempt(&ran);
		pattern &= ran == expect[k];
		runs += ran;
		shifts[k] = zcma->compact_defer_shift;
	}
	ok(!got && pattern, "failures back off: attempts run, skip 1, run, skip 3, run");
	ok(shifts[0] == 1 && shifts[2] == 2 && shifts[6] == 3 && zcma->compact_order_failed == 9,
	   "defer shift %u %u %u, order_failed %d", shifts[0], shifts[2], shifts[6],
	   zcma->compact_order_failed);
	ok(stat_of("compact_stall") - stall0 == runs && stat_of("compact_fail") - fail0 == runs,
	   "compact_stall and compact_fail count the %llu attempts that ran",
	   (unsigned long long)runs);
	{
		struct ucma_compact_direct dc;

		ucma_opt.compact_direct = false;
		ucma_compact_direct_init(&dc, 9, 1u << UCMA_ZONE_CMA);
		ok(!ucma_compact_direct_next(&dc), "UCMA_COMPACT_DIRECT=off: no direct compaction");
		ucma_opt.compact_direct = true;
	}
	/* Drop the pins: the next attempt the deferral lets through succeeds. */
	for (int i = 0; i < nobj; i++)
		if (h[i])
			while (ucma_unpin(h[i]) == 0)
				;
	do {
		got = direct_attempt(&ran);
		tries++;
	} while (!ran && tries < 20);
	ok(ran && got, "without pins the next attempt that runs succeeds (after %d)", tries);
	ok(zcma->compact_defer_shift == 0 && zcma->compact_considered == 0 &&
		   zcma->compact_order_failed == 10,
	   "and the deferral is reset");
	ok(verify_all() == 0, "data intact");
	free_all();
}

static unsigned count_mslab_runs(void)
{
	unsigned n = 0;

	for (int z = 0; z < UCMA_ZONE_NR; z++) {
		struct ucma_zone *zz = &a->zones[z];

		pthread_mutex_lock(&zz->lock);
		for (uint32_t pfn = zz->start_pfn; pfn < zz->end_pfn;) {
			struct ucma_page *p = &a->pages[pfn];

			if (p->kind == UCMA_PK_FREE) {
				pfn += 1u << p->order;
			} else if (p->kind == UCMA_PK_RUN) {
				n += p->owner_type == UCMA_OWN_MSLAB;
				pfn += p->aux;
			} else {
				pfn++;
			}
		}
		pthread_mutex_unlock(&zz->lock);
	}
	return n;
}

static void test_consolidation(void)
{
	uint64_t seed = 5;
	unsigned kept = count_mslab_runs(), before, after, emptied;

	/* kept: the one empty slab each size class keeps for reuse */
	for (int i = 0; i < 20000; i++)
		add_object(200 + (uint32_t)(tu_rand(&seed) % 50), true);	/* two classes */
	for (int i = 0; i < nobj; i++) {
		if (tu_rand(&seed) % 10) {
			ucma_hfree(h[i]);
			h[i] = 0;
		}
	}
	ucma_defer_drain();
	before = count_mslab_runs();
	emptied = ucma_mslab_consolidate(UCMA_COMPACT_SYNC_LIGHT);
	after = count_mslab_runs();
	ok(emptied > 0 && after - kept < (before - kept) / 3,
	   "consolidation empties sparse slabs: %u slab runs -> %u (%u emptied; %u kept empty)",
	   before - kept, after - kept, emptied, kept);
	ok(verify_all() == 0, "every object keeps its checksum");
	free_all();
}

/* The background thread lowers the score by itself. */
static void test_background(void)
{
	uint64_t seed = 99, wake0;
	unsigned s0, s = 100;
	int waited = 0;

	/* A long interval: only the low watermark can wake it. */
	__atomic_store_n(&ucma_opt.compact_interval_ms, 600000, __ATOMIC_RELAXED);
	/* compact above 20, down to 10 */
	__atomic_store_n(&ucma_opt.compact_proactiveness, 90, __ATOMIC_RELAXED);
	ucma_opt.compact = true;
	ucma_compactd_start_once();
	usleep(20000);
	wake0 = stat_of("compact_daemon_wake");
	fill_mixed((uint64_t)CMA / 100 * 95, &seed);
	usleep(50000);
	ok(stat_of("compact_daemon_wake") > wake0,
	   "filling the CMA zone below its low watermark wakes the thread");
	free_random_half(&seed);
	s0 = ucma_fragmentation_score(zcma);
	wake0 = stat_of("compact_daemon_wake");
	__atomic_store_n(&ucma_opt.compact_interval_ms, 20, __ATOMIC_RELAXED);
	ucma_compactd_wakeup();	/* so that it sleeps the new interval */
	while (waited < 4000) {
		usleep(20000);
		waited += 20;
		s = ucma_fragmentation_score(zcma);
		if (s <= s0 / 2)
			break;
	}
	ok(ucma_compactd_running() && s <= s0 / 2,
	   "the thread lowers the CMA zone's fragmentation score %u -> %u in %d ms", s0, s,
	   waited);
	ok(stat_of("compact_daemon_wake") > wake0, "compact_daemon_wake counts its wake-ups (%llu)",
	   (unsigned long long)(stat_of("compact_daemon_wake") - wake0));
	ok(verify_all() == 0, "every object keeps its checksum");
}

/* fork() parks the thread; the child starts its own on demand. */
static void test_fork(void)
{
	int n = count_threads(), status = -1;
	uint64_t wake0;
	pid_t pid;

	if (under_tsan) {
		skip(2, "ThreadSanitizer: no threads in the children of a threaded process");
		free_all();
		return;
	}
	pid = fork();
	if (pid == 0) {
		int bad = 0;
		ucma_handle_t x;

		if (count_threads() != 1 || ucma_compactd_running())
			bad |= 1;
		x = ucma_halloc(3000, 0);
		if (!x || !ucma_compactd_running() || count_threads() != 2)
			bad |= 2;
		if (ucma_compact(UCMA_COMPACT_SYNC_FULL) != 0 || verify_all() != 0)
			bad |= 4;
		ucma_compactd_stop();
		_exit(bad);
	}
	waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "child of fork: no thread until its first halloc, then one; compaction works "
	   "(status %d)",
	   status);
	wake0 = stat_of("compact_daemon_wake");
	usleep(100000);
	ok(ucma_compactd_running() && count_threads() == n &&
		   stat_of("compact_daemon_wake") > wake0,
	   "the parent's thread runs on after the fork");
	free_all();
}

int main(int argc, char **argv)
{
	struct ucma_config cfg = {
		.arena_size = ARENA,
		.cma_size = CMA,
		.hugepages = UCMA_BACKING_NONE,
	};
	char why[256];

	if (argc > 1 && strcmp(argv[1], "--compact-off-child") == 0)
		return compact_off_child();
	plan_no_plan();
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	a = ucma_arena_get();
	zcma = &a->zones[UCMA_ZONE_CMA];
	znormal = &a->zones[UCMA_ZONE_NORMAL];
	ucma_opt.compact = true;
	ucma_opt.compact_direct = true;

	test_bad_input();
	test_thread_start();
	test_compact_off();
	test_create_fails();

	/* Deterministic tests: no background thread. */
	ucma_opt.compact = false;
	ucma_compactd_stop();
	test_priorities();
	test_whole_zone();
	test_orders();
	test_deferral();
	test_consolidation();

	test_background();
	test_fork();
	ucma_opt.compact = false;
	ucma_compactd_stop();
	ok(ucma_zone_check(zcma, why, sizeof(why)) == 0 &&
		   ucma_zone_check(znormal, why, sizeof(why)) == 0,
	   "zone invariants hold at the end");
	return done();
}
