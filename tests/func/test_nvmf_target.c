/* SPDX-License-Identifier: MIT */
/*
 * The TCP target on loopback, driven by a minimal host written against the
 * proto codec: connect, enable, identify, I/O with in-capsule data and with
 * R2T, every error status path, discovery, AEN, keep-alive expiry, nvmetcli
 * JSON, and malformed PDUs that must end only their own connection with the
 * right C2HTermReq.
 *
 * The cases live by theme in nvmf_target_*.c (nvmf_target_suite.h), the host
 * in nvmf_raw_host.c; this file has the target they share, the set-up and
 * the case list.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "test.h"

#include <gdx/nvmf.h>

#include "nvmf_target_suite.h"

struct gdx_nvmf_target *tgt;
int port;
static char tmpfile_path[64];

/* ICReq, admin Connect, CC.EN=1. */
void admin_up(struct host *h, const char *nqn, bool hd, bool dd, uint32_t kato)
{
	uint64_t res;

	host_icreq(h, port, hd, dd);
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

void io_up(struct host *io, const struct host *adm, bool hd, bool dd, uint16_t qid)
{
	host_icreq(io, port, hd, dd);
	assert_int_equal(fab_connect(io, NQN, HOSTNQN, qid, 127, adm->cntlid, 0, NULL), 0);
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
