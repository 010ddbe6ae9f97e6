/* SPDX-License-Identifier: MIT */
/*
 * The uring backend's I/O contexts: a pool per driver and kind (single I/Os,
 * split workers, batches), taken and given back by the threads that run I/O,
 * under ur_drv.lock; each context's table of fixed files, under its
 * ftab_lock, and a closing handle's entries dropped from every context.
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

void ur_ctx_destroy(struct ur_ctx *c)
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
