#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The pipeline engine and the training-step example on a GPU machine.
#
#   bench/pipeline_gpu.sh stage BUILD DIR  (build machine, with nvcc) copies train_step_cuda,
#                                          train_step, test_pipeline and the libraries they
#                                          load (and a glibc) from the meson build BUILD into DIR
#   bench/pipeline_gpu.sh [DIR]            (GPU machine) runs them; DIR defaults to
#                                          .carry/pipeline.  Needs only the driver there.
#
# Runs test_pipeline with GDX_DEVICE=cuda, bench_stream_read (the latency of
# one stream-ordered read, hop by hop), the host-compute train_step once on
# the cuda device, then train_step_cuda: the seed's 50/100/30 us shape (also
# with each read in stream order: --load-in-order, workers polling or not), equal
# stages, and the largest stage swept from 50 us to 50 ms (load = T/2,
# compute = T, send = 0.3 T), each with a serial run (one slot) beside it;
# two rows without the host send stage (--send none: device-only), the
# seed's shape sending through gdx's transport from GPU memory (no d2h stage),
# and that again loading from an NVMe-oF namespace on loopback.
# Every row is checked end to end (the loopback peer recomputes results from
# the data set).  Ends with a table: stage means, serial step (sum of stages,
# and measured), pipelined step, efficiency = step / max(stage) (goal <= 1.05),
# and what else may bound the step: the storage read per batch on the file
# workers (and how many ran at once), and the producer's own time per batch.
#
# PIPELINE_ROWS="sweep-50 devonly-50 ..." runs only the train_step_cuda rows
# named (test_pipeline, bench_stream_read and the host-compute run are left
# out unless PIPELINE_ROWS also names "tests").
set -u

PROGS="examples/train_step/train_step_cuda examples/train_step/train_step tests/func/test_pipeline
	bench/bench_stream_read"
. "$(dirname "$0")/gpu_lib.sh"

stage() {
	build=$1 dir=$2
	mkdir -p "$dir/examples/train_step" "$dir/tests/func" "$dir/bench" "$dir/glibc" || exit 1
	for p in $PROGS; do
		[ -x "$build/$p" ] || { echo "$build/$p missing (nvcc not found at setup?)" >&2; exit 1; }
		cp "$build/$p" "$dir/$p" || exit 1
		ldd "$build/$p" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
			case ${lib##*/} in
			libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcuda.so*) ;;
			# The GPU machine has its own (newer) C++ runtime; an older one first would shadow it.
			libstdc++.so.*|libgcc_s.so.*) ;;
			*) cp -L "$lib" "$dir/" || exit 1 ;;
			esac
		done || exit 1
	done
	gpu_stage_glibc "$dir"
	du -sh "$dir"
	exit 0
}

if [ "${1:-}" = stage ]; then
	[ $# -eq 3 ] || { echo "usage: $0 stage BUILD DIR" >&2; exit 2; }
	stage "$2" "$3"
fi

dir=$(cd "${1:-.carry/pipeline}" && pwd) || exit 2
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GDX_DEVICE=${GDX_DEVICE_OVERRIDE:-cuda}
# Logs go to $OUT (what the GPU tool brings back).  The data set goes to
# tmpfs, like a training set held in memory, so that the load stage can be as
# short as the seed's 50 us; GDX_PIPELINE_WORK=DIR puts it on a disk instead.
out=${OUT:-/tmp/pipeline_gpu}
work=${GDX_PIPELINE_WORK:-/dev/shm/gdx_pipeline_gpu}
mkdir -p "$out" "$work"
export TMPDIR="$work"
log="$out/pipeline_gpu.log"
: >"$log"

gpu_loader "$dir"
[ -z "$loader" ] || echo "# glibc $glibc is older than the build's: using the staged one"
echo "# $(uname -sr); glibc $glibc; $(nproc) CPUs"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv,noheader \
	2>/dev/null | sed 's/^/# /' || echo "# nvidia-smi: not found"

rows=${PIPELINE_ROWS:-}
# True when the row is to run: every row without PIPELINE_ROWS, else those named.
want() {
	[ -z "$rows" ] && return 0
	case " $rows " in *" $1 "*) return 0 ;; esac
	return 1
}

failed=0
data="$work/train_step.dat"
# A row that stops completing batches for 10 s reports where it stands and fails (exit 3).
common="--device ${GDX_DEVICE} --data $data --data-bytes 256M --spin-us 300 --serial --stall-ms 10000"

if want tests; then
	echo "=== test_pipeline on the cuda device"
	# Overlap is read off host functions; where CUDA runs two streams' host
	# functions one at a time the test says so and skips that one check.
	$loader "$dir/tests/func/test_pipeline" 2>&1 | tee -a "$log"
	[ "$(tail -1 "$log" | grep -c PASSED)" -eq 1 ] || { failed=$((failed + 1)); echo "=== test_pipeline: FAILED"; }

	echo "=== bench_stream_read: one stream-ordered read of 256 KiB from tmpfs, hop by hop"
	$loader "$dir/bench/bench_stream_read" --size 256K --iters 300 2>&1 | tee -a "$log" ||
		failed=$((failed + 1))

	echo "=== train_step (host compute on slot threads, in stream order) on the cuda device"
	$loader "$dir/examples/train_step/train_step" $common --batch-bytes 256K --out-bytes 16K \
		--batches 100 --compute-us 200 2>&1 | tee -a "$log"
	grep -q '^RESULT .*mismatches=0' "$log" || failed=$((failed + 1))
fi

results="$out/results.txt"
: >"$results"
# name load compute send slots batches verify-every [extra options]
run() {
	name=$1; shift
	want "$name" || return 0
	echo "=== $name: train_step_cuda --load-us $1 --compute-us $2 --send-us $3 --slots $4" \
		"--batches $5 ${7:-}"
	$loader "$dir/examples/train_step/train_step_cuda" $common --batch-bytes 256K --out-bytes 16K \
		--load-us "$1" --compute-us "$2" --send-us "$3" --slots "$4" --batches "$5" \
		--verify-every "$6" ${7:-} >"$work/$name.log" 2>&1
	rc=$?
	cat "$work/$name.log" | tee -a "$log"
	if [ $rc -ne 0 ]; then
		failed=$((failed + 1))
		echo "$name FAILED(exit=$rc)" >>"$results"
	else
		echo "$name $(grep '^RESULT ' "$work/$name.log" | cut -d' ' -f2-)" >>"$results"
	fi
}

run seed-50-100-30 50 100 30 4 2000 32
# Each read started only when the stream reaches the load (cuFile's order),
# with the file workers polling for the next read (file.spin_us), and sleeping.
run seed-in-order 50 100 30 4 2000 32 "--load-in-order"
export GDX_FILE_SPIN_US=0
run seed-in-order-s0 50 100 30 4 2000 32 "--load-in-order"
unset GDX_FILE_SPIN_US
run equal-100 100 100 100 5 2000 32
# No host stage: the pipeline ends on the device, slots come back by event waits.
run devonly-50 25 50 0 3 2000 0 "--send none"
run devonly-100 50 100 0 3 2000 0 "--send none"
# The seed's shape with the results sent by gdx's transport straight from GPU memory.
run xport-50-100-30 50 100 30 4 2000 32 "--send xport:tcp://127.0.0.1:0"
# And loading from an NVMe-oF namespace (a gdx target on loopback serving the data set).
run nvmf-xport-100 50 100 30 4 2000 32 "--load nvmf --send xport:tcp://127.0.0.1:0"
for T in 50 100 500 1000 5000 50000; do
	n=$((3000000 / T)); [ $n -gt 2000 ] && n=2000; [ $n -lt 60 ] && n=60
	v=1; [ "$T" -lt 1000 ] && v=32
	run "sweep-$T" $((T / 2)) "$T" $((T * 3 / 10)) 4 "$n" "$v"
done
# The 50 us rows with reads ahead 2 deep (before they went as deep as the slots).
run devonly-50-ra2 25 50 0 3 2000 0 "--send none --read-ahead 2"
run sweep-50-ra2 25 50 15 4 2000 32 "--read-ahead 2"
# And 8 deep: a read may then take 8 producer steps before its load waits for it.
run sweep-50-ra8 25 50 15 4 2000 32 "--read-ahead 8"
# With the device stages of every 4th batch timed (two driver calls fewer a stage a batch).
run devonly-50-t4 25 50 0 3 2000 0 "--send none --time-every 4"
run sweep-50-t4 25 50 15 4 2000 32 "--time-every 4"
# Without the load's mark and pad kernels (two launches fewer a batch for the producer).
run devonly-50-nopad 0 50 0 3 2000 0 "--send none"
# And with the threads polling device events back to back (pipeline.poll_ns 0, as before).
export GDX_PIPELINE_POLL_NS=0
run devonly-50-poll0 25 50 0 3 2000 0 "--send none"
run sweep-50-poll0 25 50 15 4 2000 32
unset GDX_PIPELINE_POLL_NS
# The 50 us step again with the pipeline's threads sleeping whenever they wait
# (pipeline.spin_us 0), and with the file workers sleeping as well.
export GDX_PIPELINE_SPIN_US=0
run sweep-50-spin0 25 50 15 4 2000 32
export GDX_FILE_SPIN_US=0
run sweep-50-spin0-file0 25 50 15 4 2000 32
unset GDX_PIPELINE_SPIN_US GDX_FILE_SPIN_US

{
echo
echo "=== pipeline on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1):" \
	"times in us; eff = step / max(stage), goal <= 1.05"
awk '
function v(k,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] } return "-" }
BEGIN { printf "%-20s %7s %8s %6s %7s %9s %10s %9s %8s %6s %5s %6s %6s %3s %4s %6s %5s %6s\n", "case",
	"load", "compute", "d2h", "send", "max_stage", "serial_sum", "serial", "step", "eff",
	"goal", "slept", "read", "par", "late", "prod", "calls", "scalls" }
$2 ~ /^FAILED/ { printf "%-20s %s\n", $1, $2; next }
{ e = v("efficiency"); g = (e + 0 <= 1.05 && v("mismatches") == 0) ? "ok" : "MISS"
  printf "%-20s %7s %8s %6s %7s %9s %10s %9s %8s %6s %5s %6s %6s %3s %4s %6s %5s %6s\n", $1,
	v("load_us"), v("compute_us"), v("d2h_us"), v("send_us"), v("max_stage_us"),
	v("serial_sum_us"), v("serial_us"), v("step_us"), e, g, v("long_waits"), v("read_us"),
	v("reads_at_once"), v("reads_late"), v("producer_us"), v("calls"), v("send_calls") }' \
	"$results"
echo "read: mean storage read on a file worker (off the stream unless in order); par: most"
echo "reads at once; late: reads ahead still running when their batch was submitted; prod:"
echo "the producer's own time per batch (enqueue + harvest), which bounds the step when ~ it;"
echo "calls, scalls: driver calls a batch through gdx on the producer (its polls left out; the"
echo "example's kernel launches not counted) and on the send thread"
echo "$failed failed"
} | tee -a "$log"
[ "$failed" -eq 0 ]
