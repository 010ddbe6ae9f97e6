#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What `gdx nvmf` says when something is wrong (issue 22): each case runs the
# binary and compares its exit status and stderr.  NVMe statuses are named as
# nvme-cli names them, system errors name their object, bad values are refused
# with the value named, every subcommand's --help lists only its own options,
# -n given twice puts each --ns / --allow-host on the subsystem named before it,
# a long transfer streams through a bounded window and a lost connection is
# reported as it happens.
set -u
gdx=$(realpath "${1:?usage: test_nvmf_cli_errors.sh path/to/gdx}") || exit 1
tmp=$(mktemp -d)
tpid=
rpid=
trap '[ -n "$tpid" ] && kill $tpid 2>/dev/null; [ -n "$rpid" ] && kill $rpid 2>/dev/null;
      wait 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
NQN=nqn.2026-11.io.gdx:errors
NQN2=nqn.2026-11.io.gdx:open
HOST_OK=nqn.2026-11.io.gdx:host-ok
HOST_BAD=nqn.2026-11.io.gdx:host-bad

# expect RC TEXT ARGS...: `gdx ARGS` exits RC and its stderr contains TEXT
expect() {
	local want=$1 text=$2 got
	shift 2
	timeout 20 "$gdx" "$@" >"$tmp/out" 2>"$tmp/err"
	got=$?
	[ "$got" = "$want" ] || fail "gdx $* exited $got, want $want: $(cat "$tmp/err")"
	[ -z "$text" ] || grep -qF -- "$text" "$tmp/err" || fail "gdx $*: stderr lacks '$text': $(cat "$tmp/err")"
}
# start_target LOG ARGS...: a target in the background, its port in $port
start_target() {
	local log=$1
	shift
	"$gdx" nvmf target "$@" >"$log" 2>&1 &
	tpid=$!
	for _ in $(seq 200); do grep -q 'target: ready' "$log" && break; sleep 0.05; done
	port=$(grep -o 'listening on [^ ]*' "$log" | head -1 | sed 's/.*://')
	[ -n "$port" ] || { cat "$log"; echo "FAIL: the target did not start"; exit 1; }
}

# ---- the target refuses bad values, naming them (usage: 2) ----
expect 2 "--listen '127.0.0.1:99999'" nvmf target -l 127.0.0.1:99999 -n $NQN -N null:1G
expect 2 "block size 'abc' is not 512 or 4096" nvmf target -l 127.0.0.1:0 -n $NQN -N ram:1M,bs=abc
expect 2 "1000 bytes is not a multiple of the block size (512)" \
	nvmf target -l 127.0.0.1:0 -n $NQN -N ram:1000
expect 2 "'1X' is not a size" nvmf target -l 127.0.0.1:0 -n $NQN -N ram:1X
expect 2 "--reactors '0' is not a number from 1 to 256" \
	nvmf target -l 127.0.0.1:0 -n $NQN -N null:1G -r 0
# -s is the host's port; the target's counters are --stats, long only
expect 2 "unknown option '-s' (the port is part of -l ADDR:PORT" \
	nvmf target -l 127.0.0.1:0 -n $NQN -N null:1G -s 4420
expect 2 "--ns 'null:1G' needs a subsystem: put -n NQN before it" nvmf target -l 127.0.0.1:0 -N null:1G
expect 2 "gdx nvmf target: unknown option '--bogus'" nvmf target -l 127.0.0.1:0 --bogus
expect 2 "--metrics '127.0.0.1:70000'" nvmf target -l 127.0.0.1:0 --metrics 127.0.0.1:70000

# ---- nvmetcli JSON: unknown keys are errors that name the key and where it is ----
cat >"$tmp/port-typo.json" <<EOF
{"ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcdi": "4421"},
  "subsystems": []}]}
EOF
expect 1 "unknown key 'trsvcdi' in ports[0].addr" nvmf target -c "$tmp/port-typo.json"
cat >"$tmp/attr-typo.json" <<EOF
{"subsystems": [{"nqn": "$NQN", "attr": {"allow_any_hots": "1"}, "namespaces": []}]}
EOF
expect 1 "unknown key 'allow_any_hots' in subsystems[0].attr" nvmf target -c "$tmp/attr-typo.json"
cat >"$tmp/port-big.json" <<EOF
{"ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "99999"}}]}
EOF
expect 1 "trsvcid '99999' is not a port number" nvmf target -c "$tmp/port-big.json"

# ---- help: each subcommand lists its own options only ----
"$gdx" nvmf discover --help >"$tmp/help" || fail "discover --help exited $?"
grep -qE -- '--from|--to|--offset|--length|--nqn' "$tmp/help" && fail "discover --help: $(cat "$tmp/help")"
grep -qF -- '--trsvcid' "$tmp/help" || fail "discover --help lacks --trsvcid"
"$gdx" nvmf read --help >"$tmp/help" || fail "read --help exited $?"
grep -qF -- '--from' "$tmp/help" && fail "read --help lists --from"
grep -qF -- '-N, --namespace-id' "$tmp/help" || fail "read --help lacks -N, --namespace-id"
"$gdx" nvmf write --help >"$tmp/help" || fail "write --help exited $?"
grep -qF -- '--to ' "$tmp/help" && fail "write --help lists --to"

# ---- two subsystems: the allow-list lands on the one named before it ----
start_target "$tmp/target.log" -l localhost:0 -n $NQN -H $HOST_OK -N ram:16M,bs=4096 \
	-n $NQN2 -N ram:1M
grep -q 'localhost is 127.0.0.1' "$tmp/target.log" || fail "localhost listen: $(cat "$tmp/target.log")"
A=(-a 127.0.0.1 -s "$port" -n $NQN -q $HOST_OK)
expect 0 "" nvmf id-ns -a 127.0.0.1 -s "$port" -n $NQN2 -q $HOST_BAD
expect 1 "NVMe status: Connect Invalid Host: The host is not allowed" \
	nvmf id-ns -a 127.0.0.1 -s "$port" -n $NQN -q $HOST_BAD
grep -qF '(0x184)' "$tmp/err" || fail "0x184 not named: $(cat "$tmp/err")"
expect 0 "" nvmf id-ns "${A[@]}"
grep -q '"block_size": 4096' <(timeout 20 "$gdx" nvmf id-ns "${A[@]}" --json) ||
	fail "the 4 KiB namespace is not on $NQN"

# ---- NVMe statuses by name and code, system errors with their object ----
expect 1 "NVMe status: Connect Invalid Parameters: One or more of the command parameters is invalid(0x182)" \
	nvmf read -a 127.0.0.1 -s "$port" -n nqn.2026-11.io.gdx:nope -l 4k
grep -qF 'Connection refused' "$tmp/err" && fail "a wrong NQN reads as refused: $(cat "$tmp/err")"
expect 1 "NVMe status: LBA Out of Range: The command references an LBA that exceeds the size of the namespace(0x80)" \
	nvmf read "${A[@]}" -o 16M -l 4k
expect 1 "namespace 9 is not an active namespace of $NQN" nvmf read "${A[@]}" -N 9 -l 4k
grep -qF 'No such file' "$tmp/err" && fail "a missing namespace reads as ENOENT: $(cat "$tmp/err")"
expect 1 "--offset 100 is not a multiple of the block size of namespace 1 (4096 bytes)" \
	nvmf read "${A[@]}" -o 100 -l 4k
expect 1 "--length 512 is not a multiple of the block size of namespace 1 (4096 bytes)" \
	nvmf read "${A[@]}" -l 512
expect 1 "cannot resolve address 'no-such-host.invalid'" nvmf read -a no-such-host.invalid -n $NQN -l 4k
expect 1 "connect to $NQN at 127.0.0.1:1: Connection refused" nvmf read -a 127.0.0.1 -s 1 -n $NQN -l 4k
expect 2 "port '99999' is not a number from 1 to 65535" nvmf read -a 127.0.0.1 -s 99999 -n $NQN -l 4k
expect 2 "transport 'fc' is not served (tcp or rdma)" nvmf read -t fc -a 127.0.0.1 -n $NQN -l 4k
# no RDMA device here: the connect fails and says where to look
expect 1 "are the RDMA modules loaded?" nvmf read -t rdma -a 127.0.0.1 -n $NQN -l 4k
expect 2 "gdx nvmf read: unknown option '--bogus'" nvmf read "${A[@]}" --bogus
expect 2 "gdx nvmf read: --length '4q' is not a byte count" nvmf read "${A[@]}" -l 4q
expect 2 "gdx nvmf write: --mem 'gpu:x': not host, pinned or gpu:N" \
	nvmf write "${A[@]}" -l 4k --from pattern:1 --mem gpu:x
expect 1 "try -s 4420" nvmf discover -a 127.0.0.1
expect 0 "" nvmf discover -t tcp -a 127.0.0.1 -s "$port"

# ---- --from - as --to - ----
head -c 1M /dev/urandom >"$tmp/src"
timeout 20 "$gdx" nvmf write "${A[@]}" -l 1M --from - <"$tmp/src" >/dev/null 2>"$tmp/err" ||
	fail "write --from -: $(cat "$tmp/err")"
timeout 20 "$gdx" nvmf read "${A[@]}" -l 1M --to - 2>"$tmp/err" | cmp -s - "$tmp/src" ||
	fail "read --to - after write --from - differs: $(cat "$tmp/err")"
expect 1 "stdin ended after 1048576 of the 2097152 bytes asked for" \
	nvmf write "${A[@]}" -l 2M --from - <"$tmp/src"

# ---- a long transfer holds a bounded window, whatever its length ----
kill $tpid; wait $tpid 2>/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_target "$tmp/target.log" -l 127.0.0.1:"$port" -n $NQN -N null:64G --metrics 127.0.0.1:0
mport=$(grep -o 'metrics on http://127.0.0.1:[0-9]*/metrics' "$tmp/target.log" | sed 's/.*:\([0-9]*\)\/metrics/\1/')
python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())' \
	"http://127.0.0.1:$mport/metrics" >"$tmp/metrics" 2>&1 || fail "scrape: $(cat "$tmp/metrics")"
grep -q '^# TYPE gdx_nvmf_namespace_read_bytes_total counter$' "$tmp/metrics" ||
	fail "--metrics: no namespace counters: $(head "$tmp/metrics")"
for mem in host gpu:0; do
	python3 - "$gdx" "$port" $NQN $mem <<'EOF' || fail "read of 512 MiB into $mem: RSS not bounded"
import resource, subprocess, sys
gdx, port, nqn, mem = sys.argv[1:]
r = subprocess.run([gdx, "nvmf", "read", "-a", "127.0.0.1", "-s", port, "-n", nqn, "-l", "512M",
                    "-m", mem], capture_output=True, text=True, timeout=120)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >> 10
print("read of 512 MiB into %s: exit %d, peak RSS %d MiB" % (mem, r.returncode, rss))
sys.exit(r.returncode != 0 or rss > 200)
EOF
done

# on a terminal a progress line is drawn (as gdx cp draws it), and not with --quiet
for q in "" --quiet; do
	# shellcheck disable=SC2086
	python3 -c 'import pty, sys; pty.spawn(sys.argv[1:])' "$gdx" nvmf read -a 127.0.0.1 -s "$port" \
		-n $NQN -l 64M $q >"$tmp/tty" 2>&1
	if [ -z "$q" ]; then
		grep -qE '\[#+ *\] +100\.0% +64\.00 MiB' "$tmp/tty" || fail "no progress line: $(cat "$tmp/tty")"
	else
		grep -q 'MiB ' "$tmp/tty" && fail "--quiet drew progress: $(cat "$tmp/tty")"
	fi
done

# ---- a lost connection is reported as it happens ----
GDX_NVMF_HOST_RECONNECT_DELAY_MS=200 GDX_NVMF_HOST_CTRL_LOSS_TMO_MS=20000 \
	"$gdx" nvmf read -a 127.0.0.1 -s "$port" -n $NQN -l 64G >/dev/null 2>"$tmp/rd.err" &
rpid=$!
sleep 0.5
kill -9 $tpid
wait $tpid 2>/dev/null
for _ in $(seq 40); do grep -q "127.0.0.1:$port lost; reconnecting" "$tmp/rd.err" && break; sleep 0.05; done
grep -q "connection to 127.0.0.1:$port lost; reconnecting" "$tmp/rd.err" ||
	fail "the loss was not reported: $(cat "$tmp/rd.err")"
for _ in $(seq 60); do grep -q 'still reconnecting' "$tmp/rd.err" && break; sleep 0.05; done
grep -q "still reconnecting to 127.0.0.1:$port: [0-9]* s so far" "$tmp/rd.err" ||
	fail "no line while reconnecting: $(cat "$tmp/rd.err")"
start_target "$tmp/target2.log" -l 127.0.0.1:"$port" -n $NQN -N null:64G
for _ in $(seq 300); do grep -q "reconnected to 127.0.0.1:$port after" "$tmp/rd.err" && break; sleep 0.05; done
grep -q "reconnected to 127.0.0.1:$port after" "$tmp/rd.err" ||
	fail "the reconnect was not reported: $(cat "$tmp/rd.err")"
kill $rpid 2>/dev/null
wait $rpid 2>/dev/null
rpid=
exit $((fails > 0))
