/* SPDX-License-Identifier: MIT */
#ifndef GDX_SRC_PLUGIN_DEVICE_H
#define GDX_SRC_PLUGIN_DEVICE_H

/*
 * The device ops table.  A device backend fills one of these; the public
 * gdx_device_* / gdx_stream_* / gdx_event_* calls check their arguments and
 * dispatch here.  Backends return 0 or a negative gdx code and never log the
 * same failure twice: the caller logs.
 *
 * Streams and events are allocated by the front end with room for the
 * backend's private state (stream_priv_size / event_priv_size bytes).
 */

#include <gdx/device.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The copy agent's shared memory (gdx_copy_agent_start), in one pinned
 * allocation the device reads and writes over the bus.  A ring's descriptors
 * are written by one host thread; its worker polls the next slot, copies the
 * descriptors it finds ready in order and stores done (release, after a
 * system-scope fence behind the copies).  A worker clears live when it runs
 * out of work and ends; the host launches it again (agent_launch) when it
 * has posted a descriptor and finds live clear.  err: nonzero when the worker
 * gave up (GDX_AGENT_ERR_*).  The layout is also declared, with the same
 * size checks, in src/gpu/agent.cu.
 *
 * A descriptor is five 64-bit words, each a 32-bit field in its low half and
 * the descriptor's seq (from 1) in its high half: dst low, dst high, src low,
 * src high, len.  The host stores the words in that order, the last with
 * release.  A worker takes a slot whose five words all carry the seq it
 * expects next: each word is one single-copy-atomic access on both sides, so
 * a slot being written, or one left from the ring's previous lap, never
 * passes, and the device reads no tail before the descriptor (one bus round
 * trip per poll, not two).
 */
#define GDX_AGENT_DESC_WORDS 5
struct gdx_agent_desc {
	uint64_t w[8];		/* GDX_AGENT_DESC_WORDS used: a slot is one 64-byte line */
};

struct gdx_agent_ring {
	uint32_t done;		/* device: seq of the last descriptor copied */
	uint32_t pad[15];
};

struct gdx_agent_worker {
	uint32_t live;
	uint32_t err;
	uint32_t pad[14];
};

#define GDX_AGENT_ERR_OWN 2	/* more rings per worker than it can track (64) */
#define GDX_AGENT_ERR_COPY 3	/* a copy's memory was not what it has to be (emulated) */

/* Worker `worker` of nworkers owns rings worker, worker + nworkers, ... */
struct gdx_agent_args {
	uint64_t stop;		/* struct addresses, as the device sees them (UVA) */
	uint64_t workers, rings, descs;
	uint64_t idle_ns;	/* idle this long, a worker ends */
	uint32_t nrings, entries, worker, nworkers;	/* entries: a power of two */
};

struct gdx_device_ops {
	const char *kind;			/* "cuda", "emulated" */
	size_t stream_priv_size;
	size_t event_priv_size;

	/* Number of devices, or a negative code when the backend cannot run here. */
	int (*count)(void);
	/* Creates per-device state in *priv (context, worker pools, ...). */
	int (*open)(int ordinal, void **priv);
	void (*close)(void *priv);
	int (*props)(void *priv, struct gdx_device_props *p);

	int (*malloc)(void *priv, size_t size, void **dptr);
	int (*free)(void *priv, void *dptr);
	int (*malloc_async)(void *priv, size_t size, void **dptr, void *stream);
	int (*free_async)(void *priv, void *dptr, void *stream);
	int (*pinned_alloc)(void *priv, size_t size, void **p);
	int (*pinned_free)(void *priv, void *p);
	int (*host_register)(void *priv, void *p, size_t size, unsigned flags);
	int (*host_unregister)(void *priv, void *p);
	int (*pointer_query)(void *priv, const void *p, struct gdx_ptr_attrs *a);
	int (*export_dmabuf)(void *priv, void *dptr, size_t size, int *fd, uint64_t *offset);
	/*
	 * Optional (NULL: -EOPNOTSUPP).  The address a NIC registers with
	 * ibv_reg_mr to reach device memory [dptr, dptr+size) where no dma-buf
	 * serves (peer memory): cuda, dptr itself while nvidia_peermem lets the
	 * NIC pin GPU pages; emulated, the copy engine's view of the pages.  For
	 * the NIC only: the CPU never touches memory through it.
	 */
	int (*nic_addr)(void *priv, void *dptr, size_t size, void **va);

	/* stream == NULL: synchronous. */
	int (*memcpy)(void *priv, void *dst, const void *src, size_t n, void *stream);
	int (*memset)(void *priv, void *dst, int v, size_t n, void *stream);
	/* Optional (NULL: the front end makes n memcpy calls); n > 1, no size 0. */
	int (*memcpy_batch)(void *priv, void *const *dsts, const void *const *srcs,
			    const size_t *sizes, size_t n, void *stream);

	/* stream: points at stream_priv_size bytes. native != NULL: wrap it. */
	int (*stream_create)(void *priv, void *stream, void *native);
	int (*stream_destroy)(void *priv, void *stream);
	int (*stream_synchronize)(void *priv, void *stream);
	int (*stream_query)(void *priv, void *stream);
	void *(*stream_native)(void *priv, void *stream);
	int (*launch_host_func)(void *priv, void *stream, gdx_host_fn fn, void *arg);
	int (*stream_wait_event)(void *priv, void *stream, void *event);
	/* addr is 4-byte aligned; GDX_EBADPTR unless it is in pinned memory. */
	int (*stream_wait_value32)(void *priv, void *stream, const uint32_t *addr, uint32_t value);

	int (*event_create)(void *priv, void *event, unsigned flags);
	int (*event_destroy)(void *priv, void *event);
	int (*event_record)(void *priv, void *event, void *stream);
	int (*event_synchronize)(void *priv, void *event);
	int (*event_query)(void *priv, void *event);
	int (*event_elapsed_ms)(void *priv, void *start, void *end, float *ms);

	/* Optional (NULL: -EOPNOTSUPP); as stream_wait_value32 for addr. */
	int (*stream_write_value32)(void *priv, void *stream, uint32_t *addr, uint32_t value);

	/*
	 * Optional (NULL: gdx_copy_agent_start fails with -EOPNOTSUPP).  Starts
	 * one copy agent worker on stream (a stream of its own: it runs until
	 * idle or stopped), following the protocol above.  stream == NULL: only
	 * says whether it could (0, or -EOPNOTSUPP).
	 */
	int (*agent_launch)(void *priv, void *stream, const struct gdx_agent_args *a);
};

#ifdef __cplusplus
}
#endif
#endif
