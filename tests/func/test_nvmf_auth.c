/* SPDX-License-Identifier: MIT */
/*
 * DH-HMAC-CHAP between the gdx host and the gdx target on loopback, both in
 * this process: unidirectional and bidirectional, every hash and a few DH
 * groups, and the refusals (a wrong secret, none, a controller that does not
 * prove itself), each of which must leave the host with no controller.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "common/util.h"

#define NQN "nqn.2026-12.io.gdx:auth-func"
#define HOST "nqn.2014-08.org.nvmexpress:uuid:3f0c4a52-77a1-4f9e-8b0d-5c2a1e6d9b10"
#define OTHER "nqn.2014-08.org.nvmexpress:uuid:3f0c4a52-77a1-4f9e-8b0d-5c2a1e6d9b11"

/* as `nvme gen-dhchap-key` writes them: no transformation, SHA-256, -384, -512 */
#define KEY0 "DHHC-1:00:JhRWoIisahVYgkI7glpgSCkP/9/09tWHtEju1IuRE0UISPaN:"
#define KEY1 "DHHC-1:01:3ju8QJG7RJmn4XfbBT8bWRGDQ1k/wnPNutMfaYVfhpXjMm6V:"
#define KEY2 "DHHC-1:02:3jedSPzpTF/EdJVXVIfY0aqJJV6+exFgpK296q1fkEQFj/TQ3FY4KZZwGMOJmc1UH76Xiw==:"
#define KEY3                                                                         \
	"DHHC-1:03:okI3gNXPQJLOZhytDBy0VPFF0D5xHkAFv/4QOTFlUj77IAMUrCXtSMQv3Gujut96MJxx5g6K" \
	"DkYeoLB9wdBt8osKowg=:"
#define KEY4 "DHHC-1:00:Bm3372cHbvuR5Wh/wsgy5yJMcg0Wt1SJcHFrUQ4S6Nd366lv:"

static struct gdx_nvmf_target *tgt;
static char port[16];

static int setup(void **state)
{
	struct gdx_nvmf_target_opts o;
	int p;

	(void)state;
	gdx_nvmf_target_opts_init(&o, sizeof(o));
	o.reactors = 2;
	if (gdx_nvmf_target_create(&o, &tgt) || gdx_nvmf_target_add_subsys(tgt, NQN, 1) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 1, "ram:4M", 512) ||
	    gdx_nvmf_target_add_port(tgt, 1, "127.0.0.1", "0") ||
	    gdx_nvmf_target_link(tgt, 1, NQN) || gdx_nvmf_target_start(tgt))
		return -1;
	p = gdx_nvmf_target_bound_port(tgt, 1);
	if (p <= 0)
		return -1;
	snprintf(port, sizeof(port), "%d", p);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	gdx_nvmf_target_destroy(tgt);
	return 0;
}

static int conn(const char *hostnqn, const char *key, const char *ctrl_key,
		struct gdx_nvmf_ctrl **c)
{
	struct gdx_nvmf_host_opts o;

	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.hostnqn = hostnqn;
	o.nr_io_queues = 2;
	o.queue_depth = 16;
	o.reconnect_delay_ms = 50;
	o.connect_timeout_ms = 5000;
	o.dhchap_secret = key;
	o.dhchap_ctrl_secret = ctrl_key;
	*c = NULL;
	return gdx_nvmf_connect("127.0.0.1", port, NQN, &o, c);
}

/* Connected, and the I/O queues (which authenticate too) move data. */
static void serves(struct gdx_nvmf_ctrl *c)
{
	uint8_t out[4096], in[4096];
	struct gdx_nvmf_ctrl_info info;

	assert_int_equal(gdx_nvmf_ctrl_info(c, &info), 0);
	assert_int_equal(info.nr_io_queues, 2);
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = (uint8_t)(i * 7 + 1);
	for (uint64_t off = 0; off < 4 * sizeof(out); off += sizeof(out)) {
		assert_int_equal(gdx_nvmf_write(c, 1, out, sizeof(out), off), 0);
		memset(in, 0, sizeof(in));
		assert_int_equal(gdx_nvmf_read(c, 1, in, sizeof(in), off), 0);
		assert_memory_equal(in, out, sizeof(in));
	}
}

static void unidirectional(void **state)
{
	struct gdx_nvmf_ctrl *c;

	(void)state;
	assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, HOST, KEY1, NULL, NULL, NULL), 0);
	assert_int_equal(conn(HOST, KEY1, NULL, &c), 0);
	serves(c);
	gdx_nvmf_disconnect(c);
}

static void bidirectional(void **state)
{
	struct gdx_nvmf_ctrl *c;

	(void)state;
	assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, HOST, KEY0, KEY4, NULL, "ffdhe2048"),
			 0);
	assert_int_equal(conn(HOST, KEY0, KEY4, &c), 0);
	serves(c);
	gdx_nvmf_disconnect(c);
	/* the controller proves a secret other than the one the host holds: refused */
	assert_int_equal(conn(HOST, KEY0, KEY1, &c), -EACCES);
	assert_null(c);
	/* the host asks for the controller's proof, the target has no controller secret */
	assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, HOST, KEY0, NULL, NULL, NULL), 0);
	assert_int_equal(conn(HOST, KEY0, KEY4, &c), -EACCES);
	assert_null(c);
}

/* Each hash, each with another transformation hash and key size, and DH groups. */
static void hashes_and_groups(void **state)
{
	static const struct {
		const char *key, *hash, *dh;
	} cases[] = {
		{ KEY1, "hmac(sha256)", "null" },
		{ KEY2, "hmac(sha384)", "ffdhe3072" },
		{ KEY3, "hmac(sha512)", "ffdhe4096" },
		{ KEY0, "sha512", "ffdhe8192" },
		{ KEY3, "sha256", "ffdhe6144" },
	};

	(void)state;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(cases); i++) {
		struct gdx_nvmf_ctrl *c;

		assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, HOST, cases[i].key, KEY4,
								cases[i].hash, cases[i].dh), 0);
		assert_int_equal(conn(HOST, cases[i].key, KEY4, &c), 0);
		serves(c);
		gdx_nvmf_disconnect(c);
	}
}

static void refused(void **state)
{
	struct gdx_nvmf_ctrl *c;
	uint64_t t0;

	(void)state;
	assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, HOST, KEY1, NULL, NULL, NULL), 0);
	/* a wrong secret, of the same shape */
	t0 = gdx_now_ns();
	assert_int_equal(conn(HOST, KEY2, NULL, &c), -EACCES);
	assert_null(c);
	/* refused at once, not after a timeout or reconnects */
	assert_true(gdx_now_ns() - t0 < 3000000000ull);
	/* no secret where the target requires one */
	assert_int_equal(conn(HOST, NULL, NULL, &c), -EACCES);
	assert_null(c);
	/* a host the target holds no secret for connects as before, with one or without */
	assert_int_equal(conn(OTHER, NULL, NULL, &c), 0);
	gdx_nvmf_disconnect(c);
	assert_int_equal(conn(OTHER, KEY1, NULL, &c), 0);
	gdx_nvmf_disconnect(c);
	/* ... but not when it wants the controller to prove itself, which it then cannot */
	assert_int_equal(conn(OTHER, KEY1, KEY4, &c), -EACCES);
	/* malformed secrets, and settings, are refused up front */
	assert_int_equal(conn(HOST, "DHHC-1:01:3ju8QJG7:", NULL, &c), -EINVAL);
	assert_int_equal(conn(HOST, NULL, KEY4, &c), -EINVAL);
	assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, HOST, "DHHC-1:00:AAAA:", NULL, NULL,
							NULL), -EINVAL);
	assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, HOST, KEY1, NULL, "md5", NULL),
			 -EINVAL);
	assert_int_equal(gdx_nvmf_target_set_host_auth(tgt, HOST, KEY1, NULL, NULL, "ffdhe1024"),
			 -EINVAL);
}

/* The hosts of an nvmetcli JSON file carry the settings under configfs's names. */
static void json_hosts(void **state)
{
	char path[] = "/tmp/gdx-auth-json-XXXXXX";
	struct gdx_nvmf_ctrl *c;
	FILE *f;
	int fd;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	fprintf(f, "{ \"hosts\": [ { \"nqn\": \"%s\", \"dhchap_key\": \"%s\", \"dhchap_ctrl_key\": "
		"\"%s\", \"dhchap_hash\": \"hmac(sha384)\", \"dhchap_dhgroup\": \"ffdhe2048\" }, "
		"{ \"nqn\": \"%s\", \"dhchap_key\": \"\" } ] }\n", HOST, KEY2, KEY0, OTHER);
	fclose(f);
	assert_int_equal(gdx_nvmf_target_load_json(tgt, path), 0);
	assert_int_equal(conn(HOST, KEY2, KEY0, &c), 0);
	serves(c);
	gdx_nvmf_disconnect(c);
	assert_int_equal(conn(HOST, KEY1, NULL, &c), -EACCES);
	/* a bad secret in the file fails the load and names no secret */
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "{ \"hosts\": [ { \"nqn\": \"%s\", \"dhchap_key\": \"DHHC-1:09:x:\" } ] }\n",
		HOST);
	fclose(f);
	assert_int_not_equal(gdx_nvmf_target_load_json(tgt, path), 0);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "{ \"hosts\": [ { \"nqn\": \"%s\", \"dhchap_hash\": \"hmac(sha256)\" } ] }\n",
		HOST);
	fclose(f);
	assert_int_not_equal(gdx_nvmf_target_load_json(tgt, path), 0);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(unidirectional),
		cmocka_unit_test(bidirectional),
		cmocka_unit_test(hashes_and_groups),
		cmocka_unit_test(refused),
		cmocka_unit_test(json_hosts),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
