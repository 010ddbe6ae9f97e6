/* SPDX-License-Identifier: MIT */
/*
 * The emulated device: device memory is host memory the CPU cannot reach
 * through the device pointer, and each stream is a worker thread that runs its
 * queue in order.  Events, host functions and stream waits follow CUDA's
 * ordering rules, so code that is correct here is correct on a GPU, and code
 * that forgets a synchronisation or touches device memory from the CPU fails
 * here as it would there.
 *
 * Each device allocation is a memfd mapped twice: the address handed out is a
 * PROT_NONE view (any CPU access faults), the second view is read-write and
 * only the copy engine (this file) uses it.
 *
 * A NIC reaches that memory as it reaches a GPU's: through a dma-buf of the
 * memfd's pages (/dev/udmabuf, which wants the memfd sealed against
 * shrinking, hence the kept descriptor: kept only where /dev/udmabuf can be
 * opened, so that elsewhere an allocation holds no descriptor, as a GPU's
 * does not), or, the analog of peer memory, by
 * registering the copy engine's view with ibv_reg_mr.  Either way the NIC
 * writes the pages behind the device pointer and the CPU never touches them.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"

#include <linux/udmabuf.h>

enum range_kind { R_DEVICE, R_PINNED_ALLOC, R_PINNED_REG };

struct range {
	uintptr_t base;
	size_t size;		/* as asked for */
	size_t map_size;	/* page-rounded */
	unsigned char *shadow;	/* R_DEVICE: the read-write view */
	int memfd;		/* R_DEVICE: the pages, for dma-buf exports; -1 without udmabuf */
	enum range_kind kind;
	uint64_t buffer_id;
};

struct emu_dev {
	int ordinal;
	pthread_mutex_t lock;	/* ranges, mem_used */
	struct range *ranges;	/* sorted by base */
	size_t nranges, cap;
	size_t mem_used, mem_limit;
	/* Event completion is broadcast on one condition per device. */
	pthread_mutex_t ev_lock;
	pthread_cond_t ev_cond;
	/* The device's own streams, for the wait a synchronous free makes. */
	pthread_mutex_t streams_lock;
	struct emu_stream_impl **streams;
	size_t nstreams, streams_cap;
	/* Host registrations counted while emulated.host_register_fail_after is set. */
	_Atomic long regs_counted;
	/* Copy agent descriptors copied while emulated.agent_fault_after is set. */
	_Atomic long agent_copies;
	/* Stream copies enqueued while emulated.copy_fault_after is set. */
	_Atomic long stream_copies;
	bool udmabuf;		/* /dev/udmabuf opens: allocations keep their memfd */
};

static _Atomic uint64_t next_buffer_id = 1;

enum op_type { OP_COPY, OP_SET, OP_HOSTFN, OP_RECORD, OP_WAIT, OP_WAITVAL, OP_WRITEVAL, OP_FREE,
	       OP_AGENT };

struct emu_event {
	struct emu_dev *d;
	int refs;		/* the handle, plus each queued record or wait */
	uint64_t recorded;	/* generation of the last record */
	uint64_t done;		/* generation that has completed */
	uint64_t t_ns;		/* when `done` was reached */
};

struct op {
	enum op_type type;
	struct op *next;
	union {
		struct { void *dst; const void *src; size_t n; } copy;
		struct { void *dst; int v; size_t n; } set;
		struct { gdx_host_fn fn; void *arg; } host;
		struct { struct emu_event *ev; uint64_t gen; } ev;
		struct { void *p; } free;
		struct { const uint32_t *addr; uint32_t v; } wv;
		struct { struct gdx_agent_args a; long fault_after, copy_us; bool aligned; } agent;
	};
};

struct emu_stream_impl {
	struct emu_dev *d;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;	/* work queued, or work done */
	struct op *head, *tail;
	uint64_t enqueued, completed;
	bool stop;
};

/* The front end's per-stream block: owned streams point at their own impl. */
struct emu_stream {
	struct emu_stream_impl *impl;
	bool owned;
};

/* ---- address ranges ------------------------------------------------------ */

/* Caller holds d->lock.  Index of the range containing p, or -1. */
static long range_find(struct emu_dev *d, uintptr_t p)
{
	long lo = 0, hi = (long)d->nranges - 1;

	while (lo <= hi) {
		long mid = lo + (hi - lo) / 2;
		struct range *r = &d->ranges[mid];

		if (p < r->base)
			hi = mid - 1;
		else if (p >= r->base + r->map_size)
			lo = mid + 1;
		else
			return mid;
	}
	return -1;
}

static int range_add(struct emu_dev *d, const struct range *r)
{
	size_t i;

	if (d->nranges == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		struct range *v = realloc(d->ranges, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		d->ranges = v;
		d->cap = cap;
	}
	for (i = d->nranges; i > 0 && d->ranges[i - 1].base > r->base; i--)
		d->ranges[i] = d->ranges[i - 1];
	d->ranges[i] = *r;
	d->nranges++;
	return 0;
}

static void range_del(struct emu_dev *d, size_t i)
{
	memmove(&d->ranges[i], &d->ranges[i + 1], (d->nranges - i - 1) * sizeof(d->ranges[0]));
	d->nranges--;
}

/* Caller holds d->lock.  Index of the first range ending after p (nranges if none). */
static size_t range_after(struct emu_dev *d, uintptr_t p)
{
	size_t lo = 0, hi = d->nranges;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->ranges[mid].base + d->ranges[mid].map_size <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Resolves [p, p+n) to memory this thread may touch: the shadow view for
 * device memory, p itself for host memory.  A range that starts in device
 * memory must end inside the same allocation; one that starts in host memory
 * must not reach into any device allocation.
 */
static int resolve(struct emu_dev *d, const void *p, size_t n, void **out, bool *pageable)
{
	uintptr_t a = (uintptr_t)p;
	int ret = 0;
	long i;

	if (a + n < a)
		return GDX_EBADPTR;
	pthread_mutex_lock(&d->lock);
	i = range_find(d, a);
	if (pageable)
		*pageable = i < 0;
	if (i >= 0 && d->ranges[i].kind == R_DEVICE) {
		struct range *r = &d->ranges[i];

		if (a + n > r->base + r->size)
			ret = GDX_EBADPTR;
		else
			*out = r->shadow + (a - r->base);
	} else {
		for (size_t j = range_after(d, a); j < d->nranges && d->ranges[j].base < a + n; j++) {
			if (d->ranges[j].kind == R_DEVICE) {
				ret = GDX_EBADPTR;
				break;
			}
		}
		if (!ret)
			*out = (void *)p;
	}
	pthread_mutex_unlock(&d->lock);
	return ret;
}

/* ---- copy agent ------------------------------------------------------------ */

/*
 * The CPU's view of [p, p + len) for an agent copy, which must lie in one
 * allocation of pinned or device memory, as the kernel's loads and stores
 * must on a GPU (device memory: its read-write shadow).  Lock held.
 */
static unsigned char *agent_view(struct emu_dev *d, uintptr_t p, uint32_t len)
{
	long i = range_find(d, p);

	if (i < 0 || p + len > d->ranges[i].base + d->ranges[i].size)
		return NULL;
	if (d->ranges[i].kind != R_DEVICE)
		return (unsigned char *)p;
	return d->ranges[i].shadow + (p - d->ranges[i].base);
}

/* One agent copy, either way between pinned and device memory (or device to device). */
static int agent_copy(struct emu_dev *d, uintptr_t t, uintptr_t s, uint32_t len)
{
	unsigned char *rd, *rs;

	pthread_mutex_lock(&d->lock);
	rd = agent_view(d, t, len);
	rs = agent_view(d, s, len);
	pthread_mutex_unlock(&d->lock);
	if (!rd || !rs)
		return GDX_EBADPTR;
	memmove(rd, rs, len);
	return 0;
}

/*
 * Descriptor seq of ring r, if posted: its five words (plugin/device.h), the
 * last one first, with acquire (the host stores it last, with release).
 */
static bool agent_desc(const struct gdx_agent_args *a, unsigned r, uint32_t seq, uintptr_t *dst,
		       uintptr_t *src, uint32_t *len)
{
	const struct gdx_agent_desc *ds = (const struct gdx_agent_desc *)(uintptr_t)a->descs +
					  (uint64_t)r * a->entries + (seq & (a->entries - 1));
	uint64_t w[GDX_AGENT_DESC_WORDS];

	w[4] = __atomic_load_n(&ds->w[4], __ATOMIC_ACQUIRE);
	if (w[4] >> 32 != seq)
		return false;
	for (unsigned i = 0; i < 4; i++) {
		w[i] = __atomic_load_n(&ds->w[i], __ATOMIC_RELAXED);
		if (w[i] >> 32 != seq)
			return false;
	}
	*dst = (uintptr_t)((uint32_t)w[0] | (uint64_t)(uint32_t)w[1] << 32);
	*src = (uintptr_t)((uint32_t)w[2] | (uint64_t)(uint32_t)w[3] << 32);
	*len = (uint32_t)w[4];
	return true;
}

/* The loop of src/gpu/agent.cu on the stream's thread, one descriptor at a time. */
static void run_agent(struct emu_dev *d, const struct gdx_agent_args *a, long fault_after,
		      long copy_us, bool aligned)
{
	struct gdx_agent_worker *w = (struct gdx_agent_worker *)(uintptr_t)a->workers + a->worker;
	struct gdx_agent_ring *rings = (struct gdx_agent_ring *)(uintptr_t)a->rings;
	const uint32_t *stop = (const uint32_t *)(uintptr_t)a->stop;
	unsigned nown = a->worker < a->nrings ? (a->nrings - 1 - a->worker) / a->nworkers + 1 : 0;
	uint32_t next[64];
	uint64_t idle_since = gdx_now_ns();
	bool closing = false;

	__atomic_store_n(&w->live, 1, __ATOMIC_RELEASE);
	if (nown > GDX_ARRAY_SIZE(next)) {
		__atomic_store_n(&w->err, GDX_AGENT_ERR_OWN, __ATOMIC_RELAXED);
		nown = 0;
	}
	for (unsigned k = 0; k < nown; k++)
		next[k] = __atomic_load_n(&rings[a->worker + k * a->nworkers].done,
					  __ATOMIC_RELAXED) + 1;
	while (nown && !__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
		bool found = false;

		for (unsigned k = 0; k < nown; k++) {
			unsigned r = a->worker + k * a->nworkers;
			uintptr_t dst, src;
			uint32_t len, n = 0, ready = 0;

			/*
			 * A round takes the run of descriptors ready when it
			 * starts, AG_POLL (4) at most, as agent.cu's poll does:
			 * one posted meanwhile waits for the next round, so the
			 * done word of those taken is not held back by it.
			 */
			while (ready < 4 && agent_desc(a, r, next[k] + ready, &dst, &src, &len))
				ready++;
			while (n < ready && agent_desc(a, r, next[k], &dst, &src, &len)) {
				if (closing) {
					__atomic_store_n(&w->live, 1, __ATOMIC_RELEASE);
					closing = false;
				}
				/* emulated.agent_fault_after: as a kernel's bad access, for tests */
				if (fault_after && atomic_fetch_add(&d->agent_copies, 1) >= fault_after)
					dst = 0;
				/* emulated.agent_aligned: a copy with ends agent.cu copies byte-wise, for tests */
				if (aligned && (dst | src) & 15)
					dst = 0;
				/* emulated.agent_copy_us: a slow device, for tests */
				if (copy_us)
					nanosleep(&(struct timespec){ .tv_sec = copy_us / 1000000,
								      .tv_nsec = copy_us % 1000000 * 1000 },
						  NULL);
				if (agent_copy(d, dst, src, len)) {
					/* gdx_copy_agent_status reads it from another thread */
					__atomic_store_n(&w->err, GDX_AGENT_ERR_COPY, __ATOMIC_RELAXED);
					__atomic_store_n(&w->live, 0, __ATOMIC_RELEASE);
					return;
				}
				next[k]++;
				n++;
			}
			if (n) {
				__atomic_store_n(&rings[r].done, next[k] - 1, __ATOMIC_RELEASE);
				found = true;
			}
		}
		if (found) {
			idle_since = gdx_now_ns();
		} else if (closing) {
			return;
		} else if (gdx_now_ns() - idle_since > a->idle_ns) {
			/* going idle: clear live, then look once more (agent.c) */
			__atomic_store_n(&w->live, 0, __ATOMIC_SEQ_CST);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			closing = true;
		} else {
			nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
		}
	}
	__atomic_store_n(&w->live, 0, __ATOMIC_RELEASE);
}

/* ---- device ---------------------------------------------------------------- */

static int emu_count(void)
{
	return (int)gdx_cfg_int("emulated.devices");
}

static int emu_open(int ordinal, void **priv)
{
	struct emu_dev *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->ordinal = ordinal;
	d->mem_limit = gdx_cfg_size("emulated.mem_limit");
	d->udmabuf = !access("/dev/udmabuf", R_OK | W_OK);
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->ev_lock, NULL);
	pthread_cond_init(&d->ev_cond, NULL);
	pthread_mutex_init(&d->streams_lock, NULL);
	*priv = d;
	return 0;
}

static void emu_close(void *priv)
{
	struct emu_dev *d = priv;

	for (size_t i = 0; i < d->nranges; i++) {
		struct range *r = &d->ranges[i];

		if (r->kind == R_DEVICE) {
			munmap((void *)r->base, r->map_size);
			munmap(r->shadow, r->map_size);
			if (r->memfd >= 0)
				close(r->memfd);
		} else if (r->kind == R_PINNED_ALLOC) {
			munmap((void *)r->base, r->map_size);
		}
	}
	free(d->ranges);
	free(d->streams);
	pthread_mutex_destroy(&d->streams_lock);
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->ev_lock);
	pthread_cond_destroy(&d->ev_cond);
	free(d);
}

static int emu_props(void *priv, struct gdx_device_props *p)
{
	struct emu_dev *d = priv;

	snprintf(p->model, sizeof(p->model), "emulated");
	p->numa_node = -1;
	p->total_mem = d->mem_limit;
	p->async_alloc_supported = 1;
	p->dmabuf_supported = d->udmabuf;
	return 0;
}

static int emu_malloc(void *priv, size_t size, void **dptr)
{
	struct emu_dev *d = priv;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct range r = { .size = size, .map_size = GDX_ALIGN_UP(size, pg), .kind = R_DEVICE };
	void *user = MAP_FAILED, *shadow = MAP_FAILED;
	int fd, ret;

	if (r.map_size < size)
		return -ENOMEM;
	pthread_mutex_lock(&d->lock);
	if (r.map_size > d->mem_limit - d->mem_used) {
		pthread_mutex_unlock(&d->lock);
		return -ENOMEM;
	}
	d->mem_used += r.map_size;
	pthread_mutex_unlock(&d->lock);

	fd = memfd_create("gdx-emulated", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		goto fail;
	if (ftruncate(fd, (off_t)r.map_size) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		goto fail;
	/* Reserve the user view first so the two mappings never alias by accident. */
	user = mmap(NULL, r.map_size, PROT_NONE, MAP_SHARED, fd, 0);
	if (user == MAP_FAILED)
		goto fail;
	shadow = mmap(NULL, r.map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (shadow == MAP_FAILED)
		goto fail;
	r.base = (uintptr_t)user;
	r.shadow = shadow;
	if (!d->udmabuf) {
		close(fd);
		fd = -1;
	}
	r.memfd = fd;
	r.buffer_id = atomic_fetch_add(&next_buffer_id, 1);
	pthread_mutex_lock(&d->lock);
	ret = range_add(d, &r);
	pthread_mutex_unlock(&d->lock);
	if (ret)
		goto fail_unmapped;
	*dptr = user;
	return 0;

fail:
	ret = errno ? -errno : -ENOMEM;
fail_unmapped:
	if (user != MAP_FAILED)
		munmap(user, r.map_size);
	if (shadow != MAP_FAILED)
		munmap(shadow, r.map_size);
	if (fd >= 0)
		close(fd);
	pthread_mutex_lock(&d->lock);
	d->mem_used -= r.map_size;
	pthread_mutex_unlock(&d->lock);
	return ret;
}

static int free_now(void *priv, void *dptr)
{
	struct emu_dev *d = priv;
	struct range r;
	long i;

	pthread_mutex_lock(&d->lock);
	i = range_find(d, (uintptr_t)dptr);
	if (i < 0 || d->ranges[i].kind != R_DEVICE || d->ranges[i].base != (uintptr_t)dptr) {
		pthread_mutex_unlock(&d->lock);
		return GDX_EBADPTR;
	}
	r = d->ranges[i];
	range_del(d, (size_t)i);
	d->mem_used -= r.map_size;
	pthread_mutex_unlock(&d->lock);
	munmap((void *)r.base, r.map_size);
	munmap(r.shadow, r.map_size);
	if (r.memfd >= 0)
		close(r.memfd);
	return 0;
}

static int emu_pinned_alloc(void *priv, size_t size, void **p)
{
	struct emu_dev *d = priv;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct range r = { .size = size, .map_size = GDX_ALIGN_UP(size, pg), .kind = R_PINNED_ALLOC };
	void *m;
	int ret;

	if (r.map_size < size)
		return -ENOMEM;
	m = mmap(NULL, r.map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	r.base = (uintptr_t)m;
	r.buffer_id = atomic_fetch_add(&next_buffer_id, 1);
	pthread_mutex_lock(&d->lock);
	ret = range_add(d, &r);
	pthread_mutex_unlock(&d->lock);
	if (ret) {
		munmap(m, r.map_size);
		return ret;
	}
	*p = m;
	return 0;
}

static int del_host_range(struct emu_dev *d, void *p, enum range_kind kind, struct range *out)
{
	long i;

	pthread_mutex_lock(&d->lock);
	i = range_find(d, (uintptr_t)p);
	if (i < 0 || d->ranges[i].kind != kind || d->ranges[i].base != (uintptr_t)p) {
		pthread_mutex_unlock(&d->lock);
		return GDX_EBADPTR;
	}
	*out = d->ranges[i];
	range_del(d, (size_t)i);
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static int pinned_free_now(void *priv, void *p)
{
	struct range r;
	int ret = del_host_range(priv, p, R_PINNED_ALLOC, &r);

	if (!ret)
		munmap((void *)r.base, r.map_size);
	return ret;
}

static int emu_host_register(void *priv, void *p, size_t size, unsigned flags)
{
	struct emu_dev *d = priv;
	struct range r = { .base = (uintptr_t)p, .size = size, .map_size = size,
			   .kind = R_PINNED_REG };
	long fail_after = (long)gdx_cfg_int("emulated.host_register_fail_after");
	int ret = 0;

	(void)flags;
	if (r.base + size < r.base)
		return -EINVAL;
	/* Fault injection, so tests can see every fallback from a refused pin. */
	if (!fail_after)
		atomic_store(&d->regs_counted, 0);
	else if (atomic_fetch_add(&d->regs_counted, 1) >= fail_after)
		return -ENOMEM;
	r.buffer_id = atomic_fetch_add(&next_buffer_id, 1);
	pthread_mutex_lock(&d->lock);
	/* Like cuMemHostRegister: overlapping an existing registration is an error. */
	for (size_t i = 0; i < d->nranges; i++) {
		struct range *o = &d->ranges[i];

		if (o->base < r.base + size && r.base < o->base + o->map_size) {
			ret = o->kind == R_DEVICE ? GDX_EBADPTR : -EEXIST;
			break;
		}
	}
	if (!ret)
		ret = range_add(d, &r);
	pthread_mutex_unlock(&d->lock);
	return ret;
}

static int emu_host_unregister(void *priv, void *p)
{
	struct range r;

	return del_host_range(priv, p, R_PINNED_REG, &r);
}

static int emu_pointer_query(void *priv, const void *p, struct gdx_ptr_attrs *a)
{
	struct emu_dev *d = priv;
	long i;

	gdx_device_calls_add(1);
	pthread_mutex_lock(&d->lock);
	i = range_find(d, (uintptr_t)p);
	if (i >= 0 && (uintptr_t)p < d->ranges[i].base + d->ranges[i].size) {
		struct range *r = &d->ranges[i];

		a->kind = r->kind == R_DEVICE ? GDX_MEM_DEVICE : GDX_MEM_PINNED;
		a->device_ordinal = r->kind == R_DEVICE ? d->ordinal : -1;
		a->base = (void *)r->base;
		a->size = r->size;
		a->buffer_id = r->buffer_id;
	} else {
		a->kind = GDX_MEM_HOST;
		a->device_ordinal = -1;
		a->base = NULL;
		a->size = 0;
		a->buffer_id = 0;
	}
	pthread_mutex_unlock(&d->lock);
	return 0;
}

/*
 * The device allocation holding [p, p+n) in *out, and the range widened to its
 * pages (an allocation is page-rounded: they stay inside it).  Lock held.
 */
static int device_pages(struct emu_dev *d, const void *p, size_t n, struct range **out,
			uintptr_t *start, uintptr_t *end)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p;
	long i = range_find(d, a);
	struct range *r;

	if (i < 0 || d->ranges[i].kind != R_DEVICE)
		return GDX_EBADPTR;
	r = &d->ranges[i];
	if (n > r->size || a - r->base > r->size - n)
		return -EINVAL;
	*out = r;
	*start = GDX_ALIGN_DOWN(a, pg);
	*end = GDX_ALIGN_UP(a + n, pg);
	return 0;
}

/* A dma-buf of the memfd's pages behind [dptr, dptr+size), as a GPU driver exports one. */
static int emu_export_dmabuf(void *priv, void *dptr, size_t size, int *fd, uint64_t *offset)
{
	struct emu_dev *d = priv;
	struct udmabuf_create c = { .flags = UDMABUF_FLAGS_CLOEXEC };
	uintptr_t s, e;
	struct range *r;
	int dev, ret;

	gdx_device_calls_add(1);
	dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return errno == ENOENT ? -EOPNOTSUPP : -errno;
	pthread_mutex_lock(&d->lock);
	ret = device_pages(d, dptr, size, &r, &s, &e);
	if (!ret && r->memfd < 0)
		ret = -EOPNOTSUPP;	/* allocated before /dev/udmabuf could be opened */
	if (!ret) {
		c.memfd = (uint32_t)r->memfd;
		c.offset = s - r->base;
		c.size = e - s;
		ret = ioctl(dev, UDMABUF_CREATE, &c);
		ret = ret < 0 ? -errno : ret;
	}
	pthread_mutex_unlock(&d->lock);
	close(dev);
	if (ret < 0)
		return ret;
	*fd = ret;
	*offset = (uintptr_t)dptr - s;
	return 0;
}

/* The copy engine's view of the same pages: what a NIC registers, never the CPU. */
static int emu_nic_addr(void *priv, void *dptr, size_t size, void **va)
{
	struct emu_dev *d = priv;
	uintptr_t s, e;
	struct range *r;
	int ret;

	gdx_device_calls_add(1);
	pthread_mutex_lock(&d->lock);
	ret = device_pages(d, dptr, size, &r, &s, &e);
	if (!ret)
		*va = r->shadow + ((uintptr_t)dptr - r->base);
	pthread_mutex_unlock(&d->lock);
	return ret;
}

/* ---- streams --------------------------------------------------------------- */

/* Caller holds d->ev_lock. */
static void event_unref(struct emu_event *ev)
{
	if (--ev->refs == 0)
		free(ev);
}

static void event_complete(struct emu_dev *d, struct emu_event *ev, uint64_t gen)
{
	pthread_mutex_lock(&d->ev_lock);
	if (gen > ev->done) {
		ev->done = gen;
		ev->t_ns = gdx_now_ns();
	}
	event_unref(ev);
	pthread_cond_broadcast(&d->ev_cond);
	pthread_mutex_unlock(&d->ev_lock);
}

static void run_op(struct emu_stream_impl *st, struct op *op)
{
	struct emu_dev *d = st->d;

	switch (op->type) {
	case OP_COPY:
		memmove(op->copy.dst, op->copy.src, op->copy.n);
		break;
	case OP_SET:
		memset(op->set.dst, op->set.v, op->set.n);
		break;
	case OP_HOSTFN:
		op->host.fn(op->host.arg);
		break;
	case OP_RECORD:
		event_complete(d, op->ev.ev, op->ev.gen);
		break;
	case OP_WAIT:
		pthread_mutex_lock(&d->ev_lock);
		while (op->ev.ev->done < op->ev.gen)
			pthread_cond_wait(&d->ev_cond, &d->ev_lock);
		event_unref(op->ev.ev);
		pthread_mutex_unlock(&d->ev_lock);
		break;
	case OP_WAITVAL:
		/* The CPU releases the word with a plain store: poll it, as the GPU does. */
		while ((int32_t)(__atomic_load_n(op->wv.addr, __ATOMIC_ACQUIRE) - op->wv.v) < 0)
			nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
		break;
	case OP_WRITEVAL:
		/* Earlier copies ran on this thread: a release store orders them first. */
		__atomic_store_n((uint32_t *)op->wv.addr, op->wv.v, __ATOMIC_RELEASE);
		break;
	case OP_FREE:
		free_now(d, op->free.p);
		break;
	case OP_AGENT:
		run_agent(d, &op->agent.a, op->agent.fault_after, op->agent.copy_us,
			  op->agent.aligned);
		break;
	}
}

/* The stream whose worker runs on this thread, if any. */
static _Thread_local struct emu_stream_impl *worker_of;

static void *stream_worker(void *arg)
{
	struct emu_stream_impl *st = arg;

	worker_of = st;
	pthread_mutex_lock(&st->lock);
	for (;;) {
		struct op *op;

		while (!st->head && !st->stop)
			pthread_cond_wait(&st->cond, &st->lock);
		if (!st->head)
			break;
		op = st->head;
		pthread_mutex_unlock(&st->lock);
		run_op(st, op);
		pthread_mutex_lock(&st->lock);
		st->head = op->next;
		if (!st->head)
			st->tail = NULL;
		st->completed++;
		free(op);
		pthread_cond_broadcast(&st->cond);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

static int enqueue(struct emu_stream *s, const struct op *tmpl)
{
	struct emu_stream_impl *st = s->impl;
	struct op *op = malloc(sizeof(*op));

	gdx_device_calls_add(1);
	if (!op)
		return -ENOMEM;
	*op = *tmpl;
	op->next = NULL;
	pthread_mutex_lock(&st->lock);
	if (st->tail)
		st->tail->next = op;
	else
		st->head = op;
	st->tail = op;
	st->enqueued++;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

static int emu_stream_create(void *priv, void *stream, void *native)
{
	struct emu_dev *d = priv;
	struct emu_stream *s = stream;
	struct emu_stream_impl *st;
	int ret;

	if (native) {
		s->impl = native;
		s->owned = false;
		return ((struct emu_stream_impl *)native)->d == priv ? 0 : -EINVAL;
	}
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->d = d;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	pthread_mutex_lock(&d->streams_lock);
	ret = -ENOMEM;
	if (d->nstreams == d->streams_cap) {
		size_t cap = d->streams_cap ? d->streams_cap * 2 : 8;
		struct emu_stream_impl **v = realloc(d->streams, cap * sizeof(*v));

		if (!v)
			goto fail;
		d->streams = v;
		d->streams_cap = cap;
	}
	ret = -pthread_create(&st->thread, NULL, stream_worker, st);
	if (ret)
		goto fail;
	d->streams[d->nstreams++] = st;
	pthread_mutex_unlock(&d->streams_lock);
	s->impl = st;
	s->owned = true;
	return 0;
fail:
	pthread_mutex_unlock(&d->streams_lock);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cond);
	free(st);
	return ret;
}

/* Waits until everything enqueued on st so far has run. */
static void impl_sync(struct emu_stream_impl *st)
{
	uint64_t target;

	pthread_mutex_lock(&st->lock);
	target = st->enqueued;
	while (st->completed < target)
		pthread_cond_wait(&st->cond, &st->lock);
	pthread_mutex_unlock(&st->lock);
}

static int emu_stream_synchronize(void *priv, void *stream)
{
	(void)priv;
	impl_sync(((struct emu_stream *)stream)->impl);
	return 0;
}

/*
 * A synchronous free waits for the work already queued on the device's streams,
 * as cuMemFree does (its implicit synchronisation): a queued copy must never
 * run into memory that was unmapped, or mapped again for someone else, meanwhile.
 */
static void quiesce(struct emu_dev *d)
{
	pthread_mutex_lock(&d->streams_lock);
	for (size_t i = 0; i < d->nstreams; i++)
		if (d->streams[i] != worker_of)
			impl_sync(d->streams[i]);
	pthread_mutex_unlock(&d->streams_lock);
}

static int emu_free(void *priv, void *dptr)
{
	quiesce(priv);
	return free_now(priv, dptr);
}

static int emu_pinned_free(void *priv, void *p)
{
	quiesce(priv);
	return pinned_free_now(priv, p);
}

static int emu_stream_destroy(void *priv, void *stream)
{
	struct emu_dev *d = priv;
	struct emu_stream *s = stream;
	struct emu_stream_impl *st = s->impl;

	if (!s->owned)
		return 0;
	/* Like cuStreamDestroy, pending work still runs to completion. */
	impl_sync(st);
	pthread_mutex_lock(&d->streams_lock);
	for (size_t i = 0; i < d->nstreams; i++) {
		if (d->streams[i] == st) {
			d->streams[i] = d->streams[--d->nstreams];
			break;
		}
	}
	pthread_mutex_unlock(&d->streams_lock);
	pthread_mutex_lock(&st->lock);
	st->stop = true;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	pthread_join(st->thread, NULL);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cond);
	free(st);
	return 0;
}

static int emu_stream_query(void *priv, void *stream)
{
	struct emu_stream_impl *st = ((struct emu_stream *)stream)->impl;
	int ret;

	(void)priv;
	pthread_mutex_lock(&st->lock);
	ret = st->completed == st->enqueued ? 0 : -EBUSY;
	pthread_mutex_unlock(&st->lock);
	return ret;
}

static void *emu_stream_native(void *priv, void *stream)
{
	(void)priv;
	return ((struct emu_stream *)stream)->impl;
}

static int emu_memcpy(void *priv, void *dst, const void *src, size_t n, void *stream)
{
	struct emu_dev *d = priv;
	void *rd, *rs;
	long fault_after;
	bool pg_dst, pg_src;
	int ret;

	ret = resolve(d, dst, n, &rd, &pg_dst);
	if (!ret)
		ret = resolve(d, src, n, &rs, &pg_src);
	if (ret)
		return ret;
	if (!stream) {
		memmove(rd, rs, n);
		return 0;
	}
	/* Fault injection: the copies behind a fault mid-batch, for the stagers' tests. */
	fault_after = (long)gdx_cfg_int("emulated.copy_fault_after");
	if (!fault_after)
		atomic_store(&d->stream_copies, 0);
	else if (atomic_fetch_add(&d->stream_copies, 1) >= fault_after)
		return -EIO;
	ret = enqueue(stream, &(struct op){ .type = OP_COPY, .copy = { rd, rs, n } });
	/*
	 * CUDA stages pageable memory: an async copy into pageable memory returns
	 * only once it is done, and one out of it may wait for the stream.  Do
	 * the same, so code that would stall (or deadlock) on a GPU does here.
	 */
	if (!ret && (pg_dst || pg_src))
		ret = emu_stream_synchronize(priv, stream);
	return ret;
}

static int emu_memset(void *priv, void *dst, int v, size_t n, void *stream)
{
	struct emu_dev *d = priv;
	void *rd;
	long i;
	int ret;

	/* Like cuMemsetD8: device or pinned memory only, never pageable memory. */
	pthread_mutex_lock(&d->lock);
	i = range_find(d, (uintptr_t)dst);
	pthread_mutex_unlock(&d->lock);
	if (i < 0)
		return -EINVAL;
	ret = resolve(d, dst, n, &rd, NULL);
	if (ret)
		return ret;
	if (!stream) {
		memset(rd, v, n);
		return 0;
	}
	return enqueue(stream, &(struct op){ .type = OP_SET, .set = { rd, v, n } });
}

static int emu_malloc_async(void *priv, size_t size, void **dptr, void *stream)
{
	/* Memory exists at once; only its use is ordered, which the stream does. */
	(void)stream;
	return emu_malloc(priv, size, dptr);
}

static int emu_free_async(void *priv, void *dptr, void *stream)
{
	struct emu_dev *d = priv;
	long i;

	pthread_mutex_lock(&d->lock);
	i = range_find(d, (uintptr_t)dptr);
	i = (i >= 0 && d->ranges[i].kind == R_DEVICE && d->ranges[i].base == (uintptr_t)dptr) ? i : -1;
	pthread_mutex_unlock(&d->lock);
	if (i < 0)
		return GDX_EBADPTR;
	return enqueue(stream, &(struct op){ .type = OP_FREE, .free = { dptr } });
}

static bool pinned_word(struct emu_dev *d, const uint32_t *addr)
{
	bool pinned;
	long i;

	pthread_mutex_lock(&d->lock);
	i = range_find(d, (uintptr_t)addr);
	pinned = i >= 0 && d->ranges[i].kind != R_DEVICE &&
		 (uintptr_t)addr + sizeof(*addr) <= d->ranges[i].base + d->ranges[i].size;
	pthread_mutex_unlock(&d->lock);
	return pinned;
}

static int emu_stream_wait_value32(void *priv, void *stream, const uint32_t *addr,
				   uint32_t value)
{
	if (!pinned_word(priv, addr))
		return GDX_EBADPTR;
	return enqueue(stream, &(struct op){ .type = OP_WAITVAL, .wv = { addr, value } });
}

static int emu_stream_write_value32(void *priv, void *stream, uint32_t *addr, uint32_t value)
{
	if (!pinned_word(priv, addr))
		return GDX_EBADPTR;
	return enqueue(stream, &(struct op){ .type = OP_WRITEVAL,
					     .wv = { addr, value } });
}

static int emu_agent_launch(void *priv, void *stream, const struct gdx_agent_args *a)
{
	struct emu_dev *d = priv;
	long fault_after = (long)gdx_cfg_int("emulated.agent_fault_after");
	long copy_us = (long)gdx_cfg_int("emulated.agent_copy_us");
	bool aligned = gdx_cfg_bool("emulated.agent_aligned");

	if (!stream)
		return 0;
	if (!fault_after)
		atomic_store(&d->agent_copies, 0);
	return enqueue(stream, &(struct op){ .type = OP_AGENT,
					     .agent = { *a, fault_after, copy_us, aligned } });
}

static int emu_launch_host_func(void *priv, void *stream, gdx_host_fn fn, void *arg)
{
	(void)priv;
	return enqueue(stream, &(struct op){ .type = OP_HOSTFN, .host = { fn, arg } });
}

/* ---- events ---------------------------------------------------------------- */

struct emu_event_h {
	struct emu_event *ev;
};

static int emu_event_create(void *priv, void *event, unsigned flags)
{
	struct emu_event_h *h = event;

	(void)flags;
	h->ev = calloc(1, sizeof(*h->ev));
	if (!h->ev)
		return -ENOMEM;
	h->ev->d = priv;
	h->ev->refs = 1;
	return 0;
}

static int emu_event_destroy(void *priv, void *event)
{
	struct emu_event_h *h = event;
	struct emu_dev *d = priv;

	/*
	 * Records and waits still queued hold their own references, so the event
	 * outlives its handle until they have run, as cuEventDestroy allows.
	 */
	pthread_mutex_lock(&d->ev_lock);
	event_unref(h->ev);
	pthread_mutex_unlock(&d->ev_lock);
	return 0;
}

static int emu_event_record(void *priv, void *event, void *stream)
{
	struct emu_event *ev = ((struct emu_event_h *)event)->ev;
	struct emu_dev *d = priv;
	uint64_t gen;

	int ret;

	pthread_mutex_lock(&d->ev_lock);
	gen = ++ev->recorded;
	ev->refs++;
	pthread_mutex_unlock(&d->ev_lock);
	ret = enqueue(stream, &(struct op){ .type = OP_RECORD, .ev = { ev, gen } });
	if (ret) {
		/* Never ran: complete the generation so waiters do not hang. */
		event_complete(d, ev, gen);
	}
	return ret;
}

static int emu_stream_wait_event(void *priv, void *stream, void *event)
{
	struct emu_event *ev = ((struct emu_event_h *)event)->ev;
	struct emu_dev *d = priv;
	uint64_t gen;

	/* Waits for the record that was latest when this call was made. */
	int ret;

	pthread_mutex_lock(&d->ev_lock);
	gen = ev->recorded;
	if (gen)
		ev->refs++;
	pthread_mutex_unlock(&d->ev_lock);
	if (!gen)
		return 0;
	ret = enqueue(stream, &(struct op){ .type = OP_WAIT, .ev = { ev, gen } });
	if (ret) {
		pthread_mutex_lock(&d->ev_lock);
		event_unref(ev);
		pthread_mutex_unlock(&d->ev_lock);
	}
	return ret;
}

static int emu_event_synchronize(void *priv, void *event)
{
	struct emu_event *ev = ((struct emu_event_h *)event)->ev;
	struct emu_dev *d = priv;

	gdx_device_calls_add(1);
	pthread_mutex_lock(&d->ev_lock);
	while (ev->done < ev->recorded)
		pthread_cond_wait(&d->ev_cond, &d->ev_lock);
	pthread_mutex_unlock(&d->ev_lock);
	return 0;
}

static int emu_event_query(void *priv, void *event)
{
	struct emu_event *ev = ((struct emu_event_h *)event)->ev;
	struct emu_dev *d = priv;
	int ret;

	gdx_device_calls_add(1);
	pthread_mutex_lock(&d->ev_lock);
	ret = ev->done >= ev->recorded ? 0 : -EBUSY;
	pthread_mutex_unlock(&d->ev_lock);
	return ret;
}

static int emu_event_elapsed_ms(void *priv, void *start, void *end, float *ms)
{
	struct emu_event *a = ((struct emu_event_h *)start)->ev;
	struct emu_event *b = ((struct emu_event_h *)end)->ev;
	struct emu_dev *d = priv;
	int ret = 0;

	gdx_device_calls_add(1);
	pthread_mutex_lock(&d->ev_lock);
	if (!a->recorded || !b->recorded)
		ret = -EINVAL;		/* CUDA: invalid resource handle */
	else if (a->done < a->recorded || b->done < b->recorded)
		ret = -EBUSY;		/* CUDA: not ready */
	else
		*ms = (float)((double)((int64_t)(b->t_ns - a->t_ns)) / 1e6);
	pthread_mutex_unlock(&d->ev_lock);
	return ret;
}

const struct gdx_device_ops gdx_emulated_ops = {
	.kind = "emulated",
	.stream_priv_size = sizeof(struct emu_stream),
	.event_priv_size = sizeof(struct emu_event_h),
	.count = emu_count,
	.open = emu_open,
	.close = emu_close,
	.props = emu_props,
	.malloc = emu_malloc,
	.free = emu_free,
	.malloc_async = emu_malloc_async,
	.free_async = emu_free_async,
	.pinned_alloc = emu_pinned_alloc,
	.pinned_free = emu_pinned_free,
	.host_register = emu_host_register,
	.host_unregister = emu_host_unregister,
	.pointer_query = emu_pointer_query,
	.export_dmabuf = emu_export_dmabuf,
	.nic_addr = emu_nic_addr,
	.memcpy = emu_memcpy,
	.memset = emu_memset,
	.stream_create = emu_stream_create,
	.stream_destroy = emu_stream_destroy,
	.stream_synchronize = emu_stream_synchronize,
	.stream_query = emu_stream_query,
	.stream_native = emu_stream_native,
	.launch_host_func = emu_launch_host_func,
	.stream_wait_event = emu_stream_wait_event,
	.stream_wait_value32 = emu_stream_wait_value32,
	.event_create = emu_event_create,
	.event_destroy = emu_event_destroy,
	.event_record = emu_event_record,
	.event_synchronize = emu_event_synchronize,
	.event_query = emu_event_query,
	.event_elapsed_ms = emu_event_elapsed_ms,
	.stream_write_value32 = emu_stream_write_value32,
	.agent_launch = emu_agent_launch,
};
