/* SPDX-License-Identifier: MIT */
/* The cuda device: the CUDA driver API through libcuda.so.1, loaded at run time. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

#include "common/log.h"
#include "gpu/device.h"

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status;
static int device_count;

static void load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	cu_init_fn init;
	cu_count_fn count;

	if (!h) {
		GDX_DBG("cuda", "libcuda.so.1: %s", dlerror());
		load_status = GDX_ENOLIB;
		return;
	}
	init = (cu_init_fn)dlsym(h, "cuInit");
	count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
	if (!init || !count || init(0) || count(&device_count)) {
		load_status = GDX_EDRIVER;
		return;
	}
}

static int cuda_count(void)
{
	pthread_once(&load_once, load);
	return load_status ? load_status : device_count;
}

static int cuda_open(int ordinal, void **priv)
{
	(void)ordinal;
	(void)priv;
	return -ENOSYS;
}

const struct gdx_device_ops gdx_cuda_ops = {
	.kind = "cuda",
	.count = cuda_count,
	.open = cuda_open,
};
