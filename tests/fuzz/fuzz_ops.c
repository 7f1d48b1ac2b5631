/*
 * fuzz_ops.c - a libFuzzer target that drives the whole public API from
 * arbitrary bytes and checks every result against a model.
 *
 * The input is read as a sequence of operations: one byte picks the
 * operation, the following bytes its arguments (a missing byte reads as
 * 0, so every input is valid).  Operations cover the malloc family
 * (ucma_malloc/calloc/realloc/aligned_alloc/posix_memalign/memalign/
 * free/try_free), movable objects (ucma_halloc/hfree/hrealloc/hsize),
 * pins (plain and UCMA_PIN_LONGTERM), RCU reads (ucma_read_lock/deref/
 * deref_size/read_unlock), contiguous buffers (ucma_alloc/ucma_alloc_area/
 * ucma_release with odd sizes, alignments, flags and area names),
 * physical addresses (ucma_vtophys), taking lent heap frames back
 * (ucma_unlend), memory-event callbacks (ucma_mem_event_register/
 * unregister), compaction at every priority, statistics, and hostile
 * input: forged and stale handles, bad pointers, bad flags and
 * priorities, bad callback names, a second ucma_init() with an arbitrary
 * configuration.
 *
 * The model keeps, per live object, its size and a stamp from which its
 * contents are derived, so every read checks the bytes; per movable object
 * its pin count and pinned address (a pinned object never moves); and the
 * errno values that include/ucma.h and the manual pages document for each
 * call (EINVAL, ENOMEM, EBUSY, EDEADLK, EPERM, ENOENT, ...).  Each
 * registered memory-event callback keeps its own view of the mapped pages:
 * MAP and UNMAP must alternate page by page, and when a call returns
 * every live contiguous buffer lies in every view (a device layer can
 * reach it).  Placement rules are checked too: unmovable memory never
 * lies in the CMA zone, contiguous buffers always do, a long-term pinned
 * object does not, and no two live objects overlap.  Pointers read
 * inside a read-side section stay readable, with unchanged contents, until
 * the section ends, even when the object is freed, moved or resized
 * meanwhile.  Whatever disagrees with the model aborts with a message,
 * which libFuzzer records as a crash.
 *
 * Inputs are independent: the library is initialised once (64 MiB arena,
 * 32 MiB CMA, no hugepages, no background compaction thread, so a crash
 * replays deterministically) and each input ends by releasing everything
 * it holds and checking that no handle is live and the zone invariants
 * hold.  What the library keeps for itself carries over, as in a program
 * that runs on: the thread's caches, and heap pageblocks still on lent
 * CMA frames.  A crash that needs such state may not replay alone; it
 * does with the inputs libFuzzer ran before it (its corpus directory).
 *
 * FUZZ_OPS_TRACE=1 in the environment names every operation on stderr, to
 * follow a crash.  Locking: none; the target runs on libFuzzer's thread
 * only (the library's own threads are off, see above).
 *
 * The same file builds without libFuzzer: fuzz_replay.c supplies a main()
 * that runs the committed corpus and regression inputs once each.
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "frames.h"
#include "lend.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MiB ((size_t)1 << 20)
#define ARENA (64 * MiB)
#define CMA (32 * MiB)

#define MAX_OPS 600		/* per input */
#define NMALLOC 24		/* model slots per kind */
#define NHANDLE 32
#define NCONTIG 8
#define NSTALE 8
#define NRECORD 48
#define MAX_DEPTH 3		/* read-side nesting */
#define MAX_PINS 4		/* per object */

#define FULL_MAX (64u << 10)	/* stamped entirely up to this size */
#define SPARSE_MAX (8 * MiB)	/* then head, tail and 64 bytes a page */
#define MALLOC_SURE (8 * MiB)	/* malloc up to this size never fails */
#define MALLOC_BUDGET (96 * MiB)	/* live malloc bytes the model allows */

struct mobj {			/* ucma_malloc family */
	unsigned char *p;
	size_t size;
	uint64_t stamp;
};

struct hobj {			/* movable object */
	ucma_handle_t h;
	size_t size;
	uint64_t stamp;
	unsigned pins;
	unsigned char *pinaddr;	/* where it is while pinned */
};

struct cobj {			/* ucma_alloc buffer */
	unsigned char *p;
	size_t size;		/* whole pages */
	uint64_t stamp;
	unsigned flags;		/* UCMA_ALLOC_* it was made with */
};

struct record {			/* a pointer read inside the read section */
	const unsigned char *p;
	size_t size;
	uint64_t stamp;
};

static struct {
	const uint8_t *d;
	size_t n, i;
	unsigned op;		/* number of the current operation */
	const char *what;	/* its name, for messages */
	uint64_t next_stamp;
	struct mobj m[NMALLOC];
	struct hobj h[NHANDLE];
	struct cobj c[NCONTIG];
	ucma_handle_t stale_h[NSTALE];
	void *stale_c[NSTALE];
	unsigned nstale_h, nstale_c;
	struct record rec[NRECORD];
	unsigned nrec;
	unsigned depth;		/* read-side nesting */
	size_t malloc_bytes;
} M;

static struct ucma_arena *A;
static FILE *devnull;
static bool trace;		/* FUZZ_OPS_TRACE: name each operation on stderr */
static int static_marker;

/* ------------------------------------------------------------------------ */
/* Failing                                                                   */
/* ------------------------------------------------------------------------ */

__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fuzz_ops: model mismatch at op %u (%s): ", M.op, M.what ? M.what : "?");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	abort();
}

/* Allowed errno values, as a bit mask. */
enum {
	E_INVAL = 1u << 0, E_NOMEM = 1u << 1, E_BUSY = 1u << 2, E_DEADLK = 1u << 3,
	E_PERM = 1u << 4, E_NOENT = 1u << 5, E_NOTSUP = 1u << 6, E_AGAIN = 1u << 7,
};

static unsigned errbit(int e)
{
	switch (e) {
	case EINVAL: return E_INVAL;
	case ENOMEM: return E_NOMEM;
	case EBUSY: return E_BUSY;
	case EDEADLK: return E_DEADLK;
	case EPERM: return E_PERM;
	case ENOENT: return E_NOENT;
	case ENOTSUP: return E_NOTSUP;
	case EAGAIN: return E_AGAIN;
	default: return 1u << 31;
	}
}

/* A call failed with @err: it must be one of @allowed. */
static void expect_err(int err, unsigned allowed, const char *call)
{
	if (!(errbit(err) & allowed))
		fail("%s failed with errno %d (%s), not an allowed error (mask %#x)", call, err,
		     strerror(err), allowed);
}

/* ------------------------------------------------------------------------ */
/* Reading the input                                                         */
/* ------------------------------------------------------------------------ */

static uint8_t u8(void)
{
	return M.i < M.n ? M.d[M.i++] : 0;
}

static uint16_t u16(void)
{
	return (uint16_t)(u8() | u8() << 8);
}

static uint32_t u32(void)
{
	return (uint32_t)u16() | (uint32_t)u16() << 16;
}

static uint64_t u64(void)
{
	return (uint64_t)u32() | (uint64_t)u32() << 32;
}

/* A size: small, medium, large, boundary values and absurd ones. */
static size_t pick_size(void)
{
	static const size_t edge[] = {
		0, 1, 15, 16, 17, 4095, 4096, 4097, 32767, 32768, 32769,
		2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 4 * MiB, 16 * MiB, 32 * MiB, 32 * MiB + 1,
		64 * MiB, 64 * MiB + 1,
	};
	static const size_t absurd[] = {
		SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1,
		(size_t)1 << 62, (size_t)1 << 40,
	};
	uint8_t k = u8();

	switch (k % 8) {
	case 0: return u8();
	case 1: return u16() % 4097;
	case 2: return u16();
	case 3: return (size_t)(u32() % (MiB + 1));
	case 4: return (size_t)(u8() % 9) * MiB + u16();
	case 5: return edge[u8() % UCMA_ARRAY_SIZE(edge)];
	case 6: return absurd[u8() % UCMA_ARRAY_SIZE(absurd)];
	default: return (size_t)(u8() % 64) * 4096;
	}
}

static uint64_t new_stamp(void)
{
	return ++M.next_stamp * 0x9e3779b97f4a7c15ull;
}

/* ------------------------------------------------------------------------ */
/* Contents                                                                  */
/* ------------------------------------------------------------------------ */

enum { FILL, CHECK, ZERO };

static inline unsigned char pattern(uint64_t stamp, size_t i)
{
	uint64_t x = stamp ^ ((uint64_t)i * 0xff51afd7ed558ccdull);

	x ^= x >> 29;
	return (unsigned char)(x ^ (x >> 13) ^ (x >> 37));
}

/* Fill or check [from, to) clipped at @limit; the first bad offset or SIZE_MAX. */
static size_t range(unsigned char *p, size_t from, size_t to, size_t limit, uint64_t stamp,
		    int mode)
{
	if (to > limit)
		to = limit;
	for (size_t i = from; i < to; i++) {
		unsigned char want = mode == ZERO ? 0 : pattern(stamp, i);

		if (mode == FILL)
			p[i] = want;
		else if (p[i] != want)
			return i;
	}
	return SIZE_MAX;
}

/*
 * The stamped bytes of an object of @size: all of it up to FULL_MAX; up
 * to SPARSE_MAX the first and last 4 KiB and 64 bytes of every page; above
 * that only the first and last 4 KiB, so that huge blocks are not touched
 * throughout.  Only offsets below @limit are visited (a resized object
 * keeps the stamp of its common prefix).
 */
static size_t walk(void *ptr, size_t size, size_t limit, uint64_t stamp, int mode)
{
	unsigned char *p = ptr;
	size_t r, tail;

	if (limit > size)
		limit = size;
	if (size <= FULL_MAX)
		return range(p, 0, size, limit, stamp, mode);
	if ((r = range(p, 0, 4096, limit, stamp, mode)) != SIZE_MAX)
		return r;
	tail = size - 4096;
	if (size <= SPARSE_MAX)
		for (size_t off = 4096; off < tail && off < limit; off += 4096)
			if ((r = range(p, off, off + 64 < tail ? off + 64 : tail, limit, stamp,
				       mode)) != SIZE_MAX)
				return r;
	return range(p, tail, size, limit, stamp, mode);
}

static void check_contents(const void *p, size_t size, size_t limit, uint64_t stamp,
			   const char *what)
{
	size_t bad = walk((void *)p, size, limit, stamp, CHECK);

	if (bad != SIZE_MAX)
		fail("%s %p (%zu bytes): byte %zu is %#x, expected %#x", what, p, size, bad,
		     ((const unsigned char *)p)[bad], pattern(stamp, bad));
}

static bool in_arena(const void *p)
{
	return ucma_addr_in_arena(A, p);
}

static bool in_cma(const void *p)
{
	uint32_t pfn;

	if (!in_arena(p))
		return false;
	pfn = ucma_addr_to_pfn(A, p);
	return pfn >= A->zones[UCMA_ZONE_CMA].start_pfn && pfn < A->zones[UCMA_ZONE_CMA].end_pfn;
}

/* Does [p, p + size) overlap any live object whose address is known? */
static void check_no_overlap(const void *p, size_t size, const void *self, const char *what)
{
	uintptr_t s = (uintptr_t)p, e = s + (size ? size : 1);

	for (int i = 0; i < NMALLOC; i++) {
		uintptr_t os = (uintptr_t)M.m[i].p, oe = os + (M.m[i].size ? M.m[i].size : 1);

		if (M.m[i].p && M.m[i].p != self && s < oe && os < e)
			fail("%s %p+%zu overlaps malloc block %p+%zu", what, p, size, M.m[i].p,
			     M.m[i].size);
	}
	for (int i = 0; i < NCONTIG; i++) {
		uintptr_t os = (uintptr_t)M.c[i].p, oe = os + M.c[i].size;

		if (M.c[i].p && M.c[i].p != self && s < oe && os < e)
			fail("%s %p+%zu overlaps contiguous buffer %p+%zu", what, p, size,
			     M.c[i].p, M.c[i].size);
	}
	for (int i = 0; i < NHANDLE; i++) {
		uintptr_t os = (uintptr_t)M.h[i].pinaddr, oe = os + M.h[i].size;

		if (M.h[i].h && M.h[i].pinaddr && M.h[i].pinaddr != self && s < oe && os < e)
			fail("%s %p+%zu overlaps pinned object %p+%zu", what, p, size,
			     M.h[i].pinaddr, M.h[i].size);
	}
}

/* ------------------------------------------------------------------------ */
/* Whole-model checks                                                        */
/* ------------------------------------------------------------------------ */

struct span {
	uintptr_t s, e;
};

static int span_cmp(const void *x, const void *y)
{
	const struct span *a = x, *b = y;

	return a->s < b->s ? -1 : a->s > b->s;
}

/* Every live object verifies, no two overlap, pinned ones did not move. */
static void verify_all(void)
{
	struct span sp[NMALLOC + NHANDLE + NCONTIG];
	int n = 0;

	for (int i = 0; i < NMALLOC; i++) {
		if (!M.m[i].p)
			continue;
		check_contents(M.m[i].p, M.m[i].size, SIZE_MAX, M.m[i].stamp, "malloc block");
		if (M.m[i].size)
			sp[n++] = (struct span){ (uintptr_t)M.m[i].p,
						 (uintptr_t)M.m[i].p + M.m[i].size };
	}
	for (int i = 0; i < NCONTIG; i++) {
		if (!M.c[i].p)
			continue;
		check_contents(M.c[i].p, M.c[i].size, SIZE_MAX, M.c[i].stamp, "contiguous buffer");
		sp[n++] = (struct span){ (uintptr_t)M.c[i].p, (uintptr_t)M.c[i].p + M.c[i].size };
	}
	ucma_read_lock();
	for (int i = 0; i < NHANDLE; i++) {
		const unsigned char *p;

		if (!M.h[i].h)
			continue;
		p = ucma_deref(M.h[i].h);
		if (!p)
			fail("deref of live handle %#llx: %s", (unsigned long long)M.h[i].h,
			     strerror(errno));
		if (M.h[i].pinaddr && p != M.h[i].pinaddr)
			fail("pinned object moved from %p to %p", M.h[i].pinaddr, p);
		if (ucma_hsize(M.h[i].h) != M.h[i].size)
			fail("hsize %zu, model %zu", ucma_hsize(M.h[i].h), M.h[i].size);
		check_contents(p, M.h[i].size, SIZE_MAX, M.h[i].stamp, "movable object");
		sp[n++] = (struct span){ (uintptr_t)p, (uintptr_t)p + M.h[i].size };
	}
	ucma_read_unlock();
	qsort(sp, (size_t)n, sizeof(sp[0]), span_cmp);
	for (int i = 1; i < n; i++)
		if (sp[i].s < sp[i - 1].e)
			fail("live objects overlap: %#lx-%#lx and %#lx-%#lx",
			     (unsigned long)sp[i - 1].s, (unsigned long)sp[i - 1].e,
			     (unsigned long)sp[i].s, (unsigned long)sp[i].e);
}

static void check_zones(void)
{
	char why[256];

	for (int z = 0; z < UCMA_ZONE_NR; z++)
		if (ucma_zone_check(&A->zones[z], why, sizeof(why)) != 0)
			fail("zone %s: %s", A->zones[z].name, why);
}

static bool model_empty(void)
{
	for (int i = 0; i < NMALLOC; i++)
		if (M.m[i].p)
			return false;
	for (int i = 0; i < NHANDLE; i++)
		if (M.h[i].h)
			return false;
	for (int i = 0; i < NCONTIG; i++)
		if (M.c[i].p)
			return false;
	return true;
}

static bool any_pinned(void)
{
	for (int i = 0; i < NHANDLE; i++)
		if (M.h[i].h && M.h[i].pins)
			return true;
	return false;
}

/* Forget the read records of memory about to be rewritten in place. */
static void drop_records(const void *p)
{
	for (unsigned i = 0; i < M.nrec;)
		if (M.rec[i].p == p)
			M.rec[i] = M.rec[--M.nrec];
		else
			i++;
}

/* ------------------------------------------------------------------------ */
/* The malloc family                                                         */
/* ------------------------------------------------------------------------ */

static void malloc_accept(int slot, unsigned char *p, size_t size, bool zeroed, const char *what)
{
	size_t align = size >= 16 ? 16 : 8;

	if ((uintptr_t)p & (align - 1))
		fail("%s(%zu) = %p is not %zu-byte aligned", what, size, p, align);
	if (ucma_usable_size(p) < size)
		fail("usable size %zu < %zu", ucma_usable_size(p), size);
	if (ucma_owns(p) != 1)
		fail("ucma_owns(%p) of a %s block is not 1", p, what);
	if (in_cma(p))
		fail("unmovable block %p lies in the CMA zone", p);
	check_no_overlap(p, size, NULL, what);
	if (zeroed) {
		size_t bad = walk(p, size, SIZE_MAX, 0, ZERO);

		if (bad != SIZE_MAX)
			fail("%s(%zu): byte %zu is not zero", what, size, bad);
	}
	M.m[slot] = (struct mobj){ p, size, new_stamp() };
	walk(p, size, SIZE_MAX, M.m[slot].stamp, FILL);
	M.malloc_bytes += size;
}

static void malloc_drop(int slot)
{
	struct mobj *o = &M.m[slot];

	if (!o->p)
		return;
	check_contents(o->p, o->size, SIZE_MAX, o->stamp, "malloc block");
	ucma_free(o->p);
	M.malloc_bytes -= o->size;
	*o = (struct mobj){ 0 };
}

/* A block the model does not keep (too large): touch its ends, free it. */
static void malloc_transient(unsigned char *p, size_t size, const char *what)
{
	if (ucma_owns(p) != 1)
		fail("ucma_owns(%p) of a %s(%zu) block is not 1", p, what, size);
	p[0] = 1;
	p[size - 1] = 2;
	ucma_free(p);
}

/* The outcome of an allocation of @size bytes that failed. */
static void malloc_failed(size_t size, const char *what)
{
	int err = errno;

	if (size > PTRDIFF_MAX) {
		expect_err(err, E_NOMEM, what);
		return;
	}
	if (size > 0 && size <= MALLOC_SURE)
		fail("%s(%zu) failed (%s): the malloc family must not fail there", what, size,
		     strerror(err));
	if (size > 0)
		expect_err(err, E_NOMEM, what);
}

/* Would keeping a block of @size exceed the model's budget?  Larger
 * blocks are tried but not kept (malloc_transient). */
static bool malloc_budget(size_t size)
{
	return size <= MALLOC_BUDGET && M.malloc_bytes + size > MALLOC_BUDGET;
}

static void op_malloc(void)
{
	int slot = u8() % NMALLOC;
	size_t size = pick_size();
	unsigned char *p;

	malloc_drop(slot);
	if (malloc_budget(size))
		return;
	errno = 0;
	p = ucma_malloc(size);
	if (!p) {
		malloc_failed(size, "ucma_malloc");
		return;
	}
	if (size > PTRDIFF_MAX)
		fail("ucma_malloc(%zu) succeeded", size);
	if (size > MALLOC_BUDGET) {
		malloc_transient(p, size, "ucma_malloc");
		return;
	}
	malloc_accept(slot, p, size, false, "ucma_malloc");
}

static void op_calloc(void)
{
	static const size_t counts[] = {
		0, 1, 2, 3, 7, 16, 255, 4096, SIZE_MAX, SIZE_MAX / 2 + 1, (size_t)1 << 32,
	};
	int slot = u8() % NMALLOC;
	size_t nmemb = counts[u8() % UCMA_ARRAY_SIZE(counts)], size = pick_size(), total;
	bool overflow = __builtin_mul_overflow(nmemb, size, &total);
	unsigned char *p;

	malloc_drop(slot);
	if (!overflow && malloc_budget(total))
		return;
	errno = 0;
	p = ucma_calloc(nmemb, size);
	if (!p) {
		if (overflow)
			expect_err(errno, E_NOMEM, "ucma_calloc overflow");
		else
			malloc_failed(total, "ucma_calloc");
		return;
	}
	if (overflow || total > PTRDIFF_MAX)
		fail("ucma_calloc(%zu, %zu) succeeded", nmemb, size);
	if (total > MALLOC_BUDGET) {
		if (p[0] || p[total - 1])
			fail("ucma_calloc block not zeroed at its ends");
		malloc_transient(p, total, "ucma_calloc");
		return;
	}
	malloc_accept(slot, p, total, true, "ucma_calloc");
}

static void op_realloc(void)
{
	int slot = u8() % NMALLOC;
	size_t size = pick_size();
	struct mobj *o = &M.m[slot];
	unsigned char *p;

	if (!o->p) {		/* realloc(NULL, n) is malloc(n) */
		if (malloc_budget(size))
			return;
		errno = 0;
		p = ucma_realloc(NULL, size);
		if (!p) {
			malloc_failed(size, "ucma_realloc(NULL)");
			return;
		}
		if (size > PTRDIFF_MAX)
			fail("ucma_realloc(NULL, %zu) succeeded", size);
		if (size > MALLOC_BUDGET) {
			malloc_transient(p, size, "ucma_realloc");
			return;
		}
		malloc_accept(slot, p, size, false, "ucma_realloc");
		return;
	}
	/* realloc(p, 0) is implementation-defined in C: not exercised. */
	if (size == 0 || (size > o->size && malloc_budget(size - o->size)) ||
	    (size > MALLOC_BUDGET && size <= PTRDIFF_MAX))
		return;
	check_contents(o->p, o->size, SIZE_MAX, o->stamp, "malloc block");
	errno = 0;
	p = ucma_realloc(o->p, size);
	if (!p) {
		malloc_failed(size, "ucma_realloc");
		check_contents(o->p, o->size, SIZE_MAX, o->stamp, "block after a failed realloc");
		return;
	}
	if (size > PTRDIFF_MAX)
		fail("ucma_realloc(%p, %zu) succeeded", o->p, size);
	check_contents(p, o->size, size, o->stamp, "realloc'd block prefix");
	M.malloc_bytes -= o->size;
	*o = (struct mobj){ 0 };
	malloc_accept(slot, p, size, false, "ucma_realloc");
}

static void op_aligned_alloc(void)
{
	static const size_t aligns[] = {
		0, 1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 4096, 8192, 65536, 2 * MiB, 4 * MiB,
		(size_t)1 << 30, 3, (size_t)1 << 63, SIZE_MAX,
	};
	int slot = u8() % NMALLOC;
	size_t align = aligns[u8() % UCMA_ARRAY_SIZE(aligns)], size = pick_size();
	bool pow2 = align && !(align & (align - 1));
	unsigned char *p;

	malloc_drop(slot);
	if (malloc_budget(size) || (align > 4 * MiB && pow2))
		return;		/* gigabytes of alignment slack: not here */
	errno = 0;
	p = ucma_aligned_alloc(align, size);
	if (!p) {
		if (align && !pow2)
			expect_err(errno, E_INVAL, "ucma_aligned_alloc(bad alignment)");
		else if (!align)
			expect_err(errno, E_INVAL | E_NOMEM, "ucma_aligned_alloc(0)");
		else
			malloc_failed(size, "ucma_aligned_alloc");
		return;
	}
	if (align && !pow2)
		fail("ucma_aligned_alloc(%zu, %zu) accepted a bad alignment", align, size);
	if (size > PTRDIFF_MAX)
		fail("ucma_aligned_alloc(%zu, %zu) succeeded", align, size);
	if (align && ((uintptr_t)p & (align - 1)))
		fail("ucma_aligned_alloc(%zu, %zu) = %p is misaligned", align, size, p);
	if (size > MALLOC_BUDGET) {
		malloc_transient(p, size, "ucma_aligned_alloc");
		return;
	}
	malloc_accept(slot, p, size, false, "ucma_aligned_alloc");
}

static void op_free(void)
{
	int slot = u8() % NMALLOC;

	if (M.m[slot].p)
		malloc_drop(slot);
	else
		ucma_free(NULL);	/* ignored, as free(NULL) */
}

/* ------------------------------------------------------------------------ */
/* Movable objects                                                           */
/* ------------------------------------------------------------------------ */

static void stale_handle(ucma_handle_t h)
{
	M.stale_h[M.nstale_h++ % NSTALE] = h;
}

static bool handle_live(ucma_handle_t h)
{
	for (int i = 0; i < NHANDLE; i++)
		if (M.h[i].h && M.h[i].h == h)
			return true;
	return false;
}

/* Rewrite a movable object with a new stamp, under a (possibly extra) pin. */
static void restamp(struct hobj *o)
{
	unsigned char *p = ucma_pin(o->h, 0);

	if (!p)
		fail("pin of live handle %#llx: %s", (unsigned long long)o->h, strerror(errno));
	if (o->pinaddr && p != o->pinaddr)
		fail("pin returned %p while pinned at %p", p, o->pinaddr);
	drop_records(p);
	o->stamp = new_stamp();
	walk(p, o->size, SIZE_MAX, o->stamp, FILL);
	if (ucma_unpin(o->h) != 0)
		fail("unpin after restamp: %s", strerror(errno));
}

static void handle_drop(struct hobj *o)
{
	while (o->pins) {
		if (ucma_unpin(o->h) != 0)
			fail("unpin of a pinned object: %s", strerror(errno));
		o->pins--;
	}
	o->pinaddr = NULL;
	if (ucma_hfree(o->h) != 0)
		fail("hfree of an unpinned live object: %s", strerror(errno));
	stale_handle(o->h);
	*o = (struct hobj){ 0 };
}

static void op_halloc(void)
{
	static const unsigned flag_set[] = { 0, 0, UCMA_H_ZERO, 0x2, 0x80, 0xffffffffu };
	int slot = u8() % NHANDLE;
	unsigned flags = flag_set[u8() % UCMA_ARRAY_SIZE(flag_set)];
	size_t size = pick_size();
	bool strict;
	ucma_handle_t h;
	unsigned char *p;

	if (M.h[slot].h) {
		if (M.h[slot].pins)
			return;
		handle_drop(&M.h[slot]);
	}
	/* Small objects always fit in an empty arena (outside a read-side
	 * section, where the copies freed earlier can be reclaimed). */
	strict = model_empty() && !M.depth && size > 0 && size <= FULL_MAX &&
		 !(flags & ~UCMA_H_ZERO);
	errno = 0;
	h = ucma_halloc(size, flags);
	if (!h) {
		unsigned allowed = E_NOMEM;

		if (size == 0 || (flags & ~UCMA_H_ZERO))
			allowed = E_INVAL | (size > ARENA ? E_NOMEM : 0);
		if (strict)
			fail("ucma_halloc(%zu) failed in an empty arena: %s", size,
			     strerror(errno));
		expect_err(errno, allowed, "ucma_halloc");
		return;
	}
	if (size == 0 || (flags & ~UCMA_H_ZERO) || size > ARENA)
		fail("ucma_halloc(%zu, %#x) succeeded", size, flags);
	if (handle_live(h))
		fail("ucma_halloc returned a live handle %#llx", (unsigned long long)h);
	for (unsigned i = 0; i < NSTALE; i++)
		if (M.stale_h[i] == h)
			fail("ucma_halloc returned a freed handle %#llx again",
			     (unsigned long long)h);
	if (ucma_hsize(h) != size)
		fail("hsize %zu after halloc(%zu)", ucma_hsize(h), size);
	M.h[slot] = (struct hobj){ h, size, 0, 0, NULL };
	p = ucma_pin(h, 0);
	if (!p)
		fail("pin of a fresh object: %s", strerror(errno));
	if (!in_arena(p))
		fail("movable object %p outside the arena", p);
	check_no_overlap(p, size, NULL, "movable object");
	if (flags & UCMA_H_ZERO) {
		size_t bad = walk(p, size, SIZE_MAX, 0, ZERO);

		if (bad != SIZE_MAX)
			fail("UCMA_H_ZERO object: byte %zu is not zero", bad);
	}
	M.h[slot].stamp = new_stamp();
	walk(p, size, SIZE_MAX, M.h[slot].stamp, FILL);
	ucma_unpin(h);
}

static void op_hfree(void)
{
	struct hobj *o = &M.h[u8() % NHANDLE];

	if (!o->h)
		return;
	errno = 0;
	if (o->pins) {
		if (ucma_hfree(o->h) != -1 || errno != EBUSY)
			fail("hfree of a pinned object did not fail with EBUSY (%s)",
			     strerror(errno));
		check_contents(o->pinaddr, o->size, SIZE_MAX, o->stamp,
			       "pinned object after hfree");
		return;
	}
	handle_drop(o);
}

static void op_hrealloc(void)
{
	struct hobj *o = &M.h[u8() % NHANDLE];
	size_t size = pick_size();
	unsigned char *p;
	int rc;

	if (!o->h)
		return;
	errno = 0;
	rc = ucma_hrealloc(o->h, size);
	if (rc != 0) {
		unsigned allowed = 0;

		if (size == 0)
			allowed |= E_INVAL;
		if (size > ARENA)
			allowed |= E_NOMEM;
		if (o->pins)
			allowed |= E_BUSY;
		if (!allowed)
			allowed = E_NOMEM;
		expect_err(errno, allowed, "ucma_hrealloc");
		if (o->pins)
			check_contents(o->pinaddr, o->size, SIZE_MAX, o->stamp,
				       "pinned object after hrealloc");
		return;
	}
	if (size == 0 || size > ARENA || o->pins)
		fail("ucma_hrealloc(%zu) succeeded (pins %u)", size, o->pins);
	if (ucma_hsize(o->h) != size)
		fail("hsize %zu after hrealloc(%zu)", ucma_hsize(o->h), size);
	p = ucma_pin(o->h, 0);
	if (!p)
		fail("pin after hrealloc: %s", strerror(errno));
	check_contents(p, o->size, size, o->stamp, "hrealloc'd object prefix");
	check_no_overlap(p, size, NULL, "resized object");
	ucma_unpin(o->h);
	o->size = size;
	restamp(o);
}

static void op_hsize(void)
{
	struct hobj *o = &M.h[u8() % NHANDLE];

	if (o->h && ucma_hsize(o->h) != o->size)
		fail("hsize %zu, model %zu", ucma_hsize(o->h), o->size);
}

static void op_pin(void)
{
	static const unsigned flag_set[] = { 0, 0, UCMA_PIN_LONGTERM, 0x2, 0x80000000u };
	struct hobj *o = &M.h[u8() % NHANDLE];
	unsigned flags = flag_set[u8() % UCMA_ARRAY_SIZE(flag_set)];
	unsigned char *p;
	bool was_cma = o->pinaddr && in_cma(o->pinaddr);

	if (!o->h || o->pins >= MAX_PINS)
		return;
	errno = 0;
	p = ucma_pin(o->h, flags);
	if (flags & ~UCMA_PIN_LONGTERM) {
		if (p || errno != EINVAL)
			fail("ucma_pin with flags %#x: %p, %s", flags, p, strerror(errno));
		return;
	}
	if (!p) {
		if (!(flags & UCMA_PIN_LONGTERM))
			fail("ucma_pin of a live handle failed: %s", strerror(errno));
		if (M.depth)
			expect_err(errno, E_DEADLK, "ucma_pin(LONGTERM) inside ucma_read_lock");
		else if (o->pins && was_cma)
			expect_err(errno, E_BUSY | E_NOMEM,
				   "ucma_pin(LONGTERM) of a pinned object");
		else if (o->pins)
			fail("ucma_pin(LONGTERM) of an object pinned outside CMA failed: %s",
			     strerror(errno));
		else
			expect_err(errno, E_NOMEM, "ucma_pin(LONGTERM)");
		return;
	}
	if ((flags & UCMA_PIN_LONGTERM) && M.depth)
		fail("ucma_pin(LONGTERM) succeeded inside ucma_read_lock");
	if ((flags & UCMA_PIN_LONGTERM) && in_cma(p))
		fail("long-term pinned object %p lies in the CMA zone", p);
	if (o->pins && p != o->pinaddr)
		fail("pin returned %p while already pinned at %p", p, o->pinaddr);
	check_contents(p, o->size, SIZE_MAX, o->stamp, "pinned object");
	if (!o->pins)
		check_no_overlap(p, o->size, NULL, "pinned object");
	o->pins++;
	o->pinaddr = p;
}

static void op_unpin(void)
{
	struct hobj *o = &M.h[u8() % NHANDLE];
	int rc;

	if (!o->h)
		return;
	errno = 0;
	rc = ucma_unpin(o->h);
	if (!o->pins) {
		if (rc != -1 || errno != EINVAL)
			fail("unpin of an unpinned object: %d, %s", rc, strerror(errno));
		return;
	}
	if (rc != 0)
		fail("unpin of a pinned object: %s", strerror(errno));
	if (--o->pins == 0)
		o->pinaddr = NULL;
}

static void op_write(void)
{
	struct hobj *o = &M.h[u8() % NHANDLE];

	if (!o->h || !o->pins)
		return;
	/* Writes happen under a pin: the one the model holds. */
	drop_records(o->pinaddr);
	o->stamp = new_stamp();
	walk(o->pinaddr, o->size, SIZE_MAX, o->stamp, FILL);
}

static void op_read_lock(void)
{
	if (M.depth >= MAX_DEPTH)
		return;
	ucma_read_lock();
	M.depth++;
}

static void read_unlock(void)
{
	if (M.depth == 1) {
		/* What was read in the section is still there, unchanged. */
		for (unsigned i = 0; i < M.nrec; i++)
			check_contents(M.rec[i].p, M.rec[i].size, SIZE_MAX, M.rec[i].stamp,
				       "object read in this read-side section");
		M.nrec = 0;
	}
	ucma_read_unlock();
	M.depth--;
}

static void op_read_unlock(void)
{
	if (M.depth)
		read_unlock();
}

static void op_deref(void)
{
	struct hobj *o = &M.h[u8() % NHANDLE];
	const unsigned char *p;

	if (!o->h)
		return;
	errno = 0;
	p = ucma_deref(o->h);
	if (!M.depth) {
		if (p || errno != EPERM)
			fail("ucma_deref outside a read-side section: %p, %s", p, strerror(errno));
		return;
	}
	if (!p)
		fail("ucma_deref of a live handle: %s", strerror(errno));
	if (o->pins && p != o->pinaddr)
		fail("deref gives %p for an object pinned at %p", p, o->pinaddr);
	check_contents(p, o->size, SIZE_MAX, o->stamp, "dereferenced object");
	if (M.nrec < NRECORD)
		M.rec[M.nrec++] = (struct record){ p, o->size, o->stamp };
}

/* ------------------------------------------------------------------------ */
/* Contiguous buffers                                                        */
/* ------------------------------------------------------------------------ */

/* ucma_alloc() (@area NULL) or ucma_alloc_area(@area); @area_known: it
 * names the one area of the model's arena. */
static void contig_attempt(int slot, const char *area, bool area_known, size_t size,
			   size_t align, unsigned flags)
{
	const unsigned known = UCMA_ALLOC_ZERO | UCMA_ALLOC_POPULATE | UCMA_ALLOC_MLOCK |
			       UCMA_ALLOC_PHYS_CONTIG | UCMA_ALLOC_NOWAIT;
	bool bad_align = align & (align - 1), bad_flags = flags & ~known;
	bool strict;
	unsigned allowed = 0;
	unsigned char *p;
	size_t want;

	if (M.c[slot].p) {
		check_contents(M.c[slot].p, M.c[slot].size, SIZE_MAX, M.c[slot].stamp,
			       "contiguous buffer");
		if (ucma_release(M.c[slot].p) != 0)
			fail("release of a live buffer: %s", strerror(errno));
		M.stale_c[M.nstale_c++ % NSTALE] = M.c[slot].p;
		M.c[slot] = (struct cobj){ 0 };
	}
	strict = model_empty() && !M.depth && area_known && size > 0 && size <= 16 * MiB &&
		 align <= 2 * MiB && !bad_align && !bad_flags &&
		 !(flags & (UCMA_ALLOC_NOWAIT | UCMA_ALLOC_MLOCK | UCMA_ALLOC_PHYS_CONTIG));
	errno = 0;
	p = area ? ucma_alloc_area(area, size, align, flags) : ucma_alloc(size, align, flags);
	if (!p) {
		int err = errno;

		if (size == 0 || bad_align || bad_flags || align > CMA)
			allowed |= E_INVAL;
		if (!area_known)
			allowed |= E_NOENT;
		if (size > CMA)
			allowed |= E_NOMEM;
		if (!allowed) {
			if (strict)
				fail("ucma_alloc(%zu, %zu, %#x) failed in an empty arena: %s", size,
				     align, flags, strerror(err));
			allowed = E_NOMEM;
			if (any_pinned() || (flags & UCMA_ALLOC_NOWAIT))
				allowed |= E_BUSY;
			if (M.depth)
				allowed |= E_DEADLK;
			if (flags & UCMA_ALLOC_PHYS_CONTIG)
				allowed |= E_NOTSUP;
			if (flags & UCMA_ALLOC_MLOCK)
				allowed |= E_AGAIN | E_PERM;
		}
		expect_err(err, allowed, area ? "ucma_alloc_area" : "ucma_alloc");
		return;
	}
	if (size == 0 || bad_align || bad_flags || !area_known || size > CMA || align > CMA)
		fail("ucma_alloc(%zu, %zu, %#x) from %s succeeded", size, align, flags,
		     area ? area : "(null)");
	want = UCMA_ALIGN_UP(size, UCMA_PAGE_SIZE);
	if ((uintptr_t)p & (UCMA_PAGE_SIZE - 1) || (align && ((uintptr_t)p & (align - 1))))
		fail("ucma_alloc(%zu, %zu) = %p is misaligned", size, align, p);
	if (!in_cma(p) || !in_cma(p + want - 1))
		fail("contiguous buffer %p+%zu is not in the CMA zone", p, want);
	if (ucma_alloc_size(p) != want)
		fail("ucma_alloc_size %zu, expected %zu", ucma_alloc_size(p), want);
	if (ucma_owns(p))
		fail("ucma_owns claims contiguous buffer %p", p);
	check_no_overlap(p, want, NULL, "contiguous buffer");
	if (flags & UCMA_ALLOC_ZERO) {
		size_t bad = walk(p, want, SIZE_MAX, 0, ZERO);

		if (bad != SIZE_MAX)
			fail("UCMA_ALLOC_ZERO buffer: byte %zu is not zero", bad);
	}
	M.c[slot] = (struct cobj){ p, want, new_stamp(), flags };
	walk(p, want, SIZE_MAX, M.c[slot].stamp, FILL);
	/* Objects were migrated out of its way: all of them still verify. */
	verify_all();
}

static size_t pick_contig_align(void)
{
	static const size_t aligns[] = {
		0, 0, 1, 4096, 8192, 65536, 2 * MiB, 4 * MiB, 16 * MiB, 32 * MiB, 64 * MiB, 3,
		4097, (size_t)1 << 40, SIZE_MAX,
	};

	return aligns[u8() % UCMA_ARRAY_SIZE(aligns)];
}

static unsigned pick_contig_flags(void)
{
	uint8_t b = u8();
	unsigned flags = b & (UCMA_ALLOC_ZERO | UCMA_ALLOC_POPULATE | UCMA_ALLOC_MLOCK |
			      UCMA_ALLOC_NOWAIT);

	if ((b & 0xe0) == 0xe0)
		flags |= UCMA_ALLOC_PHYS_CONTIG;
	if ((b & 0xe0) == 0xc0)
		flags |= 0x20u << (b & 7);	/* unknown bits */
	return flags;
}

/* Sizes for contiguous buffers; PHYS_CONTIG only for small ones (it is
 * searched run by run without hugetlb pages). */
static size_t contig_size(unsigned flags)
{
	size_t size = pick_size();

	if ((flags & UCMA_ALLOC_PHYS_CONTIG) && size > 2 * UCMA_PAGE_SIZE && size <= CMA)
		size = 2 * UCMA_PAGE_SIZE;
	return size;
}

static void op_alloc(void)
{
	int slot = u8() % NCONTIG;
	size_t align = pick_contig_align();
	unsigned flags = pick_contig_flags();

	contig_attempt(slot, NULL, true, contig_size(flags), align, flags);
}

static void op_alloc_area(void)
{
	static const char long_name[] = "an-area-name-much-longer-than-the-limit-of-32";
	static const char *const names[] = {
		"default", "default", "nosuch", NULL, "", long_name, "DEFAULT", "default ",
	};
	int slot = u8() % NCONTIG;
	int k = u8() % (int)UCMA_ARRAY_SIZE(names);
	size_t align = pick_contig_align();
	unsigned flags = pick_contig_flags();
	size_t size = contig_size(flags);
	const char *name = names[k];

	if (!name) {
		errno = 0;
		if (ucma_alloc_area(NULL, size, align, flags) != NULL || errno != EINVAL)
			fail("ucma_alloc_area(NULL): %s", strerror(errno));
		return;
	}
	contig_attempt(slot, name, strcmp(name, "default") == 0, size, align, flags);
}

static bool contig_live_at(const void *p)
{
	for (int i = 0; i < NCONTIG; i++)
		if (M.c[i].p && M.c[i].p == p)
			return true;
	return false;
}

static void op_release(void)
{
	int slot = u8() % NCONTIG;
	void *stale;

	if (M.c[slot].p) {
		check_contents(M.c[slot].p, M.c[slot].size, SIZE_MAX, M.c[slot].stamp,
			       "contiguous buffer");
		if (ucma_release(M.c[slot].p) != 0)
			fail("release of a live buffer: %s", strerror(errno));
		M.stale_c[M.nstale_c++ % NSTALE] = M.c[slot].p;
		M.c[slot] = (struct cobj){ 0 };
		return;
	}
	/* A double release, unless the address was handed out again. */
	stale = M.stale_c[slot % NSTALE];
	if (!stale || contig_live_at(stale))
		return;
	errno = 0;
	if (ucma_release(stale) != -1 || errno != EINVAL)
		fail("double release of %p: %s", stale, strerror(errno));
}

/* ------------------------------------------------------------------------ */
/* Compaction                                                                */
/* ------------------------------------------------------------------------ */

static int pick_prio(bool *valid)
{
	static const int prios[] = {
		UCMA_COMPACT_ASYNC, UCMA_COMPACT_SYNC_LIGHT, UCMA_COMPACT_SYNC_FULL,
		UCMA_COMPACT_ASYNC, 3, -1, INT_MAX, INT_MIN,
	};
	int prio = prios[u8() % UCMA_ARRAY_SIZE(prios)];

	*valid = prio >= UCMA_COMPACT_ASYNC && prio <= UCMA_COMPACT_SYNC_FULL;
	return prio;
}

static void op_compact(void)
{
	bool valid;
	int prio = pick_prio(&valid), rc;

	errno = 0;
	rc = ucma_compact(prio);
	if (!valid) {
		if (rc != -1 || errno != EINVAL)
			fail("ucma_compact(%d): %d, %s", prio, rc, strerror(errno));
		return;
	}
	if (rc != 0)
		expect_err(errno, M.depth ? E_DEADLK : 0, "ucma_compact");
	verify_all();
}

static void op_compact_order(void)
{
	static const unsigned orders[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 10, 11, 64, UINT_MAX };
	unsigned order = orders[u8() % UCMA_ARRAY_SIZE(orders)];
	bool valid;
	int prio = pick_prio(&valid), rc;

	errno = 0;
	rc = ucma_compact_order(order, prio);
	if (!valid || order > UCMA_MAX_ORDER) {
		if (rc != -1 || errno != EINVAL)
			fail("ucma_compact_order(%u, %d): %d, %s", order, prio, rc,
			     strerror(errno));
		return;
	}
	if (rc != 0)
		expect_err(errno, E_NOMEM | (M.depth ? E_DEADLK : 0), "ucma_compact_order");
	verify_all();
}

/* ------------------------------------------------------------------------ */
/* Hostile input                                                             */
/* ------------------------------------------------------------------------ */

static ucma_handle_t pick_bad_handle(void)
{
	struct hobj *o = &M.h[u8() % NHANDLE];

	switch (u8() % 8) {
	case 0: return 0;
	case 1: return ~0ull;
	case 2: return ((uint64_t)1 << 32) | 0xfffffff0u;	/* index beyond the table */
	case 3: return o->h ? o->h + ((uint64_t)1 << 32) : 0;	/* even generation */
	case 4: return o->h ? o->h + ((uint64_t)2 << 32) : 1;	/* a future generation */
	case 5: return o->h ? o->h ^ 1 : 3;			/* a neighbouring index */
	case 6: return M.stale_h[u8() % NSTALE];
	default: return u64();
	}
}

static void op_bad_handle(void)
{
	ucma_handle_t h = pick_bad_handle();
	uint8_t fn = u8();
	const void *p;
	int rc;

	/* A forged value may name a live object (a neighbour's index): skip. */
	if (handle_live(h))
		return;
	errno = 0;
	switch (fn % 8) {
	case 0:
		rc = ucma_hfree(h);
		break;
	case 1:
		rc = ucma_hrealloc(h, 1 + fn);
		break;
	case 2:
		rc = ucma_hsize(h) == 0 ? -1 : 0;
		break;
	case 3:
		rc = ucma_pin(h, 0) ? 0 : -1;
		break;
	case 4:
		rc = ucma_pin(h, UCMA_PIN_LONGTERM) ? 0 : -1;
		break;
	case 5:
		rc = ucma_unpin(h);
		break;
	default:
		p = ucma_deref(h);
		if (p || errno != (M.depth ? EINVAL : EPERM))
			fail("ucma_deref(bad handle %#llx): %p, %s", (unsigned long long)h, p,
			     strerror(errno));
		return;
	}
	/* Both apply to a long-term pin in a read-side section: either may win. */
	if (rc != -1 || !(errno == EINVAL || (fn % 8 == 4 && M.depth && errno == EDEADLK)))
		fail("function %u with bad handle %#llx: %d, %s", fn % 8, (unsigned long long)h,
		     rc, strerror(errno));
}

static void *pick_bad_pointer(void *stack)
{
	uint8_t k = u8();
	uintptr_t off = (uintptr_t)u32() % ARENA;

	switch (k % 12) {
	case 0: return NULL;
	case 1: return k & 0x10 ? stack : (void *)&static_marker;
	case 2: return (void *)(uintptr_t)1;
	case 3: return (void *)(uintptr_t)u64();
	case 4: return (void *)(A->base + off);
	case 5: return (void *)(A->base + UCMA_ALIGN_DOWN(off, UCMA_PAGE_SIZE));
	case 6: return M.m[k % NMALLOC].p;
	case 7: return M.c[k % NCONTIG].p ? M.c[k % NCONTIG].p + (k & 1 ? 1 : 4096) : NULL;
	case 8: return M.h[k % NHANDLE].pinaddr;
	case 9: return M.stale_c[k % NSTALE];
	case 10: return (void *)(A->base + A->size - 1);
	default: return (void *)&op_bad_handle;
	}
}

static bool malloc_live_at(const void *p)
{
	for (int i = 0; i < NMALLOC; i++)
		if (M.m[i].p && M.m[i].p == p)
			return true;
	return false;
}

static bool pinned_at(const void *p)
{
	for (int i = 0; i < NHANDLE; i++)
		if (M.h[i].h && M.h[i].pinaddr && M.h[i].pinaddr == p)
			return true;
	return false;
}

static void op_bad_pointer(void)
{
	int on_stack = 0;
	void *p = pick_bad_pointer(&on_stack);
	uint8_t fn = u8();
	uint64_t phys;
	int rc;

	errno = 0;
	switch (fn % 4) {
	case 0:
		if (contig_live_at(p))
			return;
		rc = ucma_release(p);
		if (rc != -1 || errno != EINVAL)
			fail("ucma_release(%p) of no buffer: %d, %s", p, rc, strerror(errno));
		break;
	case 1:
		if (contig_live_at(p))
			return;
		if (ucma_alloc_size(p) != 0 || errno != EINVAL)
			fail("ucma_alloc_size(%p) of no buffer: %s", p, strerror(errno));
		break;
	case 2:
		rc = ucma_owns(p);
		if (malloc_live_at(p) && rc != 1)
			fail("ucma_owns(%p) of a live malloc block: %d", p, rc);
		if (!p || p == (void *)&on_stack || p == (void *)&static_marker ||
		    contig_live_at(p) || pinned_at(p))
			if (rc != 0)
				fail("ucma_owns(%p) of no malloc block: %d", p, rc);
		break;
	default:
		rc = ucma_virt2phys(p, fn & 0x80 ? NULL : &phys);
		if (!p || (fn & 0x80)) {
			if (rc != -1 || errno != EINVAL)
				fail("ucma_virt2phys(%p, %s): %d, %s", p,
				     fn & 0x80 ? "NULL" : "&phys", rc, strerror(errno));
		} else if (rc != 0) {
			expect_err(errno, E_INVAL | E_PERM | E_NOTSUP, "ucma_virt2phys");
		}
		break;
	}
}

static void op_misc(void)
{
	uint8_t k = u8();
	char name[41];
	uint64_t v;
	unsigned len;
	int rc;

	switch (k % 8) {
	case 0:		/* a statistic by a name from the input */
		len = u8() % (sizeof(name) - 1);
		for (unsigned i = 0; i < len; i++)
			name[i] = (char)u8();
		name[len] = '\0';
		errno = 0;
		rc = ucma_stat(name, &v);
		if (rc != 0)
			expect_err(errno, E_NOENT | E_INVAL, "ucma_stat");
		break;
	case 1:
		errno = 0;
		if (ucma_stat(NULL, &v) != -1 || errno != EINVAL)
			fail("ucma_stat(NULL): %s", strerror(errno));
		if (ucma_stat("pgmigrate_success", &v) != 0)
			fail("ucma_stat(pgmigrate_success): %s", strerror(errno));
		break;
	case 2: {
		static const char *const zones[] = { "normal", "cma", "default", "nosuch", "" };
		const char *z = zones[u8() % UCMA_ARRAY_SIZE(zones)];
		const char *b = ucma_backing_name(z);

		if (!b && strcmp(z, "nosuch") != 0 && z[0])
			fail("ucma_backing_name(%s): %s", z, strerror(errno));
		if (b && strcmp(b, "none") != 0 && strcmp(b, "thp") != 0 &&
		    strncmp(b, "hugetlb-", 8) != 0)
			fail("ucma_backing_name(%s) = %s", z, b);
		break;
	}
	case 3:
		rc = ucma_trim();
		if (rc != 0 && rc != 1)
			fail("ucma_trim() = %d", rc);
		if (ucma_usable_size(NULL) != 0)
			fail("ucma_usable_size(NULL) != 0");
		verify_all();
		break;
	case 4:
		if (k & 0x80)
			ucma_stats_print(devnull);
		break;
	case 6: {	/* a second start-up, with whatever configuration */
		struct ucma_config cfg = { 0 };

		cfg.arena_size = (size_t)u32() << (u8() % 32);
		cfg.cma_size = (size_t)u32() << (u8() % 32);
		cfg.hugepages = (int)(int8_t)u8();
		cfg.node = (int)(int8_t)u8();
		cfg.reserved[0] = u8() % 2;
		errno = 0;
		if (ucma_init(&cfg) != -1 || errno != EBUSY)
			fail("ucma_init(cfg) while running: %s", strerror(errno));
		if (ucma_init(NULL) != 0)
			fail("ucma_init(NULL) while running: %s", strerror(errno));
		break;
	}
	default:
		verify_all();
		if (!M.depth)
			check_zones();
		break;
	}
}


/* ------------------------------------------------------------------------ */
/* Later additions to the API                                                */
/* ------------------------------------------------------------------------ */

/* ucma_posix_memalign() (errno untouched, the result returned, *memptr
 * left alone on failure) or ucma_memalign() (glibc's rounding up). */
static void op_memalign(void)
{
	static const size_t aligns[] = {
		0, 1, 2, 4, 8, 16, 24, 32, 48, 64, 100, 4096, 8192, 12288, 65536, 2 * MiB,
		3 * MiB, (size_t)1 << 63, ((size_t)1 << 63) + 1, SIZE_MAX,
	};
	int slot = u8() % NMALLOC;
	uint8_t how = u8();
	size_t align = aligns[u8() % UCMA_ARRAY_SIZE(aligns)], size = pick_size(), eff = align;
	bool pow2 = align && !(align & (align - 1));
	unsigned char *p = (unsigned char *)&static_marker;
	const char *what = how & 1 ? "ucma_posix_memalign" : "ucma_memalign";

	malloc_drop(slot);
	if (!pow2 && align > ((size_t)1 << 63))
		eff = 0;		/* memalign cannot round it up: EINVAL */
	else if (!pow2 && align)
		eff = (size_t)1 << (64 - __builtin_clzll((unsigned long long)align));
	if (malloc_budget(size) || eff > 4 * MiB)
		return;			/* gigabytes of alignment slack: not here */
	if (how & 1) {
		bool no_memptr = (how & 6) == 6;
		int rc;

		errno = EXDEV;		/* must survive the call */
		rc = ucma_posix_memalign(no_memptr ? NULL : (void **)&p, align, size);
		if (errno != EXDEV)
			fail("ucma_posix_memalign changed errno to %s", strerror(errno));
		if (no_memptr || !pow2 || align < sizeof(void *)) {
			if (rc != EINVAL)
				fail("ucma_posix_memalign(%s, %zu, %zu) returned %d, not EINVAL",
				     no_memptr ? "NULL" : "&p", align, size, rc);
			if (p != (unsigned char *)&static_marker)
				fail("ucma_posix_memalign wrote *memptr on EINVAL");
			return;
		}
		if (rc != 0) {
			if (p != (unsigned char *)&static_marker)
				fail("ucma_posix_memalign wrote *memptr on failure %d", rc);
			if (rc != ENOMEM)
				fail("ucma_posix_memalign(%zu, %zu) returned %d", align, size, rc);
			errno = rc;
			malloc_failed(size, what);
			return;
		}
	} else {
		errno = 0;
		p = ucma_memalign(align, size);
		if (!p) {
			if (!eff && align)
				expect_err(errno, E_INVAL, "ucma_memalign(unroundable alignment)");
			else
				malloc_failed(size, what);
			return;
		}
		if (!eff && align)
			fail("ucma_memalign(%zu, %zu) accepted an alignment it cannot round", align,
			     size);
	}
	if (size > PTRDIFF_MAX)
		fail("%s(%zu, %zu) succeeded", what, align, size);
	if (!p)
		fail("%s(%zu, %zu) reported success without a block", what, align, size);
	if (eff && ((uintptr_t)p & (eff - 1)))
		fail("%s(%zu, %zu) = %p is not %zu-byte aligned", what, align, size, p, eff);
	if (size > MALLOC_BUDGET) {
		malloc_transient(p, size, what);
		return;
	}
	malloc_accept(slot, p, size, false, what);
}

/* ucma_try_free(): frees the family's own blocks and leaves alone what
 * ucma_owns() disowns (the C library's blocks, the stack, contiguous
 * buffers, movable objects), saying which.  (A pointer into a block is
 * the family's, and aborts as in ucma_free(): not tried here.) */
static void op_try_free(void)
{
	uint8_t k = u8();
	int slot = u8() % NMALLOC, on_stack = 0, rc;
	struct mobj *o = &M.m[slot];
	void *libc, *p = NULL;

	switch (k % 5) {
	case 0:			/* a live block: freed, 1 */
		if (!o->p)
			return;
		check_contents(o->p, o->size, SIZE_MAX, o->stamp, "malloc block");
		if ((rc = ucma_try_free(o->p)) != 1)
			fail("ucma_try_free(%p) of a live block = %d", o->p, rc);
		M.malloc_bytes -= o->size;
		*o = (struct mobj){ 0 };
		return;
	case 1:
		if ((rc = ucma_try_free(NULL)) != 1)
			fail("ucma_try_free(NULL) = %d", rc);
		return;
	case 2:			/* the C library's block: 0, and it stays usable */
		libc = malloc(1 + k);
		if (!libc)
			return;
		memset(libc, 0x5a, 1 + k);
		if ((rc = ucma_try_free(libc)) != 0)
			fail("ucma_try_free(%p) of the C library's block = %d", libc, rc);
		free(libc);
		return;
	case 3:
		p = k & 0x80 ? (void *)&on_stack : (void *)&static_marker;
		break;
	default:		/* a contiguous buffer, or a pinned movable object */
		p = k & 0x80 ? (void *)M.c[slot % NCONTIG].p : M.h[slot % NHANDLE].pinaddr;
		if (!p)
			return;
		break;
	}
	if ((rc = ucma_try_free(p)) != 0)
		fail("ucma_try_free(%p), no block of the family, = %d", p, rc);
	verify_all();
}

/* ucma_deref_size(): address and size of one moment, or the errors of
 * ucma_deref(), with *size left alone then. */
static void op_deref_size(void)
{
	struct hobj *o = &M.h[u8() % NHANDLE];
	bool want_size = u8() & 1;
	size_t size = 12345;
	const unsigned char *p;
	ucma_handle_t h = o->h;

	if (!h) {
		h = pick_bad_handle();
		if (handle_live(h))
			return;
	}
	errno = 0;
	p = ucma_deref_size(h, want_size ? &size : NULL);
	if (!M.depth) {
		if (p || errno != EPERM || size != 12345)
			fail("ucma_deref_size outside a read-side section: %p, %s, size %zu", p,
			     strerror(errno), size);
		return;
	}
	if (!o->h) {
		if (p || errno != EINVAL || size != 12345)
			fail("ucma_deref_size(bad handle %#llx): %p, %s, size %zu",
			     (unsigned long long)h, p, strerror(errno), size);
		return;
	}
	if (!p)
		fail("ucma_deref_size of a live handle: %s", strerror(errno));
	if (want_size && size != o->size)
		fail("ucma_deref_size gives size %zu, model %zu", size, o->size);
	if (o->pins && p != o->pinaddr)
		fail("ucma_deref_size gives %p for an object pinned at %p", p, o->pinaddr);
	check_contents(p, o->size, SIZE_MAX, o->stamp, "dereferenced object");
	if (M.nrec < NRECORD)
		M.rec[M.nrec++] = (struct record){ p, o->size, o->stamp };
}

/* ucma_unlend() of a live block (afterwards none of it is on a lent
 * frame, the contents unchanged), of odd ranges (no error), of a range
 * that wraps (EINVAL).  ucma_unlend_all() is left out: it ends lending for
 * the process, and inputs must not change what later ones see. */
static void op_unlend(void)
{
	uint8_t k = u8();
	struct mobj *o = &M.m[u8() % NMALLOC];
	const void *addr;
	size_t len;
	int rc;

	switch (k % 4) {
	case 0:
	case 1:
		if (!o->p)
			return;
		addr = o->p;
		len = o->size;
		break;
	case 2:
		addr = (const void *)(A->base + (uintptr_t)u32() % ARENA);
		len = (size_t)u32() << (u8() % 16);
		if ((uintptr_t)addr + len < (uintptr_t)addr)
			len = 1;
		break;
	default:		/* wraps: EINVAL, nothing done */
		len = u8();
		addr = (const void *)(UINTPTR_MAX - len);	/* its last byte is the top */
		len += 2 + (k >> 2);
		errno = 0;
		if (ucma_unlend(addr, len) != -1 || errno != EINVAL)
			fail("ucma_unlend(%p, %zu), which wraps: %s", addr, len, strerror(errno));
		return;
	}
	errno = 0;
	rc = ucma_unlend(addr, len);
	if (rc != 0) {
		expect_err(errno, E_BUSY | E_NOMEM, "ucma_unlend");
	} else if (len && ucma_lend_range_borrowed(addr, len)) {
		fail("ucma_unlend(%p, %zu) returned 0 with part of it still lent", addr, len);
	}
	verify_all();
}

/* Did walk() write a byte in the page of @p, inside the object of @size
 * bytes at @base?  Every page up to SPARSE_MAX; above it, only the pages
 * of the first and last 4 KiB.  The others may never have been present
 * (ucma_trim() purges free pages, and a new buffer then gets them
 * unmapped), and ucma_vtophys() answers EINVAL for those. */
static bool page_written(const unsigned char *base, size_t size, const unsigned char *p)
{
	uintptr_t pg = (uintptr_t)p & ~(uintptr_t)(UCMA_PAGE_SIZE - 1);

	return size <= SPARSE_MAX || pg < (uintptr_t)base + 4096 ||
	       pg + UCMA_PAGE_SIZE > (uintptr_t)base + size - 4096;
}

/* ucma_vtophys(): the page offset kept, never address 0, a contiguous
 * length that covers at least the rest of the page and stays inside the
 * arena, and a whole UCMA_ALLOC_PHYS_CONTIG buffer. */
static void op_vtophys(void)
{
	uint8_t k = u8();
	int on_stack = 0;
	bool want_len = !(k & 0x40);
	const struct cobj *whole = NULL;	/* a PHYS_CONTIG buffer asked for whole */
	const unsigned char *p = NULL, *base = NULL;
	uint64_t phys = 0;
	size_t len = 0, in_page, size = 0;
	int rc;

	switch (k % 4) {
	case 0: {
		struct mobj *o = &M.m[u8() % NMALLOC];

		if (o->p && o->size) {
			p = o->p + (size_t)u16() % o->size;
			base = o->p;
			size = o->size;
		}
		break;
	}
	case 1: {
		struct cobj *c = &M.c[u8() % NCONTIG];

		if (c->p) {
			whole = (c->flags & UCMA_ALLOC_PHYS_CONTIG) && (k & 0x80) ? c : NULL;
			p = whole ? c->p : c->p + (size_t)u32() % c->size;
			base = c->p;
			size = c->size;
		}
		break;
	}
	case 2:
		p = M.h[u8() % NHANDLE].pinaddr;
		break;
	default:
		p = pick_bad_pointer(&on_stack);
		if (p && (malloc_live_at(p) || contig_live_at(p) || pinned_at(p)))
			return;
		errno = 0;
		rc = ucma_vtophys(p, &phys, want_len ? &len : NULL);
		if (rc == 0 && !in_arena(p))
			fail("ucma_vtophys(%p) of memory ucma does not own succeeded", p);
		if (rc != 0)
			expect_err(errno, E_INVAL | E_PERM | E_NOTSUP, "ucma_vtophys");
		return;
	}
	if (!p)
		return;
	errno = 0;
	if (k & 0x20) {		/* a NULL argument: EINVAL */
		if (ucma_vtophys(k & 0x10 ? NULL : p, k & 0x10 ? &phys : NULL, &len) != -1 ||
		    errno != EINVAL)
			fail("ucma_vtophys with a NULL argument: %s", strerror(errno));
		return;
	}
	rc = ucma_vtophys(p, &phys, want_len ? &len : NULL);
	if (rc != 0) {
		/* A page the model wrote is present (a handle's address is
		 * its object's start, written too). */
		expect_err(errno, E_PERM | E_NOTSUP | (base && !page_written(base, size, p) ?
						       E_INVAL : 0),
			   "ucma_vtophys of live memory");
		return;
	}
	in_page = (uintptr_t)p & (UCMA_PAGE_SIZE - 1);
	if (!phys || (phys & (UCMA_PAGE_SIZE - 1)) != in_page)
		fail("ucma_vtophys(%p) = %#llx: the offset in the page is lost", p,
		     (unsigned long long)phys);
	if (!want_len)
		return;
	if (len < UCMA_PAGE_SIZE - in_page)
		fail("ucma_vtophys(%p): %zu contiguous bytes, less than the rest of its page", p,
		     len);
	if (in_arena(p) && (uintptr_t)p + len > A->base + A->size)
		fail("ucma_vtophys(%p): %zu contiguous bytes run past the arena", p, len);
	if (whole && len < whole->size)
		fail("UCMA_ALLOC_PHYS_CONTIG buffer %p of %zu bytes: only %zu contiguous", p,
		     whole->size, len);
}

/*
 * Memory events.  Each registered callback keeps its own view of the
 * arena, a bit per page: MAP must name pages it holds unmapped, UNMAP
 * pages it holds mapped, and both pages of the CMA zone.  When a call
 * returns, every live contiguous buffer on an announced area is mapped in
 * every view: a device that registered what it was told can reach it.
 */
#define NVIEW 4
#define EV_NAME_MAX 63		/* the longest name ucma.h allows */
#define EV_MAX 32		/* callbacks at once */
#define VIEW_WORDS (2 * (ARENA + CMA) / UCMA_PAGE_SIZE / 64)	/* LLVMFuzzerInitialize checks */

struct view {
	char name[8];
	bool registered;
	bool reenter;		/* the callback tries to (un)register: EDEADLK */
	uint64_t mapped[VIEW_WORDS];
	unsigned long events;
};

static struct view V[NVIEW];

static void view_cb(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	struct view *v = arg;
	uintptr_t a = (uintptr_t)addr;

	v->events++;
	if (ev != UCMA_MEM_EVENT_MAP && ev != UCMA_MEM_EVENT_UNMAP)
		fail("memory event %d for %p+%zu", (int)ev, addr, len);
	if (!len || (a | len) & (UCMA_PAGE_SIZE - 1) || !in_cma(addr) ||
	    !in_cma((const char *)addr + len - 1))
		fail("memory event %s for %p+%zu, not whole pages of the CMA zone",
		     ev == UCMA_MEM_EVENT_MAP ? "MAP" : "UNMAP", addr, len);
	for (size_t pg = (a - A->base) >> UCMA_PAGE_SHIFT, n = len >> UCMA_PAGE_SHIFT; n--; pg++) {
		uint64_t bit = 1ull << (pg % 64);
		bool was = v->mapped[pg / 64] & bit;

		if (was == (ev == UCMA_MEM_EVENT_MAP))
			fail("callback %s: %s of page %p, which it holds %s", v->name,
			     ev == UCMA_MEM_EVENT_MAP ? "MAP" : "UNMAP",
			     (void *)(A->base + (pg << UCMA_PAGE_SHIFT)),
			     was ? "mapped" : "unmapped");
		v->mapped[pg / 64] ^= bit;
	}
	if (v->reenter) {
		errno = 0;
		if (ucma_mem_event_register("fz-inner", view_cb, v) != -1 || errno != EDEADLK)
			fail("ucma_mem_event_register in a callback: %s", strerror(errno));
		errno = 0;
		if (ucma_mem_event_unregister(v->name) != -1 || errno != EDEADLK)
			fail("ucma_mem_event_unregister in a callback: %s", strerror(errno));
	}
}

static bool view_has(const struct view *v, const void *p, size_t len)
{
	for (size_t pg = ((uintptr_t)p - A->base) >> UCMA_PAGE_SHIFT,
		    n = len >> UCMA_PAGE_SHIFT; n--; pg++)
		if (!(v->mapped[pg / 64] & (1ull << (pg % 64))))
			return false;
	return true;
}

/* Called after every operation: the contiguous buffers are in every view. */
static void check_views(void)
{
	for (int i = 0; i < NVIEW; i++) {
		if (!V[i].registered)
			continue;
		for (int j = 0; j < NCONTIG; j++) {
			const struct cobj *c = &M.c[j];
			const struct ucma_cma_area *area;

			if (!c->p)
				continue;
			area = ucma_area_of_pfn(A, ucma_addr_to_pfn(A, c->p));
			if (area && area->frames && area->frames->announced &&
			    !view_has(&V[i], c->p, c->size))
				fail("callback %s was not told of contiguous buffer %p+%zu", V[i].name,
				     c->p, c->size);
		}
	}
}

static void view_unregister(struct view *v)
{
	if (ucma_mem_event_unregister(v->name) != 0)
		fail("ucma_mem_event_unregister(%s): %s", v->name, strerror(errno));
	v->registered = false;
}

/* A callback that keeps no view: it only checks what it is told. */
static void plain_cb(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	(void)arg;
	if ((ev != UCMA_MEM_EVENT_MAP && ev != UCMA_MEM_EVENT_UNMAP) || !len || !in_cma(addr) ||
	    !in_cma((const char *)addr + len - 1))
		fail("memory event %d for %p+%zu", (int)ev, addr, len);
}

/* The longest name (@name, EV_NAME_MAX + 1 bytes long on entry) is
 * accepted; callbacks beyond EV_MAX are refused with ENOSPC; all of these
 * are unregistered again. */
static void fill_callbacks(char *name)
{
	char fill[16];
	int n = 0, views = 0;

	for (int i = 0; i < NVIEW; i++)
		views += V[i].registered;
	name[EV_NAME_MAX] = '\0';
	if (ucma_mem_event_register(name, plain_cb, NULL) != 0)
		fail("ucma_mem_event_register(%d-byte name): %s", EV_NAME_MAX, strerror(errno));
	for (n = 1; n <= EV_MAX; n++) {
		snprintf(fill, sizeof(fill), "fz-fill%d", n);
		errno = 0;
		if (ucma_mem_event_register(fill, plain_cb, NULL) != 0)
			break;
	}
	if (n + views != EV_MAX || errno != ENOSPC)
		fail("callback %d (%d of the model's) refused with %s, expected ENOSPC at %d",
		     n + views + 1, views, strerror(errno), EV_MAX + 1);
	while (--n > 0) {
		snprintf(fill, sizeof(fill), "fz-fill%d", n);
		if (ucma_mem_event_unregister(fill) != 0)
			fail("ucma_mem_event_unregister(%s): %s", fill, strerror(errno));
	}
	if (ucma_mem_event_unregister(name) != 0)
		fail("ucma_mem_event_unregister(%d-byte name): %s", EV_NAME_MAX, strerror(errno));
}

static void op_mem_event(void)
{
	uint8_t k = u8();
	struct view *v = &V[u8() % NVIEW];
	char name[EV_NAME_MAX + 2];
	int rc;

	snprintf(v->name, sizeof(v->name), "fz%d", (int)(v - V));
	switch (k % 4) {
	case 0:
	case 1:			/* register, or a second time: EEXIST */
		if (!v->registered) {
			memset(v->mapped, 0, sizeof(v->mapped));
			v->reenter = k & 0x80;
		}
		errno = 0;
		rc = ucma_mem_event_register(v->name, view_cb, v);
		if (v->registered) {
			if (rc != -1 || errno != EEXIST)
				fail("ucma_mem_event_register(%s) twice: %d, %s", v->name, rc,
				     strerror(errno));
		} else if (rc != 0) {
			fail("ucma_mem_event_register(%s): %s", v->name, strerror(errno));
		}
		v->registered = true;
		break;
	case 2:			/* unregister, or one not registered: ENOENT */
		if (v->registered) {
			view_unregister(v);
			break;
		}
		errno = 0;
		if (ucma_mem_event_unregister(v->name) != -1 || errno != ENOENT)
			fail("ucma_mem_event_unregister(%s), not registered: %s", v->name,
			     strerror(errno));
		break;
	default:		/* bad names and too many callbacks */
		memset(name, 'n', sizeof(name) - 1);
		name[sizeof(name) - 1] = '\0';
		errno = 0;
		switch ((k >> 2) % 5) {
		case 0: rc = ucma_mem_event_register(NULL, view_cb, v); break;
		case 1: rc = ucma_mem_event_register("", view_cb, v); break;
		case 2: rc = ucma_mem_event_register(name, view_cb, v); break;	/* too long */
		case 3: rc = ucma_mem_event_register("fz-null", NULL, v); break;
		default: rc = ucma_mem_event_unregister(NULL); break;
		}
		if (rc != -1 || errno != EINVAL)
			fail("memory event call with a bad argument (case %d): %d, %s",
			     (k >> 2) % 5, rc, strerror(errno));
		if (k & 0x80)
			fill_callbacks(name);
		break;
	}
}

/* ------------------------------------------------------------------------ */
/* The driver                                                                */
/* ------------------------------------------------------------------------ */

struct op {
	const char *name;
	void (*fn)(void);
};

/*
 * The opcode is the first byte modulo 32.  The committed inputs depend on
 * this table and on each operation's argument bytes: add operations in
 * free slots and leave existing encodings alone.
 */
#define NR_OPCODES 32

static const struct op ops[NR_OPCODES] = {
	[0] = { "malloc", op_malloc },
	[1] = { "calloc", op_calloc },
	[2] = { "realloc", op_realloc },
	[3] = { "aligned_alloc", op_aligned_alloc },
	[4] = { "free", op_free },
	[5] = { "halloc", op_halloc },
	[6] = { "hfree", op_hfree },
	[7] = { "hrealloc", op_hrealloc },
	[8] = { "hsize", op_hsize },
	[9] = { "pin", op_pin },
	[10] = { "unpin", op_unpin },
	[11] = { "write", op_write },
	[12] = { "read_lock", op_read_lock },
	[13] = { "deref", op_deref },
	[14] = { "read_unlock", op_read_unlock },
	[15] = { "alloc", op_alloc },
	[16] = { "alloc_area", op_alloc_area },
	[17] = { "release", op_release },
	[18] = { "compact", op_compact },
	[19] = { "compact_order", op_compact_order },
	[20] = { "bad_handle", op_bad_handle },
	[21] = { "bad_pointer", op_bad_pointer },
	[22] = { "misc", op_misc },
	[23] = { "memalign", op_memalign },
	[24] = { "try_free", op_try_free },
	[25] = { "deref_size", op_deref_size },
	[26] = { "unlend", op_unlend },
	[27] = { "vtophys", op_vtophys },
	[28] = { "mem_event", op_mem_event },
	/* 29..31: free; they do nothing */
};

/* Give back everything the input still holds and check the library is idle. */
static void finish_input(void)
{
	uint64_t live, bytes;

	M.what = "end of input";
	while (M.depth)
		read_unlock();
	verify_all();
	check_views();
	for (int i = 0; i < NVIEW; i++)
		if (V[i].registered)
			view_unregister(&V[i]);
	for (int i = 0; i < NHANDLE; i++)
		if (M.h[i].h)
			handle_drop(&M.h[i]);
	for (int i = 0; i < NMALLOC; i++)
		malloc_drop(i);
	for (int i = 0; i < NCONTIG; i++) {
		if (!M.c[i].p)
			continue;
		if (ucma_release(M.c[i].p) != 0)
			fail("release of a live buffer: %s", strerror(errno));
	}
	if (ucma_defer_drain() != 0)
		fail("ucma_defer_drain: %s", strerror(errno));
	ucma_handle_counters(&live, &bytes);
	if (live || bytes)
		fail("%llu handles (%llu bytes) live after freeing everything",
		     (unsigned long long)live, (unsigned long long)bytes);
	for (int i = 0; i < A->nr_areas; i++)
		if (A->areas[i].nr_allocs)
			fail("area %s has %llu allocations after releasing everything",
			     A->areas[i].name, (unsigned long long)A->areas[i].nr_allocs);
	check_zones();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct ucma_config cfg = {
		.arena_size = ARENA,
		.cma_size = CMA,
		.hugepages = UCMA_BACKING_NONE,
		.hugepages_normal = UCMA_BACKING_NONE,
	};

	(void)argc;
	(void)argv;
	/* No background thread: every run of an input does the same. */
	setenv("UCMA_COMPACT", "0", 0);
	if (ucma_init(&cfg) != 0) {
		fprintf(stderr, "fuzz_ops: ucma_init: %s\n", strerror(errno));
		abort();
	}
	A = ucma_arena_get();
	if (A->size > (size_t)VIEW_WORDS * 64 * UCMA_PAGE_SIZE) {
		fprintf(stderr, "fuzz_ops: arena of %zu bytes, the event views cover less\n",
			A->size);
		abort();
	}
	devnull = fopen("/dev/null", "w");
	trace = getenv("FUZZ_OPS_TRACE") != NULL;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!A)
		LLVMFuzzerInitialize(NULL, NULL);
	memset(&M, 0, sizeof(M));
	M.d = data;
	M.n = size;
	while (M.i < M.n && M.op < MAX_OPS) {
		const struct op *o = &ops[u8() % NR_OPCODES];

		M.op++;
		M.what = o->name;
		if (trace)
			fprintf(stderr, "fuzz_ops: op %u %s at byte %zu\n", M.op,
				o->name ? o->name : "(free slot)", M.i - 1);
		if (!o->fn)
			continue;
		o->fn();
		check_views();
	}
	finish_input();
	return 0;
}
