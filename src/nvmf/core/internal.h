/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_CORE_INTERNAL_H
#define GDX_NVMF_CORE_INTERNAL_H

/* Between the files of nvmf/core only. */
#include "gdx_build_config.h"
#include "nvmf/core/core.h"

#define GDX_NVMF_FW_REV GDX_VERSION

/* A command whose completion comes later (AER held, backend I/O in flight). */
#define NVMF_ST_PENDING 0xffff

#define AEN_NS_CHANGED 1u
#define AEN_DISC_CHANGED 2u

uint64_t nvmf_ctrl_cap(const struct nvmf_ctrl *c);
bool nvmf_ctrl_is_ready(const struct nvmf_ctrl *c);
uint16_t nvmf_ctrl_keep_alive(struct nvmf_ctrl *c);
void nvmf_ctrl_set_kato(struct nvmf_ctrl *c, uint32_t kato_ms);
void nvmf_disc_traddr(const struct nvmf_port *p, const struct nvmf_sq *sq, char *out, size_t n);

/* auth.c: DH-HMAC-CHAP on one queue */
int nvmf_auth_sq_start(struct nvmf_sq *sq);
void nvmf_auth_sq_free(struct nvmf_sq *sq);
bool nvmf_auth_sq_ok(const struct nvmf_sq *sq);
bool nvmf_auth_sq_expired(struct nvmf_sq *sq, uint64_t now_ns);
uint16_t nvmf_auth_send(struct nvmf_req *req);
uint16_t nvmf_auth_recv(struct nvmf_req *req);
void nvmf_host_auth_free(struct nvmf_host_auth *a);
/* Wipes and frees every host's own TLS PSK (nvmf_tgt_fini). */
void nvmf_host_psk_free_all(struct nvmf_tgt *t);

uint16_t nvmf_admin_prep(struct nvmf_req *req);
uint16_t nvmf_admin_exec(struct nvmf_req *req);
uint16_t nvmf_io_prep(struct nvmf_req *req);
void nvmf_io_exec(struct nvmf_req *req);

#endif
