/* SPDX-License-Identifier: MIT */
/*
 * The load stage's NVMe-oF source: a namespace of a connected controller,
 * read in stream order with gdx_nvmf_submit_async straight into the slot's
 * device buffer (through the host's bounce ring where the transport cannot
 * reach device memory).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <gdx/nvmf.h>
#include <gdx/pipeline.h>

struct nvmf_src {
	struct gdx_nvmf_ctrl *ctrl;
	uint32_t nsid;
};

static int nvmf_read_async(void *ctx, struct gdx_pipeline_read *rd, struct gdx_stream *s)
{
	struct nvmf_src *ns = ctx;
	struct gdx_nvmf_io *io = rd->priv;

	memset(io, 0, sizeof(*io));
	io->op = GDX_NVMF_OP_READ;
	io->nsid = ns->nsid;
	io->offset = rd->off;
	io->len = rd->len;
	io->buf = rd->dst;
	return gdx_nvmf_submit_async(ns->ctrl, io, 1, s);
}

/* The I/O reports 0 or a code; the load stage wants bytes read. */
static void nvmf_read_complete(void *ctx, struct gdx_pipeline_read *rd)
{
	struct gdx_nvmf_io *io = rd->priv;

	(void)ctx;
	if (io->result == -EINPROGRESS)
		return;		/* never ran: the stage reports it */
	rd->done = io->result < 0 ? io->result : (int64_t)io->len;
}

static void nvmf_release(void *ctx)
{
	free(ctx);
}

int gdx_pipeline_source_nvmf(struct gdx_nvmf_ctrl *c, uint32_t nsid,
			     struct gdx_pipeline_source *src)
{
	struct nvmf_src *ns;

	if (!c || !nsid || !src)
		return -EINVAL;
	ns = calloc(1, sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	ns->ctrl = c;
	ns->nsid = nsid;
	memset(src, 0, sizeof(*src));
	src->name = "nvmf";
	src->priv_size = sizeof(struct gdx_nvmf_io);
	src->read_async = nvmf_read_async;
	src->complete = nvmf_read_complete;
	src->release = nvmf_release;
	src->ctx = ns;
	return 0;
}

int gdx_pipeline_add_nvmf_load(struct gdx_pipeline *p, struct gdx_nvmf_ctrl *c, uint32_t nsid,
			       const struct gdx_pipeline_load_opts *o)
{
	struct gdx_pipeline_source src;
	int ret = gdx_pipeline_source_nvmf(c, nsid, &src);

	return ret ? ret : gdx_pipeline_add_load(p, &src, o);
}
