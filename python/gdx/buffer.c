/* SPDX-License-Identifier: MIT */
/*
 * Memory from any exporter, without a copy: a _gdx.DeviceArray, the buffer
 * protocol, __cuda_array_interface__ or __dlpack__.  Non-contiguous memory is
 * refused: gdx moves one byte range, and a silent copy would hide the cost.
 */
#include "_gdx.h"

#include <stdlib.h>
#include <string.h>

#include "dlpack.h"

static int refuse_strided(PyObject *obj)
{
	PyErr_Format(PyExc_ValueError,
		     "%R is not contiguous (a strided view or a step slice): gdx moves one byte "
		     "range; pass a contiguous array (e.g. .contiguous() or .copy())",
		     (PyObject *)Py_TYPE(obj));
	return -1;
}

/* Contiguous in C order: each stride the product of the sizes after it. */
static int c_contiguous(int ndim, const int64_t *shape, const int64_t *strides, int64_t unit)
{
	int64_t want = unit;

	if (!strides)
		return 1;
	for (int i = ndim - 1; i >= 0; i--) {
		if (shape[i] == 0)
			return 1;
		if (shape[i] != 1 && strides[i] != want)
			return 0;
		want *= shape[i];
	}
	return 1;
}

static int from_view(PyObject *obj, int writable, struct gdxpy_buf *b)
{
	int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);

	if (PyObject_GetBuffer(obj, &b->view, flags) < 0)
		return -1;
	b->has_view = 1;
	if (!PyBuffer_IsContiguous(&b->view, 'C')) {
		gdxpy_buf_release(b);
		return refuse_strided(obj);
	}
	b->ptr = b->view.buf;
	b->len = (size_t)b->view.len;
	return 0;
}

static int cai_item(PyObject *d, const char *key, PyObject **out)
{
	*out = PyDict_GetItemString(d, key);	/* borrowed */
	if (!*out) {
		PyErr_Format(PyExc_ValueError, "__cuda_array_interface__ has no '%s'", key);
		return -1;
	}
	return 0;
}

/* Bytes of one element of a typestr such as "<f4", "|u1", "<c8". */
static int64_t typestr_size(PyObject *ts)
{
	const char *s = PyUnicode_Check(ts) ? PyUnicode_AsUTF8AndSize(ts, NULL) : NULL;
	long n;

	if (!s || strlen(s) < 3)
		return -1;
	n = strtol(s + 2, NULL, 10);
	return n > 0 ? n : -1;
}

static int from_cai(PyObject *obj, PyObject *cai, int writable, struct gdxpy_buf *b)
{
	PyObject *data, *shape, *strides, *typestr, *stream;
	int64_t dims[32], steps[32], unit, n = 1;
	Py_ssize_t ndim;
	int readonly;

	if (!PyDict_Check(cai)) {
		PyErr_SetString(PyExc_TypeError, "__cuda_array_interface__ is not a dict");
		return -1;
	}
	if (cai_item(cai, "data", &data) < 0 || cai_item(cai, "shape", &shape) < 0 ||
	    cai_item(cai, "typestr", &typestr) < 0)
		return -1;
	if (!PyTuple_Check(data) || PyTuple_Size(data) != 2 || !PyTuple_Check(shape)) {
		PyErr_SetString(PyExc_ValueError, "__cuda_array_interface__: malformed data or shape");
		return -1;
	}
	unit = typestr_size(typestr);
	ndim = PyTuple_Size(shape);
	if (unit < 0 || ndim > 32) {
		PyErr_SetString(PyExc_ValueError, "__cuda_array_interface__: unsupported typestr or ndim");
		return -1;
	}
	for (Py_ssize_t i = 0; i < ndim; i++) {
		dims[i] = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
		if (dims[i] < 0)
			return PyErr_Occurred() ? -1 : (PyErr_SetString(PyExc_ValueError, "negative shape"), -1);
		n *= dims[i];
	}
	strides = PyDict_GetItemString(cai, "strides");
	if (strides && strides != Py_None) {
		if (!PyTuple_Check(strides) || PyTuple_Size(strides) != ndim) {
			PyErr_SetString(PyExc_ValueError, "__cuda_array_interface__: malformed strides");
			return -1;
		}
		for (Py_ssize_t i = 0; i < ndim; i++)
			steps[i] = PyLong_AsLongLong(PyTuple_GetItem(strides, i));
		if (PyErr_Occurred())
			return -1;
		if (!c_contiguous((int)ndim, dims, steps, unit))
			return refuse_strided(obj);
	}
	readonly = PyObject_IsTrue(PyTuple_GetItem(data, 1));
	if (readonly < 0)
		return -1;
	if (writable && readonly) {
		PyErr_Format(PyExc_ValueError, "%R is read-only", (PyObject *)Py_TYPE(obj));
		return -1;
	}
	b->ptr = PyLong_AsVoidPtr(PyTuple_GetItem(data, 0));
	if (PyErr_Occurred())
		return -1;
	b->len = (size_t)(n * unit);
	b->device = 1;
	stream = PyDict_GetItemString(cai, "stream");
	if (stream && stream != Py_None) {
		b->cai_stream = (uintptr_t)PyLong_AsVoidPtr(stream);
		if (PyErr_Occurred())
			return -1;
	}
	Py_INCREF(obj);
	b->keep = obj;
	return 0;
}

static int from_dlpack(PyObject *obj, struct gdxpy_buf *b)
{
	PyObject *cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
	DLManagedTensor *mt;
	DLTensor *t;
	int64_t n = 1, unit;

	if (!cap)
		return -1;
	mt = PyCapsule_GetPointer(cap, "dltensor");
	if (!mt) {
		Py_DECREF(cap);
		return -1;
	}
	t = &mt->dl_tensor;
	unit = ((int64_t)t->dtype.bits * t->dtype.lanes + 7) / 8;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	if (t->dtype.bits % 8 && n > 1) {
		Py_DECREF(cap);
		PyErr_SetString(PyExc_ValueError, "DLPack tensor of sub-byte elements is not supported");
		return -1;
	}
	if (!c_contiguous(t->ndim, t->shape, t->strides, 1)) {
		Py_DECREF(cap);
		return refuse_strided(obj);
	}
	switch (t->device.device_type) {
	case kDLCPU:
	case kDLCUDAHost:
		b->device = 0;
		break;
	case kDLCUDA:
	case kDLCUDAManaged:
		b->device = 1;
		break;
	default:
		Py_DECREF(cap);
		PyErr_Format(PyExc_ValueError, "DLPack device type %d is not memory gdx can reach",
			     (int)t->device.device_type);
		return -1;
	}
	b->ptr = (char *)t->data + t->byte_offset;
	b->len = (size_t)(n * unit);
	/* The capsule stays unconsumed: dropping it runs the producer's deleter. */
	b->keep = cap;
	return 0;
}

int gdxpy_buf_get(PyObject *obj, int writable, struct gdxpy_buf *b)
{
	PyObject *cai;

	memset(b, 0, sizeof(*b));
	if (PyObject_TypeCheck(obj, gdxpy_array_type)) {
		struct gdxpy_array *a = (struct gdxpy_array *)obj;

		b->ptr = a->ptr;
		b->len = a->len;
		b->device = !a->host;
		Py_INCREF(obj);
		b->keep = obj;
		return 0;
	}
	if (PyObject_CheckBuffer(obj))
		return from_view(obj, writable, b);
	cai = PyObject_GetAttrString(obj, "__cuda_array_interface__");
	if (cai) {
		int ret = from_cai(obj, cai, writable, b);

		Py_DECREF(cai);
		return ret;
	}
	if (!PyErr_ExceptionMatches(PyExc_AttributeError))
		return -1;
	PyErr_Clear();
	if (PyObject_HasAttrString(obj, "__dlpack__"))
		return from_dlpack(obj, b);
	PyErr_Format(PyExc_TypeError,
		     "%R exports no memory gdx can use: it needs the buffer protocol, "
		     "__cuda_array_interface__ or __dlpack__", (PyObject *)Py_TYPE(obj));
	return -1;
}

void gdxpy_buf_release(struct gdxpy_buf *b)
{
	if (b->has_view)
		PyBuffer_Release(&b->view);
	b->has_view = 0;
	Py_CLEAR(b->keep);
}
