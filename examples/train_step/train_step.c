/* SPDX-License-Identifier: MIT */
/*
 * The training step with the compute done on the host: the stage copies the
 * batch to pinned memory, the host computes, and the result goes back to
 * device memory, all in stream order.  Runs on any device; CI runs it on the
 * emulated one.
 *
 * The compute and the padding to a stage's length run on a thread of the
 * slot's, not in host functions: CUDA runs the host functions of all streams
 * on one thread, so a host function that computed or slept would hold up the
 * other stages' streams too and no two stages could overlap.  A host function
 * only hands the work to the slot's thread; the stream then waits on the
 * slot's gate word in pinned memory (gdx_stream_wait_value32), which the
 * thread stores once the work is done.  A slot's batches go through its
 * stages one after another, so its work items come in order and one thread
 * and one word serve them all.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "train_step.h"

struct host_call;

struct host_slot {
	uint64_t mark[TS_NMARKS];	/* host clock, ns */
	uint32_t *in_pin, *out_pin;
	uint32_t *gate;		/* pinned: the value of the last work item done */
	uint32_t seq;		/* the value of the last work item enqueued (atomic) */
	pthread_t thread;
	bool thread_up, quit;
	pthread_mutex_t m;
	pthread_cond_t cv;
	struct host_call *head, **tail;
};

enum host_work { HW_PAD, HW_COMPUTE };

struct host_call {
	struct host_call *next;
	struct ts_ctx *c;
	struct host_slot *hs;
	enum host_work w;
	enum ts_mark m;
	uint64_t batch;
	double us;
	uint64_t until;		/* HW_PAD: host clock, set when the stream gets there */
	uint32_t value;
};

static void *slot_main(void *arg)
{
	struct host_slot *hs = arg;

	pthread_mutex_lock(&hs->m);
	for (;;) {
		struct host_call *hc;

		while (!hs->head && !hs->quit)
			pthread_cond_wait(&hs->cv, &hs->m);
		hc = hs->head;
		if (!hc)
			break;
		hs->head = hc->next;
		if (!hs->head)
			hs->tail = &hs->head;
		pthread_mutex_unlock(&hs->m);
		if (hc->w == HW_PAD)
			ts_wait_until(hc->c, hc->until);
		else
			ts_reference(hs->in_pin, ts_in_bytes(hc->c) / 4, hs->out_pin,
				     ts_out_bytes(hc->c) / 4, hc->batch);
		__atomic_store_n(hs->gate, hc->value, __ATOMIC_RELEASE);
		free(hc);
		pthread_mutex_lock(&hs->m);
	}
	pthread_mutex_unlock(&hs->m);
	return NULL;
}

static int host_slot_init(struct ts_ctx *c, struct ts_slot *s)
{
	struct host_slot *hs = calloc(1, sizeof(*hs));
	int ret;

	if (!hs)
		return -ENOMEM;
	s->priv = hs;
	pthread_mutex_init(&hs->m, NULL);
	pthread_cond_init(&hs->cv, NULL);
	hs->tail = &hs->head;
	ret = gdx_pinned_alloc(ts_device(c), ts_in_bytes(c), (void **)&hs->in_pin);
	ret = ret ? ret : gdx_pinned_alloc(ts_device(c), ts_out_bytes(c), (void **)&hs->out_pin);
	ret = ret ? ret : gdx_pinned_alloc(ts_device(c), sizeof(*hs->gate), (void **)&hs->gate);
	if (ret)
		return ret;
	*hs->gate = 0;
	ret = -pthread_create(&hs->thread, NULL, slot_main, hs);
	hs->thread_up = !ret;
	return ret;
}

/* After the pipeline is destroyed: its streams are done, so is every work item. */
static void host_slot_fini(struct ts_ctx *c, struct ts_slot *s)
{
	struct host_slot *hs = s->priv;

	if (!hs)
		return;
	if (hs->thread_up) {
		pthread_mutex_lock(&hs->m);
		hs->quit = true;
		pthread_cond_signal(&hs->cv);
		pthread_mutex_unlock(&hs->m);
		pthread_join(hs->thread, NULL);
	}
	if (hs->in_pin)
		gdx_pinned_free(ts_device(c), hs->in_pin);
	if (hs->out_pin)
		gdx_pinned_free(ts_device(c), hs->out_pin);
	if (hs->gate)
		gdx_pinned_free(ts_device(c), hs->gate);
	pthread_mutex_destroy(&hs->m);
	pthread_cond_destroy(&hs->cv);
	free(hs);
	s->priv = NULL;
}

static void hf_mark(void *arg)
{
	struct host_call *hc = arg;

	hc->hs->mark[hc->m] = ts_now_ns();
	free(hc);
}

/* In stream order: hands the work to the slot's thread, which never waits on us. */
static void hf_post(void *arg)
{
	struct host_call *hc = arg;
	struct host_slot *hs = hc->hs;

	if (hc->w == HW_PAD)
		hc->until = hs->mark[hc->m] + (uint64_t)(hc->us * 1e3);
	pthread_mutex_lock(&hs->m);
	*hs->tail = hc;
	hs->tail = &hc->next;
	pthread_cond_signal(&hs->cv);
	pthread_mutex_unlock(&hs->m);
}

static struct host_call *call(struct ts_ctx *c, struct ts_slot *s, enum host_work w,
			      enum ts_mark m, uint64_t batch, double us)
{
	struct host_call *hc = malloc(sizeof(*hc));

	if (hc)
		*hc = (struct host_call){ NULL, c, s->priv, w, m, batch, us, 0, 0 };
	return hc;
}

/* The stream goes on once the slot's thread has done the work. */
static int post(struct ts_ctx *c, struct ts_slot *s, enum host_work w, enum ts_mark m,
		uint64_t batch, double us, struct gdx_stream *st)
{
	struct host_slot *hs = s->priv;
	struct host_call *hc = call(c, s, w, m, batch, us);
	uint32_t value;
	int ret;

	if (!hc)
		return -ENOMEM;
	value = hc->value = __atomic_add_fetch(&hs->seq, 1, __ATOMIC_RELAXED);
	ret = gdx_stream_launch_host_func(st, hf_post, hc);
	if (ret) {
		free(hc);
		return ret;
	}
	/* hc is the slot thread's now, which may already have freed it. */
	return gdx_stream_wait_value32(st, hs->gate, value);
}

static int host_mark(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, struct gdx_stream *st)
{
	struct host_call *hc = call(c, s, HW_PAD, m, 0, 0);
	int ret;

	if (!hc)
		return -ENOMEM;
	ret = gdx_stream_launch_host_func(st, hf_mark, hc);
	if (ret)
		free(hc);
	return ret;
}

static int host_pad(struct ts_ctx *c, struct ts_slot *s, enum ts_mark m, double us,
		    struct gdx_stream *st)
{
	return post(c, s, HW_PAD, m, 0, us, st);
}

static int host_compute(struct ts_ctx *c, struct ts_slot *s, uint64_t batch, double us,
			struct gdx_stream *st)
{
	struct host_slot *hs = s->priv;
	int ret = host_mark(c, s, TS_MARK_COMPUTE, st);

	ret = ret ? ret : gdx_memcpy_async(ts_device(c), hs->in_pin, s->in, ts_in_bytes(c), st);
	ret = ret ? ret : post(c, s, HW_COMPUTE, TS_MARK_COMPUTE, batch, 0, st);
	ret = ret ? ret : gdx_memcpy_async(ts_device(c), s->out, hs->out_pin, ts_out_bytes(c), st);
	return ret ? ret : host_pad(c, s, TS_MARK_COMPUTE, us, st);
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
