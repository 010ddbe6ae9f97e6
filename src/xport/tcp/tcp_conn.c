/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, the caller's thread (tcp_int.h): the hello, listen,
 * accept, connect, close and destroy, memory registration, the ops table.
 */

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/tls.h"
#include "common/util.h"
#include "xport/tcp/tcp_int.h"

/* A connection accepted by a listener whose hello is not all in yet. */
struct hshake {
	int fd;			/* non-blocking until the hello is in */
	struct gdx_tls_hs *tls;	/* the TLS handshake before the hello, while it runs */
	size_t got;		/* bytes of h */
	uint64_t deadline;	/* gdx_now_ns() past which it is dropped */
	struct hdr h;
};

/*
 * Handshakes run side by side, never one connection at a time on the
 * accepting thread: gdx_xport_accept waits in epfd (the listening socket and
 * each handshake's socket, level-triggered) for whatever comes first, takes
 * new connections in and sends them the hello at once, and returns the first
 * connection whose hello is in.  A handshake lives opts.timeout_ms; at most
 * hs_max (xport.tcp_handshakes) run at once, and a new connection beyond
 * them drops the oldest.  Handshakes not done when an accept returns go on
 * in the next one.  With opts.tls_key the hello waits for a TLS handshake,
 * stepped on the same events and bounded by the same deadline: a peer
 * without the key is dropped before any frame of gdx's crosses.
 */
struct tcp_listener {
	int fd, epfd;
	uint64_t max_unexpected;
	int hs_ms;
	bool tls;
	struct gdx_tls_psk psk;		/* with tls: the one identity and PSK let in */
	unsigned nhs, hs_max;
	struct hshake *hs;		/* nhs of hs_max, oldest first */
	/* since the last log line of them (said_ns): for room; failed, and the last why */
	unsigned dropped, failed;
	int fail_why;
	uint64_t said_ns;
	pthread_mutex_t lock;		/* one accept at a time */
};

void tcp_kill_conn(struct tcp_ep *t, int why)
{
	if (!t->dead) {
		/* read unlocked by the waits for copies (the transmit lane's abort word, tx_copy) */
		__atomic_store_n(&t->dead, 1, __ATOMIC_RELEASE);
		gdx_xport_ep_set_disconnected(t->fe);
		if (why)
			GDX_WARN(SUBSYS, "connection lost: %s", gdx_strerror(why));
		shutdown(t->fd, SHUT_RDWR);
		tcp_rx_wakeup(t);
		pthread_cond_broadcast(&t->tx_cond);
		pthread_cond_broadcast(&t->rx_cond);
		pthread_mutex_lock(&t->ans_lock);
		pthread_cond_broadcast(&t->ans_cond);
		pthread_mutex_unlock(&t->ans_lock);
	}
}

/* Completes everything outstanding with GDX_EDISCONNECTED.  Both threads have stopped. */
void tcp_flush_all(struct tcp_ep *t)
{
	struct txi *x;
	struct qent *q;

	pthread_mutex_lock(&t->lock);
	/* A posting thread may still be sending a train: its iovecs point into the queue. */
	while (t->sending)
		pthread_cond_wait(&t->tx_cond, &t->lock);
	x = t->txq_head;
	t->txq_head = t->txq_tail = NULL;
	t->qlen = 0;
	t->sr_late = NULL;
	while (t->ans_head)
		tcp_ans_unlink(t, t->ans_head);
	tcp_tx_free_list(t, x);
	while ((q = q_pop(&t->outst_head, &t->outst_tail))) {
		gdx_xport_complete(q->req, GDX_EDISCONNECTED, 0);
		free(q);
	}
	while ((q = q_pop(&t->recv_head, &t->recv_tail))) {
		gdx_xport_complete(q->req, GDX_EDISCONNECTED, 0);
		free(q);
	}
	while ((q = q_pop(&t->unexp_head, &t->unexp_tail))) {
		if (!q->kr_end)
			free(q->data);
		free(q);
	}
	t->unexpected_bytes = 0;
	/* The CQ may go once the endpoint is flushed: its wake-up goes now. */
	gdx_xport_complete_flush();
	t->flushed = 1;
	pthread_cond_broadcast(&t->flushed_cond);
	pthread_mutex_unlock(&t->lock);
}

static int hello_send(int fd)
{
	struct hdr h = { .type = F_HELLO, .imm = TCP_MAGIC, .id = TCP_VERSION };

	if (send(fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof(h))
		return errno ? -errno : -EIO;
	return 0;
}

static int hello_check(const struct hdr *p)
{
	if (p->type != F_HELLO || p->imm != TCP_MAGIC || p->id != TCP_VERSION)
		return GDX_EPROTO;
	return 0;
}

/*
 * Reads what has come of the peer's hello into p (got bytes of it so far),
 * without blocking: 1 once it is whole, 0 for more to come, else an error.
 * Never reads past it: frames may follow.
 */
static int hello_recv(int fd, struct hdr *p, size_t *got)
{
	ssize_t n = recv(fd, (char *)p + *got, sizeof(*p) - *got, MSG_DONTWAIT);

	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	*got += (size_t)n;
	return *got == sizeof(*p);
}

/* The connecting side's handshake: blocks until end (gdx_now_ns()) for the hello. */
static int handshake(int fd, uint64_t end)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	struct hdr p;
	size_t got = 0;
	int ret = hello_send(fd);

	while (!ret) {
		uint64_t now = gdx_now_ns();

		if (now >= end)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)((end - now + 999999) / 1000000)) < 0 && errno != EINTR)
			return -errno;
		ret = hello_recv(fd, &p, &got);
	}
	return ret < 0 ? ret : hello_check(&p);
}

static void ep_fds_close(struct tcp_ep *t)
{
	if (t->rx_epfd >= 0)
		close(t->rx_epfd);
	if (t->w_epfd >= 0)
		close(t->w_epfd);
	if (t->rx_wake >= 0)
		close(t->rx_wake);
}

/* The receive thread's epoll set (socket, rx_wake) and a CQ waiter's (empty). */
static int ep_fds(struct tcp_ep *t)
{
	struct epoll_event in = { .events = EPOLLIN }, et = { .events = EPOLLIN | EPOLLET };

	t->rx_epfd = epoll_create1(EPOLL_CLOEXEC);
	t->w_epfd = epoll_create1(EPOLL_CLOEXEC);
	t->rx_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->rx_epfd < 0 || t->w_epfd < 0 || t->rx_wake < 0 ||
	    epoll_ctl(t->rx_epfd, EPOLL_CTL_ADD, t->fd, &et) ||
	    epoll_ctl(t->rx_epfd, EPOLL_CTL_ADD, t->rx_wake, &in))
		return -errno;
	return 0;
}

/* Registers the endpoint's counters; an endpoint without them works the same. */
static void ep_stats(struct tcp_ep *t)
{
	static const char *const names[C_NR] = {
		[C_SR_FRAMES] = "sr_frames",
		[C_SR_LATE] = "sr_late",
		[C_SR_CAUGHT_UP] = "sr_caught_up",
		[C_SR_TX_COPIED] = "sr_tx_copied",
		[C_KEPT_RING] = "kept_ring",
		[C_KEPT_HOST] = "kept_host",
		[C_SR_REDONE] = "sr_redone",
		[C_TX_RECOPIED] = "tx_recopied",
		[C_ANS_PEAK] = "answers_peak",
		[C_HELD_BACK] = "held_back",
		[C_COPIES_PEAK] = "answer_copies_peak",
		[C_TX_DIRECT] = "tx_direct",
		[C_TX_HANDED] = "tx_handed",
		[C_RX_WAITER] = "rx_waiter",
		[C_RX_PART] = "rx_part",
		[C_RX_TAKES] = "rx_takes",
		[C_RX_GIVES] = "rx_gives",
		[C_TX_WRITES] = "tx_writes",
		[C_RESP_RODE] = "resp_rode",
		[C_RX_WAITER_DEV] = "rx_waiter_dev",
		[C_RX_DEV] = "rx_dev",
		[C_RX_BUFFERED] = "rx_buffered",
	};
	static atomic_uint next;
	char scope[32];
	int ret;

	for (unsigned i = 0; i < C_NR; i++)
		t->ctr[i].name = names[i];
	snprintf(scope, sizeof(scope), "xport.tcp.%u", atomic_fetch_add(&next, 1));
	ret = gdx_stats_create(scope, t->ctr, C_NR, &t->stats);
	if (ret)
		GDX_DBG(SUBSYS, "%s: no counters (%s)", scope, gdx_strerror(ret));
}

static int ep_start(struct gdx_xport_ep *fe, int fd, bool tls, void **priv)
{
	struct tcp_ep *t = calloc(1, sizeof(*t));
	int one = 1, ret;

	if (!t)
		return -ENOMEM;
	t->rbuf = malloc(RBUF_SIZE);
	if (!t->rbuf) {
		free(t);
		return -ENOMEM;
	}
	t->fe = fe;
	t->fd = fd;
	t->wake_whole = !tls;
	t->max_unexpected = fe->opts.max_unexpected;
	t->ans_max = (unsigned)gdx_cfg_int("xport.tcp_answers_max");
	t->ans_ms = (int)gdx_cfg_int("xport.tcp_answers_timeout_ms");
	t->snap_max = gdx_cfg_size("xport.tcp_answers_copy_max");
	ret = ep_fds(t);
	if (ret) {
		ep_fds_close(t);
		free(t->rbuf);
		free(t);
		return ret;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	t->rx_spin_ns = (uint64_t)gdx_cfg_int("xport.tcp_rx_spin_us") * 1000;
	t->poll_read = gdx_cfg_bool("xport.tcp_poll_read");
	t->resp_hold_ms = (int)gdx_cfg_int("xport.tcp_resp_hold_ms");
	/*
	 * kTLS encrypts into its own buffers, the record relay reads a socketpair:
	 * MSG_ZEROCOPY would save no copy, only notify
	 */
	if (!tls && gdx_cfg_bool("xport.tcp_zerocopy") &&
	    !setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)))
		t->zerocopy = 1;
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->stage_lock, NULL);
	pthread_cond_init(&t->tx_cond, NULL);
	pthread_cond_init(&t->rx_cond, NULL);
	pthread_cond_init(&t->flushed_cond, NULL);
	pthread_mutex_init(&t->ans_lock, NULL);
	pthread_cond_init(&t->ans_cond, NULL);
	ep_stats(t);
	pthread_cond_init(&t->rd_cond, NULL);
	ret = -pthread_create(&t->tx, NULL, tcp_tx_main, t);
	if (!ret) {
		ret = -pthread_create(&t->rx, NULL, tcp_rx_main, t);
		if (ret) {
			pthread_mutex_lock(&t->lock);
			tcp_kill_conn(t, 0);
			pthread_mutex_unlock(&t->lock);
			pthread_join(t->tx, NULL);
		}
	}
	if (ret) {
		gdx_stats_destroy(t->stats);
		pthread_mutex_destroy(&t->lock);
		pthread_mutex_destroy(&t->stage_lock);
		pthread_mutex_destroy(&t->ans_lock);
		pthread_cond_destroy(&t->ans_cond);
		ep_fds_close(t);
		free(t->rbuf);
		free(t);
		return ret;
	}
	t->threads = 1;
	/*
	 * The endpoint's device is staged here, on the connecting or accepting
	 * thread, not by its first post (a device named nowhere still is, where
	 * its memory is first posted or registered).  What fails here fails
	 * those posts instead, which try again.
	 */
	if (fe->opts.dev)
		tcp_stage_prepare(t, fe->opts.dev, 1, 1);
	*priv = t;
	return 0;
}

/*
 * The PSK of opts.tls_key (the key, or a file holding it) and
 * opts.tls_identity (xport.h): the same on both sides.
 */
static int tls_psk(const struct gdx_xport_opts *o, struct gdx_tls_psk *out)
{
	struct gdx_tls_key k;
	const char *id = o->tls_identity ? o->tls_identity : "gdx";
	int ret = !strncmp(o->tls_key, "NVMeTLSkey-", 11) ? gdx_tls_key_parse(o->tls_key, &k)
							  : gdx_tls_key_load(o->tls_key, &k);

	if (ret)
		GDX_ERR(SUBSYS, "opts.tls_key: %s", ret == -EINVAL || ret == -EBADMSG ?
			"not a key in the interchange format (NVMeTLSkey-1:0H:<base64>:)" :
			strerror(-ret));
	else if ((ret = gdx_tls_psk_derive(&k, "gdx-xport", id, out)))
		GDX_ERR(SUBSYS, "opts.tls_identity: empty, too long or not printable ASCII");
	gdx_tls_wipe(&k, sizeof(k));
	return ret;
}

/* The client's TLS handshake on the connected (blocking) socket fd, until end. */
static int tls_connect(const struct gdx_xport_opts *o, int fd, uint64_t end)
{
	struct gdx_tls_psk psk;
	struct gdx_tls_hs *hs = NULL;
	uint64_t now = gdx_now_ns();
	int ret = tls_psk(o, &psk);

	if (!ret)
		ret = gdx_tls_client_start(fd, &psk, &hs);
	if (!ret)
		ret = now < end ? gdx_tls_run(hs, (unsigned)((end - now + 999999) / 1000000))
				: -ETIMEDOUT;
	gdx_tls_free(hs);
	gdx_tls_wipe(&psk, sizeof(psk));
	return ret;
}

/*
 * Handshakes on a fresh connection (TLS first with opts.tls_key, then the
 * hello, within opts.timeout_ms) and starts the endpoint on it; closes fd on
 * failure.
 */
static int ep_open(struct gdx_xport_ep *ep, int fd, void **priv)
{
	uint64_t end = gdx_now_ns() + (uint64_t)ep->opts.timeout_ms * 1000000u;
	bool tls = ep->opts.tls_key;
	int ret = tls ? tls_connect(&ep->opts, fd, end) : 0;

	if (!ret)
		ret = handshake(fd, end);
	if (!ret)
		ret = ep_start(ep, fd, tls, priv);
	if (ret)
		close(fd);
	return ret;
}

static void hs_remove(struct tcp_listener *tl, unsigned i)
{
	memmove(&tl->hs[i], &tl->hs[i + 1], (tl->nhs - i - 1) * sizeof(tl->hs[0]));
	tl->nhs--;
}

static void hs_drop(struct tcp_listener *tl, unsigned i)
{
	gdx_tls_free(tl->hs[i].tls);
	close(tl->hs[i].fd);	/* leaves epfd with it */
	hs_remove(tl, i);
}

/* The server's PSK lookup: the listener's one identity, or nothing. */
static int hs_find(void *arg, const char *identity, struct gdx_tls_psk *out)
{
	const struct tcp_listener *tl = arg;

	if (strcmp(identity, tl->psk.identity))
		return -ENOKEY;
	*out = tl->psk;
	return 0;
}

/*
 * Says how many handshakes were dropped for room and how many failed (a bad
 * hello, a reset, silence): at once, then at most once a second, so that a
 * peer who connects in a loop does not flood the log.
 */
static void hs_said(struct tcp_listener *tl, uint64_t now)
{
	if ((!tl->dropped && !tl->failed) || now - tl->said_ns < 1000000000u)
		return;
	if (tl->dropped)
		GDX_WARN(SUBSYS, "listener: handshakes dropped for room: %u (the oldest, beyond %u "
			 "at once: xport.tcp_handshakes)", tl->dropped, tl->hs_max);
	if (tl->failed)
		GDX_INFO(SUBSYS, "listener: handshakes failed: %u (the last: %s)", tl->failed,
			 tl->fail_why == -ETIMEDOUT ? "no hello in opts.timeout_ms"
						    : gdx_strerror(tl->fail_why));
	tl->said_ns = now;
	tl->dropped = tl->failed = 0;
}

static void hs_fail(struct tcp_listener *tl, unsigned i, int why, uint64_t now)
{
	hs_drop(tl, i);
	tl->failed++;
	tl->fail_why = why;
	hs_said(tl, now);
}

/* Drops the handshakes past their deadline; the earliest deadline left (or UINT64_MAX). */
static uint64_t hs_expire(struct tcp_listener *tl, uint64_t now)
{
	unsigned i = 0;

	while (i < tl->nhs) {
		if (tl->hs[i].deadline > now) {
			i++;
			continue;
		}
		hs_fail(tl, i, -ETIMEDOUT, now);
	}
	hs_said(tl, now);
	/* oldest first: the first one's deadline is the earliest */
	return tl->nhs ? tl->hs[0].deadline : UINT64_MAX;
}

/*
 * Takes in the connections waiting on the listening socket and sends each the
 * hello, or with TLS starts its handshake (the peer speaks first).  Beyond hs_max handshakes the oldest goes (the one nearest its
 * deadline, and the likeliest to be idle: a peer that speaks gdx answers the
 * hello within a round trip); said once a second at most.  An error the
 * listening socket will go on returning (descriptors out) is the accept's.
 */
static int hs_take(struct tcp_listener *tl, uint64_t now)
{
	for (unsigned n = 0; n < tl->hs_max; n++) {
		struct epoll_event ev = { .events = EPOLLIN };
		struct gdx_tls_hs *tls = NULL;
		int fd = accept4(tl->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				return 0;
			GDX_WARN(SUBSYS, "listener: accept: %s", strerror(errno));
			return -errno;
		}
		if (tl->nhs == tl->hs_max) {
			hs_drop(tl, 0);
			tl->dropped++;
			hs_said(tl, now);
		}
		ev.data.fd = fd;
		if ((tl->tls ? gdx_tls_server_start(fd, tl->psk.hash, hs_find, tl, &tls)
			     : hello_send(fd)) ||
		    epoll_ctl(tl->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			gdx_tls_free(tls);
			close(fd);
			continue;
		}
		tl->hs[tl->nhs++] = (struct hshake){ .fd = fd, .tls = tls,
			.deadline = now + (uint64_t)tl->hs_ms * 1000000u };
	}
	return 0;
}

/*
 * One step of handshake i's TLS: on to the hello when it is done (kTLS or
 * the record relay holds the socket; the hello is the first record), else
 * the event to wait for.
 */
static int hs_tls(struct tcp_listener *tl, unsigned i)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = tl->hs[i].fd };
	short events;
	int ret = gdx_tls_step(tl->hs[i].tls, &events);

	if (ret == -EAGAIN) {
		if (events == POLLOUT)
			ev.events = EPOLLOUT;
		return epoll_ctl(tl->epfd, EPOLL_CTL_MOD, ev.data.fd, &ev) ? -errno : 0;
	}
	if (ret)
		return ret;
	/* epoll holds the socket, and the record relay may put another behind the fd */
	epoll_ctl(tl->epfd, EPOLL_CTL_DEL, ev.data.fd, NULL);
	ret = gdx_tls_records(tl->hs[i].tls);
	if (ret)
		return ret;
	GDX_DBG(SUBSYS, "listener: TLS 1.3, identity %s", gdx_tls_identity(tl->hs[i].tls));
	gdx_tls_free(tl->hs[i].tls);
	tl->hs[i].tls = NULL;
	if (epoll_ctl(tl->epfd, EPOLL_CTL_ADD, ev.data.fd, &ev))
		return -errno;
	return hello_send(ev.data.fd);
}

/*
 * Reads the hello of the handshake on fd, if any (or steps its TLS): 1 with
 * the socket in *out (blocking again, out of epfd) once its hello is in and
 * good, else 0 (more to come, or the connection dropped).
 */
static int hs_read(struct tcp_listener *tl, int fd, int *out)
{
	unsigned i;
	int ret;

	for (i = 0; i < tl->nhs && tl->hs[i].fd != fd; i++)
		;
	if (i == tl->nhs)
		return 0;	/* dropped earlier in this round */
	if (tl->hs[i].tls) {
		ret = hs_tls(tl, i);
		if (ret)
			hs_fail(tl, i, ret, gdx_now_ns());
		return 0;
	}
	ret = hello_recv(fd, &tl->hs[i].h, &tl->hs[i].got);
	if (ret > 0)
		ret = hello_check(&tl->hs[i].h);
	else if (!ret)
		return 0;
	if (!ret) {
		epoll_ctl(tl->epfd, EPOLL_CTL_DEL, fd, NULL);
		if (!fcntl(fd, F_SETFL, 0)) {
			hs_remove(tl, i);
			*out = fd;
			return 1;
		}
		ret = -errno;
	}
	hs_fail(tl, i, ret, gdx_now_ns());
	return 0;
}

static int tcp_listen(struct gdx_xport_listener *l, const char *hostport, void **priv,
		      char *bound, size_t bound_len)
{
	struct addrinfo *ai, *a;
	struct tcp_listener *tl;
	int fd = -1, one = 1, ret;

	tl = calloc(1, sizeof(*tl));
	if (!tl)
		return -ENOMEM;
	tl->tls = l->opts.tls_key;
	ret = tl->tls ? tls_psk(&l->opts, &tl->psk) : 0;
	if (!ret)
		ret = gdx_xport_resolve(hostport, AF_UNSPEC, 1, &ai);
	if (ret)
		goto fail;
	ret = -EADDRNOTAVAIL;
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0) {
			ret = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, a->ai_addr, a->ai_addrlen) && !listen(fd, 64))
			break;
		ret = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		goto fail;
	tl->fd = fd;
	tl->max_unexpected = l->opts.max_unexpected;
	tl->hs_ms = l->opts.timeout_ms;
	tl->hs_max = (unsigned)gdx_cfg_int("xport.tcp_handshakes");
	tl->hs = calloc(tl->hs_max, sizeof(*tl->hs));
	tl->epfd = epoll_create1(EPOLL_CLOEXEC);
	{
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

		if (!tl->hs || tl->epfd < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) ||
		    epoll_ctl(tl->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			ret = tl->hs ? -errno : -ENOMEM;
			if (tl->epfd >= 0)
				close(tl->epfd);
			free(tl->hs);
			close(fd);
			goto fail;
		}
	}
	pthread_mutex_init(&tl->lock, NULL);
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char h[64], p[8];

		getsockname(fd, (struct sockaddr *)&ss, &sl);
		getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
			    NI_NUMERICHOST | NI_NUMERICSERV);
		snprintf(bound, bound_len, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
	}
	*priv = tl;
	return 0;
fail:
	gdx_tls_wipe(&tl->psk, sizeof(tl->psk));
	free(tl);
	return ret;
}

/* Readable when an accept has something to do (a connection, a hello's bytes). */
static int tcp_listener_fd(void *lpriv)
{
	return ((struct tcp_listener *)lpriv)->epfd;
}

/*
 * Returns the first connection whose handshake is done within timeout_ms
 * (-1: none), handshaking with every connection that comes meanwhile.
 */
static int tcp_accept(void *lpriv, struct gdx_xport_ep *ep, int timeout_ms, void **priv)
{
	struct tcp_listener *tl = lpriv;
	uint64_t end = timeout_ms < 0 ? UINT64_MAX
				      : gdx_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int fd = -1, ret = 0;

	if (timeout_ms < 0) {
		pthread_mutex_lock(&tl->lock);
	} else {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		if (pthread_mutex_timedlock(&tl->lock, &ts))
			return -ETIMEDOUT;
	}
	while (fd < 0 && !ret) {
		struct epoll_event ev[16];
		uint64_t now = gdx_now_ns(), wake = GDX_MIN(hs_expire(tl, now), end);
		int n, wait_ms = -1;

		if (tl->dropped || tl->failed)	/* what is left to say */
			wake = GDX_MIN(wake, tl->said_ns + 1000000000u);

		if (wake != UINT64_MAX)
			wait_ms = wake > now ? (int)GDX_MIN((wake - now + 999999) / 1000000, 3600000u)
					     : 0;
		n = epoll_wait(tl->epfd, ev, 16, wait_ms);
		if (n < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		/* hellos first: a peer that has answered is not dropped for room */
		for (int i = 0; i < n && fd < 0; i++)
			if (ev[i].data.fd != tl->fd)
				hs_read(tl, ev[i].data.fd, &fd);
		for (int i = 0; i < n && fd < 0 && !ret; i++)
			if (ev[i].data.fd == tl->fd)
				ret = hs_take(tl, gdx_now_ns());
		if (fd < 0 && !ret && gdx_now_ns() >= end)
			ret = -ETIMEDOUT;
	}
	pthread_mutex_unlock(&tl->lock);
	if (fd < 0)
		return ret;
	ret = ep_start(ep, fd, tl->tls, priv);
	if (ret)
		close(fd);
	return ret;
}

static void tcp_listener_close(void *lpriv)
{
	struct tcp_listener *tl = lpriv;

	while (tl->nhs)
		hs_drop(tl, tl->nhs - 1);
	hs_said(tl, UINT64_MAX);	/* what is left to say */
	close(tl->epfd);
	close(tl->fd);
	pthread_mutex_destroy(&tl->lock);
	free(tl->hs);
	gdx_tls_wipe(&tl->psk, sizeof(tl->psk));
	free(tl);
}

static int tcp_connect(struct gdx_xport_ep *ep, const char *hostport, void **priv)
{
	struct addrinfo *ai, *a;
	int fd = -1, ret;

	ret = gdx_xport_resolve(hostport, AF_UNSPEC, 0, &ai);
	if (ret)
		return ret;
	ret = -ECONNREFUSED;
	for (a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0)
			continue;
		if (!connect(fd, a->ai_addr, a->ai_addrlen))
			break;
		ret = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return ret;
	return ep_open(ep, fd, priv);
}

static void tcp_disconnect(void *priv)
{
	struct tcp_ep *t = priv;

	/* A response held for a post answers a message the caller has: it goes first. */
	tcp_resp_push(t);
	pthread_mutex_lock(&t->lock);
	tcp_kill_conn(t, 0);
	while (!t->flushed)
		pthread_cond_wait(&t->flushed_cond, &t->lock);
	pthread_mutex_unlock(&t->lock);
}

static void tcp_destroy(void *priv)
{
	struct tcp_ep *t = priv;
	bool leak;

	pthread_join(t->rx, NULL);
	close(t->fd);
	/*
	 * The lanes' copies landed or the agent is halted (tcp_stage_stop), or
	 * a poster set them up while the receive thread stopped and nothing
	 * went through them: the lanes go, then the agent.
	 */
	gdx_stage_close(t->rx_lane);
	gdx_stage_close(t->tx_lane);
	leak = gdx_stage_ctx_close(t->stage) == -ETIMEDOUT;
	tcp_dlanes_free(&t->rxs);
	tcp_dlanes_free(&t->txs);
	if (t->kr_mem && !leak)	/* an agent that did not stop may still read it */
		gdx_pinned_free(t->stage_dev, t->kr_mem);
	gdx_stats_destroy(t->stats);
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->stage_lock);
	pthread_cond_destroy(&t->tx_cond);
	pthread_cond_destroy(&t->rx_cond);
	pthread_cond_destroy(&t->flushed_cond);
	pthread_cond_destroy(&t->rd_cond);
	pthread_mutex_destroy(&t->ans_lock);
	pthread_cond_destroy(&t->ans_cond);
	ep_fds_close(t);
	free(t->rbuf);
	free(t);
}

static int tcp_event_fd(void *priv)
{
	return ((struct tcp_ep *)priv)->w_epfd;
}

/* Memory an endpoint thread moves through a device: device or managed memory. */
int tcp_dev_mem(enum gdx_mem_kind kind, const struct gdx_device *dev)
{
	return dev && kind != GDX_MEM_HOST && kind != GDX_MEM_PINNED;
}

static int tcp_mr_reg(void *priv, struct gdx_xport_region *r)
{
	r->addr = (uint64_t)(uintptr_t)r->p;
	if (tcp_dev_mem(r->kind, r->dev) &&
	    (r->access & (GDX_XPORT_ACCESS_REMOTE_WRITE | GDX_XPORT_ACCESS_REMOTE_READ))) {
		int ret = tcp_stage_prepare(priv, r->dev,
					    !!(r->access & GDX_XPORT_ACCESS_REMOTE_WRITE),
					    !!(r->access & GDX_XPORT_ACCESS_REMOTE_READ));

		if (ret)
			return ret;
	}
	if (r->kind == GDX_MEM_HOST || r->kind == GDX_MEM_PINNED) {
		r->path = GDX_XPORT_PATH_DIRECT;
		r->why = "socket I/O straight into host memory";
	} else {
		r->path = GDX_XPORT_PATH_BOUNCE;
		r->why = "device memory staged through pinned memory (TCP has no device DMA): "
			 "received into a ring and sent from one, copies by a copy agent";
	}
	if (!r->access)
		return 0;
	return gdx_xport_rkey_add(r, &r->key);
}

static void tcp_mr_dereg(void *priv, struct gdx_xport_region *r)
{
	(void)priv;
	if (r->access)
		gdx_xport_rkey_del(r->key);
}

/*
 * Device memory in the shared receive queue: the receive thread may take it
 * (rx_into).  One whose set-up failed (reported) fails the receives into it.
 */
static void tcp_srq_device(void *priv, struct gdx_device *dev)
{
	tcp_stage_prepare(priv, dev, 1, 0);
}

const struct gdx_xport_ops gdx_xport_tcp_ops = {
	.scheme = "tcp",
	.listen = tcp_listen,
	.listener_fd = tcp_listener_fd,
	.accept = tcp_accept,
	.listener_close = tcp_listener_close,
	.connect = tcp_connect,
	.disconnect = tcp_disconnect,
	.destroy = tcp_destroy,
	.mr_reg = tcp_mr_reg,
	.mr_dereg = tcp_mr_dereg,
	.post = tcp_post,
	.srq_kick = tcp_match,
	.progress = tcp_progress,
	.event_fd = tcp_event_fd,
	.wait = tcp_wait,
	.srq_device = tcp_srq_device,
};
