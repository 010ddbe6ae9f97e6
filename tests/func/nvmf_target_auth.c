/* SPDX-License-Identifier: MIT */
/* test_nvmf_target's DH-HMAC-CHAP case: each message by hand over the raw host. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

#include <gdx/nvmf.h>

#include "common/util.h"
#include "nvmf/auth/auth.h"
#include "nvmf_target_suite.h"

#define AUTH_HOST "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1"
#define AUTH_KEY "DHHC-1:01:3ju8QJG7RJmn4XfbBT8bWRGDQ1k/wnPNutMfaYVfhpXjMm6V:"

static uint16_t auth_cmd(struct host *h, bool send, void *buf, uint32_t len, uint8_t secp)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_OPC_FABRICS };

	sqe.fctype = send ? GDX_NVMF_FCTYPE_AUTH_SEND : GDX_NVMF_FCTYPE_AUTH_RECV;
	sqe.auth.secp = secp;
	sqe.auth.spsp0 = NVMF_AUTH_SPSP0;
	sqe.auth.spsp1 = NVMF_AUTH_SPSP1;
	sqe.auth.len = len;
	if (send)
		return run_cmd(h, &sqe, buf, len, true, NULL, 0, NULL);
	return run_cmd(h, &sqe, NULL, 0, false, buf, len, NULL);
}

static void auth_send(struct host *h, struct nvmf_auth_msg *m)
{
	uint8_t buf[NVMF_AUTH_MSG_MAX];
	int len = nvmf_auth_msg_build(m, buf, sizeof(buf));

	assert_true(len > 0);
	assert_int_equal(auth_cmd(h, true, buf, (uint32_t)len, NVMF_AUTH_SECP), 0);
}

static void auth_recv(struct host *h, uint8_t *buf, struct nvmf_auth_msg *m)
{
	assert_int_equal(auth_cmd(h, false, buf, 1024, NVMF_AUTH_SECP), 0);
	assert_int_equal(nvmf_auth_msg_parse(buf, 1024, m), 0);
}

/* The target closes the connection (its controller failed) within a few ticks. */
static void expect_closed(struct host *h)
{
	uint8_t b;
	ssize_t n;

	do
		n = recv(h->fd, &b, 1, 0);
	while (n < 0 && errno == EINTR);
	assert_int_equal(n, 0);
	close(h->fd);
}

/* Admin Connect as AUTH_HOST: the response asks for authentication, nothing else is served. */
static void auth_admin(struct host *h)
{
	uint8_t id[4096];
	uint64_t res;

	host_icreq(h, port, false, false);
	assert_int_equal(fab_connect(h, NQN, AUTH_HOST, 0, 31, 0xffff, 0, &res), 0);
	assert_true(res & NVMF_AUTHREQ_ATR);
	h->cntlid = (uint16_t)res;
	assert_int_equal(prop(h, false, GDX_NVME_REG_CAP, 0, true, NULL),
			 GDX_NVME_SC_AUTH_REQUIRED | GDX_NVME_ST_DNR);
	assert_int_equal(prop(h, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | 1, false, NULL),
			 GDX_NVME_SC_AUTH_REQUIRED | GDX_NVME_ST_DNR);
	assert_int_equal(identify(h, GDX_NVME_CNS_CTRL, 0, id),
			 GDX_NVME_SC_AUTH_REQUIRED | GDX_NVME_ST_DNR);
}

static void negotiate_raw(struct host *h, uint16_t tid, uint8_t hash, uint8_t dh)
{
	struct nvmf_auth_msg m = { .id = NVMF_AUTH_NEGOTIATE, .tid = tid };

	m.neg.nhash = 1;
	m.neg.hashes[0] = hash;
	m.neg.ndh = 1;
	m.neg.dhs[0] = dh;
	auth_send(h, &m);
}

static void expect_failure1(struct host *h, uint8_t rce)
{
	uint8_t buf[1024];
	struct nvmf_auth_msg m;

	auth_recv(h, buf, &m);
	assert_int_equal(m.type, NVMF_AUTH_COMMON);
	assert_int_equal(m.id, NVMF_AUTH_FAILURE1);
	assert_int_equal(m.fail.rc, NVMF_AUTH_RC_FAILED);
	assert_int_equal(m.fail.rce, rce);
	expect_closed(h);
}

/* A whole successful transaction (SHA-384, no DH) on h, transaction ID tid. */
static void auth_ok(struct host *h, uint16_t tid)
{
	uint8_t buf[1024], rval[NVMF_AUTH_HASH_MAX], tkey[NVMF_AUTH_HASH_MAX];
	struct nvmf_auth_msg m, r = { .id = NVMF_AUTH_REPLY, .tid = tid };
	struct nvmf_auth_key k;
	int tlen;

	negotiate_raw(h, tid, NVMF_AUTH_SHA384, NVMF_AUTH_DH_NULL);
	auth_recv(h, buf, &m);
	assert_int_equal(m.id, NVMF_AUTH_CHALLENGE);
	assert_int_equal(m.tid, tid);
	assert_int_equal(m.chal.hash, NVMF_AUTH_SHA384);
	assert_int_equal(m.chal.hl, 48);
	assert_int_equal(m.chal.dh, NVMF_AUTH_DH_NULL);
	assert_int_equal(m.chal.dhvlen, 0);
	assert_int_not_equal(m.chal.seq, 0);
	assert_int_equal(nvmf_auth_key_parse(AUTH_KEY, &k), 0);
	tlen = nvmf_auth_transform(&k, AUTH_HOST, tkey);
	assert_int_equal(tlen, 32);
	assert_int_equal(nvmf_auth_response(NVMF_AUTH_SHA384, tkey, (size_t)tlen, m.chal.cval,
					    m.chal.seq, tid, 0, false, AUTH_HOST, NQN, rval), 48);
	r.reply.hl = 48;
	r.reply.rval = rval;
	auth_send(h, &r);
	auth_recv(h, buf, &m);
	assert_int_equal(m.id, NVMF_AUTH_SUCCESS1);
	assert_int_equal(m.tid, tid);
	assert_int_equal(m.succ1.rvalid, 0);
	nvmf_auth_key_wipe(&k);
}

void test_auth_wire(void **state)
{
	static const uint8_t junk[16] = { 0x01, 0x07 };
	uint8_t buf[4096], rval[NVMF_AUTH_HASH_MAX];
	struct nvmf_auth_msg m, r;
	struct host h, io;
	uint64_t res, t0;

	(void)state;
	assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, AUTH_HOST, AUTH_KEY, NULL,
						       "hmac(sha384)", "null"), 0);
	/* before a Negotiate there is nothing to receive; a wrong protocol is refused */
	auth_admin(&h);
	assert_int_equal(auth_cmd(&h, false, buf, 1024, NVMF_AUTH_SECP),
			 GDX_NVME_SC_CMD_SEQ_ERROR | GDX_NVME_ST_DNR);
	assert_int_equal(auth_cmd(&h, true, (void *)junk, sizeof(junk), 0xea),
			 GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR);
	/* an unknown message: Failure1 (incorrect message), and the controller is gone */
	assert_int_equal(auth_cmd(&h, true, (void *)junk, sizeof(junk), NVMF_AUTH_SECP), 0);
	expect_failure1(&h, NVMF_AUTH_RCE_INCORRECT_MESSAGE);
	/* a hash the host is not allowed */
	auth_admin(&h);
	negotiate_raw(&h, 7, NVMF_AUTH_SHA256, NVMF_AUTH_DH_NULL);
	expect_failure1(&h, NVMF_AUTH_RCE_HASH_UNUSABLE);
	/* a Reply out of turn */
	auth_admin(&h);
	memset(&m, 0, sizeof(m));
	m.id = NVMF_AUTH_REPLY;
	m.reply.hl = 48;
	m.reply.rval = rval;
	auth_send(&h, &m);
	expect_failure1(&h, NVMF_AUTH_RCE_INCORRECT_MESSAGE);
	/* a wrong response */
	auth_admin(&h);
	negotiate_raw(&h, 9, NVMF_AUTH_SHA384, NVMF_AUTH_DH_NULL);
	auth_recv(&h, buf, &m);
	assert_int_equal(m.id, NVMF_AUTH_CHALLENGE);
	memset(&r, 0, sizeof(r));
	r.id = NVMF_AUTH_REPLY;
	r.tid = 9;
	r.reply.hl = 48;
	memset(rval, 0x5a, sizeof(rval));
	r.reply.rval = rval;
	auth_send(&h, &r);
	expect_failure1(&h, NVMF_AUTH_RCE_FAILED);
	/* a host that never authenticates: closed after nvmf.target.auth_timeout_ms (2 s) */
	auth_admin(&h);
	t0 = gdx_now_ns();
	expect_closed(&h);
	assert_true(gdx_now_ns() - t0 > 1500000000ull && gdx_now_ns() - t0 < 6000000000ull);
	/* the right response: then the queue serves, for longer than the timeout */
	auth_admin(&h);
	auth_ok(&h, 10);
	assert_int_equal(prop(&h, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | 1, false, NULL), 0);
	assert_int_equal(identify(&h, GDX_NVME_CNS_CTRL, 0, buf), 0);
	assert_int_equal(set_nr_queues(&h, 1), 0);
	sleep(3);
	assert_int_equal(identify(&h, GDX_NVME_CNS_CTRL, 0, buf), 0);
	/* an I/O queue must authenticate on its own */
	host_icreq(&io, port, false, false);
	assert_int_equal(fab_connect(&io, NQN, AUTH_HOST, 1, 31, h.cntlid, 0, &res), 0);
	assert_true(res & NVMF_AUTHREQ_ATR);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 1, buf, 512, false),
			 GDX_NVME_SC_AUTH_REQUIRED | GDX_NVME_ST_DNR);
	auth_ok(&io, 11);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 1, buf, 512, false), 0);
	/* re-authentication of the I/O queue: it serves on meanwhile, and after */
	negotiate_raw(&io, 12, NVMF_AUTH_SHA384, NVMF_AUTH_DH_NULL);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 1, buf, 512, false), 0);
	auth_recv(&io, buf, &m);
	assert_int_equal(m.id, NVMF_AUTH_CHALLENGE);
	auth_ok(&io, 13);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 1, buf, 512, false), 0);
	/* ... and on the admin queue */
	auth_ok(&h, 14);
	assert_int_equal(identify(&h, GDX_NVME_CNS_CTRL, 0, buf), 0);
	/* a re-authentication left unfinished fails the controller: both queues close */
	negotiate_raw(&io, 15, NVMF_AUTH_SHA384, NVMF_AUTH_DH_NULL);
	expect_closed(&io);
	expect_closed(&h);
}
