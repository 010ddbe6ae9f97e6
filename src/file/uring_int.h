/* SPDX-License-Identifier: MIT */
/*
 * The uring backend's types, shared by its files: uring.c (the backend's ops,
 * how an I/O runs: on one context, or split over workers), uring_ctx.c (the
 * pool of I/O contexts and their fixed-file tables) and uring_engine.c (the
 * engine loop that runs requests over a context, on the thread holding it).
 */
#ifndef GDX_FILE_URING_INT_H
#define GDX_FILE_URING_INT_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "file/file_int.h"
#include "mem/stage.h"

#define UR_FILES 64
#define PG 4096u
#define UR_FIXED_MAX ((size_t)1 << 30)	/* io_uring's largest fixed buffer */

struct ur_ctx;
struct engine;

/* Single I/Os, the workers of split I/Os and batches each tune their own contexts. */
enum ur_pool { POOL_SEQ, POOL_SPLIT, POOL_BATCH, POOL_COUNT };

struct ur_drv {
	struct gdx_device *dev;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct ur_ctx *idle[POOL_COUNT];
	struct ur_ctx *all;
	unsigned nctx[POOL_COUNT];
	unsigned max_ctx;
	struct gdx_tpool *split;	/* runs the parts of large I/Os beside the caller */
	struct gdx_stage_ctx *stage;	/* the contexts' lanes (stream-only) */
	struct gdx_counter *ctr;	/* the driver's counters */
};

struct ur_file {
	uint64_t id;
	int fd;			/* buffered I/O: the handle's descriptor without O_DIRECT */
	int fd_direct;		/* -1: no O_DIRECT for this file */
	bool own_direct;	/* fd_direct was opened here */
	bool twin;		/* fd is the handle's buffered twin (its own one has O_DIRECT) */
	/*
	 * The handle's descriptor has O_DIRECT and its twin could not be opened:
	 * fd is the O_DIRECT one too, only mapped and asked about the cache;
	 * every I/O goes O_DIRECT and what cannot is refused (twin_refuse).
	 */
	bool no_twin;
	_Atomic bool direct_ok;
	bool memfs;
	char dio_why[96];
	/* Knobs as they were when the handle opened: read once, not per I/O. */
	size_t pc_min, pc_chunk, split_min;
	unsigned pc_depth, threads, pc_threads;
	size_t split_piece;
	bool split_pread;
	_Atomic bool nowait_ok;	/* preadv2(RWF_NOWAIT) works on this file */
	_Atomic bool cachestat_ok;	/* cachestat(2) works on this file */
};

struct ur_req;
struct ur_lane;

/* One chunk in flight: its storage I/O, and its place in a lane's ring. */
struct ur_slot {
	struct ur_req *req;
	off_t ks;		/* file offset of the kernel I/O */
	size_t klen, kdone;
	bool kdirect;
	bool edge;		/* a write's buffered head or tail (ur_req.edges) */
	bool kfixed;		/* kbuf lies in a lane's ring (registered with io_uring) */
	unsigned char *kbuf;
	off_t us;		/* the caller's part of the chunk, in file offsets */
	size_t ulen;
	unsigned char *pc;	/* page-cache range to unregister after the copy */
	size_t pc_len;
	struct ur_slot *next;	/* free list */
	/* device memory: the lane, the reservation and the copy */
	struct ur_lane *lane;
	struct gdx_stage_span sp;
};

/*
 * A stage lane (mem/stage.h) of a context, its ring fixed buffers of the
 * io_uring (one, or over 1 GiB several: lane_fixed).  Its room comes back
 * in the order it was reserved, storage I/O completes in any order: the
 * lane's pieces (gdx_stage_ready) put them back in order.  A read lane
 * (H2D) posts a slot's copy once every slot before it is ready; the slot
 * leaves when its copy has landed (its effect).  The write lane (D2H) posts
 * each copy at once, and gives room back in order as storage writes end.
 */
struct ur_lane {
	struct ur_ctx *c;
	struct gdx_stage *st;
	unsigned char *base;	/* its ring */
	unsigned buf;		/* its ring's first fixed-buffer index */
	size_t seg;		/* ring bytes from one of its fixed buffers to the next */
	int err;		/* a copy failed: the lane is done (its context too) */
};

struct ur_ctx {
	struct ur_drv *ud;
	enum ur_pool pool;
	struct io_uring ring;
	unsigned nslots;
	size_t chunk;
	bool fixed_bufs, fixed_files;
	struct ur_slot *slots;
	struct ur_slot *free_slots;
	struct ur_lane *rd;	/* device reads, one stream each, taken in turn */
	unsigned nrd, next_rd;
	struct ur_lane wr;	/* device writes */
	bool broken;		/* a lane failed: destroyed when given back, not pooled */
	struct engine *eng;	/* the engine running on it (lanes' effects) */
	pthread_mutex_t ftab_lock;
	struct { uint64_t id; bool direct; unsigned refs; } ftab[UR_FILES];
	struct ur_ctx *next_idle, *next_all;
};

struct ur_req {
	struct gdx_file_io *io;
	struct ur_file *uf;
	bool dev;		/* the caller's memory is device memory */
	bool host_direct;	/* host memory, offset and size allow O_DIRECT */
	off_t off, end, cur, eof;
	/*
	 * A write with an O_DIRECT middle between an unaligned head and tail
	 * (edges_first) issues the head, then the tail (at tail_at, lim then
	 * stops the cursor there), and the middle only once both are written:
	 * the direct write then writes back and drops the cached pages it
	 * overlaps, where a page or large folio spanning a head dirtied at the
	 * same time would keep stale bytes (as posix does, docs/storage.md).
	 */
	off_t lim, tail_at;
	bool edges_first;
	unsigned edges;		/* head and tail writes not yet finished */
	int err;
	unsigned inflight;
	int fslot[2];		/* fixed-file index for [buffered, direct], or -1 */
	/* page-cache state */
	unsigned char *map;
	size_t map_len;
	off_t map_off;
	off_t fsize;
	unsigned char *vec;
	unsigned pc_inflight, pc_depth;
	size_t pc_chunk;
	bool pc_on;		/* the range is mapped: mincore tells hot from cold */
	bool pc_reg;		/* hot ranges may be registered with the device */
	char pc_why[80];
	unsigned kdirect_chunks, kbuffered_chunks, kpread_chunks;
	struct ur_req *next;
};

struct engine {
	struct ur_ctx *c;
	struct ur_req *list, **tailp;	/* requests not yet finished, oldest first */
	unsigned active, kio;
	unsigned retired;		/* copies landed (lanes' effects run) this pass */
	gdx_file_io_more_fn more;	/* feeds further I/Os while the engine runs */
	gdx_file_io_done_fn done;
	void *arg;
	bool owned;			/* requests were allocated here */
	bool no_register;		/* hot data goes by CPU copy: see run_split */
	size_t whole_size;		/* of the I/O the requests are pieces of, or 0 */
	bool lazy_feed;			/* take I/Os only once every chunk held is issued */
};

/* uring_ctx.c */
/* An idle context of the pool, else a new one while under file.contexts, else waits. */
int ur_ctx_get(struct ur_drv *ud, enum ur_pool pool, struct ur_ctx **out);
/* Back to the pool; a broken one is destroyed (the next ur_ctx_get makes another). */
void ur_ctx_put(struct ur_ctx *c);
void ur_ctx_destroy(struct ur_ctx *c);
/* Fixed-file index for one of the file's descriptors, or -1 to use it plainly. */
int ur_ftab_get(struct ur_ctx *c, struct ur_file *uf, bool direct);
void ur_ftab_put(struct ur_ctx *c, int i);
/* A closing file must not stay open through a ring's table. */
void ur_ftab_forget(struct ur_drv *ud, uint64_t id);

/* uring_engine.c: e->c is held by the calling thread, which runs the engine. */
/* The lanes' effects: a read's copy landed (or err), a write's copy landed (or err). */
void ur_read_landed(void *lane, void *effect, int err);
void ur_write_landed(void *lane, void *effect, int err);
void ur_req_setup(struct engine *e, struct ur_req *r, struct gdx_file_io *io);
void ur_engine_add(struct engine *e, struct ur_req *r);
/* Runs until every request added or fed (e->more) has finished. */
void ur_engine_run(struct engine *e);

/* uring.c: refusals before an I/O runs (they set io's record and result). */
ssize_t ur_strict_refuse(struct gdx_file_io *io);
bool ur_twin_refuse(struct gdx_file_io *io);

#endif
