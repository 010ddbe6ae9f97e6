/* SPDX-License-Identifier: MIT */
#ifndef GDX_MEM_STAGE_H
#define GDX_MEM_STAGE_H

/*
 * Staging of device memory through pinned host memory: a producer puts bytes
 * into a byte ring of pinned memory (from a socket, a NIC, a memcpy), posts
 * each piece's copy to or from the device, and defers what must wait for the
 * copies (a completion, an answer) to run in order once they have landed.
 *
 * A context belongs to a device and holds what its lanes share: the copy
 * agent (one descriptor ring per lane), one sticky fault and the halt that
 * stops the agent's workers.  A lane is one producer's ring, one copy path
 * (the agent, or a stream whose progress is learnt from a done word or
 * events, or synchronous copies) and one FIFO of deferred effects.
 *
 * Threads: a context's calls are safe from any thread.  A lane has one
 * producer at a time (reserve, unreserve, post, flush, progress, wait,
 * defer, wait_idle, release, halves, drain), serialised by the caller;
 * effects run on it, in the order deferred.  gdx_stage_landed and
 * gdx_stage_mark may be called from any thread, and see what the producer
 * has learnt; gdx_stage_seen (a post's ticket), gdx_stage_watch and
 * gdx_stage_watch_post are another thread's, which read a done word
 * themselves.
 *
 * Set-up (ctx_open, open) calls the device: never on a posting path.
 * Nothing in reserve, post, flush, progress or wait creates a stream, an
 * event, pinned memory or a worker (tests/unit/test_stage.c checks it).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gdx/device.h>
#include <gdx/mem.h>

#include "common/stats.h"

/*
 * Byte-ring arithmetic: positions count bytes since the ring started and
 * never wrap; head is where the producer writes next, tail what is free
 * again (landed, or released by the consumer).
 */
struct gdx_byte_ring {
	uint64_t head, tail;
	size_t size;
};

static inline size_t gdx_byte_ring_used(const struct gdx_byte_ring *r)
{
	return (size_t)(r->head - r->tail);
}

/*
 * Where the next piece of at most *n bytes goes: returns its offset in the
 * ring and sets *skip, the bytes to pass over first (pad to align, or the
 * tail when the piece would run past the ring's end: one piece is one copy,
 * never two).  A ring too small for the tail and the piece takes the piece
 * up to the end instead (*n shortened).  Room needed: *skip + *n.
 */
static inline size_t gdx_byte_ring_place(const struct gdx_byte_ring *r, size_t *n, size_t align,
					 size_t *skip)
{
	size_t off = (size_t)(r->head % r->size);
	size_t pad = align > 1 ? (align - off % align) % align : 0;

	if (off + pad + *n <= r->size) {
		*skip = pad;
		return off + pad;
	}
	*skip = r->size - off;
	if (*skip + *n > r->size) {
		/* one chunk cannot hold both: fill to the end (aligned sizes keep it aligned) */
		*n = *skip - pad;
		*skip = pad;
		return off + pad;
	}
	return 0;
}

enum gdx_stage_mode {
	GDX_STAGE_AGENT,	/* copies are descriptors on the context's agent ring `lane` */
	GDX_STAGE_WORD,		/* stream copies; the stream stores a seq in a pinned word */
	GDX_STAGE_EVENTS,	/* stream copies; events every mark_every bytes */
	/*
	 * Synchronous copies (gdx_memcpy): landed on return.  A lane opened so
	 * fails only the piece whose copy fails, whatever its fault policy: no
	 * other copy is in flight (its caller unreserves or releases the span).
	 */
	GDX_STAGE_SYNC,
};

/* H2D: room comes back as copies land; D2H: on gdx_stage_release. */
enum gdx_stage_dir { GDX_STAGE_H2D, GDX_STAGE_D2H };

/* What a lane does once its copies cannot land (a fault of the agent or the stream). */
enum gdx_stage_fault {
	GDX_STAGE_FAIL,		/* return the error from every call; the caller ends the lane */
	GDX_STAGE_FALLBACK,	/* halt, fail the unlanded effects and the piece in hand
				   (its reserve or post returns the fault), go on
				   synchronously */
	/*
	 * Once the context is halted (by another lane, or gdx_stage_ctx_fail),
	 * make the unlanded copies again synchronously and go on so; a fault
	 * found before the halt is returned as is, the lane unchanged (tcp's
	 * transmit side ends its connection then, and the teardown halts).
	 */
	GDX_STAGE_REDO,
};

struct gdx_stage_ctx_opts {
	size_t struct_size;	/* sizeof(struct gdx_stage_ctx_opts) */
	bool agent;		/* start a copy agent (else: stream-only context) */
	/*
	 * With agent, what an agent that cannot start means.  false: a
	 * stream-only context (said once): the NVMe/TCP host's lanes run as
	 * well on a stream (WORD, EVENTS), only slower.  true: fail with the
	 * agent's start error and open nothing: tcp moves device memory
	 * without a context then (its stream path) and says why.
	 */
	bool agent_required;
	unsigned lanes;		/* agent rings: lanes 0 .. lanes-1 */
	unsigned entries;	/* descriptors per ring (a power of two) */
	unsigned workers;	/* agent workers (0: the agent's default) */
	unsigned stop_timeout_ms; /* one halt try (0: the agent's default); said per timeout */
	/*
	 * The owner's reaction to the halt (tcp: its transmit side leaves the
	 * agent), once, with the fault: inside the first gdx_stage_ctx_fail,
	 * once no worker runs and before any lane fails its effects; other
	 * callers of gdx_stage_ctx_fail wait for it.  It must not call
	 * gdx_stage_ctx_fail.
	 */
	void (*on_halt)(void *owner, int err);
	void *owner;
};

struct gdx_stage_opts {
	size_t struct_size;	/* sizeof(struct gdx_stage_opts) */
	enum gdx_stage_dir dir;
	enum gdx_stage_mode mode;	/* WORD falls back to EVENTS where the device cannot */
	enum gdx_stage_fault fault;
	size_t chunk;		/* largest single copy (rounded up by the bounce pool) */
	unsigned chunks;	/* ring size in chunks */
	size_t align;		/* pieces start at multiples of it (0, 1: anywhere) */
	size_t mark_every;	/* EVENTS: ring bytes between marks (0: a chunk) */
	unsigned batch;		/* stream modes: copies enqueued together (0, 1: each at once) */
	unsigned marks;		/* marks in flight (0: chunks + 1, or 256 with a word or batches) */
	unsigned lane;		/* AGENT: the agent ring */
	size_t effect_size;	/* bytes of one deferred effect */
	/* runs an effect (err: 0, or why its copies did not land); effect NULL: a run ended */
	void (*run)(void *owner, void *effect, int err);
	/* batches: an effect deferred before its copies were enqueued now has them enqueued */
	void (*enqueued)(void *owner, void *effect);
	void *owner;
	const int *abort;	/* nonzero: waits end with GDX_EDISCONNECTED */
	/*
	 * Reservations that may fill out of order (gdx_stage_ready), at most
	 * this many at once (0: none; the producer fills in order and posts).
	 */
	unsigned pieces;
};

void gdx_stage_ctx_opts_init(struct gdx_stage_ctx_opts *o, size_t struct_size);
void gdx_stage_opts_init(struct gdx_stage_opts *o, size_t struct_size);

struct gdx_stage_ctx;

/*
 * An agent if o->agent and it can start; else, with o->agent_required, the
 * agent's start error (nothing opened), or a stream-only context (said).
 */
int gdx_stage_ctx_open(struct gdx_device *dev, const struct gdx_stage_ctx_opts *o,
		       struct gdx_stage_ctx **out);
bool gdx_stage_ctx_has_agent(const struct gdx_stage_ctx *ctx);
struct gdx_device *gdx_stage_ctx_device(const struct gdx_stage_ctx *ctx);
/* 0, or the sticky fault (the agent's error once it has one); no wait. */
int gdx_stage_ctx_status(struct gdx_stage_ctx *ctx);
/*
 * Makes err the context's fault unless it has one, and halts the agent once
 * (callers at the same time wait for that halt), as long as its workers
 * take: the memory of copies not landed goes back only once none runs (each
 * stop timeout is said), then calls the owner's on_halt the first time.
 * Returns the sticky fault.
 */
int gdx_stage_ctx_fail(struct gdx_stage_ctx *ctx, int err);
/* Faults seen so far (lanes of other owners compare it to react to a halt). */
unsigned gdx_stage_ctx_fault_gen(const struct gdx_stage_ctx *ctx);
/* After its lanes; -ETIMEDOUT: the agent did not stop and its memory is left. */
int gdx_stage_ctx_close(struct gdx_stage_ctx *ctx);

struct gdx_stage_span {
	void *p;		/* where the bytes go */
	uint64_t pos, end;	/* ring positions of p and past the piece */
	size_t n;		/* the piece's length (may be less than asked) */
};

struct gdx_stage_stats {
	uint64_t copies, calls, records, queries, waits, ring_full, redone;
	uint64_t held;		/* pieces ready behind an earlier one not ready */
};

struct gdx_stage_mark {
	struct gdx_event *ev;	/* EVENTS */
	uint32_t seq;		/* WORD, AGENT: landed once the done word reaches it */
	uint64_t pos;		/* enq when placed */
};

struct gdx_stage_copy {		/* REDO: a copy in flight, made again after a halt */
	void *dst;
	const void *src;
	size_t n;
};

struct gdx_stage {
	/* ring bytes whose copies have landed: the one load of gdx_stage_landed */
	uint64_t done;
	uint64_t enq;		/* ... whose copies are enqueued */
	uint64_t marked;	/* enq at the last mark */
	uint64_t posted;	/* end of the last post (gdx_stage_mark) */
	struct gdx_byte_ring r;
	struct gdx_stage_opts o;
	struct gdx_stage_ctx *ctx;
	struct gdx_device *dev;
	enum gdx_stage_mode mode;	/* SYNC after a FALLBACK or REDO */
	int err;		/* FAIL: sticky */
	void *base;
	struct gdx_bounce_pool *pool;
	unsigned ntaken;
	struct gdx_stream *stream;
	uint32_t *word;		/* WORD: the lane's; AGENT: the ring's, the agent's */
	uint32_t seq;		/* the last seq placed */
	struct gdx_copy_agent *agent;
	struct gdx_stage_mark *marks;	/* FIFO of nmarks; nmarked from mark0 not landed */
	struct gdx_stage_copy *copies;	/* REDO: beside marks */
	unsigned nmarks, mark0, nmarked;
	/* copies held back for a batch */
	void **pend_dst;
	const void **pend_src;
	size_t *pend_len;
	unsigned npend;
	size_t pend_bytes;
	/* deferred effects: entries of esz bytes (mark, then the effect), FIFO */
	unsigned char *fifo;
	size_t esz;
	unsigned fcap, fhead, fn;
	bool in_run;
	unsigned char *scratch;	/* the effect being run */
	uint64_t resv;		/* head before the last reservation */
	/*
	 * gdx_stage_watch's view of a done word, which does not wait for the
	 * producer to read it: the last mark given a seq (release), that seq
	 * (stored before it), and the word (kept after a fault drops st->word).
	 */
	uint64_t wmark;
	uint32_t wseq;
	const uint32_t *wword;
	const uint32_t *tword;	/* AGENT: the word tickets are on (gdx_stage_seen) */
	/*
	 * With o.pieces: the reservations not yet posted (H2D) or released
	 * (D2H), in reservation order; entries of psz bytes (struct
	 * gdx_stage_piece, then the effect), FIFO.  perr: drained, what the
	 * pieces still to come fail with.
	 */
	unsigned char *pfifo;
	size_t psz;
	unsigned phead, pn, pready;
	int perr;
	struct gdx_counter cnt[8];	/* gdx_stage_stats, in its order */
};

int gdx_stage_open(struct gdx_stage_ctx *ctx, const struct gdx_stage_opts *o,
		   struct gdx_stage **out);
/* After gdx_stage_drain: frees the ring (its copies landed, or the agent is halted). */
void gdx_stage_close(struct gdx_stage *st);

#define GDX_STAGE_NOWAIT 1u
/*
 * Room for a piece of at most n bytes (and a chunk) at the head, placed as
 * gdx_byte_ring_place says (sp->n may be less than n).  H2D waits for the
 * oldest marks, or -EAGAIN with GDX_STAGE_NOWAIT; D2H, whose room only the
 * consumer gives back, -EAGAIN.  Returns the lane's error, or
 * GDX_EDISCONNECTED once *abort.  The span is the producer's until it posts
 * (or unreserves) it.  With o.pieces, -EAGAIN too while that many are out.
 */
int gdx_stage_reserve(struct gdx_stage *st, size_t n, unsigned flags, struct gdx_stage_span *sp);
/* Gives back the last reservation, not posted. */
void gdx_stage_unreserve(struct gdx_stage *st, const struct gdx_stage_span *sp);
/*
 * Shrinks a reservation, not posted, to its first n bytes (a producer that
 * posts what came so far): the last one gives the rest of its room back at
 * once; an earlier one keeps it, unused, until its mark lands.
 */
void gdx_stage_trim(struct gdx_stage *st, struct gdx_stage_span *sp, size_t n);
/*
 * Copies the reserved piece: H2D from sp->p to devp, D2H from devp to sp->p;
 * its mark is sp->end.  A copy whose post failed keeps its room and memory
 * (a worker may still make it) until the context is halted.  Pieces are
 * posted in the order they were reserved (-EINVAL otherwise): the room
 * comes back up to the marks that landed, so a piece posted ahead of an
 * earlier one would give that one's room back while it is still filled.  A
 * producer whose pieces fill in any order (storage reads, RDMA responses)
 * opens the lane with o.pieces and hands each to gdx_stage_ready, which
 * posts them in this order; a piece with nothing to copy posts sp->n = 0,
 * its mark giving its room back in turn.
 *
 * A mark is a ring position, so a copy of bytes kept elsewhere (tcp's kept
 * ring, pinned memory of the same device) takes a ticket: a reservation of
 * align bytes whose span the caller posts with sp->p and sp->n set to those
 * bytes.  It costs a few bytes of ring per such copy and gives it its own
 * mark; the caller keeps the bytes until the mark has landed.
 */
int gdx_stage_post(struct gdx_stage *st, const struct gdx_stage_span *sp, void *devp);
/* Enqueues the copies held back for a batch, with one mark behind them. */
int gdx_stage_flush(struct gdx_stage *st);
/*
 * Learns without blocking how far the copies got and runs the effects whose
 * marks have landed, in order.  On a fault applies the lane's policy; returns
 * the lane's error (FAIL) or 0.
 */
int gdx_stage_progress(struct gdx_stage *st);

static inline bool gdx_stage_landed(const struct gdx_stage *st, uint64_t mark)
{
	return __atomic_load_n(&st->done, __ATOMIC_ACQUIRE) >= mark;
}

/* End of the last piece posted: its mark. */
static inline uint64_t gdx_stage_mark(const struct gdx_stage *st)
{
	return __atomic_load_n(&st->posted, __ATOMIC_RELAXED);
}

/*
 * AGENT lanes: the last post's ticket, its place on the agent's done word
 * (producer).  Kept beside the post's mark, it lets another thread see the
 * copy landed without the producer learning it first (gdx_stage_seen).
 */
static inline uint32_t gdx_stage_ticket(const struct gdx_stage *st)
{
	return st->seq;
}

/*
 * Any thread: whether the copy posted with mark and ticket has landed.  One
 * acquire load of the done word while the agent runs; after a fault (the
 * word stops, copies are made again or synchronously) what the producer
 * learnt.
 */
static inline bool gdx_stage_seen(const struct gdx_stage *st, uint64_t mark, uint32_t ticket)
{
	return (st->tword && (int32_t)(__atomic_load_n(st->tword, __ATOMIC_ACQUIRE) - ticket) >= 0) ||
	       gdx_stage_landed(st, mark);
}

/*
 * A piece of a lane opened with o.pieces is filled: H2D, its bytes are
 * sp->p, sp->n (a part of its room; n = 0: nothing to copy, a failed or
 * empty read) for devp, and effect (effect_size bytes, copied; NULL: none)
 * runs once they have landed; D2H, whose copies the producer posts itself
 * in order, the consumer is done with its bytes (effect NULL).  Every ready
 * piece from the oldest reservation up to the first not ready is then
 * posted, its effect deferred on its mark (H2D), or its room released
 * (D2H), in reservation order: a piece ready behind one that is not is
 * held until that one is.  A piece whose post fails runs its
 * effect with the error behind the effects deferred before it, and so do
 * the pieces behind it on a lane the failure ended.  After gdx_stage_drain,
 * the held pieces have failed and every piece that gets ready fails at once,
 * with the drain's err.  Returns 0, 1 (sp's piece is held) or the first
 * post's error (the caller ends the lane).
 */
int gdx_stage_ready(struct gdx_stage *st, const struct gdx_stage_span *sp, void *devp,
		    const void *effect);
/* Ready pieces held behind one that is not. */
static inline unsigned gdx_stage_held(const struct gdx_stage *st)
{
	return st->pready;
}
/* The mark of the oldest effect deferred (gdx_stage_mark when none is). */
uint64_t gdx_stage_first_mark(const struct gdx_stage *st);

/* Ring bytes whose copies are enqueued (behind a batch: not yet). */
static inline uint64_t gdx_stage_enqueued(const struct gdx_stage *st)
{
	return st->enq;
}

static inline enum gdx_stage_mode gdx_stage_mode_of(const struct gdx_stage *st)
{
	return st->mode;
}

/*
 * Waits until the copies up to mark have landed (checking the device every
 * 64 spins).  0; REDO: the number of copies made again (>0); or the error.
 */
int gdx_stage_wait(struct gdx_stage *st, uint64_t mark);
/*
 * Another thread's wait, mark already posted: until the copies up to it have
 * landed (0), the context faults or *abort is set (the error).  With a done
 * word it reads the word itself, so it ends without the producer's progress
 * (a producer that waits on this thread, or posts no more); with events it
 * sees what the producer has learnt.  A stream lane's watch asks the stream
 * every 64 spins too: idle, every copy landed; its error ends the watch.
 */
int gdx_stage_watch(const struct gdx_stage *st, uint64_t mark);
/*
 * gdx_stage_watch for one post of an AGENT lane, by its ticket: until that
 * copy has landed, not every copy posted up to its mark's seq when the
 * watch began.
 */
int gdx_stage_watch_post(const struct gdx_stage *st, uint64_t mark, uint32_t ticket);
/*
 * Waits until no deferred effect is left, running them, or input(arg) > 0
 * (the producer has new input: returns 1); input() < 0 is returned as is.
 * Polls input and the copies in turn; with events, for up to poll_ns, then
 * waits for the stream.
 */
int gdx_stage_wait_idle(struct gdx_stage *st, int (*input)(void *arg), void *arg,
			uint64_t poll_ns);
/*
 * Runs effect (effect_size bytes, copied) once the copies up to mark have
 * landed, behind the effects deferred before it.  Without memory to queue
 * it, waits for them all and runs them, then it.
 */
int gdx_stage_defer(struct gdx_stage *st, uint64_t mark, const void *effect);
/* Deferred effects not yet run. */
static inline unsigned gdx_stage_deferred(const struct gdx_stage *st)
{
	return st->fn;
}
/* Effects deferred or copies held back for a batch: gdx_stage_wait_idle has work. */
static inline bool gdx_stage_busy(const struct gdx_stage *st)
{
	return st->fn || st->npend;
}
/* D2H: the consumer is done with the bytes before end. */
void gdx_stage_release(struct gdx_stage *st, uint64_t end);
/*
 * The ring as two buffers of *bsz bytes (a lane gone synchronous lends them
 * out); -EBUSY while copies may still use them.
 */
int gdx_stage_halves(struct gdx_stage *st, void *b[2], size_t *bsz);
/* The ring's memory (pinned, the lane's for its life: a NIC may register it). */
void *gdx_stage_ring(const struct gdx_stage *st, size_t *size);
/*
 * Teardown: waits for every copy and runs every effect; where the copies
 * cannot land, halts the context and runs the effects left with err.  Then
 * the held pieces (o.pieces) fail with err in reservation order, and the
 * pieces not yet ready fail as they get ready.  Returns 0 or why the copies
 * did not land.
 */
int gdx_stage_drain(struct gdx_stage *st, int err);
void gdx_stage_stats(const struct gdx_stage *st, struct gdx_stage_stats *s);

#endif
