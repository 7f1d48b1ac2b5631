/*
 * soak.c - every kind of allocation at once, from several threads, for a
 * while, with every byte checked.
 *
 * Each worker thread mixes, at random:
 *   - ucma_malloc/ucma_free/ucma_realloc of blocks of 1 byte to 256 KiB,
 *     filled from a per-block seed and checked before every free and
 *     across every realloc (the common prefix must survive);
 *   - private movable objects: ucma_halloc, then pin / verify / rewrite /
 *     unpin, long-term pins, ucma_hrealloc and ucma_hfree;
 *   - shared movable objects, written once with a self-describing header
 *     (seed and length) and published in a table that every worker reads
 *     under ucma_read_lock()/ucma_deref(); the owner replaces them now and
 *     then (a new object is published, the old one freed), so readers race
 *     with frees and may see EINVAL for a handle freed under them, never
 *     wrong bytes.  A republisher thread replaces a few hot slots every
 *     200 us, and readers of the slot it replaces next provoke both sides
 *     of the race on purpose: some dereference the handle they loaded, one
 *     short read-side section after another, until it is freed
 *     (deref-of-freed: its own intact object, then EINVAL, never another
 *     object); others, inside one section, wait until the object they are
 *     reading is freed under them and check its bytes again
 *     (read-across-free: they must be intact, since the memory is
 *     reclaimed only after the section).  Both must happen in every run;
 *     the waits are bounded (5 ms), so a grace period is never held up for
 *     long;
 *   - contiguous buffers: ucma_alloc/ucma_release of 64 KiB to 4 MiB,
 *     filled and checked, which migrates objects out of their way;
 *   - now and then ucma_compact(UCMA_COMPACT_ASYNC).
 * With heap lending (the default, as root), the malloc blocks live on the
 * CMA area's frames until the contiguous buffers take them back: every
 * block is checked across those take-backs too.
 * A compaction thread calls ucma_compact() and ucma_compact_order() every
 * few milliseconds meanwhile.
 *
 * The run fails on any corrupted byte and on any errno that the API does
 * not document for the situation (ucma_alloc may fail with EBUSY or ENOMEM,
 * a long-term pin with ENOMEM; everything else must succeed), and unless
 * every kind of operation ran, both sides of the read/free race included.
 * At the end it prints how many operations of each kind ran.
 *
 * Duration: UCMA_SOAK_SECONDS (default 10 s; 5 s under a sanitizer unless
 * set).  tests/run-all.sh sets 60 for its normal build.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lend.h"
#include "tap.h"
#include "testutil.h"

#include <errno.h>
#include <stdarg.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define NWORKERS 4
#define NMALLOC 256		/* malloc slots per worker */
#define NPRIV 192		/* private movable objects per worker */
#define NSHARED 96		/* shared movable objects per worker */
#define NHOT 4			/* shared slots the republisher replaces */
#define HOT_FIRST (NWORKERS * NSHARED)
#define NSLOTS (HOT_FIRST + NHOT)
#define RACE_WAIT_NS (5 * 1000 * 1000ull)	/* the longest a racing reader waits */
#define BIG_CONTIG (32u << 20)		/* half the CMA area */

enum {
	C_MALLOC, C_FREE, C_REALLOC, C_HALLOC, C_HFREE, C_PIN, C_LONGTERM, C_LONGTERM_FAIL,
	C_HREALLOC, C_READ, C_READ_GONE, C_READ_ACROSS_FREE, C_PUBLISH, C_CONTIG, C_CONTIG_BUSY,
	C_CONTIG_NOMEM, C_COMPACT, C_BIG_CONTIG, C_NR
};

static const char *const counter_names[C_NR] = {
	"malloc", "free", "realloc", "halloc", "hfree", "pin", "longterm", "longterm-refused",
	"hrealloc", "rcu-read", "deref-of-freed", "read-across-free", "publish", "contig",
	"contig-busy", "contig-nomem", "compact", "contig-32M",
};

static _Atomic uint64_t counters[C_NR];
static _Atomic uint64_t errors;
static _Atomic bool stop;
static _Atomic ucma_handle_t shared[NSLOTS];
/* The hot slot the republisher replaces next: racing readers read it. */
static _Atomic int hot_next;

struct hdr {
	uint64_t seed;		/* the payload is tu_fill(seed) */
	uint64_t len;		/* payload bytes after the header */
};

struct block {
	unsigned char *p;
	size_t size;
	uint64_t seed;
};

struct priv {
	ucma_handle_t h;
	size_t size;
	uint64_t seed;
};

static void count(int c)
{
	atomic_fetch_add_explicit(&counters[c], 1, memory_order_relaxed);
}

__attribute__((format(printf, 1, 2))) static void bad(const char *fmt, ...)
{
	va_list ap;
	char msg[256];

	if (atomic_fetch_add(&errors, 1) >= 20)
		return;	/* the first ones say enough */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	diag("%s", msg);
}

/* Mostly small, some pages, a few large. */
static size_t pick_size(uint64_t *s)
{
	uint64_t r = tu_rand(s);

	switch (r % 16) {
	case 0:
		return (size_t)(r >> 8) % (256 * 1024) + 1;
	case 1: case 2: case 3:
		return (size_t)(r >> 8) % 16384 + 1;
	default:
		return (size_t)(r >> 8) % 512 + 1;
	}
}

/* ------------------------------------------------------------------------ */
/* Unmovable blocks                                                          */
/* ------------------------------------------------------------------------ */

static void block_op(struct block *b, uint64_t *s)
{
	if (!b->p) {
		b->size = pick_size(s);
		b->seed = tu_rand(s);
		b->p = ucma_malloc(b->size);
		if (!b->p) {
			bad("ucma_malloc(%zu): %s", b->size, strerror(errno));
			return;
		}
		tu_fill(b->p, b->size, b->seed);
		count(C_MALLOC);
		return;
	}
	if (!tu_check(b->p, b->size, b->seed))
		bad("malloc block %p (%zu bytes) corrupted", (void *)b->p, b->size);
	if (tu_rand(s) % 3 == 0) {
		size_t ns = pick_size(s), keep = ns < b->size ? ns : b->size;
		unsigned char *n = ucma_realloc(b->p, ns);

		if (!n) {
			bad("ucma_realloc(%zu): %s", ns, strerror(errno));
			return;
		}
		if (!tu_check(n, keep, b->seed))
			bad("realloc lost the first %zu bytes", keep);
		b->p = n;
		b->size = ns;
		b->seed = tu_rand(s);
		tu_fill(n, ns, b->seed);
		count(C_REALLOC);
		return;
	}
	ucma_free(b->p);
	b->p = NULL;
	count(C_FREE);
}

/* ------------------------------------------------------------------------ */
/* Private movable objects: written only under a pin, by their owner         */
/* ------------------------------------------------------------------------ */

static void priv_stamp(struct priv *o, uint64_t *s)
{
	unsigned char *p = ucma_pin(o->h, 0);

	if (!p) {
		bad("ucma_pin of own object: %s", strerror(errno));
		return;
	}
	o->seed = tu_rand(s);
	tu_fill(p, o->size, o->seed);
	ucma_unpin(o->h);
}

static void priv_op(struct priv *o, uint64_t *s)
{
	unsigned char *p;

	if (!o->h) {
		o->size = pick_size(s);
		o->h = ucma_halloc(o->size, 0);
		if (!o->h) {
			bad("ucma_halloc(%zu): %s", o->size, strerror(errno));
			return;
		}
		priv_stamp(o, s);
		count(C_HALLOC);
		return;
	}
	switch (tu_rand(s) % 5) {
	case 0:		/* verify and rewrite under a pin */
	case 1:
		p = ucma_pin(o->h, 0);
		if (!p) {
			bad("ucma_pin: %s", strerror(errno));
			return;
		}
		if (!tu_check(p, o->size, o->seed))
			bad("movable object %p (%zu bytes) corrupted", (void *)p, o->size);
		o->seed = tu_rand(s);
		tu_fill(p, o->size, o->seed);
		if (ucma_unpin(o->h) != 0)
			bad("ucma_unpin: %s", strerror(errno));
		count(C_PIN);
		break;
	case 2:		/* a long-term pin moves it out of the CMA zone first */
		p = ucma_pin(o->h, UCMA_PIN_LONGTERM);
		if (!p) {
			if (errno != ENOMEM)
				bad("ucma_pin(LONGTERM): %s", strerror(errno));
			count(C_LONGTERM_FAIL);
			return;
		}
		if (!tu_check(p, o->size, o->seed))
			bad("long-term pinned object corrupted");
		ucma_unpin(o->h);
		count(C_LONGTERM);
		break;
	case 3: {	/* resize, keeping the common prefix */
		size_t ns = pick_size(s), keep = ns < o->size ? ns : o->size;

		if (ucma_hrealloc(o->h, ns) != 0) {
			bad("ucma_hrealloc(%zu): %s", ns, strerror(errno));
			return;
		}
		p = ucma_pin(o->h, 0);
		if (!p || !tu_check(p, keep, o->seed))
			bad("hrealloc lost the first %zu bytes", keep);
		if (p)
			ucma_unpin(o->h);
		o->size = ns;
		priv_stamp(o, s);
		count(C_HREALLOC);
		break;
	}
	default:
		ucma_read_lock();
		p = (unsigned char *)ucma_deref(o->h);
		if (!p || !tu_check(p, o->size, o->seed))
			bad("own object read back wrong");
		ucma_read_unlock();
		if (ucma_hfree(o->h) != 0)
			bad("ucma_hfree of own unpinned object: %s", strerror(errno));
		o->h = 0;
		count(C_HFREE);
		break;
	}
}

/* ------------------------------------------------------------------------ */
/* Shared movable objects: written once, read by everyone                    */
/* ------------------------------------------------------------------------ */

static ucma_handle_t shared_new(uint64_t *s)
{
	size_t size = sizeof(struct hdr) + pick_size(s);
	ucma_handle_t h = ucma_halloc(size, 0);
	struct hdr *p;

	if (!h) {
		bad("ucma_halloc(%zu): %s", size, strerror(errno));
		return 0;
	}
	p = ucma_pin(h, 0);
	p->seed = tu_rand(s);
	p->len = size - sizeof(*p);
	tu_fill(p + 1, p->len, p->seed);
	ucma_unpin(h);
	return h;
}

static void shared_publish(int slot, uint64_t *s)
{
	ucma_handle_t h = shared_new(s), old;

	if (!h)
		return;
	old = atomic_exchange(&shared[slot], h);
	/* Readers may hold the old one inside their read-side sections: the
	 * free must not disturb them (they keep reading the old bytes). */
	if (old && ucma_hfree(old) != 0)
		bad("ucma_hfree of a replaced shared object: %s", strerror(errno));
	count(C_PUBLISH);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Dereference @h in a read-side section and check what it gives. */
static bool shared_check(int slot, ucma_handle_t h)
{
	const struct hdr *p;
	bool gone = false;

	ucma_read_lock();
	p = ucma_deref(h);
	if (!p) {
		if (errno != EINVAL || atomic_load(&shared[slot]) == h)
			bad("ucma_deref of a published handle: %s", strerror(errno));
		gone = true;
	} else if (!tu_check(p + 1, p->len, p->seed)) {
		bad("shared object %p (%llu bytes) corrupted", (const void *)p,
		    (unsigned long long)p->len);
	}
	ucma_read_unlock();
	return gone;
}

/*
 * Read a shared slot.  @race: 0 plain; 1 dereference the handle loaded,
 * one read-side section after another, until it is freed: every answer
 * must be its object intact, and then EINVAL, never another object; 2
 * wait, inside the section, until the object read is freed, then check
 * its bytes again.
 */
static void shared_read(int slot, int race)
{
	ucma_handle_t h = atomic_load(&shared[slot]);
	const struct hdr *p;
	uint64_t until = now_ns() + RACE_WAIT_NS;

	if (!h)
		return;
	if (race != 2) {
		for (;;) {
			if (shared_check(slot, h)) {
				count(C_READ_GONE);
				return;
			}
			if (race == 0 || now_ns() >= until)
				break;
			sched_yield();
		}
		count(C_READ);
		return;
	}
	ucma_read_lock();
	p = ucma_deref(h);
	if (!p) {
		if (errno != EINVAL || atomic_load(&shared[slot]) == h)
			bad("ucma_deref of a published handle: %s", strerror(errno));
		count(C_READ_GONE);
	} else if (!tu_check(p + 1, p->len, p->seed)) {
		bad("shared object %p (%llu bytes) corrupted", (const void *)p,
		    (unsigned long long)p->len);
	} else {
		count(C_READ);
		/* A freed handle dereferences to NULL; its old bytes stay until
		 * this section ends. */
		while (ucma_deref(h) && now_ns() < until)
			sched_yield();
		if (!ucma_deref(h)) {
			if (!tu_check(p + 1, p->len, p->seed))
				bad("shared object %p changed after its free, inside the read-side "
				    "section", (const void *)p);
			count(C_READ_ACROSS_FREE);
		}
	}
	ucma_read_unlock();
}

/* ------------------------------------------------------------------------ */
/* Contiguous buffers                                                        */
/* ------------------------------------------------------------------------ */

static void contig_op(unsigned char **held, size_t *held_size, uint64_t *seed_out, uint64_t *s)
{
	size_t size;
	unsigned flags;

	if (*held) {
		if (!tu_check(*held, *held_size, *seed_out))
			bad("contiguous buffer %p corrupted", (void *)*held);
		if (ucma_release(*held) != 0)
			bad("ucma_release: %s", strerror(errno));
		*held = NULL;
		return;
	}
	size = (size_t)(16 + tu_rand(s) % 1009) << 12;	/* 64 KiB .. 4 MiB */
	flags = tu_rand(s) % 4 == 0 ? UCMA_ALLOC_ZERO : 0;
	*held = ucma_alloc(size, tu_rand(s) % 4 == 0 ? UCMA_PAGEBLOCK_SIZE : 0, flags);
	if (!*held) {
		if (errno == EBUSY)
			count(C_CONTIG_BUSY);
		else if (errno == ENOMEM)
			count(C_CONTIG_NOMEM);
		else
			bad("ucma_alloc(%zu): %s", size, strerror(errno));
		return;
	}
	/* Every byte: the first is 0 and each equals the next. */
	if ((flags & UCMA_ALLOC_ZERO) && ((*held)[0] || memcmp(*held, *held + 1, size - 1)))
		bad("UCMA_ALLOC_ZERO buffer of %zu bytes is not zero", size);
	*held_size = size;
	*seed_out = tu_rand(s);
	tu_fill(*held, size, *seed_out);
	count(C_CONTIG);
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

static void *worker(void *arg)
{
	int id = (int)(uintptr_t)arg;
	uint64_t s = 0x5eed0000u + (uint64_t)id;
	struct block *blocks = calloc(NMALLOC, sizeof(*blocks));
	struct priv *objs = calloc(NPRIV, sizeof(*objs));
	unsigned char *contig = NULL;
	size_t contig_size = 0;
	uint64_t contig_seed = 0;

	if (!blocks || !objs) {
		bad("out of memory for the model");
		return NULL;
	}
	for (int i = 0; i < NSHARED; i++)
		shared_publish(id * NSHARED + i, &s);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		unsigned r = (unsigned)(tu_rand(&s) % 100);

		if (r < 30)
			block_op(&blocks[tu_rand(&s) % NMALLOC], &s);
		else if (r < 55)
			priv_op(&objs[tu_rand(&s) % NPRIV], &s);
		else if (r < 79)
			shared_read((int)(tu_rand(&s) % HOT_FIRST), 0);
		else if (r < 85)
			shared_read(HOT_FIRST + atomic_load(&hot_next), 1 + (int)(tu_rand(&s) % 2));
		else if (r < 92)
			shared_publish(id * NSHARED + (int)(tu_rand(&s) % NSHARED), &s);
		else if (r < 98)
			contig_op(&contig, &contig_size, &contig_seed, &s);
		else if (r < 99) {
			if (ucma_compact(UCMA_COMPACT_ASYNC) != 0)
				bad("ucma_compact(ASYNC): %s", strerror(errno));
			count(C_COMPACT);
		}
	}
	/* Verify and give back everything but the shared objects. */
	contig_op(&contig, &contig_size, &contig_seed, &s);
	if (contig)
		ucma_release(contig);
	for (int i = 0; i < NMALLOC; i++) {
		if (!blocks[i].p)
			continue;
		if (!tu_check(blocks[i].p, blocks[i].size, blocks[i].seed))
			bad("malloc block corrupted at the end");
		ucma_free(blocks[i].p);
	}
	for (int i = 0; i < NPRIV; i++) {
		const unsigned char *p;

		if (!objs[i].h)
			continue;
		ucma_read_lock();
		p = ucma_deref(objs[i].h);
		if (!p || !tu_check(p, objs[i].size, objs[i].seed))
			bad("movable object corrupted at the end");
		ucma_read_unlock();
		if (ucma_hfree(objs[i].h) != 0)
			bad("ucma_hfree at the end: %s", strerror(errno));
	}
	free(blocks);
	free(objs);
	return NULL;
}

/* Replaces the hot shared slots, one every 200 us, round and round. */
static void *republisher(void *arg)
{
	uint64_t s = 77;

	(void)arg;
	for (int i = 0; i < NHOT; i++)
		shared_publish(HOT_FIRST + i, &s);
	for (int i = 0; !atomic_load_explicit(&stop, memory_order_relaxed); i++) {
		struct timespec ts = { 0, 200 * 1000 };

		shared_publish(HOT_FIRST + i % NHOT, &s);
		atomic_store(&hot_next, (i + 1) % NHOT);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void *compactor(void *arg)
{
	uint64_t s = 99;

	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		int prio = tu_rand(&s) % 8 ? UCMA_COMPACT_ASYNC : UCMA_COMPACT_SYNC_LIGHT;

		if (tu_rand(&s) % 2) {
			if (ucma_compact(prio) != 0)
				bad("ucma_compact(%d): %s", prio, strerror(errno));
		} else {
			unsigned order = (unsigned)(tu_rand(&s) % (UCMA_MAX_ORDER + 1));

			if (ucma_compact_order(order, prio) != 0 && errno != ENOMEM)
				bad("ucma_compact_order(%u, %d): %s", order, prio, strerror(errno));
		}
		count(C_COMPACT);
		/* Every 20th round, half the CMA area at once: whatever the
		 * heap borrowed there is taken back by copying while the
		 * workers write and check it. */
		if (tu_rand(&s) % 20 == 0) {
			void *big = ucma_alloc(BIG_CONTIG, 0, 0);

			if (big) {
				memset(big, 0x5c, BIG_CONTIG);
				ucma_release(big);
				count(C_BIG_CONTIG);
			} else if (errno != EBUSY && errno != ENOMEM) {
				bad("ucma_alloc(%zu): %s", (size_t)BIG_CONTIG, strerror(errno));
			}
		}
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static uint64_t stat_now(const char *name)
{
	uint64_t v = 0;

	ucma_stat(name, &v);
	return v;
}

/*
 * With heap lending on, the contiguous buffers must have taken heap
 * pageblocks back from the lent frames, by copying, while the workers
 * ran.  On a slow or loaded machine the compactor's few big buffers may
 * all have found room beside the lent pageblocks (ThreadSanitizer at a
 * load of 6: lent 3-5, taken back 0 in 3 runs of 8).  Then the whole CMA
 * area is asked for, as two halves held at once, which no lent pageblock
 * can stay out of, until one was taken back, @max_s seconds at most.
 */
static void take_back_once(unsigned max_s)
{
	uint64_t until = tu_now_ns() + (uint64_t)max_s * 1000000000u;
	struct timespec ts = { 0, 5 * 1000 * 1000 };

	while (stat_now("lend_heap_migrated") == 0 && tu_now_ns() < until) {
		void *half[2] = { NULL, NULL };

		for (int i = 0; i < 2; i++) {
			half[i] = ucma_alloc(BIG_CONTIG, 0, 0);
			if (!half[i]) {
				if (errno != EBUSY && errno != ENOMEM)
					bad("ucma_alloc(%zu): %s", (size_t)BIG_CONTIG, strerror(errno));
				break;
			}
			memset(half[i], 0x5c, BIG_CONTIG);
			count(C_BIG_CONTIG);
		}
		for (int i = 0; i < 2; i++)
			if (half[i])
				ucma_release(half[i]);
		nanosleep(&ts, NULL);
	}
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = 128u << 20,
		.cma_size = 64u << 20,
		.hugepages = UCMA_BACKING_NONE,
	};
	const char *env = getenv("UCMA_SOAK_SECONDS");
	int seconds = env ? atoi(env) : 10;
	pthread_t th[NWORKERS + 2];
	int n = 0, bad_shared = 0;
	uint64_t total = 0, mig = 0, lent = 0, taken = 0;
	char why[256], line[1024];
	size_t len = 0;

	plan_no_plan();
	if (getenv("UCMA_TEST_SANITIZER") && !env)
		seconds = 5;	/* sanitizers are slow; the schedule matters more */
	if (seconds < 1)
		seconds = 1;
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	for (int i = 0; i < NWORKERS; i++)
		pthread_create(&th[n++], NULL, worker, (void *)(uintptr_t)i);
	pthread_create(&th[n++], NULL, compactor, NULL);
	pthread_create(&th[n++], NULL, republisher, NULL);
	sleep((unsigned)seconds);
	if (ucma_lend_wants_frames(&ucma_opt))
		take_back_once(20);
	atomic_store(&stop, true);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);

	for (int c = 0; c < C_NR; c++) {
		uint64_t v = atomic_load(&counters[c]);

		total += v;
		len += (size_t)snprintf(line + len, sizeof(line) - len, "%s %s=%llu",
					c ? "," : "", counter_names[c], (unsigned long long)v);
		if (len >= sizeof(line))
			len = sizeof(line) - 1;
	}
	ucma_stat("pgmigrate_success", &mig);
	ucma_stat("lend_heap_lent", &lent);
	ucma_stat("lend_heap_migrated", &taken);
	diag("%d s, %d threads, %llu operations:%s", seconds, n, (unsigned long long)total, line);
	diag("%llu objects migrated meanwhile; %llu heap pageblocks on lent CMA frames, %llu of "
	     "them taken back by copying", (unsigned long long)mig, (unsigned long long)lent,
	     (unsigned long long)taken);
	ok(atomic_load(&errors) == 0, "no corrupted byte and no unexpected errno (%llu)",
	   (unsigned long long)atomic_load(&errors));
	ok(counters[C_MALLOC] && counters[C_HALLOC] && counters[C_PIN] && counters[C_READ] &&
		   counters[C_CONTIG] && counters[C_PUBLISH],
	   "every kind of operation ran");
	/* Heap lending is the default: as root (a userfaultfd) the heap's
	 * blocks live on the CMA area's frames and the contiguous buffers
	 * take them back while the workers write and check them. */
	if (ucma_lend_wants_frames(&ucma_opt))
		ok(lent > 0 && taken > 0,
		   "the heap borrowed CMA frames and contiguous buffers took them back by copying, "
		   "under the workers' checks (lent %llu, taken back %llu)",
		   (unsigned long long)lent, (unsigned long long)taken);
	else
		skip(1, "heap lending is off for this process (no userfaultfd with "
			"write-protection: not root?)");
	ok(counters[C_READ_GONE] > 0,
	   "readers dereferenced handles freed under them and got EINVAL (deref-of-freed %llu)",
	   (unsigned long long)counters[C_READ_GONE]);
	ok(counters[C_READ_ACROSS_FREE] > 0,
	   "readers kept reading objects freed inside their read-side section, bytes intact "
	   "(read-across-free %llu)",
	   (unsigned long long)counters[C_READ_ACROSS_FREE]);

	ucma_read_lock();
	for (int i = 0; i < NSLOTS; i++) {
		const struct hdr *p = ucma_deref(shared[i]);

		bad_shared += !p || !tu_check(p + 1, p->len, p->seed);
	}
	ucma_read_unlock();
	ok(bad_shared == 0, "every shared object verifies at the end");
	for (int i = 0; i < NSLOTS; i++)
		ucma_hfree(shared[i]);
	ucma_defer_drain();
	{
		uint64_t live, bytes;

		ucma_handle_counters(&live, &bytes);
		ok(live == 0, "no movable object is left (%llu)", (unsigned long long)live);
	}
	{
		struct ucma_arena *a = ucma_arena_get();

		ok(ucma_zone_check(&a->zones[0], why, sizeof(why)) == 0 &&
			   ucma_zone_check(&a->zones[1], why, sizeof(why)) == 0,
		   "zone invariants hold after the run");
	}
	return done();
}
