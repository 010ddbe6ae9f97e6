/* SPDX-License-Identifier: MIT */
/*
 * gdx bench xport: bandwidth and latency of the transport by message size,
 * both ends in this process, each beside the ceiling measured in the same run
 * with the same sizes:
 *
 *   tcp://   raw TCP sockets on the same loopback: one stream whose writes
 *            each carry `depth` messages of size bytes (bandwidth), and the raw
 *            request/response of tcp_rr.c with size bytes each way, half of
 *            it (latency; `gdx bench nvmf-host` uses the same)
 *   rdma://  perftest on the same device through rdma_cm: ib_write_bw /
 *            ib_read_bw / ib_send_bw, and ib_send_lat (needs them in PATH)
 *   device memory on either side: also pinned host <-> device copies of the
 *            same size (the ceiling is the lower of the two)
 *
 * Bandwidth keeps `depth` requests of the operation in flight (sends: the
 * server keeps twice as many receives posted); latency is half
 * the round trip of a send answered by a send, between the same two buffers.
 * "dst path" is the path of the server's buffer (where writes and sends land,
 * where reads come from).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/xport.h>

#include <json-c/json.h>

#include "args.h"
#include "bench_xport.h"
#include "ceiling.h"
#include "memspec.h"
#include "sockwatch.h"
#include "sort.h"
#include "tcp_rr.h"
#include "common/config.h"
#include "common/sock.h"
#include "common/stats.h"
#include "common/util.h"

extern char **environ;

enum op { OP_WRITE, OP_READ, OP_SEND };
static const char *const op_names[] = { "write", "read", "send" };

struct mem {
	struct gdx_device *dev;	/* NULL: host */
	size_t off;		/* buffers start this far into their allocation (+OFF) */
	char name[24];
};

struct cfg {
	char addr[128];
	const char *scheme;
	enum op op;
	struct mem src, dst;
	unsigned depth;
	double secs;
	size_t sizes[16];
	int nsizes;
	int no_ceiling;
	int busy;		/* spin on the CQ instead of sleeping */
	int runs;		/* measurements of each figure, interleaved; the median counts */
	/* send bandwidth, summed over a size's runs: receives, and those a message waited for */
	uint64_t recvs, unexpected;
	uint64_t max_unexpected;	/* the server's (tcp, loop); UINT64_MAX: the default */
	unsigned rx_depth;	/* receives the server keeps posted for sends (0: twice depth) */
	uint64_t sr[5];		/* tcp: sr_count's, summed over a size's bandwidth runs */
	const char *tls_key, *tls_identity;	/* tcp: TLS 1.3 PSK on both ends (NULL: none) */
	bool sockets;		/* tcp: sample where the bandwidth runs' bytes wait */
	bool window;		/* tcp: also raw TCP with the depth's messages answered */
	struct sockwatch_tally sw;	/* and the samples, summed over a size's runs */
};

/*
 * tcp's counters summed over the endpoints alive (scopes xport.tcp.N): device
 * payloads sent through the stage ring, those queued late, and those of them
 * the transmit thread copied itself; kept messages the receive thread copied
 * on from its kept ring, and from host memory (docs/xport.md).  The bench's
 * endpoints live while a figure is measured, so the counts are read before
 * each one ends.
 */
static void sr_count(uint64_t v[5])
{
	static const char *const names[5] = { "sr_frames", "sr_late", "sr_tx_copied",
					      "kept_ring", "kept_host" };
	struct json_object *root = gdx_stats_json(), *o;

	if (!root)
		return;
	json_object_object_foreach(root, scope, set) {
		if (strncmp(scope, "xport.tcp.", 10))
			continue;
		for (int i = 0; i < 5; i++)
			if (json_object_object_get_ex(set, names[i], &o))
				v[i] += json_object_get_uint64(o);
	}
	json_object_put(root);
}

static void *mem_alloc(struct mem *m, size_t n)
{
	void *p = NULL;

	if (m->dev) {
		if (gdx_device_malloc(m->dev, m->off + n, &p))
			return NULL;
		return (char *)p + m->off;
	}
	if (posix_memalign(&p, 4096, m->off + n))
		return NULL;
	memset(p, 0x3c, m->off + n);
	return (char *)p + m->off;
}

static void mem_free(struct mem *m, void *p)
{
	if (!p)
		return;
	p = (char *)p - m->off;
	if (m->dev)
		gdx_device_free(m->dev, p);
	else
		free(p);
}

/* ---- gdx ----------------------------------------------------------------- */

/*
 * No completion for this long means one was lost: the run fails with a message
 * rather than hanging (a round trip takes milliseconds even on a loaded host).
 */
#define STALL_NS (20ull * 1000000000ull)

/* Waits (or spins) on cq a while; -ETIMEDOUT, said why, when nothing completed since `since`. */
static int cq_wait_bounded(struct gdx_xport_cq *cq, int busy, uint64_t since, const char *what)
{
	if (!busy) {
		int r = gdx_xport_cq_wait(cq, 1000);

		if (r)
			return r < 0 ? r : 0;
	}
	if (gdx_now_ns() - since < STALL_NS)
		return 0;
	fprintf(stderr, "gdx bench xport: %s: no completion for %llu s; a completion or message "
		"was lost\n", what, STALL_NS / 1000000000ull);
	return -ETIMEDOUT;
}

struct server {
	struct gdx_xport_listener *l;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
	struct cfg *c;
	size_t size;
	void *buf;
	int echo;		/* answer each receive with a send (latency) */
	enum gdx_xport_path path;	/* of the last receive */
	uint64_t recvs, unexpected;	/* receives completed; those whose message came first */
	int stop;			/* set by the client's thread: atomic */
	int err;
};

static void *accept_main(void *arg)
{
	struct server *s = arg;

	s->err = gdx_xport_accept(s->l, s->cq, 30000, &s->ep);
	return NULL;
}

/* The client is done (it sets stop while this thread serves). */
static int stopping(const struct server *s)
{
	return __atomic_load_n(&s->stop, __ATOMIC_RELAXED);
}

/* Serves receives: reposts them (send bandwidth) or answers each (latency). */
static void *serve_main(void *arg)
{
	struct server *s = arg;
	struct gdx_xport_cqe e[32];

	while (!stopping(s)) {
		int got = gdx_xport_cq_poll(s->cq, e, 32);

		if (got < 0) {
			s->err = got;
			return NULL;
		}
		if (!got) {
			if (!s->c->busy)
				gdx_xport_cq_wait(s->cq, 100);
			continue;
		}
		for (int i = 0; i < got; i++) {
			if (e[i].status) {
				if (!stopping(s) && e[i].status != GDX_EDISCONNECTED)
					s->err = e[i].status;
				return NULL;
			}
			if (e[i].op == GDX_XPORT_OP_RECV) {
				s->path = e[i].path;
				s->recvs++;
				if (e[i].flags & GDX_XPORT_CQE_UNEXPECTED)
					s->unexpected++;
				/*
				 * Receive first: the answer makes the client send again at
				 * once, and a message finding no receive waits for a
				 * receiver-not-ready retry on verbs.
				 */
				s->err = gdx_xport_post_recv(s->ep, s->buf, s->size, e[i].wr_id);
				if (!s->err && s->echo)
					s->err = gdx_xport_post_send(s->ep, s->buf, e[i].len, 1000,
								     GDX_XPORT_UNSIGNALED);
				if (s->err) {
					/* The client hanging up at the end is no error. */
					if (stopping(s) || s->err == GDX_EDISCONNECTED)
						s->err = 0;
					return NULL;
				}
			}
		}
	}
	return NULL;
}

/*
 * Posts the server's receives, then serves them on thread th: the client sends
 * only once they are all there, as perftest's do.  Twice the sender's window,
 * as perftest's receive depth exceeds its send depth: a receive is posted again
 * only once the thread has seen the last one complete, and a send finding none
 * posted meanwhile is kept as unexpected (tcp, loop: one more copy, a
 * synchronous one into device memory) or retried after receiver-not-ready
 * (verbs).  A first message kept could keep every later one so (docs/xport.md).
 */
static int serve_start(struct server *s, pthread_t *th)
{
	unsigned n = s->echo ? 1 : s->c->rx_depth ? s->c->rx_depth : 2 * s->c->depth;

	for (unsigned i = 0; i < n; i++) {
		int r = gdx_xport_post_recv(s->ep, s->buf, s->size, i);

		if (r)
			return r;
	}
	return pthread_create(th, NULL, serve_main, s) ? -EAGAIN : 0;
}

struct conn {
	struct server s;
	pthread_t th;
	struct gdx_xport_cq *cq;
	struct gdx_xport_ep *ep;
};

static int conn_open(struct cfg *c, struct conn *k)
{
	struct gdx_xport_opts o;
	pthread_t th;
	int ret;

	memset(k, 0, sizeof(*k));
	gdx_xport_opts_init(&o, sizeof(o));
	o.sq_depth = o.rq_depth = GDX_MAX(GDX_MAX(c->depth * 2, c->rx_depth), 64u);
	o.dev = c->dst.dev ? c->dst.dev : c->src.dev;
	if (c->max_unexpected != UINT64_MAX)
		o.max_unexpected = c->max_unexpected;
	o.tls_key = c->tls_key;
	o.tls_identity = c->tls_identity;
	k->s.c = c;
	ret = gdx_xport_listen(c->addr, &o, &k->s.l);
	if (!ret)
		ret = gdx_xport_cq_create(&k->s.cq);
	if (!ret)
		ret = gdx_xport_cq_create(&k->cq);
	if (ret)
		return ret;
	pthread_create(&th, NULL, accept_main, &k->s);
	ret = gdx_xport_connect(gdx_xport_listener_addr(k->s.l), &o, k->cq, &k->ep);
	pthread_join(th, NULL);
	return ret ? ret : k->s.err;
}

static void conn_close(struct conn *k)
{
	gdx_xport_ep_destroy(k->ep);
	gdx_xport_ep_destroy(k->s.ep);
	gdx_xport_listener_close(k->s.l);
	gdx_xport_cq_destroy(k->cq);
	gdx_xport_cq_destroy(k->s.cq);
}

/* The port of the listener at tcp://HOST:PORT. */
static unsigned listener_port(struct gdx_xport_listener *l)
{
	const char *colon = strrchr(gdx_xport_listener_addr(l), ':');

	return colon ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
}

/* Bandwidth in bytes/s of `op` with `depth` in flight, or a negative code. */
static double gdx_bw(struct cfg *c, size_t size, const char **path)
{
	struct sockwatch *sw = NULL;
	struct gdx_xport_mr *mr = NULL;
	struct gdx_xport_cqe e[32];
	struct conn k;
	void *src, *dst;
	uint64_t t0, deadline, done = 0, posted = 0, last;
	unsigned inflight = 0;
	double ret;
	int r;

	if ((r = conn_open(c, &k)))
		return r;
	src = mem_alloc(&c->src, size);
	dst = mem_alloc(&c->dst, size);
	if (!src || !dst)
		return -ENOMEM;
	/* The data flows src (client) -> dst (server) for write and send, dst -> src for read. */
	if (c->op == OP_SEND) {
		k.s.buf = dst;
		k.s.size = size;
		if ((r = serve_start(&k.s, &k.th))) {
			conn_close(&k);
			mem_free(&c->src, src);
			mem_free(&c->dst, dst);
			return r;
		}
	} else {
		r = gdx_xport_mr_reg(k.s.ep, dst, size, c->op == OP_WRITE ?
				     GDX_XPORT_ACCESS_REMOTE_WRITE : GDX_XPORT_ACCESS_REMOTE_READ, &mr);
		if (r)
			return r;
		*path = gdx_xport_path_name(gdx_xport_mr_path(mr, NULL));
	}
	if (c->sockets && (r = sockwatch_start(&sw, listener_port(k.s.l), &inflight, c->depth))) {
		ret = r;
		goto out;
	}
	t0 = last = gdx_now_ns();
	deadline = t0 + (uint64_t)(c->secs * 1e9);
	ret = 0;
	for (;;) {
		int n;

		while (inflight < c->depth && gdx_now_ns() < deadline) {
			if (c->op == OP_SEND)
				r = gdx_xport_post_send(k.ep, src, size, posted, 0);
			else if (c->op == OP_WRITE)
				r = gdx_xport_post_write(k.ep, src, size, gdx_xport_mr_addr(mr),
							 gdx_xport_mr_key(mr), posted, 0);
			else
				r = gdx_xport_post_read(k.ep, src, size, gdx_xport_mr_addr(mr),
							gdx_xport_mr_key(mr), posted, 0);
			if (r == -EAGAIN)
				break;
			if (r) {
				ret = r;
				goto out;
			}
			posted++;
			/* atomic for the socket sampler (--sockets), the only other reader */
			__atomic_store_n(&inflight, inflight + 1, __ATOMIC_RELAXED);
		}
		if (!inflight)
			break;
		n = gdx_xport_cq_poll(k.cq, e, 32);
		if (n < 0) {
			ret = n;
			goto out;
		}
		if (!n) {
			/* verbs spins like perftest; tcp sleeps (its threads need the CPUs). */
			if ((r = cq_wait_bounded(k.cq, c->busy, last, "bandwidth"))) {
				ret = r;
				goto out;
			}
			continue;
		}
		last = gdx_now_ns();
		for (int i = 0; i < n; i++) {
			if (e[i].status) {
				ret = e[i].status;
				goto out;
			}
			__atomic_store_n(&inflight, inflight - 1, __ATOMIC_RELAXED);
			done += e[i].len;
		}
	}
	ret = (double)done / ((double)(gdx_now_ns() - t0) / 1e9);
out:
	if (sw)
		sockwatch_stop(sw, &c->sw);
	sr_count(c->sr);
	__atomic_store_n(&k.s.stop, 1, __ATOMIC_RELAXED);
	if (mr)
		gdx_xport_mr_dereg(mr);
	gdx_xport_disconnect(k.ep);
	if (c->op == OP_SEND) {
		pthread_join(k.th, NULL);
		*path = gdx_xport_path_name(k.s.path);
		c->recvs += k.s.recvs;
		c->unexpected += k.s.unexpected;
	}
	if (!ret && k.s.err)
		ret = k.s.err;
	conn_close(&k);
	mem_free(&c->src, src);
	mem_free(&c->dst, dst);
	return ret;
}

/* Half the round trip of a size-byte send answered by one, in microseconds. */
static double gdx_lat(struct cfg *c, size_t size)
{
	struct gdx_xport_cqe e;
	struct conn k;
	void *src, *dst;
	uint64_t t0, deadline, iters = 0;
	double ret = 0;
	int r;

	if ((r = conn_open(c, &k)))
		return r;
	src = mem_alloc(&c->src, size);
	dst = mem_alloc(&c->dst, size);
	if (!src || !dst)
		return -ENOMEM;
	k.s.buf = dst;
	k.s.size = size;
	k.s.echo = 1;
	if ((r = serve_start(&k.s, &k.th))) {
		conn_close(&k);
		mem_free(&c->src, src);
		mem_free(&c->dst, dst);
		return r;
	}
	t0 = gdx_now_ns();
	deadline = t0 + (uint64_t)(c->secs * 1e9);
	while (gdx_now_ns() < deadline) {
		uint64_t sent = gdx_now_ns();
		int got = 0;

		if ((r = gdx_xport_post_recv(k.ep, src, size, 1)) ||
		    (r = gdx_xport_post_send(k.ep, src, size, 2, GDX_XPORT_UNSIGNALED))) {
			ret = r;
			break;
		}
		/*
		 * tcp sleeps on the CQ rather than spin: the progress threads of both
		 * ends need the CPUs too.  verbs has none and spins, like perftest.
		 */
		while (!got) {
			r = gdx_xport_cq_poll(k.cq, &e, 1);
			if (r < 0 || (r == 1 && e.status)) {
				ret = r < 0 ? r : e.status;
				goto out;
			}
			if (!r && (r = cq_wait_bounded(k.cq, c->busy, sent, "latency"))) {
				ret = r;
				goto out;
			}
			got = r == 1 && e.op == GDX_XPORT_OP_RECV;
		}
		iters++;
	}
	ret = (double)(gdx_now_ns() - t0) / 1e3 / (double)iters / 2;
out:
	__atomic_store_n(&k.s.stop, 1, __ATOMIC_RELAXED);
	gdx_xport_disconnect(k.ep);
	pthread_join(k.th, NULL);
	if (ret >= 0 && k.s.err)
		ret = k.s.err;
	conn_close(&k);
	mem_free(&c->src, src);
	mem_free(&c->dst, dst);
	return ret;
}

/* ---- ceilings: raw TCP ------------------------------------------------------ */

struct sockpair {
	int a, b;
};

static int tcp_pair(struct sockpair *p)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (l < 0 || bind(l, (struct sockaddr *)&sin, sl) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&sin, &sl))
		return -errno;
	p->a = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(p->a, (struct sockaddr *)&sin, sl))
		return -errno;
	p->b = accept(l, NULL, NULL);
	close(l);
	setsockopt(p->a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(p->b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return p->b < 0 ? -errno : 0;
}

struct sink {
	int fd;
	size_t size;
	uint64_t got;
};

#define SINK_MAX ((size_t)256 << 10)

/*
 * Messages a raw sender writes a call: its window, but at most RAW_WRITE_MAX
 * bytes (one message at least).  A write of a window of large messages (16
 * MiB at 1 MiB, depth 16) waits for the send buffer with most of it still
 * to copy, and the receiver idles meanwhile: such a stream ran at 0.6 of the
 * same messages written one a call, below the transport, whose writes are
 * trains of about 1 MiB (a larger frame goes alone or after small ones).
 */
#define RAW_WRITE_MAX ((size_t)1 << 20)

static int raw_batch(unsigned depth, size_t size)
{
	size_t n = GDX_MIN((size_t)GDX_MIN(depth, (unsigned)IOV_MAX), RAW_WRITE_MAX / size);

	return (int)GDX_MAX(n, (size_t)1);
}

/*
 * Reads size bytes a call, waiting for all of them (MSG_WAITALL) as a receiver
 * that knows its messages' sizes does (the transport reads a large payload so):
 * returning with whatever has arrived wakes it per segment, and a stream of 4
 * MiB messages read that way ran at 0.8 of this.  size is at most SINK_MAX
 * however large the messages: on the H200 a sink waiting for a whole 1 MiB
 * message a call ran at 0.8 of one waiting for 256 KiB at a time, and at 4
 * MiB 0.9, below the transport that these figures are a ceiling for.
 */
static void *sink_main(void *arg)
{
	struct sink *s = arg;
	char *buf = malloc(s->size);
	ssize_t n;

	/* named for profiles (perf --sort pid), beside the transport's gdx-tcp-rx */
	pthread_setname_np(pthread_self(), "raw-sink");
	while (buf && (n = recv(s->fd, buf, s->size, MSG_WAITALL)) > 0)
		s->got += (uint64_t)n;
	free(buf);
	return NULL;
}

/* A connected loopback pair and a buffer of size bytes of fill to send over it; NULL if not. */
static char *raw_tcp_open(struct sockpair *p, size_t size, int fill)
{
	char *buf = malloc(size);

	if (!buf || tcp_pair(p)) {
		free(buf);
		return NULL;
	}
	memset(buf, fill, size);
	return buf;
}

/*
 * Ends a raw measurement begun at t0: the sender's end of the stream, then
 * the receiving thread th, which counted *got bytes; their rate.
 */
static double raw_tcp_close(struct sockpair *p, pthread_t th, const uint64_t *got, uint64_t t0)
{
	shutdown(p->a, SHUT_WR);
	pthread_join(th, NULL);
	close(p->a);
	close(p->b);
	return (double)*got / ((double)(gdx_now_ns() - t0) / 1e9);
}

/*
 * The socket's speed for `depth` messages of size bytes in flight: each call
 * writes the whole window (depth messages, one iovec each; raw_batch) and the
 * sink drains the socket in reads of a write, at most 256 KiB (sink_main), as
 * a sender free to batch its window and a receiver that knows the sizes would.
 * One write per message is no ceiling for small ones: the transport puts the
 * frames it has queued in one write.
 */
static double raw_tcp_bw(struct cfg *c, size_t size)
{
	struct sockpair p = { -1, -1 };
	int cnt = raw_batch(c->depth, size);
	struct iovec *iov = calloc((size_t)cnt, sizeof(*iov)), *cur = NULL;
	struct sink s;
	pthread_t th;
	char *buf = iov ? raw_tcp_open(&p, size, 1) : NULL;
	uint64_t t0, deadline;

	if (!buf) {
		free(iov);
		return -EIO;
	}
	cur = calloc((size_t)cnt, sizeof(*cur));
	/* a write's bytes a read, up to SINK_MAX, whatever the message size (sink_main) */
	s = (struct sink){ .fd = p.b, .size = GDX_MIN(size * (size_t)cnt, SINK_MAX) };
	if (!cur || pthread_create(&th, NULL, sink_main, &s)) {
		close(p.a);
		close(p.b);
		free(cur);
		free(iov);
		free(buf);
		return -ENOMEM;
	}
	for (int i = 0; i < cnt; i++)
		iov[i] = (struct iovec){ .iov_base = buf, .iov_len = size };
	t0 = gdx_now_ns();
	deadline = t0 + (uint64_t)(c->secs * 1e9);
	while (gdx_now_ns() < deadline) {
		memcpy(cur, iov, sizeof(*iov) * (size_t)cnt);
		if (gdx_send_full(p.a, cur, cnt))
			break;
	}
	free(cur);
	free(iov);
	free(buf);
	return raw_tcp_close(&p, th, &s.got, t0);
}

/*
 * What a window costs by itself (--window): raw TCP with depth messages of size
 * bytes in flight, each answered.  The answerer reads what has arrived (it
 * cannot wait for a buffer's worth, as the sink does: the sender waits for its
 * answers), and after each read that finished messages writes one byte per
 * message; the sender writes what the window has room for (raw_batch), then
 * reads answers, waiting for them only when the window is full.  Two threads,
 * no hand-off between them.  It falls below the stream by what waiting for
 * answers with the window full costs, which no transport of that depth avoids;
 * what gdx loses beyond it is the transport's own.
 */
struct answerer {
	int fd;
	size_t size, bufsize;
	uint64_t got;
};

static void *answerer_main(void *arg)
{
	struct answerer *s = arg;
	char *buf = malloc(s->bufsize);
	uint64_t part = 0;
	ssize_t n;

	pthread_setname_np(pthread_self(), "raw-answerer");
	while (buf && (n = recv(s->fd, buf, s->bufsize, 0)) > 0) {
		size_t done;

		s->got += (uint64_t)n;
		part += (uint64_t)n;
		done = (size_t)(part / s->size);
		part %= s->size;
		/* done <= n: the answers fit the buffer just read */
		memset(buf, 0, done);
		if (done && send(s->fd, buf, done, MSG_NOSIGNAL) != (ssize_t)done)
			break;
	}
	free(buf);
	return NULL;
}

static double raw_tcp_window_bw(struct cfg *c, size_t size)
{
	struct sockpair p = { -1, -1 };
	unsigned depth = c->depth, inflight = 0;
	int cnt = raw_batch(depth, size);
	struct iovec *iov = calloc((size_t)cnt, sizeof(*iov));
	char *buf = iov ? raw_tcp_open(&p, size, 2) : NULL, ans[4096];
	struct answerer s;
	pthread_t th;
	uint64_t t0, deadline;

	if (!buf) {
		free(iov);
		return -EIO;
	}
	s = (struct answerer){ .fd = p.b, .size = size,
			       .bufsize = GDX_MAX(size, GDX_MIN(size * depth, SINK_MAX)) };
	if (pthread_create(&th, NULL, answerer_main, &s)) {
		close(p.a);
		close(p.b);
		free(iov);
		free(buf);
		return -ENOMEM;
	}
	t0 = gdx_now_ns();
	deadline = t0 + (uint64_t)(c->secs * 1e9);
	while (gdx_now_ns() < deadline) {
		int k = (int)GDX_MIN(depth - inflight, (unsigned)cnt);
		ssize_t n;

		if (k) {
			for (int i = 0; i < k; i++)
				iov[i] = (struct iovec){ .iov_base = buf, .iov_len = size };
			if (gdx_send_full(p.a, iov, k))
				break;
			inflight += (unsigned)k;
		}
		n = recv(p.a, ans, sizeof(ans), inflight == depth ? 0 : MSG_DONTWAIT);
		if (n > 0)
			inflight -= (unsigned)n;
		else if (!n || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			break;
	}
	free(iov);
	free(buf);
	return raw_tcp_close(&p, th, &s.got, t0);
}

/* ---- ceilings: perftest -------------------------------------------------------- */

/*
 * Runs perftest's tool (server and client, through rdma_cm on host) for one
 * size and returns the client's figure: Gb/s average for *_bw (as bytes/s),
 * t_avg in microseconds for *_lat.  Negative when the tool is missing or fails.
 */
static double perftest(const char *tool, const char *host, size_t size, double secs)
{
	char sz[32], dur[16], port[16], cmd[512], line[512], last[512];
	int lat = strstr(tool, "_lat") != NULL;
	char *sv[16];
	int i = 0, status;
	double val = -ENOENT;
	pid_t srv;
	FILE *f;

	snprintf(sz, sizeof(sz), "%zu", size);
	snprintf(dur, sizeof(dur), "%d", GDX_MAX(1, (int)secs));
	snprintf(port, sizeof(port), "%d", 18515 + (int)(gdx_now_ns() % 1000));
	sv[i++] = (char *)tool;
	sv[i++] = "-R";
	sv[i++] = "-F";
	sv[i++] = "-s";
	sv[i++] = sz;
	sv[i++] = "-p";
	sv[i++] = port;
	if (!lat) {
		sv[i++] = "-D";
		sv[i++] = dur;
		sv[i++] = "--report_gbits";
	} else {
		sv[i++] = "-n";
		sv[i++] = "200";
	}
	sv[i] = NULL;
	/* The server may be slow to listen (emulated machines): try the client a few times. */
	for (int attempt = 0; attempt < 3 && val < 0; attempt++) {
		posix_spawn_file_actions_t fa;

		snprintf(port, sizeof(port), "%d", 18515 + (int)(gdx_now_ns() % 1000));
		/*
		 * On a slow (emulated) machine a timed run can end before its first
		 * sample and report 0: the retries count iterations instead.
		 */
		if (!lat && attempt) {
			sv[7] = "-n";
			sv[8] = "200";
		}
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
		if (posix_spawnp(&srv, tool, &fa, NULL, sv, environ)) {
			posix_spawn_file_actions_destroy(&fa);
			return -ENOENT;
		}
		posix_spawn_file_actions_destroy(&fa);
		sleep(2 + attempt);
		if (lat)
			snprintf(cmd, sizeof(cmd), "%s -R -F -s %s -p %s -n 200 %s 2>&1", tool, sz,
				 port, host);
		else
			snprintf(cmd, sizeof(cmd),
				 "%s -R -F -s %s -p %s -D %s --report_gbits %s 2>&1", tool, sz, port,
				 dur, host);
		if (!lat && attempt)
			snprintf(cmd, sizeof(cmd),
				 "%s -R -F -s %s -p %s -n 200 --report_gbits %s 2>&1", tool, sz, port,
				 host);
		f = popen(cmd, "r");
		last[0] = 0;
		while (f && fgets(line, sizeof(line), f)) {
			if (strspn(line, " \t\n-") != strlen(line))
				snprintf(last, sizeof(last), "%s", line);
			double v[8];
			unsigned long long bytes;
			int n = sscanf(line, " %llu %lf %lf %lf %lf %lf %lf", &bytes, &v[0], &v[1],
				       &v[2], &v[3], &v[4], &v[5]);

			if (n >= 5 && bytes == size)
				val = lat ? v[4] : v[2] * 1e9 / 8;
			if (!isfinite(val) || val == 0)
				val = -EIO;
		}
		if (f)
			pclose(f);
		kill(srv, SIGTERM);
		waitpid(srv, &status, 0);
		if (val < 0 && last[0])
			fprintf(stderr, "%s -s %s (attempt %d): %s", tool, sz, attempt + 1, last);
	}
	return val;
}

/* ---- device copy ceiling ------------------------------------------------------- */

/*
 * Pinned <-> device copies of size bytes, depth of them in flight as the
 * bench keeps its messages (each into its own buffer, enqueued on one stream,
 * which is synchronised once per depth): what the device's copies carry at
 * that depth.  One synchronous copy at a time would measure the copy's
 * latency instead, a ceiling below what a pipelined transport reaches.
 */
static double copy_bw(struct cfg *c, size_t size)
{
	struct mem *m = c->dst.dev ? &c->dst : &c->src;
	size_t total = size * c->depth;
	struct gdx_stream *s = NULL;
	uint64_t t0, deadline, done = 0;
	char *d = NULL, *h = NULL;
	double bw = -ENOMEM;

	if (!m->dev)
		return 0;
	if (gdx_pinned_alloc(m->dev, total, (void **)&h) ||
	    gdx_device_malloc(m->dev, total, (void **)&d) || gdx_stream_create(m->dev, &s))
		goto out;
	t0 = gdx_now_ns();
	deadline = t0 + (uint64_t)(c->secs * 1e9 / 2);
	while (gdx_now_ns() < deadline) {
		int rc = 0;

		for (unsigned i = 0; i < c->depth && !rc; i++) {
			size_t o = (size_t)i * size;

			rc = c->dst.dev ? gdx_memcpy_async(m->dev, d + o, h + o, size, s) :
					  gdx_memcpy_async(m->dev, h + o, d + o, size, s);
		}
		if (rc || gdx_stream_synchronize(s))
			break;
		done += total;
	}
	bw = (double)done / ((double)(gdx_now_ns() - t0) / 1e9);
out:
	if (s)
		gdx_stream_destroy(s);
	if (d)
		gdx_device_free(m->dev, d);
	if (h)
		gdx_pinned_free(m->dev, h);
	return bw;
}

/* ---- driver ---------------------------------------------------------------------- */

/* host or gpu:N, each with an optional +OFF; 2 for a bad value, 1 when the device does not open. */
static int parse_mem(const char *prog, const char *opt, const char *s, struct mem *m,
		     int (*open_gpu)(int, struct gdx_device **))
{
	char kind[16];
	size_t kl;
	int ord, ret;

	if (bench_mem_offset(s, &kl, &m->off) || kl >= sizeof(kind)) {
		fprintf(stderr, "%s: %s '%s': want host or gpu:N, with an optional +OFF of 0 to "
			"%d\n", prog, opt, s, BENCH_MEM_OFF_MAX);
		return 2;
	}
	snprintf(m->name, sizeof(m->name), "%s", s);
	memcpy(kind, s, kl);
	kind[kl] = 0;
	if (!strcmp(kind, "host")) {
		m->dev = NULL;
		return 0;
	}
	if (arg_gpu(prog, opt, kind, &ord))
		return 2;
	ret = open_gpu(ord, &m->dev);
	if (ret)
		fprintf(stderr, "%s: %s %s: %s\n", prog, opt, s, gdx_strerror(ret));
	return ret ? 1 : 0;
}

static int parse_sizes(const char *prog, struct cfg *c, const char *s)
{
	char tmp[256], *save = NULL;

	snprintf(tmp, sizeof(tmp), "%s", s);
	c->nsizes = 0;
	for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (c->nsizes == (int)GDX_ARRAY_SIZE(c->sizes)) {
			fprintf(stderr, "%s: --sizes '%s': at most %zu sizes\n", prog, s,
				GDX_ARRAY_SIZE(c->sizes));
			return -EINVAL;
		}
		if (arg_size(prog, "--sizes", t, 1, 1u << 30, &v))
			return -EINVAL;
		c->sizes[c->nsizes++] = v;
	}
	return c->nsizes ? 0 : arg_size(prog, "--sizes", s, 1, 1u << 30, &c->sizes[0]);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gdx bench xport [options]\n"
		"  --addr URL        tcp://127.0.0.1:0 (default), rdma://IP:0, loop://bench\n"
		"  --op OP           write (default), read or send\n"
		"  --src MEM         client buffer: host (default) or gpu:N; MEM+OFF starts it\n"
		"                    OFF bytes (0-4095) into its allocation (gpu:0+2)\n"
		"  --dst MEM         server buffer: host (default) or gpu:N, +OFF as --src\n"
		"  --sizes LIST      message sizes, e.g. 4k,64k,1M,4M (default)\n"
		"  --depth N         requests in flight for bandwidth (default 16)\n"
		"  --secs S          seconds per measurement (default 1)\n"
		"  --busy | --sleep  spin on the CQ (rdma default) or sleep on it (tcp default)\n"
		"  --runs N          measure each figure N times, gdx and ceiling in turn,\n"
		"                    and report the medians (default 1)\n"
		"  --no-ceiling      skip the ceilings\n"
		"  --max-unexpected SIZE  bytes of messages the server keeps that came before\n"
		"                    a receive (tcp, loop; default 64M); 0: such a message\n"
		"                    waits for one, as on verbs\n"
		"  --rx-depth N      receives the server keeps posted for sends (default twice\n"
		"                    the depth); fewer than the depth keeps most messages\n"
		"                    waiting for their receive (tcp, loop)\n"
		"  --tls-key KEY     tcp: TLS 1.3 with this PSK (NVMeTLSkey-1:0H:...: or a file\n"
		"                    holding it) on both ends, the records in kernel TLS; the\n"
		"                    ceiling stays clear TCP\n"
		"  --tls-identity ID tcp: the PSK identity (default gdx)\n"
		"  --sockets         tcp: sample both ends' sockets during the bandwidth runs\n"
		"                    and print where the bytes waited: unread at the server,\n"
		"                    unsent, unread at the client (answers), or in neither\n"
		"                    with the depth in flight (window full) or not (idle)\n"
		"  --window          tcp: also measure raw TCP with the depth's messages in\n"
		"                    flight, each answered: what the window costs by itself\n");
}

#define MAX_RUNS 31

/* The median of n figures; a failure (negative) if any run failed. */
static double median(double *v, int n)
{
	for (int i = 0; i < n; i++)
		if (v[i] < 0)
			return v[i];
	bench_sort(v, (size_t)n);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double ceil_bw(struct cfg *c, const char *host, size_t n)
{
	static const char *const bwtool[] = { "ib_write_bw", "ib_read_bw", "ib_send_bw" };
	double cbw = host[0] ? perftest(bwtool[c->op], host, n, c->secs) : raw_tcp_bw(c, n);

	if (c->src.dev || c->dst.dev) {
		double cp = copy_bw(c, n);

		if (cp > 0 && (cbw <= 0 || cp < cbw))
			cbw = cp;
	}
	/* A ceiling that could not be measured is left out (n/a), not a failure. */
	return cbw > 0 ? cbw : 0;
}

static double ceil_lat(struct cfg *c, const char *host, size_t n)
{
	double clat = host[0] ? perftest("ib_send_lat", host, n, c->secs) : bench_tcp_rr(n, n, c->secs) / 2;

	return clat > 0 ? clat : 0;
}

static void fmt_size(size_t n, char *buf, size_t len)
{
	if (n >= (1u << 20) && !(n % (1u << 20)))
		snprintf(buf, len, "%zuM", n >> 20);
	else if (n >= 1024 && !(n % 1024))
		snprintf(buf, len, "%zuk", n >> 10);
	else
		snprintf(buf, len, "%zu", n);
}

int gdx_bench_xport(int argc, char **argv, int (*open_gpu)(int, struct gdx_device **))
{
	static const struct option lo[] = {
		{ "addr", required_argument, NULL, 'a' }, { "op", required_argument, NULL, 'o' },
		{ "src", required_argument, NULL, 's' }, { "dst", required_argument, NULL, 'd' },
		{ "sizes", required_argument, NULL, 'z' }, { "depth", required_argument, NULL, 'q' },
		{ "secs", required_argument, NULL, 't' }, { "no-ceiling", no_argument, NULL, 'n' },
		{ "busy", no_argument, NULL, 'b' }, { "sleep", no_argument, NULL, 'S' },
		{ "runs", required_argument, NULL, 'r' }, { "help", no_argument, NULL, 'h' },
		{ "max-unexpected", required_argument, NULL, 'u' },
		{ "rx-depth", required_argument, NULL, 'R' },
		{ "tls-key", required_argument, NULL, 'K' },
		{ "tls-identity", required_argument, NULL, 'I' },
		{ "sockets", no_argument, NULL, 'W' }, { "window", no_argument, NULL, 'w' },
		{ 0 } };
	struct cfg c = { .addr = "tcp://127.0.0.1:0", .depth = 16, .secs = 1.0, .runs = 1,
			 .max_unexpected = UINT64_MAX,
			 .sizes = { 4096, 65536, 1u << 20, 4u << 20 }, .nsizes = 4 };
	const char *prog = argv[0];
	char host[64] = "";
	uint64_t u;
	int opt, ret, fails = 0, busy = -1;
	unsigned invalid = 0;
	bool bad;

	strcpy(c.src.name, "host");
	strcpy(c.dst.name, "host");
	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (opt) {
		case 'a': snprintf(c.addr, sizeof(c.addr), "%s", optarg); break;
		case 'o':
			if ((ret = arg_choice(prog, "--op", optarg, "write|read|send")) < 0)
				return 2;
			c.op = ret == 0 ? OP_WRITE : ret == 1 ? OP_READ : OP_SEND;
			break;
		case 's':
		case 'd':
			ret = parse_mem(prog, opt == 's' ? "--src" : "--dst", optarg,
					opt == 's' ? &c.src : &c.dst, open_gpu);
			if (ret)
				return ret;
			break;
		case 'z':
			if (parse_sizes(prog, &c, optarg))
				return 2;
			break;
		case 'q':
			if (arg_count(prog, "--depth", optarg, 1, 4096, &u))
				return 2;
			c.depth = (unsigned)u;
			break;
		case 't':
			if (arg_secs(prog, "--secs", optarg, 3600, &c.secs))
				return 2;
			break;
		case 'n': c.no_ceiling = 1; break;
		case 'b': busy = 1; break;
		case 'S': busy = 0; break;
		case 'r':
			if (arg_count(prog, "--runs", optarg, 1, MAX_RUNS, &u))
				return 2;
			c.runs = (int)u;
			break;
		case 'u':
			if (arg_size(prog, "--max-unexpected", optarg, 0, 1ull << 40,
				     &c.max_unexpected))
				return 2;
			break;
		case 'R':
			if (arg_count(prog, "--rx-depth", optarg, 1, 65536, &u))
				return 2;
			c.rx_depth = (unsigned)u;
			break;
		case 'K': c.tls_key = optarg; break;
		case 'I': c.tls_identity = optarg; break;
		case 'W': c.sockets = true; break;
		case 'w': c.window = true; break;
		case 'h': usage(stdout); return 0;
		default: return arg_usage_error(prog);
		}
	}
	if (optind != argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
		return arg_usage_error(prog);
	}
	if (c.sockets && strncmp(c.addr, "tcp://", 6)) {
		fprintf(stderr, "%s: --sockets: needs a tcp:// address (it samples the two ends' "
			"sockets)\n", prog);
		return 2;
	}
	if (c.window && (strncmp(c.addr, "tcp://", 6) || c.no_ceiling)) {
		fprintf(stderr, "%s: --window: needs a tcp:// address and its ceilings (it is "
			"raw TCP on the same loopback)\n", prog);
		return 2;
	}
	/* An address the transport cannot listen on fails here, once, not once per size. */
	{
		struct gdx_xport_opts o;
		struct gdx_xport_listener *l;

		gdx_xport_opts_init(&o, sizeof(o));
		o.tls_key = c.tls_key;
		o.tls_identity = c.tls_identity;
		ret = gdx_xport_listen(c.addr, &o, &l);
		if (ret) {
			fprintf(stderr, "%s: --addr %s: %s\n", prog, c.addr, gdx_strerror(ret));
			return ret == -EINVAL ? 2 : 1;
		}
		gdx_xport_listener_close(l);
	}
	c.busy = busy >= 0 ? busy : !strncmp(c.addr, "rdma://", 7);
	if (!strncmp(c.addr, "rdma://", 7)) {
		const char *h = c.addr + 7, *colon = strrchr(h, ':');

		snprintf(host, sizeof(host), "%.*s", colon ? (int)(colon - h) : (int)strlen(h), h);
	}
	printf("gdx bench xport: %s op=%s src=%s dst=%s depth=%u secs=%.1f cq=%s runs=%d\n",
	       c.addr, op_names[c.op], c.src.name, c.dst.name, c.depth, c.secs,
	       c.busy ? "busy" : "sleep", c.runs);
	if (c.tls_key)
		printf("tls: TLS 1.3 PSK, kernel TLS records, identity %s\n",
		       c.tls_identity ? c.tls_identity : "gdx");
	printf("ceiling: %s%s\n", c.no_ceiling ? "none" : host[0] ?
	       "perftest (ib_*_bw / ib_send_lat -R) on the same device" :
	       "raw TCP socket on the same loopback", (c.src.dev || c.dst.dev) && !c.no_ceiling ?
	       ", and pinned<->device copies at the same depth (the lower)" : "");
	printf("%8s %8s %11s %11s %6s %10s %10s %6s\n", "size", "dst path", "gdx GB/s", "ceil GB/s",
	       "ratio", "gdx us", "ceil us", "ratio");
	for (int i = 0; i < c.nsizes; i++) {
		size_t n = c.sizes[i];
		const char *path = "?";
		double bw, lat, cbw = 0, clat = 0, wbw = 0, v[5][MAX_RUNS];
		char sz[32];

		/* Each figure beside its ceiling, in turn, so load that comes and goes hits both. */
		c.recvs = c.unexpected = 0;
		memset(c.sr, 0, sizeof(c.sr));
		memset(&c.sw, 0, sizeof(c.sw));
		for (int r = 0; r < c.runs; r++) {
			v[0][r] = gdx_bw(&c, n, &path);
			v[1][r] = c.no_ceiling ? 0 : ceil_bw(&c, host, n);
			v[2][r] = gdx_lat(&c, n);
			v[3][r] = c.no_ceiling ? 0 : ceil_lat(&c, host, n);
			v[4][r] = c.window ? raw_tcp_window_bw(&c, n) : 0;
		}
		bw = median(v[0], c.runs);
		cbw = median(v[1], c.runs);
		lat = median(v[2], c.runs);
		clat = median(v[3], c.runs);
		if (c.window)
			wbw = median(v[4], c.runs);
		fmt_size(n, sz, sizeof(sz));
		if (bw < 0 || lat < 0) {
			printf("%8s  failed: %s\n", sz, gdx_strerror((int)(bw < 0 ? bw : lat)));
			fails++;
			continue;
		}
		printf("%8s %8s %11.3f ", sz, path, bw / 1e9);
		if (cbw > 0)
			printf("%11.3f %6.2f ", cbw / 1e9, bw / cbw);
		else
			printf("%11s %6s ", "n/a", "");
		printf("%10.1f ", lat);
		if (clat > 0)
			printf("%10.1f %6.2f", clat, clat / lat);
		else
			printf("%10s %6s", "n/a", "");
		bad = (cbw > 0 && bench_invalid(bw / cbw)) || (clat > 0 && bench_invalid(clat / lat));
		invalid += bad;
		printf("%s%s\n", bad ? "  " : "", bad ? BENCH_INVALID : "");
		/* Not silent: such a message was copied once more (synchronously into device memory). */
		if (c.unexpected)
			printf("    note: at %s, %llu of %llu receives came after their message "
			       "(unexpected: one more copy)\n", sz, (unsigned long long)c.unexpected,
			       (unsigned long long)c.recvs);
		/* tcp with a copy agent: the receive thread copied them on, from where */
		if (c.sr[3] + c.sr[4])
			printf("    note: at %s, the receive thread copied %llu kept messages on "
			       "from its kept ring, %llu from host memory\n", sz,
			       (unsigned long long)c.sr[3], (unsigned long long)c.sr[4]);
		/* tcp: device payloads that found no room in the stage ring when posted */
		if (c.sr[1])
			printf("    note: at %s, %llu of %llu device payloads were late for the stage "
			       "ring; the transmit thread copied %llu of them itself\n", sz,
			       (unsigned long long)c.sr[1], (unsigned long long)c.sr[0],
			       (unsigned long long)c.sr[2]);
		if (c.window && wbw > 0) {
			printf("    window at %s: raw TCP, %u answered messages in flight: %.3f GB/s, ",
			       sz, c.depth, wbw / 1e9);
			/* with device memory the ceiling may be the copies' (the lower) */
			if (cbw > 0)
				printf("%.2f of the %s; ", wbw / cbw,
				       c.src.dev || c.dst.dev ? "ceiling" : "stream");
			printf("gdx %.2f of it\n", bw / wbw);
		} else if (c.window) {
			printf("    window at %s: raw TCP with answers failed: %s\n", sz,
			       gdx_strerror(wbw < 0 ? (int)wbw : -EIO));
		}
		if (c.sw.samples) {
			const double pc = 100.0 / (double)c.sw.samples;

			printf("    sockets at %s: server unread %.0f%%, unsent %.0f%%, client unread "
			       "%.0f%%, window full %.0f%%, idle %.0f%% (%llu samples)\n", sz,
			       pc * (double)c.sw.n[SW_SERVER_UNREAD], pc * (double)c.sw.n[SW_UNSENT],
			       pc * (double)c.sw.n[SW_CLIENT_UNREAD], pc * (double)c.sw.n[SW_WINDOW_FULL],
			       pc * (double)c.sw.n[SW_IDLE], (unsigned long long)c.sw.samples);
		}
		fflush(stdout);
	}
	printf("ratio: gdx / ceiling for bandwidth, ceiling / gdx for latency (1.00 = at the ceiling)\n");
	if (invalid)
		fprintf(stderr, "%s: %u size%s above %s ceiling: the run is invalid (run again with "
			"longer --secs or more --runs)\n", prog, invalid, invalid == 1 ? "" : "s",
			invalid == 1 ? "its" : "their");
	if (c.src.dev)
		gdx_device_close(c.src.dev);
	if (c.dst.dev)
		gdx_device_close(c.dst.dev);
	return fails ? 1 : 0;
}
