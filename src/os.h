/*
 * os.h - the one interface between ucma and the kernel's memory calls
 * (os.c): the table every mmap, madvise, mlock, mbind, thread creation,
 * file and userfaultfd call of the library goes through, so that the test
 * build can inject faults; and facts about the machine (hugetlb pool,
 * transparent huge pages, physical addresses through pagemap).
 * internal.h includes it (after defining UCMA_INTERNAL): include that.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_OS_H
#define UCMA_OS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>


/* Flags newer than some C libraries' headers (Linux 5.14 and 4.14 values). */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif
#ifndef MAP_HUGE_1GB
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << 26)
#endif
#ifndef MFD_HUGE_1GB
#define MFD_HUGE_1GB (30u << 26)
#endif

/*
 * struct ucma_os_ops - the calls themselves.
 *
 * Locking: none.  The library never writes the table after start-up
 * (os.c fills it statically); tests replace entries only while no thread
 * of the library runs (before ucma_init(), or after ucma_test_reset()),
 * and put them back with ucma_os_reset().  Every call site reads an entry
 * once and calls it.
 */
struct ucma_os_ops {
	void *(*mmap)(void *addr, size_t len, int prot, int flags, int fd, off_t off);
	int (*munmap)(void *addr, size_t len);
	void *(*mremap)(void *old, size_t old_len, size_t new_len, int flags, void *new_addr);
	int (*madvise)(void *addr, size_t len, int advice);
	int (*mlock)(const void *addr, size_t len);
	int (*munlock)(const void *addr, size_t len);
	long (*mbind)(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
		      unsigned long maxnode, unsigned flags);
	int (*thread_create)(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			     void *arg);
	/* hugetlb pages of the given size to be had: free in the pool, and
	 * what nr_overcommit_hugepages still allows; -1 if unknown */
	long (*hugetlb_free_pages)(size_t page_size);
	/* MemAvailable of /proc/meminfo in bytes; 0 if unknown */
	uint64_t (*mem_available)(void);
	/* vm.overcommit_memory: 0 heuristic, 1 always, 2 strict; -1 if unknown */
	int (*overcommit_mode)(void);
	/* the files behind the CMA areas (frames.c) */
	int (*memfd_create)(const char *name, unsigned flags);
	int (*ftruncate)(int fd, off_t len);
	int (*fallocate)(int fd, int mode, off_t off, off_t len);
	ssize_t (*pwrite)(int fd, const void *buf, size_t len, off_t off);
	/* heap lending reads a frame through its file when taking it back */
	ssize_t (*pread)(int fd, void *buf, size_t len, off_t off);
	/* heap lending (lend.c): a new userfaultfd, and its ioctls */
	int (*userfaultfd)(int flags);
	int (*uffd_ioctl)(int fd, unsigned long request, void *arg);
};

UCMA_INTERNAL extern struct ucma_os_ops ucma_os;
UCMA_INTERNAL void ucma_os_reset(void);
UCMA_INTERNAL long ucma_os_hugetlb_free_pages(size_t page_size);
/* Is every page of [addr, addr + len) mapped (mincore(); true when that
 * cannot be told)? */
UCMA_INTERNAL bool ucma_os_range_mapped(void *addr, size_t len);
/* MADV_POPULATE_WRITE, asked no more once the kernel said it lacks it. */
UCMA_INTERNAL int ucma_os_populate(void *addr, size_t len);
UCMA_INTERNAL bool ucma_os_thp_available(void);
/* THP "always": private mappings get huge pages unasked. */
UCMA_INTERNAL bool ucma_os_thp_always(void);
/* Bytes of memory the kernel can give without swapping (MemAvailable of
 * /proc/meminfo), read without allocating; 0 when unknown. */
UCMA_INTERNAL uint64_t ucma_os_mem_available(void);
UCMA_INTERNAL bool ucma_os_shmem_thp_available(void);
/* Is vm.overcommit_memory 2 (strict accounting)?  Shmem pages are then
 * charged when first touched, and one the kernel refuses is SIGBUS. */
UCMA_INTERNAL bool ucma_os_overcommit_strict(void);
UCMA_INTERNAL int ucma_os_pagemap(const void *addr, uint64_t *phys);
/* Physical address of the first page of each of @n pieces of @stride bytes
 * from @addr (0: not present); -1 with EPERM / ENOTSUP as above. */
UCMA_INTERNAL int ucma_os_pagemap_stride(const void *addr, size_t stride, size_t n,
					 uint64_t *phys);
/* Leading pages of [addr, addr + npages pages) present and physically
 * contiguous with the first; *absent: the run ended at a page not present.
 * -1 with errno EPERM / ENOTSUP when frames are unknown to this process. */
UCMA_INTERNAL long ucma_os_phys_run(const void *addr, size_t npages, bool *absent);
/* Index of the first page present among @npages from @addr (@npages: none);
 * -1 with ENOTSUP. */
UCMA_INTERNAL long ucma_os_next_present(const void *addr, size_t npages);
UCMA_INTERNAL uint64_t ucma_os_now_ns(void);
/* Threads running or waiting for a CPU now, system-wide, the caller
 * among them (/proc/loadavg); -1 when that cannot be read. */
UCMA_INTERNAL long ucma_os_threads_runnable(void);
/* A thread of the library (through ucma_os.thread_create), made with
 * every signal blocked; returns 0 or pthread_create()'s error. */
UCMA_INTERNAL int ucma_thread_start(pthread_t *t, const pthread_attr_t *attr,
				    void *(*fn)(void *));
/* The CPUs this process may run on; 0 when that cannot be learnt. */
UCMA_INTERNAL unsigned ucma_cpus_allowed(void);
/* close(2) as the raw system call (see os.c). */
UCMA_INTERNAL int ucma_os_close(int fd);
/* A close-on-exec copy of @fd numbered 256 or so (see os.c); -1 with errno. */
UCMA_INTERNAL int ucma_os_dup_high(int fd);
/*
 * A descriptor the library keeps open (an area's file, the userfaultfd)
 * moved out of the low numbers a program expects open() to give it:
 * @fd's close-on-exec copy from ucma_os_dup_high(), @fd closed; @fd itself
 * when no number above it is free, or when @fd is negative (errno left
 * as it was).
 */
UCMA_INTERNAL int ucma_os_fd_high(int fd);

#endif /* UCMA_OS_H */
