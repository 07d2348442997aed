#!/usr/bin/env bash
# Runs a command inside a network namespace that stands for "this machine" in the
# network tests: it has no default route, so nothing a test does can leave the machine.
# Beside it, namespaces on TEST-NET addresses stand for the internet:
#   198.51.100.10 and 203.0.113.10 (HTTP servers on :80), and 10.99.0.10 (a private-range
#   server that sandboxes must never reach). Everything is removed on exit.
set -euo pipefail
outer=den-t-outer
cleanup() {
  for ns in $outer den-t-net1 den-t-net2 den-t-priv; do
    ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del $ns 2>/dev/null || true
  done
}
cleanup
trap cleanup EXIT
ip netns add $outer
ip -n $outer link set lo up
ip netns exec $outer sysctl -qw net.ipv4.ip_forward=1
www=$(mktemp -d)
trap 'cleanup; rm -rf "$www"' EXIT
serve() { # name address outer-address body
  local ns=$1 addr=$2 gw=$3
  ip netns add "$ns"
  ip link add "$ns" netns $outer type veth peer name eth0 netns "$ns"
  ip -n $outer addr add "$gw/24" dev "$ns"
  ip -n $outer link set "$ns" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" route add default via "$gw"
  mkdir -p "$www/$ns"
  echo "$4" > "$www/$ns/index.html"
  head -c 1048576 /dev/urandom > "$www/$ns/big.bin"
  ip netns exec "$ns" python3 -m http.server 80 --bind "$addr" --directory "$www/$ns" >/dev/null 2>&1 &
}
serve den-t-net1 198.51.100.10 198.51.100.1 "net1"
serve den-t-net2 203.0.113.10 203.0.113.1 "net2"
serve den-t-priv 10.99.0.10 10.99.0.1 "private"
for a in 198.51.100.10 203.0.113.10 10.99.0.10; do
  for i in $(seq 50); do ip netns exec $outer python3 -c "import urllib.request; urllib.request.urlopen('http://$a/', timeout=1)" 2>/dev/null && break; sleep 0.1; done
done
# `ip netns exec` gives the command a sysfs of its own, without the host's cgroup mounts:
# mount them again in its mount namespace, so VMs and routers get their cgroups as they do
# outside a namespace (nothing to mount on a host without them).
cg_mounts=$(findmnt -rn -t cgroup,cgroup2 -o TARGET,FSTYPE,OPTIONS 2>/dev/null || true)
ip netns exec $outer sh -c '
  if [ -n "$0" ]; then
    mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup 2>/dev/null || true
    echo "$0" | while read -r target fstype options; do
      mkdir -p "$target" 2>/dev/null; mount -t "$fstype" -o "$options" "$fstype" "$target" 2>/dev/null || true
    done
  fi
  exec "$@"' "$cg_mounts" "$@"
