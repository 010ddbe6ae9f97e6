/* SPDX-License-Identifier: MIT */
#ifndef GDX_PY_DLPACK_H
#define GDX_PY_DLPACK_H

/*
 * The DLPack ABI (dmlc/dlpack, version 1.0): the structs a capsule carries,
 * declared here from the specification so that the module needs no header of
 * a framework.  Legacy capsules are named "dltensor" and carry a
 * DLManagedTensor; versioned ones "dltensor_versioned" and carry a
 * DLManagedTensorVersioned.  A consumer renames the capsule "used_..." once it
 * owns the tensor; an unrenamed capsule's destructor calls the deleter.
 */

#include <stdint.h>

enum {
	kDLCPU = 1,
	kDLCUDA = 2,
	kDLCUDAHost = 3,
	kDLExtDev = 12,
	kDLCUDAManaged = 13,
};

enum { kDLUInt = 1 };

typedef struct {
	int32_t device_type;
	int32_t device_id;
} DLDevice;

typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} DLDataType;

typedef struct {
	void *data;
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;
	int64_t *strides;
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
	uint32_t major;
	uint32_t minor;
} DLPackVersion;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1ull << 0)

typedef struct DLManagedTensorVersioned {
	DLPackVersion version;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensorVersioned *self);
	uint64_t flags;
	DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif
