/* SPDX-License-Identifier: MIT */
/*
 * The built-in load stage: reads batch b of a source into its slot's buffer
 * on the stage's stream.  The source only has to enqueue a read and report
 * the bytes read when it executes; the stage turns a failed or short read
 * into a pipeline failure naming the offset and the counts.  Files plug in
 * through gdx_file_read_async; an NVMe-oF namespace is another source.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <gdx/pipeline.h>

#include "common/util.h"

/* Stored before the read is enqueued, so a source that never reports is caught. */
#define LOAD_PENDING INT64_MIN

struct load {
	struct gdx_pipeline_source src;
	uint64_t offset, stride, wrap;
	size_t bytes;
	unsigned flags;
	unsigned read_ahead;
	uint64_t next_ahead;	/* first batch not yet prefetched */
	size_t priv_off;	/* of the source's bytes in the job's scratch */
};

static uint64_t load_offset(const struct load *l, uint64_t batch)
{
	uint64_t rel = batch * l->stride;

	return l->offset + (l->wrap ? rel % l->wrap : rel);
}

/* The job's scratch: the read, then the source's own bytes. */
static struct gdx_pipeline_read *job_read(const struct gdx_pipeline_job *job)
{
	return job->scratch;
}

static int load_enqueue(const struct gdx_pipeline_job *job, struct gdx_stream *s, void *arg)
{
	struct load *l = arg;
	struct gdx_pipeline_read *rd = job_read(job);
	int ret;

	rd->dst = job->buf;
	rd->len = l->bytes;
	rd->off = load_offset(l, job->batch);
	rd->done = LOAD_PENDING;
	rd->priv = l->src.priv_size ? (char *)job->scratch + l->priv_off : NULL;
	rd->flags = l->flags;
	ret = l->src.read_async(l->src.ctx, rd, s);
	/* One thread feeds the stage's stream, batches in order: next_ahead needs no lock. */
	if (ret || !l->src.prefetch || (l->flags & GDX_PIPELINE_LOAD_IN_ORDER))
		return ret;
	/*
	 * Each read then starts read_ahead batches before its own is submitted:
	 * it may take that many steps, on one of the file layer's workers while
	 * the reads of the batches around it run on others, before its stream
	 * has to wait for it.
	 */
	for (uint64_t b = GDX_MAX(job->batch + 1, l->next_ahead);
	     b <= job->batch + l->read_ahead; b++)
		l->src.prefetch(l->src.ctx, load_offset(l, b), l->bytes);
	l->next_ahead = GDX_MAX(l->next_ahead, job->batch + l->read_ahead + 1);
	return 0;
}

static int load_check(const struct gdx_pipeline_job *job, void *arg)
{
	struct load *l = arg;
	struct gdx_pipeline_read *rd = job_read(job);

	if (l->src.complete)
		l->src.complete(l->src.ctx, rd);
	if (rd->done == LOAD_PENDING)
		return gdx_pipeline_job_fail(job, -EPROTO,
					     "%s source never reported the read at offset %" PRIu64,
					     l->src.name, rd->off);
	if (rd->done < 0)
		return gdx_pipeline_job_fail(job, (int)rd->done,
					     "%s read of %zu bytes at offset %" PRIu64 " failed",
					     l->src.name, rd->len, rd->off);
	if ((uint64_t)rd->done != rd->len)
		return gdx_pipeline_job_fail(job, -ENODATA,
					     "short read from %s: %" PRId64 " of %zu bytes at offset %"
					     PRIu64, l->src.name, rd->done, rd->len, rd->off);
	return 0;
}

static void load_fini(void *arg)
{
	struct load *l = arg;

	if (l->src.release)
		l->src.release(l->src.ctx);
	free(l);
}

void gdx_pipeline_load_opts_init(struct gdx_pipeline_load_opts *o, size_t struct_size)
{
	struct gdx_pipeline_load_opts def = {
		.struct_size = sizeof(def),
		.read_ahead = (unsigned)-1,
	};

	memset(o, 0, struct_size);
	memcpy(o, &def, GDX_MIN(struct_size, sizeof(def)));
	o->struct_size = GDX_MIN(struct_size, sizeof(def));
}

int gdx_pipeline_add_load(struct gdx_pipeline *p, const struct gdx_pipeline_source *src,
			  const struct gdx_pipeline_load_opts *o)
{
	struct gdx_pipeline_load_opts opts;
	struct gdx_stage_desc d;
	struct load *l;
	size_t slot_bytes = 0;
	int ret = -EINVAL;

	if (!src)
		return -EINVAL;
	if (!src->read_async || src->priv_size > (1u << 20))
		goto release;
	gdx_pipeline_load_opts_init(&opts, sizeof(opts));
	if (o && o->struct_size >= offsetof(struct gdx_pipeline_load_opts, wrap))
		memcpy(&opts, o, GDX_MIN(o->struct_size, sizeof(opts)));
	else if (o)
		goto release;
	if (!p || gdx_pipeline_slot_buf(p, 0, NULL, &slot_bytes) || !slot_bytes)
		goto release;
	if (!opts.batch_bytes)
		opts.batch_bytes = slot_bytes;
	if (opts.batch_bytes > slot_bytes || (opts.flags & ~GDX_PIPELINE_LOAD_IN_ORDER))
		goto release;
	if (!opts.stride)
		opts.stride = opts.batch_bytes;
	if (opts.read_ahead == (unsigned)-1)
		opts.read_ahead = GDX_MIN(gdx_pipeline_nslots(p), GDX_PIPELINE_LOAD_READ_AHEAD_MAX);
	if (opts.read_ahead > GDX_PIPELINE_LOAD_READ_AHEAD_MAX)
		goto release;
	l = calloc(1, sizeof(*l));
	if (!l) {
		ret = -ENOMEM;
		goto release;
	}
	l->src = *src;
	if (!l->src.name)
		l->src.name = "source";
	l->offset = opts.offset;
	l->stride = opts.stride;
	l->wrap = opts.wrap;
	l->bytes = opts.batch_bytes;
	l->flags = opts.flags;
	l->read_ahead = opts.read_ahead;
	l->priv_off = GDX_ALIGN_UP(sizeof(struct gdx_pipeline_read), (size_t)16);

	gdx_stage_desc_init(&d, sizeof(d));
	d.name = opts.name ? opts.name : "load";
	d.kind = GDX_STAGE_DEVICE;
	d.enqueue = load_enqueue;
	d.check = load_check;
	d.fini = load_fini;
	d.arg = l;
	d.scratch_size = l->priv_off + src->priv_size;
	ret = gdx_pipeline_add_stage(p, &d);
	if (ret < 0) {
		free(l);
		goto release;
	}
	return ret;
release:
	if (src->release)
		src->release(src->ctx);
	return ret;
}
