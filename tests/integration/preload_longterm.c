/*
 * preload_longterm.c - under libucma-preload.so, malloc memory handed to
 * mlock(), mlock2(), mlockall() or io_uring buffer registration leaves
 * the CMA frames lent to the heap before the call returns (preload/
 * longterm.c), so that a later ucma_alloc() never copies it away from
 * under the kernel.
 *
 * Each case mallocs fresh 4 MiB blocks, which the heap backs with CMA
 * frames (seen in /proc/self/maps: the frames are the area's file), hands
 * one to the call, and checks that its whole range is on memory of its
 * own with its data intact.  The io_uring cases then take the whole CMA
 * area with ucma_alloc() and read a file into the registered buffer with
 * READ_FIXED: the data must show at the buffer's address (it would land
 * in the old frame, now the contiguous buffer, had the buffer stayed
 * lent).  Rings that the program places in its own memory
 * (IORING_SETUP_NO_MMAP) are put in a lent block: after ucma_alloc() of
 * the whole area, NOPs must still complete through them.  Children made
 * without the fork handlers (syscall(SYS_clone), clone(), SYS_clone3)
 * must find the lent memory they read.  io_uring reads on an O_DIRECT
 * file, submitted through syscall() and through liburing, must find their
 * buffers taken back before the device writes them; those submitted
 * through syscall() on rings set up through it must be read from the
 * ring itself (128-byte entries without an SQ array too), and on a ring
 * number closed and reused, from the ring it names now.  Zero-copy sends
 * (MSG_ZEROCOPY, io_uring's SEND_ZC and SENDMSG_ZC) and vmsplice() must
 * take their buffers back before the call, and so must AF_XDP UMEM
 * registration, VFIO and iommufd DMA map requests, V4L2 user-pointer
 * buffers and NVMe passthrough commands, and mprotect() its
 * range (a take-back maps memory readable and writable).  A TAP program;
 * preload_longterm.sh runs it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/io_uring.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#include "ucma.h"
#include "tap.h"
#include "testutil.h"
#include "lent.h"

#define MiB ((size_t)1 << 20)
/* Whole pageblocks, fresh ones: blocks of other sizes are packed across
 * pageblock boundaries (zone.c take_across()), partly onto pages that are
 * not lent. */
#define BLOCK (4 * MiB)
#define PAGE ((size_t)4096)

/* Does any page of [@b, @b + @len) lie on a CMA frame? */
static bool any_on_frame(const char *b, size_t len)
{
	for (size_t off = 0; off < len; off += PAGE)
		if (tu_on_frame(b + off))
			return true;
	return false;
}

static char *block_new(uint64_t seed)
{
	char *b = malloc(BLOCK);

	if (b)
		for (size_t off = 0; off < BLOCK; off += PAGE)
			tu_fill(b + off, PAGE, seed + off / PAGE);
	return b;
}

static bool block_good(const char *b, uint64_t seed)
{
	for (size_t off = 0; off < BLOCK; off += PAGE)
		if (!tu_check(b + off, PAGE, seed + off / PAGE))
			return false;
	return true;
}

/* A fresh block on a CMA frame, or NULL (diagnosed). */
static char *lent_block(uint64_t seed)
{
	char *b = block_new(seed);

	if (b && !tu_on_frame(b)) {
		diag("a fresh %zu-byte block at %p is not on a CMA frame", BLOCK, (void *)b);
		keep(b);
		return NULL;
	}
	return b;
}

/* Is any page of [@b, @b + @len) off the CMA frames? */
static bool any_off_frame(const char *b, size_t len)
{
	for (size_t off = 0; off < len; off += PAGE)
		if (!tu_on_frame(b + off))
			return true;
	return false;
}

/* After handing @b to @what: off the frames, data intact. */
static void check_unlent(const char *b, uint64_t seed, int rc, const char *what)
{
	ok(b && rc == 0 && !any_on_frame(b, BLOCK) && block_good(b, seed),
	   "%s of a lent block: it returns 0, no page of it is on a CMA frame, data intact", what);
}

static void case_mlock(void)
{
	char *b = lent_block(1);
	int rc = b ? mlock(b, BLOCK) : -1;

	check_unlent(b, 1, rc, "mlock()");
	if (b)
		munlock(b, BLOCK);
	keep(b);

	b = lent_block(2);
	/* Only one page of the block: its pageblock leaves, the call works. */
	rc = b ? mlock2(b + PAGE, PAGE, MLOCK_ONFAULT) : -1;
	ok(b && rc == 0 && !tu_on_frame(b + PAGE) && block_good(b, 2),
	   "mlock2(MLOCK_ONFAULT) of one page: that page is off the frames, data intact");
	if (b)
		munlock(b + PAGE, PAGE);
	keep(b);

	b = lent_block(3);
	rc = b ? (int)syscall(SYS_mlock, b, BLOCK) : -1;
	check_unlent(b, 3, rc, "syscall(SYS_mlock)");
	if (b)
		munlock(b, BLOCK);
	keep(b);

	ok(mlock(NULL, 0) == 0, "mlock of nothing: 0, as the kernel says");
	errno = 0;
	ok(syscall(SYS_getpid) == getpid() && syscall(-1L) == -1 && errno == ENOSYS,
	   "syscall() forwards other calls unchanged (getpid; -1: ENOSYS)");
}

/* A file of @len bytes of pattern @seed, opened for reading, or -1. */
static int pattern_file(size_t len, uint64_t seed)
{
	char path[] = "/tmp/ucma-longterm.XXXXXX";
	char *buf = malloc(len);
	int fd = mkstemp(path);

	if (fd >= 0)
		unlink(path);
	if (fd < 0 || !buf) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	tu_fill(buf, len, seed);
	if (pwrite(fd, buf, len, 0) != (ssize_t)len) {
		close(fd);
		fd = -1;
	}
	free(buf);
	return fd;
}

/* ucma_alloc() of the whole CMA area: every lent frame is taken back. */
static void *whole_area(void)
{
	void *p = ucma_alloc(cma_size, 0, 0);

	if (!p)
		diag("ucma_alloc(%zu): %s", cma_size, strerror(errno));
	return p;
}

static void case_io_uring_syscall(void)
{
	struct io_uring_params params = { 0 };
	struct iovec iov;
	char *b = lent_block(4);
	int ring = (int)syscall(SYS_io_uring_setup, 4, &params);
	long rc;

	if (ring < 0) {
		skip(2, "io_uring_setup: %s", strerror(errno));
		keep(b);
		return;
	}
	iov.iov_base = b;
	iov.iov_len = BLOCK;
	rc = b ? syscall(SYS_io_uring_register, ring, IORING_REGISTER_BUFFERS, &iov, 1) : -1;
	check_unlent(b, 4, (int)rc, "syscall(SYS_io_uring_register, IORING_REGISTER_BUFFERS)");
	if (rc == 0)
		syscall(SYS_io_uring_register, ring, IORING_UNREGISTER_BUFFERS, NULL, 0);
	errno = 0;
	rc = syscall(SYS_io_uring_register, ring, IORING_REGISTER_BUFFERS, (void *)8, 1);
	ok(rc == -1 && errno == EFAULT,
	   "an unreadable iovec array: the kernel's EFAULT, no crash (rc %ld, %s)", rc,
	   strerror(errno));
	close(ring);
	keep(b);
}

/*
 * Rings in the program's memory (IORING_SETUP_NO_MMAP, Linux 6.5): the
 * kernel pins them for the ring's life.  The rings and SQEs go into a
 * lent block; the setup must take it back, and after ucma_alloc() of the
 * whole area a NOP must still reach the kernel and its completion the
 * program (on the old frame, the kernel would read stale SQ tails).
 */
#ifndef IORING_SETUP_NO_MMAP
#define IORING_SETUP_NO_MMAP (1U << 14)
#define SQ_USER_ADDR(p) ((p)->sq_off.resv2)
#define CQ_USER_ADDR(p) ((p)->cq_off.resv2)
#else
#define SQ_USER_ADDR(p) ((p)->sq_off.user_addr)
#define CQ_USER_ADDR(p) ((p)->cq_off.user_addr)
#endif
#define RING_SQES_AT (256 * 1024)

struct user_ring {
	int fd;
	bool no_array;		/* IORING_SETUP_NO_SQARRAY: SQEs taken in ring order */
	char *rings;
	struct io_uring_sqe *sqes;
	struct io_uring_params p;
};

static unsigned *ring_word(const struct user_ring *r, uint32_t off)
{
	return (unsigned *)(void *)(r->rings + off);
}

/* Submit one NOP with @ud and wait for it: did its completion arrive? */
static bool ring_nop(struct user_ring *r, uint64_t ud)
{
	unsigned tail = __atomic_load_n(ring_word(r, r->p.sq_off.tail), __ATOMIC_ACQUIRE);
	unsigned idx = tail & *ring_word(r, r->p.sq_off.ring_mask);
	unsigned ctail = __atomic_load_n(ring_word(r, r->p.cq_off.tail), __ATOMIC_ACQUIRE);
	struct io_uring_cqe *cqes = (void *)(r->rings + r->p.cq_off.cqes);
	long rc;

	memset(&r->sqes[idx], 0, sizeof(r->sqes[idx]));
	r->sqes[idx].opcode = IORING_OP_NOP;
	r->sqes[idx].user_data = ud;
	if (!r->no_array)
		ring_word(r, r->p.sq_off.array)[idx] = idx;
	__atomic_store_n(ring_word(r, r->p.sq_off.tail), tail + 1, __ATOMIC_RELEASE);
	rc = syscall(SYS_io_uring_enter, r->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0);
	if (rc != 1 || __atomic_load_n(ring_word(r, r->p.cq_off.tail), __ATOMIC_ACQUIRE) == ctail) {
		diag("NOP %llu: io_uring_enter %ld, no completion", (unsigned long long)ud, rc);
		return false;
	}
	idx = ctail & *ring_word(r, r->p.cq_off.ring_mask);
	__atomic_store_n(ring_word(r, r->p.cq_off.head), ctail + 1, __ATOMIC_RELEASE);
	return cqes[idx].user_data == ud;
}

static int setup_by_syscall(unsigned entries, struct io_uring_params *p)
{
	return (int)syscall(SYS_io_uring_setup, entries, p);
}

/*
 * IORING_REGISTER_RESIZE_RINGS (Linux 6.13) of a ring set up with
 * IORING_SETUP_NO_MMAP: the new rings, in another lent block, are taken
 * back first (the flag is the ring's, not in the resize's parameters).
 */
static void resize_rings(void)
{
	struct user_ring r = { .fd = -1 }, n;
	char *a = lent_block(35), *b = lent_block(36);
	void *area;
	long rc;

	if (!a || !b) {
		ok(0, "IORING_REGISTER_RESIZE_RINGS: no lent blocks");
		return;
	}
	r.rings = (char *)(((uintptr_t)a + PAGE - 1) & ~(PAGE - 1));
	r.sqes = (struct io_uring_sqe *)(void *)(r.rings + RING_SQES_AT);
	/* Resizing wants a ring whose completions only its submitter reaps;
	 * the resized rings have no SQ array. */
	r.p.flags = IORING_SETUP_NO_MMAP | (1U << 12) /* SINGLE_ISSUER */ |
		    (1U << 13) /* DEFER_TASKRUN */ | (1U << 16) /* NO_SQARRAY */;
	r.no_array = true;
	CQ_USER_ADDR(&r.p) = (uintptr_t)r.rings;
	SQ_USER_ADDR(&r.p) = (uintptr_t)r.sqes;
	r.fd = setup_by_syscall(8, &r.p);
	n = r;
	memset(&n.p, 0, sizeof(n.p));
	n.rings = (char *)(((uintptr_t)b + PAGE - 1) & ~(PAGE - 1));
	n.sqes = (struct io_uring_sqe *)(void *)(n.rings + RING_SQES_AT);
	n.p.sq_entries = 16;
	CQ_USER_ADDR(&n.p) = (uintptr_t)n.rings;
	SQ_USER_ADDR(&n.p) = (uintptr_t)n.sqes;
	rc = r.fd < 0 ? -1 :
			syscall(SYS_io_uring_register, r.fd, 33 /* IORING_REGISTER_RESIZE_RINGS */,
				&n.p, 1);
	if (rc != 0) {
		skip(2, "IORING_REGISTER_RESIZE_RINGS of a ring in the program's memory: %s",
		     strerror(errno));
	} else {
		ok(!any_on_frame(n.rings, 2 * RING_SQES_AT),
		   "IORING_REGISTER_RESIZE_RINGS to rings in a lent block: taken back first");
		area = whole_area();
		ok(area && ring_nop(&n, 4) && ring_nop(&n, 5),
		   "after ucma_alloc of the whole area NOPs complete through the new rings");
		ucma_release(area);
	}
	if (r.fd >= 0)
		close(r.fd);
	keep(a);
	keep(b);
}

static void case_user_rings(const char *how, int (*setup)(unsigned, struct io_uring_params *),
			    uint64_t seed)
{
	struct user_ring r = { .fd = -1 };
	char *b = lent_block(seed);
	void *area = NULL;
	bool before, after;
	uint64_t by_ring, by_fdinfo, lent;

	if (!b) {
		ok(0, "%s: no lent block", how);
		return;
	}
	r.rings = (char *)(((uintptr_t)b + PAGE - 1) & ~(PAGE - 1));
	r.sqes = (struct io_uring_sqe *)(void *)(r.rings + RING_SQES_AT);
	r.p.flags = IORING_SETUP_NO_MMAP;
	CQ_USER_ADDR(&r.p) = (uintptr_t)r.rings;
	SQ_USER_ADDR(&r.p) = (uintptr_t)r.sqes;
	r.fd = setup(8, &r.p);
	if (r.fd < 0) {
		skip(3, "%s with IORING_SETUP_NO_MMAP: %s", how, strerror(errno));
		keep(b);
		return;
	}
	ok(!any_on_frame(r.rings, 2 * RING_SQES_AT),
	   "%s with IORING_SETUP_NO_MMAP and the rings in a lent block: the rings and SQEs "
	   "are taken back first", how);
	by_ring = stat_of("lend_iouring_enter_ring");
	by_fdinfo = stat_of("lend_iouring_enter_fdinfo");
	lent = stat_of("lend_heap_pageblocks");
	before = ring_nop(&r, 1);
	/* With something lent, the guard reads the NOP in the program's rings
	 * at the addresses the set-up was given. */
	ok(stat_of("lend_iouring_enter_ring") - by_ring == (lent ? 1 : 0) &&
		   stat_of("lend_iouring_enter_fdinfo") == by_fdinfo,
	   "%s with IORING_SETUP_NO_MMAP: a submission is read from the program's rings, not "
	   "the fdinfo listing (%llu pageblocks lent)", how, (unsigned long long)lent);
	area = whole_area();
	after = area && ring_nop(&r, 2) && ring_nop(&r, 3);
	ok(before && after,
	   "after ucma_alloc of the whole area the kernel still sees the program's rings: "
	   "NOPs complete before and after");
	ucma_release(area);
	close(r.fd);
	keep(b);
}

/* IORING_REGISTER_MEM_REGION (Linux 6.13) with the program's memory. */
static void case_mem_region(void)
{
	struct io_uring_params params = { 0 };
	struct {
		uint64_t user_addr, size;
		uint32_t flags, id;
		uint64_t mmap_offset, resv[4];
	} rd = { 0 };
	struct {
		uint64_t region_uptr, flags, resv[2];
	} reg = { 0 };
	char *b = lent_block(14);
	int ring = (int)syscall(SYS_io_uring_setup, 4, &params);
	long rc;

	if (ring < 0 || !b) {
		skip(1, "io_uring_setup: %s", b ? strerror(errno) : "no lent block");
		keep(b);
		return;
	}
	rd.user_addr = ((uintptr_t)b + PAGE - 1) & ~(PAGE - 1);
	rd.size = 16 * PAGE;
	rd.flags = 1;	/* IORING_MEM_REGION_TYPE_USER */
	reg.region_uptr = (uintptr_t)&rd;
	rc = syscall(SYS_io_uring_register, ring, 34 /* IORING_REGISTER_MEM_REGION */, &reg, 1);
	if (rc != 0 && (errno == EINVAL || errno == EOPNOTSUPP))
		skip(1, "IORING_REGISTER_MEM_REGION: %s", strerror(errno));
	else
		ok(rc == 0 && !any_on_frame((char *)(uintptr_t)rd.user_addr, rd.size),
		   "IORING_REGISTER_MEM_REGION of the program's memory in a lent block: taken "
		   "back first (rc %ld)", rc);
	close(ring);
	keep(b);
}

#ifdef HAVE_LIBURING
static void case_liburing(void)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct iovec iov;
	char *b = lent_block(5), *other = lent_block(6);
	void *area = NULL;
	int fd = pattern_file(BLOCK, 7), rc;
	bool read_ok = false;

	if (io_uring_queue_init(4, &ring, 0) != 0) {
		skip(3, "io_uring_queue_init failed");
		goto out;
	}
	iov.iov_base = b;
	iov.iov_len = BLOCK;
	rc = b ? io_uring_register_buffers(&ring, &iov, 1) : -1;
	check_unlent(b, 5, rc, "liburing's io_uring_register_buffers()");
	ok(other && tu_on_frame(other), "a block not registered stays on its frame");

	/* Take every frame back, then let the kernel write the buffer. */
	area = whole_area();
	if (rc == 0 && area && fd >= 0) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		io_uring_prep_read_fixed(sqe, fd, b, BLOCK, 0, 0);
		if (io_uring_submit(&ring) == 1 && io_uring_wait_cqe(&ring, &cqe) == 0) {
			read_ok = cqe->res == (int)BLOCK;
			if (!read_ok)
				diag("READ_FIXED: res %d", cqe->res);
			io_uring_cqe_seen(&ring, cqe);
		}
	}
	ok(area && read_ok && tu_check(b, BLOCK, 7) && block_good(other, 6),
	   "after ucma_alloc of the whole area, READ_FIXED lands at the registered buffer's "
	   "address; the block that was lent was taken back intact");
	if (rc == 0)
		io_uring_unregister_buffers(&ring);
	io_uring_queue_exit(&ring);
out:
	ucma_release(area);
	if (fd >= 0)
		close(fd);
	keep(b);
	keep(other);
}
#endif

static void case_mlockall(void)
{
	char *b[2] = { lent_block(8), lent_block(9) }, *later;
	int rc = b[0] && b[1] ? mlockall(MCL_CURRENT) : -1;

	ok(rc == 0 && stat_of("lend_heap_pageblocks") == 0 && !any_on_frame(b[0], BLOCK) &&
		   !any_on_frame(b[1], BLOCK) && block_good(b[0], 8) && block_good(b[1], 9),
	   "mlockall(MCL_CURRENT): nothing is lent any more, data intact");
	munlockall();
	later = block_new(10);
	ok(later && !tu_on_frame(later) && stat_of("lend_heap_pageblocks") == 0,
	   "after mlockall the heap lends no more");
	keep(later);
	keep(b[0]);
	keep(b[1]);
}

/* Free blocks a case is done with, and give their pageblocks back clean
 * (malloc_trim), so the next cases' blocks are lent again: a freed block
 * is dirty memory the heap would hand out as it is. */
static void release_blocks(char **b, int n)
{
	for (int i = 0; i < n; i++)
		free(b[i]);
	malloc_trim(0);
}

/*
 * mprotect() and pkey_mprotect() of heap memory: a take-back maps memory
 * of its own at the address, readable and writable, so a page protected
 * on a lent frame came back unprotected after ucma_alloc() took the frame
 * (a read-only page writable, a PROT_NONE guard readable).  The range is
 * taken back first instead, and keeps its protection.
 */
static sigjmp_buf fault_jmp;

static void on_fault(int sig)
{
	(void)sig;
	siglongjmp(fault_jmp, 1);
}

/* Does a write (@write) or a read of the byte at @p fault? */
static bool faults(volatile char *p, bool write)
{
	struct sigaction sa = { 0 }, old_segv, old_bus;
	volatile bool faulted = false;

	sa.sa_handler = on_fault;
	sigaction(SIGSEGV, &sa, &old_segv);
	sigaction(SIGBUS, &sa, &old_bus);
	if (sigsetjmp(fault_jmp, 1) == 0) {
		if (write)
			*p = *p;
		else
			(void)*p;
	} else {
		faulted = true;
	}
	sigaction(SIGSEGV, &old_segv, NULL);
	sigaction(SIGBUS, &old_bus, NULL);
	return faulted;
}

static void case_mprotect(void)
{
	char *b = lent_block(40), *c = lent_block(41), *d = lent_block(42);
	int rc[3] = { -1, -1, -1 };
	void *area;

	if (b)
		rc[0] = mprotect(b + PAGE, PAGE, PROT_READ);
	if (c)
		rc[1] = (int)syscall(SYS_mprotect, c + PAGE, PAGE, PROT_NONE);
	if (d) {
		rc[2] = pkey_mprotect(d + PAGE, PAGE, PROT_READ, -1);
		if (rc[2] != 0 && errno == ENOSYS)
			rc[2] = mprotect(d + PAGE, PAGE, PROT_READ);
	}
	ok(rc[0] == 0 && !any_on_frame(b, 2 * PAGE) && !faults(b + PAGE, false) &&
		   faults(b + PAGE, true),
	   "mprotect(PROT_READ) of a page of a lent block: taken back first, read-only");
	ok(rc[1] == 0 && !any_on_frame(c, 2 * PAGE) && faults(c + PAGE, false),
	   "syscall(SYS_mprotect, PROT_NONE): taken back first, a guard page");
	ok(rc[2] == 0 && !any_on_frame(d, 2 * PAGE) && faults(d + PAGE, true),
	   "pkey_mprotect(PROT_READ, no key): taken back first, read-only");
	area = whole_area();
	ok(area && b && c && d && faults(b + PAGE, true) && !faults(b + PAGE, false) &&
		   faults(c + PAGE, false) && faults(d + PAGE, true) && !faults(b, true),
	   "after ucma_alloc() of the whole area every page keeps its protection");
	ucma_release(area);
	if (b)
		mprotect(b + PAGE, PAGE, PROT_READ | PROT_WRITE);
	if (c)
		mprotect(c + PAGE, PAGE, PROT_READ | PROT_WRITE);
	if (d)
		mprotect(d + PAGE, PAGE, PROT_READ | PROT_WRITE);
	ok(b && c && d && block_good(b, 40) && block_good(c, 41) && block_good(d, 42),
	   "unprotected again, the data is intact");
	release_blocks((char *[]){ b, c, d }, 3);
}

/*
 * madvise() of heap memory keeps the meaning it has on private memory: a
 * lent page is shared memory, where MADV_DONTNEED would leave the data
 * and MADV_FREE fail.  A hint leaves the block lent.
 */
static bool all_zero(const char *b, size_t len)
{
	for (size_t i = 0; i < len; i += 64)
		if (b[i])
			return false;
	return true;
}

static void case_madvise(void)
{
	char *b = lent_block(23), *c = lent_block(24), *d = lent_block(25);

	ok(b && madvise(b, BLOCK, MADV_WILLNEED) == 0 && tu_on_frame(b) && block_good(b, 23),
	   "madvise(MADV_WILLNEED), a hint: the block stays lent, data intact");
	ok(b && madvise(b, BLOCK, MADV_DONTNEED) == 0 && !any_on_frame(b, BLOCK) &&
		   all_zero(b, BLOCK),
	   "madvise(MADV_DONTNEED) of a lent block: it reads back zeros, as private memory does");
	errno = 0;
	ok(c && madvise(c, BLOCK, MADV_FREE) == 0 && !any_on_frame(c, BLOCK),
	   "madvise(MADV_FREE) of a lent block: 0, not the EINVAL of shared memory (%s)",
	   strerror(errno));
	ok(d && syscall(SYS_madvise, d, BLOCK, MADV_DONTNEED) == 0 && !any_on_frame(d, BLOCK) &&
		   all_zero(d, BLOCK),
	   "syscall(SYS_madvise, MADV_DONTNEED): the same");
	{
		int rc = madvise(d, (size_t)-PAGE, MADV_DONTNEED), err = errno;

		ok(rc == -1 && err == EINVAL, "madvise() of a length that wraps: the kernel's "
		   "EINVAL (%s)", strerror(err));
	}
	release_blocks((char *[]){ b, c, d }, 3);
}

/*
 * Direct I/O (dio_guard.c): a read or write on an O_DIRECT descriptor
 * pins the buffer's pages only for the transfer, but a take-back in that
 * window would copy the heap away from under the device.  The buffer
 * leaves the lent frames before the call; buffered I/O leaves it lent.
 */
static int direct_file(size_t len, uint64_t seed)
{
	static const char *const dirs[] = { "/var/tmp", ".", "/tmp" };

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char path[256];
		int fd, wfd;
		char *buf;

		snprintf(path, sizeof(path), "%s/ucma-dio.XXXXXX", dirs[i]);
		wfd = mkstemp(path);
		if (wfd < 0)
			continue;
		fd = open(path, O_RDWR | O_DIRECT);
		unlink(path);
		buf = aligned_alloc(PAGE, len);
		if (fd >= 0 && buf) {
			tu_fill(buf, len, seed);
			if (pwrite(wfd, buf, len, 0) == (ssize_t)len && fsync(wfd) == 0) {
				free(buf);
				close(wfd);
				return fd;
			}
		}
		free(buf);
		if (fd >= 0)
			close(fd);
		close(wfd);
	}
	return -1;
}

static void case_direct_io(void)
{
	char *b = lent_block(26), *c = lent_block(27), *d = lent_block(28), *e = lent_block(29);
	int fd = direct_file(MiB, 30), bfd = pattern_file(MiB, 31);
	ssize_t n;

	if (fd < 0) {
		skip(7, "no file system here takes O_DIRECT");
		goto out;
	}
	n = b ? pread(fd, b, MiB, 0) : -1;
	ok(n == (ssize_t)MiB && !any_on_frame(b, MiB) && tu_check(b, MiB, 30),
	   "pread() on an O_DIRECT descriptor into a lent block: the buffer is taken back "
	   "first, the data arrives (%zd)", n);
	n = c ? syscall(SYS_pread64, fd, c, MiB, 0) : -1;
	ok(n == (ssize_t)MiB && !any_on_frame(c, MiB) && tu_check(c, MiB, 30),
	   "syscall(SYS_pread64) the same (%zd)", n);
	{
		struct iovec iov = { d + MiB, MiB };

		n = d ? pwritev(fd, &iov, 1, MiB) : -1;
		ok(n == (ssize_t)MiB && !any_on_frame(d + MiB, MiB) && block_good(d, 28),
		   "pwritev() from a lent block: taken back first, data intact (%zd)", n);
	}
	{
		aio_context_t ctx = 0;
		struct iocb cb = { 0 }, *cbs[1] = { &cb };
		struct io_event ev;
		long rc = -1;

		cb.aio_lio_opcode = IOCB_CMD_PREAD;
		cb.aio_fildes = (uint32_t)fd;
		cb.aio_buf = (uintptr_t)e;
		cb.aio_nbytes = MiB;
		if (e && syscall(SYS_io_setup, 1, &ctx) == 0) {
			rc = syscall(SYS_io_submit, ctx, 1, cbs);
			if (rc == 1 && syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) != 1)
				rc = -1;
			syscall(SYS_io_destroy, ctx);
		}
		ok(rc == 1 && ev.res == (long long)MiB && !any_on_frame(e, MiB) &&
			   tu_check(e, MiB, 30),
		   "syscall(SYS_io_submit) of a read into a lent block: taken back first, the "
		   "data arrives (rc %ld)", rc);
	}
	{
		/* POSIX AIO: the C library's threads make the transfer with
		 * internal calls that nothing interposes. */
		char *g = lent_block(35), *h = lent_block(36);
		struct aiocb rd = { 0 }, wr = { 0 }, *list[1] = { &wr };
		const struct aiocb *wait[1] = { &rd };
		bool read_ok = false, write_ok = false;

		rd.aio_fildes = fd;
		rd.aio_buf = g;
		rd.aio_nbytes = MiB;
		if (g && aio_read(&rd) == 0) {
			while (aio_error(&rd) == EINPROGRESS)
				aio_suspend(wait, 1, NULL);
			read_ok = aio_return(&rd) == (ssize_t)MiB && !any_on_frame(g, MiB) &&
				  tu_check(g, MiB, 30);
		}
		wr.aio_fildes = fd;
		wr.aio_lio_opcode = LIO_WRITE;
		wr.aio_buf = h + MiB;
		wr.aio_nbytes = MiB;
		wr.aio_offset = 2 * MiB;
		if (h && lio_listio(LIO_WAIT, list, 1, NULL) == 0)
			write_ok = aio_return(&wr) == (ssize_t)MiB && !any_on_frame(h + MiB, MiB) &&
				   block_good(h, 36);
		ok(read_ok && write_ok,
		   "aio_read() into and lio_listio() writing from lent blocks on an O_DIRECT "
		   "descriptor: taken back first, data intact");
		release_blocks((char *[]){ g, h }, 2);
	}
	{
		char *f = lent_block(32);

		n = f && bfd >= 0 ? pread(bfd, f, MiB, 0) : -1;
		ok(n == (ssize_t)MiB && tu_on_frame(f) && tu_check(f, MiB, 31),
		   "buffered pread() into a lent block leaves it lent (%zd)", n);
		release_blocks(&f, 1);
	}
	{
		/* O_DIRECT turned off and on again with fcntl(), as dd does: what
		 * the guard knew of the descriptor must not outlive the change. */
		int fl = fcntl(fd, F_GETFL);
		char *g = lent_block(33), *h = lent_block(34);
		bool buffered_lent, direct_taken;

		buffered_lent = g && fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0 &&
				pread(fd, g, MiB, 0) == (ssize_t)MiB && tu_on_frame(g);
		direct_taken = h && fcntl(fd, F_SETFL, fl) == 0 &&
			       pread(fd, h, MiB, 0) == (ssize_t)MiB && !any_on_frame(h, MiB) &&
			       tu_check(h, MiB, 30);
		ok(buffered_lent && direct_taken,
		   "fcntl(F_SETFL) without O_DIRECT: the block stays lent; with it again: taken "
		   "back first");
		release_blocks((char *[]){ g, h }, 2);
	}
	close(fd);
out:
	if (bfd >= 0)
		close(bfd);
	release_blocks((char *[]){ b, c, d, e }, 4);
}

/*
 * io_uring reads into malloc memory on an O_DIRECT file (preload/
 * iouring_guard.c): the buffer is named only in the submission queue
 * entries, the kernel pins its pages when it issues the reads and the
 * device writes the frame behind them until they complete.  A buffer of
 * 16 MiB on lent frames, holding an old pattern, is read from a file of
 * another, in 1 MiB pieces submitted at once; right after the submission
 * the whole CMA area is taken with ucma_alloc().  The buffer must be off
 * the frames as soon as the submission returns (the deterministic part)
 * and hold the file's pattern once the reads complete: had it stayed
 * lent, the take-back would have copied it away while the device was
 * still writing, and the pieces written after the copy would be missing
 * (before the guard, 512 to 2048 of the 4096 pages were, every run).
 * A read from a buffered file copies through the buffer's address and
 * leaves the buffer lent.
 */
#define URING_BUF (16 * MiB)
#define URING_PIECES 16

/* A fresh block of @len bytes holding pattern @seed, wholly on CMA frames,
 * or NULL (diagnosed). */
static char *lent_buffer(size_t len, uint64_t seed)
{
	char *b = malloc(len);

	if (b)
		tu_fill(b, len, seed);
	if (b && any_off_frame(b, len)) {
		diag("a fresh %zu-byte block at %p is not wholly on CMA frames", len, (void *)b);
		keep(b);
		return NULL;
	}
	return b;
}

/* Does @b hold the file's pattern @seed?  When not, say how many of its
 * 4 KiB pages differ (the evidence of a take-back under the device). */
static bool file_data_good(const char *b, size_t len, uint64_t seed)
{
	char *want;
	size_t bad = 0;

	if (tu_check(b, len, seed))
		return true;
	want = malloc(len);
	if (want) {
		tu_fill(want, len, seed);
		for (size_t off = 0; off < len; off += PAGE)
			bad += memcmp(b + off, want + off, PAGE) != 0;
		free(want);
	}
	diag("%zu of %zu pages of the buffer do not hold the file's data", bad, len / PAGE);
	return false;
}

/* A ring of the kernel's, mapped by hand: submissions go through
 * syscall(SYS_io_uring_enter) with only its descriptor. */
struct raw_ring {
	int fd;
	char *sq, *cq;
	size_t sq_len, cq_len;
	struct io_uring_sqe *sqes;
	size_t sqes_len;
	unsigned shift;		/* 6, or 7 for IORING_SETUP_SQE128 */
	bool no_array;		/* IORING_SETUP_NO_SQARRAY */
	struct io_uring_params p;
};

#ifndef IORING_SETUP_NO_SQARRAY
#define IORING_SETUP_NO_SQARRAY (1U << 16)
#endif

/* A ring set up with @flags; false with errno. */
static bool raw_ring_setup(struct raw_ring *r, unsigned entries, unsigned flags)
{
	memset(r, 0, sizeof(*r));
	r->p.flags = flags;
	r->fd = (int)syscall(SYS_io_uring_setup, entries, &r->p);
	if (r->fd < 0)
		return false;
	r->shift = (flags & IORING_SETUP_SQE128) ? 7 : 6;
	r->no_array = flags & IORING_SETUP_NO_SQARRAY;
	r->sq_len = r->no_array ? r->p.sq_off.tail + sizeof(unsigned) :
				  r->p.sq_off.array + r->p.sq_entries * sizeof(unsigned);
	r->cq_len = r->p.cq_off.cqes + r->p.cq_entries * sizeof(struct io_uring_cqe);
	r->sqes_len = (size_t)r->p.sq_entries << r->shift;
	r->sq = mmap(NULL, r->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
		     IORING_OFF_SQ_RING);
	r->cq = mmap(NULL, r->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
		     IORING_OFF_CQ_RING);
	r->sqes = mmap(NULL, r->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
		       r->fd, IORING_OFF_SQES);
	if (r->sq == MAP_FAILED || r->cq == MAP_FAILED || r->sqes == MAP_FAILED) {
		close(r->fd);
		r->fd = -1;
		return false;
	}
	return true;
}

static bool raw_ring_init(struct raw_ring *r, unsigned entries)
{
	return raw_ring_setup(r, entries, 0);
}

static void raw_ring_exit(struct raw_ring *r)
{
	munmap(r->sq, r->sq_len);
	munmap(r->cq, r->cq_len);
	munmap(r->sqes, r->sqes_len);
	close(r->fd);
}

static unsigned *raw_word(char *base, uint32_t off)
{
	return (unsigned *)(void *)(base + off);
}

/* Queue a read or write entry (no submission yet). */
static void raw_queue(struct raw_ring *r, uint8_t op, int fd, const void *addr, uint32_t len,
		      uint64_t off, uint64_t ud)
{
	unsigned tail = *raw_word(r->sq, r->p.sq_off.tail);
	unsigned idx = tail & *raw_word(r->sq, r->p.sq_off.ring_mask);
	struct io_uring_sqe *sqe = (void *)((char *)r->sqes + ((size_t)idx << r->shift));

	memset(sqe, 0, (size_t)1 << r->shift);
	sqe->opcode = op;
	sqe->fd = fd;
	sqe->addr = (uintptr_t)addr;
	sqe->len = len;
	sqe->off = off;
	sqe->user_data = ud;
	if (!r->no_array)
		raw_word(r->sq, r->p.sq_off.array)[idx] = idx;
	__atomic_store_n(raw_word(r->sq, r->p.sq_off.tail), tail + 1, __ATOMIC_RELEASE);
}

/* Reap @n completions: how many had result @res. */
static int raw_reap(struct raw_ring *r, int n, int res)
{
	int good = 0;

	for (int i = 0; i < n; i++) {
		unsigned head = *raw_word(r->cq, r->p.cq_off.head);
		struct io_uring_cqe *cqes = (void *)(r->cq + r->p.cq_off.cqes);

		while (__atomic_load_n(raw_word(r->cq, r->p.cq_off.tail), __ATOMIC_ACQUIRE) == head)
			if (syscall(SYS_io_uring_enter, r->fd, 0, 1, IORING_ENTER_GETEVENTS, NULL,
				    0) < 0 && errno != EINTR)
				return good;
		if (cqes[head & *raw_word(r->cq, r->p.cq_off.ring_mask)].res == res)
			good++;
		else
			diag("completion %d: res %d", i,
			     cqes[head & *raw_word(r->cq, r->p.cq_off.ring_mask)].res);
		__atomic_store_n(raw_word(r->cq, r->p.cq_off.head), head + 1, __ATOMIC_RELEASE);
	}
	return good;
}

/* Submit everything queued in @r; the count, or -1 and errno. */
static long raw_submit(struct raw_ring *r, unsigned n)
{
	return syscall(SYS_io_uring_enter, r->fd, n, 0, 0, NULL, 0);
}

static void uring_direct_raw(int fd, int bfd)
{
	struct raw_ring r;
	char *b, *c;
	void *area;
	long rc;
	int good;
	uint64_t by_ring = stat_of("lend_iouring_enter_ring");
	uint64_t by_fdinfo = stat_of("lend_iouring_enter_fdinfo");

	if (!raw_ring_init(&r, 32)) {
		skip(4, "io_uring_setup and mmap of its rings: %s", strerror(errno));
		return;
	}
	/* A buffered file: the read copies through the buffer's address, which
	 * a take-back holds; the buffer may stay lent. */
	c = lent_block(52);
	if (c)
		raw_queue(&r, IORING_OP_READ, bfd, c, MiB, 0, 99);
	rc = c ? raw_submit(&r, 1) : -1;
	good = rc == 1 ? raw_reap(&r, 1, (int)MiB) : 0;
	ok(rc == 1 && good == 1 && tu_on_frame(c) && tu_check(c, MiB, 31),
	   "syscall(SYS_io_uring_enter) of a READ into a lent block from a buffered file leaves "
	   "it lent (rc %ld)", rc);

	b = lent_buffer(URING_BUF, 51);
	for (int i = 0; b && i < URING_PIECES; i++)
		raw_queue(&r, IORING_OP_READ, fd, b + (size_t)i * MiB, MiB, (uint64_t)i * MiB,
			  (uint64_t)i);
	rc = b ? raw_submit(&r, URING_PIECES) : -1;
	/* The buffered read's block stays lent: the entries were read one by
	 * one, not answered by taking everything back (the fallback when an
	 * entry cannot be found). */
	ok(rc == URING_PIECES && !any_on_frame(b, URING_BUF) && tu_on_frame(c),
	   "syscall(SYS_io_uring_enter) of O_DIRECT reads into a lent buffer: no page of it is "
	   "on a CMA frame once the call returns, the other lent block still is (rc %ld)", rc);
	ok(stat_of("lend_iouring_enter_ring") - by_ring == 2 &&
		   stat_of("lend_iouring_enter_fdinfo") == by_fdinfo,
	   "both submissions read the ring set up through syscall(SYS_io_uring_setup) itself, "
	   "not its fdinfo listing (%llu, %llu)",
	   (unsigned long long)(stat_of("lend_iouring_enter_ring") - by_ring),
	   (unsigned long long)(stat_of("lend_iouring_enter_fdinfo") - by_fdinfo));
	area = rc > 0 ? whole_area() : NULL;
	good = rc > 0 ? raw_reap(&r, (int)rc, (int)MiB) : 0;
	ok(area && good == URING_PIECES && file_data_good(b, URING_BUF, 50),
	   "after ucma_alloc of the whole area right behind the submission, every piece of "
	   "the file's data is in the buffer (%d of %d reads complete)", good, URING_PIECES);
	ucma_release(area);
	raw_ring_exit(&r);
	release_blocks((char *[]){ b, c }, 2);
}

/*
 * A ring of another layout: 128-byte entries taken in ring order, without
 * an SQ array (IORING_SETUP_SQE128 | IORING_SETUP_NO_SQARRAY, Linux 6.6).
 * The fdinfo listing shows no entries of such a ring, so only reading the
 * ring itself can tell a buffered READ, which leaves its block lent, from
 * the O_DIRECT reads submitted with it, whose buffer must leave the frames.
 */
static void uring_direct_layout(int fd, int bfd)
{
	const unsigned flags = IORING_SETUP_SQE128 | IORING_SETUP_NO_SQARRAY;
	uint64_t by_ring = stat_of("lend_iouring_enter_ring");
	uint64_t by_fdinfo = stat_of("lend_iouring_enter_fdinfo");
	struct raw_ring r;
	char *b, *c;
	void *area;
	long rc;
	int good;

	if (!raw_ring_setup(&r, 32, flags)) {
		skip(2, "io_uring_setup with IORING_SETUP_SQE128 | IORING_SETUP_NO_SQARRAY: %s "
			"(Linux 6.6 has them)", strerror(errno));
		return;
	}
	c = lent_block(61);
	b = lent_buffer(URING_BUF, 62);
	if (b && c) {
		raw_queue(&r, IORING_OP_READ, bfd, c, MiB, 0, 99);
		for (int i = 0; i < URING_PIECES; i++)
			raw_queue(&r, IORING_OP_READ, fd, b + (size_t)i * MiB, MiB,
				  (uint64_t)i * MiB, (uint64_t)i);
	}
	rc = b && c ? raw_submit(&r, URING_PIECES + 1) : -1;
	ok(rc == URING_PIECES + 1 && !any_on_frame(b, URING_BUF) && tu_on_frame(c) &&
		   stat_of("lend_iouring_enter_ring") - by_ring == 1 &&
		   stat_of("lend_iouring_enter_fdinfo") == by_fdinfo,
	   "128-byte entries without an SQ array, read from the ring: the O_DIRECT reads' "
	   "buffer is off the frames, the buffered READ's block still on one (rc %ld)", rc);
	area = rc > 0 ? whole_area() : NULL;
	good = rc > 0 ? raw_reap(&r, (int)rc, (int)MiB) : 0;
	ok(area && good == URING_PIECES + 1 && file_data_good(b, URING_BUF, 50),
	   "after ucma_alloc of the whole area, every piece of the file's data is in the "
	   "buffer (%d of %d reads complete)", good, URING_PIECES + 1);
	ucma_release(area);
	raw_ring_exit(&r);
	release_blocks((char *[]){ b, c }, 2);
}

/*
 * Ring descriptors closed and their numbers given again.  A ring with an
 * entry left in it is closed, and dup() of another ring takes its number:
 * the submission on that number must be read from the kernel's listing of
 * the ring it names now, not from what was kept of the closed one (whose
 * NOP would let the buffer stay lent).  Then a ring of another layout set
 * up on a number that a ring had: read from the ring itself again.
 */
static void uring_reused_number(int fd)
{
	uint64_t by_ring, by_fdinfo;
	struct raw_ring a, r, n;
	char *b = NULL, *c = NULL;
	void *area;
	int num, d = -1, good;
	long rc;

	if (!raw_ring_setup(&a, 4, IORING_SETUP_SQE128) || !raw_ring_setup(&r, 32, 0)) {
		skip(4, "io_uring_setup with IORING_SETUP_SQE128: %s", strerror(errno));
		if (a.fd >= 0)
			raw_ring_exit(&a);
		return;
	}
	num = a.fd;
	raw_queue(&a, IORING_OP_NOP, -1, NULL, 0, 0, 7);
	raw_ring_exit(&a);
	d = dup(r.fd);
	c = lent_block(63);
	if (c)
		raw_queue(&r, IORING_OP_READ, fd, c, MiB, 0, 1);
	by_fdinfo = stat_of("lend_iouring_enter_fdinfo");
	rc = c && d >= 0 ? syscall(SYS_io_uring_enter, d, 1, 0, 0, NULL, 0) : -1;
	ok(d == num && rc == 1 && !any_on_frame(c, MiB) &&
		   stat_of("lend_iouring_enter_fdinfo") - by_fdinfo == 1,
	   "a ring closed, its number %d taken by dup() of another ring (%d): the O_DIRECT "
	   "read submitted there is read from the listing of the ring it names now, its "
	   "block off the frames (rc %ld)", num, d, rc);
	good = rc == 1 ? raw_reap(&r, 1, (int)MiB) : 0;
	ok(good == 1 && tu_check(c, MiB, 50), "the read completes into the block, data intact");
	if (d >= 0)
		close(d);
	raw_ring_exit(&r);
	release_blocks(&c, 1);

	if (!raw_ring_setup(&n, 16, IORING_SETUP_SQE128)) {
		skip(2, "io_uring_setup: %s", strerror(errno));
		return;
	}
	b = lent_buffer(URING_BUF, 64);
	for (int i = 0; b && i < URING_PIECES; i++)
		raw_queue(&n, IORING_OP_READ, fd, b + (size_t)i * MiB, MiB, (uint64_t)i * MiB,
			  (uint64_t)i);
	by_ring = stat_of("lend_iouring_enter_ring");
	by_fdinfo = stat_of("lend_iouring_enter_fdinfo");
	rc = b ? raw_submit(&n, URING_PIECES) : -1;
	ok(n.fd == num && rc == URING_PIECES && !any_on_frame(b, URING_BUF) &&
		   stat_of("lend_iouring_enter_ring") - by_ring == 1 &&
		   stat_of("lend_iouring_enter_fdinfo") == by_fdinfo,
	   "a ring of 128-byte entries set up on number %d that rings had: read from the ring "
	   "itself, the O_DIRECT reads' buffer off the frames (rc %ld)", n.fd, rc);
	area = rc > 0 ? whole_area() : NULL;
	good = rc > 0 ? raw_reap(&n, (int)rc, (int)MiB) : 0;
	ok(area && good == URING_PIECES && file_data_good(b, URING_BUF, 50),
	   "after ucma_alloc of the whole area, every piece of the file's data is in the "
	   "buffer (%d of %d reads complete)", good, URING_PIECES);
	ucma_release(area);
	raw_ring_exit(&n);
	release_blocks(&b, 1);
}

#ifdef HAVE_LIBURING
static void uring_direct_liburing(int fd)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct iovec iov[URING_PIECES];
	char *b;
	void *area;
	int rc, good = 0;

	if (io_uring_queue_init(32, &ring, 0) != 0) {
		skip(2, "io_uring_queue_init failed");
		return;
	}
	b = lent_buffer(URING_BUF, 53);
	/* Half as READ entries, half as one READV of eight iovecs. */
	for (int i = 0; b && i < URING_PIECES / 2; i++)
		io_uring_prep_read(io_uring_get_sqe(&ring), fd, b + (size_t)i * MiB, MiB,
				   (uint64_t)i * MiB);
	for (int i = URING_PIECES / 2; b && i < URING_PIECES; i++) {
		iov[i].iov_base = b + (size_t)i * MiB;
		iov[i].iov_len = MiB;
	}
	if (b)
		io_uring_prep_readv(io_uring_get_sqe(&ring), fd, &iov[URING_PIECES / 2],
				    URING_PIECES / 2, (uint64_t)URING_PIECES / 2 * MiB);
	rc = b ? io_uring_submit(&ring) : -1;
	ok(rc == URING_PIECES / 2 + 1 && !any_on_frame(b, URING_BUF),
	   "liburing's io_uring_submit() of O_DIRECT READ and READV entries into a lent "
	   "buffer: no page of it is on a CMA frame once it returns (rc %d)", rc);
	area = rc > 0 ? whole_area() : NULL;
	for (int i = 0; i < rc; i++) {
		if (io_uring_wait_cqe(&ring, &cqe) != 0)
			break;
		if (cqe->res == (int)MiB || cqe->res == (int)(URING_PIECES / 2 * MiB))
			good++;
		else
			diag("completion %d: res %d", i, cqe->res);
		io_uring_cqe_seen(&ring, cqe);
	}
	ok(area && good == URING_PIECES / 2 + 1 && file_data_good(b, URING_BUF, 50),
	   "after ucma_alloc of the whole area right behind the submission, every piece of "
	   "the file's data is in the buffer (%d reads complete)", good);
	ucma_release(area);
	io_uring_queue_exit(&ring);
	release_blocks(&b, 1);
}

/*
 * A descriptor closed by an io_uring CLOSE while nothing was lent (the
 * guards look at nothing then) and its number opened again with O_DIRECT:
 * what dio_guard.c knew of the old file must not let a direct read into
 * lent memory through when lending starts again.
 */
static void uring_close_unseen(void)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	char *b1, *b2 = NULL, path[64];
	/* The direct file first, so that the buffered one takes the lowest
	 * number, which the direct file opened again takes after the CLOSE. */
	int dfd = direct_file(MiB, 62), bfd = pattern_file(MiB, 31), fd = -1, res = -1;

	if (dfd < 0 || bfd < 0 || io_uring_queue_init(8, &ring, 0) != 0) {
		skip(1, "no direct file, buffered file or io_uring");
		if (bfd >= 0)
			close(bfd);
		if (dfd >= 0)
			close(dfd);
		return;
	}
	b1 = lent_buffer(4 * MiB, 61);
	if (b1 && pread(bfd, b1, PAGE, 0) != (ssize_t)PAGE)
		diag("pread of the buffered file: %s", strerror(errno));
	release_blocks(&b1, 1);
	/* Nothing lent: every borrowed pageblock taken back. */
	ucma_unlend((void *)PAGE, SIZE_MAX - 2 * PAGE);
	io_uring_prep_close(io_uring_get_sqe(&ring), bfd);
	if (stat_of("lend_heap_pageblocks") == 0 && io_uring_submit(&ring) == 1 &&
	    io_uring_wait_cqe(&ring, &cqe) == 0) {
		res = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", dfd);
	if (res == 0)
		fd = open(path, O_RDWR | O_DIRECT);
	if (fd == bfd)
		b2 = lent_buffer(4 * MiB, 63);
	if (!b2) {
		skip(1, "the set-up did not come about (nothing lent %d, CLOSE %d, number %d/%d)",
		     stat_of("lend_heap_pageblocks") == 0, res, fd, bfd);
	} else {
		ssize_t n = pread(fd, b2, MiB, 0);

		ok(n == (ssize_t)MiB && !any_on_frame(b2, MiB) && tu_check(b2, MiB, 62),
		   "an O_DIRECT pread on a number closed by io_uring while nothing was lent "
		   "takes its lent buffer off the frames (n %zd)", n);
	}
	release_blocks(&b2, 1);
	if (fd >= 0)
		close(fd);
	if (res != 0)
		close(bfd);
	close(dfd);
	io_uring_queue_exit(&ring);
}
#endif

static void case_io_uring_direct(void)
{
	int fd = direct_file(URING_BUF, 50), bfd = pattern_file(MiB, 31);

	if (fd < 0 || bfd < 0) {
		skip(15, "no file system here takes O_DIRECT");
	} else {
		uring_direct_raw(fd, bfd);
		uring_direct_layout(fd, bfd);
		uring_reused_number(fd);
#ifdef HAVE_LIBURING
		uring_direct_liburing(fd);
		uring_close_unseen();
#else
		skip(3, "liburing is not installed");
#endif
	}
	if (fd >= 0)
		close(fd);
	if (bfd >= 0)
		close(bfd);
}

/*
 * Forks that skip the fork handlers: a child made by syscall(SYS_fork),
 * syscall(SYS_clone) or clone() without CLONE_VM finds no borrowed
 * pageblock mapped (they are MADV_DONTFORK), so the heap is taken back
 * first.  The child reads a lent block (and, for clone(), runs on a stack
 * that was lent too) and exits 0 when every byte is there; it was killed
 * by SIGSEGV before.
 */
static char *child_block;

/* The C library's alias of clone(), which its headers do not declare. */
int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);

static int child_checks(void *arg)
{
	(void)arg;
	return block_good(child_block, 20) && !tu_on_frame(child_block) ? 0 : 3;
}

static void raw_fork_case(const char *how, int which)
{
	uint64_t evacuated = stat_of("lend_heap_fork_evacuated");
	char *stack = NULL;
	int status = -1;
	pid_t pid;

	child_block = lent_block(20);
	if (!child_block) {
		ok(0, "%s: no lent block", how);
		return;
	}
	switch (which) {
	case 0:
		pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
		break;
	case 1:
		stack = lent_block(21);
		pid = stack ? clone(child_checks, stack + BLOCK, SIGCHLD, NULL) : -1;
		break;
	case 3:
		pid = _Fork();
		break;
	case 4:
		stack = lent_block(21);
		pid = stack ? __clone(child_checks, stack + BLOCK, SIGCHLD, NULL) : -1;
		break;
	default: {
		struct {
			uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size,
				tls, set_tid, set_tid_size, cgroup;
		} args = { .exit_signal = SIGCHLD };

		pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
		if (pid < 0 && errno == ENOSYS) {
			skip(1, "%s: %s", how, strerror(errno));
			keep(child_block);
			return;
		}
		break;
	}
	}
	if (pid == 0)
		_exit(child_checks(NULL));
	if (pid > 0)
		waitpid(pid, &status, 0);
	ok(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
		   stat_of("lend_heap_fork_evacuated") > evacuated && block_good(child_block, 20),
	   "%s: the heap is taken back first, the child reads the lent block (status %#x)", how,
	   (unsigned)status);
	keep(child_block);
	keep(stack);
}


/*
 * Zero-copy sends and vmsplice() (preload/zc_guard.c, and io_uring's
 * sends in preload/iouring_guard.c): the kernel keeps references to the
 * program's pages after the call returns, for the network device or the
 * pipe's reader.  A send with MSG_ZEROCOPY from a lent block must leave
 * the sent range off the frames before it returns, the block's data
 * intact and the receiver getting it; a send without the flag leaves its
 * block lent.  The pipe of a vmsplice() is read after ucma_alloc() of the
 * whole area, written over: had the pages stayed lent, the pipe would
 * give the contiguous buffer's bytes.
 */
#define ZC_LEN (4 * PAGE)
#define ZC_SEEDS 70

/* A connected pair of TCP sockets on the loopback device, the sender
 * (sv[0]) asking for zero copy, or false (diagnosed). */
static bool tcp_pair(int sv[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	sv[0] = sv[1] = -1;
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 1) != 0 ||
	    getsockname(l, (struct sockaddr *)&a, &alen) != 0 ||
	    (sv[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    connect(sv[0], (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    (sv[1] = accept(l, NULL, NULL)) < 0) {
		diag("loopback TCP pair: %s", strerror(errno));
		if (sv[0] >= 0)
			close(sv[0]);
		if (l >= 0)
			close(l);
		return false;
	}
	close(l);
	/* Without it (kernels before 4.14) the kernel copies; the guard
	 * takes the buffer back all the same. */
	if (setsockopt(sv[0], SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0)
		diag("SO_ZEROCOPY: %s", strerror(errno));
	return true;
}

/* Receive @len bytes on @fd: are they the first @len bytes of a block of
 * pattern @seed? */
static bool received(int fd, size_t len, uint64_t seed)
{
	static char r[ZC_LEN * 2];
	size_t got = 0;

	while (got < len) {
		ssize_t n = recv(fd, r + got, len - got, 0);

		if (n <= 0) {
			diag("recv: %zd (%s)", n, n < 0 ? strerror(errno) : "closed");
			return false;
		}
		got += (size_t)n;
	}
	for (size_t off = 0; off < len; off += PAGE)
		if (!tu_check(r + off, PAGE, seed + off / PAGE))
			return false;
	return true;
}

/* The send's result, the sent range off the frames, the block intact and
 * the data received. */
static bool zc_sent(ssize_t n, const char *b, uint64_t seed, int rfd)
{
	/* Received first, whatever else fails: the next case reads on. */
	bool got = n == (ssize_t)ZC_LEN && received(rfd, ZC_LEN, seed);

	if (n != (ssize_t)ZC_LEN)
		diag("sent %zd (%s)", n, n < 0 ? strerror(errno) : "");
	return got && !any_on_frame(b, ZC_LEN) && block_good(b, seed);
}

static void zc_sends(int sv[2])
{
	char *b[5];
	ssize_t n;

	for (int i = 0; i < 5; i++)
		b[i] = lent_block(ZC_SEEDS + (uint64_t)i);
	n = b[0] ? send(sv[0], b[0], ZC_LEN, MSG_ZEROCOPY) : -1;
	ok(zc_sent(n, b[0], ZC_SEEDS, sv[1]),
	   "send(MSG_ZEROCOPY) from a lent block: the sent range is off the frames when it "
	   "returns, data intact and received");
	n = b[1] ? send(sv[0], b[1], ZC_LEN, 0) : -1;
	ok(n == (ssize_t)ZC_LEN && received(sv[1], ZC_LEN, ZC_SEEDS + 1) && tu_on_frame(b[1]),
	   "send() without MSG_ZEROCOPY copies: the block stays lent (%zd)", n);
	n = b[2] ? syscall(SYS_sendto, sv[0], b[2], ZC_LEN, MSG_ZEROCOPY, NULL, 0) : -1;
	ok(zc_sent(n, b[2], ZC_SEEDS + 2, sv[1]), "syscall(SYS_sendto, MSG_ZEROCOPY) the same");
	{
		struct iovec v[2] = { { b[3], ZC_LEN / 2 }, { b[3] + ZC_LEN / 2, ZC_LEN / 2 } };
		struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };

		n = b[3] ? sendmsg(sv[0], &m, MSG_ZEROCOPY) : -1;
		ok(zc_sent(n, b[3], ZC_SEEDS + 3, sv[1]),
		   "sendmsg(MSG_ZEROCOPY) of two iovecs the same");
	}
	{
		struct iovec v = { b[4], ZC_LEN };
		struct mmsghdr mm = { .msg_hdr = { .msg_iov = &v, .msg_iovlen = 1 } };
		int k = b[4] ? sendmmsg(sv[0], &mm, 1, MSG_ZEROCOPY) : -1;

		ok(k == 1 && zc_sent((ssize_t)mm.msg_len, b[4], ZC_SEEDS + 4, sv[1]),
		   "sendmmsg(MSG_ZEROCOPY) the same (%d)", k);
	}
	{
		/* A range that wraps is the kernel's to refuse: ENOBUFS would
		 * tell the program to send again without zero copy. */
		struct iovec v = { (void *)(uintptr_t)-PAGE, 2 * PAGE };
		struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1 };
		int err;

		errno = 0;
		n = sendmsg(sv[0], &m, MSG_ZEROCOPY | MSG_DONTWAIT);
		err = errno;
		ok(n == -1 && err != ENOBUFS && err != 0,
		   "sendmsg(MSG_ZEROCOPY) of an iovec that wraps: the kernel's error (%s)",
		   strerror(err));
	}
	release_blocks(b, 5);
}

static void zc_vmsplice(void)
{
	char *b = lent_block(ZC_SEEDS + 5);
	struct iovec v = { b, ZC_LEN };
	int p[2];
	ssize_t n = -1;
	char *area = NULL;
	static char r[ZC_LEN];
	size_t got = 0;

	if (pipe(p) != 0) {
		skip(2, "pipe: %s", strerror(errno));
		release_blocks(&b, 1);
		return;
	}
	if (b)
		n = vmsplice(p[1], &v, 1, 0);
	ok(n == (ssize_t)ZC_LEN && !any_on_frame(b, ZC_LEN) && block_good(b, ZC_SEEDS + 5),
	   "vmsplice() of a lent block into a pipe: off the frames when it returns (%zd)", n);
	if (n > 0)
		area = whole_area();
	if (area)
		memset(area, 0x5a, cma_size);
	while (area && got < (size_t)n) {
		ssize_t k = read(p[0], r + got, (size_t)n - got);

		if (k <= 0)
			break;
		got += (size_t)k;
	}
	for (size_t off = 0; area && got == ZC_LEN && off < ZC_LEN; off += PAGE)
		if (!tu_check(r + off, PAGE, ZC_SEEDS + 5 + off / PAGE))
			got = 0;
	ok(area && got == ZC_LEN,
	   "after ucma_alloc() of the whole area, written over, the pipe gives what was "
	   "spliced (%zu bytes good)", got);
	ucma_release(area);
	close(p[0]);
	close(p[1]);
	release_blocks(&b, 1);
}

#ifdef HAVE_LIBURING
/* Submit what @ring holds and reap @want completions: the send's result
 * (the first completion without IORING_CQE_F_NOTIF), or -1. */
static int uring_send(struct io_uring *ring, int want)
{
	struct io_uring_cqe *cqe;
	int res = -1, rc = io_uring_submit(ring);

	if (rc != 1) {
		diag("io_uring_submit: %d", rc);
		return -1;
	}
	for (int i = 0; i < want; i++) {
		if (io_uring_wait_cqe(ring, &cqe) != 0)
			return -1;
		if (!(cqe->flags & IORING_CQE_F_NOTIF))
			res = cqe->res;
		/* A kernel without zero-copy sends: no notification follows. */
		if (cqe->res < 0 || !(cqe->flags & IORING_CQE_F_MORE))
			want = i + 1;
		io_uring_cqe_seen(ring, cqe);
	}
	return res;
}

static void zc_uring(int sv[2])
{
	struct io_uring ring;
	char *b[3];
	int res;

	if (io_uring_queue_init(8, &ring, 0) != 0) {
		skip(4, "io_uring_queue_init failed");
		return;
	}
	for (int i = 0; i < 3; i++)
		b[i] = lent_block(ZC_SEEDS + 10 + (uint64_t)i);
	if (b[0]) {
		io_uring_prep_send_zc(io_uring_get_sqe(&ring), sv[0], b[0], ZC_LEN, 0, 0);
		res = uring_send(&ring, 2);
	} else {
		res = -1;
	}
	ok(zc_sent(res, b[0], ZC_SEEDS + 10, sv[1]),
	   "io_uring SEND_ZC from a lent block: off the frames once submitted, data intact and "
	   "received (res %d)", res);
	if (b[1]) {
		struct iovec v[2] = { { b[1], ZC_LEN / 2 }, { b[1] + ZC_LEN / 2, ZC_LEN / 2 } };
		struct msghdr m = { .msg_iov = v, .msg_iovlen = 2 };

		io_uring_prep_sendmsg_zc(io_uring_get_sqe(&ring), sv[0], &m, 0);
		res = uring_send(&ring, 2);
	} else {
		res = -1;
	}
	ok(zc_sent(res, b[1], ZC_SEEDS + 11, sv[1]),
	   "io_uring SENDMSG_ZC of two iovecs the same (res %d)", res);
	if (b[2]) {
		io_uring_prep_send(io_uring_get_sqe(&ring), sv[0], b[2], ZC_LEN, 0);
		res = uring_send(&ring, 1);
	} else {
		res = -1;
	}
	ok(res == (int)ZC_LEN && received(sv[1], ZC_LEN, ZC_SEEDS + 12) && tu_on_frame(b[2]),
	   "io_uring SEND without MSG_ZEROCOPY copies: the block stays lent (res %d)", res);
	{
		/* The entry flushed to the kernel's tail by hand and submitted
		 * with syscall(SYS_io_uring_enter): liburing set the ring up
		 * unseen, so the guard reads it from the kernel's listing. */
		uint64_t by_fdinfo = stat_of("lend_iouring_enter_fdinfo");
		char *c = lent_block(ZC_SEEDS + 13);
		struct io_uring_cqe *cqe;
		long rc = -1;

		if (c) {
			io_uring_prep_send_zc(io_uring_get_sqe(&ring), sv[0], c, ZC_LEN, 0, 0);
			__atomic_store_n(ring.sq.ktail, ring.sq.sqe_tail, __ATOMIC_RELEASE);
			ring.sq.sqe_head = ring.sq.sqe_tail;
			rc = syscall(SYS_io_uring_enter, ring.ring_fd, 1, 0, 0, NULL, 0);
		}
		res = -1;
		for (int i = 0; rc == 1 && i < 2 && io_uring_wait_cqe(&ring, &cqe) == 0; i++) {
			bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;

			if (!(cqe->flags & IORING_CQE_F_NOTIF))
				res = cqe->res;
			io_uring_cqe_seen(&ring, cqe);
			if (!more)
				break;
		}
		ok(rc == 1 && stat_of("lend_iouring_enter_fdinfo") > by_fdinfo &&
			   zc_sent(res, c, ZC_SEEDS + 13, sv[1]),
		   "io_uring_enter(2) of a SEND_ZC on a ring set up unseen, read from the "
		   "kernel's listing: the same (rc %ld, res %d)", rc, res);
		release_blocks(&c, 1);
	}
	io_uring_queue_exit(&ring);
	release_blocks(b, 3);
}
#endif

static void case_zerocopy(void)
{
	int sv[2];

	if (!tcp_pair(sv)) {
		skip(10, "no loopback TCP connection");
	} else {
		zc_sends(sv);
#ifdef HAVE_LIBURING
		zc_uring(sv);
#else
		skip(4, "liburing is not installed");
#endif
		close(sv[0]);
		close(sv[1]);
	}
	zc_vmsplice();
}

/*
 * Memory mapped for a device by ioctl() and setsockopt()
 * (preload/device_guard.c): an AF_XDP UMEM area, which the kernel pins
 * for good (FOLL_LONGTERM), must be off the frames once XDP_UMEM_REG
 * returns; a VFIO or iommufd DMA map request takes its range back before
 * the driver sees it (here on /dev/null, which refuses it: no IOMMU here
 * to map with); other requests leave their memory lent.
 */
#define DEV_SEEDS 90
#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#define XDP_UMEM_REG 4
#define VFIO_IOMMU_MAP_DMA_REQ 0x3b71ul	/* _IO(';', 113) */
#define IOMMU_IOAS_MAP_REQ 0x3b85ul	/* _IO(';', 0x85) */

/* struct xdp_umem_reg's leading fields; VFIO_IOMMU_MAP_DMA's and
 * IOMMU_IOAS_MAP's arguments (linux/if_xdp.h, linux/vfio.h,
 * linux/iommufd.h: not every system has the last). */
struct t_umem_reg {
	uint64_t addr, len;
	uint32_t chunk_size, headroom, flags, tx_metadata_len;
};
struct t_dma_map {
	uint32_t argsz, flags;
	uint64_t vaddr, iova, size;
};
struct t_ioas_map {
	uint32_t size, flags, ioas_id, reserved;
	uint64_t user_va, length, iova;
};

static void dev_xdp(void)
{
	char *b[2];
	int rc[2] = { -1, -1 }, s[2];

	s[0] = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
	s[1] = socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (s[0] < 0 || s[1] < 0) {
		skip(2, "no AF_XDP socket here (%s)", strerror(errno));
		if (s[0] >= 0)
			close(s[0]);
		return;
	}
	for (int i = 0; i < 2; i++) {
		struct t_umem_reg r = { 0 };

		b[i] = lent_block(DEV_SEEDS + (uint64_t)i);
		r.addr = (uintptr_t)b[i];
		r.len = ZC_LEN;
		r.chunk_size = (uint32_t)PAGE;
		if (!b[i])
			continue;
		if (i == 0)
			rc[i] = setsockopt(s[i], SOL_XDP, XDP_UMEM_REG, &r, sizeof(r));
		else
			rc[i] = (int)syscall(SYS_setsockopt, s[i], SOL_XDP, XDP_UMEM_REG, &r,
					     sizeof(r));
		if (rc[i] != 0)
			diag("XDP_UMEM_REG: %s", strerror(errno));
	}
	ok(rc[0] == 0 && !any_on_frame(b[0], ZC_LEN) && block_good(b[0], DEV_SEEDS),
	   "setsockopt(XDP_UMEM_REG) of a lent block: the area is off the frames when the "
	   "kernel pins it, data intact");
	ok(rc[1] == 0 && !any_on_frame(b[1], ZC_LEN) && block_good(b[1], DEV_SEEDS + 1),
	   "syscall(SYS_setsockopt, XDP_UMEM_REG) the same");
	close(s[0]);
	close(s[1]);
	release_blocks(b, 2);
}

static void dev_vfio(void)
{
	char *b[4];
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC), p[2], rc[4], err[4], avail = -1;

	for (int i = 0; i < 4; i++)
		b[i] = lent_block(DEV_SEEDS + 2 + (uint64_t)i);
	if (fd < 0 || pipe(p) != 0 || !b[0] || !b[1] || !b[2] || !b[3]) {
		skip(4, "no /dev/null, pipe or lent blocks");
		if (fd >= 0)
			close(fd);
		release_blocks(b, 4);
		return;
	}
	{
		struct t_dma_map m = { sizeof(m), 3, (uintptr_t)b[0], 0, ZC_LEN };
		struct t_ioas_map n = { sizeof(n), 0, 1, 0, (uintptr_t)b[1], ZC_LEN, 0 };
		struct t_dma_map m2 = { sizeof(m2), 3, (uintptr_t)b[2], 0, ZC_LEN };

		errno = 0;
		rc[0] = ioctl(fd, VFIO_IOMMU_MAP_DMA_REQ, &m);
		err[0] = errno;
		errno = 0;
		rc[1] = ioctl(fd, IOMMU_IOAS_MAP_REQ, &n);
		err[1] = errno;
		errno = 0;
		rc[2] = (int)syscall(SYS_ioctl, fd, VFIO_IOMMU_MAP_DMA_REQ, &m2);
		err[2] = errno;
		/* FIONREAD writes an int into the lent block: nothing to pin. */
		rc[3] = ioctl(p[0], FIONREAD, (int *)(void *)(b[3] + 64));
		if (rc[3] == 0)
			avail = *(int *)(void *)(b[3] + 64);
	}
	ok(rc[0] == -1 && err[0] == ENOTTY && !any_on_frame(b[0], ZC_LEN) &&
		   block_good(b[0], DEV_SEEDS + 2),
	   "ioctl(VFIO_IOMMU_MAP_DMA) of a lent range: taken back before the driver sees it "
	   "(/dev/null then refuses it: %s)", strerror(err[0]));
	ok(rc[1] == -1 && err[1] == ENOTTY && !any_on_frame(b[1], ZC_LEN) &&
		   block_good(b[1], DEV_SEEDS + 3),
	   "ioctl(IOMMU_IOAS_MAP) the same (%s)", strerror(err[1]));
	ok(rc[2] == -1 && err[2] == ENOTTY && !any_on_frame(b[2], ZC_LEN),
	   "syscall(SYS_ioctl, VFIO_IOMMU_MAP_DMA) the same (%s)", strerror(err[2]));
	ok(rc[3] == 0 && avail == 0 && tu_on_frame(b[3]),
	   "another ioctl (FIONREAD into a lent block) leaves it lent");
	close(p[0]);
	close(p[1]);
	close(fd);
	release_blocks(b, 4);
}

/* V4L2 user-pointer buffers (VIDIOC_QBUF, VIDIOC_PREPARE_BUF), which
 * videobuf2 pins while they are queued: to /dev/null again. */
#define T_VIDIOC_QBUF 0xc058560ful
#define T_VIDIOC_PREPARE_BUF 0xc058565dul

struct t_v4l2_buffer {
	uint32_t index, type, bytesused, flags, field, pad;
	uint64_t timestamp[2];
	uint32_t timecode[4];
	uint32_t sequence, memory;
	uint64_t m;
	uint32_t length, reserved2, request_fd, reserved;
};

struct t_v4l2_plane {
	uint32_t bytesused, length;
	uint64_t userptr;
	uint32_t data_offset, reserved[11];
};

static void dev_v4l2(void)
{
	char *b[4];
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC), rc[3] = { 0, 0, 0 };

	for (int i = 0; i < 4; i++)
		b[i] = lent_block(DEV_SEEDS + 20 + (uint64_t)i);
	if (fd < 0 || !b[0] || !b[1] || !b[2] || !b[3]) {
		skip(3, "no /dev/null or lent blocks");
		if (fd >= 0)
			close(fd);
		release_blocks(b, 4);
		return;
	}
	{
		struct t_v4l2_buffer one = { .type = 1, .memory = 2, .m = (uintptr_t)b[0],
					     .length = (uint32_t)ZC_LEN };
		struct t_v4l2_plane pl[2] = { { .length = (uint32_t)ZC_LEN, .userptr = (uintptr_t)b[1] },
					      { .length = (uint32_t)ZC_LEN, .userptr = (uintptr_t)b[2] } };
		struct t_v4l2_buffer multi = { .type = 9, .memory = 2, .m = (uintptr_t)pl,
					       .length = 2 };
		struct t_v4l2_buffer mapped = { .type = 1, .memory = 1, .m = (uintptr_t)b[3],
						.length = (uint32_t)ZC_LEN };

		rc[0] = ioctl(fd, T_VIDIOC_QBUF, &one);
		rc[1] = ioctl(fd, T_VIDIOC_PREPARE_BUF, &multi);
		rc[2] = ioctl(fd, T_VIDIOC_QBUF, &mapped);
	}
	ok(rc[0] == -1 && !any_on_frame(b[0], ZC_LEN) && block_good(b[0], DEV_SEEDS + 20),
	   "ioctl(VIDIOC_QBUF) of a user-pointer buffer in a lent block: taken back first");
	ok(rc[1] == -1 && !any_on_frame(b[1], ZC_LEN) && !any_on_frame(b[2], ZC_LEN),
	   "ioctl(VIDIOC_PREPARE_BUF) of a two-plane user-pointer buffer: both planes");
	ok(rc[2] == -1 && tu_on_frame(b[3]),
	   "ioctl(VIDIOC_QBUF) of a buffer of another memory type leaves the block lent");
	close(fd);
	release_blocks(b, 4);
}

#ifdef HAVE_LIBURING
/*
 * NVMe passthrough (IORING_OP_URING_CMD with an NVMe command, in the
 * second half of a 128-byte entry): the data buffer (or, with the _VEC
 * commands, each iovec's) and the metadata buffer are mapped for the
 * device while the command runs, so they leave the frames before the
 * submission.  No NVMe device here: the commands go to /dev/null, which
 * refuses them (the guard has looked before).  Another command leaves its
 * memory lent.  Through liburing and through io_uring_enter(2) on a ring
 * set up with syscall().
 */
#define T_NVME_CMD_IO 0xc0484e80u	/* NVME_URING_CMD_IO, linux/nvme_ioctl.h */
#define T_NVME_CMD_IO_VEC 0xc0484e81u

/* struct nvme_uring_cmd's leading fields. */
struct t_nvme_cmd {
	uint8_t opcode, flags;
	uint16_t rsvd1;
	uint32_t nsid, cdw2, cdw3;
	uint64_t metadata, addr;
	uint32_t metadata_len, data_len;
};

static void nvme_cmd_fill(struct io_uring_sqe *sqe, int fd, uint32_t op, uint64_t addr,
			  uint32_t len, const void *meta, uint32_t meta_len, uint64_t ud)
{
	struct t_nvme_cmd c = { 0 };

	memset(sqe, 0, 128);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fd;
	sqe->off = op;		/* cmd_op */
	sqe->user_data = ud;
	c.addr = addr;
	c.data_len = len;
	c.metadata = (uintptr_t)meta;
	c.metadata_len = meta_len;
	memcpy((char *)sqe + 48, &c, sizeof(c));
}

static void case_nvme_cmd(void)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct raw_ring r;
	char *b[5];
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC), rc;

	if (fd < 0 || io_uring_queue_init(8, &ring, IORING_SETUP_SQE128) != 0) {
		skip(4, "no /dev/null or no ring of 128-byte entries");
		if (fd >= 0)
			close(fd);
		return;
	}
	for (int i = 0; i < 5; i++)
		b[i] = lent_block(DEV_SEEDS + 10 + (uint64_t)i);
	rc = -1;
	if (b[0] && b[1]) {
		nvme_cmd_fill(io_uring_get_sqe(&ring), fd, T_NVME_CMD_IO, (uintptr_t)b[0],
			      (uint32_t)ZC_LEN, b[1], (uint32_t)PAGE, 1);
		nvme_cmd_fill(io_uring_get_sqe(&ring), fd, 0x1234u, (uintptr_t)b[2],
			      (uint32_t)ZC_LEN, NULL, 0, 2);
		rc = io_uring_submit(&ring);
	}
	ok(rc == 2 && !any_on_frame(b[0], ZC_LEN) && !any_on_frame(b[1], PAGE) &&
		   block_good(b[0], DEV_SEEDS + 10) && block_good(b[1], DEV_SEEDS + 11),
	   "liburing: an NVMe passthrough command's data and metadata buffers leave the frames "
	   "before the submission (rc %d)", rc);
	ok(rc == 2 && tu_on_frame(b[2]), "another URING_CMD command leaves its memory lent");
	for (int i = 0; i < rc; i++)
		if (io_uring_wait_cqe(&ring, &cqe) == 0)
			io_uring_cqe_seen(&ring, cqe);
	io_uring_queue_exit(&ring);

	rc = -1;
	if (b[3] && b[4] && raw_ring_setup(&r, 8, IORING_SETUP_SQE128)) {
		struct iovec v[2] = { { b[3], ZC_LEN }, { b[4], ZC_LEN } };
		unsigned idx = *raw_word(r.sq, r.p.sq_off.tail) & *raw_word(r.sq, r.p.sq_off.ring_mask);

		raw_queue(&r, IORING_OP_URING_CMD, fd, NULL, 0, 0, 3);
		nvme_cmd_fill((void *)((char *)r.sqes + ((size_t)idx << r.shift)), fd,
			      T_NVME_CMD_IO_VEC, (uintptr_t)v, 2, NULL, 0, 3);
		rc = (int)raw_submit(&r, 1);
		raw_reap(&r, rc > 0 ? rc : 0, -EOPNOTSUPP);
		raw_ring_exit(&r);
	}
	ok(rc == 1 && !any_on_frame(b[3], ZC_LEN) && !any_on_frame(b[4], ZC_LEN),
	   "io_uring_enter(2): an NVMe _VEC command's iovec buffers the same (rc %d)", rc);
	release_blocks(b, 5);

	/* At index 0 of a ring liburing set up unseen, submitted with
	 * syscall(): read from the kernel's listing, where a 64-byte and a
	 * 128-byte entry both lie at offset 0 (the listing's e0: and on
	 * say which). */
	rc = -1;
	b[0] = lent_block(DEV_SEEDS + 16);
	if (b[0] && io_uring_queue_init(8, &ring, IORING_SETUP_SQE128) == 0) {
		uint64_t by_fdinfo = stat_of("lend_iouring_enter_fdinfo");

		nvme_cmd_fill(io_uring_get_sqe(&ring), fd, T_NVME_CMD_IO, (uintptr_t)b[0],
			      (uint32_t)ZC_LEN, NULL, 0, 4);
		__atomic_store_n(ring.sq.ktail, ring.sq.sqe_tail, __ATOMIC_RELEASE);
		ring.sq.sqe_head = ring.sq.sqe_tail;
		rc = (int)syscall(SYS_io_uring_enter, ring.ring_fd, 1, 0, 0, NULL, 0);
		if (stat_of("lend_iouring_enter_fdinfo") == by_fdinfo)
			diag("the submission was not read from the listing");
		if (rc == 1 && io_uring_wait_cqe(&ring, &cqe) == 0)
			io_uring_cqe_seen(&ring, cqe);
		io_uring_queue_exit(&ring);
	}
	ok(rc == 1 && !any_on_frame(b[0], ZC_LEN),
	   "an NVMe command at index 0, read from the kernel's listing: the same (rc %d)", rc);
	release_blocks(b, 1);
	close(fd);
}
#endif

static void case_device(void)
{
	dev_xdp();
	dev_vfio();
	dev_v4l2();
#ifdef HAVE_LIBURING
	case_nvme_cmd();
#else
	skip(4, "liburing is not installed");
#endif
}
static void case_raw_fork(void)
{
	char *later;

	raw_fork_case("syscall(SYS_clone, SIGCHLD)", 0);
	raw_fork_case("clone() on a lent stack", 1);
#ifdef SYS_clone3
	raw_fork_case("syscall(SYS_clone3)", 2);
#endif
	raw_fork_case("_Fork()", 3);
	raw_fork_case("__clone() on a lent stack", 4);
	{
		static char stack[16384] __attribute__((aligned(16)));
		int rc = clone(NULL, stack + sizeof(stack), SIGCHLD, NULL), err = errno;

		ok(rc == -1 && err == EINVAL,
		   "clone() without a function: the C library's EINVAL, no child (%s)",
		   strerror(err));
	}
	later = lent_block(22);
	ok(later != NULL, "the parent lends again afterwards");
	keep(later);
}

int main(void)
{
	char *probe;

	lent_cma_size();
	probe = block_new(0);
	lent_require(probe);
	keep(probe);
	plan_no_plan();
	case_mlock();
	case_io_uring_syscall();
	case_user_rings("syscall(SYS_io_uring_setup)", setup_by_syscall, 11);
	resize_rings();
	case_mem_region();
#ifdef HAVE_LIBURING
	case_liburing();
	case_user_rings("liburing's io_uring_setup()", io_uring_setup, 12);
#else
	skip(6, "liburing is not installed");
#endif
	case_madvise();
	case_mprotect();
	case_direct_io();
	case_io_uring_direct();
	case_zerocopy();
	case_device();
	case_raw_fork();
	case_mlockall();
	free_kept();
	return done();
}
