/*
 * phys_contig.c - a physically contiguous buffer larger than a huge page.
 *
 * As root with a hugetlb pool, ucma maps the frames of each CMA area in
 * physical-address order at start-up (DPDK's legacy memory mode does the
 * same), so physically consecutive 2 MiB frames are virtually consecutive
 * and UCMA_ALLOC_PHYS_CONTIG can hand out runs of several frames.  This
 * program asks for an 8 MiB physically contiguous buffer and prints its
 * physical runs (ucma_vtophys), with what the statistics say about the
 * area: its file, its frames, its longest physically contiguous run.
 *
 * Without root (frame numbers are hidden) or without hugetlb pages, it
 * says why it cannot and exits 0: that is a fact of the machine, not a
 * failure.
 *
 * Try: echo 128 > /proc/sys/vm/nr_hugepages
 *      UCMA_CMA_SIZE=128M UCMA_VERBOSE=1 ./phys_contig
 *
 * Build: cc phys_contig.c $(pkg-config --cflags --libs ucma)
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <ucma.h>

#define WANT (8u << 20)

static uint64_t stat_or_zero(const char *name)
{
	uint64_t v = 0;

	ucma_stat(name, &v);
	return v;
}

int main(void)
{
	static const char *const files[] = { "anonymous", "shmem", "hugetlb" };
	uint64_t kind, run;
	char *buf;
	int bad = 0;

	buf = ucma_alloc(WANT, 0, UCMA_ALLOC_PHYS_CONTIG);
	kind = stat_or_zero("cma_default_file");
	run = stat_or_zero("cma_default_phys_run_max");
	printf("phys_contig: CMA area \"default\": %s file, backing %s, %" PRIu64
	       " frames of %" PRIu64 " KiB, longest physically contiguous run %" PRIu64 " KiB\n",
	       files[kind < 3 ? kind : 0], ucma_backing_name("cma") ? ucma_backing_name("cma") : "?",
	       stat_or_zero("cma_default_frames"), stat_or_zero("cma_default_frame_size") >> 10,
	       run >> 10);
	if (!buf) {
		int err = errno;

		printf("phys_contig: no physically contiguous %u MiB buffer: %s\n", WANT >> 20,
		       strerror(err));
		if (err == ENOTSUP)
			printf("  physical addresses are hidden from this process: run it as root\n");
		else if (kind != 2)
			printf("  the area is not on hugetlb pages: reserve some, e.g.\n"
			       "  echo 128 > /proc/sys/vm/nr_hugepages\n");
		else
			printf("  no run of frames is that long on this machine now\n");
		return 0;
	}
	printf("phys_contig: %u MiB at %p, physically:\n", WANT >> 20, (void *)buf);
	for (size_t off = 0; off < WANT;) {
		uint64_t phys, check;
		size_t len;

		if (ucma_vtophys(buf + off, &phys, &len) != 0) {
			printf("  ucma_vtophys: %s\n", strerror(errno));
			bad = 1;
			break;
		}
		if (len > WANT - off)
			len = WANT - off;
		printf("  +%-8zu %8zu KiB at %#" PRIx64 "\n", off, len >> 10, phys);
		/* The whole buffer must be one run: say so if it is not. */
		if (ucma_virt2phys(buf + off + len - 1, &check) != 0 || check != phys + len - 1)
			bad = 1;
		if (off == 0 && len < WANT)
			bad = 1;
		off += len;
	}
	printf("phys_contig: %s\n", bad ? "NOT physically contiguous" : "one physical run");
	ucma_release(buf);
	return bad;
}
