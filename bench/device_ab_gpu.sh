#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Two builds' device-memory paths side by side on the GPU machine, taking turns in
# one run, so that a change to the copy agent or the staging lanes is judged against
# the build before it inside the same run's noise:
#
#   bench/device_ab_gpu.sh A B     (A, B: directories staged by
#                                   `tests/gpu/run.sh stage BUILD DIR`)
#
# Each of GDX_AB_ROUNDS rounds (default 3) runs A, then B:
#  - bench_agent: the copy agent against the device's own stream copies of the same
#    size (its ceiling), 4 KiB, 128 KiB and 1 MiB pieces, 1 and 4 workers;
#  - gdx bench nvmf-host against one gdx target (A's; a RAM namespace, 8 reactors, 8
#    queues): 4 KiB reads into gpu:0 at depths 1, 32 and 128 (at depth 1 the time
#    the data landed in device memory too) and 128 KiB reads at depth 64 into gpu:0
#    and host memory, beside the loopback TCP ceiling of 8 streams (first round);
#  - gdx bench xport, host -> gpu:0 writes: latency at 4 KiB, 64 KiB and 256 KiB
#    beside its raw TCP request/response ceiling.
# Then, per point, each build's median, its ratio to the ceiling, and B / A.
# GDX_BENCH_SECS per point (default 2).  GDX_DEVICE (default cuda) picks the device:
# emulated runs the script on any machine, to try the script itself.  Raw lines:
# $OUT (or /tmp)/device_ab.txt.  About 2 minutes a round on the H200.
set -u

[ $# -eq 2 ] || { echo "usage: $0 A B (directories staged by tests/gpu/run.sh stage)" >&2; exit 2; }
A=$(cd "$1" && pwd) && B=$(cd "$2" && pwd) || exit 2
for d in "$A" "$B"; do
	[ -x "$d/tools/gdx/gdx" ] && [ -x "$d/bench/bench_agent" ] ||
		{ echo "$d: no tools/gdx/gdx or bench/bench_agent (stage it again)" >&2; exit 2; }
done
. "$(dirname "$0")/gpu_lib.sh"
export GDX_DEVICE=${GDX_DEVICE:-cuda}
out=${OUT:-/tmp}
raw=$out/device_ab.txt
: >"$raw"
SECS=${GDX_BENCH_SECS:-2}
NQN=nqn.2026-12.io.gdx:device-ab
echo "# $(uname -sr); $(nproc) CPUs; device $GDX_DEVICE;" \
	"$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# on DIR PROGRAM ARGS...: a staged program under its own libraries and glibc
on() {
	d=$1 p=$2; shift 2
	gpu_loader "$d"
	LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" $loader "$d/$p" "$@"
}

GDX=$A/tools/gdx/gdx
gpu_loader "$A"
LD_LIBRARY_PATH="$A${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GDX_BENCH_REACTORS=8 \
	gpu_nvmf_target "$NQN" ram:8G "$out/device_ab.target.log"

for r in $(seq "${GDX_AB_ROUNDS:-3}"); do
	for b in A B; do
		d=$A; [ $b = B ] && d=$B
		on "$d" bench/bench_agent --sizes 4k,128k,1M --workers 1,4 --mib 256 2>&1 |
			awk -v b=$b '$1 == "h2d" || $1 == "d2h" { print "AGENT", b, $1, $2, $3, $4, $5 }' >>"$raw"
		tcp=--no-tcp; [ "$r" = 1 ] && [ $b = A ] && tcp=
		on "$d" tools/gdx/gdx bench nvmf-host -a 127.0.0.1 -s "$PORT" -n "$NQN" -t "$SECS" \
			-r 1 -m gpu:0,host --queues 8 --qd 1,32,128 --bw-bs 128k --bw-qd 64 $tcp --json \
			2>>"$out/device_ab.err" | sed -n "s/^{/NVMF $b {/p" >>"$raw"
		on "$d" tools/gdx/gdx bench xport --addr tcp://127.0.0.1:0 --sizes 4k,64k,256k \
			--secs 1 --op write --src host --dst gpu:0 2>&1 |
			awk -v b=$b '$1 ~ /^[0-9]+[kKmM]$/ && NF >= 8 { print "XPORT", b, $1, $6, $7 }' >>"$raw"
		echo "# round $r, $b done"
	done
done
kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null; tpid=

python3 - "$raw" <<'PY'
import json, statistics, sys
vals, ceil = {}, {}
def add(key, b, v, c=None):
    vals.setdefault(key, {}).setdefault(b, []).append(v)
    if c:
        ceil.setdefault(key, {}).setdefault(b, []).append(c)
for line in open(sys.argv[1]):
    p = line.split(None, 2)
    if p[0] == "AGENT":
        _, b, d, size, w, agent, stream = line.split()[:7]
        add(f"agent {d} {size} x{w} GB/s", b, float(agent), float(stream))
    elif p[0] == "XPORT":
        _, b, size, us, ceil_us = line.split()[:5]
        add(f"xport -> gpu:0 {size} latency us", b, float(us), float(ceil_us))
    elif p[0] == "NVMF":
        r = json.loads(p[2])
        if r["test"] == "4k-randread" and r["mem"] == "gpu:0":
            add(f"nvmf 4k qd{r['qd']} gpu:0 IOPS", p[1], r["iops"])
            if r["qd"] == 1 and r.get("lat_land_us"):
                add("nvmf 4k qd1 gpu:0 landed us", p[1], r["lat_land_us"])
        elif r["test"] == "bw-randread":
            add(f"nvmf 128k qd64 {r['mem']} GB/s", p[1], r["gbps"])
            if r.get("tcp_ceiling"):
                ceil.setdefault("tcp", []).append(r["tcp_ceiling"])
med = statistics.median
tcp = med(ceil["tcp"]) if ceil.get("tcp") else None
print(f"{'point':34} {'A':>9} {'ceil':>8} {'A/c':>5} {'B':>9} {'ceil':>8} {'B/c':>5} {'B/A':>6}")
for key, by in vals.items():
    if "A" not in by or "B" not in by:
        continue
    a, b = med(by["A"]), med(by["B"])
    lower = key.endswith("us")       # a time: lower is better, ratios turned over
    row = f"{key:34} {a:9.2f} "
    for x, name in ((a, "A"), (b, "B")):
        c = med(ceil[key][name]) if key in ceil and name in ceil[key] else (
            tcp if "128k" in key and tcp else None)
        ratio = (c / x if lower else x / c) if c else None
        if name == "B":
            row += f"{b:9.2f} "
        row += (f"{c:8.2f} {ratio:5.2f} " if c else f"{'':8} {'':5} ")
    row += f"{(a / b if lower else b / a):6.2f}"
    print(row)
print("ratios: result / ceiling (ceiling / result for times); B/A above 1.00 = B better")
PY
