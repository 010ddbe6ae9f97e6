/* SPDX-License-Identifier: MIT */
/*
 * The TCP target on loopback, driven by a minimal host written against the
 * proto codec: connect, enable, identify, I/O with in-capsule data and with
 * R2T, every error status path, discovery, AEN, keep-alive expiry, nvmetcli
 * JSON, and malformed PDUs that must end only their own connection with the
 * right C2HTermReq.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"
#include "common/util.h"

#include <gdx/nvmf.h>

#include "nvmf/auth/auth.h"
#include "nvmf/core/core.h"
#include "nvmf/proto/nvme.h"
#include "nvmf/proto/tcp.h"

#define NQN "nqn.2024-01.io.gdx:func"
#define NQN2 "nqn.2024-01.io.gdx:func-locked"
#define HOSTNQN "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"

static struct gdx_nvmf_target *tgt;
static int port;
static char tmpfile_path[64];

struct host {
	int fd;
	struct gdx_tcp_params p;
	uint16_t cid;
	uint16_t cntlid;
	uint32_t maxh2c;
};

static int tcp_connect(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct timeval tv = { .tv_sec = 10 };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		assert_true(w > 0);
		p += w;
		n -= (size_t)w;
	}
}

/* Returns bytes read before EOF (n if all arrived). */
static size_t recv_all(int fd, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;

	while (got < n) {
		ssize_t r = recv(fd, p + got, n - got, 0);

		/* with SO_RCVTIMEO set, a stop and continue of the process ends a wait in EINTR */
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* Reads one PDU: header into *pdu, data (if any) into data (cap bytes). */
static int recv_pdu(struct host *h, union gdx_tcp_pdu *pdu, void *data, size_t cap)
{
	struct gdx_tcp_pdu_info info;
	struct gdx_tcp_err err;
	uint32_t hl;

	if (recv_all(h->fd, pdu, 8) != 8)
		return -1;
	hl = gdx_tcp_hdr_len(&pdu->ch, GDX_TCP_ROLE_HOST,
			     pdu->ch.type == GDX_TCP_ICRESP ? GDX_TCP_PHASE_IC : GDX_TCP_PHASE_READY,
			     &h->p, &err);
	assert_true(hl > 0);
	assert_int_equal(recv_all(h->fd, pdu->raw + 8, hl - 8), hl - 8);
	assert_int_equal(gdx_tcp_pdu_check(pdu, GDX_TCP_ROLE_HOST,
					   pdu->ch.type == GDX_TCP_ICRESP ? GDX_TCP_PHASE_IC :
									    GDX_TCP_PHASE_READY,
					   &h->p, 0, &info, &err), 0);
	if (info.data_len) {
		uint8_t dg[4];

		assert_true(info.data_len <= cap);
		assert_int_equal(recv_all(h->fd, data, info.data_len), info.data_len);
		if (info.has_ddgst) {
			struct iovec v = { data, info.data_len };
			uint32_t got;

			assert_int_equal(recv_all(h->fd, dg, 4), 4);
			memcpy(&got, dg, 4);
			assert_int_equal(got, gdx_tcp_ddgst(&v, 1));
		}
	}
	return (int)info.data_len;
}

static void host_icreq(struct host *h, bool hd, bool dd)
{
	union gdx_tcp_pdu pdu;

	memset(h, 0, sizeof(*h));
	h->fd = tcp_connect();
	gdx_tcp_icreq_init(&pdu.icreq, hd, dd, 0);
	send_all(h->fd, &pdu, 128);
	assert_int_equal(recv_pdu(h, &pdu, NULL, 0), 0);
	assert_int_equal(pdu.ch.type, GDX_TCP_ICRESP);
	assert_int_equal(pdu.icresp.dgst, (hd ? 1 : 0) | (dd ? 2 : 0));
	assert_int_equal(pdu.icresp.cpda, 0);
	h->p.hdgst = hd;
	h->p.ddgst = dd;
	h->maxh2c = pdu.icresp.maxdata;
	h->p.maxh2cdata = h->maxh2c;
	h->cid = 1;
}

/* Sends a capsule with optional in-capsule data. */
static void send_cmd(struct host *h, struct gdx_nvme_sqe *sqe, const void *data, uint32_t len)
{
	union gdx_tcp_pdu pdu;
	uint32_t hl;

	sqe->flags |= GDX_NVME_FLAGS_PSDT_SGL;
	hl = gdx_tcp_cmd_init(&pdu, sqe, len, &h->p);
	send_all(h->fd, &pdu, hl);
	if (len) {
		send_all(h->fd, data, len);
		if (h->p.ddgst) {
			struct iovec v = { (void *)data, len };
			uint32_t d = gdx_tcp_ddgst(&v, 1);

			send_all(h->fd, &d, 4);
		}
	}
}

/*
 * Runs one command: data out (in-capsule when inline, else via R2T) or in.
 * Returns the status (without phase); *dw0 gets the result.
 */
static uint16_t run_cmd(struct host *h, struct gdx_nvme_sqe *sqe, const void *out, uint32_t olen,
			bool inline_out, void *in, uint32_t ilen, uint64_t *res)
{
	union gdx_tcp_pdu pdu;
	uint32_t got = 0;

	sqe->cid = h->cid++;
	if (olen && inline_out) {
		sqe->dptr.type = GDX_NVME_SGL_DATA_BLOCK_OFFSET;
		sqe->dptr.addr = 0;
		sqe->dptr.length = olen;
		send_cmd(h, sqe, out, olen);
	} else {
		sqe->dptr.type = GDX_NVME_SGL_TRANSPORT;
		sqe->dptr.length = olen ? olen : ilen;
		send_cmd(h, sqe, NULL, 0);
	}
	for (;;) {
		int n = recv_pdu(h, &pdu, (uint8_t *)in + got, ilen - got);

		assert_true(n >= 0);
		if (pdu.ch.type == GDX_TCP_R2T) {
			uint32_t off = pdu.r2t.r2to, left = pdu.r2t.r2tl;

			assert_int_equal(pdu.r2t.cccid, sqe->cid);
			assert_true(off + left <= olen);
			while (left) {
				uint32_t n2 = GDX_TCP_MIN_MAXH2CDATA < h->maxh2c ? h->maxh2c : 4096;
				union gdx_tcp_pdu d;
				uint32_t hl;

				n2 = left < n2 ? left : n2;
				hl = gdx_tcp_data_init(&d, GDX_TCP_H2C_DATA, sqe->cid, pdu.r2t.ttag,
						       off,
						       n2, left == n2 ? GDX_TCP_F_DATA_LAST : 0,
						       &h->p);
				send_all(h->fd, &d, hl);
				send_all(h->fd, (const uint8_t *)out + off, n2);
				if (h->p.ddgst) {
					struct iovec v = { (uint8_t *)out + off, n2 };
					uint32_t dg = gdx_tcp_ddgst(&v, 1);

					send_all(h->fd, &dg, 4);
				}
				off += n2;
				left -= n2;
			}
			continue;
		}
		if (pdu.ch.type == GDX_TCP_C2H_DATA) {
			assert_int_equal(pdu.data.datao, got);
			got += (uint32_t)n;
			if (pdu.ch.flags & GDX_TCP_F_DATA_SUCCESS) {
				assert_int_equal(got, ilen);
				if (res)
					*res = 0;
				return 0;
			}
			continue;
		}
		assert_int_equal(pdu.ch.type, GDX_TCP_RSP);
		assert_int_equal(pdu.rsp.cqe.cid, sqe->cid);
		if (res)
			*res = pdu.rsp.cqe.result;
		if (!(pdu.rsp.cqe.status >> 1))
			assert_int_equal(got, ilen);
		return pdu.rsp.cqe.status >> 1;
	}
}

/* Connect with host ID hostid (NULL: all zeroes). */
static uint16_t fab_connect_id(struct host *h, const char *subnqn, const char *hostnqn,
			       const uint8_t *hostid, uint16_t qid, uint16_t sqsize,
			       uint16_t cntlid, uint32_t kato, uint64_t *res)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_OPC_FABRICS };
	struct gdx_nvmf_connect_data d;

	memset(&d, 0, sizeof(d));
	if (hostid)
		memcpy(d.hostid, hostid, sizeof(d.hostid));
	d.cntlid = cntlid;
	snprintf(d.subnqn, sizeof(d.subnqn), "%s", subnqn);
	snprintf(d.hostnqn, sizeof(d.hostnqn), "%s", hostnqn);
	sqe.fctype = GDX_NVMF_FCTYPE_CONNECT;
	sqe.connect.qid = qid;
	sqe.connect.sqsize = sqsize;
	sqe.connect.kato = kato;
	return run_cmd(h, &sqe, &d, sizeof(d), true, NULL, 0, res);
}

static uint16_t fab_connect(struct host *h, const char *subnqn, const char *hostnqn, uint16_t qid,
			    uint16_t sqsize, uint16_t cntlid, uint32_t kato, uint64_t *res)
{
	return fab_connect_id(h, subnqn, hostnqn, NULL, qid, sqsize, cntlid, kato, res);
}

static uint16_t prop(struct host *h, bool set, uint32_t ofst, uint64_t v, bool eight,
		     uint64_t *res)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_OPC_FABRICS };

	sqe.fctype = set ? GDX_NVMF_FCTYPE_PROP_SET : GDX_NVMF_FCTYPE_PROP_GET;
	sqe.prop.attrib = eight;
	sqe.prop.ofst = ofst;
	sqe.prop.value = v;
	return run_cmd(h, &sqe, NULL, 0, false, NULL, 0, res);
}

/* ICReq, admin Connect, CC.EN=1. */
static void admin_up(struct host *h, const char *nqn, bool hd, bool dd, uint32_t kato)
{
	uint64_t res;

	host_icreq(h, hd, dd);
	assert_int_equal(fab_connect(h, nqn, HOSTNQN, 0, 31, 0xffff, kato, &res), 0);
	h->cntlid = (uint16_t)res;
	assert_true(h->cntlid >= 1);
	assert_int_equal(prop(h, false, GDX_NVME_REG_CAP, 0, true, &res), 0);
	assert_int_equal(GDX_NVME_CAP_MPSMIN(res), 0);
	assert_true(GDX_NVME_CAP_MQES(res) >= 31);
	assert_int_equal(prop(h, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | 1, false, NULL), 0);
	assert_int_equal(prop(h, false, GDX_NVME_REG_CSTS, 0, false, &res), 0);
	assert_int_equal(res & 3, GDX_NVME_CSTS_RDY);
}

static uint16_t identify(struct host *h, uint8_t cns, uint32_t nsid, void *buf)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_IDENTIFY, .nsid = nsid, .cdw10 = cns };

	return run_cmd(h, &sqe, NULL, 0, false, buf, 4096, NULL);
}

static uint16_t set_nr_queues(struct host *h, uint16_t n)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_SET_FEATURES,
				    .cdw10 = GDX_NVME_FEAT_NUM_QUEUES,
				    .cdw11 = (uint32_t)(n - 1) | (uint32_t)(n - 1) << 16 };

	return run_cmd(h, &sqe, NULL, 0, false, NULL, 0, NULL);
}

static void io_up(struct host *io, const struct host *adm, bool hd, bool dd, uint16_t qid)
{
	host_icreq(io, hd, dd);
	assert_int_equal(fab_connect(io, NQN, HOSTNQN, qid, 127, adm->cntlid, 0, NULL), 0);
}

static uint16_t rw(struct host *h, uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb,
		   void *buf, uint32_t len, bool inline_out)
{
	struct gdx_nvme_sqe sqe = { .opc = opc, .nsid = nsid };

	sqe.cdw10 = (uint32_t)slba;
	sqe.cdw11 = (uint32_t)(slba >> 32);
	sqe.cdw12 = nlb - 1;
	if (opc == GDX_NVME_CMD_READ)
		return run_cmd(h, &sqe, NULL, 0, false, buf, len, NULL);
	return run_cmd(h, &sqe, buf, len, inline_out, NULL, 0, NULL);
}

/* Expects the connection to end with a C2HTermReq carrying fes (and fei unless ~0). */
static void expect_term(int fd, uint16_t fes, uint32_t fei)
{
	uint8_t buf[256];
	size_t n = recv_all(fd, buf, sizeof(buf));
	struct gdx_tcp_term t;

	/* skip any complete PDUs before it (e.g. an ICResp) */
	size_t off = 0;

	while (off + 8 <= n && buf[off] != GDX_TCP_C2H_TERM) {
		uint32_t plen;

		memcpy(&plen, buf + off + 4, 4);
		off += plen;
	}
	assert_true(off + sizeof(t) <= n);
	memcpy(&t, buf + off, sizeof(t));
	assert_int_equal(t.ch.type, GDX_TCP_C2H_TERM);
	assert_int_equal(t.ch.hlen, 24);
	assert_true(t.ch.plen >= 24 && t.ch.plen <= 152);
	assert_int_equal(t.fes, fes);
	if (fei != ~0u)
		assert_int_equal(gdx_tcp_term_fei(&t), fei);
	/* and then EOF */
	assert_int_equal(off + t.ch.plen, n);
}

/* ---- tests --------------------------------------------------------------------- */

static void test_admin(void **state)
{
	struct host h;
	uint8_t buf[4096];
	struct gdx_nvme_id_ctrl *id = (void *)buf;
	struct gdx_nvme_id_ns *ns = (void *)buf;
	uint64_t res;

	(void)state;
	admin_up(&h, NQN, false, false, 5000);
	assert_int_equal(identify(&h, GDX_NVME_CNS_CTRL, 0, buf), 0);
	assert_int_equal(id->cntlid, h.cntlid);
	assert_int_equal(id->cntrltype, GDX_NVME_CNTRLTYPE_IO);
	assert_string_equal(id->subnqn, NQN);
	assert_true(id->kas != 0);
	assert_true(id->ioccsz >= 4);
	assert_int_equal(id->iorcsz, 1);
	assert_int_equal(id->icdoff, 0);
	assert_true(id->sgls & 3);
	assert_true(id->maxcmd != 0);
	assert_int_equal(id->cmic & 0x08, 0);
	assert_int_equal(id->ver, GDX_NVME_VS(1, 3, 0));

	assert_int_equal(identify(&h, GDX_NVME_CNS_NS, 1, buf), 0);
	assert_int_equal(ns->nsze, (8u << 20) / 512);
	assert_int_equal(ns->ncap, ns->nsze);
	assert_int_equal(ns->lbaf[0].ds, 9);
	uint8_t nguid1[16];

	memcpy(nguid1, ns->nguid, 16);
	assert_int_equal(identify(&h, GDX_NVME_CNS_NS, 2, buf), 0);
	assert_int_equal(ns->lbaf[0].ds, 12);
	assert_memory_not_equal(nguid1, ns->nguid, 16);
	/* inactive NSID: zeroes; broadcast NSID: invalid */
	assert_int_equal(identify(&h, GDX_NVME_CNS_NS, 77, buf), 0);
	assert_int_equal(ns->nsze, 0);
	assert_int_equal(identify(&h, GDX_NVME_CNS_NS, 0xffffffff, buf),
			 GDX_NVME_SC_INVALID_NS | GDX_NVME_ST_DNR);

	uint32_t *list = (void *)buf;

	assert_int_equal(identify(&h, GDX_NVME_CNS_NS_ACTIVE_LIST, 0, buf), 0);
	assert_int_equal(list[0], 1);
	assert_int_equal(list[1], 2);
	assert_int_equal(list[2], 3);
	assert_int_equal(list[3], 0);
	assert_int_equal(identify(&h, GDX_NVME_CNS_NS_ACTIVE_LIST, 1, buf), 0);
	assert_int_equal(list[0], 2);

	assert_int_equal(identify(&h, GDX_NVME_CNS_NS_DESC_LIST, 1, buf), 0);
	assert_int_equal(buf[0], GDX_NVME_NIDT_EUI64);
	assert_int_equal(buf[1], 8);
	assert_int_equal(buf[12], GDX_NVME_NIDT_NGUID);
	assert_memory_equal(buf + 16, nguid1, 16);
	assert_int_equal(identify(&h, GDX_NVME_CNS_NS_DESC_LIST, 9, buf),
			 GDX_NVME_SC_INVALID_NS | GDX_NVME_ST_DNR);
	assert_int_equal(identify(&h, 0x99, 0, buf), GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR);

	/* features */
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_SET_FEATURES,
				    .cdw10 = GDX_NVME_FEAT_NUM_QUEUES, .cdw11 = 0x00070007 };

	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, &res), 0);
	assert_int_equal(res & 0xffffffff, 0x00070007);
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_GET_FEATURES,
				     .cdw10 = GDX_NVME_FEAT_KATO };
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, &res), 0);
	assert_int_equal(res & 0xffffffff, 5000);
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_GET_FEATURES, .cdw10 = 0x77 };
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, NULL),
			 GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR);
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_KEEP_ALIVE };
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	sqe = (struct gdx_nvme_sqe){ .opc = 0x55 };
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, NULL),
			 GDX_NVME_SC_INVALID_OPCODE | GDX_NVME_ST_DNR);
	/* authentication is refused cleanly */
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_OPC_FABRICS };
	sqe.fctype = GDX_NVMF_FCTYPE_AUTH_SEND;
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, NULL),
			 GDX_NVME_SC_INVALID_OPCODE | GDX_NVME_ST_DNR);

	/* logs: SMART (512 B), error log (newest first), unknown LID */
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_GET_LOG_PAGE, .nsid = 0xffffffff,
				     .cdw10 = GDX_NVME_LOG_SMART | (127u << 16) };
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, buf, 512, NULL), 0);
	assert_int_equal(((struct gdx_nvme_smart_log *)buf)->avail_spare, 100);
	sqe.cdw10 = GDX_NVME_LOG_ERROR | (15u << 16);
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, buf, 64, NULL), 0);
	struct gdx_nvme_err_log *el = (void *)buf;

	assert_true(el->error_count >= 3);
	assert_int_equal(el->status_field >> 1, GDX_NVME_SC_INVALID_OPCODE | GDX_NVME_ST_DNR);
	sqe.cdw10 = 0x42 | (15u << 16);
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, buf, 64, NULL),
			 GDX_NVME_SC_INVALID_LOG_PAGE | GDX_NVME_ST_DNR);
	/* transfer length must match NUMD */
	sqe.cdw10 = GDX_NVME_LOG_SMART | (127u << 16);
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, buf, 256, NULL),
			 GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR);

	/* properties: unknown offset; CC shutdown reports SHST complete at once */
	assert_int_equal(prop(&h, false, 0x40, 0, false, NULL),
			 GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR);
	assert_int_equal(prop(&h, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | 1 | (1u << 14),
			      false, NULL), 0);
	assert_int_equal(prop(&h, false, GDX_NVME_REG_CSTS, 0, false, &res), 0);
	assert_int_equal(res & GDX_NVME_CSTS_SHST_MASK, GDX_NVME_CSTS_SHST_CMPLT);
	close(h.fd);
}

static void test_connect_errors(void **state)
{
	struct host h, io;
	uint64_t res;

	(void)state;
	host_icreq(&h, false, false);
	/* anything but Connect first */
	assert_int_equal(prop(&h, false, GDX_NVME_REG_CAP, 0, true, NULL),
			 GDX_NVME_SC_INVALID_OPCODE | GDX_NVME_ST_DNR);
	assert_int_equal(fab_connect(&h, "nqn.2024-01.io.gdx:nope", HOSTNQN, 0, 31, 0xffff, 0,
				     &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	assert_int_equal(res & 0xffffffff, GDX_NVMF_IATTR_DATA | 256);
	assert_int_equal(fab_connect(&h, NQN2, HOSTNQN, 0, 31, 0xffff, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_HOST | GDX_NVME_ST_DNR);
	assert_int_equal(res & 0xffffffff, GDX_NVMF_IATTR_DATA | 512);
	assert_int_equal(fab_connect(&h, NQN, HOSTNQN, 0, 0, 0xffff, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	assert_int_equal(res & 0xffffffff, 44);
	assert_int_equal(fab_connect(&h, NQN, HOSTNQN, 0, 31, 5, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	/* the allowed host gets in; a second Connect on the queue does not */
	assert_int_equal(fab_connect(&h, NQN2, "nqn.2024-01.io.gdx:friend", 0, 31, 0xffff, 0,
				     &res), 0);
	assert_int_equal(fab_connect(&h, NQN2, "nqn.2024-01.io.gdx:friend", 0, 31, 0xffff, 0,
				     &res), GDX_NVME_SC_CMD_SEQ_ERROR | GDX_NVME_ST_DNR);
	close(h.fd);

	/* I/O queue: before the controller is enabled, unknown cntlid, qid over the limit */
	host_icreq(&h, false, false);
	assert_int_equal(fab_connect(&h, NQN, HOSTNQN, 0, 31, 0xffff, 0, &res), 0);
	h.cntlid = (uint16_t)res;
	host_icreq(&io, false, false);
	assert_int_equal(fab_connect(&io, NQN, HOSTNQN, 1, 127, h.cntlid, 0, &res),
			 GDX_NVME_SC_CMD_SEQ_ERROR | GDX_NVME_ST_DNR);
	assert_int_equal(prop(&h, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | 1, false, NULL), 0);
	assert_int_equal(set_nr_queues(&h, 2), 0);
	assert_int_equal(fab_connect(&io, NQN, HOSTNQN, 1, 127, h.cntlid + 100, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	assert_int_equal(res & 0xffffffff, GDX_NVMF_IATTR_DATA | 16);
	assert_int_equal(fab_connect(&io, NQN, HOSTNQN, 3, 127, h.cntlid, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	assert_int_equal(fab_connect(&io, NQN, HOSTNQN, 1, 1023, h.cntlid, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	assert_int_equal(fab_connect(&io, NQN, HOSTNQN, 1, 255, h.cntlid, 0, &res), 0);
	close(io.fd);
	close(h.fd);
}

/*
 * An I/O-queue Connect must come from the host that made the controller: its
 * host NQN and its host ID.  One that names a victim's controller with the
 * victim's NQN but another host ID (or another NQN) is refused as an unknown
 * cntlid is, and the victim's controller goes on.
 */
static void test_connect_hijack(void **state)
{
	static const uint8_t victim_id[16] = { 0x11, 0x22, 0x33, 0x44 };
	static const uint8_t other_id[16] = { 0x55, 0x66 };
	struct host v, io, x;
	uint64_t res;
	uint8_t buf[4096];

	(void)state;
	host_icreq(&v, false, false);
	assert_int_equal(fab_connect_id(&v, NQN, HOSTNQN, victim_id, 0, 31, 0xffff, 0, &res), 0);
	v.cntlid = (uint16_t)res;
	assert_int_equal(prop(&v, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | 1, false, NULL), 0);
	assert_int_equal(set_nr_queues(&v, 2), 0);

	host_icreq(&x, false, false);
	/* the victim's NQN, another host ID */
	assert_int_equal(fab_connect_id(&x, NQN, HOSTNQN, other_id, 1, 127, v.cntlid, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	assert_int_equal(res & 0xffffffff, GDX_NVMF_IATTR_DATA | 16);
	/* ... no host ID at all */
	assert_int_equal(fab_connect_id(&x, NQN, HOSTNQN, NULL, 1, 127, v.cntlid, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	/* the victim's host ID, another NQN */
	assert_int_equal(fab_connect_id(&x, NQN, "nqn.2024-01.io.gdx:mallory", victim_id, 1, 127,
					v.cntlid, 0, &res),
			 GDX_NVME_SC_CONNECT_INVALID_PARAM | GDX_NVME_ST_DNR);
	close(x.fd);

	/* the victim still gets its queue, and its controller answers */
	host_icreq(&io, false, false);
	assert_int_equal(fab_connect_id(&io, NQN, HOSTNQN, victim_id, 1, 127, v.cntlid, 0, &res),
			 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 8, buf, 4096, false), 0);
	assert_int_equal(identify(&v, GDX_NVME_CNS_CTRL, 0, buf), 0);
	close(io.fd);
	close(v.fd);
}

/*
 * KATO is rounded up to whole seconds: a Connect or Set Features KATO within
 * 999 ms of UINT32_MAX used to wrap to 0 in 32 bits and disable keep-alive.
 */
static void test_kato_wrap(void **state)
{
	static const uint32_t katos[] = { 0xfffffc19u, 0xfffffc18u, 0xffffffffu, 1 };
	struct gdx_nvme_sqe sqe;
	struct host h;
	uint64_t res;

	(void)state;
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(katos); i++) {
		uint32_t want = katos[i] == 1 ? 1000 : 4294967000u;

		host_icreq(&h, false, false);
		assert_int_equal(fab_connect(&h, NQN, HOSTNQN, 0, 31, 0xffff, katos[i], &res), 0);
		assert_int_equal(prop(&h, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | 1, false,
				      NULL), 0);
		sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_GET_FEATURES,
					     .cdw10 = GDX_NVME_FEAT_KATO };
		assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, &res), 0);
		assert_int_equal((uint32_t)res, want);
		sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_SET_FEATURES,
					     .cdw10 = GDX_NVME_FEAT_KATO, .cdw11 = katos[i] };
		assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
		sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_GET_FEATURES,
					     .cdw10 = GDX_NVME_FEAT_KATO };
		assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, &res), 0);
		assert_int_equal((uint32_t)res, want);
		close(h.fd);
	}
}

/* Fresh targets start their controller IDs at random points in 1..0xFFEF. */
static void test_cntlid_start(void **state)
{
	struct nvmf_tgt t[4];
	bool differ = false;

	(void)state;
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(t); i++) {
		assert_int_equal(nvmf_tgt_init(&t[i]), 0);
		assert_in_range(t[i].next_cntlid, 1, GDX_NVME_CNTLID_MAX);
		differ |= t[i].next_cntlid != t[0].next_cntlid;
	}
	/* all four equal by chance: 1 in 65519^3 */
	assert_true(differ);
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(t); i++)
		nvmf_tgt_fini(&t[i]);
}

static void test_io(void **state)
{
	struct host a, io;
	size_t big = 1u << 20;
	uint8_t *w = malloc(big), *r = malloc(big);
	uint8_t dsm[4096] = { 0 };
	struct gdx_nvme_dsm_range *range = (void *)dsm;

	(void)state;
	admin_up(&a, NQN, false, false, 5000);
	assert_int_equal(set_nr_queues(&a, 4), 0);
	io_up(&io, &a, false, false, 1);
	for (unsigned nsid = 1; nsid <= 3; nsid++) {
		uint32_t bs = nsid == 2 ? 4096 : 512;

		/* in-capsule write (4 KiB), R2T write (1 MiB over several H2CData), reads */
		t_fill(w, big, nsid);
		assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, nsid, 8, 4096 / bs, w, 4096, true), 0);
		assert_int_equal(rw(&io, GDX_NVME_CMD_READ, nsid, 8, 4096 / bs, r, 4096, false), 0);
		assert_memory_equal(w, r, 4096);
		assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, nsid, 64, (uint32_t)(big / bs), w,
				    (uint32_t)big, false), 0);
		memset(r, 0, big);
		assert_int_equal(rw(&io, GDX_NVME_CMD_READ, nsid, 64, (uint32_t)(big / bs), r,
				    (uint32_t)big, false), 0);
		assert_memory_equal(w, r, big);

		/* write zeroes, then deallocate: reads return zeroes */
		struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_WRITE_ZEROES, .nsid = nsid,
					    .cdw10 = 64, .cdw12 = 7 };

		assert_int_equal(run_cmd(&io, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
		assert_int_equal(rw(&io, GDX_NVME_CMD_READ, nsid, 64, 8, r, 8 * bs, false), 0);
		for (uint32_t i = 0; i < 8 * bs; i++)
			assert_int_equal(r[i], 0);
		range[0].slba = 8;
		range[0].nlb = 4096 / bs;
		sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_CMD_DSM, .nsid = nsid, .cdw10 = 0,
					     .cdw11 = GDX_NVME_DSM_AD };
		/* a full 4 KiB range buffer, as Linux sends, through R2T */
		assert_int_equal(run_cmd(&io, &sqe, dsm, sizeof(dsm), false, NULL, 0, NULL), 0);
		assert_int_equal(rw(&io, GDX_NVME_CMD_READ, nsid, 8, 4096 / bs, r, 4096, false), 0);
		for (uint32_t i = 0; i < 4096; i++)
			assert_int_equal(r[i], 0);
		sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_CMD_FLUSH, .nsid = nsid };
		assert_int_equal(run_cmd(&io, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	}
	/* statuses */
	uint64_t nsze = (8u << 20) / 512;

	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, nsze - 1, 2, r, 1024, false),
			 GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR);
	/* a failing write gets no R2T: only the response comes */
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 1, nsze, 8, w, 4096 * 2, false),
			 GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR);
	/* in-capsule data the command does not announce is consumed, then failed */
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 1, 0, 8, w, 512, true),
			 GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 9, 0, 1, r, 512, false),
			 GDX_NVME_SC_INVALID_NS | GDX_NVME_ST_DNR);
	assert_int_equal(rw(&io, 0x7e, 1, 0, 1, r, 0, false),
			 GDX_NVME_SC_INVALID_OPCODE | GDX_NVME_ST_DNR);
	range[0].slba = nsze;
	range[0].nlb = 1;
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_DSM, .nsid = 1, .cdw11 = GDX_NVME_DSM_AD };

	assert_int_equal(run_cmd(&io, &sqe, dsm, 16, true, NULL, 0, NULL),
			 GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR);
	/* the connection still works after all that */
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 1, r, 512, false), 0);
	close(io.fd);
	close(a.fd);
	free(w);
	free(r);
}

static void test_digests(void **state)
{
	struct host a, io;
	uint8_t w[65536], r[65536];

	(void)state;
	admin_up(&a, NQN, true, true, 5000);
	assert_int_equal(set_nr_queues(&a, 1), 0);
	io_up(&io, &a, true, true, 1);
	t_fill(w, sizeof(w), 7);
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 3, 0, 8, w, 4096, true), 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 3, 8, 128, w, sizeof(w), false), 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 3, 8, 128, r, sizeof(r), false), 0);
	assert_memory_equal(w, r, sizeof(w));
	/* a large read from RAM leaves by splice; its data digest must still match */
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 1, 0, 128, w, sizeof(w), false), 0);
	memset(r, 0, sizeof(r));
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 128, r, sizeof(r), false), 0);
	assert_memory_equal(w, r, sizeof(w));
	/* never-written RAM reads as zeroes: they leave from the reactor's own zeroed pages */
	memset(r, 0xee, sizeof(r));
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 8192, 128, r, sizeof(r), false), 0);
	for (size_t i = 0; i < sizeof(r); i++)
		assert_int_equal(r[i], 0);
	/* half written, half not: copied */
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 1, 9216, 64, w, sizeof(w) / 2, false), 0);
	memset(r, 0xee, sizeof(r));
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 9216, 128, r, sizeof(r), false), 0);
	assert_memory_equal(w, r, sizeof(w) / 2);
	for (size_t i = sizeof(w) / 2; i < sizeof(r); i++)
		assert_int_equal(r[i], 0);

	/* a bad data digest fails the command (transient) and the queue goes on */
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_WRITE, .nsid = 3, .cid = 900, .cdw12 = 0,
				    .flags = GDX_NVME_FLAGS_PSDT_SGL };
	union gdx_tcp_pdu pdu;
	uint32_t bad = 0x12345678;

	sqe.dptr.type = GDX_NVME_SGL_DATA_BLOCK_OFFSET;
	sqe.dptr.length = 512;
	send_all(io.fd, &pdu, gdx_tcp_cmd_init(&pdu, &sqe, 512, &io.p));
	send_all(io.fd, w, 512);
	send_all(io.fd, &bad, 4);
	assert_int_equal(recv_pdu(&io, &pdu, NULL, 0), 0);
	assert_int_equal(pdu.rsp.cqe.cid, 900);
	assert_int_equal(pdu.rsp.cqe.status >> 1, GDX_NVME_SC_TRANSIENT_TR_ERR);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 3, 8, 1, r, 512, false), 0);

	/* a bad header digest is fatal to the connection: FES 3 */
	gdx_tcp_cmd_init(&pdu, &sqe, 0, &io.p);
	pdu.raw[72] ^= 1;
	send_all(io.fd, &pdu, 76);
	expect_term(io.fd, GDX_TCP_FES_HDGST, 72);
	close(io.fd);
	close(a.fd);
}

static void bad_pdu(const void *buf, size_t len, bool icreq_first, uint16_t fes, uint32_t fei)
{
	int fd = tcp_connect();

	if (icreq_first) {
		union gdx_tcp_pdu ic;

		gdx_tcp_icreq_init(&ic.icreq, false, false, 0);
		send_all(fd, &ic, 128);
	}
	send_all(fd, buf, len);
	expect_term(fd, fes, fei);
	close(fd);
}

static void test_malformed(void **state)
{
	union gdx_tcp_pdu p;
	struct gdx_tcp_params plain = { .maxh2cdata = 131072 };
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_KEEP_ALIVE };
	struct host survivor;
	uint8_t big[1024] = { 0 };

	(void)state;
	/* a healthy connection that must outlive every bad one */
	admin_up(&survivor, NQN, false, false, 30000);

	/* garbage before ICReq */
	memset(big, 0x41, sizeof(big));
	bad_pdu(big, 64, false, GDX_TCP_FES_INVALID_HEADER, 0);
	/* a command before ICReq */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	bad_pdu(&p, 72, false, GDX_TCP_FES_PDU_SEQ, 0);
	/* oversized ICReq */
	gdx_tcp_icreq_init(&p.icreq, false, false, 0);
	p.ch.plen = 4096;
	bad_pdu(&p, 128, false, GDX_TCP_FES_INVALID_HEADER, 4);
	/* wrong hlen */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	p.ch.hlen = 64;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 2);
	/* wrong pdo */
	gdx_tcp_cmd_init(&p, &sqe, 16, &plain);
	p.ch.pdo = 8;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 3);
	/* plen shorter than the header */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	p.ch.plen = 30;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 4);
	/* unknown PDU type */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	p.ch.type = 0x0e;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 0);
	/* a second ICReq */
	gdx_tcp_icreq_init(&p.icreq, false, false, 0);
	bad_pdu(&p, 128, true, GDX_TCP_FES_PDU_SEQ, 0);
	/* H2CData without an R2T */
	gdx_tcp_data_init(&p, GDX_TCP_H2C_DATA, 1, 0, 0, 512, GDX_TCP_F_DATA_LAST, &plain);
	memcpy(big, &p, 24);
	bad_pdu(big, 24 + 512, true, GDX_TCP_FES_INVALID_HEADER, 10);
	/* in-capsule data beyond what the target takes */
	gdx_tcp_cmd_init(&p, &sqe, 1u << 20, &plain);
	bad_pdu(&p, 72, true, GDX_TCP_FES_DATA_LIMIT, 4);
	/* a digest flag that was not negotiated */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	p.ch.flags = GDX_TCP_F_HDGST;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 1);

	/* H2CData beyond the command's data, after a real R2T */
	{
		struct host a, io;
		struct gdx_nvme_sqe wr = { .opc = GDX_NVME_CMD_WRITE, .nsid = 1, .cid = 5,
					   .cdw12 = 0, .flags = GDX_NVME_FLAGS_PSDT_SGL };

		admin_up(&a, NQN, false, false, 5000);
		assert_int_equal(set_nr_queues(&a, 1), 0);
		io_up(&io, &a, false, false, 1);
		wr.dptr.type = GDX_NVME_SGL_TRANSPORT;
		wr.dptr.length = 512;
		send_all(io.fd, &p, gdx_tcp_cmd_init(&p, &wr, 0, &plain));
		assert_int_equal(recv_pdu(&io, &p, NULL, 0), 0);
		assert_int_equal(p.ch.type, GDX_TCP_R2T);
		assert_int_equal(p.r2t.r2tl, 512);
		uint16_t ttag = p.r2t.ttag;

		gdx_tcp_data_init(&p, GDX_TCP_H2C_DATA, 5, ttag, 256, 512, 0, &plain);
		send_all(io.fd, &p, 24);
		send_all(io.fd, big, 512);
		expect_term(io.fd, GDX_TCP_FES_DATA_RANGE, ~0u);
		close(io.fd);
		close(a.fd);
	}

	/* the survivor still answers */
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_KEEP_ALIVE };
	assert_int_equal(run_cmd(&survivor, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	close(survivor.fd);
}

/* Sends H2CTermReq (FES 1) and a keep-alive after it in the same segment. */
static void send_host_term(struct host *h)
{
	struct gdx_tcp_params plain = { .maxh2cdata = 131072 };
	struct gdx_nvme_sqe ka = { .opc = GDX_NVME_ADM_KEEP_ALIVE, .cid = 99,
				   .flags = GDX_NVME_FLAGS_PSDT_SGL };
	uint8_t buf[24 + 72] = { 0 };
	struct gdx_tcp_term *t = (void *)buf;
	union gdx_tcp_pdu cmd;
	char c;

	t->ch.type = GDX_TCP_H2C_TERM;
	t->ch.hlen = 24;
	t->ch.plen = 24;
	t->fes = GDX_TCP_FES_INVALID_HEADER;
	/* bytes after the TermReq: the receive loop must stop at it, with the
	 * connection still valid to look at */
	gdx_tcp_cmd_init(&cmd, &ka, 0, &plain);
	memcpy(buf + 24, &cmd, 72);
	send_all(h->fd, buf, sizeof(buf));
	/* the target closes without an answer */
	assert_int_equal(recv(h->fd, &c, 1, 0), 0);
	close(h->fd);
}

/*
 * A host's H2CTermReq ends its connection (the kernel host and gdx's send it
 * on protocol errors): before Connect, on an admin queue, on an I/O queue.
 * The connection used to be freed inside the handler while the receive loop
 * still read it (ASan: heap-use-after-free in rx_consume).
 */
static void test_host_term(void **state)
{
	struct host survivor, h, a, io;
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_KEEP_ALIVE };

	(void)state;
	admin_up(&survivor, NQN, false, false, 30000);
	for (int i = 0; i < 3; i++) {
		host_icreq(&h, false, false);
		send_host_term(&h);
		admin_up(&h, NQN, false, false, 5000);
		send_host_term(&h);
		admin_up(&a, NQN, false, false, 5000);
		assert_int_equal(set_nr_queues(&a, 1), 0);
		io_up(&io, &a, false, false, 1);
		send_host_term(&io);
		/* the controller lives on: the queue can be connected again */
		io_up(&io, &a, false, false, 1);
		close(io.fd);
		close(a.fd);
	}
	assert_int_equal(run_cmd(&survivor, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	close(survivor.fd);
}

static void test_discovery(void **state)
{
	struct host h;
	uint8_t buf[8192];
	struct gdx_nvmf_disc_hdr *hdr = (void *)buf;
	struct gdx_nvmf_disc_entry *e = (void *)(buf + 1024);
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_GET_LOG_PAGE,
				    .cdw10 = GDX_NVME_LOG_DISC | (4u << 16) };
	uint64_t gen;

	(void)state;
	admin_up(&h, GDX_NVME_DISC_NQN, false, false, 0);
	assert_int_equal(identify(&h, GDX_NVME_CNS_CTRL, 0, buf), 0);
	assert_int_equal(((struct gdx_nvme_id_ctrl *)buf)->cntrltype, GDX_NVME_CNTRLTYPE_DISC);
	assert_string_equal(((struct gdx_nvme_id_ctrl *)buf)->subnqn, GDX_NVME_DISC_NQN);
	/* the 20-byte header read nvme-cli does first */
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, buf, 20, NULL), 0);
	gen = hdr->genctr;
	/* this host may reach NQN but not NQN2: one record */
	assert_int_equal(hdr->numrec, 1);
	sqe.cdw10 = GDX_NVME_LOG_DISC | (((2048 / 4) - 1) << 16);
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, buf, 2048, NULL), 0);
	assert_int_equal(hdr->genctr, gen);
	assert_int_equal(e->trtype, GDX_NVMF_TRTYPE_TCP);
	assert_int_equal(e->subtype, GDX_NVMF_SUBTYPE_NVME);
	assert_string_equal(e->subnqn, NQN);
	assert_string_equal(e->traddr, "127.0.0.1");
	assert_int_equal(atoi(e->trsvcid), port);
	/* window at LPO 1024 */
	sqe.cdw10 = GDX_NVME_LOG_DISC | (((1024 / 4) - 1) << 16);
	sqe.cdw12 = 1024;
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, buf, 1024, NULL), 0);
	assert_string_equal(((struct gdx_nvmf_disc_entry *)buf)->subnqn, NQN);
	/* I/O commands and other logs are not for a discovery controller */
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_GET_LOG_PAGE,
				     .cdw10 = GDX_NVME_LOG_SMART | (127u << 16) };
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, buf, 512, NULL),
			 GDX_NVME_SC_INVALID_LOG_PAGE | GDX_NVME_ST_DNR);
	assert_int_equal(identify(&h, GDX_NVME_CNS_NS, 1, buf),
			 GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR);
	close(h.fd);
}

static void test_aen_and_keepalive(void **state)
{
	struct host h;
	union gdx_tcp_pdu pdu;
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_SET_FEATURES,
				    .cdw10 = GDX_NVME_FEAT_ASYNC_EVENT,
				    .cdw11 = GDX_NVME_OAES_NS_ATTR };
	uint32_t list[1024];
	struct pollfd pfd;

	(void)state;
	admin_up(&h, NQN, false, false, 1000);
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	/* park an AER, add a namespace: the AER completes with "NS changed" */
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_ASYNC_EVENT, .cid = 31,
				     .flags = GDX_NVME_FLAGS_PSDT_SGL };
	sqe.dptr.type = GDX_NVME_SGL_TRANSPORT;
	send_cmd(&h, &sqe, NULL, 0);
	assert_int_equal(gdx_nvmf_target_add_ns(tgt, NQN, 4, "ram:1M", 512), 0);
	assert_int_equal(recv_pdu(&h, &pdu, NULL, 0), 0);
	assert_int_equal(pdu.rsp.cqe.cid, 31);
	assert_int_equal(pdu.rsp.cqe.status, 0);
	assert_int_equal(pdu.rsp.cqe.dw0, 0x00040002);
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_GET_LOG_PAGE,
				     .cdw10 = GDX_NVME_LOG_CHANGED_NS | (1023u << 16) };
	assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, list, 4096, NULL), 0);
	assert_int_equal(list[0], 4);
	assert_int_equal(list[1], 0);

	/* traffic keeps it alive (TBKAS): commands, no Keep Alive, for 1.75 x (KATO + KAS) */
	for (int i = 0; i < 7; i++) {
		usleep(500000);
		sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_GET_FEATURES,
					     .cdw10 = GDX_NVME_FEAT_KATO };
		assert_int_equal(run_cmd(&h, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	}
	/* no keep-alive for KATO (1 s) + KAS: the controller is torn down */
	pfd = (struct pollfd){ .fd = h.fd, .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 6000), 1);
	char c;

	assert_int_equal(recv(h.fd, &c, 1, 0), 0);
	close(h.fd);
}

static void test_json(void **state)
{
	char cfg[128], img[128];
	struct gdx_nvmf_target *t2;
	FILE *f;
	int fd;

	(void)state;
	snprintf(cfg, sizeof(cfg), "/tmp/gdx-nvmf-cfg-%d.json", getpid());
	snprintf(img, sizeof(img), "/tmp/gdx-nvmf-img-%d", getpid());
	fd = open(img, O_CREAT | O_RDWR | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	close(fd);
	f = fopen(cfg, "w");
	assert_non_null(f);
	/* as nvmetcli save writes it (abridged) */
	fprintf(f,
		"{\"hosts\": [{\"nqn\": \"nqn.2024-01.io.gdx:h1\"}],\n"
		" \"ports\": [{\"addr\": {\"adrfam\": \"ipv4\", \"traddr\": \"127.0.0.1\",\n"
		"   \"treq\": \"not specified\", \"trsvcid\": \"0\", \"trtype\": \"tcp\"},\n"
		"   \"portid\": 1, \"referrals\": [], \"subsystems\": [\"nqn.2024-01.io.gdx:j\"]},\n"
		"  {\"addr\": {\"trtype\": \"fc\", \"traddr\": \"nn-0x1:pn-0x2\", \"trsvcid\": \"none\"},\n"
		"   \"portid\": 2, \"subsystems\": []}],\n"
		" \"subsystems\": [{\"allowed_hosts\": [\"nqn.2024-01.io.gdx:h1\"],\n"
		"   \"attr\": {\"allow_any_host\": \"0\", \"serial\": \"abc123\", \"version\": \"1.3\"},\n"
		"   \"namespaces\": [{\"device\": {\"nguid\": \"00000000-0000-0000-0000-000000000000\",\n"
		"     \"path\": \"%s\", \"uuid\": \"0b7d6a10-5a1e-4c3e-8f62-8b0a9e8c1d11\"},\n"
		"     \"enable\": 1, \"nsid\": 1}, {\"device\": {\"path\": \"ram:1M\"}, \"enable\": 0,\n"
		"     \"nsid\": 2}],\n"
		"   \"nqn\": \"nqn.2024-01.io.gdx:j\"}]}\n",
		img);
	fclose(f);
	assert_int_equal(gdx_nvmf_target_create(NULL, &t2), 0);
	assert_int_equal(gdx_nvmf_target_load_json(t2, cfg), 0);
	assert_int_equal(gdx_nvmf_target_start(t2), 0);
	assert_true(gdx_nvmf_target_bound_port(t2, 1) > 0);
	assert_int_equal(gdx_nvmf_target_bound_port(t2, 2), -ENOENT);
	gdx_nvmf_target_destroy(t2);

	/*
	 * An rdma port loads; on an address no RDMA device has (none here) the
	 * start fails as a whole, and the TCP port it had opened is closed again.
	 */
	f = fopen(cfg, "w");
	fprintf(f, "{\"ports\": [{\"portid\": 1, \"addr\": {\"trtype\": \"tcp\", \"traddr\": "
		   "\"127.0.0.1\", \"trsvcid\": \"0\"}, \"subsystems\": []}, {\"portid\": 2, "
		   "\"addr\": {\"trtype\": \"rdma\", \"traddr\": \"127.0.0.1\", \"trsvcid\": \"0\"}, "
		   "\"subsystems\": []}]}");
	fclose(f);
	assert_int_equal(gdx_nvmf_target_create(NULL, &t2), 0);
	assert_int_equal(gdx_nvmf_target_load_json(t2, cfg), 0);
	assert_true(gdx_nvmf_target_start(t2) < 0);
	assert_int_equal(gdx_nvmf_target_bound_port(t2, 1), -ENOENT);
	assert_int_equal(gdx_nvmf_target_add_port_tr(t2, 3, "fc", "127.0.0.1", "0"),
			 -EPROTONOSUPPORT);
	gdx_nvmf_target_destroy(t2);

	/* broken files are refused with a clear error */
	f = fopen(cfg, "w");
	fprintf(f, "{\"ports\": [{\"portid\": 1, \"addr\": {\"trtype\": \"tcp\"}, "
		   "\"subsystems\": [\"nqn.2024-01.io.gdx:missing\"]}]}");
	fclose(f);
	assert_int_equal(gdx_nvmf_target_create(NULL, &t2), 0);
	assert_int_equal(gdx_nvmf_target_load_json(t2, cfg), GDX_ECONFIG);
	gdx_nvmf_target_destroy(t2);
	f = fopen(cfg, "w");
	fprintf(f, "{\"subsystems\": [");
	fclose(f);
	assert_int_equal(gdx_nvmf_target_create(NULL, &t2), 0);
	assert_int_equal(gdx_nvmf_target_load_json(t2, cfg), GDX_ECONFIG);
	gdx_nvmf_target_destroy(t2);
	unlink(cfg);
	unlink(img);
}

struct stats_reader {
	struct gdx_nvmf_target *t;
	atomic_bool stop;
	unsigned calls, fails;
};

static void *stats_reader_main(void *arg)
{
	struct stats_reader *r = arg;
	FILE *f = fopen("/dev/null", "w");

	while (f && !atomic_load(&r->stop)) {
		r->fails += gdx_nvmf_target_stats_json(r->t, f) != 0;
		r->calls++;
	}
	if (f)
		fclose(f);
	else
		r->fails++;
	return NULL;
}

/*
 * The stats (with every reactor's latency sums) are read while the target
 * stops and starts again: stop frees the reactors the sums are read from.
 * What the reactors counted stays in the sums once they are gone.
 */
static void test_stats_while_stopping(void **state)
{
	struct gdx_nvmf_target_opts o;
	struct stats_reader r[2] = { 0 };
	struct gdx_nvmf_target *t;
	pthread_t th[2];

	(void)state;
	gdx_nvmf_target_opts_init(&o, sizeof(o));
	o.reactors = 16;	/* sums that take a while to add up */
	assert_int_equal(gdx_nvmf_target_create(&o, &t), 0);
	assert_int_equal(gdx_nvmf_target_add_subsys(t, "nqn.2024-01.io.gdx:stats", 1), 0);
	assert_int_equal(gdx_nvmf_target_add_port(t, 1, "127.0.0.1", "0"), 0);
	assert_int_equal(gdx_nvmf_target_start(t), 0);
	for (int i = 0; i < 2; i++) {
		r[i].t = t;
		assert_int_equal(pthread_create(&th[i], NULL, stats_reader_main, &r[i]), 0);
	}
	for (int i = 0; i < 300; i++) {
		gdx_nvmf_target_stop(t);
		assert_int_equal(gdx_nvmf_target_start(t), 0);
	}
	for (int i = 0; i < 2; i++) {
		atomic_store(&r[i].stop, true);
		pthread_join(th[i], NULL);
		assert_true(r[i].calls > 0);
		assert_int_equal(r[i].fails, 0);
	}
	gdx_nvmf_target_destroy(t);
}

/* A loop device over a scratch file, or -1 where loop devices are not available. */
static int loop_attach(const char *file, char *dev, size_t n)
{
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC), nr, lfd = -1, ffd;

	if (ctl < 0)
		return -1;
	nr = ioctl(ctl, LOOP_CTL_GET_FREE);
	close(ctl);
	if (nr < 0)
		return -1;
	snprintf(dev, n, "/dev/loop%d", nr);
	ffd = open(file, O_RDWR | O_CLOEXEC);
	if (ffd >= 0)
		lfd = open(dev, O_RDWR | O_CLOEXEC);
	if (lfd < 0 || ioctl(lfd, LOOP_SET_FD, ffd)) {
		if (lfd >= 0)
			close(lfd);
		if (ffd >= 0)
			close(ffd);
		return -1;
	}
	close(ffd);
	return lfd;
}

static void test_bdev(void **state)
{
	char img[64], dev[32];
	struct host a, io;
	uint8_t w[131072], r[131072];
	int lfd, fd;

	(void)state;
	snprintf(img, sizeof(img), "/tmp/gdx-nvmf-bdev-%d", getpid());
	fd = open(img, O_CREAT | O_RDWR | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4 << 20), 0);
	close(fd);
	lfd = loop_attach(img, dev, sizeof(dev));
	if (lfd < 0) {
		unlink(img);
		skip();
	}
	assert_int_equal(gdx_nvmf_target_add_ns(tgt, NQN, 5, dev, 4096), 0);
	admin_up(&a, NQN, false, false, 5000);
	assert_int_equal(set_nr_queues(&a, 1), 0);
	io_up(&io, &a, false, false, 1);
	t_fill(w, sizeof(w), 5);
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 5, 3, 32, w, sizeof(w), false), 0);
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_FLUSH, .nsid = 5 };

	assert_int_equal(run_cmd(&io, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 5, 3, 32, r, sizeof(r), false), 0);
	assert_memory_equal(w, r, sizeof(w));
	/* the data went through the block device into the file */
	fd = open(img, O_RDONLY);
	assert_int_equal(pread(fd, r, sizeof(r), 3 * 4096), (ssize_t)sizeof(r));
	close(fd);
	assert_memory_equal(w, r, sizeof(r));
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_CMD_WRITE_ZEROES, .nsid = 5, .cdw10 = 3,
				     .cdw12 = 1 };
	assert_int_equal(run_cmd(&io, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 5, 3, 2, r, 8192, false), 0);
	for (unsigned i = 0; i < 8192; i++)
		assert_int_equal(r[i], 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 5, 1024, 1, r, 4096, false),
			 GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR);
	close(io.fd);
	close(a.fd);
	ioctl(lfd, LOOP_CLR_FD, 0);
	close(lfd);
	unlink(img);
}

/* The CPUs reactor 0 of the running target may use (CPU_COUNT 0: not found). */
static cpu_set_t reactor0_cpus(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	cpu_set_t set;

	CPU_ZERO(&set);
	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strcmp(comm, "gdx-nvmf-0\n"))
			assert_int_equal(sched_getaffinity(atoi(e->d_name), sizeof(set), &set), 0);
		fclose(f);
	}
	closedir(d);
	return set;
}

/* QD1 reads until reactor 0 runs on exactly `cpu` (or 5 s pass). */
static bool follow_until(struct host *io, int cpu, unsigned depth)
{
	uint8_t buf[8 * 4096];
	uint64_t end = gdx_now_ns() + 5000000000ull;

	while (gdx_now_ns() < end) {
		cpu_set_t now = reactor0_cpus();

		if (CPU_COUNT(&now) == 1 && CPU_ISSET(cpu, &now))
			return true;
		/* depth commands at once, then their data and responses */
		for (unsigned i = 0; i < depth; i++) {
			struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_READ, .nsid = 1,
						    .cdw10 = i * 8, .cdw12 = 7 };

			sqe.cid = io->cid++;
			sqe.dptr.type = GDX_NVME_SGL_TRANSPORT;
			sqe.dptr.length = 4096;
			send_cmd(io, &sqe, NULL, 0);
		}
		for (unsigned rsps = 0; rsps < depth;) {
			union gdx_tcp_pdu pdu;

			assert_true(recv_pdu(io, &pdu, buf, sizeof(buf)) >= 0);
			if (pdu.ch.type == GDX_TCP_RSP) {
				assert_int_equal(pdu.rsp.cqe.status >> 1, 0);
				rsps++;
			}
		}
	}
	return false;
}

/*
 * --cpus, --follow and polling: bad CPU lists are refused; a following
 * reactor moves to the CPU the host sends from while the host keeps one
 * command in flight, and back home when it keeps several.  Runs last: it
 * replaces the shared target with its own.
 */
static void test_placement(void **state)
{
	static const char *const bad[] = { "", "x", "1-0", "3,", "0,,1", "-1", "100000", "0-",
					   "1 " };
	struct gdx_nvmf_target_opts o;
	struct gdx_nvmf_target *t2 = NULL;
	struct host a, io;
	cpu_set_t mine, one;
	char home[16];
	int x = -1, y = -1;

	(void)state;
	gdx_nvmf_target_opts_init(&o, sizeof(o));
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(bad); i++) {
		o.cpus = bad[i];
		assert_int_equal(gdx_nvmf_target_create(&o, &t2), -EINVAL);
	}
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &mine))
			continue;
		if (x < 0)
			x = c;
		else if (y < 0)
			y = c;
	}
	/* home on a second CPU where there is one; the host side runs on x */
	snprintf(home, sizeof(home), "%d", y >= 0 ? y : x);
	o.cpus = home;
	o.reactors = 1;
	o.follow = 1;
	o.poll_us = 500;
	gdx_nvmf_target_destroy(tgt);
	assert_int_equal(gdx_nvmf_target_create(&o, &tgt), 0);
	assert_int_equal(gdx_nvmf_target_add_subsys(tgt, NQN, 1), 0);
	assert_int_equal(gdx_nvmf_target_add_ns(tgt, NQN, 1, "null:8M", 512), 0);
	assert_int_equal(gdx_nvmf_target_add_port(tgt, 1, "127.0.0.1", "0"), 0);
	assert_int_equal(gdx_nvmf_target_link(tgt, 1, NQN), 0);
	assert_int_equal(gdx_nvmf_target_start(tgt), 0);
	port = gdx_nvmf_target_bound_port(tgt, 1);
	one = reactor0_cpus();
	assert_int_equal(CPU_COUNT(&one), 1);
	assert_true(CPU_ISSET(y >= 0 ? y : x, &one));

	CPU_ZERO(&one);
	CPU_SET(x, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	admin_up(&a, NQN, false, false, 5000);
	assert_int_equal(set_nr_queues(&a, 1), 0);
	io_up(&io, &a, false, false, 1);
	assert_true(follow_until(&io, x, 1));
	if (y >= 0)
		assert_true(follow_until(&io, y, 8));
	assert_int_equal(sched_setaffinity(0, sizeof(mine), &mine), 0);
	close(io.fd);
	close(a.fd);
}

/* ---- DH-HMAC-CHAP on the wire ---------------------------------------------------- */

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

	host_icreq(h, false, false);
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

static void test_auth_wire(void **state)
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
	host_icreq(&io, false, false);
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

static int setup(void **state)
{
	struct gdx_nvmf_target_opts o;
	int fd;

	(void)state;
	snprintf(tmpfile_path, sizeof(tmpfile_path), "/tmp/gdx-nvmf-func-%d", getpid());
	fd = open(tmpfile_path, O_CREAT | O_RDWR | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, 8 << 20))
		return -1;
	close(fd);
	gdx_nvmf_target_opts_init(&o, sizeof(o));
	o.reactors = 2;
	o.maxh2cdata = 65536;
	if (gdx_nvmf_target_create(&o, &tgt) ||
	    gdx_nvmf_target_add_subsys(tgt, NQN, 1) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 1, "ram:8M", 512) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 2, "ram:8M", 4096) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 3, tmpfile_path, 512) ||
	    gdx_nvmf_target_add_subsys(tgt, NQN2, 0) ||
	    gdx_nvmf_target_allow_host(tgt, NQN2, "nqn.2024-01.io.gdx:friend") ||
	    gdx_nvmf_target_add_ns(tgt, NQN2, 1, "null:1G", 512) ||
	    gdx_nvmf_target_add_port(tgt, 1, "127.0.0.1", "0") ||
	    gdx_nvmf_target_link(tgt, 1, NQN) || gdx_nvmf_target_link(tgt, 1, NQN2) ||
	    gdx_nvmf_target_start(tgt))
		return -1;
	port = gdx_nvmf_target_bound_port(tgt, 1);
	return port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	gdx_nvmf_target_destroy(tgt);
	unlink(tmpfile_path);
	return 0;
}

int main(void)
{
	/* test_auth_wire waits this out */
	setenv("GDX_NVMF_TARGET_AUTH_TIMEOUT_MS", "2000", 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_admin),
		cmocka_unit_test(test_connect_errors),
		cmocka_unit_test(test_connect_hijack),
		cmocka_unit_test(test_kato_wrap),
		cmocka_unit_test(test_cntlid_start),
		cmocka_unit_test(test_io),
		cmocka_unit_test(test_digests),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_host_term),
		cmocka_unit_test(test_discovery),
		cmocka_unit_test(test_aen_and_keepalive),
		cmocka_unit_test(test_bdev),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_auth_wire),
		cmocka_unit_test(test_stats_while_stopping),
		cmocka_unit_test(test_placement),	/* last: replaces the target */
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
