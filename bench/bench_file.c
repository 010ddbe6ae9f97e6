/* SPDX-License-Identifier: MIT */
/*
 * gdx bench file: file <-> device memory through gdx, against the ceilings
 * measured in the same run with the same I/O size, threads and depth:
 *
 *   (a) storage   the raw storage path into host memory: io_uring O_DIRECT
 *                 (cold), or buffered reads out of the page cache (hot), with
 *                 the caller's shape and, for I/Os over 1 MiB, also as 1 MiB
 *                 reads 64 deep per thread; the better of the two
 *   (b) h2d/d2h   pinned host <-> device copies of the same size
 *   (c) naive     pread into pageable memory, then a plain copy (or the reverse)
 *   (d) gdx       gdx_file_read/write (depth > 1: a gdx batch kept full)
 *
 * and prints each with its ratio to min(a, b) -- for hot reads to (b) alone:
 * page-cache data is memory the copy engine can read in place, so (a) bounds
 * only paths that copy it with the CPU.  Each mode is timed from a common start
 * to the end of the last thread's work, set-up and teardown excluded.  The
 * driver counters that moved during (d) follow, so a run shows where gdx's
 * time went.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <unistd.h>

#include <gdx/gdx.h>

#include "args.h"
#include "bench_file.h"
#include "ceiling.h"
#include "common/config.h"
#include "common/util.h"

enum mode { M_STORAGE, M_COPY, M_NAIVE, M_GDX, M_COUNT };
static const char *const mode_names[M_COUNT] = { "storage", "copy", "naive", "gdx" };

struct cfg {
	const char *path;
	bool write, rand, json, hot, no_naive;
	size_t io;
	size_t doff;		/* --dev-offset: device buffers start this far into their allocation */
	unsigned threads, depth;
	uint64_t bytes;		/* per measurement, all threads together */
	uint64_t fsize;
	struct gdx_device *dev;
	struct gdx_file_driver *drv;
	struct gdx_file *f;
	const char *backend;
};

struct thr {
	struct cfg *c;
	enum mode m;
	unsigned idx;
	int err;
	pthread_barrier_t *bar;
	uint64_t t_start;	/* when the work began, after the common barrier */
	uint64_t t_end;		/* when the work was done, before any teardown */
	struct gdx_file_io_info info;
};

/* The offset of this thread's k-th I/O. */
static off_t io_off(struct cfg *c, unsigned t, uint64_t k, uint64_t *seed)
{
	/* Offsets stay 4 KiB aligned so the O_DIRECT ceiling can use them too. */
	uint64_t per = GDX_ALIGN_DOWN(c->bytes / c->threads, 4096ull);
	uint64_t lim = GDX_ALIGN_DOWN(c->fsize - c->io, 4096ull) + 4096;

	if (c->rand) {
		uint64_t slots = (c->fsize - c->io) / 4096 + 1;

		*seed ^= *seed >> 12;
		*seed ^= *seed << 25;
		*seed ^= *seed >> 27;
		return (off_t)(((*seed * 2685821657736338717ull) % slots) * 4096);
	}
	return (off_t)(((uint64_t)t * per + k * c->io) % lim);
}

static int run_storage(struct thr *t, uint64_t n_io)
{
	struct cfg *c = t->c;
	unsigned qd = c->depth;
	struct io_uring ring;
	unsigned char *buf;
	uint64_t seed = 77 + t->idx, issued = 0, done = 0;
	int fd, ret;

	fd = open(c->path, (c->write ? O_WRONLY : O_RDONLY) | (c->hot ? 0 : O_DIRECT));
	if (fd < 0)
		return -errno;
	ret = io_uring_queue_init(GDX_MAX(qd, 2u), &ring, 0);
	if (ret) {
		close(fd);
		return ret;
	}
	buf = aligned_alloc(4096, c->io * qd);
	if (!buf) {
		io_uring_queue_exit(&ring);
		close(fd);
		return -ENOMEM;
	}
	memset(buf, 0x5a, c->io * qd);
	pthread_barrier_wait(t->bar);
	t->t_start = gdx_now_ns();
	while (done < n_io && !ret) {
		struct io_uring_cqe *cqe;

		while (issued < n_io && issued - done < qd) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			unsigned char *p = buf + (issued % qd) * c->io;
			off_t off = io_off(c, t->idx, issued, &seed);

			if (c->write)
				io_uring_prep_write(sqe, fd, p, (unsigned)c->io, (uint64_t)off);
			else
				io_uring_prep_read(sqe, fd, p, (unsigned)c->io, (uint64_t)off);
			issued++;
		}
		io_uring_submit_and_wait(&ring, 1);
		while (!io_uring_peek_cqe(&ring, &cqe)) {
			if (cqe->res < 0)
				ret = cqe->res;
			io_uring_cqe_seen(&ring, cqe);
			done++;
		}
	}
	t->t_end = gdx_now_ns();
	free(buf);
	io_uring_queue_exit(&ring);
	close(fd);
	return ret;
}

static int run_copy(struct thr *t, uint64_t n_io)
{
	struct cfg *c = t->c;
	struct gdx_stream *s;
	void *h, *d;
	int ret;

	ret = gdx_pinned_alloc(c->dev, c->io, &h);
	if (ret)
		return ret;
	ret = gdx_device_malloc(c->dev, c->doff + c->io, &d);
	if (!ret)
		ret = gdx_stream_create(c->dev, &s);
	if (ret) {
		gdx_pinned_free(c->dev, h);
		return ret;
	}
	memset(h, 1, c->io);
	pthread_barrier_wait(t->bar);
	t->t_start = gdx_now_ns();
	for (uint64_t k = 0; k < n_io && !ret; k++)
		ret = c->write ? gdx_memcpy_async(c->dev, h, (char *)d + c->doff, c->io, s) :
				 gdx_memcpy_async(c->dev, (char *)d + c->doff, h, c->io, s);
	if (!ret)
		ret = gdx_stream_synchronize(s);
	t->t_end = gdx_now_ns();
	gdx_stream_destroy(s);
	gdx_device_free(c->dev, d);
	gdx_pinned_free(c->dev, h);
	return ret;
}

static int run_naive(struct thr *t, uint64_t n_io)
{
	struct cfg *c = t->c;
	uint64_t seed = 77 + t->idx;
	void *h = malloc(c->io), *d = NULL;
	int fd, ret;

	fd = open(c->path, c->write ? O_WRONLY : O_RDONLY);
	if (fd < 0 || !h) {
		free(h);
		if (fd >= 0)
			close(fd);
		return fd < 0 ? -errno : -ENOMEM;
	}
	ret = gdx_device_malloc(c->dev, c->doff + c->io, &d);
	memset(h, 3, c->io);
	pthread_barrier_wait(t->bar);
	t->t_start = gdx_now_ns();
	for (uint64_t k = 0; k < n_io && !ret; k++) {
		off_t off = io_off(c, t->idx, k, &seed);
		ssize_t n;

		if (c->write) {
			ret = gdx_memcpy(c->dev, h, (char *)d + c->doff, c->io);
			n = ret ? 0 : pwrite(fd, h, c->io, off);
		} else {
			n = pread(fd, h, c->io, off);
			if (n > 0)
				ret = gdx_memcpy(c->dev, (char *)d + c->doff, h, (size_t)n);
		}
		if (n < 0)
			ret = -errno;
	}
	t->t_end = gdx_now_ns();
	if (d)
		gdx_device_free(c->dev, d);
	free(h);
	close(fd);
	return ret;
}

/* Sums the bytes per path; the path reported is the one that carried the most. */
static void add_info(struct gdx_file_io_info *to, const struct gdx_file_io_info *from)
{
	for (int p = 0; p < GDX_FILE_PATH_COUNT; p++) {
		to->bytes[p] += from->bytes[p];
		if (p && to->bytes[p] > to->bytes[to->path])
			to->path = (enum gdx_file_path)p;
	}
	memcpy(to->why, from->why, sizeof(to->why));
}

static int run_gdx(struct thr *t, uint64_t n_io)
{
	struct cfg *c = t->c;
	uint64_t seed = 77 + t->idx, issued = 0, done = 0;
	struct gdx_file_batch_event ev[64];
	struct gdx_file_batch *b = NULL;
	struct gdx_file_io_info info;
	void *d;
	int ret;

	ret = gdx_device_malloc(c->dev, c->doff + c->io * c->depth, &d);
	if (ret)
		return ret;
	/* Registered once, as an application doing repeated I/O would. */
	ret = gdx_file_buf_register(c->drv, d, c->doff + c->io * c->depth);
	if (!ret && c->depth > 1)
		ret = gdx_file_batch_create(c->drv, c->depth, &b);
	pthread_barrier_wait(t->bar);
	t->t_start = gdx_now_ns();
	if (!b) {
		for (uint64_t k = 0; k < n_io && !ret; k++) {
			off_t off = io_off(c, t->idx, k, &seed);
			char *buf = (char *)d + c->doff;
			ssize_t n = c->write ? gdx_file_write_ex(c->f, buf, c->io, off, &info) :
					       gdx_file_read_ex(c->f, buf, c->io, off, &info);

			if (n < 0)
				ret = (int)n;
			else
				add_info(&t->info, &info);
		}
	} else {
		while (done < n_io && !ret) {
			struct gdx_file_batch_io io[64];
			unsigned k = 0;

			while (issued < n_io && issued - done < c->depth && k < 64) {
				io[k] = (struct gdx_file_batch_io){
					.file = c->f, .op = c->write ? GDX_FILE_WRITE : GDX_FILE_READ,
					.buf = (char *)d + c->doff + (issued % c->depth) * c->io,
					.size = c->io, .off = io_off(c, t->idx, issued, &seed),
				};
				k++;
				issued++;
			}
			if (k)
				ret = gdx_file_batch_submit(b, io, k);
			if (ret)
				break;
			ret = gdx_file_batch_wait(b, 1, ev, 64, -1);
			if (ret < 0)
				break;
			for (int i = 0; i < ret; i++) {
				if (ev[i].result < 0)
					ret = (int)ev[i].result;
				add_info(&t->info, &ev[i].info);
			}
			done += (uint64_t)(ret > 0 ? ret : 0);
			ret = ret < 0 ? ret : 0;
		}
	}
	t->t_end = gdx_now_ns();
	gdx_file_batch_destroy(b);
	gdx_file_buf_deregister(c->drv, d);
	gdx_device_free(c->dev, d);
	return ret;
}

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	uint64_t n_io = t->c->bytes / t->c->threads / t->c->io;

	n_io = GDX_MAX(n_io, 1);
	switch (t->m) {
	case M_STORAGE: t->err = run_storage(t, n_io); break;
	case M_COPY: t->err = run_copy(t, n_io); break;
	case M_NAIVE: t->err = run_naive(t, n_io); break;
	default: t->err = run_gdx(t, n_io); break;
	}
	return NULL;
}

/* Cold runs start with the file's pages dropped; hot runs with them all read. */
static void prepare_cache(struct cfg *c)
{
	int fd = open(c->path, O_RDONLY);
	static char buf[1 << 20];

	if (fd < 0)
		return;
	if (!c->hot) {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	} else if (!c->write) {
		while (read(fd, buf, sizeof(buf)) > 0)
			;
	}
	close(fd);
}

/* Bytes per second of one mode, or a negative code. */
static double measure(struct cfg *c, enum mode m, struct gdx_file_io_info *info)
{
	pthread_t *th = calloc(c->threads, sizeof(*th));
	struct thr *ts = calloc(c->threads, sizeof(*ts));
	pthread_barrier_t bar;
	uint64_t t0 = UINT64_MAX, t1 = 0, n_io = GDX_MAX(c->bytes / c->threads / c->io, 1);
	double r;
	int err = 0;

	if (!th || !ts) {
		free(th);
		free(ts);
		return -ENOMEM;
	}
	if (m != M_COPY)
		prepare_cache(c);
	pthread_barrier_init(&bar, NULL, c->threads + 1);
	for (unsigned i = 0; i < c->threads; i++) {
		ts[i] = (struct thr){ .c = c, .m = m, .idx = i, .bar = &bar };
		pthread_create(&th[i], NULL, thr_main, &ts[i]);
	}
	pthread_barrier_wait(&bar);
	/*
	 * Each thread stamps its own start: on a loaded machine this thread may
	 * run again only after the workers are done.
	 */
	for (unsigned i = 0; i < c->threads; i++) {
		pthread_join(th[i], NULL);
		if (ts[i].err && !err)
			err = ts[i].err;
		if (info)
			add_info(info, &ts[i].info);
		t0 = GDX_MIN(t0, ts[i].t_start);
		t1 = GDX_MAX(t1, ts[i].t_end);
	}
	/*
	 * Timed from the common start to the last thread's end of work: freeing
	 * gigabytes of pinned memory (which unpins page by page) is no transfer.
	 */
	r = (double)(n_io * c->io * c->threads) / ((double)(t1 - t0) / 1e9);
	pthread_barrier_destroy(&bar);
	free(th);
	free(ts);
	if (err) {
		fprintf(stderr, "gdx bench file: %s: %s\n", mode_names[m], gdx_strerror(err));
		return err;
	}
	return r;
}

/* Enough for every driver counter (gdx_file_driver_counter); more are not printed. */
#define MAX_CTR 64

static void read_counters(struct cfg *c, uint64_t *v)
{
	const char *name;

	for (unsigned k = 0; k < MAX_CTR; k++)
		if (gdx_file_driver_counter(c->drv, k, &name, &v[k]))
			break;
}

/* The driver's counters that moved during the gdx run: where its time went. */
static void print_counters(struct cfg *c, const uint64_t *ctr0, bool json)
{
	const char *name;
	uint64_t v;
	bool first = true;

	printf(json ? ",\"counters\":{" : "  counters:");
	for (unsigned k = 0; k < MAX_CTR && !gdx_file_driver_counter(c->drv, k, &name, &v); k++) {
		if (v == ctr0[k])
			continue;
		printf(json ? "%s\"%s\":%llu" : "%s %s=%llu", first || !json ? "" : ",", name,
		       (unsigned long long)(v - ctr0[k]));
		first = false;
	}
	printf(json ? "}}\n" : "\n");
}

/* Files in memory (tmpfs, ramfs) are hot whatever was read before. */
static bool path_in_memory(const char *path)
{
	struct statfs sf;

	return !statfs(path, &sf) &&
	       ((unsigned long)sf.f_type == TMPFS_MAGIC || (unsigned long)sf.f_type == RAMFS_MAGIC);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gdx bench file --file PATH [options]\n"
		"  --file PATH       the file (read: must exist; see --create)\n"
		"  --create SIZE     create PATH with SIZE bytes of data first\n"
		"  --write           GPU -> file instead of file -> GPU\n"
		"  --pattern P       seq (default) or rand\n"
		"  --io-size LIST    I/O sizes, e.g. 4k,1M,64M (default 1M,64M)\n"
		"  --threads LIST    thread counts (default 1)\n"
		"  --depth LIST      I/Os in flight per thread (default 1; >1 uses a gdx batch)\n"
		"  --bytes SIZE      bytes per measurement (default: the file size)\n"
		"  --cache MODE      hot, cold or auto (default: hot on tmpfs, cold elsewhere)\n"
		"  --backend B       cufile, uring or posix\n"
		"  --device gpu:N    device (default gpu:0)\n"
		"  --dev-offset N    device buffers start N bytes (0-4095) into their\n"
		"                    allocation, as a tensor's slice does (default 0)\n"
		"  --no-naive        skip the naive baseline (c); it is printed as 0\n"
		"  --json            one JSON object per line\n");
}

/* "4k,1M" or "1,2,4": each a size (of 4 KiB multiples) or a count from 1 to 1024. */
static int parse_list(const char *prog, const char *opt, const char *s, uint64_t *v, int max,
		      bool size)
{
	char tmp[256], *save = NULL;
	int n = 0;

	snprintf(tmp, sizeof(tmp), "%s", s);
	for (char *tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == max) {
			fprintf(stderr, "%s: %s '%s': at most %d values\n", prog, opt, s, max);
			return -EINVAL;
		}
		if (size ? arg_size(prog, opt, tok, 4096, 1ull << 40, &v[n]) :
			   arg_count(prog, opt, tok, 1, 1024, &v[n]))
			return -EINVAL;
		if (size && v[n] % 4096) {
			fprintf(stderr, "%s: %s '%s': want a multiple of 4k (O_DIRECT)\n", prog,
				opt, tok);
			return -EINVAL;
		}
		n++;
	}
	if (!n)
		return arg_count(prog, opt, s, 1, 1024, &v[0]);	/* refuses "" and "," */
	return n;
}

static int create_file(const char *path, uint64_t size)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	size_t bs = 4u << 20;
	unsigned char *b = malloc(bs);
	int ret = 0;

	if (fd < 0 || !b) {
		free(b);
		return fd < 0 ? -errno : -ENOMEM;
	}
	for (size_t i = 0; i < bs; i++)
		b[i] = (unsigned char)(i * 131 + 7);
	for (uint64_t at = 0; at < size && !ret;) {
		size_t n = (size_t)GDX_MIN((uint64_t)bs, size - at);
		ssize_t w = pwrite(fd, b, n, (off_t)at);

		if (w <= 0)
			ret = w < 0 ? -errno : -EIO;
		at += (uint64_t)(w > 0 ? w : 0);
	}
	if (!ret && fsync(fd))
		ret = -errno;
	close(fd);
	free(b);
	return ret;
}

int gdx_bench_file(int argc, char **argv, int (*open_gpu)(int, struct gdx_device **))
{
	static const struct option lo[] = {
		{ "file", required_argument, NULL, 'f' },
		{ "create", required_argument, NULL, 'C' },
		{ "write", no_argument, NULL, 'w' },
		{ "pattern", required_argument, NULL, 'p' },
		{ "io-size", required_argument, NULL, 's' },
		{ "threads", required_argument, NULL, 't' },
		{ "depth", required_argument, NULL, 'd' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "cache", required_argument, NULL, 'c' },
		{ "backend", required_argument, NULL, 'B' },
		{ "device", required_argument, NULL, 'D' },
		{ "dev-offset", required_argument, NULL, 'O' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-naive", no_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t sizes[16] = { 1u << 20, 64u << 20 }, thr[16] = { 1 }, dep[16] = { 1 };
	int nsizes = 2, nthr = 1, ndep = 1, o, ret, rc = 1, ord = 0;
	uint64_t create = 0, bytes = 0;
	const char *cache = "auto";
	struct cfg c = { 0 };
	struct gdx_file_opts fo;
	struct stat st;
	const char *prog = argv[0];
	unsigned invalid = 0;
	bool bad;

	optind = 1;
	while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (o) {
		case 'f': c.path = optarg; break;
		case 'C':
			if (arg_size(prog, "--create", optarg, 1, 1ull << 50, &create))
				return 2;
			break;
		case 'w': c.write = true; break;
		case 'p':
			if ((ret = arg_choice(prog, "--pattern", optarg, "seq|rand")) < 0)
				return 2;
			c.rand = ret == 1;
			break;
		case 's':
			if ((nsizes = parse_list(prog, "--io-size", optarg, sizes, 16, true)) < 0)
				return 2;
			break;
		case 't':
			if ((nthr = parse_list(prog, "--threads", optarg, thr, 16, false)) < 0)
				return 2;
			break;
		case 'd':
			if ((ndep = parse_list(prog, "--depth", optarg, dep, 16, false)) < 0)
				return 2;
			break;
		case 'b':
			if (arg_size(prog, "--bytes", optarg, 1, 1ull << 50, &bytes))
				return 2;
			break;
		case 'c':
			if (arg_choice(prog, "--cache", optarg, "hot|cold|auto") < 0)
				return 2;
			cache = optarg;
			break;
		case 'B':
			if (arg_choice(prog, "--backend", optarg, "cufile|uring|posix") < 0)
				return 2;
			c.backend = optarg;
			break;
		case 'D':
			if (arg_gpu(prog, "--device", optarg, &ord))
				return 2;
			break;
		case 'O': {
			uint64_t v;

			if (arg_count(prog, "--dev-offset", optarg, 0, 4095, &v))
				return 2;
			c.doff = (size_t)v;
			break;
		}
		case 'j': c.json = true; break;
		case 'N': c.no_naive = true; break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if (!c.path || optind != argc) {
		if (!c.path)
			fprintf(stderr, "%s: --file PATH is needed\n", prog);
		else
			fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
		goto bad;
	}
	if (create && (ret = create_file(c.path, create))) {
		fprintf(stderr, "gdx bench file: creating %s: %s\n", c.path, gdx_strerror(ret));
		return 1;
	}
	if (stat(c.path, &st)) {
		fprintf(stderr, "%s: %s: %s (--create SIZE makes one)\n", prog, c.path,
			strerror(errno));
		return 1;
	}
	if (!S_ISREG(st.st_mode) || !st.st_size) {
		fprintf(stderr, "%s: %s: %s (--create SIZE makes one)\n", prog, c.path,
			S_ISDIR(st.st_mode) ? "a directory, not a file" :
			!S_ISREG(st.st_mode) ? "not a regular file" : "empty");
		return 1;
	}
	c.fsize = (uint64_t)st.st_size;
	ret = open_gpu(ord, &c.dev);
	if (!ret)
		ret = gdx_file_driver_open(c.dev, NULL, &c.drv);
	if (ret) {
		fprintf(stderr, "gdx bench file: %s\n", gdx_strerror(ret));
		goto out;
	}
	gdx_file_opts_init(&fo, sizeof(fo));
	fo.oflags = c.write ? O_WRONLY : O_RDONLY;
	fo.backend = c.backend;
	ret = gdx_file_open(c.drv, c.path, &fo, &c.f);
	if (ret) {
		fprintf(stderr, "gdx bench file: %s: %s\n", c.path, gdx_strerror(ret));
		goto out;
	}
	c.hot = !strcmp(cache, "hot") || (!strcmp(cache, "auto") && path_in_memory(c.path));
	if (!c.json)
		printf("# %s %s, %.2f GiB, %s cache, device %s (buffers %zu bytes in), backend %s;"
		       " ceilings: storage = %s, copy = pinned %s; ratios to %s\n",
		       c.write ? "write" : "read", c.path, (double)c.fsize / (1u << 30),
		       c.hot ? "hot" : "cold", gdx_device_name(c.dev), c.doff,
		       gdx_file_backend_name(c.f), c.hot ? "buffered (page cache)" : "O_DIRECT",
		       c.write ? "D2H" : "H2D", c.hot && !c.write ? "copy" : "min(a,b)");
	for (int si = 0; si < nsizes; si++)
	for (int ti = 0; ti < nthr; ti++)
	for (int di = 0; di < ndep; di++) {
		struct gdx_file_io_info info = { 0 };
		uint64_t ctr0[MAX_CTR];
		double r[M_COUNT], ceil;

		c.io = sizes[si];
		c.threads = (unsigned)thr[ti];
		c.depth = (unsigned)dep[di];
		if (c.io > c.fsize) {
			fprintf(stderr, "gdx bench file: I/O size %zu beyond the file; skipped\n", c.io);
			continue;
		}
		c.bytes = bytes ? bytes : c.fsize;
		c.bytes = GDX_MAX(c.bytes, (uint64_t)c.io * c.threads);
		for (int m = 0; m < M_COUNT; m++) {
			/*
			 * One io_uring read moves at most 2 GiB: larger I/Os rely on
			 * the 1 MiB, 64-deep storage measurement below alone.
			 */
			if ((m == M_NAIVE && c.no_naive) || (m == M_STORAGE && c.io > INT32_MAX)) {
				r[m] = 0;
				continue;
			}
			if (m == M_GDX) {
				/*
				 * One untimed pass first: the driver sets up its I/O
				 * contexts (pinned bounce memory, rings, streams) on
				 * first use, once per driver, not per transfer.
				 */
				r[m] = measure(&c, M_GDX, NULL);
				if (r[m] < 0)
					goto out;
				read_counters(&c, ctr0);
			}
			r[m] = measure(&c, (enum mode)m, m == M_GDX ? &info : NULL);
			if (r[m] < 0)
				goto out;
		}
		if (c.io > (1u << 20)) {
			/*
			 * gdx cuts a large I/O into 1 MiB storage I/Os, many in flight:
			 * the storage ceiling is the better of the caller's shape and
			 * that one, so a ratio never flatters gdx.
			 */
			struct cfg c2 = c;
			double alt;

			c2.io = 1u << 20;
			c2.depth = 64;
			alt = measure(&c2, M_STORAGE, NULL);
			if (alt < 0)
				goto out;
			r[M_STORAGE] = GDX_MAX(r[M_STORAGE], alt);
		}
		/*
		 * Hot data is memory: the page-cache path has the copy engine read
		 * it in place, so the pinned copy is the ceiling (the storage column,
		 * a buffered read into host memory, is printed for reference).
		 */
		ceil = c.hot && !c.write ? r[M_COPY] : GDX_MIN(r[M_STORAGE], r[M_COPY]);
		bad = bench_invalid(r[M_GDX] / ceil) || bench_invalid(r[M_NAIVE] / ceil);
		invalid += bad;
		if (c.json) {
			printf("{\"op\":\"%s\",\"pattern\":\"%s\",\"cache\":\"%s\",\"io_size\":%zu,"
			       "\"threads\":%u,\"depth\":%u,\"bytes\":%llu,\"storage_gbps\":%.3f,"
			       "\"copy_gbps\":%.3f,\"naive_gbps\":%.3f,\"gdx_gbps\":%.3f,"
			       "\"gdx_iops\":%.0f,\"storage_iops\":%.0f,\"ceiling_gbps\":%.3f,"
			       "\"gdx_ratio\":%.3f,\"naive_ratio\":%.3f,\"valid\":%s,\"path\":\"%s\","
			       "\"backend\":\"%s\",\"dev_offset\":%zu",
			       c.write ? "write" : "read", c.rand ? "rand" : "seq",
			       c.hot ? "hot" : "cold", c.io, c.threads, c.depth,
			       (unsigned long long)c.bytes, r[M_STORAGE] / 1e9, r[M_COPY] / 1e9,
			       r[M_NAIVE] / 1e9, r[M_GDX] / 1e9, r[M_GDX] / (double)c.io,
			       r[M_STORAGE] / (double)c.io, ceil / 1e9, r[M_GDX] / ceil,
			       r[M_NAIVE] / ceil, bad ? "false" : "true", gdx_file_path_name(info.path),
			       gdx_file_backend_name(c.f), c.doff);
			print_counters(&c, ctr0, true);
		} else {
			printf("%s %s %7zuk t=%-2u d=%-3u storage %7.2f GB/s  copy %7.2f GB/s  "
			       "naive %7.2f GB/s (%.2f)  gdx %7.2f GB/s (%.2f of ceiling) %.0f IOPS "
			       "path %s%s%s\n", c.write ? "write" : "read", c.rand ? "rand" : "seq",
			       c.io >> 10, c.threads, c.depth, r[M_STORAGE] / 1e9, r[M_COPY] / 1e9,
			       r[M_NAIVE] / 1e9, r[M_NAIVE] / ceil, r[M_GDX] / 1e9, r[M_GDX] / ceil,
			       r[M_GDX] / (double)c.io, gdx_file_path_name(info.path),
			       bad ? "  " : "", bad ? BENCH_INVALID : "");
			print_counters(&c, ctr0, false);
		}
		fflush(stdout);
	}
	if (invalid)
		fprintf(stderr, "%s: %u result%s above %s ceiling: the run is invalid (%s)\n", prog,
			invalid, invalid == 1 ? "" : "s", invalid == 1 ? "its" : "their",
			c.hot || c.write ? "the copy ceiling measured low; run again with more --bytes" :
			"a cold run whose file is in the page cache: O_DIRECT storage reads the disk, "
			"gdx the cache; drop the cache first, or --cache hot");
	rc = 0;
out:
	gdx_file_close(c.f);
	gdx_file_driver_close(c.drv);
	gdx_device_close(c.dev);
	return rc;
bad:
	return arg_usage_error(prog);
}
