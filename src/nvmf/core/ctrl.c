/* SPDX-License-Identifier: MIT */
/*
 * Controllers: Fabrics Connect (dynamic model, a fresh cntlid per admin
 * Connect), Property Get/Set with the CC/CSTS state machine, keep-alive,
 * asynchronous events, and command dispatch for every queue.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/core/core.h"
#include "nvmf/core/internal.h"

#define DNR GDX_NVME_ST_DNR

uint64_t nvmf_ctrl_cap(const struct nvmf_ctrl *c)
{
	uint64_t mqes = c->tgt->max_qdepth - 1u;

	/* CQR, TO 7.5 s (15 x 500 ms), CSS: NVM only, MPSMIN = MPSMAX = 0 (4 KiB) */
	return mqes | GDX_NVME_CAP_CQR | (15ull << 24) | GDX_NVME_CAP_CSS_NVM;
}

static void ctrl_put(struct nvmf_ctrl *c)
{
	struct nvmf_tgt *t = c->tgt;

	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	pthread_mutex_lock(&t->lock);
	for (struct nvmf_ctrl **pp = &t->ctrls; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	c->subsys->ctrl_count--;
	pthread_mutex_unlock(&t->lock);
	GDX_INFO("nvmf", "controller %u of %s for %s released", c->cntlid, c->subsys->nqn,
		 c->hostnqn);
	gdx_stats_destroy(c->stats);
	pthread_mutex_destroy(&c->lock);
	nvmf_host_auth_free(c->auth);
	free(c);
}

static bool cntlid_in_use(struct nvmf_tgt *t, uint16_t id)
{
	for (struct nvmf_ctrl *c = t->ctrls; c; c = c->next)
		if (c->cntlid == id)
			return true;
	return false;
}

static void ka_rearm_at(struct nvmf_ctrl *c, uint64_t now_ns)
{
	if (c->kato_ms)
		atomic_store(&c->ka_deadline_ns,
			     now_ns + (uint64_t)c->kato_ms * 1000000ull + NVMF_KAS * 100000000ull);
}

static void ka_rearm(struct nvmf_ctrl *c)
{
	ka_rearm_at(c, gdx_now_ns());
}

/*
 * Traffic-based keep-alive (TBKAS) without a clock read per command: a
 * command marks the controller, and the next expiry check (once a second, by
 * a reactor's tick) re-arms from its own time, as nvmet's reset_tbkas does.
 * Expiry comes at most a tick later than it would from the command's time.
 */
static void ka_traffic(struct nvmf_ctrl *c)
{
	if (!atomic_load_explicit(&c->ka_traffic, memory_order_relaxed))
		atomic_store_explicit(&c->ka_traffic, true, memory_order_relaxed);
}

bool nvmf_sq_expired(struct nvmf_sq *sq, uint64_t now_ns)
{
	return nvmf_auth_sq_expired(sq, now_ns) || nvmf_ctrl_ka_expired(sq->ctrl, now_ns);
}

bool nvmf_ctrl_ka_expired(struct nvmf_ctrl *c, uint64_t now_ns)
{
	uint64_t d;

	if (atomic_load(&c->fatal))
		return true;
	if (atomic_exchange(&c->ka_traffic, false))
		ka_rearm_at(c, now_ns);
	d = atomic_load(&c->ka_deadline_ns);
	if (d && now_ns > d) {
		if (!atomic_exchange(&c->fatal, true)) {
			atomic_fetch_or(&c->csts, GDX_NVME_CSTS_CFS);
			GDX_WARN("nvmf", "controller %u of %s for %s: keep-alive timeout (%u ms)",
				 c->cntlid, c->subsys->nqn, c->hostnqn, c->kato_ms);
		}
		return true;
	}
	return false;
}

static uint16_t connect_fail(struct nvmf_req *req, uint16_t st, uint32_t iattr)
{
	req->cqe.dw0 = iattr;
	return st | DNR;
}

/*
 * KATO rounded up to whole seconds (KAS is 10 x 100 ms), in 64 bits: near
 * UINT32_MAX the rounding must not wrap to 0, which would disable keep-alive.
 * Clamped to the largest whole second a 32-bit KATO holds.
 */
static uint32_t kato_round(uint32_t kato_ms)
{
	uint64_t ms = ((uint64_t)kato_ms + 999) / 1000 * 1000;

	return (uint32_t)GDX_MIN(ms, (uint64_t)UINT32_MAX / 1000 * 1000);
}

static struct nvmf_ctrl *ctrl_alloc(struct nvmf_tgt *t, struct nvmf_subsys *s,
				    const struct gdx_nvmf_connect_data *d, uint32_t kato)
{
	struct nvmf_ctrl *c = calloc(1, sizeof(*c));
	static const char *const names[] = { "commands", "errors", "keep_alives", "aens" };
	char scope[GDX_NVME_NQN_SIZE + 32];

	if (!c)
		return NULL;
	c->tgt = t;
	c->subsys = s;
	atomic_init(&c->refs, 1);
	pthread_mutex_init(&c->lock, NULL);
	memcpy(c->hostid, d->hostid, sizeof(c->hostid));
	gdx_nvme_field_str(c->hostnqn, sizeof(c->hostnqn), d->hostnqn, sizeof(d->hostnqn));
	/* A discovery controller connected without keep-alive is still reaped eventually. */
	c->kato_ms = kato ? kato_round(kato) : s->discovery ? NVMF_DISC_KATO_MS : 0;
	c->aen_cfg = 0;
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(c->ctr); i++)
		c->ctr[i].name = names[i];

	/* fresh cntlid, never one still in use (a reconnect races the old controller) */
	for (unsigned tries = 0; tries < GDX_NVME_CNTLID_MAX; tries++) {
		uint16_t id = t->next_cntlid++;

		if (t->next_cntlid > GDX_NVME_CNTLID_MAX)
			t->next_cntlid = 1;
		if (!cntlid_in_use(t, id)) {
			c->cntlid = id;
			break;
		}
	}
	if (!c->cntlid) {
		free(c);
		return NULL;
	}
	c->next = t->ctrls;
	t->ctrls = c;
	s->ctrl_count++;
	snprintf(scope, sizeof(scope), "nvmf.ctrl.%u", c->cntlid);
	gdx_stats_create(scope, c->ctr, GDX_ARRAY_SIZE(c->ctr), &c->stats);
	ka_rearm(c);
	return c;
}

/* A copy of the host's DH-HMAC-CHAP settings, if it has any; under t->lock. */
static int host_auth_copy(struct nvmf_tgt *t, const char *hostnqn, struct nvmf_host_auth **out)
{
	*out = NULL;
	for (unsigned i = 0; i < t->nhauth; i++)
		if (!strcmp(t->hauth[i]->nqn, hostnqn)) {
			*out = malloc(sizeof(**out));
			if (!*out)
				return -ENOMEM;
			memcpy(*out, t->hauth[i], sizeof(**out));
			break;
		}
	return 0;
}

static bool port_exposes(const struct nvmf_port *p, const struct nvmf_subsys *s)
{
	if (!p || s->discovery)
		return true;
	for (unsigned i = 0; i < p->nsubsys; i++)
		if (p->subsys[i] == s)
			return true;
	return false;
}

static uint16_t do_connect(struct nvmf_req *req)
{
	struct nvmf_sq *sq = req->sq;
	struct nvmf_tgt *t = sq->tgt;
	const struct gdx_nvme_sqe *cmd = &req->cmd;
	struct gdx_nvmf_connect_data *d = req->buf;
	struct nvmf_subsys *s;
	struct nvmf_ctrl *c = NULL, *undo = NULL;
	struct nvmf_host_auth *ha = NULL;
	char subnqn[GDX_NVME_NQN_SIZE], hostnqn[GDX_NVME_NQN_SIZE];
	uint16_t qid = cmd->connect.qid, sqsize = cmd->connect.sqsize;
	uint16_t st = 0;

	if (sq->ctrl)
		return GDX_NVME_SC_CMD_SEQ_ERROR | DNR;
	if (cmd->connect.recfmt != 0)
		return GDX_NVME_SC_CONNECT_FORMAT | DNR;
	if (!req->buf || req->len < sizeof(*d))
		return GDX_NVME_SC_SGL_INVALID_DATA | DNR;
	if (gdx_nvme_nqn_check(d->subnqn, sizeof(d->subnqn)) < 0)
		return connect_fail(req, GDX_NVME_SC_CONNECT_INVALID_PARAM,
				    GDX_NVMF_IATTR_DATA | offsetof(struct gdx_nvmf_connect_data,
								   subnqn));
	if (gdx_nvme_nqn_check(d->hostnqn, sizeof(d->hostnqn)) < 0)
		return connect_fail(req, GDX_NVME_SC_CONNECT_INVALID_PARAM,
				    GDX_NVMF_IATTR_DATA | offsetof(struct gdx_nvmf_connect_data,
								   hostnqn));
	memcpy(subnqn, d->subnqn, sizeof(subnqn));
	memcpy(hostnqn, d->hostnqn, sizeof(hostnqn));

	pthread_mutex_lock(&t->lock);
	s = nvmf_subsys_find(t, subnqn);
	if (!s || !port_exposes(sq->port, s)) {
		GDX_WARN("nvmf", "connect from %s: unknown subsystem %s", hostnqn, subnqn);
		st = connect_fail(req, GDX_NVME_SC_CONNECT_INVALID_PARAM,
				  GDX_NVMF_IATTR_DATA | offsetof(struct gdx_nvmf_connect_data,
								 subnqn));
		goto out;
	}
	/* a PSK belongs to one host and subsystem: the queue speaks for no other */
	if (!nvmf_host_allowed(s, hostnqn) ||
	    (sq->tls_hostnqn && (strcmp(sq->tls_hostnqn, hostnqn) ||
				 strcmp(sq->tls_subnqn, subnqn)))) {
		GDX_WARN("nvmf", "connect from %s to %s refused: host not allowed%s", hostnqn,
			 subnqn, sq->tls_hostnqn ? " or not the one its TLS PSK identity names" : "");
		st = connect_fail(req, GDX_NVME_SC_CONNECT_INVALID_HOST,
				  GDX_NVMF_IATTR_DATA | offsetof(struct gdx_nvmf_connect_data,
								 hostnqn));
		goto out;
	}
	if (sqsize == 0 || sqsize >= t->max_qdepth) {
		st = connect_fail(req, GDX_NVME_SC_CONNECT_INVALID_PARAM, 44);
		goto out;
	}
	if (qid == 0) {
		if (d->cntlid != GDX_NVME_CNTLID_DYNAMIC) {
			st = connect_fail(req, GDX_NVME_SC_CONNECT_INVALID_PARAM,
					  GDX_NVMF_IATTR_DATA |
						  offsetof(struct gdx_nvmf_connect_data, cntlid));
			goto out;
		}
		/* the discovery controller asks no proof (nvmet's does not either) */
		if (!s->discovery && host_auth_copy(t, hostnqn, &ha)) {
			st = GDX_NVME_SC_CONNECT_CTRL_BUSY;
			goto out;
		}
		c = ctrl_alloc(t, s, d, cmd->connect.kato);
		if (!c) {
			/* transient: no DNR so the host retries */
			st = GDX_NVME_SC_CONNECT_CTRL_BUSY;
			goto out;
		}
		c->admin = sq;
		c->trtype = sq->port ? sq->port->trtype : GDX_NVMF_TRTYPE_TCP;
		c->auth = ha;
		ha = NULL;
	} else {
		for (c = t->ctrls; c; c = c->next)
			if (c->subsys == s && c->cntlid == d->cntlid)
				break;
		/*
		 * Only the host that made the controller may add queues to it: the
		 * same host NQN and host ID.  A mismatch answers as an unknown
		 * cntlid does, so a guesser learns nothing of other hosts'
		 * controllers.  (Both are claims, not proofs: docs/reliability.md.)
		 */
		if (c && (strcmp(c->hostnqn, hostnqn) ||
			  memcmp(c->hostid, d->hostid, sizeof(c->hostid)))) {
			GDX_WARN("nvmf", "connect from %s to %s qid %u refused: controller %u "
				 "belongs to another host %s", hostnqn, subnqn, qid, c->cntlid,
				 strcmp(c->hostnqn, hostnqn) ? "NQN" : "ID");
			c = NULL;
		}
		if (!c || atomic_load(&c->fatal)) {
			c = NULL;
			st = connect_fail(req, GDX_NVME_SC_CONNECT_INVALID_PARAM,
					  GDX_NVMF_IATTR_DATA |
						  offsetof(struct gdx_nvmf_connect_data, cntlid));
			goto out;
		}
		if (!s->discovery && !(atomic_load(&c->csts) & GDX_NVME_CSTS_RDY)) {
			c = NULL;
			st = GDX_NVME_SC_CMD_SEQ_ERROR | DNR;
			goto out;
		}
		if (s->discovery || qid > c->nr_io_queues || qid > NVMF_MAX_IO_QUEUES) {
			c = NULL;
			st = connect_fail(req, GDX_NVME_SC_CONNECT_INVALID_PARAM, 42);
			goto out;
		}
		if (c->sqs[qid]) {
			c = NULL;
			st = GDX_NVME_SC_CMD_SEQ_ERROR | DNR;
			goto out;
		}
		atomic_fetch_add(&c->refs, 1);
	}
	/*
	 * The queue's authentication state before it is published: should that
	 * allocation fail, a new controller is freed as unused, an I/O queue's
	 * reference dropped (ctrl_put takes t->lock, so after the unlock).
	 */
	if (c->auth && nvmf_auth_sq_start(sq)) {
		undo = c;
		c = NULL;
		st = GDX_NVME_SC_CONNECT_CTRL_BUSY;
		goto out;
	}
	c->sqs[qid] = sq;
	sq->ctrl = c;
	sq->qid = qid;
	sq->size = sqsize + 1u;
	sq->sqflow_disabled = cmd->connect.cattr & GDX_NVMF_CATTR_DISABLE_SQFLOW;
	/* AUTHREQ.ATR: this queue serves nothing until the host authenticates */
	req->cqe.dw0 = c->cntlid | (sq->auth ? NVMF_AUTHREQ_ATR : 0);
out:
	pthread_mutex_unlock(&t->lock);
	nvmf_host_auth_free(ha);
	if (undo)
		ctrl_put(undo);
	if (!st)
		GDX_INFO("nvmf", "connect: host %s -> %s qid %u size %u ctrl %u%s", hostnqn, subnqn,
			 qid, sqsize + 1u, c->cntlid, qid == 0 ? " (new controller)" : "");
	return st;
}

void nvmf_sq_destroy(struct nvmf_sq *sq)
{
	struct nvmf_ctrl *c = sq->ctrl;

	nvmf_auth_sq_free(sq);
	if (!c)
		return;
	pthread_mutex_lock(&c->tgt->lock);
	c->sqs[sq->qid] = NULL;
	pthread_mutex_unlock(&c->tgt->lock);
	pthread_mutex_lock(&c->lock);
	if (c->admin == sq) {
		c->admin = NULL;
		c->naer = 0;	/* the transport frees the held requests with the queue */
		/* I/O queues of a controller whose admin queue is gone are dead too */
		atomic_store(&c->fatal, true);
	}
	pthread_mutex_unlock(&c->lock);
	GDX_INFO("nvmf", "disconnect: host %s ctrl %u qid %u", c->hostnqn, c->cntlid, sq->qid);
	sq->ctrl = NULL;
	ctrl_put(c);
}

/* ---- properties ------------------------------------------------------------ */

static void update_cc(struct nvmf_ctrl *c, uint32_t cc)
{
	uint32_t old = c->cc;
	uint32_t csts = atomic_load(&c->csts);

	c->cc = cc;
	if ((cc & GDX_NVME_CC_EN) && !(old & GDX_NVME_CC_EN)) {
		bool ok = GDX_NVME_CC_MPS(cc) == 0 && GDX_NVME_CC_AMS(cc) == 0 &&
			  GDX_NVME_CC_CSS(cc) == 0;

		if (!c->subsys->discovery)
			ok = ok && GDX_NVME_CC_IOSQES(cc) == 6 && GDX_NVME_CC_IOCQES(cc) == 4;
		if (ok) {
			csts |= GDX_NVME_CSTS_RDY;
			ka_rearm(c);
		} else {
			GDX_WARN("nvmf", "controller %u: CC 0x%x rejected", c->cntlid, cc);
			csts |= GDX_NVME_CSTS_CFS;
		}
	}
	if (!(cc & GDX_NVME_CC_EN) && (old & GDX_NVME_CC_EN))
		csts &= ~(GDX_NVME_CSTS_RDY | GDX_NVME_CSTS_SHST_MASK | GDX_NVME_CSTS_CFS);
	if (GDX_NVME_CC_SHN(cc) && !GDX_NVME_CC_SHN(old)) {
		/* nothing is cached in the controller: shutdown completes at once */
		csts = (csts & ~(GDX_NVME_CSTS_SHST_MASK | GDX_NVME_CSTS_RDY)) |
		       GDX_NVME_CSTS_SHST_CMPLT;
		GDX_INFO("nvmf", "controller %u of %s: shutdown", c->cntlid, c->subsys->nqn);
	}
	if (!GDX_NVME_CC_SHN(cc) && GDX_NVME_CC_SHN(old))
		csts &= ~GDX_NVME_CSTS_SHST_MASK;
	atomic_store(&c->csts, csts);
}

static uint16_t do_prop(struct nvmf_req *req, bool set)
{
	struct nvmf_ctrl *c = req->sq->ctrl;
	const struct gdx_nvme_sqe *cmd = &req->cmd;
	bool eight = (cmd->prop.attrib & 7) == 1;

	if ((cmd->prop.attrib & 7) > 1)
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	if (set) {
		if (cmd->prop.ofst != GDX_NVME_REG_CC || eight)
			return GDX_NVME_SC_INVALID_FIELD | DNR;
		pthread_mutex_lock(&c->lock);
		update_cc(c, (uint32_t)cmd->prop.value);
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	switch (cmd->prop.ofst) {
	case GDX_NVME_REG_CAP:
		if (!eight)
			return GDX_NVME_SC_INVALID_FIELD | DNR;
		req->cqe.result = nvmf_ctrl_cap(c);
		return 0;
	case GDX_NVME_REG_VS:
		req->cqe.dw0 = NVMF_VS;
		break;
	case GDX_NVME_REG_CC:
		req->cqe.dw0 = c->cc;
		break;
	case GDX_NVME_REG_CSTS:
		req->cqe.dw0 = atomic_load(&c->csts);
		break;
	default:
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	}
	return eight ? (GDX_NVME_SC_INVALID_FIELD | DNR) : 0;
}

static uint16_t exec_fabrics(struct nvmf_req *req)
{
	switch (req->cmd.fctype) {
	case GDX_NVMF_FCTYPE_CONNECT:
		return do_connect(req);
	case GDX_NVMF_FCTYPE_PROP_GET:
	case GDX_NVMF_FCTYPE_PROP_SET:
		if (!req->sq->ctrl)
			return GDX_NVME_SC_INVALID_OPCODE | DNR;
		if (req->sq->qid != 0)
			return GDX_NVME_SC_INVALID_FIELD | DNR;
		return do_prop(req, req->cmd.fctype == GDX_NVMF_FCTYPE_PROP_SET);
	case GDX_NVMF_FCTYPE_DISCONNECT:
		/* NVMe-oF 1.1 Disconnect of an I/O queue: the host closes it next */
		if (!req->sq->ctrl)
			return GDX_NVME_SC_INVALID_OPCODE | DNR;
		return req->sq->qid ? 0 : (GDX_NVME_SC_INVALID_FIELD | DNR);
	case GDX_NVMF_FCTYPE_AUTH_SEND:
		return nvmf_auth_send(req);
	case GDX_NVMF_FCTYPE_AUTH_RECV:
		return nvmf_auth_recv(req);
	default:
		return GDX_NVME_SC_INVALID_OPCODE | DNR;
	}
}

/* ---- asynchronous events ----------------------------------------------------- */

void nvmf_ctrl_aen_deliver(struct nvmf_sq *admin)
{
	struct nvmf_ctrl *c = admin->ctrl;
	struct nvmf_req *done[NVMF_AERL];
	unsigned n = 0;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	while (c->aen_pending && c->naer) {
		uint32_t bit = c->aen_pending & -c->aen_pending;
		struct nvmf_req *r = c->aer_reqs[--c->naer];

		c->aen_pending &= ~bit;
		if (bit == AEN_NS_CHANGED)
			r->cqe.dw0 = GDX_NVME_AER_RESULT(GDX_NVME_AER_TYPE_NOTICE,
							 GDX_NVME_AER_NOTICE_NS_CHANGED,
							 GDX_NVME_LOG_CHANGED_NS);
		else
			r->cqe.dw0 = GDX_NVME_AER_RESULT(GDX_NVME_AER_TYPE_NOTICE,
							 GDX_NVME_AER_NOTICE_DISC_CHANGED,
							 GDX_NVME_LOG_DISC);
		done[n++] = r;
	}
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < n; i++) {
		gdx_counter_add(&c->ctr[CTRL_CTR_AENS], 1);
		nvmf_req_complete(done[i], 0);
	}
}

void nvmf_subsys_ns_changed(struct nvmf_tgt *t, struct nvmf_subsys *s, uint32_t nsid)
{
	pthread_mutex_lock(&t->lock);
	for (struct nvmf_ctrl *c = t->ctrls; c; c = c->next) {
		bool seen = false;

		if (c->subsys != s)
			continue;
		pthread_mutex_lock(&c->lock);
		for (unsigned i = 0; i < c->nchanged; i++)
			seen |= c->changed_ns[i] == nsid;
		if (!seen) {
			if (c->nchanged < GDX_ARRAY_SIZE(c->changed_ns))
				c->changed_ns[c->nchanged++] = nsid;
			else
				c->changed_overflow = true;
		}
		if ((c->aen_cfg & GDX_NVME_OAES_NS_ATTR) && !(c->aen_masked & AEN_NS_CHANGED)) {
			c->aen_pending |= AEN_NS_CHANGED;
			c->aen_masked |= AEN_NS_CHANGED;
			/* under c->lock: the admin queue cannot go away meanwhile */
			if (c->admin && c->admin->aen_kick)
				c->admin->aen_kick(c->admin->handle);
		}
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&t->lock);
}

/* ---- dispatch ------------------------------------------------------------------ */

uint32_t nvmf_req_c2h_len(const struct nvmf_req *req)
{
	if (req->cmd.opc == GDX_NVME_OPC_FABRICS)
		return req->cmd.fctype == GDX_NVMF_FCTYPE_AUTH_RECV ? req->len : 0;
	if (gdx_nvme_opc_xfer(req->cmd.opc) != GDX_NVME_XFER_C2H)
		return 0;
	return req->len;
}

void nvmf_req_complete(struct nvmf_req *req, uint16_t status)
{
	struct nvmf_sq *sq = req->sq;
	struct nvmf_ctrl *c = sq->ctrl;

	req->cqe.cid = req->cmd.cid;
	req->cqe.sqid = sq->qid;
	if (sq->sqflow_disabled) {
		req->cqe.sqhd = 0xffff;
	} else {
		sq->head = (uint16_t)((sq->head + 1) % (sq->size ? sq->size : 1));
		req->cqe.sqhd = sq->head;
	}
	if (status && c) {
		struct gdx_nvme_err_log *e;

		gdx_counter_add(&c->ctr[CTRL_CTR_ERRORS], 1);
		gdx_counter_add(&sq->ctr[SQ_CTR_ERRORS], 1);
		pthread_mutex_lock(&c->lock);
		e = &c->errlog[c->err_count % NVMF_ERR_LOG_ENTRIES];
		memset(e, 0, sizeof(*e));
		e->error_count = ++c->err_count;
		e->sqid = sq->qid;
		e->cmdid = req->cmd.cid;
		e->status_field = (uint16_t)(status << 1);
		e->param_error_location = 0xffff;
		e->nsid = req->cmd.opc == GDX_NVME_OPC_FABRICS ? 0 : req->cmd.nsid;
		e->trtype = c->trtype;
		pthread_mutex_unlock(&c->lock);
		GDX_DBG("nvmf", "ctrl %u qid %u cid %u opc 0x%02x: %s (0x%x)", c->cntlid, sq->qid,
			req->cmd.cid, req->cmd.opc, gdx_nvme_status_str(status), status);
	}
	if (c && (req->t_start || status))
		nvmf_sq_account(sq, req, status);
	req->cqe.status = (uint16_t)(status << 1);
	req->done(req);
}

static bool ctrl_ready(const struct nvmf_ctrl *c)
{
	uint32_t csts = atomic_load(&c->csts);

	return (c->cc & GDX_NVME_CC_EN) && (csts & GDX_NVME_CSTS_RDY) &&
	       !(csts & GDX_NVME_CSTS_CFS);
}

uint16_t nvmf_req_prep(struct nvmf_req *req)
{
	struct nvmf_sq *sq = req->sq;
	struct nvmf_ctrl *c = sq->ctrl;

	memset(&req->cqe, 0, sizeof(req->cqe));
	req->ns = NULL;
	req->t_start = atomic_load_explicit(&sq->tgt->timed, memory_order_relaxed) ?
			       gdx_now_ns() : 0;
	if (c)
		gdx_counter_add(&c->ctr[CTRL_CTR_CMDS], 1);
	gdx_counter_add(&sq->ctr[SQ_CTR_CMDS], 1);
	if (req->cmd.flags & GDX_NVME_FLAGS_FUSE_MASK)
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	if (req->cmd.opc == GDX_NVME_OPC_FABRICS) {
		uint8_t fct = req->cmd.fctype;
		bool auth = fct == GDX_NVMF_FCTYPE_AUTH_SEND || fct == GDX_NVMF_FCTYPE_AUTH_RECV;

		/* Connect and Authentication carry data (how is the transport's business) */
		if (req->len && fct != GDX_NVMF_FCTYPE_CONNECT && !auth)
			return GDX_NVME_SC_INVALID_FIELD | DNR;
		/* before authentication: Authentication Send/Receive and Disconnect only */
		if (!nvmf_auth_sq_ok(sq) && !auth && fct != GDX_NVMF_FCTYPE_DISCONNECT &&
		    fct != GDX_NVMF_FCTYPE_CONNECT)
			return GDX_NVME_SC_AUTH_REQUIRED | DNR;
		return 0;
	}
	if (!c)
		return GDX_NVME_SC_INVALID_OPCODE | DNR;
	if (!nvmf_auth_sq_ok(sq))
		return GDX_NVME_SC_AUTH_REQUIRED | DNR;
	if (atomic_load(&c->fatal))
		return GDX_NVME_SC_INTERNAL;
	/* traffic-based keep-alive (CTRATT.TBKAS) */
	ka_traffic(c);
	if (sq->qid == 0)
		return nvmf_admin_prep(req);
	if (!ctrl_ready(c))
		return GDX_NVME_SC_CMD_SEQ_ERROR | DNR;
	return nvmf_io_prep(req);
}

void nvmf_req_exec(struct nvmf_req *req)
{
	uint16_t st;

	if (req->cmd.opc == GDX_NVME_OPC_FABRICS) {
		nvmf_req_complete(req, exec_fabrics(req));
		return;
	}
	if (req->sq->qid == 0) {
		st = nvmf_admin_exec(req);
		if (st != NVMF_ST_PENDING)
			nvmf_req_complete(req, st);
		return;
	}
	nvmf_io_exec(req);
}

/* Called by admin.c with ctrl->lock not held. */
uint16_t nvmf_ctrl_keep_alive(struct nvmf_ctrl *c)
{
	if (!c->kato_ms)
		return GDX_NVME_SC_KA_TIMEOUT_INVALID | DNR;
	gdx_counter_add(&c->ctr[CTRL_CTR_KA], 1);
	ka_rearm(c);
	return 0;
}

void nvmf_ctrl_set_kato(struct nvmf_ctrl *c, uint32_t kato_ms)
{
	c->kato_ms = kato_round(kato_ms);
	if (!c->kato_ms)
		atomic_store(&c->ka_deadline_ns, 0);
	else
		ka_rearm(c);
}

bool nvmf_ctrl_is_ready(const struct nvmf_ctrl *c)
{
	return ctrl_ready(c);
}

/* TRADDR for a discovery entry: the port's address, or ours on this connection if "any". */
void nvmf_disc_traddr(const struct nvmf_port *p, const struct nvmf_sq *sq, char *out, size_t n)
{
	const struct sockaddr_storage *ss = &sq->local;

	if (strcmp(p->traddr, "0.0.0.0") && strcmp(p->traddr, "::")) {
		snprintf(out, n, "%s", p->traddr);
		return;
	}
	if (ss->ss_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, out, (socklen_t)n);
	else if (ss->ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, out,
			  (socklen_t)n);
	else
		snprintf(out, n, "%s", p->traddr);
}
