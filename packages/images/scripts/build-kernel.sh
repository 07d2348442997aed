#!/usr/bin/env bash
# Builds the guest kernel from Debian's cloud kernel package.
# Output ($OUT): vmlinux (uncompressed ELF, boots via PVH under -M microvm),
# modules/ (the virtio modules the initramfs loads), kernel-version.
# Env: KERNEL_PACKAGE (meta package, e.g. linux-image-cloud-amd64), OUT.
set -euo pipefail
: "${KERNEL_PACKAGE:?}" "${OUT:?}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# The meta package depends on exactly one versioned image package.
pkg=$(apt-cache depends "$KERNEL_PACKAGE" | awk '/Depends: linux-image-/ {print $2; exit}')
[ -n "$pkg" ] || { echo "cannot resolve $KERNEL_PACKAGE (run apt-get update?)" >&2; exit 1; }
# apt's sandbox user cannot write to a root-owned temp dir; the warning is harmless.
apt-get download -q "$pkg" 2>&1 | grep -v 'unsandboxed' || true
dpkg -x ./*.deb root
vmlinuz=$(ls root/boot/vmlinuz-*)
kver=${vmlinuz##*/vmlinuz-}

# bzImage -> raw ELF: the compressed payload starts at (setup_sects+1)*512 + payload_offset.
u8()  { od -An -tu1 -j "$1" -N1 "$vmlinuz" | tr -d ' '; }
u32() { od -An -tu4 -j "$1" -N4 "$vmlinuz" | tr -d ' '; }
setup_sects=$(u8 $((0x1f1)))
payload_offset=$(u32 $((0x248)))
payload_length=$(u32 $((0x24c)))
start=$(( (setup_sects + 1) * 512 + payload_offset ))
dd if="$vmlinuz" of=payload.lz4 bs=64K iflag=skip_bytes,count_bytes skip="$start" count="$payload_length" status=none
lz4 -dc payload.lz4 > vmlinux 2>/dev/null || true
head -c 4 vmlinux | grep -q 'ELF' || { echo "kernel payload is not an LZ4-compressed ELF" >&2; exit 1; }

mkdir -p "$OUT/modules"
moddir=root/lib/modules/$kver/kernel
for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_mmio \
         drivers/block/virtio_blk drivers/char/virtio_console net/core/failover \
         drivers/net/net_failover drivers/net/virtio_net drivers/char/hw_random/virtio-rng; do
  cp "$moddir/$m.ko" "$OUT/modules/"
done
cp vmlinux "$OUT/vmlinux"
echo "$pkg $kver" > "$OUT/kernel-version"
