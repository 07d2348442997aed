/** A runtime VM as the protocol shows it. */
import type { host } from "@den/protocol";
import type { Sandbox as VmSandbox } from "@den/runtime";

export function sandboxInfo(sbx: VmSandbox): host.HostSandboxInfo {
  const i = sbx.info;
  return { template: i.template.name, templateVersion: i.template.version, vcpus: i.vcpus, memoryMb: i.memoryMb, diskMb: i.diskMb };
}

/** Its state as the inventory says it. */
export function vmState(s: VmSandbox): host.HostInventory["vms"][number]["state"] {
  if (s.state === "stopped") return "off";
  if (!s.vmAlive()) return "stopped";
  return s.state === "paused" ? "paused" : "running";
}
