/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_HOST_HOST_H
#define GDX_NVMF_HOST_HOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include <gdx/mem.h>
#include <gdx/nvmf.h>

#include "common/stats.h"
#include "common/tls.h"
#include "mem/stage.h"
#include "nvmf/auth/auth.h"
#include "nvmf/proto/tcp.h"

struct nh_ctrl;
struct nh_queue;
struct nh_req;
struct nh_stage;

/*
 * A request is one NVMe command's worth of work as the caller sees it.  It
 * outlives connections: when a queue dies with the request in flight, the
 * request goes back to the controller's pending list and is sent again after
 * the reconnect, or fails.  Exactly one of its completion paths runs.
 */
enum nh_mem { NH_MEM_NONE, NH_MEM_HOST, NH_MEM_DEVICE };

typedef void (*nh_done_fn)(struct nh_req *r);

struct nh_req {
	struct gdx_nvme_sqe sqe;	/* CID and SGL filled in per attempt */
	void *buf;			/* data (host or device pointer) */
	size_t len;
	enum nh_mem mem;
	int write;			/* data host -> controller */
	bool admin;
	bool no_retry;			/* fabrics/keep-alive: fail, never resubmit */
	unsigned retries;
	uint64_t timeout_ns;
	int result;			/* 0, -errno, GDX_E* */
	uint16_t status;		/* SCT << 8 | SC */
	uint64_t dw01;			/* CQE DW0 | DW1 << 32 */
	nh_done_fn done;
	void *arg;
	struct gdx_nvmf_io *io;		/* user I/O this belongs to (abort, stats) */
	struct nh_req *next;		/* pending list */
	bool cancelled;			/* user abort */
	bool timed_out;
	/* device reads: the ring position after the copy of the last data received,
	 * and the result held back until the H2D copies up to there have landed */
	uint64_t ring_end;
	int held_result;
	/*
	 * Latency stamps of a read (nvmf.host.lat_stats, gdx_now_ns): submitted,
	 * its command about to go out, its last data byte received, the copy of
	 * that byte posted (device memory).  The receiver sums the stages per
	 * queue when the read completes.
	 */
	uint64_t t_sub, t_sent, t_data, t_post;
};

struct nh_slot {
	struct nh_req *req;		/* NULL: free */
	uint16_t cid;			/* current wire CID (generation | index) */
	uint64_t deadline;
	size_t xfered;			/* C2H bytes received / H2C bytes sent */
	bool ddgst_err;
};

enum nh_qstate { NH_Q_LIVE, NH_Q_DEAD };

struct nh_rdma;

struct nh_queue {
	struct nh_ctrl *ctrl;
	uint16_t qid;
	unsigned depth;
	int rx_cpu;			/* its receiver's CPU (nvmf.host.cpus), -1 if not pinned */
	int fd;				/* TCP; -1 over RDMA */
	struct nh_rdma *rdma;		/* RDMA (rdma.c); NULL over TCP */
	struct gdx_tcp_params tp;	/* negotiated by ICReq/ICResp */
	size_t inline_max;

	pthread_mutex_t lock;		/* slots, state */
	pthread_cond_t slot_cv;
	pthread_mutex_t send_lock;
	struct nh_slot *slots;
	uint16_t *free_idx;
	unsigned nfree;
	enum nh_qstate state;
	int err;			/* why it died */
	unsigned inflight;
	/*
	 * Commands a receiver thread submitted while this queue was full (from a
	 * completion callback): a receiver must never wait for a slot, since it
	 * may be the one that frees them; nor the control thread.  Sent as slots
	 * free up.
	 */
	struct nh_req *backlog;
	struct nh_req **backlog_tail;

	pthread_t rx;
	bool rx_started;

	/*
	 * Device-memory receive: a staging lane (mem/stage.h) whose pinned byte
	 * ring C2H data is received into back to back, each piece's H2D copy
	 * posted as soon as it is in; device reads received whole are deferred
	 * on it until their copies have landed.  Device-memory writes are staged
	 * through a one-chunk D2H lane under send_lock.
	 */
	struct gdx_device *dev;		/* set last, with a release store */
	/*
	 * Serialises the set-up of the above at a first device read when the
	 * connection was opened without a device; never taken inside lock.
	 */
	pthread_mutex_t dev_lock;
	struct gdx_stage *rx_st;	/* the receiver's */
	struct gdx_stage *tx_st;	/* the sender's, under send_lock */
	uint64_t lat_seen;		/* held reads completing now: when their landing was seen */
	bool lat_timed;			/* ... and one of them was timed */

	struct gdx_counter cnt[24];
};

/*
 * Per queue; COPY..WAIT count the bounce ring's copies and device runtime
 * calls, RING_FULL the pieces that waited for ring room.  LAT_*: reads timed
 * (nvmf.host.lat_stats) and the nanoseconds they spent, summed, from
 * submission to the command going out (SENT), to their last data byte (DATA),
 * to the copy of that byte posted (POST), to its landing seen by the receiver
 * (LAND), to their completion callback starting (QUEUE: behind the callbacks
 * of reads released before them) and in that callback (CB); REL counts the
 * times timed reads were completed, one or several together.  BOUNCED counts
 * the commands an RDMA queue bounced, HELD those of them answered before an
 * earlier one, whose response waited for it (rdma.c, struct bounce).  CQ_POLLED
 * counts the times an RDMA receiver found completions by polling its CQ after
 * the last ones (nvmf.host.rdma_poll_us), CQ_SLEPT the times it slept for them.
 */
enum { NH_CNT_CMDS, NH_CNT_IN, NH_CNT_OUT, NH_CNT_ERR, NH_CNT_FULL, NH_CNT_TMO, NH_CNT_COPY,
       NH_CNT_COPY_CALL, NH_CNT_RECORD, NH_CNT_QUERY, NH_CNT_WAIT, NH_CNT_RING_FULL,
       NH_CNT_LAT_N, NH_CNT_LAT_SENT, NH_CNT_LAT_DATA, NH_CNT_LAT_POST, NH_CNT_LAT_LAND,
       NH_CNT_LAT_QUEUE, NH_CNT_LAT_CB, NH_CNT_LAT_REL, NH_CNT_BOUNCED, NH_CNT_HELD,
       NH_CNT_CQ_POLLED, NH_CNT_CQ_SLEPT };

struct nh_params {
	char addr[256];
	char svc[32];
	char subnqn[256];
	char hostnqn[256];
	uint8_t hostid[16];
	struct gdx_device *dev;
	unsigned nr_io_queues;
	/* nvmf.host.cpus: I/O queue i's receiver on cpus[i % ncpus], all allowed if 0, unless !pin */
	bool pin;
	int cpus[256];
	unsigned ncpus;
	unsigned queue_depth;
	unsigned kato_ms;
	unsigned io_timeout_ms;
	unsigned reconnect_delay_ms;
	unsigned ctrl_loss_tmo_ms;
	unsigned connect_timeout_ms;
	unsigned max_retries;
	bool hdgst, ddgst;
	bool rdma;			/* the NVMe/RDMA transport (rdma.c), else TCP */
	bool discovery;
	bool sqflow_off;
	size_t max_io;
	size_t bounce_chunk;
	unsigned bounce_chunks;
	uint64_t copy_poll_ns;
	uint64_t rdma_poll_ns;		/* an RDMA receiver's poll window before sleeping, at most */
	unsigned copy_batch;
	bool copy_word;
	bool lat_stats;			/* stamp reads (NH_CNT_LAT_*) */
	bool post_first;		/* done word: post a piece's copy, then release held reads */
	unsigned copy_agent;		/* workers of the copy agent; 0: none */
	bool require_direct;		/* device memory may not bounce */
	bool tls;			/* TLS 1.3 with a PSK from tls_key (queue.c) */
	uint8_t tls_identity;		/* 0 or 1: the PSK identity's version */
	struct gdx_tls_key tls_key;
	/* DH-HMAC-CHAP: ours, and the controller's for bidirectional authentication */
	bool has_key, has_ctrl_key;
	struct nvmf_auth_key dhchap_key, dhchap_ctrl_key;
};

struct nh_ctrl {
	struct nh_params p;
	pthread_mutex_t lock;
	pthread_cond_t cv;		/* state changes, wakes the control thread */
	enum gdx_nvmf_ctrl_state state;
	bool recovering;
	bool stopping;
	bool need_recovery;
	bool connect_dnr;		/* the last Connect was refused with DNR */
	bool sqflow_off;		/* I/O queues connect with SQ flow control disabled */
	int fail_err;
	struct nh_queue *admin;
	struct nh_queue **ioq;
	unsigned nioq;
	struct nh_req *pending;		/* waiting for a live connection */
	struct nh_req **pending_tail;
	bool resubmit;			/* receivers parked device reads (NH_SUBMIT_DEFER) */
	unsigned users;			/* submitters inside a queue; teardown waits for 0 */
	struct gdx_counter retries;
	struct nh_ns_cache {
		uint32_t nsid;
		uint32_t block_size;
	} ns[16];
	unsigned nns;
	uint16_t cntlid;
	struct gdx_nvme_id_ctrl idctrl;
	struct gdx_nvmf_ctrl_info info;	/* c->lock; setup rebuilds it on a reconnect */
	uint32_t max_xfer;		/* info.max_xfer, for submitters that do not lock */
	uint64_t next_ka;
	bool ka_inflight;
	uint64_t loss_since;
	uint64_t next_attempt;
	unsigned backoff;
	pthread_t thread;
	bool thread_started;

	/* stream-ordered submissions: one worker thread per batch in flight */
	pthread_mutex_t alock;
	pthread_cond_t acv;	/* a worker ended, a gate came back */
	unsigned async_live;
	bool astop;
	/* Device calls the workers made before opening their gates (tests: 0). */
	_Atomic uint64_t aworker_calls;
	struct agate_tab *agates;	/* io.c: gate words, one table per device */

	/*
	 * Staging contexts (mem/stage.h), one per device: opts.dev's at connect
	 * (with the copy agent of the I/O queues' device reads, p.copy_agent,
	 * ring qid - 1), another device's at its first device read
	 * (stage_late_opens).  They outlive reconnects.
	 */
	pthread_mutex_t stage_lock;
	struct nh_stage *stages;
	bool agent_tried;
	struct gdx_counter stage_late_opens;

	/*
	 * NVMe/RDMA with a device named at connect: whether the NIC cannot
	 * register its memory (found by each I/O queue's connect, rdma.c), why,
	 * and the largest command that bounces (0: no bounce lanes, as with
	 * require_direct).  Written under stage_lock; io.c loads the numbers.
	 */
	bool rdma_nodirect;
	bool rdma_bounce_said;
	uint32_t rdma_bounce_max;
	char rdma_why[200];
	/*
	 * The NIC the probe ran on (empty: none yet): the queues after the
	 * first, and those of every reconnect through that NIC, keep its answer.
	 */
	char rdma_probed[64];
};

/* queue.c */
int nh_queue_open(struct nh_ctrl *c, uint16_t qid, unsigned depth, struct nh_queue **out);
int nh_queue_start(struct nh_queue *q);
/* Stops the receiver and hands every request still in a slot to fn. */
typedef void (*nh_reap_fn)(struct nh_ctrl *c, struct nh_req *r, int err);
void nh_queue_close(struct nh_queue *q, nh_reap_fn fn);
/* Like close but keeps the (dead) queue allocated. */
void nh_queue_reap(struct nh_queue *q, nh_reap_fn fn);
void nh_queue_kill(struct nh_queue *q, int err);
/*
 * Puts r in a free slot and sends it: 0, or -EAGAIN when the queue is full
 * and !wait, -EPIPE when it is dead, the device set-up's error, or
 * NH_SUBMIT_DEFER: r reads into device memory, the queue's device side is not
 * set up and this thread is a receiver, which must not set it up; r is not
 * sent, the control thread is to submit it.
 */
#define NH_SUBMIT_DEFER 1
int nh_queue_submit(struct nh_queue *q, struct nh_req *r, bool wait);
/* The calling thread (the control thread) queues on a full queue instead of waiting. */
void nh_queue_never_wait(void);
int nh_queue_abort_lookup(struct nh_queue *q, const struct gdx_nvmf_io *io, uint16_t *cid);
/* Times out expired slots; returns true if the queue needs to be torn down. */
bool nh_queue_check_timeouts(struct nh_queue *q, uint64_t now);
/* The queue whose receiver runs on the calling thread, else NULL. */
struct nh_queue *nh_queue_rx_self(void);
/* Receives PDUs until the connection ends; returns why (fuzzing drives this directly). */
int nh_queue_rx_loop(struct nh_queue *q);
int nh_queue_init_mem(struct nh_queue *q, unsigned depth);
/* The device-memory bounce ring (chunk size and count from the controller's params). */
int nh_queue_init_dev(struct nh_queue *q, struct gdx_device *dev);
void nh_queue_free_mem(struct nh_queue *q);
int nh_queue_counters_json(struct nh_queue *q, char *buf, size_t len);
/* The slot of a command ID in flight, or NULL. */
struct nh_slot *nh_queue_find_slot(struct nh_queue *q, uint16_t cid);
/* Completes the command in s with a response's status and DW0/DW1. */
void nh_queue_complete_cqe(struct nh_queue *q, struct nh_slot *s, uint16_t status,
			   uint64_t result);
/* Completes the command in s with result (0 or why it failed here). */
void nh_queue_complete(struct nh_queue *q, struct nh_slot *s, int result);

/*
 * The NVMe/RDMA transport of a queue (rdma.c): open connects the queue pair
 * (QID and sizes in the CM request) and sets q->rdma; send posts the command
 * in slot idx with a keyed SGL over r's buffer; slot_done drops that buffer's
 * registration; the receive loop completes commands from their CQEs until the
 * queue ends; kill makes it end; close frees it all after the loop stopped.
 */
int nh_rdma_open(struct nh_queue *q, unsigned timeout_ms);
/* wait: a bounce may wait for ring room (else -ENOBUFS, and nothing was sent) */
int nh_rdma_send(struct nh_queue *q, unsigned idx, const struct gdx_nvme_sqe *sqe,
		 struct nh_req *r, bool wait);
void nh_rdma_slot_done(struct nh_queue *q, unsigned idx);
int nh_rdma_rx_loop(struct nh_queue *q);
void nh_rdma_kill(struct nh_queue *q);
/* After the receiver ended: bounced reads whose copies were posted complete. */
void nh_rdma_reap(struct nh_queue *q);
void nh_rdma_close(struct nh_queue *q);

/* ctrl.c */
/* One tick of the control thread from now, a CLOCK_REALTIME deadline. */
void nh_tick_deadline(struct timespec *ts);
/* Tells the control thread to rebuild the live association (caller holds c->lock). */
void nh_ctrl_ask_recovery(struct nh_ctrl *c);
/* q's receiver ended: recovery, if q belongs to the live association. */
void nh_ctrl_queue_died(struct nh_ctrl *c, struct nh_queue *q);
/*
 * The controller's staging context on dev.  The first one opened has the
 * copy agent if p.copy_agent (a ring per I/O queue, ring qid - 1); one opened
 * after connect (late: a device not named then, on the posting thread) is
 * counted and said once.
 */
int nh_ctrl_stage(struct nh_ctrl *c, struct gdx_device *dev, bool late,
		  struct gdx_stage_ctx **out);
/*
 * Whether a queue's receive lane on ctx takes the agent: it has one that has
 * not failed.  The context outlives reconnects; once its agent has failed,
 * the queues of later associations copy on streams.
 */
bool nh_ctrl_stage_agent(struct gdx_stage_ctx *ctx);
/* A connected controller, without the control thread gdx_nvmf_connect starts. */
int nh_ctrl_create(const char *addr, const char *svc, const char *subnqn,
		   const struct gdx_nvmf_host_opts *o, struct nh_ctrl **out);
void nh_ctrl_destroy(struct nh_ctrl *c);

/* submit.c */
void nh_req_init(struct nh_req *r, uint8_t opc, uint32_t nsid, bool admin);
void nh_req_complete(struct nh_req *r, int result);
/* Sends r now (or parks it while reconnecting); its done callback runs once. */
void nh_ctrl_submit(struct nh_ctrl *c, struct nh_req *r);
/* Submits r and waits for it. */
int nh_ctrl_exec(struct nh_ctrl *c, struct nh_req *r);
/* A request its queue still held when the queue was torn down: parked again or failed. */
void nh_ctrl_requeue_or_fail(struct nh_ctrl *c, struct nh_req *r, int err);
/* Status (SCT << 8 | SC, DNR in bit 14) -> 0, -ECANCELED or GDX_E_NVME(status). */
int nh_status_to_err(uint16_t status);
/* A caller waiting for its request: r->done = nh_wait_done, r->arg = the nh_wait. */
struct nh_wait {
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool done;
};
void nh_wait_done(struct nh_req *r);
int nh_wait_req(struct nh_req *r, struct nh_wait *w);

/* assoc.c */
/* Builds the association (admin queue, enable, identify, I/O queues) and publishes it. */
int nh_ctrl_setup(struct nh_ctrl *c);
/* The normal shutdown notification (CC.SHN) on the admin queue, waited for 2 s at most. */
void nh_ctrl_shutdown(struct nh_ctrl *c);

/* params.c */
int nh_params_parse(struct nh_params *p, const char *addr, const char *svc, const char *subnqn,
		    const struct gdx_nvmf_host_opts *o);

/* io.c */
void nh_async_stop(struct nh_ctrl *c);

/* auth.c: runs one set-up command on q and waits for it (assoc.c's queue_exec) */
typedef int (*nh_exec_fn)(struct nh_queue *q, struct nh_req *r);
/*
 * DH-HMAC-CHAP on q, whose Connect asked for it: 0, -EACCES when either
 * side refused (permanent: the secrets are wrong or missing), or the error
 * of a command.
 */
int nh_auth_queue(struct nh_ctrl *c, struct nh_queue *q, nh_exec_fn exec);

#endif
