/**
 * `HostVms` on this machine: each sandbox's QEMU VM through the runtime, admitted first,
 * its network brought up with it; once per operation id.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { faultPoint } from "@den/store";
import { DenError, type api, type host } from "@den/protocol";
import type { Runtime } from "@den/runtime";
import type { Admission } from "../admission.js";
import type { OpJournal } from "../op-journal.js";
import type { TemplateCache } from "./template-cache.js";
import type { Transfers } from "./transfers.js";
import { sandboxInfo } from "./vm-info.js";
import type { VolumeImages } from "./volume-images.js";
import type { WarmSnapshots } from "./warm-snapshots.js";

export class LocalVms implements host.HostVms {
  constructor(
    private readonly rt: Runtime,
    private readonly journal: OpJournal,
    private readonly admission: Admission,
    private readonly templates: TemplateCache,
    private readonly images: VolumeImages,
    private readonly warm: WarmSnapshots,
    private readonly transfers: Transfers,
  ) {}

  async checkShape(shape: host.Shape): Promise<void> {
    this.admission.check(shape);
  }

  async checkCreate(spec: Omit<host.HostCreateSpec, "id">): Promise<void> {
    this.admission.check((await this.templates.shapeOf(spec)).shape);
  }

  create(op: string, spec: host.HostCreateSpec): Promise<host.HostSandboxInfo> {
    return this.journal.once(op, () => this.createVm(spec));
  }

  /** A create's work; `pooled: false` for a build's one-off VMs (no QEMUs kept ready for their templates). */
  async createVm(spec: host.HostCreateSpec, pooled = true): Promise<host.HostSandboxInfo> {
    const { tpl, shape } = await this.templates.shapeOf(spec);
    const { vcpus, memoryMb } = shape;
    const release = this.admission.reserve(spec.id, shape);
    try {
      // A template snapshot fixes vCPUs and memory: another shape restores a snapshot of that
      // shape, baked once on first use (concurrent first uses share one bake).
      const source = vcpus === tpl.manifest.vm.vcpus && memoryMb === tpl.manifest.vm.memoryMb ? tpl : await this.templates.variant(tpl, vcpus, memoryMb);
      const volumes = this.images.requests(spec.volumes);
      const sbx = await this.rt.create({ id: spec.id, template: `${source.name}@${source.version}`, ...(spec.diskMb ? { diskMb: spec.diskMb } : {}), ...(volumes.length ? { volumes } : {}), pooled });
      await this.withNetwork(spec.id, spec.network);
      return { ...sandboxInfo(sbx), template: tpl.name, templateVersion: tpl.version };
    } finally {
      release();
    }
  }

  /** Brings up a new VM's network; one that cannot come up takes the VM with it. */
  private async withNetwork(id: string, policy: api.NetworkPolicy | undefined): Promise<void> {
    if (!policy || policy.egress === "none") return;
    try {
      await this.setNetwork(id, policy);
    } catch (e) {
      await this.destroy(id).catch(() => undefined);
      throw e;
    }
  }

  async setNetwork(id: string, policy: api.NetworkPolicy): Promise<void> {
    await this.rt.setNetwork(id, {
      egress: policy.egress, allow: policy.allow ?? [], deny: policy.deny ?? [],
      maxConnections: policy.max_connections ?? null, bandwidthMbps: policy.bandwidth_mbps ?? null,
    });
  }

  async networkRefusals(id: string): Promise<host.Refusals | undefined> {
    return this.rt.has(id) ? this.rt.networkRefusals(id) : undefined;
  }

  async destroy(id: string): Promise<void> {
    await this.warm.cancel(id);
    if (this.rt.has(id)) await this.rt.get(id).destroy();
    await rm(join(this.rt.dataDir, "sandboxes", id), { recursive: true, force: true });
  }

  /**
   * Warm: the VM pauses in place, and that is the hibernation; its local snapshot (for a VM
   * that dies while paused, and for a later move to the store) is written behind the answer,
   * while nothing runs. A wake meanwhile cancels it; a move to the store waits for it.
   */
  hibernateWarm(op: string, id: string, snapshotId: string): Promise<void> {
    return this.journal.once(op, async () => {
      await this.rt.get(id).pause();
      this.warm.write(id, snapshotId);
    });
  }

  upload(op: string, id: string, to: host.StoredRef, fromWarm?: string): Promise<{ storedBytes: number; heldVolumes?: string[]; digests: host.StoredDigests }> {
    return this.journal.once(op, () => this.transfers.upload(id, to, fromWarm));
  }

  wakeWarm(op: string, id: string, snapshotId: string | null): Promise<void> {
    return this.journal.once(op, async () => {
      await this.warm.cancel(id);
      if (this.rt.has(id) && this.rt.get(id).vmAlive()) {
        await this.rt.get(id).resume();
        return;
      }
      if (!snapshotId || !this.rt.hasSnapshot(snapshotId)) throw new DenError("sandbox_not_running", `sandbox ${id} has no VM and no snapshot to wake from`);
      // The VM died while warm: bring it back from its snapshot under the same id, its volumes
      // in the slots they had (the snapshot's guest still mounts them).
      const volumes = this.rt.has(id) ? (this.rt.get(id).info.volumes ?? []).map(({ slot: _, ...v }) => v) : [];
      await this.destroy(id);
      const release = this.admission.reserve(id, (await this.rt.getSnapshot(snapshotId)).manifest.vm);
      try {
        await this.rt.restore(snapshotId, { id, ...(volumes.length ? { volumes } : {}) });
      } finally {
        release();
      }
    });
  }

  hibernateDisk(op: string, id: string): Promise<void> {
    return this.journal.once(op, async () => {
      // From warm: its memory snapshot is of no use once the disk holds it.
      await this.warm.cancel(id);
      await this.rt.stopKeepingDisk(id);
    });
  }

  wakeDisk(op: string, id: string): Promise<void> {
    return this.journal.once(op, async () => {
      if (!this.rt.has(id)) throw new DenError("sandbox_not_running", `sandbox ${id} has no disk on this host to boot from`);
      const sbx = this.rt.get(id);
      if (sbx.state === "running") return;
      // Room first: its memory and vCPUs count again from the moment it boots.
      const release = this.admission.reserve(id, { vcpus: sbx.info.vcpus, memoryMb: sbx.info.memoryMb });
      try {
        await this.rt.bootFromDisk(id);
      } finally {
        release();
      }
    });
  }

  restore(op: string, id: string, snapshot: host.StoredRef, network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo> {
    return this.journal.once(op, async () => {
      const requests = this.images.requests(volumes);
      await this.destroy(id);
      const made = await this.transfers.restoreStored(id, snapshot, requests);
      await this.withNetwork(id, network);
      return made;
    });
  }

  checkpoint(op: string, id: string, to: host.StoredRef): Promise<{ pauseMs: number; storedBytes: number; digests: host.StoredDigests }> {
    return this.journal.once(op, () => this.transfers.checkpoint(id, to));
  }

  fork(op: string, id: string, children: string[], network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo[]> {
    return this.journal.once(op, async () => {
      const p = this.rt.get(id).info;
      const requests = this.images.requests(volumes);
      const release = this.admission.reserve(undefined, { vcpus: p.vcpus, memoryMb: p.memoryMb }, children.length);
      try {
        const kids = await this.rt.fork(id, children.length, { ids: children, reached: faultPoint, ...(requests.length ? { volumes: requests } : {}) });
        try {
          // Each child gets a network of its own with the parent's policy.
          if (network && network.egress !== "none") for (const k of kids) await this.setNetwork(k.id, network);
        } catch (e) {
          for (const k of kids) await this.destroy(k.id).catch(() => undefined);
          throw e;
        }
        return kids.map(sandboxInfo);
      } finally {
        release();
      }
    });
  }

  async resume(id: string): Promise<void> {
    if (this.rt.has(id) && this.rt.get(id).state === "paused") await this.rt.get(id).resume();
  }

  /**
   * Its lease ran out: every running VM is paused, so a sandbox the control plane may have
   * declared lost (and recovered elsewhere) never runs twice. The control plane resumes
   * those it still holds to be here when it hears from this host again.
   */
  async fence(): Promise<string[]> {
    const paused: string[] = [];
    for (const s of this.rt.list()) {
      if (s.state !== "running") continue;
      await s.pause().then(() => paused.push(s.id), () => undefined);
    }
    return paused;
  }
}
