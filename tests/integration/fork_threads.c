/*
 * fork_threads.c - fork while other threads allocate, with checksums.
 *
 * An ordinary program (it knows nothing of ucma), run by preload_tools.sh
 * with and without libucma-preload.so; both runs must print the same line
 * and exit 0.  Worker threads allocate, stamp, verify, resize and free
 * blocks through a shared table of slots: a block is published into a slot
 * only once its stamp is complete (release store), and whoever takes it
 * out of the slot (atomic exchange) owns it, so blocks also move between
 * threads.  Meanwhile the main thread forks repeatedly.  Each child starts
 * with whatever the table held at fork time: it verifies and frees every
 * published block (blocks allocated by threads that do not exist in the
 * child), then runs threads of its own that allocate and free, and exits
 * with 0 only if every checksum held.  The parent keeps going; at the end
 * it stops its workers and verifies and frees what is left.
 *
 * Block layout: a header with the data size and stamp seed, then the data
 * filled from the seed, so a block can be checked knowing only its address.
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NSLOTS   512
#define NWORKERS 3
#define NFORKS   12
#define CHILD_ITERS 5000

struct block {
	size_t size;		/* bytes of data after the header */
	uint64_t seed;
	unsigned char data[];
};

static _Atomic(struct block *) slots[NSLOTS];
static atomic_bool stop;
static atomic_long bad_checks;
static atomic_long operations;

static uint64_t next_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 2685821657736338717ull;
}

/*
 * The stamp: a stream of xorshift words from the seed, laid down 8 bytes
 * at a time; a tail shorter than a word takes the first bytes of the next
 * word, so any prefix of a stamp is the stamp of that length (realloc
 * keeps prefixes).  memcpy keeps unaligned ends well defined.
 */
static uint64_t stamp_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t x = seed | 1, w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		w = stamp_next(&x);
		memcpy(p + i, &w, 8);
	}
	if (i < n) {
		w = stamp_next(&x);
		memcpy(p + i, &w, n - i);
	}
}

static int check(const unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t x = seed | 1, w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		w = stamp_next(&x);
		if (memcmp(p + i, &w, 8) != 0)
			return 0;
	}
	if (i < n) {
		w = stamp_next(&x);
		return memcmp(p + i, &w, n - i) == 0;
	}
	return 1;
}

/* Mostly small blocks, some of a few pages, a few large ones. */
static size_t pick_size(uint64_t *rs)
{
	uint64_t r = next_rand(rs);

	switch (r % 64) {
	case 0:
		return (size_t)(r >> 8) % (256 * 1024) + 1;
	case 1: case 2: case 3: case 4: case 5: case 6:
		return (size_t)(r >> 8) % 32768 + 1;
	default:
		return (size_t)(r >> 8) % 512 + 1;
	}
}

static struct block *block_new(uint64_t *rs)
{
	size_t size = pick_size(rs);
	struct block *b = malloc(sizeof(*b) + size);

	if (!b) {
		atomic_fetch_add(&bad_checks, 1);
		return NULL;
	}
	b->size = size;
	b->seed = next_rand(rs);
	fill(b->data, size, b->seed);
	return b;
}

static void block_check_free(struct block *b)
{
	if (!check(b->data, b->size, b->seed))
		atomic_fetch_add(&bad_checks, 1);
	free(b);
}

/* Grow or shrink a block with realloc; the common prefix must survive. */
static struct block *block_resize(struct block *b, uint64_t *rs)
{
	size_t size = pick_size(rs), keep = size < b->size ? size : b->size;
	struct block *n;

	if (!check(b->data, b->size, b->seed))
		atomic_fetch_add(&bad_checks, 1);
	n = realloc(b, sizeof(*b) + size);
	if (!n) {
		atomic_fetch_add(&bad_checks, 1);
		return b;
	}
	if (!check(n->data, keep, n->seed))
		atomic_fetch_add(&bad_checks, 1);
	n->size = size;
	fill(n->data, size, n->seed);
	return n;
}

/* One step of a worker: take a slot's block or fill an empty slot. */
static void step(uint64_t *rs)
{
	unsigned k = (unsigned)(next_rand(rs) % NSLOTS);
	struct block *b = atomic_exchange_explicit(&slots[k], NULL, memory_order_acquire);

	if (b) {
		if (next_rand(rs) % 4 == 0) {
			b = block_resize(b, rs);
			b = atomic_exchange_explicit(&slots[k], b, memory_order_acq_rel);
		}
		if (b)
			block_check_free(b);
	} else {
		b = block_new(rs);
		b = atomic_exchange_explicit(&slots[k], b, memory_order_acq_rel);
		if (b)
			block_check_free(b);
	}
	atomic_fetch_add_explicit(&operations, 1, memory_order_relaxed);
}

static void *worker(void *arg)
{
	uint64_t rs = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;

	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		step(&rs);
	return NULL;
}

static void *child_worker(void *arg)
{
	uint64_t rs = (uint64_t)(uintptr_t)arg * 0x2545f4914f6cdd1dull + 7;

	for (int i = 0; i < CHILD_ITERS; i++)
		step(&rs);
	return NULL;
}

/* Empty the table, checking every block; returns the number freed. */
static long drain(void)
{
	long n = 0;

	for (int k = 0; k < NSLOTS; k++) {
		struct block *b = atomic_exchange(&slots[k], NULL);

		if (b) {
			block_check_free(b);
			n++;
		}
	}
	return n;
}

/* In the child: the inherited blocks, then threads of its own. */
static int child_main(int round)
{
	pthread_t t[2];
	long inherited = drain();

	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, child_worker, (void *)(uintptr_t)(round * 8 + i + 100)))
			return 2;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	drain();
	if (inherited == 0)
		return 3;	/* the workers should have filled the table by now */
	return atomic_load(&bad_checks) ? 1 : 0;
}

int main(void)
{
	pthread_t t[NWORKERS];
	struct timespec pause = { 0, 5 * 1000 * 1000 };
	int children_ok = 0;
	long left;

	for (int i = 0; i < NWORKERS; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1))) {
			perror("pthread_create");
			return 1;
		}
	/* let the table fill before the first fork */
	while (atomic_load(&operations) < 4 * NSLOTS)
		nanosleep(&pause, NULL);

	for (int round = 0; round < NFORKS; round++) {
		pid_t pid;
		int status;

		nanosleep(&pause, NULL);
		fflush(stdout);
		pid = fork();
		if (pid < 0) {
			perror("fork");
			break;
		}
		if (pid == 0)
			exit(child_main(round));
		/* the parent allocates while its child runs */
		for (int i = 0; i < 1000; i++) {
			uint64_t rs = (uint64_t)round * 1000 + (uint64_t)i + 1;

			step(&rs);
		}
		if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		    WEXITSTATUS(status) == 0)
			children_ok++;
		else
			fprintf(stderr, "fork_threads: child %d failed (status 0x%x)\n", round,
				status);
	}

	atomic_store(&stop, true);
	for (int i = 0; i < NWORKERS; i++)
		pthread_join(t[i], NULL);
	left = drain();
	printf("fork_threads: forks=%d children_ok=%d checksum_errors=%ld blocks_left=%s\n",
	       NFORKS, children_ok, atomic_load(&bad_checks), left > 0 ? "yes" : "no");
	return children_ok == NFORKS && atomic_load(&bad_checks) == 0 ? 0 : 1;
}
