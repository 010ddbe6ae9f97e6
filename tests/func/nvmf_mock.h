/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_NVMF_MOCK_H
#define GDX_TESTS_NVMF_MOCK_H

/*
 * A scripted NVMe/TCP controller on 127.0.0.1 for the host's tests: one RAM
 * namespace, a discovery log, and faults injected on demand (malformed PDUs,
 * dropped connections, commands that never complete).  It is deliberately
 * small and trusting; the real target lives in src/nvmf/target.
 */
#include <stdbool.h>
#include <stdint.h>

#define MOCK_NQN "nqn.2026-11.io.gdx:mock"

enum mock_fault {
	MF_NONE,
	MF_C2H_BEYOND,		/* C2HData longer than the command */
	MF_C2H_GAP,		/* C2HData at the wrong offset */
	MF_UNKNOWN_CID,		/* CapsuleResp for a CID never sent */
	MF_BAD_HLEN,		/* C2HData with a 32-byte header */
	MF_BAD_PLEN,		/* CapsuleResp with PLEN 100 */
	MF_SUCCESS_NO_LAST,	/* SUCCESS flag without LAST_PDU */
	MF_BAD_TYPE,		/* PDU type 0x08 */
	MF_R2T_BEYOND,		/* R2T past the end of the write */
	MF_BAD_DDGST,		/* wrong data digest (needs data digests) */
	MF_DROP,		/* close the connection instead of answering */
	MF_HANG,		/* never answer (until aborted) */
	MF_KA_HANG,		/* leave the next Keep Alive unanswered */
};

struct mock_opts {
	uint32_t block_size;	/* 512 or 4096 */
	uint64_t nblocks;
	uint32_t c2h_chunk;	/* split reads into C2HData PDUs of this size; 0: one PDU */
	bool c2h_success;	/* SUCCESS flag instead of a CapsuleResp */
	uint8_t mdts;		/* Identify MDTS */
	uint32_t inline_size;	/* in-capsule data on I/O queues (IOCCSZ) */
	uint32_t maxh2cdata;
	uint16_t mqes;		/* CAP.MQES (0's based) */
	bool refuse_sqflow;	/* reject a Connect with CATTR SQ flow control off */
};

struct mock_stats {
	unsigned connects;	/* admin Connects */
	unsigned io_connects;
	unsigned term_reqs;	/* H2CTermReqs received */
	unsigned last_fes;
	unsigned aborts;	/* Abort commands that found their command */
	unsigned keep_alives;
	unsigned io_cmds;
	unsigned shutdowns;	/* CC.SHN writes */
	unsigned sqflow_off;	/* I/O Connects that asked for SQ flow control off */
};

struct mock;

void mock_opts_default(struct mock_opts *o);
struct mock *mock_create(const struct mock_opts *o);
/* Listens on 127.0.0.1:port (0: any); returns the port or -errno. */
int mock_listen(struct mock *m, uint16_t port);
/* Closes the listener and every connection (a target crash, as the host sees it). */
void mock_stop(struct mock *m);
void mock_destroy(struct mock *m);
/* The fault hits the (skip+1)-th I/O command (read, or write for R2T faults) from now. */
void mock_inject(struct mock *m, enum mock_fault f, unsigned skip);
void mock_stats(struct mock *m, struct mock_stats *s);
uint8_t *mock_ram(struct mock *m);

#endif
