/*
 * bench_handles.c - the cost of reaching a movable object: ucma_pin +
 * ucma_unpin, and the read side (ucma_read_lock + ucma_deref +
 * ucma_read_unlock, and with ucma_deref_size), uncontended and with a
 * second thread pinning the same object, against two baselines measured
 * in the same run: a pair of compare-and-swap on one word (what a pin and
 * an unpin cost when each is one), a fetch-add and a compare-and-swap
 * (the atomics of ucma_pin() and ucma_unpin() now, handle.h: the least
 * they can do) and a load through a pointer (what a plain pointer
 * costs).
 *
 * Each figure is the best of ROUNDS rounds of N calls, in ns per call
 * pair, so that a busy machine (other processes on the two cores) shows
 * in the spread, not in the figure; the median is printed beside it.
 *
 * `make bench-handles`.
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ucma.h>

#define N 2000000
#define ROUNDS 9

static ucma_handle_t h;
static volatile uintptr_t sink;
static _Atomic uint32_t word;
static void *plain_ptr;
static atomic_int stop;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static __attribute__((noinline)) void loop_cas(void)
{
	for (int i = 0; i < N; i++) {
		uint32_t s = atomic_load_explicit(&word, memory_order_relaxed);

		atomic_compare_exchange_strong_explicit(&word, &s, s + 1, memory_order_acquire,
							memory_order_relaxed);
		s = atomic_load_explicit(&word, memory_order_relaxed);
		atomic_compare_exchange_strong_explicit(&word, &s, s - 1, memory_order_release,
							memory_order_relaxed);
		sink += s;
	}
}

static __attribute__((noinline)) void loop_xadd_cas(void)
{
	for (int i = 0; i < N; i++) {
		uint32_t s = atomic_fetch_add_explicit(&word, 1, memory_order_acquire);

		sink += s;
		s = atomic_load_explicit(&word, memory_order_relaxed);
		atomic_compare_exchange_strong_explicit(&word, &s, s - 1, memory_order_release,
							memory_order_relaxed);
		sink += s;
	}
}

static __attribute__((noinline)) void loop_plain(void)
{
	for (int i = 0; i < N; i++)
		sink += (uintptr_t)*(void *volatile *)&plain_ptr;
}

static __attribute__((noinline)) void loop_pin(void)
{
	for (int i = 0; i < N; i++) {
		sink += (uintptr_t)ucma_pin(h, 0);
		ucma_unpin(h);
	}
}

static __attribute__((noinline)) void loop_read(void)
{
	for (int i = 0; i < N; i++) {
		ucma_read_lock();
		sink += (uintptr_t)ucma_deref(h);
		ucma_read_unlock();
	}
}

static __attribute__((noinline)) void loop_read_size(void)
{
	for (int i = 0; i < N; i++) {
		size_t n;

		ucma_read_lock();
		sink += (uintptr_t)ucma_deref_size(h, &n) + n;
		ucma_read_unlock();
	}
}

/* Nested: the program holds a section around many dereferences. */
static __attribute__((noinline)) void loop_deref_in_section(void)
{
	ucma_read_lock();
	for (int i = 0; i < N; i++)
		sink += (uintptr_t)ucma_deref(h);
	ucma_read_unlock();
}

static int by_value(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

/* Best and median of ROUNDS rounds, ns per iteration. */
static void measure(void (*fn)(void), double *best, double *median)
{
	double v[ROUNDS];

	for (int r = 0; r < ROUNDS; r++) {
		uint64_t t0 = now_ns();

		fn();
		v[r] = (double)(now_ns() - t0) / N;
	}
	qsort(v, ROUNDS, sizeof(v[0]), by_value);
	*best = v[0];
	*median = v[ROUNDS / 2];
}

static void *pinner(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		if (ucma_pin(h, 0))
			ucma_unpin(h);
	return NULL;
}

int main(void)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} cases[] = {
		{ "two compare-and-swap (baseline)", loop_cas },
		{ "fetch-add + compare-and-swap (baseline)", loop_xadd_cas },
		{ "load through a pointer (baseline)", loop_plain },
		{ "ucma_pin + ucma_unpin", loop_pin },
		{ "read_lock + deref + read_unlock", loop_read },
		{ "read_lock + deref_size + read_unlock", loop_read_size },
		{ "deref inside one long section", loop_deref_in_section },
	};
	double best[7], med[7], cbest, cmed;
	pthread_t t;

	plain_ptr = &word;
	h = ucma_halloc(64, UCMA_H_ZERO);
	if (!h) {
		perror("ucma_halloc");
		return 1;
	}
	for (size_t i = 0; i < 7; i++)
		measure(cases[i].fn, &best[i], &med[i]);
	pthread_create(&t, NULL, pinner, NULL);
	measure(loop_read, &cbest, &cmed);
	atomic_store(&stop, 1);
	pthread_join(t, NULL);

	printf("# handles: ns per call pair, best (median) of %d rounds of %d; "
	       "ratios against two compare-and-swap\n",
	       ROUNDS, N);
	for (size_t i = 0; i < 7; i++)
		printf("%-40s %6.1f (%6.1f)  %5.2fx\n", cases[i].name, best[i], med[i],
		       best[i] / best[0]);
	printf("%-40s %6.1f (%6.1f)  %5.2fx\n", "read side, another thread pinning", cbest, cmed,
	       cbest / best[0]);
	ucma_hfree(h);
	return 0;
}
