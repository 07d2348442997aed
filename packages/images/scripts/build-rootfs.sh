#!/usr/bin/env bash
# Debootstraps the guest's root filesystem (minbase + the recipe's packages) into $OUT/root.
# Env: SUITE, MIRROR, PACKAGES (comma separated), OUT.
set -euo pipefail
: "${SUITE:?}" "${MIRROR:?}" "${PACKAGES:?}" "${OUT:?}"
rm -rf "$OUT/root"
mkdir -p "$OUT"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$OUT/root" "$MIRROR" > "$OUT/debootstrap.log" 2>&1 \
  || { tail -30 "$OUT/debootstrap.log" >&2; exit 1; }
root=$OUT/root
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log
echo den > "$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 den\n::1 localhost\n' > "$root/etc/hosts"
: > "$root/etc/resolv.conf"
mkdir -p "$root/workspace" "$root/usr/local/sbin"
