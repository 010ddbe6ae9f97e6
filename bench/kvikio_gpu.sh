#!/bin/sh
# SPDX-License-Identifier: MIT
#
# KvikIO on the same files as `gdx bench file`, for bench/file_gpu.sh.
#
#   bench/kvikio_gpu.sh stage DIR       (build machine, with PyPI reachable)
#       downloads the KvikIO wheels (libkvikio-cu13, rapids-logger; the C++
#       library under `import kvikio`), builds bench/kvikio_probe.cpp against
#       them and puts the probe and its libraries in DIR.  cuFile comes from the
#       GPU machine (KvikIO loads it at run time and runs in compat mode where
#       it is missing or refuses the file, as gdx's cufile backend does).
#   bench/kvikio_gpu.sh run DIR FILE SIZE
#       (GPU machine) reads FILE's first SIZE bytes into GPU memory, hot and
#       cold, with KvikIO's default thread pool and with 16 threads.
#
# The Python package needs CuPy (over 100 MiB, more than a device call
# carries); the C++ API is the same code path without it.
set -u

case ${1:-} in
stage)
	[ $# -eq 2 ] || { echo "usage: $0 stage DIR" >&2; exit 2; }
	dir=$2 src=$(cd "$(dirname "$0")" && pwd)
	tmp=$(mktemp -d) || exit 1
	trap 'rm -rf "$tmp"' EXIT
	python3 -m pip download -q --no-deps -d "$tmp" libkvikio-cu13 rapids-logger nvidia-cufile \
		|| { echo "pip download of the KvikIO wheels failed" >&2; exit 1; }
	for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x" || exit 1; done
	kv=$tmp/x/libkvikio
	cuda=${CUDA_HOME:-/usr/local/cuda}
	mkdir -p "$dir" || exit 1
	# The wheel was built with cuFile's header: so is the probe, or the
	# classes it shares with libkvikio would differ.
	g++ -std=c++17 -O2 -DKVIKIO_CUFILE_FOUND -DKVIKIO_CUFILE_BATCH_API_FOUND \
		-DKVIKIO_CUFILE_STREAM_API_FOUND -DKVIKIO_CUFILE_VERSION_API_FOUND \
		-I"$tmp/x/nvidia/cu13/include" -I"$kv/include" -I"$cuda/include" \
		"$src/kvikio_probe.cpp" -o "$dir/kvikio_probe" \
		-L"$kv/lib64" -lkvikio -L"$tmp/x/rapids_logger/lib64" -lrapids_logger \
		-L"$tmp/x/libkvikio_cu13.libs" -l:"$(basename "$tmp"/x/libkvikio_cu13.libs/libzstd*)" \
		-L"$cuda/lib64/stubs" -lcuda -Wl,-rpath,'$ORIGIN' || exit 1
	cp "$kv/lib64/libkvikio.so" "$tmp"/x/rapids_logger/lib64/librapids_logger.so \
		"$tmp"/x/libkvikio_cu13.libs/libzstd* "$dir/" || exit 1
	cat "$kv/VERSION" >"$dir/VERSION" 2>/dev/null
	echo "KvikIO $(cat "$dir/VERSION" 2>/dev/null) staged in $dir"
	;;
run)
	[ $# -eq 4 ] || { echo "usage: $0 run DIR FILE SIZE" >&2; exit 2; }
	dir=$2 file=$3 size=$(numfmt --from=iec "$4")
	[ -x "$dir/kvikio_probe" ] || { echo "=== KvikIO: not staged (bench/kvikio_gpu.sh stage DIR)"; exit 0; }
	for cache in hot cold; do
		for t in default 16; do
			[ $t = default ] && t=
			timeout 120 "$dir/kvikio_probe" "$file" "$size" $cache $t 2>&1 | grep -v '^\[' | tail -1
		done
	done
	;;
*)
	echo "usage: $0 stage DIR | run DIR FILE SIZE" >&2
	exit 2
	;;
esac
