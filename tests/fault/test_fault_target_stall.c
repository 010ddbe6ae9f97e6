/* SPDX-License-Identifier: MIT */
/*
 * A host that stops reading (issue 19, item 3): one I/O queue of SQ size 256
 * issues 512 reads of 1 MiB from a file namespace and never reads the
 * socket, with KATO 0.  The target must hold at most about
 * nvmf.target.conn_buf_max of data for it (its RSS is measured from outside),
 * stop taking its commands meanwhile, end the queue once it has made no
 * progress for nvmf.target.stall_timeout_ms, and serve another host all along.
 * A host that only pauses gets every read, right, once it reads again; writes
 * beyond the limit wait for their R2T without blocking the data of the ones
 * under way; an R2T never answered ends the queue as well.
 */
#include "fault_target.h"

#define READS 512
#define READ_BYTES (1u << 20)
#define NS_BYTES (64u << 20)
#define CONN_BUF_MAX_MIB 8
#define STALL_MS 2000

static void read_cmd(int fd, uint16_t cid, uint64_t slba)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_READ, .nsid = 1, .cid = cid };

	sqe.cdw10 = (uint32_t)slba;
	sqe.cdw12 = READ_BYTES / 512 - 1;
	ft_send_cmd(fd, &sqe, NULL, READ_BYTES);
}

/* n reads, cids from cid0, over the first span bytes of the namespace in turn. */
static void read_cmds(int fd, uint16_t cid0, unsigned n, uint64_t span)
{
	for (unsigned i = 0; i < n; i++)
		read_cmd(fd, (uint16_t)(cid0 + i), (i % (span / READ_BYTES)) * (READ_BYTES / 512));
}

/* A read on a queue that reads its socket: C2HData then the response. */
static void read_ok(int fd, uint16_t cid, void *buf)
{
	union gdx_tcp_pdu pdu;

	read_cmd(fd, cid, 0);
	assert_int_equal(recv(fd, &pdu, 24, MSG_WAITALL), 24);
	assert_int_equal(pdu.ch.type, GDX_TCP_C2H_DATA);
	assert_int_equal(pdu.data.datal, READ_BYTES);
	assert_int_equal(recv(fd, buf, READ_BYTES, MSG_WAITALL), READ_BYTES);
	assert_int_equal(ft_rsp(fd, cid, NULL), 0);
}

/*
 * A controller with one I/O queue of SQ size sqsize + 1, KATO 0: *adm gets its
 * admin queue's socket, the I/O queue's is returned, connected within
 * timeout_ms.  rcvbuf: that socket's receive buffer in bytes, 0 to leave it.
 */
static int io_queue_up(const struct ft_target *ft, int *adm, unsigned timeout_ms,
		       uint16_t sqsize, int rcvbuf)
{
	uint16_t cntlid;
	int io;

	*adm = ft_connect(ft, 5000);
	cntlid = ft_admin_up(*adm, 0, 1);
	io = ft_connect(ft, timeout_ms);
	if (rcvbuf)
		setsockopt(io, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	ft_icreq(io);
	assert_int_equal(ft_connect_q(io, 1, sqsize, &cntlid, 0), 0);
	return io;
}

/* Reads a PDU's whole header: its common header, then the rest hlen says. */
static void recv_hdr(int fd, union gdx_tcp_pdu *pdu)
{
	assert_int_equal(recv(fd, pdu, 8, MSG_WAITALL), 8);
	assert_int_equal(recv(fd, pdu->raw + 8, pdu->ch.hlen - 8u, MSG_WAITALL), pdu->ch.hlen - 8);
}

/*
 * Starts the target on a file namespace of NS_BYTES named after tag, data at its
 * start when given; the file is unlinked once the target has it open, so nothing
 * is left behind, even by a failed test.
 */
static void start_on_file(struct ft_target *ft, const char *tag, const void *data, size_t len,
			  const char *const *knobs)
{
	const char *ns[] = { NULL, NULL };
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/gdx-fault-%s-%d.img", tag, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, NS_BYTES), 0);
	if (len)
		assert_int_equal(pwrite(fd, data, len, 0), (ssize_t)len);
	close(fd);
	ns[0] = path;
	ft_start(ft, ns, 0, knobs);
	unlink(path);
}

static void test_stalled_reader(void **state)
{
	static char conn_max[16], stall[16];
	static const char *knobs[] = { "nvmf.target.conn_buf_max", conn_max,
				       "nvmf.target.stall_timeout_ms", stall, NULL };
	static struct ft_target ft;
	int adm, io, adm2, io2;
	uint64_t rss0, rss, t0, took;
	char *buf = malloc(READ_BYTES);

	(void)state;
	assert_non_null(buf);
	snprintf(conn_max, sizeof(conn_max), "%uM", CONN_BUF_MAX_MIB);
	snprintf(stall, sizeof(stall), "%u", STALL_MS);
	start_on_file(&ft, "stall", NULL, 0, knobs);

	/* another host, served before, during and after */
	io2 = io_queue_up(&ft, &adm2, 5000, 31, 0);
	read_ok(io2, 1, buf);
	rss0 = ft_rss_kib(&ft);

	/* the stalled reader: KATO 0, a small receive buffer, never read */
	io = io_queue_up(&ft, &adm, 5000, 255, 16384);
	read_cmds(io, 10, READS, NS_BYTES);
	t0 = ft_now_ms();
	/* the target does what it will with them; the other host is served meanwhile */
	usleep(1000 * 1000);
	read_ok(io2, 2, buf);
	rss = ft_rss_kib(&ft);
	print_message("%u reads of 1 MiB never read: target RSS %" PRIu64 " -> %" PRIu64
		      " KiB (+%" PRIu64 " MiB; conn_buf_max %u MiB)\n", READS, rss0, rss,
		      (rss - rss0) / 1024, CONN_BUF_MAX_MIB);
	/* conn_buf_max, one command over it, and slack for the allocator */
	assert_true(rss - rss0 < (CONN_BUF_MAX_MIB + 1 + 16) * 1024);
	assert_true(ft_log_count(&ft, "commands wait for buffers") >= 1);

	/* ended once it made no progress for the stall timeout (KATO 0 notwithstanding) */
	while (!ft_log_count(&ft, "no data taken") && ft_now_ms() - t0 < 15000)
		usleep(100 * 1000);
	took = ft_now_ms() - t0;
	print_message("stalled queue ended %" PRIu64 " ms after its reads\n", took);
	assert_true(ft_log_count(&ft, "no data taken") == 1);
	assert_true(took < STALL_MS + 4000);
	/* what the socket held, then EOF (or a reset: commands were left unread) */
	for (;;) {
		ssize_t n = recv(io, buf, READ_BYTES, 0);

		if (n > 0)
			continue;
		assert_true(n == 0 || errno == ECONNRESET);
		break;
	}
	read_ok(io2, 3, buf);
	close(io);
	close(adm);
	close(io2);
	close(adm2);
	ft_stop(&ft);
	free(buf);
}

/*
 * The target's total, kept full by a host that stops reading, starves no other
 * host: at buf_max 8 MiB, a queue with 64 reads of 1 MiB never read holds it,
 * and another host's reads, one at a time on a queue that holds no buffer,
 * are served at once, not when the stall timeout ends the first queue.
 */
static void test_total_starves_none(void **state)
{
	static char buf_max[16], stall[16];
	static const char *knobs[] = { "nvmf.target.buf_max", buf_max,
				       "nvmf.target.stall_timeout_ms", stall, NULL };
	static struct ft_target ft;
	enum { N = 64, OTHER = 4, STALL_LONG_MS = 20000 };
	int adm, io, adm2, io2;
	uint64_t t0, took;
	char *buf = malloc(READ_BYTES);

	(void)state;
	assert_non_null(buf);
	snprintf(buf_max, sizeof(buf_max), "%uM", CONN_BUF_MAX_MIB);
	snprintf(stall, sizeof(stall), "%u", STALL_LONG_MS);
	start_on_file(&ft, "total", NULL, 0, knobs);
	io2 = io_queue_up(&ft, &adm2, 5000, 31, 0);

	io = io_queue_up(&ft, &adm, 5000, 127, 16384);
	read_cmds(io, 100, N, NS_BYTES);
	usleep(1000 * 1000);
	assert_true(ft_log_count(&ft, "commands wait for buffers") >= 1);

	t0 = ft_now_ms();
	for (unsigned i = 0; i < OTHER; i++)
		read_ok(io2, (uint16_t)(1 + i), buf);
	took = ft_now_ms() - t0;
	print_message("buf_max %u MiB held by an unread queue: %u reads of 1 MiB on another "
		      "queue in %" PRIu64 " ms\n", CONN_BUF_MAX_MIB, OTHER, took);
	/* before, they waited for the stall timeout to end the other queue */
	assert_true(took < STALL_LONG_MS / 4);
	assert_int_equal(ft_log_count(&ft, "no data taken"), 0);
	close(io);
	close(adm);
	close(io2);
	close(adm2);
	ft_stop(&ft);
	free(buf);
}

/*
 * Held, then released: a host stops reading with 64 reads of 1 MiB out (eight
 * times conn_buf_max), then reads again; every read completes with its data.
 */
static void test_slow_reader(void **state)
{
	static char conn_max[16];
	static const char *knobs[] = { "nvmf.target.conn_buf_max", conn_max, NULL };
	static struct ft_target ft;
	enum { N = 64, PATTERN = 8u << 20 };
	int adm, io;
	uint8_t *want = malloc(PATTERN), *got = malloc(READ_BYTES);
	bool done[N] = { false };
	unsigned ndone = 0;

	(void)state;
	assert_non_null(want);
	assert_non_null(got);
	snprintf(conn_max, sizeof(conn_max), "%uM", CONN_BUF_MAX_MIB);
	t_fill(want, PATTERN, 19);
	start_on_file(&ft, "slow", want, PATTERN, knobs);
	io = io_queue_up(&ft, &adm, 10000, 127, 0);
	read_cmds(io, 100, N, PATTERN);
	usleep(1000 * 1000);
	assert_true(ft_log_count(&ft, "commands wait for buffers") >= 1);
	while (ndone < N) {
		union gdx_tcp_pdu pdu;
		unsigned i;

		recv_hdr(io, &pdu);
		if (pdu.ch.type == GDX_TCP_C2H_DATA) {
			i = pdu.data.cccid - 100u;
			assert_true(i < N);
			assert_int_equal(pdu.data.datal, READ_BYTES);
			assert_int_equal(recv(io, got, READ_BYTES, MSG_WAITALL), READ_BYTES);
			assert_memory_equal(got, want + (i % (PATTERN / READ_BYTES)) * READ_BYTES,
					    READ_BYTES);
			continue;
		}
		assert_int_equal(pdu.ch.type, GDX_TCP_RSP);
		i = pdu.rsp.cqe.cid - 100u;
		assert_true(i < N && !done[i]);
		assert_int_equal(pdu.rsp.cqe.status >> 1, 0);
		done[i] = true;
		ndone++;
	}
	close(io);
	close(adm);
	ft_stop(&ft);
	free(want);
	free(got);
}

/* Sends what an R2T asks for of a command's data, in H2CData PDUs of at most 128 KiB. */
static void send_r2t_data(int fd, const struct gdx_tcp_r2t *r2t, const uint8_t *src)
{
	static const struct gdx_tcp_params plain = { .maxh2cdata = 131072 };

	for (uint32_t off = 0; off < r2t->r2tl; off += plain.maxh2cdata) {
		uint32_t n = GDX_MIN(r2t->r2tl - off, plain.maxh2cdata);
		union gdx_tcp_pdu d;
		uint32_t hl = gdx_tcp_data_init(&d, GDX_TCP_H2C_DATA, r2t->cccid, r2t->ttag,
						 r2t->r2to + off, n,
						 off + n == r2t->r2tl ? GDX_TCP_F_DATA_LAST : 0,
						 &plain);

		assert_int_equal(send(fd, &d, hl, MSG_NOSIGNAL), (ssize_t)hl);
		assert_int_equal(send(fd, src + r2t->r2to + off, n, MSG_NOSIGNAL), (ssize_t)n);
	}
}

/*
 * Writes under the limit: 64 writes of 1 MiB (eight times conn_buf_max) sent
 * before any of their data.  The commands beyond the limit wait for their R2T
 * while the data of the first ones still gets in behind them: all complete,
 * and what they wrote reads back.
 */
static void test_many_writes(void **state)
{
	static char conn_max[16];
	static const char *knobs[] = { "nvmf.target.conn_buf_max", conn_max, NULL };
	static struct ft_target ft;
	enum { N = 64, SPAN = 8u << 20 };
	int adm, io;
	uint8_t *src = malloc(SPAN), *back = malloc(SPAN);
	unsigned ndone = 0, nr2t = 0;

	(void)state;
	assert_non_null(src);
	assert_non_null(back);
	snprintf(conn_max, sizeof(conn_max), "%uM", CONN_BUF_MAX_MIB);
	t_fill(src, SPAN, 23);
	start_on_file(&ft, "wr", NULL, 0, knobs);
	io = io_queue_up(&ft, &adm, 10000, 127, 0);
	for (unsigned i = 0; i < N; i++) {
		struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_WRITE, .nsid = 1,
					    .cid = (uint16_t)(100 + i) };

		sqe.cdw10 = (i % (SPAN / READ_BYTES)) * (READ_BYTES / 512);
		sqe.cdw12 = READ_BYTES / 512 - 1;
		ft_send_cmd(io, &sqe, NULL, READ_BYTES);
	}
	while (ndone < N) {
		union gdx_tcp_pdu pdu;

		recv_hdr(io, &pdu);
		if (pdu.ch.type == GDX_TCP_R2T) {
			unsigned i = pdu.r2t.cccid - 100u;

			assert_true(i < N);
			send_r2t_data(io, &pdu.r2t, src + (i % (SPAN / READ_BYTES)) * READ_BYTES);
			nr2t++;
			continue;
		}
		assert_int_equal(pdu.ch.type, GDX_TCP_RSP);
		assert_int_equal(pdu.rsp.cqe.status >> 1, 0);
		ndone++;
	}
	assert_int_equal(nr2t, N);
	assert_true(ft_log_count(&ft, "commands wait for buffers") >= 1);
	for (unsigned i = 0; i < SPAN / READ_BYTES; i++) {
		union gdx_tcp_pdu pdu;

		read_cmd(io, (uint16_t)(300 + i), (uint64_t)i * (READ_BYTES / 512));
		assert_int_equal(recv(io, &pdu, 24, MSG_WAITALL), 24);
		assert_int_equal(pdu.ch.type, GDX_TCP_C2H_DATA);
		assert_int_equal(recv(io, back + i * READ_BYTES, READ_BYTES, MSG_WAITALL),
				 READ_BYTES);
		assert_int_equal(ft_rsp(io, (uint16_t)(300 + i), NULL), 0);
	}
	assert_memory_equal(back, src, SPAN);
	close(io);
	close(adm);
	ft_stop(&ft);
	free(src);
	free(back);
}

/* A write whose R2T is never answered ends the queue too (KATO 0). */
static void test_r2t_stall(void **state)
{
	static char stall[16];
	static const char *knobs[] = { "nvmf.target.stall_timeout_ms", stall, NULL };
	static struct ft_target ft;
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_WRITE, .nsid = 1, .cid = 7,
				    .cdw12 = READ_BYTES / 512 - 1 };
	union gdx_tcp_pdu pdu;
	int adm, io;
	uint64_t t0, took;

	(void)state;
	snprintf(stall, sizeof(stall), "%u", STALL_MS);
	start_on_file(&ft, "r2t", NULL, 0, knobs);
	io = io_queue_up(&ft, &adm, 10000, 31, 0);
	ft_send_cmd(io, &sqe, NULL, READ_BYTES);
	assert_int_equal(recv(io, &pdu, 24, MSG_WAITALL), 24);
	assert_int_equal(pdu.ch.type, GDX_TCP_R2T);
	t0 = ft_now_ms();
	/* the data never comes: EOF once the stall timeout ends the queue */
	assert_int_equal(recv(io, &pdu, 1, 0), 0);
	took = ft_now_ms() - t0;
	print_message("queue with an unanswered R2T ended after %" PRIu64 " ms\n", took);
	assert_true(took >= STALL_MS - 500 && took < STALL_MS + 4000);
	assert_int_equal(ft_log_count(&ft, "no data sent for an R2T"), 1);
	close(io);
	close(adm);
	ft_stop(&ft);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_stalled_reader, ft_teardown),
		cmocka_unit_test_teardown(test_total_starves_none, ft_teardown),
		cmocka_unit_test_teardown(test_slow_reader, ft_teardown),
		cmocka_unit_test_teardown(test_many_writes, ft_teardown),
		cmocka_unit_test_teardown(test_r2t_stall, ft_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
