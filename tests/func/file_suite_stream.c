/* SPDX-License-Identifier: MIT */
/*
 * gdx_file_* (test_file.c): stream-ordered I/O and read-ahead.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "meet.h"
#include "test.h"

#include "file/ahead.h"

#include <gdx/gdx.h>
#include "plugin/file.h"
#include "file_suite.h"

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
void stream_ordered(void **state)
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
void stream_ordered_early(void **state)
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
void read_ahead(void **state)
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
void stream_ordered_odirect(void **state)
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

/*
 * Reads ahead of different ranges run on different workers at once, and the
 * handle's figures say how its reads ran.
 */
void read_ahead_concurrent(void **state)
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
