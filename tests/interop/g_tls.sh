#!/bin/bash
# Guest side of t_tls.sh (see there).
. /share/guest_lib.sh
export GDX_DEVICE=emulated GDX_NVMF_HOST_CONNECT_TIMEOUT_MS=30000 GDX_NVMF_HOST_KATO_MS=15000
# what the host-built binaries need that the guest lacks (vm.sh share)
export LD_LIBRARY_PATH=/share/lib
G=/share/gdx T=/share/tls_psk_tool NQN=nqn.2024-01.io.gdx:tls NQN2=nqn.2024-01.io.gdx:nvmet-tls
GHOST=nqn.2024-01.io.gdx:tls-host
KHOST=$(cat /etc/nvme/hostnqn)
# refused WORDS CMD...: CMD fails and its output has WORDS
refused() { local why=$1 out; shift; out=$("$@" 2>&1); local rc=$?; echo "$out" | tail -2 | sed 's/^/    /'; [ $rc != 0 ] && grep -q "$why" <<<"$out"; }
key() { python3 -c 'import base64,os,zlib;k=os.urandom(32);print("NVMeTLSkey-1:01:"+base64.b64encode(k+zlib.crc32(k).to_bytes(4,"little")).decode()+":")'; }
KEY=$(key) BAD=$(key)
modprobe -a tls nvme-tcp nvmet nvmet-tcp
tlshd -s >/tmp/tlshd.log 2>&1 &
TLSHD=$!
cd /tmp
head -c 3M /dev/urandom >a.src

# ---- gdx host <-> gdx target -----------------------------------------------------------
echo "$KEY" >/tmp/key; chmod 600 /tmp/key
$G nvmf target -l 127.0.0.1:4420 -n $NQN -N ram:64M --tls /tmp/key >/tmp/target.log 2>&1 &
TGT=$!
for i in $(seq 100); do grep -q 'target: ready' /tmp/target.log && break; sleep 0.1; done
A=(-a 127.0.0.1 -s 4420 -n $NQN -q $GHOST)
check "gdx host writes 3 MiB over TLS, digests on" \
  $G nvmf write "${A[@]}" --tls --tls-key "$KEY" --hdr-digest --data-digest -o 1M -l 3M --from a.src
check "gdx host reads it back over TLS, 2 queues" \
  $G nvmf read "${A[@]}" --tls --tls-key /tmp/key --hdr-digest --data-digest --queues 2 -o 1M -l 3M --to a.back
check "  same bytes" cmp a.src a.back
check "gdx host reads into device memory over TLS" \
  $G nvmf read "${A[@]}" --tls --tls-key "$KEY" -m gpu:0 -o 1M -l 3M --to a.dev
check "  same bytes" cmp a.src a.dev
check "a clear gdx host is refused" refused "reset by peer" $G nvmf id-ctrl "${A[@]}"
check "a wrong key is refused" refused "Key was rejected" $G nvmf id-ctrl "${A[@]}" --tls --tls-key "$BAD"
# a host holding the key for one host NQN may not connect as another (user-space TLS)
psk=($($T psk "$KEY" 0 $GHOST $NQN))
st=$(python3 /share/tls_connect.py 4420 "${psk[*]:0:3}" "${psk[3]}" $GHOST $NQN 2>&1)
check "raw TLS host: Connect as its identity's host succeeds ($st)" test "$st" = 0
st=$(python3 /share/tls_connect.py 4420 "${psk[*]:0:3}" "${psk[3]}" nqn.2024-01.io.gdx:other $NQN 2>&1)
check "raw TLS host: Connect as another host is refused, Connect Invalid Host ($st)" test "$st" = 184
st=$(python3 /share/tls_connect.py 4420 $'NVMe0R01 \e[31mred' "${psk[3]}" $GHOST $NQN 2>&1 | tail -1)
check "raw TLS host: an identity with control characters is refused, not logged" \
  grep -q 'no PSK for identity (not printable or too long)' /tmp/target.log

# ---- the kernel host -> the gdx target ----------------------------------------------------
out=$(nvme check-tls-key --hostnqn="$KHOST" --subsysnqn=$NQN --keydata="$KEY" --insert 2>&1)
echo "  $out"
serial=$((16#$(sed -n 's/.*Inserted TLS key \([0-9a-f]*\).*/\1/p' <<<"$out")))
want=$($T psk "$KEY" 0 "$KHOST" $NQN | tail -1)
# only a possessor may read the key: link its keyring into a session of our own
kr=$((16#$(awk '$8 == "keyring" && $9 == ".nvme:" {print $1}' /proc/keys)))
got=$(keyctl session - sh -c "keyctl link $kr @s && keyctl pipe $serial" | od -An -tx1 -v | tr -d ' \n')
echo "  key $serial: $(keyctl describe $serial)"
check "nvme-cli's v0 TLS PSK is gdx's" test -n "$want" -a "$got" = "$want"
check "a clear kernel connect is refused" bash -c '! nvme connect -t tcp -a 127.0.0.1 -s 4420 -n '$NQN
DNQN=nqn.2014-08.org.nvmexpress.discovery
nvme check-tls-key --hostnqn="$KHOST" --subsysnqn=$DNQN --keydata="$KEY" --insert >/dev/null
out=$(nvme discover -t tcp -a 127.0.0.1 -s 4420 --tls 2>&1); echo "$out" | grep -E 'subnqn|treq|sectype' | sed 's/^/  /'
check "kernel discover --tls lists $NQN" grep -q "subnqn: *$NQN" <<<"$out"
check "  with TREQ required and SECTYPE TLS 1.3" \
  bash -c 'grep -q "treq: *required" <<<"$1" && grep -q "sectype: *tls13" <<<"$1"' _ "$out"
check "kernel connect --tls (v0 identity from the keyring)" \
  nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN --tls
if check "namespace appears" wait_dev /dev/nvme0n1; then
  check "kernel host reads what gdx wrote" cmp a.src <(dd if=/dev/nvme0n1 bs=1M skip=1 count=3 iflag=direct 2>/dev/null)
  check "fio verify over TLS" fio_verify /dev/nvme0n1 8M
fi
nvme disconnect -n $NQN >/dev/null; wait_gone /dev/nvme0n1
keyctl revoke $((serial)) 2>/dev/null
check "kernel connect --tls-key (v1 identity with the PSK digest)" \
  nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN --tls --tls-key="$KEY"
check "namespace appears" wait_dev /dev/nvme0n1
grep -q 'identity NVMe1R01' /tmp/target.log && ok "the target saw a v1 identity" || bad "the target saw a v1 identity"
nvme disconnect -n $NQN >/dev/null; wait_gone /dev/nvme0n1
kill $TGT; wait $TGT
grep -E 'identity|refused|ends' /tmp/target.log | sed 's/^/  target: /'

# ---- the same with gdx's own records where the kernel has kTLS (tls.record=user) --------------
GDX_TLS_RECORD=user $G nvmf target -l 127.0.0.1:4420 -n $NQN -N ram:64M --tls /tmp/key \
  >/tmp/target-user.log 2>&1 &
TGT=$!
for i in $(seq 100); do grep -q 'target: ready' /tmp/target-user.log && break; sleep 0.1; done
check "tls.record=user: kernel connect --tls-key to the gdx target" \
  nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN --tls --tls-key="$KEY"
if check "namespace appears" wait_dev /dev/nvme0n1; then
  check "fio verify over TLS, the target's records made by gdx" fio_verify /dev/nvme0n1 8M
fi
nvme disconnect -n $NQN >/dev/null; wait_gone /dev/nvme0n1
check "  the target said it makes the records" \
  grep -q 'TLS records in userspace: as configured' /tmp/target-user.log
check "tls.record=user on both: gdx host writes 3 MiB with digests" env GDX_TLS_RECORD=user \
  $G nvmf write "${A[@]}" --tls --tls-key "$KEY" --hdr-digest --data-digest -o 1M -l 3M --from a.src
check "  and reads it back, 2 queues" env GDX_TLS_RECORD=user \
  $G nvmf read "${A[@]}" --tls --tls-key "$KEY" --hdr-digest --data-digest --queues 2 -o 1M -l 3M --to a.user
check "  same bytes" cmp a.src a.user
check "a wrong key is refused (tls.record=user)" refused "Key was rejected" \
  env GDX_TLS_RECORD=user $G nvmf id-ctrl "${A[@]}" --tls --tls-key "$BAD"
kill $TGT; wait $TGT
grep -E 'userspace|ends' /tmp/target-user.log | sed 's/^/  target (user records): /'

# ---- PSKs per host: the kernel host with a key of its own, another host NQN with another --
# (a subsystem of its own: the keyring still holds the v1 PSK `connect --tls-key` put
# there for $NQN, and the kernel would offer it first)
KK=$(key) K2=$(key)
H2=nqn.2024-01.io.gdx:tls-host2 NQN3=nqn.2024-01.io.gdx:tls-hosts
H2ID=$(cat /proc/sys/kernel/random/uuid)
cat >/tmp/hosts.json <<JSON
{ "hosts": [ { "nqn": "$KHOST", "tls_key": "$KK" }, { "nqn": "$H2", "tls_key": "$K2" } ],
  "subsystems": [ { "nqn": "$NQN3", "attr": { "allow_any_host": "1" },
    "namespaces": [ { "nsid": 1, "enable": 1, "device": { "path": "ram:64M" } } ] } ],
  "ports": [ { "portid": 1, "addr": { "trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1",
      "trsvcid": "4422", "treq": "required", "tsas": "tls1.3" }, "subsystems": [ "$NQN3" ] } ] }
JSON
$G nvmf target -c /tmp/hosts.json >/tmp/target2.log 2>&1 &
TGT=$!
for i in $(seq 300); do grep -q 'target: ready' /tmp/target2.log && break; sleep 0.1; done
if grep -q 'target: ready' /tmp/target2.log; then
  P=(-t tcp -a 127.0.0.1 -s 4422 -n $NQN3 --tls)
  nvme check-tls-key --hostnqn="$KHOST" --subsysnqn=$NQN3 --keydata="$KK" --insert >/dev/null
  check "kernel host connects with its own PSK (check-tls-key --insert for its NQN)" nvme connect "${P[@]}"
  if check "namespace appears" wait_dev /dev/nvme0n1; then
    check "  and reads" dd if=/dev/nvme0n1 of=/dev/null bs=1M count=4 iflag=direct status=none
  fi
  nvme disconnect -n $NQN3 >/dev/null; wait_gone /dev/nvme0n1
  # a second host NQN whose retained PSK is made from the first host's key: the target has another
  nvme check-tls-key --hostnqn=$H2 --subsysnqn=$NQN3 --keydata="$KK" --insert >/dev/null
  check "a second host NQN with the first host's key is refused" \
    bash -c '! nvme connect "$@" --hostnqn='$H2' --hostid='$H2ID' && ! [ -e /dev/nvme0n1 ]' _ "${P[@]}"
  nvme check-tls-key --hostnqn=$H2 --subsysnqn=$NQN3 --keydata="$K2" --insert >/dev/null
  check "the second host NQN with its own key connects" nvme connect "${P[@]}" --hostnqn=$H2 --hostid=$H2ID
  check "namespace appears" wait_dev /dev/nvme0n1
  nvme disconnect -n $NQN3 >/dev/null; wait_gone /dev/nvme0n1
  A=(-a 127.0.0.1 -s 4422 -n $NQN3 -q $H2)
  check "gdx host as the second host, its own key: 3 MiB byte-exact" \
    bash -c "$G nvmf write ${A[*]} --tls --tls-key $K2 -o 0 -l 3M --from a.src &&
      $G nvmf read ${A[*]} --tls --tls-key $K2 -o 0 -l 3M --to a.h2 && cmp a.src a.h2"
  check "gdx host as the second host with the kernel host's key is refused" \
    refused "Key was rejected" $G nvmf id-ctrl "${A[@]}" --tls --tls-key "$KK"
else
  bad "the gdx target with per-host keys did not start"; sed 's/^/    /' /tmp/target2.log
fi
kill $TGT 2>/dev/null; wait $TGT
grep -E 'identity|no PSK' /tmp/target2.log | sed 's/^/  target: /'

# ---- the gdx host -> nvmet-tcp with TLS ------------------------------------------------------
C=/sys/kernel/config/nvmet
truncate -s 64M /tmp/nvmet.img
mkdir $C/subsystems/$NQN2 && echo 1 >$C/subsystems/$NQN2/attr_allow_any_host
mkdir $C/subsystems/$NQN2/namespaces/1
echo /tmp/nvmet.img >$C/subsystems/$NQN2/namespaces/1/device_path
echo 1 >$C/subsystems/$NQN2/namespaces/1/enable
mkdir $C/ports/1
echo tcp >$C/ports/1/addr_trtype; echo ipv4 >$C/ports/1/addr_adrfam
echo 127.0.0.1 >$C/ports/1/addr_traddr; echo 4421 >$C/ports/1/addr_trsvcid
echo tls1.3 >$C/ports/1/addr_tsas && echo required >$C/ports/1/addr_treq
ln -s $C/subsystems/$NQN2 $C/ports/1/subsystems/
nvme check-tls-key --hostnqn=$GHOST --subsysnqn=$NQN2 --keydata="$KEY" --insert | sed 's/^/  /'
B=(-a 127.0.0.1 -s 4421 -n $NQN2 -q $GHOST)
check "gdx host writes to nvmet over TLS, digests on" \
  $G nvmf write "${B[@]}" --tls --tls-key "$KEY" --hdr-digest --data-digest -o 0 -l 3M --from a.src
check "gdx host reads it back from nvmet over TLS" \
  $G nvmf read "${B[@]}" --tls --tls-key "$KEY" -o 0 -l 3M --to b.back
check "  same bytes" cmp a.src b.back
check "nvmet refuses the gdx host in clear" refused "reset by peer" $G nvmf id-ctrl "${B[@]}"
check "nvmet refuses a wrong key" refused "Key was rejected" $G nvmf id-ctrl "${B[@]}" --tls --tls-key "$BAD"
kill $TLSHD
echo "  tlshd:"; tail -8 /tmp/tlshd.log | sed 's/^/    /'
finish
