#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Issue 21's transport table for the GPU machine: `gdx bench xport` over tcp
# loopback, host -> host and host -> device memory, each figure beside the
# ceiling the same run measured: latency (half a send answered by a send)
# against half a raw TCP request/response of the same size each way
# (bench/tcp_rr.c, as `gdx bench nvmf-host` uses), bandwidth (writes, depth
# 16) against one raw TCP stream of the same writes and, into device memory,
# pinned host -> device copies, 16 in flight as the writes are (the lower).
#
#   [SIZES=4k,16k,64k,256k,1M] [SECS=1] [RUNS=3] bench/xport_speed_gpu.sh [GDX]
#
# GDX as for bench/xport_gpu.sh (default .carry/cuda/tools/gdx/gdx, else
# build/tools/gdx/gdx).  GDX_BASE=path/to/gdx also runs that build (e.g. main
# before issue 21) in the same run, rows interleaved.  Each figure is the median
# of RUNS, gdx and ceiling taken in turn.  About 1 minute per build with the
# defaults.  Output: $OUT (or /tmp)/xport_speed_gpu.txt.
#
# Goals (issue 21): latency <= 1.3x the raw round trip host -> host (ratio
# >= 0.77), <= 1.6x into device memory (>= 0.63), 4 KiB to 1 MiB; bandwidth
# >= 0.9 of the ceiling from 64 KiB up.
set -u

GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"
NEW=$GDX
out=${OUT:-/tmp}/xport_speed_gpu.txt
: >"$out"
SIZES=${SIZES:-4k,16k,64k,256k,1M}
SECS=${SECS:-1}
RUNS=${RUNS:-3}
echo "# $(uname -sr); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" |
	tee -a "$out"

# run BUILD DST: one bench run of BUILD (new or base) into DST memory
run() {
	if [ "$1" = base ]; then GDX=$GDX_BASE; else GDX=$NEW; fi
	echo "=== $1 $2: gdx bench xport --sizes $SIZES --secs $SECS --runs $RUNS --op write --src host --dst $2" >>"$out"
	gdx bench xport --addr tcp://127.0.0.1:0 --sizes "$SIZES" --secs "$SECS" --runs "$RUNS" \
		--op write --src host --dst "$2" >>"$out" 2>&1 || echo "=== $1 $2: failed" >>"$out"
	GDX=$NEW
}

for dst in host gpu:0; do
	run new "$dst"
	[ -n "${GDX_BASE:-}" ] && run base "$dst"
done
cat "$out"

echo "=== issue 21, transport (ratios against the ceilings of the same run)"
python3 - "$out" <<'PY'
import sys
rows, tag = [], None
for line in open(sys.argv[1]):
    if line.startswith("=== "):
        tag = line.split(":")[0][4:]
        continue
    f = line.split()
    # size, dst path, gdx GB/s, ceil GB/s, ratio, gdx us, ceil us, ratio [INVALID...]
    if tag and len(f) >= 6 and f[0][0].isdigit() and f[0][-1] in "kM" and f[1] != "failed:":
        num = lambda x: float(x) if x.replace(".", "", 1).isdigit() else 0.0
        # a ceiling of n/a leaves its ratio column empty
        ceil_bw = num(f[3])
        lat = num(f[5] if ceil_bw else f[4])
        clat = num(f[6] if ceil_bw else f[5])
        rows.append((tag, f[0], num(f[2]), ceil_bw, lat, clat))
def big(size):
    n = float(size[:-1]) * {"k": 1 << 10, "M": 1 << 20}[size[-1]]
    return n >= 64 << 10
print(f"{'build, dst':14} {'size':>6} {'lat us':>8} {'ceil us':>8} {'ratio':>6} {'goal':>6}"
      f" {'GB/s':>7} {'ceil':>7} {'ratio':>6} {'goal':>6}")
for tag, size, bw, cbw, lat, clat in rows:
    lr = clat / lat if lat > 0 and clat > 0 else 0
    br = bw / cbw if cbw > 0 else 0
    lgoal = 0.63 if "gpu" in tag else 0.77
    bgoal = 0.9 if big(size) else 0
    ok = lambda r, g: "ok" if r >= g else "MISS"
    print(f"{tag:14} {size:>6} {lat:8.1f} {clat:8.1f} {lr:6.2f} {ok(lr, lgoal):>6}"
          f" {bw:7.2f} {cbw:7.2f} {br:6.2f} {ok(br, bgoal) if bgoal else '':>6}"
          + ("  INVALID: above its ceiling" if lr > 1 or br > 1 else ""))
PY
echo "results: $out"
