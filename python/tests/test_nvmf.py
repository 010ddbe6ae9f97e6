# SPDX-License-Identifier: MIT
"""gdx.nvmf against gdx's own NVMe/TCP target on loopback (the C tool `gdx nvmf
target`, found as $GDX_CLI; python/tests/run.sh sets it from tests/run.sh's
release build).  Skipped where there is no gdx tool."""
import errno
import os
import socket
import subprocess
import time

import numpy as np
import pytest

import gdx
from conftest import cuda_torch

NQN = "nqn.2026-12.io.gdx:pytest"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    cli = os.environ.get("GDX_CLI")
    if not cli or not os.access(cli, os.X_OK):
        pytest.skip("no gdx tool ($GDX_CLI) to serve a target")
    port = free_port()
    log = tmp_path_factory.mktemp("target") / "target.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([cli, "nvmf", "target", "-l", "127.0.0.1:%d" % port, "-n", NQN,
                                 "-N", "ram:16M,bs=4096"], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 20
        while "target: ready" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the target did not start: " + log.read_text())
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_discover(target):
    entries = gdx.nvmf.discover("127.0.0.1", target)
    subs = [e for e in entries if e["subnqn"] == NQN]
    assert subs and subs[0]["traddr"] == "127.0.0.1" and subs[0]["trsvcid"] == str(target)


def test_identify_and_round_trip(target, tmp_path):
    with gdx.nvmf.Host("127.0.0.1", target, NQN) as h:
        assert h.state == "live"
        ident = h.identify()
        assert ident["subnqn"] == NQN and ident["nn"] >= 1
        assert h.namespaces() == [1]
        ns = h.identify_ns(1)
        assert ns["block_size"] == 4096 and ns["size"] == 16 << 20
        src = np.frombuffer(os.urandom(3 * 4096), dtype=np.uint8)
        assert h.write_from(src, 8192) == src.nbytes
        h.flush()
        dst = bytearray(3 * 4096)
        assert h.read_into(dst, 8192) == len(dst)
        assert bytes(dst) == src.tobytes() and h.last_path == "direct"
    assert h.state == "closed"
    with pytest.raises(ValueError, match="closed"):
        h.read_into(dst)


def test_device_memory(target, drv, tmp_path):
    data = os.urandom(64 << 10)
    arr = drv.alloc(len(data))
    with gdx.nvmf.Host("127.0.0.1", target, NQN, device=drv.device) as h:
        assert h.write_from(data, 0) == len(data)
        assert h.read_into(arr, 0) == len(data)
        assert h.last_path == "bounce"
    with gdx.File(tmp_path / "back", "w") as f:
        f.write_from(arr)
    assert (tmp_path / "back").read_bytes() == data


def test_errors(target):
    with pytest.raises(gdx.GdxError) as ei:
        gdx.nvmf.Host("127.0.0.1", target, "nqn.2026-12.io.gdx:nobody")
    assert ei.value.nvme_status == 0x182        # Connect Invalid Parameters
    assert "Connect Invalid Parameters" in str(ei.value)
    with pytest.raises(ConnectionRefusedError):
        gdx.nvmf.Host("127.0.0.1", free_port(), NQN)
    with pytest.raises(ValueError, match="tcp and rdma"):
        gdx.nvmf.Host("127.0.0.1", target, NQN, transport="fc")
    with pytest.raises(gdx.GdxError):      # no RDMA device on this machine
        gdx.nvmf.Host("127.0.0.1", target, NQN, transport="rdma")
    with gdx.nvmf.Host("127.0.0.1", target, NQN) as h:
        with pytest.raises(gdx.GdxError) as ei:
            h.read_into(bytearray(4096), 16 << 20)   # past the namespace's end
        assert ei.value.nvme_status == 0x80         # LBA Out of Range
        with pytest.raises(gdx.GdxError):
            h.read_into(bytearray(4096), nsid=7)
        with pytest.raises(ValueError, match="device memory"):
            h.read_into(gdx.driver().alloc(4096))


AUTH_NQN = "nqn.2026-12.io.gdx:pytest-auth"
AUTH_HOST = "nqn.2014-08.org.nvmexpress:uuid:51d2a0f4-0e3b-4c8a-9d7e-1f2a3b4c5d6e"
KEY = "DHHC-1:01:3ju8QJG7RJmn4XfbBT8bWRGDQ1k/wnPNutMfaYVfhpXjMm6V:"
CTRL_KEY = "DHHC-1:00:Bm3372cHbvuR5Wh/wsgy5yJMcg0Wt1SJcHFrUQ4S6Nd366lv:"


def test_dhchap(tmp_path):
    """Host(dhchap_secret=, dhchap_ctrl_secret=) against a target that requires them."""
    cli = os.environ.get("GDX_CLI")
    if not cli or not os.access(cli, os.X_OK):
        pytest.skip("no gdx tool ($GDX_CLI) to serve a target")
    port = free_port()
    log = tmp_path / "target.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([cli, "nvmf", "target", "-l", "127.0.0.1:%d" % port,
                                 "-n", AUTH_NQN, "-N", "ram:1M", "-H", AUTH_HOST,
                                 "--dhchap-key", KEY, "--dhchap-ctrl-key", CTRL_KEY],
                                stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 20
        while "target: ready" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the target did not start: " + log.read_text())
            time.sleep(0.05)
        with gdx.nvmf.Host("127.0.0.1", port, AUTH_NQN, hostnqn=AUTH_HOST,
                           dhchap_secret=KEY, dhchap_ctrl_secret=CTRL_KEY) as h:
            h.write_from(bytearray(b"\x5a" * 4096))
            back = bytearray(4096)
            h.read_into(back)
            assert back == bytearray(b"\x5a" * 4096)
        with pytest.raises(PermissionError):
            gdx.nvmf.Host("127.0.0.1", port, AUTH_NQN, hostnqn=AUTH_HOST, dhchap_secret=CTRL_KEY)
        with pytest.raises(PermissionError):
            gdx.nvmf.Host("127.0.0.1", port, AUTH_NQN, hostnqn=AUTH_HOST)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize("dtype,start", [("uint8", 1), ("float16", 1), ("float32", 3)])
def test_read_into_tensor_slice(target, dtype, start):
    """A tensor's slice starts at an odd offset of its storage: the bytes land
    exactly there (the copy agent cuts such copies around 16-byte words), the
    elements beside it stay as they were."""
    torch = cuda_torch()
    dt = getattr(torch, dtype)
    esz = torch.empty(0, dtype=dt).element_size()
    n = (1 << 20) // esz
    data = os.urandom(n * esz)
    base = torch.zeros(start + n + 1, dtype=dt, device="cuda")
    with gdx.nvmf.Host("127.0.0.1", target, NQN, device=gdx.driver().device) as h:
        assert h.write_from(data, 0) == len(data)
        assert h.read_into(base[start:start + n], 0) == len(data)
        assert h.last_path == "bounce"
    got = bytes(base.cpu().view(torch.uint8).numpy())
    assert got[start * esz:start * esz + len(data)] == data
    assert got[:start * esz] == bytes(start * esz) and got[-esz:] == bytes(esz)
