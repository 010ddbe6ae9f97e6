/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_TARGET_RDMA_INT_H
#define GDX_NVMF_TARGET_RDMA_INT_H

/*
 * NVMe/RDMA target transport (the NVMe-oF RDMA transport binding).
 *
 * Reactor 0 owns the rdma_cm listeners.  A connect request is checked
 * against the queue limits (a bad one gets a CM reject with the binding's
 * status), then its cm_id migrates to the event channel of the reactor that
 * serves the queue's QID, which sets up the queue pair and accepts.  From
 * then on one reactor owns the queue: its CM events, its completion queue
 * (on the reactor's completion channel for that device) and its requests.
 *
 * A command arrives as a RECV of the 64-byte SQE plus in-capsule data.  The
 * receive is posted again as soon as the command is copied out of it.  Data
 * described by a keyed SGL moves by RDMA READ into the request's registered
 * buffer before the command runs (host to controller), or by RDMA WRITE from
 * it, posted unsignaled right ahead of the response SEND (controller to
 * host): the reliable connection delivers the WRITE before the SEND, so the
 * response's completion is the request's end.  Work requests are not posted
 * one command at a time: a queue collects those of one pass (a batch of up
 * to 32 completions polled from its completion queue, or what else an
 * iteration of the reactor started) in order and posts them at the end with
 * one ibv_post_send, one doorbell (on rdma_rxe a system call) for the pass.  Namespace memory (RAM, null)
 * is copied through that buffer rather than registered: a RAM namespace hands
 * pages back to the kernel on deallocate, which a registration would not see.
 *
 * Request buffers are counted per queue and in the target's total against
 * nvmf.target.conn_buf_max and buf_max by the helpers TCP uses too
 * (nvmf_bufs_*).  Over either, a command that needs one (keyed data either
 * way) waits, in order, holding its SQ slot and no buffer: the host can have
 * no more commands out than the queue has entries, which bounds what waits.
 * Commands under way go on and free theirs; the reactor starts waiting ones
 * at the end of the iteration whose completions freed buffers.  In-capsule
 * data is not held back: the receives bound it already.
 *
 * Nothing waits for the host's CPU to take data: a WRITE lands in its memory
 * and a READ is answered by its NIC, and the reliable connection retries
 * either a bounded number of times (retry_count) before the completion fails
 * and ends the queue.  What does wait on the host's software is a response
 * SEND when the host has no receive posted: receiver-not-ready is retried
 * without end (RNR retry 7, as hosts ask and nvmet-rdma accepts), and every
 * work request behind it on the queue pair waits too, buffers held, while the
 * host's commands (Keep Alive too) still come in.  A queue whose READs and
 * SENDs see no completion for nvmf.target.stall_timeout_ms is ended.
 *
 * A queue ends (the host disconnects, a completion fails, the host breaks the
 * protocol, keep-alive expires, the target stops) by rdma_disconnect, which
 * moves the queue pair to the error state, and one drain RECV and one drain
 * SEND posted behind everything else: once both come back flushed, no work
 * request of the queue is left, and once no request is held by a namespace
 * either, the reactor frees the queue at the end of its iteration.
 *
 * Files, by role (all of a queue runs on the reactor that owns it):
 * rdma_cm.c (devices, listeners, connect requests, the hand-off to a
 * reactor, a queue's set-up and accept, its CM events), rdma_queue.c (the
 * data path: requests, buffers, capsules, completions, a queue's end) and
 * rdma_reactor.c (the loop, the once-a-second timers, start and stop).
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "nvmf/proto/rdma.h"
#include "nvmf/target/target_int.h"

#define SUBSYS "nvmf"
#define ADMIN_INLINE 4096	/* in-capsule data an admin queue takes (Connect data fits) */
#define STOP_DRAIN_MS 5000	/* how long stopping waits for queues to drain */
/* how long a device may take to give an ended queue's work requests back: its drain
 * requests and, on a shared receive queue, Last WQE Reached */
#define DRAIN_NS (2ull * 1000000000)
#define MAX_DEVS 8		/* RDMA devices a reactor serves */
#define LISTEN_BACKLOG 128
#define POLL_CHECK 16		/* polls between two looks at the clock and epoll (reactor_main) */

enum ev_kind { EV_LISTEN_CM, EV_CM, EV_CQ, EV_WAKE, EV_IOCTX, EV_ASYNC };

struct ev {
	enum ev_kind kind;
};

/* What a work request's wr_id points at. */
enum wr_kind { WR_RECV, WR_READ, WR_WRITE, WR_SEND, WR_DRAIN_RECV, WR_DRAIN_SEND };

struct wr_ctx {
	enum wr_kind kind;
};

/* One protection domain per RDMA device, shared by every queue on it. */
struct rdma_dev {
	struct rdma_dev *next;
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	unsigned refs;
	int max_rd_atom;	/* RDMA READs a queue pair may have in flight */
	int max_srq_wr;		/* receives a shared receive queue may hold; 0: none */
};

struct rdma_recv {
	struct wr_ctx ctx;
	uint8_t *buf;		/* SQE, then in-capsule data */
	struct ibv_sge sge;
	struct ibv_recv_wr wr;
	struct ibv_srq *srq;	/* the reactor's shared receive queue it is posted to; NULL:
				 * the queue pair's own */
};

enum rreq_state { RR_FREE, RR_WAIT_BUF, RR_DATA_IN, RR_EXEC, RR_RESPOND };

struct rdma_req {
	struct nvmf_req req;
	struct wr_ctx read_ctx;
	struct wr_ctx write_ctx;	/* unsignaled: completes only in error */
	struct wr_ctx send_ctx;
	struct rdma_queue *q;
	enum rreq_state state;
	enum gdx_nvme_xfer dir;
	struct gdx_rdma_sgl_info sgl;
	void *mapped;		/* namespace memory, copied through buf */
	void *buf;		/* registered, page aligned, grown on demand */
	uint32_t cap;
	struct ibv_mr *mr;
	struct gdx_nvme_cqe *rsp;	/* in the queue's registered responses */
	/* queued on the queue's pass until posted: the data WR (READ, or WRITE ahead of send_wr) */
	struct ibv_sge data_sge, rsp_sge;
	struct ibv_send_wr data_wr, send_wr;
	struct rdma_req *next_free;
	struct nvmf_buf_wait wait;	/* RR_WAIT_BUF: in the queue's wait list */
};

enum q_state { Q_LIVE, Q_DRAINING, Q_DEAD };

struct rdma_queue {
	struct gdx_nvmf_target *tgt;
	struct rdma_reactor *r;
	struct rdma_queue *next, *prev;
	struct rdma_cm_id *id;
	struct rdma_dev *dev;
	struct ibv_cq *cq;
	struct nvmf_sq sq;
	struct gdx_stats *sq_stats;
	enum q_state state;
	uint64_t ended_ns;
	bool drained_recv, drained_send;
	/*
	 * The device took the last receive it will of the shared receive queue
	 * (IBV_EVENT_QP_LAST_WQE_REACHED, read on reactor 0): only then may the
	 * queue pair go, or a receive it holds would be lost to the shared queue.
	 * True from the start on a queue pair with receives of its own.
	 */
	_Atomic bool last_wqe;
	bool reaped;
	char peer[64];
	uint64_t born_ns;
	uint16_t depth;		/* SQ entries: receives posted, requests */
	uint32_t inline_max;	/* in-capsule data bytes a receive holds */
	struct ibv_srq *srq;	/* the reactor's that its commands come from; NULL: its own */
	uint8_t *recv_mem;
	struct ibv_mr *recv_mr;
	struct rdma_recv *recvs;
	struct gdx_nvme_cqe *rsps;
	struct ibv_mr *rsp_mr;
	struct rdma_req *reqs;
	struct rdma_req *free_reqs;
	unsigned nused;		/* requests not free: data, namespace or response outstanding */
	struct wr_ctx drain_recv, drain_send;
	/*
	 * Send-queue work requests of this pass, in order, not yet posted: one
	 * ibv_post_send at the end of the pass takes them all (one doorbell, a
	 * system call on rdma_rxe, for every command the pass answered).
	 */
	struct ibv_send_wr *post_head, **post_tail;
	uint64_t ncmds, nposts;	/* capsules taken, ibv_post_send calls for them: logged at the end */
	struct nvmf_bufs bufs;	/* request buffers held, and the commands waiting for them */
	/* the stall timer: READs and SENDs posted and not back, and how many came back */
	unsigned nposted;
	uint64_t ncompleted, tick_completed;
	uint64_t stuck_ns;	/* when a tick first saw work posted and none back; 0: moving */
};

/* A completion channel of one device, on one reactor. */
struct rdma_cc {
	struct ev ev;
	struct ibv_comp_channel *cc;
	struct ibv_context *verbs;
	/*
	 * The shared receive queue its queue pairs take commands from (NULL where
	 * the device has none, or nvmf.target.rdma_srq is 0): capsules are copied
	 * out of a receive as it completes and the receive is posted again, so it
	 * only has to cover what arrives between two polls, not every queue's depth.
	 */
	struct ibv_srq *srq;
	struct rdma_dev *dev;	/* held while the shared receive queue lives */
	uint8_t *srq_mem;
	struct ibv_mr *srq_mr;
	struct rdma_recv *srq_recvs;
};

/* A connect request on its way from reactor 0 to the queue's reactor. */
struct handoff {
	struct rdma_cm_id *id;
	struct nvmf_port *port;
	struct gdx_rdma_queue_req qr;
	uint8_t initiator_depth, responder_resources;
};

struct rdma_reactor {
	struct rdma_tgt *rt;
	unsigned id;
	pthread_t thread;
	bool started;
	int epfd;
	int wakefd;
	struct ev wake_ev, io_ev, cm_ev;
	struct rdma_event_channel *cm_ch;
	struct rdma_cc ccs[MAX_DEVS];
	unsigned ncc;
	struct nvmf_ioctx *ioctx;
	_Atomic bool stop;
	_Atomic bool aen;
	pthread_mutex_t lock;	/* handoffs */
	struct handoff *handoff;
	unsigned nhandoff, handoff_cap;
	struct rdma_queue *queues;
	bool polling;		/* inside a --poll-us window: completion queues left unarmed */
	/* logged at the end: polling passes, clock reads and epoll_waits (with or without a
	 * timeout), for the system calls a pass costs */
	uint64_t npolls, nclock, nwaits;
	struct rdma_queue **reap;
	unsigned nreap, reap_cap;
	struct nvmf_log_limit hold_log;
};

/* A device's asynchronous event queue, read by reactor 0. */
struct rdma_async {
	struct ev ev;
	struct ibv_context *verbs;
};

struct rdma_listener {
	struct rdma_cm_id *id;
	struct nvmf_port *port;
};

struct rdma_tgt {
	struct gdx_nvmf_target *t;
	struct rdma_reactor *reactors;
	unsigned nreactors;
	struct ev listen_ev;
	struct rdma_event_channel *listen_ch;	/* on reactor 0 */
	struct rdma_listener listeners[NVMF_MAX_PORTS];
	unsigned nlisteners;
	_Atomic unsigned next_reactor;
	pthread_mutex_t dev_lock;
	struct rdma_dev *devs;
	/* every device a queue was set up on, for as long as the transport runs (dev_lock) */
	struct rdma_async async[MAX_DEVS];
	unsigned nasync;
	_Atomic bool no_last_wqe_logged;
};

/* rdma_queue.c: the data path */
int nvmf_rdma_post_recv(struct rdma_queue *q, struct rdma_recv *rv);
/* Starts what waits for buffers while it fits. */
void nvmf_rdma_queue_unblock(struct rdma_queue *q);
/* Frees the buffers free requests keep for reuse. */
void nvmf_rdma_queue_trim(struct rdma_queue *q);
/* Posts the work requests queued since the last post, with one ibv_post_send. */
void nvmf_rdma_post_queued(struct rdma_queue *q);
/* Handles what the queue's completion queue holds and posts what that queued; how many
 * completions. */
unsigned nvmf_rdma_poll_cq(struct rdma_queue *q);
/* Asks for an event at the next completion, then looks once more. */
void nvmf_rdma_arm_cq(struct rdma_queue *q);
void nvmf_rdma_cq_events(struct rdma_reactor *r, struct rdma_cc *c);
/* Ends a queue (why: logged; NULL: already logged); it is freed once drained. */
void nvmf_rdma_queue_end(struct rdma_queue *q, const char *why);
/* Frees the queue at the end of the reactor's iteration. */
void nvmf_rdma_reap_later(struct rdma_queue *q);
/* An ended queue: freed once nothing of it is left in flight. */
void nvmf_rdma_queue_maybe_reap(struct rdma_queue *q);
void nvmf_rdma_queue_free(struct rdma_queue *q);

/* rdma_cm.c: devices, listeners, connecting */
void nvmf_rdma_dev_put(struct rdma_tgt *rt, struct rdma_dev *d);
/* Frees the reactor's shared receive queue on c's device, once no queue pair uses it. */
void nvmf_rdma_srq_destroy(struct rdma_tgt *rt, struct rdma_cc *c);
void nvmf_rdma_reject(struct rdma_cm_id *id, uint16_t sts);
void nvmf_rdma_reactor_wake(struct rdma_reactor *r);
int nvmf_rdma_listen_on(struct rdma_tgt *rt, struct nvmf_port *p, int *bound);
/* Reactor 0: connect requests on the listeners, handed to their queue's reactor. */
void nvmf_rdma_listen_events(struct rdma_tgt *rt);
/* The queue's reactor: connect requests handed over, then its queues' CM events. */
void nvmf_rdma_take_handoffs(struct rdma_reactor *r);
void nvmf_rdma_queue_events(struct rdma_reactor *r);
/* Reactor 0: a device's asynchronous events. */
void nvmf_rdma_async_events(struct rdma_tgt *rt, struct rdma_async *a);

#endif
