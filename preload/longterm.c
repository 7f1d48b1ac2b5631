/*
 * longterm.c - the calls that hand malloc memory to the kernel for good,
 * or that change what its pages are, interposed so that memory never lies
 * on a CMA frame lent to the heap.
 *
 * With UCMA_CMA_POLICY=lend a pageblock of the heap may be backed by a
 * frame of a CMA area, and ucma_alloc() takes the frame back by copying
 * the data to memory of its own at the same address (lend.c).  That is
 * only sound while nobody but the program's threads reaches the memory
 * through its virtual address.  Memory that the kernel keeps using after
 * the call returns is reached through the frame instead: an io_uring fixed
 * buffer is pinned, and the kernel's next READ_FIXED would write into the
 * old frame after the copy (measured: the data was lost).  Locked memory
 * is the program's promise to itself that its pages stay put, and a remap
 * at the address would drop the lock.  So before forwarding these calls,
 * every lent pageblock the range touches is taken back (ucma_unlend()),
 * the kernel's rule for long-term pins (lesson 3 of DESIGN.md):
 *   mlock, mlock2             the range;
 *   mlockall                  everything, and nothing is lent afterwards
 *                             (ucma_unlend_all(); MCL_FUTURE would lock
 *                             frames mapped later);
 *   madvise                   the range, for every advice but the hints
 *                             that change nothing the program can see
 *                             (MADV_NORMAL, _RANDOM, _SEQUENTIAL,
 *                             _WILLNEED, _COLD, _PAGEOUT, _POPULATE_READ
 *                             and _WRITE): a lent page is shared memory,
 *                             on which MADV_DONTNEED would not zero what
 *                             the program reads next, MADV_FREE and
 *                             MADV_WIPEONFORK fail, MADV_REMOVE would free
 *                             the frame's page, MADV_DOFORK would share
 *                             the frame with a child, and a take-back
 *                             would drop the fork advice given to it;
 *   mprotect, pkey_mprotect   the range, whatever the protection: a
 *                             take-back maps memory of its own at the
 *                             address readable and writable, so a guard
 *                             page made with PROT_NONE or a page made
 *                             read-only on a lent frame lost that when
 *                             taken back (measured);
 *   io_uring_setup            with IORING_SETUP_NO_MMAP, the program's
 *                             memory for the rings and the SQEs, which the
 *                             kernel pins for the ring's life; with
 *                             IORING_SETUP_SQPOLL, everything, as for
 *                             mlockall (a kernel thread takes the entries,
 *                             unseen by iouring_guard.c);
 *   io_uring_register         IORING_REGISTER_BUFFERS, _BUFFERS2 and
 *                             _BUFFERS_UPDATE: each iovec; _PBUF_RING: the
 *                             ring, unless the kernel allocates it;
 *                             _RESIZE_RINGS: the new rings, as for setup;
 *                             _MEM_REGION: a region of the program's
 *                             memory; _ZCRX_IFQ: the receive area (unless
 *                             a dma-buf) and the refill queue's region;
 *   syscall()                 the same calls by number;
 *   liburing                  io_uring_setup(), io_uring_register(),
 *                             io_uring_register_buffers() and its kin,
 *                             and, where liburing has them,
 *                             io_uring_queue_init_mem(),
 *                             io_uring_resize_rings(),
 *                             io_uring_register_region() and
 *                             io_uring_register_ifq(): liburing makes its
 *                             system calls itself, not through syscall().
 * When a pageblock cannot be taken back, the call fails (EAGAIN for the
 * mlock family, ENOMEM for mlockall, mprotect and pkey_mprotect, EBUSY
 * for io_uring) rather than pin memory that a later ucma_alloc() would
 * copy away under the kernel, or protect pages a take-back would unprotect.
 *
 * Forks that skip the fork handlers are here too: syscall() with
 * SYS_fork, or SYS_clone or SYS_clone3 without CLONE_VM, clone() and
 * __clone() without CLONE_VM, and _Fork().  Borrowed pageblocks carry MADV_DONTFORK (the
 * handlers of fork() make the child copy them), so such a child would
 * fault on ordinary malloc memory, the argv it was about to exec with
 * for one.  Every borrowed pageblock is taken back before the call
 * instead, and none lent until it has returned (ucma_lend_raw_fork_*(),
 * lend.h); the call fails with EAGAIN when one stays lent.  A
 * syscall(SYS_clone) with a stack of its own cannot return into C code
 * in the child; it and the calls with CLONE_VM (vfork, threads) are
 * forwarded unchanged.
 *
 * The library's own memory calls do not come here (src/os.c makes them
 * with the system call instruction), and the real calls are made with
 * that instruction too, so nothing here needs dlsym() or the C library while the
 * library starts (its first syscall() can come from the first malloc,
 * before libc is ready).  Where that instruction is not written out
 * (architectures other than x86-64 and AArch64) none of this is compiled,
 * and ucma(7) says so.  What cannot be seen here at all (most drivers'
 * ioctl(), libibverbs looked up by dlsym(), statically linked libraries)
 * is listed in ucma_unlend(3); UCMA_CMA_POLICY=lend-handles is the
 * setting for such programs.
 *
 * Locking: none here; ucma_unlend() takes what it needs.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#if defined(__x86_64__) || defined(__aarch64__)

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ucma.h"
#include "fork.h"
#include "lend.h"
#include "raw_syscall.h"
#include "interpose.h"

#define LONGTERM_EXPORT __attribute__((visibility("default")))

/* Opcodes and flags of newer kernels than some headers know. */
#ifndef IORING_REGISTER_USE_REGISTERED_RING
#define IORING_REGISTER_USE_REGISTERED_RING (1U << 31)
#endif
#define IOU_PBUF_RING_MMAP_FLAG 1	/* IOU_PBUF_RING_MMAP, Linux 6.4 */
#define IOU_SETUP_CQSIZE	(1U << 3)
#define IOU_SETUP_NO_MMAP	(1U << 14)	/* Linux 6.5 */
#define IOU_REGISTER_ZCRX_IFQ	32u		/* Linux 6.15 */
#define IOU_REGISTER_RESIZE_RINGS 33u		/* Linux 6.13 */
#define IOU_REGISTER_MEM_REGION	34u		/* Linux 6.13 */
#define IOU_MEM_REGION_TYPE_USER 1u		/* struct io_uring_region_desc's flags */
#define IOU_ZCRX_AREA_DMABUF	1u		/* struct io_uring_zcrx_area_reg's flags */
#define IOU_MAX_SQ_ENTRIES	32768u		/* IORING_MAX_ENTRIES */
#define IOU_MAX_CQ_ENTRIES	65536u		/* IORING_MAX_CQ_ENTRIES */

/* struct io_uring_buf_reg as the kernel reads it: headers older than 6.4
 * call the flags field "pad". */
struct pbuf_ring_reg {
	uint64_t ring_addr;
	uint32_t ring_entries;
	uint16_t bgid;
	uint16_t flags;
	uint64_t resv[3];
};
_Static_assert(sizeof(struct pbuf_ring_reg) == sizeof(struct io_uring_buf_reg),
	       "struct io_uring_buf_reg changed");

/* struct io_uring_params as Linux 6.5 reads it: older headers call each
 * ring's user_addr "resv2". */
struct ring_offsets {
	uint32_t fields[8];
	uint64_t user_addr;
};

struct ring_params {
	uint32_t sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd;
	uint32_t resv[3];
	struct ring_offsets sq_off, cq_off;
};
_Static_assert(sizeof(struct ring_params) == sizeof(struct io_uring_params),
	       "struct io_uring_params changed");

/* The Linux 6.13 and 6.15 structures, which older headers lack: struct
 * io_uring_mem_region_reg, struct io_uring_region_desc, and the leading
 * fields of struct io_uring_zcrx_ifq_reg and io_uring_zcrx_area_reg. */
struct mem_region_reg {
	uint64_t region_uptr, flags, resv[2];
};

struct region_desc {
	uint64_t user_addr, size;
	uint32_t flags, id;
	uint64_t mmap_offset, resv[4];
};

struct zcrx_ifq_reg_head {
	uint32_t if_idx, if_rxq, rq_entries, flags;
	uint64_t area_ptr, region_ptr;
};

struct zcrx_area_reg_head {
	uint64_t addr, len, rq_area_token;
	uint32_t flags, dmabuf_fd;
};

/* ------------------------------------------------------------------------ */
/* Reading the program's descriptions of its buffers                         */
/* ------------------------------------------------------------------------ */

/*
 * process_vm_readv() on oneself is always permitted; where it is not
 * available (seccomp), the memory is read directly.
 */
bool ucma_preload_read_user(void *dst, const void *src, size_t len)
{
	struct iovec local = { dst, len }, remote = { (void *)src, len };
	long n = ucma_raw_syscall6(SYS_process_vm_readv, ucma_raw_syscall6(SYS_getpid, 0, 0, 0, 0, 0, 0),
			      (long)&local, 1, (long)&remote, 1, 0);

	if (n == (long)len)
		return true;
	if (n == -EFAULT || (n >= 0 && n < (long)len)) {
		errno = EFAULT;
		return false;
	}
	for (size_t i = 0; i < len; i++)
		((volatile char *)dst)[i] = ((const volatile char *)src)[i];
	return true;
}

enum unlend_result ucma_preload_unlend_iovecs(const struct iovec *uiov, unsigned long nr)
{
	struct iovec v[32];

	for (unsigned long i = 0; i < nr;) {
		size_t n = nr - i < 32 ? nr - i : 32;

		if (!ucma_preload_read_user(v, uiov + i, n * sizeof(v[0])))
			return UNLEND_BAD;
		/* A range that wraps (EINVAL) is the kernel's to refuse. */
		for (size_t k = 0; k < n; k++)
			if (v[k].iov_base && v[k].iov_len &&
			    ucma_unlend(v[k].iov_base, v[k].iov_len) != 0 && errno != EINVAL)
				return UNLEND_FAILED;
		i += n;
	}
	return UNLEND_DONE;
}

static enum unlend_result unlend_range(uint64_t addr, uint64_t len)
{
	if (!addr || !len || len > SIZE_MAX)
		return UNLEND_DONE;	/* the kernel refuses it, or pins nothing */
	return ucma_unlend((const void *)(uintptr_t)addr, (size_t)len) == 0 ? UNLEND_DONE
									      : UNLEND_FAILED;
}

static size_t pow2_at_least(uint32_t n, uint32_t max)
{
	size_t p = 1;

	while (p < n && p < max)
		p <<= 1;
	return p;
}

/*
 * Rings in the program's memory (IORING_SETUP_NO_MMAP), for
 * io_uring_setup(@entries) and IORING_REGISTER_RESIZE_RINGS: the SQEs at
 * sq_off.user_addr, the rings with the CQEs at cq_off.user_addr.  The
 * lengths are upper bounds of what the kernel maps for these entry
 * counts (entries rounded up to a power of two, 128-byte SQEs, 32-byte
 * CQEs, a page and more for the ring headers): a pageblock more taken
 * back costs only some lending; one less would be lost data.
 */
static enum unlend_result unlend_rings(uint32_t entries, const struct io_uring_params *uparams,
				       bool resize)
{
	struct ring_params p;
	size_t sq, cq;

	if (!uparams || !ucma_preload_read_user(&p, uparams, sizeof(p)))
		return UNLEND_BAD;
	/* A resize takes IORING_SETUP_NO_MMAP from the ring, not from @p
	 * (the kernel refuses it there): the addresses say it. */
	if (!resize && !(p.flags & IOU_SETUP_NO_MMAP))
		return UNLEND_DONE;
	sq = pow2_at_least(entries, IOU_MAX_SQ_ENTRIES);
	cq = (p.flags & IOU_SETUP_CQSIZE) ? pow2_at_least(p.cq_entries, IOU_MAX_CQ_ENTRIES) : 2 * sq;
	if (unlend_range(p.sq_off.user_addr, sq * 128) == UNLEND_FAILED ||
	    unlend_range(p.cq_off.user_addr, 16384 + cq * 32 + sq * 4) == UNLEND_FAILED)
		return UNLEND_FAILED;
	return UNLEND_DONE;
}

/*
 * io_uring_setup() of a ring polled by a kernel thread (IORING_SETUP_SQPOLL):
 * the program makes the ring's tail itself and the thread takes the
 * entries without any call that iouring_guard.c could read them in, so
 * their buffers are out of reach as long as the ring lives.  Like
 * mlockall(): everything is taken back and nothing lent again.
 */
static enum unlend_result unlend_sqpoll(const struct io_uring_params *uparams)
{
	struct ring_params p;

	if (!uparams || !ucma_preload_read_user(&p, uparams, sizeof(p)))
		return UNLEND_BAD;
	if (!(p.flags & IORING_SETUP_SQPOLL))
		return UNLEND_DONE;
	return ucma_unlend_all() == 0 ? UNLEND_DONE : UNLEND_FAILED;
}

/* A struct io_uring_region_desc at @uregion: its memory, if the program's. */
static enum unlend_result unlend_region(uint64_t uregion)
{
	struct region_desc r;

	if (!uregion)
		return UNLEND_DONE;
	if (!ucma_preload_read_user(&r, (const void *)(uintptr_t)uregion, sizeof(r)))
		return UNLEND_BAD;
	return (r.flags & IOU_MEM_REGION_TYPE_USER) ? unlend_range(r.user_addr, r.size)
						     : UNLEND_DONE;
}

/* IORING_REGISTER_ZCRX_IFQ: the receive area, unless it is a dma-buf,
 * and the refill queue's region. */
static enum unlend_result unlend_zcrx(const void *arg)
{
	struct zcrx_ifq_reg_head reg;
	struct zcrx_area_reg_head area;
	enum unlend_result r;

	if (!ucma_preload_read_user(&reg, arg, sizeof(reg)))
		return UNLEND_BAD;
	if (reg.area_ptr) {
		if (!ucma_preload_read_user(&area, (const void *)(uintptr_t)reg.area_ptr,
					    sizeof(area)))
			return UNLEND_BAD;
		if (!(area.flags & IOU_ZCRX_AREA_DMABUF) &&
		    (r = unlend_range(area.addr, area.len)) != UNLEND_DONE)
			return r;
	}
	return unlend_region(reg.region_ptr);
}

/*
 * What io_uring_register(@opcode, @arg, @nr_args) will pin, unlent first.
 * Buffers are given as iovecs (REGISTER_BUFFERS), or through a struct
 * naming them (BUFFERS2, BUFFERS_UPDATE); a provided-buffer ring is pinned
 * itself unless the kernel allocates it (IOU_PBUF_RING_MMAP).
 */
static enum unlend_result unlend_io_uring(unsigned opcode, const void *arg, unsigned nr_args)
{
	switch (opcode & ~IORING_REGISTER_USE_REGISTERED_RING) {
	case IORING_REGISTER_BUFFERS:
		return arg ? ucma_preload_unlend_iovecs(arg, nr_args) : UNLEND_DONE;
	case IORING_REGISTER_BUFFERS2: {
		struct io_uring_rsrc_register r;

		if (nr_args != sizeof(r) || !ucma_preload_read_user(&r, arg, sizeof(r)))
			return UNLEND_BAD;
		return r.data ? ucma_preload_unlend_iovecs((const void *)(uintptr_t)r.data, r.nr) : UNLEND_DONE;
	}
	case IORING_REGISTER_BUFFERS_UPDATE: {
		struct io_uring_rsrc_update2 u;

		if (nr_args != sizeof(u) || !ucma_preload_read_user(&u, arg, sizeof(u)))
			return UNLEND_BAD;
		return u.data ? ucma_preload_unlend_iovecs((const void *)(uintptr_t)u.data, u.nr) : UNLEND_DONE;
	}
	case IORING_REGISTER_PBUF_RING: {
		struct pbuf_ring_reg reg;

		if (!ucma_preload_read_user(&reg, arg, sizeof(reg)))
			return UNLEND_BAD;
		if ((reg.flags & IOU_PBUF_RING_MMAP_FLAG) || !reg.ring_addr || !reg.ring_entries)
			return UNLEND_DONE;
		return ucma_unlend((const void *)(uintptr_t)reg.ring_addr,
				   (size_t)reg.ring_entries * sizeof(struct io_uring_buf)) == 0 ?
			       UNLEND_DONE : UNLEND_FAILED;
	}
	case IOU_REGISTER_RESIZE_RINGS: {
		struct ring_params p;

		if (!arg || !ucma_preload_read_user(&p, arg, sizeof(p)))
			return UNLEND_BAD;
		return unlend_rings(p.sq_entries, arg, true);
	}
	case IOU_REGISTER_MEM_REGION: {
		struct mem_region_reg reg;

		if (!arg || !ucma_preload_read_user(&reg, arg, sizeof(reg)))
			return UNLEND_BAD;
		return unlend_region(reg.region_uptr);
	}
	case IOU_REGISTER_ZCRX_IFQ:
		return arg ? unlend_zcrx(arg) : UNLEND_BAD;
	default:
		return UNLEND_DONE;
	}
}

/* ------------------------------------------------------------------------ */
/* The interposed calls                                                      */
/* ------------------------------------------------------------------------ */

bool ucma_preload_made(bool good, long nr, const long a[6], long *ret)
{
	*ret = good ? ucma_raw_result(ucma_raw_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]))
		    : -1;
	return true;
}

bool ucma_preload_unlend_or(const void *addr, size_t len, int err)
{
	if (!len || ucma_unlend(addr, len) == 0 || errno == EINVAL)
		return true;
	errno = err;
	return false;
}

bool ucma_preload_unlend(const void *addr, size_t len)
{
	return ucma_preload_unlend_or(addr, len, EAGAIN);
}

/* mlock() and mlock2(): the range first; refused with EAGAIN ("could not
 * be locked") when it stays lent. */
static long mlock_range(long nr, const void *addr, size_t len, long flags)
{
	if (!ucma_preload_unlend(addr, len))
		return -1;
	return ucma_raw_result(ucma_raw_syscall6(nr, (long)addr, (long)len, flags, 0, 0, 0));
}

static long mlock_all(int flags)
{
	if (ucma_unlend_all() != 0) {
		errno = ENOMEM;
		return -1;
	}
	return ucma_raw_result(ucma_raw_syscall6(SYS_mlockall, flags, 0, 0, 0, 0, 0));
}

/*
 * io_uring_register(@fd, @opcode) of IORING_REGISTER_RESIZE_RINGS moves
 * the ring's entries to new memory: where iouring_guard.c reads them for
 * io_uring_enter(2) no longer holds (any ring's, when @fd is an index).
 */
static void ring_moves(long fd, unsigned opcode)
{
	if ((opcode & ~IORING_REGISTER_USE_REGISTERED_RING) != IOU_REGISTER_RESIZE_RINGS)
		return;
	if ((opcode & IORING_REGISTER_USE_REGISTERED_RING) || fd < 0 || fd > INT_MAX)
		ucma_preload_iouring_forget(0, UINT_MAX);
	else
		ucma_preload_iouring_forget((unsigned)fd, (unsigned)fd);
}

/* The raw io_uring_register(2): the kernel's result, -errno on failure. */
static long io_uring_register_raw(long fd, unsigned opcode, const void *arg, unsigned nr_args)
{
	if (unlend_io_uring(opcode, arg, nr_args) == UNLEND_FAILED)
		return -EBUSY;
	ring_moves(fd, opcode);
	return ucma_raw_syscall6(SYS_io_uring_register, fd, opcode, (long)arg, nr_args, 0, 0);
}

/* The raw io_uring_setup(2): rings in the program's memory first; the
 * ring's layout is kept for io_uring_enter(2) (iouring_guard.c). */
static long io_uring_setup_raw(unsigned entries, struct io_uring_params *p)
{
	long fd;

	if (unlend_rings(entries, p, false) == UNLEND_FAILED || unlend_sqpoll(p) == UNLEND_FAILED)
		return -EBUSY;
	fd = ucma_raw_syscall6(SYS_io_uring_setup, entries, (long)p, 0, 0, 0, 0);
	if (fd >= 0)
		ucma_preload_iouring_setup(fd, p);
	return fd;
}

/* struct clone_args as Linux 5.3 reads it: flags first, the stack at 40. */
struct clone3_head {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size;
};

/* After a fork that ucma_lend_raw_fork_prepare() let through: @ret is
 * what it returned (0 in the child). */
static void raw_fork_end(long ret, bool shared_files)
{
	if (ret == 0)
		ucma_lend_raw_fork_child(shared_files);
	else
		ucma_lend_raw_fork_parent();
}

/*
 * syscall(SYS_fork, SYS_clone or SYS_clone3): a new process made without
 * the fork handlers, with the heap taken back first.  @flags and @stack
 * as the call gives them.
 */
static long raw_fork(long nr, const long a[6], uint64_t flags, uint64_t stack)
{
	long ret;

	if ((flags & (CLONE_VM | CLONE_VFORK)) == CLONE_VM)
		ucma_fork_note_raw_thread();	/* a thread the C library does not count */
	if ((flags & CLONE_VM) || stack)
		return ucma_raw_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (ucma_lend_raw_fork_prepare() != 0)
		return -errno;
	ret = ucma_raw_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	raw_fork_end(ret, flags & CLONE_FILES);
	return ret;
}

static long raw_clone3(const long a[6])
{
	struct clone3_head h;

	if ((size_t)a[1] < sizeof(h) || !ucma_preload_read_user(&h, (const void *)a[0], sizeof(h)))
		return ucma_raw_syscall6(SYS_clone3, a[0], a[1], a[2], a[3], a[4], a[5]);
	return raw_fork(SYS_clone3, a, h.flags, h.stack);
}

/* madvise(): see the list above; EAGAIN when the range stays lent. */
static long madvise_range(void *addr, size_t len, int advice)
{
	switch (advice) {
	case MADV_NORMAL:
	case MADV_RANDOM:
	case MADV_SEQUENTIAL:
	case MADV_WILLNEED:
	case 20:	/* MADV_COLD */
	case 21:	/* MADV_PAGEOUT */
	case 22:	/* MADV_POPULATE_READ */
	case 23:	/* MADV_POPULATE_WRITE */
		break;
	default:
		if (!ucma_preload_unlend(addr, len))
			return -1;
	}
	return ucma_raw_result(ucma_raw_syscall6(SYS_madvise, (long)addr, (long)len, advice, 0, 0, 0));
}

LONGTERM_EXPORT int madvise(void *addr, size_t len, int advice)
{
	return (int)madvise_range(addr, len, advice);
}

/*
 * mprotect() and pkey_mprotect() (SYS_mprotect, SYS_pkey_mprotect): the
 * range first, ENOMEM when it stays lent.
 */
static long mprotect_range(long nr, void *addr, size_t len, int prot, int pkey)
{
	if (ucma_lend_any_borrowed() && !ucma_preload_unlend_or(addr, len, ENOMEM))
		return -1;
	return ucma_raw_result(ucma_raw_syscall6(nr, (long)addr, (long)len, prot, pkey, 0, 0));
}

LONGTERM_EXPORT int mprotect(void *addr, size_t len, int prot)
{
	return (int)mprotect_range(SYS_mprotect, addr, len, prot, 0);
}

/* Key -1 is plain mprotect(), as the C library makes it: kernels (and
 * sandboxes) without protection keys have no pkey_mprotect. */
LONGTERM_EXPORT int pkey_mprotect(void *addr, size_t len, int prot, int pkey)
{
	return (int)mprotect_range(pkey == -1 ? SYS_mprotect : SYS_pkey_mprotect, addr, len,
				   prot, pkey);
}

LONGTERM_EXPORT int mlock(const void *addr, size_t len)
{
	return (int)mlock_range(SYS_mlock, addr, len, 0);
}

LONGTERM_EXPORT int mlock2(const void *addr, size_t len, unsigned int flags)
{
	return (int)mlock_range(SYS_mlock2, addr, len, flags);
}

LONGTERM_EXPORT int mlockall(int flags)
{
	return (int)mlock_all(flags);
}

/*
 * syscall(): the calls above by number, the futex calls whose words
 * must not be on a lent frame (futex_guard.c), close and dup calls, kept
 * off the library's descriptors (lend_guard.c), read, write and
 * io_submit calls whose direct I/O must not reach a lent frame
 * (dio_guard.c), zero-copy sends and vmsplice (zc_guard.c), and the
 * ioctl and setsockopt calls that map memory for a device
 * (device_guard.c); everything else forwarded as is.
 * Like the C library's, it reads six arguments whatever the call takes.
 */
LONGTERM_EXPORT long syscall(long nr, ...)
{
	long a[6];
	va_list ap;

	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	switch (nr) {
	case SYS_mlock:
	case SYS_mlock2:
		return mlock_range(nr, (const void *)a[0], (size_t)a[1], a[2]);
	case SYS_mlockall:
		return mlock_all((int)a[0]);
	case SYS_madvise:
		return madvise_range((void *)a[0], (size_t)a[1], (int)a[2]);
	case SYS_mprotect:
	case SYS_pkey_mprotect:
		return mprotect_range(nr, (void *)a[0], (size_t)a[1], (int)a[2], (int)a[3]);
	case SYS_io_uring_register:
		return ucma_raw_result(io_uring_register_raw(a[0], (unsigned)a[1], (const void *)a[2],
							 (unsigned)a[3]));
	case SYS_io_uring_setup:
		return ucma_raw_result(io_uring_setup_raw((unsigned)a[0], (struct io_uring_params *)a[1]));
	case SYS_io_uring_enter:
		/* The entries it submits (iouring_guard.c). */
		return ucma_raw_result(ucma_preload_iouring_enter(a));
#ifdef SYS_fork
	case SYS_fork:
		return ucma_raw_result(raw_fork(nr, a, 0, 0));
#endif
	case SYS_clone:
		return ucma_raw_result(raw_fork(nr, a, (uint64_t)a[0], (uint64_t)a[1]));
#ifdef SYS_clone3
	case SYS_clone3:
		return ucma_raw_result(raw_clone3(a));
#endif
	default: {
		long rc;

		/* close and dup onto the library's descriptors (lend_guard.c). */
		if (ucma_preload_guard_syscall(nr, a, &rc))
			return rc;
		/* Direct I/O into heap memory (dio_guard.c). */
		if (ucma_preload_dio_syscall(nr, a, &rc))
			return rc;
		/* Zero-copy sends and vmsplice of heap memory (zc_guard.c). */
		if (ucma_preload_zc_syscall(nr, a, &rc))
			return rc;
		/* Device DMA mappings of heap memory (device_guard.c). */
		if (ucma_preload_device_syscall(nr, a, &rc))
			return rc;
		/* The futex calls' shared words first (futex_guard.c): 0 for
		 * any other call. */
		rc = ucma_preload_futex_unlend(nr, a);

		if (rc != 0)
			return ucma_raw_result(rc);
		return ucma_raw_result(ucma_raw_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]));
	}
	}
}

/*
 * clone() without CLONE_VM: the same as a raw fork above.  The child runs
 * @fn on its own stack, so a trampoline makes the child's half first; its
 * description lies on this thread's stack, which the child has a copy of.
 * Like the C library's, this reads the three optional arguments whatever
 * the flags (they are passed on, and used only where the flags say).
 */
struct clone_call {
	int (*fn)(void *);
	void *arg;
	bool shared_files;
};

static int clone_child(void *p)
{
	const struct clone_call *c = p;

	ucma_lend_raw_fork_child(c->shared_files);
	return c->fn(c->arg);
}

typedef int (*clone_fn)(int (*)(void *), void *, int, void *, ...);

static int clone_made(int (*fn)(void *), void *stack, int flags, void *arg, void *ptid,
		      void *tls, void *ctid)
{
	static void *cache;
	clone_fn real = (clone_fn)ucma_preload_next(&cache, "clone");
	struct clone_call c = { fn, arg, (flags & CLONE_FILES) != 0 };
	int ret;

	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	/* With CLONE_VM nothing is copied; without @fn or @stack the C
	 * library refuses the call (EINVAL) before any clone is made. */
	if ((flags & (CLONE_VM | CLONE_VFORK)) == CLONE_VM)
		ucma_fork_note_raw_thread();
	if ((flags & CLONE_VM) || !fn || !stack)
		return real(fn, stack, flags, arg, ptid, tls, ctid);
	if (ucma_lend_raw_fork_prepare() != 0)
		return -1;
	ret = real(clone_child, stack, flags, &c, ptid, tls, ctid);
	ucma_lend_raw_fork_parent();
	return ret;
}

#define CLONE_ARGS(last)                          \
	void *ptid_, *tls_, *ctid_;               \
	va_list ap_;                              \
	va_start(ap_, last);                      \
	ptid_ = va_arg(ap_, void *);              \
	tls_ = va_arg(ap_, void *);               \
	ctid_ = va_arg(ap_, void *);              \
	va_end(ap_)

LONGTERM_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	CLONE_ARGS(arg);
	return clone_made(fn, stack, flags, arg, ptid_, tls_, ctid_);
}

int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);

LONGTERM_EXPORT int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	CLONE_ARGS(arg);
	return clone_made(fn, stack, flags, arg, ptid_, tls_, ctid_);
}

/* _Fork() (glibc 2.34): fork() without the fork handlers, which POSIX
 * makes async-signal-safe. */
typedef pid_t (*fork_fn)(void);

LONGTERM_EXPORT pid_t _Fork(void)
{
	static void *cache;
	fork_fn real = (fork_fn)ucma_preload_next(&cache, "_Fork");
	pid_t pid;

	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	if (ucma_lend_raw_fork_prepare() != 0)
		return -1;
	pid = real();
	raw_fork_end(pid, false);
	return pid;
}

/* ------------------------------------------------------------------------ */
/* liburing                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * liburing's functions take a struct io_uring whose layout is liburing's
 * business; rather than read the ring's descriptor out of it, these unlend
 * the buffers they are given and call liburing's own function (found once
 * the program calls it, long after start-up, so dlsym() is safe).  They
 * return what liburing returns: -errno on failure.
 */
struct io_uring;

void *ucma_preload_next(void **cache, const char *name)
{
	void *fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);

	if (!fn) {
		fn = dlsym(RTLD_NEXT, name);
		__atomic_store_n(cache, fn, __ATOMIC_RELEASE);
	}
	return fn;
}

#define LIBURING_CALL(type, name, ...)                                             \
	do {                                                                       \
		static void *cache;                                                \
		type fn = (type)ucma_preload_next(&cache, name);                   \
		return fn ? fn(__VA_ARGS__) : -ENOSYS;                             \
	} while (0)

typedef int (*register_buffers_fn)(struct io_uring *, const struct iovec *, unsigned);
typedef int (*register_buffers_tags_fn)(struct io_uring *, const struct iovec *,
					const uint64_t *, unsigned);
typedef int (*register_buffers_update_tag_fn)(struct io_uring *, unsigned,
					      const struct iovec *, const uint64_t *, unsigned);
typedef int (*register_buf_ring_fn)(struct io_uring *, struct io_uring_buf_reg *, unsigned);
typedef int (*register_fn)(unsigned, unsigned, const void *, unsigned);
typedef int (*setup_fn)(unsigned, struct io_uring_params *);
typedef int (*queue_init_mem_fn)(unsigned, struct io_uring *, struct io_uring_params *, void *,
				 size_t);
typedef int (*resize_rings_fn)(struct io_uring *, struct io_uring_params *);
typedef int (*register_ptr_fn)(struct io_uring *, void *);

/* liburing.h's declarations, which this file does not include (it would
 * tie the build to liburing; the layout of struct io_uring is not used). */
int io_uring_register_buffers(struct io_uring *ring, const struct iovec *iovecs,
			      unsigned nr_iovecs);
int io_uring_register_buffers_tags(struct io_uring *ring, const struct iovec *iovecs,
				   const uint64_t *tags, unsigned nr);
int io_uring_register_buffers_update_tag(struct io_uring *ring, unsigned off,
					 const struct iovec *iovecs, const uint64_t *tags,
					 unsigned nr);
int io_uring_register_buf_ring(struct io_uring *ring, struct io_uring_buf_reg *reg,
			       unsigned flags);
int io_uring_register(unsigned fd, unsigned opcode, const void *arg, unsigned nr_args);
int io_uring_setup(unsigned entries, struct io_uring_params *p);
int io_uring_queue_init_mem(unsigned entries, struct io_uring *ring, struct io_uring_params *p,
			    void *buf, size_t buf_size);
int io_uring_resize_rings(struct io_uring *ring, struct io_uring_params *p);
int io_uring_register_region(struct io_uring *ring, void *reg);
int io_uring_register_ifq(struct io_uring *ring, void *reg);

LONGTERM_EXPORT int io_uring_register_buffers(struct io_uring *ring, const struct iovec *iovecs,
					      unsigned nr_iovecs)
{
	if (ucma_preload_unlend_iovecs(iovecs, nr_iovecs) == UNLEND_FAILED)
		return -EBUSY;
	LIBURING_CALL(register_buffers_fn, "io_uring_register_buffers", ring, iovecs, nr_iovecs);
}

LONGTERM_EXPORT int io_uring_register_buffers_tags(struct io_uring *ring,
						   const struct iovec *iovecs,
						   const uint64_t *tags, unsigned nr)
{
	if (ucma_preload_unlend_iovecs(iovecs, nr) == UNLEND_FAILED)
		return -EBUSY;
	LIBURING_CALL(register_buffers_tags_fn, "io_uring_register_buffers_tags", ring, iovecs,
		      tags, nr);
}

LONGTERM_EXPORT int io_uring_register_buffers_update_tag(struct io_uring *ring, unsigned off,
							 const struct iovec *iovecs,
							 const uint64_t *tags, unsigned nr)
{
	if (ucma_preload_unlend_iovecs(iovecs, nr) == UNLEND_FAILED)
		return -EBUSY;
	LIBURING_CALL(register_buffers_update_tag_fn, "io_uring_register_buffers_update_tag",
		      ring, off, iovecs, tags, nr);
}

LONGTERM_EXPORT int io_uring_register_buf_ring(struct io_uring *ring,
					       struct io_uring_buf_reg *reg, unsigned flags)
{
	if (unlend_io_uring(IORING_REGISTER_PBUF_RING, reg, 1) == UNLEND_FAILED)
		return -EBUSY;
	LIBURING_CALL(register_buf_ring_fn, "io_uring_register_buf_ring", ring, reg, flags);
}

LONGTERM_EXPORT int io_uring_register(unsigned fd, unsigned opcode, const void *arg,
				      unsigned nr_args)
{
	if (unlend_io_uring(opcode, arg, nr_args) == UNLEND_FAILED)
		return -EBUSY;
	ring_moves(fd, opcode);
	LIBURING_CALL(register_fn, "io_uring_register", fd, opcode, arg, nr_args);
}

LONGTERM_EXPORT int io_uring_setup(unsigned entries, struct io_uring_params *p)
{
	/* liburing's io_uring_setup() returns the kernel's result, -errno on
	 * failure (liburing 2.3's own system call), not -1 and errno. */
	if (unlend_rings(entries, p, false) == UNLEND_FAILED || unlend_sqpoll(p) == UNLEND_FAILED)
		return -EBUSY;
	{
		static void *cache;
		setup_fn fn = (setup_fn)ucma_preload_next(&cache, "io_uring_setup");
		int fd;

		if (!fn)
			return (int)io_uring_setup_raw(entries, p);
		fd = fn(entries, p);
		if (fd >= 0)
			ucma_preload_iouring_setup(fd, p);
		return fd;
	}
}

/* liburing 2.5: the program gives the memory for the rings and SQEs. */
LONGTERM_EXPORT int io_uring_queue_init_mem(unsigned entries, struct io_uring *ring,
					    struct io_uring_params *p, void *buf, size_t buf_size)
{
	if (unlend_range((uintptr_t)buf, buf_size) == UNLEND_FAILED)
		return -EBUSY;
	LIBURING_CALL(queue_init_mem_fn, "io_uring_queue_init_mem", entries, ring, p, buf,
		      buf_size);
}

LONGTERM_EXPORT int io_uring_resize_rings(struct io_uring *ring, struct io_uring_params *p)
{
	if (unlend_io_uring(IOU_REGISTER_RESIZE_RINGS, p, 1) == UNLEND_FAILED)
		return -EBUSY;
	/* Which descriptor is in liburing's structure: every ring's layout. */
	ucma_preload_iouring_forget(0, UINT_MAX);
	LIBURING_CALL(resize_rings_fn, "io_uring_resize_rings", ring, p);
}

LONGTERM_EXPORT int io_uring_register_region(struct io_uring *ring, void *reg)
{
	if (unlend_io_uring(IOU_REGISTER_MEM_REGION, reg, 1) == UNLEND_FAILED)
		return -EBUSY;
	LIBURING_CALL(register_ptr_fn, "io_uring_register_region", ring, reg);
}

LONGTERM_EXPORT int io_uring_register_ifq(struct io_uring *ring, void *reg)
{
	if (unlend_io_uring(IOU_REGISTER_ZCRX_IFQ, reg, 1) == UNLEND_FAILED)
		return -EBUSY;
	LIBURING_CALL(register_ptr_fn, "io_uring_register_ifq", ring, reg);
}

#endif /* __x86_64__ || __aarch64__ */
