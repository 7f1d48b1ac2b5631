/*
 * iouring_guard.c - io_uring reads and writes on malloc memory kept off
 * the CMA frames lent to the heap.
 *
 * An io_uring READ, WRITE, READV or WRITEV on a file opened with O_DIRECT
 * is direct I/O like pread() on it (dio_guard.c): the kernel pins the
 * buffer's pages when it issues the request and the device transfers to
 * or from the frame behind them until it completes.  A take-back (lend.c)
 * meanwhile copies the heap's pageblock away from that frame and gives
 * the frame to ucma_alloc(): the read lands in someone's contiguous
 * buffer and the heap keeps what was there before (measured by
 * tests/integration/preload_longterm: an eighth to a half of a 16 MiB
 * read in 1 MiB entries went missing, every run).  Unlike pread(), the
 * buffer is not an argument of any call: it is in a submission queue
 * entry (SQE) that the program wrote into the ring's memory, and the
 * kernel reads the entries when the program enters it.  So the entries
 * about to be submitted are read first, and the buffers of the
 * read/write ones are taken back (ucma_unlend()), as for a long-term pin
 * (longterm.c): a pageblock holding live blocks is never lent again, so
 * the next request into the same buffer costs only the look.
 *
 * Which entries: READ, WRITE, READV and WRITEV (each iovec's buffer; the
 * kernel copies the iovec array itself when it takes the entry, so that
 * may stay lent) whose file is O_DIRECT, by dio_guard.c's cached answer
 * for a plain descriptor, or whose file is a registered one
 * (IOSQE_FIXED_FILE: which file that is cannot be asked, so it counts as
 * direct).  Buffered I/O copies through the program's addresses, which
 * the write-protection of a take-back holds, so it keeps the buffer lent.
 * READ_FIXED and WRITE_FIXED use registered buffers, taken back at
 * registration (longterm.c).  Zero-copy sends pin their buffers on any
 * socket until the notification completes (zc_guard.c): SEND_ZC and
 * SENDMSG_ZC (each iovec's buffer; the message header and the array the
 * kernel copies), and SEND and SENDMSG with MSG_ZEROCOPY, whatever the
 * file.  A read that lets the kernel pick the buffer
 * from a provided group (IOSQE_BUFFER_SELECT, READ_MULTISHOT) on such a
 * file names no buffer here: every borrowed pageblock is taken back
 * instead.  CLOSE of a plain descriptor makes dio_guard.c forget what it
 * knew of that number (the close is not seen otherwise).
 *
 * Where the entries are read:
 *   liburing              io_uring_submit() and the other functions of
 *                         liburing that submit (below), by name: liburing
 *                         2.3 enters the ring with its own system call
 *                         instruction.  Their struct io_uring says where
 *                         the ring is (its layout is liburing's ABI, the
 *                         same in every liburing.so.2): the entries
 *                         flushed to the kernel's tail and not yet taken
 *                         (through the SQ array, as the kernel reads
 *                         them), and those liburing is about to flush.
 *   io_uring_enter(2)     syscall(SYS_io_uring_enter), and liburing's
 *                         io_uring_enter() and io_uring_enter2() wrappers,
 *                         with to_submit > 0: only the ring's descriptor
 *                         is given.
 *     a ring seen set up  through io_uring_setup(2) (syscall() or
 *                         liburing's io_uring_setup(), longterm.c): what
 *                         the set-up returned is kept per descriptor
 *                         (where the SQ head, tail and array are in the
 *                         rings, how many entries, of 64 or 128 bytes),
 *                         and the rings and the SQE array are mapped here
 *                         once more, read-only: the program may unmap its
 *                         own mappings whenever it likes, these stay until
 *                         the descriptor is closed or replaced, or its
 *                         rings resized, as seen by close(), dup2() and
 *                         their kin (lend_guard.c, dio_guard.c), a CLOSE
 *                         entry read here and io_uring_register(2)
 *                         (longterm.c); a submission reading them then
 *                         unmaps them when it is done.  With
 *                         IORING_SETUP_NO_MMAP the rings are the
 *                         program's memory at the addresses it gave,
 *                         read through ucma_preload_read_user() (a bad
 *                         address is an error, not a fault).  The entries
 *                         read are those the kernel will take: from the
 *                         SQ head (which the kernel writes back after each
 *                         submission), at most to_submit and sq_entries
 *                         of them up to the tail, through the SQ array
 *                         unless IORING_SETUP_NO_SQARRAY.
 *     any other ring      (set up by liburing's io_uring_queue_init*() or
 *                         the system call instruction, inherited over
 *                         exec, received over a socket, resized, or
 *                         evicted from the table by another number's),
 *                         and a ring seen whose SQ holds nothing though
 *                         to_submit says otherwise (most likely not the
 *                         ring of that number any more): the kernel lists
 *                         the entries pending between the SQ head and
 *                         tail in the ring's /proc/self/fdinfo (index,
 *                         opcode, fd, flags, address), and the ring's SQE
 *                         array is the mapping of the ring's inode at
 *                         IORING_OFF_SQES in /proc/self/maps (each ring
 *                         has an inode of its own), which gives the
 *                         lengths; the entry read there must agree with
 *                         the listing.  The array's address is kept per
 *                         descriptor.
 *                         A ring registered by index (IORING_ENTER_
 *                         REGISTERED_RING), a listing that cannot be
 *                         read, or an entry that cannot be found: every
 *                         borrowed pageblock is taken back.
 * A ring polled by a kernel thread (IORING_SETUP_SQPOLL) takes entries
 * without any call: set up through io_uring_setup(2) (syscall() or
 * liburing's io_uring_setup()), where the program makes the ring's tail
 * itself, it is a long-term user like mlockall() (longterm.c: everything
 * is taken back and nothing lent again); set up by liburing's
 * io_uring_queue_init*(), its entries reach the kernel's tail only in
 * liburing's submit functions, which are read as above.
 *
 * When a pageblock stays lent the submission is refused with EBUSY
 * (liburing's functions return -EBUSY), as longterm.c refuses io_uring
 * registration: the entries stay in the ring, nothing was submitted.
 *
 * NVMe passthrough (URING_CMD with an NVMe command in a 128-byte entry)
 * maps the command's data and metadata buffers for the device while it
 * runs: taken back.
 *
 * Not seen: other drivers' URING_CMD commands that would pin memory,
 * buffers of a provided-buffer ring used by a buffered read
 * that later turns direct,
 * entries written after the submission by a program that makes an
 * SQPOLL ring's tail itself from liburing's structure, liburing linked
 * statically, io_uring_enter(2) made with the system call instruction,
 * and the entries of a ring seen set up whose descriptor was closed
 * unseen (the system call instruction) while the old ring still held
 * entries, when the number then names a ring not seen set up: the old
 * ring's entries are read (dio_guard.c's answers have the same gap).
 * IORING_SETUP_SQE_MIXED rings may have the second half of a 128-byte
 * entry read as an entry: at worst an unrelated range is taken back.
 *
 * Cost: while nothing is lent, one load.  Otherwise, for liburing and for
 * io_uring_enter(2) on a ring seen set up, a look at each entry's opcode,
 * and for a read or write at the borrowed state of each 2 MiB of its
 * buffer: measured, 20-190 ns per submission of a NOP or a buffered READ
 * (1.02-1.13 times the bare system call), against 7.6-11 us (7-9 times)
 * for the fdinfo listing (tests/bench/RESULTS.md, "iouring_guard"), which
 * any other ring pays on each submission (and a read of /proc/self/maps
 * once per descriptor).  A ring seen set up costs
 * two mappings more (of the kernel's pages: no memory), and while one is
 * kept, close() and its kin look at the slots of the numbers they close.
 * The counters lend_iouring_enter_ring and lend_iouring_enter_fdinfo
 * (ucma_stat(3)) say which way submissions went.
 *
 * Locking: none; ucma_unlend() takes what it needs.  Each ring kept is a
 * slot whose state word (live, readers, generation) changes by
 * compare-and-swap, so that a close in one thread and a submission in
 * another agree on who unmaps.  The per-descriptor addresses of the
 * fdinfo path are checked against the kernel's listing before use, so a
 * stale or torn one only costs a look at /proc/self/maps.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdbool.h>

#include "interpose.h"

#if defined(__x86_64__) || defined(__aarch64__)

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#include "ucma.h"
#include "internal.h"
#include "lend.h"
#include "raw_syscall.h"

#ifndef UIO_MAXIOV
#define UIO_MAXIOV 1024
#endif

#define IOURING_EXPORT __attribute__((visibility("default")))

/* The kernel's ABI (linux/io_uring.h), spelled out so that the build does
 * not depend on how new the installed headers are. */
#define OP_READV		1
#define OP_WRITEV		2
#define OP_CLOSE		19
#define OP_READ			22
#define OP_WRITE		23
#define OP_SENDMSG		9
#define OP_SEND			26
#define OP_SEND_ZC		47	/* Linux 6.0 */
#define OP_SENDMSG_ZC		48	/* Linux 6.1 */
#define OP_URING_CMD		46	/* Linux 5.19 */
#define OP_READ_MULTISHOT	49	/* Linux 6.7 */
#define MSG_ZEROCOPY_FLAG	0x4000000	/* MSG_ZEROCOPY, in rw_flags */
#define SQE_FIXED_FILE		(1u << 0)
#define SQE_BUFFER_SELECT	(1u << 5)
#define SETUP_SQE128		(1u << 10)
#define SETUP_NO_SQARRAY	(1u << 16)	/* Linux 6.6 */
#define ENTER_REGISTERED_RING	(1u << 4)
#define OFF_SQES		0x10000000ul

/* The leading 48 bytes of struct io_uring_sqe. */
struct sqe {
	uint8_t opcode, flags;
	uint16_t ioprio;
	int32_t fd;
	uint64_t off, addr;
	uint32_t len, rw_flags;
	uint64_t user_data;
	uint16_t buf_index, personality;
	uint32_t file_index;
};

/* The leading fields of liburing's struct io_uring (liburing.h). */
struct uring_sq {
	unsigned *khead, *ktail, *kring_mask, *kring_entries, *kflags, *kdropped, *array;
	void *sqes;
	unsigned sqe_head, sqe_tail;
	size_t ring_sz;
	void *ring_ptr;
	unsigned ring_mask, ring_entries, pad[2];
};

struct uring_cq {
	unsigned *khead, *ktail, *kring_mask, *kring_entries, *kflags, *koverflow;
	void *cqes;
	size_t ring_sz;
	void *ring_ptr;
	unsigned ring_mask, ring_entries, pad[2];
};

struct uring {
	struct uring_sq sq;
	struct uring_cq cq;
	unsigned flags;
	int ring_fd;
};

#ifdef HAVE_LIBURING
_Static_assert(offsetof(struct io_uring, sq.array) == offsetof(struct uring, sq.array) &&
		       offsetof(struct io_uring, sq.sqes) == offsetof(struct uring, sq.sqes) &&
		       offsetof(struct io_uring, sq.sqe_tail) == offsetof(struct uring, sq.sqe_tail) &&
		       offsetof(struct io_uring, flags) == offsetof(struct uring, flags) &&
		       offsetof(struct io_uring, ring_fd) == offsetof(struct uring, ring_fd),
	       "liburing's struct io_uring is not as read here");
_Static_assert(offsetof(struct io_uring_sqe, addr) == offsetof(struct sqe, addr) &&
		       offsetof(struct io_uring_sqe, len) == offsetof(struct sqe, len) &&
		       offsetof(struct io_uring_sqe, user_data) == offsetof(struct sqe, user_data) &&
		       offsetof(struct io_uring_sqe, file_index) == offsetof(struct sqe, file_index) &&
		       IORING_OP_READ == OP_READ && IORING_OP_WRITEV == OP_WRITEV &&
		       IORING_OP_CLOSE == OP_CLOSE && IOSQE_BUFFER_SELECT == SQE_BUFFER_SELECT &&
		       IORING_OP_SENDMSG == OP_SENDMSG && IORING_OP_SEND == OP_SEND &&
		       IORING_OP_SEND_ZC == OP_SEND_ZC && IORING_OP_SENDMSG_ZC == OP_SENDMSG_ZC,
	       "struct io_uring_sqe is not as read here");
#endif

/* ------------------------------------------------------------------------ */
/* One entry                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * One scan of a submission: has everything been taken back already, and
 * where does the entry being looked at lie (@at: in memory that
 * ucma_preload_read_user() reads, NULL when not known; @big: a 128-byte
 * entry, whose second half a URING_CMD's command fills)?
 */
struct scan {
	bool all;
	bool big;
	const char *at;
};

/* Every borrowed pageblock back (the entry's buffer is not known). */
static bool unlend_everything(struct scan *sc)
{
	if (sc->all)
		return true;
	sc->all = true;
	return ucma_preload_unlend(NULL, SIZE_MAX);
}

/* Is the file of @s one whose I/O pins the buffer? */
static bool sqe_direct(const struct sqe *s)
{
	return (s->flags & SQE_FIXED_FILE) || ucma_preload_fd_direct(s->fd);
}

/*
 * Take back @len bytes at @addr, a buffer of the entry @s: of a read or
 * write only when its file is direct (@direct), of a zero-copy send
 * always.
 */
static bool unlend_buffer(const struct sqe *s, bool direct, uint64_t addr, uint64_t len,
			  struct scan *sc)
{
	if (!addr || !len || sc->all)
		return true;
	if (len > SIZE_MAX - addr)
		len = SIZE_MAX - addr;
	if (!ucma_lend_range_borrowed((const void *)(uintptr_t)addr, (size_t)len) ||
	    (direct && !sqe_direct(s)))
		return true;
	return ucma_preload_unlend((const void *)(uintptr_t)addr, (size_t)len);
}

/* The same for the buffers of @nr iovecs at @uiov, the program's memory. */
static bool unlend_iovs(const struct sqe *s, bool direct, uint64_t uiov, uint64_t nr,
			struct scan *sc)
{
	for (uint64_t i = 0; i < nr;) {
		struct iovec v[16];
		uint64_t n = nr - i < 16 ? nr - i : 16;

		if (!ucma_preload_read_user(v, (const struct iovec *)(uintptr_t)uiov + i,
					    n * sizeof(v[0])))
			return true;
		for (uint64_t k = 0; k < n; k++)
			if (!unlend_buffer(s, direct, (uintptr_t)v[k].iov_base, v[k].iov_len, sc))
				return false;
		i += n;
	}
	return true;
}

/*
 * A send the kernel makes without copying: SEND_ZC and SENDMSG_ZC, and
 * SEND and SENDMSG with MSG_ZEROCOPY (zc_guard.c says why their buffers
 * must leave the frames).  Buffers picked by the kernel from a provided
 * group (IOSQE_BUFFER_SELECT): every borrowed pageblock back.  A
 * registered buffer (IORING_RECVSEND_FIXED_BUF) was taken back when it
 * was registered: the look finds nothing lent.
 */
static bool send_unlend(const struct sqe *s, struct scan *sc)
{
	struct msghdr m;

	if ((s->opcode == OP_SEND || s->opcode == OP_SENDMSG) && !(s->rw_flags & MSG_ZEROCOPY_FLAG))
		return true;
	if (s->flags & SQE_BUFFER_SELECT)
		return unlend_everything(sc);
	if (s->opcode == OP_SEND || s->opcode == OP_SEND_ZC)
		return unlend_buffer(s, false, s->addr, s->len, sc);
	/* More iovecs than UIO_MAXIOV: the kernel refuses the message. */
	if (!s->addr || !ucma_preload_read_user(&m, (const void *)(uintptr_t)s->addr, sizeof(m)) ||
	    m.msg_iovlen > UIO_MAXIOV)
		return true;
	return unlend_iovs(s, false, (uintptr_t)m.msg_iov, m.msg_iovlen, sc);
}

/*
 * NVMe passthrough: IORING_OP_URING_CMD with an NVMe command, on a
 * namespace's generic character device (/dev/ngXnY).  The command, in the
 * second half of a 128-byte entry (the kernel refuses it in a 64-byte
 * one), names the data buffer (an iovec array with the _VEC commands;
 * with IORING_URING_CMD_FIXED, a registered buffer, taken back when it was
 * registered) and the metadata buffer, which the driver maps for the
 * device while the command runs.  Other commands (a socket's, ublk's)
 * name no such buffer.  An entry whose place is not known: every
 * borrowed pageblock back.
 */
#define NVME_CMD_IO		0xc0484e80u	/* NVME_URING_CMD_IO, linux/nvme_ioctl.h */
#define NVME_CMD_IO_VEC		0xc0484e81u
#define NVME_CMD_ADMIN		0xc0484e82u
#define NVME_CMD_ADMIN_VEC	0xc0484e83u
#define URING_CMD_FIXED		(1u << 0)

/* The leading fields of struct nvme_uring_cmd. */
struct nvme_cmd {
	uint8_t opcode, flags;
	uint16_t rsvd1;
	uint32_t nsid, cdw2, cdw3;
	uint64_t metadata, addr;
	uint32_t metadata_len, data_len;
};

static bool nvme_op(uint32_t op)
{
	return op == NVME_CMD_IO || op == NVME_CMD_IO_VEC || op == NVME_CMD_ADMIN ||
	       op == NVME_CMD_ADMIN_VEC;
}

static bool cmd_unlend(const struct sqe *s, struct scan *sc)
{
	uint32_t op = (uint32_t)s->off;	/* cmd_op */
	struct nvme_cmd c;

	if (!nvme_op(op))
		return true;
	if (!sc->at)
		return unlend_everything(sc);
	if (!sc->big || !ucma_preload_read_user(&c, sc->at + 48, sizeof(c)))
		return true;
	if (!unlend_buffer(s, false, c.metadata, c.metadata_len, sc))
		return false;
	if (s->rw_flags & URING_CMD_FIXED)
		return true;
	if (op == NVME_CMD_IO_VEC || op == NVME_CMD_ADMIN_VEC)
		return c.data_len > UIO_MAXIOV || unlend_iovs(s, false, c.addr, c.data_len, sc);
	return unlend_buffer(s, false, c.addr, c.data_len, sc);
}

/*
 * Take back what the kernel will pin for the entry @s: false with errno
 * when a pageblock stays lent.  An iovec array or message header that
 * cannot be read is the kernel's to refuse (EFAULT in the completion).
 */
static bool sqe_unlend(const struct sqe *s, struct scan *sc)
{
	switch (s->opcode) {
	case OP_CLOSE:
		if (!s->file_index && s->fd >= 0)
			ucma_preload_dio_forget((unsigned)s->fd, (unsigned)s->fd);
		return true;
	case OP_READ:
	case OP_WRITE:
	case OP_READV:
	case OP_WRITEV:
	case OP_READ_MULTISHOT:
		break;
	case OP_SEND:
	case OP_SENDMSG:
	case OP_SEND_ZC:
	case OP_SENDMSG_ZC:
		return sc->all || send_unlend(s, sc);
	case OP_URING_CMD:
		return sc->all || cmd_unlend(s, sc);
	default:
		return true;
	}
	if (sc->all)
		return true;
	if ((s->flags & SQE_BUFFER_SELECT) || s->opcode == OP_READ_MULTISHOT)
		return !sqe_direct(s) || unlend_everything(sc);
	if (s->opcode == OP_READ || s->opcode == OP_WRITE)
		return unlend_buffer(s, true, s->addr, s->len, sc);
	return unlend_iovs(s, true, s->addr, s->len, sc);
}

/* Is anything lent that a submission could reach? */
static inline bool guard_wanted(void)
{
	return UCMA_UNLIKELY(ucma_lend_any_borrowed());
}

/* ------------------------------------------------------------------------ */
/* liburing's rings                                                          */
/* ------------------------------------------------------------------------ */

static const struct sqe *uring_sqe(const struct uring *r, unsigned idx)
{
	unsigned shift = (r->flags & SETUP_SQE128) ? 7 : 6;

	return (const struct sqe *)(const void *)((const char *)r->sq.sqes +
						  ((size_t)idx << shift));
}

/*
 * The entries of liburing's ring @ring that the next entry into the
 * kernel may submit: false with errno when a buffer stays lent.
 */
static bool uring_unlend(const void *ring)
{
	const struct uring *r = ring;
	struct scan sc = { false, false, NULL };
	unsigned mask, entries, head, ktail, n = 0;

	if (!guard_wanted() || !r)
		return true;
	mask = *r->sq.kring_mask;
	entries = *r->sq.kring_entries;
	sc.big = (r->flags & SETUP_SQE128) != 0;
	head = __atomic_load_n(r->sq.khead, __ATOMIC_ACQUIRE);
	ktail = *r->sq.ktail;
	/* Flushed to the kernel's tail, not taken yet: through the SQ array,
	 * as the kernel reads them. */
	for (unsigned p = head; p != ktail && n < entries; p++, n++) {
		unsigned idx = (r->sq.array && !(r->flags & SETUP_NO_SQARRAY)) ?
				       __atomic_load_n(&r->sq.array[p & mask], __ATOMIC_RELAXED) :
				       p & mask;

		if (idx > mask)
			continue;
		sc.at = (const char *)uring_sqe(r, idx);
		if (!sqe_unlend(uring_sqe(r, idx), &sc))
			return false;
	}
	/* Prepared, to be flushed by the call: where liburing put them. */
	for (unsigned p = r->sq.sqe_head; p != r->sq.sqe_tail && n < entries; p++, n++) {
		sc.at = (const char *)uring_sqe(r, p & mask);
		if (!sqe_unlend(uring_sqe(r, p & mask), &sc))
			return false;
	}
	return true;
}

/* ------------------------------------------------------------------------ */
/* io_uring_enter(2) on a descriptor                                          */
/* ------------------------------------------------------------------------ */

/*
 * Where each ring descriptor's SQE array is mapped, as last found in
 * /proc/self/maps (by the ring's inode).  Direct-mapped by descriptor.
 */
#define RING_CACHE 64

static struct ring_cache {
	_Atomic int fd;
	_Atomic uint64_t ino;
	_Atomic uintptr_t sqes;
	_Atomic size_t len;
} ring_cache[RING_CACHE];

/*
 * Call @line_fn(line, @arg) for each line of the file at @path until it
 * returns false, reading with the system call instruction (this runs
 * inside the preloaded syscall(), where stdio could allocate).  A line
 * longer than the buffer is skipped: no line that matters here is.
 * Returns 0, or -errno when the file cannot be opened.
 */
static long proc_lines(const char *path, bool (*line_fn)(char *line, void *arg), void *arg)
{
	char buf[4096];
	size_t have = 0;
	bool more = true;
	long fd = ucma_raw_syscall6(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC, 0, 0,
				    0);

	if (fd < 0)
		return fd;
	while (more) {
		long n = ucma_raw_syscall6(SYS_read, fd, (long)(buf + have),
					   (long)(sizeof(buf) - 1 - have), 0, 0, 0);
		char *line = buf, *nl;

		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = '\0';
		while (more && (nl = strchr(line, '\n'))) {
			*nl = '\0';
			more = line_fn(line, arg);
			line = nl + 1;
		}
		have = (size_t)(buf + have - line);
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1)
			have = 0;
	}
	ucma_raw_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
	return 0;
}

/* find_sqes(): the inode sought, and what was found. */
struct sqes_search {
	uint64_t ino;
	uintptr_t at;
	size_t len;
	bool found;
};

static bool sqes_line(char *line, void *arg)
{
	struct sqes_search *q = arg;
	unsigned long lo, hi, off, i;

	if (sscanf(line, "%lx-%lx %*s %lx %*s %lu", &lo, &hi, &off, &i) == 4 && i == q->ino &&
	    off == OFF_SQES) {
		q->at = lo;
		q->len = hi - lo;
		q->found = true;
	}
	return !q->found;
}

/* The mapping of inode @ino at IORING_OFF_SQES in /proc/self/maps. */
static bool find_sqes(uint64_t ino, uintptr_t *at, size_t *len)
{
	struct sqes_search q = { ino, 0, 0, false };

	proc_lines("/proc/self/maps", sqes_line, &q);
	*at = q.at;
	*len = q.len;
	return q.found;
}

/* One pending entry as the fdinfo listing shows it. */
struct listed {
	unsigned idx;
	int fd;
	unsigned flags;
	uint64_t off, addr, user_data;
	uint32_t rw_flags;
	bool big;		/* the line lists e0: and on, a 128-byte entry's rest */
	char op[24];
};

/*
 * "%5u: opcode:%s, fd:%d, flags:%x, off:%llu, addr:0x%llx, rw_flags:0x%x,
 * buf_index:%d user_data:%llu" (io_uring/fdinfo.c, Linux 5.18 and later).
 */
static bool parse_listed(const char *line, struct listed *e)
{
	const char *p;
	char *end;
	size_t k = 0;

	e->idx = (unsigned)strtoul(line, &end, 10);
	if (end == line || *end != ':' || !(p = strstr(end, "opcode:")))
		return false;
	for (p += 7; *p && *p != ',' && k < sizeof(e->op) - 1; p++)
		e->op[k++] = *p;
	e->op[k] = '\0';
	if (!(p = strstr(p, "fd:")))
		return false;
	e->fd = (int)strtol(p + 3, NULL, 10);
	if (!(p = strstr(p, "flags:")))
		return false;
	e->flags = (unsigned)strtoul(p + 6, NULL, 16);
	if (!(p = strstr(p, "off:")))
		return false;
	e->off = strtoull(p + 4, NULL, 10);
	if (!(p = strstr(p, "addr:")))
		return false;
	e->addr = strtoull(p + 5, NULL, 16);
	if (!(p = strstr(p, "rw_flags:")))
		return false;
	e->rw_flags = (uint32_t)strtoul(p + 9, NULL, 16);
	if (!(p = strstr(p, "user_data:")))
		return false;
	e->user_data = strtoull(p + 10, NULL, 10);
	e->big = strstr(p, ", e0:") != NULL;
	return true;
}

/* Could the listed opcode @op pin a buffer (or close a descriptor)? */
static bool listed_matters(const char *op)
{
	static const char *const ops[] = { "READ",	 "WRITE",   "READV",   "WRITEV",
					   "READ_MULTISHOT", "CLOSE",   "SEND",    "SENDMSG",
					   "SEND_ZC",	 "SENDMSG_ZC", "URING_CMD" };

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (strcmp(op, ops[i]) == 0)
			return true;
	return false;
}

/* The entry at index @e->idx of ring @fd (inode @ino), read from its SQE
 * array into @s, and checked against the listing; where it lies, and its
 * size, in @sc.  False: not found. */
static bool fetch_sqe(int fd, uint64_t ino, const struct listed *e, struct sqe *s,
		      struct scan *sc)
{
	struct ring_cache *c = &ring_cache[(unsigned)fd % RING_CACHE];

	for (int attempt = 0; attempt < 2; attempt++) {
		uintptr_t at = atomic_load_explicit(&c->sqes, memory_order_relaxed);
		size_t len = atomic_load_explicit(&c->len, memory_order_relaxed);

		if (attempt || atomic_load_explicit(&c->fd, memory_order_relaxed) != fd ||
		    atomic_load_explicit(&c->ino, memory_order_relaxed) != ino || !at) {
			if (!find_sqes(ino, &at, &len))
				return false;
			atomic_store_explicit(&c->sqes, at, memory_order_relaxed);
			atomic_store_explicit(&c->len, len, memory_order_relaxed);
			atomic_store_explicit(&c->ino, ino, memory_order_relaxed);
			atomic_store_explicit(&c->fd, fd, memory_order_relaxed);
		}
		/* 64-byte entries, or 128-byte ones (IORING_SETUP_SQE128),
		 * which the listing shows by their rest (e0: and on): at
		 * index 0 both sizes find the same entry. */
		for (unsigned shift = e->big ? 7 : 6; shift <= 7; shift++) {
			size_t off = (size_t)e->idx << shift;

			if (off + sizeof(*s) <= len &&
			    ucma_preload_read_user(s, (const void *)(at + off), sizeof(*s)) &&
			    s->fd == e->fd && s->flags == e->flags && s->addr == e->addr &&
			    s->user_data == e->user_data) {
				sc->at = (const char *)(at + off);
				sc->big = shift == 7;
				return true;
			}
		}
	}
	return false;
}

/* What one line of the listing asks. */
static bool listed_unlend(int fd, uint64_t ino, const char *line, struct scan *sc)
{
	struct listed e;
	struct sqe s;

	if (!parse_listed(line, &e))
		return unlend_everything(sc);
	if (!listed_matters(e.op))
		return true;
	if (fetch_sqe(fd, ino, &e, &s, sc))
		return sqe_unlend(&s, sc);
	if (strcmp(e.op, "CLOSE") == 0) {
		if (e.fd >= 0)
			ucma_preload_dio_forget((unsigned)e.fd, (unsigned)e.fd);
		return true;
	}
	/* A send or command whose buffers are not known: the listing says
	 * whether it is a zero-copy one, or an NVMe command. */
	if (strcmp(e.op, "SEND") == 0 || strcmp(e.op, "SENDMSG") == 0)
		return !(e.rw_flags & MSG_ZEROCOPY_FLAG) || unlend_everything(sc);
	if (strncmp(e.op, "SEND", 4) == 0)
		return unlend_everything(sc);
	if (strcmp(e.op, "URING_CMD") == 0)
		return !nvme_op((uint32_t)e.off) || unlend_everything(sc);
	/* A read or write whose length is not known. */
	s = (struct sqe){ .flags = (uint8_t)e.flags, .fd = e.fd };
	return !sqe_direct(&s) || unlend_everything(sc);
}

/* ring_fd_unlend(): one pass over a ring's fdinfo listing. */
struct listing {
	int fd;
	uint64_t ino;
	unsigned listed, pending;
	bool in_list, refused;
	struct scan sc;
};

static bool listing_line(char *line, void *arg)
{
	struct listing *l = arg;

	/* "%5u: ...": indexes of five digits and more start the line. */
	if (l->in_list && (line[0] == ' ' || (line[0] >= '0' && line[0] <= '9'))) {
		l->listed++;
		l->refused = !listed_unlend(l->fd, l->ino, line, &l->sc);
		return !l->refused;
	}
	if (l->in_list)
		return false;	/* the list has ended */
	if (strncmp(line, "ino:", 4) == 0) {
		l->ino = strtoull(line + 4, NULL, 10);
	} else if (strncmp(line, "SQEs:", 5) == 0) {
		l->pending = (unsigned)strtoul(line + 5, NULL, 10);
		l->in_list = true;
	}
	return true;
}

/*
 * The entries pending in ring @fd, from /proc/self/fdinfo: false with
 * errno when a buffer stays lent.
 */
static bool ring_fd_unlend(int fd)
{
	char path[48];
	struct listing l = { .fd = fd };
	long f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = proc_lines(path, listing_line, &l);
	if (f < 0)
		return f == -EBADF || f == -ENOENT || unlend_everything(&l.sc);
	if (l.refused)
		return false;
	/* Not an io_uring descriptor, or entries the listing did not show
	 * (a kernel without the listing, IORING_SETUP_NO_SQARRAY). */
	if (!l.in_list && !l.ino)
		return true;
	if (!l.in_list || l.listed < l.pending)
		return unlend_everything(&l.sc);
	return true;
}

/* ------------------------------------------------------------------------ */
/* io_uring_enter(2) on a ring seen at its set-up                             */
/* ------------------------------------------------------------------------ */

/* struct io_uring_params as Linux 6.5 fills it in (older headers call each
 * ring's user_addr "resv2"). */
struct setup_params {
	uint32_t sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd;
	uint32_t resv[3];
	struct {
		uint32_t head, tail, ring_mask, ring_entries, flags, dropped, array, resv1;
		uint64_t user_addr;
	} sq_off;
	struct {
		uint32_t head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1;
		uint64_t user_addr;
	} cq_off;
};
_Static_assert(sizeof(struct setup_params) == 120, "struct io_uring_params is 120 bytes");

/*
 * What the kernel reads of a ring when it takes entries, as its set-up
 * returned it: the SQ head and tail (offsets in the rings), the SQ array
 * (unless IORING_SETUP_NO_SQARRAY) and the SQEs.  @own: @rings and @sqes
 * are mappings of the ring made here (read with plain loads, unmapped
 * when the ring is forgotten); otherwise they are the program's memory
 * (IORING_SETUP_NO_MMAP), read with ucma_preload_read_user().
 */
struct ring_map {
	int fd;
	bool own;
	uint32_t flags, entries, head, tail, array;
	uintptr_t rings, sqes;
	size_t rings_len, sqes_len;
};

/*
 * One slot per descriptor number modulo RINGS.  @state: RING_LIVE while
 * @m may be used, RING_CLAIM while a set-up writes it, the count of
 * readers in the low 32 bits, and a generation that each set-up bumps
 * (so that a forget that read @m of one ring cannot retire the next).
 * A ring forgotten while read is unmapped by its last reader: a close in
 * one thread never pulls the mapping from under a submission in another.
 */
#define RINGS		256
#define RING_LIVE	(1ull << 63)
#define RING_CLAIM	(1ull << 62)
#define RING_GEN	(1ull << 32)
#define RING_GEN_MASK	(RING_CLAIM - RING_GEN)
#define RING_USERS	(RING_GEN - 1)

static struct ring_slot {
	_Atomic uint64_t state;
	struct ring_map m;
} rings[RINGS];

/* Slots live: close() of any descriptor looks at the table only then. */
static _Atomic unsigned rings_live;

#define SETUP_SQPOLL		(1u << 1)
#define SETUP_NO_MMAP		(1u << 14)	/* Linux 6.5 */
#define SETUP_REGISTERED_FD_ONLY (1u << 15)	/* Linux 6.3 */
#define SETUP_SQE_MIXED		(1u << 19)	/* Linux 6.18 */
/* The set-up flags up to SQE_MIXED, whose layouts are read here: a ring
 * with a flag of a later kernel is left to the fdinfo listing. */
#define SETUP_KNOWN		((SETUP_SQE_MIXED << 1) - 1)
#define OFF_SQ_RING		0ul

static void ring_unmap(const struct ring_map *m)
{
	if (!m->own)
		return;
	ucma_raw_syscall6(SYS_munmap, (long)m->rings, (long)m->rings_len, 0, 0, 0, 0);
	ucma_raw_syscall6(SYS_munmap, (long)m->sqes, (long)m->sqes_len, 0, 0, 0, 0);
}

static void ring_put(struct ring_slot *s, const struct ring_map *m);

/* The ring of descriptor @fd, held in *@m until ring_put(); NULL when none
 * is known (or its slot is busy). */
static struct ring_slot *ring_get(int fd, struct ring_map *m)
{
	struct ring_slot *s = &rings[(unsigned)fd % RINGS];
	uint64_t v = atomic_load_explicit(&s->state, memory_order_acquire);

	do {
		if ((v & (RING_LIVE | RING_CLAIM)) != RING_LIVE || (v & RING_USERS) == RING_USERS)
			return NULL;
	} while (!atomic_compare_exchange_weak_explicit(&s->state, &v, v + 1, memory_order_acquire,
							memory_order_acquire));
	*m = s->m;
	if (m->fd == fd)
		return s;
	ring_put(s, m);
	return NULL;
}

static void ring_put(struct ring_slot *s, const struct ring_map *m)
{
	uint64_t old = atomic_fetch_sub_explicit(&s->state, 1, memory_order_acq_rel);

	/* The last reader of a ring forgotten meanwhile. */
	if ((old & ~RING_GEN_MASK) == 1)
		ring_unmap(m);
}

/* Retire the ring in slot @s if it is @fd's (any ring for -1). */
static void ring_kill(struct ring_slot *s, long fd)
{
	uint64_t v = atomic_load_explicit(&s->state, memory_order_acquire);
	struct ring_map m;

	do {
		if (!(v & RING_LIVE))
			return;
		m = s->m;	/* unchanged while live */
		if (fd >= 0 && m.fd != fd)
			return;
	} while (!atomic_compare_exchange_weak_explicit(&s->state, &v, v & ~RING_LIVE,
							memory_order_acq_rel, memory_order_acquire));
	atomic_fetch_sub_explicit(&rings_live, 1, memory_order_relaxed);
	if (!(v & RING_USERS))
		ring_unmap(&m);
}

void ucma_preload_iouring_forget(unsigned first, unsigned last)
{
	if (!atomic_load_explicit(&rings_live, memory_order_relaxed))
		return;
	if (last - first < RINGS) {
		for (unsigned fd = first;; fd++) {
			if (fd <= INT_MAX)
				ring_kill(&rings[fd % RINGS], fd);
			if (fd == last)
				break;
		}
		return;
	}
	for (unsigned i = 0; i < RINGS; i++) {
		struct ring_slot *s = &rings[i];
		uint64_t v = atomic_load_explicit(&s->state, memory_order_acquire);
		int fd = s->m.fd;

		if ((v & RING_LIVE) && (unsigned)fd >= first && (unsigned)fd <= last)
			ring_kill(s, fd);
	}
}

/* Keep @m as ring @fd's; unmapped again when its slot is busy. */
static void ring_install(int fd, const struct ring_map *m)
{
	struct ring_slot *s = &rings[(unsigned)fd % RINGS];
	uint64_t v;

	ring_kill(s, -1);	/* another number's ring, or this one's, closed unseen */
	v = atomic_load_explicit(&s->state, memory_order_acquire);
	if ((v & ~RING_GEN_MASK) ||
	    !atomic_compare_exchange_strong_explicit(&s->state, &v, (v & RING_GEN_MASK) | RING_CLAIM,
						     memory_order_acquire, memory_order_relaxed)) {
		ring_unmap(m);	/* readers still drain the old ring */
		return;
	}
	s->m = *m;
	s->m.fd = fd;
	atomic_fetch_add_explicit(&rings_live, 1, memory_order_relaxed);
	atomic_store_explicit(&s->state, (((v & RING_GEN_MASK) + RING_GEN) & RING_GEN_MASK) | RING_LIVE,
			      memory_order_release);
}

void ucma_preload_iouring_setup(long fd, const void *uparams)
{
	struct setup_params p;
	struct ring_map m = { .fd = (int)fd };
	unsigned shift;
	long at;

	if (fd < 0 || fd > INT_MAX)
		return;
	ucma_preload_iouring_forget((unsigned)fd, (unsigned)fd);
	if (!uparams || !ucma_preload_read_user(&p, uparams, sizeof(p)))
		return;
	/* A polled ring stops lending for good (longterm.c); a ring without a
	 * descriptor is entered by index, which takes everything back. */
	if ((p.flags & (SETUP_SQPOLL | SETUP_REGISTERED_FD_ONLY | ~SETUP_KNOWN)) || !p.sq_entries ||
	    (p.sq_entries & (p.sq_entries - 1)) || p.sq_entries > 32768)
		return;
	shift = (p.flags & SETUP_SQE128) ? 7 : 6;
	m.flags = p.flags;
	m.entries = p.sq_entries;
	m.head = p.sq_off.head;
	m.tail = p.sq_off.tail;
	m.array = p.sq_off.array;
	m.rings_len = (size_t)(m.head > m.tail ? m.head : m.tail) + 4;
	if (!(p.flags & SETUP_NO_SQARRAY) && (size_t)m.array + 4 * (size_t)m.entries > m.rings_len)
		m.rings_len = (size_t)m.array + 4 * (size_t)m.entries;
	m.sqes_len = (size_t)m.entries << shift;
	if (p.flags & SETUP_NO_MMAP) {
		/* The rings at cq_off.user_addr, the SQEs at sq_off.user_addr
		 * (io_uring/io_uring.c, io_allocate_scq_urings()). */
		m.rings = (uintptr_t)p.cq_off.user_addr;
		m.sqes = (uintptr_t)p.sq_off.user_addr;
		if (!m.rings || !m.sqes)
			return;
		ring_install((int)fd, &m);
		return;
	}
	/* Mappings of our own, read-only: the program may unmap its own at any
	 * time, these go only when the descriptor does. */
	at = ucma_raw_syscall6(SYS_mmap, 0, (long)m.rings_len, PROT_READ, MAP_SHARED, fd,
			       (long)OFF_SQ_RING);
	if (at < 0 && at > -4096)
		return;
	m.rings = (uintptr_t)at;
	at = ucma_raw_syscall6(SYS_mmap, 0, (long)m.sqes_len, PROT_READ, MAP_SHARED, fd,
			       (long)OFF_SQES);
	if (at < 0 && at > -4096) {
		ucma_raw_syscall6(SYS_munmap, (long)m.rings, (long)m.rings_len, 0, 0, 0, 0);
		return;
	}
	m.sqes = (uintptr_t)at;
	m.own = true;
	ring_install((int)fd, &m);
}

/* @len bytes at @at of ring @m's memory. */
static inline bool ring_read(const struct ring_map *m, void *dst, uintptr_t at, size_t len)
{
	if (!m->own)
		return ucma_preload_read_user(dst, (const void *)at, len);
	memcpy(dst, (const void *)at, len);
	return true;
}

/*
 * The entries io_uring_enter(@to_submit) of ring @m will take, as the
 * kernel takes them (io_submit_sqes(): from its cached SQ head, which it
 * writes to the ring's head at the end of each submission, up to the
 * tail, at most to_submit and sq_entries of them, through the SQ array
 * unless NO_SQARRAY, an index past the array dropped; 128-byte entries
 * at twice the index).  With IORING_SETUP_SQE_MIXED a 128-byte entry
 * takes two slots but counts once in to_submit, so every pending slot is
 * read.  1: done; 0: a buffer stays lent (errno); -1: not known here.
 */
static int ring_scan(const struct ring_map *m, unsigned to_submit, struct scan *sc)
{
	unsigned shift = (m->flags & SETUP_SQE128) ? 7 : 6, mask = m->entries - 1;
	uint32_t head, tail, n;

	if (!ring_read(m, &head, m->rings + m->head, sizeof(head)) ||
	    !ring_read(m, &tail, m->rings + m->tail, sizeof(tail)))
		return -1;
	n = tail - head;
	/* Nothing pending with something to submit: likely not the ring of
	 * this number any more (closed unseen, the number reused), so the
	 * kernel's listing decides. */
	if (!n)
		return -1;
	if (n > m->entries)
		n = m->entries;
	if (n > to_submit && !(m->flags & SETUP_SQE_MIXED))
		n = to_submit;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t idx = (head + i) & mask;
		struct sqe s;

		if (!(m->flags & SETUP_NO_SQARRAY)) {
			if (!ring_read(m, &idx, m->rings + m->array + (uintptr_t)idx * 4, sizeof(idx)))
				return -1;
			if (idx >= m->entries)
				continue;
		}
		if (!ring_read(m, &s, m->sqes + ((uintptr_t)idx << shift), sizeof(s)))
			return -1;
		sc->at = (const char *)(m->sqes + ((uintptr_t)idx << shift));
		sc->big = shift == 7;
		if (!sqe_unlend(&s, sc))
			return 0;
	}
	return 1;
}

/* io_uring_enter(@fd, @to_submit, ..., @flags): false with errno when a
 * buffer of what it submits stays lent. */
static bool enter_unlend(long fd, unsigned to_submit, unsigned flags)
{
	struct scan sc = { false };
	struct ring_slot *s;
	struct ring_map m;

	if (!to_submit || !guard_wanted())
		return true;
	if (flags & ENTER_REGISTERED_RING)
		return unlend_everything(&sc);
	if (fd < 0 || fd > INT_MAX)
		return true;	/* the kernel's EBADF */
	s = ring_get((int)fd, &m);
	if (s) {
		int rc = ring_scan(&m, to_submit, &sc);

		ring_put(s, &m);
		if (rc >= 0) {
			ucma_count(UCMA_STAT_LEND_IOURING_ENTER_RING, 1);
			return rc;
		}
	}
	ucma_count(UCMA_STAT_LEND_IOURING_ENTER_FDINFO, 1);
	return ring_fd_unlend((int)fd);
}

long ucma_preload_iouring_enter(const long a[6])
{
	if (!enter_unlend(a[0], (unsigned)a[1], (unsigned)a[3]))
		return -EBUSY;
	return ucma_raw_syscall6(SYS_io_uring_enter, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* ------------------------------------------------------------------------ */
/* liburing's functions                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Each reads the entries it may submit, then calls liburing's own
 * function; -EBUSY when a buffer stays lent (liburing returns -errno).
 */
#define NEXT_CALL(type, name, ...)                                         \
	do {                                                               \
		static void *cache;                                        \
		type fn = (type)ucma_preload_next(&cache, name);           \
		return fn ? fn(__VA_ARGS__) : -ENOSYS;                     \
	} while (0)

#define RING_GUARD(ring)                        \
	do {                                    \
		if (!uring_unlend(ring))        \
			return -EBUSY;          \
	} while (0)

struct io_uring;
struct io_uring_cqe;
struct __kernel_timespec;

typedef int (*submit_fn)(struct io_uring *);
typedef int (*submit_wait_fn)(struct io_uring *, unsigned);
typedef int (*submit_timeout_fn)(struct io_uring *, struct io_uring_cqe **, unsigned,
				 struct __kernel_timespec *, sigset_t *);
typedef int (*submit_min_timeout_fn)(struct io_uring *, struct io_uring_cqe **, unsigned,
				     struct __kernel_timespec *, unsigned, sigset_t *);
typedef int (*submit_reg_fn)(struct io_uring *, struct io_uring_cqe **, unsigned, int);
typedef int (*get_cqe_fn)(struct io_uring *, struct io_uring_cqe **, unsigned, unsigned,
			  sigset_t *);
typedef int (*wait_timeout_fn)(struct io_uring *, struct io_uring_cqe **,
			       struct __kernel_timespec *);
typedef int (*enter_fn)(unsigned, unsigned, unsigned, unsigned, sigset_t *);
typedef int (*enter2_fn)(unsigned, unsigned, unsigned, unsigned, sigset_t *, size_t);

/* liburing.h's declarations (see longterm.c for why it is not relied on). */
int io_uring_submit(struct io_uring *ring);
int io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr);
int io_uring_submit_and_get_events(struct io_uring *ring);
int io_uring_submit_and_wait_timeout(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
				     unsigned wait_nr, struct __kernel_timespec *ts,
				     sigset_t *sigmask);
int io_uring_submit_and_wait_min_timeout(struct io_uring *ring,
					 struct io_uring_cqe **cqe_ptr, unsigned wait_nr,
					 struct __kernel_timespec *ts, unsigned min_wait,
					 sigset_t *sigmask);
int io_uring_submit_and_wait_reg(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
				 unsigned wait_nr, int reg_index);
int __io_uring_get_cqe(struct io_uring *ring, struct io_uring_cqe **cqe_ptr, unsigned submit,
		       unsigned wait_nr, sigset_t *sigmask);
int io_uring_wait_cqes(struct io_uring *ring, struct io_uring_cqe **cqe_ptr, unsigned wait_nr,
		       struct __kernel_timespec *ts, sigset_t *sigmask);
int io_uring_wait_cqe_timeout(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
			      struct __kernel_timespec *ts);
int io_uring_enter(unsigned fd, unsigned to_submit, unsigned min_complete, unsigned flags,
		   sigset_t *sig);
int io_uring_enter2(unsigned fd, unsigned to_submit, unsigned min_complete, unsigned flags,
		    sigset_t *sig, size_t sz);

IOURING_EXPORT int io_uring_submit(struct io_uring *ring)
{
	RING_GUARD(ring);
	NEXT_CALL(submit_fn, "io_uring_submit", ring);
}

IOURING_EXPORT int io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
	RING_GUARD(ring);
	NEXT_CALL(submit_wait_fn, "io_uring_submit_and_wait", ring, wait_nr);
}

IOURING_EXPORT int io_uring_submit_and_get_events(struct io_uring *ring)
{
	RING_GUARD(ring);
	NEXT_CALL(submit_fn, "io_uring_submit_and_get_events", ring);
}

IOURING_EXPORT int io_uring_submit_and_wait_timeout(struct io_uring *ring,
						    struct io_uring_cqe **cqe_ptr,
						    unsigned wait_nr,
						    struct __kernel_timespec *ts,
						    sigset_t *sigmask)
{
	RING_GUARD(ring);
	NEXT_CALL(submit_timeout_fn, "io_uring_submit_and_wait_timeout", ring, cqe_ptr, wait_nr,
		  ts, sigmask);
}

/* liburing 2.8. */
IOURING_EXPORT int io_uring_submit_and_wait_min_timeout(struct io_uring *ring,
							struct io_uring_cqe **cqe_ptr,
							unsigned wait_nr,
							struct __kernel_timespec *ts,
							unsigned min_wait, sigset_t *sigmask)
{
	RING_GUARD(ring);
	NEXT_CALL(submit_min_timeout_fn, "io_uring_submit_and_wait_min_timeout", ring, cqe_ptr,
		  wait_nr, ts, min_wait, sigmask);
}

IOURING_EXPORT int io_uring_submit_and_wait_reg(struct io_uring *ring,
						struct io_uring_cqe **cqe_ptr, unsigned wait_nr,
						int reg_index)
{
	RING_GUARD(ring);
	NEXT_CALL(submit_reg_fn, "io_uring_submit_and_wait_reg", ring, cqe_ptr, wait_nr,
		  reg_index);
}

/* What liburing's inline io_uring_wait_cqe() and its kin call: it submits
 * @submit entries already flushed to the kernel's tail. */
IOURING_EXPORT int __io_uring_get_cqe(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
				      unsigned submit, unsigned wait_nr, sigset_t *sigmask)
{
	if (submit)
		RING_GUARD(ring);
	NEXT_CALL(get_cqe_fn, "__io_uring_get_cqe", ring, cqe_ptr, submit, wait_nr, sigmask);
}

/* With a timeout and a kernel without IORING_FEAT_EXT_ARG, these queue a
 * timeout entry and submit everything prepared with it. */
IOURING_EXPORT int io_uring_wait_cqes(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
				      unsigned wait_nr, struct __kernel_timespec *ts,
				      sigset_t *sigmask)
{
	if (ts)
		RING_GUARD(ring);
	NEXT_CALL(submit_timeout_fn, "io_uring_wait_cqes", ring, cqe_ptr, wait_nr, ts, sigmask);
}

IOURING_EXPORT int io_uring_wait_cqe_timeout(struct io_uring *ring,
					     struct io_uring_cqe **cqe_ptr,
					     struct __kernel_timespec *ts)
{
	if (ts)
		RING_GUARD(ring);
	NEXT_CALL(wait_timeout_fn, "io_uring_wait_cqe_timeout", ring, cqe_ptr, ts);
}

/* liburing 2.3's wrappers of the system call: only a descriptor. */
IOURING_EXPORT int io_uring_enter(unsigned fd, unsigned to_submit, unsigned min_complete,
				  unsigned flags, sigset_t *sig)
{
	if (!enter_unlend(fd, to_submit, flags))
		return -EBUSY;
	NEXT_CALL(enter_fn, "io_uring_enter", fd, to_submit, min_complete, flags, sig);
}

IOURING_EXPORT int io_uring_enter2(unsigned fd, unsigned to_submit, unsigned min_complete,
				   unsigned flags, sigset_t *sig, size_t sz)
{
	if (!enter_unlend(fd, to_submit, flags))
		return -EBUSY;
	NEXT_CALL(enter2_fn, "io_uring_enter2", fd, to_submit, min_complete, flags, sig, sz);
}

#endif /* __x86_64__ || __aarch64__ */
