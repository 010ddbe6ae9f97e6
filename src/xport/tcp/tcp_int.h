/* SPDX-License-Identifier: MIT */
#ifndef GDX_XPORT_TCP_INT_H
#define GDX_XPORT_TCP_INT_H

/*
 * tcp://host:port — RDMA semantics over one TCP connection per endpoint.
 *
 * Every request is a frame (48-byte header, then payload).  The requester
 * sends frames in post order (small ones in trains and large host ones as far
 * as the socket takes them, from whichever thread holds the socket; the rest,
 * and device ones, from a transmit thread); the peer's receive thread
 * executes them in that order, serving one-sided reads and writes against its
 * key table (key, access and bounds checked before a byte is touched; a bad
 * one is answered with GDX_EREMOTE and any payload is read and dropped), and
 * answers each with a response the requester matches against its queue of
 * outstanding requests.  Responses therefore arrive, and requests complete,
 * in post order.
 *
 * Data lands straight in the target: payloads are received into the posted
 * receive or registered region itself (only the start of a frame that shared a
 * socket read with its header is copied), and large host payloads of requests go
 * out with MSG_ZEROCOPY where the kernel has it.  Device memory is received into a
 * pinned ring whose copies a copy agent makes while the receive thread goes on
 * (what depends on the bytes having landed is deferred until they have, in
 * order), and sent out of a pinned ring the same agent copies each frame into
 * as it is queued, so that the copy runs while the frames ahead are sent: the
 * receive and transmit lanes of one staging context (mem/stage.h, tcp_stage.c).
 *
 * The two threads never wait on each other: the receive thread hands read
 * data and responses to the transmit queue, so both peers can stream at once.
 * A read answer's bytes are taken out of the region when it is sent: a write
 * to the same range that arrives after the read has them taken first, without
 * waiting for the answer to go out (tcp_ans_settle).
 */

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/sock.h"
#include "common/stats.h"
#include "mem/stage.h"
#include "xport/xport.h"

#define SUBSYS "xport.tcp"

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

enum {
	F_HELLO = 1,
	F_SEND,
	F_WRITE,
	F_READ,
	F_RESP,
	F_READ_RESP,
};

#define FL_IMM 0x1
#define TCP_MAGIC 0x54584447u	/* "GDXT" */
#define TCP_VERSION 1
#define MAX_PAYLOAD (1ull << 40)
#define ZC_MIN (64u << 10)
#define RBUF_SIZE (64u << 10)
#define RESP_BATCH 64
/*
 * Responses owed go out once the frames they answer carried this much: a
 * stream of requests then gets its answers while it lasts, not all at its
 * end (the requester's window would run dry meanwhile).
 */
#define RESP_BYTES (128u << 10)
#define DIRECT_MAX (64u << 10)	/* largest frame payload a posting thread sends itself */
#define STAGE_SIZE (1u << 20)	/* a stage buffer; the transmit lane's ring is two */
#define RING_ALIGN 64u		/* pieces start at such boundaries in the pinned rings (stage_start) */
#define TX_TRAIN_IOV 64		/* iovecs in one sendmsg of a train */
/*
 * Bytes a train gathers: it stops once it has 1 MiB (the first large request
 * joins whatever its size), as a raw sender's writes that carry a loopback
 * stream's ceiling.  Trains of at most 256 KiB cost the 64 KiB
 * stream a fifth of its bandwidth on the H200 (docs/measurements/xport.md,
 * session 22): each write is a lock of the socket, a push and, for the
 * peer, a wake-up and a read more.
 */
#define TX_TRAIN_BYTES (1u << 20)

struct hdr {
	uint8_t type;
	uint8_t flags;
	uint16_t rsvd;
	int32_t status;
	uint32_t imm;
	uint32_t rsvd2;
	uint64_t id;
	uint64_t raddr;
	uint64_t key;
	uint64_t len;
};
_Static_assert(sizeof(struct hdr) == 48, "frame header is 48 bytes on the wire");

/*
 * A lane (mem/stage.h) for moving the memory of a device other than the
 * agent's through the socket, on a context of its own without an agent.
 * Each side has one per such device (tcp_ep.rxs, txs), made by
 * tcp_stage_prepare (dlane_add says which mode); the agent's device has
 * none: its receive and transmit lanes go on synchronously once the agent
 * failed (tcp_rx_sync_lane, tcp_tx_sync_lane).
 */
struct tcp_dlane {
	struct gdx_stage_ctx *ctx;
	struct gdx_stage *st;
	struct tcp_dlane *next;
};

/*
 * Which way a frame's payload goes out, chosen when it is queued
 * (tx_submit_locked, sr_queue), lock held.  It changes only while the frame is
 * queued: a ring frame whose copy did not land becomes a stream frame when
 * the agent is dropped (tcp_tx_drop_agent), and a read answer of device
 * memory that a write gave a host copy of its bytes before any sender took
 * it becomes a host frame (ans_snap).
 */
enum txi_path {
	TXP_TRAIN,	/* host payload of at most DIRECT_MAX: goes in trains, from any sender */
	TXP_HOST,	/* larger host payload: its poster sends what the socket takes,
			   in a train (tx_host_rides), the transmit thread the rest */
	TXP_RING,	/* device payload the agent copies into the stage ring (sr_queue) */
	TXP_STREAM,	/* device payload copied by the transmit thread (tcp_tx_sync_lane) */
};

/*
 * Where a frame is in its life (once four flags: going, staged, late,
 * orphan): one state, moved under t->lock by txi_set alone, which checks
 * each move against these edges:
 *
 *   QUEUED -> LATE, STAGED      sr_queue: a ring frame, with room or not
 *   LATE -> STAGED              room came back (sr_catch_up, sr_take)
 *   QUEUED, LATE -> GOING       taken, or sent in a train (tcp_tx_going); a
 *                               LATE one goes whole through the ring's halves
 *   STAGED -> GOING_STAGED      taken (sr_take): sr_send waits for its copy
 *                               (made again by the transmit lane once the
 *                               agent is halted: sr_redo)
 *   LATE, STAGED -> QUEUED      the agent was dropped (tcp_tx_drop_agent; a
 *                               STAGED one whose copy did not land), or a
 *                               write gave a LATE answer a host copy (ans_snap)
 *   GOING, GOING_STAGED -> ORPHAN  freed (tcp_tx_free) while the receive
 *                               thread snaps its bytes with the lock dropped
 *                               (ans_snap): that thread frees it
 */
enum txi_state {
	TXS_QUEUED,
	TXS_LATE,		/* a ring frame without room yet: the first is t->sr_late */
	TXS_STAGED,		/* a ring frame whose copy is posted (ticket) into room ending at sr_end */
	TXS_GOING,		/* its bytes began to go out (tcp_tx_going) */
	TXS_GOING_STAGED,	/* and its ring copy is to be waited for (sr_send, sr_redo) */
	TXS_ORPHAN,
};

struct txi {			/* one frame to transmit */
	struct hdr h;
	struct gdx_xport_req *req;	/* request frames: the payload source */
	const void *data;		/* read responses: the region */
	struct gdx_device *dev;		/* data's device, if device memory */
	struct gdx_xport_rkey *k;
	void *extra;			/* response batches: the frames after h */
	size_t extra_len;
	size_t off;			/* bytes of the frame already sent */
	const void *pp;			/* the payload (host memory when small) */
	size_t plen;
	enum txi_path path;
	enum txi_state state;
	struct qent *q;			/* request frames: the request's outstanding entry */
	/*
	 * Copies of its payload were posted to the transmit lane (staged, or
	 * by tx_copy): a write over a read answer's region must wait for them,
	 * or be refused once the agent is halted.  Not a state: a frame whose
	 * ring copy sr_redo made again still had them.
	 */
	uint8_t acopy;
	uint32_t ticket;		/* staged: its copy's on the lane (gdx_stage_seen) */
	uint64_t sr_end;		/* staged: its room's end in the lane's ring, its mark */
	/*
	 * Read answers whose bytes still come out of the region (ans: on
	 * t->ans_head, lock held): a write that overlaps one takes them first
	 * (tcp_ans_settle, rule 1).  snap: that private copy of the payload's
	 * bytes from snap_off on; cnext: bytes of a device payload whose copies were
	 * posted (to the transmit thread's stream or the transmit lane).
	 * ans, settle and snapping are the receive thread's to move, beside the
	 * state the senders move, and not one enum: ans is cleared last and
	 * read without the lock (tcp_tx_free frees x once it sees it clear; in
	 * an enum, every free would take the lock), and a frame whose agent
	 * copies are waited for before it is let go (settle) has the bytes no
	 * copy was posted for yet snapped meanwhile (snapping).
	 */
	uint8_t ans, settle;		/* settle: tcp_ans_settle lets it go once its copies landed */
	/*
	 * snapping: the receive thread copies its bytes out of device memory
	 * with the lock dropped (ans_snap): no sender takes it (tcp_tx_blocked) or
	 * copies for it (tx_copy) meanwhile, and a tcp_tx_free leaves it to that
	 * thread to free (TXS_ORPHAN).
	 */
	uint8_t snapping;
	unsigned nans;			/* answers it carries (tcp_ep.ans_held) */
	uint8_t hold;			/* a lone response, held for a post (tcp_resp_hold) */
	struct txi *an_prev, *an_next;
	unsigned char *snap;
	size_t snap_off, cnext;
	struct txi *next;
};

/* Moves x to state s, one of the edges above.  Lock held. */
static inline void txi_set(struct txi *x, enum txi_state s)
{
	static const uint8_t edges[] = {
		[TXS_QUEUED] = 1u << TXS_LATE | 1u << TXS_STAGED | 1u << TXS_GOING,
		[TXS_LATE] = 1u << TXS_QUEUED | 1u << TXS_STAGED | 1u << TXS_GOING,
		[TXS_STAGED] = 1u << TXS_QUEUED | 1u << TXS_GOING_STAGED,
		[TXS_GOING] = 1u << TXS_ORPHAN,
		[TXS_GOING_STAGED] = 1u << TXS_ORPHAN,
		[TXS_ORPHAN] = 0,
	};

	assert(edges[x->state] & 1u << s);
	(void)edges;
	x->state = s;
}

static inline bool txi_going(const struct txi *x)
{
	return x->state >= TXS_GOING;
}

/* Its ring copy was posted and may not have landed: queued or taken. */
static inline bool txi_staged(const struct txi *x)
{
	return x->state == TXS_STAGED || x->state == TXS_GOING_STAGED;
}

struct qent {
	struct gdx_xport_req *req;
	void *data;
	uint64_t len;
	uint64_t kr_end;	/* a kept message in the kept ring: its end there, else 0 */
	int is_imm;
	uint32_t imm;
	int sent;		/* outstanding requests: its frame began to go out */
	struct qent *next;
};

/*
 * What the receive thread owes for a frame once the bytes it received into
 * device memory have landed: a local completion, the answer to the peer, or
 * both.  While one waits, the ones after it wait too (FIFO).
 */
struct deff {
	struct gdx_xport_req *req;	/* a local completion (receive, read), or NULL */
	struct gdx_xport_rkey *k;	/* a region written: held until its copies landed */
	uint64_t len, resp_id;
	int st, resp_st;
	uint32_t imm;
	uint8_t is_imm, has_resp, read_done;
	uint8_t dev;			/* it waits for the receive lane's copies posted before it */
	uint64_t kr_end;		/* a kept message copied on: the kept ring is free to here */
};

/* The endpoint's counters (stats scope xport.tcp.N): the stage ring's frames. */
enum {
	C_SR_FRAMES,		/* device payloads sent out of the stage ring */
	C_SR_LATE,		/* of them, queued late (sr_queue) */
	C_SR_CAUGHT_UP,		/* late ones staged when room came back, before the transmit
				   thread reached them (sr_catch_up) */
	C_SR_TX_COPIED,		/* late ones the transmit thread copied when it took them */
	C_KEPT_RING,		/* kept messages the receive thread copied on from the kept ring */
	C_KEPT_HOST,		/* and from host memory (the ring had no room) */
	C_SR_REDONE,		/* copies the halted agent owed a train taken, made again by
				   the transmit lane (REDO): sr_redo */
	C_TX_RECOPIED,		/* and a large frame's chunks so: tx_chunk_wait */
	C_ANS_PEAK,		/* the most answers queued at once (ans_held) */
	C_HELD_BACK,		/* times the receive thread stopped reading for them (rx_hold_back) */
	C_COPIES_PEAK,		/* the most bytes of answers' copies held at once (snap_held) */
	C_TX_DIRECT,		/* request frames posting threads (or the receive thread's kick)
				   wrote to the end: no hand-off to the transmit thread */
	C_TX_HANDED,		/* request frames the transmit thread wrote, or finished */
	C_RX_WAITER,		/* messages and answers a CQ waiter read and completed itself */
	C_RX_PART,		/* messages a CQ waiter began and the receive thread finished */
	C_RX_TAKES,		/* times a CQ waiter took the socket from the receive thread */
	C_RX_GIVES,		/* and gave it back */
	C_TX_WRITES,		/* socket writes (sendmsg calls) */
	C_RESP_RODE,		/* trains that carried a held response and a request posted
				   after it in one write (tcp_resp_hold) */
	C_RX_WAITER_DEV,	/* messages into device memory a CQ waiter received through
				   the receive lane itself, or began to (w_dev): no
				   hand-off to the receive thread */
	C_RX_DEV,		/* and those the receive thread received whole */
	C_RX_BUFFERED,		/* payload bytes a read for their header had taken into
				   rbuf, copied out of it (tcp_rbuf_room) */
	C_NR
};

/*
 * The endpoint, its fields grouped by who owns them.  The threads: the
 * posting threads (tcp_post.c; one of them at a time holds the socket for
 * writing, t->sending), the transmit thread (tcp_tx.c), the receive thread
 * (tcp_rx.c, tcp_ans.c), a CQ waiter that takes the socket from a parked
 * receive thread (tcp_wait.c), and the caller that connects, registers and
 * tears down (tcp_conn.c).  Lock order: stage_lock, lock, ans_lock (and the
 * staging context's own, inside gdx_stage_ctx_fail, before lock: its on_halt
 * takes lock, so no holder of lock fails the context).
 */
struct tcp_ep {
	/* Set before the threads start (ep_start), read-only after. */
	struct gdx_xport_ep *fe;
	int fd;
	bool wake_whole;	/* no kTLS: a payload's rest is waited for whole (gdx_rx_wait_for) */
	/*
	 * MSG_ZEROCOPY for large requests: set before the threads start, cleared
	 * once the kernel reports it copied (tcp_zc_reap); read atomically.
	 */
	int zerocopy;
	uint64_t rx_spin_ns;	/* xport.tcp_rx_spin_us: the receive thread polls this long before it parks */
	bool poll_read;		/* xport.tcp_poll_read: an empty poll reads the socket (tcp_wait) */
	/*
	 * xport.tcp_resp_hold_ms: at most this long a held response waits for
	 * the caller's next post to carry it (tcp_resp_hold), if the caller
	 * neither posts, polls an empty CQ nor sleeps meanwhile: the receive
	 * thread's park is timed while one waits (rx_park).
	 */
	int resp_hold_ms;
	uint64_t max_unexpected;
	unsigned ans_max;
	int ans_ms;
	size_t snap_max;
	pthread_t rx, tx;
	int threads;
	struct gdx_counter ctr[C_NR];	/* counters: atomic adds, any thread */
	struct gdx_stats *stats;

	/*
	 * lock: the queues and what posters, the transmit and receive threads
	 * and a CQ waiter share.  tx_cond: the transmit thread's wait for
	 * frames; rx_cond: the receive thread's for a receive (rx_stall_wait);
	 * flushed_cond: tcp_flush_all's; rd_cond: tcp_ans_settle's for senders
	 * to leave a region (rd_busy).
	 */
	pthread_mutex_t lock;
	pthread_cond_t tx_cond, rx_cond, flushed_cond;
	struct txi *txq_head, *txq_tail;
	unsigned qlen;		/* frames in the queue */
	struct qent *outst_head, *outst_tail;	/* requests awaiting a response */
	struct qent *recv_head, *recv_tail;
	struct qent *unexp_head, *unexp_tail;
	uint64_t unexpected_bytes;
	uint64_t next_id;
	long reads_in_flight;	/* sent and not answered: what FENCE waits for */
	/*
	 * Requests sent whole and not answered yet.  While there are some, the
	 * receive thread will come by with their answers, so a small request
	 * posted meanwhile may wait in the queue (held) for the next train:
	 * sent by the poster's next CQ poll or wait, or by the receive thread.
	 */
	long on_wire;
	int rx_stalled;		/* the receive thread waits for a receive to be posted */
	int sending;		/* a thread is writing a frame to the socket */
	/* dead: written with the lock held (tcp_kill_conn), read atomically where it is not */
	int dead, flushed;
	int rx_parked;		/* the receive thread waits between frames, rbuf empty */
	/*
	 * The lone response to a message, held in the queue for the caller's
	 * next post (txi.hold, tcp_resp_hold): resp_held, such frames queued
	 * (atomic: tcp_progress looks without the lock; moved with the lock
	 * held, dropped as they are freed); resp_holds, holds so far (the
	 * receive thread's timed park); rx_untimed, the receive thread sleeps
	 * without a timeout (rx_park): a hold wakes it to sleep timed.
	 */
	atomic_uint resp_held;
	unsigned long resp_holds;
	int rx_untimed;
	int w_reader;		/* a CQ waiter, w_tid, holds the socket */
	uint64_t w_until;	/* the holder is a poll: its reads end by then (tcp_wait) */
	/*
	 * The CQ waiter holding the socket posted copies to the receive lane
	 * (w_dev): the lane is its, producer and effects, until it has run
	 * them all or hands the socket back, and the receive thread leaves
	 * the lane alone meanwhile (rx_park's kept messages wait; the
	 * teardown waits on rx_cond).  Lock held.
	 */
	int w_lane;
	/*
	 * Its wait returned with a response held: the socket stays in the
	 * waiter's set, lent, for the caller's next sleep to take over without
	 * a move (tcp_wait).  Written with the lock held, read atomically
	 * where not.
	 */
	int w_lent;
	pthread_t w_tid;
	uint64_t big_id;	/* the last request of a large host payload (TXP_HOST) queued */
	/*
	 * Kept messages are handed to receives by the receive thread (kept_match)
	 * once the endpoint has a copy agent: it copies them on through the agent
	 * from the kept ring (pinned, the agent's device; rx thread only), or
	 * from host memory where the ring has no room, and their completions
	 * are deferred as a received message's are.  Posters only kick it
	 * (kept_kick).  Else (kept_rx 0) the poster copies.  Lock held for
	 * kept_rx; kr: head and tail, bytes taken and bytes free again.
	 */
	int kept_rx;
	/*
	 * The first late ring frame in the queue: none behind it takes room
	 * meanwhile, so every ring frame behind it is late too.  sr_whole: a
	 * late frame larger than a stage buffer is being sent through the
	 * ring's halves, which no other frame takes meanwhile.
	 */
	struct txi *sr_late;
	int sr_whole;
	struct txi *tx_hold;	/* frames a failed agent's copies may still read (tx_let_go) */
	/*
	 * Read answers still to be read out of their region (txi.ans), and the
	 * threads in a send that may read one's host memory (never blocking:
	 * tcp_ans_settle waits for them to leave it).
	 */
	struct txi *ans_head;
	int rd_busy, rd_waiting;
	pthread_cond_t rd_cond;

	/* Atomics: any thread, no lock. */
	atomic_int held;	/* frames may be waiting in the queue with nobody sending */
	atomic_int kept_kick;	/* a poster asks the receive thread to match kept messages */
	atomic_long rx_reads;	/* socket reads of the receive thread while parked */
	/*
	 * The receive side halted the failed agent (tcp_on_halt): device payloads
	 * are sent the stream path's way from here on (tcp_tx_sync_lane).
	 */
	int tx_noagent;
	/*
	 * Answers to the peer queued and not freed yet (tcp_tx_free, unlocked).
	 * A peer that asks and does not read the answers would have them pile
	 * up; beyond ans_max (xport.tcp_answers_max) the receive thread reads no
	 * more of its frames until half went out (rx_hold_back), and ends the
	 * connection if that takes ans_ms.  ans_lock, ans_cond: that wait's.
	 */
	atomic_uint ans_held;
	pthread_mutex_t ans_lock;
	pthread_cond_t ans_cond;
	/*
	 * Bytes of private copies read answers took because a write overlapped
	 * them (ans_snap; freed by tcp_tx_free, unlocked): at most snap_max
	 * (xport.tcp_answers_copy_max), beyond which such a write is refused as
	 * one whose copies could not be allocated.
	 */
	_Atomic size_t snap_held;

	/*
	 * The receive thread's; rbuf, rpos, rlen, resp and nresp the CQ
	 * waiter's while it holds the socket (w_reader).
	 *
	 * Who reads the socket (and rbuf): the receive thread, except while a
	 * caller sleeps in gdx_xport_cq_wait with answers or messages due and
	 * the receive thread is parked between frames with nothing buffered.  Then the
	 * sleeper takes the socket (w_reader): the socket leaves the receive
	 * thread's epoll set (rx_epfd) for the sleeper's (w_epfd, in the CQ's
	 * set), the answers and messages wake the sleeper alone, and it completes
	 * them itself (answers without payload, sends into host receives: w_send).
	 * On waking it hands the socket back; what it cannot handle (a read
	 * answer with data, another request of the peer, a partial frame) stays
	 * in rbuf and wakes the receive thread (rx_wake), as does a dying
	 * connection or a message it began (w_part).
	 */
	unsigned char *rbuf;
	size_t rpos, rlen;
	bool rx_big;		/* the last frame read carried GDX_RX_BIG or more (tcp_rx_saw) */
	int rx_epfd, w_epfd, rx_wake;	/* set at ep_start */
	int rx_boundary;	/* no byte of the next frame read */
	/*
	 * Responses the receive thread owes, sent together when it next waits for
	 * input (or before anything else it sends), or once they answer
	 * RESP_BATCH frames or RESP_BYTES, so a burst of requests is answered
	 * with one write every few instead of one each.  A CQ waiter holding
	 * the socket owes its own here and sends them before it hands it back.
	 */
	struct hdr resp[RESP_BATCH];
	unsigned nresp, nresp_msg;	/* nresp_msg: of them, to messages that completed a receive */
	uint64_t resp_bytes;	/* payload of the sends and writes read since they last went */
	unsigned char *kr_mem;	/* the kept ring (kept_rx) */
	struct gdx_byte_ring kr;
	int rx_err;		/* an answer could not be queued (fatal) */
	int ans_said, snap_said;	/* rx_hold_back and ans_snap logged once */
	/*
	 * Staging of the endpoint's device (opts.dev, at connect or accept) or
	 * else the first device's memory posted or registered (mem/stage.h):
	 * stage_dev, that device, published with release once the rest is set
	 * up (tcp_stage_prepare); stage, its context with the copy agent (rings
	 * RR_RX and RR_TX; NULL: none started); rx_lane, the receive lane on
	 * RR_RX (H2D; the receive thread's, its one producer; tcp_rx_lane);
	 * tx_lane, the transmit lane on RR_TX (D2H, the stage ring: a frame's
	 * room is taken and its copy posted when it is queued; its producer is
	 * whoever holds lock; other threads see its copies land by their
	 * tickets, gdx_stage_seen and gdx_stage_watch_post, without the lock;
	 * tcp_tx_lane); stage_stopped, tcp_stage_stop ran: nothing starts any
	 * more (atomic); rx_draining, the teardown fails the effects left
	 * (receive thread).  stage_lock: the set-up, and additions to rxs and
	 * txs, the lanes of other devices (a device each), published with
	 * release and read without it; an rxs lane's producer is the receive
	 * thread, a txs lane's whoever holds lock (the transmit thread).
	 */
	struct gdx_device *stage_dev;
	struct gdx_stage_ctx *stage;
	struct gdx_stage *rx_lane, *tx_lane;
	int stage_stopped, rx_draining;
	pthread_mutex_t stage_lock;
	struct tcp_dlane *rxs, *txs;

	/* The transmit thread's. */
	int tx_agent_err;	/* the agent failed it (said once) */

	/*
	 * A message the CQ waiter began to receive and left to the receive
	 * thread (its payload did not come in time, or the receive lane
	 * failed it: w_send): the receive, the frame and the bytes of it
	 * already in the buffer (or posted to the lane).  Set by the waiter
	 * with the lock held before it hands the socket back; the receive thread
	 * finishes it before it reads anything else (rx_part).
	 */
	struct {
		struct qent *r;
		uint64_t id, len, got;
		int dev;	/* the bytes got went through the receive lane (w_dev) */
		int err;	/* the lane failed it: the rest is read and dropped */
	} w_part;

	/* The CQ waiter's, with the lock held (w_take). */
	long w_mark;		/* rx_reads when a waiter last took the socket */
	unsigned long w_done, w_done_mark;	/* frames waiters completed; at the last take */
	int w_took, w_exp;	/* the last chance was taken; failures in a row (capped) */
	unsigned w_skip;	/* chances left out before the next try */
};

#define Q_PUSH(e, headp, tailp)                      \
	do {                                         \
		(e)->next = NULL;                    \
		if (*(tailp))                        \
			(*(tailp))->next = (e);      \
		else                                 \
			*(headp) = (e);              \
		*(tailp) = (e);                      \
	} while (0)

static inline struct qent *q_pop(struct qent **head, struct qent **tail)
{
	struct qent *e = *head;

	if (e) {
		*head = e->next;
		if (!*head)
			*tail = NULL;
	}
	return e;
}

/* Puts e back at the head of a queue q_pop took it from (it is the oldest again). */
static inline void q_unpop(struct qent *e, struct qent **head, struct qent **tail)
{
	e->next = *head;
	*head = e;
	if (!*tail)
		*tail = e;
}

#define RR_ENTRIES 1024u	/* agent descriptors per ring: copies in flight */
#define RR_RX 0			/* the agent's ring of the receive thread's copies */
#define RR_TX 1			/* and of the transmit thread's */

/*
 * The receive lane, or NULL (no device set up yet, or no agent on it):
 * receive thread.  Set before stage_dev is published, so read after it.
 */
static inline struct gdx_stage *tcp_rx_lane(struct tcp_ep *t)
{
	return __atomic_load_n(&t->stage_dev, __ATOMIC_ACQUIRE) ? t->rx_lane : NULL;
}

/* The receive lane's copies go to the agent (not synchronously since a fault). */
static inline int tcp_rx_agent(struct gdx_stage *rx)
{
	return rx && gdx_stage_mode_of(rx) != GDX_STAGE_SYNC;
}

/* Effects the receive lane still holds: receive thread. */
static inline unsigned tcp_rx_deferred(struct tcp_ep *t)
{
	struct gdx_stage *rx = tcp_rx_lane(t);

	return rx ? gdx_stage_deferred(rx) : 0;
}

/* What a read into rbuf asks for (gdx_rx_ask): the socket's reader. */
static inline size_t tcp_rbuf_room(const struct tcp_ep *t, size_t need)
{
	return gdx_rx_ask(t->rx_big, RBUF_SIZE - t->rlen, need);
}

/*
 * Frame h was read (its header): whether the next payload is likely as
 * large.  Answers without payload say nothing about it.
 */
static inline void tcp_rx_saw(struct tcp_ep *t, const struct hdr *h)
{
	if (h->type == F_SEND || h->type == F_WRITE || h->type == F_READ_RESP)
		t->rx_big = h->len >= GDX_RX_BIG;
	if (h->type == F_SEND || h->type == F_WRITE)
		t->resp_bytes += h->len;
}

/* The one response owed answers a message that completed a receive (tcp_resp_hold). */
static inline bool tcp_resp_lone(const struct tcp_ep *t)
{
	return t->nresp == 1 && t->nresp_msg == 1;
}

/*
 * The device frame queued right behind held responses at the head of the
 * queue, or NULL: the transmit thread, which that frame needs, sends them in
 * its train (tx_gather leaves them to it).  Lock held.
 */
static inline struct txi *tcp_held_lead(const struct tcp_ep *t)
{
	struct txi *x = t->txq_head;

	while (x && x->hold)
		x = x->next;
	return x != t->txq_head && x && x->dev ? x : NULL;
}

/* tcp_stage.c: staging, several threads */
void tcp_dlanes_free(struct tcp_dlane **list);
int tcp_rx_settle(struct tcp_ep *t);
void tcp_defer_wait(struct tcp_ep *t);
int tcp_defer(struct tcp_ep *t, struct deff *e, int dev);
struct gdx_stage *tcp_dlane_of(struct tcp_dlane **list, const struct gdx_device *dev);
int tcp_stage_prepare(struct tcp_ep *t, struct gdx_device *dev, int rx, int tx);
int tcp_rx_post_kept(struct tcp_ep *t, void *dst, const void *src, size_t n);
void tcp_stage_stop(struct tcp_ep *t);
int tcp_rx_idle(struct tcp_ep *t, int park);
int tcp_lane_idle(struct tcp_ep *t);
struct gdx_stage *tcp_rx_sync_lane(struct tcp_ep *t, struct gdx_device *dev);
unsigned char *tcp_kr_take(struct tcp_ep *t, size_t n, uint64_t *end);
int tcp_tx_noagent(struct tcp_ep *t);
struct gdx_stage *tcp_tx_lane(struct tcp_ep *t, const struct gdx_device *dev);
struct gdx_stage *tcp_tx_sync_lane(struct tcp_ep *t, const struct gdx_device *dev);
int tcp_tx_sync(struct tcp_ep *t, const struct gdx_device *dev);
int tcp_tx_copies_wait(struct tcp_ep *t, struct gdx_device *dev);
int tcp_sr_stage(struct txi *x, struct gdx_stage *tx);

/* tcp_wait.c: the CQ waiter */
void tcp_wait(void *priv, int sleeping);
void tcp_lend_end(struct tcp_ep *t, int poll);

/* tcp_ans.c: rule 1, the receive thread */
void tcp_ans_unlink(struct tcp_ep *t, struct txi *x);
void tcp_ans_gone(struct tcp_ep *t, unsigned n);
int tcp_ans_settle(struct tcp_ep *t, const void *p, uint64_t n);

/* tcp_rx.c: the receive thread */
void tcp_rx_wakeup(struct tcp_ep *t);
void tcp_deff_run(struct tcp_ep *t, struct deff *e, int fail);
int tcp_resp_flush(struct tcp_ep *t);
int tcp_resp_hold(struct tcp_ep *t);
int tcp_resp_owe(struct tcp_ep *t, uint8_t type, uint64_t id, int status, int msg);
void tcp_match(void *priv);
int tcp_resp_take(struct tcp_ep *t, const struct hdr *h, int quiet, struct qent **out);
void *tcp_rx_main(void *arg);

/* tcp_tx.c: the transmit thread */
void tcp_tx_drop_agent(struct tcp_ep *t);
void tcp_tx_payload(struct txi *x, const void **p, struct gdx_device **dev, size_t *n);
void tcp_tx_free(struct tcp_ep *t, struct txi *x);
void tcp_tx_free_list(struct tcp_ep *t, struct txi *x);
int tcp_sr_early(const struct txi *x);
struct txi *tcp_sr_late_next(const struct txi *x);
void tcp_sr_catch_up(struct tcp_ep *t, struct gdx_stage *tx);
void *tcp_tx_main(void *arg);

/* tcp_post.c: the posting threads */
void tcp_deliver_unexpected(struct gdx_xport_req *req, struct qent *u);
void tcp_kept_kick_locked(struct tcp_ep *t);
void tcp_zc_reap(struct tcp_ep *t);
int tcp_send_iov(struct tcp_ep *t, struct iovec *iov, int cnt, int flags, size_t *sent);
int tcp_tx_host(struct tcp_ep *t, struct txi *x, const void *p, size_t n);
int tcp_tx_answer(struct tcp_ep *t, struct txi *x, size_t n);
int tcp_tx_blocked(struct tcp_ep *t, struct txi *x);
void tcp_tx_going(struct tcp_ep *t, struct txi *x);
void tcp_tx_begin(struct tcp_ep *t, struct txi *x);
void tcp_tx_wait_out(struct tcp_ep *t);
int tcp_tx_train(struct tcp_ep *t, struct txi **done, int by_tx);
void tcp_tx_kick(struct tcp_ep *t);
void tcp_resp_push(struct tcp_ep *t);
int tcp_progress(void *priv);
int tcp_ans_submit(struct tcp_ep *t, struct txi *x, unsigned n);
int tcp_post(void *priv, struct gdx_xport_req *req);

/* tcp_conn.c: the caller's thread */
void tcp_kill_conn(struct tcp_ep *t, int why);
void tcp_flush_all(struct tcp_ep *t);
int tcp_dev_mem(enum gdx_mem_kind kind, const struct gdx_device *dev);

#endif
