/*
 * test_fail_nth.c - a systematic fault-injection sweep, in the spirit of
 * the Linux kernel's fail_nth.
 *
 * For each entry of the operating-system table ucma_os that can fail, and
 * for N = 1, 2, 3, ... until the workload makes fewer than N calls of that
 * kind, a fresh child process runs one workload in which only the N-th
 * call of that kind fails (with a plausible errno).  The workload covers
 * start-up, the malloc family, contiguous buffers, handles and pins,
 * compaction, heap lending and taking back (with threads writing the lent
 * memory), and a fork whose child checks its data.  Every block written
 * carries a pattern derived from a seed; every live block is checked at
 * each step.  Each run is classified:
 *
 *   OK               the API returned an error with errno, or the fault was
 *                    absorbed; data intact, nothing leaked
 *   DOCUMENTED-FATAL the library aborted with a message on a path its
 *                    documentation or source says is fatal
 *   DEFECT           crash without a message, hang, data corruption, an
 *                    API failure without errno or a success that did not
 *                    happen, a leaked mapping or descriptor, an internal
 *                    assertion, a sanitizer's report, an abort on a path
 *                    that should return an error
 *
 * A run without a fault comes first: every call of it must succeed, and
 * what it leaves after its cleanup (descriptors, mappings) is the baseline
 * the leak check of every other run compares with.
 *
 * Usage: test_fail_nth [OPTION...] [OP...]
 *   OP         an op to sweep (all of them by default): its name, or a
 *              file named after it (make check passes
 *              tests/unit/fail-nth/OP.fnth, one test per op)
 *   -o OP,...  the same as operands
 *   -n N       run N only (test_fail_nth -o mmap -n 17 -v reproduces one
 *              run, its log on stdout); -n 0: the run without a fault
 *   -e ERRNO   inject this errno (a name such as EINTR, or a number)
 *   -m MAX     at most MAX runs per op, spread over its calls (the
 *              sanitizer builds' make check sweeps a few only)
 *   -t SEC     time limit of one run (30)
 *   -k DIR     keep the logs of runs not OK in DIR
 *   -g         gdb stacks into the log of a run that hangs
 *   -v         print each run's log
 *   -c frames|private|populate  the configuration: CMA areas on shmem
 *              frames with heap lending (default), on private THP, or a
 *              prefaulted arena on plain pages
 *
 * Output is TAP, one test per op; each run is a comment line with its
 * verdict, the failed call and where the library made it.  The frames
 * configuration needs a userfaultfd with write-protection for shmem; where
 * there is none the test is skipped.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "frames.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/userfaultfd.h>
#include <numa.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "testutil.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define PAGE ((size_t)4096)

/* ------------------------------------------------------------------------ */
/* The ops                                                                   */
/* ------------------------------------------------------------------------ */

enum op {
	OP_MMAP, OP_MUNMAP, OP_MREMAP, OP_MADVISE, OP_MLOCK, OP_MUNLOCK, OP_MBIND,
	OP_THREAD, OP_MEMFD, OP_FTRUNCATE, OP_FALLOCATE, OP_PWRITE, OP_PREAD,
	OP_UFFD, OP_UFFD_IOCTL, OP_NR
};

/* Each op's name and the errno the kernel would most plausibly give. */
static const struct {
	const char *name;
	int err;		/* 0 for uffd_ioctl: chosen per request */
} ops[OP_NR] = {
	[OP_MMAP] = { "mmap", ENOMEM },
	[OP_MUNMAP] = { "munmap", ENOMEM },
	[OP_MREMAP] = { "mremap", ENOMEM },
	[OP_MADVISE] = { "madvise", ENOMEM },
	[OP_MLOCK] = { "mlock", ENOMEM },
	[OP_MUNLOCK] = { "munlock", ENOMEM },
	[OP_MBIND] = { "mbind", ENOMEM },
	[OP_THREAD] = { "thread_create", EAGAIN },
	[OP_MEMFD] = { "memfd_create", EMFILE },
	[OP_FTRUNCATE] = { "ftruncate", EFBIG },
	[OP_FALLOCATE] = { "fallocate", ENOSPC },
	[OP_PWRITE] = { "pwrite", EIO },
	[OP_PREAD] = { "pread", EIO },
	[OP_UFFD] = { "userfaultfd", EMFILE },
	[OP_UFFD_IOCTL] = { "uffd_ioctl", 0 },
};

static const struct {
	int err;
	const char *name;
} errnos[] = {
	{ ENOMEM, "ENOMEM" }, { EAGAIN, "EAGAIN" }, { EMFILE, "EMFILE" }, { EFBIG, "EFBIG" },
	{ ENOSPC, "ENOSPC" }, { EIO, "EIO" }, { EINTR, "EINTR" }, { EINVAL, "EINVAL" },
	{ EFAULT, "EFAULT" }, { EBUSY, "EBUSY" }, { EPERM, "EPERM" }, { ENOENT, "ENOENT" },
	{ EEXIST, "EEXIST" }, { ENOTSUP, "ENOTSUP" }, { EDEADLK, "EDEADLK" },
};

static const char *errname(int e)
{
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (errnos[i].err == e)
			return errnos[i].name;
	return "E?";
}

/* An errno by name, or a number. */
static int errno_of(const char *s)
{
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (strcmp(s, errnos[i].name) == 0)
			return errnos[i].err;
	return atoi(s);
}

/*
 * What the runner, the run child and the workload's own fork child share
 * about one run, in a shared anonymous mapping: the runner sets the fault
 * up, the children count the calls and record the fault where it fires.
 */
struct run_record {
	_Atomic long count[OP_NR];	/* calls made, all processes of the run */
	int target;			/* the op that fails, -1: none */
	long nth;			/* its N-th call fails */
	int err;			/* with this errno; 0: the op's default */
	pid_t run_pid;			/* the run child (not its fork child) */
	_Atomic int fired;		/* how often the fault was injected */
	bool fired_in_fork_child;
	char fired_what[160];		/* the call and its arguments */
	uintptr_t unmap_lo, unmap_hi;	/* a failed munmap's range: left mapped, no leak */
	int bt_n;
	uintptr_t bt[24];		/* offsets in the executable, 0: elsewhere */
	char bt_elsewhere[24][64];	/* module+offset when not the executable */
};

static struct run_record *sh;
static struct ucma_os_ops real;		/* the table as the library set it up */
static uintptr_t exe_base;		/* the executable, the library linked in */
static char exe_path[512];

/* ------------------------------------------------------------------------ */
/* Mappings made through the table, for the leak check                       */
/* ------------------------------------------------------------------------ */

/*
 * Every mapping the library makes through the table, minus what it unmaps,
 * with the library's call site.  Any thread may map, a fork child inherits
 * the table; the lock is a flag taken with a bounded spin because a fork
 * child may inherit it held by a thread it does not have: the table is
 * then marked lost instead of hanging the run.
 */
#define MAX_RANGES 16384
static struct range {
	uintptr_t lo, hi;
	uintptr_t site;			/* the library's call, offset in the executable */
} ranges[MAX_RANGES];
static int nranges;
static bool ranges_lost;		/* the table overflowed or the lock stuck */
static atomic_flag ranges_lock = ATOMIC_FLAG_INIT;

static bool ranges_take(void)
{
	for (long i = 0; i < 50000000; i++)
		if (!atomic_flag_test_and_set_explicit(&ranges_lock, memory_order_acquire))
			return true;
	ranges_lost = true;
	return false;
}

static void ranges_give(void)
{
	atomic_flag_clear_explicit(&ranges_lock, memory_order_release);
}

static uintptr_t page_up(uintptr_t x)
{
	return (x + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
}

static void ranges_add(void *p, size_t len, void *caller)
{
	uintptr_t lo = (uintptr_t)p, hi = page_up(lo + len);

	if (!ranges_take())
		return;
	if (nranges < MAX_RANGES)
		ranges[nranges++] = (struct range){ lo, hi, (uintptr_t)caller - exe_base - 1 };
	else
		ranges_lost = true;
	ranges_give();
}

static void ranges_sub(void *p, size_t len)
{
	uintptr_t lo = (uintptr_t)p, hi = page_up(lo + len);

	if (!ranges_take())
		return;
	for (int i = 0; i < nranges; i++) {
		struct range r = ranges[i];

		if (r.hi <= lo || r.lo >= hi)
			continue;
		if (r.lo < lo && r.hi > hi) {		/* a hole in the middle */
			ranges[i].hi = lo;
			if (nranges < MAX_RANGES)
				ranges[nranges++] = (struct range){ hi, r.hi, r.site };
			else
				ranges_lost = true;
		} else if (r.lo < lo) {
			ranges[i].hi = lo;
		} else if (r.hi > hi) {
			ranges[i].lo = hi;
		} else {
			ranges[i--] = ranges[--nranges];
		}
	}
	ranges_give();
}

/* ------------------------------------------------------------------------ */
/* The fault                                                                 */
/* ------------------------------------------------------------------------ */

static const char *uffd_req_name(unsigned long req)
{
	switch (req) {
	case UFFDIO_API: return "UFFDIO_API";
	case UFFDIO_REGISTER: return "UFFDIO_REGISTER";
	case UFFDIO_UNREGISTER: return "UFFDIO_UNREGISTER";
	case UFFDIO_WAKE: return "UFFDIO_WAKE";
	case UFFDIO_WRITEPROTECT: return "UFFDIO_WRITEPROTECT";
	case UFFDIO_COPY: return "UFFDIO_COPY";
	case UFFDIO_ZEROPAGE: return "UFFDIO_ZEROPAGE";
	default: return "UFFDIO_?";
	}
}

static const char *advice_name(int adv)
{
	switch (adv) {
	case MADV_DONTNEED: return "MADV_DONTNEED";
	case MADV_HUGEPAGE: return "MADV_HUGEPAGE";
	case MADV_NOHUGEPAGE: return "MADV_NOHUGEPAGE";
	case MADV_DONTFORK: return "MADV_DONTFORK";
	case MADV_DOFORK: return "MADV_DOFORK";
	case MADV_POPULATE_WRITE: return "MADV_POPULATE_WRITE";
	case MADV_POPULATE_READ: return "MADV_POPULATE_READ";
	case MADV_FREE: return "MADV_FREE";
	case MADV_REMOVE: return "MADV_REMOVE";
	default: return "MADV_?";
	}
}

/* The errno a failed call gives: -e's, or the op's own. */
static int fault_errno(enum op op)
{
	return sh->err ? sh->err : ops[op].err;
}

/* As the kernel would: EAGAIN for write-protection while the mm changes
 * (a fork in progress), EINVAL for the rest. */
static int uffd_errno(unsigned long req)
{
	if (sh->err)
		return sh->err;
	return req == UFFDIO_WRITEPROTECT ? EAGAIN : EINVAL;
}

/* Does this call fail?  Counts it either way. */
static bool fail_now(enum op op)
{
	long n = atomic_fetch_add(&sh->count[op], 1) + 1;

	return sh->target == (int)op && n == sh->nth;
}

/* Record the injected fault: the call, the process, and the stack, as
 * offsets the runner resolves with addr2line after the run. */
__attribute__((format(printf, 1, 2))) static void fired(const char *fmt, ...)
{
	void *bt[24];
	int n;
	va_list ap;

	atomic_fetch_add(&sh->fired, 1);
	sh->fired_in_fork_child = getpid() != sh->run_pid;
	va_start(ap, fmt);
	vsnprintf(sh->fired_what, sizeof(sh->fired_what), fmt, ap);
	va_end(ap);
	n = backtrace(bt, 24);
	sh->bt_n = 0;
	for (int i = 1; i < n; i++) {		/* frame 0 is fired() */
		Dl_info di;
		int k = sh->bt_n++;

		sh->bt[k] = 0;
		sh->bt_elsewhere[k][0] = '\0';
		if (!dladdr(bt[i], &di))
			continue;
		if (di.dli_fbase == (void *)exe_base) {
			sh->bt[k] = (uintptr_t)bt[i] - exe_base - 1;
		} else if (di.dli_fname) {
			const char *base = strrchr(di.dli_fname, '/');

			snprintf(sh->bt_elsewhere[k], sizeof(sh->bt_elsewhere[k]), "%s+%#lx",
				 base ? base + 1 : di.dli_fname,
				 (unsigned long)((uintptr_t)bt[i] - (uintptr_t)di.dli_fbase));
		}
	}
}

/* The N-th call of @op fails: record it, set errno and return @ret. */
#define INJECT(op, ret, ...)                                                   \
	do {                                                                   \
		if (fail_now(op)) {                                            \
			fired(__VA_ARGS__);                                    \
			errno = fault_errno(op);                               \
			return ret;                                            \
		}                                                              \
	} while (0)

static void hold_take_back_window(void *piece, size_t len);

static void *w_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p;

	INJECT(OP_MMAP, MAP_FAILED, "mmap(%p, %zu, prot %#x, flags %#x, fd %d)", addr, len, prot,
	       flags, fd);
	p = real.mmap(addr, len, prot, flags, fd, off);
	/* MAP_FIXED replaces part of a mapping already counted. */
	if (p != MAP_FAILED && !(flags & MAP_FIXED))
		ranges_add(p, len, __builtin_return_address(0));
	return p;
}

static int w_munmap(void *addr, size_t len)
{
	int rc;

	if (fail_now(OP_MUNMAP)) {
		fired("munmap(%p, %zu)", addr, len);
		sh->unmap_lo = (uintptr_t)addr;
		sh->unmap_hi = (uintptr_t)addr + len;
		errno = fault_errno(OP_MUNMAP);
		return -1;
	}
	rc = real.munmap(addr, len);
	if (rc == 0)
		ranges_sub(addr, len);
	return rc;
}

static void *w_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	void *p;

	INJECT(OP_MREMAP, MAP_FAILED, "mremap(%p, %zu, %zu, flags %#x, %p)", old, old_len,
	       new_len, flags, new_addr);
	/* A take-back moves a piece over the heap's while the heap's is
	 * write-protected. */
	if (flags & MREMAP_FIXED)
		hold_take_back_window(new_addr, new_len);
	p = real.mremap(old, old_len, new_len, flags, new_addr);
	if (p != MAP_FAILED) {
		ranges_sub(old, old_len);
		if (!(flags & MREMAP_FIXED))
			ranges_add(p, new_len, __builtin_return_address(0));
	}
	return p;
}

static int w_madvise(void *addr, size_t len, int advice)
{
	INJECT(OP_MADVISE, -1, "madvise(%p, %zu, %s)", addr, len, advice_name(advice));
	return real.madvise(addr, len, advice);
}

static int w_mlock(const void *addr, size_t len)
{
	INJECT(OP_MLOCK, -1, "mlock(%p, %zu)", addr, len);
	return real.mlock(addr, len);
}

static int w_munlock(const void *addr, size_t len)
{
	INJECT(OP_MUNLOCK, -1, "munlock(%p, %zu)", addr, len);
	return real.munlock(addr, len);
}

static long w_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
		    unsigned long maxnode, unsigned flags)
{
	INJECT(OP_MBIND, -1, "mbind(%p, %lu, mode %d)", addr, len, mode);
	return real.mbind(addr, len, mode, nodemask, maxnode, flags);
}

/* pthread_create() reports its error as the return value, errno untouched. */
static int w_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			   void *arg)
{
	if (fail_now(OP_THREAD)) {
		Dl_info di;

		fired("thread_create(%s)",
		      dladdr((void *)(uintptr_t)fn, &di) && di.dli_sname ? di.dli_sname : "?");
		return fault_errno(OP_THREAD);
	}
	return real.thread_create(t, attr, fn, arg);
}

static int w_memfd_create(const char *name, unsigned flags)
{
	INJECT(OP_MEMFD, -1, "memfd_create(\"%s\", %#x)", name, flags);
	return real.memfd_create(name, flags);
}

static int w_ftruncate(int fd, off_t len)
{
	INJECT(OP_FTRUNCATE, -1, "ftruncate(%d, %lld)", fd, (long long)len);
	return real.ftruncate(fd, len);
}

static int w_fallocate(int fd, int mode, off_t off, off_t len)
{
	INJECT(OP_FALLOCATE, -1, "fallocate(%d, %d, %lld, %lld)", fd, mode, (long long)off,
	       (long long)len);
	return real.fallocate(fd, mode, off, len);
}

static ssize_t w_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	INJECT(OP_PWRITE, -1, "pwrite(%d, %p, %zu, %lld)", fd, buf, len, (long long)off);
	return real.pwrite(fd, buf, len, off);
}

static ssize_t w_pread(int fd, void *buf, size_t len, off_t off)
{
	INJECT(OP_PREAD, -1, "pread(%d, %p, %zu, %lld)", fd, buf, len, (long long)off);
	return real.pread(fd, buf, len, off);
}

static int w_userfaultfd(int flags)
{
	INJECT(OP_UFFD, -1, "userfaultfd(%#x)", flags);
	return real.userfaultfd(flags);
}

static int w_uffd_ioctl(int fd, unsigned long req, void *arg)
{
	if (fail_now(OP_UFFD_IOCTL)) {
		fired("uffd_ioctl(%d, %s) -> %s", fd, uffd_req_name(req),
		      errname(uffd_errno(req)));
		errno = uffd_errno(req);
		return -1;
	}
	return real.uffd_ioctl(fd, req, arg);
}

/* No hugetlb pool for this test, whatever the machine has: the same
 * workload everywhere (fallocate, used for hugetlb files only, is then
 * never called). */
static long w_hugetlb_free_pages(size_t page_size)
{
	(void)page_size;
	return 0;
}

static void install_wrappers(void)
{
	ucma_os.mmap = w_mmap;
	ucma_os.munmap = w_munmap;
	ucma_os.mremap = w_mremap;
	ucma_os.madvise = w_madvise;
	ucma_os.mlock = w_mlock;
	ucma_os.munlock = w_munlock;
	ucma_os.mbind = w_mbind;
	ucma_os.thread_create = w_thread_create;
	ucma_os.memfd_create = w_memfd_create;
	ucma_os.ftruncate = w_ftruncate;
	ucma_os.fallocate = w_fallocate;
	ucma_os.pwrite = w_pwrite;
	ucma_os.pread = w_pread;
	ucma_os.userfaultfd = w_userfaultfd;
	ucma_os.uffd_ioctl = w_uffd_ioctl;
	ucma_os.hugetlb_free_pages = w_hugetlb_free_pages;
}

/* ------------------------------------------------------------------------ */
/* The workload's book-keeping                                               */
/* ------------------------------------------------------------------------ */

enum kind { K_MALLOC, K_HANDLE, K_CONTIG };
static const char *const kind_name[] = { "malloc", "handle", "contig" };

/* A block the workload keeps, its contents the pattern of its seed. */
struct blk {
	enum kind kind;
	bool live;
	void *p;			/* malloc, contig */
	ucma_handle_t h;		/* handle */
	size_t size;
	uint64_t seed;
	unsigned flags;			/* contig: ucma_alloc()'s flags */
};

/*
 * Writer threads: word 0 of each page of their block counts up while the
 * block's frames are taken back; the rest of each page keeps its pattern.
 * A lost update or a changed byte is a defect; a writer that never comes
 * back from a write-protected page is a hang.
 */
struct writer {
	pthread_t t;
	char *buf;
	size_t len;
	uint64_t seed;
	uint64_t *last;			/* per page: the last number written */
	_Atomic bool stop;
	_Atomic bool resting;		/* between two passes */
	_Atomic uint64_t progress;	/* numbers written so far */
};

#define MAX_BLOCKS 1024
#define NWRITERS 2

/*
 * The workload's state, in the run child (its fork child gets a copy).
 * Every block it keeps is in blocks[]; verify_all() checks them all.
 */
static struct {
	struct blk blocks[MAX_BLOCKS];
	int nblocks;
	int defects;			/* FN DEFECT lines written */
	int api_errors;			/* API calls that failed with errno */
	uint64_t rng;
	struct writer writers[NWRITERS];
	_Atomic bool writers_on;	/* a take-back may catch the writers */
} wl = { .rng = 0x1234567 };

static uint64_t rnd(void)
{
	uint64_t z = (wl.rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * Word @i of a block with @seed.  Distinct for every word of a block (the
 * multiplier is odd) and between blocks (their seeds are random), never
 * zero in practice, and cheap: fill() and check() pass over hundreds of
 * MiB in each run.
 */
static inline uint64_t pat(uint64_t seed, size_t i)
{
	return seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
}

#define PATTERN_WORDS 512

/*
 * Words [first, first + n) of the pattern of @seed into @buf, this file's
 * own scratch: not instrumented by the sanitizers.  fill() and check()
 * copy and compare it with the blocks through memcpy() and memcmp(),
 * which the sanitizers check range by range, many times faster than word
 * by word (a ThreadSanitizer run took 10 s, most of it here).
 */
__attribute__((no_sanitize("address", "thread"))) static void
pattern_words(uint64_t *buf, uint64_t seed, size_t first, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pat(seed, first + i);
}

static void fill(void *p, size_t size, uint64_t seed)
{
	uint64_t buf[PATTERN_WORDS];
	size_t n = size / 8;

	for (size_t i = 0; i < n; i += PATTERN_WORDS) {
		size_t k = n - i < PATTERN_WORDS ? n - i : PATTERN_WORDS;

		pattern_words(buf, seed, i, k);
		memcpy((char *)p + i * 8, buf, k * 8);
	}
	for (size_t i = n * 8; i < size; i++)
		((unsigned char *)p)[i] = (unsigned char)pat(seed, i);
}

/* Offset of the first wrong byte, or SIZE_MAX. */
static size_t check(const void *p, size_t size, uint64_t seed)
{
	uint64_t buf[PATTERN_WORDS];
	size_t n = size / 8;

	for (size_t i = 0; i < n; i += PATTERN_WORDS) {
		size_t k = n - i < PATTERN_WORDS ? n - i : PATTERN_WORDS;

		pattern_words(buf, seed, i, k);
		if (memcmp((const char *)p + i * 8, buf, k * 8) == 0)
			continue;
		for (size_t j = 0; j < k; j++)
			if (memcmp((const char *)p + (i + j) * 8, &buf[j], 8) != 0)
				return (i + j) * 8;
	}
	for (size_t i = n * 8; i < size; i++)
		if (((const unsigned char *)p)[i] != (unsigned char)pat(seed, i))
			return i;
	return SIZE_MAX;
}

/* One line to fd 2, the run's log, in one write: the fork child and the
 * library's threads write there too. */
static void say(const char *tag, const char *fmt, va_list ap)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "FN %s [%d] ", tag, (int)getpid());

	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	strncat(line, "\n", sizeof(line) - strlen(line) - 1);
	if (write(2, line, strlen(line)) < 0)
		(void)0;	/* the log is gone: nothing to tell it */
}

__attribute__((format(printf, 1, 2))) static void defect(const char *fmt, ...)
{
	va_list ap;

	wl.defects++;
	va_start(ap, fmt);
	say("DEFECT", fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say("NOTE", fmt, ap);
	va_end(ap);
}

/* An API call failed: fine with errno set (and counted), a defect without. */
static void failed(const char *what, int err)
{
	if (err == 0) {
		defect("%s failed without errno", what);
		return;
	}
	wl.api_errors++;
	note("API-ERROR %s: %s", what, errname(err));
}

static struct blk *blk_new(enum kind k, void *p, ucma_handle_t h, size_t size)
{
	struct blk *b;

	if (wl.nblocks >= MAX_BLOCKS) {
		note("book-keeping full");
		return NULL;
	}
	b = &wl.blocks[wl.nblocks++];
	*b = (struct blk){ k, true, p, h, size, rnd(), 0 };
	return b;
}

static void blk_write(struct blk *b)
{
	void *p;

	if (b->kind != K_HANDLE) {
		fill(b->p, b->size, b->seed);
		return;
	}
	errno = 0;
	p = ucma_pin(b->h, 0);
	if (!p) {
		defect("ucma_pin of a live handle failed (%s)", errname(errno));
		return;
	}
	fill(p, b->size, b->seed);
	errno = 0;
	if (ucma_unpin(b->h) != 0)
		defect("ucma_unpin failed (%s)", errname(errno));
}

static bool blk_verify(struct blk *b, const char *when)
{
	size_t bad;

	if (!b->live)
		return true;
	if (b->kind != K_HANDLE) {
		bad = check(b->p, b->size, b->seed);
	} else {
		const void *p;

		ucma_read_lock();
		errno = 0;
		p = ucma_deref(b->h);
		if (!p) {
			int e = errno;

			ucma_read_unlock();
			defect("%s: ucma_deref of a live handle failed (%s)", when, errname(e));
			return false;
		}
		bad = check(p, b->size, b->seed);
		ucma_read_unlock();
	}
	if (bad != SIZE_MAX) {
		defect("%s: %s block %p/%#llx of %zu bytes corrupt at offset %zu", when,
		       kind_name[b->kind], b->p, (unsigned long long)b->h, b->size, bad);
		return false;
	}
	return true;
}

/* Check every live block; returns how many are wrong. */
static int verify_all(const char *when)
{
	int bad = 0;

	for (int i = 0; i < wl.nblocks; i++)
		bad += !blk_verify(&wl.blocks[i], when);
	return bad;
}

static void blk_free(struct blk *b)
{
	if (!b || !b->live)
		return;
	errno = 0;
	switch (b->kind) {
	case K_MALLOC:
		ucma_free(b->p);
		break;
	case K_HANDLE:
		if (ucma_hfree(b->h) != 0)
			defect("ucma_hfree of a live handle failed (%s)", errname(errno));
		break;
	case K_CONTIG:
		if (ucma_release(b->p) == 0)
			break;
		if (!(b->flags & UCMA_ALLOC_MLOCK) || errno == 0) {
			defect("ucma_release of a live buffer failed (%s)", errname(errno));
			break;
		}
		/* ucma_alloc(3): munlock() refused, the buffer stays
		 * allocated and locked, to be released again. */
		failed("ucma_release(locked buffer)", errno);
		blk_verify(b, "after a failed ucma_release");
		errno = 0;
		if (ucma_release(b->p) != 0)
			defect("ucma_release of a locked buffer failed again (%s)", errname(errno));
		break;
	}
	b->live = false;
}

/* ------------------------------------------------------------------------ */
/* Allocation steps, each checking the API's answer                          */
/* ------------------------------------------------------------------------ */

static struct blk *do_malloc(size_t size)
{
	void *p;
	struct blk *b;

	errno = 0;
	p = ucma_malloc(size);
	if (!p) {
		char what[64];

		snprintf(what, sizeof(what), "ucma_malloc(%zu)", size);
		failed(what, errno);
		return NULL;
	}
	b = blk_new(K_MALLOC, p, 0, size);
	if (b)
		blk_write(b);
	return b;
}

static bool in_zone(const void *p, int zone)
{
	struct ucma_arena *a = ucma_arena_peek();
	uintptr_t u = (uintptr_t)p;

	if (!a || u < a->base || u >= a->base + ((uintptr_t)a->npages << UCMA_PAGE_SHIFT))
		return false;
	return ucma_pfn_zone(a, (uint32_t)((u - a->base) >> UCMA_PAGE_SHIFT))->id == zone;
}

static struct blk *do_halloc(size_t size)
{
	ucma_handle_t h;
	struct blk *b;

	errno = 0;
	h = ucma_halloc(size, (rnd() & 3) == 0 ? UCMA_H_ZERO : 0);
	if (!h) {
		char what[64];

		snprintf(what, sizeof(what), "ucma_halloc(%zu)", size);
		failed(what, errno);
		return NULL;
	}
	b = blk_new(K_HANDLE, NULL, h, size);
	if (b)
		blk_write(b);
	return b;
}

/* Are all pages of [p, p + len) resident (true when that cannot be told)? */
static bool resident(const void *p, size_t len)
{
	size_t n = (len + PAGE - 1) / PAGE;
	unsigned char *v = malloc(n);
	bool all = true;

	if (!v || mincore((void *)((uintptr_t)p & ~(uintptr_t)(PAGE - 1)), n * PAGE, v) != 0) {
		free(v);
		return true;
	}
	for (size_t i = 0; i < n; i++)
		all &= (v[i] & 1) != 0;
	free(v);
	return all;
}

/* ucma_alloc() and the checks of what it promises, then the buffer
 * written: NULL when it failed. */
static struct blk *do_contig(size_t size, size_t align, unsigned flags)
{
	struct blk *b;
	char what[96];
	void *p;

	snprintf(what, sizeof(what), "ucma_alloc(%zu MiB, align %zu, flags %#x)", size >> 20,
		 align, flags);
	errno = 0;
	p = ucma_alloc(size, align, flags);
	if (!p) {
		failed(what, errno);
		return NULL;
	}
	if (ucma_alloc_size(p) < size)
		defect("%s: ucma_alloc_size says %zu", what, ucma_alloc_size(p));
	if (!in_zone(p, UCMA_ZONE_CMA))
		defect("%s: %p is not in the CMA zone", what, p);
	if (flags & UCMA_ALLOC_ZERO) {
		for (size_t i = 0; i < size; i += 512)
			if (((const unsigned char *)p)[i] != 0) {
				defect("%s: byte %zu not zero", what, i);
				break;
			}
	}
#if defined(UCMA_ASAN) || defined(UCMA_TSAN)
	/* The sanitizers' mlock() does nothing: judge populate only. */
	if ((flags & UCMA_ALLOC_POPULATE) && !resident(p, size))
#else
	if ((flags & (UCMA_ALLOC_POPULATE | UCMA_ALLOC_MLOCK)) && !resident(p, size))
#endif
		defect("%s succeeded but not every page is resident (populate/mlock did not "
		       "happen)", what);
	b = blk_new(K_CONTIG, p, 0, size);
	if (b) {
		b->flags = flags;
		blk_write(b);
	}
	return b;
}

/* ------------------------------------------------------------------------ */
/* Leak checks                                                               */
/* ------------------------------------------------------------------------ */

struct fdcount {
	int memfd, uffd, total;
};

static struct fdcount count_fds(void)
{
	struct fdcount c = { 0, 0, 0 };
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return c;
	while ((e = readdir(d))) {
		char path[300], link[256];
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = '\0';
		c.total++;
		c.memfd += strstr(link, "memfd:ucma") != NULL;
		c.uffd += strstr(link, "userfaultfd") != NULL;
	}
	closedir(d);
	return c;
}

/* Is [lo, hi) inside the range of the munmap the fault refused, which is
 * left mapped by design? */
static bool in_refused_unmap(uintptr_t lo, uintptr_t hi)
{
	return lo >= sh->unmap_lo && hi <= sh->unmap_hi;
}

/* Mappings of the library's files still present, but for those the
 * refused munmap left. */
static int maps_of_ucma_files(void)
{
	return tu_maps_count(0, UINTPTR_MAX, "memfd:ucma", sh->unmap_lo, sh->unmap_hi);
}

/* Mappings made through the table and still present: how many, their
 * size, and "KiB@site" for each. */
static void tracked_left(int *count, size_t *bytes, char *list, size_t listlen)
{
	*count = 0;
	*bytes = 0;
	list[0] = '\0';
	for (int i = 0; i < nranges; i++) {
		size_t len = ranges[i].hi - ranges[i].lo;
		size_t l = strlen(list);

		if (in_refused_unmap(ranges[i].lo, ranges[i].hi))
			continue;
		(*count)++;
		*bytes += len;
		if (l + 40 < listlen)
			snprintf(list + l, listlen - l, "%s%zuK@%#lx", l ? "," : "", len >> 10,
				 (unsigned long)ranges[i].site);
	}
}

/* The line the runner's leak check reads. */
static void report_leftovers(struct fdcount fd0)
{
	struct fdcount fd1 = count_fds();
	int files = maps_of_ucma_files(), n;
	size_t bytes;
	char list[512];

	tracked_left(&n, &bytes, list, sizeof(list));
	fprintf(stderr, "FN LEAKS fds %d->%d memfd %d->%d uffd %d->%d filemaps %d "
			"tracked %d %zuK [%s]%s\n",
		fd0.total, fd1.total, fd0.memfd, fd1.memfd, fd0.uffd, fd1.uffd, files, n,
		bytes >> 10, list, ranges_lost ? " (tracking lost)" : "");
}

/* ------------------------------------------------------------------------ */
/* Writers on lent memory                                                    */
/* ------------------------------------------------------------------------ */

static void *writer_fn(void *arg)
{
	struct writer *w = arg;
	size_t pages = w->len / PAGE;
	uint64_t n = 0;

	while (!atomic_load(&w->stop)) {
		for (size_t i = 0; i < pages; i++) {
			w->last[i] = ++n;
			*(volatile uint64_t *)(w->buf + i * PAGE) = n;
			atomic_store_explicit(&w->progress, n, memory_order_relaxed);
		}
		/* A pass takes microseconds.  Resting a little after each
		 * keeps two writers from taking two cores for the whole
		 * step; the take-back's window waits for them to come back
		 * (hold_take_back_window). */
		atomic_store(&w->resting, true);
		nanosleep(&(struct timespec){ 0, 50000 }, NULL);
		atomic_store(&w->resting, false);
	}
	return NULL;
}

static bool writer_start(struct writer *w, size_t len)
{
	memset(w, 0, sizeof(*w));
	errno = 0;
	w->buf = ucma_malloc(len);
	if (!w->buf) {
		failed("ucma_malloc(writer block)", errno);
		return false;
	}
	w->len = len;
	w->seed = rnd();
	w->last = calloc(len / PAGE, sizeof(uint64_t));
	fill(w->buf, len, w->seed);
	for (size_t i = 0; i < len / PAGE; i++)
		*(uint64_t *)(w->buf + i * PAGE) = 0;
	if (!w->last || pthread_create(&w->t, NULL, writer_fn, w) != 0) {
		ucma_free(w->buf);
		free(w->last);
		w->buf = NULL;
		return false;
	}
	return true;
}

/* Until the writer has gone once over its block (2 s at most). */
static void writer_wait_running(struct writer *w)
{
	uint64_t pages = w->len / PAGE;

	for (int i = 0; i < 20000 && w->buf && atomic_load(&w->progress) < pages; i++)
		nanosleep(&(struct timespec){ 0, 100000 }, NULL);
}

/*
 * Called before a take-back moves a piece over the heap while the heap's
 * copy is write-protected: if a writer's block lies there, hold the window
 * open until that writer is seen stopped outside its rest (asleep on the
 * protected page, which is the case to test), 3 ms at most.  Pieces no
 * writer uses pass at once.
 */
static void hold_take_back_window(void *piece, size_t len)
{
	uintptr_t lo = (uintptr_t)piece, hi = lo + len;

	if (!atomic_load(&wl.writers_on))
		return;
	for (int k = 0; k < NWRITERS; k++) {
		struct writer *w = &wl.writers[k];
		uintptr_t b = (uintptr_t)w->buf;
		uint64_t seen;

		if (!w->buf || b + w->len <= lo || b >= hi)
			continue;
		seen = atomic_load(&w->progress);
		for (int i = 0; i < 30; i++) {
			uint64_t now;

			nanosleep(&(struct timespec){ 0, 100000 }, NULL);
			now = atomic_load(&w->progress);
			if (now == seen && !atomic_load(&w->resting))
				break;
			seen = now;
		}
	}
}

/* Stop, join (10 s at most) and check; false when the writer is stuck. */
static bool writer_stop(struct writer *w, const char *when)
{
	struct timespec ts;

	if (!w->buf)
		return true;
	atomic_store(&w->stop, true);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	if (pthread_timedjoin_np(w->t, NULL, &ts) != 0) {
		defect("%s: a writer thread is stuck (10 s) after %llu writes: hang in a "
		       "write-protected page", when,
		       (unsigned long long)atomic_load(&w->progress));
		return false;
	}
	for (size_t i = 0; i < w->len / PAGE; i++) {
		const char *pg = w->buf + i * PAGE;
		bool bad = false;

		if (*(const uint64_t *)pg != w->last[i]) {
			defect("%s: writer page %zu: word 0 is %llu, last written %llu (lost "
			       "update)", when, i, (unsigned long long)*(const uint64_t *)pg,
			       (unsigned long long)w->last[i]);
			break;
		}
		for (size_t j = 8; j < PAGE && !bad; j += 8)
			if (*(const uint64_t *)(pg + j) != pat(w->seed, (i * PAGE + j) / 8)) {
				defect("%s: writer page %zu corrupt at %zu", when, i, j);
				bad = true;
			}
		if (bad)
			break;
	}
	ucma_free(w->buf);
	free(w->last);
	w->buf = NULL;
	return true;
}

/* ------------------------------------------------------------------------ */
/* The workload, step by step                                                */
/* ------------------------------------------------------------------------ */

/* Start the library in configuration @variant.  After a failed start,
 * checks that every call fails cleanly and the malloc family goes on
 * outside the arena; returns false then. */
static bool start_library(const char *variant)
{
	struct ucma_config cfg = {
		.arena_size = 256 * MiB,
		.cma_size = 96 * MiB,
		.hugepages = UCMA_BACKING_NONE,
		.hugepages_normal = UCMA_BACKING_THP,
		.node = numa_available() >= 0 ? UCMA_NODE_LOCAL : 0,
	};
	void *p;

	if (strcmp(variant, "private") == 0) {
		/* CMA areas of private memory on THP: no frames, no lending. */
		cfg.hugepages = UCMA_BACKING_THP;
	} else if (strcmp(variant, "populate") == 0) {
		/* A prefaulted arena on plain pages. */
		cfg.populate = 1;
		cfg.hugepages_normal = UCMA_BACKING_NONE;
	}
	errno = 0;
	if (ucma_init(&cfg) == 0)
		return true;
	failed("ucma_init", errno);
	errno = 0;
	p = ucma_alloc(MiB, 0, 0);
	if (p || errno == 0)
		defect("ucma_alloc after a failed start: %p, errno %d", p, errno);
	p = ucma_malloc(1000);
	if (!p)
		defect("ucma_malloc after a failed start: NULL (%s)", errname(errno));
	ucma_free(p);
	return false;
}

/* realloc of @b to @nsz: the common prefix kept, then written anew. */
static void realloc_block(struct blk *b, size_t nsz, const char *what)
{
	void *q;

	errno = 0;
	q = ucma_realloc(b->p, nsz);
	if (!q) {
		failed(what, errno);
		return;	/* the old block stays */
	}
	if (check(q, b->size < nsz ? b->size : nsz, b->seed) != SIZE_MAX)
		defect("ucma_realloc(%zu -> %zu) lost the prefix", b->size, nsz);
	b->p = q;
	b->size = nsz;
	b->seed = rnd();
	blk_write(b);
}

/* Step 1: the malloc family, small and large; calloc; realloc small to
 * large, large to larger and smaller; a third of the small blocks freed. */
static void malloc_family(void)
{
	static const size_t large[] = { 64 * KiB, 256 * KiB, MiB, 3 * MiB, 6 * MiB };
	struct blk *big[5];
	unsigned char *z;

	for (int i = 0; i < 300; i++)
		do_malloc(1 + rnd() % 8192);
	for (int i = 0; i < 5; i++)
		big[i] = do_malloc(large[i]);
	errno = 0;
	z = ucma_calloc(1, 2 * MiB + 100);
	if (!z) {
		failed("ucma_calloc(2 MiB)", errno);
	} else {
		for (size_t i = 0; i < 2 * MiB + 100; i += 256)
			if (z[i]) {
				defect("ucma_calloc: byte %zu not zero", i);
				break;
			}
		ucma_free(z);
	}
	for (int i = 0; i < wl.nblocks && i < 300; i += 7) {
		struct blk *b = &wl.blocks[i];

		if (b->live && b->kind == K_MALLOC)
			realloc_block(b, b->size * 3 + (i % 2 ? 40 * KiB : 0), "ucma_realloc");
	}
	for (int k = 2; k < 5; k++)
		if (big[k])
			realloc_block(big[k], k == 4 ? 2 * MiB : big[k]->size * 2 + 12345,
				      "ucma_realloc(large)");
	for (int i = 0; i < wl.nblocks; i += 3)
		if (wl.blocks[i].kind == K_MALLOC && wl.blocks[i].size < 64 * KiB)
			blk_free(&wl.blocks[i]);
}

/* Step 2: movable objects: handles, resized, pinned for the long term
 * (moved out of the CMA zone).  Returns the index of the first handle. */
static int handles_and_pins(void)
{
	int first = wl.nblocks;

	for (int i = 0; i < 200; i++)
		do_halloc(16 + rnd() % (64 * KiB));
	for (int i = 0; i < 4; i++)
		do_halloc(MiB);
	for (int i = 0; i < 2; i++)
		do_halloc(3 * MiB);
	for (int i = first; i < wl.nblocks; i += 10) {
		struct blk *b = &wl.blocks[i];
		size_t nsz = b->size * 2 + 1000;

		if (!b->live || b->kind != K_HANDLE)
			continue;
		errno = 0;
		if (ucma_hrealloc(b->h, nsz) != 0) {
			failed("ucma_hrealloc", errno);
			if (!blk_verify(b, "after a failed ucma_hrealloc"))
				b->live = false;
			continue;
		}
		if (ucma_hsize(b->h) != nsz)
			defect("ucma_hsize after ucma_hrealloc: %zu, not %zu", ucma_hsize(b->h), nsz);
		blk_verify(b, "ucma_hrealloc kept the prefix");
		b->size = nsz;
		b->seed = rnd();
		blk_write(b);
	}
	for (int i = first + 3; i < wl.nblocks; i += 25) {
		struct blk *b = &wl.blocks[i];
		void *p;

		if (!b->live || b->kind != K_HANDLE)
			continue;
		errno = 0;
		p = ucma_pin(b->h, UCMA_PIN_LONGTERM);
		if (!p) {
			failed("ucma_pin(LONGTERM)", errno);
			continue;
		}
		if (in_zone(p, UCMA_ZONE_CMA))
			defect("ucma_pin(LONGTERM) returned %p inside the CMA zone", p);
		if (check(p, b->size, b->seed) != SIZE_MAX)
			defect("long-term pin: object corrupt after the move");
		errno = 0;
		if (ucma_unpin(b->h) != 0)
			defect("ucma_unpin after a long-term pin: %s", errname(errno));
	}
	return first;
}

/* Step 3: compaction, with every other handle from @first freed. */
static void compaction(int first)
{
	for (int i = first; i < wl.nblocks; i += 2)
		if (wl.blocks[i].kind == K_HANDLE)
			blk_free(&wl.blocks[i]);
	errno = 0;
	if (ucma_compact(UCMA_COMPACT_SYNC_FULL) != 0)
		failed("ucma_compact(SYNC_FULL)", errno);
	errno = 0;
	if (ucma_compact_order(9, UCMA_COMPACT_SYNC_FULL) != 0)
		failed("ucma_compact_order(9, SYNC_FULL)", errno);
	errno = 0;
	if (ucma_compact(UCMA_COMPACT_ASYNC) != 0)
		failed("ucma_compact(ASYNC)", errno);
	verify_all("after compaction");
}

/* Step 4: contiguous buffers up to a third of the CMA zone, with every
 * flag; they move the handles out of their way. */
static void contiguous_buffers(void)
{
	struct blk *c16, *c24;

	do_contig(64 * KiB, 0, UCMA_ALLOC_ZERO);
	do_contig(MiB, 0, UCMA_ALLOC_POPULATE);
	do_contig(4 * MiB, 0, UCMA_ALLOC_MLOCK);
	c16 = do_contig(16 * MiB, 0, UCMA_ALLOC_ZERO | UCMA_ALLOC_POPULATE);
	c24 = do_contig(24 * MiB, 2 * MiB, 0);
	verify_all("after contiguous allocations");
	blk_free(c16);
	do_contig(32 * MiB, 2 * MiB, UCMA_ALLOC_ZERO);
	blk_free(c24);
	verify_all("after contiguous releases");
}

/* The take-back with writers: two threads write lent blocks of their own
 * while ucma_unlend() takes one back by hand and a contiguous allocation
 * of most of the area takes every lent frame back.  Returns false when a
 * writer is stuck (the run cannot go on). */
static bool take_back_with_writers(void)
{
	struct blk *most;
	bool stuck = false;

	for (int i = 0; i < NWRITERS; i++)
		writer_start(&wl.writers[i], 3 * MiB);
	note("writer blocks on frames: %d %d",
	     wl.writers[0].buf && tu_on_frame(wl.writers[0].buf),
	     wl.writers[1].buf && tu_on_frame(wl.writers[1].buf));
	for (int i = 0; i < NWRITERS; i++)
		writer_wait_running(&wl.writers[i]);
	atomic_store(&wl.writers_on, true);
	errno = 0;
	if (wl.writers[0].buf && ucma_unlend(wl.writers[0].buf, wl.writers[0].len) != 0)
		failed("ucma_unlend(writer block)", errno);
	/* Written while the writers still run: a frame left to both a
	 * writer's block and this buffer shows in one or the other. */
	most = do_contig(88 * MiB, 2 * MiB, 0);
	atomic_store(&wl.writers_on, false);
	for (int i = 0; i < NWRITERS; i++)
		stuck |= !writer_stop(&wl.writers[i], "take-back with writers");
	if (stuck)
		return false;
	verify_all("after the take-back with writers");
	blk_free(most);
	return true;
}

/* Step 5: heap lending.  Frees and a trim make frames idle; large malloc
 * blocks borrow them; writers and a large contiguous allocation take them
 * back; ucma_unlend() takes one back by hand; a second large allocation
 * takes back the rest.  Returns false when a writer is stuck. */
static bool heap_lending(void)
{
	struct blk *lent[5];
	int on = 0;

	for (int i = 0; i < wl.nblocks; i++)
		if (wl.blocks[i].kind == K_CONTIG && wl.blocks[i].size >= 4 * MiB)
			blk_free(&wl.blocks[i]);
	ucma_trim();
	for (int i = 0; i < 5; i++) {
		lent[i] = do_malloc(3 * MiB);
		on += lent[i] && tu_on_frame(lent[i]->p);
	}
	note("%d of 5 heap blocks on lent frames", on);
	if (!take_back_with_writers())
		return false;
	if (lent[0]) {
		errno = 0;
		if (ucma_unlend(lent[0]->p, lent[0]->size) != 0)
			failed("ucma_unlend", errno);
		else if (tu_on_frame(lent[0]->p) ||
			 tu_on_frame((char *)lent[0]->p + lent[0]->size - 1))
			defect("ucma_unlend returned 0, the block is still on a frame");
	}
	do_contig(64 * MiB, 2 * MiB, 0);
	verify_all("after taking lent frames back");
	blk_free(lent[1]);
	return true;
}

/* The fork child: checks everything it inherited, writes a third of it
 * (its writes must stay its own), and uses its own heap, handles and CMA
 * area.  Exits 0 when all is well. */
static void fork_child(void)
{
	int bad;
	void *p;

	alarm(20);
	wl.defects = 0;	/* the parent's, counted there */
	bad = verify_all("fork child");
	for (int i = 0; i < wl.nblocks; i++)
		if (wl.blocks[i].live && (i % 3) == 0) {
			wl.blocks[i].seed ^= 0xc0ffee;
			blk_write(&wl.blocks[i]);
		}
	do_malloc(3 * MiB);
	errno = 0;
	p = ucma_alloc(4 * MiB, 0, 0);
	if (!p)
		failed("fork child: ucma_alloc(4 MiB)", errno);
	else
		memset(p, 0x11, 4 * MiB);
	do_halloc(100 * KiB);
	bad += verify_all("fork child, end");
	_exit(bad || wl.defects ? 1 : 0);
}

/* The CMA areas carry MADV_DONTFORK again after a fork (ucma(7)): a raw
 * clone() child must not share the parent's frames.  A note when the
 * first area's mapping lacks it. */
static void check_dontfork_kept(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	uintptr_t base = a && a->nr_areas && a->areas[0].frames && a->areas[0].frames->fd >= 0 ?
				 a->areas[0].frames->base : 0;
	FILE *f = base ? fopen("/proc/self/smaps", "r") : NULL;
	char line[512];
	bool in = false, dontfork = true;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = base >= lo && base < hi;
		else if (in && strncmp(line, "VmFlags:", 8) == 0)
			dontfork = strstr(line, " dc") != NULL;
	}
	fclose(f);
	if (!dontfork)
		note("DONTFORK-LOST the CMA area's mapping lacks MADV_DONTFORK after the fork");
}

/* Step 6: fork; the child checks everything and works on its own copy;
 * the parent's data stay as they were. */
static void fork_and_compare(void)
{
	pid_t pid;
	int st = -1;

	fflush(NULL);
	pid = fork();
	if (pid == 0)
		fork_child();
	if (pid < 0) {
		note("fork failed: %s", strerror(errno));
	} else {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
			note("FORKCHILD exit %d", WEXITSTATUS(st));
		else if (WIFSIGNALED(st))
			note("FORKCHILD signal %d", WTERMSIG(st));
	}
	verify_all("parent after fork");
	check_dontfork_kept();
}

/* Step 7: the fault was one call: the library works again. */
static void recovery(void)
{
	for (int i = 0; i < wl.nblocks; i++)
		if (wl.blocks[i].kind == K_CONTIG)
			blk_free(&wl.blocks[i]);
	if (!do_contig(8 * MiB, 0, UCMA_ALLOC_POPULATE))
		note("RECOVERY ucma_alloc(8 MiB) fails after the fault");
	if (!do_malloc(5 * MiB))
		note("RECOVERY ucma_malloc(5 MiB) fails after the fault");
	if (!do_halloc(200 * KiB))
		note("RECOVERY ucma_halloc fails after the fault");
	errno = 0;
	if (ucma_unlend_all() != 0)
		failed("ucma_unlend_all", errno);
	verify_all("end");
}

/* Step 8: everything freed: nothing may stay locked. */
static void release_everything(void)
{
	FILE *f;
	char line[256];
	long kb = 0;

	for (int i = 0; i < wl.nblocks; i++)
		blk_free(&wl.blocks[i]);
	ucma_trim();
	f = fopen("/proc/self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	if (kb > 0)
		defect("%ld kB stay mlocked after every contiguous buffer was released "
		       "(ucma_release returned 0)", kb);
}

/* The whole workload, in the run child; its log is fd 2.  Ends with the
 * leftovers after a full teardown and "FN END". */
static int workload(const char *variant)
{
	struct fdcount fd0 = count_fds();

	if (start_library(variant)) {
		malloc_family();
		compaction(handles_and_pins());
		contiguous_buffers();
		if (!heap_lending()) {
			fprintf(stderr, "FN END defects %d (stuck writer)\n", wl.defects);
			return 1;
		}
		fork_and_compare();
		recovery();
		release_everything();
	}
	ucma_test_reset();
	report_leftovers(fd0);
	fprintf(stderr, "FN END defects %d api_errors %d\n", wl.defects, wl.api_errors);
	return wl.defects ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Call sites, through addr2line                                             */
/* ------------------------------------------------------------------------ */

/*
 * addr2line's answer for each offset asked about, kept for the whole
 * sweep: the same call sites come back run after run, and one addr2line
 * costs tens of milliseconds.  Each answer is the function and line, then
 * the functions it is inlined in, one per line.
 */
#define MAX_PLACES 4096
static struct place {
	uintptr_t off;
	char *text;
} places[MAX_PLACES];
static int nplaces;

static const char *place_of(uintptr_t off)
{
	for (int i = 0; i < nplaces; i++)
		if (places[i].off == off)
			return places[i].text;
	return NULL;
}

static void place_add(uintptr_t off, const char *text)
{
	if (nplaces < MAX_PLACES && !place_of(off))
		places[nplaces++] = (struct place){ off, strdup(text) };
}

/* Ask addr2line, once, about the offsets among @offs not known yet. */
static void resolve(const uintptr_t *offs, int n)
{
	char cmd[8192], line[512], text[2048] = "";
	uintptr_t cur = 0;
	size_t l;
	int asked = 0;
	FILE *f;

	l = (size_t)snprintf(cmd, sizeof(cmd), "addr2line -a -f -i -p -s -e '%s'", exe_path);
	for (int i = 0; i < n && l < sizeof(cmd) - 32; i++)
		if (offs[i] && !place_of(offs[i])) {
			l += (size_t)snprintf(cmd + l, sizeof(cmd) - l, " %#lx",
					      (unsigned long)offs[i]);
			asked++;
		}
	if (!asked || !(f = popen(cmd, "r")))
		return;
	/* "0x...: f at file:line", then " (inlined by) g at file:line" */
	while (fgets(line, sizeof(line), f)) {
		char *s = line, *disc;
		size_t tl = strlen(text);

		line[strcspn(line, "\n")] = '\0';
		if ((disc = strstr(s, " (discriminator")))
			*disc = '\0';
		if (strncmp(s, "0x", 2) == 0) {
			if (cur)
				place_add(cur, text);
			cur = (uintptr_t)strtoull(s, &s, 16);
			s += strspn(s, ": ");
			tl = 0;
		} else {
			s += strspn(s, " ");
			if (strncmp(s, "(inlined by) ", 13) == 0)
				s += 13;
		}
		snprintf(text + tl, sizeof(text) - tl, "%s\n", s);
	}
	if (cur)
		place_add(cur, text);
	pclose(f);
}

/* Where the fault fired: the library's functions on the stack, innermost
 * first, without the wrappers of this file. */
static void fault_site(char *out, size_t len)
{
	size_t o = 0;
	int k = 0;

	out[0] = '\0';
	resolve(sh->bt, sh->bt_n < 10 ? sh->bt_n : 10);
	for (int i = 0; i < sh->bt_n && i < 10 && k < 6; i++) {
		const char *t = sh->bt[i] ? place_of(sh->bt[i]) : NULL;

		for (const char *s = t; s && *s && k < 6; s = strchr(s, '\n') + 1) {
			int n = (int)strcspn(s, "\n");

			if (strncmp(s, "w_", 2) == 0 || strncmp(s, "fired", 5) == 0)
				continue;
			if (o + 8 < len)
				o += (size_t)snprintf(out + o, len - o, "%s%.*s", k ? " < " : "",
						      n, s);
			k++;
		}
	}
}

/* Was the mapping at @off made for the malloc family's overflow chunks? */
static bool is_overflow_chunk_site(uintptr_t off)
{
	const char *t;

	resolve(&off, 1);
	t = place_of(off);
	return t && strncmp(t, "ovf_map ", 8) == 0;
}

/* ------------------------------------------------------------------------ */
/* The runner                                                                */
/* ------------------------------------------------------------------------ */

enum verdict { V_OK, V_FATAL, V_DEFECT, V_END };
static const char *const verdict_name[] = { "OK", "DOCUMENTED-FATAL", "DEFECT", "END" };

/* What a run leaves after its cleanup, from its "FN LEAKS" line. */
struct leftovers {
	int fd0, fds, memfd0, memfd, uffd0, uffd, filemaps, tracked;
	size_t kib;
	bool init_uffd_kept;	/* the userfaultfd a failed start keeps */
};

/*
 * The sweep: its options, the run without a fault (its calls of each op,
 * and what it leaves, which every other run is compared with), and the
 * time limit of a run.  Lives in the runner; the run children see it only
 * through fork.
 */
struct sweep {
	const char *variant;		/* -c */
	int err;			/* -e: the errno to inject, 0: each op's own */
	long only_n;			/* -n: that run only (0: the baseline), -1: all */
	long max_runs;			/* -m */
	int timeout;			/* -t: seconds per run */
	bool verbose, gdb;
	const char *keep_dir;		/* -k */
	bool wanted[OP_NR];
	long calls[OP_NR];		/* the baseline's calls of each op */
	bool base_set;
	struct leftovers base;		/* the baseline's leftovers */
};

struct result {
	enum verdict v;
	char why[600];
	char where[1200];
	double secs;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The errno a sweep of @op injects. */
static int sweep_errno(const struct sweep *s, int op)
{
	if (s->err)
		return s->err;
	return op >= 0 && ops[op].err ? ops[op].err : EINVAL;
}

/* Read the "FN LEAKS" line of @log into @l; false without one. */
static bool parse_leftovers(const char *log, struct leftovers *l)
{
	const char *p = strstr(log, "FN LEAKS "), *q, *end;

	memset(l, 0, sizeof(*l));
	if (!p || sscanf(p, "FN LEAKS fds %d->%d memfd %d->%d uffd %d->%d filemaps %d "
			 "tracked %d %zuK", &l->fd0, &l->fds, &l->memfd0, &l->memfd, &l->uffd0,
			 &l->uffd, &l->filemaps, &l->tracked, &l->kib) != 9)
		return false;
	/* The overflow chunks of the malloc family are a cache of the
	 * process, kept by design (slab.c): not counted. */
	end = strchr(p, ']');
	for (q = strchr(p, '['); q && end && q < end; q = strchr(q + 1, ',')) {
		size_t kib;
		unsigned long off;

		if (sscanf(q + 1, "%zuK@%lx", &kib, &off) == 2 && is_overflow_chunk_site(off)) {
			l->tracked--;
			l->kib -= kib;
		}
	}
	/* A failed start keeps the userfaultfd it opened to ask whether
	 * lending is possible (lend.c): reported apart, not as a leak. */
	if (strstr(log, "API-ERROR ucma_init") && l->uffd > 0) {
		l->uffd--;
		l->fds--;
		l->init_uffd_kept = true;
	}
	return true;
}

static bool leaked(const struct sweep *s, const struct leftovers *l)
{
	return s->base_set &&
	       (l->fds - l->fd0 > s->base.fds - s->base.fd0 || l->memfd > s->base.memfd ||
		l->uffd > s->base.uffd || l->filemaps > s->base.filemaps ||
		l->tracked > s->base.tracked || l->kib > s->base.kib);
}

static char *slurp(int fd)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	ssize_t n;

	if (!buf)
		bail_out("out of memory");
	lseek(fd, 0, SEEK_SET);
	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (cap - len < 4096 && !(buf = realloc(buf, cap *= 2)))
			bail_out("out of memory");
	}
	buf[len] = '\0';
	return buf;
}

/* The line of @log holding @at, into @out. */
static void line_at(const char *log, const char *at, char *out, size_t len)
{
	const char *s = at, *e = strchr(at, '\n');

	while (s > log && s[-1] != '\n')
		s--;
	snprintf(out, len, "%.*s", (int)(e ? e - s : (long)strlen(s)), s);
}

/* The first line of @log containing @needle, into @out. */
static bool line_with(const char *log, const char *needle, char *out, size_t len)
{
	const char *p = strstr(log, needle);

	if (p)
		line_at(log, p, out, len);
	return p != NULL;
}

/* The last message of the library in @log, into @out. */
static bool last_message(const char *log, char *out, size_t len)
{
	const char *last = NULL;

	for (const char *p = log; (p = strstr(p, "ucma: ")); p++)
		last = p;
	if (last)
		line_at(log, last, out, len);
	return last != NULL;
}

/* Messages the documentation or the source names as fatal. */
static bool documented_fatal(const char *msg)
{
	static const char *const pats[] = {
		"ucma: fork: ",				/* frames.c, lend.c: the child's copy */
		"cannot map its file again",		/* frames.c sort_frames */
		"heap lending: cannot map private memory", /* lend.c */
	};

	for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++)
		if (strstr(msg, pats[i]))
			return true;
	return false;
}

static const char *const sanitizer_reports[] = {
	"ERROR: AddressSanitizer", "WARNING: ThreadSanitizer", "runtime error:",
};

/* A run that ended with FN END: a died fork child, a leak, or OK. */
static void classify_completed(const struct sweep *s, const char *log, struct result *r)
{
	char line[512];
	struct leftovers l;

	if (line_with(log, "FORKCHILD signal", line, sizeof(line))) {
		if (!last_message(log, line, sizeof(line))) {
			line_with(log, "FORKCHILD", line, sizeof(line));
			r->v = V_DEFECT;
			snprintf(r->why, sizeof(r->why), "fork child died without a message: %s",
				 line);
		} else if (!documented_fatal(line)) {
			r->v = V_DEFECT;
			snprintf(r->why, sizeof(r->why), "fork child died: %s", line);
		} else if (sh->fired_in_fork_child) {
			r->v = V_FATAL;
			snprintf(r->why, sizeof(r->why), "fork child aborted: %s", line);
		} else {
			/* The documented abort, but the fault was the parent's:
			 * the parent went on as if the call had worked. */
			r->v = V_DEFECT;
			snprintf(r->why, sizeof(r->why), "the parent's failed call made the fork "
				 "child abort: %s", line);
		}
		return;
	}
	if (line_with(log, "FORKCHILD exit", line, sizeof(line))) {
		r->v = V_DEFECT;
		snprintf(r->why, sizeof(r->why), "%s", line);
		return;
	}
	if (parse_leftovers(log, &l) && leaked(s, &l)) {
		r->v = V_DEFECT;
		line_with(log, "FN LEAKS", line, sizeof(line));
		snprintf(r->why, sizeof(r->why), "leak after cleanup: %s (baseline fds +%d "
			 "memfd %d uffd %d filemaps %d tracked %d %zuK)", line + 9,
			 s->base.fds - s->base.fd0, s->base.memfd, s->base.uffd, s->base.filemaps,
			 s->base.tracked, s->base.kib);
		return;
	}
	r->v = V_OK;
	if (line_with(log, "API-ERROR", line, sizeof(line)))
		snprintf(r->why, sizeof(r->why), "%s", strstr(line, "API-ERROR"));
	else
		snprintf(r->why, sizeof(r->why), "absorbed");
	if (l.init_uffd_kept)
		strncat(r->why, "; userfaultfd kept after the failed start",
			sizeof(r->why) - strlen(r->why) - 1);
	/* Not errors, but what the fault cost: told with the verdict. */
	if (line_with(log, "RECOVERY", line, sizeof(line)) ||
	    line_with(log, "DONTFORK-LOST", line, sizeof(line))) {
		size_t o = strlen(r->why);
		const char *what = strstr(line, "RECOVERY");

		snprintf(r->why + o, sizeof(r->why) - o, "; %s",
			 what ? what : strstr(line, "DONTFORK-LOST"));
	}
}

/* The verdict on a run from its log and how it ended. */
static void classify(const struct sweep *s, const char *log, int st, bool timed_out,
		     struct result *r)
{
	char line[512];

	for (size_t i = 0; i < sizeof(sanitizer_reports) / sizeof(sanitizer_reports[0]); i++)
		if (line_with(log, sanitizer_reports[i], line, sizeof(line))) {
			r->v = V_DEFECT;
			snprintf(r->why, sizeof(r->why), "sanitizer: %s", line);
			return;
		}
	r->v = V_DEFECT;
	if (timed_out || (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)) {
		snprintf(r->why, sizeof(r->why), "hang (no end within %d s)", s->timeout);
	} else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) {
		if (strstr(log, "ucma: ") &&
		    line_with(log, "internal error", line, sizeof(line))) {
			snprintf(r->why, sizeof(r->why), "assertion: %s", line);
		} else if (last_message(log, line, sizeof(line))) {
			if (documented_fatal(line))
				r->v = V_FATAL;
			snprintf(r->why, sizeof(r->why), "abort: %s", line);
		} else {
			snprintf(r->why, sizeof(r->why), "abort without a message");
		}
	} else if (WIFSIGNALED(st)) {
		snprintf(r->why, sizeof(r->why), "crash: signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	} else if (line_with(log, "FN DEFECT", line, sizeof(line))) {
		snprintf(r->why, sizeof(r->why), "%s", line + 3);
	} else if (!strstr(log, "FN END")) {
		snprintf(r->why, sizeof(r->why), "exit %d before the end of the workload",
			 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	} else {
		classify_completed(s, log, r);
	}
}

static void gdb_stacks(pid_t pid, int logfd)
{
	char arg[32];
	pid_t g;

	snprintf(arg, sizeof(arg), "%d", (int)pid);
	g = fork();
	if (g == 0) {
		dup2(logfd, 1);
		dup2(logfd, 2);
		alarm(60);
		execlp("gdb", "gdb", "-batch", "-nx", "-p", arg, "-ex", "thread apply all bt 30",
		       (char *)NULL);
		_exit(127);
	}
	if (g > 0)
		waitpid(g, NULL, 0);
}

/* Wait for the run child until @deadline; false when it still runs then.
 * Without pidfd_open(), blocks: the child's own alarm() ends a hang. */
static bool wait_run(pid_t pid, int *st, double deadline)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);

	while (pfd >= 0) {
		struct pollfd p = { .fd = pfd, .events = POLLIN };
		double left = deadline - now_s();

		if (left <= 0) {
			close(pfd);
			return false;
		}
		if (poll(&p, 1, (int)(left * 1000) + 1) > 0)
			break;
	}
	if (pfd >= 0)
		close(pfd);
	while (waitpid(pid, st, 0) < 0 && errno == EINTR)
		;
	return true;
}

/* Keep the log of a run not OK in -k's directory. */
static void keep_log(const struct sweep *s, int op, long nth, const struct result *r,
		     const char *log)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s-%s-%ld.log", s->keep_dir,
		 op >= 0 ? ops[op].name : "none", errname(sweep_errno(s, op)), nth);
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "%s\nfault: %s\nsite: %s\n---\n%s", r->why, sh->fired_what, r->where, log);
	fclose(f);
}

/*
 * One run: a fresh child runs the workload with the @nth call of @op
 * failing (@op -1: none), its output into a log file.  Returns the
 * verdict; V_END when the workload made fewer than @nth calls of @op.
 */
static struct result run_once(const struct sweep *s, int op, long nth, char **logp)
{
	struct result r = { V_OK, "", "", 0 };
	char path[] = "/tmp/fail_nth_logXXXXXX";
	int logfd = mkstemp(path), st = -1;
	double t0 = now_s();
	bool timed_out = false;
	pid_t pid;
	char *log;

	if (logfd < 0)
		bail_out("mkstemp: %s", strerror(errno));
	unlink(path);
	memset(sh, 0, sizeof(*sh));
	sh->target = op;
	sh->nth = nth;
	sh->err = s->err;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		bail_out("fork: %s", strerror(errno));
	if (pid == 0) {
		/* Its own process group, so that a fork child it leaves
		 * behind is killed with it. */
		setpgid(0, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		sh->run_pid = getpid();
		alarm((unsigned)s->timeout);
		install_wrappers();
		st = workload(s->variant);
		fflush(NULL);
		/* The log says everything: no exit handlers, and no leak
		 * report of a sanitizer at exit. */
		_exit(st);
	}
	setpgid(pid, pid);
	if (!wait_run(pid, &st, t0 + s->timeout + 5)) {
		timed_out = true;
		if (s->gdb)
			gdb_stacks(pid, logfd);
		kill(-pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	kill(-pid, SIGKILL);	/* a fork child left behind */
	r.secs = now_s() - t0;
	log = slurp(logfd);
	close(logfd);
	if (op >= 0 && sh->fired == 0) {
		r.v = V_END;
	} else {
		if (op >= 0)
			fault_site(r.where, sizeof(r.where));
		classify(s, log, st, timed_out, &r);
	}
	if (s->verbose && (op >= 0 || s->only_n == 0))
		fputs(log, stdout);
	if (s->keep_dir && r.v != V_OK && r.v != V_END)
		keep_log(s, op, nth, &r, log);
	if (logp)
		*logp = log;
	else
		free(log);
	return r;
}

/* The run without a fault: every call must succeed; its calls of each op
 * say how long each sweep is, its leftovers are the leak baseline. */
static void run_baseline(struct sweep *s)
{
	char *log;
	struct result r = run_once(s, -1, 0, &log);
	char calls[512];
	size_t o = 0;

	for (int op = 0; op < OP_NR; op++) {
		s->calls[op] = atomic_load(&sh->count[op]);
		o += (size_t)snprintf(calls + o, sizeof(calls) - o, " %s=%ld", ops[op].name,
				      s->calls[op]);
	}
	diag("baseline: %s %s (%.2f s); calls:%s", verdict_name[r.v], r.why, r.secs, calls);
	/* Every call must succeed without a fault, ucma_init() first: a
	 * sweep of a workload cut short would prove little. */
	if (r.v != V_OK || strstr(log, "API-ERROR"))
		bail_out("the workload fails without a fault: %s", r.why);
	s->base_set = parse_leftovers(log, &s->base);
	if (s->base_set)
		diag("leak baseline: fds %d->%d memfd %d uffd %d filemaps %d tracked %d %zuK",
		     s->base.fd0, s->base.fds, s->base.memfd, s->base.uffd, s->base.filemaps,
		     s->base.tracked, s->base.kib);
	free(log);
}

/*
 * The N of run @i of @op's sweep, or 0 after the last: -n's N alone;
 * otherwise N = 1, 2, ... up to -m's limit, unless the run without a
 * fault made more calls than -m allows runs (the sanitizer builds' short
 * sweeps).  Then the runs are spread evenly over those calls, the first
 * at N = 1: the first K calls alone are all start-up's, the later ones
 * reach compaction, heap lending and fork.
 */
static long nth_run(const struct sweep *s, int op, long i)
{
	if (s->only_n > 0)
		return i == 0 ? s->only_n : 0;
	if (i >= s->max_runs)
		return 0;
	if (s->calls[op] <= s->max_runs)
		return i + 1;
	return 1 + i * s->calls[op] / s->max_runs;
}

/* Sweep @op, run by run (nth_run()); one TAP line, not ok when any run
 * is a DEFECT. */
static void sweep_op(const struct sweep *s, int op)
{
	int count[V_END] = { 0 };
	long n, ran = 0;
	double t0 = now_s();
	char defect_ns[128] = "";

	for (long i = 0; (n = nth_run(s, op, i)) > 0; i++) {
		struct result r = run_once(s, op, n, NULL);

		if (r.v == V_END) {
			if (s->only_n > 0)
				diag("%s N=%ld: the workload makes fewer calls (%ld)", ops[op].name,
				     n, atomic_load(&sh->count[op]));
			break;
		}
		ran++;
		count[r.v]++;
		if (r.v == V_DEFECT) {
			size_t o = strlen(defect_ns);

			snprintf(defect_ns + o, sizeof(defect_ns) - o, "%s%ld", o ? "," : "", n);
			diag("DEFECT: reproduce with test_fail_nth -o %s -n %ld -v%s%s%s%s",
			     ops[op].name, n, s->err ? " -e " : "", s->err ? errname(s->err) : "",
			     strcmp(s->variant, "frames") ? " -c " : "",
			     strcmp(s->variant, "frames") ? s->variant : "");
		}
		diag("%-13s %-6s N=%-4ld %-16s %.2fs %s%s | %s | at: %s", ops[op].name,
		     errname(sweep_errno(s, op)), n, verdict_name[r.v], r.secs,
		     sh->fired_in_fork_child ? "[in fork child] " : "", sh->fired_what, r.why,
		     r.where);
	}
	ok(count[V_DEFECT] == 0, "%s (%s): %d OK, %d DOCUMENTED-FATAL, %d DEFECT%s%s (runs: %ld; "
	   "calls without a fault: %ld; %.1f s)", ops[op].name, errname(sweep_errno(s, op)),
	   count[V_OK], count[V_FATAL], count[V_DEFECT], defect_ns[0] ? " at N=" : "",
	   defect_ns, ran, s->calls[op], now_s() - t0);
}

/* ------------------------------------------------------------------------ */
/* Set-up                                                                    */
/* ------------------------------------------------------------------------ */

static int op_of(const char *name)
{
	for (int op = 0; op < OP_NR; op++)
		if (strcmp(name, ops[op].name) == 0)
			return op;
	return -1;
}

/* Mark the op @arg names wanted: its name, or a file named after it
 * (tests/unit/fail-nth/mmap.fnth). */
static void want_op(struct sweep *s, const char *arg)
{
	const char *base = strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg;
	char name[64];
	int op;

	snprintf(name, sizeof(name), "%.*s", (int)strcspn(base, "."), base);
	op = op_of(name);
	if (op < 0)
		bail_out("no op named \"%s\"", name);
	s->wanted[op] = true;
}

static void parse_options(struct sweep *s, int argc, char **argv)
{
	bool any = false;
	int c;

	*s = (struct sweep){ .variant = "frames", .only_n = -1, .max_runs = 100000,
			     .timeout = 30 };
	while ((c = getopt(argc, argv, "o:n:e:m:t:k:c:vg")) != -1) {
		switch (c) {
		case 'o':
			for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ","))
				want_op(s, tok);
			any = true;
			break;
		case 'n': s->only_n = atol(optarg); break;
		case 'e': s->err = errno_of(optarg); break;
		case 'm': s->max_runs = atol(optarg); break;
		case 't': s->timeout = atoi(optarg); break;
		case 'k': s->keep_dir = optarg; mkdir(optarg, 0755); break;
		case 'c': s->variant = optarg; break;
		case 'v': s->verbose = true; break;
		case 'g': s->gdb = true; break;
		default:
			fprintf(stderr, "usage: %s [-o OP,...] [-n N] [-e ERRNO] [-m MAX] [-t SEC] "
				"[-k DIR] [-c frames|private|populate] [-v] [-g] [OP...]\n", argv[0]);
			exit(2);
		}
	}
	for (int i = optind; i < argc; i++, any = true)
		want_op(s, argv[i]);
	for (int op = 0; op < OP_NR; op++)
		s->wanted[op] |= !any;
	if (strcmp(s->variant, "frames") && strcmp(s->variant, "private") &&
	    strcmp(s->variant, "populate"))
		bail_out("no configuration \"%s\"", s->variant);
}

/* The runner's process: the environment every run starts from, the
 * executable's address for the call sites, the shared record. */
static void prepare(void)
{
	Dl_info di;
	void *bt[4];
	ssize_t n = readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);

	exe_path[n > 0 ? n : 0] = '\0';
	if (dladdr((void *)(uintptr_t)prepare, &di))
		exe_base = (uintptr_t)di.dli_fbase;
	tu_clear_env();
	setenv("UCMA_CMA_POLICY", "lend", 1);
	/* No background compaction in the middle of a step. */
	setenv("UCMA_COMPACT_INTERVAL_MS", "3600000", 1);
	setenv("UCMA_STATS_SHM", "off", 1);
#ifdef UCMA_TSAN
	/* ThreadSanitizer cannot follow threads started in the child of a
	 * multi-threaded process: no compaction thread for the fork child
	 * to start again (as test_frames.c). */
	setenv("UCMA_COMPACT", "0", 1);
#endif
	/* Loads the unwinder now, not inside a fault. */
	backtrace(bt, 4);
	real = ucma_os;
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		bail_out("mmap: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	struct sweep s;
	int nwanted = 0, nswept = 0;
	char none[256] = "";
	double t0 = now_s();

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_options(&s, argc, argv);
	prepare();
	if (strcmp(s.variant, "frames") == 0 && !tu_uffd_wp_available(real.userfaultfd))
		skip_all("no userfaultfd with write-protection for shmem here (root, "
			 "vm.unprivileged_userfaultfd=1 or /dev/userfaultfd, Linux 6.4)");
	run_baseline(&s);
	if (s.only_n == 0)
		return 0;
	for (int op = 0; op < OP_NR; op++)
		if (s.wanted[op]) {
			size_t o = strlen(none);

			nwanted++;
			nswept += s.calls[op] > 0;
			snprintf(none + o, sizeof(none) - o, "%s%s", o ? ", " : "", ops[op].name);
		}
	if (!nswept)
		skip_all("the workload makes no call of %s in the %s configuration", none,
			 s.variant);
	plan(nwanted);
	for (int op = 0; op < OP_NR; op++) {
		if (!s.wanted[op])
			continue;
		if (s.calls[op] == 0)
			skip(1, "%s: the workload makes no call of it in the %s configuration",
			     ops[op].name, s.variant);
		else
			sweep_op(&s, op);
	}
	diag("whole sweep: %.1f s", now_s() - t0);
	return done();
}
