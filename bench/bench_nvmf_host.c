/* SPDX-License-Identifier: MIT */
/*
 * `gdx bench nvmf-host`: the gdx NVMe/TCP host reading a remote namespace.
 *
 * For each memory kind asked for (host, pinned, gpu:N) it measures 4 KiB
 * random-read IOPS at each queue depth and large-read bandwidth, keeping the
 * depth in flight with completion callbacks.  In the same run it measures the
 * ceilings it is judged against:
 *   - the TCP ceiling: raw TCP streams over loopback between threads of this
 *     process, one stream and one per I/O queue (the better counts), recv()ing
 *     into a buffer of the bandwidth test's size (meaningful for a local target);
 *     for device memory also the same streams received into a pinned ring and
 *     copied from there into the device by a copy agent, as the host's reads
 *     are (what a read into device memory through host memory costs at
 *     least: the copies' reads take the ring's lines from the receiving CPU's
 *     cache);
 *   - the latency ceiling of a 4 KiB read at depth 1: a raw TCP request/response
 *     of the read's sizes (72 bytes out, 24 + 4096 back) between two threads;
 *   - with --fio-dev, the Linux kernel host on the same target: fio (libaio,
 *     O_DIRECT) on the block device the kernel host connected, same shapes;
 * Each point is measured --rounds times, the kernel host and each memory kind
 * in turn, and the medians are reported, so a noisy machine drifts both sides
 * alike; every result is printed beside its ceilings with the ratios, and with
 * the path its reads took (direct, bounce; over RDMA, why the NIC did not
 * register device memory).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include <gdx/gdx.h>
#include <gdx/nvmf.h>

#include "bench_nvmf_host.h"
#include "ceiling.h"
#include "memspec.h"
#include "sort.h"
#include "tcp_rr.h"
#include "common/config.h"
#include "common/util.h"
#include "gpu/device.h"

struct cfg {
	const char *addr, *svc, *nqn, *fio_dev;
	uint32_t nsid;
	double secs;
	unsigned qds[8], nqd;
	uint64_t bw_bs;
	unsigned bw_qd;
	bool bw_write;		/* the bandwidth test writes instead of reading */
	char mems[8][16];
	unsigned nmem;
	bool json, tcp_ceiling, dev_calls;
	double rr_us;		/* the raw request/response of a 4 KiB read; 0: none */
	unsigned rounds;
	struct gdx_nvmf_host_opts o;
	int (*open_gpu)(int, struct gdx_device **);
};

/* ---- gdx host: a fixed depth of random reads, kept full from callbacks ---- */

struct run {
	struct gdx_nvmf_ctrl *c;
	pthread_mutex_t m;	/* only for the last completion's signal */
	pthread_cond_t cv;
	uint64_t deadline, span_blocks;
	_Atomic unsigned outstanding;
	_Atomic int err;
	uint32_t bs;
};

/*
 * One read in flight: each keeps its own counts and random offsets, so the
 * receivers completing reads share nothing but the run's read-only fields
 * (a lock per completion was one more thing all queues took turns at).
 */
struct slot {
	struct gdx_nvmf_io io;
	struct run *r;
	uint64_t seed, done, bytes, bounced;
} __attribute__((aligned(64)));

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void slot_end(struct run *r, int err)
{
	int none = 0;

	if (err)
		atomic_compare_exchange_strong(&r->err, &none, err);
	if (atomic_fetch_sub(&r->outstanding, 1) == 1) {
		pthread_mutex_lock(&r->m);
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->m);
	}
}

static void on_done(struct gdx_nvmf_io *io, void *arg)
{
	struct slot *s = arg;
	struct run *r = s->r;
	int rc;

	if (io->result) {
		slot_end(r, io->result);
		return;
	}
	s->done++;
	s->bytes += io->len;
	s->bounced += !strcmp(io->path, "bounce");
	if (atomic_load_explicit(&r->err, memory_order_relaxed) || gdx_now_ns() >= r->deadline) {
		slot_end(r, 0);
		return;
	}
	io->offset = (rnd(&s->seed) % r->span_blocks) * r->bs;
	rc = gdx_nvmf_submit_cb(r->c, io, on_done, s);
	if (rc)
		slot_end(r, rc);
}

/* Runs the calling thread on cpu, or where allowed says when cpu < 0. */
static void run_on(const cpu_set_t *allowed, int cpu)
{
	cpu_set_t one;

	if (cpu < 0) {
		sched_setaffinity(0, sizeof(*allowed), allowed);
		return;
	}
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	sched_setaffinity(0, sizeof(one), &one);
}

/*
 * Returns operations per second and fills *gbps; negative on error.  Adds the
 * operations (op: reads or writes) timed to reads[0] and those of them that
 * bounced to reads[1].  The first request of each slot goes from each CPU
 * the process may use in turn, as fio's jobs would run spread over them;
 * its completions submit the slot's next ones (on_done).  With the host's
 * receivers pinned (over RDMA by default) a request goes to the queue of the
 * CPU it is submitted from: from one CPU, all would start on one queue.
 */
static double gdx_run(struct gdx_nvmf_ctrl *c, uint32_t nsid, uint64_t ns_bytes, void *buf,
		      enum gdx_nvmf_op op, uint32_t bs, unsigned qd, double secs, double *gbps,
		      uint64_t reads[2], int *err)
{
	struct slot *sl = aligned_alloc(64, sizeof(*sl) * qd);
	struct run r = { .c = c, .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
			 .bs = bs };
	uint64_t t0 = 0, done = 0, bytes = 0, bounced = 0;
	int cpus[64], ncpus = 0;
	cpu_set_t allowed;

	/* the CPUs the slots' first requests leave from, in turn */
	if (!sched_getaffinity(0, sizeof(allowed), &allowed))
		for (int cpu = 0; cpu < CPU_SETSIZE && ncpus < (int)GDX_ARRAY_SIZE(cpus); cpu++)
			if (CPU_ISSET(cpu, &allowed))
				cpus[ncpus++] = cpu;
	if (!sl) {
		*err = -ENOMEM;
		return -1;
	}
	r.span_blocks = ns_bytes / bs;
	for (unsigned i = 0; i < qd; i++)
		sl[i] = (struct slot){ .r = &r, .seed = 0x9e3779b97f4a7c15ull * (i + 1) };
	/* warm-up: one pass of the queue depth, not timed */
	for (int phase = 0; phase < 2; phase++) {
		t0 = gdx_now_ns();
		r.deadline = t0 + (phase ? (uint64_t)(secs * 1e9) : 200000000ull);
		atomic_store(&r.outstanding, qd);
		for (unsigned i = 0; i < qd; i++) {
			struct slot *s = &sl[i];
			int rc;

			s->done = s->bytes = s->bounced = 0;
			s->io = (struct gdx_nvmf_io){ .op = op, .nsid = nsid,
						      .offset = (rnd(&s->seed) % r.span_blocks) * bs,
						      .len = bs, .buf = (char *)buf + (size_t)i * bs };
			if (ncpus > 1)
				run_on(&allowed, cpus[i % (unsigned)ncpus]);
			rc = gdx_nvmf_submit_cb(c, &s->io, on_done, s);
			if (rc)
				slot_end(&r, rc);
		}
		if (ncpus > 1)
			run_on(&allowed, -1);
		pthread_mutex_lock(&r.m);
		while (atomic_load(&r.outstanding))
			pthread_cond_wait(&r.cv, &r.m);
		pthread_mutex_unlock(&r.m);
		if (atomic_load(&r.err))
			break;
	}
	for (unsigned i = 0; i < qd; i++) {
		done += sl[i].done;
		bytes += sl[i].bytes;
		bounced += sl[i].bounced;
	}
	free(sl);
	reads[0] += done;
	reads[1] += bounced;
	*err = atomic_load(&r.err);
	if (*err)
		return -1;
	{
		double s = (double)(gdx_now_ns() - t0) / 1e9;

		*gbps = (double)bytes / s / 1e9;
		return (double)done / s;
	}
}

/* ---- what the bounce ring's device calls cost the receivers ----------------- */

/*
 * The CPU time of one call of each kind a device read makes, with as many
 * threads calling at once as there are receivers (each on a stream of its
 * own, as each queue has), against one thread alone: what the driver's
 * locks add when the receivers call together.
 */
enum { DC_COPY, DC_STORE, DC_RECORD, DC_QUERY, DC_LOOKUP, DC_N };
static const char *const dc_names[DC_N] = { "copy-4k", "word-store", "event-record",
					    "event-query", "pointer-lookup" };

struct dc_thread {
	struct gdx_device *dev;
	char *dst;		/* 1 MiB of device memory of its own */
	int op;
	const int *go;		/* set once every thread is up */
	double us;
	int err;
};

static void *dc_main(void *arg)
{
	struct dc_thread *t = arg;
	struct gdx_stream *s = NULL;
	struct gdx_event *ev = NULL;
	struct gdx_ptr_attrs a;
	uint32_t *word = NULL;
	char *pin = NULL;
	uint64_t busy = 0, n = 0, end;

	t->err = gdx_stream_create(t->dev, &s);
	if (!t->err)
		t->err = gdx_event_create(t->dev, 0, &ev);
	if (!t->err)
		t->err = gdx_pinned_alloc(t->dev, 1 << 20, (void **)&pin);
	if (!t->err)
		t->err = gdx_pinned_alloc(t->dev, sizeof(*word), (void **)&word);
	if (!t->err)
		t->err = gdx_event_record(ev, s);
	if (!t->err)
		t->err = gdx_stream_synchronize(s);
	while (!__atomic_load_n(t->go, __ATOMIC_ACQUIRE))
		sched_yield();
	end = gdx_now_ns() + 200000000ull;
	while (!t->err && gdx_now_ns() < end) {
		for (unsigned k = 0; k < 64 && !t->err; k++, n++) {
			size_t off = (size_t)(n % 256) * 4096;
			uint64_t t0 = gdx_now_ns();
			int rc;

			switch (t->op) {
			case DC_COPY:
				rc = gdx_memcpy_async(t->dev, t->dst + off, pin + off, 4096, s);
				break;
			case DC_STORE:
				rc = gdx_stream_write_value32(s, word, (uint32_t)n);
				break;
			case DC_RECORD:
				rc = gdx_event_record(ev, s);
				break;
			case DC_QUERY:
				rc = gdx_event_query(ev);
				break;
			default:
				rc = gdx_device_of_ptr(t->dst + off, &a) ? 0 : GDX_EBADPTR;
				break;
			}
			busy += gdx_now_ns() - t0;
			if (rc && rc != -EBUSY)
				t->err = rc;
			/* the stream is drained now and then, outside the time counted */
			if (n % 256 == 255 && !t->err)
				t->err = gdx_stream_synchronize(s);
		}
	}
	if (s)
		gdx_stream_synchronize(s);
	t->us = n ? (double)busy / (double)n / 1e3 : 0;
	if (ev)
		gdx_event_destroy(ev);
	if (s)
		gdx_stream_destroy(s);
	gdx_pinned_free(t->dev, word);
	gdx_pinned_free(t->dev, pin);
	return NULL;
}

/* Mean microseconds a call of kind op took with n threads calling; negative on error. */
static double dc_run(struct gdx_device *dev, char *dbuf, int op, unsigned n)
{
	struct dc_thread *t = calloc(n, sizeof(*t));
	pthread_t *th = calloc(n, sizeof(*th));
	unsigned started = 0;
	double sum = 0;
	int go = 0, err = 0;

	for (; t && th && started < n; started++) {
		t[started] = (struct dc_thread){ .dev = dev, .dst = dbuf + ((size_t)started << 20),
						 .op = op, .go = &go };
		if (pthread_create(&th[started], NULL, dc_main, &t[started]))
			break;
	}
	__atomic_store_n(&go, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(th[i], NULL);
		sum += t[i].us;
		err = err ? err : t[i].err;
	}
	free(t);
	free(th);
	return err || started < n ? -1 : sum / n;
}

static int dev_calls_report(const struct cfg *c, const char *mem, struct gdx_device *dev,
			    unsigned threads)
{
	void *dbuf;
	int rc = gdx_device_malloc(dev, (size_t)threads << 20, &dbuf);

	if (rc)
		return rc;
	for (int op = 0; op < DC_N; op++) {
		double one = dc_run(dev, dbuf, op, 1);
		double many = threads > 1 ? dc_run(dev, dbuf, op, threads) : one;

		if (one < 0 || many < 0) {
			/* a device without stream stores, say: the ring would not use it */
			if (!c->json)
				printf("# device call %-14s %s: failed\n", dc_names[op], mem);
			continue;
		}
		if (c->json)
			printf("{\"bench\": \"nvmf-host\", \"test\": \"dev-call\", \"mem\": \"%s\", "
			       "\"call\": \"%s\", \"threads\": %u, \"us\": %.3f, \"us_1thread\": %.3f, "
			       "\"ratio_1thread\": %.3f}\n", mem, dc_names[op], threads, many, one,
			       one > 0 ? many / one : 0);
		else
			printf("device call  %-14s %-7s %7.2f us with %u threads  | 1 thread %.2f us "
			       "-> %.2fx\n", dc_names[op], mem, many, threads, one,
			       one > 0 ? many / one : 0);
	}
	fflush(stdout);
	gdx_device_free(dev, dbuf);
	return 0;
}

/* ---- the TCP ceiling: raw loopback streams ------------------------------------ */

struct stream {
	int fd;
	size_t chunk;
	double secs;
	/* with a device: each chunk then copied into its memory by agent ring `ring` */
	struct gdx_device *dev;
	struct gdx_copy_agent *agent;
	unsigned ring;
	int err;		/* a device call failed: the figure is dropped */
	uint64_t bytes;
	uint64_t t0, t1;	/* first and last byte (with a device: the last copy landed) */
};

/* Chunks in flight between a device stream's socket and its copies. */
#define DEV_RING 8

static void *tcp_sender(void *arg)
{
	struct stream *s = arg;
	char *buf = calloc(1, 1 << 20);

	while (send(s->fd, buf, 1 << 20, MSG_NOSIGNAL) > 0)
		;
	free(buf);
	return NULL;
}

/* Waits until the copy agent's ring has done seq (a receiver's own ring). */
static int agent_wait(struct stream *s, uint32_t seq)
{
	const uint32_t *w = gdx_copy_agent_done_word(s->agent, s->ring);

	for (unsigned i = 1; (int32_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - seq) < 0; i++) {
		int rc;

		if (!(i % 256) && (rc = gdx_copy_agent_status(s->agent)))
			return rc;
		sched_yield();
	}
	return 0;
}

/*
 * The receiving end of a raw stream.  With a device, what a device read does
 * at least: each chunk received into a pinned ring of DEV_RING chunks and
 * handed from there to the copy agent (no driver call per chunk, as the
 * host's queues do), a slot reused once its copy landed.
 */
static void *tcp_receiver(void *arg)
{
	struct stream *s = arg;
	size_t nbuf = s->dev ? DEV_RING * s->chunk : s->chunk;
	uint32_t seq[DEV_RING] = { 0 };
	char *buf = NULL, *dbuf = NULL;
	uint64_t deadline = 0, k = 0;

	if (s->dev) {
		s->err = gdx_pinned_alloc(s->dev, nbuf, (void **)&buf);
		if (!s->err)
			s->err = gdx_device_malloc(s->dev, nbuf, (void **)&dbuf);
	} else {
		buf = malloc(nbuf);
		s->err = buf ? 0 : -ENOMEM;
	}
	while (!s->err) {
		unsigned slot = (unsigned)(k % DEV_RING);
		size_t o = s->dev ? slot * s->chunk : 0;
		ssize_t r;
		uint64_t now;

		if (s->dev && k >= DEV_RING)
			s->err = agent_wait(s, seq[slot]);
		r = s->err ? 0 : recv(s->fd, buf + o, s->chunk, MSG_WAITALL);
		now = gdx_now_ns();
		if (r <= 0)
			break;
		while (s->dev && (s->err = gdx_copy_agent_post(s->agent, s->ring, dbuf + o, buf + o,
							      (size_t)r, &seq[slot])) == -EAGAIN)
			sched_yield();
		k++;
		if (!deadline) {
			/* the clock starts at the first byte: setup is not the stream's cost */
			s->t0 = now;
			deadline = now + (uint64_t)(s->secs * 1e9);
			continue;
		}
		s->bytes += (uint64_t)r;
		s->t1 = now;
		if (now >= deadline)
			break;
	}
	if (s->dev) {
		if (k && !s->err) {
			s->err = agent_wait(s, seq[(k - 1) % DEV_RING]);
			s->t1 = gdx_now_ns();
		}
		if (dbuf)
			gdx_device_free(s->dev, dbuf);
		if (buf)
			gdx_pinned_free(s->dev, buf);
	} else {
		free(buf);
	}
	return NULL;
}

/*
 * Who made the TLS records, asked once the queues are up: the kernel where
 * it has the tls module (the connect loaded it if it could) unless
 * tls.record says user, else gdx (docs/security.md).
 */
static const char *tls_records(void)
{
	char mode[16] = "auto", ulp[256] = "";
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "re");
	char *w, *save = NULL;

	if (f) {
		if (!fgets(ulp, sizeof(ulp), f))
			ulp[0] = 0;
		fclose(f);
	}
	gdx_config_get("tls.record", mode, sizeof(mode));
	if (!strcmp(mode, "user"))
		return "records by gdx, tls.record=user";
	for (w = strtok_r(ulp, " \n", &save); w; w = strtok_r(NULL, " \n", &save))
		if (!strcmp(w, "tls"))
			return "kTLS";
	return "records by gdx: no kTLS";
}

/*
 * Streams raw TCP streams over loopback for secs: GB/s, or -1.  With dev,
 * each receiver also hands what it received to a copy agent of dev's, one
 * ring each, workers as nvmf.host.copy_agent says (the ceiling of a read
 * into device memory through host memory).
 */
static double tcp_ceiling(unsigned streams, size_t chunk, double secs, struct gdx_device *dev)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct stream *rx = calloc(streams, sizeof(*rx)), *tx = calloc(streams, sizeof(*tx));
	pthread_t *t = calloc(2 * streams, sizeof(*t));
	uint64_t t0 = UINT64_MAX, t1 = 0, total = 0;
	struct gdx_copy_agent *agent = NULL;
	bool failed = false;
	double gbps = -1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 64) ||
	    getsockname(lfd, (struct sockaddr *)&a, &al))
		goto out;
	for (unsigned i = 0; i < streams; i++) {
		int one = 1;

		rx[i].fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(rx[i].fd, (struct sockaddr *)&a, sizeof(a)))
			goto out;
		tx[i].fd = accept(lfd, NULL, NULL);
		setsockopt(rx[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		rx[i].chunk = chunk;
		rx[i].secs = secs;
		rx[i].dev = dev;
		rx[i].ring = i;
	}
	if (dev) {
		struct gdx_copy_agent_opts o;
		int rc;

		gdx_copy_agent_opts_init(&o, sizeof(o));
		o.rings = streams;
		o.workers = GDX_MIN(streams, (unsigned)GDX_MAX(1, gdx_cfg_int("nvmf.host.copy_agent")));
		o.entries = 64;
		rc = gdx_copy_agent_start(dev, &o, &agent);
		if (rc) {
			fprintf(stderr, "gdx bench nvmf-host: TCP ceiling into device memory: copy "
				"agent: %s\n", gdx_strerror(rc));
			goto out;
		}
		for (unsigned i = 0; i < streams; i++)
			rx[i].agent = agent;
	}
	for (unsigned i = 0; i < streams; i++) {
		pthread_create(&t[2 * i], NULL, tcp_sender, &tx[i]);
		pthread_create(&t[2 * i + 1], NULL, tcp_receiver, &rx[i]);
	}
	for (unsigned i = 0; i < streams; i++) {
		pthread_join(t[2 * i + 1], NULL);
		shutdown(tx[i].fd, SHUT_RDWR);
		shutdown(rx[i].fd, SHUT_RDWR);
		pthread_join(t[2 * i], NULL);
		if (rx[i].err && !failed)
			fprintf(stderr, "gdx bench nvmf-host: TCP ceiling into device memory: %s\n",
				gdx_strerror(rx[i].err));
		failed |= rx[i].err != 0;
		total += rx[i].bytes;
		if (rx[i].bytes) {
			t0 = GDX_MIN(t0, rx[i].t0);
			t1 = GDX_MAX(t1, rx[i].t1);
		}
	}
	if (t1 > t0 && !failed)
		gbps = (double)total / ((double)(t1 - t0) / 1e9) / 1e9;
out:
	for (unsigned i = 0; i < streams; i++) {
		if (rx[i].fd > 0)
			close(rx[i].fd);
		if (tx[i].fd > 0)
			close(tx[i].fd);
	}
	if (lfd >= 0)
		close(lfd);
	if (agent)
		gdx_copy_agent_stop(agent);
	free(rx);
	free(tx);
	free(t);
	return gbps;
}

/* ---- the kernel host: fio on its block device ------------------------------- */

static double fio_run(const char *dev, bool write, uint64_t bs, unsigned qd, double secs,
		      double *gbps)
{
	char cmd[512], *out = NULL;
	size_t len = 0;
	FILE *p, *mem;
	json_object *root, *jobs, *dir, *v;
	double iops = -1;

	snprintf(cmd, sizeof(cmd), "fio --name=k --filename=%s --direct=1 --ioengine=libaio "
		 "--rw=rand%s --bs=%" PRIu64 " --iodepth=%u --runtime=%.1f --ramp_time=0.2 "
		 "--time_based --norandommap --output-format=json 2>/dev/null", dev,
		 write ? "write" : "read", bs, qd, secs);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	mem = open_memstream(&out, &len);
	for (int ch; (ch = fgetc(p)) != EOF;)
		fputc(ch, mem);
	fclose(mem);
	if (pclose(p) != 0) {
		free(out);
		return -1;
	}
	root = json_tokener_parse(strchr(out, '{') ? strchr(out, '{') : out);
	if (root && json_object_object_get_ex(root, "jobs", &jobs) &&
	    json_object_array_length(jobs) > 0 &&
	    json_object_object_get_ex(json_object_array_get_idx(jobs, 0), write ? "write" : "read",
				      &dir)) {
		if (json_object_object_get_ex(dir, "iops", &v))
			iops = json_object_get_double(v);
		if (json_object_object_get_ex(dir, "bw_bytes", &v))
			*gbps = json_object_get_double(v) / 1e9;
	}
	json_object_put(root);
	free(out);
	return iops;
}

/* ---- driver ------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gdx bench nvmf-host -a ADDR -s PORT -n NQN [options]\n"
		"  -N, --nsid N        namespace (default 1)\n"
		"  -m, --mem LIST      memory kinds, comma separated: host,pinned,gpu:N (default host);\n"
		"                      KIND+OFF puts the buffers OFF bytes (0-4095) into their\n"
		"                      allocation, as a tensor's slice (gpu:0+2)\n"
		"  -t, --time S        seconds per measurement (default 3)\n"
		"  -r, --rounds N      measurements per point, alternating kernel and gdx; medians\n"
		"                      are reported (default 3)\n"
		"      --qd LIST       4 KiB random-read depths (default 1,32,128); none: only\n"
		"                      the bandwidth test (one job to profile)\n"
		"      --bw-bs BYTES   bandwidth test read size (default 128k)\n"
		"      --bw-qd N       bandwidth test depth (default 32)\n"
		"      --bw-write      the bandwidth test writes (destroys the namespace's data)\n"
		"      --queues N      I/O queues   --depth N   entries per queue\n"
		"      --hdr-digest    --data-digest\n"
		"      --tls-key KEY   TLS 1.3 with this PSK (NVMeTLSkey-1:..., or a file of it)\n"
		"      --fio-dev DEV   also run fio on DEV (the kernel host's block device)\n"
		"      --no-tcp        skip the loopback TCP ceilings (streams, and the\n"
		"                      request/response a 4 KiB read at depth 1 is judged by)\n"
		"      --transport T   tcp (default) or rdma (no TCP ceilings then)\n"
		"      --dev-calls     first price the device calls of a device read, with as\n"
		"                      many threads calling as I/O queues, against one thread\n"
		"      --json          one JSON object per line\n");
}

static int parse_list(const char *s, unsigned *v, unsigned max)
{
	unsigned n = 0;

	for (const char *p = s; *p && n < max;) {
		char *end;
		unsigned long x = strtoul(p, &end, 10);

		if (end == p || !x || x > 4096)
			return -1;
		v[n++] = (unsigned)x;
		p = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return (int)n;
}

static double median(const double *v, unsigned n)
{
	double t[16];

	memcpy(t, v, n * sizeof(*v));
	bench_sort(t, n);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

struct ref {
	const char *name;
	double val;
};

/*
 * Device runtime calls the bounce ring made, summed over the I/O queues, from
 * gdx_nvmf_ctrl_stats_json: what each device-memory read cost besides the socket.
 */
static const char *const call_names[] = { "cmds", "h2d_copies", "copy_calls", "event_records",
					  "dev_queries", "dev_waits",
					  /* counted per command, not a device call */
					  "ring_full",
					  /* reads timed, then nanoseconds per stage, summed */
					  "lat_reads", "lat_sent_ns", "lat_data_ns", "lat_post_ns",
					  "lat_land_ns", "lat_queue_ns", "lat_cb_ns",
					  /* completions: one or several reads together */
					  "lat_releases" };
#define NCALLS 6u
#define NRING_FULL 6u
#define NLAT0 7u
#define NLAT_REL 14u
#define NCOUNT GDX_ARRAY_SIZE(call_names)
/* the stages' names in the report: submit->sent->data->post->land->queue->cb */
static const char *const lat_names[] = { "sent", "data", "post", "land", "queue", "cb" };

static void dev_calls(struct gdx_nvmf_ctrl *ctrl, uint64_t v[NCOUNT])
{
	char buf[32768];
	struct json_object *root, *qs;

	memset(v, 0, NCOUNT * sizeof(*v));
	if (gdx_nvmf_ctrl_stats_json(ctrl, buf, sizeof(buf)) < 0)
		return;
	root = json_tokener_parse(buf);
	if (root && json_object_object_get_ex(root, "queues", &qs)) {
		/* queue 0 is the admin queue: its Keep Alives are no reads */
		for (size_t i = 1; i < json_object_array_length(qs); i++) {
			struct json_object *q = json_object_array_get_idx(qs, i), *x;

			for (unsigned k = 0; k < NCOUNT; k++)
				if (json_object_object_get_ex(q, call_names[k], &x))
					v[k] += (uint64_t)json_object_get_int64(x);
		}
	}
	json_object_put(root);
}

static unsigned invalid;	/* results above their ceilings */

/*
 * One line: a result, the path its reads took (NULL: the kernel's) and why
 * they bounced where the host said (NULL: it did not), then each reference it
 * is judged against, with the ratio.
 */
static void report(const struct cfg *c, const char *mem, const char *what, unsigned qd,
		   double iops, double gbps, const char *path, const char *why, bool by_gbps,
		   const struct ref *refs, unsigned nrefs, const uint64_t *calls)
{
	double val = by_gbps ? gbps : iops;
	/* per command, where the ring was used (calls[1]: copies) */
	bool per = calls && calls[0] && calls[1];
	/* reads the queues timed: mean microseconds per stage */
	uint64_t nlat = calls ? calls[NLAT0] : 0;
	/* a 4 KiB read at depth 1 against the raw request/response (ceiling / result) */
	bool rr = c->rr_us > 0 && qd == 1 && !by_gbps && iops > 0;
	double lat = rr ? 1e6 / iops : 0;
	bool rr_bad = rr && bench_invalid(c->rr_us / lat);

	invalid += rr_bad;

	if (c->json) {
		printf("{\"bench\": \"nvmf-host\", \"test\": \"%s\", \"mem\": \"%s\", \"qd\": %u, "
		       "\"iops\": %.0f, \"gbps\": %.4f, \"rounds\": %u", what, mem, qd, iops, gbps,
		       c->rounds);
		if (path)
			printf(", \"transport\": \"%s\", \"path\": \"%s\"",
			       c->o.transport ? c->o.transport : "tcp", path);
		if (why) {
			json_object *w = json_object_new_string(why);

			printf(", \"path_why\": %s", w ? json_object_to_json_string_ext(
				w, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE) : "\"\"");
			json_object_put(w);
		}
		for (unsigned i = 0; i < nrefs; i++)
			if (refs[i].val > 0)
				printf(", \"%s\": %.4f, \"ratio_%s\": %.3f", refs[i].name, refs[i].val,
				       refs[i].name, val / refs[i].val);
		if (rr)
			printf(", \"lat_us\": %.2f, \"tcp_rr_us\": %.2f, \"ratio_tcp_rr\": %.3f, "
			       "\"valid\": %s", lat, c->rr_us, c->rr_us / lat, rr_bad ? "false" : "true");
		for (unsigned k = 1; per && k < NCALLS; k++)
			printf(", \"%s_per_cmd\": %.3f", call_names[k],
			       (double)calls[k] / (double)calls[0]);
		if (per)
			printf(", \"ring_full_per_cmd\": %.3f",
			       (double)calls[NRING_FULL] / (double)calls[0]);
		if (nlat) {
			double sum = 0;

			printf(", \"lat_reads\": %" PRIu64, nlat);
			for (unsigned k = 0; k < GDX_ARRAY_SIZE(lat_names); k++) {
				double us = (double)calls[NLAT0 + 1 + k] / (double)nlat / 1e3;

				printf(", \"lat_%s_us\": %.2f", lat_names[k], us);
				/* the callback runs after the read completed */
				if (strcmp(lat_names[k], "cb"))
					sum += us;
			}
			/* against depth / IOPS (Little): what the stages leave out */
			printf(", \"lat_total_us\": %.2f, \"lat_little_us\": %.2f", sum,
			       iops > 0 ? (double)qd / iops * 1e6 : 0);
			if (calls[NLAT_REL])
				printf(", \"reads_per_release\": %.2f",
				       (double)nlat / (double)calls[NLAT_REL]);
		}
		printf("}\n");
		fflush(stdout);
		return;
	}
	printf("%-12s %-7s qd %-4u %9.0f IOPS %8.3f GB/s", what, mem, qd, iops, gbps);
	if (path)
		printf("  %-6s", path);
	for (unsigned i = 0; i < nrefs; i++)
		if (refs[i].val > 0)
			printf("  | %s %.*f -> %.2fx", refs[i].name, by_gbps ? 3 : 0, refs[i].val,
			       val / refs[i].val);
	if (per)
		printf("  | per cmd: copy %.2f in %.2f calls, rec %.2f query %.2f wait %.2f",
		       (double)calls[1] / (double)calls[0], (double)calls[2] / (double)calls[0],
		       (double)calls[3] / (double)calls[0], (double)calls[4] / (double)calls[0],
		       (double)calls[5] / (double)calls[0]);
	if (per && calls[NRING_FULL])
		printf(" ring-full %.2f", (double)calls[NRING_FULL] / (double)calls[0]);
	if (rr) {
		printf("  | lat %.1f us, tcp_rr %.1f us -> %.2fx%s%s", lat, c->rr_us, c->rr_us / lat,
		       rr_bad ? "  " : "", rr_bad ? BENCH_INVALID : "");
	}
	if (nlat) {
		printf("  | us:");
		for (unsigned k = 0; k < GDX_ARRAY_SIZE(lat_names); k++)
			printf(" %s %.1f", lat_names[k],
			       (double)calls[NLAT0 + 1 + k] / (double)nlat / 1e3);
		if (iops > 0)
			printf(" (qd/IOPS %.1f)", (double)qd / iops * 1e6);
		if (calls[NLAT_REL])
			printf(", %.2f reads per release", (double)nlat / (double)calls[NLAT_REL]);
	}
	printf("\n");
	fflush(stdout);
}

struct memctx {
	const char *name;
	int kind;		/* 0 host, 1 pinned, 2 device */
	struct gdx_device *dev;
	void *alloc, *buf;	/* buf: the I/O buffers, off bytes into alloc */
	size_t off;
	struct gdx_nvmf_ctrl *ctrl;
	/* over RDMA into device memory: the NIC, and why it did not register it */
	char nic[64], why[256];
	bool nic_refused;
};

/*
 * Whether the NIC registers m's device memory, as the controller's first I/O
 * queue found (gdx_nvmf_ctrl_stats_json; nothing over TCP or without a device).
 */
static void rdma_device_reg(struct memctx *m)
{
	char buf[32768];
	json_object *root, *v;

	if (gdx_nvmf_ctrl_stats_json(m->ctrl, buf, sizeof(buf)) < 0)
		return;
	root = json_tokener_parse(buf);
	if (root && json_object_object_get_ex(root, "rdma_nic", &v)) {
		snprintf(m->nic, sizeof(m->nic), "%s", json_object_get_string(v));
		if (json_object_object_get_ex(root, "rdma_device_reg", &v))
			m->nic_refused = !json_object_get_boolean(v);
		if (m->nic_refused && json_object_object_get_ex(root, "rdma_why", &v))
			snprintf(m->why, sizeof(m->why), "%s", json_object_get_string(v));
	}
	json_object_put(root);
}

static void mem_close(struct memctx *m)
{
	if (m->ctrl)
		gdx_nvmf_disconnect(m->ctrl);
	if (m->alloc) {
		if (m->kind == 0)
			free(m->alloc);
		else if (m->kind == 1)
			gdx_pinned_free(m->dev, m->alloc);
		else
			gdx_device_free(m->dev, m->alloc);
	}
	if (m->dev)
		gdx_device_close(m->dev);
}

/*
 * A --mem entry: host, pinned or gpu:N, then +OFF (0-4095) for buffers that
 * start OFF bytes into their allocation.  Returns the kind (0 host, 1 pinned,
 * 2 device), or -1.
 */
static int mem_kind(const char *name, size_t *off)
{
	size_t kl;
	char *end;
	int kind = -1;

	if (bench_mem_offset(name, &kl, off))
		return -1;
	if (kl == 4 && !strncmp(name, "host", 4))
		kind = 0;
	else if (kl == 6 && !strncmp(name, "pinned", 6))
		kind = 1;
	else if (kl > 4 && !strncmp(name, "gpu:", 4) && name[4] >= '0' && name[4] <= '9' &&
		 strtoul(name + 4, &end, 10) < 64 && end == name + kl)
		kind = 2;
	return kind;
}

static int mem_open(struct cfg *c, struct memctx *m, size_t need)
{
	int rc = 0;

	m->kind = mem_kind(m->name, &m->off);
	if (m->kind < 0)
		return -EINVAL;
	need += m->off;
	if (m->kind == 1)
		rc = gdx_device_open(NULL, &m->dev);
	else if (m->kind == 2)
		rc = c->open_gpu(atoi(m->name + 4), &m->dev);
	if (!rc && m->kind == 0) {
		m->alloc = aligned_alloc(4096, (need + 4095) / 4096 * 4096);
		rc = m->alloc ? 0 : -ENOMEM;
	} else if (!rc) {
		rc = m->kind == 1 ? gdx_pinned_alloc(m->dev, need, &m->alloc)
				  : gdx_device_malloc(m->dev, need, &m->alloc);
	}
	if (!rc)
		m->buf = (char *)m->alloc + m->off;
	c->o.dev = m->dev;
	if (!rc)
		rc = gdx_nvmf_connect(c->addr, c->svc, c->nqn, &c->o, &m->ctrl);
	if (!rc && m->kind == 2)
		rdma_device_reg(m);
	return rc;
}

int gdx_bench_nvmf_host(int argc, char **argv, int (*open_gpu)(int, struct gdx_device **))
{
	static const struct option lo[] = {
		{ "traddr", required_argument, NULL, 'a' },
		{ "trsvcid", required_argument, NULL, 's' },
		{ "nqn", required_argument, NULL, 'n' },
		{ "nsid", required_argument, NULL, 'N' },
		{ "mem", required_argument, NULL, 'm' },
		{ "time", required_argument, NULL, 't' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "qd", required_argument, NULL, 'q' },
		{ "bw-bs", required_argument, NULL, 'b' },
		{ "bw-qd", required_argument, NULL, 'B' },
		{ "bw-write", no_argument, NULL, 'W' },
		{ "queues", required_argument, NULL, 'Q' },
		{ "depth", required_argument, NULL, 'D' },
		{ "hdr-digest", no_argument, NULL, 'H' },
		{ "data-digest", no_argument, NULL, 'G' },
		{ "tls-key", required_argument, NULL, 'K' },
		{ "fio-dev", required_argument, NULL, 'F' },
		{ "no-tcp", no_argument, NULL, 'T' },
		{ "transport", required_argument, NULL, 'R' },
		{ "dev-calls", no_argument, NULL, 'C' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct cfg c = { .svc = "4420", .nsid = 1, .secs = 3, .qds = { 1, 32, 128 }, .nqd = 3,
			 .bw_bs = 128 << 10, .bw_qd = 32, .nmem = 0, .tcp_ceiling = true,
			 .rounds = 3, .open_gpu = open_gpu };
	struct memctx mems[8] = { 0 };
	struct gdx_nvmf_ns_info ns;
	struct gdx_nvmf_ctrl_info in;
	double tcp = 0, tcp_h2d[8] = { 0 };
	size_t need;
	int opt, rc = 0;

	gdx_nvmf_host_opts_init(&c.o, sizeof(c.o));
	optind = 1;
	while ((opt = getopt_long(argc, argv, "a:s:n:N:m:t:r:h", lo, NULL)) != -1) {
		int n;

		switch (opt) {
		case 'a': c.addr = optarg; break;
		case 's': c.svc = optarg; break;
		case 'n': c.nqn = optarg; break;
		case 'N': c.nsid = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 't': c.secs = atof(optarg); break;
		case 'r': c.rounds = (unsigned)atoi(optarg); break;
		case 'F': c.fio_dev = optarg; break;
		case 'T': c.tcp_ceiling = false; break;
		case 'R':
			if (strcmp(optarg, "tcp") && strcmp(optarg, "rdma")) {
				fprintf(stderr, "gdx bench nvmf-host: --transport '%s': tcp or rdma\n",
					optarg);
				return 2;
			}
			c.o.transport = optarg;
			break;
		case 'C': c.dev_calls = true; break;
		case 'j': c.json = true; break;
		case 'H': c.o.hdr_digest = 1; break;
		case 'G': c.o.data_digest = 1; break;
		case 'K': c.o.tls_key = optarg; break;
		case 'Q': c.o.nr_io_queues = (unsigned)atoi(optarg); break;
		case 'D': c.o.queue_depth = (unsigned)atoi(optarg); break;
		case 'B': c.bw_qd = (unsigned)atoi(optarg); break;
		case 'W': c.bw_write = true; break;
		case 'b':
			if (gdx_parse_size(optarg, &c.bw_bs) || !c.bw_bs) {
				usage(stderr);
				return 2;
			}
			break;
		case 'q':
			n = strcmp(optarg, "none") ? parse_list(optarg, c.qds, 8) : 0;
			if (n < 0 || (!n && strcmp(optarg, "none"))) {
				usage(stderr);
				return 2;
			}
			c.nqd = (unsigned)n;
			break;
		case 'm':
			for (char *tok = strtok(optarg, ","); tok && c.nmem < 8; tok = strtok(NULL, ",")) {
				size_t off;

				if (mem_kind(tok, &off) < 0) {
					fprintf(stderr, "gdx bench nvmf-host: --mem '%s': want host, "
						"pinned or gpu:N, each with an optional +OFF of 0 to "
						"4095\n", tok);
					return 2;
				}
				snprintf(c.mems[c.nmem++], sizeof(c.mems[0]), "%s", tok);
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!c.addr || !c.nqn || c.secs <= 0 || !c.bw_qd || !c.rounds || c.rounds > 16) {
		usage(stderr);
		return 2;
	}
	/* loopback TCP says nothing about what an RDMA NIC can do */
	if (c.o.transport && !strcmp(c.o.transport, "rdma"))
		c.tcp_ceiling = false;
	if (!c.nmem)
		snprintf(c.mems[c.nmem++], sizeof(c.mems[0]), "host");
	need = GDX_MAX((size_t)c.bw_bs * c.bw_qd, (size_t)4096 * 4096);
	for (unsigned m = 0; m < c.nmem; m++) {
		mems[m].name = c.mems[m];
		rc = mem_open(&c, &mems[m], need);
		if (rc) {
			fprintf(stderr, "gdx bench nvmf-host: %s: %s\n", mems[m].name, gdx_strerror(rc));
			goto out;
		}
	}
	rc = gdx_nvmf_identify_ns(mems[0].ctrl, c.nsid, &ns);
	if (rc) {
		fprintf(stderr, "gdx bench nvmf-host: namespace %u: %s\n", c.nsid, gdx_strerror(rc));
		goto out;
	}
	gdx_nvmf_ctrl_info(mems[0].ctrl, &in);
	if (!c.json)
		printf("# %s at %s:%s (%s) nsid %u: %" PRIu64 " MiB, %u-byte blocks; %u I/O queues x "
		       "%u, max_xfer %u%s%s%s%s%s; %u x %.1f s per point, medians\n", c.nqn, c.addr,
		       c.svc, c.o.transport ? c.o.transport : "tcp", c.nsid,
		       ns.nsze * ns.block_size >> 20, ns.block_size, in.nr_io_queues,
		       in.queue_depth, in.max_xfer, in.hdr_digest ? ", hdgst" : "",
		       in.data_digest ? ", ddgst" : "", c.o.tls_key ? ", TLS 1.3 (" : "",
		       c.o.tls_key ? tls_records() : "", c.o.tls_key ? ")" : "", c.rounds, c.secs);
	for (unsigned m = 0; !c.json && m < c.nmem; m++)
		if (mems[m].nic[0])
			printf("# %s: %s %s%s\n", mems[m].name, mems[m].nic,
			       mems[m].nic_refused ? "does not register its memory: " :
			       "registers its memory", mems[m].why);
	if (c.tcp_ceiling) {
		/* one stream, and one per I/O queue: the better is the ceiling */
		double secs = GDX_MAX(1.0, GDX_MIN(c.secs, 2.0));
		double one = tcp_ceiling(1, c.bw_bs, secs, NULL);
		double many = in.nr_io_queues > 1 ? tcp_ceiling(in.nr_io_queues, c.bw_bs, secs, NULL)
						  : one;

		tcp = GDX_MAX(one, many);
		/* a ceiling that failed (stderr said why) is left out of the ratios (refs) */
		if (!c.json && tcp < 0)
			printf("# loopback TCP ceiling: not measured\n");
		else if (!c.json)
			printf("# loopback TCP ceiling: %.3f GB/s (1 stream %.3f, %u streams %.3f), %"
			       PRIu64 "-byte receives\n", tcp, one, in.nr_io_queues, many, c.bw_bs);
		/* into device memory also through a pinned ring and the device's copies */
		for (unsigned m = 0; m < c.nmem; m++) {
			if (mems[m].kind != 2)
				continue;
			one = tcp_ceiling(1, c.bw_bs, secs, mems[m].dev);
			many = in.nr_io_queues > 1 ?
				tcp_ceiling(in.nr_io_queues, c.bw_bs, secs, mems[m].dev) : one;
			tcp_h2d[m] = GDX_MAX(one, many);
			if (!c.json && tcp_h2d[m] < 0)
				printf("# loopback TCP + copy into %s: not measured\n", mems[m].name);
			else if (!c.json)
				printf("# loopback TCP + copy into %s: %.3f GB/s (1 stream %.3f, %u "
				       "streams %.3f)\n", mems[m].name, tcp_h2d[m], one,
				       in.nr_io_queues, many);
		}
	}
	for (unsigned p = 0; c.tcp_ceiling && p < c.nqd; p++) {
		double secs = GDX_MAX(1.0, GDX_MIN(c.secs, 2.0));
		size_t hd = in.hdr_digest ? 4 : 0, dd = in.data_digest ? 4 : 0;

		if (c.qds[p] != 1)
			continue;
		c.rr_us = bench_tcp_rr(72 + hd, 24 + hd + 4096 + dd, secs);
		if (c.rr_us < 0)
			c.rr_us = 0;
		else if (!c.json)
			printf("# loopback TCP request/response: %.2f us (%zu bytes out, %zu back, "
			       "one thread each end)\n", c.rr_us, 72 + hd, 24 + hd + 4096 + dd);
		break;
	}
	for (unsigned m = 0; c.dev_calls && m < c.nmem; m++) {
		if (mems[m].kind != 2)
			continue;
		rc = dev_calls_report(&c, mems[m].name, mems[m].dev, GDX_MAX(1u, in.nr_io_queues));
		if (rc) {
			fprintf(stderr, "gdx bench nvmf-host: %s: device calls: %s\n", mems[m].name,
				gdx_strerror(rc));
			goto out;
		}
	}
	/* every point: kernel and each memory kind measured in turn, rounds times */
	for (unsigned p = 0; p <= c.nqd; p++) {
		bool bw = p == c.nqd;
		unsigned qd = bw ? c.bw_qd : c.qds[p];
		uint32_t bs = bw ? (uint32_t)c.bw_bs : 4096;
		bool write = bw && c.bw_write;
		const char *what = !bw ? "4k-randread" : write ? "bw-randwrite" : "bw-randread";
		double kio[16], kgb[16], gio[8][16], ggb[8][16], kiops = 0, kgbps = 0;
		uint64_t calls[8][NCOUNT], after[NCOUNT], reads[8][2] = { { 0 } };

		for (unsigned m = 0; m < c.nmem; m++)
			dev_calls(mems[m].ctrl, calls[m]);
		for (unsigned r = 0; r < c.rounds; r++) {
			if (c.fio_dev) {
				kgb[r] = 0;
				kio[r] = fio_run(c.fio_dev, write, bs, qd, c.secs, &kgb[r]);
				if (kio[r] < 0) {
					fprintf(stderr, "gdx bench nvmf-host: fio on %s failed\n",
						c.fio_dev);
					rc = -EIO;
					goto out;
				}
			}
			for (unsigned m = 0; m < c.nmem; m++) {
				int err = 0;

				gio[m][r] = gdx_run(mems[m].ctrl, c.nsid, ns.nsze * ns.block_size,
						    mems[m].buf,
						    write ? GDX_NVMF_OP_WRITE : GDX_NVMF_OP_READ, bs,
						    qd, c.secs, &ggb[m][r], reads[m], &err);
				if (gio[m][r] < 0) {
					fprintf(stderr, "gdx bench nvmf-host: %s %s qd %u: %s",
						mems[m].name, what, qd, gdx_strerror(err));
					/* a bounce refused: the NIC's answer is the reason */
					if (err == GDX_ENOTDIRECT && mems[m].why[0])
						fprintf(stderr, " (%s: %s)", mems[m].nic, mems[m].why);
					fputc('\n', stderr);
					rc = err;
					goto out;
				}
			}
		}
		if (c.fio_dev) {
			kiops = median(kio, c.rounds);
			kgbps = median(kgb, c.rounds);
			report(&c, "kernel", what, qd, kiops, kgbps, NULL, NULL, bw, NULL, 0, NULL);
		}
		for (unsigned m = 0; m < c.nmem; m++) {
			double iops = median(gio[m], c.rounds), gbps = median(ggb[m], c.rounds);
			/* one path for all the point's reads; "mixed" would be a host bug */
			const char *path = !reads[m][1] ? "direct" :
					   reads[m][1] == reads[m][0] ? "bounce" : "mixed";
			struct ref refs[4] = {
				{ "kernel", bw ? kgbps : kiops },
				{ mems[0].name, m ? (bw ? median(ggb[0], c.rounds)
						      : median(gio[0], c.rounds)) : 0 },
				{ "tcp_ceiling", bw ? tcp : 0 },
				{ "tcp_h2d_ceiling", bw ? tcp_h2d[m] : 0 },
			};

			dev_calls(mems[m].ctrl, after);
			for (unsigned k = 0; k < NCOUNT; k++)
				calls[m][k] = after[k] - calls[m][k];
			report(&c, mems[m].name, what, qd, iops, gbps, path,
			       reads[m][1] && mems[m].why[0] ? mems[m].why : NULL, bw, refs, 4,
			       calls[m]);
		}
	}
out:
	for (unsigned m = 0; m < c.nmem; m++)
		mem_close(&mems[m]);
	if (invalid)
		fprintf(stderr, "gdx bench nvmf-host: %u result(s) %s\n", invalid, BENCH_INVALID);
	return rc ? 1 : 0;
}
