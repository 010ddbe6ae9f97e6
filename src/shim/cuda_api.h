/* SPDX-License-Identifier: MIT */
#ifndef GDX_SHIM_CUDA_API_H
#define GDX_SHIM_CUDA_API_H

/*
 * The slice of the CUDA driver API gdx uses, declared here because the build
 * machines have no CUDA toolkit.  Values and layouts follow cuda.h of CUDA
 * 12/13 (they are ABI: NVIDIA never renumbers them).  The entry points are
 * loaded from libcuda.so.1 at run time through cuGetProcAddress, asking for
 * the CUDA 12.0 flavour of each, so the _v2 renames are resolved by the driver.
 */

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef void (*CUhostFn)(void *user_data);

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_DEINITIALIZED = 4,
	CUDA_ERROR_STUB_LIBRARY = 34,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_READY = 600,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};

/* cuGetProcAddress */
#define CU_GET_PROC_ADDRESS_DEFAULT 0ull
enum { CU_GET_PROC_ADDRESS_SUCCESS = 0 };
#define GDX_CUDA_API_VERSION 12000	/* the ABI gdx asks the driver for */

/* Special streams usable with any API that takes a stream. */
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

#define CU_STREAM_NON_BLOCKING 0x1u
#define CU_EVENT_DEFAULT 0x0u
#define CU_EVENT_DISABLE_TIMING 0x2u

#define CU_MEMHOSTALLOC_PORTABLE 0x01u
#define CU_STREAM_WAIT_VALUE_GEQ 0x0u
#define CU_MEMHOSTREGISTER_PORTABLE 0x01u
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02u
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08u
#define CU_MEM_ATTACH_GLOBAL 0x1u

typedef enum {
	CU_MEMORYTYPE_HOST = 0x01,
	CU_MEMORYTYPE_DEVICE = 0x02,
	CU_MEMORYTYPE_ARRAY = 0x03,
	CU_MEMORYTYPE_UNIFIED = 0x04,
} CUmemorytype;

typedef enum {
	CU_POINTER_ATTRIBUTE_CONTEXT = 1,
	CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
	CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
	CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
	CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
	CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
	CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
	CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10,
	CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
	CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
	CU_POINTER_ATTRIBUTE_MAPPED = 13,
	CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES = 14,
	CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE = 15,
	CU_POINTER_ATTRIBUTE_ACCESS_FLAGS = 16,
	CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17,
	CU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18,
	CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19,
	CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID = 20,
} CUpointer_attribute;

typedef enum {
	CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
	CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
	CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
	CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
	CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
	CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110,
	CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
	CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
	CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
} CUdevice_attribute;

typedef enum {
	CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 0x1,
} CUmemRangeHandleType;

/* Virtual memory management (cuMemCreate / cuMemMap), used by the GPU tests. */
typedef enum {
	CU_MEM_HANDLE_TYPE_NONE = 0x0,
	CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1,
} CUmemAllocationHandleType;
typedef enum { CU_MEM_ALLOCATION_TYPE_PINNED = 0x1 } CUmemAllocationType;
typedef enum { CU_MEM_LOCATION_TYPE_DEVICE = 0x1 } CUmemLocationType;
typedef enum { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3 } CUmemAccess_flags;
typedef enum {
	CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 0x1,
} CUmemAllocationGranularity_flags;

typedef struct {
	CUmemLocationType type;
	int id;
} CUmemLocation;

typedef struct {
	CUmemAllocationType type;
	CUmemAllocationHandleType requestedHandleTypes;
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct {
	CUmemLocation location;
	CUmemAccess_flags flags;
} CUmemAccessDesc;

/* cuMemcpyBatchAsync (12.8): the source is read in stream order */
#define CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 0x1
typedef struct {
	unsigned srcAccessOrder;
	CUmemLocation srcLocHint;
	CUmemLocation dstLocHint;
	unsigned flags;
} CUmemcpyAttributes;

/*
 * The loaded entry points.  Those marked optional may be NULL on older
 * drivers; the features that need them then report -EOPNOTSUPP.
 */
struct gdx_cu {
	int driver_version;
	CUresult (*cuGetErrorName)(CUresult err, const char **name);
	CUresult (*cuDeviceGetCount)(int *count);
	CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
	CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
	CUresult (*cuDeviceGetAttribute)(int *v, CUdevice_attribute attr, CUdevice dev);
	CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice dev);
	CUresult (*cuDeviceGetPCIBusId)(char *id, int len, CUdevice dev);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev);
	CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
	CUresult (*cuCtxSetCurrent)(CUcontext ctx);
	/* Optional, for tests of context handling (cuCtxCreate_v2). */
	CUresult (*cuCtxCreate)(CUcontext *ctx, unsigned flags, CUdevice dev);
	CUresult (*cuCtxDestroy)(CUcontext ctx);

	CUresult (*cuMemAlloc)(CUdeviceptr *p, size_t size);
	CUresult (*cuMemFree)(CUdeviceptr p);
	CUresult (*cuMemAllocAsync)(CUdeviceptr *p, size_t size, CUstream s);	/* optional */
	CUresult (*cuMemFreeAsync)(CUdeviceptr p, CUstream s);			/* optional */
	CUresult (*cuMemAllocManaged)(CUdeviceptr *p, size_t size, unsigned flags);
	CUresult (*cuMemHostAlloc)(void **p, size_t size, unsigned flags);
	CUresult (*cuMemFreeHost)(void *p);
	CUresult (*cuMemHostRegister)(void *p, size_t size, unsigned flags);
	CUresult (*cuMemHostUnregister)(void *p);
	CUresult (*cuPointerGetAttribute)(void *data, CUpointer_attribute attr, CUdeviceptr p);
	CUresult (*cuPointerGetAttributes)(unsigned n, CUpointer_attribute *attrs, void **data,
					   CUdeviceptr p);
	CUresult (*cuMemGetAddressRange)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
	CUresult (*cuMemGetHandleForAddressRange)(void *handle, CUdeviceptr p, size_t size,
						  CUmemRangeHandleType type,
						  unsigned long long flags);	/* optional */
	CUresult (*cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
	/* optional; the 12.8 flavour, with failIdx (13.0's _v2 dropped it) */
	CUresult (*cuMemcpyBatchAsync)(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
				       size_t count, CUmemcpyAttributes *attrs, size_t *attr_idx,
				       size_t nattrs, size_t *fail_idx, CUstream s);
	CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);

	CUresult (*cuStreamCreate)(CUstream *s, unsigned flags);
	CUresult (*cuStreamDestroy)(CUstream s);
	CUresult (*cuStreamSynchronize)(CUstream s);
	CUresult (*cuStreamQuery)(CUstream s);
	CUresult (*cuStreamWaitEvent)(CUstream s, CUevent e, unsigned flags);
	CUresult (*cuStreamGetCtx)(CUstream s, CUcontext *ctx);
	CUresult (*cuLaunchHostFunc)(CUstream s, CUhostFn fn, void *arg);
	CUresult (*cuStreamWaitValue32)(CUstream s, CUdeviceptr addr, uint32_t value, unsigned flags);
	CUresult (*cuStreamWriteValue32)(CUstream s, CUdeviceptr addr, uint32_t value, unsigned flags);
	CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *d, void *p, unsigned flags);
	CUresult (*cuEventCreate)(CUevent *e, unsigned flags);
	CUresult (*cuEventDestroy)(CUevent e);
	CUresult (*cuEventRecord)(CUevent e, CUstream s);
	CUresult (*cuEventSynchronize)(CUevent e);
	CUresult (*cuEventQuery)(CUevent e);
	CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);

	/* Kernels: optional; without them batches of small copies stay on the copy engine. */
	CUresult (*cuModuleLoadData)(CUmodule *m, const void *image);
	CUresult (*cuModuleUnload)(CUmodule m);
	CUresult (*cuModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
	CUresult (*cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
				   unsigned bx, unsigned by, unsigned bz, unsigned shmem,
				   CUstream s, void **params, void **extra);

	/* Virtual memory management: optional, used by tests and callers that map memory. */
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *h, size_t size,
				const CUmemAllocationProp *prop, unsigned long long flags);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle h);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
					unsigned long long flags);
	CUresult (*cuMemAddressFree)(CUdeviceptr p, size_t size);
	CUresult (*cuMemMap)(CUdeviceptr p, size_t size, size_t offset,
			     CUmemGenericAllocationHandle h, unsigned long long flags);
	CUresult (*cuMemUnmap)(CUdeviceptr p, size_t size);
	CUresult (*cuMemSetAccess)(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc,
				   size_t count);
	CUresult (*cuMemGetAllocationGranularity)(size_t *g, const CUmemAllocationProp *prop,
						  CUmemAllocationGranularity_flags opt);
};

/*
 * Loads libcuda (the knob cuda.lib names it) once per process and initialises
 * the driver.  Returns the number of devices (0 where the driver reports none),
 * GDX_ENOLIB when the library cannot be loaded, GDX_EDRIVER when it is unusable.
 * *api is set whenever the return value is > 0.
 */
int gdx_cu_load(const struct gdx_cu **api);
/* Why loading failed, for messages ("libcuda.so.1: cannot open shared object file"). */
const char *gdx_cu_load_error(void);

/*
 * The one translation of CUresult into gdx codes; logs the CUDA error name
 * against `call` once, at the failing call.  Returns 0 for CUDA_SUCCESS.
 */
int gdx_cu_status(CUresult r, const char *call);

#endif
