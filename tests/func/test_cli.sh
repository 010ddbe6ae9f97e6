#!/bin/sh
# SPDX-License-Identifier: MIT
# The gdx tool at the terminal: each bad input exits with its status and one
# message naming the value and what was expected (docs/cli.md).
set -u
gdx=$1
dir=$(mktemp -d "${GDX_BUILDDIR:-/tmp}/gdx_cli.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
head -c 65536 /dev/urandom >"$dir/src" || exit 1

# expect RC STDERR CMD...: the exit status, and stderr exactly.
expect() {
	want_rc=$1 want_err=$2
	shift 2
	"$@" >"$dir/out" 2>"$dir/err"; rc=$?
	[ "$rc" = "$want_rc" ] || fail "$*: exit $rc, want $want_rc: $(cat "$dir/err")"
	[ "$(cat "$dir/err")" = "$want_err" ] || fail "$*: stderr '$(cat "$dir/err")', want '$want_err'"
}

# Configuration typos stop the tool, named (not logged and ignored).
expect 1 "gdx: GDX_DEVICE='emualted': want one of auto|cuda|emulated, each optionally with :N" \
	env GDX_DEVICE=emualted "$gdx" cp "$dir/src" gpu:0
expect 1 "gdx: GDX_FILE_DEPTH='0': want an integer from 1 to 1024" \
	env GDX_FILE_DEPTH=0 "$gdx" cp "$dir/src" gpu:0
printf '{\n  "file": {"depth" 4}\n}\n' >"$dir/syntax.json"
expect 1 "gdx: GDX_CONFIG: $dir/syntax.json:2:20: object property name separator ':' expected" \
	env GDX_CONFIG="$dir/syntax.json" "$gdx" cp "$dir/src" gpu:0
printf '{"file": {"dept": 4}}\n' >"$dir/key.json"
expect 1 "gdx: GDX_CONFIG: $dir/key.json: unknown key 'file.dept' (gdx config lists the knobs)" \
	env GDX_CONFIG="$dir/key.json" "$gdx" cp "$dir/src" gpu:0
printf '{"file": {"depth": "deep"}}\n' >"$dir/value.json"
expect 1 "gdx: GDX_CONFIG: $dir/value.json: bad value \"deep\" for 'file.depth' (want an integer from 1 to 1024)" \
	env GDX_CONFIG="$dir/value.json" "$gdx" cp "$dir/src" gpu:0
env GDX_CONFIG="$dir/value.json" "$gdx" config >/dev/null 2>&1 && fail "gdx config with a bad file exits 0"
# Usage: every command's help exits 0; the version; getopt speaks as "gdx CMD".
for c in "--help" "--version" "cp --help" "config --help" "bench --help" "bench file --help" \
	"bench xport --help" "check --help"; do
	# shellcheck disable=SC2086
	"$gdx" $c >"$dir/out" 2>"$dir/err" || fail "gdx $c: exit $?: $(cat "$dir/err")"
	[ -s "$dir/out" ] || fail "gdx $c printed nothing"
done
[ "$("$gdx" --version)" = "$("$gdx" version)" ] || fail "--version and version differ"
"$gdx" --version | grep -Eq '^gdx [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version: $("$gdx" --version)"
expect 2 "gdx cp: unrecognized option '--bogus'
Try 'gdx cp --help'." "$gdx" cp --bogus a b
expect 2 "gdx bench file: option '--threads' requires an argument
Try 'gdx bench file --help'." "$gdx" bench file --file x --threads

# A bad number names the option, the value and what it takes; exit 2.
want_size="(bytes, or with k, M, G or T)"
expect 2 "gdx cp: --size '-5': want a size from 1 to 1024T $want_size" \
	"$gdx" cp gpu:0 "$dir/x" --size -5
expect 2 "gdx cp: --piece '0': want a size from 1 to 1T $want_size" \
	"$gdx" cp "$dir/src" "$dir/x" --via gpu:0 --piece 0
expect 2 "gdx cp: --via 'gpu:x': want gpu:N (N from 0 to 1024)" \
	"$gdx" cp "$dir/src" "$dir/x" --via gpu:x
expect 2 "gdx bench xport: --depth '0': want a whole number from 1 to 4096" \
	"$gdx" bench xport --depth 0
expect 2 "gdx bench xport: --secs 'fast': want seconds above 0, at most 3600" \
	"$gdx" bench xport --secs fast
expect 2 "gdx bench xport: --dst 'gpu:0+4096': want host or gpu:N, with an optional +OFF of 0 to 4095" \
	"$gdx" bench xport --dst gpu:0+4096
expect 2 "gdx bench xport: --sockets: needs a tcp:// address (it samples the two ends' sockets)" \
	"$gdx" bench xport --addr loop://bench --sockets
expect 2 "gdx bench xport: --window: needs a tcp:// address and its ceilings (it is raw TCP on the same loopback)" \
	"$gdx" bench xport --addr loop://bench --window
expect 2 "gdx bench xport: --window: needs a tcp:// address and its ceilings (it is raw TCP on the same loopback)" \
	"$gdx" bench xport --window --no-ceiling
expect 2 "gdx bench file: --dev-offset '4096': want a whole number from 0 to 4095" \
	"$gdx" bench file --file "$dir/src" --dev-offset 4096
expect 2 "gdx bench file: --threads '0': want a whole number from 1 to 1024" \
	"$gdx" bench file --file "$dir/src" --threads 0
expect 2 "gdx bench file: --threads '-1': want a whole number from 1 to 1024" \
	"$gdx" bench file --file "$dir/src" --threads 1,-1
expect 2 "gdx bench file: --cache 'warm': want one of hot|cold|auto" \
	"$gdx" bench file --file "$dir/src" --cache warm
expect 2 "gdx bench file: --io-size '5000': want a multiple of 4k (O_DIRECT)" \
	"$gdx" bench file --file "$dir/src" --io-size 5000
expect 2 "gdx config: unknown argument '--bogus'
usage: gdx config [--markdown]" "$gdx" config --bogus
"$gdx" bench nope 2>"$dir/err"; [ $? = 2 ] || fail "bench nope: exit status"
[ "$(head -1 "$dir/err")" = "gdx bench: unknown benchmark 'nope'" ] || fail "bench nope: $(cat "$dir/err")"

# gdx config: a header row names the columns.
"$gdx" config | head -1 | grep -Eq '^KNOB +ENVIRONMENT +TYPE +VALUE +MEANING$' ||
	fail "gdx config header: $("$gdx" config | head -1)"

# Benchmarks: a directory is not a file; a bad address fails once, not per size.
expect 1 "gdx bench file: $dir: a directory, not a file (--create SIZE makes one)" \
	"$gdx" bench file --file "$dir"
"$gdx" bench xport --addr foo://x --sizes 4k,64k,1M --secs 0.01 >"$dir/out" 2>"$dir/err"; rc=$?
[ $rc = 2 ] || fail "xport foo://: exit $rc"
[ "$(grep -c . "$dir/err")" = 2 ] && grep -q "^gdx bench xport: --addr foo://x: Invalid argument$" \
	"$dir/err" || fail "xport foo://: stderr $(cat "$dir/err")"
grep -q failed "$dir/out" && fail "xport foo://: a failure per size: $(cat "$dir/out")"
# A result above its ceiling makes the run invalid, on its line and at the end.
"$gdx" bench file --file "$dir/src" --io-size 4k,64k --bytes 64k --dev-offset 3 --json >"$dir/out" \
	2>"$dir/err" || fail "bench file: $(cat "$dir/err")"
grep -c '"dev_offset":3' "$dir/out" | grep -qx 2 || fail "bench file --dev-offset: $(cat "$dir/out")"
python3 - "$dir/out" "$dir/err" <<'PY' || fail "bench file validity: $(cat "$dir/out" "$dir/err")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
err = open(sys.argv[2]).read()
assert len(rows) == 2, rows
# above the ceiling: a ratio that prints 1.01 or more (at 1.005, three decimals are not enough to say)
for r in rows:
    g, n = r["gdx_ratio"], r["naive_ratio"]
    if abs(g - 1.005) >= 0.001 and abs(n - 1.005) >= 0.001:
        assert r["valid"] == (g < 1.005 and n < 1.005), r
bad = sum(not r["valid"] for r in rows)
assert ("the run is invalid" in err) == (bad > 0), err
PY
"$gdx" bench xport --sizes 4k,64k --secs 0.02 >"$dir/out" 2>"$dir/err" || fail "bench xport: $(cat "$dir/err")"
awk '$1 ~ /^[0-9]+[kM]?$/ && $4 != "n/a" && $7 != "n/a" { inv = ($5 > 1 || $8 > 1); flag = /INVALID/
	if (inv != flag) { print "line: " $0; bad = 1 } } END { exit bad }' "$dir/out" ||
	fail "bench xport validity: $(cat "$dir/out")"
if grep -q INVALID "$dir/out"; then
	grep -q "the run is invalid" "$dir/err" || fail "bench xport: no summary: $(cat "$dir/err")"
fi
# buffers at odd offsets of their allocations (a tensor's slice) run end to end
"$gdx" bench xport --sizes 4k,64k --secs 0.02 --no-ceiling --src host+3 --dst gpu:0+2 >"$dir/out" \
	2>"$dir/err" || fail "bench xport +OFF: $(cat "$dir/err")"
grep -q "src=host+3 dst=gpu:0+2" "$dir/out" && [ "$(grep -cE '^ +(4k|64k) ' "$dir/out")" = 2 ] ||
	fail "bench xport +OFF: $(cat "$dir/out" "$dir/err")"
# where the bandwidth runs' bytes waited: one line a size, its five shares summing to 100
"$gdx" bench xport --sizes 4k,64k --secs 0.05 --runs 2 --no-ceiling --sockets >"$dir/out" \
	2>"$dir/err" || fail "bench xport --sockets: $(cat "$dir/err")"
awk '/^    sockets at (4k|64k): / { n++; s = 0; k = 0; l = $0
	while (match(l, /[0-9]+%/)) { s += substr(l, RSTART, RLENGTH - 1); k++; l = substr(l, RSTART + RLENGTH) }
	if (k != 5 || s < 98 || s > 102 || $0 !~ /\([1-9][0-9]* samples\)$/) bad = 1 }
	END { exit !(n == 2 && !bad) }' "$dir/out" || fail "bench xport --sockets: $(cat "$dir/out")"
# the window's own cost: one line a size (an odd size too: answers count whole messages)
"$gdx" bench xport --sizes 5000,64k --secs 0.05 --depth 3 --window >"$dir/out" 2>"$dir/err" ||
	fail "bench xport --window: $(cat "$dir/err")"
awk '/^    window at (5000|64k): raw TCP, 3 answered messages in flight: [0-9.]+ GB\/s, [0-9.]+ of the stream; gdx [0-9.]+ of it$/ { n++ }
	END { exit n != 2 }' "$dir/out" || fail "bench xport --window: $(cat "$dir/out")"
echo ok
