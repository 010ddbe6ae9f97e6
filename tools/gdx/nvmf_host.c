/* SPDX-License-Identifier: MIT */
/*
 * Host subcommands of `gdx nvmf`: discover, id-ctrl, id-ns, read, write.
 * Data lands in (or leaves from) host, pinned or device memory (--mem), and
 * comes from / goes to a file, a pipe or a deterministic pattern, streamed
 * through a fixed window of pieces whatever the length.
 *
 * Flags follow nvme-cli: the connect options are nvme connect's
 * (-t -a -s -n -q), so -n is the subsystem NQN on every subcommand and the
 * namespace is -N/--namespace-id (nvme-cli's I/O commands spell it -n, which
 * here would clash with the NQN every gdx host command needs).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "common/config.h"
#include "common/crc32c.h"
#include "common/util.h"
#include "args.h"
#include "cmd.h"
#include "nvmf_host.h"
#include "progress.h"

/* Which subcommands take an option (bits of struct hopt.cmds). */
enum {
	C_DISC = 1 << 0,
	C_IDCTRL = 1 << 1,
	C_IDNS = 1 << 2,
	C_READ = 1 << 3,
	C_WRITE = 1 << 4,
	C_CONN = C_IDCTRL | C_IDNS | C_READ | C_WRITE,	/* connect to a subsystem */
	C_RW = C_READ | C_WRITE,
	C_ALL = C_DISC | C_CONN,
};

enum { O_TO = 256, O_FROM, O_QUEUES, O_DEPTH, O_HDGST, O_DDGST, O_JSON, O_QUIET, O_TLS, O_TLS_KEY };

/* One option: getopt's long and short names, who takes it, and its help line. */
struct hopt {
	const char *name;
	int key;		/* the short letter, or an O_* above */
	const char *arg;	/* the value's name; NULL: a flag */
	unsigned cmds;
	const char *help;	/* NULL: an old spelling, accepted but not shown */
};

static const struct hopt hopts[] = {
	{ "transport", 't', "TYPE", C_ALL, "transport: tcp (default) or rdma" },
	{ "traddr", 'a', "ADDR", C_ALL, "target address (name, IPv4 or IPv6)" },
	{ "trsvcid", 's', "PORT", C_DISC,
	  "discovery port (default 8009; the gdx target serves discovery on its listen port)" },
	{ "trsvcid", 's', "PORT", C_CONN, "target port (default 4420)" },
	{ "nqn", 'n', "NQN", C_CONN, "subsystem NQN" },
	{ "hostnqn", 'q', "NQN", C_ALL, "host NQN (default /etc/nvme/hostnqn or generated)" },
	{ "namespace-id", 'N', "NSID", C_IDNS | C_RW, "namespace (default 1)" },
	{ "nsid", 'N', "NSID", C_IDNS | C_RW, NULL },
	{ "offset", 'o', "BYTES", C_RW, "byte offset (a multiple of the block size; 4k, 1M suffixes)" },
	{ "length", 'l', "BYTES", C_RW, "byte count (a multiple of the block size)" },
	{ "to", O_TO, "FILE", C_READ, "write the data to FILE ('-': stdout)" },
	{ "from", O_FROM, "SRC", C_WRITE, "FILE ('-': stdin), or pattern:SEED for deterministic bytes" },
	{ "mem", 'm', "KIND", C_RW, "memory the data lands in / leaves from: host, pinned, gpu:N" },
	{ "queues", O_QUEUES, "N", C_CONN, "I/O queues" },
	{ "depth", O_DEPTH, "N", C_CONN, "entries per queue" },
	{ "dhchap-secret", 'S', "SECRET", C_CONN,
	  "DH-HMAC-CHAP secret, DHHC-1:..., or a file holding it" },
	{ "dhchap-ctrl-secret", 'C', "SECRET", C_CONN,
	  "the controller's secret: it must prove it holds it too" },
	{ "hdr-digest", O_HDGST, NULL, C_ALL, "CRC32C header digests" },
	{ "data-digest", O_DDGST, NULL, C_ALL, "CRC32C data digests" },
	{ "tls", O_TLS, NULL, C_ALL, "TLS 1.3 with the PSK of --tls-key (kTLS, else gdx's records)" },
	{ "tls-key", O_TLS_KEY, "KEY", C_ALL, "NVMeTLSkey-1:01:...: (nvme gen-tls-key), or a file of it" },
	{ "json", O_JSON, NULL, C_ALL, "machine-readable output" },
	{ "quiet", O_QUIET, NULL, C_RW, "no progress line on a terminal" },
	{ "help", 'h', NULL, C_ALL, "this text" },
};

static const struct {
	const char *name;
	unsigned bit;
	const char *synopsis;
} subcmds[] = {
	{ "discover", C_DISC, "-a ADDR [-s PORT]" },
	{ "id-ctrl", C_IDCTRL, "-a ADDR [-s PORT] -n NQN" },
	{ "id-ns", C_IDNS, "-a ADDR [-s PORT] -n NQN [-N NSID]" },
	{ "read", C_READ, "-a ADDR [-s PORT] -n NQN -l BYTES [-o BYTES] [--to FILE]" },
	{ "write", C_WRITE, "-a ADDR [-s PORT] -n NQN -l BYTES [-o BYTES] --from SRC" },
};

struct hopts {
	const char *cmd;	/* "gdx nvmf read" */
	unsigned bit;
	const char *addr, *svc, *nqn, *hostnqn;
	bool svc_given;
	uint32_t nsid;
	uint64_t offset, length;
	const char *file;	/* --to / --from */
	const char *mem;	/* host | pinned | gpu:N */
	bool json, quiet, tls;
	char secret[128], ctrl_secret[128];	/* --dhchap-secret, --dhchap-ctrl-secret */
	struct gdx_nvmf_host_opts o;
};

static void usage(FILE *f, const struct hopts *h)
{
	size_t i;

	for (i = 0; i < GDX_ARRAY_SIZE(subcmds); i++)
		if (subcmds[i].bit == h->bit)
			break;
	fprintf(f, "usage: %s %s [options]\n", h->cmd, subcmds[i].synopsis);
	for (i = 0; i < GDX_ARRAY_SIZE(hopts); i++) {
		const struct hopt *o = &hopts[i];
		char left[40];

		if (!(o->cmds & h->bit) || !o->help)
			continue;
		snprintf(left, sizeof(left), "%c%c%c --%s %s", o->key < 256 ? '-' : ' ',
			 o->key < 256 ? o->key : ' ', o->key < 256 ? ',' : ' ', o->name,
			 o->arg ? o->arg : "");
		fprintf(f, "  %-26s %s\n", left, o->help);
	}
}

/* A whole decimal number in [lo, hi], or an error naming the option and the value. */
static bool parse_num(const struct hopts *h, const char *opt, const char *s, uint64_t lo,
		      uint64_t hi, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 10);
	if (end == s || *end || errno || *s == '-' || *v < lo || *v > hi) {
		fprintf(stderr, "%s: %s '%s' is not a number from %" PRIu64 " to %" PRIu64 "\n",
			h->cmd, opt, s, lo, hi);
		return false;
	}
	return true;
}

static bool parse_bytes(const struct hopts *h, const char *opt, const char *s, uint64_t *v)
{
	if (gdx_parse_size(s, v)) {
		fprintf(stderr, "%s: %s '%s' is not a byte count (a number, optionally with k, M, "
			"G or T)\n", h->cmd, opt, s);
		return false;
	}
	return true;
}

/* 0 to go on, 1 after --help (exit 0), 2 on a usage error (named on stderr). */
static int parse(int argc, char **argv, struct hopts *h, const char *cmd)
{
	struct option lo[GDX_ARRAY_SIZE(hopts) + 1];
	char shorts[2 * GDX_ARRAY_SIZE(hopts) + 2] = { 0 }, *sp = shorts;
	static char name[64];
	unsigned n = 0;
	int c;

	memset(h, 0, sizeof(*h));
	snprintf(name, sizeof(name), "gdx nvmf %s", cmd);
	h->cmd = name;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(subcmds); i++)
		if (!strcmp(subcmds[i].name, cmd))
			h->bit = subcmds[i].bit;
	/* ':' first: a missing value is reported as ':' (named below), not by getopt */
	*sp++ = ':';
	for (size_t i = 0; i < GDX_ARRAY_SIZE(hopts); i++) {
		const struct hopt *o = &hopts[i];

		if (!(o->cmds & h->bit))
			continue;
		lo[n++] = (struct option){ o->name, o->arg ? required_argument : no_argument, NULL,
					   o->key };
		if (o->key < 256 && !strchr(shorts, o->key)) {
			*sp++ = (char)o->key;
			if (o->arg)
				*sp++ = ':';
		}
	}
	lo[n] = (struct option){ 0 };
	*sp = 0;

	h->svc = h->bit == C_DISC ? "8009" : "4420";
	h->nsid = 1;
	h->mem = "host";
	gdx_nvmf_host_opts_init(&h->o, sizeof(h->o));
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		uint64_t v;

		switch (c) {
		case 't':
			if (strcmp(optarg, "tcp") && strcmp(optarg, "rdma")) {
				fprintf(stderr, "%s: transport '%s' is not served (tcp or rdma)\n",
					h->cmd, optarg);
				return 2;
			}
			h->o.transport = optarg;
			break;
		case 'a': h->addr = optarg; break;
		case 's':
			if (!parse_num(h, "port", optarg, 1, 65535, &v))
				return 2;
			h->svc = optarg;
			h->svc_given = true;
			break;
		case 'n': h->nqn = optarg; break;
		case 'q': h->hostnqn = optarg; break;
		case 'S':
		case 'C':
			if (arg_secret(h->cmd, c == 'S' ? "--dhchap-secret" : "--dhchap-ctrl-secret",
				       optarg, c == 'S' ? h->secret : h->ctrl_secret,
				       sizeof(h->secret)))
				return 2;
			if (c == 'S')
				h->o.dhchap_secret = h->secret;
			else
				h->o.dhchap_ctrl_secret = h->ctrl_secret;
			break;
		case 'm': h->mem = optarg; break;
		case O_TO:
		case O_FROM: h->file = optarg; break;
		case O_HDGST: h->o.hdr_digest = 1; break;
		case O_DDGST: h->o.data_digest = 1; break;
		case O_TLS: h->tls = true; break;
		case O_TLS_KEY: h->o.tls_key = optarg; break;
		case O_JSON: h->json = true; break;
		case O_QUIET: h->quiet = true; break;
		case 'N':
			if (!parse_num(h, "namespace ID", optarg, 1, 0xfffffffe, &v))
				return 2;
			h->nsid = (uint32_t)v;
			break;
		case 'o':
			if (!parse_bytes(h, "--offset", optarg, &h->offset))
				return 2;
			break;
		case 'l':
			if (!parse_bytes(h, "--length", optarg, &h->length))
				return 2;
			if (!h->length) {
				fprintf(stderr, "%s: --length must be more than 0\n", h->cmd);
				return 2;
			}
			break;
		case O_QUEUES:
			if (!parse_num(h, "--queues", optarg, 1, 128, &v))
				return 2;
			h->o.nr_io_queues = (unsigned)v;
			break;
		case O_DEPTH:
			if (!parse_num(h, "--depth", optarg, 2, 1024, &v))
				return 2;
			h->o.queue_depth = (unsigned)v;
			break;
		case 'h':
			usage(stdout, h);
			return 1;
		case ':':
			fprintf(stderr, "%s: option '%s' needs a value\n", h->cmd, argv[optind - 1]);
			return 2;
		default:
			fprintf(stderr, "%s: unknown option '%s' ('%s --help' lists them)\n", h->cmd,
				argv[optind - 1], h->cmd);
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", h->cmd, argv[optind]);
		return 2;
	}
	if (!h->addr || (h->bit != C_DISC && !h->nqn)) {
		fprintf(stderr, "%s: needs -a ADDR%s\n", h->cmd, h->bit != C_DISC ? " and -n NQN" : "");
		usage(stderr, h);
		return 2;
	}
	if (h->bit & C_RW) {
		if (!h->length || (h->bit == C_WRITE && !h->file)) {
			fprintf(stderr, "%s: needs --length%s\n", h->cmd,
				h->bit == C_WRITE ? " and --from" : "");
			return 2;
		}
		if (h->offset + h->length < h->offset) {
			fprintf(stderr, "%s: --offset plus --length is past 2^64\n", h->cmd);
			return 2;
		}
	}
	/* nvme-cli's pair: --tls asks for it, --tls-key gives the key (no keyring here) */
	if (h->tls != !!h->o.tls_key) {
		fprintf(stderr, "%s: --tls needs --tls-key KEY, and --tls-key needs --tls\n", h->cmd);
		return 2;
	}
	h->o.hostnqn = h->hostnqn;
	return 0;
}

static int parse_done(int rc)
{
	return rc == 1 ? 0 : rc;
}

/* "[::1]:4420" for IPv6 literals, "host:4420" otherwise. */
static const char *addr_str(const struct hopts *h)
{
	static char s[320];

	snprintf(s, sizeof(s), strchr(h->addr, ':') ? "[%s]:%s" : "%s:%s", h->addr, h->svc);
	return s;
}

/*
 * The host library cannot tell "no such host" from "no route": resolve here
 * first so that a typo in -a is named with getaddrinfo's own words.
 */
static bool resolvable(const struct hopts *h)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int rc = getaddrinfo(h->addr, h->svc, &hints, &res);

	if (rc) {
		fprintf(stderr, "%s: cannot resolve address '%s': %s\n", h->cmd, h->addr,
			rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return false;
	}
	freeaddrinfo(res);
	return true;
}

/* What a refused Connect most likely means, after the status itself. */
static const char *connect_hint(int rc, const struct hopts *h)
{
	static char s[512];

	if (rc == -EACCES) {
		snprintf(s, sizeof(s), "\n  (DH-HMAC-CHAP authentication failed: check -S/-C and "
			 "the secrets the target holds for host NQN %s)",
			 h->o.hostnqn ? h->o.hostnqn : "/etc/nvme/hostnqn");
		return s;
	}
	switch (gdx_nvme_status(rc)) {
	case 0x182:
		snprintf(s, sizeof(s), "\n  (is '%s' a subsystem of that target? "
			 "'gdx nvmf discover -a %s -s %s' lists them)", h->nqn, h->addr, h->svc);
		return s;
	case 0x184:
		snprintf(s, sizeof(s), "\n  (the target does not allow this host NQN; see -q and "
			 "the target's --allow-host)");
		return s;
	}
	return "";
}

static int connect_h(struct hopts *h, struct gdx_nvmf_ctrl **c)
{
	int rc;

	if (!resolvable(h))
		return -EHOSTUNREACH;
	rc = gdx_nvmf_connect(h->addr, h->svc, h->nqn, &h->o, c);
	/* the library keeps its own copy */
	explicit_bzero(h->secret, sizeof(h->secret));
	explicit_bzero(h->ctrl_secret, sizeof(h->ctrl_secret));
	if (rc)
		fprintf(stderr, "%s: connect to %s at %s: %s%s\n", h->cmd, h->nqn, addr_str(h),
			gdx_strerror(rc), connect_hint(rc, h));
	return rc;
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static const char *trtype_str(uint8_t t)
{
	return t == 3 ? "tcp" : t == 1 ? "rdma" : t == 2 ? "fc" : t == 254 ? "loop" : "unknown";
}

static const char *subtype_str(uint8_t t)
{
	return t == 1 ? "referral" : t == 2 ? "nvme subsystem" : t == 3 ? "current discovery"
	       : "unknown";
}

int cmd_nvmf_discover(int argc, char **argv)
{
	struct gdx_nvmf_discovery_log *log;
	struct hopts h;
	int rc = parse(argc, argv, &h, "discover");

	if (rc)
		return parse_done(rc);
	if (!resolvable(&h))
		return 1;
	rc = gdx_nvmf_discover(h.addr, h.svc, &h.o, &log);
	if (rc) {
		fprintf(stderr, "%s: %s: %s\n", h.cmd, addr_str(&h), gdx_strerror(rc));
		if (rc == -ECONNREFUSED && !h.svc_given)
			fprintf(stderr, "  (is the target's discovery on its listen port? the gdx "
				"target serves it there: try -s 4420)\n");
		return 1;
	}
	if (h.json)
		printf("{\"genctr\": %" PRIu64 ", \"records\": [", log->genctr);
	else
		printf("Discovery Log Number of Records %" PRIu64 ", Generation counter %" PRIu64
		       "\n", log->numrec, log->genctr);
	for (uint64_t i = 0; i < log->numrec; i++) {
		const struct gdx_nvmf_discovery_entry *e = &log->entries[i];

		if (h.json) {
			printf("%s{\"trtype\": \"%s\", \"adrfam\": %u, \"subtype\": \"%s\", "
			       "\"treq\": %u, \"portid\": %u, \"cntlid\": %u, \"asqsz\": %u, "
			       "\"sectype\": %u, \"trsvcid\": ", i ? ", " : "", trtype_str(e->trtype),
			       e->adrfam, subtype_str(e->subtype), e->treq, e->portid, e->cntlid,
			       e->asqsz, e->sectype);
			json_str(e->trsvcid);
			printf(", \"traddr\": ");
			json_str(e->traddr);
			printf(", \"subnqn\": ");
			json_str(e->subnqn);
			printf("}");
			continue;
		}
		printf("=====Discovery Log Entry %" PRIu64 "======\n"
		       "trtype:  %s\nadrfam:  %s\nsubtype: %s\ntreq:    %u\nportid:  %u\n"
		       "trsvcid: %s\nsubnqn:  %s\ntraddr:  %s\nsectype: %u\n", i,
		       trtype_str(e->trtype), e->adrfam == 1 ? "ipv4" : e->adrfam == 2 ? "ipv6" : "?",
		       subtype_str(e->subtype), e->treq, e->portid, e->trsvcid, e->subnqn, e->traddr,
		       e->sectype);
	}
	if (h.json)
		printf("]}\n");
	free(log);
	return 0;
}

/*
 * Parse, then connect (the id-* commands with one I/O queue unless asked for
 * more: they only identify).  False when there is nothing to do, with
 * *status the command's exit status.
 */
static bool parse_connect(int argc, char **argv, const char *cmd, struct hopts *h,
			  struct gdx_nvmf_ctrl **c, int *status)
{
	int rc = parse(argc, argv, h, cmd);

	if (rc) {
		*status = parse_done(rc);
		return false;
	}
	if (h->bit & (C_IDCTRL | C_IDNS))
		h->o.nr_io_queues = h->o.nr_io_queues ? h->o.nr_io_queues : 1;
	*status = 1;
	return connect_h(h, c) == 0;
}

/* Identify Namespace, with an error that names what is missing. */
static int identify_ns(const struct hopts *h, struct gdx_nvmf_ctrl *c,
		       struct gdx_nvmf_ns_info *ns)
{
	int rc = gdx_nvmf_identify_ns(c, h->nsid, ns);

	if (rc == -ENOENT)
		fprintf(stderr, "%s: namespace %u is not an active namespace of %s "
			"('gdx nvmf id-ctrl' shows how many there are)\n", h->cmd, h->nsid, h->nqn);
	else if (rc)
		fprintf(stderr, "%s: Identify Namespace %u: %s\n", h->cmd, h->nsid,
			gdx_strerror(rc));
	return rc;
}

int cmd_nvmf_id_ctrl(int argc, char **argv)
{
	struct gdx_nvmf_ctrl_info in;
	struct gdx_nvmf_ctrl *c;
	struct hopts h;
	int rc;

	if (!parse_connect(argc, argv, "id-ctrl", &h, &c, &rc))
		return rc;
	gdx_nvmf_ctrl_info(c, &in);
	if (h.json) {
		printf("{\"vid\": %u, \"cntlid\": %u, \"sn\": ", in.vid, in.cntlid);
		json_str(in.sn);
		printf(", \"mn\": ");
		json_str(in.mn);
		printf(", \"fr\": ");
		json_str(in.fr);
		printf(", \"subnqn\": ");
		json_str(in.subnqn);
		printf(", \"ver\": \"%u.%u.%u\", \"nn\": %u, \"cap\": %" PRIu64 ", \"max_xfer\": %u, "
		       "\"oncs\": %u, \"vwc\": %u, \"kas\": %u, \"maxcmd\": %u, \"ioccsz\": %u, "
		       "\"sgls\": %u, \"io_queues\": %u, \"queue_depth\": %u, \"hdr_digest\": %s, "
		       "\"data_digest\": %s}\n", in.ver >> 16, (in.ver >> 8) & 0xff, in.ver & 0xff,
		       in.nn, in.cap, in.max_xfer, in.oncs, in.vwc, in.kas, in.maxcmd, in.ioccsz,
		       in.sgls, in.nr_io_queues, in.queue_depth, in.hdr_digest ? "true" : "false",
		       in.data_digest ? "true" : "false");
	} else {
		printf("vid       : %#x\nsn        : %s\nmn        : %s\nfr        : %s\n"
		       "cntlid    : %u\nver       : %u.%u.%u\nsubnqn    : %s\nnn        : %u\n"
		       "mqes      : %u\nmax_xfer  : %u\noncs      : %#x\nvwc       : %#x\n"
		       "kas       : %u\nmaxcmd    : %u\nioccsz    : %u\nsgls      : %#x\n"
		       "io queues : %u x %u%s%s\n", in.vid, in.sn, in.mn, in.fr, in.cntlid,
		       in.ver >> 16, (in.ver >> 8) & 0xff, in.ver & 0xff, in.subnqn, in.nn,
		       (unsigned)(in.cap & 0xffff) + 1, in.max_xfer, in.oncs, in.vwc, in.kas,
		       in.maxcmd, in.ioccsz, in.sgls, in.nr_io_queues, in.queue_depth,
		       in.hdr_digest ? ", header digest" : "", in.data_digest ? ", data digest" : "");
	}
	gdx_nvmf_disconnect(c);
	return 0;
}

int cmd_nvmf_id_ns(int argc, char **argv)
{
	struct gdx_nvmf_ns_info ns;
	struct gdx_nvmf_ctrl *c;
	struct hopts h;
	int rc;

	if (!parse_connect(argc, argv, "id-ns", &h, &c, &rc))
		return rc;
	rc = identify_ns(&h, c, &ns);
	gdx_nvmf_disconnect(c);
	if (rc)
		return 1;
	if (h.json)
		printf("{\"nsid\": %u, \"nsze\": %" PRIu64 ", \"ncap\": %" PRIu64 ", \"nuse\": %"
		       PRIu64 ", \"block_size\": %u, \"bytes\": %" PRIu64 ", \"nmic\": %u, "
		       "\"nguid\": \"", ns.nsid, ns.nsze, ns.ncap, ns.nuse, ns.block_size,
		       ns.nsze * ns.block_size, ns.nmic);
	else
		printf("nsid       : %u\nnsze       : %" PRIu64 "\nncap       : %" PRIu64
		       "\nnuse       : %" PRIu64 "\nblock size : %u\nbytes      : %" PRIu64
		       "\nnmic       : %u\nnguid      : ", ns.nsid, ns.nsze, ns.ncap, ns.nuse,
		       ns.block_size, ns.nsze * ns.block_size, ns.nmic);
	for (int i = 0; i < 16; i++)
		printf("%02x", ns.nguid[i]);
	printf(h.json ? "\"}\n" : "\n");
	return 0;
}

/* ---- read / write: a stream of pieces through a fixed window ------------------- */

/*
 * The window: SLOTS pieces of at most PIECE bytes each are in flight or being
 * filled / drained, so a transfer of any length holds SLOTS * PIECE bytes of
 * I/O memory (and as much host staging for device memory).  PIECE is a
 * multiple of every block size up to 8 MiB.
 */
#define PIECE (8u << 20)
#define SLOTS 4

struct stream;

struct slot {
	struct gdx_nvmf_io io;
	struct stream *st;
	void *buf;		/* I/O memory: host, pinned or device */
	void *stage;		/* host copy of device memory; NULL otherwise */
	bool done;
};

struct stream {
	pthread_mutex_t m;
	pthread_cond_t cv;
	struct slot slot[SLOTS];
	struct gdx_device *dev;
	int kind;		/* 0 host, 1 pinned, 2 device */
	int fd;			/* --to / --from file, -1 for none or a pattern */
	bool own_fd;
	uint64_t pattern;	/* xorshift state of pattern:SEED */
	bool is_pattern;
	uint32_t crc;
	uint64_t done;		/* bytes completed and drained, in order */
};

static void *slot_host(struct slot *s)
{
	return s->stage ? s->stage : s->buf;
}

static int stream_mem(struct stream *st, const struct hopts *h, size_t piece)
{
	char *end;
	long ord;
	int rc = 0;

	if (!strcmp(h->mem, "pinned")) {
		st->kind = 1;
		rc = gdx_device_open(NULL, &st->dev);
	} else if (!strncmp(h->mem, "gpu:", 4)) {
		ord = strtol(h->mem + 4, &end, 10);
		if (end == h->mem + 4 || *end || ord < 0 || ord > 1024)
			return -EINVAL;
		st->kind = 2;
		rc = tool_open_gpu((int)ord, &st->dev);
	} else if (strcmp(h->mem, "host")) {
		return -EINVAL;
	}
	for (unsigned i = 0; i < SLOTS && !rc; i++) {
		struct slot *s = &st->slot[i];

		s->st = st;
		if (st->kind == 0) {
			s->buf = aligned_alloc(4096, GDX_ALIGN_UP(piece, 4096));
			rc = s->buf ? 0 : -ENOMEM;
		} else if (st->kind == 1) {
			rc = gdx_pinned_alloc(st->dev, piece, &s->buf);
		} else {
			rc = gdx_device_malloc(st->dev, piece, &s->buf);
			if (!rc) {
				s->stage = malloc(piece);
				rc = s->stage ? 0 : -ENOMEM;
			}
		}
	}
	return rc;
}

static void stream_close(struct stream *st)
{
	for (unsigned i = 0; i < SLOTS; i++) {
		struct slot *s = &st->slot[i];

		if (st->kind == 0)
			free(s->buf);
		else if (st->kind == 1 && s->buf)
			gdx_pinned_free(st->dev, s->buf);
		else if (s->buf)
			gdx_device_free(st->dev, s->buf);
		free(s->stage);
	}
	if (st->dev)
		gdx_device_close(st->dev);
	if (st->own_fd)
		close(st->fd);
	pthread_mutex_destroy(&st->m);
	pthread_cond_destroy(&st->cv);
}

/* --from / --to: a file, '-' (stdin / stdout), or pattern:SEED (--from only). */
static int stream_open_data(struct stream *st, const struct hopts *h)
{
	bool write = h->bit == C_WRITE;

	st->fd = -1;
	if (!h->file)
		return 0;
	if (write && !strncmp(h->file, "pattern:", 8)) {
		char *end;

		errno = 0;
		st->pattern = strtoull(h->file + 8, &end, 0);
		if (end == h->file + 8 || *end || errno) {
			fprintf(stderr, "%s: --from '%s': the seed is not a number\n", h->cmd, h->file);
			return -EINVAL;
		}
		st->pattern |= 1;
		st->is_pattern = true;
		return 0;
	}
	if (!strcmp(h->file, "-")) {
		st->fd = write ? 0 : 1;
		return 0;
	}
	st->fd = write ? open(h->file, O_RDONLY | O_CLOEXEC)
		       : open(h->file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (st->fd < 0) {
		fprintf(stderr, "%s: %s: %s\n", h->cmd, h->file, strerror(errno));
		return -errno;
	}
	st->own_fd = true;
	return 0;
}

/* The next n bytes of the source; the pattern continues where the last piece ended. */
static int fill(struct stream *st, const struct hopts *h, uint8_t *buf, size_t n)
{
	size_t got = 0;

	if (st->is_pattern) {
		uint64_t s = st->pattern;

		for (size_t i = 0; i < n; i++) {
			s ^= s >> 12;
			s ^= s << 25;
			s ^= s >> 27;
			buf[i] = (uint8_t)((s * 2685821657736338717ull) >> 56);
		}
		st->pattern = s;
		return 0;
	}
	while (got < n) {
		ssize_t r = read(st->fd, buf + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r < 0)
				fprintf(stderr, "%s: reading %s: %s\n", h->cmd, h->file, strerror(errno));
			else
				fprintf(stderr, "%s: %s ended after %" PRIu64 " of the %" PRIu64
					" bytes asked for\n", h->cmd, strcmp(h->file, "-") ? h->file :
					"stdin", st->done + got, h->length);
			return -EIO;
		}
		got += (size_t)r;
	}
	return 0;
}

static int drain(struct stream *st, const struct hopts *h, const uint8_t *buf, size_t n)
{
	size_t put = 0;

	while (st->fd >= 0 && put < n) {
		ssize_t w = write(st->fd, buf + put, n - put);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			fprintf(stderr, "%s: writing %s: %s\n", h->cmd, h->file,
				w < 0 ? strerror(errno) : "no progress");
			return -EIO;
		}
		put += (size_t)w;
	}
	return 0;
}

static void piece_done(struct gdx_nvmf_io *io, void *arg)
{
	struct slot *s = arg;

	(void)io;
	pthread_mutex_lock(&s->st->m);
	s->done = true;
	pthread_cond_signal(&s->st->cv);
	pthread_mutex_unlock(&s->st->m);
}

/* Says on stderr what the controller is doing while it is not live. */
struct watch {
	enum gdx_nvmf_ctrl_state state;
	uint64_t since;
	uint64_t last_line;
	bool drawn;		/* a progress line is on the terminal */
};

static void watch(struct watch *w, const struct hopts *h, struct gdx_nvmf_ctrl *c)
{
	enum gdx_nvmf_ctrl_state s = gdx_nvmf_ctrl_state(c);
	uint64_t now = gdx_now_ns();
	struct gdx_nvmf_ctrl_info in;
	const char *nl = w->drawn ? "\n" : "";

	if (s == w->state) {
		if (s == GDX_NVMF_RECONNECTING && now - w->last_line >= 1000000000ull) {
			fprintf(stderr, "%s%s: still reconnecting to %s: %.0f s so far (gives up after "
				"%.0f s: knob nvmf.host.ctrl_loss_tmo_ms)\n", nl, h->cmd, addr_str(h),
				(double)(now - w->since) / 1e9,
				(double)gdx_cfg_int("nvmf.host.ctrl_loss_tmo_ms") / 1e3);
			w->last_line = now;
			w->drawn = false;
		}
		return;
	}
	gdx_nvmf_ctrl_info(c, &in);
	if (s == GDX_NVMF_RECONNECTING)
		fprintf(stderr, "%s%s: connection to %s lost; reconnecting (I/O in flight is "
			"resent)\n", nl, h->cmd, addr_str(h));
	else if (s == GDX_NVMF_LIVE)
		fprintf(stderr, "%s%s: reconnected to %s after %.1f s (reconnect %u)\n", nl, h->cmd,
			addr_str(h), (double)(now - w->since) / 1e9, in.reconnects);
	else
		fprintf(stderr, "%s%s: gave up reconnecting to %s after %.1f s\n", nl, h->cmd,
			addr_str(h), (double)(now - w->since) / 1e9);
	w->state = s;
	w->since = now;
	w->last_line = now;
	w->drawn = false;
}

static int rw(int argc, char **argv, const char *cmd)
{
	struct stream st = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct watch w = { .state = GDX_NVMF_LIVE };
	struct gdx_nvmf_ns_info ns;
	struct gdx_nvmf_ctrl *c = NULL;
	struct hopts h;
	uint64_t t0, t1, next, last_draw = 0;
	unsigned head = 0, inflight = 0;
	const char *path = "none";
	bool write, tty;
	size_t piece;
	int rc = parse(argc, argv, &h, cmd), err = 0;

	if (rc)
		return parse_done(rc);
	write = h.bit == C_WRITE;
	tty = !h.quiet && !h.json && isatty(2);
	piece = (size_t)GDX_MIN((uint64_t)PIECE, h.length);
	rc = stream_mem(&st, &h, piece);
	if (rc) {
		fprintf(stderr, "%s: --mem '%s': %s\n", h.cmd, h.mem, rc == -EINVAL ?
			"not host, pinned or gpu:N" : gdx_strerror(rc));
		stream_close(&st);
		return rc == -EINVAL ? 2 : 1;
	}
	if (stream_open_data(&st, &h)) {
		stream_close(&st);
		return 1;
	}
	h.o.dev = st.dev;
	rc = 1;
	if (connect_h(&h, &c))
		goto out;
	if (identify_ns(&h, c, &ns))
		goto out;
	if (h.offset % ns.block_size || h.length % ns.block_size) {
		fprintf(stderr, "%s: %s %" PRIu64 " is not a multiple of the block size of namespace "
			"%u (%u bytes)\n", h.cmd, h.offset % ns.block_size ? "--offset" : "--length",
			h.offset % ns.block_size ? h.offset : h.length, h.nsid, ns.block_size);
		goto out;
	}

	next = h.offset;
	t0 = gdx_now_ns();
	for (;;) {
		/* keep the window full while there is data left and nothing failed */
		while (!err && inflight < SLOTS && next < h.offset + h.length) {
			struct slot *s = &st.slot[(head + inflight) % SLOTS];
			size_t n = (size_t)GDX_MIN((uint64_t)piece, h.offset + h.length - next);

			if (write && ((err = fill(&st, &h, slot_host(s), n)) ||
				      (s->stage && (err = gdx_memcpy(st.dev, s->buf, s->stage, n))))) {
				if (err != -EIO)
					fprintf(stderr, "%s: copy into device memory: %s\n", h.cmd,
						gdx_strerror(err));
				break;
			}
			s->io = (struct gdx_nvmf_io){
				.op = write ? GDX_NVMF_OP_WRITE : GDX_NVMF_OP_READ,
				.nsid = h.nsid, .offset = next, .len = n, .buf = s->buf,
			};
			s->done = false;
			err = gdx_nvmf_submit_cb(c, &s->io, piece_done, s);
			if (err) {
				fprintf(stderr, "%s: %zu bytes at offset %" PRIu64 ": %s\n", h.cmd, n,
					next, gdx_strerror(err));
				break;
			}
			next += n;
			inflight++;
		}
		if (!inflight)
			break;
		/* the oldest piece, in order: the file and the crc see the data as it lies */
		{
			struct slot *s = &st.slot[head];
			struct timespec ts;

			pthread_mutex_lock(&st.m);
			while (!s->done) {
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += 100000000;
				if (ts.tv_nsec >= 1000000000) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&st.cv, &st.m, &ts);
				if (s->done)
					break;
				pthread_mutex_unlock(&st.m);
				watch(&w, &h, c);
				if (tty) {
					tool_progress_draw(st.done, h.length, t0, &last_draw, false);
					w.drawn = true;
				}
				pthread_mutex_lock(&st.m);
			}
			pthread_mutex_unlock(&st.m);
			watch(&w, &h, c);
			head = (head + 1) % SLOTS;
			inflight--;
			if (s->io.result) {
				if (!err)
					fprintf(stderr, "%s%s: %" PRIu64 " bytes at offset %" PRIu64
						" of namespace %u: %s\n", w.drawn ? "\n" : "", h.cmd,
						s->io.len, s->io.offset, h.nsid,
						gdx_strerror(s->io.result));
				err = err ? err : s->io.result;
				continue;
			}
			if (err)
				continue;	/* failed already: only wait for the rest */
			path = s->io.path;
			if (!write && s->stage &&
			    (err = gdx_memcpy(st.dev, s->stage, s->buf, s->io.len))) {
				fprintf(stderr, "%s: copy out of device memory: %s\n", h.cmd,
					gdx_strerror(err));
				continue;
			}
			if (!write && (err = drain(&st, &h, slot_host(s), s->io.len)))
				continue;
			st.crc = gdx_crc32c_update(st.crc, slot_host(s), s->io.len);
			st.done += s->io.len;
			if (tty) {
				tool_progress_draw(st.done, h.length, t0, &last_draw, false);
				w.drawn = true;
			}
		}
	}
	t1 = gdx_now_ns();
	watch(&w, &h, c);
	if (err)
		goto out;
	if (tty)
		tool_progress_draw(st.done, h.length, t0, &last_draw, true);
	{
		double s = (double)(t1 - t0) / 1e9;
		struct gdx_nvmf_ctrl_info in;

		gdx_nvmf_ctrl_info(c, &in);
		if (h.json)
			printf("{\"op\": \"%s\", \"nsid\": %u, \"offset\": %" PRIu64 ", \"bytes\": %"
			       PRIu64 ", \"mem\": \"%s\", \"path\": \"%s\", \"seconds\": %.6f, "
			       "\"gbps\": %.3f, \"crc32c\": \"%08x\", \"reconnects\": %u}\n", cmd,
			       h.nsid, h.offset, h.length, h.mem, path, s, (double)h.length / s / 1e9,
			       st.crc, in.reconnects);
		else if (!h.file || strcmp(h.file, "-") || write)
			printf("%s %" PRIu64 " bytes at %" PRIu64 " of nsid %u (%s memory, path %s) "
			       "in %.3f ms: %.3f GB/s, crc32c %08x\n", cmd, h.length, h.offset, h.nsid,
			       h.mem, path, s * 1e3, (double)h.length / s / 1e9, st.crc);
	}
	rc = 0;
out:
	if (c)
		gdx_nvmf_disconnect(c);
	stream_close(&st);
	return rc;
}

int cmd_nvmf_read(int argc, char **argv)
{
	return rw(argc, argv, "read");
}

int cmd_nvmf_write(int argc, char **argv)
{
	return rw(argc, argv, "write");
}
