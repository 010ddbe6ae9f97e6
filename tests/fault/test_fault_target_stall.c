/* SPDX-License-Identifier: MIT */
/*
 * A host that stops reading (issue 19, item 3): one I/O queue of SQ size 256
 * issues 512 reads of 1 MiB from a file namespace and never reads the
 * socket, with KATO 0.  The target must hold at most about
 * nvmf.target.conn_buf_max of data for it (its RSS is measured from outside),
 * stop taking its commands meanwhile, end the queue once it has made no
 * progress for nvmf.target.stall_timeout_ms, and serve another host all along.
 * A host that only pauses gets every read, right, once it reads again.
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

static void test_stalled_reader(void **state)
{
	static char conn_max[16], stall[16];
	static const char *knobs[] = { "nvmf.target.conn_buf_max", conn_max,
				       "nvmf.target.stall_timeout_ms", stall, NULL };
	static struct ft_target ft;
	const char *ns[] = { NULL, NULL };
	char path[64];
	int fd, adm, io, adm2, io2, small = 16384;
	uint16_t cntlid, cntlid2;
	uint64_t rss0, rss, t0, took;
	char *buf = malloc(READ_BYTES);

	(void)state;
	assert_non_null(buf);
	snprintf(conn_max, sizeof(conn_max), "%uM", CONN_BUF_MAX_MIB);
	snprintf(stall, sizeof(stall), "%u", STALL_MS);
	snprintf(path, sizeof(path), "/tmp/gdx-fault-stall-%d.img", (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, NS_BYTES), 0);
	close(fd);
	ns[0] = path;
	ft_start(&ft, ns, 0, knobs);

	/* another host, served before, during and after */
	adm2 = ft_connect(&ft, 5000);
	cntlid2 = ft_admin_up(adm2, 0, 1);
	io2 = ft_connect(&ft, 5000);
	ft_icreq(io2);
	assert_int_equal(ft_connect_q(io2, 1, 31, &cntlid2, 0), 0);
	read_ok(io2, 1, buf);
	rss0 = ft_rss_kib(&ft);

	/* the stalled reader: KATO 0, a small receive buffer, never read */
	adm = ft_connect(&ft, 5000);
	cntlid = ft_admin_up(adm, 0, 1);
	io = ft_connect(&ft, 5000);
	setsockopt(io, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	ft_icreq(io);
	assert_int_equal(ft_connect_q(io, 1, 255, &cntlid, 0), 0);
	for (unsigned i = 0; i < READS; i++)
		read_cmd(io, (uint16_t)(i + 10), (uint64_t)(i % (NS_BYTES / READ_BYTES)) *
							 (READ_BYTES / 512));
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
	assert_true(ft_log_count(&ft, "takes no more commands") >= 1);

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
	unlink(path);
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
	const char *ns[] = { NULL, NULL };
	char path[64];
	int fd, adm, io;
	uint16_t cntlid;
	uint8_t *want = malloc(PATTERN), *got = malloc(READ_BYTES);
	bool done[N] = { false };
	unsigned ndone = 0;

	(void)state;
	assert_non_null(want);
	assert_non_null(got);
	snprintf(conn_max, sizeof(conn_max), "%uM", CONN_BUF_MAX_MIB);
	snprintf(path, sizeof(path), "/tmp/gdx-fault-slow-%d.img", (int)getpid());
	t_fill(want, PATTERN, 19);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, want, PATTERN, 0), PATTERN);
	close(fd);
	ns[0] = path;
	ft_start(&ft, ns, 0, knobs);
	adm = ft_connect(&ft, 5000);
	cntlid = ft_admin_up(adm, 0, 1);
	io = ft_connect(&ft, 10000);
	ft_icreq(io);
	assert_int_equal(ft_connect_q(io, 1, 127, &cntlid, 0), 0);
	for (unsigned i = 0; i < N; i++)
		read_cmd(io, (uint16_t)(100 + i), (uint64_t)(i % (PATTERN / READ_BYTES)) *
							  (READ_BYTES / 512));
	usleep(1000 * 1000);
	assert_true(ft_log_count(&ft, "takes no more commands") >= 1);
	while (ndone < N) {
		union gdx_tcp_pdu pdu;
		unsigned i;

		assert_int_equal(recv(io, &pdu, 8, MSG_WAITALL), 8);
		assert_int_equal(recv(io, pdu.raw + 8, pdu.ch.hlen - 8u, MSG_WAITALL),
				 pdu.ch.hlen - 8);
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
	unlink(path);
	free(want);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_stalled_reader, ft_teardown),
		cmocka_unit_test_teardown(test_slow_reader, ft_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
