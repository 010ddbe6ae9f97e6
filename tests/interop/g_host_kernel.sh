#!/bin/bash
# Guest: nvmet-tcp on 0.0.0.0:4420 with a 64 MiB file namespace; after the host's gdx
# wrote, the guest's own kernel host reads those ranges and writes one for gdx to read.
. /share/guest_lib.sh
NQN=$1
wait_flag() { local i; for i in $(seq 3000); do [ -e "/share/$1" ] && return 0; sleep 0.1; done; return 1; }
modprobe -a nvmet-tcp nvme-tcp
truncate -s 64M /tmp/ns1.img
cd /sys/kernel/config/nvmet
mkdir subsystems/$NQN
echo 1 > subsystems/$NQN/attr_allow_any_host
mkdir subsystems/$NQN/namespaces/1
echo /tmp/ns1.img > subsystems/$NQN/namespaces/1/device_path
echo 1 > subsystems/$NQN/namespaces/1/buffered_io	# tmpfs has no O_DIRECT
echo 1 > subsystems/$NQN/namespaces/1/enable
mkdir ports/1
echo tcp > ports/1/addr_trtype; echo ipv4 > ports/1/addr_adrfam
echo 0.0.0.0 > ports/1/addr_traddr; echo 4420 > ports/1/addr_trsvcid
ln -s /sys/kernel/config/nvmet/subsystems/$NQN ports/1/subsystems/$NQN
cd /
touch /share/target.ready
check "host finished writing" wait_flag step1.done
check "kernel host connects" nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$NQN"
check "namespace appears" wait_dev /dev/nvme0n1
check "read gdx's host-memory write" dd if=/dev/nvme0n1 of=/share/a.guest bs=1M skip=1 count=1 \
  iflag=direct status=none
check "read gdx's device-memory write" dd if=/dev/nvme0n1 of=/share/b.guest bs=1M skip=4 count=2 \
  iflag=direct status=none
check "write a range for gdx" dd if=/share/c.src of=/dev/nvme0n1 bs=1M seek=8 count=1 \
  oflag=direct conv=fsync status=none
check "disconnect" nvme disconnect -n "$NQN"
touch /share/step2.done
# the fault: the port drops the subsystem (nvmet ends every connection of it) and
# takes it back half a second later, while the host's gdx is in the middle of a read
if wait_flag fault.now; then
  rm /sys/kernel/config/nvmet/ports/1/subsystems/$NQN
  sleep 0.5
  ln -s /sys/kernel/config/nvmet/subsystems/$NQN /sys/kernel/config/nvmet/ports/1/subsystems/$NQN
  touch /share/fault.done
fi
wait_flag host.done
echo "  nvmet:"; dmesg | grep -E 'nvmet' | tail -12 | sed 's/^/    /'
finish
