#!/bin/bash
# vm: trixie
# DH-HMAC-CHAP both ways with the Debian 13 kernel (6.12: NVME_AUTH, NVME_TARGET_AUTH).
# The guest's kernel host against the gdx target (its host must authenticate;
# ffdhe2048, SHA-384 preferred): unidirectional and bidirectional connects that serve
# I/O, then a wrong secret, none, and a wrong controller secret, each refused with no
# namespace appearing.  The gdx host against the guest's nvmet, whose host entry has a
# dhchap_key and dhchap_ctrl_key (hmac(sha512), ffdhe3072): both directions, data
# both ways, and the refusals.  Bookworm's 6.1 kernel has no NVMe authentication: the
# test needs VM_DIST=trixie, which run.sh sets from the '# vm: trixie' line above.
. "$(dirname "$0")/lib.sh"
if [ "${VM_DIST:-bookworm}" != trixie ]; then
  echo "skipped: needs the Debian 13 guest (VM_DIST=trixie); Debian 12's 6.1 kernel has no NVME_AUTH"
  exit 77
fi
SHARE=$(mktemp -d) VMPID=
trap 'stop_target; [ -n "$VMPID" ] && kill $VMPID 2>/dev/null; rm -rf "$SHARE"' EXIT
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_auth.sh" "$SHARE/"
PORT=$(free_port) GPORT=$(free_port)
NQN=nqn.2026-12.io.gdx:interop-auth KNQN=nqn.2026-12.io.gdx:kernel-auth
# the kernel host's NQN (the guest's /etc/nvme/hostnqn changes at every boot) and gdx's
KHOST=nqn.2014-08.org.nvmexpress:uuid:a1d3c0de-0000-4000-8000-00000000c0de
GHOST=nqn.2014-08.org.nvmexpress:uuid:a1d3c0de-0000-4000-8000-00000000beef
export GDX_NVMF_HOST_KATO_MS=15000 GDX_NVMF_HOST_CONNECT_TIMEOUT_MS=30000	# TCG is slow
# secrets as `nvme gen-dhchap-key` writes them: 32/48/64-byte keys, each transformation
gen() {
  python3 - "$1" "$2" <<'PY'
import base64, os, struct, sys, zlib
k = os.urandom(int(sys.argv[1]))
print("DHHC-1:%02d:%s:" % (int(sys.argv[2]), base64.b64encode(k + struct.pack("<I", zlib.crc32(k))).decode()))
PY
}
gen 32 1 >"$SHARE/khost.key"; gen 48 0 >"$SHARE/kctrl.key"
gen 64 3 >"$SHARE/ghost.key"; gen 32 2 >"$SHARE/gctrl.key"; gen 32 1 >"$SHARE/wrong.key"
start_target "$SHARE/target.log" -l 127.0.0.1:$PORT -n $NQN -N ram:32M -H $KHOST \
  --dhchap-key "$SHARE/khost.key" --dhchap-ctrl-key "$SHARE/kctrl.key" \
  --dhchap-hash "hmac(sha384),hmac(sha256),hmac(sha512)" --dhchap-dhgroup ffdhe2048,null -v || exit 1
VM_SHARE=$SHARE VM_GUESTFWD=$PORT VM_HOSTFWD="tcp:127.0.0.1:$GPORT-:4420" \
  "$VM" run "$SHARE/g_auth.sh" "$PORT" "$NQN" "$KHOST" "$KNQN" "$GHOST" >"$SHARE/vm.log" 2>&1 &
VMPID=$!
wait_flag() {
  local i
  for i in $(seq $((${2:-400} * 10))); do
    [ -e "$SHARE/$1" ] && return 0
    kill -0 $VMPID 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
fails=0
check() { local d=$1; shift; if "$@"; then echo "  ok: $d"; else echo "  FAILED: $d"; fails=$((fails + 1)); fi; }
refused() { ! "$@" >"$SHARE/refused.out" 2>&1; }
G=("$GDX" nvmf) A=(-a 127.0.0.1 -s "$GPORT" -n "$KNQN" -q "$GHOST")
S=(-S "$SHARE/ghost.key") C=(-C "$SHARE/gctrl.key")
head -c 1M /dev/urandom >"$SHARE/g.src"
if wait_flag nvmet.ready; then
  out=$("${G[@]}" id-ctrl "${A[@]}" "${S[@]}" --json 2>&1); echo "  $out" | head -c 400; echo
  check "gdx host authenticates to nvmet (unidirectional)" grep -q '"mn": "Linux"' <<<"$out"
  check "gdx host authenticates nvmet too (bidirectional), writes 1 MiB" \
    "${G[@]}" write "${A[@]}" "${S[@]}" "${C[@]}" -l 1M --from "$SHARE/g.src"
  check "gdx host reads it back over 2 authenticated I/O queues" \
    "${G[@]}" read "${A[@]}" "${S[@]}" "${C[@]}" -l 1M --queues 2 --to "$SHARE/g.back"
  check "  same bytes" cmp "$SHARE/g.src" "$SHARE/g.back"
  check "nvmet refuses a wrong secret" refused "${G[@]}" id-ctrl "${A[@]}" -S "$SHARE/wrong.key"
  check "nvmet refuses a host without a secret" refused "${G[@]}" id-ctrl "${A[@]}"
  check "gdx refuses nvmet proving another controller secret" \
    refused "${G[@]}" id-ctrl "${A[@]}" "${S[@]}" -C "$SHARE/wrong.key"
else
  echo "  FAILED: the guest's nvmet never became ready"; fails=$((fails + 1))
fi
touch "$SHARE/host.done"
wait $VMPID; vrc=$?; VMPID=
stop_target
sed 's/^/  guest: /' "$SHARE/vm.log" | tail -80
grep -E 'authenticat|connect' "$SHARE/target.log" | head -20 | sed 's/^/  target: /'
check "the kernel host re-authenticated the admin and I/O queues" \
  bash -c '[ "$(grep -c "qid [0-9]* re-authenticated" "$1")" -ge 2 ]' _ "$SHARE/target.log"
for k in khost kctrl ghost gctrl wrong; do
  check "the target's log holds no $k secret" bash -c '! grep -qF "$(cut -d: -f3 "$1")" "$2"' _ \
    "$SHARE/$k.key" "$SHARE/target.log"
done
[ $fails = 0 ] && [ $vrc = 0 ]
