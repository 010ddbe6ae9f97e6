/* SPDX-License-Identifier: MIT */
/* NVMe/RDMA binding: CM private data both ways, each bad request rejected with
 * the binding's status, and keyed SGL descriptors as the Linux host writes them. */
#include <string.h>

#include "test.h"

#include "nvmf/proto/rdma.h"

static const struct gdx_rdma_cm_limits lim = { .max_qid = 8, .max_qsize = 128 };

/* The bytes the Linux host sends for an admin queue: recfmt 0, qid 0, hrqsize 32, hsqsize 31. */
static void test_req_linux_admin(void **state)
{
	uint8_t wire[32] = { 0, 0, 0, 0, 32, 0, 31, 0 };
	struct gdx_rdma_queue_req q;

	(void)state;
	assert_int_equal(gdx_rdma_cm_req_parse(wire, sizeof(wire), &lim, &q), GDX_RDMA_CM_OK);
	assert_int_equal(q.qid, 0);
	assert_int_equal(q.sq_size, 32);
	assert_int_equal(q.rq_size, 32);
	assert_int_equal(q.cntlid, 0);
}

static void test_req_roundtrip(void **state)
{
	struct gdx_rdma_cm_req r;
	struct gdx_rdma_queue_req q;

	(void)state;
	gdx_rdma_cm_req_init(&r, 3, 128, 0x1234);
	assert_int_equal(gdx_rdma_cm_req_parse(&r, sizeof(r), &lim, &q), GDX_RDMA_CM_OK);
	assert_int_equal(q.qid, 3);
	assert_int_equal(q.sq_size, 128);
	assert_int_equal(q.rq_size, 128);
	assert_int_equal(q.cntlid, 0x1234);
	/* a longer private data area is fine, a shorter one is not */
	{
		uint8_t big[56] = { 0 };

		memcpy(big, &r, sizeof(r));
		assert_int_equal(gdx_rdma_cm_req_parse(big, sizeof(big), &lim, &q), GDX_RDMA_CM_OK);
	}
	assert_int_equal(gdx_rdma_cm_req_parse(&r, 31, &lim, &q), GDX_RDMA_CM_INVALID_LEN);
	assert_int_equal(gdx_rdma_cm_req_parse(NULL, 0, &lim, &q), GDX_RDMA_CM_INVALID_LEN);
}

static void test_req_rejects(void **state)
{
	struct gdx_rdma_cm_req r;
	struct gdx_rdma_queue_req q;

	(void)state;
	gdx_rdma_cm_req_init(&r, 1, 32, 0);
	r.recfmt = 1;
	assert_int_equal(gdx_rdma_cm_req_parse(&r, sizeof(r), &lim, &q), GDX_RDMA_CM_INVALID_RECFMT);
	gdx_rdma_cm_req_init(&r, 9, 32, 0);
	assert_int_equal(gdx_rdma_cm_req_parse(&r, sizeof(r), &lim, &q), GDX_RDMA_CM_INVALID_QID);
	gdx_rdma_cm_req_init(&r, 8, 128, 0);
	assert_int_equal(gdx_rdma_cm_req_parse(&r, sizeof(r), &lim, &q), GDX_RDMA_CM_OK);
	gdx_rdma_cm_req_init(&r, 8, 129, 0);
	assert_int_equal(gdx_rdma_cm_req_parse(&r, sizeof(r), &lim, &q), GDX_RDMA_CM_INVALID_HSQSIZE);
	/* the admin queue is bound by its own depth, whatever the I/O limit */
	gdx_rdma_cm_req_init(&r, 0, 33, 0);
	assert_int_equal(gdx_rdma_cm_req_parse(&r, sizeof(r), &lim, &q), GDX_RDMA_CM_INVALID_HSQSIZE);
	gdx_rdma_cm_req_init(&r, 1, 1, 0);
	assert_int_equal(gdx_rdma_cm_req_parse(&r, sizeof(r), &lim, &q), GDX_RDMA_CM_INVALID_HSQSIZE);
	gdx_rdma_cm_req_init(&r, 1, 32, 0);
	r.hrqsize = 0;
	assert_int_equal(gdx_rdma_cm_req_parse(&r, sizeof(r), &lim, &q), GDX_RDMA_CM_INVALID_HRQSIZE);
	assert_string_equal(gdx_rdma_cm_status_str(GDX_RDMA_CM_INVALID_HSQSIZE), "invalid HSQSIZE");
	assert_string_equal(gdx_rdma_cm_status_str(200), "unknown");
}

static void test_rep_rej(void **state)
{
	struct gdx_rdma_cm_rep rep;
	struct gdx_rdma_cm_rej rej;
	uint8_t wire[32];
	uint16_t crq = 0;

	(void)state;
	gdx_rdma_cm_rep_init(&rep, 128);
	memcpy(wire, &rep, sizeof(wire));
	assert_int_equal(wire[0] | wire[1], 0);
	assert_int_equal(wire[2], 128);
	assert_int_equal(gdx_rdma_cm_rep_parse(wire, sizeof(wire), &crq), GDX_RDMA_CM_OK);
	assert_int_equal(crq, 128);
	wire[0] = 1;
	assert_int_equal(gdx_rdma_cm_rep_parse(wire, sizeof(wire), &crq), GDX_RDMA_CM_INVALID_RECFMT);
	assert_int_equal(gdx_rdma_cm_rep_parse(wire, 2, &crq), GDX_RDMA_CM_INVALID_LEN);

	gdx_rdma_cm_rej_init(&rej, GDX_RDMA_CM_INVALID_QID);
	memcpy(wire, &rej, sizeof(rej));
	assert_int_equal(wire[2], 3);
	assert_int_equal(gdx_rdma_cm_rej_parse(wire, sizeof(rej)), GDX_RDMA_CM_INVALID_QID);
	assert_int_equal(gdx_rdma_cm_rej_parse(wire, 3), -1);
	wire[0] = 7;
	assert_int_equal(gdx_rdma_cm_rej_parse(wire, sizeof(rej)), -1);
}

static struct gdx_nvme_sqe sqe_with(const uint8_t desc[16])
{
	struct gdx_nvme_sqe c;

	memset(&c, 0, sizeof(c));
	c.flags = GDX_NVME_FLAGS_PSDT_SGL;
	memcpy(&c.dptr, desc, 16);
	return c;
}

static void test_sgl(void **state)
{
	/* a keyed invalidate descriptor as the Linux host writes it: 0x1000 bytes
	 * at 0x1122334455667788 under key 0xdeadbeef */
	const uint8_t keyed[16] = { 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
				    0x00, 0x10, 0x00, 0xef, 0xbe, 0xad, 0xde, 0x4f };
	const uint8_t inl[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0, 0, 0, 0, 0, 0x01 };
	struct gdx_rdma_sgl_info si;
	struct gdx_nvme_sqe c;
	struct gdx_nvme_sgl mine;

	(void)state;
	c = sqe_with(keyed);
	assert_int_equal(gdx_rdma_sgl_parse(&c, &si), 0);
	assert_int_equal(si.kind, GDX_RDMA_DATA_KEYED);
	assert_int_equal(si.length, 0x1000);
	assert_true(si.addr == 0x1122334455667788ull);
	assert_int_equal(si.key, 0xdeadbeefu);
	assert_true(si.invalidate);
	gdx_rdma_sgl_keyed(&mine, 0x1122334455667788ull, 0x1000, 0xdeadbeefu, true);
	assert_memory_equal(&mine, keyed, 16);
	gdx_rdma_sgl_keyed(&mine, 1, GDX_RDMA_KEYED_MAX_LEN, 2, false);
	c.dptr = mine;
	assert_int_equal(gdx_rdma_sgl_parse(&c, &si), 0);
	assert_int_equal(si.length, GDX_RDMA_KEYED_MAX_LEN);
	assert_false(si.invalidate);

	c = sqe_with(inl);
	assert_int_equal(gdx_rdma_sgl_parse(&c, &si), 0);
	assert_int_equal(si.kind, GDX_RDMA_DATA_INLINE);
	assert_int_equal(si.length, 512);
	gdx_rdma_sgl_inline(&mine, 512);
	assert_memory_equal(&mine, inl, 16);

	/* no data: a zero-length keyed block, or an empty offset block */
	gdx_rdma_sgl_keyed(&c.dptr, 0, 0, 0, false);
	assert_int_equal(gdx_rdma_sgl_parse(&c, &si), 0);
	assert_int_equal(si.kind, GDX_RDMA_DATA_NONE);
	gdx_rdma_sgl_inline(&c.dptr, 0);
	assert_int_equal(gdx_rdma_sgl_parse(&c, &si), 0);
	assert_int_equal(si.kind, GDX_RDMA_DATA_NONE);

	/* in-capsule data at an offset, a TCP transport block, PRPs: refused */
	c = sqe_with(inl);
	c.dptr.addr = 64;
	assert_int_equal(gdx_rdma_sgl_parse(&c, &si), GDX_NVME_SC_SGL_INVALID_OFFSET);
	c.dptr.type = GDX_NVME_SGL_TRANSPORT;
	assert_int_equal(gdx_rdma_sgl_parse(&c, &si), GDX_NVME_SC_SGL_INVALID_TYPE);
	c = sqe_with(keyed);
	c.flags = 0;
	assert_int_equal(gdx_rdma_sgl_parse(&c, &si), GDX_NVME_SC_INVALID_FIELD);
}

static void test_capsule(void **state)
{
	struct gdx_rdma_sgl_info si;
	struct gdx_nvme_sqe c;

	(void)state;
	memset(&c, 0, sizeof(c));
	c.flags = GDX_NVME_FLAGS_PSDT_SGL;
	c.opc = GDX_NVME_CMD_WRITE;
	gdx_rdma_sgl_inline(&c.dptr, 4096);
	assert_int_equal(gdx_rdma_capsule_check(&c, 64 + 4096, 16384, 1 << 20, &si), 0);
	assert_int_equal(si.kind, GDX_RDMA_DATA_INLINE);
	/* more than the queue takes in a capsule; more than the capsule holds */
	assert_int_equal(gdx_rdma_capsule_check(&c, 64 + 4096, 2048, 1 << 20, &si),
			 GDX_NVME_SC_SGL_INVALID_OFFSET | GDX_NVME_ST_DNR);
	assert_int_equal(gdx_rdma_capsule_check(&c, 64 + 4095, 16384, 1 << 20, &si),
			 GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR);
	/* in-capsule data for a read: data only ever goes to the controller that way */
	c.opc = GDX_NVME_CMD_READ;
	assert_int_equal(gdx_rdma_capsule_check(&c, 64 + 4096, 16384, 1 << 20, &si),
			 GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR);
	/* a keyed block past the largest transfer */
	gdx_rdma_sgl_keyed(&c.dptr, 0x1000, (1 << 20) + 1, 7, false);
	assert_int_equal(gdx_rdma_capsule_check(&c, 64, 16384, 1 << 20, &si),
			 GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR);
	gdx_rdma_sgl_keyed(&c.dptr, 0x1000, 1 << 20, 7, false);
	assert_int_equal(gdx_rdma_capsule_check(&c, 64, 16384, 1 << 20, &si), 0);
	/* shorter than a command */
	assert_int_equal(gdx_rdma_capsule_check(&c, 63, 16384, 1 << 20, &si),
			 GDX_NVME_SC_INVALID_FIELD | GDX_NVME_ST_DNR);
	/* a fabrics Connect sends data (FCTYPE 01h), Property Get none */
	c.opc = GDX_NVME_OPC_FABRICS;
	c.fctype = GDX_NVMF_FCTYPE_CONNECT;
	assert_int_equal(gdx_nvmf_cmd_xfer(&c), GDX_NVME_XFER_H2C);
	c.fctype = GDX_NVMF_FCTYPE_PROP_GET;
	assert_int_equal(gdx_nvmf_cmd_xfer(&c), GDX_NVME_XFER_NONE);
}

static void test_tsas(void **state)
{
	struct gdx_nvmf_disc_entry e;

	(void)state;
	memset(&e, 0xff, sizeof(e));
	gdx_rdma_disc_tsas(&e);
	assert_int_equal(e.tsas[0], 1);	/* RC queue pairs */
	assert_int_equal(e.tsas[1], 1);	/* no provider type named */
	assert_int_equal(e.tsas[2], 1);	/* RDMA CM */
	for (size_t i = 3; i < sizeof(e.tsas); i++)
		assert_int_equal(e.tsas[i], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_req_linux_admin),
		cmocka_unit_test(test_req_roundtrip),
		cmocka_unit_test(test_req_rejects),
		cmocka_unit_test(test_rep_rej),
		cmocka_unit_test(test_sgl),
		cmocka_unit_test(test_capsule),
		cmocka_unit_test(test_tsas),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
