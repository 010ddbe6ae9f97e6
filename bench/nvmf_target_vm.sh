#!/usr/bin/env bash
# NVMe-oF target benchmark: in one qemu guest (Debian's stock kernel, TCG) the
# kernel host reads from the kernel's nvmet target and from the gdx target,
# each serving a null namespace, over the guest's loopback (TCP) or over
# rdma_rxe on its NIC (TRANSPORT=rdma): 4 KiB random-read IOPS at depth 1, 32
# and 128 and 128 KiB read bandwidth, with gdx/nvmet ratios.  TCG makes both
# slow; the ratio is the result.  Goals: TCP IOPS >= 1.5x, bandwidth >= 1.0x;
# RDMA >= 1.0x from depth 32 up.  Each job runs ROUNDS times per target,
# alternating; the median of each side is reported.
#   bench/nvmf_target_vm.sh [BUILD_DIR]    (env: RUNTIME seconds per run, ROUNDS; JOBS, a
#       subset of "qd1 qd32 qd128 bw"; GDX_OPTS, the gdx target's options (default: one
#       reactor on the last vCPU, following the host at depth <= 2, polling up to 1 ms);
#       FIO_CPUS, where fio runs for both targets (default: every vCPU but the last);
#       VM_CPUS (default 2), VM_CACHE as for tests/interop; TRANSPORT tcp or rdma; PERF_OUT,
#       a folder for perf profiles of one more run of each job on each target: bench/vm_perf.sh)
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$top/build}
gdx=$build/tools/gdx/gdx
[ -x "$gdx" ] || { echo "no $gdx: build first"; exit 1; }
share=$(mktemp -d); trap 'rm -rf "$share"' EXIT
cp "$top/bench/nvmf_target_guest.sh" "$share/"
"$top/tests/interop/vm.sh" prepare >/dev/null || { echo "vm prepare failed"; exit 1; }
"$top/tests/interop/vm.sh" share "$share" "$gdx" || exit 1
. "$top/bench/vm_perf.sh"
vm_perf_share "$share" || exit 1
cpus=${VM_CPUS:-2}
last=$((cpus - 1))
fio_cpus=${FIO_CPUS-$([ "$cpus" -gt 1 ] && echo "0-$((cpus - 2))")}
# shellcheck disable=SC2086 # GDX_OPTS is a list of options
VM_SHARE=$share VM_CPUS=$cpus VM_TIMEOUT=${VM_TIMEOUT:-600} \
  "$top/tests/interop/vm.sh" run "$share/nvmf_target_guest.sh" "${RUNTIME:-4}" \
  "${ROUNDS:-3}" "${JOBS:-qd1 qd32 qd128 bw}" "$fio_cpus" "${TRANSPORT:-tcp}" \
  ${GDX_OPTS:--r 1 --cpus $last --follow --poll-us 1000} |
  tee "$share/out.log" | grep -E 'nvmet:|rror|vm.sh\]|gdx posts:'
vm_perf_collect "$share"
python3 - "$share/out.log" "${TRANSPORT:-tcp}" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 4 and p[0] == "RESULT":
        runs.setdefault((p[1], p[2]), []).append(float(p[3] or 0))
r = {k: statistics.median(v) for k, v in runs.items()}
print("runs (nvmet | gdx):")
for key in ("iops_qd1", "iops_qd32", "iops_qd128", "bw_128k_kib"):
    print("  %-12s %s | %s" % (key, " ".join("%.0f" % x for x in runs.get(("nvmet", key), [])),
                             " ".join("%.0f" % x for x in runs.get(("gdx", key), []))))
tr = sys.argv[2]
if tr == "rdma":
    rows = [("iops_qd1", "4k randread QD1 IOPS", 0.0), ("iops_qd32", "4k randread QD32 IOPS", 1.0),
            ("iops_qd128", "4k randread QD128 IOPS", 1.0), ("bw_128k_kib", "128k read KiB/s", 1.0)]
else:
    rows = [("iops_qd1", "4k randread QD1 IOPS", 1.5), ("iops_qd32", "4k randread QD32 IOPS", 1.5),
            ("iops_qd128", "4k randread QD128 IOPS", 1.5), ("bw_128k_kib", "128k read KiB/s", 1.0)]
ok = True
# ratio: of the medians; paired: median of the per-round ratios (the two runs of a
# round are back to back, so they see about the same load on the machine)
print("%-24s %12s %12s %7s %7s  %s" % ("job (median)", "nvmet-" + tr, "gdx", "ratio", "paired",
                                       "goal"))
for key, name, goal in rows:
    k, g = r.get(("nvmet", key)), r.get(("gdx", key))
    if k is None and g is None:
        continue    # not in JOBS
    if not k or g is None:
        print("%-24s missing" % name); ok = False; continue
    ratio = g / k
    pairs = [b / a for a, b in zip(runs[("nvmet", key)], runs[("gdx", key)]) if a]
    print("%-24s %12.0f %12.0f %6.2fx %6.2fx  %s%s" % (
        name, k, g, ratio, statistics.median(pairs) if pairs else 0,
        ">= %.1fx" % goal if goal else "-", "" if ratio >= goal else "  (below goal)"))
sys.exit(0 if ok else 1)
PY
