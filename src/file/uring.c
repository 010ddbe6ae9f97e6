/* SPDX-License-Identifier: MIT */
/*
 * The uring backend: the fallback that has to run at hardware speed.
 *
 * An I/O context owns an io_uring, a ring of page-aligned pinned bounce
 * buffers on the GPU's NUMA node (registered with io_uring as fixed buffers),
 * a few device streams and one event per buffer.  One engine loop runs any
 * number of requests over it: each request is cut into chunks at
 * chunk-size boundaries, k chunks are in flight at once, and
 *
 *   device read   hot chunk:  the page-cache range is mapped and registered
 *                             with the device, which copies straight out of it;
 *                             unregistered as soon as the copy's event fires
 *                 cold chunk: storage -> bounce (O_DIRECT where allowed), then
 *                             an async H2D copy; the buffer comes back when the
 *                             copy's event fires, while the next reads proceed
 *   device write  async D2H copy into a bounce buffer, then the storage write
 *   host memory   the kernel reads or writes the caller's memory itself
 *                 (O_DIRECT where buffer, offset and size are aligned)
 *
 * O_DIRECT needs aligned offsets: reads round the chunk out to the alignment
 * and copy only the caller's bytes; writes send the unaligned head and tail
 * through the page cache, first, and only the aligned middle, once they are
 * written, through O_DIRECT.
 * Contexts are pooled per driver; each thread doing I/O holds one, so many
 * threads can share one handle.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "file/file_int.h"

#define UR_FILES 64
#define UR_REAP 8	/* storage completions handled per engine pass */
#define PG 4096u
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22	/* Linux 5.14 */
#endif

struct ur_ctx;

/* Single I/Os, the workers of split I/Os and batches each tune their own contexts. */
enum ur_pool { POOL_SEQ, POOL_SPLIT, POOL_BATCH, POOL_COUNT };

struct ur_drv {
	struct gdx_device *dev;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct ur_ctx *idle[POOL_COUNT];
	struct ur_ctx *all;
	unsigned nctx[POOL_COUNT];
	unsigned max_ctx;
	struct gdx_tpool *split;	/* runs the parts of large I/Os beside the caller */
	struct gdx_counter *ctr;	/* the driver's counters */
};

struct ur_file {
	uint64_t id;
	int fd;			/* buffered I/O: the handle's descriptor without O_DIRECT */
	int fd_direct;		/* -1: no O_DIRECT for this file */
	bool own_direct;	/* fd_direct was opened here */
	bool twin;		/* fd is the handle's buffered twin (its own one has O_DIRECT) */
	/*
	 * The handle's descriptor has O_DIRECT and its twin could not be opened:
	 * fd is the O_DIRECT one too, only mapped and asked about the cache;
	 * every I/O goes O_DIRECT and what cannot is refused (twin_refuse).
	 */
	bool no_twin;
	_Atomic bool direct_ok;
	bool memfs;
	char dio_why[96];
	/* Knobs as they were when the handle opened: read once, not per I/O. */
	size_t pc_min, pc_chunk, split_min;
	unsigned pc_depth, threads, pc_threads;
	size_t split_piece;
	bool split_pread;
	_Atomic bool nowait_ok;	/* preadv2(RWF_NOWAIT) works on this file */
	_Atomic bool cachestat_ok;	/* cachestat(2) works on this file */
};

enum slot_state { S_FREE, S_KIO, S_COPY };

struct ur_req;

struct ur_slot {
	unsigned idx;
	unsigned char *buf;
	struct gdx_event *ev;
	struct gdx_stream *st;
	enum slot_state state;
	struct ur_req *req;
	off_t ks;		/* file offset of the kernel I/O */
	size_t klen, kdone;
	bool kdirect;
	bool edge;		/* a write's buffered head or tail (ur_req.edges) */
	bool kfixed;		/* kbuf lies in the registered bounce ring */
	unsigned char *kbuf;
	off_t us;		/* the caller's part of the chunk, in file offsets */
	size_t ulen;
	unsigned char *pc;	/* page-cache range to unregister after the copy */
	size_t pc_len;
	struct ur_slot *next;	/* free list or copy FIFO */
	unsigned sidx;		/* index of st in the context's streams */
	struct gdx_event *wait_ev;	/* the event that covers this slot's copy */
	struct ur_slot *pend_next;	/* copies on the same stream not yet covered */
};

struct ur_ctx {
	struct ur_drv *ud;
	enum ur_pool pool;
	struct io_uring ring;
	unsigned nslots;
	size_t chunk;
	struct gdx_bounce_pool *pool_mem;	/* the ring's memory; buffers indexed by slot */
	bool fixed_bufs, fixed_files;
	struct ur_slot *slots;
	struct ur_slot *free_slots;
	struct gdx_stream **streams;
	unsigned nstreams;
	pthread_mutex_t ftab_lock;
	struct { uint64_t id; bool direct; unsigned refs; } ftab[UR_FILES];
	struct ur_ctx *next_idle, *next_all;
};

struct ur_req {
	struct gdx_file_io *io;
	struct ur_file *uf;
	bool dev;		/* the caller's memory is device memory */
	bool host_direct;	/* host memory, offset and size allow O_DIRECT */
	off_t off, end, cur, eof;
	/*
	 * A write with an O_DIRECT middle between an unaligned head and tail
	 * (edges_first) issues the head, then the tail (at tail_at, lim then
	 * stops the cursor there), and the middle only once both are written:
	 * the direct write then writes back and drops the cached pages it
	 * overlaps, where a page or large folio spanning a head dirtied at the
	 * same time would keep stale bytes (as posix does, docs/storage.md).
	 */
	off_t lim, tail_at;
	bool edges_first;
	unsigned edges;		/* head and tail writes not yet finished */
	int err;
	unsigned inflight;
	int fslot[2];		/* fixed-file index for [buffered, direct], or -1 */
	/* page-cache state */
	unsigned char *map;
	size_t map_len;
	off_t map_off;
	off_t fsize;
	unsigned char *vec;
	unsigned pc_inflight, pc_depth;
	size_t pc_chunk;
	bool pc_on;		/* the range is mapped: mincore tells hot from cold */
	bool pc_reg;		/* hot ranges may be registered with the device */
	char pc_why[80];
	unsigned kdirect_chunks, kbuffered_chunks, kpread_chunks;
	struct ur_req *next;
};

/* ---- contexts ---------------------------------------------------------- */

static void ctx_destroy(struct ur_ctx *c)
{
	if (c->slots) {
		for (unsigned i = 0; i < c->nslots; i++)
			gdx_event_destroy(c->slots[i].ev);
		free(c->slots);
	}
	if (c->streams) {
		for (unsigned i = 0; i < c->nstreams; i++)
			gdx_stream_destroy(c->streams[i]);
		free(c->streams);
	}
	if (c->ring.ring_fd > 0)
		io_uring_queue_exit(&c->ring);
	gdx_bounce_pool_destroy(c->pool_mem);
	pthread_mutex_destroy(&c->ftab_lock);
	free(c);
}

static int ctx_create(struct ur_drv *ud, enum ur_pool pool, struct ur_ctx **out)
{
	struct ur_ctx *c = calloc(1, sizeof(*c));
	struct gdx_bounce_pool_opts po;
	unsigned char *base;
	struct iovec *iov = NULL;
	unsigned entries = 1;
	int ret;

	if (!c)
		return -ENOMEM;
	c->ud = ud;
	c->pool = pool;
	c->ring.ring_fd = -1;
	pthread_mutex_init(&c->ftab_lock, NULL);
	c->nstreams = (unsigned)gdx_cfg_int("file.streams");
	if (pool == POOL_BATCH) {
		c->nslots = (unsigned)gdx_cfg_int("file.batch_depth");
		c->chunk = GDX_ALIGN_UP(gdx_cfg_size("file.batch_chunk"), (size_t)PG);
	} else if (pool == POOL_SPLIT) {
		c->nslots = (unsigned)gdx_cfg_int("file.split_depth");
		c->chunk = GDX_ALIGN_UP(gdx_cfg_size("file.split_chunk"), (size_t)PG);
		c->nstreams = (unsigned)gdx_cfg_int("file.split_streams");
	} else {
		c->nslots = (unsigned)gdx_cfg_int("file.depth");
		c->chunk = GDX_ALIGN_UP(gdx_cfg_size("file.chunk_size"), (size_t)PG);
	}
	while (entries < c->nslots)
		entries <<= 1;
	ret = io_uring_queue_init(entries, &c->ring, 0);
	if (ret) {
		c->ring.ring_fd = -1;
		goto fail;
	}
	/* Pinned, page-aligned, on the GPU's NUMA node; slots index it directly. */
	gdx_bounce_pool_opts_init(&po, sizeof(po));
	po.buf_size = c->chunk;
	po.count = c->nslots;
	ret = gdx_bounce_pool_create(ud->dev, &po, &c->pool_mem);
	if (ret)
		goto fail;
	base = gdx_bounce_base(c->pool_mem);
	c->chunk = gdx_bounce_buf_size(c->pool_mem);
	ret = -ENOMEM;
	c->slots = calloc(c->nslots, sizeof(*c->slots));
	c->streams = calloc(c->nstreams, sizeof(*c->streams));
	iov = calloc(c->nslots, sizeof(*iov));
	if (!c->slots || !c->streams || !iov)
		goto fail;
	for (unsigned i = 0; i < c->nstreams; i++) {
		ret = gdx_stream_create(ud->dev, &c->streams[i]);
		if (ret)
			goto fail;
	}
	for (unsigned i = c->nslots; i-- > 0;) {
		struct ur_slot *s = &c->slots[i];

		s->idx = i;
		s->buf = base + (size_t)i * c->chunk;
		s->sidx = i % c->nstreams;
		s->st = c->streams[s->sidx];
		ret = gdx_event_create(ud->dev, 0, &s->ev);
		if (ret)
			goto fail;
		s->next = c->free_slots;
		c->free_slots = s;
		iov[i].iov_base = s->buf;
		iov[i].iov_len = c->chunk;
	}
	/* Fixed buffers and files save a page walk and an fget per I/O; optional. */
	ret = io_uring_register_buffers(&c->ring, iov, c->nslots);
	c->fixed_bufs = !ret;
	if (ret)
		GDX_DBG("file", "io_uring fixed buffers refused: %s", strerror(-ret));
	ret = io_uring_register_files_sparse(&c->ring, UR_FILES);
	c->fixed_files = !ret;
	if (ret)
		GDX_DBG("file", "io_uring fixed files refused: %s", strerror(-ret));
	free(iov);
	*out = c;
	return 0;
fail:
	free(iov);
	GDX_ERR("file", "cannot set up an I/O context (%u x %zu bytes): %s", c->nslots, c->chunk,
		gdx_strerror(ret));
	ctx_destroy(c);
	return ret;
}

static int ctx_get(struct ur_drv *ud, enum ur_pool pool, struct ur_ctx **out)
{
	unsigned max = ud->max_ctx;
	struct ur_ctx *c;
	int ret;

	pthread_mutex_lock(&ud->lock);
	for (;;) {
		c = ud->idle[pool];
		if (c) {
			ud->idle[pool] = c->next_idle;
			pthread_mutex_unlock(&ud->lock);
			*out = c;
			return 0;
		}
		if (ud->nctx[pool] < max)
			break;
		pthread_cond_wait(&ud->cond, &ud->lock);
	}
	ud->nctx[pool]++;
	pthread_mutex_unlock(&ud->lock);
	ret = ctx_create(ud, pool, &c);
	pthread_mutex_lock(&ud->lock);
	if (ret) {
		ud->nctx[pool]--;
		pthread_cond_broadcast(&ud->cond);
	} else {
		c->next_all = ud->all;
		ud->all = c;
		*out = c;
	}
	pthread_mutex_unlock(&ud->lock);
	return ret;
}

static void ctx_put(struct ur_ctx *c)
{
	struct ur_drv *ud = c->ud;

	pthread_mutex_lock(&ud->lock);
	c->next_idle = ud->idle[c->pool];
	ud->idle[c->pool] = c;
	/*
	 * Waiters of every pool share the condition: a signal could wake one of
	 * another pool, which sleeps again, while this pool's waiter never wakes.
	 */
	pthread_cond_broadcast(&ud->cond);
	pthread_mutex_unlock(&ud->lock);
}

/* Fixed-file index for one of the file's descriptors, or -1 to use it plainly. */
static int ftab_get(struct ur_ctx *c, struct ur_file *uf, bool direct)
{
	int fd = direct ? uf->fd_direct : uf->fd, victim = -1, ret;

	if (!c->fixed_files || fd < 0)
		return -1;
	pthread_mutex_lock(&c->ftab_lock);
	for (int i = 0; i < UR_FILES; i++) {
		if (c->ftab[i].id == uf->id && c->ftab[i].direct == direct) {
			c->ftab[i].refs++;
			pthread_mutex_unlock(&c->ftab_lock);
			return i;
		}
		if (!c->ftab[i].refs && (victim < 0 || !c->ftab[i].id))
			victim = i;
	}
	if (victim >= 0) {
		ret = io_uring_register_files_update(&c->ring, (unsigned)victim, &fd, 1);
		if (ret == 1) {
			c->ftab[victim].id = uf->id;
			c->ftab[victim].direct = direct;
			c->ftab[victim].refs = 1;
		} else {
			victim = -1;
		}
	}
	pthread_mutex_unlock(&c->ftab_lock);
	return victim;
}

static void ftab_put(struct ur_ctx *c, int i)
{
	if (i < 0)
		return;
	pthread_mutex_lock(&c->ftab_lock);
	c->ftab[i].refs--;
	pthread_mutex_unlock(&c->ftab_lock);
}

/* A closing file must not stay open through a ring's table. */
static void ftab_forget(struct ur_drv *ud, uint64_t id)
{
	int none = -1;

	pthread_mutex_lock(&ud->lock);
	for (struct ur_ctx *c = ud->all; c; c = c->next_all) {
		pthread_mutex_lock(&c->ftab_lock);
		for (unsigned i = 0; i < UR_FILES; i++) {
			if (c->ftab[i].id != id)
				continue;
			io_uring_register_files_update(&c->ring, i, &none, 1);
			c->ftab[i].id = 0;
		}
		pthread_mutex_unlock(&c->ftab_lock);
	}
	pthread_mutex_unlock(&ud->lock);
}

/* ---- backend ops -------------------------------------------------------- */

static void ur_fini(void *priv);

static int ur_init(struct gdx_file_driver *drv, void **priv, char *why, size_t whylen)
{
	struct io_uring probe;
	struct ur_drv *ud;
	int ret;

	/* A ring that cannot be set up here means io_uring is off (seccomp, sysctl). */
	ret = io_uring_queue_init(2, &probe, 0);
	if (ret) {
		snprintf(why, whylen, "io_uring refused: %s", strerror(-ret));
		return ret;
	}
	io_uring_queue_exit(&probe);
	ud = calloc(1, sizeof(*ud));
	if (!ud)
		return -ENOMEM;
	ud->dev = gdx_file_driver_device(drv);
	ud->ctr = drv->ctr;
	ud->max_ctx = (unsigned)gdx_cfg_int("file.contexts");
	pthread_mutex_init(&ud->lock, NULL);
	pthread_cond_init(&ud->cond, NULL);
	if ((unsigned)gdx_cfg_int("file.threads") > 1) {
		ret = gdx_tpool_create((unsigned)gdx_cfg_int("file.threads") - 1, "gdx-split",
				       &ud->split);
		if (ret) {
			ur_fini(ud);
			return ret;
		}
	}
	*priv = ud;
	return 0;
}

static void ur_fini(void *priv)
{
	struct ur_drv *ud = priv;

	while (ud->all) {
		struct ur_ctx *c = ud->all;

		ud->all = c->next_all;
		ctx_destroy(c);
	}
	gdx_tpool_destroy(ud->split);
	pthread_mutex_destroy(&ud->lock);
	pthread_cond_destroy(&ud->cond);
	free(ud);
}

static int ur_open(void *priv, struct gdx_file *f, void **fpriv, char *why, size_t whylen)
{
	unsigned flags = gdx_file_flags(f);
	struct ur_file *uf;
	char path[64];
	int fl, acc;

	(void)priv;
	(void)why;
	(void)whylen;
	uf = calloc(1, sizeof(*uf));
	if (!uf)
		return -ENOMEM;
	/*
	 * Buffered I/O (unaligned host memory, the unaligned head and tail of
	 * writes, cached chunks, the page-cache mapping) goes through a
	 * descriptor without O_DIRECT: where the handle's has it, its buffered
	 * twin, which the handle made at open (file_int.h).
	 */
	uf->fd = f->odirect && f->buffered_fd >= 0 ? f->buffered_fd : f->fd;
	uf->twin = uf->fd != f->fd;
	uf->no_twin = gdx_file_no_twin(f);
	uf->fd_direct = -1;
	uf->pc_min = gdx_cfg_size("file.pagecache_min");
	uf->pc_chunk = GDX_ALIGN_UP(gdx_cfg_size("file.pagecache_chunk"), (size_t)PG);
	uf->pc_depth = (unsigned)gdx_cfg_int("file.pagecache_depth");
	uf->split_min = gdx_cfg_size("file.split_min");
	uf->threads = (unsigned)gdx_cfg_int("file.threads");
	uf->memfs = gdx_file_fd_is_memfs(uf->fd);
	uf->pc_threads = (unsigned)gdx_cfg_int("file.pagecache_threads");
	uf->split_pread = gdx_cfg_bool("file.split_pread");
	uf->split_piece = GDX_ALIGN_UP(gdx_cfg_size("file.split_piece"), (size_t)PG);
	atomic_init(&uf->nowait_ok, true);
	atomic_init(&uf->cachestat_ok, true);
	uf->id = (uint64_t)(uintptr_t)f ^ ((uint64_t)f->fd << 48);
	fl = fcntl(f->fd, F_GETFL);
	acc = fl & O_ACCMODE;
	if (uf->no_twin) {
		/* The descriptor is all there is, O_DIRECT turned off or not. */
		uf->fd_direct = f->fd;
	} else if (flags & GDX_FILE_NO_ODIRECT) {
		snprintf(uf->dio_why, sizeof(uf->dio_why), "O_DIRECT turned off");
	} else if (uf->memfs) {
		/* tmpfs may accept O_DIRECT, but it only adds a copy there. */
		snprintf(uf->dio_why, sizeof(uf->dio_why), "memory filesystem, no O_DIRECT");
	} else if (fl & O_DIRECT) {
		uf->fd_direct = f->fd;
	} else {
		/* A second open of the same file (not a dup) can carry O_DIRECT alone. */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", f->fd);
		uf->fd_direct = open(path, acc | O_DIRECT | O_CLOEXEC);
		uf->own_direct = uf->fd_direct >= 0;
		if (uf->fd_direct < 0)
			snprintf(uf->dio_why, sizeof(uf->dio_why), "O_DIRECT refused at open: %s",
				 strerror(errno));
	}
	atomic_init(&uf->direct_ok, uf->fd_direct >= 0);
	*fpriv = uf;
	return 0;
}

static void ur_close(void *priv, struct gdx_file *f, void *fpriv)
{
	struct ur_file *uf = fpriv;

	(void)f;
	ftab_forget(priv, uf->id);
	if (uf->own_direct)
		close(uf->fd_direct);
	free(uf);
}

/* ---- the engine ---------------------------------------------------------- */

static void ctr_add(struct ur_ctx *c, int which, uint64_t n)
{
	gdx_counter_add(&c->ud->ctr[which], n);
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct engine {
	struct ur_ctx *c;
	struct ur_req *list, **tailp;	/* requests not yet finished, oldest first */
	unsigned active, kio;
	struct ur_slot *fifo_head, *fifo_tail;	/* copies in flight, oldest first */
	/* Per stream, copies enqueued since its last event record, newest first. */
	struct ur_slot *pend[64];
	gdx_file_io_more_fn more;	/* feeds further I/Os while the engine runs */
	gdx_file_io_done_fn done;
	void *arg;
	bool owned;			/* requests were allocated here */
	bool no_register;		/* hot data goes by CPU copy: see run_split */
	size_t whole_size;		/* of the I/O the requests are pieces of, or 0 */
	bool lazy_feed;			/* take I/Os only once every chunk held is issued */
};

static struct ur_slot *slot_take(struct ur_ctx *c)
{
	struct ur_slot *s = c->free_slots;

	if (s) {
		c->free_slots = s->next;
		s->next = NULL;
	}
	return s;
}

static void slot_release(struct engine *e, struct ur_slot *s)
{
	s->req->inflight--;
	if (s->edge)
		s->req->edges--;
	s->edge = false;
	s->state = S_FREE;
	s->req = NULL;
	s->next = e->c->free_slots;
	e->c->free_slots = s;
}

static void req_fail(struct ur_req *r, int err)
{
	if (!r->err)
		r->err = err;
}

static void kio_submit(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->c->ring);
	int fi = r->fslot[s->kdirect], fd = s->kdirect ? r->uf->fd_direct : r->uf->fd;
	unsigned char *p = s->kbuf + s->kdone;
	unsigned len = (unsigned)(s->klen - s->kdone);
	off_t at = s->ks + (off_t)s->kdone;

	if (!sqe) {
		io_uring_submit(&e->c->ring);
		sqe = io_uring_get_sqe(&e->c->ring);
	}
	if (fi >= 0)
		fd = fi;
	if (r->io->op == GDX_FILE_READ) {
		if (s->kfixed && e->c->fixed_bufs)
			io_uring_prep_read_fixed(sqe, fd, p, len, (uint64_t)at, (int)s->idx);
		else
			io_uring_prep_read(sqe, fd, p, len, (uint64_t)at);
	} else {
		if (s->kfixed && e->c->fixed_bufs)
			io_uring_prep_write_fixed(sqe, fd, p, len, (uint64_t)at, (int)s->idx);
		else
			io_uring_prep_write(sqe, fd, p, len, (uint64_t)at);
	}
	if (fi >= 0)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, s);
	s->state = S_KIO;
	e->kio++;
}

static void fifo_push(struct engine *e, struct ur_slot *s)
{
	s->state = S_COPY;
	s->next = NULL;
	if (e->fifo_tail)
		e->fifo_tail->next = s;
	else
		e->fifo_head = s;
	e->fifo_tail = s;
}

/* Enqueues the slot's device copy and its event; on failure the request fails. */
static int copy_start(struct engine *e, struct ur_slot *s, void *dst, const void *src, size_t n)
{
	struct gdx_device *dev = e->c->ud->dev;
	uint64_t t0 = gdx_now_ns();
	int ret = gdx_memcpy_async(dev, dst, src, n, s->st);

	ctr_add(e->c, GDX_FILE_CTR_COPY_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_COPIES, 1);
	if (ret) {
		/* An enqueued copy may still run: wait for the stream before reuse. */
		gdx_stream_synchronize(s->st);
		req_fail(s->req, ret);
		return ret;
	}
	s->pend_next = e->pend[s->sidx];
	e->pend[s->sidx] = s;
	fifo_push(e, s);
	return 0;
}

/*
 * One event record per stream covers every copy enqueued on it since the last
 * flush: the newest copy's slot records its own event and the older ones wait
 * on it.  Those sit ahead of it in the FIFO, so they retire before that slot
 * (and its event) can be used again.  Saves a record per chunk on small I/O.
 */
static void engine_flush(struct engine *e)
{
	for (unsigned i = 0; i < e->c->nstreams; i++) {
		struct ur_slot *last = e->pend[i];
		int ret;

		if (!last)
			continue;
		e->pend[i] = NULL;
		ret = gdx_event_record(last->ev, last->st);
		if (ret)
			gdx_stream_synchronize(last->st);
		for (struct ur_slot *x = last; x; x = x->pend_next) {
			x->wait_ev = last->ev;
			if (ret)
				req_fail(x->req, ret);
		}
	}
}

/* Bytes of [ps, ps+len) in the page cache, counted from ps up to the first miss. */
static size_t pc_resident(struct ur_ctx *c, struct ur_req *r, off_t ps, size_t len)
{
	size_t np = GDX_ALIGN_UP(len, (size_t)PG) / PG;
	uint64_t t0 = gdx_now_ns();
	int ret = mincore(r->map + (ps - r->map_off), np * PG, r->vec);

	ctr_add(c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	if (ret)
		return 0;
	for (size_t i = 0; i < np; i++)
		if (!(r->vec[i] & 1))
			return i * PG;
	return len;
}

/*
 * Tries the next chunk of a device read out of the page cache.  Returns 1 if
 * it was issued, 0 to go by bounce instead, -EAGAIN to wait for a page-cache
 * copy to retire first.
 */
static int pc_issue(struct engine *e, struct ur_req *r, struct ur_slot *s)
{
	struct gdx_device *dev = e->c->ud->dev;
	off_t ps = GDX_ALIGN_DOWN(r->cur, (off_t)PG);
	off_t pe = GDX_MIN(GDX_MIN(ps + (off_t)r->pc_chunk, r->end), r->fsize);
	size_t rlen = GDX_ALIGN_UP((size_t)(pe - ps), (size_t)PG);
	unsigned char *p = r->map + (ps - r->map_off);
	uint64_t t0;
	size_t hot;
	int ret;

	if (!r->pc_reg || r->cur >= r->fsize)
		return 0;
	hot = pc_resident(e->c, r, ps, (size_t)(pe - ps));
	if (hot < (size_t)(pe - ps)) {
		/* A hot stretch long enough to be worth a registration goes alone. */
		snprintf(r->pc_why, sizeof(r->pc_why), "some data not in the page cache");
		if (hot < e->c->chunk)
			return 0;
		pe = ps + (off_t)hot;
		rlen = hot;
	}
	if (r->pc_inflight >= r->pc_depth)
		return -EAGAIN;
	if (r->uf->pc_threads > 1) {
		/*
		 * The driver serialises registration across threads, and faulting
		 * the pages in inside it (page by page on tmpfs) holds the other
		 * registering workers up: map them first, outside it.  On the H200
		 * four threads registering 16 MiB ranges of tmpfs went from 9.6 to
		 * 13.1 GB/s this way; for a single thread it only moves the cost.
		 * Best effort: kernels before 5.14 fault the pages in as before.
		 */
		t0 = gdx_now_ns();
		madvise(p, rlen, MADV_POPULATE_READ);
		ctr_add(e->c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	}
	t0 = gdx_now_ns();
	ret = gdx_host_register(dev, p, rlen, GDX_HOST_REGISTER_READONLY);
	ctr_add(e->c, GDX_FILE_CTR_PC_REG_NS, gdx_now_ns() - t0);
	ctr_add(e->c, ret ? GDX_FILE_CTR_PC_REFUSED : GDX_FILE_CTR_PC_RANGES, 1);
	if (ret) {
		snprintf(r->pc_why, sizeof(r->pc_why), "registering the mapping failed: %s",
			 gdx_strerror(ret));
		r->pc_reg = false;
		return 0;
	}
	s->req = r;
	r->inflight++;
	s->pc = p;
	s->pc_len = rlen;
	s->us = r->cur;
	s->ulen = (size_t)(pe - r->cur);
	r->pc_inflight++;
	r->cur = pe;
	if (copy_start(e, s, (char *)r->io->buf + (s->us - r->off), r->map + (s->us - r->map_off),
		       s->ulen)) {
		gdx_host_unregister(dev, p);
		s->pc = NULL;
		r->pc_inflight--;
		slot_release(e, s);
		return 1;
	}
	r->io->info.bytes[GDX_FILE_PATH_PAGECACHE] += s->ulen;
	return 1;
}

static bool hot_read(struct engine *e, struct ur_slot *s);

/* The workers of a split device read pread cached chunks themselves (hot_read). */
static bool split_pread(const struct engine *e, const struct ur_req *r)
{
	return e->whole_size && r->uf->split_pread;
}

/* cachestat(2), Linux 6.5; declared here for older headers. */
struct ur_cachestat_range {
	uint64_t off, len;
};

struct ur_cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

#define UR_NR_CACHESTAT 451
/* The largest page-cache folio: 2^11 pages, the XArray's multi-index limit. */
#define UR_FOLIO_MAX ((off_t)PG << 11)

/* cachestat(2) of [off, off + len): pages in the page cache, or -1 (errno set). */
static long cached_pages(int fd, off_t off, size_t len)
{
	struct ur_cachestat_range cr = { .off = (uint64_t)off, .len = len };
	struct ur_cachestat cs;

	return syscall(UR_NR_CACHESTAT, fd, &cr, &cs, 0) ? -1 : (long)cs.nr_cache;
}

/*
 * Whether the chunk of r at c is all in the page cache: 1 yes, 0 no, -1
 * cannot tell.  Mapped requests ask mincore(); split workers that do not map
 * ask cachestat(2), one count per range, where mincore() looks at every page
 * (a tenth of a hot 1 GiB ext4 read on the H200).
 */
static int chunk_cached(struct engine *e, struct ur_req *r, off_t c, size_t chunk)
{
	struct ur_file *uf = r->uf;
	off_t ps = GDX_ALIGN_DOWN(c, (off_t)PG), base = GDX_ALIGN_DOWN(ps, UR_FOLIO_MAX);
	uint64_t t0;
	size_t n, want;
	long got;

	if (uf->memfs)
		return 1;
	if (c >= r->fsize)
		return 0;
	n = (size_t)(GDX_MIN(GDX_MIN(ps + (off_t)chunk, r->end), r->fsize) - ps);
	if (r->pc_on)
		return pc_resident(e->c, r, ps, n) == n;
	if (!split_pread(e, r) || !atomic_load_explicit(&uf->cachestat_ok, memory_order_relaxed))
		return -1;
	want = GDX_ALIGN_UP(n, (size_t)PG) / PG;
	t0 = gdx_now_ns();
	got = cached_pages(uf->fd, ps, n);
	if (got >= 0 && (size_t)got < want && ps > base) {
		/*
		 * Counted again from a boundary no folio straddles, less the
		 * pages before the chunk.  Linux (6.18 here) can count a range
		 * that starts inside a large folio short: when its walk
		 * reschedules right after that folio, xas_pause() resumes as many
		 * slots too far as the start lay past the folio's head, and the
		 * folios it jumps go uncounted.  A hot chunk then went O_DIRECT
		 * to the disk (test_file path_reporting failed about 1 run in 60
		 * under ASan, mostly with load beside it; a probe from 1 MiB into
		 * a file of 2 MiB folios read 256 of 257 pages cached while
		 * mincore() saw all 257).  Only a short count asks again: the
		 * common answer, all cached, costs one call.
		 */
		long whole = cached_pages(uf->fd, base, (size_t)(ps - base) + n);
		long before = cached_pages(uf->fd, base, (size_t)(ps - base));

		if (whole >= 0 && before >= 0)
			got = GDX_MAX(got, whole - before);
	}
	ctr_add(e->c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	if (got >= 0)
		return (size_t)got >= want;
	/* Before 6.5, or filtered: such files are mapped from the next request on. */
	atomic_store(&uf->cachestat_ok, false);
	return -1;
}

/* Lays out the next chunk of r into slot s and starts it. */
static int chunk_issue(struct engine *e, struct ur_req *r, struct ur_slot *s)
{
	size_t chunk = e->c->chunk;
	bool direct = atomic_load(&r->uf->direct_ok), hot = false, tail = false, edge = false;
	off_t c = r->cur, ks, ke;
	int ret;

	if (r->edges_first && GDX_IS_ALIGNED(c, (off_t)GDX_FILE_DIO_ALIGN)) {
		/* The head is issued: the tail next, then the middle once both are done. */
		if (r->lim > r->tail_at) {
			c = r->tail_at;
			r->lim = r->tail_at;
			tail = true;
		} else if (r->edges) {
			return -EAGAIN;
		}
	}
	edge = r->edges_first && (tail || !GDX_IS_ALIGNED(c, (off_t)GDX_FILE_DIO_ALIGN));

	if (r->dev && r->io->op == GDX_FILE_READ) {
		ret = pc_issue(e, r, s);
		if (ret)
			return ret;
		/*
		 * Cached data goes buffered (a memory copy) rather than to the disk
		 * again.  A split worker preads it itself, and also tries chunks it
		 * cannot tell about that go buffered anyway.  Without a buffered
		 * descriptor all of it goes O_DIRECT.
		 */
		if (!r->uf->no_twin && (direct || split_pread(e, r))) {
			ret = chunk_cached(e, r, c, chunk);
			hot = ret > 0 || (ret < 0 && !direct);
			direct = direct && ret <= 0;
		}
	}
	s->pc = NULL;
	s->kdone = 0;
	if (r->io->op == GDX_FILE_READ) {
		if (r->dev && direct) {
			ks = GDX_ALIGN_DOWN(c, (off_t)GDX_FILE_DIO_ALIGN);
			ke = GDX_MIN(ks + (off_t)chunk,
				     GDX_ALIGN_UP(r->end, (off_t)GDX_FILE_DIO_ALIGN));
		} else if (!r->dev && direct && r->host_direct) {
			ks = c;
			ke = GDX_MIN(c + (off_t)chunk, r->end);
		} else {
			direct = false;
			ks = c;
			ke = GDX_MIN(GDX_ALIGN_DOWN(c, (off_t)PG) + (off_t)chunk, r->end);
		}
		s->us = c;
		s->ulen = (size_t)(GDX_MIN(ke, r->end) - c);
	} else {
		bool mem_ok = r->dev || r->host_direct;

		ks = c;
		if (direct && mem_ok && !GDX_IS_ALIGNED(c, (off_t)GDX_FILE_DIO_ALIGN)) {
			/* Unaligned head: through the page cache up to the boundary. */
			direct = false;
			ke = GDX_MIN(GDX_ALIGN_UP(c, (off_t)GDX_FILE_DIO_ALIGN), r->end);
		} else if (direct && mem_ok && r->end - c >= (off_t)GDX_FILE_DIO_ALIGN) {
			ke = c + GDX_MIN((off_t)chunk,
					 GDX_ALIGN_DOWN(r->end - c, (off_t)GDX_FILE_DIO_ALIGN));
		} else {
			direct = false;
			ke = GDX_MIN(GDX_ALIGN_DOWN(c, (off_t)PG) + (off_t)chunk, r->end);
		}
		s->us = c;
		s->ulen = (size_t)(ke - c);
	}
	s->ks = ks;
	s->klen = (size_t)(ke - ks);
	s->kdirect = direct;
	s->req = r;
	s->edge = edge;
	r->edges += edge;
	r->inflight++;
	if (!tail)
		r->cur = s->us + (off_t)s->ulen;
	if (r->dev) {
		s->kbuf = s->buf;
		s->kfixed = true;
	} else {
		s->kbuf = (unsigned char *)r->io->buf + (ks - r->off);
		s->kfixed = false;
	}
	if (hot && split_pread(e, r) && hot_read(e, s))
		return 1;
	if (direct)
		r->kdirect_chunks++;
	else
		r->kbuffered_chunks++;
	if (r->dev && r->io->op == GDX_FILE_WRITE) {
		if (copy_start(e, s, s->buf, (char *)r->io->buf + (ks - r->off), s->klen))
			slot_release(e, s);
		return 1;
	}
	kio_submit(e, s);
	return 1;
}

/* The storage part of a slot finished (all of it, or at end of file). */
static void kio_finished(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;
	enum gdx_file_path hp = GDX_FILE_PATH_HOST;

	if (r->io->op == GDX_FILE_WRITE) {
		r->io->info.bytes[r->dev ? GDX_FILE_PATH_BOUNCE : hp] += s->klen;
		slot_release(e, s);
		return;
	}
	/* Bytes of the caller's range that the kernel delivered. */
	off_t got_end = s->ks + (off_t)s->kdone;
	off_t u_end = GDX_MIN(s->us + (off_t)s->ulen, got_end);
	size_t n = u_end > s->us ? (size_t)(u_end - s->us) : 0;

	if (s->kdone < s->klen)
		r->eof = GDX_MIN(r->eof, got_end);
	if (r->dev && n && !r->err) {
		if (!copy_start(e, s, (char *)r->io->buf + (s->us - r->off),
				s->buf + (s->us - s->ks), n)) {
			r->io->info.bytes[GDX_FILE_PATH_BOUNCE] += n;
			return;
		}
	} else if (!r->dev) {
		r->io->info.bytes[hp] += n;
	}
	slot_release(e, s);
}

/*
 * A cached chunk of a split I/O's device read, read here with pread into the
 * slot's pinned buffer, its copy enqueued at once and covered by its own
 * event, so the next chunk's read overlaps this one's copy.  Why not io_uring:
 * KvikIO's plain per-thread pread then copy was ahead of the workers' rings on
 * hot data on the H200, and a buffered read io_uring cannot complete inline
 * goes to its io-wq threads, one more hop and a copy on another core
 * (docs/storage.md).
 *
 * Off tmpfs the read is RWF_NOWAIT: should pages have left the cache since
 * chunk_cached looked, it stops there and the ring reads the rest.  Chunks
 * known to be cold never come here: on the H200 (kernel 6.18) RWF_NOWAIT
 * reads of cold data still cost milliseconds each (readahead), which halved a
 * cold 64 MiB read.  Returns false if the whole chunk is left to the ring.
 */
static bool hot_read(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;
	struct ur_file *uf = r->uf;
	bool nowait = !uf->memfs;
	uint64_t t0;

	if (nowait && !atomic_load_explicit(&uf->nowait_ok, memory_order_relaxed))
		return false;
	t0 = gdx_now_ns();
	while (s->kdone < s->klen) {
		struct iovec iov = { s->kbuf + s->kdone, s->klen - s->kdone };
		ssize_t n = preadv2(uf->fd, &iov, 1, s->ks + (off_t)s->kdone,
				    nowait ? RWF_NOWAIT : 0);

		if (n > 0) {
			s->kdone += (size_t)n;
			continue;
		}
		if (!n)
			break;		/* end of file */
		if (errno == EINTR)
			continue;
		ctr_add(e->c, GDX_FILE_CTR_PREAD_NS, gdx_now_ns() - t0);
		r->kbuffered_chunks++;
		if (!nowait || (errno != EAGAIN && errno != EOPNOTSUPP)) {
			req_fail(r, -errno);
			slot_release(e, s);
			return true;
		}
		if (errno == EOPNOTSUPP)
			atomic_store(&uf->nowait_ok, false);
		kio_submit(e, s);
		return true;
	}
	ctr_add(e->c, GDX_FILE_CTR_PREAD_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_PREADS, 1);
	r->kbuffered_chunks++;
	r->kpread_chunks++;
	kio_finished(e, s);
	engine_flush(e);
	return true;
}

static void cqe_handle(struct engine *e, struct ur_slot *s, int res)
{
	struct ur_req *r = s->req;

	ctr_add(e->c, GDX_FILE_CTR_KIOS, 1);
	ctr_add(e->c, GDX_FILE_CTR_KIO_DEPTH, e->kio);
	ctr_add(e->c, GDX_FILE_CTR_KIO_ACTIVE, e->active);
	e->kio--;
	if (res == -EINTR || res == -EAGAIN) {
		kio_submit(e, s);
		return;
	}
	if (res == -EINVAL && s->kdirect && !r->uf->no_twin) {
		/* The filesystem refused O_DIRECT here: the rest of this file goes buffered. */
		if (atomic_exchange(&r->uf->direct_ok, false))
			snprintf(r->uf->dio_why, sizeof(r->uf->dio_why),
				 "O_DIRECT refused at first I/O: EINVAL");
		s->kdirect = false;
		kio_submit(e, s);
		return;
	}
	if (res < 0) {
		req_fail(r, res);
		slot_release(e, s);
		return;
	}
	s->kdone += (size_t)res;
	if (res == 0 && r->io->op == GDX_FILE_WRITE) {
		req_fail(r, -EIO);
		slot_release(e, s);
		return;
	}
	if (res > 0 && s->kdone < s->klen && !r->err) {
		bool aligned = GDX_IS_ALIGNED(s->kdone, (size_t)GDX_FILE_DIO_ALIGN);

		if (r->io->op == GDX_FILE_WRITE) {
			s->kdirect = s->kdirect && aligned;
			kio_submit(e, s);
			return;
		}
		/* A short O_DIRECT read that stops off the alignment is end of file. */
		if (!s->kdirect || aligned) {
			kio_submit(e, s);
			return;
		}
	}
	kio_finished(e, s);
}

/* A copy retired: free the page-cache pin, or send a bounce buffer to storage. */
static void copy_retired(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;

	if (s->pc) {
		uint64_t t0 = gdx_now_ns();

		gdx_host_unregister(e->c->ud->dev, s->pc);
		ctr_add(e->c, GDX_FILE_CTR_PC_UNREG_NS, gdx_now_ns() - t0);
		s->pc = NULL;
		r->pc_inflight--;
		slot_release(e, s);
	} else if (r->io->op == GDX_FILE_WRITE && !r->err) {
		kio_submit(e, s);
	} else {
		slot_release(e, s);
	}
}

static bool req_more(const struct ur_req *r)
{
	return !r->err && r->cur < r->lim && r->cur < r->eof;
}

static void req_setup(struct engine *e, struct ur_req *r, struct gdx_file_io *io)
{
	struct ur_ctx *c = e->c;
	unsigned flags = gdx_file_flags(io->file);
	struct stat st;
	bool small, reg;
	uint64_t t0;

	memset(r, 0, sizeof(*r));
	r->io = io;
	r->uf = gdx_file_backend_priv(io->file);
	r->dev = io->attrs.kind == GDX_MEM_DEVICE;
	r->off = r->cur = io->off;
	r->end = r->lim = io->off + (off_t)io->size;
	r->eof = INT64_MAX;
	r->host_direct = !r->dev && GDX_IS_ALIGNED((uintptr_t)io->buf, GDX_FILE_DIO_ALIGN) &&
			 GDX_IS_ALIGNED(io->off, (off_t)GDX_FILE_DIO_ALIGN) &&
			 GDX_IS_ALIGNED(io->size, (size_t)GDX_FILE_DIO_ALIGN);
	r->fslot[0] = ftab_get(c, r->uf, false);
	r->fslot[1] = atomic_load(&r->uf->direct_ok) ? ftab_get(c, r->uf, true) : -1;
	r->pc_why[0] = 0;
	if (r->dev && io->op != GDX_FILE_READ && atomic_load(&r->uf->direct_ok)) {
		off_t head = GDX_ALIGN_UP(r->off, (off_t)GDX_FILE_DIO_ALIGN);

		r->tail_at = GDX_ALIGN_DOWN(r->end, (off_t)GDX_FILE_DIO_ALIGN);
		r->edges_first = head < r->tail_at && (head != r->off || r->tail_at != r->end);
	}
	if (!r->dev || io->op != GDX_FILE_READ)
		return;
	small = (e->whole_size ? e->whole_size : io->size) < r->uf->pc_min;
	reg = !(flags & GDX_FILE_NO_PAGECACHE) && !e->no_register;
	if (flags & GDX_FILE_NO_PAGECACHE)
		snprintf(r->pc_why, sizeof(r->pc_why), "registration turned off");
	else if (small)
		snprintf(r->pc_why, sizeof(r->pc_why), "read below file.pagecache_min");
	else if (e->no_register)
		snprintf(r->pc_why, sizeof(r->pc_why), "copied by the CPU (file.pagecache_threads "
			 "= %u of the workers register)", r->uf->pc_threads);
	/*
	 * Without registration the mapping still tells cached chunks, read
	 * buffered (a memory copy), from cold ones, read with O_DIRECT: turning
	 * the page-cache path off must not send hot data back to the disk (on
	 * the H200 that took a hot ext4 read from 30 to 2 GB/s).  Small reads
	 * are not worth a mapping; without O_DIRECT every chunk goes buffered
	 * anyway, and split workers that do not register ask cachestat(2)
	 * (chunk_cached): for those the file's size is all that is needed.
	 */
	if (small)
		return;
	t0 = gdx_now_ns();
	if (fstat(r->uf->fd, &st) || !S_ISREG(st.st_mode) || st.st_size <= io->off)
		return;
	r->fsize = st.st_size;
	if (!reg && (r->uf->no_twin || !atomic_load(&r->uf->direct_ok) ||
		     (split_pread(e, r) && atomic_load(&r->uf->cachestat_ok))))
		return;
	r->pc_chunk = r->uf->pc_chunk;
	r->pc_depth = r->uf->pc_depth;
	r->map_off = GDX_ALIGN_DOWN(io->off, (off_t)PG);
	r->map_len = GDX_ALIGN_UP((size_t)(GDX_MIN(r->end, r->fsize) - r->map_off), (size_t)PG);
	/* mincore() vector for a page-cache range or a bounce chunk, whichever is longer. */
	r->vec = malloc(GDX_MAX(r->pc_chunk, c->chunk) / PG + 1);
	r->map = mmap(NULL, r->map_len, PROT_READ, MAP_SHARED, r->uf->fd, r->map_off);
	ctr_add(c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	if (r->map == MAP_FAILED || !r->vec) {
		snprintf(r->pc_why, sizeof(r->pc_why), "cannot map the file: %s",
			 r->vec ? strerror(errno) : "no memory");
		if (r->map != MAP_FAILED)
			munmap(r->map, r->map_len);
		r->map = NULL;
		free(r->vec);
		r->vec = NULL;
		return;
	}
	r->pc_on = true;
	r->pc_reg = reg;
}

static void req_finish(struct engine *e, struct ur_req *r)
{
	struct gdx_file_io *io = r->io;
	struct gdx_file_io_info *in = &io->info;
	const char *how = r->kdirect_chunks ? (r->kbuffered_chunks ? "O_DIRECT and buffered" :
					       "O_DIRECT") : "buffered";
	/* Why no chunk went O_DIRECT: the file refused it, or (reads) it was all cached. */
	const char *dio = r->kdirect_chunks ? "" : r->uf->dio_why[0] ? r->uf->dio_why :
			  io->op == GDX_FILE_READ && r->kbuffered_chunks ?
			  "cached data read buffered, not O_DIRECT" : "";
	off_t last = GDX_MIN(r->end, r->eof);
	/* The handle's descriptor has O_DIRECT: say that buffered I/O went around it. */
	bool twin = r->uf->twin && r->kbuffered_chunks;

	ftab_put(e->c, r->fslot[0]);
	ftab_put(e->c, r->fslot[1]);
	if (r->map) {
		uint64_t t0 = gdx_now_ns();

		munmap(r->map, r->map_len);
		ctr_add(e->c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	}
	free(r->vec);
	r->map = NULL;
	r->vec = NULL;
	if (r->err)
		io->result = r->err;
	else if (io->op == GDX_FILE_READ)
		io->result = last > r->off ? (ssize_t)(last - r->off) : 0;
	else
		io->result = (ssize_t)io->size;
	if (!r->dev)
		gdx_file_why(in, "%s I/O straight to/from %s memory%s", how,
			     gdx_mem_kind_name(io->attrs.kind), twin ? " (the descriptor has O_DIRECT: "
			     "buffered through a second open without it)" : "");
	else if (in->bytes[GDX_FILE_PATH_PAGECACHE] && !in->bytes[GDX_FILE_PATH_BOUNCE])
		gdx_file_why(in, "data in page cache: device copied from the registered mapping");
	else
		gdx_file_why(in, "%s %s through pinned bounce buffers%s%s%s%s%s%s",
			     how, io->op == GDX_FILE_READ ? "reads" : "writes",
			     r->kpread_chunks ? " (cached chunks by pread on the worker)" : "",
			     twin ? "; buffered chunks through a second open without O_DIRECT" : "",
			     r->pc_why[0] ? "; page cache: " : "", r->pc_why,
			     dio[0] ? "; " : "", dio);
	if (r->uf->no_twin && r->kdirect_chunks) {
		size_t n = strlen(in->why);

		snprintf(in->why + n, sizeof(in->why) - n, "; O_DIRECT on the descriptor itself "
			 "(%sits second open without O_DIRECT failed: %s)",
			 gdx_file_flags(io->file) & GDX_FILE_NO_ODIRECT ? "turned off, but " : "",
			 strerror(-io->file->buffered_fd));
	}
	e->active--;
	if (e->done)
		e->done(io, e->arg);
	if (e->owned)
		free(r);
}

static void engine_add(struct engine *e, struct ur_req *r)
{
	r->next = NULL;
	*e->tailp = r;
	e->tailp = &r->next;
	e->active++;
}

static ssize_t strict_refuse(struct gdx_file_io *io);
static bool twin_refuse(struct gdx_file_io *io);

/* Takes I/Os the caller queued since the last look. */
static void engine_feed(struct engine *e)
{
	struct gdx_file_io *ios[32];
	unsigned n;

	if (e->lazy_feed)
		for (struct ur_req *r = e->list; r; r = r->next)
			if (req_more(r))
				return;
	n = e->more ? e->more(e->arg, ios, 32) : 0;

	for (unsigned i = 0; i < n; i++) {
		struct ur_req *r;

		if (ios[i]->strict && ios[i]->attrs.kind == GDX_MEM_DEVICE) {
			ios[i]->result = strict_refuse(ios[i]);
			e->done(ios[i], e->arg);
			continue;
		}
		if (twin_refuse(ios[i])) {
			e->done(ios[i], e->arg);
			continue;
		}
		r = malloc(sizeof(*r));
		if (!r) {
			ios[i]->result = -ENOMEM;
			e->done(ios[i], e->arg);
			continue;
		}
		req_setup(e, r, ios[i]);
		engine_add(e, r);
	}
}

/* Finishes requests with nothing left to do, and unlinks them. */
static void engine_sweep(struct engine *e)
{
	struct ur_req **pp = &e->list;

	e->tailp = &e->list;
	while (*pp) {
		struct ur_req *r = *pp;

		if (!r->inflight && !req_more(r)) {
			*pp = r->next;
			req_finish(e, r);
			continue;
		}
		e->tailp = &r->next;
		pp = &r->next;
	}
}

static void engine_run(struct engine *e)
{
	uint64_t t0 = gdx_now_ns(), cpu0 = thread_cpu_ns(), tw;
	struct io_uring_cqe *cqe;

	for (;;) {
		struct gdx_event *fired = NULL;
		bool progress = false;

		engine_feed(e);
		if (!e->active)
			break;
		while (e->fifo_head) {
			struct ur_slot *s = e->fifo_head;
			/* Slots of one flush share an event: one query answers for all. */
			int q = s->wait_ev == fired ? 0 : gdx_event_query(s->wait_ev);

			if (q == -EBUSY)
				break;
			if (!q)
				fired = s->wait_ev;
			/* A failed copy (or query) fails its request; the buffer still returns. */
			if (q)
				req_fail(s->req, q);
			e->fifo_head = s->next;
			if (!e->fifo_head)
				e->fifo_tail = NULL;
			copy_retired(e, s);
			progress = true;
		}
		/* Oldest request first: a batch of small I/Os completes in order of arrival. */
		for (struct ur_req *r = e->list; r && e->c->free_slots;) {
			struct ur_slot *s;

			if (!req_more(r)) {
				r = r->next;
				continue;
			}
			s = slot_take(e->c);
			if (chunk_issue(e, r, s) == -EAGAIN) {
				/* Page-cache window full: the slot goes back, another request may use it. */
				s->next = e->c->free_slots;
				e->c->free_slots = s;
				r = r->next;
				continue;
			}
			progress = true;
		}
		engine_flush(e);
		engine_sweep(e);
		if (!e->active)
			continue;	/* one more look for fed I/O before leaving */
		if (e->kio) {
			unsigned head, seen = 0;

			io_uring_submit(&e->c->ring);
			if (!progress) {
				tw = gdx_now_ns();
				if (e->fifo_head || e->more) {
					struct __kernel_timespec ts = { .tv_nsec = 50000 };

					io_uring_wait_cqe_timeout(&e->c->ring, &cqe, &ts);
				} else {
					io_uring_wait_cqe(&e->c->ring, &cqe);
				}
				ctr_add(e->c, GDX_FILE_CTR_ENGINE_WAIT_NS, gdx_now_ns() - tw);
			}
			/*
			 * A few completions per pass, so their copies retire and their
			 * requests complete (and a batch's caller refills) while the
			 * rest are still handled.  On the H200 the virtio disk returned
			 * a 64-deep batch of 4 KiB reads all at once; handling all 64
			 * (a copy submission each) before completing any kept the disk
			 * idle for as long as it had worked (docs/storage.md).
			 */
			io_uring_for_each_cqe(&e->c->ring, head, cqe) {
				/* Kernels without EXT_ARG report the wait's own timeout here. */
				if (cqe->user_data != LIBURING_UDATA_TIMEOUT)
					cqe_handle(e, io_uring_cqe_get_data(cqe), cqe->res);
				if (++seen == UR_REAP)
					break;
			}
			io_uring_cq_advance(&e->c->ring, seen);
			engine_flush(e);
		} else if (e->fifo_head && !progress) {
			int q;

			tw = gdx_now_ns();
			q = gdx_event_synchronize(e->fifo_head->wait_ev);
			ctr_add(e->c, GDX_FILE_CTR_ENGINE_WAIT_NS, gdx_now_ns() - tw);
			if (q)
				req_fail(e->fifo_head->req, q);
		}
	}
	ctr_add(e->c, GDX_FILE_CTR_ENGINE_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_ENGINE_CPU_NS, thread_cpu_ns() - cpu0);
}

static ssize_t strict_refuse(struct gdx_file_io *io)
{
	gdx_file_why(&io->info, "uring backend stages device memory through host memory; "
		     "the direct path is not available for this file");
	return GDX_ENOTDIRECT;
}

/*
 * Without a buffered descriptor (ur_file.no_twin) an I/O that has a part
 * O_DIRECT refuses fails whole, before any of it runs: host memory, offset
 * and size must be aligned, and so must a write's offset and size (its head
 * and tail would go buffered).  A device read is always an aligned superset.
 */
static bool twin_refuse(struct gdx_file_io *io)
{
	struct ur_file *uf = gdx_file_backend_priv(io->file);
	bool devmem = io->attrs.kind == GDX_MEM_DEVICE;

	if (!uf->no_twin || (devmem && io->op == GDX_FILE_READ) ||
	    gdx_file_dio_aligned(devmem ? NULL : io->buf, io->off, io->size))
		return false;
	io->result = gdx_file_twin_refuse(io->file, &io->info, "uring");
	return true;
}

/* One I/O on one context, start to end on this thread. */
static ssize_t run_one(struct ur_drv *ud, struct gdx_file_io *io)
{
	struct ur_req r;
	struct engine e = { .tailp = &e.list };
	int ret;

	ret = ctx_get(ud, POOL_SEQ, &e.c);
	if (ret) {
		gdx_file_why(&io->info, "uring: no I/O context: %s", gdx_strerror(ret));
		io->untouched = true;
		return io->result = ret;
	}
	req_setup(&e, &r, io);
	engine_add(&e, &r);
	engine_run(&e);
	ctx_put(e.c);
	return io->result;
}

/*
 * A large I/O runs as pieces that several workers, each on its own context,
 * take in order from a shared cursor, up to file.pagecache_depth at a time
 * each: more storage I/O in flight, more copy streams, and the CPU work spread
 * over cores, with no worker left idle while another still has a long part.
 *
 * Only the first file.pagecache_threads workers register page-cache ranges
 * with the device.  On the lent H200 the driver serialises registration and
 * unregistration across threads (docs/storage.md): a second registering
 * thread only queues behind the first, while a worker copying hot data with
 * the CPU (buffered reads into its bounce ring) adds its own bandwidth.
 *
 * The caller is the first worker and holds no context while it waits for the
 * others, so workers queued behind other callers always find one.
 */
struct piece {
	struct gdx_file_io io;
};

struct split {
	struct ur_drv *ud;
	size_t size;			/* of the whole I/O */
	struct piece *pieces;
	unsigned npieces, ahead;
	_Atomic unsigned next;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned pending;		/* workers on the pool that have not returned */
};

struct worker {
	struct split *sp;
	unsigned active;		/* pieces on this worker's engine */
};

static unsigned worker_more(void *arg, struct gdx_file_io **ios, unsigned max)
{
	struct worker *w = arg;
	struct split *sp = w->sp;
	unsigned n = 0;

	while (n < max && w->active < sp->ahead) {
		unsigned k = atomic_fetch_add(&sp->next, 1);

		if (k >= sp->npieces)
			break;
		ios[n++] = &sp->pieces[k].io;
		w->active++;
	}
	return n;
}

static void worker_done(struct gdx_file_io *io, void *arg)
{
	(void)io;
	((struct worker *)arg)->active--;
}

static void worker_run(struct split *sp, bool reg)
{
	struct worker w = { .sp = sp };
	/*
	 * A piece is taken only once every chunk of those held has been issued:
	 * taken earlier, pieces wait on a worker while others run dry, and the
	 * read ends when the most loaded worker does.
	 */
	struct engine e = { .tailp = &e.list, .more = worker_more, .done = worker_done, .arg = &w,
			    .owned = true, .no_register = !reg, .whole_size = sp->size,
			    .lazy_feed = true };

	/* Without a context this worker takes no piece; the caller runs what is left. */
	if (ctx_get(sp->ud, POOL_SPLIT, &e.c))
		return;
	engine_run(&e);
	ctx_put(e.c);
}

static void worker_end(struct split *sp)
{
	pthread_mutex_lock(&sp->lock);
	if (--sp->pending == 0)
		pthread_cond_signal(&sp->cond);
	pthread_mutex_unlock(&sp->lock);
}

static void worker_job(void *arg)
{
	worker_run(arg, false);
	worker_end(arg);
}

static void worker_job_reg(void *arg)
{
	worker_run(arg, true);
	worker_end(arg);
}

static ssize_t run_split(struct ur_drv *ud, struct ur_file *uf, struct gdx_file_io *io,
			 unsigned n, size_t psz)
{
	struct split sp = { .ud = ud, .size = io->size, .ahead = GDX_MAX(uf->pc_depth, 1u),
			    .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	off_t end = io->off + (off_t)io->size, from = io->off, to = end, grid;
	off_t head = GDX_ALIGN_UP(from, (off_t)GDX_FILE_DIO_ALIGN);
	off_t tail = GDX_ALIGN_DOWN(end, (off_t)GDX_FILE_DIO_ALIGN);
	unsigned k, nreg = uf->pc_threads, nedges = 0;
	ssize_t total = 0;
	bool short_seen = false;

	/*
	 * A device write with an O_DIRECT middle writes its unaligned head and
	 * tail first, as pieces of their own, and hands the workers the middle
	 * once they are done (struct ur_req, edges_first: a large folio can span
	 * a head and the middle of several pieces).
	 */
	if (io->op != GDX_FILE_READ && io->attrs.kind == GDX_MEM_DEVICE &&
	    atomic_load(&uf->direct_ok) && head < tail && (head != from || tail != end)) {
		nedges = (head != from) + (tail != end);
		from = head;
		to = tail;
	}
	/*
	 * Pieces are cut at page multiples of the file, wherever the I/O starts
	 * (a checkpoint's data follows a header of any length): a piece cut off
	 * the page grid ends in a chunk of the few bytes up to the grid, one
	 * more storage read and copy per piece, and cold reads would round both
	 * ends of every piece out to O_DIRECT's alignment.  Only the first piece
	 * is shorter.
	 */
	grid = GDX_ALIGN_DOWN(from, (off_t)PG);
	sp.npieces = nedges + (unsigned)(((size_t)(to - grid) + psz - 1) / psz);
	sp.pieces = calloc(sp.npieces, sizeof(*sp.pieces));
	if (!sp.pieces)
		return run_one(ud, io);
	for (k = 0; k < sp.npieces; k++) {
		struct gdx_file_io *p = &sp.pieces[k].io;
		off_t at, stop;

		if (k < nedges) {	/* the head, then the tail */
			bool h = k == 0 && head != io->off;

			at = h ? io->off : tail;
			stop = h ? head : end;
		} else {
			at = grid + (off_t)((size_t)(k - nedges) * psz);
			stop = GDX_MIN(at + (off_t)psz, to);
			at = GDX_MAX(at, from);
		}
		*p = *io;
		p->off = at;
		p->buf = (char *)io->buf + (at - io->off);
		p->size = (size_t)(stop - at);
	}
	atomic_init(&sp.next, nedges);
	for (k = 0; k < nedges; k++) {
		if (run_one(ud, &sp.pieces[k].io) < 0) {
			/* The middle is not written: its pieces keep the I/O's result, 0. */
			atomic_store(&sp.next, sp.npieces);
			n = 1;
		}
	}
	sp.pending = n - 1;
	for (k = 1; k < n; k++) {
		if (gdx_tpool_submit(ud->split, k < nreg ? worker_job_reg : worker_job, &sp)) {
			pthread_mutex_lock(&sp.lock);
			sp.pending--;
			pthread_mutex_unlock(&sp.lock);
		}
	}
	worker_run(&sp, nreg > 0);
	pthread_mutex_lock(&sp.lock);
	while (sp.pending)
		pthread_cond_wait(&sp.cond, &sp.lock);
	pthread_mutex_unlock(&sp.lock);
	/* Pieces no worker could take (no context): each fails or falls back alone. */
	for (k = atomic_load(&sp.next); k < sp.npieces; k++)
		run_one(ud, &sp.pieces[k].io);
	/* Bytes count up to the first short piece (end of file); any error wins. */
	io->untouched = true;
	for (k = 0; k < sp.npieces; k++) {
		struct gdx_file_io *p = &sp.pieces[k].io;

		io->untouched = io->untouched && p->untouched;
		for (int q = 0; q < GDX_FILE_PATH_COUNT; q++)
			io->info.bytes[q] += p->info.bytes[q];
		if (total >= 0 && p->result < 0)
			total = p->result;
		if (total < 0 || short_seen)
			continue;
		total += p->result;
		short_seen = (size_t)p->result < p->size;
	}
	/* Pieces that went different ways each say so. */
	io->info.why[0] = 0;
	for (k = 0; k < sp.npieces; k++) {
		const char *w = sp.pieces[k].io.info.why;
		size_t len = strlen(io->info.why);

		if (!strstr(io->info.why, w))
			snprintf(io->info.why + len, sizeof(io->info.why) - len, "%s%s",
				 len ? " | " : "", w);
	}
	free(sp.pieces);
	pthread_mutex_destroy(&sp.lock);
	pthread_cond_destroy(&sp.cond);
	return io->result = total;
}

static ssize_t ur_io(void *priv, struct gdx_file *f, void *fpriv, struct gdx_file_io *io)
{
	struct ur_drv *ud = priv;
	struct ur_file *uf = fpriv;
	size_t split_min = uf->split_min;
	unsigned n = uf->threads;

	(void)f;
	if (io->strict && io->attrs.kind == GDX_MEM_DEVICE)
		return strict_refuse(io);
	if (twin_refuse(io))
		return io->result;
	if (ud->split && n > 1 && io->size >= split_min) {
		size_t psz = uf->split_piece;

		n = (unsigned)GDX_MIN((size_t)n, (io->size + psz - 1) / psz);
		if (n > 1)
			return run_split(ud, uf, io, n, psz);
	}
	return run_one(ud, io);
}

static void ur_io_many(void *priv, gdx_file_io_more_fn more, gdx_file_io_done_fn done, void *arg)
{
	struct engine e = { .tailp = &e.list, .more = more, .done = done, .arg = arg,
			    .owned = true };
	struct gdx_file_io *io;
	int ret;

	ret = ctx_get(priv, POOL_BATCH, &e.c);
	if (ret) {
		while (more(arg, &io, 1)) {
			io->result = ret;
			done(io, arg);
		}
		return;
	}
	engine_run(&e);
	ctx_put(e.c);
}

const struct gdx_file_backend_ops gdx_file_uring_ops = {
	.name = "uring",
	.init = ur_init,
	.fini = ur_fini,
	.open = ur_open,
	.close = ur_close,
	.io = ur_io,
	.io_many = ur_io_many,
};
