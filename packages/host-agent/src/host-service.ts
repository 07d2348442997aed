import { createHash } from "node:crypto";
import { existsSync, rmSync, statSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, readdir, rename, rm, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { canStreamStoredFile, downloadSnapshot, faultPoint, putSnapshotFile, putSnapshotFileFromFd, streamCompression, streamStoredFile, manifestBytes, readStoredManifest, storedSnapshotComplete, uploadSnapshot, type ObjectStore, type PutObject, type TransferProgress } from "@den/store";
import { DenError, type api, type host } from "@den/protocol";
import { Runtime, TEMPLATE_FILES, bakeFromSandbox, bakeVariant, createVolumeImage, hostProfile, newId, reuseTemplate, volumeImagePath, type Sandbox as VmSandbox, type SnapshotInfo, type SnapshotManifest, type StateSink, type TemplateInfo, type VolumeRequest } from "@den/runtime";
import { Admission, diskOvercommit, diskPromisedMb, memoryOvercommit, memoryReserveMb, type Capacity, type Shape } from "./admission.js";
import { PrivateMemoryCache, availableMemoryMb } from "./host-memory.js";
import { BUILD_VM_PREFIX, isStepTemplate, sweepBuilds } from "./build/build-cache.js";
import { BuildLogs } from "./build/build-logs.js";
import { Slots, buildsPerHost } from "./build/build-slots.js";
import { TemplateBuilder } from "./build/template-builder.js";
import { OpJournal } from "./op-journal.js";
import { runSetup } from "./setup-steps.js";
import { throttled } from "./transfer-progress.js";

/** A volume's id (its image's folder under the data dir's volumes/). */
const VOLUME_ID = /^vol_[a-z2-7]{16}$/;

type HostAgent = host.HostAgent;
type HostCreateSpec = host.HostCreateSpec;
type HostSandboxInfo = host.HostSandboxInfo;
type HostInventory = host.HostInventory;
type VolumeImage = host.VolumeImage;
type StoredRef = host.StoredRef;
type TemplateBuildSpec = host.TemplateBuildSpec;
type TransferEvent = host.TransferEvent;

/** A runtime template as the protocol shows it: no local paths, no manifest. */
export function wireTemplate(t: TemplateInfo): host.HostTemplate {
  return {
    name: t.name, version: t.version, current: t.current, vcpus: t.manifest.vm.vcpus, memory_mb: t.manifest.vm.memoryMb, disk_mb: t.manifest.vm.diskMb, created_at: t.manifest.createdAt,
    source: t.manifest.source ?? null, run: t.manifest.run ?? null,
  };
}

const DOWNLOAD_PREFIX = "download-";
/** Where a helper VM mounts the volume it grows. */
const HELPER_MOUNT = "/mnt/den-volume";

function info(sbx: VmSandbox): HostSandboxInfo {
  const i = sbx.info;
  return { template: i.template.name, templateVersion: i.template.version, vcpus: i.vcpus, memoryMb: i.memoryMb, diskMb: i.diskMb };
}

function vmState(s: VmSandbox): HostInventory["vms"][number]["state"] {
  if (s.state === "stopped") return "off";
  if (!s.vmAlive()) return "stopped";
  return s.state === "paused" ? "paused" : "running";
}

/**
 * The host agent of this machine, in-process: one Runtime (QEMU per sandbox), its warm
 * snapshots, template cache, networks and admission control. Operations run once per id.
 */
export class LocalHostAgent implements HostAgent {
  readonly address = "local";
  private bakes = new Map<string, Promise<TemplateInfo>>();
  private builds = new Map<string, Promise<unknown>>();
  private readonly journal = new OpJournal();
  onTransfer: ((t: TransferEvent) => void) | undefined;

  private progress(sandbox: string, snapshot: string, direction: TransferEvent["direction"]): (p: TransferProgress) => void {
    return throttled((p) => this.onTransfer?.({
      sandbox, snapshot, direction, file: p.key.slice(p.key.lastIndexOf("/") + 1), bytes: p.bytes, total: p.total ?? null,
      done: p.total !== undefined && p.bytes >= p.total,
    }));
  }

  private readonly admission: Admission;
  private readonly builder: TemplateBuilder;
  private readonly buildLogs = new BuildLogs();
  private readonly buildSlots = new Slots(buildsPerHost());

  private constructor(private readonly rt: Runtime, readonly store: ObjectStore, capacity: Capacity) {
    // A shut-down sandbox (a disk hibernation) holds only its disk: its shape counts again when it boots.
    // A warm-hibernated (paused) VM holds memory but no vCPU; with a memory overcommit, each VM is charged by what it holds privately.
    const overcommit = capacity.memoryOvercommit ?? memoryOvercommit();
    const held = new PrivateMemoryCache();
    this.admission = new Admission(capacity, rt.dataDir, () => new Map(rt.list().filter((s) => s.state !== "destroyed" && s.state !== "stopped").map((s) => [s.id, {
      vcpus: s.info.vcpus, memoryMb: s.info.memoryMb, paused: s.state === "paused",
      ...(overcommit > 1 && s.pid ? { privateMb: held.get(s.pid) } : {}),
    }])), () => diskPromisedMb(rt.list()), diskOvercommit(), overcommit, { availableMb: () => availableMemoryMb(), reserveMb: capacity.memoryReserveMb ?? memoryReserveMb() });
    // A build's VMs are made as any create's (admission, the build's network), by template.
    this.builder = new TemplateBuilder(rt, store, async (template, network) => {
      const id = newId(BUILD_VM_PREFIX);
      await this.createVm({ id, template, ...(network ? { network } : {}) }, false);
      return rt.get(id);
    });
  }

  static async open(dataDir: string, store: ObjectStore, capacity: Capacity): Promise<LocalHostAgent> {
    const rt = await Runtime.open({ dataDir });
    // Downloads a crash interrupted: the store still has the snapshot.
    for (const d of await readdir(dataDir)) if (d.startsWith(DOWNLOAD_PREFIX)) await rm(join(dataDir, d), { recursive: true, force: true });
    // The default template's first create need not wait for a QEMU to start.
    await rt.prewarm();
    const agent = new LocalHostAgent(rt, store, capacity);
    await sweepBuilds(rt);
    return agent;
  }

  /** Runs an operation once: asked again with the same id, it returns (or joins) the first answer. */
  private once<T>(op: string, fn: () => Promise<T>): Promise<T> {
    return this.journal.once(op, fn);
  }

  async capacity(): Promise<host.CapacityReport> {
    return { capacity: this.admission.capacity, used: this.admission.used(), memory: this.admission.memoryState() };
  }

  private async shapeOf(spec: Omit<HostCreateSpec, "id">): Promise<{ tpl: TemplateInfo; shape: Shape }> {
    const tpl = await this.rt.templates.resolve(spec.template);
    return { tpl, shape: { vcpus: spec.vcpus ?? tpl.manifest.vm.vcpus, memoryMb: spec.memoryMb ?? tpl.manifest.vm.memoryMb, diskMb: spec.diskMb ?? tpl.manifest.vm.diskMb } };
  }

  async checkCapacity(shape: Shape): Promise<void> {
    this.admission.check(shape);
  }

  async checkCreate(spec: Omit<HostCreateSpec, "id">): Promise<void> {
    this.admission.check((await this.shapeOf(spec)).shape);
  }

  get instance(): string {
    return this.rt.instance;
  }

  create(op: string, spec: HostCreateSpec): Promise<HostSandboxInfo> {
    return this.once(op, () => this.createVm(spec));
  }

  /** A create's work; `pooled: false` for a build's one-off VMs (no QEMUs kept ready for their templates). */
  private async createVm(spec: HostCreateSpec, pooled = true): Promise<HostSandboxInfo> {
    {
      const { tpl, shape } = await this.shapeOf(spec);
      const { vcpus, memoryMb } = shape;
      const release = this.admission.reserve(spec.id, shape);
      try {
        // A template snapshot fixes vCPUs and memory: another shape restores a snapshot of that
        // shape, baked once on first use (concurrent first uses share one bake).
        const source = vcpus === tpl.manifest.vm.vcpus && memoryMb === tpl.manifest.vm.memoryMb ? tpl : await this.variant(tpl, vcpus, memoryMb);
        const volumes = this.volumeRequests(spec.volumes);
        const sbx = await this.rt.create({ id: spec.id, template: `${source.name}@${source.version}`, ...(spec.diskMb ? { diskMb: spec.diskMb } : {}), ...(volumes.length ? { volumes } : {}), pooled });
        await this.withNetwork(spec.id, spec.network);
        return { ...info(sbx), template: tpl.name, templateVersion: tpl.version };
      } finally {
        release();
      }
    }
  }

  /** Volumes to put in a VM, by their images on this host (each must have been made here). */
  private volumeRequests(volumes: host.VolumeSpec[] | undefined): VolumeRequest[] {
    return (volumes ?? []).map((v) => {
      const image = this.volumeImage(v.volume);
      if (!existsSync(image)) throw new DenError("volume_not_found", `volume ${v.volume} has no image on this host`);
      return { volume: v.volume, image, path: v.path, readOnly: v.readOnly };
    });
  }

  private volumeImage(id: string): string {
    if (!VOLUME_ID.test(id)) throw new DenError("invalid_argument", `not a volume id: ${JSON.stringify(id.slice(0, 100))}`);
    return volumeImagePath(join(this.rt.dataDir, "volumes"), id);
  }

  async volumeImages(): Promise<VolumeImage[]> {
    const out: VolumeImage[] = [];
    for (const id of await readdir(join(this.rt.dataDir, "volumes")).catch(() => [])) {
      if (!VOLUME_ID.test(id)) continue;
      const st = await stat(this.volumeImage(id)).catch(() => undefined);
      if (st) out.push({ id, inode: st.ino });
    }
    return out;
  }

  /** A VM on this host that has volume `id` in a slot (it may be writing the image). */
  private volumeUser(id: string): VmSandbox | undefined {
    return this.rt.list().find((s) => s.state !== "destroyed" && s.info.volumes?.some((v) => v.volume === id));
  }

  async dropVolumeImage(id: string, inode: number): Promise<boolean> {
    const image = this.volumeImage(id);
    if (this.volumeUser(id)) return false;
    // (Synchronous from the check to the removal: a fetch's rename, on this event loop, cannot come between.)
    const st = statSync(image, { throwIfNoEntry: false });
    if (!st || st.ino !== inode) return false;
    rmSync(dirname(image), { recursive: true, force: true });
    return true;
  }

  createVolume(op: string, id: string, sizeMb: number): Promise<void> {
    return this.once(op, async () => {
      const image = this.volumeImage(id);
      // Asked again (a retried create): the image made the first time is kept, whatever was written to it since.
      if (existsSync(image)) return;
      await createVolumeImage(image, sizeMb);
    });
  }

  async deleteVolume(id: string): Promise<void> {
    await rm(join(this.volumeImage(id), ".."), { recursive: true, force: true });
  }

  growVolume(op: string, id: string, sizeMb: number, helper: string): Promise<void> {
    return this.once(op, async () => {
      // Grown by a guest (online ext4 resize) in a VM of its own, gone after.
      await this.create(newId("op"), { id: helper, template: "base", volumes: [{ volume: id, path: HELPER_MOUNT, readOnly: false }] });
      try {
        await this.rt.get(helper).growVolume(id, sizeMb);
      } finally {
        await this.destroy(helper);
      }
    });
  }

  parkVolume(op: string, id: string, to: host.StoredRef): Promise<{ storedBytes: number }> {
    return this.once(op, async () => {
      if (await storedSnapshotComplete(this.store, to.key)) return { storedBytes: manifestBytes(await readStoredManifest(this.store, to.key)) };
      const image = this.volumeImage(id);
      if (!existsSync(image)) throw new DenError("volume_not_found", `volume ${id} has no image on this host`);
      // A VM that has it in a slot may be writing it: the copy would be torn.
      const user = this.volumeUser(id);
      if (user) throw new DenError("volume_in_use", `volume ${id} is in a slot of VM ${user.id} on this host`);
      return { storedBytes: manifestBytes(await uploadSnapshot(this.store, to.key, dirname(image), [basename(image)], { volume: id })) };
    });
  }

  fetchVolume(op: string, id: string, from: host.StoredRef): Promise<void> {
    return this.once(op, async () => {
      const image = this.volumeImage(id);
      // Downloaded (and verified) beside the data dir's other downloads, then put in place in one rename.
      const staging = await mkdtemp(join(this.rt.dataDir, DOWNLOAD_PREFIX));
      try {
        await downloadSnapshot(this.store, from.key, staging);
        await mkdir(dirname(image), { recursive: true });
        await rename(join(staging, basename(image)), image);
      } finally {
        await rm(staging, { recursive: true, force: true });
      }
    });
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

  async networkRefusals(id: string): Promise<host.Refusals | undefined> {
    return this.rt.has(id) ? this.rt.networkRefusals(id) : undefined;
  }

  async destroy(id: string): Promise<void> {
    await this.cancelWarmSnapshot(id);
    if (this.rt.has(id)) await this.rt.get(id).destroy();
    await rm(join(this.rt.dataDir, "sandboxes", id), { recursive: true, force: true });
  }

  /**
   * Warm: the VM pauses in place, and that is the hibernation; its local snapshot (for a VM
   * that dies while paused, and for a later move to the store) is written behind the answer,
   * while nothing runs. A wake meanwhile cancels it; a move to the store waits for it.
   */
  hibernateWarm(op: string, id: string, snapshotId: string): Promise<void> {
    return this.once(op, async () => {
      const sbx = this.rt.get(id);
      await sbx.pause();
      const job = this.rt.snapshot(id, { keepRunning: false, id: snapshotId }).then(() => undefined, (err: unknown) => {
        if (sbx.state !== "destroyed" && this.warmSnapshots.get(id) === job) process.emitWarning(`sandbox ${id}: its warm snapshot failed (${(err as Error).message.slice(0, 300)}); it stays paused in place`, "DenWarmSnapshotWarning");
      }).finally(() => {
        if (this.warmSnapshots.get(id) === job) this.warmSnapshots.delete(id);
      });
      this.warmSnapshots.set(id, job);
    });
  }

  /** Warm snapshots being written behind their hibernations' answers, by sandbox. */
  private readonly warmSnapshots = new Map<string, Promise<void>>();

  /** Lets go of a warm snapshot still being written (it fails, leaving nothing). */
  private async cancelWarmSnapshot(id: string): Promise<void> {
    const job = this.warmSnapshots.get(id);
    if (!job) return;
    this.warmSnapshots.delete(id);
    if (this.rt.has(id)) await this.rt.get(id).cancelSnapshot();
    await job;
  }

  upload(op: string, id: string, to: StoredRef, warmSnapshot?: string): Promise<{ storedBytes: number; heldVolumes?: string[] }> {
    return this.once(op, async () => {
      const sbx = this.rt.has(id) ? this.rt.get(id) : undefined;
      const alive = sbx?.vmAlive() ?? false;
      // A warm VM with volumes still mounts them all (its warm snapshot was taken so): while
      // its QEMU is there, it lets go of them now in a snapshot of its own, as from running.
      const release = alive && !!sbx!.info.volumes?.length;
      // Else a warm snapshot still being written is the one to store; one that never got
      // written (cancelled, failed) is replaced by a snapshot of the paused VM.
      if (release) await this.cancelWarmSnapshot(id);
      else await this.warmSnapshots.get(id);
      const fromWarm = warmSnapshot && !release && (this.rt.hasSnapshot(warmSnapshot) || !alive) ? warmSnapshot : undefined;
      // (A warm one stays paused if the move fails.)
      const wasRunning = sbx?.state === "running";
      // From warm, the snapshot taken when it paused is the one to store (nothing ran since,
      // and the VM may even be gone). From running, a snapshot leaves the VM paused.
      // From running, its saved state goes into the store as QEMU writes it (compressed on the
      // way, no state file on this host); the rest of the snapshot follows.
      const uploaded: Record<string, PutObject> = {};
      const progress = this.progress(id, to.id, "upload");
      const streamTo: StateSink = async (source) => {
        uploaded[TEMPLATE_FILES.state] = await putSnapshotFile(this.store, to.key, TEMPLATE_FILES.state, source, progress);
      };
      // Or compressed on its way from QEMU by the runtime's native filter, as the store would.
      const packed = streamCompression();
      if (packed) {
        streamTo.compressed = {
          command: packed.command,
          ...(packed.zstdLevel ? { zstdLevel: packed.zstdLevel } : {}),
          put: async (source) => void (uploaded[TEMPLATE_FILES.state] = await putSnapshotFile(this.store, to.key, TEMPLATE_FILES.state, source, progress, { compressed: packed.compression })),
        };
        // A local store takes the filter's output straight into its file.
        if (this.store.putFromFd) {
          streamTo.compressed.putTo = async (write) => {
            uploaded[TEMPLATE_FILES.state] = await putSnapshotFileFromFd(this.store, to.key, TEMPLATE_FILES.state, packed.compression, write, progress)!;
          };
        }
      }
      let snap: SnapshotInfo;
      try {
        snap = fromWarm ? await this.rt.getSnapshot(fromWarm) : await this.rt.snapshot(id, { keepRunning: false, stateSink: streamTo, releaseVolumes: true });
      } catch (e) {
        // The store failing mid-stream fails the snapshot, which left the VM paused: resume it.
        if (wasRunning) await sbx?.resume().catch(() => undefined);
        throw e;
      }
      faultPoint("hibernate-cold-after-snapshot");
      try {
        const stored = await this.toStore(snap, id, to, uploaded);
        // What the guest still has mounted in the stored state (not stale): the wake puts them back in their slots.
        const heldVolumes = (snap.manifest.volumes ?? []).filter((v) => !v.stale).map((v) => v.volume);
        return { storedBytes: manifestBytes(stored), ...(heldVolumes.length ? { heldVolumes } : {}) };
      } catch (e) {
        // Nothing is lost: the VM is still there, paused; put it back to work.
        if (wasRunning) await sbx?.resume().catch(() => undefined);
        throw e;
      } finally {
        // A snapshot taken for the upload is of no use after it, either way.
        if (!fromWarm) await this.rt.deleteSnapshot(snap.id).catch(() => undefined);
      }
    });
  }

  wakeWarm(op: string, id: string, snapshotId: string | null): Promise<void> {
    return this.once(op, async () => {
      await this.cancelWarmSnapshot(id);
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
    return this.once(op, async () => {
      // From warm: its memory snapshot is of no use once the disk holds it.
      await this.cancelWarmSnapshot(id);
      await this.rt.stopKeepingDisk(id);
    });
  }

  wakeDisk(op: string, id: string): Promise<void> {
    return this.once(op, async () => {
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

  restore(op: string, id: string, snapshot: StoredRef, network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<HostSandboxInfo> {
    return this.once(op, async () => {
      const requests = this.volumeRequests(volumes);
      await this.destroy(id);
      const made = await this.restoreStored(id, snapshot, requests);
      await this.withNetwork(id, network);
      return made;
    });
  }

  /** Downloads a stored snapshot, verifies it, and restores it as sandbox `id`. */
  private async restoreStored(id: string, snapshot: StoredRef, volumes: VolumeRequest[] = []): Promise<HostSandboxInfo> {
    // Room first: a wake that cannot fit fails before it downloads anything.
    const stored = await readStoredManifest(this.store, snapshot.key);
    const release = this.admission.reserve(id, (stored.snapshot as SnapshotManifest).vm);
    const staging = await mkdtemp(join(this.rt.dataDir, DOWNLOAD_PREFIX));
    // The saved state (most of the bytes) is decompressed straight into the VM as it loads,
    // not into a file first; the rest (its disk) is downloaded. Older gzip objects download.
    const streamed = canStreamStoredFile(stored, TEMPLATE_FILES.state) ? [TEMPLATE_FILES.state] : [];
    const progress = this.progress(id, snapshot.id, "download");
    try {
      await downloadSnapshot(this.store, snapshot.key, staging, progress, stored, { except: streamed });
      faultPoint("wake-cold-after-download");
      // Checked object by object while downloading: moved in, not hashed again.
      const local = await this.rt.importSnapshot(staging, { owned: true, absent: streamed });
      try {
        const feed = streamed.length ? (fd: number) => streamStoredFile(this.store, stored, TEMPLATE_FILES.state, fd, progress) : undefined;
        // The downloaded snapshot is deleted below: its disk becomes the sandbox's own.
        return info(await this.rt.restore(local.id, { id, adoptDisk: true, ...(volumes.length ? { volumes } : {}) }, feed));
      } finally {
        // (Its disk lives on as the sandbox's.)
        await this.rt.deleteSnapshot(local.id);
      }
    } finally {
      release();
      await rm(staging, { recursive: true, force: true });
    }
  }

  checkpoint(op: string, id: string, to: StoredRef): Promise<{ pauseMs: number; storedBytes: number }> {
    return this.once(op, async () => {
      const snap = await this.rt.snapshot(id);
      try {
        const stored = await this.toStore(snap, id, to);
        return { pauseMs: snap.manifest.pauseMs, storedBytes: manifestBytes(stored) };
      } finally {
        await this.rt.deleteSnapshot(snap.id);
      }
    });
  }

  /**
   * Uploads a local snapshot to the store, pinning its template version on this host
   * (the stored copy needs it to restore); a failed upload leaves no pin behind.
   */
  private async toStore(snap: SnapshotInfo, sandbox: string, to: StoredRef, uploaded: Record<string, PutObject> = {}) {
    await this.rt.pinTemplate(to.id, snap.manifest.template);
    try {
      // The runtime hashed the files when it took the snapshot: the upload reuses those sums.
      return await uploadSnapshot(this.store, to.key, snap.dir, Object.keys(snap.manifest.files), snap.manifest, this.progress(sandbox, to.id, "upload"), snap.manifest.files, uploaded);
    } catch (e) {
      await this.rt.unpinTemplate(to.id);
      throw e;
    }
  }

  fork(op: string, id: string, children: string[], network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<HostSandboxInfo[]> {
    return this.once(op, async () => {
      const p = this.rt.get(id).info;
      const requests = this.volumeRequests(volumes);
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
        return kids.map(info);
      } finally {
        release();
      }
    });
  }

  async dropLocalSnapshot(snapshotId: string): Promise<void> {
    if (this.rt.hasSnapshot(snapshotId)) await this.rt.deleteSnapshot(snapshotId);
  }

  async unpin(snapshotId: string): Promise<void> {
    await this.rt.unpinTemplate(snapshotId);
  }

  async collectLocal(keepSnapshots: string[], keepPins: host.TemplatePin[]): Promise<void> {
    const snapshots = new Set(keepSnapshots);
    const pins = new Map(keepPins.map((p) => (typeof p === "string" ? [p, undefined] : [p.id, p.template])));
    for (const s of await this.rt.listSnapshots()) if (!snapshots.has(s.id)) await this.rt.deleteSnapshot(s.id);
    // The database is the record: a pin this host lost (or never had) is written again.
    const held = new Set(this.rt.pinHolders());
    for (const [holder, template] of pins) if (template && !held.has(holder)) await this.rt.pinTemplate(holder, template);
    for (const holder of held) if (!pins.has(holder)) await this.rt.unpinTemplate(holder);
  }

  async settled(op: string): Promise<void> {
    await this.journal.settled(op);
  }

  async inventory(): Promise<HostInventory> {
    return {
      instance: this.instance,
      vms: this.vmsHeld(),
      snapshots: (await this.rt.listSnapshots()).map((s) => s.id),
      capacity: await this.capacity(),
    };
  }

  /** Each VM with what it holds of the host's memory (so the control plane picks whom to evict by what that frees). */
  private vmsHeld(): HostInventory["vms"] {
    const charges = this.admission.charges();
    return this.rt.list().map((s) => ({ id: s.id, state: vmState(s), cpuSeconds: s.cpuSeconds() ?? null, ...charges.get(s.id) }));
  }

  /** What a snapshot made here needs of the host it is restored on. */
  async kind(): Promise<host.HostKind> {
    const p = await hostProfile();
    return { qemuVersion: p.qemuVersion, accelerator: p.accelerator, cpuModel: p.cpuModel, arch: process.arch };
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

  async resume(id: string): Promise<void> {
    if (this.rt.has(id) && this.rt.get(id).state === "paused") await this.rt.get(id).resume();
  }

  async cpuSeconds(id: string): Promise<number | undefined> {
    return this.rt.has(id) ? this.rt.get(id).cpuSeconds() : undefined;
  }

  /** The runtime's Sandbox is a HostGuest as it is: in-process, the data plane costs nothing. */
  guest(id: string): host.HostGuest {
    return this.rt.get(id);
  }

  async templates(): Promise<host.HostTemplate[]> {
    // (A build cache's steps are internal: they are nobody's templates.)
    return (await this.rt.templates.list()).filter((t) => !isStepTemplate(t.name)).map(wireTemplate);
  }

  async deleteTemplate(name: string): Promise<void> {
    const names = new Set((await this.rt.templates.list()).map((t) => t.name).filter((n) => n === name || n.startsWith(`${name}.`)));
    for (const n of names) await this.rt.templates.retire(n);
    await this.rt.gc();
  }

  publishTemplate(op: string, name: string, version: string, key: string): Promise<{ storedBytes: number }> {
    return this.once(op, async () => {
      if (await storedSnapshotComplete(this.store, key)) return { storedBytes: manifestBytes(await readStoredManifest(this.store, key)) };
      const tpl = await this.rt.templates.resolve(`${name}@${version}`);
      const files = Object.values(TEMPLATE_FILES).filter((f) => existsSync(join(tpl.dir, f)));
      const raw = JSON.parse(await readFile(join(tpl.dir, "manifest.json"), "utf8")) as unknown;
      return { storedBytes: manifestBytes(await uploadSnapshot(this.store, key, tpl.dir, files, raw)) };
    });
  }

  fetchTemplate(op: string, name: string, version: string, key: string, current: boolean): Promise<void> {
    return this.once(op, async () => {
      const ref = { name, version };
      if (this.rt.templates.has(ref)) {
        if (current && this.rt.templates.current(name) !== version) await this.rt.templates.setCurrent(ref);
        return;
      }
      const dir = await this.rt.templates.buildDir(ref);
      try {
        await downloadSnapshot(this.store, key, dir);
        // The files are read-only from here on, as a built template's are.
        for (const f of await readdir(dir)) if (f !== "manifest.json") await chmod(join(dir, f), 0o444);
        if (current || !this.rt.templates.current(name)) await this.rt.templates.install(ref, dir);
        else await rename(dir, this.rt.templates.dir(ref));
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }

  buildTemplate(op: string, spec: TemplateBuildSpec): Promise<host.BuiltTemplate> {
    return this.once(op, async () => {
      const { log, signal } = this.buildLogs.start(op);
      try {
        // At most DEN_MAX_BUILDS_PER_HOST at once; one build per name at a time (a second waits, then finds the first one's version).
        const release = await this.buildSlots.take(() => log(`waiting for a build slot (${this.buildSlots.max} build(s) at once on this host)`), signal);
        try {
          const prev = this.builds.get(spec.name) ?? Promise.resolve();
          const next = prev.catch(() => undefined).then(() => this.build(spec, log, signal));
          this.builds.set(spec.name, next);
          const t = await next.finally(() => {
            if (this.builds.get(spec.name) === next) this.builds.delete(spec.name);
          });
          log(`template ${t.name}@${t.version}${t.reused ? " (built before)" : ""}`);
          return { ...wireTemplate(t), reused: t.reused };
        } finally {
          release();
        }
      } catch (e) {
        log(`build failed: ${(e as Error).message}`, "error");
        throw e;
      } finally {
        this.buildLogs.end(op);
      }
    });
  }

  async buildLog(op: string, from: number): Promise<host.BuildLogPage> {
    return this.buildLogs.page(op, from);
  }

  async cancelBuild(op: string): Promise<void> {
    this.buildLogs.cancel(op);
  }

  private async build(spec: TemplateBuildSpec, log: (l: string) => void, signal: AbortSignal): Promise<TemplateInfo & { reused: boolean }> {
    // From an image, or with steps: the builder (cached steps, a start command).
    if (spec.fromImage || spec.fromArchive || spec.steps?.length) return this.builder.build(spec, log, signal);
    let source: Record<string, string>;
    if (spec.fromCheckpoint) source = { checkpoint: spec.fromCheckpoint.id };
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
    const id = newId(BUILD_VM_PREFIX);
    if (spec.fromCheckpoint) await this.restoreStored(id, spec.fromCheckpoint);
    else await this.create(newId("op"), { id, template: source.template! });
    const sbx = this.rt.get(id);
    // A cancel stops the command running now with its VM.
    const stop = () => void sbx.destroy().catch(() => undefined);
    signal.addEventListener("abort", stop, { once: true });
    const cancelled = () => new DenError("aborted", "the build was cancelled");
    try {
      await runSetup(spec, async (cmd, opts) => {
        if (signal.aborted) throw cancelled();
        log(`setup: ${cmd.slice(0, 200)}`);
        return sbx.exec(cmd, opts).catch((e: unknown) => {
          throw signal.aborted ? cancelled() : e;
        });
      });
      if (signal.aborted) throw cancelled();
      return await bakeFromSandbox(this.rt, id, ref, recipe, log);
    } finally {
      signal.removeEventListener("abort", stop);
      await sbx.destroy();
    }
  }

  close(): void {
    this.rt.close();
  }
}
