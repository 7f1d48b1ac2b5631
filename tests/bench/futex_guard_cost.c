/*
 * futex_guard_cost.c - what the preloaded futex guards (preload/
 * futex_guard.c), and the direct I/O guard on read() (preload/
 * dio_guard.c), add to the calls they interpose: each call through its
 * ordinary name (the preloaded library's definition under LD_PRELOAD)
 * against the C library's own definition (dlsym() in libc.so.6), in one
 * run, in ns per call (best of 5 rounds).  Links nothing of ucma;
 * futex_guard.sh runs it without the library, under it with lending off,
 * and with lending on and a pageblock borrowed (so the guards go past
 * their one load to ucma_unlend() of an address that is not lent).  The
 * read() is of 64 bytes from /dev/zero into the big block, which is on
 * lent frames with lending on: the guard then asks what the descriptor
 * is (once: the answer is kept) and finds it is not O_DIRECT.
 *
 * Output: one line of key=value pairs.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 5
#define N 1000000

typedef int (*mutex_init_fn)(pthread_mutex_t *, const pthread_mutexattr_t *);
typedef int (*sem_init_fn)(sem_t *, int, unsigned);
typedef long (*syscall_fn)(long, ...);
typedef ssize_t (*read_fn)(int, void *, size_t);

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static pthread_mutex_t *mutex;
static pthread_mutexattr_t mattr;
static sem_t *sem;
static int *word;
static mutex_init_fn mutex_init_fp;
static sem_init_fn sem_init_fp;
static syscall_fn syscall_fp;
static read_fn read_fp;
static int zero_fd;
static char *read_buf;

static void via_name_mutex(void) { pthread_mutex_init(mutex, &mattr); }
static void via_libc_mutex(void) { mutex_init_fp(mutex, &mattr); }
static void via_name_sem(void) { sem_init(sem, 1, 0); }
static void via_libc_sem(void) { sem_init_fp(sem, 1, 0); }
static void via_name_wake(void) { syscall(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0); }
static void via_libc_wake(void) { syscall_fp(SYS_futex, word, FUTEX_WAKE, 1, NULL, NULL, 0); }
static void via_name_read(void) { (void)!read(zero_fd, read_buf, 64); }
static void via_libc_read(void) { (void)!read_fp(zero_fd, read_buf, 64); }

/* Best ns per call of @fn over ROUNDS rounds of @n calls. */
static double best(void (*fn)(void), int n)
{
	double b = 1e18;

	for (int r = 0; r < ROUNDS; r++) {
		double t0 = now_ns(), per;

		for (int i = 0; i < n; i++)
			fn();
		per = (now_ns() - t0) / n;
		if (per < b)
			b = per;
	}
	return b;
}

int main(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	char *big;

	if (!libc) {
		fprintf(stderr, "futex_guard_cost: libc.so.6 is not loaded: %s\n", dlerror());
		return 1;
	}
	*(void **)&mutex_init_fp = dlsym(libc, "pthread_mutex_init");
	*(void **)&sem_init_fp = dlsym(libc, "sem_init");
	*(void **)&syscall_fp = dlsym(libc, "syscall");
	*(void **)&read_fp = dlsym(libc, "read");
	zero_fd = open("/dev/zero", O_RDONLY);
	if (!mutex_init_fp || !sem_init_fp || !syscall_fp || !read_fp || zero_fd < 0) {
		fprintf(stderr, "futex_guard_cost: a C library function is missing\n");
		return 1;
	}
	/* A block large enough to break into a fresh pageblock, which the heap
	 * borrows when lending is on; the objects are small blocks beside. */
	big = malloc(8 << 20);
	if (big)
		memset(big, 1, 8 << 20);
	read_buf = big ? big + (4 << 20) : NULL;
	mutex = malloc(sizeof(*mutex));
	sem = malloc(sizeof(*sem));
	word = calloc(1, sizeof(*word));
	if (!mutex || !sem || !word || !read_buf)
		return 1;
	pthread_mutexattr_init(&mattr);
	pthread_mutexattr_setpshared(&mattr, PTHREAD_PROCESS_SHARED);
	printf("mutex_init_ns=%.1f mutex_init_libc_ns=%.1f sem_init_ns=%.1f sem_init_libc_ns=%.1f "
	       "futex_wake_ns=%.1f futex_wake_libc_ns=%.1f read_ns=%.1f read_libc_ns=%.1f\n",
	       best(via_name_mutex, N), best(via_libc_mutex, N), best(via_name_sem, N),
	       best(via_libc_sem, N), best(via_name_wake, N / 10), best(via_libc_wake, N / 10),
	       best(via_name_read, N / 10), best(via_libc_read, N / 10));
	free(big);
	return 0;
}
