/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_NVMF_RAW_HOST_H
#define GDX_TESTS_NVMF_RAW_HOST_H

/*
 * A minimal NVMe/TCP host written against the proto codec, one command at a
 * time over a loopback socket, for tests that drive the target PDU by PDU.
 * Each call asserts what the protocol requires of the target's answer.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvmf/proto/nvme.h"
#include "nvmf/proto/tcp.h"

/* One queue's connection. */
struct host {
	int fd;
	struct gdx_tcp_params p;
	uint16_t cid;
	uint16_t cntlid;
	uint32_t maxh2c;
};

/*
 * A socket to 127.0.0.1:port, Nagle off, connected within timeout_ms and each
 * send or receive waiting at most timeout_ms; -1 if connect() did not finish.
 */
int tcp_connect_ms(int port, unsigned timeout_ms);
/* tcp_connect_ms with 10 s, which must connect. */
int tcp_connect(int port);
void send_all(int fd, const void *buf, size_t n);
/* Returns bytes read before EOF (n if all arrived). */
size_t recv_all(int fd, void *buf, size_t n);
/* Reads one PDU: header into *pdu, data (if any) into data (cap bytes). */
int recv_pdu(struct host *h, union gdx_tcp_pdu *pdu, void *data, size_t cap);
/* Sets h up on connected socket fd: ICReq asking for header (hd) and data (dd) digests, ICResp. */
void host_icreq_fd(struct host *h, int fd, bool hd, bool dd);
/* host_icreq_fd on a new tcp_connect(port). */
void host_icreq(struct host *h, int port, bool hd, bool dd);
/* Sends a capsule with optional in-capsule data; sqe's cid and dptr as the caller set them. */
void send_cmd(struct host *h, struct gdx_nvme_sqe *sqe, const void *data, uint32_t len);
/* Answers r2t with H2CData PDUs of at most MAXH2CDATA, from out, the command's whole data. */
void send_r2t_data(struct host *h, const struct gdx_tcp_r2t *r2t, const void *out);
/*
 * Runs one command: data out (in-capsule when inline, else via R2T) or in.
 * Returns the status (without phase); *res gets the result.
 */
uint16_t run_cmd(struct host *h, struct gdx_nvme_sqe *sqe, const void *out, uint32_t olen,
		 bool inline_out, void *in, uint32_t ilen, uint64_t *res);
/* Connect with host ID hostid (NULL: all zeroes). */
uint16_t fab_connect_id(struct host *h, const char *subnqn, const char *hostnqn,
			const uint8_t *hostid, uint16_t qid, uint16_t sqsize, uint16_t cntlid,
			uint32_t kato, uint64_t *res);
uint16_t fab_connect(struct host *h, const char *subnqn, const char *hostnqn, uint16_t qid,
		     uint16_t sqsize, uint16_t cntlid, uint32_t kato, uint64_t *res);
/* Property Get or Set (set) of ofst, 8 bytes wide if eight. */
uint16_t prop(struct host *h, bool set, uint32_t ofst, uint64_t v, bool eight, uint64_t *res);
/* Identify CNS cns of nsid into buf (4 KiB). */
uint16_t identify(struct host *h, uint8_t cns, uint32_t nsid, void *buf);
/* Set Features Number of Queues: n submission and n completion queues. */
uint16_t set_nr_queues(struct host *h, uint16_t n);
/* An I/O command on nlb blocks at slba: a read into buf, any other out of buf. */
uint16_t rw(struct host *h, uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb, void *buf,
	    uint32_t len, bool inline_out);
/* Expects the connection to end with a C2HTermReq carrying fes (and fei unless ~0). */
void expect_term(int fd, uint16_t fes, uint32_t fei);

#endif
