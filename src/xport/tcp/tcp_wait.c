/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, the CQ waiter (tcp_int.h): a caller sleeping in
 * gdx_xport_cq_wait takes the socket from a parked receive thread and
 * completes the answers it reads itself.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/util.h"
#include "xport/tcp/tcp_int.h"

/*
 * A CQ waiter holding the socket: reads what is there without blocking and
 * completes the answers that carry no payload, in order, up to the first
 * frame it leaves to the receive thread.
 */
static void w_read(struct tcp_ep *t)
{
	for (int more = 1;; ) {
		ssize_t n;

		while (t->rlen - t->rpos >= sizeof(struct hdr)) {
			struct qent *q;
			struct hdr h;
			int st;

			memcpy(&h, t->rbuf + t->rpos, sizeof(h));
			if (h.len || (h.type != F_RESP && h.type != F_READ_RESP))
				return;
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
				return;
			t->rpos += sizeof(h);
			gdx_xport_complete(q->req, h.status, h.status ? 0 : q->req->buf.len);
			free(q);
		}
		if (!more)
			return;
		if (t->rpos == t->rlen) {
			t->rpos = t->rlen = 0;
		} else if (t->rpos) {
			memmove(t->rbuf, t->rbuf + t->rpos, t->rlen - t->rpos);
			t->rlen -= t->rpos;
			t->rpos = 0;
		}
		do
			n = recv(t->fd, t->rbuf + t->rlen, RBUF_SIZE - t->rlen, MSG_DONTWAIT);
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
			return;
		t->rlen += (size_t)n;
		/* Less than asked for: the socket was empty, no need to ask again. */
		more = t->rlen == RBUF_SIZE;
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
		t->w_exp = r != t->w_mark ? GDX_MIN(t->w_exp + 1, 6) : 0;
		t->w_skip = (1u << t->w_exp) - 1;
	}
	t->w_took = 0;
	if (t->w_skip) {
		t->w_skip--;
		return;
	}
	t->w_took = 1;
	t->w_mark = r;
	t->w_reader = 1;
	t->w_tid = pthread_self();
	w_move(t, t->rx_epfd, t->w_epfd);
}

/*
 * A caller of gdx_xport_cq_wait goes to sleep (sleeping) or has woken.  While
 * answers are due and the receive thread is parked between frames, the
 * sleeper takes the socket: the answers then wake it alone, not the receive
 * thread and, through it, the sleeper.
 */
void tcp_wait(void *priv, int sleeping)
{
	struct tcp_ep *t = priv;
	int dead;

	pthread_mutex_lock(&t->lock);
	if (sleeping) {
		/*
		 * Only while every request awaiting an answer went in small trains:
		 * large ones may raise MSG_ZEROCOPY notifications, each a spurious
		 * wake-up of the sleeper, and their transfer time dwarfs a wake-up.
		 */
		if (!t->w_reader && !t->dead && t->rx_parked && t->rpos == t->rlen &&
		    t->on_wire > 0 && (uint64_t)(uintptr_t)t->outst_head->data > t->big_id)
			w_take(t);
		pthread_mutex_unlock(&t->lock);
		return;
	}
	if (!t->w_reader || !pthread_equal(t->w_tid, pthread_self())) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	dead = t->dead;
	pthread_mutex_unlock(&t->lock);
	/* rbuf and the socket are this thread's until it hands them back. */
	if (!dead)
		w_read(t);
	pthread_mutex_lock(&t->lock);
	t->w_reader = 0;
	w_move(t, t->w_epfd, t->rx_epfd);
	if (t->rlen > t->rpos)
		tcp_rx_wakeup(t);
	pthread_mutex_unlock(&t->lock);
}
