#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The Python package on a GPU machine: pytest with real torch tensors and streams,
# then bench/python_safetensors.py.  Two halves, as tests/gpu/run.sh:
#
#   bench/python_gpu.sh stage DIR   (build machine) the abi3 wheel (pip wheel .), the
#                                   libraries the extension loads, a release gdx tool
#                                   (for gdx bench file, the nvmf target, gdx check),
#                                   python/tests and the benchmark, into DIR
#   bench/python_gpu.sh run DIR     (GPU machine) installs the wheel into /tmp/site,
#                                   runs pytest (GDX_DEVICE=cuda, then emulated) and the
#                                   benchmark; logs to $OUT (or /tmp)
#
# The GPU machine needs a python3 (3.11 or later) with torch, safetensors and numpy;
# nothing is fetched there.
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

stage() {
	dir=$1
	mkdir -p "$dir/lib" "$dir/tests" || exit 1
	rm -f "$dir"/gdx-*.whl
	python3 -m pip wheel -q "$top" -w "$dir" || exit 1
	build=$dir/build
	[ -f "$build/build.ninja" ] || meson setup "$build" "$top" -Dbuildtype=release -Dtests=false >/dev/null || exit 1
	ninja -C "$build" tools/gdx/gdx >/dev/null || exit 1
	cp "$build/tools/gdx/gdx" "$dir/" || exit 1
	# The system libraries of the extension (the same set as the tool's), not the C library.
	ldd "$dir/gdx" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
		case ${lib##*/} in
		libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;
		*) cp -L "$lib" "$dir/lib/" || exit 1 ;;
		esac
	done
	cp "$top"/python/tests/*.py "$dir/tests/" && cp "$top/bench/python_safetensors.py" "$dir/"
	rm -rf "$build"
}

run() {
	dir=$(cd "$1" && pwd)
	out=${OUT:-/tmp}
	export LD_LIBRARY_PATH=$dir/lib PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
	python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$dir"/gdx-*.whl || exit 1
	export PYTHONPATH=/tmp/site GDX_CLI=$dir/gdx
	echo "# $(uname -sr); $(getconf GNU_LIBC_VERSION); $(python3 -V);" \
		"$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
	rc=0
	(cd "$dir/tests" && GDX_DEVICE=cuda timeout 300 python3 -m pytest -q -p no:cacheprovider -rs .) \
		2>&1 | tee "$out/python_pytest_cuda.log" || rc=1
	(cd "$dir/tests" && GDX_DEVICE=emulated timeout 200 python3 -m pytest -q -p no:cacheprovider .) \
		2>&1 | tail -3 || rc=1
	GDX_DEVICE=cuda timeout 400 python3 "$dir/python_safetensors.py" --gdx "$dir/gdx" 2>&1 |
		tee "$out/python_safetensors.log" || rc=1
	exit $rc
}

case ${1:-} in
stage) [ $# -eq 2 ] || { echo "usage: $0 stage DIR" >&2; exit 2; }; stage "$2" ;;
run) [ $# -eq 2 ] || { echo "usage: $0 run DIR" >&2; exit 2; }; run "$2" ;;
*) echo "usage: $0 stage DIR | run DIR" >&2; exit 2 ;;
esac
