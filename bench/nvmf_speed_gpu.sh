#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Issue 21's NVMe/TCP table for the GPU machine: the gdx host reading the gdx target
# over loopback, each figure beside the ceiling the same run measured.
#
#   bench/nvmf_speed_gpu.sh [GDX]
#
# GDX as for bench/nvmf_host_gpu.sh (default .carry/cuda/tools/gdx/gdx).  A RAM
# namespace (GDX_BENCH_NS, default ram:8G, 4 KiB blocks), never written, as the
# issue's figures were measured; then the same namespace written end to end
# (gdx nvmf write), whose pages the target sends by splice instead of copying.
# For each: 8 reactors and 8 queues, host and GPU memory: 4 KiB reads at depths
# 1/32/128 (depth 1 beside a raw TCP request/response of the same sizes), 128 KiB
# at depth 64 beside 8 raw TCP streams (into gpu:0 also beside the same streams
# received into a pinned ring and copied into the device); then 1 MiB reads at depth 128 with 8 and
# with 16 reactors and queues.  GDX_BASE=path/to/gdx also runs the targets of
# that build (e.g. main before issue 21) for the bandwidth points, served to the
# same bench, in the same run.  GDX_BENCH_SECS per point (default 2).  About
# 3 minutes (5 with GDX_BASE).  Raw JSON lines: $OUT (or /tmp)/nvmf_speed_gpu.jsonl.
#
# Goals (issue 21): 128 KiB >= 0.70 of the TCP ceiling with 8 queues, host and GPU
# memory; 4 KiB depth-1 latency <= 1.5x the request/response (ratio >= 0.67);
# depth 32/128 IOPS not below main's (docs/measurements/nvmf-host.md).
set -u

GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"
out=${OUT:-/tmp}
jsonl=$out/nvmf_speed_gpu.jsonl
: >"$jsonl"
NQN=nqn.2026-12.io.gdx:speed
NS=${GDX_BENCH_NS:-ram:8G}
SECS=${GDX_BENCH_SECS:-2}
NEW=$GDX
echo "# $(uname -sr); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# target BUILD REACTORS: (re)starts the gdx target of BUILD (new or base)
target() {
	[ -n "${tpid:-}" ] && { kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; }
	if [ "$1" = base ]; then GDX=$GDX_BASE; else GDX=$NEW; fi
	GDX_BENCH_REACTORS=$2 gpu_nvmf_target "$NQN" "$NS" "$out/nvmf_speed_gpu.target.log"
	GDX=$NEW
	tbuild=$1
}

# run TAG bench-arguments...: one bench run against the running target
run() {
	tag=$1; shift
	echo "=== $tag ($tbuild target): gdx bench nvmf-host $*"
	# shellcheck disable=SC2086
	$loader "$NEW" bench nvmf-host -a 127.0.0.1 -s "$PORT" -n "$NQN" -t "$SECS" -r 1 "$@" \
		--json >"$out/nvmf_speed_gpu.run" 2>&1
	cat "$out/nvmf_speed_gpu.run"
	sed "s/^{/{\"run\":\"$tag\",\"target\":\"$tbuild\",/" "$out/nvmf_speed_gpu.run" >>"$jsonl"
}

# points NSKIND: the issue's points against a target of the new build, then the base's
points() {
	target new 8
	run "$1" -m host,gpu:0 --queues 8 --qd 1,32,128 --bw-bs 128k --bw-qd 64
	run "$1-1m-8" -m host --queues 8 --qd 1 --bw-bs 1m --bw-qd 128
	target new 16
	run "$1-1m-16" -m host --queues 16 --qd 1 --bw-bs 1m --bw-qd 128
	[ -n "${GDX_BASE:-}" ] || return 0
	target base 8
	run "$1" -m host,gpu:0 --queues 8 --qd 1,32,128 --bw-bs 128k --bw-qd 64 --no-tcp
	run "$1-1m-8" -m host --queues 8 --qd 1 --bw-bs 1m --bw-qd 128 --no-tcp
	target base 16
	run "$1-1m-16" -m host --queues 16 --qd 1 --bw-bs 1m --bw-qd 128 --no-tcp
}

points unwritten
target new 8
echo "=== writing $NS end to end"
size=$(echo "$NS" | sed 's/^ram://')
$loader "$NEW" nvmf write -a 127.0.0.1 -s "$PORT" -n "$NQN" -l "$size" --from pattern:21 \
	--queues 8 --quiet || echo "write failed: the written points are not valid"
# the namespace lives in the target: keep this one for the written points
run written -m host,gpu:0 --queues 8 --qd 1,32,128 --bw-bs 128k --bw-qd 64
run written-1m-8 -m host --queues 8 --qd 1 --bw-bs 1m --bw-qd 128
kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; tpid=

echo "=== issue 21 (ratios against the ceilings of the same run)"
python3 - "$jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ceil = {}
for r in rows:
    if "tcp_ceiling" in r:
        ceil[(r["run"], r["qd"], r["test"])] = r["tcp_ceiling"]
def pick(run, target, test, mem, qd):
    for r in rows:
        if (r["run"], r["target"], r["test"], r["mem"], r["qd"]) == (run, target, test, mem, qd):
            return r
print(f"{'namespace':10} {'target':6} {'point':30} {'result':>12} {'ceiling':>12} {'ratio':>6} {'goal':>6}")
for ns in ("unwritten", "written"):
    for tgt in ("new", "base"):
        def line(point, r, val, unit, c, ratio, goal):
            # above its ceiling: the ceiling was not measured right (bench/ceiling.h)
            print(f"{ns:10} {tgt:6} {point:30} {val:9.3f} {unit:2} {c:9.3f} {unit:2} "
                  f"{ratio:6.2f} {goal:>6}" + ("  INVALID: above its ceiling" if ratio > 1 else ""))
        for mem in ("host", "gpu:0"):
            r = pick(ns, tgt, "bw-randread", mem, 64)
            c = ceil.get((ns, 64, "bw-randread"))
            if r and c:
                line(f"128k qd64 8q {mem}", r, r["gbps"], "GB", c, r["gbps"] / c, ">=0.70")
            # the same streams received into a pinned ring and copied into the device
            if r and r.get("tcp_h2d_ceiling"):
                c = r["tcp_h2d_ceiling"]
                line(f"128k qd64 8q {mem} / TCP+copy", r, r["gbps"], "GB", c, r["gbps"] / c, "")
        for q in (8, 16):
            r = pick(f"{ns}-1m-{q}", tgt, "bw-randread", "host", 128)
            c = ceil.get((f"{ns}-1m-{q}", 128, "bw-randread"))
            if r and c:
                line(f"1m qd128 {q}q host", r, r["gbps"], "GB", c, r["gbps"] / c, "")
        r = pick(ns, tgt, "4k-randread", "host", 1)
        n = pick(ns, "new", "4k-randread", "host", 1)
        if r and n and n.get("tcp_rr_us"):
            line("4k qd1 host latency (us)", r, 1e6 / r["iops"], "us", n["tcp_rr_us"],
                 n["tcp_rr_us"] / (1e6 / r["iops"]), ">=0.67")
        for qd in (32, 128):
            for mem in ("host", "gpu:0"):
                r = pick(ns, tgt, "4k-randread", mem, qd)
                if r:
                    print(f"{ns:10} {tgt:6} {'4k qd%d 8q %s IOPS' % (qd, mem):30} {r['iops']:12.0f}")
PY
