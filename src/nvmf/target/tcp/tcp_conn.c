/* SPDX-License-Identifier: MIT */
/*
 * NVMe/TCP target: a connection's life.  Reactor 0 accepts (refusing at the
 * limits, pausing when it cannot even refuse) and hands sockets round-robin
 * to the reactors; a TLS port's connection runs its handshake first; ICReq
 * is answered with ICResp; after Connect an I/O queue moves to the reactor
 * its QID maps to.  Local connections serve the tests and the fuzzer.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/tls.h"
#include "nvmf/target/tcp/tcp_int.h"

void nvmf_tcp_handle_icreq(struct tcp_conn *c)
{
	struct tx_item *it = &c->conn_tx;
	uint8_t dgst = c->hdr.icreq.dgst & (GDX_TCP_DGST_HDR | GDX_TCP_DGST_DATA);

	/* the Linux host insists on getting exactly the digests it asked for */
	c->params.hdgst = dgst & GDX_TCP_DGST_HDR;
	c->params.ddgst = dgst & GDX_TCP_DGST_DATA;
	c->params.maxh2cdata = c->tgt->maxh2cdata;
	c->params.cpda = 0;
	c->phase = GDX_TCP_PHASE_READY;
	memset(it, 0, sizeof(*it));
	it->hdr_len = gdx_tcp_icresp_init((struct gdx_tcp_icresp *)it->hdr, dgst,
					  c->tgt->maxh2cdata);
	it->kind = TX_PLAIN;
	nvmf_tcp_tx_queue(c, it);
	GDX_DBG("nvmf", "%s: ICReq digests hdr=%d data=%d", c->peer, c->params.hdgst,
		c->params.ddgst);
	nvmf_tcp_rx_expect_hdr(c);
}

/* ---- connections ------------------------------------------------------------------ */

static struct tcp_conn *conn_alloc(struct gdx_nvmf_target *t, int fd)
{
	struct tcp_conn *c = calloc(1, sizeof(*c));
	static const char *const names[] = { "commands", "errors", "bytes_in", "bytes_out" };

	if (!c)
		return NULL;
	c->rxbuf = malloc(RXBUF_SIZE);
	if (!c->rxbuf) {
		free(c);
		return NULL;
	}
	c->ev.kind = EV_CONN;
	c->fd = fd;
	c->tgt = t;
	c->born_ns = gdx_now_ns();
	c->sq.tgt = &t->core;
	c->sq.handle = c;
	c->sq.aen_kick = nvmf_tcp_aen_kick;
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(c->sq.ctr); i++)
		c->sq.ctr[i].name = names[i];
	c->phase = GDX_TCP_PHASE_IC;
	c->params.maxh2cdata = t->maxh2cdata;
	c->tx_tail = &c->tx_head;
	nvmf_bufs_init(&c->bufs, t, &c->sq, c->peer);
	c->pipe[0] = c->pipe[1] = -1;
	nvmf_tcp_rx_expect_hdr(c);
	return c;
}

static void conn_free(struct tcp_conn *c)
{
	nvmf_tcp_count_pdus(c);
	for (unsigned i = 0; i < c->nslots; i++) {
		nvmf_tcp_req_buf_drop(c->slots[i]);
		free(c->slots[i]);
	}
	gdx_stats_destroy(c->sq_stats);
	gdx_tls_free(c->tls);
	if (c->pipe[0] >= 0) {
		close(c->pipe[0]);
		close(c->pipe[1]);
	}
	free(c->rxbuf);
	if (!c->local)
		atomic_fetch_sub(&c->tgt->nconns, 1);
	free(c);
}

void nvmf_tcp_conn_link(struct tcp_reactor *r, struct tcp_conn *c)
{
	c->r = r;
	c->sq.ioctx = r->ioctx;
	c->prev = NULL;
	c->next = r->conns;
	if (r->conns)
		r->conns->prev = c;
	r->conns = c;
}

static void conn_unlink(struct tcp_conn *c)
{
	struct tcp_reactor *r = c->r;

	if (c->prev)
		c->prev->next = c->next;
	else
		r->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

/*
 * Ends a connection: the socket closes at once.  The memory is not freed
 * here: whoever called this (a PDU handler deep in the receive loop, a flush,
 * a timer) may still hold the connection.  It goes on the reactor's dirty list,
 * and flush_dirty frees it (nvmf_tcp_conn_reap) once the iteration is done with it and
 * no backend holds a request of it.  why == NULL: already logged.
 */
void nvmf_tcp_conn_close(struct tcp_conn *c, const char *why)
{
	if (c->dead)
		return;
	c->dead = true;
	if (why)
		GDX_INFO("nvmf", "%s: connection ends (%s)", c->peer, why);
	if (!c->local) {
		epoll_ctl(c->r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	nvmf_sq_destroy(&c->sq);
	/* held AERs are not with a backend: release them now */
	for (unsigned i = 0; i < c->nslots; i++) {
		struct tcp_req *t = c->slots[i];

		if (t->state == REQ_EXEC && t->req.cmd.opc == GDX_NVME_ADM_ASYNC_EVENT &&
		    c->sq.qid == 0 && !t->req.ns) {
			c->inflight--;
			nvmf_tcp_req_free(t);
		}
	}
	c->tx_head = NULL;
	c->tx_tail = &c->tx_head;
	/* commands waiting for buffers never started: their slots go with the connection */
	while (nvmf_bufs_pop(&c->bufs))
		;
	mark_dirty(c);
}

/*
 * The one place a connection is freed: dead, and no request of it with a
 * backend (the last completion marks it dirty again).  Returns true if freed.
 */
bool nvmf_tcp_conn_reap(struct tcp_conn *c)
{
	if (!c->dead || c->inflight)
		return false;
	if (c->r)
		conn_unlink(c);
	conn_free(c);
	return true;
}

/*
 * Names the peer, and tells whether it connected from the address it reached
 * (loopback, or this machine's own address): then the kernel delivers the
 * bytes by copying them into the host's buffer whatever the target does, and
 * splicing namespace pages only adds a page walk and a reference per 4 KiB on
 * the way out and a slower copy on the way in (measured on the H200: 128 KiB
 * and 1 MiB reads, 8 reactors at 100% CPU in follow_page_pte, try_grab_folio
 * and pipe release; the host in __check_object_size).
 */
static bool peer_name(int fd, const struct sockaddr_storage *local, char *out, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	bool ok = !getpeername(fd, (struct sockaddr *)&ss, &sl);

	nvmf_target_addr_str(ok ? (struct sockaddr *)&ss : NULL, sl, out, n);
	if (!ok || ss.ss_family != local->ss_family)
		return false;
	if (ss.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&ss)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)local)->sin_addr.s_addr;
	if (ss.ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)&ss)->sin6_addr,
			       &((const struct sockaddr_in6 *)local)->sin6_addr, sizeof(struct in6_addr));
	return false;
}

static void conn_attach(struct tcp_reactor *r, int fd, struct nvmf_port *port)
{
	struct gdx_nvmf_target *t = r->tgt;
	struct tcp_conn *c = conn_alloc(t, fd);
	struct epoll_event e = { .events = EPOLLIN };
	socklen_t sl = sizeof(struct sockaddr_storage);
	int one = 1;

	if (!c) {
		atomic_fetch_sub(&t->nconns, 1);
		close(fd);
		return;
	}
	c->sq.port = port;
	c->tls_peek = port->sectype == GDX_NVMF_TCP_SECTYPE_TLS13;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	getsockname(fd, (struct sockaddr *)&c->sq.local, &sl);
	c->same_host = peer_name(fd, &c->sq.local, c->peer, sizeof(c->peer));
	e.data.ptr = &c->ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &e)) {
		GDX_ERR("nvmf", "epoll_ctl: %s", strerror(errno));
		conn_free(c);
		close(fd);
		return;
	}
	nvmf_tcp_conn_link(r, c);
	gdx_counter_add(&t->ctr[TGT_CTR_CONNS], 1);
	GDX_DBG("nvmf", "%s: accepted on reactor %u", c->peer, r->id);
}

/* ---- TLS (the accept path of a port with addr_tsas tls1.3) ---------------------------- */

static int tls_find(void *arg, const char *identity, struct gdx_tls_psk *out)
{
	struct tcp_conn *c = arg;

	return nvmf_tls_psk_find(c->sq.tgt, c->sq.port, identity, out, c->tls_nqn[0],
				 c->tls_nqn[1]);
}

/*
 * The host's first byte says whether it starts a TLS handshake or sends an
 * ICReq in clear (refused where TLS is required).  The handshake then runs
 * here, one step per socket event; tick() bounds it, with the ICReq and
 * Connect, by nvmf.target.handshake_timeout_ms.  Once done the kernel or a
 * relay thread (tls.h) holds the record layer and the connection goes on as
 * a clear one would.
 */
void nvmf_tcp_conn_tls(struct tcp_conn *c)
{
	struct nvmf_port *p = c->sq.port;
	short events = POLLIN;
	char why[96];
	int ret;

	if (c->tls_peek) {
		uint8_t b;
		ssize_t n = recv(c->fd, &b, 1, MSG_PEEK);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			nvmf_tcp_conn_close(c, n ? strerror(errno) : "closed before a byte");
			return;
		}
		c->tls_peek = false;
		if (!gdx_tls_is_hello(b)) {
			if (p->treq == GDX_NVMF_TREQ_REQUIRED)
				nvmf_tcp_conn_close(c, "no TLS handshake on a port that requires TLS "
						       "(addr_treq)");
			else
				nvmf_tcp_conn_read(c);
			return;
		}
		/* hash 0: the suite follows the key of the host the identity names */
		ret = gdx_tls_server_start(c->fd, 0, tls_find, c, &c->tls);
		if (ret) {
			nvmf_tcp_conn_close(c, "TLS: out of memory");
			return;
		}
	}
	ret = gdx_tls_step(c->tls, &events);
	if (ret == -EAGAIN) {
		nvmf_tcp_set_epollout(c, events == POLLOUT);
		return;
	}
	if (ret) {
		snprintf(why, sizeof(why), "TLS handshake: %s", strerror(-ret));
		nvmf_tcp_conn_close(c, why);
		return;
	}
	/* epoll holds the socket, and the record relay may put another behind c->fd */
	nvmf_tcp_set_epollout(c, false);
	epoll_ctl(c->r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	ret = gdx_tls_records(c->tls);
	if (!ret && epoll_ctl(c->r->epfd, EPOLL_CTL_ADD, c->fd,
			      &(struct epoll_event){ .events = EPOLLIN, .data.ptr = &c->ev }))
		ret = -errno;
	if (ret) {
		snprintf(why, sizeof(why), "TLS record layer: %s", strerror(-ret));
		nvmf_tcp_conn_close(c, why);
		return;
	}
	GDX_INFO("nvmf", "%s: TLS 1.3, identity %s", c->peer, gdx_tls_identity(c->tls));
	gdx_tls_free(c->tls);
	c->tls = NULL;
	c->sq.tls_hostnqn = c->tls_nqn[0];
	c->sq.tls_subnqn = c->tls_nqn[1];
}

/* ---- accept, hand-off between reactors ----------------------------------------- */

/* Queues an accepted socket or a moving connection for reactor `to`. */
static int handoff_push(struct tcp_reactor *to, struct handoff h)
{
	pthread_mutex_lock(&to->lock);
	if (to->nhandoff == to->handoff_cap) {
		unsigned cap = to->handoff_cap ? to->handoff_cap * 2 : 16;
		struct handoff *p = realloc(to->handoff, cap * sizeof(*p));

		if (!p) {
			pthread_mutex_unlock(&to->lock);
			return -ENOMEM;
		}
		to->handoff = p;
		to->handoff_cap = cap;
	}
	to->handoff[to->nhandoff++] = h;
	pthread_mutex_unlock(&to->lock);
	nvmf_tcp_reactor_wake(to);
	return 0;
}

static void listeners_arm(struct tcp_reactor *r, bool on)
{
	for (unsigned i = 0; i < r->nlisteners; i++) {
		struct epoll_event e = { .events = on ? EPOLLIN : 0,
					 .data.ptr = &r->listeners[i].ev };

		epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->listeners[i].fd, &e);
	}
}

/* A connection the target will not serve: closed at once, counted, logged (limited). */
static void conn_refuse(struct tcp_reactor *r, int fd, struct listener *l, const char *why)
{
	struct gdx_nvmf_target *t = r->tgt;
	uint64_t held;

	close(fd);
	gdx_counter_add(&t->ctr[TGT_CTR_REFUSED], 1);
	if (nvmf_log_limit_ok(&r->accept_log, gdx_now_ns(), &held))
		GDX_WARN("nvmf", "port %u: connection refused: %s (%" PRIu64 " more since the "
			 "last line; %" PRIu64 " refused in all)", l->port->portid, why, held,
			 gdx_counter_get(&t->ctr[TGT_CTR_REFUSED]));
}

/*
 * accept() failed for want of descriptors or memory.  Refuses the connection
 * at the head of the queue with the reserve descriptor; if that cannot be
 * done, stops accepting for a pause that doubles (10 ms to 1 s) while the
 * shortage lasts, instead of spinning on a listener that stays readable.
 * Returns true if one was refused (the caller goes on accepting).
 */
static bool accept_short(struct tcp_reactor *r, struct listener *l, int err)
{
	char why[96];
	int fd = -1;

	snprintf(why, sizeof(why), "accept: %s", strerror(err));
	if (r->reserve_fd >= 0) {
		close(r->reserve_fd);
		fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			conn_refuse(r, fd, l, why);
		r->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && r->reserve_fd >= 0)
			return true;
	}
	r->accept_pause_ns = GDX_MIN(GDX_MAX(r->accept_pause_ns * 2, ACCEPT_PAUSE_MIN_NS),
				     ACCEPT_PAUSE_MAX_NS);
	r->accept_resume_ns = gdx_now_ns() + r->accept_pause_ns;
	listeners_arm(r, false);
	if (fd < 0) {
		uint64_t held;

		if (nvmf_log_limit_ok(&r->accept_log, gdx_now_ns(), &held))
			GDX_WARN("nvmf", "port %u: %s; not accepting for %" PRIu64 " ms (%" PRIu64
				 " more since the last line)", l->port->portid, why,
				 r->accept_pause_ns / 1000000, held);
	}
	return false;
}

/* The pause is over: accept again, with a reserve descriptor if one can be had. */
void nvmf_tcp_accept_resume(struct tcp_reactor *r)
{
	r->accept_resume_ns = 0;
	if (r->reserve_fd < 0)
		r->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	listeners_arm(r, true);
}

void nvmf_tcp_accept(struct tcp_reactor *r, struct listener *l)
{
	struct gdx_nvmf_target *t = r->tgt;

	for (;;) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct tcp_reactor *to;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				if (accept_short(r, l, errno))
					continue;
				return;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				GDX_WARN("nvmf", "port %u: accept: %s", l->port->portid,
					 strerror(errno));
			return;
		}
		r->accept_pause_ns = 0;
		if (atomic_load(&t->nconns) >= t->max_conns) {
			conn_refuse(r, fd, l, "nvmf.target.max_conns reached");
			continue;
		}
		atomic_fetch_add(&t->nconns, 1);
		to = &t->reactors[atomic_fetch_add(&t->next_reactor, 1) % t->nreactors];
		if (to == r) {
			conn_attach(r, fd, l->port);
			continue;
		}
		if (handoff_push(to, (struct handoff){ fd, l->port, NULL })) {
			atomic_fetch_sub(&t->nconns, 1);
			close(fd);
		}
	}
}

void nvmf_tcp_take_handoffs(struct tcp_reactor *r)
{
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->nhandoff; i++) {
		struct tcp_conn *c = r->handoff[i].conn;
		struct epoll_event e = { .events = EPOLLIN };

		if (!c) {
			conn_attach(r, r->handoff[i].fd, r->handoff[i].port);
			continue;
		}
		nvmf_tcp_conn_link(r, c);
		e.data.ptr = &c->ev;
		if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, c->fd, &e))
			nvmf_tcp_conn_close(c, strerror(errno));
	}
	r->nhandoff = 0;
	pthread_mutex_unlock(&r->lock);
}

/*
 * Hands a freshly connected I/O queue to the reactor its QID maps to, once
 * nothing of it is in flight here.  With pinned reactors this keeps queue N's
 * target work on the core where the host's queue N runs.
 */
void nvmf_tcp_conn_move(struct tcp_conn *c)
{
	struct tcp_reactor *to = c->move_to;
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = &c->ev };

	c->move_to = NULL;
	epoll_ctl(c->r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	c->want_out = false;
	conn_unlink(c);
	GDX_DBG("nvmf", "%s: qid %u moves to reactor %u", c->peer, c->sq.qid, to->id);
	if (handoff_push(to, (struct handoff){ c->fd, c->sq.port, c })) {
		/* no memory to hand it over: it stays */
		nvmf_tcp_conn_link(c->r, c);
		if (epoll_ctl(c->r->epfd, EPOLL_CTL_ADD, c->fd, &e))
			nvmf_tcp_conn_close(c, strerror(errno));
	}
}

/* ---- local connections (tests, fuzzing) --------------------------------------------- */

struct tcp_conn *nvmf_tcp_conn_new_local(struct gdx_nvmf_target *t, int fd)
{
	struct tcp_conn *c = conn_alloc(t, fd);

	if (!c)
		return NULL;
	c->local = true;
	snprintf(c->peer, sizeof(c->peer), "local");
	return c;
}

int nvmf_tcp_conn_feed(struct tcp_conn *c, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len && !c->dead) {
		uint32_t n = (uint32_t)GDX_MIN(len, (size_t)RXBUF_SIZE);

		/* the staging buffer is what recv() would have filled */
		memcpy(c->rxbuf, p, n);
		nvmf_tcp_rx_consume(c, c->rxbuf, n);
		if (!c->dead)
			nvmf_tcp_conn_flush(c);
		p += n;
		len -= n;
	}
	if (!c->dead)
		return 0;
	/* as the reactor does after an iteration; a local queue has no backend
	 * requests in flight once closed (no io_uring, AERs released) */
	if (!nvmf_tcp_conn_reap(c))
		abort();
	return -1;
}

void nvmf_tcp_conn_free_local(struct tcp_conn *c)
{
	nvmf_tcp_conn_close(c, NULL);
	if (!nvmf_tcp_conn_reap(c))
		abort();
}
