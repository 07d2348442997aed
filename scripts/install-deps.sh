#!/usr/bin/env bash
# Installs the Debian packages Den needs on the host (idempotent; fast when all are present),
# and any more named as arguments (the test command adds what only tests use).
set -euo pipefail
# make, g++ and python3 build better-sqlite3 when no prebuilt binary can be fetched.
# nftables and iproute2: the per-sandbox network namespaces and their firewalls.
# libzstd-dev: Den's native page filter compresses a state with libzstd in its own process.
# umoci: a template built from an OCI image has its layers unpacked by it (whiteouts, owners, xattrs).
pkgs=(debootstrap busybox-static e2fsprogs lz4 zstd libzstd-dev cpio gcc libc6-dev make g++ python3 nftables iproute2 umoci "$@")
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

# QEMU 10.0 or newer (the template's RAM opened read-only: `readonly=on,rom=off`, 8.2+;
# `-run-with user=`, 9.1+). Debian 12 ships 7.2; its bookworm-backports suite, on the mirror
# the machine's apt already uses, carries 10.0: added from the existing Debian entry (same
# mirror, same key), pinned as backports always are (only what is asked for comes from it).
qemu_ok() {
  local p v
  for p in qemu-system-x86 qemu-utils; do
    v=$(dpkg-query -W -f='${Status} ${Version}' "$p" 2>/dev/null) || return 1
    case "$v" in "install ok installed "*) ;; *) return 1 ;; esac
    dpkg --compare-versions "${v##* }" ge 1:10.0 || return 1
  done
}
if ! qemu_ok; then
  export DEBIAN_FRONTEND=noninteractive
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  target=()
  if [ "$codename" = bookworm ]; then
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      # The first entry whose suites include bookworm: its mirror and key (deb822 or one-line).
      entry=$(awk '
        function stanza() { if (uris != "" && suites ~ / bookworm /) { print uris, (key == "" ? "-" : key); found = 1; exit } uris = key = suites = "" }
        FNR == 1 { stanza() }
        /^[[:space:]]*$/ { stanza() }
        /^URIs:/ { uris = $2 } /^Signed-By:/ { key = $2 } /^Suites:/ { suites = " " substr($0, 8) " " }
        /^deb / && $0 ~ / bookworm / {
          k = "-"; if (match($0, /signed-by=[^] ]+/)) k = substr($0, RSTART + 10, RLENGTH - 10)
          for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) { print $i, k; found = 1; exit }
        }
        END { if (!found) stanza() }' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1)
      [ -n "$entry" ] || { echo "install-deps: no Debian bookworm entry in apt's sources to add bookworm-backports from" >&2; exit 1; }
      key=${entry#* }
      [ "$key" != - ] || key=/usr/share/keyrings/debian-archive-keyring.gpg
      printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' "${entry%% *}" "$key" \
        > /etc/apt/sources.list.d/den-bookworm-backports.sources
      echo "install-deps: added bookworm-backports (${entry%% *}) for QEMU 10" >&2
    fi
    target=(-t bookworm-backports)
  fi
  echo "installing: qemu-system-x86 qemu-utils ${target[*]}" >&2
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${target[@]}" qemu-system-x86 qemu-utils >/dev/null
  qemu_ok || { echo "install-deps: QEMU 10.0 or newer is needed; apt installed $(dpkg-query -W -f='${Version}' qemu-system-x86)" >&2; exit 1; }
fi
