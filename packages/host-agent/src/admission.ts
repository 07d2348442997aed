import { statSync, statfsSync } from "node:fs";
import { join } from "node:path";
import { cpus, totalmem } from "node:os";
import { DenError, type host } from "@den/protocol";
import { VM_FILES } from "@den/runtime";

/** What one VM holds while it exists (running or warm-hibernated); a cold one holds nothing. */
export type Shape = host.Shape;

/** How much this host may hand out (the wire type of the host protocol). */
export type Capacity = host.Capacity;

const totalMemoryMb = () => Math.floor(totalmem() / 1024 / 1024);
/** The host memory kept back from guests, and that must stay available: 10% of RAM, at least 1 GiB. */
const defaultMemoryReserveMb = () => Math.max(1024, Math.ceil(totalMemoryMb() * 0.1));

/** `DEN_MEMORY_RESERVE_MB`: the host memory that must stay available (MemAvailable) for anything new to be admitted; default 10% of RAM, at least 1 GiB. */
export function memoryReserveMb(env: NodeJS.ProcessEnv = process.env): number {
  const v = Number(env.DEN_MEMORY_RESERVE_MB);
  return Number.isFinite(v) && v >= 0 && env.DEN_MEMORY_RESERVE_MB !== undefined ? v : defaultMemoryReserveMb();
}

/** The default: the machine's memory minus a reserve (10%, at least 1 GiB); 8 vCPUs per core, since an agent's sandbox mostly waits; 2 GiB of disk kept free. */
export function defaultCapacity(): Capacity {
  return { memoryMb: totalMemoryMb() - defaultMemoryReserveMb(), vcpus: cpus().length * 8, diskReserveMb: 2048 };
}

/**
 * What the disks of these sandboxes may still grow by, in MiB: each overlay up to its
 * guest's disk size, less what it already holds (a destroyed or cold one has no disk here).
 */
export function diskPromisedMb(sandboxes: Array<{ dir: string; state: string; info: { diskMb: number } }>): number {
  let mb = 0;
  for (const s of sandboxes) {
    if (s.state === "destroyed") continue;
    let heldMb = 0;
    try {
      heldMb = (statSync(join(s.dir, VM_FILES.disk)).blocks * 512) / 1024 / 1024;
    } catch {
      // not made yet, or gone
    }
    mb += Math.max(0, s.info.diskMb - heldMb);
  }
  return mb;
}

/**
 * `DEN_DISK_OVERCOMMIT`: how many times over the free disk (above the reserve) may be promised
 * to guests' disks. 4 by default: an agent's sandbox writes a fraction of its disk, and one
 * that fills it fills only its own (a full host disk is an I/O error in the guest that
 * writes, never a paused VM); 1 promises every byte.
 */
export function diskOvercommit(env: NodeJS.ProcessEnv = process.env): number {
  const v = Number(env.DEN_DISK_OVERCOMMIT ?? 4);
  return Number.isFinite(v) && v >= 1 ? v : 1;
}

/**
 * `DEN_MEMORY_OVERCOMMIT`: how many times over the guest RAM a VM has not made its own may be
 * promised. 1 by default (guest memory is never overcommitted); above it, a VM is charged its
 * private memory (what it has written: its pages no other VM shares) plus the rest of its
 * guest RAM divided by this, so idle sandboxes that share their template's pages pack denser.
 */
export function memoryOvercommit(env: NodeJS.ProcessEnv = process.env): number {
  const v = Number(env.DEN_MEMORY_OVERCOMMIT ?? 1);
  return Number.isFinite(v) && v >= 1 ? v : 1;
}

/** What a VM of `guestMb` that holds `privateMb` privately is charged against the host's memory. */
export function memoryCharge(guestMb: number, privateMb: number | undefined, overcommit: number): number {
  if (overcommit <= 1 || privateMb === undefined) return guestMb;
  const own = Math.min(guestMb, Math.max(0, privateMb));
  return Math.ceil(own + (guestMb - own) / overcommit);
}

function freeMbOf(dir: string): number {
  const st = statfsSync(dir);
  return Math.floor((st.bavail * st.bsize) / 1024 / 1024);
}

/** A VM that exists: its shape, whether it runs (a paused one holds memory but no vCPU), what it holds privately. */
export type Held = Shape & { paused?: boolean; privateMb?: number };

/**
 * Admission control for one host: a VM is admitted only if what exists (`inUse`) plus
 * what is being made (reservations) plus it fits. Reservations are taken synchronously,
 * so two concurrent requests can never both take the last room. A warm-hibernated (paused)
 * VM holds its memory but no vCPU; with a memory overcommit ratio, memory is charged by
 * `memoryCharge`.
 */
export class Admission {
  private reservations = new Map<string, { shape: Shape; count: number }>();
  private seq = 0;

  constructor(
    readonly capacity: Capacity,
    private readonly dataDir: string,
    /** The VMs that exist now, by sandbox id. */
    private readonly inUse: () => Map<string, Held>,
    /** MiB the disks on this host may still grow by (each up to its size), written or not yet. */
    private readonly diskPromisedMb: () => number = () => 0,
    /** How many times over the free disk may be promised (`DEN_DISK_OVERCOMMIT`; 1: never). */
    private readonly diskOvercommit = 1,
    /** How many times over guest RAM not yet private may be promised (`DEN_MEMORY_OVERCOMMIT`; 1: never). */
    readonly memoryOvercommit = 1,
    /** The host's memory now: below `memoryReserveMb` available, nothing new is admitted. */
    private readonly memory: { availableMb: () => number; reserveMb: number } = { availableMb: () => Infinity, reserveMb: 0 },
    /** MiB free on the data dir's filesystem (a host with no real disk, the in-memory one, says its own). */
    private readonly freeDiskMb?: () => number,
  ) {}

  /** The host's available memory against its reserve. */
  memoryState(): { availableMb: number; reserveMb: number } {
    const a = this.memory.availableMb();
    return { availableMb: Number.isFinite(a) ? Math.floor(a) : 2 ** 31, reserveMb: this.memory.reserveMb };
  }

  /** What each VM that exists is charged against the host's memory now, and what it holds privately where measured. */
  charges(): Map<string, { chargedMb: number; privateMb?: number }> {
    const out = new Map<string, { chargedMb: number; privateMb?: number }>();
    for (const [id, s] of this.inUse()) {
      out.set(id, { chargedMb: memoryCharge(s.memoryMb, s.privateMb, this.memoryOvercommit), ...(s.privateMb !== undefined ? { privateMb: s.privateMb } : {}) });
    }
    return out;
  }

  used(): Shape & { sandboxes: number } {
    const live = this.inUse();
    let vcpus = 0;
    let memoryMb = 0;
    for (const s of live.values()) {
      if (!s.paused) vcpus += s.vcpus;
      memoryMb += memoryCharge(s.memoryMb, s.privateMb, this.memoryOvercommit);
    }
    let sandboxes = live.size;
    for (const [key, r] of this.reservations) {
      if (live.has(key)) continue;
      vcpus += r.shape.vcpus * r.count;
      memoryMb += memoryCharge(r.shape.memoryMb, 0, this.memoryOvercommit) * r.count;
      sandboxes += r.count;
    }
    return { vcpus, memoryMb, sandboxes };
  }

  /** Throws `capacity_exhausted` unless `count` VMs of `shape` fit now. */
  check(shape: Shape, count = 1): void {
    const used = this.used();
    const cap = this.capacity;
    const what = count === 1 ? `a ${shape.memoryMb} MiB, ${shape.vcpus}-vCPU sandbox` : `${count} sandboxes of ${shape.memoryMb} MiB, ${shape.vcpus} vCPU`;
    const hint = "destroy or cold-hibernate a sandbox, or raise the host's capacity";
    const requestedMb = memoryCharge(shape.memoryMb, 0, this.memoryOvercommit) * count;
    if (used.memoryMb + requestedMb > cap.memoryMb) {
      throw new DenError("capacity_exhausted", `this host cannot hold ${what}: ${used.memoryMb} of ${cap.memoryMb} MiB of guest memory are in use (${used.sandboxes} sandboxes); ${hint}`,
        { resource: "memory", used_mb: used.memoryMb, capacity_mb: cap.memoryMb, requested_mb: requestedMb });
    }
    // What is charged is a promise; what the host has left is a fact: under pressure, nothing new.
    const availableMb = Math.floor(this.memory.availableMb());
    if (availableMb < this.memory.reserveMb) {
      throw new DenError("capacity_exhausted", `this host is short of memory: ${availableMb} MiB available, ${this.memory.reserveMb} MiB are kept in reserve; ${hint}`,
        { resource: "memory_pressure", available_mb: availableMb, reserve_mb: this.memory.reserveMb });
    }
    if (used.vcpus + shape.vcpus * count > cap.vcpus) {
      throw new DenError("capacity_exhausted", `this host cannot hold ${what}: ${used.vcpus} of ${cap.vcpus} vCPUs are in use; ${hint}`,
        { resource: "vcpus", used: used.vcpus, capacity: cap.vcpus });
    }
    const freeMb = this.freeDiskMb ? this.freeDiskMb() : freeMbOf(this.dataDir);
    if (freeMb < cap.diskReserveMb) {
      throw new DenError("capacity_exhausted", `this host's disk is full: ${freeMb} MiB free, ${cap.diskReserveMb} MiB are kept in reserve; ${hint}`,
        { resource: "disk", free_mb: freeMb, reserve_mb: cap.diskReserveMb });
    }
    // Every disk may fill to its size: what the existing ones may still write, what is being
    // made and this one must fit above the reserve, so no guest's fill takes the host's disk.
    const promisedMb = Math.ceil((this.diskPromisedMb() + this.reservedDiskMb() + (shape.diskMb ?? 0) * count) / this.diskOvercommit);
    if (freeMb - promisedMb < cap.diskReserveMb) {
      throw new DenError("capacity_exhausted", `this host cannot promise ${what} its disk: ${freeMb} MiB free, ${promisedMb} MiB promised to sandboxes' disks, ${cap.diskReserveMb} MiB kept in reserve; ${hint}`,
        { resource: "disk", free_mb: freeMb, promised_mb: promisedMb, reserve_mb: cap.diskReserveMb });
    }
  }

  private reservedDiskMb(): number {
    let mb = 0;
    for (const r of this.reservations.values()) mb += (r.shape.diskMb ?? 0) * r.count;
    return mb;
  }

  /**
   * Checks and holds room for VMs being made under `key` (a sandbox id, while that VM does
   * not exist yet). Call the returned function once they exist or the attempt failed.
   */
  reserve(key: string | undefined, shape: Shape, count = 1): () => void {
    this.check(shape, count);
    const k = key ?? `reservation-${++this.seq}`;
    this.reservations.set(k, { shape, count });
    return () => this.reservations.delete(k);
  }
}
