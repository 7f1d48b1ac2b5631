/*
 * device_guard.c - malloc memory registered with a device kept off the
 * CMA frames lent to the heap.
 *
 * An RDMA memory region, a VFIO or iommufd DMA mapping, a V4L2 user
 * pointer buffer and an AF_XDP UMEM area pin the program's pages for a
 * device as long as they last (the V4L2 buffer while it is queued):
 * the device reads and writes the frames behind them on its own, with no
 * call of the program in between.  A take-back (lend.c) copies a lent
 * pageblock to memory of its own and gives the frame to ucma_alloc(): the
 * device would go on writing into someone's contiguous buffer, and read
 * it.  The kernel's own CMA migration refuses to move such long-term pins
 * (FOLL_LONGTERM migrates the pages out of CMA before pinning them); a
 * take-back cannot see them.  So the memory is taken back before the
 * registration, as for mlock() and io_uring buffers (longterm.c): a
 * pageblock holding live blocks is never lent again.
 *
 * Covered:
 *   RDMA        ibv_reg_mr(), ibv_reg_mr_iova(), ibv_reg_mr_iova2() and
 *               ibv_rereg_mr() with IBV_REREG_MR_CHANGE_TRANSLATION, of
 *               libibverbs, by name, under libibverbs's own symbol
 *               versions (preload.map): a program built against
 *               libibverbs binds to these, and one built for its first
 *               ABI (IBVERBS_1.0, whose structures differ) goes to
 *               libibverbs directly.  (The inline __ibv_reg_mr() of
 *               <infiniband/verbs.h> calls ibv_reg_mr() or
 *               ibv_reg_mr_iova2().)  An on-demand paging region
 *               (IBV_ACCESS_ON_DEMAND) pins nothing: the device follows
 *               the kernel's page tables, which a take-back changes as any
 *               migration does, so it is left lent.
 *   VFIO        ioctl(VFIO_IOMMU_MAP_DMA) of a container (struct
 *               vfio_iommu_type1_dma_map: vaddr, size) and
 *               ioctl(IOMMU_IOAS_MAP) of /dev/iommu (struct
 *               iommu_ioas_map: user_va, length).  The request numbers
 *               are looked at whatever the descriptor: another driver's
 *               request of the same number costs a take-back, never the
 *               call.
 *   V4L2        ioctl(VIDIOC_QBUF) and ioctl(VIDIOC_PREPARE_BUF) of a
 *               user-pointer buffer (V4L2_MEMORY_USERPTR: m.userptr and
 *               length, or each plane's of a multi-planar buffer), which
 *               videobuf2 pins while the buffer is queued.
 *   AF_XDP      setsockopt(SOL_XDP, XDP_UMEM_REG) (struct xdp_umem_reg:
 *               addr, len).
 * By name, and by number through syscall() (longterm.c hands SYS_ioctl
 * and SYS_setsockopt here).
 *
 * When a pageblock stays lent the call does nothing and fails with ENOMEM,
 * the kernel's own answer when it cannot pin the memory (ibv_reg_mr()
 * returns NULL, ibv_rereg_mr() IBV_REREG_MR_ERR_INPUT, which leaves the
 * region as it was).  A description that cannot be read is forwarded:
 * the kernel refuses it (EFAULT).
 *
 * Not seen (ucma_unlend(3)): a library that looks the functions up in
 * libibverbs's handle itself (dlopen() and dlsym(): NCCL does), the
 * providers' direct commands, CUDA's host registration, other drivers'
 * ioctls (DRM userptr, which follows the page tables on current kernels)
 * and calls made with the system call instruction.
 *
 * Cost: an ioctl() or setsockopt() of another request, one comparison;
 * a registration while nothing is lent, one load more.
 *
 * Locking: none here; ucma_unlend() takes what it needs.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdbool.h>

#include "interpose.h"

#if defined(__x86_64__) || defined(__aarch64__)

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include "internal.h"
#include "lend.h"
#include "raw_syscall.h"

#define DEVICE_EXPORT __attribute__((visibility("default")))

/* The kernel's ABI, spelled out so that the build needs none of the
 * headers (linux/vfio.h, linux/iommufd.h, linux/if_xdp.h). */
#define VFIO_IOMMU_MAP_DMA_NR	0x3b71ul	/* _IO(';', 100 + 13) */
#define IOMMU_IOAS_MAP_NR	0x3b85ul	/* _IO(';', 0x85), Linux 6.2 */
#define VIDIOC_QBUF_NR		0xc058560ful	/* _IOWR('V', 15, struct v4l2_buffer), LP64 */
#define VIDIOC_PREPARE_BUF_NR	0xc058565dul	/* _IOWR('V', 93, ...) */
#define V4L2_USERPTR		2		/* V4L2_MEMORY_USERPTR */
#define V4L2_CAPTURE_MPLANE	9		/* V4L2_BUF_TYPE_VIDEO_CAPTURE_MPLANE */
#define V4L2_OUTPUT_MPLANE	10
#define SOL_XDP_NR		283
#define XDP_UMEM_REG_NR		4

/* The leading fields of struct vfio_iommu_type1_dma_map. */
struct vfio_dma_map {
	uint32_t argsz, flags;
	uint64_t vaddr, iova, size;
};

/* The leading fields of struct iommu_ioas_map. */
struct ioas_map {
	uint32_t size, flags, ioas_id, reserved;
	uint64_t user_va, length, iova;
};

/* struct v4l2_buffer (LP64: 88 bytes) and struct v4l2_plane (64), as
 * far as they are read. */
struct v4l2_buf {
	uint32_t index, type, bytesused, flags, field, pad;
	uint64_t timestamp[2];
	uint32_t timecode[4];
	uint32_t sequence, memory;
	uint64_t m;			/* userptr, or the planes' array */
	uint32_t length;		/* bytes, or the planes */
	uint32_t reserved2, request_fd, reserved;
};
_Static_assert(sizeof(struct v4l2_buf) == 88 && offsetof(struct v4l2_buf, memory) == 60 &&
		       offsetof(struct v4l2_buf, m) == 64,
	       "struct v4l2_buffer is not as read here");

struct v4l2_plane_head {
	uint32_t bytesused, length;
	uint64_t userptr;
	uint32_t data_offset, reserved[11];
};
_Static_assert(sizeof(struct v4l2_plane_head) == 64, "struct v4l2_plane is not as read here");

/* The leading fields of struct xdp_umem_reg. */
struct xdp_umem {
	uint64_t addr, len;
};

/* libibverbs: IBV_ACCESS_ON_DEMAND, IBV_REREG_MR_CHANGE_TRANSLATION and
 * IBV_REREG_MR_ERR_INPUT of <infiniband/verbs.h>. */
#define IBV_ON_DEMAND		(1 << 6)
#define IBV_REREG_TRANSLATION	(1 << 0)
#define IBV_REREG_ACCESS	(1 << 2)
#define IBV_REREG_ERR_INPUT	(-1)

/* Take back @len bytes at @addr, as a registration gives them: false
 * with errno ENOMEM when a pageblock stays lent. */
static bool unlend_pinned(uint64_t addr, uint64_t len)
{
	return ucma_preload_unlend_or((const void *)(uintptr_t)addr, (size_t)len, ENOMEM);
}

/* A user-pointer buffer that VIDIOC_QBUF or VIDIOC_PREPARE_BUF queues. */
static bool v4l2_unlend(const void *arg)
{
	struct v4l2_plane_head planes[8];
	struct v4l2_buf b;

	if (!arg || !ucma_preload_read_user(&b, arg, sizeof(b)) || b.memory != V4L2_USERPTR)
		return true;
	if (b.type != V4L2_CAPTURE_MPLANE && b.type != V4L2_OUTPUT_MPLANE)
		return unlend_pinned(b.m, b.length);
	/* VIDEO_MAX_PLANES is 8: the driver refuses more. */
	if (!b.m || b.length > 8 ||
	    !ucma_preload_read_user(planes, (const void *)(uintptr_t)b.m,
				    b.length * sizeof(planes[0])))
		return true;
	for (uint32_t i = 0; i < b.length; i++)
		if (!unlend_pinned(planes[i].userptr, planes[i].length))
			return false;
	return true;
}

/* The buffer that ioctl @request with @arg maps for a device, taken back;
 * false with errno when it stays lent. */
static bool ioctl_unlend(unsigned long request, const void *arg)
{
	request = (uint32_t)request;
	if (request == VFIO_IOMMU_MAP_DMA_NR) {
		struct vfio_dma_map m;

		return !arg || !ucma_preload_read_user(&m, arg, sizeof(m)) ||
		       unlend_pinned(m.vaddr, m.size);
	}
	if (request == IOMMU_IOAS_MAP_NR) {
		struct ioas_map m;

		return !arg || !ucma_preload_read_user(&m, arg, sizeof(m)) ||
		       unlend_pinned(m.user_va, m.length);
	}
	if (request == VIDIOC_QBUF_NR || request == VIDIOC_PREPARE_BUF_NR)
		return v4l2_unlend(arg);
	return true;
}

/* The kernel takes the request as an unsigned int: a caller that passed
 * an int may leave anything in the upper half. */
static inline bool ioctl_wanted(unsigned long request)
{
	request = (uint32_t)request;
	return UCMA_UNLIKELY(request == VFIO_IOMMU_MAP_DMA_NR || request == IOMMU_IOAS_MAP_NR ||
			     request == VIDIOC_QBUF_NR || request == VIDIOC_PREPARE_BUF_NR) &&
	       ucma_lend_any_borrowed();
}

/* The same for setsockopt(@level, @name) with @val of @len bytes. */
static bool sockopt_unlend(const void *val, socklen_t len)
{
	struct xdp_umem u;

	return !val || len < sizeof(u) || !ucma_preload_read_user(&u, val, sizeof(u)) ||
	       unlend_pinned(u.addr, u.len);
}

static inline bool sockopt_wanted(int level, int name)
{
	return UCMA_UNLIKELY(level == SOL_XDP_NR && name == XDP_UMEM_REG_NR) &&
	       ucma_lend_any_borrowed();
}

bool ucma_preload_device_syscall(long nr, const long a[6], long *ret)
{
	bool good;

	switch (nr) {
	case SYS_ioctl:
		good = !ioctl_wanted((unsigned long)a[1]) ||
		       ioctl_unlend((unsigned long)a[1], (const void *)a[2]);
		break;
	case SYS_setsockopt:
		good = !sockopt_wanted((int)a[1], (int)a[2]) ||
		       sockopt_unlend((const void *)a[3], (socklen_t)a[4]);
		break;
	default:
		return false;
	}
	return ucma_preload_made(good, nr, a, ret);
}

/* ------------------------------------------------------------------------ */
/* The interposed functions                                                  */
/* ------------------------------------------------------------------------ */

typedef int (*ioctl_fn)(int, unsigned long, ...);
typedef int (*setsockopt_fn)(int, int, int, const void *, socklen_t);

static void *next_ioctl, *next_setsockopt;

/* Looked up at load (see zc_guard.c's zc_resolve()). */
__attribute__((constructor)) static void device_resolve(void)
{
	(void)ucma_preload_next(&next_ioctl, "ioctl");
	(void)ucma_preload_next(&next_setsockopt, "setsockopt");
}

/* Each calls the C library's own; found on first use (the library's own
 * ioctls are system calls, src/os.c). */
DEVICE_EXPORT int ioctl(int fd, unsigned long request, ...)
{
	ioctl_fn fn = UCMA_NEXT(ioctl_fn, ioctl);
	va_list ap;
	void *arg;

	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!fn)
		UCMA_NO_NEXT();
	if (ioctl_wanted(request) && !ioctl_unlend(request, arg))
		return -1;
	return fn(fd, request, arg);
}

DEVICE_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	setsockopt_fn fn = UCMA_NEXT(setsockopt_fn, setsockopt);

	if (!fn)
		UCMA_NO_NEXT();
	if (sockopt_wanted(level, name) && !sockopt_unlend(val, len))
		return -1;
	return fn(fd, level, name, val, len);
}

/*
 * libibverbs, under the versions its current ABI gives these names
 * (preload.map); the next definitions are looked up under the same ones.
 * struct ibv_pd and struct ibv_mr are passed through untouched.
 */
struct ibv_pd;
struct ibv_mr;

/* The leading fields of struct ibv_mr (<infiniband/verbs.h>). */
struct ibv_mr_head {
	void *context, *pd;
	uint64_t addr;
	uint64_t length;
};

typedef struct ibv_mr *(*reg_mr_fn)(struct ibv_pd *, void *, size_t, int);
typedef struct ibv_mr *(*reg_mr_iova_fn)(struct ibv_pd *, void *, size_t, uint64_t, int);
typedef struct ibv_mr *(*reg_mr_iova2_fn)(struct ibv_pd *, void *, size_t, uint64_t, unsigned);
typedef int (*rereg_mr_fn)(struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int);

/* @name at @version as the loaded @object defines it, or NULL (also when
 * that is this library's own, @self). */
static void *verbs_in(const char *object, const char *name, const char *version, void *self)
{
	void *h = object ? dlopen(object, RTLD_LAZY | RTLD_NOLOAD) : NULL, *fn = NULL;

	if (h) {
		fn = dlvsym(h, name, version);
		dlclose(h);
	}
	return fn == self ? NULL : fn;	/* (the program's scope holds this library) */
}

/*
 * The next definition: the one after this library in the global scope;
 * else, when libibverbs was loaded by dlopen() without RTLD_GLOBAL (by a
 * plug-in linked to it, or by the program itself), the one the caller's
 * object sees among its own dependencies (libibverbs's ibv_reg_mr() calls
 * ibv_reg_mr_iova2() through its PLT, which binds here), or libibverbs's
 * by its name.  Only a definition found is kept.
 */
static void *verbs_next(void **cache, const char *name, const char *version, void *self,
			const void *caller)
{
	void *fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
	Dl_info info;

	if (fn)
		return fn;
	fn = dlvsym(RTLD_NEXT, name, version);
	if (!fn && dladdr(caller, &info) && info.dli_fname)
		fn = verbs_in(info.dli_fname, name, version, self);
	if (!fn)
		fn = verbs_in("libibverbs.so.1", name, version, self);
	if (fn)
		__atomic_store_n(cache, fn, __ATOMIC_RELEASE);
	return fn;
}

#define VERBS_NEXT(type, name, version)                                                 \
	({                                                                              \
		static void *cache_;                                                    \
		(type)verbs_next(&cache_, #name, version, (void *)name,                 \
				 __builtin_extract_return_addr(__builtin_return_address(0))); \
	})

/* A region of @len bytes at @addr with @access: off the lent frames,
 * unless the device follows the page tables (on-demand paging). */
static bool mr_unlend(const void *addr, size_t len, unsigned access)
{
	return (access & IBV_ON_DEMAND) || unlend_pinned((uintptr_t)addr, len);
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
			       int access);
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				unsigned access);
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
		 int access);

DEVICE_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	reg_mr_fn fn = VERBS_NEXT(reg_mr_fn, ibv_reg_mr, "IBVERBS_1.1");

	if (!fn) {
		errno = ENOSYS;
		return NULL;
	}
	if (!mr_unlend(addr, len, (unsigned)access))
		return NULL;
	return fn(pd, addr, len, access);
}

DEVICE_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len,
					     uint64_t iova, int access)
{
	reg_mr_iova_fn fn = VERBS_NEXT(reg_mr_iova_fn, ibv_reg_mr_iova, "IBVERBS_1.7");

	if (!fn) {
		errno = ENOSYS;
		return NULL;
	}
	if (!mr_unlend(addr, len, (unsigned)access))
		return NULL;
	return fn(pd, addr, len, iova, access);
}

DEVICE_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len,
					      uint64_t iova, unsigned access)
{
	reg_mr_iova2_fn fn = VERBS_NEXT(reg_mr_iova2_fn, ibv_reg_mr_iova2, "IBVERBS_1.8");

	if (!fn) {
		errno = ENOSYS;
		return NULL;
	}
	if (!mr_unlend(addr, len, access))
		return NULL;
	return fn(pd, addr, len, iova, access);
}

DEVICE_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
			       size_t len, int access)
{
	rereg_mr_fn fn = VERBS_NEXT(rereg_mr_fn, ibv_rereg_mr, "IBVERBS_1.1");

	if (!fn) {
		errno = ENOSYS;
		return IBV_REREG_ERR_INPUT;
	}
	/* Without IBV_REREG_MR_CHANGE_ACCESS @access says nothing: whether
	 * the region is on-demand is not known, so it is taken back.  A
	 * change of access alone may turn an on-demand region into a pinned
	 * one over its present range (the region's addr and length). */
	if ((flags & IBV_REREG_TRANSLATION) &&
	    !mr_unlend(addr, len, (flags & IBV_REREG_ACCESS) ? (unsigned)access : 0))
		return IBV_REREG_ERR_INPUT;
	if (!(flags & IBV_REREG_TRANSLATION) && (flags & IBV_REREG_ACCESS) && mr &&
	    !(access & IBV_ON_DEMAND)) {
		struct ibv_mr_head r;

		if (ucma_preload_read_user(&r, mr, sizeof(r)) && !unlend_pinned(r.addr, r.length))
			return IBV_REREG_ERR_INPUT;
	}
	return fn(mr, flags, pd, addr, len, access);
}

#endif /* __x86_64__ || __aarch64__ */
