/* SPDX-License-Identifier: MIT */
/*
 * gdx_file_* on the emulated device: every backend, every memory kind, on a
 * disk filesystem (O_DIRECT) and on tmpfs (no O_DIRECT), with unaligned
 * offsets and sizes, end of file, sparse files past 4 GiB, many threads,
 * batch and stream-ordered I/O, strict mode and the error paths.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "meet.h"
#include "test.h"

#include "common/stats.h"
#include "file/ahead.h"
#include "file/file_int.h"

#include <gdx/gdx.h>
#include "plugin/file.h"

#define FSIZE ((8u << 20) + 12345u)

static struct gdx_device *dev;
static struct gdx_file_driver *drv;
static unsigned char *ref;		/* the file's contents */
static char disk_path[512], shm_path[512];

static int count_fds(void)
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
static int open_odirect_or_skip(unsigned char *pat, unsigned char *back)
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

static struct gdx_file *open_path(const char *path, int oflags, unsigned flags, const char *be)
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
static void check_dev_read(struct gdx_file *f, void *d, unsigned char *host, size_t off, size_t n,
			   struct gdx_file_io_info *info)
{
	size_t want = off >= FSIZE ? 0 : (off + n > FSIZE ? FSIZE - off : n);
	ssize_t got = gdx_file_read_ex(f, d, n, (off_t)off, info);

	assert_int_equal(got, (ssize_t)want);
	memset(host, 0xee, n);
	assert_int_equal(gdx_memcpy(dev, host, d, n), 0);
	assert_memory_equal(host, ref + off, want);
}

static void random_reads(const char *path, const char *be, unsigned flags)
{
	struct gdx_file *f = open_path(path, O_RDONLY, flags, be);
	unsigned char *host = malloc(FSIZE + 8192);
	uint64_t seed = 7;
	void *d;

	assert_int_equal(gdx_device_malloc(dev, FSIZE + 8192, &d), 0);
	/* Whole file, then past the end, then a read that starts at end of file. */
	check_dev_read(f, d, host, 0, FSIZE, NULL);
	check_dev_read(f, d, host, FSIZE - 5000, 8192, NULL);
	check_dev_read(f, d, host, FSIZE, 100, NULL);
	for (int i = 0; i < 60; i++) {
		size_t off = t_rand(&seed) % (FSIZE + 100);
		size_t n = 1 + t_rand(&seed) % (i % 3 ? 70000 : 3u << 20);

		check_dev_read(f, d, host, off, n, NULL);
	}
	/* Host memory: straight reads, unaligned and aligned. */
	for (int i = 0; i < 20; i++) {
		size_t off = i & 1 ? (t_rand(&seed) % FSIZE) : (t_rand(&seed) % 1000) * 4096;
		size_t n = i & 1 ? 1 + t_rand(&seed) % 300000 : 4096 * (1 + t_rand(&seed) % 300);
		size_t want = off + n > FSIZE ? FSIZE - off : n;
		unsigned char *h = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);

		assert_int_equal(gdx_file_read(f, h, n, (off_t)off), (ssize_t)want);
		assert_memory_equal(h, ref + off, want);
		free(h);
	}
	gdx_device_free(dev, d);
	free(host);
	assert_int_equal(gdx_file_close(f), 0);
}

static void reads_uring_disk(void **state)
{
	(void)state;
	random_reads(disk_path, "uring", 0);
	random_reads(disk_path, "uring", GDX_FILE_NO_PAGECACHE);
	random_reads(disk_path, "uring", GDX_FILE_NO_ODIRECT | GDX_FILE_NO_PAGECACHE);
}

static void reads_uring_tmpfs(void **state)
{
	(void)state;
	random_reads(shm_path, "uring", 0);
	random_reads(shm_path, "uring", GDX_FILE_NO_PAGECACHE);
}

static void reads_posix(void **state)
{
	(void)state;
	random_reads(disk_path, "posix", 0);
	random_reads(shm_path, "posix", 0);
}

/* The path record says what happened, per I/O and per handle. */
static void path_reporting(void **state)
{
	struct gdx_file_io_info info, hinfo;
	unsigned char *host = malloc(FSIZE);
	struct gdx_file *f;
	void *d;

	(void)state;
	assert_int_equal(gdx_device_malloc(dev, FSIZE, &d), 0);

	/*
	 * A split read whose workers all register (the knob is read at open):
	 * on tmpfs all of it is page cache, so the device copies out of it.
	 */
	assert_int_equal(gdx_config_set("file.pagecache_threads", "64"), 0);
	f = open_path(shm_path, O_RDONLY, 0, NULL);
	assert_string_equal(gdx_file_backend_name(f), "uring");
	assert_int_equal(gdx_file_info(f, &hinfo), 0);
	assert_non_null(strstr(hinfo.why, "cufile"));	/* why cufile was passed over */
	check_dev_read(f, d, host, 0, FSIZE, &info);
	assert_int_equal(info.path, GDX_FILE_PATH_PAGECACHE);
	assert_int_equal(info.bytes[GDX_FILE_PATH_PAGECACHE], FSIZE);
	assert_non_null(strstr(info.why, "not direct"));
	/* Below file.pagecache_min a read goes by bounce. */
	check_dev_read(f, d, host, 100, 1000, &info);
	assert_int_equal(info.path, GDX_FILE_PATH_BOUNCE);
	assert_non_null(strstr(info.why, "pagecache_min"));
	check_dev_read(f, d, host, 100, 1000, NULL);
	assert_int_equal(gdx_file_read_ex(f, host, 5000, 3, &info), 5000);
	assert_int_equal(info.path, GDX_FILE_PATH_HOST);
	assert_int_equal(gdx_file_info(f, &hinfo), 0);
	assert_int_equal(hinfo.path, GDX_FILE_PATH_HOST);
	assert_int_equal(hinfo.bytes[GDX_FILE_PATH_PAGECACHE], FSIZE);
	assert_int_equal(hinfo.bytes[GDX_FILE_PATH_BOUNCE], 2000);
	assert_int_equal(hinfo.bytes[GDX_FILE_PATH_HOST], 5000);
	gdx_file_close(f);

	/*
	 * Disk with file.pagecache=0: registration is off, but a hot range is
	 * still read buffered (a memory copy), split or not, never O_DIRECT
	 * from the disk again; once dropped from the cache it goes O_DIRECT.
	 */
	{
		int fd = open(disk_path, O_RDONLY), dfd = open(disk_path, O_RDONLY | O_DIRECT);
		bool odirect = dfd >= 0;
		const size_t sizes[] = { FSIZE - 777, 1u << 20 };

		if (dfd >= 0)
			close(dfd);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, host, FSIZE, 0), (ssize_t)FSIZE);
		assert_int_equal(gdx_config_set("file.pagecache", "0"), 0);
		f = open_path(disk_path, O_RDONLY, 0, "uring");
		assert_int_equal(gdx_config_set("file.pagecache", "1"), 0);
		for (int i = 0; i < 2; i++) {
			check_dev_read(f, d, host, 777, sizes[i], &info);
			assert_int_equal(info.path, GDX_FILE_PATH_BOUNCE);
			assert_int_equal(info.bytes[GDX_FILE_PATH_BOUNCE], sizes[i]);
			assert_non_null(strstr(info.why, "registration turned off"));
			assert_null(strstr(info.why, "O_DIRECT reads"));
			assert_null(strstr(info.why, "O_DIRECT and buffered"));
			if (odirect)
				assert_non_null(strstr(info.why, "cached data read buffered"));
		}
		assert_int_equal(fdatasync(fd), 0);
		assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
		check_dev_read(f, d, host, 777, FSIZE - 777, &info);
		assert_int_equal(info.path, GDX_FILE_PATH_BOUNCE);
		assert_non_null(strstr(info.why, odirect ? "O_DIRECT reads" : "O_DIRECT refused"));
		/*
		 * Partly cached: the split workers' RWF_NOWAIT reads take what is
		 * cached and stop at the first page that is not; the rest of the
		 * chunk goes O_DIRECT.  Where the cold range starts depends on
		 * the page cache's folio sizes, so only both ways are checked.
		 */
		assert_int_equal(pread(fd, host, FSIZE, 0), (ssize_t)FSIZE);
		assert_int_equal(posix_fadvise(fd, (2 << 20) + 8192, (3 << 20) + 4096,
					       POSIX_FADV_DONTNEED), 0);
		check_dev_read(f, d, host, 5, FSIZE - 5, &info);
		assert_int_equal(info.bytes[GDX_FILE_PATH_BOUNCE], FSIZE - 5);
		assert_non_null(strstr(info.why, "by pread on the worker"));
		if (odirect)
			assert_true(strstr(info.why, "O_DIRECT and buffered") ||
				    strstr(info.why, "O_DIRECT reads"));
		close(fd);
		gdx_file_close(f);
	}

	/* Half hot, half cold: each part goes its own way, the data stays whole. */
	{
		int fd = open(disk_path, O_RDONLY);

		assert_int_equal(pread(fd, host, FSIZE, 0), (ssize_t)FSIZE);
		assert_int_equal(fdatasync(fd), 0);
		assert_int_equal(posix_fadvise(fd, 2 << 20, 3 << 20, POSIX_FADV_DONTNEED), 0);
		close(fd);
	}
	f = open_path(disk_path, O_RDONLY, 0, "uring");
	check_dev_read(f, d, host, 5, FSIZE - 5, &info);
	assert_true(info.bytes[GDX_FILE_PATH_PAGECACHE] >= (4u << 20));
	assert_true(info.bytes[GDX_FILE_PATH_BOUNCE] >= (2u << 20));
	assert_non_null(strstr(info.why, "not in the page cache"));
	gdx_file_close(f);

	f = open_path(disk_path, O_RDONLY, 0, "posix");
	check_dev_read(f, d, host, 1, 100000, &info);
	assert_int_equal(info.path, GDX_FILE_PATH_POSIX);
	gdx_file_close(f);

	/*
	 * One registering worker (the default): the caller registers, the other
	 * workers copy hot pieces with the CPU.  How the pieces fall between them
	 * depends on timing; every byte is accounted for either way.
	 */
	assert_int_equal(gdx_config_set("file.pagecache_threads", "1"), 0);
	f = open_path(shm_path, O_RDONLY, 0, "uring");
	for (int i = 0; i < 4; i++) {
		check_dev_read(f, d, host, (size_t)i * 3, FSIZE - (size_t)i * 3, &info);
		assert_int_equal(info.bytes[GDX_FILE_PATH_PAGECACHE] +
				 info.bytes[GDX_FILE_PATH_BOUNCE], FSIZE - (size_t)i * 3);
		if (info.bytes[GDX_FILE_PATH_BOUNCE])
			assert_non_null(strstr(info.why, "copied by the CPU"));
	}
	gdx_file_close(f);
	/* No registering worker: every piece is copied by the CPU, and says so. */
	assert_int_equal(gdx_config_set("file.pagecache_threads", "0"), 0);
	f = open_path(shm_path, O_RDONLY, 0, "uring");
	check_dev_read(f, d, host, 1, FSIZE - 1, &info);
	assert_int_equal(info.bytes[GDX_FILE_PATH_PAGECACHE], 0);
	assert_int_equal(info.bytes[GDX_FILE_PATH_BOUNCE], FSIZE - 1);
	assert_non_null(strstr(info.why, "copied by the CPU"));
	assert_non_null(strstr(info.why, "by pread on the worker"));
	gdx_file_close(f);
	/* file.split_pread=0: the same chunks go through the workers' rings. */
	assert_int_equal(gdx_config_set("file.split_pread", "0"), 0);
	f = open_path(shm_path, O_RDONLY, 0, "uring");
	assert_int_equal(gdx_config_set("file.split_pread", NULL), 0);
	check_dev_read(f, d, host, 3, FSIZE - 3, &info);
	assert_int_equal(info.bytes[GDX_FILE_PATH_BOUNCE], FSIZE - 3);
	assert_null(strstr(info.why, "pread"));
	gdx_file_close(f);
	/*
	 * A disk file without O_DIRECT, partly cold: the workers' RWF_NOWAIT
	 * reads take the cached chunks and stop where the cache ends, the ring
	 * reads the rest; the data stays whole either way.
	 */
	{
		int fd = open(disk_path, O_RDONLY);
		uint64_t p0 = gdx_counter_get(&drv->ctr[GDX_FILE_CTR_PREADS]);

		assert_int_equal(pread(fd, host, FSIZE, 0), (ssize_t)FSIZE);
		assert_int_equal(fdatasync(fd), 0);
		assert_int_equal(posix_fadvise(fd, (3 << 20) + 5000, 2 << 20, POSIX_FADV_DONTNEED), 0);
		close(fd);
		f = open_path(disk_path, O_RDONLY, GDX_FILE_NO_ODIRECT, "uring");
		check_dev_read(f, d, host, 11, FSIZE - 11, &info);
		assert_int_equal(info.bytes[GDX_FILE_PATH_BOUNCE], FSIZE - 11);
		assert_true(gdx_counter_get(&drv->ctr[GDX_FILE_CTR_PREADS]) > p0);
		check_dev_read(f, d, host, FSIZE - (3 << 20), 4 << 20, &info);
		gdx_file_close(f);
	}
	assert_int_equal(gdx_config_set("file.pagecache_threads", "1"), 0);

	gdx_device_free(dev, d);
	free(host);
}

/*
 * A registration refused part way through a read (the emulated device's
 * fault injection): the rest goes by bounce, the data stays whole, and the
 * record and the counters say why.
 */
static void register_refused(void **state)
{
	struct gdx_file_io_info info;
	unsigned char *host = malloc(FSIZE);
	struct gdx_file *f;
	uint64_t refused;
	void *d;

	(void)state;
	if (strncmp(gdx_device_name(dev), "emulated", 8)) {
		free(host);
		skip();
	}
	assert_int_equal(gdx_device_malloc(dev, FSIZE, &d), 0);
	/* One engine registers the ranges in order: no split. */
	assert_int_equal(gdx_config_set("file.split_min", "1G"), 0);
	f = open_path(shm_path, O_RDONLY, 0, "uring");
	/* Its context exists before the count starts. */
	check_dev_read(f, d, host, 0, FSIZE, &info);
	assert_int_equal(info.bytes[GDX_FILE_PATH_PAGECACHE], FSIZE);
	refused = gdx_counter_get(&drv->ctr[GDX_FILE_CTR_PC_REFUSED]);
	assert_int_equal(gdx_config_set("emulated.host_register_fail_after", "2"), 0);
	check_dev_read(f, d, host, 0, FSIZE, &info);
	assert_int_equal(info.path, GDX_FILE_PATH_BOUNCE);
	assert_int_equal(info.bytes[GDX_FILE_PATH_PAGECACHE], 2u << 20);
	assert_int_equal(info.bytes[GDX_FILE_PATH_BOUNCE], FSIZE - (2u << 20));
	assert_non_null(strstr(info.why, "registering the mapping failed"));
	assert_int_equal(gdx_counter_get(&drv->ctr[GDX_FILE_CTR_PC_REFUSED]), refused + 1);
	/* Refused from the first range on: all of it by bounce. */
	check_dev_read(f, d, host, 4097, FSIZE - 4097, &info);
	assert_int_equal(info.bytes[GDX_FILE_PATH_PAGECACHE], 0);
	assert_int_equal(info.bytes[GDX_FILE_PATH_BOUNCE], FSIZE - 4097);
	assert_non_null(strstr(info.why, "registering the mapping failed"));
	assert_int_equal(gdx_config_set("emulated.host_register_fail_after", "0"), 0);
	check_dev_read(f, d, host, 0, FSIZE, &info);
	assert_int_equal(info.bytes[GDX_FILE_PATH_PAGECACHE], FSIZE);
	gdx_file_close(f);
	assert_int_equal(gdx_config_set("file.split_min", "2M"), 0);
	gdx_device_free(dev, d);
	free(host);
}

static void strict_mode(void **state)
{
	struct gdx_file_io_info info;
	unsigned char host[4096];
	struct gdx_file *f;
	void *d;

	(void)state;
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	f = open_path(disk_path, O_RDONLY, GDX_FILE_REQUIRE_DIRECT, NULL);
	assert_int_equal(gdx_file_read_ex(f, d, 1 << 20, 0, &info), GDX_ENOTDIRECT);
	assert_non_null(strstr(info.why, "direct"));
	/* Host memory has no direct path to miss. */
	assert_int_equal(gdx_file_read(f, host, sizeof(host), 0), (ssize_t)sizeof(host));
	gdx_file_close(f);

	f = open_path(disk_path, O_RDONLY, GDX_FILE_REQUIRE_DIRECT, "posix");
	assert_int_equal(gdx_file_read(f, d, 4096, 0), GDX_ENOTDIRECT);
	gdx_file_close(f);

	/* The knob does the same for every handle opened while it is set. */
	assert_int_equal(gdx_config_set("require_direct", "1"), 0);
	f = open_path(shm_path, O_RDONLY, 0, NULL);
	assert_int_equal(gdx_file_read(f, d, 4096, 0), GDX_ENOTDIRECT);
	gdx_file_close(f);
	assert_int_equal(gdx_config_set("require_direct", "0"), 0);
	gdx_device_free(dev, d);
	{
		/* The driver's counters saw the refusals. */
		char *json = NULL;
		size_t len = 0;
		FILE *m = open_memstream(&json, &len);
		char *at;

		assert_int_equal(gdx_stats_dump_json(m), 0);
		fclose(m);
		at = strstr(json, "\"not_direct\"");
		assert_non_null(at);
		assert_true(strtoull(strchr(at, ':') + 1, NULL, 10) >= 3);
		assert_non_null(strstr(json, "\"bytes_pagecache\""));
		free(json);
	}
}

/* Device -> file at unaligned places, fdatasync, then back through pread. */
static void write_roundtrip(const char *dir, const char *be, unsigned flags)
{
	char path[600];
	size_t n = (3u << 20) + 777;
	unsigned char *src = malloc(n), *back = malloc(n + 10000);
	uint64_t seed = 99;
	struct gdx_file *f;
	void *d;
	int fd;

	snprintf(path, sizeof(path), "%s/gdx_test_w.%d", dir, getpid());
	t_fill(src, n, 5);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	assert_int_equal(gdx_memcpy(dev, d, src, n), 0);
	f = open_path(path, O_RDWR | O_CREAT | O_TRUNC, flags, be);
	for (int i = 0; i < 12; i++) {
		size_t off = i ? t_rand(&seed) % 5000000 : 0;
		size_t len = 1 + t_rand(&seed) % (i & 1 ? n : 70000);
		size_t at = t_rand(&seed) % (n - len + 1);
		struct gdx_file_io_info info;

		/* Alternate device and host sources. */
		assert_int_equal(gdx_file_write_ex(f, i & 2 ? (void *)(src + at) :
						   (void *)((char *)d + at), len, (off_t)off,
						   &info), (ssize_t)len);
		assert_int_equal(gdx_file_sync(f), 0);
		fd = open(path, O_RDONLY);
		assert_int_equal(pread(fd, back, len, (off_t)off), (ssize_t)len);
		close(fd);
		assert_memory_equal(back, src + at, len);
		/* And back into device memory through gdx. */
		memset(back, 0, len);
		assert_int_equal(gdx_file_read(f, d, len, (off_t)off), (ssize_t)len);
		assert_int_equal(gdx_memcpy(dev, back, d, len), 0);
		assert_memory_equal(back, src + at, len);
		assert_int_equal(gdx_memcpy(dev, d, src, n), 0);
	}
	gdx_file_close(f);
	unlink(path);
	gdx_device_free(dev, d);
	free(src);
	free(back);
}

static void writes(void **state)
{
	const char *b = getenv("GDX_BUILDDIR");

	(void)state;
	write_roundtrip(b ? b : "/tmp", "uring", 0);
	write_roundtrip(b ? b : "/tmp", "uring", GDX_FILE_NO_ODIRECT);
	write_roundtrip("/dev/shm", "uring", 0);
	write_roundtrip(b ? b : "/tmp", "posix", 0);
}

/* A sparse file past 4 GiB: offsets above 32 bits, holes read as zeros. */
static void sparse_4g(void **state)
{
	const char *b = getenv("GDX_BUILDDIR");
	off_t at = (4ll << 30) + 12345;
	unsigned char pat[20000], back[40000], zero[20000] = { 0 };
	char path[600];
	struct gdx_file *f;
	void *d;
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "%s/gdx_test_sparse.%d", b ? b : "/tmp", getpid());
	fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
	assert_true(fd >= 0);
	if (ftruncate(fd, (5ll << 30))) {
		close(fd);
		unlink(path);
		skip();
	}
	t_fill(pat, sizeof(pat), 3);
	assert_int_equal(pwrite(fd, pat, sizeof(pat), at), (ssize_t)sizeof(pat));
	close(fd);
	assert_int_equal(gdx_device_malloc(dev, sizeof(back), &d), 0);
	f = open_path(path, O_RDONLY, 0, NULL);
	assert_int_equal(gdx_file_size(f), 5ll << 30);
	/* Starts in the hole, ends in the data. */
	assert_int_equal(gdx_file_read(f, d, sizeof(back), at - 20000), (ssize_t)sizeof(back));
	assert_int_equal(gdx_memcpy(dev, back, d, sizeof(back)), 0);
	assert_memory_equal(back, zero, 20000);
	assert_memory_equal(back + 20000, pat, sizeof(pat));
	/* The last bytes of the file, read past its end. */
	assert_int_equal(gdx_file_read(f, d, 8192, (5ll << 30) - 100), 100);
	gdx_file_close(f);
	unlink(path);
	gdx_device_free(dev, d);
}

static void read_only(void **state)
{
	struct gdx_file_opts o;
	unsigned char h[4096];
	struct gdx_file *f;
	int fd;

	(void)state;
	chmod(shm_path, 0444);
	f = open_path(shm_path, O_RDONLY, 0, NULL);
	assert_int_equal(gdx_file_read(f, h, sizeof(h), 10), (ssize_t)sizeof(h));
	assert_int_equal(gdx_file_write(f, h, sizeof(h), 10), -EBADF);
	gdx_file_close(f);
	fd = open(shm_path, O_RDONLY);
	gdx_file_opts_init(&o, sizeof(o));
	assert_int_equal(gdx_file_open_fd(drv, fd, &o, &f), 0);
	assert_int_equal(gdx_file_read(f, h, sizeof(h), 0), (ssize_t)sizeof(h));
	assert_memory_equal(h, ref, sizeof(h));
	assert_int_equal(gdx_file_write(f, h, 1, 0), -EBADF);
	gdx_file_close(f);
	/* The caller's descriptor stays open. */
	assert_int_equal(fcntl(fd, F_GETFD) >= 0, 1);
	close(fd);
	chmod(shm_path, 0644);
}

struct thr_arg {
	struct gdx_file *f;
	int id;
	int bad;
};

static void *thr_reads(void *p)
{
	struct thr_arg *a = p;
	uint64_t seed = 1000 + (uint64_t)a->id;
	size_t cap = 2u << 20;
	unsigned char *h = malloc(cap);
	void *d;

	if (gdx_device_malloc(dev, cap, &d)) {
		a->bad = 1;
		free(h);
		return NULL;
	}
	for (int i = 0; i < 25; i++) {
		size_t off = t_rand(&seed) % FSIZE;
		size_t n = 1 + t_rand(&seed) % cap;
		size_t want = off + n > FSIZE ? FSIZE - off : n;

		if (gdx_file_read(a->f, d, n, (off_t)off) != (ssize_t)want ||
		    gdx_memcpy(dev, h, d, want) || memcmp(h, ref + off, want))
			a->bad = 1;
	}
	gdx_device_free(dev, d);
	free(h);
	return NULL;
}

static void many_threads(void **state)
{
	pthread_t t[8];
	struct thr_arg a[8];
	const char *paths[2] = { disk_path, shm_path };

	(void)state;
	for (int p = 0; p < 2; p++) {
		struct gdx_file *f = open_path(paths[p], O_RDONLY, 0, NULL);

		for (int i = 0; i < 8; i++) {
			a[i] = (struct thr_arg){ .f = f, .id = i };
			pthread_create(&t[i], NULL, thr_reads, &a[i]);
		}
		for (int i = 0; i < 8; i++) {
			pthread_join(t[i], NULL);
			assert_int_equal(a[i].bad, 0);
		}
		gdx_file_close(f);
	}
}

static void batch(void **state)
{
	enum { N = 40 };
	struct gdx_file_batch_io ios[N];
	struct gdx_file_batch_event ev[N];
	struct gdx_file_batch *b;
	struct gdx_file *f = open_path(disk_path, O_RDONLY, 0, NULL);
	struct gdx_file *fp = open_path(shm_path, O_RDONLY, 0, "posix");
	unsigned char *h = malloc(N * 8192);
	uint64_t seed = 5;
	size_t offs[N];
	int seen[N] = { 0 }, got = 0;
	void *d;

	(void)state;
	assert_int_equal(gdx_device_malloc(dev, N * 8192, &d), 0);
	assert_int_equal(gdx_file_batch_create(drv, N, &b), 0);
	/* Nothing outstanding: a poll returns nothing, a wait for one is refused. */
	assert_int_equal(gdx_file_batch_wait(b, 0, ev, N, 0), 0);
	assert_int_equal(gdx_file_batch_wait(b, 1, ev, N, -1), -EINVAL);
	for (int i = 0; i < N; i++) {
		offs[i] = i == N - 1 ? FSIZE - 100 : t_rand(&seed) % (FSIZE - 8192);
		ios[i] = (struct gdx_file_batch_io){
			.file = i % 3 ? f : fp, .op = GDX_FILE_READ,
			.buf = (char *)d + i * 8192, .size = 4096 + (size_t)i,
			.off = (off_t)offs[i], .cookie = (void *)(uintptr_t)(i + 1),
		};
	}
	ios[5].off = -1;	/* one bad I/O fails alone */
	assert_int_equal(gdx_file_batch_submit(b, ios, N), 0);
	assert_int_equal(gdx_file_batch_submit(b, ios, 1), -EAGAIN);
	while (got < N) {
		int n = gdx_file_batch_wait(b, 1, ev, N, 5000);

		assert_true(n > 0);
		for (int k = 0; k < n; k++) {
			int i = (int)(uintptr_t)ev[k].cookie - 1;
			size_t want = i == N - 1 ? 100 : 4096 + (size_t)i;

			assert_true(i >= 0 && i < N && !seen[i]);
			seen[i] = 1;
			if (i == 5) {
				assert_int_equal(ev[k].result, -EINVAL);
				continue;
			}
			assert_int_equal(ev[k].result, (ssize_t)want);
			assert_int_equal(gdx_memcpy(dev, h, (char *)d + i * 8192, want), 0);
			assert_memory_equal(h, ref + offs[i], want);
			assert_int_equal(ev[k].info.path, i % 3 ? GDX_FILE_PATH_BOUNCE :
					 GDX_FILE_PATH_POSIX);
		}
		got += n;
	}
	gdx_file_batch_destroy(b);
	gdx_file_close(f);
	gdx_file_close(fp);
	gdx_device_free(dev, d);
	free(h);
}

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open;

static void gate(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gate_lock);
	while (!gate_open)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

/* Size and offset are read when the I/O runs in stream order, not when queued. */
static void stream_ordered(void **state)
{
	struct gdx_file *f = open_path(disk_path, O_RDWR, 0, NULL);
	unsigned char *h;
	struct gdx_stream *s;
	size_t size = 400000;	/* the maximum; the final size is set below */
	off_t off = 0;
	ssize_t done = 12345, wdone = 0;
	size_t wsize;
	off_t woff;
	void *d;

	(void)state;
	/*
	 * Pinned: a copy into pageable memory returns only once done (CUDA stages
	 * it), which would wait for the gate this thread has yet to open.
	 */
	assert_int_equal(gdx_pinned_alloc(dev, 1 << 20, (void **)&h), 0);
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	gate_open = 0;
	assert_int_equal(gdx_stream_launch_host_func(s, gate, NULL), 0);
	assert_int_equal(gdx_file_read_async(f, d, &size, &off, &done, s), 0);
	/* Stream order: the copy below sees what the read brought in. */
	assert_int_equal(gdx_memcpy_async(dev, h, d, 300000, s), 0);
	size = 300000;
	off = 54321;
	assert_int_equal(done, 12345);	/* not run yet */
	pthread_mutex_lock(&gate_lock);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(done, 300000);
	assert_memory_equal(h, ref + 54321, 300000);

	/* A write in stream order, then a read of it in stream order. */
	wsize = 4097;
	woff = FSIZE - 10;	/* extends the file */
	assert_int_equal(gdx_file_write_async(f, d, &wsize, &woff, &wdone, s), 0);
	size = 5000;
	off = FSIZE - 10;
	assert_int_equal(gdx_file_read_async(f, (char *)d + 500000, &size, &off, &done, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(wdone, 4097);
	assert_int_equal(done, 4097);
	assert_int_equal(gdx_memcpy(dev, h + 500000, (char *)d + 500000, 4097), 0);
	assert_memory_equal(h + 500000, ref + 54321, 4097);
	assert_int_equal(ftruncate(gdx_file_fd(f), FSIZE), 0);
	/* Errors come back through *done. */
	off = -5;
	assert_int_equal(gdx_file_read_async(f, d, &size, &off, &done, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(done, -EINVAL);
	/* A size above the one given at submission is refused when the I/O runs. */
	off = 0;
	size = 100;
	wsize = 100;
	woff = FSIZE;
	gate_open = 0;
	assert_int_equal(gdx_stream_launch_host_func(s, gate, NULL), 0);
	assert_int_equal(gdx_file_read_async(f, d, &size, &off, &done, s), 0);
	assert_int_equal(gdx_file_write_async(f, d, &wsize, &woff, &wdone, s), 0);
	size = 101;
	wsize = 4096;
	pthread_mutex_lock(&gate_lock);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(done, -EINVAL);
	assert_int_equal(wdone, -EINVAL);
	assert_int_equal(ftruncate(gdx_file_fd(f), FSIZE), 0);
	/* Pinned buffers are read into directly, in stream order. */
	size = 777;
	off = 1000;
	memset(h, 0, 777);
	assert_int_equal(gdx_file_read_async(f, h, &size, &off, &done, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(done, 777);
	assert_memory_equal(h, ref + 1000, 777);
	gdx_stream_destroy(s);
	gdx_file_close(f);
	gdx_device_free(dev, d);
	gdx_pinned_free(dev, h);
}

static void hold_release(uint32_t *word, uint32_t v)
{
	__atomic_store_n(word, v, __ATOMIC_RELEASE);
}

/* Waits up to 10 s for *done to leave its sentinel; true if it did. */
static bool done_changes(ssize_t *done, ssize_t sentinel)
{
	for (int i = 0; i < 10000; i++) {
		if (__atomic_load_n(done, __ATOMIC_ACQUIRE) != sentinel)
			return true;
		usleep(1000);
	}
	return false;
}

/*
 * GDX_FILE_ASYNC_EARLY: the storage read runs at the call while the stream is
 * held, but buf is written only in stream order; a stream-ordered write to
 * the file still pending keeps the read in order, and so does host memory.
 */
static void stream_ordered_early(void **state)
{
	struct gdx_file *f = open_path(disk_path, O_RDWR, 0, NULL);
	unsigned char *h, *pg = malloc(4096);
	uint32_t *hold;
	struct gdx_stream *s[2];
	size_t size, wsize;
	off_t off, woff;
	ssize_t done, wdone;
	void *d;

	(void)state;
	assert_non_null(pg);
	assert_int_equal(gdx_pinned_alloc(dev, 1 << 20, (void **)&h), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&hold), 0);
	*hold = 0;
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	assert_int_equal(gdx_stream_create(dev, &s[0]), 0);
	assert_int_equal(gdx_stream_create(dev, &s[1]), 0);
	size = 1;
	assert_int_equal(gdx_file_read_async_ex(f, h, &size, &off, &done, s[0], 0x80), -EINVAL);

	/*
	 * *done comes while the stream is held, the bytes only in stream order:
	 * a copy of buf enqueued before the read still sees the old bytes.
	 */
	memset(h, 0xee, 300000);
	assert_int_equal(gdx_memcpy(dev, d, h, 300000), 0);
	size = 300000;
	off = 54321;
	done = -7777;
	assert_int_equal(gdx_stream_wait_value32(s[0], hold, 1), 0);
	assert_int_equal(gdx_memcpy_async(dev, h + 400000, d, 300000, s[0]), 0);
	assert_int_equal(gdx_file_read_async_ex(f, d, &size, &off, &done, s[0],
						GDX_FILE_ASYNC_EARLY), 0);
	assert_int_equal(gdx_memcpy_async(dev, h, d, 300000, s[0]), 0);
	size = 1;	/* taken at the call */
	off = 0;
	assert_true(done_changes(&done, -7777));
	assert_int_equal(done, 300000);
	hold_release(hold, 1);
	assert_int_equal(gdx_stream_synchronize(s[0]), 0);
	for (size_t i = 0; i < 300000; i++)
		assert_int_equal(h[400000 + i], 0xee);
	assert_memory_equal(h, ref + 54321, 300000);

	/* Pinned memory: in stream order (*done not before the stream gets there). */
	size = 777;
	off = 1000;
	done = -7777;
	memset(h, 0, 777);
	assert_int_equal(gdx_stream_wait_value32(s[0], hold, 2), 0);
	assert_int_equal(gdx_file_read_async_ex(f, h, &size, &off, &done, s[0],
						GDX_FILE_ASYNC_EARLY), 0);
	usleep(20000);
	assert_int_equal(__atomic_load_n(&done, __ATOMIC_ACQUIRE), -7777);
	hold_release(hold, 2);
	assert_int_equal(gdx_stream_synchronize(s[0]), 0);
	assert_int_equal(done, 777);
	assert_memory_equal(h, ref + 1000, 777);

	/* A write queued behind the hold is not overtaken by an early read. */
	for (size_t i = 0; i < 8192; i++)
		h[i] = (unsigned char)~ref[100000 + i];
	assert_int_equal(gdx_memcpy(dev, d, h, 8192), 0);
	wsize = 8192;
	woff = 100000;
	size = 8192;
	off = 100000;
	done = -7777;
	wdone = 0;
	assert_int_equal(gdx_stream_wait_value32(s[0], hold, 3), 0);
	assert_int_equal(gdx_file_write_async(f, d, &wsize, &woff, &wdone, s[0]), 0);
	assert_int_equal(gdx_file_read_async_ex(f, (char *)d + 500000, &size, &off, &done, s[0],
						GDX_FILE_ASYNC_EARLY), 0);
	usleep(20000);
	assert_int_equal(__atomic_load_n(&done, __ATOMIC_ACQUIRE), -7777);
	hold_release(hold, 3);
	assert_int_equal(gdx_stream_synchronize(s[0]), 0);
	assert_int_equal(wdone, 8192);
	assert_int_equal(done, 8192);
	assert_int_equal(gdx_memcpy(dev, h + 500000, (char *)d + 500000, 8192), 0);
	assert_memory_equal(h + 500000, h, 8192);
	assert_int_equal(pwrite(gdx_file_fd(f), ref + 100000, 8192, 100000), 8192);

	/* Pageable memory: in stream order. */
	size = 4096;
	off = 4096;
	done = -7777;
	assert_int_equal(gdx_stream_wait_value32(s[0], hold, 4), 0);
	assert_int_equal(gdx_file_read_async_ex(f, pg, &size, &off, &done, s[0],
						GDX_FILE_ASYNC_EARLY), 0);
	usleep(20000);
	assert_int_equal(__atomic_load_n(&done, __ATOMIC_ACQUIRE), -7777);
	hold_release(hold, 4);
	assert_int_equal(gdx_stream_synchronize(s[0]), 0);
	assert_int_equal(done, 4096);
	assert_memory_equal(pg, ref + 4096, 4096);

	/*
	 * Staging comes back once the stream's copy out of it is done: two
	 * streams, early and in-order reads of varied sizes, every result checked.
	 */
	for (unsigned i = 0; i < 48; i++) {
		static size_t sz[2];
		static off_t of[2];
		static ssize_t dn[2];
		unsigned k = i % 2;

		sz[k] = 1000 + (size_t)i * 4111;
		of[k] = (off_t)i * 997;
		dn[k] = 0;
		assert_int_equal(gdx_file_read_async_ex(f, (char *)d + k * 400000, &sz[k], &of[k],
							&dn[k], s[k], i % 3 ? GDX_FILE_ASYNC_EARLY : 0), 0);
		assert_int_equal(gdx_memcpy_async(dev, h + k * 400000, (char *)d + k * 400000, sz[k],
						  s[k]), 0);
		if (!k)
			continue;
		for (unsigned j = 0; j < 2; j++) {
			assert_int_equal(gdx_stream_synchronize(s[j]), 0);
			assert_int_equal(dn[j], (ssize_t)sz[j]);
			assert_memory_equal(h + j * 400000, ref + of[j], sz[j]);
		}
	}
	gdx_stream_destroy(s[0]);
	gdx_stream_destroy(s[1]);
	gdx_file_close(f);
	gdx_device_free(dev, d);
	gdx_pinned_free(dev, hold);
	gdx_pinned_free(dev, h);
	free(pg);
}

/*
 * Reads ahead (the pipeline's file source starts them for the next batches):
 * an early read of exactly that range takes the data read ahead, anything
 * else reads the file; a write through the handle drops them.
 */
static void read_ahead(void **state)
{
	struct gdx_file *f = open_path(disk_path, O_RDWR, 0, NULL);
	unsigned char *h, junk[65536];
	uint32_t *hold;
	struct gdx_stream *s;
	size_t size, wsize;
	off_t off, woff;
	ssize_t done, wdone;
	void *d;

	(void)state;
	assert_int_equal(gdx_pinned_alloc(dev, 1 << 20, (void **)&h), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&hold), 0);
	*hold = 0;
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	memset(junk, 0x5a, sizeof(junk));
	assert_int_equal(gdx_file_read_ahead(f, 0, 0), -EINVAL);
	assert_int_equal(gdx_file_read_ahead(f, 10, -1), -EINVAL);

	/* Claimed: the data as it was when read ahead, though the file changed since. */
	assert_int_equal(gdx_file_read_ahead(f, 65536, 200000), 0);
	assert_int_equal(gdx_file_read_ahead(f, 65536, 200000), 0);	/* already there */
	assert_int_equal(gdx_file_ahead_wait(f), 1);
	assert_int_equal(pwrite(gdx_file_fd(f), junk, sizeof(junk), 200000), (ssize_t)sizeof(junk));
	size = 65536;
	off = 200000;
	done = 0;
	assert_int_equal(gdx_file_read_async_ex(f, d, &size, &off, &done, s, GDX_FILE_ASYNC_EARLY),
			 0);
	assert_int_equal(gdx_memcpy_async(dev, h, d, 65536, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(done, 65536);
	assert_memory_equal(h, ref + 200000, 65536);
	assert_int_equal(gdx_file_ahead_wait(f), 0);
	/* Not read ahead any more: the file as it is now. */
	assert_int_equal(gdx_file_read_async_ex(f, d, &size, &off, &done, s, GDX_FILE_ASYNC_EARLY),
			 0);
	assert_int_equal(gdx_memcpy_async(dev, h, d, 65536, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_memory_equal(h, junk, 65536);
	assert_int_equal(pwrite(gdx_file_fd(f), ref + 200000, 65536, 200000), 65536);

	/* Another range, or an in-order read, leaves it; a write through the handle drops it. */
	assert_int_equal(gdx_file_read_ahead(f, 65536, 300000), 0);
	off = 300001;
	assert_int_equal(gdx_file_read_async_ex(f, d, &size, &off, &done, s, GDX_FILE_ASYNC_EARLY),
			 0);
	off = 300000;
	assert_int_equal(gdx_file_read_async(f, d, &size, &off, &done, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(gdx_file_ahead_wait(f), 1);
	assert_int_equal(gdx_file_write(f, ref + 300000, 100, 300000), 100);
	assert_int_equal(gdx_file_ahead_wait(f), 0);

	/* While a stream-ordered write to the file is pending, nothing is read ahead. */
	wsize = 100;
	woff = 300000;
	assert_int_equal(gdx_memcpy(dev, d, ref + 300000, 100), 0);
	assert_int_equal(gdx_stream_wait_value32(s, hold, 1), 0);
	assert_int_equal(gdx_file_write_async(f, d, &wsize, &woff, &wdone, s), 0);
	assert_int_equal(gdx_file_read_ahead(f, 4096, 0), -EBUSY);
	hold_release(hold, 1);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(wdone, 100);

	/*
	 * A finished stream-ordered write through another handle of the file
	 * drops them too: an early read issued after it must see its bytes.
	 */
	{
		struct gdx_file *g = open_path(disk_path, O_RDWR, 0, NULL);

		assert_int_equal(gdx_file_read_ahead(f, 65536, 200000), 0);
		assert_int_equal(gdx_file_ahead_wait(f), 1);
		wsize = 65536;
		woff = 200000;
		assert_int_equal(gdx_memcpy(dev, d, junk, 65536), 0);
		assert_int_equal(gdx_file_write_async(g, d, &wsize, &woff, &wdone, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(wdone, 65536);
		assert_int_equal(gdx_file_ahead_wait(f), 0);
		size = 65536;
		off = 200000;
		assert_int_equal(gdx_file_read_async_ex(f, d, &size, &off, &done, s,
							GDX_FILE_ASYNC_EARLY), 0);
		assert_int_equal(gdx_memcpy_async(dev, h, d, 65536, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(done, 65536);
		assert_memory_equal(h, junk, 65536);
		assert_int_equal(gdx_file_write(g, ref + 200000, 65536, 200000), 65536);
		gdx_file_close(g);
	}

	/* At most 16 unclaimed; closing the handle drops them (nothing leaks). */
	for (int i = 0; i < 16; i++)
		assert_int_equal(gdx_file_read_ahead(f, 4096, (off_t)i * 8192), 0);
	assert_int_equal(gdx_file_read_ahead(f, 4096, 1 << 20), -EBUSY);
	gdx_stream_destroy(s);
	gdx_file_close(f);
	gdx_device_free(dev, d);
	gdx_pinned_free(dev, hold);
	gdx_pinned_free(dev, h);
}

/*
 * Stream-ordered I/O on an O_DIRECT descriptor (opened so, or passed in so):
 * the workers' pread/pwrite take unaligned offsets, sizes and buffers, and
 * closing the handle leaves no descriptor behind.
 */
static void stream_ordered_odirect(void **state)
{
	struct gdx_file_io_info info;
	unsigned char *h, *pat = malloc(8192), *back = malloc(8192);
	struct gdx_file_opts o;
	struct gdx_stream *s;
	struct gdx_file *f, *g;
	size_t size, wsize;
	off_t off, woff;
	ssize_t done, wdone;
	int fds, fd, pfd, ret;
	void *d;

	(void)state;
	fds = count_fds();
	fd = open_odirect_or_skip(pat, back);
	gdx_file_opts_init(&o, sizeof(o));
	o.oflags = O_RDWR | O_DIRECT;
	ret = gdx_file_open(drv, disk_path, &o, &f);
	assert_int_equal(ret, 0);
	assert_int_equal(gdx_file_open_fd(drv, fd, NULL, &g), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 1 << 20, (void **)&h), 0);
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);

	/* Into device memory (through staging), at an unaligned offset and size. */
	size = 300001;
	off = 54321;
	done = 0;
	assert_int_equal(gdx_file_read_async(f, d, &size, &off, &done, s), 0);
	assert_int_equal(gdx_memcpy_async(dev, h, d, size, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(done, 300001);
	assert_memory_equal(h, ref + 54321, 300001);
	assert_int_equal(gdx_file_info(f, &info), 0);
	assert_non_null(strstr(info.why, "O_DIRECT"));

	/* Into pinned memory at an unaligned address, on the descriptor passed in. */
	size = 777;
	off = 1001;
	memset(h, 0, 1024);
	assert_int_equal(gdx_file_read_async(g, h + 3, &size, &off, &done, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(done, 777);
	assert_memory_equal(h + 3, ref + 1001, 777);

	/* Writes from device and from pinned memory, checked through a plain read. */
	t_fill(pat, 8192, 9);
	assert_int_equal(gdx_memcpy(dev, (char *)d + 5, pat, 4097), 0);
	wsize = 4097;
	woff = 12345;
	wdone = 0;
	assert_int_equal(gdx_file_write_async(f, (char *)d + 5, &wsize, &woff, &wdone, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(wdone, 4097);
	memcpy(h + 1, pat + 4097, 3001);
	wsize = 3001;
	woff = 12345 + 4097;
	assert_int_equal(gdx_file_write_async(g, h + 1, &wsize, &woff, &wdone, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(wdone, 3001);
	pfd = open(disk_path, O_RDWR | O_CLOEXEC);
	assert_true(pfd >= 0);
	assert_int_equal(pread(pfd, back, 7098, 12345), 7098);
	assert_memory_equal(back, pat, 7098);

	/* Read ahead, then claimed by an early read of the same unaligned range. */
	assert_int_equal(gdx_file_read_ahead(f, 5000, 12346), 0);
	assert_int_equal(gdx_file_ahead_wait(f), 1);
	size = 5000;
	off = 12346;
	done = 0;
	assert_int_equal(gdx_file_read_async_ex(f, d, &size, &off, &done, s, GDX_FILE_ASYNC_EARLY),
			 0);
	assert_int_equal(gdx_memcpy_async(dev, h, d, 5000, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(done, 5000);
	assert_memory_equal(h, pat + 1, 5000);

	assert_int_equal(pwrite(pfd, ref + 12345, 7098, 12345), 7098);
	close(pfd);
	gdx_stream_destroy(s);
	assert_int_equal(gdx_file_close(g), 0);
	assert_int_equal(gdx_file_close(f), 0);
	close(fd);
	gdx_device_free(dev, d);
	/* after the free: an emulated allocation keeps its memfd where udmabuf is */
	assert_int_equal(count_fds(), fds);
	gdx_pinned_free(dev, h);
	free(pat);
	free(back);
}

/* One synchronous I/O shape on an O_DIRECT handle. */
struct odshape {
	size_t off, size, mis;	/* file offset, size, buffer offset from an aligned base */
};

static const struct odshape odshapes[] = {
	{ 54321, 300001, 0 },		/* unaligned offset and size */
	{ 8192, 5000, 0 },		/* unaligned size */
	{ 4096, 8192, 3 },		/* unaligned buffer */
	{ 1, 4095, 7 },			/* all three, inside one block */
	{ 4097, (2u << 20) + 3, 0 },	/* several chunks: O_DIRECT middle from device memory */
	{ 4097, (2u << 20) + 3, 1 },	/* and from host memory (posix) */
	{ 8192, 32768, 0 },		/* aligned (below file.pagecache_min) */
};

/*
 * Reads and writes one shape from one kind of memory (base: 4 KiB aligned) on
 * h, an O_DIRECT handle, checking the bytes against ref and through a plain
 * descriptor, and what the path record says.  Leaves the file as ref.
 */
static void odirect_shape(struct gdx_file *h, const char *be, void *base, bool devmem,
			  const struct odshape *sh, unsigned char *pat, unsigned char *back)
{
	char *buf = (char *)base + sh->mis;
	struct gdx_file_io_info info;
	int pfd = open(disk_path, O_RDWR | O_CLOEXEC);
	/* Device memory is staged through aligned buffers: only the file's side counts. */
	bool direct = !((sh->off | sh->size | (devmem ? 0 : sh->mis)) & 4095);
	/* posix: the aligned middle of a long I/O stays O_DIRECT, memory permitting. */
	bool mixed = !strcmp(be, "posix") && sh->size > (1u << 20) &&
		     (devmem || !((sh->off - sh->mis) & 4095));

	assert_true(pfd >= 0);
	/* Read. */
	if (devmem)
		assert_int_equal(gdx_memcpy(dev, buf, pat, sh->size), 0);
	else
		memset(buf, 0xee, sh->size);
	assert_int_equal(gdx_file_read_ex(h, buf, sh->size, (off_t)sh->off, &info),
			 (ssize_t)sh->size);
	if (devmem)
		assert_int_equal(gdx_memcpy(dev, back, buf, sh->size), 0);
	else
		memcpy(back, buf, sh->size);
	assert_memory_equal(back, ref + sh->off, sh->size);
	if (direct) {
		assert_non_null(strstr(info.why, "O_DIRECT"));
		assert_null(strstr(info.why, "second open"));
	} else if (!devmem || !strcmp(be, "posix")) {
		/* The uring backend reads an aligned superset into device memory. */
		assert_non_null(strstr(info.why, "second open without"));
	}
	if (mixed)
		assert_non_null(strstr(info.why, "O_DIRECT, unaligned parts through a second open"));

	/* Write, checked through a plain descriptor. */
	t_fill(pat, sh->size, sh->off + sh->mis);
	if (devmem)
		assert_int_equal(gdx_memcpy(dev, buf, pat, sh->size), 0);
	else
		memcpy(buf, pat, sh->size);
	assert_int_equal(gdx_file_write_ex(h, buf, sh->size, (off_t)sh->off, &info),
			 (ssize_t)sh->size);
	if (direct) {
		assert_non_null(strstr(info.why, "O_DIRECT"));
		assert_null(strstr(info.why, "second open"));
	} else {
		assert_non_null(strstr(info.why, "second open without"));
	}
	if (mixed)
		assert_non_null(strstr(info.why, "O_DIRECT, unaligned parts through a second open"));
	assert_int_equal(pread(pfd, back, sh->size, (off_t)sh->off), (ssize_t)sh->size);
	assert_memory_equal(back, pat, sh->size);
	/* The bytes around it are untouched. */
	{
		size_t lo = (sh->off & ~(size_t)4095) >= 4096 ? (sh->off & ~(size_t)4095) - 4096 : 0;
		size_t hi = sh->off + sh->size;

		assert_int_equal(pread(pfd, back, sh->off - lo, (off_t)lo), (ssize_t)(sh->off - lo));
		assert_memory_equal(back, ref + lo, sh->off - lo);
		assert_int_equal(pread(pfd, back, 4096, (off_t)hi), 4096);
		assert_memory_equal(back, ref + hi, 4096);
	}
	/*
	 * An aligned O_DIRECT read of the block-rounded range sees what the
	 * buffered twin wrote (the kernel writes the page cache back first).
	 */
	{
		size_t lo = sh->off & ~(size_t)4095;
		size_t n = ((sh->off + sh->size + 4095) & ~(size_t)4095) - lo;
		void *a;

		assert_int_equal(posix_memalign(&a, 4096, n), 0);
		assert_int_equal(gdx_file_read_ex(h, a, n, (off_t)lo, &info), (ssize_t)n);
		assert_non_null(strstr(info.why, "O_DIRECT"));
		assert_null(strstr(info.why, "second open"));
		assert_memory_equal((char *)a + (sh->off - lo), pat, sh->size);
		assert_memory_equal(a, ref + lo, sh->off - lo);
		free(a);
	}
	/* Back to ref, buffered: the next O_DIRECT reads must see it. */
	assert_int_equal(pwrite(pfd, ref + sh->off, sh->size, (off_t)sh->off), (ssize_t)sh->size);
	close(pfd);
}

/*
 * Synchronous and batch I/O on an O_DIRECT descriptor (opened so, or passed
 * in so), on both backends, from host, pinned and device memory: unaligned
 * offsets, sizes and buffers go through the buffered twin and say so, aligned
 * ones stay O_DIRECT; strict mode still refuses device memory; closing leaves
 * no descriptor behind.
 */
static void sync_odirect(void **state)
{
	static const char *const bes[] = { "posix", "uring" };
	size_t cap = (3u << 20) + 8192;
	unsigned char *pat = malloc(cap), *back = malloc(cap);
	void *hostmem, *pinned, *d;
	int fds, fd;

	(void)state;
	fds = count_fds();
	fd = open_odirect_or_skip(pat, back);
	/* stream_ordered leaves its own bytes in the last 10: make the file ref again. */
	{
		int pfd = open(disk_path, O_WRONLY | O_CLOEXEC);

		assert_true(pfd >= 0);
		assert_int_equal(pwrite(pfd, ref + FSIZE - 4096, 4096, FSIZE - 4096), 4096);
		close(pfd);
	}
	assert_int_equal(posix_memalign(&hostmem, 4096, cap), 0);
	assert_int_equal(gdx_pinned_alloc(dev, cap, &pinned), 0);
	assert_int_equal(gdx_device_malloc(dev, cap, &d), 0);
	assert_true(((uintptr_t)pinned & 4095) == 0 && ((uintptr_t)d & 4095) == 0);
	for (unsigned b = 0; b < 2; b++) {
		struct gdx_file_batch_event ev;
		struct gdx_file_io_info info;
		struct gdx_file_batch_io bio;
		struct gdx_file_batch *bt;
		struct gdx_file_opts o;
		struct gdx_file *f, *g;

		gdx_file_opts_init(&o, sizeof(o));
		o.oflags = O_RDWR | O_DIRECT;
		o.backend = bes[b];
		assert_int_equal(gdx_file_open(drv, disk_path, &o, &f), 0);
		assert_string_equal(gdx_file_backend_name(f), bes[b]);
		assert_int_equal(gdx_file_open_fd(drv, fd, &o, &g), 0);
		for (size_t i = 0; i < sizeof(odshapes) / sizeof(odshapes[0]); i++) {
			struct gdx_file *h = i & 1 ? g : f;

			odirect_shape(h, bes[b], hostmem, false, &odshapes[i], pat, back);
			odirect_shape(h, bes[b], pinned, false, &odshapes[i], pat, back);
			odirect_shape(h, bes[b], d, true, &odshapes[i], pat, back);
		}

		/* Reads across end of file, aligned and not: short, like pread. */
		for (unsigned k = 0; k < 3; k++) {
			void *mem = k == 0 ? hostmem : k == 1 ? pinned : d;
			size_t offs[2] = { 8u << 20, FSIZE - 5000 }, n = 16384;

			for (unsigned j = 0; j < 2; j++) {
				struct gdx_file *h = j ? g : f;

				assert_int_equal(gdx_file_read(h, mem, n, (off_t)offs[j]),
						 (ssize_t)(FSIZE - offs[j]));
				if (k == 2)
					assert_int_equal(gdx_memcpy(dev, back, d, FSIZE - offs[j]), 0);
				else
					memcpy(back, mem, FSIZE - offs[j]);
				assert_memory_equal(back, ref + offs[j], FSIZE - offs[j]);
			}
		}

		/* A batch read at an unaligned offset, size and buffer. */
		assert_int_equal(gdx_file_batch_create(drv, 1, &bt), 0);
		bio = (struct gdx_file_batch_io){ .file = g, .op = GDX_FILE_READ,
						  .buf = (char *)pinned + 5, .size = 10001,
						  .off = 777, .cookie = &bio };
		assert_int_equal(gdx_file_batch_submit(bt, &bio, 1), 0);
		assert_int_equal(gdx_file_batch_wait(bt, 1, &ev, 1, 5000), 1);
		assert_int_equal(ev.result, 10001);
		assert_memory_equal((char *)pinned + 5, ref + 777, 10001);
		assert_non_null(strstr(ev.info.why, "second open without"));
		gdx_file_batch_destroy(bt);
		assert_int_equal(gdx_file_close(g), 0);
		assert_int_equal(gdx_file_close(f), 0);

		/* O_DIRECT turned off: even aligned I/O goes through the buffered twin. */
		o.flags = GDX_FILE_NO_ODIRECT;
		assert_int_equal(gdx_file_open(drv, disk_path, &o, &f), 0);
		assert_int_equal(gdx_file_read_ex(f, hostmem, 8192, 4096, &info), 8192);
		assert_memory_equal(hostmem, ref + 4096, 8192);
		assert_null(strstr(info.why, "O_DIRECT I/O"));
		assert_non_null(strstr(info.why, "second open without"));
		assert_int_equal(gdx_file_close(f), 0);

		/* Strict mode: device memory still refused, host memory still served. */
		o.flags = GDX_FILE_REQUIRE_DIRECT;
		assert_int_equal(gdx_file_open(drv, disk_path, &o, &f), 0);
		assert_int_equal(gdx_file_read(f, (char *)d + 1, 5000, 3), GDX_ENOTDIRECT);
		assert_int_equal(gdx_file_write(f, (char *)d + 1, 5000, 3), GDX_ENOTDIRECT);
		assert_int_equal(gdx_file_read(f, (char *)hostmem + 1, 5000, 3), 5000);
		assert_memory_equal((char *)hostmem + 1, ref + 3, 5000);
		assert_int_equal(gdx_file_close(f), 0);
	}
	close(fd);
	gdx_device_free(dev, d);
	/* after the free: an emulated allocation keeps its memfd where udmabuf is */
	assert_int_equal(count_fds(), fds);
	gdx_pinned_free(dev, pinned);
	free(hostmem);
	free(pat);
	free(back);
}

/*
 * A write on an O_DIRECT handle writes its buffered head and tail before its
 * O_DIRECT middle (a page or large folio can span both: one dirtied during
 * the direct write would keep stale bytes).  Seen from outside: with the
 * twin swapped for a read-only descriptor of the file the head and tail fail
 * (EBADF), and the middle must then never have been written -- on both
 * backends, for a single, a split and a batch write, head and tail or tail
 * alone.  Then unaligned writes across 2 MiB spans of a cached file (large
 * folios) read back whole, buffered and O_DIRECT.
 */
static void odirect_write_order(void **state)
{
	static const char *const bes[] = { "posix", "uring" };
	static const struct odshape shapes[] = {
		{ 4097, (3u << 19) + 3, 0 },	/* head and tail, one request */
		{ 8192, (1u << 20) + 5, 0 },	/* tail alone */
		{ 4097, (3u << 20) + 3, 0 },	/* a split write (file.split_min 2M) */
		{ (2u << 20) - 5, (2u << 20) + 10, 0 },	/* across 2 MiB boundaries */
		{ (4u << 20) - 4097, (1u << 20) + 8191, 0 },
	};
	size_t cap = 4u << 20;
	unsigned char *pat = malloc(cap), *back = malloc(cap);
	int fd, pfd;
	void *d;

	(void)state;
	fd = open_odirect_or_skip(pat, back);
	close(fd);
	pfd = open(disk_path, O_RDWR | O_CLOEXEC);
	assert_true(pfd >= 0);
	assert_int_equal(gdx_device_malloc(dev, cap, &d), 0);
	for (unsigned b = 0; b < 2; b++) {
		for (unsigned i = 0; i < 3; i++) {
			const struct odshape *sh = &shapes[i];
			struct gdx_file *f = open_path(disk_path, O_RDWR | O_DIRECT, 0, bes[b]);
			int ro = open(disk_path, O_RDONLY | O_CLOEXEC);
			size_t lo = (sh->off + 4095) & ~(size_t)4095;
			size_t hi = (sh->off + sh->size) & ~(size_t)4095;
			ssize_t got;

			/* Before the handle's first I/O: uring takes the descriptor then. */
			assert_true(ro >= 0 && f->buffered_fd >= 0 && f->buffered_fd != f->fd);
			assert_int_equal(dup2(ro, f->buffered_fd), f->buffered_fd);
			close(ro);
			t_fill(pat, sh->size, i + 100);
			assert_int_equal(gdx_memcpy(dev, d, pat, sh->size), 0);
			if (i == 1 && b == 1) {
				/* Through a batch: the engine orders it the same way. */
				struct gdx_file_batch_io bio = { .file = f, .op = GDX_FILE_WRITE, .buf = d,
								 .size = sh->size, .off = (off_t)sh->off };
				struct gdx_file_batch_event ev;
				struct gdx_file_batch *bt;

				assert_int_equal(gdx_file_batch_create(drv, 1, &bt), 0);
				assert_int_equal(gdx_file_batch_submit(bt, &bio, 1), 0);
				assert_int_equal(gdx_file_batch_wait(bt, 1, &ev, 1, 5000), 1);
				got = ev.result;
				gdx_file_batch_destroy(bt);
			} else {
				got = gdx_file_write(f, d, sh->size, (off_t)sh->off);
			}
			assert_int_equal(got, -EBADF);
			/* Nothing of the aligned middle was written. */
			assert_int_equal(pread(pfd, back, hi - lo, (off_t)lo), (ssize_t)(hi - lo));
			assert_memory_equal(back, ref + lo, hi - lo);
			assert_int_equal(gdx_file_close(f), 0);
		}
	}
	/* Unaligned writes into a cached file, spans of 2 MiB and more. */
	for (unsigned b = 0; b < 2; b++) {
		struct gdx_file *f = open_path(disk_path, O_RDWR | O_DIRECT, 0, bes[b]);

		for (unsigned i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
			const struct odshape *sh = &shapes[i];
			size_t lo = sh->off & ~(size_t)4095;
			size_t n = ((sh->off + sh->size + 4095) & ~(size_t)4095) - lo;
			void *a;

			assert_int_equal(pread(pfd, back, cap, 0), (ssize_t)cap);
			t_fill(pat, sh->size, i + 200 + b);
			assert_int_equal(gdx_memcpy(dev, d, pat, sh->size), 0);
			assert_int_equal(gdx_file_write(f, d, sh->size, (off_t)sh->off),
					 (ssize_t)sh->size);
			assert_int_equal(pread(pfd, back, sh->size, (off_t)sh->off),
					 (ssize_t)sh->size);
			assert_memory_equal(back, pat, sh->size);
			assert_int_equal(posix_memalign(&a, 4096, n), 0);
			assert_int_equal(gdx_file_read(f, a, n, (off_t)lo), (ssize_t)n);
			assert_memory_equal((char *)a + (sh->off - lo), pat, sh->size);
			assert_memory_equal(a, ref + lo, sh->off - lo);
			assert_memory_equal((char *)a + (sh->off - lo) + sh->size,
					    ref + sh->off + sh->size, n - (sh->off - lo) - sh->size);
			free(a);
			assert_int_equal(pwrite(pfd, ref + sh->off, sh->size, (off_t)sh->off),
					 (ssize_t)sh->size);
		}
		assert_int_equal(gdx_file_close(f), 0);
	}
	close(pfd);
	gdx_device_free(dev, d);
	free(pat);
	free(back);
}

/*
 * Opens fd on backend be as a handle whose buffered twin cannot be made: the
 * soft descriptor limit is the lowest free descriptor while it opens, so the
 * twin's open fails with EMFILE (as in a process out of descriptors).
 */
static struct gdx_file *open_no_twin(int fd, const char *be, unsigned flags)
{
	struct gdx_file_opts o;
	struct rlimit rl, low;
	struct gdx_file *g;
	int spare = open("/dev/null", O_RDONLY | O_CLOEXEC), ret;

	assert_true(spare >= 0);
	close(spare);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	low = rl;
	low.rlim_cur = (rlim_t)spare;
	gdx_file_opts_init(&o, sizeof(o));
	o.backend = be;
	o.flags = flags;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	ret = gdx_file_open_fd(drv, fd, &o, &g);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(ret, 0);
	assert_int_equal(g->buffered_fd, -EMFILE);
	return g;
}

/* The record of an I/O that went O_DIRECT on the descriptor itself, and says why. */
static void assert_no_twin_direct(const char *why)
{
	assert_non_null(strstr(why, "O_DIRECT"));
	assert_non_null(strstr(why, strerror(EMFILE)));
	assert_null(strstr(why, "buffered"));
	assert_null(strstr(why, "through a second open"));
}

/*
 * An O_DIRECT descriptor whose buffered twin could not be opened: every I/O
 * that can go on the descriptor itself does, on both backends and with
 * O_DIRECT turned off too (the descriptor has it, there is no other), and
 * says so: aligned synchronous, batch, stream-ordered and read-ahead I/O from
 * host, pinned and device memory, and uring's device reads at any offset
 * (an aligned superset into its bounce buffers).  What needs the twin (an
 * unaligned part of host I/O or of a write, of posix reads, of stream-ordered
 * I/O) fails with EINVAL, saying why, and leaves the file as it was.
 */
static void odirect_no_twin(void **state)
{
	static const char *const bes[] = { "posix", "uring" };
	unsigned char *pat = malloc(1 << 20), *back = malloc(1 << 20), *h;
	struct gdx_file_batch_event ev;
	struct gdx_file_io_info info;
	struct gdx_file_batch_io bio;
	struct gdx_file_batch *bt;
	struct gdx_stream *s;
	int fds, fd, pfd;
	void *hostmem, *d;

	(void)state;
	fds = count_fds();
	fd = open_odirect_or_skip(pat, back);
	pfd = open(disk_path, O_RDWR | O_CLOEXEC);
	assert_true(pfd >= 0);
	assert_int_equal(posix_memalign(&hostmem, 4096, 1 << 20), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 1 << 20, (void **)&h), 0);
	assert_int_equal(gdx_device_malloc(dev, 1 << 20, &d), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_file_batch_create(drv, 1, &bt), 0);
	t_fill(pat, 1 << 20, 77);
	for (unsigned i = 0; i < 4; i++) {
		const char *be = bes[i & 1];
		bool ur = i & 1;
		/* Hot data must not be read buffered either: no registration. */
		struct gdx_file *g = open_no_twin(fd, be, GDX_FILE_NO_PAGECACHE |
						  (i & 2 ? GDX_FILE_NO_ODIRECT : 0));
		size_t size, wsize;
		off_t off, woff;
		ssize_t done;

		/* Aligned synchronous I/O from each kind of memory. */
		for (unsigned k = 0; k < 3; k++) {
			void *mem = k == 0 ? hostmem : k == 1 ? (void *)h : d;

			memset(back, 0, 8192);
			assert_int_equal(gdx_file_read_ex(g, mem, 8192, 4096, &info), 8192);
			if (k == 2)
				assert_int_equal(gdx_memcpy(dev, back, d, 8192), 0);
			else
				memcpy(back, mem, 8192);
			assert_memory_equal(back, ref + 4096, 8192);
			assert_no_twin_direct(info.why);
			if (k == 2)
				assert_int_equal(gdx_memcpy(dev, d, pat, 8192), 0);
			else
				memcpy(mem, pat, 8192);
			assert_int_equal(gdx_file_write_ex(g, mem, 8192, 4096, &info), 8192);
			assert_no_twin_direct(info.why);
			assert_int_equal(pread(pfd, back, 8192, 4096), 8192);
			assert_memory_equal(back, pat, 8192);
			assert_int_equal(pwrite(pfd, ref + 4096, 8192, 4096), 8192);
			/* Aligned up to an end of file that is not: short, like pread. */
			assert_int_equal(gdx_file_read(g, mem, 16384, 8 << 20),
					 (ssize_t)(FSIZE - (8 << 20)));
		}

		/* Unaligned host I/O and writes need the twin: refused, file intact. */
		memcpy((char *)hostmem + 1, pat, 5000);
		assert_int_equal(gdx_file_write_ex(g, (char *)hostmem + 1, 5000, 4096, &info),
				 -EINVAL);
		assert_non_null(strstr(info.why, strerror(EMFILE)));
		assert_int_equal(gdx_file_read_ex(g, hostmem, 5000, 3, &info), -EINVAL);
		assert_non_null(strstr(info.why, strerror(EMFILE)));
		assert_int_equal(gdx_memcpy(dev, d, pat, 8192), 0);
		assert_int_equal(gdx_file_write_ex(g, d, 5000, 4096, &info), -EINVAL);
		assert_non_null(strstr(info.why, strerror(EMFILE)));
		assert_int_equal(gdx_file_write_ex(g, d, 8192, 4095, &info), -EINVAL);
		assert_int_equal(pread(pfd, back, 16384, 0), 16384);
		assert_memory_equal(back, ref, 16384);

		/* Device reads at any offset: uring reads an aligned superset, posix cannot. */
		if (ur) {
			check_dev_read(g, d, back, 54321, 300001, &info);
			assert_no_twin_direct(info.why);
		} else {
			assert_int_equal(gdx_file_read_ex(g, d, 300001, 54321, &info), -EINVAL);
			assert_non_null(strstr(info.why, strerror(EMFILE)));
		}

		/* Batch: an aligned read goes, an unaligned one fails alone. */
		bio = (struct gdx_file_batch_io){ .file = g, .op = GDX_FILE_READ, .buf = hostmem,
						  .size = 4096, .off = 8192, .cookie = &bio };
		assert_int_equal(gdx_file_batch_submit(bt, &bio, 1), 0);
		assert_int_equal(gdx_file_batch_wait(bt, 1, &ev, 1, 5000), 1);
		assert_int_equal(ev.result, 4096);
		assert_memory_equal(hostmem, ref + 8192, 4096);
		assert_no_twin_direct(ev.info.why);
		bio.buf = (char *)hostmem + 5;
		assert_int_equal(gdx_file_batch_submit(bt, &bio, 1), 0);
		assert_int_equal(gdx_file_batch_wait(bt, 1, &ev, 1, 5000), 1);
		assert_int_equal(ev.result, -EINVAL);
		assert_non_null(strstr(ev.info.why, strerror(EMFILE)));

		/* Stream-ordered: aligned into device memory, and up to end of file. */
		size = 65536;
		off = 8192;
		done = 0;
		assert_int_equal(gdx_file_read_async(g, d, &size, &off, &done, s), 0);
		assert_int_equal(gdx_memcpy_async(dev, back, d, 65536, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(done, 65536);
		assert_memory_equal(back, ref + 8192, 65536);
		assert_int_equal(gdx_file_info(g, &info), 0);
		assert_no_twin_direct(info.why);
		size = 16384;
		off = 8 << 20;
		assert_int_equal(gdx_file_read_async(g, d, &size, &off, &done, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(done, (ssize_t)(FSIZE - (8 << 20)));
		/* An aligned write from pinned memory. */
		memcpy(h, pat, 4096);
		wsize = 4096;
		woff = 12288;
		done = 0;
		assert_int_equal(gdx_file_write_async(g, h, &wsize, &woff, &done, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(done, 4096);
		assert_int_equal(pread(pfd, back, 4096, 12288), 4096);
		assert_memory_equal(back, pat, 4096);
		assert_int_equal(pwrite(pfd, ref + 12288, 4096, 12288), 4096);
		/* Unaligned: fails when it runs, with nothing written. */
		wsize = 100;
		woff = 12288;
		assert_int_equal(gdx_file_write_async(g, h, &wsize, &woff, &done, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(done, -EINVAL);
		assert_int_equal(gdx_file_info(g, &info), 0);
		assert_non_null(strstr(info.why, strerror(EMFILE)));
		assert_int_equal(pread(pfd, back, 4096, 12288), 4096);
		assert_memory_equal(back, ref + 12288, 4096);

		/* Read ahead: aligned, claimed by an early read; unaligned refused. */
		assert_int_equal(gdx_file_read_ahead(g, 8192, 16384), 0);
		assert_int_equal(gdx_file_ahead_wait(g), 1);
		size = 8192;
		off = 16384;
		done = 0;
		assert_int_equal(gdx_file_read_async_ex(g, d, &size, &off, &done, s,
							GDX_FILE_ASYNC_EARLY), 0);
		assert_int_equal(gdx_memcpy_async(dev, back, d, 8192, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(done, 8192);
		assert_memory_equal(back, ref + 16384, 8192);
		assert_int_equal(gdx_file_read_ahead(g, 5000, 16384), -EINVAL);
		assert_int_equal(gdx_file_close(g), 0);
	}
	gdx_file_batch_destroy(bt);
	gdx_stream_destroy(s);
	close(pfd);
	close(fd);
	gdx_device_free(dev, d);
	/* after the free: an emulated allocation keeps its memfd where udmabuf is */
	assert_int_equal(count_fds(), fds);
	gdx_pinned_free(dev, h);
	free(hostmem);
	free(pat);
	free(back);
}

/*
 * Reads ahead of different ranges run on different workers at once, and the
 * handle's figures say how its reads ran.
 */
static void read_ahead_concurrent(void **state)
{
	struct gdx_file *f = open_path(shm_path, O_RDONLY, 0, NULL);
	struct meet m = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 2, false, false };
	struct gdx_file_async_stats as = { .struct_size = sizeof(as) };
	struct gdx_stream *s;
	unsigned char *h;
	ssize_t done[3];
	size_t size = 65536;
	off_t off[3];
	void *d;

	(void)state;
	assert_int_equal(gdx_file_async_stats(NULL, &as, 0), -EINVAL);
	assert_int_equal(gdx_file_async_stats(f, NULL, 0), -EINVAL);
	assert_int_equal(gdx_file_async_stats(f, &as, 0x80), -EINVAL);
	as.struct_size = 0;
	assert_int_equal(gdx_file_async_stats(f, &as, 0), -EINVAL);
	as.struct_size = sizeof(as);
	assert_int_equal(gdx_file_async_stats(f, &as, 0), 0);
	assert_int_equal(as.reads, 0);
	assert_int_equal(gdx_pinned_alloc(dev, 3 * size, (void **)&h), 0);
	assert_int_equal(gdx_device_malloc(dev, 3 * size, &d), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);

	gdx_file_set_read_hook(drv, meet_hook, &m);
	assert_int_equal(gdx_file_read_ahead(f, size, 0), 0);
	assert_int_equal(gdx_file_read_ahead(f, size, 100000), 0);
	assert_int_equal(gdx_file_ahead_wait(f), 2);
	gdx_file_set_read_hook(drv, NULL, NULL);
	assert_false(m.gave_up);
	assert_true(m.met);
	for (int i = 0; i < 3; i++) {
		off[i] = i == 2 ? 200000 : i * 100000;
		assert_int_equal(gdx_file_read_async_ex(f, (char *)d + i * size, &size, &off[i],
							&done[i], s, GDX_FILE_ASYNC_EARLY), 0);
	}
	assert_int_equal(gdx_memcpy_async(dev, h, d, 3 * size, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(done[i], (ssize_t)size);
		assert_memory_equal(h + i * size, ref + off[i], size);
	}
	assert_int_equal(gdx_file_async_stats(f, &as, GDX_FILE_STATS_RESET), 0);
	assert_int_equal(as.reads, 3);
	assert_true(as.max_inflight >= 2);
	assert_int_equal(as.early, 3);
	assert_int_equal(as.ahead_hits, 2);
	assert_int_equal(as.ahead_late, 0);
	assert_true(as.busy_ns > 0 && as.busy_ns <= as.read_ns);
	assert_int_equal(gdx_file_async_stats(f, &as, 0), 0);
	assert_int_equal(as.reads, 0);
	assert_int_equal(as.busy_ns, 0);
	gdx_stream_destroy(s);
	gdx_file_close(f);
	gdx_device_free(dev, d);
	gdx_pinned_free(dev, h);
}

static void errors(void **state)
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

static int enospc_teardown(void **state)
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
static void enospc(void **state)
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

static void buf_register(void **state)
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

static void driver_choice(void **state)
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
static void context_failure(void **state)
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

static void no_leaks(void **state)
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
static void driver_counters(void **state)
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
static void split_pieces_on_grid(void **state)
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
static void fixed_bufs_over_1g(void **state)
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
