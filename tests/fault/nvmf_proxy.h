/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_FAULT_NVMF_PROXY_H
#define GDX_TESTS_FAULT_NVMF_PROXY_H

/*
 * A TCP proxy for fault injection between an NVMe/TCP host and controller on
 * loopback.  It forwards whole PDUs (framed by the common header's PLEN),
 * counts them per connection, direction and type, and applies each rule once,
 * at the PDU it names: reset both connections, pass half of it and end or
 * reset both, pass it twice, hold it for a while, or stop forwarding
 * altogether.
 */
#include <stdbool.h>

enum fp_dir { FP_H2C, FP_C2H };

enum fp_act {
	FP_RESET,		/* RST to both ends instead of this PDU */
	FP_RESET_AFTER,		/* this PDU, then RST to both ends */
	FP_TRUNCATE,		/* half of this PDU, then FIN to both ends */
	FP_CUT,			/* half of this PDU, then RST to both ends */
	FP_DUP,			/* this PDU twice */
	FP_DELAY,		/* this PDU after delay_ms */
	FP_STALL,		/* nothing more either way; ends once an end closes */
};

struct fp_rule {
	int conn;		/* connection in accept order from 0; -1: any */
	enum fp_dir dir;
	int type;		/* PDU type (enum gdx_tcp_pdu_type); -1: any */
	unsigned nth;		/* the nth PDU of that type, direction and connection, from 1 */
	enum fp_act act;
	unsigned delay_ms;
};

#define FP_MAX_RULES 8

struct fproxy;

/*
 * Listens on 127.0.0.1 (an ephemeral port, written to port) and forwards each
 * connection to 127.0.0.1:target_port, applying rules[0..n).  A connection the
 * target refuses is reset.  NULL on failure.
 */
struct fproxy *fp_start(const char *target_port, const struct fp_rule *rules, unsigned n,
			char port[16]);
/* Times rule i fired (0 or 1). */
unsigned fp_fired(struct fproxy *p, unsigned i);
/* Connections accepted so far. */
unsigned fp_conns(struct fproxy *p);
/* Closes every connection and the listener, joins the threads, frees p. */
void fp_stop(struct fproxy *p);

#endif
