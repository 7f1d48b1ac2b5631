/*
 * lend.c - lending the idle frames of the CMA areas to the malloc heap,
 * and taking them back when ucma_alloc() needs them.
 *
 * Under LD_PRELOAD every malloc block is unmovable (the program holds raw
 * pointers), so without this the memory reserved for device buffers sits
 * idle beside the heap, as with a static reservation.  With it, the heap's
 * address never changes but the frame behind it may: a 2 MiB pageblock of
 * the NORMAL zone can be backed by a frame of a CMA area (frames.c maps it
 * there MAP_SHARED | MAP_FIXED), and is given memory of its own again,
 * contents and address unchanged, when the frame is wanted back.
 *
 * The heap's window: with lending, arena.c gives the NORMAL zone the
 * address range of the whole arena size, the CMA areas beside it, so the
 * heap can grow onto every frame they lend.  A NORMAL zone of arena - CMA
 * (as without lending) made a heap larger than that overflow to
 * mappings of its own beside the reserve (lending only changed which
 * frames backed NORMAL's pageblocks): the reserve was paid twice after
 * all, and the overflow's mmap/munmap made such a program twice as slow
 * as with no reservation (bench-heap-lend).
 *
 * Lending (zone.c asks, under the NORMAL zone lock): a request of the
 * malloc family that would break into a fresh NORMAL pageblock (wholly
 * free and clean, so nothing is behind it yet) takes a free CMA pageblock
 * whose area has 2 MiB frames instead, as an allocated run of the CMA zone
 * owned by UCMA_OWN_LENT; the NORMAL pageblock is isolated and its state
 * here says "reserved".  An UNMAP event for the frame's own range is
 * posted.  Once no lock is held (ucma_lend_commit()): the event is
 * delivered, the frame is mapped at the heap's address, populated, and
 * the pageblock's state says "borrowed"; then the isolation ends and the
 * request is tried again.  A frame that may hold old data makes the
 * pageblock's free pages dirty, so calloc() zeroes what it hands out.
 * A request made while the thread holds a lock of the library (lock.h:
 * glibc's pthread_create() allocating for a thread that the compaction
 * thread's start makes under its lock) gets no frame: events are not
 * delivered inside a lock, and the UNMAP must reach the callbacks before
 * the heap's data reaches the frame.
 *
 * Taking back (ucma_alloc() via cma.c, ucma_unlend(), fork): a borrowed
 * pageblock that is wholly free gets fresh private memory at once, nothing
 * to copy.  Otherwise: a private staging mapping is made and prefaulted
 * (MADV_POPULATE_WRITE), the pageblock is registered with the process's
 * userfaultfd (UFFDIO_REGISTER_MODE_WP; UFFD_FEATURE_WP_UNPOPULATED, or a
 * store to a page never touched would slip through), then, piece by
 * piece: write-protect, copy the piece from the frame's own mapping in the
 * CMA area (always mapped there, whatever the program did to the heap's
 * mapping), mremap() the staging piece over the heap's, UFFDIO_WAKE the
 * writers of that range.  Threads, signal handlers and the kernel itself
 * (read(2), recv(), getrandom() into the page) writing during the window
 * wait and then complete; readers never wait.  The moved pieces are the
 * staging's mappings, registered with nothing; a take-back that fails
 * unprotects, unregisters and wakes what is left.
 *
 * The userfaultfd: one for the process's life, opened when lending is
 * switched on (ucma_lend_init()) and kept.  Opening one per take-back, as
 * a first version did, failed for good in a process that later lost the
 * right to open one (setuid(), capset(), a seccomp filter, RLIMIT_NOFILE
 * exhausted, /dev/userfaultfd's mode): its frames stayed lent and
 * ucma_alloc() failed on them for ever.  No frame is mapped at the heap
 * without it in hand (ucma_lend_commit()).  The child of a fork closes the
 * inherited one, whose ioctls would act on the parent's memory, and opens
 * its own (ucma_lend_fork_child()).  The program's close(), close_range(),
 * closefrom(), dup2() and dup3() leave it and the areas' files alone
 * (preload/lend_guard.c, ucma_owns_fd()); only when the kernel refuses
 * to unprotect, unregister and wake is it closed (closing wakes every
 * waiter) and another one opened.  Pieces are 256 KiB for shmem
 * frames on a staging of 4 KiB pages (each writer waits for one piece
 * only), and the whole pageblock for a staging on a huge page (moving a
 * part would split it before the rest is copied) and for hugetlb frames
 * (one page).  Only full userfaultfd will do:
 * mprotect() with a SIGSEGV handler, or UFFD_USER_MODE_ONLY, make system
 * calls writing there fail with EFAULT, and a datagram or a connection is
 * lost; without it lending is off.
 *
 * The taking-back thread's own stack: a thread running on a stack it
 * allocated with malloc (coroutines, pthread_attr_setstack(), which also
 * puts glibc's thread control block, errno and the library's TLS there)
 * would fault on its own write-protected stack with nobody left to wake
 * it.  The pieces holding its stack or TLS are moved by a helper task
 * instead: a task sharing the address space, made with the clone system
 * call itself (no C library or sanitizer code runs in it) on a static
 * stack, that write-protects, copies, remaps and wakes with its own system
 * calls and calls nothing that writes TLS (it has the thread's thread
 * pointer), while the thread waits on a word in static memory (the
 * helper's CLONE_CHILD_CLEARTID word) and, should it touch its stack
 * meanwhile, on the write-protection, which the helper lifts.  Signals
 * are blocked.
 *
 * Fork: the child must not share borrowed pageblocks with the parent (they
 * are MAP_SHARED), and must see the heap as it was at the fork.  They
 * carry MADV_DONTFORK.  In a process with threads the fork's prepare
 * handler takes every borrowed pageblock back while the other threads run
 * on (stage "lend"): the child then inherits private memory as usual, a
 * snapshot of the fork's instant.  That includes the pageblock holding
 * the forking thread's own stack (the helper above moves those pieces);
 * before, it fell to the child to copy while the parent's threads went on
 * writing (the child saw their later writes), and a child running on
 * that stack remapped a copy over it under its own feet.  Only a take-back
 * that fails (no memory, the kernel refusing) still leaves a pageblock to
 * the child's copy.  In
 * a single-threaded one nobody else writes the heap, so the parent keeps
 * its lending: the fork lifts MADV_DONTFORK (stage "lend frames", after
 * the frame tables), blocks the forking thread's signals, and the child
 * copies each borrowed pageblock to private memory of its own while the
 * parent waits in its handler, then frees the lent runs in its own
 * metadata before frames.c gives it CMA areas of its own.  (A child that
 * copies while the parent's threads run would see their later writes: the
 * first version did, and tests/integration/fork_threads caught it.)
 *
 * Futex words: a shared futex on a MAP_SHARED page is keyed by the file
 * and offset, on private memory by the address, so a thread waiting before
 * a take-back is never woken by a wake after it (measured: pthread_join(),
 * which glibc waits in as a shared futex on the thread's tid word, of a
 * thread whose descriptor lies on a borrowed pageblock because its stack
 * came from malloc, hung after the thread exited; process-shared mutexes,
 * condition variables and semaphores time out the same way; private
 * futexes are keyed by address and unaffected).  Nor does the kernel wait
 * on a userfaultfd for an exiting task: its clear_child_tid write into a
 * write-protected page is lost (measured), and so is a robust-list write;
 * the priority-inheritance calls' writes fail there.  The kernel holds
 * such a word by its frame, as a long-term pin holds memory, and it gets
 * the same treatment: preload/futex_guard.c takes the pageblocks of a
 * heap thread stack (pthread_attr_setstack(), pthread_attr_setstackaddr(),
 * pthread_create()), of a process-shared, robust or priority-inheritance
 * object (the pthread_*_init() calls, sem_init()) and of the words of
 * futex system calls made through syscall() back when the program sets
 * them up, and a pageblock holding live blocks is never lent again.  Not
 * seen, so still exposed (UCMA_CMA_POLICY=lend-handles is the setting for
 * programs that do such things): futex calls made with the system call
 * instruction (statically linked code, inline calls on words set up by
 * hand), a process-shared object copied into place (memcpy()) rather
 * than initialised, a raw clone() with its stack or CLONE_CHILD_CLEARTID
 * word on the heap, and programs that use libucma.so's own heap for such
 * words without the preloaded library.
 *
 * Memory that the kernel or a device holds on to (mlock, io_uring fixed
 * buffers, RDMA, CUDA host registration, O_DIRECT) must not be copied
 * away under it: ucma_unlend() takes the pageblocks of such a range back
 * first, and a pageblock holding live blocks is never lent again (only
 * fresh ones are).
 *
 * State: one byte-sized story per NORMAL pageblock in lend.of[] (NONE,
 * reserved, borrowed, being taken back, with the lent CMA pageblock's
 * index).
 * Locking: lend.of[] entries change under the NORMAL zone lock (atomic
 * stores; lock-free readers only look).  lend.lock serialises commits and
 * take-backs and is held from start to end of each; it nests outside the
 * zone locks, the frame locks and the event lock, and is never held while
 * memory events are delivered.  Nothing is taken while writers wait on a
 * write-protected range, and no code of the library writes heap memory
 * under a lock, so a waiting writer never holds what the take-back needs.
 * A fork takes lend.lock first (stage "lend", before the zone locks).
 * A signal handler on a thread that holds other locks of the library
 * (lock.h) never waits for lend.lock or takes anything back: the call
 * fails with EAGAIN (refused_in_allocator()).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "lock.h"
#include "lend.h"
#include "frames.h"
#include "fork.h"
#include "memevent.h"
#include "rcu.h"
#include "raw_syscall.h"
#include "pcp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Newer than some kernel headers (Linux 6.4). */
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif

#define LEND_FEATURES (UFFD_FEATURE_WP_HUGETLBFS_SHMEM | UFFD_FEATURE_WP_UNPOPULATED)
#define LEND_PIECE_SHMEM ((size_t)256 << 10)

/* lend.of[] of a NORMAL pageblock: the lent CMA pageblock's index and a state. */
#define LEND_NONE	UINT32_MAX
#define LEND_RESERVED	0x80000000u	/* frame taken, not mapped yet (pageblock isolated) */
#define LEND_TAKING	0x40000000u	/* being taken back */
#define LEND_DIRTY	0x20000000u	/* reserved: the frame may hold old data */
#define LEND_MOVED_SHIFT 24		/* pieces already on private memory (a take-back
					 * that failed half way resumes there) */
#define LEND_MOVED_OF(s) (((s) >> LEND_MOVED_SHIFT) & 0xfu)
#define LEND_PB_MASK	0x00ffffffu

/* A pageblock lent next to none starts a run of frames that pageblocks
 * lent after it can continue upwards, in one mapping: up to 16 (32 MiB).
 * More would put the first of a run deeper into the free pageblocks that
 * ucma_alloc() looks at first. */
#define LEND_RUN_GROW	16u

/*
 * struct ucma_lend - heap lending of this process.
 * @lock: see the locking rule above; @of: under the NORMAL zone lock;
 * the rest is set by ucma_lend_init() (single-threaded start-up) or read
 * and written atomically.
 */
static struct ucma_lend {
	pthread_mutex_t lock;
	struct ucma_arena *a;
	uint32_t *of;			/* per arena pageblock; meta.c memory; NULL: off */
	uint32_t nr_pb;
	bool lendable[UCMA_MAX_CMA_AREAS];	/* area has 2 MiB frames on a file */
	unsigned run_grow;		/* LEND_RUN_GROW where lent mappings merge, else 1 */
	_Atomic bool on;		/* new pageblocks may be lent */
	_Atomic int uffd;		/* the process's userfaultfd while lending is on, or -1;
					 * changed under @lock, or single-threaded (start-up,
					 * the child of a fork) */
} lend UCMA_FORK_LOCK = { .lock = PTHREAD_MUTEX_INITIALIZER, .uffd = -1 };

/* NORMAL pageblocks in state borrowed or taking (lend.h): written under
 * the NORMAL zone lock or single-threaded, read anywhere. */
_Atomic uint32_t ucma_lend_nr_borrowed;
_Atomic uint32_t ucma_lend_epoch;

/* The userfaultfd probe, once per process: 1 usable, 0 not, -1 not asked. */
static int uffd_usable = -1;
static int uffd_errno;

static uint32_t of_get(uint32_t pb)
{
	return __atomic_load_n(&lend.of[pb], __ATOMIC_ACQUIRE);
}

static void of_set(uint32_t pb, uint32_t v)
{
	__atomic_store_n(&lend.of[pb], v, __ATOMIC_RELEASE);
}

/*
 * lend.lock with every signal blocked on this thread: a handler that wrote
 * a piece this thread is moving would wait for it, and one that took the
 * lock (allocating, or a preloaded dup2() onto the library's descriptor)
 * would deadlock.  Only a fork holds the lock otherwise (stage "lend").
 */
static void lend_lock(sigset_t *saved)
{
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, saved);
	ucma_mutex_lock(&lend.lock);
}

static void lend_unlock(const sigset_t *saved)
{
	ucma_mutex_unlock(&lend.lock);
	pthread_sigmask(SIG_SETMASK, saved, NULL);
}

/*
 * Is this thread inside the allocator, holding some of its locks (lock.h)?
 * Then it is a signal handler that interrupted it, calling madvise(),
 * mlock(), _Fork() or direct I/O on lent heap memory, and a take-back
 * would wait for the zone or per-CPU list lock that its own interrupted
 * code holds, or for lend.lock held by a take-back on another thread that
 * waits for that lock: a deadlock either way.  The call fails with EAGAIN
 * instead (a documented error of each of them), said once per process.
 */
static bool refused_in_allocator(const char *what)
{
	static _Atomic bool said;

	if (UCMA_LIKELY(ucma_locks_held == 0))
		return false;
	if (!atomic_exchange(&said, true))
		ucma_log("%s from a signal handler that interrupted the allocator: refused with "
			 "EAGAIN (the interrupted code holds locks that taking lent heap memory "
			 "back needs)",
			 what);
	errno = EAGAIN;
	return true;
}

/*
 * lend_lock() for what a signal handler may reach without a take-back
 * (moving a descriptor, a raw fork with nothing borrowed): a thread that
 * holds other locks of the library only tries lend.lock, whose holder
 * may be waiting for them.  False with errno EAGAIN, signals as they were,
 * when it is busy.
 */
static bool lend_lock_nested(sigset_t *saved, const char *what)
{
	sigset_t all;

	if (UCMA_LIKELY(ucma_locks_held == 0)) {
		lend_lock(saved);
		return true;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, saved);
	if (ucma_mutex_trylock(&lend.lock) == 0)
		return true;
	pthread_sigmask(SIG_SETMASK, saved, NULL);
	return !refused_in_allocator(what);
}

static uint32_t pb_pfn(uint32_t pb)
{
	return pb << UCMA_PAGEBLOCK_ORDER;
}

/* ------------------------------------------------------------------------ */
/* userfaultfd                                                               */
/* ------------------------------------------------------------------------ */

/* A userfaultfd with write-protection for shmem and hugetlbfs and for
 * pages never touched; -1 with errno. */
static int uffd_open(void)
{
	struct uffdio_api api = { .api = UFFD_API, .features = LEND_FEATURES };
	int fd = ucma_os_fd_high(ucma_os.userfaultfd(O_CLOEXEC | O_NONBLOCK)), err;

	if (fd < 0)
		return -1;
	if (ucma_os.uffd_ioctl(fd, UFFDIO_API, &api) != 0 ||
	    (api.features & LEND_FEATURES) != LEND_FEATURES ||
	    !(api.ioctls & (1ull << _UFFDIO_REGISTER))) {
		err = errno ? errno : ENOTSUP;
		ucma_os_close(fd);
		errno = err == EINVAL ? ENOTSUP : err;
		return -1;
	}
	return fd;
}

static int uffd_register(int fd, void *addr, size_t len)
{
	struct uffdio_register reg = {
		.range = { (uintptr_t)addr, len },
		.mode = UFFDIO_REGISTER_MODE_WP,
	};

	return ucma_os.uffd_ioctl(fd, UFFDIO_REGISTER, &reg);
}

static int uffd_protect(int fd, void *addr, size_t len, bool on)
{
	struct uffdio_writeprotect wp = {
		.range = { (uintptr_t)addr, len },
		.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
	};

	return ucma_os.uffd_ioctl(fd, UFFDIO_WRITEPROTECT, &wp);
}

static int uffd_wake(int fd, void *addr, size_t len)
{
	struct uffdio_range r = { (uintptr_t)addr, len };

	return ucma_os.uffd_ioctl(fd, UFFDIO_WAKE, &r);
}

/* Unregistering a write-protected range clears its protection (the
 * kernel resets the ptes) but wakes nobody: callers wake the range. */
static int uffd_unregister(int fd, void *addr, size_t len)
{
	struct uffdio_range r = { (uintptr_t)addr, len };

	return ucma_os.uffd_ioctl(fd, UFFDIO_UNREGISTER, &r);
}

/* Open the process's userfaultfd if it has none; false with errno when it
 * cannot.  lend.lock held, or single-threaded. */
static bool uffd_ensure(void)
{
	int fd;

	if (atomic_load(&lend.uffd) >= 0)
		return true;
	fd = uffd_open();
	if (fd < 0)
		return false;
	atomic_store(&lend.uffd, fd);
	return true;
}

/* Close it (teardown; the inherited copy in the child of a fork). */
static void uffd_drop(void)
{
	/* (Looked at first: in the child of a fork a store copies the page.) */
	int fd = atomic_load(&lend.uffd) < 0 ? -1 : atomic_exchange(&lend.uffd, -1);

	if (fd >= 0)
		ucma_os_close(fd);
}

/* ------------------------------------------------------------------------ */
/* Start-up                                                                  */
/* ------------------------------------------------------------------------ */

static bool normal_private(const struct ucma_options *o)
{
	return o->hugepages_normal != UCMA_BACKING_HUGETLB_1G &&
	       o->hugepages_normal != UCMA_BACKING_HUGETLB_2M;
}

bool ucma_lend_wants_frames(const struct ucma_options *o)
{
	if (o->cma_policy != UCMA_CMA_LEND || !o->cma_size || !normal_private(o))
		return false;
	if (uffd_usable < 0) {
		int fd = uffd_open();

		uffd_usable = fd >= 0;
		uffd_errno = fd >= 0 ? 0 : errno;
		/* Kept: ucma_lend_init() uses it, or closes it. */
		if (fd >= 0 && atomic_load(&lend.uffd) < 0)
			atomic_store(&lend.uffd, fd);
		else if (fd >= 0)
			ucma_os_close(fd);
	}
	return uffd_usable == 1;
}

/* Why lending is off, for UCMA_VERBOSE; NULL when it is on. */
static const char *off_reason(struct ucma_arena *a, const struct ucma_options *o, char *buf,
			      size_t len)
{
	bool any = false;

	if (o->cma_policy != UCMA_CMA_LEND)
		return o->cma_policy == UCMA_CMA_RESERVED ? "UCMA_CMA_POLICY=reserved" :
							    "UCMA_CMA_POLICY=lend-handles";
	if (!normal_private(o))
		return "the NORMAL zone is on hugetlb pages (UCMA_HUGEPAGES_NORMAL)";
	if (!ucma_lend_wants_frames(o)) {
		snprintf(buf, len,
			 "no userfaultfd with write-protection for this process (%s); it needs "
			 "root, CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1 or read-write "
			 "access to /dev/userfaultfd, and Linux 6.4 or later",
			 strerror(uffd_errno));
		return buf;
	}
	for (int k = 0; k < a->nr_areas; k++)
		any |= lend.lendable[k];
	if (!any && ucma_os_overcommit_strict())
		return "no CMA area has 2 MiB frames on a file: under vm.overcommit_memory=2 "
		       "only hugetlb pages give them (free 2 MiB pages in the pool)";
	if (!any)
		return "no CMA area has 2 MiB frames on a file: the areas are private memory or "
		       "1 GiB pages (free 2 MiB hugetlb pages, shmem with huge pages, or "
		       "UCMA_HUGEPAGES=none give them frames; none means 4 KiB pages)";
	return NULL;
}

void ucma_lend_init(struct ucma_arena *a, const struct ucma_options *o)
{
	char buf[256];
	const char *why;

	lend.a = a;
	lend.of = NULL;
	atomic_store(&lend.on, false);
	atomic_store(&ucma_lend_nr_borrowed, 0);
	for (int k = 0; k < a->nr_areas; k++) {
		const struct ucma_frames *f = ucma_area_frames(&a->areas[k]);

		lend.lendable[k] = f && f->fd >= 0 && f->frame_size == UCMA_PAGEBLOCK_SIZE;
	}
	/* The kernel never merges mappings of hugetlb files (VM_DONTEXPAND):
	 * there the frames are taken from the top of the zone one by one. */
	lend.run_grow = LEND_RUN_GROW;
	for (int k = 0; k < a->nr_areas; k++)
		if (lend.lendable[k] && ucma_area_frames(&a->areas[k])->kind == UCMA_FILE_HUGETLB)
			lend.run_grow = 1;
	why = a->nr_areas ? off_reason(a, o, buf, sizeof(buf)) : "there is no CMA area";
	/* The one userfaultfd of the process's life, opened now: a process may
	 * later lose the right to open one (setuid(), capset(), a seccomp
	 * filter, RLIMIT_NOFILE, /dev/userfaultfd's mode), and a frame it
	 * could not take back would be lent for good. */
	if (!why && !uffd_ensure()) {
		snprintf(buf, sizeof(buf), "cannot open a userfaultfd (%s)", strerror(errno));
		why = buf;
	}
	if (!why) {
		lend.nr_pb = a->nr_pageblocks;
		lend.of = ucma_meta_alloc((size_t)lend.nr_pb * sizeof(*lend.of));
		if (!lend.of)
			why = "no memory for its table";
		else
			memset(lend.of, 0xff, (size_t)lend.nr_pb * sizeof(*lend.of));
	}
	if (why)
		uffd_drop();
	if (why && o->verbose && a->nr_areas)
		ucma_log("lending the CMA areas to the heap is off: %s", why);
	else if (!why && o->verbose)
		ucma_log("lending the CMA areas to the heap: on (frames of 2 MiB, taken back "
			 "with userfaultfd write-protection)");
	atomic_store(&lend.on, why == NULL);
}

void ucma_lend_fini(struct ucma_arena *a)
{
	if (lend.a != a)
		return;
	atomic_store(&lend.on, false);
	if (lend.of)
		ucma_meta_free(lend.of, (size_t)lend.nr_pb * sizeof(*lend.of));
	lend.of = NULL;
	lend.a = NULL;
	atomic_store(&ucma_lend_nr_borrowed, 0);
	uffd_drop();
#ifdef UCMA_TEST_HOOKS
	/* Tests start again with other userfaultfd calls (ucma_os). */
	uffd_usable = -1;
#endif
}

/* Stop lending for good, saying why once (UCMA_VERBOSE). */
static void lend_off(const char *why, int err)
{
	if (atomic_exchange(&lend.on, false) && ucma_opt.verbose)
		ucma_log("lending the CMA areas to the heap stops: %s (%s)", why, strerror(err));
}

/* ------------------------------------------------------------------------ */
/* Frames                                                                    */
/* ------------------------------------------------------------------------ */

static struct ucma_cma_area *area_of(struct ucma_arena *a, uint32_t cma_pb)
{
	return ucma_area_of_pfn(a, pb_pfn(cma_pb));
}

static uint32_t slot_of(const struct ucma_cma_area *area, uint32_t cma_pb)
{
	return (pb_pfn(cma_pb) - area->base_pfn) >> UCMA_PAGEBLOCK_ORDER;
}

static bool frame_usable(const struct ucma_arena *a, uint32_t pfn)
{
	const struct ucma_cma_area *area = ucma_area_of_pfn((struct ucma_arena *)a, pfn);

	return area && lend.lendable[area - a->areas];
}

/* The frame of lent CMA pageblock @cma_pb goes back to its area: the lent
 * run is freed (dirty) and devices may register the range again. */
static void frame_give_back(struct ucma_arena *a, uint32_t cma_pb)
{
	struct ucma_cma_area *area = area_of(a, cma_pb);

	ucma_frames_set_lent(area, slot_of(area, cma_pb), 1, false);
	ucma_pages_free(a, pb_pfn(cma_pb));
	ucma_mem_event_post(UCMA_MEM_EVENT_MAP, ucma_pfn_to_addr(a, pb_pfn(cma_pb)),
			    UCMA_PAGEBLOCK_SIZE);
}

/* The advice that private memory of the NORMAL zone carries (zone.c maps
 * it with MADV_NOHUGEPAGE first and MADV_HUGEPAGE once the heap grew); -1:
 * none.  NORMAL zone lock held. */
static int normal_advice(const struct ucma_zone *z)
{
	if (z->backing != UCMA_BACKING_THP)
		return -1;
	return z->thp_deferred ? MADV_NOHUGEPAGE : MADV_HUGEPAGE;
}

/* Private memory for the heap at @addr, or a staging mapping (@addr NULL). */
static void *private_map(void *addr, int advice)
{
	void *p = ucma_os.mmap(addr, UCMA_PAGEBLOCK_SIZE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (addr ? MAP_FIXED : 0),
			       -1, 0);

	if (p != MAP_FAILED && advice >= 0)
		ucma_os.madvise(p, UCMA_PAGEBLOCK_SIZE, advice);
	return p;
}

/* ------------------------------------------------------------------------ */
/* Lending                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The CMA pageblock whose frame would continue the mapping of a lent
 * neighbour of NORMAL pageblock @pb (the one after the frame of pb - 1,
 * or before that of pb + 1, in the same area), or UCMA_PFN_NONE.  Each
 * lent pageblock is a mapping of its own otherwise: a heap of a GiB on
 * frames cost a thousand of vm.max_map_count's 65,530.  Under the NORMAL
 * zone lock (lend.of[]).
 */
static uint32_t frame_continuing(struct ucma_arena *a, uint32_t pb)
{
	if (lend.run_grow == 1)
		return UCMA_PFN_NONE;
	for (int dir = -1; dir <= 1; dir += 2) {
		uint32_t n = pb + (uint32_t)dir, s, c;

		if (n >= lend.nr_pb)	/* (pb - 1 wraps round when pb is 0) */
			continue;
		s = of_get(n);
		if (s == LEND_NONE || (s & LEND_TAKING))
			continue;
		c = (s & LEND_PB_MASK) - (uint32_t)dir;
		if (c < a->nr_pageblocks && area_of(a, c) == area_of(a, s & LEND_PB_MASK))
			return c << UCMA_PAGEBLOCK_ORDER;
	}
	return UCMA_PFN_NONE;
}

bool ucma_lend_reserve_locked(struct ucma_arena *a, uint32_t pb)
{
	uint32_t cma_pfn;
	bool dirty;

	/* Not for an allocation inside a memory-event callback: its UNMAP
	 * would be delivered only after the callback returned, when the
	 * heap had written the frame already (ucma_lend_commit() would
	 * refuse it then).  And each reservation posts an UNMAP and, refused,
	 * a MAP to the delivery under way: a callback that allocated kept
	 * that delivery going for ever.  Nor inside a read-side section,
	 * which may not wait for a delivery (a callback may be waiting for
	 * the reader): each refusal there posted the same pair, and a
	 * callback that waits for readers then hardly advanced. */
	if (!atomic_load_explicit(&lend.on, memory_order_relaxed) || pb >= lend.nr_pb ||
	    of_get(pb) != LEND_NONE || ucma_mem_event_in_callback() || ucma_rcu_in_section())
		return false;
	cma_pfn = ucma_zone_take_free_pageblock(&a->zones[UCMA_ZONE_CMA], frame_usable,
						UCMA_OWN_LENT, pb, frame_continuing(a, pb),
						lend.run_grow, &dirty);
	if (cma_pfn == UCMA_PFN_NONE)
		return false;
	of_set(pb, (cma_pfn >> UCMA_PAGEBLOCK_ORDER) | LEND_RESERVED | (dirty ? LEND_DIRTY : 0));
	/* A device that registered the area must let go of this frame: the
	 * heap's data will be there. */
	ucma_mem_event_post(UCMA_MEM_EVENT_UNMAP, ucma_pfn_to_addr(a, cma_pfn), UCMA_PAGEBLOCK_SIZE);
	return true;
}

bool ucma_lend_commit(struct ucma_arena *a, uint32_t pb)
{
	struct ucma_zone *z = &a->zones[UCMA_ZONE_NORMAL];
	uint32_t s = of_get(pb), cma_pb = s & LEND_PB_MASK;
	struct ucma_cma_area *area = area_of(a, cma_pb);
	void *at = ucma_pfn_to_addr(a, pb_pfn(pb));
	sigset_t saved;
	int rc, err = 0;
	bool on, nested, touched = false;

	if (!(s & LEND_RESERVED))
		ucma_fatal("internal error: pageblock %u was not reserved for lending", pb);
	/* UNMAP is delivered before the heap's data can reach the frame:
	 * where the delivery says it could not deliver everything queued,
	 * no frame, and the pageblock keeps its memory.  A caller that holds
	 * a lock of the library (lock.h: a thread being created under the
	 * compaction lock allocates its thread data) gets no frame either.
	 * (Callbacks and readers, which may not wait for a delivery, are
	 * turned away earlier, by ucma_lend_reserve_locked().) */
	nested = !ucma_mem_event_deliver() || ucma_locks_held != 0;
	lend_lock(&saved);
	/*
	 * Lending may have been turned off since the reservation:
	 * ucma_unlend_all() clears lend.on before it takes lend.lock and
	 * passes over reserved pageblocks, so a frame mapped now would stay
	 * lent after it returned.  Checked under the lock, after which the
	 * call sees the frame mapped and takes it back.  The pageblock keeps
	 * its private memory then.
	 */
	on = atomic_load(&lend.on);
	/* Populated: the heap is about to use it, and the frame is memory
	 * the reservation holds anyway.  MADV_DONTFORK comes with it.  Never
	 * without a userfaultfd in hand: nothing could take it back. */
	rc = on && !nested && uffd_ensure() ?
		     ucma_frames_map_at(area, slot_of(area, cma_pb), 1, at, true, &touched) : -1;
	err = errno;
	ucma_mutex_lock(&z->lock);
	if (rc == 0) {
		if (s & LEND_DIRTY)
			ucma_zone_set_free_dirty_locked(z, pb, true);
		of_set(pb, cma_pb);
		if (atomic_fetch_add(&ucma_lend_nr_borrowed, 1) == 0)
			atomic_fetch_add(&ucma_lend_epoch, 1);
	} else {
		/*
		 * The pageblock (free and isolated) needs private memory,
		 * clean.  Where no frame was mapped it still has its own: a
		 * refused MAP_FIXED leaves the old mapping (the kernel checks
		 * the map count, vm.max_map_count, before it unmaps), and
		 * mapping again would be refused the same way; that aborted
		 * the program in malloc().  Otherwise, or should a refusal
		 * have left a hole after all, private memory is mapped again.
		 */
		if (on && (touched || !ucma_os_range_mapped(at, UCMA_PAGEBLOCK_SIZE)) &&
		    private_map(at, normal_advice(z)) == MAP_FAILED)
			ucma_fatal("heap lending: cannot map private memory at %p again: %s", at,
				   strerror(errno));
		of_set(pb, LEND_NONE);
	}
	ucma_mutex_unlock(&z->lock);
	if (rc == 0) {
		ucma_frames_set_lent(area, slot_of(area, cma_pb), 1, true);
		ucma_count(UCMA_STAT_LEND_HEAP_LENT, 1);
	} else {
		frame_give_back(a, cma_pb);
		if (on)
			ucma_count(UCMA_STAT_LEND_HEAP_FALLBACK, 1);
		/* The program closed the area's file: lending would fail the
		 * same way every time. */
		if (err == EBADF)
			lend_off("cannot map a frame at the heap", err);
	}
	ucma_undo_isolate_range(a, pb_pfn(pb), pb_pfn(pb) + UCMA_PAGEBLOCK_PAGES);
	lend_unlock(&saved);
	ucma_mem_event_deliver();
	return rc == 0;
}

bool ucma_lend_borrowed(const struct ucma_arena *a, uint32_t pb)
{
	return lend.of && lend.a == a && pb < lend.nr_pb && of_get(pb) != LEND_NONE;
}

uint64_t ucma_lend_borrowed_now(void)
{
	return atomic_load_explicit(&ucma_lend_nr_borrowed, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* Taking back                                                               */
/* ------------------------------------------------------------------------ */

/*
 * A borrowed pageblock that is wholly free gets private memory again at
 * once: nothing of the program's is there.  NORMAL zone lock held, state
 * borrowed.  Returns the lent CMA pageblock to give back, or LEND_NONE
 * when private memory could not be mapped (it stays borrowed).
 */
static uint32_t return_free_locked(struct ucma_zone *z, uint32_t pb)
{
	uint32_t s = of_get(pb);

	if (private_map(ucma_pfn_to_addr(z->arena, pb_pfn(pb)), normal_advice(z)) == MAP_FAILED)
		return LEND_NONE;
	ucma_zone_set_free_dirty_locked(z, pb, false);
	of_set(pb, LEND_NONE);
	atomic_fetch_sub(&ucma_lend_nr_borrowed, 1);
	return s & LEND_PB_MASK;
}

void ucma_lend_return_free_locked(struct ucma_zone *z, uint32_t pb)
{
	uint32_t s, cma_pb;

	if (!ucma_lend_borrowed(z->arena, pb))
		return;
	s = of_get(pb);
	if (s & (LEND_RESERVED | LEND_TAKING))
		return;
	cma_pb = return_free_locked(z, pb);
	if (cma_pb == LEND_NONE)
		return;
	frame_give_back(z->arena, cma_pb);
	ucma_count(UCMA_STAT_LEND_HEAP_RETURNED, 1);
}

/*
 * Does [@lo, @hi) hold this thread's own stack or thread control block?
 * A thread running on a stack it allocated with malloc (coroutines,
 * pthread_attr_setstack) that write-protected its own stack would fault
 * on its next push with nobody left to wake it; glibc keeps the TCB, the
 * static TLS (errno) and ucma's own TLS at the top of such a stack.  The
 * margins cover the calls a take-back makes below the current frame and
 * the TLS block below the TCB.  Such pieces are moved by a helper task
 * (move_own_piece()); where there is none (other architectures than
 * x86-64 and AArch64), the take-back fails with EBUSY.
 */
static bool own_stack_in(const char *lo, const char *hi)
{
	const char *sp = (const char *)__builtin_frame_address(0);
	const char *tcb = (const char *)pthread_self();
	const size_t below = 256 * 1024, above = 64 * 1024;

	return (sp + above > lo && sp - below < hi) || (tcb + above > lo && tcb - below < hi);
}

/* ------------------------------------------------------------------------ */
/* The taking-back thread's own stack                                        */
/* ------------------------------------------------------------------------ */

#if defined(__x86_64__) || defined(__aarch64__)
#define LEND_OWN_HELPER 1

/*
 * struct own_move - one piece holding the stack or the thread control
 * block of the thread taking it back, moved by a helper task (lend.lock
 * held: one at a time, so static memory serves).  @tid is the helper's
 * CLONE_CHILD_CLEARTID word: nonzero until the kernel has ended it.
 */
static struct own_move {
	int fd;
	char *at, *staging;
	const char *frame;
	size_t len;
	long rc;			/* 0, or -errno */
	bool closed;			/* the helper had to close @fd (see below) */
	_Atomic int tid;
} own_move;

static char own_move_stack[64 * 1024] __attribute__((aligned(64)));

/*
 * The helper: write-protect, copy, remap, wake, as migrate() does, then
 * end.  It shares the address space with the thread that made it, and its
 * thread pointer too (clone() without CLONE_SETTLS), and that thread's
 * stack and TLS (errno, the library's own) are in the range it protects:
 * so it runs on static memory, makes its system calls itself, and calls
 * nothing (not even memcpy(): a first call through the PLT runs the
 * dynamic linker, which writes the thread control block).  If the remap
 * fails and the kernel will not unprotect the piece either, that thread
 * would wait for good: closing the descriptor ends the protection and
 * wakes every waiter.
 */
/* Uninstrumented: a sanitizer's runtime would look for a thread of its
 * own, which this task is not. */
__attribute__((no_sanitize_address, no_sanitize("thread")))
static int own_helper_fn(void *arg)
{
	struct own_move *m = arg;
	struct uffdio_writeprotect wp = {
		.range = { (uintptr_t)m->at, m->len },
		.mode = UFFDIO_WRITEPROTECT_MODE_WP,
	};
	struct uffdio_range r = { (uintptr_t)m->at, m->len };
	long rc = ucma_raw_syscall6(SYS_ioctl, m->fd, UFFDIO_WRITEPROTECT, (long)&wp, 0, 0, 0);

	if (rc == 0) {
		volatile uint64_t *to = (volatile uint64_t *)(void *)m->staging;
		const volatile uint64_t *from = (const volatile uint64_t *)(const void *)m->frame;

		for (size_t i = 0; i < m->len / sizeof(uint64_t); i++)
			to[i] = from[i];
		rc = ucma_raw_syscall6(SYS_mremap, (long)m->staging, (long)m->len, (long)m->len,
				  MREMAP_MAYMOVE | MREMAP_FIXED, (long)m->at, 0);
		if (rc < 0 && rc > -4096) {
			wp.mode = 0;	/* unprotect, which wakes them */
			if (ucma_raw_syscall6(SYS_ioctl, m->fd, UFFDIO_WRITEPROTECT, (long)&wp, 0, 0,
					 0) != 0) {
				ucma_raw_syscall6(SYS_close, m->fd, 0, 0, 0, 0, 0);
				m->closed = true;
			}
		} else {
			rc = 0;
			/* A writer of the piece sleeps until woken: should the
			 * kernel refuse, closing the descriptor wakes it. */
			if (ucma_raw_syscall6(SYS_ioctl, m->fd, UFFDIO_WAKE, (long)&r, 0, 0, 0) != 0) {
				ucma_raw_syscall6(SYS_close, m->fd, 0, 0, 0, 0, 0);
				m->closed = true;
			}
		}
	}
	m->rc = rc;
	return 0;
}

/*
 * clone() of a task that runs @fn(@arg) on @stack_top and ends with
 * exit(2), made with the system call instruction: the C library's clone()
 * is interposed by sanitizer runtimes (ThreadSanitizer's runs its own code
 * in the new task, which writes the very thread state the helper has
 * write-protected).  Returns the new task's id, or -errno.  The new task
 * shares the caller's registers but for its stack: it touches nothing of
 * the caller's stack.
 */
__attribute__((no_sanitize_address, no_sanitize("thread")))
static long raw_clone(unsigned long flags, void *stack_top, _Atomic int *child_tid,
		      int (*fn)(void *), void *arg)
{
#if defined(__x86_64__)
	register long r10 __asm__("r10") = (long)child_tid;
	register long r8 __asm__("r8") = 0;		/* tls: not CLONE_SETTLS */
	register long r9 __asm__("r9") = (long)arg;
	register long r12 __asm__("r12") = (long)fn;
	long ret;

	__asm__ volatile("syscall\n\t"
			 "test %%rax, %%rax\n\t"
			 "jnz 1f\n\t"
			 /* The new task, on @stack_top (16-byte aligned). */
			 "xor %%ebp, %%ebp\n\t"
			 "mov %%r9, %%rdi\n\t"
			 "call *%%r12\n\t"
			 "mov %%eax, %%edi\n\t"
			 "mov %[exit], %%eax\n\t"
			 "syscall\n\t"
			 "hlt\n\t"
			 "1:"
			 : "=a"(ret)
			 : "a"((long)SYS_clone), "D"(flags), "S"(stack_top), "d"(0L), "r"(r10),
			   "r"(r8), "r"(r9), "r"(r12), [exit] "i"(SYS_exit)
			 : "rcx", "r11", "memory", "cc");
	return ret;
#else
	/* AArch64: clone(flags, stack, parent_tid, tls, child_tid). */
	register long x8 __asm__("x8") = SYS_clone;
	register long x0 __asm__("x0") = (long)flags;
	register long x1 __asm__("x1") = (long)stack_top;
	register long x2 __asm__("x2") = 0;
	register long x3 __asm__("x3") = 0;
	register long x4 __asm__("x4") = (long)child_tid;
	register long x10 __asm__("x10") = (long)fn;
	register long x11 __asm__("x11") = (long)arg;

	__asm__ volatile("svc 0\n\t"
			 "cbnz x0, 1f\n\t"
			 /* The new task, on @stack_top (16-byte aligned). */
			 "mov x29, xzr\n\t"
			 "mov x30, xzr\n\t"
			 "mov x0, x11\n\t"
			 "blr x10\n\t"
			 "mov x8, %[exit]\n\t"
			 "svc 0\n\t"
			 "brk #0\n\t"
			 "1:"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x10), "r"(x11),
			   [exit] "i"(SYS_exit)
			 : "memory", "cc");
	return x0;
#endif
}

/*
 * Move piece [@at, @at + @len) holding this thread's own stack or thread
 * control block through the helper, this thread waiting on a word in
 * static memory meanwhile (a write of its own to the piece would wait
 * for the helper, which never waits for it).  Returns 0, or -1 with errno
 * (the piece is unprotected again, or the descriptor was closed).
 */
static int move_own_piece(int fd, char *at, char *staging, const char *frame, size_t len)
{
	long tid;
	int v;

	own_move = (struct own_move){ fd, at, staging, frame, len, 0, false, 1 };
	tid = raw_clone(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
				CLONE_SYSVSEM | CLONE_CHILD_CLEARTID,
			own_move_stack + sizeof(own_move_stack), &own_move.tid, own_helper_fn,
			&own_move);
	if (tid < 0) {
		errno = (int)-tid;
		return -1;
	}
	while ((v = atomic_load(&own_move.tid)) != 0)
		ucma_raw_syscall6(SYS_futex, (long)&own_move.tid, FUTEX_WAIT, v, 0, 0, 0);
	if (own_move.closed)
		atomic_store(&lend.uffd, -1);	/* a new one at the next take-back */
	if (own_move.rc != 0) {
		errno = (int)-own_move.rc;
		return -1;
	}
	return 0;
}
#endif /* __x86_64__ || __aarch64__ */

/*
 * A take-back that failed: what is left of [@at, @at + @len) is neither
 * write-protected nor registered any more, and its writers are woken.
 * The descriptor stays open for the next take-back, unless the kernel
 * refused all of this: then closing it is what still ends every
 * registration and wakes every waiter (a writer left asleep would hang
 * for good), and a new one is opened at the next take-back.  Returns
 * false in that case.
 */
static bool release_range(int fd, char *at, size_t len)
{
	bool unprotected = uffd_protect(fd, at, len, false) == 0;	/* wakes them too */
	bool unregistered = uffd_unregister(fd, at, len) == 0;

	if (uffd_wake(fd, at, len) == 0 && (unprotected || unregistered))
		return true;
	uffd_drop();
	return false;
}

/*
 * A 2 MiB mapping aligned to 2 MiB, private and anonymous, or MAP_FAILED.
 * The kernel aligns anonymous mappings of that size by itself (Linux 6.7
 * and later); elsewhere twice the size is mapped and trimmed.
 */
static char *aligned_map(void)
{
	const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
	char *p = ucma_os.mmap(NULL, UCMA_PAGEBLOCK_SIZE, prot, flags, -1, 0), *q;
	size_t head;

	if (p == MAP_FAILED || !((uintptr_t)p & (UCMA_PAGEBLOCK_SIZE - 1)))
		return p;
	ucma_os.munmap(p, UCMA_PAGEBLOCK_SIZE);
	p = ucma_os.mmap(NULL, 2 * UCMA_PAGEBLOCK_SIZE, prot, flags, -1, 0);
	if (p == MAP_FAILED)
		return p;
	q = (char *)UCMA_ALIGN_UP((uintptr_t)p, UCMA_PAGEBLOCK_SIZE);
	head = (size_t)(q - p);
	if (head)
		ucma_os.munmap(p, head);
	ucma_os.munmap(q + UCMA_PAGEBLOCK_SIZE, UCMA_PAGEBLOCK_SIZE - head);
	return q;
}

/*
 * The destination of a take-back's copy: a whole pageblock of private
 * memory, populated from byte @from on, so that no fault lengthens the
 * window (*@populated false: it could not be, errno saying why).  Where the NORMAL zone uses
 * transparent huge pages at all (@advice not -1) and the whole pageblock
 * is wanted (*@huge), it is aligned and faulted in as one huge page: one
 * fault and one 2 MiB clear instead of 512 of each, which was most of a
 * take-back's time.  Its memory is used in full either way, so a huge
 * page costs nothing more, even where the zone defers them for a small
 * heap.  Then it takes the zone's advice (the huge page stays), so what
 * is moved onto the heap carries the flags of the heap's own memory.
 */
static char *staging_map(size_t from, int advice, bool *populated, bool *huge)
{
	char *p;
	int err;

	*huge = !from && advice >= 0;
	if (!*huge)
		p = private_map(NULL, advice);
	else if ((p = aligned_map()) != MAP_FAILED)
		ucma_os.madvise(p, UCMA_PAGEBLOCK_SIZE, MADV_HUGEPAGE);
	if (p == MAP_FAILED)
		return p;
	*populated = ucma_os.madvise(p + from, UCMA_PAGEBLOCK_SIZE - from, MADV_POPULATE_WRITE) == 0;
	err = errno;
	if (*huge && advice != MADV_HUGEPAGE)
		ucma_os.madvise(p, UCMA_PAGEBLOCK_SIZE, advice);
	errno = err;
	return p;
}

/*
 * Where a take-back copies from: the area's file, read with pread() at
 * *@off, when its descriptor is still the area's file (returned), or -1:
 * the frame's own mapping in the area.  The kernel then copies from the
 * page cache, through no mapping of the frame: the area's mapping is one
 * the program never touched, and reading it page by page costs a fault
 * per page where page tables are shadowed (some virtual machines), the
 * heap's own mapping may be anything the program made of it.
 */
static int copy_source(struct ucma_arena *a, uint32_t cma_pb, uint64_t *off)
{
	struct ucma_cma_area *area = area_of(a, cma_pb);

	return ucma_frames_file_of(area, slot_of(area, cma_pb), off);
}

/* Copy @len bytes at @off of the frame into @dst: from the file @src_fd
 * at @file_off + @off, and what a read does not bring from @frame + @off. */
static void copy_piece(char *dst, const char *frame, int src_fd, uint64_t file_off, size_t off,
		       size_t len)
{
	size_t done = 0;

	while (src_fd >= 0 && done < len) {
		ssize_t n = ucma_os.pread(src_fd, dst + off + done, len - done,
					  (off_t)(file_off + off + done));

		if (n > 0)
			done += (size_t)n;
		else if (n == 0 || errno != EINTR)
			break;
	}
	if (done < len)
		memcpy(dst + off + done, frame + off + done, len - done);
}

/*
 * Copy borrowed pageblock @pb to private memory of its own while writers
 * wait, piece by piece from piece *@moved on (pieces before it were moved
 * by an earlier attempt).  A staging on one huge page moves in one step,
 * the whole pageblock: moving a part of it splits the huge page into 512
 * page table entries before the rest is copied, and where page tables are
 * shadowed (some virtual machines) each of those costs a fault on its
 * first touch, the copy taking eight times as long; moved whole, it stays
 * one huge page on the heap.  Its writers wait for the whole pageblock,
 * as with hugetlb frames.  lend.lock held, state taking.  Returns 0, or
 * -1 with errno; *@moved then says how many pieces are on private memory
 * already (the rest is still on the frame, writable).
 */
static int migrate(struct ucma_arena *a, uint32_t pb, uint32_t cma_pb, size_t piece,
		   int advice, unsigned *moved)
{
	char *at = ucma_pfn_to_addr(a, pb_pfn(pb)), *staging;
	const char *frame = ucma_pfn_to_addr(a, pb_pfn(cma_pb));
	size_t from = (size_t)*moved * piece;
	uint64_t file_off = 0;
	bool populated = false, huge;
	int fd, err, src_fd;
	size_t step;

#ifndef LEND_OWN_HELPER
	if (own_stack_in(at + from, at + UCMA_PAGEBLOCK_SIZE)) {
		errno = EBUSY;	/* another thread may take it back */
		return -1;
	}
#endif
	staging = staging_map(from, advice, &populated, &huge);
	if (staging == MAP_FAILED)
		return -1;
	/*
	 * No memory for the copy (a memory cgroup at its limit, say): the
	 * copy's own faults would not get it either, and where the cgroup's
	 * OOM killer is off they wait for it for good, inside ucma_alloc().
	 * Refused now, before anything moved, the take-back fails with ENOMEM
	 * and the pageblock stays lent.  Other refusals (a kernel without the
	 * advice) leave the copy to fault as it goes.
	 */
	if (!populated && errno == ENOMEM)
		goto fail_unmap;
	step = huge ? UCMA_PAGEBLOCK_SIZE : piece;
	/* Faults of the copy's source in the area's mapping (touched there
	 * maybe never) would lengthen the window too, if it is read there. */
	src_fd = copy_source(a, cma_pb, &file_off);
	if (!populated || (src_fd < 0 && ucma_os.madvise((void *)(frame + from),
							 UCMA_PAGEBLOCK_SIZE - from,
							 MADV_POPULATE_READ) != 0))
		ucma_count(UCMA_STAT_LEND_HEAP_UNPREFAULTED, 1);
	if (!uffd_ensure())
		goto fail_unmap;
	fd = atomic_load(&lend.uffd);
	if (uffd_register(fd, at + from, UCMA_PAGEBLOCK_SIZE - from) != 0)
		goto fail_unmap;
	for (size_t off = from; off < UCMA_PAGEBLOCK_SIZE; off += step) {
		uint64_t t0 = ucma_os_now_ns();

#ifdef LEND_OWN_HELPER
		if (own_stack_in(at + off, at + off + step)) {
			if (move_own_piece(fd, at + off, staging + off, frame + off, step) != 0)
				goto fail_unregister;
			ucma_stats_lend_stall(ucma_os_now_ns() - t0);
			*moved += (unsigned)(step / piece);
			continue;
		}
#endif
		if (uffd_protect(fd, at + off, step, true) != 0)
			goto fail_unregister;
		copy_piece(staging, frame, src_fd, file_off, off, step);
		if (ucma_os.mremap(staging + off, step, step, MREMAP_MAYMOVE | MREMAP_FIXED,
				   at + off) == MAP_FAILED)
			goto fail_unregister;
		ucma_stats_lend_stall(ucma_os_now_ns() - t0);
		*moved += (unsigned)(step / piece);
		if (uffd_wake(fd, at + off, step) != 0) {
			/*
			 * The piece is moved, but its writers sleep on the
			 * registration until woken and the kernel refused to:
			 * they would sleep for good.  Closing the descriptor
			 * wakes them and ends the registration of the pieces
			 * not moved yet; a new one serves those at the next
			 * take-back.
			 */
			uffd_drop();
			if (off + step < UCMA_PAGEBLOCK_SIZE) {
				errno = EBUSY;
				goto fail_unmap;
			}
		}
	}
	/* The moved pieces are the staging's mappings, never registered:
	 * nothing of the range is registered any more. */
	if (from)
		ucma_os.munmap(staging, from);
	return 0;
fail_unregister:
	err = errno;
	if (atomic_load(&lend.uffd) == fd)	/* not closed by the helper */
		release_range(fd, at + (size_t)*moved * piece,
			      UCMA_PAGEBLOCK_SIZE - (size_t)*moved * piece);
	errno = err;
fail_unmap:
	/* What ucma_unlend(3) documents: the kernel's refusals (EINVAL,
	 * EAGAIN, EFAULT of an ioctl, ...) are EBUSY, a take-back that may
	 * work later; EINVAL and EAGAIN mean other things there. */
	err = errno == ENOMEM || errno == EMFILE || errno == EPERM ? errno : EBUSY;
	/* What is left of the staging mapping: the pieces not moved (the
	 * addresses of moved ones may belong to someone else by now). */
	ucma_os.munmap(staging + (size_t)*moved * piece,
		       UCMA_PAGEBLOCK_SIZE - (size_t)*moved * piece);
	if (from)
		ucma_os.munmap(staging, from);
	errno = err;
	return -1;
}

/* The piece size of taking back from the frame of CMA pageblock @cma_pb. */
static size_t piece_of(struct ucma_arena *a, uint32_t cma_pb)
{
	return ucma_area_frames(area_of(a, cma_pb))->kind == UCMA_FILE_HUGETLB ?
		       UCMA_PAGEBLOCK_SIZE : LEND_PIECE_SHMEM;
}

/*
 * Take borrowed pageblock @pb back, lend.lock held.  Returns 0 (private
 * memory of its own now, or it was not borrowed), or -1 with errno EAGAIN
 * (reserved, mapping in progress) or what migrate() said.
 */
static int take_back_locked(struct ucma_arena *a, uint32_t pb)
{
	struct ucma_zone *z = &a->zones[UCMA_ZONE_NORMAL];
	uint32_t s, cma_pb;
	unsigned moved;
	int advice, rc, err;

	/* Runs of it on per-CPU lists (pcp.c), a whole pageblock among them,
	 * are free: back to the buddy lists first, so that a pageblock with
	 * nothing else in it gives its frame back instead of being copied. */
	ucma_pcp_lock_all(z);
	ucma_mutex_lock(&z->lock);
	ucma_pcp_drain_range_locked(z, pb_pfn(pb), pb_pfn(pb) + UCMA_PAGEBLOCK_PAGES);
	ucma_pcp_unlock_all(z);
	s = of_get(pb);
	if (s == LEND_NONE) {
		ucma_mutex_unlock(&z->lock);
		return 0;
	}
	if (s & LEND_RESERVED) {
		ucma_mutex_unlock(&z->lock);
		errno = EAGAIN;
		return -1;
	}
	cma_pb = s & LEND_PB_MASK;
	if (a->blocks[pb].nr_free == UCMA_PAGEBLOCK_PAGES) {
		uint32_t back = return_free_locked(z, pb);

		ucma_mutex_unlock(&z->lock);
		if (back == LEND_NONE)
			return -1;
		frame_give_back(a, back);
		ucma_count(UCMA_STAT_LEND_HEAP_RETURNED, 1);
		return 0;
	}
	advice = normal_advice(z);
	moved = LEND_MOVED_OF(s);
	of_set(pb, s | LEND_TAKING);
	ucma_mutex_unlock(&z->lock);

	rc = migrate(a, pb, cma_pb, piece_of(a, cma_pb), advice, &moved);
	err = errno;

	ucma_mutex_lock(&z->lock);
	of_set(pb, rc == 0 ? LEND_NONE : cma_pb | (uint32_t)moved << LEND_MOVED_SHIFT);
	if (rc == 0)
		atomic_fetch_sub(&ucma_lend_nr_borrowed, 1);
	ucma_mutex_unlock(&z->lock);
	ucma_count(UCMA_STAT_LEND_HEAP_BYTES_COPIED,
		   (uint64_t)(moved - LEND_MOVED_OF(s)) * piece_of(a, cma_pb));
	if (rc != 0) {
		ucma_count(UCMA_STAT_LEND_HEAP_MIGRATE_FAIL, 1);
		errno = err;
		return -1;
	}
	frame_give_back(a, cma_pb);
	ucma_count(UCMA_STAT_LEND_HEAP_MIGRATED, 1);
	return 0;
}

/*
 * Signals stay blocked on this thread while it holds lend.lock and write-
 * protects the heap: a handler that wrote the piece being moved would wait
 * for this very thread, and one that allocated would wait for the lock.
 */
static int take_back(struct ucma_arena *a, uint32_t pb)
{
	sigset_t saved;
	int rc, err;

	if (refused_in_allocator("taking lent heap memory back"))
		return -1;
	lend_lock(&saved);
	rc = take_back_locked(a, pb);
	err = errno;
	lend_unlock(&saved);
	ucma_mem_event_deliver();
	errno = err;
	return rc;
}

int ucma_lend_take_back_run(struct ucma_arena *a, uint32_t head)
{
	struct ucma_zone *cz = &a->zones[UCMA_ZONE_CMA];
	uint32_t pb = UCMA_PFN_NONE;

	ucma_mutex_lock(&cz->lock);
	if (a->pages[head].kind == UCMA_PK_RUN && a->pages[head].owner_type == UCMA_OWN_LENT)
		pb = (uint32_t)a->pages[head].owner;
	ucma_mutex_unlock(&cz->lock);
	if (pb == UCMA_PFN_NONE || !lend.of)
		return UCMA_MIGRATE_OK;	/* given back meanwhile */
	if (take_back(a, pb) == 0)
		return UCMA_MIGRATE_OK;
	return errno == ENOMEM ? UCMA_MIGRATE_NOMEM : UCMA_MIGRATE_PINNED;
}

/* ------------------------------------------------------------------------ */
/* The public interface                                                      */
/* ------------------------------------------------------------------------ */

/*
 * Take back every borrowed pageblock (lend.lock held, signals blocked);
 * those only reserved are wholly free and stay so.  @fork counts each as
 * evacuated for a fork.  Returns how many stay lent, the last error in
 * *@err.
 */
static unsigned take_back_all_locked(struct ucma_arena *a, bool fork, int *err)
{
	unsigned failed = 0;

	for (uint32_t pb = a->zones[UCMA_ZONE_NORMAL].start_pfn >> UCMA_PAGEBLOCK_ORDER;
	     pb < a->zones[UCMA_ZONE_NORMAL].end_pfn >> UCMA_PAGEBLOCK_ORDER; pb++) {
		uint32_t s = of_get(pb);

		if (s == LEND_NONE || (s & LEND_RESERVED))
			continue;
		if (take_back_locked(a, pb) != 0) {
			failed++;
			*err = errno;
		} else if (fork) {
			ucma_count(UCMA_STAT_LEND_HEAP_FORK_EVACUATED, 1);
		}
	}
	return failed;
}

/*
 * The NORMAL pageblocks that [@addr, @addr + @len) touches, @len > 0, as
 * [*@first, *@end); false when none.  A range past the top of the address
 * space ends at the top.
 */
static bool normal_pageblocks(const struct ucma_arena *a, uintptr_t addr, size_t len,
			      uint32_t *first, uint32_t *end)
{
	const unsigned shift = UCMA_PAGE_SHIFT + UCMA_PAGEBLOCK_ORDER;
	uint64_t zfirst = a->zones[UCMA_ZONE_NORMAL].start_pfn >> UCMA_PAGEBLOCK_ORDER;
	uint64_t zend = a->zones[UCMA_ZONE_NORMAL].end_pfn >> UCMA_PAGEBLOCK_ORDER;
	uintptr_t last = len - 1 > UINTPTR_MAX - addr ? UINTPTR_MAX : addr + (len - 1);
	uint64_t lo, hi;

	if (last < a->base)
		return false;
	lo = addr < a->base ? 0 : (addr - a->base) >> shift;
	hi = ((last - a->base) >> shift) + 1;
	lo = lo > zfirst ? lo : zfirst;
	hi = hi < zend ? hi : zend;
	*first = (uint32_t)lo;
	*end = (uint32_t)hi;
	return lo < hi;
}

/**
 * ucma_unlend() - take back every borrowed pageblock that [@addr, @addr +
 * @len) touches.
 */
int ucma_unlend(const void *addr, size_t len)
{
	struct ucma_arena *a = ucma_arena_peek();
	uintptr_t lo = (uintptr_t)addr, last;
	uint32_t first, end;

	/* The range may end exactly at the top of the address space: its
	 * last byte must not wrap, its end may. */
	if (len && __builtin_add_overflow(lo, len - 1, &last)) {
		errno = EINVAL;
		return -1;
	}
	if (len == 0 || !a || !lend.of || lend.a != a ||
	    !ucma_lend_any_borrowed() || !normal_pageblocks(a, lo, len, &first, &end))
		return 0;
	for (uint32_t pb = first; pb < end; pb++) {
		uint32_t s = of_get(pb);

		/* Reserved pageblocks are wholly free: nothing of the range there. */
		if (s == LEND_NONE || (s & LEND_RESERVED))
			continue;
		if (take_back(a, pb) != 0)
			return -1;
	}
	return 0;
}

bool ucma_lend_range_borrowed(const void *addr, size_t len)
{
	struct ucma_arena *a = lend.a;
	uint32_t first, end;

	if (!len || !a || !lend.of || !ucma_lend_any_borrowed() ||
	    !normal_pageblocks(a, (uintptr_t)addr, len, &first, &end))
		return false;
	for (uint32_t pb = first; pb < end; pb++) {
		uint32_t s = of_get(pb);

		if (s != LEND_NONE && !(s & LEND_RESERVED))
			return true;
	}
	return false;
}

/** ucma_unlend_all() - take back everything, lend nothing more. */
int ucma_unlend_all(void)
{
	struct ucma_arena *a = ucma_arena_peek();
	sigset_t saved;
	int rc = 0, err = 0;

	atomic_store(&lend.on, false);
	if (!a || !lend.of || lend.a != a)
		return 0;
	if (ucma_lend_any_borrowed() && refused_in_allocator("ucma_unlend_all()"))
		return -1;
	if (!lend_lock_nested(&saved, "ucma_unlend_all()"))
		return -1;
	if (take_back_all_locked(a, false, &err))
		rc = -1;
	lend_unlock(&saved);
	ucma_mem_event_deliver();
	errno = err;
	return rc;
}

/** ucma_owns_fd() - is @fd one of the library's descriptors? */
int ucma_owns_fd(int fd)
{
	int fds[UCMA_LEND_MAX_FDS], n = ucma_lend_owned_fds(fds);

	for (int i = 0; fd >= 0 && i < n; i++)
		if (fds[i] == fd)
			return 1;
	return 0;
}

int ucma_lend_owned_fds(int *fds)
{
	struct ucma_arena *a = ucma_arena_peek();
	int n = 0, fd = atomic_load_explicit(&lend.uffd, memory_order_acquire);

	if (fd >= 0)
		fds[n++] = fd;
	for (int k = 0; a && k < a->nr_areas; k++) {
		const struct ucma_frames *f = ucma_area_frames(&a->areas[k]);

		fd = f ? __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE) : -1;
		if (fd >= 0)
			fds[n++] = fd;
	}
	/* Ascending (a handful: insertion sort). */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
			fd = fds[j];
			fds[j] = fds[j - 1];
			fds[j - 1] = fd;
		}
	return n;
}

/*
 * Under lend.lock, the only lock under which the library uses its
 * descriptors once it runs (take-backs, and mapping frames at the heap),
 * with signals blocked as for a take-back.
 */
int ucma_lend_move_fd(int fd)
{
	struct ucma_arena *a = ucma_arena_peek();
	sigset_t saved;
	int rc = 0, err = 0;

	if (fd < 0 || !ucma_owns_fd(fd))
		return 0;
	if (!lend_lock_nested(&saved, "moving the library's descriptor"))
		return -1;
	for (int k = -1; a && k < a->nr_areas; k++) {
		struct ucma_frames *f = k < 0 ? NULL : ucma_area_frames(&a->areas[k]);
		_Atomic int *uffd = k < 0 ? &lend.uffd : NULL;
		int cur = f ? __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE) : atomic_load(uffd), to;

		if (cur != fd)
			continue;
		to = ucma_os_dup_high(fd);
		if (to < 0) {
			rc = -1;
			err = errno;
			break;
		}
		if (f)
			__atomic_store_n(&f->fd, to, __ATOMIC_RELEASE);
		else
			atomic_store(uffd, to);
		ucma_os_close(fd);
		break;
	}
	lend_unlock(&saved);
	errno = err;
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Fork                                                                      */
/* ------------------------------------------------------------------------ */


/*
 * struct lend_fork - one fork, stage "lend frames" (after frames.c's, with
 * every zone lock held): the borrowed pageblocks are inherited (DONTFORK
 * lifted), the child copies them to private memory while the parent
 * waits on @wait_rd (one byte, or end of file if the child dies).  The
 * pipe is made at stage "lend", where a process without a descriptor to
 * spare can still take its heap back instead.  The forking thread's alone
 * (every other fork waits for lend.lock).
 */
static struct lend_fork {
	bool any;			/* some pageblock is borrowed or reserved */
	bool copy;			/* some pageblock is borrowed: the child copies */
	int wait_rd, wait_wr;
	sigset_t saved;			/* the forking thread's mask, while @copy */
	bool said_no_pipe;		/* the fallback was said (once per process) */
} lend_fork = { false, false, -1, -1, { { 0 } }, false };

/*
 * Stage "lend", before the zone locks: no commit or take-back is in
 * flight across the fork (so no userfaultfd is open and no pageblock is
 * write-protected).  In a process with threads, every borrowed pageblock
 * is taken back here, while the other threads run on: the child of a fork
 * must see the heap as it was at the fork, and a copy made by the child
 * afterwards would show what the parent's threads write meanwhile.  (Only
 * write-protection could keep them out that long, and a thread that waits
 * on the heap while holding a lock that fork() itself takes later, such as
 * stdio's list lock, would never be woken.)  What cannot be taken back,
 * and everything in a single-threaded process, the child copies (stage
 * "lend frames").  Commits that other threads start meanwhile wait for
 * the lock; their pageblocks are only reserved at the fork.
 */
void ucma_lend_fork_prepare(void)
{
	struct ucma_arena *a = lend.a;
	sigset_t all, saved;
	int err;

	/* With other threads: no commit or take-back across the fork. */
	ucma_fork_lock(&lend.lock);
	if (!a || !lend.of || atomic_load(&ucma_lend_nr_borrowed) == 0)
		return;
	if (ucma_fork_lone()) {
		int fds[2];

		/* The child copies, the parent waiting on this pipe.  With
		 * no descriptor to spare, the parent would run on while the
		 * child copies pageblocks still shared: taken back instead. */
		if (pipe2(fds, O_CLOEXEC) == 0) {
			lend_fork.wait_rd = fds[0];
			lend_fork.wait_wr = fds[1];
			return;
		}
		if (!lend_fork.said_no_pipe) {
			lend_fork.said_no_pipe = true;
			ucma_log("fork: no pipe to wait for the child's copy of the heap (%s): "
				 "the heap is taken back from the CMA frames first", strerror(errno));
		}
	}
	/* As in take_back(): a handler writing a piece being moved would
	 * wait for this thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &saved);
	take_back_all_locked(a, true, &err);	/* the child copies what stays lent */
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
}

void ucma_lend_fork_parent(void)
{
	ucma_fork_unlock(&lend.lock);
	/* What the take-backs posted (MAP of the frames given back). */
}

/*
 * The inherited userfaultfd is the parent's: its ioctls act on the
 * parent's address space (a child could write-protect the parent's heap
 * and nobody would wake its threads).  The child closes it and opens its
 * own at once, single-threaded, rather than at its first lending: the set
 * of the library's descriptors then changes only at start-up, in the child
 * of a fork and under lend.lock (ucma_lend_move_fd()), so the preloaded
 * close_range() can read it without a lock (preload/lend_guard.c).  A
 * child that cannot open one lends nothing (it has nothing borrowed: it
 * copied every borrowed pageblock).
 */
void ucma_lend_fork_child(void)
{
	uffd_drop();
	if (lend.of && atomic_load(&lend.on) && !uffd_ensure())
		lend_off("the child of a fork cannot open a userfaultfd", errno);
	ucma_fork_unlock(&lend.lock);
}

/*
 * Forks without the handlers (lend.h).  The mask saved by prepare's
 * lend_lock() is restored by parent or child: one fork at a time holds
 * the lock, so one saved mask is enough.
 */
static sigset_t raw_fork_saved;

int ucma_lend_raw_fork_prepare(void)
{
	struct ucma_arena *a = lend.a;
	sigset_t saved;
	unsigned failed = 0;
	int err;

	if (a && lend.of && atomic_load(&ucma_lend_nr_borrowed) != 0 &&
	    refused_in_allocator("fork without fork handlers"))
		return -1;
	if (!lend_lock_nested(&saved, "fork without fork handlers"))
		return -1;
	if (a && lend.of && atomic_load(&ucma_lend_nr_borrowed) != 0)
		failed = take_back_all_locked(a, true, &err);
	if (failed) {
		lend_unlock(&saved);
		ucma_mem_event_deliver();
		ucma_log("fork without fork handlers refused: %u heap pageblocks stay on CMA "
			 "frames, which the child would not have", failed);
		errno = EAGAIN;
		return -1;
	}
	raw_fork_saved = saved;
	return 0;
}

void ucma_lend_raw_fork_parent(void)
{
	lend_unlock(&raw_fork_saved);
	ucma_mem_event_deliver();	/* MAP of the frames given back */
}

void ucma_lend_raw_fork_child(bool shared_files)
{
	atomic_store(&lend.on, false);
	/* The parent's: its ioctls would act on the parent's address space.
	 * A shared descriptor table keeps it open for the parent; the number
	 * stays the library's there, so it is only never used. */
	if (!shared_files)
		uffd_drop();
	lend_unlock(&raw_fork_saved);
}

/* Call @fn for every NORMAL pageblock whose state is not none. */
static void for_each_borrowed(void (*fn)(struct ucma_arena *a, uint32_t pb, uint32_t s))
{
	struct ucma_arena *a = lend.a;

	if (!a || !lend.of)
		return;
	for (uint32_t pb = a->zones[UCMA_ZONE_NORMAL].start_pfn >> UCMA_PAGEBLOCK_ORDER;
	     pb < a->zones[UCMA_ZONE_NORMAL].end_pfn >> UCMA_PAGEBLOCK_ORDER; pb++) {
		uint32_t s = of_get(pb);

		if (s != LEND_NONE)
			fn(a, pb, s);
	}
}

static void fork_inherit(struct ucma_arena *a, uint32_t pb, uint32_t s)
{
	lend_fork.any = true;
	if (s & LEND_RESERVED)
		return;
	lend_fork.copy = true;
	ucma_os.madvise(ucma_pfn_to_addr(a, pb_pfn(pb)), UCMA_PAGEBLOCK_SIZE, MADV_DOFORK);
	ucma_count(UCMA_STAT_LEND_HEAP_FORK_COPIED, 1);
}

/* Only the part still on the frame: the pieces an interrupted take-back
 * moved are private memory, which a later child must inherit once the
 * take-back is finished. */
static void fork_hide(struct ucma_arena *a, uint32_t pb, uint32_t s)
{
	size_t from;

	if (s & LEND_RESERVED)
		return;
	from = (size_t)LEND_MOVED_OF(s) * piece_of(a, s & LEND_PB_MASK);
	ucma_os.madvise(ucma_pfn_to_addr(a, pb_pfn(pb)) + from, UCMA_PAGEBLOCK_SIZE - from,
			MADV_DONTFORK);
}

void ucma_lend_frames_fork_prepare(void)
{
	sigset_t all;

	if (lend_fork.any || lend_fork.copy)
		lend_fork.any = lend_fork.copy = false;
	for_each_borrowed(fork_inherit);
	if (!lend_fork.copy) {
		/* Nothing to copy (taken back, or only reserved): no wait. */
		if (lend_fork.wait_rd >= 0) {
			close(lend_fork.wait_rd);
			close(lend_fork.wait_wr);
			lend_fork.wait_rd = lend_fork.wait_wr = -1;
		}
		return;
	}
	/* The only writer of the heap left while the child copies it is a
	 * signal handler of this thread: none runs until the copy is made. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &lend_fork.saved);
	/* Without a pipe (none could be made and a pageblock could not be
	 * taken back either, stage "lend") the child still copies, the
	 * parent running on: fork itself must not fail here. */
}

void ucma_lend_frames_fork_parent(void)
{
	char c;

	for_each_borrowed(fork_hide);
	if (lend_fork.wait_rd >= 0) {
		close(lend_fork.wait_wr);
		while (read(lend_fork.wait_rd, &c, 1) < 0 && errno == EINTR)
			;
		close(lend_fork.wait_rd);
	}
	if (lend_fork.copy)
		pthread_sigmask(SIG_SETMASK, &lend_fork.saved, NULL);
	/* Written only when set: a store after the fork copies the page
	 * while the child still shares it. */
	if (lend_fork.any || lend_fork.copy || lend_fork.wait_rd >= 0) {
		lend_fork.any = lend_fork.copy = false;
		lend_fork.wait_rd = lend_fork.wait_wr = -1;
	}
}

/*
 * In the child, single-threaded, every zone lock held by this thread: a
 * borrowed pageblock becomes private memory with a copy of the frame
 * (read through the area's mapping, inherited, before frames.c replaces
 * it), a reserved one goes back to the free lists, and every lent run is
 * freed in the child's own metadata.  Failing to copy is fatal: the child
 * would read zeros where its heap is.
 */
static void fork_copy(struct ucma_arena *a, uint32_t pb, uint32_t s)
{
	struct ucma_zone *z = &a->zones[UCMA_ZONE_NORMAL];
	uint32_t cma_pb = s & LEND_PB_MASK;
	char *at = ucma_pfn_to_addr(a, pb_pfn(pb));

	if (s & LEND_RESERVED) {
		ucma_undo_isolate_locked(z, pb);
	} else {
		/* Pieces an interrupted take-back moved are private already.
		 * The copy is made as a take-back's (one huge page where the
		 * zone uses them, read from the parent's file, still this
		 * area's: frames.c's child handler runs after this one). */
		size_t from = (size_t)LEND_MOVED_OF(s) * piece_of(a, cma_pb);
		size_t len = UCMA_PAGEBLOCK_SIZE - from;
		uint64_t file_off = 0;
		int src_fd = copy_source(a, cma_pb, &file_off);
		bool populated, huge;
		char *copy = staging_map(from, normal_advice(z), &populated, &huge);

		const char *frame = ucma_pfn_to_addr(a, pb_pfn(cma_pb));

		if (copy == MAP_FAILED) {
			/* No address space for a staging copy (RLIMIT_AS): the
			 * shared pages are replaced in place by private ones,
			 * which takes none more, and filled from the area's
			 * file or its mapping, both still the parent's. */
			int advice = normal_advice(z);

			if (ucma_os.mmap(at + from, len, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
					 0) == MAP_FAILED)
				ucma_fatal("fork: no memory to copy the heap at %p into the child: "
					   "%s", at, strerror(errno));
			if (advice >= 0)
				ucma_os.madvise(at + from, len, advice);
			copy_piece(at, frame, src_fd, file_off, from, len);
		} else {
			copy_piece(copy, frame, src_fd, file_off, from, len);
			if (ucma_os.mremap(copy + from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
					   at + from) == MAP_FAILED)
				ucma_fatal("fork: cannot move the copy of the heap at %p into place: "
					   "%s", at, strerror(errno));
			if (from)
				ucma_os.munmap(copy, from);
		}
	}
	ucma_pages_free_locked(&a->zones[UCMA_ZONE_CMA], pb_pfn(cma_pb));
	of_set(pb, LEND_NONE);
}

void ucma_lend_frames_fork_child(void)
{
	char done = 1;

	for_each_borrowed(fork_copy);
	if (atomic_load(&ucma_lend_nr_borrowed))	/* (a store copies the page) */
		atomic_store(&ucma_lend_nr_borrowed, 0);
	if (lend_fork.wait_rd >= 0)
		close(lend_fork.wait_rd);
	if (lend_fork.wait_wr >= 0) {
		while (write(lend_fork.wait_wr, &done, 1) < 0 && errno == EINTR)
			;
		close(lend_fork.wait_wr);
	}
	if (lend_fork.copy)
		pthread_sigmask(SIG_SETMASK, &lend_fork.saved, NULL);
	if (lend_fork.any || lend_fork.copy || lend_fork.wait_rd >= 0) {
		lend_fork.any = lend_fork.copy = false;
		lend_fork.wait_rd = lend_fork.wait_wr = -1;
	}
}
