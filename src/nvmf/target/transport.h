/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_TARGET_TRANSPORT_H
#define GDX_NVMF_TARGET_TRANSPORT_H

/*
 * The seam between the transport-free core (src/nvmf/core) and the ways
 * capsules reach it, as nvmet's fabrics ops are: each transport serves the
 * target's ports of its trtype, and starts and stops with the target.
 */

#include <stdint.h>

struct gdx_nvmf_target;

struct nvmf_transport_ops {
	const char *name;	/* as a listen address's scheme and nvmetcli's addr_trtype */
	uint8_t trtype;		/* GDX_NVMF_TRTYPE_* */
	/* Listens on the target's ports of this trtype; 0 (doing nothing) when there are none. */
	int (*start)(struct gdx_nvmf_target *t);
	/* Ends every connection and joins its threads; a no-op when not started. */
	void (*stop)(struct gdx_nvmf_target *t);
};

extern const struct nvmf_transport_ops nvmf_tcp_ops, nvmf_rdma_ops;

/* The transport named name ("tcp", "rdma"), or NULL. */
const struct nvmf_transport_ops *nvmf_transport_find(const char *name);

#endif
