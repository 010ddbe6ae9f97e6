/* SPDX-License-Identifier: MIT */
/*
 * gdx_file_* (test_file.c): the driver: errors, a full
 * filesystem, registered buffers, the backend chosen, a context that fails,
 * leaks, counters, split pieces, fixed buffers past 1 GiB.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>
#include "plugin/file.h"
#include "file_suite.h"

void errors(void **state)
{
	struct gdx_file_opts o;
	struct gdx_file *f;
	unsigned char h[8192];
	void *d;
	int fd;

	(void)state;
	gdx_file_opts_init(&o, sizeof(o));
	assert_int_equal(gdx_file_open_fd(drv, -1, &o, &f), -EBADF);
	fd = open(shm_path, O_RDONLY);
	close(fd);
	assert_int_equal(gdx_file_open_fd(drv, fd, &o, &f), -EBADF);
	assert_int_equal(gdx_file_open(drv, "/nonexistent/x", NULL, &f), -ENOENT);
	o.backend = "nope";
	assert_int_equal(gdx_file_open(drv, shm_path, &o, &f), -EINVAL);

	f = open_path(disk_path, O_RDWR, 0, NULL);
	assert_int_equal(gdx_file_read(f, NULL, 10, 0), -EINVAL);
	assert_int_equal(gdx_file_read(f, h, 10, -1), -EINVAL);
	assert_int_equal(gdx_file_read(f, h, 0, 0), 0);
	/* A host pointer to nothing: the kernel's EFAULT, file untouched. */
	assert_int_equal(gdx_file_read(f, (void *)16, 4096, 0), -EFAULT);
	assert_int_equal(gdx_file_write(f, (void *)16, 4096, 0), -EFAULT);
	/* Device memory overrun. */
	assert_int_equal(gdx_device_malloc(dev, 4096, &d), 0);
	assert_int_equal(gdx_file_read(f, d, 8192, 0), GDX_EBADPTR);
	assert_int_equal(gdx_file_write(f, (char *)d + 100, 4096, 0), GDX_EBADPTR);
	/* A freed buffer is not memory any more. */
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_true(gdx_file_read(f, d, 4096, 0) < 0);
	assert_int_equal(pread(gdx_file_fd(f), h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_memory_equal(h, ref, sizeof(h));
	gdx_file_close(f);
}

/* The small filesystem of enospc(), taken down by its teardown even when an
 * assertion fails half-way (a failed run must not leave a mount behind). */
static char enospc_dir[32];
static bool enospc_mounted;

int enospc_teardown(void **state)
{
	(void)state;
	if (enospc_mounted && umount2(enospc_dir, MNT_DETACH))
		fprintf(stderr, "umount %s: %s\n", enospc_dir, strerror(errno));
	enospc_mounted = false;
	if (enospc_dir[0])
		rmdir(enospc_dir);
	enospc_dir[0] = 0;
	return 0;
}

/* A full filesystem: ENOSPC comes back, and what was written stays intact. */
void enospc(void **state)
{
	char path[64];
	unsigned char *src, *back;
	struct gdx_file *f;
	void *d;
	ssize_t r;

	(void)state;
	snprintf(enospc_dir, sizeof(enospc_dir), "/tmp/gdx_enospc.XXXXXX");
	assert_non_null(mkdtemp(enospc_dir));
	if (mount("tmpfs", enospc_dir, "tmpfs", 0, "size=1M"))
		skip();
	enospc_mounted = true;
	src = malloc(4u << 20);
	back = malloc(4u << 20);
	assert_true(src && back);
	snprintf(path, sizeof(path), "%s/f", enospc_dir);
	t_fill(src, 4u << 20, 8);
	assert_int_equal(gdx_device_malloc(dev, 4u << 20, &d), 0);
	assert_int_equal(gdx_memcpy(dev, d, src, 4u << 20), 0);
	f = open_path(path, O_RDWR | O_CREAT, 0, NULL);
	assert_int_equal(gdx_file_write(f, d, 300000, 0), 300000);
	r = gdx_file_write(f, d, 4u << 20, 500000);
	assert_int_equal(r, -ENOSPC);
	assert_int_equal(gdx_file_read(f, back, 300000, 0), 300000);
	assert_memory_equal(back, src, 300000);
	gdx_file_close(f);
	f = open_path(path, O_RDWR, 0, "posix");
	assert_int_equal(gdx_file_write(f, src, 4u << 20, 600000), -ENOSPC);
	gdx_file_close(f);
	gdx_device_free(dev, d);
	free(src);
	free(back);
}

void buf_register(void **state)
{
	unsigned char *h = malloc(1 << 20);
	struct gdx_file *f = open_path(shm_path, O_RDONLY, 0, NULL);
	void *d;

	(void)state;
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	assert_int_equal(gdx_file_buf_register(drv, d, 1 << 20), 0);
	assert_int_equal(gdx_file_buf_register(drv, d, 1 << 20), -EEXIST);
	assert_int_equal(gdx_file_buf_register(drv, d, 2 << 20), GDX_EBADPTR);
	assert_int_equal(gdx_file_read(f, (char *)d + 7, 500000, 3), 500000);
	assert_int_equal(gdx_memcpy(dev, h, (char *)d + 7, 500000), 0);
	assert_memory_equal(h, ref + 3, 500000);
	assert_int_equal(gdx_file_buf_deregister(drv, d), 0);
	assert_int_equal(gdx_file_buf_deregister(drv, d), -ENOENT);
	/* Freeing drops a registration; the address then reads as a bad one. */
	assert_int_equal(gdx_file_buf_register(drv, d, 1 << 20), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(gdx_file_buf_deregister(drv, d), -ENOENT);
	assert_true(gdx_file_read(f, d, 4096, 0) < 0);
	gdx_file_close(f);
	free(h);
}

void driver_choice(void **state)
{
	struct gdx_file_driver_opts o;
	struct gdx_file_driver *d2;
	char desc[512];

	(void)state;
	assert_true(gdx_file_driver_describe(drv, desc, sizeof(desc)) > 0);
	assert_non_null(strstr(desc, "uring: ready"));
	gdx_file_driver_opts_init(&o, sizeof(o));
	if (!strcmp(gdx_device_kind(dev), "emulated")) {
		assert_non_null(strstr(desc, "cufile: device emulated:0 is not a CUDA device"));
		o.backend = "cufile";
		assert_int_equal(gdx_file_driver_open(dev, &o, &d2), GDX_ENOLIB);
	}
	o.backend = "bogus";
	assert_int_equal(gdx_file_driver_open(dev, &o, &d2), -EINVAL);
	o.backend = "posix";
	assert_int_equal(gdx_file_driver_open(dev, &o, &d2), 0);
	assert_int_equal(gdx_config_set("file.backend", "uring"), 0);
	{
		struct gdx_file_opts fo;
		struct gdx_file *f;

		gdx_file_opts_init(&fo, sizeof(fo));
		/* Only posix started in this driver: asking for uring fails clearly. */
		assert_int_equal(gdx_file_open(d2, shm_path, &fo, &f), -ENODEV);
		fo.backend = "posix";
		assert_int_equal(gdx_file_open(d2, shm_path, &fo, &f), 0);
		assert_string_equal(gdx_file_backend_name(f), "posix");
		gdx_file_close(f);
	}
	assert_int_equal(gdx_config_set("file.backend", "auto"), 0);
	gdx_file_driver_close(d2);
}

/* Bytes of RAM plus swap, or 0 when unknown. */
static uint64_t mem_total(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	unsigned long long kb, sum = 0;
	char line[128];

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu", &kb) == 1 || sscanf(line, "SwapTotal: %llu", &kb) == 1)
			sum += kb;
	if (f)
		fclose(f);
	return (uint64_t)sum << 10;
}

/*
 * When uring cannot set up an I/O context, the I/O goes by posix and says why.
 * A context of 1024 x 256 MiB buffers is refused by the kernel's overcommit
 * check on any machine with less than 256 GiB of memory and swap.
 */
void context_failure(void **state)
{
	struct gdx_file_driver *d2;
	struct gdx_file_io_info info;
	unsigned char *host = malloc(FSIZE);
	FILE *oc = fopen("/proc/sys/vm/overcommit_memory", "r");
	int mode = -1;
	struct gdx_file *f;
	void *d;

	(void)state;
	if (oc) {
		if (fscanf(oc, "%d", &mode) != 1)
			mode = -1;
		fclose(oc);
	}
	if (mode == 1 || !mem_total() || mem_total() >= (256ull << 30)) {
		free(host);
		skip();
	}
	assert_int_equal(gdx_file_driver_open(dev, NULL, &d2), 0);
	assert_int_equal(gdx_config_set("file.chunk_size", "256M"), 0);
	assert_int_equal(gdx_config_set("file.depth", "1024"), 0);
	/* The read is split: its workers' contexts are sized by their own knobs. */
	assert_int_equal(gdx_config_set("file.split_chunk", "256M"), 0);
	assert_int_equal(gdx_config_set("file.split_depth", "1024"), 0);
	assert_int_equal(gdx_device_malloc(dev, FSIZE, &d), 0);
	assert_int_equal(gdx_file_open(d2, shm_path, NULL, &f), 0);
	assert_int_equal(gdx_file_read_ex(f, d, FSIZE, 0, &info), (ssize_t)FSIZE);
	assert_int_equal(info.path, GDX_FILE_PATH_POSIX);
	assert_non_null(strstr(info.why, "no I/O context"));
	assert_int_equal(gdx_memcpy(dev, host, d, FSIZE), 0);
	assert_memory_equal(host, ref, FSIZE);
	gdx_file_close(f);
	assert_int_equal(gdx_config_set("file.chunk_size", "1M"), 0);
	assert_int_equal(gdx_config_set("file.depth", "16"), 0);
	assert_int_equal(gdx_config_set("file.split_chunk", NULL), 0);
	assert_int_equal(gdx_config_set("file.split_depth", NULL), 0);
	gdx_file_driver_close(d2);
	gdx_device_free(dev, d);
	free(host);
}

void no_leaks(void **state)
{
	int before;
	struct gdx_file *f;
	unsigned char h[100];

	(void)state;
	before = count_fds();
	for (int i = 0; i < 20; i++) {
		f = open_path(disk_path, O_RDONLY, 0, NULL);
		assert_int_equal(gdx_file_read(f, h, sizeof(h), 5), (ssize_t)sizeof(h));
		gdx_file_close(f);
	}
	assert_int_equal(count_fds(), before);
}

/* The driver's counters through the public call: named, counting, and ending. */
void driver_counters(void **state)
{
	uint64_t before[2] = { 0, 0 }, after[2] = { 0, 0 }, v;
	const char *want[2] = { "reads", "bytes_host" }, *name;
	unsigned char h[3000];
	struct gdx_file *f;
	unsigned n = 0;

	(void)state;
	for (; !gdx_file_driver_counter(drv, n, &name, &v); n++)
		for (int k = 0; k < 2; k++)
			if (!strcmp(name, want[k]))
				before[k] = v + 1;	/* + 1: found */
	assert_true(n > 2);
	assert_true(before[0] && before[1]);
	assert_int_equal(gdx_file_driver_counter(drv, n, &name, &v), -ENOENT);
	assert_int_equal(gdx_file_driver_counter(NULL, 0, &name, &v), -EINVAL);

	f = open_path(disk_path, O_RDONLY, 0, NULL);
	assert_int_equal(gdx_file_read(f, h, sizeof(h), 7), (ssize_t)sizeof(h));
	assert_int_equal(gdx_file_read(f, h, sizeof(h), 70), (ssize_t)sizeof(h));
	gdx_file_close(f);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(gdx_file_driver_counter(drv, i, &name, &v), 0);
		for (int k = 0; k < 2; k++)
			if (!strcmp(name, want[k]))
				after[k] = v + 1;
	}
	assert_int_equal(after[0] - before[0], 2);
	assert_int_equal(after[1] - before[1], 2 * sizeof(h));
}

static uint64_t counter(struct gdx_file_driver *d, const char *want)
{
	const char *name;
	uint64_t v;

	for (unsigned i = 0; !gdx_file_driver_counter(d, i, &name, &v); i++)
		if (!strcmp(name, want))
			return v;
	fail_msg("no counter %s", want);
	return 0;
}

/*
 * A split read from an offset off the page grid (a checkpoint's data, after
 * a header of any length) still cuts its pieces on the grid: each 1 MiB
 * piece is four 256 KiB chunks, not four and the 100 bytes up to the next
 * piece, one more pread and copy per piece.
 */
void split_pieces_on_grid(void **state)
{
	const size_t off = 100, n = (8u << 20) - off;
	unsigned char *host = malloc(n);
	struct gdx_file_driver *d2;
	struct gdx_file_io_info info;
	struct gdx_file_opts o;
	struct gdx_file *f;
	char pc_threads[32];
	uint64_t preads;
	void *d;

	(void)state;
	/* A driver of its own: the split contexts take file.split_chunk when made. */
	assert_int_equal(gdx_config_set("file.split_chunk", "256K"), 0);
	/* Every worker copies with the CPU, each chunk one pread (the knob is read at open). */
	assert_true(gdx_config_get("file.pagecache_threads", pc_threads, sizeof(pc_threads)) > 0);
	assert_int_equal(gdx_config_set("file.pagecache_threads", "0"), 0);
	assert_int_equal(gdx_file_driver_open(dev, NULL, &d2), 0);
	gdx_file_opts_init(&o, sizeof(o));
	o.backend = "uring";
	assert_int_equal(gdx_file_open(d2, shm_path, &o, &f), 0);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	preads = counter(d2, "preads");
	check_dev_read(f, d, host, off, n, &info);
	assert_int_equal(info.bytes[GDX_FILE_PATH_BOUNCE], n);
	assert_non_null(strstr(info.why, "by pread on the worker"));
	assert_int_equal(counter(d2, "preads") - preads, 8 * 4);
	gdx_file_close(f);
	gdx_file_driver_close(d2);
	assert_int_equal(gdx_config_set("file.split_chunk", NULL), 0);
	assert_int_equal(gdx_config_set("file.pagecache_threads", pc_threads), 0);
	gdx_device_free(dev, d);
	free(host);
}

static struct gdx_file *open_uring_on(struct gdx_file_driver *d, const char *path, int oflags,
				      unsigned flags)
{
	struct gdx_file_opts o;
	struct gdx_file *f;

	gdx_file_opts_init(&o, sizeof(o));
	o.oflags = oflags;
	o.flags = flags;
	o.backend = "uring";
	assert_int_equal(gdx_file_open(d, path, &o, &f), 0);
	return f;
}

/*
 * Rings over io_uring's 1 GiB fixed-buffer limit (lanes of 17 chunks of
 * 64 MiB) still go in as fixed buffers, a lane's ring as several that
 * overlap by a chunk: every storage I/O into them is fixed (fixed_ios), also
 * once the read lane's pieces have moved past its first buffer and across
 * the boundary of the second, and the bytes land where they belong.  As one
 * buffer a lane the kernel refused them all (EFAULT), and every I/O went
 * through a page walk.  Skipped where fixed buffers are refused anyway (no
 * CAP_IPC_LOCK and a small memlock limit).
 */
void fixed_bufs_over_1g(void **state)
{
	unsigned char *host = malloc(FSIZE);
	struct gdx_file_io_info info;
	struct gdx_file_driver *d2;
	struct gdx_file *f, *w;
	char out[64];
	uint64_t fixed;
	void *d;
	int fd;

	(void)state;
	assert_non_null(host);
	assert_int_equal(gdx_device_malloc(dev, FSIZE, &d), 0);
	assert_int_equal(gdx_config_set("file.split_min", "1G"), 0);
	f = open_uring_on(drv, shm_path, O_RDONLY, GDX_FILE_NO_PAGECACHE);
	fixed = counter(drv, "fixed_ios");
	check_dev_read(f, d, host, 0, FSIZE, &info);
	gdx_file_close(f);
	if (counter(drv, "fixed_ios") == fixed) {
		assert_int_equal(gdx_config_set("file.split_min", "2M"), 0);
		gdx_device_free(dev, d);
		free(host);
		skip();
	}
	assert_int_equal(gdx_config_set("file.streams", "1"), 0);
	assert_int_equal(gdx_config_set("file.chunk_size", "64M"), 0);
	assert_int_equal(gdx_config_set("file.depth", "17"), 0);
	assert_int_equal(gdx_file_driver_open(dev, NULL, &d2), 0);
	f = open_uring_on(d2, shm_path, O_RDONLY, GDX_FILE_NO_PAGECACHE);
	/*
	 * ~8 MiB a read from odd offsets: 140 take the 1088 MiB read ring round
	 * once, the last 30 across and past its second buffer's start (960 MiB)
	 */
	for (unsigned i = 0; i < 140; i++) {
		size_t off = (size_t)i * 4196 % (1u << 20);

		if (i < 110)
			assert_int_equal(gdx_file_read(f, d, FSIZE - off, (off_t)off),
					 (ssize_t)(FSIZE - off));
		else
			check_dev_read(f, d, host, off, FSIZE - off, &info);
	}
	/* the write lane's ring too: the whole file back out of the device */
	check_dev_read(f, d, host, 0, FSIZE, &info);
	snprintf(out, sizeof(out), "/dev/shm/gdx_test_file.%d.out", getpid());
	w = open_uring_on(d2, out, O_RDWR | O_CREAT | O_TRUNC, 0);
	assert_int_equal(gdx_file_write(w, d, FSIZE, 0), (ssize_t)FSIZE);
	gdx_file_close(w);
	fd = open(out, O_RDONLY);
	assert_true(fd >= 0);
	memset(host, 0xee, FSIZE);
	assert_int_equal(pread(fd, host, FSIZE, 0), (ssize_t)FSIZE);
	assert_memory_equal(host, ref, FSIZE);
	close(fd);
	unlink(out);
	fixed = counter(d2, "fixed_ios");
	assert_true(fixed > 140);
	assert_int_equal(fixed, counter(d2, "storage_ios"));
	gdx_file_close(f);
	gdx_file_driver_close(d2);
	assert_int_equal(gdx_config_set("file.streams", NULL), 0);
	assert_int_equal(gdx_config_set("file.chunk_size", NULL), 0);
	assert_int_equal(gdx_config_set("file.depth", NULL), 0);
	assert_int_equal(gdx_config_set("file.split_min", "2M"), 0);
	gdx_device_free(dev, d);
	free(host);
}
