/**
 * What an in-memory host holds (what a real one has in its QEMU processes and its data
 * dir): its sandboxes, local (warm) snapshots, template versions and pins, volume images;
 * and the small rules every part of it applies to them (what a sandbox in each state
 * allows, CPU seconds, template garbage collection). Every change goes through `change`,
 * which writes the state file once the change is made (host-file.ts).
 */
import { join } from "node:path";
import { DenError, type api, type host } from "@den/protocol";
import type { ObjectStore } from "@den/store";
import type { Clock } from "./clock.js";
import type { FsWatch, MemoryFs } from "./memory-fs.js";
import type { MemoryGuest } from "./memory-guest.js";
import { memoryHostKind, type SandboxImage } from "./memory-image.js";
import { MemoryTemplates, baseTemplate, refKey, type TemplateRef } from "./memory-templates.js";
import { MemoryVolumes } from "./memory-volumes.js";

export type Shape = { vcpus: number; memoryMb: number; diskMb: number };
/** The inventory's states: `stopped` is a VM that died, `off` one shut down with its disk kept. */
export type MemoryVmState = host.HostInventory["vms"][number]["state"];

export interface MemorySandbox {
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

export const MIB = 1024 * 1024;
// (A build's VM is one too, named as the real host names it: host.BUILD_VM_PREFIX, as the runtime's registry allows.)
export const SANDBOX_ID = /^(sbx|bld)_[a-z2-7]{16}$/;
export const SNAPSHOT_ID = /^snap_[a-z2-7]{16}$/;
export const ID_PATTERN = /^[a-z]+_[a-z2-7]{16}$/;

/**
 * Where the state's changes are written (host-file.ts's HostFile; an interface here so the
 * state does not import the file that reads it).
 */
export interface StateWriter {
  /** Runs `fn` (synchronous), then writes the state. */
  change<T>(fn: () => T): T;
  /** A guest's files or processes changed. */
  sandboxChanged(id: string): void;
  /** What a sandbox's root filesystem is told. */
  sandboxWatch(id: string): FsWatch;
  /** What a volume image's filesystem is told. */
  volumeWatch(id: string): FsWatch;
}

export class HostState {
  readonly boxes = new Map<string, MemorySandbox>();
  /** Local (warm) snapshots: a sandbox image as JSON, by snapshot id. */
  readonly warm = new Map<string, string>();
  /** Template versions stored snapshots need, by holder (snapshot id): name@version. */
  readonly pins = new Map<string, string>();
  readonly tpl = new MemoryTemplates();
  readonly vols: MemoryVolumes;

  constructor(
    readonly instance: string,
    readonly store: ObjectStore,
    readonly clock: Clock,
    readonly dataDir: string,
    readonly file: StateWriter,
  ) {
    this.vols = new MemoryVolumes(() => clock.now(), (id) => file.volumeWatch(id));
    this.tpl.install(baseTemplate(), true);
  }

  /** Makes the changes in `fn` (synchronous), then writes the state file. */
  change<T>(fn: () => T): T {
    return this.file.change(fn);
  }

  /** Where transfers are staged. */
  get tmp(): string {
    return join(this.dataDir, "transfers");
  }

  get(id: string): MemorySandbox {
    const s = typeof id === "string" ? this.boxes.get(id) : undefined;
    if (!s) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(id)} does not exist`);
    return s;
  }

  /** What a guest call meets on a sandbox that is not running (the runtime's Sandbox errors). */
  usable(s: MemorySandbox): void {
    if (s.destroyed) throw new DenError("sandbox_destroyed", `sandbox ${s.id} has been destroyed`);
    if (s.state === "paused") throw new DenError("sandbox_not_running", `sandbox ${s.id} is paused; resume it first`);
    if (s.state === "off") throw new DenError("sandbox_not_running", `sandbox ${s.id} is shut down (its disk is kept); boot it first`);
    if (s.state === "stopped") throw new DenError("agent_unavailable", `sandbox ${s.id}: agent socket did not open: its VM has exited`);
  }

  /** A lifecycle step needs the VM: an `off` sandbox has none, a dead one's QEMU does not answer. */
  requireVm(s: MemorySandbox): void {
    if (s.state === "off") throw new DenError("sandbox_not_running", `sandbox ${s.id} has no VM`);
    if (s.state === "stopped") throw new DenError("qemu_error", `sandbox ${s.id}: its QEMU has exited`);
  }

  setState(s: MemorySandbox, state: MemoryVmState): void {
    const now = this.clock.now();
    if (s.cpu.since !== undefined) s.cpu.seconds += this.ranFor(s, now);
    s.cpu.since = state === "running" ? now : undefined;
    s.state = state;
    this.file.sandboxChanged(s.id);
  }

  /** Host CPU seconds of its VM (none for a sandbox with no VM). */
  cpuOf(s: MemorySandbox): number | undefined {
    if (s.state === "off" || s.state === "stopped") return undefined;
    return s.cpu.seconds + this.ranFor(s, this.clock.now());
  }

  /** CPU seconds since it last started running (none before: a clock behind it, as a new test clock on a kept state). */
  private ranFor(s: MemorySandbox, now: number): number {
    return s.cpu.since === undefined ? 0 : (Math.max(0, now - s.cpu.since) / 1000) * s.cpu.share;
  }

  /** A sandbox's network: a policy kept (no packets flow in memory); `none` is no network. */
  network(s: MemorySandbox, policy: api.NetworkPolicy | undefined): void {
    s.network = policy && policy.egress !== "none" ? policy : undefined;
    s.refused = { private: 0, policy: 0, limit: 0, dns: 0 };
    this.file.sandboxChanged(s.id);
  }

  info(s: MemorySandbox): host.HostSandboxInfo {
    return { template: s.template.name, templateVersion: s.template.version, ...s.shape };
  }

  image(s: MemorySandbox, mounts: host.VolumeSpec[]): SandboxImage {
    return { format: "den-memory-sandbox/1", template: s.template, shape: s.shape, guest: s.guest.image(), mounts };
  }

  /** The runtime manifest a stored snapshot carries (the in-memory host's shape of it). */
  manifest(s: { id: string; template: TemplateRef; shape: Shape }, snapshotId: string, mounts: host.VolumeSpec[] = []): Record<string, unknown> {
    const kind = memoryHostKind();
    return {
      format: 1, kind: "sandbox", id: snapshotId, createdAt: new Date(this.clock.now()).toISOString(), template: s.template, memory: "stream",
      host: { qemuVersion: kind.qemuVersion, accelerator: kind.accelerator, cpuModel: kind.cpuModel, machine: "in-memory", deviceSet: "in-memory", tscKhz: 0 },
      vm: s.shape, pauseMs: 0, sourceSandbox: s.id, ...(mounts.length ? { volumes: mounts } : {}),
    };
  }

  pin(holder: string, ref: TemplateRef): void {
    if (!ID_PATTERN.test(holder)) throw new DenError("invalid_argument", `invalid pin holder ${JSON.stringify(holder)}`);
    this.pins.set(holder, refKey(ref));
  }

  /** Template versions nothing references any more (no sandbox, local snapshot or pin) go. */
  gc(): void {
    const refs = new Set<string>(this.pins.values());
    for (const s of this.boxes.values()) refs.add(refKey(s.template));
    for (const w of this.warm.values()) refs.add(refKey((JSON.parse(w) as SandboxImage).template));
    this.tpl.gc(refs);
  }

  /** A VM that has volume `id` in a slot (it may be writing the image). */
  volumeUser(id: string): MemorySandbox | undefined {
    return [...this.boxes.values()].find((s) => s.volumes.some((v) => v.volume === id));
  }

  /** Volumes to put in a VM must have their images here. */
  checkVolumes(volumes: host.VolumeSpec[] | undefined): host.VolumeSpec[] {
    for (const v of volumes ?? []) this.vols.get(v.volume);
    return volumes ?? [];
  }
}
