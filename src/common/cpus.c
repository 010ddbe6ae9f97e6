/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include "common/cpus.h"
#include "common/log.h"

int gdx_cpus_parse(const char *spec, int *cpus, unsigned max)
{
	const char *p = spec;
	unsigned n = 0;

	while (*p) {
		char *end;
		long lo = strtol(p, &end, 10), hi = lo;

		if (end == p || lo < 0 || lo >= CPU_SETSIZE)
			return -EINVAL;
		p = end;
		if (*p == '-') {
			hi = strtol(p + 1, &end, 10);
			if (end == p + 1 || hi < lo || hi >= CPU_SETSIZE)
				return -EINVAL;
			p = end;
		}
		for (long c = lo; c <= hi; c++) {
			if (n == max)
				return -EINVAL;
			cpus[n++] = (int)c;
		}
		if (*p == ',' && p[1])
			p++;
		else if (*p)
			return -EINVAL;
	}
	return n ? (int)n : -EINVAL;
}

int gdx_cpus_pick(const int *cpus, unsigned n, unsigned i)
{
	cpu_set_t allowed;
	int count;

	if (n)
		return cpus[i % n];
	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return -1;
	count = CPU_COUNT(&allowed);
	if (count <= 0)
		return -1;
	i %= (unsigned)count;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &allowed) && i-- == 0)
			return c;
	return -1;
}

int gdx_thread_start_on(pthread_t *th, int cpu, void *(*fn)(void *), void *arg,
			const char *name, const char *sub)
{
	pthread_attr_t attr;
	int ret;

	pthread_attr_init(&attr);
	if (cpu >= 0) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	ret = -pthread_create(th, &attr, fn, arg);
	if (ret == -EINVAL && cpu >= 0) {
		GDX_WARN(sub, "%s: cannot pin to CPU %d", name, cpu);
		ret = -pthread_create(th, NULL, fn, arg);
	}
	pthread_attr_destroy(&attr);
	if (!ret)
		pthread_setname_np(*th, name);
	return ret;
}
