# SPDX-License-Identifier: MIT
"""gdx: files into GPU memory (and back) at hardware speed, from Python.

    import gdx, torch
    t = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    with gdx.File("/data/shard0", "r") as f:
        n = f.read_into(t)            # any device or host buffer
        print(f.last_path)            # which path the bytes took, and why
    x = torch.from_dlpack(gdx.read("/data/shard0", device="cuda:0"))
    sd = gdx.safetensors.load_file("model.safetensors", device="cuda:0")

Buffers are anything exporting the buffer protocol (NumPy, bytearray, mmap),
__cuda_array_interface__ (torch and CuPy on GPU) or __dlpack__; the memory must
be contiguous.  Errors are gdx.GdxError, an OSError (see gdx._errors).
"""
import concurrent.futures as _futures
import os as _os
import threading as _threading

from . import _gdx
from ._errors import GdxError
from ._gdx import DeviceArray, Driver, Stream, StreamIO

__all__ = [
    "File", "read", "driver", "check", "DeviceArray", "Driver", "Stream", "StreamIO", "GdxError",
    "config", "nvmf", "safetensors", "version",
]

version = _gdx.libgdx_version

_drivers = {}
_drivers_lock = _threading.Lock()


def _device_spec(device):
    """gdx's device spec for a device given as None, "cuda:0", torch.device or an int."""
    if device is None:
        return None
    if isinstance(device, int):
        return "cuda:%d" % device
    spec = str(device)
    return None if spec == "cpu" else spec


def driver(device=None):
    """The Driver of a device (opened once per process, then shared).

    device: None for $GDX_DEVICE, else the first GPU; "cuda", "cuda:N",
    "emulated", a torch.device or a GPU number.  "cpu" means the default
    device too: host memory still needs a driver to reach the file.
    """
    spec = _device_spec(device)
    with _drivers_lock:
        d = _drivers.get(spec)
        if d is None:
            # "cuda", "cuda:0" and None may name one device: they share its driver.
            d = Driver(spec)
            d = _drivers.setdefault(d.device, d)
            _drivers[spec] = d
    return d


_pool = None
_pool_lock = _threading.Lock()


def _executor():
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _futures.ThreadPoolExecutor(
                max_workers=min(32, (_os.cpu_count() or 1) * 2), thread_name_prefix="gdx")
    return _pool


class File:
    """An open file for transfers into and out of any memory.

    mode: "r", "r+", "w", "w+", "x", "x+" (a "b" is ignored: transfers are
    binary).  device: the device whose memory transfers go to (see driver());
    host buffers work with any.  A transfer runs as one library call per
    piece, and Ctrl-C is seen between pieces: by default each piece is sized
    to take about a quarter of a second at the rate the one before it ran
    (the first is 1 GiB); chunk_size fixes the size instead.
    """

    def __init__(self, path, mode="r", *, device=None, chunk_size=None):
        self._f = _gdx.File(driver(device), _os.fspath(path), mode, chunk_size)
        self._futures = set()
        self._lock = _threading.Lock()

    def read_into(self, buf, offset=0, size=None):
        """Reads size bytes (default: all of buf) at offset into buf; returns the
        bytes read, fewer only at end of file."""
        return self._f.read_into(buf, offset, size)

    def write_from(self, buf, offset=0, size=None):
        """Writes size bytes (default: all of buf) of buf at offset; returns the bytes written."""
        return self._f.write_from(buf, offset, size)

    def _submit(self, fn, *args):
        fut = _executor().submit(fn, *args)
        with self._lock:
            self._futures.add(fut)
        fut.add_done_callback(self._forget)
        return fut

    def _forget(self, fut):
        with self._lock:
            self._futures.discard(fut)

    def pread(self, buf, offset=0, size=None):
        """read_into on a worker thread: a concurrent.futures.Future of the bytes read."""
        return self._submit(self._f.read_into, buf, offset, size)

    def pwrite(self, buf, offset=0, size=None):
        """write_from on a worker thread: a concurrent.futures.Future of the bytes written."""
        return self._submit(self._f.write_from, buf, offset, size)

    def read_into_async(self, buf, offset=0, size=None, *, stream, early=False):
        """Reads in stream order: after the work enqueued on stream before it, and
        before the work enqueued after it.  stream: a gdx.Stream, a torch or CuPy
        stream, or a raw handle.  Returns a StreamIO (.result(), .done()); keep
        buf alive and unchanged until the stream has passed the read.  early:
        start the storage read now (for files nothing writes meanwhile)."""
        return self._f.read_into_async(buf, offset, size, stream=stream, early=early)

    def write_from_async(self, buf, offset=0, size=None, *, stream):
        """Writes in stream order; see read_into_async."""
        return self._f.write_from_async(buf, offset, size, stream=stream)

    def read(self, size=None, offset=0, *, device=None, progress=False):
        """A new DeviceArray holding size bytes (default: to the end of the file)
        from offset, on device (default: the file's; "cpu" for host memory)."""
        if size is None:
            size = max(self._f.size - offset, 0)
        host = device is not None and _device_spec(device) is None
        arr = (self._f.driver if device is None or host else driver(device)).alloc(size, host=host)
        n = _read_all(self._f, arr, offset, size, progress)
        if n != size:
            raise EOFError("%s: %d bytes at offset %d, the file ends after %d"
                           % (self.name, size, offset, n))
        return arr

    def sync(self):
        """fdatasync(2)."""
        self._f.sync()

    def close(self):
        """Waits for pread/pwrite futures, then closes the handle."""
        with self._lock:
            pending = list(self._futures)
        _futures.wait(pending)
        self._f.close()

    @property
    def closed(self):
        return self._f.closed

    @property
    def name(self):
        """The path the file was opened by."""
        return self._f.name

    @property
    def size(self):
        return self._f.size

    @property
    def backend(self):
        """The storage backend bound to the handle ("cufile", "uring", "posix")."""
        return self._f.backend

    @property
    def path(self):
        """The handle's record: {"path": name, "why": words, "bytes": {path: bytes since open}}."""
        return self._f.path

    @property
    def last_path(self):
        """The last transfer's {"path", "why", "bytes"}."""
        return self._f.last_path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else self.backend
        return "<gdx.File %r %s>" % (self.name, state)


_PROGRESS_STEP = 256 << 20


def _read_all(f, buf, offset, size, progress):
    """f.read_into(buf) of size bytes, with a tqdm bar when asked and tqdm is there.
    buf: a DeviceArray, or a tensor or array that slices into contiguous views."""
    bar = None
    if progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=size, unit="B", unit_scale=True, desc=_os.path.basename(f.name))
        except ImportError:
            bar = None
    if bar is None:
        return f.read_into(buf, offset, size)
    if isinstance(buf, DeviceArray):
        buf = memoryview(buf) if buf.device == "cpu" else _Slices(buf)
    done = 0
    try:
        while done < size:
            n = min(_PROGRESS_STEP, size - done)
            got = f.read_into(buf[done:done + n], offset + done, n)
            done += got
            bar.update(got)
            if got < n:
                break
    finally:
        bar.close()
    return done


class _Slices:
    """Byte ranges of a device array, for a progress bar's pieces."""

    def __init__(self, arr):
        self._arr = arr

    def __getitem__(self, s):
        return _Range(self._arr, s.start, s.stop - s.start)


class _Range:
    def __init__(self, arr, start, n):
        self._arr = arr      # keeps the memory alive
        self.__cuda_array_interface__ = {
            "shape": (n,), "typestr": "|u1", "data": (arr.ptr + start, False),
            "version": 3, "strides": None, "stream": None,
        }


def read(path, device=None, *, progress=False):
    """The whole file in a new DeviceArray on device (default: $GDX_DEVICE, else
    the first GPU; "cpu" for host memory).  torch.from_dlpack(), cupy.from_dlpack()
    and numpy.from_dlpack() (host) take it without a copy."""
    with File(path, "r", device=None if _device_spec(device) is None else device) as f:
        return f.read(device=device, progress=progress)


def check(path=".", *, live=True, gpu=None):
    """The readiness report of `gdx check --json` (docs/check.md) as a dict:
    devices, topology matrix, checks, recommendations.  The report is the gdx
    tool's (it is not in the library): $GDX_CLI, else gdx on PATH.  path: the
    filesystem to probe for O_DIRECT; live: run the live checks; gpu: the GPU
    the recommendations are for (default GPU0)."""
    import json
    import shutil
    import subprocess
    cli = _os.environ.get("GDX_CLI") or shutil.which("gdx")
    if not cli:
        raise FileNotFoundError("gdx.check() runs the gdx tool (`gdx check --json`): set "
                                "GDX_CLI or put gdx on PATH (meson setup build && ninja -C build)")
    cmd = [cli, "check", "--json", "--path", _os.fspath(path), "--live" if live else "--no-live"]
    if gpu is not None:
        cmd += ["--gpu", str(gpu)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return json.loads(r.stdout)


from . import config, nvmf, safetensors  # noqa: E402  (they use the names above)
