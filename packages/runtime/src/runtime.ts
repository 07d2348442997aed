import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { copyFile, cp, link, mkdir, open, symlink, readFile, rename, rm, writeFile } from "node:fs/promises";
import { spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { DenError } from "@den/protocol";
import { AgentClient } from "./agent-client.js";
import { capAppendLog } from "./console-log.js";
import { hostProfile, type HostProfile } from "./host.js";
import { planSlots, type SnapshotVolume, type VolumeAttachment, type VolumeRequest } from "./volumes.js";
import { POOL_TAG_PREFIX, VM_FILES, bootCommandLine, checkSocketPaths, findInstanceProcesses, isAlive, killAndWait, type VmSpec } from "./qemu.js";
import { Sandbox, writeRecord, type SandboxRecord, type SnapshotOptions } from "./sandbox.js";
import { checkCompatible, digestFiles, readManifest, verifySnapshot, writeManifest, type SnapshotManifest, type TemplateRef } from "./snapshot.js";
import { TEMPLATE_FILES, TemplateStore } from "./templates.js";
import { ID_PATTERN, newId, privateDir, qcow2BackingFile, runTool } from "./util.js";
import { prepareNativeTools } from "./native.js";
import { Vm, type StateSink } from "./vm.js";
import { OverlayMaker } from "./overlay.js";
import { VmPool, type PoolShape, type PooledVm } from "./pool.js";
import { warmPooledVm } from "./pool-warmup.js";
import { hostCgroups } from "./jail/host.js";
import { openStatePipe, type StateFeed } from "./state-pipe.js";
import { NetworkManager, parseHostsMap } from "./network/manager.js";
import type { EgressPolicy } from "./network/sandbox-network.js";

/** The MAC of every guest NIC; a fork gets its own network identity when networking is on. */
const GUEST_MAC = "52:54:00:de:4e:01";
const DELETED_MARKER = "deleted";
/** A cold boot under TCG on a loaded host can take a while; a restore never should. */
const BOOT_TIMEOUT_MS = 120_000;

export interface RuntimeOptions {
  /** Where templates, sandboxes and snapshots live (default: $DEN_DATA_DIR or /var/lib/den). */
  dataDir?: string;
}

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

export interface ForkOptions {
  ids?: string[];
  volumes?: VolumeRequest[];
  reached?: (point: string) => void;
}

export interface SnapshotInfo {
  id: string;
  dir: string;
  manifest: SnapshotManifest;
}

/** Tries of a restore whose QEMU crashed as it started (see restoreFrom). */
const RESTORE_ATTEMPTS = 3;

/** Whether a start failed because QEMU dropped its connections (it crashed) rather than for a reason of the snapshot's. */
function qemuDroppedAtStart(e: unknown): boolean {
  if (!(e instanceof DenError) || e.code !== "qemu_error") return false;
  if (/^QMP (connection )?closed/.test(e.message)) return true;
  const code = ((e as { cause?: unknown }).cause as NodeJS.ErrnoException | undefined)?.code;
  return /failed to start/.test(e.message) && (code === "ECONNRESET" || code === "EPIPE");
}

/** How long a streamed state may take to load: generous (a slow store), but not forever (a stream that never ends). */
function streamedLoadTimeoutMs(memoryMb: number): number {
  return Math.max(60_000, memoryMb * 200);
}

/**
 * One runtime per data dir: a second one would adopt (and on recovery kill) the first
 * one's VMs. The lock names the owning pid, so a crashed owner's lock is taken over.
 */
function lockDataDir(dataDir: string): void {
  const lock = join(dataDir, "lock");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: "wx" });
      return;
    } catch {
      const owner = Number(readFileSync(lock, "utf8").trim());
      if (owner && owner !== process.pid && isAlive(owner)) {
        throw new DenError("invalid_state", `data dir ${dataDir} is in use by process ${owner}`);
      }
      rmSync(lock, { force: true });
    }
  }
  throw new DenError("invalid_state", `cannot lock data dir ${dataDir}`);
}

/** Runtimes of this process being closed, by data dir: what they have yet to finish (a pool spawn in flight). */
const closing = new Map<string, Promise<void>>();

function unlockDataDir(dataDir: string): void {
  const lock = join(dataDir, "lock");
  try {
    if (Number(readFileSync(lock, "utf8").trim()) === process.pid) rmSync(lock, { force: true });
  } catch {
    // not locked by us
  }
}

/** Largest disk a request may ask for (the overlay grows on the host only as the guest writes). */
const MAX_DISK_MB = 256 * 1024;

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

export function defaultDataDir(): string {
  return process.env.DEN_DATA_DIR ?? "/var/lib/den";
}

/**
 * The host-side driver: runs each sandbox as one QEMU microVM, restores sandboxes from
 * template snapshots, and owns every file and process it creates under its data dir.
 *
 * @example
 * ```ts
 * const rt = await Runtime.open({ dataDir: "/var/lib/den" });
 * const sbx = await rt.create({ template: "base" });
 * const r = await sbx.exec("echo hello");
 * await sbx.destroy();
 * ```
 */
export class Runtime {
  readonly templates: TemplateStore;
  private sandboxes = new Map<string, Sandbox>();
  /** QEMU writes its own warnings to qemu.log; a guest must not be able to grow it without bound. */
  private logCapTimer = setInterval(() => {
    for (const s of this.sandboxes.values()) capAppendLog(join(s.dir, VM_FILES.log));
  }, 30_000).unref();

  /** Sandboxes' networks (egress policy, namespaces, routers). */
  readonly networks: NetworkManager;
  /** A new sandbox's disk overlay, without a qemu-img spawn each time. */
  private readonly overlays: OverlayMaker;
  /** QEMUs spawned ahead of the creates that will take them. */
  private readonly pool: VmPool;

  private constructor(
    readonly dataDir: string,
    readonly instance: string,
    readonly host: HostProfile,
  ) {
    this.templates = new TemplateStore(join(dataDir, "templates"));
    this.overlays = new OverlayMaker(join(dataDir, "overlays"));
    this.pool = new VmPool(join(dataDir, "pool"), (shape, dir, id, closed) => this.spawnPooled(shape, dir, id, closed));
    this.networks = new NetworkManager(instance, process.env.DEN_NET_POOL ?? "100.96.0.0/16", parseHostsMap(process.env.DEN_NET_HOSTS), process.env.DEN_NET_MASQUERADE !== "0");
  }

  /** Opens a data dir: adopts sandboxes whose QEMU still runs, cleans up what's left of others. */
  static async open(opts: RuntimeOptions = {}): Promise<Runtime> {
    const dataDir = resolve(opts.dataDir ?? defaultDataDir());
    // A runtime of this process closed on the same data dir may still be ending a pool spawn.
    await closing.get(dataDir);
    privateDir(dataDir);
    for (const d of ["templates", "sandboxes", "snapshots"]) await mkdir(join(dataDir, d), { recursive: true });
    prepareNativeTools(dataDir);
    const idFile = join(dataDir, "instance-id");
    let instance = existsSync(idFile) ? readFileSync(idFile, "utf8").trim() : "";
    if (!ID_PATTERN.test(instance)) {
      instance = newId("den");
      await writeFile(idFile, instance + "\n");
    }
    lockDataDir(dataDir);
    try {
      const rt = new Runtime(dataDir, instance, await hostProfile());
      await rt.recover();
      return rt;
    } catch (e) {
      unlockDataDir(dataDir);
      throw e;
    }
  }

  private sandboxDir(id: string): string {
    return join(this.dataDir, "sandboxes", id);
  }

  /** Where forks keep their shared RAM files: tmpfs when the host has one. */
  get ramDir(): string {
    return existsSync("/dev/shm") ? join("/dev/shm", `den-${this.instance}`) : join(this.dataDir, "ram");
  }

  private snapshotDir(id: string): string {
    return join(this.dataDir, "snapshots", id);
  }

  private context() {
    return {
      host: this.host,
      templateDisk: (ref: TemplateRef) => join(this.templates.dir(ref), TEMPLATE_FILES.disk),
      templateMemory: (ref: TemplateRef) => join(this.templates.dir(ref), TEMPLATE_FILES.memory),
      onDestroyed: async (id: string) => {
        this.sandboxes.delete(id);
        await this.networks.release(id);
        await this.gc();
      },
    };
  }

  /** Finds sandboxes again after a restart; kills this instance's QEMUs that have no sandbox. */
  private async recover(): Promise<void> {
    const live = findInstanceProcesses(this.instance, { pooled: true });
    // Network routers of the last run go first: each VM's NIC takes one router at a time,
    // and the adopted ones get new routers below.
    for (const [tag, pid] of live) {
      if (!tag.startsWith("net-")) continue;
      await killAndWait(pid);
      live.delete(tag);
    }
    const root = join(this.dataDir, "sandboxes");
    for (const id of readdirSync(root)) {
      const dir = join(root, id);
      const pid = live.get(id);
      live.delete(id);
      let record: SandboxRecord | undefined;
      try {
        record = JSON.parse(await readFile(join(dir, "sandbox.json"), "utf8")) as SandboxRecord;
      } catch {
        record = undefined;
      }
      if (record && pid && (record.state === "running" || record.state === "paused")) {
        try {
          const vm = await Vm.attach(dir, pid);
          const status = await vm.status();
          record.state = status === "running" ? "running" : "paused";
          await writeRecord(dir, record);
          const sbx = new Sandbox(dir, record, vm, this.context());
          this.sandboxes.set(id, sbx);
          // Its router died with the old runtime (or was killed below as a stray): a new one.
          await this.networks.readopt(sbx).catch(() => this.networks.release(id, dir));
          continue;
        } catch {
          // unreachable QEMU: treat as dead below
        }
      }
      if (record?.state === "stopped") {
        // A disk hibernation: its disk is whole (flushed before the record said so); a QEMU
        // still there is one that was quitting, or booting for a wake that never finished.
        if (pid) await killAndWait(pid);
        await this.networks.release(id, dir);
        this.sandboxes.set(id, new Sandbox(dir, record, undefined, this.context()));
        continue;
      }
      if (pid) await killAndWait(pid);
      await this.networks.release(id, dir);
      await rm(dir, { recursive: true, force: true });
    }
    // What is left: QEMUs without a sandbox (the last run's pool among them).
    for (const pid of live.values()) await killAndWait(pid);
    await rm(this.pool.root, { recursive: true, force: true });
    // Their cgroups (and those of VMs killed before): a cgroup still holding a process stays.
    hostCgroups()?.removeEmpty(this.instance);
    const snaps = join(this.dataDir, "snapshots");
    for (const id of readdirSync(snaps)) {
      if (!existsSync(join(snaps, id, "manifest.json"))) await rm(join(snaps, id), { recursive: true, force: true });
    }
    // RAM files of forks: running children keep their mappings; the files outlive no snapshot.
    if (existsSync(this.ramDir)) {
      privateDir(this.ramDir);
      for (const f of readdirSync(this.ramDir)) {
        const id = f.replace(/\.ram$/, "");
        if (!existsSync(join(snaps, id, "manifest.json")) || existsSync(join(snaps, id, DELETED_MARKER))) await rm(join(this.ramDir, f), { force: true });
      }
    }
    await this.gc();
  }

  private newSandboxId(id?: string): string {
    if (id === undefined) return newId("sbx");
    // (`bld_`: a template build's VM, which the host agent keeps to itself.)
    if (!/^(sbx|bld)_[a-z2-7]{16}$/.test(id)) throw new DenError("invalid_argument", `not a sandbox id: ${JSON.stringify(id)}`);
    if (this.sandboxes.has(id) || existsSync(this.sandboxDir(id))) throw new DenError("already_exists", `sandbox ${id} already exists on this host`);
    return id;
  }

  has(id: string): boolean {
    return this.sandboxes.has(id);
  }

  get(id: string): Sandbox {
    const s = typeof id === "string" ? this.sandboxes.get(id) : undefined;
    if (!s) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(id)} does not exist`);
    return s;
  }

  list(): Sandbox[] {
    return [...this.sandboxes.values()];
  }

  /** Creates a sandbox by restoring the template's snapshot: no boot. */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const tpl = await this.templates.resolve(opts.template ?? "base");
    checkCompatible(tpl.manifest, this.host);
    try {
      const shape = opts.pooled === false ? undefined : this.poolShape(tpl.dir, tpl.manifest);
      return await this.restoreFrom(tpl.dir, tpl.manifest, { name: tpl.name, version: tpl.version }, undefined, opts, undefined, shape);
    } finally {
      // After the create, not during it: a spawn's work on this thread would delay it.
      this.pool.refill();
    }
  }

  /** Starts keeping QEMUs ready for creates from `template` (the host agent does for `base` at start). */
  async prewarm(template = "base"): Promise<void> {
    const tpl = await this.templates.resolve(template).catch(() => undefined);
    if (!tpl) return;
    try {
      checkCompatible(tpl.manifest, this.host);
    } catch {
      return;
    }
    this.pool.want(this.poolShape(tpl.dir, tpl.manifest));
    this.pool.refill();
  }

  /** How many pooled QEMUs wait for a create. */
  get pooledVms(): number {
    return this.pool.ready;
  }

  private poolShape(dir: string, m: SnapshotManifest): PoolShape {
    return {
      source: dir, memoryFile: join(dir, TEMPLATE_FILES.memory), stateFile: join(dir, TEMPLATE_FILES.state),
      backingDisk: join(dir, TEMPLATE_FILES.disk), vcpus: m.vm.vcpus, memoryMb: m.vm.memoryMb,
    };
  }

  /**
   * A pooled QEMU: what restoreOnce would launch for a create, but not yet any sandbox's,
   * its template's state loaded and its guest run once (warmPooledVm), paused.
   */
  private async spawnPooled(shape: PoolShape, dir: string, id: string, closed: () => boolean): Promise<Vm> {
    // It will be renamed to a sandbox's directory: that one's sockets must fit too.
    checkSocketPaths(this.sandboxDir(newId("sbx")));
    await this.overlays.create(shape.backingDisk, join(dir, VM_FILES.disk));
    // A close kills the pool's QEMUs it finds: one launched after it must not warm up first.
    const stopIfClosed = async (vm?: Vm) => {
      if (!closed()) return;
      await vm?.kill();
      throw new Error("the pool is closed");
    };
    await stopIfClosed();
    // QEMU 7.2 now and then crashes as a restored VM's guest starts (see restoreFrom): a QEMU
    // that died in its warm-up is started again (twice at most; a template that fails so
    // every time is left to the pool's backoff).
    for (let attempt = 1; ; attempt++) {
      const vm = await Vm.launch(this.restoreSpec(dir, id, shape, { incomingState: shape.stateFile }), this.host, { console: false });
      await stopIfClosed(vm);
      try {
        await warmPooledVm(vm, dir, shape.stateFile);
        return vm;
      } catch (e) {
        const crashed = vm.qmp.closed || !isAlive(vm.pid);
        await vm.kill();
        if (attempt >= 3 || !crashed || closed()) throw e;
        process.emitWarning(`VM pool: a QEMU died in its warm-up (${(e as Error).message.slice(0, 200)}); starting another`, "DenPoolWarning");
      }
    }
  }

  /** A VM that restores a saved state over `memoryFile` (copy-on-write), its disk the overlay in `dir`. */
  private restoreSpec(dir: string, tag: string, shape: { vcpus: number; memoryMb: number; memoryFile: string }, state: { incomingFd: number } | { incomingState: string }, volumes?: VolumeAttachment[]): VmSpec {
    return {
      dir, vcpus: shape.vcpus, memoryMb: shape.memoryMb, memoryFile: shape.memoryFile, shareMemory: false,
      disk: join(dir, VM_FILES.disk), incoming: true, ...state, ...(volumes?.length ? { volumes } : {}),
      macAddress: GUEST_MAC, tag: { instance: this.instance, sandbox: tag },
    };
  }

  /**
   * Restores a new sandbox from a snapshot (by id). `feedState`: its saved state is not in
   * the snapshot's directory but written by the feed as the VM loads it (a cold wake
   * decompressing from the store); the VM runs only once the feed has checked all of it.
   * `adoptDisk`: the snapshot is deleted right after this (a download's, owned by the caller):
   * its disk becomes the sandbox's own instead of the backing of a new overlay, so the chain
   * stays one level above the template's disk with no overlay made now or rebased later.
   */
  async restore(snapshotId: string, opts: CreateOptions & { adoptDisk?: boolean } = {}, feedState?: StateFeed, prelaunched?: PooledVm): Promise<Sandbox> {
    const snap = await this.getSnapshot(snapshotId);
    checkCompatible(snap.manifest, this.host);
    if (!this.templates.has(snap.manifest.template)) {
      throw new DenError("template_not_found", `snapshot ${snapshotId} needs template ${snap.manifest.template.name}@${snap.manifest.template.version}, which is not on this host`);
    }
    return this.restoreFrom(snap.dir, snap.manifest, snap.manifest.template, opts.adoptDisk ? undefined : snapshotId, opts, feedState, undefined, opts.adoptDisk, prelaunched);
  }

  /** `prelaunched`: a QEMU started for this restore already (a fork's child), else one from the pool for `shape`, else a new one. */
  private async restoreFrom(srcDir: string, m: SnapshotManifest, tpl: TemplateRef, backingSnapshot: string | undefined, opts: CreateOptions, feedState?: StateFeed, shape?: PoolShape, adoptDisk = false, prelaunched?: PooledVm): Promise<Sandbox> {
    const id = this.newSandboxId(opts.id);
    // A wake (the same sandbox) gets back the volumes its guest kept mounted; others' mounts are stale.
    const slots = planSlots(m.volumes ?? [], opts.volumes ?? [], id === m.sourceSandbox);
    const record: SandboxRecord = {
      id, instance: this.instance, state: "starting", createdAt: new Date().toISOString(), template: tpl,
      ...(backingSnapshot ? { backingSnapshot } : {}),
      vcpus: m.vm.vcpus, memoryMb: m.vm.memoryMb, diskMb: checkDiskMb(opts.diskMb, m.vm.diskMb), pidsMax: checkPidsMax(opts.pidsMax),
      ...volumeFields(slots.attach, slots.stale),
    };
    // A pooled QEMU was spawned with its slots empty.
    if (slots.attach.length) {
      shape = undefined;
      if (prelaunched) await this.pool.discard(prelaunched);
      prelaunched = undefined;
    }
    // RAM is either a file in the source (template, cold-booted sandbox) or a stream over the template's RAM.
    const memoryFile = m.memory === "file" ? join(srcDir, TEMPLATE_FILES.memory) : join(this.templates.dir(tpl), TEMPLATE_FILES.memory);
    // A QEMU that goes away as it starts (before the guest has run, the sources untouched) is
    // tried again: up to three attempts, the later ones after a pause. The one known cause,
    // QEMU 7.2's segfault at a restore's `cont` when its NIC socket was not bound (about one
    // restore in a hundred in CI runs, in bursts), Vm.launch and Vm.attach now rule out.
    for (let attempt = 1; ; attempt++) {
      try {
        const vm = attempt === 1 && prelaunched ? prelaunched : shape && this.pool.take(shape);
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
      // A fed state arrives through a pipe as it is decompressed: QEMU loads it meanwhile.
      const pipe = feedState ? await openStatePipe(dir, feedState) : undefined;
      let vm: Vm;
      try {
        vm = pooled?.vm ?? await Vm.launch(this.restoreSpec(dir, record.id, { ...record, memoryFile },
          pipe ? { incomingFd: pipe.readFd } : { incomingState: join(srcDir, TEMPLATE_FILES.state) }, record.volumes), this.host);
      } finally {
        await pipe?.closeRead();
      }
      try {
        if (pipe) await vm.loadStreamed(pipe.fed, streamedLoadTimeoutMs(record.memoryMb));
        // (A pooled VM has its template's state loaded already; a fork's child not yet.)
        else if (!pooled || pooled.pendingState) await vm.loadState(pooled?.pendingState ?? join(srcDir, TEMPLATE_FILES.state));
      } catch (e) {
        await vm.kill();
        throw e;
      }
      // Connect before resuming: the snapshot says "host connected", and if the guest ran
      // before we connected, QEMU would flap the port closed and open under the new hello.
      return { vm, resume: () => vm.cont() };
    }, pooled, adoptDisk, mount);
  }

  /**
   * Cold-boots a sandbox from a template's kernel and disk instead of restoring its
   * snapshot: slower, but any vCPU count and memory size. Its RAM lives in a file in the
   * sandbox directory, so its snapshots carry their memory as a file.
   */
  async boot(opts: CreateOptions & { vcpus?: number; memoryMb?: number } = {}): Promise<Sandbox> {
    const tpl = await this.templates.resolve(opts.template ?? "base");
    const vcpus = opts.vcpus ?? tpl.manifest.vm.vcpus;
    const memoryMb = opts.memoryMb ?? tpl.manifest.vm.memoryMb;
    if (!Number.isInteger(vcpus) || vcpus < 1 || vcpus > 16) throw new DenError("invalid_argument", "vcpus must be an integer in 1..16");
    if (!Number.isInteger(memoryMb) || memoryMb < 128 || memoryMb > 65536) throw new DenError("invalid_argument", "memoryMb must be an integer in 128..65536");
    const record: SandboxRecord = {
      id: this.newSandboxId(opts.id), instance: this.instance, state: "starting", createdAt: new Date().toISOString(),
      template: { name: tpl.name, version: tpl.version }, ramFile: true,
      vcpus, memoryMb, diskMb: checkDiskMb(opts.diskMb, tpl.manifest.vm.diskMb), pidsMax: checkPidsMax(opts.pidsMax),
    };
    const { attach } = planSlots([], opts.volumes ?? [], false);
    Object.assign(record, volumeFields(attach, []));
    return this.startSandbox(record, join(tpl.dir, TEMPLATE_FILES.disk), tpl.manifest.vm.diskMb, async (dir) => ({
      vm: await Vm.launch(this.bootSpec({
        dir, id: record.id, kernel: join(tpl.dir, TEMPLATE_FILES.kernel), initrd: join(tpl.dir, TEMPLATE_FILES.initrd),
        disk: join(dir, VM_FILES.disk), memoryFile: join(dir, TEMPLATE_FILES.memory), vcpus, memoryMb, volumes: attach,
      }), this.host),
      bootTimeoutMs: BOOT_TIMEOUT_MS,
    }), undefined, false, attach);
  }

  /**
   * Shuts a sandbox's VM down keeping its disk (see `Sandbox.stopKeepingDisk`); its network
   * goes with the VM and comes back with the policy it is given after its boot.
   */
  async stopKeepingDisk(id: string): Promise<void> {
    const sbx = this.get(id);
    await sbx.stopKeepingDisk();
    await this.networks.release(id, sbx.dir);
  }

  /**
   * Boots a shut-down sandbox again from its own disk overlay with its template's kernel
   * and initrd: same id, record and shape, a fresh memory (a RAM file in its directory, as
   * `boot()` makes). Idempotent: a running sandbox is left as it is.
   */
  async bootFromDisk(id: string): Promise<Sandbox> {
    const sbx = this.get(id);
    if (sbx.state === "running") return sbx;
    if (sbx.state !== "stopped") throw new DenError("invalid_state", `sandbox ${id} is ${sbx.state}; only a shut-down sandbox boots from its disk`);
    const i = sbx.info;
    const tplDir = this.templates.dir(i.template);
    const vm = await Vm.launch(this.bootSpec({
      dir: sbx.dir, id, kernel: join(tplDir, TEMPLATE_FILES.kernel), initrd: join(tplDir, TEMPLATE_FILES.initrd),
      disk: join(sbx.dir, VM_FILES.disk), memoryFile: join(sbx.dir, TEMPLATE_FILES.memory), vcpus: i.vcpus, memoryMb: i.memoryMb,
      volumes: i.volumes ?? [],
    }), this.host);
    await sbx.bootedFromDisk(vm, BOOT_TIMEOUT_MS);
    return sbx;
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
    const dir = this.sandboxDir(record.id);
    if (pooled) {
      // The claim: the record goes into the pooled VM's directory, which then becomes the
      // sandbox's in one rename (a kill before it leaves a pool VM, which the next open kills).
      try {
        await writeRecord(pooled.dir, record);
        await rename(pooled.dir, dir);
      } catch (e) {
        await this.pool.discard(pooled);
        throw e;
      }
    } else {
      await mkdir(dir, { recursive: true });
      await writeRecord(dir, record);
    }
    let vm: Vm | undefined = pooled?.vm;
    try {
      if (pooled) await pooled.vm.claim(dir);
      else if (adoptDisk) await adopt(backingDisk, join(dir, VM_FILES.disk));
      else await this.overlays.create(backingDisk, join(dir, VM_FILES.disk));
      const launched = await launch(dir);
      vm = launched.vm;
      const sbx = new Sandbox(dir, record, vm, this.context());
      await sbx.connectAgent(launched.resume, launched.bootTimeoutMs, true);
      await sbx.settleVolumes(mount);
      await sbx.setState("running");
      this.sandboxes.set(record.id, sbx);
      if (record.diskMb > sourceDiskMb) await sbx.growDisk(record.diskMb);
      return sbx;
    } catch (e) {
      this.sandboxes.delete(record.id);
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

  private bootSpec(opts: { dir: string; id: string; kernel: string; initrd: string; disk: string; memoryFile: string; vcpus: number; memoryMb: number; volumes?: VolumeAttachment[] }): VmSpec {
    return {
      ...(opts.volumes?.length ? { volumes: opts.volumes } : {}),
      dir: opts.dir, vcpus: opts.vcpus, memoryMb: opts.memoryMb, memoryFile: opts.memoryFile, shareMemory: true,
      disk: opts.disk, boot: { kernel: opts.kernel, initrd: opts.initrd, append: bootCommandLine(this.host) },
      incoming: false, macAddress: GUEST_MAC, tag: { instance: this.instance, sandbox: opts.id },
    };
  }

  /**
   * Boots a bare VM from a kernel and disk (no snapshot) and waits for its agent. Used to
   * bake templates. Its RAM lives in `memoryFile` (shared), which becomes the template's memory.
   */
  async bootVm(opts: { dir: string; kernel: string; initrd: string; disk: string; memoryFile: string; vcpus: number; memoryMb: number; id?: string }): Promise<{ vm: Vm; agent: AgentClient }> {
    const vm = await Vm.launch(this.bootSpec({ ...opts, id: opts.id ?? newId("boot") }), this.host);
    try {
      const agent = await AgentClient.connect(join(opts.dir, VM_FILES.agent), BOOT_TIMEOUT_MS);
      return { vm, agent };
    } catch (e) {
      await vm.kill();
      throw e;
    }
  }

  // ---- snapshots ----

  /**
   * Takes a snapshot of a sandbox into the snapshot store. The sandbox keeps running,
   * or with `keepRunning: false` stays paused (a warm hibernate).
   */
  async snapshot(sandboxId: string, opts: { keepRunning?: boolean; ignoreShared?: boolean; id?: string; stateSink?: StateSink; ramAsFile?: boolean; releaseVolumes?: boolean } & Pick<SnapshotOptions, "beforeSave" | "unhashed"> = {}): Promise<SnapshotInfo> {
    const sbx = this.get(sandboxId);
    const id = this.newSnapshotId(opts.id);
    const dir = this.snapshotDir(id);
    // In tmpfs: each child maps it, and on disk every page the load touched would be written back.
    if (opts.ramAsFile) privateDir(this.ramDir);
    try {
      const r = await sbx.snapshot(dir, {
        id, keepRunning: opts.keepRunning ?? true, ...(opts.ignoreShared === false ? { ignoreShared: false } : {}), ...(opts.stateSink ? { stateSink: opts.stateSink } : {}),
        ...(opts.ramAsFile ? { ramFile: join(this.ramDir, `${id}.ram`) } : {}),
        ...(opts.releaseVolumes ? { releaseVolumes: true } : {}),
        ...(opts.beforeSave ? { beforeSave: opts.beforeSave } : {}),
        ...(opts.unhashed ? { unhashed: true } : {}),
      });
      return { id, dir, manifest: r.manifest };
    } catch (e) {
      await rm(dir, { recursive: true, force: true });
      throw e;
    }
  }

  /** A caller-chosen snapshot id (a control plane records it first), or a new one. */
  private newSnapshotId(id?: string): string {
    if (id === undefined) return newId("snap");
    if (!/^snap_[a-z2-7]{16}$/.test(id)) throw new DenError("invalid_argument", `not a snapshot id: ${JSON.stringify(id)}`);
    if (existsSync(this.snapshotDir(id))) throw new DenError("already_exists", `snapshot ${id} already exists on this host`);
    return id;
  }

  /** Whether a complete (not deleted) local snapshot with this id exists. */
  hasSnapshot(id: string): boolean {
    return ID_PATTERN.test(id) && existsSync(join(this.snapshotDir(id), "manifest.json")) && !existsSync(join(this.snapshotDir(id), DELETED_MARKER));
  }

  async getSnapshot(id: string): Promise<SnapshotInfo> {
    if (typeof id !== "string" || !ID_PATTERN.test(id)) throw new DenError("snapshot_not_found", `snapshot ${JSON.stringify(id)} does not exist`);
    const dir = this.snapshotDir(id);
    if (!existsSync(join(dir, "manifest.json")) || existsSync(join(dir, DELETED_MARKER))) throw new DenError("snapshot_not_found", `snapshot ${id} does not exist`);
    return { id, dir, manifest: await readManifest(dir) };
  }

  async listSnapshots(): Promise<SnapshotInfo[]> {
    const out: SnapshotInfo[] = [];
    for (const id of readdirSync(join(this.dataDir, "snapshots"))) {
      try {
        out.push(await this.getSnapshot(id));
      } catch {
        // half-written or deleted
      }
    }
    return out;
  }

  /** Deletes a snapshot. Its disk stays while sandboxes restored from it still use it. */
  async deleteSnapshot(id: string): Promise<void> {
    const snap = await this.getSnapshot(id);
    await writeFile(join(snap.dir, DELETED_MARKER), "");
    // Sandboxes restored from it keep their mapping of memory.bin; the name can go.
    await rm(join(snap.dir, TEMPLATE_FILES.state), { force: true });
    await rm(join(snap.dir, TEMPLATE_FILES.memory), { force: true });
    await rm(join(this.ramDir, `${id}.ram`), { force: true });
    await this.gc();
  }

  /**
   * Imports a snapshot directory from elsewhere (another host, a download): verifies
   * every checksum and the host's compatibility before anything is copied in. `owned`:
   * the files were just checked against their checksums by the caller (a download from
   * the store), and the directory is the caller's to give away, so they are moved in, not
   * copied and hashed again.
   */
  async importSnapshot(srcDir: string, opts: { owned?: boolean; absent?: string[] } = {}): Promise<SnapshotInfo> {
    const m = await readManifest(srcDir);
    // Files it names but does not have: only a caller's own, who feeds them to its restore.
    if (opts.absent?.length && !opts.owned) throw new DenError("invalid_argument", "only an owned import may leave files out");
    if (!opts.owned) await verifySnapshot(srcDir, m);
    checkCompatible(m, this.host);
    if (!this.templates.has(m.template)) throw new DenError("template_not_found", `snapshot needs template ${m.template.name}@${m.template.version}, which is not on this host`);
    const id = newId("snap");
    const dir = this.snapshotDir(id);
    const staging = `${dir}.import`;
    try {
      await mkdir(staging, { recursive: true });
      for (const name of Object.keys(m.files)) {
        if (opts.absent?.includes(name)) continue;
        if (opts.owned) await rename(join(srcDir, name), join(staging, name));
        else await cp(join(srcDir, name), join(staging, name));
      }
      // Its disk's backing file is this host's copy of the template: only the disk changes
      // (and not even it when it names that file already: a snapshot of this host's).
      const backing = join(this.templates.dir(m.template), TEMPLATE_FILES.disk);
      const disk = join(staging, TEMPLATE_FILES.disk);
      let files = m.files;
      if ((await qcow2BackingFile(disk)) !== backing) {
        await runTool("qemu-img", ["rebase", "-q", "-u", "-f", "qcow2", "-b", backing, "-F", "qcow2", disk], "qemu_error");
        files = { ...files, ...(await digestFiles(staging, [TEMPLATE_FILES.disk])) };
      }
      await writeManifest(staging, { ...m, id, files });
      await rename(staging, dir);
    } catch (e) {
      await rm(staging, { recursive: true, force: true });
      throw e;
    }
    return { id, dir, manifest: await readManifest(dir) };
  }

  /** Verifies a stored snapshot's checksums (after a download, before a wake). */
  async verifySnapshot(id: string): Promise<void> {
    const s = await this.getSnapshot(id);
    await verifySnapshot(s.dir, s.manifest);
  }

  // ---- network ----

  /**
   * Sets a running sandbox's egress policy: `none` (the default: its NIC leads nowhere),
   * `allowlist` or `open`. Takes effect at once; see `network/` for how it is enforced.
   */
  async setNetwork(sandboxId: string, policy: EgressPolicy): Promise<void> {
    await this.networks.set(this.get(sandboxId), policy);
  }

  /** Refused attempts since the sandbox's network came up, or undefined if it has none. */
  async networkRefusals(sandboxId: string): Promise<{ private: number; policy: number; limit: number; dns: number } | undefined> {
    return this.networks.get(sandboxId)?.refused();
  }

  // ---- fork ----

  /** Forks a running sandbox into `count` new, independent sandboxes (copy-on-write disks). */
  /** `volumes`: what each child mounts (the parent's mounts are stale in them and let go of). */
  /** `reached`: told the points a fork passes (the host agent's crash tests kill it at one). */
  async fork(sandboxId: string, count = 1, opts: ForkOptions = {}): Promise<Sandbox[]> {
    if (!Number.isInteger(count) || count < 1 || count > 16) throw new DenError("invalid_argument", "fork count must be an integer in 1..16");
    if (opts.ids && opts.ids.length !== count) throw new DenError("invalid_argument", "fork: one id per child");
    const parent = this.get(sandboxId);
    // Children of one fork share its RAM; a single child has nothing to share it with and
    // restores straight from the stream, which is several times faster under TCG.
    if (count > 1) {
      try {
        return await this.forkFrom(parent, count, true, opts);
      } catch (e) {
        if (e instanceof DenError && e.status < 500) throw e;
        // Sharing is an optimisation: the children can each load the whole stream instead
        // (the parent kept running; what the failed attempt made is gone).
        process.emitWarning(`fork of ${sandboxId}: sharing the children's RAM failed (${(e as Error).message}); each child loads its own copy`, "DenForkWarning");
      }
    }
    return this.forkFrom(parent, count, false, opts);
  }

  private async forkFrom(parent: Sandbox, count: number, shared: boolean, opts: ForkOptions): Promise<Sandbox[]> {
    // Children that each load the stream start their QEMUs while the parent's state is saved
    // (not with volumes: those QEMUs are spawned with their slots empty; nor for a parent
    // whose RAM is a file, which its snapshot copies after the state).
    const early: Array<Promise<PooledVm | undefined>> = [];
    const launchEarly = !shared && !opts.volumes?.length && !parent.info.volumes?.length && !parent.info.ramFile;
    const beforeSave = (dir: string, diskReady: Promise<void>) => {
      for (let i = 0; i < count; i++) early.push(this.launchChild(parent, dir, diskReady).catch(() => undefined));
    };
    // Shared: the parent's RAM becomes a file the children map (where the kernel cannot say
    // which pages the parent changed, the snapshot is a stream each child loads).
    let snap: SnapshotInfo;
    try {
      snap = await this.snapshot(parent.id, { unhashed: true, ...(shared ? { ramAsFile: true } : launchEarly ? { beforeSave } : {}) });
    } catch (e) {
      await Promise.all(early.map(async (p) => { const vm = await p; if (vm) await this.pool.discard(vm); }));
      throw e;
    }
    if (early.length) {
      await Promise.all(early);
      // The parent's state saved, its children's QEMUs started, none of them a sandbox's yet.
      opts.reached?.("fork-children-started");
    }
    try {
      const children: Sandbox[] = [];
      const results = await Promise.allSettled(Array.from({ length: count }, async (_, i) => this.restore(snap.id, { pidsMax: parent.info.pidsMax, ...(opts.ids ? { id: opts.ids[i]! } : {}), ...(opts.volumes?.length ? { volumes: opts.volumes } : {}) }, undefined, await early[i])));
      for (const r of results) if (r.status === "fulfilled") children.push(r.value);
      // A child whose restore failed before it took its QEMU left that one in the pool's directory.
      await Promise.all(early.map(async (p, i) => {
        const vm = await p;
        if (vm && results[i]!.status === "rejected" && existsSync(vm.dir)) await this.pool.discard(vm);
      }));
      const failed = results.find((r) => r.status === "rejected");
      if (failed) {
        await Promise.all(children.map((c) => c.destroy()));
        throw (failed as PromiseRejectedResult).reason;
      }
      if (snap.manifest.memory === "file") await this.digHolesLater(join(this.ramDir, `${snap.id}.ram`));
      return children;
    } finally {
      // The fork's snapshot is internal: its disk lives on while children use it.
      await this.deleteSnapshot(snap.id);
    }
  }

  /**
   * A fork child's QEMU, started from the snapshot's directory while the parent's state is
   * still being saved into it: spawned as the pool spawns (its directory and tag the pool's,
   * so a kill before a sandbox claims it leaves nothing the next open does not remove), it
   * loads the state once the snapshot is complete.
   */
  private async launchChild(parent: Sandbox, snapDir: string, diskReady: Promise<void>): Promise<PooledVm> {
    const id = newId(POOL_TAG_PREFIX.slice(0, -1));
    const dir = join(this.pool.root, id);
    const stateFile = join(snapDir, TEMPLATE_FILES.state);
    const { vcpus, memoryMb, template } = parent.info;
    const shape: PoolShape = {
      source: snapDir, memoryFile: join(this.templates.dir(template), TEMPLATE_FILES.memory), stateFile,
      backingDisk: join(snapDir, TEMPLATE_FILES.disk), vcpus, memoryMb,
    };
    try {
      await mkdir(dir, { recursive: true });
      await diskReady;
      await this.overlays.create(shape.backingDisk, join(dir, VM_FILES.disk));
      const vm = await Vm.launch(this.restoreSpec(dir, id, shape, { incomingState: stateFile }), this.host, { console: false });
      return { id, dir, shape, vm, pendingState: stateFile };
    } catch (e) {
      await rm(dir, { recursive: true, force: true });
      throw e;
    }
  }

  /**
   * Frees the zero pages that loading put into a fork's RAM file, in the background: the
   * children map them unchanged (zero either way), so they need not wait. The open file
   * outlives the snapshot's deletion.
   */
  private async digHolesLater(ramPath: string): Promise<void> {
    const fh = await open(ramPath, "r+").catch(() => undefined);
    if (!fh) return;
    const child = spawn("fallocate", ["--dig-holes", "/dev/fd/3"], { stdio: ["ignore", "ignore", "ignore", fh.fd] });
    child.on("error", () => undefined);
    child.on("close", () => void fh.close().catch(() => undefined));
  }

  /**
   * Loads a snapshot's migration stream (taken with `ignoreShared: false`) into a paused
   * helper QEMU whose RAM is the shared file `ramPath`, then saves only its device state
   * to `stateOut`: together they are the snapshot with its RAM as a file.
   */
  private async streamToRamFile(snap: SnapshotInfo, ramPath: string, stateOut: string): Promise<void> {
    const helperDir = join(snap.dir, "helper");
    await mkdir(helperDir);
    try {
      await runTool("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", join(snap.dir, TEMPLATE_FILES.disk), join(helperDir, VM_FILES.disk)], "qemu_error");
      // A stream of only the changed pages goes over the template's RAM (the snapshots taken
      // for this carry every page; a checkpoint would not).
      if (snap.manifest.changedPagesOnly) await copyFile(join(this.templates.dir(snap.manifest.template), TEMPLATE_FILES.memory), ramPath);
      const vm = await Vm.launch({
        dir: helperDir, vcpus: snap.manifest.vm.vcpus, memoryMb: snap.manifest.vm.memoryMb,
        memoryFile: ramPath, shareMemory: true, disk: join(helperDir, VM_FILES.disk),
        incoming: true, incomingState: join(snap.dir, TEMPLATE_FILES.state), macAddress: GUEST_MAC, tag: { instance: this.instance, sandbox: snap.id },
      }, this.host);
      try {
        // The stream carries every page: load it into the shared file, then save all but the RAM.
        await vm.setIgnoreShared(false);
        await vm.loadState(join(snap.dir, TEMPLATE_FILES.state));
        await vm.setIgnoreShared(true);
        await vm.saveState(stateOut);
      } catch (e) {
        // What QEMU said before it went (a helper killed mid-load says nothing over QMP).
        const log = await readFile(join(helperDir, VM_FILES.log), "utf8").catch(() => "");
        throw new DenError("qemu_error", `the fork's RAM-sharing helper failed: ${(e as Error).message}${(e as NodeJS.ErrnoException).code ? ` (${(e as NodeJS.ErrnoException).code})` : ""}; its QEMU ${isAlive(vm.pid) ? "was running" : "had exited"}; qemu.log: ${log.slice(-600).trim() || "(empty)"}`, undefined, { cause: e });
      } finally {
        await vm.kill();
      }
    } finally {
      await rm(helperDir, { recursive: true, force: true });
    }
  }

  /**
   * Captures a running sandbox into `dir` as a template's files: RAM as a file
   * (memory.bin), device state (state.bin), and its disk flattened into one standalone
   * image (disk.qcow2). The sandbox pauses only for its snapshot and keeps running.
   */
  async captureSandbox(sandboxId: string, dir: string, opts: { flattenDisk: boolean }): Promise<{ template: TemplateRef; vm: SnapshotManifest["vm"]; pauseMs: number }> {
    const snap = await this.snapshot(sandboxId, { ignoreShared: false });
    try {
      await this.streamToRamFile(snap, join(dir, TEMPLATE_FILES.memory), join(dir, TEMPLATE_FILES.state));
      // The snapshot's disk is an overlay on its template's disk: keep it so (small), or
      // flatten it into one standalone image when the chain would get long.
      if (opts.flattenDisk) await runTool("qemu-img", ["convert", "-O", "qcow2", join(snap.dir, TEMPLATE_FILES.disk), join(dir, TEMPLATE_FILES.disk)], "qemu_error");
      else await rename(join(snap.dir, TEMPLATE_FILES.disk), join(dir, TEMPLATE_FILES.disk));
      return { template: snap.manifest.template, vm: snap.manifest.vm, pauseMs: snap.manifest.pauseMs };
    } finally {
      await this.deleteSnapshot(snap.id);
    }
  }

  // ---- housekeeping ----

  /**
   * Keeps a template version alive for something this host cannot see (a snapshot in
   * the store of a cold-hibernated sandbox): `holder` names it, `unpinTemplate` lets go.
   */
  async pinTemplate(holder: string, ref: TemplateRef): Promise<void> {
    if (!ID_PATTERN.test(holder)) throw new DenError("invalid_argument", `invalid pin holder ${JSON.stringify(holder)}`);
    await mkdir(join(this.dataDir, "pins"), { recursive: true });
    await writeFile(join(this.dataDir, "pins", holder), `${ref.name}@${ref.version}\n`);
  }

  /** Who holds template pins (see `pinTemplate`). */
  pinHolders(): string[] {
    const pins = join(this.dataDir, "pins");
    return existsSync(pins) ? readdirSync(pins) : [];
  }

  async unpinTemplate(holder: string): Promise<void> {
    if (!ID_PATTERN.test(holder)) return;
    await rm(join(this.dataDir, "pins", holder), { force: true });
    await this.gc();
  }

  /** Removes deleted snapshots and old template versions that nothing references. */
  async gc(): Promise<void> {
    const snapRefs = new Set<string>();
    const tplRefs = new Set<string>();
    const pins = join(this.dataDir, "pins");
    if (existsSync(pins)) for (const f of readdirSync(pins)) tplRefs.add(readFileSync(join(pins, f), "utf8").trim());
    for (const s of this.sandboxes.values()) {
      if (s.state === "destroyed") continue;
      if (s.info.backingSnapshot) snapRefs.add(s.info.backingSnapshot);
      tplRefs.add(`${s.info.template.name}@${s.info.template.version}`);
    }
    for (const t of await this.templates.list()) if (t.manifest.baseTemplate) tplRefs.add(`${t.manifest.baseTemplate.name}@${t.manifest.baseTemplate.version}`);
    const root = join(this.dataDir, "snapshots");
    for (const id of readdirSync(root)) {
      const dir = join(root, id);
      // Snapshots still being written have no manifest yet; recover() sweeps abandoned ones.
      if (!existsSync(join(dir, "manifest.json"))) continue;
      if (existsSync(join(dir, DELETED_MARKER)) && !snapRefs.has(id)) {
        await rm(dir, { recursive: true, force: true });
        continue;
      }
      try {
        const m = await readManifest(dir);
        tplRefs.add(`${m.template.name}@${m.template.version}`);
      } catch {
        // unreadable manifest: leave it for an operator
      }
    }
    await this.templates.gc(tplRefs);
    this.pool.retain((shape) => existsSync(shape.source));
  }

  /** Disconnects from every VM; the VMs keep running and are adopted by the next `open`. */
  close(): void {
    // The waiting VMs, and one still starting (the pool's spawn is not awaited): nothing of the
    // pool outlives this, its cgroups neither (a data dir never opened again, a test's, would
    // never sweep them). Each is waited for until it is gone: a killed QEMU, a zombie already,
    // no longer shows its tag, but it holds its cgroup until its exit is done (the cgroups'
    // removal below failed now and then when it only waited for the ones it could still find).
    const killed = new Set(this.pool.close());
    for (const [tag, pid] of findInstanceProcesses(this.instance, { pooled: true })) {
      if (tag.startsWith(POOL_TAG_PREFIX)) killed.add(pid);
    }
    const reaped = [...killed].map((pid) => killAndWait(pid));
    const settled: Promise<void> = Promise.all([this.pool.settled(), ...reaped]).then(() => undefined, () => undefined).finally(() => {
      // (Detached sandboxes, still running, keep theirs and the instance's.)
      hostCgroups()?.removeEmpty(this.instance);
      if (closing.get(this.dataDir) === settled) closing.delete(this.dataDir);
    });
    closing.set(this.dataDir, settled);
    for (const s of this.sandboxes.values()) s.detach();
    this.sandboxes.clear();
    this.networks.detach();
    clearInterval(this.logCapTimer);
    unlockDataDir(this.dataDir);
  }

  /** Destroys every sandbox of this runtime. */
  async destroyAll(): Promise<void> {
    await Promise.all([...this.sandboxes.values()].map((s) => s.destroy()));
  }
}

/**
 * Makes `disk` (a snapshot's, about to be deleted) the file at `dest` too: a second name
 * for the same file (its snapshot's name goes with the snapshot), or a copy across filesystems.
 */
async function adopt(disk: string, dest: string): Promise<void> {
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
