/* SPDX-License-Identifier: MIT */
/*
 * Loading the CUDA driver where there is none: a missing library, a driver
 * that sees no GPU, the toolkit's stub library, a library that is no driver.
 * Each case runs in a child process because the driver is loaded once per
 * process.  The same program runs on the GPU machine (tests/gpu/run.sh), where
 * cuda.lib pointed at these libraries must still win over the real driver.
 */
#include <errno.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>

static char logbuf[4096];

static void capture(enum gdx_log_level level, const char *subsys, const char *msg, void *arg)
{
	size_t len = strlen(logbuf);

	(void)level;
	(void)arg;
	snprintf(logbuf + len, sizeof(logbuf) - len, "%s: %s\n", subsys, msg);
}

#define CHECK(c)                                                                  \
	do {                                                                      \
		if (!(c)) {                                                       \
			fprintf(stderr, "%s:%d: check failed: %s\nlog:\n%s", __FILE__, \
				__LINE__, #c, logbuf);                            \
			return 1;                                                 \
		}                                                                 \
	} while (0)

struct expect {
	const char *lib;	/* a library name or path; "libfake_cuda.so" is ours */
	const char *mode;	/* FAKE_CUDA_MODE */
	int count;		/* gdx_device_count("cuda") */
	int open_ret;		/* gdx_device_open("cuda") */
	const char *why;	/* must appear in the open failure's message */
};

static int child(const struct expect *e)
{
	struct gdx_device *d = NULL;
	int ret;

	gdx_log_set_callback(capture, NULL);
	gdx_log_set_level(GDX_LOG_ERROR);
	ret = gdx_device_count("cuda");
	CHECK(ret == e->count);
	CHECK(logbuf[0] == 0);		/* counting is silent: gdx check asks it */

	ret = gdx_device_open("cuda", &d);
	CHECK(ret == e->open_ret && d == NULL);
	CHECK(strstr(logbuf, e->why));
	CHECK(strstr(logbuf, "GDX_DEVICE=emulated"));

	/* auto never falls back to the emulated device. */
	logbuf[0] = 0;
	ret = gdx_device_open("auto", &d);
	CHECK(ret == GDX_ENODEVICE && d == NULL);
	CHECK(strstr(logbuf, "no GPU found"));
	CHECK(strstr(logbuf, e->why));
	CHECK(strstr(logbuf, "GDX_DEVICE=emulated"));

	/* ... but the emulated device is there when asked for by name. */
	ret = gdx_device_open("emulated", &d);
	CHECK(ret == 0);
	gdx_device_close(d);
	return 0;
}

static void run(const struct expect *e)
{
	char path[4096];
	int status;
	pid_t pid;

	if (strcmp(e->lib, "libfake_cuda.so") || !getenv("GDX_BUILDDIR"))
		snprintf(path, sizeof(path), "%s", e->lib);
	else
		snprintf(path, sizeof(path), "%s/tests/unit/%s", getenv("GDX_BUILDDIR"), e->lib);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("GDX_CUDA_LIB", path, 1);
		if (e->mode)
			setenv("FAKE_CUDA_MODE", e->mode, 1);
		_exit(child(e));
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void missing_library(void **state)
{
	(void)state;
	run(&(struct expect){ "/nonexistent/libcuda.so.1", NULL, GDX_ENOLIB, GDX_ENOLIB,
			      "/nonexistent/libcuda.so.1" });
}

static void not_a_driver(void **state)
{
	(void)state;
	run(&(struct expect){ "libc.so.6", NULL, GDX_ENOLIB, GDX_ENOLIB, "not a CUDA driver" });
}

static void driver_without_gpu(void **state)
{
	(void)state;
	run(&(struct expect){ "libfake_cuda.so", "nodevice", 0, GDX_ENODEVICE,
			      "reports no device" });
}

static void stub_library(void **state)
{
	(void)state;
	run(&(struct expect){ "libfake_cuda.so", "stub", GDX_EDRIVER, GDX_EDRIVER, "stub" });
}

/* A driver that initialises but counts no GPU; the entry points were asked for by version. */
static void zero_devices_and_versioned_lookup(void **state)
{
	char path[4096];
	int *memalloc, *maxv, *lookups, *module, *launch;
	void *h;

	(void)state;
	run(&(struct expect){ "libfake_cuda.so", "zero", 0, GDX_ENODEVICE, "reports no device" });

	snprintf(path, sizeof(path), "%s/tests/unit/libfake_cuda.so",
		 getenv("GDX_BUILDDIR") ? getenv("GDX_BUILDDIR") : ".");
	setenv("GDX_CUDA_LIB", path, 1);
	setenv("FAKE_CUDA_MODE", "zero", 1);
	gdx_log_set_level(GDX_LOG_ERROR);
	assert_int_equal(gdx_device_count("cuda"), 0);
	h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
	assert_non_null(h);
	memalloc = dlsym(h, "fake_cuda_memalloc_version");
	maxv = dlsym(h, "fake_cuda_max_version");
	lookups = dlsym(h, "fake_cuda_lookups");
	module = dlsym(h, "fake_cuda_module_version");
	launch = dlsym(h, "fake_cuda_launch_version");
	assert_non_null(memalloc);
	assert_non_null(module);
	assert_non_null(launch);
	assert_true(*lookups > 30);
	/*
	 * cuMemAlloc at 12.0 is cuMemAlloc_v2; nothing is asked for past 12.0 but
	 * cuMemcpyBatchAsync, in its 12.8 flavour (13.0's dropped an argument).
	 */
	assert_int_equal(*memalloc, 12000);
	assert_int_equal(*maxv, 12080);
	/* the gather kernel's module and launch calls, in their classic flavours */
	assert_int_equal(*module, 12000);
	assert_int_equal(*launch, 12000);
	dlclose(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(missing_library),
		cmocka_unit_test(not_a_driver),
		cmocka_unit_test(driver_without_gpu),
		cmocka_unit_test(stub_library),
		cmocka_unit_test(zero_devices_and_versioned_lookup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
