#!/bin/bash
# Host: the target is killed and started again while the guest is connected;
# the kernel host reconnects on its own and the data is still there.
. "$(dirname "$0")/lib.sh"
SHARE=$(mktemp -d); trap 'stop_target; [ -n "${G:-}" ] && kill $G 2>/dev/null; rm -rf "$SHARE"' EXIT
cp "$INTEROP/guest_lib.sh" "$INTEROP/g_restart.sh" "$SHARE/"
PORT=$(free_port) NQN=nqn.2024-01.io.gdx:interop-restart
truncate -s 32M "$SHARE/ns1.img"
args=(-l 127.0.0.1:$PORT -n $NQN -N "$SHARE/ns1.img")
start_target "$SHARE/target.log" "${args[@]}" || exit 1
run_guest "$SHARE/g_restart.sh" $PORT $NQN & G=$!
for i in $(seq 1200); do [ -e "$SHARE/written" ] && break; kill -0 $G 2>/dev/null || break; sleep 0.1; done
if [ -e "$SHARE/written" ]; then
  stop_target
  echo "host: target stopped"
  sleep 2
  start_target "$SHARE/target.log" "${args[@]}" || exit 1
  echo "host: target restarted"
  touch "$SHARE/restarted"
fi
wait $G; rc=$?; G=
stop_target
grep -E 'connect:|connection ends' "$SHARE/target.log" | tail -8 | sed 's/^/  target: /'
exit $rc
