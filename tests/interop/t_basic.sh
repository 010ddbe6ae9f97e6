#!/bin/bash
# Host: a file namespace (512 B blocks) and a RAM namespace (4 KiB blocks); the
# guest's kernel host discovers, connects, identifies, verifies I/O and disconnects.
. "$(dirname "$0")/lib.sh"
SHARE=$(mktemp -d); trap 'stop_target; rm -rf "$SHARE"' EXIT
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_basic.sh" "$SHARE/"
PORT=$(free_port) NQN=nqn.2024-01.io.gdx:interop-basic
truncate -s 64M "$SHARE/ns1.img"
start_target "$SHARE/target.log" -l 127.0.0.1:$PORT -n $NQN -N "$SHARE/ns1.img" -N ram:32M,bs=4096 \
  --stats "$SHARE/stats.json" || exit 1
run_guest "$SHARE/g_basic.sh" $PORT $NQN; rc=$?
stop_target
grep -E 'connect|error|Error' "$SHARE/target.log" | head -20 | sed 's/^/  target: /'
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$SHARE/stats.json" || { echo "stats JSON unreadable"; rc=1; }
exit $rc
