#!/bin/bash
# Guest side of t_xport_tls.sh (see there).
. /share/guest_lib.sh
export GDX_DEVICE=emulated
cd /share
check "kernel TLS module loads" modprobe tls
check "test_tls_psk with kTLS: refusals, then 1 MiB byte-exact (send, write, read) over kTLS and over gdx's records" \
  env LD_LIBRARY_PATH=/share/lib GDX_TEST_KTLS=1 timeout 300 ./test_xport_tcp_wire test_tls_psk
key=$(python3 -c 'import base64,os,zlib;k=os.urandom(32);print("NVMeTLSkey-1:01:"+base64.b64encode(k+zlib.crc32(k).to_bytes(4,"little")).decode()+":")')
echo "$key" >/tmp/xkey; chmod 600 /tmp/xkey
B=(--sizes 4k,1M --secs 1 --no-ceiling)
for op in write send; do
  check "gdx bench xport --op $op in clear" ./gdx bench xport --op $op "${B[@]}"
  check "gdx bench xport --op $op over TLS" \
    ./gdx bench xport --op $op "${B[@]}" --tls-key /tmp/xkey --tls-identity bench-0
done
check "gdx bench xport --op read, device memory both ends, over TLS" \
  ./gdx bench xport --op read --src gpu:0 --dst gpu:0 "${B[@]}" --tls-key "$key"
finish 0
