/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for libcuda.so.1 with no GPU behind it, for test_cuda_load.
 * FAKE_CUDA_MODE picks what cuInit says: "nodevice" (a driver on a machine
 * without a GPU), "stub" (the toolkit's stub library), "zero" (initialises,
 * then counts no devices).  It records the CUDA version each entry point was
 * asked for, so the test can check the loader's requests.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int fake_cuda_max_version, fake_cuda_memalloc_version, fake_cuda_lookups;
/* versions the gather kernel's entry points were asked for */
EXPORT int fake_cuda_module_version, fake_cuda_launch_version;
EXPORT int cuInit(unsigned flags);
EXPORT int cuDriverGetVersion(int *v);
EXPORT int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *st);

static int device_count(int *n)
{
	*n = 0;
	return 0;
}

static int unsupported(void)
{
	return 801;
}

int cuInit(unsigned flags)
{
	const char *mode = getenv("FAKE_CUDA_MODE");

	(void)flags;
	if (!mode || !strcmp(mode, "nodevice"))
		return 100;	/* CUDA_ERROR_NO_DEVICE */
	if (!strcmp(mode, "stub"))
		return 34;	/* CUDA_ERROR_STUB_LIBRARY */
	return 0;
}

int cuDriverGetVersion(int *v)
{
	*v = 13000;
	return 0;
}

int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *st)
{
	(void)flags;
	fake_cuda_lookups++;
	if (!strcmp(sym, "cuMemAlloc"))
		fake_cuda_memalloc_version = ver;
	if (!strcmp(sym, "cuModuleLoadData"))
		fake_cuda_module_version = ver;
	if (!strcmp(sym, "cuLaunchKernel"))
		fake_cuda_launch_version = ver;
	if (ver > fake_cuda_max_version)
		fake_cuda_max_version = ver;
	*pfn = !strcmp(sym, "cuDeviceGetCount") ? (void *)device_count : (void *)unsupported;
	*st = 0;
	return 0;
}
