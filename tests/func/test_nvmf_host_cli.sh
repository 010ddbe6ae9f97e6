#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The host subcommands of `gdx nvmf` against the gdx target on loopback: discover,
# id-ctrl and id-ns (text and JSON), write and read back through host, pinned and
# device memory (with digests), and the exit codes of bad usage (2) and of a
# refused I/O (1).
set -u
gdx=$(realpath "${1:?usage: test_nvmf_host_cli.sh path/to/gdx}") || exit 1
tmp=$(mktemp -d)
tpid=
apid=
trap '[ -n "$tpid" ] && kill $tpid 2>/dev/null; [ -n "$apid" ] && kill $apid 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
NQN=nqn.2026-11.io.gdx:cli

# The target's numeric options refuse what is not a number in range (usage: 2).
for bad in "--poll-us -1" "--poll-us x" "-r 5000" "--inline 12abc" "--inline 2M" "--inline -1" \
	   "--stats-interval -5"; do
	# shellcheck disable=SC2086
	timeout 10 "$gdx" nvmf target -l 127.0.0.1:0 -n $NQN -N null:1G $bad >/dev/null 2>&1
	[ $? = 2 ] || fail "target $bad should be 2"
done

"$gdx" nvmf target -l 127.0.0.1:0 -n $NQN -N ram:16M,bs=4096 --inline 8k -v >"$tmp/target.log" 2>&1 &
tpid=$!
for i in $(seq 200); do grep -q 'target: ready' "$tmp/target.log" && break; sleep 0.05; done
port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$tmp/target.log" | head -1 | cut -d: -f2)
[ -n "$port" ] || { cat "$tmp/target.log"; echo "FAIL: the target did not start"; exit 1; }
A=(-a 127.0.0.1 -s "$port" -n $NQN)

# rc expected, then the arguments; stdout lands in $out
run() {
  local want=$1 got
  shift
  out=$("$gdx" nvmf "$@" 2>"$tmp/err")
  got=$?
  [ "$got" = "$want" ] || fail "gdx nvmf $* exited $got, want $want: $(cat "$tmp/err")"
}

run 0 discover -a 127.0.0.1 -s "$port" --json
grep -q "\"subnqn\": \"$NQN\"" <<<"$out" || fail "discover --json lacks $NQN: $out"
run 0 discover -a 127.0.0.1 -s "$port"
grep -q "subnqn:  $NQN" <<<"$out" || fail "discover text lacks $NQN: $out"
run 0 id-ctrl "${A[@]}" --json
# --inline 8k: 8 KiB of in-capsule data and the 64-byte SQE, in 16-byte units
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["subnqn"] == sys.argv[2] and d["io_queues"] >= 1 and d["ioccsz"] == (8192 + 64) // 16' \
  "$out" $NQN || fail "id-ctrl --json: $out"
run 0 id-ns "${A[@]}" --json
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["block_size"] == 4096 and d["bytes"] == 16 << 20' \
  "$out" || fail "id-ns --json: $out"

head -c 4M /dev/urandom >"$tmp/src"
for mem in host pinned gpu:0; do
  run 0 write "${A[@]}" -o 4M -l 4M -m $mem --from "$tmp/src" --json
  grep -q '"path": "'"$([ $mem = gpu:0 ] && echo bounce || echo direct)"'"' <<<"$out" ||
    fail "write from $mem: path: $out"
  run 0 read "${A[@]}" -o 4M -l 4M -m $mem --hdr-digest --data-digest --to "$tmp/out.$mem"
  cmp -s "$tmp/src" "$tmp/out.$mem" || fail "read back into $mem differs"
done
run 0 write "${A[@]}" -l 64k --from pattern:5
run 0 read "${A[@]}" -l 64k --json
crc=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["crc32c"])' "$out")
run 0 write "${A[@]}" -l 64k --from pattern:5 --json
[ "$crc" = "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["crc32c"])' "$out")" ] ||
  fail "pattern read back has another crc32c"

run 2 read
run 2 read -a 127.0.0.1 -s "$port"
run 2 write "${A[@]}" -l 4k
run 2 frobnicate
run 1 read "${A[@]}" -o 100 -l 4k
run 1 read "${A[@]}" -o 16M -l 4k
run 1 read "${A[@]}" -N 9 -l 4k
run 1 id-ctrl -a 127.0.0.1 -s "$port" -n nqn.2026-11.io.gdx:nope

# DH-HMAC-CHAP: a second target whose host must authenticate (keys from files, as
# nvme gen-dhchap-key prints them), bidirectionally; the wrong secret, none, and a
# secret on the command line; the secrets never reach a log.
HOST=nqn.2014-08.org.nvmexpress:uuid:7b9e0a11-2c44-4d0e-9f3a-6a5b4c3d2e1f
echo "DHHC-1:01:3ju8QJG7RJmn4XfbBT8bWRGDQ1k/wnPNutMfaYVfhpXjMm6V:" >"$tmp/key"
echo "DHHC-1:00:Bm3372cHbvuR5Wh/wsgy5yJMcg0Wt1SJcHFrUQ4S6Nd366lv:" >"$tmp/ckey"
WRONG="DHHC-1:00:JhRWoIisahVYgkI7glpgSCkP/9/09tWHtEju1IuRE0UISPaN:"
timeout 10 "$gdx" nvmf target -l 127.0.0.1:0 -n $NQN -N null:1G --dhchap-key "$tmp/key" \
	>/dev/null 2>&1
[ $? = 2 ] || fail "target --dhchap-key without --allow-host should be 2"
timeout 10 "$gdx" nvmf target -l 127.0.0.1:0 -n $NQN -N null:1G -H $HOST --dhchap-key "$tmp/key" \
	--dhchap-hash md5 >/dev/null 2>&1
[ $? = 2 ] || fail "target --dhchap-hash md5 should be 2"
"$gdx" nvmf target -l 127.0.0.1:0 -n $NQN -N ram:1M -H $HOST --dhchap-key "$tmp/key" \
	--dhchap-ctrl-key "$tmp/ckey" --dhchap-dhgroup ffdhe2048 -v >"$tmp/auth.log" 2>&1 &
apid=$!
for i in $(seq 200); do grep -q 'target: ready' "$tmp/auth.log" && break; sleep 0.05; done
aport=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$tmp/auth.log" | head -1 | cut -d: -f2)
if [ -z "$aport" ]; then
	fail "the authenticating target did not start: $(cat "$tmp/auth.log")"
else
	B=(-a 127.0.0.1 -s "$aport" -n $NQN -q $HOST)
	run 0 id-ctrl "${B[@]}" -S "$tmp/key" --json
	run 0 write "${B[@]}" -l 4k --from pattern:3 -S "$tmp/key" --dhchap-ctrl-secret "$tmp/ckey"
	run 0 read "${B[@]}" -l 4k --dhchap-secret "$(cat "$tmp/key")" -C "$tmp/ckey"
	run 1 id-ctrl "${B[@]}" -S "$WRONG"
	grep -q 'authentication failed: check -S/-C' "$tmp/err" || fail "no hint: $(cat "$tmp/err")"
	run 1 id-ctrl "${B[@]}"
	run 1 id-ctrl "${B[@]}" -S "$tmp/key" -C "$WRONG"
	run 2 id-ctrl "${B[@]}" -S "$tmp/nonexistent"
	# malformed: refused by the library before anything is sent
	run 1 id-ctrl "${B[@]}" -S "DHHC-1:01:short"
	grep -q 'secret is not DHHC-1' "$tmp/err" || fail "a malformed secret: $(cat "$tmp/err")"
	echo "$WRONG" | cut -c1-20 >"$tmp/badkey"
	run 1 id-ctrl "${B[@]}" -S "$tmp/badkey"
	kill $apid
	wait $apid 2>/dev/null
	for k in "$(cut -d: -f3 "$tmp/key")" "$(cut -d: -f3 "$tmp/ckey")" "$(cut -d: -f3 <<<"$WRONG")"; do
		! grep -qF "$k" "$tmp/auth.log" "$tmp/err" || fail "a secret reached a log"
	done
	grep -q 'authentication failed' "$tmp/auth.log" || fail "the target logged no refusal"
fi

# The benchmark end to end into device memory, pricing the device calls first
# (tiny durations: the figures are not checked, the lines are).
out=$("$gdx" bench nvmf-host "${A[@]}" -m gpu:0 --queues 2 --qd 4 --bw-bs 16k --bw-qd 2 \
	-t 0.05 -r 1 --no-tcp --dev-calls --json 2>"$tmp/err")
[ $? = 0 ] || fail "bench nvmf-host --dev-calls: $(cat "$tmp/err")"
for call in copy-4k word-store event-record event-query pointer-lookup; do
	echo "$out" | grep -q "\"test\": \"dev-call\", \"mem\": \"gpu:0\", \"call\": \"$call\", \"threads\": 2" ||
		fail "bench nvmf-host --dev-calls priced no $call: $out"
done
echo "$out" | grep -q '"test": "4k-randread", "mem": "gpu:0", "qd": 4' ||
	fail "bench nvmf-host --dev-calls measured no reads: $out"
# buffers at an odd offset of their allocation (a tensor's slice), and a bad one refused
out=$("$gdx" bench nvmf-host "${A[@]}" -m gpu:0+3,host+1 --queues 2 --qd 4 --bw-bs 16k --bw-qd 2 \
	-t 0.05 -r 1 --no-tcp --json 2>"$tmp/err")
[ $? = 0 ] || fail "bench nvmf-host -m gpu:0+3: $(cat "$tmp/err")"
for m in gpu:0+3 host+1; do
	echo "$out" | grep -q "\"test\": \"bw-randread\", \"mem\": \"$m\"" ||
		fail "bench nvmf-host -m $m measured nothing: $out"
done
"$gdx" bench nvmf-host "${A[@]}" -m gpu:0+4096 >/dev/null 2>"$tmp/err"
[ $? = 2 ] && grep -q "^gdx bench nvmf-host: --mem 'gpu:0+4096': want host, pinned or gpu:N" \
	"$tmp/err" || fail "bench nvmf-host -m gpu:0+4096: $(cat "$tmp/err")"
# the reads' stages, timed by the queues: present, and none negative
echo "$out" | python3 -c '
import json, sys
names = ["sent", "data", "post", "land", "queue", "cb", "total", "little"]
for l in sys.stdin:
	j = json.loads(l)
	if j.get("test") not in ("4k-randread", "bw-randread"):
		continue
	assert j["lat_reads"] > 0, l
	for k in names:
		assert j["lat_%s_us" % k] >= 0, (k, l)
	assert j["lat_data_us"] > 0, l
	assert j["reads_per_release"] >= 1, l
' || fail "bench nvmf-host: no read stages: $out"
# Each row says the path its reads took: host memory straight from the socket,
# device memory through the bounce ring (TCP); with GDX_REQUIRE_DIRECT=1 the bounce
# is refused and the run fails saying so, not with a bare I/O error.
out=$("$gdx" bench nvmf-host "${A[@]}" -m host,gpu:0 --queues 2 --qd 4 --bw-bs 16k --bw-qd 2 \
	-t 0.05 -r 1 --no-tcp --json 2>"$tmp/err")
[ $? = 0 ] || fail "bench nvmf-host -m host,gpu:0: $(cat "$tmp/err")"
[ "$(grep -c '"mem": "host", .*"transport": "tcp", "path": "direct"' <<<"$out")" = 2 ] ||
	fail "bench nvmf-host: host rows without path direct: $out"
[ "$(grep -c '"mem": "gpu:0", .*"transport": "tcp", "path": "bounce"' <<<"$out")" = 2 ] ||
	fail "bench nvmf-host: gpu rows without path bounce: $out"
GDX_REQUIRE_DIRECT=1 "$gdx" bench nvmf-host "${A[@]}" -m gpu:0 --queues 2 --qd 4 --bw-qd 2 \
	-t 0.05 -r 1 --no-tcp --json >/dev/null 2>"$tmp/err"
[ $? = 1 ] || fail "bench nvmf-host with GDX_REQUIRE_DIRECT=1 into device memory over TCP ran"
grep -q '^gdx bench nvmf-host: gpu:0 4k-randread qd 4: direct path unavailable' "$tmp/err" ||
	fail "bench nvmf-host with GDX_REQUIRE_DIRECT=1 did not say the path was refused: $(cat "$tmp/err")"
# The bandwidth test writes with --bw-write, from host and device memory (last: it
# overwrites the namespace), and reads nothing.
out=$("$gdx" bench nvmf-host "${A[@]}" -m host,gpu:0 --queues 2 --qd none --bw-bs 16k --bw-qd 2 \
	-t 0.05 -r 1 --no-tcp --bw-write --json 2>"$tmp/err")
[ $? = 0 ] || fail "bench nvmf-host --bw-write: $(cat "$tmp/err")"
for m in host gpu:0; do
	grep -q "\"test\": \"bw-randwrite\", \"mem\": \"$m\", \"qd\": 2" <<<"$out" ||
		fail "bench nvmf-host --bw-write: no write row for $m: $out"
done
! grep -q '"test": "bw-randread"' <<<"$out" || fail "bench nvmf-host --bw-write read: $out"
exit $((fails > 0))
