/* SPDX-License-Identifier: MIT */
/*
 * The uring file driver's device-memory path under faults (issue 18): its
 * chunks stage through stage lanes whose rings give room back in the order
 * it was reserved, while storage reads complete in any order.  A read that
 * completes before an earlier one has its copy held until that one is in; a
 * storage read that fails between good ones fails its request alone; a
 * device copy that fails mid-batch fails the requests behind it, those
 * before it complete, and the next I/O runs on a fresh context.  Writes the
 * same: a storage write failing after its copy landed, a copy out of the
 * device failing mid-batch.
 *
 * Each case opens its own driver, with one read lane (file.streams=1), so
 * that every chunk of it goes through the same ring in the order issued.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#include "common/config.h"

#include <gdx/gdx.h>

#define CHUNK (64u << 10)

static struct gdx_device *dev;

static int setup(void **state)
{
	(void)state;
	/* the emulated device: its stream copies fail on demand */
	return gdx_device_open("emulated", &dev);
}

static int teardown(void **state)
{
	(void)state;
	gdx_device_close(dev);
	return 0;
}

/* A driver whose contexts have one read lane of depth chunks of CHUNK bytes. */
static struct gdx_file_driver *driver(const char *depth)
{
	struct gdx_file_driver *drv;

	assert_int_equal(gdx_config_set("file.streams", "1"), 0);
	assert_int_equal(gdx_config_set("file.chunk_size", "64k"), 0);
	assert_int_equal(gdx_config_set("file.depth", depth), 0);
	assert_int_equal(gdx_config_set("file.batch_depth", depth), 0);
	assert_int_equal(gdx_config_set("file.batch_chunk", "64k"), 0);
	assert_int_equal(gdx_config_set("file.split_min", "1G"), 0);
	assert_int_equal(gdx_file_driver_open(dev, NULL, &drv), 0);
	return drv;
}

static void driver_close(struct gdx_file_driver *drv)
{
	gdx_file_driver_close(drv);
	gdx_config_reset();
}

static struct gdx_file *open_uring(struct gdx_file_driver *drv, const char *path, unsigned flags)
{
	struct gdx_file_opts o;
	struct gdx_file *f;

	gdx_file_opts_init(&o, sizeof(o));
	o.backend = "uring";
	o.flags = flags;
	assert_int_equal(gdx_file_open(drv, path, &o, &f), 0);
	return f;
}

static uint64_t counter(struct gdx_file_driver *drv, const char *want)
{
	const char *name;
	uint64_t v;

	for (unsigned i = 0; !gdx_file_driver_counter(drv, i, &name, &v); i++)
		if (!strcmp(name, want))
			return v;
	fail_msg("no counter %s", want);
	return 0;
}

static void check_dev(const void *d, const unsigned char *want, size_t n)
{
	unsigned char *h = malloc(n);

	assert_non_null(h);
	memset(h, 0xee, n);
	assert_int_equal(gdx_memcpy(dev, h, d, n), 0);
	assert_memory_equal(h, want, n);
	free(h);
}

/*
 * Runs n reads (or writes) of sizes[i] bytes at offs[i] of f into (from)
 * d + i * CHUNK as one batch; results in res[i].
 */
static void batch_io(struct gdx_file_driver *drv, struct gdx_file *f, enum gdx_file_op op, void *d,
		     const off_t *offs, const size_t *sizes, unsigned n, ssize_t *res)
{
	struct gdx_file_batch_io ios[32];
	struct gdx_file_batch_event ev[32];
	struct gdx_file_batch *b;
	unsigned got = 0;

	assert_true(n <= 32);
	assert_int_equal(gdx_file_batch_create(drv, n, &b), 0);
	for (unsigned i = 0; i < n; i++)
		ios[i] = (struct gdx_file_batch_io){
			.file = f, .op = op, .buf = (char *)d + (size_t)i * CHUNK,
			.size = sizes[i], .off = offs[i], .cookie = (void *)(uintptr_t)(i + 1),
		};
	assert_int_equal(gdx_file_batch_submit(b, ios, n), 0);
	while (got < n) {
		int k = gdx_file_batch_wait(b, 1, ev, n, 10000);

		assert_true(k > 0);
		for (int j = 0; j < k; j++) {
			unsigned i = (unsigned)(uintptr_t)ev[j].cookie - 1;

			assert_true(i < n);
			res[i] = ev[j].result;
		}
		got += (unsigned)k;
	}
	gdx_file_batch_destroy(b);
}

/*
 * Out of order: a disk file whose even chunks are cold (read O_DIRECT) and
 * odd ones hot (read buffered, completed as they are submitted).  Each odd
 * chunk's read completes before the even one ahead of it in the ring; its
 * copy is held until that one is in (copies_held), and every byte lands
 * where it belongs.  Posting it at once would give the lane's room back up
 * to its end while the cold read still fills the room before it.
 */
static void out_of_order(void **state)
{
	enum { N = 16 };
	const char *b = getenv("GDX_BUILDDIR");
	unsigned char *ref = malloc(N * CHUNK), tmp[CHUNK];
	struct gdx_file_io_info info;
	struct gdx_file_driver *drv;
	struct gdx_file *f;
	char path[512];
	void *d;
	int fd;

	(void)state;
	assert_non_null(ref);
	snprintf(path, sizeof(path), "%s/test_file_fault.%d.dat", b ? b : "/var/tmp", getpid());
	t_fill(ref, N * CHUNK, 11);
	fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, ref, N * CHUNK, 0), (ssize_t)(N * CHUNK));
	assert_int_equal(fdatasync(fd), 0);
	fd = (close(fd), open(path, O_RDONLY | O_DIRECT));
	if (fd < 0) {
		unlink(path);
		free(ref);
		skip();		/* no O_DIRECT here: every chunk would go buffered, in order */
	}
	close(fd);
	drv = driver("4");
	/* registration off: the mapping still sends hot chunks buffered, cold ones O_DIRECT */
	f = open_uring(drv, path, GDX_FILE_NO_PAGECACHE);
	fd = open(path, O_RDONLY);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	for (unsigned i = 1; i < N; i += 2)
		assert_int_equal(pread(fd, tmp, CHUNK, (off_t)i * CHUNK), (ssize_t)CHUNK);
	close(fd);
	assert_int_equal(gdx_device_malloc(dev, N * CHUNK, &d), 0);
	assert_int_equal(gdx_file_read_ex(f, d, N * CHUNK, 0, &info), (ssize_t)(N * CHUNK));
	assert_non_null(strstr(info.why, "O_DIRECT and buffered"));
	check_dev(d, ref, N * CHUNK);
	assert_true(counter(drv, "copies_held") > 0);
	gdx_file_close(f);
	driver_close(drv);
	gdx_device_free(dev, d);
	unlink(path);
	free(ref);
}

/*
 * Six chunks of this process's memory whose four in the middle are an empty
 * file's pages: no other mapping takes their place, and /proc/self/mem
 * reads and writes of them fail with EIO (they lie past the file's end).
 */
static unsigned char *mem_with_hole(void)
{
	unsigned char *mem = mmap(NULL, 6 * CHUNK, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int hole = memfd_create("hole", MFD_CLOEXEC);

	assert_true(mem != MAP_FAILED && hole >= 0);
	assert_true(mmap(mem + CHUNK, 4 * CHUNK, PROT_READ, MAP_SHARED | MAP_FIXED, hole, 0) ==
		    mem + CHUNK);
	close(hole);
	return mem;
}

/*
 * A storage read that fails between good ones: /proc/self/mem over
 * mem_with_hole.  A read across them fails with EIO, and so does one of the four alone: a
 * failed chunk's room goes back in turn all the same (an empty copy marks
 * it), or the ring would stay full of it.  As a batch of one read a chunk,
 * the first and last complete, byte-exact, and only the middle one fails.
 */
static void eio_between(void **state)
{
	unsigned char *mem = mem_with_hole(), *ref = malloc(6 * CHUNK);
	struct gdx_file_driver *drv;
	struct gdx_file *f;
	off_t offs[3];
	size_t sizes[3] = { CHUNK, CHUNK, CHUNK };
	ssize_t res[3];
	void *d;

	(void)state;
	assert_non_null(ref);
	t_fill(ref, 6 * CHUNK, 12);
	memcpy(mem, ref, CHUNK);
	memcpy(mem + 5 * CHUNK, ref + 5 * CHUNK, CHUNK);
	offs[0] = (off_t)(uintptr_t)mem;
	offs[1] = offs[0] + CHUNK;
	offs[2] = offs[0] + 5 * CHUNK;
	drv = driver("4");
	f = open_uring(drv, "/proc/self/mem", 0);
	assert_int_equal(gdx_device_malloc(dev, 6 * CHUNK, &d), 0);
	assert_int_equal(gdx_file_read(f, d, 6 * CHUNK, offs[0]), -EIO);
	assert_int_equal(gdx_file_read(f, d, 4 * CHUNK, offs[1]), -EIO);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(gdx_memset(dev, d, 0, 3 * CHUNK), 0);
		batch_io(drv, f, GDX_FILE_READ, d, offs, sizes, 3, res);
		assert_int_equal(res[0], (ssize_t)CHUNK);
		assert_int_equal(res[1], -EIO);
		assert_int_equal(res[2], (ssize_t)CHUNK);
		check_dev(d, ref, CHUNK);
		check_dev((char *)d + 2 * CHUNK, ref + 5 * CHUNK, CHUNK);
	}
	assert_int_equal(gdx_file_read(f, d, CHUNK, offs[2]), (ssize_t)CHUNK);
	check_dev(d, ref + 5 * CHUNK, CHUNK);
	gdx_file_close(f);
	driver_close(drv);
	gdx_device_free(dev, d);
	munmap(mem, 6 * CHUNK);
	free(ref);
}

/*
 * A device copy that fails mid-batch (emulated.copy_fault_after: the
 * seventh copy and those after it are refused): the six reads whose copies
 * were enqueued before it complete, byte-exact; the rest fail with EIO,
 * none lost.  The broken context is replaced: the next read succeeds.
 */
static void copy_fault_mid_batch(void **state)
{
	enum { N = 16, K = 6 };
	unsigned char *ref = malloc(N * CHUNK);
	char path[64];
	struct gdx_file_driver *drv;
	struct gdx_file *f;
	off_t offs[N];
	size_t sizes[N];
	ssize_t res[N];
	void *d;
	int fd;

	(void)state;
	assert_non_null(ref);
	snprintf(path, sizeof(path), "/dev/shm/gdx_test_file_fault.%d.dat", getpid());
	t_fill(ref, N * CHUNK, 13);
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, ref, N * CHUNK, 0), (ssize_t)(N * CHUNK));
	close(fd);
	drv = driver("32");
	f = open_uring(drv, path, GDX_FILE_NO_PAGECACHE);
	assert_int_equal(gdx_device_malloc(dev, N * CHUNK, &d), 0);
	/* a copy with the knob at 0 restarts its count */
	assert_int_equal(gdx_file_read(f, d, CHUNK, 0), (ssize_t)CHUNK);
	assert_int_equal(gdx_config_set("emulated.copy_fault_after", "6"), 0);
	for (unsigned i = 0; i < N; i++) {
		offs[i] = (off_t)i * CHUNK;
		sizes[i] = CHUNK;
	}
	assert_int_equal(gdx_memset(dev, d, 0, N * CHUNK), 0);
	batch_io(drv, f, GDX_FILE_READ, d, offs, sizes, N, res);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(res[i], i < K ? (ssize_t)CHUNK : -EIO);
	check_dev(d, ref, K * CHUNK);
	assert_int_equal(gdx_config_set("emulated.copy_fault_after", "0"), 0);
	assert_int_equal(gdx_file_read(f, d, 2 * CHUNK, 0), (ssize_t)(2 * CHUNK));
	check_dev(d, ref, 2 * CHUNK);
	gdx_file_close(f);
	driver_close(drv);
	gdx_device_free(dev, d);
	unlink(path);
	free(ref);
}

/*
 * Writes: a storage write that fails after its chunk's copy out of the
 * device landed, between good ones (/proc/self/mem over mem_with_hole).  As a batch of one write a
 * chunk, the first and last land byte-exact and only the middle one fails;
 * its room in the write lane still comes back in turn (the rounds go round
 * the lane's ring), and a write across good and failing chunks fails.
 */
static void write_eio_between(void **state)
{
	unsigned char *mem = mem_with_hole(), *ref = malloc(3 * CHUNK);
	size_t sizes[3] = { CHUNK, CHUNK, CHUNK };
	struct gdx_file_driver *drv;
	struct gdx_file_opts o;
	struct gdx_file *f;
	off_t offs[3];
	ssize_t res[3];
	void *d;

	(void)state;
	assert_non_null(ref);
	offs[0] = (off_t)(uintptr_t)mem;
	offs[1] = offs[0] + CHUNK;
	offs[2] = offs[0] + 5 * CHUNK;
	drv = driver("4");
	gdx_file_opts_init(&o, sizeof(o));
	o.backend = "uring";
	o.oflags = O_RDWR;
	assert_int_equal(gdx_file_open(drv, "/proc/self/mem", &o, &f), 0);
	assert_int_equal(gdx_device_malloc(dev, 3 * CHUNK, &d), 0);
	for (int round = 0; round < 4; round++) {
		t_fill(ref, 3 * CHUNK, 20 + round);
		assert_int_equal(gdx_memcpy(dev, d, ref, 3 * CHUNK), 0);
		memset(mem, 0, CHUNK);
		memset(mem + 5 * CHUNK, 0, CHUNK);
		batch_io(drv, f, GDX_FILE_WRITE, d, offs, sizes, 3, res);
		assert_int_equal(res[0], (ssize_t)CHUNK);
		assert_int_equal(res[1], -EIO);
		assert_int_equal(res[2], (ssize_t)CHUNK);
		assert_memory_equal(mem, ref, CHUNK);
		assert_memory_equal(mem + 5 * CHUNK, ref + 2 * CHUNK, CHUNK);
	}
	assert_int_equal(gdx_file_write(f, d, 2 * CHUNK, offs[0]), -EIO);
	memset(mem + 5 * CHUNK, 0, CHUNK);
	assert_int_equal(gdx_file_write(f, d, CHUNK, offs[2]), (ssize_t)CHUNK);
	assert_memory_equal(mem + 5 * CHUNK, ref, CHUNK);
	gdx_file_close(f);
	driver_close(drv);
	gdx_device_free(dev, d);
	munmap(mem, 6 * CHUNK);
	free(ref);
}

/*
 * A copy out of the device that fails mid-batch of writes (the seventh
 * refused): the six writes whose copies were enqueued before it reach the
 * file byte-exact, the rest fail with EIO and write nothing, and the next
 * write runs on a fresh context.
 */
static void write_copy_fault_mid_batch(void **state)
{
	enum { N = 16, K = 6 };
	unsigned char *ref = malloc(N * CHUNK), *back = malloc(N * CHUNK);
	struct gdx_file_driver *drv;
	struct gdx_file_opts o;
	struct gdx_file *f;
	char path[64];
	off_t offs[N];
	size_t sizes[N];
	ssize_t res[N];
	void *d;
	int fd;

	(void)state;
	assert_true(ref && back);
	snprintf(path, sizeof(path), "/dev/shm/gdx_test_file_fault_w.%d.dat", getpid());
	t_fill(ref, N * CHUNK, 14);
	drv = driver("32");
	gdx_file_opts_init(&o, sizeof(o));
	o.backend = "uring";
	o.oflags = O_RDWR | O_CREAT | O_TRUNC;
	assert_int_equal(gdx_file_open(drv, path, &o, &f), 0);
	assert_int_equal(gdx_device_malloc(dev, N * CHUNK, &d), 0);
	assert_int_equal(gdx_memcpy(dev, d, ref, N * CHUNK), 0);
	/* a copy with the knob at 0 restarts its count */
	assert_int_equal(gdx_file_write(f, d, CHUNK, 0), (ssize_t)CHUNK);
	assert_int_equal(gdx_config_set("emulated.copy_fault_after", "6"), 0);
	for (unsigned i = 0; i < N; i++) {
		offs[i] = (off_t)i * CHUNK;
		sizes[i] = CHUNK;
	}
	batch_io(drv, f, GDX_FILE_WRITE, d, offs, sizes, N, res);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(res[i], i < K ? (ssize_t)CHUNK : -EIO);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, back, N * CHUNK, 0), (ssize_t)(K * CHUNK));
	assert_memory_equal(back, ref, K * CHUNK);
	assert_int_equal(gdx_config_set("emulated.copy_fault_after", "0"), 0);
	assert_int_equal(gdx_file_write(f, (char *)d + K * CHUNK, 2 * CHUNK, K * CHUNK),
			 (ssize_t)(2 * CHUNK));
	assert_int_equal(pread(fd, back, N * CHUNK, 0), (ssize_t)((K + 2) * CHUNK));
	assert_memory_equal(back, ref, (K + 2) * CHUNK);
	close(fd);
	gdx_file_close(f);
	driver_close(drv);
	gdx_device_free(dev, d);
	unlink(path);
	free(ref);
	free(back);
}

/*
 * A batch kept busy past a copy fault: a read of an empty FIFO holds its
 * engine open while sixteen writes go in, the seventh copy refused (the
 * six before it land, the rest fail).  Eight more writes queued after the
 * fault, the device working again, wait for that engine to end (the FIFO
 * fed) and run on a new context: they succeed.  Fed to the broken context,
 * they failed on its write lane for as long as the batch kept it busy.
 */
static void batch_after_copy_fault(void **state)
{
	enum { N = 16, K = 6, M = 8 };
	unsigned char *ref = malloc((N + M) * CHUNK), *back = malloc((N + M) * CHUNK);
	struct gdx_file_batch_event ev[N + 1];
	struct gdx_file_batch_io ios[N + 1];
	struct gdx_file *f, *fifo;
	struct gdx_file_driver *drv;
	struct gdx_file_batch *b;
	struct gdx_file_opts o;
	char path[64], fpath[64], byte = 0;
	unsigned got = 0, ok = 0;
	int fd, wfd;
	void *d;

	(void)state;
	assert_true(ref && back);
	snprintf(path, sizeof(path), "/dev/shm/gdx_test_file_fault_b.%d.dat", getpid());
	snprintf(fpath, sizeof(fpath), "/dev/shm/gdx_test_file_fault_b.%d.fifo", getpid());
	t_fill(ref, (N + M) * CHUNK, 15);
	assert_int_equal(mkfifo(fpath, 0600), 0);
	drv = driver("32");
	gdx_file_opts_init(&o, sizeof(o));
	o.backend = "uring";
	o.oflags = O_RDWR;	/* a FIFO opened read-write does not wait for a writer */
	assert_int_equal(gdx_file_open(drv, fpath, &o, &fifo), 0);
	o.oflags = O_RDWR | O_CREAT | O_TRUNC;
	assert_int_equal(gdx_file_open(drv, path, &o, &f), 0);
	assert_int_equal(gdx_device_malloc(dev, (N + M) * CHUNK, &d), 0);
	assert_int_equal(gdx_memcpy(dev, d, ref, (N + M) * CHUNK), 0);
	/* a copy with the knob at 0 restarts its count */
	assert_int_equal(gdx_file_write(f, d, CHUNK, 0), (ssize_t)CHUNK);
	assert_int_equal(gdx_config_set("emulated.copy_fault_after", "6"), 0);
	assert_int_equal(gdx_file_batch_create(drv, N + M + 1, &b), 0);
	ios[0] = (struct gdx_file_batch_io){ .file = fifo, .op = GDX_FILE_READ, .buf = back,
					     .size = 1, .cookie = NULL };
	for (unsigned i = 0; i < N; i++)
		ios[i + 1] = (struct gdx_file_batch_io){
			.file = f, .op = GDX_FILE_WRITE, .buf = (char *)d + (size_t)i * CHUNK,
			.size = CHUNK, .off = (off_t)i * CHUNK, .cookie = (void *)(uintptr_t)(i + 1),
		};
	assert_int_equal(gdx_file_batch_submit(b, ios, N + 1), 0);
	while (got < N) {
		int k = gdx_file_batch_wait(b, 1, ev, N, 10000);

		assert_true(k > 0);
		for (int j = 0; j < k; j++) {
			unsigned i = (unsigned)(uintptr_t)ev[j].cookie - 1;

			assert_true(i < N);
			assert_int_equal(ev[j].result, i < K ? (ssize_t)CHUNK : -EIO);
		}
		got += (unsigned)k;
	}
	/* the FIFO's read still holds the broken engine: the next writes queue behind it */
	assert_int_equal(gdx_config_set("emulated.copy_fault_after", "0"), 0);
	for (unsigned i = 0; i < M; i++)
		ios[i] = (struct gdx_file_batch_io){
			.file = f, .op = GDX_FILE_WRITE, .buf = (char *)d + (size_t)(N + i) * CHUNK,
			.size = CHUNK, .off = (off_t)(N + i) * CHUNK,
			.cookie = (void *)(uintptr_t)(N + i + 1),
		};
	assert_int_equal(gdx_file_batch_submit(b, ios, M), 0);
	wfd = open(fpath, O_WRONLY);
	assert_true(wfd >= 0);
	assert_int_equal(write(wfd, &byte, 1), 1);
	close(wfd);
	for (got = 0; got < M + 1;) {
		int k = gdx_file_batch_wait(b, 1, ev, M + 1, 10000);

		assert_true(k > 0);
		for (int j = 0; j < k; j++) {
			unsigned i = (unsigned)(uintptr_t)ev[j].cookie;

			if (!i) {
				assert_int_equal(ev[j].result, 1);
				continue;
			}
			assert_true(i > N && i <= N + M);
			ok += ev[j].result == (ssize_t)CHUNK;
		}
		got += (unsigned)k;
	}
	assert_int_equal(ok, M);
	gdx_file_batch_destroy(b);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, back, CHUNK * M, (off_t)N * CHUNK), (ssize_t)(M * CHUNK));
	assert_memory_equal(back, ref + (size_t)N * CHUNK, M * CHUNK);
	assert_int_equal(pread(fd, back, K * CHUNK, 0), (ssize_t)(K * CHUNK));
	assert_memory_equal(back, ref, K * CHUNK);
	close(fd);
	gdx_file_close(fifo);
	gdx_file_close(f);
	driver_close(drv);
	gdx_device_free(dev, d);
	unlink(path);
	unlink(fpath);
	free(ref);
	free(back);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(eio_between, setup, teardown),
		cmocka_unit_test_setup_teardown(copy_fault_mid_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(write_eio_between, setup, teardown),
		cmocka_unit_test_setup_teardown(write_copy_fault_mid_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(batch_after_copy_fault, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
