#!/bin/busybox sh
# PID 1 of the Berth VM guest (test/vm). Loads the NVMe and 9p modules, mounts
# the host's root (read-only, over virtio-9p) with the guest's own /proc, /sys,
# /dev and a tmpfs /run on top, then runs /berth/run chrooted into it, so the
# checkout's bin/berth, node and nvme-cli run unchanged against the guest's
# real kernel. Powers off whatever happens; the host reads the second serial
# port (/dev/ttyS1) and the namespace backing files afterwards.
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

fail() {
  echo "berth-vm: $1"
  printf '{"type":"error","message":"init: %s"}\n' "$1" > /dev/ttyS1
}

# In dependency order (modprobe --show-depends on the host). crct10dif-pclmul
# fails under TCG ("No such device"); crc-t10dif falls back to the generic one.
while read -r module; do
  insmod "/lib/modules/$module" 2> /dev/null || echo "berth-vm: insmod $module failed"
done < /lib/modules/order

if mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /host; then
  # cache=loose: the share is read-only and the host does not change it while
  # the guest runs; without it every path lookup is a 9p round trip and node
  # takes minutes to start under TCG.
  mount -t proc proc /host/proc &&
    mount -t sysfs sysfs /host/sys &&
    mount -t devtmpfs devtmpfs /host/dev &&
    mount -t tmpfs tmpfs /host/run &&
    mkdir -p /host/run/berth-vm/tmp &&
    cp /berth/* /host/run/berth-vm/ || fail "cannot prepare the host root"
  # A writable share, when the host gives one: what outlives this boot (the
  # agent's journal, for the next boot of the same host).
  if grep -qw berthpersist /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag 2> /dev/null; then
    mkdir -p /host/run/berth-vm/persist &&
      mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 berthpersist /host/run/berth-vm/persist ||
      fail "cannot mount the writable share"
  fi
  # The guest writes only under /run (tmpfs). /tmp stays the host's, read-only:
  # a checkout under the host's /tmp must stay visible.
  ip link set lo up || fail "cannot bring up lo"
  chroot /host /run/berth-vm/run || fail "the orchestrator exited $?"
else
  fail "cannot mount the host root over 9p"
fi
# Debugging (docs/testing-vm.md): with berth.shell on the kernel command line,
# a shell on the console before the power-off; `chroot /host` to look around.
if grep -qw berth.shell /proc/cmdline; then
  echo "berth-vm: berth.shell: exit the shell to power off"
  setsid cttyhack sh
fi
sync
poweroff -f
