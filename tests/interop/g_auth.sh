#!/bin/bash
# Guest (trixie): the kernel host against the gdx target with DH-HMAC-CHAP, then
# nvmet with a DH-HMAC-CHAP host entry for the host's gdx (t_auth.sh).
. /share/guest_lib.sh
P=$1 NQN=$2 KHOST=$3 KNQN=$4 GHOST=$5
wait_flag() { local i; for i in $(seq 4000); do [ -e "/share/$1" ] && return 0; sleep 0.1; done; return 1; }
modprobe -a nvme-tcp nvmet-tcp
K=(-t tcp -a "$HOST_IP" -s "$P" -n "$NQN" -q "$KHOST")
KS=$(cat /share/khost.key) KC=$(cat /share/kctrl.key) W=$(cat /share/wrong.key)
# refused: nvme connect fails, and no namespace appears (a few seconds later either)
refused() {
  local rc
  nvme connect "${K[@]}" "$@" >/tmp/connect.out 2>&1; rc=$?
  sed 's/^/    /' /tmp/connect.out | head -3
  sleep 3
  [ $rc != 0 ] && ! ls /dev/nvme*n* >/dev/null 2>&1
}
check "kernel host authenticates (unidirectional)" nvme connect "${K[@]}" --dhchap-secret="$KS"
check "  namespace appears" wait_dev /dev/nvme0n1
check "  fio verify through authenticated I/O queues" fio_verify /dev/nvme0n1 8M
check "  disconnect" nvme disconnect -n "$NQN"
check "  device gone" wait_gone /dev/nvme0n1
check "kernel host and gdx target authenticate each other (bidirectional)" \
  nvme connect "${K[@]}" --dhchap-secret="$KS" --dhchap-ctrl-secret="$KC"
check "  namespace appears" wait_dev /dev/nvme0n1
check "  read 4 MiB" dd if=/dev/nvme0n1 of=/dev/null bs=1M count=4 iflag=direct status=none
# a new secret makes the kernel re-authenticate every queue; the target has the old one
# for this host, so the same secret is written (what the kernel does is the same)
check "  re-authentication of every queue" sh -c "echo '$KS' > /sys/class/nvme/nvme0/dhchap_secret"
sleep 3
check "  read 4 MiB after it" dd if=/dev/nvme0n1 of=/dev/null bs=1M count=4 iflag=direct status=none
check "  the controller is still live" grep -q live /sys/class/nvme/nvme0/state
dmesg | grep -iE 'nvme.*(auth|dhchap)' | tail -8 | sed 's/^/    /'
check "  disconnect" nvme disconnect -n "$NQN"
check "  device gone" wait_gone /dev/nvme0n1
check "the gdx target refuses a wrong secret" refused --dhchap-secret="$W"
check "the gdx target refuses a host without a secret" refused
check "the kernel host refuses a controller proving another secret" \
  refused --dhchap-secret="$KS" --dhchap-ctrl-secret="$W"
nvme disconnect-all >/dev/null 2>&1
# nvmet for the host's gdx: its host entry requires authentication both ways
truncate -s 16M /tmp/ns1.img
cd /sys/kernel/config/nvmet
mkdir hosts/$GHOST
echo "$(cat /share/ghost.key)" > hosts/$GHOST/dhchap_key
echo "$(cat /share/gctrl.key)" > hosts/$GHOST/dhchap_ctrl_key
echo "hmac(sha512)" > hosts/$GHOST/dhchap_hash
echo ffdhe3072 > hosts/$GHOST/dhchap_dhgroup
mkdir subsystems/$KNQN
echo 0 > subsystems/$KNQN/attr_allow_any_host
ln -s /sys/kernel/config/nvmet/hosts/$GHOST subsystems/$KNQN/allowed_hosts/$GHOST
mkdir subsystems/$KNQN/namespaces/1
echo /tmp/ns1.img > subsystems/$KNQN/namespaces/1/device_path
echo 1 > subsystems/$KNQN/namespaces/1/buffered_io	# tmpfs has no O_DIRECT
echo 1 > subsystems/$KNQN/namespaces/1/enable
mkdir ports/1
echo tcp > ports/1/addr_trtype; echo ipv4 > ports/1/addr_adrfam
echo 0.0.0.0 > ports/1/addr_traddr; echo 4420 > ports/1/addr_trsvcid
ln -s /sys/kernel/config/nvmet/subsystems/$KNQN ports/1/subsystems/$KNQN
cd /
touch /share/nvmet.ready
check "the host's gdx finished" wait_flag host.done
dmesg | grep -iE 'nvmet.*(auth|dhchap|failure)' | tail -6 | sed 's/^/    /'
finish
