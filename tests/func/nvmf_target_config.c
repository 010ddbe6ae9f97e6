/* SPDX-License-Identifier: MIT */
/*
 * test_nvmf_target's cases on the target as it is configured and run: nvmetcli
 * JSON, stats read while it stops and starts, reactors on --cpus and --follow.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "threads.h"

#include <gdx/nvmf.h>

#include "common/util.h"
#include "nvmf_target_suite.h"

void test_json(void **state)
{
	char cfg[128], img[128];
	struct gdx_nvmf_target *t2;
	FILE *f;
	int fd;

	(void)state;
	snprintf(cfg, sizeof(cfg), "/tmp/gdx-nvmf-cfg-%d.json", getpid());
	snprintf(img, sizeof(img), "/tmp/gdx-nvmf-img-%d", getpid());
	fd = open(img, O_CREAT | O_RDWR | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	close(fd);
	f = fopen(cfg, "w");
	assert_non_null(f);
	/* as nvmetcli save writes it (abridged) */
	fprintf(f,
		"{\"hosts\": [{\"nqn\": \"nqn.2024-01.io.gdx:h1\"}],\n"
		" \"ports\": [{\"addr\": {\"adrfam\": \"ipv4\", \"traddr\": \"127.0.0.1\",\n"
		"   \"treq\": \"not specified\", \"trsvcid\": \"0\", \"trtype\": \"tcp\"},\n"
		"   \"portid\": 1, \"referrals\": [], \"subsystems\": [\"nqn.2024-01.io.gdx:j\"]},\n"
		"  {\"addr\": {\"trtype\": \"fc\", \"traddr\": \"nn-0x1:pn-0x2\", \"trsvcid\": \"none\"},\n"
		"   \"portid\": 2, \"subsystems\": []}],\n"
		" \"subsystems\": [{\"allowed_hosts\": [\"nqn.2024-01.io.gdx:h1\"],\n"
		"   \"attr\": {\"allow_any_host\": \"0\", \"serial\": \"abc123\", \"version\": \"1.3\"},\n"
		"   \"namespaces\": [{\"device\": {\"nguid\": \"00000000-0000-0000-0000-000000000000\",\n"
		"     \"path\": \"%s\", \"uuid\": \"0b7d6a10-5a1e-4c3e-8f62-8b0a9e8c1d11\"},\n"
		"     \"enable\": 1, \"nsid\": 1}, {\"device\": {\"path\": \"ram:1M\"}, \"enable\": 0,\n"
		"     \"nsid\": 2}],\n"
		"   \"nqn\": \"nqn.2024-01.io.gdx:j\"}]}\n",
		img);
	fclose(f);
	assert_int_equal(gdx_nvmf_target_create(NULL, &t2), 0);
	assert_int_equal(gdx_nvmf_target_load_json(t2, cfg), 0);
	assert_int_equal(gdx_nvmf_target_start(t2), 0);
	assert_true(gdx_nvmf_target_bound_port(t2, 1) > 0);
	assert_int_equal(gdx_nvmf_target_bound_port(t2, 2), -ENOENT);
	gdx_nvmf_target_destroy(t2);

	/*
	 * An rdma port loads; on an address no RDMA device has (none here) the
	 * start fails as a whole, and the TCP port it had opened is closed again.
	 */
	f = fopen(cfg, "w");
	fprintf(f, "{\"ports\": [{\"portid\": 1, \"addr\": {\"trtype\": \"tcp\", \"traddr\": "
		   "\"127.0.0.1\", \"trsvcid\": \"0\"}, \"subsystems\": []}, {\"portid\": 2, "
		   "\"addr\": {\"trtype\": \"rdma\", \"traddr\": \"127.0.0.1\", \"trsvcid\": \"0\"}, "
		   "\"subsystems\": []}]}");
	fclose(f);
	assert_int_equal(gdx_nvmf_target_create(NULL, &t2), 0);
	assert_int_equal(gdx_nvmf_target_load_json(t2, cfg), 0);
	assert_true(gdx_nvmf_target_start(t2) < 0);
	assert_int_equal(gdx_nvmf_target_bound_port(t2, 1), -ENOENT);
	assert_int_equal(gdx_nvmf_target_add_port_tr(t2, 3, "fc", "127.0.0.1", "0"),
			 -EPROTONOSUPPORT);
	gdx_nvmf_target_destroy(t2);

	/* broken files are refused with a clear error */
	f = fopen(cfg, "w");
	fprintf(f, "{\"ports\": [{\"portid\": 1, \"addr\": {\"trtype\": \"tcp\"}, "
		   "\"subsystems\": [\"nqn.2024-01.io.gdx:missing\"]}]}");
	fclose(f);
	assert_int_equal(gdx_nvmf_target_create(NULL, &t2), 0);
	assert_int_equal(gdx_nvmf_target_load_json(t2, cfg), GDX_ECONFIG);
	gdx_nvmf_target_destroy(t2);
	f = fopen(cfg, "w");
	fprintf(f, "{\"subsystems\": [");
	fclose(f);
	assert_int_equal(gdx_nvmf_target_create(NULL, &t2), 0);
	assert_int_equal(gdx_nvmf_target_load_json(t2, cfg), GDX_ECONFIG);
	gdx_nvmf_target_destroy(t2);
	unlink(cfg);
	unlink(img);
}

struct stats_reader {
	struct gdx_nvmf_target *t;
	atomic_bool stop;
	unsigned calls, fails;
};

static void *stats_reader_main(void *arg)
{
	struct stats_reader *r = arg;
	FILE *f = fopen("/dev/null", "w");

	while (f && !atomic_load(&r->stop)) {
		r->fails += gdx_nvmf_target_stats_json(r->t, f) != 0;
		r->calls++;
	}
	if (f)
		fclose(f);
	else
		r->fails++;
	return NULL;
}

/*
 * The stats (with every reactor's latency sums) are read while the target
 * stops and starts again: stop frees the reactors the sums are read from.
 * What the reactors counted stays in the sums once they are gone.
 */
void test_stats_while_stopping(void **state)
{
	struct gdx_nvmf_target_opts o;
	struct stats_reader r[2] = { 0 };
	struct gdx_nvmf_target *t;
	pthread_t th[2];

	(void)state;
	gdx_nvmf_target_opts_init(&o, sizeof(o));
	o.reactors = 16;	/* sums that take a while to add up */
	assert_int_equal(gdx_nvmf_target_create(&o, &t), 0);
	assert_int_equal(gdx_nvmf_target_add_subsys(t, "nqn.2024-01.io.gdx:stats", 1), 0);
	assert_int_equal(gdx_nvmf_target_add_port(t, 1, "127.0.0.1", "0"), 0);
	assert_int_equal(gdx_nvmf_target_start(t), 0);
	for (int i = 0; i < 2; i++) {
		r[i].t = t;
		assert_int_equal(pthread_create(&th[i], NULL, stats_reader_main, &r[i]), 0);
	}
	for (int i = 0; i < 300; i++) {
		gdx_nvmf_target_stop(t);
		assert_int_equal(gdx_nvmf_target_start(t), 0);
	}
	for (int i = 0; i < 2; i++) {
		atomic_store(&r[i].stop, true);
		pthread_join(th[i], NULL);
		assert_true(r[i].calls > 0);
		assert_int_equal(r[i].fails, 0);
	}
	gdx_nvmf_target_destroy(t);
}

/* The CPUs reactor 0 of the running target may use (CPU_COUNT 0: not found). */
static cpu_set_t reactor0_cpus(void)
{
	cpu_set_t set;

	if (!t_thread_cpus("gdx-nvmf-0", &set))
		CPU_ZERO(&set);
	return set;
}

/* Whether reactor 0 of the running target runs on exactly `cpu`. */
static bool reactor0_on(int cpu)
{
	cpu_set_t now = reactor0_cpus();

	return CPU_COUNT(&now) == 1 && CPU_ISSET(cpu, &now);
}

/* depth 4 KiB reads at once, then their data and responses */
static void read_round(struct host *io, unsigned depth)
{
	uint8_t buf[8 * 4096];

	for (unsigned i = 0; i < depth; i++) {
		struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_CMD_READ, .nsid = 1,
					    .cdw10 = i * 8, .cdw12 = 7 };

		sqe.cid = io->cid++;
		sqe.dptr.type = GDX_NVME_SGL_TRANSPORT;
		sqe.dptr.length = 4096;
		send_cmd(io, &sqe, NULL, 0);
	}
	for (unsigned rsps = 0; rsps < depth;) {
		union gdx_tcp_pdu pdu;

		assert_true(recv_pdu(io, &pdu, buf, sizeof(buf)) >= 0);
		if (pdu.ch.type == GDX_TCP_RSP) {
			assert_int_equal(pdu.rsp.cqe.status >> 1, 0);
			rsps++;
		}
	}
}

/* Rounds of depth reads until reactor 0 runs on exactly `cpu` (or 5 s pass). */
static bool follow_until(struct host *io, int cpu, unsigned depth)
{
	uint64_t end = gdx_now_ns() + 5000000000ull;

	while (gdx_now_ns() < end) {
		if (reactor0_on(cpu))
			return true;
		read_round(io, depth);
	}
	return false;
}

/* One read at a time for ms milliseconds: whether reactor 0 ran on `cpu` meanwhile. */
static bool visits(struct host *io, int cpu, unsigned ms)
{
	uint64_t end = gdx_now_ns() + ms * 1000000ull;
	bool seen = false;

	while (gdx_now_ns() < end) {
		seen = seen || reactor0_on(cpu);
		read_round(io, 1);
	}
	return seen;
}

/* Whether reactor 0 goes to `cpu` within ms milliseconds, nothing sent meanwhile. */
static bool idle_until(int cpu, unsigned ms)
{
	uint64_t end = gdx_now_ns() + ms * 1000000ull;

	while (gdx_now_ns() < end) {
		if (reactor0_on(cpu))
			return true;
		usleep(1000);
	}
	return false;
}

/*
 * --cpus, --follow and polling: bad CPU lists are refused; a following
 * reactor moves to the CPU the host sends from while the host keeps one
 * command in flight, spends a period at home now and then (on the host's
 * CPU it cannot see how deep the host's queue is), goes home when the host
 * falls idle, and when it keeps several.  Runs last: it replaces the shared
 * target with its own.
 */
void test_placement(void **state)
{
	static const char *const bad[] = { "", "x", "1-0", "3,", "0,,1", "-1", "100000", "0-",
					   "1 " };
	struct gdx_nvmf_target_opts o;
	struct gdx_nvmf_target *t2 = NULL;
	struct host a, io;
	cpu_set_t mine, one;
	char home[16];
	int x = -1, y = -1;

	(void)state;
	gdx_nvmf_target_opts_init(&o, sizeof(o));
	for (unsigned i = 0; i < GDX_ARRAY_SIZE(bad); i++) {
		o.cpus = bad[i];
		assert_int_equal(gdx_nvmf_target_create(&o, &t2), -EINVAL);
	}
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &mine))
			continue;
		if (x < 0)
			x = c;
		else if (y < 0)
			y = c;
	}
	/* home on a second CPU where there is one; the host side runs on x */
	snprintf(home, sizeof(home), "%d", y >= 0 ? y : x);
	o.cpus = home;
	o.reactors = 1;
	o.follow = 1;
	o.poll_us = 500;
	gdx_nvmf_target_destroy(tgt);
	assert_int_equal(gdx_nvmf_target_create(&o, &tgt), 0);
	assert_int_equal(gdx_nvmf_target_add_subsys(tgt, NQN, 1), 0);
	assert_int_equal(gdx_nvmf_target_add_ns(tgt, NQN, 1, "null:8M", 512), 0);
	assert_int_equal(gdx_nvmf_target_add_port(tgt, 1, "127.0.0.1", "0"), 0);
	assert_int_equal(gdx_nvmf_target_link(tgt, 1, NQN), 0);
	assert_int_equal(gdx_nvmf_target_start(tgt), 0);
	port = gdx_nvmf_target_bound_port(tgt, 1);
	one = reactor0_cpus();
	assert_int_equal(CPU_COUNT(&one), 1);
	assert_true(CPU_ISSET(y >= 0 ? y : x, &one));

	CPU_ZERO(&one);
	CPU_SET(x, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	admin_up(&a, NQN, false, false, 5000);
	assert_int_equal(set_nr_queues(&a, 1), 0);
	io_up(&io, &a, false, false, 1);
	assert_true(follow_until(&io, x, 1));
	if (y >= 0) {
		/* a probe every PROBE_EVERY periods of PLACE_NS (200 ms), and back */
		assert_true(visits(&io, y, 2000));
		assert_true(follow_until(&io, x, 1));
		/* an idle period, seen at the reactor's next wake-up (1 s at most) */
		assert_true(idle_until(y, 3000));
		assert_true(follow_until(&io, x, 1));
		assert_true(follow_until(&io, y, 8));
	}
	assert_int_equal(sched_setaffinity(0, sizeof(mine), &mine), 0);
	close(io.fd);
	close(a.fd);
}
