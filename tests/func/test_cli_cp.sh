#!/bin/sh
# SPDX-License-Identifier: MIT
# gdx cp on the emulated device: file -> gpu, gpu -> file, a --via round trip
# (byte for byte), the closing line's path, and clear failures.
set -u
gdx=$1
dir=$(mktemp -d "${GDX_BUILDDIR:-/tmp}/gdx_cli_cp.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

head -c 5242887 /dev/urandom >"$dir/src" || exit 1
out=$("$gdx" cp "$dir/src" gpu:0 -q) || fail "file -> gpu: $out"
echo "$out" | grep -q "5242887 bytes" || fail "byte count: $out"
echo "$out" | grep -q "read path: " || fail "no path line: $out"

out=$("$gdx" cp "$dir/src" "$dir/back" --via gpu:0 --piece 1M -q) || fail "--via: $out"
cmp "$dir/src" "$dir/back" || fail "round trip differs"
echo "$out" | grep -q "write path: bounce" || fail "write path: $out"

"$gdx" cp gpu:0 "$dir/zero" --size 3000000 -q >/dev/null || fail "gpu -> file"
[ "$(stat -c %s "$dir/zero")" = 3000000 ] || fail "gpu -> file size"
head -c 3000000 /dev/zero | cmp - "$dir/zero" || fail "gpu -> file contents"

# The same file as source and destination, by any name, is refused before the
# destination is truncated (cp(1) does the same): X must keep its bytes.
cp "$dir/src" "$dir/same" && ln "$dir/same" "$dir/link" || exit 1
for d in "$dir/same" "$dir/./same" "$dir/link"; do
	"$gdx" cp "$dir/same" "$d" --via gpu:0 -q >"$dir/out" 2>"$dir/err"; rc=$?
	[ $rc = 1 ] || fail "same file $d: exit $rc, $(cat "$dir/out")"
	grep -q "gdx cp: '$dir/same' and '$d' are the same file" "$dir/err" ||
		fail "same file $d: $(cat "$dir/err")"
	cmp -s "$dir/src" "$dir/same" || fail "same file $d: the source changed"
done
# A source that ends before its size said (a sysfs file reports 4096 bytes and
# holds a few) is an error naming it, not a short success.
short=/sys/devices/system/cpu/online
if [ "$(stat -c %s $short 2>/dev/null)" = 4096 ]; then
	"$gdx" cp $short "$dir/short" --via gpu:0 -q >"$dir/out" 2>"$dir/err"; rc=$?
	[ $rc = 1 ] || fail "short source: exit $rc, $(cat "$dir/out")"
	grep -q "^gdx cp: $short: ended at byte [0-9]* of 4096: the file shrank" "$dir/err" ||
		fail "short source: $(cat "$dir/err")"
fi

# Advice that fits: no device advice when the device knob is already set; a copy
# larger than the device names its memory and --via.
"$gdx" cp "$dir/src" gpu:7 -q 2>"$dir/err"; [ $? = 1 ] || fail "gpu:7 should be 1"
grep -q "no such device (1 emulated device; GDX_EMULATED_DEVICES sets how many)" "$dir/err" ||
	fail "gpu:7: $(cat "$dir/err")"
grep -q "set GDX_DEVICE" "$dir/err" && fail "gpu:7 advises the knob already set: $(cat "$dir/err")"
GDX_EMULATED_MEM_LIMIT=1M "$gdx" cp "$dir/src" gpu:0 -q 2>"$dir/err"; [ $? = 1 ] ||
	fail "larger than the device should be 1"
grep -q "emulated:0 has 1 MiB of device memory (GDX_EMULATED_MEM_LIMIT sets it);.* --via gpu:N" \
	"$dir/err" || fail "larger than the device: $(cat "$dir/err")"
# The path's explanation is whole: a split read (pieces saying their own) ends its
# sentence, where a 256-byte why cut it mid-word.
out=$(GDX_FILE_SPLIT_MIN=1M GDX_FILE_SPLIT_PIECE=1M "$gdx" cp "$dir/src" gpu:0 -q) ||
	fail "split read: $out"
echo "$out" | grep -Eq 'read path: .*[])]\)$' || fail "explanation cut: $out"

"$gdx" cp "$dir/nonexistent" gpu:0 -q 2>/dev/null; [ $? = 1 ] || fail "missing file should be 1"
"$gdx" cp "$dir/src" "$dir/x" 2>/dev/null; [ $? = 2 ] || fail "two files without --via should be 2"
"$gdx" cp gpu:0 "$dir/x" 2>/dev/null; [ $? = 2 ] || fail "gpu source without --size should be 2"
GDX_REQUIRE_DIRECT=1 "$gdx" cp "$dir/src" gpu:0 -q 2>"$dir/err"; [ $? = 1 ] || fail "strict should fail"
grep -q "no direct path" "$dir/err" || fail "strict message: $(cat "$dir/err")"

# The benchmark: every combination gives one JSON line with its ceilings.
"$gdx" bench file --file "$dir/src" --io-size 64k,1M --threads 1,2 --depth 1,4 --bytes 2M \
	--json >"$dir/bench" || fail "bench: $(cat "$dir/bench")"
[ "$(grep -c '"gdx_gbps":[0-9]' "$dir/bench")" = 8 ] || fail "bench lines: $(cat "$dir/bench")"
grep -q '"storage_gbps":0.000' "$dir/bench" && fail "a ceiling measured nothing"
"$gdx" bench file --file "$dir/src" --io-size 5000 2>/dev/null; [ $? = 2 ] || fail "unaligned size"
"$gdx" bench file 2>/dev/null; [ $? = 2 ] || fail "bench usage"
echo ok
