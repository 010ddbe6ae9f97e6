/* SPDX-License-Identifier: MIT */
#ifndef GDX_EXAMPLE_TRAIN_STEP_H
#define GDX_EXAMPLE_TRAIN_STEP_H

/*
 * The seeds' training step (GPUDirect note, 4.3): batch N+1 loads from a file
 * into GPU memory on stream A while batch N computes on stream B and the
 * result of batch N-1 goes back to the host (stream C) and out to a peer.
 *
 *   load     device  the built-in file load stage (gdx_file_read_async)
 *   compute  device  out[j] = sum_i in[j*k + i] * (i + 1) + batch, over
 *                    32-bit words, k = in words / out words; then waits until
 *                    the stage has lasted --compute-us
 *   d2h      device  the result into pinned host memory
 *   send     host    over TCP to a peer (a thread on loopback that checks
 *                    the results against the file), or into a file
 *
 * The compute step comes from a provider: train_step.c computes on the host
 * (a thread per slot, put in stream order with host functions and waits on a
 * pinned word: runs on any device, CI uses the emulated one); train_step.cu
 * launches CUDA kernels.
 */

#include <stddef.h>
#include <stdint.h>

#include <gdx/gdx.h>
#include <gdx/pipeline.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ts_mark { TS_MARK_LOAD = 0, TS_MARK_COMPUTE = 1, TS_NMARKS = 2 };

/* Per-slot state the stages share (the pipeline's slot_user). */
struct ts_slot {
	unsigned idx;
	void *in;		/* the pipeline's slot buffer: the loaded batch */
	void *out;		/* device: compute's result */
	void *out_pin;		/* pinned: d2h's result, read by send */
	void *priv;		/* the provider's */
};

struct ts_ctx;

struct ts_provider {
	const char *name;
	int (*slot_init)(struct ts_ctx *c, struct ts_slot *s);
	void (*slot_fini)(struct ts_ctx *c, struct ts_slot *s);
	/* Enqueue: remember "now" as the start of a stage in this slot. */
	int (*mark)(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, struct gdx_stream *st);
	/* Enqueue: wait until `us` microseconds after the slot's mark m. */
	int (*pad)(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, double us,
		   struct gdx_stream *st);
	/*
	 * Enqueue the compute of s->in (batch) into s->out, the stage lasting at
	 * least `us` microseconds from its start (as mark + work + pad would).
	 */
	int (*compute)(struct ts_ctx *c, struct ts_slot *s, uint64_t batch, double us,
		       struct gdx_stream *st);
};

/* What providers read from the context. */
struct gdx_device *ts_device(struct ts_ctx *c);
size_t ts_in_bytes(struct ts_ctx *c);
size_t ts_out_bytes(struct ts_ctx *c);
double ts_compute_us(struct ts_ctx *c);
/* Sleeps (or spins, below --spin-us) until the host clock reaches t_ns. */
void ts_wait_until(struct ts_ctx *c, uint64_t t_ns);
uint64_t ts_now_ns(void);
/* The reference compute, shared with the peer's check. */
void ts_reference(const uint32_t *in, size_t in_words, uint32_t *out, size_t out_words,
		  uint64_t batch);

int ts_main(int argc, char **argv, const struct ts_provider *prov);

#ifdef __cplusplus
}
#endif
#endif
