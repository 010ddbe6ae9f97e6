/* SPDX-License-Identifier: MIT */
#ifndef GDX_GPU_DEVICE_H
#define GDX_GPU_DEVICE_H

#include <stdatomic.h>
#include <stdint.h>

#include <gdx/device.h>
#include "plugin/device.h"

struct gdx_device {
	const struct gdx_device_ops *ops;
	void *priv;
	int ordinal;
	_Atomic int refs;
	char name[32];
};

struct gdx_stream {
	struct gdx_device *dev;
	_Alignas(16) unsigned char priv[];
};

struct gdx_event {
	struct gdx_device *dev;
	unsigned flags;
	_Alignas(16) unsigned char priv[];
};

/* Built-in backends in priority order ("auto" takes the first with a device). */
extern const struct gdx_device_ops gdx_cuda_ops;
extern const struct gdx_device_ops gdx_emulated_ops;

/*
 * The device that owns p, if any device already opened in this process does:
 * lets layers that receive a bare pointer find the right device.  Returns a
 * borrowed reference, with *a describing p, or NULL (*a: plain host memory).
 */
struct gdx_device *gdx_device_of_ptr(const void *p, struct gdx_ptr_attrs *a);

/*
 * Calls into the device driver made by the calling thread so far (cuda:
 * driver API calls, context switches left out; emulated: its operations).
 * The pipeline counts the ones on its threads per batch: at steps of tens of
 * microseconds a call of one or two is a share of the step.
 */
extern _Thread_local uint64_t gdx_dev_calls_tls;

static inline void gdx_device_calls_add(unsigned n)
{
	gdx_dev_calls_tls += n;
}

static inline uint64_t gdx_device_calls(void)
{
	return gdx_dev_calls_tls;
}

/*
 * The address a NIC registers (ibv_reg_mr) to reach device memory [dptr,
 * dptr+size) as peer memory, for when gdx_device_export_dmabuf gives no
 * dma-buf the NIC takes.  -EOPNOTSUPP where the device has none.
 */
int gdx_device_nic_addr(struct gdx_device *dev, void *dptr, size_t size, void **va);

/* Why the cuda device cannot run here ("libcuda.so.1: cannot open ..."), for messages. */
const char *gdx_cuda_load_error(void);

#endif
