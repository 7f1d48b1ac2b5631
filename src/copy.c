/*
 * copy.c - copying a migrated object to its new place, with helpers.
 *
 * Around the caches.  A migrated object is not read soon (it was cold
 * where it lay, or it would not be moved), so large copies use
 * non-temporal stores: writing around the caches saves reading each
 * destination line first and evicting the program's working set.  16-byte
 * streaming stores gave 8.8 GB/s on 64 KiB objects against memcpy's
 * 5.5-6.8 GB/s; 32-byte ones took migration / memcpy in bench_zone_cma
 * from a median of 0.78 and 0.86 to 0.87 and 0.94 in two sets of
 * alternating runs (tests/bench/RESULTS.md).  Without AVX2 (x86-64 CPUs
 * before 2013), and for small or misaligned objects, memcpy.
 *
 * Helpers.  One core does not reach the memory system's bandwidth: two
 * threads each streaming half of 256 MiB copied 38 GB/s where one copied
 * 20 (tests/bench/RESULTS.md, "Copy helpers").  So an object from the
 * caller's split size on is cut into pieces that UCMA_COPY_HELPERS helper
 * threads copy beside the migrating thread.  Not smaller ones: every
 * hand-off moves cache lines between the threads (a quarter of a
 * microsecond each way on the machine measured).  The split sizes are
 * measured ones:
 *  - UCMA_COPY_SPLIT_MIN (256 KiB), for migrations made one by one, as
 *    ucma_alloc() makes them clearing its run: 64 KiB objects fell from
 *    1.00 of memcpy to 0.71 with helpers (0.90 to 0.85 in a later run),
 *    128 KiB ones stayed level (1.05, 1.04), while 256 KiB objects went
 *    from 1.04 to 1.25 and 1 MiB ones from 1.16 to 1.84 (make
 *    bench-zone-cma);
 *  - UCMA_COPY_SPLIT_MIN_COMPACT (64 KiB), for a compaction a thread
 *    waits for, which moves objects of every size back to back: its time
 *    fell by a seventh with 64 KiB (medians of five alternating runs of
 *    make bench-highalloc's compaction, 11.9 -> 10.3 ms; 32 KiB and
 *    16 KiB no better), the helpers copying 46 % of the bytes.  The
 *    compaction thread (compactd.c) keeps the larger size: it runs
 *    beside the program, whose CPUs the helpers would take.
 *
 * The job.  One at a time, in `job`; its owner is the migrating thread
 * that won the busy flag (the others copy alone).  The claim word holds
 * the job's generation, its number of pieces (0: closed) and the next
 * piece to take.  The owner closes the word (a new generation), writes
 * the description with release stores, and opens the job with a release
 * store of the word.  The owner takes pieces with fetch-and-add; a helper
 * with a compare-and-swap from the word it read the description under
 * (acquire loads).  A helper that read any part of a new description
 * therefore sees the closing store happen before its compare-and-swap,
 * which fails: no helper ever copies by a half-written description.  A
 * helper tells how many pieces it finished once it finds none left
 * (release, after the fence that orders its streaming stores); the owner,
 * once no piece is left to take, waits for that count to reach what the
 * helpers took, so the release store that publishes the new address
 * (handle.h) comes after every byte of the copy.  A helper stalled for
 * 2^32 jobs between its load and its compare-and-swap could take a piece
 * of a later job by the same word: not a case to plan for.
 *
 * Waking.  A helper looks for pieces, spinning for SPIN_NS after the
 * last piece it copied (a compaction moves an object every few
 * microseconds, so the helper stays awake through one), then sleeps on a
 * futex.  The owner of a job wakes sleeping helpers with one system call
 * and does not wait for them: a helper that wakes late finds the pieces
 * taken, and the owner has copied them itself.
 *
 * Helpers and other work.  A helper is of use only on a CPU nothing else
 * wants.  One that took a piece and then lost its CPU (to another
 * process, or a busy thread of the program itself) holds the owner until
 * the scheduler runs it again, 2.5-4 ms here, for a piece the owner would
 * have copied in microseconds; and one spinning for work takes CPU time
 * that the owner or other work wants.  With one busy thread beside
 * bench_highalloc on two CPUs, compaction took a median 13.9 ms with the
 * helper, up to 20.3 ms, against 11.1 ms without (tests/bench/RESULTS.md).
 * So:
 *  - every SOLO_MIN_NS of copying, the owner of a process that may run
 *    on every CPU counts the threads running or waiting for a CPU
 *    (/proc/loadavg, 6-8 us a read here; on a subset of the CPUs the
 *    whole system's count would say nothing of them); with
 *    itself and the sleeping helpers counted in, more than the CPUs
 *    online means no CPU is free for a helper: the copies of the next
 *    SOLO_MIN_NS are made alone (pgmigrate_copy_no_cpu);
 *  - a helper seen to lose its CPU rests them the same way
 *    (pgmigrate_copy_helper_late): by the owner, a wait for the pieces
 *    that outlasts WAIT_SPINS spins is timed, and one longer than LATE_NS
 *    plus the piece's copy at 1 GB/s is a lost CPU; by the helper
 *    itself, more than LATE_NS beyond what its copies can take at 1 GB/s
 *    between two looks at the clock (every 64 spins, and after each
 *    piece).  LATE_NS is 1 ms: well short of the time slices seen, well
 *    beyond a fault on a fresh huge page (with 0.1 ms such faults rested
 *    the helpers in a compaction of 2 GiB on an idle machine).  A loss
 *    within four rests' lengths of the end of the last rest doubles it,
 *    up to SOLO_MAX_NS.
 * The helpers sleep through a rest.  The owner sleeps on a futex while it
 * waits for slow pieces (the helper wakes it), leaving its CPU to other
 * work; it did not bring a stopped helper back sooner than the
 * sched_yield() it replaces (the scheduler did not move the helper to
 * the freed CPU in time, RESULTS.md).
 *
 * Life cycle.  Helpers start on the first copy that could use them,
 * created through ucma_os.thread_create with every signal blocked, never
 * more than the CPUs the process may run on, less one (a helper that has
 * no CPU of its own only takes turns with the owner).  They run until
 * the process ends.  A child of fork() has none (ucma_copy_fork_child());
 * it starts its own when it copies.  A fork made by a signal handler of
 * an owner in the middle of a job leaves the child's owner waiting for
 * pieces that the helpers of the parent took: the owner sees the fork
 * (fork_epoch) and copies the whole object again.
 *
 * SPDX-License-Identifier: MIT
 */
#include "copy.h"
#include "lock.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS		(200u * 1000)	/* a helper spins this long after a piece */
#define WAIT_SPINS	1024u		/* the owner's spins between looks at a fork and the clock */
#define LATE_NS		(1000u * 1000)	/* a stop beyond this and the copy: a lost CPU */
#define SOLO_MIN_NS	(16ull * 1000 * 1000)	/* copies made alone after a late helper, at first */
#define SOLO_MAX_NS	(512ull * 1000 * 1000)	/* and at most */
#define HELPER_STACK	(256u << 10)
#ifndef PIECES_PER_THREAD
#define PIECES_PER_THREAD 2u		/* a job's pieces per thread that copies it */
#endif

#ifdef UCMA_TEST_HOOKS
_Atomic uint64_t ucma_copy_test_helper_delay_ns;
_Atomic long ucma_copy_test_runnable;
#endif

/* The claim word: generation, pieces (0: closed), next piece to take. */
#define CLAIM(gen, pieces)	((uint64_t)(gen) << 32 | (uint64_t)(pieces) << 16)
#define CLAIM_GEN(c)		((uint32_t)((c) >> 32))
#define CLAIM_PIECES(c)		((uint32_t)((c) >> 16) & 0xffffu)
#define CLAIM_NEXT(c)		((uint32_t)(c) & 0xffffu)

enum helpers_state { H_IDLE, H_STARTING, H_RUNNING, H_NONE };

/*
 * Each group on a cache line of its own: the helpers spin reading the
 * claim word, and a store to any other field on its line would pull it
 * away from them (and back) each time.
 */
static struct {
	/* The claim word (see above).  Written by the owner; the helpers
	 * take pieces from it with compare-and-swap. */
	_Alignas(64) _Atomic uint64_t claim;
	/* The description of the open job: written by its owner (release)
	 * while the word is closed, read (acquire) by the helpers. */
	_Alignas(64) _Atomic(char *) dst;
	_Atomic(const char *) src;
	_Atomic size_t n;
	_Atomic size_t piece;		/* bytes per piece, the last shorter */
	/* Pieces the helpers finished, of the job open now; a futex the
	 * owner sleeps on when they are slow, saying so in @owner_sleeps. */
	_Alignas(64) _Atomic uint32_t done;
	_Atomic uint32_t owner_sleeps;
	/* Futex: bumped to wake sleeping helpers; how many sleep. */
	_Alignas(64) _Atomic uint32_t wake_seq;
	_Atomic uint32_t sleepers;
	/* Who owns the job: 0 nobody, else the pthread_self() of the
	 * migrating thread that does. */
	_Alignas(64) _Atomic uintptr_t busy;
	_Atomic int state;		/* enum helpers_state */
	_Atomic unsigned running;	/* helper threads started */
	_Atomic unsigned fork_epoch;	/* bumped in each child of fork() */
	/* The helpers' rest after one lost its CPU (see above): set by an
	 * owner or a helper that saw it, read by the owners; relaxed, as
	 * two that see it at once may both set it and either value does. */
	_Alignas(64) _Atomic uint64_t rest_until;	/* copies alone until then (0: never rested) */
	_Atomic uint64_t rest_ns;			/* the last rest's length */
	/* When an owner last looked for free CPUs: the owners' alone,
	 * ordered between them by @busy's compare-and-swap and release. */
	uint64_t cpu_look;
} job;

/* Set before the helpers start: the CPUs online, and whether this
 * process may run on all of them (the look for a free CPU counts the
 * whole system's threads: on a subset it would say nothing). */
static unsigned cpus_online;
static bool cpus_all;

/* ------------------------------------------------------------------------ */
/* Copying one piece                                                         */
/* ------------------------------------------------------------------------ */

#if defined(__x86_64__)
#include <immintrin.h>
#define COPY_STREAM_MIN (16u << 10)

/* The fence orders the streaming stores before whatever store tells
 * another thread the copy is done. */
__attribute__((target("avx2"))) static void copy_stream(void *dst, const void *src, size_t n)
{
	__m256i *d = dst;
	const __m256i *s = src;
	size_t blocks;

	for (blocks = n / 128; blocks; blocks--, d += 4, s += 4) {
		__m256i a = _mm256_loadu_si256(s), b = _mm256_loadu_si256(s + 1);
		__m256i c = _mm256_loadu_si256(s + 2), e = _mm256_loadu_si256(s + 3);

		_mm256_stream_si256(d, a);
		_mm256_stream_si256(d + 1, b);
		_mm256_stream_si256(d + 2, c);
		_mm256_stream_si256(d + 3, e);
	}
	_mm_sfence();
	memcpy(d, s, n % 128);
}

static bool stream_ok(const void *dst, size_t n)
{
	if (n < COPY_STREAM_MIN || ((uintptr_t)dst & 31))
		return false;
	/* (A no-op once done; needed only if a copy ever ran before the
	 * constructors that do it.) */
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
}

static void copy_piece(void *dst, const void *src, size_t n, bool stream)
{
	if (stream)
		copy_stream(dst, src, n);
	else
		memcpy(dst, src, n);
}
#else
static bool stream_ok(const void *dst, size_t n)
{
	(void)dst;
	(void)n;
	return false;
}

static void copy_piece(void *dst, const void *src, size_t n, bool stream)
{
	(void)stream;
	memcpy(dst, src, n);
}
#endif

/* Copy piece @i of pieces of @piece bytes of a copy of @n bytes. */
static size_t copy_nth(char *dst, const char *src, size_t n, size_t piece, uint32_t i,
		       bool stream)
{
	size_t off = (size_t)i * piece, len = n - off < piece ? n - off : piece;

	copy_piece(dst + off, src + off, len, stream);
	return len;
}

/* ------------------------------------------------------------------------ */
/* Helper threads                                                            */
/* ------------------------------------------------------------------------ */

/*
 * A helper lost its CPU at @now (its owner waited for its piece, or it
 * saw itself stopped): copies are made alone for a while.  Twice the
 * last rest when that one ended less than four of its lengths ago,
 * SOLO_MIN_NS otherwise, SOLO_MAX_NS at most; nothing when a rest runs.
 */
static void helpers_rest(uint64_t now)
{
	uint64_t until = atomic_load_explicit(&job.rest_until, memory_order_relaxed);
	uint64_t last = atomic_load_explicit(&job.rest_ns, memory_order_relaxed), rest;

	if (now < until)
		return;
	rest = until && now - until < 4 * last ? 2 * last : SOLO_MIN_NS;
	if (rest > SOLO_MAX_NS)
		rest = SOLO_MAX_NS;
	atomic_store_explicit(&job.rest_ns, rest, memory_order_relaxed);
	atomic_store_explicit(&job.rest_until, now + rest, memory_order_relaxed);
	ucma_count(UCMA_STAT_PGMIGRATE_COPY_HELPER_LATE, 1);
}

/*
 * Take and copy the pieces of the open job that are left.  What this
 * helper finished is told once, when it finds none left: the owner waits
 * for it only then, and a store per piece would move the counters' cache
 * lines between the two threads at every piece.  Returns false when
 * there was no piece to take.
 */
static size_t help(void)
{
	uint32_t finished = 0;
	size_t bytes = 0;

	for (;;) {
		uint64_t c = atomic_load_explicit(&job.claim, memory_order_acquire);
		char *dst;
		const char *src;
		size_t n, piece;

		if (CLAIM_NEXT(c) >= CLAIM_PIECES(c))
			break;
		dst = atomic_load_explicit(&job.dst, memory_order_acquire);
		src = atomic_load_explicit(&job.src, memory_order_acquire);
		n = atomic_load_explicit(&job.n, memory_order_acquire);
		piece = atomic_load_explicit(&job.piece, memory_order_acquire);
		/* Failed: taken by another; look again.  (Not a new job
		 * while this helper holds finished pieces: the owner of
		 * this one waits for them before it opens another.) */
		if (!atomic_compare_exchange_strong(&job.claim, &c, c + 1))
			continue;
#ifdef UCMA_TEST_HOOKS
		if (atomic_load_explicit(&ucma_copy_test_helper_delay_ns, memory_order_relaxed)) {
			uint64_t ns = atomic_load(&ucma_copy_test_helper_delay_ns);
			struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };

			nanosleep(&ts, NULL);
		}
#endif
		bytes += copy_nth(dst, src, n, piece, CLAIM_NEXT(c), stream_ok(dst, n));
		finished++;
	}
	if (!finished)
		return 0;
	/* Sequentially consistent with the owner's note that it sleeps
	 * (copy_shared()): one of the two sees the other. */
	atomic_fetch_add(&job.done, finished);
	if (atomic_load(&job.owner_sleeps))
		ucma_futex_wake_all(&job.done);
	ucma_count(UCMA_STAT_PGMIGRATE_COPY_HELPED, bytes);
	return bytes;
}

static void *helper_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ucma_copy");
	for (;;) {
		uint64_t idle_since = ucma_os_now_ns(), last = idle_since, now;
		unsigned spins = 0;
		uint32_t seq;
		uint64_t c;

		for (;;) {
			size_t bytes = help();

			if (bytes) {
				/* A stop longer than the copy can take at
				 * 1 GB/s: this helper lost its CPU. */
				now = ucma_os_now_ns();
				if (now - last > LATE_NS + bytes) {
					helpers_rest(now);
					break;
				}
				last = now;
				spins = 0;
				idle_since = 0;
				continue;
			}
			ucma_cpu_relax();
			if (++spins % 64)
				continue;
			now = ucma_os_now_ns();
			if (now - last > LATE_NS) {
				helpers_rest(now);
				break;
			}
			last = now;
			if (!idle_since)
				idle_since = now;
			else if (now - idle_since > SPIN_NS)
				break;
		}
		/* Asleep: counted before the last look for work, and the owner
		 * posts before it looks at the count (both sequentially
		 * consistent), so one of the two sees the other. */
		seq = atomic_load(&job.wake_seq);
		atomic_fetch_add(&job.sleepers, 1);
		c = atomic_load(&job.claim);
		if (CLAIM_NEXT(c) >= CLAIM_PIECES(c))
			ucma_futex_wait(&job.wake_seq, seq, NULL);
		atomic_fetch_sub(&job.sleepers, 1);
	}
	return NULL;
}

/* Start the helpers: once per process (and per child of fork). */
static void helpers_start(void)
{
	int expect = H_IDLE;
	unsigned want = ucma_opt.copy_helpers, cpus = ucma_cpus_allowed(), started = 0;
	pthread_attr_t attr;

	if (!atomic_compare_exchange_strong(&job.state, &expect, H_STARTING))
		return;
	if (want + 1 > cpus)
		want = cpus ? cpus - 1 : 0;
	{
		long online = sysconf(_SC_NPROCESSORS_ONLN);

		cpus_online = online > 0 ? (unsigned)online : cpus;
		cpus_all = cpus == cpus_online;
	}
	if (want == 0) {
		atomic_store(&job.state, H_NONE);
		return;
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, HELPER_STACK);
	for (unsigned k = 0; k < want; k++) {
		pthread_t t;
		int rc = ucma_thread_start(&t, &attr, helper_main);

		if (rc != 0) {
			ucma_log("cannot start a copy helper thread (%s); %u of %u running",
				 strerror(rc > 0 ? rc : errno), started, want);
			break;
		}
		pthread_detach(t);
		started++;
	}
	pthread_attr_destroy(&attr);
	atomic_store(&job.running, started);
	atomic_store_explicit(&job.state, started ? H_RUNNING : H_NONE, memory_order_release);
}

void ucma_copy_prepare(size_t n, size_t split_min)
{
	if (n >= split_min && ucma_opt.copy_helpers &&
	    atomic_load_explicit(&job.state, memory_order_acquire) == H_IDLE)
		helpers_start();
}

unsigned ucma_copy_helpers_running(void)
{
	return atomic_load(&job.running);
}

/*
 * The child of a fork: no helper runs here.  A job open at the fork is
 * closed, so that helpers the child starts never copy by it: its owner,
 * if it was another thread, is not here either (the flag is dropped); if
 * it was this one (a signal handler forked in the middle of a copy), it
 * sees the epoch change and copies the object again by itself.
 */
void ucma_copy_fork_child(void)
{
	uint32_t gen;

	/* Stored only when changed: the page may still be the parent's. */
	if (atomic_load_explicit(&job.state, memory_order_relaxed) == H_IDLE &&
	    !atomic_load_explicit(&job.busy, memory_order_relaxed))
		return;
	atomic_store(&job.state, H_IDLE);
	atomic_store(&job.running, 0);
	atomic_store(&job.sleepers, 0);
	atomic_store(&job.rest_until, 0);
	atomic_store(&job.rest_ns, 0);
	gen = CLAIM_GEN(atomic_load(&job.claim)) + 1u;
	atomic_store(&job.claim, CLAIM(gen, 0));
	if (atomic_load(&job.busy) != (uintptr_t)pthread_self())
		atomic_store(&job.busy, 0);
	atomic_fetch_add(&job.fork_epoch, 1);
}

/* ------------------------------------------------------------------------ */
/* The owner                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * Sleep until a helper finishes a piece, 1 ms at most (the loop looks
 * at a fork then).  Not a spin or sched_yield(): a wait this long means
 * the helper lost its CPU, and spinning would take this one from other
 * work too (the scheduler was not seen to run the helper here sooner).
 */
static void wait_asleep(uint32_t target)
{
	static const struct timespec ms = { 0, 1000 * 1000 };
	uint32_t d;

	atomic_store(&job.owner_sleeps, 1);
	d = atomic_load(&job.done);
	if (d != target)
		ucma_futex_wait(&job.done, d, &ms);
	atomic_store_explicit(&job.owner_sleeps, 0, memory_order_relaxed);
}

/*
 * Are the helpers resting?  Also when, at a look every SOLO_MIN_NS, the
 * threads running or waiting for a CPU, this one and the helpers asleep
 * counted in, are more than the CPUs: a helper would then only take
 * turns with other work (pgmigrate_copy_no_cpu; the copies of the next
 * SOLO_MIN_NS are made alone).
 */
static bool helpers_resting(void)
{
	uint64_t now = ucma_os_now_ns();
	long run;

	if (now < atomic_load_explicit(&job.rest_until, memory_order_relaxed))
		return true;
	if (!cpus_all || now - job.cpu_look < SOLO_MIN_NS)
		return false;
	job.cpu_look = now;
	run = ucma_os_threads_runnable();
#ifdef UCMA_TEST_HOOKS
	if (atomic_load_explicit(&ucma_copy_test_runnable, memory_order_relaxed))
		run = atomic_load_explicit(&ucma_copy_test_runnable, memory_order_relaxed);
#endif
	if (run <= 0 || (unsigned long)run + atomic_load(&job.sleepers) <= cpus_online)
		return false;
	/* A rest of its own length: a lost CPU soon after doubles this
	 * one, not an older, longer rest. */
	atomic_store_explicit(&job.rest_ns, SOLO_MIN_NS, memory_order_relaxed);
	atomic_store_explicit(&job.rest_until, now + SOLO_MIN_NS, memory_order_relaxed);
	ucma_count(UCMA_STAT_PGMIGRATE_COPY_NO_CPU, 1);
	return true;
}

/*
 * Copy with the helpers; the caller owns the job.  A few pieces per
 * thread, of at least UCMA_COPY_PIECE: each piece taken costs a move of
 * the claim word's cache line between threads (a quarter of a
 * microsecond on the machine measured), and one piece per thread would
 * leave the owner waiting for a helper that came late.
 */
static void copy_shared(char *dst, const char *src, size_t n, unsigned helpers)
{
	uint32_t gen = CLAIM_GEN(atomic_load_explicit(&job.claim, memory_order_relaxed)) + 1u;
	uint32_t pieces = PIECES_PER_THREAD * (helpers + 1), mine = 0;
	unsigned epoch = atomic_load(&job.fork_epoch), spins = 0;
	bool stream = stream_ok(dst, n), late = false;
	uint64_t wait0 = 0;
	size_t piece;

	if (n / UCMA_COPY_PIECE < pieces)
		pieces = (uint32_t)(n / UCMA_COPY_PIECE);
	/* Pieces of whole 128-byte blocks keep the destination's alignment
	 * for the streaming copy. */
	piece = UCMA_ALIGN_UP((n + pieces - 1) / pieces, 128);
	pieces = (uint32_t)((n + piece - 1) / piece);
	/* Closed first: a helper that reads any of the new description
	 * (acquire, after these release stores) fails its compare-and-swap
	 * on the old word. */
	atomic_store_explicit(&job.claim, CLAIM(gen, 0), memory_order_relaxed);
	atomic_store_explicit(&job.dst, dst, memory_order_release);
	atomic_store_explicit(&job.src, src, memory_order_release);
	atomic_store_explicit(&job.n, n, memory_order_release);
	atomic_store_explicit(&job.piece, piece, memory_order_release);
	atomic_store_explicit(&job.done, 0, memory_order_relaxed);
	atomic_store_explicit(&job.claim, CLAIM(gen, pieces), memory_order_release);
	/* Sequentially consistent with the helper's count of itself as
	 * asleep before its last look (helper_main()). */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&job.sleepers, memory_order_relaxed)) {
		atomic_fetch_add(&job.wake_seq, 1);
		ucma_futex_wake_all(&job.wake_seq);
	}
	for (;;) {
		uint64_t c = atomic_fetch_add_explicit(&job.claim, 1, memory_order_relaxed);

		/* (Another generation: a fork's child closed the job.) */
		if (CLAIM_GEN(c) != gen || CLAIM_NEXT(c) >= pieces)
			break;
		copy_nth(dst, src, n, piece, CLAIM_NEXT(c), stream);
		mine++;
	}
	while (atomic_load_explicit(&job.done, memory_order_acquire) != pieces - mine) {
		ucma_cpu_relax();
		if (++spins % WAIT_SPINS)
			continue;
		if (atomic_load(&job.fork_epoch) != epoch) {
			/* A child of a fork made by this thread's signal
			 * handler: the helpers that took pieces are not here. */
			copy_piece(dst, src, n, stream);
			break;
		}
		/* The clock only past WAIT_SPINS spins: a helper on a CPU
		 * of its own is done long before. */
		if (!late) {
			uint64_t now = ucma_os_now_ns();

			if (!wait0)
				wait0 = now;
			else if (now - wait0 > LATE_NS + piece) {
				late = true;
				helpers_rest(now);
			}
		}
		wait_asleep(pieces - mine);
	}
}

void ucma_copy_object(void *dst, const void *src, size_t n, size_t split_min)
{
	uintptr_t expect = 0;

	if (n >= split_min && ucma_opt.copy_helpers) {
		int state = atomic_load_explicit(&job.state, memory_order_acquire);

		if (UCMA_UNLIKELY(state == H_IDLE)) {
			helpers_start();
			state = atomic_load_explicit(&job.state, memory_order_acquire);
		}
		if (state == H_RUNNING &&
		    atomic_compare_exchange_strong(&job.busy, &expect, (uintptr_t)pthread_self())) {
			if (helpers_resting())
				copy_piece(dst, src, n, stream_ok(dst, n));
			else
				copy_shared(dst, src, n, atomic_load(&job.running));
			atomic_store_explicit(&job.busy, 0, memory_order_release);
			return;
		}
	}
	copy_piece(dst, src, n, stream_ok(dst, n));
}
