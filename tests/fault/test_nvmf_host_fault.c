/* SPDX-License-Identifier: MIT */
/*
 * The NVMe/TCP host under faults (docs/reliability.md, "NVMe/TCP host"): the
 * gdx target runs as its own process (`gdx nvmf target`, a file namespace),
 * the host in this one talks to it through the fault proxy (nvmf_proxy.h),
 * which resets, truncates, duplicates, delays or stalls chosen PDUs.  Each
 * case holds the host to its promise: the I/O completes once with the right
 * data after the recovery, or fails with a clear error within the documented
 * time; never a hang (a watchdog ends the run), a spin (the process's CPU
 * time is bounded against the wall time), a second completion or wrong data.
 * Last, the target is killed (SIGKILL) in the middle of a stream of writes and
 * restarted on the same file: every acknowledged write reads back intact, and
 * no block is torn.
 *
 * argv[1]: the gdx binary.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "common/util.h"
#include "nvmf/proto/tcp.h"
#include "nvmf_proxy.h"

#define NQN "nqn.2026-12.io.gdx:fault"
#define NS_BYTES (16u << 20)
#define BS 4096u
#define IO_TIMEOUT_MS 1000u
#define CTRL_LOSS_MS 2000u
#define RESTART_LOSS_MS 20000u
#define CONNECT_TMO_MS 1000u
#define CASE_WATCHDOG_S 30u

extern char **environ;

static const char *gdx_bin;
static char ns_path[64], tlog[64];
static char tport[16];		/* the target's port, kept across restarts */
static volatile pid_t tpid = -1;
static uint8_t *ref;		/* what the namespace's first MiB holds */
static const char *case_name = "";

/* ---- the target process ----------------------------------------------------- */

static void target_spawn(const char *port)
{
	char listen[64], ns[96];
	char *argv[] = { (char *)gdx_bin, "nvmf", "target", "-l", listen, "-n", NQN, "-N", ns,
			 NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;

	snprintf(listen, sizeof(listen), "127.0.0.1:%s", port);
	snprintf(ns, sizeof(ns), "%s,bs=%u", ns_path, BS);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 2, tlog, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_adddup2(&fa, 2, 1);
	assert_int_equal(posix_spawn(&pid, gdx_bin, &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	tpid = pid;
	for (int i = 0; i < 400; i++) {
		char buf[8192] = "", *at;
		FILE *f = fopen(tlog, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f)
			fclose(f);
		buf[n] = 0;
		if (strstr(buf, "target: ready") && (at = strstr(buf, "listening on 127.0.0.1:"))) {
			snprintf(tport, sizeof(tport), "%d", atoi(at + strlen("listening on 127.0.0.1:")));
			return;
		}
		usleep(25000);
	}
	fail_msg("the target did not start (log %s)", tlog);
}

/*
 * A target that died by itself (a crash the host provoked) fails the case,
 * with its log, and is started again.
 */
static void target_alive(void)
{
	char buf[4096];
	size_t n;
	FILE *f;

	if (tpid <= 0 || waitpid(tpid, NULL, WNOHANG) != tpid)
		return;
	tpid = -1;
	f = fopen(tlog, "r");
	while (f && (n = fread(buf, 1, sizeof(buf), f)))
		fwrite(buf, 1, n, stderr);
	if (f)
		fclose(f);
	/* the cases after this one get a target again */
	target_spawn(tport);
	fail_msg("the target process died during %s (its log is above)", case_name);
}

static void target_kill(void)
{
	pid_t pid = tpid;

	assert_true(pid > 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	tpid = -1;
}

/* ---- measuring: time, CPU, the watchdog ------------------------------------------ */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static struct timespec case_t0;
static double case_c0;

/* n as decimal into b; returns the length. */
static size_t put_u(char *b, unsigned long n)
{
	char t[24];
	size_t k = 0, len;

	do
		t[k++] = (char)('0' + n % 10);
	while ((n /= 10));
	for (len = 0; k; len++)
		b[len] = t[--k];
	return len;
}

/*
 * A hang ends the run here, saying how much CPU the process burnt meanwhile
 * (a spin, or a wait), and takes the target process and the files with it:
 * async-signal-safe calls only.
 */
static void watchdog(int sig)
{
	char m[256];
	size_t n = 0, k = strlen(case_name);
	struct timespec ts;
	struct rusage ru;

	(void)sig;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	getrusage(RUSAGE_SELF, &ru);
	memcpy(m, "FAIL: hung (watchdog): ", 23);
	n = 23;
	k = k < 120 ? k : 120;
	memcpy(m + n, case_name, k);
	n += k;
	memcpy(m + n, "; CPU ms: ", 10);
	n += 10;
	n += put_u(m + n, (unsigned long)((ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
					  (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000 -
					  case_c0 * 1000));
	memcpy(m + n, " in wall ms: ", 13);
	n += 13;
	n += put_u(m + n, (unsigned long)((ts.tv_sec - case_t0.tv_sec) * 1000 +
					  (ts.tv_nsec - case_t0.tv_nsec) / 1000000));
	m[n++] = '\n';
	if (write(2, m, n) < 0)
		_exit(1);
	if (tpid > 0)
		kill(tpid, SIGKILL);
	unlink(ns_path);
	unlink(tlog);
	_exit(1);
}

struct meter {
	double t0, c0;
};

static struct meter case_begin(const char *name)
{
	case_name = name;
	clock_gettime(CLOCK_MONOTONIC, &case_t0);
	case_c0 = cpu_s();
	alarm(CASE_WATCHDOG_S);
	return (struct meter){ now_s(), case_c0 };
}

/*
 * The whole process (host, proxy) may not burn more than a fifth of a core
 * over the case plus a fixed allowance for the work itself (connecting,
 * copying a few MiB): a spinning thread uses a whole one.
 */
static double case_end(struct meter m)
{
	double wall = now_s() - m.t0, cpu = cpu_s() - m.c0;

	alarm(0);
	fprintf(stderr, "case %-44s %6.3f s wall %6.3f s CPU\n", case_name, wall, cpu);
	target_alive();
	if (cpu > 0.3 + 0.2 * wall)
		fail_msg("%s: %.3f s of CPU in %.3f s: something spins", case_name, cpu, wall);
	return wall;
}

/* Ends the case (case_end), then its controller and proxy. */
static void case_close(struct meter m, struct gdx_nvmf_ctrl *c, struct fproxy *p)
{
	case_end(m);
	gdx_nvmf_disconnect(c);
	fp_stop(p);
}

/* ---- the host ------------------------------------------------------------------ */

static int host_connect_tmo(const char *port, unsigned queues, unsigned ctrl_loss_ms,
			    struct gdx_nvmf_ctrl **c)
{
	struct gdx_nvmf_host_opts o;

	gdx_nvmf_host_opts_init(&o, sizeof(o));
	o.nr_io_queues = queues;
	o.queue_depth = 16;
	o.kato_ms = 2000;
	o.io_timeout_ms = IO_TIMEOUT_MS;
	o.connect_timeout_ms = CONNECT_TMO_MS;
	o.reconnect_delay_ms = 50;
	o.ctrl_loss_tmo_ms = ctrl_loss_ms;
	o.max_retries = 5;
	return gdx_nvmf_connect("127.0.0.1", port, NQN, &o, c);
}

static int host_connect(const char *port, unsigned queues, struct gdx_nvmf_ctrl **c)
{
	return host_connect_tmo(port, queues, CTRL_LOSS_MS, c);
}

struct done {
	pthread_mutex_t m;
	pthread_cond_t cv;
	atomic_uint calls;
};

static void done_cb(struct gdx_nvmf_io *io, void *arg)
{
	struct done *d = arg;

	(void)io;
	pthread_mutex_lock(&d->m);
	atomic_fetch_add(&d->calls, 1);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->m);
}

/* Waits for an I/O's completion, then a while longer for a second: it completes once. */
static void done_once(struct done *d)
{
	pthread_mutex_lock(&d->m);
	while (!atomic_load(&d->calls))
		pthread_cond_wait(&d->cv, &d->m);
	pthread_mutex_unlock(&d->m);
	usleep(100000);
	assert_int_equal(atomic_load(&d->calls), 1);
}

/* One I/O through the callback path, which says how many times it completed (done_once). */
static int io_once(struct gdx_nvmf_ctrl *c, enum gdx_nvmf_op op, void *buf, size_t len,
		   uint64_t off)
{
	struct done d = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
	struct gdx_nvmf_io io = { .op = op, .nsid = 1, .offset = off, .len = len, .buf = buf };

	assert_int_equal(gdx_nvmf_submit_cb(c, &io, done_cb, &d), 0);
	done_once(&d);
	return io.result;
}

/*
 * Reads [off, off + len) of the reference area through c and compares; a
 * failure is accepted only with the code alt (0: none is).
 */
static void read_check_or(struct gdx_nvmf_ctrl *c, size_t len, uint64_t off, int alt)
{
	uint8_t *b = malloc(len);
	int rc;

	memset(b, 0xee, len);
	rc = io_once(c, GDX_NVMF_OP_READ, b, len, off);
	if (rc && alt && rc == alt)
		fprintf(stderr, "  the read failed: %s\n", gdx_strerror(rc));
	else
		assert_int_equal(rc, 0);
	if (!rc)
		assert_memory_equal(b, ref + off, len);
	free(b);
}

static void read_check(struct gdx_nvmf_ctrl *c, size_t len, uint64_t off)
{
	read_check_or(c, len, off, 0);
}

static void wait_live(struct gdx_nvmf_ctrl *c)
{
	for (int i = 0; i < 200 && gdx_nvmf_ctrl_state(c) != GDX_NVMF_LIVE; i++)
		usleep(10000);
}

/* ---- cases ---------------------------------------------------------------------- */

static int group_setup(void **state)
{
	struct gdx_nvmf_ctrl *c;
	int fd;

	(void)state;
	snprintf(ns_path, sizeof(ns_path), "/tmp/gdx-fault-ns-XXXXXX");
	snprintf(tlog, sizeof(tlog), "/tmp/gdx-fault-tgt-XXXXXX");
	fd = mkstemp(ns_path);
	if (fd < 0 || ftruncate(fd, NS_BYTES))
		return -1;
	close(fd);
	fd = mkstemp(tlog);
	if (fd < 0)
		return -1;
	close(fd);
	signal(SIGALRM, watchdog);
	target_spawn("0");
	ref = malloc(1 << 20);
	t_fill(ref, 1 << 20, 19);
	if (host_connect(tport, 1, &c) || gdx_nvmf_write(c, 1, ref, 1 << 20, 0))
		return -1;
	gdx_nvmf_disconnect(c);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (tpid > 0)
		target_kill();
	unlink(ns_path);
	unlink(tlog);
	free(ref);
	return 0;
}

struct step {
	const char *name;
	enum fp_dir dir;
	int type;
	unsigned nth;
	enum fp_act act;
};

/* Every step of a queue's connect, and what may go wrong right after the last. */
static const struct step steps[] = {
	{ "reset at ICReq", FP_H2C, GDX_TCP_ICREQ, 1, FP_RESET },
	{ "reset at ICResp", FP_C2H, GDX_TCP_ICRESP, 1, FP_RESET },
	{ "reset at Connect", FP_H2C, GDX_TCP_CMD, 1, FP_RESET },
	{ "reset at Connect response", FP_C2H, GDX_TCP_RSP, 1, FP_RESET },
	{ "reset after Connect response", FP_C2H, GDX_TCP_RSP, 1, FP_RESET_AFTER },
	{ "Connect response twice", FP_C2H, GDX_TCP_RSP, 1, FP_DUP },
	{ "ICResp truncated", FP_C2H, GDX_TCP_ICRESP, 1, FP_TRUNCATE },
};

/*
 * The first connect, with a fault at each step on the admin queue (connection
 * 0) and the first of two I/O queues (1): gdx_nvmf_connect fails with an error
 * within the connect timeout, or, where the fault comes after the set-up
 * noticed nothing wrong, the controller recovers and a read is right.  Before
 * the fix, a reset (or a second response) right after an I/O queue's Connect
 * response left a live controller with a dead queue, and the read spun
 * forever.
 */
static void connect_faults(void **state)
{
	(void)state;
	for (int conn = 0; conn <= 1; conn++)
		for (size_t i = 0; i < GDX_ARRAY_SIZE(steps); i++) {
			struct fp_rule r = { conn, steps[i].dir, steps[i].type, steps[i].nth,
					     steps[i].act, 0 };
			struct gdx_nvmf_ctrl *c = NULL;
			char port[16], name[96];
			struct fproxy *p = fp_start(tport, &r, 1, port);
			struct meter m;
			double t;
			int rc;

			snprintf(name, sizeof(name), "connect: %s queue: %s",
				 conn ? "I/O" : "admin", steps[i].name);
			m = case_begin(name);
			t = now_s();
			rc = host_connect(port, 2, &c);
			t = now_s() - t;
			assert_int_equal(fp_fired(p, 0), 1);
			if (rc) {
				fprintf(stderr, "  connect failed in %.3f s: %s\n", t,
					gdx_strerror(rc));
				assert_true(t < CONNECT_TMO_MS / 1000.0 + 2);
			} else {
				read_check(c, 256 << 10, 0);
				gdx_nvmf_disconnect(c);
			}
			case_end(m);
			fp_stop(p);
		}
}

/*
 * The same faults on a reconnect: a reset in the middle of a read starts the
 * recovery, and the fault hits the new association's admin queue (connection
 * 2) or its I/O queue (3).  The host tries again after the reconnect delay and
 * the read completes, once, with the right data.
 */
static void reconnect_faults(void **state)
{
	(void)state;
	for (int conn = 2; conn <= 3; conn++)
		for (size_t i = 0; i < GDX_ARRAY_SIZE(steps); i++) {
			struct fp_rule r[2] = {
				{ 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_RESET, 0 },
				{ conn, steps[i].dir, steps[i].type, steps[i].nth, steps[i].act, 0 },
			};
			struct gdx_nvmf_ctrl *c;
			char port[16], name[96];
			struct fproxy *p = fp_start(tport, r, 2, port);
			struct meter m;

			snprintf(name, sizeof(name), "reconnect: %s queue: %s",
				 conn == 2 ? "admin" : "I/O", steps[i].name);
			assert_int_equal(host_connect(port, 1, &c), 0);
			m = case_begin(name);
			/*
			 * A second Connect response may reach the I/O queue after the
			 * read was sent again on it: a protocol error with the read in
			 * flight (io_faults)
			 */
			read_check_or(c, 256 << 10, 0, steps[i].act == FP_DUP ? GDX_EPROTO : 0);
			assert_int_equal(fp_fired(p, 0), 1);
			assert_int_equal(fp_fired(p, 1), 1);
			case_close(m, c, p);
		}
}

/* Faults in the middle of I/O on the one I/O queue (connection 1). */
static void io_faults(void **state)
{
	/*
	 * proto: the fault makes the controller break the protocol while the
	 * command is in flight, which fails it with GDX_EPROTO (nvmf-host.md:
	 * such a controller is not trusted to redo it) or, where it had
	 * completed, leaves it right.
	 */
	static const struct {
		const char *name;
		bool write, proto;
		struct fp_rule r;
	} cases[] = {
		{ "reset before a read's data", false, false,
		  { 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_RESET, 0 } },
		{ "reset mid-read", false, false, { 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_CUT, 0 } },
		{ "reset after a read's data", false, false,
		  { 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_RESET_AFTER, 0 } },
		{ "C2HData truncated", false, false, { 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_TRUNCATE, 0 } },
		{ "C2HData twice", false, true, { 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_DUP, 0 } },
		{ "reset before a write's data", true, false,
		  { 1, FP_H2C, GDX_TCP_H2C_DATA, 1, FP_RESET, 0 } },
		{ "reset mid-write", true, false, { 1, FP_H2C, GDX_TCP_H2C_DATA, 1, FP_CUT, 0 } },
		{ "H2CData truncated", true, false, { 1, FP_H2C, GDX_TCP_H2C_DATA, 1, FP_TRUNCATE, 0 } },
		{ "write's CapsuleResp twice", true, false, { 1, FP_C2H, GDX_TCP_RSP, 2, FP_DUP, 0 } },
		{ "write's CapsuleResp delayed 300 ms", true, false,
		  { 1, FP_C2H, GDX_TCP_RSP, 2, FP_DELAY, 300 } },
	};
	uint8_t *w = malloc(256 << 10);

	(void)state;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(cases); i++) {
		struct gdx_nvmf_ctrl *c;
		char port[16];
		struct fproxy *p = fp_start(tport, &cases[i].r, 1, port);
		struct meter m;

		assert_int_equal(host_connect(port, 1, &c), 0);
		m = case_begin(cases[i].name);
		if (cases[i].write) {
			/* new content for the second 256 KiB, which the reference then holds */
			t_fill(w, 256 << 10, 100 + i);
			assert_int_equal(io_once(c, GDX_NVMF_OP_WRITE, w, 256 << 10, 256 << 10), 0);
			memcpy(ref + (256 << 10), w, 256 << 10);
		}
		if (cases[i].proto)
			read_check_or(c, 512 << 10, 0, GDX_EPROTO);
		else
			read_check(c, 512 << 10, 0);
		assert_int_equal(fp_fired(p, 0), 1);
		/* after whatever recovery the fault caused, the controller serves again */
		wait_live(c);
		read_check(c, 64 << 10, 64 << 10);
		case_close(m, c, p);
	}
	free(w);
}

/*
 * A stall longer than the I/O timeout: the read fails with -ETIMEDOUT once the
 * timeout has passed (the control thread looks every 50 ms), the association
 * is torn down and rebuilt, and the next read is served.
 */
static void stall(void **state)
{
	struct fp_rule r = { 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_STALL, 0 };
	struct gdx_nvmf_ctrl *c;
	char port[16];
	struct fproxy *p = fp_start(tport, &r, 1, port);
	uint8_t *b = malloc(256 << 10);
	struct meter m;
	double t;

	(void)state;
	assert_int_equal(host_connect(port, 1, &c), 0);
	m = case_begin("stall past the I/O timeout");
	t = now_s();
	assert_int_equal(io_once(c, GDX_NVMF_OP_READ, b, 256 << 10, 0), -ETIMEDOUT);
	t = now_s() - t - 0.1;	/* io_once's wait for a second completion */
	fprintf(stderr, "  timed out after %.3f s (io_timeout_ms %u)\n", t, IO_TIMEOUT_MS);
	assert_true(t >= IO_TIMEOUT_MS / 1000.0 && t < IO_TIMEOUT_MS / 1000.0 + 1.0);
	wait_live(c);
	read_check(c, 256 << 10, 0);
	case_close(m, c, p);
	free(b);
}

/*
 * The target dies while the host reconnects (its admin Connect held by the
 * proxy) and comes back on the same port and file 300 ms later: the host tries
 * again after its delay, and the read completes with the right data.
 */
static void target_restart_during_connect(void **state)
{
	struct fp_rule r[2] = {
		{ 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_RESET, 0 },
		{ 2, FP_H2C, GDX_TCP_CMD, 1, FP_STALL, 0 },
	};
	struct gdx_nvmf_ctrl *c;
	char port[16];
	struct fproxy *p = fp_start(tport, r, 2, port);
	struct done d = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
	uint8_t *b = malloc(256 << 10);
	struct gdx_nvmf_io io = { .op = GDX_NVMF_OP_READ, .nsid = 1, .len = 256 << 10, .buf = b };
	struct meter m;

	(void)state;
	/* the target's start is not what is measured: the host waits for it */
	assert_int_equal(host_connect_tmo(port, 1, RESTART_LOSS_MS, &c), 0);
	m = case_begin("target killed and restarted during connect");
	assert_int_equal(gdx_nvmf_submit_cb(c, &io, done_cb, &d), 0);
	while (!fp_fired(p, 1))
		usleep(5000);
	target_kill();
	usleep(300000);
	target_spawn(tport);
	done_once(&d);
	assert_int_equal(io.result, 0);
	assert_memory_equal(b, ref, 256 << 10);
	case_close(m, c, p);
	free(b);
}

/*
 * The target dies and stays dead: the read in flight and one submitted
 * meanwhile fail with GDX_EDISCONNECTED once ctrl_loss_tmo_ms has passed (the
 * last try falls on the deadline), and the controller says FAILED.
 */
static void target_gone(void **state)
{
	struct fp_rule r = { 1, FP_C2H, GDX_TCP_C2H_DATA, 1, FP_STALL, 0 };
	struct gdx_nvmf_ctrl *c;
	char port[16];
	struct fproxy *p = fp_start(tport, &r, 1, port);
	struct done d = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
	uint8_t *b = malloc(256 << 10);
	struct gdx_nvmf_io io = { .op = GDX_NVMF_OP_READ, .nsid = 1, .len = 256 << 10, .buf = b };
	struct meter m;
	double t;

	(void)state;
	assert_int_equal(host_connect(port, 1, &c), 0);
	m = case_begin("target killed, not restarted");
	assert_int_equal(gdx_nvmf_submit_cb(c, &io, done_cb, &d), 0);
	while (!fp_fired(p, 0))
		usleep(5000);
	target_kill();
	t = now_s();
	/* a read submitted while the host reconnects waits, then fails with the rest */
	assert_int_equal(io_once(c, GDX_NVMF_OP_READ, b, 4096, 0), GDX_EDISCONNECTED);
	t = now_s() - t - 0.1;
	fprintf(stderr, "  failed after %.3f s (ctrl_loss_tmo_ms %u)\n", t, CTRL_LOSS_MS);
	assert_true(t < CTRL_LOSS_MS / 1000.0 + 1.0);
	assert_int_equal(atomic_load(&d.calls), 1);
	assert_int_not_equal(io.result, 0);
	assert_int_equal(gdx_nvmf_ctrl_state(c), GDX_NVMF_FAILED);
	case_close(m, c, p);
	free(b);
	target_spawn(tport);
}

/* ---- kill -9 during writes --------------------------------------------------------- */

#define K9_OFF (4u << 20)
#define K9_BLOCKS ((NS_BYTES - K9_OFF) / BS)
#define K9_DEPTH 64u
#define K9_KILL_AT 1000u

enum { K9_UNSENT, K9_INFLIGHT, K9_ACKED, K9_FAILED };

/* What block blk holds once written: its number, then bytes only it has. */
static void k9_content(uint8_t *b, unsigned blk)
{
	uint64_t w[BS / 8], s = 0x9e3779b97f4a7c15ull * (blk + 1);

	w[0] = 0x3973696b78646721ull;	/* "!gdxkis9" */
	w[1] = blk;
	for (unsigned i = 2; i < BS / 8; i++)
		w[i] = t_rand(&s);
	memcpy(b, w, BS);
}

struct k9 {
	struct gdx_nvmf_ctrl *c;
	pthread_mutex_t m;
	pthread_cond_t cv;
	unsigned next, inflight, acked;
	bool stop;
	uint8_t state[K9_BLOCKS];
	struct gdx_nvmf_io ios[K9_BLOCKS];
	uint8_t *bufs;
};

static void k9_pump(struct k9 *k);

static void k9_done(struct gdx_nvmf_io *io, void *arg)
{
	struct k9 *k = arg;
	unsigned blk = (unsigned)(io - k->ios);

	pthread_mutex_lock(&k->m);
	k->state[blk] = io->result ? K9_FAILED : K9_ACKED;
	k->acked += !io->result;
	k->inflight--;
	pthread_cond_broadcast(&k->cv);
	pthread_mutex_unlock(&k->m);
	k9_pump(k);
}

/* Keeps K9_DEPTH writes in flight, each to the next block, until told to stop. */
static void k9_pump(struct k9 *k)
{
	for (;;) {
		struct gdx_nvmf_io *io;
		unsigned blk;

		pthread_mutex_lock(&k->m);
		if (k->stop || k->next == K9_BLOCKS || k->inflight == K9_DEPTH) {
			pthread_mutex_unlock(&k->m);
			return;
		}
		blk = k->next++;
		k->inflight++;
		k->state[blk] = K9_INFLIGHT;
		pthread_mutex_unlock(&k->m);
		/* submitted without the lock: a failing controller completes it inline */
		io = &k->ios[blk];
		*io = (struct gdx_nvmf_io){ .op = GDX_NVMF_OP_WRITE, .nsid = 1,
					    .offset = K9_OFF + (uint64_t)blk * BS, .len = BS,
					    .buf = k->bufs + (size_t)blk * BS };
		if (gdx_nvmf_submit_cb(k->c, io, k9_done, k)) {
			io->result = -EIO;
			k9_done(io, k);
		}
	}
}

/*
 * A writer keeps 64 writes of distinct, self-identifying blocks in flight and
 * records which were acknowledged; after 1,000 acknowledgements the target is
 * killed with SIGKILL and restarted on the same file, and the host reconnects
 * and sends again what was in flight.  Then every block acknowledged (before
 * the kill or after) reads back intact, and every other one holds either its
 * old content (zeroes) or its new, never a mix nor another block's.  The
 * target writes through io_uring into the file and acknowledges once the
 * write completed: in the page cache at least (it reports a volatile write
 * cache; Flush is fdatasync), which a killed process does not lose.
 */
static void kill9_during_writes(void **state)
{
	struct k9 *k = calloc(1, sizeof(*k));
	unsigned acked_at_kill, inflight_at_kill, n[4] = { 0 }, unacked_new = 0, torn = 0;
	uint8_t *got = malloc((size_t)K9_BLOCKS * BS), *want = malloc(BS), *zero = calloc(1, BS);
	struct gdx_nvmf_ctrl *c;
	struct meter m;

	(void)state;
	pthread_mutex_init(&k->m, NULL);
	pthread_cond_init(&k->cv, NULL);
	k->bufs = malloc((size_t)K9_BLOCKS * BS);
	for (unsigned b = 0; b < K9_BLOCKS; b++)
		k9_content(k->bufs + (size_t)b * BS, b);
	assert_int_equal(host_connect_tmo(tport, 2, RESTART_LOSS_MS, &k->c), 0);
	m = case_begin("kill -9 during writes");
	k9_pump(k);
	pthread_mutex_lock(&k->m);
	while (k->acked < K9_KILL_AT && k->inflight)
		pthread_cond_wait(&k->cv, &k->m);
	pthread_mutex_unlock(&k->m);
	target_kill();
	pthread_mutex_lock(&k->m);
	acked_at_kill = k->acked;
	inflight_at_kill = k->inflight;
	k->stop = true;
	pthread_mutex_unlock(&k->m);
	usleep(200000);
	target_spawn(tport);
	pthread_mutex_lock(&k->m);
	while (k->inflight)
		pthread_cond_wait(&k->cv, &k->m);
	pthread_mutex_unlock(&k->m);
	gdx_nvmf_disconnect(k->c);

	assert_int_equal(host_connect(tport, 2, &c), 0);
	for (unsigned b = 0; b < K9_BLOCKS; b += 256)
		assert_int_equal(gdx_nvmf_read(c, 1, got + (size_t)b * BS, 256 * BS,
					       K9_OFF + (uint64_t)b * BS), 0);
	gdx_nvmf_disconnect(c);
	for (unsigned b = 0; b < K9_BLOCKS; b++) {
		const uint8_t *g = got + (size_t)b * BS;
		bool is_new, is_old;

		k9_content(want, b);
		is_new = !memcmp(g, want, BS);
		is_old = !memcmp(g, zero, BS);
		n[k->state[b]]++;
		if (k->state[b] == K9_ACKED && !is_new)
			fail_msg("block %u was acknowledged but reads back %s", b,
				 is_old ? "as before" : "torn or misplaced");
		torn += !is_new && !is_old;
		unacked_new += k->state[b] != K9_ACKED && is_new;
	}
	fprintf(stderr, "  acknowledged %u before the kill (%u in flight then), %u in all; "
		"%u failed, %u never sent; %u unacknowledged but written; %u torn\n",
		acked_at_kill, inflight_at_kill, n[K9_ACKED], n[K9_FAILED], n[K9_UNSENT],
		unacked_new, torn);
	assert_int_equal(torn, 0);
	assert_true(acked_at_kill >= K9_KILL_AT);
	case_end(m);
	/* the next run of this case starts from zeroes again */
	memset(got, 0, (size_t)K9_BLOCKS * BS);
	assert_int_equal(host_connect(tport, 1, &c), 0);
	assert_int_equal(gdx_nvmf_write_zeroes(c, 1, K9_OFF, (uint64_t)K9_BLOCKS * BS), 0);
	gdx_nvmf_disconnect(c);
	pthread_mutex_destroy(&k->m);
	pthread_cond_destroy(&k->cv);
	free(k->bufs);
	free(k);
	free(got);
	free(want);
	free(zero);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(connect_faults),
		cmocka_unit_test(reconnect_faults),
		cmocka_unit_test(io_faults),
		cmocka_unit_test(stall),
		cmocka_unit_test(target_restart_during_connect),
		cmocka_unit_test(target_gone),
		cmocka_unit_test(kill9_during_writes),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s path/to/gdx\n", argv[0]);
		return 2;
	}
	gdx_bin = argv[1];
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
