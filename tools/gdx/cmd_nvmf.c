/* SPDX-License-Identifier: MIT */
/*
 * gdx nvmf <subcommand>: NVMe over Fabrics.  Each subcommand is one row of
 * the table below (target here; host subcommands join it).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
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

#include "args.h"
#include "cmd.h"
#include "common/config.h"
#include "common/util.h"
#include "nvmf_host.h"

/* ---- target ------------------------------------------------------------------ */

static void target_usage(FILE *f)
{
	fprintf(f,
		"usage: gdx nvmf target [options]\n"
		"Serve NVMe over Fabrics (TCP, RDMA) until SIGINT/SIGTERM.\n\n"
		"  -c, --config FILE      nvmetcli JSON (as `nvmetcli save` writes it)\n"
		"  -l, --listen [rdma://]ADDR:PORT\n"
		"                         add a port, TCP unless rdma:// (repeatable; [v6]:port\n"
		"                         for IPv6; tcp:// may be written too)\n"
		"  -n, --nqn NQN          a subsystem (created if new; repeatable): the --ns and\n"
		"                         --allow-host after it belong to it\n"
		"  -N, --ns SPEC[,bs=N]   namespace: file, block device, ram:SIZE, null:SIZE;\n"
		"                         bs 512 (default) or 4096\n"
		"  -H, --allow-host NQN[,tls-key=KEY]\n"
		"                         admit only the named hosts (default: any host); with\n"
		"                         tls-key, the host's own TLS PSK (NVMeTLSkey-1:...: or a\n"
		"                         file of it): on every TLS port it gets in with this\n"
		"                         key only, not the port's\n"
		"      --dhchap-key SECRET\n"
		"                         every --allow-host host must prove it holds SECRET\n"
		"                         (DH-HMAC-CHAP; DHHC-1:... or a file holding it)\n"
		"      --dhchap-ctrl-key SECRET\n"
		"                         the controller's: a host may ask it to prove itself\n"
		"      --dhchap-hash LIST allowed hashes, preferred first (default\n"
		"                         hmac(sha256),hmac(sha384),hmac(sha512))\n"
		"      --dhchap-dhgroup LIST\n"
		"                         allowed groups, preferred first (default null,\n"
		"                         ffdhe2048,ffdhe3072,ffdhe4096,ffdhe6144,ffdhe8192)\n"
		"  -r, --reactors N       reactor threads (default 1, at most 256)\n"
		"      --inline BYTES     in-capsule data on I/O queues (default 16k)\n"
		"      --poll-us US       poll instead of sleeping, adaptively, up to US\n"
		"                         microseconds after each event (0: never)\n"
		"      --pin              pin reactor i to CPU i (I/O queue i+1 is on reactor i)\n"
		"      --cpus LIST        pin reactor i to the i-th CPU of LIST (1, 0,2, 2-3)\n"
		"      --follow           at depth <= 2 a reactor runs on the CPU its\n"
		"                         traffic comes from; deeper, on its own CPUs\n"
		"      --stats FILE       write counters as JSON to FILE ('-' = stdout) at exit\n"
		"      --stats-interval S also every S seconds\n"
		"      --control PATH     unix socket: each connection receives the counters\n"
		"      --metrics ADDR:PORT\n"
		"                         serve the counters to Prometheus (GET /metrics)\n"
		"      --tls KEY          the --listen ports require TLS 1.3 with PSKs made from\n"
		"                         KEY, NVMeTLSkey-1:01:...: (nvme gen-tls-key) or a file\n"
		"                         of it, for hosts without a tls-key of their own; the\n"
		"                         kernel encrypts (tls module).  Without --tls, a\n"
		"                         tls-key on any --allow-host makes the ports require TLS\n"
		"  -v, --verbose          debug log (default: info)\n");
}

struct listen_arg {
	const char *trtype;
	char addr[64];
	char port[16];
};

/* A whole decimal number in [min, max]; atoi would take "-1" as 4294967295. */
static bool parse_count(const char *opt, const char *s, unsigned long min, unsigned long max,
			uint32_t *v)
{
	char *end;
	unsigned long n;

	errno = 0;
	n = strtoul(s, &end, 10);
	if (end == s || *end || errno || *s == '-' || n < min || n > max) {
		fprintf(stderr, "gdx nvmf target: %s '%s' is not a number from %lu to %lu\n", opt, s,
			min, max);
		return false;
	}
	*v = (uint32_t)n;
	return true;
}

/* A byte count in [0, max], as the other commands take sizes (16384, 16k). */
static bool parse_bytes(const char *opt, const char *s, uint64_t max, uint32_t *v)
{
	uint64_t n;

	if (gdx_parse_size(s, &n) || n > max) {
		fprintf(stderr, "gdx nvmf target: %s '%s' is not a byte count from 0 to %" PRIu64
			" (a number, optionally with k or M)\n", opt, s, max);
		return false;
	}
	*v = (uint32_t)n;
	return true;
}

/*
 * [tcp://|rdma://]ADDR:PORT or [V6ADDR]:PORT, the port a decimal number up to
 * 65535; no scheme means tcp.
 */
static int parse_listen(const char *s, struct listen_arg *l)
{
	const char *colon;

	l->trtype = "tcp";
	if (!strncmp(s, "rdma://", 7)) {
		l->trtype = "rdma";
		s += 7;
	} else if (!strncmp(s, "tcp://", 6)) {
		s += 6;
	}

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
	if (!colon[1] || strlen(colon + 1) >= sizeof(l->port) ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
	    strtoul(colon + 1, NULL, 10) > 65535)
		return -EINVAL;
	snprintf(l->port, sizeof(l->port), "%s", colon + 1);
	return 0;
}

/* "addr:port", "[v6]:port": as a user would type it back. */
static const char *listen_str(const struct listen_arg *l)
{
	static char s[104];

	snprintf(s, sizeof(s), strchr(l->addr, ':') ? "%s[%s]:%s" : "%s%s:%s",
		 strcmp(l->trtype, "tcp") ? "rdma://" : "", l->addr, l->port);
	return s;
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
		      const char *control, const struct listen_arg *metrics)
{
	struct gdx_nvmf_metrics *m = NULL;
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
	if (!ret && metrics && (ret = gdx_nvmf_metrics_start(t, metrics->addr, metrics->port, &m)))
		fprintf(stderr, "gdx nvmf target: --metrics %s: %s\n", listen_str(metrics),
			gdx_strerror(ret));
	else if (ret)
		fprintf(stderr, "gdx nvmf target: cannot start: %s\n", gdx_strerror(ret));
	if (ret) {
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
	gdx_nvmf_metrics_stop(m);
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

/* A --ns or --allow-host, with the subsystem named (-n) before it. */
struct subsys_arg {
	char kind;		/* 'N' namespace, 'H' allowed host */
	const char *nqn;
	const char *val;
};

#define MAX_NQNS 16
#define MAX_ARGS 128

/* SPEC[,bs=N] -> SPEC and N (512 or 4096); false (named on stderr) for another bs. */
static bool split_ns(const char *arg, char *spec, size_t n, uint32_t *bs)
{
	char *comma;

	snprintf(spec, n, "%s", arg);
	*bs = 512;
	comma = strstr(spec, ",bs=");
	if (!comma)
		return true;
	*comma = 0;
	if (strcmp(comma + 4, "512") && strcmp(comma + 4, "4096")) {
		fprintf(stderr, "gdx nvmf target: --ns '%s': block size '%s' is not 512 or 4096\n",
			arg, comma + 4);
		return false;
	}
	*bs = (uint32_t)atoi(comma + 4);
	return true;
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
		{ "stats", required_argument, NULL, 'S' },
		{ "stats-interval", required_argument, NULL, 'i' },
		{ "control", required_argument, NULL, 'C' },
		{ "metrics", required_argument, NULL, 'M' },
		{ "tls", required_argument, NULL, 'T' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "dhchap-key", required_argument, NULL, 'K' },
		{ "dhchap-ctrl-key", required_argument, NULL, 'k' },
		{ "dhchap-hash", required_argument, NULL, 'A' },
		{ "dhchap-dhgroup", required_argument, NULL, 'G' },
		{ 0 },
	};
	/* DH-HMAC-CHAP of the --allow-host hosts */
	char key[128] = "", ctrl_key[128] = "";
	const char *hashes = NULL, *dhgroups = NULL;
	struct gdx_nvmf_target_opts o;
	struct gdx_nvmf_target *t = NULL;
	struct listen_arg listens[16], metrics;
	struct subsys_arg args[MAX_ARGS];
	const char *nqns[MAX_NQNS];
	unsigned nlisten = 0, nargs = 0, nnqn = 0;
	const char *config = NULL, *nqn = NULL, *stats = NULL, *control = NULL, *tls = NULL;
	bool want_metrics = false, host_tls = false;
	int interval = 0, c, ret, rc = 1;
	uint32_t n;

	gdx_nvmf_target_opts_init(&o, sizeof(o));
	if (!getenv("GDX_LOG_LEVEL"))
		gdx_log_set_level(GDX_LOG_INFO);
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:l:n:N:H:r:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			break;
		case 'l':
			if (nlisten == (unsigned)GDX_ARRAY_SIZE(listens) ||
			    parse_listen(optarg, &listens[nlisten])) {
				fprintf(stderr, "gdx nvmf target: --listen '%s': %s\n", optarg,
					nlisten == (unsigned)GDX_ARRAY_SIZE(listens) ? "at most 16 ports" :
					"not ADDR:PORT or [IPV6]:PORT with a port from 0 to 65535");
				return 2;
			}
			nlisten++;
			break;
		case 'n': {
			unsigned i = 0;

			while (i < nnqn && strcmp(nqns[i], optarg))
				i++;
			if (i == nnqn) {
				if (nnqn == MAX_NQNS) {
					fprintf(stderr, "gdx nvmf target: at most %d subsystems on the "
						"command line (use --config)\n", MAX_NQNS);
					return 2;
				}
				nqns[nnqn++] = optarg;
			}
			nqn = optarg;
			break;
		}
		case 'N':
		case 'H':
			if (!nqn) {
				fprintf(stderr, "gdx nvmf target: %s '%s' needs a subsystem: put -n NQN "
					"before it\n", c == 'N' ? "--ns" : "--allow-host", optarg);
				return 2;
			}
			if (nargs == MAX_ARGS) {
				fprintf(stderr, "gdx nvmf target: at most %d --ns and --allow-host\n",
					MAX_ARGS);
				return 2;
			}
			args[nargs++] = (struct subsys_arg){ (char)c, nqn, optarg };
			break;
		case 'r':
			if (!parse_count("--reactors", optarg, 1, 256, &n))
				return 2;
			o.reactors = n;
			break;
		case 'I':
			if (!parse_bytes("--inline", optarg, 1u << 20, &o.inline_data))
				return 2;
			break;
		case 'P':
			if (!parse_count("--poll-us", optarg, 0, 1000000, &o.poll_us))
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
		case 'S':
			stats = optarg;
			break;
		case 'i':
			if (!parse_count("--stats-interval", optarg, 0, 86400, &n))
				return 2;
			interval = (int)n;
			break;
		case 'C':
			control = optarg;
			break;
		case 'T':
			tls = optarg;
			break;
		case 'M':
			if (parse_listen(optarg, &metrics)) {
				fprintf(stderr, "gdx nvmf target: --metrics '%s': not ADDR:PORT or "
					"[IPV6]:PORT with a port from 0 to 65535\n", optarg);
				return 2;
			}
			want_metrics = true;
			break;
		case 'v':
			gdx_log_set_level(GDX_LOG_DEBUG);
			break;
		case 'K':
		case 'k':
			if (arg_secret("gdx nvmf target", c == 'K' ? "--dhchap-key" :
				       "--dhchap-ctrl-key", optarg, c == 'K' ? key : ctrl_key,
				       sizeof(key)))
				return 2;
			break;
		case 'A':
			hashes = optarg;
			break;
		case 'G':
			dhgroups = optarg;
			break;
		case 'h':
			target_usage(stdout);
			return 0;
		case ':':
			fprintf(stderr, "gdx nvmf target: option '%s' needs a value\n", argv[optind - 1]);
			return 2;
		default:
			fprintf(stderr, "gdx nvmf target: unknown option '%s'%s\n", argv[optind - 1],
				optopt == 's' ? " (the port is part of -l ADDR:PORT; counters: --stats "
				"FILE)" : " ('gdx nvmf target --help' lists them)");
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "gdx nvmf target: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if ((*ctrl_key || hashes || dhgroups) && !*key) {
		fprintf(stderr, "gdx nvmf target: --dhchap-ctrl-key, --dhchap-hash and "
			"--dhchap-dhgroup go with --dhchap-key\n");
		return 2;
	}
	if (*key) {
		bool any = false;

		for (unsigned i = 0; i < nargs; i++)
			any |= args[i].kind == 'H';
		if (!any) {
			fprintf(stderr, "gdx nvmf target: --dhchap-key applies to the --allow-host "
				"hosts: name at least one\n");
			return 2;
		}
	}
	if (!config && !nlisten) {
		fprintf(stderr, "gdx nvmf target: needs --config FILE or --listen ADDR:PORT\n");
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
	for (unsigned i = 0; i < nnqn; i++) {
		bool any = true;

		/* a subsystem with --allow-host admits only those hosts */
		for (unsigned k = 0; k < nargs; k++)
			if (args[k].kind == 'H' && !strcmp(args[k].nqn, nqns[i]))
				any = false;
		ret = gdx_nvmf_target_add_subsys(t, nqns[i], any);
		if (ret && ret != -EEXIST) {
			fprintf(stderr, "gdx nvmf target: subsystem '%s': %s\n", nqns[i],
				gdx_strerror(ret));
			goto out;
		}
	}
	for (unsigned i = 0; i < nargs; i++) {
		char spec[512];
		uint32_t bs;

		if (args[i].kind == 'H') {
			const char *tls_key = strstr(args[i].val, ",tls-key=");
			char host[256];

			snprintf(host, sizeof(host), "%.*s", tls_key ? (int)(tls_key - args[i].val) :
				 (int)strlen(args[i].val), args[i].val);
			ret = tls_key ? gdx_nvmf_target_set_host_tls_key(t, host, tls_key + 9) : 0;
			if (ret) {
				fprintf(stderr, "gdx nvmf target: --allow-host '%s': its tls-key: %s\n",
					host, gdx_strerror(ret));
				rc = 2;
				goto out;
			}
			ret = *key ? gdx_nvmf_target_set_host_auth(t, host, key,
								   *ctrl_key ? ctrl_key : NULL,
								   hashes, dhgroups) : 0;
			if (ret) {
				fprintf(stderr, "gdx nvmf target: --allow-host '%s': its "
					"DH-HMAC-CHAP settings: %s\n", host, gdx_strerror(ret));
				rc = 2;
				goto out;
			}
			ret = gdx_nvmf_target_allow_host(t, args[i].nqn, host);
			if (ret) {
				fprintf(stderr, "gdx nvmf target: --allow-host '%s' on %s: %s\n",
					host, args[i].nqn, gdx_strerror(ret));
				goto out;
			}
			host_tls |= tls_key != NULL;
			continue;
		}
		if (!split_ns(args[i].val, spec, sizeof(spec), &bs)) {
			rc = 2;
			goto out;
		}
		ret = gdx_nvmf_target_add_ns(t, args[i].nqn, 0, spec, bs);
		if (ret) {
			fprintf(stderr, "gdx nvmf target: --ns '%s' on %s: %s\n", args[i].val,
				args[i].nqn, gdx_strerror(ret));
			rc = ret == -EINVAL ? 2 : 1;
			goto out;
		}
	}
	for (unsigned i = 0; i < nlisten; i++) {
		/* quick-flag ports are numbered after any from the config file */
		uint16_t portid = (uint16_t)(1000 + i);

		ret = gdx_nvmf_target_add_port_tr(t, portid, listens[i].trtype, listens[i].addr,
						  listens[i].port);
		if (!ret && (tls || host_tls))
			ret = gdx_nvmf_target_port_tls(t, portid, tls, 1);
		for (unsigned k = 0; !ret && k < nnqn; k++)
			ret = gdx_nvmf_target_link(t, portid, nqns[k]);
		if (ret) {
			fprintf(stderr, "gdx nvmf target: --listen %s: %s\n", listen_str(&listens[i]),
				gdx_strerror(ret));
			goto out;
		}
	}
	rc = run_target(t, stats, interval, control, want_metrics ? &metrics : NULL);
out:
	gdx_nvmf_target_destroy(t);
	explicit_bzero(key, sizeof(key));
	explicit_bzero(ctrl_key, sizeof(ctrl_key));
	return rc;
}

/* ---- dispatch ------------------------------------------------------------------ */

static const struct gdx_cmd nvmf_cmds[] = {
	{ "target", "serve namespaces over NVMe/TCP and NVMe/RDMA", cmd_target },
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
