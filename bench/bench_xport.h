/* SPDX-License-Identifier: MIT */
#ifndef GDX_BENCH_XPORT_H
#define GDX_BENCH_XPORT_H

#include <gdx/device.h>

/* `gdx bench xport ...`; open_gpu maps gpu:N to a device. Returns an exit code. */
int gdx_bench_xport(int argc, char **argv, int (*open_gpu)(int, struct gdx_device **));

#endif
