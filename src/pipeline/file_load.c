/* SPDX-License-Identifier: MIT */
/* The load stage's file source: a thin adapter over gdx_file_read_async. */
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
	return gdx_file_read_async(ctx, rd->dst, &rd->len, &fr->off, &fr->done, s);
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
