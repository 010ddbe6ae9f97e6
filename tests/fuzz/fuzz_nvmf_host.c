/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the NVMe/TCP host's receive path.  The first input byte
 * picks the negotiated digests and whether the read lands in (emulated) device
 * memory through a bounce ring of two 1 KiB chunks (its copies enqueued one by
 * one or in batches of up to three, marked by events or a done word); the rest is what a
 * controller sends, fed through a socketpair to the real receiver
 * (nh_queue_rx_loop) of a queue that has three commands in flight: a 4 KiB
 * read, an 8 KiB write (R2T path) and a command without data.  Beyond "no
 * crash": no byte lands outside the read's buffer, no command completes twice
 * (held device reads included), and a read reported successful got all of its
 * data.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gdx/gdx.h>

#include "nvmf/host/host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define GUARD 512
#define MAX_INPUT (64 << 10)	/* fits the socket buffer: written before the receiver runs */

static uint8_t rbuf[GUARD + 4096 + GUARD];
static struct gdx_device *dev;
static void *dbuf;		/* device twin of rbuf */
static uint8_t wbuf[8192];
static unsigned completions[3];

static void quiet(enum gdx_log_level lvl, const char *subsys, const char *msg, void *arg)
{
	(void)lvl;
	(void)subsys;
	(void)msg;
	(void)arg;
}

static void done(struct nh_req *r)
{
	completions[(uintptr_t)r->arg]++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct nh_ctrl ctrl;
	struct nh_queue q;
	struct nh_req r[3];
	int sv[2], sb = 1 << 20;

	bool on_dev = data && size && (data[0] & 4);

	if (size < 1 || size > MAX_INPUT)
		return 0;
	gdx_log_set_callback(quiet, NULL);
	if (on_dev && !dev) {
		if (gdx_device_open("emulated", &dev) ||
		    gdx_device_malloc(dev, sizeof(rbuf), &dbuf))
			abort();
	}
	memset(&q, 0, sizeof(q));
	if (nh_queue_init_mem(&q, 8))
		abort();
	q.ctrl = &ctrl;
	ctrl.p.bounce_chunk = 1024;
	ctrl.p.bounce_chunks = 2;
	ctrl.p.copy_batch = data[0] & 8 ? 3 : 1;
	ctrl.p.copy_word = data[0] & 16;
	/* an I/O queue whose copies go to the controller's copy agent (started once) */
	ctrl.p.copy_agent = data[0] & 32 ? 1 : 0;
	ctrl.p.nr_io_queues = 1;
	q.qid = data[0] & 32 ? 1 : 0;
	if (on_dev && (nh_queue_init_dev(&q, dev) || gdx_memset(dev, dbuf, 0xa5, sizeof(rbuf))))
		abort();
	q.tp.hdgst = data[0] & 1;
	q.tp.ddgst = data[0] & 2;
	q.tp.maxh2cdata = 4096;
	q.inline_max = 1024;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		abort();
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
	q.fd = sv[0];
	memset(rbuf, 0xa5, sizeof(rbuf));
	memset(completions, 0, sizeof(completions));
	for (unsigned i = 0; i < 3; i++) {
		nh_req_init(&r[i], i == 0 ? 0x02 : i == 1 ? 0x01 : 0x00, 1, false);
		r[i].done = done;
		r[i].arg = (void *)(uintptr_t)i;
		r[i].result = 1;
		/* the CIDs a submit would give slots 0..2 in their first generation */
		q.slots[i].req = &r[i];
		q.slots[i].cid = (uint16_t)(0x400 | i);
	}
	r[0].buf = on_dev ? (char *)dbuf + GUARD : (void *)(rbuf + GUARD);
	r[0].len = 4096;
	r[0].mem = on_dev ? NH_MEM_DEVICE : NH_MEM_HOST;
	r[1].buf = wbuf;
	r[1].len = sizeof(wbuf);
	r[1].mem = NH_MEM_HOST;
	r[1].write = 1;
	q.nfree = q.depth - 3;
	q.inflight = 3;
	if (size > 1 && write(sv[1], data + 1, size - 1) != (ssize_t)(size - 1))
		abort();
	shutdown(sv[1], SHUT_WR);
	nh_queue_rx_loop(&q);
	/* what closing the queue does: held device reads complete once their copies landed */
	if (on_dev) {
		if (gdx_stage_drain(q.rx_st, GDX_EDRIVER))
			abort();
		if (gdx_memcpy(dev, rbuf, dbuf, sizeof(rbuf)))
			abort();
	}
	for (unsigned i = 0; i < GUARD; i++)
		if (rbuf[i] != 0xa5 || rbuf[GUARD + 4096 + i] != 0xa5)
			abort();	/* written outside the read's buffer */
	for (unsigned i = 0; i < 3; i++)
		if (completions[i] > 1)
			abort();	/* completed twice */
	if (completions[0] && !r[0].result && q.slots[0].xfered != 4096)
		abort();	/* success without all the data */
	close(sv[0]);
	close(sv[1]);
	nh_queue_free_mem(&q);
	return 0;
}
