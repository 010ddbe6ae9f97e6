/* SPDX-License-Identifier: MIT */
#ifndef GDX_PIPELINE_H
#define GDX_PIPELINE_H

/*
 * The pipeline engine (the GPUDirect Async pattern): N stages over a ring of
 * S slots, so that batch b+1 loads while batch b computes and batch b-1 is
 * sent, and a step costs about max(stage) instead of the sum.
 *
 * A device stage enqueues its work on its own stream; the engine chains a
 * batch's stages across streams with events (gdx_stream_wait_event), so the
 * CPU enqueues a whole batch at once and never waits between stages.  A host
 * stage runs a callback on its own thread once the batch's earlier stages are
 * done.  A slot returns to the first stage when the last stage has finished
 * with it: the first stage of batch b waits (on the device, or on the first
 * stage's thread) for the last stage of batch b - S.  What is ordered so is
 * the stages' own work: where the first stage is a device stage and the rest
 * host stages, that wait is a stream wait on the device and the producer
 * itself may already be S + ahead batches on, so memory of a slot that the
 * producer touches at submission (slot_user data, say) is not protected by
 * it: hand such data over through the stages instead.
 *
 * The producer calls gdx_pipeline_submit() once per batch; it blocks while
 * S + ahead batches are in flight (back-pressure), and is where per-batch
 * timings are collected and asynchronous stage outcomes checked.
 */

#include <stddef.h>
#include <stdint.h>

#include <gdx/status.h>
#include <gdx/device.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gdx_pipeline;
struct gdx_file;	/* <gdx/file.h> */
struct gdx_nvmf_ctrl;	/* <gdx/nvmf.h> */

#define GDX_PIPELINE_MAX_STAGES 16
#define GDX_PIPELINE_MAX_SLOTS 64

/*
 * What a stage callback is told about the batch it works on.  The pointer and
 * its fields stay as they are until the batch has left the last stage, so
 * host functions the stage enqueued may keep it.
 */
struct gdx_pipeline_job {
	struct gdx_pipeline *pipe;
	uint64_t batch;		/* 0, 1, 2, ... in submission order */
	unsigned slot;		/* batch % nslots */
	unsigned stage;		/* index of the stage being called */
	void *buf;		/* the slot's device buffer (opts.slot_bytes), else NULL */
	size_t buf_size;
	void *slot_user;	/* gdx_pipeline_set_slot_user() */
	void *batch_arg;	/* the producer's argument to gdx_pipeline_submit() */
	/* desc.scratch_size bytes of this stage for this batch, kept until harvest. */
	void *scratch;
};

enum gdx_stage_kind {
	GDX_STAGE_DEVICE = 1,	/* enqueue() on the stage's stream */
	GDX_STAGE_HOST = 2,	/* run() on the stage's thread */
};

/*
 * Enqueues the stage's work for job on s and returns without waiting for it.
 * Ordering against the batch's other stages is the engine's business.
 */
typedef int (*gdx_stage_enqueue_fn)(const struct gdx_pipeline_job *job, struct gdx_stream *s,
				    void *arg);
/* Does the stage's work synchronously on the stage's own thread. */
typedef int (*gdx_stage_run_fn)(const struct gdx_pipeline_job *job, void *arg);
/*
 * Judges a device stage's outcome once its work for job has executed (e.g. a
 * short read): 0, or a negative code after gdx_pipeline_job_fail() or alone.
 */
typedef int (*gdx_stage_check_fn)(const struct gdx_pipeline_job *job, void *arg);

struct gdx_stage_desc {
	size_t struct_size;		/* sizeof(struct gdx_stage_desc) */
	const char *name;		/* copied; up to 31 characters are kept */
	enum gdx_stage_kind kind;
	gdx_stage_enqueue_fn enqueue;	/* GDX_STAGE_DEVICE */
	gdx_stage_run_fn run;		/* GDX_STAGE_HOST */
	gdx_stage_check_fn check;	/* optional, device stages */
	void (*fini)(void *arg);	/* optional: called once by gdx_pipeline_destroy */
	void *arg;
	/* Device stages: run here instead of on a stream the pipeline creates. */
	struct gdx_stream *stream;
	/* Per-batch scratch (job->scratch), for arguments device work reads late. */
	size_t scratch_size;
};
GDX_API void gdx_stage_desc_init(struct gdx_stage_desc *d, size_t struct_size);

struct gdx_pipeline_opts {
	size_t struct_size;	/* sizeof(struct gdx_pipeline_opts) */
	unsigned nslots;	/* S, 1..GDX_PIPELINE_MAX_SLOTS; default 3 */
	/*
	 * Batches the producer may submit beyond the S that fit in the slots;
	 * their work is queued on the streams behind event waits.  Default S.
	 */
	unsigned ahead;
	size_t slot_bytes;	/* device buffer per slot; 0: none */
	/*
	 * Per-stage timing with timed events, of every timing-th batch (1: each
	 * batch, 0: none); default 1.  Timing a device stage costs the producer
	 * two calls into the driver for each batch timed (an event record, and
	 * reading the elapsed time), a share of a step of tens of microseconds.
	 */
	int timing;
	/* Batches left out of the timing figures (start-up); default -1: nstages. */
	int warmup;
	/*
	 * Microseconds a waiting pipeline thread (the producer, a host stage)
	 * polls before it sleeps, 0..100000; default -1: the knob
	 * pipeline.spin_us (GDX_PIPELINE_SPIN_US, 200).  A wait that polls
	 * costs its thread's CPU for that long; one that sleeps costs a wake-up
	 * (tens of microseconds on a virtual machine) when it ends.
	 */
	int spin_us;
};
GDX_API void gdx_pipeline_opts_init(struct gdx_pipeline_opts *o, size_t struct_size);

GDX_API int gdx_pipeline_create(struct gdx_device *dev, const struct gdx_pipeline_opts *o,
				struct gdx_pipeline **out);
/* Stops, drains, and frees everything the pipeline created. */
GDX_API void gdx_pipeline_destroy(struct gdx_pipeline *p);

/* Appends a stage; returns its index.  Only before the first submit. */
GDX_API int gdx_pipeline_add_stage(struct gdx_pipeline *p, const struct gdx_stage_desc *d);

GDX_API unsigned gdx_pipeline_nslots(const struct gdx_pipeline *p);
GDX_API unsigned gdx_pipeline_nstages(const struct gdx_pipeline *p);
GDX_API struct gdx_device *gdx_pipeline_device(const struct gdx_pipeline *p);
/* The stream of device stage `stage` (created on the first submit); NULL otherwise. */
GDX_API struct gdx_stream *gdx_pipeline_stage_stream(struct gdx_pipeline *p, unsigned stage);
GDX_API int gdx_pipeline_slot_buf(const struct gdx_pipeline *p, unsigned slot, void **buf,
				  size_t *size);
GDX_API int gdx_pipeline_set_slot_user(struct gdx_pipeline *p, unsigned slot, void *user);

#define GDX_PIPELINE_NOWAIT 0x1u
/*
 * Admits the next batch: enqueues its device stages and hands it to its host
 * stages.  Blocks while S + ahead batches are in flight, or returns -EAGAIN
 * with GDX_PIPELINE_NOWAIT.  Returns -ECANCELED after gdx_pipeline_stop(),
 * and the pipeline's error once a stage has failed.  One producer at a time.
 */
GDX_API int gdx_pipeline_submit(struct gdx_pipeline *p, void *batch_arg, unsigned flags);
/* Waits until every admitted batch has left the last stage; 0 or the error. */
GDX_API int gdx_pipeline_drain(struct gdx_pipeline *p);
/*
 * Refuses further batches; batches already admitted run to the end.  Safe
 * from any thread, including a stage callback.
 */
GDX_API void gdx_pipeline_stop(struct gdx_pipeline *p);
/* Submits n batches (batch_arg NULL), then drains; 0 or the error. */
GDX_API int gdx_pipeline_run(struct gdx_pipeline *p, uint64_t n);

/*
 * Fails the pipeline from a stage callback (or a host function it enqueued):
 * records the stage, slot, batch and cause, and returns err so a callback can
 * `return gdx_pipeline_job_fail(job, -EIO, "short read: %zd of %zu", ...)`.
 * Only the first failure is kept.  err must be negative.
 */
GDX_API int gdx_pipeline_job_fail(const struct gdx_pipeline_job *job, int err, const char *fmt,
				  ...) __attribute__((format(printf, 3, 4)));

struct gdx_pipeline_error {
	int err;		/* 0: no failure */
	int stage;		/* -1: not a stage's (e.g. the engine itself) */
	char stage_name[32];
	int slot;
	uint64_t batch;
	char cause[192];
};
/* Fills e and returns e->err. */
GDX_API int gdx_pipeline_error(struct gdx_pipeline *p, struct gdx_pipeline_error *e);
/* "stage 1 (compute), slot 2, batch 17: <cause>: <gdx_strerror>"; "" without failure. */
GDX_API const char *gdx_pipeline_strerror(struct gdx_pipeline *p, char *buf, size_t len);

/*
 * Times are in nanoseconds; a device stage's time is measured by events
 * recorded around its work on its stream, a host stage's by the host clock
 * around its callback.  The mean, min and max leave out the warm-up batches.
 */
struct gdx_pipeline_stage_stats {
	size_t struct_size;
	char name[32];
	enum gdx_stage_kind kind;
	uint64_t batches;	/* batches that finished this stage */
	uint64_t skipped;	/* batches not run here because the pipeline failed */
	uint64_t errors;
	uint64_t timed;		/* batches in the time figures */
	uint64_t total_ns, min_ns, max_ns, mean_ns;
	uint64_t wait_ns;	/* host stages: time spent waiting for earlier stages */
	/*
	 * Host stages: calls into the device driver on the stage's thread
	 * (waiting for the batch's earlier stages, the callback, enqueueing the
	 * device stages after it); see gdx_pipeline_stats.producer_calls.
	 */
	uint64_t calls;
};
GDX_API int gdx_pipeline_stage_stats(struct gdx_pipeline *p, unsigned stage,
				     struct gdx_pipeline_stage_stats *st);

struct gdx_pipeline_stats {
	size_t struct_size;
	uint64_t submitted, completed;
	unsigned inflight_max;	/* most batches in flight at once */
	/*
	 * Time gdx_pipeline_submit spent waiting for earlier batches (a ring
	 * entry, a slot), not counting its own work: enqueueing, and reading
	 * the harvested batches' times.  A producer that never waits is what
	 * bounds the step.
	 */
	uint64_t producer_wait_ns;
	/*
	 * Steady-state step: mean time between consecutive batches leaving the
	 * last stage, after the warm-up; 0 until two such batches are done.
	 */
	uint64_t step_ns;
	uint64_t serial_ns;	/* sum of the stages' mean times */
	uint64_t max_stage_ns;	/* the largest stage mean */
	double overlap;		/* step / max_stage; 1.0 is perfect overlap */
	double speedup;		/* serial / step */
	/*
	 * Waits of the producer and the host stages for batches already
	 * submitted that outlasted the spin time and blocked (a sleep and a
	 * wake-up, or the device's own event synchronisation).  A host stage
	 * idle until the next batch is submitted is not counted.
	 */
	uint64_t long_waits;
	/*
	 * Calls into the device driver that gdx_pipeline_submit made (cuda:
	 * driver API calls; the emulated device: its operations), the stage
	 * callbacks' calls through gdx included but not those they make to a
	 * runtime of their own (kernel launches); producer_poll_calls of them
	 * were made while it waited for earlier batches.  At steps of tens of
	 * microseconds each call (about a microsecond) is a share of the step.
	 */
	uint64_t producer_calls, producer_poll_calls;
};
GDX_API int gdx_pipeline_stats(struct gdx_pipeline *p, struct gdx_pipeline_stats *st);

/* ---- built-in load stage ------------------------------------------------ */

/*
 * One read of the load stage.  It stays in place until the stage's outcome
 * has been judged, so a source may hand the addresses of its fields to work
 * that reads them when it executes (gdx_file_read_async reads size and
 * offset then, and writes the bytes done then).
 */
struct gdx_pipeline_read {
	void *dst;		/* the slot's device buffer */
	size_t len;
	uint64_t off;
	/*
	 * Bytes read or a negative code.  The source writes it when the read
	 * executes, or in complete().
	 */
	int64_t done;
	void *priv;		/* source.priv_size bytes for the source, per read */
	unsigned flags;		/* the load's GDX_PIPELINE_LOAD_* flags */
};

/*
 * A source the load stage reads batches from: a file (gdx_file_read_async),
 * an NVMe-oF namespace, or anything that can read into device memory in
 * stream order.
 */
struct gdx_pipeline_source {
	const char *name;	/* "file", "nvmf", ... */
	size_t priv_size;
	/* Enqueues the read described by rd on s and returns. */
	int (*read_async)(void *ctx, struct gdx_pipeline_read *rd, struct gdx_stream *s);
	/*
	 * Optional: runs on a CPU thread once the read has executed, before the
	 * stage judges rd->done (e.g. to copy a result of another type there).
	 */
	void (*complete)(void *ctx, struct gdx_pipeline_read *rd);
	void (*release)(void *ctx);	/* optional: on gdx_pipeline_destroy */
	void *ctx;
	/*
	 * Optional: may start reading [off, off + len) now, for a read_async of
	 * that range soon (the load stage calls it for the next batches unless
	 * GDX_PIPELINE_LOAD_IN_ORDER is set).  Must not block on the device.
	 */
	void (*prefetch)(void *ctx, uint64_t off, size_t len);
};

struct gdx_pipeline_load_opts {
	size_t struct_size;	/* sizeof(struct gdx_pipeline_load_opts) */
	const char *name;	/* stage name; default "load" */
	uint64_t offset;	/* where batch 0 starts in the source */
	size_t batch_bytes;	/* bytes per batch; default (and at most) opts.slot_bytes */
	uint64_t stride;	/* distance between batches; default batch_bytes */
	/*
	 * Batch b reads at offset + (b * stride) % wrap; 0: no wrap, and a
	 * batch that runs past the end of the source fails with -ENODATA.
	 */
	uint64_t wrap;
	unsigned flags;		/* GDX_PIPELINE_LOAD_* */
	/*
	 * Batches after the one submitted that the source is asked to prefetch
	 * (their reads then run at once, on as many workers as the file layer
	 * has); default (unsigned)-1: the pipeline's slot count.  0 prefetches
	 * nothing; at most GDX_PIPELINE_LOAD_READ_AHEAD_MAX.
	 */
	unsigned read_ahead;
};
/*
 * Read each batch as the source is when the stream reaches the load, not
 * ahead of it.  By default a source may start its storage read when the batch
 * is submitted, and the stage asks it to prefetch the next read_ahead batches
 * then (the file source does both: gdx_file_read_async_ex with
 * GDX_FILE_ASYNC_EARLY, and reads ahead into pinned staging); the data still
 * reaches the slot's buffer in stream order.  Set this when an earlier stage
 * or anyone else may change the data of a batch after it (or the read_ahead
 * batches before it) was submitted.
 */
#define GDX_PIPELINE_LOAD_IN_ORDER	0x1u
#define GDX_PIPELINE_LOAD_READ_AHEAD_MAX	16u
GDX_API void gdx_pipeline_load_opts_init(struct gdx_pipeline_load_opts *o, size_t struct_size);
/*
 * Adds a device stage that reads each batch into its slot's buffer from src.
 * The pipeline needs opts.slot_bytes; a short or failed read fails the
 * pipeline at that stage with the offset and byte counts as the cause.
 * src->release is called on destroy, also when this call fails.
 */
GDX_API int gdx_pipeline_add_load(struct gdx_pipeline *p, const struct gdx_pipeline_source *src,
				  const struct gdx_pipeline_load_opts *o);

/*
 * The file source: reads through gdx_file_read_async, so batches take the
 * storage path's best route (direct, page cache, bounce) and record it on
 * the handle.  The handle must outlive the pipeline.
 */
GDX_API int gdx_pipeline_source_file(struct gdx_file *f, struct gdx_pipeline_source *src);
/* gdx_pipeline_add_load() with the file source. */
GDX_API int gdx_pipeline_add_file_load(struct gdx_pipeline *p, struct gdx_file *f,
				       const struct gdx_pipeline_load_opts *o);

/*
 * The NVMe-oF source: namespace nsid of a connected controller, read with
 * gdx_nvmf_submit_async.  Offsets and batch sizes must be multiples of the
 * namespace's block size (a read that is not fails the stage).  The
 * controller must outlive the pipeline.  src->release frees what this call
 * allocated; gdx_pipeline_add_load calls it.
 */
GDX_API int gdx_pipeline_source_nvmf(struct gdx_nvmf_ctrl *c, uint32_t nsid,
				     struct gdx_pipeline_source *src);
/* gdx_pipeline_add_load() with the NVMe-oF source. */
GDX_API int gdx_pipeline_add_nvmf_load(struct gdx_pipeline *p, struct gdx_nvmf_ctrl *c,
				       uint32_t nsid, const struct gdx_pipeline_load_opts *o);

#ifdef __cplusplus
}
#endif
#endif
