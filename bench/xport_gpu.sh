#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Transport -> GPU benchmark for a GPU machine (issue 7): tcp loopback into
# device memory, out of it, and host<->host for reference, each line beside its
# ceilings measured in the same run (raw TCP on the same loopback, and pinned
# host<->device copies of the same size).  Where an RDMA device and perftest are
# present (RDMA_ADDR=rdma://IP:0), the same over verbs against ib_write_bw.
#
#   [SIZES=64k,1M,4M,16M] [SECS=1] [RUNS=3] [ZC_ROW=1] bench/xport_gpu.sh [GDX]
#
# GDX: a prebuilt gdx (default: .carry/cuda/tools/gdx/gdx as staged by
# `tests/gpu/run.sh stage`, else build/tools/gdx/gdx).  ZC_ROW adds a row with
# MSG_ZEROCOPY off.  Output also goes to $OUT (or /tmp)/xport_gpu.txt.
set -u

GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"

out=${OUT:-/tmp}/xport_gpu.txt
: >"$out"
SIZES=${SIZES:-64k,1M,4M,16M}
SECS=${SECS:-1}
# Loopback throughput on a shared VM moves by a third from one second to the next:
# each figure is the median of RUNS, each taken beside its ceiling in turn.
RUNS=${RUNS:-3}
rc=0
run() {
	echo "== gdx bench xport $*" | tee -a "$out"
	gdx bench xport --sizes "$SIZES" --secs "$SECS" --runs "$RUNS" "$@" 2>&1 |
		tee -a "$out" || rc=1
}
run --addr tcp://127.0.0.1:0 --op write --src host --dst host
run --addr tcp://127.0.0.1:0 --op write --src host --dst gpu:0
run --addr tcp://127.0.0.1:0 --op send --src host --dst gpu:0
# the server's device memory read into host memory: sent out of device memory
run --addr tcp://127.0.0.1:0 --op read --src host --dst gpu:0
run --addr tcp://127.0.0.1:0 --op send --src gpu:0 --dst host
run --addr tcp://127.0.0.1:0 --op write --src gpu:0 --dst gpu:0 --depth 32
if [ -n "${ZC_ROW:-}" ]; then
	# The same with the zero-copy send off, for comparison.
	GDX_XPORT_TCP_ZEROCOPY=0 run --addr tcp://127.0.0.1:0 --op write --src host --dst gpu:0
fi
if [ -n "${RDMA_ADDR:-}" ]; then
	run --addr "$RDMA_ADDR" --op write --src host --dst host
	run --addr "$RDMA_ADDR" --op write --src host --dst gpu:0
fi
echo "results: $out"
exit $rc
