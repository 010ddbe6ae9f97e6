/* SPDX-License-Identifier: MIT */
#ifndef GDX_BENCH_NVMF_HOST_H
#define GDX_BENCH_NVMF_HOST_H

#include <gdx/device.h>

/* `gdx bench nvmf-host ...`; open_gpu maps gpu:N to a device. Returns an exit code. */
int gdx_bench_nvmf_host(int argc, char **argv, int (*open_gpu)(int, struct gdx_device **));

#endif
