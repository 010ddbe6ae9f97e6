/* SPDX-License-Identifier: MIT */
/* NVMe/TCP PDU codec: encoders round-trip through the validator, and each
 * malformed header is rejected with the FES/FEI a TermReq must carry. */
#include <errno.h>
#include <string.h>

#include "test.h"

#include "common/crc32c.h"
#include "nvmf/proto/nvme.h"
#include "nvmf/proto/tcp.h"

static const struct gdx_tcp_params plain = { .maxh2cdata = 65536 };
static const struct gdx_tcp_params dgst = { .hdgst = true, .ddgst = true, .maxh2cdata = 65536 };

static void test_crc32c(void **state)
{
	(void)state;
	assert_int_equal(gdx_crc32c("123456789", 9), 0xE3069283u);
	struct iovec iov[2] = { { (void *)"1234", 4 }, { (void *)"56789", 5 } };
	assert_int_equal(gdx_tcp_ddgst(iov, 2), 0xE3069283u);
}

static int check(const union gdx_tcp_pdu *pdu, enum gdx_tcp_role role, enum gdx_tcp_phase ph,
		 const struct gdx_tcp_params *p, uint32_t max_data, struct gdx_tcp_pdu_info *info,
		 struct gdx_tcp_err *err)
{
	memset(err, 0, sizeof(*err));
	return gdx_tcp_pdu_check(pdu, role, ph, p, max_data, info, err);
}

static void test_icreq(void **state)
{
	union gdx_tcp_pdu pdu;
	struct gdx_tcp_pdu_info info;
	struct gdx_tcp_err err;

	(void)state;
	assert_int_equal(gdx_tcp_icreq_init(&pdu.icreq, true, false, 0), 128);
	assert_int_equal(pdu.icreq.dgst, GDX_TCP_DGST_HDR);
	assert_int_equal(gdx_tcp_hdr_len(&pdu.ch, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_IC, &plain,
					 &err), 128);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_IC, &plain, 0, &info, &err),
			 0);
	assert_int_equal(info.data_len, 0);

	/* an ICReq after initialization is a sequence error */
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fes, GDX_TCP_FES_PDU_SEQ);

	/* oversized ICReq */
	pdu.ch.plen = 4096;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_IC, &plain, 0, &info, &err),
			 -EPROTO);
	assert_int_equal(err.fes, GDX_TCP_FES_INVALID_HEADER);
	assert_int_equal(err.fei, 4);
	pdu.ch.plen = 128;

	pdu.icreq.pfv = 1;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_IC, &plain, 0, &info, &err),
			 -EPROTO);
	assert_int_equal(err.fes, GDX_TCP_FES_UNSUPPORTED);
	assert_int_equal(err.fei, 8);
	pdu.icreq.pfv = 0;
	pdu.icreq.hpda = 3;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_IC, &plain, 0, &info, &err),
			 -EPROTO);
	assert_int_equal(err.fei, 10);

	/* wrong hlen is caught from the common header alone */
	pdu.icreq.hpda = 0;
	pdu.ch.hlen = 72;
	assert_int_equal(gdx_tcp_hdr_len(&pdu.ch, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_IC, &plain,
					 &err), 0);
	assert_int_equal(err.fes, GDX_TCP_FES_INVALID_HEADER);
	assert_int_equal(err.fei, 2);

	/* an ICReq is not something a host receives */
	pdu.ch.hlen = 128;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_IC, &plain, 0, &info, &err),
			 -EPROTO);
	assert_int_equal(err.fei, 0);
}

static void test_icresp(void **state)
{
	union gdx_tcp_pdu pdu;
	struct gdx_tcp_pdu_info info;
	struct gdx_tcp_err err;

	(void)state;
	gdx_tcp_icresp_init(&pdu.icresp, 3, 131072);
	assert_int_equal(pdu.icresp.dgst, 3);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_IC, &plain, 0, &info, &err),
			 0);
	pdu.icresp.maxdata = 1000;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_IC, &plain, 0, &info, &err),
			 -EPROTO);
	assert_int_equal(err.fei, 12);
}

static void test_cmd_roundtrip(void **state)
{
	union gdx_tcp_pdu pdu;
	struct gdx_tcp_pdu_info info;
	struct gdx_tcp_err err;
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_WRITE, .flags = GDX_NVME_FLAGS_PSDT_SGL,
				    .cid = 0x1234, .nsid = 1 };

	(void)state;
	sqe.dptr.type = GDX_NVME_SGL_DATA_BLOCK_OFFSET;
	sqe.dptr.length = 4096;
	/* without digests */
	assert_int_equal(gdx_tcp_cmd_init(&pdu, &sqe, 4096, &plain), 72);
	assert_int_equal(pdu.ch.pdo, 72);
	assert_int_equal(pdu.ch.plen, 72 + 4096);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 8192, &info,
			       &err), 0);
	assert_int_equal(info.data_len, 4096);
	assert_int_equal(info.data_off, 72);
	assert_false(info.has_ddgst);
	/* over the in-capsule limit: fatal */
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 1024, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fes, GDX_TCP_FES_DATA_LIMIT);

	/* with both digests: the worked example from the Connect capsule */
	assert_int_equal(gdx_tcp_cmd_init(&pdu, &sqe, 1024, &dgst), 76);
	assert_int_equal(pdu.ch.flags, 3);
	assert_int_equal(pdu.ch.pdo, 76);
	assert_int_equal(pdu.ch.plen, 1104);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &dgst, 8192, &info,
			       &err), 0);
	assert_true(info.has_hdgst);
	assert_true(info.has_ddgst);
	assert_int_equal(info.data_len, 1024);

	/* a flipped bit breaks the header digest */
	pdu.cmd.sqe.cdw10 ^= 1;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &dgst, 8192, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fes, GDX_TCP_FES_HDGST);
	pdu.cmd.sqe.cdw10 ^= 1;

	/* digest flags must match the negotiation */
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 8192, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fei, 1);

	/* no data: PDO 0 */
	gdx_tcp_cmd_init(&pdu, &sqe, 0, &plain);
	assert_int_equal(pdu.ch.pdo, 0);
	assert_int_equal(pdu.ch.plen, 72);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), 0);
	assert_int_equal(info.data_len, 0);
	pdu.ch.pdo = 100;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fei, 3);

	/* PDO inside the header */
	gdx_tcp_cmd_init(&pdu, &sqe, 512, &plain);
	pdu.ch.pdo = 64;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 8192, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fei, 3);
	/* PLEN shorter than HLEN */
	pdu.ch.pdo = 0;
	pdu.ch.plen = 40;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 8192, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fei, 4);
	/* a command before ICReq */
	gdx_tcp_cmd_init(&pdu, &sqe, 0, &plain);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_IC, &plain, 0, &info, &err),
			 -EPROTO);
	assert_int_equal(err.fes, GDX_TCP_FES_PDU_SEQ);
}

static void test_data_r2t_rsp(void **state)
{
	union gdx_tcp_pdu pdu;
	struct gdx_tcp_pdu_info info;
	struct gdx_tcp_err err;
	struct gdx_nvme_cqe cqe = { .cid = 7, .sqid = 1, .status = GDX_NVME_SC_LBA_RANGE << 1 };

	(void)state;
	assert_int_equal(gdx_tcp_data_init(&pdu, GDX_TCP_H2C_DATA, 7, 3, 8192, 4096,
					   GDX_TCP_F_DATA_LAST, &dgst), 28);
	assert_int_equal(pdu.data.ttag, 3);
	assert_int_equal(pdu.ch.plen, 28 + 4096 + 4);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &dgst, 0, &info,
			       &err), 0);
	assert_int_equal(info.data_len, 4096);
	assert_int_equal(info.data_off, 28);

	/* DATAL disagreeing with PLEN */
	gdx_tcp_data_init(&pdu, GDX_TCP_H2C_DATA, 7, 3, 0, 4096, 0, &plain);
	pdu.data.datal = 4000;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fei, 16);
	/* over MAXH2CDATA */
	gdx_tcp_data_init(&pdu, GDX_TCP_H2C_DATA, 7, 3, 0, 1 << 20, 0, &plain);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fes, GDX_TCP_FES_DATA_LIMIT);
	/* C2HData carries no TTAG, and SUCCESS needs LAST_PDU */
	gdx_tcp_data_init(&pdu, GDX_TCP_C2H_DATA, 7, 3, 0, 512,
			  GDX_TCP_F_DATA_LAST | GDX_TCP_F_DATA_SUCCESS, &plain);
	assert_int_equal(pdu.data.ttag, 0);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), 0);
	pdu.ch.flags = GDX_TCP_F_DATA_SUCCESS;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), -EPROTO);
	/* a host never sends C2HData */
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_TARGET, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), -EPROTO);
	assert_int_equal(err.fes, GDX_TCP_FES_INVALID_HEADER);

	assert_int_equal(gdx_tcp_r2t_init(&pdu, 7, 3, 0, 65536, &dgst), 28);
	assert_int_equal(pdu.ch.plen, 28);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &dgst, 0, &info, &err),
			 0);
	gdx_tcp_r2t_init(&pdu, 7, 3, 0, 0, &plain);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), -EPROTO);

	assert_int_equal(gdx_tcp_rsp_init(&pdu, &cqe, &plain), 24);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &plain, 0, &info,
			       &err), 0);
	assert_int_equal(pdu.rsp.cqe.status >> 1, GDX_NVME_SC_LBA_RANGE);
}

static void test_term(void **state)
{
	uint8_t buf[GDX_TCP_TERM_HLEN + 200];
	uint8_t bad[200];
	union gdx_tcp_pdu pdu;
	struct gdx_tcp_pdu_info info;
	struct gdx_tcp_err err;

	(void)state;
	memset(bad, 0xab, sizeof(bad));
	assert_int_equal(gdx_tcp_term_init(buf, GDX_TCP_C2H_TERM, GDX_TCP_FES_INVALID_HEADER,
					   0x10203, bad, sizeof(bad)), 24 + 128);
	memcpy(&pdu, buf, sizeof(pdu));
	assert_int_equal(gdx_tcp_term_fei(&pdu.term), 0x10203);
	assert_int_equal(buf[10], 0x03);
	assert_int_equal(buf[12], 0x01);
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &dgst, 0, &info, &err),
			 0);
	assert_int_equal(info.data_len, 128);
	pdu.ch.plen = 200;
	assert_int_equal(check(&pdu, GDX_TCP_ROLE_HOST, GDX_TCP_PHASE_READY, &dgst, 0, &info, &err),
			 -EPROTO);
	assert_string_equal(gdx_tcp_fes_str(GDX_TCP_FES_HDGST), "header digest error");
}

static void test_nvme_helpers(void **state)
{
	struct gdx_nvmf_connect_data cd;
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_READ, .flags = GDX_NVME_FLAGS_PSDT_SGL };
	struct gdx_nvme_sgl_info si;
	char out[8];
	char field[20];

	(void)state;
	memset(&cd, 0, sizeof(cd));
	assert_int_equal(gdx_nvme_nqn_check(cd.subnqn, sizeof(cd.subnqn)), -EINVAL);
	strcpy(cd.subnqn, "nqn.2024-01.io.gdx:t");
	assert_int_equal(gdx_nvme_nqn_check(cd.subnqn, sizeof(cd.subnqn)), 20);
	memset(cd.hostnqn, 'a', sizeof(cd.hostnqn));
	assert_int_equal(gdx_nvme_nqn_check(cd.hostnqn, sizeof(cd.hostnqn)), -EINVAL);

	gdx_nvme_field_pad(field, sizeof(field), "gdx");
	assert_int_equal(field[3], ' ');
	gdx_nvme_field_str(out, sizeof(out), field, sizeof(field));
	assert_string_equal(out, "gdx");

	sqe.dptr.type = GDX_NVME_SGL_TRANSPORT;
	sqe.dptr.length = 4096;
	assert_int_equal(gdx_nvme_sgl_parse(&sqe, &si), 0);
	assert_false(si.in_capsule);
	assert_int_equal(si.length, 4096);
	sqe.dptr.type = GDX_NVME_SGL_DATA_BLOCK_OFFSET;
	sqe.dptr.addr = 16;
	assert_int_equal(gdx_nvme_sgl_parse(&sqe, &si), GDX_NVME_SC_SGL_INVALID_OFFSET);
	sqe.dptr.type = 0x20;
	assert_int_equal(gdx_nvme_sgl_parse(&sqe, &si), GDX_NVME_SC_SGL_INVALID_TYPE);
	sqe.dptr.length = 0;	/* no data: any type */
	assert_int_equal(gdx_nvme_sgl_parse(&sqe, &si), 0);
	sqe.flags = 0;
	assert_int_equal(gdx_nvme_sgl_parse(&sqe, &si), GDX_NVME_SC_INVALID_FIELD);

	sqe.cdw10 = 0x70 | (4u << 16);
	sqe.cdw11 = 0;
	assert_int_equal(gdx_nvme_glp_lid(&sqe), 0x70);
	assert_int_equal(gdx_nvme_glp_len(&sqe), 20);
	assert_string_equal(gdx_nvme_status_str(GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR),
			    "LBA Out of Range");
	assert_string_equal(gdx_nvme_status_str(GDX_NVME_SC_CONNECT_INVALID_HOST),
			    "Connect Invalid Host");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c),
		cmocka_unit_test(test_icreq),
		cmocka_unit_test(test_icresp),
		cmocka_unit_test(test_cmd_roundtrip),
		cmocka_unit_test(test_data_r2t_rsp),
		cmocka_unit_test(test_term),
		cmocka_unit_test(test_nvme_helpers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
