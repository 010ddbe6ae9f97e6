#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Storage -> GPU benchmark matrix for a GPU machine (issue 3's targets).
#
#   bench/file_gpu.sh [GDX [DISKDIR]]
#
# GDX: a prebuilt gdx (default: .carry/cuda/tools/gdx/gdx as staged by
# `tests/gpu/run.sh stage`, else build/tools/gdx/gdx).  DISKDIR: a directory on
# the machine's disk (default /var/tmp).  Creates a 4 GiB file on tmpfs and on
# the disk, drops caches where allowed, runs `gdx bench file` for each target
# (every line carries its own ceilings, measured in the same run), a small knob
# sweep, KvikIO where bench/kvikio_gpu.sh staged it, and ends with a table of
# the targets.  Raw JSON lines go to $OUT (or /tmp)/file_gpu.jsonl.
set -u

GDX=${1:-}
DISKDIR=${2:-/var/tmp}
SIZE=${GDX_BENCH_SIZE:-4G}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"

out=${OUT:-/tmp}
jsonl=$out/file_gpu.jsonl
: >"$jsonl"
shm=/dev/shm/gdx_bench.$$.dat
disk=$DISKDIR/gdx_bench.$$.dat
trap 'rm -f "$shm" "$disk"' EXIT INT TERM

echo "# $(uname -sr); $(nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv,noheader 2>/dev/null)"
echo "# tmpfs file $shm, disk file $disk ($(df -T "$DISKDIR" | awk 'NR==2 { print $2 }')), $SIZE each"
count=$(($(numfmt --from=iec "$SIZE") / 16777216))
dd if=/dev/zero of="$shm" bs=16M count="$count" status=none || exit 1
# Real blocks on the disk (not unwritten extents, which O_DIRECT would not read).
dd if=/dev/zero of="$disk" bs=16M count="$count" oflag=direct status=none || exit 1
sync
if echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
	echo "# caches dropped"
else
	echo "# cannot drop caches; cold runs rely on posix_fadvise(DONTNEED) per run"
fi
gdx cp "$disk" gpu:0 -q | sed 's/^/# gdx cp: /'

# run TAG [env assignments...] -- bench arguments
run() {
	tag=$1; shift
	envs=
	while [ "$1" != -- ]; do envs="$envs $1"; shift; done
	shift
	echo "=== $tag:$envs gdx bench file $*"
	# shellcheck disable=SC2086
	env $envs $loader "$GDX" bench file "$@" --json | tee /dev/stderr |
		sed "s/^{/{\"run\":\"$tag\",\"env\":\"$(echo $envs)\",/" >>"$jsonl"
} 2>&1

run hot_tmpfs -- --file "$shm" --cache hot --io-size 64M,1G,"$SIZE" --threads 1,4
run hot_disk -- --file "$disk" --cache hot --io-size 64M,1G,"$SIZE" --threads 1,4
run cold_disk -- --file "$disk" --cache cold --io-size 1M,16M,64M --threads 1,4
run rand4k -- --file "$disk" --cache cold --pattern rand --io-size 4k --depth 1,64 --bytes 64M
run write -- --file "$disk" --write --cache cold --io-size 1M,64M --threads 1,4
# Knob sweep behind the defaults (docs/storage.md).
for c in 4M 64M; do
	run sweep_pc GDX_FILE_PAGECACHE_CHUNK=$c -- --file "$shm" --cache hot --io-size "$SIZE"
done
for t in 8 12; do
	run sweep_threads GDX_FILE_THREADS=$t -- --file "$shm" --cache hot --io-size "$SIZE"
done
# Registering workers beside CPU copiers (default: none).
for p in 0 1 2; do
	run sweep_pcthreads GDX_FILE_PAGECACHE_THREADS=$p -- --file "$shm" --cache hot --io-size "$SIZE"
	run sweep_pcthreads GDX_FILE_PAGECACHE_THREADS=$p -- --file "$disk" --cache hot --io-size 1G
done
# The split workers' contexts (defaults 4M x 2, one stream), hot and cold.
for k in SPLIT_CHUNK=2M SPLIT_CHUNK=8M SPLIT_DEPTH=4 SPLIT_STREAMS=2; do
	run sweep_split GDX_FILE_$k -- --file "$shm" --cache hot --io-size "$SIZE"
	run sweep_split GDX_FILE_$k -- --file "$disk" --cache hot --io-size 1G
	run sweep_split GDX_FILE_$k -- --file "$disk" --cache cold --io-size 64M
done
# Cached chunks by pread on the split workers (default) or through their rings; piece size.
for k in SPLIT_PREAD=0 SPLIT_PIECE=4M; do
	run sweep_pread GDX_FILE_$k -- --file "$shm" --cache hot --io-size "$SIZE"
	run sweep_pread GDX_FILE_$k -- --file "$disk" --cache hot --io-size 1G
	run sweep_pread GDX_FILE_$k -- --file "$disk" --cache cold --io-size 64M
done
for c in 512k 4M; do
	run sweep_chunk GDX_FILE_CHUNK_SIZE=$c -- --file "$disk" --cache cold --io-size 64M
done
for d in 8 32; do
	run sweep_depth GDX_FILE_DEPTH=$d -- --file "$disk" --cache cold --io-size 64M
done

# KvikIO (its C++ library, staged by `bench/kvikio_gpu.sh stage .carry/kvikio`).
echo "=== KvikIO on the same files"
for f in "$shm" "$disk"; do
	sh "$(dirname "$0")/kvikio_gpu.sh" run "${KVIKIO_DIR:-$stage/../kvikio}" "$f" "$SIZE"
done

echo "=== targets (ratios against ceilings measured in the same run)"
if command -v python3 >/dev/null; then
	python3 - "$jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def best(run, key, **want):
    c = [r for r in rows if r["run"] == run and all(r[k] == v for k, v in want.items())]
    return max(c, key=lambda r: r[key]) if c else None
targets = [
    ("tmpfs hot 4 GiB -> GPU", best("hot_tmpfs", "gdx_ratio"), "gdx_ratio", 0.85),
    ("disk hot -> GPU", best("hot_disk", "gdx_ratio"), "gdx_ratio", 0.85),
    ("disk cold -> GPU", best("cold_disk", "gdx_ratio"), "gdx_ratio", 0.95),
    ("4 KiB rand depth 64", best("rand4k", "gdx_ratio", depth=64), "iops", 0.80),
    ("GPU -> disk", best("write", "gdx_ratio"), "gdx_ratio", 0.85),
]
print(f"{'target':24} {'config':22} {'gdx':>10} {'ceiling':>10} {'ratio':>6} {'need':>5}  path")
for name, r, kind, need in targets:
    if not r:
        print(f"{name:24} (no result)")
        continue
    cfg = f"{r['io_size'] >> 10}k t{r['threads']} d{r['depth']}"
    if kind == "iops":
        g, c = r["gdx_iops"], r["storage_iops"]
        ratio = g / c if c else 0
        gs, cs = f"{g/1e3:.0f}k IOPS", f"{c/1e3:.0f}k IOPS"
    else:
        ratio = r["gdx_ratio"]
        gs, cs = f"{r['gdx_gbps']:.2f} GB/s", f"{r['ceiling_gbps']:.2f} GB/s"
    ok = "ok" if ratio >= need else "BELOW"
    print(f"{name:24} {cfg:22} {gs:>10} {cs:>10} {ratio:6.2f} {need:5.2f}  {r['path']} {ok}")
PY
else
	cat "$jsonl"
fi
