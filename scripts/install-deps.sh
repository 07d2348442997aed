#!/usr/bin/env bash
# Installs the Debian packages Den needs on the host (idempotent; fast when all are present),
# and any more named as arguments (the test command adds what only tests use).
set -euo pipefail
# make, g++ and python3 build better-sqlite3 when no prebuilt binary can be fetched.
# nftables and iproute2: the per-sandbox network namespaces and their firewalls.
# libzstd-dev: Den's native page filter compresses a state with libzstd in its own process.
# umoci: a template built from an OCI image has its layers unpacked by it (whiteouts, owners, xattrs).
pkgs=(qemu-system-x86 qemu-utils debootstrap busybox-static e2fsprogs lz4 zstd libzstd-dev cpio gcc libc6-dev make g++ python3 nftables iproute2 umoci "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  # Debian's registry package starts a registry of its own on :5000; the tests run theirs.
  if printf '%s\n' "${missing[@]}" | grep -qx docker-registry && command -v systemctl >/dev/null; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
fi
