# SPDX-License-Identifier: MIT
#
# Sourced by the GPU-machine scripts (bench/*_gpu.sh, tests/gpu/run.sh): finding the
# prebuilt gdx and running staged programs under the staged glibc where needed.

# gpu_stage_glibc DIR: copy this machine's glibc into DIR/glibc (already made), for
# GPU machines whose own is older than the one the programs were linked against.
gpu_stage_glibc() {
	for lib in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2; do
		cp -L "/lib/x86_64-linux-gnu/$lib" "$1/glibc/" 2>/dev/null ||
			cp -L "/lib64/$lib" "$1/glibc/" || exit 1
	done
}

# gpu_loader DIR: $loader runs a program staged in DIR under DIR/glibc when this
# machine's glibc ($glibc) is older than the build's (2.34), and is empty otherwise.
gpu_loader() {
	loader=
	glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
	case $glibc in
	2.[0-9]|2.[12][0-9]|2.3[0-3])
		[ -d "$1/glibc" ] && loader="$1/glibc/ld-linux-x86-64.so.2 --library-path $1:$1/glibc:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu" ;;
	esac
	return 0
}

# gpu_gdx [GDX]: $GDX the prebuilt gdx (default: .carry/cuda/tools/gdx/gdx as staged by
# `tests/gpu/run.sh stage`, else build/tools/gdx/gdx; exits 2 when there is none), $stage
# the directory it was staged in, whose libraries it loads, and $loader; gdx runs it.
gpu_gdx() {
	GDX=${1:-}
	if [ -z "$GDX" ]; then
		if [ -x .carry/cuda/tools/gdx/gdx ]; then GDX=.carry/cuda/tools/gdx/gdx; else GDX=build/tools/gdx/gdx; fi
	fi
	[ -x "$GDX" ] || { echo "gdx not found at $GDX" >&2; exit 2; }
	stage=$(cd "$(dirname "$GDX")/../.." && pwd)
	export GDX_DEVICE=${GDX_DEVICE:-cuda}
	export LD_LIBRARY_PATH="$stage${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	gpu_loader "$stage"
}

gdx() { $loader "$GDX" "$@"; }

# gpu_ticks PID: "tid name cpu-ticks" per thread of PID, sorted by tid (for join)
gpu_ticks() {
	for t in /proc/"$1"/task/*; do
		[ -r "$t/stat" ] || continue
		echo "${t##*/} $(tr ' ' _ 2>/dev/null <"$t/comm") $(sed 's/^.*) //' "$t/stat" \
			2>/dev/null | awk '{ print $12 + $13 }')"
	done 2>/dev/null | awk 'NF == 3' | sort
}

# gpu_nvmf_target NQN NS LOG [LISTEN]: starts `gdx nvmf target` ($GDX under $loader)
# on LISTEN (default: a free port of 127.0.0.1, set in $PORT) serving namespace NS
# (4 KiB blocks) with GDX_BENCH_REACTORS reactors (default 8), its output in LOG;
# waits until it is ready (exits 1 if it does not start) and stops it at exit.
# Sets $tpid.
gpu_nvmf_target() {
	if [ -n "${4:-}" ]; then
		listen=$4
	else
		PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 24420)
		listen=127.0.0.1:$PORT
	fi
	# shellcheck disable=SC2086
	$loader "$GDX" nvmf target -l "$listen" -n "$1" -N "$2,bs=4096" \
		-r "${GDX_BENCH_REACTORS:-8}" >"$3" 2>&1 &
	tpid=$!
	trap 'kill $tpid 2>/dev/null; wait $tpid 2>/dev/null' EXIT INT TERM
	i=0
	until grep -q 'target: ready' "$3" 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 300 ] || ! kill -0 $tpid 2>/dev/null; then
			echo "the target did not start:"; cat "$3"; exit 1
		fi
		sleep 0.1
	done
}
