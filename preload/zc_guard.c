/*
 * zc_guard.c - zero-copy sends and vmsplice() of malloc memory kept off
 * the CMA frames lent to the heap.
 *
 * A send with MSG_ZEROCOPY on a socket with SO_ZEROCOPY set copies
 * nothing: the kernel pins the program's pages and the network device
 * reads them, until the completion that the socket's error queue reports,
 * long after the call returned.  vmsplice() puts references to the
 * program's pages in a pipe; whoever reads the pipe, or splices it on to
 * a file or a socket, reads the pages later.  A take-back (lend.c) copies
 * a lent pageblock to memory of its own and gives the frame to
 * ucma_alloc(): the device, or the reader of the pipe, would then send
 * someone's contiguous buffer instead of what the program sent.  The
 * kernel's own CMA migration waits for such pins; a take-back cannot see
 * them.  So the buffers are taken back before the call, as for a
 * long-term pin (longterm.c): a pageblock holding live blocks is never
 * lent again, so the next send from the same buffer costs only the look.
 *
 * Covered: send(), sendto(), sendmsg() and sendmmsg() with MSG_ZEROCOPY
 * in their flags, and vmsplice(), by name and by number through syscall()
 * (longterm.c hands them here).  Whether the socket has SO_ZEROCOPY is
 * not asked (a system call on every send): without it the kernel copies,
 * and the take-back cost only the lending of the buffer's pageblocks.
 * io_uring's zero-copy sends are iouring_guard.c's.
 *
 * When a pageblock stays lent the call does nothing and fails: a send
 * with ENOBUFS, which the kernel gives itself when it cannot set up a
 * zero-copy send, and after which a program sends again without
 * MSG_ZEROCOPY (the kernel's Documentation/networking/msg_zerocopy.rst);
 * vmsplice() with ENOMEM, its "out of memory".  A message header or iovec
 * array that cannot be read is forwarded: the kernel refuses it (EFAULT).
 *
 * Cost: a send without MSG_ZEROCOPY, nothing but the test of its flags;
 * with it, and vmsplice(), one load while nothing is lent.  Otherwise the
 * program's descriptions are read as the kernel reads them, each read two
 * system calls (ucma_preload_read_user()): sendmsg() its header and its
 * iovec array, sendmmsg() its headers 16 at a time and each message's
 * iovecs, vmsplice() its iovecs; then a look at the borrowed state of
 * each 2 MiB of the buffers.
 *
 * Locking: none here; ucma_unlend() takes what it needs.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdbool.h>

#include "interpose.h"

#if defined(__x86_64__) || defined(__aarch64__)

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifndef UIO_MAXIOV
#define UIO_MAXIOV 1024
#endif

#include "internal.h"
#include "lend.h"
#include "raw_syscall.h"

#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

#define ZC_EXPORT __attribute__((visibility("default")))

/* Would a send with @flags have the kernel pin its buffers, while
 * something is lent? */
static inline bool zc_wanted(long flags)
{
	return UCMA_UNLIKELY((flags & MSG_ZEROCOPY) != 0) && ucma_lend_any_borrowed();
}

/* The same for @n iovecs at @uiov.  The kernel refuses more than
 * UIO_MAXIOV of them, and sends at most that many messages of a
 * sendmmsg(): no more are looked at. */
static bool unlend_iov(const struct iovec *uiov, unsigned long n, int err)
{
	if (!uiov || n > UIO_MAXIOV || ucma_preload_unlend_iovecs(uiov, n) != UNLEND_FAILED)
		return true;
	errno = err;
	return false;
}

/* The iovecs of message header @m, read already. */
static bool unlend_msg_read(const struct msghdr *m)
{
	return unlend_iov(m->msg_iov, (unsigned long)m->msg_iovlen, ENOBUFS);
}

/* The iovecs of the message header at @umsg, the program's memory. */
static bool unlend_msg(const struct msghdr *umsg)
{
	struct msghdr m;

	if (!umsg || !ucma_preload_read_user(&m, umsg, sizeof(m)))
		return true;
	return unlend_msg_read(&m);
}

/* The message headers of @n mmsghdrs at @uvec (sendmmsg()), read 16 at a
 * time: each read of the program's memory is a system call. */
static bool unlend_mmsg(const struct mmsghdr *uvec, unsigned long n)
{
	struct mmsghdr v[16];

	if (n > UIO_MAXIOV)
		n = UIO_MAXIOV;
	for (unsigned long i = 0; uvec && i < n;) {
		unsigned long k = n - i < 16 ? n - i : 16;

		/* A batch running into unmapped memory: one header at a
		 * time up to there (the kernel sends the readable ones). */
		if (!ucma_preload_read_user(v, uvec + i, k * sizeof(v[0]))) {
			for (; i < n; i++)
				if (!ucma_preload_read_user(v, uvec + i, sizeof(v[0])))
					return true;
				else if (!unlend_msg_read(&v[0].msg_hdr))
					return false;
			return true;
		}
		for (unsigned long j = 0; j < k; j++)
			if (!unlend_msg_read(&v[j].msg_hdr))
				return false;
		i += k;
	}
	return true;
}

bool ucma_preload_zc_syscall(long nr, const long a[6], long *ret)
{
	bool good;

	switch (nr) {
	case SYS_sendto:
		good = !zc_wanted(a[3]) ||
		       ucma_preload_unlend_or((const void *)a[1], (size_t)a[2], ENOBUFS);
		break;
	case SYS_sendmsg:
		good = !zc_wanted(a[2]) || unlend_msg((const struct msghdr *)a[1]);
		break;
	case SYS_sendmmsg:
		good = !zc_wanted(a[3]) ||
		       unlend_mmsg((const struct mmsghdr *)a[1], (unsigned long)(unsigned)a[2]);
		break;
	case SYS_vmsplice:
		good = !ucma_lend_any_borrowed() ||
		       unlend_iov((const struct iovec *)a[1], (unsigned long)a[2], ENOMEM);
		break;
	default:
		return false;
	}
	return ucma_preload_made(good, nr, a, ret);
}

/* ------------------------------------------------------------------------ */
/* The interposed functions                                                  */
/* ------------------------------------------------------------------------ */

/* Each calls the C library's own, so that the blocking calls stay
 * cancellation points; found on first use (the library itself never
 * sends). */
typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);
typedef int (*sendmmsg_fn)(int, struct mmsghdr *, unsigned int, int);
typedef ssize_t (*vmsplice_fn)(int, const struct iovec *, size_t, unsigned int);

static void *next_send, *next_sendto, *next_sendmsg, *next_sendmmsg, *next_vmsplice;

/*
 * Looked up at load, once the C library is ready: a send made first in a
 * signal handler (crash reporters send) then calls no dlsym(), which is
 * not async-signal-safe.  One still missing is looked up on first use.
 */
__attribute__((constructor)) static void zc_resolve(void)
{
	(void)ucma_preload_next(&next_send, "send");
	(void)ucma_preload_next(&next_sendto, "sendto");
	(void)ucma_preload_next(&next_sendmsg, "sendmsg");
	(void)ucma_preload_next(&next_sendmmsg, "sendmmsg");
	(void)ucma_preload_next(&next_vmsplice, "vmsplice");
}

/* (The next send(), not the C library's __send(): another interposer
 * loaded after this library must see it too.) */
ZC_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	send_fn fn = UCMA_NEXT(send_fn, send);

	if (!fn)
		UCMA_NO_NEXT();
	if (zc_wanted(flags) && !ucma_preload_unlend_or(buf, len, ENOBUFS))
		return -1;
	return fn(fd, buf, len, flags);
}

ZC_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			 const struct sockaddr *to, socklen_t tolen)
{
	sendto_fn fn = UCMA_NEXT(sendto_fn, sendto);

	if (!fn)
		UCMA_NO_NEXT();
	if (zc_wanted(flags) && !ucma_preload_unlend_or(buf, len, ENOBUFS))
		return -1;
	return fn(fd, buf, len, flags, to, tolen);
}

ZC_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	sendmsg_fn fn = UCMA_NEXT(sendmsg_fn, sendmsg);

	if (!fn)
		UCMA_NO_NEXT();
	if (zc_wanted(flags) && !unlend_msg(msg))
		return -1;
	return fn(fd, msg, flags);
}

ZC_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags)
{
	sendmmsg_fn fn = UCMA_NEXT(sendmmsg_fn, sendmmsg);

	if (!fn)
		UCMA_NO_NEXT();
	if (zc_wanted(flags) && !unlend_mmsg(vec, n))
		return -1;
	return fn(fd, vec, n, flags);
}

ZC_EXPORT ssize_t vmsplice(int fd, const struct iovec *iov, size_t n, unsigned int flags)
{
	vmsplice_fn fn = UCMA_NEXT(vmsplice_fn, vmsplice);

	if (!fn)
		UCMA_NO_NEXT();
	if (UCMA_UNLIKELY(ucma_lend_any_borrowed()) && !unlend_iov(iov, n, ENOMEM))
		return -1;
	return fn(fd, iov, n, flags);
}

#endif /* __x86_64__ || __aarch64__ */
