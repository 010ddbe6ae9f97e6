/* SPDX-License-Identifier: MIT */
/*
 * The controller's side of DH-HMAC-CHAP (NVMe Base 2.0, 8.13.5), one
 * transaction per queue: the host sends Negotiate, receives a Challenge,
 * sends its Reply, receives Success1 (with the controller's response when it
 * asked for one) and then, bidirectional, sends Success2.  A failure on our
 * side is told by Failure1 at the next Authentication Receive and fails the
 * controller (as nvmet does): the host gets no queue.  Until its first
 * transaction succeeds a queue serves nothing but Authentication Send and
 * Receive; a later Negotiate starts a re-authentication, during which the
 * queue goes on serving.
 *
 * A queue's commands all run on its transport's thread, and so does the
 * expiry check: the state needs no lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/core/core.h"
#include "nvmf/core/internal.h"

#define DNR GDX_NVME_ST_DNR

enum auth_step {
	AS_NEGOTIATE,		/* waiting for Negotiate (the first, or a re-authentication) */
	AS_CHALLENGE,		/* Receive returns the Challenge */
	AS_REPLY,		/* waiting for the Reply */
	AS_SUCCESS1,		/* Receive returns Success1 */
	AS_SUCCESS2,		/* waiting for Success2 */
	AS_FAILURE1,		/* Receive returns Failure1 */
};

struct nvmf_auth_sq {
	enum auth_step step;
	bool authenticated;
	bool bidi;		/* the host asked for the controller's response */
	uint8_t hash, dh, hl;
	uint8_t rce;		/* Failure1's explanation */
	uint16_t tid;
	uint32_t s1, s2;
	uint64_t deadline_ns;	/* of the transaction under way; 0: none */
	uint8_t c1[NVMF_AUTH_HASH_MAX], c2[NVMF_AUTH_HASH_MAX];
	struct nvmf_auth_dh *dhk;
	uint16_t sklen;
	uint8_t skey[NVMF_AUTH_DH_MAX];
};

static const char *const step_names[] = { "Negotiate", "Challenge", "Reply", "Success1",
					   "Success2", "Failure1" };

void nvmf_host_auth_free(struct nvmf_host_auth *a)
{
	if (!a)
		return;
	nvmf_auth_wipe(a, sizeof(*a));
	free(a);
}

int nvmf_tgt_set_host_auth(struct nvmf_tgt *t, const struct nvmf_host_auth *a)
{
	struct nvmf_host_auth *copy;
	unsigned i;
	int ret = 0;

	if (gdx_nvme_nqn_check(a->nqn, strlen(a->nqn) + 1) < 0 || !a->key.len || !a->nhash ||
	    !a->ndh)
		return -EINVAL;
	copy = malloc(sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	memcpy(copy, a, sizeof(*copy));
	pthread_mutex_lock(&t->lock);
	for (i = 0; i < t->nhauth && strcmp(t->hauth[i]->nqn, a->nqn); i++)
		;
	if (i < t->nhauth) {
		nvmf_host_auth_free(t->hauth[i]);
		t->hauth[i] = copy;
	} else if (t->nhauth < NVMF_MAX_HOSTS) {
		t->hauth[t->nhauth++] = copy;
	} else {
		nvmf_host_auth_free(copy);
		ret = -ENOSPC;
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/* Drops what one transaction holds: the DH key pair, the session key, the challenges. */
static void txn_clear(struct nvmf_auth_sq *a)
{
	nvmf_auth_dh_free(a->dhk);
	a->dhk = NULL;
	nvmf_auth_wipe(a->skey, a->sklen);
	a->sklen = 0;
	nvmf_auth_wipe(a->c1, sizeof(a->c1));
	nvmf_auth_wipe(a->c2, sizeof(a->c2));
	a->bidi = false;
	a->deadline_ns = 0;
}

int nvmf_auth_sq_start(struct nvmf_sq *sq)
{
	struct nvmf_auth_sq *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	a->step = AS_NEGOTIATE;
	/* the host's Negotiate is due as soon as it has the Connect response */
	a->deadline_ns = gdx_now_ns() + sq->tgt->auth_tmo_ns;
	sq->auth = a;
	return 0;
}

void nvmf_auth_sq_free(struct nvmf_sq *sq)
{
	struct nvmf_auth_sq *a = sq->auth;

	if (!a)
		return;
	txn_clear(a);
	nvmf_auth_wipe(a, sizeof(*a));
	free(a);
	sq->auth = NULL;
}

bool nvmf_auth_sq_ok(const struct nvmf_sq *sq)
{
	return !sq->auth || sq->auth->authenticated;
}

static void fail_ctrl(struct nvmf_sq *sq, const char *why)
{
	struct nvmf_ctrl *c = sq->ctrl;

	GDX_WARN("nvmf", "controller %u of %s: host %s qid %u: authentication failed: %s",
		 c->cntlid, c->subsys->nqn, c->hostnqn, sq->qid, why);
	atomic_store(&c->fatal, true);
}

bool nvmf_auth_sq_expired(struct nvmf_sq *sq, uint64_t now_ns)
{
	struct nvmf_auth_sq *a = sq->auth;

	if (!a || !a->deadline_ns || now_ns <= a->deadline_ns)
		return false;
	a->deadline_ns = 0;
	fail_ctrl(sq, a->authenticated ? "re-authentication timed out" : "timed out");
	return true;
}

/* Authentication Send/Receive carry the DH-HMAC-CHAP protocol, and len bytes. */
static uint16_t check_cmd(const struct nvmf_req *req)
{
	const struct gdx_nvme_sqe *cmd = &req->cmd;

	if (!req->sq->ctrl)
		return GDX_NVME_SC_CMD_SEQ_ERROR | DNR;
	if (!req->sq->auth || !req->sq->ctrl->auth)
		return GDX_NVME_SC_INVALID_OPCODE | DNR;
	if (cmd->auth.secp != NVMF_AUTH_SECP || cmd->auth.spsp0 != NVMF_AUTH_SPSP0 ||
	    cmd->auth.spsp1 != NVMF_AUTH_SPSP1)
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	if (!cmd->auth.len || cmd->auth.len != req->len || !req->buf)
		return GDX_NVME_SC_INVALID_FIELD | DNR;
	return 0;
}

static void to_failure1(struct nvmf_auth_sq *a, uint8_t rce)
{
	a->step = AS_FAILURE1;
	a->rce = rce;
}

/* The first of our allowed ids that the host offers, or -1. */
static int pick(const uint8_t *ours, unsigned nours, const uint8_t *theirs, unsigned ntheirs)
{
	for (unsigned i = 0; i < nours; i++)
		if (memchr(theirs, ours[i], ntheirs))
			return ours[i];
	return -1;
}

static uint8_t negotiate(struct nvmf_sq *sq, const struct nvmf_auth_msg *m)
{
	const struct nvmf_host_auth *h = sq->ctrl->auth;
	struct nvmf_auth_sq *a = sq->auth;
	int hash, dh;

	txn_clear(a);
	a->tid = m->tid;
	a->deadline_ns = gdx_now_ns() + sq->tgt->auth_tmo_ns;
	/* secure channel concatenation (TLS after DH-HMAC-CHAP) is not offered */
	if (m->neg.sc_c)
		return NVMF_AUTH_RCE_CONCAT_MISMATCH;
	hash = pick(h->hashes, h->nhash, m->neg.hashes, m->neg.nhash);
	if (hash < 0)
		return NVMF_AUTH_RCE_HASH_UNUSABLE;
	dh = pick(h->dhs, h->ndh, m->neg.dhs, m->neg.ndh);
	if (dh < 0)
		return NVMF_AUTH_RCE_DHGROUP_UNUSABLE;
	a->hash = (uint8_t)hash;
	a->dh = (uint8_t)dh;
	a->hl = (uint8_t)nvmf_auth_hash_len(a->hash);
	do {
		if (nvmf_auth_random(&a->s1, sizeof(a->s1)) ||
		    nvmf_auth_random(a->c1, a->hl))
			return NVMF_AUTH_RCE_FAILED;
	} while (!a->s1);
	if (a->dh != NVMF_AUTH_DH_NULL && nvmf_auth_dh_new(a->dh, &a->dhk))
		return NVMF_AUTH_RCE_FAILED;
	return 0;
}

static uint8_t reply(struct nvmf_sq *sq, const struct nvmf_auth_msg *m)
{
	struct nvmf_ctrl *c = sq->ctrl;
	struct nvmf_auth_sq *a = sq->auth;
	uint8_t tkey[NVMF_AUTH_HASH_MAX], aug[NVMF_AUTH_HASH_MAX], want[NVMF_AUTH_HASH_MAX];
	int tlen, dhlen = nvmf_auth_dh_len(a->dh), ret;
	uint8_t rce = 0;

	if (m->tid != a->tid || m->reply.hl != a->hl || m->reply.dhvlen != dhlen)
		return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
	if (m->reply.cvalid && (!m->reply.seq || !c->auth->has_ctrl_key))
		return !m->reply.seq ? NVMF_AUTH_RCE_INCORRECT_PAYLOAD : NVMF_AUTH_RCE_FAILED;
	if (a->dhk) {
		ret = nvmf_auth_dh_derive(a->dhk, m->reply.dhv, m->reply.dhvlen, a->skey);
		if (ret < 0)
			return NVMF_AUTH_RCE_INCORRECT_PAYLOAD;
		a->sklen = (uint16_t)ret;
	}
	tlen = nvmf_auth_transform(&c->auth->key, c->hostnqn, tkey);
	if (tlen < 0 || nvmf_auth_augment(a->hash, a->skey, a->sklen, a->c1, aug) < 0 ||
	    nvmf_auth_response(a->hash, tkey, (size_t)tlen, aug, a->s1, a->tid, 0, false,
			       c->hostnqn, c->subsys->nqn, want) < 0)
		rce = NVMF_AUTH_RCE_FAILED;
	else if (!nvmf_auth_equal(want, m->reply.rval, a->hl))
		rce = NVMF_AUTH_RCE_FAILED;
	nvmf_auth_wipe(tkey, sizeof(tkey));
	nvmf_auth_wipe(aug, sizeof(aug));
	nvmf_auth_wipe(want, sizeof(want));
	if (rce)
		return rce;
	a->bidi = m->reply.cvalid;
	if (a->bidi) {
		a->s2 = m->reply.seq;
		memcpy(a->c2, m->reply.cval, a->hl);
	}
	return 0;
}

static void done_ok(struct nvmf_sq *sq)
{
	struct nvmf_auth_sq *a = sq->auth;
	struct nvmf_ctrl *c = sq->ctrl;

	if (!a->authenticated)
		GDX_INFO("nvmf", "controller %u: host %s qid %u authenticated (%s, %s%s)",
			 c->cntlid, c->hostnqn, sq->qid, nvmf_auth_hash_name(a->hash),
			 nvmf_auth_dh_name(a->dh), a->bidi ? ", bidirectional" : "");
	else
		GDX_DBG("nvmf", "controller %u: host %s qid %u re-authenticated (%s, %s%s)",
			c->cntlid, c->hostnqn, sq->qid, nvmf_auth_hash_name(a->hash),
			nvmf_auth_dh_name(a->dh), a->bidi ? ", bidirectional" : "");
	a->authenticated = true;
	a->step = AS_NEGOTIATE;
	txn_clear(a);
}

uint16_t nvmf_auth_send(struct nvmf_req *req)
{
	struct nvmf_sq *sq = req->sq;
	struct nvmf_auth_sq *a;
	struct nvmf_auth_msg m;
	uint16_t st = check_cmd(req);
	int rce;

	if (st)
		return st;
	a = sq->auth;
	rce = nvmf_auth_msg_parse(req->buf, req->len, &m);
	if (rce) {
		to_failure1(a, (uint8_t)rce);
		return 0;
	}
	/* the host gives up (Failure2): it will not use this queue */
	if (m.type == NVMF_AUTH_COMMON && m.id == NVMF_AUTH_FAILURE2) {
		txn_clear(a);
		a->step = AS_NEGOTIATE;
		a->authenticated = false;
		fail_ctrl(sq, "the host sent Failure2");
		return 0;
	}
	if (m.type == NVMF_AUTH_COMMON && m.id == NVMF_AUTH_NEGOTIATE) {
		rce = negotiate(sq, &m);
		if (rce)
			to_failure1(a, (uint8_t)rce);
		else
			a->step = AS_CHALLENGE;
		return 0;
	}
	if (m.tid != a->tid) {
		to_failure1(a, NVMF_AUTH_RCE_INCORRECT_PAYLOAD);
		return 0;
	}
	if (m.id == NVMF_AUTH_REPLY && a->step == AS_REPLY) {
		rce = reply(sq, &m);
		if (rce)
			to_failure1(a, (uint8_t)rce);
		else
			a->step = AS_SUCCESS1;
	} else if (m.id == NVMF_AUTH_SUCCESS2 && a->step == AS_SUCCESS2) {
		done_ok(sq);
	} else {
		GDX_DBG("nvmf", "qid %u: auth message %#x while at %s", sq->qid, m.id,
			step_names[a->step]);
		to_failure1(a, NVMF_AUTH_RCE_INCORRECT_MESSAGE);
	}
	return 0;
}

/* The Challenge, or Failure1 if it cannot be made. */
static int build_challenge(struct nvmf_auth_sq *a, struct nvmf_auth_msg *m, uint8_t *dhv)
{
	int dhlen = 0;

	if (a->dhk) {
		dhlen = nvmf_auth_dh_public(a->dhk, dhv);
		if (dhlen < 0)
			return dhlen;
	}
	m->id = NVMF_AUTH_CHALLENGE;
	m->chal.hl = a->hl;
	m->chal.hash = a->hash;
	m->chal.dh = a->dh;
	m->chal.seq = a->s1;
	m->chal.cval = a->c1;
	m->chal.dhv = dhv;
	m->chal.dhvlen = (uint16_t)dhlen;
	return 0;
}

static int ctrl_response(struct nvmf_sq *sq, uint8_t *out)
{
	struct nvmf_ctrl *c = sq->ctrl;
	struct nvmf_auth_sq *a = sq->auth;
	uint8_t tkey[NVMF_AUTH_HASH_MAX], aug[NVMF_AUTH_HASH_MAX];
	int tlen = nvmf_auth_transform(&c->auth->ctrl_key, c->subsys->nqn, tkey), ret = tlen;

	if (tlen >= 0)
		ret = nvmf_auth_augment(a->hash, a->skey, a->sklen, a->c2, aug);
	if (ret >= 0)
		ret = nvmf_auth_response(a->hash, tkey, (size_t)tlen, aug, a->s2, a->tid, 0, true,
					 c->hostnqn, c->subsys->nqn, out);
	nvmf_auth_wipe(tkey, sizeof(tkey));
	nvmf_auth_wipe(aug, sizeof(aug));
	return ret;
}

uint16_t nvmf_auth_recv(struct nvmf_req *req)
{
	struct nvmf_sq *sq = req->sq;
	struct nvmf_auth_sq *a;
	struct nvmf_auth_msg m;
	uint8_t dhv[NVMF_AUTH_DH_MAX], rval[NVMF_AUTH_HASH_MAX];
	enum auth_step next;
	uint16_t st = check_cmd(req);
	int len;

	if (st)
		return st;
	a = sq->auth;
	memset(&m, 0, sizeof(m));
	m.tid = a->tid;
	switch (a->step) {
	case AS_CHALLENGE:
		if (build_challenge(a, &m, dhv))
			to_failure1(a, NVMF_AUTH_RCE_FAILED);
		next = AS_REPLY;
		break;
	case AS_SUCCESS1:
		m.id = NVMF_AUTH_SUCCESS1;
		m.succ1.hl = a->hl;
		if (a->bidi) {
			if (ctrl_response(sq, rval) < 0) {
				to_failure1(a, NVMF_AUTH_RCE_FAILED);
				break;
			}
			m.succ1.rvalid = 1;
			m.succ1.rval = rval;
		}
		next = a->bidi ? AS_SUCCESS2 : AS_NEGOTIATE;
		break;
	case AS_FAILURE1:
		break;
	default:
		return GDX_NVME_SC_CMD_SEQ_ERROR | DNR;
	}
	if (a->step == AS_FAILURE1) {
		m.id = NVMF_AUTH_FAILURE1;
		m.fail.rc = NVMF_AUTH_RC_FAILED;
		m.fail.rce = a->rce;
		next = AS_NEGOTIATE;
	}
	/* the rest of the host's buffer: zeroes, never an earlier command's bytes */
	memset(req->buf, 0, req->len);
	len = nvmf_auth_msg_build(&m, req->buf, req->len);
	nvmf_auth_wipe(rval, sizeof(rval));
	if (len < 0)
		return GDX_NVME_SC_INVALID_FIELD | DNR;	/* AL too small: the host may ask again */
	if (m.id == NVMF_AUTH_FAILURE1) {
		char why[48];

		snprintf(why, sizeof(why), "sent Failure1 (explanation %#x)", a->rce);
		txn_clear(a);
		a->authenticated = false;
		a->step = AS_NEGOTIATE;
		fail_ctrl(sq, why);
		return 0;
	}
	a->step = next;
	if (next == AS_NEGOTIATE)
		done_ok(sq);
	return 0;
}
