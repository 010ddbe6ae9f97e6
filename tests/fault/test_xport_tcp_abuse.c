/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport's server side under abuse (issue 19, items 4 and 5;
 * docs/reliability.md, Transport (tcp)):
 * - a peer that floods read and write requests, good keys and bad, and never
 *   reads an answer: the server's memory stays bounded, the peer's sends
 *   block, and the connection ends after xport.tcp_answers_timeout_ms, while
 *   a second connection of the same server goes on working throughout;
 * - reads whose answers the peer does not read, then a write over them: the
 *   copies the answers take stay within xport.tcp_answers_copy_max;
 * - idle connections that never send a byte: a real client behind them
 *   connects at once, and an accept times out when its timeout says;
 * - a storm of idle connections, more than xport.tcp_handshakes: the
 *   listener holds at most that many, the oldest are dropped, and a real
 *   client behind the storm still connects.
 * Raw peers speak the wire protocol by hand (tests/tcp_frame.h).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>
#include <json-c/json.h>

#include "common/stats.h"

#include "tcp_frame.h"
#include "test.h"

#define T_MAX(a, b) ((a) > (b) ? (a) : (b))

/*
 * What "at once" allows on two loaded cores under a sanitizer: far below the
 * 10 s a connection's handshake took on the accepting thread.
 */
#define SLACK_MS 1500

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The largest value of counter name among the tcp endpoints alive (stats scopes xport.tcp.N). */
static uint64_t tcp_counter_max(const char *name)
{
	struct json_object *root = gdx_stats_json(), *v;
	uint64_t most = 0;

	assert_non_null(root);
	json_object_object_foreach(root, scope, set) {
		if (!strncmp(scope, "xport.tcp.", 10) && json_object_object_get_ex(set, name, &v))
			most = T_MAX(most, json_object_get_uint64(v));
	}
	json_object_put(root);
	return most;
}

static long rss_kib(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	assert_non_null(f);
	assert_int_equal(fscanf(f, "%ld %ld", &pages, &rss), 2);
	fclose(f);
	return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* A TCP connection to the listener that has sent nothing; non-blocking. */
static int raw_connect(const char *addr, int nonblock)
{
	const char *colon = strrchr(addr, ':');
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(atoi(colon + 1)),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);

	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)))
		assert_int_equal(errno, EINPROGRESS);
	return fd;
}

struct acc {
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	int timeout_ms, ret;
	long ms;
};

static void *accept_main(void *arg)
{
	struct acc *a = arg;
	long t0 = now_ms();

	a->ret = gdx_xport_accept(a->l, a->cq, a->timeout_ms, &a->ep);
	a->ms = now_ms() - t0;
	return NULL;
}

/* A client with a 3 s handshake; its connect's time in *ms. */
static int client_connect(struct gdx_xport_listener *l, struct gdx_xport_cq *cq,
			  struct gdx_xport_ep **ep, long *ms)
{
	struct gdx_xport_opts o;
	long t0 = now_ms();
	int ret;

	gdx_xport_opts_init(&o, sizeof(o));
	o.timeout_ms = 3000;
	ret = gdx_xport_connect(gdx_xport_listener_addr(l), &o, cq, ep);
	*ms = now_ms() - t0;
	return ret;
}

/* ---- (a) a peer that asks and never reads the answers --------------------- */

enum {
	FLOOD_FRAMES = 1000000,	/* 56 MB of frames; unbounded, their answers took ~140 MB */
	ANSWERS_MAX = 256,
	ANSWERS_TIMEOUT_MS = 2000,
	/* the bound, plus the answers the receive thread batches before it queues them */
	ANSWERS_PEAK = ANSWERS_MAX + 64,
	/* what the answers take is far less; this is the sanitizers' and allocators' slack */
	RSS_BOUND_KIB = 64 << 10,
};

struct flood {
	int fd;
	uint64_t key, addr;
	long frames;				/* the flooder's until it ended */
	atomic_long stalled_at, ended_at;	/* stalled: a send blocked 200 ms */
	atomic_int stop;
};

/* Read and write requests in turns, to the region and to a bad key, never reading. */
static void *flood_main(void *arg)
{
	struct flood *fl = arg;
	static unsigned char buf[64 << 10];
	size_t len = 0, off = 0;
	long t_end = now_ms() + 20000;

	while (!atomic_load(&fl->stop) && now_ms() < t_end) {
		struct pollfd pfd = { .fd = fl->fd, .events = POLLOUT };
		ssize_t n;

		if (off == len) {
			if (fl->frames >= FLOOD_FRAMES)
				break;
			for (len = off = 0; len + 64 <= sizeof(buf) && fl->frames < FLOOD_FRAMES;
			     fl->frames++) {
				unsigned k = (unsigned)fl->frames & 3;
				struct frame f = {
					.type = k < 2 ? TF_READ : TF_WRITE,
					.id = (uint64_t)fl->frames,
					.raddr = fl->addr,
					.key = k & 1 ? fl->key ^ 0x5a5a0000u : fl->key,
					.len = k < 2 ? 64 : 16,
				};

				memcpy(buf + len, &f, sizeof(f));
				len += sizeof(f);
				if (f.type == TF_WRITE) {
					memset(buf + len, (int)k, 16);
					len += 16;
				}
			}
		}
		n = send(fl->fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			break;	/* the server ended it */
		if (!poll(&pfd, 1, 200) && !atomic_load(&fl->stalled_at))
			atomic_store(&fl->stalled_at, now_ms());
	}
	atomic_store(&fl->ended_at, now_ms());
	return NULL;
}

/*
 * The flood goes to one connection of a server while a client on a second
 * connection reads the server's memory in a loop: every read completes,
 * none slower than SLACK_MS, before, during and after the flood.
 */
static void test_flood_unread_answers(void **state)
{
	static unsigned char region[4096], good[4096], got[64];
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *scq, *ccq;
	struct gdx_xport_ep *flood_ep, *srv_ep, *cli_ep;
	struct gdx_xport_mr *fmr, *gmr;
	struct gdx_xport_cqe e;
	struct flood fl = { 0 };
	struct acc a = { 0 };
	struct frame f = { .type = TF_HELLO, .imm = TCP_HELLO_MAGIC, .id = 1 };
	pthread_t th;
	long t0, rss0, rss_max = 0, srv_end = 0, reads = 0, slowest = 0, ms;
	uint64_t peak = 0, held_back = 0;

	(void)state;
	assert_int_equal(gdx_config_set("xport.tcp_answers_max", "256"), 0);
	assert_int_equal(gdx_config_set("xport.tcp_answers_timeout_ms", "2000"), 0);
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", NULL, &l), 0);
	assert_int_equal(gdx_xport_cq_create(&scq), 0);
	assert_int_equal(gdx_xport_cq_create(&ccq), 0);

	/* the flooding peer: a raw socket that does the hello */
	a = (struct acc){ .l = l, .cq = scq, .timeout_ms = 10000 };
	pthread_create(&th, NULL, accept_main, &a);
	fl.fd = raw_connect(gdx_xport_listener_addr(l), 0);
	assert_int_equal(send(fl.fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
	assert_int_equal(recv(fl.fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	flood_ep = a.ep;
	assert_int_equal(gdx_xport_mr_reg(flood_ep, region, sizeof(region),
					  GDX_XPORT_ACCESS_REMOTE_READ | GDX_XPORT_ACCESS_REMOTE_WRITE,
					  &fmr), 0);
	fl.key = gdx_xport_mr_key(fmr);
	fl.addr = gdx_xport_mr_addr(fmr);

	/* the well-behaved client */
	a = (struct acc){ .l = l, .cq = scq, .timeout_ms = 10000 };
	pthread_create(&th, NULL, accept_main, &a);
	assert_int_equal(client_connect(l, ccq, &cli_ep, &ms), 0);
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	srv_ep = a.ep;
	t_fill(good, sizeof(good), 5);
	assert_int_equal(gdx_xport_mr_reg(srv_ep, good, sizeof(good),
					  GDX_XPORT_ACCESS_REMOTE_READ, &gmr), 0);

	rss0 = rss_kib();
	t0 = now_ms();
	pthread_create(&th, NULL, flood_main, &fl);
	/* reads on the good connection until a second after the flooder's end */
	while (!atomic_load(&fl.ended_at) || now_ms() < atomic_load(&fl.ended_at) + 1000) {
		long t1 = now_ms(), r;

		assert_int_equal(gdx_xport_post_read(cli_ep, got, sizeof(got),
						     gdx_xport_mr_addr(gmr) + 64 * (reads & 63),
						     gdx_xport_mr_key(gmr), (uint64_t)reads, 0), 0);
		while (!(r = gdx_xport_cq_poll(ccq, &e, 1)))
			assert_int_equal(gdx_xport_cq_wait(ccq, SLACK_MS), 1);
		assert_int_equal(r, 1);
		assert_int_equal(e.status, 0);
		assert_memory_equal(got, good + 64 * (reads & 63), sizeof(got));
		reads++;
		slowest = T_MAX(slowest, now_ms() - t1);
		rss_max = T_MAX(rss_max, rss_kib() - rss0);
		if (!srv_end && !gdx_xport_ep_connected(flood_ep)) {
			srv_end = now_ms();
			peak = tcp_counter_max("answers_peak");
			held_back = tcp_counter_max("held_back");
			/* closing the socket resets the connection: the flooder's send fails */
			gdx_xport_mr_dereg(fmr);
			gdx_xport_ep_destroy(flood_ep);
			flood_ep = NULL;
		}
		if (now_ms() - t0 > 25000) {
			atomic_store(&fl.stop, 1);
			break;
		}
		usleep(2000);
	}
	pthread_join(th, NULL);
	print_message("flood: %ld frames sent in %ld ms, stalled after %ld ms, ended by the "
		      "server after %ld ms; %llu answers queued at most, %llu hold-backs; server "
		      "RSS +%ld KiB at most; %ld reads on the other connection meanwhile, the "
		      "slowest %ld ms\n", fl.frames, fl.ended_at - t0,
		      fl.stalled_at ? fl.stalled_at - t0 : -1, srv_end ? srv_end - t0 : -1,
		      (unsigned long long)peak, (unsigned long long)held_back, rss_max, reads,
		      slowest);
	if (rss_max > RSS_BOUND_KIB)
		fail_msg("the server grew by %ld KiB under the flood", rss_max);
	if (!fl.stalled_at || fl.frames >= FLOOD_FRAMES)
		fail_msg("the flooder was never slowed: %ld frames sent", fl.frames);
	if (!srv_end)
		fail_msg("the server never ended the flooding connection");
	if (peak > ANSWERS_PEAK || !held_back)
		fail_msg("%llu answers queued at once (bound %d), %llu hold-backs",
			 (unsigned long long)peak, ANSWERS_PEAK, (unsigned long long)held_back);
	/* ended by the timeout, counted from when the server stopped reading (before the stall) */
	assert_true(srv_end - fl.stalled_at < ANSWERS_TIMEOUT_MS + 3000);
	assert_true(srv_end - t0 >= ANSWERS_TIMEOUT_MS);
	assert_true(slowest < SLACK_MS);
	assert_true(reads >= 50);
	if (flood_ep) {
		gdx_xport_mr_dereg(fmr);
		gdx_xport_ep_destroy(flood_ep);
	}
	close(fl.fd);
	gdx_xport_mr_dereg(gmr);
	gdx_xport_ep_destroy(cli_ep);
	gdx_xport_ep_destroy(srv_ep);
	gdx_xport_listener_close(l);
	assert_int_equal(gdx_xport_cq_destroy(scq), 0);
	assert_int_equal(gdx_xport_cq_destroy(ccq), 0);
	gdx_config_set("xport.tcp_answers_max", NULL);
	gdx_config_set("xport.tcp_answers_timeout_ms", NULL);
}

/*
 * Reads of a whole region whose answers the peer does not read, then a write
 * of one byte over them: each answer not sent yet takes a private copy of
 * what it still has to send (ordering rule 1).  Those copies stay within
 * xport.tcp_answers_copy_max (16 MiB here); the write that would need more is
 * refused, the region left as it was.  Unbounded, the copies took 150+ MiB.
 */
static void test_write_over_unread_answers(void **state)
{
	enum { REGION = 1 << 20, READS = 240, COPY_MAX = 16 << 20 };
	static unsigned char region[REGION];
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	struct gdx_xport_mr *mr;
	struct gdx_xport_cqe e;
	struct acc a = { 0 };
	struct frame f = { .type = TF_HELLO, .imm = TCP_HELLO_MAGIC, .id = 1 };
	unsigned char one = 0xee, msg[8] = { 0 }, got[8];
	pthread_t th;
	long rss0, grew;
	uint64_t copies;
	int fd, r;

	(void)state;
	assert_int_equal(gdx_config_set("xport.tcp_answers_copy_max", "16M"), 0);
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", NULL, &l), 0);
	assert_int_equal(gdx_xport_cq_create(&cq), 0);
	a = (struct acc){ .l = l, .cq = cq, .timeout_ms = 10000 };
	pthread_create(&th, NULL, accept_main, &a);
	fd = raw_connect(gdx_xport_listener_addr(l), 0);
	assert_int_equal(send(fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
	assert_int_equal(recv(fd, &f, sizeof(f), MSG_WAITALL), sizeof(f));
	pthread_join(th, NULL);
	assert_int_equal(a.ret, 0);
	ep = a.ep;
	memset(region, 0x11, sizeof(region));
	assert_int_equal(gdx_xport_mr_reg(ep, region, sizeof(region),
					  GDX_XPORT_ACCESS_REMOTE_READ | GDX_XPORT_ACCESS_REMOTE_WRITE,
					  &mr), 0);
	/* a message behind the write says when the server has taken it */
	assert_int_equal(gdx_xport_post_recv(ep, got, sizeof(got), 1), 0);
	rss0 = rss_kib();
	for (int i = 0; i < READS; i++) {
		f = (struct frame){ .type = TF_READ, .id = (uint64_t)i, .raddr = gdx_xport_mr_addr(mr),
				    .key = gdx_xport_mr_key(mr), .len = REGION };
		assert_int_equal(send(fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
	}
	f = (struct frame){ .type = TF_WRITE, .id = READS, .raddr = gdx_xport_mr_addr(mr),
			    .key = gdx_xport_mr_key(mr), .len = 1 };
	assert_int_equal(send(fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
	assert_int_equal(send(fd, &one, 1, MSG_NOSIGNAL), 1);
	f = (struct frame){ .type = TF_SEND, .id = READS + 1, .len = sizeof(msg) };
	assert_int_equal(send(fd, &f, sizeof(f), MSG_NOSIGNAL), sizeof(f));
	assert_int_equal(send(fd, msg, sizeof(msg), MSG_NOSIGNAL), sizeof(msg));
	while (!(r = gdx_xport_cq_poll(cq, &e, 1)))
		assert_int_equal(gdx_xport_cq_wait(cq, 10000), 1);
	assert_int_equal(r, 1);
	assert_int_equal(e.status, 0);
	grew = rss_kib() - rss0;
	copies = tcp_counter_max("answer_copies_peak");
	print_message("%d unread reads of 1 MiB, then a write over them: copies of %llu KiB at "
		      "most, RSS +%ld KiB, the byte written %s\n", READS,
		      (unsigned long long)copies >> 10, grew, region[0] == one ? "landed" : "refused");
	if (!copies || copies > COPY_MAX)
		fail_msg("the answers held %llu bytes of copies at once (bound %d)",
			 (unsigned long long)copies, COPY_MAX);
#ifndef __SANITIZE_THREAD__	/* whose shadow of what the copies took is 4 times more */
	if (grew > (48 << 10))
		fail_msg("the answers' copies grew the server by %ld KiB", grew);
#endif
	assert_int_equal(region[0], 0x11);
	close(fd);
	while (gdx_xport_ep_connected(ep))
		usleep(1000);
	gdx_xport_mr_dereg(mr);
	gdx_xport_ep_destroy(ep);
	gdx_xport_listener_close(l);
	assert_int_equal(gdx_xport_cq_destroy(cq), 0);
	gdx_config_set("xport.tcp_answers_copy_max", NULL);
}

/* ---- (b) idle connections ahead of a real client -------------------------- */

enum { IDLE = 8 };

static void test_idle_connections(void **state)
{
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep, *cli;
	struct acc a;
	pthread_t th;
	int idle[IDLE], ret;
	long ms;

	(void)state;
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", NULL, &l), 0);	/* 10 s handshakes */
	assert_int_equal(gdx_xport_cq_create(&cq), 0);
	for (int i = 0; i < IDLE; i++)
		idle[i] = raw_connect(gdx_xport_listener_addr(l), 0);

	/* nothing but idle connections: the accept returns at its timeout */
	a = (struct acc){ .l = l, .cq = cq, .timeout_ms = 200 };
	accept_main(&a);
	print_message("accept(200 ms) with %d idle connections: %ld ms\n", IDLE, a.ms);
	assert_int_equal(a.ret, -ETIMEDOUT);
	if (a.ms < 190 || a.ms > SLACK_MS)
		fail_msg("accept with a 200 ms timeout returned after %ld ms", a.ms);

	/* a real client behind them */
	a = (struct acc){ .l = l, .cq = cq, .timeout_ms = 10000 };
	pthread_create(&th, NULL, accept_main, &a);
	ret = client_connect(l, cq, &cli, &ms);
	pthread_join(th, NULL);
	print_message("connect behind %d idle connections: %ld ms (accept: %ld ms)\n", IDLE, ms,
		      a.ms);
	if (ret)
		fail_msg("connect behind %d idle connections: %s", IDLE, gdx_strerror(ret));
	assert_int_equal(a.ret, 0);
	assert_true(ms < SLACK_MS);
	ep = a.ep;
	assert_non_null(ep);

	/* and an accept with nothing coming still says when it said */
	a = (struct acc){ .l = l, .cq = cq, .timeout_ms = 200 };
	accept_main(&a);
	assert_int_equal(a.ret, -ETIMEDOUT);
	assert_true(a.ms >= 190 && a.ms <= SLACK_MS);
	for (int i = 0; i < IDLE; i++)
		close(idle[i]);
	gdx_xport_ep_destroy(cli);
	gdx_xport_ep_destroy(ep);
	gdx_xport_listener_close(l);
	assert_int_equal(gdx_xport_cq_destroy(cq), 0);
}

/* ---- (c) a storm of connections -------------------------------------------- */

enum { STORM = 300, WAVE = 30, HANDSHAKES = 32 };

static void test_connection_storm(void **state)
{
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *cli;
	struct acc a;
	pthread_t th;
	static int fd[STORM];
	int fds0, hung_up, helloed, most = 0;
	long t_end, ms;

	(void)state;
	assert_int_equal(gdx_config_set("xport.tcp_handshakes", "32"), 0);
	assert_int_equal(gdx_xport_listen("tcp://127.0.0.1:0", NULL, &l), 0);
	assert_int_equal(gdx_xport_cq_create(&cq), 0);
	fds0 = open_fds();
	a = (struct acc){ .l = l, .cq = cq, .timeout_ms = 15000 };
	pthread_create(&th, NULL, accept_main, &a);
	/*
	 * In waves that fit the listening socket's backlog (connections beyond
	 * it wait for the client's SYN retry, seconds): each one is taken in and
	 * hears the hello; all but the last HANDSHAKES are dropped.
	 */
	for (int w = 0; w < STORM; w += WAVE) {
		t_end = now_ms() + 5000;
		for (int i = w; i < w + WAVE; i++)
			fd[i] = raw_connect(gdx_xport_listener_addr(l), 1);
		do {
			usleep(5000);
			helloed = 0;
			for (int i = w; i < w + WAVE; i++) {
				struct pollfd pfd = { .fd = fd[i], .events = POLLIN };

				helloed += poll(&pfd, 1, 0) == 1;
			}
			/* the listener's sockets: those open beyond the clients' and the baseline */
			most = T_MAX(most, open_fds() - fds0 - (w + WAVE));
		} while (helloed < WAVE && now_ms() < t_end);
		if (helloed < WAVE)
			fail_msg("%d of a wave of %d connections heard no hello in 5 s",
				 WAVE - helloed, WAVE);
	}
	t_end = now_ms() + 3000;
	do {
		hung_up = 0;
		for (int i = 0; i < STORM; i++) {
			struct pollfd pfd = { .fd = fd[i], .events = POLLRDHUP };

			hung_up += poll(&pfd, 1, 0) == 1;
		}
	} while (hung_up < STORM - HANDSHAKES && now_ms() < t_end && !usleep(10000));
	print_message("storm of %d: %d dropped, at most %d held by the listener\n", STORM,
		      hung_up, most);
	assert_int_equal(hung_up, STORM - HANDSHAKES);
	assert_true(most <= HANDSHAKES + 2);
	assert_int_equal(client_connect(l, cq, &cli, &ms), 0);
	pthread_join(th, NULL);
	print_message("connect behind the storm: %ld ms\n", ms);
	assert_int_equal(a.ret, 0);
	assert_true(ms < SLACK_MS);
	for (int i = 0; i < STORM; i++)
		close(fd[i]);
	gdx_xport_ep_destroy(cli);
	gdx_xport_ep_destroy(a.ep);
	gdx_xport_listener_close(l);
	assert_int_equal(gdx_xport_cq_destroy(cq), 0);
	gdx_config_set("xport.tcp_handshakes", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_connections),
		cmocka_unit_test(test_connection_storm),
		cmocka_unit_test(test_flood_unread_answers),
		cmocka_unit_test(test_write_over_unread_answers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
