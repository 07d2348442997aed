#!/usr/bin/env bash
# Builds an uncompressed initramfs (TCG decompresses slowly): busybox, the virtio
# modules, and an /init that loads them and switches to the root disk.
# Env: KERNEL_DIR (output of build-kernel.sh), OUT.
set -euo pipefail
: "${KERNEL_DIR:?}" "${OUT:?}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,dev,proc,sys,newroot,modules}
cp /bin/busybox "$work/bin/busybox"
for a in sh mount umount insmod switch_root sleep mkdir echo cat; do ln -s busybox "$work/bin/$a"; done
cp "$KERNEL_DIR"/modules/*.ko "$work/modules/"
cat > "$work/init" <<'INIT'
#!/bin/sh
mount -t devtmpfs dev /dev
mount -t proc proc /proc
mount -t sysfs sys /sys
for m in virtio_ring virtio virtio_mmio virtio_blk virtio_console failover net_failover virtio_net virtio-rng; do
  insmod /modules/$m.ko 2>/dev/null
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
if ! mount -t ext4 -o rw,noatime /dev/vda /newroot; then
  echo "den-initrd: cannot mount /dev/vda" >&2; sleep 1; exit 1
fi
mount --move /dev /newroot/dev
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
exec switch_root /newroot /usr/local/sbin/den-agent --init
INIT
chmod +x "$work/init"
mkdir -p "$OUT"
(cd "$work" && find . | cpio -o -H newc --quiet) > "$OUT/initrd.cpio"
