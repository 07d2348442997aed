/**
 * `MemoryHostAgent`: the whole `HostAgent` contract with no QEMU, for fast tests of the
 * control plane. This class is its face: each call in its frame (logged, faultable,
 * idempotent by operation id where the contract says so), done by the part whose job it
 * is (README.md lists them). Given a data dir, it keeps its state there (host-file.ts) and
 * a new `open` on the dir finds what a real host's restart would find: after a `kill -9`
 * its VMs, files, processes, snapshots, templates and volume images.
 */
import { rmSync } from "node:fs";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError, type HostAgent, type HostGuest, type api, type host } from "@den/protocol";
import { LocalDirStore, type ObjectStore } from "@den/store";
import { newId } from "@den/runtime";
import type { Capacity } from "../admission.js";
import { systemClock, type Clock } from "./clock.js";
import type { Faults } from "./faults.js";
import { HostCapacity } from "./host-capacity.js";
import { TestControls, type MemorySandboxView, type ScriptAnswer } from "./host-controls.js";
import { HostFile, readHostFile, summarize, type MemoryHostState, type SavedHost } from "./host-file.js";
import { CallFrame } from "./host-frame.js";
import { Lifecycle } from "./host-lifecycle.js";
import { Sandboxes } from "./host-sandboxes.js";
import { HostState, ID_PATTERN } from "./host-state.js";
import { StoreTransfers } from "./host-store.js";
import { TemplateOps } from "./host-templates.js";
import { BuildLogs } from "../build/build-logs.js";
import { VolumeOps } from "./host-volumes.js";
import type { MemoryFs } from "./memory-fs.js";
import { guestById, type PortHandler } from "./memory-guest.js";
import { memoryHostKind } from "./memory-image.js";
import { baseTemplate } from "./memory-templates.js";

export type { MemoryHostState } from "./host-file.js";
export type { MemorySandboxView, ScriptAnswer } from "./host-controls.js";
export type { MemoryVmState } from "./host-state.js";

export interface MemoryHostOptions {
  /** Where stored snapshots go (default: a local store in `dataDir`). */
  store?: ObjectStore;
  /** Default: 16 GiB and 32 vCPUs, 2 GiB of disk kept free. */
  capacity?: Capacity;
  /** What CPU seconds, file times and process start times follow (default: the system clock). */
  clock?: Clock;
  /** Default: the one kept in `dataDir` (its state file, or instance-id as the runtime keeps it), else a new one. */
  instance?: string;
  /**
   * Where its state is kept (memory-host.json, written at every change and read back by the
   * next `open`), transfers staged, and the default store lives. Default: a new temp dir,
   * removed at close, and no state kept.
   */
  dataDir?: string;
}

const DEFAULT_CAPACITY: Capacity = { memoryMb: 16 * 1024, vcpus: 32, diskReserveMb: 2048 };

export class MemoryHostAgent implements HostAgent {
  readonly address = "local";
  onTransfer: ((t: host.TransferEvent) => void) | undefined;
  /** Armed failures, hangs and deaths (faults.ts). */
  readonly faults: Faults;
  /** Every control call, in order, with its arguments (the last 10 000). */
  readonly calls: Array<{ name: string; args: unknown[] }>;

  private readonly frame: CallFrame;
  private readonly file: HostFile;
  private readonly state: HostState;
  private readonly controls: TestControls;
  private readonly vms: Sandboxes;
  private readonly room: HostCapacity;
  private readonly stored: StoreTransfers;
  private readonly life: Lifecycle;
  private readonly tpls: TemplateOps;
  private readonly buildLogs = new BuildLogs();
  private readonly vols: VolumeOps;

  private constructor(
    readonly instance: string,
    readonly store: ObjectStore,
    readonly clock: Clock,
    private readonly dataDir: string,
    capacity: Capacity,
    /** A temp dir it made itself (no `dataDir` given): removed at close, its default store with it. */
    private readonly ownsDataDir: boolean,
    /** Its state file's dir (undefined: none is kept). */
    stateDir: string | undefined,
  ) {
    this.frame = new CallFrame(() => this.instance, () => this.die());
    this.faults = this.frame.faults;
    this.calls = this.frame.calls;
    this.file = new HostFile(stateDir);
    this.state = new HostState(instance, store, clock, dataDir, this.file);
    this.controls = new TestControls(this.state, this.frame, () => this.tpls.forget());
    this.vms = new Sandboxes(this.state, this.frame, this.controls);
    this.room = new HostCapacity(this.state, capacity);
    this.stored = new StoreTransfers(this.state, this.faults, this.room.admission, this.vms, () => this.onTransfer);
    this.life = new Lifecycle(this.state, this.vms, this.room, this.stored, this.faults, this.controls);
    this.tpls = new TemplateOps(this.state, this.life, this.stored);
    this.vols = new VolumeOps(this.state, this.life, this.faults);
  }

  static async open(opts: MemoryHostOptions = {}): Promise<MemoryHostAgent> {
    const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), "den-memory-host-")));
    const transfers = join(dataDir, "transfers");
    await mkdir(transfers, { recursive: true, mode: 0o700 });
    // Transfers a kill cut short: the store still has (or never got) what they moved.
    for (const d of await readdir(transfers)) await rm(join(transfers, d), { recursive: true, force: true });
    const saved = opts.dataDir === undefined ? undefined : readHostFile(dataDir);
    // Kept in the data dir as the runtime keeps it (and in the state file): a restarted host is the same host.
    const idFile = join(dataDir, "instance-id");
    const known = (await readFile(idFile, "utf8").catch(() => "")).trim();
    const instance = opts.instance ?? saved?.instance ?? (ID_PATTERN.test(known) ? known : newId("den"));
    if (!opts.instance && instance !== known) await writeFile(idFile, instance + "\n");
    const store = opts.store ?? new LocalDirStore(join(dataDir, "store"));
    const host = new MemoryHostAgent(instance, store, opts.clock ?? systemClock, dataDir, opts.capacity ?? DEFAULT_CAPACITY, opts.dataDir === undefined, opts.dataDir);
    if (saved) host.load(saved);
    host.file.start(host.state);
    return host;
  }

  /**
   * What the host kept in `dataDir` (its VMs with their states, local snapshots, template
   * versions, volume images, pins), read without opening it; undefined if it kept nothing
   * there. For a crash test: the VMs a killed host left are exactly these.
   */
  static readState(dataDir: string): MemoryHostState | undefined {
    const saved = readHostFile(dataDir);
    return saved && summarize(saved);
  }

  /** Puts back what the state file kept: templates, volume images, local snapshots, pins, then the VMs. */
  private load(saved: SavedHost): void {
    const { tpl, vols, warm, pins } = this.state;
    tpl.load(saved.templates.versions, saved.templates.current);
    if (!tpl.current("base")) tpl.install(baseTemplate(), true);
    for (const v of saved.volumes.images) vols.load(v);
    vols.nextInode = Math.max(saved.volumes.nextInode, ...saved.volumes.images.map((v) => v.inode + 1));
    for (const [id, image] of Object.entries(saved.warm)) warm.set(id, JSON.stringify(image));
    for (const [holder, ref] of Object.entries(saved.pins)) pins.set(holder, ref);
    for (const s of saved.sandboxes) this.vms.adopt(s);
  }

  /** A call that runs once per operation id. */
  private op<T>(name: string, args: unknown[], op: string, fn: () => T | Promise<T>): Promise<T> {
    return this.frame.call(name, args, () => this.frame.once(op, async () => fn()));
  }

  /** A call with no operation id. */
  private plain<T>(name: string, args: unknown[], fn: () => T | Promise<T>): Promise<T> {
    return this.frame.call(name, args, async () => fn());
  }

  // ---- HostAgent: admission ----

  capacity(): Promise<host.CapacityReport> {
    return this.plain("capacity", [], () => this.room.report());
  }

  checkCapacity(shape: host.Shape): Promise<void> {
    return this.plain("checkCapacity", [shape], () => this.room.admission.check(shape));
  }

  checkCreate(spec: Omit<host.HostCreateSpec, "id">): Promise<void> {
    return this.plain("checkCreate", [spec], () => this.room.admission.check(this.room.shapeOf(spec).shape));
  }

  // ---- HostAgent: lifecycle ----

  create(op: string, spec: host.HostCreateSpec): Promise<host.HostSandboxInfo> {
    return this.op("create", [op, spec], op, () => this.life.create(spec));
  }

  restore(op: string, id: string, snapshot: host.StoredRef, network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo> {
    return this.op("restore", [op, id, snapshot, network, volumes], op, () => this.life.restore(id, snapshot, network, volumes));
  }

  destroy(id: string): Promise<void> {
    return this.plain("destroy", [id], () => this.life.destroy(id));
  }

  /** Warm: the VM pauses in place; its local snapshot (for a VM that dies while paused) is kept as `snapshotId`. */
  hibernateWarm(op: string, id: string, snapshotId: string): Promise<void> {
    return this.op("hibernateWarm", [op, id, snapshotId], op, () => this.life.hibernateWarm(id, snapshotId));
  }

  /** Cold, the first half: to the store, the VM left paused (host-lifecycle.ts). */
  upload(op: string, id: string, to: host.StoredRef, fromWarm?: string): Promise<{ storedBytes: number; heldVolumes?: string[] }> {
    return this.op("upload", [op, id, to, fromWarm], op, () => this.life.upload(id, to, fromWarm));
  }

  wakeWarm(op: string, id: string, snapshotId: string | null): Promise<void> {
    return this.op("wakeWarm", [op, id, snapshotId], op, () => this.life.wakeWarm(id, snapshotId));
  }

  /** Disk: the VM shuts down, its files kept; its processes (its memory) are gone, as after a reboot. */
  hibernateDisk(op: string, id: string): Promise<void> {
    return this.op("hibernateDisk", [op, id], op, () => this.life.hibernateDisk(id));
  }

  wakeDisk(op: string, id: string): Promise<void> {
    return this.op("wakeDisk", [op, id], op, () => this.life.wakeDisk(id));
  }

  checkpoint(op: string, id: string, to: host.StoredRef): Promise<{ pauseMs: number; storedBytes: number }> {
    return this.op("checkpoint", [op, id, to], op, () => this.life.checkpoint(id, to));
  }

  fork(op: string, id: string, children: string[], network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo[]> {
    return this.op("fork", [op, id, children, network, volumes], op, () => this.life.fork(id, children, network, volumes));
  }

  resume(id: string): Promise<void> {
    return this.plain("resume", [id], () => this.life.resume(id));
  }

  cpuSeconds(id: string): Promise<number | undefined> {
    return this.plain("cpuSeconds", [id], () => {
      const s = this.state.boxes.get(id);
      return s ? this.state.cpuOf(s) : undefined;
    });
  }

  setNetwork(id: string, policy: api.NetworkPolicy): Promise<void> {
    return this.plain("setNetwork", [id, policy], () => this.life.setNetwork(id, policy));
  }

  networkRefusals(id: string): Promise<host.Refusals | undefined> {
    return this.plain("networkRefusals", [id], () => {
      const s = this.state.boxes.get(id);
      return s?.network ? { ...s.refused } : undefined;
    });
  }

  /** Found by id at each call (no call is made until one is used): an unknown sandbox's calls fail with `sandbox_not_found`. */
  guest(id: string): HostGuest {
    return guestById(() => {
      this.frame.reachable("guest");
      return this.state.get(id).guest;
    });
  }

  // ---- HostAgent: local snapshots, pins, inventory ----

  dropLocalSnapshot(snapshotId: string): Promise<void> {
    return this.plain("dropLocalSnapshot", [snapshotId], () => this.stored.dropLocalSnapshot(snapshotId));
  }

  unpin(snapshotId: string): Promise<void> {
    return this.plain("unpin", [snapshotId], () => this.stored.unpin(snapshotId));
  }

  collectLocal(snapshots: string[], pins: host.TemplatePin[]): Promise<void> {
    return this.plain("collectLocal", [snapshots, pins], () => this.stored.collectLocal(snapshots, pins));
  }

  settled(op: string): Promise<void> {
    return this.plain("settled", [op], () => this.frame.settled(op));
  }

  inventory(): Promise<host.HostInventory> {
    return this.plain("inventory", [], () => this.room.inventory());
  }

  // ---- HostAgent: volumes ----

  createVolume(op: string, id: string, sizeMb: number): Promise<void> {
    return this.op("createVolume", [op, id, sizeMb], op, () => this.vols.create(id, sizeMb));
  }

  deleteVolume(id: string): Promise<void> {
    return this.plain("deleteVolume", [id], () => this.vols.delete(id));
  }

  /** Grown in a helper VM of its own that mounts it read-write, gone after. */
  growVolume(op: string, id: string, sizeMb: number, helper: string): Promise<void> {
    return this.op("growVolume", [op, id, sizeMb, helper], op, () => this.vols.grow(id, sizeMb, helper));
  }

  parkVolume(op: string, id: string, to: host.StoredRef): Promise<{ storedBytes: number }> {
    return this.op("parkVolume", [op, id, to], op, () => this.vols.park(id, to));
  }

  fetchVolume(op: string, id: string, from: host.StoredRef): Promise<void> {
    return this.op("fetchVolume", [op, id, from], op, () => this.vols.fetch(id, from));
  }

  volumeImages(): Promise<host.VolumeImage[]> {
    return this.plain("volumeImages", [], () => this.vols.images());
  }

  dropVolumeImage(id: string, inode: number): Promise<boolean> {
    return this.plain("dropVolumeImage", [id, inode], () => this.vols.drop(id, inode));
  }

  // ---- HostAgent: templates ----

  templates(): Promise<host.HostTemplate[]> {
    return this.plain("templates", [], () => this.tpls.list());
  }

  deleteTemplate(name: string): Promise<void> {
    return this.plain("deleteTemplate", [name], () => this.tpls.delete(name));
  }

  buildTemplate(op: string, spec: host.TemplateBuildSpec): Promise<host.BuiltTemplate> {
    return this.op("buildTemplate", [op, spec], op, async () => {
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
    return this.plain("buildLog", [op, from], async () => this.buildLogs.page(op, from));
  }

  cancelBuild(op: string): Promise<void> {
    return this.plain("cancelBuild", [op], async () => this.buildLogs.cancel(op));
  }

  publishTemplate(op: string, name: string, version: string, key: string): Promise<{ storedBytes: number }> {
    return this.op("publishTemplate", [op, name, version, key], op, () => this.stored.publishTemplate(name, version, key));
  }

  fetchTemplate(op: string, name: string, version: string, key: string, current: boolean): Promise<void> {
    return this.op("fetchTemplate", [op, name, version, key, current], op, () => this.stored.fetchTemplate(name, version, key, current));
  }

  // ---- what the registrar asks (as LocalHostAgent) ----

  /** What a snapshot made here needs of the host it is restored on. */
  async kind(): Promise<host.HostKind> {
    this.frame.reachable("kind");
    return memoryHostKind();
  }

  /** Its lease ran out: every running VM is paused (never to run twice); the control plane resumes those it holds. */
  async fence(): Promise<string[]> {
    return this.life.fence();
  }

  /**
   * Every process of every guest ends (their timers with them); the host answers no more.
   * Its state file stays as it was (a clean stop of `den serve` leaves its VMs running, as
   * QEMU processes outlive it). A data dir it made itself goes (with the store in it, if it
   * made that too).
   */
  close(): void {
    this.file.stop();
    for (const s of this.state.boxes.values()) s.guest.lose(new DenError("agent_unavailable", "agent connection closed by host"));
    this.frame.cut("the host agent was closed");
    this.frame.dead = true;
    if (this.ownsDataDir) rmSync(this.dataDir, { recursive: true, force: true });
  }

  // ---- test controls (host-controls.ts) ----

  /**
   * Exec results for matching commands (a string: the command contains it; or a RegExp),
   * checked before the mini shell, the latest script first; a function may return undefined
   * to let the command run. Applies to exec, execStream, spawn and template setup commands.
   * Returns the function that removes it.
   */
  script(match: string | RegExp, answer: ScriptAnswer): () => void {
    return this.controls.script(match, answer);
  }

  /**
   * A server on port `port` of sandbox `id`'s loopback: each tunnel to it calls `handler`
   * with its end of the connection. It stands for a process of the guest: it survives
   * hibernations, restores and forks on this host, not a disk hibernation (a fresh boot),
   * nor the host's process (it is not in the state file). Returns the function that stops it.
   */
  listen(id: string, port: number, handler: PortHandler): () => void {
    return this.controls.listen(id, port, handler);
  }

  /**
   * The machine is lost: it stops answering (every call fails as HttpHostAgent's do for a
   * host it cannot reach) and its VMs are gone. Its disk (templates, volume images, local
   * snapshots) is as it was, should it `revive()`.
   */
  die(): void {
    this.controls.die();
  }

  /** It answers again (a machine back from a reboot: no VM, its disk as it was). */
  revive(): void {
    this.controls.revive();
  }

  /**
   * The host agent process restarts: its journal and the calls in flight are forgotten (their
   * callers see the connection reset); VMs and local snapshots stay, as QEMU processes and the
   * data dir outlive a host agent.
   */
  restart(): void {
    this.controls.restart();
  }

  /** Sandbox `id`'s VM dies: the inventory says `stopped`, its processes are gone, its files stay. */
  killVm(id: string): void {
    this.controls.killVm(id);
  }

  /**
   * Makes the host's available memory (MemAvailable) `mb` now, as if another process took the
   * difference: what the sandboxes free from here on comes back (a cold hibernation relieves
   * the host as on a real one). undefined: nothing else holds memory.
   */
  setAvailableMemoryMb(mb: number | undefined): void {
    this.room.otherMb = 0;
    if (mb !== undefined) this.room.otherMb = this.room.availableMb() - mb;
  }

  /** Free space on the host's disk (default 1 TiB). */
  setFreeDiskMb(mb: number): void {
    this.room.freeDiskMb = mb;
  }

  /** How busy sandbox `id`'s guest is (a share of one vCPU; default 0): its CPU seconds grow by it with the clock. */
  setCpuLoad(id: string, share: number): void {
    this.controls.setCpuLoad(id, share);
  }

  /** Counts connection attempts its network refused (`networkRefusals`), for a sandbox with a network. */
  refuse(id: string, kind: keyof host.Refusals = "policy", count = 1): void {
    this.controls.refuse(id, kind, count);
  }

  sandbox(id: string): MemorySandboxView | undefined {
    return this.controls.sandbox(id);
  }

  sandboxes(): MemorySandboxView[] {
    return this.controls.sandboxes();
  }

  /** Volume `id`'s files on this host (read or write them directly), if it has an image here. */
  volume(id: string): MemoryFs | undefined {
    return this.controls.volume(id);
  }

  /** Local (warm) snapshot ids. */
  localSnapshots(): string[] {
    return this.controls.localSnapshots();
  }
}
