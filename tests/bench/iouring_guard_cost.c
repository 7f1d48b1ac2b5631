/*
 * iouring_guard_cost.c - what the io_uring guard of the preloaded library
 * (preload/iouring_guard.c) adds to a submission through
 * syscall(SYS_io_uring_enter), which gives it only the ring's descriptor:
 * one entry queued by hand and submitted, its completion reaped, in ns of
 * the thread's CPU time per submission (best of 5 rounds, the ways taking turns in each), three
 * ways in one run:
 *   ring     a ring set up through syscall(SYS_io_uring_setup), which the
 *            library sees: the guard reads the ring itself;
 *   fdinfo   a ring set up through the C library's own syscall() (dlsym()
 *            in libc.so.6), which the library does not see: the guard
 *            reads the ring's /proc/self/fdinfo listing;
 *   libc     the first ring, submitted through the C library's own
 *            syscall(): no guard at all.
 * Each for a NOP and for a buffered READ of 64 bytes from /dev/zero into a
 * block that is on lent frames when lending is on (the guard then looks
 * at the buffer's borrowed state and at the descriptor, which is not
 * O_DIRECT, and leaves it lent).  Links nothing of ucma; iouring_guard.sh
 * runs it under the library with lending off and on.  Under the library,
 * ucma_stat() (found with dlsym()) says how much was borrowed and which
 * way the guard's submissions went.
 *
 * Output: one line of key=value pairs.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 5
#define N 20000
#define N_FDINFO 2000

typedef long (*syscall_fn)(long, ...);
typedef int (*stat_fn)(const char *, uint64_t *);

static syscall_fn libc_syscall;
static stat_fn ucma_stat_fp;

struct ring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

/* The thread's CPU time: the submissions complete inline, in the thread,
 * and on a shared machine wall time would count the time others ran. */
static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static uint64_t stat_of(const char *name)
{
	uint64_t v = 0;

	return ucma_stat_fp && ucma_stat_fp(name, &v) == 0 ? v : 0;
}

/* A ring of 8 entries, set up through the interposed syscall() or the C
 * library's own. */
static int ring_init(struct ring *r, int seen)
{
	struct io_uring_params p;
	char *sq, *cq;

	memset(&p, 0, sizeof(p));
	r->fd = (int)(seen ? syscall(SYS_io_uring_setup, 8, &p)
			   : libc_syscall(SYS_io_uring_setup, 8, &p));
	if (r->fd < 0)
		return -1;
	sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
	cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe),
		  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_CQ_RING);
	r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED)
		return -1;
	r->sq_tail = (unsigned *)(void *)(sq + p.sq_off.tail);
	r->sq_mask = (unsigned *)(void *)(sq + p.sq_off.ring_mask);
	r->sq_array = (unsigned *)(void *)(sq + p.sq_off.array);
	r->cq_head = (unsigned *)(void *)(cq + p.cq_off.head);
	r->cq_tail = (unsigned *)(void *)(cq + p.cq_off.tail);
	r->cq_mask = (unsigned *)(void *)(cq + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(void *)(cq + p.cq_off.cqes);
	return 0;
}

static int zero_fd;
static char *read_buf;
static int failed;

/* Queue one entry (a NOP, or a READ when @read), submit it through the
 * interposed syscall() or the C library's, reap its completion. */
static void submit_one(struct ring *r, int read, int guarded)
{
	unsigned tail = *r->sq_tail, idx = tail & *r->sq_mask, head;
	struct io_uring_sqe *sqe = &r->sqes[idx];
	long rc;

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = read ? IORING_OP_READ : IORING_OP_NOP;
	sqe->fd = read ? zero_fd : -1;
	sqe->addr = read ? (uintptr_t)read_buf : 0;
	sqe->len = read ? 64 : 0;
	r->sq_array[idx] = idx;
	__atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
	rc = guarded ? syscall(SYS_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0)
		     : libc_syscall(SYS_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0);
	head = *r->cq_head;
	if (rc != 1 || __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE) == head ||
	    r->cqes[head & *r->cq_mask].res != (read ? 64 : 0))
		failed = 1;
	__atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
}

/* ns per submission of @n, for @r, @read, @guarded. */
static double per_submit(struct ring *r, int read, int guarded, int n)
{
	double t0 = now_ns();

	for (int i = 0; i < n; i++)
		submit_one(r, read, guarded);
	return (now_ns() - t0) / n;
}

int main(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	struct ring seen, unseen;
	uint64_t by_ring, by_fdinfo;
	double t[6];
	char *big;

	if (!libc || !(*(void **)&libc_syscall = dlsym(libc, "syscall"))) {
		fprintf(stderr, "iouring_guard_cost: the C library's syscall() is missing\n");
		return 1;
	}
	*(void **)&ucma_stat_fp = dlsym(RTLD_DEFAULT, "ucma_stat");
	zero_fd = open("/dev/zero", O_RDONLY);
	/* A block large enough to break into fresh pageblocks, which the heap
	 * borrows when lending is on. */
	big = malloc(8 << 20);
	if (big)
		memset(big, 1, 8 << 20);
	read_buf = big ? big + (4 << 20) : NULL;
	if (zero_fd < 0 || !read_buf || ring_init(&seen, 1) != 0 || ring_init(&unseen, 0) != 0) {
		perror("iouring_guard_cost: set-up");
		return 1;
	}
	by_ring = stat_of("lend_iouring_enter_ring");
	by_fdinfo = stat_of("lend_iouring_enter_fdinfo");
	/* The ways take turns in each round, so that a busy moment of the
	 * machine does not favour one; the best round of each counts. */
	for (int i = 0; i < 6; i++)
		t[i] = 1e18;
	for (int k = 0; k < ROUNDS; k++) {
		for (int i = 0; i < 6; i++) {
			int read = i >= 3, way = i % 3;
			double per = per_submit(way == 1 ? &unseen : &seen, read, way != 2,
						way == 1 ? N_FDINFO : N);

			if (per < t[i])
				t[i] = per;
		}
	}
	printf("nop_ring_ns=%.1f nop_fdinfo_ns=%.1f nop_libc_ns=%.1f read_ring_ns=%.1f "
	       "read_fdinfo_ns=%.1f read_libc_ns=%.1f borrowed_pageblocks=%llu "
	       "enter_ring=%llu enter_fdinfo=%llu failed=%d\n",
	       t[0], t[1], t[2], t[3], t[4], t[5],
	       (unsigned long long)stat_of("lend_heap_pageblocks"),
	       (unsigned long long)(stat_of("lend_iouring_enter_ring") - by_ring),
	       (unsigned long long)(stat_of("lend_iouring_enter_fdinfo") - by_fdinfo), failed);
	free(big);
	return 0;
}
