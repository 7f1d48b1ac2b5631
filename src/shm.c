/*
 * shm.c - the live statistics segment: counters and a map of the arena,
 * published for other processes (the ucmastat tool) to read.
 *
 * /dev/shm/ucma.<pid>, mode 0600, has the layout of shm.h: a header with
 * the geometry (zones, areas, pageblock count), every statistic of the
 * report as a name/value pair, and one byte per pageblock saying what the
 * pageblock holds.  This file creates, refreshes and removes it; when that
 * happens is shm_server.c's business (by default only while a reader asks),
 * and this file never starts a thread.
 *
 * Invariants:
 *  - Only the process named in the file writes it.  After fork the child
 *    still maps its parent's segment; it notices the pid change, drops that
 *    mapping without touching it, and publishes its own when asked.
 *  - Readers never see a torn refresh: values and map are computed into a
 *    private staging buffer first, then copied in while the sequence
 *    counter is odd, so the odd window is a memcpy long.
 *  - The set and order of counter names never changes for one arena (its
 *    geometry is fixed), so names are written once, at creation.
 *  - The file is allocated in full up front (posix_fallocate): a full
 *    /dev/shm makes publishing fail cleanly instead of raising SIGBUS on a
 *    later store.
 *  - The file is removed at exit (an atexit handler), when the requests
 *    stop (shm_server.c) and by ucma_shm_unpublish().  Once exit has begun
 *    nothing creates it again.  A process killed while it has one leaves it
 *    behind; the next program with the same pid replaces it, and ucmastat
 *    --prune removes it.
 *
 * Cost.  A refresh walks the pageblocks once (the map, and the pageblock
 * counts per migratetype that the statistics would otherwise walk for
 * again), reads the zones' free counts, and scans each CMA area's bitmap a
 * word at a time.  Zone and area locks are dropped every MAP_LOCK_BATCH
 * pageblocks, so an allocation that wants one waits for one batch at most;
 * a 64 GiB arena has 32768 pageblocks.
 *
 * Locking: one writer at a time, by a try-lock word holding the pid of the
 * process whose thread writes (`writer`).  A refresh that finds another
 * thread writing may skip: that refresh is as fresh.  A child that
 * inherits the word from a parent thread caught mid-refresh sees a foreign
 * pid and takes the word over, so no fork handler is needed.  A refresh
 * takes CMA area locks, zone locks and malloc.c's counter lock, one at a
 * time or area before zone; callers hold no ucma lock.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(UCMA_STAT_NAME_MAX == UCMA_SHM_NAME_MAX, "statistic names fit the segment");
_Static_assert(UCMA_STAT_F_EVENT == UCMA_SHM_CTR_EVENT && UCMA_STAT_F_SIGNED == UCMA_SHM_CTR_SIGNED,
	       "counter flags are the segment's");
_Static_assert(UCMA_MAX_CMA_AREAS <= UCMA_SHM_MAX_AREAS, "every area fits the header");
_Static_assert(UCMA_ZONE_NR <= UCMA_SHM_MAX_ZONES, "every zone fits the header");
_Static_assert(UCMA_AREA_NAME_MAX <= UCMA_SHM_RANGE_NAME, "area names fit the header");

/*
 * struct shm_state - this process's segment.  Every field is written only
 * by the holder of `writer`.
 */
static struct shm_state {
	struct ucma_shm_header *hdr;	/* the shared mapping, or NULL */
	size_t size;
	pid_t pid;			/* process that created it */
	struct ucma_arena *arena;	/* the arena it describes */
	char path[64];
	void *stage;			/* private: values, then map */
	size_t stage_size;
	uint32_t nr_counters;
	uint64_t answer_ns;		/* request the next refresh answers */
	bool keep;			/* stays after the last request */
	pid_t failed_pid;		/* creation failed in this process */
	bool atexit_registered;
} shm;

#ifdef UCMA_TEST_HOOKS
_Atomic uint64_t ucma_shm_test_unasked_refreshes;
#endif

static _Atomic pid_t writer;
static _Atomic bool exiting;
/* The pid whose file shm.path names while it exists, else 0: read without
 * the writer lock at exit, so it is published after shm.path (release). */
static _Atomic pid_t published_pid;

static bool writer_trylock(pid_t me)
{
	pid_t cur = 0;

	if (atomic_compare_exchange_strong(&writer, &cur, me))
		return true;
	if (cur == me)
		return false;	/* another thread of this process is writing */
	/* Held by a thread of the parent we were forked from: it is not here. */
	return atomic_compare_exchange_strong(&writer, &cur, me);
}

static void writer_unlock(void)
{
	atomic_store_explicit(&writer, 0, memory_order_release);
}

/* Wait up to @ms milliseconds for a refresh in progress to finish. */
static bool writer_lock_wait(pid_t me, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (writer_trylock(me))
			return true;
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	return writer_trylock(me);
}

/* ------------------------------------------------------------------------ */
/* Pageblock states                                                          */
/* ------------------------------------------------------------------------ */

/*
 * Pageblocks read per hold of a zone (or area) lock: an allocation waiting
 * for the lock waits for one batch, a few microseconds, however large the
 * arena.  Each pageblock is read whole under the lock.
 */
#define MAP_LOCK_BATCH 1024u

/* compute_map() counts migratetypes of one batch in 16-bit fields of a word. */
_Static_assert(UCMA_MT_NR <= 4 && MAP_LOCK_BATCH < 65536, "a batch's counts fit 16 bits each");

static uint8_t pb_byte(unsigned state, uint32_t nr_free)
{
	uint32_t used = nr_free >= UCMA_PAGEBLOCK_PAGES ? 0 : UCMA_PAGEBLOCK_PAGES - nr_free;
	unsigned sixteenths = (used * 16 + UCMA_PAGEBLOCK_PAGES - 1) / UCMA_PAGEBLOCK_PAGES;

	if (sixteenths > 15)
		sixteenths = 15;
	return (uint8_t)(state | sixteenths << 4);
}

static bool pb_isolated(const struct ucma_pageblock *pb)
{
	return pb->isolate_count || pb->mt == UCMA_MT_ISOLATE;
}

/* Returns true if any of bits [first, first + n) of @bm is set; by words. */
static bool bits_any(const unsigned long *bm, uint32_t first, uint32_t n)
{
	const unsigned bpl = sizeof(unsigned long) * CHAR_BIT;
	uint32_t last, k, kend;
	unsigned long lo, hi;

	if (n == 0)
		return false;
	last = first + n - 1;
	k = first / bpl;
	kend = last / bpl;
	lo = ~0ul << (first % bpl);
	hi = ~0ul >> (bpl - 1 - last % bpl);
	if (k == kend)
		return (bm[k] & lo & hi) != 0;
	if (bm[k] & lo)
		return true;
	for (k++; k < kend; k++)
		if (bm[k])
			return true;
	return (bm[kend] & hi) != 0;
}

static unsigned pb_state(const struct ucma_pageblock *pb, int zi)
{
	bool all_free = pb->nr_free >= UCMA_PAGEBLOCK_PAGES;

	if (pb_isolated(pb))
		return UCMA_SHM_PB_ISOLATED;
	if (zi == UCMA_ZONE_CMA)
		return all_free ? UCMA_SHM_PB_CMA_FREE : UCMA_SHM_PB_CMA_LENT;
	if (all_free)
		return UCMA_SHM_PB_FREE;
	return pb->mt == UCMA_MT_UNMOVABLE ? UCMA_SHM_PB_UNMOVABLE : UCMA_SHM_PB_MOVABLE;
}

/*
 * The state of every pageblock, and the pageblocks per zone and
 * migratetype (for the statistics, which need not walk them again).
 * NORMAL from the pageblock's migratetype and free count; CMA the same
 * way, refined per area under the area lock (which nests outside the zone
 * lock): a pageblock with any page claimed in the area's bitmap holds a
 * contiguous allocation, one with other pages in use is lent to movable
 * objects.
 */
static void compute_map(struct ucma_arena *a, uint8_t *map,
			uint64_t pageblocks[UCMA_ZONE_NR][UCMA_MT_NR])
{
	const struct ucma_pageblock *blocks = a->blocks;

	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		struct ucma_zone *z = &a->zones[zi];
		uint32_t first = z->start_pfn >> UCMA_PAGEBLOCK_ORDER;
		uint32_t end = z->end_pfn >> UCMA_PAGEBLOCK_ORDER;
		uint64_t *count = pageblocks[zi];

		memset(count, 0, sizeof(pageblocks[zi]));
		for (uint32_t b = first; b < end;) {
			uint32_t stop = end - b > MAP_LOCK_BATCH ? b + MAP_LOCK_BATCH : end;
			uint64_t packed = 0;

			ucma_mutex_lock(&z->lock);
			for (; b < stop; b++) {
				const struct ucma_pageblock *pb = &blocks[b];

				/* One register add: count[pb->mt]++ in memory would
				 * chain every iteration through store forwarding. */
				packed += 1ull << (16 * pb->mt);
				map[b] = pb_byte(pb_state(pb, zi), pb->nr_free);
			}
			ucma_mutex_unlock(&z->lock);
			for (int mt = 0; mt < UCMA_MT_NR; mt++)
				count[mt] += (packed >> (16 * mt)) & 0xffffu;
		}
	}

	struct ucma_zone *cz = &a->zones[UCMA_ZONE_CMA];

	for (int i = 0; i < a->nr_areas; i++) {
		struct ucma_cma_area *ar = &a->areas[i];
		uint32_t first = ar->base_pfn >> UCMA_PAGEBLOCK_ORDER;
		uint32_t end = (ar->base_pfn + ar->npages + UCMA_PAGEBLOCK_PAGES - 1) >>
			       UCMA_PAGEBLOCK_ORDER;

		if (!ar->bitmap)
			continue;
		for (uint32_t b = first; b < end;) {
			uint32_t stop = end - b > MAP_LOCK_BATCH ? b + MAP_LOCK_BATCH : end;

			ucma_mutex_lock(&ar->lock);
			ucma_mutex_lock(&cz->lock);
			for (; b < stop; b++) {
				const struct ucma_pageblock *pb = &a->blocks[b];
				uint32_t off = (b << UCMA_PAGEBLOCK_ORDER) - ar->base_pfn;
				uint32_t n = ar->npages - off < UCMA_PAGEBLOCK_PAGES ?
						     ar->npages - off :
						     UCMA_PAGEBLOCK_PAGES;

				if (!pb_isolated(pb) && bits_any(ar->bitmap, off, n))
					map[b] = pb_byte(UCMA_SHM_PB_CONTIG, pb->nr_free);
			}
			ucma_mutex_unlock(&cz->lock);
			ucma_mutex_unlock(&ar->lock);
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Creation and refresh                                                      */
/* ------------------------------------------------------------------------ */

static void count_visit(void *ctx, const char *name, uint64_t value, unsigned flags)
{
}

struct names_ctx {
	struct ucma_shm_counter *c;
	uint32_t n, i;
};

static void names_visit(void *ctx, const char *name, uint64_t value, unsigned flags)
{
	struct names_ctx *nc = ctx;

	if (nc->i >= nc->n)
		return;
	snprintf(nc->c[nc->i].name, sizeof(nc->c[nc->i].name), "%s", name);
	nc->c[nc->i].flags = flags;
	nc->i++;
}

struct values_ctx {
	uint64_t *v;
	uint32_t n, i;
};

static void values_visit(void *ctx, const char *name, uint64_t value, unsigned flags)
{
	struct values_ctx *vc = ctx;

	if (vc->i < vc->n)
		vc->v[vc->i] = value;
	vc->i++;
}

/* Read a small /proc file into @buf; returns its length or -1. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* Field 22 of /proc/self/stat: with the pid, it names this process for good. */
static uint64_t process_start_time(void)
{
	char buf[1024];
	char *p;

	if (read_small("/proc/self/stat", buf, sizeof(buf)) < 0)
		return 0;
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* p + 2 is field 3; skip to field 22. */
	p += 2;
	for (int field = 3; field < 22 && p; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	return p ? strtoull(p, NULL, 10) : 0;
}

static void fill_range(struct ucma_shm_range *r, const char *name, uint32_t start_pb,
		       uint32_t end_pb, int backing)
{
	const char *b = ucma_backing_str(backing);

	snprintf(r->name, sizeof(r->name), "%s", name);
	r->start_pb = start_pb;
	r->end_pb = end_pb;
	snprintf(r->backing, sizeof(r->backing), "%s", b ? b : "");
}

static void refresh(struct ucma_arena *a)
{
	struct ucma_shm_header *h = shm.hdr;
	struct ucma_shm_counter *c = (void *)((char *)h + h->counters_offset);
	uint64_t *values = shm.stage;
	uint8_t *map = (uint8_t *)(values + shm.nr_counters);
	struct values_ctx vc = { .v = values, .n = shm.nr_counters };
	uint64_t pageblocks[UCMA_ZONE_NR][UCMA_MT_NR];
	struct timespec ts;
	uint64_t seq;

	/* The map first: its walk also counts what the statistics print. */
	compute_map(a, map, pageblocks);
	ucma_stats_foreach(a, (const uint64_t(*)[UCMA_MT_NR])pageblocks, true, values_visit, &vc);
	clock_gettime(CLOCK_REALTIME, &ts);

	seq = __atomic_load_n(&h->seq, __ATOMIC_RELAXED);
	__atomic_store_n(&h->seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (uint32_t i = 0; i < shm.nr_counters; i++)
		c[i].value = values[i];
	memcpy((char *)h + h->map_offset, map, a->nr_pageblocks);
	h->updates++;
	h->update_time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	h->answered_request_ns = shm.answer_ns;
	__atomic_store_n(&h->seq, seq + 2, __ATOMIC_RELEASE);
}

static void shm_atexit(void)
{
	pid_t me = getpid();
	bool locked;

	atomic_store(&exiting, true);
	/*
	 * From now on nothing creates the segment.  Wait briefly for a refresh
	 * in progress (perhaps a creation): then the name below is final.  If
	 * it does not end, only the name goes anyway: the mapping vanishes with
	 * the process.  The pid test keeps a forked child that never published
	 * from removing its parent's.
	 */
	locked = writer_lock_wait(me, 100);
	if (atomic_load_explicit(&published_pid, memory_order_acquire) == me)
		unlink(shm.path);
	if (locked)
		writer_unlock();
}

/* Forget the segment; remove its file only if this process created it. */
static void drop(pid_t me)
{
	void *hdr, *stage;

	if (!shm.hdr)
		return;
	if (shm.pid == me) {
		atomic_store_explicit(&published_pid, 0, memory_order_relaxed);
		unlink(shm.path);
	}
	/* Forgotten before they are unmapped: a fork in between would leave
	 * its child names for ranges that another thread may map meanwhile,
	 * and the child's own drop() would unmap that thread's memory. */
	hdr = shm.hdr;
	stage = shm.stage;
	shm.hdr = NULL;
	shm.stage = NULL;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);	/* (the compiler keeps the order) */
	ucma_os.munmap(hdr, shm.size);
	if (stage)
		ucma_os.munmap(stage, shm.stage_size);
	shm.arena = NULL;
	shm.pid = 0;
	shm.keep = false;
}

static int create(struct ucma_arena *a, pid_t me)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint32_t n = ucma_stats_foreach(a, NULL, false, count_visit, NULL);
	size_t hdr_size = UCMA_ALIGN_UP(sizeof(struct ucma_shm_header), (size_t)64);
	size_t map_off = hdr_size + (size_t)n * sizeof(struct ucma_shm_counter);
	size_t total = UCMA_ALIGN_UP(map_off + a->nr_pageblocks, page);
	size_t stage_size = UCMA_ALIGN_UP((size_t)n * 8 + a->nr_pageblocks, page);
	struct ucma_shm_header *h;
	struct names_ctx nc;
	char buf[64];
	void *p, *stage;
	int fd, err;

	snprintf(shm.path, sizeof(shm.path), UCMA_SHM_DIR "/" UCMA_SHM_PREFIX "%ld", (long)me);
	fd = open(shm.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 && errno == EEXIST) {
		/* Left by an earlier program of this pid (exec, or a crash). */
		unlink(shm.path);
		fd = open(shm.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	}
	if (fd < 0)
		return -1;
	err = posix_fallocate(fd, 0, (off_t)total);
	if (err) {
		errno = err;
		goto fail_file;
	}
	p = ucma_os.mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto fail_file;
	stage = ucma_os.mmap(NULL, stage_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			     -1, 0);
	if (stage == MAP_FAILED) {
		ucma_os.munmap(p, total);
		goto fail_file;
	}
	close(fd);

	h = p;
	h->version = UCMA_SHM_VERSION;
	h->header_size = sizeof(*h);
	h->total_size = total;
	h->pid = (int32_t)me;
	h->page_size = UCMA_PAGE_SIZE;
	h->pageblock_pages = UCMA_PAGEBLOCK_PAGES;
	h->nr_pageblocks = a->nr_pageblocks;
	h->arena_size = a->size;
	h->start_time = process_start_time();
	if (read_small("/proc/self/comm", buf, sizeof(buf)) > 0) {
		size_t len = strcspn(buf, "\n");

		memcpy(h->comm, buf, len < sizeof(h->comm) - 1 ? len : sizeof(h->comm) - 1);
	}
	h->nr_zones = UCMA_ZONE_NR;
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		const struct ucma_zone *z = &a->zones[zi];

		fill_range(&h->zones[zi], zi == UCMA_ZONE_CMA ? "cma" : "normal",
			   z->start_pfn >> UCMA_PAGEBLOCK_ORDER, z->end_pfn >> UCMA_PAGEBLOCK_ORDER,
			   z->backing);
	}
	h->nr_areas = (uint32_t)a->nr_areas;
	for (int i = 0; i < a->nr_areas; i++) {
		const struct ucma_cma_area *ar = &a->areas[i];

		fill_range(&h->areas[i], ar->name, ar->base_pfn >> UCMA_PAGEBLOCK_ORDER,
			   (ar->base_pfn + ar->npages + UCMA_PAGEBLOCK_PAGES - 1) >>
				   UCMA_PAGEBLOCK_ORDER,
			   a->zones[UCMA_ZONE_CMA].backing);
	}
	h->nr_counters = n;
	h->counters_offset = (uint32_t)hdr_size;
	h->map_offset = (uint32_t)map_off;
	nc = (struct names_ctx){ .c = (void *)((char *)h + hdr_size), .n = n };
	ucma_stats_foreach(a, NULL, false, names_visit, &nc);

	shm.hdr = h;
	shm.size = total;
	shm.pid = me;
	shm.arena = a;
	shm.stage = stage;
	shm.stage_size = stage_size;
	shm.nr_counters = n;
	refresh(a);
	/* Last: a reader that sees the magic sees a complete segment. */
	__atomic_store_n(&h->magic, UCMA_SHM_MAGIC, __ATOMIC_RELEASE);
	atomic_store_explicit(&published_pid, me, memory_order_release);

	if (!shm.atexit_registered) {
		shm.atexit_registered = true;
		atexit(shm_atexit);
	}
	return 0;

fail_file:
	err = errno;
	unlink(shm.path);
	close(fd);
	errno = err;
	return -1;
}

/* ------------------------------------------------------------------------ */
/* For shm_server.c                                                          */
/* ------------------------------------------------------------------------ */

/*
 * With the writer word held: drop a parent's or an old arena's mapping,
 * then refresh the segment or create it.  A creation that failed is logged
 * once per process (UCMA_VERBOSE), not again for every request.
 */
static int refresh_locked(struct ucma_arena *a, pid_t me, enum ucma_shm_refresh_how how)
{
	if (shm.hdr && (shm.pid != me || shm.arena != a))
		drop(me);	/* forked child, or a new arena (test builds) */
	if (shm.hdr) {
		refresh(a);
		return 0;
	}
	if (how == UCMA_SHM_IF_PUBLISHED) {
		errno = ENOENT;
		return -1;
	}
	if (create(a, me) != 0) {
		int err = errno;

		if (shm.failed_pid != me && ucma_opt.verbose)
			ucma_log("no live statistics for ucmastat: %s: %s", shm.path,
				 strerror(err));
		shm.failed_pid = me;
		errno = err;
		return -1;
	}
	return 0;
}

int ucma_shm_segment_refresh(enum ucma_shm_refresh_how how, uint64_t answer_ns, bool keep,
			     bool wait)
{
	struct ucma_arena *a = ucma_arena_peek();
	pid_t me = getpid();
	int rc;

	if (!a) {
		errno = ENOENT;
		return -1;
	}
	if (wait ? !writer_lock_wait(me, 1000) : !writer_trylock(me)) {
		errno = EAGAIN;
		return -1;
	}
	if (atomic_load(&exiting)) {
		writer_unlock();
		errno = ESHUTDOWN;
		return -1;
	}
	if (answer_ns)
		shm.answer_ns = answer_ns;
	rc = refresh_locked(a, me, how);
	if (rc == 0 && keep)
		shm.keep = true;
#ifdef UCMA_TEST_HOOKS
	if (rc == 0 && !answer_ns)
		atomic_fetch_add(&ucma_shm_test_unasked_refreshes, 1);
#endif
	writer_unlock();
	return rc;
}

void ucma_shm_segment_remove(bool force)
{
	pid_t me = getpid();

	if (!writer_lock_wait(me, 1000)) {
		if (force && atomic_load_explicit(&published_pid, memory_order_acquire) == me)
			unlink(shm.path);
		return;
	}
	if (force || !shm.keep || shm.pid != me)
		drop(me);
	if (force)
		shm.failed_pid = 0;
	writer_unlock();
}

bool ucma_shm_segment_exiting(void)
{
	return atomic_load_explicit(&exiting, memory_order_relaxed);
}
