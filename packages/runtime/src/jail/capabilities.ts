import { readFileSync } from "node:fs";

/**
 * The capabilities a process that runs VMs (`den serve` in single-node mode, `den host run`)
 * uses, and none other: network namespaces, veth and nftables (NET_ADMIN, SYS_ADMIN for
 * `ip netns`), Den's resolver on each link's port 53 (NET_BIND_SERVICE), QEMU's drop to each
 * VM's uid and chroot (SETUID, SETGID, SYS_CHROOT), the VMs' files and processes, which belong
 * to those uids (CHOWN, FOWNER, DAC_OVERRIDE, KILL, SYS_PTRACE for /proc/<pid>/root).
 * `scripts/start.sh`, the test script's VM stages and
 * the host agent's systemd unit run Den with exactly this bounding set, so a missing one fails
 * the suite. A control plane without VMs needs none.
 */
export const HOST_CAPABILITIES = [
  "chown", "dac_override", "fowner", "kill", "setgid", "setuid", "net_bind_service", "net_admin",
  "sys_chroot", "sys_ptrace", "sys_admin",
] as const;

/** Linux capability names by number (capability.h). */
const CAP_NAMES = [
  "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
  "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
  "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
  "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
  "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
  "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore",
];

/** `setpriv --bounding-set` argument that keeps exactly HOST_CAPABILITIES. */
export function boundingSetArg(): string {
  return ["-all", ...HOST_CAPABILITIES.map((c) => `+${c}`)].join(",");
}

/** Names of the capabilities in a /proc status mask (hex), lowest first; unknown bits as `cap_<n>`. */
export function capabilityNames(hexMask: string): string[] {
  const mask = BigInt(`0x${hexMask}`);
  const names: string[] = [];
  for (let bit = 0; bit < 64; bit++) if ((mask >> BigInt(bit)) & 1n) names.push(CAP_NAMES[bit] ?? `cap_${bit}`);
  return names;
}

/** A process's capabilities by set (`CapEff`, `CapBnd`, ...), from /proc/<pid>/status. */
export function processCapabilities(pid: number | "self" = "self"): Record<"CapInh" | "CapPrm" | "CapEff" | "CapBnd" | "CapAmb", string[]> {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const read = (field: string) => capabilityNames(new RegExp(`^${field}:\\s*([0-9a-f]+)$`, "m").exec(status)?.[1] ?? "0");
  return { CapInh: read("CapInh"), CapPrm: read("CapPrm"), CapEff: read("CapEff"), CapBnd: read("CapBnd"), CapAmb: read("CapAmb") };
}

/** Capabilities this process holds (its permitted set) that running VMs does not need. */
export function surplusCapabilities(pid: number | "self" = "self"): string[] {
  return processCapabilities(pid).CapPrm.filter((c) => !(HOST_CAPABILITIES as readonly string[]).includes(c));
}
