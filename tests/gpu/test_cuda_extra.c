/* SPDX-License-Identifier: MIT */
/*
 * What only a GPU can show: pointer queries on memory gdx did not allocate
 * itself (cuMemMap ranges, managed memory), on stream-ordered allocations,
 * dma-buf export of a cuMemMap range, and the device's properties (the device
 * suite, test_device, covers dma-buf export of gdx_device_malloc memory).  Exits 77
 * where the cuda device cannot be opened.  Prints the driver's raw answers
 * for each kind of memory, so a run on a new driver documents what it says.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>

#include "shim/cuda_api.h"

static struct gdx_device *dev;
static const struct gdx_cu *cu;

static int setup(void **state)
{
	(void)state;
	return gdx_device_open("cuda", &dev);
}

static int teardown(void **state)
{
	(void)state;
	gdx_device_close(dev);
	return 0;
}

/* The driver's own words about p, one attribute at a time. */
static void dump(const char *what, const void *p)
{
	static const struct { CUpointer_attribute a; const char *name; } attrs[] = {
		{ CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "type" },
		{ CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, "ordinal" },
		{ CU_POINTER_ATTRIBUTE_BUFFER_ID, "buffer_id" },
		{ CU_POINTER_ATTRIBUTE_IS_MANAGED, "managed" },
		{ CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, "range_start" },
		{ CU_POINTER_ATTRIBUTE_RANGE_SIZE, "range_size" },
		{ CU_POINTER_ATTRIBUTE_MAPPED, "mapped" },
		{ CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, "legacy_ipc" },
		{ CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, "gdr" },
		{ CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, "mempool" },
		{ CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, "mapping_base" },
		{ CU_POINTER_ATTRIBUTE_MAPPING_SIZE, "mapping_size" },
	};
	struct gdx_ptr_attrs a;
	CUdeviceptr base = 0;
	size_t size = 0;
	int ret;

	printf("# %-14s %p:", what, p);
	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
		uint64_t v = 0;
		CUresult r = cu->cuPointerGetAttribute(&v, attrs[i].a, (CUdeviceptr)(uintptr_t)p);

		if (r)
			printf(" %s=err%d", attrs[i].name, r);
		else
			printf(" %s=%#llx", attrs[i].name, (unsigned long long)v);
	}
	ret = cu->cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)p);
	printf(" addr_range=%d:%#llx+%#zx\n", ret, base, size);
	ret = gdx_pointer_query(dev, p, &a);
	printf("#   gdx: ret=%d kind=%s ordinal=%d base=%p size=%#zx id=%llu vmm=%d\n", ret,
	       gdx_mem_kind_name(a.kind), a.device_ordinal, a.base, a.size,
	       (unsigned long long)a.buffer_id, a.is_vmm);
}

static int raw_gdr(const void *p)
{
	uint64_t v = 0;

	assert_int_equal(cu->cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
						   (CUdeviceptr)(uintptr_t)p), 0);
	return v != 0;
}

static void check_round_trip(void *d, size_t n)
{
	unsigned char *h = malloc(n), *back = calloc(1, n);

	t_fill(h, n, n);
	assert_int_equal(gdx_memcpy(dev, d, h, n), 0);
	assert_int_equal(gdx_memcpy(dev, back, d, n), 0);
	assert_memory_equal(back, h, n);
	free(h);
	free(back);
}

static void plain_kinds(void **state)
{
	struct gdx_ptr_attrs a;
	char *host = malloc(1 << 16), small[64];
	void *d, *pin, *managed;
	CUdeviceptr m;

	(void)state;
	assert_int_equal(gdx_device_malloc(dev, 3 << 20, &d), 0);
	assert_int_equal(gdx_pinned_alloc(dev, 1 << 16, &pin), 0);
	assert_int_equal(gdx_host_register(dev, host, 1 << 16, GDX_HOST_REGISTER_READONLY), 0);
	assert_int_equal(cu->cuMemAllocManaged(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL), 0);
	managed = (void *)(uintptr_t)m;
	dump("cuMemAlloc", (char *)d + 100);
	dump("cuMemHostAlloc", (char *)pin + 100);
	dump("registered", host + 100);
	dump("managed", (char *)managed + 100);
	dump("malloc", &a);

	assert_int_equal(gdx_pointer_query(dev, (char *)d + (2 << 20), &a), 0);
	assert_int_equal(a.kind, GDX_MEM_DEVICE);
	assert_ptr_equal(a.base, d);
	assert_int_equal(a.size, 3 << 20);
	assert_int_equal(a.is_vmm, 0);
	assert_int_equal(a.gdr_capable, raw_gdr(d));

	assert_int_equal(gdx_pointer_query(dev, host + 100, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_PINNED);
	assert_ptr_equal(a.base, host);
	assert_int_equal(a.size, 1 << 16);
	assert_int_equal(a.device_ordinal, -1);

	assert_int_equal(gdx_pointer_query(dev, (char *)managed + 100, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_MANAGED);
	assert_ptr_equal(a.base, managed);

	/*
	 * The driver bounds copies and fills by the size asked for, not by the
	 * larger mapping behind it (0x400000 here).
	 */
	assert_int_equal(gdx_memcpy(dev, small, (char *)d + (3 << 20) - 10, sizeof(small)), -EINVAL);
	assert_int_equal(gdx_memset(dev, (char *)d + (3 << 20) - 10, 0, sizeof(small)), -EINVAL);

	/* The read-only registration: the device may read it (H2D) ... */
	check_round_trip(d, 1 << 16);
	assert_int_equal(gdx_memcpy(dev, d, host, 1 << 16), 0);
	/* ... and registering it again is refused. */
	assert_int_equal(gdx_host_register(dev, host, 4096, 0), -EEXIST);
	/* Freeing with the wrong allocator is refused before the driver sees it. */
	assert_int_equal(gdx_pinned_free(dev, d), GDX_EBADPTR);
	assert_int_equal(gdx_device_free(dev, pin), GDX_EBADPTR);
	assert_int_equal(gdx_device_free(dev, (char *)d + 4096), GDX_EBADPTR);

	assert_int_equal(cu->cuMemFree(m), 0);
	assert_int_equal(gdx_host_unregister(dev, host), 0);
	assert_int_equal(gdx_pinned_free(dev, pin), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	free(host);
}

/* Device memory for cuMemCreate; GPUDirect RDMA capable where asked and possible. */
static void vmm_prop(CUmemAllocationProp *prop, bool gdr)
{
	CUdevice cd;
	int v = 0;

	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = gdx_device_ordinal(dev);
	assert_int_equal(cu->cuDeviceGet(&cd, prop->location.id), 0);
	if (gdr)
		cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
					 cd);
	prop->allocFlags.gpuDirectRDMACapable = v ? 1 : 0;
}

/*
 * A reservation of six granules with two separate two-granule mappings in its
 * middle and an unmapped granule at each end: each mapping is its own
 * allocation, and the unmapped ends are no memory at all.
 */
static void vmm_ranges(void **state)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc acc = { 0 };
	CUmemGenericAllocationHandle h1, h2;
	struct gdx_ptr_attrs a, b;
	CUdeviceptr va;
	size_t g = 0, total;
	char *m1, *m2;

	(void)state;
	if (!cu->cuMemCreate || !cu->cuMemMap)
		skip();
	vmm_prop(&prop, false);
	assert_int_equal(cu->cuMemGetAllocationGranularity(&g, &prop,
							   CU_MEM_ALLOC_GRANULARITY_MINIMUM), 0);
	total = 6 * g;
	assert_int_equal(cu->cuMemAddressReserve(&va, total, 0, 0, 0), 0);
	assert_int_equal(cu->cuMemCreate(&h1, 2 * g, &prop, 0), 0);
	assert_int_equal(cu->cuMemCreate(&h2, 2 * g, &prop, 0), 0);
	m1 = (char *)(uintptr_t)(va + g);
	m2 = m1 + 2 * g;
	assert_int_equal(cu->cuMemMap((CUdeviceptr)(uintptr_t)m1, 2 * g, 0, h1, 0), 0);
	assert_int_equal(cu->cuMemMap((CUdeviceptr)(uintptr_t)m2, 2 * g, 0, h2, 0), 0);
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	assert_int_equal(cu->cuMemSetAccess((CUdeviceptr)(uintptr_t)m1, 4 * g, &acc, 1), 0);

	dump("vmm map 1", m1 + 100);
	dump("vmm map 2", m2 + g);
	dump("vmm unmapped", (void *)(uintptr_t)(va + 100));

	assert_int_equal(gdx_pointer_query(dev, m1 + 100, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_DEVICE);
	assert_int_equal(a.device_ordinal, gdx_device_ordinal(dev));
	assert_int_equal(a.is_vmm, 1);
	assert_ptr_equal(a.base, m1);
	assert_int_equal(a.size, 2 * g);
	assert_int_equal(gdx_pointer_query(dev, m2 + g, &b), 0);
	assert_int_equal(b.is_vmm, 1);
	assert_ptr_equal(b.base, m2);
	assert_int_equal(b.size, 2 * g);
	assert_true(a.buffer_id != b.buffer_id || a.buffer_id == 0);
	/* The driver tells a reserved but unmapped address from no CUDA memory not at all. */
	assert_int_equal(gdx_pointer_query(dev, (void *)(uintptr_t)(va + 100), &b), 0);
	assert_int_equal(b.kind, GDX_MEM_HOST);
	/* Without the flag at cuMemCreate, VMM memory is not for GPUDirect RDMA. */
	assert_int_equal(a.gdr_capable, raw_gdr(m1));

	/* Mapped memory is ordinary device memory for copies. */
	check_round_trip(m1, 2 * g);
	check_round_trip(m2 + 4096, g);
	/* gdx_device_free is for gdx_device_malloc memory only: the driver refuses. */
	assert_int_equal(gdx_device_free(dev, m1), -EINVAL);

	assert_int_equal(cu->cuMemUnmap((CUdeviceptr)(uintptr_t)m1, 2 * g), 0);
	assert_int_equal(cu->cuMemUnmap((CUdeviceptr)(uintptr_t)m2, 2 * g), 0);
	assert_int_equal(cu->cuMemRelease(h1), 0);
	assert_int_equal(cu->cuMemRelease(h2), 0);
	assert_int_equal(cu->cuMemAddressFree(va, total), 0);
}

static void stream_ordered_ranges(void **state)
{
	struct gdx_device_props p;
	struct gdx_ptr_attrs a, b;
	struct gdx_stream *s;
	void *d1, *d2;

	(void)state;
	assert_int_equal(gdx_device_props(dev, &p), 0);
	if (!p.async_alloc_supported)
		skip();
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_device_malloc_async(dev, 300000, &d1, s), 0);
	assert_int_equal(gdx_device_malloc_async(dev, 300000, &d2, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	dump("cuMemAllocAsync", (char *)d1 + 100);
	dump("cuMemAllocAsync", (char *)d2 + 299999);

	/* Each allocation is its own range, though both come from one pool mapping. */
	assert_int_equal(gdx_pointer_query(dev, (char *)d1 + 100, &a), 0);
	assert_int_equal(a.kind, GDX_MEM_DEVICE);
	assert_ptr_equal(a.base, d1);
	assert_true(a.size >= 300000 && a.size < (4 << 20));
	assert_int_equal(a.is_vmm, 0);
	assert_int_equal(a.gdr_capable, raw_gdr(d1));
	assert_int_equal(gdx_pointer_query(dev, (char *)d2 + 299999, &b), 0);
	assert_ptr_equal(b.base, d2);
	assert_true(a.buffer_id != b.buffer_id);
	check_round_trip(d2, 300000);

	assert_int_equal(gdx_device_free_async(dev, d1, s), 0);
	assert_int_equal(gdx_device_free_async(dev, d2, s), 0);
	assert_int_equal(gdx_stream_destroy(s), 0);
}

/* A fully mapped cuMemMap reservation exports as one dma-buf. */
static void vmm_dmabuf(void **state)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc acc = { 0 };
	CUmemGenericAllocationHandle h;
	struct gdx_device_props p;
	struct gdx_ptr_attrs a;
	uint64_t off = 99;
	CUdeviceptr va;
	size_t g = 0;
	int fd = -1;

	(void)state;
	assert_int_equal(gdx_device_props(dev, &p), 0);
	if (!p.dmabuf_supported || !cu->cuMemCreate)
		skip();
	vmm_prop(&prop, true);
	assert_int_equal(cu->cuMemGetAllocationGranularity(&g, &prop,
							   CU_MEM_ALLOC_GRANULARITY_MINIMUM), 0);
	assert_int_equal(cu->cuMemAddressReserve(&va, 2 * g, 0, 0, 0), 0);
	assert_int_equal(cu->cuMemCreate(&h, 2 * g, &prop, 0), 0);
	assert_int_equal(cu->cuMemMap(va, 2 * g, 0, h, 0), 0);
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	assert_int_equal(cu->cuMemSetAccess(va, 2 * g, &acc, 1), 0);
	dump("vmm full", (void *)(uintptr_t)(va + 100));

	assert_int_equal(gdx_pointer_query(dev, (void *)(uintptr_t)(va + 100), &a), 0);
	assert_int_equal(a.is_vmm, 1);
	assert_int_equal(a.gdr_capable, prop.allocFlags.gpuDirectRDMACapable);
	assert_int_equal(gdx_device_export_dmabuf(dev, (void *)(uintptr_t)(va + g), g, &fd, &off),
			 0);
	assert_int_equal(off, 0);
	assert_int_equal(lseek(fd, 0, SEEK_END), (off_t)g);
	close(fd);

	assert_int_equal(cu->cuMemUnmap(va, 2 * g), 0);
	assert_int_equal(cu->cuMemRelease(h), 0);
	assert_int_equal(cu->cuMemAddressFree(va, 2 * g), 0);
}

/*
 * gdx puts back the context an application had current, refuses streams of
 * other contexts, and leaves its primary context current on a thread that had
 * none.
 */
static void foreign_context(void **state)
{
	CUcontext mine = NULL, cur = NULL, primary = NULL;
	struct gdx_stream *w;
	unsigned char h[256], back[256];
	CUstream foreign;
	CUdevice cd;
	void *d;

	(void)state;
	if (!cu->cuCtxCreate || !cu->cuCtxDestroy)
		skip();
	assert_int_equal(gdx_device_malloc(dev, sizeof(h), &d), 0);
	assert_int_equal(cu->cuCtxGetCurrent(&primary), 0);
	assert_non_null(primary);
	assert_int_equal(cu->cuDeviceGet(&cd, gdx_device_ordinal(dev)), 0);
	assert_int_equal(cu->cuCtxCreate(&mine, 0, cd), 0);
	assert_int_equal(cu->cuCtxSetCurrent(mine), 0);
	assert_int_equal(cu->cuStreamCreate(&foreign, CU_STREAM_NON_BLOCKING), 0);

	t_fill(h, sizeof(h), 5);
	assert_int_equal(gdx_memcpy(dev, d, h, sizeof(h)), 0);
	assert_int_equal(gdx_memcpy(dev, back, d, sizeof(back)), 0);
	assert_memory_equal(back, h, sizeof(h));
	assert_int_equal(cu->cuCtxGetCurrent(&cur), 0);
	assert_ptr_equal(cur, mine);
	assert_int_equal(gdx_stream_wrap(dev, foreign, &w), -EINVAL);
	assert_int_equal(cu->cuCtxGetCurrent(&cur), 0);
	assert_ptr_equal(cur, mine);

	assert_int_equal(cu->cuStreamDestroy(foreign), 0);
	assert_int_equal(cu->cuCtxDestroy(mine), 0);
	assert_int_equal(cu->cuCtxSetCurrent(NULL), 0);
	assert_int_equal(gdx_device_free(dev, d), 0);
	assert_int_equal(cu->cuCtxGetCurrent(&cur), 0);
	assert_ptr_equal(cur, primary);
}

static void props(void **state)
{
	struct gdx_device_props p;
	unsigned dom, bus, slot, fn;
	char path[128], tail;
	int node = -1;
	FILE *f;

	(void)state;
	assert_int_equal(gdx_device_props(dev, &p), 0);
	printf("# %s: %s pci %s numa %d mem %llu MiB driver %d cc %d.%d dmabuf %d gdr %d "
	       "pools %d\n", gdx_device_name(dev), p.model, p.pci_bdf, p.numa_node,
	       (unsigned long long)(p.total_mem >> 20), p.driver_version, p.cc_major, p.cc_minor,
	       p.dmabuf_supported, p.gdr_supported, p.async_alloc_supported);
	assert_true(p.model[0] != 0);
	assert_int_equal(sscanf(p.pci_bdf, "%4x:%2x:%2x.%1x%c", &dom, &bus, &slot, &fn, &tail), 4);
	for (const char *c = p.pci_bdf; *c; c++)
		assert_false(*c >= 'A' && *c <= 'F');
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", p.pci_bdf);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%d", &node), 1);
	fclose(f);
	assert_int_equal(p.numa_node, node < 0 ? -1 : node);
	assert_true(p.total_mem > (1ull << 30));
	assert_true(p.driver_version >= 11030);
	assert_true(p.cc_major >= 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(props),
		cmocka_unit_test(plain_kinds),
		cmocka_unit_test(vmm_ranges),
		cmocka_unit_test(stream_ordered_ranges),
		cmocka_unit_test(vmm_dmabuf),
		cmocka_unit_test(foreign_context),
	};
	int ret = gdx_device_count("cuda");

	if (ret <= 0) {
		printf("# no cuda device: %s\n", ret < 0 ? gdx_strerror(ret) : "0 devices");
		return T_EXIT_SKIP;
	}
	ret = gdx_cu_load(&cu);
	if (ret <= 0)
		return T_EXIT_SKIP;
	return cmocka_run_group_tests(tests, setup, teardown);
}
