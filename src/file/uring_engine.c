/* SPDX-License-Identifier: MIT */
/*
 * The uring backend's engine: one loop, on the thread that holds an I/O
 * context, runs any number of requests over it (uring.c says how): chunks
 * cut at chunk-size boundaries, storage I/O through the ring into room in
 * the context's stage lanes or the caller's memory, copies to and from
 * device memory posted on the lanes in the order their room was reserved,
 * hot page-cache ranges registered with the device, and each request
 * finished once its last chunk has landed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "file/uring_int.h"

#define UR_REAP 8	/* storage completions handled per engine pass */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22	/* Linux 5.14 */
#endif

/* ---- the engine ---------------------------------------------------------- */

static void ctr_add(struct ur_ctx *c, int which, uint64_t n)
{
	gdx_counter_add(&c->ud->ctr[which], n);
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct ur_slot *slot_take(struct ur_ctx *c)
{
	struct ur_slot *s = c->free_slots;

	if (s) {
		c->free_slots = s->next;
		s->next = NULL;
	}
	return s;
}

static void slot_release(struct engine *e, struct ur_slot *s)
{
	s->req->inflight--;
	if (s->edge)
		s->req->edges--;
	s->edge = false;
	s->req = NULL;
	s->lane = NULL;
	s->next = e->c->free_slots;
	e->c->free_slots = s;
}

static void req_fail(struct ur_req *r, int err)
{
	if (!r->err)
		r->err = err;
}

static void kio_submit(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->c->ring);
	int fi = r->fslot[s->kdirect], fd = s->kdirect ? r->uf->fd_direct : r->uf->fd;
	bool fixed = s->kfixed && e->c->fixed_bufs;
	/* the fixed buffer the chunk's room starts in holds all of it (lane_fixed) */
	int buf = fixed ? (int)(s->lane->buf + (size_t)(s->kbuf - s->lane->base) / s->lane->seg) : 0;
	unsigned char *p = s->kbuf + s->kdone;
	unsigned len = (unsigned)(s->klen - s->kdone);
	off_t at = s->ks + (off_t)s->kdone;

	if (!sqe) {
		io_uring_submit(&e->c->ring);
		sqe = io_uring_get_sqe(&e->c->ring);
	}
	if (fi >= 0)
		fd = fi;
	if (r->io->op == GDX_FILE_READ) {
		if (fixed)
			io_uring_prep_read_fixed(sqe, fd, p, len, (uint64_t)at, buf);
		else
			io_uring_prep_read(sqe, fd, p, len, (uint64_t)at);
	} else {
		if (fixed)
			io_uring_prep_write_fixed(sqe, fd, p, len, (uint64_t)at, buf);
		else
			io_uring_prep_write(sqe, fd, p, len, (uint64_t)at);
	}
	if (fixed)
		ctr_add(e->c, GDX_FILE_CTR_FIXED, 1);
	if (fi >= 0)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, s);
	e->kio++;
}

/* ---- lanes: device memory through the stage rings ------------------------ */

/*
 * The lane's copies cannot land (a copy could not be enqueued, or the
 * stream failed): the copies enqueued before land or fail with it (the
 * drain runs their effects), the slots left go out with err as they come,
 * and the context is not used again.
 */
static void lane_break(struct ur_lane *l, int err)
{
	if (l->err)
		return;
	GDX_ERR("file", "a device copy failed (%s): the I/O context's reads and writes behind "
		"it fail, and the context is replaced", gdx_strerror(err));
	l->err = err;
	l->c->broken = true;
	gdx_stage_drain(l->st, err);
}

/* Room for a chunk of n bytes in lane l, in reservation order: 0, -EAGAIN or the lane's error. */
static int lane_reserve(struct ur_lane *l, struct ur_slot *s, size_t n)
{
	int rc = l->err ? l->err : gdx_stage_reserve(l->st, n, GDX_STAGE_NOWAIT, &s->sp);

	if (rc)
		return rc;
	/* a lane of two chunks or more places a chunk whole */
	s->lane = l;
	return 0;
}

/* Gives back s's reservation, the lane's last, not posted. */
static void lane_unreserve(struct ur_slot *s)
{
	gdx_stage_unreserve(s->lane->st, &s->sp);
	s->lane = NULL;
}

/* Room in the next read lane that has it (they take turns): 0, -EAGAIN, or an error. */
static int rd_reserve(struct engine *e, struct ur_slot *s, size_t n)
{
	struct ur_ctx *c = e->c;
	bool full = false;
	int rc = 0;

	for (unsigned i = 0; i < c->nrd; i++) {
		unsigned k = (c->next_rd + i) % c->nrd;
		int ret = lane_reserve(&c->rd[k], s, n);

		if (!ret) {
			c->next_rd = (k + 1) % c->nrd;
			return 0;
		}
		full |= ret == -EAGAIN;
		rc = ret;
	}
	/* a broken lane is skipped while another may have room */
	return full ? -EAGAIN : rc;
}

/* A read slot is done with: its copy landed (or err). */
static void rd_done(struct engine *e, struct ur_slot *s, int err)
{
	struct ur_req *r = s->req;

	e->retired++;
	if (err)
		req_fail(r, err);
	if (s->pc) {
		uint64_t t0 = gdx_now_ns();

		gdx_host_unregister(e->c->ud->dev, s->pc);
		ctr_add(e->c, GDX_FILE_CTR_PC_UNREG_NS, gdx_now_ns() - t0);
		s->pc = NULL;
		r->pc_inflight--;
	}
	slot_release(e, s);
}

void ur_read_landed(void *lane, void *effect, int err)
{
	struct ur_lane *l = lane;
	struct ur_slot *s;

	if (!effect)
		return;
	memcpy(&s, effect, sizeof(s));
	rd_done(l->c->eng, s, err);
}

/*
 * A read slot's storage part is over: its copy, cn bytes from cp (none: a
 * failed read, past EOF), is posted once every slot reserved before it in
 * the lane is ready (gdx_stage_ready holds it till then: the lane gives
 * room back up to the marks that landed), and the slot retires when it has
 * landed.
 */
static void rd_ready(struct engine *e, struct ur_slot *s, const unsigned char *cp, size_t cn)
{
	struct ur_lane *l = s->lane;
	struct ur_req *r = s->req;
	struct gdx_stage_span sp = s->sp;
	uint64_t t0 = gdx_now_ns();
	int rc;

	sp.p = (void *)(uintptr_t)cp;
	sp.n = cn;
	rc = gdx_stage_ready(l->st, &sp, (char *)r->io->buf + (s->us - r->off), &s);
	ctr_add(e->c, GDX_FILE_CTR_COPY_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_COPIES, cn != 0);
	if (rc == 1)
		ctr_add(e->c, GDX_FILE_CTR_HELD, 1);
	if (rc < 0)
		lane_break(l, rc);
}

/* A write's storage part is over: its room goes back in turn, the slot now. */
static void wr_done(struct engine *e, struct ur_slot *s)
{
	gdx_stage_ready(s->lane->st, &s->sp, NULL, NULL);
	slot_release(e, s);
}

/* A write's bytes are in its room (or err): to storage, or out of the lane. */
void ur_write_landed(void *lane, void *effect, int err)
{
	struct ur_lane *l = lane;
	struct engine *e = l->c->eng;
	struct ur_slot *s;

	if (!effect)
		return;
	memcpy(&s, effect, sizeof(s));
	e->retired++;
	if (err)
		req_fail(s->req, err);
	if (!s->req->err) {
		kio_submit(e, s);
		return;
	}
	wr_done(e, s);
}

/* A device write's chunk: its bytes copied out of the device into its room, then written. */
static void wr_start(struct engine *e, struct ur_slot *s, const void *devp)
{
	struct ur_lane *l = s->lane;
	uint64_t t0 = gdx_now_ns();
	int rc = gdx_stage_post(l->st, &s->sp, (void *)(uintptr_t)devp);

	ctr_add(e->c, GDX_FILE_CTR_COPY_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_COPIES, 1);
	if (!rc) {
		/* written once its copy lands (without memory to queue it: now) */
		rc = gdx_stage_defer(l->st, s->sp.end, &s);
		if (rc)
			lane_break(l, rc);
		return;
	}
	/* not posted: its room stays taken, the lane is done */
	lane_break(l, rc);
	req_fail(s->req, rc);
	wr_done(e, s);
}

/* Learns what the lanes' copies did; their effects retire slots. */
static void lanes_progress(struct engine *e)
{
	struct ur_ctx *c = e->c;

	for (unsigned i = 0; i <= c->nrd; i++) {
		struct ur_lane *l = i < c->nrd ? &c->rd[i] : &c->wr;
		int rc;

		if (l->err || !gdx_stage_deferred(l->st))
			continue;
		rc = gdx_stage_progress(l->st);
		if (rc)
			lane_break(l, rc);
	}
}

/* A lane with copies posted and not landed, or NULL. */
static struct ur_lane *lanes_busy(struct ur_ctx *c)
{
	for (unsigned i = 0; i <= c->nrd; i++) {
		struct ur_lane *l = i < c->nrd ? &c->rd[i] : &c->wr;

		if (!l->err && gdx_stage_deferred(l->st))
			return l;
	}
	return NULL;
}

/* Bytes of [ps, ps+len) in the page cache, counted from ps up to the first miss. */
static size_t pc_resident(struct ur_ctx *c, struct ur_req *r, off_t ps, size_t len)
{
	size_t np = GDX_ALIGN_UP(len, (size_t)PG) / PG;
	uint64_t t0 = gdx_now_ns();
	int ret = mincore(r->map + (ps - r->map_off), np * PG, r->vec);

	ctr_add(c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	if (ret)
		return 0;
	for (size_t i = 0; i < np; i++)
		if (!(r->vec[i] & 1))
			return i * PG;
	return len;
}

/*
 * Tries the next chunk of a device read out of the page cache.  Returns 1 if
 * it was issued, 0 to go by bounce instead, -EAGAIN to wait for a page-cache
 * copy to retire first.
 */
static int pc_issue(struct engine *e, struct ur_req *r, struct ur_slot *s)
{
	struct gdx_device *dev = e->c->ud->dev;
	off_t ps = GDX_ALIGN_DOWN(r->cur, (off_t)PG);
	off_t pe = GDX_MIN(GDX_MIN(ps + (off_t)r->pc_chunk, r->end), r->fsize);
	size_t rlen = GDX_ALIGN_UP((size_t)(pe - ps), (size_t)PG);
	unsigned char *p = r->map + (ps - r->map_off);
	uint64_t t0;
	size_t hot;
	int ret;

	if (!r->pc_reg || r->cur >= r->fsize)
		return 0;
	hot = pc_resident(e->c, r, ps, (size_t)(pe - ps));
	if (hot < (size_t)(pe - ps)) {
		/* A hot stretch long enough to be worth a registration goes alone. */
		snprintf(r->pc_why, sizeof(r->pc_why), "some data not in the page cache");
		if (hot < e->c->chunk)
			return 0;
		pe = ps + (off_t)hot;
		rlen = hot;
	}
	if (r->pc_inflight >= r->pc_depth)
		return -EAGAIN;
	/* the copy's place in a read lane's order: a ticket of the alignment (stage.h) */
	ret = rd_reserve(e, s, GDX_FILE_DIO_ALIGN);
	if (ret) {
		if (ret != -EAGAIN)
			req_fail(r, ret);
		return -EAGAIN;
	}
	if (r->uf->pc_threads > 1) {
		/*
		 * The driver serialises registration across threads, and faulting
		 * the pages in inside it (page by page on tmpfs) holds the other
		 * registering workers up: map them first, outside it.  On the H200
		 * four threads registering 16 MiB ranges of tmpfs went from 9.6 to
		 * 13.1 GB/s this way; for a single thread it only moves the cost.
		 * Best effort: kernels before 5.14 fault the pages in as before.
		 */
		t0 = gdx_now_ns();
		madvise(p, rlen, MADV_POPULATE_READ);
		ctr_add(e->c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	}
	t0 = gdx_now_ns();
	ret = gdx_host_register(dev, p, rlen, GDX_HOST_REGISTER_READONLY);
	ctr_add(e->c, GDX_FILE_CTR_PC_REG_NS, gdx_now_ns() - t0);
	ctr_add(e->c, ret ? GDX_FILE_CTR_PC_REFUSED : GDX_FILE_CTR_PC_RANGES, 1);
	if (ret) {
		snprintf(r->pc_why, sizeof(r->pc_why), "registering the mapping failed: %s",
			 gdx_strerror(ret));
		r->pc_reg = false;
		lane_unreserve(s);
		return 0;
	}
	s->req = r;
	r->inflight++;
	s->pc = p;
	s->pc_len = rlen;
	s->us = r->cur;
	s->ulen = (size_t)(pe - r->cur);
	r->pc_inflight++;
	r->cur = pe;
	r->io->info.bytes[GDX_FILE_PATH_PAGECACHE] += s->ulen;
	rd_ready(e, s, r->map + (s->us - r->map_off), s->ulen);
	return 1;
}

static bool hot_read(struct engine *e, struct ur_slot *s);

/* The workers of a split device read pread cached chunks themselves (hot_read). */
static bool split_pread(const struct engine *e, const struct ur_req *r)
{
	return e->whole_size && r->uf->split_pread;
}

/* cachestat(2), Linux 6.5; declared here for older headers. */
struct ur_cachestat_range {
	uint64_t off, len;
};

struct ur_cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

#define UR_NR_CACHESTAT 451
/* The largest page-cache folio: 2^11 pages, the XArray's multi-index limit. */
#define UR_FOLIO_MAX ((off_t)PG << 11)

/* cachestat(2) of [off, off + len): pages in the page cache, or -1 (errno set). */
static long cached_pages(int fd, off_t off, size_t len)
{
	struct ur_cachestat_range cr = { .off = (uint64_t)off, .len = len };
	struct ur_cachestat cs;

	return syscall(UR_NR_CACHESTAT, fd, &cr, &cs, 0) ? -1 : (long)cs.nr_cache;
}

/*
 * Whether the chunk of r at c is all in the page cache: 1 yes, 0 no, -1
 * cannot tell.  Mapped requests ask mincore(); split workers that do not map
 * ask cachestat(2), one count per range, where mincore() looks at every page
 * (a tenth of a hot 1 GiB ext4 read on the H200).
 */
static int chunk_cached(struct engine *e, struct ur_req *r, off_t c, size_t chunk)
{
	struct ur_file *uf = r->uf;
	off_t ps = GDX_ALIGN_DOWN(c, (off_t)PG), base = GDX_ALIGN_DOWN(ps, UR_FOLIO_MAX);
	uint64_t t0;
	size_t n, want;
	long got;

	if (uf->memfs)
		return 1;
	if (c >= r->fsize)
		return 0;
	n = (size_t)(GDX_MIN(GDX_MIN(ps + (off_t)chunk, r->end), r->fsize) - ps);
	if (r->pc_on)
		return pc_resident(e->c, r, ps, n) == n;
	if (!split_pread(e, r) || !atomic_load_explicit(&uf->cachestat_ok, memory_order_relaxed))
		return -1;
	want = GDX_ALIGN_UP(n, (size_t)PG) / PG;
	t0 = gdx_now_ns();
	got = cached_pages(uf->fd, ps, n);
	if (got >= 0 && (size_t)got < want && ps > base) {
		/*
		 * Counted again from a boundary no folio straddles, less the
		 * pages before the chunk.  Linux (6.18 here) can count a range
		 * that starts inside a large folio short: when its walk
		 * reschedules right after that folio, xas_pause() resumes as many
		 * slots too far as the start lay past the folio's head, and the
		 * folios it jumps go uncounted.  A hot chunk then went O_DIRECT
		 * to the disk (test_file path_reporting failed about 1 run in 60
		 * under ASan, mostly with load beside it; a probe from 1 MiB into
		 * a file of 2 MiB folios read 256 of 257 pages cached while
		 * mincore() saw all 257).  Only a short count asks again: the
		 * common answer, all cached, costs one call.
		 */
		long whole = cached_pages(uf->fd, base, (size_t)(ps - base) + n);
		long before = cached_pages(uf->fd, base, (size_t)(ps - base));

		if (whole >= 0 && before >= 0)
			got = GDX_MAX(got, whole - before);
	}
	ctr_add(e->c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	if (got >= 0)
		return (size_t)got >= want;
	/* Before 6.5, or filtered: such files are mapped from the next request on. */
	atomic_store(&uf->cachestat_ok, false);
	return -1;
}

/*
 * Lays out the next chunk of r into slot s and starts it.  Returns 1 if it
 * did, -EAGAIN if the chunk waits (for a page-cache copy, the head and tail
 * of a write, or room in the lanes; a lane's error fails r) and r is as it
 * was.
 */
static int chunk_issue(struct engine *e, struct ur_req *r, struct ur_slot *s)
{
	size_t chunk = e->c->chunk;
	bool direct = atomic_load(&r->uf->direct_ok), hot = false, tail = false, edge = false;
	off_t c = r->cur, ks, ke;
	int ret;

	if (r->edges_first && GDX_IS_ALIGNED(c, (off_t)GDX_FILE_DIO_ALIGN)) {
		/* The head is issued: the tail next, then the middle once both are done. */
		if (r->lim > r->tail_at) {
			c = r->tail_at;
			tail = true;
		} else if (r->edges) {
			return -EAGAIN;
		}
	}
	edge = r->edges_first && (tail || !GDX_IS_ALIGNED(c, (off_t)GDX_FILE_DIO_ALIGN));

	if (r->dev && r->io->op == GDX_FILE_READ) {
		ret = pc_issue(e, r, s);
		if (ret)
			return ret;
		/*
		 * Cached data goes buffered (a memory copy) rather than to the disk
		 * again.  A split worker preads it itself, and also tries chunks it
		 * cannot tell about that go buffered anyway.  Without a buffered
		 * descriptor all of it goes O_DIRECT.
		 */
		if (!r->uf->no_twin && (direct || split_pread(e, r))) {
			ret = chunk_cached(e, r, c, chunk);
			hot = ret > 0 || (ret < 0 && !direct);
			direct = direct && ret <= 0;
		}
	}
	s->pc = NULL;
	s->kdone = 0;
	if (r->io->op == GDX_FILE_READ) {
		if (r->dev && direct) {
			ks = GDX_ALIGN_DOWN(c, (off_t)GDX_FILE_DIO_ALIGN);
			ke = GDX_MIN(ks + (off_t)chunk,
				     GDX_ALIGN_UP(r->end, (off_t)GDX_FILE_DIO_ALIGN));
		} else if (!r->dev && direct && r->host_direct) {
			ks = c;
			ke = GDX_MIN(c + (off_t)chunk, r->end);
		} else {
			direct = false;
			ks = c;
			ke = GDX_MIN(GDX_ALIGN_DOWN(c, (off_t)PG) + (off_t)chunk, r->end);
		}
		s->us = c;
		s->ulen = (size_t)(GDX_MIN(ke, r->end) - c);
	} else {
		bool mem_ok = r->dev || r->host_direct;

		ks = c;
		if (direct && mem_ok && !GDX_IS_ALIGNED(c, (off_t)GDX_FILE_DIO_ALIGN)) {
			/* Unaligned head: through the page cache up to the boundary. */
			direct = false;
			ke = GDX_MIN(GDX_ALIGN_UP(c, (off_t)GDX_FILE_DIO_ALIGN), r->end);
		} else if (direct && mem_ok && r->end - c >= (off_t)GDX_FILE_DIO_ALIGN) {
			ke = c + GDX_MIN((off_t)chunk,
					 GDX_ALIGN_DOWN(r->end - c, (off_t)GDX_FILE_DIO_ALIGN));
		} else {
			direct = false;
			ke = GDX_MIN(GDX_ALIGN_DOWN(c, (off_t)PG) + (off_t)chunk, r->end);
		}
		s->us = c;
		s->ulen = (size_t)(ke - c);
	}
	s->ks = ks;
	s->klen = (size_t)(ke - ks);
	s->kdirect = direct;
	if (r->dev) {
		/* device memory: the chunk's room in a lane, in the order chunks are issued */
		ret = r->io->op == GDX_FILE_READ ? rd_reserve(e, s, s->klen) :
		      lane_reserve(&e->c->wr, s, s->klen);
		if (ret) {
			if (ret != -EAGAIN)
				req_fail(r, ret);
			return -EAGAIN;
		}
		s->kbuf = s->sp.p;
		s->kfixed = true;
	} else {
		s->kbuf = (unsigned char *)r->io->buf + (ks - r->off);
		s->kfixed = false;
	}
	s->req = r;
	s->edge = edge;
	r->edges += edge;
	r->inflight++;
	if (tail)
		r->lim = r->tail_at;
	else
		r->cur = s->us + (off_t)s->ulen;
	if (hot && split_pread(e, r) && hot_read(e, s))
		return 1;
	if (direct)
		r->kdirect_chunks++;
	else
		r->kbuffered_chunks++;
	if (r->dev && r->io->op == GDX_FILE_WRITE) {
		wr_start(e, s, (char *)r->io->buf + (ks - r->off));
		return 1;
	}
	kio_submit(e, s);
	return 1;
}

/*
 * A slot whose storage I/O is over with nothing (more) to copy: a read that
 * failed (r holds why), a write written or failed.  Out of its lane in
 * turn, or free.
 */
static void kio_over(struct engine *e, struct ur_slot *s)
{
	if (!s->lane) {
		slot_release(e, s);
	} else if (s->req->io->op == GDX_FILE_READ) {
		rd_ready(e, s, NULL, 0);
	} else {
		wr_done(e, s);
	}
}

/* The storage part of a slot finished (all of it, or at end of file). */
static void kio_finished(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;
	enum gdx_file_path hp = GDX_FILE_PATH_HOST;

	if (r->io->op == GDX_FILE_WRITE) {
		r->io->info.bytes[r->dev ? GDX_FILE_PATH_BOUNCE : hp] += s->klen;
		kio_over(e, s);
		return;
	}
	/* Bytes of the caller's range that the kernel delivered. */
	off_t got_end = s->ks + (off_t)s->kdone;
	off_t u_end = GDX_MIN(s->us + (off_t)s->ulen, got_end);
	size_t n = u_end > s->us ? (size_t)(u_end - s->us) : 0;

	if (s->kdone < s->klen)
		r->eof = GDX_MIN(r->eof, got_end);
	if (r->dev) {
		/* a failed request copies no more: its slots still leave the lane in turn */
		n = r->err ? 0 : n;
		r->io->info.bytes[GDX_FILE_PATH_BOUNCE] += n;
		rd_ready(e, s, s->kbuf + (s->us - s->ks), n);
		return;
	}
	r->io->info.bytes[hp] += n;
	slot_release(e, s);
}

/*
 * A cached chunk of a split I/O's device read, read here with pread into the
 * slot's pinned buffer, its copy enqueued at once and covered by its own
 * event, so the next chunk's read overlaps this one's copy.  Why not io_uring:
 * KvikIO's plain per-thread pread then copy was ahead of the workers' rings on
 * hot data on the H200, and a buffered read io_uring cannot complete inline
 * goes to its io-wq threads, one more hop and a copy on another core
 * (docs/storage.md).
 *
 * Off tmpfs the read is RWF_NOWAIT: should pages have left the cache since
 * chunk_cached looked, it stops there and the ring reads the rest.  Chunks
 * known to be cold never come here: on the H200 (kernel 6.18) RWF_NOWAIT
 * reads of cold data still cost milliseconds each (readahead), which halved a
 * cold 64 MiB read.  Returns false if the whole chunk is left to the ring.
 */
static bool hot_read(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;
	struct ur_file *uf = r->uf;
	bool nowait = !uf->memfs;
	uint64_t t0;

	if (nowait && !atomic_load_explicit(&uf->nowait_ok, memory_order_relaxed))
		return false;
	t0 = gdx_now_ns();
	while (s->kdone < s->klen) {
		struct iovec iov = { s->kbuf + s->kdone, s->klen - s->kdone };
		ssize_t n = preadv2(uf->fd, &iov, 1, s->ks + (off_t)s->kdone,
				    nowait ? RWF_NOWAIT : 0);

		if (n > 0) {
			s->kdone += (size_t)n;
			continue;
		}
		if (!n)
			break;		/* end of file */
		if (errno == EINTR)
			continue;
		ctr_add(e->c, GDX_FILE_CTR_PREAD_NS, gdx_now_ns() - t0);
		r->kbuffered_chunks++;
		if (!nowait || (errno != EAGAIN && errno != EOPNOTSUPP)) {
			req_fail(r, -errno);
			kio_over(e, s);
			return true;
		}
		if (errno == EOPNOTSUPP)
			atomic_store(&uf->nowait_ok, false);
		kio_submit(e, s);
		return true;
	}
	ctr_add(e->c, GDX_FILE_CTR_PREAD_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_PREADS, 1);
	r->kbuffered_chunks++;
	r->kpread_chunks++;
	kio_finished(e, s);
	return true;
}

static void cqe_handle(struct engine *e, struct ur_slot *s, int res)
{
	struct ur_req *r = s->req;

	ctr_add(e->c, GDX_FILE_CTR_KIOS, 1);
	ctr_add(e->c, GDX_FILE_CTR_KIO_DEPTH, e->kio);
	ctr_add(e->c, GDX_FILE_CTR_KIO_ACTIVE, e->active);
	e->kio--;
	if (res == -EINTR || res == -EAGAIN) {
		kio_submit(e, s);
		return;
	}
	if (res == -EINVAL && s->kdirect && !r->uf->no_twin) {
		/* The filesystem refused O_DIRECT here: the rest of this file goes buffered. */
		if (atomic_exchange(&r->uf->direct_ok, false))
			snprintf(r->uf->dio_why, sizeof(r->uf->dio_why),
				 "O_DIRECT refused at first I/O: EINVAL");
		s->kdirect = false;
		kio_submit(e, s);
		return;
	}
	if (res < 0) {
		req_fail(r, res);
		kio_over(e, s);
		return;
	}
	s->kdone += (size_t)res;
	if (res == 0 && r->io->op == GDX_FILE_WRITE) {
		req_fail(r, -EIO);
		kio_over(e, s);
		return;
	}
	if (res > 0 && s->kdone < s->klen && !r->err) {
		bool aligned = GDX_IS_ALIGNED(s->kdone, (size_t)GDX_FILE_DIO_ALIGN);

		if (r->io->op == GDX_FILE_WRITE) {
			s->kdirect = s->kdirect && aligned;
			kio_submit(e, s);
			return;
		}
		/* A short O_DIRECT read that stops off the alignment is end of file. */
		if (!s->kdirect || aligned) {
			kio_submit(e, s);
			return;
		}
	}
	kio_finished(e, s);
}

static bool req_more(const struct ur_req *r)
{
	return !r->err && r->cur < r->lim && r->cur < r->eof;
}

void ur_req_setup(struct engine *e, struct ur_req *r, struct gdx_file_io *io)
{
	struct ur_ctx *c = e->c;
	unsigned flags = gdx_file_flags(io->file);
	struct stat st;
	bool small, reg;
	uint64_t t0;

	memset(r, 0, sizeof(*r));
	r->io = io;
	r->uf = gdx_file_backend_priv(io->file);
	r->dev = io->attrs.kind == GDX_MEM_DEVICE;
	r->off = r->cur = io->off;
	r->end = r->lim = io->off + (off_t)io->size;
	r->eof = INT64_MAX;
	r->host_direct = !r->dev && GDX_IS_ALIGNED((uintptr_t)io->buf, GDX_FILE_DIO_ALIGN) &&
			 GDX_IS_ALIGNED(io->off, (off_t)GDX_FILE_DIO_ALIGN) &&
			 GDX_IS_ALIGNED(io->size, (size_t)GDX_FILE_DIO_ALIGN);
	r->fslot[0] = ur_ftab_get(c, r->uf, false);
	r->fslot[1] = atomic_load(&r->uf->direct_ok) ? ur_ftab_get(c, r->uf, true) : -1;
	r->pc_why[0] = 0;
	if (r->dev && io->op != GDX_FILE_READ && atomic_load(&r->uf->direct_ok)) {
		off_t head = GDX_ALIGN_UP(r->off, (off_t)GDX_FILE_DIO_ALIGN);

		r->tail_at = GDX_ALIGN_DOWN(r->end, (off_t)GDX_FILE_DIO_ALIGN);
		r->edges_first = head < r->tail_at && (head != r->off || r->tail_at != r->end);
	}
	if (!r->dev || io->op != GDX_FILE_READ)
		return;
	small = (e->whole_size ? e->whole_size : io->size) < r->uf->pc_min;
	reg = !(flags & GDX_FILE_NO_PAGECACHE) && !e->no_register;
	if (flags & GDX_FILE_NO_PAGECACHE)
		snprintf(r->pc_why, sizeof(r->pc_why), "registration turned off");
	else if (small)
		snprintf(r->pc_why, sizeof(r->pc_why), "read below file.pagecache_min");
	else if (e->no_register)
		snprintf(r->pc_why, sizeof(r->pc_why), "copied by the CPU (file.pagecache_threads "
			 "= %u of the workers register)", r->uf->pc_threads);
	/*
	 * Without registration the mapping still tells cached chunks, read
	 * buffered (a memory copy), from cold ones, read with O_DIRECT: turning
	 * the page-cache path off must not send hot data back to the disk (on
	 * the H200 that took a hot ext4 read from 30 to 2 GB/s).  Small reads
	 * are not worth a mapping; without O_DIRECT every chunk goes buffered
	 * anyway, and split workers that do not register ask cachestat(2)
	 * (chunk_cached): for those the file's size is all that is needed.
	 */
	if (small)
		return;
	t0 = gdx_now_ns();
	if (fstat(r->uf->fd, &st) || !S_ISREG(st.st_mode) || st.st_size <= io->off)
		return;
	r->fsize = st.st_size;
	if (!reg && (r->uf->no_twin || !atomic_load(&r->uf->direct_ok) ||
		     (split_pread(e, r) && atomic_load(&r->uf->cachestat_ok))))
		return;
	r->pc_chunk = r->uf->pc_chunk;
	r->pc_depth = r->uf->pc_depth;
	r->map_off = GDX_ALIGN_DOWN(io->off, (off_t)PG);
	r->map_len = GDX_ALIGN_UP((size_t)(GDX_MIN(r->end, r->fsize) - r->map_off), (size_t)PG);
	/* mincore() vector for a page-cache range or a bounce chunk, whichever is longer. */
	r->vec = malloc(GDX_MAX(r->pc_chunk, c->chunk) / PG + 1);
	r->map = mmap(NULL, r->map_len, PROT_READ, MAP_SHARED, r->uf->fd, r->map_off);
	ctr_add(c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	if (r->map == MAP_FAILED || !r->vec) {
		snprintf(r->pc_why, sizeof(r->pc_why), "cannot map the file: %s",
			 r->vec ? strerror(errno) : "no memory");
		if (r->map != MAP_FAILED)
			munmap(r->map, r->map_len);
		r->map = NULL;
		free(r->vec);
		r->vec = NULL;
		return;
	}
	r->pc_on = true;
	r->pc_reg = reg;
}

static void req_finish(struct engine *e, struct ur_req *r)
{
	struct gdx_file_io *io = r->io;
	struct gdx_file_io_info *in = &io->info;
	const char *how = r->kdirect_chunks ? (r->kbuffered_chunks ? "O_DIRECT and buffered" :
					       "O_DIRECT") : "buffered";
	/* Why no chunk went O_DIRECT: the file refused it, or (reads) it was all cached. */
	const char *dio = r->kdirect_chunks ? "" : r->uf->dio_why[0] ? r->uf->dio_why :
			  io->op == GDX_FILE_READ && r->kbuffered_chunks ?
			  "cached data read buffered, not O_DIRECT" : "";
	off_t last = GDX_MIN(r->end, r->eof);
	/* The handle's descriptor has O_DIRECT: say that buffered I/O went around it. */
	bool twin = r->uf->twin && r->kbuffered_chunks;

	ur_ftab_put(e->c, r->fslot[0]);
	ur_ftab_put(e->c, r->fslot[1]);
	if (r->map) {
		uint64_t t0 = gdx_now_ns();

		munmap(r->map, r->map_len);
		ctr_add(e->c, GDX_FILE_CTR_PC_MAP_NS, gdx_now_ns() - t0);
	}
	free(r->vec);
	r->map = NULL;
	r->vec = NULL;
	if (r->err)
		io->result = r->err;
	else if (io->op == GDX_FILE_READ)
		io->result = last > r->off ? (ssize_t)(last - r->off) : 0;
	else
		io->result = (ssize_t)io->size;
	if (!r->dev)
		gdx_file_why(in, "%s I/O straight to/from %s memory%s", how,
			     gdx_mem_kind_name(io->attrs.kind), twin ? " (the descriptor has O_DIRECT: "
			     "buffered through a second open without it)" : "");
	else if (in->bytes[GDX_FILE_PATH_PAGECACHE] && !in->bytes[GDX_FILE_PATH_BOUNCE])
		gdx_file_why(in, "data in page cache: device copied from the registered mapping");
	else
		gdx_file_why(in, "%s %s through pinned bounce buffers%s%s%s%s%s%s",
			     how, io->op == GDX_FILE_READ ? "reads" : "writes",
			     r->kpread_chunks ? " (cached chunks by pread on the worker)" : "",
			     twin ? "; buffered chunks through a second open without O_DIRECT" : "",
			     r->pc_why[0] ? "; page cache: " : "", r->pc_why,
			     dio[0] ? "; " : "", dio);
	if (r->uf->no_twin && r->kdirect_chunks) {
		size_t n = strlen(in->why);

		snprintf(in->why + n, sizeof(in->why) - n, "; O_DIRECT on the descriptor itself "
			 "(%sits second open without O_DIRECT failed: %s)",
			 gdx_file_flags(io->file) & GDX_FILE_NO_ODIRECT ? "turned off, but " : "",
			 strerror(-io->file->buffered_fd));
	}
	e->active--;
	if (e->done)
		e->done(io, e->arg);
	if (e->owned)
		free(r);
}

void ur_engine_add(struct engine *e, struct ur_req *r)
{
	r->next = NULL;
	*e->tailp = r;
	e->tailp = &r->next;
	e->active++;
}

/* Takes I/Os the caller queued since the last look. */
static void engine_feed(struct engine *e)
{
	struct gdx_file_io *ios[32];
	unsigned n;

	/*
	 * A lane of this context failed: what it has taken runs out here, and
	 * what comes after waits for the engine to end, so that the caller's
	 * next engine (a batch's runner goes on while I/Os are queued) runs it
	 * on a new context rather than failing it on a broken lane.
	 */
	if (e->c->broken)
		return;
	if (e->lazy_feed)
		for (struct ur_req *r = e->list; r; r = r->next)
			if (req_more(r))
				return;
	n = e->more ? e->more(e->arg, ios, 32) : 0;

	for (unsigned i = 0; i < n; i++) {
		struct ur_req *r;

		if (ios[i]->strict && ios[i]->attrs.kind == GDX_MEM_DEVICE) {
			ios[i]->result = ur_strict_refuse(ios[i]);
			e->done(ios[i], e->arg);
			continue;
		}
		if (ur_twin_refuse(ios[i])) {
			e->done(ios[i], e->arg);
			continue;
		}
		r = malloc(sizeof(*r));
		if (!r) {
			ios[i]->result = -ENOMEM;
			e->done(ios[i], e->arg);
			continue;
		}
		ur_req_setup(e, r, ios[i]);
		ur_engine_add(e, r);
	}
}

/* Finishes requests with nothing left to do, and unlinks them. */
static void engine_sweep(struct engine *e)
{
	struct ur_req **pp = &e->list;

	e->tailp = &e->list;
	while (*pp) {
		struct ur_req *r = *pp;

		if (!r->inflight && !req_more(r)) {
			*pp = r->next;
			req_finish(e, r);
			continue;
		}
		e->tailp = &r->next;
		pp = &r->next;
	}
}

void ur_engine_run(struct engine *e)
{
	uint64_t t0 = gdx_now_ns(), cpu0 = thread_cpu_ns(), tw;
	struct io_uring_cqe *cqe;
	struct ur_lane *busy;

	e->c->eng = e;
	for (;;) {
		bool progress;

		engine_feed(e);
		if (!e->active)
			break;
		/* copies that landed retire their slots (lanes' effects count them) */
		e->retired = 0;
		lanes_progress(e);
		progress = e->retired;
		/* Oldest request first: a batch of small I/Os completes in order of arrival. */
		for (struct ur_req *r = e->list; r && e->c->free_slots;) {
			struct ur_slot *s;

			if (!req_more(r)) {
				r = r->next;
				continue;
			}
			s = slot_take(e->c);
			if (chunk_issue(e, r, s) == -EAGAIN) {
				/* It waits (page cache, edges, room): another request may use the slot. */
				s->next = e->c->free_slots;
				e->c->free_slots = s;
				r = r->next;
				continue;
			}
			progress = true;
		}
		engine_sweep(e);
		if (!e->active)
			continue;	/* one more look for fed I/O before leaving */
		busy = lanes_busy(e->c);
		if (e->kio) {
			unsigned head, seen = 0;

			io_uring_submit(&e->c->ring);
			if (!progress) {
				tw = gdx_now_ns();
				if (busy || e->more) {
					struct __kernel_timespec ts = { .tv_nsec = 50000 };

					io_uring_wait_cqe_timeout(&e->c->ring, &cqe, &ts);
				} else {
					io_uring_wait_cqe(&e->c->ring, &cqe);
				}
				ctr_add(e->c, GDX_FILE_CTR_ENGINE_WAIT_NS, gdx_now_ns() - tw);
			}
			/*
			 * A few completions per pass, so their copies retire and their
			 * requests complete (and a batch's caller refills) while the
			 * rest are still handled.  On the H200 the virtio disk returned
			 * a 64-deep batch of 4 KiB reads all at once; handling all 64
			 * (a copy submission each) before completing any kept the disk
			 * idle for as long as it had worked (docs/storage.md).
			 */
			io_uring_for_each_cqe(&e->c->ring, head, cqe) {
				/* Kernels without EXT_ARG report the wait's own timeout here. */
				if (cqe->user_data != LIBURING_UDATA_TIMEOUT)
					cqe_handle(e, io_uring_cqe_get_data(cqe), cqe->res);
				if (++seen == UR_REAP)
					break;
			}
			io_uring_cq_advance(&e->c->ring, seen);
		} else if (busy && !progress) {
			/* only copies out: wait for the oldest of a lane's (the next to retire) */
			int rc;

			tw = gdx_now_ns();
			rc = gdx_stage_wait(busy->st, busy == &e->c->wr ? gdx_stage_mark(busy->st) :
						      gdx_stage_first_mark(busy->st));
			ctr_add(e->c, GDX_FILE_CTR_ENGINE_WAIT_NS, gdx_now_ns() - tw);
			if (rc)
				lane_break(busy, rc);
		}
	}
	e->c->eng = NULL;
	ctr_add(e->c, GDX_FILE_CTR_ENGINE_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_ENGINE_CPU_NS, thread_cpu_ns() - cpu0);
}
