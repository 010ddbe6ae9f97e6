/* SPDX-License-Identifier: MIT */
/*
 * Latency of one stream-ordered file read, hop by hop, against the two
 * ceilings measured in the same run: pread of the same bytes into pinned
 * memory (the storage) and the pinned -> device copy (the bus).
 *
 *   pread, h2d            the ceilings (host clock; device events)
 *   file_read             gdx_file_read into pinned memory on this thread: the
 *                         worker's own I/O cost
 *   hostfn                a host function that does nothing (stream time)
 *   hostfn+wait           a host function that stores a pinned word, and a
 *                         stream wait on that word
 *   hostfn+pool+wait      the host function hands the store to a worker thread
 *                         (condvar wake, or a worker polling with --spin-us)
 *   async                 gdx_file_read_async into device memory (in stream order)
 *   async held / early held  the same with the stream held on a word for --hold-us
 *                         first, as in a pipeline whose load stream is busy: the
 *                         in-order read still starts when the stream gets there,
 *                         an early one (GDX_FILE_ASYNC_EARLY) at the call, so
 *                         only the copy is left on the stream
 * Stream times are between device events around the work; "dispatch" is the
 * host clock from submission on an idle stream to the host function's start.
 *
 * Usage: bench_stream_read [--file PATH] [--size N] [--iters N] [--spin-us T]
 *                          [--hold-us T]   (GDX_DEVICE picks the device)
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/device.h>
#include <gdx/file.h>

#include "common/tpool.h"
#include "common/util.h"
#include "sort.h"

struct ctx {
	struct gdx_device *dev;
	struct gdx_stream *s;
	struct gdx_event *e0, *e1;
	uint32_t *word;		/* pinned: [0] hop word, [1] hold word */
	uint32_t seq, hold;
	struct gdx_tpool *pool;
	uint64_t fn_ns;		/* host clock when the last host function ran */
	double *v;
	unsigned iters;
};

static void row(const char *what, double *v, unsigned n, double ceiling)
{
	bench_sort(v, n);
	printf("%-22s %9.1f %9.1f", what, v[n / 2], v[n * 9 / 10]);
	if (ceiling > 0)
		printf("   ceiling %7.1f  ratio %5.2f", ceiling, v[n / 2] / ceiling);
	printf("\n");
}

static double stream_us(struct ctx *c)
{
	float ms = -1;

	if (gdx_stream_synchronize(c->s) || gdx_event_elapsed_ms(c->e0, c->e1, &ms))
		return -1;
	return ms * 1e3;
}

static void fn_noop(void *arg)
{
	struct ctx *c = arg;

	c->fn_ns = gdx_now_ns();
}

static void job_store(void *arg)
{
	struct ctx *c = arg;

	__atomic_store_n(&c->word[0], c->seq, __ATOMIC_RELEASE);
}

static void fn_store(void *arg)
{
	struct ctx *c = arg;

	c->fn_ns = gdx_now_ns();
	job_store(c);
}

static void fn_pool(void *arg)
{
	struct ctx *c = arg;

	c->fn_ns = gdx_now_ns();
	if (gdx_tpool_submit(c->pool, job_store, c))
		job_store(c);
}

/* events around [host function fn, wait on the hop word] on an idle stream */
static int hop(struct ctx *c, gdx_host_fn fn, bool wait, double *dispatch)
{
	for (unsigned i = 0; i < c->iters; i++) {
		uint64_t t0;

		c->seq++;
		t0 = gdx_now_ns();
		if (gdx_event_record(c->e0, c->s) || gdx_stream_launch_host_func(c->s, fn, c) ||
		    (wait && gdx_stream_wait_value32(c->s, &c->word[0], c->seq)) ||
		    gdx_event_record(c->e1, c->s))
			return -1;
		c->v[i] = stream_us(c);
		if (c->v[i] < 0)
			return -1;
		dispatch[i] = (double)(c->fn_ns - t0) / 1e3;
	}
	return 0;
}

/* events around one async read into dev; held: the stream first waits hold_us on a word */
static int async_rd(struct ctx *c, struct gdx_file *f, void *dev, size_t size, off_t span,
		    unsigned flags, double hold_us, double *wall)
{
	static size_t sz;
	static off_t off;
	static ssize_t done;

	for (unsigned i = 0; i < c->iters; i++) {
		uint64_t t0 = gdx_now_ns();

		sz = size;
		off = (off_t)((i * size) % (size_t)span);
		if (hold_us > 0 && gdx_stream_wait_value32(c->s, &c->word[1], ++c->hold))
			return -1;
		if (gdx_event_record(c->e0, c->s) ||
		    gdx_file_read_async_ex(f, dev, &sz, &off, &done, c->s, flags) ||
		    gdx_event_record(c->e1, c->s))
			return -1;
		if (hold_us > 0) {
			while ((double)(gdx_now_ns() - t0) < hold_us * 1e3)
				;
			__atomic_store_n(&c->word[1], c->hold, __ATOMIC_RELEASE);
		}
		c->v[i] = stream_us(c);
		wall[i] = (double)(gdx_now_ns() - t0) / 1e3;
		if (c->v[i] < 0 || done != (ssize_t)size) {
			fprintf(stderr, "bench_stream_read: async read: %zd of %zu\n", done, size);
			return -1;
		}
	}
	return 0;
}

static int make_file(const char *path, size_t bytes)
{
	char *b = malloc(1 << 20);
	int fd = open(path, O_RDWR | O_CREAT, 0644);
	struct stat st;
	int ret = 0;

	if (fd < 0 || !b || fstat(fd, &st)) {
		ret = -1;
		goto out;
	}
	for (size_t o = (size_t)st.st_size; o < bytes && !ret; o += 1 << 20) {
		for (size_t i = 0; i < (1u << 20); i++)
			b[i] = (char)(i * 7 + o / 4096);
		ret = pwrite(fd, b, 1 << 20, (off_t)o) == 1 << 20 ? 0 : -1;
	}
out:
	if (fd >= 0)
		close(fd);
	free(b);
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "file", 1, NULL, 'f' }, { "size", 1, NULL, 's' }, { "iters", 1, NULL, 'n' },
		{ "spin-us", 1, NULL, 'p' }, { "hold-us", 1, NULL, 'H' }, { NULL, 0, NULL, 0 },
	};
	const char *tmp = getenv("TMPDIR");
	char path[512], spin[16];
	size_t size = 256 << 10, span = 64 << 20;
	unsigned spin_us = 200;
	double hold_us = 300, pread_us, h2d_us, *aux;
	struct ctx c = { .iters = 200 };
	struct gdx_file_driver *drv[2] = { NULL, NULL };
	struct gdx_file *f[2] = { NULL, NULL };
	void *pin = NULL, *dev = NULL;
	int opt, fd = -1, ret = 1;

	snprintf(path, sizeof(path), "%s/gdx_stream_read.dat", tmp ? tmp : "/tmp");
	while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (opt) {
		case 'f': snprintf(path, sizeof(path), "%s", optarg); break;
		case 's': size = strtoul(optarg, NULL, 0) << (strchr(optarg, 'K') ? 10 : 0); break;
		case 'n': c.iters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'p': spin_us = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'H': hold_us = atof(optarg); break;
		default:
			fprintf(stderr, "usage: bench_stream_read [--file P] [--size N[K]] [--iters N] "
				"[--spin-us T] [--hold-us T]\n");
			return 2;
		}
	}
	if (!size || size > span || !c.iters || make_file(path, span)) {
		fprintf(stderr, "bench_stream_read: bad size, or cannot make %s\n", path);
		return 1;
	}
	c.v = calloc(c.iters, sizeof(double));
	aux = calloc(c.iters, sizeof(double));
	if (!c.v || !aux || gdx_device_open(NULL, &c.dev) || gdx_stream_create(c.dev, &c.s) ||
	    gdx_event_create(c.dev, GDX_EVENT_TIMING, &c.e0) ||
	    gdx_event_create(c.dev, GDX_EVENT_TIMING, &c.e1) ||
	    gdx_pinned_alloc(c.dev, size, &pin) || gdx_device_malloc(c.dev, size, &dev) ||
	    gdx_pinned_alloc(c.dev, 4096, (void **)&c.word) || gdx_tpool_create(1, "bench", &c.pool))
		goto out;
	memset(c.word, 0, 8);
	printf("# %s, %zu bytes from %s, %u iterations; times in us: median p90\n",
	       gdx_device_name(c.dev), size, path, c.iters);

	fd = open(path, O_RDONLY);
	for (unsigned i = 0; i < c.iters && fd >= 0; i++) {
		uint64_t t0 = gdx_now_ns();

		if (pread(fd, pin, size, (off_t)((i * size) % span)) != (ssize_t)size)
			goto out;
		c.v[i] = (double)(gdx_now_ns() - t0) / 1e3;
	}
	row("pread (ceiling)", c.v, c.iters, 0);
	pread_us = c.v[c.iters / 2];
	for (unsigned i = 0; i < c.iters; i++) {
		if (gdx_event_record(c.e0, c.s) || gdx_memcpy_async(c.dev, dev, pin, size, c.s) ||
		    gdx_event_record(c.e1, c.s) || (c.v[i] = stream_us(&c)) < 0)
			goto out;
	}
	row("h2d (ceiling)", c.v, c.iters, 0);
	h2d_us = c.v[c.iters / 2];

	/* Two drivers: workers sleeping (spin 0), and polling for spin_us. */
	snprintf(spin, sizeof(spin), "%u", spin_us);
	for (int k = 0; k < 2; k++) {
		struct gdx_file_opts fo;
		static size_t sz;
		static off_t off;
		static ssize_t done;

		if (gdx_config_set("file.spin_us", k ? spin : "0") ||
		    gdx_file_driver_open(c.dev, NULL, &drv[k]))
			goto out;
		gdx_file_opts_init(&fo, sizeof(fo));
		if (gdx_file_open(drv[k], path, &fo, &f[k]))
			goto out;
		/* Starts the driver's workers with this spin. */
		sz = size;
		off = 0;
		if (gdx_file_read_async(f[k], dev, &sz, &off, &done, c.s) ||
		    gdx_stream_synchronize(c.s))
			goto out;
	}
	for (unsigned i = 0; i < c.iters; i++) {
		uint64_t t0 = gdx_now_ns();

		if (gdx_file_read(f[0], pin, size, (off_t)((i * size) % span)) != (ssize_t)size)
			goto out;
		c.v[i] = (double)(gdx_now_ns() - t0) / 1e3;
	}
	row("file_read", c.v, c.iters, pread_us);

	if (hop(&c, fn_noop, false, aux))
		goto out;
	row("hostfn", c.v, c.iters, 0);
	row("  dispatch", aux, c.iters, 0);
	if (hop(&c, fn_store, true, aux))
		goto out;
	row("hostfn+wait", c.v, c.iters, 0);
	for (int k = 0; k < 2; k++) {
		char name[40];

		gdx_tpool_set_spin(c.pool, k ? spin_us : 0, 1);
		if (hop(&c, fn_pool, true, aux))
			goto out;
		snprintf(name, sizeof(name), "hostfn+pool+wait s%u", k ? spin_us : 0);
		row(name, c.v, c.iters, 0);
	}
	for (int k = 0; k < 2; k++) {
		char name[40];

		if (async_rd(&c, f[k], dev, size, (off_t)span, 0, 0, aux))
			goto out;
		snprintf(name, sizeof(name), "async s%u", k ? spin_us : 0);
		row(name, c.v, c.iters, pread_us + h2d_us);
		row("  wall", aux, c.iters, 0);
	}
	for (int k = 0; k < 2; k++) {
		char name[40];

		if (async_rd(&c, f[1], dev, size, (off_t)span, k ? GDX_FILE_ASYNC_EARLY : 0, hold_us,
			     aux))
			goto out;
		snprintf(name, sizeof(name), "%s held %.0f", k ? "early" : "async", hold_us);
		row(name, c.v, c.iters, k ? h2d_us : pread_us + h2d_us);
	}
	ret = 0;
out:
	if (ret)
		fprintf(stderr, "bench_stream_read: failed\n");
	if (fd >= 0)
		close(fd);
	if (c.s)
		gdx_stream_synchronize(c.s);
	for (int k = 0; k < 2; k++) {
		if (f[k])
			gdx_file_close(f[k]);
		if (drv[k])
			gdx_file_driver_close(drv[k]);
	}
	gdx_tpool_destroy(c.pool);
	if (c.word)
		gdx_pinned_free(c.dev, c.word);
	if (dev)
		gdx_device_free(c.dev, dev);
	if (pin)
		gdx_pinned_free(c.dev, pin);
	if (c.e0)
		gdx_event_destroy(c.e0);
	if (c.e1)
		gdx_event_destroy(c.e1);
	if (c.s)
		gdx_stream_destroy(c.s);
	if (c.dev)
		gdx_device_close(c.dev);
	free(c.v);
	free(aux);
	return ret;
}
