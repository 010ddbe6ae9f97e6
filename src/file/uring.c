/* SPDX-License-Identifier: MIT */
/*
 * The uring backend: the fallback that has to run at hardware speed.
 *
 * An I/O context owns an io_uring and stage lanes (mem/stage.h), opened with
 * it: read lanes, a device stream each, and a write lane, whose pinned
 * rings (on the GPU's NUMA node) are the io_uring's fixed buffers.  One
 * engine loop runs any number of requests over it: each request is cut into
 * chunks at chunk-size boundaries, k chunks are in flight at once, and
 *
 *   device read   hot chunk:  the page-cache range is mapped and registered
 *                             with the device, which copies straight out of it
 *                             (its place in a read lane's order a ticket);
 *                             unregistered once the copy has landed
 *                 cold chunk: storage -> room in a read lane (O_DIRECT where
 *                             allowed), then an async H2D copy, posted once
 *                             every chunk reserved before it in the lane is;
 *                             the room comes back when the copy has landed,
 *                             while the next reads proceed
 *   device write  async D2H copy into room in the write lane, then the
 *                 storage write; the room comes back in the order reserved
 *   host memory   the kernel reads or writes the caller's memory itself
 *                 (O_DIRECT where buffer, offset and size are aligned)
 *
 * O_DIRECT needs aligned offsets: reads round the chunk out to the alignment
 * and copy only the caller's bytes; writes send the unaligned head and tail
 * through the page cache, first, and only the aligned middle, once they are
 * written, through O_DIRECT.
 * Contexts are pooled per driver; each thread doing I/O holds one, so many
 * threads can share one handle.
 *
 * This file has the backend's ops and says how an I/O runs: on one context
 * on the calling thread, or, when large, split into pieces over several
 * workers each with its own context.  The pool is uring_ctx.c's, the engine
 * loop uring_engine.c's, the shared types uring_int.h's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "file/uring_int.h"

/* ---- backend ops -------------------------------------------------------- */

static void ur_fini(void *priv);

static int ur_init(struct gdx_file_driver *drv, void **priv, char *why, size_t whylen)
{
	struct io_uring probe;
	struct ur_drv *ud;
	int ret;

	/* A ring that cannot be set up here means io_uring is off (seccomp, sysctl). */
	ret = io_uring_queue_init(2, &probe, 0);
	if (ret) {
		snprintf(why, whylen, "io_uring refused: %s", strerror(-ret));
		return ret;
	}
	io_uring_queue_exit(&probe);
	ud = calloc(1, sizeof(*ud));
	if (!ud)
		return -ENOMEM;
	ud->dev = gdx_file_driver_device(drv);
	ud->ctr = drv->ctr;
	ud->max_ctx = (unsigned)gdx_cfg_int("file.contexts");
	pthread_mutex_init(&ud->lock, NULL);
	pthread_cond_init(&ud->cond, NULL);
	/* streams only: the contexts' lanes copy on their own streams, no agent */
	ret = gdx_stage_ctx_open(ud->dev, NULL, &ud->stage);
	if (ret) {
		ur_fini(ud);
		return ret;
	}
	if ((unsigned)gdx_cfg_int("file.threads") > 1) {
		ret = gdx_tpool_create((unsigned)gdx_cfg_int("file.threads") - 1, "gdx-split",
				       &ud->split);
		if (ret) {
			ur_fini(ud);
			return ret;
		}
	}
	*priv = ud;
	return 0;
}

static void ur_fini(void *priv)
{
	struct ur_drv *ud = priv;

	while (ud->all) {
		struct ur_ctx *c = ud->all;

		ud->all = c->next_all;
		ur_ctx_destroy(c);
	}
	gdx_tpool_destroy(ud->split);
	gdx_stage_ctx_close(ud->stage);
	pthread_mutex_destroy(&ud->lock);
	pthread_cond_destroy(&ud->cond);
	free(ud);
}

static int ur_open(void *priv, struct gdx_file *f, void **fpriv, char *why, size_t whylen)
{
	unsigned flags = gdx_file_flags(f);
	struct ur_file *uf;
	char path[64];
	int fl, acc;

	(void)priv;
	(void)why;
	(void)whylen;
	uf = calloc(1, sizeof(*uf));
	if (!uf)
		return -ENOMEM;
	/*
	 * Buffered I/O (unaligned host memory, the unaligned head and tail of
	 * writes, cached chunks, the page-cache mapping) goes through a
	 * descriptor without O_DIRECT: where the handle's has it, its buffered
	 * twin, which the handle made at open (file_int.h).
	 */
	uf->fd = f->odirect && f->buffered_fd >= 0 ? f->buffered_fd : f->fd;
	uf->twin = uf->fd != f->fd;
	uf->no_twin = gdx_file_no_twin(f);
	uf->fd_direct = -1;
	uf->pc_min = gdx_cfg_size("file.pagecache_min");
	uf->pc_chunk = GDX_ALIGN_UP(gdx_cfg_size("file.pagecache_chunk"), (size_t)PG);
	uf->pc_depth = (unsigned)gdx_cfg_int("file.pagecache_depth");
	uf->split_min = gdx_cfg_size("file.split_min");
	uf->threads = (unsigned)gdx_cfg_int("file.threads");
	uf->memfs = gdx_file_fd_is_memfs(uf->fd);
	uf->pc_threads = (unsigned)gdx_cfg_int("file.pagecache_threads");
	uf->split_pread = gdx_cfg_bool("file.split_pread");
	uf->split_piece = GDX_ALIGN_UP(gdx_cfg_size("file.split_piece"), (size_t)PG);
	atomic_init(&uf->nowait_ok, true);
	atomic_init(&uf->cachestat_ok, true);
	uf->id = (uint64_t)(uintptr_t)f ^ ((uint64_t)f->fd << 48);
	fl = fcntl(f->fd, F_GETFL);
	acc = fl & O_ACCMODE;
	if (uf->no_twin) {
		/* The descriptor is all there is, O_DIRECT turned off or not. */
		uf->fd_direct = f->fd;
	} else if (flags & GDX_FILE_NO_ODIRECT) {
		snprintf(uf->dio_why, sizeof(uf->dio_why), "O_DIRECT turned off");
	} else if (uf->memfs) {
		/* tmpfs may accept O_DIRECT, but it only adds a copy there. */
		snprintf(uf->dio_why, sizeof(uf->dio_why), "memory filesystem, no O_DIRECT");
	} else if (fl & O_DIRECT) {
		uf->fd_direct = f->fd;
	} else {
		/* A second open of the same file (not a dup) can carry O_DIRECT alone. */
		snprintf(path, sizeof(path), "/proc/self/fd/%d", f->fd);
		uf->fd_direct = open(path, acc | O_DIRECT | O_CLOEXEC);
		uf->own_direct = uf->fd_direct >= 0;
		if (uf->fd_direct < 0)
			snprintf(uf->dio_why, sizeof(uf->dio_why), "O_DIRECT refused at open: %s",
				 strerror(errno));
	}
	atomic_init(&uf->direct_ok, uf->fd_direct >= 0);
	*fpriv = uf;
	return 0;
}

static void ur_close(void *priv, struct gdx_file *f, void *fpriv)
{
	struct ur_file *uf = fpriv;

	(void)f;
	ur_ftab_forget(priv, uf->id);
	if (uf->own_direct)
		close(uf->fd_direct);
	free(uf);
}

ssize_t ur_strict_refuse(struct gdx_file_io *io)
{
	gdx_file_why(&io->info, "uring backend stages device memory through host memory; "
		     "the direct path is not available for this file");
	return GDX_ENOTDIRECT;
}

/*
 * Without a buffered descriptor (ur_file.no_twin) an I/O that has a part
 * O_DIRECT refuses fails whole, before any of it runs: host memory, offset
 * and size must be aligned, and so must a write's offset and size (its head
 * and tail would go buffered).  A device read is always an aligned superset.
 */
bool ur_twin_refuse(struct gdx_file_io *io)
{
	struct ur_file *uf = gdx_file_backend_priv(io->file);
	bool devmem = io->attrs.kind == GDX_MEM_DEVICE;

	if (!uf->no_twin || (devmem && io->op == GDX_FILE_READ) ||
	    gdx_file_dio_aligned(devmem ? NULL : io->buf, io->off, io->size))
		return false;
	io->result = gdx_file_twin_refuse(io->file, &io->info, "uring");
	return true;
}

/* One I/O on one context, start to end on this thread. */
static ssize_t run_one(struct ur_drv *ud, struct gdx_file_io *io)
{
	struct ur_req r;
	struct engine e = { .tailp = &e.list };
	int ret;

	ret = ur_ctx_get(ud, POOL_SEQ, &e.c);
	if (ret) {
		gdx_file_why(&io->info, "uring: no I/O context: %s", gdx_strerror(ret));
		io->untouched = true;
		return io->result = ret;
	}
	ur_req_setup(&e, &r, io);
	ur_engine_add(&e, &r);
	ur_engine_run(&e);
	ur_ctx_put(e.c);
	return io->result;
}

/*
 * A large I/O runs as pieces that several workers, each on its own context,
 * take in order from a shared cursor, up to file.pagecache_depth at a time
 * each: more storage I/O in flight, more copy streams, and the CPU work spread
 * over cores, with no worker left idle while another still has a long part.
 *
 * Only the first file.pagecache_threads workers register page-cache ranges
 * with the device.  On the lent H200 the driver serialises registration and
 * unregistration across threads (docs/storage.md): a second registering
 * thread only queues behind the first, while a worker copying hot data with
 * the CPU (buffered reads into its bounce ring) adds its own bandwidth.
 *
 * The caller is the first worker and holds no context while it waits for the
 * others, so workers queued behind other callers always find one.
 */
struct piece {
	struct gdx_file_io io;
};

struct split {
	struct ur_drv *ud;
	size_t size;			/* of the whole I/O */
	struct piece *pieces;
	unsigned npieces, ahead;
	_Atomic unsigned next;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned pending;		/* workers on the pool that have not returned */
};

struct worker {
	struct split *sp;
	unsigned active;		/* pieces on this worker's engine */
};

static unsigned worker_more(void *arg, struct gdx_file_io **ios, unsigned max)
{
	struct worker *w = arg;
	struct split *sp = w->sp;
	unsigned n = 0;

	while (n < max && w->active < sp->ahead) {
		unsigned k = atomic_fetch_add(&sp->next, 1);

		if (k >= sp->npieces)
			break;
		ios[n++] = &sp->pieces[k].io;
		w->active++;
	}
	return n;
}

static void worker_done(struct gdx_file_io *io, void *arg)
{
	(void)io;
	((struct worker *)arg)->active--;
}

static void worker_run(struct split *sp, bool reg)
{
	struct worker w = { .sp = sp };
	/*
	 * A piece is taken only once every chunk of those held has been issued:
	 * taken earlier, pieces wait on a worker while others run dry, and the
	 * read ends when the most loaded worker does.
	 */
	struct engine e = { .tailp = &e.list, .more = worker_more, .done = worker_done, .arg = &w,
			    .owned = true, .no_register = !reg, .whole_size = sp->size,
			    .lazy_feed = true };

	/* Without a context this worker takes no piece; the caller runs what is left. */
	if (ur_ctx_get(sp->ud, POOL_SPLIT, &e.c))
		return;
	ur_engine_run(&e);
	ur_ctx_put(e.c);
}

static void worker_end(struct split *sp)
{
	pthread_mutex_lock(&sp->lock);
	if (--sp->pending == 0)
		pthread_cond_signal(&sp->cond);
	pthread_mutex_unlock(&sp->lock);
}

static void worker_job(void *arg)
{
	worker_run(arg, false);
	worker_end(arg);
}

static void worker_job_reg(void *arg)
{
	worker_run(arg, true);
	worker_end(arg);
}

static ssize_t run_split(struct ur_drv *ud, struct ur_file *uf, struct gdx_file_io *io,
			 unsigned n, size_t psz)
{
	struct split sp = { .ud = ud, .size = io->size, .ahead = GDX_MAX(uf->pc_depth, 1u),
			    .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	off_t end = io->off + (off_t)io->size, from = io->off, to = end, grid;
	off_t head = GDX_ALIGN_UP(from, (off_t)GDX_FILE_DIO_ALIGN);
	off_t tail = GDX_ALIGN_DOWN(end, (off_t)GDX_FILE_DIO_ALIGN);
	unsigned k, nreg = uf->pc_threads, nedges = 0;
	ssize_t total = 0;
	bool short_seen = false;

	/*
	 * A device write with an O_DIRECT middle writes its unaligned head and
	 * tail first, as pieces of their own, and hands the workers the middle
	 * once they are done (struct ur_req, edges_first: a large folio can span
	 * a head and the middle of several pieces).
	 */
	if (io->op != GDX_FILE_READ && io->attrs.kind == GDX_MEM_DEVICE &&
	    atomic_load(&uf->direct_ok) && head < tail && (head != from || tail != end)) {
		nedges = (head != from) + (tail != end);
		from = head;
		to = tail;
	}
	/*
	 * Pieces are cut at page multiples of the file, wherever the I/O starts
	 * (a checkpoint's data follows a header of any length): a piece cut off
	 * the page grid ends in a chunk of the few bytes up to the grid, one
	 * more storage read and copy per piece, and cold reads would round both
	 * ends of every piece out to O_DIRECT's alignment.  Only the first piece
	 * is shorter.
	 */
	grid = GDX_ALIGN_DOWN(from, (off_t)PG);
	sp.npieces = nedges + (unsigned)(((size_t)(to - grid) + psz - 1) / psz);
	sp.pieces = calloc(sp.npieces, sizeof(*sp.pieces));
	if (!sp.pieces)
		return run_one(ud, io);
	for (k = 0; k < sp.npieces; k++) {
		struct gdx_file_io *p = &sp.pieces[k].io;
		off_t at, stop;

		if (k < nedges) {	/* the head, then the tail */
			bool h = k == 0 && head != io->off;

			at = h ? io->off : tail;
			stop = h ? head : end;
		} else {
			at = grid + (off_t)((size_t)(k - nedges) * psz);
			stop = GDX_MIN(at + (off_t)psz, to);
			at = GDX_MAX(at, from);
		}
		*p = *io;
		p->off = at;
		p->buf = (char *)io->buf + (at - io->off);
		p->size = (size_t)(stop - at);
	}
	atomic_init(&sp.next, nedges);
	for (k = 0; k < nedges; k++) {
		if (run_one(ud, &sp.pieces[k].io) < 0) {
			/* The middle is not written: its pieces keep the I/O's result, 0. */
			atomic_store(&sp.next, sp.npieces);
			n = 1;
		}
	}
	sp.pending = n - 1;
	for (k = 1; k < n; k++) {
		if (gdx_tpool_submit(ud->split, k < nreg ? worker_job_reg : worker_job, &sp)) {
			pthread_mutex_lock(&sp.lock);
			sp.pending--;
			pthread_mutex_unlock(&sp.lock);
		}
	}
	worker_run(&sp, nreg > 0);
	pthread_mutex_lock(&sp.lock);
	while (sp.pending)
		pthread_cond_wait(&sp.cond, &sp.lock);
	pthread_mutex_unlock(&sp.lock);
	/* Pieces no worker could take (no context): each fails or falls back alone. */
	for (k = atomic_load(&sp.next); k < sp.npieces; k++)
		run_one(ud, &sp.pieces[k].io);
	/* Bytes count up to the first short piece (end of file); any error wins. */
	io->untouched = true;
	for (k = 0; k < sp.npieces; k++) {
		struct gdx_file_io *p = &sp.pieces[k].io;

		io->untouched = io->untouched && p->untouched;
		for (int q = 0; q < GDX_FILE_PATH_COUNT; q++)
			io->info.bytes[q] += p->info.bytes[q];
		if (total >= 0 && p->result < 0)
			total = p->result;
		if (total < 0 || short_seen)
			continue;
		total += p->result;
		short_seen = (size_t)p->result < p->size;
	}
	/* Pieces that went different ways each say so. */
	io->info.why[0] = 0;
	for (k = 0; k < sp.npieces; k++) {
		const char *w = sp.pieces[k].io.info.why;
		size_t len = strlen(io->info.why);

		if (!strstr(io->info.why, w))
			snprintf(io->info.why + len, sizeof(io->info.why) - len, "%s%s",
				 len ? " | " : "", w);
	}
	free(sp.pieces);
	pthread_mutex_destroy(&sp.lock);
	pthread_cond_destroy(&sp.cond);
	return io->result = total;
}

static ssize_t ur_io(void *priv, struct gdx_file *f, void *fpriv, struct gdx_file_io *io)
{
	struct ur_drv *ud = priv;
	struct ur_file *uf = fpriv;
	size_t split_min = uf->split_min;
	unsigned n = uf->threads;

	(void)f;
	if (io->strict && io->attrs.kind == GDX_MEM_DEVICE)
		return ur_strict_refuse(io);
	if (ur_twin_refuse(io))
		return io->result;
	if (ud->split && n > 1 && io->size >= split_min) {
		size_t psz = uf->split_piece;

		n = (unsigned)GDX_MIN((size_t)n, (io->size + psz - 1) / psz);
		if (n > 1)
			return run_split(ud, uf, io, n, psz);
	}
	return run_one(ud, io);
}

static void ur_io_many(void *priv, gdx_file_io_more_fn more, gdx_file_io_done_fn done, void *arg)
{
	struct engine e = { .tailp = &e.list, .more = more, .done = done, .arg = arg,
			    .owned = true };
	struct gdx_file_io *io;
	int ret;

	ret = ur_ctx_get(priv, POOL_BATCH, &e.c);
	if (ret) {
		while (more(arg, &io, 1)) {
			io->result = ret;
			done(io, arg);
		}
		return;
	}
	ur_engine_run(&e);
	ur_ctx_put(e.c);
}

const struct gdx_file_backend_ops gdx_file_uring_ops = {
	.name = "uring",
	.init = ur_init,
	.fini = ur_fini,
	.open = ur_open,
	.close = ur_close,
	.io = ur_io,
	.io_many = ur_io_many,
};
