#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Copies into device buffers at odd offsets (a tensor's slice: t[1:] of fp16 starts
# 2 bytes in), two builds taking turns on the GPU machine:
#
#   bench/agent_offset_gpu.sh A B   (A, B: directories staged by
#                                    `tests/gpu/run.sh stage BUILD DIR`)
#
# Per build and offset pair (pinned, device): bench_agent's bandwidth at 4 KiB,
# 128 KiB and 1 MiB with 1 and 4 workers against the copy engine's stream copies of
# the same offsets (its ceiling), then `gdx bench file` cold 1 MiB reads at depth 8
# into device memory at device offsets 0 and 2, against its storage and copy
# ceilings.  GDX_OFFSET_PAIRS (default "0,0 0,2 0,1 3,3 64,0") picks the pairs;
# DISKDIR (default /var/tmp) holds the 1 GiB file.  Raw lines: $OUT (or /tmp).
set -u

[ $# -eq 2 ] || { echo "usage: $0 A B (directories staged by tests/gpu/run.sh stage)" >&2; exit 2; }
A=$(cd "$1" && pwd) && B=$(cd "$2" && pwd) || exit 2
. "$(dirname "$0")/gpu_lib.sh"
export GDX_DEVICE=${GDX_DEVICE:-cuda}
out=${OUT:-/tmp}

on() {
	d=$1 p=$2; shift 2
	gpu_loader "$d"
	LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" $loader "$d/$p" "$@"
}

echo "# $(uname -sr); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
: >"$out/agent_offset.txt"
for pair in ${GDX_OFFSET_PAIRS:-0,0 0,2 0,1 3,3 64,0}; do
	for b in A B; do
		d=$A; [ $b = B ] && d=$B
		on "$d" bench/bench_agent --sizes 4k,128k,1M --workers 1,4 --mib 256 --offset "$pair" 2>&1 |
			tee -a "$out/agent_offset.txt" |
			awk -v b=$b -v p="$pair" '$1 == "h2d" || $1 == "d2h" { print "AGENT", b, p, $0 }'
	done
done
NQN=nqn.2026-12.io.gdx:offsets
GDX=$A/tools/gdx/gdx
gpu_loader "$A"
LD_LIBRARY_PATH="$A${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GDX_BENCH_REACTORS=8 \
	gpu_nvmf_target "$NQN" ram:8G "$out/agent_offset.target.log"
for b in A B; do
	d=$A; [ $b = B ] && d=$B
	on "$d" tools/gdx/gdx bench nvmf-host -a 127.0.0.1 -s "$PORT" -n "$NQN" \
		-t "${GDX_BENCH_SECS:-2}" -m gpu:0,gpu:0+2,host --queues 8 --qd 1,32 --bw-bs 128k \
		--bw-qd 64 2>&1 | tee -a "$out/agent_offset.txt" |
		awk -v b=$b '/randread|ceiling/ { print "NVMF", b, $0 }' | cut -c1-150
done
