/*
 * fork_cost.c - what a fork costs a program under each allocator: fork()
 * of a process with a 1 MiB heap block written, the child exiting at
 * once, the parent waiting for it; microseconds per fork and wait, per
 * fork() to its return in the parent, and page faults per fork and wait
 * (the parent's and the child's).  With `threads`, a second thread is
 * made first and sleeps through the run: a process that has had a thread
 * takes every lock of its allocator around the fork, one that never had
 * one need not (glibc, and ucma since fork.c's lone_skip stages).  Links
 * nothing of ucma; fork_cost.sh runs it under each allocator by
 * LD_PRELOAD.
 *
 * Output: one line of key=value pairs; the best of 5 rounds of 200 forks.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 5
#define FORKS 200

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static long minflt(void)
{
	struct rusage self, children;

	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &children);
	return self.ru_minflt + children.ru_minflt;
}

static void *sleeper(void *arg)
{
	(void)arg;
	pause();
	return NULL;
}

int main(int argc, char **argv)
{
	double best_cycle = 1e30, best_parent = 1e30, faults = 0;
	char *heap = malloc(1 << 20);
	pthread_t t;

	if (!heap)
		return 1;
	memset(heap, 1, 1 << 20);
	if (argc > 1 && strcmp(argv[1], "threads") == 0 &&
	    pthread_create(&t, NULL, sleeper, NULL) != 0) {
		perror("pthread_create");
		return 1;
	}
	for (int r = 0; r < ROUNDS; r++) {
		double start = now_us(), parent = 0;
		long f0 = minflt();

		for (int i = 0; i < FORKS; i++) {
			double a = now_us();
			pid_t pid = fork();

			if (pid == 0)
				_exit(heap[i] == 1 ? 0 : 1);
			if (pid < 0) {
				perror("fork");
				return 1;
			}
			parent += now_us() - a;
			waitpid(pid, NULL, 0);
		}
		if ((now_us() - start) / FORKS < best_cycle) {
			best_cycle = (now_us() - start) / FORKS;
			best_parent = parent / FORKS;
			faults = (double)(minflt() - f0) / FORKS;
		}
	}
	printf("cycle_us=%.0f parent_us=%.0f faults=%.1f\n", best_cycle, best_parent, faults);
	return 0;
}
