/* SPDX-License-Identifier: MIT */
/*
 * Requests on their way in and out of the controller, on the callers'
 * threads and in receivers' completion callbacks, under c->lock: a request
 * goes to an I/O queue (pick_queue) or the admin queue, waits in the pending
 * list while the association is down, goes back there when its queue is torn
 * down with it in a slot, and is cancelled from there or by an Abort.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "common/util.h"
#include "nvmf/host/host.h"
#include "nvmf/proto/nvme.h"

/* ---- requests ------------------------------------------------------------- */

void nh_req_init(struct nh_req *r, uint8_t opc, uint32_t nsid, bool admin)
{
	memset(r, 0, sizeof(*r));
	r->sqe.opc = opc;
	r->sqe.nsid = nsid;
	r->admin = admin;
}

int nh_status_to_err(uint16_t status)
{
	if (!(status & 0x7ff))
		return 0;
	if ((status & 0x7ff) == GDX_NVME_SC_ABORT_REQ)
		return -ECANCELED;
	return GDX_E_NVME(status);
}

void nh_req_complete(struct nh_req *r, int result)
{
	if (result == -ECANCELED || (result && r->cancelled))
		result = -ECANCELED;
	if (r->timed_out)
		result = -ETIMEDOUT;
	r->result = result;
	r->done(r);
}

void nh_wait_done(struct nh_req *r)
{
	struct nh_wait *w = r->arg;

	pthread_mutex_lock(&w->m);
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->m);
}

int nh_wait_req(struct nh_req *r, struct nh_wait *w)
{
	pthread_mutex_lock(&w->m);
	while (!w->done)
		pthread_cond_wait(&w->cv, &w->m);
	pthread_mutex_unlock(&w->m);
	pthread_mutex_destroy(&w->m);
	pthread_cond_destroy(&w->cv);
	return r->result;
}

int nh_ctrl_exec(struct nh_ctrl *c, struct nh_req *r)
{
	struct nh_wait w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };

	r->done = nh_wait_done;
	r->arg = &w;
	nh_ctrl_submit(c, r);
	return nh_wait_req(r, &w);
}

/* ---- parking and resubmission ------------------------------------------- */

/* Caller holds c->lock. */
static void park(struct nh_ctrl *c, struct nh_req *r)
{
	r->next = NULL;
	*c->pending_tail = r;
	c->pending_tail = &r->next;
}

/*
 * The I/O queue with the fewest commands in flight, starting from the one this
 * thread used last: a thread at depth 1 stays on one queue (one receiver to
 * wake), deeper submissions spread over all of them.  A receiver submitting
 * from a completion callback keeps to its own live queue while that has a free
 * slot: device reads complete after their slots were freed (held until their
 * copies land), so by then another queue looked emptier and half their
 * resubmissions went there, each taking that queue's locks and socket from
 * its own receiver (0.4-0.5 per read with 4 queues; host reads, resubmitted
 * the moment their slot frees, stay home anyway).  Not a dead one: only this
 * receiver, now inside the callback, would notice it and ask for recovery.
 *
 * With the receivers pinned (nvmf.host.cpus; over RDMA by default) another
 * thread first gets the least loaded queue whose receiver runs on its CPU, as
 * the Linux host maps each CPU to its queue, while that has a free slot.  The
 * CPU a command is posted from is where a software RDMA device does its work:
 * rxe sends it in the poster's system call, nvmet-rdma queues its completion
 * work on that CPU, and that work stays there while its CQ is busy.  Commands
 * posted to a queue from another CPU took the target's work for that queue
 * along for the whole run: both queues' work on one vCPU, the other idle, 0.5-
 * 0.6x the kernel host's 128 KiB reads in the guest (docs/measurements/
 * nvmf-host.md).  So one thread submitting from one CPU fills that CPU's queue
 * first, as with the Linux host; threads on several CPUs, or callbacks, spread.
 * Caller holds c->lock; the inflight counts are read racily, which only makes
 * the choice less exact.
 */
static struct nh_queue *pick_queue(struct nh_ctrl *c)
{
	static __thread unsigned last;
	unsigned best = last % c->nioq, best_n = UINT32_MAX;
	struct nh_queue *self = nh_queue_rx_self();

	if (self && self->qid && self->qid <= c->nioq && c->ioq[self->qid - 1] == self &&
	    __atomic_load_n(&self->state, __ATOMIC_RELAXED) == NH_Q_LIVE &&
	    __atomic_load_n(&self->inflight, __ATOMIC_RELAXED) < self->depth)
		return self;

	if (c->p.pin) {
		int cpu = sched_getcpu();

		for (unsigned i = 0; i < c->nioq; i++) {
			unsigned n = __atomic_load_n(&c->ioq[i]->inflight, __ATOMIC_RELAXED);

			if (c->ioq[i]->rx_cpu == cpu && n < c->ioq[i]->depth && n < best_n) {
				best = i;
				best_n = n;
			}
		}
		if (best_n != UINT32_MAX)
			return c->ioq[best];
	}
	for (unsigned k = 0; k < c->nioq && best_n; k++) {
		unsigned i = (last + k) % c->nioq;
		unsigned n = __atomic_load_n(&c->ioq[i]->inflight, __ATOMIC_RELAXED);

		if (n < best_n) {
			best = i;
			best_n = n;
		}
	}
	last = best;
	return c->ioq[best];
}

/*
 * A submitter whose queue died under it: the association is broken, so the
 * request waits in the pending list for the reconnect, which resubmits it
 * (or fails it once the controller is given up), and the control thread is
 * told to recover, in case the queue's receiver has not yet asked.  Never a
 * retry on the same association: it would find the same dead queue, and a
 * thread looping on it spins until the control thread tears it down, which
 * it does only when asked.  Caller holds c->lock and is still counted in
 * c->users, so the association is the one whose queue died.
 */
static void park_dead(struct nh_ctrl *c, struct nh_req *r)
{
	park(c, r);
	nh_ctrl_ask_recovery(c);
}

/*
 * A submitter leaves its queue (caller holds c->lock).  The last one out
 * wakes a teardown waiting for none, and only then: the control thread sleeps
 * on the same condition, and waking it as each command left cost a context
 * switch and a turn at c->lock per I/O.  A teardown sets recovering or
 * stopping under c->lock before it waits, so it cannot be missed.
 */
static void users_leave(struct nh_ctrl *c)
{
	if (!--c->users && (c->recovering || c->stopping))
		pthread_cond_broadcast(&c->cv);
}

void nh_ctrl_submit(struct nh_ctrl *c, struct nh_req *r)
{
	struct nh_queue *q;
	int rc;

	r->t_sub = c->p.lat_stats ? gdx_now_ns() : 0;
	pthread_mutex_lock(&c->lock);
	if (c->state == GDX_NVMF_FAILED || c->stopping) {
		int err = c->fail_err;

		pthread_mutex_unlock(&c->lock);
		nh_req_complete(r, err);
		return;
	}
	if (c->state != GDX_NVMF_LIVE || c->recovering || (!r->admin && !c->nioq)) {
		if (!r->admin && !c->nioq && c->state == GDX_NVMF_LIVE && !c->recovering) {
			pthread_mutex_unlock(&c->lock);
			nh_req_complete(r, -EOPNOTSUPP);
			return;
		}
		if (r->no_retry) {
			pthread_mutex_unlock(&c->lock);
			nh_req_complete(r, GDX_EDISCONNECTED);
			return;
		}
		park(c, r);
		pthread_mutex_unlock(&c->lock);
		return;
	}
	q = r->admin ? c->admin : pick_queue(c);
	/* the queue stays allocated until recovery holds c->lock with no submitter inside */
	c->users++;
	pthread_mutex_unlock(&c->lock);
	rc = nh_queue_submit(q, r, true);
	pthread_mutex_lock(&c->lock);
	/*
	 * A receiver's device read for a queue whose device side is not set up
	 * (NH_SUBMIT_DEFER) is parked for the control thread, which sets the
	 * queue up and submits it; parked while still counted as a user, so
	 * that a disconnect, which waits for the users, then fails it with the
	 * rest.
	 */
	if (rc == NH_SUBMIT_DEFER) {
		park(c, r);
		c->resubmit = true;
		pthread_cond_broadcast(&c->cv);
	} else if (rc == -EPIPE && !r->no_retry) {
		park_dead(c, r);
	} else if (rc == -EPIPE) {
		nh_ctrl_ask_recovery(c);
	}
	users_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (rc && rc != NH_SUBMIT_DEFER && (rc != -EPIPE || r->no_retry))
		nh_req_complete(r, rc == -EPIPE ? GDX_EDISCONNECTED : rc);
}

/* What happens to a request its queue still held when the queue was torn down. */
void nh_ctrl_requeue_or_fail(struct nh_ctrl *c, struct nh_req *r, int err)
{
	pthread_mutex_lock(&c->lock);
	if (r->timed_out || r->cancelled || r->no_retry || err == GDX_EPROTO ||
	    r->retries >= c->p.max_retries || c->stopping) {
		pthread_mutex_unlock(&c->lock);
		nh_req_complete(r, err == GDX_EPROTO ? err : GDX_EDISCONNECTED);
		return;
	}
	r->retries++;
	park(c, r);
	pthread_mutex_unlock(&c->lock);
}

int gdx_nvmf_abort(struct gdx_nvmf_ctrl *ctrl, struct gdx_nvmf_io *io)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	struct nh_req **pp, *r, *found = NULL;
	struct nh_req a;
	uint16_t cid = 0, sqid = 0;
	int rc = -ENOENT;

	if (!c || !io)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	for (pp = &c->pending; (r = *pp);) {
		if (r->io == io) {
			*pp = r->next;
			if (c->pending_tail == &r->next)
				c->pending_tail = pp;
			r->next = found;
			found = r;
			continue;
		}
		pp = &r->next;
	}
	if (c->state == GDX_NVMF_LIVE && !c->recovering) {
		c->users++;
		pthread_mutex_unlock(&c->lock);
		for (unsigned i = 0; i < c->nioq && rc; i++) {
			rc = nh_queue_abort_lookup(c->ioq[i], io, &cid);
			sqid = (uint16_t)(i + 1);
			if (rc == -EINPROGRESS) {
				/* only queued, never sent: cancelled without an Abort */
				sqid = 0;
				rc = 0;
			}
		}
		pthread_mutex_lock(&c->lock);
		users_leave(c);
	}
	pthread_mutex_unlock(&c->lock);
	while (found) {
		r = found->next;
		found->cancelled = true;
		nh_req_complete(found, -ECANCELED);
		found = r;
		rc = 0;
	}
	if (!sqid || !cid)
		return rc;
	nh_req_init(&a, GDX_NVME_ADM_ABORT, 0, true);
	a.sqe.cdw10 = (uint32_t)sqid | (uint32_t)cid << 16;
	a.no_retry = true;
	a.timeout_ns = (uint64_t)c->p.io_timeout_ms * 1000000;
	rc = nh_ctrl_exec(c, &a);
	if (rc)
		return rc;
	/* DW0 bit 0 set: the controller did not abort it; it completes on its own */
	return (a.dw01 & 1) ? -EALREADY : 0;
}
