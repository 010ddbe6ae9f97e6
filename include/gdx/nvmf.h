/* SPDX-License-Identifier: MIT */
#ifndef GDX_NVMF_H
#define GDX_NVMF_H

/* NVMe over Fabrics: the gdx target (below) and host (its own section). */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <gdx/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== target ================================================================
 * An NVMe/TCP target that the Linux kernel host and nvme-cli use unmodified.
 * Build one from an nvmetcli JSON file and/or the calls below, then start it:
 * it listens on every port, runs one reactor thread per configured core, and
 * serves until stopped.  Namespaces are files, block devices ("/dev/..."),
 * RAM ("ram:64M") or null ("null:1G").
 */

struct gdx_nvmf_target;

struct gdx_nvmf_target_opts {
	size_t size;		/* sizeof(struct gdx_nvmf_target_opts) */
	unsigned reactors;	/* threads serving connections (default 1) */
	uint32_t max_io;	/* largest transfer, bytes (MDTS; default 1 MiB) */
	uint32_t inline_data;	/* in-capsule data on I/O queues (default 16 KiB) */
	uint32_t maxh2cdata;	/* largest H2CData PDU (default 128 KiB) */
	uint16_t max_io_queues;	/* per controller (default 64, at most 128) */
	uint16_t max_qdepth;	/* entries per queue (default 256) */
};

GDX_API void gdx_nvmf_target_opts_init(struct gdx_nvmf_target_opts *o, size_t size);
GDX_API int gdx_nvmf_target_create(const struct gdx_nvmf_target_opts *o,
				   struct gdx_nvmf_target **out);
/* Stops it if running, closes every connection and namespace. */
GDX_API void gdx_nvmf_target_destroy(struct gdx_nvmf_target *t);

/*
 * Loads a configuration as `nvmetcli save` writes it: ports (addr.trtype tcp,
 * traddr, trsvcid; subsystems), subsystems (nqn, attr.allow_any_host,
 * attr.serial, attr.model, allowed_hosts, namespaces with device.path,
 * device.nguid, device.uuid and enable), hosts.  Non-TCP ports are skipped
 * with a warning.  gdx extension: a namespace may carry "block_size" (512 or 4096).
 */
GDX_API int gdx_nvmf_target_load_json(struct gdx_nvmf_target *t, const char *path);

/* Adds a subsystem; allow_any_host admits every host NQN. */
GDX_API int gdx_nvmf_target_add_subsys(struct gdx_nvmf_target *t, const char *nqn,
				       int allow_any_host);
GDX_API int gdx_nvmf_target_allow_host(struct gdx_nvmf_target *t, const char *nqn,
				       const char *hostnqn);
/* Adds namespace nsid (0: the next free one) backed by spec; block_size 512 or 4096. */
GDX_API int gdx_nvmf_target_add_ns(struct gdx_nvmf_target *t, const char *nqn, uint32_t nsid,
				   const char *spec, uint32_t block_size);
/* Adds a TCP port (traddr "0.0.0.0" listens everywhere) and exposes subsystems on it. */
GDX_API int gdx_nvmf_target_add_port(struct gdx_nvmf_target *t, uint16_t portid,
				     const char *traddr, const char *trsvcid);
GDX_API int gdx_nvmf_target_link(struct gdx_nvmf_target *t, uint16_t portid, const char *nqn);

/* Binds every port and starts the reactors; returns once it is listening. */
GDX_API int gdx_nvmf_target_start(struct gdx_nvmf_target *t);
/* Closes the listeners and every connection, joins the reactors. */
GDX_API void gdx_nvmf_target_stop(struct gdx_nvmf_target *t);
/* The TCP port a listener actually bound (for trsvcid "0"); -ENOENT if none. */
GDX_API int gdx_nvmf_target_bound_port(struct gdx_nvmf_target *t, uint16_t portid);

/*
 * Writes the counters as one JSON object: target totals, then per
 * controller, per queue and per namespace.
 */
GDX_API int gdx_nvmf_target_stats_json(struct gdx_nvmf_target *t, FILE *f);

/* ==== end of target ======================================================== */

#ifdef __cplusplus
}
#endif
#endif
