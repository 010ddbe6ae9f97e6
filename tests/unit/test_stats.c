/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include <json-c/json.h>

#include "common/stats.h"

/* Dumps the registry and parses it back. */
static json_object *dump(void)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	json_object *o;

	assert_non_null(f);
	assert_int_equal(gdx_stats_dump_json(f), 0);
	fclose(f);
	o = json_tokener_parse(text);
	free(text);
	assert_non_null(o);
	return o;
}

static uint64_t value_of(json_object *root, const char *scope, const char *name)
{
	json_object *set, *v;

	if (!json_object_object_get_ex(root, scope, &set) ||
	    !json_object_object_get_ex(set, name, &v))
		fail_msg("%s.%s missing from the dump", scope, name);
	return json_object_get_uint64(v);
}

static void register_dump_destroy(void **state)
{
	struct gdx_counter a[] = { { .name = "reads" }, { .name = "bytes" } };
	struct gdx_counter b[] = { { .name = "errors" } };
	struct gdx_stats *sa, *sb;
	json_object *root, *x;

	(void)state;
	assert_int_equal(gdx_stats_create("file.0", a, 2, &sa), 0);
	assert_int_equal(gdx_stats_create("xport.tcp", b, 1, &sb), 0);
	gdx_counter_add(&a[0], 3);
	gdx_counter_add(&a[1], 1ull << 40);
	gdx_counter_add(&a[1], 5);
	gdx_counter_add(&b[0], UINT64_MAX);
	assert_int_equal(gdx_counter_get(&a[0]), 3);

	root = dump();
	assert_int_equal(value_of(root, "file.0", "reads"), 3);
	assert_int_equal(value_of(root, "file.0", "bytes"), (1ull << 40) + 5);
	/* Full 64-bit range survives the JSON round trip. */
	assert_true(value_of(root, "xport.tcp", "errors") == UINT64_MAX);
	json_object_put(root);

	gdx_stats_destroy(sa);
	root = dump();
	assert_false(json_object_object_get_ex(root, "file.0", &x));
	assert_true(json_object_object_get_ex(root, "xport.tcp", &x));
	json_object_put(root);

	/* The scope is free again; a new set registers after the survivors. */
	assert_int_equal(gdx_stats_create("file.0", a, 1, &sa), 0);
	gdx_stats_destroy(sb);
	gdx_stats_destroy(sa);
	root = dump();
	assert_int_equal(json_object_object_length(root), 0);
	json_object_put(root);
	gdx_stats_destroy(NULL);
}

static void bad_sets_are_refused(void **state)
{
	struct gdx_counter dup[] = { { .name = "a" }, { .name = "a" } };
	struct gdx_counter unnamed[] = { { .name = "a" }, { .name = NULL } };
	struct gdx_counter empty[] = { { .name = "" } };
	struct gdx_counter ok[] = { { .name = "a" } };
	struct gdx_stats *st, *st2;

	(void)state;
	assert_int_equal(gdx_stats_create("s", dup, 2, &st), -EINVAL);
	assert_int_equal(gdx_stats_create("s", unnamed, 2, &st), -EINVAL);
	assert_int_equal(gdx_stats_create("s", empty, 1, &st), -EINVAL);
	assert_int_equal(gdx_stats_create("", ok, 1, &st), -EINVAL);
	assert_int_equal(gdx_stats_create(NULL, ok, 1, &st), -EINVAL);
	assert_int_equal(gdx_stats_create("s", NULL, 1, &st), -EINVAL);
	assert_int_equal(gdx_stats_create("s", ok, 1, NULL), -EINVAL);
	assert_int_equal(gdx_stats_create("s", ok, 1, &st), 0);
	assert_int_equal(gdx_stats_create("s", ok, 1, &st2), -EEXIST);
	/* A set with no counters is legal and dumps as {}. */
	assert_int_equal(gdx_stats_create("none", NULL, 0, &st2), 0);
	gdx_stats_destroy(st2);
	gdx_stats_destroy(st);
	assert_int_equal(gdx_stats_dump_json(NULL), -EINVAL);
}

/* Scope names with JSON metacharacters come out escaped, not as broken JSON. */
static void names_are_escaped(void **state)
{
	struct gdx_counter c[] = { { .name = "q\"uote" } };
	struct gdx_stats *st;
	json_object *root;

	(void)state;
	assert_int_equal(gdx_stats_create("we\\ird\n", c, 1, &st), 0);
	gdx_counter_add(&c[0], 9);
	root = dump();
	assert_int_equal(value_of(root, "we\\ird\n", "q\"uote"), 9);
	json_object_put(root);
	gdx_stats_destroy(st);
}

static void write_error_is_reported(void **state)
{
	struct gdx_counter c[] = { { .name = "x" } };
	struct gdx_stats *st;
	FILE *f;

	(void)state;
	f = fopen("/dev/full", "w");
	if (!f)
		skip();
	assert_int_equal(gdx_stats_create("full", c, 1, &st), 0);
	assert_int_equal(gdx_stats_dump_json(f), -EIO);
	fclose(f);
	gdx_stats_destroy(st);
}

#define BUMPERS 4

static struct gdx_counter shared_ctr[] = { { .name = "hits" } };

static void *bumper(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100000; i++)
		gdx_counter_add(&shared_ctr[0], 1);
	return NULL;
}

/* Concurrent bumps are not lost, and dumping while they run is safe. */
static void concurrent_bumps(void **state)
{
	pthread_t th[BUMPERS];
	struct gdx_stats *st;
	json_object *root;

	(void)state;
	assert_int_equal(gdx_stats_create("conc", shared_ctr, 1, &st), 0);
	for (int i = 0; i < BUMPERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, bumper, NULL), 0);
	for (int i = 0; i < 5; i++)
		json_object_put(dump());
	for (int i = 0; i < BUMPERS; i++)
		pthread_join(th[i], NULL);
	root = dump();
	assert_int_equal(value_of(root, "conc", "hits"), BUMPERS * 100000);
	json_object_put(root);
	gdx_stats_destroy(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(register_dump_destroy),
		cmocka_unit_test(bad_sets_are_refused),
		cmocka_unit_test(names_are_escaped),
		cmocka_unit_test(write_error_is_reported),
		cmocka_unit_test(concurrent_bumps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
