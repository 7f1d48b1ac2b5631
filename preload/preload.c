/*
 * preload.c - the LD_PRELOAD malloc interposer, libucma-preload.so.
 *
 * Defines glibc's allocation interface (malloc, free, calloc, realloc,
 * reallocarray, memalign, posix_memalign, aligned_alloc, valloc, pvalloc,
 * malloc_usable_size, malloc_trim, mallopt, mallinfo2, mallinfo,
 * malloc_stats, cfree, free_sized, free_aligned_sized) on top of ucma's
 * public malloc family, so that an unmodified program allocates from the
 * NORMAL zone of the arena.  C++ operator new and delete come along: the
 * ones of libstdc++ call malloc and free.  The allocator is linked into
 * this library (preload.mk), and its ucma_* interface is exported under
 * libucma.so's symbol version, so a program that also links -lucma binds
 * to this copy: one arena, one set of statistics and one set of fork
 * handlers.
 *
 * Where a pointer comes from decides where it goes back to, asked in
 * this order:
 *  - with UCMA_PRELOAD_CONTIG_MIN, a malloc, calloc or growing realloc
 *    request at least that large is a contiguous buffer from a CMA area
 *    (ucma_alloc_for_malloc(), falling back to the malloc family when that
 *    fails); such buffers start on a page, carry a mark on their head page
 *    (ucma_malloc_contig_size() knows them, and only them: a buffer of the
 *    program's own ucma_alloc() call is not free()'s to take, nor is one
 *    of these ucma_release()'s), and they go back through
 *    ucma_release_for_malloc().  realloc() asks about them first
 *    because they lie in the arena, and ucma_owns() is true for any address
 *    there; free() asks only once ucma_free_or() found no slab or large
 *    block there (the common case needs no look-up);
 *  - ucma_owns() is true: ucma's malloc family, back through ucma_free(),
 *    which stops the program with a message for a double free or for any
 *    other arena address that is no block (ucma's policy for bad input);
 *  - any other address of ucma's (ucma_addr_is_ours(): a movable object,
 *    a ucma_alloc() buffer of the program's, inside one) is ucma_free()'s
 *    and ucma_realloc()'s to report, with a message naming what lies
 *    there; glibc would crash on it, or unmap part of the arena;
 *  - anything else is foreign: glibc's allocator made it (ld.so before the
 *    interposition took effect, or a caller of __libc_malloc), and glibc
 *    gets it back through __libc_free() and __libc_realloc(), or it is
 *    moved into ucma on realloc; bad foreign pointers meet glibc's checks.
 *
 * Start-up: the first call can come from ld.so or libc before any
 * constructor ran, even before libc set up the environment.  Nothing here
 * allocates or calls dlsym() on those paths: ucma_malloc() brings the
 * library up itself and tolerates re-entry while it does.  The threshold is
 * read from the environment lazily and without allocating, and only once
 * libc has the environment in place.  The one use of dlsym(), finding
 * glibc's malloc_usable_size(), happens on first need for a foreign pointer,
 * long after start-up; its own allocations come back here harmlessly.
 *
 * Locking: none.  This layer holds no lock and takes none; its only state
 * is the threshold (written idempotently, relaxed atomics, read by one
 * comparison on malloc's fast path), a flag that is
 * set once the first contiguous buffer exists, the cached address of
 * glibc's malloc_usable_size(), and a per-thread flag that keeps ucma_alloc()
 * from re-entering itself through malloc.  fork() is covered by the
 * handlers libucma registers.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ucma.h"
#include "malloc_fast.h"
#include "malloc_hooks.h"

/* glibc's own allocator, exported by libc.so.6 under these names. */
extern void __libc_free(void *ptr);
extern void *__libc_realloc(void *ptr, size_t size);

/* Defined here; older or newer glibc headers may not declare them. */
void cfree(void *ptr);
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);

extern char **environ;

#define PRELOAD_EXPORT __attribute__((visibility("default")))
#define PRELOAD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PRELOAD_LIKELY(x) __builtin_expect(!!(x), 1)

/* ucma_alloc() buffers start at least on a 4 KiB page. */
#define CONTIG_ALIGN ((uintptr_t)4096)
/* Largest UCMA_PRELOAD_CONTIG_MIN that ucma accepts (config.c). */
#define CONTIG_MIN_MAX ((uint64_t)1 << 40)
/* glibc's MAX_FAST_SIZE: mallopt(M_MXFAST) refuses larger values. */
#define MXFAST_MAX (80 * sizeof(size_t) / 4)

static size_t page_size(void)
{
	static _Atomic size_t cached;
	size_t ps = atomic_load_explicit(&cached, memory_order_relaxed);

	if (PRELOAD_UNLIKELY(!ps)) {
		long v = sysconf(_SC_PAGESIZE);	/* reads the auxv copy, no allocation */

		ps = v > 0 ? (size_t)v : 4096;
		atomic_store_explicit(&cached, ps, memory_order_relaxed);
	}
	return ps;
}

/* ------------------------------------------------------------------------ */
/* UCMA_PRELOAD_CONTIG_MIN                                                   */
/* ------------------------------------------------------------------------ */

/* The smallest request served by ucma_alloc(): SIZE_MAX when the feature
 * is off, 0 until the environment was read (so that one comparison on the
 * malloc fast path sends both the unread and the qualifying case to the
 * slow path). */
static _Atomic size_t contig_threshold;
/* The same for malloc()'s fast path (malloc_fast.h), which takes the
 * requests below it: the smaller of the threshold and UCMA_SMALL_MAX + 1,
 * 0 until the environment was read. */
static _Atomic size_t small_below;
static _Atomic bool contig_used;	/* some contiguous buffer was handed out */
static __thread bool contig_busy;	/* this thread is inside ucma_alloc() */

/* Does a request of @size bytes stay in the malloc family without a look
 * at the settings?  The fast-path test of malloc(), calloc() and
 * realloc(). */
static inline bool below_contig(size_t size)
{
	return size < atomic_load_explicit(&contig_threshold, memory_order_relaxed);
}

/*
 * Parse @len bytes at @s as a size the way ucma does (decimal digits, then
 * an optional K, M, G or T, then an optional B or iB).  Returns true and
 * stores the size in @out when the text is valid and within ucma's range.
 */
static bool parse_size(const char *s, size_t len, size_t *out)
{
	const char *end = s + len;
	uint64_t v = 0;
	unsigned shift = 0;

	if (s == end || *s < '0' || *s > '9')
		return false;
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > CONTIG_MIN_MAX)
			return false;	/* out of range whatever the unit */
	}
	if (s < end) {
		switch (*s) {
		case 'k': case 'K': shift = 10; s++; break;
		case 'm': case 'M': shift = 20; s++; break;
		case 'g': case 'G': shift = 30; s++; break;
		case 't': case 'T': shift = 40; s++; break;
		}
	}
	if (shift && end - s == 2 && (s[0] == 'i' || s[0] == 'I') &&
	    (s[1] == 'b' || s[1] == 'B'))
		s += 2;
	else if (end - s == 1 && (*s == 'b' || *s == 'B'))
		s++;
	if (s != end || v > (CONTIG_MIN_MAX >> shift))
		return false;
	*out = (size_t)(v << shift);
	return true;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/*
 * The threshold in effect: UCMA_PRELOAD_CONTIG_MIN, then the key
 * preload_contig_min of UCMA_CONF (later settings win, as in config.c).
 * A bad value keeps the earlier one; config.c prints the message for it.
 * secure_getenv() neither allocates nor trusts a set-ID program's
 * environment, like the rest of ucma.
 */
static size_t contig_min_parse(void)
{
	static const char key[] = "preload_contig_min";
	const char *s, *conf;
	size_t min = 0, v;

	s = secure_getenv("UCMA_PRELOAD_CONTIG_MIN");
	if (s && parse_size(s, strlen(s), &v))
		min = v;
	conf = secure_getenv("UCMA_CONF");
	while (conf && *conf) {
		size_t len = strcspn(conf, ","), klen;
		const char *item = conf, *end = conf + len, *eq;

		conf = *end ? end + 1 : end;
		while (item < end && is_blank(*item))
			item++;
		while (end > item && is_blank(end[-1]))
			end--;
		eq = memchr(item, '=', (size_t)(end - item));
		if (!eq)
			continue;
		klen = (size_t)(eq - item);
		while (klen && is_blank(item[klen - 1]))
			klen--;
		/* Any case, as config.c matches the keys (and reports them in
		 * effect). */
		if (klen != sizeof(key) - 1 || strncasecmp(item, key, klen) != 0)
			continue;
		for (eq++; eq < end && is_blank(*eq); eq++)
			;
		if (parse_size(eq, (size_t)(end - eq), &v))
			min = v;
	}
	return min;
}

/*
 * The first look at the threshold: read the settings once the
 * environment is there.  Out of line, so that contig_min() below is a
 * load and a test: with the parsing inlined, the compiler saved six
 * registers on every call before it looked (23 instructions a realloc()).
 */
static __attribute__((noinline, cold)) size_t contig_min_first(void)
{
	size_t min;

	/*
	 * Before libc's initialisation the environment is not there yet and
	 * secure_getenv() would answer "unset": serve such early requests
	 * from the malloc family and decide later.
	 */
	if (!environ)
		return 0;
	min = contig_min_parse();
	atomic_store_explicit(&contig_threshold, min ? min : SIZE_MAX, memory_order_relaxed);
	atomic_store_explicit(&small_below, min && min <= UCMA_SMALL_MAX ? min : UCMA_SMALL_MAX + 1,
			      memory_order_relaxed);
	return min;
}

/* The contiguous threshold in bytes, 0 when off. */
static inline size_t contig_min(void)
{
	size_t t = atomic_load_explicit(&contig_threshold, memory_order_relaxed);

	if (PRELOAD_LIKELY(t))
		return t == SIZE_MAX ? 0 : t;
	return contig_min_first();
}

/*
 * A contiguous buffer for a request of @size bytes, or NULL (errno
 * untouched) so that the caller falls back to the malloc family.  The
 * per-thread flag stops a malloc() made inside ucma_alloc() from coming
 * back here.
 */
static void *contig_alloc(size_t size, unsigned flags)
{
	int saved = errno;
	void *p;

	if (contig_busy)
		return NULL;
	contig_busy = true;
	p = ucma_alloc_for_malloc(size, flags);
	contig_busy = false;
	if (!p) {
		errno = saved;
		return NULL;
	}
	atomic_store_explicit(&contig_used, true, memory_order_relaxed);
	return p;
}

/*
 * The size of the contiguous buffer at @ptr that malloc() made, or 0 when
 * @ptr is not one (a buffer of the program's own ucma_alloc() call is
 * not: free() reports it).  Costs nothing until the first such buffer
 * exists; the page test spares the lookup for most other pointers.
 * errno is left alone.
 */
static size_t contig_size(const void *ptr)
{
	if (!atomic_load_explicit(&contig_used, memory_order_relaxed) ||
	    ((uintptr_t)ptr & (CONTIG_ALIGN - 1)))
		return 0;
	return ucma_malloc_contig_size(ptr);
}

/* ------------------------------------------------------------------------ */
/* Foreign pointers                                                          */
/* ------------------------------------------------------------------------ */

typedef size_t (*usable_size_fn)(void *);

/*
 * glibc's malloc_usable_size(), which it exports under no other name.
 * Looked up on first need only: a foreign pointer exists only once glibc's
 * allocator ran, never while this library starts.  Returns NULL if glibc
 * does not have it.
 */
static usable_size_fn libc_usable_size_fn(void)
{
	static _Atomic(usable_size_fn) cached;
	static _Atomic bool looked;
	usable_size_fn fn = atomic_load_explicit(&cached, memory_order_acquire);

	if (fn || atomic_load_explicit(&looked, memory_order_acquire))
		return fn;
	*(void **)&fn = dlsym(RTLD_NEXT, "malloc_usable_size");
	if (fn == (usable_size_fn)malloc_usable_size)
		fn = NULL;	/* never call ourselves */
	atomic_store_explicit(&cached, fn, memory_order_release);
	atomic_store_explicit(&looked, true, memory_order_release);
	return fn;
}

/*
 * Move a foreign block into ucma: allocate, copy what the old block held
 * (as far as it fits), hand the old one back to glibc.  Without glibc's
 * usable size, let glibc resize its own block instead; the result is then
 * foreign too, which every entry point handles.
 */
static void *foreign_realloc(void *ptr, size_t size)
{
	usable_size_fn usable;
	size_t old;
	void *p;

	/* Memory of ucma's that is no malloc block (a movable object, a
	 * ucma_alloc() buffer, inside one): ucma_realloc() says which. */
	if (ucma_addr_is_ours(ptr))
		return ucma_realloc(ptr, size);
	usable = libc_usable_size_fn();
	if (!usable)
		return __libc_realloc(ptr, size);
	old = usable(ptr);
	p = malloc(size);
	if (!p)
		return NULL;	/* the old block stays valid, as realloc() promises */
	memcpy(p, ptr, old < size ? old : size);
	__libc_free(ptr);
	return p;
}

/* ------------------------------------------------------------------------ */
/* The interface                                                             */
/* ------------------------------------------------------------------------ */

/* A request that malloc()'s fast path did not take: a large one, one at
 * or above the threshold, or one made before the threshold was read
 * (maybe a contiguous buffer). */
static __attribute__((noinline)) void *malloc_contig(size_t size)
{
	size_t min = contig_min();

	if (min && size >= min) {
		void *p = contig_alloc(size, 0);

		if (p)
			return p;
	}
	return ucma_malloc(size);
}

/* ucma_malloc()'s own fast path, inlined: one comparison decides both
 * "small" and "below the contiguous threshold". */
PRELOAD_EXPORT void *malloc(size_t size)
{
	return ucma_malloc_fast(size, atomic_load_explicit(&small_below, memory_order_relaxed),
				malloc_contig);
}

static __attribute__((noinline)) void *calloc_slow(size_t nmemb, size_t size)
{
	size_t total, min;

	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	min = contig_min();
	if (PRELOAD_UNLIKELY(min && total >= min)) {
		void *p = contig_alloc(total, UCMA_ALLOC_ZERO);

		if (p)
			return p;
	}
	return ucma_calloc(nmemb, size);
}

/* As malloc(): below the contiguous threshold, one tail call; the rest,
 * the first look at the settings included, in calloc_slow(). */
PRELOAD_EXPORT void *calloc(size_t nmemb, size_t size)
{
	size_t total;

	if (PRELOAD_LIKELY(!__builtin_mul_overflow(nmemb, size, &total) && below_contig(total)))
		return ucma_calloc(nmemb, size);
	return calloc_slow(nmemb, size);
}

/*
 * A pointer that is no block of the malloc family: a contiguous buffer
 * goes back to its area, anything else to glibc.  A contiguous buffer's
 * pages belong to no slab and no large block, so the malloc family's fast
 * path never takes one for its own, and its slow path hands it here.
 */
static void free_not_family(void *ptr)
{
	int saved;

	if (!contig_size(ptr)) {
		/* Any other address of ucma's gets ucma's message, which
		 * names what lies there; glibc would crash on it, or unmap
		 * part of the arena given the right bytes before it. */
		if (ucma_addr_is_ours(ptr))
			ucma_free(ptr);
		else
			__libc_free(ptr);
		return;
	}
	saved = errno;
	ucma_release_for_malloc(ptr);
	errno = saved;
}

/*
 * free() leaves errno alone, as glibc's does since 2.33 (and POSIX asks):
 * ucma_free_or() and __libc_free() promise it, free_not_family() saves it
 * around ucma_release_for_malloc().  The malloc family's blocks, the
 * common case, are freed before anything else is asked.
 */
PRELOAD_EXPORT void free(void *ptr)
{
	ucma_free_or(ptr, free_not_family);
}

PRELOAD_EXPORT void cfree(void *ptr)
{
	free(ptr);
}

PRELOAD_EXPORT void free_sized(void *ptr, size_t size)
{
	(void)size;
	free(ptr);
}

PRELOAD_EXPORT void free_aligned_sized(void *ptr, size_t alignment, size_t size)
{
	(void)alignment;
	(void)size;
	free(ptr);
}

/*
 * A contiguous buffer keeps its place while the new size still fills more
 * than half of it; otherwise its contents move to a fresh allocation,
 * which is contiguous again when the new size qualifies.
 */
static void *contig_realloc(void *ptr, size_t old, size_t size)
{
	void *p;

	if (size <= old && size > old / 2)
		return ptr;
	p = malloc(size);
	if (!p)
		return NULL;
	memcpy(p, ptr, old < size ? old : size);
	ucma_release_for_malloc(ptr);
	return p;
}

/*
 * A block of the malloc family that grows to the contiguous threshold
 * becomes a contiguous buffer, as a malloc() of that size would; a program
 * that builds its big buffers with realloc() gets them from a CMA area too.
 */
static void *owned_realloc(void *ptr, size_t size)
{
	size_t min = contig_min(), old;
	void *p;

	if (PRELOAD_UNLIKELY(min && size >= min)) {
		old = ucma_usable_size(ptr);
		if (old < size) {
			p = contig_alloc(size, 0);
			if (p) {
				memcpy(p, ptr, old);
				ucma_free(ptr);
				return p;
			}
		}
	}
	return ucma_realloc(ptr, size);
}

static __attribute__((noinline)) void *realloc_slow(void *ptr, size_t size)
{
	size_t old;

	if (!ptr)
		return malloc(size);
	if (size == 0) {
		/* glibc frees and returns NULL (REALLOC_ZERO_BYTES_FREES) */
		free(ptr);
		return NULL;
	}
	old = contig_size(ptr);
	if (PRELOAD_UNLIKELY(old))
		return contig_realloc(ptr, old, size);
	if (ucma_owns(ptr))
		return owned_realloc(ptr, size);
	return foreign_realloc(ptr, size);
}

/*
 * The common case first: no contiguous buffer was ever handed out (so
 * @ptr is none) and the new size is below the contiguous threshold (so
 * an owned block stays in the malloc family), and then the ownership test
 * and the reallocation are one tail call.  The threshold is 0 until its
 * first look, which realloc_slow() makes through owned_realloc().  The
 * rest, realloc_slow(), is what realloc() always did.  With
 * ucma_realloc_or() this costs 26 instructions a call of bench_malloc's
 * `realloc` on top of ucma_realloc() (callgrind), against 68 before.
 */
PRELOAD_EXPORT void *realloc(void *ptr, size_t size)
{
	if (PRELOAD_LIKELY(ptr && size &&
			   !atomic_load_explicit(&contig_used, memory_order_relaxed) &&
			   below_contig(size)))
		return ucma_realloc_or(ptr, size, foreign_realloc);
	return realloc_slow(ptr, size);
}

PRELOAD_EXPORT void *reallocarray(void *ptr, size_t nmemb, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(ptr, total);
}

/*
 * The aligned forms follow glibc, as ucma's own do: memalign() rounds an
 * alignment that is no power of two up to one; aligned_alloc() refuses it
 * with EINVAL (C23, glibc 2.38); posix_memalign() also refuses one smaller
 * than a pointer and returns its error, leaving errno and *memptr alone.
 */
PRELOAD_EXPORT void *memalign(size_t alignment, size_t size)
{
	return ucma_memalign(alignment, size);
}

PRELOAD_EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
	return ucma_aligned_alloc(alignment, size);
}

PRELOAD_EXPORT int posix_memalign(void **memptr, size_t alignment, size_t size)
{
	return ucma_posix_memalign(memptr, alignment, size);
}

PRELOAD_EXPORT void *valloc(size_t size)
{
	return ucma_aligned_alloc(page_size(), size);
}

/* pvalloc(): whole pages, at least one. */
PRELOAD_EXPORT void *pvalloc(size_t size)
{
	size_t ps = page_size(), rounded;

	if (__builtin_add_overflow(size, ps - 1, &rounded)) {
		errno = ENOMEM;
		return NULL;
	}
	rounded &= ~(ps - 1);
	return ucma_aligned_alloc(ps, rounded ? rounded : ps);
}

PRELOAD_EXPORT size_t malloc_usable_size(void *ptr)
{
	usable_size_fn usable;
	size_t n;

	if (!ptr)
		return 0;
	n = contig_size(ptr);
	if (n)
		return n;
	if (ucma_owns(ptr) || ucma_addr_is_ours(ptr))
		return ucma_usable_size(ptr);
	usable = libc_usable_size_fn();
	return usable ? usable(ptr) : 0;
}

/* 1 if memory went back to the system, 0 otherwise, as glibc. */
PRELOAD_EXPORT int malloc_trim(size_t pad)
{
	(void)pad;
	return ucma_trim();
}

/*
 * glibc's parameters tune its own heap, which ucma does not use: accept
 * them, and refuse only what glibc refuses (an M_MXFAST beyond its
 * largest fast bin).  Unknown parameters succeed there too.
 */
PRELOAD_EXPORT int mallopt(int param, int value)
{
	if (param == M_MXFAST && (value < 0 || (size_t)value > MXFAST_MAX))
		return 0;
	return 1;
}

/*
 * mallinfo2() in ucma's terms: "arena" is what the malloc family holds of
 * the arena, "hblks" and "hblkhd" its page-run blocks and what it mapped
 * outside the arena (freed blocks kept there for reuse included, as they
 * are in "fordblks"), "uordblks" what is allocated, "fordblks" what it
 * holds but has not handed out, what threads keep (parked blocks and the
 * free room of their slabs) included, which alone is also "fsmblks".
 * glibc's other fields have no counterpart and stay 0.
 */
PRELOAD_EXPORT struct mallinfo2 mallinfo2(void)
{
	struct ucma_malloc_info info;
	struct mallinfo2 mi;
	int saved = errno;
	size_t held;

	memset(&mi, 0, sizeof(mi));
	if (ucma_malloc_info(&info) != 0) {
		errno = saved;
		return mi;
	}
	held = info.active + info.overflow;
	mi.arena = info.active;
	mi.hblks = info.large_allocs;
	mi.hblkhd = info.overflow;
	mi.uordblks = info.allocated;
	mi.fsmblks = info.cached;
	mi.fordblks = held > info.allocated ? held - info.allocated : 0;
	return mi;
}

/* The old interface truncates to int, as glibc's does. */
PRELOAD_EXPORT struct mallinfo mallinfo(void)
{
	struct mallinfo2 m2 = mallinfo2();
	struct mallinfo mi;

	mi.arena = (int)m2.arena;
	mi.ordblks = (int)m2.ordblks;
	mi.smblks = (int)m2.smblks;
	mi.hblks = (int)m2.hblks;
	mi.hblkhd = (int)m2.hblkhd;
	mi.usmblks = (int)m2.usmblks;
	mi.fsmblks = (int)m2.fsmblks;
	mi.uordblks = (int)m2.uordblks;
	mi.fordblks = (int)m2.fordblks;
	mi.keepcost = (int)m2.keepcost;
	return mi;
}

PRELOAD_EXPORT void malloc_stats(void)
{
	ucma_stats_print(stderr);
}
