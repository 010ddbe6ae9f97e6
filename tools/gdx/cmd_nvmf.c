/* SPDX-License-Identifier: MIT */
/*
 * gdx nvmf <subcommand>: NVMe over Fabrics.  Each subcommand is one row of
 * the table below (target here; host subcommands join it).
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "cmd.h"
#include "nvmf_host.h"

/* ---- target ------------------------------------------------------------------ */

static void target_usage(FILE *f)
{
	fprintf(f,
		"usage: gdx nvmf target [options]\n"
		"Serve NVMe/TCP until SIGINT/SIGTERM.\n\n"
		"  -c, --config FILE      nvmetcli JSON (as `nvmetcli save` writes it)\n"
		"  -l, --listen ADDR:PORT add a TCP port (repeatable; [v6]:port for IPv6)\n"
		"  -n, --nqn NQN          subsystem for --ns / --allow-host (created if new)\n"
		"  -N, --ns SPEC[,bs=N]   namespace: file, block device, ram:SIZE, null:SIZE\n"
		"  -H, --allow-host NQN   admit only the named hosts (default: any host)\n"
		"  -r, --reactors N       reactor threads (default 1)\n"
		"      --inline BYTES     in-capsule data on I/O queues (default 16384)\n"
		"      --poll-us US       poll instead of sleeping, adaptively, up to US\n"
		"                         microseconds after each event (0: never)\n"
		"      --pin              pin reactor i to CPU i (I/O queue i+1 is on reactor i)\n"
		"      --cpus LIST        pin reactor i to the i-th CPU of LIST (1, 0,2, 2-3)\n"
		"      --follow           at depth <= 2 a reactor runs on the CPU its\n"
		"                         traffic comes from; deeper, on its own CPUs\n"
		"  -s, --stats FILE       write counters as JSON to FILE ('-' = stdout) at exit\n"
		"      --stats-interval S also every S seconds\n"
		"      --control PATH     unix socket: each connection receives the counters\n"
		"  -v, --verbose          debug log (default: info)\n");
}

struct listen_arg {
	char addr[64];
	char port[16];
};

/* A whole decimal number in [0, max]; atoi would take "-1" as 4294967295. */
static bool parse_count(const char *s, unsigned long max, uint32_t *v)
{
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(s, &end, 10);
	if (end == s || *end || errno || *s == '-' || n > max) {
		fprintf(stderr, "gdx nvmf target: '%s' is not a number from 0 to %lu\n", s, max);
		return false;
	}
	*v = (uint32_t)n;
	return true;
}

static int parse_listen(const char *s, struct listen_arg *l)
{
	const char *colon;

	if (s[0] == '[') {
		const char *end = strchr(s, ']');

		if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(l->addr))
			return -EINVAL;
		snprintf(l->addr, sizeof(l->addr), "%.*s", (int)(end - s - 1), s + 1);
		colon = end + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || (size_t)(colon - s) >= sizeof(l->addr))
			return -EINVAL;
		snprintf(l->addr, sizeof(l->addr), "%.*s", (int)(colon - s), s);
	}
	if (!colon[1] || strlen(colon + 1) >= sizeof(l->port))
		return -EINVAL;
	snprintf(l->port, sizeof(l->port), "%s", colon + 1);
	return 0;
}

/* A file is replaced whole (written aside, renamed): a reader never sees half of it. */
static int write_stats(struct gdx_nvmf_target *t, const char *path)
{
	bool file = strcmp(path, "-") != 0;
	char tmp[4096];
	FILE *f;
	int ret;

	if (file && snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	f = file ? fopen(tmp, "w") : stdout;
	if (!f) {
		fprintf(stderr, "gdx nvmf target: %s: %s\n", tmp, strerror(errno));
		return -errno;
	}
	ret = gdx_nvmf_target_stats_json(t, f);
	fputc('\n', f);
	if (!file) {
		fflush(f);
		return ret;
	}
	if (fclose(f) && !ret)
		ret = -EIO;
	if (!ret && rename(tmp, path))
		ret = -errno;
	if (ret) {
		fprintf(stderr, "gdx nvmf target: %s: %s\n", path, gdx_strerror(ret));
		unlink(tmp);
	}
	return ret;
}

static int control_open(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 8)) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	return fd;
}

static void control_serve(struct gdx_nvmf_target *t, int lfd)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	FILE *f;

	if (fd < 0)
		return;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		return;
	}
	gdx_nvmf_target_stats_json(t, f);
	fputc('\n', f);
	fclose(f);
}

/* Serves until a signal; returns 0, or 1 if the target could not be built. */
static int run_target(struct gdx_nvmf_target *t, const char *stats, int interval,
		      const char *control)
{
	sigset_t set;
	struct pollfd pfd[2];
	int sfd, cfd = -1, ret;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGPIPE);
	/* block before start so the reactor threads inherit the mask */
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0) {
		perror("signalfd");
		return 1;
	}
	if (control) {
		cfd = control_open(control);
		if (cfd < 0) {
			fprintf(stderr, "gdx nvmf target: control socket %s: %s\n", control,
				gdx_strerror(cfd));
			close(sfd);
			return 1;
		}
	}
	ret = gdx_nvmf_target_start(t);
	if (ret) {
		fprintf(stderr, "gdx nvmf target: cannot start: %s\n", gdx_strerror(ret));
		close(sfd);
		if (cfd >= 0)
			close(cfd);
		return 1;
	}
	fprintf(stderr, "gdx nvmf target: ready\n");
	pfd[0] = (struct pollfd){ .fd = sfd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = cfd, .events = POLLIN };
	for (;;) {
		int n = poll(pfd, cfd >= 0 ? 2 : 1, interval > 0 ? interval * 1000 : -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && stats) {
			write_stats(t, stats);
			continue;
		}
		if (pfd[0].revents) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si) &&
			    si.ssi_signo == SIGPIPE)
				continue;
			break;
		}
		if (cfd >= 0 && pfd[1].revents)
			control_serve(t, cfd);
	}
	fprintf(stderr, "gdx nvmf target: stopping\n");
	if (stats)
		write_stats(t, stats);
	gdx_nvmf_target_stop(t);
	close(sfd);
	if (cfd >= 0) {
		close(cfd);
		unlink(control);
	}
	return 0;
}

static int cmd_target(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "listen", required_argument, NULL, 'l' },
		{ "nqn", required_argument, NULL, 'n' },
		{ "ns", required_argument, NULL, 'N' },
		{ "allow-host", required_argument, NULL, 'H' },
		{ "reactors", required_argument, NULL, 'r' },
		{ "inline", required_argument, NULL, 'I' },
		{ "poll-us", required_argument, NULL, 'P' },
		{ "pin", no_argument, NULL, 'p' },
		{ "cpus", required_argument, NULL, 'U' },
		{ "follow", no_argument, NULL, 'F' },
		{ "stats", required_argument, NULL, 's' },
		{ "stats-interval", required_argument, NULL, 'i' },
		{ "control", required_argument, NULL, 'C' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct gdx_nvmf_target_opts o;
	struct gdx_nvmf_target *t = NULL;
	struct listen_arg listens[16];
	const char *nss[64], *hosts[64];
	unsigned nlisten = 0, nns = 0, nhosts = 0;
	const char *config = NULL, *nqn = NULL, *stats = NULL, *control = NULL;
	int interval = 0, c, ret, rc = 1;
	uint32_t n;

	gdx_nvmf_target_opts_init(&o, sizeof(o));
	if (!getenv("GDX_LOG_LEVEL"))
		gdx_log_set_level(GDX_LOG_INFO);
	optind = 1;
	while ((c = getopt_long(argc, argv, "c:l:n:N:H:r:s:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'l':
			if (nlisten == 16 || parse_listen(optarg, &listens[nlisten])) {
				fprintf(stderr, "gdx nvmf target: bad --listen '%s'\n", optarg);
				return 2;
			}
			nlisten++;
			break;
		case 'n':
			nqn = optarg;
			break;
		case 'N':
			if (nns == 64)
				return 2;
			nss[nns++] = optarg;
			break;
		case 'H':
			if (nhosts == 64)
				return 2;
			hosts[nhosts++] = optarg;
			break;
		case 'r':
			if (!parse_count(optarg, 1024, &n))
				return 2;
			o.reactors = n;
			break;
		case 'I':
			if (!parse_count(optarg, UINT32_MAX, &o.inline_data))
				return 2;
			break;
		case 'P':
			if (!parse_count(optarg, 1000000, &o.poll_us))
				return 2;
			break;
		case 'p':
			o.pin_cpus = 1;
			break;
		case 'U':
			o.cpus = optarg;
			break;
		case 'F':
			o.follow = 1;
			break;
		case 's':
			stats = optarg;
			break;
		case 'i':
			if (!parse_count(optarg, 86400, &n))
				return 2;
			interval = (int)n;
			break;
		case 'C':
			control = optarg;
			break;
		case 'v':
			gdx_log_set_level(GDX_LOG_DEBUG);
			break;
		case 'h':
			target_usage(stdout);
			return 0;
		default:
			target_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || (!config && !nlisten) || ((nns || nhosts) && !nqn)) {
		target_usage(stderr);
		return 2;
	}
	ret = gdx_nvmf_target_create(&o, &t);
	if (ret) {
		fprintf(stderr, "gdx nvmf target: %s\n", gdx_strerror(ret));
		return ret == -EINVAL ? 2 : 1;
	}
	if (config && (ret = gdx_nvmf_target_load_json(t, config))) {
		fprintf(stderr, "gdx nvmf target: %s: %s\n", config, gdx_strerror(ret));
		goto out;
	}
	if (nqn) {
		ret = gdx_nvmf_target_add_subsys(t, nqn, nhosts == 0);
		if (ret && ret != -EEXIST) {
			fprintf(stderr, "gdx nvmf target: subsystem '%s': %s\n", nqn,
				gdx_strerror(ret));
			goto out;
		}
	}
	for (unsigned i = 0; i < nhosts; i++)
		if ((ret = gdx_nvmf_target_allow_host(t, nqn, hosts[i]))) {
			fprintf(stderr, "gdx nvmf target: host '%s': %s\n", hosts[i],
				gdx_strerror(ret));
			goto out;
		}
	for (unsigned i = 0; i < nns; i++) {
		char spec[512];
		uint32_t bs = 512;
		char *comma;

		snprintf(spec, sizeof(spec), "%s", nss[i]);
		comma = strstr(spec, ",bs=");
		if (comma) {
			bs = (uint32_t)atoi(comma + 4);
			*comma = 0;
		}
		if ((ret = gdx_nvmf_target_add_ns(t, nqn, 0, spec, bs))) {
			fprintf(stderr, "gdx nvmf target: namespace '%s': %s\n", nss[i],
				gdx_strerror(ret));
			goto out;
		}
	}
	for (unsigned i = 0; i < nlisten; i++) {
		/* quick-flag ports are numbered after any from the config file */
		uint16_t portid = (uint16_t)(1000 + i);

		if ((ret = gdx_nvmf_target_add_port(t, portid, listens[i].addr, listens[i].port)) ||
		    (nqn && (ret = gdx_nvmf_target_link(t, portid, nqn)))) {
			fprintf(stderr, "gdx nvmf target: listen %s:%s: %s\n", listens[i].addr,
				listens[i].port, gdx_strerror(ret));
			goto out;
		}
	}
	rc = run_target(t, stats, interval, control);
out:
	gdx_nvmf_target_destroy(t);
	return rc;
}

/* ---- dispatch ------------------------------------------------------------------ */

static const struct gdx_cmd nvmf_cmds[] = {
	{ "target", "serve namespaces over NVMe/TCP", cmd_target },
	{ "discover", "read a discovery controller's log", cmd_nvmf_discover },
	{ "id-ctrl", "connect and print Identify Controller", cmd_nvmf_id_ctrl },
	{ "id-ns", "connect and print Identify Namespace", cmd_nvmf_id_ns },
	{ "read", "read a namespace range into host, pinned or device memory", cmd_nvmf_read },
	{ "write", "write a file or pattern from host, pinned or device memory", cmd_nvmf_write },
};

static void nvmf_usage(FILE *f)
{
	fprintf(f, "usage: gdx nvmf <subcommand> [options]\n\nsubcommands:\n");
	for (size_t i = 0; i < sizeof(nvmf_cmds) / sizeof(nvmf_cmds[0]); i++)
		fprintf(f, "  %-10s %s\n", nvmf_cmds[i].name, nvmf_cmds[i].summary);
}

int cmd_nvmf(int argc, char **argv)
{
	if (argc < 2) {
		nvmf_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		nvmf_usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(nvmf_cmds) / sizeof(nvmf_cmds[0]); i++)
		if (!strcmp(argv[1], nvmf_cmds[i].name))
			return nvmf_cmds[i].run(argc - 1, argv + 1);
	fprintf(stderr, "gdx nvmf: unknown subcommand '%s'\n", argv[1]);
	nvmf_usage(stderr);
	return 2;
}
