/* SPDX-License-Identifier: MIT */
#ifndef GDX_DEVICE_H
#define GDX_DEVICE_H

/*
 * The device runtime: one API over two devices.
 *
 *   cuda      the CUDA driver API, loaded at run time from libcuda.so.1
 *   emulated  host memory and host threads with CUDA's ordering rules; chosen
 *             only when asked for ("emulated" or GDX_DEVICE=emulated), never
 *             as a silent stand-in for a missing GPU
 *
 * Device pointers are plain void * in a unified address space, as under CUDA's
 * UVA: copies take any mix of host, pinned and device pointers and work out the
 * direction themselves.  Emulated device memory is not readable by the CPU
 * through the pointer handed out (it is mapped PROT_NONE there), so code that
 * dereferences a device pointer faults in CI exactly where it would be wrong on
 * a GPU.
 */

#include <stddef.h>
#include <stdint.h>

#include <gdx/status.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gdx_device;
struct gdx_stream;
struct gdx_event;

/*
 * spec: "auto", "cuda", "cuda:N", "emulated", "emulated:N"; NULL means
 * $GDX_DEVICE, else "auto".  "auto" picks cuda:0 where a GPU is present and
 * fails with GDX_ENODEVICE otherwise (the log line names GDX_DEVICE=emulated).
 * Opening the same device twice returns the same object with a reference
 * taken; gdx_device_close drops it.
 */
GDX_API int gdx_device_open(const char *spec, struct gdx_device **out);
GDX_API void gdx_device_close(struct gdx_device *dev);
/* Devices of a kind ("cuda", "emulated") on this machine, or a negative code. */
GDX_API int gdx_device_count(const char *kind);

GDX_API const char *gdx_device_kind(const struct gdx_device *dev);  /* "cuda" */
GDX_API int gdx_device_ordinal(const struct gdx_device *dev);
GDX_API const char *gdx_device_name(const struct gdx_device *dev);  /* "cuda:0" */

struct gdx_device_props {
	char model[96];		/* "NVIDIA H200", "emulated" */
	char pci_bdf[16];	/* "0000:17:00.0"; empty for the emulated device */
	int numa_node;		/* -1 if unknown */
	uint64_t total_mem;
	int driver_version;	/* e.g. 13000 for CUDA 13.0; 0 for emulated */
	int cc_major, cc_minor;
	int dmabuf_supported;	/* dma-buf export of device memory works */
	int gdr_supported;	/* driver reports GPUDirect RDMA support */
	int async_alloc_supported; /* stream-ordered allocation */
};
GDX_API int gdx_device_props(const struct gdx_device *dev, struct gdx_device_props *p);

/* ---- memory ----------------------------------------------------------- */

GDX_API int gdx_device_malloc(struct gdx_device *dev, size_t size, void **dptr);
GDX_API int gdx_device_free(struct gdx_device *dev, void *dptr);
/* Stream-ordered allocation (cuMemAllocAsync). */
GDX_API int gdx_device_malloc_async(struct gdx_device *dev, size_t size, void **dptr,
				    struct gdx_stream *s);
GDX_API int gdx_device_free_async(struct gdx_device *dev, void *dptr, struct gdx_stream *s);

/* Page-locked host memory the device can DMA from/to. */
GDX_API int gdx_pinned_alloc(struct gdx_device *dev, size_t size, void **p);
GDX_API int gdx_pinned_free(struct gdx_device *dev, void *p);
/* Page-locks existing host memory (cuMemHostRegister). */
#define GDX_HOST_REGISTER_READONLY 0x1u
GDX_API int gdx_host_register(struct gdx_device *dev, void *p, size_t size, unsigned flags);
GDX_API int gdx_host_unregister(struct gdx_device *dev, void *p);

enum gdx_mem_kind {
	GDX_MEM_UNKNOWN = 0,
	GDX_MEM_HOST,		/* pageable host memory */
	GDX_MEM_PINNED,		/* page-locked host memory known to the device */
	GDX_MEM_DEVICE,		/* device memory */
	GDX_MEM_MANAGED,	/* managed (unified) memory */
};
GDX_API const char *gdx_mem_kind_name(enum gdx_mem_kind kind);

struct gdx_ptr_attrs {
	enum gdx_mem_kind kind;
	int device_ordinal;	/* device the memory belongs to; -1 for host */
	void *base;		/* start of the allocation holding the pointer */
	size_t size;		/* its size; 0 where unknown (plain host memory) */
	uint64_t buffer_id;	/* unique per allocation, never reused; 0 for host */
	int is_vmm;		/* cuMemMap-mapped range */
	int gdr_capable;	/* device memory a NIC may reach by GPUDirect RDMA
				   (not pool memory; 0 on the emulated device) */
};
/* Describes p; plain host memory yields kind HOST and returns 0. */
GDX_API int gdx_pointer_query(struct gdx_device *dev, const void *p, struct gdx_ptr_attrs *a);

/*
 * Exports [dptr, dptr+size) of device memory as a dma-buf for a NIC or NVMe
 * driver (cuMemGetHandleForAddressRange).  dptr and size must be page aligned
 * to the device's granularity; *offset is dptr's offset inside the buffer.
 * The caller closes *fd.
 */
GDX_API int gdx_device_export_dmabuf(struct gdx_device *dev, void *dptr, size_t size,
				     int *fd, uint64_t *offset);

/* ---- copies ------------------------------------------------------------ */

/* Synchronous; direction inferred from the pointers (host/pinned/device). */
GDX_API int gdx_memcpy(struct gdx_device *dev, void *dst, const void *src, size_t n);
GDX_API int gdx_memcpy_async(struct gdx_device *dev, void *dst, const void *src, size_t n,
			     struct gdx_stream *s);
/*
 * n copies enqueued on s in one call, in order, each as gdx_memcpy_async
 * would make it.  Where the device takes them together (CUDA 12.8 and later:
 * cuMemcpyBatchAsync) that is one driver call instead of n: for many small
 * copies enqueued back to back.
 */
GDX_API int gdx_memcpy_batch_async(struct gdx_device *dev, void *const *dsts,
				   const void *const *srcs, const size_t *sizes, size_t n,
				   struct gdx_stream *s);
/* Fills device (or pinned) memory with the byte v. */
GDX_API int gdx_memset(struct gdx_device *dev, void *dst, int v, size_t n);
GDX_API int gdx_memset_async(struct gdx_device *dev, void *dst, int v, size_t n,
			     struct gdx_stream *s);

/* ---- streams and events ------------------------------------------------ */

GDX_API int gdx_stream_create(struct gdx_device *dev, struct gdx_stream **s);
/* Wraps a CUstream the application owns; destroy releases only the wrapper. */
GDX_API int gdx_stream_wrap(struct gdx_device *dev, void *native, struct gdx_stream **s);
/* Waits for the stream's work, then frees it. */
GDX_API int gdx_stream_destroy(struct gdx_stream *s);
GDX_API int gdx_stream_synchronize(struct gdx_stream *s);
/* 0 when all work enqueued so far is done, -EBUSY while some is pending. */
GDX_API int gdx_stream_query(struct gdx_stream *s);
GDX_API void *gdx_stream_native(struct gdx_stream *s);
GDX_API struct gdx_device *gdx_stream_device(struct gdx_stream *s);

/*
 * Runs fn(arg) on a host thread once all earlier work on s is done; later work
 * on s waits for it to return.  Like cuLaunchHostFunc, fn must not call into
 * the device runtime (no copies, no synchronisation).
 */
typedef void (*gdx_host_fn)(void *arg);
GDX_API int gdx_stream_launch_host_func(struct gdx_stream *s, gdx_host_fn fn, void *arg);
/* Later work on s waits until e's recorded work is done. */
GDX_API int gdx_stream_wait_event(struct gdx_stream *s, struct gdx_event *e);

/*
 * Later work on s waits until the 32-bit word at addr, in pinned memory, has
 * reached value: (int32_t)(*addr - value) >= 0, so counters may wrap.  The
 * CPU releases the stream by storing to the word (an atomic release store);
 * this is how work done on a host thread -- which may call the device runtime,
 * unlike a host function -- is put in stream order (cuStreamWaitValue32).
 */
GDX_API int gdx_stream_wait_value32(struct gdx_stream *s, const uint32_t *addr, uint32_t value);
/*
 * Stores value to the 32-bit word at addr, in pinned memory, once the work
 * enqueued on s before it is done, its writes (copies into host memory
 * included) visible first (cuStreamWriteValue32): a host thread sees how far
 * the stream got by reading the word, with no call into the driver.
 * -EOPNOTSUPP where the device cannot.
 */
GDX_API int gdx_stream_write_value32(struct gdx_stream *s, uint32_t *addr, uint32_t value);

#define GDX_EVENT_TIMING 0x1u
GDX_API int gdx_event_create(struct gdx_device *dev, unsigned flags, struct gdx_event **e);
GDX_API int gdx_event_destroy(struct gdx_event *e);
/* Captures the work enqueued on s so far; re-recording moves the event. */
GDX_API int gdx_event_record(struct gdx_event *e, struct gdx_stream *s);
GDX_API int gdx_event_synchronize(struct gdx_event *e);
/* 0 when the captured work is done (or the event was never recorded), -EBUSY if not. */
GDX_API int gdx_event_query(struct gdx_event *e);
/* Milliseconds between two completed events created with GDX_EVENT_TIMING. */
GDX_API int gdx_event_elapsed_ms(struct gdx_event *start, struct gdx_event *end, float *ms);

/* ---- copy agent --------------------------------------------------------- */

/*
 * A copy agent copies pieces between pinned host memory and device memory
 * (either way) as host threads describe them in rings of descriptors in
 * pinned memory: each copy is handed over with a few stores and its landing
 * seen by reading a word, with no call into the driver.  On the cuda device each worker is one
 * resident block of a kernel on a stream of its own (sm_70 and later); on the
 * emulated device a stream's thread runs the same loop.
 *
 * A worker with nothing to do for idle_us ends and is launched again by the
 * next post that finds it gone (one launch per idle spell).  While one runs,
 * whatever waits for the whole device (cuCtxSynchronize, and on many drivers
 * cuMemFree of device memory) waits for it to go idle.
 *
 * Each ring has one producer thread at a time; rings are independent.
 */
struct gdx_copy_agent;

struct gdx_copy_agent_opts {
	size_t struct_size;	/* sizeof(struct gdx_copy_agent_opts) */
	unsigned rings;		/* descriptor rings (1) */
	unsigned entries;	/* descriptors per ring, a power of two (256) */
	unsigned workers;	/* workers; worker w serves rings w, w + workers, ...
				   (0: min(rings, 4)) */
	unsigned idle_us;	/* a worker without work this long ends (2000) */
	unsigned stop_timeout_ms; /* gdx_copy_agent_stop waits this long for workers (2000) */
};
GDX_API void gdx_copy_agent_opts_init(struct gdx_copy_agent_opts *o, size_t struct_size);
/* -EOPNOTSUPP where the device has no copy agent. */
GDX_API int gdx_copy_agent_start(struct gdx_device *dev, const struct gdx_copy_agent_opts *o,
				 struct gdx_copy_agent **out);
/*
 * Stops the workers (descriptors not yet taken stay undone) and frees the
 * agent.  A worker that has not ended within stop_timeout_ms is reported
 * (-ETIMEDOUT) and the agent's memory is left allocated, since the device
 * may still use it.  NULL: nothing to stop, 0 (as free).
 */
GDX_API int gdx_copy_agent_stop(struct gdx_copy_agent *a);
/*
 * Stops the workers as gdx_copy_agent_stop does, but leaves the agent
 * allocated for gdx_copy_agent_stop to free: once it returns 0 no copy is
 * made any more (a post returns the agent's error, -ESHUTDOWN if it had
 * none), so the memory of copies that have not landed, failed posts' too,
 * may be given back while other threads still call into the agent.
 * -ETIMEDOUT as gdx_copy_agent_stop; calling either again waits again.
 * NULL: -EINVAL (the caller would go on as if copies could not land).
 */
GDX_API int gdx_copy_agent_halt(struct gdx_copy_agent *a);
/*
 * Posts a copy of len bytes (1 to 4 GiB - 8 KiB) from src to dst, each in one
 * allocation of pinned memory or of device memory of the agent's device (the
 * two not overlapping), behind the ones posted on
 * the ring before; *seq is its number (from 1, wrapping).  -EAGAIN when the
 * ring holds `entries` copies not yet done.  The bytes at src must stay as
 * they are until done reaches *seq.  Copies in flight may run at the same
 * time and land in any order (done says all up to a seq have), except that
 * copies posted to one ring whose destinations overlap land in the order
 * posted (the later one's bytes stay); across rings there is no order.
 * Pointers are not checked per post: a bad
 * one faults the device, as it would in a kernel of the caller's.  Once the
 * agent cannot go on (gdx_copy_agent_status), posts return that error, also
 * as soon as the ring's worker is found stopped on an error of its own
 * (it is not launched again); such a copy is never made.  A post that
 * published its descriptor and then failed to launch the worker returns
 * that error too, but a worker still running may make that copy: the
 * memory of a failed post stays off limits until the agent is stopped
 * (or halted).
 */
GDX_API int gdx_copy_agent_post(struct gdx_copy_agent *a, unsigned ring, void *dst,
				const void *src, size_t len, uint32_t *seq);
/*
 * The word the agent stores the seq of the ring's last landed copy in (read
 * it with an acquire load; compare seqs as (int32_t)(word - seq) >= 0), or
 * NULL for a ring out of range.
 */
GDX_API const uint32_t *gdx_copy_agent_done_word(struct gdx_copy_agent *a, unsigned ring);
/*
 * 0 while the agent can make progress; otherwise why not, for good: a
 * worker's error or fault (GDX_EDRIVER or the device's code), or
 * -ESHUTDOWN once stopping began.  Reads the workers' error words, and at
 * most once a millisecond asks the device about their streams (a fault shows
 * there): callers waiting on a done word call it now and then.
 */
GDX_API int gdx_copy_agent_status(struct gdx_copy_agent *a);

#ifdef __cplusplus
}
#endif
#endif
