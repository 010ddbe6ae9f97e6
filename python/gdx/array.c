/* SPDX-License-Identifier: MIT */
/*
 * gdx.DeviceArray: bytes gdx allocated, in device memory or in page-aligned
 * host memory, handed to frameworks without a copy: DLPack and
 * __cuda_array_interface__ for device memory, DLPack and the buffer protocol
 * for host memory.  It is a flat uint8 array; frameworks view it as tensors.
 */
#include "_gdx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack.h"

PyTypeObject *gdxpy_array_type;

static int is_cuda(const struct gdxpy_array *a)
{
	return !a->host && !strcmp(gdx_device_kind(a->driver->dev), "cuda");
}

struct gdxpy_array *gdxpy_array_new(struct gdxpy_driver *driver, size_t len, int host)
{
	allocfunc alloc = (allocfunc)PyType_GetSlot(gdxpy_array_type, Py_tp_alloc);
	struct gdxpy_array *a = (struct gdxpy_array *)alloc(gdxpy_array_type, 0);
	void *p = NULL;
	int ret;

	if (!a)
		return NULL;
	Py_INCREF((PyObject *)driver);
	a->driver = driver;
	a->host = host;
	/* An empty array still gets a distinct, valid pointer, as frameworks expect. */
	if (host) {
		ret = posix_memalign(&p, 4096, len ? len : 1) ? -ENOMEM : 0;
	} else {
		Py_BEGIN_ALLOW_THREADS
		ret = gdx_device_malloc(driver->dev, len ? len : 1, &p);
		Py_END_ALLOW_THREADS
	}
	if (ret) {
		Py_DECREF((PyObject *)a);
		return (struct gdxpy_array *)gdxpy_raise(ret, NULL);
	}
	a->ptr = p;
	a->len = len;
	return a;
}

static void array_dealloc(PyObject *o)
{
	struct gdxpy_array *a = (struct gdxpy_array *)o;
	PyTypeObject *tp = Py_TYPE(o);

	if (a->ptr) {
		if (a->host) {
			free(a->ptr);
		} else {
			Py_BEGIN_ALLOW_THREADS
			gdx_device_free(a->driver->dev, a->ptr);
			Py_END_ALLOW_THREADS
		}
	}
	Py_XDECREF((PyObject *)a->driver);
	((freefunc)PyType_GetSlot(tp, Py_tp_free))(o);
	Py_DECREF(tp);
}

static Py_ssize_t array_len(PyObject *o)
{
	return (Py_ssize_t)((struct gdxpy_array *)o)->len;
}

static DLDevice array_dl_device(const struct gdxpy_array *a)
{
	DLDevice d = { kDLCPU, 0 };

	if (!a->host) {
		/* Emulated device memory is no memory any framework knows. */
		d.device_type = is_cuda(a) ? kDLCUDA : kDLExtDev;
		d.device_id = gdx_device_ordinal(a->driver->dev);
	}
	return d;
}

/* ---- DLPack export ------------------------------------------------------ */

struct dl_legacy {
	DLManagedTensor mt;
	int64_t shape[1];
};

struct dl_versioned {
	DLManagedTensorVersioned mt;
	int64_t shape[1];
};

/* Deleters may run on any thread, with or without the GIL. */
static void drop_owner(void *owner)
{
	PyGILState_STATE g = PyGILState_Ensure();

	Py_DECREF((PyObject *)owner);
	PyGILState_Release(g);
}

static void dl_legacy_deleter(DLManagedTensor *mt)
{
	drop_owner(mt->manager_ctx);
	free(mt);
}

static void dl_versioned_deleter(DLManagedTensorVersioned *mt)
{
	drop_owner(mt->manager_ctx);
	free(mt);
}

/* A capsule no consumer took still owns its tensor. */
static void dl_legacy_capsule_free(PyObject *cap)
{
	DLManagedTensor *mt;

	if (!PyCapsule_IsValid(cap, "dltensor"))
		return;
	mt = PyCapsule_GetPointer(cap, "dltensor");
	mt->deleter(mt);
}

static void dl_versioned_capsule_free(PyObject *cap)
{
	DLManagedTensorVersioned *mt;

	if (!PyCapsule_IsValid(cap, "dltensor_versioned"))
		return;
	mt = PyCapsule_GetPointer(cap, "dltensor_versioned");
	mt->deleter(mt);
}

static void dl_fill(DLTensor *t, struct gdxpy_array *a, int64_t *shape)
{
	shape[0] = (int64_t)a->len;
	t->data = a->ptr;
	t->device = array_dl_device(a);
	t->ndim = 1;
	t->dtype = (DLDataType){ kDLUInt, 8, 1 };
	t->shape = shape;
	t->strides = NULL;
	t->byte_offset = 0;
}

static PyObject *array_dlpack(PyObject *o, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "stream", "max_version", "dl_device", "copy", NULL };
	PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
	struct gdxpy_array *a = (struct gdxpy_array *)o;
	unsigned long major = 0;
	PyObject *cap;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist, &stream,
					 &max_version, &dl_device, &copy))
		return NULL;
	/* gdx's transfers are done when they return: no stream has to wait. */
	(void)stream;
	if (copy != Py_None && PyObject_IsTrue(copy)) {
		PyErr_SetString(PyExc_BufferError, "gdx.DeviceArray exports without a copy only");
		return NULL;
	}
	if (dl_device != Py_None) {
		DLDevice d = array_dl_device(a);
		int type, id;

		if (!PyArg_ParseTuple(dl_device, "ii", &type, &id))
			return NULL;
		if (type != d.device_type || id != d.device_id) {
			PyErr_SetString(PyExc_BufferError, "gdx.DeviceArray cannot move to another device");
			return NULL;
		}
	}
	if (max_version != Py_None) {
		PyObject *first = PySequence_GetItem(max_version, 0);

		if (!first)
			return NULL;
		major = PyLong_AsUnsignedLong(first);
		Py_DECREF(first);
		if (PyErr_Occurred())
			return NULL;
	}
	if (major >= 1) {
		struct dl_versioned *v = calloc(1, sizeof(*v));

		if (!v)
			return PyErr_NoMemory();
		v->mt.version = (DLPackVersion){ 1, 0 };
		v->mt.manager_ctx = o;
		v->mt.deleter = dl_versioned_deleter;
		dl_fill(&v->mt.dl_tensor, a, v->shape);
		cap = PyCapsule_New(&v->mt, "dltensor_versioned", dl_versioned_capsule_free);
		if (!cap) {
			free(v);
			return NULL;
		}
	} else {
		struct dl_legacy *l = calloc(1, sizeof(*l));

		if (!l)
			return PyErr_NoMemory();
		l->mt.manager_ctx = o;
		l->mt.deleter = dl_legacy_deleter;
		dl_fill(&l->mt.dl_tensor, a, l->shape);
		cap = PyCapsule_New(&l->mt, "dltensor", dl_legacy_capsule_free);
		if (!cap) {
			free(l);
			return NULL;
		}
	}
	Py_INCREF(o);	/* dropped by the deleter */
	return cap;
}

static PyObject *array_dlpack_device(PyObject *o, PyObject *unused)
{
	DLDevice d = array_dl_device((struct gdxpy_array *)o);

	(void)unused;
	return Py_BuildValue("(ii)", d.device_type, d.device_id);
}

/* ---- attributes --------------------------------------------------------- */

static PyObject *array_cai(PyObject *o, void *closure)
{
	struct gdxpy_array *a = (struct gdxpy_array *)o;

	(void)closure;
	if (!is_cuda(a)) {
		PyErr_SetString(PyExc_AttributeError,
				"__cuda_array_interface__: the array is not in CUDA device memory");
		return NULL;
	}
	return Py_BuildValue("{s:(n),s:s,s:(NO),s:i,s:O,s:O}", "shape", (Py_ssize_t)a->len,
			     "typestr", "|u1", "data", PyLong_FromVoidPtr(a->ptr), Py_False,
			     "version", 3, "strides", Py_None, "stream", Py_None);
}

static PyObject *array_get_nbytes(PyObject *o, void *closure)
{
	(void)closure;
	return PyLong_FromSize_t(((struct gdxpy_array *)o)->len);
}

static PyObject *array_get_ptr(PyObject *o, void *closure)
{
	(void)closure;
	return PyLong_FromVoidPtr(((struct gdxpy_array *)o)->ptr);
}

static PyObject *array_get_device(PyObject *o, void *closure)
{
	struct gdxpy_array *a = (struct gdxpy_array *)o;

	(void)closure;
	return PyUnicode_FromString(a->host ? "cpu" : gdx_device_name(a->driver->dev));
}

static PyObject *array_repr(PyObject *o)
{
	struct gdxpy_array *a = (struct gdxpy_array *)o;

	return PyUnicode_FromFormat("gdx.DeviceArray(nbytes=%zu, device='%s')", a->len,
				    a->host ? "cpu" : gdx_device_name(a->driver->dev));
}

static int array_getbuffer(PyObject *o, Py_buffer *view, int flags)
{
	struct gdxpy_array *a = (struct gdxpy_array *)o;

	if (!a->host) {
		PyErr_SetString(PyExc_BufferError,
				"device memory has no buffer protocol: use DLPack or "
				"__cuda_array_interface__");
		view->obj = NULL;
		return -1;
	}
	return PyBuffer_FillInfo(view, o, a->ptr, (Py_ssize_t)a->len, 0, flags);
}

static PyMethodDef array_methods[] = {
	{ "__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
	  "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)" },
	{ "__dlpack_device__", array_dlpack_device, METH_NOARGS, "(device type, device id)" },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef array_getset[] = {
	{ "__cuda_array_interface__", array_cai, NULL, "CUDA memory only (version 3).", NULL },
	{ "nbytes", array_get_nbytes, NULL, "Size in bytes.", NULL },
	{ "ptr", array_get_ptr, NULL, "Address of the first byte.", NULL },
	{ "device", array_get_device, NULL, "\"cpu\" or the device's name.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot array_slots[] = {
	{ Py_tp_dealloc, (void *)array_dealloc },
	{ Py_tp_repr, (void *)array_repr },
	{ Py_tp_methods, array_methods },
	{ Py_tp_getset, array_getset },
	{ Py_sq_length, (void *)array_len },
	{ Py_bf_getbuffer, (void *)array_getbuffer },
	{ Py_tp_doc, (void *)"Bytes gdx allocated (device or host), exported by DLPack, "
	  "__cuda_array_interface__ (CUDA) or the buffer protocol (host)." },
	{ 0, NULL },
};

static PyType_Spec array_spec = {
	"gdx.DeviceArray", sizeof(struct gdxpy_array), 0, Py_TPFLAGS_DEFAULT, array_slots,
};

int gdxpy_module_add_array(PyObject *m)
{
	gdxpy_array_type = gdxpy_add_type(m, &array_spec);
	return gdxpy_array_type ? 0 : -1;
}
