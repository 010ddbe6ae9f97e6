# SPDX-License-Identifier: MIT
"""Loads safetensors checkpoints straight into device memory.

    sd = gdx.safetensors.load_file("model.safetensors", device="cuda:0")   # torch
    sd = gdx.safetensors.load_file("model.safetensors", framework="numpy") # host

The header is parsed here; then the whole data section comes in with one gdx
read into one allocation, and every tensor is a view of it (no per-tensor
copies, no page-cache staging in Python).  The tensors share that allocation:
it is freed when the last of them is.  For torch the allocation is torch's
own (its caching allocator and memory accounting see it); otherwise gdx's.

Format: an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}}),
then the data; offsets count from the first byte after the header.
"""
import json
import math
import struct

from . import File, _device_spec, _read_all

# Bits per element of every dtype the format has.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

# The safetensors package refuses headers larger than this; so does gdx.
MAX_HEADER = 100 * 1000 * 1000


class SafetensorsError(ValueError):
    """The file is not a well-formed safetensors file."""


class TensorInfo:
    """One tensor of the header: dtype, shape and its bytes [begin, end) of the data."""

    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end

    def __repr__(self):
        return "TensorInfo(%r, %s, %s, [%d, %d))" % (self.name, self.dtype, self.shape,
                                                    self.begin, self.end)


def _fail(path, msg):
    raise SafetensorsError("%s: %s" % (path, msg))


def parse_header(path, blob, file_size):
    """(data start, {name: TensorInfo}, metadata) from the header blob (the JSON)."""
    try:
        header = json.loads(blob)
    except (UnicodeDecodeError, ValueError) as e:
        _fail(path, "the header is not valid JSON (%s)" % e)
    if not isinstance(header, dict):
        _fail(path, "the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and
                                     all(isinstance(v, str) for v in metadata.values())):
        _fail(path, "__metadata__ must map names to strings")
    start = 8 + len(blob)
    data_len = file_size - start
    tensors = {}
    for name, t in header.items():
        try:
            dtype, shape, (begin, end) = t["dtype"], t["shape"], t["data_offsets"]
        except (TypeError, KeyError, ValueError):
            _fail(path, "tensor %r: needs dtype, shape and data_offsets [begin, end]" % name)
        if dtype not in DTYPE_BITS:
            _fail(path, "tensor %r: unknown dtype %r" % (name, dtype))
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            _fail(path, "tensor %r: shape must be a list of sizes, not %r" % (name, shape))
        if not (type(begin) is int and type(end) is int and 0 <= begin <= end):
            _fail(path, "tensor %r: bad data_offsets %r" % (name, t["data_offsets"]))
        bits = math.prod(shape) * DTYPE_BITS[dtype]
        if bits % 8 or end - begin != bits // 8:
            _fail(path, "tensor %r: %s%s needs %s bytes, data_offsets give %d"
                  % (name, dtype, shape, bits / 8, end - begin))
        if end > data_len:
            _fail(path, "tensor %r: data_offsets [%d, %d) point past the end of the file "
                  "(%d bytes of data)" % (name, begin, end, max(data_len, 0)))
        tensors[name] = TensorInfo(name, dtype, tuple(shape), begin, end)
    # The data is the tensors back to back, nothing else (the format forbids
    # holes, so a file cannot hide other content), as the safetensors package checks.
    at = 0
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin != at:
            _fail(path, "tensor %r at [%d, %d): %s" % (
                t.name, t.begin, t.end, "tensors overlap" if t.begin < at else "holes in the data"))
        at = t.end
    if at != data_len:
        _fail(path, "holes in the data: the tensors end at %d of %d bytes" % (at, data_len))
    return start, tensors, metadata


def _open_header(f):
    size = f.size
    head = bytearray(8)
    if size < 8 or f.read_into(head, 0) != 8:
        _fail(f.name, "%d bytes: too short for a safetensors header" % size)
    (n,) = struct.unpack("<Q", head)
    if n > MAX_HEADER:
        _fail(f.name, "header length %d is beyond the %d the format allows" % (n, MAX_HEADER))
    if n > size - 8:
        _fail(f.name, "header length %d points past the end of the file (%d bytes)" % (n, size))
    blob = bytearray(n)
    if f.read_into(blob, 8) != n:
        _fail(f.name, "the file shrank while its header was read")
    return parse_header(f.name, bytes(blob), size)


def load_raw(path, device=None, *, progress=False):
    """(DeviceArray of the data section, {name: TensorInfo}, metadata): the
    checkpoint's bytes in one allocation on device ("cpu" for host memory),
    read with one gdx read, with the header that says where each tensor lies."""
    with File(path, "r", device=None if _device_spec(device) is None else device) as f:
        start, tensors, metadata = _open_header(f)
        arr = f.read(_data_size(tensors), start, device=device, progress=progress)
    return arr, tensors, metadata


def _data_size(tensors):
    return max((t.end for t in tensors.values()), default=0)


def _load_torch(path, device, progress):
    """(uint8 tensor of the data section, {name: TensorInfo}): the allocation is
    torch's (its caching allocator, its memory accounting), the read gdx's."""
    import torch
    dev = torch.device(device)
    with File(path, "r", device=dev if dev.type == "cuda" else None) as f:
        start, tensors, _ = _open_header(f)
        size = _data_size(tensors)
        base = torch.empty(size, dtype=torch.uint8, device=dev)
        if _read_all(f, base, start, size, progress) != size:
            _fail(path, "the file shrank while it was read")
    return base, tensors


def _torch_dtypes(torch):
    names = {
        "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
        "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
        "F32": "float32", "C64": "complex64", "F64": "float64", "I64": "int64",
        "U64": "uint64", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
        "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
        "F8_E5M2FNUZ": "float8_e5m2fnuz", "F4": "float4_e2m1fn_x2",
    }
    return {k: getattr(torch, v) for k, v in names.items() if hasattr(torch, v)}


def _numpy_dtypes(np):
    table = {
        "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
        "F16": np.float16, "I32": np.int32, "U32": np.uint32, "F32": np.float32,
        "C64": np.complex64, "F64": np.float64, "I64": np.int64, "U64": np.uint64,
    }
    try:
        import ml_dtypes
    except ImportError:
        return table
    for k, v in {"BF16": "bfloat16", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn",
                 "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
                 "F8_E5M2FNUZ": "float8_e5m2fnuz"}.items():
        if hasattr(ml_dtypes, v):
            table[k] = getattr(ml_dtypes, v)
    return table


def _no_dtype(path, t, framework):
    raise TypeError("%s: tensor %r is %s, which %s has no dtype for (gdx.safetensors.load_raw "
                    "gives its bytes)" % (path, t.name, t.dtype, framework))


def _split_torch(path, base, tensors):
    import torch
    dtypes = _torch_dtypes(torch)
    # base as each dtype once; then one as_strided per tensor, where slicing,
    # view and reshape were three torch calls (a few microseconds each, for
    # thousands of tensors in a large checkpoint).
    typed = {}
    out = {}
    for t in tensors.values():
        dt = dtypes.get(t.dtype) or _no_dtype(path, t, "torch")
        shape = t.shape
        if t.dtype == "F4":
            # Two values a byte: torch counts bytes in the last dimension.
            shape = shape[:-1] + (shape[-1] // 2,)
        if t.begin % dt.itemsize:
            # The format does not promise alignment: a view of a misaligned
            # offset is not allowed, so this one tensor is copied.
            out[t.name] = base[t.begin:t.end].clone().view(dt).reshape(shape)
            continue
        whole = typed.get(dt)
        if whole is None:
            whole = typed[dt] = base[:base.numel() - base.numel() % dt.itemsize].view(dt)
        strides, n = [], 1
        for d in reversed(shape):
            strides.append(n)
            n *= d
        out[t.name] = whole.as_strided(shape, strides[::-1],
                                       whole.storage_offset() + t.begin // dt.itemsize)
    return out


def _split_array(path, base, tensors, dtypes, framework):
    out = {}
    for t in tensors.values():
        dt = dtypes.get(t.dtype) or _no_dtype(path, t, framework)
        out[t.name] = base[t.begin:t.end].view(dt).reshape(t.shape)
    return out


def load_file(path, device="cuda:0", *, framework="pt", progress=False):
    """{name: tensor} of a safetensors file, in device memory, dtype and shape exact.

    framework: "pt" (torch tensors, on device), "numpy" (host arrays; device is
    ignored), "cupy" (CuPy arrays on device).  For BF16 and FP8 with NumPy,
    ml_dtypes must be installed.  progress: a tqdm bar, if tqdm is installed.
    """
    if framework in ("pt", "torch"):
        base, tensors = _load_torch(path, device, progress)
        return _split_torch(path, base, tensors)
    if framework in ("np", "numpy"):
        import numpy as np
        arr, tensors, _ = load_raw(path, "cpu", progress=progress)
        return _split_array(path, np.frombuffer(arr, dtype=np.uint8), tensors,
                            _numpy_dtypes(np), "numpy")
    if framework == "cupy":
        import cupy
        import numpy as np
        arr, tensors, _ = load_raw(path, device, progress=progress)
        return _split_array(path, cupy.from_dlpack(arr), tensors, _numpy_dtypes(np), "cupy")
    raise ValueError("framework must be 'pt', 'numpy' or 'cupy', not %r" % (framework,))


def load_metadata(path):
    """The header's __metadata__ (or None) and {name: TensorInfo}, without reading any data."""
    with File(path, "r") as f:
        _, tensors, metadata = _open_header(f)
    return metadata, tensors
