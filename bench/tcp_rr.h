/* SPDX-License-Identifier: MIT */
#ifndef GDX_BENCH_TCP_RR_H
#define GDX_BENCH_TCP_RR_H

#include <stddef.h>

/*
 * Mean microseconds of a req-byte request answered by a rsp-byte response on
 * a loopback TCP connection, timed for secs after 0.2 s of warm-up; < 0: failed.
 */
double bench_tcp_rr(size_t req, size_t rsp, double secs);

#endif
