/* SPDX-License-Identifier: MIT */
/*
 * Stream-ordered file I/O whose stream waits on the I/O's gate before the
 * worker is done: the worker must not call into the device on its way to the
 * gate (on CUDA a context synchronization holding the driver's lock, such as
 * the first launch of a kernel, then waits for the gate while the worker
 * waits for the lock), and a pipeline whose load stream reaches every gate
 * first (no kernel before the read) still runs every batch, in order.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>
#include <gdx/file.h>
#include <gdx/pipeline.h>

#include "file/ahead.h"
#include "gpu/device.h"

#define SZ ((size_t)64 << 10)
#define NREAD 8
#define NBATCH 60
#define PEEK 256	/* bytes of each batch the last stage copies out */

static struct gdx_device *dev;

/* A file of n bytes of t_fill(seed 7), unlinked; *data gets a copy. */
static int make_file(size_t n, unsigned char **data)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/gdx_gate_XXXXXX", dir);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	*data = malloc(n);
	assert_non_null(*data);
	t_fill(*data, n, 7);
	assert_int_equal(pwrite(fd, *data, n, 0), (ssize_t)n);
	return fd;
}

/* The worker's device calls so far, at the start of each read (one worker: all on it). */
struct calls_seen {
	unsigned n;
	uint64_t at[NREAD + 1];
};

static void count_hook(void *arg)
{
	struct calls_seen *c = arg;

	if (c->n < NREAD + 1)
		c->at[c->n] = gdx_device_calls();
	c->n++;
}

static void worker_no_device_calls(void **state)
{
	struct calls_seen seen = { 0 };
	struct gdx_file_io_info info;
	struct gdx_file_driver *drv;
	struct gdx_stream *s;
	struct gdx_file *f;
	unsigned char *data, *back = malloc(SZ), *pin;
	size_t size = SZ;
	off_t off;
	ssize_t done;
	void *dbuf;
	int fd;

	(void)state;
	fd = make_file((size_t)NREAD * SZ, &data);
	/* One worker runs every read, so the count between two hooks is one read's. */
	setenv("GDX_FILE_WORKERS", "1", 1);
	assert_int_equal(gdx_file_driver_open(dev, NULL, &drv), 0);
	unsetenv("GDX_FILE_WORKERS");
	assert_int_equal(gdx_file_open_fd(drv, fd, NULL, &f), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_device_malloc(dev, SZ, &dbuf), 0);
	assert_int_equal(gdx_pinned_alloc(dev, SZ, (void **)&pin), 0);
	gdx_file_set_read_hook(drv, count_hook, &seen);

	/*
	 * In stream order into device memory (staged), early, a read ahead
	 * taken over, into pinned memory; the last read only closes the count
	 * of the one before.
	 */
	for (unsigned i = 0; i <= NREAD; i++) {
		unsigned k = i % NREAD;
		void *dst = k % 4 == 3 ? (void *)pin : dbuf;
		unsigned flags = k % 4 == 1 || k % 4 == 2 ? GDX_FILE_ASYNC_EARLY : 0;

		off = (off_t)((size_t)k * SZ);
		done = -1;
		if (k % 4 == 2)
			assert_int_equal(gdx_file_read_ahead(f, SZ, off), 0);
		assert_int_equal(gdx_file_read_async_ex(f, dst, &size, &off, &done, s, flags), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(done, (ssize_t)SZ);
		if (dst == dbuf)
			assert_int_equal(gdx_memcpy(dev, back, dbuf, SZ), 0);
		else
			memcpy(back, pin, SZ);
		assert_memory_equal(back, data + (size_t)k * SZ, SZ);
	}
	gdx_file_set_read_hook(drv, NULL, NULL);
	assert_int_equal(seen.n, NREAD + 1);
	for (unsigned i = 0; i < NREAD; i++) {
		if (seen.at[i + 1] != seen.at[i])
			print_message("read %u: %llu device calls on the worker\n", i,
				      (unsigned long long)(seen.at[i + 1] - seen.at[i]));
		assert_int_equal(seen.at[i + 1] - seen.at[i], 0);
	}
	assert_int_equal(gdx_file_info(f, &info), 0);
	assert_int_equal(info.path, GDX_FILE_PATH_HOST);
	assert_non_null(strstr(info.why, "stream-ordered pread on a file worker"));

	/* A failed read still opens the gate and reports: a handle opened write-only. */
	{
		struct gdx_file_opts fo;
		struct gdx_file *w;
		char path[64];

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		gdx_file_opts_init(&fo, sizeof(fo));
		fo.oflags = O_WRONLY;
		assert_int_equal(gdx_file_open(drv, path, &fo, &w), 0);
		off = 0;
		done = 0;
		assert_int_equal(gdx_file_read_async(w, pin, &size, &off, &done, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(done, -EBADF);
		gdx_file_close(w);
	}
	gdx_pinned_free(dev, pin);
	gdx_device_free(dev, dbuf);
	gdx_stream_destroy(s);
	gdx_file_close(f);
	gdx_file_driver_close(drv);
	close(fd);
	free(data);
	free(back);
}

/* Holds each read 300 us, so the load stream is at the gate before the read is done. */
static void slow_hook(void *arg)
{
	(void)arg;
	nanosleep(&(struct timespec){ .tv_nsec = 300000 }, NULL);
}

struct peek {
	unsigned char *out;	/* pinned: PEEK bytes of every batch */
};

/* A device stage standing in for compute: the slot's buffer, shifted in place. */
static int shift_stage(const struct gdx_pipeline_job *job, struct gdx_stream *st, void *arg)
{
	(void)arg;
	return gdx_memcpy_async(dev, job->buf, (char *)job->buf + PEEK, PEEK, st);
}

static int peek_stage(const struct gdx_pipeline_job *job, struct gdx_stream *st, void *arg)
{
	struct peek *pk = arg;

	return gdx_memcpy_async(dev, pk->out + job->batch * PEEK, job->buf, PEEK, st);
}

/*
 * The training step's devonly-nopad shape: load (no kernel before or after
 * the read) -> device -> device, slots handed back by event waits, every
 * read slower than the stream's way to its gate.
 */
static void pipeline_gate_first(void **state)
{
	const size_t wrap = (size_t)10 * SZ;
	struct gdx_file_async_stats as = { .struct_size = sizeof(as) };
	struct gdx_pipeline_load_opts lo;
	struct gdx_pipeline_opts po;
	struct gdx_stage_desc d;
	struct gdx_file_driver *drv;
	struct gdx_pipeline *p;
	struct gdx_file *f;
	struct peek pk;
	unsigned char *data;
	int fd;

	(void)state;
	fd = make_file(wrap, &data);
	assert_int_equal(gdx_file_driver_open(dev, NULL, &drv), 0);
	assert_int_equal(gdx_file_open_fd(drv, fd, NULL, &f), 0);
	assert_int_equal(gdx_pinned_alloc(dev, (size_t)NBATCH * PEEK, (void **)&pk.out), 0);
	memset(pk.out, 0, (size_t)NBATCH * PEEK);
	gdx_file_set_read_hook(drv, slow_hook, NULL);

	for (int in_order = 0; in_order < 2; in_order++) {
		gdx_pipeline_opts_init(&po, sizeof(po));
		po.nslots = 3;
		po.slot_bytes = SZ;
		assert_int_equal(gdx_pipeline_create(dev, &po, &p), 0);
		gdx_pipeline_load_opts_init(&lo, sizeof(lo));
		lo.wrap = wrap;
		lo.flags = in_order ? GDX_PIPELINE_LOAD_IN_ORDER : 0;
		assert_int_equal(gdx_pipeline_add_file_load(p, f, &lo), 0);
		gdx_stage_desc_init(&d, sizeof(d));
		d.kind = GDX_STAGE_DEVICE;
		d.name = "shift";
		d.enqueue = shift_stage;
		assert_int_equal(gdx_pipeline_add_stage(p, &d), 1);
		d.name = "peek";
		d.enqueue = peek_stage;
		d.arg = &pk;
		assert_int_equal(gdx_pipeline_add_stage(p, &d), 2);
		assert_int_equal(gdx_file_async_stats(f, &as, GDX_FILE_STATS_RESET), 0);
		assert_int_equal(gdx_pipeline_run(p, NBATCH), 0);
		gdx_pipeline_destroy(p);
		for (unsigned b = 0; b < NBATCH; b++)
			assert_memory_equal(pk.out + (size_t)b * PEEK,
					    data + (size_t)b * SZ % wrap + PEEK, PEEK);
		memset(pk.out, 0, (size_t)NBATCH * PEEK);
		/* The first run's last 3 reads ahead are never claimed; they may still run. */
		assert_int_equal(gdx_file_ahead_wait(f), 3);
		assert_int_equal(gdx_file_async_stats(f, &as, 0), 0);
		assert_int_equal(as.inflight, 0);
		assert_int_equal(as.queued, 0);
		assert_int_equal(as.early, in_order ? 0 : NBATCH);
	}
	gdx_file_set_read_hook(drv, NULL, NULL);
	gdx_pinned_free(dev, pk.out);
	gdx_file_close(f);
	gdx_file_driver_close(drv);
	close(fd);
	free(data);
}

static int setup(void **state)
{
	(void)state;
	return gdx_device_open(NULL, &dev);
}

static int teardown(void **state)
{
	(void)state;
	gdx_device_close(dev);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(worker_no_device_calls),
		cmocka_unit_test(pipeline_gate_first),
	};

	gdx_log_set_level(GDX_LOG_ERROR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
