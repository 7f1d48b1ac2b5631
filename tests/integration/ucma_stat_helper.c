/*
 * ucma_stat_helper.c - a process for ucmastat to watch: creates the arena
 * (configured by the UCMA_* environment), allocates a little of every kind,
 * publishes its statistics, prints "ready" and sleeps until SIGTERM or
 * SIGINT, then exits normally so its statistics segment is removed.
 *
 * SPDX-License-Identifier: MIT
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ucma.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

int main(void)
{
	struct sigaction sa;
	ucma_handle_t h[64];
	void *contig, *m[32];
	FILE *devnull;
	sigset_t block, old;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	/* Keep the signals blocked except inside sigsuspend(): no lost wake-up. */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &old);

	if (ucma_init(NULL) != 0) {
		perror("ucma_init");
		return 1;
	}
	for (int i = 0; i < 32; i++)
		m[i] = ucma_malloc((size_t)(i + 1) * 1000);
	for (int i = 0; i < 64; i++)
		h[i] = ucma_halloc((size_t)(i + 1) * 4096, 0);
	contig = ucma_alloc(4u << 20, 0, 0);
	if (!contig)
		perror("ucma_alloc");
	/* Publish now: the compaction thread may not be running. */
	devnull = fopen("/dev/null", "w");
	if (devnull) {
		ucma_stats_print(devnull);
		fclose(devnull);
	}
	printf("ready %ld\n", (long)getpid());
	fflush(stdout);
	while (!stop)
		sigsuspend(&old);
	ucma_release(contig);
	for (int i = 0; i < 64; i++)
		ucma_hfree(h[i]);
	for (int i = 0; i < 32; i++)
		ucma_free(m[i]);
	return 0;
}
