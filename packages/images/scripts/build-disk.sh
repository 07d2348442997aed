#!/usr/bin/env bash
# Makes the template's root disk: a copy of the debootstrapped tree plus the guest
# agent, as an ext4 filesystem inside a sparse qcow2 image.
# Env: ROOTFS_DIR (output of build-rootfs.sh), AGENT (static binary), DISK_MB, OUT, and
# EXTRA_DIR (optional): a tree of Den's files copied over the root (root-owned, modes kept).
set -euo pipefail
: "${ROOTFS_DIR:?}" "${AGENT:?}" "${DISK_MB:?}" "${OUT:?}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -a "$ROOTFS_DIR/root" "$work/root"
install -m 0755 "$AGENT" "$work/root/usr/local/sbin/den-agent"
if [ -n "${EXTRA_DIR:-}" ]; then
  cp -r --no-preserve=ownership "$EXTRA_DIR/." "$work/root/"
fi
truncate -s "${DISK_MB}M" "$work/rootfs.img"
mkfs.ext4 -q -F -L denroot -E root_owner=0:0 -d "$work/root" "$work/rootfs.img"
mkdir -p "$OUT"
qemu-img convert -q -O qcow2 "$work/rootfs.img" "$OUT/rootfs.qcow2"
