/*
 * compactd.c - the background compaction thread: the arena's kcompactd.
 *
 * It sleeps for UCMA_COMPACT_INTERVAL_MS, or until an allocation takes a
 * zone below its low watermark (zone.c calls ucma_compactd_wakeup()), and
 * on each wake-up refreshes the live statistics (ucma_shm_update()) and
 * looks at every zone:
 *
 *  - proactively, the kernel's scheme: the fragmentation score of a zone
 *    (share of its free memory not in free pageblocks, 0..100) is compared
 *    with watermarks derived from UCMA_COMPACT_PROACTIVENESS p:
 *    low = max(100 - p, 5), high = min(low + 10, 100).  Above high the
 *    zone is compacted, wake-up after wake-up, until the score is at or
 *    below low (hysteresis).  p = 0 disables proactive compaction.
 *  - on demand, after a watermark wake-up: a zone with no free pageblock
 *    where compaction for one is suitable is compacted for order 9, even
 *    with p = 0.
 *
 * Each wake-up does bounded work: one slab consolidation at ASYNC and one
 * ASYNC run per zone (at most ucma_compact_async_pageblocks pageblocks),
 * going on from the scanner positions the last run cached.  ASYNC never
 * waits for a pin (it skips pinned objects), and a run that finds the zone
 * busy with another compaction skips it: the application comes first.
 * A cycle is over when the migrate scanner has crossed the zone: the skip
 * hints are forgotten, so the next cycle looks at every pageblock again,
 * and if the cycle did not lower the score the zone is left alone for 1,
 * 2, 4 ... 64 wake-ups (the kernel defers 64 wake-ups after one pass that
 * did not help; its passes are whole zones, these runs are slices of one,
 * so the comparison is per cycle); a cycle that helped resets the
 * back-off.
 *
 * Life cycle.  The thread starts on the first ucma_halloc() or
 * ucma_alloc() (ucma_compactd_start_once(): one atomic load afterwards),
 * so a program that only mallocs never has it; UCMA_COMPACT=off keeps it
 * from starting (explicit and direct compaction still work).  It is
 * created through ucma_os.thread_create with every signal blocked; if that
 * fails, one message says so and compaction happens on demand only.
 *
 * Fork.  This is the first of fork.c's stages: it asks the
 * thread to park and waits until it has (the thread parks only at the top
 * of its loop, where it holds no lock; a compaction run in progress stops
 * at its next pageblock), then takes every zone's compact_lock so no other
 * thread is inside a compaction either.  The parent unparks the thread.
 * The child has no thread: it marks it not running, and the next movable
 * or contiguous allocation starts a new one.  A fork made inside a
 * read-side section skips this stage (the thread may be waiting for that
 * section's grace period); its child never starts the thread.
 *
 * Locking: kcd.lock serialises start (a try-lock), stop and the fork
 * handlers; the thread never takes it.  The thread's wake-up word and the
 * park handshake are futexes, so ucma_compactd_wakeup() takes no lock and
 * may be called from any allocation path.  The thread's own back-off state is its own.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"

#include "fork.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum kcd_state {
	KCD_IDLE = 0,		/* not running; starts on the next movable allocation */
	KCD_RUNNING,
	KCD_FAILED,		/* could not be created: no background compaction */
};

#define KCD_MAX_DEFER_SHIFT 6

static struct {
	pthread_mutex_t lock;		/* start, stop, fork handlers */
	_Atomic int state;		/* enum kcd_state */
	_Atomic uint32_t wake_seq;	/* futex: bumped to wake the thread */
	_Atomic int demand;		/* a zone went below its low watermark */
	_Atomic int park;		/* 1 while the thread must stay parked */
	_Atomic uint32_t park_seq;	/* futex: bumped by each park request,
					 * unpark and stop */
	_Atomic uint32_t parked_seq;	/* futex: the request the thread parked for */
	_Atomic int stop;		/* with park: exit instead of parking */
	pthread_t thread;
	/* the thread's own state */
	bool active[UCMA_ZONE_NR];	/* compacting until the score reaches low */
	unsigned defer[UCMA_ZONE_NR];	/* wake-ups to leave the zone alone */
	unsigned defer_shift[UCMA_ZONE_NR];
	unsigned cycle_score[UCMA_ZONE_NR];	/* score when the current cycle began; 0: none */
} kcd UCMA_FORK_LOCK = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void kick(void)
{
	atomic_fetch_add(&kcd.wake_seq, 1);
	ucma_futex_wake_all(&kcd.wake_seq);
}

/* ------------------------------------------------------------------------ */
/* The thread                                                                */
/* ------------------------------------------------------------------------ */

/* The kernel's fragmentation_score_wmark(). */
static unsigned score_wmark(unsigned proactiveness, bool low)
{
	unsigned wmark_low = proactiveness >= 95 ? 5 : 100 - proactiveness;

	return low ? wmark_low : (wmark_low + 10 > 100 ? 100 : wmark_low + 10);
}

static bool parking(void)
{
	return atomic_load_explicit(&kcd.park, memory_order_relaxed) != 0;
}

/* One wake-up's work on every zone; @demand: a watermark wake-up. */
static void kcompactd_do_work(bool demand)
{
	struct ucma_arena *a = ucma_arena_peek();
	/* Atomic reads: the tunables may be changed while the thread runs. */
	unsigned p = __atomic_load_n(&ucma_opt.compact_proactiveness, __ATOMIC_RELAXED);
	bool consolidated = false;

	if (!a)
		return;
	for (int i = 0; i < UCMA_ZONE_NR && !parking(); i++) {
		struct ucma_zone *z = &a->zones[i];
		unsigned before, after;
		bool proactive, on_demand;
		int r;

		if (z->managed_pages == 0)
			continue;
		before = ucma_fragmentation_score(z);
		proactive = p > 0 && before > score_wmark(p, kcd.active[i]);
		kcd.active[i] = proactive;
		on_demand = demand && ucma_compaction_suitable(z, UCMA_PAGEBLOCK_ORDER) ==
					      UCMA_COMPACT_CONTINUE;
		if (!proactive && !on_demand)
			continue;
		if (!on_demand && kcd.defer[i]) {
			kcd.defer[i]--;
			continue;
		}
		if (!consolidated) {
			ucma_mslab_consolidate(UCMA_COMPACT_ASYNC);
			consolidated = true;
		}
		if (!kcd.cycle_score[i])
			kcd.cycle_score[i] = before + 1;
		r = ucma_compact_zone(z, proactive ? -1 : (int)UCMA_PAGEBLOCK_ORDER,
				      UCMA_COMPACT_ASYNC, &kcd.park);
		if (r == UCMA_COMPACT_CONTENDED)
			continue;
		after = ucma_fragmentation_score(z);
		if (r != UCMA_COMPACT_COMPLETE && r != UCMA_COMPACT_SKIPPED)
			continue;	/* the cycle goes on at the next wake-up */
		/* The cycle is over: look at everything again next time. */
		ucma_compact_reset_hints(z);
		if (after + 1 < kcd.cycle_score[i]) {
			kcd.defer_shift[i] = 0;
			kcd.defer[i] = 0;
		} else {
			kcd.defer[i] = 1u << kcd.defer_shift[i];
			if (kcd.defer_shift[i] < KCD_MAX_DEFER_SHIFT)
				kcd.defer_shift[i]++;
		}
		kcd.cycle_score[i] = 0;
	}
}

/*
 * Park while a fork is under way.  Returns true if the thread must exit.
 *
 * The thread acknowledges the request it saw (parked_seq = park_seq) and
 * sleeps on park_seq, which every request, every unpark and every stop
 * changes.  Sleeping on the park flag instead lost wake-ups: between the
 * acknowledgement and the sleep, the parent could unpark and the next
 * fork park again, and the thread slept on a flag that was 1 again
 * without acknowledging the new request, so that fork waited forever.
 */
static bool park_point(void)
{
	static const struct timespec recheck = { 0, 100 * 1000 * 1000 };

	while (atomic_load(&kcd.park)) {
		uint32_t seq;

		if (atomic_load(&kcd.stop))
			return true;
		seq = atomic_load(&kcd.park_seq);
		if (!atomic_load(&kcd.park))
			break;	/* unparked between the two loads */
		atomic_store(&kcd.parked_seq, seq);
		ucma_futex_wake_all(&kcd.parked_seq);
		ucma_futex_wait(&kcd.park_seq, seq, &recheck);
	}
	return atomic_load(&kcd.stop) != 0;
}

/* Unpark: the flag first, then the word the thread sleeps on. */
static void unpark(void)
{
	atomic_store(&kcd.park, 0);
	atomic_fetch_add(&kcd.park_seq, 1);
	ucma_futex_wake_all(&kcd.park_seq);
}

static void *kcompactd_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ucma_compactd");
	for (;;) {
		uint32_t seq = atomic_load(&kcd.wake_seq);

		if (!atomic_load(&kcd.demand) && !atomic_load(&kcd.park)) {
			unsigned ms = __atomic_load_n(&ucma_opt.compact_interval_ms,
						      __ATOMIC_RELAXED);
			struct timespec ts;

			ms = ms ? ms : 1;
			ts.tv_sec = (time_t)(ms / 1000);
			ts.tv_nsec = (long)(ms % 1000) * 1000000L;

			ucma_futex_wait(&kcd.wake_seq, seq, &ts);
		}
		if (park_point())
			break;
		ucma_count(UCMA_STAT_COMPACT_DAEMON_WAKE, 1);
		ucma_shm_update();
		kcompactd_do_work(atomic_exchange(&kcd.demand, 0) != 0);
	}
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* Fork handlers                                                             */
/* ------------------------------------------------------------------------ */

/* The arena whose compact_locks this fork's prepare took. */
static struct ucma_arena *fork_arena;

void ucma_compactd_fork_prepare(void)
{
	ucma_mutex_lock(&kcd.lock);
	if (atomic_load(&kcd.state) == KCD_RUNNING) {
		uint32_t seq = atomic_fetch_add(&kcd.park_seq, 1) + 1;

		atomic_store(&kcd.park, 1);
		kick();
		ucma_futex_wake_all(&kcd.park_seq);	/* a thread still parked from before */
		for (;;) {
			uint32_t parked = atomic_load(&kcd.parked_seq);

			if (parked == seq)
				break;
			ucma_futex_wait(&kcd.parked_seq, parked, NULL);
		}
	}
	fork_arena = ucma_arena_peek();
	if (fork_arena)
		for (int i = 0; i < UCMA_ZONE_NR; i++)
			ucma_mutex_lock(&fork_arena->zones[i].compact_lock);
}

static void unlock_zones(void)
{
	if (fork_arena)
		for (int i = UCMA_ZONE_NR - 1; i >= 0; i--)
			ucma_mutex_unlock(&fork_arena->zones[i].compact_lock);
}

void ucma_compactd_fork_parent(void)
{
	unlock_zones();
	if (atomic_load(&kcd.park))
		unpark();
	ucma_mutex_unlock(&kcd.lock);
}

/* The thread does not exist in a child: forget its state. */
static void forget_thread(int state)
{
	atomic_store(&kcd.state, state);
	atomic_store(&kcd.park, 0);
	atomic_store(&kcd.stop, 0);
	atomic_store(&kcd.demand, 0);
	atomic_store(&kcd.parked_seq, atomic_load(&kcd.park_seq));
	memset(kcd.active, 0, sizeof(kcd.active));
	memset(kcd.defer, 0, sizeof(kcd.defer));
	memset(kcd.defer_shift, 0, sizeof(kcd.defer_shift));
	memset(kcd.cycle_score, 0, sizeof(kcd.cycle_score));
}

void ucma_compactd_fork_child(void)
{
	unlock_zones();
	/* Started again lazily, by the next movable or contiguous allocation. */
	forget_thread(atomic_load(&kcd.state) == KCD_RUNNING ? KCD_IDLE : atomic_load(&kcd.state));
	ucma_mutex_unlock(&kcd.lock);
}

/*
 * The child of a fork made inside a read-side section: the thread was not
 * parked and the locks were not taken, so any of them may be held by a
 * thread that does not exist here, and a compaction may have stopped
 * half-way.  This child cannot wait for grace periods, so it cannot
 * compact anyway (rcu.h): the locks are made anew and the thread never
 * starts.
 */
void ucma_compactd_fork_child_unprepared(void)
{
	struct ucma_arena *a = ucma_arena_peek();

	pthread_mutex_init(&kcd.lock, NULL);
	if (a)
		for (int i = 0; i < UCMA_ZONE_NR; i++)
			pthread_mutex_init(&a->zones[i].compact_lock, NULL);
	forget_thread(KCD_FAILED);
}

/* ------------------------------------------------------------------------ */
/* Start, stop, wake                                                         */
/* ------------------------------------------------------------------------ */

static void start_slow(void)
{
	int rc;

	if (!ucma_arena_peek())
		return;
	/*
	 * A try-lock: this runs inside allocations, possibly inside a
	 * read-side section, and a fork's prepare stage holds the lock while
	 * it waits for this thread's grace periods (fork.c).  The next
	 * allocation tries again.
	 */
	if (ucma_mutex_trylock(&kcd.lock) != 0)
		return;
	if (atomic_load(&kcd.state) != KCD_IDLE || !ucma_opt.compact)
		goto out;
	atomic_store(&kcd.park, 0);
	atomic_store(&kcd.stop, 0);
	rc = ucma_thread_start(&kcd.thread, NULL, kcompactd_main);
	if (rc != 0) {
		atomic_store(&kcd.state, KCD_FAILED);
		ucma_log("cannot start the background compaction thread (%s); compacting on "
			 "demand only",
			 strerror(rc > 0 ? rc : errno));
	} else {
		atomic_store(&kcd.state, KCD_RUNNING);
	}
out:
	ucma_mutex_unlock(&kcd.lock);
}

/**
 * ucma_compactd_start_once() - start the background compaction thread if
 * UCMA_COMPACT allows it and it is not running (or failed to start).
 */
void ucma_compactd_start_once(void)
{
	if (UCMA_LIKELY(atomic_load_explicit(&kcd.state, memory_order_acquire) != KCD_IDLE) ||
	    !ucma_opt.compact)
		return;
	start_slow();
}

/**
 * ucma_compactd_wakeup() - ask the thread for a pass now (a zone fell
 * below its low watermark).  Lock-free; one load when no thread runs, and
 * one system call per burst of wake-ups.
 */
void ucma_compactd_wakeup(void)
{
	if (atomic_load_explicit(&kcd.state, memory_order_relaxed) != KCD_RUNNING)
		return;
	if (atomic_exchange_explicit(&kcd.demand, 1, memory_order_relaxed))
		return;
	kick();
}

/**
 * ucma_compactd_stop() - stop the thread and wait for it; the next
 * movable or contiguous allocation starts it again if UCMA_COMPACT allows.
 */
void ucma_compactd_stop(void)
{
	ucma_mutex_lock(&kcd.lock);
	if (atomic_load(&kcd.state) == KCD_RUNNING) {
		atomic_store(&kcd.stop, 1);
		atomic_store(&kcd.park, 1);
		kick();
		atomic_fetch_add(&kcd.park_seq, 1);	/* wakes a parked thread */
		ucma_futex_wake_all(&kcd.park_seq);
		pthread_join(kcd.thread, NULL);
		atomic_store(&kcd.stop, 0);
		atomic_store(&kcd.park, 0);
		atomic_store(&kcd.state, KCD_IDLE);
	} else if (atomic_load(&kcd.state) == KCD_FAILED) {
		/* Let the next start try again (thread creation may work now). */
		atomic_store(&kcd.state, KCD_IDLE);
	}
	ucma_mutex_unlock(&kcd.lock);
}

bool ucma_compactd_running(void)
{
	return atomic_load(&kcd.state) == KCD_RUNNING;
}
