/* SPDX-License-Identifier: MIT */
/*
 * The host controller: connects the admin queue and the I/O queues, enables
 * the controller, keeps it alive, and owns every request that is not in a
 * queue slot.  A control thread sends Keep Alive, expires commands, and when a
 * queue dies tears the whole association down (as the Linux host does: a new
 * admin Connect gets a fresh controller) and reconnects with backoff,
 * resubmitting what was in flight.
 */
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "nvmf/host/host.h"
#include "nvmf/proto/nvme.h"

#define SUB "nvmf-host"
#define ADMIN_DEPTH 32
#define TICK_MS 50

/* One tick from now, as the CLOCK_REALTIME deadline pthread_cond_timedwait wants. */
static void tick_deadline(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_nsec += TICK_MS * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

/* ---- requests ------------------------------------------------------------- */

struct nh_wait {
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool done;
};

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

static void wait_done(struct nh_req *r)
{
	struct nh_wait *w = r->arg;

	pthread_mutex_lock(&w->m);
	w->done = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->m);
}

static int wait_req(struct nh_req *r, struct nh_wait *w)
{
	pthread_mutex_lock(&w->m);
	while (!w->done)
		pthread_cond_wait(&w->cv, &w->m);
	pthread_mutex_unlock(&w->m);
	pthread_mutex_destroy(&w->m);
	pthread_cond_destroy(&w->cv);
	return r->result;
}

static void fail_setup_req(struct nh_ctrl *c, struct nh_req *r, int err)
{
	(void)c;
	nh_req_complete(r, err);
}

/*
 * Submits on one queue and waits, enforcing the timeout itself: this runs
 * during setup and shutdown, when the control thread is busy or gone.  On
 * expiry the queue is reaped, which hands the request back exactly once.
 */
static int queue_exec(struct nh_queue *q, struct nh_req *r)
{
	struct nh_wait w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };
	struct timespec ts;
	uint64_t deadline;
	int rc;

	r->done = wait_done;
	r->arg = &w;
	if (!r->timeout_ns)
		r->timeout_ns = (uint64_t)q->ctrl->p.connect_timeout_ms * 1000000;
	rc = nh_queue_submit(q, r, true);
	if (rc)
		return rc == -EPIPE ? (q->err ? q->err : GDX_EDISCONNECTED) : rc;
	deadline = gdx_now_ns() + r->timeout_ns;
	pthread_mutex_lock(&w.m);
	while (!w.done) {
		bool dead;

		tick_deadline(&ts);
		if (!pthread_cond_timedwait(&w.cv, &w.m, &ts) || w.done)
			continue;
		pthread_mutex_lock(&q->lock);
		dead = q->state != NH_Q_LIVE;
		pthread_mutex_unlock(&q->lock);
		if (!dead && gdx_now_ns() < deadline)
			continue;
		pthread_mutex_unlock(&w.m);
		if (!dead) {
			GDX_ERR(SUB, "queue %u: command %#x timed out during setup", q->qid,
				r->sqe.opc);
			r->timed_out = true;
		}
		nh_queue_reap(q, fail_setup_req);
		pthread_mutex_lock(&w.m);
	}
	pthread_mutex_unlock(&w.m);
	return wait_req(r, &w);
}

int nh_ctrl_exec(struct nh_ctrl *c, struct nh_req *r)
{
	struct nh_wait w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };

	r->done = wait_done;
	r->arg = &w;
	nh_ctrl_submit(c, r);
	return wait_req(r, &w);
}

/* ---- parking and resubmission ------------------------------------------- */

/*
 * The live association is broken: the control thread is to tear it down and
 * build a new one.  Only while it is live: a request during a recovery, or
 * from a queue that was never published or already torn down, is about an
 * association that is going or gone, and would tear down the next one.
 * Caller holds c->lock.
 */
static void ask_recovery(struct nh_ctrl *c)
{
	if (c->state != GDX_NVMF_LIVE || c->recovering)
		return;
	c->need_recovery = true;
	pthread_cond_broadcast(&c->cv);
}

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
	ask_recovery(c);
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
		ask_recovery(c);
	}
	users_leave(c);
	pthread_mutex_unlock(&c->lock);
	if (rc && rc != NH_SUBMIT_DEFER && (rc != -EPIPE || r->no_retry))
		nh_req_complete(r, rc == -EPIPE ? GDX_EDISCONNECTED : rc);
}

/* What happens to a request its queue still held when the queue was torn down. */
static void requeue_or_fail(struct nh_ctrl *c, struct nh_req *r, int err)
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

void nh_ctrl_queue_died(struct nh_ctrl *c, struct nh_queue *q)
{
	pthread_mutex_lock(&c->lock);
	if (c->admin == q || (q->qid && q->qid <= c->nioq && c->ioq[q->qid - 1] == q))
		ask_recovery(c);
	pthread_mutex_unlock(&c->lock);
}

/* ---- admin commands --------------------------------------------------------- */

static void fabrics_sqe(struct nh_req *r, uint8_t fctype)
{
	nh_req_init(r, GDX_NVME_OPC_FABRICS, 0, true);
	r->sqe.fctype = fctype;
	r->no_retry = true;
}

static int prop_get(struct nh_queue *q, uint32_t ofst, bool eight, uint64_t *val)
{
	struct nh_req r;
	int rc;

	fabrics_sqe(&r, GDX_NVMF_FCTYPE_PROP_GET);
	r.sqe.prop.attrib = eight ? 1 : 0;
	r.sqe.prop.ofst = ofst;
	rc = queue_exec(q, &r);
	if (!rc)
		*val = eight ? r.dw01 : (uint32_t)r.dw01;
	return rc;
}

static int prop_set(struct nh_queue *q, uint32_t ofst, uint32_t val)
{
	struct nh_req r;

	fabrics_sqe(&r, GDX_NVMF_FCTYPE_PROP_SET);
	r.sqe.prop.ofst = ofst;
	r.sqe.prop.value = val;
	return queue_exec(q, &r);
}

static int fabrics_connect(struct nh_ctrl *c, struct nh_queue *q, unsigned sqsize,
			   uint16_t *cntlid)
{
	struct gdx_nvmf_connect_data data;
	struct nh_req r;
	int rc;

	fabrics_sqe(&r, GDX_NVMF_FCTYPE_CONNECT);
	r.sqe.connect.qid = q->qid;
	r.sqe.connect.sqsize = (uint16_t)sqsize;
	r.sqe.connect.kato = q->qid || c->p.discovery ? 0 : c->p.kato_ms;
	/* without SQ flow control a controller may end a read with C2HData SUCCESS */
	if (q->qid && c->sqflow_off)
		r.sqe.connect.cattr = GDX_NVMF_CATTR_DISABLE_SQFLOW;
	memset(&data, 0, sizeof(data));
	memcpy(data.hostid, c->p.hostid, sizeof(data.hostid));
	data.cntlid = q->qid ? c->cntlid : GDX_NVME_CNTLID_DYNAMIC;
	snprintf(data.subnqn, sizeof(data.subnqn), "%s", c->p.subnqn);
	snprintf(data.hostnqn, sizeof(data.hostnqn), "%s", c->p.hostnqn);
	r.buf = &data;
	r.len = sizeof(data);
	r.mem = NH_MEM_HOST;
	r.write = 1;
	rc = queue_exec(q, &r);
	if (rc) {
		GDX_ERR(SUB, "Connect queue %u to %s (%s:%s) refused: %s%s (dw0 %#x)", q->qid,
			c->p.subnqn, c->p.addr, c->p.svc, gdx_strerror(rc),
			r.status & GDX_NVME_ST_DNR ? " DNR" : "", (unsigned)r.dw01);
		/* a permanent refusal: reconnecting would only repeat it */
		if (gdx_nvme_status(rc) && (r.status & GDX_NVME_ST_DNR))
			c->connect_dnr = true;
		return rc;
	}
	if (cntlid)
		*cntlid = (uint16_t)r.dw01;
	if (r.dw01 & NVMF_AUTHREQ_ASCR) {
		GDX_ERR(SUB, "%s requires a secure channel (TLS after authentication), which gdx "
			"does not offer", c->p.subnqn);
		return -EACCES;
	}
	if (r.dw01 & NVMF_AUTHREQ_ATR)
		return nh_auth_queue(c, q, queue_exec);
	/* a controller we hold a secret of must prove itself: one that asks nothing cannot */
	if (c->p.has_ctrl_key && !c->p.discovery) {
		GDX_ERR(SUB, "%s did not ask for authentication, so it cannot prove it holds the "
			"controller secret", c->p.subnqn);
		return -EACCES;
	}
	return 0;
}

static void fill_info(struct nh_ctrl *c, struct gdx_nvmf_ctrl_info *in)
{
	const struct gdx_nvme_id_ctrl *id = &c->idctrl;
	uint32_t mdts_bytes = 0;

	in->vid = id->vid;
	in->cntlid = id->cntlid;
	gdx_nvme_field_str(in->sn, sizeof(in->sn), id->sn, sizeof(id->sn));
	gdx_nvme_field_str(in->mn, sizeof(in->mn), id->mn, sizeof(id->mn));
	gdx_nvme_field_str(in->fr, sizeof(in->fr), id->fr, sizeof(id->fr));
	gdx_nvme_field_str(in->subnqn, sizeof(in->subnqn), id->subnqn, sizeof(id->subnqn));
	in->nn = id->nn;
	in->oncs = id->oncs;
	in->vwc = id->vwc;
	in->kas = id->kas;
	in->maxcmd = id->maxcmd;
	in->ioccsz = id->ioccsz;
	in->sgls = id->sgls;
	if (id->mdts && id->mdts < 20)
		mdts_bytes = 4096u << id->mdts;	/* CAP.MPSMIN is 0 (4 KiB) on fabrics targets */
	in->max_xfer = (uint32_t)c->p.max_io;
	if (mdts_bytes && mdts_bytes < in->max_xfer)
		in->max_xfer = mdts_bytes;
	in->kato_ms = c->p.discovery ? 0 : c->p.kato_ms;
	in->hdr_digest = c->p.hdgst;
	in->data_digest = c->p.ddgst;
}

static int enable_ctrl(struct nh_queue *q, struct gdx_nvmf_ctrl_info *in)
{
	uint64_t cap, csts = 0, vs;
	uint64_t deadline;
	int rc;

	rc = prop_get(q, GDX_NVME_REG_CAP, true, &cap);
	if (rc)
		return rc;
	in->cap = cap;
	rc = prop_set(q, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | GDX_NVME_CC_EN);
	if (rc)
		return rc;
	deadline = gdx_now_ns() + GDX_MAX(1u, GDX_NVME_CAP_TO(cap)) * 500000000ull;
	for (;;) {
		rc = prop_get(q, GDX_NVME_REG_CSTS, false, &csts);
		if (rc)
			return rc;
		if (csts & GDX_NVME_CSTS_CFS) {
			GDX_ERR(SUB, "controller fatal status after enable (CSTS %#llx)",
				(unsigned long long)csts);
			return GDX_ENVME;
		}
		if (csts & GDX_NVME_CSTS_RDY)
			break;
		if (gdx_now_ns() > deadline)
			return -ETIMEDOUT;
		usleep(1000);
	}
	rc = prop_get(q, GDX_NVME_REG_VS, false, &vs);
	if (!rc)
		in->ver = (uint32_t)vs;
	return rc;
}

static int identify_on(struct nh_queue *q, uint8_t cns, uint32_t nsid, void *buf)
{
	struct nh_req r;

	nh_req_init(&r, GDX_NVME_ADM_IDENTIFY, nsid, true);
	r.sqe.cdw10 = cns;
	r.buf = buf;
	r.len = 4096;
	r.mem = NH_MEM_HOST;
	r.no_retry = true;
	return queue_exec(q, &r);
}

static int set_num_queues(struct nh_queue *q, unsigned want, unsigned *got)
{
	struct nh_req r;
	int rc;

	nh_req_init(&r, GDX_NVME_ADM_SET_FEATURES, 0, true);
	r.sqe.cdw10 = GDX_NVME_FEAT_NUM_QUEUES;
	r.sqe.cdw11 = (want - 1) | (want - 1) << 16;
	r.no_retry = true;
	rc = queue_exec(q, &r);
	if (rc)
		return rc;
	*got = GDX_MIN((uint16_t)r.dw01, (uint16_t)(r.dw01 >> 16)) + 1u;
	return 0;
}

/* 0 while q is live, else why it died. */
static int queue_dead(struct nh_queue *q)
{
	int rc = 0;

	pthread_mutex_lock(&q->lock);
	if (q->state != NH_Q_LIVE)
		rc = q->err ? q->err : GDX_EDISCONNECTED;
	pthread_mutex_unlock(&q->lock);
	return rc;
}

/*
 * Builds a whole association: admin queue, enable, identify, I/O queues.  On a
 * reconnect, callers of gdx_nvmf_ctrl_info and submitters run meanwhile: what
 * they read is published under c->lock once the association is complete, and
 * the controller is live from then on.
 */
static int setup(struct nh_ctrl *c)
{
	struct nh_queue *admin = NULL, **ioq = NULL;
	struct gdx_nvmf_ctrl_info info = { 0 };
	unsigned nio = 0, depth = 0;
	uint16_t cntlid = 0;
	int rc;

	rc = nh_queue_open(c, 0, ADMIN_DEPTH - 1, &admin);
	if (rc)
		return rc;
	rc = nh_queue_start(admin);
	if (!rc)
		rc = fabrics_connect(c, admin, ADMIN_DEPTH - 1, &cntlid);
	if (!rc) {
		/* the I/O queues' Connect names it; stats readers take it under the lock */
		pthread_mutex_lock(&c->lock);
		c->cntlid = cntlid;
		pthread_mutex_unlock(&c->lock);
		rc = enable_ctrl(admin, &info);
	}
	if (!rc)
		rc = identify_on(admin, GDX_NVME_CNS_CTRL, 0, &c->idctrl);
	if (rc)
		goto fail;
	fill_info(c, &info);
	if (info.cntlid != c->cntlid)
		GDX_WARN(SUB, "Identify says cntlid %u, Connect said %u", info.cntlid,
			 c->cntlid);
	if (!c->p.discovery && c->p.nr_io_queues) {
		uint64_t mqes = (info.cap & 0xffff) + 1;

		rc = set_num_queues(admin, c->p.nr_io_queues, &nio);
		if (rc)
			goto fail;
		nio = GDX_MIN(nio, c->p.nr_io_queues);
		depth = GDX_MIN(c->p.queue_depth, (unsigned)mqes);
		if (info.maxcmd)
			depth = GDX_MIN(depth, info.maxcmd);
		depth = GDX_MIN(depth, 1024u);
		ioq = calloc(nio, sizeof(*ioq));
		if (!ioq) {
			rc = -ENOMEM;
			goto fail;
		}
		c->sqflow_off = c->p.sqflow_off;
		for (unsigned i = 0; i < nio; i++) {
			rc = nh_queue_open(c, (uint16_t)(i + 1), depth - 1, &ioq[i]);
			if (rc)
				goto fail_io;
			rc = nh_queue_start(ioq[i]);
			if (!rc)
				rc = fabrics_connect(c, ioq[i], depth - 1, NULL);
			if (rc && !i && c->sqflow_off && gdx_nvme_status(rc)) {
				/* a controller that refuses it: as libnvme, connect again without */
				GDX_INFO(SUB, "%s refused SQ flow control off; connecting with it on",
					 c->p.subnqn);
				nh_queue_close(ioq[0], fail_setup_req);
				ioq[0] = NULL;
				c->sqflow_off = false;
				c->connect_dnr = false;
				i--;
				continue;
			}
			if (rc) {
				i++;
				goto fail_io;
			}
			/* Connect data always travels in-capsule; I/O after it within IOCCSZ */
			ioq[i]->inline_max = info.ioccsz >= 4 ? info.ioccsz * 16 - 64 : 0;
			continue;
fail_io:
			for (unsigned j = 0; j < i; j++)
				if (ioq[j])
					nh_queue_close(ioq[j], fail_setup_req);
			free(ioq);
			goto fail;
		}
	}
	/*
	 * A queue may have died after its last set-up command (a reset right
	 * after the Connect response, a response for a command never sent),
	 * while its receiver's request for recovery was ignored (it was not
	 * published): the whole set-up fails then, as a failure during it does.
	 * The association goes live as it is published, under c->lock, so one
	 * that dies after this check asks when its request is honoured.
	 */
	pthread_mutex_lock(&c->lock);
	rc = queue_dead(admin);
	for (unsigned i = 0; i < nio && !rc; i++)
		rc = queue_dead(ioq[i]);
	if (rc) {
		pthread_mutex_unlock(&c->lock);
		GDX_WARN(SUB, "%s at %s:%s: a queue was lost during set-up: %s", c->p.subnqn,
			 c->p.addr, c->p.svc, gdx_strerror(rc));
		for (unsigned i = 0; i < nio; i++)
			nh_queue_close(ioq[i], fail_setup_req);
		free(ioq);
		goto fail;
	}
	c->admin = admin;
	c->ioq = ioq;
	c->nioq = nio;
	info.nr_io_queues = nio;
	info.queue_depth = nio ? depth - 1 : 0;
	info.reconnects = c->info.reconnects;
	c->info = info;
	__atomic_store_n(&c->max_xfer, info.max_xfer, __ATOMIC_RELAXED);
	c->state = GDX_NVMF_LIVE;
	c->recovering = false;
	pthread_mutex_unlock(&c->lock);
	return 0;
fail:
	nh_queue_close(admin, fail_setup_req);
	return rc;
}

/* ---- recovery and the control thread --------------------------------------- */

static void teardown(struct nh_ctrl *c)
{
	struct nh_queue *admin, **ioq;
	unsigned nio;

	pthread_mutex_lock(&c->lock);
	c->recovering = true;
	admin = c->admin;
	ioq = c->ioq;
	nio = c->nioq;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nio; i++)
		nh_queue_kill(ioq[i], GDX_EDISCONNECTED);
	if (admin)
		nh_queue_kill(admin, GDX_EDISCONNECTED);
	pthread_mutex_lock(&c->lock);
	while (c->users)
		pthread_cond_wait(&c->cv, &c->lock);
	c->admin = NULL;
	c->ioq = NULL;
	c->nioq = 0;
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nio; i++)
		nh_queue_close(ioq[i], requeue_or_fail);
	free(ioq);
	if (admin)
		nh_queue_close(admin, requeue_or_fail);
	pthread_mutex_lock(&c->lock);
	c->ka_inflight = false;
	pthread_mutex_unlock(&c->lock);
}

/* Detaches the whole pending list, so that it is walked without the lock. */
static struct nh_req *take_pending(struct nh_ctrl *c)
{
	struct nh_req *r;

	pthread_mutex_lock(&c->lock);
	r = c->pending;
	c->pending = NULL;
	c->pending_tail = &c->pending;
	pthread_mutex_unlock(&c->lock);
	return r;
}

static void fail_pending(struct nh_ctrl *c, int err)
{
	struct nh_req *r = take_pending(c);

	while (r) {
		struct nh_req *next = r->next;

		nh_req_complete(r, err);
		r = next;
	}
}

/* retry: after a reconnect (counted), else receivers' device reads (NH_SUBMIT_DEFER). */
static void resubmit_pending(struct nh_ctrl *c, bool retry)
{
	struct nh_req *r = take_pending(c);

	while (r) {
		struct nh_req *next = r->next;

		if (retry)
			gdx_counter_add(&c->retries, 1);
		nh_ctrl_submit(c, r);
		r = next;
	}
}

static void ka_done(struct nh_req *r)
{
	struct nh_ctrl *c = r->arg;

	pthread_mutex_lock(&c->lock);
	c->ka_inflight = false;
	if (r->result && c->state == GDX_NVMF_LIVE && !c->recovering) {
		GDX_WARN(SUB, "keep alive to %s failed: %s", c->p.subnqn, gdx_strerror(r->result));
		ask_recovery(c);
	}
	pthread_mutex_unlock(&c->lock);
	free(r);
}

static void send_keep_alive(struct nh_ctrl *c)
{
	struct nh_req *r = malloc(sizeof(*r));

	if (!r)
		return;
	nh_req_init(r, GDX_NVME_ADM_KEEP_ALIVE, 0, true);
	r->no_retry = true;
	r->timeout_ns = (uint64_t)c->p.kato_ms * 1000000;
	r->done = ka_done;
	r->arg = c;
	c->ka_inflight = true;
	nh_ctrl_submit(c, r);
}

static void check_timeouts(struct nh_ctrl *c)
{
	uint64_t now = gdx_now_ns();
	bool kill = false;

	pthread_mutex_lock(&c->lock);
	if (c->state != GDX_NVMF_LIVE || c->recovering || !c->admin) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	/* the control thread is the only one that frees queues, so they stay valid here */
	pthread_mutex_unlock(&c->lock);
	kill = nh_queue_check_timeouts(c->admin, now);
	for (unsigned i = 0; i < c->nioq; i++)
		kill |= nh_queue_check_timeouts(c->ioq[i], now);
	if (kill) {
		pthread_mutex_lock(&c->lock);
		ask_recovery(c);
		pthread_mutex_unlock(&c->lock);
	}
}

static unsigned backoff_ms(struct nh_ctrl *c)
{
	unsigned shift = GDX_MIN(c->backoff, 3u);

	return c->p.reconnect_delay_ms << shift;
}

static void recover(struct nh_ctrl *c)
{
	uint64_t now = gdx_now_ns();

	GDX_WARN(SUB, "controller %u of %s at %s:%s: connection lost, reconnecting", c->cntlid,
		 c->p.subnqn, c->p.addr, c->p.svc);
	pthread_mutex_lock(&c->lock);
	/* no new request from here on: the state is no longer live */
	c->need_recovery = false;
	c->state = GDX_NVMF_RECONNECTING;
	c->loss_since = now;
	c->backoff = 0;
	pthread_mutex_unlock(&c->lock);
	teardown(c);
	pthread_mutex_lock(&c->lock);
	c->next_attempt = gdx_now_ns() + (uint64_t)backoff_ms(c) * 1000000;
	pthread_mutex_unlock(&c->lock);
}

static void try_reconnect(struct nh_ctrl *c)
{
	uint64_t now;
	int rc;

	c->connect_dnr = false;
	rc = setup(c);
	now = gdx_now_ns();

	pthread_mutex_lock(&c->lock);
	if (!rc) {
		c->info.reconnects++;
		c->next_ka = now + (uint64_t)c->p.kato_ms * 500000;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->lock);
		GDX_WARN(SUB, "reconnected to %s at %s:%s as controller %u", c->p.subnqn,
			 c->p.addr, c->p.svc, c->cntlid);
		resubmit_pending(c, true);
		return;
	}
	c->backoff++;
	if (c->connect_dnr || rc == -EACCES ||
	    now - c->loss_since >= (uint64_t)c->p.ctrl_loss_tmo_ms * 1000000) {
		c->state = GDX_NVMF_FAILED;
		c->fail_err = GDX_EDISCONNECTED;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->lock);
		GDX_ERR(SUB, "giving up on %s at %s:%s after %llu ms (ctrl_loss_tmo_ms %u): %s; "
			"pending I/O fails", c->p.subnqn, c->p.addr, c->p.svc,
			(unsigned long long)((now - c->loss_since) / 1000000), c->p.ctrl_loss_tmo_ms,
			gdx_strerror(rc));
		fail_pending(c, GDX_EDISCONNECTED);
		return;
	}
	/* the last try falls on the deadline, not up to a backoff step past it */
	c->next_attempt = GDX_MIN(now + (uint64_t)backoff_ms(c) * 1000000,
				  c->loss_since + (uint64_t)c->p.ctrl_loss_tmo_ms * 1000000);
	pthread_mutex_unlock(&c->lock);
	GDX_INFO(SUB, "reconnect to %s:%s failed (%s); next try in %llu ms", c->p.addr, c->p.svc,
		 gdx_strerror(rc), (unsigned long long)((c->next_attempt - now) / 1000000));
}

static void *ctrl_main(void *arg)
{
	struct nh_ctrl *c = arg;

	nh_queue_never_wait();
	pthread_mutex_lock(&c->lock);
	while (!c->stopping) {
		struct timespec ts;
		uint64_t now;

		tick_deadline(&ts);
		if (!((c->need_recovery || c->resubmit) && c->state == GDX_NVMF_LIVE))
			pthread_cond_timedwait(&c->cv, &c->lock, &ts);
		if (c->stopping)
			break;
		now = gdx_now_ns();
		if (c->state == GDX_NVMF_LIVE && c->need_recovery) {
			pthread_mutex_unlock(&c->lock);
			recover(c);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		if (c->state == GDX_NVMF_LIVE && c->resubmit) {
			c->resubmit = false;
			pthread_mutex_unlock(&c->lock);
			resubmit_pending(c, false);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		if (c->state == GDX_NVMF_RECONNECTING && now >= c->next_attempt) {
			pthread_mutex_unlock(&c->lock);
			try_reconnect(c);
			pthread_mutex_lock(&c->lock);
			continue;
		}
		if (c->state != GDX_NVMF_LIVE)
			continue;
		pthread_mutex_unlock(&c->lock);
		check_timeouts(c);
		pthread_mutex_lock(&c->lock);
		if (c->state == GDX_NVMF_LIVE && c->p.kato_ms && !c->p.discovery &&
		    !c->ka_inflight && now >= c->next_ka) {
			c->next_ka = now + (uint64_t)c->p.kato_ms * 500000;
			pthread_mutex_unlock(&c->lock);
			send_keep_alive(c);
			pthread_mutex_lock(&c->lock);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- parameters --------------------------------------------------------------- */

void gdx_nvmf_host_opts_init(struct gdx_nvmf_host_opts *o, size_t struct_size)
{
	memset(o, 0, struct_size);
	o->struct_size = struct_size;
	if (struct_size >= offsetof(struct gdx_nvmf_host_opts, data_digest) + sizeof(int)) {
		o->hdr_digest = -1;
		o->data_digest = -1;
	}
}

#define OPT(o, f, def) \
	((o) && (o)->struct_size >= offsetof(struct gdx_nvmf_host_opts, f) + sizeof((o)->f) && \
	 (o)->f ? (o)->f : (def))

static void host_identity(struct nh_params *p, const char *hostnqn)
{
	char buf[256] = "";
	int fd;

	if (getrandom(p->hostid, sizeof(p->hostid), 0) != sizeof(p->hostid))
		memset(p->hostid, 0x5a, sizeof(p->hostid));
	p->hostid[6] = (uint8_t)((p->hostid[6] & 0x0f) | 0x40);
	p->hostid[8] = (uint8_t)((p->hostid[8] & 0x3f) | 0x80);
	if (hostnqn) {
		snprintf(p->hostnqn, sizeof(p->hostnqn), "%s", hostnqn);
		return;
	}
	fd = open("/etc/nvme/hostnqn", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);

		close(fd);
		if (n > 0) {
			buf[n] = 0;
			buf[strcspn(buf, " \r\n")] = 0;
		}
	}
	if (!strncmp(buf, "nqn.", 4)) {
		snprintf(p->hostnqn, sizeof(p->hostnqn), "%s", buf);
		return;
	}
	snprintf(p->hostnqn, sizeof(p->hostnqn),
		 "nqn.2014-08.org.nvmexpress:uuid:%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x", p->hostid[0], p->hostid[1], p->hostid[2],
		 p->hostid[3], p->hostid[4], p->hostid[5], p->hostid[6], p->hostid[7],
		 p->hostid[8], p->hostid[9], p->hostid[10], p->hostid[11], p->hostid[12],
		 p->hostid[13], p->hostid[14], p->hostid[15]);
}

/* I/O queues default to the CPUs of the device's NUMA node (all online CPUs if unknown). */
static unsigned default_queues(struct gdx_device *dev)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct gdx_device_props props;

	if (dev && !gdx_device_props(dev, &props) && props.numa_node >= 0 &&
	    numa_available() >= 0) {
		struct bitmask *m = numa_allocate_cpumask();

		if (m && !numa_node_to_cpus(props.numa_node, m)) {
			unsigned n = numa_bitmask_weight(m);

			if (n)
				ncpu = n;
		}
		if (m)
			numa_free_cpumask(m);
	}
	return (unsigned)GDX_MAX(1L, GDX_MIN(ncpu, 8L));
}

static int auth_params(struct nh_params *p, const struct gdx_nvmf_host_opts *o)
{
	const char *key = OPT(o, dhchap_secret, NULL), *ctrl = OPT(o, dhchap_ctrl_secret, NULL);

	if (key && nvmf_auth_key_parse(key, &p->dhchap_key)) {
		GDX_ERR(SUB, "the DH-HMAC-CHAP secret is not DHHC-1:hh:<base64 key and CRC>:");
		return -EINVAL;
	}
	if (ctrl && (!key || nvmf_auth_key_parse(ctrl, &p->dhchap_ctrl_key))) {
		GDX_ERR(SUB, key ? "the controller's DH-HMAC-CHAP secret is not "
			"DHHC-1:hh:<base64 key and CRC>:" : "a controller secret needs the host's "
			"secret too (bidirectional authentication)");
		return -EINVAL;
	}
	p->has_key = key != NULL;
	p->has_ctrl_key = ctrl != NULL;
	return 0;
}

static int params(struct nh_params *p, const char *addr, const char *svc, const char *subnqn,
		  const struct gdx_nvmf_host_opts *o)
{
	const char *tr, *tls_key;
	int hd, dd;

	if (!addr || !svc || !subnqn || strlen(subnqn) >= 223 || strlen(addr) >= sizeof(p->addr) ||
	    strlen(svc) >= sizeof(p->svc))
		return -EINVAL;
	if (o && o->struct_size < offsetof(struct gdx_nvmf_host_opts, nr_io_queues))
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	snprintf(p->addr, sizeof(p->addr), "%s", addr);
	snprintf(p->svc, sizeof(p->svc), "%s", svc);
	snprintf(p->subnqn, sizeof(p->subnqn), "%s", subnqn);
	host_identity(p, o ? o->hostnqn : NULL);
	p->dev = o ? o->dev : NULL;
	p->discovery = !strcmp(subnqn, GDX_NVME_DISC_NQN);
	p->nr_io_queues = OPT(o, nr_io_queues, (unsigned)gdx_cfg_int("nvmf.host.queues"));
	if (!p->nr_io_queues)
		p->nr_io_queues = default_queues(p->dev);
	p->queue_depth = OPT(o, queue_depth, (unsigned)gdx_cfg_int("nvmf.host.queue_depth"));
	p->kato_ms = OPT(o, kato_ms, (unsigned)gdx_cfg_int("nvmf.host.kato_ms"));
	p->io_timeout_ms = OPT(o, io_timeout_ms, (unsigned)gdx_cfg_int("nvmf.host.io_timeout_ms"));
	p->reconnect_delay_ms = OPT(o, reconnect_delay_ms,
				    (unsigned)gdx_cfg_int("nvmf.host.reconnect_delay_ms"));
	p->ctrl_loss_tmo_ms = OPT(o, ctrl_loss_tmo_ms,
				  (unsigned)gdx_cfg_int("nvmf.host.ctrl_loss_tmo_ms"));
	p->max_retries = OPT(o, max_retries, (unsigned)gdx_cfg_int("nvmf.host.max_retries"));
	p->connect_timeout_ms = OPT(o, connect_timeout_ms,
				    (unsigned)gdx_cfg_int("nvmf.host.connect_timeout_ms"));
	tr = OPT(o, transport, NULL);
	if (tr && strcmp(tr, "tcp") && strcmp(tr, "rdma"))
		return -EPROTONOSUPPORT;
	p->rdma = tr && !strcmp(tr, "rdma");
	hd = o && o->struct_size >= offsetof(struct gdx_nvmf_host_opts, hdr_digest) + sizeof(int)
		? o->hdr_digest : -1;
	dd = o && o->struct_size >= offsetof(struct gdx_nvmf_host_opts, data_digest) + sizeof(int)
		? o->data_digest : -1;
	p->hdgst = hd < 0 ? gdx_cfg_bool("nvmf.host.hdr_digest") : hd != 0;
	p->ddgst = dd < 0 ? gdx_cfg_bool("nvmf.host.data_digest") : dd != 0;
	p->max_io = gdx_cfg_size("nvmf.host.max_io");
	p->bounce_chunk = gdx_cfg_size("nvmf.host.bounce_chunk");
	p->bounce_chunks = (unsigned)gdx_cfg_int("nvmf.host.bounce_chunks");
	p->copy_poll_ns = (uint64_t)gdx_cfg_int("nvmf.host.copy_poll_us") * 1000;
	p->copy_batch = (unsigned)gdx_cfg_int("nvmf.host.copy_batch");
	p->copy_word = gdx_cfg_bool("nvmf.host.copy_word");
	p->lat_stats = gdx_cfg_bool("nvmf.host.lat_stats");
	p->post_first = gdx_cfg_bool("nvmf.host.post_first");
	p->copy_agent = (unsigned)gdx_cfg_int("nvmf.host.copy_agent");
	/* once here, not per I/O: a knob read takes the config lock and scans the environment */
	p->require_direct = gdx_cfg_bool("require_direct");
	p->sqflow_off = gdx_cfg_bool("nvmf.host.sqflow_off");
	if (p->discovery)
		p->nr_io_queues = 0;
	tls_key = OPT(o, tls_key, NULL);
	if (tls_key) {
		int ret = !strncmp(tls_key, "NVMeTLSkey-", 11) ? gdx_tls_key_parse(tls_key, &p->tls_key)
							       : gdx_tls_key_load(tls_key, &p->tls_key);

		if (ret) {
			GDX_ERR(SUB, "TLS key%s%s: %s", tls_key[0] == 'N' ? "" : " file ",
				tls_key[0] == 'N' ? "" : tls_key, ret == -EBADMSG ?
				"CRC-32 does not match" : ret == -EINVAL ?
				"not in the interchange format NVMeTLSkey-1:0[012]:<base64>:" :
				strerror(-ret));
			return -EINVAL;
		}
		if (p->rdma)
			return -EINVAL;
		p->tls = true;
		p->tls_identity = OPT(o, tls_identity_v1, 0) ? 1 : 0;
	}
	return auth_params(p, o);
}

/* ---- public entry points ------------------------------------------------------ */

/* Descriptors per agent ring: at least a queue's marks (mem/stage.c), a power of two. */
#define NH_AGENT_ENTRIES 256u

struct nh_stage {
	struct gdx_stage_ctx *ctx;
	struct nh_stage *next;
};

int nh_ctrl_stage(struct nh_ctrl *c, struct gdx_device *dev, bool late,
		  struct gdx_stage_ctx **out)
{
	struct gdx_stage_ctx_opts o;
	struct nh_stage *s;
	int rc = 0;

	pthread_mutex_lock(&c->stage_lock);
	for (s = c->stages; s && gdx_stage_ctx_device(s->ctx) != dev; s = s->next)
		;
	if (s)
		goto out;
	s = calloc(1, sizeof(*s));
	if (!s) {
		rc = -ENOMEM;
		goto out;
	}
	gdx_stage_ctx_opts_init(&o, sizeof(o));
	/* one agent per controller: its rings' sources are pinned memory of its own device */
	if (!c->agent_tried && c->p.copy_agent && c->p.nr_io_queues) {
		c->agent_tried = true;
		o.agent = true;
		o.lanes = c->p.nr_io_queues;
		o.workers = GDX_MIN(c->p.copy_agent, o.lanes);
		o.entries = NH_AGENT_ENTRIES;
		while (o.entries < c->p.bounce_chunks + 1)
			o.entries *= 2;
		/* a worker serves 64 rings at most */
		o.workers = GDX_MAX(o.workers, (o.lanes + 63) / 64);
	}
	rc = gdx_stage_ctx_open(dev, &o, &s->ctx);
	if (rc) {
		free(s);
		goto out;
	}
	s->next = c->stages;
	c->stages = s;
	if (late) {
		/* decision D1 (issue 18): set up on the posting thread, never a receiver */
		if (!gdx_counter_get(&c->stage_late_opens))
			GDX_INFO(SUB, "%s: device memory of %s, not named at connect: staging "
				 "set up at its first I/O", c->p.subnqn, gdx_device_name(dev));
		gdx_counter_add(&c->stage_late_opens, 1);
	}
out:
	*out = s ? s->ctx : NULL;
	pthread_mutex_unlock(&c->stage_lock);
	return rc;
}

static void ctrl_free(struct nh_ctrl *c)
{
	/* the queues are closed: every copy they posted has landed or failed */
	while (c->stages) {
		struct nh_stage *s = c->stages;

		c->stages = s->next;
		if (gdx_stage_ctx_close(s->ctx))
			GDX_ERR(SUB, "the copy agent did not stop");
		free(s);
	}
	pthread_mutex_destroy(&c->stage_lock);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->alock);
	pthread_cond_destroy(&c->acv);
	nvmf_auth_wipe(c, sizeof(*c));
	free(c);
}

static int ctrl_create(const char *addr, const char *svc, const char *subnqn,
		       const struct gdx_nvmf_host_opts *o, struct nh_ctrl **out)
{
	struct nh_ctrl *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_mutex_init(&c->alock, NULL);
	pthread_cond_init(&c->acv, NULL);
	pthread_mutex_init(&c->stage_lock, NULL);
	c->pending_tail = &c->pending;
	c->retries.name = "resubmitted";
	c->stage_late_opens.name = "stage_late_opens";
	rc = params(&c->p, addr, svc, subnqn, o);
	/* the device named at connect: its staging (and copy agent) before any I/O */
	if (!rc && c->p.dev) {
		struct gdx_stage_ctx *ctx;

		rc = nh_ctrl_stage(c, c->p.dev, false, &ctx);
	}
	if (!rc)
		rc = setup(c);
	if (rc) {
		GDX_ERR(SUB, "cannot connect to %s at %s:%s: %s", subnqn, addr, svc, gdx_strerror(rc));
		ctrl_free(c);
		return rc;
	}
	GDX_INFO(SUB, "connected to %s at %s:%s: controller %u, %u I/O queues of depth %u%s%s",
		 subnqn, addr, svc, c->cntlid, c->nioq, c->info.queue_depth,
		 c->p.hdgst ? ", header digest" : "", c->p.ddgst ? ", data digest" : "");
	*out = c;
	return 0;
}

static void shutdown_ctrl(struct nh_ctrl *c)
{
	uint64_t csts = 0, deadline;

	if (!c->admin)
		return;
	if (prop_set(c->admin, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | GDX_NVME_CC_EN |
		     GDX_NVME_CC_SHN_NORMAL << 14))
		return;
	deadline = gdx_now_ns() + 2000000000ull;
	while (!prop_get(c->admin, GDX_NVME_REG_CSTS, false, &csts) &&
	       (csts & GDX_NVME_CSTS_SHST_MASK) != GDX_NVME_CSTS_SHST_CMPLT &&
	       gdx_now_ns() < deadline)
		usleep(1000);
}

static void ctrl_destroy(struct nh_ctrl *c)
{
	struct nh_queue **ioq;
	unsigned nio;

	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	c->fail_err = GDX_EDISCONNECTED;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->lock);
	if (c->thread_started)
		pthread_join(c->thread, NULL);
	/* new submissions now fail at once; wake the ones blocked in an I/O queue */
	pthread_mutex_lock(&c->lock);
	ioq = c->ioq;
	nio = c->nioq;
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nio; i++)
		nh_queue_kill(ioq[i], GDX_EDISCONNECTED);
	pthread_mutex_lock(&c->lock);
	while (c->users)
		pthread_cond_wait(&c->cv, &c->lock);
	c->ioq = NULL;
	c->nioq = 0;
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < nio; i++)
		nh_queue_close(ioq[i], requeue_or_fail);
	free(ioq);
	fail_pending(c, GDX_EDISCONNECTED);
	if (c->admin) {
		shutdown_ctrl(c);
		nh_queue_close(c->admin, requeue_or_fail);
		c->admin = NULL;
	}
	nh_async_stop(c);
	ctrl_free(c);
}

int gdx_nvmf_connect(const char *addr, const char *svc, const char *subnqn,
		     const struct gdx_nvmf_host_opts *o, struct gdx_nvmf_ctrl **out)
{
	struct nh_ctrl *c;
	int rc;

	if (!out)
		return -EINVAL;
	rc = ctrl_create(addr, svc, subnqn, o, &c);
	if (rc)
		return rc;
	c->next_ka = gdx_now_ns() + (uint64_t)c->p.kato_ms * 500000;
	rc = pthread_create(&c->thread, NULL, ctrl_main, c);
	if (rc) {
		ctrl_destroy(c);
		return -rc;
	}
	c->thread_started = true;
	*out = (struct gdx_nvmf_ctrl *)c;
	return 0;
}

int gdx_nvmf_disconnect(struct gdx_nvmf_ctrl *ctrl)
{
	if (!ctrl)
		return -EINVAL;
	ctrl_destroy((struct nh_ctrl *)ctrl);
	return 0;
}

enum gdx_nvmf_ctrl_state gdx_nvmf_ctrl_state(struct gdx_nvmf_ctrl *ctrl)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	enum gdx_nvmf_ctrl_state s;

	pthread_mutex_lock(&c->lock);
	s = c->state;
	pthread_mutex_unlock(&c->lock);
	return s;
}

int gdx_nvmf_ctrl_info(struct gdx_nvmf_ctrl *ctrl, struct gdx_nvmf_ctrl_info *info)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;

	if (!c || !info)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	*info = c->info;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int admin_data(struct nh_ctrl *c, struct nh_req *r, void *buf, size_t len)
{
	r->buf = buf;
	r->len = len;
	r->mem = NH_MEM_HOST;
	r->timeout_ns = (uint64_t)c->p.io_timeout_ms * 1000000;
	return nh_ctrl_exec(c, r);
}

int gdx_nvmf_identify(struct gdx_nvmf_ctrl *ctrl, uint8_t cns, uint32_t nsid, void *buf)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	struct nh_req r;

	if (!c || !buf)
		return -EINVAL;
	nh_req_init(&r, GDX_NVME_ADM_IDENTIFY, nsid, true);
	r.sqe.cdw10 = cns;
	return admin_data(c, &r, buf, GDX_NVME_IDENTIFY_SIZE);
}

int gdx_nvmf_identify_ns(struct gdx_nvmf_ctrl *ctrl, uint32_t nsid, struct gdx_nvmf_ns_info *in)
{
	struct gdx_nvme_id_ns id;
	const struct gdx_nvme_lbaf *f;
	unsigned lbaf;
	int rc;

	if (!in || !nsid || nsid == GDX_NVME_NSID_ALL)
		return -EINVAL;
	rc = gdx_nvmf_identify(ctrl, GDX_NVME_CNS_NS, nsid, &id);
	if (rc)
		return rc;
	memset(in, 0, sizeof(*in));
	in->nsid = nsid;
	in->nsze = id.nsze;
	in->ncap = id.ncap;
	in->nuse = id.nuse;
	in->nmic = id.nmic;
	if (!in->ncap)
		return -ENOENT;	/* inactive NSID: all zeroes */
	lbaf = (id.flbas & 0xf) | ((id.flbas >> 5) & 3) << 4;
	f = &id.lbaf[lbaf];
	if (f->ds < 9 || f->ds > 16 || f->ms) {
		GDX_ERR(SUB, "namespace %u: LBA format %u (lbads %u, metadata %u) not supported",
			nsid, lbaf, f->ds, f->ms);
		return -EOPNOTSUPP;
	}
	in->block_size = 1u << f->ds;
	memcpy(in->nguid, id.nguid, sizeof(in->nguid));
	memcpy(in->eui64, id.eui64, sizeof(in->eui64));
	return 0;
}

int gdx_nvmf_ns_list(struct gdx_nvmf_ctrl *ctrl, uint32_t *nsids, unsigned max)
{
	uint32_t id[GDX_NVME_IDENTIFY_SIZE / 4];
	uint32_t after = 0;
	unsigned n = 0;

	if (!nsids && max)
		return -EINVAL;
	for (;;) {
		int rc = gdx_nvmf_identify(ctrl, GDX_NVME_CNS_NS_ACTIVE_LIST, after, id);
		unsigned i;

		if (rc)
			return rc;
		for (i = 0; i < 1024; i++) {
			uint32_t v = id[i];

			if (!v || v <= after)
				break;
			if (n < max)
				nsids[n] = v;
			n++;
			after = v;
		}
		if (i < 1024)
			break;
	}
	return (int)GDX_MIN(n, max);
}

static int get_log(struct nh_ctrl *c, uint8_t lid, uint64_t off, void *buf, uint32_t len)
{
	struct nh_req r;
	uint32_t numd = len / 4 - 1;

	nh_req_init(&r, GDX_NVME_ADM_GET_LOG_PAGE, 0, true);
	r.sqe.cdw10 = lid | (numd & 0xffff) << 16;
	r.sqe.cdw11 = numd >> 16;
	r.sqe.cdw12 = (uint32_t)off;
	r.sqe.cdw13 = (uint32_t)(off >> 32);
	return admin_data(c, &r, buf, len);
}

int gdx_nvmf_discover(const char *addr, const char *svc, const struct gdx_nvmf_host_opts *o,
		      struct gdx_nvmf_discovery_log **out)
{
	struct gdx_nvmf_discovery_log *log = NULL;
	struct gdx_nvmf_disc_entry *page = NULL;
	struct gdx_nvmf_disc_hdr hdr;
	struct nh_ctrl *c;
	uint64_t numrec, genctr;
	int rc, tries = 0;

	if (!out)
		return -EINVAL;
	rc = ctrl_create(addr, svc, GDX_NVME_DISC_NQN, o, &c);
	if (rc)
		return rc;
again:
	rc = get_log(c, GDX_NVME_LOG_DISC, 0, &hdr, sizeof(hdr));
	if (rc)
		goto out;
	genctr = hdr.genctr;
	numrec = hdr.numrec;
	if (numrec > 4096) {
		GDX_ERR(SUB, "discovery log claims %llu records", (unsigned long long)numrec);
		rc = GDX_EPROTO;
		goto out;
	}
	free(page);
	free(log);
	page = calloc(numrec ? numrec : 1, sizeof(*page));
	log = calloc(1, sizeof(*log) + numrec * sizeof(log->entries[0]));
	if (!page || !log) {
		rc = -ENOMEM;
		goto out;
	}
	/* in 4 KiB pieces like nvme-cli, then the header again to catch a change */
	for (uint64_t done = 0; done < numrec * sizeof(*page);) {
		uint32_t n = (uint32_t)GDX_MIN(numrec * sizeof(*page) - done, 4096ull);

		rc = get_log(c, GDX_NVME_LOG_DISC, sizeof(hdr) + done, (char *)page + done, n);
		if (rc)
			goto out;
		done += n;
	}
	rc = get_log(c, GDX_NVME_LOG_DISC, 0, &hdr, sizeof(hdr));
	if (rc)
		goto out;
	if (hdr.genctr != genctr && ++tries < 10)
		goto again;
	log->genctr = genctr;
	log->numrec = numrec;
	for (uint64_t i = 0; i < numrec; i++) {
		const struct gdx_nvmf_disc_entry *e = &page[i];
		struct gdx_nvmf_discovery_entry *d = &log->entries[i];

		d->trtype = e->trtype;
		d->adrfam = e->adrfam;
		d->subtype = e->subtype;
		d->treq = e->treq;
		d->portid = e->portid;
		d->cntlid = e->cntlid;
		d->asqsz = e->asqsz;
		d->sectype = e->tcp.sectype;
		gdx_nvme_field_str(d->trsvcid, sizeof(d->trsvcid), e->trsvcid, sizeof(e->trsvcid));
		gdx_nvme_field_str(d->traddr, sizeof(d->traddr), e->traddr, sizeof(e->traddr));
		gdx_nvme_field_str(d->subnqn, sizeof(d->subnqn), e->subnqn, sizeof(e->subnqn));
	}
	*out = log;
	log = NULL;
out:
	free(page);
	free(log);
	ctrl_destroy(c);
	return rc;
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

int gdx_nvmf_ctrl_stats_json(struct gdx_nvmf_ctrl *ctrl, char *buf, size_t len)
{
	struct nh_ctrl *c = (struct nh_ctrl *)ctrl;
	int n;

	if (!c || !buf || !len)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	n = snprintf(buf, len, "{\"subnqn\": \"%s\", \"cntlid\": %u, \"state\": \"%s\", "
		     "\"reconnects\": %u, \"resubmitted\": %llu, \"stage_late_opens\": %llu, "
		     "\"queues\": [", c->p.subnqn,
		     c->cntlid, c->state == GDX_NVMF_LIVE ? "live" :
		     c->state == GDX_NVMF_RECONNECTING ? "reconnecting" : "failed",
		     c->info.reconnects, (unsigned long long)gdx_counter_get(&c->retries),
		     (unsigned long long)gdx_counter_get(&c->stage_late_opens));
	for (unsigned i = 0; c->admin && i <= c->nioq && n > 0 && (size_t)n < len; i++) {
		struct nh_queue *q = i ? c->ioq[i - 1] : c->admin;

		if (i)
			n += snprintf(buf + n, len - (size_t)n, ", ");
		if ((size_t)n < len)
			n += nh_queue_counters_json(q, buf + n, len - (size_t)n);
	}
	if (n > 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n, "]}");
	pthread_mutex_unlock(&c->lock);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return n;
}
