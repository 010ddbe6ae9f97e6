/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, the CQ waiter (tcp_int.h): a caller sleeping in
 * gdx_xport_cq_wait takes the socket from a parked receive thread and
 * completes the answers and the peer's sends it reads itself, into device
 * memory through the receive lane, whose producer it is meanwhile.
 */

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/util.h"
#include "xport/tcp/tcp_int.h"

/*
 * How long a CQ waiter waits for more of a message's payload before it leaves
 * the rest to the receive thread: the peer sends a frame whole, so the rest
 * is normally on its way; a stalled peer must not hold the caller's wait.
 */
#define W_PART_MS 2

/*
 * Gives the receive r of a message the waiter took back: at the head of the
 * receive queue (rule 2: it is the oldest), or completed with
 * GDX_EDISCONNECTED if the endpoint was flushed meanwhile.  Lock held.
 */
static void w_unpop(struct tcp_ep *t, struct qent *r)
{
	if (t->flushed) {
		gdx_xport_complete(r->req, GDX_EDISCONNECTED, 0);
		free(r);
		return;
	}
	q_unpop(r, &t->recv_head, &t->recv_tail);
}

/* Ends the connection for err (an answer that could not be queued): -1. */
static int w_fail(struct tcp_ep *t, int err)
{
	pthread_mutex_lock(&t->lock);
	tcp_kill_conn(t, err);
	pthread_mutex_unlock(&t->lock);
	return -1;
}

/*
 * Completes what the waiter read, e: at once, or behind the effects it
 * deferred on the receive lane's copies (w_lane), so nothing it completes
 * overtakes a message it received into device memory.  0, or -1 when an
 * answer could not be queued (the connection ended).
 */
static int w_complete(struct tcp_ep *t, struct deff *e, int dev)
{
	if (t->w_lane) {
		int ret = tcp_defer(t, e, dev);

		return ret ? w_fail(t, ret) : 0;
	}
	if (e->req)
		gdx_xport_complete(e->req, e->st, e->st ? 0 : e->len);
	if (e->has_resp) {
		int ret = tcp_resp_owe(t, F_RESP, e->resp_id, 0, 1);

		if (ret)
			return w_fail(t, ret);
	}
	return 0;
}

/*
 * Up to n bytes of the payload at rpos into p: what rbuf holds, then from
 * the socket as they come.  Fewer when the rest is late (W_PART_MS) or the
 * socket has an error or its end, which is the receive thread's to see.
 */
static size_t w_fill(struct tcp_ep *t, char *p, size_t n)
{
	size_t got = GDX_MIN(n, t->rlen - t->rpos);

	gdx_counter_add(&t->ctr[C_RX_BUFFERED], got);
	if (got)
		memcpy(p, t->rbuf + t->rpos, got);
	t->rpos += got;
	while (got < n) {
		ssize_t r = recv(t->fd, p + got, n - got, MSG_DONTWAIT);
		int ev;

		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int ms = W_PART_MS;

			if (t->w_until) {
				uint64_t now = gdx_now_ns();

				if (now >= t->w_until)
					break;
				ms = (int)((t->w_until - now + 999999) / 1000000);
			}
			/* a large rest wakes the waiter once, not a segment at a time */
			ev = gdx_rx_wait_for(t->fd, n - got, t->wake_whole, ms);
			/* the zero-copy notifications of this socket's sends raise POLLERR too */
			if (ev > 0 && (ev & POLLERR))
				tcp_zc_reap(t);
			if (ev > 0 && !(ev & POLLHUP))
				continue;
		}
		break;
	}
	return got;
}

/*
 * Leaves the message begun into receive r (got bytes of frame h in place,
 * or posted to the receive lane: dev; err, the lane failed it) to the
 * receive thread, which finishes it (rx_part); or, the connection ending,
 * gives r back for the flush to report.  -1.
 */
static int w_leave(struct tcp_ep *t, struct qent *r, const struct hdr *h, uint64_t got, int dev,
		   int err)
{
	pthread_mutex_lock(&t->lock);
	if (t->dead) {
		/* the receive thread may be gone already: the flush reports it */
		w_unpop(t, r);
	} else {
		t->w_part.r = r;
		t->w_part.id = h->id;
		t->w_part.len = h->len;
		t->w_part.got = got;
		t->w_part.dev = dev;
		t->w_part.err = err;
	}
	pthread_mutex_unlock(&t->lock);
	return -1;
}

/*
 * w_send's message into device memory of the agent's device: received in
 * pieces into the receive lane's ring, each one's copy posted to the agent
 * as soon as it is in (as the receive thread's rx_lane_recv), and its
 * completion and response deferred on the last one's mark (w_complete): the
 * waiter is the lane's producer (w_lane), so the message costs the receive
 * thread no wake-up.  A lane that fails on the way (the agent's fault: the
 * lane goes on synchronously) leaves the rest to the receive thread to read
 * and drop, and the message fails with the lane's error.
 */
static int w_dev(struct tcp_ep *t, struct qent *r, const struct hdr *h)
{
	struct gdx_stage *rx = t->rx_lane;
	char *dst = r->req->buf.p;
	struct deff e;
	uint64_t got = 0;
	int ret = 0;

	while (got < h->len) {
		struct gdx_stage_span sp;
		size_t want, have;

		ret = gdx_stage_reserve(rx, h->len - got, 0, &sp);
		if (ret)
			return w_leave(t, r, h, got, got > 0, ret);
		want = sp.n;
		have = w_fill(t, sp.p, want);
		if (have < want) {
			/*
			 * A late rest, left to the receive thread: what came goes
			 * to the device in whole RING_ALIGN units, so that the
			 * pieces after it land as aligned as the buffer (the cuda
			 * agent copies a piece whose ends differ mod 16 at
			 * 0.55-0.95 of an aligned one's rate); the odd tail goes
			 * back to rbuf, which w_fill emptied before it read the
			 * socket, and the room past the piece back to the ring.
			 */
			size_t odd = have % RING_ALIGN;

			have -= odd;
			memcpy(t->rbuf, (char *)sp.p + have, odd);
			t->rpos = 0;
			t->rlen = odd;
		}
		if (!have) {
			gdx_stage_unreserve(rx, &sp);
			return w_leave(t, r, h, got, got > 0, 0);
		}
		gdx_stage_trim(rx, &sp, have);
		/* a wait in the reserve may have found the agent failed: the lane went synchronous */
		ret = tcp_rx_agent(rx) ? gdx_stage_post(rx, &sp, dst + got) :
					 gdx_stage_ctx_status(t->stage);
		if (!got)
			gdx_counter_add(&t->ctr[C_RX_WAITER_DEV], 1);
		got += have;
		if (ret || have < want)
			return w_leave(t, r, h, got, 1, ret);
		gdx_stage_progress(rx);
	}
	gdx_counter_add(&t->ctr[C_RX_WAITER], 1);
	t->w_done++;
	e = (struct deff){ .req = r->req, .len = h->len, .has_resp = 1, .resp_id = h->id };
	free(r);
	return w_complete(t, &e, got > 0);
}

/*
 * A send of the peer whose header is at rpos, for the oldest receive: the
 * waiter receives it itself when that receive is the endpoint's own (not a
 * shared queue's), large enough, of host memory or device memory the copy
 * agent serves (w_dev), with no kept message before it, none being handed
 * over (the receive thread, parked, defers no completion), and the answers
 * owed to the peer under their bound.  A host payload goes straight into
 * the receive's buffer.  1: left to the receive thread, nothing read; 0:
 * received, completed or its completion deferred, its response owed
 * (t->resp); -1: begun and handed to the receive thread (t->w_part), or the
 * connection ended.
 */
static int w_send(struct tcp_ep *t, const struct hdr *h)
{
	struct gdx_xport_buf *b;
	struct deff e;
	struct qent *r;
	uint64_t got;
	int dev;

	pthread_mutex_lock(&t->lock);
	r = t->recv_head;
	b = r ? &r->req->buf : NULL;
	dev = b && b->kind != GDX_MEM_HOST && b->kind != GDX_MEM_PINNED && b->dev;
	/* a poll leaves device receives to the receive thread: their copies are waited for */
	if (t->dead || !t->rx_parked || t->fe->opts.srq || !r || t->unexp_head ||
	    (dev && t->w_until) ||
	    (dev && (__atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE) != b->dev ||
		     !tcp_rx_agent(t->rx_lane))) || h->len > b->len ||
	    atomic_load_explicit(&t->ans_held, memory_order_relaxed) + t->nresp + 1 >= t->ans_max) {
		pthread_mutex_unlock(&t->lock);
		return 1;
	}
	q_pop(&t->recv_head, &t->recv_tail);
	/* the receive thread, parked, has no effect deferred: the lane is this thread's now */
	if (dev)
		t->w_lane = 1;
	pthread_mutex_unlock(&t->lock);
	t->rpos += sizeof(*h);
	if (dev)
		return w_dev(t, r, h);
	got = w_fill(t, b->p, h->len);
	if (got < h->len)
		return w_leave(t, r, h, got, 0, 0);
	gdx_counter_add(&t->ctr[C_RX_WAITER], 1);
	t->w_done++;
	e = (struct deff){ .req = r->req, .len = h->len, .has_resp = 1, .resp_id = h->id };
	if (!t->w_lane) {
		/*
		 * In order with the flush of a connection that ended meanwhile,
		 * which completes the receives after this one (rule 2).  (The
		 * lane's producer is waited for before the flush.)
		 */
		pthread_mutex_lock(&t->lock);
		gdx_xport_complete(r->req, t->flushed ? GDX_EDISCONNECTED : 0,
				   t->flushed ? 0 : h->len);
		pthread_mutex_unlock(&t->lock);
		e.req = NULL;
	}
	free(r);
	return w_complete(t, &e, 0);
}

/*
 * A CQ waiter holding the socket: reads what is there without blocking and
 * completes the answers that carry no payload and the peer's sends (w_send),
 * in order, up to the first frame it leaves to the receive thread.  The
 * responses it owes for the sends go out before it hands the socket back
 * (tcp_wait), ahead of any the receive thread will owe.  1: it read the end
 * of the stream, which the receive thread must see (the socket's edge is
 * spent).
 */
static int w_read(struct tcp_ep *t)
{
	for (int more = 1;; ) {
		size_t room;
		ssize_t n;

		while (t->rlen - t->rpos >= sizeof(struct hdr)) {
			struct qent *q;
			struct deff e;
			struct hdr h;
			int st;

			memcpy(&h, t->rbuf + t->rpos, sizeof(h));
			tcp_rx_saw(t, &h);
			if (h.type == F_SEND && h.len <= MAX_PAYLOAD) {
				if (w_send(t, &h))
					return 0;
				continue;
			}
			if (h.len || (h.type != F_RESP && h.type != F_READ_RESP))
				return 0;
			pthread_mutex_lock(&t->lock);
			/*
			 * Not for a frame whose sender has yet to account it (it may
			 * still be in its sendmsg): the receive thread sorts that out.
			 */
			st = t->on_wire > 0 ? tcp_resp_take(t, &h, 1, &q) : -EAGAIN;
			if (!st && h.type == F_READ_RESP) {
				t->reads_in_flight--;
				pthread_cond_broadcast(&t->tx_cond);
			}
			pthread_mutex_unlock(&t->lock);
			if (st)
				return 0;
			t->rpos += sizeof(h);
			e = (struct deff){ .req = q->req, .st = h.status, .len = q->req->buf.len };
			free(q);
			gdx_counter_add(&t->ctr[C_RX_WAITER], 1);
			t->w_done++;
			if (w_complete(t, &e, 0))
				return 0;
		}
		if (!more)
			return 0;
		if (t->rpos == t->rlen) {
			t->rpos = t->rlen = 0;
		} else if (t->rpos) {
			memmove(t->rbuf, t->rbuf + t->rpos, t->rlen - t->rpos);
			t->rlen -= t->rpos;
			t->rpos = 0;
		}
		room = tcp_rbuf_room(t, sizeof(struct hdr) - GDX_MIN(t->rlen, sizeof(struct hdr)));
		do
			n = recv(t->fd, t->rbuf + t->rlen, room, MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			/* The socket reports an error once: the receive thread learns it here. */
			int err = errno == ECONNRESET || errno == EPIPE ? 0 : -errno;

			pthread_mutex_lock(&t->lock);
			tcp_kill_conn(t, err);
			pthread_mutex_unlock(&t->lock);
		}
		/* The end of the stream is the receive thread's to see. */
		if (n <= 0)
			return n == 0;
		t->rlen += (size_t)n;
		/* Less than asked for: the socket was empty, no need to ask again. */
		more = (size_t)n == room;
	}
}

/*
 * Moves the socket to epoll set `to`.  Edge-triggered: MSG_ZEROCOPY
 * notifications raise EPOLLERR, which no event mask turns off and no read of
 * the data clears; level-triggered, they would spin the waits until the
 * transmit side reaps them.  Both waits read until EAGAIN before sleeping, and
 * a socket that is readable when added reports at once.
 */
static void w_move(struct tcp_ep *t, int from, int to)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET };

	if (epoll_ctl(from, EPOLL_CTL_DEL, t->fd, NULL) ||
	    epoll_ctl(to, EPOLL_CTL_ADD, t->fd, &ev))
		GDX_DBG(SUBSYS, "epoll_ctl: %s", strerror(errno));
}

/* This thread takes the socket from the parked receive thread.  Lock held. */
static void w_grab(struct tcp_ep *t)
{
	t->w_reader = 1;
	t->w_tid = pthread_self();
	w_move(t, t->rx_epfd, t->w_epfd);
	gdx_counter_add(&t->ctr[C_RX_TAKES], 1);
}

/*
 * The sleeper takes the socket, unless that did not pay lately.  It pays when
 * the answers wake only the sleeper; when the receive thread had to read the
 * socket anyway before the next chance (answers that came while the
 * sleeper was away: this is a machine where threads rarely sleep long, such as
 * a busy one), the sleeper's reading only added work, so it leaves out the
 * next 1, 3, 7, ... 63 chances before it tries again.  Lock held.
 */
static void w_take(struct tcp_ep *t)
{
	long r = atomic_load_explicit(&t->rx_reads, memory_order_relaxed);

	if (t->w_took) {
		t->w_exp = r != t->w_mark && t->w_done == t->w_done_mark ?
			   GDX_MIN(t->w_exp + 1, 6) : 0;
		t->w_skip = (1u << t->w_exp) - 1;
	}
	t->w_took = 0;
	if (t->w_skip) {
		t->w_skip--;
		return;
	}
	t->w_took = 1;
	t->w_mark = r;
	t->w_done_mark = t->w_done;
	w_grab(t);
}

/*
 * Whether a sleeper has something to read on the socket: answers due, or a
 * message for a receive of its own posted (w_send's, whose other conditions
 * it checks per frame).  Not while a request awaiting an answer may raise
 * MSG_ZEROCOPY notifications, each a spurious wake-up of the sleeper: one
 * that went out of the small trains with zero-copy on.  Lock held.
 */
static int w_worth(struct tcp_ep *t)
{
	if (__atomic_load_n(&t->zerocopy, __ATOMIC_RELAXED) && t->outst_head &&
	    (uint64_t)(uintptr_t)t->outst_head->data <= t->big_id)
		return 0;
	return t->on_wire > 0 || (t->recv_head && !t->unexp_head && !t->fe->opts.srq);
}

/*
 * Whether the socket may be taken from the receive thread: it is parked
 * between frames with nothing buffered or begun, and something is due.
 * Lock held.
 */
static int w_can_take(struct tcp_ep *t)
{
	return !t->dead && t->rx_parked && t->rpos == t->rlen && !t->w_part.r && w_worth(t);
}

/*
 * The waiter is done with the receive lane (w_lane), its effects run or
 * left to the receive thread with the socket: that thread may use the lane
 * again, for kept messages a post asked it to hand over meanwhile too, and
 * its teardown may go on.  Lock held.
 */
static void w_lane_end(struct tcp_ep *t)
{
	t->w_lane = 0;
	pthread_cond_broadcast(&t->rx_cond);
	if (atomic_load_explicit(&t->kept_kick, memory_order_relaxed))
		tcp_rx_wakeup(t);
}

/*
 * The holder hands the socket back to the receive thread, and the receive
 * lane with the effects it deferred there, if any.  Lock held.
 */
static void w_give_back(struct tcp_ep *t)
{
	int lane = t->w_lane;

	t->w_reader = 0;
	__atomic_store_n(&t->w_lent, 0, __ATOMIC_RELAXED);
	w_move(t, t->w_epfd, t->rx_epfd);
	gdx_counter_add(&t->ctr[C_RX_GIVES], 1);
	if (lane)
		w_lane_end(t);
	if (t->rlen > t->rpos || t->w_part.r || lane)
		tcp_rx_wakeup(t);
}

/*
 * The held response goes with an answer the caller posted: queued ahead of a
 * device frame (tcp_held_lead), or taken with one by the transmit thread
 * (still held, no longer queued: a lone one it leaves queued).  Lock held.
 */
static int w_resp_carried(struct tcp_ep *t)
{
	const struct txi *x = t->txq_head;

	if (tcp_held_lead(t))
		return 1;
	while (x && !x->hold)
		x = x->next;
	return !x && atomic_load_explicit(&t->resp_held, memory_order_relaxed);
}

/*
 * Gives a lent socket back (tcp_wait): a poll found the CQ empty and no
 * answer posted (poll), or the receive thread's timed park ended.  A poll
 * that finds the held response going with a device frame posted since
 * leaves it lent: the answer was posted, and the transmit thread sends the
 * response in its train once the frame's copy lands; the caller's next
 * sleep takes the socket over.
 */
void tcp_lend_end(struct tcp_ep *t, int poll)
{
	if (!__atomic_load_n(&t->w_lent, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&t->lock);
	if (t->w_lent && !(poll && w_resp_carried(t)))
		w_give_back(t);
	pthread_mutex_unlock(&t->lock);
}

/*
 * A poll lends the socket it read (rx_park gives it back after a while);
 * a receive thread asleep without a timeout is woken to sleep timed.  Lock
 * held; returns whether to wake it (once the lock is released).
 */
static int w_lend(struct tcp_ep *t)
{
	int wake = t->rx_untimed;

	__atomic_store_n(&t->w_lent, 1, __ATOMIC_RELAXED);
	t->rx_untimed = 0;
	return wake;
}

/*
 * A caller of gdx_xport_cq_wait goes to sleep (sleeping 1), has woken (0), or
 * returns (-1).  While answers or messages are due and the receive thread is
 * parked between frames, the sleeper takes the socket: they then wake it
 * alone, not the receive thread and, through it, the sleeper.  On waking it
 * reads what came; it keeps the socket for its next sleep in the same wait
 * unless it leaves the receive thread something (a frame it does not take,
 * a message begun, the end of the stream) or the connection is ending, and
 * hands it back when the wait returns or nothing is due any more: moving
 * the socket costs two epoll_ctl each way, and a wake that completed nothing
 * (an answer to an unsignaled send) is followed by another sleep.
 *
 * A caller of gdx_xport_cq_poll that found the CQ empty (sleeping 2,
 * xport.tcp_poll_read) does at once what a sleeper does on waking, and lends
 * the socket after: a thread spinning on its CQ then completes what comes
 * without the receive thread's wake-up and hand-off in between, and its next
 * poll reads again without a move.  Only with at most one request on the
 * wire: with more, the receive thread reads their answers while the caller
 * posts, in parallel (a poller reading them itself carried a quarter less
 * at 16 KiB, depth 16).  A poll does not block: it waits for a payload's
 * rest W_PART_MS in all (w_until) and leaves device receives, whose copies
 * it would wait for, to the receive thread.  Nobody watches a lent socket's
 * input but the polls: the receive thread's park is timed meanwhile and
 * takes it back when it ends (tcp_lend_end), so input is read within
 * xport.tcp_resp_hold_ms of the last poll.
 */
void tcp_wait(void *priv, int sleeping)
{
	struct tcp_ep *t = priv;
	int poll = sleeping == 2, dead, ret, end = 0, wake = 0;

	if (poll && !t->poll_read)
		return;
	/* Held responses go before anyone sleeps: no post of this caller comes meanwhile. */
	if (sleeping == 1)
		tcp_resp_push(t);
	pthread_mutex_lock(&t->lock);
	/* a lent socket is the next sleeper's or poller's, whichever thread: no epoll_ctl */
	if (sleeping > 0 && t->w_lent) {
		t->w_tid = pthread_self();
		__atomic_store_n(&t->w_lent, 0, __ATOMIC_RELAXED);
	}
	if (poll && !t->w_reader) {
		/* without the sleepers' back-off, which counts their chances, not polls */
		if (t->on_wire <= 1 && w_can_take(t))
			w_grab(t);
		if (!t->w_reader)
			goto out;
	} else if (poll && t->w_reader && pthread_equal(t->w_tid, pthread_self())) {
		/* nothing due, or requests enough for the receive thread to read in parallel */
		if (t->on_wire > 1 || !w_worth(t)) {
			w_give_back(t);
			goto out;
		}
	} else if (t->w_reader && !t->w_lent && pthread_equal(t->w_tid, pthread_self())) {
		/*
		 * A wait that returns with a response held lends the socket:
		 * the caller is about to post the answer and wait again, and
		 * its next sleep takes the socket over without a move (two
		 * epoll_ctl each way).  A poll that finds the CQ empty with the
		 * response still held (no answer posted), and the receive
		 * thread's timed park, which it stays in meanwhile (rx_park),
		 * give it back.
		 */
		if (sleeping < 0 && atomic_load_explicit(&t->resp_held, memory_order_relaxed) &&
		    !t->dead && t->rpos == t->rlen && !t->w_part.r) {
			__atomic_store_n(&t->w_lent, 1, __ATOMIC_RELAXED);
			goto out;
		}
		/* kept for a sleep only while it would take it (w_worth) */
		if (sleeping < 0 || (sleeping > 0 && !w_worth(t)))
			w_give_back(t);
		if (sleeping)
			goto out;
	} else {
		if (sleeping == 1 && !t->w_reader && w_can_take(t))
			w_take(t);
		goto out;
	}
	dead = t->dead;
	/* a poll waits for a payload's rest W_PART_MS in all, not per pause */
	t->w_until = poll ? gdx_now_ns() + W_PART_MS * 1000000ull : 0;
	pthread_mutex_unlock(&t->lock);
	/* rbuf and the socket are this thread's until it hands them back. */
	if (!dead)
		end = w_read(t);
	/*
	 * Messages it received into device memory complete once their copies
	 * landed: it waits for them, as the receive thread before it parks,
	 * reading what comes meanwhile, unless it leaves the socket to the
	 * receive thread anyway (which then runs them).
	 */
	while (!end && t->w_lane && t->rpos == t->rlen && !t->w_part.r &&
	       !__atomic_load_n(&t->dead, __ATOMIC_ACQUIRE) && tcp_rx_deferred(t) &&
	       tcp_lane_idle(t) > 0)
		end = w_read(t);
	/*
	 * Responses to the sends it received are queued before any the receive
	 * thread will owe, held for the caller's next post (tcp_resp_hold).
	 */
	ret = tcp_resp_hold(t);
	if (!ret && t->w_lane)
		ret = t->rx_err;
	pthread_mutex_lock(&t->lock);
	if (ret)
		tcp_kill_conn(t, ret);
	if (t->w_lane && !tcp_rx_deferred(t))
		w_lane_end(t);
	if (end || t->dead || t->rlen > t->rpos || t->w_part.r || t->w_lane)
		w_give_back(t);
	else if (poll)
		wake = w_lend(t);
out:
	pthread_mutex_unlock(&t->lock);
	if (wake)
		tcp_rx_wakeup(t);
}
