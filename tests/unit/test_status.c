/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "test.h"

#include <gdx/gdx.h>

#include "common/log.h"

static void strerror_names_every_code(void **state)
{
	(void)state;
	for (int e = GDX_E_BASE - 1; e > GDX_E_LAST; e--) {
		const char *m = gdx_strerror(e);

		assert_non_null(m);
		assert_string_not_equal(m, "unknown gdx error");
	}
	assert_string_equal(gdx_strerror(-ENOENT), strerror(ENOENT));
	assert_string_equal(gdx_strerror(0), "success");
	assert_string_equal(gdx_strerror(GDX_E_LAST), "unknown gdx error");
	assert_string_equal(gdx_strerror(-20000), "unknown gdx error");
}

/* NVMe statuses have their own codes, named as nvme-cli names them. */
static void strerror_names_nvme_statuses(void **state)
{
	(void)state;
	assert_int_equal(gdx_nvme_status(GDX_E_NVME(0x182)), 0x182);
	assert_int_equal(gdx_nvme_status(GDX_E_NVME(0x4080)), 0x80);	/* DNR dropped */
	assert_int_equal(gdx_nvme_status(-ENOENT), 0);
	assert_int_equal(gdx_nvme_status(GDX_ENVME), 0);
	assert_int_equal(gdx_nvme_status(GDX_E_NVME_BASE), 0);
	assert_string_equal(gdx_strerror(GDX_E_NVME(0x80)),
			    "NVMe status: LBA Out of Range: The command references an LBA that "
			    "exceeds the size of the namespace(0x80)");
	assert_string_equal(gdx_strerror(GDX_E_NVME(0x182)),
			    "NVMe status: Connect Invalid Parameters: One or more of the command "
			    "parameters is invalid(0x182)");
	assert_non_null(strstr(gdx_strerror(GDX_E_NVME(0x184)), "Connect Invalid Host: "));
	assert_string_equal(gdx_strerror(GDX_E_NVME(0x7ff)), "NVMe status: Vendor Specific "
			    "Status(0x7ff)");
	assert_string_equal(gdx_strerror(GDX_E_NVME(0x0ff)), "NVMe status: Unknown Status(0xff)");
}

static void log_levels_parse(void **state)
{
	(void)state;
	assert_int_equal(gdx_log_level_parse("error"), GDX_LOG_ERROR);
	assert_int_equal(gdx_log_level_parse("TRACE"), GDX_LOG_TRACE);
	assert_int_equal(gdx_log_level_parse("warning"), GDX_LOG_WARN);
	assert_int_equal(gdx_log_level_parse("3"), GDX_LOG_DEBUG);
	assert_int_equal(gdx_log_level_parse("5"), -EINVAL);
	assert_int_equal(gdx_log_level_parse("loud"), -EINVAL);
	assert_int_equal(gdx_log_level_parse(""), -EINVAL);
	assert_int_equal(gdx_log_level_parse(NULL), -EINVAL);
}

struct captured {
	int n;
	enum gdx_log_level last;
	char msg[256];
};

static void capture(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	struct captured *c = arg;

	(void)subsys;
	c->n++;
	c->last = lvl;
	strncpy(c->msg, msg, sizeof(c->msg) - 1);
}

static void log_callback_filters_by_level(void **state)
{
	struct captured c = { 0 };
	struct gdx_device *dev;

	(void)state;
	gdx_log_set_callback(capture, &c);
	gdx_log_set_level(GDX_LOG_ERROR);
	/* A bad device spec logs one error naming the accepted forms. */
	assert_int_equal(gdx_device_open("tpu:0", &dev), -EINVAL);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.last, GDX_LOG_ERROR);
	assert_non_null(strstr(c.msg, "emulated"));
	/* Below the level nothing reaches the sink; at it, the message does. */
	GDX_WARN("test", "quiet %d", 1);
	GDX_DBG("test", "quiet %d", 2);
	assert_int_equal(c.n, 1);
	gdx_log_set_level(GDX_LOG_WARN);
	GDX_WARN("test", "heard %d", 3);
	GDX_INFO("test", "quiet %d", 4);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.last, GDX_LOG_WARN);
	assert_string_equal(c.msg, "heard 3");
	gdx_log_set_level(GDX_LOG_ERROR);
	gdx_log_set_callback(NULL, NULL);
}

/* A callback that logs through gdx (or swaps the callback) must not deadlock. */
static int reentered;

static void reentering(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	(void)lvl;
	(void)subsys;
	(void)msg;
	(void)arg;
	reentered++;
	gdx_log_msg(GDX_LOG_ERROR, "test", "logged from inside the callback");
	gdx_log_set_callback(NULL, NULL);
}

static void log_callback_may_reenter(void **state)
{
	struct captured c = { 0 };

	(void)state;
	gdx_log_set_level(GDX_LOG_ERROR);
	gdx_log_set_callback(reentering, NULL);
	GDX_ERR("test", "outer");
	assert_int_equal(reentered, 1);
	/* The swap from inside was refused: the callback is still installed. */
	GDX_ERR("test", "again");
	assert_int_equal(reentered, 2);
	/* Out-of-range levels are clamped, not used as an index. */
	gdx_log_set_callback(capture, &c);
	gdx_log_msg((enum gdx_log_level)7, NULL, "odd level %d", 7);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.last, GDX_LOG_ERROR);
	assert_string_equal(c.msg, "odd level 7");
	gdx_log_set_level((enum gdx_log_level)9);
	assert_int_equal(gdx_log_get_level(), GDX_LOG_ERROR);
	gdx_log_set_callback(NULL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(strerror_names_every_code),
		cmocka_unit_test(strerror_names_nvme_statuses),
		cmocka_unit_test(log_levels_parse),
		cmocka_unit_test(log_callback_filters_by_level),
		cmocka_unit_test(log_callback_may_reenter),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
