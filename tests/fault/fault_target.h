/* SPDX-License-Identifier: MIT */
#ifndef GDX_TESTS_FAULT_TARGET_H
#define GDX_TESTS_FAULT_TARGET_H

/*
 * The NVMe/TCP target in a child process, for fault cases that measure it
 * from outside (CPU time, RSS, log volume) or starve it of descriptors
 * without starving the test.  Its log goes to a file of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include "func/nvmf_raw_host.h"

#define FT_NQN "nqn.2024-01.io.gdx:fault"
#define FT_HOSTNQN "nqn.2024-01.io.gdx:fault-host"

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

/* True if the peer has closed fd (EOF or reset pending), without blocking. */
static inline bool ft_closed(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/*
 * An admin queue on h over connected socket fd: ICReq (no digests), Connect
 * (KATO kato ms; h->cntlid gets the controller's id), CC.EN, io_queues I/O
 * queues allowed.
 */
static inline void ft_admin_up(struct host *h, int fd, uint32_t kato, uint16_t io_queues)
{
	uint64_t res;

	host_icreq_fd(h, fd, false, false);
	assert_int_equal(fab_connect(h, FT_NQN, FT_HOSTNQN, 0, 31, 0xffff, kato, &res), 0);
	h->cntlid = (uint16_t)res;
	assert_int_equal(prop(h, true, GDX_NVME_REG_CC, GDX_NVME_CC_DEFAULT | GDX_NVME_CC_EN,
			      false, NULL), 0);
	assert_int_equal(set_nr_queues(h, io_queues), 0);
}

#endif
