/*
 * cma.c - contiguous allocations from the CMA areas: ucma_alloc(),
 * ucma_alloc_area(), ucma_release(), ucma_alloc_size(), ucma_virt2phys().
 * Physically contiguous ones (UCMA_ALLOC_PHYS_CONTIG) read where the
 * physical contiguity of the area's frames breaks from the frame table
 * (frames.c) when it knows, and probe as little as possible otherwise
 * (struct phys_search).
 *
 * ucma_alloc() follows the kernel's cma_alloc() and alloc_contig_range():
 *   1. find a free aligned run in the area's bitmap and claim it there;
 *   2. isolate the pageblocks covering the run: their free pages leave the
 *      free lists and nothing new is placed there;
 *   3. migrate every movable object and movable slab in the run to memory
 *      outside it, then wait for a grace period so the old copies are
 *      really freed; a pinned object is retried briefly, then the run is
 *      abandoned and the next candidate is tried (EBUSY only when no
 *      candidate could be emptied);
 *   4. take the now-free pages as one run, undo the isolation of the rest,
 *      and optionally zero, populate and mlock it.
 * While no device buffer needs them, the CMA areas serve movable objects
 * (zone.c's zonelist): that is the lending of ZONE_CMA.  With
 * UCMA_CMA_POLICY=lend their frames also back pageblocks of the malloc
 * heap; step 3 takes such a lent pageblock back (lend.c: the heap's data
 * is copied to memory of its own at the same address).
 *
 * Locking: the area lock protects the bitmap, the counters and the list
 * of operations in flight only; it is not held while migrating (as the
 * kernel drops cma->lock around alloc_contig_range), so releases and
 * other allocations go on meanwhile.  The bits claimed in step 1 keep
 * other ucma_alloc() calls off the run.  Each allocation and release
 * keeps a record of how far it got (cma.h: struct ucma_cma_op), for the
 * child of a fork that comes in the middle of one.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "memevent.h"
#include "lock.h"
#include "frames.h"
#include "lend.h"
#include "malloc_hooks.h"

#include "rcu.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define CMA_ALLOWED_FLAGS (UCMA_ALLOC_ZERO | UCMA_ALLOC_POPULATE | UCMA_ALLOC_MLOCK | \
			   UCMA_ALLOC_PHYS_CONTIG | UCMA_ALLOC_NOWAIT)
#define CMA_MIGRATE_ROUNDS 6	/* rounds of migration before a run is abandoned */
#define UCMA_PF_MLOCKED 0x04u	/* contiguous run head: mlocked by us */
#define UCMA_PF_FROM_MALLOC 0x10u	/* contiguous run head: made by the preload library's malloc() */

#define LONG_BITS (8u * (uint32_t)sizeof(long))

static void bit_set(unsigned long *map, uint32_t i, bool on)
{
	unsigned long m = 1ul << (i % LONG_BITS);

	if (on)
		map[i / LONG_BITS] |= m;
	else
		map[i / LONG_BITS] &= ~m;
}

/* Set or clear @n bits from @start: whole words at a time in the middle. */
static void bits_set(unsigned long *map, uint32_t start, uint32_t n, bool on)
{
	for (; n && start % LONG_BITS; start++, n--)
		bit_set(map, start, on);
	for (; n >= LONG_BITS; start += LONG_BITS, n -= LONG_BITS)
		map[start / LONG_BITS] = on ? ~0ul : 0;
	for (; n; start++, n--)
		bit_set(map, start, on);
}

/* The first bit in [@i, @end) that is @set, or @end: a word at a time. */
static uint32_t next_bit(const unsigned long *map, uint32_t i, uint32_t end, bool set)
{
	while (i < end) {
		unsigned long w = set ? map[i / LONG_BITS] : ~map[i / LONG_BITS];

		w &= ~0ul << (i % LONG_BITS);
		if (w) {
			uint32_t r = (i / LONG_BITS) * LONG_BITS + (uint32_t)__builtin_ctzl(w);

			return r < end ? r : end;
		}
		i = (i / LONG_BITS + 1) * LONG_BITS;
	}
	return end;
}

/*
 * The first offset >= @from in the area where @n clear bits start, with
 * the address of page base_pfn + offset a multiple of @align pages;
 * UINT32_MAX if none (the kernel's bitmap_find_next_zero_area_off()).
 * @base_vpfn is the arena's base address in pages: pfns are relative to
 * it, and the arena is aligned only to its largest backing page, so an
 * alignment beyond that is a property of the address, not of the pfn.
 * Set and clear stretches are crossed a word at a time, so a full area
 * costs one pass over its words, not one test per page and candidate.
 */
static uint32_t find_zero_area(const struct ucma_cma_area *area, uintptr_t base_vpfn,
			       uint32_t from, uint32_t n, uint32_t align)
{
	uint32_t off = from;

	for (;;) {
		uintptr_t abs;
		uint32_t busy;

		off = next_bit(area->bitmap, off, area->npages, false);
		abs = base_vpfn + area->base_pfn + off;
		if (abs % align)
			off += align - (uint32_t)(abs % align);
		if (off > area->npages || area->npages - off < n)
			return UINT32_MAX;
		busy = next_bit(area->bitmap, off, off + n, true);
		if (busy == off + n)
			return off;
		off = busy + 1;
	}
}

/*
 * One step of a walk over [start, end), head to head from the pageblock
 * start (nothing crosses a pageblock boundary but whole-pageblock runs,
 * which begin on one).  Under the zone lock: returns where the next step
 * starts and, in *@head, the allocated run at @pfn (UCMA_PFN_NONE for free
 * pages).  The lock is dropped between steps, so a walk that migrates
 * resumes from the next head, re-read.
 */
static uint32_t walk_step(struct ucma_arena *a, struct ucma_zone *z, uint32_t pfn, uint32_t *head)
{
	struct ucma_page *p;
	uint32_t next;

	*head = UCMA_PFN_NONE;
	ucma_mutex_lock(&z->lock);
	p = &a->pages[pfn];
	if (p->kind == UCMA_PK_FREE) {
		next = pfn + (1u << p->order);
	} else if (p->kind == UCMA_PK_RUN) {
		*head = pfn;
		next = pfn + p->aux;
	} else if (p->kind == UCMA_PK_TAIL) {
		*head = p->aux;
		next = p->aux + a->pages[p->aux].aux;
	} else {
		next = pfn + 1;	/* raced with a free: re-read */
	}
	ucma_mutex_unlock(&z->lock);
	return next > pfn ? next : pfn + 1;
}

/* Is the run at @head a CMA pageblock lent to the heap (lend.c)?  A look,
 * as ucma_run_pinned()'s. */
static bool run_lent(const struct ucma_arena *a, uint32_t head)
{
	return __atomic_load_n(&a->pages[head].owner_type, __ATOMIC_ACQUIRE) == UCMA_OWN_LENT;
}

/*
 * Does [start, end) hold an object that cannot be moved now (pinned, or
 * not movable)?  Looked at before anything is migrated, so a candidate
 * that would fail is passed over without moving its other objects in
 * vain; *@busy_end is then the end of the first such run (no candidate
 * overlapping it can be emptied either).
 */
static bool range_pinned(struct ucma_arena *a, uint32_t start, uint32_t end, uint32_t *busy_end)
{
	struct ucma_zone *z = ucma_pfn_zone(a, start);

	for (uint32_t pfn = UCMA_ALIGN_DOWN(start, UCMA_PAGEBLOCK_PAGES), head, next; pfn < end;
	     pfn = next) {
		next = walk_step(a, z, pfn, &head);
		if (head != UCMA_PFN_NONE && next > start && !run_lent(a, head) &&
		    ucma_run_pinned(a, head)) {
			*busy_end = next;
			return true;
		}
	}
	return false;
}

/*
 * Pages in use in the pageblocks of [start, end): about what emptying the
 * range moves, so that fresh destinations can be mapped that far ahead
 * (struct ucma_migrate_target).  An estimate: the partial pageblocks at
 * the ends count whole.
 */
static uint32_t pages_in_use(struct ucma_arena *a, uint32_t start, uint32_t end)
{
	struct ucma_zone *z = ucma_pfn_zone(a, start);
	uint32_t used = 0;

	ucma_mutex_lock(&z->lock);
	for (uint32_t b = start >> UCMA_PAGEBLOCK_ORDER; b <= (end - 1) >> UCMA_PAGEBLOCK_ORDER; b++)
		used += UCMA_PAGEBLOCK_PAGES - a->blocks[b].nr_free;
	ucma_mutex_unlock(&z->lock);
	return used;
}

/*
 * Empty [start, end) of every movable object.  Returns 0 when the range is
 * free, else -1 with errno EBUSY (pinned or unmovable content), ENOMEM (no
 * room for the copies) or EDEADLK (no grace period can be waited for).
 * *@moved counts the objects moved out.
 */
static int empty_range(struct ucma_arena *a, uint32_t start, uint32_t end, unsigned *moved,
		       uint32_t *busy_end)
{
	struct ucma_zone *z = ucma_pfn_zone(a, start);
	/* No long waits on one pin: the rounds below are the brief retry. */
	struct ucma_populate_batch batch = { 0, 0, 0 };
	struct ucma_migrate_target t = { .avoid_start = start, .avoid_end = end, .batch = &batch };
	uint32_t pb_start = UCMA_ALIGN_DOWN(start, UCMA_PAGEBLOCK_PAGES);

	for (int round = 0; round < CMA_MIGRATE_ROUNDS; round++) {
		unsigned pinned = 0;
		bool nomem = false, busy = false;

		if (ucma_range_free(a, start, end))
			return 0;
		if (!ucma_rcu_can_wait()) {
			errno = EDEADLK;
			return -1;
		}
		/* The copies of this round: fresh destinations are mapped
		 * in as few calls as their extents allow (zone.c). */
		batch.pages = pages_in_use(a, start, end);
		batch.start = batch.end = 0;
		for (uint32_t pfn = pb_start, head, next; pfn < end; pfn = next) {
			next = walk_step(a, z, pfn, &head);
			if (head != UCMA_PFN_NONE && next > start) {
				int r;

				if (run_lent(a, head)) {
					/* The heap's data moves, the frame stays. */
					r = ucma_lend_take_back_run(a, head);
					*moved += r == UCMA_MIGRATE_OK;
				} else {
					r = ucma_migrate_run(a, head, &t, &pinned, moved);
				}

				if (r == UCMA_MIGRATE_NOMEM) {
					nomem = true;
				} else if (r == UCMA_MIGRATE_PINNED) {
					busy = true;
					if (next > *busy_end)
						*busy_end = next;
				}
			}
		}
		/* The old copies are free only after readers have left. */
		if (ucma_defer_drain() != 0)
			return -1;
		if (ucma_range_free(a, start, end))
			return 0;
		if (nomem) {
			errno = ENOMEM;
			return -1;
		}
		if (busy || pinned) {
			struct timespec ts = { 0, 1000000 };	/* let pins drop */

			nanosleep(&ts, NULL);
		}
	}
	errno = EBUSY;
	return -1;
}

/*
 * struct phys_search - what one UCMA_ALLOC_PHYS_CONTIG call knows about
 * where physical contiguity breaks in its area.
 *
 * With a frame table that knows every frame (hugetlb frames mapped in
 * physical order, frames.c), a candidate is judged from the table alone:
 * nothing is probed, nothing populated, and a request longer than the
 * longest run fails at once; the frames of the run finally chosen are
 * read from pagemap once more before it is handed out.
 *
 * Otherwise contiguity is a property of whatever pages the kernel put
 * there and is only known for pages that are present.  Those are judged
 * from pagemap for free; to judge the others, at most @budget pages may be
 * faulted in (twice the request), so a request that cannot succeed fails
 * after touching about twice its size instead of the whole area.
 */
struct phys_search {
	struct ucma_cma_area *area;
	bool by_table;			/* ucma_frames_by_table() */
	uint64_t budget;		/* pages that may still be populated to learn frames */
};

enum phys_verdict {
	PHYS_OK,			/* go ahead with this candidate */
	PHYS_BREAK,			/* not contiguous: the next candidate starts at *next */
	PHYS_ERROR,			/* errno ENOTSUP: frames are hidden from this process */
};

static void phys_search_init(struct phys_search *ps, struct ucma_cma_area *area, uint32_t npages)
{
	ps->area = area;
	ps->by_table = ucma_frames_by_table(area);
	ps->budget = 2ull * npages;
}

/* Could any run of @npages pages be physically contiguous at all? */
static bool phys_possible(const struct phys_search *ps, uint32_t npages)
{
	struct ucma_frames *f = ucma_area_frames(ps->area);
	uint32_t longest;

	if (!ps->by_table)
		return true;
	ucma_mutex_lock(&f->lock);
	longest = f->longest_run;
	ucma_mutex_unlock(&f->lock);
	return (uint64_t)npages <= (uint64_t)longest * f->frame_pages;
}

/*
 * Is the candidate run at area page @off physically contiguous, as far as
 * is known?  Asked twice per candidate: before anything is migrated out of
 * it (@claimed false: absent pages may still be faulted in to find out,
 * within the budget) and once it is claimed and populated (@claimed true:
 * the answer is final; with a table, its frames are read again first).
 * *@next: where the next candidate may start when this one does not do.
 */
static int phys_judge(struct phys_search *ps, struct ucma_arena *a, uint32_t off,
		      uint32_t npages, bool claimed, uint32_t *next)
{
	void *at = ucma_pfn_to_addr(a, ps->area->base_pfn + off);
	bool absent;
	long k;

	if (ps->by_table) {
		uint32_t run = claimed ? ucma_frames_verify(ps->area, off, npages) :
					 ucma_frames_table_run(ps->area, off, npages);

		*next = off + (run ? run : 1);
		return run == npages ? PHYS_OK : PHYS_BREAK;
	}
	if (claimed)
		ps->budget = ps->budget > npages ? ps->budget - npages : 0;
	k = ucma_os_phys_run(at, npages, &absent);
	if (k < 0) {
		errno = ENOTSUP;
		return PHYS_ERROR;
	}
	*next = off + (k > 0 ? (uint32_t)k : 1);
	if (!absent)
		return k == (long)npages ? PHYS_OK : PHYS_BREAK;
	if (!claimed && ps->budget >= npages)
		return PHYS_OK;
	/* Page k is unknown and may not be faulted in: no candidate holding
	 * it can be judged, and the next worth looking at starts on a page
	 * that is present (one pass over pagemap finds it). */
	*next = off + (uint32_t)k + 1;
	if (*next < ps->area->npages) {
		long skip = ucma_os_next_present(ucma_pfn_to_addr(a, ps->area->base_pfn + *next),
						 ps->area->npages - *next);

		if (skip > 0)
			*next += (uint32_t)skip;
	}
	return PHYS_BREAK;
}

/*
 * Fault every page of a new buffer in (UCMA_ALLOC_POPULATE, and what a
 * physical contiguity check reads).  A kernel without MADV_POPULATE_WRITE
 * gets each page written with its own value.  false when the kernel could
 * not give the memory (the shmem or hugetlb file is full, the cgroup's
 * limit): the buffer would fail at first touch instead, with SIGBUS, and
 * it used to be returned so.
 */
static bool populate_buffer(char *p, size_t len)
{
	if (ucma_os_populate(p, len) == 0)
		return true;
	if (errno != ENOTSUP)
		return false;
	for (size_t off = 0; off < len; off += UCMA_PAGE_SIZE) {
		volatile char *c = p + off;

		*c = *c;
	}
	return true;
}

/* ------------------------------------------------------------------------ */
/* Operations in flight, and the child of a fork                             */
/* ------------------------------------------------------------------------ */

/* List @op, an allocation or release of pfns [@start, @end) of @area by
 * thread @tid: area lock held, and the bits set (cma.h: struct
 * ucma_cma_op). */
static void op_begin(struct ucma_cma_area *area, struct ucma_cma_op *op, pid_t tid, uint32_t start,
		     uint32_t end, bool release)
{
	op->owner = tid;
	op->release = release;
	op->start = start;
	op->end = end;
	op->iso_start = UCMA_ALIGN_DOWN(start, UCMA_PAGEBLOCK_PAGES);
	op->iso_end = UCMA_ALIGN_UP(end, UCMA_PAGEBLOCK_PAGES);
	op->isolated = false;
	op->run = release;
	op->next = area->ops;
	area->ops = op;
}

/* Area lock held: @op is done (its bits cleared, or a counted buffer's). */
static void op_end(struct ucma_cma_area *area, struct ucma_cma_op *op)
{
	struct ucma_cma_op **pp = &area->ops;

	while (*pp != op) {
		if (!*pp)
			ucma_fatal("internal error: CMA operation %p is not listed", (void *)op);
		pp = &(*pp)->next;
	}
	*pp = op->next;
}

/*
 * The child of a fork has only the thread that forked.  An operation of
 * another thread will never go on: what it had done is undone (its
 * isolation, its run, its bits), and a release is finished (its buffer
 * was being given back, and nobody in the child has it any more).  The
 * forking thread's own operation, interrupted by a signal handler that
 * forked, goes on when the handler returns: it is left.
 */
void ucma_cma_fork_child_locked(struct ucma_arena *a, pid_t forker)
{
	struct ucma_zone *z = &a->zones[UCMA_ZONE_CMA];

	for (int i = 0; i < a->nr_areas; i++) {
		struct ucma_cma_area *area = &a->areas[i];
		struct ucma_cma_op **pp = &area->ops;

		while (*pp) {
			struct ucma_cma_op *op = *pp;
			uint32_t npages = op->end - op->start;

			if (op->owner == forker) {
				pp = &op->next;
				continue;
			}
			if (op->isolated)
				for (uint32_t b = op->iso_start; b < op->iso_end;
				     b += UCMA_PAGEBLOCK_PAGES)
					ucma_undo_isolate_locked(z, b >> UCMA_PAGEBLOCK_ORDER);
			if (op->run) {
				a->pages[op->start].flags &=
					(uint8_t)~(UCMA_PF_MLOCKED | UCMA_PF_FROM_MALLOC);
				ucma_pages_free_locked(z, op->start);
			}
			bits_set(area->bitmap, op->start - area->base_pfn, npages, false);
			if (op->release) {
				area->nr_allocated_pages -= npages;
				area->nr_allocs--;
			}
			*pp = op->next;
		}
	}
}

static void *alloc_area(struct ucma_arena *a, struct ucma_cma_area *area, size_t size,
			size_t align, unsigned flags)
{
	uint64_t t0 = ucma_os_now_ns();
	uint32_t npages, align_pages, from = 0;
	int err = ENOMEM;
	unsigned moved = 0, in_vain = 0;
	bool saw_busy = false, tried = false, phys_miss = false, other_fail = false;
	struct ucma_compact_direct dc;
	struct phys_search ps = { area, false, 0 };
	struct ucma_cma_op op;
	pid_t tid = gettid();

	if (size > (size_t)area->npages << UCMA_PAGE_SHIFT) {
		errno = ENOMEM;
		goto fail;
	}
	npages = (uint32_t)((size + UCMA_PAGE_SIZE - 1) >> UCMA_PAGE_SHIFT);
	if (flags & UCMA_ALLOC_PHYS_CONTIG) {
		phys_search_init(&ps, area, npages);
		if (!phys_possible(&ps, npages)) {
			errno = ENOMEM;	/* no run of frames is that long */
			goto fail;
		}
	}
	/* Objects freed recently still wait for readers: let their space
	 * count (cheap when nothing waits). */
	if (ucma_rcu_can_wait())
		ucma_defer_drain();
	align_pages = align > UCMA_PAGE_SIZE ? (uint32_t)(align >> UCMA_PAGE_SHIFT) : 1;
	/* Direct compaction (compact.c), should every candidate fail. */
	ucma_compact_direct_init(&dc, ucma_compact_contig_order(npages, align_pages),
				 1u << UCMA_ZONE_CMA);
retry:
	for (;;) {
		uint32_t off, start, end, iso_start, iso_end, busy_end = 0;
		unsigned moved_here = 0;
		int rc;

		ucma_mutex_lock(&area->lock);
		off = find_zero_area(area, a->base >> UCMA_PAGE_SHIFT, from, npages, align_pages);
		if (off == UINT32_MAX) {
			ucma_mutex_unlock(&area->lock);
			break;
		}
		bits_set(area->bitmap, off, npages, true);
		start = area->base_pfn + off;
		end = start + npages;
		op_begin(area, &op, tid, start, end, false);
		ucma_mutex_unlock(&area->lock);
		tried = true;

		/*
		 * Physical contiguity is a property of the mapping, not of what
		 * lives in the run: a run whose present pages already break it
		 * is passed over before anything is migrated out of it.
		 */
		if (flags & UCMA_ALLOC_PHYS_CONTIG) {
			uint32_t next;
			int v = phys_judge(&ps, a, off, npages, false, &next);

			if (v != PHYS_OK) {
				ucma_mutex_lock(&area->lock);
				bits_set(area->bitmap, off, npages, false);
				op_end(area, &op);
				ucma_mutex_unlock(&area->lock);
				if (v == PHYS_ERROR) {
					err = ENOTSUP;
					break;
				}
				err = ENOMEM;
				phys_miss = true;
				from = next;
				continue;
			}
		}
		iso_start = op.iso_start;
		iso_end = op.iso_end;
		if (ucma_isolate_range_noted(a, iso_start, iso_end, &op.isolated) != 0)
			ucma_fatal("internal error: cannot isolate CMA pfns %u-%u", iso_start,
				   iso_end);
		/* A purge takes nothing from isolated pageblocks: once the
		 * batch it may hold is back, every free page of the range is
		 * on the lists (zone.c). */
		ucma_zone_purge_settle(&a->zones[UCMA_ZONE_CMA]);
		if (flags & UCMA_ALLOC_NOWAIT)
			rc = ucma_range_free(a, start, end) ? 0 : (errno = EBUSY, -1);
		else if (range_pinned(a, start, end, &busy_end))
			rc = (errno = EBUSY, -1);	/* nothing moved in vain */
		else
			rc = empty_range(a, start, end, &moved_here, &busy_end);
		moved += moved_here;
		if (rc == 0)
			rc = ucma_claim_free_range_noted(a, start, end, UCMA_OWN_CONTIG,
							 (uint64_t)(uintptr_t)area, &op.run);
		ucma_undo_isolate_range_noted(a, iso_start, iso_end, &op.isolated);
		if (rc == 0) {
			void *p = ucma_pfn_to_addr(a, start);
			size_t len = (size_t)npages << UCMA_PAGE_SHIFT;

			ucma_compact_direct_done(&dc, true);	/* compact.c */

			/* Counted now: the failure paths below undo with
			 * ucma_release(), which uncounts. */
			ucma_mutex_lock(&area->lock);
			area->nr_allocated_pages += npages;
			area->nr_allocs++;
			op_end(area, &op);
			ucma_mutex_unlock(&area->lock);
			if (flags & UCMA_ALLOC_ZERO)
				memset(p, 0, len);
			if ((flags & (UCMA_ALLOC_POPULATE | UCMA_ALLOC_PHYS_CONTIG)) &&
			    !populate_buffer(p, len)) {
				ucma_release(p);
				errno = ENOMEM;
				goto fail;
			}
			if (flags & UCMA_ALLOC_PHYS_CONTIG) {
				uint32_t next;
				int v = phys_judge(&ps, a, off, npages, true, &next);

				if (v != PHYS_OK) {
					ucma_release(p);
					in_vain += moved_here;
					if (v == PHYS_ERROR) {
						err = ENOTSUP;
						break;
					}
					err = ENOMEM;
					phys_miss = true;
					from = next;
					continue;
				}
			}
			if ((flags & UCMA_ALLOC_MLOCK)) {
				if (ucma_os.mlock(p, len) != 0) {
					err = errno;
					ucma_release(p);
					errno = err;
					goto fail;
				}
				a->pages[start].flags |= UCMA_PF_MLOCKED;
			}
			ucma_mutex_lock(&area->lock);
			area->alloc_success++;
			ucma_mutex_unlock(&area->lock);
			ucma_count(UCMA_STAT_CMA_ALLOC_SUCCESS, 1);
			ucma_stats_alloc_latency(ucma_os_now_ns() - t0, moved > 0);
			if (in_vain)
				ucma_count(UCMA_STAT_CMA_MIGRATED_IN_VAIN, in_vain);
			return p;
		}
		err = errno;
		in_vain += moved_here;	/* moved out of a run that was then abandoned */
		saw_busy |= err == EBUSY;
		other_fail = true;	/* a failure compaction may help with */
		ucma_mutex_lock(&area->lock);
		bits_set(area->bitmap, off, npages, false);
		op_end(area, &op);
		ucma_mutex_unlock(&area->lock);
		if (err == EDEADLK)
			break;
		/*
		 * Try the next candidate, as cma_alloc() does, but past the
		 * object that blocked this one: every run overlapping it would
		 * fail the same way.
		 */
		from = off + 1;
		if (busy_end > start && busy_end - area->base_pfn > from)
			from = busy_end - area->base_pfn;
	}
	/* Every candidate failed: compact at the next priority, retry (compact.c). */
	/* Compaction cannot change where the kernel put the frames. */
	if (!(flags & UCMA_ALLOC_NOWAIT) && tried && (err == ENOMEM || err == EBUSY) &&
	    (other_fail || !phys_miss) && ucma_compact_direct_next(&dc)) {
		from = 0;
		saw_busy = other_fail = phys_miss = false;
		goto retry;
	}
	ucma_compact_direct_done(&dc, false);
	if (in_vain)
		ucma_count(UCMA_STAT_CMA_MIGRATED_IN_VAIN, in_vain);
	/* Every candidate failed: say why in the most useful terms. */
	errno = err == EDEADLK || err == ENOTSUP ? err : saw_busy ? EBUSY : err;
fail:
	ucma_mutex_lock(&area->lock);
	area->alloc_fail++;
	ucma_mutex_unlock(&area->lock);
	ucma_count(UCMA_STAT_CMA_ALLOC_FAIL, 1);
	return NULL;
}

static bool valid_align(size_t align)
{
	return align == 0 || (align & (align - 1)) == 0;
}

/**
 * ucma_alloc_area() - allocate a contiguous buffer from the named area.
 */
void *ucma_alloc_area(const char *name, size_t size, size_t align, unsigned flags)
{
	struct ucma_arena *a;
	struct ucma_cma_area *area;
	int err;

	if (!name || size == 0 || !valid_align(align) || (flags & ~CMA_ALLOWED_FLAGS)) {
		errno = EINVAL;
		return NULL;
	}
	a = ucma_arena_get();
	if (!a)
		return NULL;
	area = ucma_area_find(a, name);
	if (!area) {
		errno = ENOENT;
		return NULL;
	}
	if (align > ((size_t)area->npages << UCMA_PAGE_SHIFT)) {
		errno = EINVAL;
		return NULL;
	}
	{
		void *p;
		int cancel;

		/* Not cancelled half way (its waits are cancellation points):
		 * the operation's record lives on this stack (cma.h). */
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
		p = alloc_area(a, area, size, align, flags);
		pthread_setcancelstate(cancel, NULL);

		/* Whatever changed the areas' mappings on the way (frames given
		 * back by a purge or a take-back in a nested call) is told
		 * before the buffer is: a device layer that registered the
		 * areas can reach every buffer ucma_alloc() returns. */
		ucma_mem_event_deliver();
		if (p) {
			ucma_compactd_start_once();	/* the process has CMA memory (compactd.c) */
			ucma_shm_check_request(false);	/* has ucmastat asked? (shm_server.c) */
			return p;
		}
		err = errno;
	}
	ucma_shm_check_request(false);
	errno = err;
	return NULL;
}

/**
 * ucma_alloc() - allocate a contiguous buffer from the area "default" (or
 * the first area when none has that name).
 */
void *ucma_alloc(size_t size, size_t align, unsigned flags)
{
	struct ucma_arena *a;

	if (size == 0 || !valid_align(align) || (flags & ~CMA_ALLOWED_FLAGS)) {
		errno = EINVAL;
		return NULL;
	}
	a = ucma_arena_get();
	if (!a)
		return NULL;
	if (a->nr_areas == 0) {
		errno = ENOMEM;
		return NULL;
	}
	return ucma_alloc_area(ucma_area_find(a, "default") ? "default" : a->areas[0].name, size,
			       align, flags);
}

/*
 * The area owning the live contiguous buffer that starts at @ptr, or
 * NULL.  @from_malloc picks which buffers: those the preload library's
 * malloc() made (true), which only free() and realloc() give back, or
 * those of ucma_alloc() (false).  Neither side takes the other's: a
 * ucma_release() of a malloc() block freed it under its owner, who then
 * freed whoever got the address next.
 */
static struct ucma_cma_area *contig_owner(struct ucma_arena *a, const void *ptr, uint32_t *pfn,
					  bool from_malloc)
{
	struct ucma_page *p;
	uintptr_t owner;

	if (!a || !ucma_addr_in_arena(a, ptr) || ((uintptr_t)ptr & (UCMA_PAGE_SIZE - 1)))
		return NULL;
	*pfn = ucma_addr_to_pfn(a, ptr);
	p = &a->pages[*pfn];
	if (UCMA_PG_GET(p, kind) != UCMA_PK_RUN ||
	    __atomic_load_n(&p->owner_type, __ATOMIC_ACQUIRE) != UCMA_OWN_CONTIG ||
	    ((__atomic_load_n(&p->flags, __ATOMIC_RELAXED) & UCMA_PF_FROM_MALLOC) != 0) != from_malloc)
		return NULL;
	/* Read without the zone lock, the run may change owner meanwhile
	 * (a release racing with another of the same buffer): what is
	 * returned is an area at least, for the caller to lock and check. */
	owner = (uintptr_t)UCMA_PG_GET(p, owner);
	for (int i = 0; i < a->nr_areas; i++)
		if (owner == (uintptr_t)&a->areas[i])
			return &a->areas[i];
	return NULL;
}

/* ucma_release() of a buffer of ucma_alloc() (@from_malloc false) or of
 * the preload library's malloc() (true).  Nothing between the record's
 * listing and its end is a cancellation point (cma.h). */
static int release_contig(void *ptr, bool from_malloc)
{
	struct ucma_arena *a = ucma_arena_peek();
	struct ucma_cma_area *area;
	struct ucma_cma_op op;
	uint32_t pfn, npages;
	struct ucma_zone *z;
	pid_t tid;

	if (!a) {
		errno = EINVAL;
		return -1;
	}
	z = &a->zones[UCMA_ZONE_CMA];
	/* Which area, without a lock: its lock comes before the zone's. */
	area = contig_owner(a, ptr, &pfn, from_malloc);
	if (!area) {
		errno = EINVAL;
		return -1;
	}
	tid = gettid();
	/* Check and unmark under the zone lock, so a double release racing
	 * with itself is caught once; listed as in flight in the same step
	 * (cma.h), both locks held. */
	ucma_mutex_lock(&area->lock);
	ucma_mutex_lock(&z->lock);
	if (contig_owner(a, ptr, &pfn, from_malloc) != area) {
		ucma_mutex_unlock(&z->lock);
		ucma_mutex_unlock(&area->lock);
		errno = EINVAL;
		return -1;
	}
	npages = a->pages[pfn].aux;
	UCMA_PG_SET(&a->pages[pfn], owner_type, UCMA_OWN_NONE);
	op_begin(area, &op, tid, pfn, pfn + npages, true);
	ucma_mutex_unlock(&z->lock);
	ucma_mutex_unlock(&area->lock);

	/* A buffer still locked must not be lent on: its pages would stay
	 * locked under movable objects and the heap, and count against
	 * RLIMIT_MEMLOCK for good.  It stays the caller's, to release again. */
	if ((a->pages[pfn].flags & UCMA_PF_MLOCKED) &&
	    ucma_os.munlock(ptr, (size_t)npages << UCMA_PAGE_SHIFT) != 0) {
		int err = errno;

		ucma_mutex_lock(&area->lock);
		ucma_mutex_lock(&z->lock);
		UCMA_PG_SET(&a->pages[pfn], owner_type, UCMA_OWN_CONTIG);
		op_end(area, &op);
		ucma_mutex_unlock(&z->lock);
		ucma_mutex_unlock(&area->lock);
		errno = err;
		return -1;
	}
	__atomic_fetch_and(&a->pages[pfn].flags, (uint8_t)~(UCMA_PF_MLOCKED | UCMA_PF_FROM_MALLOC),
			   __ATOMIC_RELAXED);
	ucma_pages_free_noted(a, pfn, &op.run);
	ucma_mutex_lock(&area->lock);
	bits_set(area->bitmap, pfn - area->base_pfn, npages, false);
	area->nr_allocated_pages -= npages;
	area->nr_allocs--;
	op_end(area, &op);
	ucma_mutex_unlock(&area->lock);
	ucma_count(UCMA_STAT_CMA_RELEASE, 1);
	ucma_shm_check_request(false);
	return 0;
}

/**
 * ucma_release() - give a buffer from ucma_alloc() back to its area, where
 * it is lent to movable objects again.
 * Return: 0, or -1 with errno EINVAL for anything that is not such a
 * buffer (including a buffer already released, and a contiguous block
 * that malloc() made: free() takes that back).
 */
int ucma_release(void *ptr)
{
	return release_contig(ptr, false);
}

int ucma_release_for_malloc(void *ptr)
{
	return release_contig(ptr, true);
}

void *ucma_alloc_for_malloc(size_t size, unsigned flags)
{
	static _Atomic bool said;
	void *p;

	/*
	 * With UCMA_CMA_DONTFORK=1 a child of fork() gets empty CMA areas:
	 * the program's malloc() memory there would read as zeros in every
	 * child, which nothing in an unmodified program expects.  Its large
	 * blocks stay in the malloc family instead.
	 */
	if (!ucma_arena_get())
		return NULL;
	if (ucma_opt.cma_dontfork) {
		if (!atomic_exchange(&said, true))
			ucma_log("UCMA_PRELOAD_CONTIG_MIN has no effect with UCMA_CMA_DONTFORK=1: "
				 "a child of fork() would lose the malloc() memory in the CMA "
				 "areas, so large blocks stay in the malloc heap");
		return NULL;
	}
	p = ucma_alloc(size, 0, flags);

	if (p) {
		struct ucma_arena *a = ucma_arena_peek();

		/* The buffer is the caller's alone until it is handed out:
		 * nobody else writes its head's flags meanwhile. */
		__atomic_fetch_or(&a->pages[ucma_addr_to_pfn(a, p)].flags, UCMA_PF_FROM_MALLOC,
				  __ATOMIC_RELAXED);
	}
	return p;
}

size_t ucma_malloc_contig_size(const void *ptr)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t pfn;

	if (!contig_owner(a, ptr, &pfn, true))
		return 0;
	return (size_t)UCMA_PG_GET(&a->pages[pfn], aux) << UCMA_PAGE_SHIFT;
}

bool ucma_contig_from_malloc(const void *ptr)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t pfn;

	if (!a || !ucma_addr_in_arena(a, ptr))
		return false;
	pfn = ucma_run_head(a, ucma_addr_to_pfn(a, ptr));
	return pfn != UCMA_PFN_NONE &&
	       __atomic_load_n(&a->pages[pfn].owner_type, __ATOMIC_ACQUIRE) == UCMA_OWN_CONTIG &&
	       (__atomic_load_n(&a->pages[pfn].flags, __ATOMIC_RELAXED) & UCMA_PF_FROM_MALLOC) != 0;
}

/** ucma_alloc_size() - size of the ucma_alloc() buffer at @ptr, or 0/EINVAL
 * (also for a contiguous block that malloc() made). */
size_t ucma_alloc_size(const void *ptr)
{
	struct ucma_arena *a = ucma_arena_peek();
	uint32_t pfn;

	if (!contig_owner(a, ptr, &pfn, false)) {
		errno = EINVAL;
		return 0;
	}
	return (size_t)UCMA_PG_GET(&a->pages[pfn], aux) << UCMA_PAGE_SHIFT;
}

/**
 * ucma_virt2phys() - physical address of @ptr, read from the kernel now.
 */
int ucma_virt2phys(const void *ptr, uint64_t *phys)
{
	if (!ptr || !phys) {
		errno = EINVAL;
		return -1;
	}
	return ucma_os_pagemap(ptr, phys);
}
