/*
 * shm.c - the live statistics segment: counters and a map of the arena,
 * published for other processes (the ucmastat tool) to read.
 *
 * Once the arena exists, the first publish or update creates
 * /dev/shm/ucma.<pid>, mode 0600, with the layout of shm.h: a header with
 * the geometry (zones, areas, pageblock count), every statistic of the
 * report as a name/value pair, and one byte per pageblock saying what the
 * pageblock holds.  Refreshes come from outside: the compaction thread on
 * each wake-up and ucma_stats_print(); this file never starts a thread.
 *
 * Invariants:
 *  - Only the process named in the file writes it.  After fork the child
 *    still maps its parent's segment; it notices the pid change, drops that
 *    mapping without touching it and publishes its own.
 *  - Readers never see a torn refresh: values and map are computed into a
 *    private staging buffer first, then copied in while the sequence
 *    counter is odd, so the odd window is a memcpy long.
 *  - The set and order of counter names never changes for one arena (its
 *    geometry is fixed), so names are written once, at creation.
 *  - The file is allocated in full up front (posix_fallocate): a full
 *    /dev/shm makes publishing fail cleanly instead of raising SIGBUS on a
 *    later store.
 *  - The file lives as long as the process: it is removed at exit (an
 *    atexit handler) and by ucma_shm_unpublish().  A process killed by a
 *    signal leaves it behind; the next program with the same pid replaces
 *    it, and ucmastat --prune removes it.
 *
 * Locking: one writer at a time, by a try-lock word holding the pid of the
 * process whose thread writes (`writer`).  A refresh that finds another
 * thread writing skips: that refresh is as fresh.  A child that inherits
 * the word from a parent thread caught mid-refresh sees a foreign pid and
 * takes the word over, so no fork handler is needed.  A refresh takes CMA
 * area locks, zone locks and malloc.c's counter lock, one at a time or
 * area before zone; callers hold no ucma lock.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
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
	pid_t failed_pid;		/* creation failed in this process */
	bool atexit_registered;
} shm;

static _Atomic pid_t writer;
static _Atomic bool exiting;
/* The pid whose file shm.path names while it exists, else 0: read without
 * the writer lock at exit, so it is published after shm.path (release). */
static _Atomic pid_t published_pid;

/* When the segment was last refreshed (ucma_os_now_ns()), for the tick. */
static _Atomic uint64_t last_refresh_ns;

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

/* Wait up to a second for a refresh in progress to finish. */
static bool writer_lock_wait(pid_t me)
{
	for (int i = 0; i < 1000; i++) {
		if (writer_trylock(me))
			return true;
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
	return false;
}

/* ------------------------------------------------------------------------ */
/* Pageblock states                                                          */
/* ------------------------------------------------------------------------ */

/* Pageblocks read per hold of a zone lock: bounds the hold on huge arenas. */
#define MAP_LOCK_BATCH 4096u

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

/* Returns true if any of bits [first, first + n) of @bm is set. */
static bool bits_any(const unsigned long *bm, uint32_t first, uint32_t n)
{
	const unsigned bpl = sizeof(unsigned long) * CHAR_BIT;

	for (uint32_t i = first; i < first + n;) {
		if (i % bpl == 0 && first + n - i >= bpl) {
			if (bm[i / bpl])
				return true;
			i += bpl;
			continue;
		}
		if ((bm[i / bpl] >> (i % bpl)) & 1ul)
			return true;
		i++;
	}
	return false;
}

/*
 * The state of every pageblock.  NORMAL from the pageblock's migratetype
 * and free count; CMA the same way, refined per area under the area lock
 * (which nests outside the zone lock): a pageblock with any page claimed in
 * the area's bitmap holds a contiguous allocation, one with other pages in
 * use is lent to movable objects.
 */
static void compute_map(struct ucma_arena *a, uint8_t *map)
{
	for (int zi = 0; zi < UCMA_ZONE_NR; zi++) {
		struct ucma_zone *z = &a->zones[zi];

		pthread_mutex_lock(&z->lock);
		for (uint32_t b = z->start_pfn >> UCMA_PAGEBLOCK_ORDER;
		     b < z->end_pfn >> UCMA_PAGEBLOCK_ORDER; b++) {
			const struct ucma_pageblock *pb = &a->blocks[b];
			bool all_free;
			unsigned st;

			if (b % MAP_LOCK_BATCH == MAP_LOCK_BATCH - 1) {
				/* Each pageblock is read whole; let allocations in. */
				pthread_mutex_unlock(&z->lock);
				pthread_mutex_lock(&z->lock);
			}
			all_free = pb->nr_free >= UCMA_PAGEBLOCK_PAGES;

			if (pb_isolated(pb))
				st = UCMA_SHM_PB_ISOLATED;
			else if (zi == UCMA_ZONE_CMA)
				st = all_free ? UCMA_SHM_PB_CMA_FREE : UCMA_SHM_PB_CMA_LENT;
			else if (all_free)
				st = UCMA_SHM_PB_FREE;
			else if (pb->mt == UCMA_MT_UNMOVABLE)
				st = UCMA_SHM_PB_UNMOVABLE;
			else
				st = UCMA_SHM_PB_MOVABLE;
			map[b] = pb_byte(st, pb->nr_free);
		}
		pthread_mutex_unlock(&z->lock);
	}

	struct ucma_zone *cz = &a->zones[UCMA_ZONE_CMA];

	for (int i = 0; i < a->nr_areas; i++) {
		struct ucma_cma_area *ar = &a->areas[i];
		uint32_t first = ar->base_pfn >> UCMA_PAGEBLOCK_ORDER;
		uint32_t last = (ar->base_pfn + ar->npages + UCMA_PAGEBLOCK_PAGES - 1) >>
				UCMA_PAGEBLOCK_ORDER;

		if (!ar->bitmap)
			continue;
		pthread_mutex_lock(&ar->lock);
		pthread_mutex_lock(&cz->lock);
		for (uint32_t b = first; b < last; b++) {
			const struct ucma_pageblock *pb = &a->blocks[b];
			uint32_t off = (b << UCMA_PAGEBLOCK_ORDER) - ar->base_pfn;
			uint32_t n = ar->npages - off < UCMA_PAGEBLOCK_PAGES ? ar->npages - off :
									      UCMA_PAGEBLOCK_PAGES;

			if (!pb_isolated(pb) && bits_any(ar->bitmap, off, n))
				map[b] = pb_byte(UCMA_SHM_PB_CONTIG, pb->nr_free);
		}
		pthread_mutex_unlock(&cz->lock);
		pthread_mutex_unlock(&ar->lock);
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
	struct timespec ts;
	uint64_t seq;

	ucma_stats_foreach(a, true, values_visit, &vc);
	compute_map(a, map);
	clock_gettime(CLOCK_REALTIME, &ts);

	seq = __atomic_load_n(&h->seq, __ATOMIC_RELAXED);
	__atomic_store_n(&h->seq, seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (uint32_t i = 0; i < shm.nr_counters; i++)
		c[i].value = values[i];
	memcpy((char *)h + h->map_offset, map, a->nr_pageblocks);
	h->updates++;
	h->update_time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	__atomic_store_n(&h->seq, seq + 2, __ATOMIC_RELEASE);
	atomic_store_explicit(&last_refresh_ns, ucma_os_now_ns(), memory_order_relaxed);
}

static void shm_atexit(void)
{
	atomic_store(&exiting, true);
	/*
	 * Only the name goes: another thread may still be refreshing the
	 * mapping, which vanishes with the process anyway.  The pid test keeps
	 * a forked child that never published from removing its parent's.
	 */
	if (atomic_load_explicit(&published_pid, memory_order_acquire) == getpid())
		unlink(shm.path);
}

/* Forget the segment; remove its file only if this process created it. */
static void drop(pid_t me)
{
	if (!shm.hdr)
		return;
	if (shm.pid == me) {
		atomic_store_explicit(&published_pid, 0, memory_order_relaxed);
		unlink(shm.path);
	}
	ucma_os.munmap(shm.hdr, shm.size);
	if (shm.stage)
		ucma_os.munmap(shm.stage, shm.stage_size);
	shm.hdr = NULL;
	shm.stage = NULL;
	shm.arena = NULL;
	shm.pid = 0;
}

static int create(struct ucma_arena *a, pid_t me)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint32_t n = ucma_stats_foreach(a, false, count_visit, NULL);
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
	ucma_stats_foreach(a, false, names_visit, &nc);

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

/**
 * ucma_shm_update() - refresh the live statistics segment, creating it
 * first if the arena exists and this process has none yet.  Cheap to call
 * often: one pass over the statistics and the pageblocks.  Returns at once
 * when another thread is refreshing.
 */
/*
 * Bring the segment up to date with the writer word held: drop it if it is
 * a parent's or an old arena's, refresh it, or create it (once per process
 * when creation fails, unless @retry).  Returns 0, or -1 with errno.
 */
static int update_locked(struct ucma_arena *a, pid_t me, bool retry)
{
	if (shm.hdr && (shm.pid != me || shm.arena != a))
		drop(me);	/* forked child, or a new arena (test builds) */
	if (shm.hdr) {
		refresh(a);
		return 0;
	}
	if (!retry && shm.failed_pid == me)
		return -1;
	if (create(a, me) != 0) {
		shm.failed_pid = me;
		return -1;
	}
	return 0;
}

void ucma_shm_update(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	pid_t me;
	bool failed_before;

	if (!a || atomic_load_explicit(&exiting, memory_order_relaxed))
		return;
	me = getpid();
	if (!writer_trylock(me))
		return;
	failed_before = shm.failed_pid == me;
	if (update_locked(a, me, false) != 0 && !failed_before && ucma_opt.verbose)
		ucma_log("no live statistics for ucmastat: %s: %s", shm.path, strerror(errno));
	writer_unlock();
}

/*
 * How often the allocation paths refresh the segment at most.  A process
 * without the compaction thread (UCMA_COMPACT=off, or a preloaded program
 * with only unmovable memory) has no other writer, and ucmastat must not
 * show it as it was at start-up.
 */
#define SHM_TICK_NS (100ull * 1000 * 1000)

/**
 * ucma_shm_tick() - refresh the segment if the last refresh is older than
 * SHM_TICK_NS.  With @sampled, only every 64th call of a thread reads the
 * clock (for paths taken millions of times a second).  Call it without
 * holding any ucma lock; errno is left alone.
 */
void ucma_shm_tick(bool sampled)
{
	static __thread unsigned calls;
	uint64_t now;
	int saved;

	if (sampled && (++calls & 63u))
		return;
	now = ucma_os_now_ns();
	if (now - atomic_load_explicit(&last_refresh_ns, memory_order_relaxed) < SHM_TICK_NS)
		return;
	/* Whoever gets here first refreshes; the others see the new time. */
	atomic_store_explicit(&last_refresh_ns, now, memory_order_relaxed);
	saved = errno;
	ucma_shm_update();
	errno = saved;
}

/**
 * ucma_shm_sync() - refresh the segment now, creating it if needed, and
 * wait for a refresh in progress in another thread rather than skip.
 * Returns 0, or -1 with errno (EAGAIN when another thread's refresh did
 * not end within a second, or why the segment cannot be created).
 */
int ucma_shm_sync(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	int rc;

	if (!a) {
		errno = EINVAL;
		return -1;
	}
	if (!writer_lock_wait(getpid())) {
		errno = EAGAIN;
		return -1;
	}
	rc = update_locked(a, getpid(), true);
	writer_unlock();
	return rc;
}

/**
 * ucma_shm_publish() - make the statistics of this process visible to
 * ucmastat.  init.c calls it once the arena exists; it is ucma_shm_update()
 * under the name that says why.
 */
void ucma_shm_publish(void)
{
	ucma_shm_update();
}

/**
 * ucma_shm_unpublish() - remove the segment (ucma teardown).  Waits
 * briefly for a refresh in progress; the file is removed even if that
 * refresh does not end.
 */
void ucma_shm_unpublish(void)
{
	pid_t me = getpid();

	if (!writer_lock_wait(me)) {
		if (atomic_load_explicit(&published_pid, memory_order_acquire) == me)
			unlink(shm.path);
		return;
	}
	drop(me);
	shm.failed_pid = 0;
	writer_unlock();
}
