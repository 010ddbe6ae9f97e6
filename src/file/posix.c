/* SPDX-License-Identifier: MIT */
/*
 * The posix backend: pread/pwrite on a pool of threads, for where io_uring is
 * refused (seccomp profiles, io_uring_disabled).  An I/O is cut into chunks
 * that the threads run in parallel; device memory is staged through pinned
 * buffers with synchronous copies.
 *
 * A handle whose descriptor has O_DIRECT keeps it for the pieces whose
 * offset, size and memory are aligned; the rest (the unaligned head and tail,
 * or all of an I/O whose memory is off the file's alignment) goes through the
 * handle's buffered twin, a second open without O_DIRECT (file_int.h).  Where
 * that open failed, an I/O that would need it fails up front, before any
 * piece runs, and every other goes O_DIRECT, even with O_DIRECT turned off.
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
	int bfd;		/* fd without O_DIRECT (fd itself if it has none), or -errno */
	bool odirect;		/* fd has O_DIRECT */
	bool dio_ok;		/* and it may be used (not GDX_FILE_NO_ODIRECT) */
	bool dev;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned pending;
	int err;
	off_t eof;
	uint64_t bytes;
	unsigned ndirect, nbuffered;	/* pieces on fd with O_DIRECT, on bfd */
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

/*
 * Reads or writes all of len unless end of file (reads) comes first.  With
 * dio (fd has O_DIRECT, and at, len and p are aligned), a short read that
 * stops off the alignment is end of file; the rest of a short write goes to
 * bfd, where an unaligned offset is allowed.
 */
static ssize_t full_rw(int fd, int bfd, bool dio, bool rd, void *p, size_t len, off_t at)
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
		if (dio && done < len && !GDX_IS_ALIGNED(done, (size_t)GDX_FILE_DIO_ALIGN)) {
			if (rd)
				break;
			if (bfd < 0)
				return bfd;
			fd = bfd;
			dio = false;
		}
	}
	return (ssize_t)done;
}

static void chunk_run(void *arg)
{
	struct px_chunk *ch = arg;
	struct px_io *x = ch->x;
	struct gdx_file_io *io = x->io;
	char *user = (char *)io->buf + (ch->at - io->off);
	bool rd = io->op == GDX_FILE_READ, dio = false;
	void *b = NULL;
	ssize_t n;
	int ret = 0, fd;

	if (x->dev)
		ret = buf_get(x->pd, &b);
	if (x->dio_ok && !ret)
		dio = gdx_file_dio_aligned(b ? b : user, ch->at, ch->len);
	fd = dio ? x->fd : x->bfd;
	if (ret) {
		n = ret;
	} else if (fd < 0) {
		n = fd;		/* the buffered twin could not be opened */
	} else if (!x->dev) {
		n = full_rw(fd, x->bfd, dio, rd, user, ch->len, ch->at);
	} else if (rd) {
		n = full_rw(fd, x->bfd, dio, true, b, ch->len, ch->at);
		if (n > 0)
			ret = gdx_memcpy(x->pd->dev, user, b, (size_t)n);
	} else {
		ret = gdx_memcpy(x->pd->dev, b, user, ch->len);
		n = ret ? ret : full_rw(fd, x->bfd, dio, false, b, ch->len, ch->at);
	}
	if (b)
		buf_put(x->pd, b);
	if (ret)
		n = ret;
	pthread_mutex_lock(&x->lock);
	if (n < 0 && !x->err)
		x->err = (int)n;
	if (n >= 0 && (size_t)n < ch->len)
		x->eof = GDX_MIN(x->eof, ch->at + (off_t)n);
	if (n > 0)
		x->bytes += (uint64_t)n;
	if (dio)
		x->ndirect++;
	else if (x->odirect)
		x->nbuffered++;
	if (--x->pending == 0)
		pthread_cond_signal(&x->cond);
	pthread_mutex_unlock(&x->lock);
	free(ch);
}

/*
 * Where the piece at at ends: at the next chunk boundary of the file, and on
 * an O_DIRECT descriptor also at the I/O's first and last alignment
 * boundaries, so only its unaligned head and tail miss O_DIRECT.
 */
static off_t piece_end(const struct px_io *x, off_t at, off_t end, size_t chunk)
{
	off_t next = GDX_MIN(GDX_ALIGN_DOWN(at, (off_t)chunk) + (off_t)chunk, end);
	off_t head = GDX_ALIGN_UP(x->io->off, (off_t)GDX_FILE_DIO_ALIGN);
	off_t tail = GDX_ALIGN_DOWN(end, (off_t)GDX_FILE_DIO_ALIGN);

	if (!x->dio_ok)
		return next;
	if (at < head)
		return GDX_MIN(next, head);
	if (at < tail)
		return GDX_MIN(next, tail);
	return next;
}

/* Hands the pieces of [from, to) of an I/O ending at end to the workers. */
static void px_submit(struct px_io *x, off_t from, off_t to, off_t end)
{
	for (off_t at = from; at < to;) {
		struct px_chunk *ch = malloc(sizeof(*ch));
		size_t len = (size_t)(GDX_MIN(piece_end(x, at, end, x->pd->chunk), to) - at);
		int err = -ENOMEM;

		if (ch) {
			ch->x = x;
			ch->at = at;
			ch->len = len;
			pthread_mutex_lock(&x->lock);
			x->pending++;
			pthread_mutex_unlock(&x->lock);
			err = gdx_tpool_submit(x->pd->wq, chunk_run, ch);
		}
		if (err) {
			pthread_mutex_lock(&x->lock);
			x->pending -= ch ? 1 : 0;
			x->err = x->err ? x->err : err;
			pthread_mutex_unlock(&x->lock);
			free(ch);
			return;
		}
		at += (off_t)len;
	}
}

/* Waits for every piece handed out so far. */
static void px_wait(struct px_io *x)
{
	pthread_mutex_lock(&x->lock);
	while (x->pending)
		pthread_cond_wait(&x->cond, &x->lock);
	pthread_mutex_unlock(&x->lock);
}

static ssize_t px_io(void *priv, struct gdx_file *f, void *fpriv, struct gdx_file_io *io)
{
	struct px_drv *pd = priv;
	/* Without the twin the descriptor is all there is, O_DIRECT turned off or not. */
	bool no_twin = gdx_file_no_twin(f);
	struct px_io x = { .pd = pd, .io = io, .fd = f->fd, .bfd = f->buffered_fd,
			   .odirect = f->odirect,
			   .dio_ok = f->odirect && (!(f->flags & GDX_FILE_NO_ODIRECT) || no_twin),
			   .eof = INT64_MAX };
	off_t end = io->off + (off_t)io->size, last, head, tail;
	char how[160] = "";
	ssize_t ret;

	(void)fpriv;
	x.dev = io->attrs.kind == GDX_MEM_DEVICE;
	if (io->strict && x.dev) {
		gdx_file_why(&io->info, "posix backend stages device memory through host memory");
		return GDX_ENOTDIRECT;
	}
	/* Device memory is staged through aligned buffers: only the file's side counts. */
	if (no_twin && !gdx_file_dio_aligned(x.dev ? NULL : io->buf, io->off, io->size))
		return gdx_file_twin_refuse(f, &io->info, "posix");
	pthread_mutex_init(&x.lock, NULL);
	pthread_cond_init(&x.cond, NULL);
	head = GDX_ALIGN_UP(io->off, (off_t)GDX_FILE_DIO_ALIGN);
	tail = GDX_ALIGN_DOWN(end, (off_t)GDX_FILE_DIO_ALIGN);
	if (io->op != GDX_FILE_READ && x.dio_ok && head < tail) {
		/*
		 * A write's unaligned head and tail go through the page cache, its
		 * middle O_DIRECT: the buffered pieces are written first, so that
		 * the direct write flushes and drops the cached pages it overlaps.
		 * A page (or large folio) dirtied by a head written at the same
		 * time could not be dropped and would keep stale bytes.
		 */
		px_submit(&x, io->off, head, end);
		px_submit(&x, tail, end, end);
		px_wait(&x);
		if (!x.err)
			px_submit(&x, head, tail, end);
	} else {
		px_submit(&x, io->off, end, end);
	}
	px_wait(&x);
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
	if (no_twin)
		snprintf(how, sizeof(how), ", O_DIRECT on the descriptor itself (%sits second "
			 "open without O_DIRECT failed: %s)", f->flags & GDX_FILE_NO_ODIRECT ?
			 "turned off, but " : "", strerror(-x.bfd));
	else if (x.nbuffered && !x.dio_ok)
		snprintf(how, sizeof(how), ", O_DIRECT turned off: through a second open without it");
	else if (x.nbuffered)
		snprintf(how, sizeof(how), "%s", x.ndirect ?
			 ", O_DIRECT, unaligned parts through a second open without it" :
			 ", unaligned on an O_DIRECT descriptor: through a second open without it");
	else if (x.ndirect)
		snprintf(how, sizeof(how), ", O_DIRECT");
	gdx_file_why(&io->info, "pread/pwrite on %u threads%s%s", pd->nthreads,
		     x.dev ? " through pinned staging buffers" : "", how);
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
