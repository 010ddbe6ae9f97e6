/* SPDX-License-Identifier: MIT */
/*
 * Connection storms against the NVMe/TCP target (issue 19): idle connections
 * beyond nvmf.target.max_conns are refused at once with a log line, the target
 * neither spins nor grows without bound, a host connected before the storm is
 * served throughout, and connect/close churn leaves nothing behind.
 */
#include "fault_target.h"

#define MAX_CONNS 48
#define IDLE 200
#define CHURN 400

/* A connection the target serves (ICResp), retried while it still counts closed ones. */
static int served(const struct ft_target *ft)
{
	uint64_t t0 = ft_now_ms();

	for (;;) {
		union gdx_tcp_pdu pdu;
		int fd = tcp_connect_ms(ft->port, 3000);

		assert_true(fd >= 0);
		gdx_tcp_icreq_init(&pdu.icreq, false, false, 0);
		if (send(fd, &pdu, 128, MSG_NOSIGNAL) == 128 &&
		    recv(fd, &pdu, 128, MSG_WAITALL) == 128 && pdu.ch.type == GDX_TCP_ICRESP)
			return fd;
		close(fd);
		assert_true(ft_now_ms() - t0 < 5000);
		usleep(20 * 1000);
	}
}

static void test_storm(void **state)
{
	static const char *const knobs[] = { "nvmf.target.max_conns", "48",
					     "nvmf.target.handshake_timeout_ms", "60000", NULL };
	static const char *const ns[] = { "ram:4M", NULL };
	static struct ft_target ft;
	struct gdx_nvme_sqe ka = { .opc = GDX_NVME_ADM_KEEP_ALIVE };
	struct host adm;
	int fds[IDLE], fd;
	unsigned refused = 0, open_ = 0;
	uint64_t cpu0, cpu, rss0, rss, t0;

	(void)state;
	ft_start(&ft, ns, 0, knobs);
	ft_admin_up(&adm, tcp_connect_ms(ft.port, 5000), 30000, 1);
	assert_true(adm.cntlid > 0);
	rss0 = ft_rss_kib(&ft);
	cpu0 = ft_cpu_ms(&ft);
	t0 = ft_now_ms();
	for (unsigned i = 0; i < IDLE; i++) {
		fds[i] = tcp_connect_ms(ft.port, 3000);
		assert_true(fds[i] >= 0);
	}
	/* the refusals show as the target gets to them */
	for (uint64_t t1 = ft_now_ms(); ft_now_ms() - t1 < 5000; usleep(50 * 1000)) {
		refused = open_ = 0;
		for (unsigned i = 0; i < IDLE; i++) {
			if (ft_closed(fds[i]))
				refused++;
			else
				open_++;
		}
		if (refused >= IDLE - (MAX_CONNS - 1))
			break;
	}
	/* the admin queue counts as one of the connections */
	assert_int_equal(open_, MAX_CONNS - 1);
	assert_int_equal(refused, IDLE - (MAX_CONNS - 1));
	assert_true(ft_log_count(&ft, "max_conns reached") >= 1);
	assert_int_equal(run_cmd(&adm, &ka, NULL, 0, false, NULL, 0, NULL), 0);
	for (unsigned i = 0; i < IDLE; i++)
		close(fds[i]);

	/* churn: connect, ICReq, close, as fast as it goes */
	for (unsigned i = 0; i < CHURN; i++) {
		fd = tcp_connect_ms(ft.port, 3000);
		assert_true(fd >= 0);
		if (i % 2) {
			union gdx_tcp_pdu pdu;

			gdx_tcp_icreq_init(&pdu.icreq, false, false, 0);
			/* refused while the target still counts closed ones: no ICResp */
			send(fd, &pdu, 128, MSG_NOSIGNAL);
		}
		close(fd);
	}
	cpu = ft_cpu_ms(&ft) - cpu0;
	usleep(300 * 1000);
	rss = ft_rss_kib(&ft);
	print_message("%u idle connections over max_conns %u: %u served, %u refused; then %u "
		      "connect/close: target CPU %" PRIu64 " ms in %" PRIu64 " ms, RSS %" PRIu64
		      " -> %" PRIu64 " KiB\n", IDLE, MAX_CONNS, open_, refused, CHURN, cpu,
		      ft_now_ms() - t0, rss0, rss);
	assert_true(rss < rss0 + 16 * 1024);
	/* all of it gone: a full set of connections is served again */
	for (unsigned i = 0; i < MAX_CONNS - 1; i++)
		fds[i] = served(&ft);
	assert_int_equal(run_cmd(&adm, &ka, NULL, 0, false, NULL, 0, NULL), 0);
	for (unsigned i = 0; i < MAX_CONNS - 1; i++)
		close(fds[i]);
	close(adm.fd);
	ft_stop(&ft);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_storm, ft_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
