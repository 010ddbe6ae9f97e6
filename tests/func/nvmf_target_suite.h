/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_NVMF_TARGET_SUITE_H
#define GDX_TESTS_NVMF_TARGET_SUITE_H

/*
 * What test_nvmf_target's files share: the target on loopback with its
 * subsystems, and the raw host's sequences that bring a controller and an
 * I/O queue up on it.  test_nvmf_target.c defines them and runs the cases,
 * which live by theme in nvmf_target_ctrl.c (admin queue, Connect, discovery,
 * AEN, keep-alive), nvmf_target_io.c (I/O, digests, malformed PDUs, a host's
 * TermReq, a block device), nvmf_target_auth.c (DH-HMAC-CHAP on the wire) and
 * nvmf_target_config.c (nvmetcli JSON, stats while stopping, placement).
 */
#include <stdbool.h>
#include <stdint.h>

#include <gdx/nvmf.h>

#include "nvmf_raw_host.h"

/* at start RAM namespaces 1 (512 B blocks) and 2 (4 KiB), a file one 3; any host */
#define NQN "nqn.2024-01.io.gdx:func"
/* a null namespace 1, for nqn.2024-01.io.gdx:friend only */
#define NQN2 "nqn.2024-01.io.gdx:func-locked"
#define HOSTNQN "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"

extern struct gdx_nvmf_target *tgt;
extern int port;		/* tgt's port 1, on 127.0.0.1 */

void admin_up(struct host *h, const char *nqn, bool hd, bool dd, uint32_t kato);
void io_up(struct host *io, const struct host *adm, bool hd, bool dd, uint16_t qid);

/* nvmf_target_ctrl.c */
void test_admin(void **state);
void test_connect_errors(void **state);
void test_connect_hijack(void **state);
void test_kato_wrap(void **state);
void test_cntlid_start(void **state);
void test_discovery(void **state);
void test_aen_and_keepalive(void **state);

/* nvmf_target_io.c */
void test_io(void **state);
void test_digests(void **state);
void test_malformed(void **state);
void test_host_term(void **state);
void test_bdev(void **state);

/* nvmf_target_auth.c */
void test_auth_wire(void **state);

/* nvmf_target_config.c */
void test_json(void **state);
void test_stats_while_stopping(void **state);
void test_placement(void **state);

#endif
