/* SPDX-License-Identifier: MIT */
/* The raw NVMe/TCP host of nvmf_raw_host.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

#include "nvmf_raw_host.h"

int tcp_connect_ms(int port, unsigned timeout_ms)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timeval tv = { .tv_sec = timeout_ms / 1000,
			      .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* connect() honours the send timeout */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

int tcp_connect(int port)
{
	int fd = tcp_connect_ms(port, 10000);

	assert_true(fd >= 0);
	return fd;
}

void send_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		assert_true(w > 0);
		p += w;
		n -= (size_t)w;
	}
}

size_t recv_all(int fd, void *buf, size_t n)
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

int recv_pdu(struct host *h, union gdx_tcp_pdu *pdu, void *data, size_t cap)
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

void host_icreq_fd(struct host *h, int fd, bool hd, bool dd)
{
	union gdx_tcp_pdu pdu;

	memset(h, 0, sizeof(*h));
	h->fd = fd;
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

void host_icreq(struct host *h, int port, bool hd, bool dd)
{
	host_icreq_fd(h, tcp_connect(port), hd, dd);
}

void send_cmd(struct host *h, struct gdx_nvme_sqe *sqe, const void *data, uint32_t len)
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

void send_r2t_data(struct host *h, const struct gdx_tcp_r2t *r2t, const void *out)
{
	uint32_t off = r2t->r2to, left = r2t->r2tl;

	while (left) {
		uint32_t n = GDX_TCP_MIN_MAXH2CDATA < h->maxh2c ? h->maxh2c : 4096;
		union gdx_tcp_pdu d;
		uint32_t hl;

		n = left < n ? left : n;
		hl = gdx_tcp_data_init(&d, GDX_TCP_H2C_DATA, r2t->cccid, r2t->ttag, off, n,
				       left == n ? GDX_TCP_F_DATA_LAST : 0, &h->p);
		send_all(h->fd, &d, hl);
		send_all(h->fd, (const uint8_t *)out + off, n);
		if (h->p.ddgst) {
			struct iovec v = { (uint8_t *)out + off, n };
			uint32_t dg = gdx_tcp_ddgst(&v, 1);

			send_all(h->fd, &dg, 4);
		}
		off += n;
		left -= n;
	}
}

uint16_t run_cmd(struct host *h, struct gdx_nvme_sqe *sqe, const void *out, uint32_t olen,
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
			assert_int_equal(pdu.r2t.cccid, sqe->cid);
			assert_true(pdu.r2t.r2to + pdu.r2t.r2tl <= olen);
			send_r2t_data(h, &pdu.r2t, out);
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

uint16_t fab_connect_id(struct host *h, const char *subnqn, const char *hostnqn,
			const uint8_t *hostid, uint16_t qid, uint16_t sqsize, uint16_t cntlid,
			uint32_t kato, uint64_t *res)
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

uint16_t fab_connect(struct host *h, const char *subnqn, const char *hostnqn, uint16_t qid,
		     uint16_t sqsize, uint16_t cntlid, uint32_t kato, uint64_t *res)
{
	return fab_connect_id(h, subnqn, hostnqn, NULL, qid, sqsize, cntlid, kato, res);
}

uint16_t prop(struct host *h, bool set, uint32_t ofst, uint64_t v, bool eight, uint64_t *res)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_OPC_FABRICS };

	sqe.fctype = set ? GDX_NVMF_FCTYPE_PROP_SET : GDX_NVMF_FCTYPE_PROP_GET;
	sqe.prop.attrib = eight;
	sqe.prop.ofst = ofst;
	sqe.prop.value = v;
	return run_cmd(h, &sqe, NULL, 0, false, NULL, 0, res);
}

uint16_t identify(struct host *h, uint8_t cns, uint32_t nsid, void *buf)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_IDENTIFY, .nsid = nsid, .cdw10 = cns };

	return run_cmd(h, &sqe, NULL, 0, false, buf, 4096, NULL);
}

uint16_t set_nr_queues(struct host *h, uint16_t n)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_SET_FEATURES,
				    .cdw10 = GDX_NVME_FEAT_NUM_QUEUES,
				    .cdw11 = (uint32_t)(n - 1) | (uint32_t)(n - 1) << 16 };

	return run_cmd(h, &sqe, NULL, 0, false, NULL, 0, NULL);
}

uint16_t rw(struct host *h, uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb, void *buf,
	    uint32_t len, bool inline_out)
{
	struct gdx_nvme_sqe sqe = { .opc = opc, .nsid = nsid };

	sqe.cdw10 = (uint32_t)slba;
	sqe.cdw11 = (uint32_t)(slba >> 32);
	sqe.cdw12 = nlb - 1;
	if (opc == GDX_NVME_CMD_READ)
		return run_cmd(h, &sqe, NULL, 0, false, buf, len, NULL);
	return run_cmd(h, &sqe, buf, len, inline_out, NULL, 0, NULL);
}

void expect_term(int fd, uint16_t fes, uint32_t fei)
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
