#!/bin/sh
# SPDX-License-Identifier: MIT
#
# NVMe/RDMA host -> GPU benchmark (issue 16) for a machine with a GPU and an RDMA NIC
# (our H200 machine has neither a NIC nor nvidia_peermem: it says so and exits 0).
#
#   [RDMA_ADDR=IP] bench/nvmf_rdma_gpu.sh [GDX]
#
# GDX as for bench/nvmf_host_gpu.sh (default .carry/cuda/tools/gdx/gdx).  Takes the
# first active device of /sys/class/infiniband whose netdev has an IPv4 address
# (RDMA_ADDR=IP picks the address).  Starts the gdx target over rdma on it (port
# GDX_BENCH_PORT, default 14420; a RAM namespace GDX_BENCH_NS, default ram:8G, 4 KiB
# blocks; GDX_BENCH_REACTORS reactors, default 8) and, where nvmet-rdma can be
# configured (root, the modules), the kernel's target on port +1 serving a
# memory-backed null_blk of the same size.  Against each, `gdx bench nvmf-host
# --transport rdma` into host memory and into gpu:0 (GDX_BENCH_QUEUES queues,
# default 8): 4 KiB reads at depths 1/32/128 and 128 KiB at depth 64, GDX_BENCH_SECS
# per point (default 2); then gpu:0 again with GDX_REQUIRE_DIRECT=1, so that a read
# that would bounce fails naming why instead of passing for direct.  Each row says
# the path the host took (direct, or bounce and the NIC's answer) beside a ceiling
# of the same run: perftest's ib_write_lat (depth 1: a read is a round trip, twice
# its one-way time) and ib_write_bw (4 KiB message rate, 128 KiB bandwidth; into
# the GPU's memory where perftest has --use_cuda), the controller's RDMA WRITE
# being what a read costs; without perftest, or for the GPU without --use_cuda,
# the host-memory row of the same run.  GDX_NVMF_HOST_RDMA_DEVICE_REG and other
# knobs pass through.  About 2 minutes a target.  Raw JSON lines:
# $OUT (or /tmp)/nvmf_rdma_gpu.jsonl; logs beside it.
set -u

out=${OUT:-/tmp}
jsonl=$out/nvmf_rdma_gpu.jsonl
: >"$jsonl"
NQN=nqn.2026-12.io.gdx:rdma-gpu
NS=${GDX_BENCH_NS:-ram:8G}
SECS=${GDX_BENCH_SECS:-2}
QUEUES=${GDX_BENCH_QUEUES:-8}
GPORT=${GDX_BENCH_PORT:-14420}
KPORT=$((GPORT + 1))
psecs=${SECS%.*}	# perftest's bandwidth runs: whole seconds, at least one
[ "${psecs:-0}" -ge 1 ] 2>/dev/null || psecs=1

# the RDMA device and its address: the first active one with an IPv4 address
# ($RDMA_ADDR: the one whose netdev has it)
dev='' addr=''
for d in /sys/class/infiniband/*; do
	[ -d "$d" ] || continue
	grep -qs ACTIVE "$d"/ports/1/state || continue
	# RoCE: the GID table's netdev; IB: IPoIB's; else what iproute2 says
	nd=$(cat "$d"/ports/1/gid_attrs/ndevs/0 2>/dev/null || ls "$d"/device/net 2>/dev/null | head -1)
	[ -n "$nd" ] || nd=$(rdma link show "${d##*/}/1" 2>/dev/null | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
	[ -n "$nd" ] || continue
	for a in $(ip -4 -o addr show dev "$nd" 2>/dev/null | awk '{ sub("/.*", "", $4); print $4 }'); do
		if [ -z "${RDMA_ADDR:-}" ] || [ "$a" = "$RDMA_ADDR" ]; then
			dev=${d##*/} addr=$a
			break 2
		fi
	done
done
if [ -z "$dev" ]; then
	echo "nvmf_rdma_gpu: no active RDMA device with an IPv4 address${RDMA_ADDR:+ of $RDMA_ADDR}: nothing measured"
	exit 0
fi
GDX=${1:-}
. "$(dirname "$0")/gpu_lib.sh"
gpu_gdx "$GDX"
echo "# $(uname -sr); $(nproc) CPUs; $(nvidia-smi --query-gpu=name,pci.bus_id,driver_version --format=csv,noheader 2>/dev/null)"
echo "# $dev ($nd) at $addr; peermem: $(lsmod 2>/dev/null | grep -q '^nvidia_peermem' && echo loaded || echo none)"

gpu_nvmf_target "$NQN" "$NS" "$out/nvmf_rdma_gpu.target.log" "rdma://$addr:$GPORT"
echo "# gdx target on rdma://$addr:$GPORT: $NS, ${GDX_BENCH_REACTORS:-8} reactors"

# the kernel's target: nvmet-rdma on a memory-backed null_blk, undone at exit
C=/sys/kernel/config/nvmet
NB=/sys/kernel/config/nullb/gdxbench
kport=
cleanup() {
	kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
	if [ -n "$kport" ]; then
		rm -f "$C/ports/$kport/subsystems/$NQN"
		rmdir "$C/ports/$kport" "$C/subsystems/$NQN/namespaces/1" "$C/subsystems/$NQN" 2>/dev/null
	fi
	[ -d "$NB" ] && { echo 0 >"$NB/power"; rmdir "$NB"; }
}
trap cleanup EXIT INT TERM
kernel_target() {
	[ "$(id -u)" = 0 ] || { echo "not root"; return 1; }
	modprobe -a nvmet nvmet-rdma configfs 2>&1 || return 1
	[ -d /sys/module/null_blk ] || modprobe null_blk nr_devices=0 2>&1 || return 1
	if [ ! -d "$C" ] || [ ! -d "${NB%/*}" ]; then echo "no nvmet or nullb configfs"; return 1; fi
	bytes=$(numfmt --from=iec "${NS#*:}") || return 1
	mkdir "$NB" && echo $((bytes >> 20)) >"$NB/size" && echo 4096 >"$NB/blocksize" &&
		echo 1 >"$NB/memory_backed" && echo 1 >"$NB/power" || return 1
	# named after its configfs item on newer kernels, nullbINDEX on older ones
	bdev=/dev/nullb$(cat "$NB/index")
	[ -b "$bdev" ] || bdev=/dev/${NB##*/}
	p=1
	while [ -e "$C/ports/$p" ]; do p=$((p + 1)); done
	kport=$p
	mkdir "$C/subsystems/$NQN" "$C/subsystems/$NQN/namespaces/1" "$C/ports/$kport" || return 1
	echo 1 >"$C/subsystems/$NQN/attr_allow_any_host"
	echo "$bdev" >"$C/subsystems/$NQN/namespaces/1/device_path"
	echo 1 >"$C/subsystems/$NQN/namespaces/1/enable" || return 1
	echo rdma >"$C/ports/$kport/addr_trtype"; echo ipv4 >"$C/ports/$kport/addr_adrfam"
	echo "$addr" >"$C/ports/$kport/addr_traddr"; echo $KPORT >"$C/ports/$kport/addr_trsvcid"
	ln -s "$C/subsystems/$NQN" "$C/ports/$kport/subsystems/$NQN" || return 1
	echo "# nvmet-rdma on rdma://$addr:$KPORT (port $kport): $bdev, memory-backed null_blk"
}
targets=gdx
if kernel_target >"$out/nvmf_rdma_gpu.nvmet.log" 2>&1; then
	cat "$out/nvmf_rdma_gpu.nvmet.log"
	targets="gdx nvmet"
else
	echo "# no kernel target: $(tail -1 "$out/nvmf_rdma_gpu.nvmet.log")"
fi

# ceiling NAME TOOL SIZE [server options]: perftest between two processes over $dev,
# the server's memory written (the host's buffer of a read); its figures as one JSON
# line.  ib_write_lat: us (one way); ib_write_bw: GB/s and the message rate.
ceiling() {
	name=$1 tool=$2 size=$3; shift 3
	log=$out/nvmf_rdma_gpu.$name.log
	if [ "$tool" = ib_write_lat ]; then how="-n 2000"; else how="-D $psecs -q $QUEUES --report_gbits"; fi
	# shellcheck disable=SC2086
	timeout 60 "$tool" -d "$dev" -F -s "$size" -p 18515 $how "$@" >"$log.server" 2>&1 &
	spid=$!
	sleep 1
	# shellcheck disable=SC2086
	timeout 60 "$tool" -d "$dev" -F -s "$size" -p 18515 $how "$addr" >"$log" 2>&1
	wait $spid
	# the row of figures: the size first (ib_write_bw: bytes, iterations, peak,
	# average Gb/s, Mpps; ib_write_lat: bytes, iterations, min, max, typical, ...)
	row=$(awk -v s="$size" '$1 == s && NF >= 5' "$log" | tail -1)
	if [ -z "$row" ]; then
		echo "# ceiling $name: $tool $* failed: $(tail -1 "$log")"
		return
	fi
	# no iteration finished within the time: no ceiling, not a ceiling of 0
	if [ "$(echo "$row" | awk '{ print $2 }')" = 0 ]; then
		echo "# ceiling $name: $tool -s $size $*: measured nothing: $row"
		return
	fi
	echo "# ceiling $name: $tool -s $size $*: $row"
	echo "$row" | awk -v n="$name" -v t="$tool" '{
		if (t == "ib_write_lat") printf "{\"ceiling\": \"%s\", \"us\": %s}\n", n, $5
		else printf "{\"ceiling\": \"%s\", \"gbps\": %.4f, \"mpps\": %s}\n", n, $4 / 8, $5
	}' >>"$jsonl"
}
if command -v ib_write_bw >/dev/null && command -v ib_write_lat >/dev/null; then
	ceiling lat-4k ib_write_lat 4096
	ceiling bw-4k ib_write_bw 4096
	ceiling bw-128k ib_write_bw 131072
	if ib_write_bw --help 2>&1 | grep -q -- --use_cuda; then
		ceiling bw-4k-gpu ib_write_bw 4096 --use_cuda=0
		ceiling bw-128k-gpu ib_write_bw 131072 --use_cuda=0
	else
		echo "# perftest has no --use_cuda: the host-memory rows are the GPU rows' ceilings"
	fi
else
	echo "# no perftest: the host-memory rows are the GPU rows' ceilings"
fi

# run TARGET PASS [env assignments...] -- bench arguments
run() {
	tgt=$1 pass=$2; shift 2
	envs=
	while [ "$1" != -- ]; do envs="$envs $1"; shift; done
	shift
	if [ "$tgt" = gdx ]; then port=$GPORT; else port=$KPORT; fi
	echo "=== $tgt $pass:$envs gdx bench nvmf-host $*"
	# shellcheck disable=SC2086
	env $envs $loader "$GDX" bench nvmf-host --transport rdma -a "$addr" -s "$port" -n "$NQN" \
		-t "$SECS" -r 1 --queues "$QUEUES" --qd 1,32,128 --bw-bs 128k --bw-qd 64 "$@" --json \
		>"$out/nvmf_rdma_gpu.run" 2>"$out/nvmf_rdma_gpu.err"
	rc=$?
	cat "$out/nvmf_rdma_gpu.run" "$out/nvmf_rdma_gpu.err"
	sed "s/^{/{\"target\":\"$tgt\",\"pass\":\"$pass\",/" "$out/nvmf_rdma_gpu.run" >>"$jsonl"
	# a refused read ends the bench: its reason is the row
	[ $rc = 0 ] || python3 -c 'import json, sys; print(json.dumps({"target": sys.argv[1],
		"pass": sys.argv[2], "error": open(sys.argv[3]).read().strip().splitlines()[-1]}))' \
		"$tgt" "$pass" "$out/nvmf_rdma_gpu.err" >>"$jsonl"
}
for t in $targets; do
	run "$t" plain -- -m host,gpu:0
	run "$t" strict GDX_REQUIRE_DIRECT=1 -- -m gpu:0
done

echo "=== NVMe/RDMA into host and GPU memory, beside the ceilings of the same run"
python3 - "$jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ceil = {r["ceiling"]: r for r in rows if "ceiling" in r}
def ceiling(r):
    """(the ceiling of a row in its unit, what it is) or None."""
    gpu, bw = r["mem"] != "host", r["test"] == "bw-randread"
    if bw:
        name = "bw-128k-gpu" if gpu else "bw-128k"
    elif r["qd"] == 1:
        # a read is a round trip: twice the one-way time; perftest has no GPU latency
        name = None if gpu else "lat-4k"
    else:
        name = "bw-4k-gpu" if gpu else "bw-4k"
    if name in ceil:
        c = ceil[name]
        if name == "lat-4k":
            return 1e6 / (2 * c["us"]), "ib_write_lat"
        return (c["gbps"] if bw else c["mpps"] * 1e6), "ib_write_bw" + (" gpu" if gpu else "")
    for h in rows if gpu else ():
        if (h.get("target"), h.get("pass"), h.get("mem"), h.get("test"), h.get("qd")) == \
           (r["target"], "plain", "host", r["test"], r["qd"]):
            return (h["gbps"] if bw else h["iops"]), "host row"
    return None
print(f"{'target':6} {'pass':6} {'mem':6} {'point':11} {'result':>16} {'ceiling':>16} "
      f"{'of':14} {'ratio':>5}  path")
for r in rows:
    if "error" in r:
        why, p = r["error"], "gdx bench nvmf-host: "
        why = why[len(p):] if why.startswith(p) else why
        print(f"{r['target']:6} {r['pass']:6} {'gpu:0':6} {'':11} REFUSED: {why}")
        continue
    if "mem" not in r or "target" not in r:
        continue
    bw = r["test"] == "bw-randread"
    point = ("128k" if bw else "4k") + f" qd{r['qd']}"
    v, unit = (r["gbps"], "GB/s") if bw else (r["iops"], "IOPS")
    c = ceiling(r)
    cs = f"{c[0]:11.3f} {unit:4}" if c and bw else f"{c[0]:11.0f} {unit:4}" if c else f"{'-':>16}"
    path = r.get("path", "?") + (f": {r['path_why']}" if "path_why" in r else "")
    print(f"{r['target']:6} {r['pass']:6} {r['mem']:6} {point:11} "
          + (f"{v:11.3f} {unit:4}" if bw else f"{v:11.0f} {unit:4}")
          + f" {cs} {c[1] if c else '-':14} " + (f"{v / c[0]:5.2f}" if c and c[0] else f"{'-':>5}")
          + f"  {path}")
PY
