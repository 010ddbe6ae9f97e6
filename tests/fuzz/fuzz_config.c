/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the JSON configuration loader.  Each input is written to a
 * memfd and loaded as a config file.  Beyond "no crash" it checks that an
 * accepted file yields values that gdx_config_set accepts back, that a refused
 * file changes nothing, and that a reset leaves no trace of the input.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gdx/gdx.h>

#include "common/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_KNOBS 256

static int fd = -1;
static char path[64];
static int nknobs;
static char *baseline[MAX_KNOBS];

static void quiet(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	(void)lvl;
	(void)subsys;
	(void)msg;
	(void)arg;
}

static char *value_of(int i)
{
	/* A string knob may hold anything up to the loader's 1 MiB file limit. */
	static char buf[(1 << 20) + 1];
	struct gdx_config_knob_info k;

	gdx_config_knob((unsigned)i, &k);
	if (gdx_config_get(k.name, buf, sizeof(buf)) < 0)
		abort();
	return strdup(buf);
}

/* Every knob's value equals what it was before any input was loaded. */
static void check_baseline(void)
{
	for (int i = 0; i < nknobs; i++) {
		char *v = value_of(i);

		if (!v || strcmp(v, baseline[i])) {
			fprintf(stderr, "knob %d leaked state: '%s' != '%s'\n", i, v, baseline[i]);
			abort();
		}
		free(v);
	}
}

static void init(void)
{
	gdx_log_set_callback(quiet, NULL);
	fd = memfd_create("gdx-fuzz-config", MFD_CLOEXEC);
	if (fd < 0)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	gdx_config_reset();
	nknobs = gdx_config_knob(0, NULL);
	if (nknobs > MAX_KNOBS)
		abort();
	for (int i = 0; i < nknobs; i++)
		baseline[i] = value_of(i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int ret;

	if (fd < 0)
		init();
	if (ftruncate(fd, 0) || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
		abort();
	ret = gdx_config_load_file(path);
	if (ret == 0) {
		/* What the loader accepted must pass the same validation through set. */
		for (int i = 0; i < nknobs; i++) {
			struct gdx_config_knob_info k;
			char *v = value_of(i);

			gdx_config_knob((unsigned)i, &k);
			if (!v || gdx_config_set(k.name, v))
				abort();
			if (gdx_config_set(k.name, NULL))
				abort();
			free(v);
		}
	} else if (ret == GDX_ECONFIG) {
		check_baseline();	/* refused whole: nothing applied */
	} else if (ret != -ENOMEM) {
		abort();
	}
	gdx_config_reset();
	check_baseline();
	return 0;
}
