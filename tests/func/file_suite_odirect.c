/* SPDX-License-Identifier: MIT */
/*
 * gdx_file_* (test_file.c): O_DIRECT handles: synchronous and
 * batch I/O of many shapes, the order of a write's pieces, handles without a
 * buffered twin.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "test.h"

#include "file/ahead.h"
#include "file/file_int.h"

#include <gdx/gdx.h>
#include "file_suite.h"

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
void sync_odirect(void **state)
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
void odirect_write_order(void **state)
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
void odirect_no_twin(void **state)
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
