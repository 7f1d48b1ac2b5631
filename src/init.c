/*
 * init.c - start-up, explicit configuration, and fork handling.
 *
 * The library initialises itself on first use (ucma_arena_get()), or when
 * the program calls ucma_init().  Start-up must tolerate re-entry: libnuma
 * and liburcu allocate memory, and under LD_PRELOAD those calls come back
 * into ucma's malloc while the arena is being created.  The initialising
 * thread is marked; a re-entrant ucma_arena_get() from it returns NULL with
 * EAGAIN, and malloc.c serves such requests from its bootstrap buffer.
 * Other threads wait on the init lock.  No allocator lock is held while
 * libnuma or liburcu are called.
 *
 * Fork: fork.c runs every lock owner's handlers in lock order; the ones
 * for the start-up lock and the CMA area and zone locks are here.  The
 * CMA areas of the child are frames.c's business (its handler gives the
 * child areas of its own).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "memevent.h"
#include "pcp.h"

#include "fork.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct ucma_arena *ucma_the_arena;

static pthread_mutex_t UCMA_FORK_LOCK init_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread bool initializing __attribute__((tls_model("initial-exec")));
static bool init_done;		/* init_lock: an attempt has finished */
static int init_errno;		/* init_lock: why it failed, 0 if it did not */
static bool options_set;	/* init_lock: ucma_init() supplied options */

/* ------------------------------------------------------------------------ */
/* Fork handlers of the arena's locks (fork.c runs them in its order)       */
/* ------------------------------------------------------------------------ */

/*
 * Start-up, outermost of all: a fork while another thread creates the
 * arena waits for it, or the child would inherit init_lock held and its
 * first call would wait forever.  Start-up waits for nothing that a
 * fork's prepare stage holds.
 */
void ucma_init_fork_prepare(void)
{
	ucma_mutex_lock(&init_lock);
}

void ucma_init_fork_parent(void)
{
	ucma_mutex_unlock(&init_lock);
}

/* Zone and area locks: innermost, taken in a fixed order. */
/* The arena whose locks this fork's prepare stage took: another thread
 * may create the arena between prepare and parent. */
static struct ucma_arena *fork_arena;
/* The forking thread's tid, for the child (cma.h: its own operations
 * go on there). */
static pid_t fork_tid;

void ucma_zones_fork_prepare(void)
{
	struct ucma_arena *a = ucma_arena_peek();

	fork_arena = a;
	fork_tid = gettid();

	if (!a)
		return;
	for (int i = 0; i < a->nr_areas; i++)
		ucma_mutex_lock(&a->areas[i].lock);
	/* No purge batch holds pages off the lists in the child (zone.c);
	 * after the area locks, which a free of pages (and so the decay's
	 * purge) may run under. */
	ucma_zone_purge_fork_prepare(a);
	/* Each zone's per-CPU list locks before its lock (pcp.h). */
	for (int z = 0; z < UCMA_ZONE_NR; z++) {
		ucma_pcp_lock_all(&a->zones[z]);
		ucma_mutex_lock(&a->zones[z].lock);
	}
}

void ucma_zones_fork_parent(void)
{
	struct ucma_arena *a = fork_arena;

	if (!a)
		return;
	for (int z = UCMA_ZONE_NR - 1; z >= 0; z--) {
		ucma_mutex_unlock(&a->zones[z].lock);
		ucma_pcp_unlock_all(&a->zones[z]);
	}
	ucma_zone_purge_fork_parent(a);
	for (int i = a->nr_areas - 1; i >= 0; i--)
		ucma_mutex_unlock(&a->areas[i].lock);
}

/* The child: what absent threads were doing in the CMA areas is undone
 * or finished (cma.h) while every lock is still held, then as the parent. */
void ucma_zones_fork_child(void)
{
	struct ucma_arena *a = fork_arena;

	if (a) {
		ucma_cma_fork_child_locked(a, fork_tid);
		ucma_zone_purge_fork_child(a);
	}
	ucma_zones_fork_parent();
}

/* ------------------------------------------------------------------------ */
/* Start-up                                                                  */
/* ------------------------------------------------------------------------ */

/* Called with init_lock held and `initializing` set. */
static int init_locked(void)
{
	struct ucma_arena *a;

	if (!options_set) {
		int bad;

		ucma_options_defaults(&ucma_opt);
		bad = ucma_options_from_env(&ucma_opt);
		if (bad && ucma_opt.strict) {
			ucma_log("UCMA_STRICT=1: refusing to start with %d bad setting(s)", bad);
			return EINVAL;
		}
	}
	/* UCMA_VERBOSE: every setting in effect, then (arena.c) the layout. */
	if (ucma_opt.verbose)
		ucma_options_print(2, &ucma_opt);
	if (ucma_arena_create(&ucma_opt, &a) != 0) {
		int err = errno;
		size_t span = ucma_arena_span(&ucma_opt);

		if (span > ucma_opt.arena_size)
			ucma_log("cannot reserve a %zu MiB arena (%zu MiB of address space with "
				 "the heap's window onto lent frames): %s",
				 ucma_opt.arena_size >> 20, span >> 20, strerror(err));
		else
			ucma_log("cannot reserve a %zu MiB arena: %s", ucma_opt.arena_size >> 20,
				 strerror(err));
		return err;
	}
	__atomic_store_n(&ucma_the_arena, a, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Once the arena exists: the report at exit and the live statistics
 * segment.  Called with no ucma lock held (publishing reads zone locks).
 */
static bool published;

static void after_start(void)
{
	static bool atexit_done;

	/* The MAP events of the CMA areas just created (frames.c). */
	ucma_mem_event_deliver();
	if (__atomic_exchange_n(&published, true, __ATOMIC_ACQ_REL))
		return;
	if (!__atomic_exchange_n(&atexit_done, true, __ATOMIC_ACQ_REL)) {
		ucma_stats_keep_stderr();
		atexit(ucma_stats_at_exit);
	}
	ucma_shm_publish();
}

struct ucma_arena *ucma_arena_get(void)
{
	struct ucma_arena *a = __atomic_load_n(&ucma_the_arena, __ATOMIC_ACQUIRE);

	if (UCMA_LIKELY(a != NULL))
		return a;
	if (initializing) {
		errno = EAGAIN;
		return NULL;
	}
	ucma_fork_init();	/* before the first lock is taken (fork.c) */
	ucma_mutex_lock(&init_lock);
	if (!init_done) {
		initializing = true;
		init_errno = init_locked();
		initializing = false;
		init_done = true;
	}
	a = ucma_the_arena;
	if (!a)
		errno = init_errno;
	ucma_mutex_unlock(&init_lock);
	if (a)
		after_start();
	return a;
}

struct ucma_arena *ucma_arena_peek(void)
{
	return __atomic_load_n(&ucma_the_arena, __ATOMIC_ACQUIRE);
}

/**
 * ucma_init() - initialise explicitly, from @cfg or (NULL) the environment.
 */
int ucma_init(const struct ucma_config *cfg)
{
	int err = 0;

	if (initializing) {
		errno = EBUSY;
		return -1;
	}
	ucma_fork_init();
	ucma_mutex_lock(&init_lock);
	/*
	 * Already running: fine if nothing new was asked for.  A failed
	 * attempt is not final for an explicit call: it tries again (the
	 * caller may have freed memory or chosen a smaller arena), while
	 * ucma_arena_get() keeps returning the first error cheaply.
	 */
	if (init_done && ucma_the_arena) {
		if (cfg)
			err = EBUSY;
		goto out;
	}
	if (cfg) {
		int bad;

		ucma_options_defaults(&ucma_opt);
		/* The environment still tunes what the structure leaves at zero. */
		bad = ucma_options_from_env(&ucma_opt);
		bad += ucma_options_from_config(&ucma_opt, cfg);
		if (bad && (ucma_opt.strict || cfg->strict)) {
			/* A refusal is a failed start like any other: the
			 * other calls keep failing with it instead of starting
			 * from the environment, which would silently drop the
			 * caller's configuration. */
			err = EINVAL;
			if (!init_done) {
				init_errno = EINVAL;
				init_done = true;
			}
			goto out;
		}
		options_set = true;
	}
	initializing = true;
	init_errno = init_locked();
	initializing = false;
	init_done = true;
	err = init_errno;
	if (err)
		options_set = false;
out:
	ucma_mutex_unlock(&init_lock);
	if (err) {
		errno = err;
		return -1;
	}
	after_start();
	return 0;
}

#ifdef UCMA_TEST_HOOKS
/*
 * Test builds only: tear the arena down so one test program can try
 * several configurations.  The caller guarantees that nothing allocated
 * from the arena is used afterwards and no other thread runs.
 */
void ucma_test_reset(void)
{
	/* The thread walks the arena: it goes before the arena does. */
	ucma_compactd_stop();
	ucma_shm_unpublish();
	published = false;
	/* Destroyed with no lock held, so that its areas' UNMAP events are
	 * delivered before they go (memevent.c delivers nothing inside a
	 * lock); no other thread runs. */
	if (ucma_the_arena)
		ucma_arena_destroy(ucma_the_arena);
	ucma_mutex_lock(&init_lock);
	ucma_the_arena = NULL;
	init_done = false;
	init_errno = 0;
	options_set = false;
	ucma_mutex_unlock(&init_lock);
}
#endif
