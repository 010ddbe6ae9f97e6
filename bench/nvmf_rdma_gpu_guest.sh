#!/bin/bash
# SPDX-License-Identifier: MIT
# Guest side of bench/nvmf_rdma_gpu_vm.sh.
. /share/guest_lib.sh
cd /share
export LD_LIBRARY_PATH=$PWD/lib GDX_DEVICE=emulated
export GDX_NVMF_HOST_KATO_MS=15000 GDX_NVMF_HOST_CONNECT_TIMEOUT_MS=30000	# TCG is slow
export GDX_BENCH_NS=ram:64M GDX_BENCH_SECS=0.2 GDX_BENCH_QUEUES=2 GDX_BENCH_REACTORS=2
modprobe -a rdma_rxe ib_uverbs rdma_ucm || exit 1
# bench OUTDIR [env...]: the script into OUTDIR, its output shown and in OUTDIR/log
bench() {
  local d=$1; shift
  mkdir -p "$d"
  env OUT="$d" "$@" sh bench/nvmf_rdma_gpu.sh ./gdx >"$d/log" 2>&1
  echo "  exit $?" >>"$d/log"
  sed 's/^/  | /' "$d/log" | grep -v '^  | {' | cut -c1-220
}
# rows DIR PYTHON: asserts PYTHON on the rows of DIR's jsonl (r: the rows)
rows() {
  python3 -c "
import json, sys
r = [json.loads(l) for l in open('$1/nvmf_rdma_gpu.jsonl')]
$2" || { tail -5 "$1/log"; return 1; }
}

bench /tmp/none
check "no RDMA device: one line, exit 0, nothing measured" \
  bash -c 'grep -q "^nvmf_rdma_gpu: no active RDMA device" /tmp/none/log &&
    grep -q "exit 0" /tmp/none/log && [ ! -s /tmp/none/nvmf_rdma_gpu.jsonl ]'

rdma link add rxe0 type rxe netdev eth0 || exit 1
# the emulated device's memory is registered as peer memory: every read direct
bench /tmp/direct
check "rxe0: both targets measured" grep -q "nvmet-rdma on rdma://$GUEST_IP" /tmp/direct/log
# (128 KiB writes over rxe in TCG may finish none within the second: then none)
check "rxe0: perftest's ceilings taken" rows /tmp/direct "
assert {x['ceiling'] for x in r if 'ceiling' in x} - {'bw-128k'} == {'lat-4k', 'bw-4k'}, r"
check "rxe0: 16 rows per target into host and device memory, all direct" rows /tmp/direct "
for t in ('gdx', 'nvmet'):
    m = [x for x in r if x.get('target') == t]
    assert len(m) == 12 and all(x['path'] == 'direct' and x['transport'] == 'rdma'
                                 for x in m), m
    assert sum(x['pass'] == 'strict' for x in m) == 4, m"
# the table: every row, and a ratio on each one with a ceiling (device rows: at
# least the host row's)
table() { sed -n '/^=== NVMe\/RDMA/,$p' /tmp/direct/log | grep -E "$1" | wc -l; }
check "rxe0: the table has every row, the device ones with a ratio" \
  bash -c "[ $(table ' direct$') = 24 ] && [ $(table ' gpu:0 .* [0-9]+\.[0-9]{2}  direct$') = 16 ]"

# only dma-buf allowed, which rxe does not register: bounce, and strict refused
bench /tmp/dmabuf GDX_NVMF_HOST_RDMA_DEVICE_REG=dmabuf
check "dma-buf only: device reads bounce naming why, host reads direct" rows /tmp/dmabuf "
for t in ('gdx', 'nvmet'):
    m = [x for x in r if x.get('target') == t and x.get('pass') == 'plain']
    assert len(m) == 8, m
    for x in m:
        if x['mem'] == 'host':
            assert x['path'] == 'direct' and 'path_why' not in x, x
        else:
            assert x['path'] == 'bounce' and 'dma-buf' in x['path_why'], x"
check "dma-buf only: GDX_REQUIRE_DIRECT=1 refused with the reason" rows /tmp/dmabuf "
e = [x for x in r if 'error' in x]
assert [x['target'] for x in e] == ['gdx', 'nvmet'], e
assert all(x['pass'] == 'strict' and 'direct path unavailable' in x['error'] and
           'rxe0: dma-buf' in x['error'] for x in e), e"
check "dma-buf only: the table says REFUSED" grep -q '^gdx    strict gpu:0 .*REFUSED: .*rxe0: dma-buf' /tmp/dmabuf/log
finish
