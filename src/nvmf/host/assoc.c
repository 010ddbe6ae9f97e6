/* SPDX-License-Identifier: MIT */
/*
 * One association with the controller, built and shut down command by
 * command: the admin queue's Connect (and DH-HMAC-CHAP, auth.c), enable,
 * Identify, the number of I/O queues and their Connects; the shutdown
 * notification at disconnect.  Runs on the connecting caller or, on a
 * reconnect, the control thread, so each command waits for itself and
 * enforces its own timeout (queue_exec).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/host/host.h"
#include "nvmf/proto/nvme.h"

#define SUB "nvmf-host"
#define ADMIN_DEPTH 32

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

	r->done = nh_wait_done;
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

		nh_tick_deadline(&ts);
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
	return nh_wait_req(r, &w);
}

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
int nh_ctrl_setup(struct nh_ctrl *c)
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

void nh_ctrl_shutdown(struct nh_ctrl *c)
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
