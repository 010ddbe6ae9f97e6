/* SPDX-License-Identifier: MIT */
/*
 * The uring backend's I/O contexts: a pool per driver and kind (single I/Os,
 * split workers, batches), taken and given back by the threads that run I/O,
 * under ur_drv.lock; each context's stage lanes and their rings, fixed
 * buffers of its io_uring, opened with it; each context's table of fixed
 * files, under its ftab_lock, and a closing handle's entries dropped from
 * every context.  A context whose lane failed is destroyed when given back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "file/uring_int.h"

/* ---- contexts ---------------------------------------------------------- */

static void lane_close(struct ur_lane *l)
{
	gdx_stage_close(l->st);
}

void ur_ctx_destroy(struct ur_ctx *c)
{
	/* the kernel lets go of the rings (fixed buffers) before they are freed */
	if (c->ring.ring_fd > 0)
		io_uring_queue_exit(&c->ring);
	for (unsigned i = 0; c->rd && i < c->nrd; i++)
		lane_close(&c->rd[i]);
	free(c->rd);
	lane_close(&c->wr);
	free(c->slots);
	pthread_mutex_destroy(&c->ftab_lock);
	free(c);
}

/*
 * A lane of chunks x c->chunk bytes on its own stream, events marking its
 * copies a chunk of ring bytes apart (file.copy_word: a done word each).
 * Pieces start at O_DIRECT's alignment; at two chunks or more a piece of at
 * most a chunk is never shortened (gdx_byte_ring_place).
 */
static int lane_open(struct ur_ctx *c, struct ur_lane *l, enum gdx_stage_dir dir,
		     unsigned chunks)
{
	struct gdx_stage_opts o;

	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.mode = gdx_cfg_bool("file.copy_word") ? GDX_STAGE_WORD : GDX_STAGE_EVENTS;
	/* a failed copy ends the lane: its context is destroyed once its I/O is done */
	o.fault = GDX_STAGE_FAIL;
	o.chunk = c->chunk;
	o.chunks = GDX_MAX(2u, chunks);
	o.align = GDX_FILE_DIO_ALIGN;
	o.marks = c->nslots + 1;	/* one a slot: a post never waits for a mark */
	o.pieces = c->nslots;		/* storage I/O fills them in any order */
	o.effect_size = sizeof(struct ur_slot *);
	o.run = dir == GDX_STAGE_H2D ? ur_read_landed : ur_write_landed;
	o.owner = l;
	l->c = c;
	return gdx_stage_open(c->ud->stage, &o, &l->st);
}

/*
 * The lane's ring as io_uring fixed buffers from index l->buf, into iov
 * (NULL: counts them).  io_uring refuses a buffer over UR_FIXED_MAX, so a
 * larger ring goes as buffers l->seg bytes apart that overlap by a chunk:
 * a piece (at most a chunk, never across the ring's end) lies whole in the
 * one its start falls in (kio_submit).
 */
static unsigned lane_fixed(struct ur_lane *l, size_t chunk, struct iovec *iov)
{
	size_t size, at;
	unsigned n = 0;

	l->base = gdx_stage_ring(l->st, &size);
	l->seg = size <= UR_FIXED_MAX ? size : GDX_ALIGN_DOWN(UR_FIXED_MAX - chunk, (size_t)PG);
	for (at = 0; at < size; at += l->seg, n++)
		if (iov)
			iov[n] = (struct iovec){ l->base + at, GDX_MIN(size - at, UR_FIXED_MAX) };
	return n;
}

static int ctx_create(struct ur_drv *ud, enum ur_pool pool, struct ur_ctx **out)
{
	struct ur_ctx *c = calloc(1, sizeof(*c));
	struct iovec *iov = NULL;
	unsigned entries = 1, nstreams, per, nbufs = 0;
	int ret;

	if (!c)
		return -ENOMEM;
	c->ud = ud;
	c->pool = pool;
	c->ring.ring_fd = -1;
	pthread_mutex_init(&c->ftab_lock, NULL);
	nstreams = (unsigned)gdx_cfg_int("file.streams");
	if (pool == POOL_BATCH) {
		c->nslots = (unsigned)gdx_cfg_int("file.batch_depth");
		c->chunk = GDX_ALIGN_UP(gdx_cfg_size("file.batch_chunk"), (size_t)PG);
	} else if (pool == POOL_SPLIT) {
		c->nslots = (unsigned)gdx_cfg_int("file.split_depth");
		c->chunk = GDX_ALIGN_UP(gdx_cfg_size("file.split_chunk"), (size_t)PG);
		nstreams = (unsigned)gdx_cfg_int("file.split_streams");
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
	/*
	 * A read lane a stream, the depth's chunks shared among them, two at
	 * least each; the write lane holds the whole depth.  Pinned, on the
	 * GPU's NUMA node, opened here and never on an I/O.
	 */
	c->nrd = GDX_MIN(nstreams, GDX_MAX(1u, c->nslots / 2));
	per = (c->nslots + c->nrd - 1) / c->nrd;
	ret = -ENOMEM;
	c->slots = calloc(c->nslots, sizeof(*c->slots));
	c->rd = calloc(c->nrd, sizeof(*c->rd));
	if (!c->slots || !c->rd)
		goto fail;
	for (unsigned i = 0; i <= c->nrd; i++) {
		ret = lane_open(c, i < c->nrd ? &c->rd[i] : &c->wr,
				i < c->nrd ? GDX_STAGE_H2D : GDX_STAGE_D2H,
				i < c->nrd ? per : c->nslots);
		if (ret)
			goto fail;
	}
	/* the bounce pool rounds a chunk up (huge pages): the lanes' chunk is the one */
	c->chunk = c->wr.st->o.chunk;
	for (unsigned i = 0; i <= c->nrd; i++) {
		struct ur_lane *l = i < c->nrd ? &c->rd[i] : &c->wr;

		l->buf = nbufs;
		nbufs += lane_fixed(l, c->chunk, NULL);
	}
	ret = -ENOMEM;
	iov = calloc(nbufs, sizeof(*iov));
	if (!iov)
		goto fail;
	for (unsigned i = 0; i <= c->nrd; i++) {
		struct ur_lane *l = i < c->nrd ? &c->rd[i] : &c->wr;

		lane_fixed(l, c->chunk, iov + l->buf);
	}
	for (unsigned i = c->nslots; i-- > 0;) {
		c->slots[i].next = c->free_slots;
		c->free_slots = &c->slots[i];
	}
	/* Fixed buffers and files save a page walk and an fget per I/O; optional. */
	ret = io_uring_register_buffers(&c->ring, iov, nbufs);
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
	ur_ctx_destroy(c);
	return ret;
}

int ur_ctx_get(struct ur_drv *ud, enum ur_pool pool, struct ur_ctx **out)
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

void ur_ctx_put(struct ur_ctx *c)
{
	struct ur_drv *ud = c->ud;

	pthread_mutex_lock(&ud->lock);
	if (c->broken) {
		struct ur_ctx **pp = &ud->all;

		while (*pp != c)
			pp = &(*pp)->next_all;
		*pp = c->next_all;
		ud->nctx[c->pool]--;
		pthread_cond_broadcast(&ud->cond);
		pthread_mutex_unlock(&ud->lock);
		ur_ctx_destroy(c);
		return;
	}
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
int ur_ftab_get(struct ur_ctx *c, struct ur_file *uf, bool direct)
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

void ur_ftab_put(struct ur_ctx *c, int i)
{
	if (i < 0)
		return;
	pthread_mutex_lock(&c->ftab_lock);
	c->ftab[i].refs--;
	pthread_mutex_unlock(&c->ftab_lock);
}

/* A closing file must not stay open through a ring's table. */
void ur_ftab_forget(struct ur_drv *ud, uint64_t id)
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
