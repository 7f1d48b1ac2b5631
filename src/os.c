/*
 * os.c - the one interface between ucma and the kernel's memory calls.
 *
 * Every mmap, munmap, mremap, madvise, mlock, mbind and thread creation of
 * the library goes through the function table `ucma_os`, and so do the
 * calls that make the files backing the CMA areas (memfd_create,
 * ftruncate, fallocate, and the pwrite that copies them for the child of a
 * fork), and the userfaultfd calls that take lent frames back from the
 * heap (lend.c).  The installed library keeps it pointing at the real calls; the
 * test build (UCMA_TEST_HOOKS) lets tests replace entries to inject faults
 * (mmap failing, hugepages unavailable, thread creation refused) and
 * restore them with ucma_os_reset().  Nothing else in src/ calls these
 * system calls directly.
 *
 * Also here: facts about the machine that backing decisions need (free
 * hugetlb pages per size, whether transparent huge pages are usable, for
 * private memory and for shmem), and physical address look-ups through
 * /proc/self/pagemap.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "raw_syscall.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * The preloaded library's madvise(), mremap(), munmap(), mlock(), pread(),
 * pwrite() and ioctl() (preload/) take lent frames back before the
 * program's calls, and must let the library's own calls through.  Compiled into the
 * preloaded library (UCMA_PRELOAD), the library makes those calls with the
 * system call instruction, so they never reach them.  A mark set around
 * the call, as before, had a window: a signal that arrives during the
 * call runs its handler as the system call returns, mark still set, and
 * the handler's own madvise() on lent heap memory went through unchecked
 * (a MADV_DONTNEED then left the frame's contents in place).  Elsewhere
 * the C library's calls are made: libucma.so has no such functions (with
 * the preloaded library loaded too, its copy of the allocator is the one
 * called), and they exist only where raw_syscall.h does.
 */
#if defined(UCMA_PRELOAD) && defined(UCMA_HAVE_RAW_SYSCALL)
#define OS_MEM(libc_call, nr, a1, a2, a3, a4, a5, a6)                                       \
	ucma_raw_result(ucma_raw_syscall6(nr, (long)(a1), (long)(a2), (long)(a3), (long)(a4), \
					  (long)(a5), (long)(a6)))
#else
#define OS_MEM(libc_call, nr, a1, a2, a3, a4, a5, a6) (libc_call)
#endif

static void *os_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)OS_MEM(mmap(addr, len, prot, flags, fd, off), SYS_mmap, addr, len, prot,
			      flags, fd, off);
}

static int os_munmap(void *addr, size_t len)
{
	return (int)OS_MEM(munmap(addr, len), SYS_munmap, addr, len, 0, 0, 0, 0);
}

static void *os_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	return (void *)OS_MEM(mremap(old, old_len, new_len, flags, new_addr), SYS_mremap, old,
			      old_len, new_len, flags, new_addr, 0);
}

static int os_madvise(void *addr, size_t len, int advice)
{
	return (int)OS_MEM(madvise(addr, len, advice), SYS_madvise, addr, len, advice, 0, 0, 0);
}

static int os_mlock(const void *addr, size_t len)
{
	return (int)OS_MEM(mlock(addr, len), SYS_mlock, addr, len, 0, 0, 0, 0);
}

static int os_munlock(const void *addr, size_t len)
{
	return (int)OS_MEM(munlock(addr, len), SYS_munlock, addr, len, 0, 0, 0, 0);
}

/* The raw system call: libnuma's wrapper would pull its own state in. */
static long os_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
		     unsigned long maxnode, unsigned flags)
{
	return syscall(SYS_mbind, addr, len, mode, nodemask, maxnode, flags);
}

static int os_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			    void *arg)
{
	return pthread_create(t, attr, fn, arg);
}

/*
 * Free pages in the hugetlb pool of one page size.  Read without stdio:
 * this may run during start-up inside malloc.
 */
static int os_memfd_create(const char *name, unsigned flags)
{
	return memfd_create(name, flags);
}

static int os_ftruncate(int fd, off_t len)
{
	return ftruncate(fd, len);
}

static int os_fallocate(int fd, int mode, off_t off, off_t len)
{
	return fallocate(fd, mode, off, len);
}

static ssize_t os_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	return OS_MEM(pwrite(fd, buf, len, off), SYS_pwrite64, fd, buf, len, off, 0, 0);
}

static ssize_t os_pread(int fd, void *buf, size_t len, off_t off)
{
	return OS_MEM(pread(fd, buf, len, off), SYS_pread64, fd, buf, len, off, 0, 0);
}

/*
 * A new userfaultfd (heap lending, lend.c): the system call first, then
 * /dev/userfaultfd, which an administrator can open to users that the
 * system call refuses (vm.unprivileged_userfaultfd=0).  Never
 * UFFD_USER_MODE_ONLY: faults taken by the kernel itself must block too.
 */
static int os_userfaultfd(int flags)
{
	int fd = (int)syscall(SYS_userfaultfd, flags), dev, err;

	if (fd >= 0 || (errno != EPERM && errno != EACCES && errno != ENOSYS))
		return fd;
	err = errno;
	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		errno = err;
		return -1;
	}
	fd = (int)OS_MEM(ioctl(dev, USERFAULTFD_IOC_NEW, flags), SYS_ioctl, dev,
			 USERFAULTFD_IOC_NEW, flags, 0, 0, 0);
	err = errno;
	ucma_os_close(dev);
	errno = err;
	return fd;
}

static int os_uffd_ioctl(int fd, unsigned long request, void *arg)
{
	return (int)OS_MEM(ioctl(fd, request, arg), SYS_ioctl, fd, request, arg, 0, 0, 0);
}

/* The start of the kernel file at @path, as a string in @buf of @len
 * bytes, read without stdio (no allocation); false with errno when it
 * cannot be read (ENODATA: it is empty). */
static bool read_text(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC), err;

	if (fd < 0)
		return false;
	n = read(fd, buf, len - 1);
	err = n < 0 ? errno : ENODATA;
	ucma_os_close(fd);
	if (n <= 0) {
		errno = err;
		return false;
	}
	buf[n] = '\0';
	return true;
}

/* One number of /sys/kernel/mm/hugepages/hugepages-<size>kB/, or -1. */
static long hugetlb_number(size_t page_size, const char *name)
{
	char path[128], buf[32];

	snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%zukB/%s",
		 page_size >> 10, name);
	if (!read_text(path, buf, sizeof(buf)))
		return -1;
	return strtol(buf, NULL, 10);
}

/*
 * The free pages of the pool, and as many more as the overcommit limit
 * still allows (nr_overcommit_hugepages less the surplus pages already
 * made): the kernel makes those surplus pages on demand when it finds
 * the memory, and a file of them is as good as one of the pool.  Should
 * it not find them, fallocate() fails and the next backing is taken.
 */
static long os_hugetlb_free_pages(size_t page_size)
{
	long free_pages = hugetlb_number(page_size, "free_hugepages");
	long over = hugetlb_number(page_size, "nr_overcommit_hugepages");
	long surplus = hugetlb_number(page_size, "surplus_hugepages");

	if (free_pages < 0)
		return -1;
	if (over > 0 && surplus >= 0 && over > surplus)
		free_pages += over - surplus;
	return free_pages;
}

static uint64_t at_most(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* The number at the start of the kernel file @dir/@name, or UINT64_MAX
 * when it cannot be read or says "max" (no limit). */
static uint64_t cgroup_number(const char *dir, const char *name)
{
	char path[640], buf[32];

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path) ||
	    !read_text(path, buf, sizeof(buf)) || buf[0] < '0' || buf[0] > '9')
		return UINT64_MAX;
	return strtoull(buf, NULL, 10);
}

/* What the memory cgroup at @dir (a v2 directory) and each of its
 * ancestors up to the mount's root still allow: the least of limit less
 * usage, UINT64_MAX where none has a limit. */
static uint64_t cgroup2_headroom(char *dir, size_t root_len)
{
	uint64_t least = UINT64_MAX;

	for (;;) {
		uint64_t max = cgroup_number(dir, "memory.max"),
			 cur = cgroup_number(dir, "memory.current");
		char *slash;

		if (max != UINT64_MAX && cur != UINT64_MAX)
			least = at_most(least, max > cur ? max - cur : 0);
		slash = strrchr(dir, '/');
		if (!slash || (size_t)(slash - dir) < root_len)
			return least;
		*slash = '\0';
	}
}

/* The same for the v1 memory cgroup at @dir: its hierarchical limit (its
 * ancestors' included) less its usage. */
static uint64_t cgroup1_headroom(const char *dir)
{
	char stat[2048], path[640], *hl;	/* the limit is in its first lines */
	uint64_t usage = cgroup_number(dir, "memory.usage_in_bytes"), limit;

	snprintf(path, sizeof(path), "%s/memory.stat", dir);
	hl = read_text(path, stat, sizeof(stat)) ? strstr(stat, "hierarchical_memory_limit ") :
						    NULL;
	limit = hl ? strtoull(hl + strlen("hierarchical_memory_limit "), NULL, 10) :
		     cgroup_number(dir, "memory.limit_in_bytes");
	/* "No limit" is the largest multiple of the page size. */
	if (usage == UINT64_MAX || limit >= ((uint64_t)1 << 62))
		return UINT64_MAX;
	return limit > usage ? limit - usage : 0;
}

/*
 * What the process's memory cgroup still allows, from /proc/self/cgroup:
 * cgroup v2 ("0::/path", every ancestor's memory.max counted), or v1's
 * memory controller (the cgroup's hierarchical limit, its ancestors'
 * included, less its usage).  UINT64_MAX when there is no limit or it
 * cannot be read.  In a container the mount shows the container's own
 * cgroup as its root, which /proc/self/cgroup then names "/".
 */
static uint64_t cgroup_headroom(void)
{
	static const char v2[] = "/sys/fs/cgroup", v1[] = "/sys/fs/cgroup/memory";
	char buf[2048], dir[512];	/* longer paths: not looked at */
	uint64_t least = UINT64_MAX;

	if (!read_text("/proc/self/cgroup", buf, sizeof(buf)))
		return UINT64_MAX;
	for (char *line = buf, *next; line && *line; line = next) {
		const char *mount;
		char *ctl, *path;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		ctl = strchr(line, ':');
		path = ctl ? strchr(ctl + 1, ':') : NULL;
		if (!path)
			continue;
		*path++ = '\0';
		ctl++;
		/* "0::/path" is v2's line; v1 names its controllers. */
		mount = !*ctl ? v2 : strstr(ctl, "memory") ? v1 : NULL;
		if (!mount || (size_t)snprintf(dir, sizeof(dir), "%s%s", mount,
					       strcmp(path, "/") == 0 ? "" : path) >= sizeof(dir))
			continue;
		least = at_most(least, mount == v2 ? cgroup2_headroom(dir, sizeof(v2) - 1) :
						     cgroup1_headroom(dir));
	}
	return least;
}

/* MemAvailable, or what the memory cgroup allows where that is less. */
static uint64_t os_mem_available(void)
{
	char buf[4096], *line;
	uint64_t avail, cg;

	if (!read_text("/proc/meminfo", buf, sizeof(buf)))
		return 0;
	line = strstr(buf, "MemAvailable:");
	if (!line)
		return 0;
	avail = strtoull(line + strlen("MemAvailable:"), NULL, 10) << 10;	/* kB */
	cg = cgroup_headroom();
	/* (Nothing left is 1, not 0, which callers read as "unknown".) */
	return cg < avail ? (cg ? cg : 1) : avail;
}

static int os_overcommit_mode(void)
{
	char buf[16];

	if (!read_text("/proc/sys/vm/overcommit_memory", buf, sizeof(buf)))
		return -1;
	return (int)strtol(buf, NULL, 10);
}

struct ucma_os_ops ucma_os = {
	.mmap = os_mmap,
	.munmap = os_munmap,
	.mremap = os_mremap,
	.madvise = os_madvise,
	.mlock = os_mlock,
	.munlock = os_munlock,
	.mbind = os_mbind,
	.thread_create = os_thread_create,
	.hugetlb_free_pages = os_hugetlb_free_pages,
	.mem_available = os_mem_available,
	.overcommit_mode = os_overcommit_mode,
	.memfd_create = os_memfd_create,
	.ftruncate = os_ftruncate,
	.fallocate = os_fallocate,
	.pwrite = os_pwrite,
	.pread = os_pread,
	.userfaultfd = os_userfaultfd,
	.uffd_ioctl = os_uffd_ioctl,
};

/* Set once MADV_POPULATE_WRITE was refused as unknown (EINVAL: a kernel
 * before 5.14): ucma_os_populate() stops asking. */
static _Atomic bool populate_unknown;

/*
 * ucma_os_populate() - map and zero-fill the pages of [addr, addr + len)
 * in one call (MADV_POPULATE_WRITE), so that the writes which follow do
 * not fault page by page.  An optimisation only: where the kernel lacks
 * the advice it is not asked again, and the writes fault as they would
 * have.  Returns 0; -1 with errno ENOTSUP where the kernel lacks it, or
 * the error of the call (ENOMEM, EFAULT, EINTR...) for the caller to count.
 */
int ucma_os_populate(void *addr, size_t len)
{
	if (atomic_load_explicit(&populate_unknown, memory_order_relaxed)) {
		errno = ENOTSUP;
		return -1;
	}
	if (ucma_os.madvise(addr, len, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno == EINVAL) {
		atomic_store_explicit(&populate_unknown, true, memory_order_relaxed);
		errno = ENOTSUP;
	}
	return -1;
}

/* The real calls back, and MADV_POPULATE_WRITE asked again: a test that
 * refused it as unknown leaves the next one a kernel that has it. */
void ucma_os_reset(void)
{
	atomic_store_explicit(&populate_unknown, false, memory_order_relaxed);
	ucma_os.mmap = os_mmap;
	ucma_os.munmap = os_munmap;
	ucma_os.mremap = os_mremap;
	ucma_os.madvise = os_madvise;
	ucma_os.mlock = os_mlock;
	ucma_os.munlock = os_munlock;
	ucma_os.mbind = os_mbind;
	ucma_os.thread_create = os_thread_create;
	ucma_os.hugetlb_free_pages = os_hugetlb_free_pages;
	ucma_os.mem_available = os_mem_available;
	ucma_os.overcommit_mode = os_overcommit_mode;
	ucma_os.memfd_create = os_memfd_create;
	ucma_os.ftruncate = os_ftruncate;
	ucma_os.fallocate = os_fallocate;
	ucma_os.pwrite = os_pwrite;
	ucma_os.pread = os_pread;
	ucma_os.userfaultfd = os_userfaultfd;
	ucma_os.uffd_ioctl = os_uffd_ioctl;
}

/* The raw system call: a preloaded close() keeps the program from closing
 * the library's own descriptors (ucma_owns_fd()), and must not keep the
 * library from closing them.  Not syscall(): the preloaded library has one
 * too, which sends SYS_close to that same guard (a fork child's close of
 * the parent's area file was refused there, and the file with the whole
 * area stayed open while the child lived). */
int ucma_os_close(int fd)
{
#if defined(UCMA_PRELOAD) && defined(UCMA_HAVE_RAW_SYSCALL)
	return (int)ucma_raw_result(ucma_raw_syscall6(SYS_close, fd, 0, 0, 0, 0, 0));
#else
	return (int)syscall(SYS_close, fd);
#endif
}

bool ucma_os_range_mapped(void *addr, size_t len)
{
	unsigned char vec[64];
	size_t step = sizeof(vec) << UCMA_PAGE_SHIFT;

	for (size_t off = 0; off < len; off += step)
		if (mincore((char *)addr + off, len - off < step ? len - off : step, vec) != 0 &&
		    errno == ENOMEM)
			return false;
	return true;
}

/*
 * A close-on-exec copy of @fd at the lowest free number from 256 on (out
 * of the way of programs that expect low numbers, and not so high that
 * the kernel's descriptor table grows for it), or from half of
 * RLIMIT_NOFILE when that is lower, or any free one from 3; -1 with
 * errno.  The raw system call: the preloaded fcntl() looks up the C
 * library's, which must not happen inside the first malloc.
 */
int ucma_os_dup_high(int fd)
{
	struct rlimit rl;
	int high = 256, to;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 2 < (rlim_t)high)
		high = (int)(rl.rlim_cur / 2);
	to = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, high > 3 ? high : 3);
	if (to < 0 && (errno == EINVAL || errno == EMFILE))
		to = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 3);
	return to;
}

int ucma_os_fd_high(int fd)
{
	int err = errno, to;

	if (fd < 0)
		return fd;
	to = ucma_os_dup_high(fd);
	if (to < fd) {
		/* (The fallback found a lower free number: keep @fd.) */
		if (to >= 0)
			ucma_os_close(to);
		errno = err;
		return fd;
	}
	ucma_os_close(fd);
	errno = err;
	return to;
}

long ucma_os_hugetlb_free_pages(size_t page_size)
{
	return ucma_os.hugetlb_free_pages(page_size);
}

/* The setting selected in a transparent_hugepage file ("[madvise]"), read
 * without stdio into @buf; false when the file cannot be read. */
static bool thp_setting(const char *file, char *buf, size_t len)
{
	char path[96];

	snprintf(path, sizeof(path), "/sys/kernel/mm/transparent_hugepage/%s", file);
	return read_text(path, buf, len);
}

uint64_t ucma_os_mem_available(void)
{
	return ucma_os.mem_available();
}

bool ucma_os_overcommit_strict(void)
{
	return ucma_os.overcommit_mode() == 2;
}

/* THP is usable unless the administrator set it to "never", or the
 * kernel has none (no settings file).  A file that exists but cannot be
 * read now (a full descriptor table: the library starts at the program's
 * first call) says nothing: MADV_HUGEPAGE, asked then, answers. */
bool ucma_os_thp_available(void)
{
	char buf[128];

	if (!thp_setting("enabled", buf, sizeof(buf)))
		return errno != ENOENT;
	return strstr(buf, "[never]") == NULL;
}

/* Does every private mapping get huge pages, without MADV_HUGEPAGE? */
bool ucma_os_thp_always(void)
{
	char buf[128];

	return thp_setting("enabled", buf, sizeof(buf)) && strstr(buf, "[always]") != NULL;
}

/*
 * Does MADV_HUGEPAGE give shmem mappings huge pages?  Only when
 * shmem_enabled selects advise, always, within_size or force; "never"
 * (the default of most distributions) and "deny" leave shmem on 4 KiB
 * pages whatever is asked.
 */
bool ucma_os_shmem_thp_available(void)
{
	char buf[128];

	return thp_setting("shmem_enabled", buf, sizeof(buf)) && strstr(buf, "[never]") == NULL &&
	       strstr(buf, "[deny]") == NULL;
}

#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_PFN_MASK ((1ull << 55) - 1)

/* Read @n pagemap entries from virtual page @vpn; false past the end of
 * the address space (or on a short read). */
static bool pagemap_read(int fd, uintptr_t vpn, uint64_t *entries, size_t n)
{
	return pread(fd, entries, n * sizeof(*entries), (off_t)(vpn * sizeof(*entries))) ==
	       (ssize_t)(n * sizeof(*entries));
}

static int pagemap_open(void)
{
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		errno = ENOTSUP;
	return fd;
}

/*
 * ucma_os_pagemap() - physical address of the byte at @addr, read from
 * /proc/self/pagemap at the time of the call (the kernel may move ordinary
 * pages at any time, even locked ones).  Returns 0, or -1 with errno:
 * EINVAL when the page is not present, EPERM when the kernel hides frame
 * numbers from this process (a zero PFN is "unknown", never address 0),
 * ENOTSUP when there is no pagemap.
 */
int ucma_os_pagemap(const void *addr, uint64_t *phys)
{
	uint64_t entry, pfn;
	int fd = pagemap_open();
	bool got;

	if (fd < 0)
		return -1;
	got = pagemap_read(fd, (uintptr_t)addr >> UCMA_PAGE_SHIFT, &entry, 1);
	close(fd);
	/* No entry (outside the address space) or no page there yet. */
	if (!got || !(entry & PAGEMAP_PRESENT)) {
		errno = EINVAL;
		return -1;
	}
	pfn = entry & PAGEMAP_PFN_MASK;
	if (pfn == 0) {
		errno = EPERM;
		return -1;
	}
	*phys = (pfn << UCMA_PAGE_SHIFT) + ((uintptr_t)addr & (UCMA_PAGE_SIZE - 1));
	return 0;
}

/*
 * One pass over the pagemap entries of @npages pages from the page-aligned
 * @addr, a few thousand at a time: @visit sees each entry with its index
 * and returns 0 to go on, 1 to stop there, -1 (errno set) to fail.
 * Returns the index the walk stopped at, @npages when it did not stop, or
 * -1 with errno (ENOTSUP without pagemap).
 */
static long pagemap_scan(const void *addr, size_t npages,
			 int (*visit)(void *ctx, size_t i, uint64_t entry), void *ctx)
{
	enum { CHUNK = 512 };
	uint64_t entries[CHUNK];
	uintptr_t vpn = (uintptr_t)addr >> UCMA_PAGE_SHIFT;
	long ret = (long)npages;
	int fd = pagemap_open();

	if (fd < 0)
		return -1;
	for (size_t done = 0; done < npages && ret == (long)npages;) {
		size_t n = npages - done < CHUNK ? npages - done : CHUNK;

		if (!pagemap_read(fd, vpn + done, entries, n)) {
			errno = ENOTSUP;
			ret = -1;
			break;
		}
		for (size_t i = 0; i < n; i++) {
			int v = visit(ctx, done + i, entries[i]);

			if (v != 0) {
				ret = v > 0 ? (long)(done + i) : -1;
				break;
			}
		}
		done += n;
	}
	close(fd);
	return ret;
}

struct phys_run_scan {
	uint64_t first;			/* frame number of page 0 */
	bool absent;			/* the run ended at a page not present */
};

static int phys_run_visit(void *ctx, size_t i, uint64_t entry)
{
	struct phys_run_scan *r = ctx;
	uint64_t pfn = entry & PAGEMAP_PFN_MASK;

	if (!(entry & PAGEMAP_PRESENT)) {
		r->absent = true;
		return 1;
	}
	if (pfn == 0) {
		errno = EPERM;
		return -1;
	}
	if (i == 0)
		r->first = pfn;
	return i > 0 && pfn != r->first + i;
}

/*
 * ucma_os_phys_run() - how many of the @npages pages from the page-aligned
 * @addr are present and physically contiguous with the first, read from
 * /proc/self/pagemap in a few large reads.  *@absent tells whether the run
 * ended at a page that is not present (so its frame is unknown yet)
 * rather than at a frame out of sequence.  Returns the count (@npages
 * when the whole range is contiguous), or -1 with errno EPERM when the
 * kernel hides frame numbers from this process, ENOTSUP without pagemap.
 */
long ucma_os_phys_run(const void *addr, size_t npages, bool *absent)
{
	struct phys_run_scan r = { 0, false };
	long k = pagemap_scan(addr, npages, phys_run_visit, &r);

	*absent = r.absent;
	return k;
}

static int present_visit(void *ctx, size_t i, uint64_t entry)
{
	(void)ctx;
	(void)i;
	return (entry & PAGEMAP_PRESENT) != 0;
}

/*
 * ucma_os_next_present() - the index of the first page present in the
 * @npages pages from the page-aligned @addr, @npages when none is.  -1
 * with errno ENOTSUP without pagemap.
 */
long ucma_os_next_present(const void *addr, size_t npages)
{
	return pagemap_scan(addr, npages, present_visit, NULL);
}

/*
 * ucma_os_pagemap_stride() - the physical address of the first page of
 * each of @n pieces of @stride bytes from the page-aligned @addr, read from
 * /proc/self/pagemap (one small read per piece: the pieces are frames of
 * a CMA area, and their pages in between need not be looked at).  A piece
 * whose first page is not present gets 0.  Returns 0, or -1 with errno
 * EPERM when the kernel hides frame numbers from this process, ENOTSUP
 * without pagemap.
 */
int ucma_os_pagemap_stride(const void *addr, size_t stride, size_t n, uint64_t *phys)
{
	uintptr_t vpn = (uintptr_t)addr >> UCMA_PAGE_SHIFT;
	size_t step = stride >> UCMA_PAGE_SHIFT;
	int fd = pagemap_open(), rc = 0;

	if (fd < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint64_t entry;

		if (!pagemap_read(fd, vpn + i * step, &entry, 1)) {
			errno = ENOTSUP;
			rc = -1;
			break;
		}
		phys[i] = 0;
		if (!(entry & PAGEMAP_PRESENT))
			continue;
		if ((entry & PAGEMAP_PFN_MASK) == 0) {
			errno = EPERM;
			rc = -1;
			break;
		}
		phys[i] = (entry & PAGEMAP_PFN_MASK) << UCMA_PAGE_SHIFT;
	}
	close(fd);
	return rc;
}

int ucma_thread_start(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *))
{
	sigset_t all, old;
	int rc;

	/* Signals are the application's business: none lands on a thread
	 * of the library. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = ucma_os.thread_create(t, attr, fn, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

unsigned ucma_cpus_allowed(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return 0;
	return (unsigned)CPU_COUNT(&set);
}

long ucma_os_threads_runnable(void)
{
	char buf[128];
	const char *p = buf;
	long v = 0;

	if (!read_text("/proc/loadavg", buf, sizeof(buf)))
		return -1;
	/* "0.10 0.20 0.30 2/345 6789": the fourth field's numerator. */
	for (int field = 0; field < 3; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -1;
		p++;
	}
	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9' && v < 1000000)
		v = v * 10 + (*p++ - '0');
	return *p == '/' ? v : -1;
}

uint64_t ucma_os_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
