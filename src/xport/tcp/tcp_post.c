/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, the posting threads (tcp_int.h): a post queues its frame
 * and, when nobody is sending (t->sending), sends it itself: small ones in
 * trains, as do the CQ poll and the receive thread's answers, large host ones
 * among them, as far as the socket takes it (tx_host_rides).
 */

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <linux/errqueue.h>

#include "common/log.h"
#include "common/util.h"
#include "xport/tcp/tcp_int.h"

/* Completes receive req with message u, which arrived before it. */
void tcp_deliver_unexpected(struct gdx_xport_req *req, struct qent *u)
{
	req->cqe_flags |= GDX_XPORT_CQE_UNEXPECTED;
	if (u->is_imm) {
		gdx_xport_complete_imm(req, 0, u->len, GDX_XPORT_OP_RECV_WRITE_IMM, u->imm);
	} else if (u->len > req->buf.len) {
		gdx_xport_complete(req, -EMSGSIZE, 0);
	} else {
		int st = 0;

		if (u->len && req->buf.dev)
			st = gdx_memcpy(req->buf.dev, req->buf.p, u->data, u->len);
		else if (u->len)
			memcpy(req->buf.p, u->data, u->len);
		/* It sat in an intermediate buffer, whatever the memory kind. */
		req->buf.path = GDX_XPORT_PATH_BOUNCE;
		gdx_xport_complete(req, st, st ? 0 : u->len);
	}
	free(u->data);
	free(u);
}

/*
 * Reaps MSG_ZEROCOPY notifications so they do not pile up in the socket's
 * error queue.  Completion does not wait for them: a request completes when
 * the peer has answered, which it does only after receiving every byte, so
 * the buffer is no longer needed by the time the user may reuse it.  Where
 * the kernel reports it copied anyway (loopback), zero-copy is switched off.
 */
void tcp_zc_reap(struct tcp_ep *t)
{
	for (;;) {
		char ctl[128];
		struct msghdr m = { .msg_control = ctl, .msg_controllen = sizeof(ctl) };
		struct cmsghdr *c;

		if (recvmsg(t->fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return;
		for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			struct sock_extended_err ee;

			if (c->cmsg_len < CMSG_LEN(sizeof(ee)))
				continue;
			memcpy(&ee, CMSG_DATA(c), sizeof(ee));
			if (ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY &&
			    (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) &&
			    __atomic_load_n(&t->zerocopy, __ATOMIC_RELAXED)) {
				GDX_DBG(SUBSYS, "kernel copied a MSG_ZEROCOPY send; sending copied");
				__atomic_store_n(&t->zerocopy, 0, __ATOMIC_RELAXED);
			}
		}
	}
}

/*
 * A receive was posted with messages kept (kept_rx): the receive thread hands
 * them over, wherever it is.  Lock held, as when it parks (rx_park), so
 * either it sees the kick or it is seen parked and woken.
 */
void tcp_kept_kick_locked(struct tcp_ep *t)
{
	atomic_store_explicit(&t->kept_kick, 1, memory_order_relaxed);
	pthread_cond_broadcast(&t->rx_cond);
	if (t->rx_parked)
		tcp_rx_wakeup(t);
}

/*
 * ThreadSanitizer records sendmsg's read of the iovecs once the call has
 * returned, after its release of the socket, so nothing it sees orders that
 * read before the buffer's reuse: the request completes on the peer's answer,
 * which the peer sends once it has the bytes, taken by the kernel before (or,
 * MSG_ZEROCOPY, while) they reached it.  Every word of a reused buffer then
 * takes its slow race path (minutes for 32 MiB, however suppressed), so the
 * call's accesses are left out of its view.  docs/design.md, Testing.
 */
#if defined(__SANITIZE_THREAD__)
#define TCP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TCP_TSAN 1
#endif
#endif
#ifdef TCP_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define SEND_UNSEEN_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define SEND_UNSEEN_END() AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define SEND_UNSEEN_BEGIN() ((void)0)
#define SEND_UNSEEN_END() ((void)0)
#endif

int tcp_send_iov(struct tcp_ep *t, struct iovec *iov, int cnt, int flags, size_t *sent)
{
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };
	ssize_t n;
	int err;

	for (;;) {
		SEND_UNSEEN_BEGIN();
		n = sendmsg(t->fd, &m, MSG_NOSIGNAL | flags);
		err = errno;
		SEND_UNSEEN_END();
		if (n >= 0) {
			gdx_counter_add(&t->ctr[C_TX_WRITES], 1);
			break;
		}
		if (err == EINTR)
			continue;
		if (err == ENOBUFS && (flags & MSG_ZEROCOPY)) {
			/* Out of option memory for notifications: send this part copied. */
			flags &= ~MSG_ZEROCOPY;
			continue;
		}
		return -err;
	}
	*sent = (size_t)n;
	return 0;
}

/*
 * Sends what is left of frame x whose payload is n bytes of host memory at p,
 * waiting for room (the transmit thread).  Large payloads go zero-copy; the
 * header never does (x is freed right after).
 */
int tcp_tx_host(struct tcp_ep *t, struct txi *x, const void *p, size_t n)
{
	const size_t hl = sizeof(x->h), total = hl + n;
	int zc = __atomic_load_n(&t->zerocopy, __ATOMIC_RELAXED) && n >= ZC_MIN;
	int used_zc = 0;

	while (x->off < total) {
		struct iovec iov[2];
		int cnt = 0, flags = 0, ret;
		size_t sent = 0;

		if (x->off < hl) {
			iov[cnt++] = (struct iovec){ (char *)&x->h + x->off, hl - x->off };
			if (n && !zc)
				iov[cnt++] = (struct iovec){ (void *)p, n };
			else if (n)
				flags |= MSG_MORE;
		} else {
			iov[cnt++] = (struct iovec){ (char *)p + (x->off - hl), total - x->off };
			if (zc) {
				flags |= MSG_ZEROCOPY;
				used_zc = 1;
			}
		}
		ret = tcp_send_iov(t, iov, cnt, flags, &sent);
		if (ret)
			return ret;
		x->off += sent;
	}
	if (used_zc)
		tcp_zc_reap(t);
	return 0;
}

static void rd_leave(struct tcp_ep *t);

/*
 * One sendmsg without waiting, t->lock dropped around it.  region: the iovecs
 * read a region's host memory for a read answer (rd_busy: a write to the
 * region waits for this send to return, never for the peer).  Lock held.
 */
static int send_nowait(struct tcp_ep *t, struct iovec *iov, int cnt, int region, size_t *sent)
{
	int ret;

	t->rd_busy += region;
	pthread_mutex_unlock(&t->lock);
	ret = tcp_send_iov(t, iov, cnt, MSG_DONTWAIT, sent);
	pthread_mutex_lock(&t->lock);
	if (region)
		rd_leave(t);
	return ret;
}

/*
 * Sends read answer x, n bytes of host memory, from the transmit thread.  No
 * send reads the region while it blocks, so that a write to the region can
 * wait for the sends that read it without waiting for the peer (tcp_ans_settle:
 * it gives x its own copy of the rest, then waits): each sendmsg is
 * non-blocking, the lock taken around it, and the socket's room waited for
 * apart.  Never zero-copy: the kernel would read the region when the NIC
 * sends, after the call returned, and the write could not know when.
 */
int tcp_tx_answer(struct tcp_ep *t, struct txi *x, size_t n)
{
	const size_t hl = sizeof(x->h), total = hl + n;
	int ret = 0;

	pthread_mutex_lock(&t->lock);
	while (!ret && x->off < total) {
		struct iovec iov[2];
		int cnt = 0, region = x->ans;
		size_t sent = 0;

		if (x->off < hl)
			iov[cnt++] = (struct iovec){ (char *)&x->h + x->off, hl - x->off };
		iov[cnt] = (struct iovec){ (char *)x->pp + (x->off > hl ? x->off - hl : 0),
					   total - GDX_MAX(x->off, hl) };
		cnt++;
		ret = send_nowait(t, iov, cnt, region, &sent);
		x->off += sent;
		if (ret == -EAGAIN) {
			ret = 0;
			tcp_tx_wait_out(t);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/*
 * Whether queued frame x may not be taken yet: a fenced request while reads
 * are in flight, or a read answer whose bytes the receive thread is copying
 * out of its region (ans_snap).  A fenced request already going passed its
 * fence: the reads in flight since are behind it (gathered in its train,
 * which the socket cut short), and wait for the rest of it.  Lock held.
 */
int tcp_tx_blocked(struct tcp_ep *t, struct txi *x)
{
	return x->snapping || (x->req && (x->req->flags & GDX_XPORT_FENCE) && t->reads_in_flight &&
			       !txi_going(x));
}

/*
 * Frame x is about to go out (once; lock held): a read is in flight from
 * here, and a request may be answered, not before (tcp_resp_take): a peer that
 * answers a request still queued would complete it, and have it freed, while
 * its frame still points at it.  Nothing of x->req is looked at past here.
 */
void tcp_tx_going(struct tcp_ep *t, struct txi *x)
{
	if (txi_going(x))
		return;
	txi_set(x, x->state == TXS_STAGED ? TXS_GOING_STAGED : TXS_GOING);
	if (x->h.type == F_READ)
		t->reads_in_flight++;
	if (x->q)
		x->q->sent = 1;
}

/* Takes the socket for sending x.  Lock held. */
void tcp_tx_begin(struct tcp_ep *t, struct txi *x)
{
	t->sending = 1;
	tcp_tx_going(t, x);
}

/*
 * The longest a posting thread waits for the stage copy of a small device
 * payload it would write itself (sr_direct): such a copy lands in a few
 * microseconds; a slower one is left to the transmit thread, which the post
 * then wakes, as before.
 */
#define SR_DIRECT_NS 50000u

/*
 * The ring frame a thread holding the socket may write itself in a train
 * (tx_gather), as the transmit thread would (sr_send): the first frame of the
 * queue behind held responses, a request of at most DIRECT_MAX bytes whose
 * stage copy was posted when it was queued (staged), no late frame queued
 * (the room it gives back goes to those in order, tcp_sr_catch_up), or NULL.
 * Whether its copy landed is the caller's to see.  Lock held.
 */
static struct txi *sr_direct(struct tcp_ep *t)
{
	struct txi *x = t->txq_head;

	while (x && x->hold)
		x = x->next;
	return x && x->path == TXP_RING && x->state == TXS_STAGED && x->req &&
	       x->plen <= DIRECT_MAX && !t->sr_late && !t->sr_whole && !tcp_tx_blocked(t, x) ?
	       x : NULL;
}

/*
 * Whether frame x, a large host request, may go in a train a posting thread
 * sends (tx_gather): not while MSG_ZEROCOPY is on, which only the transmit
 * thread's blocking sends use (a zero-copy send's bytes leave after the call
 * returns anyway).  What the socket does not take of a train stays queued,
 * the frame it stopped in at the head with x->off saying how much of it
 * went, for the transmit thread (tcp_tx_host picks up there), so nothing
 * overtakes it.
 */
static int tx_host_rides(const struct tcp_ep *t, const struct txi *x, int by_tx)
{
	return !by_tx && x->path == TXP_HOST && x->req &&
	       !__atomic_load_n(&t->zerocopy, __ATOMIC_RELAXED);
}

/*
 * Gathers a train of host frames from the head of the queue into iov, for one
 * sendmsg of up to TX_TRAIN_BYTES: the part of each not yet sent.  Stops at a
 * frame that needs the transmit thread (device memory, a large read answer)
 * or waits for a fence.  A posting thread's train takes large host requests
 * too (tx_host_rides): a send answered by a send then carries the held
 * response ahead of it in the same write, not one write (and a wake-up of
 * the peer) each, and a stream of 256 KiB writes goes four a write, as a raw
 * sender's (a second large one joins only where the train's payloads stay
 * within TX_TRAIN_BYTES).  But for the transmit thread (by_tx, which sends
 * ring frames its own way), a small ring frame whose copy landed goes too
 * (sr_direct), with the held responses ahead of it; without one, held
 * responses that a device frame's train will carry (tcp_held_lead) are the
 * transmit thread's.
 * *region: a read answer among them is still read out of its region.  Lock
 * held; returns the number of iovecs.
 */
static int tx_gather(struct tcp_ep *t, struct iovec *iov, int *region, int by_tx)
{
	const size_t hl = sizeof(struct hdr);
	struct txi *ring = by_tx ? NULL : sr_direct(t);
	size_t bytes = 0, pay = 0;	/* gathered, of which payload */
	int cnt = 0, held = 0, host = 0;

	*region = 0;
	if (ring && !gdx_stage_seen(t->tx_lane, ring->sr_end, ring->ticket))
		ring = NULL;
	if (!by_tx && !ring && tcp_held_lead(t))
		return 0;
	for (struct txi *x = t->txq_head;
	     x && (x->path == TXP_TRAIN || x == ring || tx_host_rides(t, x, by_tx)) &&
	     cnt + 2 <= TX_TRAIN_IOV && bytes < TX_TRAIN_BYTES && !tcp_tx_blocked(t, x);
	     x = x->next) {
		size_t o = x->off > hl ? x->off - hl : 0;

		/* 1 MiB requests go one a write, as before, and the rest of one cut short alone */
		if (x->path == TXP_HOST && host && pay + x->plen - o > TX_TRAIN_BYTES)
			break;
		host |= x->path == TXP_HOST;
		tcp_tx_going(t, x);
		*region |= x->ans;
		if (x->hold) {
			held = 1;
		} else if (held == 1 && x->req) {
			gdx_counter_add(&t->ctr[C_RESP_RODE], 1);
			held = 2;
		}
		if (x->off < hl)
			iov[cnt++] = (struct iovec){ (char *)&x->h + x->off, hl - x->off };
		if (x->plen)
			iov[cnt++] = (struct iovec){ (char *)x->pp + o, x->plen - o };
		bytes += hl + x->plen - x->off;
		pay += x->plen - o;
	}
	return cnt;
}

/*
 * Accounts sent bytes to the train at the head of the queue; frames sent whole
 * are unlinked onto *done (their requests may complete, and be freed, as soon
 * as the peer has them: nothing here looks at x->req).  Lock held.
 */
static void tx_retire(struct tcp_ep *t, size_t sent, struct txi **done, int by_tx)
{
	while (sent) {
		struct txi *x = t->txq_head;
		size_t left = sizeof(x->h) + x->plen - x->off;

		if (sent < left) {
			x->off += sent;
			return;
		}
		sent -= left;
		/* a ring frame (sr_direct) is out: its room goes back, to late frames first */
		if (txi_staged(x)) {
			gdx_stage_release(t->tx_lane, x->sr_end);
			tcp_sr_catch_up(t, t->tx_lane);
		}
		t->txq_head = x->next;
		if (!t->txq_head)
			t->txq_tail = NULL;
		tcp_ans_unlink(t, x);
		if (x->req) {
			t->on_wire++;
			gdx_counter_add(&t->ctr[by_tx ? C_TX_HANDED : C_TX_DIRECT], 1);
		}
		t->qlen--;
		x->next = *done;
		*done = x;
	}
}

/* A send that read a region's host memory for a read answer returned.  Lock held. */
static void rd_leave(struct tcp_ep *t)
{
	if (!--t->rd_busy && t->rd_waiting)
		pthread_cond_broadcast(&t->rd_cond);
}

/*
 * Waits, lock dropped, until the socket takes more; a zero-copy
 * notification, which wakes it as an error, is reaped.  Lock held.
 */
void tcp_tx_wait_out(struct tcp_ep *t)
{
	struct pollfd pf = { .fd = t->fd, .events = POLLOUT };

	pthread_mutex_unlock(&t->lock);
	if (poll(&pf, 1, -1) > 0 && (pf.revents & POLLERR))
		tcp_zc_reap(t);
	pthread_mutex_lock(&t->lock);
}

/*
 * Sends one train from the head of the queue, without blocking (the transmit
 * thread waits for room with tcp_tx_wait_out: a send never blocks while it reads
 * a region for a read answer, tcp_ans_settle).  Lock held (dropped around the
 * sendmsg); -EAGAIN when the socket was full, 1 when the head is not a small
 * frame (or is fenced).  by_tx: the caller is the transmit thread (counters).
 */
int tcp_tx_train(struct tcp_ep *t, struct txi **done, int by_tx)
{
	struct iovec iov[TX_TRAIN_IOV];
	size_t sent = 0;
	int region, cnt = tx_gather(t, iov, &region, by_tx), ret;

	if (!cnt)
		return 1;
	t->sending = 1;
	ret = send_nowait(t, iov, cnt, region, &sent);
	t->sending = 0;
	if (t->dead)
		pthread_cond_broadcast(&t->tx_cond);	/* tcp_flush_all may wait for the queue */
	if (ret == -EWOULDBLOCK)
		ret = -EAGAIN;
	if (ret && ret != -EAGAIN)
		tcp_kill_conn(t, ret);
	else
		tx_retire(t, sent, done, by_tx);
	return ret;
}

/* x is being queued: a ring frame if the transmit lane copies its device payload.  Lock held. */
static void sr_queue(struct tcp_ep *t, struct txi *x)
{
	struct gdx_stage *tx;

	if (!x->dev || !x->plen || t->dead || !(tx = tcp_tx_lane(t, x->dev)))
		return;
	x->path = TXP_RING;
	gdx_counter_add(&t->ctr[C_SR_FRAMES], 1);
	if (t->sr_late || t->sr_whole || !tcp_sr_early(x) || tcp_sr_stage(x, tx)) {
		txi_set(x, TXS_LATE);
		if (!t->sr_late)
			t->sr_late = x;
		gdx_counter_add(&t->ctr[C_SR_LATE], 1);
	}
}

/*
 * Unless another thread holds the socket (it sends what is queued before
 * letting go), sends the queue from the calling thread: trains of small
 * frames, one sendmsg each, a small device request whose stage copy landed
 * among them (sr_direct: waited for a moment), and large host requests
 * (tx_host_rides), without blocking.  Only a larger
 * device-memory frame, one whose copy is slow, a read answer over
 * DIRECT_MAX, a fenced frame, or what did not fit in the socket wakes the
 * transmit thread: a post at an idle transmit side costs no thread hand-off.
 * Called with the lock held; returns with it released.
 */
static void tx_push_locked(struct tcp_ep *t)
{
	struct txi *done = NULL;

	while (!t->dead && !t->sending && t->txq_head) {
		if (tcp_tx_train(t, &done, 0))
			break;
	}
	if (!t->dead && !t->sending && t->txq_head)
		pthread_cond_broadcast(&t->tx_cond);
	pthread_mutex_unlock(&t->lock);
	tcp_tx_free_list(t, done);
}

/* Queues frame x and sends it, or holds it for the next train.  Lock held; released. */
static void tx_submit_locked(struct tcp_ep *t, struct txi *x)
{
	struct gdx_device *dev;

	tcp_tx_payload(x, &x->pp, &dev, &x->plen);
	x->dev = dev;
	x->path = dev ? TXP_STREAM : x->plen <= DIRECT_MAX ? TXP_TRAIN : TXP_HOST;
	if (x->h.type == F_READ_RESP && x->plen) {
		/* read out of the region when sent: a write to it takes the bytes first */
		x->ans = 1;
		x->an_next = t->ans_head;
		if (t->ans_head)
			t->ans_head->an_prev = x;
		t->ans_head = x;
	}
	sr_queue(t, x);
	/* the requests that may go MSG_ZEROCOPY (tcp_tx_host): a device payload never does */
	if (x->req && x->path == TXP_HOST)
		t->big_id = x->h.id;
	Q_PUSH(x, &t->txq_head, &t->txq_tail);
	t->qlen++;
	/*
	 * One held frame at a time: a peer that streams sends waits for their
	 * answers to post more, so a second goes at once, and the first with it.
	 */
	if (x->hold && atomic_load_explicit(&t->resp_held, memory_order_relaxed))
		x->hold = 0;
	if (x->hold) {
		int wake = t->rx_untimed;

		atomic_fetch_add_explicit(&t->resp_held, 1, memory_order_relaxed);
		t->resp_holds++;
		/* the receive thread sleeps untimed: it sleeps again for at most resp_hold_ms */
		t->rx_untimed = 0;
		pthread_mutex_unlock(&t->lock);
		if (wake)
			tcp_rx_wakeup(t);
		return;
	}
	if (x->req && x->path == TXP_TRAIN && t->on_wire > 0 && !t->rx_stalled && !t->w_reader &&
	    !t->sending && t->txq_head->path == TXP_TRAIN && t->qlen < TX_TRAIN_IOV / 2) {
		/*
		 * Requests are on the wire: their answers bring the receive thread
		 * by, and it sends what is queued before it reads them.  So this
		 * one may wait for the next train, sent then or when the poster
		 * next polls or waits on its CQ, whichever comes first: a burst of
		 * posts costs one write and one wake-up of the peer instead of one
		 * each.  The peer runs requests in order, so none of them could have
		 * started before the requests on the wire are done with anyway.
		 */
		atomic_store_explicit(&t->held, 1, memory_order_release);
		pthread_mutex_unlock(&t->lock);
		return;
	}
	if (x->req && !t->sending && x == sr_direct(t) &&
	    !gdx_stage_seen(t->tx_lane, x->sr_end, x->ticket)) {
		/*
		 * The small device payload just posted and staged: its copy lands
		 * in microseconds, and a wake-up of the transmit thread costs more.
		 * The lock is dropped meanwhile (x may be sent and freed by then:
		 * its mark and ticket are copied); tx_gather looks again.
		 */
		uint64_t end = x->sr_end, until = gdx_now_ns() + SR_DIRECT_NS;
		uint32_t ticket = x->ticket;
		struct gdx_stage *tx = t->tx_lane;

		pthread_mutex_unlock(&t->lock);
		while (!gdx_stage_seen(tx, end, ticket) && gdx_now_ns() < until)
			gdx_cpu_relax();
		pthread_mutex_lock(&t->lock);
	}
	tx_push_locked(t);
}

/* Sends the held frames, if any: requests, and with resp a held response. */
static void tx_kick(struct tcp_ep *t, int resp)
{
	if (!atomic_load_explicit(&t->held, memory_order_acquire) &&
	    !(resp && atomic_load_explicit(&t->resp_held, memory_order_acquire)))
		return;
	pthread_mutex_lock(&t->lock);
	atomic_store_explicit(&t->held, 0, memory_order_relaxed);
	tx_push_locked(t);
}

/* Sends held requests, if any (the receive thread, before it reads their answers). */
void tcp_tx_kick(struct tcp_ep *t)
{
	tx_kick(t, 0);
}

/*
 * Sends a held response, and what is held with it (the receive thread's
 * timed park, or a stall; a sleeper; a disconnect).
 */
void tcp_resp_push(struct tcp_ep *t)
{
	tx_kick(t, 1);
}

/*
 * A poll of the CQ sends held requests, and a held response once the CQ is
 * empty: while completions wait, the caller has yet to look at the message
 * the response answers, and to post what would carry it.
 */
int tcp_progress(void *priv)
{
	struct tcp_ep *t = priv;
	int resp = atomic_load_explicit(&t->resp_held, memory_order_acquire) != 0;
	int lent = __atomic_load_n(&t->w_lent, __ATOMIC_RELAXED);
	int empty = (resp || lent) && !gdx_xport_cq_count(t->fe->cq);

	tx_kick(t, resp && empty);
	/* nothing to look at, nothing posted since the wait: the lent socket goes back */
	if (lent && resp && empty)
		tcp_lend_end(t, 1);
	return 0;
}

/* Queues x unless the endpoint died, in which case x is dropped. */
static int tx_submit(struct tcp_ep *t, struct txi *x)
{
	pthread_mutex_lock(&t->lock);
	if (t->dead) {
		pthread_mutex_unlock(&t->lock);
		tcp_tx_free(t, x);
		return -ECONNRESET;
	}
	tx_submit_locked(t, x);
	return 0;
}

/* Queues x, which carries n answers to the peer (receive thread). */
int tcp_ans_submit(struct tcp_ep *t, struct txi *x, unsigned n)
{
	unsigned held = atomic_fetch_add_explicit(&t->ans_held, n, memory_order_relaxed) + n;

	x->nans = n;
	/* this thread alone raises it */
	if (held > gdx_counter_get(&t->ctr[C_ANS_PEAK]))
		atomic_store_explicit(&t->ctr[C_ANS_PEAK].v, held, memory_order_relaxed);
	return tx_submit(t, x);
}

int tcp_post(void *priv, struct gdx_xport_req *req)
{
	struct tcp_ep *t = priv;
	struct qent *q = calloc(1, sizeof(*q));
	struct txi *x = NULL;

	if (!q)
		return -ENOMEM;
	q->req = req;
	/* device memory an endpoint thread will write (receives, reads) or read */
	if (tcp_dev_mem(req->buf.kind, req->buf.dev)) {
		int rx = req->op == GDX_XPORT_OP_RECV || req->op == GDX_XPORT_OP_READ;
		int ret = tcp_stage_prepare(t, req->buf.dev, rx, !rx);

		if (ret) {
			free(q);
			return ret;
		}
	}
	if (req->op != GDX_XPORT_OP_RECV) {
		x = calloc(1, sizeof(*x));
		if (!x) {
			free(q);
			return -ENOMEM;
		}
	}
	pthread_mutex_lock(&t->lock);
	if (t->dead) {
		pthread_mutex_unlock(&t->lock);
		free(q);
		free(x);
		return GDX_EDISCONNECTED;
	}
	if (req->op == GDX_XPORT_OP_RECV) {
		struct qent *u = t->unexp_head;

		if (!u || t->kept_rx) {
			Q_PUSH(q, &t->recv_head, &t->recv_tail);
			if (u)
				tcp_kept_kick_locked(t);
			else
				pthread_cond_broadcast(&t->rx_cond);
			pthread_mutex_unlock(&t->lock);
			return 0;
		}
		/* A message arrived before this receive: hand it over now. */
		q_pop(&t->unexp_head, &t->unexp_tail);
		if (!u->is_imm)
			t->unexpected_bytes -= u->len;
		pthread_cond_broadcast(&t->rx_cond);
		pthread_mutex_unlock(&t->lock);
		free(q);
		tcp_deliver_unexpected(req, u);
		return 0;
	}
	q->data = (void *)(uintptr_t)++t->next_id;
	x->req = req;
	x->q = q;
	x->h.id = t->next_id;
	x->h.len = req->buf.len;
	x->h.raddr = req->raddr;
	x->h.key = req->key;
	switch (req->op) {
	case GDX_XPORT_OP_SEND:
		x->h.type = F_SEND;
		break;
	case GDX_XPORT_OP_WRITE_IMM:
		x->h.flags = FL_IMM;
		x->h.imm = req->imm;
		/* fall through */
	case GDX_XPORT_OP_WRITE:
		x->h.type = F_WRITE;
		break;
	default:
		x->h.type = F_READ;
		break;
	}
	Q_PUSH(q, &t->outst_head, &t->outst_tail);
	tx_submit_locked(t, x);
	return 0;
}
