/* SPDX-License-Identifier: MIT */
#ifndef GDX_PY_GDX_H
#define GDX_PY_GDX_H

/*
 * The extension module _gdx: libgdx's file API, device memory and DLPack
 * export for Python, through the limited API where the Python allows it
 * (3.11 and later).  Only the public headers <gdx/...> are used.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <sys/types.h>

#include <gdx/gdx.h>

/* ---- module.c: errors, drivers, streams ------------------------------- */

/* Raises the gdx.GdxError subclass for code (negative), naming filename if not NULL. */
PyObject *gdxpy_raise(int code, PyObject *filename);

/* One device and a file driver bound to it (_gdx.Driver). */
struct gdxpy_driver {
	PyObject_HEAD
	struct gdx_device *dev;
	struct gdx_file_driver *drv;
};
extern PyTypeObject *gdxpy_driver_type;

/* A stream of a driver's device (_gdx.Stream): created by gdx or wrapping a handle. */
struct gdxpy_stream {
	PyObject_HEAD
	struct gdxpy_driver *driver;
	struct gdx_stream *s;
};
extern PyTypeObject *gdxpy_stream_type;

/*
 * The stream obj names, for driver's device: a _gdx.Stream (a new reference
 * to it), or a handle (an int, or an object with .cuda_stream or .ptr: torch
 * and CuPy streams) wrapped in a new _gdx.Stream.  NULL with an exception set.
 */
struct gdxpy_stream *gdxpy_stream_from(struct gdxpy_driver *driver, PyObject *obj);

/* ---- buffer.c: memory from any exporter ------------------------------- */

/*
 * A contiguous byte range taken from a Python object: the buffer protocol
 * (NumPy, bytearray, mmap), __cuda_array_interface__ (torch and CuPy on GPU),
 * __dlpack__ (any framework), or a _gdx.DeviceArray.  Held until released.
 */
struct gdxpy_buf {
	char *ptr;
	size_t len;
	int device;		/* device memory (not host-addressable) */
	Py_buffer view;		/* the buffer protocol's, when has_view */
	int has_view;
	PyObject *keep;		/* what keeps the memory alive otherwise */
	uintptr_t cai_stream;	/* __cuda_array_interface__'s stream, 0 if none */
};
/* writable: the range will be written into.  -1 with an exception set. */
int gdxpy_buf_get(PyObject *obj, int writable, struct gdxpy_buf *b);
void gdxpy_buf_release(struct gdxpy_buf *b);

/* ---- array.c: gdx.DeviceArray ----------------------------------------- */

/* Bytes owned by gdx: device memory of a driver's device, or host memory. */
struct gdxpy_array {
	PyObject_HEAD
	struct gdxpy_driver *driver;
	char *ptr;
	size_t len;
	int host;		/* page-aligned host memory, else device memory */
};
extern PyTypeObject *gdxpy_array_type;

/* A new array of len bytes (host or device); NULL with an exception set. */
struct gdxpy_array *gdxpy_array_new(struct gdxpy_driver *driver, size_t len, int host);

/* ---- file.c: gdx.File -------------------------------------------------- */

extern PyTypeObject *gdxpy_file_type;
extern PyTypeObject *gdxpy_streamio_type;

/* Type set-up of each file, called once from the module's init. */
int gdxpy_module_add_array(PyObject *m);
int gdxpy_module_add_file(PyObject *m);
int gdxpy_module_add_nvmf(PyObject *m);

/* Creates a heap type from spec and adds it to m under its short name. */
PyTypeObject *gdxpy_add_type(PyObject *m, PyType_Spec *spec);

#endif
