/*
 * handle.h - the handle table's entries and the rules for changing them
 * (handle.c), shared with migration (migrate.c) and compaction.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_HANDLE_H
#define UCMA_HANDLE_H

#include "internal.h"

/* Entry state word: pin count in the low bits plus flags. */
#define UCMA_HS_MIGRATING 0x80000000u	/* held exclusively: moved, freed, resized */
#define UCMA_HS_WAITERS   0x40000000u	/* a pinner sleeps on the futex */
#define UCMA_HS_PINS      0x3fffffffu
/* The most pins an object takes (EOVERFLOW past it).  Below the field's
 * capacity by 65535: a pinner adds one before it looks (ucma_pin()), and
 * the additions of pinners that find the limit and take theirs back must
 * not carry into the flags. */
#define UCMA_HS_PIN_MAX   (UCMA_HS_PINS - 0xffffu)

/*
 * struct ucma_hentry - one entry of the handle table.
 *
 * @gen is odd while the entry is live and even while it is free; a handle
 * carries the odd generation it was created with, so a stale handle never
 * matches.
 *
 * @state: a pinner adds one with an atomic fetch-add (a lock xadd on
 * x86, about half the cost of a compare-and-swap on the machine of
 * tests/bench/RESULTS.md, "Handles") and looks at the old
 * value afterwards: when it was MIGRATING, or at UCMA_HS_PIN_MAX, the
 * pinner takes its one back and goes the slow way.  An exclusive holder
 * (a mover, ucma_hfree(), ucma_hrealloc(), ucma_halloc() publishing)
 * swaps 0 for MIGRATING with ucma_entry_grab() (compare-and-swap, so it
 * never holds a pinned entry) and gives it back with
 * ucma_entry_release(), which clears the two flags only: while MIGRATING
 * is set, the count holds nothing but such passing additions, which
 * their pinners take back (ucma_entry_take_back()).  Everything else
 * (unpin, taking back, waiters, the slow pin) is compare-and-swap on an
 * exact value, and nothing takes the count below 0.  An
 * exclusive hold is short and never spans a wait for a grace period or
 * for a lock a reader may hold, so a pinner that sleeps on MIGRATING, even
 * inside a read-side section, always wakes.
 *
 * @gen, @addr and @size are written only by the exclusive holder (or by
 * ucma_halloc() before the entry is live), all three inside one write
 * section of @seq (odd while a write is under way), so a reader without
 * a pin gets a consistent triple with ucma_entry_read().  The stores are
 * releases and the loads acquires: a reader that sees a new address also
 * sees the object copied there, and the generation check after the loads
 * cannot be answered before them (on ARM and POWER as on x86).
 *
 * @next_free is the free-list link, under the table lock.
 */
struct ucma_hentry {
	void *addr;			/* the object: atomic, see above */
	_Atomic uint32_t state;		/* UCMA_HS_* */
	_Atomic uint32_t gen;		/* odd = live */
	size_t size;			/* requested size: atomic, see above */
	uint32_t next_free;		/* free-list link (table lock) */
	_Atomic uint32_t seq;		/* odd while gen/addr/size are written */
};

/* The entry of @index, or NULL when no chunk holds it. */
UCMA_INTERNAL struct ucma_hentry *ucma_handle_entry(uint32_t index);

/*
 * Exclusive holds.  grab: 0 -> MIGRATING; false when pinned or held
 * (state left alone).  A fork waits for every hold to be released before
 * it proceeds (fork.c), so a child never sees an entry held by a thread
 * it does not have.  release: back to 0, waking sleeping pinners.
 */
UCMA_INTERNAL bool ucma_entry_grab(struct ucma_hentry *e);
UCMA_INTERNAL void ucma_entry_release(struct ucma_hentry *e);

/*
 * A pinner takes its one back: its passing addition (ucma_pin()), or a
 * pin it took and will not keep.  Never below 0: an ucma_unpin() without
 * a pin (a program's mistake) may have taken that one already, and a
 * fetch-sub would then turn the count into 0xffffffff, MIGRATING and
 * WAITERS included, which nobody clears: every later pin would sleep for
 * ever.  So such an unpin may steal a pin, as it always could, but never
 * corrupt the flags.
 */
UCMA_INTERNAL void ucma_entry_take_back(struct ucma_hentry *e);

/* Write @addr and @size (the holder's, or halloc's before publication). */
UCMA_INTERNAL void ucma_entry_set(struct ucma_hentry *e, void *addr, size_t size);

/* A consistent snapshot of an entry (handle.c's entry_read()). */
struct ucma_entry_view {
	uint32_t gen;
	void *addr;
	size_t size;
};

#endif /* UCMA_HANDLE_H */
