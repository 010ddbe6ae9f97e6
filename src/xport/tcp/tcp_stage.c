/* SPDX-License-Identifier: MIT */
/*
 * tcp://host:port, staging of device memory (tcp_int.h): the set-up of the
 * context and its two lanes (mem/stage.h), at connect or accept for the
 * endpoint's device, else where its memory is first posted or registered;
 * the receive thread's use of the receive lane (effects, waits, the
 * teardown), the kept ring, the lanes of other devices (tcp_tx_sync_lane,
 * tcp_rx_sync_lane); and the transmit lane, the stage
 * ring: device payloads copied out (D2H) through the agent's ring RR_TX,
 * each frame's room taken and its copy posted by whoever holds t->lock (its
 * one producer) as the frame is queued, its landing seen by its ticket from
 * any thread without the lock, its room given back once the frame is sent
 * (gdx_stage_release), and, once the receive side halted the failed agent,
 * the copies it owed made again synchronously by the lane (REDO).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "xport/tcp/tcp_int.h"

void tcp_dlanes_free(struct tcp_dlane **list)
{
	while (*list) {
		struct tcp_dlane *d = *list;

		*list = d->next;
		/* synchronous, or the stream's copies waited for by its teardown */
		gdx_stage_drain(d->st, GDX_EDISCONNECTED);
		gdx_stage_close(d->st);
		gdx_stage_ctx_close(d->ctx);
		free(d);
	}
}

/*
 * Carries out a deferred effect of the receive lane (effect NULL: a run of
 * them ended).  err: why its copies did not land, the agent's fault; in the
 * teardown (tcp_stage_stop) GDX_EDISCONNECTED, for every effect left,
 * answering nobody: the connection is gone.
 */
static void rx_run(void *owner, void *effect, int err)
{
	struct tcp_ep *t = owner;
	struct deff *e = effect;

	if (!e)
		return;
	if (err && t->rx_draining) {
		e->dev = 1;
		e->has_resp = 0;
	}
	tcp_deff_run(t, e, err);
}

/*
 * The agent failed (err) and its context halted it: no worker runs any
 * more.  Before the receive lane fails the effects whose copies had not
 * landed (the peer's requests with GDX_EREMOTE) and goes on synchronously,
 * the transmit side leaves the agent too (tcp_tx_drop_agent).  Called once,
 * inside the first gdx_stage_ctx_fail; the teardown's halt (-ESHUTDOWN) is
 * no failure.
 */
static void tcp_on_halt(void *owner, int err)
{
	struct tcp_ep *t = owner;

	if (err == -ESHUTDOWN)
		return;
	GDX_ERR(SUBSYS, "%s: copy agent failed (%s): requests whose data it had not placed "
		"fail; device memory is received and sent synchronously from here on",
		gdx_device_name(gdx_stage_ctx_device(t->stage)), gdx_strerror(err));
	tcp_tx_drop_agent(t);
}

/*
 * A payload cut short by the connection's end, or a message that must be in
 * place before it is kept: waits for the receive lane's copies posted so
 * far.  0, or why they may not have landed (the agent failed meanwhile:
 * the lane went on synchronously).  Receive thread.
 */
int tcp_rx_settle(struct tcp_ep *t)
{
	struct gdx_stage *rx = tcp_rx_lane(t);
	int ret;

	if (!tcp_rx_agent(rx))
		return 0;
	ret = gdx_stage_wait(rx, gdx_stage_mark(rx));
	if (!ret && !tcp_rx_agent(rx))
		ret = gdx_stage_ctx_status(t->stage);
	return ret;
}

/* Carries out the deferred effects as their copies land.  Receive thread. */
void tcp_defer_wait(struct tcp_ep *t)
{
	struct gdx_stage *rx = tcp_rx_lane(t);

	if (rx)
		gdx_stage_wait_idle(rx, NULL, NULL, 0);
}

/*
 * Carries out e now, or queues it behind the effects still waiting (FIFO, so
 * completions and answers keep their order).  dev: e depends on the copies
 * posted so far (its payload went through the lane).  Returns rx_err.
 */
int tcp_defer(struct tcp_ep *t, struct deff *e, int dev)
{
	struct gdx_stage *rx = tcp_rx_lane(t);

	e->dev = (uint8_t)dev;
	if (!rx) {
		tcp_deff_run(t, e, 0);
		return t->rx_err;
	}
	/* what landed goes first: host frames alone would not look until the socket ran dry */
	gdx_stage_progress(rx);
	gdx_stage_defer(rx, dev ? gdx_stage_mark(rx) : 0, e);
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
 * The endpoint's device, or the first device memory posted or registered: a
 * context with an agent of its device, the receive lane and the transmit
 * lane (the stage ring), else (no agent on that device, the knob off, out of
 * memory) the stream path, which says so.
 */
static void stage_start(struct tcp_ep *t, struct gdx_device *dev)
{
	struct gdx_stage_ctx_opts co;
	struct gdx_stage_opts o;
	size_t size, tx_size;
	int ret;

	if (!gdx_cfg_bool("xport.tcp_copy_agent")) {
		GDX_INFO(SUBSYS, "%s: xport.tcp_copy_agent=0: device memory is received and sent "
			 "through a stream, synchronised per message or burst",
			 gdx_device_name(dev));
		return;
	}
	gdx_stage_ctx_opts_init(&co, sizeof(co));
	co.agent = true;
	/* without it, the stream path: no context (the warning below says why) */
	co.agent_required = true;
	/* a worker per direction: a large send's copy does not hold up receives */
	co.lanes = 2;
	co.workers = 2;
	co.entries = RR_ENTRIES;
	co.on_halt = tcp_on_halt;
	co.owner = t;
	ret = gdx_stage_ctx_open(dev, &co, &t->stage);
	size = gdx_cfg_size("xport.tcp_rx_ring") & ~(size_t)(RING_ALIGN - 1);
	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = GDX_STAGE_H2D;
	o.mode = GDX_STAGE_AGENT;
	o.fault = GDX_STAGE_FALLBACK;
	o.chunk = size / 8 & ~(size_t)(RING_ALIGN - 1);
	o.chunks = 8;
	/*
	 * Each piece starts at a RING_ALIGN boundary, whatever the sizes before
	 * it: the cuda agent copies whole pieces with 16-byte words between
	 * aligned ends, and cuts the others around them (slower where the two
	 * ends differ mod 16).
	 */
	o.align = RING_ALIGN;
	o.marks = RR_ENTRIES;
	o.lane = RR_RX;
	o.effect_size = sizeof(struct deff);
	o.run = rx_run;
	o.owner = t;
	if (!ret)
		ret = gdx_stage_open(t->stage, &o, &t->rx_lane);
	/*
	 * The stage ring: two stage buffers, room given back as frames are sent;
	 * once the receive side halted the failed agent, the copies it owed are
	 * made again (the frames' sources are as they were: tcp_ans_settle).
	 * A wait ends when the connection does (a wedged worker's copy).
	 */
	o.dir = GDX_STAGE_D2H;
	o.fault = GDX_STAGE_REDO;
	o.chunk = STAGE_SIZE;
	o.chunks = 2;
	o.lane = RR_TX;
	o.effect_size = 0;
	o.run = NULL;
	o.owner = NULL;
	o.abort = &t->dead;
	if (!ret)
		ret = gdx_stage_open(t->stage, &o, &t->tx_lane);
	if (ret) {
		GDX_WARN(SUBSYS, "%s: no copy agent (%s): device memory is received and sent "
			 "through a stream, synchronised per message or burst",
			 gdx_device_name(dev), gdx_strerror(ret));
		gdx_stage_close(t->rx_lane);
		t->rx_lane = NULL;
		/* an agent that did not stop may still look at its memory: then it is left */
		gdx_stage_ctx_close(t->stage);
		t->stage = NULL;
		return;
	}
	gdx_stage_ring(t->rx_lane, &size);
	gdx_stage_ring(t->tx_lane, &tx_size);
	GDX_DBG(SUBSYS, "%s: receives through a %zu-byte ring and sends through one of %zu "
		"bytes, copies by a copy agent", gdx_device_name(dev), size, tx_size);
	kr_start(t, dev);
}

/* dev's lane in list (t->rxs, t->txs), or NULL: any thread. */
struct gdx_stage *tcp_dlane_of(struct tcp_dlane **list, const struct gdx_device *dev)
{
	struct tcp_dlane *d = __atomic_load_n(list, __ATOMIC_ACQUIRE);

	while (d && gdx_stage_ctx_device(d->ctx) != dev)
		d = d->next;
	return d ? d->st : NULL;
}

/*
 * Adds dev's lane to list (stage_lock held) unless it has one: a context of
 * its own without an agent, and a lane of STAGE_SIZE chunks.  Receiving, a
 * synchronous one of two chunks: a piece is read into the ring and copied
 * before the next is read, and a failed copy fails its message only (the
 * stream's error is the piece's, not sticky).  Sending, one whose stream
 * stores a done word: the transmit thread stages the copies of a run of
 * frames and sends the run before it waits, and the receive thread waits
 * for them by the word (tcp_tx_sync from tcp_ans_settle) while the
 * transmit thread may wait for it; three chunks hold two runs (each at most
 * STAGE_SIZE, tx_take_staged) with the tail one skips.  A device that
 * cannot store the word gets a synchronous lane: with events only the
 * producer learns that copies landed, and this thread could then wait on
 * one that waits on it.  A failed copy ends the connection either way (the
 * header promised the bytes).  what: for the error, which the post or
 * registration fails with.
 */
static int dlane_add(struct tcp_ep *t, struct tcp_dlane **list, struct gdx_device *dev,
		     enum gdx_stage_dir dir, const char *what)
{
	struct gdx_stage_opts o;
	struct tcp_dlane *d;
	int ret;

	if (tcp_dlane_of(list, dev))
		return 0;
	d = calloc(1, sizeof(*d));
	ret = d ? gdx_stage_ctx_open(dev, NULL, &d->ctx) : -ENOMEM;
	gdx_stage_opts_init(&o, sizeof(o));
	o.dir = dir;
	o.mode = dir == GDX_STAGE_H2D ? GDX_STAGE_SYNC : GDX_STAGE_WORD;
	o.fault = GDX_STAGE_FAIL;
	o.chunk = STAGE_SIZE;
	o.chunks = dir == GDX_STAGE_H2D ? 2 : 3;
	o.abort = &t->dead;
	if (!ret)
		ret = gdx_stage_open(d->ctx, &o, &d->st);
	if (!ret && gdx_stage_mode_of(d->st) != o.mode) {
		gdx_stage_close(d->st);
		d->st = NULL;
		o.mode = GDX_STAGE_SYNC;
		ret = gdx_stage_open(d->ctx, &o, &d->st);
	}
	if (ret) {
		GDX_ERR(SUBSYS, "%s: cannot set up %s its memory: %s", gdx_device_name(dev), what,
			gdx_strerror(ret));
		if (d)
			gdx_stage_ctx_close(d->ctx);
		free(d);
		return ret;
	}
	d->next = *list;
	__atomic_store_n(list, d, __ATOMIC_RELEASE);
	return 0;
}

/* Whether dev's memory has its way on the receive (rx) or send side: any thread. */
static int stage_ready(struct tcp_ep *t, struct gdx_device *dev, int rx)
{
	struct gdx_device *sd = __atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE);

	if (sd == dev && (rx ? t->rx_lane : t->tx_lane))
		return 1;
	return tcp_dlane_of(rx ? &t->rxs : &t->txs, dev) != NULL;
}

/*
 * Sets up what the endpoint's threads need to move dev's memory, on the
 * caller's thread (the one that posts or registers the memory, posts it to a
 * shared receive queue or joins one: tcp_srq_device), never on theirs: the
 * agent's start loads its module, and a stream's creation or a pinned
 * allocation may synchronise the context on CUDA, while neither thread may
 * wait on a stream whose work waits for a completion only that thread
 * delivers.  The first device gets the agent, the receive lane and the
 * stage ring (stage_start; published by the release store of stage_dev).
 * rx: the receive thread will write dev's memory; tx: the transmit thread
 * will read it (a send's or write's source, a region the peer may read).
 * Each side gets a lane of dev for the stream path (any other device, or
 * the first without an agent: dlane_add); the agent's device needs none,
 * its lanes go on synchronously once the agent failed (tcp_rx_sync_lane,
 * tcp_tx_sync_lane).  Lanes of the devices named at connect or accept open
 * there (tcp_conn.c); a device first seen on a post or a registration opens
 * its lane on that thread, never an endpoint thread's.  Once per device and
 * side; 0, or why dev's memory cannot be moved (the post or registration
 * fails with it).
 */
int tcp_stage_prepare(struct tcp_ep *t, struct gdx_device *dev, int rx, int tx)
{
	int ret = 0;

	if (__atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE) && (!rx || stage_ready(t, dev, 1)) &&
	    (!tx || stage_ready(t, dev, 0)))
		return 0;
	pthread_mutex_lock(&t->stage_lock);
	/* not after tcp_stage_stop (a registration outlives the connection): see there */
	if (__atomic_load_n(&t->stage_stopped, __ATOMIC_SEQ_CST))
		goto out;
	if (!t->stage_dev) {
		stage_start(t, dev);
		__atomic_store_n(&t->stage_dev, dev, __ATOMIC_RELEASE);
	}
	/* the agent's lanes, once set, stay until the endpoint goes */
	if (rx && !stage_ready(t, dev, 1))
		ret = dlane_add(t, &t->rxs, dev, GDX_STAGE_H2D, "receiving into");
	if (tx && !ret && !stage_ready(t, dev, 0))
		ret = dlane_add(t, &t->txs, dev, GDX_STAGE_D2H, "sending out of");
out:
	pthread_mutex_unlock(&t->stage_lock);
	return ret;
}

/*
 * Posts the copy of a kept message's n bytes at src, in the kept ring, to
 * dst through the receive lane.  A mark is a position in the lane's ring:
 * the copy takes a ticket there, RING_ALIGN bytes, for its own (a few bytes
 * of the ring per kept message; mem/stage.h).  Receive thread.
 */
int tcp_rx_post_kept(struct tcp_ep *t, void *dst, const void *src, size_t n)
{
	struct gdx_stage_span sp;
	int ret = gdx_stage_reserve(t->rx_lane, RING_ALIGN, 0, &sp);

	if (ret)
		return ret;
	sp.p = (void *)(uintptr_t)src;
	sp.n = n;
	return gdx_stage_post(t->rx_lane, &sp, dst);
}

/*
 * The connection is gone, both threads' work done: effects whose copies
 * landed are carried out (answers go nowhere now); the agent is halted,
 * waiting as long as its workers take (gdx_stage_ctx_fail), so no copy runs
 * once the rest report GDX_EDISCONNECTED (their buffers may be freed then,
 * and the regions written deregistered).  Those whose copies landed before
 * the halt are carried out with their result: their data is in place.
 */
void tcp_stage_stop(struct tcp_ep *t)
{
	/*
	 * Nothing starts from here on.  What a poster's tcp_stage_prepare is
	 * starting right now (stage_dev not published yet: nothing was
	 * received or deferred through it) is tcp_destroy's to stop: this
	 * thread must not wait for that start, which on CUDA may synchronise
	 * the context while a stream waits for a completion that
	 * tcp_flush_all delivers.
	 */
	__atomic_store_n(&t->stage_stopped, 1, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&t->stage_dev, __ATOMIC_SEQ_CST) || !t->rx_lane)
		return;
	gdx_stage_progress(t->rx_lane);
	gdx_stage_ctx_fail(t->stage, -ESHUTDOWN);
	t->rx_draining = 1;
	gdx_stage_drain(t->rx_lane, GDX_EDISCONNECTED);
	/* the transmit thread is gone and posters stage nothing once dead: no producer */
	gdx_stage_drain(t->tx_lane, GDX_EDISCONNECTED);
}

/* The socket has input (or an error, or its end): gdx_stage_wait_idle's input. */
static int rx_input(void *arg)
{
	struct tcp_ep *t = arg;
	char c;
	ssize_t n = recv(t->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/*
 * About to block on the socket: nothing may wait on copies meanwhile, nor
 * answers, but for a lone one to a message when it is about to park (park:
 * between frames): rx_park holds it if nothing more comes (tcp_resp_hold).
 */
int tcp_rx_idle(struct tcp_ep *t, int park)
{
	struct gdx_stage *rx = tcp_rx_lane(t);

	if (rx && gdx_stage_deferred(rx)) {
		/* returns early once the socket has input: the caller then reads, not blocks */
		gdx_stage_wait_idle(rx, rx_input, t, 0);
		gdx_xport_complete_flush();
		tcp_tx_kick(t);
	}
	if (t->rx_err)
		return t->rx_err;
	return park && tcp_resp_lone(t) ? 0 : tcp_resp_flush(t);
}

/*
 * A CQ waiter that received into device memory (w_dev), the socket read dry:
 * carries out its deferred effects as their copies land, as the receive
 * thread does before it parks.  1: input came first (read it, then come
 * back); 0: none left; else the lane's error.
 */
int tcp_lane_idle(struct tcp_ep *t)
{
	return gdx_stage_wait_idle(t->rx_lane, rx_input, t, 0);
}

/*
 * The synchronous lane for dev's memory (tcp_stage_prepare made it), or NULL:
 * dev's own, or once the agent failed (halted: the receive lane went on
 * synchronously) the receive lane, whose ring is idle from then on.  No
 * set-up runs here.  Receive thread.
 */
struct gdx_stage *tcp_rx_sync_lane(struct tcp_ep *t, struct gdx_device *dev)
{
	struct gdx_stage *rx = tcp_rx_lane(t);

	if (rx && dev == __atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE))
		return tcp_rx_agent(rx) ? NULL : rx;
	return tcp_dlane_of(&t->rxs, dev);
}

/*
 * Room for a kept message of n bytes in the kept ring, whole (a message is
 * one copy), or NULL.  Each takes whole RING_ALIGN units, so the next starts
 * aligned (stage_start says why).  An empty ring starts over at its
 * beginning: every message that fits the ring is kept in it then, not only
 * one that fits past where the last one ended.  Receive thread.
 */
unsigned char *tcp_kr_take(struct tcp_ep *t, size_t n, uint64_t *end)
{
	size_t span = GDX_ALIGN_UP(n, (size_t)RING_ALIGN), piece = span, skip, off;

	/* empty: no copy reads the ring (the tail moves once a message's copy landed) */
	if (t->kr.head == t->kr.tail && t->kr.head % t->kr.size)
		t->kr.head = t->kr.tail = t->kr.head + t->kr.size - t->kr.head % t->kr.size;
	off = gdx_byte_ring_place(&t->kr, &piece, RING_ALIGN, &skip);
	if (piece != span || gdx_byte_ring_used(&t->kr) + skip + span > t->kr.size)
		return NULL;
	t->kr.head += skip + span;
	*end = t->kr.head;
	return t->kr_mem + off;
}

/* Whether the receive side halted the failed agent (tcp_on_halt): any thread. */
int tcp_tx_noagent(struct tcp_ep *t)
{
	return __atomic_load_n(&t->tx_noagent, __ATOMIC_ACQUIRE);
}

/*
 * The transmit lane for dev's memory, or NULL (another device, none set up,
 * or the receive side halted the failed agent): then tcp_tx_sync_lane's copies.
 * The lane is set before stage_dev is published and stays until the endpoint
 * goes (tcp_destroy).
 */
struct gdx_stage *tcp_tx_lane(struct tcp_ep *t, const struct gdx_device *dev)
{
	if (__atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE) != dev || tcp_tx_noagent(t))
		return NULL;
	return t->tx_lane;
}

/*
 * The lane that copies out of dev's memory for frames of the stream path
 * (not tcp_tx_lane's), or NULL (its set-up failed where the memory was
 * posted, and said so): dev's own, or the agent's device's transmit lane
 * once the receive side dropped the agent (tcp_tx_drop_agent), synchronous
 * from then on.  No frame is staged in its ring from then on, and those
 * that were (their copies landed, or were made again: the lane's REDO) are
 * ahead of every frame of the stream path in the queue -- staged frames
 * precede late ones -- so their room is given back before the transmit
 * thread stages one of those.  Its producer is whoever holds t->lock, as
 * for every transmit lane.  Any thread.
 */
struct gdx_stage *tcp_tx_sync_lane(struct tcp_ep *t, const struct gdx_device *dev)
{
	if (t->tx_lane && dev == __atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE))
		return tcp_tx_noagent(t) ? t->tx_lane : NULL;
	return tcp_dlane_of(&t->txs, dev);
}

/*
 * Waits until the copies lane has started so far have landed, from any
 * thread (the transmit thread before it sends a run, the receive thread
 * before it copies a read answer's region itself: tcp_ans_settle); ends
 * early when the connection does.
 */
static int tx_lane_wait(struct tcp_ep *t, struct gdx_stage *lane)
{
	uint64_t mark;

	pthread_mutex_lock(&t->lock);
	mark = gdx_stage_mark(lane);
	pthread_mutex_unlock(&t->lock);
	return gdx_stage_watch(lane, mark);
}

/* Waits for the copies the stream path started out of dev's memory, if it is dev's path. */
int tcp_tx_sync(struct tcp_ep *t, const struct gdx_device *dev)
{
	struct gdx_stage *lane = tcp_tx_lane(t, dev) ? NULL : tcp_tx_sync_lane(t, dev);

	return lane ? tx_lane_wait(t, lane) : 0;
}

/*
 * Waits until every copy out of dev's memory started for sending has landed,
 * before frames are let go after an error: nonzero (the agent failed, or the
 * connection ended first: a wedged worker's copy must not keep the transmit
 * thread, and the teardown behind it, here) keeps them (tx_let_go).
 */
int tcp_tx_copies_wait(struct tcp_ep *t, struct gdx_device *dev)
{
	struct gdx_stage *tx = tcp_tx_lane(t, dev);

	return tx ? tx_lane_wait(t, tx) : tcp_tx_sync(t, dev);
}

/*
 * Takes room for x's payload in the transmit lane's ring and posts its copy
 * there.  -EAGAIN: no room, or every copy's mark in use (nothing taken).  A
 * post that fails keeps its room: a worker may still make the copy.  Lock
 * held.
 */
int tcp_sr_stage(struct txi *x, struct gdx_stage *tx)
{
	struct gdx_stage_span sp;
	int ret = gdx_stage_reserve(tx, x->plen, GDX_STAGE_NOWAIT, &sp);

	if (ret)
		return ret;
	ret = gdx_stage_post(tx, &sp, (void *)(uintptr_t)x->pp);
	if (ret)
		return ret;
	x->pp = sp.p;
	x->sr_end = sp.end;
	x->ticket = gdx_stage_ticket(tx);
	txi_set(x, TXS_STAGED);
	x->acopy = 1;
	return 0;
}
