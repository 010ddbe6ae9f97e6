/* SPDX-License-Identifier: MIT */
/*
 * NVMe over Fabrics (TCP) host for Python: discovery, and _gdx.NvmfHost, a
 * controller whose namespaces read into and write from any memory
 * _gdx.File takes.  The library keeps the controller alive and reconnects
 * by itself (gdx/nvmf.h); a transfer is one library call without the GIL.
 */
#include "_gdx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gdx/nvmf.h>

PyTypeObject *gdxpy_nvmf_host_type;

struct gdxpy_nvmf_host {
	PyObject_HEAD
	struct gdxpy_driver *driver;	/* NULL: host memory only */
	struct gdx_nvmf_ctrl *c;
	unsigned busy;			/* transfers running on other threads */
	const char *last_path;		/* the last transfer's: "direct", "bounce" or "none" */
};

static const char *port_text(PyObject *port, char *buf, size_t len)
{
	if (PyLong_Check(port)) {
		long p = PyLong_AsLong(port);

		if (p < 0 || p > 65535) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError, "port must be 0..65535");
			return NULL;
		}
		snprintf(buf, len, "%ld", p);
		return buf;
	}
	if (PyUnicode_Check(port))
		return PyUnicode_AsUTF8AndSize(port, NULL);
	PyErr_SetString(PyExc_TypeError, "port must be an int or a str");
	return NULL;
}

static void host_opts(struct gdx_nvmf_host_opts *o, struct gdxpy_driver *driver,
		      const char *hostnqn, const char *transport)
{
	gdx_nvmf_host_opts_init(o, sizeof(*o));
	o->hostnqn = hostnqn;
	o->dev = driver ? driver->dev : NULL;
	o->transport = transport;
}

static PyObject *nvmf_discover(PyObject *m, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "addr", "port", "hostnqn", "transport", NULL };
	const char *addr, *hostnqn = NULL, *svc, *transport = NULL;
	struct gdx_nvmf_discovery_log *log = NULL;
	struct gdx_nvmf_host_opts o;
	PyObject *port, *list;
	char pbuf[16];
	int ret;

	(void)m;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|zz:discover", kwlist, &addr, &port, &hostnqn,
					 &transport))
		return NULL;
	svc = port_text(port, pbuf, sizeof(pbuf));
	if (!svc)
		return NULL;
	host_opts(&o, NULL, hostnqn, transport);
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_nvmf_discover(addr, svc, &o, &log);
	Py_END_ALLOW_THREADS
	if (ret)
		return gdxpy_raise(ret, NULL);
	list = PyList_New(0);
	for (uint64_t i = 0; list && i < log->numrec; i++) {
		const struct gdx_nvmf_discovery_entry *e = &log->entries[i];
		PyObject *d = Py_BuildValue(
			"{s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "subnqn", e->subnqn,
			"traddr", e->traddr, "trsvcid", e->trsvcid, "trtype", e->trtype,
			"adrfam", e->adrfam, "subtype", e->subtype, "portid", e->portid,
			"cntlid", e->cntlid, "asqsz", e->asqsz, "treq", e->treq);

		if (!d || PyList_Append(list, d) < 0)
			Py_CLEAR(list);
		Py_XDECREF(d);
	}
	free(log);
	return list;
}

static PyObject *host_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "addr", "port", "nqn", "driver", "hostnqn", "transport",
				  "dhchap_secret", "dhchap_ctrl_secret", NULL };
	const char *addr, *nqn, *hostnqn = NULL, *svc, *transport = NULL;
	const char *secret = NULL, *ctrl_secret = NULL;
	PyObject *port, *driver = Py_None;
	struct gdx_nvmf_host_opts o;
	struct gdxpy_nvmf_host *self;
	char pbuf[16];
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "sOs|Ozzzz:NvmfHost", kwlist, &addr, &port,
					 &nqn, &driver, &hostnqn, &transport, &secret, &ctrl_secret))
		return NULL;
	if (driver != Py_None && !PyObject_TypeCheck(driver, gdxpy_driver_type)) {
		PyErr_SetString(PyExc_TypeError, "driver must be a gdx.Driver or None");
		return NULL;
	}
	svc = port_text(port, pbuf, sizeof(pbuf));
	if (!svc)
		return NULL;
	self = (struct gdxpy_nvmf_host *)((allocfunc)PyType_GetSlot(tp, Py_tp_alloc))(tp, 0);
	if (!self)
		return NULL;
	if (driver != Py_None) {
		Py_INCREF(driver);
		self->driver = (struct gdxpy_driver *)driver;
	}
	self->last_path = "none";
	host_opts(&o, self->driver, hostnqn, transport);
	/* the library parses and keeps its own copy; Python's strings are Python's */
	o.dhchap_secret = secret;
	o.dhchap_ctrl_secret = ctrl_secret;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_nvmf_connect(addr, svc, nqn, &o, &self->c);
	Py_END_ALLOW_THREADS
	if (ret) {
		Py_DECREF((PyObject *)self);
		return gdxpy_raise(ret, NULL);
	}
	return (PyObject *)self;
}

static int host_disconnect(struct gdxpy_nvmf_host *self)
{
	int ret;

	if (!self->c)
		return 0;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_nvmf_disconnect(self->c);
	Py_END_ALLOW_THREADS
	self->c = NULL;
	return ret;
}

static void host_dealloc(PyObject *o)
{
	struct gdxpy_nvmf_host *self = (struct gdxpy_nvmf_host *)o;
	PyTypeObject *tp = Py_TYPE(o);

	host_disconnect(self);
	Py_XDECREF((PyObject *)self->driver);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(o);
	Py_DECREF(tp);
}

static int host_check(struct gdxpy_nvmf_host *self)
{
	if (self->c)
		return 0;
	PyErr_SetString(PyExc_ValueError, "I/O operation on a closed controller");
	return -1;
}

static PyObject *host_close(PyObject *o, PyObject *unused)
{
	struct gdxpy_nvmf_host *self = (struct gdxpy_nvmf_host *)o;
	int ret;

	(void)unused;
	if (self->busy) {
		PyErr_Format(PyExc_RuntimeError,
			     "%u transfers still use the controller: wait for them before closing",
			     self->busy);
		return NULL;
	}
	ret = host_disconnect(self);
	if (ret)
		return gdxpy_raise(ret, NULL);
	Py_RETURN_NONE;
}

static PyObject *host_xfer(PyObject *o, PyObject *args, PyObject *kw, int write)
{
	static char *kwlist[] = { "buf", "offset", "size", "nsid", NULL };
	struct gdxpy_nvmf_host *self = (struct gdxpy_nvmf_host *)o;
	PyObject *buf, *size = Py_None, *res = NULL;
	unsigned long long offset = 0;
	unsigned int nsid = 1;
	struct gdx_nvmf_io io;
	struct gdxpy_buf b;
	size_t n;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, write ? "O|KOI:write_from" : "O|KOI:read_into",
					 kwlist, &buf, &offset, &size, &nsid))
		return NULL;
	if (host_check(self) < 0 || gdxpy_buf_get(buf, !write, &b) < 0)
		return NULL;
	if (b.device && !self->driver) {
		PyErr_SetString(PyExc_ValueError,
				"device memory needs a controller opened with a device");
		goto out;
	}
	n = size == Py_None ? b.len : PyLong_AsSize_t(size);
	if (PyErr_Occurred())
		goto out;
	if (n > b.len) {
		PyErr_Format(PyExc_ValueError, "size %zu is larger than the buffer (%zu bytes)", n,
			     b.len);
		goto out;
	}
	memset(&io, 0, sizeof(io));
	io.op = write ? GDX_NVMF_OP_WRITE : GDX_NVMF_OP_READ;
	io.nsid = nsid;
	io.offset = offset;
	io.len = n;
	io.buf = b.ptr;
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_nvmf_submit(self->c, &io, 1);
	Py_END_ALLOW_THREADS
	self->busy--;
	if (io.path)
		self->last_path = io.path;
	if (ret)
		gdxpy_raise(ret, NULL);
	else
		res = PyLong_FromSize_t(n);
out:
	gdxpy_buf_release(&b);
	return res;
}

static PyObject *host_read_into(PyObject *o, PyObject *args, PyObject *kw)
{
	return host_xfer(o, args, kw, 0);
}

static PyObject *host_write_from(PyObject *o, PyObject *args, PyObject *kw)
{
	return host_xfer(o, args, kw, 1);
}

static PyObject *host_identify(PyObject *o, PyObject *unused)
{
	struct gdxpy_nvmf_host *self = (struct gdxpy_nvmf_host *)o;
	struct gdx_nvmf_ctrl_info i;
	char ver[16];
	int ret;

	(void)unused;
	if (host_check(self) < 0)
		return NULL;
	ret = gdx_nvmf_ctrl_info(self->c, &i);
	if (ret)
		return gdxpy_raise(ret, NULL);
	snprintf(ver, sizeof(ver), "%u.%u.%u", i.ver >> 16, (i.ver >> 8) & 0xff, i.ver & 0xff);
	return Py_BuildValue(
		"{s:i,s:i,s:s,s:s,s:s,s:s,s:s,s:k,s:K,s:k,s:i,s:i,s:i,s:i,s:k,s:k,s:I,s:I,s:I,s:O,s:O,s:I}",
		"vid", i.vid, "cntlid", i.cntlid, "sn", i.sn, "mn", i.mn, "fr", i.fr,
		"subnqn", i.subnqn, "ver", ver, "nn", (unsigned long)i.nn,
		"cap", (unsigned long long)i.cap, "max_xfer", (unsigned long)i.max_xfer,
		"oncs", i.oncs, "vwc", i.vwc, "kas", i.kas, "maxcmd", i.maxcmd,
		"ioccsz", (unsigned long)i.ioccsz, "sgls", (unsigned long)i.sgls,
		"nr_io_queues", i.nr_io_queues, "queue_depth", i.queue_depth, "kato_ms", i.kato_ms,
		"hdr_digest", i.hdr_digest ? Py_True : Py_False,
		"data_digest", i.data_digest ? Py_True : Py_False, "reconnects", i.reconnects);
}

static PyObject *host_identify_ns(PyObject *o, PyObject *args)
{
	struct gdxpy_nvmf_host *self = (struct gdxpy_nvmf_host *)o;
	struct gdx_nvmf_ns_info i;
	unsigned int nsid = 1;
	int ret;

	if (!PyArg_ParseTuple(args, "|I:identify_ns", &nsid) || host_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_nvmf_identify_ns(self->c, nsid, &i);
	Py_END_ALLOW_THREADS
	if (ret)
		return gdxpy_raise(ret, NULL);
	return Py_BuildValue("{s:I,s:K,s:K,s:K,s:I,s:i,s:y#,s:y#,s:K}", "nsid", i.nsid,
			     "nsze", (unsigned long long)i.nsze, "ncap", (unsigned long long)i.ncap,
			     "nuse", (unsigned long long)i.nuse, "block_size", i.block_size,
			     "nmic", i.nmic, "nguid", (const char *)i.nguid, (Py_ssize_t)16,
			     "eui64", (const char *)i.eui64, (Py_ssize_t)8,
			     "size", (unsigned long long)(i.nsze * i.block_size));
}

static PyObject *host_ns_list(PyObject *o, PyObject *unused)
{
	struct gdxpy_nvmf_host *self = (struct gdxpy_nvmf_host *)o;
	uint32_t nsids[1024];
	PyObject *list;
	int n;

	(void)unused;
	if (host_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	n = gdx_nvmf_ns_list(self->c, nsids, 1024);
	Py_END_ALLOW_THREADS
	if (n < 0)
		return gdxpy_raise(n, NULL);
	list = PyList_New(n);
	for (int i = 0; list && i < n; i++) {
		PyObject *v = PyLong_FromUnsignedLong(nsids[i]);

		if (!v) {
			Py_CLEAR(list);
			break;
		}
		PyList_SetItem(list, i, v);
	}
	return list;
}

static PyObject *host_flush(PyObject *o, PyObject *args)
{
	struct gdxpy_nvmf_host *self = (struct gdxpy_nvmf_host *)o;
	unsigned int nsid = 1;
	int ret;

	if (!PyArg_ParseTuple(args, "|I:flush", &nsid) || host_check(self) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_nvmf_flush(self->c, nsid);
	Py_END_ALLOW_THREADS
	if (ret)
		return gdxpy_raise(ret, NULL);
	Py_RETURN_NONE;
}

static PyObject *host_get_state(PyObject *o, void *closure)
{
	static const char *names[] = { "live", "reconnecting", "failed" };
	struct gdxpy_nvmf_host *self = (struct gdxpy_nvmf_host *)o;
	enum gdx_nvmf_ctrl_state s;

	(void)closure;
	if (!self->c)
		return PyUnicode_FromString("closed");
	s = gdx_nvmf_ctrl_state(self->c);
	return PyUnicode_FromString((unsigned)s < 3 ? names[s] : "unknown");
}

static PyObject *host_get_last_path(PyObject *o, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(((struct gdxpy_nvmf_host *)o)->last_path);
}

#define KW_METHOD(name, fn, doc) \
	{ name, (PyCFunction)(void (*)(void))fn, METH_VARARGS | METH_KEYWORDS, doc }

static PyMethodDef host_methods[] = {
	KW_METHOD("read_into", host_read_into,
		  "read_into(buf, offset=0, size=None, nsid=1) -> int: bytes read"),
	KW_METHOD("write_from", host_write_from,
		  "write_from(buf, offset=0, size=None, nsid=1) -> int: bytes written"),
	{ "identify", host_identify, METH_NOARGS, "The controller's identity and settings." },
	{ "identify_ns", host_identify_ns, METH_VARARGS, "identify_ns(nsid=1) -> dict" },
	{ "ns_list", host_ns_list, METH_NOARGS, "Active namespace IDs." },
	{ "flush", host_flush, METH_VARARGS, "flush(nsid=1)" },
	{ "close", host_close, METH_NOARGS, "Disconnects (CC.SHN)." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef host_getset[] = {
	{ "state", host_get_state, NULL, "\"live\", \"reconnecting\", \"failed\" or \"closed\".", NULL },
	{ "last_path", host_get_last_path, NULL, "The last transfer's path.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot host_slots[] = {
	{ Py_tp_new, (void *)host_new },
	{ Py_tp_dealloc, (void *)host_dealloc },
	{ Py_tp_methods, host_methods },
	{ Py_tp_getset, host_getset },
	{ Py_tp_doc, (void *)"NvmfHost(addr, port, nqn, driver=None, hostnqn=None)" },
	{ 0, NULL },
};

static PyType_Spec host_spec = {
	"gdx._gdx.NvmfHost", sizeof(struct gdxpy_nvmf_host), 0, Py_TPFLAGS_DEFAULT, host_slots,
};

static PyMethodDef nvmf_methods[] = {
	KW_METHOD("nvmf_discover", nvmf_discover,
		  "nvmf_discover(addr, port, hostnqn=None) -> list of discovery log entries"),
	{ NULL, NULL, 0, NULL },
};

int gdxpy_module_add_nvmf(PyObject *m)
{
	gdxpy_nvmf_host_type = gdxpy_add_type(m, &host_spec);
	if (!gdxpy_nvmf_host_type)
		return -1;
	return PyModule_AddFunctions(m, nvmf_methods);
}
