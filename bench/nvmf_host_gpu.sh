#!/bin/sh
# SPDX-License-Identifier: MIT
#
# NVMe/TCP host -> GPU benchmark for a GPU machine (issue 5's device-memory target).
#
#   bench/nvmf_host_gpu.sh [GDX]
#
# GDX: a prebuilt gdx (default: .carry/cuda/tools/gdx/gdx as staged by
# `tests/gpu/run.sh stage`, else build/tools/gdx/gdx).  Starts the gdx target with a
# RAM namespace on 127.0.0.1 (GDX_BENCH_NS, default ram:8G with 4 KiB blocks,
# GDX_BENCH_REACTORS reactors, default 8), then runs `gdx bench nvmf-host` reading
# it into host, pinned and GPU memory at several queue counts and read sizes; every
# line carries the loopback TCP ceiling measured in the same run and the GPU lines
# their ratio to host memory.  A short knob sweep of the bounce ring follows, and a
# table of the target (device-memory reads >= 0.9 x host-memory reads).  Raw JSON
# lines go to $OUT (or /tmp)/nvmf_host_gpu.jsonl.
set -u

GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"

out=${OUT:-/tmp}
jsonl=$out/nvmf_host_gpu.jsonl
: >"$jsonl"
NQN=nqn.2026-11.io.gdx:bench-gpu
NS=${GDX_BENCH_NS:-ram:8G}
SECS=${GDX_BENCH_SECS:-4}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 24420)
tlog=$out/nvmf_host_gpu.target.log

echo "# $(uname -sr); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv,noheader 2>/dev/null)"
# shellcheck disable=SC2086
$loader "$GDX" nvmf target -l 127.0.0.1:"$PORT" -n "$NQN" -N "$NS,bs=4096" \
	-r "${GDX_BENCH_REACTORS:-8}" >"$tlog" 2>&1 &
tpid=$!
trap 'kill $tpid 2>/dev/null; wait $tpid 2>/dev/null' EXIT INT TERM
i=0
until grep -q 'target: ready' "$tlog" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 300 ] || ! kill -0 $tpid 2>/dev/null; then
		echo "the target did not start:"; cat "$tlog"; exit 1
	fi
	sleep 0.1
done
echo "# gdx target on 127.0.0.1:$PORT: $NS, ${GDX_BENCH_REACTORS:-8} reactors"

# run TAG [env assignments...] -- bench arguments
run() {
	tag=$1; shift
	envs=
	while [ "$1" != -- ]; do envs="$envs $1"; shift; done
	shift
	echo "=== $tag:$envs gdx bench nvmf-host $*"
	# shellcheck disable=SC2086
	env $envs $loader "$GDX" bench nvmf-host -a 127.0.0.1 -s "$PORT" -n "$NQN" -t "$SECS" "$@" \
		--json | tee /dev/stderr |
		sed "s/^{/{\"run\":\"$tag\",\"env\":\"$(echo $envs)\",\"args\":\"$*\",/" >>"$jsonl"
} 2>&1

for q in 4 8 16; do
	run queues$q -- -m host,gpu:0,pinned --queues "$q" --qd 1,32,128 --bw-qd 64 -r 2
done
for bs in 1M 4M; do
	run bw$bs -- -m host,gpu:0 --queues 8 --qd 1 --bw-bs "$bs" --bw-qd 16 -r 1
done
# bounce ring behind the defaults (docs/nvmf-host.md)
for c in 128k 1M; do
	run sweep_chunk GDX_NVMF_HOST_BOUNCE_CHUNK=$c -- -m host,gpu:0 --queues 8 --qd 32 -r 1
done
for n in 2 8; do
	run sweep_chunks GDX_NVMF_HOST_BOUNCE_CHUNKS=$n -- -m host,gpu:0 --queues 8 --qd 32 -r 1
done
run digests -- -m host,gpu:0 --queues 8 --qd 32 --hdr-digest --data-digest -r 1

echo "=== targets (ratios against what the same run measured)"
python3 - "$jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def pick(test, mem, key):
    # the configuration where GPU memory did best; its ratio is from that same run
    c = [r for r in rows if r["test"] == test and r["mem"] == mem and key in r]
    return max(c, key=lambda r: r["gbps"]) if c else None
print(f"{'what':44} {'value':>12} {'ceiling':>12} {'ratio':>6} {'need':>5}")
for test, what in (("bw-randread", "GB/s"), ("4k-randread", "IOPS")):
    r = pick(test, "gpu:0", "ratio_host")
    if r:
        v, c = (r["gbps"], r["host"]) if what == "GB/s" else (r["iops"], r["host"])
        print(f"{'gpu:0 vs host memory, ' + test + ' (' + r['run'] + ', qd ' + str(r['qd']) + ')':44} "
              f"{v:12.3f} {c:12.3f} {r['ratio_host']:6.2f} {0.9:5.2f}")
for mem in ("host", "gpu:0"):
    key = "ratio_tcp_ceiling"
    c = [x for x in rows if x["mem"] == mem and key in x]
    if c:
        r = max(c, key=lambda x: x["gbps"])
        print(f"{mem + ' reads vs loopback TCP (' + r['run'] + ')':44} {r['gbps']:12.3f} "
              f"{r['tcp_ceiling']:12.3f} {r[key]:6.2f}     -")
PY
