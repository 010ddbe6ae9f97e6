/* SPDX-License-Identifier: MIT */
/*
 * libcuda.so.1 loaded at run time.  Entry points come from cuGetProcAddress
 * (the driver then hands out the ABI of the CUDA version asked for, so gdx
 * never has to spell _v2 names); drivers older than 11.3 lack it and are read
 * with dlsym under the versioned symbol names instead.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "gpu/device.h"
#include "shim/cuda_api.h"

typedef CUresult (*get_proc_v2_fn)(const char *sym, void **pfn, int ver, uint64_t flags,
				   int *status);
typedef CUresult (*get_proc_v1_fn)(const char *sym, void **pfn, int ver, uint64_t flags);

struct entry {
	const char *name;	/* as cuGetProcAddress knows it */
	const char *abi;	/* the exported symbol, for drivers without it */
	size_t off;
	int optional;
	int version;		/* the ABI wanted, where it is not the 12.0 one */
};

/*
 * cuGetProcAddress returns the newest flavour not newer than the version
 * asked for, which is not always the classic one: at 12.0, cuCtxCreate is
 * cuCtxCreate_v3 (with affinity parameters), so it is asked for at 3.2.
 */
#define E(f, abi_, opt, ...) { #f, abi_, offsetof(struct gdx_cu, f), opt, __VA_ARGS__ }
static const struct entry entries[] = {
	E(cuGetErrorName, "cuGetErrorName", 0),
	E(cuDeviceGetCount, "cuDeviceGetCount", 0),
	E(cuDeviceGet, "cuDeviceGet", 0),
	E(cuDeviceGetName, "cuDeviceGetName", 0),
	E(cuDeviceGetAttribute, "cuDeviceGetAttribute", 0),
	E(cuDeviceTotalMem, "cuDeviceTotalMem_v2", 0),
	E(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 0),
	E(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0),
	E(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 0),
	E(cuCtxGetCurrent, "cuCtxGetCurrent", 0),
	E(cuCtxSetCurrent, "cuCtxSetCurrent", 0),
	E(cuCtxCreate, "cuCtxCreate_v2", 1, 3020),
	E(cuCtxDestroy, "cuCtxDestroy_v2", 1),
	E(cuMemAlloc, "cuMemAlloc_v2", 0),
	E(cuMemFree, "cuMemFree_v2", 0),
	E(cuMemAllocAsync, "cuMemAllocAsync", 1),
	E(cuMemFreeAsync, "cuMemFreeAsync", 1),
	E(cuMemAllocManaged, "cuMemAllocManaged", 0),
	E(cuMemHostAlloc, "cuMemHostAlloc", 0),
	E(cuMemFreeHost, "cuMemFreeHost", 0),
	E(cuMemHostRegister, "cuMemHostRegister_v2", 0),
	E(cuMemHostUnregister, "cuMemHostUnregister", 0),
	E(cuPointerGetAttribute, "cuPointerGetAttribute", 0),
	E(cuPointerGetAttributes, "cuPointerGetAttributes", 0),
	E(cuMemGetAddressRange, "cuMemGetAddressRange_v2", 0),
	E(cuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange", 1),
	E(cuMemcpyAsync, "cuMemcpyAsync", 0),
	E(cuMemcpyBatchAsync, "cuMemcpyBatchAsync", 1, 12080),
	E(cuMemsetD8Async, "cuMemsetD8Async", 0),
	E(cuStreamCreate, "cuStreamCreate", 0),
	E(cuStreamDestroy, "cuStreamDestroy_v2", 0),
	E(cuStreamSynchronize, "cuStreamSynchronize", 0),
	E(cuStreamQuery, "cuStreamQuery", 0),
	E(cuStreamWaitEvent, "cuStreamWaitEvent", 0),
	E(cuStreamGetCtx, "cuStreamGetCtx", 0),
	E(cuLaunchHostFunc, "cuLaunchHostFunc", 0),
	E(cuStreamWaitValue32, "cuStreamWaitValue32_v2", 0),
	E(cuStreamWriteValue32, "cuStreamWriteValue32_v2", 1),
	E(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", 0),
	E(cuEventCreate, "cuEventCreate", 0),
	E(cuEventDestroy, "cuEventDestroy_v2", 0),
	E(cuEventRecord, "cuEventRecord", 0),
	E(cuEventSynchronize, "cuEventSynchronize", 0),
	E(cuEventQuery, "cuEventQuery", 0),
	E(cuEventElapsedTime, "cuEventElapsedTime", 0),
	E(cuModuleLoadData, "cuModuleLoadData", 1),
	E(cuModuleUnload, "cuModuleUnload", 1),
	E(cuModuleGetFunction, "cuModuleGetFunction", 1),
	E(cuLaunchKernel, "cuLaunchKernel", 1),
	E(cuMemCreate, "cuMemCreate", 1),
	E(cuMemRelease, "cuMemRelease", 1),
	E(cuMemAddressReserve, "cuMemAddressReserve", 1),
	E(cuMemAddressFree, "cuMemAddressFree", 1),
	E(cuMemMap, "cuMemMap", 1),
	E(cuMemUnmap, "cuMemUnmap", 1),
	E(cuMemSetAccess, "cuMemSetAccess", 1),
	E(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 1),
};
#undef E

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct gdx_cu api;
static int load_ret;
static char load_err[256];

static void *lookup(void *h, get_proc_v2_fn gp2, get_proc_v1_fn gp1, const struct entry *e)
{
	int ver = GDX_MIN(api.driver_version, e->version ? e->version : GDX_CUDA_API_VERSION);
	void *fn = NULL;
	int st = 0;

	if (gp2) {
		if (gp2(e->name, &fn, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) ||
		    st != CU_GET_PROC_ADDRESS_SUCCESS)
			fn = NULL;
	} else if (gp1) {
		if (gp1(e->name, &fn, ver, CU_GET_PROC_ADDRESS_DEFAULT))
			fn = NULL;
	} else {
		fn = dlsym(h, e->abi);
	}
	return fn;
}

static void load(void)
{
	const char *lib = gdx_cfg_str("cuda.lib");
	CUresult (*init)(unsigned);
	CUresult (*version)(int *);
	get_proc_v2_fn gp2;
	get_proc_v1_fn gp1 = NULL;
	void *h;
	CUresult r;
	int n;

	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(load_err, sizeof(load_err), "%s", dlerror());
		load_ret = GDX_ENOLIB;
		return;
	}
	*(void **)&init = dlsym(h, "cuInit");
	*(void **)&version = dlsym(h, "cuDriverGetVersion");
	if (!init || !version) {
		snprintf(load_err, sizeof(load_err), "%s is not a CUDA driver (no cuInit)", lib);
		load_ret = GDX_ENOLIB;
		dlclose(h);	/* no driver call was made: safe to unload */
		return;
	}
	r = init(0);
	if (r == CUDA_ERROR_NO_DEVICE) {
		snprintf(load_err, sizeof(load_err), "the CUDA driver reports no device");
		load_ret = 0;
		return;
	}
	if (r || version(&api.driver_version)) {
		snprintf(load_err, sizeof(load_err), "cuInit failed: CUDA error %d%s", r,
			 r == CUDA_ERROR_STUB_LIBRARY ? " (the toolkit's stub library, not a driver)"
			 : "");
		load_ret = GDX_EDRIVER;
		return;
	}
	*(void **)&gp2 = dlsym(h, "cuGetProcAddress_v2");
	if (!gp2)
		*(void **)&gp1 = dlsym(h, "cuGetProcAddress");
	for (size_t i = 0; i < GDX_ARRAY_SIZE(entries); i++) {
		const struct entry *e = &entries[i];
		void *fn = lookup(h, gp2, gp1, e);

		if (!fn && !e->optional) {
			snprintf(load_err, sizeof(load_err),
				 "CUDA driver %d.%d lacks %s; gdx needs 11.3 or later",
				 api.driver_version / 1000, api.driver_version % 1000 / 10, e->name);
			load_ret = GDX_EDRIVER;
			return;
		}
		memcpy((char *)&api + e->off, &fn, sizeof(fn));
	}
	r = api.cuDeviceGetCount(&n);
	if (r) {
		snprintf(load_err, sizeof(load_err), "cuDeviceGetCount failed: CUDA error %d", r);
		load_ret = GDX_EDRIVER;
		return;
	}
	if (!n)
		snprintf(load_err, sizeof(load_err), "the CUDA driver reports no device");
	GDX_DBG("cuda", "%s: driver %d, %d device(s), entry points via %s", lib,
		api.driver_version, n, gp2 ? "cuGetProcAddress_v2" : gp1 ? "cuGetProcAddress" :
		"dlsym");
	load_ret = n;
	/* The handle stays open: the driver cannot be unloaded safely. */
}

int gdx_cu_load(const struct gdx_cu **out)
{
	pthread_once(&load_once, load);
	if (load_ret > 0 && out)
		*out = &api;
	return load_ret;
}

const char *gdx_cu_load_error(void)
{
	pthread_once(&load_once, load);
	return load_err[0] ? load_err : "no error";
}

int gdx_cu_status(CUresult r, const char *call)
{
	const char *name = NULL;
	int ret;

	gdx_device_calls_add(1);
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		ret = -ENOMEM;
		break;
	case CUDA_ERROR_INVALID_VALUE:
		ret = -EINVAL;
		break;
	case CUDA_ERROR_NOT_READY:
		return -EBUSY;	/* a query's normal answer, not a failure */
	case CUDA_ERROR_NOT_SUPPORTED:
		ret = -EOPNOTSUPP;
		break;
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		ret = -EEXIST;
		break;
	case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
		ret = GDX_EBADPTR;
		break;
	default:
		ret = GDX_EDRIVER;
		break;
	}
	if (!api.cuGetErrorName || api.cuGetErrorName(r, &name))
		name = NULL;
	/* Refusals of bad arguments are the caller's to report; driver faults are ours. */
	if (ret == GDX_EDRIVER)
		GDX_ERR("cuda", "%s: %s (%d)", call, name ? name : "unknown CUDA error", r);
	else
		GDX_DBG("cuda", "%s: %s (%d)", call, name ? name : "unknown CUDA error", r);
	return ret;
}
