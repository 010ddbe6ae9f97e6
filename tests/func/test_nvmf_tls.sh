#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# NVMe/TCP over TLS 1.3 between the gdx host and the gdx target on loopback: the
# ports' addr_tsas/addr_treq and tls_key in the JSON config (and its errors), the
# discovery log's TREQ and SECTYPE, a clear host refused where TLS is required and
# served where it is not, a wrong key refused, a stalled handshake closed after
# nvmf.target.handshake_timeout_ms, the host's --tls/--tls-key usage; hosts with
# PSKs of their own (a host entry's tls_key, --allow-host NQN,tls-key=KEY): each
# gets in with its own key only, other hosts with the port's key if it has one.  With
# the right key the data goes byte-exact with digests, by kTLS where this kernel has
# it (the tls module), else by gdx's record relay, said once per process;
# tls.record=kernel without kTLS refused; a peer reset mid-record, or a record
# altered on the way, ends that connection only, and both sides say why.
# (tests/interop/t_tls.sh runs the kTLS path in a guest whose kernel has it, and the
# relay against the kernel host.)
set -u
gdx=$(realpath "${1:?usage: test_nvmf_tls.sh path/to/gdx}") || exit 1
tmp=$(mktemp -d)
tpid=
trap '[ -n "$tpid" ] && kill $tpid 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
NQN=nqn.2026-11.io.gdx:tls
key() { python3 -c 'import base64,os,sys,zlib;k=os.urandom(int(sys.argv[1]));print("NVMeTLSkey-1:0%s:"%sys.argv[2]+base64.b64encode(k+zlib.crc32(k).to_bytes(4,"little")).decode()+":")' "$@"; }
KEY=$(key 32 1) BAD=$(key 32 1) KEY384=$(key 48 2)
echo "$KEY" >"$tmp/key"

# config: port 1 requires TLS (key inline), port 2 allows it (key file)
cfg() {
  cat <<JSON
{ "hosts": [], "subsystems": [ { "nqn": "$NQN", "attr": { "allow_any_host": "1" },
    "namespaces": [ { "nsid": 1, "enable": 1, "device": { "path": "ram:16M" } } ] } ],
  "ports": [
    { "portid": 1, "addr": { "trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "0",
        "treq": "required", "tsas": "tls1.3" }, "tls_key": "$1", "subsystems": [ "$NQN" ] },
    { "portid": 2, "addr": { "trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "0",
        "treq": "not required", "tsas": "tls1.3" }, "tls_key": "$tmp/key", "subsystems": [ "$NQN" ] } ] }
JSON
}
bad_cfg() {  # what: sed expression on a good config; want: words in the error
  cfg "$KEY" | sed "$1" >"$tmp/bad.json"
  out=$(timeout 10 "$gdx" nvmf target -c "$tmp/bad.json" 2>&1)
  [ $? != 0 ] && grep -q "$2" <<<"$out" || fail "config ($1) should fail with '$2': $out"
}
bad_cfg 's/"tsas": "tls1.3" }, "tls_key": "[^"]*",/"tsas": "tls1.3" },/' "no tls_key"
bad_cfg 's/"treq": "required"/"treq": "maybe"/' "is not 'not specified'"
bad_cfg 's/"tsas": "tls1.3" }, "tls_key"/"tsas": "tls1.2" }, "tls_key"/' "is not none or tls1.3"
bad_cfg 's/"tsas": "tls1.3" }, "tls_key"/"tsas": "none" }, "tls_key"/' "tls_key without tsas"
# a key whose CRC-32 is not its key's
BADCRC=$(python3 -c 'import base64,os;print("NVMeTLSkey-1:01:"+base64.b64encode(os.urandom(32)+b"\0\0\0\0").decode()+":")')
bad_cfg "s|$KEY|$BADCRC|" "CRC-32 does not match"

cfg "$KEY" >"$tmp/tls.json"
GDX_NVMF_TARGET_HANDSHAKE_TIMEOUT_MS=1000 "$gdx" nvmf target -c "$tmp/tls.json" -v \
  >"$tmp/target.log" 2>&1 &
tpid=$!
for i in $(seq 200); do grep -q 'target: ready' "$tmp/target.log" && break; sleep 0.05; done
ports=($(grep -o 'listening on 127.0.0.1:[0-9]*' "$tmp/target.log" | cut -d: -f2))
[ ${#ports[@]} = 2 ] || { cat "$tmp/target.log"; echo "FAIL: the target did not start"; exit 1; }
R=(-a 127.0.0.1 -s "${ports[0]}" -n $NQN) O=(-a 127.0.0.1 -s "${ports[1]}" -n $NQN)

# rc expected, then the arguments; stdout in $out, stderr in $err
run() {
  local want=$1 got
  shift
  out=$("$gdx" nvmf "$@" 2>"$tmp/err")
  got=$?
  err=$(cat "$tmp/err")
  [ "$got" = "$want" ] || fail "gdx nvmf $* exited $got, want $want: $err"
}

run 0 discover -a 127.0.0.1 -s "${ports[1]}" --json
# TREQ: required (1) or not required (2), with SQ flow control off (4); SECTYPE TLS 1.3 (2)
grep -q '"treq": 5, "portid": 1, "cntlid": [0-9]*, "asqsz": [0-9]*, "sectype": 2' <<<"$out" ||
  fail "discovery: port 1 should say TLS required, TLS 1.3: $out"
grep -q '"treq": 6, "portid": 2, "cntlid": [0-9]*, "asqsz": [0-9]*, "sectype": 2' <<<"$out" ||
  fail "discovery: port 2 should say TLS not required, TLS 1.3: $out"

run 0 id-ctrl "${O[@]}"		# TLS allowed, not required: a clear host is served
run 1 id-ctrl "${R[@]}"		# required: a clear host is refused
grep -q "no TLS handshake on a port that requires TLS" "$tmp/target.log" ||
  fail "the target should say why it refused the clear host"
run 1 id-ctrl "${R[@]}" --tls --tls-key "$BAD"
grep -q "Key was rejected" <<<"$err" || fail "a wrong key: $err"
run 1 id-ctrl "${R[@]}" --tls --tls-key "$KEY384"	# a SHA-384 key for a SHA-256 port
grep -q "Key was rejected" <<<"$err" || fail "a key of another hash: $err"
run 2 id-ctrl "${R[@]}" --tls
run 2 id-ctrl "${R[@]}" --tls-key "$KEY"
run 1 id-ctrl "${R[@]}" --tls --tls-key "NVMeTLSkey-1:01:short:"
grep -q "interchange format" <<<"$err" || fail "a malformed key: $err"

# the right key: byte-exact with digests, by kTLS where this kernel has it, else by
# the record relay (the host's and the target's), said once per process
head -c 1M /dev/urandom >"$tmp/a"
run 0 write "${R[@]}" --tls --tls-key "$KEY" --hdr-digest --data-digest -l 1M --from "$tmp/a"
GDX_LOG_LEVEL=info run 0 read "${R[@]}" --tls --tls-key "$tmp/key" --hdr-digest --data-digest \
  --queues 2 -l 1M --to "$tmp/b"
said=$err
cmp -s "$tmp/a" "$tmp/b" || fail "what was read over TLS differs from what was written"
run 0 read "${O[@]}" --tls --tls-key "$KEY" -l 1M --to "$tmp/c"	# allowed: TLS taken too
cmp -s "$tmp/a" "$tmp/c" || fail "TLS on the not-required port: data differs"
if ! grep -qw tls /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null && ! modprobe -q tls 2>/dev/null
then
  [ "$(grep -c 'TLS records in userspace: the kernel has no kTLS' <<<"$said")" = 1 ] ||
    fail "no kTLS: the host (3 queues) should say once that it makes the records: $said"
  [ "$(grep -c 'TLS records in userspace: the kernel has no kTLS' "$tmp/target.log")" = 1 ] ||
    fail "no kTLS: the target should say once that it makes the records"
  GDX_TLS_RECORD=kernel run 1 id-ctrl "${R[@]}" --tls --tls-key "$KEY"
  grep -q "kernel TLS is not available .* tls.record is kernel" <<<"$err" ||
    fail "tls.record=kernel without kTLS: the host should refuse and say so: $err"
fi

# a proxy between the host and the target passes the handshake and the host's first
# records, then (cut) half of the next and a RST each way, or (flip) the next with
# one byte changed; the target says which, the host fails at once, and the target
# serves the next host
tamper() {  # cut|flip
  python3 - "$1" "${ports[0]}" "$gdx" "$KEY" "${R[@]}" <<'PY' >"$tmp/$1.out" 2>&1 || fail "$1: $(cat "$tmp/$1.out")"
import socket, struct, subprocess, sys, threading
how, port, gdx, key, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
lst = socket.create_server(("127.0.0.1", 0))
args[args.index("-s") + 1] = str(lst.getsockname()[1])
def proxy():
    h, _ = lst.accept()
    t = socket.create_connection(("127.0.0.1", port))
    def back():				# target -> host, as it comes
        try:
            while d := t.recv(65536):
                h.sendall(d)
        except OSError:
            pass
    threading.Thread(target=back, daemon=True).start()
    seen = 0				# host -> target: whole records, the handshake's and 4 more
    while True:
        hdr = h.recv(5, socket.MSG_WAITALL)
        body = h.recv(struct.unpack(">H", hdr[3:5])[0], socket.MSG_WAITALL)
        seen += hdr[0] == 0x17
        if seen == 5 and how == "flip":
            t.sendall(hdr + body[:-20] + bytes([body[-20] ^ 1]) + body[-19:])
            while d := h.recv(65536):	# and on as it comes, till someone closes
                t.sendall(d)
            return
        if seen == 5:
            t.sendall(hdr + body[:len(body) // 2])
            break
        t.sendall(hdr + body)
    for s in (h, t):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
threading.Thread(target=proxy, daemon=True).start()
p = subprocess.run([gdx, "nvmf", "read", *args, "--tls", "--tls-key", key, "-l", "1M",
                    "--to", "/dev/null"], capture_output=True, text=True, timeout=20,
                   env=dict(__import__("os").environ, GDX_LOG_LEVEL="info"))
print(p.stderr)
sys.exit(0 if p.returncode == 1 else f"the host exited {p.returncode}")
PY
}
# want in the target's log (within 5 s), then in the host's
tampered() {
  for i in $(seq 100); do grep -q "$2" "$tmp/target.log" && break; sleep 0.05; done
  grep -q "$2" "$tmp/target.log" || fail "$1: the target should say '$2'; the host: $(cat "$tmp/$1.out")"
  grep -q "$3" "$tmp/$1.out" || fail "$1: the host should say '$3': $(cat "$tmp/$1.out")"
  run 0 id-ctrl "${R[@]}" --tls --tls-key "$KEY"
}
tamper cut
tampered cut "connection ends: Connection reset by peer" "Connection reset by peer"
tamper flip
tampered flip "connection ends: TLS record layer: .*bad record mac" \
  "connection ends: TLS record layer: .*alert bad record mac"

# a client that starts a handshake and stalls is closed after the handshake timeout
python3 - "${ports[0]}" <<'PY' || fail "a stalled TLS handshake was not closed within 4 s"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"\x16\x03\x01")		# the start of a record header, then nothing
s.settimeout(4)
try:
    sys.exit(0 if s.recv(1) == b"" else 1)
except ConnectionResetError:
    sys.exit(0)
except socket.timeout:
    sys.exit(1)
PY
grep -q "no TLS handshake, ICReq and Connect within 1000 ms" "$tmp/target.log" ||
  fail "the target should name the handshake timeout"

kill $tpid; wait $tpid 2>/dev/null; tpid=

# ---- PSKs per host ---------------------------------------------------------------------
# A handshake the target accepts carries the command (kTLS, or gdx's records where the
# kernel has none); one it refuses ends in "Key was rejected".
HA=nqn.2026-11.io.gdx:host-a HB=nqn.2026-11.io.gdx:host-b HC=nqn.2026-11.io.gdx:host-c
HD=nqn.2026-11.io.gdx:host-d
KA=$(key 32 1) KB=$(key 32 1) KC=$(key 48 2) KD=$(key 32 1)
echo "$KB" >"$tmp/kb"
accepted() {  # what, then gdx nvmf arguments
  local what=$1; shift
  run 0 "$@"
}
refused() {
  local what=$1; shift
  run 1 "$@"; grep -q "Key was rejected" <<<"$err" || fail "$what should be refused: $err"
}
start() {  # the target with these arguments; its TCP ports in ${ports[@]}
  rm -f "$tmp/target.log"	# not the last target's "ready" before this one's shell truncates it
  "$gdx" nvmf target "$@" -v >"$tmp/target.log" 2>&1 &
  tpid=$!
  for i in $(seq 200); do grep -qs 'target: ready' "$tmp/target.log" && break; sleep 0.05; done
  ports=($(grep -o 'listening on 127.0.0.1:[0-9]*' "$tmp/target.log" | cut -d: -f2))
}
# port 1: TLS with the hosts' keys only; port 2: and KD for hosts without their own
cat >"$tmp/hosts.json" <<JSON
{ "hosts": [ { "nqn": "$HA", "tls_key": "$KA" }, { "nqn": "$HB", "tls_key": "$tmp/kb" },
             { "nqn": "$HC", "dhchap_key": "", "tls_key": "$KC" } ],
  "subsystems": [ { "nqn": "$NQN", "attr": { "allow_any_host": "1" },
    "namespaces": [ { "nsid": 1, "enable": 1, "device": { "path": "ram:16M" } } ] } ],
  "ports": [
    { "portid": 1, "addr": { "trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "0",
        "treq": "required", "tsas": "tls1.3" }, "subsystems": [ "$NQN" ] },
    { "portid": 2, "addr": { "trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "0",
        "treq": "required", "tsas": "tls1.3" }, "tls_key": "$KD", "subsystems": [ "$NQN" ] } ] }
JSON
sed "s|\"tls_key\": \"$KA\"|\"tls_key\": \"$BADCRC\"|" "$tmp/hosts.json" >"$tmp/bad.json"
out=$(timeout 10 "$gdx" nvmf target -c "$tmp/bad.json" 2>&1)
[ $? != 0 ] && grep -q "hosts\[0\]: its tls_key is not valid" <<<"$out" &&
  grep -q "CRC-32 does not match" <<<"$out" || fail "a host's bad tls_key: $out"
grep -q "$BADCRC" <<<"$out" && fail "the target logged a host's TLS key"
start -c "$tmp/hosts.json"
[ ${#ports[@]} = 2 ] || { cat "$tmp/target.log"; fail "the per-host target did not start"; }
P1=(id-ctrl -a 127.0.0.1 -s "${ports[0]}" -n $NQN --tls) P2=(id-ctrl -a 127.0.0.1 -s "${ports[1]}" -n $NQN --tls)
accepted "host A with its key" "${P1[@]}" -q $HA --tls-key "$KA"
accepted "host B with its key (a file on the target)" "${P1[@]}" -q $HB --tls-key "$tmp/kb"
accepted "host C with its SHA-384 key beside SHA-256 ones" "${P1[@]}" -q $HC --tls-key "$KC"
refused "host A with host B's key" "${P1[@]}" -q $HA --tls-key "$KB"
refused "host B with host A's key" "${P1[@]}" -q $HB --tls-key "$KA"
refused "host A with host C's key" "${P1[@]}" -q $HA --tls-key "$KC"
refused "host D (no key of its own, no port key) with A's key" "${P1[@]}" -q $HD --tls-key "$KA"
refused "host D with the other port's key" "${P1[@]}" -q $HD --tls-key "$KD"
grep -q "no PSK for identity NVMe0R01 $HD $NQN" "$tmp/target.log" ||
  fail "the target should name the identity it has no PSK for"
accepted "host D with the port's key" "${P2[@]}" -q $HD --tls-key "$KD"
refused "host A with the port's key (it has its own)" "${P2[@]}" -q $HA --tls-key "$KD"
accepted "host A with its own key on the port with a default" "${P2[@]}" -q $HA --tls-key "$KA"
for k in "$KA" "$KB" "$KC" "$KD"; do
  grep -q "${k:16:20}" "$tmp/target.log" && fail "the target logged a key"
done
kill $tpid; wait $tpid 2>/dev/null; tpid=

# quick flags: -H NQN,tls-key=KEY; without --tls the ports require TLS, hosts' keys only
start -l 127.0.0.1:0 -n $NQN -N ram:16M -H "$HA,tls-key=$KA" -H "$HB,tls-key=$tmp/kb" -H $HD
[ ${#ports[@]} = 1 ] || { cat "$tmp/target.log"; fail "the quick-flag target did not start"; }
P1=(id-ctrl -a 127.0.0.1 -s "${ports[0]}" -n $NQN --tls)
accepted "quick flags: host A with its key" "${P1[@]}" -q $HA --tls-key "$KA"
accepted "quick flags: host B with its key file" "${P1[@]}" -q $HB --tls-key "$KB"
refused "quick flags: host B with A's key" "${P1[@]}" -q $HB --tls-key "$KA"
refused "quick flags: host D, no key anywhere" "${P1[@]}" -q $HD --tls-key "$KA"
run 1 id-ctrl -a 127.0.0.1 -s "${ports[0]}" -n $NQN -q $HA
grep -q "no TLS handshake on a port that requires TLS" "$tmp/target.log" ||
  fail "quick flags: a host's tls-key should make the port require TLS"
kill $tpid; wait $tpid 2>/dev/null; tpid=
out=$(timeout 10 "$gdx" nvmf target -l 127.0.0.1:0 -n $NQN -N ram:1M -H "$HA,tls-key=NVMeTLSkey-1:01:x:" 2>&1)
[ $? = 2 ] && grep -q "interchange format" <<<"$out" || fail "quick flags: a malformed tls-key: $out"

[ $fails = 0 ] || { echo "--- target log"; tail -30 "$tmp/target.log"; }
echo "$fails failure(s)"
[ $fails = 0 ]
