/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_STAGE_SUITE_H
#define GDX_TESTS_STAGE_SUITE_H

/*
 * What test_stage's files share: the emulated device with its operations
 * wrapped, the knobs that make them fail, the buffers copied through the
 * lanes and the helpers that open a context and a lane, move bytes and
 * close them.
 * test_stage.c defines them and runs the cases, which live by theme in
 * stage_lane.c (rings, modes, faults, halts, watches), stage_tx.c (D2H
 * REDO: tcp's transmit lane) and stage_order.c (posts in reservation order,
 * pieces ready out of order, set-up off the data path).
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/device.h"
#include "mem/stage.h"

#define CHUNK 4096u
#define BIG (1u << 20)

extern struct gdx_device *dev;
extern const struct gdx_device_ops *real;
extern struct gdx_device_ops wrapped;
extern void *dbuf;		/* BIG bytes of device memory */
extern unsigned char *src, *back;

extern _Atomic int setup_calls;	/* streams, events, pinned memory, agent starts */
extern _Atomic int fail_launch;	/* worker launches fail */
extern _Atomic int fail_start;	/* agent starts (the module's load) fail */
extern _Atomic int drop_words;	/* stream stores of a done word are dropped */
extern _Atomic int query_err;	/* nonzero: stream queries report it */
extern _Atomic int fail_malloc;	/* 1: the next malloc fails */
extern _Atomic int halt_timeouts;	/* "did not stop" lines logged */

/* the effects a lane ran, in order */
struct rec {
	unsigned n, ends;
	int id[512], err[512];
};

void run(void *owner, void *effect, int err);
uint64_t now_ms(void);
struct gdx_stage_ctx *ctx_open(bool agent, unsigned lanes);
struct gdx_stage *lane_open(struct gdx_stage_ctx *ctx, enum gdx_stage_mode mode,
			    enum gdx_stage_fault fault, unsigned chunks, struct rec *r);
struct gdx_stage *lane_open_abort(struct gdx_stage_ctx *ctx, enum gdx_stage_mode mode,
				  enum gdx_stage_fault fault, unsigned chunks, struct rec *r,
				  const int *stop);
int put(struct gdx_stage *st, size_t off, size_t n, uint64_t *mark);
void check_dev(size_t off, size_t n);
void lane_ctx_close(struct gdx_stage *st, struct gdx_stage_ctx *ctx);
void *raise_later(void *arg);
int setup(void **state);
int teardown(void **state);

/* stage_lane.c */
void byte_ring_wrap(void **state);
void ring_aligned_skip(void **state);
void one_chunk_ring(void **state);
void modes_cadence(void **state);
void fault_effects_in_order(void **state);
void on_halt_before_effects(void **state);
void fail_policy(void **state);
void launch_fails_memory_held(void **state);
void fallback_piece_in_hand(void **state);
void redo_after_halt(void **state);
void fallback_after_fault(void **state);
void drain_stuck_worker(void **state);
void wait_abort(void **state);
void fail_twice_concurrent(void **state);
void landed_other_thread(void **state);
void watch_without_producer(void **state);
void watch_stream_asked(void **state);
void defer_nomem(void **state);
void adopt_ring_after_reopen(void **state);
void mark_seq_wrap(void **state);
void sync_copy_fault_piece(void **state);
void d2h_release_order(void **state);
void trim_gives_room_back(void **state);
void ctx_open_agent_error(void **state);

/* stage_tx.c */
void redo_waits_for_halt(void **state);
void redo_launch_fails_before_halt(void **state);
void redo_chunks_after_halt(void **state);
void nowait_marks_full(void **state);
void watch_post_own_copy(void **state);
void watch_post_abort(void **state);
void fault_kept_effects(void **state);
void redo_post_while_hook_waits(void **state);

/* stage_order.c */
void no_setup_on_data_path(void **state);
void stream_enqueue_fault_drain(void **state);
void post_in_reservation_order(void **state);
void ready_out_of_order(void **state);
void ready_nothing_to_copy(void **state);
void ready_fault_held(void **state);
void ready_drain_held(void **state);
void ready_d2h_release_order(void **state);
void stream_batch_fault_drain(void **state);

#endif
