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

/* Sends a read or a write (opc) of READ_BYTES at slba, its data left to C2HData or R2T. */
static void io_cmd(struct host *h, uint8_t opc, uint16_t cid, uint64_t slba)
{
	struct gdx_nvme_sqe sqe = { .opc = opc, .nsid = 1, .cid = cid };

	sqe.cdw10 = (uint32_t)slba;
	sqe.cdw12 = READ_BYTES / 512 - 1;
	sqe.dptr.type = GDX_NVME_SGL_TRANSPORT;
	sqe.dptr.length = READ_BYTES;
	send_cmd(h, &sqe, NULL, 0);
}

/* n reads, cids from cid0, over the first span bytes of the namespace in turn. */
static void read_cmds(struct host *h, uint16_t cid0, unsigned n, uint64_t span)
{
	for (unsigned i = 0; i < n; i++)
		io_cmd(h, GDX_NVME_CMD_READ, (uint16_t)(cid0 + i),
		       (i % (span / READ_BYTES)) * (READ_BYTES / 512));
}

/* A read of READ_BYTES at slba on a queue that reads its socket. */
static void read_ok(struct host *h, uint64_t slba, void *buf)
{
	assert_int_equal(rw(h, GDX_NVME_CMD_READ, 1, slba, READ_BYTES / 512, buf, READ_BYTES,
			    false), 0);
}

/*
 * A controller with one I/O queue of SQ size sqsize + 1, KATO 0: adm its admin
 * queue, io the I/O queue, whose socket connects within timeout_ms.  rcvbuf:
 * that socket's receive buffer in bytes, 0 to leave it.
 */
static void io_queue_up(const struct ft_target *ft, struct host *adm, struct host *io,
			unsigned timeout_ms, uint16_t sqsize, int rcvbuf)
{
	int fd;

	ft_admin_up(adm, tcp_connect_ms(ft->port, 5000), 0, 1);
	fd = tcp_connect_ms(ft->port, timeout_ms);
	if (rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	host_icreq_fd(io, fd, false, false);
	assert_int_equal(fab_connect(io, FT_NQN, FT_HOSTNQN, 1, sqsize, adm->cntlid, 0, NULL), 0);
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
	struct host adm, io, adm2, io2;
	uint64_t rss0, rss, t0, took;
	char *buf = malloc(READ_BYTES);

	(void)state;
	assert_non_null(buf);
	snprintf(conn_max, sizeof(conn_max), "%uM", CONN_BUF_MAX_MIB);
	snprintf(stall, sizeof(stall), "%u", STALL_MS);
	start_on_file(&ft, "stall", NULL, 0, knobs);

	/* another host, served before, during and after */
	io_queue_up(&ft, &adm2, &io2, 5000, 31, 0);
	read_ok(&io2, 0, buf);
	rss0 = ft_rss_kib(&ft);

	/* the stalled reader: KATO 0, a small receive buffer, never read */
	io_queue_up(&ft, &adm, &io, 5000, 255, 16384);
	read_cmds(&io, 10, READS, NS_BYTES);
	t0 = ft_now_ms();
	/* the target does what it will with them; the other host is served meanwhile */
	usleep(1000 * 1000);
	read_ok(&io2, 0, buf);
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
		ssize_t n = recv(io.fd, buf, READ_BYTES, 0);

		if (n > 0)
			continue;
		assert_true(n == 0 || errno == ECONNRESET);
		break;
	}
	read_ok(&io2, 0, buf);
	close(io.fd);
	close(adm.fd);
	close(io2.fd);
	close(adm2.fd);
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
	struct host adm, io, adm2, io2;
	uint64_t t0, took;
	char *buf = malloc(READ_BYTES);

	(void)state;
	assert_non_null(buf);
	snprintf(buf_max, sizeof(buf_max), "%uM", CONN_BUF_MAX_MIB);
	snprintf(stall, sizeof(stall), "%u", STALL_LONG_MS);
	start_on_file(&ft, "total", NULL, 0, knobs);
	io_queue_up(&ft, &adm2, &io2, 5000, 31, 0);

	io_queue_up(&ft, &adm, &io, 5000, 127, 16384);
	read_cmds(&io, 100, N, NS_BYTES);
	usleep(1000 * 1000);
	assert_true(ft_log_count(&ft, "commands wait for buffers") >= 1);

	t0 = ft_now_ms();
	for (unsigned i = 0; i < OTHER; i++)
		read_ok(&io2, 0, buf);
	took = ft_now_ms() - t0;
	print_message("buf_max %u MiB held by an unread queue: %u reads of 1 MiB on another "
		      "queue in %" PRIu64 " ms\n", CONN_BUF_MAX_MIB, OTHER, took);
	/* before, they waited for the stall timeout to end the other queue */
	assert_true(took < STALL_LONG_MS / 4);
	assert_int_equal(ft_log_count(&ft, "no data taken"), 0);
	close(io.fd);
	close(adm.fd);
	close(io2.fd);
	close(adm2.fd);
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
	struct host adm, io;
	uint8_t *want = malloc(PATTERN), *got = malloc(READ_BYTES);
	bool done[N] = { false };
	unsigned ndone = 0;

	(void)state;
	assert_non_null(want);
	assert_non_null(got);
	snprintf(conn_max, sizeof(conn_max), "%uM", CONN_BUF_MAX_MIB);
	t_fill(want, PATTERN, 19);
	start_on_file(&ft, "slow", want, PATTERN, knobs);
	io_queue_up(&ft, &adm, &io, 10000, 127, 0);
	read_cmds(&io, 100, N, PATTERN);
	usleep(1000 * 1000);
	assert_true(ft_log_count(&ft, "commands wait for buffers") >= 1);
	while (ndone < N) {
		union gdx_tcp_pdu pdu;
		unsigned i;
		int n = recv_pdu(&io, &pdu, got, READ_BYTES);

		if (pdu.ch.type == GDX_TCP_C2H_DATA) {
			i = pdu.data.cccid - 100u;
			assert_true(i < N);
			assert_int_equal(n, READ_BYTES);
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
	close(io.fd);
	close(adm.fd);
	ft_stop(&ft);
	free(want);
	free(got);
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
	struct host adm, io;
	uint8_t *src = malloc(SPAN), *back = malloc(SPAN);
	unsigned ndone = 0, nr2t = 0;

	(void)state;
	assert_non_null(src);
	assert_non_null(back);
	snprintf(conn_max, sizeof(conn_max), "%uM", CONN_BUF_MAX_MIB);
	t_fill(src, SPAN, 23);
	start_on_file(&ft, "wr", NULL, 0, knobs);
	io_queue_up(&ft, &adm, &io, 10000, 127, 0);
	for (unsigned i = 0; i < N; i++)
		io_cmd(&io, GDX_NVME_CMD_WRITE, (uint16_t)(100 + i),
		       (i % (SPAN / READ_BYTES)) * (READ_BYTES / 512));
	while (ndone < N) {
		union gdx_tcp_pdu pdu;

		assert_int_equal(recv_pdu(&io, &pdu, NULL, 0), 0);
		if (pdu.ch.type == GDX_TCP_R2T) {
			unsigned i = pdu.r2t.cccid - 100u;

			assert_true(i < N);
			send_r2t_data(&io, &pdu.r2t, src + (i % (SPAN / READ_BYTES)) * READ_BYTES);
			nr2t++;
			continue;
		}
		assert_int_equal(pdu.ch.type, GDX_TCP_RSP);
		assert_int_equal(pdu.rsp.cqe.status >> 1, 0);
		ndone++;
	}
	assert_int_equal(nr2t, N);
	assert_true(ft_log_count(&ft, "commands wait for buffers") >= 1);
	for (unsigned i = 0; i < SPAN / READ_BYTES; i++)
		read_ok(&io, (uint64_t)i * (READ_BYTES / 512), back + i * READ_BYTES);
	assert_memory_equal(back, src, SPAN);
	close(io.fd);
	close(adm.fd);
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
	union gdx_tcp_pdu pdu;
	struct host adm, io;
	uint64_t t0, took;

	(void)state;
	snprintf(stall, sizeof(stall), "%u", STALL_MS);
	start_on_file(&ft, "r2t", NULL, 0, knobs);
	io_queue_up(&ft, &adm, &io, 10000, 31, 0);
	io_cmd(&io, GDX_NVME_CMD_WRITE, 7, 0);
	assert_int_equal(recv_pdu(&io, &pdu, NULL, 0), 0);
	assert_int_equal(pdu.ch.type, GDX_TCP_R2T);
	t0 = ft_now_ms();
	/* the data never comes: EOF once the stall timeout ends the queue */
	assert_int_equal(recv(io.fd, &pdu, 1, 0), 0);
	took = ft_now_ms() - t0;
	print_message("queue with an unanswered R2T ended after %" PRIu64 " ms\n", took);
	assert_true(took >= STALL_MS - 500 && took < STALL_MS + 4000);
	assert_int_equal(ft_log_count(&ft, "no data sent for an R2T"), 1);
	close(io.fd);
	close(adm.fd);
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
