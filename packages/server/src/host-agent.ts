import { createHash } from "node:crypto";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { deleteStoredSnapshot, downloadSnapshot, listStoredSnapshotIds, readStoredManifest, storedBytes, uploadSnapshot, type ObjectStore, type TransferProgress } from "@den/store";
import { DenError, type api } from "@den/protocol";
import { Runtime, bakeFromSandbox, bakeVariant, newId, reuseTemplate, type Sandbox as VmSandbox, type SnapshotInfo, type SnapshotManifest, type TemplateInfo } from "@den/runtime";
import { Admission, type Capacity, type Shape } from "./capacity.js";

export interface HostCreateSpec {
  id: string;
  template: string;
  vcpus?: number;
  memoryMb?: number;
  diskMb?: number;
}

/** A template made from a sandbox: a source (template or stored checkpoint) plus setup commands. */
export interface TemplateBuildSpec {
  name: string;
  fromTemplate?: string;
  fromCheckpoint?: string;
  setup: string[];
  setupTimeoutSeconds: number;
}

export interface HostSandboxInfo {
  template: string;
  templateVersion: string;
  vcpus: number;
  memoryMb: number;
  diskMb: number;
}

/** Progress of one object of a snapshot moving to or from the store. */
export interface TransferEvent {
  sandbox: string;
  snapshot: string;
  direction: "upload" | "download";
  file: string;
  bytes: number;
  total: number | null;
  done: boolean;
}

/** At most one report a second per transfer, plus the last one. */
function throttled(emit: (p: TransferProgress) => void): (p: TransferProgress) => void {
  let last = 0;
  return (p) => {
    const done = p.total !== undefined && p.bytes >= p.total;
    if (!done && Date.now() - last < 1000) return;
    last = Date.now();
    emit(p);
  };
}

/**
 * What the control plane asks of the machine that runs sandboxes. In single-node mode
 * it is this process (LocalHostAgent); a multi-host deployment serves the same interface
 * over the network. The control plane never touches QEMU itself.
 */
export interface HostAgent {
  readonly instance: string;
  create(spec: HostCreateSpec): Promise<HostSandboxInfo>;
  /** Throws `capacity_exhausted` if a create of this spec would not fit now (checked again by `create`). */
  checkCreate(spec: Omit<HostCreateSpec, "id">): Promise<void>;
  /** Throws `capacity_exhausted` if a VM of this shape would not fit now. */
  checkCapacity(shape: Shape): void;
  /** What this host may hold and what it holds now. */
  capacity(): { capacity: Capacity; used: Shape & { sandboxes: number } };
  destroy(id: string): Promise<void>;
  /**
   * warm: snapshot (kept on this host) + pause in place. cold: snapshot uploaded to the
   * snapshot store, then the VM and every local file of it are gone. Returns the snapshot id.
   */
  hibernate(id: string, mode: "warm" | "cold", warmSnapshot?: string): Promise<string>;
  /** warm: resume in place, or restore from the local snapshot if the VM died. cold: restore from the store. */
  wake(id: string, snapshotId: string | null, mode: "warm" | "cold"): Promise<void>;
  dropSnapshot(snapshotId: string, mode: "warm" | "cold"): Promise<void>;
  /** A durable checkpoint in the store; the sandbox keeps running. */
  checkpoint(id: string): Promise<{ snapshotId: string; pauseMs: number; storedBytes: number }>;
  /** A new sandbox `id` from a stored snapshot (checkpoint). */
  restoreStored(id: string, snapshotId: string): Promise<HostSandboxInfo>;
  fork(id: string, count: number): Promise<Array<{ id: string } & HostSandboxInfo>>;
  /** Ids of the sandboxes whose VMs run (or are paused) on this host. */
  running(): string[];
  /** Whether the sandbox's VM process exists on this host. */
  alive(id: string): boolean;
  /** Whether a sandbox's VM is executing or frozen; undefined if this host has none. */
  vmState(id: string): "running" | "paused" | undefined;
  /** Unfreezes a VM frozen by a hibernate whose record never made it to the database. */
  resume(id: string): Promise<void>;
  /** Host CPU seconds used by the sandbox's VM, if it runs. */
  cpuSeconds(id: string): number | undefined;
  /**
   * Gives a running sandbox this network policy (`none` takes its network away). Takes
   * effect at once; a no-op if it already has exactly this policy.
   */
  setNetwork(id: string, policy: api.NetworkPolicy): Promise<void>;
  /** Refused connection attempts since its network came up; undefined if it has none here. */
  networkRefusals(id: string): Promise<api.NetworkStatus["refused"] | undefined>;
  /** The guest side: exec, files, processes. */
  guest(id: string): VmSandbox;
  templates(): Promise<TemplateInfo[]>;
  /** Retires a template and its size variants (versions in use stay until nothing uses them). */
  deleteTemplate(name: string): Promise<void>;
  /** Builds (or finds, if the same recipe was built before) a template version and makes it current. */
  buildTemplate(spec: TemplateBuildSpec): Promise<TemplateInfo & { reused: boolean }>;
  /** Bytes a snapshot occupies in the store. */
  storedBytes(snapshotId: string): Promise<number>;
  /** Deletes every snapshot (stored or local) and template pin that is not in `referenced`. */
  collectSnapshots(referenced: Set<string>): Promise<void>;
  /** Called as snapshots move to and from the store. */
  onTransfer: ((t: TransferEvent) => void) | undefined;
  close(): void;
}

const DOWNLOAD_PREFIX = "download-";

function info(sbx: VmSandbox): HostSandboxInfo {
  const i = sbx.info;
  return { template: i.template.name, templateVersion: i.template.version, vcpus: i.vcpus, memoryMb: i.memoryMb, diskMb: i.diskMb };
}

export class LocalHostAgent implements HostAgent {
  private bakes = new Map<string, Promise<TemplateInfo>>();
  private builds = new Map<string, Promise<unknown>>();
  onTransfer: ((t: TransferEvent) => void) | undefined;

  private progress(sandbox: string, snapshot: string, direction: TransferEvent["direction"]): (p: TransferProgress) => void {
    return throttled((p) => this.onTransfer?.({
      sandbox, snapshot, direction, file: p.key.slice(p.key.lastIndexOf("/") + 1), bytes: p.bytes, total: p.total ?? null,
      done: p.total !== undefined && p.bytes >= p.total,
    }));
  }

  private readonly admission: Admission;

  private constructor(private readonly rt: Runtime, readonly store: ObjectStore, capacity: Capacity) {
    this.admission = new Admission(capacity, rt.dataDir, () => new Map(rt.list().filter((s) => s.state !== "destroyed").map((s) => [s.id, { vcpus: s.info.vcpus, memoryMb: s.info.memoryMb }])));
  }

  static async open(dataDir: string, store: ObjectStore, capacity: Capacity): Promise<LocalHostAgent> {
    const rt = await Runtime.open({ dataDir });
    // Downloads a crash interrupted: the store still has the snapshot.
    for (const d of await readdir(dataDir)) if (d.startsWith(DOWNLOAD_PREFIX)) await rm(join(dataDir, d), { recursive: true, force: true });
    return new LocalHostAgent(rt, store, capacity);
  }

  capacity(): { capacity: Capacity; used: Shape & { sandboxes: number } } {
    return { capacity: this.admission.capacity, used: this.admission.used() };
  }

  private async shapeOf(spec: Omit<HostCreateSpec, "id">): Promise<{ tpl: TemplateInfo; shape: Shape }> {
    const tpl = await this.rt.templates.resolve(spec.template);
    return { tpl, shape: { vcpus: spec.vcpus ?? tpl.manifest.vm.vcpus, memoryMb: spec.memoryMb ?? tpl.manifest.vm.memoryMb } };
  }

  checkCapacity(shape: Shape): void {
    this.admission.check(shape);
  }

  async checkCreate(spec: Omit<HostCreateSpec, "id">): Promise<void> {
    this.admission.check((await this.shapeOf(spec)).shape);
  }

  get instance(): string {
    return this.rt.instance;
  }

  async create(spec: HostCreateSpec): Promise<HostSandboxInfo> {
    const { tpl, shape } = await this.shapeOf(spec);
    const { vcpus, memoryMb } = shape;
    const release = this.admission.reserve(spec.id, shape);
    try {
      // A template snapshot fixes vCPUs and memory: another shape restores a snapshot of that
      // shape, baked once on first use (concurrent first uses share one bake).
      const source = vcpus === tpl.manifest.vm.vcpus && memoryMb === tpl.manifest.vm.memoryMb ? tpl : await this.variant(tpl, vcpus, memoryMb);
      const sbx = await this.rt.create({ id: spec.id, template: `${source.name}@${source.version}`, ...(spec.diskMb ? { diskMb: spec.diskMb } : {}) });
      return { ...info(sbx), template: tpl.name, templateVersion: tpl.version };
    } finally {
      release();
    }
  }

  private variant(base: TemplateInfo, vcpus: number, memoryMb: number): Promise<TemplateInfo> {
    const key = `${base.name}@${base.version}/${vcpus}/${memoryMb}`;
    let p = this.bakes.get(key);
    if (!p) {
      p = bakeVariant(this.rt, base, vcpus, memoryMb).finally(() => this.bakes.delete(key));
      this.bakes.set(key, p);
    }
    return p;
  }

  async setNetwork(id: string, policy: api.NetworkPolicy): Promise<void> {
    await this.rt.setNetwork(id, {
      egress: policy.egress, allow: policy.allow ?? [], deny: policy.deny ?? [],
      maxConnections: policy.max_connections ?? null, bandwidthMbps: policy.bandwidth_mbps ?? null,
    });
  }

  async networkRefusals(id: string): Promise<api.NetworkStatus["refused"] | undefined> {
    return this.rt.has(id) ? this.rt.networkRefusals(id) : undefined;
  }

  async destroy(id: string): Promise<void> {
    if (this.rt.has(id)) await this.rt.get(id).destroy();
  }

  async hibernate(id: string, mode: "warm" | "cold", warmSnapshot?: string): Promise<string> {
    if (mode === "warm") return (await this.rt.snapshot(id, { keepRunning: false })).id;
    // Cold: the snapshot goes to the store (manifest last), then the VM and its local files go.
    // From warm, the snapshot taken when it paused is the one to store (nothing ran since,
    // and the VM may even be gone).
    const sbx = this.rt.has(id) ? this.rt.get(id) : undefined;
    const snap = warmSnapshot ? await this.rt.getSnapshot(warmSnapshot) : await this.rt.snapshot(id, { keepRunning: false });
    try {
      await this.toStore(snap, id);
    } catch (e) {
      if (!warmSnapshot) {
        // Nothing is lost: the VM is still there, paused; put it back to work.
        await this.rt.deleteSnapshot(snap.id).catch(() => undefined);
        await sbx?.resume().catch(() => undefined);
      }
      throw e;
    }
    await sbx?.destroy();
    await this.rt.deleteSnapshot(snap.id);
    return snap.id;
  }

  async wake(id: string, snapshotId: string | null, mode: "warm" | "cold"): Promise<void> {
    if (mode === "warm" && this.rt.has(id) && this.rt.get(id).vmAlive()) {
      await this.rt.get(id).resume();
      return;
    }
    if (!snapshotId) throw new DenError("sandbox_not_running", `sandbox ${id} has no VM and no snapshot to wake from`);
    // The VM is gone (cold, or it died while warm): bring it back under the same id.
    if (this.rt.has(id)) await this.rt.get(id).destroy();
    await rm(join(this.rt.dataDir, "sandboxes", id), { recursive: true, force: true });
    if (mode === "warm") {
      const release = this.admission.reserve(id, (await this.rt.getSnapshot(snapshotId)).manifest.vm);
      try {
        await this.rt.restore(snapshotId, { id });
      } finally {
        release();
      }
      return;
    }
    await this.restoreStored(id, snapshotId);
  }

  /** Downloads a stored snapshot, verifies it, and restores it as sandbox `id`. */
  async restoreStored(id: string, snapshotId: string): Promise<HostSandboxInfo> {
    // Room first: a wake that cannot fit fails before it downloads anything.
    const stored = await readStoredManifest(this.store, snapshotId);
    const release = this.admission.reserve(id, (stored.snapshot as SnapshotManifest).vm);
    const staging = await mkdtemp(join(this.rt.dataDir, DOWNLOAD_PREFIX));
    try {
      await downloadSnapshot(this.store, snapshotId, staging, this.progress(id, snapshotId, "download"), stored);
      // Checked object by object while downloading: moved in, not hashed again.
      const local = await this.rt.importSnapshot(staging, { owned: true });
      try {
        return info(await this.rt.restore(local.id, { id }));
      } finally {
        // Kept on disk while the restored sandbox's overlay sits on it.
        await this.rt.deleteSnapshot(local.id);
      }
    } finally {
      release();
      await rm(staging, { recursive: true, force: true });
    }
  }

  /**
   * A durable checkpoint of a running sandbox: snapshot (the VM pauses only for the
   * copy), upload to the store, keep nothing local. The sandbox keeps running.
   */
  async checkpoint(id: string): Promise<{ snapshotId: string; pauseMs: number; storedBytes: number }> {
    const snap = await this.rt.snapshot(id);
    try {
      await this.toStore(snap, id);
    } finally {
      await this.rt.deleteSnapshot(snap.id);
    }
    return { snapshotId: snap.id, pauseMs: snap.manifest.pauseMs, storedBytes: await storedBytes(this.store, snap.id) };
  }

  /**
   * Uploads a local snapshot to the store, pinning its template version on this host
   * (the stored copy needs it to restore); a failed upload leaves no pin behind.
   */
  private async toStore(snap: SnapshotInfo, sandbox: string): Promise<void> {
    await this.rt.pinTemplate(snap.id, snap.manifest.template);
    try {
      // The runtime hashed the files when it took the snapshot: the upload reuses those sums.
      await uploadSnapshot(this.store, snap.id, snap.dir, Object.keys(snap.manifest.files), snap.manifest, this.progress(sandbox, snap.id, "upload"), snap.manifest.files);
    } catch (e) {
      await this.rt.unpinTemplate(snap.id);
      throw e;
    }
  }

  /** Forks a running sandbox into `count` copy-on-write children. */
  async fork(id: string, count: number): Promise<Array<{ id: string } & HostSandboxInfo>> {
    const p = this.rt.get(id).info;
    const release = this.admission.reserve(undefined, { vcpus: p.vcpus, memoryMb: p.memoryMb }, count);
    try {
      const kids = await this.rt.fork(id, count);
      return kids.map((k) => ({ id: k.id, ...info(k) }));
    } finally {
      release();
    }
  }

  async dropSnapshot(snapshotId: string, mode: "warm" | "cold"): Promise<void> {
    if (mode === "cold") {
      await deleteStoredSnapshot(this.store, snapshotId);
      await this.rt.unpinTemplate(snapshotId);
      return;
    }
    await this.rt.deleteSnapshot(snapshotId).catch((e: unknown) => {
      if (!(e instanceof DenError && e.code === "snapshot_not_found")) throw e;
    });
  }

  /** Bytes a cold-hibernated sandbox occupies in the store. */
  storedBytes(snapshotId: string): Promise<number> {
    return storedBytes(this.store, snapshotId);
  }

  async collectSnapshots(referenced: Set<string>): Promise<void> {
    for (const id of await listStoredSnapshotIds(this.store)) if (!referenced.has(id)) await deleteStoredSnapshot(this.store, id);
    for (const s of await this.rt.listSnapshots()) if (!referenced.has(s.id)) await this.rt.deleteSnapshot(s.id);
    for (const holder of this.rt.pinHolders()) if (!referenced.has(holder)) await this.rt.unpinTemplate(holder);
  }

  running(): string[] {
    return this.rt.list().map((s) => s.id);
  }

  alive(id: string): boolean {
    return this.rt.has(id) && this.rt.get(id).vmAlive();
  }

  vmState(id: string): "running" | "paused" | undefined {
    if (!this.rt.has(id)) return undefined;
    const s = this.rt.get(id).state;
    return s === "running" ? "running" : s === "paused" ? "paused" : undefined;
  }

  async resume(id: string): Promise<void> {
    await this.rt.get(id).resume();
  }

  cpuSeconds(id: string): number | undefined {
    return this.rt.has(id) ? this.rt.get(id).cpuSeconds() : undefined;
  }

  guest(id: string): VmSandbox {
    return this.rt.get(id);
  }

  templates(): Promise<TemplateInfo[]> {
    return this.rt.templates.list();
  }

  async deleteTemplate(name: string): Promise<void> {
    const names = new Set((await this.rt.templates.list()).map((t) => t.name).filter((n) => n === name || n.startsWith(`${name}.`)));
    for (const n of names) await this.rt.templates.retire(n);
    await this.rt.gc();
  }

  buildTemplate(spec: TemplateBuildSpec): Promise<TemplateInfo & { reused: boolean }> {
    // One build per name at a time: a second waits and then finds the first one's version.
    const prev = this.builds.get(spec.name) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(() => this.build(spec));
    this.builds.set(spec.name, next);
    return next.finally(() => {
      if (this.builds.get(spec.name) === next) this.builds.delete(spec.name);
    });
  }

  private async build(spec: TemplateBuildSpec): Promise<TemplateInfo & { reused: boolean }> {
    let source: Record<string, string>;
    if (spec.fromCheckpoint) source = { checkpoint: spec.fromCheckpoint };
    else {
      const t = await this.rt.templates.resolve(spec.fromTemplate ?? "base");
      source = { template: `${t.name}@${t.version}` };
    }
    const recipe = { source, setup: spec.setup };
    const ref = { name: spec.name, version: createHash("sha256").update(JSON.stringify(recipe)).digest("hex").slice(0, 12) };
    // Checked before a building sandbox is made for nothing.
    const existing = await reuseTemplate(this.rt, ref);
    if (existing) return existing;
    // The building sandbox is on this host only: a crash mid-build leaves a VM no database
    // row knows, which the next start destroys.
    const id = newId("sbx");
    if (spec.fromCheckpoint) await this.restoreStored(id, spec.fromCheckpoint);
    else await this.create({ id, template: source.template! });
    const sbx = this.rt.get(id);
    try {
      for (const [i, cmd] of spec.setup.entries()) {
        const r = await sbx.exec(cmd, { timeoutMs: spec.setupTimeoutSeconds * 1000 });
        if (r.exitCode !== 0 || r.timedOut) {
          const why = r.timedOut ? `timed out after ${spec.setupTimeoutSeconds} s` : r.exitCode === null ? `died of signal ${r.signal}` : `exited with ${r.exitCode}`;
          throw new DenError("setup_failed", `setup command ${i + 1} ${why}: ${cmd.slice(0, 200)}`, {
            command_index: i, exit_code: r.exitCode, stdout: r.stdout.subarray(-4096).toString("utf8"), stderr: r.stderr.subarray(-4096).toString("utf8"),
          });
        }
      }
      return await bakeFromSandbox(this.rt, id, ref, recipe);
    } finally {
      await sbx.destroy();
    }
  }

  close(): void {
    this.rt.close();
  }
}
