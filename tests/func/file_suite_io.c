/* SPDX-License-Identifier: MIT */
/*
 * gdx_file_* (test_file.c): reads on every backend into every
 * memory kind, path reporting, refused registrations, strict mode, writes,
 * sparse files past 4 GiB, read-only handles, many threads, batches.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#include "common/stats.h"
#include "file/file_int.h"

#include <gdx/gdx.h>
#include "file_suite.h"

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

void reads_uring_disk(void **state)
{
	(void)state;
	random_reads(disk_path, "uring", 0);
	random_reads(disk_path, "uring", GDX_FILE_NO_PAGECACHE);
	random_reads(disk_path, "uring", GDX_FILE_NO_ODIRECT | GDX_FILE_NO_PAGECACHE);
}

void reads_uring_tmpfs(void **state)
{
	(void)state;
	random_reads(shm_path, "uring", 0);
	random_reads(shm_path, "uring", GDX_FILE_NO_PAGECACHE);
}

void reads_posix(void **state)
{
	(void)state;
	random_reads(disk_path, "posix", 0);
	random_reads(shm_path, "posix", 0);
}

/* The path record says what happened, per I/O and per handle. */
void path_reporting(void **state)
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
void register_refused(void **state)
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

void strict_mode(void **state)
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

void writes(void **state)
{
	const char *b = getenv("GDX_BUILDDIR");

	(void)state;
	write_roundtrip(b ? b : "/tmp", "uring", 0);
	write_roundtrip(b ? b : "/tmp", "uring", GDX_FILE_NO_ODIRECT);
	write_roundtrip("/dev/shm", "uring", 0);
	write_roundtrip(b ? b : "/tmp", "posix", 0);
}

/* A sparse file past 4 GiB: offsets above 32 bits, holes read as zeros. */
void sparse_4g(void **state)
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

void read_only(void **state)
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

void many_threads(void **state)
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

void batch(void **state)
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
