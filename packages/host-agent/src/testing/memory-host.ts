/**
 * `MemoryHostAgent`: the whole `HostAgent` contract with no QEMU, for fast tests of the
 * control plane. This class is its face: the contract's sub-services (host-services.ts:
 * each call in its frame, logged, faultable, idempotent by operation id where the contract
 * says so, done by the part whose job it is; README.md lists them) and the test controls. Given a data dir, it keeps its state there (host-file.ts) and
 * a new `open` on the dir finds what a real host's restart would find: after a `kill -9`
 * its VMs, files, processes, snapshots, templates and volume images.
 */
import { rmSync } from "node:fs";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError, type HostAgent, type HostGuest, type host } from "@den/protocol";
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
import { VolumeOps } from "./host-volumes.js";
import { FramedSnapshots, FramedTemplates, FramedVms, FramedVolumes } from "./host-services.js";
import type { MemoryFs } from "./memory-fs.js";
import { guestById, type PortHandler } from "./memory-guest.js";
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
  readonly vms: FramedVms;
  readonly volumes: FramedVolumes;
  readonly templates: FramedTemplates;
  readonly snapshots: FramedSnapshots;
  private readonly boxes: Sandboxes;
  private readonly room: HostCapacity;
  private readonly tpls: TemplateOps;

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
    this.boxes = new Sandboxes(this.state, this.frame, this.controls);
    this.room = new HostCapacity(this.state, capacity);
    const stored = new StoreTransfers(this.state, this.faults, this.room.admission, this.boxes, () => this.onTransfer);
    const life = new Lifecycle(this.state, this.boxes, this.room, stored, this.faults, this.controls);
    this.tpls = new TemplateOps(this.state, life, stored);
    this.vms = new FramedVms(this.frame, this.state, this.room, life);
    this.volumes = new FramedVolumes(this.frame, new VolumeOps(this.state, life, this.faults));
    this.templates = new FramedTemplates(this.frame, this.tpls, stored);
    this.snapshots = new FramedSnapshots(this.frame, stored);
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
    for (const s of saved.sandboxes) this.boxes.adopt(s);
  }

  settled(op: string): Promise<void> {
    return this.frame.plain("settled", [op], () => this.frame.settled(op));
  }

  inventory(): Promise<host.HostInventory & { kind: host.HostKind }> {
    return this.frame.plain("inventory", [], () => this.room.inventory());
  }

  /** Found by id at each call (no call is made until one is used): an unknown sandbox's calls fail with `sandbox_not_found`. */
  guest(id: string): HostGuest {
    return guestById(() => {
      this.frame.reachable("guest");
      return this.state.get(id).guest;
    });
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
