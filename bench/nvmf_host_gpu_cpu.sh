#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Where a 4 KiB read into GPU memory loses against one into host memory (issue 5):
# the same point under several copy settings, with the CPU each thread used, after the
# CPU cost of each device call a read makes (gdx bench nvmf-host --dev-calls).
#
#   bench/nvmf_host_gpu_cpu.sh [GDX]
#
# GDX as for bench/nvmf_host_gpu.sh (default .carry/cuda/tools/gdx/gdx).  Starts the
# gdx target with a RAM namespace on 127.0.0.1, then for each setting runs `gdx bench
# nvmf-host` at depth 128 (2 s, then 128 KiB reads at depth 64) and samples
# /proc/PID/task/*/stat for 0.9 s inside the depth-128 point: per line the
# IOPS, the ratio to host memory with as many queues, the CPU of the bench process
# (threads over 20% by name, with their count) and of the target, and the device
# calls per command.  A receiver near 100% is bound by its own work (driver calls
# among it); well under, by waiting (stream syncs, the socket).  About a minute.
set -u

GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"
# scratch files stay on the machine: only the table (stdout) matters
O=$(mktemp -d 2>/dev/null || echo /tmp)
NQN=nqn.2026-11.io.gdx:bench-cpu
gpu_nvmf_target "$NQN" "${GDX_BENCH_NS:-ram:4G}" "$O/nvmf_host_gpu_cpu.target.log"
echo "# $(uname -sr); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# run TAG MEM QUEUES [env assignments...]
run() {
	tag=$1 mem=$2 q=$3
	shift 3
	# shellcheck disable=SC2086
	env "$@" $loader "$GDX" bench nvmf-host -a 127.0.0.1 -s "$PORT" -n "$NQN" -t 2 -r 1 \
		-m "$mem" --queues "$q" --qd 128 --bw-qd 64 --no-tcp --json >"$O/cpu.$tag.log" \
		2>"$O/cpu.$tag.err" &
	bp=$!
	sleep 1.0
	gpu_ticks $bp >"$O/cpu.t0"; gpu_ticks $tpid >"$O/cpu.u0"; s0=$(date +%s.%N)
	sleep 0.9
	gpu_ticks $bp >"$O/cpu.t1"; gpu_ticks $tpid >"$O/cpu.u1"; s1=$(date +%s.%N)
	wait $bp
	dt=$(awk "BEGIN { print $s1 - $s0 }")
	iops=$(sed -n 's/.*"4k-randread".*"iops": \([0-9]*\).*/\1/p' "$O/cpu.$tag.log")
	bw=$(sed -n 's/.*"bw-randread".*"gbps": \([0-9.]*\).*/\1/p' "$O/cpu.$tag.log")
	[ "$mem" = host ] && echo "${iops:-0}" >"$O/cpu.host$q"
	ratio=$(awk -v a="${iops:-0}" -v h="$(cat "$O/cpu.host$q" 2>/dev/null)" \
		'BEGIN { if (h > 0) printf "%.2f", a / h; else print "-" }')
	calls=$(sed -n 's/.*"4k-randread".*"h2d_copies_per_cmd": \([0-9.]*\), "copy_calls_per_cmd": \([0-9.]*\), "event_records_per_cmd": \([0-9.]*\), "dev_queries_per_cmd": \([0-9.]*\), "dev_waits_per_cmd": \([0-9.]*\).*/\2 \3 \4 \5/p' "$O/cpu.$tag.log")
	cpu=$(join "$O/cpu.t0" "$O/cpu.t1" | awk -v dt="$dt" '{ c = ($5 - $3) / dt; s += c;
		if (c >= 20) { n[$2] += c; k[$2]++ } } END { printf "%d%%:", s;
		for (x in n) printf " %s %d%%/%d", x, n[x] / k[x], k[x] }')
	tcpu=$(join "$O/cpu.u0" "$O/cpu.u1" | awk -v dt="$dt" '{ s += ($5 - $3) / dt }
		END { printf "%d%%", s }')
	printf '%-10s %-5s %2s %8s %5s %6s | calls/cmd %-24s | target %5s | bench %s\n' "$tag" \
		"$mem" "$q" "${iops:--}" "$ratio" "${bw:--}" "${calls:--}" "$tcpu" "$cpu"
	grep -h "gather\|ERR\|error" "$O/cpu.$tag.err" | head -2
}

# what each device call of a read costs with 8 and 16 receivers calling, against one
for q in 8 16; do
	$loader "$GDX" bench nvmf-host -a 127.0.0.1 -s "$PORT" -n "$NQN" -t 0.2 -r 1 -m gpu:0 \
		--queues $q --qd 1 --bw-qd 1 --no-tcp --dev-calls 2>&1 | grep '^device call'
done
printf '%-10s %-5s %2s %8s %5s %6s | %-34s | %-12s | %s\n' setting mem q IOPS ratio GB/s \
	"calls/cmd: copy calls, rec, query, wait" "target CPU" "bench CPU (threads >20%: mean/count)"
# done word (the default) against event queries, one copy per read and batches of 4
# (gather kernel, then the copy engine)
run host8 host 8
run word1 gpu:0 8 GDX_NVMF_HOST_COPY_AGENT=0
run agent4 gpu:0 8
run word4 gpu:0 8 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_BATCH=4
run word4dma gpu:0 8 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_BATCH=4 GDX_CUDA_GATHER_MAX=0
run event1 gpu:0 8 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_WORD=0
run event4 gpu:0 8 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_WORD=0 GDX_NVMF_HOST_COPY_BATCH=4
run host16 host 16
run word1 gpu:0 16 GDX_NVMF_HOST_COPY_AGENT=0
run agent4 gpu:0 16
run word4 gpu:0 16 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_BATCH=4
run host1 host 1
run word1 gpu:0 1 GDX_NVMF_HOST_COPY_AGENT=0
run word8 gpu:0 1 GDX_NVMF_HOST_COPY_AGENT=0 GDX_NVMF_HOST_COPY_BATCH=8
