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
# The default account E2B-style agents expect (Den's /v1 still runs as root): `user`, uid and
# gid 1000, home /home/user, bash, passwordless sudo when the recipe has sudo.
chroot "$root" groupadd --gid 1000 user
chroot "$root" useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user
if [ -x "$root/usr/bin/sudo" ]; then
  echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' > "$root/etc/sudoers.d/user"
  chmod 0440 "$root/etc/sudoers.d/user"
  chroot "$root" visudo -cqf /etc/sudoers.d/user
fi
