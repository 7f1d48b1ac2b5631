/*
 * dio_guard.c - direct I/O on malloc memory kept off the CMA frames lent
 * to the heap.
 *
 * I/O on a descriptor opened with O_DIRECT, and Linux AIO, pins the
 * program's pages for the transfer (get_user_pages() at submission) and
 * lets the device read or write the memory behind them.  A take-back
 * (lend.c) copies a lent pageblock to memory of its own and gives the
 * frame to ucma_alloc(); userfaultfd write-protection holds the program's
 * threads, not a device.  So a read in flight lands in the frame, now
 * someone's contiguous buffer, and the heap keeps what was there before;
 * a write in flight sends that buffer's data instead of the heap's.  Both
 * were measured: hundreds of 1 MiB reads and writes of 28000 per run went
 * wrong, with pread()/pwrite(), io_submit() and io_uring alike.  The
 * kernel's own CMA migration waits for such short pins (it does not move
 * a page with references it cannot account for); a take-back cannot see
 * them.  So the buffer's pageblocks are taken back before the call, as
 * for a long-term pin (longterm.c): a pageblock holding live blocks is
 * never lent again, so later I/O into the same buffer costs nothing more.
 *
 * Covered: read, write, pread(64), pwrite(64), readv, writev, preadv(64),
 * pwritev(64), preadv2 and pwritev2 (64v2) on a descriptor whose status
 * flags have O_DIRECT; io_submit() (libaio's, and syscall(SYS_io_submit)):
 * the buffers of every read and write, vectored or not; POSIX AIO's
 * aio_read(64), aio_write(64) and lio_listio(64) on such a descriptor
 * (the C library makes their transfers with internal calls, seen nowhere
 * else); and syscall() of these by number (longterm.c's syscall() hands
 * them here).  When a
 * pageblock stays lent, the call fails with EAGAIN and does nothing.
 *
 * Cost: while nothing is lent, one load before the C library's function.
 * Otherwise a look at the borrowed state of each 2 MiB of the buffer, and
 * for a buffer on a lent pageblock a look at what the descriptor is
 * (fcntl(F_GETFL) the first time, see dio_kind below).
 *
 * The I/O itself is the C library's function (so that the blocking calls
 * stay cancellation points): read, write, pread64 and pwrite64 through the
 * C library's exported aliases (__read and its kin: no dlsym() needed, as
 * the library's own reads of /proc files come here too, at start-up), the
 * others through dlsym(RTLD_NEXT) on first use, which the library never
 * makes.  The library's own memory calls never come here (src/os.c).
 *
 * io_uring reads and writes on O_DIRECT files are iouring_guard.c's (it
 * asks ucma_preload_fd_direct() here).
 *
 * Zero-copy sends (MSG_ZEROCOPY) and vmsplice() are zc_guard.c's.
 *
 * Not seen (ucma_unlend(3)): a driver's ioctl(); calls made with the
 * system call instruction; stdio (fread(), fwrite() and their kin) on a
 * stream over an O_DIRECT descriptor, whose transfers the C library also
 * makes with internal calls.
 *
 * Locking: none here; ucma_unlend() takes what it needs.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdbool.h>

#include "interpose.h"

#if defined(__x86_64__) || defined(__aarch64__)

#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ucma.h"
#include "internal.h"
#include "lend.h"
#include "raw_syscall.h"
#include "interpose.h"

#define DIO_EXPORT __attribute__((visibility("default")))

/* The C library's read, write, pread64 and pwrite64 under their exported
 * aliases. */
ssize_t __read(int fd, void *buf, size_t len);
ssize_t __write(int fd, const void *buf, size_t len);
ssize_t __pread64(int fd, void *buf, size_t len, off_t off);
ssize_t __pwrite64(int fd, const void *buf, size_t len, off_t off);

/* Might @len bytes at @buf be on a lent frame?  The fast path.  (An
 * address, not a pointer: read()'s buffer is write-only to the compiler,
 * and a const pointer to it would look like a read of it.) */
static inline bool maybe_lent(uintptr_t buf, size_t len)
{
	return ucma_lend_any_borrowed() && ucma_lend_range_borrowed((const void *)buf, len);
}

/*
 * What fcntl(F_GETFL) said of each descriptor number since it was last
 * closed, replaced or given new status flags: 0 not asked, DIO_BUFFERED or
 * DIO_DIRECT.  Asking is a system call, a second one beside the read
 * itself.  The answer is forgotten where a number changes
 * meaning, in the calls this library sees: close(), close_range(),
 * dup2() and dup3() (lend_guard.c), fcntl() with F_SETFL and F_DUPFD
 * (below), and io_uring CLOSE entries (iouring_guard.c).  The guards look
 * at nothing while nothing is lent, so an io_uring CLOSE then goes unseen:
 * every answer is forgotten when lending starts again (ucma_lend_epoch).
 * A number closed with the system call instruction and opened again with
 * other flags keeps its old answer; a race between two threads over one
 * number is the program's.
 */
#define DIO_FDS		65536
#define DIO_BUFFERED	1
#define DIO_DIRECT	2
static _Atomic uint8_t dio_kind[DIO_FDS];
static _Atomic uint32_t dio_epoch;	/* ucma_lend_epoch of the answers kept */
static _Atomic unsigned dio_top;	/* above every number with an answer */

static void dio_kind_forget(unsigned first, unsigned last);

bool ucma_preload_fd_direct(int fd)
{
	uint32_t epoch = atomic_load_explicit(&ucma_lend_epoch, memory_order_acquire);
	long fl;

	if (UCMA_UNLIKELY(atomic_load_explicit(&dio_epoch, memory_order_relaxed) != epoch)) {
		unsigned top = atomic_load_explicit(&dio_top, memory_order_relaxed);

		if (top)
			dio_kind_forget(0, top - 1);
		atomic_store_explicit(&dio_epoch, epoch, memory_order_relaxed);
	}
	if ((unsigned)fd < DIO_FDS) {
		uint8_t k = atomic_load_explicit(&dio_kind[fd], memory_order_relaxed);

		if (k)
			return k == DIO_DIRECT;
	}
	fl = ucma_raw_syscall6(SYS_fcntl, fd, F_GETFL, 0, 0, 0, 0);
	if (fl < 0)
		return false;
	if ((unsigned)fd < DIO_FDS) {
		atomic_store_explicit(&dio_kind[fd], (fl & O_DIRECT) ? DIO_DIRECT : DIO_BUFFERED,
				      memory_order_relaxed);
		unsigned top = atomic_load_explicit(&dio_top, memory_order_relaxed);

		while ((unsigned)fd >= top &&
		       !atomic_compare_exchange_weak_explicit(&dio_top, &top, (unsigned)fd + 1,
							      memory_order_relaxed, memory_order_relaxed))
			;
	}
	return fl & O_DIRECT;
}

static void dio_kind_forget(unsigned first, unsigned last)
{
	if (last >= DIO_FDS)
		last = DIO_FDS - 1;
	for (unsigned fd = first; fd <= last; fd++)
		atomic_store_explicit(&dio_kind[fd], 0, memory_order_relaxed);
}

/* Closed or replaced: a ring there is gone too (iouring_guard.c). */
void ucma_preload_dio_forget(unsigned first, unsigned last)
{
	dio_kind_forget(first, last);
	ucma_preload_iouring_forget(first, last);
}

/* @buf for direct I/O on @fd: off the lent frames.  False with errno
 * EAGAIN when a pageblock stays lent. */
static bool unlend_buffer(int fd, uintptr_t buf, size_t len)
{
	return !maybe_lent(buf, len) || !ucma_preload_fd_direct(fd) || ucma_preload_unlend((const void *)buf, len);
}

/* The same for @n iovecs at @uiov (the program's memory, read as the
 * kernel would: an unreadable array is the kernel's EFAULT to give). */
static bool unlend_iov(int fd, const struct iovec *uiov, long n)
{
	struct iovec v[16];

	if (!ucma_lend_any_borrowed() || n <= 0)
		return true;
	for (long i = 0; i < n;) {
		long k = n - i < 16 ? n - i : 16;

		if (!ucma_preload_read_user(v, uiov + i, (size_t)k * sizeof(v[0])))
			return true;
		for (long j = 0; j < k; j++)
			if (!unlend_buffer(fd, (uintptr_t)v[j].iov_base, v[j].iov_len))
				return false;
		i += k;
	}
	return true;
}

/* The buffers of @nr iocbs at @uiocbpp (io_submit()). */
static bool unlend_iocbs(long nr, struct iocb *const *uiocbpp)
{
	if (!ucma_lend_any_borrowed())
		return true;
	for (long i = 0; i < nr; i++) {
		struct iocb *up, cb;
		bool good = true;

		if (!ucma_preload_read_user(&up, uiocbpp + i, sizeof(up)) ||
		    !ucma_preload_read_user(&cb, up, sizeof(cb)))
			return true;
		switch (cb.aio_lio_opcode) {
		case IOCB_CMD_PREAD:
		case IOCB_CMD_PWRITE:
			good = unlend_buffer((int)cb.aio_fildes, (uintptr_t)cb.aio_buf,
					     (size_t)cb.aio_nbytes);
			break;
		case IOCB_CMD_PREADV:
		case IOCB_CMD_PWRITEV:
			good = unlend_iov((int)cb.aio_fildes,
					  (const struct iovec *)(uintptr_t)cb.aio_buf,
					  (long)cb.aio_nbytes);
			break;
		default:
			break;
		}
		if (!good)
			return false;
	}
	return true;
}

/* After fcntl(@fd, @cmd) returned @ret: forget what changed. */
static void fcntl_done(int fd, int cmd, long ret)
{
	if (cmd == F_SETFL)
		dio_kind_forget((unsigned)fd, (unsigned)fd);	/* the same file */
	else if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && ret >= 0)
		ucma_preload_dio_forget((unsigned)ret, (unsigned)ret);
}

bool ucma_preload_dio_syscall(long nr, const long a[6], long *ret)
{
	bool good;

	switch (nr) {
	case SYS_read:
	case SYS_write:
	case SYS_pread64:
	case SYS_pwrite64:
		good = unlend_buffer((int)a[0], (uintptr_t)a[1], (size_t)a[2]);
		break;
	case SYS_readv:
	case SYS_writev:
	case SYS_preadv:
	case SYS_pwritev:
	case SYS_preadv2:
	case SYS_pwritev2:
		good = unlend_iov((int)a[0], (const struct iovec *)a[1], a[2]);
		break;
	case SYS_io_submit:
		good = unlend_iocbs(a[1], (struct iocb *const *)a[2]);
		break;
	case SYS_fcntl:
		*ret = ucma_raw_result(ucma_raw_syscall6(nr, a[0], a[1], a[2], 0, 0, 0));
		if (*ret >= 0)
			fcntl_done((int)a[0], (int)a[1], *ret);
		return true;
	default:
		return false;
	}
	return ucma_preload_made(good, nr, a, ret);
}

/* ------------------------------------------------------------------------ */
/* The interposed functions                                                  */
/* ------------------------------------------------------------------------ */

DIO_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_buffer(fd, (uintptr_t)buf, len))
		return -1;
	return __read(fd, buf, len);
}

DIO_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_buffer(fd, (uintptr_t)buf, len))
		return -1;
	return __write(fd, buf, len);
}

DIO_EXPORT ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_buffer(fd, (uintptr_t)buf, len))
		return -1;
	return __pread64(fd, buf, len, off);
}

DIO_EXPORT ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_buffer(fd, (uintptr_t)buf, len))
		return -1;
	return __pwrite64(fd, buf, len, off);
}

/* off_t is 64 bits here (x86-64, AArch64): the 64 names are the same calls. */
DIO_EXPORT ssize_t pread64(int fd, void *buf, size_t len, off_t off)
	__attribute__((alias("pread")));
DIO_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
	__attribute__((alias("pwrite")));


typedef ssize_t (*iov_fn)(int, const struct iovec *, int);
typedef ssize_t (*piov_fn)(int, const struct iovec *, int, off_t);
typedef ssize_t (*piov2_fn)(int, const struct iovec *, int, off_t, int);

static void *next_readv, *next_writev, *next_preadv, *next_pwritev, *next_preadv2,
	*next_pwritev2, *next_io_submit, *next_aio_read, *next_aio_write, *next_lio_listio,
	*next_aio_read64, *next_aio_write64, *next_lio_listio64;

/* Looked up at load, once the C library is ready: a read or write made
 * first in a signal handler then calls no dlsym(), which is not
 * async-signal-safe.  One still missing (libaio's io_submit(), loaded
 * later) is looked up on first use. */
__attribute__((constructor)) static void dio_resolve(void)
{
	(void)ucma_preload_next(&next_readv, "readv");
	(void)ucma_preload_next(&next_writev, "writev");
	(void)ucma_preload_next(&next_preadv, "preadv");
	(void)ucma_preload_next(&next_pwritev, "pwritev");
	(void)ucma_preload_next(&next_preadv2, "preadv2");
	(void)ucma_preload_next(&next_pwritev2, "pwritev2");
	(void)ucma_preload_next(&next_io_submit, "io_submit");
	(void)ucma_preload_next(&next_aio_read, "aio_read");
	(void)ucma_preload_next(&next_aio_write, "aio_write");
	(void)ucma_preload_next(&next_lio_listio, "lio_listio");
	(void)ucma_preload_next(&next_aio_read64, "aio_read64");
	(void)ucma_preload_next(&next_aio_write64, "aio_write64");
	(void)ucma_preload_next(&next_lio_listio64, "lio_listio64");
}

DIO_EXPORT ssize_t readv(int fd, const struct iovec *iov, int n)
{
	iov_fn fn = UCMA_NEXT(iov_fn, readv);

	if (!fn)
		UCMA_NO_NEXT();
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_iov(fd, iov, n))
		return -1;
	return fn(fd, iov, n);
}

DIO_EXPORT ssize_t writev(int fd, const struct iovec *iov, int n)
{
	iov_fn fn = UCMA_NEXT(iov_fn, writev);

	if (!fn)
		UCMA_NO_NEXT();
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_iov(fd, iov, n))
		return -1;
	return fn(fd, iov, n);
}

DIO_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int n, off_t off)
{
	piov_fn fn = UCMA_NEXT(piov_fn, preadv);

	if (!fn)
		UCMA_NO_NEXT();
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_iov(fd, iov, n))
		return -1;
	return fn(fd, iov, n, off);
}

DIO_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
	piov_fn fn = UCMA_NEXT(piov_fn, pwritev);

	if (!fn)
		UCMA_NO_NEXT();
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_iov(fd, iov, n))
		return -1;
	return fn(fd, iov, n, off);
}

DIO_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
	piov2_fn fn = UCMA_NEXT(piov2_fn, preadv2);

	if (!fn)
		UCMA_NO_NEXT();
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_iov(fd, iov, n))
		return -1;
	return fn(fd, iov, n, off, flags);
}

DIO_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
	piov2_fn fn = UCMA_NEXT(piov2_fn, pwritev2);

	if (!fn)
		UCMA_NO_NEXT();
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_iov(fd, iov, n))
		return -1;
	return fn(fd, iov, n, off, flags);
}

DIO_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int n, off_t off)
	__attribute__((alias("preadv")));
DIO_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int n, off_t off)
	__attribute__((alias("pwritev")));
DIO_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int n, off_t off, int flags)
	__attribute__((alias("preadv2")));
DIO_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int n, off_t off, int flags)
	__attribute__((alias("pwritev2")));

/*
 * fcntl(): the C library's (it is a cancellation point for the waiting
 * locks, and it turns F_GETOWN's negative owners into results), then the
 * cache above told of F_SETFL and of new numbers.  Like the C library's,
 * it reads one argument whatever the command.
 */
typedef int (*fcntl_fn)(int, int, ...);

static void *next_fcntl64;

static int fcntl_call(int fd, int cmd, long arg)
{
	fcntl_fn fn = UCMA_NEXT(fcntl_fn, fcntl64);
	long ret;

	ret = fn ? fn(fd, cmd, arg)
		 : ucma_raw_result(ucma_raw_syscall6(SYS_fcntl, fd, cmd, arg, 0, 0, 0));
	if (ret >= 0)
		fcntl_done(fd, cmd, ret);
	return (int)ret;
}

DIO_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	return fcntl_call(fd, cmd, arg);
}

DIO_EXPORT int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

/*
 * libaio's io_submit(): its struct iocb is the kernel's.  It returns the
 * kernel's result, -errno on failure (libaio does not use errno).
 */
typedef int (*io_submit_fn)(aio_context_t, long, struct iocb **);
int io_submit(aio_context_t ctx, long nr, struct iocb **iocbpp);

DIO_EXPORT int io_submit(aio_context_t ctx, long nr, struct iocb **iocbpp)
{
	io_submit_fn fn = UCMA_NEXT(io_submit_fn, io_submit);

	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_iocbs(nr, iocbpp))
		return -EAGAIN;
	if (!fn)
		return (int)ucma_raw_syscall6(SYS_io_submit, (long)ctx, nr, (long)iocbpp, 0, 0, 0);
	return fn(ctx, nr, iocbpp);
}

/*
 * POSIX AIO (aio_read(3), aio_write(3), lio_listio(3)): the C library's
 * threads make the transfers with its own internal pread() and pwrite(),
 * which nothing interposes, so the buffers are taken back here, at
 * submission.  A request whose buffer stays lent is not queued: -1 with
 * EAGAIN, a documented error of each.  struct aiocb64 is struct aiocb
 * here (64-bit off_t), so the 64 names are checked alike.
 */
_Static_assert(sizeof(struct aiocb64) == sizeof(struct aiocb) &&
		       offsetof(struct aiocb64, aio_buf) == offsetof(struct aiocb, aio_buf) &&
		       offsetof(struct aiocb64, aio_nbytes) == offsetof(struct aiocb, aio_nbytes),
	       "struct aiocb64 is struct aiocb on a 64-bit system");

/* The buffer of the request at @ucb (the program's memory: unreadable,
 * the C library's EFAULT or crash to give, as without this library). */
static bool unlend_aiocb(const void *ucb)
{
	struct aiocb cb;

	if (!ucb || !ucma_preload_read_user(&cb, ucb, sizeof(cb)))
		return true;
	return unlend_buffer(cb.aio_fildes, (uintptr_t)cb.aio_buf, cb.aio_nbytes);
}

/* lio_listio(): the buffers of the @nent requests at @list. */
static bool unlend_aiocb_list(const void *list, int nent)
{
	for (int i = 0; list && i < nent; i++) {
		const void *ucb;

		if (!ucma_preload_read_user(&ucb, (const char *)list + (size_t)i * sizeof(ucb),
					    sizeof(ucb)))
			break;
		if (ucb && !unlend_aiocb(ucb))
			return false;
	}
	return true;
}

#define AIO_GUARD(name, cbtype)                                                         \
	DIO_EXPORT int name(cbtype *cb)                                                 \
	{                                                                               \
		int (*fn)(cbtype *) = UCMA_NEXT(int (*)(cbtype *), name);               \
                                                                                        \
		if (!fn)                                                                \
			UCMA_NO_NEXT();                                                 \
		if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_aiocb(cb))       \
			return -1;                                                      \
		return fn(cb);                                                          \
	}
#define LIO_GUARD(name, cbtype)                                                         \
	DIO_EXPORT int name(int mode, cbtype *const list[], int nent, struct sigevent *sig) \
	{                                                                               \
		int (*fn)(int, cbtype *const[], int, struct sigevent *) =               \
			UCMA_NEXT(int (*)(int, cbtype *const[], int, struct sigevent *), name); \
                                                                                        \
		if (!fn)                                                                \
			UCMA_NO_NEXT();                                                 \
		if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) &&                          \
		    !unlend_aiocb_list(list, nent))                                     \
			return -1;                                                      \
		return fn(mode, list, nent, sig);                                       \
	}

AIO_GUARD(aio_read, struct aiocb)
AIO_GUARD(aio_write, struct aiocb)
AIO_GUARD(aio_read64, struct aiocb64)
AIO_GUARD(aio_write64, struct aiocb64)
LIO_GUARD(lio_listio, struct aiocb)
LIO_GUARD(lio_listio64, struct aiocb64)

#else /* !(__x86_64__ || __aarch64__) */

/* Nothing is interposed here (see longterm.c): nothing to forget. */
void ucma_preload_dio_forget(unsigned first, unsigned last)
{
	(void)first;
	(void)last;
}

#endif /* __x86_64__ || __aarch64__ */
