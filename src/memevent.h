/*
 * memevent.h - memory events for device stacks: which ranges of the CMA
 * areas are backed (MAP) and which are about to lose or change their
 * backing (UNMAP).  The public side is ucma_mem_event_register() and
 * ucma_mem_event_unregister() (ucma.h); the producers are frames.c today
 * and the borrowers of frames tomorrow.
 *
 * A producer posts an event with ucma_mem_event_post(), under whatever
 * lock it holds, and later calls ucma_mem_event_deliver() with no ucma
 * lock held.  UNMAP means "about to": post it, deliver, and only then
 * unmap or remap.  MAP comes after the range is backed.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_MEMEVENT_H
#define UCMA_MEMEVENT_H

#include "internal.h"

/*
 * Record @ev for [@addr, @addr + @len) and queue it for the callbacks
 * registered now.  Cheap; takes only the event lock (innermost but for
 * meta.c's), so any caller may post.  The range joins or leaves the set
 * that a late registrant is replayed.
 */
UCMA_INTERNAL void ucma_mem_event_post(enum ucma_mem_event ev, void *addr, size_t len);

/*
 * [@addr, @addr + @len), in the set, was replaced by new memory at the
 * same place (the child of a fork): UNMAP then MAP for the callbacks.
 * The set stays as it was, so with none registered nothing is written
 * (a fork's child would copy the event lock's page for nothing).  The
 * count is read without the lock: a registration racing with the call
 * is replayed the range as mapped, which it is.
 */
UCMA_INTERNAL void ucma_mem_event_post_replaced(void *addr, size_t len);

/*
 * Call the callbacks for every queued event, in order, one event at a
 * time.  The caller holds no ucma lock.  Returns at once when nothing is
 * queued, and when called from inside a callback (the outer delivery goes
 * on with what was posted meanwhile), with a lock of the library held,
 * or inside a read-side section while another thread delivers.  True
 * when every event queued at the call was delivered (by it or another
 * thread): a poster of UNMAP may then change the range.
 */
UCMA_INTERNAL bool ucma_mem_event_deliver(void);

/* Is the calling thread inside a callback?  Then nothing it posts is
 * delivered before the callback returns. */
UCMA_INTERNAL bool ucma_mem_event_in_callback(void);


#endif /* UCMA_MEMEVENT_H */
