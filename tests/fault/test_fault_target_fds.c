/* SPDX-License-Identifier: MIT */
/*
 * The NVMe/TCP target out of file descriptors (issue 19, item 2): with
 * RLIMIT_NOFILE lowered under it and more clients than fit, it must not spin
 * on a listener that stays readable nor flood its log; it refuses the excess
 * (a client sees its connection closed, not a timeout) and serves again once
 * descriptors free up.  And connections that never finish ICReq + Connect
 * end after nvmf.target.handshake_timeout_ms, not 60 s.
 */
#include "fault_target.h"

#define NOFILE 64
#define CLIENTS 160
#define WINDOW_MS 3000

static const char *const ns_null[] = { "null:1G", NULL };

static void test_fd_exhaustion(void **state)
{
	static const char *const knobs[] = { "nvmf.target.handshake_timeout_ms", "60000", NULL };
	static struct ft_target ft;
	struct host h;
	int fds[CLIENTS], fd;
	unsigned refused = 0, open_ = 0, failed = 0;
	uint64_t cpu0, cpu, log0, logged, t0;

	(void)state;
	ft_start(&ft, ns_null, NOFILE, knobs);
	log0 = ft_log_bytes(&ft);
	for (unsigned i = 0; i < CLIENTS; i++)
		fds[i] = tcp_connect_ms(ft.port, 3000);
	/* the target is at its limit with clients queued: watch it */
	cpu0 = ft_cpu_ms(&ft);
	t0 = ft_now_ms();
	while (ft_now_ms() - t0 < WINDOW_MS)
		usleep(100 * 1000);
	cpu = ft_cpu_ms(&ft) - cpu0;
	logged = ft_log_bytes(&ft) - log0;
	for (unsigned i = 0; i < CLIENTS; i++) {
		if (fds[i] < 0)
			failed++;
		else if (ft_closed(fds[i]))
			refused++;
		else
			open_++;
	}
	print_message("%u clients over RLIMIT_NOFILE %u: %u served, %u refused, %u connect "
		      "timeouts; target CPU %" PRIu64 " ms in %u ms; log %" PRIu64 " bytes\n",
		      CLIENTS, NOFILE, open_, refused, failed, cpu, WINDOW_MS, logged);
	assert_int_equal(failed, 0);
	assert_true(refused >= CLIENTS - NOFILE);
	assert_true(open_ >= NOFILE / 2);
	/* a spinning accept loop burns the whole window (one core) */
	assert_true(cpu < WINDOW_MS / 5);
	/* one line a second at most, each < 200 bytes; a flood is megabytes */
	assert_true(logged < 4096);
	assert_true(ft_log_count(&ft, "connection refused") >= 1);

	/* descriptors free up: served again */
	for (unsigned i = 0; i < CLIENTS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	t0 = ft_now_ms();
	for (;;) {
		fd = tcp_connect_ms(ft.port, 3000);
		assert_true(fd >= 0);
		if (!ft_closed(fd) || ft_now_ms() - t0 > 5000)
			break;
		close(fd);
		usleep(50 * 1000);
	}
	ft_admin_up(&h, fd, 0, 1);
	close(fd);
	ft_stop(&ft);
}

/* Silent connections and ones that stop after ICReq end after the handshake timeout. */
static void test_handshake_timeout(void **state)
{
	static const char *const knobs[] = { "nvmf.target.handshake_timeout_ms", "1500", NULL };
	static struct ft_target ft;
	struct host ic, adm;
	int silent, icreq, done;
	uint64_t t0, took;

	(void)state;
	ft_start(&ft, ns_null, 0, knobs);
	t0 = ft_now_ms();
	silent = tcp_connect_ms(ft.port, 3000);
	icreq = tcp_connect_ms(ft.port, 3000);
	done = tcp_connect_ms(ft.port, 3000);
	assert_true(silent >= 0 && icreq >= 0 && done >= 0);
	host_icreq_fd(&ic, icreq, false, false);
	/* KATO 0: only the handshake timeout could end it, and must not */
	ft_admin_up(&adm, done, 0, 1);
	while (!(ft_closed(silent) && ft_closed(icreq)) && ft_now_ms() - t0 < 10000)
		usleep(50 * 1000);
	took = ft_now_ms() - t0;
	print_message("silent and ICReq-only connections ended after %" PRIu64 " ms\n", took);
	assert_true(ft_closed(silent) && ft_closed(icreq));
	/* 1.5 s, checked once a second */
	assert_true(took >= 1500 && took < 4000);
	assert_false(ft_closed(done));
	assert_int_equal(ft_log_count(&ft, "no ICReq and Connect within 1500 ms"), 2);
	close(silent);
	close(icreq);
	close(done);
	ft_stop(&ft);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_fd_exhaustion, ft_teardown),
		cmocka_unit_test_teardown(test_handshake_timeout, ft_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
