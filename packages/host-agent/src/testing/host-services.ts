/**
 * The in-memory host's sub-services of the contract: each call in its frame (logged under
 * its route's name, which faults are armed by; once per operation id where the contract
 * says so), done by the part whose job it is.
 */
import type { api, host } from "@den/protocol";
import { BuildLogs } from "../build/build-logs.js";
import type { HostCapacity } from "./host-capacity.js";
import type { CallFrame } from "./host-frame.js";
import type { Lifecycle } from "./host-lifecycle.js";
import type { StoreTransfers } from "./host-store.js";
import type { TemplateOps } from "./host-templates.js";
import type { VolumeOps } from "./host-volumes.js";
import type { HostState } from "./host-state.js";

export class FramedVms implements host.HostVms {
  constructor(private readonly frame: CallFrame, private readonly state: HostState, private readonly room: HostCapacity, private readonly life: Lifecycle) {}

  checkShape(shape: host.Shape): Promise<void> {
    return this.frame.plain("checkShape", [shape], () => this.room.admission.check(shape));
  }

  checkCreate(spec: Omit<host.HostCreateSpec, "id">): Promise<void> {
    return this.frame.plain("checkCreate", [spec], () => this.room.admission.check(this.room.shapeOf(spec).shape));
  }

  create(op: string, spec: host.HostCreateSpec): Promise<host.HostSandboxInfo> {
    return this.frame.op("create", [op, spec], op, () => this.life.create(spec));
  }

  restore(op: string, id: string, snapshot: host.StoredRef, network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo> {
    return this.frame.op("restore", [op, id, snapshot, network, volumes], op, () => this.life.restore(id, snapshot, network, volumes));
  }

  destroy(id: string): Promise<void> {
    return this.frame.plain("destroy", [id], () => this.life.destroy(id));
  }

  /** Warm: the VM pauses in place; its local snapshot (for a VM that dies while paused) is kept as `snapshotId`. */
  hibernateWarm(op: string, id: string, snapshotId: string): Promise<void> {
    return this.frame.op("hibernateWarm", [op, id, snapshotId], op, () => this.life.hibernateWarm(id, snapshotId));
  }

  /** Cold, the first half: to the store, the VM left paused (host-lifecycle.ts). */
  upload(op: string, id: string, to: host.StoredRef, fromWarm?: string): Promise<{ storedBytes: number; heldVolumes?: string[]; digests?: host.StoredDigests }> {
    return this.frame.op("upload", [op, id, to, fromWarm], op, () => this.life.upload(id, to, fromWarm));
  }

  wakeWarm(op: string, id: string, snapshotId: string | null): Promise<void> {
    return this.frame.op("wakeWarm", [op, id, snapshotId], op, () => this.life.wakeWarm(id, snapshotId));
  }

  /** Disk: the VM shuts down, its files kept; its processes (its memory) are gone, as after a reboot. */
  hibernateDisk(op: string, id: string): Promise<void> {
    return this.frame.op("hibernateDisk", [op, id], op, () => this.life.hibernateDisk(id));
  }

  wakeDisk(op: string, id: string): Promise<void> {
    return this.frame.op("wakeDisk", [op, id], op, () => this.life.wakeDisk(id));
  }

  checkpoint(op: string, id: string, to: host.StoredRef): Promise<{ pauseMs: number; storedBytes: number; digests?: host.StoredDigests }> {
    return this.frame.op("checkpoint", [op, id, to], op, () => this.life.checkpoint(id, to));
  }

  fork(op: string, id: string, children: string[], network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo[]> {
    return this.frame.op("fork", [op, id, children, network, volumes], op, () => this.life.fork(id, children, network, volumes));
  }

  resume(id: string): Promise<void> {
    return this.frame.plain("resume", [id], () => this.life.resume(id));
  }

  setNetwork(id: string, policy: api.NetworkPolicy): Promise<void> {
    return this.frame.plain("setNetwork", [id, policy], () => this.life.setNetwork(id, policy));
  }

  networkRefusals(id: string): Promise<host.Refusals | undefined> {
    return this.frame.plain("networkRefusals", [id], () => {
      const s = this.state.boxes.get(id);
      return s?.network ? { ...s.refused } : undefined;
    });
  }

  /** Its lease ran out: every running VM is paused (never to run twice); the control plane resumes those it holds. */
  async fence(): Promise<string[]> {
    return this.life.fence();
  }
}

export class FramedVolumes implements host.HostVolumes {
  constructor(private readonly frame: CallFrame, private readonly vols: VolumeOps) {}

  create(op: string, id: string, sizeMb: number): Promise<void> {
    return this.frame.op("createVolume", [op, id, sizeMb], op, () => this.vols.create(id, sizeMb));
  }

  delete(id: string): Promise<void> {
    return this.frame.plain("deleteVolume", [id], () => this.vols.delete(id));
  }

  /** Grown in a helper VM of its own that mounts it read-write, gone after. */
  grow(op: string, id: string, sizeMb: number, helper: string): Promise<void> {
    return this.frame.op("growVolume", [op, id, sizeMb, helper], op, () => this.vols.grow(id, sizeMb, helper));
  }

  park(op: string, id: string, to: host.StoredRef): Promise<{ storedBytes: number; digests?: host.StoredDigests }> {
    return this.frame.op("parkVolume", [op, id, to], op, () => this.vols.park(id, to));
  }

  fetch(op: string, id: string, from: host.StoredRef): Promise<void> {
    return this.frame.op("fetchVolume", [op, id, from], op, () => this.vols.fetch(id, from));
  }

  images(): Promise<host.VolumeImage[]> {
    return this.frame.plain("volumeImages", [], () => this.vols.images());
  }

  dropImage(id: string, inode: number): Promise<boolean> {
    return this.frame.plain("dropVolumeImage", [id, inode], () => this.vols.drop(id, inode));
  }
}

export class FramedTemplates implements host.HostTemplates {
  private readonly buildLogs = new BuildLogs();

  constructor(private readonly frame: CallFrame, private readonly tpls: TemplateOps, private readonly stored: StoreTransfers) {}

  list(): Promise<host.HostTemplate[]> {
    return this.frame.plain("templates", [], () => this.tpls.list());
  }

  delete(name: string): Promise<void> {
    return this.frame.plain("deleteTemplate", [name], () => this.tpls.delete(name));
  }

  build(op: string, spec: host.TemplateBuildSpec): Promise<host.BuiltTemplate> {
    return this.frame.op("buildTemplate", [op, spec], op, async () => {
      const { log } = this.buildLogs.start(op);
      try {
        const t = await this.tpls.build(spec, log);
        log(`template ${t.name}@${t.version}${t.reused ? " (built before)" : ""}`);
        return t;
      } catch (e) {
        log(`build failed: ${(e as Error).message}`, "error");
        throw e;
      } finally {
        this.buildLogs.end(op);
      }
    });
  }

  buildLog(op: string, from: number): Promise<host.BuildLogPage> {
    return this.frame.plain("buildLog", [op, from], async () => this.buildLogs.page(op, from));
  }

  cancelBuild(op: string): Promise<void> {
    return this.frame.plain("cancelBuild", [op], async () => this.buildLogs.cancel(op));
  }

  publish(op: string, name: string, version: string, key: string): Promise<{ storedBytes: number; digests?: host.StoredDigests }> {
    return this.frame.op("publishTemplate", [op, name, version, key], op, () => this.stored.publishTemplate(name, version, key));
  }

  fetch(op: string, name: string, version: string, key: string, current: boolean, digests?: host.StoredDigests): Promise<void> {
    return this.frame.op("fetchTemplate", [op, name, version, key, current, digests], op, () => this.stored.fetchTemplate(name, version, key, current, digests));
  }
}

export class FramedSnapshots implements host.HostSnapshots {
  constructor(private readonly frame: CallFrame, private readonly stored: StoreTransfers) {}

  dropLocal(snapshotId: string): Promise<void> {
    return this.frame.plain("dropLocalSnapshot", [snapshotId], () => this.stored.dropLocalSnapshot(snapshotId));
  }

  unpin(snapshotId: string): Promise<void> {
    return this.frame.plain("unpin", [snapshotId], () => this.stored.unpin(snapshotId));
  }

  collect(snapshots: string[], pins: host.TemplatePin[]): Promise<void> {
    return this.frame.plain("collectLocal", [snapshots, pins], () => this.stored.collectLocal(snapshots, pins));
  }
}
