# SPDX-License-Identifier: MIT
"""gdx.File: round trips into host and device memory, every error path,
futures, stream-ordered transfers, Ctrl-C and the GIL."""
import errno
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

import gdx

SIZES = [1, 4095, 4097, (1 << 20) + 3]
OFFSETS = [0, 1, 4093, (1 << 20) + 7]


def device_bytes(tmp_path, arr, n=None):
    """The first n bytes of a device array, through a file (the CPU cannot read them)."""
    p = tmp_path / "devcopy.bin"
    with gdx.File(p, "w") as f:
        assert f.write_from(arr, 0, n) == (arr.nbytes if n is None else n)
    return p.read_bytes()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("offset", OFFSETS)
def test_host_round_trip(tmp_path, size, offset):
    src = np.frombuffer(os.urandom(size), dtype=np.uint8)
    p = tmp_path / "f.bin"
    with gdx.File(p, "w+") as f:
        assert f.write_from(src, offset) == size
        dst = bytearray(size)
        assert f.read_into(dst, offset) == size
    assert bytes(dst) == src.tobytes()
    raw = p.read_bytes()
    assert len(raw) == offset + size
    assert raw[:offset] == bytes(offset) and raw[offset:] == src.tobytes()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("offset", OFFSETS)
def test_device_round_trip(tmp_path, drv, payload, size, offset):
    p, data = payload(tmp_path, offset + size + 11)
    arr = drv.alloc(size)
    with gdx.File(p) as f:
        assert f.read_into(arr, offset) == size
        assert f.last_path["bytes"][f.last_path["path"]] == size
        assert f.path["bytes"][f.last_path["path"]] >= size
    assert device_bytes(tmp_path, arr) == data[offset:offset + size]


def test_size_and_short_read(tmp_path, payload):
    p, data = payload(tmp_path, 10000)
    buf = bytearray(8192)
    with gdx.File(p) as f:
        assert f.size == 10000
        assert f.read_into(buf, 6000) == 4000          # short: end of file
        assert bytes(buf[:4000]) == data[6000:]
        assert f.read_into(buf, 10000) == 0
        assert f.read_into(buf, 20000) == 0
        assert f.read_into(buf, 0, 100) == 100        # size below the buffer's
        assert f.read_into(buf, 0, 0) == 0
        with pytest.raises(EOFError, match="ends after"):
            f.read(20000, device="cpu")


def test_chunked_transfer_is_exact(tmp_path, payload):
    p, data = payload(tmp_path, (3 << 20) + 5)
    dst = bytearray(len(data))
    with gdx.File(p, chunk_size=1 << 20) as f:
        assert f.read_into(dst) == len(data)
    assert bytes(dst) == data
    with gdx.File(tmp_path / "o.bin", "w", chunk_size=4096) as f:
        assert f.write_from(dst) == len(data)
    assert (tmp_path / "o.bin").read_bytes() == data


def test_contiguous_slice_is_the_range_it_names(tmp_path, payload):
    p, data = payload(tmp_path, 4096)
    a = np.zeros(8192, dtype=np.uint8)
    with gdx.File(p) as f:
        assert f.read_into(a[100:4196]) == 4096
    assert a[100:4196].tobytes() == data and not a[:100].any() and not a[4196:].any()


# ---- errors -----------------------------------------------------------------

def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        gdx.File(tmp_path / "nope")
    e = ei.value
    assert isinstance(e, gdx.GdxError) and isinstance(e, OSError)
    assert e.errno == errno.ENOENT and e.status == -errno.ENOENT
    assert e.filename == str(tmp_path / "nope")
    assert str(e) == "[Errno 2] No such file or directory: %r" % str(tmp_path / "nope")


def test_exclusive_create_of_existing_file(tmp_path, payload):
    p, _ = payload(tmp_path, 10)
    with pytest.raises(FileExistsError) as ei:
        gdx.File(p, "x")
    assert ei.value.status == -errno.EEXIST


def test_write_to_read_only_file(tmp_path, payload):
    p, _ = payload(tmp_path, 10)
    with gdx.File(p, "r") as f, pytest.raises(gdx.GdxError) as ei:
        f.write_from(b"abc")
    assert ei.value.errno == errno.EBADF


def test_library_code_has_no_errno():
    with pytest.raises(gdx.GdxError) as ei:
        gdx.Driver("emulated:99")
    assert ei.value.errno is None and ei.value.status < -10000
    assert ei.value.strerror == gdx._gdx.strerror(ei.value.status)
    assert str(ei.value) == "%s (gdx status %d)" % (ei.value.strerror, ei.value.status)


@pytest.mark.parametrize("mode", ["", "rw", "a", "r++", "q"])
def test_bad_mode(tmp_path, payload, mode):
    p, _ = payload(tmp_path, 10)
    with pytest.raises(ValueError, match="invalid mode"):
        gdx.File(p, mode)


@pytest.mark.parametrize("buf", ["text", 42, object(), None])
def test_wrong_buffer_kind(tmp_path, payload, buf):
    p, _ = payload(tmp_path, 10)
    with gdx.File(p) as f, pytest.raises(TypeError, match="exports no memory"):
        f.read_into(buf)


def test_read_into_read_only_buffer(tmp_path, payload):
    p, _ = payload(tmp_path, 10)
    with gdx.File(p) as f, pytest.raises(BufferError):
        f.read_into(b"0123456789")


def test_non_contiguous_view_refused(tmp_path, payload):
    p, _ = payload(tmp_path, 100)
    a = np.zeros((10, 10), dtype=np.uint8)
    with gdx.File(p) as f:
        for view in (a[::2], a[:, :5], a.T[:3]):
            with pytest.raises(ValueError, match="not contiguous"):
                f.read_into(view)
        assert not a.any()


def test_bad_range(tmp_path, payload):
    p, _ = payload(tmp_path, 100)
    with gdx.File(p) as f:
        with pytest.raises(ValueError, match="larger than the buffer"):
            f.read_into(bytearray(10), 0, 11)
        with pytest.raises(ValueError, match="negative"):
            f.read_into(bytearray(10), -1)
        with pytest.raises(OverflowError):
            f.read_into(bytearray(10), 0, -1)


def test_closed_file(tmp_path, payload):
    p, _ = payload(tmp_path, 100)
    f = gdx.File(p)
    f.close()
    assert f.closed
    for call in (lambda: f.read_into(bytearray(1)), lambda: f.write_from(b"x"),
                 lambda: f.size, lambda: f.sync()):
        with pytest.raises(ValueError, match="closed file"):
            call()
    f.close()   # twice is fine, as for Python's files


def test_bad_chunk_size(tmp_path, payload):
    p, _ = payload(tmp_path, 10)
    with pytest.raises(ValueError, match="chunk_size"):
        gdx.File(p, chunk_size=100)


# ---- futures ----------------------------------------------------------------

def test_pread_pwrite_futures(tmp_path, payload):
    p, data = payload(tmp_path, 64 * 4096 + 17)
    piece = 4096
    bufs = [bytearray(piece) for _ in range(64)]
    with gdx.File(p) as f:
        futs = [f.pread(b, i * piece) for i, b in enumerate(bufs)]
        assert [x.result(timeout=30) for x in futs] == [piece] * 64
        assert all(x.done() for x in futs)
    assert b"".join(bufs) == data[:64 * piece]
    out = tmp_path / "out.bin"
    with gdx.File(out, "w") as g:
        futs = [g.pwrite(b, i * piece) for i, b in enumerate(bufs)]
        # close waits for the futures still running
    assert [x.result(timeout=0) for x in futs] == [piece] * 64
    assert out.read_bytes() == data[:64 * piece]


def test_future_carries_the_error(tmp_path, payload):
    p, _ = payload(tmp_path, 10)
    with gdx.File(p) as f:
        with pytest.raises(ValueError, match="larger than the buffer"):
            f.pread(bytearray(4), 0, 8).result(timeout=30)
        with pytest.raises(gdx.GdxError) as ei:
            f.pwrite(b"xx").result(timeout=30)
        assert ei.value.errno == errno.EBADF


# ---- stream-ordered ---------------------------------------------------------

class HandleOnly:
    """A stream known only by its handle, as torch's (.cuda_stream) is."""

    def __init__(self, s):
        self.cuda_stream = s.cuda_stream


@pytest.mark.parametrize("form", ["stream", "handle", "cuda_stream"])
def test_stream_ordered_round_trip(tmp_path, drv, payload, form):
    p, data = payload(tmp_path, 300001)
    s = gdx.Stream(drv)
    stream = {"stream": s, "handle": s.ptr, "cuda_stream": HandleOnly(s)}[form]
    arr = drv.alloc(len(data))
    with gdx.File(p) as f:
        io = f.read_into_async(arr, stream=stream)
        assert io.result() == len(data)
        assert io.done()
    out = tmp_path / "back.bin"
    with gdx.File(out, "w") as g:
        io = g.write_from_async(arr, 0, len(data) - 1, stream=stream)
        s.synchronize()
        assert io.done() and io.result() == len(data) - 1
    assert out.read_bytes() == data[:-1]


def test_stream_ordered_early_read_and_error(tmp_path, drv, payload):
    p, data = payload(tmp_path, 8192)
    s = gdx.Stream(drv)
    arr = drv.alloc(8192)
    with gdx.File(p) as f:
        assert f.read_into_async(arr, stream=s, early=True).result() == 8192
    assert device_bytes(tmp_path, arr) == data
    with gdx.File(p) as f:
        io = f.write_from_async(arr, stream=s)   # the file is open read-only
        with pytest.raises(gdx.GdxError) as ei:
            io.result()
        assert ei.value.errno == errno.EBADF


def test_close_with_stream_transfer_pending(tmp_path, drv, payload):
    p, _ = payload(tmp_path, 4096)
    s = gdx.Stream(drv)
    f = gdx.File(p)
    io = f.read_into_async(drv.alloc(4096), stream=s)
    with pytest.raises(RuntimeError, match="still use the file"):
        f.close()
    io.result()
    f.close()


@pytest.mark.parametrize("stream,exc", [("s", TypeError), (0, ValueError), (-5, ValueError),
                                        (1.5, TypeError), (object(), TypeError)])
def test_bad_stream(tmp_path, drv, payload, stream, exc):
    if drv.kind == "cuda" and stream == 0:
        pytest.skip("handle 0 is CUDA's default stream")
    p, _ = payload(tmp_path, 4096)
    with gdx.File(p) as f, pytest.raises(exc):
        f.read_into_async(drv.alloc(4096), stream=stream)


def test_stream_of_another_device(tmp_path, drv, payload):
    if drv.kind != "emulated" or gdx._gdx.device_count("emulated") < 2:
        pytest.skip("needs two emulated devices")
    p, _ = payload(tmp_path, 4096)
    other = gdx.driver("emulated:1")
    with gdx.File(p, device="emulated:0") as f, pytest.raises(ValueError, match="belongs to"):
        f.read_into_async(other.alloc(4096), stream=gdx.Stream(other))


# ---- other exporters ---------------------------------------------------------

class DLPackOnly:
    """An exporter with nothing but DLPack (legacy capsules), as older JAX."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_import(tmp_path, payload):
    p, data = payload(tmp_path, 5000)
    a = np.zeros(5000, dtype=np.uint8)
    with gdx.File(p) as f:
        assert f.read_into(DLPackOnly(a)) == 5000
        with pytest.raises(ValueError, match="not contiguous"):
            f.read_into(DLPackOnly(np.zeros((100, 100), np.uint8)[:, ::2]))
    assert a.tobytes() == data


class CAI:
    def __init__(self, ptr, n, strides=None, readonly=False, typestr="|u1"):
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": typestr, "data": (ptr, readonly), "version": 3,
            "strides": strides, "stream": None}


def test_cuda_array_interface_import(tmp_path, drv, payload):
    p, data = payload(tmp_path, 4000)
    arr = drv.alloc(8000)
    with gdx.File(p) as f:
        assert f.read_into(CAI(arr.ptr + 1000, 1000, typestr="<f4")) == 4000
        with pytest.raises(ValueError, match="not contiguous"):
            f.read_into(CAI(arr.ptr, 1000, strides=(8,), typestr="<f4"))
        with pytest.raises(ValueError, match="read-only"):
            f.read_into(CAI(arr.ptr, 1000, readonly=True))
    assert device_bytes(tmp_path, arr)[1000:5000] == data


# ---- DeviceArray and DLPack export -------------------------------------------

def test_read_to_host_and_numpy_dlpack(tmp_path, payload):
    p, data = payload(tmp_path, 12345)
    arr = gdx.read(p, device="cpu")
    assert arr.nbytes == len(arr) == 12345 and arr.device == "cpu"
    x = np.from_dlpack(arr)
    del arr                          # the capsule keeps the memory alive
    assert x.dtype == np.uint8 and x.tobytes() == data
    y = np.frombuffer(gdx.read(p, device="cpu"), dtype=np.uint8)
    assert y.tobytes() == data
    assert np.asarray(memoryview(gdx.read(p, device="cpu"))).tobytes() == data


def test_dlpack_capsules(drv):
    a = drv.alloc(100, host=True)
    assert a.__dlpack_device__() == (1, 0)
    assert "dltensor_versioned" in repr(a.__dlpack__(max_version=(1, 0)))
    assert '"dltensor"' in repr(a.__dlpack__())
    with pytest.raises(BufferError):
        a.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(AttributeError):
        a.__cuda_array_interface__


def test_device_array_exports(tmp_path, drv, payload):
    p, data = payload(tmp_path, 4096)
    arr = gdx.read(p)
    assert arr.device == drv.device and arr.nbytes == 4096
    with pytest.raises(BufferError):
        memoryview(arr)
    if drv.kind == "cuda":
        assert arr.__dlpack_device__() == (2, drv.ordinal)
        cai = arr.__cuda_array_interface__
        assert cai["data"] == (arr.ptr, False) and cai["shape"] == (4096,)
    else:
        assert arr.__dlpack_device__() == (12, drv.ordinal)
    assert device_bytes(tmp_path, arr) == data


def test_empty_array_and_file(tmp_path, drv):
    p = tmp_path / "empty"
    p.write_bytes(b"")
    a = gdx.read(p, device="cpu")
    assert a.nbytes == 0 and np.from_dlpack(a).size == 0
    assert gdx.read(p).nbytes == 0


class FakeBar:
    """Stands in for tqdm.tqdm: records what the reader reports."""
    bars = []

    def __init__(self, total, **kw):
        self.total, self.n, self.closed = total, 0, False
        FakeBar.bars.append(self)

    def update(self, n):
        self.n += n

    def close(self):
        self.closed = True


@pytest.mark.parametrize("device", ["cpu", None])
def test_read_progress(tmp_path, payload, monkeypatch, device):
    monkeypatch.setattr(gdx, "_PROGRESS_STEP", 1 << 20)
    p, data = payload(tmp_path, (3 << 20) + 3)       # four pieces of the bar
    import types
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeBar))
    FakeBar.bars.clear()
    arr = gdx.read(p, device=device, progress=True)
    (bar,) = FakeBar.bars
    assert bar.total == bar.n == len(data) and bar.closed
    got = np.from_dlpack(arr).tobytes() if device == "cpu" else device_bytes(tmp_path, arr)
    assert got == data
    monkeypatch.setitem(sys.modules, "tqdm", None)      # not installed: no bar, same bytes
    assert np.from_dlpack(gdx.read(p, device="cpu", progress=True)).tobytes() == data


# ---- Ctrl-C and the GIL -----------------------------------------------------

def _sparse(tmp_path, n):
    p = tmp_path / "sparse.bin"
    with open(p, "wb") as f:
        f.truncate(n)
    return p


def test_ctrl_c_ends_a_long_transfer_early(tmp_path):
    """SIGINT during a long read raises KeyboardInterrupt after the piece in
    flight: the end of the buffer is never written (the file holds zeros, the
    buffer starts as 0xff), and the file stays usable.  A watcher thread sends
    the signal once it sees the read under way (the GIL is let go between
    pieces).  A loaded machine can still finish the whole read before the
    watcher runs; then it tries again, up to five times.  Without the
    library's signal check between pieces every try reads to the end."""
    n = 128 << 20
    piece = 64 << 10
    p = _sparse(tmp_path, n)
    main = threading.get_ident()
    interval = sys.getswitchinterval()
    # a piece of a sparse file takes microseconds: the watcher must get the GIL at
    # each hand-back, not after the default 5 ms switch interval (the whole read)
    sys.setswitchinterval(1e-6)
    # a process started in the background by a non-interactive shell (a CI runner)
    # inherits SIGINT ignored, and Python then installs no handler: Ctrl-C's
    # handler is put in place for the test
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with gdx.File(p, chunk_size=piece) as f:
            for _ in range(5):
                buf = bytearray(b"\xff" * n)
                ready, stop = threading.Event(), threading.Event()

                def interrupt_once_under_way():
                    ready.set()
                    while buf[4 * piece] != 0 and not stop.is_set():
                        time.sleep(0)
                    signal.pthread_kill(main, signal.SIGINT)

                t = threading.Thread(target=interrupt_once_under_way)
                t.start()
                ready.wait()
                try:
                    with pytest.raises(KeyboardInterrupt):
                        f.read_into(buf)
                        time.sleep(1)   # the signal, if it comes late, lands here
                finally:
                    stop.set()
                    t.join()
                done = buf.find(b"\xff")
                if done >= 0:
                    break
            assert 0 <= done < n - piece, "every read went on to the end after Ctrl-C"
            assert not any(buf[:done])
            assert f.read_into(buf, 0, 4096) == 4096
    finally:
        sys.setswitchinterval(interval)
        signal.signal(signal.SIGINT, handler)


def test_gil_released_during_io(tmp_path):
    """Another Python thread runs while a transfer is in flight."""
    n = 64 << 20
    p = _sparse(tmp_path, n)
    buf = bytearray(n)
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    with gdx.File(p) as f:        # one chunk: no GIL hand-back between pieces
        t = threading.Thread(target=count)
        t.start()
        time.sleep(0.01)
        t0 = time.monotonic()
        f.read_into(buf)
        t1 = time.monotonic()
        stop.set()
        t.join()
    during = [x for x in ticks if t0 < x < t1]
    assert t1 - t0 < 0.05 or len(during) >= 3, "%d ticks in %.3fs" % (len(during), t1 - t0)


def test_one_driver_per_device(drv):
    assert gdx.driver(drv.device) is drv
    assert gdx.driver(drv.kind) is drv or drv.ordinal != 0


def test_driver_counters_count_a_read(drv, tmp_path, payload):
    p, data = payload(tmp_path, 3000)
    before = drv.counters()
    assert {"reads", "bytes_host", "copies", "preads"} <= set(before)
    assert all(type(v) is int and v >= 0 for v in before.values())
    buf = bytearray(3000)
    with gdx.File(p) as f:
        assert f.read_into(buf, 0) == 3000
    after = drv.counters()
    assert bytes(buf) == data
    assert after["reads"] - before["reads"] == 1
    assert after["bytes_host"] - before["bytes_host"] == 3000


# ---- config ----------------------------------------------------------------

def test_config_get_set():
    knobs = gdx.config.knobs()
    names = {k["name"] for k in knobs}
    assert "file.chunk_size" in names
    k = next(k for k in knobs if k["name"] == "file.chunk_size")
    assert k["env"] == "GDX_FILE_CHUNK_SIZE"
    old = gdx.config.get("file.chunk_size")
    try:
        gdx.config.set("file.chunk_size", 8 << 20)
        assert gdx.config.get("file.chunk_size") in (str(8 << 20), "8M", "8 MiB", "8388608")
    finally:
        gdx.config.set("file.chunk_size", None)
    assert gdx.config.get("file.chunk_size") == old
    with pytest.raises(gdx.GdxError):
        gdx.config.get("no.such_knob")
    with pytest.raises(gdx.GdxError):
        gdx.config.set("file.chunk_size", "lots")


# ---- check -----------------------------------------------------------------

def test_check_report(tmp_path):
    if not os.environ.get("GDX_CLI"):
        pytest.skip("no gdx tool ($GDX_CLI)")
    r = gdx.check(tmp_path, live=False)
    assert r["live"] is False and isinstance(r["devices"], list)
    assert r["checks"] and all({"id", "status", "finding"} <= set(c) for c in r["checks"])
    assert {x["source"] for x in r["recommendations"]} >= {"local_storage"}


def test_check_without_the_tool(monkeypatch):
    monkeypatch.delenv("GDX_CLI", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FileNotFoundError, match="GDX_CLI"):
        gdx.check()
