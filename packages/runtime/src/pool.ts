import { rmSync } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { POOL_TAG_PREFIX, isAlive } from "./qemu.js";
import { newId } from "./util.js";
import type { Vm } from "./vm.js";

/**
 * What a pooled QEMU is spawned for. Its RAM backend, disk and devices are fixed at
 * spawn, so a pooled VM fits only creates of one template version in one shape.
 */
export interface PoolShape {
  /** The template version's directory. */
  source: string;
  memoryFile: string;
  stateFile: string;
  /** The disks its overlay sits on, top first (the first made it: see VmSpec.backing). */
  backing: string[];
  vcpus: number;
  memoryMb: number;
}

/** A QEMU waiting in `-incoming defer`, its disk overlay, jail and cgroup made, its QMP connected. */
export interface PooledVm {
  id: string;
  dir: string;
  shape: PoolShape;
  vm: Vm;
  /** A state it has yet to load (a fork's child, started while its parent's state was saved); else it has its template's. */
  pendingState?: string;
}

/** Starts a pooled VM of `shape` in `dir` (which exists), tagged `id`; `closed` says the pool is closing (no retry then). */
export type PoolSpawner = (shape: PoolShape, dir: string, id: string, closed: () => boolean) => Promise<Vm>;

/** After a spawn fails, the shape is not tried again for this long (a broken template must not spin). */
const BACKOFF_MS = 30_000;

/** `DEN_VM_POOL`: QEMUs kept waiting per template shape (0: no pool). */
export function poolSize(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.DEN_VM_POOL ?? 2);
  return Number.isInteger(n) && n >= 0 && n <= 16 ? n : 2;
}

const keyOf = (s: PoolShape) => `${s.source}\0${s.vcpus}\0${s.memoryMb}`;

/**
 * Pre-spawned QEMUs, so a create from a template skips QEMU's start (~26 ms to its QMP
 * greeting here), its cgroup placement and its overlay. The shapes kept in stock are the
 * ones creates asked for lately (at most `maxShapes`); it is refilled in the background,
 * one spawn at a time, after the create that took a VM is done. Nothing here is durable:
 * a VM is a sandbox's only once its directory has been renamed to the sandbox's (see
 * Launcher.startSandbox), and whatever a killed Den left in the pool is killed at the next
 * open (adoptDataDir).
 */
export class VmPool {
  private readonly stock = new Map<string, PooledVm[]>();
  /** Shapes in demand, least recently asked for first. */
  private readonly shapes = new Map<string, PoolShape>();
  private readonly failedAt = new Map<string, number>();
  /** The fill in flight, if any (a close waits for it: see settled). */
  private filling?: Promise<void>;
  private closed = false;

  constructor(
    readonly root: string,
    private readonly spawn: PoolSpawner,
    readonly size = poolSize(),
    private readonly maxShapes = 2,
  ) {}

  /** Keeps `shape` in stock from now on (it is the newest in demand). */
  want(shape: PoolShape): void {
    if (this.size === 0 || this.closed) return;
    const key = keyOf(shape);
    this.shapes.delete(key);
    this.shapes.set(key, shape);
    while (this.shapes.size > this.maxShapes) this.drop(this.shapes.keys().next().value!);
  }

  /** A waiting VM of `shape`, if there is one (it is the caller's from now on); the shape stays in stock. */
  take(shape: PoolShape): PooledVm | undefined {
    this.want(shape);
    const list = this.stock.get(keyOf(shape)) ?? [];
    for (let slot = list.shift(); slot; slot = list.shift()) {
      if (!slot.vm.qmp.closed && isAlive(slot.vm.pid)) return slot;
      void this.discard(slot);
    }
    return undefined;
  }

  /** How many VMs wait, over every shape. */
  get ready(): number {
    let n = 0;
    for (const l of this.stock.values()) n += l.length;
    return n;
  }

  /** Spawns what the shapes in demand lack, one VM at a time, in the background. */
  refill(): void {
    if (this.filling || this.closed || this.size === 0) return;
    this.filling = this.fill().finally(() => (this.filling = undefined));
  }

  /** Resolves once no spawn of this pool is in flight (after a close: nothing of it writes any more). */
  async settled(): Promise<void> {
    await this.filling;
  }

  private async fill(): Promise<void> {
    for (;;) {
      const now = Date.now();
      // The newest shape first.
      const next = [...this.shapes].reverse().find(([key]) =>
        (this.stock.get(key)?.length ?? 0) < this.size && now - (this.failedAt.get(key) ?? -Infinity) >= BACKOFF_MS);
      if (!next || this.closed) return;
      const [key, shape] = next;
      const id = newId(POOL_TAG_PREFIX.slice(0, -1));
      const dir = join(this.root, id);
      try {
        await mkdir(dir, { recursive: true });
        if (this.closed) throw new Error("the pool is closed");
        const vm = await this.spawn(shape, dir, id, () => this.closed);
        const slot = { id, dir, shape, vm };
        if (this.closed || !this.shapes.has(key)) await this.discard(slot);
        else this.stock.set(key, [...(this.stock.get(key) ?? []), slot]);
      } catch (e) {
        this.failedAt.set(key, Date.now());
        await rm(dir, { recursive: true, force: true });
        // (A close kills a spawn in flight: that is no failure to tell.)
        if (!this.closed) process.emitWarning(`VM pool: cannot start a QEMU for ${shape.source}: ${(e as Error).message.slice(0, 300)}`, "DenPoolWarning");
      }
    }
  }

  /** Stops keeping the shapes `keep` says no to (a template version gone) and kills their VMs. */
  retain(keep: (shape: PoolShape) => boolean): void {
    for (const [key, shape] of [...this.shapes]) if (!keep(shape)) this.drop(key);
  }

  private drop(key: string): void {
    this.shapes.delete(key);
    for (const slot of this.stock.get(key) ?? []) void this.discard(slot);
    this.stock.delete(key);
  }

  /** Kills a pooled VM that no sandbox has claimed and removes its directory. */
  async discard(slot: PooledVm): Promise<void> {
    await slot.vm.kill();
    await rm(slot.dir, { recursive: true, force: true });
  }

  /**
   * Kills every waiting VM; returns their pids, for the caller to wait until they are gone
   * (a QEMU tearing down its memory is still in its cgroup some milliseconds after the kill).
   */
  close(): number[] {
    this.closed = true;
    const killed: number[] = [];
    for (const list of this.stock.values()) {
      for (const slot of list) {
        slot.vm.detach();
        try {
          process.kill(slot.vm.pid, "SIGKILL");
          killed.push(slot.vm.pid);
        } catch {
          // gone already
        }
        rmSync(slot.dir, { recursive: true, force: true });
      }
    }
    this.stock.clear();
    this.shapes.clear();
    return killed;
  }

  /** Kills every waiting VM and waits for them to be gone. */
  async drain(): Promise<void> {
    this.closed = true;
    const all = [...this.stock.values()].flat();
    this.stock.clear();
    this.shapes.clear();
    await Promise.all(all.map((s) => this.discard(s)));
  }
}
