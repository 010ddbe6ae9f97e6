/* SPDX-License-Identifier: MIT */
/*
 * Host subcommands of `gdx nvmf`: discover, id-ctrl, id-ns, read, write.
 * Data lands in (or leaves from) host, pinned or device memory (--mem), and
 * comes from / goes to a file or a deterministic pattern.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "common/config.h"
#include "common/crc32c.h"
#include "common/util.h"
#include "cmd.h"
#include "nvmf_host.h"

struct hopts {
	const char *addr, *svc, *nqn, *hostnqn;
	uint32_t nsid;
	uint64_t offset, length;
	const char *file;	/* --to / --from */
	const char *mem;	/* host | pinned | gpu:N */
	int json;
	struct gdx_nvmf_host_opts o;
};

static void usage(FILE *f, const char *cmd)
{
	fprintf(f,
		"usage: gdx nvmf %s -a ADDR [-s PORT] %s[options]\n"
		"  -a, --traddr ADDR     target address\n"
		"  -s, --trsvcid PORT    target port (discover: 8009, others: 4420)\n"
		"  -n, --nqn NQN         subsystem NQN\n"
		"  -q, --hostnqn NQN     host NQN (default /etc/nvme/hostnqn or generated)\n"
		"  -N, --nsid N          namespace (default 1)\n"
		"  -o, --offset BYTES    byte offset (block aligned; 4k, 1M suffixes)\n"
		"  -l, --length BYTES    byte count (block aligned)\n"
		"      --to FILE         read: write the data to FILE\n"
		"      --from SRC        write: FILE, or pattern:SEED for deterministic bytes\n"
		"  -m, --mem KIND        memory the data lands in / leaves from: host, pinned, gpu:N\n"
		"      --queues N        I/O queues      --depth N   entries per queue\n"
		"      --hdr-digest      --data-digest   (CRC32C digests)\n"
		"      --json            machine-readable output\n",
		cmd, strcmp(cmd, "discover") ? "-n NQN " : "");
}

static int parse(int argc, char **argv, struct hopts *h, bool disc)
{
	static const struct option lo[] = {
		{ "traddr", required_argument, NULL, 'a' },
		{ "trsvcid", required_argument, NULL, 's' },
		{ "nqn", required_argument, NULL, 'n' },
		{ "hostnqn", required_argument, NULL, 'q' },
		{ "nsid", required_argument, NULL, 'N' },
		{ "offset", required_argument, NULL, 'o' },
		{ "length", required_argument, NULL, 'l' },
		{ "mem", required_argument, NULL, 'm' },
		{ "to", required_argument, NULL, 'T' },
		{ "from", required_argument, NULL, 'F' },
		{ "queues", required_argument, NULL, 'Q' },
		{ "depth", required_argument, NULL, 'D' },
		{ "hdr-digest", no_argument, NULL, 'H' },
		{ "data-digest", no_argument, NULL, 'G' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;

	memset(h, 0, sizeof(*h));
	h->svc = disc ? "8009" : "4420";
	h->nsid = 1;
	h->mem = "host";
	gdx_nvmf_host_opts_init(&h->o, sizeof(h->o));
	optind = 1;
	while ((c = getopt_long(argc, argv, "a:s:n:q:N:o:l:m:h", lo, NULL)) != -1) {
		uint64_t v;

		switch (c) {
		case 'a': h->addr = optarg; break;
		case 's': h->svc = optarg; break;
		case 'n': h->nqn = optarg; break;
		case 'q': h->hostnqn = optarg; break;
		case 'm': h->mem = optarg; break;
		case 'T':
		case 'F': h->file = optarg; break;
		case 'H': h->o.hdr_digest = 1; break;
		case 'G': h->o.data_digest = 1; break;
		case 'j': h->json = 1; break;
		case 'N':
		case 'o':
		case 'l':
		case 'Q':
		case 'D':
			if (gdx_parse_size(optarg, &v)) {
				fprintf(stderr, "gdx nvmf: bad number '%s'\n", optarg);
				return 2;
			}
			if (c == 'N')
				h->nsid = (uint32_t)v;
			else if (c == 'o')
				h->offset = v;
			else if (c == 'l')
				h->length = v;
			else if (c == 'Q')
				h->o.nr_io_queues = (unsigned)v;
			else
				h->o.queue_depth = (unsigned)v;
			break;
		case 'h':
			usage(stdout, argv[0]);
			return 1;
		default:
			usage(stderr, argv[0]);
			return 2;
		}
	}
	if (optind != argc || !h->addr || (!disc && !h->nqn)) {
		usage(stderr, argv[0]);
		return 2;
	}
	h->o.hostnqn = h->hostnqn;
	return 0;
}

static int parse_done(int rc)
{
	return rc == 1 ? 0 : rc;
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
	int rc = parse(argc, argv, &h, true);

	if (rc)
		return parse_done(rc);
	rc = gdx_nvmf_discover(h.addr, h.svc, &h.o, &log);
	if (rc) {
		fprintf(stderr, "gdx nvmf discover: %s:%s: %s\n", h.addr, h.svc, gdx_strerror(rc));
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

static int connect_h(struct hopts *h, struct gdx_nvmf_ctrl **c)
{
	int rc = gdx_nvmf_connect(h->addr, h->svc, h->nqn, &h->o, c);

	if (rc)
		fprintf(stderr, "gdx nvmf: connect to %s at %s:%s: %s\n", h->nqn, h->addr, h->svc,
			gdx_strerror(rc));
	return rc;
}

/*
 * The id-* commands: parse, then connect with one I/O queue unless asked for more (they only
 * identify).  False when there is nothing to identify, with *status the command's exit status.
 */
static bool parse_connect(int argc, char **argv, struct hopts *h, struct gdx_nvmf_ctrl **c,
			  int *status)
{
	int rc = parse(argc, argv, h, false);

	if (rc) {
		*status = parse_done(rc);
		return false;
	}
	h->o.nr_io_queues = h->o.nr_io_queues ? h->o.nr_io_queues : 1;
	*status = 1;
	return connect_h(h, c) == 0;
}

int cmd_nvmf_id_ctrl(int argc, char **argv)
{
	struct gdx_nvmf_ctrl_info in;
	struct gdx_nvmf_ctrl *c;
	struct hopts h;
	int rc;

	if (!parse_connect(argc, argv, &h, &c, &rc))
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

	if (!parse_connect(argc, argv, &h, &c, &rc))
		return rc;
	rc = gdx_nvmf_identify_ns(c, h.nsid, &ns);
	gdx_nvmf_disconnect(c);
	if (rc) {
		fprintf(stderr, "gdx nvmf id-ns: namespace %u: %s\n", h.nsid, gdx_strerror(rc));
		return 1;
	}
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

/* ---- read / write -------------------------------------------------------------- */

struct membuf {
	struct gdx_device *dev;
	void *p;		/* where the I/O happens */
	void *host;		/* host staging for device memory */
	int kind;		/* 0 host, 1 pinned, 2 device */
};

static int mem_open(const char *mem, size_t n, struct membuf *m)
{
	char *end;
	long ord;
	int rc = 0;

	memset(m, 0, sizeof(*m));
	if (!strcmp(mem, "host")) {
		m->p = aligned_alloc(4096, GDX_ALIGN_UP(n, 4096));
		return m->p ? 0 : -ENOMEM;
	}
	if (!strcmp(mem, "pinned")) {
		m->kind = 1;
		rc = gdx_device_open(NULL, &m->dev);
		return rc ? rc : gdx_pinned_alloc(m->dev, n, &m->p);
	}
	if (strncmp(mem, "gpu:", 4))
		return -EINVAL;
	ord = strtol(mem + 4, &end, 10);
	if (end == mem + 4 || *end || ord < 0 || ord > 1024)
		return -EINVAL;
	m->kind = 2;
	rc = tool_open_gpu((int)ord, &m->dev);
	if (!rc)
		rc = gdx_device_malloc(m->dev, n, &m->p);
	if (!rc) {
		m->host = malloc(n);
		rc = m->host ? 0 : -ENOMEM;
	}
	return rc;
}

static void mem_close(struct membuf *m)
{
	if (m->kind == 0)
		free(m->p);
	else if (m->kind == 1 && m->p)
		gdx_pinned_free(m->dev, m->p);
	else if (m->p)
		gdx_device_free(m->dev, m->p);
	free(m->host);
	if (m->dev)
		gdx_device_close(m->dev);
}

static void *mem_hostview(struct membuf *m)
{
	return m->kind == 2 ? m->host : m->p;
}

static int fill_source(const char *src, uint8_t *buf, size_t n)
{
	if (!strncmp(src, "pattern:", 8)) {
		uint64_t s = strtoull(src + 8, NULL, 0) | 1;

		for (size_t i = 0; i < n; i++) {
			s ^= s >> 12;
			s ^= s << 25;
			s ^= s >> 27;
			buf[i] = (uint8_t)((s * 2685821657736338717ull) >> 56);
		}
		return 0;
	}
	{
		int fd = open(src, O_RDONLY | O_CLOEXEC);
		size_t got = 0;

		if (fd < 0)
			return -errno;
		while (got < n) {
			ssize_t r = read(fd, buf + got, n - got);

			if (r <= 0) {
				close(fd);
				return r < 0 ? -errno : -ENODATA;
			}
			got += (size_t)r;
		}
		close(fd);
	}
	return 0;
}

static int dump(const char *path, const uint8_t *buf, size_t n)
{
	int fd = strcmp(path, "-") ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : 1;
	size_t put = 0;

	if (fd < 0)
		return -errno;
	while (put < n) {
		ssize_t w = write(fd, buf + put, n - put);

		if (w <= 0)
			break;
		put += (size_t)w;
	}
	if (fd != 1)
		close(fd);
	return put == n ? 0 : -EIO;
}

static int rw(int argc, char **argv, bool write)
{
	struct gdx_nvmf_io io = { .op = write ? GDX_NVMF_OP_WRITE : GDX_NVMF_OP_READ };
	struct gdx_nvmf_ctrl_info in;
	struct gdx_nvmf_ctrl *c;
	struct membuf m;
	struct hopts h;
	uint64_t t0, t1;
	double s;
	int rc = parse(argc, argv, &h, false);

	if (rc)
		return parse_done(rc);
	if (!h.length || (write && !h.file)) {
		fprintf(stderr, "gdx nvmf %s: needs --length%s\n", argv[0], write ? " and --from" : "");
		return 2;
	}
	rc = mem_open(h.mem, h.length, &m);
	if (rc) {
		fprintf(stderr, "gdx nvmf %s: memory '%s': %s\n", argv[0], h.mem, gdx_strerror(rc));
		mem_close(&m);
		return rc == -EINVAL ? 2 : 1;
	}
	if (write) {
		rc = fill_source(h.file, mem_hostview(&m), h.length);
		if (!rc && m.kind == 2)
			rc = gdx_memcpy(m.dev, m.p, m.host, h.length);
		if (rc) {
			fprintf(stderr, "gdx nvmf write: source '%s': %s\n", h.file, gdx_strerror(rc));
			mem_close(&m);
			return 1;
		}
	}
	h.o.dev = m.dev;
	if (connect_h(&h, &c)) {
		mem_close(&m);
		return 1;
	}
	io.nsid = h.nsid;
	io.offset = h.offset;
	io.len = h.length;
	io.buf = m.p;
	t0 = gdx_now_ns();
	rc = gdx_nvmf_submit(c, &io, 1);
	t1 = gdx_now_ns();
	gdx_nvmf_ctrl_info(c, &in);
	gdx_nvmf_disconnect(c);
	if (rc) {
		if (io.nvme_status)
			fprintf(stderr, "gdx nvmf %s: %s (NVMe status %#x)\n", argv[0],
				gdx_strerror(rc), io.nvme_status);
		else
			fprintf(stderr, "gdx nvmf %s: %s\n", argv[0], gdx_strerror(rc));
		mem_close(&m);
		return 1;
	}
	if (!write && m.kind == 2)
		rc = gdx_memcpy(m.dev, m.host, m.p, h.length);
	if (!rc && !write && h.file)
		rc = dump(h.file, mem_hostview(&m), h.length);
	if (rc) {
		fprintf(stderr, "gdx nvmf read: %s: %s\n", h.file ? h.file : "copy", gdx_strerror(rc));
		mem_close(&m);
		return 1;
	}
	s = (double)(t1 - t0) / 1e9;
	if (h.json)
		printf("{\"op\": \"%s\", \"nsid\": %u, \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64
		       ", \"mem\": \"%s\", \"path\": \"%s\", \"seconds\": %.6f, \"gbps\": %.3f, "
		       "\"crc32c\": \"%08x\", \"reconnects\": %u}\n", argv[0], h.nsid, h.offset,
		       h.length, h.mem, io.path, s, (double)h.length / s / 1e9,
		       gdx_crc32c(mem_hostview(&m), h.length), in.reconnects);
	else if (!h.file || strcmp(h.file, "-"))
		printf("%s %" PRIu64 " bytes at %" PRIu64 " of nsid %u "
		       "(%s memory, path %s) in %.3f ms: %.3f GB/s, crc32c %08x\n", argv[0],
		       h.length, h.offset, h.nsid, h.mem, io.path, s * 1e3,
		       (double)h.length / s / 1e9, gdx_crc32c(mem_hostview(&m), h.length));
	mem_close(&m);
	return 0;
}

int cmd_nvmf_read(int argc, char **argv)
{
	return rw(argc, argv, false);
}

int cmd_nvmf_write(int argc, char **argv)
{
	return rw(argc, argv, true);
}
