/* SPDX-License-Identifier: MIT */
/*
 * The gdx host against the gdx target on loopback, both in this process:
 * discovery, identify, I/O of every kind and size into host and device memory
 * ($GDX_DEVICE: emulated in CI, cuda under tests/gpu/run.sh) with and without
 * digests, many queues at depth, and the target killed and restarted on the
 * same port while reads are in flight.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "threads.h"

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include <json-c/json.h>

#include "common/config.h"
#include "common/util.h"
#include "gpu/device.h"
#include "dev_watch.h"
#include "nvmf/host/host.h"

#define NQN "nqn.2026-11.io.gdx:host-func"
#define NS_BYTES (32u << 20)

static struct gdx_nvmf_target *tgt;
static char path[64];
static char port[16];

static int target_up(const char *svc)
{
	struct gdx_nvmf_target_opts o;
	int p;

	gdx_nvmf_target_opts_init(&o, sizeof(o));
	o.reactors = 2;
	if (gdx_nvmf_target_create(&o, &tgt) || gdx_nvmf_target_add_subsys(tgt, NQN, 1) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 1, path, 512) ||
	    gdx_nvmf_target_add_ns(tgt, NQN, 2, "ram:8M", 4096) ||
	    gdx_nvmf_target_add_port(tgt, 1, "127.0.0.1", svc) || gdx_nvmf_target_link(tgt, 1, NQN) ||
	    gdx_nvmf_target_start(tgt))
		return -1;
	p = gdx_nvmf_target_bound_port(tgt, 1);
	if (p <= 0)
		return -1;
	snprintf(port, sizeof(port), "%d", p);
	return 0;
}

static int setup(void **state)
{
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "/tmp/gdx-nvmf-host-XXXXXX");
	fd = mkstemp(path);
	if (fd < 0 || ftruncate(fd, NS_BYTES))
		return -1;
	close(fd);
	return target_up("0");
}

static int teardown(void **state)
{
	(void)state;
	gdx_nvmf_target_destroy(tgt);
	unlink(path);
	return 0;
}

static struct gdx_nvmf_ctrl *conn(unsigned queues, unsigned depth, int dg)
{
	struct gdx_nvmf_host_opts o;
	struct gdx_nvmf_ctrl *c = NULL;

	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = queues;
	o.queue_depth = depth;
	o.hdr_digest = dg;
	o.data_digest = dg;
	o.reconnect_delay_ms = 50;
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &o, &c), 0);
	return c;
}

/* The device ($GDX_DEVICE), n bytes of its memory at *d. */
static struct gdx_device *dev_mem(size_t n, void **d)
{
	struct gdx_device *dev;

	assert_int_equal(gdx_device_open(NULL, &dev), 0);
	assert_int_equal(gdx_device_malloc(dev, n, d), 0);
	return dev;
}

/* Puts the knobs back to their defaults, and frees dev_mem's memory and device. */
static void dev_mem_close(struct gdx_device *dev, void *d)
{
	gdx_config_reset();
	gdx_device_free(dev, d);
	gdx_device_close(dev);
}

/* A controller of queues I/O queues that stages reads and writes for dev (named at connect). */
static struct gdx_nvmf_ctrl *dev_conn(struct gdx_device *dev, unsigned queues)
{
	struct gdx_nvmf_host_opts o;
	struct gdx_nvmf_ctrl *c = NULL;

	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.dev = dev;
	o.nr_io_queues = queues;
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &o, &c), 0);
	return c;
}

static void discover_identify(void **state)
{
	struct gdx_nvmf_discovery_log *log;
	struct gdx_nvmf_ctrl_info in;
	struct gdx_nvmf_ns_info ns;
	struct gdx_nvmf_ctrl *c;
	uint32_t ids[8];

	(void)state;
	assert_int_equal(gdx_nvmf_discover("127.0.0.1", port, NULL, &log), 0);
	assert_true(log->numrec >= 1);
	{
		bool found = false;

		for (uint64_t i = 0; i < log->numrec; i++)
			found |= !strcmp(log->entries[i].subnqn, NQN) &&
				 !strcmp(log->entries[i].trsvcid, port);
		assert_true(found);
	}
	free(log);
	c = conn(4, 64, 0);
	assert_int_equal(gdx_nvmf_ctrl_info(c, &in), 0);
	assert_string_equal(in.subnqn, NQN);
	assert_int_equal(in.nr_io_queues, 4);
	assert_int_equal(in.queue_depth, 63);
	assert_int_equal(gdx_nvmf_ns_list(c, ids, 8), 2);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 2);
	assert_int_equal(gdx_nvmf_identify_ns(c, 1, &ns), 0);
	assert_int_equal(ns.block_size, 512);
	assert_int_equal(ns.nsze * 512, NS_BYTES);
	assert_int_equal(gdx_nvmf_identify_ns(c, 2, &ns), 0);
	assert_int_equal(ns.block_size, 4096);
	gdx_nvmf_disconnect(c);
}

/* Sizes from one block to several MiB (split by max_xfer), both namespaces, with digests. */
static void io_sizes(void **state)
{
	static const size_t sizes[] = { 512, 4096, 8192, 16384, 20480, 65536, 131072,
					1 << 20, (3 << 20) + 4096 };
	uint8_t *a = malloc(4 << 20), *b = malloc(4 << 20);

	(void)state;
	for (int dg = 0; dg <= 1; dg++) {
		struct gdx_nvmf_ctrl *c = conn(2, 32, dg);

		for (size_t i = 0; i < GDX_ARRAY_SIZE(sizes); i++) {
			uint32_t nsid = sizes[i] % 4096 ? 1 : 1 + (uint32_t)(i & 1);
			uint64_t off = (uint64_t)i * 4096 * 17;

			t_fill(a, sizes[i], i + 100 * dg);
			memset(b, 0, sizes[i]);
			assert_int_equal(gdx_nvmf_write(c, nsid, a, sizes[i], off), 0);
			assert_int_equal(gdx_nvmf_read(c, nsid, b, sizes[i], off), 0);
			assert_memory_equal(a, b, sizes[i]);
		}
		assert_int_equal(gdx_nvmf_flush(c, 1), 0);
		assert_int_equal(gdx_nvmf_write_zeroes(c, 1, 0, 8192), 0);
		assert_int_equal(gdx_nvmf_read(c, 1, b, 8192, 0), 0);
		for (int k = 0; k < 8192; k++)
			assert_int_equal(b[k], 0);
		assert_int_equal(gdx_nvmf_deallocate(c, 2, 0, 65536), 0);
		/* out of range: the target's status reaches the caller */
		assert_int_equal(gdx_nvmf_read(c, 1, b, 4096, NS_BYTES), GDX_E_NVME(0x80));
		gdx_nvmf_disconnect(c);
	}
	free(a);
	free(b);
}

/* A counter of the target's own ("nvmf.target" in its stats), which must be there. */
static uint64_t target_counter(const char *name)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	json_object *root, *set, *v;
	uint64_t n;

	assert_non_null(m);
	assert_int_equal(gdx_nvmf_target_stats_json(tgt, m), 0);
	fclose(m);
	root = json_tokener_parse(text);
	free(text);
	assert_non_null(root);
	assert_true(json_object_object_get_ex(root, "nvmf.target", &set));
	assert_true(json_object_object_get_ex(set, name, &v));
	n = json_object_get_uint64(v);
	json_object_put(root);
	return n;
}

/*
 * Large writes' data goes from the socket straight into the target's I/O
 * buffers: of 32 writes of 128 KiB one after another (each an R2T, then one
 * H2CData PDU), a read for a PDU header takes the data along into the staging
 * buffer, and the target copies it from there, only until a PDU with 32 KiB
 * of data or more has come; then header reads take a page.  Counted as
 * staged_data_bytes; before, each write's first 64 KiB went through it.
 */
static void h2c_data_direct(void **state)
{
	enum { N = 32, SZ = 128 << 10 };
	struct gdx_nvmf_ctrl *c = conn(1, 32, 0);
	uint8_t *a = malloc(SZ), *b = malloc(SZ);
	uint64_t base = target_counter("staged_data_bytes");

	(void)state;
	for (unsigned i = 0; i < N; i++) {
		t_fill(a, SZ, 700 + i);
		assert_int_equal(gdx_nvmf_write(c, 1, a, SZ, (uint64_t)i * SZ), 0);
	}
	/* counted before the responses went out */
	assert_true(target_counter("staged_data_bytes") - base <= SZ + N * 4096);
	for (unsigned i = 0; i < N; i += 7) {
		t_fill(a, SZ, 700 + i);
		assert_int_equal(gdx_nvmf_read(c, 1, b, SZ, (uint64_t)i * SZ), 0);
		assert_memory_equal(a, b, SZ);
	}
	gdx_nvmf_disconnect(c);
	free(a);
	free(b);
}

static void device_memory(void **state)
{
	struct gdx_device *dev;
	struct gdx_nvmf_ctrl *c;
	struct gdx_nvmf_io io[8];
	const size_t n = 1 << 20;
	uint8_t *a = malloc(8 * n), *b = malloc(8 * n);
	void *d;

	(void)state;
	dev = dev_mem(8 * n, &d);
	c = dev_conn(dev, 3);
	t_fill(a, 8 * n, 42);
	assert_int_equal(gdx_memcpy(dev, d, a, 8 * n), 0);
	for (int i = 0; i < 8; i++)
		io[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_WRITE, .nsid = 1,
					      .offset = (uint64_t)i * n, .len = n,
					      .buf = (char *)d + i * n };
	assert_int_equal(gdx_nvmf_submit(c, io, 8), 0);
	assert_int_equal(gdx_memset(dev, d, 0, 8 * n), 0);
	for (int i = 0; i < 8; i++)
		io[i].op = GDX_NVMF_OP_READ;
	assert_int_equal(gdx_nvmf_submit(c, io, 8), 0);
	assert_string_equal(io[0].path, "bounce");
	assert_int_equal(gdx_memcpy(dev, b, d, 8 * n), 0);
	assert_memory_equal(a, b, 8 * n);
	gdx_nvmf_disconnect(c);
	dev_mem_close(dev, d);
	free(a);
	free(b);
}

struct cbstate {
	struct gdx_nvmf_ctrl *c;
	pthread_mutex_t m;
	pthread_cond_t cv;
	unsigned done, outstanding, target;
	int errors;
	uint64_t seed;
};

/* The target's "nvmf.target.lat" object, parsed (caller puts it). */
static json_object *target_lat(json_object **root)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	json_object *lat = NULL;

	assert_non_null(m);
	assert_int_equal(gdx_nvmf_target_stats_json(tgt, m), 0);
	fclose(m);
	*root = json_tokener_parse(text);
	free(text);
	assert_non_null(*root);
	assert_true(json_object_object_get_ex(*root, "nvmf.target.lat", &lat));
	return lat;
}

static double lat_num(json_object *lat, const char *name)
{
	json_object *v;

	assert_true(json_object_object_get_ex(lat, name, &v));
	return json_object_get_double(v);
}

/* Resubmits from the completion callback to keep 32 reads in flight. */
static void callback_depth_on(struct gdx_nvmf_ctrl *c);

static void cb(struct gdx_nvmf_io *io, void *arg)
{
	struct cbstate *st = arg;
	bool again;

	pthread_mutex_lock(&st->m);
	st->errors += io->result != 0;
	again = ++st->done + st->outstanding <= st->target;
	if (!again && !--st->outstanding)
		pthread_cond_signal(&st->cv);
	io->offset = (t_rand(&st->seed) % (NS_BYTES / 4096)) * 4096;
	pthread_mutex_unlock(&st->m);
	if (again && gdx_nvmf_submit_cb(st->c, io, cb, st))
		abort();
}

/*
 * 32 reads kept in flight from callbacks: on two queues of 31, then on one queue
 * of 7, where the receiver's resubmissions find the queue full and must queue.
 */
static void callback_depth(void **state)
{
	for (int round = 0; round < 2; round++)
		callback_depth_on(round ? conn(1, 8, 0) : conn(2, 32, 0));
	(void)state;
}

static void callback_depth_on(struct gdx_nvmf_ctrl *c)
{
	struct cbstate st = { .c = c, .m = PTHREAD_MUTEX_INITIALIZER,
			      .cv = PTHREAD_COND_INITIALIZER, .target = 2000, .seed = 5 };
	struct gdx_nvmf_io io[32];
	uint8_t *buf = malloc(32 * 4096);
	json_object *root0, *root1, *lat0 = target_lat(&root0), *lat1;

	st.outstanding = 32;
	for (int i = 0; i < 32; i++) {
		io[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1,
					      .offset = (uint64_t)i * 4096, .len = 4096,
					      .buf = buf + i * 4096 };
		assert_int_equal(gdx_nvmf_submit_cb(st.c, &io[i], cb, &st), 0);
	}
	pthread_mutex_lock(&st.m);
	while (st.outstanding)
		pthread_cond_wait(&st.cv, &st.m);
	pthread_mutex_unlock(&st.m);
	assert_int_equal(st.errors, 0);
	assert_true(st.done >= st.target);
	/*
	 * The target timed every read: its stage sums grew, the means are
	 * non-negative, the reactors woke with capsules to parse and
	 * spent their time somewhere.
	 */
	/*
	 * A reactor counts a read once its data and response are on the socket,
	 * and its wake-up's capsules when the wake-up ends: the last ones may be
	 * counted after their callbacks ran here.
	 */
	lat1 = target_lat(&root1);
	for (int i = 0; i < 200 && (lat_num(lat1, "reads") < lat_num(lat0, "reads") + st.done ||
				    lat_num(lat1, "wake_cmds") < lat_num(lat0, "wake_cmds") + st.done);
	     i++) {
		json_object_put(root1);
		usleep(10000);
		lat1 = target_lat(&root1);
	}
	assert_true(lat_num(lat1, "reads") >= lat_num(lat0, "reads") + st.done);
	assert_true(lat_num(lat1, "wake_cmds") >= lat_num(lat0, "wake_cmds") + st.done);
	assert_true(lat_num(lat1, "wakes") > lat_num(lat0, "wakes"));
	assert_true(lat_num(lat1, "busy_ns") > lat_num(lat0, "busy_ns"));
	assert_true(lat_num(lat1, "ns_ns") > lat_num(lat0, "ns_ns"));
	assert_true(lat_num(lat1, "lat_pickup_us") >= 0 && lat_num(lat1, "lat_ns_us") > 0 &&
		    lat_num(lat1, "lat_send_us") > 0);
	assert_true(lat_num(lat1, "lat_cmds_per_wake") > 0);
	assert_true(lat_num(lat1, "lat_cmds_per_wake") <= 64.0 * 128);
	json_object_put(root0);
	json_object_put(root1);
	{
		/* the counters add up: each I/O queue's Connect, then every read moving 4 KiB */
		char js[4096];
		json_object *root, *queues, *v;
		uint64_t cmds = 0, bytes = 0;

		assert_true(gdx_nvmf_ctrl_stats_json(c, js, sizeof(js)) > 0);
		root = json_tokener_parse(js);
		assert_non_null(root);
		assert_true(json_object_object_get_ex(root, "queues", &queues));
		for (size_t i = 1; i < json_object_array_length(queues); i++) {
			json_object *q = json_object_array_get_idx(queues, i);

			assert_true(json_object_object_get_ex(q, "cmds", &v));
			cmds += (uint64_t)json_object_get_int64(v);
			assert_true(json_object_object_get_ex(q, "bytes_in", &v));
			bytes += (uint64_t)json_object_get_int64(v);
		}
		assert_int_equal(cmds, st.done + json_object_array_length(queues) - 1);
		assert_int_equal(bytes, (uint64_t)st.done * 4096);
		json_object_put(root);
	}
	/* a bad request is refused at once, the callback never runs */
	io[0].offset = 1;
	assert_int_equal(gdx_nvmf_submit_cb(st.c, &io[0], cb, &st), -EINVAL);
	gdx_nvmf_disconnect(st.c);
	free(buf);
}

/* Reads of pieces into device memory at dbase, a fixed number in flight. */
struct dstate {
	struct gdx_nvmf_ctrl *c;
	pthread_mutex_t m;
	pthread_cond_t cv;
	unsigned next, total, outstanding;
	int errors;
	char *dbase;
	uint64_t *off;	/* piece k is off[k], len[k]; without them, the k-th 16 KiB */
	uint32_t *len;
};

static void dpiece(const struct dstate *st, struct gdx_nvmf_io *io, unsigned k)
{
	io->offset = st->off ? st->off[k] : (uint64_t)k * 16384;
	io->len = st->len ? st->len[k] : 16384;
	io->buf = st->dbase + io->offset;
}

/* Each completion moves its io to the next piece until all are read. */
static void dcb(struct gdx_nvmf_io *io, void *arg)
{
	struct dstate *st = arg;
	unsigned k;

	pthread_mutex_lock(&st->m);
	st->errors += io->result != 0;
	k = st->next < st->total ? st->next++ : UINT32_MAX;
	if (k == UINT32_MAX && !--st->outstanding)
		pthread_cond_signal(&st->cv);
	pthread_mutex_unlock(&st->m);
	if (k == UINT32_MAX)
		return;
	dpiece(st, io, k);
	if (gdx_nvmf_submit_cb(st->c, io, dcb, st))
		abort();
}

/* Reads every piece, 32 at a time, then checks that the device memory holds a (n bytes). */
static void dread_check(struct dstate *st, struct gdx_device *dev, const uint8_t *a, uint8_t *b,
			size_t n)
{
	struct gdx_nvmf_io io[32];

	st->next = st->outstanding = 32;
	for (unsigned i = 0; i < 32; i++) {
		io[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1 };
		dpiece(st, &io[i], i);
		assert_int_equal(gdx_nvmf_submit_cb(st->c, &io[i], dcb, st), 0);
	}
	pthread_mutex_lock(&st->m);
	while (st->outstanding)
		pthread_cond_wait(&st->cv, &st->m);
	pthread_mutex_unlock(&st->m);
	assert_int_equal(st->errors, 0);
	assert_string_equal(io[0].path, "bounce");
	assert_int_equal(gdx_memcpy(dev, b, st->dbase, n), 0);
	assert_memory_equal(a, b, n);
}

/* A counter of the controller itself (before its queues). */
static uint64_t ctrl_counter(struct gdx_nvmf_ctrl *c, const char *name)
{
	char buf[16384], key[64];
	const char *p;

	assert_true(gdx_nvmf_ctrl_stats_json(c, buf, sizeof(buf)) > 0);
	snprintf(key, sizeof(key), "\"%s\": ", name);
	p = strstr(buf, key);
	assert_non_null(p);
	return strtoull(p + strlen(key), NULL, 10);
}

/* Many device reads in flight: completions are held until their copies land. */
static void device_depth(void **state)
{
	const size_t n = 4 << 20;
	struct dstate st = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
			     .total = (unsigned)(n / 16384) };
	struct gdx_device *dev;
	uint8_t *a = malloc(n), *b = malloc(n);
	void *d;

	(void)state;
	dev = dev_mem(n, &d);
	assert_int_equal(gdx_memset(dev, d, 0, n), 0);
	assert_int_equal(gdx_config_set("nvmf.host.bounce_chunk", "8k"), 0);
	st.c = dev_conn(dev, 2);
	t_fill(a, n, 77);
	assert_int_equal(gdx_nvmf_write(st.c, 1, a, n, 0), 0);
	st.dbase = d;
	dread_check(&st, dev, a, b, n);
	/* the device named at connect had its staging set up then */
	assert_int_equal(ctrl_counter(st.c, "stage_late_opens"), 0);
	gdx_nvmf_disconnect(st.c);
	dev_mem_close(dev, d);
	free(a);
	free(b);
}

/* Sums a per-queue counter over the I/O queues of c (queue 0, the admin queue, left out). */
static uint64_t io_counter(struct gdx_nvmf_ctrl *c, const char *name)
{
	char buf[16384], key[64];
	uint64_t sum = 0;
	const char *p;
	bool admin = true;

	assert_true(gdx_nvmf_ctrl_stats_json(c, buf, sizeof(buf)) > 0);
	snprintf(key, sizeof(key), "\"%s\": ", name);
	for (p = strstr(buf, key); p; p = strstr(p + 1, key)) {
		if (!admin)
			sum += strtoull(p + strlen(key), NULL, 10);
		admin = false;
	}
	return sum;
}

/*
 * Device reads of mixed sizes share a 24 KiB ring of 8 KiB pieces: they are
 * packed back to back, wrap at the ring's end, and every byte lands where
 * it belongs -- with the idle receiver blocking on the copies at once,
 * polling them first, and with copies enqueued in batches of up to 8.  One
 * read at a time records an event per 8 KiB of ring, not per read, and
 * waits once per read.
 */
static void device_ring_packing(void **state)
{
	static const uint32_t sizes[] = { 512, 4096, 1536, 12800, 8192, 3584, 1024 };
	const size_t n = 2 << 20;
	uint8_t *a = malloc(n), *b = malloc(n);
	struct gdx_device *dev;
	unsigned total = 0;
	uint64_t *off = calloc(n / 512, sizeof(*off));
	uint32_t *len = calloc(n / 512, sizeof(*len));
	void *d;

	(void)state;
	for (uint64_t at = 0; at < n; total++) {
		off[total] = at;
		len[total] = (uint32_t)GDX_MIN((uint64_t)sizes[total % GDX_ARRAY_SIZE(sizes)],
					       n - at);
		at += len[total];
	}
	assert_true(total > 32);
	dev = dev_mem(n, &d);
	assert_int_equal(gdx_config_set("nvmf.host.bounce_chunk", "8k"), 0);
	assert_int_equal(gdx_config_set("nvmf.host.bounce_chunks", "3"), 0);
	/* The queues' own streams: the copy agent (the default) has its own test. */
	assert_int_equal(gdx_config_set("nvmf.host.copy_agent", "0"), 0);
	/*
	 * events: 0 waiting at once, 1 polling first; done word: 2 batches, 3 the
	 * default, 4 each copy posted before the held reads complete (post_first)
	 */
	for (int mode = 0; mode < 5; mode++) {
		struct dstate st = { .m = PTHREAD_MUTEX_INITIALIZER,
				     .cv = PTHREAD_COND_INITIALIZER, .total = total, .dbase = d,
				     .off = off, .len = len };

		assert_int_equal(gdx_config_set("nvmf.host.copy_poll_us", mode == 1 ? "50" : "0"), 0);
		assert_int_equal(gdx_config_set("nvmf.host.copy_batch", mode == 2 ? "8" : "1"), 0);
		assert_int_equal(gdx_config_set("nvmf.host.copy_word", mode >= 2 ? "1" : "0"), 0);
		assert_int_equal(gdx_config_set("nvmf.host.post_first", mode == 4 ? "1" : "0"), 0);
		/* the polling mode runs untimed */
		assert_int_equal(gdx_config_set("nvmf.host.lat_stats", mode == 1 ? "0" : "1"), 0);
		assert_int_equal(gdx_memset(dev, d, 0, n), 0);
		st.c = dev_conn(dev, 2);
		t_fill(a, n, 91 + (unsigned)mode);
		assert_int_equal(gdx_nvmf_write(st.c, 1, a, n, 0), 0);
		dread_check(&st, dev, a, b, n);
		assert_true(io_counter(st.c, "h2d_copies") >= total);
		/* every read timed (each is one command), none when the knob is off */
		if (mode == 1) {
			assert_int_equal(io_counter(st.c, "lat_reads"), 0);
			assert_int_equal(io_counter(st.c, "lat_data_ns"), 0);
		} else {
			assert_true(io_counter(st.c, "lat_reads") >= total);
			assert_true(io_counter(st.c, "lat_data_ns") > 0);
			/* reads complete one by one or several together, never more often */
			assert_true(io_counter(st.c, "lat_releases") > 0);
		}
		/* with a done word the receiver never asks the device how far the copies got */
		if (mode >= 2)
			assert_int_equal(io_counter(st.c, "dev_queries"), 0);
		if (!mode) {
			uint64_t rec = io_counter(st.c, "event_records");
			uint64_t waits = io_counter(st.c, "dev_waits");

			for (unsigned i = 0; i < 64; i++)
				assert_int_equal(gdx_nvmf_read(st.c, 1, (char *)d + i * 4096, 4096,
							       (uint64_t)i * 4096), 0);
			assert_true(io_counter(st.c, "event_records") - rec <= 64 * 4096 / 8192);
			assert_true(io_counter(st.c, "dev_waits") - waits <= 64);
			assert_int_equal(gdx_memcpy(dev, b, d, n), 0);
			assert_memory_equal(a, b, n);
		}
		gdx_nvmf_disconnect(st.c);
	}
	dev_mem_close(dev, d);
	free(off);
	free(len);
	free(a);
	free(b);
}

/*
 * With a copy agent (nvmf.host.copy_agent): six I/O queues served by four
 * workers, 32 reads of random sizes in flight, pieces of up to a 16 KiB
 * chunk: every byte lands where it belongs and the receivers call into the
 * device for none of them.  Then (emulated device) workers that fault after
 * 40 copies end the queues they serve: each read in flight there fails or is
 * resubmitted after the reconnect (max_retries 1; which, timing decides), and
 * nothing hangs.
 */
static void device_copy_agent(void **state)
{
	const size_t n = 4 << 20;
	uint8_t *a = malloc(n), *b = malloc(n);
	uint64_t *off = calloc(n / 512, sizeof(*off)), seed = 4242;
	uint32_t *len = calloc(n / 512, sizeof(*len));
	struct gdx_nvmf_host_opts o;
	struct gdx_device *dev;
	unsigned total = 0;
	void *d;

	(void)state;
	for (uint64_t at = 0; at < n; total++) {
		off[total] = at;
		len[total] = (uint32_t)GDX_MIN(512 * (1 + t_rand(&seed) % 80), n - at);
		at += len[total];
	}
	dev = dev_mem(n, &d);
	assert_int_equal(gdx_config_set("nvmf.host.bounce_chunk", "16k"), 0);
	assert_int_equal(gdx_config_set("nvmf.host.copy_agent", "4"), 0);
	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.dev = dev;
	o.nr_io_queues = 6;
	/* then each copy posted before the reads held so far complete */
	for (int pf = 0; pf < 2; pf++) {
		struct dstate st = { .m = PTHREAD_MUTEX_INITIALIZER,
				     .cv = PTHREAD_COND_INITIALIZER, .total = total, .dbase = d,
				     .off = off, .len = len };

		assert_int_equal(gdx_config_set("nvmf.host.post_first", pf ? "1" : "0"), 0);
		assert_int_equal(gdx_memset(dev, d, 0, n), 0);
		assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &o, &st.c), 0);
		t_fill(a, n, 4343 + (unsigned)pf);
		assert_int_equal(gdx_nvmf_write(st.c, 1, a, n, 0), 0);
		dread_check(&st, dev, a, b, n);
		assert_true(io_counter(st.c, "h2d_copies") >= total);
		assert_int_equal(io_counter(st.c, "copy_calls"), 0);
		assert_int_equal(io_counter(st.c, "event_records"), 0);
		assert_int_equal(io_counter(st.c, "dev_queries"), 0);
		gdx_nvmf_disconnect(st.c);
	}
	gdx_config_set("nvmf.host.post_first", NULL);
	if (!strcmp(gdx_device_kind(dev), "emulated")) {
		/* 32 reads, none submitted from a callback: each failure costs a reconnect */
		struct dstate st = { .m = PTHREAD_MUTEX_INITIALIZER,
				     .cv = PTHREAD_COND_INITIALIZER, .total = 32, .dbase = d,
				     .off = off, .len = len };
		struct gdx_nvmf_io io[32];
		struct timespec until;
		int rc = 0;

		assert_int_equal(gdx_config_set("emulated.agent_fault_after", "40"), 0);
		o.max_retries = 1;
		o.reconnect_delay_ms = 20;
		assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &o, &st.c), 0);
		st.next = st.outstanding = 32;
		for (unsigned i = 0; i < 32; i++) {
			io[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1 };
			dpiece(&st, &io[i], i);
			assert_int_equal(gdx_nvmf_submit_cb(st.c, &io[i], dcb, &st), 0);
		}
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 30;
		pthread_mutex_lock(&st.m);
		while (st.outstanding && rc != ETIMEDOUT)
			rc = pthread_cond_timedwait(&st.cv, &st.m, &until);
		pthread_mutex_unlock(&st.m);
		assert_int_not_equal(rc, ETIMEDOUT);
		assert_true(st.errors > 0 || ctrl_counter(st.c, "resubmitted") > 0);
		/*
		 * The controller keeps its staging context, and the failed agent in
		 * it: the reconnects' queues copy on streams, and their reads land
		 * (before: each read failed on the dead agent and cost another
		 * reconnect, for ever).
		 */
		assert_int_equal(gdx_config_set("emulated.agent_fault_after", "0"), 0);
		assert_int_equal(gdx_memset(dev, d, 0, n), 0);
		for (int i = 0; i < 50 && (rc = gdx_nvmf_read(st.c, 1, d, n, 0)); i++)
			poll(NULL, 0, 20);
		assert_int_equal(rc, 0);
		assert_int_equal(gdx_memcpy(dev, b, d, n), 0);
		assert_memory_equal(a, b, n);
		for (int i = 0; i < 4; i++)
			assert_int_equal(gdx_nvmf_read(st.c, 1, d, n, 0), 0);
		gdx_nvmf_disconnect(st.c);
	}
	dev_mem_close(dev, d);
	free(off);
	free(len);
	free(a);
	free(b);
}

struct reader {
	struct gdx_nvmf_ctrl *c;
	const uint8_t *want;
	atomic_int stop;
	atomic_int rounds;	/* the main thread watches it */
	int fails, mismatches;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct gdx_nvmf_io io[16];
	uint8_t *buf = malloc(16 << 16);

	for (; !r->stop; r->rounds++) {
		for (int i = 0; i < 16; i++)
			io[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1,
						      .offset = (uint64_t)i << 16, .len = 1 << 16,
						      .buf = buf + (i << 16) };
		if (gdx_nvmf_submit(r->c, io, 16))
			r->fails++;
		else if (memcmp(buf, r->want, 16 << 16))
			r->mismatches++;
	}
	free(buf);
	return NULL;
}

/*
 * A one-chunk ring: after a read that leaves the ring part full, a full-chunk
 * piece can fit neither in the tail nor, with the tail skipped, in the ring:
 * it must be split at the ring's end rather than wait for room forever.
 */
static void device_ring_one_chunk(void **state)
{
	static const uint32_t sizes[] = { 512, 8192, 4096, 8192, 1536, 16384 };
	const size_t n = 64 << 10;
	uint8_t *a = malloc(n), *b = malloc(n);
	struct gdx_nvmf_ctrl *c;
	struct gdx_device *dev;
	uint64_t at = 0;
	void *d;

	(void)state;
	dev = dev_mem(n, &d);
	assert_int_equal(gdx_config_set("nvmf.host.bounce_chunk", "8k"), 0);
	assert_int_equal(gdx_config_set("nvmf.host.bounce_chunks", "1"), 0);
	assert_int_equal(gdx_memset(dev, d, 0, n), 0);
	c = dev_conn(dev, 1);
	t_fill(a, n, 57);
	assert_int_equal(gdx_nvmf_write(c, 1, a, n, 0), 0);
	for (unsigned i = 0; at < n; i++) {
		uint32_t len = (uint32_t)GDX_MIN((uint64_t)sizes[i % GDX_ARRAY_SIZE(sizes)], n - at);

		assert_int_equal(gdx_nvmf_read(c, 1, (char *)d + at, len, at), 0);
		at += len;
	}
	assert_int_equal(gdx_memcpy(dev, b, d, n), 0);
	assert_memory_equal(a, b, n);
	gdx_nvmf_disconnect(c);
	dev_mem_close(dev, d);
	free(a);
	free(b);
}

/*
 * A connection opened without a device sets up each queue's device side
 * (ring, stream, marks, the copy agent and its module) at the queue's first
 * device read.  None of those device calls may run under the queue's lock: a
 * stream-ordered submission's worker takes that lock to send while its
 * stream may hold up the device call (CUDA synchronizes the context in some,
 * as at a module load).  The device's set-up ops are wrapped to see whether
 * the calling thread holds a queue lock of the connection (glibc records a
 * mutex's owner).
 */
static struct nh_ctrl *_Atomic watched;
static atomic_uint locked_calls;

static void watch(const char *op)
{
	struct nh_ctrl *c = atomic_load(&watched);
	pid_t me = gettid();
	bool held = false;

	(void)op;
	for (unsigned i = 0; c && i < c->nioq; i++)
		held |= c->ioq[i]->lock.__data.__owner == me;
	if (held)
		atomic_fetch_add(&locked_calls, 1);
}

static void device_setup_outside_queue_lock(void **state)
{
	const size_t n = 1 << 20;
	uint8_t *a = malloc(n), *b = malloc(n);
	struct gdx_nvmf_host_opts o;
	struct gdx_nvmf_io io[8];
	struct gdx_nvmf_ctrl *c;
	struct gdx_device *dev;
	void *d;

	(void)state;
	dev = dev_mem(n, &d);
	atomic_store(&locked_calls, 0);
	dev_watch_start(dev, watch);
	assert_int_equal(gdx_config_set("nvmf.host.copy_agent", "2"), 0);
	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = 2;
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &o, &c), 0);
	atomic_store(&watched, (struct nh_ctrl *)c);
	t_fill(a, n, 77);
	assert_int_equal(gdx_nvmf_write(c, 1, a, n, 0), 0);
	/* eight reads over both queues: each queue's first sets it up */
	for (int i = 0; i < 8; i++)
		io[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1,
					      .offset = (uint64_t)i * (n / 8), .len = n / 8,
					      .buf = (char *)d + i * (n / 8) };
	assert_int_equal(gdx_nvmf_submit(c, io, 8), 0);
	assert_int_equal(gdx_memcpy(dev, b, d, n), 0);
	assert_memory_equal(a, b, n);
	atomic_store(&watched, NULL);
	gdx_nvmf_disconnect(c);
	dev_watch_stop(dev);
	assert_int_equal(atomic_load(&locked_calls), 0);
	if (dev->ops->agent_launch)
		assert_int_equal(atomic_load(&dw_agent_starts), 1);
	dev_mem_close(dev, d);
	free(a);
	free(b);
}

/*
 * A device read submitted from a completion callback, on a receive thread, to
 * a queue whose device side is not set up: the receive thread must not set it
 * up (the agent's start loads its module, which on CUDA may synchronise the
 * context while a stream waits for a completion only a receiver delivers).
 * The control thread sets it up and sends the read, through the queue's
 * backlog when the queue is full; a set-up that fails ends each such read
 * once, with the error.  The device's set-up ops are wrapped to count the
 * calls made on receive threads.
 */
static atomic_uint rx_setup_calls;

/* Lookups may run anywhere; what sets the device up must not on a receive thread. */
static void watch_rx(const char *op)
{
	if (strcmp(op, "pointer_query") && nh_queue_rx_self())
		atomic_fetch_add(&rx_setup_calls, 1);
}

struct chain {
	struct gdx_nvmf_ctrl *c;
	pthread_mutex_t m;
	pthread_cond_t cv;
	void *d;			/* device memory the callbacks read into */
	struct gdx_nvmf_io dio[16];	/* two device reads per host read */
	unsigned ndone, nfail;
	int err;			/* the first device read's error */
};

static void chain_dev_cb(struct gdx_nvmf_io *io, void *arg)
{
	struct chain *ch = arg;

	pthread_mutex_lock(&ch->m);
	if (io->result && !ch->nfail++)
		ch->err = io->result;
	ch->ndone++;
	pthread_cond_broadcast(&ch->cv);
	pthread_mutex_unlock(&ch->m);
}

/* A host read done: its two device reads go out from this receive thread. */
static void chain_host_cb(struct gdx_nvmf_io *io, void *arg)
{
	struct chain *ch = arg;
	unsigned k = (unsigned)(io->offset / 65536);

	assert_int_equal(io->result, 0);
	for (unsigned j = 2 * k; j < 2 * k + 2; j++) {
		ch->dio[j] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1,
						   .offset = (uint64_t)j * 32768, .len = 32768,
						   .buf = (char *)ch->d + j * 32768 };
		if (gdx_nvmf_submit_cb(ch->c, &ch->dio[j], chain_dev_cb, ch))
			abort();
	}
}

/* Eight host reads on one queue of depth 4; each callback sends two device reads. */
static void chain_run(struct chain *ch, uint8_t *host)
{
	struct gdx_nvmf_io hio[8];
	struct timespec ts;

	for (unsigned k = 0; k < 8; k++) {
		hio[k] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1,
					       .offset = (uint64_t)k * 65536, .len = 4096,
					       .buf = host + k * 4096 };
		assert_int_equal(gdx_nvmf_submit_cb(ch->c, &hio[k], chain_host_cb, ch), 0);
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	pthread_mutex_lock(&ch->m);
	while (ch->ndone < 16)
		assert_int_equal(pthread_cond_timedwait(&ch->cv, &ch->m, &ts), 0);
	pthread_mutex_unlock(&ch->m);
}

static int fail_stream_create(void *priv, void *stream, void *native)
{
	(void)priv;
	(void)stream;
	(void)native;
	return -ENOMEM;
}

static void device_setup_off_receivers(void **state)
{
	const size_t n = 16 * 32768;
	uint8_t *a = malloc(n), *b = malloc(n), *host = malloc(8 * 4096);
	struct chain ch = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct gdx_nvmf_host_opts o;
	struct gdx_device *dev;

	(void)state;
	dev = dev_mem(n, &ch.d);
	assert_int_equal(gdx_config_set("nvmf.host.copy_agent", "2"), 0);
	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = 1;
	o.queue_depth = 4;
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &o, &ch.c), 0);
	t_fill(a, n, 91);
	assert_int_equal(gdx_nvmf_write(ch.c, 1, a, n, 0), 0);
	atomic_store(&rx_setup_calls, 0);
	dev_watch_start(dev, watch_rx);
	chain_run(&ch, host);
	assert_int_equal(ch.nfail, 0);
	/* a device not named at connect: staging set up once, at the first device read */
	assert_int_equal(ctrl_counter(ch.c, "stage_late_opens"), 1);
	assert_int_equal(gdx_memcpy(dev, b, ch.d, n), 0);
	assert_memory_equal(a, b, n);
	gdx_nvmf_disconnect(ch.c);
	dev_watch_stop(dev);
	assert_int_equal(atomic_load(&rx_setup_calls), 0);

	/* A set-up that fails: every device read ends once, with its error. */
	ch.ndone = 0;
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &o, &ch.c), 0);
	atomic_store(&rx_setup_calls, 0);
	dev_watch_start(dev, watch_rx);
	dw_ops.stream_create = fail_stream_create;
	chain_run(&ch, host);
	assert_int_equal(ch.nfail, 16);
	assert_int_equal(ch.err, -ENOMEM);
	gdx_nvmf_disconnect(ch.c);
	dev_watch_stop(dev);
	assert_int_equal(ch.ndone, 16);
	assert_int_equal(atomic_load(&rx_setup_calls), 0);
	dev_mem_close(dev, ch.d);
	free(a);
	free(b);
	free(host);
}

struct switches {
	long *tid, *sw;
	unsigned n, k;
};

static bool count_switches(long tid, FILE *f, void *arg)
{
	struct switches *s = arg;
	char line[128];

	s->tid[s->k] = tid;
	s->sw[s->k] = 0;
	while (fgets(line, sizeof(line), f)) {
		long v;

		if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
		    sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
			s->sw[s->k] += v;
	}
	return ++s->k == s->n;
}

/* Context switches of each thread of this process, by thread id (at most n). */
static unsigned task_switches(long *tid, long *sw, unsigned n)
{
	struct switches s = { tid, sw, n, 0 };

	t_threads_each("status", count_switches, &s);
	return s.k;
}

/*
 * Reads one at a time wake the queue's receiver once each and nothing else
 * of the host: the control thread (which sleeps on the condition a teardown
 * waits on for the submitters to leave) stays asleep between its ticks.
 */
static void quiet_control_thread(void **state)
{
	enum { READS = 2000, MAXT = 256 };
	long tid0[MAXT], sw0[MAXT], tid1[MAXT], sw1[MAXT], tid2[MAXT], sw2[MAXT];
	unsigned n0, n1, n2, fresh = 0;
	long top[2] = { 0, 0 };	/* the most switches of a fresh thread, and the next */
	struct gdx_nvmf_ctrl *c;
	uint8_t buf[4096];

	(void)state;
	n0 = task_switches(tid0, sw0, MAXT);
	c = conn(1, 32, 0);
	n1 = task_switches(tid1, sw1, MAXT);
	for (int i = 0; i < READS; i++)
		assert_int_equal(gdx_nvmf_read(c, 2, buf, sizeof(buf), (uint64_t)(i % 64) * 4096),
				 0);
	n2 = task_switches(tid2, sw2, MAXT);
	/* the threads the connection started: receivers of both queues, control thread */
	for (unsigned i = 0; i < n1; i++) {
		bool old = false;

		for (unsigned j = 0; j < n0 && !old; j++)
			old = tid0[j] == tid1[i];
		for (unsigned j = 0; j < n2 && !old; j++) {
			if (tid2[j] != tid1[i])
				continue;
			long d = sw2[j] - sw1[i];

			fresh++;
			if (d > top[0]) {
				top[1] = top[0];
				top[0] = d;
			} else if (d > top[1]) {
				top[1] = d;
			}
		}
	}
	assert_true(fresh >= 3);
	/*
	 * The I/O queue's receiver is the busiest; every other thread sleeps
	 * through the reads (the control thread ticks every 50 ms, the admin
	 * queue's receiver sees keep-alives only).
	 */
	assert_true(top[1] < READS / 4);
	gdx_nvmf_disconnect(c);
}

/* The target dies and comes back on the same port; the reads in flight are resubmitted. */
static void target_restart(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(2, 32, 0);
	struct gdx_nvmf_ctrl_info in;
	uint8_t *want = malloc(16 << 16);
	struct reader r = { .c = c, .want = want };
	pthread_t t;
	char svc[16];

	(void)state;
	t_fill(want, 16 << 16, 9);
	assert_int_equal(gdx_nvmf_write(c, 1, want, 16 << 16, 0), 0);
	pthread_create(&t, NULL, reader_main, &r);
	while (r.rounds < 3)
		usleep(1000);
	snprintf(svc, sizeof(svc), "%s", port);
	gdx_nvmf_target_destroy(tgt);
	tgt = NULL;
	usleep(150000);
	assert_int_equal(target_up(svc), 0);
	assert_string_equal(port, svc);
	for (int i = 0; i < 500; i++) {
		assert_int_equal(gdx_nvmf_ctrl_info(c, &in), 0);
		if (in.reconnects)
			break;
		usleep(10000);
	}
	{
		int before = r.rounds;

		while (r.rounds < before + 3)
			usleep(1000);
	}
	r.stop = 1;
	pthread_join(t, NULL);
	assert_int_equal(r.fails, 0);
	assert_int_equal(r.mismatches, 0);
	assert_int_equal(in.reconnects, 1);
	gdx_nvmf_disconnect(c);
	free(want);
}

/* The CPUs the receiver of queue qid may run on, found by its thread's name. */
static bool rx_cpus(unsigned qid, cpu_set_t *set)
{
	char name[20];

	snprintf(name, sizeof(name), "nvmf-rx%u", qid);
	return t_thread_cpus(name, set);
}

/* The k-th (mod their count) of the CPUs in allowed. */
static int nth_cpu(const cpu_set_t *allowed, unsigned k)
{
	k %= (unsigned)CPU_COUNT(allowed);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, allowed) && k-- == 0)
			return c;
	return -1;
}

/*
 * nvmf.host.cpus: I/O queue i's receiver runs on the i-th CPU this process
 * may run on (all: round-robin, the kernel host's placement), or of a list;
 * none, and auto over TCP, leave them, and the admin queue's always, where
 * the process may run.  A list that is not one fails the connect.
 */
static void queue_cpus(void **state)
{
	static const char *const modes[] = { "all", "last", "none", NULL };
	cpu_set_t allowed, set;
	int last;
	char spec[16];

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	last = nth_cpu(&allowed, (unsigned)CPU_COUNT(&allowed) - 1);
	snprintf(spec, sizeof(spec), "%d", last);
	for (unsigned m = 0; m < GDX_ARRAY_SIZE(modes); m++) {
		struct gdx_nvmf_ctrl *c;

		assert_int_equal(gdx_config_set("nvmf.host.cpus", m == 1 ? spec : modes[m]), 0);
		c = conn(3, 8, 0);
		assert_true(rx_cpus(0, &set));
		assert_true(CPU_EQUAL(&set, &allowed));
		for (unsigned qid = 1; qid <= 3; qid++) {
			int want = m == 0 ? nth_cpu(&allowed, qid - 1) : last;

			assert_true(rx_cpus(qid, &set));
			if (m >= 2) {
				assert_true(CPU_EQUAL(&set, &allowed));
				continue;
			}
			assert_int_equal(CPU_COUNT(&set), 1);
			assert_true(CPU_ISSET(want, &set));
		}
		gdx_nvmf_disconnect(c);
	}
	{
		struct gdx_nvmf_host_opts o;
		struct gdx_nvmf_ctrl *c = NULL;

		assert_int_equal(gdx_config_set("nvmf.host.cpus", "0-"), 0);
		gdx_nvmf_host_opts_init(&o, sizeof(o));
		assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &o, &c), -EINVAL);
		assert_null(c);
	}
	gdx_config_set("nvmf.host.cpus", NULL);
}

/* Commands each I/O queue of c has sent so far (its Connect included). */
static void queue_cmds(struct gdx_nvmf_ctrl *c, uint64_t *cmds, unsigned n)
{
	char js[4096];
	json_object *root, *queues, *v;

	assert_true(gdx_nvmf_ctrl_stats_json(c, js, sizeof(js)) > 0);
	root = json_tokener_parse(js);
	assert_non_null(root);
	assert_true(json_object_object_get_ex(root, "queues", &queues));
	assert_int_equal(json_object_array_length(queues), n + 1);
	for (unsigned i = 0; i < n; i++) {
		json_object *q = json_object_array_get_idx(queues, i + 1);

		assert_true(json_object_object_get_ex(q, "cmds", &v));
		cmds[i] = (uint64_t)json_object_get_int64(v);
	}
	json_object_put(root);
}

/*
 * With the receivers pinned, a thread's requests go to the queue whose
 * receiver runs on its CPU, as the Linux host maps CPUs to queues: over
 * RDMA that CPU is where a software NIC and nvmet-rdma do the command's
 * work.  Before, a thread at depth 1 stayed on the queue it used last,
 * wherever it ran.  Unpinned (none), the queues take turns as before.
 */
static void cpu_queue(void **state)
{
	static char b[4096];
	cpu_set_t allowed, one;
	uint64_t c0[2], c1[2];
	struct gdx_nvmf_ctrl *c;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	if (CPU_COUNT(&allowed) < 2)
		skip();
	assert_int_equal(gdx_config_set("nvmf.host.cpus", "all"), 0);
	c = conn(2, 8, 0);
	for (unsigned k = 0; k < 4; k++) {
		unsigned want = (k + 1) % 2;

		CPU_ZERO(&one);
		CPU_SET(nth_cpu(&allowed, want), &one);
		assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
		queue_cmds(c, c0, 2);
		for (unsigned i = 0; i < 8; i++)
			assert_int_equal(gdx_nvmf_read(c, 1, b, sizeof(b), (uint64_t)i * 4096), 0);
		queue_cmds(c, c1, 2);
		assert_int_equal(c1[want] - c0[want], 8);
		assert_int_equal(c1[!want] - c0[!want], 0);
	}
	assert_int_equal(sched_setaffinity(0, sizeof(allowed), &allowed), 0);
	gdx_nvmf_disconnect(c);
	gdx_config_set("nvmf.host.cpus", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(discover_identify),
		cmocka_unit_test(queue_cpus),
		cmocka_unit_test(cpu_queue),
		cmocka_unit_test(io_sizes),
		cmocka_unit_test(h2c_data_direct),
		cmocka_unit_test(device_memory),
		cmocka_unit_test(callback_depth),
		cmocka_unit_test(device_depth),
		cmocka_unit_test(device_ring_packing),
		cmocka_unit_test(device_ring_one_chunk),
		cmocka_unit_test(device_copy_agent),
		cmocka_unit_test(device_setup_outside_queue_lock),
		cmocka_unit_test(device_setup_off_receivers),
		cmocka_unit_test(quiet_control_thread),
		cmocka_unit_test(target_restart),
	};

	if (!getenv("GDX_LOG_LEVEL"))
		gdx_log_set_level(GDX_LOG_ERROR);
	return cmocka_run_group_tests(tests, setup, teardown);
}
