/* SPDX-License-Identifier: MIT */
/*
 * The cuda device: the CUDA driver API through libcuda.so.1, loaded at run time
 * (src/shim/cuda_api.c).  One primary context per device, retained at open;
 * every call makes it current on the calling thread and puts back whatever
 * context the thread had before, so gdx never changes an application's device
 * behind its back.  A thread that had no context keeps ours (nothing to
 * disturb, and the next call is cheaper).
 *
 * Synchronous copies and fills go through the calling thread's per-thread
 * default stream and wait for it: unlike the legacy NULL stream that cuMemcpy
 * uses, it neither waits for nor blocks other streams, and unlike cuMemcpy a
 * device-to-device copy is complete when the call returns.
 *
 * A batch of copies sends its small pinned-to-device pieces through one
 * launch of the gather kernel (src/gpu/gather.cu, committed as PTX that the
 * driver compiles for the GPU at first use) rather than one copy-engine DMA
 * each: an H200 stream runs about 40k small DMAs a second, whatever the API
 * they were enqueued with.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"
#include "shim/cuda_api.h"

#define PIN_KNOWN 64
#define PIN_KNOWN_MAX_SIZE (64u << 10)

struct cu_dev {
	const struct gdx_cu *cu;
	int ordinal;
	CUdevice dev;
	CUcontext ctx;
	bool pools;		/* cuMemAllocAsync usable */
	bool dmabuf;		/* cuMemGetHandleForAddressRange gives dma-bufs */
	size_t gather_max;	/* largest piece for the gather kernel; 0: none */
	pthread_mutex_t gather_lock;
	int gather_state;	/* 0 not loaded yet, 1 loaded, 2 launched, -1 unusable */
	CUmodule gather_mod;
	CUfunction gather_fn;
	int agent_state;	/* as gather_state, for the copy agent (gather_lock) */
	CUmodule agent_mod;
	CUfunction agent_fn;
	/*
	 * Small allocations of gdx_pinned_alloc (words that streams wait on
	 * live in them), while they exist: a stream may wait on a word in one
	 * with no question to the driver about it (cuda_stream_wait_value32).
	 */
	pthread_rwlock_t pin_lock;
	struct { uintptr_t base, end; } pins[PIN_KNOWN];
};

struct cu_stream {
	CUstream s;
	bool owned;
};

struct cu_event {
	CUevent e;
};

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))
#define CU(d, call, what) gdx_cu_status((d)->cu->call, what)
#define STREAM(st) (((struct cu_stream *)(st))->s)
#define EVENT(ev) (((struct cu_event *)(ev))->e)

/* ---- context ----------------------------------------------------------- */

static int enter(struct cu_dev *d, CUcontext *prev)
{
	CUcontext cur = NULL;
	CUresult r;

	*prev = NULL;
	if (!d->cu->cuCtxGetCurrent(&cur) && cur == d->ctx)
		return 0;
	r = d->cu->cuCtxSetCurrent(d->ctx);
	if (r)
		return gdx_cu_status(r, "cuCtxSetCurrent");
	*prev = cur;
	return 0;
}

static void leave(struct cu_dev *d, CUcontext prev)
{
	if (prev)
		d->cu->cuCtxSetCurrent(prev);
}

/* One driver call fn(...) inside enter()/leave(), as a gdx code. */
#define IN_CTX(d, fn, ...) ({						\
	CUcontext prev_;						\
	int ret_ = enter((d), &prev_);					\
									\
	if (!ret_) {							\
		ret_ = gdx_cu_status((d)->cu->fn(__VA_ARGS__), #fn);	\
		leave((d), prev_);					\
	}								\
	ret_;								\
})

/* ---- device ------------------------------------------------------------ */

static int cuda_count(void)
{
	return gdx_cu_load(NULL);
}

const char *gdx_cuda_load_error(void)
{
	return gdx_cu_load_error();
}

static int attr(struct cu_dev *d, CUdevice_attribute a)
{
	int v = 0;

	if (d->cu->cuDeviceGetAttribute(&v, a, d->dev))
		return 0;
	return v;
}

static int cuda_open(int ordinal, void **priv)
{
	const struct gdx_cu *cu;
	struct cu_dev *d;
	int ret = gdx_cu_load(&cu);

	if (ret <= 0)
		return ret ? ret : GDX_ENODEVICE;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cu = cu;
	d->ordinal = ordinal;
	ret = CU(d, cuDeviceGet(&d->dev, ordinal), "cuDeviceGet");
	if (ret)
		goto fail;
	/* Copies infer their direction from the pointers: that needs UVA. */
	if (!attr(d, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)) {
		GDX_ERR("cuda", "device %d has no unified addressing", ordinal);
		ret = -EOPNOTSUPP;
		goto fail;
	}
	ret = CU(d, cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain");
	if (ret)
		goto fail;
	d->pools = cu->cuMemAllocAsync && cu->cuMemFreeAsync &&
		   attr(d, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
	d->dmabuf = cu->cuMemGetHandleForAddressRange &&
		    attr(d, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
	d->gather_max = gdx_cfg_size("cuda.gather_max");
	if (!cu->cuModuleLoadData || !cu->cuModuleGetFunction || !cu->cuLaunchKernel ||
	    !cu->cuModuleUnload)
		d->gather_max = 0;
	pthread_mutex_init(&d->gather_lock, NULL);
	pthread_rwlock_init(&d->pin_lock, NULL);
	*priv = d;
	return 0;
fail:
	free(d);
	return ret;
}

static void cuda_close(void *priv)
{
	struct cu_dev *d = priv;
	CUcontext cur = NULL;

	if (d->gather_state > 0 && !d->cu->cuCtxGetCurrent(&cur) &&
	    !d->cu->cuCtxSetCurrent(d->ctx)) {
		d->cu->cuModuleUnload(d->gather_mod);
		d->cu->cuCtxSetCurrent(cur);
	}
	if (d->agent_state > 0 && !d->cu->cuCtxGetCurrent(&cur) &&
	    !d->cu->cuCtxSetCurrent(d->ctx)) {
		d->cu->cuModuleUnload(d->agent_mod);
		d->cu->cuCtxSetCurrent(cur);
	}
	/* Never leave a released context current on this thread. */
	if (!d->cu->cuCtxGetCurrent(&cur) && cur == d->ctx)
		d->cu->cuCtxSetCurrent(NULL);
	d->cu->cuDevicePrimaryCtxRelease(d->dev);
	pthread_mutex_destroy(&d->gather_lock);
	pthread_rwlock_destroy(&d->pin_lock);
	free(d);
}

static int read_numa_node(const char *bdf)
{
	char path[96], buf[16];
	FILE *f;
	int node = -1;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bdf);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fgets(buf, sizeof(buf), f))
		node = atoi(buf);
	fclose(f);
	return node < 0 ? -1 : node;
}

static int cuda_props(void *priv, struct gdx_device_props *p)
{
	struct cu_dev *d = priv;
	unsigned dom, bus, slot, fn;
	char bdf[32];
	size_t total = 0;
	int ret;

	ret = CU(d, cuDeviceGetName(p->model, (int)sizeof(p->model), d->dev), "cuDeviceGetName");
	if (ret)
		return ret;
	/* The driver prints upper-case hex and a wide domain; sysfs wants 0000:bb:dd.f. */
	if (!d->cu->cuDeviceGetPCIBusId(bdf, (int)sizeof(bdf), d->dev) &&
	    sscanf(bdf, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) == 4) {
		snprintf(p->pci_bdf, sizeof(p->pci_bdf), "%04x:%02x:%02x.%x",
			 dom & 0xffff, bus & 0xff, slot & 0x1f, fn & 0x7);
		p->numa_node = read_numa_node(p->pci_bdf);
	}
	if (!d->cu->cuDeviceTotalMem(&total, d->dev))
		p->total_mem = total;
	p->driver_version = d->cu->driver_version;
	p->cc_major = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
	p->cc_minor = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
	p->dmabuf_supported = d->dmabuf;
	p->gdr_supported = attr(d, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
	p->async_alloc_supported = d->pools;
	return 0;
}

/* ---- pointer queries --------------------------------------------------- */

/*
 * One cuPointerGetAttributes call answers everything but the mapped extent of
 * a cuMemMap range.  Booleans and ordinals are written as 32-bit values;
 * zero-initialised 64-bit slots read correctly whatever width the driver uses.
 * An address reserved with cuMemAddressReserve but not mapped is no CUDA
 * pointer to the driver (every attribute reads as for host memory), so it is
 * reported as host memory, which no device operation accepts either.
 */
/* cuMemGetAddressRange, whose refusal only means "no range here": true when it answered. */
static bool addr_range(struct cu_dev *d, const void *p, CUdeviceptr *base, size_t *size)
{
	gdx_device_calls_add(1);
	return !d->cu->cuMemGetAddressRange(base, size, DPTR(p));
}

enum { A_TYPE, A_ORDINAL, A_ID, A_MANAGED, A_START, A_SIZE, A_IPC, A_POOL, A_GDR, A_N };

static int query(struct cu_dev *d, const void *p, struct gdx_ptr_attrs *a)
{
	static const CUpointer_attribute which[A_N] = {
		[A_TYPE] = CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
		[A_ORDINAL] = CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
		[A_ID] = CU_POINTER_ATTRIBUTE_BUFFER_ID,
		[A_MANAGED] = CU_POINTER_ATTRIBUTE_IS_MANAGED,
		[A_START] = CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
		[A_SIZE] = CU_POINTER_ATTRIBUTE_RANGE_SIZE,
		[A_IPC] = CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
		[A_POOL] = CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
		[A_GDR] = CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
	};
	CUpointer_attribute attrs[A_N];
	uint64_t v[A_N] = { 0 };
	void *data[A_N];
	CUdeviceptr base = 0;
	size_t size = 0;
	uint32_t type;
	int ret;

	memcpy(attrs, which, sizeof(attrs));
	for (int i = 0; i < A_N; i++)
		data[i] = &v[i];
	ret = CU(d, cuPointerGetAttributes(A_N, attrs, data, DPTR(p)), "cuPointerGetAttributes");
	if (ret)
		return ret;
	type = (uint32_t)v[A_TYPE];
	a->buffer_id = v[A_ID];
	a->base = (void *)(uintptr_t)v[A_START];
	a->size = (size_t)v[A_SIZE];
	if ((uint32_t)v[A_MANAGED]) {
		a->kind = GDX_MEM_MANAGED;
		a->device_ordinal = (int32_t)v[A_ORDINAL];
	} else if (type == CU_MEMORYTYPE_DEVICE) {
		a->kind = GDX_MEM_DEVICE;
		a->device_ordinal = (int32_t)v[A_ORDINAL];
		/*
		 * RANGE_START/RANGE_SIZE name the reserved address range, which
		 * for cuMemMap is wider than the memory mapped into it; the
		 * mapped extent is what a NIC may register.  Allocations that are
		 * neither cuMemAlloc (legacy IPC capable) nor from a memory pool
		 * were mapped with cuMemMap.  For cuMemAlloc memory the range is
		 * the allocation, so the second driver call, on the path of every
		 * I/O that names a device buffer, is saved.
		 */
		a->is_vmm = !(uint32_t)v[A_IPC] && !v[A_POOL];
		/* Pool memory, and cuMemCreate memory without the flag, are not. */
		a->gdr_capable = (uint32_t)v[A_GDR] != 0;
		if (!(uint32_t)v[A_IPC] && addr_range(d, p, &base, &size) && size) {
			a->base = (void *)(uintptr_t)base;
			a->size = size;
		}
	} else if (type == CU_MEMORYTYPE_HOST) {
		a->kind = GDX_MEM_PINNED;
		a->device_ordinal = -1;
		if (!a->size && addr_range(d, p, &base, &size)) {
			a->base = (void *)(uintptr_t)base;
			a->size = size;
		}
	} else {
		a->kind = GDX_MEM_HOST;
		a->device_ordinal = -1;
		a->base = NULL;
		a->size = 0;
		a->buffer_id = 0;
	}
	return 0;
}

static int cuda_pointer_query(void *priv, const void *p, struct gdx_ptr_attrs *a)
{
	struct cu_dev *d = priv;
	CUcontext prev;
	int ret = enter(d, &prev);

	if (ret)
		return ret;
	ret = query(d, p, a);
	leave(d, prev);
	return ret;
}

/* ---- memory ------------------------------------------------------------ */

static int cuda_malloc(void *priv, size_t size, void **dptr)
{
	struct cu_dev *d = priv;
	CUdeviceptr p = 0;
	int ret = IN_CTX(d, cuMemAlloc, &p, size);

	if (!ret)
		*dptr = (void *)(uintptr_t)p;
	return ret;
}

/* Frees only what the matching allocator handed out, as the emulated device does. */
static int check_alloc(struct cu_dev *d, void *p, enum gdx_mem_kind kind)
{
	struct gdx_ptr_attrs a = { 0 };
	int ret = cuda_pointer_query(d, p, &a);

	if (ret)
		return ret;
	if (a.kind != kind || a.base != p)
		return GDX_EBADPTR;
	return 0;
}

static int cuda_free(void *priv, void *dptr)
{
	struct cu_dev *d = priv;
	int ret = check_alloc(d, dptr, GDX_MEM_DEVICE);

	return ret ? ret : IN_CTX(d, cuMemFree, DPTR(dptr));
}

static int cuda_malloc_async(void *priv, size_t size, void **dptr, void *stream)
{
	struct cu_dev *d = priv;
	CUdeviceptr p = 0;
	int ret;

	if (!d->pools)
		return -EOPNOTSUPP;
	ret = IN_CTX(d, cuMemAllocAsync, &p, size, STREAM(stream));
	if (!ret)
		*dptr = (void *)(uintptr_t)p;
	return ret;
}

static int cuda_free_async(void *priv, void *dptr, void *stream)
{
	struct cu_dev *d = priv;
	int ret;

	if (!d->pools)
		return -EOPNOTSUPP;
	ret = check_alloc(d, dptr, GDX_MEM_DEVICE);
	return ret ? ret : IN_CTX(d, cuMemFreeAsync, DPTR(dptr), STREAM(stream));
}

static int cuda_pinned_alloc(void *priv, size_t size, void **p)
{
	struct cu_dev *d = priv;
	/* Portable: usable from every context, like the emulated device's. */
	int ret = IN_CTX(d, cuMemHostAlloc, p, size, CU_MEMHOSTALLOC_PORTABLE);

	if (ret || size > PIN_KNOWN_MAX_SIZE)
		return ret;
	pthread_rwlock_wrlock(&d->pin_lock);
	for (unsigned i = 0; i < PIN_KNOWN; i++) {
		if (!d->pins[i].base) {
			d->pins[i].base = (uintptr_t)*p;
			d->pins[i].end = (uintptr_t)*p + size;
			break;
		}
	}
	pthread_rwlock_unlock(&d->pin_lock);
	return 0;
}

static int cuda_pinned_free(void *priv, void *p)
{
	struct cu_dev *d = priv;
	int ret = check_alloc(d, p, GDX_MEM_PINNED);

	if (ret)
		return ret;
	pthread_rwlock_wrlock(&d->pin_lock);
	for (unsigned i = 0; i < PIN_KNOWN; i++) {
		if (d->pins[i].base == (uintptr_t)p)
			d->pins[i].base = d->pins[i].end = 0;
	}
	pthread_rwlock_unlock(&d->pin_lock);
	return IN_CTX(d, cuMemFreeHost, p);
}

/* Whether [p, p + n) lies in a known pinned allocation (see cu_dev.pins). */
static bool pin_known(struct cu_dev *d, const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	bool found = false;

	pthread_rwlock_rdlock(&d->pin_lock);
	for (unsigned i = 0; i < PIN_KNOWN && !found; i++)
		found = a >= d->pins[i].base && a < d->pins[i].end && n <= d->pins[i].end - a;
	pthread_rwlock_unlock(&d->pin_lock);
	return found;
}

static int cuda_host_register(void *priv, void *p, size_t size, unsigned flags)
{
	struct cu_dev *d = priv;
	unsigned cf = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP;

	if (flags & GDX_HOST_REGISTER_READONLY)
		cf |= CU_MEMHOSTREGISTER_READ_ONLY;
	return IN_CTX(d, cuMemHostRegister, p, size, cf);
}

static int cuda_host_unregister(void *priv, void *p)
{
	return IN_CTX((struct cu_dev *)priv, cuMemHostUnregister, p);
}

static int cuda_export_dmabuf(void *priv, void *dptr, size_t size, int *fd, uint64_t *offset)
{
	struct cu_dev *d = priv;
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), start, end;
	struct gdx_ptr_attrs a = { 0 };
	CUcontext prev;
	int ret, h = -1;

	if (!d->dmabuf)
		return -EOPNOTSUPP;
	ret = enter(d, &prev);
	if (ret)
		return ret;
	ret = query(d, dptr, &a);
	if (ret)
		goto out;
	if (a.kind != GDX_MEM_DEVICE) {
		ret = GDX_EBADPTR;
		goto out;
	}
	/*
	 * The driver wants page-aligned bounds.  Widen the range to pages when
	 * that stays inside the allocation and tell the caller where dptr sits.
	 */
	start = GDX_ALIGN_DOWN((uintptr_t)dptr, pg);
	end = GDX_ALIGN_UP((uintptr_t)dptr + size, pg);
	if (end < (uintptr_t)dptr || start < (uintptr_t)a.base ||
	    end > (uintptr_t)a.base + a.size) {
		ret = -EINVAL;
		goto out;
	}
	ret = CU(d, cuMemGetHandleForAddressRange(&h, start, end - start,
						  CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0),
		 "cuMemGetHandleForAddressRange");
	if (!ret) {
		*fd = h;
		*offset = (uintptr_t)dptr - start;
	}
out:
	leave(d, prev);
	return ret;
}

/*
 * Peer memory: with nvidia_peermem (or the older nv_peer_mem) loaded, the NIC
 * driver pins GPU pages itself when ibv_reg_mr is handed a device pointer.
 */
static int cuda_nic_addr(void *priv, void *dptr, size_t size, void **va)
{
	struct cu_dev *d = priv;
	struct gdx_ptr_attrs a = { 0 };
	CUcontext prev;
	uintptr_t p = (uintptr_t)dptr;
	int ret;

	if (access("/sys/module/nvidia_peermem", F_OK) && access("/sys/module/nv_peer_mem", F_OK))
		return -EOPNOTSUPP;
	ret = enter(d, &prev);
	if (ret)
		return ret;
	ret = query(d, dptr, &a);
	leave(d, prev);
	if (ret)
		return ret;
	if (a.kind != GDX_MEM_DEVICE)
		return GDX_EBADPTR;
	if (p < (uintptr_t)a.base || size > a.size || p - (uintptr_t)a.base > a.size - size)
		return -EINVAL;
	if (!a.gdr_capable)
		return -EOPNOTSUPP;
	*va = dptr;
	return 0;
}

/* ---- copies ------------------------------------------------------------ */

/* A synchronous copy or fill (no stream) waits on the per-thread stream it went to. */
static int finish(struct cu_dev *d, int ret, void *stream, CUstream s)
{
	return ret || stream ? ret : IN_CTX(d, cuStreamSynchronize, s);
}

static int cuda_memcpy(void *priv, void *dst, const void *src, size_t n, void *stream)
{
	struct cu_dev *d = priv;
	CUstream s = stream ? STREAM(stream) : CU_STREAM_PER_THREAD;

	return finish(d, IN_CTX(d, cuMemcpyAsync, DPTR(dst), DPTR(src), n, s), stream, s);
}

/* Up to BATCH copies per driver call (the driver reads the arrays during the call). */
#define BATCH 64

static bool ranges_meet(CUdeviceptr a, size_t an, CUdeviceptr b, size_t bn)
{
	return a < b + bn && b < a + an;
}

/*
 * Whether copying n bytes from s to d depends on one of the k copies of a
 * run (writes where one of them reads or writes, or reads where one writes).
 * The copies of one cuMemcpyBatchAsync run in no particular order ("dependent
 * copies within a batch" are undefined behaviour), so such a copy starts the
 * next batch: the later of two overlapping pieces must land last, as one copy
 * after another would.
 */
static bool depends_on_run(const CUdeviceptr *dv, const CUdeviceptr *sv, const size_t *sz,
			   size_t k, CUdeviceptr d, CUdeviceptr s, size_t n)
{
	for (size_t i = 0; i < k; i++)
		if (ranges_meet(d, n, dv[i], sz[i]) || ranges_meet(d, n, sv[i], sz[i]) ||
		    ranges_meet(s, n, dv[i], sz[i]))
			return true;
	return false;
}

/* The copy engine: cuMemcpyBatchAsync where the driver has it, else one copy each. */
static int copy_engine(struct cu_dev *d, void *const *dsts, const void *const *srcs,
		       const size_t *sizes, size_t n, void *stream)
{
	CUmemcpyAttributes attr = { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM };
	CUdeviceptr dv[BATCH], sv[BATCH];
	size_t sz[BATCH], attr_idx = 0, fail;
	int ret = 0;

	if (!d->cu->cuMemcpyBatchAsync || n == 1) {
		for (size_t i = 0; !ret && i < n; i++)
			ret = CU(d, cuMemcpyAsync(DPTR(dsts[i]), DPTR(srcs[i]), sizes[i],
						  STREAM(stream)), "cuMemcpyAsync");
		return ret;
	}
	for (size_t at = 0; !ret && at < n;) {
		size_t k = 0;

		/* a run of independent copies (the first always is) */
		while (at + k < n && k < BATCH &&
		       !depends_on_run(dv, sv, sz, k, DPTR(dsts[at + k]), DPTR(srcs[at + k]),
				       sizes[at + k])) {
			dv[k] = DPTR(dsts[at + k]);
			sv[k] = DPTR(srcs[at + k]);
			sz[k] = sizes[at + k];
			k++;
		}
		fail = SIZE_MAX;
		ret = CU(d, cuMemcpyBatchAsync(dv, sv, sz, k, &attr, &attr_idx, 1, &fail,
					       STREAM(stream)), "cuMemcpyBatchAsync");
		at += k;
	}
	return ret;
}

/*
 * The gather kernel's parameter, as src/gpu/gather.cu declares it: the
 * driver copies it at launch, so the descriptors need no memory of their own.
 */
#define GATHER_MAX 64
#define GATHER_SPAN 8192
#define GATHER_THREADS 256

struct gather_args {
	uint32_t n;
	struct {
		uint64_t dst, src, len;
	} p[GATHER_MAX];
};
_Static_assert(sizeof(struct gather_args) == 1544, "the kernel's parameter is 1544 bytes");

#include "gpu/gather_ptx.h"

/* Loads the kernel into the primary context (current) on first use; false where it cannot. */
static bool gather_ready(struct cu_dev *d)
{
	int st = __atomic_load_n(&d->gather_state, __ATOMIC_ACQUIRE);

	if (st)
		return st > 0;
	pthread_mutex_lock(&d->gather_lock);
	st = d->gather_state;
	if (!st) {
		CUresult r = d->cu->cuModuleLoadData(&d->gather_mod, gdx_gather_ptx);

		if (!r) {
			r = d->cu->cuModuleGetFunction(&d->gather_fn, d->gather_mod, "gdx_gather");
			if (r)
				d->cu->cuModuleUnload(d->gather_mod);
		}
		st = r ? -1 : 1;
		if (r)
			GDX_WARN("cuda", "cuda:%d: the gather kernel did not load (CUDA error %d); "
				 "small copies of a batch go to the copy engine", d->ordinal, r);
		__atomic_store_n(&d->gather_state, st, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&d->gather_lock);
	return st > 0;
}

/*
 * What a pointer query said about an allocation, kept for the following
 * pieces of the same call only: an allocation freed after the call returns
 * must never be taken for a live one.
 */
struct span {
	uintptr_t base, end;
	int64_t dev_off;	/* device address minus host address (pinned memory) */
	bool ok;		/* the kernel may read (src) or write (dst) it */
};

#define SPAN_ATTRS_MAX 8

/*
 * Reads n attributes of p into v (each widened to 64 bits, zero where the
 * driver leaves it alone) and sets sp's range from the range attributes,
 * which the caller puts at index 3 (start) and 4 (size).  False, with sp
 * cleared, when the query fails.
 */
static bool query_span(struct cu_dev *d, const void *p, CUpointer_attribute *at, unsigned n,
		       uint64_t *v, struct span *sp)
{
	void *data[SPAN_ATTRS_MAX];

	for (unsigned i = 0; i < n; i++) {
		v[i] = 0;
		data[i] = &v[i];
	}
	*sp = (struct span){ 0 };
	gdx_device_calls_add(1);
	if (d->cu->cuPointerGetAttributes(n, at, data, DPTR(p)))
		return false;
	sp->base = (uintptr_t)v[3];
	sp->end = sp->base + (uintptr_t)v[4];
	return true;
}

/* Pinned host memory the device reads under UVA, and where the device sees it. */
static void query_src(struct cu_dev *d, const void *p, struct span *sp)
{
	CUpointer_attribute at[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
		CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
		CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE };
	uint64_t v[GDX_ARRAY_SIZE(at)];

	_Static_assert(GDX_ARRAY_SIZE(at) <= SPAN_ATTRS_MAX, "query_span takes at most 8");
	if (!query_span(d, p, at, GDX_ARRAY_SIZE(at), v, sp))
		return;
	sp->dev_off = (int64_t)(v[2] - (uintptr_t)p);
	sp->ok = (uint32_t)v[0] == CU_MEMORYTYPE_HOST && !(uint32_t)v[1] && v[2] && v[4];
}

/*
 * Device memory of this device from cuMemAlloc or a pool.  cuMemMap memory
 * stays on the copy engine: its range attributes name the reservation, which
 * may hold unmapped holes or mappings this device has no access to, where a
 * copy fails cleanly and a kernel would fault the context.
 */
static void query_dst(struct cu_dev *d, const void *p, struct span *sp)
{
	CUpointer_attribute at[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
		CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
		CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
		CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
		CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE };
	uint64_t v[GDX_ARRAY_SIZE(at)];

	_Static_assert(GDX_ARRAY_SIZE(at) <= SPAN_ATTRS_MAX, "query_span takes at most 8");
	if (!query_span(d, p, at, GDX_ARRAY_SIZE(at), v, sp))
		return;
	sp->ok = (uint32_t)v[0] == CU_MEMORYTYPE_DEVICE && !(uint32_t)v[1] &&
		 (int32_t)v[2] == d->ordinal && v[4] && ((uint32_t)v[5] || v[6]);
}

static bool inside(const struct span *sp, const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;

	return sp->end && a >= sp->base && a < sp->end && n <= sp->end - a;
}

/* Whether the kernel may copy this piece; *dev_src is where it reads. */
static bool gatherable(struct cu_dev *d, void *dst, const void *src, size_t n,
		       struct span *ss, struct span *ds, uint64_t *dev_src)
{
	if (n > d->gather_max)
		return false;
	/*
	 * The kernel copies with 16-byte vectors only between aligned ends, byte
	 * by byte otherwise: a larger unaligned piece (a tensor slice at an odd
	 * offset) goes to the copy engine, which copies any alignment at its
	 * rate.  Under 256 bytes it is one pass of the block's threads either way.
	 */
	bool bytewise_ok = n < 256;

	if (!bytewise_ok && ((uintptr_t)dst & 15))
		return false;
	if (!inside(ss, src, 1))
		query_src(d, src, ss);
	if (!ss->ok || !inside(ss, src, n))
		return false;
	if (!inside(ds, dst, 1))
		query_dst(d, dst, ds);
	if (!ds->ok || !inside(ds, dst, n))
		return false;
	*dev_src = (uint64_t)((int64_t)(uintptr_t)src + ss->dev_off);
	return bytewise_ok || !(*dev_src & 15);
}

/*
 * The blocks of one launch run in no order: a piece whose destination
 * overlaps one already in the launch goes into the next, so that the later
 * copy still lands last.  Sources need no such check: the kernel reads only
 * pinned host memory and writes only device memory, which never alias.
 */
static bool overlaps_run(const struct gather_args *a, const void *dst, size_t n)
{
	uint64_t lo = DPTR(dst), hi = lo + n;

	for (uint32_t i = 0; i < a->n; i++)
		if (lo < a->p[i].dst + a->p[i].len && a->p[i].dst < hi)
			return true;
	return false;
}

static int gather_launch(struct cu_dev *d, struct gather_args *a, size_t maxlen, void *stream)
{
	void *params[] = { a };
	unsigned gy = (unsigned)((maxlen + GATHER_SPAN - 1) / GATHER_SPAN);

	int ret = CU(d, cuLaunchKernel(d->gather_fn, a->n, gy, 1, GATHER_THREADS, 1, 1, 0,
					STREAM(stream), params, NULL), "cuLaunchKernel(gdx_gather)");

	/* once per device, so a log shows which path batches took */
	if (!ret && __atomic_load_n(&d->gather_state, __ATOMIC_RELAXED) == 1 &&
	    __atomic_exchange_n(&d->gather_state, 2, __ATOMIC_RELAXED) == 1)
		GDX_INFO("cuda", "cuda:%d: first gather launch, %u pieces", d->ordinal, a->n);
	return ret;
}

/*
 * Runs of pieces the kernel may copy go out in one launch each (up to
 * GATHER_MAX pieces with disjoint destinations), the rest in runs to the
 * copy engine; either way in the order given, on one stream, so they order
 * as one copy after another would.
 */
static int cuda_memcpy_batch(void *priv, void *const *dsts, const void *const *srcs,
			     const size_t *sizes, size_t n, void *stream)
{
	struct cu_dev *d = priv;
	struct span ss = { 0 }, ds = { 0 };
	struct gather_args a;
	uint64_t dev_src;
	size_t maxlen;
	CUcontext prev;
	bool gather;
	int ret;

	ret = enter(d, &prev);
	if (ret)
		return ret;
	gather = d->gather_max && gather_ready(d);
	for (size_t at = 0; !ret && at < n;) {
		size_t k = 0;

		a.n = 0;
		maxlen = 0;
		while (gather && at + k < n && a.n < GATHER_MAX &&
		       !overlaps_run(&a, dsts[at + k], sizes[at + k]) &&
		       gatherable(d, dsts[at + k], srcs[at + k], sizes[at + k], &ss, &ds,
				  &dev_src)) {
			a.p[a.n].dst = DPTR(dsts[at + k]);
			a.p[a.n].src = dev_src;
			a.p[a.n++].len = sizes[at + k];
			maxlen = GDX_MAX(maxlen, sizes[at + k]);
			k++;
		}
		if (k) {
			ret = gather_launch(d, &a, maxlen, stream);
			at += k;
			continue;
		}
		/* the piece just refused, and those after it the kernel cannot take */
		k = 1;
		while (at + k < n && k < BATCH &&
		       !(gather && gatherable(d, dsts[at + k], srcs[at + k], sizes[at + k], &ss,
					      &ds, &dev_src)))
			k++;
		ret = copy_engine(d, dsts + at, srcs + at, sizes + at, k, stream);
		at += k;
	}
	leave(d, prev);
	return ret;
}

static int cuda_memset(void *priv, void *dst, int v, size_t n, void *stream)
{
	struct cu_dev *d = priv;
	CUstream s = stream ? STREAM(stream) : CU_STREAM_PER_THREAD;

	return finish(d, IN_CTX(d, cuMemsetD8Async, DPTR(dst), (unsigned char)v, n, s), stream, s);
}

/* ---- streams ----------------------------------------------------------- */

static int cuda_stream_create(void *priv, void *stream, void *native)
{
	struct cu_dev *d = priv;
	struct cu_stream *st = stream;
	CUcontext prev, owner = NULL;
	int ret = enter(d, &prev);

	if (ret)
		return ret;
	if (native) {
		/* The app's stream must live in this device's primary context. */
		st->s = native;
		st->owned = false;
		ret = CU(d, cuStreamGetCtx(st->s, &owner), "cuStreamGetCtx");
		if (!ret && owner != d->ctx) {
			GDX_DBG("cuda", "stream %p belongs to another context than cuda:%d's "
				"primary one", native, d->ordinal);
			ret = -EINVAL;
		}
	} else {
		/* Non-blocking: never serialised against the legacy NULL stream. */
		st->owned = true;
		ret = CU(d, cuStreamCreate(&st->s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	}
	leave(d, prev);
	return ret;
}

static int cuda_stream_destroy(void *priv, void *stream)
{
	struct cu_dev *d = priv;
	struct cu_stream *st = stream;
	CUcontext prev;
	int ret, ret2;

	if (!st->owned)
		return 0;
	ret = enter(d, &prev);
	if (ret)
		return ret;
	ret = CU(d, cuStreamSynchronize(st->s), "cuStreamSynchronize");
	ret2 = CU(d, cuStreamDestroy(st->s), "cuStreamDestroy");
	leave(d, prev);
	return ret ? ret : ret2;
}

static int cuda_stream_synchronize(void *priv, void *stream)
{
	return IN_CTX((struct cu_dev *)priv, cuStreamSynchronize, STREAM(stream));
}

static int cuda_stream_query(void *priv, void *stream)
{
	return IN_CTX((struct cu_dev *)priv, cuStreamQuery, STREAM(stream));
}

static void *cuda_stream_native(void *priv, void *stream)
{
	(void)priv;
	return STREAM(stream);
}

static int cuda_launch_host_func(void *priv, void *stream, gdx_host_fn fn, void *arg)
{
	return IN_CTX((struct cu_dev *)priv, cuLaunchHostFunc, STREAM(stream), fn, arg);
}

/*
 * Where the device sees a word of pinned memory; GDX_EBADPTR outside it.
 * Memory from cuMemHostAlloc has the same address on the device as on the
 * host under unified addressing (which cuda_open requires).  Any other word
 * is looked up, which also refuses one outside pinned memory.
 */
static int pinned_word(struct cu_dev *d, const uint32_t *addr, CUdeviceptr *dp)
{
	*dp = DPTR(addr);
	if (pin_known(d, addr, sizeof(*addr)))
		return 0;
	return CU(d, cuMemHostGetDevicePointer(dp, (void *)addr, 0),
		  "cuMemHostGetDevicePointer") ? GDX_EBADPTR : 0;
}

static int cuda_stream_wait_value32(void *priv, void *stream, const uint32_t *addr,
				    uint32_t value)
{
	struct cu_dev *d = priv;
	CUdeviceptr dp;
	CUcontext prev;
	int ret = enter(d, &prev);

	if (ret)
		return ret;
	ret = pinned_word(d, addr, &dp);
	if (!ret)
		ret = CU(d, cuStreamWaitValue32(STREAM(stream), dp, value,
						CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32");
	leave(d, prev);
	return ret;
}

/* Flags 0: the store waits for the stream's earlier writes to be visible (a fence). */
static int cuda_stream_write_value32(void *priv, void *stream, uint32_t *addr, uint32_t value)
{
	struct cu_dev *d = priv;
	CUdeviceptr dp;
	CUcontext prev;
	int ret;

	if (!d->cu->cuStreamWriteValue32)
		return -EOPNOTSUPP;
	ret = enter(d, &prev);
	if (ret)
		return ret;
	ret = pinned_word(d, addr, &dp);
	if (!ret)
		ret = CU(d, cuStreamWriteValue32(STREAM(stream), dp, value, 0),
			 "cuStreamWriteValue32");
	leave(d, prev);
	return ret;
}

static int cuda_stream_wait_event(void *priv, void *stream, void *event)
{
	return IN_CTX((struct cu_dev *)priv, cuStreamWaitEvent, STREAM(stream), EVENT(event), 0);
}

/* ---- events ------------------------------------------------------------ */

static int cuda_event_create(void *priv, void *event, unsigned flags)
{
	/* Timing costs a timestamp write per record: only where asked for. */
	return IN_CTX((struct cu_dev *)priv, cuEventCreate, &EVENT(event),
		      (flags & GDX_EVENT_TIMING) ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
}

static int cuda_event_destroy(void *priv, void *event)
{
	return IN_CTX((struct cu_dev *)priv, cuEventDestroy, EVENT(event));
}

static int cuda_event_record(void *priv, void *event, void *stream)
{
	return IN_CTX((struct cu_dev *)priv, cuEventRecord, EVENT(event), STREAM(stream));
}

static int cuda_event_synchronize(void *priv, void *event)
{
	return IN_CTX((struct cu_dev *)priv, cuEventSynchronize, EVENT(event));
}

static int cuda_event_query(void *priv, void *event)
{
	return IN_CTX((struct cu_dev *)priv, cuEventQuery, EVENT(event));
}

static int cuda_event_elapsed_ms(void *priv, void *start, void *end, float *ms)
{
	struct cu_dev *d = priv;
	CUcontext prev;
	CUresult r;
	int ret = enter(d, &prev);

	if (ret)
		return ret;
	r = d->cu->cuEventElapsedTime(ms, EVENT(start), EVENT(end));
	/* An event never recorded is a bad argument, as on the emulated device. */
	ret = r == CUDA_ERROR_INVALID_HANDLE ? -EINVAL : gdx_cu_status(r, "cuEventElapsedTime");
	leave(d, prev);
	return ret;
}

#include "gpu/agent_ptx.h"

/*
 * The copy agent's kernel (src/gpu/agent.cu) loaded into the primary context
 * (current) on first use: 0, or why not (it needs sm_70 for acquire loads,
 * release stores and nanosleep).
 */
static int agent_ready(struct cu_dev *d)
{
	int st = __atomic_load_n(&d->agent_state, __ATOMIC_ACQUIRE);

	if (st)
		return st > 0 ? 0 : -EOPNOTSUPP;
	pthread_mutex_lock(&d->gather_lock);
	st = d->agent_state;
	if (!st) {
		CUresult r = CUDA_ERROR_NOT_SUPPORTED;

		if (d->cu->cuModuleLoadData && d->cu->cuModuleGetFunction &&
		    d->cu->cuLaunchKernel && d->cu->cuModuleUnload &&
		    attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 7)
			r = d->cu->cuModuleLoadData(&d->agent_mod, gdx_agent_ptx);
		if (!r) {
			r = d->cu->cuModuleGetFunction(&d->agent_fn, d->agent_mod,
						       "gdx_copy_agent");
			if (r)
				d->cu->cuModuleUnload(d->agent_mod);
		}
		st = r ? -1 : 1;
		if (r)
			GDX_WARN("cuda", "cuda:%d: the copy agent kernel did not load (CUDA error %d)",
				 d->ordinal, r);
		__atomic_store_n(&d->agent_state, st, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&d->gather_lock);
	return st > 0 ? 0 : -EOPNOTSUPP;
}

/* One block: warp 0 polls, two groups of 256 threads copy (src/gpu/agent.cu, AG_THREADS). */
#define AGENT_THREADS 544
static int cuda_agent_launch(void *priv, void *stream, const struct gdx_agent_args *a)
{
	struct cu_dev *d = priv;
	void *params[] = { (void *)a };
	CUcontext prev;
	int ret = enter(d, &prev);

	if (ret)
		return ret;
	ret = agent_ready(d);
	if (!ret && stream)
		ret = CU(d, cuLaunchKernel(d->agent_fn, 1, 1, 1, AGENT_THREADS, 1, 1, 0, STREAM(stream),
					   params, NULL), "cuLaunchKernel(gdx_copy_agent)");
	leave(d, prev);
	return ret;
}

const struct gdx_device_ops gdx_cuda_ops = {
	.kind = "cuda",
	.stream_priv_size = sizeof(struct cu_stream),
	.event_priv_size = sizeof(struct cu_event),
	.count = cuda_count,
	.open = cuda_open,
	.close = cuda_close,
	.props = cuda_props,
	.malloc = cuda_malloc,
	.free = cuda_free,
	.malloc_async = cuda_malloc_async,
	.free_async = cuda_free_async,
	.pinned_alloc = cuda_pinned_alloc,
	.pinned_free = cuda_pinned_free,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.pointer_query = cuda_pointer_query,
	.export_dmabuf = cuda_export_dmabuf,
	.nic_addr = cuda_nic_addr,
	.memcpy = cuda_memcpy,
	.memset = cuda_memset,
	.memcpy_batch = cuda_memcpy_batch,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_synchronize = cuda_stream_synchronize,
	.stream_query = cuda_stream_query,
	.stream_native = cuda_stream_native,
	.launch_host_func = cuda_launch_host_func,
	.stream_wait_event = cuda_stream_wait_event,
	.stream_wait_value32 = cuda_stream_wait_value32,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_synchronize = cuda_event_synchronize,
	.event_query = cuda_event_query,
	.event_elapsed_ms = cuda_event_elapsed_ms,
	.stream_write_value32 = cuda_stream_write_value32,
	.agent_launch = cuda_agent_launch,
};
