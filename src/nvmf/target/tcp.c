/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/log.h"
#include "common/tls.h"
#include "common/util.h"
#include "nvmf/proto/tcp.h"
#include "nvmf/target/tcp/tcp_int.h"
#include "nvmf/target/transport.h"

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
	c->wait_tail = &c->wait_head;
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
	c->wait_head = NULL;
	c->wait_tail = &c->wait_head;
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

	return gdx_tls_nvme_lookup(&c->sq.port->tls_key, identity, out, c->tls_nqn[0],
				   c->tls_nqn[1]);
}

/*
 * The host's first byte says whether it starts a TLS handshake or sends an
 * ICReq in clear (refused where TLS is required).  The handshake then runs
 * here, one step per socket event; tick() bounds it, with the ICReq and
 * Connect, by nvmf.target.handshake_timeout_ms.  Once done the kernel holds
 * the record layer and the connection goes on as a clear one would.
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
		ret = gdx_tls_server_start(c->fd, gdx_tls_key_hash(&p->tls_key), tls_find, c,
					   &c->tls);
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
	GDX_INFO("nvmf", "%s: TLS 1.3, identity %s", c->peer, gdx_tls_identity(c->tls));
	gdx_tls_free(c->tls);
	c->tls = NULL;
	nvmf_tcp_set_epollout(c, false);
	c->sq.tls_hostnqn = c->tls_nqn[0];
	c->sq.tls_subnqn = c->tls_nqn[1];
}

/* ---- reactors ----------------------------------------------------------------------- */

void nvmf_tcp_reactor_wake(struct tcp_reactor *r)
{
	uint64_t one = 1;

	if (write(r->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		GDX_WARN("nvmf", "reactor %u wake: %s", r->id, strerror(errno));
}

void nvmf_tcp_aen_kick(void *handle)
{
	struct tcp_conn *c = handle;

	atomic_store(&c->r->aen, true);
	nvmf_tcp_reactor_wake(c->r);
}

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
	if (log_limit_ok(&r->accept_log, gdx_now_ns(), &held))
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

		if (log_limit_ok(&r->accept_log, gdx_now_ns(), &held))
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

static void deliver_aens(struct tcp_reactor *r)
{
	if (!atomic_exchange(&r->aen, false))
		return;
	for (struct tcp_conn *c = r->conns; c; c = c->next)
		if (!c->dead && c->sq.ctrl && c->sq.qid == 0)
			nvmf_ctrl_aen_deliver(&c->sq);
}

/*
 * Once a second: queues the host takes no data from (nvmf.target.stall_timeout_ms),
 * keep-alive expiry, connections that never connected
 * (nvmf.target.handshake_timeout_ms).
 */
static void tick(struct tcp_reactor *r)
{
	uint64_t now = gdx_now_ns();

	for (struct tcp_conn *c = r->conns, *n; c; c = n) {
		n = c->next;
		if (c->dead)
			continue;
		if ((c->tx_head && now - c->tx_moved_ns > r->tgt->stall_ns) ||
		    (c->nr2t && now - c->rx_moved_ns > r->tgt->stall_ns)) {
			char why[112];

			snprintf(why, sizeof(why), "no data %s for %" PRIu64
				 " ms: nvmf.target.stall_timeout_ms",
				 c->tx_head && now - c->tx_moved_ns > r->tgt->stall_ns ?
					 "taken" : "sent for an R2T",
				 r->tgt->stall_ns / 1000000);
			gdx_counter_add(&r->tgt->ctr[TGT_CTR_STALLS], 1);
			nvmf_tcp_conn_close(c, why);
			continue;
		}
		/* over the target's budget: buffers kept for reuse go; a connection held
		 * for it looks again (others' buffers may have gone meanwhile) */
		if (nvmf_tcp_tgt_over(r->tgt))
			nvmf_tcp_conn_trim(c);
		if (c->wait_head)
			mark_dirty(c);
		if (c->sq.ctrl) {
			nvmf_target_sq_stats(&c->sq, &c->sq_stats);
			if (nvmf_sq_expired(&c->sq, now))
				nvmf_tcp_conn_close(c, "controller failed or keep-alive expired");
		} else if (now - c->born_ns > r->tgt->handshake_ns) {
			char why[80];

			snprintf(why, sizeof(why), "no %sICReq and Connect within %" PRIu64 " ms",
				 c->tls || c->tls_peek ? "TLS handshake, " : "",
				 r->tgt->handshake_ns / 1000000);
			nvmf_tcp_conn_close(c, why);
		}
	}
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

static void flush_dirty(struct tcp_reactor *r)
{
	while (r->dirty) {
		struct tcp_conn *c = r->dirty;

		r->dirty = c->dirty_next;
		c->dirty = false;
		if (!c->dead)
			nvmf_tcp_conn_flush(c);
		if (!c->dead && c->wait_head)
			nvmf_tcp_conn_unblock(c);
		if (c->dirty)
			continue;	/* closed or more to send: back on the list */
		if (c->dead)
			nvmf_tcp_conn_reap(c);
		else if (c->move_to && !c->tx_head && !c->inflight)
			nvmf_tcp_conn_move(c);
	}
}

/*
 * Follow mode.  While its busiest connection keeps at most SHALLOW_DEPTH
 * commands in flight (for FOLLOW_AFTER periods in a row), a reactor runs on the CPU that connection's packets
 * arrive on (where a host on this machine submits, or where the NIC's receive
 * queue is served): the round trip then needs no wake-up of another core,
 * which is also where nvmet-tcp runs a queue's work.  Deeper queues send it
 * home (--cpus, or the CPUs it may run on), so that target and host work
 * proceed in parallel.
 */
static void place(struct tcp_reactor *r)
{
	struct tcp_conn *busiest = NULL;
	unsigned depth = 0;
	int want = -1, cpu = -1;
	socklen_t sl = sizeof(cpu);
	cpu_set_t set;

	for (struct tcp_conn *c = r->conns; c; c = c->next) {
		if (!c->dead && c->win_cmds && (!busiest || c->win_cmds > busiest->win_cmds))
			busiest = c;
		depth = GDX_MAX(depth, c->win_depth);
		c->win_cmds = c->win_depth = 0;
	}
	if (!busiest)
		return;		/* idle: no reason to move */
	if (getsockopt(busiest->fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, &sl) || cpu < 0 ||
	    cpu >= CPU_SETSIZE)
		cpu = -1;
	/* home is the host's CPU too (a one-CPU machine): spinning there starves it */
	r->shares_home = cpu >= 0 && CPU_COUNT(&r->home) == 1 && CPU_ISSET(cpu, &r->home);
	/*
	 * A target faster than its host sees few commands in flight even when
	 * the host queues many, now and then none: follow only after a run of
	 * shallow periods, go home at the first deep one.
	 */
	r->shallow = depth > SHALLOW_DEPTH ? 0 : GDX_MIN(r->shallow + 1, (unsigned)FOLLOW_AFTER);
	if (r->shallow >= FOLLOW_AFTER)
		want = cpu;
	if (want == r->at)
		return;
	if (want >= 0) {
		CPU_ZERO(&set);
		CPU_SET(want, &set);
	} else {
		set = r->home;
	}
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set)) {
		GDX_DBG("nvmf", "reactor %u: cannot move to CPU %d", r->id, want);
		return;
	}
	GDX_DBG("nvmf", "reactor %u: %s %d (depth %u)", r->id,
		want >= 0 ? "follows to CPU" : "home from", want >= 0 ? want : r->at, depth);
	r->at = want;
}

/*
 * Poll window, adapted as guest halt-polling does: a sleep that ended sooner
 * than the cap means polling a little longer would have caught the event
 * without a wake-up, so the window grows to cover that gap; a gap longer
 * than the cap means polling would only have burnt the core, so it halves.
 */
static uint64_t poll_adapt(uint64_t window, uint64_t gap, uint64_t cap)
{
	if (gap > cap)
		return window / 2;
	return GDX_MIN(cap, GDX_MAX(window, gap + gap / 4));
}

static void *reactor_main(void *arg)
{
	struct tcp_reactor *r = arg;
	/* one clock read per iteration (two after a sleep when polling): on
	 * some machines it is a system call */
	uint64_t now = gdx_now_ns(), next_tick = now + 1000000000ull, last_event = 0, window = 0;
	uint64_t prev;
	uint64_t next_place = 0, cap = r->tgt->poll_ns;
	bool lat = r->tgt->lat_stats;

	r->at = -1;
	pthread_getaffinity_np(pthread_self(), sizeof(r->home), &r->home);
	while (!atomic_load(&r->stop)) {
		struct epoll_event evs[64];
		uint64_t wake_at = r->accept_resume_ns ? GDX_MIN(next_tick, r->accept_resume_ns) :
							 next_tick;
		int timeout = now >= wake_at ? 0 : (int)((wake_at - now) / 1000000) + 1;
		int n;

		/* a reactor sharing its CPU with the host never spins */
		if (r->at < 0 && !r->shares_home && now - last_event < window)
			timeout = 0;
		n = epoll_wait(r->epfd, evs, 64, timeout);
		r->wake_ns = timeout && (cap || lat) ? gdx_now_ns() : now;
		/* gaps count from the end of the last busy iteration; an event caught
		 * while polling leaves the window as it is */
		if (cap && timeout) {
			uint64_t gap = r->wake_ns - last_event;

			if (n > 0)
				window = poll_adapt(window, gap, cap);
			else if (gap > cap)
				window /= 2;
		}

		for (int i = 0; i < n; i++) {
			struct ev *ev = evs[i].data.ptr;

			switch (ev->kind) {
			case EV_LISTEN:
				nvmf_tcp_accept(r, GDX_CONTAINER_OF(ev, struct listener, ev));
				break;
			case EV_WAKE: {
				uint64_t v;

				if (read(r->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					GDX_WARN("nvmf", "wake read: %s", strerror(errno));
				nvmf_tcp_take_handoffs(r);
				deliver_aens(r);
				break;
			}
			case EV_IOCTX:
				nvmf_ioctx_reap(r->ioctx);
				break;
			case EV_CONN: {
				struct tcp_conn *c = GDX_CONTAINER_OF(ev, struct tcp_conn, ev);

				if (c->dead)
					break;
				if (evs[i].events & (EPOLLERR | EPOLLHUP) &&
				    !(evs[i].events & EPOLLIN)) {
					nvmf_tcp_conn_close(c, "socket error");
					break;
				}
				if (c->tls_peek || c->tls) {
					nvmf_tcp_conn_tls(c);
					break;
				}
				if (evs[i].events & EPOLLOUT)
					mark_dirty(c);
				if (evs[i].events & EPOLLIN) {
					nvmf_tcp_conn_read(c);
					nvmf_tcp_count_pdus(c);
				}
				break;
			}
			}
		}
		nvmf_ioctx_flush(r->ioctx);
		flush_dirty(r);
		prev = now;
		now = gdx_now_ns();
		if (n > 0)
			last_event = now;
		if (lat) {
			if (timeout) {
				lat_add(r, TGT_LAT_SLEEPS, 1);
				lat_add(r, TGT_LAT_SLEEP_NS, r->wake_ns - prev);
			}
			if (n > 0) {
				lat_add(r, TGT_LAT_WAKES, 1);
				lat_add(r, TGT_LAT_WAKE_CMDS, r->iter_cmds);
				lat_add(r, TGT_LAT_BUSY_NS, now - r->wake_ns);
			} else if (!timeout) {
				lat_add(r, TGT_LAT_POLL_NS, now - prev);
			}
		}
		r->iter_cmds = 0;
		if (r->tgt->follow && now >= next_place) {
			place(r);
			next_place = now + PLACE_NS;
		}
		if (r->accept_resume_ns && now >= r->accept_resume_ns)
			nvmf_tcp_accept_resume(r);
		if (now >= next_tick) {
			tick(r);
			flush_dirty(r);
			next_tick = now + 1000000000ull;
		}
	}
	return NULL;
}

static int listen_on(struct nvmf_port *p, int *bound)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd, one = 1, ret;

	ret = getaddrinfo(p->traddr, p->trsvcid, &hints, &ai);
	if (ret) {
		GDX_ERR("nvmf", "port %u: bad address %s:%s: %s", p->portid, p->traddr, p->trsvcid,
			gai_strerror(ret));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ret = -errno;
		freeaddrinfo(ai);
		return ret;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
		ret = -errno;
		GDX_ERR("nvmf", "port %u: cannot listen on %s:%s: %s", p->portid, p->traddr,
			p->trsvcid, strerror(errno));
		close(fd);
		freeaddrinfo(ai);
		return ret;
	}
	freeaddrinfo(ai);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*bound = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
						 ((struct sockaddr_in6 *)&ss)->sin6_port);
	if (!strcmp(p->trsvcid, "0"))
		snprintf(p->trsvcid, sizeof(p->trsvcid), "%d", *bound);
	GDX_INFO("nvmf", "port %u listening on %s%s%s:%d", p->portid, p->adrfam ==
		 GDX_NVMF_ADRFAM_IPV6 ? "[" : "", p->traddr, p->adrfam == GDX_NVMF_ADRFAM_IPV6 ?
		 "]" : "", *bound);
	return fd;
}

static int reactor_init(struct gdx_nvmf_target *t, struct tcp_reactor *r, unsigned id)
{
	struct epoll_event e = { .events = EPOLLIN };
	int ret;

	r->tgt = t;
	r->id = id;
	r->reserve_fd = -1;
	r->wake_ev.kind = EV_WAKE;
	r->io_ev.kind = EV_IOCTX;
	pthread_mutex_init(&r->lock, NULL);
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->epfd < 0 || r->wakefd < 0)
		return -errno;
	e.data.ptr = &r->wake_ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wakefd, &e))
		return -errno;
	ret = nvmf_ioctx_create(&r->ioctx);
	if (ret) {
		GDX_WARN("nvmf", "reactor %u: no io_uring (%s): file namespaces do synchronous I/O",
			 id, gdx_strerror(ret));
		r->ioctx = NULL;
		return 0;
	}
	e.data.ptr = &r->io_ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, nvmf_ioctx_fd(r->ioctx), &e))
		return -errno;
	return 0;
}

static void reactor_fini(struct tcp_reactor *r)
{
	for (unsigned i = 0; i < r->nhandoff; i++) {
		if (r->handoff[i].conn)
			nvmf_tcp_conn_link(r, r->handoff[i].conn);
		else
			close(r->handoff[i].fd);
	}
	r->nhandoff = 0;
	for (struct tcp_conn *c = r->conns; c; c = c->next)
		nvmf_tcp_conn_close(c, "target stopping");
	flush_dirty(r);
	/* connections whose requests a backend still holds: wait up to 5 s */
	for (int i = 0; r->conns && r->ioctx && i < 5000; i++) {
		usleep(1000);
		nvmf_ioctx_reap(r->ioctx);
		flush_dirty(r);
	}
	for (struct tcp_conn *c = r->conns; c; c = c->next) {
		GDX_WARN("nvmf", "%s: %u requests never completed", c->peer, c->inflight);
		c->inflight = 0;
		mark_dirty(c);
	}
	flush_dirty(r);
	free(r->handoff);
	/* pages still lent to sockets stay until the kernel drops them */
	if (r->zeroes)
		munmap(r->zeroes, r->tgt->core.max_io);
	if (r->reserve_fd >= 0)
		close(r->reserve_fd);
	nvmf_ioctx_destroy(r->ioctx);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->wakefd >= 0)
		close(r->wakefd);
	pthread_mutex_destroy(&r->lock);
}

/* reactors_lock held. */
static void lat_sum_locked(struct gdx_nvmf_target *t, uint64_t *out)
{
	for (unsigned k = 0; k < TGT_LAT_NR; k++) {
		out[k] = atomic_load_explicit(&t->lat_done.v[k], memory_order_relaxed);
		for (unsigned i = 0; t->reactors && i < t->nreactors; i++)
			out[k] += atomic_load_explicit(&t->reactors[i].lat.v[k],
						       memory_order_relaxed);
	}
}

/* Frees the reactors (threads joined), keeping their sums. */
static void reactors_free(struct gdx_nvmf_target *t)
{
	uint64_t v[TGT_LAT_NR];

	pthread_mutex_lock(&t->reactors_lock);
	lat_sum_locked(t, v);
	for (unsigned k = 0; k < TGT_LAT_NR; k++)
		atomic_store_explicit(&t->lat_done.v[k], v[k], memory_order_relaxed);
	free(t->reactors);
	t->reactors = NULL;
	pthread_mutex_unlock(&t->reactors_lock);
}

static int nvmf_tcp_start(struct gdx_nvmf_target *t)
{
	struct tcp_reactor *r0;
	int ret;

	if (!nvmf_target_nports(t, GDX_NVMF_TRTYPE_TCP))
		return 0;
	r0 = calloc(t->nreactors, sizeof(*t->reactors));
	if (!r0)
		return -ENOMEM;
	pthread_mutex_lock(&t->reactors_lock);
	t->reactors = r0;
	pthread_mutex_unlock(&t->reactors_lock);
	for (unsigned i = 0; i < t->nreactors; i++) {
		t->reactors[i].cpu = nvmf_target_reactor_cpu(t, i);
		t->reactors[i].epfd = t->reactors[i].wakefd = -1;
		ret = reactor_init(t, &t->reactors[i], i);
		if (ret)
			goto fail;
	}
	for (unsigned i = 0; i < t->core.nports; i++) {
		struct listener *l = &r0->listeners[r0->nlisteners];
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = &l->ev };
		int fd;

		if (t->core.ports[i].trtype != GDX_NVMF_TRTYPE_TCP)
			continue;
		fd = listen_on(&t->core.ports[i], &t->bound_port[i]);
		if (fd < 0) {
			ret = fd;
			goto fail;
		}
		l->ev.kind = EV_LISTEN;
		l->fd = fd;
		l->port = &t->core.ports[i];
		r0->nlisteners++;
		if (epoll_ctl(r0->epfd, EPOLL_CTL_ADD, fd, &e)) {
			ret = -errno;
			goto fail;
		}
	}
	r0->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (r0->reserve_fd < 0) {
		ret = -errno;
		goto fail;
	}
	for (unsigned i = 0; i < t->nreactors; i++) {
		struct tcp_reactor *r = &t->reactors[i];
		char name[16];

		snprintf(name, sizeof(name), "gdx-nvmf-%u", i % 256u); /* reactors <= 256 */
		ret = nvmf_target_reactor_thread(&r->thread, r->cpu, reactor_main, r, name);
		if (ret) {
			for (unsigned j = 0; j < i; j++) {
				atomic_store(&t->reactors[j].stop, true);
				nvmf_tcp_reactor_wake(&t->reactors[j]);
				pthread_join(t->reactors[j].thread, NULL);
			}
			goto fail;
		}
	}
	return 0;
fail:
	for (unsigned i = 0; i < r0->nlisteners; i++)
		close(r0->listeners[i].fd);
	r0->nlisteners = 0;
	for (unsigned i = 0; i < t->nreactors; i++)
		reactor_fini(&t->reactors[i]);
	reactors_free(t);
	return ret;
}

static void nvmf_tcp_stop(struct gdx_nvmf_target *t)
{
	if (!t->reactors)
		return;
	for (unsigned i = 0; i < t->nreactors; i++) {
		atomic_store(&t->reactors[i].stop, true);
		nvmf_tcp_reactor_wake(&t->reactors[i]);
	}
	for (unsigned i = 0; i < t->nreactors; i++)
		pthread_join(t->reactors[i].thread, NULL);
	for (unsigned i = 0; i < t->reactors[0].nlisteners; i++)
		close(t->reactors[0].listeners[i].fd);
	for (unsigned i = 0; i < t->nreactors; i++)
		reactor_fini(&t->reactors[i]);
	reactors_free(t);
}

const struct nvmf_transport_ops nvmf_tcp_ops = {
	.name = "tcp",
	.trtype = GDX_NVMF_TRTYPE_TCP,
	.start = nvmf_tcp_start,
	.stop = nvmf_tcp_stop,
};

void nvmf_tcp_lat_sum(struct gdx_nvmf_target *t, uint64_t *out)
{
	pthread_mutex_lock(&t->reactors_lock);
	lat_sum_locked(t, out);
	pthread_mutex_unlock(&t->reactors_lock);
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
