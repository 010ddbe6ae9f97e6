/* SPDX-License-Identifier: MIT */
/*
 * The target's TLS PSK per host (src/nvmf/core/psk.c): the lookup an
 * offered identity goes through, and whole handshakes over loopback TCP with
 * the gdx client.  A handshake the server accepts ends in 0 where the kernel
 * has kTLS and in -EOPNOTSUPP where it has none; one it refuses in
 * -EKEYREJECTED, so the choice of PSK is tested either way.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

#include "common/util.h"
#include "nvmf/core/core.h"

#define SUB "nqn.2026-11.io.gdx:disk"
#define HA "nqn.2026-11.io.gdx:host-a"
#define HB "nqn.2026-11.io.gdx:host-b"
#define HC "nqn.2026-11.io.gdx:host-c"
#define HD "nqn.2026-11.io.gdx:host-d"

static struct nvmf_tgt tgt;
static struct nvmf_port *port;
static struct gdx_tls_key ka, kb, kc, kd;

static struct gdx_tls_key make_key(uint8_t hmac, uint8_t len, uint64_t seed)
{
	struct gdx_tls_key k = { .hmac = hmac, .len = len };

	t_fill(k.key, len, seed);
	return k;
}

/* A, B: SHA-256 keys of their own; C: a SHA-384 one; D: none.  The port: no default. */
static int setup(void **state)
{
	(void)state;
	ka = make_key(1, 32, 1);
	kb = make_key(1, 32, 2);
	kc = make_key(2, 48, 3);
	kd = make_key(1, 32, 4);
	assert_int_equal(nvmf_tgt_init(&tgt), 0);
	assert_int_equal(nvmf_port_add(&tgt, 1, GDX_NVMF_TRTYPE_TCP, "127.0.0.1", "0", &port), 0);
	port->sectype = GDX_NVMF_TCP_SECTYPE_TLS13;
	assert_int_equal(nvmf_tgt_set_host_psk(&tgt, HA, &ka), 0);
	assert_int_equal(nvmf_tgt_set_host_psk(&tgt, HB, &kb), 0);
	assert_int_equal(nvmf_tgt_set_host_psk(&tgt, HC, &kc), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	nvmf_tgt_fini(&tgt);
	return 0;
}

/*
 * What the target makes of the identity a host holding k offers as host:
 * 1 the host's PSK (the same bytes), 0 a PSK other than the host's (its
 * binder will not verify), -ENOKEY none.
 */
static int lookup(const struct gdx_tls_key *k, int version, const char *host)
{
	struct gdx_tls_psk want, got;
	char h[GDX_NVME_NQN_SIZE], s[GDX_NVME_NQN_SIZE];
	int ret;

	assert_int_equal(gdx_tls_nvme_psk(k, version, host, SUB, &want), 0);
	ret = nvmf_tls_psk_find(&tgt, port, want.identity, &got, h, s);
	if (ret)
		return ret;
	assert_string_equal(h, host);
	assert_string_equal(s, SUB);
	assert_string_equal(got.identity, want.identity);
	return got.len == want.len && !memcmp(got.key, want.key, want.len);
}

static void each_host_its_own_key(void **state)
{
	(void)state;
	for (int v = 0; v <= 1; v++) {
		assert_int_equal(lookup(&ka, v, HA), 1);
		assert_int_equal(lookup(&kb, v, HB), 1);
		assert_int_equal(lookup(&kc, v, HC), 1);
		/* another host's key under A's NQN: v0 gets A's PSK (not this one), v1's digest fails */
		assert_int_equal(lookup(&kb, v, HA), v ? -ENOKEY : 0);
		assert_int_equal(lookup(&ka, v, HB), v ? -ENOKEY : 0);
		/* C's key is SHA-384: A's identity with hash 02 does not fit A's SHA-256 key */
		assert_int_equal(lookup(&kc, v, HA), -ENOKEY);
		/* no key of D's own and no port key */
		assert_int_equal(lookup(&ka, v, HD), -ENOKEY);
		assert_int_equal(lookup(&kd, v, HD), -ENOKEY);
	}
}

static void port_key_is_the_default(void **state)
{
	(void)state;
	port->tls_key = kd;
	for (int v = 0; v <= 1; v++) {
		assert_int_equal(lookup(&kd, v, HD), 1);
		assert_int_equal(lookup(&ka, v, HD), v ? -ENOKEY : 0);
		/* A has a key of its own: the port's does not let anyone in as A */
		assert_int_equal(lookup(&kd, v, HA), v ? -ENOKEY : 0);
		assert_int_equal(lookup(&ka, v, HA), 1);
	}
	gdx_tls_wipe(&port->tls_key, sizeof(port->tls_key));
}

static void replaced_key_and_not_identities(void **state)
{
	struct gdx_tls_psk got;
	char h[GDX_NVME_NQN_SIZE], s[GDX_NVME_NQN_SIZE];
	static const char *const bad[] = {
		"NVMe0G01 " HA " " SUB,			/* generated (DH-HMAC-CHAP), not kept */
		"NVMe2R01 " HA " " SUB,
		"NVMe0R03 " HA " " SUB,
		"NVMe0R01 " HA,
		"NVMe0R01 " HA " " SUB " extra",
		"NVMe1R01 " HA " " SUB,			/* v1 without its digest */
		"NVMe0R01  " HA " " SUB,
		"",
	};

	(void)state;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(bad); i++)
		assert_int_equal(nvmf_tls_psk_find(&tgt, port, bad[i], &got, h, s), -ENOKEY);
	assert_int_equal(nvmf_tgt_set_host_psk(&tgt, HA, &kd), 0);
	assert_int_equal(lookup(&kd, 1, HA), 1);
	assert_int_equal(lookup(&ka, 1, HA), -ENOKEY);
	assert_int_equal(nvmf_tgt_set_host_psk(&tgt, HA, &ka), 0);
	assert_int_equal(nvmf_tgt_set_host_psk(&tgt, "", &ka), -EINVAL);
	assert_int_equal(nvmf_tgt_set_host_psk(&tgt, "nqn.2026-11.io.gdx:a b", &ka), -EINVAL);
}

/* ---- handshakes over loopback TCP ------------------------------------------------ */

static int find(void *arg, const char *identity, struct gdx_tls_psk *out)
{
	char h[GDX_NVME_NQN_SIZE], s[GDX_NVME_NQN_SIZE];

	(void)arg;
	return nvmf_tls_psk_find(&tgt, port, identity, out, h, s);
}

static void tcp_pair(int fd[2])
{
	t_tcp_pair(fd);
	for (int i = 0; i < 2; i++)
		assert_int_equal(fcntl(fd[i], F_SETFL, O_NONBLOCK), 0);
}

/* The server's result of a handshake from a client holding k as host (identity version v). */
static int handshake(const struct gdx_tls_key *k, int version, const char *host)
{
	struct gdx_tls_psk psk;
	struct gdx_tls_hs *hs[2];
	struct pollfd p[2];
	int fd[2], ret[2] = { -EAGAIN, -EAGAIN };
	uint64_t end = gdx_now_ns() + 5000000000ull;

	tcp_pair(fd);
	assert_int_equal(gdx_tls_nvme_psk(k, version, host, SUB, &psk), 0);
	assert_int_equal(gdx_tls_client_start(fd[0], &psk, &hs[0]), 0);
	assert_int_equal(gdx_tls_server_start(fd[1], 0, find, NULL, &hs[1]), 0);
	/* the server's result decides; the client may wait for what a refusing server never sends */
	while (ret[1] == -EAGAIN && gdx_now_ns() < end) {
		for (int i = 0; i < 2; i++) {
			p[i] = (struct pollfd){ .fd = fd[i] };
			if (ret[i] == -EAGAIN)
				ret[i] = gdx_tls_step(hs[i], &p[i].events);
			if (ret[i] != -EAGAIN)
				p[i].fd = -1;
		}
		poll(p, 2, 100);
	}
	if (!ret[1] || ret[1] == -EOPNOTSUPP)
		assert_string_equal(gdx_tls_identity(hs[1]), psk.identity);
	for (int i = 0; i < 2; i++) {
		gdx_tls_free(hs[i]);
		close(fd[i]);
	}
	return ret[1] == -EOPNOTSUPP ? 0 : ret[1];
}

static void handshakes_pick_the_hosts_key(void **state)
{
	(void)state;
	assert_int_equal(handshake(&ka, 0, HA), 0);
	assert_int_equal(handshake(&ka, 1, HA), 0);
	assert_int_equal(handshake(&kb, 0, HB), 0);
	/* SHA-384 beside SHA-256 keys: the cipher suite follows the host's key */
	assert_int_equal(handshake(&kc, 0, HC), 0);
	assert_int_equal(handshake(&kc, 1, HC), 0);
	/* A's NQN with B's key: the binder does not verify (v0), the digest is not A's (v1) */
	assert_int_equal(handshake(&kb, 0, HA), -EKEYREJECTED);
	assert_int_equal(handshake(&kb, 1, HA), -EKEYREJECTED);
	assert_int_equal(handshake(&ka, 0, HB), -EKEYREJECTED);
	assert_int_equal(handshake(&kc, 0, HA), -EKEYREJECTED);
	assert_int_equal(handshake(&kd, 0, HD), -EKEYREJECTED);
	port->tls_key = kd;
	assert_int_equal(handshake(&kd, 0, HD), 0);
	assert_int_equal(handshake(&kd, 1, HD), 0);
	assert_int_equal(handshake(&kd, 0, HA), -EKEYREJECTED);
	gdx_tls_wipe(&port->tls_key, sizeof(port->tls_key));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(each_host_its_own_key, setup, teardown),
		cmocka_unit_test_setup_teardown(port_key_is_the_default, setup, teardown),
		cmocka_unit_test_setup_teardown(replaced_key_and_not_identities, setup, teardown),
		cmocka_unit_test_setup_teardown(handshakes_pick_the_hosts_key, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
