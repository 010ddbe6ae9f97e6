#!/bin/sh
# SPDX-License-Identifier: MIT
#
# What TLS 1.3 costs the NVMe/TCP host on a GPU machine (issue 20):
#
#   bench/nvmf_host_tls_gpu.sh [GDX]
#
# GDX as for bench/nvmf_host_gpu.sh (staged by `tests/gpu/run.sh stage`).  Starts the
# gdx target on 127.0.0.1 with one RAM namespace (GDX_BENCH_NS, default ram:8G, 4 KiB
# blocks) on two ports, one clear and one requiring TLS (GDX_BENCH_REACTORS reactors,
# default 8), and runs `gdx bench nvmf-host` against each, clear first, reading into
# host and GPU memory (8 queues; depths 1/32/128 and 128 KiB reads, GDX_BENCH_SECS per
# point, default 2), each beside the loopback TCP ceiling of its run.  The records are
# the kernel's (kTLS) where it has the tls module, else gdx's own (a relay thread per
# connection, OpenSSL); GDX_TLS_RECORD=user forces gdx's (the header says which ran).
# About 2 minutes.  Output: $OUT (or /tmp)/nvmf_host_tls_gpu.*
set -u

GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"

out=${OUT:-/tmp}
NQN=nqn.2026-11.io.gdx:bench-tls
NS=${GDX_BENCH_NS:-ram:8G}
SECS=${GDX_BENCH_SECS:-2}
tlog=$out/nvmf_host_tls_gpu.target.log

modprobe tls 2>/dev/null
if [ "${GDX_TLS_RECORD:-auto}" = user ]; then
	records="gdx's, in userspace (GDX_TLS_RECORD=user)"
elif grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null; then
	records="the kernel's (kTLS)"
else
	records="gdx's, in userspace (this kernel has no kTLS)"
fi
KEY=$(python3 -c 'import base64,os,zlib;k=os.urandom(32);print("NVMeTLSkey-1:01:"+base64.b64encode(k+zlib.crc32(k).to_bytes(4,"little")).decode()+":")')
cat >"$out/nvmf_host_tls_gpu.json" <<JSON
{ "subsystems": [ { "nqn": "$NQN", "attr": { "allow_any_host": "1" },
    "namespaces": [ { "nsid": 1, "enable": 1, "block_size": 4096, "device": { "path": "$NS" } } ] } ],
  "ports": [ { "portid": 1, "addr": { "trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0" },
               "subsystems": [ "$NQN" ] },
             { "portid": 2, "addr": { "trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0",
                 "treq": "required", "tsas": "tls1.3" }, "tls_key": "$KEY", "subsystems": [ "$NQN" ] } ] }
JSON
# shellcheck disable=SC2086
$loader "$GDX" nvmf target -c "$out/nvmf_host_tls_gpu.json" -r "${GDX_BENCH_REACTORS:-8}" >"$tlog" 2>&1 &
tpid=$!
trap 'kill $tpid 2>/dev/null; wait $tpid 2>/dev/null' EXIT INT TERM
i=0
until grep -q 'target: ready' "$tlog" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 300 ] || ! kill -0 $tpid 2>/dev/null; then echo "the target did not start:"; cat "$tlog"; exit 1; fi
	sleep 0.1
done
clear_port=$(sed -n 's/.*port 1 listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tlog")
tls_port=$(sed -n 's/.*port 2 listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tlog")
echo "# $(uname -sr); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv,noheader 2>/dev/null)"
echo "# gdx target: $NS, ${GDX_BENCH_REACTORS:-8} reactors; clear on $clear_port, TLS on $tls_port"
echo "# TLS records: $records"
for mode in clear tls; do
	if [ $mode = tls ]; then port=$tls_port; set -- --tls-key "$KEY"; else port=$clear_port; set --; fi
	echo "=== $mode: gdx bench nvmf-host -m host,gpu:0 --queues 8"
	# shellcheck disable=SC2086
	$loader "$GDX" bench nvmf-host -a 127.0.0.1 -s "$port" -n "$NQN" -t "$SECS" -m host,gpu:0 \
		--queues 8 "$@" 2>&1 | tee "$out/nvmf_host_tls_gpu.$mode.txt"
done
