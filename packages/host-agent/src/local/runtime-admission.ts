/** Admission over this machine's runtime: what its VMs hold now, measured as the capacity says. */
import type { Runtime } from "@den/runtime";
import { Admission, diskOvercommit, diskPromisedMb, memoryOvercommit, memoryReserveMb, type Capacity } from "../admission.js";
import { PrivateMemoryCache, availableMemoryMb } from "../host-memory.js";

export function runtimeAdmission(rt: Runtime, capacity: Capacity): Admission {
  // A shut-down sandbox (a disk hibernation) holds only its disk: its shape counts again when it boots.
  // A warm-hibernated (paused) VM holds memory but no vCPU; with a memory overcommit, each VM is charged by what it holds privately.
  const overcommit = capacity.memoryOvercommit ?? memoryOvercommit();
  const held = new PrivateMemoryCache();
  return new Admission(capacity, rt.dataDir, () => new Map(rt.list().filter((s) => s.state !== "destroyed" && s.state !== "stopped").map((s) => [s.id, {
    vcpus: s.info.vcpus, memoryMb: s.info.memoryMb, paused: s.state === "paused",
    ...(overcommit > 1 && s.pid ? { privateMb: held.get(s.pid) } : {}),
  }])), () => diskPromisedMb(rt.list()), diskOvercommit(), overcommit, { availableMb: () => availableMemoryMb(), reserveMb: capacity.memoryReserveMb ?? memoryReserveMb() });
}
