#!/bin/bash
# Host: RAM namespace, two reactors; the guest connects with header and data
# digests and four I/O queues (spread over both reactors) and verifies I/O.
. "$(dirname "$0")/lib.sh"
SHARE=$(mktemp -d); trap 'stop_target; rm -rf "$SHARE"' EXIT
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_digest.sh" "$SHARE/"
PORT=$(free_port) NQN=nqn.2024-01.io.gdx:interop-digest
start_target "$SHARE/target.log" -l 127.0.0.1:$PORT -n $NQN -N ram:64M -r 2 || exit 1
run_guest "$SHARE/g_digest.sh" $PORT $NQN; rc=$?
stop_target
grep -cE 'connect: .* qid [1-4] ' "$SHARE/target.log" | sed 's/^/  target: I\/O queue connects: /'
if grep -E 'protocol error|digest mismatch' "$SHARE/target.log"; then rc=1; fi
exit $rc
