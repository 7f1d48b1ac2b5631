/*
 * stress_handles.c - movable objects under concurrent migration.
 *
 * Objects are of two kinds.  "Shared" objects are written once and then
 * only read: reader threads verify them under ucma_read_lock() while they
 * are being migrated underneath.  "Owned" objects each have one writer
 * thread that rewrites them only under a pin, checking the previous
 * contents first, and sometimes resizes or replaces them.  Meanwhile
 * another thread loops ucma_alloc()/ucma_release() of 1-16 MiB buffers
 * (each filled and verified), which forces the objects in its runs to
 * migrate, and one thread takes long-term pins.  Any corrupted byte fails.
 *
 * Runs UCMA_STRESS_SECONDS seconds (default 10).
 *
 * SPDX-License-Identifier: MIT
 */
#include "internal.h"
#include "tap.h"
#include "testutil.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#define NSHARED 1500
#define NOWNED_PER_WRITER 400
#define NWRITERS 2
#define NREADERS 2

struct hdr {
	uint64_t seed;		/* content is tu_fill(seed) over the payload */
	uint64_t len;		/* payload bytes after the header */
};

static ucma_handle_t shared[NSHARED];
static _Atomic bool stop;
static _Atomic uint64_t errors, reads, writes, contig_ok, contig_busy, longterm;

static size_t pick_size(uint64_t *s)
{
	static const size_t sizes[] = { 48, 100, 500, 2000, 4000, 9000, 30000, 70000 };

	return sizes[tu_rand(s) % UCMA_ARRAY_SIZE(sizes)];
}

static ucma_handle_t make_object(size_t size, uint64_t seed)
{
	ucma_handle_t h = ucma_halloc(size, 0);
	struct hdr *p;

	if (!h)
		return 0;
	p = ucma_pin(h, 0);
	p->seed = seed;
	p->len = size - sizeof(*p);
	tu_fill(p + 1, p->len, seed);
	ucma_unpin(h);
	return h;
}

static bool check_object(const struct hdr *p, size_t size)
{
	return p->len == size - sizeof(*p) && tu_check(p + 1, p->len, p->seed);
}

static void *reader(void *arg)
{
	uint64_t s = (uintptr_t)arg;

	while (!atomic_load(&stop)) {
		int i = (int)(tu_rand(&s) % NSHARED);
		const struct hdr *p;

		ucma_read_lock();
		p = ucma_deref(shared[i]);
		if (!p || !check_object(p, ucma_hsize(shared[i])))
			atomic_fetch_add(&errors, 1);
		ucma_read_unlock();
		atomic_fetch_add(&reads, 1);
	}
	return NULL;
}

static void *writer(void *arg)
{
	uint64_t s = 1000 + (uintptr_t)arg;
	ucma_handle_t own[NOWNED_PER_WRITER];

	for (int i = 0; i < NOWNED_PER_WRITER; i++)
		own[i] = make_object(pick_size(&s), tu_rand(&s));
	while (!atomic_load(&stop)) {
		int i = (int)(tu_rand(&s) % NOWNED_PER_WRITER);
		uint64_t op = tu_rand(&s) % 16;
		struct hdr *p;

		if (!own[i]) {
			own[i] = make_object(pick_size(&s), tu_rand(&s));
			continue;
		}
		if (op == 0) {
			/* replace */
			p = ucma_pin(own[i], 0);
			if (!p || !check_object(p, ucma_hsize(own[i])))
				atomic_fetch_add(&errors, 1);
			if (p)
				ucma_unpin(own[i]);
			if (ucma_hfree(own[i]) != 0)
				atomic_fetch_add(&errors, 1);
			own[i] = make_object(pick_size(&s), tu_rand(&s));
		} else if (op == 1) {
			/* resize, then rewrite to the new size */
			size_t ns = pick_size(&s);

			if (ucma_hrealloc(own[i], ns) == 0) {
				p = ucma_pin(own[i], 0);
				if (!p) {
					atomic_fetch_add(&errors, 1);
					continue;
				}
				p->len = ns - sizeof(*p);
				p->seed = tu_rand(&s);
				tu_fill(p + 1, p->len, p->seed);
				ucma_unpin(own[i]);
			}
		} else {
			/* verify, then rewrite in place under the pin */
			p = ucma_pin(own[i], 0);
			if (!p) {
				atomic_fetch_add(&errors, 1);
				continue;
			}
			if (!check_object(p, ucma_hsize(own[i])))
				atomic_fetch_add(&errors, 1);
			p->seed = tu_rand(&s);
			tu_fill(p + 1, p->len, p->seed);
			ucma_unpin(own[i]);
		}
		atomic_fetch_add(&writes, 1);
	}
	for (int i = 0; i < NOWNED_PER_WRITER; i++) {
		if (!own[i])
			continue;
		{
			struct hdr *p = ucma_pin(own[i], 0);

			if (!p || !check_object(p, ucma_hsize(own[i])))
				atomic_fetch_add(&errors, 1);
			if (p)
				ucma_unpin(own[i]);
		}
		ucma_hfree(own[i]);
	}
	return NULL;
}

static void *contig(void *arg)
{
	uint64_t s = 77 + (uintptr_t)arg;

	while (!atomic_load(&stop)) {
		size_t size = (1 + tu_rand(&s) % 16) << 20;
		char *b = ucma_alloc(size, 0, 0);

		if (!b) {
			if (errno != EBUSY && errno != ENOMEM)
				atomic_fetch_add(&errors, 1);
			atomic_fetch_add(&contig_busy, 1);
			continue;
		}
		tu_fill(b, size, size);
		if (!tu_check(b, size, size))
			atomic_fetch_add(&errors, 1);
		if (ucma_release(b) != 0)
			atomic_fetch_add(&errors, 1);
		atomic_fetch_add(&contig_ok, 1);
	}
	return NULL;
}

static void *pinner(void *arg)
{
	uint64_t s = 5 + (uintptr_t)arg;

	while (!atomic_load(&stop)) {
		int i = (int)(tu_rand(&s) % NSHARED);
		const struct hdr *p = ucma_pin(shared[i], UCMA_PIN_LONGTERM);

		if (!p) {
			if (errno != EBUSY && errno != ENOMEM)
				atomic_fetch_add(&errors, 1);
			continue;
		}
		if (!check_object(p, ucma_hsize(shared[i])))
			atomic_fetch_add(&errors, 1);
		ucma_unpin(shared[i]);
		atomic_fetch_add(&longterm, 1);
		{
			struct timespec ts = { 0, 2000000 };

			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

int main(void)
{
	struct ucma_config cfg = {
		.arena_size = 128u << 20,
		.cma_size = 64u << 20,
		.hugepages = UCMA_BACKING_NONE,
	};
	const char *env = getenv("UCMA_STRESS_SECONDS");
	int seconds = env ? atoi(env) : 10;
	pthread_t th[NREADERS + NWRITERS + 2];
	int n = 0;
	uint64_t seed = 9, mig = 0, ca = 0;
	char why[256];

	plan_no_plan();
	if (getenv("UCMA_TEST_SANITIZER") && !env)
		seconds = 5;	/* sanitizers are slow; the schedule matters more */
	if (ucma_init(&cfg) != 0)
		bail_out("ucma_init: %s", strerror(errno));
	for (int i = 0; i < NSHARED; i++) {
		shared[i] = make_object(pick_size(&seed), tu_rand(&seed));
		if (!shared[i])
			bail_out("cannot create object %d", i);
	}
	for (int i = 0; i < NREADERS; i++)
		pthread_create(&th[n++], NULL, reader, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < NWRITERS; i++)
		pthread_create(&th[n++], NULL, writer, (void *)(uintptr_t)i);
	pthread_create(&th[n++], NULL, contig, NULL);
	pthread_create(&th[n++], NULL, pinner, NULL);
	sleep((unsigned)seconds);
	atomic_store(&stop, true);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);

	ucma_stat("pgmigrate_success", &mig);
	ucma_stat("cma_alloc_success", &ca);
	diag("%d s: %llu reads, %llu writes, %llu contiguous buffers (%llu refused), "
	     "%llu long-term pins, %llu migrations",
	     seconds, (unsigned long long)reads, (unsigned long long)writes,
	     (unsigned long long)contig_ok, (unsigned long long)contig_busy,
	     (unsigned long long)longterm, (unsigned long long)mig);
	ok(atomic_load(&errors) == 0, "no corrupted byte and no unexpected error (%llu)",
	   (unsigned long long)atomic_load(&errors));
	ok(contig_ok > 0 && ca >= contig_ok, "contiguous buffers were allocated meanwhile");
	ok(mig > 0, "objects were migrated meanwhile");
	{
		int bad = 0;

		ucma_read_lock();
		for (int i = 0; i < NSHARED; i++) {
			const struct hdr *p = ucma_deref(shared[i]);

			bad += !p || !check_object(p, ucma_hsize(shared[i]));
		}
		ucma_read_unlock();
		ok(bad == 0, "every shared object verifies at the end");
	}
	for (int i = 0; i < NSHARED; i++)
		ucma_hfree(shared[i]);
	ucma_defer_drain();
	{
		struct ucma_arena *a = ucma_arena_get();

		ok(ucma_zone_check(&a->zones[0], why, sizeof(why)) == 0 &&
			   ucma_zone_check(&a->zones[1], why, sizeof(why)) == 0,
		   "zone invariants hold after the run");
	}
	return done();
}
