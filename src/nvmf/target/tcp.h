/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_TARGET_TCP_H
#define GDX_NVMF_TARGET_TCP_H

/* The NVMe/TCP target transport: listeners, reactors, connections. */

#include "nvmf/target/target_int.h"

struct tcp_conn;

/*
 * The latency sums of every reactor, stopped or running, into out[TGT_LAT_NR];
 * safe while the target starts or stops.
 */
void nvmf_tcp_lat_sum(struct gdx_nvmf_target *t, uint64_t *out);

/*
 * For tests and the fuzzer: a connection on an already connected socket,
 * served by the caller's thread.  feed() runs the receive path on bytes as if
 * they had arrived on the socket; responses are written to the socket.
 */
struct tcp_conn *nvmf_tcp_conn_new_local(struct gdx_nvmf_target *t, int fd);
/*
 * Returns 0, or -1 once the connection has ended (fatal error, TermReq): it is
 * then freed, where and as a reactor frees its connections, and c is gone.
 */
int nvmf_tcp_conn_feed(struct tcp_conn *c, const void *buf, size_t len);
/* Ends and frees a connection feed() has not ended. */
void nvmf_tcp_conn_free_local(struct tcp_conn *c);

#endif
