/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the target's receive path and command parser.  Input
 * byte 0 picks the queue: even = a fresh connection that gets the rest of the
 * input as is (ICReq, Connect, admin commands...); odd = an I/O queue already
 * connected (ICReq and Connect done by the harness) of a controller that is
 * enabled, so the rest reaches the NVM command set.  Responses go to
 * /dev/null.  Namespaces: RAM (512 B blocks), RAM (4 KiB), null.
 *
 * A connection the input ends (a fatal PDU, a TermReq) is freed by feed()
 * where the reactor would free it, so a handler that touches it after
 * closing it is a use-after-free ASan sees.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "nvmf/proto/tcp.h"
#include "nvmf/target/tcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NQN "nqn.2024-01.io.gdx:fuzz"
#define HOSTNQN "nqn.2024-01.io.gdx:fuzz-host"

static struct gdx_nvmf_target *tgt;
static struct tcp_conn *admin;
static int devnull;
static uint16_t cntlid;

/* Set-up commands of the harness: the connection must live through them. */
static void feed(struct tcp_conn *c, const void *buf, size_t len)
{
	if (nvmf_tcp_conn_feed(c, buf, len))
		abort();
}

static void cmd(struct tcp_conn *c, struct gdx_nvme_sqe *sqe, const void *data, uint32_t len)
{
	static const struct gdx_tcp_params plain = { .maxh2cdata = 131072 };
	union gdx_tcp_pdu pdu;
	uint32_t hl;

	sqe->flags = GDX_NVME_FLAGS_PSDT_SGL;
	sqe->dptr.type = len ? GDX_NVME_SGL_DATA_BLOCK_OFFSET : GDX_NVME_SGL_TRANSPORT;
	sqe->dptr.length = len;
	hl = gdx_tcp_cmd_init(&pdu, sqe, len, &plain);
	feed(c, &pdu, hl);
	if (len)
		feed(c, data, len);
}

static void icreq_connect(struct tcp_conn *c, uint16_t qid, uint16_t id)
{
	union gdx_tcp_pdu ic;
	struct gdx_nvmf_connect_data d = { .cntlid = id };
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_OPC_FABRICS };

	gdx_tcp_icreq_init(&ic.icreq, false, false, 0);
	feed(c, &ic, sizeof(ic.icreq));
	strcpy(d.subnqn, NQN);
	strcpy(d.hostnqn, HOSTNQN);
	sqe.fctype = GDX_NVMF_FCTYPE_CONNECT;
	sqe.connect.qid = qid;
	sqe.connect.sqsize = 127;
	cmd(c, &sqe, &d, sizeof(d));
}

static void quiet(enum gdx_log_level level, const char *subsys, const char *msg, void *arg)
{
	(void)level;
	(void)subsys;
	(void)msg;
	(void)arg;
}

static void init(void)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_OPC_FABRICS };

	/* every malformed input logs an error: keep them unless asked */
	if (!getenv("GDX_FUZZ_LOG"))
		gdx_log_set_callback(quiet, NULL);
	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (gdx_nvmf_target_create(NULL, &tgt) || gdx_nvmf_target_add_subsys(tgt, NQN, 1) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 1, "ram:4M", 512) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 2, "ram:4M", 4096) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 3, "null:1G", 512))
		abort();
	admin = nvmf_tcp_conn_new_local(tgt, devnull);
	icreq_connect(admin, 0, GDX_NVME_CNTLID_DYNAMIC);
	sqe.fctype = GDX_NVMF_FCTYPE_PROP_SET;
	sqe.prop.ofst = GDX_NVME_REG_CC;
	sqe.prop.value = GDX_NVME_CC_DEFAULT | GDX_NVME_CC_EN;
	cmd(admin, &sqe, NULL, 0);
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_SET_FEATURES,
				     .cdw10 = GDX_NVME_FEAT_NUM_QUEUES, .cdw11 = 0x00030003 };
	cmd(admin, &sqe, NULL, 0);
	/* the only controller (cntlids start at a random point) */
	cntlid = tgt->core.ctrls->cntlid;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tcp_conn *c;

	if (!tgt)
		init();
	if (!size)
		return 0;
	c = nvmf_tcp_conn_new_local(tgt, devnull);
	if (!c)
		abort();
	if (data[0] & 1)
		icreq_connect(c, 1, cntlid);
	/* -1: the input ended the connection, and feed() freed it */
	if (!nvmf_tcp_conn_feed(c, data + 1, size - 1))
		nvmf_tcp_conn_free_local(c);
	return 0;
}
