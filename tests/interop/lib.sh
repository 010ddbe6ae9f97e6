# Helpers for the interop tests' host sides (sourced).
# GDX: the gdx binary; VM: vm.sh; SHARE: a scratch folder the guest sees as /share.
INTEROP=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM=$INTEROP/vm.sh
GDX=${GDX:-$INTEROP/../../build/tools/gdx/gdx}
export VM_CPUS=${VM_CPUS:-2} VM_MEM=${VM_MEM:-1024} VM_TIMEOUT=${VM_TIMEOUT:-420}
TARGET_PID=

# start_target LOG ARGS...: runs `gdx nvmf target ARGS` and waits until it is ready
start_target() {
  local log=$1 i; shift
  "$GDX" nvmf target "$@" >>"$log" 2>&1 &
  TARGET_PID=$!
  for i in $(seq 100); do
    grep -q 'target: ready' "$log" 2>/dev/null && return 0
    kill -0 "$TARGET_PID" 2>/dev/null || { echo "target exited:"; cat "$log"; return 1; }
    sleep 0.1
  done
  echo "target not ready"; cat "$log"; return 1
}

stop_target() {
  [ -n "$TARGET_PID" ] || return 0
  kill "$TARGET_PID" 2>/dev/null
  wait "$TARGET_PID" 2>/dev/null
  TARGET_PID=
}

# a free TCP port on 127.0.0.1
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run_guest SCRIPT ARGS...: boots the VM with the share and the target's port forwarded
run_guest() {
  VM_SHARE=$SHARE VM_GUESTFWD=$PORT "$VM" run "$@"
}
