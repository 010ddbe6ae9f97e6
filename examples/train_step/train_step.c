/* SPDX-License-Identifier: MIT */
/*
 * The training step with the compute done on the host: the stage copies the
 * batch to pinned memory, a host function on the stage's stream computes,
 * and the result goes back to device memory, all in stream order.  Runs on
 * any device; CI runs it on the emulated one.
 */
#include <errno.h>
#include <stdlib.h>

#include "train_step.h"

struct host_slot {
	uint64_t mark[TS_NMARKS];	/* host clock, ns */
	uint32_t *in_pin, *out_pin;
};

struct host_call {
	struct ts_ctx *c;
	struct host_slot *hs;
	enum ts_mark m;
	uint64_t batch;
	double us;
};

static int host_slot_init(struct ts_ctx *c, struct ts_slot *s)
{
	struct host_slot *hs = calloc(1, sizeof(*hs));
	int ret;

	if (!hs)
		return -ENOMEM;
	s->priv = hs;
	ret = gdx_pinned_alloc(ts_device(c), ts_in_bytes(c), (void **)&hs->in_pin);
	return ret ? ret : gdx_pinned_alloc(ts_device(c), ts_out_bytes(c), (void **)&hs->out_pin);
}

static void host_slot_fini(struct ts_ctx *c, struct ts_slot *s)
{
	struct host_slot *hs = s->priv;

	if (!hs)
		return;
	if (hs->in_pin)
		gdx_pinned_free(ts_device(c), hs->in_pin);
	if (hs->out_pin)
		gdx_pinned_free(ts_device(c), hs->out_pin);
	free(hs);
	s->priv = NULL;
}

static int launch(struct ts_ctx *c, struct ts_slot *s, gdx_host_fn fn, enum ts_mark m,
		  uint64_t batch, double us, struct gdx_stream *st)
{
	struct host_call *hc = malloc(sizeof(*hc));
	int ret;

	if (!hc)
		return -ENOMEM;
	*hc = (struct host_call){ c, s->priv, m, batch, us };
	ret = gdx_stream_launch_host_func(st, fn, hc);
	if (ret)
		free(hc);
	return ret;
}

static void hf_mark(void *arg)
{
	struct host_call *hc = arg;

	hc->hs->mark[hc->m] = ts_now_ns();
	free(hc);
}

static void hf_pad(void *arg)
{
	struct host_call *hc = arg;

	ts_wait_until(hc->c, hc->hs->mark[hc->m] + (uint64_t)(hc->us * 1e3));
	free(hc);
}

static void hf_compute(void *arg)
{
	struct host_call *hc = arg;

	ts_reference(hc->hs->in_pin, ts_in_bytes(hc->c) / 4, hc->hs->out_pin,
		     ts_out_bytes(hc->c) / 4, hc->batch);
	free(hc);
}

static int host_mark(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, struct gdx_stream *st)
{
	return launch(c, s, hf_mark, m, 0, 0, st);
}

static int host_pad(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, double us,
		    struct gdx_stream *st)
{
	return launch(c, s, hf_pad, m, 0, us, st);
}

static int host_compute(struct ts_ctx *c, struct ts_slot *s, uint64_t batch, struct gdx_stream *st)
{
	struct host_slot *hs = s->priv;
	int ret = gdx_memcpy_async(ts_device(c), hs->in_pin, s->in, ts_in_bytes(c), st);

	ret = ret ? ret : launch(c, s, hf_compute, TS_MARK_COMPUTE, batch, 0, st);
	return ret ? ret : gdx_memcpy_async(ts_device(c), s->out, hs->out_pin, ts_out_bytes(c), st);
}

static const struct ts_provider host_provider = {
	.name = "host",
	.slot_init = host_slot_init,
	.slot_fini = host_slot_fini,
	.mark = host_mark,
	.pad = host_pad,
	.compute = host_compute,
};

int main(int argc, char **argv)
{
	return ts_main(argc, argv, &host_provider);
}
