/* SPDX-License-Identifier: MIT */
/*
 * gdx cp SRC DST [--via gpu:N]: copies between files and device memory
 * ("gpu:N") through gdx_file_*, and says how fast and by which path.
 *
 *   gdx cp FILE gpu:0              file into device memory
 *   gdx cp gpu:0 FILE --size 1G    device memory out to a file
 *   gdx cp FILE1 FILE2 --via gpu:0 file -> device memory -> file (a round trip)
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gdx/gdx.h>

#include "args.h"
#include "cmd.h"
#include "common/config.h"
#include "common/util.h"
#include "plugin/file.h"
#include "progress.h"

struct cp_state {
	struct gdx_device *dev;
	struct gdx_file_driver *drv;
	uint64_t total, done;
	uint64_t t0, last_draw;
	bool tty, quiet;
};

static int gpu_ordinal(const char *s)
{
	char *end;
	long n;

	if (strncmp(s, "gpu:", 4))
		return -1;
	n = strtol(s + 4, &end, 10);
	return end == s + 4 || *end || n < 0 || n > 1024 ? -2 : (int)n;
}

/* gpu:N names device N of the kind the device knob selects (cuda unless emulated). */
int tool_open_gpu(int ordinal, struct gdx_device **dev)
{
	const char *knob = gdx_cfg_str("device");
	char spec[64];

	snprintf(spec, sizeof(spec), "%s:%d", strncmp(knob, "emulated", 8) ? "cuda" : "emulated",
		 ordinal);
	return gdx_device_open(spec, dev);
}

static void progress(struct cp_state *st, bool final)
{
	if (st->tty && !st->quiet)
		tool_progress_draw(st->done, st->total, st->t0, &st->last_draw, final);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gdx cp SRC DST [--via gpu:N] [--size BYTES] [--piece BYTES] [--backend B]\n"
		"  SRC, DST: a file path or gpu:N (device memory on device N)\n"
		"  --via gpu:N  file to file through device memory (read in, write back out)\n"
		"  --size       bytes to write when SRC is gpu:N\n"
		"  --piece      bytes per gdx_file call (default 256M)\n"
		"  --backend    cufile, uring or posix (default: by priority)\n"
		"  -q, --quiet  no progress bar\n");
}

/* Out of device memory: say how much there is, and what fits in it. */
static void enomem_hint(struct cp_state *st, const char *via)
{
	struct gdx_device_props p;

	if (gdx_device_props(st->dev, &p) || !p.total_mem)
		return;
	fprintf(stderr, "gdx cp: %s has %.0f MiB of device memory%s; %s\n",
		gdx_device_name(st->dev), (double)p.total_mem / (1u << 20),
		strcmp(gdx_device_kind(st->dev), "emulated") ? "" :
		" (GDX_EMULATED_MEM_LIMIT sets it)",
		via ? "a smaller --piece needs less" :
		"gpu:N holds the whole copy; file to file with --via gpu:N goes in pieces");
}

static void path_line(const char *what, struct gdx_file *f)
{
	struct gdx_file_io_info info;
	uint64_t total = 0;

	gdx_file_info(f, &info);
	for (int p = 1; p < GDX_FILE_PATH_COUNT; p++)
		total += info.bytes[p];
	printf("  %s path: ", what);
	for (int p = 1, first = 1; p < GDX_FILE_PATH_COUNT; p++) {
		if (!info.bytes[p])
			continue;
		printf("%s%s %.1f%%", first ? "" : ", ", gdx_file_path_name((enum gdx_file_path)p),
		       100.0 * (double)info.bytes[p] / (double)(total ? total : 1));
		first = 0;
	}
	printf(" (%s: %s)\n", gdx_file_backend_name(f), info.why);
}

/*
 * Opens dst for writing without truncating it first: when it is the source
 * itself (the same inode, reached by another name or a hard link), a truncate
 * would destroy the data before the copy reads it.  Refused as cp(1) does.
 */
static int open_dst(struct cp_state *st, const char *dst, struct gdx_file_opts *fo,
		    struct gdx_file *in, const char *src, struct gdx_file **out)
{
	struct stat ss, ds;
	int ret;

	fo->oflags = O_WRONLY | O_CREAT;
	ret = gdx_file_open(st->drv, dst, fo, out);
	if (ret) {
		fprintf(stderr, "gdx cp: %s: %s\n", dst, gdx_strerror(ret));
		return ret;
	}
	if (fstat(gdx_file_fd(*out), &ds) || (in && fstat(gdx_file_fd(in), &ss))) {
		ret = -errno;
		fprintf(stderr, "gdx cp: fstat: %s\n", strerror(errno));
		return ret;
	}
	if (in && ss.st_dev == ds.st_dev && ss.st_ino == ds.st_ino) {
		fprintf(stderr, "gdx cp: '%s' and '%s' are the same file\n", src, dst);
		return -EINVAL;
	}
	if (ftruncate(gdx_file_fd(*out), 0)) {
		ret = -errno;
		fprintf(stderr, "gdx cp: %s: truncate: %s\n", dst, strerror(errno));
		return ret;
	}
	return 0;
}

int cmd_cp(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "via", required_argument, NULL, 'v' },
		{ "size", required_argument, NULL, 's' },
		{ "piece", required_argument, NULL, 'p' },
		{ "backend", required_argument, NULL, 'b' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cp_state st = { .tty = isatty(2) };
	struct gdx_file_opts fo;
	struct gdx_file *in = NULL, *out = NULL;
	const char *via = NULL, *src, *dst, *nl;
	uint64_t size = 0, piece = 256u << 20, dlen;
	int o, ord, rc = 1, ret;
	void *dbuf = NULL;
	double secs;

	gdx_file_opts_init(&fo, sizeof(fo));
	while ((o = getopt_long(argc, argv, "qh", lo, NULL)) != -1) {
		switch (o) {
		case 'v':
			if (arg_gpu(argv[0], "--via", optarg, &ord))
				return 2;
			via = optarg;
			break;
		case 's':
			if (arg_size(argv[0], "--size", optarg, 1, 1ull << 50, &size))
				return 2;
			break;
		case 'p':
			if (arg_size(argv[0], "--piece", optarg, 1, 1ull << 40, &piece))
				return 2;
			break;
		case 'b':
			if (arg_choice(argv[0], "--backend", optarg, "cufile|uring|posix") < 0)
				return 2;
			fo.backend = optarg;
			break;
		case 'q': st.quiet = true; break;
		case 'h': usage(stdout); return 0;
		default: goto bad;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "%s: want SRC and DST, got %d argument%s\n", argv[0], argc - optind,
			argc - optind == 1 ? "" : "s");
		goto bad;
	}
	src = argv[optind];
	dst = argv[optind + 1];
	if (via)
		ord = gpu_ordinal(via);
	else
		ord = gpu_ordinal(src) >= 0 ? gpu_ordinal(src) : gpu_ordinal(dst);
	if (ord < 0 || (via && (gpu_ordinal(src) != -1 || gpu_ordinal(dst) != -1)) ||
	    (!via && (gpu_ordinal(src) >= 0) == (gpu_ordinal(dst) >= 0)) ||
	    (gpu_ordinal(src) >= 0 && !size && !via)) {
		fprintf(stderr, "gdx cp: need one file and one gpu:N (or two files and --via gpu:N);"
			" gpu:N as source needs --size\n");
		goto bad;
	}
	ret = tool_open_gpu(ord, &st.dev);
	if (!ret)
		ret = gdx_file_driver_open(st.dev, NULL, &st.drv);
	if (ret) {
		fprintf(stderr, "gdx cp: %s\n", gdx_strerror(ret));
		goto out;
	}
	if (gpu_ordinal(src) < 0) {
		fo.oflags = O_RDONLY;
		ret = gdx_file_open(st.drv, src, &fo, &in);
		if (ret) {
			fprintf(stderr, "gdx cp: %s: %s\n", src, gdx_strerror(ret));
			goto out;
		}
		size = (uint64_t)gdx_file_size(in);
	}
	if (gpu_ordinal(dst) < 0 && open_dst(&st, dst, &fo, in, src, &out))
		goto out;
	/* Device memory: all of it for gpu:N, one piece when only passing through. */
	dlen = via ? GDX_MIN(piece, GDX_MAX(size, 1)) : GDX_MAX(size, 1);
	ret = gdx_device_malloc(st.dev, dlen, &dbuf);
	if (ret) {
		fprintf(stderr, "gdx cp: device memory for %llu bytes: %s\n",
			(unsigned long long)dlen, gdx_strerror(ret));
		if (ret == -ENOMEM)
			enomem_hint(&st, via);
		goto out;
	}
	if (!in)
		gdx_memset(st.dev, dbuf, 0, size);
	st.total = size;
	st.t0 = gdx_now_ns();
	nl = st.tty && !st.quiet ? "\n" : "";	/* below the progress bar */
	while (st.done < size) {
		size_t n = (size_t)GDX_MIN(piece, size - st.done);
		char *d = via ? dbuf : (char *)dbuf + st.done;
		ssize_t r = (ssize_t)n;

		if (in) {
			r = gdx_file_read(in, d, n, (off_t)st.done);
			if (r == 0) {
				fprintf(stderr, "%sgdx cp: %s: ended at byte %llu of %llu: the file "
					"shrank during the copy\n", nl, src,
					(unsigned long long)st.done, (unsigned long long)size);
				goto out;
			}
		}
		if (r > 0 && out)
			r = gdx_file_write(out, d, (size_t)r, (off_t)st.done);
		if (r < 0) {
			fprintf(stderr, "%sgdx cp: %s at offset %llu: %s\n", nl, r == GDX_ENOTDIRECT ?
				"no direct path (strict mode)" : "I/O failed",
				(unsigned long long)st.done, gdx_strerror((int)r));
			goto out;
		}
		st.done += (uint64_t)r;
		progress(&st, false);
	}
	if (out && (ret = gdx_file_sync(out))) {
		fprintf(stderr, "gdx cp: %s: fdatasync: %s\n", dst, gdx_strerror(ret));
		goto out;
	}
	secs = (double)(gdx_now_ns() - st.t0) / 1e9;
	progress(&st, true);
	printf("%s -> %s%s%s: %llu bytes in %.3f s, %.2f GB/s\n", src, dst, via ? " via " : "",
	       via ? via : "", (unsigned long long)st.done, secs,
	       secs > 0 ? (double)st.done / secs / 1e9 : 0.0);
	if (in)
		path_line("read", in);
	if (out)
		path_line("write", out);
	rc = 0;
out:
	if (dbuf)
		gdx_device_free(st.dev, dbuf);
	if (in)
		gdx_file_close(in);
	if (out)
		gdx_file_close(out);
	gdx_file_driver_close(st.drv);
	gdx_device_close(st.dev);
	return rc;
bad:
	return arg_usage_error(argv[0]);
}
