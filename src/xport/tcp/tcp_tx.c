/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, the transmit thread (tcp_int.h): sends the frames the
 * posting threads leave in the queue (large ones, those of device memory,
 * the stage ring's), copying device payloads out as it goes, and frees the
 * frames sent.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "xport/tcp/tcp_int.h"

/*
 * The receive side found the agent failed and halted it (tcp_on_halt; its
 * workers have stopped, no copy of it runs any more): the endpoint goes on
 * without it.  Device payloads are sent the stream path's way from here on
 * (the transmit lane, synchronous now: tcp_tx_sync_lane), as with the knob
 * off: queued ring frames whose copies did not land
 * (late ones, or staged and never made) become such frames again; those whose
 * copies landed go out of the ring as they are.  Ring frames the transmit
 * thread took already have the copies it does not find landed made again by
 * the transmit lane (sr_redo, tx_chunk_wait).  Receive thread.
 */
void tcp_tx_drop_agent(struct tcp_ep *t)
{
	pthread_mutex_lock(&t->lock);
	__atomic_store_n(&t->tx_noagent, 1, __ATOMIC_RELEASE);
	for (struct txi *x = t->txq_head; x; x = x->next) {
		struct gdx_device *dev;
		size_t n;

		/*
		 * A going frame is left to finish from the ring: a poster writes a
		 * ring frame only once its copy was seen, and leaves it on the queue,
		 * going, while it writes with the lock dropped or after a short write
		 * until the transmit thread takes it; its bytes may be partly out.
		 */
		if (x->path != TXP_RING || txi_going(x) ||
		    (x->state == TXS_STAGED && gdx_stage_seen(t->tx_lane, x->sr_end, x->ticket)))
			continue;
		/* not going: x->req is there; a read answer not settled (tcp_ans_settle) */
		tcp_tx_payload(x, &x->pp, &dev, &n);
		x->path = TXP_STREAM;
		txi_set(x, TXS_QUEUED);
		x->acopy = 0;
	}
	t->sr_late = NULL;
	pthread_mutex_unlock(&t->lock);
}

/* Says once that the agent failed the transmit side, whose connection then ends. */
static int tx_agent_failed(struct tcp_ep *t, const struct gdx_device *dev, int err)
{
	if (!t->tx_agent_err)
		GDX_ERR(SUBSYS, "%s: copy agent failed (%s) copying device memory to send: the "
			"connection ends", gdx_device_name(dev), gdx_strerror(err));
	t->tx_agent_err = err;
	return err;
}

/*
 * A chunk of a device payload on its way out: n bytes of frame x's payload
 * at off, from src, copied into dst, room of lane to send from (the
 * transmit lane for a ring frame, else tcp_tx_sync_lane's; end: given back
 * once the chunk is sent).  mark, ticket: its copy on the lane (0: none, made
 * out of x's own copy).
 */
struct tx_chunk {
	struct gdx_stage *lane;
	void *dst;
	const void *src;
	size_t off, n;
	uint64_t end, mark;
	uint32_t ticket;
};

/*
 * Starts the copy of chunk c into room of its lane: for a ring frame the
 * transmit lane (the ring is the frame's alone, t->sr_whole), else the
 * stream path's (tcp_tx_sync_lane); or out of x's own copy of the bytes
 * where a write to the region made one (tcp_ans_settle; a plain memcpy
 * then).  Posted under the lock, the lanes' producer's, so that the receive
 * thread knows which bytes were copied (x->cnext) and which copies to wait
 * for (the lane's last).  Once the receive side halted the agent
 * (tcp_on_halt) the transmit lane makes the copy synchronously, after those
 * the agent owed.  -EAGAIN: no room (nothing taken; tx_staged_runs waits
 * for the run before to go out).
 */
static int tx_copy(struct tcp_ep *t, struct txi *x, struct gdx_device *dev, struct tx_chunk *c)
{
	struct gdx_stage *lane = x->path == TXP_RING ? t->tx_lane : tcp_tx_sync_lane(t, dev);
	struct gdx_stage_span sp;
	int ret;

	c->lane = lane;
	c->end = c->mark = 0;
	if (!lane) {
		GDX_ERR(SUBSYS, "%s: send out of memory not set up for it", gdx_device_name(dev));
		return -ENOMEM;
	}
	pthread_mutex_lock(&t->lock);
	/* the receive thread is taking the bytes from cnext on: they may come from x->snap */
	while (x->snapping)
		pthread_cond_wait(&t->tx_cond, &t->lock);
	/* a device lane learns which copies landed: marks come back */
	if (lane != t->tx_lane)
		gdx_stage_progress(lane);
	/* GDX_EDISCONNECTED: the connection ended */
	ret = gdx_stage_reserve(lane, c->n, GDX_STAGE_NOWAIT, &sp);
	if (!ret) {
		c->dst = sp.p;
		c->n = sp.n;
		c->end = sp.end;
	}
	if (!ret && x->snap && c->off >= x->snap_off) {
		memcpy(c->dst, x->snap + (c->off - x->snap_off), c->n);
	} else if (!ret) {
		ret = gdx_stage_post(lane, &sp, (void *)(uintptr_t)c->src);
		if (!ret) {
			c->mark = sp.end;
			c->ticket = gdx_stage_ticket(lane);
			x->acopy |= x->path == TXP_RING;
			x->cnext = c->off + c->n;
		}
	}
	pthread_mutex_unlock(&t->lock);
	if (ret && x->path == TXP_RING && ret != GDX_EDISCONNECTED)
		return tx_agent_failed(t, dev, ret);
	return ret;
}

/*
 * The receive side halted the failed agent (tcp_on_halt) while this thread
 * waited for copies of the transmit lane up to mark: the lane makes those
 * the agent did not make again (REDO), out of their sources (not sent: x->req
 * is there; a read answer's region is as it was, tcp_ans_settle), as their
 * producer, under the lock (posters wait meanwhile: a fault's path).
 * Returns how many it made again, or the error.  Transmit thread.
 */
static int tx_redo(struct tcp_ep *t, uint64_t mark)
{
	int ret;

	pthread_mutex_lock(&t->lock);
	ret = gdx_stage_wait(t->tx_lane, mark);
	pthread_mutex_unlock(&t->lock);
	return ret;
}

/*
 * Waits for the copy tx_copy started of chunk c: on the lane by its ticket,
 * without the lock.  One the agent did not make because the receive side
 * halted it is made again (tx_redo).  Else an agent's error ends the
 * connection, and frames whose copies may still be in flight are kept until
 * the agent has stopped (tx_let_go).
 */
static int tx_chunk_wait(struct tcp_ep *t, struct gdx_device *dev, const struct tx_chunk *c)
{
	int ret;

	/* made out of x's own copy */
	if (!c->mark)
		return 0;
	ret = gdx_stage_watch_post(c->lane, c->mark, c->ticket);
	if (!ret || ret == GDX_EDISCONNECTED || c->lane != t->tx_lane)
		return ret;
	if (!tcp_tx_noagent(t))
		return tx_agent_failed(t, dev, ret);
	ret = tx_redo(t, c->mark);
	if (ret > 0)
		gdx_counter_add(&t->ctr[C_TX_RECOPIED], (uint64_t)ret);
	return ret < 0 ? ret : 0;
}

/* Room of lane up to end is sent: it goes back to the lane. */
static void tx_sent(struct tcp_ep *t, struct gdx_stage *lane, uint64_t end)
{
	if (!end)
		return;
	pthread_mutex_lock(&t->lock);
	gdx_stage_release(lane, end);
	pthread_mutex_unlock(&t->lock);
}

/*
 * Sends frame x whose payload is n bytes of device memory, staged a stage
 * buffer at a time, two in flight: through the transmit lane's ring (x is a
 * late ring frame and has the ring to itself, t->sr_whole), or the stream
 * path's lane (tcp_tx_sync_lane), whose ring is empty when a frame is
 * taken (tx_staged_runs gave back its room).
 */
static int tx_device(struct tcp_ep *t, struct txi *x, const void *src, struct gdx_device *dev,
		     size_t n)
{
	const char *s = src;
	struct tx_chunk c[2];
	size_t done = 0;
	int i = 0, ret;

	ret = tcp_tx_host(t, x, NULL, 0);
	if (ret)
		return ret;
	c[0] = (struct tx_chunk){ .src = s, .n = GDX_MIN((size_t)STAGE_SIZE, n) };
	ret = tx_copy(t, x, dev, &c[0]);
	if (!ret)
		ret = tx_chunk_wait(t, dev, &c[0]);
	while (!ret && done < n) {
		size_t next = done + c[i].n, sent = 0;
		struct iovec v = { c[i].dst, c[i].n };

		if (next < n) {
			c[i ^ 1] = (struct tx_chunk){ .src = s + next, .off = next,
						      .n = GDX_MIN((size_t)STAGE_SIZE, n - next) };
			ret = tx_copy(t, x, dev, &c[i ^ 1]);
		}
		while (!ret && v.iov_len) {
			ret = tcp_send_iov(t, &v, 1, 0, &sent);
			v.iov_base = (char *)v.iov_base + sent;
			v.iov_len -= sent;
		}
		if (!ret)
			tx_sent(t, c[i].lane, c[i].end);
		if (!ret && next < n)
			ret = tx_chunk_wait(t, dev, &c[i ^ 1]);
		done = next;
		i ^= 1;
	}
	/*
	 * The header promised n bytes: a failed device copy cannot be reported in
	 * band, so the connection is dropped (the caller marks it dead).
	 */
	return ret;
}

/* Where frame x's payload is: host memory (dev NULL) or device memory. */
void tcp_tx_payload(struct txi *x, const void **p, struct gdx_device **dev, size_t *n)
{
	*p = NULL;
	*dev = NULL;
	*n = 0;
	if (x->h.type == F_READ)
		return;
	if (x->req) {
		const struct gdx_xport_buf *b = &x->req->buf;

		*p = b->p;
		*n = b->len;
		if (b->kind != GDX_MEM_HOST && b->kind != GDX_MEM_PINNED)
			*dev = b->dev;
		return;
	}
	if (x->extra) {
		*p = x->extra;
		*n = x->extra_len;
		return;
	}
	*p = x->data;
	*n = x->h.len;
	*dev = x->dev;
}

/*
 * Frees frame x (lock not held, or x is on no answer list); one whose bytes
 * the receive thread is copying is freed by that thread once it is done
 * (tcp_ans_settle).
 */
void tcp_tx_free(struct tcp_ep *t, struct txi *x)
{
	if (__atomic_load_n(&x->ans, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&t->lock);
		if (x->snapping) {
			txi_set(x, TXS_ORPHAN);
			pthread_mutex_unlock(&t->lock);
			return;
		}
		tcp_ans_unlink(t, x);
		pthread_mutex_unlock(&t->lock);
	}
	if (x->k)
		gdx_xport_rkey_put(x->k);
	if (x->nans)
		tcp_ans_gone(t, x->nans);
	if (x->hold)
		atomic_fetch_sub_explicit(&t->resp_held, 1, memory_order_release);
	if (x->snap)
		atomic_fetch_sub_explicit(&t->snap_held, x->plen - x->snap_off,
					  memory_order_relaxed);
	free(x->extra);
	free(x->snap);
	free(x);
}

void tcp_tx_free_list(struct tcp_ep *t, struct txi *x)
{
	while (x) {
		struct txi *next = x->next;

		tcp_tx_free(t, x);
		x = next;
	}
}

/*
 * Frees list, frames whose device copies may still be in flight after a
 * failure: they must land first (the frames hold the memory they read, a
 * region's key), or, where the agent failed, the frames are kept until it has
 * stopped (tx_hold, freed after tcp_stage_stop).  A failed agent's copies are not
 * all below the lane's last mark: a post that failed to launch the worker has
 * none, yet a worker still running may make its copy.
 */
static void tx_let_go(struct tcp_ep *t, struct gdx_device *dev, struct txi *list)
{
	struct txi **tail = &t->tx_hold;

	if (!list)
		return;
	if (!t->tx_agent_err && !tcp_tx_copies_wait(t, dev)) {
		tcp_tx_free_list(t, list);
		return;
	}
	while (*tail)
		tail = &(*tail)->next;
	*tail = list;
}

/*
 * Frames the tx thread stages together: device memory payloads that fit in a
 * stage buffer (larger ones go through tx_device, chunk by chunk).
 */
static int staged_frame(const struct txi *x, const struct gdx_device *dev)
{
	return x->dev == dev && x->path != TXP_RING && x->plen <= STAGE_SIZE;
}

/*
 * Moves the frame at the head of the queue to the end of a list being sent
 * (*tail: where it goes); a read counts as in flight from here, a request in
 * *nreq.  Lock held.
 */
static void tx_take_head(struct tcp_ep *t, struct txi ***tail, long *nreq)
{
	struct txi *x = t->txq_head;

	tcp_tx_going(t, x);
	*nreq += x->req != NULL;
	t->txq_head = x->next;
	if (!t->txq_head)
		t->txq_tail = NULL;
	t->qlen--;
	x->next = NULL;
	**tail = x;
	*tail = &x->next;
}

/*
 * Takes the run of frames at the head of the queue that can go in one staged
 * train: device memory payloads of dev (read data, sends and writes; as much
 * as one stage buffer holds) and small host frames, up to a fenced request
 * or a read answer still read out of a host region (the run's send blocks:
 * tcp_tx_train sends that one).  *nreq: the requests among them.  Lock held.
 */
static struct txi *tx_take_staged(struct tcp_ep *t, struct gdx_device *dev, long *nreq)
{
	struct txi *head = NULL, **tail = &head;
	size_t staged = 0;
	int iov = 0;

	*nreq = 0;
	while (t->txq_head && iov + 2 <= TX_TRAIN_IOV) {
		struct txi *x = t->txq_head;

		if ((x->path != TXP_TRAIN && !staged_frame(x, dev)) || tcp_tx_blocked(t, x) ||
		    (x->dev && staged + x->plen > STAGE_SIZE) || (x->path == TXP_TRAIN && x->ans))
			break;
		if (x->dev)
			staged += x->plen;
		tx_take_head(t, &tail, nreq);
		iov += 2;
	}
	return head;
}

/*
 * Posts the device copies of a run of frames taken by tx_take_staged, from
 * *from on, into room of the stream path's lane (no wait): a burst of small
 * reads, sends or writes of device memory costs one wait, not one each.
 * *lane, *end: the lane and the end of the room taken, given back once the
 * run is sent.  -EAGAIN: no room for *from, which the run before holds
 * (tx_staged_runs posts the rest once that one is out).
 */
static int tx_stage(struct tcp_ep *t, struct txi **from, struct gdx_device *dev,
		    struct gdx_stage **lane, uint64_t *end)
{
	for (; *from; *from = (*from)->next) {
		struct txi *x = *from;
		struct tx_chunk c;
		int ret;

		if (!x->dev || !x->plen)
			continue;
		/* not ring frames: through the stream path's lane */
		c = (struct tx_chunk){ .src = x->pp, .n = x->plen };
		ret = tx_copy(t, x, dev, &c);
		if (ret)
			return ret;
		x->pp = c.dst;
		*lane = c.lane;
		*end = c.end;
	}
	return 0;
}

/*
 * Sends a staged run (its copies landed) as one train.  Once the last byte
 * is out the peer may answer and a request be freed: nothing here looks at
 * x->req.
 */
static int tx_send_staged(struct tcp_ep *t, struct txi *list, const struct txi *stop)
{
	const size_t hl = sizeof(struct hdr);
	struct iovec iov[TX_TRAIN_IOV], *v = iov;
	int cnt = 0, ret;

	for (struct txi *x = list; x != stop; x = x->next) {
		if (x->off < hl)
			iov[cnt++] = (struct iovec){ (char *)&x->h + x->off, hl - x->off };
		if (x->plen) {
			size_t o = x->off > hl ? x->off - hl : 0;

			iov[cnt++] = (struct iovec){ (char *)x->pp + o, x->plen - o };
		}
	}
	while (cnt) {
		size_t sent = 0;

		ret = tcp_send_iov(t, v, cnt, 0, &sent);
		if (ret)
			return ret;
		v = gdx_iov_advance(v, &cnt, sent);
	}
	return 0;
}

/* Whether the head of the queue starts a staged run of dev's.  Lock held. */
static int staged_next(struct tcp_ep *t, struct gdx_device *dev)
{
	struct txi *x = t->txq_head;

	return !t->dead && x && x->path != TXP_TRAIN && staged_frame(x, dev) &&
	       !tcp_tx_blocked(t, x);
}

/*
 * Sends staged runs of dev's while the queue starts with one, two in the
 * lane's ring at a time: the copies of the next run are enqueued before the
 * current one goes out, so they run while it is on the socket, and the wait
 * before a run is sent is for its own copies only.  A run's room goes back
 * once it is sent; copies of the next run that found none (the transmit
 * lane's ring, two stage buffers, lent once the agent was dropped) are
 * posted then.  Called with the lock held and t->sending set; returns with
 * the lock held.
 */
static int tx_staged_runs(struct tcp_ep *t, struct gdx_device *dev)
{
	long nreq, nnext = 0;
	struct txi *cur = tx_take_staged(t, dev, &nreq), *next = NULL, *rest = cur;
	struct gdx_stage *lane = NULL;
	uint64_t end = 0, nend = 0;
	int owed = 0, ret;

	pthread_mutex_unlock(&t->lock);
	ret = tx_stage(t, &rest, dev, &lane, &end);
	while (cur) {
		if (!ret)
			ret = tcp_tx_sync(t, dev);
		if (!ret) {
			pthread_mutex_lock(&t->lock);
			next = staged_next(t, dev) ? tx_take_staged(t, dev, &nnext) : NULL;
			pthread_mutex_unlock(&t->lock);
			rest = next;
			nend = 0;
			ret = next ? tx_stage(t, &rest, dev, &lane, &nend) : 0;
			owed = ret == -EAGAIN;
			if (owed)
				ret = 0;
		}
		if (!ret)
			ret = tx_send_staged(t, cur, NULL);
		pthread_mutex_lock(&t->lock);
		t->on_wire += nreq;
		pthread_mutex_unlock(&t->lock);
		if (ret) {
			tx_let_go(t, dev, cur);
			tx_let_go(t, dev, next);
			break;
		}
		tx_sent(t, lane, end);
		tcp_tx_free_list(t, cur);
		cur = next;
		nreq = nnext;
		next = NULL;
		end = nend;
		if (owed)
			ret = tx_stage(t, &rest, dev, &lane, &end);
	}
	pthread_mutex_lock(&t->lock);
	return ret;
}

/*
 * ---- the stage ring -----------------------------------------------------------
 *
 * With a copy agent, device payloads of up to STAGE_SIZE go out of the stage
 * ring, the transmit lane's (two stage buffers of pinned memory), that the
 * agent copies them into.  A frame's copy is posted when the frame is queued,
 * by the thread that queues it (a poster; the receive thread, for read
 * data), so it runs while the
 * frames ahead of it are sent, and the transmit thread waits only for the copy
 * of the frame it is about to send.  Room is taken in queue order and given
 * back, in the same order, once frames are sent: a frame that finds none (or
 * is larger than STAGE_SIZE, or fenced, or whose copy cannot be posted) is late, and
 * while a late frame is queued no other takes room when queued; the transmit
 * thread stages late frames as room comes back (tcp_sr_catch_up), and copies
 * itself only those that may not go early (tcp_sr_early), when it takes them.
 * All of it under t->lock, whose holder is thereby the lane's one producer;
 * a frame's copy is waited for without it, by its ticket (gdx_stage_seen).
 */

/*
 * Whether ring frame x may be staged before the transmit thread takes it: not
 * one larger than a stage buffer (sent through the ring's halves, the ring
 * empty), nor a fenced one, whose payload may be what an earlier read brings:
 * it is copied once the fence lets it go (rule 5), by the transmit thread.
 */
int tcp_sr_early(const struct txi *x)
{
	return x->plen <= STAGE_SIZE && !(x->req && (x->req->flags & GDX_XPORT_FENCE));
}

/* The late ring frame queued behind late frame x, if any.  Lock held. */
struct txi *tcp_sr_late_next(const struct txi *x)
{
	do
		x = x->next;
	while (x && x->state != TXS_LATE);
	return (struct txi *)x;
}

/*
 * Room came back: stages the late frames, from the first on, in queue order,
 * as far as room and descriptors go, up to one that may not go early.  So
 * their copies run while the frames ahead of them are sent, and a frame that
 * once found no room does not leave every frame behind it late until the
 * transmit thread reaches them.  The transmit lane's producer (the transmit
 * thread, or a poster that sent a ring frame: tcp_tx_train), lock held.
 */
void tcp_sr_catch_up(struct tcp_ep *t, struct gdx_stage *tx)
{
	struct txi *x;

	while (tx && !t->dead && (x = t->sr_late) && tcp_sr_early(x) && !x->snapping &&
	       !tcp_sr_stage(x, tx)) {
		t->sr_late = tcp_sr_late_next(x);
		gdx_counter_add(&t->ctr[C_SR_CAUGHT_UP], 1);
	}
}

/* Whether x goes in the ring's trains: a small host frame, or a ring frame that fits. */
static int sr_train_frame(const struct txi *x)
{
	return x->path == TXP_TRAIN || (x->path == TXP_RING && x->plen <= STAGE_SIZE);
}

/*
 * Takes a train off the head of the queue: small host frames and ring frames
 * (a late one staged now: one that may not go early, tcp_sr_early), up to a fenced
 * request or a read answer still read out of a host region (as
 * tx_take_staged), as far as there is room.  *nreq: the requests among them.
 * Lock held.
 */
static struct txi *sr_take(struct tcp_ep *t, struct gdx_device *dev, struct gdx_stage *tx,
			   long *nreq, int *err)
{
	struct txi *head = NULL, **tail = &head;
	int n = 0;

	*nreq = 0;
	*err = 0;
	while (t->txq_head && n < TX_TRAIN_IOV / 2) {
		struct txi *x = t->txq_head;

		if (!sr_train_frame(x) || tcp_tx_blocked(t, x) || (x->path == TXP_TRAIN && x->ans))
			break;
		if (x->state == TXS_LATE) {
			int r = tcp_sr_stage(x, tx);

			/* no room: the frames taken are sent first, and give theirs back */
			if (r == -EAGAIN && head)
				break;
			if (r) {
				/*
				 * With nothing ahead, room is there and every
				 * descriptor is done, unless the agent failed.
				 */
				*err = tx_agent_failed(t, dev, r == -EAGAIN ? GDX_EDRIVER : r);
				break;
			}
			t->sr_late = tcp_sr_late_next(x);
			gdx_counter_add(&t->ctr[C_SR_TX_COPIED], 1);
			/* the frames behind it copy while it is sent */
			tcp_sr_catch_up(t, tx);
		}
		tx_take_head(t, &tail, nreq);
		n++;
	}
	return head;
}

/* sr_send's: the copies the halted agent owed the train, made again (tx_redo). */
static int sr_redo(struct tcp_ep *t, const struct txi *list)
{
	int ret = tx_redo(t, list->sr_end);

	if (ret > 0)
		gdx_counter_add(&t->ctr[C_SR_REDONE], (uint64_t)ret);
	return ret < 0 ? ret : 0;
}

/*
 * Sends a train taken by sr_take: each run of it once the copy of the run's
 * first frame has landed, the run reaching as far as the copies that have
 * landed too (each seen by its ticket, without the lock).  Once a run is
 * sent the peer has its bytes: its room goes back, and late frames take it
 * (tcp_sr_catch_up) while the rest of the train goes out.  The agent failed and
 * the receive side halted it (tcp_on_halt) while the train waited: the
 * copies it did not make are made again into their room (sr_redo).
 */
static int sr_send(struct tcp_ep *t, struct txi *list, struct gdx_stage *tx,
		   struct gdx_device *dev)
{
	while (list) {
		struct txi *end = list->next, *w = list;
		uint64_t room = 0;
		int ret;

		/* a held response waits for the frame it rides with (tcp_resp_hold) */
		while (w->hold && w->next)
			w = w->next;
		ret = txi_staged(w) ? gdx_stage_watch_post(t->tx_lane, w->sr_end, w->ticket) : 0;

		if (ret && ret != GDX_EDISCONNECTED)
			ret = tcp_tx_noagent(t) ? sr_redo(t, list) : tx_agent_failed(t, dev, ret);
		if (ret)
			return ret;
		while (end && (!txi_staged(end) || gdx_stage_seen(t->tx_lane, end->sr_end, end->ticket)))
			end = end->next;
		ret = tx_send_staged(t, list, end);
		if (ret)
			return ret;
		for (; list != end; list = list->next)
			if (txi_staged(list))
				room = list->sr_end;
		if (room) {
			pthread_mutex_lock(&t->lock);
			gdx_stage_release(t->tx_lane, room);
			tcp_sr_catch_up(t, tx);
			pthread_mutex_unlock(&t->lock);
		}
	}
	return 0;
}

/*
 * Sends trains of ring frames (and the small host frames between them) while
 * the queue starts with one.  Called with the lock held and t->sending set;
 * returns with the lock held.
 */
static int tx_ring_runs(struct tcp_ep *t, struct gdx_device *dev)
{
	struct gdx_stage *tx = tcp_tx_lane(t, dev);
	int ret = 0;

	while (!ret && !t->dead && t->txq_head &&
	       (t->txq_head->path == TXP_RING || tcp_held_lead(t)) &&
	       sr_train_frame(t->txq_head) && !tcp_tx_blocked(t, t->txq_head)) {
		long nreq;
		struct txi *list = sr_take(t, dev, tx, &nreq, &ret);

		if (!list)
			break;
		pthread_mutex_unlock(&t->lock);
		if (!ret)
			ret = sr_send(t, list, tx, dev);
		if (ret) {
			tx_let_go(t, dev, list);
			pthread_mutex_lock(&t->lock);
			break;
		}
		tcp_tx_free_list(t, list);
		pthread_mutex_lock(&t->lock);
		t->on_wire += nreq;
	}
	return ret;
}

void *tcp_tx_main(void *arg)
{
	struct tcp_ep *t = arg;
	struct txi *done = NULL;

	pthread_setname_np(pthread_self(), "gdx-tcp-tx");
	pthread_mutex_lock(&t->lock);
	for (;;) {
		const void *p;
		struct gdx_device *dev;
		struct txi *x;
		size_t n;
		int ret, is_req, late;

		/*
		 * A held response alone is left for what will carry it
		 * (tcp_resp_hold): a post, a poll, a sleeper, the receive thread;
		 * not one begun, whose rest the socket did not take.
		 */
		while (!t->dead && (t->sending || !t->txq_head || tcp_tx_blocked(t, t->txq_head) ||
				    (t->txq_head->hold && !t->txq_head->next && !t->txq_head->off))) {
			if (done) {
				pthread_mutex_unlock(&t->lock);
				tcp_tx_free_list(t, done);
				done = NULL;
				pthread_mutex_lock(&t->lock);
				continue;
			}
			pthread_cond_wait(&t->tx_cond, &t->lock);
		}
		if (t->dead)
			break;
		/* held responses ahead of a device frame go in its train */
		x = tcp_held_lead(t);
		if (x && !(x->path == TXP_RING ? sr_train_frame(x) : staged_frame(x, x->dev)))
			x = NULL;
		if (!x && t->txq_head->path == TXP_TRAIN) {
			if (tcp_tx_train(t, &done, 1) == -EAGAIN)
				tcp_tx_wait_out(t);
			continue;
		}
		if (!x)
			x = t->txq_head;
		/* device payloads of a stage buffer at most: the stage ring, else the stream path's lane */
		if ((x->path == TXP_RING && sr_train_frame(x)) ||
		    (x->dev && staged_frame(x, x->dev))) {
			t->sending = 1;
			ret = x->path == TXP_RING ? tx_ring_runs(t, x->dev) : tx_staged_runs(t, x->dev);
			t->sending = 0;
			if (ret)
				tcp_kill_conn(t, ret);
			continue;
		}
		/* a late ring frame (a large one) has the ring to itself */
		late = x->state == TXS_LATE;
		if (late) {
			t->sr_late = tcp_sr_late_next(x);
			t->sr_whole = 1;
		}
		t->txq_head = x->next;
		if (!t->txq_head)
			t->txq_tail = NULL;
		t->qlen--;
		tcp_tx_begin(t, x);
		/*
		 * What tx_submit_locked found of the payload (taken under the lock: a
		 * write may point a read answer at its own copy, tcp_ans_settle): once the
		 * bytes go out, the peer may answer and x->req be freed.
		 */
		p = x->pp;
		dev = x->dev;
		n = x->plen;
		is_req = x->req != NULL;
		if (late)
			gdx_counter_add(&t->ctr[C_SR_TX_COPIED], 1);
		pthread_mutex_unlock(&t->lock);
		if (dev)
			ret = tx_device(t, x, p, dev, n);
		else if (x->h.type == F_READ_RESP)
			ret = tcp_tx_answer(t, x, n);
		else
			ret = tcp_tx_host(t, x, p, n);
		if (ret && dev) {
			x->next = NULL;
			tx_let_go(t, dev, x);
		} else {
			tcp_tx_free(t, x);
		}
		pthread_mutex_lock(&t->lock);
		t->sending = 0;
		t->on_wire += is_req;
		if (is_req && !ret)
			gdx_counter_add(&t->ctr[C_TX_HANDED], 1);
		if (late) {
			t->sr_whole = 0;
			if (!ret)
				tcp_sr_catch_up(t, tcp_tx_lane(t, dev));
		}
		if (ret)
			tcp_kill_conn(t, ret);
	}
	pthread_mutex_unlock(&t->lock);
	tcp_tx_free_list(t, done);
	return NULL;
}
