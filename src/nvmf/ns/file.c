/* SPDX-License-Identifier: MIT */
/*
 * File and block-device namespaces.  Reads, writes and flushes go through the
 * reactor's io_uring (O_DIRECT where the file system takes it, with a
 * buffered descriptor for what O_DIRECT refuses); Flush is fdatasync, so it
 * completes only once the data is on stable storage.  Write Zeroes and
 * deallocate use fallocate.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "nvmf/core/core.h"

struct file_priv {
	int fd;		/* O_DIRECT when direct is true */
	int bfd;	/* buffered */
	bool direct;
	bool bdev;
};

struct nvmf_ioctx {
	struct io_uring ring;
	int efd;
	unsigned queued;
};

int nvmf_ioctx_create(struct nvmf_ioctx **out)
{
	struct nvmf_ioctx *c = calloc(1, sizeof(*c));
	int ret;

	if (!c)
		return -ENOMEM;
	ret = io_uring_queue_init(512, &c->ring, 0);
	if (ret) {
		free(c);
		return ret;
	}
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->efd < 0 || io_uring_register_eventfd(&c->ring, c->efd)) {
		ret = c->efd < 0 ? -errno : -EIO;
		if (c->efd >= 0)
			close(c->efd);
		io_uring_queue_exit(&c->ring);
		free(c);
		return ret;
	}
	*out = c;
	return 0;
}

void nvmf_ioctx_destroy(struct nvmf_ioctx *c)
{
	if (!c)
		return;
	io_uring_queue_exit(&c->ring);
	close(c->efd);
	free(c);
}

int nvmf_ioctx_fd(struct nvmf_ioctx *c)
{
	return c->efd;
}

void nvmf_ioctx_flush(struct nvmf_ioctx *c)
{
	if (c && c->queued) {
		io_uring_submit(&c->ring);
		c->queued = 0;
	}
}

static int sync_rw(int fd, struct nvmf_req *req, uint64_t done)
{
	while (done < req->len) {
		ssize_t n = req->cmd.opc == GDX_NVME_CMD_READ ?
				    pread(fd, (char *)req->buf + done, req->len - done,
					  (off_t)(req->io_off + done)) :
				    pwrite(fd, (char *)req->buf + done, req->len - done,
					   (off_t)(req->io_off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		done += (uint64_t)n;
	}
	return 0;
}

/* Queues the rest of a read/write (req->res bytes done) on fd, or does it here. */
static void queue_rw(struct nvmf_ioctx *c, struct nvmf_req *req, int fd)
{
	struct io_uring_sqe *sqe = c ? io_uring_get_sqe(&c->ring) : NULL;
	uint64_t done = (uint64_t)req->res;

	if (c && !sqe) {
		io_uring_submit(&c->ring);
		c->queued = 0;
		sqe = io_uring_get_sqe(&c->ring);
	}
	if (!sqe) {
		nvmf_io_done(req, sync_rw(fd, req, done));
		return;
	}
	if (req->cmd.opc == GDX_NVME_CMD_READ)
		io_uring_prep_read(sqe, fd, (char *)req->buf + done, req->len - (uint32_t)done,
				   req->io_off + done);
	else
		io_uring_prep_write(sqe, fd, (char *)req->buf + done, req->len - (uint32_t)done,
				    req->io_off + done);
	io_uring_sqe_set_data(sqe, req);
	c->queued++;
}

void nvmf_ioctx_reap(struct nvmf_ioctx *c)
{
	struct io_uring_cqe *cqe;
	uint64_t v;

	if (read(c->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		GDX_WARN("nvmf", "io_uring eventfd: %s", strerror(errno));
	while (io_uring_peek_cqe(&c->ring, &cqe) == 0) {
		struct nvmf_req *req = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		struct file_priv *p = req->ns->priv;

		io_uring_cqe_seen(&c->ring, cqe);
		if (req->cmd.opc == GDX_NVME_CMD_FLUSH) {
			nvmf_io_done(req, res < 0 ? res : 0);
			continue;
		}
		if (res == -EINVAL && p->direct && req->res == 0) {
			/* O_DIRECT refused this one (alignment): buffered instead */
			queue_rw(c, req, p->bfd);
			continue;
		}
		if (res < 0) {
			nvmf_io_done(req, res);
			continue;
		}
		if (res == 0) {
			nvmf_io_done(req, -EIO);
			continue;
		}
		req->res += res;
		if ((uint32_t)req->res < req->len)
			queue_rw(c, req, p->bfd);	/* short transfer: finish buffered */
		else
			nvmf_io_done(req, 0);
	}
}

static int file_open(struct nvmf_ns *ns, const char *spec)
{
	struct file_priv *p = calloc(1, sizeof(*p));
	struct stat st;
	int ret;

	if (!p)
		return -ENOMEM;
	p->bfd = open(spec, O_RDWR | O_CLOEXEC);
	if (p->bfd < 0) {
		ret = -errno;
		free(p);
		return ret;
	}
	if (fstat(p->bfd, &st)) {
		ret = -errno;
		goto err;
	}
	if (S_ISBLK(st.st_mode)) {
		uint64_t sz;

		if (ioctl(p->bfd, BLKGETSIZE64, &sz)) {
			ret = -errno;
			goto err;
		}
		ns->size = sz;
		p->bdev = true;
	} else if (S_ISREG(st.st_mode)) {
		ns->size = (uint64_t)st.st_size;
	} else {
		ret = -EINVAL;
		goto err;
	}
	p->fd = open(spec, O_RDWR | O_CLOEXEC | O_DIRECT);
	p->direct = p->fd >= 0;
	if (!p->direct) {
		GDX_INFO("nvmf", "%s: no O_DIRECT (%s), using the page cache", spec,
			 strerror(errno));
		p->fd = p->bfd;
	}
	ns->priv = p;
	return 0;
err:
	close(p->bfd);
	free(p);
	return ret;
}

static void file_close(struct nvmf_ns *ns)
{
	struct file_priv *p = ns->priv;

	if (!p)
		return;
	if (p->direct)
		close(p->fd);
	close(p->bfd);
	free(p);
}

static int zero_range(struct file_priv *p, uint64_t off, uint64_t len, bool dealloc)
{
	int mode = dealloc ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE :
			     FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
	static const char zeroes[65536];

	if (!fallocate(p->bfd, mode, (off_t)off, (off_t)len))
		return 0;
	if (dealloc && (errno == EOPNOTSUPP || errno == ENOSYS))
		return 0;	/* deallocation is a hint */
	if (errno != EOPNOTSUPP && errno != ENOSYS && errno != EINVAL)
		return -errno;
	while (len) {
		size_t n = GDX_MIN(len, sizeof(zeroes));
		ssize_t w = pwrite(p->bfd, zeroes, n, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		off += (uint64_t)w;
		len -= (uint64_t)w;
	}
	return 0;
}

static void file_submit(struct nvmf_ns *ns, struct nvmf_req *req)
{
	struct file_priv *p = ns->priv;
	struct nvmf_ioctx *c = req->sq->ioctx;

	req->res = 0;
	switch (req->cmd.opc) {
	case GDX_NVME_CMD_READ:
	case GDX_NVME_CMD_WRITE:
		queue_rw(c, req, p->fd);
		return;
	case GDX_NVME_CMD_FLUSH: {
		struct io_uring_sqe *sqe = c ? io_uring_get_sqe(&c->ring) : NULL;

		if (!sqe) {
			nvmf_io_done(req, fdatasync(p->bfd) ? -errno : 0);
			return;
		}
		/* O_DIRECT writes may sit in the device cache too: sync the same inode */
		io_uring_prep_fsync(sqe, p->bfd, IORING_FSYNC_DATASYNC);
		io_uring_sqe_set_data(sqe, req);
		c->queued++;
		return;
	}
	case GDX_NVME_CMD_WRITE_ZEROES:
		nvmf_io_done(req, zero_range(p, req->io_off,
					     (uint64_t)gdx_nvme_rw_nlb(&req->cmd) << ns->lba_shift,
					     false));
		return;
	case GDX_NVME_CMD_DSM: {
		const struct gdx_nvme_dsm_range *r = req->buf;
		int ret = 0;

		for (uint32_t i = 0; i <= (req->cmd.cdw10 & 0xff) && !ret; i++)
			ret = zero_range(p, r[i].slba << ns->lba_shift,
					 (uint64_t)r[i].nlb << ns->lba_shift, true);
		nvmf_io_done(req, ret);
		return;
	}
	}
	nvmf_io_done(req, -EINVAL);
}

const struct nvmf_ns_ops nvmf_ns_file_ops = {
	.name = "file",
	.open = file_open,
	.close = file_close,
	.submit = file_submit,
};
