/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_THREADS_H
#define GDX_TESTS_THREADS_H

/*
 * This process's threads as /proc/self/task shows them, for the tests that
 * check where the library's threads run and how often they switch.
 */
#include <dirent.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Calls fn with each thread's id and its /proc/self/task/TID/FILE open until
 * fn returns true; whether one did.  A thread that ended meanwhile is skipped.
 */
static inline bool t_threads_each(const char *file, bool (*fn)(long tid, FILE *f, void *arg),
				  void *arg)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool stop = false;

	while (d && !stop && (e = readdir(d))) {
		char p[300];
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/proc/self/task/%s/%s", e->d_name, file);
		f = fopen(p, "r");
		if (!f)
			continue;
		stop = fn(atol(e->d_name), f, arg);
		fclose(f);
	}
	if (d)
		closedir(d);
	return stop;
}

struct t_named_cpus {
	const char *name;
	cpu_set_t *set;
};

static inline bool t_named_cpus_of(long tid, FILE *f, void *arg)
{
	struct t_named_cpus *n = arg;
	size_t len = strlen(n->name);
	char comm[32];

	return fgets(comm, sizeof(comm), f) && !strncmp(comm, n->name, len) &&
	       comm[len] == '\n' && !sched_getaffinity((pid_t)tid, sizeof(*n->set), n->set);
}

/* The CPUs the thread called name may run on; whether there is one. */
static inline bool t_thread_cpus(const char *name, cpu_set_t *set)
{
	struct t_named_cpus n = { name, set };

	return t_threads_each("comm", t_named_cpus_of, &n);
}

#endif
