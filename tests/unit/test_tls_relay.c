/* SPDX-License-Identifier: MIT */
/*
 * TLS records in userspace (src/common/tls.c, tls.record=user): two ends of a
 * loopback TCP connection, each through its own relay after the handshake.
 * Bytes cross exact however they are cut, end of stream passes both ways, the
 * descriptor keeps its flags and timeouts, and a peer that stops reading
 * stalls its own connection only, with what the writer got rid of bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>

#include "common/tls.h"

#define KEY "NVMeTLSkey-1:01:ERERERERERERERERERERERERERERERERERERERERERHYIEm8:"

static struct gdx_tls_psk psk;
static pid_t test_pid;

/*
 * LeakSanitizer's hook: no leak check at the exit of a child forked here
 * (test_fork_live).  What OpenSSL holds for each relay thread of the parent
 * (its error queue) is reachable only from that thread, which the child
 * does not have.
 */
int __lsan_is_turned_off(void);
__attribute__((visibility("default"))) int __lsan_is_turned_off(void)
{
	return getpid() != test_pid;
}

static int find(void *arg, const char *identity, struct gdx_tls_psk *out)
{
	(void)arg;
	if (strcmp(identity, psk.identity))
		return -ENOKEY;
	*out = psk;
	return 0;
}

struct server {
	int fd, ret;
};

static void *server_main(void *arg)
{
	struct server *s = arg;
	struct gdx_tls_hs *hs;

	s->ret = gdx_tls_server_start(s->fd, psk.hash, find, NULL, &hs);
	if (!s->ret)
		s->ret = gdx_tls_run(hs, 10000);
	gdx_tls_free(hs);
	return NULL;
}

/*
 * A TLS connection on loopback: *c the client's descriptor, *s the server's;
 * *tc and *ts, unless NULL, copies of the TCP sockets under them.
 */
static void tls_pair_tcp(int *c, int *s, int *tc, int *ts)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tmo = { .tv_sec = 7 }, got;
	socklen_t sl = sizeof(sin), tl = sizeof(got);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct gdx_tls_hs *hs;
	struct server srv;
	pthread_t th;

	assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &sl), 0);
	*c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(*c, (struct sockaddr *)&sin, sizeof(sin)), 0);
	srv.fd = *s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	close(l);
	assert_true(*s >= 0);
	if (tc)
		assert_true((*tc = fcntl(*c, F_DUPFD_CLOEXEC, 0)) >= 0);
	if (ts)
		assert_true((*ts = fcntl(*s, F_DUPFD_CLOEXEC, 0)) >= 0);
	assert_int_equal(setsockopt(*c, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof(tmo)), 0);
	pthread_create(&th, NULL, server_main, &srv);
	assert_int_equal(gdx_tls_client_start(*c, &psk, &hs), 0);
	assert_int_equal(gdx_tls_run(hs, 10000), 0);
	gdx_tls_free(hs);
	pthread_join(th, NULL);
	assert_int_equal(srv.ret, 0);
	/* the relay's end in the socket's place: blocking, close-on-exec, its timeout */
	assert_int_equal(fcntl(*c, F_GETFL) & O_NONBLOCK, 0);
	assert_int_equal(fcntl(*c, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	assert_int_equal(getsockopt(*c, SOL_SOCKET, SO_RCVTIMEO, &got, &tl), 0);
	assert_int_equal(got.tv_sec, 7);
}

static void tls_pair(int *c, int *s)
{
	tls_pair_tcp(c, s, NULL, NULL);
}

static int setup(void **state)
{
	struct gdx_tls_key k;

	(void)state;
	assert_int_equal(gdx_config_set("tls.record", "user"), 0);
	assert_int_equal(gdx_tls_key_parse(KEY, &k), 0);
	return gdx_tls_psk_derive(&k, "test", "relay", &psk);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((i * 2654435761u) >> 13 ^ seed);
}

struct writer {
	int fd;
	const uint8_t *p;
	size_t n;
	bool close;		/* close the descriptor at the end, not shutdown(SHUT_WR) */
	bool open;		/* neither: leave the stream open */
};

/* Writes p in pieces of many sizes, then ends the stream. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;
	size_t off = 0, piece = 1;

	while (off < w->n) {
		size_t len = piece < w->n - off ? piece : w->n - off;
		ssize_t r = send(w->fd, w->p + off, len, MSG_NOSIGNAL);

		if (r <= 0)
			break;
		off += (size_t)r;
		piece = piece * 7 % 70001 + 1;
	}
	if (w->close)
		close(w->fd);
	else if (!w->open)
		shutdown(w->fd, SHUT_WR);
	return NULL;
}

/* Reads until EOF in pieces of many sizes; the byte count. */
static size_t read_all(int fd, uint8_t *p, size_t cap)
{
	size_t off = 0, piece = 3;
	ssize_t r;

	while (off < cap && (r = recv(fd, p + off, piece < cap - off ? piece : cap - off, 0)) > 0) {
		off += (size_t)r;
		piece = piece * 5 % 40009 + 1;
	}
	return off;
}

/*
 * 3 MiB each way, written and read in pieces of 1 byte to 70 KiB (records cut
 * anywhere): the same bytes; a SHUT_WR, then a close, reach the peer as EOF.
 */
static void test_bytes(void **state)
{
	static uint8_t a[3 << 20], b[3 << 20], in[(3 << 20) + 1];
	struct writer w;
	pthread_t th;
	int c, s;

	(void)state;
	tls_pair(&c, &s);
	fill(a, sizeof(a), 1);
	fill(b, sizeof(b), 2);
	w = (struct writer){ .fd = c, .p = a, .n = sizeof(a) };
	pthread_create(&th, NULL, writer_main, &w);
	assert_int_equal(read_all(s, in, sizeof(in)), sizeof(a));
	assert_memory_equal(in, a, sizeof(a));
	pthread_join(th, NULL);
	w = (struct writer){ .fd = s, .p = b, .n = sizeof(b), .close = true };
	pthread_create(&th, NULL, writer_main, &w);
	assert_int_equal(read_all(c, in, sizeof(in)), sizeof(b));
	assert_memory_equal(in, b, sizeof(b));
	pthread_join(th, NULL);
	close(c);
}

/*
 * A peer that stops reading: its writer is stopped (EAGAIN) once a bounded
 * amount is in flight, another connection meanwhile goes on at full speed,
 * and once the peer reads again every byte arrives.
 */
static void test_stalled_peer(void **state)
{
	static uint8_t buf[1 << 20], in[(1 << 20) + 1];
	size_t queued = 0, got = 0;
	struct pollfd p;
	struct writer w;
	pthread_t th;
	int c, s, c2, s2;
	ssize_t r;

	(void)state;
	tls_pair(&c, &s);
	tls_pair(&c2, &s2);
	fill(buf, sizeof(buf), 3);
	fcntl(c, F_SETFL, O_NONBLOCK);
	/* full once nothing moved for 200 ms */
	for (;;) {
		r = send(c, buf, sizeof(buf), MSG_NOSIGNAL);
		if (r > 0) {
			queued += (size_t)r;
			continue;
		}
		assert_int_equal(errno, EAGAIN);
		p = (struct pollfd){ .fd = c, .events = POLLOUT };
		if (!poll(&p, 1, 200))
			break;
		assert_true(queued < (16u << 20));
	}
	/* TCP's buffers (autotuned, a few MiB on loopback), the socketpairs', 64 KiB in the relays */
	assert_true(queued < (16u << 20));

	w = (struct writer){ .fd = c2, .p = buf, .n = sizeof(buf), .close = true };
	pthread_create(&th, NULL, writer_main, &w);
	assert_int_equal(read_all(s2, in, sizeof(in)), sizeof(buf));
	assert_memory_equal(in, buf, sizeof(buf));
	pthread_join(th, NULL);
	close(s2);

	close(c);	/* what it sent still leaves */
	while ((r = recv(s, in, sizeof(in), 0)) > 0)
		got += (size_t)r;
	assert_int_equal(r, 0);
	assert_int_equal(got, queued);
	close(s);
}

/*
 * An application that writes and closes while the peer is still sending to
 * it, never reading (a target's last responses, then its termination PDU):
 * its relay holds a record for it that it cannot take, and sees EPIPE or
 * ECONNRESET on its end, mid-loop or after poll; yet the peer gets every byte
 * the application wrote, then a clean end of stream.
 */
static void test_app_closes_unread(void **state)
{
	static uint8_t buf[256 << 10], last[4 << 20], in[(4 << 20) + 1];
	struct writer w, wl;
	pthread_t th, tl;
	size_t got = 0;
	int c, s, q = -1, was;
	ssize_t r;

	(void)state;
	tls_pair(&c, &s);
	fill(buf, sizeof(buf), 4);
	fill(last, sizeof(last), 5);
	w = (struct writer){ .fd = s, .p = buf, .n = sizeof(buf) };
	pthread_create(&th, NULL, writer_main, &w);
	/* c's end full and its relay holding a record: nothing more arrives for 200 ms */
	do {
		struct pollfd p = { .fd = -1 };

		was = q;
		poll(&p, 0, 200);
		assert_int_equal(ioctl(c, FIONREAD, &q), 0);
	} while (q != was || q <= 0);
	assert_true((size_t)q < sizeof(buf));
	/* the relay busy with these when the close comes */
	wl = (struct writer){ .fd = c, .p = last, .n = sizeof(last), .close = true };
	pthread_create(&tl, NULL, writer_main, &wl);
	while ((r = recv(s, in + got, sizeof(in) - got, 0)) > 0)
		got += (size_t)r;
	assert_int_equal(r, 0);
	assert_int_equal(got, sizeof(last));
	assert_memory_equal(in, last, sizeof(last));
	pthread_join(tl, NULL);
	pthread_join(th, NULL);
	close(s);
}

/*
 * More than the application's socketpair and its relay hold (about 230 KiB),
 * less than those and its TCP socket with RESET_RCVBUF.
 */
#define RESET_BYTES (320u << 10)
#define RESET_RCVBUF (1 << 20)

/*
 * A peer that sends, then resets the connection (a target's termination
 * PDU, then its close with bytes unread) while the application writes to
 * it: the relay's write fails, yet the application reads every byte the
 * peer sent, those still in the TCP socket too, then the end of stream, and
 * its sends fail from there.
 */
static void test_peer_resets(void **state)
{
	static uint8_t buf[RESET_BYTES], in[RESET_BYTES + 1];
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };
	int c, s, tc, ts, rcvbuf = RESET_RCVBUF, q = -1, was, outq, tries = 0;
	struct writer w;
	pthread_t th;
	size_t got = 0;
	ssize_t r;

	(void)state;
	tls_pair_tcp(&c, &s, &tc, &ts);
	assert_int_equal(setsockopt(tc, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
	fill(buf, sizeof(buf), 7);
	w = (struct writer){ .fd = s, .p = buf, .n = sizeof(buf), .open = true };
	pthread_create(&th, NULL, writer_main, &w);
	pthread_join(th, NULL);
	/* all of it past the peer's socket, some still in ours: nothing moves for 200 ms */
	do {
		struct pollfd p = { .fd = -1 };

		assert_true(++tries < 50);
		was = q;
		poll(&p, 0, 200);
		assert_int_equal(ioctl(tc, FIONREAD, &q), 0);
		assert_int_equal(ioctl(ts, SIOCOUTQ, &outq), 0);
	} while (q != was || q <= 0 || outq);
	/* the peer's kernel resets the connection, as a close with bytes unread does */
	assert_int_equal(connect(ts, &unspec, sizeof(unspec)), 0);
	assert_int_equal(send(c, buf, 4096, MSG_NOSIGNAL), 4096);
	while ((r = recv(c, in + got, sizeof(in) - got, 0)) > 0)
		got += (size_t)r;
	assert_true(!r || errno == ECONNRESET);
	assert_int_equal(got, sizeof(buf));
	assert_memory_equal(in, buf, sizeof(buf));
	assert_int_equal(send(c, buf, 1, MSG_NOSIGNAL), -1);
	close(c);
	close(s);
	close(tc);
	close(ts);
}

/*
 * More than the buffers past the writer's socketpair hold (TCP's, made
 * small, the relays', the reader's socketpair: about 300 KiB), less than
 * those and the writer's socketpair (about 200 KiB more).
 */
#define EXIT_BYTES (400u << 10)
#define SMALL_BUF (16 << 10)	/* TCP's buffers, which would otherwise grow to MiBs */

/*
 * The other process of test_exit_live: two TLS connections to port,
 * EXIT_BYTES written on the first, then exit with both open.  0 once all
 * was written.
 */
static int exit_child(unsigned short port)
{
	static uint8_t buf[EXIT_BYTES];
	int small = SMALL_BUF;
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd[2];

	if (setup(NULL))
		return 2;
	for (int i = 0; i < 2; i++) {
		struct gdx_tls_hs *hs;
		int rc;

		fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (setsockopt(fd[i], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) ||
		    connect(fd[i], (struct sockaddr *)&sin, sizeof(sin)) ||
		    gdx_tls_client_start(fd[i], &psk, &hs))
			return 3;
		rc = gdx_tls_run(hs, 10000);
		gdx_tls_free(hs);
		if (rc)
			return 4;
	}
	fill(buf, sizeof(buf), 6);
	for (size_t off = 0; off < sizeof(buf);) {
		ssize_t r = send(fd[0], buf + off, sizeof(buf) - off, MSG_NOSIGNAL);

		if (r <= 0)
			return 5;
		off += (size_t)r;
	}
	return 0;	/* exit, both connections open, their relays running */
}

/*
 * A process that exits with its TLS connections open, one just written to,
 * one idle: as its exit would close its sockets, the peer gets every byte
 * written, then the end of stream, on both; and the exit is clean (no relay
 * runs while OpenSSL's exit cleanup does).  The peer reads nothing for a
 * second, while the writer writes all and exits: tens of KiB are still in
 * the writer's socketpair when exit comes.  The writer is a process of its
 * own (exec), or a child forked from this one, whose relays it then has copies of.
 */
static void exit_live(bool exec)
{
	static uint8_t want[EXIT_BYTES], in[EXIT_BYTES + 1];
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), s[2], status, small = SMALL_BUF;
	struct pollfd none = { .fd = -1 };
	char port[8];
	size_t got = 0;
	ssize_t r;
	pid_t pid;

	assert_int_equal(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(l, 2), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &sl), 0);
	snprintf(port, sizeof(port), "%u", ntohs(sin.sin_port));
	pid = fork();
	assert_true(pid >= 0);
	if (!pid && exec) {
		/* a process of its own: this one's relays and exit handlers are not its */
		execl("/proc/self/exe", "test_tls_relay", "exit-child", port, (char *)NULL);
		_exit(127);
	}
	if (!pid)
		exit(exit_child(ntohs(sin.sin_port)));
	for (int i = 0; i < 2; i++) {
		struct server srv;

		srv.fd = s[i] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		assert_true(s[i] >= 0);
		server_main(&srv);
		assert_int_equal(srv.ret, 0);
	}
	close(l);
	fill(want, sizeof(want), 6);
	poll(&none, 0, 1000);
	while ((r = recv(s[0], in + got, sizeof(in) - got, 0)) > 0)
		got += (size_t)r;
	assert_int_equal(r, 0);
	assert_int_equal(got, sizeof(want));
	assert_memory_equal(in, want, sizeof(want));
	assert_int_equal(recv(s[1], in, 1, 0), 0);
	close(s[0]);
	close(s[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_exit_live(void **state)
{
	(void)state;
	exit_live(true);
}

/* A byte each way on a TLS connection. */
static void ping(int c, int s)
{
	uint8_t b = 0x5a;

	assert_int_equal(send(c, &b, 1, MSG_NOSIGNAL), 1);
	assert_int_equal(recv(s, &b, 1, 0), 1);
	assert_int_equal(b, 0x5a);
	b = 0xa5;
	assert_int_equal(send(s, &b, 1, MSG_NOSIGNAL), 1);
	assert_int_equal(recv(c, &b, 1, 0), 1);
	assert_int_equal(b, 0xa5);
}

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/*
 * A process with live relays forks.  A child that exits at once neither
 * waits for its parent's relays (the exit wait is 5 s) nor touches their
 * connections, which go on both ways; a child that makes relays of its own
 * ends them at its exit as test_exit_live has it, and again the parent's
 * connection goes on.
 */
static void test_fork_live(void **state)
{
	uint64_t t;
	int c, s, status;
	pid_t pid;

	(void)state;
	tls_pair(&c, &s);
	ping(c, s);
	t = now_ms();
	pid = fork();
	assert_true(pid >= 0);
	if (!pid)
		exit(0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(now_ms() - t < 2000);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	ping(c, s);
	exit_live(false);
	ping(c, s);
	close(c);
	close(s);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_stalled_peer),
		cmocka_unit_test(test_app_closes_unread),
		cmocka_unit_test(test_peer_resets),
		cmocka_unit_test(test_exit_live),
		cmocka_unit_test(test_fork_live),
	};

	test_pid = getpid();
	if (argc == 3 && !strcmp(argv[1], "exit-child"))
		return exit_child((unsigned short)atoi(argv[2]));
	return cmocka_run_group_tests(tests, setup, NULL);
}
