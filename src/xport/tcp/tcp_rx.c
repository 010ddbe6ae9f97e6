/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, the receive thread (tcp_int.h): reads frames, serves the
 * peer's requests against the key table, matches answers to outstanding
 * requests, hands kept messages to receives.
 */

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "xport/tcp/tcp_int.h"

/* The receive the next message goes into: the endpoint's own, or its SRQ's.  Lock held. */
static struct qent *take_recv(struct tcp_ep *t)
{
	struct gdx_xport_req *req;
	struct qent *q;

	if (!t->fe->opts.srq)
		return q_pop(&t->recv_head, &t->recv_tail);
	if (gdx_xport_srq_take(t->fe, &req))
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q) {
		gdx_xport_complete(req, -ENOMEM, 0);
		return NULL;
	}
	q->req = req;
	return q;
}

static int have_recv(struct tcp_ep *t)
{
	return t->fe->opts.srq ? gdx_xport_srq_waiting(t->fe) > 0 : t->recv_head != NULL;
}

static void kept_match(struct tcp_ep *t, int ended);

void tcp_rx_wakeup(struct tcp_ep *t)
{
	uint64_t v = 1;

	if (write(t->rx_wake, &v, sizeof(v)) < 0)
		GDX_DBG(SUBSYS, "eventfd write: %s", strerror(errno));
}

/*
 * One read of what the socket holds into rbuf, without waiting, between
 * frames: the bytes read, 0 when there were none, < 0 on an error or the
 * connection's end.
 */
static ssize_t rx_try(struct tcp_ep *t)
{
	size_t room = tcp_rbuf_room(t, sizeof(struct hdr) - GDX_MIN(t->rlen - t->rpos,
								     sizeof(struct hdr)));
	ssize_t n;

	do
		n = recv(t->fd, t->rbuf + t->rlen, room, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		atomic_fetch_add_explicit(&t->rx_reads, 1, memory_order_relaxed);
		t->rlen += (size_t)n;
		return n;
	}
	if (n == 0)
		return -ECONNRESET;
	return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
}

/*
 * Polls the socket for up to rx_spin_ns before the receive thread parks: a
 * thread that sleeps is woken per burst of requests, tens of microseconds on
 * a virtual machine whose idle vCPU halts.  Returns as rx_try.  tcp_kill_conn
 * shuts the socket down, which ends the spin too.
 */
static ssize_t rx_spin(struct tcp_ep *t)
{
	uint64_t until;
	ssize_t n = 0;

	if (!t->rx_spin_ns)
		return 0;
	until = gdx_now_ns() + t->rx_spin_ns;
	do {
		for (int i = 0; i < 64; i++)
			gdx_cpu_relax();
		n = rx_try(t);
	} while (!n && gdx_now_ns() < until);
	return n;
}

static int rx_exact(struct tcp_ep *t, void *dst, size_t n);
static int rx_into(struct tcp_ep *t, void *dst, struct gdx_device *dev, enum gdx_mem_kind kind,
		   size_t n, int *posted);

/*
 * Finishes the message a CQ waiter began and left (t->w_part): the rest of
 * its payload into the receive's buffer (device memory: through the receive
 * lane, behind the pieces the waiter posted), or read and dropped when the
 * lane failed it, then its completion and response, as rx_send would have.
 * Between frames, before anything else is read.
 */
static int rx_part(struct tcp_ep *t)
{
	struct gdx_xport_buf *b;
	struct qent *r;
	uint64_t id, len, got;
	struct deff e;
	int ret, st, dev, posted = 0;

	pthread_mutex_lock(&t->lock);
	r = t->w_part.r;
	id = t->w_part.id;
	len = t->w_part.len;
	got = t->w_part.got;
	dev = t->w_part.dev;
	st = t->w_part.err;
	t->w_part.r = NULL;
	pthread_mutex_unlock(&t->lock);
	b = &r->req->buf;
	t->rx_boundary = 0;
	/* the rest goes where the first bytes went: the buffer, or the receive lane */
	if (st)
		ret = rx_exact(t, NULL, len - got);
	else
		ret = rx_into(t, (char *)b->p + got, b->dev, b->kind, len - got, &posted);
	t->rx_boundary = 1;
	if (ret == -ECONNRESET || ret == -EPIPE || (st && ret)) {
		/* Back on the queue so the flush reports it. */
		pthread_mutex_lock(&t->lock);
		q_unpop(r, &t->recv_head, &t->recv_tail);
		pthread_mutex_unlock(&t->lock);
		return ret;
	}
	if (!st)
		st = ret;
	gdx_counter_add(&t->ctr[C_RX_PART], 1);
	e = (struct deff){ .req = r->req, .st = st, .len = len, .has_resp = 1, .resp_id = id,
			   .resp_st = st ? GDX_EREMOTE : 0 };
	free(r);
	ret = tcp_defer(t, &e, !st && (dev || posted));
	/* Parked next, maybe: the completion's wake-up goes now, not with the next read. */
	gdx_xport_complete_flush();
	return ret;
}

/*
 * Waits between frames, rbuf empty, for input: from the socket, or left in
 * rbuf by a CQ waiter that read the socket meanwhile (or a message it began,
 * rx_part).  Returns the bytes now in rbuf.
 */
static ssize_t rx_park(struct tcp_ep *t)
{
	unsigned long holds = 0;
	ssize_t n;

	for (;;) {
		struct epoll_event ev[2];
		uint64_t v;
		int waiter, kick, timed;
		struct qent *part;

		kick = atomic_load_explicit(&t->kept_kick, memory_order_relaxed);
		if (kick) {
			/*
			 * Not parked while kept messages go to receives: a CQ waiter
			 * holding the socket completes no message meanwhile (w_send),
			 * so none overtakes the completions deferred here.  Not while
			 * a waiter is the receive lane's producer either (w_lane): it
			 * wakes this thread when it is done with it.
			 */
			pthread_mutex_lock(&t->lock);
			kick = !t->w_lane;
			if (kick)
				t->rx_parked = 0;
			pthread_mutex_unlock(&t->lock);
		}
		if (kick) {
			kept_match(t, 0);
			/* Nothing waits on copies while this thread sleeps, socket or not. */
			tcp_defer_wait(t);
			gdx_xport_complete_flush();
			if (t->rx_err)
				return t->rx_err;
		}
		pthread_mutex_lock(&t->lock);
		t->rx_untimed = 0;
		waiter = t->w_reader;
		part = t->w_part.r;
		if (part && !waiter) {
			t->rx_parked = 0;
			pthread_mutex_unlock(&t->lock);
			n = rx_part(t);
			if (n)
				return n;
			continue;
		}
		if (t->dead) {
			t->rx_parked = 0;
			pthread_mutex_unlock(&t->lock);
			return -ECONNRESET;
		}
		if (!waiter) {
			t->rx_parked = 0;
			if (t->rlen > t->rpos) {
				pthread_mutex_unlock(&t->lock);
				return (ssize_t)(t->rlen - t->rpos);
			}
		}
		pthread_mutex_unlock(&t->lock);
		if (!waiter) {
			if (t->rpos == t->rlen)
				t->rpos = t->rlen = 0;
			n = rx_try(t);
			if (n)
				return n;
			/*
			 * Parked, this thread may lose the socket to a CQ waiter, which
			 * completes answers itself: nothing may wait on copies by then.
			 */
			if (tcp_rx_deferred(t) || (t->nresp && !tcp_resp_lone(t))) {
				n = tcp_rx_idle(t, 1);
				if (n)
					return n;
				continue;
			}
			/*
			 * Nothing more came: the lone response to a message is held
			 * for the caller's post, which likely answers it.  Only now:
			 * held while frames still stream in, each would go in a write
			 * of its own or with the next, not in a burst's one train.
			 */
			if (t->nresp && (n = tcp_resp_hold(t)))
				return n;
			n = rx_spin(t);
			if (n)
				return n;
			pthread_mutex_lock(&t->lock);
			t->rx_parked = 1;
			/* a kick before it was seen parked woke nobody (tcp_kept_kick_locked) */
			kick = atomic_load_explicit(&t->kept_kick, memory_order_relaxed);
			pthread_mutex_unlock(&t->lock);
			if (kick)
				continue;
		}
		/*
		 * Timed while a response is held (tcp_resp_hold) or the socket
		 * lent (tcp_wait), and for one more period after a sleep in
		 * which a response was held: a ping-pong holds one from each
		 * wake-up of its caller to its next post, and a hold that finds
		 * this thread asleep untimed wakes it.  At the timeout the held
		 * one goes, and the lent socket comes back.
		 */
		pthread_mutex_lock(&t->lock);
		timed = atomic_load_explicit(&t->resp_held, memory_order_relaxed) ||
			t->resp_holds != holds || t->w_lent;
		holds = t->resp_holds;
		t->rx_untimed = !timed;
		pthread_mutex_unlock(&t->lock);
		n = epoll_wait(t->rx_epfd, ev, 2, timed ? t->resp_hold_ms : -1);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (!n) {
			tcp_resp_push(t);
			tcp_lend_end(t, 0);
		}
		if (read(t->rx_wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return -errno;
	}
}

/* Reads into rbuf, waiting if need be, for a reader that lacks need bytes. */
static ssize_t rx_fill(struct tcp_ep *t, size_t need)
{
	ssize_t n;

	if (t->rpos == t->rlen)
		t->rpos = t->rlen = 0;
	if (t->rpos && t->rlen == RBUF_SIZE) {
		memmove(t->rbuf, t->rbuf + t->rpos, t->rlen - t->rpos);
		t->rlen -= t->rpos;
		t->rpos = 0;
	}
	/* Completions of everything read so far wake their waiter, once. */
	gdx_xport_complete_flush();
	/* Requests posted while others were on the wire go before their answers are read. */
	tcp_tx_kick(t);
	if (t->nresp > 1 || (t->nresp && !tcp_resp_lone(t))) {
		/*
		 * Responses owed wait for the next frames if those are already
		 * here: a burst is answered with one write (tcp_resp_owe sends
		 * them every RESP_BYTES meanwhile), not one a request.  Large
		 * frames come here at each header (their payloads skip rbuf), so
		 * that holds for one response owed too, or a stream of them is
		 * answered a write a frame.  A lone request is answered at once:
		 * the read finds nothing.  (A lone response to a message is held
		 * for the caller's post, rx_park.)
		 */
		do
			n = recv(t->fd, t->rbuf + t->rlen, tcp_rbuf_room(t, need), MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n < 0 && errno == EAGAIN && t->nresp > 1) {
			/*
			 * Not yet: give the CPU once to whoever is runnable here (the
			 * poster, the peer's receive thread) and look again.  On a busy
			 * machine the next frames are often a yield away, and a
			 * receive thread that sleeps instead is woken per request,
			 * which costs more than the request (4 KiB writes: 1.8x).
			 */
			sched_yield();
			do
				n = recv(t->fd, t->rbuf + t->rlen, tcp_rbuf_room(t, need),
					 MSG_DONTWAIT);
			while (n < 0 && errno == EINTR);
		}
		if (n > 0) {
			t->rlen += (size_t)n;
			return n;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
	}
	/* About to wait for input: what is owed goes out first (but a lone one, rx_park). */
	n = tcp_rx_idle(t, t->rx_boundary);
	if (n)
		return n;
	if (t->rx_boundary)
		return rx_park(t);
	do
		n = recv(t->fd, t->rbuf + t->rlen, tcp_rbuf_room(t, need), 0);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return -errno;
	t->rlen += (size_t)n;
	return n;
}

/* Reads exactly n bytes into dst: buffered bytes first, the rest straight from the socket. */
static int rx_exact(struct tcp_ep *t, void *dst, size_t n)
{
	size_t have = GDX_MIN(n, t->rlen - t->rpos);

	if (have) {
		t->rx_boundary = 0;
		if (dst)
			memcpy(dst, t->rbuf + t->rpos, have);
		t->rpos += have;
		n -= have;
		if (dst)
			dst = (char *)dst + have;
	}
	while (n) {
		ssize_t r;

		if (!dst || n < 4096) {
			/* Small tails and discards go through the buffer. */
			r = rx_fill(t, n);
			if (r < 0)
				return (int)r;
			t->rx_boundary = 0;
			have = GDX_MIN(n, t->rlen - t->rpos);
			if (dst) {
				memcpy(dst, t->rbuf + t->rpos, have);
				dst = (char *)dst + have;
			}
			t->rpos += have;
			n -= have;
			continue;
		}
		/* Blocks only if the payload is not all here: then what is owed goes first. */
		r = recv(t->fd, dst, n, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			r = 0;
		else if (r <= 0)
			return r ? -errno : -ECONNRESET;
		dst = (char *)dst + r;
		n -= (size_t)r;
		if (!n)
			break;
		gdx_xport_complete_flush();
		tcp_tx_kick(t);
		r = tcp_rx_idle(t, 0);
		if (r)
			return (int)r;
		if (t->wake_whole && n > GDX_RX_LOWAT_MIN) {
			/* one wake-up for the rest, not one a segment; then read it as above */
			r = gdx_rx_wait_for(t->fd, n, true, -1);
			if (r < 0)
				return (int)r;
			/* the zero-copy notifications of this socket's sends raise POLLERR too */
			if (r & POLLERR)
				tcp_zc_reap(t);
			continue;
		}
		r = recv(t->fd, dst, GDX_MIN(n, GDX_RX_WAIT_MAX), MSG_WAITALL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			return -ECONNRESET;
		if (r < 0)
			return -errno;
		dst = (char *)dst + r;
		n -= (size_t)r;
	}
	return 0;
}

/*
 * Carries out effect e; fail: why its copies did not land (the agent's error,
 * or GDX_EDISCONNECTED), for an effect that depends on them.  An error of the
 * answer to the peer ends the connection (rx_err).
 */
void tcp_deff_run(struct tcp_ep *t, struct deff *e, int fail)
{
	int st = e->st, rst = e->resp_st;

	if (fail && e->dev) {
		st = fail;
		rst = GDX_EREMOTE;
	}
	if (e->kr_end)
		t->kr.tail = e->kr_end;
	if (e->k)
		gdx_xport_rkey_put(e->k);
	if (e->read_done) {
		pthread_mutex_lock(&t->lock);
		t->reads_in_flight--;
		pthread_cond_broadcast(&t->tx_cond);
		pthread_mutex_unlock(&t->lock);
	}
	if (e->req && e->is_imm)
		gdx_xport_complete_imm(e->req, st, e->len, GDX_XPORT_OP_RECV_WRITE_IMM, e->imm);
	else if (e->req)
		gdx_xport_complete(e->req, st, st ? 0 : e->len);
	if (e->has_resp) {
		int r = tcp_resp_owe(t, F_RESP, e->resp_id, rst, e->req != NULL);

		if (r && !t->rx_err)
			t->rx_err = r;
	}
}

/* Answers the peer's request id, in order behind what is deferred. */
static int defer_resp(struct tcp_ep *t, uint64_t id, int st)
{
	struct deff e = { .has_resp = 1, .resp_id = id, .resp_st = st };

	return tcp_defer(t, &e, 0);
}

/*
 * Receives n bytes for dst, device memory of the lane's device, through the
 * receive lane: pieces of at most a chunk back to back, each one's copy
 * posted to the agent as soon as it is in, so small messages share the ring
 * and large ones overlap receiving and copying.  Only ring space is waited
 * for: the caller defers what depends on the bytes having landed.  An agent
 * that fails on the way: the rest of the payload is read and dropped, and
 * its error returned.  src: the bytes are in host memory there instead of on
 * the socket (a kept message).
 */
static int rx_lane_recv(struct tcp_ep *t, char *dst, const unsigned char *src, size_t n)
{
	struct gdx_stage *rx = t->rx_lane;
	int ret = 0;

	while (n) {
		struct gdx_stage_span sp;

		ret = gdx_stage_reserve(rx, n, 0, &sp);
		if (ret)
			break;
		if (src) {
			memcpy(sp.p, src, sp.n);
			src += sp.n;
		} else {
			ret = rx_exact(t, sp.p, sp.n);
			if (ret) {
				gdx_stage_unreserve(rx, &sp);
				return ret;
			}
		}
		n -= sp.n;
		/*
		 * The waits on the way (rx_exact's) may have found the agent
		 * failed: the pieces posted before are lost, the lane's copies
		 * synchronous from here on.
		 */
		ret = tcp_rx_agent(rx) ? gdx_stage_post(rx, &sp, dst) :
					 gdx_stage_ctx_status(t->stage);
		if (ret)
			break;
		dst += sp.n;
		gdx_stage_progress(rx);
	}
	if (ret && n && !src) {
		int r = rx_exact(t, NULL, n);

		if (r)
			return r;
	}
	return ret;
}

/*
 * Receives n bytes for dst, device memory of dev, through a synchronous
 * lane (tcp_rx_sync_lane): a piece read into its ring is copied before the
 * next is read.  A failed copy fails this message only: the rest of it is
 * read and dropped.  src: the bytes are in host memory there instead of on
 * the socket (a kept message), copied straight from it.
 */
static int rx_sync(struct tcp_ep *t, struct gdx_stage *lane, char *dst, const void *src,
		   size_t n)
{
	struct gdx_stage_span sp;
	int ret = 0;

	while (n && !ret) {
		ret = gdx_stage_reserve(lane, src ? RING_ALIGN : n, 0, &sp);
		if (ret)
			break;
		if (src) {
			/* a ticket: the bytes are copied from where they are kept */
			sp.p = (void *)(uintptr_t)src;
			sp.n = n;
		} else if ((ret = rx_exact(t, sp.p, sp.n))) {
			gdx_stage_unreserve(lane, &sp);
			return ret;
		}
		ret = gdx_stage_post(lane, &sp, dst);
		if (ret)
			gdx_stage_unreserve(lane, &sp);
		dst += sp.n;
		n -= sp.n;
	}
	if (ret && n && !src) {
		int r = rx_exact(t, NULL, n);

		if (r)
			return r;
	}
	return ret;
}

/*
 * Receives n bytes into dst of any memory kind.  *posted: they went to device
 * memory through the ring, and may not have landed yet (defer what depends on
 * them); else they are in place on return.  Other devices than the ring's,
 * and any device without an agent, go through a synchronous lane.
 */
static int rx_into(struct tcp_ep *t, void *dst, struct gdx_device *dev, enum gdx_mem_kind kind,
		   size_t n, int *posted)
{
	struct gdx_stage *lane;
	int ret;

	*posted = 0;
	if (kind == GDX_MEM_HOST || kind == GDX_MEM_PINNED || !dev) {
		gdx_counter_add(&t->ctr[C_RX_BUFFERED], GDX_MIN(n, t->rlen - t->rpos));
		return rx_exact(t, dst, n);
	}
	if (__atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE) == dev && tcp_rx_agent(t->rx_lane)) {
		ret = rx_lane_recv(t, dst, NULL, n);
		*posted = !ret && n;
		return ret;
	}
	lane = tcp_rx_sync_lane(t, dev);
	if (!lane) {
		/* its set-up failed (and was reported) where it was posted */
		GDX_ERR(SUBSYS, "%s: receive into memory not set up for it", gdx_device_name(dev));
		ret = rx_exact(t, NULL, n);
		return ret ? ret : -ENOMEM;
	}
	return rx_sync(t, lane, dst, NULL, n);
}

/*
 * Copies kept message u into device memory b through a synchronous lane: a
 * device other than the agent's, or the agent's once it failed.
 */
static int kept_stream(struct tcp_ep *t, const struct gdx_xport_buf *b, const struct qent *u)
{
	struct gdx_stage *lane = tcp_rx_sync_lane(t, b->dev);

	if (!lane) {
		/* its set-up failed (and was reported) where it was posted */
		GDX_ERR(SUBSYS, "%s: receive into memory not set up for it", gdx_device_name(b->dev));
		return -ENOMEM;
	}
	return rx_sync(t, lane, b->p, u->data, u->len);
}

/*
 * Hands kept message u to receive req (receive thread): copied on into its
 * memory, by the agent where that is the agent's device's (from the kept
 * ring, or through the receive ring from host memory), and completed behind
 * what is deferred, as a message received into it then would have been.
 * The message's room in the kept ring goes back once its copy landed.
 */
static void kept_deliver(struct tcp_ep *t, struct gdx_xport_req *req, struct qent *u)
{
	struct gdx_xport_buf *b = &req->buf;
	struct deff e = { .req = req, .len = u->len, .kr_end = u->kr_end };
	int dev = 0;

	req->cqe_flags |= GDX_XPORT_CQE_UNEXPECTED;
	if (u->is_imm) {
		e.is_imm = 1;
		e.imm = u->imm;
	} else if (u->len > b->len) {
		e.st = -EMSGSIZE;
	} else if (u->len) {
		/* It sat in an intermediate buffer, whatever the memory kind. */
		b->path = GDX_XPORT_PATH_BOUNCE;
		gdx_counter_add(&t->ctr[u->kr_end ? C_KEPT_RING : C_KEPT_HOST], 1);
		if (b->kind == GDX_MEM_HOST || b->kind == GDX_MEM_PINNED || !b->dev) {
			memcpy(b->p, u->data, u->len);
		} else if (__atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE) == b->dev &&
			   tcp_rx_agent(t->rx_lane)) {
			if (u->kr_end)
				e.st = tcp_rx_post_kept(t, b->p, u->data, u->len);
			else
				e.st = rx_lane_recv(t, b->p, u->data, u->len);
			/* a failed agent copies nothing more: nothing to wait for */
			dev = !e.st;
		} else {
			e.st = kept_stream(t, b, u);
		}
	}
	if (!u->kr_end)
		free(u->data);
	free(u);
	tcp_defer(t, &e, dev);
}

/*
 * Takes the oldest kept message (*u) and a receive posted for it (*r): 1, or 0
 * when there is no pair.  Then a sender stalled for want of a receive may go on.
 * ended: also once the connection ended (the receive thread, which flushes
 * what is left after).
 */
static int kept_take(struct tcp_ep *t, struct qent **r, struct qent **u, int ended)
{
	pthread_mutex_lock(&t->lock);
	if ((t->dead && !ended) || !t->unexp_head || !(*r = take_recv(t))) {
		pthread_cond_broadcast(&t->rx_cond);
		pthread_mutex_unlock(&t->lock);
		return 0;
	}
	*u = q_pop(&t->unexp_head, &t->unexp_tail);
	if (!(*u)->is_imm)
		t->unexpected_bytes -= (*u)->len;
	pthread_mutex_unlock(&t->lock);
	return 1;
}

/*
 * Hands kept messages to the receives posted since, oldest first; also once
 * the connection ended, as their posters did before the kept ring: their
 * senders were answered (ended).  Receive thread.
 */
static void kept_match(struct tcp_ep *t, int ended)
{
	struct qent *r, *u;

	atomic_store_explicit(&t->kept_kick, 0, memory_order_relaxed);
	while (kept_take(t, &r, &u, ended)) {
		kept_deliver(t, r->req, u);
		free(r);
	}
}

/* Queues the responses owed as one frame: sent now, or held for a post (hold). */
static int resp_queue(struct tcp_ep *t, int hold)
{
	struct txi *x;
	unsigned n = t->nresp;

	t->resp_bytes = 0;
	if (!n)
		return 0;
	/* a burst's responses, and answers to writes, go at once */
	hold = hold && tcp_resp_lone(t);
	t->nresp = 0;
	t->nresp_msg = 0;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->hold = (uint8_t)hold;
	x->h = t->resp[0];
	if (n > 1) {
		x->extra_len = (n - 1) * sizeof(struct hdr);
		x->extra = malloc(x->extra_len);
		if (!x->extra) {
			free(x);
			return -ENOMEM;
		}
		memcpy(x->extra, &t->resp[1], x->extra_len);
	}
	return tcp_ans_submit(t, x, n);
}

/* Sends the responses the receive thread owes, as one frame train. */
int tcp_resp_flush(struct tcp_ep *t)
{
	return resp_queue(t, 0);
}

/*
 * The lone response owed to a message that completed a receive, queued but
 * not sent (by a CQ waiter, or the receive thread about to park): the
 * caller's next post, the likely answer, carries it in its own write (a
 * send answered by a send then costs the peer one write and one wake-up, as
 * on a raw socket, not two).  It goes without a post at a poll that finds
 * the CQ empty (tcp_progress), at a sleep on it, with anything else sent
 * meanwhile, or after xport.tcp_resp_hold_ms (the receive thread, rx_park).  Others
 * are sent at once.
 */
int tcp_resp_hold(struct tcp_ep *t)
{
	return resp_queue(t, 1);
}

/*
 * Owes the peer a response (the receive thread, or a CQ waiter holding the
 * socket); msg: to a message that completed a receive here.
 */
int tcp_resp_owe(struct tcp_ep *t, uint8_t type, uint64_t id, int status, int msg)
{
	t->nresp_msg += msg != 0;
	t->resp[t->nresp++] = (struct hdr){ .type = type, .id = id, .status = status };
	return t->nresp == RESP_BATCH || (t->resp_bytes >= RESP_BYTES && !tcp_resp_lone(t)) ?
		       tcp_resp_flush(t) : 0;
}

/*
 * Hands messages that arrived before a receive to receives posted since (the
 * endpoint's own, or its shared receive queue's).
 */
void tcp_match(void *priv)
{
	struct tcp_ep *t = priv;
	struct qent *r, *u;

	pthread_mutex_lock(&t->lock);
	if (t->kept_rx) {
		if (t->unexp_head)
			tcp_kept_kick_locked(t);
		else
			/* a shared receive: a sender stalled for want of one may go on */
			pthread_cond_broadcast(&t->rx_cond);
		pthread_mutex_unlock(&t->lock);
		return;
	}
	pthread_mutex_unlock(&t->lock);
	while (kept_take(t, &r, &u, 0)) {
		tcp_deliver_unexpected(r->req, u);
		free(r);
	}
}

/*
 * The receive thread, stalled until a receive is posted for a message beyond
 * max_unexpected, reads nothing meanwhile: it would not see the peer go.  So
 * it waits on rx_cond a while at a time and between waits looks at the socket
 * for the peer's end (shut down for writing, reset).  Then 1: the message
 * cannot be received whole any more, and at the end of the connection the
 * messages kept as unexpected are dropped, stalled or not.  Lock held.
 */
static int rx_stall_wait(struct tcp_ep *t)
{
	struct timespec ts;
	struct pollfd pfd = { .fd = t->fd, .events = POLLRDHUP };

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 20 * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	if (pthread_cond_timedwait(&t->rx_cond, &t->lock, &ts) != ETIMEDOUT)
		return 0;
	return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/*
 * The receive thread might wait for a receive (rx_send): the peer must not
 * wait for what is owed (what waits on copies included), nor a caller for a
 * receive's completion, nor requests for this thread to come by.
 */
static int rx_owed_out(struct tcp_ep *t)
{
	int ret;

	tcp_defer_wait(t);
	gdx_xport_complete_flush();
	if (t->rx_err)
		return t->rx_err;
	ret = tcp_resp_flush(t);
	if (ret)
		return ret;
	tcp_resp_push(t);
	return 0;
}

/*
 * Whether the receive thread may wait for answers to go out: not while the
 * head of the queue waits for reads in flight (a fence), whose answers only
 * this thread reads.
 */
static int ans_may_wait(struct tcp_ep *t)
{
	int ret;

	pthread_mutex_lock(&t->lock);
	ret = !t->dead && !(t->txq_head && tcp_tx_blocked(t, t->txq_head));
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/*
 * The peer has more than ans_max answers queued: it does not read them, or
 * not as fast as it asks.  Its frames stay in the socket (which slows its
 * sends: back-pressure, as TCP's window) until half of the answers went out;
 * if that takes ans_ms, the connection ends.  Looks every 20 ms whether it
 * may still wait (ans_may_wait).  Between frames, receive thread only.
 */
static int rx_hold_back(struct tcp_ep *t)
{
	uint64_t end = gdx_now_ns() + (uint64_t)t->ans_ms * 1000000u;
	unsigned half = t->ans_max / 2;
	int ret;

	pthread_mutex_lock(&t->lock);
	t->rx_stalled = 1;	/* posts must not wait for this thread meanwhile */
	pthread_mutex_unlock(&t->lock);
	ret = rx_owed_out(t);
	if (ret)
		return ret;
	gdx_counter_add(&t->ctr[C_HELD_BACK], 1);
	/* said once a connection; a slow reader may come by often */
	GDX_LOG(t->ans_said ? GDX_LOG_DEBUG : GDX_LOG_WARN, SUBSYS,
		"the peer leaves %u answers unread (xport.tcp_answers_max %u): its frames are not "
		"read until half went out, for %d ms at most", atomic_load(&t->ans_held),
		t->ans_max, t->ans_ms);
	t->ans_said = 1;
	while (atomic_load_explicit(&t->ans_held, memory_order_relaxed) > half &&
	       ans_may_wait(t)) {
		struct timespec ts;

		if (gdx_now_ns() >= end) {
			GDX_ERR(SUBSYS, "the peer read too few of its %u answers in %d ms "
				"(xport.tcp_answers_timeout_ms): connection ended",
				atomic_load(&t->ans_held), t->ans_ms);
			ret = -ETIMEDOUT;
			break;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_mutex_lock(&t->ans_lock);
		if (atomic_load_explicit(&t->ans_held, memory_order_relaxed) > half &&
		    !__atomic_load_n(&t->dead, __ATOMIC_ACQUIRE))
			pthread_cond_timedwait(&t->ans_cond, &t->ans_lock, &ts);
		pthread_mutex_unlock(&t->ans_lock);
	}
	pthread_mutex_lock(&t->lock);
	t->rx_stalled = 0;
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/* Hands a message to the oldest receive.  Lock held; may drop it to receive the payload. */
static int rx_send(struct tcp_ep *t, const struct hdr *h)
{
	struct deff e;
	struct qent *r;
	int ret, none, owed, posted, kept_rx, matched = 0;

	pthread_mutex_lock(&t->lock);
	none = !have_recv(t);
	/*
	 * From here this thread may not come by to send: posts are sent, not
	 * held for it (one made between the kick below and the wait would
	 * otherwise wait for a poster that may never poll).
	 */
	if (none)
		t->rx_stalled = 1;
	/*
	 * What is owed goes out first where this thread may wait for a
	 * receive (beyond max_unexpected: their callers may need the
	 * completions to post it), and where a poster completes the kept
	 * message itself (no kept ring: not before the receives that came
	 * first).  One the kept ring takes within max_unexpected waits for
	 * nothing: this thread hands it over, behind what is deferred.
	 */
	owed = none && (!t->kept_rx || t->unexpected_bytes + h->len > t->max_unexpected);
	pthread_mutex_unlock(&t->lock);
	if (owed && (ret = rx_owed_out(t)))
		return ret;
	pthread_mutex_lock(&t->lock);
	for (;;) {
		/* Messages kept before this one go first (rule 2), to receives posted since. */
		if (t->kept_rx && !t->dead && t->unexp_head && have_recv(t)) {
			pthread_mutex_unlock(&t->lock);
			kept_match(t, 0);
			pthread_mutex_lock(&t->lock);
			matched = 1;
			continue;
		}
		/*
		 * Kept as unexpected only within max_unexpected, the first message
		 * too: a peer's length would otherwise be what this side allocates.
		 */
		if (t->dead || have_recv(t) || t->unexpected_bytes + h->len <= t->max_unexpected)
			break;
		/* Nobody reads answers meanwhile: posts must not wait for us. */
		t->rx_stalled = 1;
		if (matched) {
			/*
			 * The receives kept messages went to complete before the wait:
			 * their callers may wait for them to post the one it waits for.
			 */
			pthread_mutex_unlock(&t->lock);
			ret = rx_owed_out(t);
			if (ret)
				return ret;
			pthread_mutex_lock(&t->lock);
			matched = 0;
			continue;
		}
		/* receiver not ready; the peer's end ends the wait too */
		if (rx_stall_wait(t)) {
			tcp_kill_conn(t, 0);
			break;
		}
	}
	t->rx_stalled = 0;
	if (t->dead) {
		pthread_mutex_unlock(&t->lock);
		return -ECONNRESET;
	}
	kept_rx = t->kept_rx;
	r = t->unexp_head ? NULL : take_recv(t);
	pthread_mutex_unlock(&t->lock);

	if (!r) {
		struct qent *u = calloc(1, sizeof(*u));

		/*
		 * Kept for a receive posted later.  A poster that takes it
		 * completes it at once: not before the receives that came first
		 * have.  The receive thread defers it behind them instead.
		 */
		if (!kept_rx)
			tcp_defer_wait(t);
		if (u && h->len && kept_rx)
			u->data = tcp_kr_take(t, h->len, &u->kr_end);
		if (!u || (h->len && !u->data && !(u->data = malloc(h->len)))) {
			free(u);
			ret = rx_exact(t, NULL, h->len);
			return ret ? ret : defer_resp(t, h->id, -ENOMEM);
		}
		u->len = h->len;
		ret = rx_exact(t, u->data, h->len);
		if (ret) {
			if (!u->kr_end)
				free(u->data);
			free(u);
			return ret;
		}
		pthread_mutex_lock(&t->lock);
		Q_PUSH(u, &t->unexp_head, &t->unexp_tail);
		t->unexpected_bytes += h->len;
		pthread_mutex_unlock(&t->lock);
		/* A receive may have been posted while the payload was read. */
		if (kept_rx)
			kept_match(t, 0);
		else
			tcp_match(t);
		return defer_resp(t, h->id, 0);
	}
	if (h->len > r->req->buf.len) {
		ret = rx_exact(t, NULL, h->len);
		e = (struct deff){ .req = r->req, .st = -EMSGSIZE, .has_resp = 1,
				   .resp_id = h->id, .resp_st = GDX_EREMOTE };
		free(r);
		/*
		 * Even when the connection ended in the payload: behind what is
		 * deferred, which the end carries out or fails first (tcp_stage_stop).
		 */
		tcp_defer(t, &e, 0);
		return ret ? ret : t->rx_err;
	}
	ret = rx_into(t, r->req->buf.p, r->req->buf.dev, r->req->buf.kind, h->len, &posted);
	if (ret == -ECONNRESET || ret == -EPIPE) {
		if (t->fe->opts.srq) {
			/* A shared receive taken for a message that never arrived whole. */
			tcp_rx_settle(t);
			gdx_xport_complete(r->req, GDX_EDISCONNECTED, 0);
			free(r);
			return ret;
		}
		/* Back on the queue so the flush reports it. */
		pthread_mutex_lock(&t->lock);
		q_unpop(r, &t->recv_head, &t->recv_tail);
		pthread_mutex_unlock(&t->lock);
		return ret;
	}
	if (posted)
		gdx_counter_add(&t->ctr[C_RX_DEV], 1);
	e = (struct deff){ .req = r->req, .st = ret, .len = h->len, .has_resp = 1,
			   .resp_id = h->id, .resp_st = ret ? GDX_EREMOTE : 0 };
	free(r);
	return tcp_defer(t, &e, posted);
}

static void rx_imm(struct tcp_ep *t, uint64_t len, uint32_t imm)
{
	struct qent *r;

	pthread_mutex_lock(&t->lock);
	r = t->unexp_head ? NULL : take_recv(t);
	if (!r) {
		struct qent *u = calloc(1, sizeof(*u));

		if (u) {
			u->is_imm = 1;
			u->imm = imm;
			u->len = len;
			Q_PUSH(u, &t->unexp_head, &t->unexp_tail);
		} else {
			GDX_ERR(SUBSYS, "out of memory: immediate 0x%x dropped", imm);
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (r) {
		gdx_xport_complete_imm(r->req, 0, len, GDX_XPORT_OP_RECV_WRITE_IMM, imm);
		free(r);
	}
}

static int rx_write(struct tcp_ep *t, const struct hdr *h)
{
	struct gdx_xport_region reg;
	struct gdx_xport_rkey *k;
	struct deff e;
	void *p;
	int st, ret, posted;

	st = gdx_xport_rkey_get(t->fe, h->key, h->raddr, h->len, GDX_XPORT_ACCESS_REMOTE_WRITE,
				&k, &p,
				&reg);
	if (st) {
		GDX_DBG(SUBSYS, "write to key 0x%llx addr 0x%llx len %llu refused",
			(unsigned long long)h->key, (unsigned long long)h->raddr,
			(unsigned long long)h->len);
		ret = rx_exact(t, NULL, h->len);
		return ret ? ret : defer_resp(t, h->id, st);
	}
	st = tcp_ans_settle(t, p, h->len);
	if (st) {
		/*
		 * refused: the answers before it still return what was there (a
		 * copy budget spent was said by ans_snap; not again per write)
		 */
		GDX_LOG(st == -ENOBUFS ? GDX_LOG_DEBUG : GDX_LOG_ERROR, SUBSYS,
			"write of %llu bytes refused: the read answers before it could not take "
			"the bytes it overwrites (%s)", (unsigned long long)h->len,
			gdx_strerror(st));
		gdx_xport_rkey_put(k);
		ret = rx_exact(t, NULL, h->len);
		return ret ? ret : defer_resp(t, h->id, GDX_EREMOTE);
	}
	ret = rx_into(t, p, reg.dev, reg.kind, h->len, &posted);
	if (ret == -ECONNRESET || ret == -EPIPE) {
		tcp_rx_settle(t);
		gdx_xport_rkey_put(k);
		return ret;
	}
	/* The region stays held until the copies into it landed. */
	e = (struct deff){ .k = k, .has_resp = 1, .resp_id = h->id,
			   .resp_st = ret ? GDX_EREMOTE : 0 };
	if (!ret && (h->flags & FL_IMM)) {
		struct qent *r;

		if (!posted && !tcp_rx_deferred(t)) {
			rx_imm(t, h->len, h->imm);
			return tcp_defer(t, &e, 0);
		}
		pthread_mutex_lock(&t->lock);
		r = t->unexp_head ? NULL : take_recv(t);
		pthread_mutex_unlock(&t->lock);
		if (r) {
			e.req = r->req;
			e.is_imm = 1;
			e.len = h->len;
			e.imm = h->imm;
			free(r);
			return tcp_defer(t, &e, posted);
		}
		/*
		 * No receive for it: it is kept as an unexpected message, which a
		 * receive posted later takes at once, so the data must be in place
		 * (and what came before carried out) first.
		 */
		st = posted ? tcp_rx_settle(t) : 0;
		tcp_defer_wait(t);
		if (st)
			e.resp_st = GDX_EREMOTE;
		else
			rx_imm(t, h->len, h->imm);
		return tcp_defer(t, &e, 0);
	}
	return tcp_defer(t, &e, posted);
}

static int rx_read(struct tcp_ep *t, const struct hdr *h)
{
	struct gdx_xport_region reg;
	struct txi *x = calloc(1, sizeof(*x));
	int st;

	if (!x)
		return -ENOMEM;
	/*
	 * It must see what earlier writes put in device memory, and responses go
	 * in request order: what waits on copies, then what is owed, first.
	 */
	if (tcp_rx_deferred(t)) {
		tcp_defer_wait(t);
		gdx_xport_complete_flush();
	}
	st = t->rx_err ? t->rx_err : tcp_resp_flush(t);
	if (st) {
		free(x);
		return st;
	}
	x->h = (struct hdr){ .type = F_READ_RESP, .id = h->id, .len = h->len };
	st = gdx_xport_rkey_get(t->fe, h->key, h->raddr, h->len, GDX_XPORT_ACCESS_REMOTE_READ,
				&x->k,
				(void **)&x->data, &reg);
	if (st) {
		x->h.status = st;
		x->h.len = 0;
	} else if (reg.kind != GDX_MEM_HOST && reg.kind != GDX_MEM_PINNED) {
		x->dev = reg.dev;
	}
	return tcp_ans_submit(t, x, 1);
}

/*
 * The response at the head of the outstanding queue must be for id: then its
 * request is taken off the queue.  Lock held; quiet (a CQ waiter leaves what
 * it cannot take to the receive thread, which reports it).
 */
int tcp_resp_take(struct tcp_ep *t, const struct hdr *h, int quiet, struct qent **out)
{
	struct qent *q = t->outst_head;
	int st = h->status;

	if (!q || (uint64_t)(uintptr_t)q->data != h->id ||
	    (h->type == F_READ_RESP) != (q->req->op == GDX_XPORT_OP_READ)) {
		if (!quiet)
			GDX_ERR(SUBSYS, "response to a request not outstanding (id %llu)",
				(unsigned long long)h->id);
		return GDX_EPROTO;
	}
	if (!q->sent) {
		if (!quiet)
			GDX_ERR(SUBSYS, "response to request %llu, which was not sent yet",
				(unsigned long long)h->id);
		return GDX_EPROTO;
	}
	if ((h->type == F_READ_RESP && !st && h->len != q->req->buf.len) ||
	    (st && (st > 0 || st <= GDX_E_LAST))) {
		if (!quiet)
			GDX_ERR(SUBSYS, "response to request %llu: status %d, %llu bytes for a "
				"%zu-byte read", (unsigned long long)h->id, st,
				(unsigned long long)h->len, q->req->buf.len);
		return GDX_EPROTO;
	}
	q_pop(&t->outst_head, &t->outst_tail);
	t->on_wire--;
	*out = q;
	return 0;
}

static int rx_resp(struct tcp_ep *t, const struct hdr *h)
{
	struct deff e = { 0 };
	struct qent *q;
	int ret, st = h->status, posted = 0;

	pthread_mutex_lock(&t->lock);
	ret = tcp_resp_take(t, h, 0, &q);
	pthread_mutex_unlock(&t->lock);
	if (ret)
		return ret;
	if (h->type == F_READ_RESP) {
		if (!st) {
			ret = rx_into(t, q->req->buf.p, q->req->buf.dev, q->req->buf.kind, h->len,
				      &posted);
			if (ret == -ECONNRESET || ret == -EPIPE) {
				pthread_mutex_lock(&t->lock);
				q_unpop(q, &t->outst_head, &t->outst_tail);
				pthread_mutex_unlock(&t->lock);
				return ret;
			}
			st = ret;
		}
		/* FENCE waits for the read's data to be in place */
		e.read_done = 1;
	}
	e.req = q->req;
	e.st = st;
	e.len = q->req->buf.len;
	free(q);
	return tcp_defer(t, &e, posted);
}

void *tcp_rx_main(void *arg)
{
	struct tcp_ep *t = arg;
	int ret = 0, kept_rx;

	pthread_setname_np(pthread_self(), "gdx-tcp-rx");
	gdx_xport_complete_defer();
	while (!ret) {
		struct hdr h;

		if (atomic_load_explicit(&t->kept_kick, memory_order_relaxed))
			kept_match(t, 0);
		t->rx_boundary = 1;
		if (atomic_load_explicit(&t->ans_held, memory_order_relaxed) >= t->ans_max &&
		    (ret = rx_hold_back(t)))
			break;
		ret = rx_exact(t, &h, sizeof(h));
		if (ret)
			break;
		tcp_rx_saw(t, &h);
		if (h.len > MAX_PAYLOAD) {
			GDX_ERR(SUBSYS, "frame of type %u claims %llu bytes", h.type,
				(unsigned long long)h.len);
			ret = GDX_EPROTO;
			break;
		}
		switch (h.type) {
		case F_SEND: ret = rx_send(t, &h); break;
		case F_WRITE: ret = rx_write(t, &h); break;
		case F_READ: ret = rx_read(t, &h); break;
		case F_RESP:
		case F_READ_RESP: ret = rx_resp(t, &h); break;
		default:
			GDX_ERR(SUBSYS, "frame of unknown type %u", h.type);
			ret = GDX_EPROTO;
		}
		if (!ret)
			ret = t->rx_err;
	}
	/* a socket lent to polls goes nowhere now: its end must not keep the CQ readable */
	tcp_lend_end(t, 0);
	pthread_mutex_lock(&t->lock);
	tcp_kill_conn(t, ret == -ECONNRESET || ret == -EPIPE ? 0 : ret);
	kept_rx = t->kept_rx;
	/* a CQ waiter that received into device memory is done with the lane first */
	while (t->w_lane)
		pthread_cond_wait(&t->rx_cond, &t->lock);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->tx, NULL);
	/* Receives posted before the end take what was kept for them (kick or not). */
	if (kept_rx)
		kept_match(t, 1);
	/* Deferred effects are older than what is still queued: they go first. */
	tcp_stage_stop(t);
	tcp_tx_free_list(t, t->tx_hold);
	t->tx_hold = NULL;
	tcp_flush_all(t);
	return NULL;
}
