import { VmCgroups } from "./cgroups.js";

let detected: VmCgroups | undefined | null = null;

/**
 * This host's cgroups for VMs, found once; none where the cgroup fs cannot be written or
 * with `DEN_VM_CGROUPS=off` (then VMs run without host limits).
 */
export function hostCgroups(): VmCgroups | undefined {
  if (process.env.DEN_VM_CGROUPS === "off") return undefined;
  if (detected === null) detected = (process.getuid?.() === 0 ? VmCgroups.detect() : undefined);
  return detected;
}
