/*
 * device_buffer.c - a contiguous buffer handed to a real kernel DMA path.
 *
 * The buffer comes from ucma_alloc() (a CMA area: 2 MiB hugetlb pages when
 * the pool has them), is registered with io_uring as a fixed buffer (the
 * kernel pins its pages for the device), and is filled by an O_DIRECT read
 * of a file, which the block layer performs by DMA straight into it.
 *
 * A device stack must know which memory it may register and when to drop
 * a registration: the program registers a memory event callback first,
 * which plays the device's registration table.  It is told at once of the
 * CMA areas mapped (MAP), and would be told before any of them is
 * unmapped or remapped (UNMAP); the buffer is checked to lie in a range
 * the "device" has registered before the kernel is given it.
 *
 * Physical addresses are printed when this process may see them (root),
 * as runs of physically contiguous bytes (ucma_vtophys): before
 * registration, and again after it, because the kernel may move ordinary
 * pages until a device pins them (hugetlb pages stay put).
 *
 * Build: cc device_buffer.c $(pkg-config --cflags --libs ucma liburing)
 * Usage: device_buffer [FILE]   (default: a temporary file it writes)
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucma.h>
#ifdef HAVE_LIBURING
#include <liburing.h>
#endif

#define BUF_SIZE (4u << 20)
#define MAX_RANGES 16

/* The "device": the ranges it has registered, as the events told it. */
static struct {
	void *addr;
	size_t len;
} registered[MAX_RANGES];
static int nr_registered;

static void on_mem_event(enum ucma_mem_event ev, void *addr, size_t len, void *arg)
{
	(void)arg;
	printf("  memory event: %s %p, %zu MiB\n", ev == UCMA_MEM_EVENT_MAP ? "MAP  " : "UNMAP",
	       addr, len >> 20);
	if (ev == UCMA_MEM_EVENT_MAP && nr_registered < MAX_RANGES) {
		registered[nr_registered].addr = addr;
		registered[nr_registered++].len = len;
		return;
	}
	/* UNMAP: drop every registration inside the range, before returning. */
	for (int i = 0; i < nr_registered; i++) {
		char *r = registered[i].addr;

		if (r >= (char *)addr && r + registered[i].len <= (char *)addr + len)
			registered[i--] = registered[--nr_registered];
	}
}

static int device_may_use(const void *buf, size_t len)
{
	for (int i = 0; i < nr_registered; i++) {
		const char *r = registered[i].addr;

		if ((const char *)buf >= r && (const char *)buf + len <= r + registered[i].len)
			return 1;
	}
	return 0;
}

/* The buffer as a device sees it: runs of physically contiguous bytes. */
static void print_phys(const char *when, const void *buf)
{
	printf("  %s:", when);
	for (size_t off = 0; off < BUF_SIZE;) {
		uint64_t phys;
		size_t run;

		if (ucma_vtophys((const char *)buf + off, &phys, &run) != 0) {
			printf(" unknown (%s)", strerror(errno));
			break;
		}
		if (run > BUF_SIZE - off)
			run = BUF_SIZE - off;
		printf(" %zu KiB at %#" PRIx64, run >> 10, phys);
		off += run;
	}
	printf("\n");
}

/* Write a file of BUF_SIZE bytes with a known pattern; returns its path. */
static const char *make_file(char *path, size_t len)
{
	unsigned char *data = malloc(BUF_SIZE);
	int fd;

	snprintf(path, len, "%s/ucma-device-buffer-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp");
	fd = mkstemp(path);
	if (fd < 0 || !data) {
		perror("device_buffer: temporary file");
		exit(1);
	}
	for (size_t i = 0; i < BUF_SIZE; i++)
		data[i] = (unsigned char)(i * 7 + i / 4096);
	if (write(fd, data, BUF_SIZE) != (ssize_t)BUF_SIZE || fsync(fd) != 0) {
		perror("device_buffer: write");
		exit(1);
	}
	close(fd);
	free(data);
	return path;
}

static int check(const unsigned char *buf)
{
	for (size_t i = 0; i < BUF_SIZE; i++)
		if (buf[i] != (unsigned char)(i * 7 + i / 4096))
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	char tmp[256];
	const char *path = argc > 1 ? argv[1] : make_file(tmp, sizeof(tmp));
	unsigned char *buf;
	ssize_t got = -1;
	int fd, rc = 0;

	printf("device_buffer: registering a memory event callback\n");
	if (ucma_mem_event_register("device_buffer", on_mem_event, NULL) != 0) {
		fprintf(stderr, "device_buffer: ucma_mem_event_register: %s\n", strerror(errno));
		return 1;
	}
	buf = ucma_alloc(BUF_SIZE, 1u << 21, UCMA_ALLOC_ZERO | UCMA_ALLOC_POPULATE);
	if (!buf) {
		fprintf(stderr, "device_buffer: ucma_alloc: %s\n", strerror(errno));
		return 1;
	}
	printf("device_buffer: %u MiB contiguous buffer at %p, CMA backing %s\n",
	       BUF_SIZE >> 20, (void *)buf, ucma_backing_name("cma"));
	if (!device_may_use(buf, BUF_SIZE)) {
		fprintf(stderr, "device_buffer: no MAP event covered the buffer\n");
		return 1;
	}
	printf("  the buffer lies in a range the device has registered\n");
	print_phys("physical, before registration", buf);

	fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0) {
		/* tmpfs has no O_DIRECT: say so and read normally. */
		fprintf(stderr, "device_buffer: O_DIRECT open of %s: %s; using buffered I/O\n", path,
			strerror(errno));
		fd = open(path, O_RDONLY);
		if (fd < 0) {
			perror("device_buffer: open");
			return 1;
		}
	}
#ifdef HAVE_LIBURING
	{
		struct io_uring ring;
		struct iovec iov = { buf, BUF_SIZE };
		int err = io_uring_queue_init(4, &ring, 0);

		if (err == 0)
			err = io_uring_register_buffers(&ring, &iov, 1);
		if (err == 0) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			struct io_uring_cqe *cqe;

			printf("  registered as io_uring fixed buffer 0\n");
			print_phys("physical, after registration", buf);
			io_uring_prep_read_fixed(sqe, fd, buf, BUF_SIZE, 0, 0);
			io_uring_submit(&ring);
			err = io_uring_wait_cqe(&ring, &cqe);
			if (err == 0) {
				got = cqe->res;
				io_uring_cqe_seen(&ring, cqe);
			}
			io_uring_unregister_buffers(&ring);
			io_uring_queue_exit(&ring);
			printf("  io_uring READ_FIXED returned %zd\n", got);
		} else {
			printf("  io_uring is not available here (%s): reading with pread instead\n",
			       strerror(-err));
		}
	}
#else
	printf("  built without liburing: reading with pread instead\n");
#endif
	if (got < 0)
		got = pread(fd, buf, BUF_SIZE, 0);
	close(fd);
	if (got != (ssize_t)BUF_SIZE || !check(buf)) {
		fprintf(stderr, "device_buffer: the data read into the buffer is wrong (%zd bytes)\n",
			got);
		rc = 1;
	} else {
		printf("  %zd bytes arrived intact in the contiguous buffer\n", got);
	}
	if (argc <= 1)
		unlink(path);
	ucma_release(buf);
	ucma_mem_event_unregister("device_buffer");
	return rc;
}
