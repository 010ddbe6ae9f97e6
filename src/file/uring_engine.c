/* SPDX-License-Identifier: MIT */
/*
 * The uring backend's engine: one loop, on the thread that holds an I/O
 * context, runs any number of requests over it (uring.c says how): chunks
 * cut at chunk-size boundaries, storage I/O through the ring into bounce
 * buffers or the caller's memory, copies to and from device memory on the
 * context's streams, hot page-cache ranges registered with the device, and
 * each request finished once its last chunk has landed.
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
	s->state = S_FREE;
	s->req = NULL;
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
		if (s->kfixed && e->c->fixed_bufs)
			io_uring_prep_read_fixed(sqe, fd, p, len, (uint64_t)at, (int)s->idx);
		else
			io_uring_prep_read(sqe, fd, p, len, (uint64_t)at);
	} else {
		if (s->kfixed && e->c->fixed_bufs)
			io_uring_prep_write_fixed(sqe, fd, p, len, (uint64_t)at, (int)s->idx);
		else
			io_uring_prep_write(sqe, fd, p, len, (uint64_t)at);
	}
	if (fi >= 0)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, s);
	s->state = S_KIO;
	e->kio++;
}

static void fifo_push(struct engine *e, struct ur_slot *s)
{
	s->state = S_COPY;
	s->next = NULL;
	if (e->fifo_tail)
		e->fifo_tail->next = s;
	else
		e->fifo_head = s;
	e->fifo_tail = s;
}

/* Enqueues the slot's device copy and its event; on failure the request fails. */
static int copy_start(struct engine *e, struct ur_slot *s, void *dst, const void *src, size_t n)
{
	struct gdx_device *dev = e->c->ud->dev;
	uint64_t t0 = gdx_now_ns();
	int ret = gdx_memcpy_async(dev, dst, src, n, s->st);

	ctr_add(e->c, GDX_FILE_CTR_COPY_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_COPIES, 1);
	if (ret) {
		/* An enqueued copy may still run: wait for the stream before reuse. */
		gdx_stream_synchronize(s->st);
		req_fail(s->req, ret);
		return ret;
	}
	s->pend_next = e->pend[s->sidx];
	e->pend[s->sidx] = s;
	fifo_push(e, s);
	return 0;
}

/*
 * One event record per stream covers every copy enqueued on it since the last
 * flush: the newest copy's slot records its own event and the older ones wait
 * on it.  Those sit ahead of it in the FIFO, so they retire before that slot
 * (and its event) can be used again.  Saves a record per chunk on small I/O.
 */
static void engine_flush(struct engine *e)
{
	for (unsigned i = 0; i < e->c->nstreams; i++) {
		struct ur_slot *last = e->pend[i];
		int ret;

		if (!last)
			continue;
		e->pend[i] = NULL;
		ret = gdx_event_record(last->ev, last->st);
		if (ret)
			gdx_stream_synchronize(last->st);
		for (struct ur_slot *x = last; x; x = x->pend_next) {
			x->wait_ev = last->ev;
			if (ret)
				req_fail(x->req, ret);
		}
	}
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
	if (copy_start(e, s, (char *)r->io->buf + (s->us - r->off), r->map + (s->us - r->map_off),
		       s->ulen)) {
		gdx_host_unregister(dev, p);
		s->pc = NULL;
		r->pc_inflight--;
		slot_release(e, s);
		return 1;
	}
	r->io->info.bytes[GDX_FILE_PATH_PAGECACHE] += s->ulen;
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

/* Lays out the next chunk of r into slot s and starts it. */
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
			r->lim = r->tail_at;
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
	s->req = r;
	s->edge = edge;
	r->edges += edge;
	r->inflight++;
	if (!tail)
		r->cur = s->us + (off_t)s->ulen;
	if (r->dev) {
		s->kbuf = s->buf;
		s->kfixed = true;
	} else {
		s->kbuf = (unsigned char *)r->io->buf + (ks - r->off);
		s->kfixed = false;
	}
	if (hot && split_pread(e, r) && hot_read(e, s))
		return 1;
	if (direct)
		r->kdirect_chunks++;
	else
		r->kbuffered_chunks++;
	if (r->dev && r->io->op == GDX_FILE_WRITE) {
		if (copy_start(e, s, s->buf, (char *)r->io->buf + (ks - r->off), s->klen))
			slot_release(e, s);
		return 1;
	}
	kio_submit(e, s);
	return 1;
}

/* The storage part of a slot finished (all of it, or at end of file). */
static void kio_finished(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;
	enum gdx_file_path hp = GDX_FILE_PATH_HOST;

	if (r->io->op == GDX_FILE_WRITE) {
		r->io->info.bytes[r->dev ? GDX_FILE_PATH_BOUNCE : hp] += s->klen;
		slot_release(e, s);
		return;
	}
	/* Bytes of the caller's range that the kernel delivered. */
	off_t got_end = s->ks + (off_t)s->kdone;
	off_t u_end = GDX_MIN(s->us + (off_t)s->ulen, got_end);
	size_t n = u_end > s->us ? (size_t)(u_end - s->us) : 0;

	if (s->kdone < s->klen)
		r->eof = GDX_MIN(r->eof, got_end);
	if (r->dev && n && !r->err) {
		if (!copy_start(e, s, (char *)r->io->buf + (s->us - r->off),
				s->buf + (s->us - s->ks), n)) {
			r->io->info.bytes[GDX_FILE_PATH_BOUNCE] += n;
			return;
		}
	} else if (!r->dev) {
		r->io->info.bytes[hp] += n;
	}
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
			slot_release(e, s);
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
	engine_flush(e);
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
		slot_release(e, s);
		return;
	}
	s->kdone += (size_t)res;
	if (res == 0 && r->io->op == GDX_FILE_WRITE) {
		req_fail(r, -EIO);
		slot_release(e, s);
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

/* A copy retired: free the page-cache pin, or send a bounce buffer to storage. */
static void copy_retired(struct engine *e, struct ur_slot *s)
{
	struct ur_req *r = s->req;

	if (s->pc) {
		uint64_t t0 = gdx_now_ns();

		gdx_host_unregister(e->c->ud->dev, s->pc);
		ctr_add(e->c, GDX_FILE_CTR_PC_UNREG_NS, gdx_now_ns() - t0);
		s->pc = NULL;
		r->pc_inflight--;
		slot_release(e, s);
	} else if (r->io->op == GDX_FILE_WRITE && !r->err) {
		kio_submit(e, s);
	} else {
		slot_release(e, s);
	}
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

	for (;;) {
		struct gdx_event *fired = NULL;
		bool progress = false;

		engine_feed(e);
		if (!e->active)
			break;
		while (e->fifo_head) {
			struct ur_slot *s = e->fifo_head;
			/* Slots of one flush share an event: one query answers for all. */
			int q = s->wait_ev == fired ? 0 : gdx_event_query(s->wait_ev);

			if (q == -EBUSY)
				break;
			if (!q)
				fired = s->wait_ev;
			/* A failed copy (or query) fails its request; the buffer still returns. */
			if (q)
				req_fail(s->req, q);
			e->fifo_head = s->next;
			if (!e->fifo_head)
				e->fifo_tail = NULL;
			copy_retired(e, s);
			progress = true;
		}
		/* Oldest request first: a batch of small I/Os completes in order of arrival. */
		for (struct ur_req *r = e->list; r && e->c->free_slots;) {
			struct ur_slot *s;

			if (!req_more(r)) {
				r = r->next;
				continue;
			}
			s = slot_take(e->c);
			if (chunk_issue(e, r, s) == -EAGAIN) {
				/* Page-cache window full: the slot goes back, another request may use it. */
				s->next = e->c->free_slots;
				e->c->free_slots = s;
				r = r->next;
				continue;
			}
			progress = true;
		}
		engine_flush(e);
		engine_sweep(e);
		if (!e->active)
			continue;	/* one more look for fed I/O before leaving */
		if (e->kio) {
			unsigned head, seen = 0;

			io_uring_submit(&e->c->ring);
			if (!progress) {
				tw = gdx_now_ns();
				if (e->fifo_head || e->more) {
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
			engine_flush(e);
		} else if (e->fifo_head && !progress) {
			int q;

			tw = gdx_now_ns();
			q = gdx_event_synchronize(e->fifo_head->wait_ev);
			ctr_add(e->c, GDX_FILE_CTR_ENGINE_WAIT_NS, gdx_now_ns() - tw);
			if (q)
				req_fail(e->fifo_head->req, q);
		}
	}
	ctr_add(e->c, GDX_FILE_CTR_ENGINE_NS, gdx_now_ns() - t0);
	ctr_add(e->c, GDX_FILE_CTR_ENGINE_CPU_NS, thread_cpu_ns() - cpu0);
}
