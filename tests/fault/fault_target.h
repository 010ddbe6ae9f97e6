/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_FAULT_TARGET_H
#define GDX_TESTS_FAULT_TARGET_H

/*
 * The NVMe/TCP target in a child process, for fault cases that measure it
 * from outside (CPU time, RSS, log volume) or starve it of descriptors
 * without starving the test.  Its log goes to a file of its own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "test.h"
#include "common/util.h"
#include "nvmf/proto/nvme.h"
#include "nvmf/proto/tcp.h"

#define FT_NQN "nqn.2024-01.io.gdx:fault"

struct ft_target {
	pid_t pid;
	int port;
	char log[64];
};

/* The child of the running test, for ft_teardown. */
static struct ft_target *ft_cur;

static inline uint64_t ft_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Child side: never returns. */
static inline void ft_child(int wr, const char *const *ns, unsigned nofile,
			    const char *const *knobs, const char *log)
{
	struct gdx_nvmf_target *t;
	sigset_t set;
	int sig, fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), port = -1;

	if (fd < 0 || dup2(fd, 2) < 0)
		_exit(2);
	close(fd);
	/* a failed test does not reach ft_stop: go with the parent */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* as `gdx nvmf target` logs: every connection's end */
	gdx_log_set_level(GDX_LOG_INFO);
	/* the reactors inherit it: only sigwait below takes SIGTERM */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	for (unsigned i = 0; knobs && knobs[i]; i += 2)
		if (gdx_config_set(knobs[i], knobs[i + 1]))
			_exit(3);
	if (gdx_nvmf_target_create(NULL, &t) || gdx_nvmf_target_add_subsys(t, FT_NQN, 1))
		_exit(4);
	for (unsigned i = 0; ns[i]; i++)
		if (gdx_nvmf_target_add_ns(t, FT_NQN, i + 1, ns[i], 512))
			_exit(5);
	if (gdx_nvmf_target_add_port(t, 1, "127.0.0.1", "0") || gdx_nvmf_target_link(t, 1, FT_NQN))
		_exit(6);
	if (nofile) {
		struct rlimit rl = { nofile, nofile };

		if (setrlimit(RLIMIT_NOFILE, &rl))
			_exit(7);
	}
	if (!gdx_nvmf_target_start(t))
		port = gdx_nvmf_target_bound_port(t, 1);
	if (write(wr, &port, sizeof(port)) != sizeof(port) || port <= 0)
		_exit(8);
	close(wr);
	sigwait(&set, &sig);
	gdx_nvmf_target_destroy(t);
	_exit(0);
}

/*
 * Starts a target serving subsystem FT_NQN (any host) with namespaces ns[]
 * (NULL-terminated specs) on 127.0.0.1, port chosen by the kernel; knobs:
 * name, value, ..., NULL, set before it is created; nofile: RLIMIT_NOFILE
 * once it has started (0: as is).
 */
static inline void ft_start(struct ft_target *ft, const char *const *ns, unsigned nofile,
			    const char *const *knobs)
{
	int p[2];
	struct pollfd pf;

	snprintf(ft->log, sizeof(ft->log), "/tmp/gdx-fault-%d-%d.log", (int)getpid(),
		 (int)ft_now_ms() % 100000);
	assert_int_equal(pipe(p), 0);
	ft->pid = fork();
	assert_true(ft->pid >= 0);
	ft_cur = ft;
	if (!ft->pid) {
		close(p[0]);
		ft_child(p[1], ns, nofile, knobs, ft->log);
	}
	close(p[1]);
	pf = (struct pollfd){ .fd = p[0], .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 20000), 1);
	assert_int_equal(read(p[0], &ft->port, sizeof(ft->port)), sizeof(ft->port));
	close(p[0]);
	assert_true(ft->port > 0);
}

/* Stops the child (it must exit cleanly, sanitizers included) and removes its log. */
static inline void ft_stop(struct ft_target *ft)
{
	int st;

	kill(ft->pid, SIGTERM);
	assert_int_equal(waitpid(ft->pid, &st, 0), ft->pid);
	unlink(ft->log);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	ft->pid = 0;
}

/* cmocka teardown: a test that failed half-way leaves its child running. */
static inline int ft_teardown(void **state)
{
	(void)state;
	if (ft_cur && ft_cur->pid > 0) {
		kill(ft_cur->pid, SIGKILL);
		waitpid(ft_cur->pid, NULL, 0);
		unlink(ft_cur->log);
	}
	ft_cur = NULL;
	return 0;
}

/* The child's user + system CPU time, ms. */
static inline uint64_t ft_cpu_ms(const struct ft_target *ft)
{
	char path[64], buf[1024], *p;
	unsigned long ut, st;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)ft->pid);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	/* after the command name, which may hold spaces: field 3 on; utime is 14 */
	p = strrchr(buf, ')');
	assert_non_null(p);
	assert_int_equal(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
				&st), 2);
	return (uint64_t)(ut + st) * 1000 / (uint64_t)sysconf(_SC_CLK_TCK);
}

/* The child's resident set, KiB. */
static inline uint64_t ft_rss_kib(const struct ft_target *ft)
{
	char path[64], line[256];
	uint64_t kib = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)ft->pid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %" SCNu64, &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static inline uint64_t ft_log_bytes(const struct ft_target *ft)
{
	struct stat sb;

	assert_int_equal(stat(ft->log, &sb), 0);
	return (uint64_t)sb.st_size;
}

/* Times `needle` occurs in the child's log. */
static inline unsigned ft_log_count(const struct ft_target *ft, const char *needle)
{
	char line[1024];
	unsigned n = 0;
	FILE *f = fopen(ft->log, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* A TCP connection to the child; -1 if connect() did not finish within timeout_ms. */
static inline int ft_connect(const struct ft_target *ft, unsigned timeout_ms)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)ft->port) };
	struct timeval tv = { .tv_sec = timeout_ms / 1000,
			      .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	/* connect() honours the send timeout */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* True if the peer has closed fd (EOF or reset pending), without blocking. */
static inline bool ft_closed(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* ICReq (no digests) and its ICResp. */
static inline void ft_icreq(int fd)
{
	union gdx_tcp_pdu pdu;

	gdx_tcp_icreq_init(&pdu.icreq, false, false, 0);
	assert_int_equal(send(fd, &pdu, 128, MSG_NOSIGNAL), 128);
	assert_int_equal(recv(fd, &pdu, 128, MSG_WAITALL), 128);
	assert_int_equal(pdu.ch.type, GDX_TCP_ICRESP);
}

static inline void ft_send_cmd(int fd, struct gdx_nvme_sqe *sqe, const void *data, uint32_t len)
{
	static const struct gdx_tcp_params plain = { .maxh2cdata = 131072 };
	union gdx_tcp_pdu pdu;
	uint32_t hl;

	sqe->flags = GDX_NVME_FLAGS_PSDT_SGL;
	if (data) {
		sqe->dptr.type = GDX_NVME_SGL_DATA_BLOCK_OFFSET;
		sqe->dptr.length = len;
	} else {
		sqe->dptr.type = GDX_NVME_SGL_TRANSPORT;
		sqe->dptr.length = len;
	}
	hl = gdx_tcp_cmd_init(&pdu, sqe, data ? len : 0, &plain);
	assert_int_equal(send(fd, &pdu, hl, MSG_NOSIGNAL), (ssize_t)hl);
	if (data)
		assert_int_equal(send(fd, data, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Reads CapsuleResps until cid's; returns its status (without phase) and *dw0. */
static inline uint16_t ft_rsp(int fd, uint16_t cid, uint32_t *dw0)
{
	for (;;) {
		struct gdx_tcp_rsp r;

		assert_int_equal(recv(fd, &r, sizeof(r), MSG_WAITALL), (ssize_t)sizeof(r));
		assert_int_equal(r.ch.type, GDX_TCP_RSP);
		if (r.cqe.cid != cid)
			continue;
		if (dw0)
			*dw0 = r.cqe.dw0;
		return r.cqe.status >> 1;
	}
}

/*
 * Connect (qid 0: a new controller, *cntlid gets its id; else an I/O queue of
 * *cntlid) with SQ size sqsize + 1 and KATO kato ms; returns the status.
 */
static inline uint16_t ft_connect_q(int fd, uint16_t qid, uint16_t sqsize, uint16_t *cntlid,
				    uint32_t kato)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_OPC_FABRICS, .cid = 1 };
	struct gdx_nvmf_connect_data d;
	uint32_t dw0 = 0;
	uint16_t st;

	memset(&d, 0, sizeof(d));
	d.cntlid = qid ? *cntlid : 0xffff;
	snprintf(d.subnqn, sizeof(d.subnqn), "%s", FT_NQN);
	snprintf(d.hostnqn, sizeof(d.hostnqn), "%s", "nqn.2024-01.io.gdx:fault-host");
	sqe.fctype = GDX_NVMF_FCTYPE_CONNECT;
	sqe.connect.qid = qid;
	sqe.connect.sqsize = sqsize;
	sqe.connect.kato = kato;
	ft_send_cmd(fd, &sqe, &d, sizeof(d));
	st = ft_rsp(fd, 1, &dw0);
	if (!qid && !st)
		*cntlid = (uint16_t)dw0;
	return st;
}

/*
 * An admin queue on fd: ICReq, Connect (KATO kato ms), CC.EN, io_queues I/O
 * queues allowed.  Returns the cntlid.
 */
static inline uint16_t ft_admin_up(int fd, uint32_t kato, uint16_t io_queues)
{
	struct gdx_nvme_sqe sqe = { .opc = GDX_NVME_OPC_FABRICS, .cid = 2,
				    .fctype = GDX_NVMF_FCTYPE_PROP_SET };
	uint16_t cntlid = 0;

	ft_icreq(fd);
	assert_int_equal(ft_connect_q(fd, 0, 31, &cntlid, kato), 0);
	sqe.prop.ofst = GDX_NVME_REG_CC;
	sqe.prop.value = GDX_NVME_CC_DEFAULT | GDX_NVME_CC_EN;
	ft_send_cmd(fd, &sqe, NULL, 0);
	assert_int_equal(ft_rsp(fd, 2, NULL), 0);
	sqe = (struct gdx_nvme_sqe){ .opc = GDX_NVME_ADM_SET_FEATURES, .cid = 3,
				     .cdw10 = GDX_NVME_FEAT_NUM_QUEUES,
				     .cdw11 = (uint32_t)(io_queues - 1) * 0x10001u };
	ft_send_cmd(fd, &sqe, NULL, 0);
	assert_int_equal(ft_rsp(fd, 3, NULL), 0);
	return cntlid;
}

#endif
