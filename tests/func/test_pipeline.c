/* SPDX-License-Identifier: MIT */
/*
 * The pipeline engine on the emulated device.  Stages record host-clock
 * timestamps from inside their work (host functions on the stage's stream,
 * or the host stage's callback), so ordering and overlap are read off what
 * actually ran, never off wall-clock thresholds.  The data moved through the
 * slots is checked against per-batch checksums, which catches a slot reused
 * before its last stage is done.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "meet.h"
#include "test.h"

#include <fcntl.h>
#include <unistd.h>

#include <gdx/gdx.h>
#include <gdx/file.h>
#include <gdx/nvmf.h>
#include <gdx/pipeline.h>

#include "common/config.h"
#include "file/ahead.h"
#include "common/util.h"

#define NB_MAX 48
#define SZ (16 << 10)

enum role { R_NONE, R_LOAD, R_XFORM, R_VERIFY };

struct tstage {
	char kind;		/* 'D' device, 'H' host */
	enum role role;
	unsigned sleep_us;	/* inside the stage's work */
	int fail_batch;		/* >= 0: the callback fails at this batch */
	bool gate;		/* work waits until the test opens the gate */
	bool stop_at;		/* calls gdx_pipeline_stop at stop_batch */
};

struct tctx;

struct rec {
	struct tctx *t;
	unsigned k;
	uint64_t b;
};

struct tctx {
	struct gdx_device *dev;
	struct gdx_pipeline *p;
	unsigned nst;
	struct tstage st[8];
	unsigned char *src;	/* NB_MAX batches of input */
	unsigned char *out;	/* NB_MAX batches of verified output */
	uint64_t want[NB_MAX];	/* checksum of each batch's expected output */
	uint64_t got[NB_MAX];
	void *pin[GDX_PIPELINE_MAX_SLOTS];	/* device XFORM staging, per slot */
	unsigned char *tmp[8];	/* host XFORM staging, per stage */
	_Atomic uint64_t ts0[8][NB_MAX], ts1[8][NB_MAX];
	_Atomic unsigned ran[8];
	struct rec rec[8][NB_MAX];
	uint64_t stop_batch;
	/*
	 * The gate: a host stage blocks on the condition variable (it has its
	 * own thread); a device stage's stream waits on the pinned word.  A host
	 * function must not block instead: CUDA runs those of all streams on one
	 * thread, so it would hold up every other stage as well.
	 */
	pthread_mutex_t gm;
	pthread_cond_t gc;
	bool gate_open;
	uint32_t *gate_word;
};

static struct gdx_device *dev;
static char last_log[512];
static unsigned nlog;

/* Failures are logged once, with stage, slot and batch; keep the line for the checks. */
static void log_cb(enum gdx_log_level level, const char *subsys, const char *msg, void *arg)
{
	(void)arg;
	if (level == GDX_LOG_ERROR && !strcmp(subsys, "pipeline")) {
		snprintf(last_log, sizeof(last_log), "%s", msg);
		nlog++;
	}
}

static uint64_t fnv(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static unsigned char key(uint64_t b)
{
	return (unsigned char)(b * 37 + 1);
}

static void xform(unsigned char *p, uint64_t b)
{
	for (size_t i = 0; i < SZ; i++)
		p[i] ^= key(b);
}

static void sleep_us(unsigned us)
{
	struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000 };

	while (us && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void gate_wait(struct tctx *t)
{
	pthread_mutex_lock(&t->gm);
	while (!t->gate_open)
		pthread_cond_wait(&t->gc, &t->gm);
	pthread_mutex_unlock(&t->gm);
}

static void gate_open(struct tctx *t)
{
	__atomic_store_n(t->gate_word, 1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&t->gm);
	t->gate_open = true;
	pthread_cond_broadcast(&t->gc);
	pthread_mutex_unlock(&t->gm);
}

/* ---- host functions of device stages ---------------------------------------- */

static void hf_begin(void *arg)
{
	struct rec *r = arg;

	r->t->ts0[r->k][r->b] = gdx_now_ns();
	sleep_us(r->t->st[r->k].sleep_us);
}

static void hf_end(void *arg)
{
	struct rec *r = arg;

	r->t->ts1[r->k][r->b] = gdx_now_ns();
	r->t->ran[r->k]++;
}

static void hf_xform(void *arg)
{
	struct rec *r = arg;

	xform(r->t->pin[r->b % gdx_pipeline_nslots(r->t->p)], r->b);
}

static void hf_verify(void *arg)
{
	struct rec *r = arg;

	r->t->got[r->b] = fnv(r->t->out + r->b * SZ, SZ);
}

static int dev_stage(const struct gdx_pipeline_job *job, struct gdx_stream *s, void *arg)
{
	struct tctx *t = arg;
	unsigned k = job->stage;
	struct rec *r = &t->rec[k][job->batch];
	void *pin = t->pin[job->slot];
	int ret;

	*r = (struct rec){ t, k, job->batch };
	if (t->st[k].fail_batch == (int)job->batch)
		return gdx_pipeline_job_fail(job, -EIO, "injected enqueue failure");
	ret = t->st[k].gate ? gdx_stream_wait_value32(s, t->gate_word, 1) : 0;
	ret = ret ? ret : gdx_stream_launch_host_func(s, hf_begin, r);
	switch (t->st[k].role) {
	case R_LOAD:
		ret = ret ? ret : gdx_memcpy_async(dev, job->buf, t->src + job->batch * SZ, SZ, s);
		break;
	case R_XFORM:
		ret = ret ? ret : gdx_memcpy_async(dev, pin, job->buf, SZ, s);
		ret = ret ? ret : gdx_stream_launch_host_func(s, hf_xform, r);
		ret = ret ? ret : gdx_memcpy_async(dev, job->buf, pin, SZ, s);
		break;
	case R_VERIFY:
		ret = ret ? ret : gdx_memcpy_async(dev, t->out + job->batch * SZ, job->buf, SZ, s);
		ret = ret ? ret : gdx_stream_launch_host_func(s, hf_verify, r);
		break;
	case R_NONE:
		break;
	}
	if (t->st[k].stop_at && job->batch == t->stop_batch)
		gdx_pipeline_stop(job->pipe);
	return ret ? ret : gdx_stream_launch_host_func(s, hf_end, r);
}

static int host_stage(const struct gdx_pipeline_job *job, void *arg)
{
	struct tctx *t = arg;
	unsigned k = job->stage;
	uint64_t b = job->batch;
	int ret = 0;

	t->ts0[k][b] = gdx_now_ns();
	if (t->st[k].gate)
		gate_wait(t);
	sleep_us(t->st[k].sleep_us);
	if (t->st[k].fail_batch == (int)b)
		return gdx_pipeline_job_fail(job, -EPIPE, "injected failure in %s stage", "host");
	switch (t->st[k].role) {
	case R_LOAD:
		ret = gdx_memcpy(dev, job->buf, t->src + b * SZ, SZ);
		break;
	case R_XFORM:
		ret = gdx_memcpy(dev, t->tmp[k], job->buf, SZ);
		xform(t->tmp[k], b);
		ret = ret ? ret : gdx_memcpy(dev, job->buf, t->tmp[k], SZ);
		break;
	case R_VERIFY:
		ret = gdx_memcpy(dev, t->out + b * SZ, job->buf, SZ);
		t->got[b] = fnv(t->out + b * SZ, SZ);
		break;
	case R_NONE:
		break;
	}
	if (t->st[k].stop_at && b == t->stop_batch)
		gdx_pipeline_stop(job->pipe);
	t->ts1[k][b] = gdx_now_ns();
	t->ran[k]++;
	return ret;
}

/* ---- set-up ---------------------------------------------------------------------- */

static struct tctx *make_ctx(const struct tstage *st, unsigned nst)
{
	struct tctx *t = calloc(1, sizeof(*t));
	bool has_xform = false;

	assert_non_null(t);
	t->dev = dev;
	t->nst = nst;
	memcpy(t->st, st, nst * sizeof(*st));
	pthread_mutex_init(&t->gm, NULL);
	pthread_cond_init(&t->gc, NULL);
	/*
	 * Pinned: under CUDA an asynchronous copy into pageable memory returns
	 * only once it has run, which would block the producer behind the very
	 * stages it is enqueuing (and never return behind a closed gate).
	 */
	assert_int_equal(gdx_pinned_alloc(dev, (size_t)NB_MAX * SZ, (void **)&t->src), 0);
	assert_int_equal(gdx_pinned_alloc(dev, (size_t)NB_MAX * SZ, (void **)&t->out), 0);
	assert_int_equal(gdx_pinned_alloc(dev, sizeof(*t->gate_word), (void **)&t->gate_word), 0);
	*t->gate_word = 0;
	memset(t->out, 0, (size_t)NB_MAX * SZ);
	t_fill(t->src, (size_t)NB_MAX * SZ, 42);
	for (unsigned k = 0; k < nst; k++) {
		has_xform |= st[k].role == R_XFORM;
		t->tmp[k] = malloc(SZ);
	}
	for (uint64_t b = 0; b < NB_MAX; b++) {
		unsigned char *e = malloc(SZ);

		memcpy(e, t->src + b * SZ, SZ);
		if (has_xform)
			xform(e, b);
		t->want[b] = fnv(e, SZ);
		free(e);
	}
	return t;
}

static void add_test_stage(struct tctx *t, unsigned k)
{
	struct gdx_stage_desc d;
	char name[16];

	snprintf(name, sizeof(name), "s%u%c", k, t->st[k].kind);
	gdx_stage_desc_init(&d, sizeof(d));
	d.name = name;
	d.kind = t->st[k].kind == 'D' ? GDX_STAGE_DEVICE : GDX_STAGE_HOST;
	d.enqueue = dev_stage;
	d.run = host_stage;
	d.arg = t;
	assert_int_equal(gdx_pipeline_add_stage(t->p, &d), (int)k);
}

static void make_pipe_spin(struct tctx *t, unsigned nslots, unsigned ahead, int spin_us)
{
	struct gdx_pipeline_opts o;

	gdx_pipeline_opts_init(&o, sizeof(o));
	o.nslots = nslots;
	o.ahead = ahead;
	o.slot_bytes = SZ;
	o.spin_us = spin_us;
	assert_int_equal(gdx_pipeline_create(dev, &o, &t->p), 0);
	for (unsigned i = 0; i < nslots; i++)
		assert_int_equal(gdx_pinned_alloc(dev, SZ, &t->pin[i]), 0);
}

static void make_pipe(struct tctx *t, unsigned nslots, unsigned ahead)
{
	make_pipe_spin(t, nslots, ahead, -1);
}

static struct tctx *make(const struct tstage *st, unsigned nst, unsigned nslots, unsigned ahead)
{
	struct tctx *t = make_ctx(st, nst);

	make_pipe(t, nslots, ahead);
	for (unsigned k = 0; k < nst; k++)
		add_test_stage(t, k);
	return t;
}

static void destroy(struct tctx *t)
{
	unsigned n = gdx_pipeline_nslots(t->p);

	gdx_pipeline_destroy(t->p);
	for (unsigned i = 0; i < n; i++)
		gdx_pinned_free(dev, t->pin[i]);
	for (unsigned k = 0; k < t->nst; k++)
		free(t->tmp[k]);
	gdx_pinned_free(dev, t->src);
	gdx_pinned_free(dev, t->out);
	gdx_pinned_free(dev, t->gate_word);
	free(t);
}

static void check_data(struct tctx *t, uint64_t n)
{
	for (uint64_t b = 0; b < n; b++) {
		if (t->got[b] != t->want[b])
			fail_msg("batch %llu: checksum %016llx, want %016llx",
				 (unsigned long long)b, (unsigned long long)t->got[b],
				 (unsigned long long)t->want[b]);
	}
}

/* Each batch's stages ran in order, and each stage ran the batches in order. */
static void check_order(struct tctx *t, uint64_t n)
{
	for (uint64_t b = 0; b < n; b++) {
		for (unsigned k = 0; k < t->nst; k++) {
			assert_true(t->ts0[k][b] && t->ts1[k][b] >= t->ts0[k][b]);
			if (k + 1 < t->nst)
				assert_true(t->ts1[k][b] <= t->ts0[k + 1][b]);
			if (b + 1 < n)
				assert_true(t->ts1[k][b] <= t->ts0[k][b + 1]);
		}
	}
}

/* Stage 0 of batch b started only after the last stage of b - S had finished. */
static void check_slot_reuse(struct tctx *t, uint64_t n)
{
	unsigned s = gdx_pipeline_nslots(t->p), last = t->nst - 1;

	for (uint64_t b = s; b < n; b++)
		assert_true(t->ts0[0][b] >= t->ts1[last][b - s]);
}

/* Times stage k of batch i+1 overlapped stage k+1 of batch i. */
static unsigned overlaps(struct tctx *t, unsigned k, uint64_t n)
{
	unsigned c = 0;

	for (uint64_t i = 0; i + 1 < n; i++) {
		if (t->ts0[k][i + 1] < t->ts1[k + 1][i] && t->ts0[k + 1][i] < t->ts1[k][i + 1])
			c++;
	}
	return c;
}

static void check_counters(struct tctx *t, uint64_t n)
{
	struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };

	assert_int_equal(gdx_pipeline_stats(t->p, &ps), 0);
	assert_int_equal(ps.submitted, n);
	assert_int_equal(ps.completed, n);
	for (unsigned k = 0; k < t->nst; k++) {
		struct gdx_pipeline_stage_stats ss = { .struct_size = sizeof(ss) };

		assert_int_equal(gdx_pipeline_stage_stats(t->p, k, &ss), 0);
		assert_int_equal(ss.batches, n);
		assert_int_equal(ss.errors, 0);
		assert_int_equal(ss.skipped, 0);
		assert_int_equal(ss.timed, n - t->nst);	/* warm-up: one batch per stage */
		assert_int_equal(t->ran[k], n);
		/* A stage that sleeps lasts at least that long on any clock. */
		assert_true(ss.min_ns >= (uint64_t)t->st[k].sleep_us * 1000);
		assert_true(ss.min_ns <= ss.mean_ns && ss.mean_ns <= ss.max_ns);
	}
	assert_true(ps.step_ns > 0);
	assert_true(ps.inflight_max >= 1);
}

/* ---- tests ------------------------------------------------------------------------- */

struct probe {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool b_ran, a_saw_b;
};

static void probe_a(void *arg)
{
	struct probe *pr = arg;
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	pthread_mutex_lock(&pr->m);
	while (!pr->b_ran && pthread_cond_timedwait(&pr->c, &pr->m, &until) == 0)
		;
	pr->a_saw_b = pr->b_ran;
	pthread_mutex_unlock(&pr->m);
}

static void probe_b(void *arg)
{
	struct probe *pr = arg;

	pthread_mutex_lock(&pr->m);
	pr->b_ran = true;
	pthread_cond_broadcast(&pr->c);
	pthread_mutex_unlock(&pr->m);
}

/*
 * Whether host functions on two streams can run at the same time.  The
 * emulated device runs each stream on its own thread; CUDA may run them one
 * at a time, and then overlap between two device stages cannot be seen
 * through host-function timestamps.
 */
static bool host_funcs_concurrent(void)
{
	struct probe pr = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false };
	static int known = -1;	/* a serial device holds probe_a for 2 s: ask once */
	struct gdx_stream *a, *b;

	if (known >= 0)
		return known;
	assert_int_equal(gdx_stream_create(dev, &a), 0);
	assert_int_equal(gdx_stream_create(dev, &b), 0);
	assert_int_equal(gdx_stream_launch_host_func(a, probe_a, &pr), 0);
	assert_int_equal(gdx_stream_launch_host_func(b, probe_b, &pr), 0);
	assert_int_equal(gdx_stream_synchronize(a), 0);
	assert_int_equal(gdx_stream_synchronize(b), 0);
	gdx_stream_destroy(a);
	gdx_stream_destroy(b);
	known = pr.a_saw_b;
	return pr.a_saw_b;
}

static void run_shape(const char *shape, unsigned sleep, uint64_t n)
{
	struct tstage st[3];
	struct tctx *t;

	for (unsigned k = 0; k < 3; k++)
		st[k] = (struct tstage){ shape[k], (enum role)(R_LOAD + k), sleep, -1, false, false };
	t = make(st, 3, 3, 3);
	assert_int_equal(gdx_pipeline_run(t->p, n), 0);
	check_data(t, n);
	check_order(t, n);
	check_slot_reuse(t, n);
	check_counters(t, n);
	/* Overlap happened: stage k of batch i+1 ran while stage k+1 of batch i ran. */
	for (unsigned k = 0; k + 1 < 3; k++) {
		unsigned c = overlaps(t, k, n);

		print_message("%s: stage %u/%u overlapped in %u of %llu pairs\n", shape, k, k + 1,
			      c, (unsigned long long)(n - 1));
		if (shape[k] == 'D' && shape[k + 1] == 'D' && !host_funcs_concurrent()) {
			print_message("%s: host functions of two streams run one at a time on %s: "
				      "overlap of stages %u/%u not observable here\n", shape,
				      gdx_device_name(dev), k, k + 1);
			continue;
		}
		assert_true(c >= 1);
	}
	destroy(t);
}

static void order_overlap_device(void **state)
{
	(void)state;
	run_shape("DDD", 2000, 12);
}

static void order_overlap_mixed(void **state)
{
	(void)state;
	run_shape("HDH", 2000, 12);
	run_shape("DHD", 2000, 12);
}

/*
 * A fast first stage and a slow last stage over few slots: any slot handed
 * back before its last stage finished would be overwritten while still read.
 */
static void slot_reuse(void **state)
{
	static const char *const shapes[] = { "DDD", "DDH", "HDD", "HHH" };

	(void)state;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(shapes); i++) {
		struct tstage st[3] = {
			{ shapes[i][0], R_LOAD, 0, -1, false, false },
			{ shapes[i][1], R_XFORM, 0, -1, false, false },
			{ shapes[i][2], R_VERIFY, 700, -1, false, false },
		};
		struct tctx *t = make(st, 3, 2, 6);
		const uint64_t n = 24;

		assert_int_equal(gdx_pipeline_run(t->p, n), 0);
		check_data(t, n);
		check_order(t, n);
		check_slot_reuse(t, n);
		destroy(t);
	}
}

/*
 * The last stage is held until the test opens a gate: the producer can admit
 * S + ahead batches and no more, and NOWAIT says so.  The first stage is not
 * held with it: it still gets the first S batches through, which is what a
 * gate built from a blocking host function breaks on CUDA.
 */
static void back_pressure(void **state)
{
	/*
	 * A device first stage takes a slot back on the device (an event, or
	 * the released word a host tail stores), so S + ahead are in flight;
	 * where the producer hands the slot back (a host first stage, or a
	 * device stage after a host stage), only S.
	 */
	static const struct {
		const char *shape;
		bool on_device;
	} shapes[] = { { "DD", true }, { "DH", true }, { "DHH", true }, { "HH", false },
		       { "DHDH", false } };

	(void)state;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(shapes); i++) {
		const unsigned nst = (unsigned)strlen(shapes[i].shape), last = nst - 1;
		const unsigned S = 2, ahead = 3;
		const unsigned R = shapes[i].on_device ? S + ahead : S;
		struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };
		unsigned admitted = 0;
		struct tstage st[4];
		struct tctx *t;

		for (unsigned k = 0; k < nst; k++)
			st[k] = (struct tstage){ shapes[i].shape[k],
						 k == 0 ? R_LOAD : k == last ? R_VERIFY : R_NONE,
						 0, -1, k == last, false };
		t = make(st, nst, S, ahead);

		for (unsigned b = 0; b < R; b++) {
			assert_int_equal(gdx_pipeline_submit(t->p, NULL, GDX_PIPELINE_NOWAIT), 0);
			admitted++;
		}
		assert_int_equal(gdx_pipeline_submit(t->p, NULL, GDX_PIPELINE_NOWAIT), -EAGAIN);
		assert_int_equal(gdx_pipeline_stats(t->p, &ps), 0);
		assert_int_equal(ps.inflight_max, R);
		assert_int_equal(ps.completed, 0);
		/* The first stage takes the first S batches, and nothing beyond them. */
		for (unsigned ms = 0; t->ran[0] < S && ms < 10000; ms++)
			sleep_us(1000);
		assert_int_equal(t->ran[0], S);
		assert_int_equal(t->ts1[last][0], 0);
		for (unsigned b = S; b < R; b++)
			assert_int_equal(t->ts0[0][b], 0);
		gate_open(t);
		for (unsigned b = admitted; b < 20; b++)
			assert_int_equal(gdx_pipeline_submit(t->p, NULL, 0), 0);
		assert_int_equal(gdx_pipeline_drain(t->p), 0);
		assert_int_equal(gdx_pipeline_stats(t->p, &ps), 0);
		assert_int_equal(ps.completed, 20);
		assert_int_equal(ps.inflight_max, R);
		check_data(t, 20);
		check_order(t, 20);
		check_slot_reuse(t, 20);
		destroy(t);
	}
}

/*
 * Runs a three-stage shape whose last stage takes 1 ms over 2 slots with the
 * given spin time (-1: the knob); the data, the order and the slot reuse
 * must not depend on it.  Returns the waits for submitted batches that
 * outlasted the spin (idle waits are not counted: idle_waits).
 */
static uint64_t run_spin(const char *shape, int spin_us)
{
	struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };
	struct tstage st[3];
	const uint64_t n = 16;
	struct tctx *t;

	for (unsigned k = 0; k < 3; k++)
		st[k] = (struct tstage){ shape[k], (enum role)(R_LOAD + k), k == 2 ? 1000 : 0, -1,
					 false, false };
	t = make_ctx(st, 3);
	make_pipe_spin(t, 2, 2, spin_us);
	for (unsigned k = 0; k < 3; k++)
		add_test_stage(t, k);
	assert_int_equal(gdx_pipeline_run(t->p, n), 0);
	check_data(t, n);
	check_order(t, n);
	check_slot_reuse(t, n);
	assert_int_equal(gdx_pipeline_stats(t->p, &ps), 0);
	destroy(t);
	return ps.long_waits;
}

/*
 * The spin time: its bounds (option and knob), results independent of it,
 * and waiting threads that poll for longer than their waits last do not
 * sleep, where with no spin they do.
 */
static void spin(void **state)
{
	static const char *const shapes[] = { "DDH", "HHH", "DHD" };
	struct gdx_pipeline_opts o;
	struct gdx_pipeline *p;

	(void)state;
	gdx_pipeline_opts_init(&o, sizeof(o));
	assert_int_equal(o.spin_us, -1);
	o.spin_us = -2;
	assert_int_equal(gdx_pipeline_create(dev, &o, &p), -EINVAL);
	o.spin_us = 100001;
	assert_int_equal(gdx_pipeline_create(dev, &o, &p), -EINVAL);
	o.spin_us = 100000;
	assert_int_equal(gdx_pipeline_create(dev, &o, &p), 0);
	gdx_pipeline_destroy(p);
	assert_int_not_equal(gdx_config_set("pipeline.spin_us", "100001"), 0);
	assert_int_not_equal(gdx_config_set("pipeline.spin_us", "-1"), 0);
	assert_int_equal(gdx_cfg_int("pipeline.spin_us"), 200);

	for (size_t i = 0; i < GDX_ARRAY_SIZE(shapes); i++) {
		uint64_t slept, polled;

		/* The knob is where the default comes from. */
		assert_int_equal(gdx_config_set("pipeline.spin_us", "0"), 0);
		slept = run_spin(shapes[i], -1);
		gdx_config_reset();
		polled = run_spin(shapes[i], 20000);
		print_message("%s: waits past the spin: %llu with none, %llu with 20 ms\n",
			      shapes[i], (unsigned long long)slept, (unsigned long long)polled);
		assert_true(slept > 0);
		assert_true(polled < slept);
		run_spin(shapes[i], 200);
	}
}

/*
 * A host stage waiting for a batch the producer has not submitted yet is
 * idle, not in a long wait: batches submitted one at a time, 20 ms apart,
 * without a spin time, leave long_waits at 0 (it counted one per pause).
 */
static void idle_waits(void **state)
{
	struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };
	const struct tstage st = { 'H', R_NONE, 0, -1, false, false };
	const uint64_t n = 8;
	struct tctx *t = make_ctx(&st, 1);

	(void)state;
	make_pipe_spin(t, 2, 2, 0);
	add_test_stage(t, 0);
	for (uint64_t b = 0; b < n; b++) {
		int ret;

		/* the stage may not have let go of the slot's previous batch yet: no wait */
		for (unsigned ms = 0; (ret = gdx_pipeline_submit(t->p, NULL, GDX_PIPELINE_NOWAIT)) ==
		     -EAGAIN && ms < 10000; ms++)
			sleep_us(1000);
		assert_int_equal(ret, 0);
		for (unsigned ms = 0; t->ran[0] <= b && ms < 10000; ms++)
			sleep_us(1000);
		assert_int_equal(t->ran[0], b + 1);
		sleep_us(20000);
	}
	/* before the drain, whose wait for the last batch is the producer's, not idle */
	assert_int_equal(gdx_pipeline_stats(t->p, &ps), 0);
	assert_int_equal(ps.long_waits, 0);
	assert_int_equal(gdx_pipeline_drain(t->p), 0);
	assert_int_equal(gdx_pipeline_stats(t->p, &ps), 0);
	assert_int_equal(ps.completed, n);
	destroy(t);
}

/*
 * Calls into the driver are counted per thread: the producer's include the
 * device stages' events; a host stage after a device stage waits on the
 * word the stream stores after the stage, with no call at all while it
 * polls (the spin time is longer than any wait here).
 */
static void driver_calls(void **state)
{
	struct gdx_pipeline_stage_stats ss = { .struct_size = sizeof(ss) };
	struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };
	struct tstage st[3] = {
		{ 'D', R_LOAD, 0, -1, false, false },
		{ 'D', R_NONE, 0, -1, false, false },
		{ 'H', R_NONE, 0, -1, false, false },
	};
	const uint64_t n = 32;
	struct tctx *t = make_ctx(st, 3);

	(void)state;
	make_pipe_spin(t, 2, 2, 100000);
	for (unsigned k = 0; k < 3; k++)
		add_test_stage(t, k);
	assert_int_equal(gdx_pipeline_run(t->p, n), 0);
	assert_int_equal(gdx_pipeline_stats(t->p, &ps), 0);
	/* Per batch at least: two device stages, each timed by two events. */
	assert_true(ps.producer_calls >= 4 * n);
	assert_true(ps.producer_poll_calls <= ps.producer_calls);
	assert_int_equal(gdx_pipeline_stage_stats(t->p, 2, &ss), 0);
	assert_int_equal(ss.batches, n);
	/*
	 * Only a wait that outlasted the 100 ms spin falls back on the event (a
	 * driver call): on a loaded 2-CPU machine the emulated stream's thread
	 * can be starved that long, and such a wait counts as a long one.
	 */
	if (!ps.long_waits)
		assert_int_equal(ss.calls, 0);
	else
		print_message("%llu waits outlasted the spin; the host stage made %llu calls\n",
			      (unsigned long long)ps.long_waits, (unsigned long long)ss.calls);
	destroy(t);
}

static void expect_failure(struct tctx *t, int err, int stage, uint64_t batch, const char *cause)
{
	struct gdx_pipeline_error e;
	struct gdx_pipeline_stage_stats ss = { .struct_size = sizeof(ss) };
	char buf[256];
	int ret = 0;

	nlog = 0;
	for (unsigned b = 0; b < 40 && !ret; b++)
		ret = gdx_pipeline_submit(t->p, NULL, 0);
	assert_int_equal(ret, err);
	assert_int_equal(gdx_pipeline_drain(t->p), err);
	assert_int_equal(gdx_pipeline_error(t->p, &e), err);
	assert_int_equal(e.stage, stage);
	assert_int_equal(e.batch, batch);
	assert_int_equal(e.slot, (int)(batch % gdx_pipeline_nslots(t->p)));
	assert_non_null(strstr(e.cause, cause));
	gdx_pipeline_strerror(t->p, buf, sizeof(buf));
	assert_non_null(strstr(buf, cause));
	assert_non_null(strstr(buf, e.stage_name));
	assert_int_equal(nlog, 1);
	assert_string_equal(last_log, buf);
	assert_int_equal(gdx_pipeline_stage_stats(t->p, (unsigned)stage, &ss), 0);
	assert_int_equal(ss.errors, 1);
	/* Submitting after a failure reports it again. */
	assert_int_equal(gdx_pipeline_submit(t->p, NULL, 0), err);
	/* Batches before the failed one went all the way through, intact. */
	check_data(t, batch);
}

static void errors(void **state)
{
	static const char *const shapes[] = { "DDD", "DHD", "DDH", "HHH" };

	(void)state;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(shapes); i++) {
		for (int k = 0; k < 3; k++) {
			struct tstage st[3] = {
				{ shapes[i][0], R_LOAD, 0, -1, false, false },
				{ shapes[i][1], R_XFORM, 0, -1, false, false },
				{ shapes[i][2], R_VERIFY, 200, -1, false, false },
			};
			struct tctx *t;
			int err;

			st[k].fail_batch = 7;
			err = st[k].kind == 'D' ? -EIO : -EPIPE;
			t = make(st, 3, 3, 3);
			expect_failure(t, err, k, 7, "injected");
			destroy(t);
		}
	}
}

/* A source for the load stage: memory, a short read at its end, -EIO at one offset. */
struct msrc {
	const unsigned char *base;
	size_t len;
	uint64_t eio_off;
	bool released;
	unsigned flags;		/* or of every read's rd->flags */
};

static void hf_done(void *arg)
{
	struct gdx_pipeline_read *rd = arg;
	int64_t *v = rd->priv;

	rd->done = *v;
}

static int msrc_read(void *ctx, struct gdx_pipeline_read *rd, struct gdx_stream *s)
{
	struct msrc *m = ctx;
	size_t n = rd->off >= m->len ? 0 : GDX_MIN(rd->len, m->len - rd->off);
	int64_t *v = rd->priv;
	int ret = 0;

	*v = rd->off == m->eio_off ? -EIO : (int64_t)n;
	m->flags |= rd->flags;
	if (n && *v >= 0)
		ret = gdx_memcpy_async(dev, rd->dst, m->base + rd->off, n, s);
	return ret ? ret : gdx_stream_launch_host_func(s, hf_done, rd);
}

static void msrc_release(void *ctx)
{
	((struct msrc *)ctx)->released = true;
}

/* A built-in load stage reading from m, then a host stage checksumming each batch. */
static struct tctx *make_load(struct msrc *m, const struct gdx_pipeline_load_opts *lo)
{
	struct tstage st[2] = {
		{ 'D', R_LOAD, 0, -1, false, false },	/* replaced by the built-in stage */
		{ 'H', R_VERIFY, 0, -1, false, false },
	};
	struct gdx_pipeline_source src = { "mem", sizeof(int64_t), msrc_read, NULL, msrc_release, m };
	struct tctx *t = make_ctx(st, 2);

	m->base = t->src;
	make_pipe(t, 3, 3);
	assert_int_equal(gdx_pipeline_add_load(t->p, &src, lo), 0);
	add_test_stage(t, 1);
	return t;
}

/* Runs 25 batches of an input that wraps every 10, checks each, and frees t. */
static void run_wrapped(struct tctx *t)
{
	assert_int_equal(gdx_pipeline_run(t->p, 25), 0);
	for (uint64_t b = 0; b < 25; b++)
		assert_int_equal(t->got[b], t->want[b % 10]);
	destroy(t);
}

static void load_stage(void **state)
{
	struct msrc m = { .len = (size_t)10 * SZ + 100, .eio_off = UINT64_MAX };
	struct gdx_pipeline_load_opts lo;
	struct tctx *t;

	(void)state;
	/* Wrapping over 10 batches: batch b holds input batch b % 10. */
	gdx_pipeline_load_opts_init(&lo, sizeof(lo));
	lo.wrap = (uint64_t)10 * SZ;
	t = make_load(&m, &lo);
	run_wrapped(t);
	assert_true(m.released);
	assert_int_equal(m.flags, 0);

	/* The load's flags reach the source with every read. */
	m.released = false;
	lo.flags = GDX_PIPELINE_LOAD_IN_ORDER;
	t = make_load(&m, &lo);
	assert_int_equal(gdx_pipeline_run(t->p, 5), 0);
	for (uint64_t b = 0; b < 5; b++)
		assert_int_equal(t->got[b], t->want[b]);
	destroy(t);
	assert_int_equal(m.flags, GDX_PIPELINE_LOAD_IN_ORDER);

	/* No wrap: batch 10 is short (100 bytes). */
	m.released = false;
	gdx_pipeline_load_opts_init(&lo, sizeof(lo));
	lo.name = "fileload";
	t = make_load(&m, &lo);
	expect_failure(t, -ENODATA, 0, 10, "short read from mem: 100 of 16384 bytes at offset");
	destroy(t);

	/* A read that fails when it executes. */
	m.eio_off = (uint64_t)4 * SZ;
	t = make_load(&m, NULL);
	expect_failure(t, -EIO, 0, 4, "mem read of 16384 bytes at offset 65536 failed");
	destroy(t);
}

/* The file source: batches come off a file through gdx_file_read_async. */
static struct tctx *make_file_load(struct gdx_file *f, const struct gdx_pipeline_load_opts *lo)
{
	struct tstage st[2] = {
		{ 'D', R_LOAD, 0, -1, false, false },	/* replaced by the built-in stage */
		{ 'H', R_VERIFY, 0, -1, false, false },
	};
	struct tctx *t = make_ctx(st, 2);

	make_pipe(t, 3, 2);
	assert_int_equal(gdx_pipeline_add_file_load(t->p, f, lo), 0);
	add_test_stage(t, 1);
	return t;
}

static void file_load(void **state)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	const size_t len = (size_t)10 * SZ + 100;
	struct meet m = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 2, false, false };
	struct gdx_file_async_stats as = { .struct_size = sizeof(as) };
	struct gdx_file_driver *drv;
	struct gdx_file_io_info info;
	struct gdx_pipeline_load_opts lo;
	struct gdx_file *f;
	struct tctx *t;
	unsigned char *data;
	char path[512];
	int fd;

	(void)state;
	snprintf(path, sizeof(path), "%s/gdx_pipeline_XXXXXX", dir);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	/* The same bytes as every context's input (t_fill is a stream). */
	data = malloc(len);
	t_fill(data, len, 42);
	assert_int_equal(pwrite(fd, data, len, 0), (ssize_t)len);
	free(data);
	assert_int_equal(gdx_file_driver_open(dev, NULL, &drv), 0);
	assert_int_equal(gdx_file_open_fd(drv, fd, NULL, &f), 0);

	/*
	 * Ten whole batches, then again from the start: 25 batches in all.
	 * Batch 0 reads early, and the next read_ahead (the 3 slots) batches
	 * are read ahead at once: the hook holds the first read until a second
	 * one runs beside it.  Every later batch takes over its read ahead, and
	 * the last batch's reads ahead (25..27) are never claimed.
	 */
	gdx_pipeline_load_opts_init(&lo, sizeof(lo));
	assert_int_equal(lo.read_ahead, (unsigned)-1);
	lo.wrap = (uint64_t)10 * SZ;
	gdx_file_set_read_hook(drv, meet_hook, &m);
	assert_int_equal(gdx_file_async_stats(f, &as, GDX_FILE_STATS_RESET), 0);
	t = make_file_load(f, &lo);
	run_wrapped(t);
	assert_int_equal(gdx_file_ahead_wait(f), 3);
	gdx_file_set_read_hook(drv, NULL, NULL);
	assert_false(m.gave_up);
	assert_true(m.met);
	assert_int_equal(gdx_file_async_stats(f, &as, GDX_FILE_STATS_RESET), 0);
	assert_int_equal(as.reads, 28);
	assert_true(as.max_inflight >= 2);
	assert_int_equal(as.early, 25);
	assert_int_equal(as.ahead_hits, 24);
	assert_true(as.ahead_late <= as.ahead_hits);
	assert_true(as.busy_ns > 0 && as.busy_ns <= as.read_ns);
	assert_true(as.max_read_ns > 0 && as.max_read_ns <= as.read_ns);
	assert_int_equal(gdx_file_info(f, &info), 0);
	print_message("file load took path %s: %s; %u reads in flight at most, %llu of 24 "
		      "reads ahead not done at their batch's submission\n",
		      gdx_file_path_name(info.path), info.why, as.max_inflight,
		      (unsigned long long)as.ahead_late);

	/*
	 * Without reads ahead every batch reads early, on its own, but for
	 * batches 5..7, whose ranges are those the run before read ahead for
	 * its batches 25..27: they take those over.
	 */
	lo.read_ahead = 0;
	t = make_file_load(f, &lo);
	run_wrapped(t);
	assert_int_equal(gdx_file_ahead_wait(f), 0);
	assert_int_equal(gdx_file_async_stats(f, &as, GDX_FILE_STATS_RESET), 0);
	assert_int_equal(as.reads, 22);
	assert_int_equal(as.early, 25);
	assert_int_equal(as.ahead_hits, 3);
	lo.read_ahead = (unsigned)-1;

	/* The same, each read started when the stream reaches the load. */
	lo.flags = GDX_PIPELINE_LOAD_IN_ORDER;
	t = make_file_load(f, &lo);
	run_wrapped(t);
	assert_int_equal(gdx_file_async_stats(f, &as, 0), 0);
	assert_int_equal(as.reads, 25);
	assert_int_equal(as.early, 0);

	/* Without wrap, batch 10 ends 16284 bytes past the end of the file. */
	t = make_file_load(f, NULL);
	expect_failure(t, -ENODATA, 0, 10, "short read from file: 100 of 16384 bytes at offset 163840");
	destroy(t);

	assert_int_equal(gdx_file_close(f), 0);
	gdx_file_driver_close(drv);
	close(fd);
}

/* The NVMe-oF source: batches come off a namespace of a gdx target on loopback. */
#define NQN "nqn.2026-11.io.gdx:pipeline"

static struct tctx *make_nvmf_load(struct gdx_nvmf_ctrl *c, const struct gdx_pipeline_load_opts *lo)
{
	struct tstage st[2] = {
		{ 'D', R_LOAD, 0, -1, false, false },	/* replaced by the built-in stage */
		{ 'H', R_VERIFY, 0, -1, false, false },
	};
	struct tctx *t = make_ctx(st, 2);

	make_pipe(t, 3, 2);
	assert_int_equal(gdx_pipeline_add_nvmf_load(t->p, c, 1, lo), 0);
	add_test_stage(t, 1);
	return t;
}

static void nvmf_load(void **state)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	const size_t len = (size_t)10 * SZ;
	struct gdx_nvmf_target_opts to;
	struct gdx_nvmf_host_opts ho;
	struct gdx_pipeline_load_opts lo;
	struct gdx_pipeline_source src;
	struct gdx_nvmf_target *tgt;
	struct gdx_nvmf_ctrl *c;
	unsigned char *data;
	struct tctx *t;
	char path[512], port[16];
	int fd, bound;

	(void)state;
	snprintf(path, sizeof(path), "%s/gdx_pipeline_ns_XXXXXX", dir);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	data = malloc(len);
	t_fill(data, len, 42);	/* the same bytes as every context's input */
	assert_int_equal(pwrite(fd, data, len, 0), (ssize_t)len);
	free(data);
	close(fd);

	gdx_nvmf_target_opts_init(&to, sizeof(to));
	assert_int_equal(gdx_nvmf_target_create(&to, &tgt), 0);
	assert_int_equal(gdx_nvmf_target_add_subsys(tgt, NQN, 1), 0);
	assert_int_equal(gdx_nvmf_target_add_ns(tgt, NQN, 1, path, 512), 0);
	assert_int_equal(gdx_nvmf_target_add_port(tgt, 1, "127.0.0.1", "0"), 0);
	assert_int_equal(gdx_nvmf_target_link(tgt, 1, NQN), 0);
	assert_int_equal(gdx_nvmf_target_start(tgt), 0);
	bound = gdx_nvmf_target_bound_port(tgt, 1);
	assert_true(bound > 0);
	snprintf(port, sizeof(port), "%d", bound);
	gdx_nvmf_host_opts_init(&ho, sizeof(ho));
	assert_int_equal(gdx_nvmf_connect("127.0.0.1", port, NQN, &ho, &c), 0);

	assert_int_equal(gdx_pipeline_source_nvmf(NULL, 1, &src), -EINVAL);
	assert_int_equal(gdx_pipeline_source_nvmf(c, 0, &src), -EINVAL);

	/* Ten batches' worth of namespace, read round twice and a half. */
	gdx_pipeline_load_opts_init(&lo, sizeof(lo));
	lo.wrap = len;
	t = make_nvmf_load(c, &lo);
	run_wrapped(t);

	/* Without wrap, batch 10 starts at the end of the namespace. */
	t = make_nvmf_load(c, NULL);
	expect_failure(t, GDX_E_NVME(0x80), 0, 10, "nvmf read of 16384 bytes at offset 163840 failed");
	destroy(t);

	assert_int_equal(gdx_nvmf_disconnect(c), 0);
	gdx_nvmf_target_destroy(tgt);
	unlink(path);
}

/* A stage stops the pipeline: every admitted batch still goes all the way through. */
static void stop_drains(void **state)
{
	static const char *const shapes[] = { "DDD", "HDH" };

	(void)state;
	for (size_t i = 0; i < GDX_ARRAY_SIZE(shapes); i++) {
		struct tstage st[3] = {
			{ shapes[i][0], R_LOAD, 0, -1, false, false },
			{ shapes[i][1], R_XFORM, 0, -1, false, true },
			{ shapes[i][2], R_VERIFY, 300, -1, false, false },
		};
		struct tctx *t = make(st, 3, 3, 2);
		struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };
		uint64_t n = 0;
		int ret = 0;

		t->stop_batch = 5;
		while (!ret && n < NB_MAX) {
			ret = gdx_pipeline_submit(t->p, NULL, 0);
			n += ret == 0;
		}
		assert_int_equal(ret, -ECANCELED);
		assert_true(n > 5 && n < NB_MAX);
		assert_int_equal(gdx_pipeline_drain(t->p), 0);
		assert_int_equal(gdx_pipeline_stats(t->p, &ps), 0);
		assert_int_equal(ps.submitted, n);
		assert_int_equal(ps.completed, n);
		for (unsigned k = 0; k < 3; k++)
			assert_int_equal(t->ran[k], n);
		check_data(t, n);
		check_order(t, n);
		destroy(t);
	}
}

static int noop_enqueue(const struct gdx_pipeline_job *job, struct gdx_stream *s, void *arg)
{
	(void)job;
	(void)s;
	(void)arg;
	return 0;
}

static int noop_read(void *ctx, struct gdx_pipeline_read *rd, struct gdx_stream *s)
{
	(void)ctx;
	(void)rd;
	(void)s;
	return 0;
}

/* ---- options: a caller's stream, timing off, no warm-up, a failure from a host function ---- */

struct opt_ctx {
	_Atomic unsigned n;
	uint64_t fail_batch;
	struct gdx_pipeline_job const *jobs[64];
};

static void hf_count(void *arg)
{
	struct opt_ctx *o = arg;

	o->n++;
}

static void hf_fail(void *arg)
{
	const struct gdx_pipeline_job *job = arg;

	/* From the device's side, when the work runs: the enqueue had returned 0. */
	gdx_pipeline_job_fail(job, -EBADMSG, "device-side failure at batch %llu",
			      (unsigned long long)job->batch);
}

static int opt_stage(const struct gdx_pipeline_job *job, struct gdx_stream *s, void *arg)
{
	struct opt_ctx *o = arg;

	if (job->batch == o->fail_batch)
		return gdx_stream_launch_host_func(s, hf_fail, (void *)job);
	return gdx_stream_launch_host_func(s, hf_count, o);
}

static void options(void **state)
{
	struct opt_ctx o = { .fail_batch = UINT64_MAX };
	struct gdx_pipeline_stage_stats ss = { .struct_size = sizeof(ss) };
	struct gdx_pipeline_stats ps = { .struct_size = sizeof(ps) };
	struct gdx_pipeline_opts po;
	struct gdx_pipeline_error e;
	struct gdx_stage_desc d;
	struct gdx_pipeline *p;
	struct gdx_stream *mine;

	(void)state;
	assert_int_equal(gdx_stream_create(dev, &mine), 0);
	gdx_pipeline_opts_init(&po, sizeof(po));
	po.timing = 0;
	po.warmup = 0;
	assert_int_equal(gdx_pipeline_create(dev, &po, &p), 0);
	gdx_stage_desc_init(&d, sizeof(d));
	d.kind = GDX_STAGE_DEVICE;
	d.enqueue = opt_stage;
	d.arg = &o;
	d.stream = mine;
	assert_int_equal(gdx_pipeline_add_stage(p, &d), 0);
	d.stream = NULL;
	assert_int_equal(gdx_pipeline_add_stage(p, &d), 1);
	assert_int_equal(gdx_pipeline_run(p, 10), 0);
	assert_ptr_equal(gdx_pipeline_stage_stream(p, 0), mine);
	assert_non_null(gdx_pipeline_stage_stream(p, 1));
	assert_ptr_not_equal(gdx_pipeline_stage_stream(p, 1), mine);
	assert_int_equal(o.n, 20);
	/* Timing off: counters only. */
	assert_int_equal(gdx_pipeline_stage_stats(p, 0, &ss), 0);
	assert_int_equal(ss.batches, 10);
	assert_int_equal(ss.timed, 0);
	assert_int_equal(gdx_pipeline_stats(p, &ps), 0);
	assert_int_equal(ps.completed, 10);
	assert_int_equal(ps.step_ns, 0);
	gdx_pipeline_destroy(p);
	/* The caller's stream outlives the pipeline. */
	assert_int_equal(gdx_stream_synchronize(mine), 0);

	/* Timing on, no warm-up: every batch is in the figures. */
	assert_int_equal(gdx_pipeline_create(dev, NULL, &p), 0);
	gdx_pipeline_opts_init(&po, sizeof(po));
	d.stream = mine;
	assert_int_equal(gdx_pipeline_add_stage(p, &d), 0);
	assert_int_equal(gdx_pipeline_run(p, 10), 0);
	assert_int_equal(gdx_pipeline_stage_stats(p, 0, &ss), 0);
	assert_int_equal(ss.timed, 10 - 1);	/* default warm-up: one batch per stage */
	gdx_pipeline_destroy(p);

	/* A failure reported by a host function the stage enqueued. */
	o.fail_batch = 5;
	assert_int_equal(gdx_pipeline_create(dev, NULL, &p), 0);
	d.stream = NULL;
	assert_int_equal(gdx_pipeline_add_stage(p, &d), 0);
	assert_int_equal(gdx_pipeline_add_stage(p, &d), 1);
	assert_int_equal(gdx_pipeline_run(p, 40), -EBADMSG);
	assert_int_equal(gdx_pipeline_error(p, &e), -EBADMSG);
	assert_int_equal(e.batch, 5);
	assert_int_equal(e.stage, 0);
	assert_string_equal(e.cause, "device-side failure at batch 5");
	assert_int_equal(gdx_pipeline_stage_stats(p, 0, &ss), 0);
	assert_int_equal(ss.errors, 1);
	gdx_pipeline_destroy(p);
	gdx_stream_destroy(mine);
}

static void bad_input(void **state)
{
	struct gdx_pipeline_opts o;
	struct gdx_pipeline *p;
	struct gdx_stage_desc d;
	struct gdx_pipeline_load_opts lo;
	struct msrc m = { 0 };
	struct gdx_pipeline_source src = { "mem", 0, noop_read, NULL, msrc_release, &m };
	struct gdx_pipeline_error e;

	(void)state;
	gdx_pipeline_opts_init(&o, sizeof(o));
	o.nslots = 0;
	assert_int_equal(gdx_pipeline_create(dev, &o, &p), -EINVAL);
	o.nslots = GDX_PIPELINE_MAX_SLOTS + 1;
	assert_int_equal(gdx_pipeline_create(dev, &o, &p), -EINVAL);
	assert_int_equal(gdx_pipeline_create(NULL, NULL, &p), -EINVAL);

	assert_int_equal(gdx_pipeline_create(dev, NULL, &p), 0);
	/* No stages yet. */
	assert_int_equal(gdx_pipeline_run(p, 1), -EINVAL);
	gdx_pipeline_destroy(p);

	assert_int_equal(gdx_pipeline_create(dev, NULL, &p), 0);
	gdx_stage_desc_init(&d, sizeof(d));
	d.kind = GDX_STAGE_DEVICE;
	assert_int_equal(gdx_pipeline_add_stage(p, &d), -EINVAL);	/* no enqueue */
	d.kind = GDX_STAGE_HOST;
	d.enqueue = noop_enqueue;
	assert_int_equal(gdx_pipeline_add_stage(p, &d), -EINVAL);	/* no run */
	d.kind = 7;
	assert_int_equal(gdx_pipeline_add_stage(p, &d), -EINVAL);
	/* The load stage needs slot buffers; a failed add still releases the source. */
	assert_int_equal(gdx_pipeline_add_load(p, &src, NULL), -EINVAL);
	assert_true(m.released);
	d.kind = GDX_STAGE_DEVICE;
	for (int i = 0; i < GDX_PIPELINE_MAX_STAGES; i++)
		assert_int_equal(gdx_pipeline_add_stage(p, &d), i);
	assert_int_equal(gdx_pipeline_add_stage(p, &d), -ENOSPC);
	assert_int_equal(gdx_pipeline_submit(p, NULL, 0x80), -EINVAL);
	assert_int_equal(gdx_pipeline_run(p, 3), 0);
	assert_int_equal(gdx_pipeline_add_stage(p, &d), -EBUSY);
	assert_int_equal(gdx_pipeline_set_slot_user(p, 0, &m), -EBUSY);
	assert_int_equal(gdx_pipeline_slot_buf(p, 99, NULL, NULL), -EINVAL);
	assert_int_equal(gdx_pipeline_error(p, &e), 0);
	gdx_pipeline_destroy(p);

	gdx_pipeline_opts_init(&o, sizeof(o));
	o.slot_bytes = 4096;
	assert_int_equal(gdx_pipeline_create(dev, &o, &p), 0);
	gdx_pipeline_load_opts_init(&lo, sizeof(lo));
	lo.batch_bytes = 8192;	/* larger than a slot */
	m.released = false;
	assert_int_equal(gdx_pipeline_add_load(p, &src, &lo), -EINVAL);
	assert_true(m.released);
	lo.batch_bytes = 0;
	lo.flags = 0x80;	/* unknown */
	m.released = false;
	assert_int_equal(gdx_pipeline_add_load(p, &src, &lo), -EINVAL);
	assert_true(m.released);
	lo.flags = 0;
	lo.read_ahead = GDX_PIPELINE_LOAD_READ_AHEAD_MAX + 1;
	m.released = false;
	assert_int_equal(gdx_pipeline_add_load(p, &src, &lo), -EINVAL);
	assert_true(m.released);
	/* A source that never reports its read is caught by the load stage. */
	m.released = false;
	assert_int_equal(gdx_pipeline_add_load(p, &src, NULL), 0);
	assert_int_equal(gdx_pipeline_run(p, 2), -EPROTO);
	gdx_pipeline_destroy(p);
	assert_true(m.released);
}

static int setup(void **state)
{
	(void)state;
	return gdx_device_open(NULL, &dev);
}

static int teardown(void **state)
{
	(void)state;
	gdx_device_close(dev);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(order_overlap_device),
		cmocka_unit_test(order_overlap_mixed),
		cmocka_unit_test(slot_reuse),
		cmocka_unit_test(back_pressure),
		cmocka_unit_test(spin),
		cmocka_unit_test(idle_waits),
		cmocka_unit_test(driver_calls),
		cmocka_unit_test(errors),
		cmocka_unit_test(load_stage),
		cmocka_unit_test(file_load),
		cmocka_unit_test(nvmf_load),
		cmocka_unit_test(stop_drains),
		cmocka_unit_test(options),
		cmocka_unit_test(bad_input),
	};

	gdx_log_set_level(GDX_LOG_ERROR);
	gdx_log_set_callback(log_cb, NULL);
	return cmocka_run_group_tests(tests, setup, teardown);
}
