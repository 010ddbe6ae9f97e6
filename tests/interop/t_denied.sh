#!/bin/bash
# Host: a subsystem that admits one host NQN; the guest's own NQN is refused.
. "$(dirname "$0")/lib.sh"
SHARE=$(mktemp -d); trap 'stop_target; rm -rf "$SHARE"' EXIT
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_denied.sh" "$SHARE/"
PORT=$(free_port) NQN=nqn.2024-01.io.gdx:interop-locked HOSTNQN=nqn.2024-01.io.gdx:interop-friend
start_target "$SHARE/target.log" -l 127.0.0.1:$PORT -n $NQN -N null:1G -H $HOSTNQN || exit 1
run_guest "$SHARE/g_denied.sh" $PORT $NQN $HOSTNQN; rc=$?
stop_target
grep -E 'refused|connect:' "$SHARE/target.log" | sed 's/^/  target: /'
grep -q 'refused: host not allowed' "$SHARE/target.log" || { echo "no refusal logged"; rc=1; }
exit $rc
