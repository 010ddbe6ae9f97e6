/* SPDX-License-Identifier: MIT */
/*
 * The host's side of DH-HMAC-CHAP (NVMe Base 2.0, 8.13.5) on one queue,
 * right after its Connect asked for it: Negotiate, Challenge, Reply,
 * Success1 and, when the host holds the controller's secret too, the check of
 * the controller's response and Success2.  Like the Linux host it offers
 * every hash and group and lets the controller choose.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/auth/auth.h"
#include "nvmf/host/host.h"

#define SUB "nvmf-host"
#define RECV_LEN 4096	/* AL: room for any Challenge or Success1 */

static _Atomic uint16_t next_tid;

struct txn {
	struct nh_ctrl *c;
	struct nh_queue *q;
	nh_exec_fn exec;
	uint16_t tid;
	uint8_t hash, dh, hl;
	uint32_t s1, s2;
	struct nvmf_auth_dh *dhk;
	uint16_t sklen;
	uint8_t skey[NVMF_AUTH_DH_MAX];
	uint8_t c2[NVMF_AUTH_HASH_MAX];
	uint8_t *buf;		/* RECV_LEN */
};

static int xfer(struct txn *t, uint8_t fctype, void *buf, size_t len)
{
	struct nh_req r;

	nh_req_init(&r, GDX_NVME_OPC_FABRICS, 0, true);
	r.sqe.fctype = fctype;
	r.sqe.auth.secp = NVMF_AUTH_SECP;
	r.sqe.auth.spsp0 = NVMF_AUTH_SPSP0;
	r.sqe.auth.spsp1 = NVMF_AUTH_SPSP1;
	r.sqe.auth.len = (uint32_t)len;
	r.no_retry = true;
	r.buf = buf;
	r.len = len;
	r.mem = NH_MEM_HOST;
	r.write = fctype == GDX_NVMF_FCTYPE_AUTH_SEND;
	return t->exec(t->q, &r);
}

static int send_msg(struct txn *t, struct nvmf_auth_msg *m)
{
	uint8_t out[NVMF_AUTH_MSG_MAX];
	int len, rc;

	m->tid = t->tid;
	len = nvmf_auth_msg_build(m, out, sizeof(out));
	if (len < 0)
		return len;
	rc = xfer(t, GDX_NVMF_FCTYPE_AUTH_SEND, out, (size_t)len);
	nvmf_auth_wipe(out, (size_t)len);
	return rc;
}

/* Failure2 with explanation rce; the transaction (and the queue) is over either way. */
static int fail2(struct txn *t, uint8_t rce, const char *why)
{
	struct nvmf_auth_msg m = { .id = NVMF_AUTH_FAILURE2 };

	GDX_ERR(SUB, "queue %u: authentication of %s failed: %s", t->q->qid, t->c->p.subnqn, why);
	m.fail.rc = NVMF_AUTH_RC_FAILED;
	m.fail.rce = rce;
	send_msg(t, &m);
	return -EACCES;
}

/* Receives the next message, which must be want (or Failure1: -EACCES). */
static int recv_msg(struct txn *t, uint8_t want, struct nvmf_auth_msg *m)
{
	int rc = xfer(t, GDX_NVMF_FCTYPE_AUTH_RECV, t->buf, RECV_LEN), rce;

	if (rc)
		return rc;
	rce = nvmf_auth_msg_parse(t->buf, RECV_LEN, m);
	if (!rce && m->type == NVMF_AUTH_COMMON && m->id == NVMF_AUTH_FAILURE1) {
		GDX_ERR(SUB, "queue %u: %s refused the authentication (Failure1, reason %#x, "
			"explanation %#x)", t->q->qid, t->c->p.subnqn, m->fail.rc, m->fail.rce);
		return -EACCES;
	}
	if (rce || m->type != NVMF_AUTH_DHCHAP || m->id != want)
		return fail2(t, rce ? (uint8_t)rce : NVMF_AUTH_RCE_INCORRECT_MESSAGE,
			     "unexpected message");
	if (m->tid != t->tid)
		return fail2(t, NVMF_AUTH_RCE_INCORRECT_PAYLOAD, "wrong transaction ID");
	return 0;
}

static int negotiate(struct txn *t)
{
	static const uint8_t hashes[] = { NVMF_AUTH_SHA256, NVMF_AUTH_SHA384, NVMF_AUTH_SHA512 };
	static const uint8_t dhs[] = { NVMF_AUTH_DH_NULL, NVMF_AUTH_FFDHE2048, NVMF_AUTH_FFDHE3072,
				       NVMF_AUTH_FFDHE4096, NVMF_AUTH_FFDHE6144,
				       NVMF_AUTH_FFDHE8192 };
	struct nvmf_auth_msg m = { .id = NVMF_AUTH_NEGOTIATE };

	m.neg.nhash = sizeof(hashes);
	m.neg.ndh = sizeof(dhs);
	memcpy(m.neg.hashes, hashes, sizeof(hashes));
	memcpy(m.neg.dhs, dhs, sizeof(dhs));
	return send_msg(t, &m);
}

/* Answers the Challenge in m with our Reply. */
static int reply(struct txn *t, const struct nvmf_auth_msg *ch)
{
	const struct nh_params *p = &t->c->p;
	struct nvmf_auth_msg m = { .id = NVMF_AUTH_REPLY };
	uint8_t tkey[NVMF_AUTH_HASH_MAX], aug[NVMF_AUTH_HASH_MAX], rval[NVMF_AUTH_HASH_MAX];
	uint8_t dhv[NVMF_AUTH_DH_MAX];
	int dhlen = nvmf_auth_dh_len(ch->chal.dh), tlen, rc;

	t->hash = ch->chal.hash;
	t->dh = ch->chal.dh;
	t->hl = ch->chal.hl;
	t->s1 = ch->chal.seq;
	if (dhlen < 0)
		return fail2(t, NVMF_AUTH_RCE_DHGROUP_UNUSABLE, "unknown DH group");
	if (ch->chal.dhvlen != dhlen)
		return fail2(t, NVMF_AUTH_RCE_INCORRECT_PAYLOAD, "DH value of the wrong size");
	if (dhlen) {
		if (nvmf_auth_dh_new(t->dh, &t->dhk) || nvmf_auth_dh_public(t->dhk, dhv) != dhlen)
			return fail2(t, NVMF_AUTH_RCE_FAILED, "no DH key pair");
		rc = nvmf_auth_dh_derive(t->dhk, ch->chal.dhv, ch->chal.dhvlen, t->skey);
		if (rc < 0)
			return fail2(t, NVMF_AUTH_RCE_INCORRECT_PAYLOAD, "the controller's DH value");
		t->sklen = (uint16_t)rc;
	}
	tlen = nvmf_auth_transform(&p->dhchap_key, p->hostnqn, tkey);
	rc = tlen < 0 ? tlen : nvmf_auth_augment(t->hash, t->skey, t->sklen, ch->chal.cval, aug);
	if (rc >= 0)
		rc = nvmf_auth_response(t->hash, tkey, (size_t)tlen, aug, t->s1, t->tid, 0, false,
					p->hostnqn, p->subnqn, rval);
	nvmf_auth_wipe(tkey, sizeof(tkey));
	nvmf_auth_wipe(aug, sizeof(aug));
	if (rc < 0)
		return fail2(t, NVMF_AUTH_RCE_FAILED, "computing the response");
	m.reply.hl = t->hl;
	m.reply.rval = rval;
	m.reply.dhv = dhv;
	m.reply.dhvlen = (uint16_t)dhlen;
	if (p->has_ctrl_key) {
		/* bidirectional: our own challenge for the controller */
		do {
			if (nvmf_auth_random(&t->s2, sizeof(t->s2)) ||
			    nvmf_auth_random(t->c2, t->hl))
				return fail2(t, NVMF_AUTH_RCE_FAILED, "no random bytes");
		} while (!t->s2);
		m.reply.cvalid = 1;
		m.reply.seq = t->s2;
		m.reply.cval = t->c2;
	}
	rc = send_msg(t, &m);
	nvmf_auth_wipe(rval, sizeof(rval));
	return rc;
}

/* Success1: checks the controller's response when we asked for one, then Success2. */
static int success(struct txn *t, const struct nvmf_auth_msg *s1)
{
	const struct nh_params *p = &t->c->p;
	struct nvmf_auth_msg m = { .id = NVMF_AUTH_SUCCESS2 };
	uint8_t tkey[NVMF_AUTH_HASH_MAX], aug[NVMF_AUTH_HASH_MAX], want[NVMF_AUTH_HASH_MAX];
	int tlen, rc;
	bool ok;

	if (!p->has_ctrl_key)
		return 0;
	if (!s1->succ1.rvalid || s1->succ1.hl != t->hl)
		return fail2(t, NVMF_AUTH_RCE_FAILED, "the controller sent no response");
	tlen = nvmf_auth_transform(&p->dhchap_ctrl_key, p->subnqn, tkey);
	rc = tlen < 0 ? tlen : nvmf_auth_augment(t->hash, t->skey, t->sklen, t->c2, aug);
	if (rc >= 0)
		rc = nvmf_auth_response(t->hash, tkey, (size_t)tlen, aug, t->s2, t->tid, 0, true,
					p->hostnqn, p->subnqn, want);
	ok = rc >= 0 && nvmf_auth_equal(want, s1->succ1.rval, t->hl);
	nvmf_auth_wipe(tkey, sizeof(tkey));
	nvmf_auth_wipe(aug, sizeof(aug));
	nvmf_auth_wipe(want, sizeof(want));
	if (!ok)
		return fail2(t, NVMF_AUTH_RCE_FAILED, "the controller's response is wrong");
	return send_msg(t, &m);
}

int nh_auth_queue(struct nh_ctrl *c, struct nh_queue *q, nh_exec_fn exec)
{
	struct txn t = { .c = c, .q = q, .exec = exec };
	struct nvmf_auth_msg m;
	int rc;

	if (!c->p.has_key) {
		GDX_ERR(SUB, "%s requires authentication: connect with a DH-HMAC-CHAP secret "
			"(--dhchap-secret)", c->p.subnqn);
		return -EACCES;
	}
	t.buf = malloc(RECV_LEN);
	if (!t.buf)
		return -ENOMEM;
	t.tid = atomic_fetch_add(&next_tid, 1);
	rc = negotiate(&t);
	if (!rc)
		rc = recv_msg(&t, NVMF_AUTH_CHALLENGE, &m);
	if (!rc)
		rc = reply(&t, &m);
	if (!rc)
		rc = recv_msg(&t, NVMF_AUTH_SUCCESS1, &m);
	if (!rc)
		rc = success(&t, &m);
	if (!rc)
		GDX_DBG(SUB, "queue %u: authenticated to %s (%s, %s%s)", q->qid, c->p.subnqn,
			nvmf_auth_hash_name(t.hash), nvmf_auth_dh_name(t.dh),
			c->p.has_ctrl_key ? ", bidirectional" : "");
	nvmf_auth_dh_free(t.dhk);
	nvmf_auth_wipe(t.buf, RECV_LEN);
	free(t.buf);
	nvmf_auth_wipe(&t, sizeof(t));
	return rc;
}
