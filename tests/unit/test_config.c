/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>

#include "common/config.h"

static void sizes_parse(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(gdx_parse_size("4096", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(gdx_parse_size("64k", &v), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(gdx_parse_size("1MiB", &v), 0);
	assert_int_equal(v, 1 << 20);
	assert_int_equal(gdx_parse_size("2G", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(gdx_parse_size("0x10", &v), 0);
	assert_int_equal(v, 16);
	/* A leading zero is no octal prefix. */
	assert_int_equal(gdx_parse_size("010k", &v), 0);
	assert_int_equal(v, 10 << 10);
	assert_int_equal(gdx_parse_size("08", &v), 0);
	assert_int_equal(v, 8);
	assert_int_equal(gdx_parse_size("", &v), -EINVAL);
	assert_int_equal(gdx_parse_size("-1", &v), -EINVAL);
	assert_int_equal(gdx_parse_size("12q", &v), -EINVAL);
	assert_int_equal(gdx_parse_size("1kk", &v), -EINVAL);
	assert_int_equal(gdx_parse_size("99999999999999999999", &v), -EINVAL);
	assert_int_equal(gdx_parse_size("16777216T", &v), -ERANGE);
}

static void set_env_file_default_precedence(void **state)
{
	char path[] = "/tmp/gdx-config-XXXXXX";
	char buf[64];
	int fd;
	FILE *f;

	(void)state;
	assert_int_equal(gdx_cfg_int("emulated.devices"), 1);

	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fputs("{\"emulated\": {\"devices\": 3, \"mem_limit\": \"1G\"}, \"require_direct\": true}", f);
	fclose(f);
	assert_int_equal(gdx_config_load_file(path), 0);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 3);
	assert_int_equal(gdx_cfg_size("emulated.mem_limit"), 1ull << 30);
	assert_true(gdx_cfg_bool("require_direct"));

	setenv("GDX_EMULATED_DEVICES", "5", 1);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 5);
	/* A bad environment value is ignored (and logged), not fatal. */
	setenv("GDX_EMULATED_DEVICES", "lots", 1);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 3);
	setenv("GDX_EMULATED_DEVICES", "5", 1);

	assert_int_equal(gdx_config_set("emulated.devices", "2"), 0);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 2);
	assert_int_equal(gdx_config_get("emulated.devices", buf, sizeof(buf)), 1);
	assert_string_equal(buf, "2");
	assert_int_equal(gdx_config_set("emulated.devices", "010"), 0);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 10);
	assert_int_equal(gdx_config_set("emulated.devices", "0"), -ERANGE);
	assert_int_equal(gdx_config_set("emulated.devices", "x"), -EINVAL);
	assert_int_equal(gdx_config_set("no.such.knob", "1"), -ENOENT);
	assert_int_equal(gdx_config_set("emulated.devices", NULL), 0);
	unsetenv("GDX_EMULATED_DEVICES");
	assert_int_equal(gdx_cfg_int("emulated.devices"), 3);
	unlink(path);
}

static int load_text(const char *text)
{
	char path[] = "/tmp/gdx-config-XXXXXX";
	int fd = mkstemp(path), ret;
	FILE *f = fdopen(fd, "w");

	fputs(text, f);
	fclose(f);
	ret = gdx_config_load_file(path);
	unlink(path);
	return ret;
}

static void bad_files_are_refused(void **state)
{
	(void)state;
	gdx_log_set_level(GDX_LOG_ERROR);
	assert_int_equal(load_text("{\"nope\": 1}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"emulated\": {\"devices\": \"many\"}}"), GDX_ECONFIG);
	assert_int_equal(load_text("[1, 2]"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"device\": "), GDX_ECONFIG);
	assert_int_equal(load_text("{} {}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"device\": \"auto\"} x"), GDX_ECONFIG);
	assert_int_equal(load_text(""), GDX_ECONFIG);
	assert_int_equal(load_text("\n\n{\"device\" 1}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"sysfs_root\": \"a\\u0000b\"}"), GDX_ECONFIG);
	assert_int_equal(load_text("{}\n\t "), 0);
	{
		/* Exactly 1 MiB loads; a byte more does not. */
		size_t n = 1 << 20;
		char *big = malloc(n + 2);

		memset(big, ' ', n + 1);
		big[n - 2] = '{';
		big[n - 1] = '}';
		big[n] = 0;
		assert_int_equal(load_text(big), 0);
		big[n] = ' ';
		big[n + 1] = 0;
		assert_int_equal(load_text(big), GDX_ECONFIG);
		free(big);
	}
	assert_int_equal(gdx_config_load_file("/nonexistent/gdx.json"), GDX_ECONFIG);
}

/* A typo in the environment is named with what the knob takes, and stops device opens. */
static void bad_environment_is_refused(void **state)
{
	const char *env = getenv("GDX_DEVICE");
	char *device = env ? strdup(env) : NULL;
	struct gdx_device *dev;
	char why[640];

	(void)state;
	gdx_log_set_level(GDX_LOG_ERROR);
	assert_int_equal(gdx_config_check(why, sizeof(why)), 0);
	setenv("GDX_DEVICE", "emualted", 1);
	assert_int_equal(gdx_config_check(why, sizeof(why)), GDX_ECONFIG);
	assert_string_equal(why, "GDX_DEVICE='emualted': want one of auto|cuda|emulated, each "
			    "optionally with :N");
	assert_int_equal(gdx_device_open("emulated", &dev), GDX_ECONFIG);
	assert_null(dev);
	assert_int_equal(gdx_config_set("device", "emualted"), -EINVAL);
	assert_int_equal(gdx_config_set("device", "emulated:x"), -EINVAL);
	assert_int_equal(gdx_config_set("device", "emulated:1"), 0);
	/* A value set in code overrides the variable, which then does not matter. */
	assert_int_equal(gdx_config_check(why, sizeof(why)), 0);
	assert_int_equal(gdx_config_set("device", NULL), 0);
	setenv("GDX_DEVICE", "cuda:0", 1);
	assert_int_equal(gdx_config_check(why, sizeof(why)), 0);
	if (device)
		setenv("GDX_DEVICE", device, 1);
	else
		unsetenv("GDX_DEVICE");
	free(device);

	setenv("GDX_FILE_CHUNK_SIZE", "1", 1);
	assert_int_equal(gdx_config_check(why, sizeof(why)), GDX_ECONFIG);
	assert_string_equal(why, "GDX_FILE_CHUNK_SIZE='1': want a size from 4k to 256M (bytes, "
			    "or with k, M, G or T)");
	unsetenv("GDX_FILE_CHUNK_SIZE");
	setenv("GDX_FILE_ODIRECT", "maybe", 1);
	assert_int_equal(gdx_config_check(why, sizeof(why)), GDX_ECONFIG);
	assert_non_null(strstr(why, "GDX_FILE_ODIRECT='maybe': want 1, 0, true"));
	unsetenv("GDX_FILE_ODIRECT");
	setenv("GDX_LOG_LEVEL", "loud", 1);
	assert_int_equal(gdx_config_check(why, sizeof(why)), GDX_ECONFIG);
	assert_non_null(strstr(why, "GDX_LOG_LEVEL='loud'"));
	unsetenv("GDX_LOG_LEVEL");
	assert_int_equal(gdx_config_check(why, sizeof(why)), 0);
	gdx_log_set_level(GDX_LOG_WARN);
}

static int cfg_text(const char *name, char *buf, size_t len)
{
	return gdx_config_get(name, buf, len);
}

/* A refused file changes nothing; an accepted one replaces the previous file's values. */
static void file_loads_are_atomic(void **state)
{
	char buf[64];

	(void)state;
	gdx_log_set_level(GDX_LOG_ERROR);
	gdx_config_reset();
	assert_int_equal(load_text("{\"emulated\": {\"devices\": 4}, \"sysfs_root\": \"/fixture\"}"), 0);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 4);
	/* The good key before the bad one must not be applied. */
	assert_int_equal(load_text("{\"emulated\": {\"devices\": 2, \"mem_limit\": \"lots\"}}"),
			 GDX_ECONFIG);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 4);
	assert_string_equal(gdx_cfg_str("sysfs_root"), "/fixture");
	/* A new file replaces the old one whole: sysfs_root falls back to its default. */
	assert_int_equal(load_text("{\"emulated\": {\"devices\": 2, \"devices\": 6}}"), 0);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 6);	/* the last duplicate wins */
	assert_int_equal(cfg_text("sysfs_root", buf, sizeof(buf)), 4);
	assert_string_equal(buf, "/sys");
	/* reset drops set and file values alike. */
	assert_int_equal(gdx_config_set("sysfs_root", "/elsewhere"), 0);
	gdx_config_reset();
	assert_string_equal(gdx_cfg_str("sysfs_root"), "/sys");
	assert_int_equal(gdx_cfg_int("emulated.devices"), 1);
	assert_int_equal(load_text("{}"), 0);
	assert_int_equal(gdx_config_get("sysfs_root", buf, 2), -ENOSPC);
}

/* A string handed out stays readable after the knob changes (ASan checks the reads). */
static void str_survives_changes(void **state)
{
	const char *a, *b;

	(void)state;
	gdx_config_reset();
	assert_int_equal(gdx_config_set("sysfs_root", "/one"), 0);
	a = gdx_cfg_str("sysfs_root");
	assert_int_equal(load_text("{\"sysfs_root\": \"/two\"}"), 0);
	assert_int_equal(gdx_config_set("sysfs_root", NULL), 0);
	b = gdx_cfg_str("sysfs_root");
	assert_string_equal(b, "/two");
	assert_int_equal(load_text("{}"), 0);
	assert_int_equal(gdx_config_set("sysfs_root", "/three"), 0);
	assert_string_equal(a, "/one");
	assert_string_equal(b, "/two");
	assert_string_equal(gdx_cfg_str("sysfs_root"), "/three");
	gdx_config_reset();
	assert_string_equal(gdx_cfg_str("sysfs_root"), "/sys");
}

/* Leaves of the wrong JSON type are refused rather than stringified. */
static void json_types_are_checked(void **state)
{
	char longkey[300];

	(void)state;
	gdx_log_set_level(GDX_LOG_ERROR);
	gdx_config_reset();
	assert_int_equal(load_text("{\"device\": 5}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"device\": [\"cuda\"]}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"device\": null}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"device\": true}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"emulated\": {\"devices\": true}}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"emulated\": {\"devices\": 2.5}}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"emulated\": {\"devices\": 17}}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"emulated\": {\"mem_limit\": -5}}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"emulated\": 3}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"emulated\": {\"devices\": {\"x\": 1}}}"), GDX_ECONFIG);
	assert_int_equal(load_text("{\"\": 1}"), GDX_ECONFIG);
	snprintf(longkey, sizeof(longkey), "{\"device%0250d\": \"x\"}", 0);
	assert_int_equal(load_text(longkey), GDX_ECONFIG);
	/* The accepted spellings. */
	assert_int_equal(load_text("{\"require_direct\": \"yes\", \"emulated\": "
				   "{\"mem_limit\": 1073741824, \"devices\": \"2\"}}"), 0);
	assert_true(gdx_cfg_bool("require_direct"));
	assert_int_equal(gdx_cfg_size("emulated.mem_limit"), 1ull << 30);
	assert_int_equal(gdx_cfg_int("emulated.devices"), 2);
	assert_int_equal(load_text("{\"require_direct\": 0}"), 0);
	assert_false(gdx_cfg_bool("require_direct"));
	gdx_config_reset();
}

/* docs/config.md must list every knob of the table, by name and variable. */
static void docs_list_every_knob(void **state)
{
	const char *src = getenv("GDX_SRCDIR");
	struct gdx_config_knob_info k;
	char path[4096], *text;
	long len;
	FILE *f;
	int n;

	(void)state;
	if (!src)
		skip();
	snprintf(path, sizeof(path), "%s/docs/config.md", src);
	f = fopen(path, "r");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	text = calloc(1, (size_t)len + 1);
	assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	n = gdx_config_knob(0, NULL);
	for (int i = 0; i < n; i++) {
		char needle[160];

		gdx_config_knob((unsigned)i, &k);
		snprintf(needle, sizeof(needle), "| `%s` | `%s` |", k.name, k.env);
		if (!strstr(text, needle))
			fail_msg("docs/config.md lacks the row for %s (run gdx config --markdown)", k.name);
	}
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sizes_parse),
		cmocka_unit_test(set_env_file_default_precedence),
		cmocka_unit_test(bad_files_are_refused),
		cmocka_unit_test(bad_environment_is_refused),
		cmocka_unit_test(file_loads_are_atomic),
		cmocka_unit_test(str_survives_changes),
		cmocka_unit_test(json_types_are_checked),
		cmocka_unit_test(docs_list_every_knob),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
