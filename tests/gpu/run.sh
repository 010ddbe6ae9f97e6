#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The device tests on a GPU machine, with the cuda device.
#
#   tests/gpu/run.sh stage BUILD DIR   (build machine) copies the test programs of
#                                      the meson build BUILD, the libraries they
#                                      load and a glibc into DIR
#   tests/gpu/run.sh [DIR]             (GPU machine) runs them; DIR defaults to
#                                      .carry/cuda.  The GPU machine needs no
#                                      compiler and no package: only the driver.
#
# Runs: test_device (the device suite CI runs on the emulated device) with
# GDX_DEVICE=cuda, test_cuda_extra (cuMemMap / cuMemAllocAsync pointer queries,
# dma-buf of a cuMemMap range, properties), test_cuda_load (a missing or
# GPU-less driver gives a clear error) and test_pool (bounce pools page-locked
# with cuMemHostRegister on the GPU's NUMA node, copies through them),
# test_file (gdx_file_* on every backend into cuda memory), test_file_gate (no device
# call on a file worker before its gate opens; the nopad pipeline shape),
# test_nvmf_host_target (the NVMe/TCP host against the gdx target on loopback,
# reads and writes of cuda memory through the bounce ring, 32 in flight),
# test_xport_conformance (the transport suite over tcp loopback, cuda memory on
# either end; GDX_TEST_XPORT picks another backend), then prints `gdx check`.  Ends with "N passed, N failed, N skipped".
set -u

PROGS="tests/unit/test_device tests/gpu/test_cuda_extra tests/unit/test_cuda_load tests/unit/test_pool tests/func/test_file tests/func/test_file_gate tests/func/test_xport_conformance tests/func/test_nvmf_host_target"
# Staged beside them, not counted: the readiness report, run after them, and the
# copy agent's benchmark (bench/device_ab_gpu.sh).
TOOLS="tools/gdx/gdx bench/bench_agent"
. "$(dirname "$0")/../../bench/gpu_lib.sh"

stage() {
	build=$1 dir=$2
	mkdir -p "$dir/tests/unit" "$dir/tests/func" "$dir/tests/gpu" "$dir/tools/gdx" "$dir/bench" \
		"$dir/glibc" || exit 1
	for p in $PROGS $TOOLS; do
		cp "$build/$p" "$dir/$p" || exit 1
		# Every library it loads, but the C library (the machine's own is used
		# when new enough) and, should one be here, the driver.
		ldd "$build/$p" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
			case ${lib##*/} in
			libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcuda.so*) ;;
			*) cp -L "$lib" "$dir/" || exit 1 ;;
			esac
		done || exit 1
	done
	cp "$build/tests/unit/libfake_cuda.so" "$dir/tests/unit/" || exit 1
	gpu_stage_glibc "$dir"
	ls -l "$dir" "$dir/tests/unit" "$dir/tests/gpu"
	exit 0
}

if [ "${1:-}" = stage ]; then
	[ $# -eq 3 ] || { echo "usage: $0 stage BUILD DIR" >&2; exit 2; }
	stage "$2" "$3"
fi

dir=$(cd "${1:-.carry/cuda}" && pwd) || exit 2
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GDX_BUILDDIR="$dir" GDX_DEVICE=cuda GDX_TEST_XPORT=${GDX_TEST_XPORT:-tcp}

# The programs were linked against glibc 2.34+; an older system runs them under
# the staged glibc (the driver, built for old glibc releases, loads under it too).
gpu_loader "$dir"
[ -z "$loader" ] || echo "# glibc $glibc is older than the build's: using the staged one"

echo "# $(uname -sr); glibc $glibc"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv,noheader \
	2>/dev/null | sed 's/^/# /' || echo "# nvidia-smi: not found"

passed=0 failed=0 skipped=0
for p in $PROGS; do
	echo "=== ${p##*/}"
	$loader "$dir/$p"
	rc=$?
	case $rc in
	0) passed=$((passed + 1)) ;;
	77) skipped=$((skipped + 1)); echo "=== ${p##*/}: skipped" ;;
	*) failed=$((failed + 1)); echo "=== ${p##*/}: FAILED (exit $rc)" ;;
	esac
done
echo "=== gdx check (the readiness report of this machine; not counted)"
$loader "$dir/tools/gdx/gdx" check --path "$dir"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
