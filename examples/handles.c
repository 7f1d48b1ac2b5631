/*
 * handles.c - movable objects: pin to write, RCU to read, while compaction
 * moves them underneath.
 *
 * A movable object is named by a handle, not an address: ucma may move it
 * to make room for contiguous buffers.  To write, pin it (it cannot move
 * while pinned); to read without any atomic write, enter a read-side
 * section and dereference the handle; the address is valid until
 * ucma_read_unlock().  One thread here compacts continuously while the
 * main thread reads and writes.
 *
 * Build: cc handles.c $(pkg-config --cflags --libs ucma) -pthread
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <ucma.h>

#define N 1000

struct record {
	unsigned id;
	unsigned version;
	char text[120];
};

static atomic_bool done;

static void *compactor(void *arg)
{
	unsigned long *passes = arg;

	while (!atomic_load(&done)) {
		if (ucma_compact(UCMA_COMPACT_SYNC_LIGHT) == 0)
			(*passes)++;
	}
	return NULL;
}

int main(void)
{
	static ucma_handle_t h[N];
	unsigned long passes = 0, bad = 0;
	uint64_t moved0 = 0, moved1 = 0;
	pthread_t t;

	for (unsigned i = 0; i < N; i++) {
		struct record *r;

		h[i] = ucma_halloc(sizeof(struct record), UCMA_H_ZERO);
		if (!h[i]) {
			fprintf(stderr, "handles: ucma_halloc: %s\n", strerror(errno));
			return 1;
		}
		r = ucma_pin(h[i], 0);		/* pinned: safe to write */
		r->id = i;
		snprintf(r->text, sizeof(r->text), "record %u", i);
		ucma_unpin(h[i]);
	}
	/* Free every other record: holes for compaction to close. */
	for (unsigned i = 0; i < N; i += 2)
		ucma_hfree(h[i]);

	ucma_stat("pgmigrate_success", &moved0);
	pthread_create(&t, NULL, compactor, &passes);
	for (unsigned round = 0; round < 200; round++) {
		for (unsigned i = 1; i < N; i += 2) {
			const struct record *r;
			struct record *w;

			ucma_read_lock();		/* read: no atomic write at all */
			r = ucma_deref(h[i]);
			if (!r || r->id != i || r->version != round)
				bad++;
			ucma_read_unlock();

			w = ucma_pin(h[i], 0);	/* write: under a pin */
			w->version++;
			ucma_unpin(h[i]);
		}
	}
	atomic_store(&done, true);
	pthread_join(t, NULL);
	ucma_stat("pgmigrate_success", &moved1);
	printf("handles: %lu compaction passes moved %llu objects while 500 records were read "
	       "and written 200 times each; %lu inconsistencies\n",
	       passes, (unsigned long long)(moved1 - moved0), bad);
	for (unsigned i = 1; i < N; i += 2)
		ucma_hfree(h[i]);
	return bad != 0;
}
