import { copyFile, link, mkdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { DenError } from "@den/protocol";
import { AgentClient } from "./agent-client.js";
import type { DataDirLayout } from "./data-dir.js";
import type { HostProfile } from "./host.js";
import type { NetworkManager } from "./network/manager.js";
import type { OverlayMaker } from "./overlay.js";
import type { PoolShape, PooledVm, VmPool } from "./pool.js";
import { VM_FILES, isAlive } from "./qemu.js";
import type { SandboxRegistry } from "./registry.js";
import { Sandbox } from "./sandbox.js";
import { writeRecord, type SandboxContext, type SandboxRecord } from "./sandbox-record.js";
import type { SnapshotCatalog } from "./snapshot-catalog.js";
import { checkCompatible, type SnapshotManifest, type TemplateRef } from "./snapshot.js";
import { feedStateFile, type StateFeed } from "./state-file.js";
import { poolShape } from "./template-pool.js";
import { TEMPLATE_FILES, type TemplateStore } from "./templates.js";
import { newId } from "./util.js";
import { Vm } from "./vm.js";
import { BOOT_TIMEOUT_MS, bootSpec, restoreSpec, type BootSpecOptions } from "./vm-specs.js";
import { planSlots, type SnapshotVolume, type VolumeAttachment, type VolumeRequest } from "./volumes.js";

export interface CreateOptions {
  /** Use this id (a control plane records it before the VM exists); default: a new one. */
  id?: string;
  /** Template name or `name@version` (default `base`). */
  template?: string;
  /** Disk size in MiB: at least the template's; the guest's root filesystem grows to fill it. */
  diskMb?: number;
  /** Max processes inside the guest (cgroup pids.max of the exec tree). */
  pidsMax?: number;
  /** Volumes to mount (their images on this host; volumes.ts). */
  volumes?: VolumeRequest[];
  /** false: neither take a pooled QEMU nor keep any ready for this template (a build's one-off steps). */
  pooled?: boolean;
}

/** What the launcher works with: the runtime's stores, pool and sandbox map. */
export interface LauncherScope {
  layout: DataDirLayout;
  host: HostProfile;
  templates: TemplateStore;
  overlays: OverlayMaker;
  pool: VmPool;
  sandboxes: SandboxRegistry;
  snapshots: SnapshotCatalog;
  networks: NetworkManager;
  context: SandboxContext;
}

/** Tries of a restore whose QEMU crashed as it started (see restoreFrom). */
const RESTORE_ATTEMPTS = 3;
/** Largest disk a request may ask for (the overlay grows on the host only as the guest writes). */
const MAX_DISK_MB = 256 * 1024;

/**
 * Starts sandboxes' VMs: restores (from a template, a snapshot, a pooled QEMU), cold boots,
 * boots from a kept disk, and shuts one down keeping its disk. Every new sandbox goes
 * through startSandbox, which leaves nothing behind when it fails.
 */
export class Launcher {
  constructor(private readonly s: LauncherScope) {}

  /** Creates a sandbox by restoring the template's snapshot: no boot. */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const tpl = await this.s.templates.resolve(opts.template ?? "base");
    checkCompatible(tpl.manifest, this.s.host);
    try {
      const shape = opts.pooled === false ? undefined : poolShape(tpl.dir, tpl.manifest, this.s.templates.diskChain(tpl));
      return await this.restoreFrom(tpl.dir, tpl.manifest, { name: tpl.name, version: tpl.version }, undefined, opts, undefined, shape);
    } finally {
      // After the create, not during it: a spawn's work on this thread would delay it.
      this.s.pool.refill();
    }
  }

  /** Restores a new sandbox from a snapshot (by id); see `Runtime.restore`. */
  async restore(snapshotId: string, opts: CreateOptions & { adoptDisk?: boolean } = {}, feedState?: StateFeed, prelaunched?: PooledVm): Promise<Sandbox> {
    const snap = await this.s.snapshots.get(snapshotId);
    checkCompatible(snap.manifest, this.s.host);
    if (!this.s.templates.has(snap.manifest.template)) {
      throw new DenError("template_not_found", `snapshot ${snapshotId} needs template ${snap.manifest.template.name}@${snap.manifest.template.version}, which is not on this host`);
    }
    return this.restoreFrom(snap.dir, snap.manifest, snap.manifest.template, opts.adoptDisk ? undefined : snapshotId, opts, feedState, undefined, opts.adoptDisk, prelaunched);
  }

  /** `prelaunched`: a QEMU started for this restore already (a fork's child), else one from the pool for `shape`, else a new one. */
  private async restoreFrom(srcDir: string, m: SnapshotManifest, tpl: TemplateRef, backingSnapshot: string | undefined, opts: CreateOptions, feedState?: StateFeed, shape?: PoolShape, adoptDisk = false, prelaunched?: PooledVm): Promise<Sandbox> {
    const id = this.s.sandboxes.newId(opts.id);
    // A wake (the same sandbox) gets back the volumes its guest kept mounted; others' mounts are stale.
    const slots = planSlots(m.volumes ?? [], opts.volumes ?? [], id === m.sourceSandbox);
    const record: SandboxRecord = {
      id, instance: this.s.layout.instance, state: "starting", createdAt: new Date().toISOString(), template: tpl,
      ...(backingSnapshot ? { backingSnapshot } : {}),
      vcpus: m.vm.vcpus, memoryMb: m.vm.memoryMb, diskMb: checkDiskMb(opts.diskMb, m.vm.diskMb), pidsMax: checkPidsMax(opts.pidsMax),
      ...volumeFields(slots.attach, slots.stale),
    };
    // A pooled QEMU was spawned with its slots empty.
    if (slots.attach.length) {
      shape = undefined;
      if (prelaunched) await this.s.pool.discard(prelaunched);
      prelaunched = undefined;
    }
    // RAM is either a file in the source (template, cold-booted sandbox) or a stream over the template's RAM.
    const memoryFile = m.memory === "file" ? join(srcDir, TEMPLATE_FILES.memory) : join(this.s.templates.dir(tpl), TEMPLATE_FILES.memory);
    // A QEMU that goes away as it starts (before the guest has run, the sources untouched) is
    // tried again: up to three attempts, the later ones after a pause. The one known cause,
    // QEMU 7.2's segfault at a restore's `cont` when its NIC socket was not bound (about one
    // restore in a hundred in CI runs, in bursts), Vm.launch and Vm.attach now rule out.
    for (let attempt = 1; ; attempt++) {
      try {
        const vm = attempt === 1 && prelaunched ? prelaunched : shape && this.s.pool.take(shape);
        return await this.restoreOnce(record, srcDir, m, memoryFile, feedState, vm, adoptDisk, slots.mount);
      } catch (e) {
        if (attempt >= RESTORE_ATTEMPTS || !qemuDroppedAtStart(e)) throw e;
        process.emitWarning(`restore of ${record.id}: QEMU went away as it started (${(e as Error).message.slice(0, 200)}); trying again (attempt ${attempt + 1} of ${RESTORE_ATTEMPTS})`, "DenRestoreWarning");
        await new Promise((r) => setTimeout(r, 150 * attempt));
      }
    }
  }

  /** `pooled`: a QEMU spawned for this (the template's state and disk, not a fed state). */
  private restoreOnce(record: SandboxRecord, srcDir: string, m: SnapshotManifest, memoryFile: string, feedState?: StateFeed, pooled?: PooledVm, adoptDisk = false, mount: VolumeAttachment[] = []): Promise<Sandbox> {
    return this.startSandbox(record, join(srcDir, TEMPLATE_FILES.disk), m.vm.diskMb, async (dir) => {
      // A fed state (a cold wake's, from the store) is written into a file here as it downloads,
      // while QEMU starts with that file as its incoming state; QEMU is told to read it only
      // once the feed has checked all of it (a corrupt one is refused before QEMU reads a byte).
      const fed = feedState ? await feedStateFile(dir, feedState) : undefined;
      const stateFile = fed?.path ?? join(srcDir, TEMPLATE_FILES.state);
      // (Should the launch fail, a feed still running writes on into the removed directory's
      // file, up to the state's size, and ends.)
      const vm = pooled?.vm ?? await Vm.launch(restoreSpec(this.s.layout.instance, dir, record.id, { ...record, memoryFile, backing: this.diskBacking(record) }, { incomingState: stateFile }, record.volumes), this.s.host);
      try {
        if (fed) {
          await withDeadline(fed.fed, streamedLoadTimeoutMs(record.memoryMb), "the state did not arrive");
          await vm.loadState(fed.path);
          await fed.remove();
        } else if (!pooled || pooled.pendingState) {
          // (A pooled VM has its template's state loaded already; a fork's child not yet.)
          await vm.loadState(pooled?.pendingState ?? stateFile);
        }
      } catch (e) {
        await vm.kill();
        throw e;
      }
      // Connect before resuming: the snapshot says "host connected", and if the guest ran
      // before we connected, QEMU would flap the port closed and open under the new hello.
      return { vm, resume: () => vm.cont() };
    }, pooled, adoptDisk, mount);
  }

  /** Cold-boots a sandbox from a template's kernel and disk; see `Runtime.boot`. */
  async boot(opts: CreateOptions & { vcpus?: number; memoryMb?: number } = {}): Promise<Sandbox> {
    const tpl = await this.s.templates.resolve(opts.template ?? "base");
    const vcpus = opts.vcpus ?? tpl.manifest.vm.vcpus;
    const memoryMb = opts.memoryMb ?? tpl.manifest.vm.memoryMb;
    if (!Number.isInteger(vcpus) || vcpus < 1 || vcpus > 16) throw new DenError("invalid_argument", "vcpus must be an integer in 1..16");
    if (!Number.isInteger(memoryMb) || memoryMb < 128 || memoryMb > 65536) throw new DenError("invalid_argument", "memoryMb must be an integer in 128..65536");
    const record: SandboxRecord = {
      id: this.s.sandboxes.newId(opts.id), instance: this.s.layout.instance, state: "starting", createdAt: new Date().toISOString(),
      template: { name: tpl.name, version: tpl.version }, ramFile: true,
      vcpus, memoryMb, diskMb: checkDiskMb(opts.diskMb, tpl.manifest.vm.diskMb), pidsMax: checkPidsMax(opts.pidsMax),
    };
    const { attach } = planSlots([], opts.volumes ?? [], false);
    Object.assign(record, volumeFields(attach, []));
    return this.startSandbox(record, join(tpl.dir, TEMPLATE_FILES.disk), tpl.manifest.vm.diskMb, async (dir) => ({
      vm: await Vm.launch(this.bootSpec({
        dir, id: record.id, kernel: join(tpl.dir, TEMPLATE_FILES.kernel), initrd: join(tpl.dir, TEMPLATE_FILES.initrd),
        disk: join(dir, VM_FILES.disk), backing: this.diskBacking(record), memoryFile: join(dir, TEMPLATE_FILES.memory), vcpus, memoryMb, volumes: attach,
      }), this.s.host),
      bootTimeoutMs: BOOT_TIMEOUT_MS,
    }), undefined, false, attach);
  }

  /** Shuts a sandbox's VM down keeping its disk; its network goes with the VM. */
  async stopKeepingDisk(id: string): Promise<void> {
    const sbx = this.s.sandboxes.get(id);
    await sbx.stopKeepingDisk();
    await this.s.networks.release(id, sbx.dir);
  }

  /** Boots a shut-down sandbox again from its own disk overlay; see `Runtime.bootFromDisk`. */
  async bootFromDisk(id: string): Promise<Sandbox> {
    const sbx = this.s.sandboxes.get(id);
    if (sbx.state === "running") return sbx;
    if (sbx.state !== "stopped") throw new DenError("invalid_state", `sandbox ${id} is ${sbx.state}; only a shut-down sandbox boots from its disk`);
    const i = sbx.info;
    const tplDir = this.s.templates.dir(i.template);
    const vm = await Vm.launch(this.bootSpec({
      dir: sbx.dir, id, kernel: join(tplDir, TEMPLATE_FILES.kernel), initrd: join(tplDir, TEMPLATE_FILES.initrd),
      disk: join(sbx.dir, VM_FILES.disk), backing: this.diskBacking(i), memoryFile: join(sbx.dir, TEMPLATE_FILES.memory), vcpus: i.vcpus, memoryMb: i.memoryMb,
      volumes: i.volumes ?? [],
    }), this.s.host);
    await sbx.bootedFromDisk(vm, BOOT_TIMEOUT_MS);
    return sbx;
  }

  /** Boots a bare VM from a kernel and disk (no snapshot) and waits for its agent; see `Runtime.bootVm`. */
  async bootVm(opts: { dir: string; kernel: string; initrd: string; disk: string; backing: readonly string[]; memoryFile: string; vcpus: number; memoryMb: number; id?: string }): Promise<{ vm: Vm; agent: AgentClient }> {
    const vm = await Vm.launch(this.bootSpec({ ...opts, id: opts.id ?? newId("boot") }), this.s.host);
    try {
      const agent = await AgentClient.connect(join(opts.dir, VM_FILES.agent), BOOT_TIMEOUT_MS);
      return { vm, agent };
    } catch (e) {
      await vm.kill();
      throw e;
    }
  }

  private diskBacking(record: Pick<SandboxRecord, "template" | "backingSnapshot">): string[] {
    return this.s.context.diskBacking(record);
  }

  private bootSpec(opts: BootSpecOptions) {
    return bootSpec(this.s.layout.instance, this.s.host, opts);
  }

  /**
   * The common path of every new sandbox: record it (durably, as "starting"), give it a
   * disk overlay, launch its VM, connect to its agent, then mark it running. Any failure
   * removes everything it made.
   */
  private async startSandbox(
    record: SandboxRecord,
    backingDisk: string,
    sourceDiskMb: number,
    launch: (dir: string) => Promise<{ vm: Vm; resume?: () => Promise<void>; bootTimeoutMs?: number }>,
    pooled?: PooledVm,
    adoptDisk = false,
    mount: VolumeAttachment[] = [],
  ): Promise<Sandbox> {
    const dir = this.s.layout.sandbox(record.id);
    if (pooled) {
      // The claim: the record goes into the pooled VM's directory, which then becomes the
      // sandbox's in one rename (a kill before it leaves a pool VM, which the next open kills).
      try {
        await writeRecord(pooled.dir, record);
        await rename(pooled.dir, dir);
      } catch (e) {
        await this.s.pool.discard(pooled);
        throw e;
      }
    } else {
      await mkdir(dir, { recursive: true });
      await writeRecord(dir, record);
    }
    let vm: Vm | undefined = pooled?.vm;
    try {
      if (pooled) await pooled.vm.claim(dir);
      else if (adoptDisk) await adoptFile(backingDisk, join(dir, VM_FILES.disk));
      else await this.s.overlays.create(this.diskBacking(record), join(dir, VM_FILES.disk));
      const launched = await launch(dir);
      vm = launched.vm;
      const sbx = new Sandbox(dir, record, vm, this.s.context);
      await sbx.connectAgent(launched.resume, launched.bootTimeoutMs, true);
      await sbx.settleVolumes(mount);
      await sbx.setState("running");
      this.s.sandboxes.add(sbx);
      if (record.diskMb > sourceDiskMb) await sbx.growDisk(record.diskMb);
      return sbx;
    } catch (e) {
      this.s.sandboxes.remove(record.id);
      // What QEMU said goes with the error: the directory holding its log is removed next.
      const alive = vm ? isAlive(vm.pid) : false;
      const log = e instanceof DenError ? "" : await readFile(join(dir, VM_FILES.log), "utf8").catch(() => "");
      await vm?.kill();
      await rm(dir, { recursive: true, force: true });
      if (e instanceof DenError) throw e;
      const code = (e as NodeJS.ErrnoException).code;
      throw new DenError("qemu_error", `sandbox ${record.id} failed to start: ${(e as Error).message}${code ? ` (${code})` : ""}; its QEMU ${alive ? "was running" : "had exited"}; qemu.log: ${log.slice(-600).trim() || "(empty)"}`, undefined, { cause: e });
    }
  }
}

/** Whether a start failed because QEMU dropped its connections (it crashed) rather than for a reason of the snapshot's. */
function qemuDroppedAtStart(e: unknown): boolean {
  if (!(e instanceof DenError) || e.code !== "qemu_error") return false;
  if (/^QMP (connection )?closed/.test(e.message)) return true;
  const code = ((e as { cause?: unknown }).cause as NodeJS.ErrnoException | undefined)?.code;
  return /failed to start/.test(e.message) && (code === "ECONNRESET" || code === "EPIPE");
}

/** How long a fed state may take to arrive: generous (a slow store), but not forever (a store read that stalls). */
function streamedLoadTimeoutMs(memoryMb: number): number {
  return Math.max(60_000, memoryMb * 200);
}

/** `p`, or a `qemu_error` once `ms` have passed (a restore's deadline, as a stalled load had). */
async function withDeadline(p: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DenError("qemu_error", `restore: ${what} within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

function checkDiskMb(diskMb: number | undefined, minimum: number): number {
  if (diskMb === undefined) return minimum;
  if (!Number.isInteger(diskMb) || diskMb < minimum || diskMb > MAX_DISK_MB) {
    throw new DenError("invalid_argument", `diskMb must be an integer in ${minimum}..${MAX_DISK_MB} (the source's disk is ${minimum} MiB)`);
  }
  return diskMb;
}

function checkPidsMax(pidsMax = 4096): number {
  if (!Number.isInteger(pidsMax) || pidsMax < 16 || pidsMax > 65536) throw new DenError("invalid_argument", "pidsMax must be an integer in 16..65536");
  return pidsMax;
}

/**
 * Makes `disk` (a snapshot's, about to be deleted) the file at `dest` too: a second name
 * for the same file (its snapshot's name goes with the snapshot), or a copy across filesystems.
 */
async function adoptFile(disk: string, dest: string): Promise<void> {
  try {
    await link(disk, dest);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EXDEV") throw e;
    await copyFile(disk, dest);
  }
}

/** A record's volume fields (absent when empty, as records before volumes were). */
function volumeFields(attach: VolumeAttachment[], stale: SnapshotVolume[]): Pick<SandboxRecord, "volumes" | "staleVolumes"> {
  return { ...(attach.length ? { volumes: attach } : {}), ...(stale.length ? { staleVolumes: stale } : {}) };
}
