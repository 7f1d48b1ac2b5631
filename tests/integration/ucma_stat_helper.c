/*
 * ucma_stat_helper.c - a process for ucmastat to watch: creates the arena
 * (configured by the UCMA_* environment), allocates a little of every kind,
 * prints "ready PID", then, by its argument:
 *   (none)       sleeps until SIGTERM or SIGINT, making no ucma call (only
 *                its compaction thread, if it runs, can notice a request),
 *                then exits normally so that any segment is removed;
 *   malloc-loop  allocates and frees page runs until SIGTERM or SIGINT (a
 *                process whose only ucma activity is malloc);
 *   _exit        ends at once with _exit(0);
 *   kill         ends at once by SIGKILL.
 *
 * SPDX-License-Identifier: MIT
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ucma.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	struct sigaction sa;
	ucma_handle_t h[64];
	void *contig = NULL, *m[32];
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
	if (strcmp(mode, "malloc-loop") != 0) {
		for (int i = 0; i < 64; i++)
			h[i] = ucma_halloc((size_t)(i + 1) * 4096, 0);
		contig = ucma_alloc(4u << 20, 0, 0);
		if (!contig)
			perror("ucma_alloc");
	}
	printf("ready %ld\n", (long)getpid());
	fflush(stdout);
	if (strcmp(mode, "_exit") == 0)
		_exit(0);
	if (strcmp(mode, "kill") == 0)
		raise(SIGKILL);
	if (strcmp(mode, "malloc-loop") == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		while (!stop) {
			for (int i = 0; i < 100; i++)
				ucma_free(ucma_malloc(40000));
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		}
		for (int i = 0; i < 32; i++)
			ucma_free(m[i]);
		return 0;
	}
	while (!stop)
		sigsuspend(&old);
	ucma_release(contig);
	for (int i = 0; i < 64; i++)
		ucma_hfree(h[i]);
	for (int i = 0; i < 32; i++)
		ucma_free(m[i]);
	return 0;
}
