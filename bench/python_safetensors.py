#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checkpoint loading into GPU memory from Python, on a GPU machine.

    bench/python_safetensors.py [--size 8G] [--dirs /dev/shm,/var/tmp] [--gdx CLI]

Generates a safetensors checkpoint (bf16 and fp32 tensors of a transformer's
shapes) in each directory and times, hot in the page cache and cold (disk
directories only): gdx.safetensors.load_file(device="cuda:0") against
safetensors.torch.load_file(device="cuda") and torch.cuda.gds.GdsFile (its
failure, if it fails, is recorded), each beside the pinned host-to-device
copy ceiling measured in the same run.  Then gdx.File.read_into of one 4 GiB
torch tensor against `gdx bench file` (the C library's figure) on the same
file.  Every result is a JSON line; a table of them comes last.  A load counts
the bytes of the tensors over the time from the call to torch.cuda.synchronize().

Each load starts with the memory of the one before it given back to the driver
(torch.cuda.empty_cache()) and a pause of SETTLE_S: memory freed and allocated
again at once was written ~20 ms slower per 8.6 GB on the H200, whatever
loaded it (docs/measurements/python.md).  The hot gdx loads are also timed
without the pause ("right after a free"), so both figures stand in the table.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np
import torch

import gdx
import gdx.safetensors
import safetensors.torch

GB = 1e9
SETTLE_S = 1.0
results = []


def emit(**kw):
    results.append(kw)
    print(json.dumps(kw), flush=True)


def pinned_ceiling(nbytes=2 << 30, reps=5):
    """Best pinned host -> device copy rate of nbytes (GB/s)."""
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = 0.0
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        best = max(best, nbytes / (time.perf_counter() - t0) / GB)
    del src, dst
    torch.cuda.empty_cache()
    return best


def layout(total):
    """[(name, dtype, shape)] of a transformer's layers until total bytes."""
    d, ff = 4096, 11008
    out, size, layer = [], 0, 0
    out.append(("embed.weight", "F32", [8192, d]))
    size += 8192 * d * 4
    while size < total:
        p = "layers.%d." % layer
        for name, dt, shape in [("attn.q", "BF16", [d, d]), ("attn.k", "BF16", [d, d]),
                                ("attn.v", "BF16", [d, d]), ("attn.o", "BF16", [d, d]),
                                ("mlp.gate", "BF16", [ff, d]), ("mlp.up", "BF16", [ff, d]),
                                ("mlp.down", "BF16", [d, ff]), ("norm1", "F32", [d]),
                                ("norm2", "F32", [d]), ("mlp.bias", "F32", [ff])]:
            out.append((p + name, dt, shape))
            size += int(np.prod(shape)) * (2 if dt == "BF16" else 4)
        layer += 1
    return out


def write_checkpoint(path, total):
    tensors = layout(total)
    tensors.sort(key=lambda t: t[1] != "F32")      # widest first: aligned, no holes
    header, off = {}, 0
    for name, dt, shape in tensors:
        n = int(np.prod(shape)) * (2 if dt == "BF16" else 4)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    block = np.random.default_rng(1).integers(0, 255, 64 << 20, dtype=np.uint8)
    # No NaN/Inf bit patterns matter here: the loaders copy bytes.
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        left, i = off, 0
        while left:
            n = min(left, len(block) - (i % 7) * 4096)
            f.write(memoryview(block)[(i % 7) * 4096:(i % 7) * 4096 + n])
            left -= n
            i += 1
    return off, len(tensors)


def warm_cache(path):
    """Buffered read of the whole file: hot in the page cache, whatever read it before
    (gdx's cold reads use O_DIRECT, which leaves the cache as it was)."""
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(64 << 20)
        while f.readinto(buf):
            pass


def drop_cache(path):
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def release():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def settle():
    """The last load's memory back to the driver, then time for the driver's own
    work on it, so that the next load does not wait for it."""
    release()
    time.sleep(SETTLE_S)


def check_same(a, b):
    assert set(a) == set(b)
    for k in a:
        x, y = a[k], b[k]
        assert x.dtype == y.dtype and x.shape == y.shape and x.device == y.device, k
        assert torch.equal(x.view(torch.uint8) if x.dim() else x, y.view(torch.uint8) if y.dim() else y), k


def load_gds(path, nbytes, start):
    from torch.cuda.gds import GdsFile
    f = GdsFile(path, os.O_RDONLY)
    storage = torch.empty(nbytes, dtype=torch.uint8, device="cuda").untyped_storage()
    f.load_storage(storage, start)
    return storage


def breakdown(path, where, settled, device="cuda:0"):
    """Where one gdx load's time goes: the steps of gdx.safetensors.load_file, timed
    apart, with the file driver's counters over them (where the wheel has them)."""
    gst = gdx.safetensors
    counters = getattr(gdx.driver(device), "counters", dict)
    if settled:
        settle()
    else:
        release()
    c0 = counters()
    marks = [time.perf_counter()]
    f = gdx.File(path, device=device)
    marks.append(time.perf_counter())
    start, tensors, _ = gst._open_header(f)
    size = gst._data_size(tensors)
    marks.append(time.perf_counter())
    base = torch.empty(size, dtype=torch.uint8, device=device)
    torch.cuda.synchronize()
    marks.append(time.perf_counter())
    f.read_into(base, start, size)
    marks.append(time.perf_counter())
    sd = gst._split_torch(path, base, tensors)
    torch.cuda.synchronize()
    marks.append(time.perf_counter())
    took = f.last_path["path"]
    f.close()
    marks.append(time.perf_counter())
    c1 = counters()
    steps = ["open", "header", "alloc", "read", "views", "close"]
    emit(breakdown_ms={k: round((b - a) * 1e3, 2) for k, a, b in zip(steps, marks, marks[1:])},
         where=where, settled=settled, total_ms=round((marks[-1] - marks[0]) * 1e3, 2),
         read_gbps=round(size / (marks[4] - marks[3]) / GB, 2), path=took,
         counters={k: v - c0.get(k, 0) for k, v in c1.items() if v != c0.get(k, 0)})
    del sd, base


def bench_loads(path, where, cache, reps, nbytes, start):
    ceiling = pinned_ceiling()
    if cache == "hot":
        warm_cache(path)
    base = dict(where=where, cache=cache, gb=nbytes / GB, ceiling_gbps=round(ceiling, 2))
    # What one allocation of the checkpoint's size costs (torch, after empty_cache),
    # a part of every loader's time here.
    t, x = timed(lambda: torch.empty(nbytes, dtype=torch.uint8, device="cuda"))
    emit(alloc_seconds=round(t, 4), **base)
    del x
    release()
    # gdx
    for _ in range(reps):
        settle()
        if cache == "cold":
            drop_cache(path)
        t, sd = timed(lambda: gdx.safetensors.load_file(path, device="cuda:0"))
        emit(loader="gdx", gbps=round(nbytes / t / GB, 2), ratio=round(nbytes / t / GB / ceiling, 3),
             seconds=round(t, 3), **base)
        del sd
    if cache == "hot":
        for _ in range(reps):
            release()
            t, sd = timed(lambda: gdx.safetensors.load_file(path, device="cuda:0"))
            emit(loader="gdx, right after a free", gbps=round(nbytes / t / GB, 2),
                 ratio=round(nbytes / t / GB / ceiling, 3), seconds=round(t, 3), **base)
            del sd
        for settled in (True, False):
            breakdown(path, where, settled)
    # safetensors' own
    for _ in range(max(1, reps // 2)):
        settle()
        if cache == "cold":
            drop_cache(path)
        t, sd = timed(lambda: safetensors.torch.load_file(path, device="cuda"))
        emit(loader="safetensors", gbps=round(nbytes / t / GB, 2),
             ratio=round(nbytes / t / GB / ceiling, 3), seconds=round(t, 3), **base)
        if cache == "hot" and "tmpfs" in where:
            check_same(gdx.safetensors.load_file(path, device="cuda:0"), sd)
            emit(check="gdx tensors == safetensors tensors (bytes, dtype, shape)", ok=True,
                 tensors=len(sd))
        del sd
    settle()
    # torch's GPUDirect Storage binding
    if cache == "cold":
        drop_cache(path)
    try:
        t, st = timed(lambda: load_gds(path, nbytes, start))
        emit(loader="torch.cuda.gds", gbps=round(nbytes / t / GB, 2),
             ratio=round(nbytes / t / GB / ceiling, 3), seconds=round(t, 3), **base)
        del st
    except Exception as e:   # recorded, as the issue asks
        emit(loader="torch.cuda.gds", error="%s: %s" % (type(e).__name__, str(e)[:200]), **base)
    release()


def bench_cli(cli, path, cache, io_size, threads):
    if not cli:
        return None
    cmd = [cli, "bench", "file", "--file", path, "--cache", cache, "--io-size", io_size,
           "--threads", str(threads), "--no-naive", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                       env=dict(os.environ, GDX_DEVICE="cuda"))
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    emit(cli_error=" ".join(cmd), rc=r.returncode, stderr=r.stderr[-500:])
    return None


def bench_read_into(path, where, cli, reps):
    n = 4 << 30
    t4 = torch.empty(n, dtype=torch.uint8, device="cuda")
    ceiling = pinned_ceiling()
    warm_cache(path)
    for chunk in (None, n):
        with gdx.File(path, chunk_size=chunk) as f:
            best = 0.0
            for _ in range(reps):
                t, got = timed(lambda: f.read_into(t4))
                assert got == n
                best = max(best, n / t / GB)
            emit(loader="gdx.File.read_into 4 GiB torch tensor", where=where, cache="hot",
                 chunk=chunk or 0, gbps=round(best, 2), ratio=round(best / ceiling, 3),
                 ceiling_gbps=round(ceiling, 2), path=f.last_path["path"])
    del t4
    release()
    j = bench_cli(cli, path, "hot", "4G", 1)
    if j:
        emit(loader="gdx bench file (C) 4 GiB", where=where, cache="hot", gbps=j["gdx_gbps"],
             ceiling_gbps=j["ceiling_gbps"], ratio=j["gdx_ratio"], path=j["path"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="8G", help="checkpoint size (G = GiB)")
    ap.add_argument("--dirs", default="/dev/shm,/var/tmp")
    ap.add_argument("--gdx", default=shutil.which("gdx"), help="the gdx CLI, for its bench")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-cold", action="store_true", help="hot figures only")
    a = ap.parse_args()
    total = int(float(a.size.rstrip("G")) * (1 << 30))
    # Opened once per process (cuFile's driver too): a loader's first call pays
    # it, once; here it is paid before the timed runs.
    t0 = time.perf_counter()
    desc = gdx.driver("cuda:0").describe()
    print("# torch %s, %s, gdx %s; %s; driver opened in %.3f s" % (
        torch.__version__, torch.cuda.get_device_name(0), gdx.version, desc,
        time.perf_counter() - t0), flush=True)
    made = []
    try:
        for d in a.dirs.split(","):
            fs = subprocess.run(["df", "-T", d], capture_output=True, text=True).stdout.split("\n")[1].split()[1]
            where = "%s (%s)" % (d, fs)
            path = os.path.join(d, "gdx_bench_ckpt.safetensors")
            t0 = time.perf_counter()
            nbytes, count = write_checkpoint(path, total)
            made.append(path)
            start = os.path.getsize(path) - nbytes
            emit(generated=path, fs=fs, gb=round(nbytes / GB, 2), tensors=count,
                 seconds=round(time.perf_counter() - t0, 1))
            bench_loads(path, where, "hot", a.reps, nbytes, start)
            if fs != "tmpfs" and not a.no_cold:
                bench_loads(path, where, "cold", 2, nbytes, start)
                j = bench_cli(a.gdx, path, "cold", "64M", 4)
                if j:
                    emit(loader="O_DIRECT raw (gdx bench file storage)", where=where, cache="cold",
                         gbps=j["storage_gbps"], gdx_cli_gbps=j["gdx_gbps"])
            bench_read_into(path, where, a.gdx, a.reps)
            os.unlink(path)
            made.remove(path)
    finally:
        for p in made:
            os.unlink(p)
    print_table()


def print_table():
    print("\n| loader | file | cache | GB/s | ceiling GB/s | of ceiling |")
    print("|---|---|---|---|---|---|")
    for r in results:
        if "loader" not in r:
            continue
        if "error" in r:
            print("| %s | %s | %s | fails: %s | %s | |" % (r["loader"], r["where"], r["cache"],
                                                         r["error"], r.get("ceiling_gbps", "")))
        else:
            print("| %s | %s | %s | %s | %s | %s |" % (
                r["loader"] + ((" chunk %d MiB" % (r["chunk"] >> 20) if r["chunk"] else
                                " (timed pieces)") if "chunk" in r else ""),
                r.get("where", ""), r.get("cache", ""), r["gbps"], r.get("ceiling_gbps", ""),
                r.get("ratio", "")))
    print("\n| one gdx load, steps (ms) | file | after | total | read GB/s |")
    print("|---|---|---|---|---|")
    for r in results:
        if "breakdown_ms" in r:
            print("| %s | %s | %s | %s | %s |" % (
                ", ".join("%s %s" % kv for kv in r["breakdown_ms"].items()), r["where"],
                "a pause" if r["settled"] else "a free", r["total_ms"], r["read_gbps"]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
