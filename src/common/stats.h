/* SPDX-License-Identifier: MIT */
#ifndef GDX_COMMON_STATS_H
#define GDX_COMMON_STATS_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Named counters that layers register once and bump on hot paths with relaxed
 * atomics; `gdx stats` style reports walk them.  A counter set lives as long
 * as the object it counts (a file handle, a controller, a queue).
 */
struct gdx_counter {
	const char *name;
	_Atomic uint64_t v;
};

static inline void gdx_counter_add(struct gdx_counter *c, uint64_t n)
{
	atomic_fetch_add_explicit(&c->v, n, memory_order_relaxed);
}

static inline uint64_t gdx_counter_get(const struct gdx_counter *c)
{
	return atomic_load_explicit(&c->v, memory_order_relaxed);
}

struct gdx_stats;
/*
 * Registers n counters under scope (copied).  Scopes are unique ("nvmf.ctrl.3"):
 * -EEXIST for one in use; counter names must be non-empty and distinct within
 * the set (-EINVAL).  The counters stay the caller's and must outlive the set.
 */
int gdx_stats_create(const char *scope, struct gdx_counter *counters, unsigned n,
		     struct gdx_stats **out);
void gdx_stats_destroy(struct gdx_stats *st);
/*
 * Writes {"scope": {"name": value, ...}, ...} for every live counter set, in
 * registration order; -EIO if writing fails.
 */
int gdx_stats_dump_json(FILE *f);
struct json_object;
/* The object gdx_stats_dump_json writes, for a caller to add to (and put); NULL: no memory. */
struct json_object *gdx_stats_json(void);

#endif
