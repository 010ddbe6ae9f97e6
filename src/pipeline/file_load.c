/* SPDX-License-Identifier: MIT */
/*
 * The load stage's file source: a thin adapter over gdx_file_read_async_ex.
 * The stage fixes each batch's offset at submission, so the storage read can
 * start then (GDX_FILE_ASYNC_EARLY), or a batch or two before as a read ahead,
 * and be done before the stream reaches the load: what is left in stream
 * order is the copy into the slot's buffer.
 */
#include <errno.h>
#include <string.h>
#include <sys/types.h>

#include <gdx/file.h>
#include <gdx/pipeline.h>


/* Never a result of the file layer (bytes, an errno, or a gdx code). */
#define FILE_PENDING ((ssize_t)-0x7fff0000)

/* The file layer reads the offset and writes the result when the read runs. */
struct file_read {
	off_t off;
	ssize_t done;
};

static int file_read_async(void *ctx, struct gdx_pipeline_read *rd, struct gdx_stream *s)
{
	struct file_read *fr = rd->priv;

	fr->off = (off_t)rd->off;
	fr->done = FILE_PENDING;
	return gdx_file_read_async_ex(ctx, rd->dst, &rd->len, &fr->off, &fr->done, s,
				      rd->flags & GDX_PIPELINE_LOAD_IN_ORDER ? 0 :
				      GDX_FILE_ASYNC_EARLY);
}

/* Best effort: a read ahead refused (too many, a write pending) is just not there. */
static void file_prefetch(void *ctx, uint64_t off, size_t len)
{
	(void)gdx_file_read_ahead(ctx, len, (off_t)off);
}

static void file_read_complete(void *ctx, struct gdx_pipeline_read *rd)
{
	struct file_read *fr = rd->priv;

	(void)ctx;
	if (fr->done != FILE_PENDING)
		rd->done = fr->done;
}

int gdx_pipeline_source_file(struct gdx_file *f, struct gdx_pipeline_source *src)
{
	if (!f || !src)
		return -EINVAL;
	memset(src, 0, sizeof(*src));
	src->name = "file";
	src->priv_size = sizeof(struct file_read);
	src->read_async = file_read_async;
	src->complete = file_read_complete;
	src->prefetch = file_prefetch;
	src->ctx = f;
	return 0;
}

int gdx_pipeline_add_file_load(struct gdx_pipeline *p, struct gdx_file *f,
			       const struct gdx_pipeline_load_opts *o)
{
	struct gdx_pipeline_source src;
	int ret = gdx_pipeline_source_file(f, &src);

	return ret ? ret : gdx_pipeline_add_load(p, &src, o);
}
