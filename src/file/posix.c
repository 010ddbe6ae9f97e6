/* SPDX-License-Identifier: MIT */
/*
 * The posix backend: pread/pwrite on a pool of threads, for where io_uring is
 * refused (seccomp profiles, io_uring_disabled).  An I/O is cut into chunks
 * that the threads run in parallel; device memory is staged through pinned
 * buffers with synchronous copies.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "file/file_int.h"

struct px_drv {
	struct gdx_device *dev;
	struct gdx_tpool *wq;
	unsigned nthreads;
	size_t chunk;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	void **bufs;		/* pinned staging buffers, one per thread, made on first use */
	unsigned nfree;
	bool bufs_ready;
};

struct px_io {
	struct px_drv *pd;
	struct gdx_file_io *io;
	int fd;
	bool dev;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned pending;
	int err;
	off_t eof;
	uint64_t bytes;
};

struct px_chunk {
	struct px_io *x;
	off_t at;
	size_t len;
};

static int px_init(struct gdx_file_driver *drv, void **priv, char *why, size_t whylen)
{
	struct px_drv *pd = calloc(1, sizeof(*pd));
	int ret;

	(void)why;
	(void)whylen;
	if (!pd)
		return -ENOMEM;
	pd->dev = gdx_file_driver_device(drv);
	pd->nthreads = (unsigned)gdx_cfg_int("file.posix_threads");
	pd->chunk = GDX_ALIGN_UP(gdx_cfg_size("file.chunk_size"), (size_t)4096);
	ret = gdx_tpool_create(pd->nthreads, "gdx-posix", &pd->wq);
	if (ret) {
		free(pd);
		return ret;
	}
	pthread_mutex_init(&pd->lock, NULL);
	pthread_cond_init(&pd->cond, NULL);
	*priv = pd;
	return 0;
}

static void px_fini(void *priv)
{
	struct px_drv *pd = priv;

	gdx_tpool_destroy(pd->wq);
	if (pd->bufs) {
		for (unsigned i = 0; i < pd->nfree; i++)
			gdx_pinned_free(pd->dev, pd->bufs[i]);
		free(pd->bufs);
	}
	pthread_mutex_destroy(&pd->lock);
	pthread_cond_destroy(&pd->cond);
	free(pd);
}

static int px_open(void *priv, struct gdx_file *f, void **fpriv, char *why, size_t whylen)
{
	(void)priv;
	(void)f;
	(void)why;
	(void)whylen;
	*fpriv = NULL;
	return 0;
}

static void px_close(void *priv, struct gdx_file *f, void *fpriv)
{
	(void)priv;
	(void)f;
	(void)fpriv;
}

static int buf_get(struct px_drv *pd, void **out)
{
	int ret = 0;

	pthread_mutex_lock(&pd->lock);
	if (!pd->bufs_ready) {
		pd->bufs = calloc(pd->nthreads, sizeof(void *));
		if (!pd->bufs) {
			ret = -ENOMEM;
			goto out;
		}
		for (; pd->nfree < pd->nthreads; pd->nfree++) {
			ret = gdx_pinned_alloc(pd->dev, pd->chunk, &pd->bufs[pd->nfree]);
			if (ret)
				break;
		}
		if (!pd->nfree) {
			free(pd->bufs);
			pd->bufs = NULL;
			goto out;
		}
		ret = 0;
		pd->bufs_ready = true;
	}
	while (!pd->nfree)
		pthread_cond_wait(&pd->cond, &pd->lock);
	*out = pd->bufs[--pd->nfree];
out:
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

static void buf_put(struct px_drv *pd, void *b)
{
	pthread_mutex_lock(&pd->lock);
	pd->bufs[pd->nfree++] = b;
	pthread_cond_signal(&pd->cond);
	pthread_mutex_unlock(&pd->lock);
}

/* Reads or writes all of len unless end of file (reads) comes first. */
static ssize_t full_rw(int fd, bool rd, void *p, size_t len, off_t at)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = rd ? pread(fd, (char *)p + done, len - done, at + (off_t)done) :
				 pwrite(fd, (char *)p + done, len - done, at + (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0) {
			if (!rd)
				return -EIO;
			break;
		}
		done += (size_t)n;
	}
	return (ssize_t)done;
}

static void chunk_run(void *arg)
{
	struct px_chunk *ch = arg;
	struct px_io *x = ch->x;
	struct gdx_file_io *io = x->io;
	char *user = (char *)io->buf + (ch->at - io->off);
	bool rd = io->op == GDX_FILE_READ;
	void *b = NULL;
	ssize_t n;
	int ret = 0;

	if (!x->dev) {
		n = full_rw(x->fd, rd, user, ch->len, ch->at);
	} else {
		ret = buf_get(x->pd, &b);
		if (ret) {
			n = ret;
		} else if (rd) {
			n = full_rw(x->fd, true, b, ch->len, ch->at);
			if (n > 0)
				ret = gdx_memcpy(x->pd->dev, user, b, (size_t)n);
		} else {
			ret = gdx_memcpy(x->pd->dev, b, user, ch->len);
			n = ret ? ret : full_rw(x->fd, false, b, ch->len, ch->at);
		}
		if (b)
			buf_put(x->pd, b);
		if (ret)
			n = ret;
	}
	pthread_mutex_lock(&x->lock);
	if (n < 0 && !x->err)
		x->err = (int)n;
	if (n >= 0 && (size_t)n < ch->len)
		x->eof = GDX_MIN(x->eof, ch->at + (off_t)n);
	if (n > 0)
		x->bytes += (uint64_t)n;
	if (--x->pending == 0)
		pthread_cond_signal(&x->cond);
	pthread_mutex_unlock(&x->lock);
	free(ch);
}

static ssize_t px_io(void *priv, struct gdx_file *f, void *fpriv, struct gdx_file_io *io)
{
	struct px_drv *pd = priv;
	struct px_io x = { .pd = pd, .io = io, .fd = gdx_file_fd(f), .eof = INT64_MAX };
	off_t end = io->off + (off_t)io->size, last;
	ssize_t ret;

	(void)fpriv;
	x.dev = io->attrs.kind == GDX_MEM_DEVICE;
	if (io->strict && x.dev) {
		gdx_file_why(&io->info, "posix backend stages device memory through host memory");
		return GDX_ENOTDIRECT;
	}
	pthread_mutex_init(&x.lock, NULL);
	pthread_cond_init(&x.cond, NULL);
	for (off_t at = io->off; at < end;) {
		struct px_chunk *ch = malloc(sizeof(*ch));
		size_t len = (size_t)GDX_MIN((off_t)pd->chunk, end - at);
		int err = -ENOMEM;

		if (ch) {
			ch->x = &x;
			ch->at = at;
			ch->len = len;
			pthread_mutex_lock(&x.lock);
			x.pending++;
			pthread_mutex_unlock(&x.lock);
			err = gdx_tpool_submit(pd->wq, chunk_run, ch);
		}
		if (err) {
			pthread_mutex_lock(&x.lock);
			x.pending -= ch ? 1 : 0;
			x.err = x.err ? x.err : err;
			pthread_mutex_unlock(&x.lock);
			free(ch);
			break;
		}
		at += (off_t)len;
	}
	pthread_mutex_lock(&x.lock);
	while (x.pending)
		pthread_cond_wait(&x.cond, &x.lock);
	pthread_mutex_unlock(&x.lock);
	pthread_mutex_destroy(&x.lock);
	pthread_cond_destroy(&x.cond);
	last = GDX_MIN(end, x.eof);
	if (x.err)
		ret = x.err;
	else if (io->op == GDX_FILE_READ)
		ret = last > io->off ? last - io->off : 0;
	else
		ret = (ssize_t)io->size;
	io->info.bytes[x.dev ? GDX_FILE_PATH_POSIX : GDX_FILE_PATH_HOST] +=
		ret > 0 ? (uint64_t)ret : 0;
	gdx_file_why(&io->info, "pread/pwrite on %u threads%s", pd->nthreads,
		     x.dev ? " through pinned staging buffers" : "");
	return ret;
}

const struct gdx_file_backend_ops gdx_file_posix_ops = {
	.name = "posix",
	.init = px_init,
	.fini = px_fini,
	.open = px_open,
	.close = px_close,
	.io = px_io,
};
