/* SPDX-License-Identifier: MIT */
/*
 * User I/O: each gdx_nvmf_io becomes one or more NVMe commands (split at the
 * controller's largest transfer and spread over the I/O queues), all
 * submitted before any is waited for.  Stream-ordered submissions run on a
 * worker thread gated by a host function on the caller's stream.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"
#include "nvmf/host/host.h"
#include "nvmf/proto/nvme.h"

#define SUB "nvmf-host"
#define MAX_NLB 65536u		/* NLB is a 16-bit 0's based count */
#define MAX_DSM_RANGES 256u

struct sub;

struct group {
	pthread_mutex_t m;
	pthread_cond_t cv;
	unsigned pending;
	/* callback submissions: the group owns the commands and calls cb at the end */
	gdx_nvmf_io_cb cb;
	void *cb_arg;
	struct gdx_nvmf_io *io;
	struct sub *subs;
	unsigned nsubs;
};


struct sub {
	struct nh_req r;
	struct group *g;
	struct gdx_nvmf_io *io;
	void *dsm;		/* range list owned by this command */
};

static int block_size(struct nh_ctrl *c, uint32_t nsid, uint32_t *bs)
{
	struct gdx_nvmf_ns_info in;
	int rc;

	pthread_mutex_lock(&c->lock);
	for (unsigned i = 0; i < c->nns; i++) {
		if (c->ns[i].nsid == nsid) {
			*bs = c->ns[i].block_size;
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&c->lock);
	rc = gdx_nvmf_identify_ns((struct gdx_nvmf_ctrl *)c, nsid, &in);
	if (rc)
		return rc == -ENOENT || gdx_nvme_status(rc) ? -ENOENT : rc;
	pthread_mutex_lock(&c->lock);
	c->ns[c->nns % GDX_ARRAY_SIZE(c->ns)] =
		(struct nh_ns_cache){ .nsid = nsid, .block_size = in.block_size };
	if (c->nns < GDX_ARRAY_SIZE(c->ns))
		c->nns++;
	pthread_mutex_unlock(&c->lock);
	*bs = in.block_size;
	return 0;
}

static enum nh_mem mem_kind(const void *p)
{
	struct gdx_ptr_attrs a;

	if (gdx_device_of_ptr(p, &a) && a.kind == GDX_MEM_DEVICE)
		return NH_MEM_DEVICE;
	return NH_MEM_HOST;
}

/*
 * The largest command of io: over RDMA a bounced one is one piece of a ring
 * (rdma.c), at most its chunk.
 */
static uint32_t io_max_xfer(struct nh_ctrl *c, const struct gdx_nvmf_io *io, uint32_t max_xfer,
			    bool host_only)
{
	uint32_t bmax = __atomic_load_n(&c->rdma_bounce_max, __ATOMIC_RELAXED);

	if (bmax && bmax < max_xfer && !host_only && io->op <= GDX_NVMF_OP_WRITE && io->buf &&
	    mem_kind(io->buf) == NH_MEM_DEVICE)
		return bmax;
	return max_xfer;
}

static void finish_cb(struct group *g)
{
	gdx_nvmf_io_cb cb = g->cb;
	struct gdx_nvmf_io *io = g->io;
	void *arg = g->cb_arg;

	for (unsigned i = 0; i < g->nsubs; i++)
		free(g->subs[i].dsm);
	pthread_mutex_destroy(&g->m);
	free(g);	/* the commands live in the same allocation */
	cb(io, arg);
}

static void sub_done(struct nh_req *r)
{
	struct sub *s = GDX_CONTAINER_OF(r, struct sub, r);
	struct group *g = s->g;

	bool last, has_cb;

	pthread_mutex_lock(&g->m);
	if (r->result && !s->io->result) {
		s->io->result = r->result;
		s->io->nvme_status = r->status & 0x7ff;
	}
	last = !--g->pending;
	/* a waited-for group lives on the waiter's stack: once unlocked it may be gone */
	has_cb = g->cb != NULL;
	if (last && !has_cb)
		pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->m);
	if (last && has_cb)
		finish_cb(g);
}

/*
 * How many commands io needs; validates it.  max_xfer is read once per
 * submission (a reconnect may change it) so that build splits io the same way.
 */
static int count_cmds(struct nh_ctrl *c, struct gdx_nvmf_io *io, uint32_t max_xfer,
		      uint32_t *bs_out)
{
	uint32_t bs;
	uint64_t blocks, per;
	int rc;

	if (io->op > GDX_NVMF_OP_DEALLOCATE || !io->nsid || io->nsid == 0xffffffff)
		return -EINVAL;
	if (io->op == GDX_NVMF_OP_FLUSH)
		return 1;
	rc = block_size(c, io->nsid, &bs);
	if (rc)
		return rc;
	*bs_out = bs;
	if (!io->len || io->offset % bs || io->len % bs || io->offset + io->len < io->offset)
		return -EINVAL;
	if ((io->op == GDX_NVMF_OP_READ || io->op == GDX_NVMF_OP_WRITE) && !io->buf)
		return -EINVAL;
	blocks = io->len / bs;
	switch (io->op) {
	case GDX_NVMF_OP_READ:
	case GDX_NVMF_OP_WRITE:
		per = GDX_MIN((uint64_t)MAX_NLB, GDX_MAX(1u, max_xfer / bs));
		break;
	case GDX_NVMF_OP_WRITE_ZEROES:
		per = MAX_NLB;
		break;
	default:
		per = (uint64_t)UINT32_MAX * MAX_DSM_RANGES;
		break;
	}
	if ((blocks + per - 1) / per > (1u << 20))
		return -E2BIG;
	return (int)((blocks + per - 1) / per);
}

/* host_only: the caller knows every buffer is host memory (no pointer query). */
static int build(struct nh_ctrl *c, struct gdx_nvmf_io *io, uint32_t bs, uint32_t max_xfer,
		 struct sub *subs, unsigned n, struct group *g, bool host_only)
{
	static const uint8_t opc[] = { GDX_NVME_CMD_READ, GDX_NVME_CMD_WRITE, GDX_NVME_CMD_FLUSH,
				       GDX_NVME_CMD_WRITE_ZEROES, GDX_NVME_CMD_DSM };
	enum nh_mem mem = !io->buf ? NH_MEM_NONE : host_only ? NH_MEM_HOST : mem_kind(io->buf);
	uint64_t lba = bs ? io->offset / bs : 0, left = bs ? io->len / bs : 0;
	/*
	 * Over RDMA the NIC registers device memory, or (found at connect,
	 * rdma.c) it bounces through registered host memory
	 */
	bool bounce = mem == NH_MEM_DEVICE &&
		      (!c->p.rdma || __atomic_load_n(&c->rdma_nodirect, __ATOMIC_ACQUIRE));

	io->path = io->op > GDX_NVMF_OP_WRITE ? "none" : bounce ? "bounce" : "direct";
	if (bounce && io->op <= GDX_NVMF_OP_WRITE && c->p.require_direct) {
		if (c->p.rdma) {
			pthread_mutex_lock(&c->stage_lock);
			GDX_ERR(SUB, "the NIC cannot register device memory (%s): it would bounce "
				"through host memory over NVMe/RDMA (require_direct is set)",
				c->rdma_why);
			pthread_mutex_unlock(&c->stage_lock);
		} else {
			GDX_ERR(SUB, "device memory moves through the bounce ring on NVMe/TCP "
				"(require_direct is set)");
		}
		return GDX_ENOTDIRECT;
	}
	for (unsigned i = 0; i < n; i++) {
		struct sub *s = &subs[i];
		struct nh_req *r = &s->r;
		uint64_t nlb;

		nh_req_init(r, opc[io->op], io->nsid, false);
		r->timeout_ns = (uint64_t)c->p.io_timeout_ms * 1000000;
		r->done = sub_done;
		r->io = io;
		s->g = g;
		s->io = io;
		if (io->op == GDX_NVMF_OP_FLUSH)
			continue;
		if (io->op == GDX_NVMF_OP_DEALLOCATE) {
			unsigned nr = (unsigned)GDX_MIN((left + UINT32_MAX - 1) / UINT32_MAX,
							(uint64_t)MAX_DSM_RANGES);
			struct gdx_nvme_dsm_range *rg = calloc(nr, sizeof(*rg));

			if (!rg)
				return -ENOMEM;
			s->dsm = rg;
			for (unsigned k = 0; k < nr; k++) {
				uint32_t cnt = (uint32_t)GDX_MIN(left, (uint64_t)UINT32_MAX);

				rg[k].nlb = cnt;
				rg[k].slba = lba;
				lba += cnt;
				left -= cnt;
			}
			r->sqe.cdw10 = nr - 1;
			r->sqe.cdw11 = GDX_NVME_DSM_AD;
			r->buf = rg;
			r->len = nr * sizeof(*rg);
			r->mem = NH_MEM_HOST;
			r->write = 1;
			continue;
		}
		nlb = io->op == GDX_NVMF_OP_WRITE_ZEROES
			? GDX_MIN(left, (uint64_t)MAX_NLB)
			: GDX_MIN(left, GDX_MIN((uint64_t)MAX_NLB,
						GDX_MAX(1u, max_xfer / bs)));
		r->sqe.cdw10 = (uint32_t)lba;
		r->sqe.cdw11 = (uint32_t)(lba >> 32);
		r->sqe.cdw12 = (uint32_t)(nlb - 1);
		if (io->op != GDX_NVMF_OP_WRITE_ZEROES) {
			r->buf = (char *)io->buf + (lba * bs - io->offset);
			r->len = nlb * bs;
			r->mem = mem;
			r->write = io->op == GDX_NVMF_OP_WRITE;
		}
		lba += nlb;
		left -= nlb;
	}
	return 0;
}

static int submit(struct nh_ctrl *c, struct gdx_nvmf_io *ios, unsigned n, bool host_only)
{
	struct group g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
	struct sub *subs = NULL;
	unsigned total = 0, *counts;
	uint32_t *bss, *maxs, max_xfer;
	int rc = 0;

	if (!c || (!ios && n))
		return -EINVAL;
	max_xfer = __atomic_load_n(&c->max_xfer, __ATOMIC_RELAXED);
	counts = calloc(n ? n : 1, sizeof(*counts));
	bss = calloc(n ? n : 1, sizeof(*bss));
	maxs = calloc(n ? n : 1, sizeof(*maxs));
	if (!counts || !bss || !maxs) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < n; i++) {
		int k;

		ios[i].result = 0;
		ios[i].nvme_status = 0;
		ios[i].path = "none";
		maxs[i] = io_max_xfer(c, &ios[i], max_xfer, host_only);
		k = count_cmds(c, &ios[i], maxs[i], &bss[i]);
		if (k < 0) {
			ios[i].result = k;
			if (!rc)
				rc = k;
			continue;
		}
		counts[i] = (unsigned)k;
		total += (unsigned)k;
	}
	if (rc)
		goto out;
	subs = calloc(total ? total : 1, sizeof(*subs));
	if (!subs) {
		rc = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0, at = 0; i < n; at += counts[i], i++) {
		int b = build(c, &ios[i], bss[i], maxs[i], subs + at, counts[i], &g, host_only);

		if (b) {
			ios[i].result = b;
			rc = b;
		}
	}
	if (rc)
		goto out;
	g.pending = total;
	for (unsigned i = 0; i < total; i++)
		nh_ctrl_submit(c, &subs[i].r);
	pthread_mutex_lock(&g.m);
	while (g.pending)
		pthread_cond_wait(&g.cv, &g.m);
	pthread_mutex_unlock(&g.m);
	for (unsigned i = 0; i < n && !rc; i++)
		rc = ios[i].result;
out:
	if (subs)
		for (unsigned i = 0; i < total; i++)
			free(subs[i].dsm);
	free(subs);
	free(counts);
	free(bss);
	free(maxs);
	return rc;
}

int gdx_nvmf_submit(struct gdx_nvmf_ctrl *ctrl, struct gdx_nvmf_io *ios, unsigned n)
{
	return submit((struct nh_ctrl *)ctrl, ios, n, false);
}

int gdx_nvmf_submit_cb(struct gdx_nvmf_ctrl *ctrl, struct gdx_nvmf_io *io, gdx_nvmf_io_cb cb,
		       void *arg)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	struct group *g;
	uint32_t bs = 0, max_xfer;
	int n, rc;

	if (!c || !io || !cb)
		return -EINVAL;
	/* refused here rather than through cb: a cb that resubmits on failure would recurse */
	pthread_mutex_lock(&c->lock);
	rc = c->stopping || c->state == GDX_NVMF_FAILED ? GDX_EDISCONNECTED : 0;
	pthread_mutex_unlock(&c->lock);
	if (rc)
		return io->result = rc;
	io->result = 0;
	io->nvme_status = 0;
	io->path = "none";
	max_xfer = io_max_xfer(c, io, __atomic_load_n(&c->max_xfer, __ATOMIC_RELAXED), false);
	n = count_cmds(c, io, max_xfer, &bs);
	if (n < 0)
		return io->result = n;
	g = calloc(1, sizeof(*g) + (size_t)n * sizeof(struct sub));
	if (!g)
		return -ENOMEM;
	g->subs = (struct sub *)(g + 1);
	g->nsubs = (unsigned)n;
	g->cb = cb;
	g->cb_arg = arg;
	g->io = io;
	pthread_mutex_init(&g->m, NULL);
	rc = build(c, io, bs, max_xfer, g->subs, (unsigned)n, g, false);
	if (rc) {
		for (int i = 0; i < n; i++)
			free(g->subs[i].dsm);
		pthread_mutex_destroy(&g->m);
		free(g);
		return io->result = rc;
	}
	g->pending = (unsigned)n;
	for (int i = 0; i < n; i++)
		nh_ctrl_submit(c, &g->subs[i].r);
	return 0;
}

static int one(struct gdx_nvmf_ctrl *c, enum gdx_nvmf_op op, uint32_t nsid, void *buf,
	       uint64_t len, uint64_t offset)
{
	struct gdx_nvmf_io io = { .op = op, .nsid = nsid, .offset = offset, .len = len,
				  .buf = buf };

	return gdx_nvmf_submit(c, &io, 1);
}

int gdx_nvmf_read(struct gdx_nvmf_ctrl *c, uint32_t nsid, void *buf, uint64_t len,
		  uint64_t offset)
{
	return one(c, GDX_NVMF_OP_READ, nsid, buf, len, offset);
}

int gdx_nvmf_write(struct gdx_nvmf_ctrl *c, uint32_t nsid, const void *buf, uint64_t len,
		   uint64_t offset)
{
	return one(c, GDX_NVMF_OP_WRITE, nsid, (void *)(uintptr_t)buf, len, offset);
}

int gdx_nvmf_flush(struct gdx_nvmf_ctrl *c, uint32_t nsid)
{
	return one(c, GDX_NVMF_OP_FLUSH, nsid, NULL, 0, 0);
}

int gdx_nvmf_write_zeroes(struct gdx_nvmf_ctrl *c, uint32_t nsid, uint64_t offset, uint64_t len)
{
	return one(c, GDX_NVMF_OP_WRITE_ZEROES, nsid, NULL, len, offset);
}

int gdx_nvmf_deallocate(struct gdx_nvmf_ctrl *c, uint32_t nsid, uint64_t offset, uint64_t len)
{
	return one(c, GDX_NVMF_OP_DEALLOCATE, nsid, NULL, len, offset);
}

/* ---- stream-ordered ---------------------------------------------------------- */

/*
 * A host function on the caller's stream marks the point where the work
 * before it is done, and a worker then runs the I/O.  The work after it waits
 * on a gate: a word of pinned memory the worker stores once the I/O is done
 * (gdx_stream_wait_value32).  The host function itself never waits: CUDA
 * runs the host functions of all streams on one thread, and one that waited
 * for the worker would hold up every stream.  Nor does the worker touch
 * device memory: streams may share a hardware queue, so a copy on a stream
 * of the worker's could queue behind the very wait it should release.  A
 * device buffer therefore moves through pinned staging whose copies are
 * enqueued at submission on the caller's stream: before the host function
 * for a write, after the wait for a read.
 *
 * Gates come from a table per device the controller was used with; a word
 * only grows, so a gate can be handed out again as soon as it is stored.
 */
#define AGATES 256

struct astage {
	struct astage *next;	/* in the free list, or a read's chain in flight */
	struct agate_tab *tab;
	size_t cap;
	void *p;		/* pinned, of tab->dev */
};

struct agate_tab {
	struct agate_tab *next;
	struct gdx_device *dev;	/* a reference of ours */
	uint32_t *words;	/* pinned */
	struct astage *stages;	/* free staging, under c->alock */
	struct astage *retired;	/* copies may still be enqueued: freed at disconnect */
	struct nh_ctrl *c;
	unsigned nfree;
	unsigned free[AGATES];
};

struct async_job {
	struct nh_ctrl *c;
	struct gdx_nvmf_io *ios;
	struct gdx_nvmf_io *sh;	/* what the worker submits: staging for device buffers */
	struct astage **wst;	/* a write's staging, recycled by the worker */
	unsigned n;
	struct agate_tab *tab;
	unsigned gate;
	uint32_t value;
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool started;
	unsigned refs;		/* the host function's and the worker's */
};

static void job_put(struct async_job *j)
{
	bool last;

	pthread_mutex_lock(&j->m);
	last = !--j->refs;
	pthread_mutex_unlock(&j->m);
	if (last) {
		pthread_mutex_destroy(&j->m);
		pthread_cond_destroy(&j->cv);
		free(j->sh);
		free(j->wst);
		free(j);
	}
}

/* The caller's device's table, made on first use; c->alock held. */
static int agate_tab(struct nh_ctrl *c, struct gdx_device *dev, struct agate_tab **out)
{
	struct agate_tab *t;
	int rc;

	for (t = c->agates; t; t = t->next) {
		if (t->dev == dev) {
			*out = t;
			return 0;
		}
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	rc = gdx_pinned_alloc(dev, AGATES * sizeof(uint32_t), (void **)&t->words);
	if (rc) {
		free(t);
		return rc;
	}
	for (unsigned i = 0; i < AGATES; i++) {
		t->words[i] = 0;
		t->free[i] = AGATES - 1 - i;
	}
	t->nfree = AGATES;
	atomic_fetch_add(&dev->refs, 1);
	t->dev = dev;
	t->c = c;
	t->next = c->agates;
	c->agates = t;
	*out = t;
	return 0;
}

/* Takes a gate of dev's table; with all of them in flight, waits for one. */
static int agate_get(struct nh_ctrl *c, struct gdx_device *dev, struct async_job *j)
{
	struct agate_tab *t;
	int rc;

	pthread_mutex_lock(&c->alock);
	rc = agate_tab(c, dev, &t);
	while (!rc && !t->nfree)
		pthread_cond_wait(&c->acv, &c->alock);
	if (!rc) {
		j->tab = t;
		j->gate = t->free[--t->nfree];
		j->value = t->words[j->gate] + 1;
	}
	pthread_mutex_unlock(&c->alock);
	return rc;
}

/* Releases the stream waiting on j's gate, then hands the gate back. */
static void agate_open(struct async_job *j)
{
	struct nh_ctrl *c = j->c;

	__atomic_store_n(&j->tab->words[j->gate], j->value, __ATOMIC_RELEASE);
	pthread_mutex_lock(&c->alock);
	j->tab->free[j->tab->nfree++] = j->gate;
	pthread_cond_broadcast(&c->acv);
	pthread_mutex_unlock(&c->alock);
}

/* Smallest free stage of t holding n bytes, else a new one (caller's thread). */
static int astage_get(struct nh_ctrl *c, struct agate_tab *t, size_t n, struct astage **out)
{
	struct astage **pp, **best = NULL, *st;
	int rc;

	pthread_mutex_lock(&c->alock);
	for (pp = &t->stages; *pp; pp = &(*pp)->next)
		if ((*pp)->cap >= n && (!best || (*pp)->cap < (*best)->cap))
			best = pp;
	st = best ? *best : NULL;
	if (st)
		*best = st->next;
	pthread_mutex_unlock(&c->alock);
	if (!st) {
		st = calloc(1, sizeof(*st));
		if (!st)
			return -ENOMEM;
		st->tab = t;
		st->cap = (n + 65535) & ~(size_t)65535;
		rc = gdx_pinned_alloc(t->dev, st->cap, &st->p);
		if (rc) {
			free(st);
			return rc;
		}
	}
	st->next = NULL;
	*out = st;
	return 0;
}

/* Returns a chain of stages to their table: plain CPU work, fit for a host function. */
static void astage_put_chain(void *arg)
{
	struct astage *st = arg, *next;

	for (; st; st = next) {
		struct nh_ctrl *c = st->tab->c;

		next = st->next;
		pthread_mutex_lock(&c->alock);
		st->next = st->tab->stages;
		st->tab->stages = st;
		pthread_mutex_unlock(&c->alock);
	}
}

/* Stages a failed submission may have enqueued copies for: never reused. */
static void astage_retire(struct astage *st)
{
	struct nh_ctrl *c;

	if (!st)
		return;
	c = st->tab->c;
	pthread_mutex_lock(&c->alock);
	st->next = st->tab->retired;
	st->tab->retired = st;
	pthread_mutex_unlock(&c->alock);
}

static void start_fn(void *arg)
{
	struct async_job *j = arg;

	pthread_mutex_lock(&j->m);
	j->started = true;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->m);
	job_put(j);
}

static void *async_main(void *arg)
{
	struct async_job *j = arg;
	struct nh_ctrl *c = j->c;
	uint64_t calls0;
	bool go;

	pthread_mutex_lock(&j->m);
	for (;;) {
		pthread_mutex_lock(&c->alock);
		go = !c->astop;
		pthread_mutex_unlock(&c->alock);
		if (j->started || !go)
			break;
		/* re-check the stop flag now and then: the stream may never get here */
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&j->cv, &j->m, &ts);
	}
	pthread_mutex_unlock(&j->m);
	/*
	 * No device call from here until the gate is open: the stream waits on
	 * the gate, and a driver call can wait for that stream (CUDA loads a
	 * module at its first kernel launch with the context synchronised, under
	 * the lock every other call takes).  The buffers are all host memory —
	 * staging, or the caller's, found not to be device memory at submission —
	 * so none needs a pointer query.
	 */
	calls0 = gdx_device_calls();
	if (j->started) {
		submit(c, j->sh, j->n, true);
	} else {
		for (unsigned i = 0; i < j->n; i++)
			j->sh[i].result = -ECANCELED;
	}
	for (unsigned i = 0; i < j->n; i++) {
		j->ios[i].result = j->sh[i].result;
		j->ios[i].nvme_status = j->sh[i].nvme_status;
		j->ios[i].path = j->sh[i].buf == j->ios[i].buf ? j->sh[i].path :
				 j->ios[i].result ? "none" : "bounce";
		if (j->wst && j->wst[i])
			astage_put_chain(j->wst[i]);
	}
	atomic_fetch_add(&c->aworker_calls, gdx_device_calls() - calls0);
	agate_open(j);
	job_put(j);
	pthread_mutex_lock(&c->alock);
	if (!--c->async_live)
		pthread_cond_broadcast(&c->acv);
	pthread_mutex_unlock(&c->alock);
	return NULL;
}

static bool staged(const struct gdx_nvmf_io *io)
{
	return io->op <= GDX_NVMF_OP_WRITE && io->len && io->buf &&
	       mem_kind(io->buf) == NH_MEM_DEVICE;
}

static void job_free(struct async_job *j)
{
	pthread_mutex_destroy(&j->m);
	pthread_cond_destroy(&j->cv);
	free(j->sh);
	free(j->wst);
	free(j);
}

/*
 * Gives each device buffer of j a stage: a write's is filled on s now and
 * recycled by the worker, a read's joins *rchain, to be copied out on s
 * after the wait.
 */
static int stage_all(struct async_job *j, struct gdx_stream *s, struct astage **rchain)
{
	struct gdx_device *dev = j->tab->dev;
	struct astage *st;
	int rc;

	for (unsigned i = 0; i < j->n; i++) {
		if (!staged(&j->ios[i]))
			continue;
		rc = astage_get(j->c, j->tab, j->ios[i].len, &st);
		if (rc)
			return rc;
		j->sh[i].buf = st->p;
		if (j->ios[i].op == GDX_NVMF_OP_READ) {
			st->next = *rchain;
			*rchain = st;
			continue;
		}
		j->wst[i] = st;
		rc = gdx_memcpy_async(dev, st->p, j->ios[i].buf, j->ios[i].len, s);
		if (rc)
			return rc;
	}
	return 0;
}

int gdx_nvmf_submit_async(struct gdx_nvmf_ctrl *ctrl, struct gdx_nvmf_io *ios, unsigned n,
			  struct gdx_stream *s)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	struct astage *rchain = NULL;
	struct async_job *j;
	pthread_attr_t attr;
	pthread_t t;
	int rc, wrc;

	if (!c || !s || (!ios && n))
		return -EINVAL;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->c = c;
	j->ios = ios;
	j->n = n;
	j->refs = 2;
	pthread_mutex_init(&j->m, NULL);
	pthread_cond_init(&j->cv, NULL);
	j->sh = calloc(n ? n : 1, sizeof(*j->sh));
	j->wst = calloc(n ? n : 1, sizeof(*j->wst));
	if (!j->sh || !j->wst) {
		job_free(j);
		return -ENOMEM;
	}
	rc = agate_get(c, gdx_stream_device(s), j);
	if (rc) {
		job_free(j);
		return rc;
	}
	for (unsigned i = 0; i < n; i++) {
		ios[i].result = -EINPROGRESS;
		ios[i].path = "none";
		j->sh[i] = ios[i];
	}
	rc = stage_all(j, s, &rchain);
	if (!rc)
		rc = gdx_stream_launch_host_func(s, start_fn, j);
	if (rc) {
		agate_open(j);
		for (unsigned i = 0; i < n; i++)
			astage_retire(j->wst[i]);
		astage_put_chain(rchain);
		job_free(j);
		return rc;
	}
	/*
	 * The host function now holds a reference.  Should the wait fail to
	 * enqueue, the stream runs ahead of the I/O: report it, the caller must
	 * synchronize before reading the results; a read's stages are then left
	 * to the worker's writes, so they are not recycled.
	 */
	wrc = gdx_stream_wait_value32(s, &j->tab->words[j->gate], j->value);
	if (!wrc && rchain) {
		for (unsigned i = 0; i < n && !wrc; i++)
			if (staged(&ios[i]) && ios[i].op == GDX_NVMF_OP_READ)
				wrc = gdx_memcpy_async(j->tab->dev, ios[i].buf, j->sh[i].buf,
						       ios[i].len, s);
		if (!wrc)
			wrc = gdx_stream_launch_host_func(s, astage_put_chain, rchain);
	}
	pthread_mutex_lock(&c->alock);
	c->async_live++;
	pthread_mutex_unlock(&c->alock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, async_main, j);
	pthread_attr_destroy(&attr);
	if (rc) {
		/* the host function is already enqueued: it drops its own reference */
		for (unsigned i = 0; i < n; i++) {
			ios[i].result = -rc;
			astage_retire(j->wst[i]);
		}
		agate_open(j);
		job_put(j);
		pthread_mutex_lock(&c->alock);
		c->async_live--;
		pthread_mutex_unlock(&c->alock);
		return -rc;
	}
	return wrc;
}

static void astages_free(struct gdx_device *dev, struct astage *st)
{
	struct astage *next;

	for (; st; st = next) {
		next = st->next;
		gdx_pinned_free(dev, st->p);
		free(st);
	}
}

/*
 * Every worker has stored its gate by now; the caller has synchronized the
 * streams that waited on them (disconnecting with stream-ordered I/O still
 * enqueued is a use after free, as for any buffer the I/O names).
 */
void nh_async_stop(struct nh_ctrl *c)
{
	struct agate_tab *t;

	pthread_mutex_lock(&c->alock);
	c->astop = true;
	while (c->async_live)
		pthread_cond_wait(&c->acv, &c->alock);
	t = c->agates;
	c->agates = NULL;
	pthread_mutex_unlock(&c->alock);
	while (t) {
		struct agate_tab *next = t->next;

		gdx_pinned_free(t->dev, t->words);
		astages_free(t->dev, t->stages);
		astages_free(t->dev, t->retired);
		gdx_device_close(t->dev);
		free(t);
		t = next;
	}
}
