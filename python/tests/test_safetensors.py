# SPDX-License-Identifier: MIT
"""gdx.safetensors against the safetensors package's own reading, on files
this test writes: every dtype the format has, empty and scalar tensors,
misaligned offsets, and every kind of broken header."""
import json
import os
import struct

import numpy as np
import pytest
import safetensors
import safetensors.numpy

import gdx
import gdx.safetensors as gst
from conftest import cuda_torch

# (dtype, shape) for every dtype: the sub-byte ones with element counts that fill whole bytes.
ALL = [
    ("BOOL", [7]), ("U8", [3, 5]), ("I8", [9]), ("F8_E5M2", [4, 4]), ("F8_E4M3", [5]),
    ("F8_E8M0", [6]), ("F8_E4M3FNUZ", [2, 3]), ("F8_E5M2FNUZ", [8]), ("I16", [3, 3]),
    ("U16", [7]), ("F16", [2, 2, 2]), ("BF16", [33, 3]), ("I32", [5]), ("U32", [1, 9]),
    ("F32", [64, 17]), ("C64", [3]), ("F64", [4, 1]), ("I64", [2]), ("U64", [6]),
    ("F4", [3, 4]), ("F6_E2M3", [8]), ("F6_E3M2", [4, 4]),
]
def _reference_reads(dtype):
    h = json.dumps({"a": {"dtype": dtype, "shape": [0], "data_offsets": [0, 0]}}).encode()
    try:
        safetensors.deserialize(struct.pack("<Q", len(h)) + h)
        return True
    except Exception:
        return False


# The dtypes this safetensors release knows (0.7 lacks the FNUZ ones, say).
REF_DTYPES = {d for d, _ in ALL if _reference_reads(d)}
NUMPY_DTYPES = {"BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "C64", "F64",
                "I64", "U64"}


def nbytes(dtype, shape):
    return int(np.prod(shape, dtype=np.int64)) * gst.DTYPE_BITS[dtype] // 8


def payload_for(dtype, n):
    """n bytes that are valid values of dtype (BOOL must be 0 or 1)."""
    raw = os.urandom(n)
    return bytes(b & 1 for b in raw) if dtype == "BOOL" else raw


def write_safetensors(path, tensors, metadata=None, aligned=True):
    """Writes tensors [(name, dtype, shape, bytes)] back to back, as the format
    wants (no holes): widest dtype first when aligned, as safetensors' own
    writer does, so every tensor sits at a multiple of its element size; else
    in the order given, which misaligns the wider ones."""
    if aligned:
        tensors = sorted(tensors, key=lambda t: -gst.DTYPE_BITS[t[1]])
    header, blobs, off = {}, [], 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return path


def all_dtypes_file(tmp_path, aligned=True, dtypes=None):
    """A file with a tensor of each dtype (default: those the reference reads)."""
    dtypes = REF_DTYPES if dtypes is None else dtypes
    tensors = [("t_%s" % d, d, s, payload_for(d, nbytes(d, s))) for d, s in ALL if d in dtypes]
    tensors += [("empty", "F32", [0, 4], b""), ("scalar", "F64", [], payload_for("F64", 8)),
                ("empty_bf16", "BF16", [3, 0], b"")]
    p = write_safetensors(tmp_path / "all.safetensors", tensors, {"format": "pt"}, aligned)
    return p, {name: (dtype, shape, data) for name, dtype, shape, data in tensors}


def reference(path):
    """{name: (dtype, shape, bytes)} as the safetensors package reads the file."""
    return {k: (v["dtype"], list(v["shape"]), bytes(v["data"]))
            for k, v in safetensors.deserialize(path.read_bytes())}


@pytest.mark.parametrize("aligned", [True, False])
def test_raw_matches_safetensors_on_host(tmp_path, aligned):
    p, written = all_dtypes_file(tmp_path, aligned)
    ref = reference(p)
    assert ref == written
    arr, tensors, meta = gst.load_raw(p, "cpu")
    assert meta == {"format": "pt"}
    assert set(tensors) == set(ref)
    data = np.from_dlpack(arr).tobytes()
    for name, t in tensors.items():
        dtype, shape, raw = ref[name]
        assert (t.dtype, list(t.shape)) == (dtype, shape)
        assert data[t.begin:t.end] == raw, name


def test_every_dtype_of_the_format(tmp_path):
    """All the format's dtypes, also those this safetensors release may not know."""
    p, written = all_dtypes_file(tmp_path, dtypes={d for d, _ in ALL})
    arr, tensors, _ = gst.load_raw(p, "cpu")
    data = np.from_dlpack(arr).tobytes()
    assert {t.dtype for t in tensors.values()} == set(gst.DTYPE_BITS)
    for name, (dtype, shape, raw) in written.items():
        t = tensors[name]
        assert (t.dtype, list(t.shape), data[t.begin:t.end]) == (dtype, shape, raw), name


def test_raw_on_the_device(tmp_path, drv):
    p, _ = all_dtypes_file(tmp_path)
    ref = reference(p)
    arr, tensors, _ = gst.load_raw(p, drv.device)
    assert arr.device == drv.device
    back = tmp_path / "back.bin"
    with gdx.File(back, "w") as f:
        f.write_from(arr)
    data = back.read_bytes()
    for name, t in tensors.items():
        assert data[t.begin:t.end] == ref[name][2], name


@pytest.mark.parametrize("aligned", [True, False])
def test_numpy_matches_safetensors(tmp_path, aligned):
    tensors = [("t_%s" % d, d, s, payload_for(d, nbytes(d, s))) for d, s in ALL
               if d in NUMPY_DTYPES]
    tensors.append(("empty", "I32", [2, 0], b""))
    tensors.append(("scalar", "F32", [], payload_for("F32", 4)))
    p = write_safetensors(tmp_path / "np.safetensors", tensors, aligned=aligned)
    ref = safetensors.numpy.load_file(str(p))
    got = gst.load_file(p, framework="numpy")
    assert set(got) == set(ref)
    for name, r in ref.items():
        g = got[name]
        assert g.dtype == r.dtype and g.shape == r.shape, name
        assert g.tobytes() == r.tobytes(), name


def test_numpy_without_a_dtype_for_bf16(tmp_path):
    p = write_safetensors(tmp_path / "bf.safetensors", [("w", "BF16", [2], b"\1\2\3\4")])
    try:
        import ml_dtypes
    except ImportError:
        with pytest.raises(TypeError, match="BF16"):
            gst.load_file(p, framework="numpy")
        return
    w = gst.load_file(p, framework="numpy")["w"]
    assert w.dtype == ml_dtypes.bfloat16 and w.tobytes() == b"\1\2\3\4"


def test_tensors_share_one_allocation(tmp_path):
    p = write_safetensors(tmp_path / "two.safetensors",
                          [("a", "F32", [4], payload_for("F32", 16)),
                           ("b", "I64", [2], payload_for("I64", 16))])
    got = gst.load_file(p, framework="numpy")
    assert got["a"].base is not None and np.shares_memory(got["a"].base, got["b"].base)


def test_metadata_without_data(tmp_path):
    p, _ = all_dtypes_file(tmp_path)
    meta, tensors = gst.load_metadata(p)
    assert meta == {"format": "pt"} and tensors["t_BF16"].shape == (33, 3)


def test_bad_framework(tmp_path):
    p = write_safetensors(tmp_path / "x.safetensors", [("a", "U8", [1], b"\1")])
    with pytest.raises(ValueError, match="framework"):
        gst.load_file(p, framework="tf")


# ---- broken files -------------------------------------------------------------

def raw_file(tmp_path, header, data=b"", n=None):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    p = tmp_path / "bad.safetensors"
    p.write_bytes(struct.pack("<Q", len(h) if n is None else n) + h + data)
    return p


def short_file(tmp_path):
    p = tmp_path / "short.safetensors"
    p.write_bytes(b"\1\0\0")
    return p


GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


@pytest.mark.parametrize("case,match", [
    (lambda t: raw_file(t, b"{not json"), "not valid JSON"),
    (lambda t: raw_file(t, b"[1, 2]"), "not a JSON object"),
    (lambda t: raw_file(t, b"\xff\xfe{}"), "not valid JSON"),
    (lambda t: raw_file(t, GOOD, b"\0" * 8, n=1 << 20), "points past the end of the file"),
    (lambda t: raw_file(t, GOOD, b"\0" * 8, n=1 << 40), "beyond"),
    (lambda t: raw_file(t, GOOD, b"\0" * 4), "point past the end of the file"),
    (lambda t: raw_file(t, {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
                        b"\0" * 8), "needs 12"),
    (lambda t: raw_file(t, {"a": {"dtype": "F31", "shape": [2], "data_offsets": [0, 8]}},
                        b"\0" * 8), "unknown dtype"),
    (lambda t: raw_file(t, {"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}},
                        b"\0" * 8), "shape"),
    (lambda t: raw_file(t, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}},
                        b"\0" * 8), "bad data_offsets"),
    (lambda t: raw_file(t, {"a": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), "data_offsets"),
    (lambda t: raw_file(t, {"__metadata__": {"k": 1}}), "__metadata__"),
    (lambda t: short_file(t), "too short"),
    (lambda t: raw_file(t, GOOD, b"\0" * 12), "holes"),
    (lambda t: raw_file(t, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                            "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}},
                        b"\0" * 8), "overlap"),
    (lambda t: raw_file(t, {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}},
                        b"\0" * 8), "holes"),
])
def test_broken_header(tmp_path, case, match):
    p = case(tmp_path)
    with pytest.raises(gst.SafetensorsError, match=match):
        gst.load_file(p, framework="numpy")
    with pytest.raises(Exception):
        safetensors.deserialize(p.read_bytes())    # the reference refuses it too


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError):
        gst.load_file(tmp_path / "none.safetensors", framework="numpy")


# ---- torch, where a GPU is -----------------------------------------------------

def test_torch_matches_safetensors(tmp_path):
    torch = cuda_torch()
    import safetensors.torch
    torch_dtypes = {d for d, _ in ALL if d in gst._torch_dtypes(torch) and d in REF_DTYPES}
    tensors = [("t_%s" % d, d, s, payload_for(d, nbytes(d, s))) for d, s in ALL
               if d in torch_dtypes and d != "F4"]
    tensors += [("empty", "BF16", [0, 3], b""), ("scalar", "F32", [], payload_for("F32", 4))]
    for aligned in (True, False):
        p = write_safetensors(tmp_path / ("t%d.safetensors" % aligned), tensors, aligned=aligned)
        ref = safetensors.torch.load_file(str(p), device="cuda:0")
        got = gst.load_file(p, device="cuda:0")
        assert set(got) == set(ref)
        for name, r in ref.items():
            g = got[name]
            assert g.device == r.device and g.dtype == r.dtype and g.shape == r.shape, name
            assert torch.equal(g.reshape(-1).view(torch.uint8),
                               r.reshape(-1).view(torch.uint8)), name
