/* SPDX-License-Identifier: MIT */
/*
 * The module _gdx: errors, drivers (a device with its file driver), streams,
 * configuration knobs.  Files and arrays live in file.c and array.c.
 */
#include "_gdx.h"

#include <errno.h>
#include <string.h>

PyTypeObject *gdxpy_driver_type;
PyTypeObject *gdxpy_stream_type;

/* ---- errors ------------------------------------------------------------ */

/*
 * gdx._errors.make(code, message, filename) builds the exception: a GdxError
 * that is also the OSError subclass Python has for the errno (FileNotFoundError
 * for -ENOENT), so both `except gdx.GdxError` and `except FileNotFoundError` work.
 */
PyObject *gdxpy_raise(int code, PyObject *filename)
{
	PyObject *mod, *exc;

	mod = PyImport_ImportModule("gdx._errors");
	if (!mod)
		return NULL;
	exc = PyObject_CallMethod(mod, "make", "isO", code, gdx_strerror(code),
				  filename ? filename : Py_None);
	Py_DECREF(mod);
	if (!exc)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

PyTypeObject *gdxpy_add_type(PyObject *m, PyType_Spec *spec)
{
	PyObject *t = PyType_FromSpec(spec);
	const char *dot;

	if (!t)
		return NULL;
	dot = strrchr(spec->name, '.');
	if (PyModule_AddObject(m, dot ? dot + 1 : spec->name, t) < 0) {
		Py_DECREF(t);
		return NULL;
	}
	/* The module holds the reference; the pointer lives as long as it. */
	return (PyTypeObject *)t;
}

static void dealloc_heap(PyObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	tp_free(self);
	Py_DECREF(tp);
}

/* ---- Driver ------------------------------------------------------------ */

static PyObject *driver_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "device", "backend", NULL };
	const char *spec = NULL, *backend = NULL;
	struct gdx_file_driver_opts o;
	struct gdxpy_driver *self;
	allocfunc alloc;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zz:Driver", kwlist, &spec, &backend))
		return NULL;
	alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
	self = (struct gdxpy_driver *)alloc(tp, 0);
	if (!self)
		return NULL;
	gdx_file_driver_opts_init(&o, sizeof(o));
	o.backend = backend;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_device_open(spec, &self->dev);
	if (!ret) {
		ret = gdx_file_driver_open(self->dev, &o, &self->drv);
		if (ret) {
			gdx_device_close(self->dev);
			self->dev = NULL;
		}
	}
	Py_END_ALLOW_THREADS
	if (ret) {
		Py_DECREF((PyObject *)self);
		return gdxpy_raise(ret, NULL);
	}
	return (PyObject *)self;
}

static void driver_dealloc(PyObject *o)
{
	struct gdxpy_driver *self = (struct gdxpy_driver *)o;

	if (self->drv)
		gdx_file_driver_close(self->drv);
	if (self->dev)
		gdx_device_close(self->dev);
	dealloc_heap(o);
}

static PyObject *driver_get_device(PyObject *o, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(gdx_device_name(((struct gdxpy_driver *)o)->dev));
}

static PyObject *driver_get_kind(PyObject *o, void *closure)
{
	(void)closure;
	return PyUnicode_FromString(gdx_device_kind(((struct gdxpy_driver *)o)->dev));
}

static PyObject *driver_get_ordinal(PyObject *o, void *closure)
{
	(void)closure;
	return PyLong_FromLong(gdx_device_ordinal(((struct gdxpy_driver *)o)->dev));
}

static PyObject *driver_describe(PyObject *o, PyObject *unused)
{
	char buf[1024];
	int ret;

	(void)unused;
	ret = gdx_file_driver_describe(((struct gdxpy_driver *)o)->drv, buf, sizeof(buf));
	if (ret < 0)
		return gdxpy_raise(ret, NULL);
	return PyUnicode_FromString(buf);
}

static PyObject *driver_props(PyObject *o, PyObject *unused)
{
	struct gdx_device_props p;
	int ret;

	(void)unused;
	ret = gdx_device_props(((struct gdxpy_driver *)o)->dev, &p);
	if (ret < 0)
		return gdxpy_raise(ret, NULL);
	return Py_BuildValue("{s:s,s:s,s:i,s:K,s:i,s:(ii),s:O,s:O,s:O}",
			     "model", p.model, "pci_bdf", p.pci_bdf, "numa_node", p.numa_node,
			     "total_mem", (unsigned long long)p.total_mem,
			     "driver_version", p.driver_version,
			     "compute_capability", p.cc_major, p.cc_minor,
			     "dmabuf_supported", p.dmabuf_supported ? Py_True : Py_False,
			     "gdr_supported", p.gdr_supported ? Py_True : Py_False,
			     "async_alloc_supported", p.async_alloc_supported ? Py_True : Py_False);
}

static PyObject *driver_alloc(PyObject *o, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "nbytes", "host", NULL };
	Py_ssize_t n;
	int host = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|p:alloc", kwlist, &n, &host))
		return NULL;
	if (n < 0) {
		PyErr_SetString(PyExc_ValueError, "nbytes must not be negative");
		return NULL;
	}
	return (PyObject *)gdxpy_array_new((struct gdxpy_driver *)o, (size_t)n, host);
}

/* The file driver's counters (gdx_file_driver_counter): where a transfer's time went. */
static PyObject *driver_counters(PyObject *o, PyObject *unused)
{
	struct gdx_file_driver *drv = ((struct gdxpy_driver *)o)->drv;
	PyObject *d = PyDict_New();
	const char *name;
	uint64_t v;

	(void)unused;
	for (unsigned i = 0; d && !gdx_file_driver_counter(drv, i, &name, &v); i++) {
		PyObject *n = PyLong_FromUnsignedLongLong(v);

		if (!n || PyDict_SetItemString(d, name, n) < 0) {
			Py_XDECREF(n);
			Py_CLEAR(d);
			break;
		}
		Py_DECREF(n);
	}
	return d;
}

static PyMethodDef driver_methods[] = {
	{ "describe", driver_describe, METH_NOARGS,
	  "The backends that initialised, and why each other one did not." },
	{ "props", driver_props, METH_NOARGS, "The device's properties as a dict." },
	{ "counters", driver_counters, METH_NOARGS,
	  "The file driver's counters since it opened, {name: value} (reads, bytes per path,\n"
	  "copies, nanoseconds spent in each step)." },
	{ "alloc", (PyCFunction)(void (*)(void))driver_alloc, METH_VARARGS | METH_KEYWORDS,
	  "alloc(nbytes, host=False) -> DeviceArray: uninitialised memory of this device\n"
	  "(or page-aligned host memory)." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef driver_getset[] = {
	{ "device", driver_get_device, NULL, "The device's name (\"cuda:0\").", NULL },
	{ "kind", driver_get_kind, NULL, "\"cuda\" or \"emulated\".", NULL },
	{ "ordinal", driver_get_ordinal, NULL, "The device's number within its kind.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot driver_slots[] = {
	{ Py_tp_new, (void *)driver_new },
	{ Py_tp_dealloc, (void *)driver_dealloc },
	{ Py_tp_methods, driver_methods },
	{ Py_tp_getset, driver_getset },
	{ Py_tp_doc, (void *)"Driver(device=None, backend=None): a device and gdx's file driver on it." },
	{ 0, NULL },
};

static PyType_Spec driver_spec = {
	"gdx._gdx.Driver", sizeof(struct gdxpy_driver), 0, Py_TPFLAGS_DEFAULT, driver_slots,
};

/* ---- Stream ------------------------------------------------------------ */

static struct gdxpy_stream *stream_alloc(struct gdxpy_driver *driver)
{
	allocfunc alloc = (allocfunc)PyType_GetSlot(gdxpy_stream_type, Py_tp_alloc);
	struct gdxpy_stream *st = (struct gdxpy_stream *)alloc(gdxpy_stream_type, 0);

	if (st) {
		Py_INCREF((PyObject *)driver);
		st->driver = driver;
	}
	return st;
}

static PyObject *stream_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "driver", NULL };
	struct gdxpy_driver *driver;
	struct gdxpy_stream *st;
	int ret;

	(void)tp;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!:Stream", kwlist, gdxpy_driver_type, &driver))
		return NULL;
	st = stream_alloc(driver);
	if (!st)
		return NULL;
	ret = gdx_stream_create(driver->dev, &st->s);
	if (ret) {
		Py_DECREF((PyObject *)st);
		return gdxpy_raise(ret, NULL);
	}
	return (PyObject *)st;
}

struct gdxpy_stream *gdxpy_stream_from(struct gdxpy_driver *driver, PyObject *obj)
{
	struct gdxpy_stream *st;
	PyObject *h = NULL;
	long long v;
	void *native;
	int ret;

	if (PyObject_TypeCheck(obj, gdxpy_stream_type)) {
		st = (struct gdxpy_stream *)obj;
		if (st->driver->dev != driver->dev) {
			PyErr_Format(PyExc_ValueError, "the stream belongs to %s, the file to %s",
				     gdx_device_name(st->driver->dev), gdx_device_name(driver->dev));
			return NULL;
		}
		Py_INCREF((PyObject *)st);
		return st;
	}
	if (PyLong_Check(obj)) {
		h = obj;
		Py_INCREF(h);
	} else if (PyObject_HasAttrString(obj, "cuda_stream")) {
		h = PyObject_GetAttrString(obj, "cuda_stream");
	} else if (PyObject_HasAttrString(obj, "ptr")) {
		h = PyObject_GetAttrString(obj, "ptr");
	} else {
		PyErr_Format(PyExc_TypeError,
			     "stream must be a gdx.Stream, a torch or CuPy stream or a handle (int), not %R",
			     (PyObject *)Py_TYPE(obj));
		return NULL;
	}
	if (!h)
		return NULL;
	if (!PyLong_Check(h)) {
		PyErr_Format(PyExc_TypeError, "a stream handle must be an int, not %R",
			     (PyObject *)Py_TYPE(h));
		Py_DECREF(h);
		return NULL;
	}
	v = PyLong_AsLongLong(h);
	Py_DECREF(h);
	if (v == -1 && PyErr_Occurred())
		return NULL;
	if (v < 0) {
		PyErr_SetString(PyExc_ValueError, "a stream handle is not negative");
		return NULL;
	}
	native = (void *)(uintptr_t)v;
	/* Handle 0 is CUDA's default stream, which the driver API names CU_STREAM_LEGACY. */
	if (!native && !strcmp(gdx_device_kind(driver->dev), "cuda"))
		native = (void *)(uintptr_t)1;
	if (!native) {
		PyErr_SetString(PyExc_ValueError, "stream handle 0 names no stream of this device");
		return NULL;
	}
	st = stream_alloc(driver);
	if (!st)
		return NULL;
	ret = gdx_stream_wrap(driver->dev, native, &st->s);
	if (ret) {
		Py_DECREF((PyObject *)st);
		return (struct gdxpy_stream *)gdxpy_raise(ret, NULL);
	}
	return st;
}

static void stream_dealloc(PyObject *o)
{
	struct gdxpy_stream *st = (struct gdxpy_stream *)o;

	if (st->s) {
		Py_BEGIN_ALLOW_THREADS
		gdx_stream_destroy(st->s);
		Py_END_ALLOW_THREADS
	}
	Py_XDECREF((PyObject *)st->driver);
	dealloc_heap(o);
}

static PyObject *stream_get_ptr(PyObject *o, void *closure)
{
	(void)closure;
	return PyLong_FromVoidPtr(gdx_stream_native(((struct gdxpy_stream *)o)->s));
}

static PyObject *stream_synchronize(PyObject *o, PyObject *unused)
{
	int ret;

	(void)unused;
	Py_BEGIN_ALLOW_THREADS
	ret = gdx_stream_synchronize(((struct gdxpy_stream *)o)->s);
	Py_END_ALLOW_THREADS
	if (ret)
		return gdxpy_raise(ret, NULL);
	Py_RETURN_NONE;
}

static PyObject *stream_query(PyObject *o, PyObject *unused)
{
	int ret = gdx_stream_query(((struct gdxpy_stream *)o)->s);

	(void)unused;
	if (ret == -EBUSY)
		Py_RETURN_FALSE;
	if (ret)
		return gdxpy_raise(ret, NULL);
	Py_RETURN_TRUE;
}

static PyMethodDef stream_methods[] = {
	{ "synchronize", stream_synchronize, METH_NOARGS, "Waits for the work enqueued so far." },
	{ "query", stream_query, METH_NOARGS, "True when the work enqueued so far is done." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef stream_getset[] = {
	{ "ptr", stream_get_ptr, NULL, "The native handle (CUstream), as CuPy names it.", NULL },
	{ "cuda_stream", stream_get_ptr, NULL, "The native handle, as torch names it.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot stream_slots[] = {
	{ Py_tp_new, (void *)stream_new },
	{ Py_tp_dealloc, (void *)stream_dealloc },
	{ Py_tp_methods, stream_methods },
	{ Py_tp_getset, stream_getset },
	{ Py_tp_doc, (void *)"Stream(driver): a stream of the driver's device." },
	{ 0, NULL },
};

static PyType_Spec stream_spec = {
	"gdx._gdx.Stream", sizeof(struct gdxpy_stream), 0, Py_TPFLAGS_DEFAULT, stream_slots,
};

/* ---- configuration ----------------------------------------------------- */

static PyObject *config_get(PyObject *m, PyObject *args)
{
	char buf[4096];
	const char *name;
	int ret;

	(void)m;
	if (!PyArg_ParseTuple(args, "s:config_get", &name))
		return NULL;
	ret = gdx_config_get(name, buf, sizeof(buf));
	if (ret < 0)
		return gdxpy_raise(ret, NULL);
	return PyUnicode_FromStringAndSize(buf, ret);
}

static PyObject *config_set(PyObject *m, PyObject *args)
{
	const char *name, *value;
	int ret;

	(void)m;
	if (!PyArg_ParseTuple(args, "sz:config_set", &name, &value))
		return NULL;
	ret = gdx_config_set(name, value);
	if (ret < 0)
		return gdxpy_raise(ret, NULL);
	Py_RETURN_NONE;
}

static PyObject *config_load(PyObject *m, PyObject *args)
{
	PyObject *path;
	int ret;

	(void)m;
	if (!PyArg_ParseTuple(args, "O&:config_load", PyUnicode_FSConverter, &path))
		return NULL;
	ret = gdx_config_load_file(PyBytes_AsString(path));
	Py_DECREF(path);
	if (ret < 0)
		return gdxpy_raise(ret, NULL);
	Py_RETURN_NONE;
}

static PyObject *config_knobs(PyObject *m, PyObject *unused)
{
	struct gdx_config_knob_info k;
	int n = gdx_config_knob(0, &k);
	PyObject *list = PyList_New(0);

	(void)m;
	(void)unused;
	if (!list)
		return NULL;
	for (int i = 0; i < n; i++) {
		PyObject *d;

		gdx_config_knob((unsigned)i, &k);
		d = Py_BuildValue("{s:s,s:s,s:s,s:s,s:s}", "name", k.name, "env", k.env,
				  "type", k.type, "default", k.def, "doc", k.doc);
		if (!d || PyList_Append(list, d) < 0) {
			Py_XDECREF(d);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(d);
	}
	return list;
}

/* ---- module ------------------------------------------------------------ */

static PyObject *mod_strerror(PyObject *m, PyObject *args)
{
	int code;

	(void)m;
	if (!PyArg_ParseTuple(args, "i:strerror", &code))
		return NULL;
	return PyUnicode_FromString(gdx_strerror(code));
}

static PyObject *mod_device_count(PyObject *m, PyObject *args)
{
	const char *kind;
	int n;

	(void)m;
	if (!PyArg_ParseTuple(args, "s:device_count", &kind))
		return NULL;
	n = gdx_device_count(kind);
	if (n < 0)
		return gdxpy_raise(n, NULL);
	return PyLong_FromLong(n);
}

static PyMethodDef module_methods[] = {
	{ "config_get", config_get, METH_VARARGS, "config_get(name) -> str" },
	{ "config_set", config_set, METH_VARARGS, "config_set(name, value or None)" },
	{ "config_load", config_load, METH_VARARGS, "config_load(path): a JSON knob file" },
	{ "config_knobs", config_knobs, METH_NOARGS, "Every knob as a dict." },
	{ "strerror", mod_strerror, METH_VARARGS, "Text for a gdx status code." },
	{ "device_count", mod_device_count, METH_VARARGS, "Devices of a kind on this machine." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT, "gdx._gdx", "libgdx for Python (see the package gdx).", -1,
	module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__gdx(void);
PyMODINIT_FUNC PyInit__gdx(void)
{
	PyObject *m = PyModule_Create(&module_def);

	if (!m)
		return NULL;
	if (!(gdxpy_driver_type = gdxpy_add_type(m, &driver_spec)) ||
	    !(gdxpy_stream_type = gdxpy_add_type(m, &stream_spec)) ||
	    gdxpy_module_add_array(m) < 0 || gdxpy_module_add_file(m) < 0 ||
	    gdxpy_module_add_nvmf(m) < 0 ||
	    PyModule_AddStringConstant(m, "libgdx_version", gdx_version()) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
