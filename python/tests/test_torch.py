# SPDX-License-Identifier: MIT
"""Real torch tensors and streams (only where torch sees a GPU and GDX_DEVICE=cuda)."""
import os

import pytest

import gdx
from conftest import cuda_torch


@pytest.fixture
def torch():
    return cuda_torch()


@pytest.mark.parametrize("size,offset", [(1, 0), (4097, 3), ((8 << 20) + 5, 4093)])
def test_tensor_round_trip(tmp_path, torch, size, offset):
    data = os.urandom(offset + size)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    t = torch.empty(size, dtype=torch.uint8, device="cuda")
    with gdx.File(p) as f:
        assert f.read_into(t, offset) == size
    assert bytes(t.cpu().numpy()) == data[offset:]
    w = t.view(-1).flip(0).contiguous()
    with gdx.File(tmp_path / "o.bin", "w") as f:
        assert f.write_from(w) == size
    assert (tmp_path / "o.bin").read_bytes() == bytes(w.cpu().numpy())


def test_typed_tensor_and_strided_refused(tmp_path, torch):
    x = torch.randn(1000, 33, device="cuda")
    p = tmp_path / "x.bin"
    with gdx.File(p, "w") as f:
        assert f.write_from(x) == x.numel() * 4
    y = torch.empty_like(x)
    with gdx.File(p) as f:
        assert f.read_into(y) == x.numel() * 4
        with pytest.raises(ValueError, match="not contiguous"):
            f.read_into(y.t())
        with pytest.raises(ValueError, match="not contiguous"):
            f.read_into(y[:, ::2])
    assert torch.equal(x, y)


def test_cpu_tensor_through_dlpack(tmp_path, torch):
    data = os.urandom(4096)
    p = tmp_path / "c.bin"
    p.write_bytes(data)
    t = torch.zeros(4096, dtype=torch.uint8)
    with gdx.File(p) as f:
        assert f.read_into(t) == 4096
    assert bytes(t.numpy()) == data


@pytest.mark.parametrize("kind", ["torch_stream", "handle", "default"])
def test_stream_ordered_with_torch_streams(tmp_path, torch, kind):
    n = (16 << 20) + 7
    data = os.urandom(n)
    p = tmp_path / "s.bin"
    p.write_bytes(data)
    s = torch.cuda.Stream()
    stream = {"torch_stream": s, "handle": s.cuda_stream,
              "default": torch.cuda.default_stream()}[kind]
    t = torch.zeros(n, dtype=torch.uint8, device="cuda")
    with gdx.File(p) as f, torch.cuda.stream(s if kind != "default" else torch.cuda.default_stream()):
        io = f.read_into_async(t, stream=stream)
        # work enqueued after the read sees its bytes
        u = (t.to(torch.int32) + 1).to(torch.uint8)
        assert io.result() == n
    torch.cuda.synchronize()
    ref = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    assert torch.equal(t.cpu(), ref)
    assert torch.equal(u.cpu(), ((ref.to(torch.int32) + 1) % 256).to(torch.uint8))


def test_read_to_torch_without_copy(tmp_path, torch):
    data = os.urandom(1 << 20)
    p = tmp_path / "r.bin"
    p.write_bytes(data)
    arr = gdx.read(p, device="cuda:0")
    t = torch.from_dlpack(arr)
    assert t.device.type == "cuda" and t.data_ptr() == arr.ptr
    del arr
    assert bytes(t.cpu().numpy()) == data


def test_safetensors_torch_views_share_memory(tmp_path, torch):
    import safetensors.torch
    sd = {"a": torch.randn(64, 3, device="cuda").to(torch.bfloat16),
          "b": torch.arange(10, device="cuda", dtype=torch.int64),
          "c": torch.zeros(0, 5, device="cuda")}
    p = tmp_path / "m.safetensors"
    safetensors.torch.save_file({k: v.cpu() for k, v in sd.items()}, str(p))
    got = gdx.safetensors.load_file(p, device="cuda:0")
    for k, v in sd.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and torch.equal(got[k], v)
    assert got["a"].untyped_storage().data_ptr() == got["b"].untyped_storage().data_ptr()
