/**
 * `MemoryHostAgent`: the whole `HostAgent` contract with no QEMU, for fast tests of the
 * control plane. Sandboxes are state machines over in-memory guests (memory-guest.ts);
 * what the real host puts in the object store (cold hibernations, checkpoints, parked
 * volumes, published templates) goes to the real store given, in its layout. Operations
 * run once per id, admission is the real host's `Admission`, and errors carry the codes
 * the runtime and the guest agent give. Test controls: scripts, faults, death, restart.
 */
import { existsSync, rmSync } from "node:fs";
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenError, type GuestExecOptions, type HostAgent, type HostGuest, type ProcInfo, type api, type host } from "@den/protocol";
import { LocalDirStore, manifestBytes, readStoredManifest, storedSnapshotComplete, type ObjectStore, type TransferProgress } from "@den/store";
import { newId } from "@den/runtime";
import { Admission, diskOvercommit, memoryOvercommit, memoryReserveMb, type Capacity } from "../admission.js";
import { systemClock, type Clock } from "./clock.js";
import { Faults } from "./faults.js";
import { MemoryFs, deserializeDir, type Filesystem } from "./memory-fs.js";
import { MemoryGuest, guestById, type GuestHooks, type GuestImage, type PortHandler, type ScriptReply } from "./memory-guest.js";
import { checkSandboxImage, getStored, memoryHostKind, putStored, type SandboxImage } from "./memory-image.js";
import { MemoryTemplates, baseTemplate, checkTemplateName, refKey, versionOf, wireTemplate, type MemoryTemplate, type TemplateRef } from "./memory-templates.js";
import { MemoryVolumes, type SerialVolume } from "./memory-volumes.js";

type Shape = { vcpus: number; memoryMb: number; diskMb: number };
/** The inventory's states: `stopped` is a VM that died, `off` one shut down with its disk kept. */
export type MemoryVmState = host.HostInventory["vms"][number]["state"];

export interface MemoryHostOptions {
  /** Where stored snapshots go (default: a local store in `dataDir`). */
  store?: ObjectStore;
  /** Default: 16 GiB and 32 vCPUs, 2 GiB of disk kept free. */
  capacity?: Capacity;
  /** What CPU seconds, file times and process start times follow (default: the system clock). */
  clock?: Clock;
  /** Default: the one kept in `dataDir` (instance-id, as the runtime keeps it), else a new one. */
  instance?: string;
  /** Where transfers are staged and the default store lives (default: a new temp dir). */
  dataDir?: string;
}

/** A scripted exec answer: a reply, or a function of the command (undefined: the mini shell runs it). */
export type ScriptAnswer = ScriptReply | ((command: string, opts: GuestExecOptions, sandbox: string) => ScriptReply | undefined | Promise<ScriptReply | undefined>);

/** A sandbox as a test sees it (`sandbox(id)`). */
export interface MemorySandboxView {
  id: string;
  state: MemoryVmState;
  template: TemplateRef;
  shape: Shape;
  volumes: host.VolumeSpec[];
  network: api.NetworkPolicy | undefined;
  /** Its files, volumes mounted (read or write them directly). */
  fs: MemoryFs;
  processes: ProcInfo[];
  cpuSeconds: number | undefined;
}

interface MemorySandbox {
  readonly id: string;
  template: TemplateRef;
  shape: Shape;
  state: MemoryVmState;
  destroyed: boolean;
  fs: MemoryFs;
  guest: MemoryGuest;
  volumes: host.VolumeSpec[];
  network: api.NetworkPolicy | undefined;
  refused: host.Refusals;
  /** CPU seconds so far, since when it has run (clock ms), and its load (a share of one vCPU). */
  cpu: { seconds: number; since: number | undefined; share: number };
}

const DEFAULT_CAPACITY: Capacity = { memoryMb: 16 * 1024, vcpus: 32, diskReserveMb: 2048 };
const MIB = 1024 * 1024;
/** Answers kept for repeated asks (as the real host). */
const JOURNAL_SIZE = 1024;
const SANDBOX_ID = /^sbx_[a-z2-7]{16}$/;
const SNAPSHOT_ID = /^snap_[a-z2-7]{16}$/;
const ID_PATTERN = /^[a-z]+_[a-z2-7]{16}$/;
/** The runtime's bounds on a sandbox's disk. */
const MAX_DISK_MB = 256 * 1024;
/** Where a helper VM mounts the volume it grows. */
const HELPER_MOUNT = "/mnt/den-volume";

/** At most one report a second per transfer, plus the last one (as the real host). */
function throttled(emit: (p: TransferProgress) => void): (p: TransferProgress) => void {
  let last = 0;
  return (p) => {
    const done = p.total !== undefined && p.bytes >= p.total;
    if (!done && Date.now() - last < 1000) return;
    last = Date.now();
    emit(p);
  };
}

export class MemoryHostAgent implements HostAgent {
  readonly address = "local";
  onTransfer: ((t: host.TransferEvent) => void) | undefined;
  /** Armed failures, hangs and deaths (faults.ts). */
  readonly faults: Faults;
  /** Every control call, in order, with its arguments (the last 10 000). */
  readonly calls: Array<{ name: string; args: unknown[] }> = [];

  private readonly boxes = new Map<string, MemorySandbox>();
  /** Local (warm) snapshots: a sandbox image as JSON, by snapshot id. */
  private readonly warm = new Map<string, string>();
  /** Template versions stored snapshots need, by holder (snapshot id): name@version. */
  private readonly pins = new Map<string, string>();
  private readonly tpl = new MemoryTemplates();
  private readonly vols: MemoryVolumes;
  private readonly scripts: Array<{ match: string | RegExp; answer: ScriptAnswer }> = [];
  private readonly listeners = new Map<string, Map<number, PortHandler>>();
  private journal = new Map<string, Promise<unknown>>();
  private builds = new Map<string, Promise<unknown>>();
  /** Calls not answered yet: a restart or a death cuts them off (their callers see the connection go). */
  private readonly inFlight = new Set<(why: string) => void>();
  private readonly admission: Admission;
  private availableMb: number | undefined;
  private freeDiskMb = 1024 * 1024;
  private dead = false;

  private constructor(
    readonly instance: string,
    readonly store: ObjectStore,
    readonly clock: Clock,
    private readonly dataDir: string,
    capacity: Capacity,
    /** A temp dir it made itself (no `dataDir` given): removed at close, its default store with it. */
    private readonly ownsDataDir: boolean,
  ) {
    this.faults = new Faults(() => this.die());
    this.vols = new MemoryVolumes(() => clock.now());
    this.tpl.install(baseTemplate(), true);
    // The real host's admission, over these sandboxes: an `off` one holds only its disk; a
    // paused one its memory and no vCPU. Memory and disk are what the test says they are.
    const reserveMb = capacity.memoryReserveMb ?? memoryReserveMb();
    this.admission = new Admission(capacity, dataDir, () => this.held(), () => this.diskPromisedMb(), diskOvercommit(), capacity.memoryOvercommit ?? memoryOvercommit(), {
      availableMb: () => this.availableMb ?? capacity.memoryMb + reserveMb - this.admission.used().memoryMb, reserveMb,
    }, () => this.freeDiskMb);
  }

  static async open(opts: MemoryHostOptions = {}): Promise<MemoryHostAgent> {
    const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), "den-memory-host-")));
    await mkdir(join(dataDir, "transfers"), { recursive: true, mode: 0o700 });
    let instance = opts.instance;
    if (!instance) {
      // Kept in the data dir as the runtime keeps it: a restarted in-memory host is the same host, its VMs gone.
      const file = join(dataDir, "instance-id");
      const known = existsSync(file) ? (await readFile(file, "utf8")).trim() : "";
      instance = ID_PATTERN.test(known) ? known : newId("den");
      if (instance !== known) await writeFile(file, instance + "\n");
    }
    const store = opts.store ?? new LocalDirStore(join(dataDir, "store"));
    return new MemoryHostAgent(instance, store, opts.clock ?? systemClock, dataDir, opts.capacity ?? DEFAULT_CAPACITY, opts.dataDir === undefined);
  }

  // ---- the call frame: liveness, the log, faults, restarts, idempotency ----

  private unreachable(what: string): DenError {
    return new DenError("agent_unavailable", `${what}: the host agent ${this.instance} is unreachable (ECONNREFUSED)`);
  }

  private reachable(what: string): void {
    if (this.dead) throw this.unreachable(what);
  }

  /** Every control call: refused by a dead host, logged, held or failed by a fault, cut off by a restart. */
  private call<T>(name: string, args: unknown[], fn: () => Promise<T>): Promise<T> {
    if (this.dead) return Promise.reject(this.unreachable(name));
    this.calls.push({ name, args });
    if (this.calls.length > 10_000) this.calls.shift();
    return new Promise<T>((resolve, reject) => {
      const cut = (why: string) => reject(new DenError("agent_unavailable", `${name}: ${why}`));
      this.inFlight.add(cut);
      this.faults.enter(name).then(fn).then(resolve, reject).finally(() => this.inFlight.delete(cut));
    });
  }

  /** Runs an operation once: asked again with the same id, it returns (or joins) the first answer. */
  private once<T>(op: string, fn: () => Promise<T>): Promise<T> {
    const known = this.journal.get(op);
    if (known) return known as Promise<T>;
    const p = fn();
    this.journal.set(op, p);
    // A failed operation may be asked again with the same id once its cause is gone.
    p.catch(() => this.journal.delete(op));
    if (this.journal.size > JOURNAL_SIZE) this.journal.delete(this.journal.keys().next().value!);
    return p;
  }

  private cutInFlight(why: string): void {
    for (const cut of [...this.inFlight]) cut(why);
    this.inFlight.clear();
  }

  // ---- sandboxes ----

  private get(id: string): MemorySandbox {
    const s = typeof id === "string" ? this.boxes.get(id) : undefined;
    if (!s) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(id)} does not exist`);
    return s;
  }

  private hooks(s: MemorySandbox): GuestHooks {
    return {
      enter: async (call) => {
        this.reachable(call);
        await this.faults.enter(call);
        this.usable(s);
      },
      reachable: () => {
        this.reachable("guest");
        this.usable(s);
      },
      scripted: (command, opts) => this.scripted(command, opts, s.id),
      listener: (port) => this.listeners.get(s.id)?.get(port),
      ports: () => [...(this.listeners.get(s.id)?.keys() ?? [])].sort((a, b) => a - b),
      now: () => this.clock.now(),
      shape: () => s.shape,
      cpuShare: () => (s.state === "running" ? s.cpu.share : 0),
    };
  }

  /** What a guest call meets on a sandbox that is not running (the runtime's Sandbox errors). */
  private usable(s: MemorySandbox): void {
    if (s.destroyed) throw new DenError("sandbox_destroyed", `sandbox ${s.id} has been destroyed`);
    if (s.state === "paused") throw new DenError("sandbox_not_running", `sandbox ${s.id} is paused; resume it first`);
    if (s.state === "off") throw new DenError("sandbox_not_running", `sandbox ${s.id} is shut down (its disk is kept); boot it first`);
    if (s.state === "stopped") throw new DenError("agent_unavailable", `sandbox ${s.id}: agent socket did not open: its VM has exited`);
  }

  /** A lifecycle step needs the VM: an `off` sandbox has none, a dead one's QEMU does not answer. */
  private requireVm(s: MemorySandbox): void {
    if (s.state === "off") throw new DenError("sandbox_not_running", `sandbox ${s.id} has no VM`);
    if (s.state === "stopped") throw new DenError("qemu_error", `sandbox ${s.id}: its QEMU has exited`);
  }

  /** A new running sandbox `id` from a guest image, its volumes mounted. */
  private makeSandbox(id: string, template: TemplateRef, shape: Shape, image: GuestImage, volumes: host.VolumeSpec[] = []): MemorySandbox {
    if (!SANDBOX_ID.test(id)) throw new DenError("invalid_argument", `not a sandbox id: ${JSON.stringify(id)}`);
    if (this.boxes.has(id)) throw new DenError("already_exists", `sandbox ${id} already exists on this host`);
    const fs = new MemoryFs({ root: deserializeDir(image.files), limitBytes: shape.diskMb * MIB }, () => this.clock.now());
    for (const v of volumes) fs.mount(v.path, this.vols.get(v.volume).fs, v.readOnly);
    const s: MemorySandbox = {
      id, template, shape, state: "running", destroyed: false, fs, guest: undefined as unknown as MemoryGuest, volumes: [...volumes], network: undefined,
      refused: { private: 0, policy: 0, limit: 0, dns: 0 }, cpu: { seconds: 0, since: this.clock.now(), share: 0 },
    };
    s.guest = new MemoryGuest(fs, this.hooks(s), image);
    this.boxes.set(id, s);
    return s;
  }

  private setState(s: MemorySandbox, state: MemoryVmState): void {
    const now = this.clock.now();
    if (s.cpu.since !== undefined) s.cpu.seconds += ((now - s.cpu.since) / 1000) * s.cpu.share;
    s.cpu.since = state === "running" ? now : undefined;
    s.state = state;
  }

  /** Host CPU seconds of its VM (none for a sandbox with no VM). */
  private cpuOf(s: MemorySandbox): number | undefined {
    if (s.state === "off" || s.state === "stopped") return undefined;
    return s.cpu.seconds + (s.cpu.since === undefined ? 0 : ((this.clock.now() - s.cpu.since) / 1000) * s.cpu.share);
  }

  private info(s: MemorySandbox): host.HostSandboxInfo {
    return { template: s.template.name, templateVersion: s.template.version, ...s.shape };
  }

  private image(s: MemorySandbox, mounts: host.VolumeSpec[]): SandboxImage {
    return { format: "den-memory-sandbox/1", template: s.template, shape: s.shape, guest: s.guest.image(), mounts };
  }

  /** The runtime manifest a stored snapshot carries (the in-memory host's shape of it). */
  private manifest(s: { id: string; template: TemplateRef; shape: Shape }, snapshotId: string, mounts: host.VolumeSpec[] = []): Record<string, unknown> {
    const kind = memoryHostKind();
    return {
      format: 1, kind: "sandbox", id: snapshotId, createdAt: new Date(this.clock.now()).toISOString(), template: s.template, memory: "stream",
      host: { qemuVersion: kind.qemuVersion, accelerator: kind.accelerator, cpuModel: kind.cpuModel, machine: "in-memory", deviceSet: "in-memory", tscKhz: 0 },
      vm: s.shape, pauseMs: 0, sourceSandbox: s.id, ...(mounts.length ? { volumes: mounts } : {}),
    };
  }

  private held(): Map<string, { vcpus: number; memoryMb: number; paused: boolean }> {
    const out = new Map<string, { vcpus: number; memoryMb: number; paused: boolean }>();
    for (const s of this.boxes.values()) if (s.state !== "off") out.set(s.id, { vcpus: s.shape.vcpus, memoryMb: s.shape.memoryMb, paused: s.state === "paused" });
    return out;
  }

  /** What the sandboxes' disks may still grow by (each up to its size, less what it holds). */
  private diskPromisedMb(): number {
    let mb = 0;
    for (const s of this.boxes.values()) mb += Math.max(0, s.shape.diskMb - s.fs.usedBytes() / MIB);
    return mb;
  }

  private progress(sandbox: string, snapshot: string, direction: host.TransferEvent["direction"]): (p: TransferProgress) => void {
    return throttled((p) => this.onTransfer?.({
      sandbox, snapshot, direction, file: p.key.slice(p.key.lastIndexOf("/") + 1), bytes: p.bytes, total: p.total ?? null,
      done: p.total !== undefined && p.bytes >= p.total,
    }));
  }

  private get tmp(): string {
    return join(this.dataDir, "transfers");
  }

  private shapeOf(spec: Omit<host.HostCreateSpec, "id">): { tpl: MemoryTemplate; shape: Shape } {
    const tpl = this.tpl.resolve(spec.template);
    return { tpl, shape: { vcpus: spec.vcpus ?? tpl.vcpus, memoryMb: spec.memoryMb ?? tpl.memoryMb, diskMb: spec.diskMb ?? tpl.diskMb } };
  }

  /** Volumes to put in a VM must have their images here. */
  private checkVolumes(volumes: host.VolumeSpec[] | undefined): host.VolumeSpec[] {
    for (const v of volumes ?? []) this.vols.get(v.volume);
    return volumes ?? [];
  }

  /** A template of another size: `<name>.<vcpus>c<memory>m`, the base's version (made on first use). */
  private variant(base: MemoryTemplate, vcpus: number, memoryMb: number): MemoryTemplate {
    if (!Number.isInteger(vcpus) || vcpus < 1 || vcpus > 16) throw new DenError("invalid_argument", "vcpus must be an integer in 1..16");
    if (!Number.isInteger(memoryMb) || memoryMb < 128 || memoryMb > 65536) throw new DenError("invalid_argument", "memoryMb must be an integer in 128..65536");
    const ref = { name: `${base.name}.${vcpus}c${memoryMb}m`, version: base.version };
    if (!this.tpl.has(ref)) this.tpl.install({ ...base, ...ref, vcpus, memoryMb, baseTemplate: { name: base.name, version: base.version } }, true);
    return this.tpl.resolve(refKey(ref));
  }

  private async createNow(spec: host.HostCreateSpec): Promise<host.HostSandboxInfo> {
    const { tpl, shape } = this.shapeOf(spec);
    const release = this.admission.reserve(spec.id, shape);
    try {
      const source = shape.vcpus === tpl.vcpus && shape.memoryMb === tpl.memoryMb ? tpl : this.variant(tpl, shape.vcpus, shape.memoryMb);
      const volumes = this.checkVolumes(spec.volumes);
      if (spec.diskMb !== undefined && (!Number.isInteger(spec.diskMb) || spec.diskMb < tpl.diskMb || spec.diskMb > MAX_DISK_MB)) {
        throw new DenError("invalid_argument", `diskMb must be an integer in ${tpl.diskMb}..${MAX_DISK_MB} (the source's disk is ${tpl.diskMb} MiB)`);
      }
      const s = this.makeSandbox(spec.id, { name: source.name, version: source.version }, shape, source.guest, volumes);
      this.network(s, spec.network);
      return { ...this.info(s), template: tpl.name, templateVersion: tpl.version };
    } finally {
      release();
    }
  }

  private destroyNow(id: string): void {
    const s = this.boxes.get(id);
    if (!s) return;
    s.destroyed = true;
    s.guest.lose(new DenError("agent_unavailable", "agent connection closed by host"));
    this.boxes.delete(id);
    this.gc();
  }

  /** Downloads a stored snapshot, verifies it, and makes it sandbox `id`. */
  private async restoreStored(id: string, ref: host.StoredRef, volumes: host.VolumeSpec[] = []): Promise<host.HostSandboxInfo> {
    // Room first: a wake that cannot fit fails before it downloads anything.
    const stored = await readStoredManifest(this.store, ref.key);
    const vm = (stored.snapshot as { vm?: Shape } | null)?.vm;
    if (!vm) throw new DenError("snapshot_corrupt", `stored snapshot ${ref.id} has no VM shape in its manifest`);
    const release = this.admission.reserve(id, vm);
    try {
      const image = checkSandboxImage(await getStored(this.store, ref.key, { tmp: this.tmp, onProgress: this.progress(id, ref.id, "download"), manifest: stored }), ref.id);
      this.faults.at("wake-cold-after-download");
      if (!this.tpl.has(image.template)) throw new DenError("template_not_found", `snapshot needs template ${refKey(image.template)}, which is not on this host`);
      return this.info(this.makeSandbox(id, image.template, image.shape, image.guest, volumes));
    } finally {
      release();
    }
  }

  /** Uploads a sandbox image to the store, pinning its template here (a failed upload leaves no pin). */
  private async toStore(image: SandboxImage, sandbox: string, to: host.StoredRef): Promise<number> {
    this.pin(to.id, image.template);
    try {
      const stored = await putStored(this.store, to.key, image, this.manifest({ id: sandbox, template: image.template, shape: image.shape }, to.id, image.mounts), {
        tmp: this.tmp, onProgress: this.progress(sandbox, to.id, "upload"), midway: () => this.faults.at("snapshot-upload-mid"),
      });
      return manifestBytes(stored);
    } catch (e) {
      this.pins.delete(to.id);
      throw e;
    }
  }

  private pin(holder: string, ref: TemplateRef): void {
    if (!ID_PATTERN.test(holder)) throw new DenError("invalid_argument", `invalid pin holder ${JSON.stringify(holder)}`);
    this.pins.set(holder, refKey(ref));
  }

  /** Template versions nothing references any more (no sandbox, local snapshot or pin) go. */
  private gc(): void {
    const refs = new Set<string>(this.pins.values());
    for (const s of this.boxes.values()) refs.add(refKey(s.template));
    for (const w of this.warm.values()) refs.add(refKey((JSON.parse(w) as SandboxImage).template));
    this.tpl.gc(refs);
  }

  /** A sandbox's network: a policy kept (no packets flow in memory); `none` is no network. */
  private network(s: MemorySandbox, policy: api.NetworkPolicy | undefined): void {
    s.network = policy && policy.egress !== "none" ? policy : undefined;
    s.refused = { private: 0, policy: 0, limit: 0, dns: 0 };
  }

  /** A VM that has volume `id` in a slot (it may be writing the image). */
  private volumeUser(id: string): MemorySandbox | undefined {
    return [...this.boxes.values()].find((s) => s.volumes.some((v) => v.volume === id));
  }

  private async scripted(command: string, opts: GuestExecOptions, sandbox: string): Promise<ScriptReply | undefined> {
    // The latest script first: a test narrows what an earlier one said.
    for (const s of [...this.scripts].reverse()) {
      if (typeof s.match === "string" ? !command.includes(s.match) : !s.match.test(command)) continue;
      const reply = typeof s.answer === "function" ? await s.answer(command, opts, sandbox) : s.answer;
      if (reply) return reply;
    }
    return undefined;
  }

  // ---- HostAgent: admission ----

  capacity(): Promise<host.CapacityReport> {
    return this.call("capacity", [], async () => ({ capacity: this.admission.capacity, used: this.admission.used(), memory: this.admission.memoryState() }));
  }

  checkCapacity(shape: host.Shape): Promise<void> {
    return this.call("checkCapacity", [shape], async () => this.admission.check(shape));
  }

  checkCreate(spec: Omit<host.HostCreateSpec, "id">): Promise<void> {
    return this.call("checkCreate", [spec], async () => this.admission.check(this.shapeOf(spec).shape));
  }

  // ---- HostAgent: lifecycle ----

  create(op: string, spec: host.HostCreateSpec): Promise<host.HostSandboxInfo> {
    return this.call("create", [op, spec], () => this.once(op, () => this.createNow(spec)));
  }

  restore(op: string, id: string, snapshot: host.StoredRef, network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo> {
    return this.call("restore", [op, id, snapshot, network, volumes], () => this.once(op, async () => {
      const mounts = this.checkVolumes(volumes);
      this.destroyNow(id);
      const made = await this.restoreStored(id, snapshot, mounts);
      this.network(this.get(id), network);
      return made;
    }));
  }

  destroy(id: string): Promise<void> {
    return this.call("destroy", [id], async () => this.destroyNow(id));
  }

  /** Warm: the VM pauses in place; its local snapshot (for a VM that dies while paused) is kept as `snapshotId`. */
  hibernateWarm(op: string, id: string, snapshotId: string): Promise<void> {
    return this.call("hibernateWarm", [op, id, snapshotId], () => this.once(op, async () => {
      const s = this.get(id);
      this.requireVm(s);
      if (s.state === "running") this.setState(s, "paused");
      // The real host writes it behind the answer and warns if it cannot; so does this one.
      if (!SNAPSHOT_ID.test(snapshotId) || this.warm.has(snapshotId)) {
        process.emitWarning(`sandbox ${id}: its warm snapshot failed (snapshot ${snapshotId} is not a new snapshot id); it stays paused in place`, "DenWarmSnapshotWarning");
        return;
      }
      this.warm.set(snapshotId, JSON.stringify(this.image(s, s.volumes)));
    }));
  }

  /**
   * Cold, the first half: the sandbox's state (or its warm snapshot) goes to the store; the
   * VM stays paused until the control plane destroys it. The guest lets go of its volumes
   * (nothing holds them in memory); on failure a sandbox that was running runs again.
   */
  upload(op: string, id: string, to: host.StoredRef, fromWarm?: string): Promise<{ storedBytes: number; heldVolumes?: string[] }> {
    return this.call("upload", [op, id, to, fromWarm], () => this.once(op, async () => {
      const s = this.boxes.get(id);
      const alive = s?.state === "running" || s?.state === "paused";
      // A warm VM with volumes lets go of them in a snapshot of its own, as from running.
      const release = alive && !!s?.volumes.length;
      const warm = fromWarm && !release && (this.warm.has(fromWarm) || !alive) ? fromWarm : undefined;
      const wasRunning = s?.state === "running";
      let image: SandboxImage;
      if (warm) {
        const w = this.warm.get(warm);
        if (!w) throw new DenError("snapshot_not_found", `snapshot ${warm} does not exist`);
        image = { ...(JSON.parse(w) as SandboxImage), mounts: [] };
      } else {
        const live = this.get(id);
        this.requireVm(live);
        if (wasRunning) this.setState(live, "paused");
        image = this.image(live, []);
      }
      try {
        this.faults.at("hibernate-cold-after-snapshot");
        return { storedBytes: await this.toStore(image, id, to) };
      } catch (e) {
        // Nothing is lost: the VM is still there, paused; put it back to work.
        if (wasRunning && s && !s.destroyed && s.state === "paused") this.setState(s, "running");
        throw e;
      }
    }));
  }

  wakeWarm(op: string, id: string, snapshotId: string | null): Promise<void> {
    return this.call("wakeWarm", [op, id, snapshotId], () => this.once(op, async () => {
      const s = this.boxes.get(id);
      if (s && (s.state === "running" || s.state === "paused")) {
        if (s.state === "paused") this.setState(s, "running");
        return;
      }
      const w = snapshotId ? this.warm.get(snapshotId) : undefined;
      if (!w) throw new DenError("sandbox_not_running", `sandbox ${id} has no VM and no snapshot to wake from`);
      // The VM died while warm: back from its snapshot under the same id, its volumes in their slots.
      const image = JSON.parse(w) as SandboxImage;
      const volumes = s?.volumes ?? image.mounts;
      this.destroyNow(id);
      const release = this.admission.reserve(id, image.shape);
      try {
        this.makeSandbox(id, image.template, image.shape, image.guest, volumes);
      } finally {
        release();
      }
    }));
  }

  /** Disk: the VM shuts down, its files kept; its processes (its memory) are gone, as after a reboot. */
  hibernateDisk(op: string, id: string): Promise<void> {
    return this.call("hibernateDisk", [op, id], () => this.once(op, async () => {
      const s = this.get(id);
      if (s.state === "off") return;
      if (s.state === "stopped") throw new DenError("qemu_error", `sandbox ${id}: its QEMU has exited`);
      s.guest.lose(new DenError("agent_unavailable", "agent connection closed"));
      this.listeners.delete(id);
      this.network(s, undefined);
      this.setState(s, "off");
    }));
  }

  wakeDisk(op: string, id: string): Promise<void> {
    return this.call("wakeDisk", [op, id], () => this.once(op, async () => {
      const s = this.boxes.get(id);
      if (!s) throw new DenError("sandbox_not_running", `sandbox ${id} has no disk on this host to boot from`);
      if (s.state === "running" || s.state === "stopped") return;
      // Room first: its memory and vCPUs count again from the moment it boots.
      const release = this.admission.reserve(id, { vcpus: s.shape.vcpus, memoryMb: s.shape.memoryMb });
      try {
        if (s.state !== "off") throw new DenError("invalid_state", `sandbox ${id} is ${s.state}; only a shut-down sandbox boots from its disk`);
        // A fresh boot: the same files, no process.
        s.guest = new MemoryGuest(s.fs, this.hooks(s));
        this.setState(s, "running");
      } finally {
        release();
      }
    }));
  }

  checkpoint(op: string, id: string, to: host.StoredRef): Promise<{ pauseMs: number; storedBytes: number }> {
    return this.call("checkpoint", [op, id, to], () => this.once(op, async () => {
      const s = this.get(id);
      this.requireVm(s);
      return { pauseMs: 0, storedBytes: await this.toStore(this.image(s, s.volumes), id, to) };
    }));
  }

  fork(op: string, id: string, children: string[], network?: api.NetworkPolicy, volumes?: host.VolumeSpec[]): Promise<host.HostSandboxInfo[]> {
    return this.call("fork", [op, id, children, network, volumes], () => this.once(op, async () => {
      const parent = this.get(id);
      const mounts = this.checkVolumes(volumes);
      const release = this.admission.reserve(undefined, { vcpus: parent.shape.vcpus, memoryMb: parent.shape.memoryMb }, children.length);
      try {
        if (!Number.isInteger(children.length) || children.length < 1 || children.length > 16) throw new DenError("invalid_argument", "fork count must be an integer in 1..16");
        this.requireVm(parent);
        // Each child: a deep copy of the parent's files and processes (the parent's mounts are not theirs).
        const image = parent.guest.image();
        this.faults.at("fork-children-started");
        const made: MemorySandbox[] = [];
        try {
          for (const child of children) {
            const c = this.makeSandbox(child, parent.template, parent.shape, image, mounts);
            this.network(c, network);
            const ports = this.listeners.get(id);
            if (ports) this.listeners.set(child, new Map(ports));
            made.push(c);
          }
        } catch (e) {
          for (const c of made) this.destroyNow(c.id);
          throw e;
        }
        return made.map((c) => this.info(c));
      } finally {
        release();
      }
    }));
  }

  resume(id: string): Promise<void> {
    return this.call("resume", [id], async () => {
      const s = this.boxes.get(id);
      if (s?.state === "paused") this.setState(s, "running");
    });
  }

  cpuSeconds(id: string): Promise<number | undefined> {
    return this.call("cpuSeconds", [id], async () => {
      const s = this.boxes.get(id);
      return s ? this.cpuOf(s) : undefined;
    });
  }

  setNetwork(id: string, policy: api.NetworkPolicy): Promise<void> {
    return this.call("setNetwork", [id, policy], async () => {
      const s = this.get(id);
      if (JSON.stringify(s.network) !== JSON.stringify(policy.egress === "none" ? undefined : policy)) this.network(s, policy);
    });
  }

  networkRefusals(id: string): Promise<host.Refusals | undefined> {
    return this.call("networkRefusals", [id], async () => {
      const s = this.boxes.get(id);
      return s?.network ? { ...s.refused } : undefined;
    });
  }

  /** Found by id at each call (no call is made until one is used): an unknown sandbox's calls fail with `sandbox_not_found`. */
  guest(id: string): HostGuest {
    return guestById(() => {
      this.reachable("guest");
      return this.get(id).guest;
    });
  }

  // ---- HostAgent: local snapshots, pins, inventory ----

  dropLocalSnapshot(snapshotId: string): Promise<void> {
    return this.call("dropLocalSnapshot", [snapshotId], async () => {
      if (this.warm.delete(snapshotId)) this.gc();
    });
  }

  unpin(snapshotId: string): Promise<void> {
    return this.call("unpin", [snapshotId], async () => {
      if (this.pins.delete(snapshotId)) this.gc();
    });
  }

  collectLocal(snapshots: string[], pins: host.TemplatePin[]): Promise<void> {
    return this.call("collectLocal", [snapshots, pins], async () => {
      const keep = new Set(snapshots);
      for (const id of [...this.warm.keys()]) if (!keep.has(id)) this.warm.delete(id);
      // The database is the record: a pin this host lost (or never had) is written again.
      const wanted = new Map(pins.map((p) => (typeof p === "string" ? [p, undefined] : [p.id, p.template])));
      for (const [holder, template] of wanted) if (template && !this.pins.has(holder)) this.pin(holder, template);
      for (const holder of [...this.pins.keys()]) if (!wanted.has(holder)) this.pins.delete(holder);
      this.gc();
    });
  }

  settled(op: string): Promise<void> {
    return this.call("settled", [op], async () => {
      await this.journal.get(op)?.catch(() => undefined);
    });
  }

  inventory(): Promise<host.HostInventory> {
    return this.call("inventory", [], async () => {
      const charges = this.admission.charges();
      return {
        instance: this.instance,
        vms: [...this.boxes.values()].map((s) => ({ id: s.id, state: s.state, cpuSeconds: this.cpuOf(s) ?? null, ...charges.get(s.id) })),
        snapshots: [...this.warm.keys()],
        capacity: { capacity: this.admission.capacity, used: this.admission.used(), memory: this.admission.memoryState() },
      };
    });
  }

  // ---- HostAgent: volumes ----

  createVolume(op: string, id: string, sizeMb: number): Promise<void> {
    return this.call("createVolume", [op, id, sizeMb], () => this.once(op, async () => this.vols.create(id, sizeMb)));
  }

  deleteVolume(id: string): Promise<void> {
    return this.call("deleteVolume", [id], async () => this.vols.remove(id));
  }

  /** Grown in a helper VM of its own that mounts it read-write, gone after. */
  growVolume(op: string, id: string, sizeMb: number, helper: string): Promise<void> {
    return this.call("growVolume", [op, id, sizeMb, helper], () => this.once(op, async () => {
      await this.createNow({ id: helper, template: "base", volumes: [{ volume: id, path: HELPER_MOUNT, readOnly: false }] });
      try {
        this.vols.grow(id, sizeMb);
      } finally {
        this.destroyNow(helper);
      }
    }));
  }

  parkVolume(op: string, id: string, to: host.StoredRef): Promise<{ storedBytes: number }> {
    return this.call("parkVolume", [op, id, to], () => this.once(op, async () => {
      if (await storedSnapshotComplete(this.store, to.key)) return { storedBytes: manifestBytes(await readStoredManifest(this.store, to.key)) };
      this.vols.get(id);
      // A VM that has it in a slot may be writing it: the copy would be torn.
      const user = this.volumeUser(id);
      if (user) throw new DenError("volume_in_use", `volume ${id} is in a slot of VM ${user.id} on this host`);
      const stored = await putStored(this.store, to.key, this.vols.serialize(id), { volume: id }, { tmp: this.tmp, midway: () => this.faults.at("snapshot-upload-mid") });
      return { storedBytes: manifestBytes(stored) };
    }));
  }

  fetchVolume(op: string, id: string, from: host.StoredRef): Promise<void> {
    return this.call("fetchVolume", [op, id, from], () => this.once(op, async () => {
      this.vols.check(id);
      this.vols.restore(id, (await getStored(this.store, from.key, { tmp: this.tmp })) as SerialVolume);
    }));
  }

  volumeImages(): Promise<host.VolumeImage[]> {
    return this.call("volumeImages", [], async () => this.vols.list());
  }

  dropVolumeImage(id: string, inode: number): Promise<boolean> {
    return this.call("dropVolumeImage", [id, inode], async () => {
      this.vols.check(id);
      if (this.volumeUser(id)) return false;
      if (this.vols.list().find((v) => v.id === id)?.inode !== inode) return false;
      this.vols.remove(id);
      return true;
    });
  }

  // ---- HostAgent: templates ----

  templates(): Promise<host.HostTemplate[]> {
    return this.call("templates", [], async () => this.tpl.list());
  }

  deleteTemplate(name: string): Promise<void> {
    return this.call("deleteTemplate", [name], async () => {
      const names = new Set(this.tpl.list().map((t) => t.name).filter((n) => n === name || n.startsWith(`${name}.`)));
      for (const n of names) this.tpl.retire(n);
      this.gc();
    });
  }

  buildTemplate(op: string, spec: host.TemplateBuildSpec): Promise<host.BuiltTemplate> {
    return this.call("buildTemplate", [op, spec], () => this.once(op, async () => {
      // One build per name at a time: a second waits and then finds the first one's version.
      const prev = this.builds.get(spec.name) ?? Promise.resolve();
      const next = prev.catch(() => undefined).then(() => this.build(spec));
      this.builds.set(spec.name, next);
      const t = await next.finally(() => {
        if (this.builds.get(spec.name) === next) this.builds.delete(spec.name);
      });
      return { ...wireTemplate(t.template, this.tpl.current(t.template.name) === t.template.version), reused: t.reused };
    }));
  }

  /** Runs the setup commands in a sandbox of its own (from a template or a checkpoint) and keeps what they left. */
  private async build(spec: host.TemplateBuildSpec): Promise<{ template: MemoryTemplate; reused: boolean }> {
    let source: Record<string, string>;
    if (spec.fromCheckpoint) source = { checkpoint: spec.fromCheckpoint.id };
    else source = { template: refKey(this.tpl.resolve(spec.fromTemplate ?? "base")) };
    const recipe = { source, setup: spec.setup };
    const ref = { name: spec.name, version: versionOf(recipe) };
    // Templates are immutable: a version built before is made current again and used as is.
    if (this.tpl.has(ref)) {
      this.tpl.setCurrent(ref);
      return { template: this.tpl.resolve(refKey(ref)), reused: true };
    }
    const id = newId("sbx");
    if (spec.fromCheckpoint) await this.restoreStored(id, spec.fromCheckpoint);
    else await this.createNow({ id, template: source.template! });
    const s = this.get(id);
    // The build's TTL bounds all its commands together, as a sandbox's bounds its life.
    const deadline = spec.ttlSeconds ? Date.now() + spec.ttlSeconds * 1000 : Infinity;
    try {
      for (const [i, cmd] of spec.setup.entries()) {
        const leftMs = deadline - Date.now();
        if (leftMs <= 0) throw new DenError("setup_failed", `the template build passed its TTL (${spec.ttlSeconds} s) before setup command ${i + 1}`, { command_index: i });
        const timeoutMs = Math.min(spec.setupTimeoutSeconds * 1000, leftMs);
        const r = await s.guest.exec(cmd, { timeoutMs });
        if (r.exitCode !== 0 || r.timedOut) {
          const why = r.timedOut ? (timeoutMs < spec.setupTimeoutSeconds * 1000 ? `passed the build's TTL (${spec.ttlSeconds} s)` : `timed out after ${spec.setupTimeoutSeconds} s`) : r.exitCode === null ? `died of signal ${r.signal}` : `exited with ${r.exitCode}`;
          throw new DenError("setup_failed", `setup command ${i + 1} ${why}: ${cmd.slice(0, 200)}`, {
            command_index: i, exit_code: r.exitCode, stdout: r.stdout.subarray(-4096).toString("utf8"), stderr: r.stderr.subarray(-4096).toString("utf8"),
          });
        }
      }
      checkTemplateName(ref.name);
      const template: MemoryTemplate = { ...ref, ...s.shape, createdAt: new Date(this.clock.now()).toISOString(), guest: s.guest.image(), baseTemplate: s.template };
      this.tpl.install(template, true);
      return { template, reused: false };
    } finally {
      this.destroyNow(id);
    }
  }

  publishTemplate(op: string, name: string, version: string, key: string): Promise<{ storedBytes: number }> {
    return this.call("publishTemplate", [op, name, version, key], () => this.once(op, async () => {
      if (await storedSnapshotComplete(this.store, key)) return { storedBytes: manifestBytes(await readStoredManifest(this.store, key)) };
      const t = this.tpl.resolve(`${name}@${version}`);
      const manifest = { format: 1, kind: "template", id: refKey(t), createdAt: t.createdAt, template: { name, version }, vm: { vcpus: t.vcpus, memoryMb: t.memoryMb, diskMb: t.diskMb } };
      const stored = await putStored(this.store, key, { format: "den-memory-template/1", template: t }, manifest, { tmp: this.tmp, midway: () => this.faults.at("snapshot-upload-mid") });
      return { storedBytes: manifestBytes(stored) };
    }));
  }

  fetchTemplate(op: string, name: string, version: string, key: string, current: boolean): Promise<void> {
    return this.call("fetchTemplate", [op, name, version, key, current], () => this.once(op, async () => {
      const ref = { name, version };
      if (this.tpl.has(ref)) {
        if (current && this.tpl.current(name) !== version) this.tpl.setCurrent(ref);
        return;
      }
      const got = (await getStored(this.store, key, { tmp: this.tmp })) as { format?: string; template?: MemoryTemplate };
      if (got.format !== "den-memory-template/1" || !got.template) throw new DenError("snapshot_corrupt", `stored template ${name}@${version} is not an in-memory host's`);
      this.tpl.install({ ...got.template, name, version }, current);
    }));
  }

  // ---- what the registrar asks (as LocalHostAgent) ----

  /** What a snapshot made here needs of the host it is restored on. */
  async kind(): Promise<host.HostKind> {
    this.reachable("kind");
    return memoryHostKind();
  }

  /** Its lease ran out: every running VM is paused (never to run twice); the control plane resumes those it holds. */
  async fence(): Promise<string[]> {
    const paused: string[] = [];
    for (const s of this.boxes.values()) {
      if (s.state !== "running") continue;
      this.setState(s, "paused");
      paused.push(s.id);
    }
    return paused;
  }

  /**
   * Every process of every guest ends (their timers with them); the host answers no more.
   * A data dir it made itself goes (with the store in it, if it made that too).
   */
  close(): void {
    for (const s of this.boxes.values()) s.guest.lose(new DenError("agent_unavailable", "agent connection closed by host"));
    this.cutInFlight("the host agent was closed");
    this.dead = true;
    if (this.ownsDataDir) rmSync(this.dataDir, { recursive: true, force: true });
  }

  // ---- test controls ----

  /**
   * Exec results for matching commands (a string: the command contains it; or a RegExp),
   * checked before the mini shell, the latest script first; a function may return undefined
   * to let the command run. Applies to exec, execStream, spawn and template setup commands.
   * Returns the function that removes it.
   */
  script(match: string | RegExp, answer: ScriptAnswer): () => void {
    const entry = { match, answer };
    this.scripts.push(entry);
    return () => {
      const i = this.scripts.indexOf(entry);
      if (i >= 0) this.scripts.splice(i, 1);
    };
  }

  /**
   * A server on port `port` of sandbox `id`'s loopback: each tunnel to it calls `handler`
   * with its end of the connection. It stands for a process of the guest: it survives
   * hibernations, restores and forks on this host, not a disk hibernation (a fresh boot).
   * Returns the function that stops it.
   */
  listen(id: string, port: number, handler: PortHandler): () => void {
    const ports = this.listeners.get(id) ?? new Map<number, PortHandler>();
    ports.set(port, handler);
    this.listeners.set(id, ports);
    return () => {
      if (this.listeners.get(id)?.get(port) === handler) this.listeners.get(id)!.delete(port);
    };
  }

  /**
   * The machine is lost: it stops answering (every call fails as HttpHostAgent's do for a
   * host it cannot reach) and its VMs are gone. Its disk (templates, volume images, local
   * snapshots) is as it was, should it `revive()`.
   */
  die(): void {
    if (this.dead) return;
    this.dead = true;
    this.cutInFlight(`the host agent ${this.instance} is unreachable (ECONNRESET)`);
    for (const s of this.boxes.values()) {
      s.destroyed = true;
      s.guest.lose(new DenError("agent_unavailable", "agent connection closed"));
    }
    this.boxes.clear();
    this.listeners.clear();
    this.journal = new Map();
    this.builds = new Map();
  }

  /** It answers again (a machine back from a reboot: no VM, its disk as it was). */
  revive(): void {
    this.dead = false;
  }

  /**
   * The host agent process restarts: its journal and the calls in flight are forgotten (their
   * callers see the connection reset); VMs and local snapshots stay, as QEMU processes and the
   * data dir outlive a host agent.
   */
  restart(): void {
    this.cutInFlight("the host agent restarted (ECONNRESET)");
    this.journal = new Map();
    this.builds = new Map();
  }

  /** Sandbox `id`'s VM dies: the inventory says `stopped`, its processes are gone, its files stay. */
  killVm(id: string): void {
    const s = this.get(id);
    if (s.state === "off") throw new DenError("invalid_state", `sandbox ${id} has no VM to kill`);
    this.setState(s, "stopped");
    s.guest.lose(new DenError("agent_unavailable", "agent connection closed"));
  }

  /** The host's available memory (MemAvailable) from now on; undefined: what the sandboxes leave of the capacity. */
  setAvailableMemoryMb(mb: number | undefined): void {
    this.availableMb = mb;
  }

  /** Free space on the host's disk (default 1 TiB). */
  setFreeDiskMb(mb: number): void {
    this.freeDiskMb = mb;
  }

  /** How busy sandbox `id`'s guest is (a share of one vCPU; default 0): its CPU seconds grow by it with the clock. */
  setCpuLoad(id: string, share: number): void {
    const s = this.get(id);
    this.setState(s, s.state);
    s.cpu.share = share;
  }

  /** Counts connection attempts its network refused (`networkRefusals`), for a sandbox with a network. */
  refuse(id: string, kind: keyof host.Refusals = "policy", count = 1): void {
    const s = this.get(id);
    if (!s.network) throw new DenError("invalid_state", `sandbox ${id} has no network`);
    s.refused[kind] += count;
  }

  sandbox(id: string): MemorySandboxView | undefined {
    const s = this.boxes.get(id);
    return s && {
      id: s.id, state: s.state, template: s.template, shape: s.shape, volumes: s.volumes, network: s.network, fs: s.fs,
      processes: s.guest.running(), cpuSeconds: this.cpuOf(s),
    };
  }

  sandboxes(): MemorySandboxView[] {
    return [...this.boxes.keys()].map((id) => this.sandbox(id)!);
  }

  /** Volume `id`'s files on this host (read or write them directly), if it has an image here. */
  volume(id: string): MemoryFs | undefined {
    if (!this.vols.has(id)) return undefined;
    const fs: Filesystem = this.vols.get(id).fs;
    return new MemoryFs(fs, () => this.clock.now());
  }

  /** Local (warm) snapshot ids. */
  localSnapshots(): string[] {
    return [...this.warm.keys()];
  }
}
