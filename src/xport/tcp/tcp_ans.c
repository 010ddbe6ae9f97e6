/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, rule 1 (tcp_int.h): a write that arrives after a read
 * whose answer still comes out of the region has that answer's bytes taken
 * first.  The receive thread's, but for tcp_ans_unlink and tcp_ans_gone,
 * which whoever frees an answer calls.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "xport/tcp/tcp_int.h"

/* x's bytes no longer come out of its region: off the answer list.  Lock held. */
void tcp_ans_unlink(struct tcp_ep *t, struct txi *x)
{
	if (!x->ans)
		return;
	if (x->an_prev)
		x->an_prev->an_next = x->an_next;
	else
		t->ans_head = x->an_next;
	if (x->an_next)
		x->an_next->an_prev = x->an_prev;
	/* last: tcp_tx_free looks at it unlocked, and frees x once it sees 0 */
	__atomic_store_n(&x->ans, 0, __ATOMIC_RELEASE);
}

/* Answers were freed: a receive thread held back for them goes on once half are. */
void tcp_ans_gone(struct tcp_ep *t, unsigned n)
{
	unsigned was = atomic_fetch_sub_explicit(&t->ans_held, n, memory_order_relaxed);

	if (was > t->ans_max / 2 && was - n <= t->ans_max / 2) {
		pthread_mutex_lock(&t->ans_lock);
		pthread_cond_broadcast(&t->ans_cond);
		pthread_mutex_unlock(&t->ans_lock);
	}
}

/*
 * Gives read answer x its own copy of the payload bytes not yet taken out of
 * the region: those not handed to the socket yet (host memory), or whose
 * copies were not posted yet (device memory; x->cnext).  A frame no sender
 * took yet becomes a host frame; one the transmit thread took keeps going
 * its way, its copies from here made out of the copy (tx_copy).  sync: the
 * copies posted to the stream of x's device must land first.  Lock held, but
 * not across a device copy or stream wait: x is marked snapping meanwhile, so
 * that it stays as it is (no sender takes it or copies for it: tcp_tx_blocked,
 * tx_copy), and a tcp_tx_free of it meanwhile (TXS_ORPHAN) is left to the caller.
 */
static int ans_snap(struct tcp_ep *t, struct txi *x, int sync)
{
	const size_t hl = sizeof(x->h);
	size_t from = x->dev ? x->cnext : x->off > hl ? x->off - hl : 0, held;
	unsigned char *b = NULL;
	int ret = 0;

	if (from == x->plen && !sync)
		return 0;
	if (from < x->plen && atomic_load_explicit(&t->snap_held, memory_order_relaxed) +
				      (x->plen - from) > t->snap_max) {
		GDX_LOG(t->snap_said ? GDX_LOG_DEBUG : GDX_LOG_WARN, SUBSYS,
			"read answers not sent yet hold %zu bytes of copies a write over them made; "
			"%zu more would pass xport.tcp_answers_copy_max (%zu)",
			atomic_load(&t->snap_held), x->plen - from, t->snap_max);
		t->snap_said = 1;
		return -ENOBUFS;
	}
	/* what was taken already is not read again: the copy holds [from, plen) */
	if (from < x->plen && !(b = malloc(x->plen - from)))
		return -ENOMEM;
	if (x->dev) {
		x->snapping = 1;
		pthread_mutex_unlock(&t->lock);
		if (sync)
			ret = tcp_tx_sync(t, x->dev);
		if (!ret && b)
			ret = gdx_memcpy(x->dev, b, (const char *)x->data + from, x->plen - from);
		pthread_mutex_lock(&t->lock);
		x->snapping = 0;
		pthread_cond_broadcast(&t->tx_cond);
	} else {
		memcpy(b, (const char *)x->data + from, x->plen - from);
	}
	if (ret || !b || x->state == TXS_ORPHAN) {
		free(b);
		return ret;
	}
	x->snap = b;
	x->snap_off = from;
	/* only this thread raises it: the check above stays true */
	held = atomic_fetch_add_explicit(&t->snap_held, x->plen - from, memory_order_relaxed) +
	       (x->plen - from);
	if (held > gdx_counter_get(&t->ctr[C_COPIES_PEAK]))
		atomic_store_explicit(&t->ctr[C_COPIES_PEAK].v, held, memory_order_relaxed);
	/*
	 * A host frame's payload pointer: its senders read it at offsets of
	 * from on only (the bytes before went to the socket), which are in b.
	 */
	if (!x->dev) {
		x->pp = (const void *)((uintptr_t)b - from);
	} else if (!txi_going(x)) {
		/* no copy of it was made yet: from is 0 */
		x->pp = b;
		x->dev = NULL;
		x->path = x->plen <= DIRECT_MAX ? TXP_TRAIN : TXP_HOST;
		/* out of the ring's frames: the first late one may be the next */
		if (x->state == TXS_LATE) {
			if (t->sr_late == x)
				t->sr_late = tcp_sr_late_next(x);
			txi_set(x, TXS_QUEUED);
		}
	}
	return 0;
}

/*
 * Rule 1 for a write of n bytes at p (receive thread, before a byte of it
 * lands): read answers queued before it take what they still had to read of
 * an overlapping range now.  A frame no sender has touched gets a copy of its
 * own (ans_snap); one staged through the stage ring has its copy there once
 * that lands; one being sent keeps the bytes handed to the socket or copied
 * already, gets a copy of the rest, and the write waits for the sends and
 * copies under way to be done with the region.  Those never wait for the
 * peer or for this thread -- sends that read a region do not block
 * (tcp_tx_answer, tcp_tx_train), copies land by themselves -- so neither does the
 * write: waiting for the answers to go out could deadlock (a fenced request
 * ahead of them in the queue waits for answers that only this thread reads,
 * and the peer's receive thread may be waiting the same way for ours).
 * A frame whose agent copies are waited for leaves the list only once they
 * landed: if they do not (the agent failed), the write is refused and the
 * region stays as it was, for the transmit thread to copy them again out of
 * it once the agent is halted (tx_chunk_wait, sr_redo); so is a write over a
 * frame that the halted agent may still owe copies.  The lock is dropped
 * around device copies (ans_snap): frames may leave the list meanwhile, and
 * none joins it (only this thread queues answers).
 */
int tcp_ans_settle(struct tcp_ep *t, const void *p, uint64_t n)
{
	const uintptr_t lo = (uintptr_t)p, hi = lo + n;
	struct txi *orphans = NULL;
	int ret = 0, sends = 0, lane = 0, noagent = tcp_tx_noagent(t);
	uint64_t mark = 0;

	pthread_mutex_lock(&t->lock);
	for (struct txi *x = t->ans_head, *next; x && !ret; x = next) {
		next = x->an_next;
		if ((uintptr_t)x->data >= hi || (uintptr_t)x->data + x->plen <= lo)
			continue;
		if (txi_staged(x) && gdx_stage_seen(t->tx_lane, x->sr_end, x->ticket)) {
			tcp_ans_unlink(t, x);	/* its bytes are in the ring */
			continue;
		}
		if (x->acopy && noagent) {
			ret = gdx_stage_ctx_status(t->stage);
			ret = ret ? ret : GDX_EDRIVER;
			break;
		}
		if (x->acopy) {
			/* copies posted to the transmit lane: let go once they landed, below */
			lane = 1;
			x->settle = 1;
			if (txi_staged(x))
				continue;
		}
		sends |= !x->dev && txi_going(x);
		/* not the agent's copies: the transmit thread's, on the stream path's lane */
		ret = ans_snap(t, x, x->dev && x->cnext && !x->acopy);
		/* x stayed on the list; those after it may have left it */
		next = x->an_next;
		if (x->state == TXS_ORPHAN) {
			/* sent or let go meanwhile: done with the region */
			tcp_ans_unlink(t, x);
			x->next = orphans;
			orphans = x;
		} else if (!ret && !x->settle) {
			tcp_ans_unlink(t, x);
		}
	}
	while (sends && t->rd_busy) {
		t->rd_waiting++;
		pthread_cond_wait(&t->rd_cond, &t->lock);
		t->rd_waiting--;
	}
	/* the lane's last copy: its producer is the lock's holder */
	if (lane)
		mark = gdx_stage_mark(t->tx_lane);
	pthread_mutex_unlock(&t->lock);
	tcp_tx_free_list(t, orphans);
	if (!lane)
		return ret;
	if (!ret)
		ret = gdx_stage_watch(t->tx_lane, mark);
	pthread_mutex_lock(&t->lock);
	for (struct txi *x = t->ans_head, *next; x; x = next) {
		int settle = x->settle;

		/* before the unlink: tcp_tx_free may free x as soon as it sees ans clear */
		next = x->an_next;
		x->settle = 0;
		if (settle && !ret)
			tcp_ans_unlink(t, x);
	}
	pthread_mutex_unlock(&t->lock);
	return ret;
}
