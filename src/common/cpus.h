/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_CPUS_H
#define GDX_COMMON_CPUS_H

#include <pthread.h>

/*
 * Where a component's threads run: thread i of a set (a target's reactor i,
 * a host's I/O queue i) on the i-th CPU of a list, round-robin, as the
 * Linux NVMe-oF host and target give queue i its own CPU.
 */

/* "1", "2,3", "0-3,6": at most max CPUs into cpus, in order; their count, or -EINVAL. */
int gdx_cpus_parse(const char *spec, int *cpus, unsigned max);
/*
 * Thread i's CPU: cpus[i % n], or with n == 0 the (i mod their count)-th of
 * the CPUs this process may run on; -1 when that cannot be read.
 */
int gdx_cpus_pick(const int *cpus, unsigned n, unsigned i);
/*
 * Starts fn(arg) on a thread pinned to cpu (-1: anywhere) from its first
 * instruction, named name; a CPU this process may not use is warned about
 * (under log subsystem sub) and the thread runs unpinned.  0 or a negative
 * errno.
 */
int gdx_thread_start_on(pthread_t *th, int cpu, void *(*fn)(void *), void *arg,
			const char *name, const char *sub);

#endif
