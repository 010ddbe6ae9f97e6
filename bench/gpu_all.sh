#!/bin/sh
# SPDX-License-Identifier: MIT
#
# One short pass over every data path on a GPU machine, sized for one device
# call (under ten minutes), ending with a short table.  The full matrices are
# the per-area scripts beside this one (file_gpu.sh, nvmf_host_gpu.sh,
# pipeline_gpu.sh, xport_gpu.sh).
#
#   bench/gpu_all.sh stage BUILD DIR   (build machine, nvcc found) stage programs
#   bench/gpu_all.sh DIR               (GPU machine) run; logs go to $OUT
set -u
if [ "${1:-}" = stage ]; then
	sh tests/gpu/run.sh stage "$2" "$3/cuda" >/dev/null && \
	sh bench/pipeline_gpu.sh stage "$2" "$3/pipeline" >/dev/null && echo "staged in $3"
	exit $?
fi
dir=${1:-.carry}
out=${OUT:-/tmp}
export GDX_DEVICE=cuda
gdx="$dir/cuda/tools/gdx/gdx"
ld=$dir/cuda
summary=$out/gpu_all.txt
: >"$summary"
row() { echo "$*" | tee -a "$summary"; }

# step NAME SECONDS command...: runs with a deadline, logs to $out/NAME.log
step() {
	n=$1 s=$2; shift 2
	t0=$(date +%s)
	timeout "$s" "$@" >"$out/$n.log" 2>&1
	rc=$?
	row "## $n: exit $rc in $(( $(date +%s) - t0 )) s"
}

step device_suite 170 sh tests/gpu/run.sh "$dir/cuda"
grep -E "^[0-9]+ passed" "$out/device_suite.log" | tail -1 | sed 's/^/   /' | tee -a "$summary"

# Pipeline: the seeds' step (load 50 / compute 100 / send 30 us), then 1 and 10 ms stages.
tsc="$dir/pipeline/examples/train_step/train_step_cuda"
for shape in "50 100 30" "500 1000 300" "5000 10000 3000"; do
	set -- $shape
	step "train_$2" 50 env LD_LIBRARY_PATH="$dir/pipeline" "$tsc" --device cuda \
		--batch-bytes 256K --out-bytes 16K --load-us "$1" --compute-us "$2" --send-us "$3" \
		--slots 4 --batches $((200000 / $2 + 40)) --verify-every 16 --spin-us 300 --serial
	grep -E "^(serial step|pipelined step|overlap eff|speedup)" "$out/train_$2.log" | sed 's/^/   /' | tee -a "$summary"
done

# NVMe/TCP host: RAM namespace on loopback, reads into host, pinned and GPU memory.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
nqn=nqn.2026-11.io.gdx:gpu-all
LD_LIBRARY_PATH=$ld "$gdx" nvmf target -l 127.0.0.1:$port -n $nqn -N ram:4G,bs=4096 -r 8 \
	>"$out/nvmf_target.log" 2>&1 &
tpid=$!
i=0
until grep -q 'target: ready' "$out/nvmf_target.log" 2>/dev/null || [ $i -gt 100 ]; do
	i=$((i + 1)); sleep 0.1
done
step nvmf_host 130 env LD_LIBRARY_PATH=$ld "$gdx" bench nvmf-host -a 127.0.0.1 -s $port -n $nqn \
	-t 2 -m host,pinned,gpu:0 --queues 8 --qd 1,32 --bw-qd 64 -r 1
kill $tpid 2>/dev/null; wait $tpid 2>/dev/null
tail -n 25 "$out/nvmf_host.log" | sed 's/^/   /' | tee -a "$summary"

# Transport over TCP loopback into and out of GPU memory.
for dirn in "--src host --dst gpu:0" "--src gpu:0 --dst host"; do
	set -- $dirn
	step "xport_$4" 35 env LD_LIBRARY_PATH=$ld "$gdx" bench xport --addr tcp://127.0.0.1:0 \
		--op write --sizes 64k,1M,16M $dirn
	tail -n 8 "$out/xport_$4.log" | sed 's/^/   /' | tee -a "$summary"
done
