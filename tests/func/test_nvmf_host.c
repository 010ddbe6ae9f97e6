/* SPDX-License-Identifier: MIT */
/*
 * The NVMe/TCP host against the scripted mock controller on loopback:
 * discovery, connect and identify, every I/O kind into host and (emulated)
 * device memory, digests, batches, stream-ordered I/O, and the faults: every
 * malformed PDU ends the connection with an H2CTermReq and an error, a drop
 * or a target restart is survived with the in-flight I/O resubmitted once,
 * timeouts, aborts, keep-alive and giving up after ctrl_loss_tmo.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "common/config.h"
#include "common/util.h"
#include "nvmf/host/host.h"
#include "nvmf_mock.h"

static struct mock *m;
static char port[16];
static bool m_refuses;

static int start(const struct mock_opts *o)
{
	struct mock_opts d;

	if (!o) {
		mock_opts_default(&d);
		o = &d;
	}
	m = mock_create(o);
	m_refuses = o->refuse_sqflow;
	snprintf(port, sizeof(port), "%d", mock_listen(m, 0));
	return 0;
}

static int stop(void **state)
{
	(void)state;
	mock_destroy(m);
	m = NULL;
	return 0;
}

static int setup_default(void **state)
{
	(void)state;
	return start(NULL);
}

/* A controller of the mock, connected with o. */
static struct gdx_nvmf_ctrl *conn_opts(const struct gdx_nvmf_host_opts *o)
{
	struct gdx_nvmf_ctrl *c = NULL;

	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, MOCK_NQN, o, &c), 0);
	return c;
}

static struct gdx_nvmf_ctrl *conn(unsigned queues, int hd, int dd)
{
	struct gdx_nvmf_host_opts o;

	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = queues;
	o.hdr_digest = hd;
	o.data_digest = dd;
	o.reconnect_delay_ms = 50;
	o.io_timeout_ms = 5000;
	return conn_opts(&o);
}

/* Waits up to tries * 10 ms for c's first reconnect; returns its reconnects. */
static unsigned wait_reconnect(struct gdx_nvmf_ctrl *c, int tries)
{
	struct gdx_nvmf_ctrl_info in;

	for (int i = 0; i < tries; i++) {
		assert_int_equal(gdx_nvmf_ctrl_info(c, &in), 0);
		if (in.reconnects)
			break;
		usleep(10000);
	}
	return in.reconnects;
}

static void connect_identify(void **state)
{
	struct gdx_nvmf_ctrl_info in;
	struct gdx_nvmf_ns_info ns;
	struct gdx_nvmf_ctrl *c = conn(2, 0, 0);
	struct mock_stats st;
	uint32_t ids[4];

	(void)state;
	assert_int_equal(gdx_nvmf_ctrl_info(c, &in), 0);
	assert_string_equal(in.mn, "gdx test mock");
	assert_string_equal(in.sn, "MOCK0001");
	assert_string_equal(in.subnqn, MOCK_NQN);
	assert_int_equal(in.nr_io_queues, 2);
	assert_int_equal(in.queue_depth, 127);
	assert_int_equal(in.ver, 0x00010300);
	assert_int_equal(gdx_nvmf_identify_ns(c, 1, &ns), 0);
	assert_int_equal(ns.block_size, 512);
	assert_int_equal(ns.nsze, 8192);
	assert_int_equal(gdx_nvmf_identify_ns(c, 2, &ns), -ENOENT);
	assert_int_equal(gdx_nvmf_ns_list(c, ids, 4), 1);
	assert_int_equal(ids[0], 1);
	assert_int_equal(gdx_nvmf_ctrl_state(c), GDX_NVMF_LIVE);
	assert_int_equal(gdx_nvmf_disconnect(c), 0);
	mock_stats(m, &st);
	assert_int_equal(st.connects, 1);
	assert_int_equal(st.io_connects, 2);
	assert_int_equal(st.shutdowns, 1);
}

static void discover(void **state)
{
	struct gdx_nvmf_discovery_log *log = NULL;

	(void)state;
	assert_int_equal(gdx_nvmf_discover("127.0.0.1", port, NULL, &log), 0);
	assert_int_equal(log->numrec, 1);
	assert_int_equal(log->genctr, 7);
	assert_int_equal(log->entries[0].trtype, 3);
	assert_int_equal(log->entries[0].subtype, 2);
	assert_string_equal(log->entries[0].subnqn, MOCK_NQN);
	assert_string_equal(log->entries[0].trsvcid, port);
	assert_string_equal(log->entries[0].traddr, "127.0.0.1");
	free(log);
}

static void wrong_nqn_refused(void **state)
{
	struct gdx_nvmf_host_opts o;
	struct gdx_nvmf_ctrl *c;

	(void)state;
	gdx_nvmf_host_opts_init(&o, sizeof(o));
	/* the target's status, not an errno: Connect Invalid Parameters */
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, "nqn.2026-11.io.gdx:nope", &o, &c),
			 GDX_E_NVME(0x182));
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", "1", MOCK_NQN, &o, &c), -ECONNREFUSED);
}

/* Host memory: large writes go through R2T/H2CData, small ones in-capsule. */
static void rw_host(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(2, 0, 0);
	const size_t n = 1 << 20;
	uint8_t *a = malloc(n), *b = malloc(n + 64);

	(void)state;
	t_fill(a, n, 11);
	memset(b + n, 0xee, 64);
	assert_int_equal(gdx_nvmf_write(c, 1, a, n, 4096), 0);
	assert_memory_equal(mock_ram(m) + 4096, a, n);
	assert_int_equal(gdx_nvmf_write(c, 1, a + 512, 4096, 0), 0);
	assert_memory_equal(mock_ram(m), a + 512, 4096);
	assert_int_equal(gdx_nvmf_read(c, 1, b, n, 4096), 0);
	assert_memory_equal(a, b, n);
	for (int i = 0; i < 64; i++)
		assert_int_equal(b[n + i], 0xee);
	gdx_nvmf_disconnect(c);
	free(a);
	free(b);
}

static void bad_requests(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(1, 0, 0);
	struct gdx_nvmf_io io = { .op = GDX_NVMF_OP_READ, .nsid = 1, .offset = 8191 * 512,
				  .len = 1024 };
	uint8_t buf[4096];

	(void)state;
	assert_int_equal(gdx_nvmf_read(c, 1, buf, 512, 100), -EINVAL);
	assert_int_equal(gdx_nvmf_read(c, 1, buf, 100, 0), -EINVAL);
	assert_int_equal(gdx_nvmf_read(c, 1, NULL, 512, 0), -EINVAL);
	assert_int_equal(gdx_nvmf_read(c, 7, buf, 512, 0), -ENOENT);
	io.buf = buf;
	assert_int_equal(gdx_nvmf_submit(c, &io, 1), GDX_E_NVME(0x80));	/* LBA out of range */
	assert_int_equal(io.result, GDX_E_NVME(0x80));
	assert_int_equal(io.nvme_status, 0x80);
	assert_string_equal(gdx_strerror(io.result),
			    "NVMe status: LBA Out of Range: The command references an LBA that "
			    "exceeds the size of the namespace(0x80)");
	/* the connection is unharmed */
	assert_int_equal(gdx_nvmf_read(c, 1, buf, 4096, 0), 0);
	gdx_nvmf_disconnect(c);
}

static void zeroes_dealloc_flush(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(1, 0, 0);
	uint8_t *ram = mock_ram(m);

	(void)state;
	memset(ram, 0x5a, 64 * 512);
	assert_int_equal(gdx_nvmf_write_zeroes(c, 1, 512, 1024), 0);
	assert_int_equal(ram[511], 0x5a);
	assert_int_equal(ram[512], 0);
	assert_int_equal(ram[1535], 0);
	assert_int_equal(ram[1536], 0x5a);
	assert_int_equal(gdx_nvmf_deallocate(c, 1, 4096, 8192), 0);
	assert_int_equal(ram[4095], 0x5a);
	assert_int_equal(ram[4096], 0);
	assert_int_equal(ram[4096 + 8191], 0);
	assert_int_equal(ram[4096 + 8192], 0x5a);
	assert_int_equal(gdx_nvmf_flush(c, 1), 0);
	assert_int_equal(gdx_nvmf_flush(c, 9), GDX_E_NVME(0x0b));	/* invalid namespace */
	gdx_nvmf_disconnect(c);
}

static void batch(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(3, 0, 0);
	struct gdx_nvmf_io io[64];
	uint8_t *src = malloc(64 * 8192), *dst = malloc(64 * 8192);

	(void)state;
	t_fill(src, 64 * 8192, 3);
	for (int i = 0; i < 64; i++)
		io[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_WRITE, .nsid = 1,
					      .offset = (uint64_t)i * 8192, .len = 8192,
					      .buf = src + i * 8192 };
	assert_int_equal(gdx_nvmf_submit(c, io, 64), 0);
	for (int i = 0; i < 64; i++) {
		assert_string_equal(io[i].path, "direct");
		io[i].op = GDX_NVMF_OP_READ;
		io[i].buf = dst + (63 - i) * 8192;
		io[i].offset = (uint64_t)(63 - i) * 8192;
	}
	assert_int_equal(gdx_nvmf_submit(c, io, 64), 0);
	assert_memory_equal(src, dst, 64 * 8192);
	gdx_nvmf_disconnect(c);
	free(src);
	free(dst);
}

/* Device memory moves through the bounce ring; small chunks make it wrap many times. */
static void device_memory(void **state)
{
	struct gdx_device *dev;
	struct gdx_nvmf_ctrl *c;
	struct gdx_nvmf_io io;
	const size_t n = 512 << 10;
	uint8_t *a = malloc(n), *b = malloc(n);
	void *d;

	(void)state;
	assert_int_equal(gdx_device_open("emulated", &dev), 0);
	assert_int_equal(gdx_config_set("nvmf.host.bounce_chunk", "8k"), 0);
	assert_int_equal(gdx_config_set("nvmf.host.bounce_chunks", "3"), 0);
	c = conn(2, 1, 1);
	t_fill(a, n, 5);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	assert_int_equal(gdx_memcpy(dev, d, a, n), 0);
	io = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_WRITE, .nsid = 1, .offset = 0, .len = n,
				   .buf = d };
	assert_int_equal(gdx_nvmf_submit(c, &io, 1), 0);
	assert_string_equal(io.path, "bounce");
	assert_memory_equal(mock_ram(m), a, n);
	assert_int_equal(gdx_memset(dev, d, 0, n), 0);
	io.op = GDX_NVMF_OP_READ;
	assert_int_equal(gdx_nvmf_submit(c, &io, 1), 0);
	assert_string_equal(io.path, "bounce");
	assert_int_equal(gdx_memcpy(dev, b, d, n), 0);
	assert_memory_equal(a, b, n);
	/* strict mode (read at connect, as the other knobs) refuses the bounce */
	gdx_nvmf_disconnect(c);
	assert_int_equal(gdx_config_set("require_direct", "1"), 0);
	c = conn(2, 1, 1);
	assert_int_equal(gdx_config_set("require_direct", "0"), 0);
	assert_int_equal(gdx_nvmf_read(c, 1, d, 4096, 0), GDX_ENOTDIRECT);
	gdx_nvmf_disconnect(c);
	gdx_config_reset();
	gdx_device_free(dev, d);
	gdx_device_close(dev);
	free(a);
	free(b);
}

/* The write waits for the memset enqueued before it; the copy after waits for the read. */
static void stream_ordered(void **state)
{
	struct gdx_device *dev;
	struct gdx_stream *s;
	struct gdx_nvmf_ctrl *c;
	struct gdx_nvmf_io w, r;
	const size_t n = 64 << 10;
	uint8_t *h = malloc(n);
	void *d, *d2;

	(void)state;
	assert_int_equal(gdx_device_open("emulated", &dev), 0);
	assert_int_equal(gdx_stream_create(dev, &s), 0);
	assert_int_equal(gdx_device_malloc(dev, n, &d), 0);
	assert_int_equal(gdx_device_malloc(dev, n, &d2), 0);
	c = conn(2, 0, 0);
	assert_int_equal(gdx_memset_async(dev, d, 0x77, n, s), 0);
	w = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_WRITE, .nsid = 1, .offset = 65536, .len = n,
				  .buf = d };
	assert_int_equal(gdx_nvmf_submit_async(c, &w, 1, s), 0);
	r = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1, .offset = 65536, .len = n,
				  .buf = d2 };
	assert_int_equal(gdx_nvmf_submit_async(c, &r, 1, s), 0);
	memset(h, 0, n);
	assert_int_equal(gdx_memcpy_async(dev, h, d2, n, s), 0);
	assert_int_equal(gdx_stream_synchronize(s), 0);
	assert_int_equal(w.result, 0);
	assert_int_equal(r.result, 0);
	assert_string_equal(w.path, "bounce");
	assert_string_equal(r.path, "bounce");
	for (size_t i = 0; i < n; i++)
		assert_int_equal(h[i], 0x77);
	/* Pinned memory is read into directly. */
	{
		uint8_t *p;

		assert_int_equal(gdx_pinned_alloc(dev, 4096, (void **)&p), 0);
		memset(p, 0, 4096);
		r = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1, .offset = 65536,
					  .len = 4096, .buf = p };
		assert_int_equal(gdx_nvmf_submit_async(c, &r, 1, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		assert_int_equal(r.result, 0);
		assert_string_equal(r.path, "direct");
		for (size_t i = 0; i < 4096; i++)
			assert_int_equal(p[i], 0x77);
		gdx_pinned_free(dev, p);
	}

	/*
	 * More batches in flight than the controller has gates per device: the
	 * later ones wait for a gate, and every one still lands in order.
	 */
	{
		enum { NB = 300 };
		struct gdx_nvmf_io *ios = calloc(NB, sizeof(*ios));

		assert_non_null(ios);
		assert_int_equal(gdx_memset_async(dev, d2, 0, n, s), 0);
		for (unsigned i = 0; i < NB; i++) {
			ios[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1,
						       .offset = 65536 + (i % 128) * 512ull,
						       .len = 512,
						       .buf = (char *)d2 + (i % 128) * 512 };
			assert_int_equal(gdx_nvmf_submit_async(c, &ios[i], 1, s), 0);
		}
		memset(h, 0, n);
		assert_int_equal(gdx_memcpy_async(dev, h, d2, n, s), 0);
		assert_int_equal(gdx_stream_synchronize(s), 0);
		for (unsigned i = 0; i < NB; i++)
			assert_int_equal(ios[i].result, 0);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(h[i], i < 128 * 512 ? 0x77 : 0);
		free(ios);
	}
	/*
	 * The workers made no device call before opening their gates: one could
	 * wait for the very stream that waits on the gate (on cuda a first kernel
	 * launch synchronises the context under the driver's lock).
	 */
	assert_int_equal(atomic_load(&((struct nh_ctrl *)c)->aworker_calls), 0);
	gdx_nvmf_disconnect(c);
	gdx_stream_destroy(s);
	gdx_device_free(dev, d);
	gdx_device_free(dev, d2);
	gdx_device_close(dev);
	free(h);
}

static int setup_split_success(void **state)
{
	struct mock_opts o;

	(void)state;
	mock_opts_default(&o);
	o.c2h_chunk = 1536;
	o.c2h_success = true;
	o.block_size = 4096;
	o.mdts = 2;		/* 16 KiB commands */
	o.inline_size = 0;
	o.maxh2cdata = 4096;
	return start(&o);
}

static void split_success_digests(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(2, 1, 1);
	struct gdx_nvmf_ctrl_info in;
	const size_t n = 200 << 10;
	uint8_t *a = malloc(n), *b = malloc(n);

	(void)state;
	assert_int_equal(gdx_nvmf_ctrl_info(c, &in), 0);
	assert_int_equal(in.max_xfer, 16384);
	t_fill(a, n, 9);
	assert_int_equal(gdx_nvmf_write(c, 1, a, n, 8192), 0);
	assert_int_equal(gdx_nvmf_read(c, 1, b, n, 8192), 0);
	assert_memory_equal(a, b, n);
	assert_int_equal(gdx_nvmf_read(c, 1, b, 100, 0), -EINVAL);
	gdx_nvmf_disconnect(c);
	free(a);
	free(b);
}

/*
 * Each malformed PDU ends the connection with an H2CTermReq, fails the I/O
 * with GDX_EPROTO and never writes past the buffer; the controller then
 * reconnects and serves the next I/O.
 */
static void malformed_pdus(void **state)
{
	static const enum mock_fault faults[] = { MF_C2H_BEYOND, MF_C2H_GAP, MF_UNKNOWN_CID,
						  MF_BAD_HLEN, MF_BAD_PLEN, MF_SUCCESS_NO_LAST,
						  MF_BAD_TYPE, MF_R2T_BEYOND };
	struct gdx_nvmf_ctrl *c = conn(1, 0, 0);
	const size_t n = 4096;	/* small enough that the mock's sends never block */
	uint8_t *buf = malloc(n + 4096), *src = malloc(4 * n);

	(void)state;
	t_fill(src, 4 * n, 1);
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(faults); i++) {
		struct mock_stats before, after;
		struct gdx_nvmf_ctrl_info in;
		int rc;

		mock_stats(m, &before);
		memset(buf, 0xcc, n + 4096);
		mock_inject(m, faults[i], 0);
		if (faults[i] == MF_R2T_BEYOND)
			rc = gdx_nvmf_write(c, 1, src, 4 * n, 0);	/* beyond in-capsule */
		else
			rc = gdx_nvmf_read(c, 1, buf, n, 0);
		assert_int_equal(rc, GDX_EPROTO);
		for (size_t k = n; k < n + 4096; k++)
			assert_int_equal(buf[k], 0xcc);
		/* the next I/O waits for the reconnect and succeeds */
		assert_int_equal(gdx_nvmf_read(c, 1, buf, n, 0), 0);
		for (int k = 0; k < 100; k++) {
			mock_stats(m, &after);
			if (after.term_reqs > before.term_reqs)
				break;
			usleep(10000);
		}
		assert_int_equal(after.term_reqs, before.term_reqs + 1);
		assert_int_equal(after.last_fes, faults[i] == MF_C2H_BEYOND ||
				 faults[i] == MF_C2H_GAP || faults[i] == MF_R2T_BEYOND ? 4 : 1);
		assert_int_equal(after.connects, before.connects + 1);
		assert_int_equal(gdx_nvmf_ctrl_info(c, &in), 0);
		assert_int_equal(in.reconnects, i + 1);
	}
	gdx_nvmf_disconnect(c);
	free(buf);
	free(src);
}

static void data_digest_error(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(1, 1, 1);
	struct gdx_nvmf_io io;
	struct mock_stats st;
	uint8_t buf[8192];

	(void)state;
	mock_inject(m, MF_BAD_DDGST, 0);
	io = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1, .len = sizeof(buf),
				   .buf = buf };
	assert_int_equal(gdx_nvmf_submit(c, &io, 1), GDX_E_NVME(0x04));	/* data transfer error */
	assert_int_equal(io.nvme_status, 0x04);
	assert_int_equal(gdx_nvmf_read(c, 1, buf, sizeof(buf), 0), 0);
	mock_stats(m, &st);
	assert_int_equal(st.connects, 1);	/* the connection carried on */
	gdx_nvmf_disconnect(c);
}

/* A dropped connection: the I/O in flight is resubmitted after the reconnect, once. */
static void drop_and_retry(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(2, 0, 0);
	struct gdx_nvmf_ctrl_info in;
	struct gdx_nvmf_io io[16];
	struct mock_stats st;
	uint8_t *src = malloc(16 * 4096), *dst = malloc(16 * 4096);

	(void)state;
	t_fill(src, 16 * 4096, 21);
	memcpy(mock_ram(m), src, 16 * 4096);
	mock_inject(m, MF_DROP, 3);
	for (int i = 0; i < 16; i++)
		io[i] = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1,
					      .offset = (uint64_t)i * 4096, .len = 4096,
					      .buf = dst + i * 4096 };
	assert_int_equal(gdx_nvmf_submit(c, io, 16), 0);
	assert_memory_equal(src, dst, 16 * 4096);
	assert_int_equal(gdx_nvmf_ctrl_info(c, &in), 0);
	assert_int_equal(in.reconnects, 1);
	mock_stats(m, &st);
	assert_int_equal(st.connects, 2);
	gdx_nvmf_disconnect(c);
	free(src);
	free(dst);
}

struct reader {
	struct gdx_nvmf_ctrl *c;
	_Atomic int stop;
	int rounds;
	int fails;
	int mismatches;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	uint8_t *buf = malloc(256 << 10);

	for (; !r->stop; r->rounds++) {
		if (gdx_nvmf_read(r->c, 1, buf, 256 << 10, 0))
			r->fails++;
		else if (memcmp(buf, mock_ram(m), 256 << 10))
			r->mismatches++;
	}
	free(buf);
	return NULL;
}

/* The target goes away mid-I/O and comes back on the same port. */
static void target_restart(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(2, 0, 0);
	struct reader r = { .c = c };
	struct gdx_nvmf_ctrl_info in;
	pthread_t t;

	(void)state;
	t_fill(mock_ram(m), 256 << 10, 77);
	pthread_create(&t, NULL, reader_main, &r);
	usleep(20000);
	mock_stop(m);
	usleep(200000);
	assert_int_equal(mock_listen(m, (uint16_t)atoi(port)), atoi(port));
	wait_reconnect(c, 500);
	usleep(50000);
	r.stop = 1;
	pthread_join(t, NULL);
	assert_true(r.rounds > 2);
	assert_int_equal(r.fails, 0);
	assert_int_equal(r.mismatches, 0);
	assert_int_equal(gdx_nvmf_ctrl_info(c, &in), 0);
	assert_true(in.reconnects >= 1);
	assert_int_equal(gdx_nvmf_ctrl_state(c), GDX_NVMF_LIVE);
	gdx_nvmf_disconnect(c);
}

static void timeout_then_recover(void **state)
{
	struct gdx_nvmf_host_opts o;
	struct gdx_nvmf_ctrl *c;
	uint8_t buf[4096];
	uint64_t t0;

	(void)state;
	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = 1;
	o.io_timeout_ms = 300;
	o.reconnect_delay_ms = 50;
	c = conn_opts(&o);
	mock_inject(m, MF_HANG, 0);
	t0 = gdx_now_ns();
	assert_int_equal(gdx_nvmf_read(c, 1, buf, sizeof(buf), 0), -ETIMEDOUT);
	assert_true(gdx_now_ns() - t0 < 3000000000ull);
	assert_int_equal(gdx_nvmf_read(c, 1, buf, sizeof(buf), 0), 0);
	gdx_nvmf_disconnect(c);
}

struct aborted {
	struct gdx_nvmf_ctrl *c;
	struct gdx_nvmf_io io;
	uint8_t buf[4096];
};

static void *abort_reader(void *arg)
{
	struct aborted *a = arg;

	gdx_nvmf_submit(a->c, &a->io, 1);
	return NULL;
}

static void user_abort(void **state)
{
	struct aborted a = { .c = conn(1, 0, 0) };
	struct mock_stats st;
	pthread_t t;

	(void)state;
	a.io = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_READ, .nsid = 1, .len = 4096,
				     .buf = a.buf };
	assert_int_equal(gdx_nvmf_abort(a.c, &a.io), -ENOENT);
	mock_inject(m, MF_HANG, 0);
	pthread_create(&t, NULL, abort_reader, &a);
	for (int i = 0; i < 500; i++) {
		mock_stats(m, &st);
		if (st.io_cmds)
			break;
		usleep(2000);
	}
	usleep(20000);
	assert_int_equal(gdx_nvmf_abort(a.c, &a.io), 0);
	pthread_join(t, NULL);
	assert_int_equal(a.io.result, -ECANCELED);
	mock_stats(m, &st);
	assert_int_equal(st.aborts, 1);
	assert_int_equal(gdx_nvmf_read(a.c, 1, a.buf, 4096, 0), 0);
	gdx_nvmf_disconnect(a.c);
}

static void keep_alive(void **state)
{
	struct gdx_nvmf_host_opts o;
	struct gdx_nvmf_ctrl *c;
	struct mock_stats st;

	(void)state;
	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = 1;
	o.kato_ms = 200;
	c = conn_opts(&o);
	usleep(700000);
	mock_stats(m, &st);
	assert_true(st.keep_alives >= 3);
	gdx_nvmf_disconnect(c);
}

/* A Keep Alive left unanswered is a dead controller: reconnect, then carry on. */
static void keep_alive_lost(void **state)
{
	struct gdx_nvmf_host_opts o;
	struct gdx_nvmf_ctrl *c;
	uint8_t buf[4096];

	(void)state;
	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = 1;
	o.kato_ms = 200;
	o.reconnect_delay_ms = 20;
	c = conn_opts(&o);
	mock_inject(m, MF_KA_HANG, 0);
	assert_int_equal(wait_reconnect(c, 300), 1);
	assert_int_equal(gdx_nvmf_read(c, 1, buf, sizeof(buf), 0), 0);
	gdx_nvmf_disconnect(c);
}

static int setup_refuse_sqflow(void **state)
{
	struct mock_opts o;

	(void)state;
	mock_opts_default(&o);
	o.refuse_sqflow = true;
	return start(&o);
}

/* SQ flow control off is asked for, and a controller that refuses it still gets a queue. */
static void sqflow(void **state)
{
	struct gdx_nvmf_ctrl *c = conn(2, 0, 0);
	struct mock_stats st;
	uint8_t buf[4096];

	(void)state;
	assert_int_equal(gdx_nvmf_read(c, 1, buf, sizeof(buf), 0), 0);
	mock_stats(m, &st);
	gdx_nvmf_disconnect(c);
	assert_int_equal(st.io_connects, 2);
	assert_int_equal(st.sqflow_off, m_refuses ? 0 : 2);
}

static void never_called(struct gdx_nvmf_io *io, void *arg)
{
	(void)io;
	(void)arg;
	fail();
}

static void give_up(void **state)
{
	struct gdx_nvmf_host_opts o;
	struct gdx_nvmf_ctrl *c;
	uint8_t buf[4096];

	(void)state;
	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = 1;
	o.reconnect_delay_ms = 20;
	o.ctrl_loss_tmo_ms = 300;
	o.connect_timeout_ms = 200;
	c = conn_opts(&o);
	mock_stop(m);
	assert_int_equal(gdx_nvmf_read(c, 1, buf, sizeof(buf), 0), GDX_EDISCONNECTED);
	assert_int_equal(gdx_nvmf_ctrl_state(c), GDX_NVMF_FAILED);
	assert_int_equal(gdx_nvmf_read(c, 1, buf, sizeof(buf), 0), GDX_EDISCONNECTED);
	{
		/* a callback submission is refused up front, its callback never runs */
		struct gdx_nvmf_io io = { .op = GDX_NVMF_OP_READ, .nsid = 1, .len = 4096,
					  .buf = buf };

		assert_int_equal(gdx_nvmf_submit_cb(c, &io, never_called, NULL), GDX_EDISCONNECTED);
	}
	gdx_nvmf_disconnect(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(connect_identify, setup_default, stop),
		cmocka_unit_test_setup_teardown(discover, setup_default, stop),
		cmocka_unit_test_setup_teardown(wrong_nqn_refused, setup_default, stop),
		cmocka_unit_test_setup_teardown(rw_host, setup_default, stop),
		cmocka_unit_test_setup_teardown(bad_requests, setup_default, stop),
		cmocka_unit_test_setup_teardown(zeroes_dealloc_flush, setup_default, stop),
		cmocka_unit_test_setup_teardown(batch, setup_default, stop),
		cmocka_unit_test_setup_teardown(device_memory, setup_default, stop),
		cmocka_unit_test_setup_teardown(stream_ordered, setup_default, stop),
		cmocka_unit_test_setup_teardown(split_success_digests, setup_split_success, stop),
		cmocka_unit_test_setup_teardown(malformed_pdus, setup_default, stop),
		cmocka_unit_test_setup_teardown(data_digest_error, setup_default, stop),
		cmocka_unit_test_setup_teardown(drop_and_retry, setup_default, stop),
		cmocka_unit_test_setup_teardown(target_restart, setup_default, stop),
		cmocka_unit_test_setup_teardown(timeout_then_recover, setup_default, stop),
		cmocka_unit_test_setup_teardown(user_abort, setup_default, stop),
		cmocka_unit_test_setup_teardown(keep_alive, setup_default, stop),
		cmocka_unit_test_setup_teardown(keep_alive_lost, setup_default, stop),
		cmocka_unit_test_setup_teardown(sqflow, setup_default, stop),
		cmocka_unit_test_setup_teardown(sqflow, setup_refuse_sqflow, stop),
		cmocka_unit_test_setup_teardown(give_up, setup_default, stop),
	};

	if (!getenv("GDX_LOG_LEVEL"))
		gdx_log_set_level(GDX_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
