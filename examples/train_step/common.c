/* SPDX-License-Identifier: MIT */
/* The training-step example: everything but the compute provider. */
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <gdx/file.h>
#include <gdx/nvmf.h>
#include <gdx/xport.h>

#include "train_step.h"

#define NSTAGES 4
enum { ST_LOAD, ST_COMPUTE, ST_D2H, ST_SEND };
static const char *const stage_names[NSTAGES] = { "load", "compute", "d2h", "send" };

struct ts_opts {
	const char *device;
	const char *data;
	const char *send;	/* "tcp", "xport:ADDR", "file:PATH", "none" */
	const char *load;	/* "file", "nvmf" */
	size_t in_bytes, out_bytes;
	uint64_t data_bytes;
	unsigned batches, slots, ahead, verify_every, warmup;
	unsigned read_ahead;	/* batches the file source reads ahead; -1: the slots */
	unsigned time_every;	/* the pipeline's timing: every Nth batch timed */
	unsigned stall_ms;	/* no batch completed for this long: report and exit; 0: off */
	double load_us, compute_us, send_us, spin_us;
	bool serial, load_in_order;
};

struct peer {
	int lfd;
	bool running;
	pthread_t thread;
	const struct ts_ctx *c;
	uint64_t received, verified, mismatches;
	int err;
	/* --send xport */
	struct gdx_xport_listener *xl;
	struct gdx_xport_cq *xcq;
	_Atomic uint64_t expect;	/* results to wait for, once the sender knows */
};

struct ts_result {
	struct gdx_pipeline_stage_stats st[NSTAGES];	/* by ST_*; zero where absent */
	struct gdx_pipeline_stats ps;
	/* The load's storage reads on the file workers (file source only: have_reads). */
	struct gdx_file_async_stats reads;
	bool have_reads;
	uint64_t submit_ns;	/* wall time of the submit loop */
	uint64_t enq_ns[NSTAGES];	/* host time in the stages' enqueue callbacks */
	uint64_t verified, mismatches;
	int err;
	char errtext[320];
	const char *send_path;	/* --send xport: the path the last send took */
};

struct ts_ctx {
	struct ts_opts o;
	const struct ts_provider *prov;
	struct gdx_device *dev;
	struct gdx_file_driver *drv;
	struct gdx_file *data;
	struct gdx_file *sink;	/* --send file:PATH */
	uint64_t wrap;
	struct ts_slot slots[GDX_PIPELINE_MAX_SLOTS];
	unsigned nslots;
	/* The load stage's source: the data set file, or it as an NVMe-oF namespace. */
	struct gdx_pipeline_source file_src;
	struct gdx_nvmf_target *tgt;	/* --load nvmf: serves the data set on loopback */
	struct gdx_nvmf_ctrl *ctrl;
	/*
	 * Pipeline index of each ST_* stage, -1 where absent: --send none has no
	 * send stage (the pipeline ends on the device); --send xport sends
	 * straight from device memory, with no d2h stage.
	 */
	int stage_idx[NSTAGES];
	struct gdx_xport_cq *xcq;	/* --send xport */
	struct gdx_xport_ep *xep;
	enum gdx_xport_path xpath;
	int sock;		/* --send tcp */
	uint64_t sent;
	/* Host time in each device stage's enqueue callback (the producer's thread). */
	uint64_t enq_ns[NSTAGES];
};

/* ---- helpers for providers ---------------------------------------------------- */

struct gdx_device *ts_device(struct ts_ctx *c)
{
	return c->dev;
}

size_t ts_in_bytes(struct ts_ctx *c)
{
	return c->o.in_bytes;
}

size_t ts_out_bytes(struct ts_ctx *c)
{
	return c->o.out_bytes;
}

double ts_compute_us(struct ts_ctx *c)
{
	return c->o.compute_us;
}

uint64_t ts_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ts_wait_until(struct ts_ctx *c, uint64_t t_ns)
{
	static __thread bool slack_set;
	uint64_t spin_ns = (uint64_t)(c->o.spin_us * 1e3), now = ts_now_ns();

	if (!slack_set) {
		/* The default 50 us of timer slack would swamp short stages. */
		prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
		slack_set = true;
	}
	if (now + spin_ns < t_ns) {
		uint64_t until = t_ns - spin_ns;
		struct timespec ts = { .tv_sec = (time_t)(until / 1000000000ull),
				       .tv_nsec = (long)(until % 1000000000ull) };

		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
	while (ts_now_ns() < t_ns)
		;
}

/* Word w of the data set; the peer regenerates batches from it. */
static uint32_t data_word(uint64_t w)
{
	uint64_t z = w + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)(z ^ (z >> 31));
}

void ts_reference(const uint32_t *in, size_t in_words, uint32_t *out, size_t out_words,
		  uint64_t batch)
{
	size_t k = in_words / out_words;

	for (size_t j = 0; j < out_words; j++) {
		uint32_t acc = (uint32_t)batch;

		for (size_t i = 0; i < k; i++)
			acc += in[j * k + i] * (uint32_t)(i + 1);
		out[j] = acc;
	}
}

static uint64_t batch_offset(const struct ts_ctx *c, uint64_t b)
{
	return (b * c->o.in_bytes) % c->wrap;
}

/* Compares a batch's result with the reference; returns true when equal. */
static bool check_batch(const struct ts_ctx *c, uint64_t b, const uint32_t *got)
{
	size_t in_words = c->o.in_bytes / 4, out_words = c->o.out_bytes / 4;
	uint32_t *in = malloc(c->o.in_bytes), *want = malloc(c->o.out_bytes);
	uint64_t w0 = batch_offset(c, b) / 4;
	bool ok;

	if (!in || !want) {
		free(in);
		free(want);
		return false;
	}
	for (size_t i = 0; i < in_words; i++)
		in[i] = data_word(w0 + i);
	ts_reference(in, in_words, want, out_words, b);
	ok = !memcmp(got, want, c->o.out_bytes);
	free(in);
	free(want);
	return ok;
}

/* ---- data set ------------------------------------------------------------------ */

static int make_data(const struct ts_opts *o)
{
	const size_t chunk = 1 << 20;
	struct stat sb;
	uint32_t probe[2];
	uint32_t *buf;
	int fd, ret = 0;

	fd = open(o->data, O_RDWR | O_CREAT, 0644);
	if (fd < 0) {
		fprintf(stderr, "train_step: %s: %s\n", o->data, strerror(errno));
		return -errno;
	}
	/* Reuse a file of the right size whose first and last words match. */
	if (!fstat(fd, &sb) && (uint64_t)sb.st_size == o->data_bytes &&
	    pread(fd, &probe[0], 4, 0) == 4 &&
	    pread(fd, &probe[1], 4, (off_t)o->data_bytes - 4) == 4 &&
	    probe[0] == data_word(0) && probe[1] == data_word(o->data_bytes / 4 - 1)) {
		close(fd);
		return 0;
	}
	buf = malloc(chunk);
	if (!buf || ftruncate(fd, 0)) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t off = 0; off < o->data_bytes; off += chunk) {
		size_t n = o->data_bytes - off < chunk ? (size_t)(o->data_bytes - off) : chunk;

		for (size_t i = 0; i < n / 4; i++)
			buf[i] = data_word(off / 4 + i);
		if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n) {
			ret = errno ? -errno : -EIO;
			fprintf(stderr, "train_step: writing %s: %s\n", o->data, strerror(-ret));
			goto out;
		}
	}
out:
	free(buf);
	close(fd);
	return ret;
}

/* ---- the peer ------------------------------------------------------------------ */

struct msg_hdr {
	uint64_t batch;
	uint64_t len;
};

static int read_full(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static void peer_got(struct peer *pe, uint64_t b, const uint32_t *buf)
{
	const struct ts_ctx *c = pe->c;

	pe->received++;
	if (!c->o.verify_every || b % c->o.verify_every)
		return;
	pe->verified++;
	if (!check_batch(c, b, buf)) {
		if (!pe->mismatches)
			fprintf(stderr, "train_step: peer: batch %llu differs\n",
				(unsigned long long)b);
		pe->mismatches++;
	}
}

static void *peer_main(void *arg)
{
	struct peer *pe = arg;
	const struct ts_ctx *c = pe->c;
	uint32_t *buf = malloc(c->o.out_bytes);
	int fd = accept(pe->lfd, NULL, NULL);

	if (fd < 0 || !buf) {
		pe->err = fd < 0 ? -errno : -ENOMEM;
		goto out;
	}
	for (;;) {
		struct msg_hdr h;
		int r = read_full(fd, &h, sizeof(h));

		if (r == -ECONNRESET)
			break;		/* the sender is done */
		if (!r && h.len != c->o.out_bytes)
			r = -EPROTO;
		if (!r)
			r = read_full(fd, buf, c->o.out_bytes);
		if (r) {
			pe->err = r;
			break;
		}
		peer_got(pe, h.batch, buf);
	}
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

static int peer_start(struct ts_ctx *c, struct peer *pe)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int one = 1;

	memset(pe, 0, sizeof(*pe));
	pe->c = c;
	pe->lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (pe->lfd < 0 || bind(pe->lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(pe->lfd, 1) || getsockname(pe->lfd, (struct sockaddr *)&a, &alen))
		return -errno;
	if (pthread_create(&pe->thread, NULL, peer_main, pe))
		return -EAGAIN;
	pe->running = true;
	c->sock = socket(AF_INET, SOCK_STREAM, 0);
	if (c->sock < 0 || connect(c->sock, (struct sockaddr *)&a, sizeof(a)))
		return -errno;
	setsockopt(c->sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

static void peer_stop(struct ts_ctx *c, struct peer *pe)
{
	if (c->sock >= 0)
		shutdown(c->sock, SHUT_WR);
	else if (pe->running)
		shutdown(pe->lfd, SHUT_RDWR);	/* never connected: wake its accept */
	if (pe->running)
		pthread_join(pe->thread, NULL);
	if (c->sock >= 0)
		close(c->sock);
	c->sock = -1;
	if (pe->lfd >= 0)
		close(pe->lfd);
	pe->lfd = -1;
	pe->running = false;
}

/*
 * --send xport:ADDR: the results go through gdx's own transport, sent
 * straight from device memory (direct where the NIC can reach it, else
 * through the transport's bounce buffers); the peer receives them in order
 * into posted host buffers.
 */
#define XPEER_BUFS 8

static void *xpeer_main(void *arg)
{
	struct peer *pe = arg;
	const struct ts_ctx *c = pe->c;
	size_t words = c->o.out_bytes / 4;
	uint32_t *bufs = malloc(XPEER_BUFS * c->o.out_bytes);
	struct gdx_xport_ep *ep = NULL;
	bool done = false;
	int ret = bufs ? gdx_xport_accept(pe->xl, pe->xcq, 10000, &ep) : -ENOMEM;

	uint64_t idle_since = ts_now_ns();

	for (unsigned i = 0; !ret && i < XPEER_BUFS; i++)
		ret = gdx_xport_post_recv(ep, bufs + i * words, c->o.out_bytes, i);
	/*
	 * Until every result the sender sent is in: a send's completion at the
	 * sender need not mean it has arrived here, so the sender waits for this
	 * thread before it disconnects.
	 */
	while (!ret && !done && pe->received < atomic_load(&pe->expect)) {
		struct gdx_xport_cqe cqe[XPEER_BUFS];
		int n = gdx_xport_cq_poll(pe->xcq, cqe, XPEER_BUFS);

		if (n == 0) {
			n = gdx_xport_cq_wait(pe->xcq, 100);
			ret = n < 0 ? n : 0;
			if (!n && ts_now_ns() - idle_since > 10000000000ull)
				ret = -ETIMEDOUT;
			continue;
		}
		idle_since = ts_now_ns();
		ret = n < 0 ? n : 0;
		for (int i = 0; i < n && !ret && !done; i++) {
			if (cqe[i].status == GDX_EDISCONNECTED) {
				done = true;	/* the sender went away; the count tells */
			} else if (cqe[i].status) {
				ret = cqe[i].status;
			} else if (cqe[i].op != GDX_XPORT_OP_RECV || cqe[i].len != c->o.out_bytes ||
				   cqe[i].wr_id >= XPEER_BUFS) {
				ret = -EPROTO;
			} else {
				/* Messages arrive in the order they were sent: batch order. */
				peer_got(pe, pe->received, bufs + cqe[i].wr_id * words);
				ret = gdx_xport_post_recv(ep, bufs + cqe[i].wr_id * words,
							  c->o.out_bytes, cqe[i].wr_id);
			}
		}
	}
	pe->err = ret;
	if (ep)
		gdx_xport_ep_destroy(ep);
	free(bufs);
	return NULL;
}

static int xpeer_start(struct ts_ctx *c, struct peer *pe)
{
	struct gdx_xport_opts xo;
	int ret;

	memset(pe, 0, sizeof(*pe));
	pe->lfd = -1;
	pe->c = c;
	atomic_store(&pe->expect, UINT64_MAX);
	gdx_xport_opts_init(&xo, sizeof(xo));
	xo.dev = c->dev;
	ret = gdx_xport_cq_create(&pe->xcq);
	ret = ret ? ret : gdx_xport_listen(c->o.send + 6, &xo, &pe->xl);
	ret = ret ? ret : gdx_xport_cq_create(&c->xcq);
	if (ret)
		return ret;
	if (pthread_create(&pe->thread, NULL, xpeer_main, pe))
		return -EAGAIN;
	pe->running = true;
	return gdx_xport_connect(gdx_xport_listener_addr(pe->xl), &xo, c->xcq, &c->xep);
}

/* Destroys a completion queue once the endpoints that used it have let go. */
static void xcq_destroy(struct gdx_xport_cq *cq)
{
	struct gdx_xport_cqe cqe[16];

	for (int i = 0; cq && i < 1000; i++) {
		while (gdx_xport_cq_poll(cq, cqe, 16) > 0)
			;
		if (gdx_xport_cq_destroy(cq) != -EBUSY)
			return;
		usleep(1000);
	}
}

static void xpeer_stop(struct ts_ctx *c, struct peer *pe)
{
	atomic_store(&pe->expect, c->xep ? c->sent : 0);
	if (pe->running)
		pthread_join(pe->thread, NULL);
	if (c->xep)
		gdx_xport_disconnect(c->xep);
	if (c->xep)
		gdx_xport_ep_destroy(c->xep);
	c->xep = NULL;
	if (pe->xl)
		gdx_xport_listener_close(pe->xl);
	xcq_destroy(c->xcq);
	xcq_destroy(pe->xcq);
	c->xcq = NULL;
	pe->xl = NULL;
	pe->xcq = NULL;
	pe->running = false;
}

/* ---- stages -------------------------------------------------------------------- */

static struct ts_slot *slot_of(struct ts_ctx *c, const void *in)
{
	for (unsigned i = 0; i < c->nslots; i++) {
		if (c->slots[i].in == in)
			return &c->slots[i];
	}
	return NULL;
}

/* The file source, with the stage stretched to --load-us. */
static int load_read(void *ctx, struct gdx_pipeline_read *rd, struct gdx_stream *st)
{
	struct ts_ctx *c = ctx;
	struct ts_slot *s = slot_of(c, rd->dst);
	uint64_t t0 = ts_now_ns();
	int ret = 0;

	if (!s)
		return -EINVAL;
	if (c->o.load_us > 0)
		ret = c->prov->mark(c, s, TS_MARK_LOAD, st);
	ret = ret ? ret : c->file_src.read_async(c->file_src.ctx, rd, st);
	if (!ret && c->o.load_us > 0)
		ret = c->prov->pad(c, s, TS_MARK_LOAD, c->o.load_us, st);
	c->enq_ns[ST_LOAD] += ts_now_ns() - t0;
	return ret;
}

static void load_prefetch(void *ctx, uint64_t off, size_t len)
{
	struct ts_ctx *c = ctx;

	if (c->file_src.prefetch)
		c->file_src.prefetch(c->file_src.ctx, off, len);
}

static void load_complete(void *ctx, struct gdx_pipeline_read *rd)
{
	struct ts_ctx *c = ctx;

	c->file_src.complete(c->file_src.ctx, rd);
}

static int compute_stage(const struct gdx_pipeline_job *job, struct gdx_stream *st, void *arg)
{
	struct ts_ctx *c = arg;
	struct ts_slot *s = job->slot_user;
	uint64_t t0 = ts_now_ns();
	int ret = c->prov->compute(c, s, job->batch, c->o.compute_us, st);

	c->enq_ns[ST_COMPUTE] += ts_now_ns() - t0;
	return ret;
}

static int d2h_stage(const struct gdx_pipeline_job *job, struct gdx_stream *st, void *arg)
{
	struct ts_ctx *c = arg;
	struct ts_slot *s = job->slot_user;
	uint64_t t0 = ts_now_ns();
	int ret = gdx_memcpy_async(c->dev, s->out_pin, s->out, c->o.out_bytes, st);

	c->enq_ns[ST_D2H] += ts_now_ns() - t0;
	return ret;
}

static int send_stage(const struct gdx_pipeline_job *job, void *arg)
{
	struct ts_ctx *c = arg;
	struct ts_slot *s = job->slot_user;
	uint64_t t0 = ts_now_ns();
	struct msg_hdr h = { job->batch, c->o.out_bytes };

	if (c->xep) {
		struct gdx_xport_cqe cqe;
		int ret = gdx_xport_post_send(c->xep, s->out, c->o.out_bytes, job->batch, 0);

		while (!ret) {
			int n = gdx_xport_cq_poll(c->xcq, &cqe, 1);

			if (n == 0) {
				n = gdx_xport_cq_wait(c->xcq, 10000);
				ret = n < 0 ? n : n == 0 ? -ETIMEDOUT : 0;
				continue;
			}
			ret = n < 0 ? n : cqe.status;
			if (!ret && cqe.wr_id == job->batch)
				break;
		}
		if (ret)
			return gdx_pipeline_job_fail(job, ret, "xport send of the result");
		c->xpath = cqe.path;
	} else if (c->sock >= 0) {
		struct iovec iov[2] = { { &h, sizeof(h) }, { s->out_pin, c->o.out_bytes } };
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
		size_t left = sizeof(h) + c->o.out_bytes;

		while (left) {
			ssize_t n = sendmsg(c->sock, &m, MSG_NOSIGNAL);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return gdx_pipeline_job_fail(job, -errno, "send to the peer");
			left -= (size_t)n;
			while (n > 0 && m.msg_iovlen) {
				size_t take = (size_t)n < m.msg_iov[0].iov_len ?
					(size_t)n : m.msg_iov[0].iov_len;

				m.msg_iov[0].iov_base = (char *)m.msg_iov[0].iov_base + take;
				m.msg_iov[0].iov_len -= take;
				n -= (ssize_t)take;
				if (!m.msg_iov[0].iov_len) {
					m.msg_iov++;
					m.msg_iovlen--;
				}
			}
		}
	} else if (c->sink) {
		ssize_t n = gdx_file_write(c->sink, s->out_pin, c->o.out_bytes,
					   (off_t)(job->batch * c->o.out_bytes));

		if (n != (ssize_t)c->o.out_bytes)
			return gdx_pipeline_job_fail(job, n < 0 ? (int)n : -EIO,
						     "write of the result to the file");
	}
	c->sent++;
	if (c->o.send_us > 0)
		ts_wait_until(c, t0 + (uint64_t)(c->o.send_us * 1e3));
	return 0;
}

/* ---- one run ------------------------------------------------------------------------ */

static void slots_fini(struct ts_ctx *c)
{
	for (unsigned i = 0; i < c->nslots; i++) {
		struct ts_slot *s = &c->slots[i];

		if (c->prov->slot_fini)
			c->prov->slot_fini(c, s);
		if (s->out)
			gdx_device_free(c->dev, s->out);
		if (s->out_pin)
			gdx_pinned_free(c->dev, s->out_pin);
		memset(s, 0, sizeof(*s));
	}
	c->nslots = 0;
}

static int build(struct ts_ctx *c, unsigned nslots, unsigned ahead, struct gdx_pipeline **out)
{
	struct gdx_pipeline_source src;
	struct gdx_pipeline_load_opts lo;
	struct gdx_pipeline_opts po;
	struct gdx_stage_desc d;
	struct gdx_pipeline *p;
	int ret;

	gdx_pipeline_opts_init(&po, sizeof(po));
	po.nslots = nslots;
	po.ahead = ahead;
	po.slot_bytes = c->o.in_bytes;
	po.warmup = (int)c->o.warmup;
	po.timing = (int)c->o.time_every;
	ret = gdx_pipeline_create(c->dev, &po, &p);
	if (ret)
		return ret;
	c->nslots = nslots;
	for (unsigned i = 0; i < nslots && !ret; i++) {
		struct ts_slot *s = &c->slots[i];

		s->idx = i;
		gdx_pipeline_slot_buf(p, i, &s->in, NULL);
		ret = gdx_device_malloc(c->dev, c->o.out_bytes, &s->out);
		ret = ret ? ret : gdx_pinned_alloc(c->dev, c->o.out_bytes, &s->out_pin);
		ret = ret ? ret : c->prov->slot_init ? c->prov->slot_init(c, s) : 0;
		ret = ret ? ret : gdx_pipeline_set_slot_user(p, i, s);
	}

	src = c->file_src;
	src.read_async = load_read;
	src.complete = load_complete;
	src.prefetch = load_prefetch;
	src.release = NULL;
	src.ctx = c;
	gdx_pipeline_load_opts_init(&lo, sizeof(lo));
	lo.batch_bytes = c->o.in_bytes;
	lo.wrap = c->wrap;
	if (c->o.load_in_order)
		lo.flags |= GDX_PIPELINE_LOAD_IN_ORDER;
	lo.read_ahead = c->o.read_ahead;
	if (!ret && gdx_pipeline_add_load(p, &src, &lo) < 0)
		ret = -EINVAL;

	gdx_stage_desc_init(&d, sizeof(d));
	d.arg = c;
	d.kind = GDX_STAGE_DEVICE;
	d.name = stage_names[ST_COMPUTE];
	d.enqueue = compute_stage;
	if (!ret && gdx_pipeline_add_stage(p, &d) < 0)
		ret = -EINVAL;
	d.name = stage_names[ST_D2H];
	d.enqueue = d2h_stage;
	if (!ret && c->stage_idx[ST_D2H] >= 0 && gdx_pipeline_add_stage(p, &d) < 0)
		ret = -EINVAL;
	d.name = stage_names[ST_SEND];
	d.kind = GDX_STAGE_HOST;
	d.enqueue = NULL;
	d.run = send_stage;
	if (!ret && c->stage_idx[ST_SEND] >= 0 && gdx_pipeline_add_stage(p, &d) < 0)
		ret = -EINVAL;
	if (ret) {
		gdx_pipeline_destroy(p);
		slots_fini(c);
		return ret;
	}
	*out = p;
	return 0;
}

/* Reads back what --send file:PATH wrote and checks it. */
static void verify_sink(struct ts_ctx *c, struct ts_result *r)
{
	uint32_t *buf = malloc(c->o.out_bytes);

	for (uint64_t b = 0; buf && c->o.verify_every && b < c->sent; b += c->o.verify_every) {
		ssize_t n = gdx_file_read(c->sink, buf, c->o.out_bytes, (off_t)(b * c->o.out_bytes));

		r->verified++;
		if (n != (ssize_t)c->o.out_bytes || !check_batch(c, b, buf))
			r->mismatches++;
	}
	free(buf);
}

static bool send_xport(const struct ts_ctx *c)
{
	return !strncmp(c->o.send, "xport:", 6);
}

static void peers_stop(struct ts_ctx *c, struct peer *pe)
{
	if (send_xport(c))
		xpeer_stop(c, pe);
	else
		peer_stop(c, pe);
}

/* ---- stall watchdog (--stall-ms) ---------------------------------------------------- */

/*
 * A pipeline that stops completing batches (a circular wait between the
 * device, the file workers and the producer, say) must end as an error that
 * says where everything stood, not as a process killed from outside.  The
 * watchdog polls the pipeline's completed count; once it has not moved for
 * --stall-ms it prints the pipeline's and the file reads' state, each
 * thread's kernel state and call stack (raw addresses: resolve them with
 * addr2line against this binary), then each stage stream's state, and exits
 * with status 3.  The stream queries come last: they call into the driver,
 * which a stuck thread may hold.
 */
struct stall_watch {
	struct ts_ctx *c;
	struct gdx_pipeline *p;
	const char *what;
	pthread_t thread;
	bool up;
	atomic_bool stop;
};

static atomic_int stack_done;

static void stack_handler(int sig)
{
	void *pcs[48];
	char head[48];
	int n = backtrace(pcs, 48), len;

	(void)sig;
	len = snprintf(head, sizeof(head), "  stack of %ld:\n", (long)syscall(SYS_gettid));
	if (write(STDERR_FILENO, head, (size_t)len) < 0)
		return;
	backtrace_symbols_fd(pcs, n, STDERR_FILENO);
	atomic_store(&stack_done, 1);
}

static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	buf[0] = '\0';
	if (f) {
		if (!fgets(buf, (int)len, f))
			buf[0] = '\0';
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = '\0';
}

/* Each thread: name, state, where in the kernel it sleeps, its system call; then its stack. */
static void dump_threads(void)
{
	char path[96], comm[64], stat[512], wchan[64], sc[256];
	struct sigaction sa = { .sa_handler = stack_handler };
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	long self = (long)syscall(SYS_gettid);

	if (!d)
		return;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);
		const char *st;

		if (tid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%ld/comm", tid);
		read_line(path, comm, sizeof(comm));
		snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
		read_line(path, stat, sizeof(stat));
		st = strrchr(stat, ')');
		snprintf(path, sizeof(path), "/proc/self/task/%ld/wchan", tid);
		read_line(path, wchan, sizeof(wchan));
		snprintf(path, sizeof(path), "/proc/self/task/%ld/syscall", tid);
		read_line(path, sc, sizeof(sc));
		fprintf(stderr, "thread %ld (%s)%s: state %c, wchan %s, syscall %s\n", tid, comm,
			tid == self ? " [watchdog]" : "", st && st[1] ? st[2] : '?',
			wchan[0] ? wchan : "-", sc[0] ? sc : "-");
		if (tid == self)
			continue;
		fflush(stderr);
		atomic_store(&stack_done, 0);
		if (syscall(SYS_tgkill, (long)getpid(), tid, SIGUSR2))
			continue;
		/* A thread inside an uninterruptible call answers only once it returns. */
		for (int i = 0; i < 200 && !atomic_load(&stack_done); i++)
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		if (!atomic_load(&stack_done))
			fprintf(stderr, "  stack of %ld: no answer within 200 ms\n", tid);
	}
	closedir(d);
	/* Where the binary and its libraries were mapped, to resolve the stacks offline. */
	FILE *m = fopen("/proc/self/maps", "r");
	char line[512];

	while (m && fgets(line, sizeof(line), m)) {
		if (strstr(line, " r-xp ") && strchr(line, '/'))
			fprintf(stderr, "map %s", line);
	}
	if (m)
		fclose(m);
}

static void stall_report(struct stall_watch *w, unsigned ms)
{
	struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };
	struct gdx_file_async_stats as = { .struct_size = sizeof(as) };
	struct ts_ctx *c = w->c;

	gdx_pipeline_stats(w->p, &ps);
	fprintf(stderr, "train_step: %s run stalled: no batch completed for %u ms "
		"(submitted %llu, completed %llu of %u, in flight <= %u, waits past the spin %llu)\n",
		w->what, ms, (unsigned long long)ps.submitted, (unsigned long long)ps.completed,
		c->o.batches, ps.inflight_max, (unsigned long long)ps.long_waits);
	for (unsigned k = 0; k < gdx_pipeline_nstages(w->p); k++) {
		struct gdx_pipeline_stage_stats ss = { .struct_size = sizeof(ss) };

		if (!gdx_pipeline_stage_stats(w->p, k, &ss))
			fprintf(stderr, "  stage %u (%s): %llu batches harvested, %llu skipped, "
				"%llu errors\n", k, ss.name, (unsigned long long)ss.batches,
				(unsigned long long)ss.skipped, (unsigned long long)ss.errors);
	}
	if (!c->ctrl && !gdx_file_async_stats(c->data, &as, 0))
		fprintf(stderr, "  file reads: %llu early (%llu taking over a read ahead, %llu of "
			"them late), %llu done on the workers; now %u running on a worker, %u "
			"queued for one\n", (unsigned long long)as.early,
			(unsigned long long)as.ahead_hits, (unsigned long long)as.ahead_late,
			(unsigned long long)as.reads, as.inflight, as.queued);
	dump_threads();
	for (unsigned k = 0; k < gdx_pipeline_nstages(w->p); k++) {
		struct gdx_stream *s = gdx_pipeline_stage_stream(w->p, k);

		if (!s)
			continue;
		fprintf(stderr, "  stage %u stream: ", k);
		fflush(stderr);
		int q = gdx_stream_query(s);

		fprintf(stderr, "%s\n", q == 0 ? "idle" : q == -EBUSY ? "work pending" :
			gdx_strerror(q));
	}
	fflush(stdout);
	fflush(stderr);
	_exit(3);
}

static void *stall_main(void *arg)
{
	struct stall_watch *w = arg;
	unsigned ms = w->c->o.stall_ms;
	struct timespec tick = { .tv_nsec = (long)(ms / 4 + 1 < 50 ? ms / 4 + 1 : 50) * 1000000 };
	uint64_t last = UINT64_MAX, since = ts_now_ns();
	void *warm[1];

	backtrace(warm, 1);	/* loads the unwinder now, not inside a signal handler */
	while (!atomic_load(&w->stop)) {
		struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };

		nanosleep(&tick, NULL);
		gdx_pipeline_stats(w->p, &ps);
		if (ps.completed != last) {
			last = ps.completed;
			since = ts_now_ns();
		} else if (ts_now_ns() - since >= (uint64_t)ms * 1000000) {
			stall_report(w, ms);
		}
	}
	return NULL;
}

static void stall_start(struct stall_watch *w, struct ts_ctx *c, struct gdx_pipeline *p,
			const char *what)
{
	*w = (struct stall_watch){ .c = c, .p = p, .what = what };
	atomic_init(&w->stop, false);
	w->up = c->o.stall_ms && !pthread_create(&w->thread, NULL, stall_main, w);
}

static void stall_stop(struct stall_watch *w)
{
	if (!w->up)
		return;
	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
}

static int run_once(struct ts_ctx *c, unsigned nslots, unsigned ahead, struct ts_result *r)
{
	struct stall_watch sw;
	bool peer = !strcmp(c->o.send, "tcp") || send_xport(c);
	struct peer pe = { .lfd = -1 };
	struct gdx_pipeline *p;
	int ret = 0;

	memset(r, 0, sizeof(*r));
	memset(c->enq_ns, 0, sizeof(c->enq_ns));
	c->sock = -1;
	c->sent = 0;
	if (peer) {
		ret = send_xport(c) ? xpeer_start(c, &pe) : peer_start(c, &pe);
		if (ret) {
			snprintf(r->errtext, sizeof(r->errtext), "peer: %s", gdx_strerror(ret));
			peers_stop(c, &pe);
			return ret;
		}
	}
	ret = build(c, nslots, ahead, &p);
	if (ret) {
		snprintf(r->errtext, sizeof(r->errtext), "set-up: %s", gdx_strerror(ret));
		peers_stop(c, &pe);
		return ret;
	}
	stall_start(&sw, c, p, nslots == 1 && !ahead ? "serial" : "pipelined");
	r->reads.struct_size = sizeof(r->reads);
	r->have_reads = !c->ctrl &&
		!gdx_file_async_stats(c->data, &r->reads, GDX_FILE_STATS_RESET);
	/*
	 * gdx_pipeline_run(), with the submit loop timed for the producer's
	 * figure from the second batch on: the first sets up streams, events
	 * and threads.
	 */
	r->err = gdx_pipeline_submit(p, NULL, 0);
	memset(c->enq_ns, 0, sizeof(c->enq_ns));
	r->submit_ns = ts_now_ns();
	for (unsigned b = 1; b < c->o.batches && !r->err; b++)
		r->err = gdx_pipeline_submit(p, NULL, 0);
	r->submit_ns = ts_now_ns() - r->submit_ns;
	memcpy(r->enq_ns, c->enq_ns, sizeof(r->enq_ns));
	ret = gdx_pipeline_drain(p);
	stall_stop(&sw);
	r->err = r->err && r->err != -ECANCELED ? r->err : ret;
	if (r->have_reads)
		gdx_file_async_stats(c->data, &r->reads, 0);
	if (r->err)
		gdx_pipeline_strerror(p, r->errtext, sizeof(r->errtext));
	for (unsigned k = 0; k < NSTAGES; k++) {
		r->st[k].struct_size = sizeof(r->st[k]);
		if (c->stage_idx[k] >= 0)
			gdx_pipeline_stage_stats(p, (unsigned)c->stage_idx[k], &r->st[k]);
	}
	r->ps.struct_size = sizeof(r->ps);
	gdx_pipeline_stats(p, &r->ps);
	gdx_pipeline_destroy(p);
	slots_fini(c);
	if (send_xport(c))
		r->send_path = gdx_xport_path_name(c->xpath);
	peers_stop(c, &pe);
	if (peer) {
		r->verified = pe.verified;
		r->mismatches = pe.mismatches;
		if (!r->err && pe.err)
			snprintf(r->errtext, sizeof(r->errtext), "peer: %s", gdx_strerror(pe.err));
		if (!r->err && pe.received != c->o.batches) {
			fprintf(stderr, "train_step: the peer got %llu of %u results\n",
				(unsigned long long)pe.received, c->o.batches);
			r->mismatches++;
		}
		r->err = r->err ? r->err : pe.err;
	} else if (c->sink) {
		verify_sink(c, r);
	}
	return r->err;
}

/* ---- main ----------------------------------------------------------------------------- */

#define TS_NQN "nqn.2026-11.io.gdx:train-step"

/*
 * --load nvmf: a gdx NVMe-oF target in this process serves the data set file
 * as namespace 1 on loopback, and the load stage reads it through the gdx
 * host (the remote-NVMe path of the seeds, on one machine).
 */
static int nvmf_up(struct ts_ctx *c)
{
	struct gdx_nvmf_target_opts to;
	struct gdx_nvmf_host_opts ho;
	char port[16];
	int ret, bound;

	if (c->o.in_bytes % 512) {
		fprintf(stderr, "train_step: --load nvmf needs --batch-bytes in 512-byte blocks\n");
		return -EINVAL;
	}
	gdx_nvmf_target_opts_init(&to, sizeof(to));
	ret = gdx_nvmf_target_create(&to, &c->tgt);
	ret = ret ? ret : gdx_nvmf_target_add_subsys(c->tgt, TS_NQN, 1);
	ret = ret ? ret : gdx_nvmf_target_add_ns(c->tgt, TS_NQN, 1, c->o.data, 512);
	ret = ret ? ret : gdx_nvmf_target_add_port(c->tgt, 1, "127.0.0.1", "0");
	ret = ret ? ret : gdx_nvmf_target_link(c->tgt, 1, TS_NQN);
	ret = ret ? ret : gdx_nvmf_target_start(c->tgt);
	if (ret)
		return ret;
	bound = gdx_nvmf_target_bound_port(c->tgt, 1);
	if (bound <= 0)
		return bound < 0 ? bound : -EADDRNOTAVAIL;
	snprintf(port, sizeof(port), "%d", bound);
	gdx_nvmf_host_opts_init(&ho, sizeof(ho));
	ret = gdx_nvmf_connect("127.0.0.1", port, TS_NQN, &ho, &c->ctrl);
	return ret ? ret : gdx_pipeline_source_nvmf(c->ctrl, 1, &c->file_src);
}

static double us(uint64_t ns)
{
	return (double)ns / 1e3;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: train_step [options]\n"
		"  --device SPEC        cuda[:N], emulated (default $GDX_DEVICE, else auto)\n"
		"  --data PATH          data set file, made if missing (default $TMPDIR/gdx_train_step.dat)\n"
		"  --data-bytes N       data set size (default 64M)\n"
		"  --load file|nvmf     read batches from the file, or from it served as an NVMe-oF\n"
		"                       namespace by a gdx target on loopback (default file)\n"
		"  --load-in-order      start each file read when the stream reaches the load, not\n"
		"                       when the batch is submitted (GDX_PIPELINE_LOAD_IN_ORDER)\n"
		"  --read-ahead N       batches whose file reads start ahead, on the file\n"
		"                       workers at once (default the slots; 0: none)\n"
		"  --batch-bytes N      input per batch, loaded into GPU memory (default 1M)\n"
		"  --out-bytes N        result per batch, sent (default 64K)\n"
		"  --batches N          (default 200)\n"
		"  --slots S            ring slots (default 3)\n"
		"  --ahead N            batches queued beyond the slots (default S)\n"
		"  --load-us T          stretch the load stage to at least T us (default 0)\n"
		"  --compute-us T       compute kernel duration (default 100)\n"
		"  --send-us T          stretch the send stage to at least T us (default 0)\n"
		"  --spin-us T          host waits shorter than T us spin instead of sleeping\n"
		"  --send tcp|xport:ADDR|file:PATH|none  where results go (default tcp: a\n"
		"                       loopback peer; xport:tcp://127.0.0.1:0 or xport:rdma://IP:0:\n"
		"                       a peer through gdx's transport, sent straight from device\n"
		"                       memory, no d2h stage; none: no send stage)\n"
		"  --verify-every N     the peer checks every Nth batch (default 1; 0: none)\n"
		"  --warmup N           batches left out of the figures (default 8)\n"
		"  --time-every N       time the device stages of every Nth batch with events\n"
		"                       (default 1: each; each timed stage costs the producer two\n"
		"                       driver calls a batch)\n"
		"  --serial             also measure the serial step (one slot, nothing ahead)\n"
		"  --stall-ms N         no batch completed for N ms: print where the pipeline, the\n"
		"                       file reads and every thread stand, exit 3 (default 0: off)\n");
}

static int parse_size(const char *s, uint64_t *v)
{
	char *end;
	double d = strtod(s, &end);
	uint64_t m = 1;

	switch (*end) {
	case 'k': case 'K': m = 1ull << 10; end++; break;
	case 'm': case 'M': m = 1ull << 20; end++; break;
	case 'g': case 'G': m = 1ull << 30; end++; break;
	default: break;
	}
	if (end == s || *end || d < 0)
		return -EINVAL;
	*v = (uint64_t)(d * (double)m);
	return 0;
}

static int parse_args(int argc, char **argv, struct ts_opts *o)
{
	static const struct option lo[] = {
		{ "device", 1, NULL, 'd' }, { "data", 1, NULL, 'f' },
		{ "data-bytes", 1, NULL, 'D' }, { "batch-bytes", 1, NULL, 'b' },
		{ "out-bytes", 1, NULL, 'o' }, { "batches", 1, NULL, 'n' },
		{ "slots", 1, NULL, 's' }, { "ahead", 1, NULL, 'a' },
		{ "load-us", 1, NULL, 'L' }, { "compute-us", 1, NULL, 'C' },
		{ "send-us", 1, NULL, 'S' }, { "spin-us", 1, NULL, 'P' },
		{ "send", 1, NULL, 'x' }, { "verify-every", 1, NULL, 'v' },
		{ "warmup", 1, NULL, 'w' }, { "serial", 0, NULL, 'z' },
		{ "load", 1, NULL, 'l' }, { "load-in-order", 0, NULL, 'I' },
		{ "read-ahead", 1, NULL, 'R' }, { "time-every", 1, NULL, 'T' },
		{ "stall-ms", 1, NULL, 'W' },
		{ "help", 0, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	static char data_path[512];
	const char *tmp = getenv("TMPDIR");
	uint64_t v;
	int c;

	snprintf(data_path, sizeof(data_path), "%s/gdx_train_step.dat", tmp ? tmp : "/tmp");
	*o = (struct ts_opts){
		.data = data_path, .send = "tcp", .load = "file", .in_bytes = 1 << 20, .out_bytes = 64 << 10,
		.data_bytes = 64ull << 20, .batches = 200, .slots = 3, .ahead = (unsigned)-1,
		.read_ahead = (unsigned)-1,
		.verify_every = 1, .warmup = 8, .compute_us = 100, .time_every = 1,
	};
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int bad = 0;

		switch (c) {
		case 'd': o->device = optarg; break;
		case 'f': o->data = optarg; break;
		case 'x': o->send = optarg; break;
		case 'l': o->load = optarg; break;
		case 'D': bad = parse_size(optarg, &o->data_bytes); break;
		case 'b': bad = parse_size(optarg, &v); o->in_bytes = (size_t)v; break;
		case 'o': bad = parse_size(optarg, &v); o->out_bytes = (size_t)v; break;
		case 'n': o->batches = (unsigned)strtoul(optarg, NULL, 0); break;
		case 's': o->slots = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'a': o->ahead = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'v': o->verify_every = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'w': o->warmup = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'L': o->load_us = atof(optarg); break;
		case 'C': o->compute_us = atof(optarg); break;
		case 'S': o->send_us = atof(optarg); break;
		case 'P': o->spin_us = atof(optarg); break;
		case 'z': o->serial = true; break;
		case 'I': o->load_in_order = true; break;
		case 'W': o->stall_ms = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'T':
			o->time_every = (unsigned)strtoul(optarg, NULL, 0);
			bad = !o->time_every || o->time_every > 1000;
			break;
		case 'R':
			o->read_ahead = (unsigned)strtoul(optarg, NULL, 0);
			bad = o->read_ahead > GDX_PIPELINE_LOAD_READ_AHEAD_MAX;
			break;
		case 'h': usage(stdout); exit(0);
		default: return -EINVAL;
		}
		if (bad)
			return -EINVAL;
	}
	if (optind != argc || !o->out_bytes || o->out_bytes % 4 || o->in_bytes % o->out_bytes ||
	    o->data_bytes < o->in_bytes || o->batches <= o->warmup + 1 || !o->slots ||
	    (strcmp(o->send, "tcp") && strcmp(o->send, "none") && strncmp(o->send, "file:", 5) &&
	     strncmp(o->send, "xport:", 6)) || (strcmp(o->load, "file") && strcmp(o->load, "nvmf")))
		return -EINVAL;
	return 0;
}

/* Per batch of the submit loop's figures, which leave out the first batch. */
static double per_batch(const struct ts_result *r, uint64_t ns)
{
	return r->ps.submitted > 1 ? us(ns) / (double)(r->ps.submitted - 1) : 0;
}

/* The producer's own time per batch: enqueueing and harvesting, its waits left out. */
static double producer_us(const struct ts_result *r)
{
	return per_batch(r, r->submit_ns > r->ps.producer_wait_ns ?
			 r->submit_ns - r->ps.producer_wait_ns : 0);
}

/* Driver calls a batch: the producer's own (its waits' polls left out), and the send thread's. */
static double producer_calls(const struct ts_result *r)
{
	return r->ps.submitted ? (double)(r->ps.producer_calls - r->ps.producer_poll_calls) /
		(double)r->ps.submitted : 0;
}

static double send_calls(const struct ts_result *r)
{
	return r->st[ST_SEND].batches ? (double)r->st[ST_SEND].calls /
		(double)r->st[ST_SEND].batches : 0;
}

static double read_us(const struct ts_result *r)
{
	return r->reads.reads ? us(r->reads.read_ns) / (double)r->reads.reads : 0;
}

static void print_result(const char *what, const struct ts_result *r)
{
	printf("%s: %llu batches, step %.1f us, max stage %.1f us, efficiency %.3f, "
	       "in flight <= %u, waits past the spin %llu\n", what,
	       (unsigned long long)r->ps.completed, us(r->ps.step_ns), us(r->ps.max_stage_ns),
	       r->ps.overlap, r->ps.inflight_max, (unsigned long long)r->ps.long_waits);
	printf("  producer: %.1f us a batch of its own work (enqueue, harvest), %.1f us waiting;"
	       " in the stages' enqueue callbacks: load %.1f, compute %.1f, d2h %.1f us (the rest"
	       " is the engine's: stream waits, events, harvest)\n", producer_us(r),
	       per_batch(r, r->ps.producer_wait_ns), per_batch(r, r->enq_ns[ST_LOAD]),
	       per_batch(r, r->enq_ns[ST_COMPUTE]), per_batch(r, r->enq_ns[ST_D2H]));
	printf("  driver calls a batch: producer %.1f through gdx (+ %.1f polling while it waited;"
	       " the provider's kernel launches are not counted), send thread %.1f\n",
	       producer_calls(r), r->ps.submitted ? (double)r->ps.producer_poll_calls /
	       (double)r->ps.submitted : 0.0, send_calls(r));
	if (!r->have_reads)
		return;
	/*
	 * The storage reads run on the file workers, off the load stage's
	 * stream: the stage's time is the wait for the read and the copy.
	 */
	printf("  storage reads: %llu on the file workers, %.1f us each (max %.1f), busy %.1f us "
	       "a read, up to %u at once; %llu of %llu early reads read ahead, %llu of those "
	       "still running at submission\n", (unsigned long long)r->reads.reads, read_us(r),
	       us(r->reads.max_read_ns), r->reads.reads ?
	       us(r->reads.busy_ns) / (double)r->reads.reads : 0.0, r->reads.max_inflight,
	       (unsigned long long)r->reads.ahead_hits, (unsigned long long)r->reads.early,
	       (unsigned long long)r->reads.ahead_late);
}

int ts_main(int argc, char **argv, const struct ts_provider *prov)
{
	struct ts_ctx c = { .prov = prov, .sock = -1 };
	struct ts_result pipe_r, ser_r;
	struct gdx_file_io_info info;
	double serial_sum = 0;
	int ret;

	if (parse_args(argc, argv, &c.o)) {
		usage(stderr);
		return 2;
	}
	if (c.o.ahead == (unsigned)-1)
		c.o.ahead = c.o.slots;
	c.wrap = c.o.data_bytes / c.o.in_bytes * c.o.in_bytes;
	c.stage_idx[ST_LOAD] = 0;
	c.stage_idx[ST_COMPUTE] = 1;
	c.stage_idx[ST_D2H] = send_xport(&c) ? -1 : 2;
	c.stage_idx[ST_SEND] = !strcmp(c.o.send, "none") ? -1 : c.stage_idx[ST_D2H] < 0 ? 2 : 3;
	if (make_data(&c.o))
		return 1;
	ret = gdx_device_open(c.o.device, &c.dev);
	if (ret) {
		fprintf(stderr, "train_step: device: %s\n", gdx_strerror(ret));
		return 1;
	}
	ret = gdx_file_driver_open(c.dev, NULL, &c.drv);
	ret = ret ? ret : gdx_file_open(c.drv, c.o.data, NULL, &c.data);
	if (!strcmp(c.o.load, "nvmf"))
		ret = ret ? ret : nvmf_up(&c);
	else
		ret = ret ? ret : gdx_pipeline_source_file(c.data, &c.file_src);
	if (!ret && !strncmp(c.o.send, "file:", 5)) {
		struct gdx_file_opts fo;

		gdx_file_opts_init(&fo, sizeof(fo));
		fo.oflags = O_RDWR | O_CREAT | O_TRUNC;
		ret = gdx_file_open(c.drv, c.o.send + 5, &fo, &c.sink);
	}
	if (ret) {
		fprintf(stderr, "train_step: data set: %s\n", gdx_strerror(ret));
		goto out;
	}
	printf("train_step: device %s, compute on %s, %u batches of %zu bytes -> %zu bytes, "
	       "send %s\n", gdx_device_name(c.dev), prov->name, c.o.batches, c.o.in_bytes,
	       c.o.out_bytes, c.o.send);
	printf("targets: load >= %.0f us%s, compute %.0f us, send >= %.0f us\n", c.o.load_us,
	       c.o.load_in_order ? " (read in stream order)" : "", c.o.compute_us, c.o.send_us);

	ret = run_once(&c, c.o.slots, c.o.ahead, &pipe_r);
	if (ret) {
		fprintf(stderr, "train_step: pipelined run failed: %s\n", pipe_r.errtext);
		goto out;
	}
	if (c.o.serial) {
		ret = run_once(&c, 1, 0, &ser_r);
		if (ret) {
			fprintf(stderr, "train_step: serial run failed: %s\n", ser_r.errtext);
			goto out;
		}
	}
	if (c.ctrl) {
		printf("load path: nvmf (NVMe/TCP on loopback from a gdx target in this process)\n");
	} else {
		gdx_file_info(c.data, &info);
		printf("load path: %s (%s)\n", gdx_file_path_name(info.path), info.why);
	}
	if (pipe_r.send_path)
		printf("send path: %s (xport, straight from device memory)\n", pipe_r.send_path);

	printf("\n%-8s %-6s %10s %10s %10s\n", "stage", "kind", "mean_us", "min_us", "max_us");
	for (unsigned k = 0; k < NSTAGES; k++) {
		const struct gdx_pipeline_stage_stats *s = &pipe_r.st[k];

		if (c.stage_idx[k] < 0)
			continue;
		printf("%-8s %-6s %10.1f %10.1f %10.1f\n", s->name,
		       s->kind == GDX_STAGE_DEVICE ? "device" : "host", us(s->mean_ns),
		       us(s->min_ns), us(s->max_ns));
		serial_sum += us(s->mean_ns);
	}
	printf("\n");
	print_result("pipelined", &pipe_r);
	if (c.o.serial)
		print_result("serial   ", &ser_r);
	printf("serial step, sum of stages:       %10.1f us\n", serial_sum);
	if (c.o.serial)
		printf("serial step, measured (1 slot):   %10.1f us\n", us(ser_r.ps.step_ns));
	printf("pipelined step (%u slots):         %10.1f us\n", c.o.slots, us(pipe_r.ps.step_ns));
	printf("overlap efficiency step/max stage: %9.3f   (goal <= 1.05)\n", pipe_r.ps.overlap);
	if (c.o.serial && pipe_r.ps.step_ns)
		printf("speedup, measured serial/pipelined: %8.2fx\n",
		       (double)ser_r.ps.step_ns / (double)pipe_r.ps.step_ns);
	printf("verified %llu batches, %llu mismatches\n",
	       (unsigned long long)(pipe_r.verified + (c.o.serial ? ser_r.verified : 0)),
	       (unsigned long long)(pipe_r.mismatches + (c.o.serial ? ser_r.mismatches : 0)));
	printf("RESULT device=%s slots=%u batches=%u", gdx_device_name(c.dev), c.o.slots,
	       c.o.batches);
	for (unsigned k = 0; k < NSTAGES; k++)
		printf(" %s_us=%.1f", stage_names[k], us(pipe_r.st[k].mean_ns));	/* 0: no such stage */
	printf(" max_stage_us=%.1f serial_sum_us=%.1f serial_us=%.1f step_us=%.1f efficiency=%.3f"
	       " long_waits=%llu read_us=%.1f reads_at_once=%u reads_late=%llu producer_us=%.1f"
	       " enqueue_us=%.1f calls=%.1f send_calls=%.1f mismatches=%llu\n", us(pipe_r.ps.max_stage_ns), serial_sum,
	       c.o.serial ? us(ser_r.ps.step_ns) : 0.0, us(pipe_r.ps.step_ns), pipe_r.ps.overlap,
	       (unsigned long long)pipe_r.ps.long_waits, read_us(&pipe_r),
	       pipe_r.reads.max_inflight, (unsigned long long)pipe_r.reads.ahead_late,
	       producer_us(&pipe_r), per_batch(&pipe_r, pipe_r.enq_ns[ST_LOAD] +
	       pipe_r.enq_ns[ST_COMPUTE] + pipe_r.enq_ns[ST_D2H]), producer_calls(&pipe_r),
	       send_calls(&pipe_r),
	       (unsigned long long)(pipe_r.mismatches + (c.o.serial ? ser_r.mismatches : 0)));
	if (pipe_r.mismatches || (c.o.serial && ser_r.mismatches))
		ret = -EIO;
out:
	if (c.file_src.release)
		c.file_src.release(c.file_src.ctx);
	if (c.ctrl)
		gdx_nvmf_disconnect(c.ctrl);
	if (c.tgt)
		gdx_nvmf_target_destroy(c.tgt);
	if (c.sink)
		gdx_file_close(c.sink);
	if (c.data)
		gdx_file_close(c.data);
	if (c.drv)
		gdx_file_driver_close(c.drv);
	gdx_device_close(c.dev);
	return ret ? 1 : 0;
}
