/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_TARGET_TCP_INT_H
#define GDX_NVMF_TARGET_TCP_INT_H

/*
 * NVMe/TCP target transport.
 *
 * Reactors: one thread per configured core, each with an epoll set, an
 * eventfd to be woken, and an io_uring (through nvmf_ioctx) for file
 * namespaces.  Reactor 0 also owns the listening sockets and hands accepted
 * connections round-robin to all reactors.  A connection lives on one
 * reactor for its whole life, so its state needs no lock.
 *
 * Receive path: bytes are read into a staging buffer and parsed by length
 * (PDUs split or coalesced arbitrarily are normal); once a PDU's data is due
 * and nothing else is staged, recv() goes straight into the command's I/O
 * buffer, which for RAM namespaces is the namespace memory itself.
 *
 * Send path: each PDU to send is a tx item (header, data pointer, data
 * digest) on the connection's queue; the queue is flushed with sendmsg()
 * once per loop iteration, so completions that arrive together leave in one
 * system call.
 *
 * Lifetime: nvmf_tcp_conn_close ends a connection wherever it is called from; only
 * flush_dirty, at the end of an iteration, frees it (nvmf_tcp_conn_reap).
 *
 * Limits (docs/reliability.md): connections (max_conns, a spare descriptor
 * to refuse with at the fd limit), the handshake's time, request buffers per
 * connection and in all (back-pressure: no more commands parsed or read),
 * and a send queue that makes no progress (stall timeout).
 */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/tls.h"
#include "common/util.h"
#include "nvmf/proto/tcp.h"
#include "nvmf/target/tcp.h"

#define RXBUF_SIZE (64 * 1024)
#define DIRECT_RECV_MIN 4096	/* data at least this large is received in place */
#define ADMIN_INLINE 8192	/* the Linux host assumes 8 KiB in-capsule on admin */
#define MAX_SLOTS 512		/* 2 x the deepest queue: CIDs recycle before we free */
#define PRE_CONNECT_SLOTS 4
#define IOV_BATCH 64
#define ACCEPT_PAUSE_MIN_NS (10ull * 1000000)	/* accept that cannot refuse: paused, */
#define ACCEPT_PAUSE_MAX_NS 1000000000ull	/* doubling up to this */
#define SPLICE_MIN (64 * 1024)	/* reads this large leave namespace memory without a copy */
#define PIPE_SIZE (1 << 20)
#define PLACE_NS (20ull * 1000000)	/* how often a following reactor reconsiders its CPU */
#define SHALLOW_DEPTH 2		/* commands in flight up to which a reactor follows */
#define FOLLOW_AFTER 5		/* ...for this many placement periods in a row */
#define PROBE_EVERY 10		/* a following reactor spends one period in this many at home */

enum ev_kind { EV_LISTEN, EV_WAKE, EV_IOCTX, EV_CONN };

struct ev {
	enum ev_kind kind;
};

struct listener {
	struct ev ev;
	int fd;
	struct nvmf_port *port;
};

struct tx_item {
	struct tx_item *next;
	uint8_t hdr[GDX_TCP_TERM_HLEN + GDX_TCP_TERM_MAX_DATA];
	uint32_t hdr_len;
	const void *data;
	uint32_t data_len;
	uint32_t ddgst;
	bool has_ddgst;
	bool splice;		/* data goes out by vmsplice + splice */
	uint32_t sent;
	enum { TX_PLAIN, TX_C2H_FINAL, TX_RSP, TX_TERM } kind;
	struct tcp_req *req;
};

enum req_state { REQ_FREE, REQ_RX_CAPSULE, REQ_WAIT_BUF, REQ_R2T, REQ_EXEC, REQ_TX };

struct tcp_req {
	struct nvmf_req req;
	struct tcp_conn *conn;
	uint16_t ttag;
	enum req_state state;
	uint16_t status;	/* failure found before execution */
	bool ddgst_err;
	void *own_buf;
	uint32_t own_cap;
	uint32_t h2c_done;
	struct tx_item tx_data, tx_rsp;
	struct tcp_req *next_free;
	struct nvmf_buf_wait wait;	/* REQ_WAIT_BUF: in the connection's wait list */
	bool timed;		/* an I/O read whose stages are summed */
	uint64_t t_wake, t_sub, t_done;
};

enum rx_state { RX_HDR, RX_PAD, RX_DATA, RX_DDGST };

struct tcp_conn {
	struct ev ev;
	int fd;
	struct gdx_nvmf_target *tgt;
	struct tcp_reactor *r;
	struct tcp_conn *next, *prev;
	struct tcp_conn *dirty_next;
	bool dirty;
	bool dead;		/* closed; nvmf_tcp_conn_reap frees it once nothing is in flight */
	struct tcp_reactor *move_to;	/* after Connect: the reactor for this QID */
	bool local;
	bool same_host;		/* the host connected from an address of this machine */
	bool want_out;
	unsigned inflight;	/* requests held by a backend or an AER */
	/*
	 * PDUs received / queued, not yet added to the target's counters: those
	 * are shared by every reactor, so they are added once per receive pass
	 * and once per send rather than per PDU.
	 */
	unsigned pdus_in, pdus_out;
	uint64_t staged;	/* and data bytes copied out of rxbuf (TGT_CTR_STAGED) */
	unsigned win_cmds, win_depth;	/* commands, deepest queue since the last placement */
	char peer[64];
	uint64_t born_ns;
	/* a TLS port: the first byte is awaited (tls_peek), then the handshake runs (tls) */
	bool tls_peek;
	struct gdx_tls_hs *tls;
	char tls_nqn[2][GDX_NVME_NQN_SIZE];	/* host, subsystem: the PSK identity's */
	struct nvmf_sq sq;
	struct gdx_stats *sq_stats;
	struct gdx_tcp_params params;
	enum gdx_tcp_phase phase;

	/* receive */
	enum rx_state rx;
	union gdx_tcp_pdu hdr;
	uint32_t hdr_have, hdr_need;
	struct gdx_tcp_pdu_info info;
	struct tcp_req *rx_req;
	uint8_t *data_dst;	/* NULL: discard */
	uint32_t data_left, pad_left;
	uint32_t crc;
	uint8_t ddgst[4];
	uint32_t ddgst_have;
	uint8_t *rxbuf;
	uint32_t rx_off, rx_len;
	bool rx_big;		/* the last PDU's data was GDX_RX_BIG or more (gdx_rx_ask) */
	/*
	 * Back-pressure: while the connection holds its share of request buffers
	 * (conn_fits), commands that need one (reads through a bounce buffer,
	 * writes through R2T) wait in bufs, in order, neither run nor asked data
	 * for.  The socket is still read: H2CData for writes already under way
	 * must get in, and the command slots (2 x SQ size) bound what can wait.
	 */
	struct nvmf_bufs bufs;
	unsigned nr2t;		/* requests waiting for H2CData */
	uint64_t rx_moved_ns;	/* the first of them was asked for, or data came */

	/* send */
	struct tx_item *tx_head, **tx_tail;
	int pipe[2];		/* for spliced data; -1 until needed */
	uint32_t piped;		/* bytes of the head item's data in the pipe */
	struct tx_item conn_tx;
	uint64_t tx_moved_ns;	/* the queue last got non-empty or sent bytes */

	/* command slots, indexed by TTAG */
	struct tcp_req *slots[MAX_SLOTS];
	unsigned nslots, nused;
	struct tcp_req *free_reqs;
};

struct tcp_reactor {
	struct ev wake_ev;
	struct ev io_ev;
	struct gdx_nvmf_target *tgt;
	unsigned id;
	int cpu;		/* pinned to, or -1 */
	int at;			/* following: the CPU the traffic comes from; -1: at home */
	bool shares_home;	/* following: the traffic comes from the home CPU */
	unsigned shallow;	/* placement periods in a row at SHALLOW_DEPTH or less */
	unsigned followed;	/* placement periods on the CPU followed (PROBE_EVERY) */
	cpu_set_t home;
	pthread_t thread;
	int epfd;
	int wakefd;
	_Atomic bool stop;
	_Atomic bool aen;
	struct nvmf_ioctx *ioctx;
	struct listener listeners[NVMF_MAX_PORTS];
	unsigned nlisteners;
	/*
	 * Out of descriptors, accept() fails and the connection stays queued:
	 * closing this spare lets one more be accepted and closed, so clients
	 * are refused instead of left to time out.
	 */
	int reserve_fd;
	uint64_t accept_pause_ns;	/* current pause; 0: none since the last accept */
	uint64_t accept_resume_ns;	/* listeners paused until then; 0: not paused */
	struct nvmf_log_limit accept_log;
	struct nvmf_log_limit hold_log;
	pthread_mutex_t lock;	/* handoff of accepted sockets */
	struct handoff {
		int fd;
		struct nvmf_port *port;
		struct tcp_conn *conn;	/* a connection moving here from another reactor */
	} *handoff;
	unsigned nhandoff, handoff_cap;
	struct tcp_conn *conns;
	struct tcp_conn *dirty;
	void *zeroes;		/* max_io zeroed bytes: see reactor_zeroes */
	uint64_t wake_ns;	/* when this iteration's events were got */
	unsigned iter_cmds;	/* capsules parsed in this iteration */
	struct tgt_lat lat;
};

/* Only the reactor writes its sums: no read-modify-write on the bus. */
static inline void lat_add(struct tcp_reactor *r, unsigned i, uint64_t v)
{
	atomic_store_explicit(&r->lat.v[i],
			      atomic_load_explicit(&r->lat.v[i], memory_order_relaxed) + v,
			      memory_order_relaxed);
}

/*
 * The reactor iteration's time (to within a sleep, at most a second), for the
 * stall timer: no clock read on the data path (a system call on some
 * machines).  Local connections have no timers.
 */
static inline uint64_t conn_now(const struct tcp_conn *c)
{
	return c->r ? c->r->wake_ns : 0;
}

/* Local connections have no reactor: their feeder flushes and reaps them. */
static inline void mark_dirty(struct tcp_conn *c)
{
	if (c->dirty || c->local)
		return;
	c->dirty = true;
	c->dirty_next = c->r->dirty;
	c->r->dirty = c;
}

/* tcp_conn.c: connection life */
void nvmf_tcp_handle_icreq(struct tcp_conn *c);
void nvmf_tcp_conn_close(struct tcp_conn *c, const char *why);
bool nvmf_tcp_conn_reap(struct tcp_conn *c);
void nvmf_tcp_conn_link(struct tcp_reactor *r, struct tcp_conn *c);
void nvmf_tcp_conn_tls(struct tcp_conn *c);
void nvmf_tcp_accept(struct tcp_reactor *r, struct listener *l);
void nvmf_tcp_accept_resume(struct tcp_reactor *r);
void nvmf_tcp_take_handoffs(struct tcp_reactor *r);
void nvmf_tcp_conn_move(struct tcp_conn *c);

/* tcp_rx.c: receive */
void nvmf_tcp_req_free(struct tcp_req *t);
void nvmf_tcp_req_buf_drop(struct tcp_req *t);
void nvmf_tcp_conn_trim(struct tcp_conn *c);
void nvmf_tcp_conn_unblock(struct tcp_conn *c);
void nvmf_tcp_rx_expect_hdr(struct tcp_conn *c);
int nvmf_tcp_rx_consume(struct tcp_conn *c, const uint8_t *buf, uint32_t len);
void nvmf_tcp_conn_read(struct tcp_conn *c);

/* tcp_tx.c: send */
void nvmf_tcp_tx_queue(struct tcp_conn *c, struct tx_item *it);
void nvmf_tcp_set_epollout(struct tcp_conn *c, bool on);
void nvmf_tcp_count_pdus(struct tcp_conn *c);
void nvmf_tcp_conn_flush(struct tcp_conn *c);
void nvmf_tcp_conn_fatal(struct tcp_conn *c, const struct gdx_tcp_err *err);
void nvmf_tcp_req_done(struct nvmf_req *nr);

/* tcp_reactor.c: reactors */
void nvmf_tcp_reactor_wake(struct tcp_reactor *r);
void nvmf_tcp_aen_kick(void *handle);

#endif
