#!/usr/bin/env bash
# A root filesystem on top of another recipe's (a copy of its debootstrapped tree) plus more
# Debian packages, installed by apt in a chroot: apt resolves their dependencies properly
# (debootstrap's resolver does not for large sets), and the base tree's cache is reused.
# Env: BASE_DIR (output of build-rootfs.sh), SUITE, MIRROR, PACKAGES (comma separated), OUT.
set -euo pipefail
: "${BASE_DIR:?}" "${SUITE:?}" "${MIRROR:?}" "${PACKAGES:?}" "${OUT:?}"
rm -rf "$OUT/root"
mkdir -p "$OUT"
cp -a "$BASE_DIR/root" "$OUT/root"
root=$OUT/root
mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "deb $MIRROR $SUITE main" > "$root/etc/apt/sources.list"
apt_opts=(-o Acquire::Check-Valid-Until=false -o Acquire::Retries=3 -o APT::Install-Recommends=false)
# No service may start inside the chroot.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
{
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y ${PACKAGES//,/ }
} > "$OUT/apt.log" 2>&1 || { tail -30 "$OUT/apt.log" >&2; exit 1; }
chroot "$root" apt-get clean
rm -f "$root/usr/sbin/policy-rc.d"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log
: > "$root/etc/resolv.conf"
