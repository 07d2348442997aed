/**
 * The in-memory host's room: the real host's `Admission` over its sandboxes (an `off` one
 * holds only its disk, a paused one its memory and no vCPU), host memory and free disk as a
 * test says they are, the capacity report, and the inventory.
 */
import type { host } from "@den/protocol";
import { memoryHostKind } from "./memory-image.js";
import { Admission, diskOvercommit, memoryOvercommit, memoryReserveMb, type Capacity } from "../admission.js";
import { MIB, type HostState, type Shape } from "./host-state.js";
import type { MemoryTemplate } from "./memory-templates.js";

export class HostCapacity {
  readonly admission: Admission;
  /**
   * Memory something other than the sandboxes holds on the host (a test's stand-in for
   * another process): MemAvailable is what the sandboxes and it leave of the capacity and
   * its reserve, so a sandbox hibernated cold gives its memory back, as on a real host.
   */
  otherMb = 0;
  /** Free space on the host's disk. */
  freeDiskMb = 1024 * 1024;

  private readonly reserveMb: number;

  constructor(private readonly state: HostState, private readonly capacity: Capacity) {
    const reserveMb = (this.reserveMb = capacity.memoryReserveMb ?? memoryReserveMb());
    this.admission = new Admission(capacity, state.dataDir, () => this.held(), () => this.diskPromisedMb(), diskOvercommit(), capacity.memoryOvercommit ?? memoryOvercommit(), {
      availableMb: () => this.availableMb(), reserveMb,
    }, () => this.freeDiskMb);
  }

  /** MemAvailable: what the sandboxes and the other use leave of the capacity and its reserve. */
  availableMb(): number {
    return this.capacity.memoryMb + this.reserveMb - this.admission.used().memoryMb - this.otherMb;
  }

  report(): host.CapacityReport {
    return { capacity: this.admission.capacity, used: this.admission.used(), memory: this.admission.memoryState() };
  }

  /** The template a create names, and the shape it asks for. */
  shapeOf(spec: Omit<host.HostCreateSpec, "id">): { tpl: MemoryTemplate; shape: Shape } {
    const tpl = this.state.tpl.resolve(spec.template);
    return { tpl, shape: { vcpus: spec.vcpus ?? tpl.vcpus, memoryMb: spec.memoryMb ?? tpl.memoryMb, diskMb: spec.diskMb ?? tpl.diskMb } };
  }

  inventory(): host.HostInventory & { kind: host.HostKind } {
    const charges = this.admission.charges();
    return {
      instance: this.state.instance,
      vms: [...this.state.boxes.values()].map((s) => ({ id: s.id, state: s.state, cpuSeconds: this.state.cpuOf(s) ?? null, ...charges.get(s.id) })),
      snapshots: [...this.state.warm.keys()],
      capacity: this.report(),
      kind: memoryHostKind(),
    };
  }

  private held(): Map<string, { vcpus: number; memoryMb: number; paused: boolean }> {
    const out = new Map<string, { vcpus: number; memoryMb: number; paused: boolean }>();
    for (const s of this.state.boxes.values()) if (s.state !== "off") out.set(s.id, { vcpus: s.shape.vcpus, memoryMb: s.shape.memoryMb, paused: s.state === "paused" });
    return out;
  }

  /** What the sandboxes' disks may still grow by (each up to its size, less what it holds). */
  private diskPromisedMb(): number {
    let mb = 0;
    for (const s of this.state.boxes.values()) mb += Math.max(0, s.shape.diskMb - s.fs.usedBytes() / MIB);
    return mb;
  }
}
