/* SPDX-License-Identifier: MIT */
/*
 * test_nvmf_target's cases on the data path and its PDUs: I/O on RAM and file
 * namespaces, digests, malformed PDUs and a host's H2CTermReq that end only
 * their own connection, a block-device namespace.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"

#include <gdx/nvmf.h>

#include "nvmf_target_suite.h"

void test_io(void **state)
{
	struct host a, io;
	size_t big = 1u << 20;
	uint8_t *w = malloc(big), *r = malloc(big);
	uint8_t dsm[4096] = { 0 };
	struct gdx_nvme_dsm_range *range = (void *)dsm;

	(void)state;
	admin_up(&a, NQN, false, false, 5000);
	assert_int_equal(set_nr_queues(&a, 4), 0);
	io_up(&io, &a, false, false, 1);
	for (unsigned nsid = 1; nsid <= 3; nsid++) {
		uint32_t bs = nsid == 2 ? 4096 : 512;

		/* in-capsule write (4 KiB), R2T write (1 MiB over several H2CData), reads */
		t_fill(w, big, nsid);
		assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, nsid, 8, 4096 / bs, w, 4096, true), 0);
		assert_int_equal(rw(&io, GDX_NVME_CMD_READ, nsid, 8, 4096 / bs, r, 4096, false), 0);
		assert_memory_equal(w, r, 4096);
		assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, nsid, 64, (uint32_t)(big / bs), w,
				    (uint32_t)big, false), 0);
		memset(r, 0, big);
		assert_int_equal(rw(&io, GDX_NVME_CMD_READ, nsid, 64, (uint32_t)(big / bs), r,
				    (uint32_t)big, false), 0);
		assert_memory_equal(w, r, big);

		/* write zeroes, then deallocate: reads return zeroes */
		struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_WRITE_ZEROES, .nsid = nsid,
					    .cdw10 = 64, .cdw12 = 7 };

		assert_int_equal(run_cmd(&io, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
		assert_int_equal(rw(&io, GDX_NVME_CMD_READ, nsid, 64, 8, r, 8 * bs, false), 0);
		for (uint32_t i = 0; i < 8 * bs; i++)
			assert_int_equal(r[i], 0);
		range[0].slba = 8;
		range[0].nlb = 4096 / bs;
		sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_CMD_DSM, .nsid = nsid, .cdw10 = 0,
					     .cdw11 = GDX_NVME_DSM_AD };
		/* a full 4 KiB range buffer, as Linux sends, through R2T */
		assert_int_equal(run_cmd(&io, &sqe, dsm, sizeof(dsm), false, NULL, 0, NULL), 0);
		assert_int_equal(rw(&io, GDX_NVME_CMD_READ, nsid, 8, 4096 / bs, r, 4096, false), 0);
		for (uint32_t i = 0; i < 4096; i++)
			assert_int_equal(r[i], 0);
		sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_CMD_FLUSH, .nsid = nsid };
		assert_int_equal(run_cmd(&io, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	}
	/* statuses */
	uint64_t nsze = (8u << 20) / 512;

	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, nsze - 1, 2, r, 1024, false),
			 GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR);
	/* a failing write gets no R2T: only the response comes */
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 1, nsze, 8, w, 4096 * 2, false),
			 GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR);
	/* in-capsule data the command does not announce is consumed, then failed */
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 1, 0, 8, w, 512, true),
			 GDX_NVME_SC_SGL_INVALID_DATA | GDX_NVME_ST_DNR);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 9, 0, 1, r, 512, false),
			 GDX_NVME_SC_INVALID_NS | GDX_NVME_ST_DNR);
	assert_int_equal(rw(&io, 0x7e, 1, 0, 1, r, 0, false),
			 GDX_NVME_SC_INVALID_OPCODE | GDX_NVME_ST_DNR);
	range[0].slba = nsze;
	range[0].nlb = 1;
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_DSM, .nsid = 1, .cdw11 = GDX_NVME_DSM_AD };

	assert_int_equal(run_cmd(&io, &sqe, dsm, 16, true, NULL, 0, NULL),
			 GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR);
	/* the connection still works after all that */
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 1, r, 512, false), 0);
	close(io.fd);
	close(a.fd);
	free(w);
	free(r);
}

void test_digests(void **state)
{
	struct host a, io;
	uint8_t w[65536], r[65536];

	(void)state;
	admin_up(&a, NQN, true, true, 5000);
	assert_int_equal(set_nr_queues(&a, 1), 0);
	io_up(&io, &a, true, true, 1);
	t_fill(w, sizeof(w), 7);
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 3, 0, 8, w, 4096, true), 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 3, 8, 128, w, sizeof(w), false), 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 3, 8, 128, r, sizeof(r), false), 0);
	assert_memory_equal(w, r, sizeof(w));
	/* a large read from RAM leaves by splice; its data digest must still match */
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 1, 0, 128, w, sizeof(w), false), 0);
	memset(r, 0, sizeof(r));
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 0, 128, r, sizeof(r), false), 0);
	assert_memory_equal(w, r, sizeof(w));
	/* never-written RAM reads as zeroes: they leave from the reactor's own zeroed pages */
	memset(r, 0xee, sizeof(r));
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 8192, 128, r, sizeof(r), false), 0);
	for (size_t i = 0; i < sizeof(r); i++)
		assert_int_equal(r[i], 0);
	/* half written, half not: copied */
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 1, 9216, 64, w, sizeof(w) / 2, false), 0);
	memset(r, 0xee, sizeof(r));
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 1, 9216, 128, r, sizeof(r), false), 0);
	assert_memory_equal(w, r, sizeof(w) / 2);
	for (size_t i = sizeof(w) / 2; i < sizeof(r); i++)
		assert_int_equal(r[i], 0);

	/* a bad data digest fails the command (transient) and the queue goes on */
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_WRITE, .nsid = 3, .cid = 900, .cdw12 = 0,
				    .flags = GDX_NVME_FLAGS_PSDT_SGL };
	union gdx_tcp_pdu pdu;
	uint32_t bad = 0x12345678;

	sqe.dptr.type = GDX_NVME_SGL_DATA_BLOCK_OFFSET;
	sqe.dptr.length = 512;
	send_all(io.fd, &pdu, gdx_tcp_cmd_init(&pdu, &sqe, 512, &io.p));
	send_all(io.fd, w, 512);
	send_all(io.fd, &bad, 4);
	assert_int_equal(recv_pdu(&io, &pdu, NULL, 0), 0);
	assert_int_equal(pdu.rsp.cqe.cid, 900);
	assert_int_equal(pdu.rsp.cqe.status >> 1, GDX_NVME_SC_TRANSIENT_TR_ERR);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 3, 8, 1, r, 512, false), 0);

	/* a bad header digest is fatal to the connection: FES 3 */
	gdx_tcp_cmd_init(&pdu, &sqe, 0, &io.p);
	pdu.raw[72] ^= 1;
	send_all(io.fd, &pdu, 76);
	expect_term(io.fd, GDX_TCP_FES_HDGST, 72);
	close(io.fd);
	close(a.fd);
}

static void bad_pdu(const void *buf, size_t len, bool icreq_first, uint16_t fes, uint32_t fei)
{
	int fd = tcp_connect(port);

	if (icreq_first) {
		union gdx_tcp_pdu ic;

		gdx_tcp_icreq_init(&ic.icreq, false, false, 0);
		send_all(fd, &ic, 128);
	}
	send_all(fd, buf, len);
	expect_term(fd, fes, fei);
	close(fd);
}

void test_malformed(void **state)
{
	union gdx_tcp_pdu p;
	struct gdx_tcp_params plain = { .maxh2cdata = 131072 };
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_KEEP_ALIVE };
	struct host survivor;
	uint8_t big[1024] = { 0 };

	(void)state;
	/* a healthy connection that must outlive every bad one */
	admin_up(&survivor, NQN, false, false, 30000);

	/* garbage before ICReq */
	memset(big, 0x41, sizeof(big));
	bad_pdu(big, 64, false, GDX_TCP_FES_INVALID_HEADER, 0);
	/* a command before ICReq */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	bad_pdu(&p, 72, false, GDX_TCP_FES_PDU_SEQ, 0);
	/* oversized ICReq */
	gdx_tcp_icreq_init(&p.icreq, false, false, 0);
	p.ch.plen = 4096;
	bad_pdu(&p, 128, false, GDX_TCP_FES_INVALID_HEADER, 4);
	/* wrong hlen */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	p.ch.hlen = 64;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 2);
	/* wrong pdo */
	gdx_tcp_cmd_init(&p, &sqe, 16, &plain);
	p.ch.pdo = 8;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 3);
	/* plen shorter than the header */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	p.ch.plen = 30;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 4);
	/* unknown PDU type */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	p.ch.type = 0x0e;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 0);
	/* a second ICReq */
	gdx_tcp_icreq_init(&p.icreq, false, false, 0);
	bad_pdu(&p, 128, true, GDX_TCP_FES_PDU_SEQ, 0);
	/* H2CData without an R2T */
	gdx_tcp_data_init(&p, GDX_TCP_H2C_DATA, 1, 0, 0, 512, GDX_TCP_F_DATA_LAST, &plain);
	memcpy(big, &p, 24);
	bad_pdu(big, 24 + 512, true, GDX_TCP_FES_INVALID_HEADER, 10);
	/* in-capsule data beyond what the target takes */
	gdx_tcp_cmd_init(&p, &sqe, 1u << 20, &plain);
	bad_pdu(&p, 72, true, GDX_TCP_FES_DATA_LIMIT, 4);
	/* a digest flag that was not negotiated */
	gdx_tcp_cmd_init(&p, &sqe, 0, &plain);
	p.ch.flags = GDX_TCP_F_HDGST;
	bad_pdu(&p, 72, true, GDX_TCP_FES_INVALID_HEADER, 1);

	/* H2CData beyond the command's data, after a real R2T */
	{
		struct host a, io;
		struct gdx_nvme_sqe wr = { .opc = GDX_NVME_CMD_WRITE, .nsid = 1, .cid = 5,
					   .cdw12 = 0, .flags = GDX_NVME_FLAGS_PSDT_SGL };

		admin_up(&a, NQN, false, false, 5000);
		assert_int_equal(set_nr_queues(&a, 1), 0);
		io_up(&io, &a, false, false, 1);
		wr.dptr.type = GDX_NVME_SGL_TRANSPORT;
		wr.dptr.length = 512;
		send_all(io.fd, &p, gdx_tcp_cmd_init(&p, &wr, 0, &plain));
		assert_int_equal(recv_pdu(&io, &p, NULL, 0), 0);
		assert_int_equal(p.ch.type, GDX_TCP_R2T);
		assert_int_equal(p.r2t.r2tl, 512);
		uint16_t ttag = p.r2t.ttag;

		gdx_tcp_data_init(&p, GDX_TCP_H2C_DATA, 5, ttag, 256, 512, 0, &plain);
		send_all(io.fd, &p, 24);
		send_all(io.fd, big, 512);
		expect_term(io.fd, GDX_TCP_FES_DATA_RANGE, ~0u);
		close(io.fd);
		close(a.fd);
	}

	/* the survivor still answers */
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_KEEP_ALIVE };
	assert_int_equal(run_cmd(&survivor, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	close(survivor.fd);
}

/* Sends H2CTermReq (FES 1) and a keep-alive after it in the same segment. */
static void send_host_term(struct host *h)
{
	struct gdx_tcp_params plain = { .maxh2cdata = 131072 };
	struct gdx_nvme_sqe ka = { .opc = GDX_NVME_ADM_KEEP_ALIVE, .cid = 99,
				   .flags = GDX_NVME_FLAGS_PSDT_SGL };
	uint8_t buf[24 + 72] = { 0 };
	struct gdx_tcp_term *t = (void *)buf;
	union gdx_tcp_pdu cmd;
	char c;

	t->ch.type = GDX_TCP_H2C_TERM;
	t->ch.hlen = 24;
	t->ch.plen = 24;
	t->fes = GDX_TCP_FES_INVALID_HEADER;
	/* bytes after the TermReq: the receive loop must stop at it, with the
	 * connection still valid to look at */
	gdx_tcp_cmd_init(&cmd, &ka, 0, &plain);
	memcpy(buf + 24, &cmd, 72);
	send_all(h->fd, buf, sizeof(buf));
	/* the target closes without an answer */
	assert_int_equal(recv(h->fd, &c, 1, 0), 0);
	close(h->fd);
}

/*
 * A host's H2CTermReq ends its connection (the kernel host and gdx's send it
 * on protocol errors): before Connect, on an admin queue, on an I/O queue.
 * The connection used to be freed inside the handler while the receive loop
 * still read it (ASan: heap-use-after-free in rx_consume).
 */
void test_host_term(void **state)
{
	struct host survivor, h, a, io;
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_ADM_KEEP_ALIVE };

	(void)state;
	admin_up(&survivor, NQN, false, false, 30000);
	for (int i = 0; i < 3; i++) {
		host_icreq(&h, port, false, false);
		send_host_term(&h);
		admin_up(&h, NQN, false, false, 5000);
		send_host_term(&h);
		admin_up(&a, NQN, false, false, 5000);
		assert_int_equal(set_nr_queues(&a, 1), 0);
		io_up(&io, &a, false, false, 1);
		send_host_term(&io);
		/* the controller lives on: the queue can be connected again */
		io_up(&io, &a, false, false, 1);
		close(io.fd);
		close(a.fd);
	}
	assert_int_equal(run_cmd(&survivor, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	close(survivor.fd);
}

/* A loop device over a scratch file, or -1 where loop devices are not available. */
static int loop_attach(const char *file, char *dev, size_t n)
{
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC), nr, lfd = -1, ffd;

	if (ctl < 0)
		return -1;
	nr = ioctl(ctl, LOOP_CTL_GET_FREE);
	close(ctl);
	if (nr < 0)
		return -1;
	snprintf(dev, n, "/dev/loop%d", nr);
	ffd = open(file, O_RDWR | O_CLOEXEC);
	if (ffd >= 0)
		lfd = open(dev, O_RDWR | O_CLOEXEC);
	if (lfd < 0 || ioctl(lfd, LOOP_SET_FD, ffd)) {
		if (lfd >= 0)
			close(lfd);
		if (ffd >= 0)
			close(ffd);
		return -1;
	}
	close(ffd);
	return lfd;
}

void test_bdev(void **state)
{
	char img[64], dev[32];
	struct host a, io;
	uint8_t w[131072], r[131072];
	int lfd, fd;

	(void)state;
	snprintf(img, sizeof(img), "/tmp/gdx-nvmf-bdev-%d", getpid());
	fd = open(img, O_CREAT | O_RDWR | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4 << 20), 0);
	close(fd);
	lfd = loop_attach(img, dev, sizeof(dev));
	if (lfd < 0) {
		unlink(img);
		skip();
	}
	assert_int_equal(gdx_nvmf_target_add_ns(tgt, NQN, 5, dev, 4096), 0);
	admin_up(&a, NQN, false, false, 5000);
	assert_int_equal(set_nr_queues(&a, 1), 0);
	io_up(&io, &a, false, false, 1);
	t_fill(w, sizeof(w), 5);
	assert_int_equal(rw(&io, GDX_NVME_CMD_WRITE, 5, 3, 32, w, sizeof(w), false), 0);
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_FLUSH, .nsid = 5 };

	assert_int_equal(run_cmd(&io, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 5, 3, 32, r, sizeof(r), false), 0);
	assert_memory_equal(w, r, sizeof(w));
	/* the data went through the block device into the file */
	fd = open(img, O_RDONLY);
	assert_int_equal(pread(fd, r, sizeof(r), 3 * 4096), (ssize_t)sizeof(r));
	close(fd);
	assert_memory_equal(w, r, sizeof(r));
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_CMD_WRITE_ZEROES, .nsid = 5, .cdw10 = 3,
				     .cdw12 = 1 };
	assert_int_equal(run_cmd(&io, &sqe, NULL, 0, false, NULL, 0, NULL), 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 5, 3, 2, r, 8192, false), 0);
	for (unsigned i = 0; i < 8192; i++)
		assert_int_equal(r[i], 0);
	assert_int_equal(rw(&io, GDX_NVME_CMD_READ, 5, 1024, 1, r, 4096, false),
			 GDX_NVME_SC_LBA_RANGE | GDX_NVME_ST_DNR);
	close(io.fd);
	close(a.fd);
	ioctl(lfd, LOOP_CLR_FD, 0);
	close(lfd);
	unlink(img);
}
