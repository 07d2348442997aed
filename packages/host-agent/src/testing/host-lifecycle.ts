/**
 * The in-memory host's VM lifecycle: create, restore, destroy, warm/cold/disk hibernation
 * and their wakes, checkpoint, fork, resume, network policy, fence. Each step changes the
 * state in the order the real host does, and writes it (the state file) before the next
 * step can be reached, so a kill at a named fault point leaves what the real host would.
 */
import { DenError, type api, type host } from "@den/protocol";
import type { Faults } from "./faults.js";
import type { HostCapacity } from "./host-capacity.js";
import type { TestControls } from "./host-controls.js";
import type { Sandboxes } from "./host-sandboxes.js";
import { SNAPSHOT_ID, type HostState, type MemorySandbox } from "./host-state.js";
import type { StoreTransfers } from "./host-store.js";
import type { SandboxImage } from "./memory-image.js";

/** The runtime's bounds on a sandbox's disk. */
const MAX_DISK_MB = 256 * 1024;

export class Lifecycle {
  constructor(
    private readonly state: HostState,
    private readonly sandboxes: Sandboxes,
    private readonly capacity: HostCapacity,
    private readonly stored: StoreTransfers,
    private readonly faults: Faults,
    private readonly controls: TestControls,
  ) {}

  private get admission() {
    return this.capacity.admission;
  }

  /** A new running sandbox (of a size variant of the template if its shape is not the template's). */
  create(spec: host.HostCreateSpec): host.HostSandboxInfo {
    const { tpl, shape } = this.capacity.shapeOf(spec);
    const release = this.admission.reserve(spec.id, shape);
    try {
      return this.state.change(() => {
        const source = shape.vcpus === tpl.vcpus && shape.memoryMb === tpl.memoryMb ? tpl : this.state.tpl.variant(tpl, shape.vcpus, shape.memoryMb);
        const volumes = this.state.checkVolumes(spec.volumes);
        if (spec.diskMb !== undefined && (!Number.isInteger(spec.diskMb) || spec.diskMb < tpl.diskMb || spec.diskMb > MAX_DISK_MB)) {
          throw new DenError("invalid_argument", `diskMb must be an integer in ${tpl.diskMb}..${MAX_DISK_MB} (the source's disk is ${tpl.diskMb} MiB)`);
        }
        const s = this.sandboxes.make(spec.id, { name: source.name, version: source.version }, shape, source.guest, volumes);
        this.state.network(s, spec.network);
        return { ...this.state.info(s), template: tpl.name, templateVersion: tpl.version };
      });
    } finally {
      release();
    }
  }

  async restore(id: string, snapshot: host.StoredRef, network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo> {
    const mounts = this.state.checkVolumes(volumes);
    this.sandboxes.destroy(id);
    const made = await this.stored.restoreStored(id, snapshot, mounts);
    this.state.change(() => this.state.network(this.state.get(id), network));
    return made;
  }

  destroy(id: string): void {
    this.sandboxes.destroy(id);
  }

  /** Warm: the VM pauses in place; its local snapshot (for a VM that dies while paused) is kept as `snapshotId`. */
  hibernateWarm(id: string, snapshotId: string): void {
    const s = this.state.get(id);
    this.state.requireVm(s);
    this.state.change(() => {
      if (s.state === "running") this.state.setState(s, "paused");
      // The real host writes it behind the answer and warns if it cannot; so does this one.
      if (!SNAPSHOT_ID.test(snapshotId) || this.state.warm.has(snapshotId)) {
        process.emitWarning(`sandbox ${id}: its warm snapshot failed (snapshot ${snapshotId} is not a new snapshot id); it stays paused in place`, "DenWarmSnapshotWarning");
        return;
      }
      this.state.warm.set(snapshotId, JSON.stringify(this.state.image(s, s.volumes)));
    });
  }

  /**
   * Cold, the first half: the sandbox's state (or its warm snapshot) goes to the store; the
   * VM stays paused until the control plane destroys it. The guest lets go of its volumes
   * (nothing holds them in memory); on failure a sandbox that was running runs again. The
   * pause is on disk before `hibernate-cold-after-snapshot`, the stored copy complete (its
   * manifest last) before the answer.
   */
  async upload(id: string, to: host.StoredRef, fromWarm?: string): Promise<{ storedBytes: number; heldVolumes?: string[]; digests: host.StoredDigests }> {
    const s = this.state.boxes.get(id);
    const alive = s?.state === "running" || s?.state === "paused";
    // A warm VM with volumes lets go of them in a snapshot of its own, as from running.
    const release = alive && !!s?.volumes.length;
    const warm = fromWarm && !release && (this.state.warm.has(fromWarm) || !alive) ? fromWarm : undefined;
    const wasRunning = s?.state === "running";
    let image: SandboxImage;
    if (warm) {
      const w = this.state.warm.get(warm);
      if (!w) throw new DenError("snapshot_not_found", `snapshot ${warm} does not exist`);
      image = { ...(JSON.parse(w) as SandboxImage), mounts: [] };
    } else {
      const live = this.state.get(id);
      this.state.requireVm(live);
      if (wasRunning) this.state.change(() => this.state.setState(live, "paused"));
      image = this.state.image(live, []);
    }
    try {
      this.faults.at("hibernate-cold-after-snapshot");
      return await this.stored.toStore(image, id, to);
    } catch (e) {
      // Nothing is lost: the VM is still there, paused; put it back to work.
      if (wasRunning && s && !s.destroyed && s.state === "paused") this.state.change(() => this.state.setState(s, "running"));
      throw e;
    }
  }

  wakeWarm(id: string, snapshotId: string | null): void {
    const s = this.state.boxes.get(id);
    if (s && (s.state === "running" || s.state === "paused")) {
      if (s.state === "paused") this.state.change(() => this.state.setState(s, "running"));
      return;
    }
    const w = snapshotId ? this.state.warm.get(snapshotId) : undefined;
    if (!w) throw new DenError("sandbox_not_running", `sandbox ${id} has no VM and no snapshot to wake from`);
    // The VM died while warm: back from its snapshot under the same id, its volumes in their slots.
    const image = JSON.parse(w) as SandboxImage;
    const volumes = s?.volumes ?? image.mounts;
    this.sandboxes.destroy(id);
    const release = this.admission.reserve(id, image.shape);
    try {
      this.sandboxes.make(id, image.template, image.shape, image.guest, volumes);
    } finally {
      release();
    }
  }

  /** Disk: the VM shuts down, its files kept; its processes (its memory) are gone, as after a reboot. */
  hibernateDisk(id: string): void {
    const s = this.state.get(id);
    if (s.state === "off") return;
    if (s.state === "stopped") throw new DenError("qemu_error", `sandbox ${id}: its QEMU has exited`);
    this.state.change(() => {
      this.state.setState(s, "off");
      s.guest.lose(new DenError("agent_unavailable", "agent connection closed"));
      this.state.network(s, undefined);
    });
    this.controls.dropListeners(id);
  }

  wakeDisk(id: string): void {
    const s = this.state.boxes.get(id);
    if (!s) throw new DenError("sandbox_not_running", `sandbox ${id} has no disk on this host to boot from`);
    if (s.state === "running" || s.state === "stopped") return;
    // Room first: its memory and vCPUs count again from the moment it boots.
    const release = this.admission.reserve(id, { vcpus: s.shape.vcpus, memoryMb: s.shape.memoryMb });
    try {
      if (s.state !== "off") throw new DenError("invalid_state", `sandbox ${id} is ${s.state}; only a shut-down sandbox boots from its disk`);
      this.sandboxes.boot(s);
    } finally {
      release();
    }
  }

  async checkpoint(id: string, to: host.StoredRef): Promise<{ pauseMs: number; storedBytes: number; digests: host.StoredDigests }> {
    const s = this.state.get(id);
    this.state.requireVm(s);
    return { pauseMs: 0, ...(await this.stored.toStore(this.state.image(s, s.volumes), id, to)) };
  }

  fork(id: string, children: string[], network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): host.HostSandboxInfo[] {
    const parent = this.state.get(id);
    const mounts = this.state.checkVolumes(volumes);
    const release = this.admission.reserve(undefined, { vcpus: parent.shape.vcpus, memoryMb: parent.shape.memoryMb }, children.length);
    try {
      if (!Number.isInteger(children.length) || children.length < 1 || children.length > 16) throw new DenError("invalid_argument", "fork count must be an integer in 1..16");
      this.state.requireVm(parent);
      // Each child: a deep copy of the parent's files and processes (the parent's mounts are not theirs).
      const image = parent.guest.image();
      // (The real host's children QEMUs are started here, none of them a sandbox yet.)
      this.faults.at("fork-children-started");
      return this.state.change(() => {
        const made: MemorySandbox[] = [];
        try {
          for (const child of children) {
            const c = this.sandboxes.make(child, parent.template, parent.shape, image, mounts);
            this.state.network(c, network);
            this.controls.copyListeners(id, child);
            made.push(c);
          }
        } catch (e) {
          for (const c of made) this.sandboxes.destroy(c.id);
          throw e;
        }
        return made.map((c) => this.state.info(c));
      });
    } finally {
      release();
    }
  }

  resume(id: string): void {
    const s = this.state.boxes.get(id);
    if (s?.state === "paused") this.state.change(() => this.state.setState(s, "running"));
  }

  setNetwork(id: string, policy: api.NetworkPolicy): void {
    const s = this.state.get(id);
    if (JSON.stringify(s.network) !== JSON.stringify(policy.egress === "none" ? undefined : policy)) this.state.change(() => this.state.network(s, policy));
  }

  /** Its lease ran out: every running VM is paused (never to run twice); the control plane resumes those it holds. */
  fence(): string[] {
    return this.state.change(() => {
      const paused: string[] = [];
      for (const s of this.state.boxes.values()) {
        if (s.state !== "running") continue;
        this.state.setState(s, "paused");
        paused.push(s.id);
      }
      return paused;
    });
  }
}
