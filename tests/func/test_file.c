/* SPDX-License-Identifier: MIT */
/*
 * gdx_file_* on the emulated device: every backend, every memory kind, on a
 * disk filesystem (O_DIRECT) and on tmpfs (no O_DIRECT), with unaligned
 * offsets and sizes, end of file, sparse files past 4 GiB, many threads,
 * batch and stream-ordered I/O, strict mode and the error paths.
 *
 * The cases live by theme in file_suite_*.c (file_suite.h); this file has
 * what they share, the set-up and the case list.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>
#include "file_suite.h"

struct gdx_device *dev;
struct gdx_file_driver *drv;
unsigned char *ref;
char disk_path[512], shm_path[512];

int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

/*
 * The test file opened O_DIRECT, or a skip where its filesystem takes no
 * O_DIRECT (the test's pat and back buffers freed first).
 */
int open_odirect_or_skip(unsigned char *pat, unsigned char *back)
{
	int fd = open(disk_path, O_RDWR | O_DIRECT | O_CLOEXEC);

	if (fd < 0 && errno == EINVAL) {
		free(pat);
		free(back);
		skip();
	}
	assert_true(fd >= 0 && pat && back);
	return fd;
}

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, p, n, 0), (ssize_t)n);
	close(fd);
}

static int setup(void **state)
{
	const char *b = getenv("GDX_BUILDDIR");

	(void)state;
	/* $GDX_DEVICE: emulated in CI, cuda when tests/gpu/run.sh runs it on a GPU. */
	assert_int_equal(gdx_device_open(NULL, &dev), 0);
	assert_int_equal(gdx_file_driver_open(dev, NULL, &drv), 0);
	ref = malloc(FSIZE);
	t_fill(ref, FSIZE, 42);
	snprintf(disk_path, sizeof(disk_path), "%s/test_file.%d.dat", b ? b : "/tmp", getpid());
	snprintf(shm_path, sizeof(shm_path), "/dev/shm/gdx_test_file.%d.dat", getpid());
	write_file(disk_path, ref, FSIZE);
	write_file(shm_path, ref, FSIZE);
	/* Small page-cache ranges so the tests cross several of them. */
	gdx_config_set("file.pagecache_chunk", "1M");
	gdx_config_set("file.pagecache_min", "64k");
	/* Large reads run as parts on several contexts: exercise that too. */
	gdx_config_set("file.split_min", "2M");
	gdx_config_set("file.split_piece", "1M");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(disk_path);
	unlink(shm_path);
	free(ref);
	gdx_file_driver_close(drv);
	gdx_device_close(dev);
	return 0;
}

struct gdx_file *open_path(const char *path, int oflags, unsigned flags, const char *be)
{
	struct gdx_file_opts o;
	struct gdx_file *f;

	gdx_file_opts_init(&o, sizeof(o));
	o.oflags = oflags;
	o.flags = flags;
	o.backend = be;
	assert_int_equal(gdx_file_open(drv, path, &o, &f), 0);
	return f;
}

/* Reads [off, off+n) into device memory and checks it against ref. */
void check_dev_read(struct gdx_file *f, void *d, unsigned char *host, size_t off, size_t n,
		    struct gdx_file_io_info *info)
{
	size_t want = off >= FSIZE ? 0 : (off + n > FSIZE ? FSIZE - off : n);
	ssize_t got = gdx_file_read_ex(f, d, n, (off_t)off, info);

	assert_int_equal(got, (ssize_t)want);
	memset(host, 0xee, n);
	assert_int_equal(gdx_memcpy(dev, host, d, n), 0);
	assert_memory_equal(host, ref + off, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(driver_choice),
		cmocka_unit_test(reads_uring_disk),
		cmocka_unit_test(reads_uring_tmpfs),
		cmocka_unit_test(reads_posix),
		cmocka_unit_test(path_reporting),
		cmocka_unit_test(driver_counters),
		cmocka_unit_test(split_pieces_on_grid),
		cmocka_unit_test(fixed_bufs_over_1g),
		cmocka_unit_test(register_refused),
		cmocka_unit_test(strict_mode),
		cmocka_unit_test(writes),
		cmocka_unit_test(sparse_4g),
		cmocka_unit_test(read_only),
		cmocka_unit_test(many_threads),
		cmocka_unit_test(batch),
		cmocka_unit_test(stream_ordered),
		cmocka_unit_test(stream_ordered_early),
		cmocka_unit_test(read_ahead),
		cmocka_unit_test(read_ahead_concurrent),
		cmocka_unit_test(stream_ordered_odirect),
		cmocka_unit_test(sync_odirect),
		cmocka_unit_test(odirect_no_twin),
		cmocka_unit_test(odirect_write_order),
		cmocka_unit_test(errors),
		cmocka_unit_test_teardown(enospc, enospc_teardown),
		cmocka_unit_test(buf_register),
		cmocka_unit_test(context_failure),
		cmocka_unit_test(no_leaks),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
