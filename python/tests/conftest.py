# SPDX-License-Identifier: MIT
"""The tests run on the emulated device unless GDX_DEVICE names another
(GDX_DEVICE=cuda on a GPU machine); torch's tests run only where CUDA is."""
import os

import pytest

os.environ.setdefault("GDX_DEVICE", "emulated")

import gdx  # noqa: E402


@pytest.fixture
def drv():
    return gdx.driver()


@pytest.fixture
def payload():
    """A factory of files holding n random bytes; returns (path, bytes)."""
    def make(tmp_path, n, name="data.bin"):
        data = os.urandom(n)
        p = tmp_path / name
        p.write_bytes(data)
        return p, data
    return make


def cuda_torch():
    """torch, when it is there and sees a GPU (else the test is skipped)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or gdx.driver().kind != "cuda":
        pytest.skip("needs torch with CUDA and GDX_DEVICE=cuda")
    return torch
