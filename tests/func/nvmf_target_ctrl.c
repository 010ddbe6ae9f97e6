/* SPDX-License-Identifier: MIT */
/*
 * test_nvmf_target's cases on the admin queue: Identify, features, logs and
 * properties; Connect and its errors, a queue of another host's controller,
 * KATO and the first cntlid; the discovery controller; an AEN and keep-alive.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

#include <gdx/nvmf.h>

#include "common/util.h"
#include "nvmf/core/core.h"
#include "nvmf_target_suite.h"

void test_admin(void **state)
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

void test_connect_errors(void **state)
{
	struct host h, io;
	uint64_t res;

	(void)state;
	host_icreq(&h, port, false, false);
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
	host_icreq(&h, port, false, false);
	assert_int_equal(fab_connect(&h, NQN, HOSTNQN, 0, 31, 0xffff, 0, &res), 0);
	h.cntlid = (uint16_t)res;
	host_icreq(&io, port, false, false);
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
void test_connect_hijack(void **state)
{
	static const uint8_t victim_id[16] = { 0x11, 0x22, 0x33, 0x44 };
	static const uint8_t other_id[16] = { 0x55, 0x66 };
	struct host v, io, x;
	uint64_t res;
	uint8_t buf[4096];

	(void)state;
	host_icreq(&v, port, false, false);
	assert_int_equal(fab_connect_id(&v, NQN, HOSTNQN, victim_id, 0, 31, 0xffff, 0, &res), 0);
	v.cntlid = (uint16_t)res;
	assert_int_equal(prop(&v, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | 1, false, NULL), 0);
	assert_int_equal(set_nr_queues(&v, 2), 0);

	host_icreq(&x, port, false, false);
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
	host_icreq(&io, port, false, false);
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
void test_kato_wrap(void **state)
{
	static const uint32_t katos[] = { 0xfffffc19u, 0xfffffc18u, 0xffffffffu, 1 };
	struct gdx_nvme_sqe sqe;
	struct host h;
	uint64_t res;

	(void)state;
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(katos); i++) {
		uint32_t want = katos[i] == 1 ? 1000 : 4294967000u;

		host_icreq(&h, port, false, false);
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
void test_cntlid_start(void **state)
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

void test_discovery(void **state)
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

void test_aen_and_keepalive(void **state)
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
