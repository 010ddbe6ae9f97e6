/* SPDX-License-Identifier: MIT */
/*
 * Shared receive queues: receives the application posts once for many
 * endpoints of one backend, taken by whichever member's receive thread a
 * message arrives on (gdx_xport_srq_take), or handed to the hardware through
 * an anchor endpoint (gdx_xport_srq_priv).  q->lock guards the queue,
 * q->eps_lock the members, the anchor and the devices set up.
 */
#include <errno.h>
#include <stdlib.h>

#include "common/log.h"
#include "gpu/device.h"
#include "xport/xport.h"

#define SUBSYS "xport"

/* ---- shared receive queues ------------------------------------------------------ */

struct srq_ent {
	void *buf;
	size_t len;
	uint64_t wr_id;
	struct gdx_device *dev;		/* memory of a device, not host memory: else NULL */
	struct srq_ent *next;
};

struct srq_dev {
	struct gdx_device *dev;
	struct srq_dev *next;
};

struct gdx_xport_srq {
	pthread_mutex_t lock;		/* the queue */
	struct srq_ent *head, *tail;
	unsigned depth, count;		/* count: waiting here, not yet taken */
	unsigned outstanding;		/* posted and not completed: against depth */
	pthread_mutex_t eps_lock;	/* eps, anchor, devs; held while kicking them */
	struct gdx_xport_ep *eps;
	/*
	 * Devices whose memory was posted: every member has been set up for each
	 * (ops->srq_device), on the poster's or the joiner's thread.
	 */
	struct srq_dev *devs;
	const struct gdx_xport_ops *ops;
	int neps;
	/*
	 * Backends whose queue is in the hardware (ops->srq_open): an endpoint of
	 * the queue's own, never connected, that owns the receives handed to the
	 * hardware and their registrations, so they outlive any member.
	 */
	struct gdx_xport_ep *anchor;
};

GDX_API int gdx_xport_srq_create(unsigned depth, struct gdx_xport_srq **out)
{
	struct gdx_xport_srq *q;

	if (!depth || !out)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->depth = depth;
	pthread_mutex_init(&q->lock, NULL);
	pthread_mutex_init(&q->eps_lock, NULL);
	*out = q;
	return 0;
}

GDX_API int gdx_xport_srq_destroy(struct gdx_xport_srq *q)
{
	struct srq_ent *e;

	if (!q)
		return 0;
	pthread_mutex_lock(&q->eps_lock);
	if (q->neps) {
		pthread_mutex_unlock(&q->eps_lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&q->eps_lock);
	if (q->anchor) {
		struct gdx_xport_ep *a = q->anchor;

		/* The hardware queue goes first, then the registrations, then the domain. */
		a->ops->srq_close(a->priv);
		gdx_regcache_destroy(a->rc);
		a->rc = NULL;
		a->ops->srq_free(a->priv);
		gdx_xport_ep_free(a);
	}
	while ((e = q->head)) {
		q->head = e->next;
		free(e);
	}
	while (q->devs) {
		struct srq_dev *d = q->devs;

		q->devs = d->next;
		free(d);
	}
	pthread_mutex_destroy(&q->lock);
	pthread_mutex_destroy(&q->eps_lock);
	free(q);
	return 0;
}

/*
 * Device memory of dev is posted: each member is set up for it now, on this
 * thread, and each endpoint that joins later when it joins (srq_join), never
 * by the thread that takes the receive (tcp's receive thread must not load
 * the copy agent's module: on CUDA that may synchronise the context while a
 * stream waits for a completion only that thread delivers).  Before the entry
 * is queued, so no member can take it unprepared.
 */
static int srq_device(struct gdx_xport_srq *q, struct gdx_device *dev)
{
	struct srq_dev *d;
	int ret = 0;

	pthread_mutex_lock(&q->eps_lock);
	for (d = q->devs; d && d->dev != dev; d = d->next)
		;
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (d) {
			d->dev = dev;
			d->next = q->devs;
			q->devs = d;
			for (struct gdx_xport_ep *ep = q->eps; ep; ep = ep->srq_next)
				if (ep->ops->srq_device)
					ep->ops->srq_device(ep->priv, dev);
		} else {
			ret = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&q->eps_lock);
	return ret;
}

GDX_API int gdx_xport_srq_post_recv(struct gdx_xport_srq *q, void *buf, size_t len,
				    uint64_t wr_id)
{
	struct gdx_ptr_attrs a;
	struct gdx_device *dev;
	struct srq_ent *e;
	int ret;

	if (!q || (!buf && len))
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	*e = (struct srq_ent){ .buf = buf, .len = len, .wr_id = wr_id };
	dev = len ? gdx_device_of_ptr(buf, &a) : NULL;
	if (dev && a.kind != GDX_MEM_PINNED) {
		ret = srq_device(q, dev);
		if (ret) {
			free(e);
			return ret;
		}
		e->dev = dev;
	}
	pthread_mutex_lock(&q->lock);
	if (q->outstanding >= q->depth) {
		pthread_mutex_unlock(&q->lock);
		free(e);
		return -EAGAIN;
	}
	if (q->tail)
		q->tail->next = e;
	else
		q->head = e;
	q->tail = e;
	q->count++;
	q->outstanding++;
	pthread_mutex_unlock(&q->lock);
	/* Messages may be waiting on some endpoint for exactly this. */
	pthread_mutex_lock(&q->eps_lock);
	for (struct gdx_xport_ep *ep = q->eps; ep; ep = ep->srq_next)
		ep->ops->srq_kick(ep->priv);
	pthread_mutex_unlock(&q->eps_lock);
	return 0;
}

/*
 * A message may arrive before its endpoint has joined (opts.srq is set from
 * the start): device memory at the head waits until it has, and has been set
 * up for it (srq_join); until then the message waits as one no receive took.
 */
static int srq_withheld(const struct gdx_xport_ep *ep, const struct srq_ent *e)
{
	return e && e->dev && ep->ops->srq_device && !atomic_load(&ep->srq_ready);
}

unsigned gdx_xport_srq_waiting(const struct gdx_xport_ep *ep)
{
	struct gdx_xport_srq *q = ep->opts.srq;
	unsigned n;

	pthread_mutex_lock(&q->lock);
	n = srq_withheld(ep, q->head) ? 0 : q->count;
	pthread_mutex_unlock(&q->lock);
	return n;
}

void gdx_xport_srq_done(struct gdx_xport_srq *q)
{
	pthread_mutex_lock(&q->lock);
	q->outstanding--;
	pthread_mutex_unlock(&q->lock);
}

int gdx_xport_srq_take(struct gdx_xport_ep *ep, struct gdx_xport_req **out)
{
	struct gdx_xport_srq *q = ep->opts.srq;
	/* A hardware queue's receives belong to its anchor; errors show on ep. */
	struct gdx_xport_ep *own = q->anchor ? q->anchor : ep;

	for (;;) {
		struct gdx_xport_req *req;
		struct srq_ent *e;
		int ret;

		pthread_mutex_lock(&q->lock);
		e = srq_withheld(ep, q->head) ? NULL : q->head;
		if (e) {
			q->head = e->next;
			if (!q->head)
				q->tail = NULL;
			q->count--;
		}
		pthread_mutex_unlock(&q->lock);
		if (!e)
			return -EAGAIN;
		req = calloc(1, sizeof(*req));
		if (!req) {
			GDX_ERR(SUBSYS, "out of memory: shared receive %llu dropped",
				(unsigned long long)e->wr_id);
			free(e);
			gdx_xport_srq_done(q);
			continue;
		}
		*req = (struct gdx_xport_req){ .wr_id = e->wr_id, .op = GDX_XPORT_OP_RECV,
					       .flags = F_SRQ, .ep = own,
					       .owner = q->anchor };
		atomic_fetch_add(&own->inflight, 1);
		ret = gdx_xport_req_resolve(req, e->buf, e->len);
		req->ep = ep;
		free(e);
		if (!ret) {
			*out = req;
			return 0;
		}
		req->buf.len = 0;
		gdx_xport_complete(req, ret, 0);
	}
}

int gdx_xport_srq_priv(struct gdx_xport_ep *ep, void *arg, void **out)
{
	struct gdx_xport_srq *q = ep->opts.srq;
	struct gdx_xport_ep *a;
	int ret = 0;

	pthread_mutex_lock(&q->eps_lock);
	if (q->ops && q->ops != ep->ops) {
		GDX_ERR(SUBSYS, "a shared receive queue serves one backend (%s), not %s",
			q->ops->scheme, ep->ops->scheme);
		ret = -EINVAL;
	} else if (!q->anchor) {
		ret = gdx_xport_ep_alloc(ep->ops, &ep->opts, NULL, &a);
		if (!ret) {
			ret = ep->ops->srq_open(a, arg, q->depth, &a->priv);
			if (ret)
				gdx_xport_ep_free(a);
		}
		if (!ret) {
			q->ops = ep->ops;
			q->anchor = a;
		}
	}
	if (!ret)
		*out = q->anchor->priv;
	pthread_mutex_unlock(&q->eps_lock);
	return ret;
}

int gdx_xport_srq_join(struct gdx_xport_ep *ep)
{
	struct gdx_xport_srq *q = ep->opts.srq;

	pthread_mutex_lock(&q->eps_lock);
	if (q->ops && q->ops != ep->ops) {
		pthread_mutex_unlock(&q->eps_lock);
		GDX_ERR(SUBSYS, "a shared receive queue serves one backend (%s), not %s",
			q->ops->scheme, ep->ops->scheme);
		return -EINVAL;
	}
	q->ops = ep->ops;
	ep->srq = q;
	ep->srq_next = q->eps;
	q->eps = ep;
	q->neps++;
	if (ep->ops->srq_device) {
		for (struct srq_dev *d = q->devs; d; d = d->next)
			ep->ops->srq_device(ep->priv, d->dev);
		atomic_store(&ep->srq_ready, 1);
	}
	/* Receives posted while no member could take them. */
	ep->ops->srq_kick(ep->priv);
	pthread_mutex_unlock(&q->eps_lock);
	return 0;
}

void gdx_xport_srq_leave(struct gdx_xport_ep *ep)
{
	struct gdx_xport_srq *q = ep->srq;

	if (!q)
		return;
	pthread_mutex_lock(&q->eps_lock);
	for (struct gdx_xport_ep **pp = &q->eps; *pp; pp = &(*pp)->srq_next) {
		if (*pp == ep) {
			*pp = ep->srq_next;
			q->neps--;
			break;
		}
	}
	pthread_mutex_unlock(&q->eps_lock);
}
