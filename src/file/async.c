/* SPDX-License-Identifier: MIT */
/*
 * Stream-ordered I/O (gdx_file_read_async, _write_async, read ahead): the
 * stream stops on a gate word in pinned memory, a host function or the
 * submitting thread hands the I/O to a driver worker, the worker does it into
 * host memory (the caller's, or pinned staging) without a call into the
 * device, and opens the gate; copies between the staging and device memory
 * are the stream's own.  Reads started ahead wait here to be claimed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "file/ahead.h"
#include "file/file_int.h"
#include "gpu/device.h"

/* ---- stream-ordered I/O ------------------------------------------------ */

#define GATE_COUNT 1024u	/* stream-ordered I/Os in flight per driver */

/*
 * Pinned staging for device buffers.  A read's staging is free again once the
 * event recorded after the stream's copy out of it has completed, which the
 * next submission asks on its own thread: nothing on the stream after the
 * copy has to run on the host.
 */
struct async_stage {
	struct async_stage *next;
	struct gdx_file_driver *drv;
	struct gdx_event *ev;		/* recorded after the stream's copy out of it */
	bool busy;			/* held by an I/O */
	bool copying;			/* ev recorded, not yet seen complete */
	size_t cap;
	void *p;
};

struct async_op {
	struct gdx_file *f;
	enum gdx_file_op op;
	void *buf;			/* the caller's, or the staging */
	size_t max;			/* *size at submission */
	const size_t *size;
	const off_t *off;
	ssize_t *done;
	struct async_stage *wstage;	/* a write's staging, freed by the worker */
	bool early;			/* size and offset taken at submission */
	size_t n;
	off_t o;
	struct async_ahead *ahead;	/* a read ahead: the result goes there */
	enum gdx_mem_kind kind;		/* of buf, known at submission */
	unsigned gate;
	uint32_t gate_value;
};

/*
 * A read started ahead of its stream-ordered read (gdx_file_read_ahead): an
 * early read of the same range on the same handle claims it, and its stream
 * only waits for the gate and copies the staging.  On the driver's list until
 * claimed; dropped when the handle writes (stale) or closes.
 */
#define AHEAD_MAX 16u

struct async_ahead {
	struct async_ahead *next;
	struct gdx_file *f;
	off_t off;
	size_t len;
	struct async_stage *st;
	unsigned gate;
	uint32_t gate_value;
	ssize_t result;
	ssize_t *done;		/* the claimant's, when claimed before the read finished */
	bool finished, claimed, stale;
};

/* Driver close: the caller has synchronized its streams, no stage is in use. */
void gdx_file_stages_free(struct gdx_file_driver *drv)
{
	struct async_stage *st;

	while ((st = drv->stages)) {
		drv->stages = st->next;
		gdx_event_destroy(st->ev);
		gdx_pinned_free(drv->dev, st->p);
		free(st);
	}
}

/*
 * Smallest idle stage that holds n bytes, else a new one.  On the caller's
 * thread, which may ask the device whether a stage's copy has completed.
 */
static int stage_get(struct gdx_file_driver *drv, size_t n, struct async_stage **out)
{
	struct async_stage *st, *best = NULL;
	int ret;

	pthread_mutex_lock(&drv->gate_lock);
	for (st = drv->stages; st; st = st->next) {
		if (st->busy || st->cap < n || (best && st->cap >= best->cap))
			continue;
		/* A failed query means the stream failed: nothing reads the stage any more. */
		if (st->copying && gdx_event_query(st->ev) == -EBUSY)
			continue;
		st->copying = false;
		best = st;
	}
	if (best) {
		best->busy = true;
		pthread_mutex_unlock(&drv->gate_lock);
		*out = best;
		return 0;
	}
	pthread_mutex_unlock(&drv->gate_lock);
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->drv = drv;
	st->cap = (n + 65535) & ~(size_t)65535;
	ret = gdx_event_create(drv->dev, 0, &st->ev);
	if (!ret) {
		ret = gdx_pinned_alloc(drv->dev, st->cap, &st->p);
		if (ret)
			gdx_event_destroy(st->ev);
	}
	if (ret) {
		free(st);
		return ret;
	}
	st->busy = true;
	pthread_mutex_lock(&drv->gate_lock);
	st->next = drv->stages;
	drv->stages = st;
	pthread_mutex_unlock(&drv->gate_lock);
	*out = st;
	return 0;
}

/* Plain CPU work: safe on a worker. */
static void stage_put(struct async_stage *st)
{
	struct gdx_file_driver *drv = st->drv;

	pthread_mutex_lock(&drv->gate_lock);
	st->busy = false;
	pthread_mutex_unlock(&drv->gate_lock);
}

/*
 * A read's stage is free once the stream's copy out of it is done.  If the
 * event cannot be recorded the stage stays busy until the driver closes: a
 * worker may still write it, the stream may still read it.  The stage goes to
 * the end of the list, so the list holds pending copies oldest first and
 * stage_get's first query is about the copy most likely done: each query is a
 * call into the driver on the submitting thread.
 */
static int stage_put_after(struct async_stage *st, struct gdx_stream *s)
{
	struct gdx_file_driver *drv = st->drv;
	struct async_stage **pp = &drv->stages;
	int ret = gdx_event_record(st->ev, s);

	if (ret)
		return ret;
	pthread_mutex_lock(&drv->gate_lock);
	st->copying = true;
	st->busy = false;
	while (*pp != st)
		pp = &(*pp)->next;
	*pp = st->next;
	while (*pp)
		pp = &(*pp)->next;
	*pp = st;
	st->next = NULL;
	pthread_mutex_unlock(&drv->gate_lock);
	return 0;
}

static int gates_ready(struct gdx_file_driver *drv)
{
	int ret = 0;

	pthread_mutex_lock(&drv->gate_lock);
	if (!drv->gates) {
		ret = gdx_pinned_alloc(drv->dev, GATE_COUNT * sizeof(uint32_t), (void **)&drv->gates);
		drv->gate_free = ret ? NULL : calloc(GATE_COUNT, sizeof(unsigned));
		if (!ret && !drv->gate_free) {
			gdx_pinned_free(drv->dev, drv->gates);
			ret = -ENOMEM;
		}
		if (ret) {
			drv->gates = NULL;
		} else {
			for (unsigned i = 0; i < GATE_COUNT; i++) {
				drv->gates[i] = 0;
				drv->gate_free[i] = GATE_COUNT - 1 - i;
			}
			drv->ngate_free = GATE_COUNT;
		}
	}
	pthread_mutex_unlock(&drv->gate_lock);
	return ret;
}

/* The worker pool and the gate table that every stream-ordered call needs. */
static int async_ready(struct gdx_file_driver *drv)
{
	gdx_file_wq_start(drv);
	return drv->wq_err ? drv->wq_err : gates_ready(drv);
}

/* Takes a free gate; a full table waits for a worker to give one back. */
static unsigned gate_get(struct gdx_file_driver *drv)
{
	unsigned g;

	pthread_mutex_lock(&drv->gate_lock);
	while (!drv->ngate_free)
		pthread_cond_wait(&drv->gate_cond, &drv->gate_lock);
	g = drv->gate_free[--drv->ngate_free];
	pthread_mutex_unlock(&drv->gate_lock);
	return g;
}

/* Releases the waiting stream, then returns the gate: its word only grows. */
static void gate_open(struct gdx_file_driver *drv, unsigned g, uint32_t value)
{
	__atomic_store_n(&drv->gates[g], value, __ATOMIC_RELEASE);
	pthread_mutex_lock(&drv->gate_lock);
	drv->gate_free[drv->ngate_free++] = g;
	pthread_cond_signal(&drv->gate_cond);
	pthread_mutex_unlock(&drv->gate_lock);
}

/*
 * The I/O is over (done or failed): what the worker or the host function owned
 * goes back.  drv is passed in: once an early read's *done is stored its caller
 * may close the handle, so a->f must not be read here for reads.
 */
static void async_finish(struct async_op *a, struct gdx_file_driver *drv)
{
	if (a->wstage)
		stage_put(a->wstage);
	if (a->op == GDX_FILE_WRITE)
		atomic_fetch_sub(&drv->writes_pending[a->f->wbucket], 1);
	gate_open(drv, a->gate, a->gate_value);
	free(a);
}

/* Caller holds gate_lock. */
static void ahead_unlink(struct gdx_file_driver *drv, struct async_ahead *e)
{
	struct async_ahead **pp = &drv->ahead;

	while (*pp != e)
		pp = &(*pp)->next;
	*pp = e->next;
	__atomic_store_n(&drv->nahead, drv->nahead - 1, __ATOMIC_RELAXED);
}

/* On the worker, before the gate opens: the claimant's *done, or the entry waits. */
static void ahead_finish(struct gdx_file_driver *drv, struct async_ahead *e, ssize_t ret)
{
	bool gone = false;

	pthread_mutex_lock(&drv->gate_lock);
	e->result = ret;
	e->finished = true;
	if (e->claimed) {
		__atomic_store_n(e->done, ret, __ATOMIC_RELEASE);
		gone = true;
	} else if (e->stale) {
		ahead_unlink(drv, e);
		e->st->busy = false;
		gone = true;
	}
	pthread_cond_broadcast(&drv->ahead_cond);
	pthread_mutex_unlock(&drv->gate_lock);
	if (gone)
		free(e);
}

/*
 * What was read ahead of f may be old.  any_handle: a write to the file, which
 * makes old what any handle of it read ahead (same wbucket; a collision only
 * costs a read ahead); else f's own, as it closes.
 */
void gdx_file_ahead_drop(struct gdx_file *f, bool any_handle)
{
	struct gdx_file_driver *drv = f->drv;
	struct async_ahead *e, *next, *dead = NULL;

	if (!__atomic_load_n(&drv->nahead, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&drv->gate_lock);
	for (e = drv->ahead; e; e = next) {
		next = e->next;
		if (any_handle ? e->f->wbucket != f->wbucket : e->f != f)
			continue;
		e->stale = true;
		if (e->finished) {
			ahead_unlink(drv, e);
			e->st->busy = false;
			e->next = dead;
			dead = e;
		}
	}
	pthread_mutex_unlock(&drv->gate_lock);
	for (; dead; dead = next) {
		next = dead->next;
		free(dead);
	}
}

/* Handle close: waits for the handle's reads ahead, then drops them. */
void gdx_file_ahead_forget(struct gdx_file *f)
{
	struct gdx_file_driver *drv = f->drv;

	for (;;) {
		bool pending = false;

		gdx_file_ahead_drop(f, false);
		pthread_mutex_lock(&drv->gate_lock);
		for (struct async_ahead *e = drv->ahead; e; e = e->next)
			pending |= e->f == f;
		if (pending)
			pthread_cond_wait(&drv->ahead_cond, &drv->gate_lock);
		pthread_mutex_unlock(&drv->gate_lock);
		if (!pending)
			return;
	}
}

/*
 * Takes the read ahead of [off, off + len) on f, if there is one: its stage
 * and gate become the caller's, and *done is written now or by the worker.
 */
static bool ahead_claim(struct gdx_file *f, off_t off, size_t len, ssize_t *done,
			struct async_stage **st, unsigned *gate, uint32_t *value)
{
	struct gdx_file_driver *drv = f->drv;
	struct async_ahead *e;
	bool finished = false;

	if (!__atomic_load_n(&drv->nahead, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&drv->gate_lock);
	for (e = drv->ahead; e; e = e->next)
		if (e->f == f && e->off == off && e->len == len && !e->stale)
			break;
	if (e) {
		ahead_unlink(drv, e);
		finished = e->finished;
		e->claimed = true;
		e->done = done;
		*st = e->st;
		*gate = e->gate;
		*value = e->gate_value;
		if (finished)
			__atomic_store_n(done, e->result, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&drv->gate_lock);
	if (finished)
		free(e);
	if (e) {
		pthread_mutex_lock(&f->info_lock);
		f->astats.early++;
		f->astats.ahead_hits++;
		f->astats.ahead_late += !finished;
		pthread_mutex_unlock(&f->info_lock);
	}
	return e != NULL;
}

/* A stream-ordered read starts on a worker: counted in flight, then the test hook. */
static uint64_t read_begin(struct gdx_file *f)
{
	struct gdx_file_async_stats *st = &f->astats;
	uint64_t now = gdx_now_ns();
	void (*hook)(void *) = f->drv->read_hook;

	pthread_mutex_lock(&f->info_lock);
	f->aqueued--;
	if (!f->ainflight++)
		f->abusy_since = now;
	st->max_inflight = GDX_MAX(st->max_inflight, f->ainflight);
	pthread_mutex_unlock(&f->info_lock);
	if (hook)
		hook(f->drv->read_hook_arg);
	return now;
}

static void read_end(struct gdx_file *f, uint64_t t0)
{
	struct gdx_file_async_stats *st = &f->astats;
	uint64_t now = gdx_now_ns();

	pthread_mutex_lock(&f->info_lock);
	st->reads++;
	st->read_ns += now - t0;
	st->max_read_ns = GDX_MAX(st->max_read_ns, now - t0);
	if (!--f->ainflight)
		st->busy_ns += now - f->abusy_since;
	pthread_mutex_unlock(&f->info_lock);
}

GDX_API int gdx_file_async_stats(struct gdx_file *f, struct gdx_file_async_stats *st,
				 unsigned flags)
{
	struct gdx_file_async_stats cur;
	uint64_t now = gdx_now_ns();

	if (!f || !st || st->struct_size < sizeof(size_t) || (flags & ~GDX_FILE_STATS_RESET))
		return -EINVAL;
	pthread_mutex_lock(&f->info_lock);
	cur = f->astats;
	cur.inflight = f->ainflight;
	cur.queued = f->aqueued;
	if (f->ainflight)	/* the busy time so far, as if the reads in flight ended now */
		cur.busy_ns += now - f->abusy_since;
	if (flags & GDX_FILE_STATS_RESET) {
		memset(&f->astats, 0, sizeof(f->astats));
		f->astats.max_inflight = f->ainflight;
		f->abusy_since = now;
	}
	pthread_mutex_unlock(&f->info_lock);
	cur.struct_size = GDX_MIN(st->struct_size, sizeof(cur));
	memcpy(st, &cur, cur.struct_size);
	return 0;
}

void gdx_file_set_read_hook(struct gdx_file_driver *drv, void (*fn)(void *arg), void *arg)
{
	drv->read_hook_arg = arg;
	drv->read_hook = fn;
}

/*
 * A stream-ordered I/O on a file worker, always into or out of host memory
 * (pinned staging, or the caller's host buffer).  A stream may already be
 * stopped on the I/O's gate, and a call into the device driver here can wait
 * for that stream: CUDA synchronizes the context inside calls such as the
 * first launch of a kernel (lazy module loading), holding the driver's lock,
 * and cuMemHostRegister, cuStreamCreate or a pointer query on the worker then
 * waits for the lock while the context waits for the gate (on the H200 the
 * uring backend setting up an I/O context for a worker's first read did this,
 * and the pipeline hung at its first batch).  So the worker calls nothing of
 * the device: not the pointer query (the submitting thread knew the kind), not
 * the backends (they set up pinned bounce buffers, streams and events on first
 * use), only pread/pwrite on the handle's descriptor, or on its buffered
 * twin where that one has O_DIRECT.  Should the twin be missing, aligned I/O
 * goes O_DIRECT on the descriptor itself.
 */
static ssize_t rw_gated(struct gdx_file *f, enum gdx_file_op op, void *buf, size_t size,
			off_t off, enum gdx_mem_kind kind)
{
	bool rd = op == GDX_FILE_READ, dio = gdx_file_no_twin(f);
	int fd = dio ? f->fd : f->buffered_fd;
	char twin[128] = "";
	struct gdx_file_io io;
	size_t done = 0;
	ssize_t ret = 0;

	if (off < 0 || (size && !buf) || size > (size_t)SSIZE_MAX ||
	    (uint64_t)off + size > (uint64_t)INT64_MAX)
		return -EINVAL;
	if (rd ? f->accmode == O_WRONLY : f->accmode == O_RDONLY)
		return -EBADF;
	if (!rd)
		gdx_file_ahead_drop(f, true);
	memset(&io, 0, sizeof(io));
	io.file = f;
	io.op = op;
	io.buf = buf;
	io.size = size;
	io.off = off;
	io.attrs.kind = kind;
	io.attrs.device_ordinal = -1;
	if (dio && !gdx_file_dio_aligned(buf, off, size)) {
		io.result = gdx_file_twin_refuse(f, &io.info, rd ? "stream-ordered read" :
						 "stream-ordered write");
		GDX_ERR("file", "%s", io.info.why);
		gdx_file_io_record(f, &io);
		return io.result;
	}
	while (done < size) {
		char *p = (char *)buf + done;
		ssize_t n = rd ? pread(fd, p, size - done, off + (off_t)done) :
				 pwrite(fd, p, size - done, off + (off_t)done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : rd ? 0 : -EIO;
			break;
		}
		done += (size_t)n;
		/* A short O_DIRECT read that stops off the alignment is end of file. */
		if (dio && rd && !GDX_IS_ALIGNED(done, (size_t)GDX_FILE_DIO_ALIGN))
			break;
	}
	io.result = ret ? ret : (ssize_t)done;
	io.info.bytes[GDX_FILE_PATH_HOST] = done;
	if (dio)
		snprintf(twin, sizeof(twin), ", O_DIRECT on the descriptor itself (its second "
			 "open without O_DIRECT failed: %s)", strerror(-f->buffered_fd));
	else if (fd != f->fd)
		snprintf(twin, sizeof(twin), " through a second open without O_DIRECT");
	gdx_file_why(&io.info, "stream-ordered %s on a file worker%s, %s memory (no device call "
		     "before the stream's gate opens)", rd ? "pread" : "pwrite", twin,
		     gdx_mem_kind_name(kind));
	gdx_file_io_record(f, &io);
	return io.result;
}

/*
 * The worker touches only host memory (the caller's, or pinned staging): the
 * stream's copies to and from device memory are its own, enqueued at
 * submission, so nothing the gate releases depends on another stream, nor,
 * through rw_gated, on the device.
 */
static void async_job(void *arg)
{
	struct async_op *a = arg;
	struct gdx_file_driver *drv = a->f->drv;
	size_t n = a->early ? a->n : *a->size;
	off_t off = a->early ? a->o : *a->off;
	bool rd = a->op == GDX_FILE_READ;
	uint64_t t0 = rd ? read_begin(a->f) : 0;
	ssize_t ret = n > a->max ? -EINVAL : rw_gated(a->f, a->op, a->buf, n, off, a->kind);

	if (rd)
		read_end(a->f, t0);
	if (a->ahead)
		ahead_finish(drv, a->ahead, ret);
	else	/* an early read's caller may look at *done before its stream gets there */
		__atomic_store_n(a->done, ret, __ATOMIC_RELEASE);
	async_finish(a, drv);
}

/* Hands a to a worker; a read counts as queued until a worker starts it. */
static int async_submit(struct async_op *a)
{
	struct gdx_file *f = a->f;
	bool rd = a->op == GDX_FILE_READ;
	int ret;

	if (rd) {
		pthread_mutex_lock(&f->info_lock);
		f->aqueued++;
		pthread_mutex_unlock(&f->info_lock);
	}
	ret = gdx_tpool_submit(f->drv->wq, async_job, a);
	if (ret && rd) {
		pthread_mutex_lock(&f->info_lock);
		f->aqueued--;
		pthread_mutex_unlock(&f->info_lock);
	}
	return ret;
}

/*
 * Runs in stream order on the device's host-function thread, which must not
 * call the device runtime nor wait for anything that does (CUDA runs host
 * functions of all streams on one thread).  It only hands the I/O to a
 * worker; the stream itself waits on the gate word the worker opens once the
 * I/O is done.  Size and offset are read by the worker, after the stream got
 * here.
 */
static void async_host_fn(void *arg)
{
	struct async_op *a = arg;
	int ret = async_submit(a);

	if (ret) {
		*a->done = ret;
		async_finish(a, a->f->drv);
	}
}

/*
 * Device buffers go through pinned staging of *size (the maximum) bytes:
 * a write copies buf to it on the stream before the I/O, a read copies it to
 * buf on the stream after the gate, also for an early read.
 */
static int rw_async(struct gdx_file *f, enum gdx_file_op op, const void *buf, const size_t *size,
		    const off_t *off, ssize_t *done, struct gdx_stream *s, unsigned flags)
{
	struct gdx_file_driver *drv;
	struct async_stage *st = NULL;
	struct gdx_ptr_attrs attrs = { .kind = GDX_MEM_HOST };
	struct async_op *a;
	bool early = false;
	uint32_t value;
	unsigned gate;
	size_t max;
	int ret;

	if (!f || !size || !off || !done || !s || (flags & ~GDX_FILE_ASYNC_EARLY))
		return -EINVAL;
	drv = f->drv;
	if (gdx_stream_device(s) != drv->dev)
		return -EINVAL;
	max = *size;
	if (max > (size_t)SSIZE_MAX || (max && !buf))
		return -EINVAL;
	ret = async_ready(drv);
	if (ret)
		return ret;
	if (max) {
		ret = gdx_pointer_query(drv->dev, buf, &attrs);
		if (ret)
			return ret;
		/*
		 * Early only into device memory, whose copy from staging the stream
		 * runs in its order (a copy between two host buffers returns only
		 * once done: it would wait for the stream at submission), and never
		 * past a stream-ordered write to the file that has not run yet.
		 */
		early = (flags & GDX_FILE_ASYNC_EARLY) && op == GDX_FILE_READ &&
			attrs.kind == GDX_MEM_DEVICE &&
			!atomic_load(&drv->writes_pending[f->wbucket]);
		if (early && ahead_claim(f, *off, max, done, &st, &gate, &value))
			goto wait;
		if (early) {
			pthread_mutex_lock(&f->info_lock);
			f->astats.early++;
			pthread_mutex_unlock(&f->info_lock);
		}
		if (attrs.kind == GDX_MEM_DEVICE || attrs.kind == GDX_MEM_MANAGED) {
			ret = stage_get(drv, max, &st);
			if (ret)
				return ret;
		}
	}
	a = calloc(1, sizeof(*a));
	if (!a) {
		ret = -ENOMEM;
		goto fail_stage;
	}
	*a = (struct async_op){ .f = f, .op = op, .buf = st ? st->p : (void *)buf, .max = max,
				.size = size, .off = off, .done = done,
				.wstage = op == GDX_FILE_WRITE ? st : NULL,
				.early = early, .n = max, .o = *off,
				.kind = st ? GDX_MEM_PINNED : attrs.kind };
	if (op == GDX_FILE_WRITE)
		atomic_fetch_add(&drv->writes_pending[f->wbucket], 1);
	if (st && op == GDX_FILE_WRITE) {
		ret = gdx_memcpy_async(drv->dev, st->p, buf, max, s);
		if (ret)
			goto fail_op;
	}
	a->gate = gate_get(drv);
	gate = a->gate;
	value = a->gate_value = drv->gates[gate] + 1;
	ret = early ? async_submit(a) :
		gdx_stream_launch_host_func(s, async_host_fn, a);
	if (ret) {
		gate_open(drv, gate, value);
		goto fail_op;
	}
	/*
	 * The worker or the host function now owns a (and a write's stage).
	 * Should the wait fail to enqueue, the stream runs ahead of the I/O:
	 * report it, the caller must synchronize; a read's stage is then left
	 * to the worker's writes, so it stays busy.
	 */
wait:
	ret = gdx_stream_wait_value32(s, &drv->gates[gate], value);
	if (ret || !st || op != GDX_FILE_READ)
		return ret;
	ret = gdx_memcpy_async(drv->dev, (void *)buf, st->p, max, s);
	return ret ? ret : stage_put_after(st, s);

fail_op:
	if (op == GDX_FILE_WRITE)
		atomic_fetch_sub(&drv->writes_pending[f->wbucket], 1);
	free(a);
fail_stage:
	if (st)
		stage_put(st);
	return ret;
}

GDX_API int gdx_file_read_ahead(struct gdx_file *f, size_t len, off_t off)
{
	struct gdx_file_driver *drv;
	struct async_stage *st;
	struct async_ahead *e;
	struct async_op *a;
	bool dup = false, full;
	int ret;

	if (!f || !len || off < 0 || len > (size_t)SSIZE_MAX || f->accmode == O_WRONLY)
		return -EINVAL;
	drv = f->drv;
	if (gdx_file_no_twin(f) && !gdx_file_dio_aligned(NULL, off, len)) {
		struct gdx_file_io_info info;

		/* The early read that would have claimed it fails, and logs, the same way. */
		gdx_file_twin_refuse(f, &info, "read ahead");
		GDX_DBG("file", "%s", info.why);
		return -EINVAL;
	}
	ret = async_ready(drv);
	if (ret)
		return ret;
	if (atomic_load(&drv->writes_pending[f->wbucket]))
		return -EBUSY;
	pthread_mutex_lock(&drv->gate_lock);
	for (e = drv->ahead; e && !dup; e = e->next)
		dup = e->f == f && e->off == off && e->len == len && !e->stale;
	full = drv->nahead >= AHEAD_MAX;
	pthread_mutex_unlock(&drv->gate_lock);
	if (dup)
		return 0;
	if (full)
		return -EBUSY;
	ret = stage_get(drv, len, &st);
	if (ret)
		return ret;
	a = calloc(1, sizeof(*a));
	e = calloc(1, sizeof(*e));
	if (!a || !e) {
		free(a);
		free(e);
		stage_put(st);
		return -ENOMEM;
	}
	*e = (struct async_ahead){ .f = f, .off = off, .len = len, .st = st };
	*a = (struct async_op){ .f = f, .op = GDX_FILE_READ, .buf = st->p, .max = len,
				.early = true, .n = len, .o = off, .ahead = e,
				.kind = GDX_MEM_PINNED };
	a->gate = e->gate = gate_get(drv);
	a->gate_value = e->gate_value = drv->gates[e->gate] + 1;
	pthread_mutex_lock(&drv->gate_lock);
	e->next = drv->ahead;
	drv->ahead = e;
	__atomic_store_n(&drv->nahead, drv->nahead + 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&drv->gate_lock);
	ret = async_submit(a);
	if (ret) {
		pthread_mutex_lock(&drv->gate_lock);
		ahead_unlink(drv, e);
		pthread_mutex_unlock(&drv->gate_lock);
		gate_open(drv, a->gate, a->gate_value);
		stage_put(st);
		free(e);
		free(a);
	}
	return ret;
}

unsigned gdx_file_ahead_wait(struct gdx_file *f)
{
	struct gdx_file_driver *drv = f->drv;
	unsigned held;
	bool pending;

	pthread_mutex_lock(&drv->gate_lock);
	do {
		held = 0;
		pending = false;
		for (struct async_ahead *e = drv->ahead; e; e = e->next) {
			held += e->f == f;
			pending |= e->f == f && !e->finished;
		}
		if (pending)
			pthread_cond_wait(&drv->ahead_cond, &drv->gate_lock);
	} while (pending);
	pthread_mutex_unlock(&drv->gate_lock);
	return held;
}

GDX_API int gdx_file_read_async(struct gdx_file *f, void *buf, const size_t *size,
				const off_t *off, ssize_t *done, struct gdx_stream *s)
{
	return rw_async(f, GDX_FILE_READ, buf, size, off, done, s, 0);
}

GDX_API int gdx_file_read_async_ex(struct gdx_file *f, void *buf, const size_t *size,
				   const off_t *off, ssize_t *done, struct gdx_stream *s,
				   unsigned flags)
{
	return rw_async(f, GDX_FILE_READ, buf, size, off, done, s, flags);
}

GDX_API int gdx_file_write_async(struct gdx_file *f, const void *buf, const size_t *size,
				 const off_t *off, ssize_t *done, struct gdx_stream *s)
{
	return rw_async(f, GDX_FILE_WRITE, buf, size, off, done, s, 0);
}
