#!/bin/sh
# SPDX-License-Identifier: MIT
#
# NVMe/TCP host -> GPU benchmark for a GPU machine (issue 5's device-memory target).
#
#   bench/nvmf_host_gpu.sh [GDX]
#
# GDX: a prebuilt gdx (default: .carry/cuda/tools/gdx/gdx as staged by
# `tests/gpu/run.sh stage`, else build/tools/gdx/gdx).  First runs the staged
# test_nvmf_host_target with the cuda device (reads and writes of GPU memory through
# the bounce ring, checked byte for byte).  Then starts the gdx target with a RAM
# namespace on 127.0.0.1 (GDX_BENCH_NS, default ram:8G with 4 KiB blocks,
# GDX_BENCH_REACTORS reactors, default 8) and runs `gdx bench nvmf-host` reading it
# into host, pinned and GPU memory (GDX_BENCH_SECS per point, default 2): 8 queues at
# depths 1/32/128 and 128 KiB reads beside the loopback TCP ceiling; then one copy
# per read (copy_batch=1), batches of 16 through the gather kernel and through the
# copy engine (cuda.gather_max=0), batches of 64, 16 queues, the idle receiver
# polling its copies (copy_poll_us=20), digests.  GDX_BENCH_RUNS="main batch1 ..."
# picks runs; GDX_BENCH_TEST=0 skips the test program.
# Each GPU line carries its ratio to host memory in the same run and the device
# calls per command.  Ends with a table of the target (device-memory reads >= 0.9 x
# host-memory reads).  About 2 minutes.  Raw JSON lines go to $OUT (or
# /tmp)/nvmf_host_gpu.jsonl.
set -u

GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"

out=${OUT:-/tmp}
jsonl=$out/nvmf_host_gpu.jsonl
: >"$jsonl"
NQN=nqn.2026-11.io.gdx:bench-gpu
NS=${GDX_BENCH_NS:-ram:8G}
SECS=${GDX_BENCH_SECS:-2}
tlog=$out/nvmf_host_gpu.target.log

echo "# $(uname -sr); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv,noheader 2>/dev/null)"
t=$stage/tests/func/test_nvmf_host_target
if [ -x "$t" ] && [ "${GDX_BENCH_TEST:-1}" = 1 ]; then
	echo "=== test_nvmf_host_target ($GDX_DEVICE)"
	# shellcheck disable=SC2086
	timeout 90 $loader "$t" >"$out/nvmf_host_gpu.test.log" 2>&1
	rc=$?
	grep -E '^\[ *(OK|FAILED|PASSED|ERROR) *\]' "$out/nvmf_host_gpu.test.log"
	echo "=== test_nvmf_host_target: exit $rc"
fi
gpu_nvmf_target "$NQN" "$NS" "$tlog"
echo "# gdx target on 127.0.0.1:$PORT: $NS, ${GDX_BENCH_REACTORS:-8} reactors"

# run TAG [env assignments...] -- bench arguments
run() {
	tag=$1; shift
	case " ${GDX_BENCH_RUNS:-$tag} " in *" $tag "*) ;; *) return 0 ;; esac
	envs=
	while [ "$1" != -- ]; do envs="$envs $1"; shift; done
	shift
	echo "=== $tag:$envs gdx bench nvmf-host $*"
	# shellcheck disable=SC2086
	env $envs $loader "$GDX" bench nvmf-host -a 127.0.0.1 -s "$PORT" -n "$NQN" -t "$SECS" "$@" \
		--json >"$out/nvmf_host_gpu.run" 2>&1
	cat "$out/nvmf_host_gpu.run"
	sed "s/^{/{\"run\":\"$tag\",\"env\":\"$(echo $envs)\",\"args\":\"$*\",/" \
		"$out/nvmf_host_gpu.run" >>"$jsonl"
}

run main -- -m host,pinned,gpu:0 --queues 8 --qd 1,32,128 --bw-qd 64 -r 1
run batch1 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_BATCH=1 -- -m host,gpu:0 --queues 8 --qd 1,32,128 -r 1 --no-tcp
run batch16 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_BATCH=16 -- -m host,gpu:0 --queues 8 --qd 1,32,128 --bw-qd 64 -r 1 \
	--no-tcp
run batch16dma GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_BATCH=16 GDX_CUDA_GATHER_MAX=0 -- -m host,gpu:0 --queues 8 \
	--qd 32,128 -r 1 --no-tcp
run batch64 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_BATCH=64 -- -m host,gpu:0 --queues 8 --qd 32,128 -r 1 --no-tcp
run queues16 -- -m host,gpu:0 --queues 16 --qd 32,128 --bw-qd 64 -r 1 --no-tcp
run poll20 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_POLL_US=20 -- -m host,gpu:0 --queues 8 --qd 1,32 -r 1 --no-tcp
run digests -- -m host,gpu:0 --queues 8 --qd 32 --bw-qd 64 --hdr-digest --data-digest -r 1 --no-tcp

echo "=== targets (ratios against what the same run measured)"
python3 - "$jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"{'run':9} {'test':12} {'qd':>4} {'gpu:0':>10} {'host':>10} {'ratio':>6} {'need':>5}  "
      f"per command: copies, copy calls, event records, queries, waits")
for r in rows:
    if r["mem"] != "gpu:0" or "ratio_host" not in r:
        continue
    v, h = (r["gbps"], r["host"]) if r["test"] == "bw-randread" else (r["iops"], r["host"])
    calls = " ".join(f"{r.get(k + '_per_cmd', 0):.2f}" for k in
                     ("h2d_copies", "copy_calls", "event_records", "dev_queries",
                      "dev_waits"))
    print(f"{r['run']:9} {r['test']:12} {r['qd']:4} {v:10.3f} {h:10.3f} {r['ratio_host']:6.2f} "
          f"{0.9:5.2f}  {calls}")
for mem in ("host", "gpu:0"):
    c = [x for x in rows if x["mem"] == mem and "ratio_tcp_ceiling" in x]
    if c:
        r = max(c, key=lambda x: x["gbps"])
        print(f"{mem} reads vs loopback TCP ({r['run']}): {r['gbps']:.3f} of {r['tcp_ceiling']:.3f} GB/s"
              f" -> {r['ratio_tcp_ceiling']:.2f}")
PY
