/* SPDX-License-Identifier: MIT */
/*
 * Registry of counter sets.  The hot path never touches the registry: it bumps
 * the caller-owned counters directly; the registry only remembers where they
 * are so a report can walk them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "common/log.h"
#include "common/stats.h"

struct gdx_stats {
	struct gdx_stats *next;
	struct gdx_counter *counters;
	unsigned n;
	char scope[];
};

static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gdx_stats *stats_head, **stats_tail = &stats_head;

static int check_counters(const struct gdx_counter *c, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (!c[i].name || !*c[i].name)
			return -EINVAL;
		for (unsigned j = 0; j < i; j++)
			if (!strcmp(c[i].name, c[j].name))
				return -EINVAL;
	}
	return 0;
}

int gdx_stats_create(const char *scope, struct gdx_counter *counters, unsigned n,
		     struct gdx_stats **out)
{
	struct gdx_stats *st, *o;
	size_t len;
	int ret;

	if (!scope || !*scope || (n && !counters) || !out)
		return -EINVAL;
	ret = check_counters(counters, n);
	if (ret)
		return ret;
	len = strlen(scope);
	st = calloc(1, sizeof(*st) + len + 1);
	if (!st)
		return -ENOMEM;
	memcpy(st->scope, scope, len + 1);
	st->counters = counters;
	st->n = n;

	pthread_mutex_lock(&stats_lock);
	/* Scopes are the JSON keys of the dump, so they must be unique. */
	for (o = stats_head; o; o = o->next) {
		if (!strcmp(o->scope, scope)) {
			pthread_mutex_unlock(&stats_lock);
			free(st);
			return -EEXIST;
		}
	}
	*stats_tail = st;
	stats_tail = &st->next;
	pthread_mutex_unlock(&stats_lock);
	*out = st;
	return 0;
}

void gdx_stats_destroy(struct gdx_stats *st)
{
	struct gdx_stats **pp;

	if (!st)
		return;
	pthread_mutex_lock(&stats_lock);
	for (pp = &stats_head; *pp; pp = &(*pp)->next) {
		if (*pp == st) {
			*pp = st->next;
			if (stats_tail == &st->next)
				stats_tail = pp;
			break;
		}
	}
	pthread_mutex_unlock(&stats_lock);
	free(st);
}

struct json_object *gdx_stats_json(void)
{
	json_object *root = json_object_new_object();
	int ret = 0;

	if (!root)
		return NULL;
	pthread_mutex_lock(&stats_lock);
	for (struct gdx_stats *st = stats_head; st && !ret; st = st->next) {
		json_object *set = json_object_new_object();

		if (!set) {
			ret = -ENOMEM;
			break;
		}
		for (unsigned i = 0; i < st->n && !ret; i++) {
			json_object *v = json_object_new_uint64(gdx_counter_get(&st->counters[i]));

			if (!v || json_object_object_add(set, st->counters[i].name, v)) {
				json_object_put(v);
				ret = -ENOMEM;
			}
		}
		if (json_object_object_add(root, st->scope, set)) {
			json_object_put(set);
			ret = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&stats_lock);
	if (ret) {
		json_object_put(root);
		return NULL;
	}
	return root;
}

int gdx_stats_dump_json(FILE *f)
{
	json_object *root;
	const char *text;
	int ret = 0;

	if (!f)
		return -EINVAL;
	root = gdx_stats_json();
	if (!root)
		return -ENOMEM;
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
					      JSON_C_TO_STRING_NOSLASHESCAPE);
	if (!text)
		ret = -ENOMEM;
	else if (fputs(text, f) == EOF || fputc('\n', f) == EOF || fflush(f))
		ret = -EIO;
	json_object_put(root);
	return ret;
}
