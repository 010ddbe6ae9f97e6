/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_TARGET_TARGET_INT_H
#define GDX_NVMF_TARGET_TARGET_INT_H

/*
 * The target object behind gdx/nvmf.h: the transport-free core, the limits
 * and counters every transport applies, and each transport's own state
 * (transport.h is the seam; tcp/ and rdma/ fill it).
 */

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "common/stats.h"
#include "nvmf/core/core.h"

struct tcp_reactor;
struct rdma_tgt;

enum {
	TGT_CTR_CONNS,
	TGT_CTR_CONN_ERRORS,
	TGT_CTR_PDUS_IN,
	TGT_CTR_PDUS_OUT,
	TGT_CTR_REFUSED,	/* connections closed at accept: no descriptor, max_conns */
	TGT_CTR_BUF_BYTES,	/* request buffers held now (a level, not a sum) */
	TGT_CTR_HOLDS,		/* times a connection's commands began to wait for buffers */
	TGT_CTR_STALLS,		/* connections ended for taking no data */
	TGT_CTR_NO_LAST_WQE,	/* RDMA queue pairs on a shared receive queue destroyed with no
				 * Last WQE Reached from the device, DRAIN_NS after their end */
	TGT_CTR_STAGED,		/* TCP: data bytes a read for PDU headers took into the
				 * staging buffer, copied out of it (gdx_rx_ask) */
	TGT_CTR_NR
};

/*
 * Where the target's reads and reactors spend their time (nvmf.target.lat_stats):
 * sums in ns and counts, each reactor's written by it alone (relaxed stores, no
 * shared cache line), added up when the counters are dumped.
 */
enum {
	TGT_LAT_READS,		/* I/O reads timed (opcode read on an I/O queue) */
	TGT_LAT_PICKUP_NS,	/* the reactor got the socket's events -> read submitted */
	TGT_LAT_NS_NS,		/* submitted -> the namespace completed it */
	TGT_LAT_SEND_NS,	/* completed -> data and response handed to the socket */
	TGT_LAT_WAKES,		/* reactor iterations that found events */
	TGT_LAT_WAKE_CMDS,	/* command capsules parsed in them */
	TGT_LAT_SLEEPS,		/* blocking epoll_wait calls */
	TGT_LAT_SLEEP_NS,	/* time in them */
	TGT_LAT_POLL_NS,	/* time in iterations that polled and found nothing */
	TGT_LAT_BUSY_NS,	/* time handling events */
	TGT_LAT_NR
};

struct tgt_lat {
	_Atomic uint64_t v[TGT_LAT_NR];
};

struct gdx_nvmf_target {
	struct nvmf_tgt core;
	unsigned nreactors;
	uint32_t maxh2cdata;
	uint64_t poll_ns;
	bool pin;
	bool follow;
	int cpus[256];		/* --cpus: reactor i runs on cpus[i % ncpus] */
	unsigned ncpus;
	struct tcp_reactor *reactors;
	struct rdma_tgt *rdma;		/* the RDMA transport, while it runs */
	pthread_mutex_t reactors_lock;	/* their allocation, against nvmf_tcp_lat_sum */
	int listen_fd[NVMF_MAX_PORTS];
	int bound_port[NVMF_MAX_PORTS];
	_Atomic unsigned next_reactor;
	_Atomic unsigned nconns;	/* accepted and not yet freed */
	unsigned max_conns;		/* nvmf.target.max_conns */
	uint64_t handshake_ns;		/* nvmf.target.handshake_timeout_ms */
	uint64_t conn_buf_max;		/* nvmf.target.conn_buf_max */
	uint64_t buf_max;		/* nvmf.target.buf_max */
	uint64_t stall_ns;		/* nvmf.target.stall_timeout_ms */
	unsigned rdma_srq;		/* nvmf.target.rdma_srq */
	enum { TGT_SPLICE_AUTO, TGT_SPLICE_ON, TGT_SPLICE_OFF } splice;	/* nvmf.target.splice */
	bool running;
	struct gdx_counter ctr[TGT_CTR_NR];
	struct gdx_stats *stats;
	bool lat_stats;
	struct tgt_lat lat_done;	/* reactors that have stopped */
};

/*
 * The CPU reactor i of a transport is pinned to: the i-th of --cpus, or with
 * --pin the i-th CPU this process may use (I/O queue i+1 lands there); -1 for
 * none.
 */
int nvmf_target_reactor_cpu(const struct gdx_nvmf_target *t, unsigned i);
/* True while the target holds nvmf.target.buf_max of request buffers or more. */
static inline bool nvmf_target_buf_over(const struct gdx_nvmf_target *t)
{
	return gdx_counter_get(&t->ctr[TGT_CTR_BUF_BYTES]) >= t->buf_max;
}

/* At most one log line a second per cause; the ones held back are counted. */
struct nvmf_log_limit {
	uint64_t next_ns;
	uint64_t held;
};

/* True if a line may go out now; *held gets how many were held back since the last. */
bool nvmf_log_limit_ok(struct nvmf_log_limit *l, uint64_t now, uint64_t *held);

/*
 * Request buffers: what one queue (a TCP connection, an RDMA queue pair) holds
 * for hosts' data, counted there and in the target's TGT_CTR_BUF_BYTES against
 * nvmf.target.conn_buf_max and buf_max, the same for both transports.
 *
 * A command that needs a buffer starts while nothing waits and the queue
 * fits (nvmf_bufs_fit); otherwise it waits, in order, and holds no buffer
 * while it waits: the transport drops the one its request kept for reuse
 * first.  Then what a queue holds is its running commands' buffers and those
 * its free requests keep, which the transport drops before it decides that a
 * command waits.  So a queue with commands waiting has one running that holds
 * a buffer, and the end of that command, on the queue's own reactor, is where
 * the next one starts: no wake-up has to cross reactors, and a waiting command
 * holding a buffer can never leave a queue with nothing running to end.  A
 * queue that holds nothing fits whatever the target's total, so queues that
 * keep the total at buf_max cannot starve another one.  Each queue may go one
 * command (at most MDTS) past either limit.
 */
struct nvmf_buf_wait {
	struct nvmf_buf_wait *next;
};

struct nvmf_bufs {
	struct gdx_nvmf_target *tgt;
	uint64_t bytes;		/* held: in use, or kept for reuse by free requests */
	struct nvmf_buf_wait *wait_head, **wait_tail;	/* commands waiting, in order */
	const struct nvmf_sq *sq;	/* the log names the queue by its peer and QID */
	const char *peer;
};

void nvmf_bufs_init(struct nvmf_bufs *b, struct gdx_nvmf_target *t, const struct nvmf_sq *sq,
		    const char *peer);
/* freed bytes went back, got bytes were taken (either may be 0). */
void nvmf_bufs_account(struct nvmf_bufs *b, uint32_t freed, uint32_t got);

/*
 * Whether a command may take a buffer now: the queue holds nothing, or less
 * than conn_buf_max while the target holds less than buf_max.
 */
static inline bool nvmf_bufs_fit(const struct nvmf_bufs *b)
{
	return !b->bytes || (b->bytes < b->tgt->conn_buf_max && !nvmf_target_buf_over(b->tgt));
}

/*
 * The command of w waits, behind any that wait already; its request holds no
 * buffer.  The first to wait is counted in TGT_CTR_HOLDS and logged, through
 * log (NULL: not logged).
 */
void nvmf_bufs_wait(struct nvmf_bufs *b, struct nvmf_buf_wait *w, struct nvmf_log_limit *log);

/* Takes the first waiting command off the list; NULL if none waits. */
struct nvmf_buf_wait *nvmf_bufs_pop(struct nvmf_bufs *b);

/* How many of the target's ports are of trtype. */
unsigned nvmf_target_nports(const struct gdx_nvmf_target *t, uint8_t trtype);
/* "192.0.2.1:4420", "[::1]:4420": a peer as the logs name it. */
void nvmf_target_addr_str(const struct sockaddr *sa, socklen_t len, char *out, size_t n);
/* Registers a connected queue's counters as nvmf.queue.CNTLID.QID, once. */
void nvmf_target_sq_stats(struct nvmf_sq *sq, struct gdx_stats **st);

#endif
