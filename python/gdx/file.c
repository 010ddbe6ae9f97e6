/* SPDX-License-Identifier: MIT */
/*
 * _gdx.File: one gdx file handle.  Transfers run without the GIL, in pieces;
 * between pieces the GIL is taken back for a moment to run signal handlers,
 * so Ctrl-C ends a long transfer after the piece in flight instead of after
 * the whole transfer.  Each piece is one library call, which fills and drains
 * gdx's pipeline once, so pieces are as large as the interrupt latency allows:
 * by default each is sized to take about PIECE_NS at the rate the one before
 * it ran (the first is FIRST_PIECE), or a fixed chunk_size when one is given.
 *
 * _gdx.StreamIO: a stream-ordered transfer (gdx_file_read_async/write_async).
 * It owns the size, offset and result words the library reads and writes when
 * the stream reaches the transfer, and the buffer's reference, until the
 * stream has passed it.
 */
#include "_gdx.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>

#define FIRST_PIECE ((size_t)1 << 30)
#define MIN_PIECE ((size_t)64 << 20)
#define PIECE_NS 250000000ull

PyTypeObject *gdxpy_file_type;
PyTypeObject *gdxpy_streamio_type;

struct gdxpy_file {
	PyObject_HEAD
	struct gdxpy_driver *driver;
	struct gdx_file *f;
	PyObject *name;		/* the path as given */
	size_t chunk;		/* fixed piece size; 0: sized by time */
	unsigned busy;		/* transfers running on other threads, and StreamIOs not yet waited for */
	struct gdx_file_io_info last;
};

struct gdxpy_streamio {
	PyObject_HEAD
	struct gdxpy_file *file;
	struct gdxpy_stream *st;
	struct gdxpy_buf b;
	size_t size;
	off_t off;
	ssize_t done;
	int waited;
};

static int parse_mode(const char *mode, int *oflags)
{
	static const struct { const char *mode; int oflags; } modes[] = {
		{ "r", O_RDONLY },
		{ "r+", O_RDWR },
		{ "w", O_WRONLY | O_CREAT | O_TRUNC },
		{ "w+", O_RDWR | O_CREAT | O_TRUNC },
		{ "x", O_WRONLY | O_CREAT | O_EXCL },
		{ "x+", O_RDWR | O_CREAT | O_EXCL },
	};
	char m[4];
	size_t n = 0;

	/* "rb" is "r": every transfer is binary. */
	for (const char *p = mode; *p; p++) {
		if (*p == 'b')
			continue;
		if (n == sizeof(m) - 1)
			return -1;
		m[n++] = *p;
	}
	m[n] = '\0';
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		if (!strcmp(m, modes[i].mode)) {
			*oflags = modes[i].oflags;
			return 0;
		}
	}
	return -1;
}

static PyObject *file_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "driver", "path", "mode", "chunk_size", NULL };
	struct gdxpy_driver *driver;
	PyObject *name, *fspath = NULL;
	const char *mode = "r";
	PyObject *chunk_obj = Py_None;
	size_t chunk = 0;
	struct gdx_file_opts o;
	struct gdxpy_file *self;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|sO:File", kwlist, gdxpy_driver_type, &driver,
					 &name, &mode, &chunk_obj))
		return NULL;
	if (chunk_obj != Py_None) {
		chunk = PyLong_AsSize_t(chunk_obj);
		if (chunk == (size_t)-1 && PyErr_Occurred())
			return NULL;
		if (chunk < 4096) {
			PyErr_SetString(PyExc_ValueError, "chunk_size must be at least 4096");
			return NULL;
		}
	}
	gdx_file_opts_init(&o, sizeof(o));
	if (parse_mode(mode, &o.oflags) < 0) {
		PyErr_Format(PyExc_ValueError, "invalid mode '%s' (r, r+, w, w+, x, x+)", mode);
		return NULL;
	}
	if (!PyUnicode_FSConverter(name, &fspath))
		return NULL;
	self = (struct gdxpy_file *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0);
	if (!self) {
		Py_DECREF(fspath);
		return NULL;
	}
	Py_INCREF((PyObject *)driver);
	self->driver = driver;
	Py_INCREF(name);
	self->name = name;
	self->chunk = chunk;
	{
		const char *p = PyBytes_AsString(fspath);

		Py_BEGIN_ALLOW_THREADS
		ret = gdx_file_open(driver->drv, p, &o, &self->f);
		Py_END_ALLOW_THREADS
	}
	Py_DECREF(fspath);
	if (ret) {
		gdxpy_raise(ret, name);
		Py_DECREF((PyObject *)self);
		return NULL;
	}
	return (PyObject *)self;
}

static int file_close_now(struct gdxpy_file *self)
{
	int ret;

	if (!self->f)
		return 0;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_file_close(self->f);
	Py_END_ALLOW_THREADS
	self->f = NULL;
	return ret;
}

static void file_dealloc(PyObject *o)
{
	struct gdxpy_file *self = (struct gdxpy_file *)o;
	PyTypeObject *tp = Py_TYPE(o);

	/* No transfer can be in flight: each one holds a reference to the file. */
	file_close_now(self);
	Py_XDECREF(self->name);
	Py_XDECREF((PyObject *)self->driver);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(o);
	Py_DECREF(tp);
}

static int check_open(struct gdxpy_file *self)
{
	if (self->f)
		return 0;
	PyErr_SetString(PyExc_ValueError, "I/O operation on closed file");
	return -1;
}

static PyObject *file_close(PyObject *o, PyObject *unused)
{
	struct gdxpy_file *self = (struct gdxpy_file *)o;
	int ret;

	(void)unused;
	if (self->busy) {
		PyErr_Format(PyExc_RuntimeError,
			     "%u transfers still use the file: wait for them before closing",
			     self->busy);
		return NULL;
	}
	ret = file_close_now(self);
	if (ret)
		return gdxpy_raise(ret, self->name);
	Py_RETURN_NONE;
}

/* Checks offset and size against the buffer; fills *n. */
static int xfer_range(struct gdxpy_buf *b, long long offset, PyObject *size, size_t *n)
{
	if (offset < 0) {
		PyErr_SetString(PyExc_ValueError, "offset must not be negative");
		return -1;
	}
	if (size == Py_None) {
		*n = b->len;
		return 0;
	}
	*n = PyLong_AsSize_t(size);
	if (PyErr_Occurred())
		return -1;
	if (*n > b->len) {
		PyErr_Format(PyExc_ValueError, "size %zu is larger than the buffer (%zu bytes)", *n,
			     b->len);
		return -1;
	}
	return 0;
}

/*
 * CUDA memory handed over with a stream (__cuda_array_interface__ version 3)
 * may still be written by work on that stream: wait for it first.
 */
static int wait_producer(struct gdxpy_driver *driver, uintptr_t handle)
{
	struct gdx_stream *s;
	int ret;

	if (!handle || strcmp(gdx_device_kind(driver->dev), "cuda"))
		return 0;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_stream_wrap(driver->dev, (void *)handle, &s);
	if (!ret) {
		ret = gdx_stream_synchronize(s);
		gdx_stream_destroy(s);
	}
	Py_END_ALLOW_THREADS
	return ret ? (gdxpy_raise(ret, NULL), -1) : 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The next piece: chunk_size, or what the last piece's rate moves in PIECE_NS. */
static size_t next_piece(const struct gdxpy_file *self, size_t last, uint64_t last_ns)
{
	double want;

	if (self->chunk)
		return self->chunk;
	if (!last)
		return FIRST_PIECE;
	want = (double)last * PIECE_NS / (double)(last_ns ? last_ns : 1);
	return want < (double)MIN_PIECE ? MIN_PIECE : want > (double)SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)want;
}

static PyObject *file_xfer(PyObject *o, PyObject *args, PyObject *kw, int write)
{
	static char *kwlist[] = { "buf", "offset", "size", NULL };
	struct gdxpy_file *self = (struct gdxpy_file *)o;
	struct gdx_file_io_info info;
	PyObject *buf, *size = Py_None, *res = NULL;
	long long offset = 0;
	struct gdxpy_buf b;
	size_t n, done = 0, len = 0;
	uint64_t ns = 0;
	int ret = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, write ? "O|LO:write_from" : "O|LO:read_into",
					 kwlist, &buf, &offset, &size))
		return NULL;
	if (check_open(self) < 0 || gdxpy_buf_get(buf, !write, &b) < 0)
		return NULL;
	if (xfer_range(&b, offset, size, &n) < 0 || wait_producer(self->driver, b.cai_stream) < 0)
		goto out;
	info.path = GDX_FILE_PATH_NONE;
	self->busy++;
	while (done < n) {
		size_t piece = next_piece(self, len, ns);
		uint64_t t0;
		ssize_t r;

		len = n - done < piece ? n - done : piece;
		Py_BEGIN_ALLOW_THREADS
		t0 = now_ns();
		if (write)
			r = gdx_file_write_ex(self->f, b.ptr + done, len, (off_t)(offset + done), &info);
		else
			r = gdx_file_read_ex(self->f, b.ptr + done, len, (off_t)(offset + done), &info);
		ns = now_ns() - t0;
		Py_END_ALLOW_THREADS
		if (r < 0) {
			ret = (int)r;
			break;
		}
		done += (size_t)r;
		if ((size_t)r < len)
			break;	/* end of file */
		if (done < n && PyErr_CheckSignals() < 0) {
			ret = 1;	/* the handler's exception is set */
			break;
		}
	}
	self->busy--;
	if (info.path != GDX_FILE_PATH_NONE)
		self->last = info;
	if (ret < 0)
		gdxpy_raise(ret, self->name);
	else if (ret == 0)
		res = PyLong_FromSize_t(done);
out:
	gdxpy_buf_release(&b);
	return res;
}

static PyObject *file_read_into(PyObject *o, PyObject *args, PyObject *kw)
{
	return file_xfer(o, args, kw, 0);
}

static PyObject *file_write_from(PyObject *o, PyObject *args, PyObject *kw)
{
	return file_xfer(o, args, kw, 1);
}

static PyObject *file_xfer_async(PyObject *o, PyObject *args, PyObject *kw, int write)
{
	static char *kwlist[] = { "buf", "offset", "size", "stream", "early", NULL };
	struct gdxpy_file *self = (struct gdxpy_file *)o;
	PyObject *buf, *size = Py_None, *stream;
	struct gdxpy_streamio *io;
	long long offset = 0;
	int early = 0, ret;
	size_t n;

	if (!PyArg_ParseTupleAndKeywords(args, kw,
					 write ? "O|LO$Op:write_from_async" : "O|LO$Op:read_into_async",
					 kwlist, &buf, &offset, &size, &stream, &early))
		return NULL;
	if (check_open(self) < 0)
		return NULL;
	if (!stream) {
		PyErr_SetString(PyExc_TypeError, "the stream-ordered forms need stream=");
		return NULL;
	}
	io = (struct gdxpy_streamio *)((allocfunc)PyType_GetSlot(gdxpy_streamio_type, Py_tp_alloc))(
		gdxpy_streamio_type, 0);
	if (!io)
		return NULL;
	io->waited = 1;	/* nothing to wait for until the I/O is enqueued */
	io->st = gdxpy_stream_from(self->driver, stream);
	if (!io->st || gdxpy_buf_get(buf, !write, &io->b) < 0 ||
	    xfer_range(&io->b, offset, size, &n) < 0 ||
	    wait_producer(self->driver, io->b.cai_stream) < 0) {
		Py_DECREF((PyObject *)io);
		return NULL;
	}
	io->size = n;
	io->off = (off_t)offset;
	io->done = 0;
	if (write)
		ret = gdx_file_write_async(self->f, io->b.ptr, &io->size, &io->off, &io->done,
					   io->st->s);
	else
		ret = gdx_file_read_async_ex(self->f, io->b.ptr, &io->size, &io->off, &io->done,
					     io->st->s, early ? GDX_FILE_ASYNC_EARLY : 0);
	if (ret) {
		Py_DECREF((PyObject *)io);
		return gdxpy_raise(ret, self->name);
	}
	Py_INCREF((PyObject *)self);
	io->file = self;
	io->waited = 0;
	self->busy++;
	return (PyObject *)io;
}

static PyObject *file_read_into_async(PyObject *o, PyObject *args, PyObject *kw)
{
	return file_xfer_async(o, args, kw, 0);
}

static PyObject *file_write_from_async(PyObject *o, PyObject *args, PyObject *kw)
{
	return file_xfer_async(o, args, kw, 1);
}

static PyObject *file_sync(PyObject *o, PyObject *unused)
{
	struct gdxpy_file *self = (struct gdxpy_file *)o;
	int ret;

	(void)unused;
	if (check_open(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_file_sync(self->f);
	Py_END_ALLOW_THREADS
	if (ret)
		return gdxpy_raise(ret, self->name);
	Py_RETURN_NONE;
}

static PyObject *info_dict(const struct gdx_file_io_info *info)
{
	PyObject *bytes = PyDict_New(), *d;

	if (!bytes)
		return NULL;
	for (int p = GDX_FILE_PATH_NONE + 1; p < GDX_FILE_PATH_COUNT; p++) {
		PyObject *v = PyLong_FromUnsignedLongLong(info->bytes[p]);

		if (!v || PyDict_SetItemString(bytes, gdx_file_path_name((enum gdx_file_path)p), v) < 0) {
			Py_XDECREF(v);
			Py_DECREF(bytes);
			return NULL;
		}
		Py_DECREF(v);
	}
	d = Py_BuildValue("{s:s,s:s,s:N}", "path", gdx_file_path_name(info->path), "why", info->why,
			  "bytes", bytes);
	return d;
}

static PyObject *file_get_path(PyObject *o, void *closure)
{
	struct gdxpy_file *self = (struct gdxpy_file *)o;
	struct gdx_file_io_info info;
	int ret;

	(void)closure;
	if (check_open(self) < 0)
		return NULL;
	ret = gdx_file_info(self->f, &info);
	if (ret)
		return gdxpy_raise(ret, self->name);
	return info_dict(&info);
}

static PyObject *file_get_last_path(PyObject *o, void *closure)
{
	(void)closure;
	return info_dict(&((struct gdxpy_file *)o)->last);
}

static PyObject *file_get_size(PyObject *o, void *closure)
{
	struct gdxpy_file *self = (struct gdxpy_file *)o;
	int64_t n;

	(void)closure;
	if (check_open(self) < 0)
		return NULL;
	n = gdx_file_size(self->f);
	if (n < 0)
		return gdxpy_raise((int)n, self->name);
	return PyLong_FromLongLong(n);
}

static PyObject *file_get_backend(PyObject *o, void *closure)
{
	struct gdxpy_file *self = (struct gdxpy_file *)o;

	(void)closure;
	if (check_open(self) < 0)
		return NULL;
	return PyUnicode_FromString(gdx_file_backend_name(self->f));
}

static PyObject *file_get_closed(PyObject *o, void *closure)
{
	(void)closure;
	return PyBool_FromLong(!((struct gdxpy_file *)o)->f);
}

static PyObject *file_get_name(PyObject *o, void *closure)
{
	PyObject *name = ((struct gdxpy_file *)o)->name;

	(void)closure;
	Py_INCREF(name);
	return name;
}

static PyObject *file_get_driver(PyObject *o, void *closure)
{
	PyObject *d = (PyObject *)((struct gdxpy_file *)o)->driver;

	(void)closure;
	Py_INCREF(d);
	return d;
}

#define KW_METHOD(name, fn, doc) \
	{ name, (PyCFunction)(void (*)(void))fn, METH_VARARGS | METH_KEYWORDS, doc }

static PyMethodDef file_methods[] = {
	KW_METHOD("read_into", file_read_into,
		  "read_into(buf, offset=0, size=None) -> int: bytes read (short at end of file)"),
	KW_METHOD("write_from", file_write_from,
		  "write_from(buf, offset=0, size=None) -> int: bytes written"),
	KW_METHOD("read_into_async", file_read_into_async,
		  "read_into_async(buf, offset=0, size=None, *, stream, early=False) -> StreamIO"),
	KW_METHOD("write_from_async", file_write_from_async,
		  "write_from_async(buf, offset=0, size=None, *, stream) -> StreamIO"),
	{ "sync", file_sync, METH_NOARGS, "fdatasync(2) of the file." },
	{ "close", file_close, METH_NOARGS, "Closes the handle." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef file_getset[] = {
	{ "path", file_get_path, NULL,
	  "The handle's record: {'path', 'why', 'bytes': per path since open}.", NULL },
	{ "last_path", file_get_last_path, NULL, "The last transfer's path, why, and bytes.", NULL },
	{ "size", file_get_size, NULL, "The file's size now.", NULL },
	{ "backend", file_get_backend, NULL, "The storage backend bound to the handle.", NULL },
	{ "closed", file_get_closed, NULL, "True once closed.", NULL },
	{ "name", file_get_name, NULL, "The path the file was opened by.", NULL },
	{ "driver", file_get_driver, NULL, "The Driver the file was opened on.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot file_slots[] = {
	{ Py_tp_new, (void *)file_new },
	{ Py_tp_dealloc, (void *)file_dealloc },
	{ Py_tp_methods, file_methods },
	{ Py_tp_getset, file_getset },
	{ Py_tp_doc, (void *)"File(driver, path, mode='r', chunk_size=None)" },
	{ 0, NULL },
};

static PyType_Spec file_spec = {
	"gdx._gdx.File", sizeof(struct gdxpy_file), 0, Py_TPFLAGS_DEFAULT, file_slots,
};

/* ---- StreamIO ----------------------------------------------------------- */

/* Waits for the stream to pass the transfer; the file is free of it after. */
static int streamio_wait(struct gdxpy_streamio *io)
{
	int ret;

	if (io->waited)
		return 0;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_stream_synchronize(io->st->s);
	Py_END_ALLOW_THREADS
	io->waited = 1;
	io->file->busy--;
	gdxpy_buf_release(&io->b);
	return ret;
}

static void streamio_dealloc(PyObject *o)
{
	struct gdxpy_streamio *io = (struct gdxpy_streamio *)o;
	PyTypeObject *tp = Py_TYPE(o);

	/* The library still writes io->done when the stream gets there. */
	streamio_wait(io);
	gdxpy_buf_release(&io->b);
	Py_XDECREF((PyObject *)io->st);
	Py_XDECREF((PyObject *)io->file);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(o);
	Py_DECREF(tp);
}

static PyObject *streamio_result(PyObject *o, PyObject *unused)
{
	struct gdxpy_streamio *io = (struct gdxpy_streamio *)o;
	int ret = streamio_wait(io);

	(void)unused;
	if (ret)
		return gdxpy_raise(ret, NULL);
	if (io->done < 0)
		return gdxpy_raise((int)io->done, io->file->name);
	return PyLong_FromSsize_t(io->done);
}

static PyObject *streamio_done(PyObject *o, PyObject *unused)
{
	struct gdxpy_streamio *io = (struct gdxpy_streamio *)o;
	int ret;

	(void)unused;
	if (io->waited)
		Py_RETURN_TRUE;
	ret = gdx_stream_query(io->st->s);
	if (ret == -EBUSY)
		Py_RETURN_FALSE;
	if (ret)
		return gdxpy_raise(ret, NULL);
	Py_RETURN_TRUE;
}

static PyMethodDef streamio_methods[] = {
	{ "result", streamio_result, METH_NOARGS,
	  "Waits for the stream to pass the transfer; returns its bytes or raises its error." },
	{ "done", streamio_done, METH_NOARGS, "True once the stream has passed the transfer." },
	{ NULL, NULL, 0, NULL },
};

static PyType_Slot streamio_slots[] = {
	{ Py_tp_dealloc, (void *)streamio_dealloc },
	{ Py_tp_methods, streamio_methods },
	{ Py_tp_doc, (void *)"A stream-ordered transfer: .result() waits for it, .done() asks." },
	{ 0, NULL },
};

static PyType_Spec streamio_spec = {
	"gdx._gdx.StreamIO", sizeof(struct gdxpy_streamio), 0, Py_TPFLAGS_DEFAULT, streamio_slots,
};

int gdxpy_module_add_file(PyObject *m)
{
	gdxpy_file_type = gdxpy_add_type(m, &file_spec);
	gdxpy_streamio_type = gdxpy_file_type ? gdxpy_add_type(m, &streamio_spec) : NULL;
	return gdxpy_streamio_type ? 0 : -1;
}
