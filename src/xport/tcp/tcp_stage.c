/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, staging of device memory (tcp_int.h), the code that
 * src/mem/stage replaces: the receive ring and its FIFO of deferred effects
 * (the receive thread's), the kept ring, the stagers, the stage ring's room
 * and copies (whoever holds t->lock), the waits for the copy agent's rings
 * (the thread each function names).
 */

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "xport/tcp/tcp_int.h"

static void stager_fini(struct stager *st)
{
	if (!st->dev)
		return;
	gdx_stream_destroy(st->s);
	for (int i = 0; i < 2 && !st->lent; i++)
		if (st->b[i])
			gdx_pinned_free(st->dev, st->b[i]);
	memset(st, 0, sizeof(*st));
}

/* Sets st up for dev: a stream, and two buffers of bsz bytes unless bsz is 0. */
static int stager_init(struct stager *st, struct gdx_device *dev, size_t bsz)
{
	int ret = gdx_stream_create(dev, &st->s);

	if (ret)
		return ret;
	st->dev = dev;
	for (int i = 0; i < 2 && bsz; i++) {
		ret = gdx_pinned_alloc(dev, bsz, &st->b[i]);
		if (ret) {
			stager_fini(st);
			return ret;
		}
	}
	st->bsz = bsz;
	return 0;
}

void tcp_stagers_free(struct stager **list)
{
	while (*list) {
		struct stager *st = *list;

		*list = st->next;
		stager_fini(st);
		free(st);
	}
}

int tcp_seq_landed(uint32_t word, uint32_t seq)
{
	return (int32_t)(word - seq) >= 0;
}

/* Learns from the done word how far the copies got: a load, no driver call. */
static void rr_progress(struct rxring *rr)
{
	uint32_t w;

	if (!rr->on || rr->landed == rr->seq)
		return;
	w = __atomic_load_n(rr->word, __ATOMIC_ACQUIRE);
	if (w != rr->landed) {
		rr->landed = w;
		rr->done = rr->pend[w & rr->pmask];
	}
}

static struct deff deff_pop(struct rxring *rr)
{
	struct deff e = rr->q[rr->qhead];

	rr->qhead = (rr->qhead + 1) & (rr->qcap - 1);
	rr->qn--;
	return e;
}

/* Carries out the deferred effects whose copies have landed, oldest first. */
void tcp_defer_release(struct tcp_ep *t)
{
	struct rxring *rr = &t->rr;

	if (!rr->qn)
		return;
	rr_progress(rr);
	while (rr->qn && tcp_seq_landed(rr->landed, rr->q[rr->qhead].mark)) {
		struct deff e = deff_pop(rr);

		tcp_deff_run(t, &e, 0);
	}
}

/*
 * Stops the agent's workers, however long that takes: the memory that copies
 * posted to it may still write (receives' buffers, regions) goes back to the
 * user only once none runs.  The agent stays allocated (the transmit thread
 * may still call into it: its posts fail from here on) until tcp_rr_stop frees it.
 * A device that does not let a worker end keeps this thread here, and the
 * memory held; said at every stop timeout.
 */
static void rr_halt(struct tcp_ep *t)
{
	struct rxring *rr = &t->rr;

	for (unsigned i = 1; gdx_copy_agent_halt(rr->agent) == -ETIMEDOUT; i++)
		GDX_ERR(SUBSYS, "%s: copy agent not stopped (%u tries): %u requests whose data "
			"it may still place keep their memory until it is", gdx_device_name(rr->dev),
			i, rr->qn);
}

/*
 * The agent cannot go on (err): once its workers have stopped (a failed
 * agent's may run on: the other ring's, or one that a launch reported failed
 * started after all, taking a descriptor whose post returned the error), the
 * effects whose copies had not landed fail with its code (the peer's requests
 * with GDX_EREMOTE), the others are carried out, and device memory is received
 * synchronously from here on.
 */
static void rr_fail(struct tcp_ep *t, int err)
{
	struct rxring *rr = &t->rr;

	GDX_ERR(SUBSYS, "%s: copy agent failed (%s): requests whose data it had not placed "
		"fail; device memory is received and sent synchronously from here on",
		gdx_device_name(rr->dev), gdx_strerror(err));
	rr_halt(t);
	tcp_tx_drop_agent(t);
	rr_progress(rr);
	rr->on = 0;
	rr->err = err;
	while (rr->qn) {
		struct deff e = deff_pop(rr);

		tcp_deff_run(t, &e, tcp_seq_landed(rr->landed, e.mark) ? 0 : err);
	}
	rr->landed = rr->seq;
}

/*
 * Spins until the copies up to seq have landed: 0, or the agent's error once
 * it failed (asked every 64 spins, so a dead agent ends the wait; rr_fail).
 */
int tcp_rr_wait_seq(struct tcp_ep *t, uint32_t seq)
{
	struct rxring *rr = &t->rr;

	for (unsigned spins = 1;; spins++) {
		int r;

		if (!rr->on)
			return rr->err;
		rr_progress(rr);
		if (tcp_seq_landed(rr->landed, seq))
			return 0;
		if (!(spins % 64) && (r = gdx_copy_agent_status(rr->agent))) {
			rr_fail(t, r);
			return r;
		}
		sched_yield();
	}
}

/*
 * A payload cut short by the connection's end: the copies of it posted so
 * far must land before its memory is let go (a region put, a shared receive
 * completed), or they could write into memory handed back or reused.
 */
void tcp_rr_settle(struct tcp_ep *t)
{
	if (t->rr.on && t->rr.landed != t->rr.seq)
		tcp_rr_wait_seq(t, t->rr.seq);
}

/*
 * Carries out the deferred effects as their copies land.  watch: returns
 * early once the socket has input (or an error, or its end), which comes
 * before the wait; the caller then reads instead of blocking.
 */
void tcp_defer_wait(struct tcp_ep *t, int watch)
{
	struct rxring *rr = &t->rr;

	for (unsigned spins = 1;; spins++) {
		int r;

		tcp_defer_release(t);
		if (!rr->qn)
			return;
		if (watch) {
			char c;
			ssize_t n = recv(t->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

			if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
				return;
		}
		if (!(spins % 64) && (r = gdx_copy_agent_status(rr->agent))) {
			rr_fail(t, r);
			return;
		}
		sched_yield();
	}
}

/*
 * Carries out e now, or queues it behind the effects still waiting (FIFO, so
 * completions and answers keep their order).  dev: e depends on the copies
 * posted so far (its payload went through the ring).  Returns rx_err.
 */
int tcp_defer(struct tcp_ep *t, struct deff *e, int dev)
{
	struct rxring *rr = &t->rr;

	e->dev = (uint8_t)dev;
	e->mark = rr->seq;
	/* what landed goes first: host frames alone would not look until the socket ran dry */
	tcp_defer_release(t);
	if (!rr->qn && !dev) {
		tcp_deff_run(t, e, 0);
		return t->rx_err;
	}
	if (rr->qn == rr->qcap) {
		unsigned cap = rr->qcap ? rr->qcap * 2 : 64;
		struct deff *q = malloc(cap * sizeof(*q));

		if (!q) {
			/* No room to queue it: wait for every copy instead, then carry it out. */
			int err = dev ? tcp_rr_wait_seq(t, e->mark) : 0;

			tcp_defer_wait(t, 0);
			tcp_deff_run(t, e, err);
			return t->rx_err;
		}
		for (unsigned i = 0; i < rr->qn; i++)
			q[i] = rr->q[(rr->qhead + i) & (rr->qcap - 1)];
		free(rr->q);
		rr->q = q;
		rr->qcap = cap;
		rr->qhead = 0;
	}
	rr->q[(rr->qhead + rr->qn) & (rr->qcap - 1)] = *e;
	rr->qn++;
	return t->rx_err;
}

/*
 * With the agent started: the kept ring, and kept messages handed over by the
 * receive thread from here on (kept_rx).  Without the ring (the knob 0, no
 * pinned memory) they are handed over by their posters as before, in host
 * memory: slower into device memory, but nothing is lost.
 */
static void kr_start(struct tcp_ep *t, struct gdx_device *dev)
{
	size_t size = gdx_cfg_size("xport.tcp_kept_ring") & ~(size_t)(RING_ALIGN - 1);
	void *kr = NULL;
	int ret;

	if (!size)
		return;
	ret = gdx_pinned_alloc(dev, size, &kr);
	if (ret) {
		GDX_WARN(SUBSYS, "%s: no kept ring (%s): messages that come before their receive "
			 "are kept in host memory and copied by the thread that posts it",
			 gdx_device_name(dev), gdx_strerror(ret));
		return;
	}
	t->kr_mem = kr;
	t->kr.size = size;
	/* the receive thread reads the ring's fields once it has seen kept_rx */
	pthread_mutex_lock(&t->lock);
	t->kept_rx = 1;
	pthread_mutex_unlock(&t->lock);
}

/*
 * The first device memory posted or registered: the ring and an agent of its
 * device, else (no agent on that device, the knob off, out of memory) the
 * stream path, which says so.
 */
static void rr_start(struct tcp_ep *t, struct gdx_device *dev)
{
	struct rxring *rr = &t->rr;
	struct gdx_copy_agent_opts o;
	void *ring = NULL;
	int ret;

	if (!gdx_cfg_bool("xport.tcp_copy_agent")) {
		GDX_INFO(SUBSYS, "%s: xport.tcp_copy_agent=0: device memory is received and sent "
			 "through a stream, synchronised per message or burst",
			 gdx_device_name(dev));
		return;
	}
	rr->size = gdx_cfg_size("xport.tcp_rx_ring") & ~(size_t)(RING_ALIGN - 1);
	rr->chunk = rr->size / 8 & ~(size_t)(RING_ALIGN - 1);
	rr->pmask = 2 * RR_ENTRIES - 1;
	gdx_copy_agent_opts_init(&o, sizeof(o));
	/* a worker per direction: a large send's copy does not hold up receives */
	o.rings = 2;
	o.workers = 2;
	o.entries = RR_ENTRIES;
	ret = gdx_copy_agent_start(dev, &o, &rr->agent);
	if (!ret)
		ret = gdx_pinned_alloc(dev, rr->size, &ring);
	if (!ret)
		ret = gdx_pinned_alloc(dev, SR_SIZE, (void **)&t->sr);
	if (!ret) {
		/* twice the descriptors: the entry of the landed seq stays while the ring is full */
		rr->pend = calloc(2 * RR_ENTRIES, sizeof(*rr->pend));
		ret = rr->pend ? 0 : -ENOMEM;
	}
	if (ret) {
		GDX_WARN(SUBSYS, "%s: no copy agent (%s): device memory is received and sent "
			 "through a stream, synchronised per message or burst",
			 gdx_device_name(dev), gdx_strerror(ret));
		if (rr->agent && gdx_copy_agent_stop(rr->agent))
			ring = NULL;	/* the device may still look at its memory: leave it */
		rr->agent = NULL;
		if (ring)
			gdx_pinned_free(dev, ring);
		if (t->sr)
			gdx_pinned_free(dev, t->sr);
		t->sr = NULL;
		free(rr->pend);
		rr->pend = NULL;
		return;
	}
	rr->ring = ring;
	rr->word = gdx_copy_agent_done_word(rr->agent, RR_RX);
	rr->tx_word = gdx_copy_agent_done_word(rr->agent, RR_TX);
	rr->on = 1;
	GDX_DBG(SUBSYS, "%s: receives through a %zu-byte ring and sends through one of %u bytes, "
		"copies by a copy agent", gdx_device_name(dev), rr->size, SR_SIZE);
	kr_start(t, dev);
}

/* dev's stager in list (t->rxs, t->txs), or NULL: any thread. */
struct stager *tcp_stager_of(struct stager **list, const struct gdx_device *dev)
{
	struct stager *st = __atomic_load_n(list, __ATOMIC_ACQUIRE);

	while (st && st->dev != dev)
		st = st->next;
	return st;
}

/*
 * Adds dev's stager to list (rr_lock held) unless it has one: a stream, and
 * two pinned buffers of STAGE_SIZE bytes unless lend (the agent's device: a
 * ring of the agent lends it buffers once the agent failed).  what: for the
 * error, which the post or registration fails with.
 */
static int stager_add(struct stager **list, struct gdx_device *dev, int lend, const char *what)
{
	struct stager *st;
	int ret;

	if (tcp_stager_of(list, dev))
		return 0;
	st = calloc(1, sizeof(*st));
	ret = st ? stager_init(st, dev, lend ? 0 : STAGE_SIZE) : -ENOMEM;
	if (ret) {
		GDX_ERR(SUBSYS, "%s: cannot set up %s its memory: %s", gdx_device_name(dev), what,
			gdx_strerror(ret));
		free(st);
		return ret;
	}
	st->next = *list;
	__atomic_store_n(list, st, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Sets up what the endpoint's threads need to move dev's memory, on the
 * caller's thread (the one that posts or registers the memory, posts it to a
 * shared receive queue or joins one: tcp_srq_device), never on theirs: the
 * agent's start loads its module, and a stream's creation or a pinned
 * allocation may synchronise the context on CUDA, while neither thread may
 * wait on a stream whose work waits for a completion only that thread
 * delivers.  The first device gets the receive ring, the stage ring and the
 * agent (rr_start; its fields published by the release store of rr.dev).
 * rx: the receive thread will write dev's memory; tx: the transmit thread
 * will read it (a send's or write's source, a region the peer may read).
 * Each side gets a stager of dev for the stream path (any other device, the
 * first without an agent, or the agent's once it failed): a stream and two
 * pinned buffers, the agent's device's its stream alone (the agent's rings
 * lend it buffers if the agent fails: tcp_rx_stager, tcp_tx_stager).  Once per device
 * and side; 0, or why dev's memory cannot be moved (the post or registration
 * fails with it).
 */
int tcp_rr_prepare(struct tcp_ep *t, struct gdx_device *dev, int rx, int tx)
{
	int ret = 0;

	if (__atomic_load_n(&t->rr.dev, __ATOMIC_ACQUIRE) && (!rx || tcp_stager_of(&t->rxs, dev)) &&
	    (!tx || tcp_stager_of(&t->txs, dev)))
		return 0;
	pthread_mutex_lock(&t->rr_lock);
	/* not after tcp_rr_stop (a registration outlives the connection): see tcp_rr_stop */
	if (__atomic_load_n(&t->rr.stopped, __ATOMIC_SEQ_CST))
		goto out;
	if (!t->rr.dev) {
		rr_start(t, dev);
		__atomic_store_n(&t->rr.dev, dev, __ATOMIC_RELEASE);
	}
	/* the agent's rings, once set, stay until the endpoint goes */
	if (rx)
		ret = stager_add(&t->rxs, dev, t->rr.ring && t->rr.dev == dev, "receiving into");
	if (tx && !ret)
		ret = stager_add(&t->txs, dev, t->sr && t->rr.dev == dev, "sending out of");
out:
	pthread_mutex_unlock(&t->rr_lock);
	return ret;
}

/* Makes room for need bytes at the head of the ring: the oldest copies must land. */
int tcp_rr_reserve(struct tcp_ep *t, size_t need)
{
	struct rxring *rr = &t->rr;

	rr_progress(rr);
	while (rr->head + need - rr->done > rr->size) {
		int ret = tcp_rr_wait_seq(t, rr->landed + 1);

		if (ret)
			return ret;
	}
	return 0;
}

/* Posts the agent's copy of n bytes from src to dst on the receive thread's ring. */
int tcp_rr_post(struct tcp_ep *t, char *dst, const void *src, size_t n, uint64_t pend)
{
	struct rxring *rr = &t->rr;
	uint32_t seq;
	int ret;

	/*
	 * Waits on the way (rx_exact's) may have found the agent dead.  A copy
	 * over the destination of one in flight needs no wait: one ring's
	 * overlapping copies land in the order posted.
	 */
	ret = rr->on ? 0 : rr->err;
	for (unsigned i = 1; !ret && (ret = gdx_copy_agent_post(rr->agent, RR_RX, dst, src, n,
								  &seq)) == -EAGAIN; i++) {
		ret = 0;
		if (!(i % 64))
			ret = gdx_copy_agent_status(rr->agent);
		sched_yield();
	}
	if (ret) {
		if (rr->on)
			rr_fail(t, ret);
		return ret;
	}
	rr->pend[seq & rr->pmask] = pend;
	rr->seq = seq;
	return 0;
}

/*
 * The connection is gone, both threads' work done: effects whose copies
 * landed are carried out (answers go nowhere now); the agent is stopped,
 * waiting as long as its workers take (rr_halt), so no copy runs once the
 * rest report GDX_EDISCONNECTED (their buffers may be freed then, and the
 * regions written deregistered).
 */
void tcp_rr_stop(struct tcp_ep *t)
{
	struct rxring *rr = &t->rr;

	/*
	 * No agent starts from here on.  One that a poster's tcp_rr_prepare is
	 * starting right now (dev not published yet: nothing was received or
	 * deferred through it) is tcp_destroy's to stop: this thread must not
	 * wait for that start, which on CUDA may synchronise the context while a
	 * stream waits for a completion that tcp_flush_all delivers.
	 */
	__atomic_store_n(&rr->stopped, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&rr->dev, __ATOMIC_SEQ_CST))
		return;
	tcp_defer_release(t);
	if (rr->agent) {
		rr_halt(t);
		/* halted: this frees it */
		gdx_copy_agent_stop(rr->agent);
		rr->agent = NULL;
	}
	rr->on = 0;
	while (rr->qn) {
		struct deff e = deff_pop(rr);

		e.dev = 1;
		e.has_resp = 0;
		tcp_deff_run(t, &e, GDX_EDISCONNECTED);
	}
}

/* About to block on the socket: nothing may wait on copies meanwhile, nor answers. */
int tcp_rx_idle(struct tcp_ep *t)
{
	if (t->rr.qn) {
		tcp_defer_wait(t, 1);
		gdx_xport_complete_flush();
		tcp_tx_kick(t);
	}
	if (t->rx_err)
		return t->rx_err;
	return tcp_resp_flush(t);
}

/*
 * The stager of dev's memory for the stream path (tcp_rr_prepare made it), or
 * NULL.  Receive thread.  The agent's device's has its stream only: once the
 * agent failed (halted: rr_fail) the halves of its receive ring, idle from
 * then on, are its buffers, so no set-up runs here then either.
 */
struct stager *tcp_rx_stager(struct tcp_ep *t, struct gdx_device *dev)
{
	struct rxring *rr = &t->rr;
	struct stager *st = tcp_stager_of(&t->rxs, dev);

	if (st && !st->bsz && dev == rr->dev && rr->ring && !rr->on) {
		st->b[0] = rr->ring;
		st->b[1] = rr->ring + rr->size / 2;
		st->bsz = rr->size / 2;
		st->lent = 1;
	}
	return st && st->bsz ? st : NULL;
}

/*
 * Room for a kept message of n bytes in the kept ring, whole (a message is
 * one copy), or NULL.  Each takes whole RING_ALIGN units, so the next starts
 * aligned (sr_room says why).  Receive thread.
 */
unsigned char *tcp_kr_take(struct tcp_ep *t, size_t n, uint64_t *end)
{
	size_t span = GDX_ALIGN_UP(n, (size_t)RING_ALIGN), piece = span, skip, off;

	off = gdx_byte_ring_place(&t->kr, &piece, RING_ALIGN, &skip);
	if (piece != span || gdx_byte_ring_used(&t->kr) + skip + span > t->kr.size)
		return NULL;
	t->kr.head += skip + span;
	*end = t->kr.head;
	return t->kr_mem + off;
}

/* Whether the receive side halted the failed agent (rr_fail): any thread. */
int tcp_tx_noagent(struct tcp_ep *t)
{
	return __atomic_load_n(&t->tx_noagent, __ATOMIC_ACQUIRE);
}

/*
 * The copy agent that takes copies out of dev's memory for sending, or NULL
 * (another device, none started, or it failed on the receive side): then the
 * stage stream does.  rr.agent is set before rr.dev is published and stays
 * until both threads are done (tcp_rr_stop).
 */
struct gdx_copy_agent *tcp_tx_agent(struct tcp_ep *t, const struct gdx_device *dev)
{
	if (__atomic_load_n(&t->rr.dev, __ATOMIC_ACQUIRE) != dev || tcp_tx_noagent(t))
		return NULL;
	return t->rr.agent;
}

/*
 * The stream that copies out of dev's memory for sending where no agent
 * does (tcp_tx_agent): that of dev's sending stager, which tcp_rr_prepare made where
 * the memory was posted or registered, or NULL.  Transmit thread, or the
 * receive thread to wait for its copies (tcp_ans_settle).
 */
struct gdx_stream *tcp_tx_stream(struct tcp_ep *t, const struct gdx_device *dev)
{
	struct stager *st = tcp_stager_of(&t->txs, dev);

	return st ? st->s : NULL;
}

/* Waits for the copies the stream path started out of dev's memory, if it is dev's path. */
int tcp_tx_sync(struct tcp_ep *t, const struct gdx_device *dev)
{
	struct gdx_stream *s = tcp_tx_agent(t, dev) ? NULL : tcp_tx_stream(t, dev);

	return s ? gdx_stream_synchronize(s) : 0;
}

/*
 * dev's sending stager with its buffers, for frames of dev that go the stream
 * path, or NULL (said: its set-up failed where the memory was posted, which
 * failed then).  Transmit thread: no set-up runs here.  The agent's device's
 * has its stream only, and such frames only once the receive side dropped
 * the agent (tcp_tx_drop_agent): then the halves of the stage ring are its
 * buffers.  No frame is staged in the ring from then on, and those that
 * were (their copies landed) are ahead of every frame of the stream path in
 * the queue -- staged frames precede late ones, in the order of their
 * copies, which land in that order -- so they went out before this thread
 * takes one of those.
 */
struct stager *tcp_tx_stager(struct tcp_ep *t, struct gdx_device *dev)
{
	struct stager *st = tcp_stager_of(&t->txs, dev);

	if (st && !st->bsz && dev == __atomic_load_n(&t->rr.dev, __ATOMIC_ACQUIRE) && t->sr &&
	    tcp_tx_noagent(t)) {
		st->b[0] = t->sr;
		st->b[1] = t->sr + STAGE_SIZE;
		st->bsz = STAGE_SIZE;
		st->lent = 1;
	}
	if (st && st->bsz)
		return st;
	GDX_ERR(SUBSYS, "%s: send out of memory not set up for it", gdx_device_name(dev));
	return NULL;
}

/*
 * Posts a copy to the agent's ring RR_TX, whose one producer at a time is the
 * holder of t->lock (held).  -EAGAIN: the ring's descriptors are all in use.
 */
int tcp_tx_post(struct tcp_ep *t, struct gdx_copy_agent *a, void *dst, const void *src,
		size_t n, uint32_t *seq)
{
	int ret = gdx_copy_agent_post(a, RR_TX, dst, src, n, seq);

	if (!ret)
		t->tx_seq = *seq;
	return ret;
}

/*
 * Spins until the agent's copies out of device memory up to seq have landed
 * (either thread: the receive thread waits for those of read answers, in
 * tcp_ans_settle); the agent's error if it failed.  GDX_EDISCONNECTED once the
 * connection ended: a worker that does not finish (status says nothing of a
 * wedged one) must not keep this thread, and the teardown behind it, here;
 * the memory the copies read stays held (tx_let_go) until tcp_rr_stop has
 * stopped the agent, waiting as long as that takes and saying so.
 */
int tcp_tx_seq_landed(struct tcp_ep *t, struct gdx_copy_agent *a, uint32_t seq)
{
	for (unsigned spins = 1;
	     !tcp_seq_landed(__atomic_load_n(t->rr.tx_word, __ATOMIC_ACQUIRE), seq); spins++) {
		int ret;

		if (!(spins % 64)) {
			if (__atomic_load_n(&t->dead, __ATOMIC_ACQUIRE))
				return GDX_EDISCONNECTED;
			if ((ret = gdx_copy_agent_status(a)))
				return ret;
		}
		sched_yield();
	}
	return 0;
}

/*
 * Waits until every copy out of dev's memory started for sending has landed,
 * before frames are let go after an error: nonzero (the agent failed, or the
 * connection ended first) keeps them (tx_let_go).
 */
int tcp_tx_copies_wait(struct tcp_ep *t, struct gdx_device *dev)
{
	struct gdx_copy_agent *a = tcp_tx_agent(t, dev);
	int ret = 0;

	if (a) {
		uint32_t seq;

		pthread_mutex_lock(&t->lock);
		seq = t->tx_seq;
		pthread_mutex_unlock(&t->lock);
		ret = tcp_tx_seq_landed(t, a, seq);
	}
	if (!ret && !a)
		ret = tcp_tx_sync(t, dev);
	return ret;
}

/*
 * Room for n bytes of the ring, not across its end: *pos, or -EAGAIN.  Each
 * frame's room starts at a RING_ALIGN boundary, whatever the sizes before it:
 * the cuda agent copies with 16-byte vectors only where both ends are
 * aligned, byte by byte elsewhere.  Lock held.
 */
static int sr_room(struct tcp_ep *t, size_t n, uint64_t *pos)
{
	uint64_t off = t->sr_head % SR_SIZE, skip;

	n = GDX_ALIGN_UP(n, (size_t)RING_ALIGN);
	skip = off + n > SR_SIZE ? SR_SIZE - off : 0;
	if (t->sr_head + skip + n - t->sr_tail > SR_SIZE)
		return -EAGAIN;
	*pos = t->sr_head + skip;
	t->sr_head = *pos + n;
	return 0;
}

/*
 * Takes room for x's payload and posts its copy there.  -EAGAIN: no room,
 * or no descriptor free (nothing taken).  Lock held.
 */
int tcp_sr_stage(struct tcp_ep *t, struct txi *x, struct gdx_copy_agent *a)
{
	uint64_t head = t->sr_head, pos;
	uint32_t seq;
	int ret = sr_room(t, x->plen, &pos);

	if (ret)
		return ret;
	ret = tcp_tx_post(t, a, t->sr + pos % SR_SIZE, x->pp, x->plen, &seq);
	if (ret) {
		/* a failed launch may still be copied: that room stays taken */
		if (ret == -EAGAIN)
			t->sr_head = head;
		return ret;
	}
	x->pp = t->sr + pos % SR_SIZE;
	x->sr_end = t->sr_head;
	x->seq = seq;
	txi_set(x, TXS_STAGED);
	x->acopy = 1;
	return 0;
}
