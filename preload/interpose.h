/*
 * interpose.h - what the preloaded interposers share (preload/longterm.c
 * defines most of these; futex_guard.c, lend_guard.c, dio_guard.c,
 * zc_guard.c, device_guard.c and iouring_guard.c the calls that
 * longterm.c's syscall() hands to them).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_PRELOAD_INTERPOSE_H
#define UCMA_PRELOAD_INTERPOSE_H

#include <stdbool.h>
#include <stddef.h>

#define UCMA_PRELOAD_HIDDEN __attribute__((visibility("hidden")))

/* The futex2 calls by number, the same on x86-64 and AArch64 (Linux 5.16
 * and 6.7; newer than some headers). */
#define UCMA_SYS_futex_waitv	449
#define UCMA_SYS_futex_wake	454
#define UCMA_SYS_futex_wait	455
#define UCMA_SYS_futex_requeue	456

/*
 * ucma_unlend() of [@addr, @addr + @len) for a call about to be made on
 * it: false with errno EAGAIN when a pageblock stays lent (the call is
 * refused).  A range that wraps is the kernel's to refuse, with its own
 * error: true (longterm.c).  ucma_unlend() itself looks at nothing while
 * nothing is lent and takes back only the borrowed pageblocks.
 */
UCMA_PRELOAD_HIDDEN bool ucma_preload_unlend(const void *addr, size_t len);
/* The same, failing with errno @err: the answer the refused call's
 * callers are ready for. */
UCMA_PRELOAD_HIDDEN bool ucma_preload_unlend_or(const void *addr, size_t len, int err);

/*
 * The next definition of @name after this library's (the C library's or
 * liburing's), found with dlsym(RTLD_NEXT) on first use and kept in
 * *@cache; NULL when there is none.  Not on the library's start-up path
 * (the first malloc may come before the C library's constructors).
 */
UCMA_PRELOAD_HIDDEN void *ucma_preload_next(void **cache, const char *name);

/* ucma_preload_next() for the interposer of @name, its cache in
 * next_<name>; and what the interposer does when there is none. */
#define UCMA_NEXT(type, name) ((type)ucma_preload_next(&next_##name, #name))
#define UCMA_NO_NEXT()          \
	do {                    \
		errno = ENOSYS; \
		return -1;      \
	} while (0)

/*
 * Copy @len bytes of the program's memory at @src to @dst as the kernel
 * would read them: false with EFAULT when the address is bad (the kernel
 * then refuses the call itself, so the caller forwards it), never a crash.
 */
UCMA_PRELOAD_HIDDEN bool ucma_preload_read_user(void *dst, const void *src, size_t len);

/* How an unlend of the program's buffers ended. */
enum unlend_result {
	UNLEND_DONE,	/* nothing of them is lent now: forward the call */
	UNLEND_BAD,	/* the description cannot be read: forward, the kernel says EFAULT */
	UNLEND_FAILED	/* a pageblock stays lent (errno set): refuse the call */
};

struct iovec;

/* Take back the buffers of @nr iovecs at @uiov, the program's memory
 * (longterm.c). */
UCMA_PRELOAD_HIDDEN enum unlend_result ucma_preload_unlend_iovecs(const struct iovec *uiov,
								  unsigned long nr);

/*
 * syscall() of a futex call (SYS_futex, futex_waitv, futex_wait,
 * futex_wake, futex_requeue) with arguments @a: the words it names that
 * are not process-private leave the frames lent to the heap first.
 * Returns 0 (also for any other call @nr), or -errno when one stays lent
 * (the call is then refused).
 */
UCMA_PRELOAD_HIDDEN long ucma_preload_futex_unlend(long nr, const long a[6]);

/*
 * syscall() of SYS_close, SYS_close_range, SYS_dup2 or SYS_dup3: made as
 * the preloaded close(), close_range(), dup2() and dup3() make them, kept
 * off the library's descriptors (lend_guard.c).  True with the result
 * (-1 and errno on failure) in *@ret; false for any other call @nr.
 */
UCMA_PRELOAD_HIDDEN bool ucma_preload_guard_syscall(long nr, const long a[6], long *ret);

/*
 * syscall() of a read or write call (read, write, pread64, pwrite64,
 * readv, writev, preadv, pwritev, preadv2, pwritev2), io_submit or fcntl: its
 * buffers leave the lent frames first when the I/O is direct
 * (dio_guard.c).  True with the result (-1 and errno on failure) in
 * *@ret; false for any other call @nr.
 */
UCMA_PRELOAD_HIDDEN bool ucma_preload_dio_syscall(long nr, const long a[6], long *ret);

/* The end of those syscall() hands-offs: the call @nr with @a made (when
 * its buffers are @good) or refused with -1 (errno set), in *@ret; true. */
UCMA_PRELOAD_HIDDEN bool ucma_preload_made(bool good, long nr, const long a[6], long *ret);

/*
 * syscall() of a send call (sendto, sendmsg, sendmmsg) or vmsplice: the
 * buffers of a zero-copy send (MSG_ZEROCOPY) and of vmsplice leave the
 * lent frames first (zc_guard.c).  True with the result (-1 and errno on
 * failure) in *@ret; false for any other call @nr.
 */
UCMA_PRELOAD_HIDDEN bool ucma_preload_zc_syscall(long nr, const long a[6], long *ret);

/*
 * syscall() of ioctl or setsockopt: the memory that VFIO_IOMMU_MAP_DMA,
 * IOMMU_IOAS_MAP and XDP_UMEM_REG hand to a device leaves the lent frames
 * first (device_guard.c).  True with the result (-1 and errno on failure)
 * in *@ret; false for any other call @nr.
 */
UCMA_PRELOAD_HIDDEN bool ucma_preload_device_syscall(long nr, const long a[6], long *ret);

/* Descriptors @first to @last were closed or replaced: what dio_guard.c
 * knew of their status flags no longer holds, nor what iouring_guard.c
 * kept of a ring there. */
UCMA_PRELOAD_HIDDEN void ucma_preload_dio_forget(unsigned first, unsigned last);

/* Is I/O on @fd direct (O_DIRECT in its status flags)?  dio_guard.c's
 * cached answer; false for a bad descriptor. */
UCMA_PRELOAD_HIDDEN bool ucma_preload_fd_direct(int fd);

/*
 * syscall(SYS_io_uring_enter) with arguments @a: the buffers of the
 * direct reads and writes it submits leave the lent frames first
 * (iouring_guard.c).  The kernel's result, -EBUSY when one stays lent.
 */
UCMA_PRELOAD_HIDDEN long ucma_preload_iouring_enter(const long a[6]);

/*
 * io_uring_setup(2) returned ring descriptor @fd with the parameters at
 * @uparams (as the kernel filled them in): iouring_guard.c keeps where
 * the ring's SQ head, tail, array and entries are, so that
 * io_uring_enter(2) on @fd reads them without the fdinfo listing.
 */
UCMA_PRELOAD_HIDDEN void ucma_preload_iouring_setup(long fd, const void *uparams);

/* Descriptors @first to @last were closed or replaced, or their rings
 * resized (0 to UINT_MAX: any ring): what iouring_guard.c kept of the
 * rings there no longer holds (ucma_preload_dio_forget() says it too). */
UCMA_PRELOAD_HIDDEN void ucma_preload_iouring_forget(unsigned first, unsigned last);

#endif /* UCMA_PRELOAD_INTERPOSE_H */
