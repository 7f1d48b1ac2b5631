/*
 * shm.h - layout of the live statistics segment, shared by the library
 * (shm.c, the writer) and the ucmastat tool (the reader).
 *
 * A process using ucma publishes one file, /dev/shm/ucma.<pid>, mode 0600,
 * when asked to (see Requests below), made of three parts:
 *
 *   [struct ucma_shm_header][counters: nr_counters x struct ucma_shm_counter]
 *   [pageblock map: nr_pageblocks bytes]
 *
 * The header's geometry (everything but seq, updates, update_time_ns and
 * answered_request_ns) is written once, before magic; magic is stored
 * last, so a reader that sees the right magic sees a complete layout.  The counters and the map
 * change under a sequence counter (a seqlock): the writer makes seq odd,
 * copies the new values in, and makes it even again; a reader copies the
 * segment and retries when seq was odd or changed meanwhile.  seq is
 * accessed with the GCC __atomic builtins on both sides, so this header
 * needs nothing beyond <stdint.h>.
 *
 * The layout is versioned: a reader refuses a segment whose magic,
 * version or header size it does not know.  Every field has a fixed size
 * and offset; the segment is read only by processes of the same machine,
 * so native byte order is used.
 *
 * Requests.  By default (UCMA_STATS_SHM=request) a process has no segment
 * until a reader asks for one, so a process nobody inspects leaves nothing
 * in /dev/shm however it ends.  A reader asks by setting the modification
 * time of /dev/shm/ucma.<pid>.request to now, creating the file (mode
 * 0600) if needed.  The process notices a modification time it has not
 * answered yet (from its allocation calls at most every 100 ms, its
 * compaction thread's wake-ups, and then a thread of its own that looks
 * every UCMA_SHM_POLL_MS), refreshes the segment, creating it first, and
 * stores that time in answered_request_ns.  The reader waits until
 * answered_request_ns is at least the time its request carries (both
 * times are the file's, so no two clocks are compared), then copies the
 * segment.  While requests keep coming the process keeps answering; once
 * none has come for UCMA_SHM_LEASE_S seconds it removes the segment and its
 * thread ends.  A reader that watches renews its request at least every
 * UCMA_SHM_RENEW_S seconds.
 *
 * The process honours only a regular file owned by its own user or by
 * root, and never writes or removes it: readers remove it.  Several
 * readers share one request file; each holds a shared flock(2) on it while
 * it reads, and the last one (the one that gets an exclusive lock without
 * waiting) removes it.  A reader that opened the file checks that the name
 * still points at it after taking the lock, or starts again.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef UCMA_SHM_H
#define UCMA_SHM_H

#include <stdint.h>

#define UCMA_SHM_DIR        "/dev/shm"
#define UCMA_SHM_PREFIX     "ucma."		/* followed by the decimal pid */
#define UCMA_SHM_MAGIC      0x5441545341434d55ull	/* "UCMASTAT" */
#define UCMA_SHM_VERSION    2u
#define UCMA_SHM_REQUEST_SUFFIX ".request"	/* after the pid: the request file */
#define UCMA_SHM_LEASE_S    10	/* answers go on this long after a request */
#define UCMA_SHM_RENEW_S    2	/* a watching reader renews this often */
#define UCMA_SHM_POLL_MS    20	/* the answering thread looks this often */
#define UCMA_SHM_NAME_MAX   52		/* counter names, NUL included */
#define UCMA_SHM_RANGE_NAME 32		/* zone and area names, NUL included */
#define UCMA_SHM_MAX_ZONES  2
#define UCMA_SHM_MAX_AREAS  16

/* Counter flags. */
#define UCMA_SHM_CTR_EVENT  0x1u	/* counts events: only ever grows */
#define UCMA_SHM_CTR_SIGNED 0x2u	/* the value is an int64_t */

/*
 * One byte per pageblock: the state in the low four bits, the share of
 * its pages in use in the high four bits (sixteenths, rounded up so that
 * a pageblock with any page in use never reads 0; 15 means 15/16 or more).
 */
enum ucma_shm_pb_state {
	UCMA_SHM_PB_FREE = 0,		/* NORMAL zone, every page free */
	UCMA_SHM_PB_UNMOVABLE,		/* NORMAL zone, unmovable pageblock in use */
	UCMA_SHM_PB_MOVABLE,		/* NORMAL zone, movable pageblock in use */
	UCMA_SHM_PB_CMA_FREE,		/* CMA area, every page free */
	UCMA_SHM_PB_CMA_LENT,		/* CMA area, lent to movable objects */
	UCMA_SHM_PB_CONTIG,		/* CMA area, holds a ucma_alloc() buffer */
	UCMA_SHM_PB_ISOLATED,		/* being emptied for a contiguous allocation */
	UCMA_SHM_PB_NR
};

#define UCMA_SHM_PB_STATE(b) ((unsigned)(b) & 0x0fu)
#define UCMA_SHM_PB_USED(b)  ((unsigned)(b) >> 4)

struct ucma_shm_counter {
	char name[UCMA_SHM_NAME_MAX];	/* NUL-terminated */
	uint32_t flags;			/* UCMA_SHM_CTR_* */
	uint64_t value;
};

/* A zone or a CMA area: pageblocks [start_pb, end_pb) of the arena. */
struct ucma_shm_range {
	char name[UCMA_SHM_RANGE_NAME];
	uint32_t start_pb;
	uint32_t end_pb;
	char backing[16];		/* "hugetlb-1G", "hugetlb-2M", "thp", "none" */
};

struct ucma_shm_header {
	uint64_t magic;			/* UCMA_SHM_MAGIC, stored last */
	uint32_t version;		/* UCMA_SHM_VERSION */
	uint32_t header_size;		/* sizeof(struct ucma_shm_header) */
	uint64_t total_size;		/* bytes of the whole segment */
	uint64_t seq;			/* odd while the owner writes */
	int32_t pid;			/* the owner */
	uint32_t page_size;		/* bytes per page */
	uint32_t pageblock_pages;	/* pages per pageblock */
	uint32_t nr_pageblocks;		/* bytes in the map */
	uint64_t arena_size;		/* bytes */
	uint64_t start_time;		/* owner's start, clock ticks after boot */
	char comm[16];			/* owner's command name */
	uint32_t nr_zones;
	uint32_t nr_areas;
	struct ucma_shm_range zones[UCMA_SHM_MAX_ZONES];
	struct ucma_shm_range areas[UCMA_SHM_MAX_AREAS];
	uint32_t nr_counters;
	uint32_t counters_offset;	/* from the start of the segment */
	uint32_t map_offset;
	uint32_t reserved0;
	uint64_t updates;		/* refreshes so far */
	uint64_t update_time_ns;	/* CLOCK_REALTIME of the last refresh */
	uint64_t answered_request_ns;	/* request file mtime this refresh answers */
	uint64_t reserved[7];
};

_Static_assert(sizeof(struct ucma_shm_counter) == 64, "counter slots are 64 bytes");
_Static_assert(sizeof(struct ucma_shm_range) == 56, "ranges are 56 bytes");
_Static_assert(sizeof(struct ucma_shm_header) % 8 == 0, "header keeps 8-byte alignment");

#endif /* UCMA_SHM_H */
