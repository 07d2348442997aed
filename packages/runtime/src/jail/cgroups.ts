import { existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";

/** What one VM may take of its host. */
export interface VmLimits {
  vcpus: number;
  memoryMb: number;
  /** Cores it may use at most (default: its vCPUs); see `cpuCeiling`. */
  cpuMax?: number;
}

/**
 * The most cores one VM may take on this host: its vCPUs, but never the whole machine (half
 * a core stays for Den and the other VMs), so a guest spinning on every vCPU of a VM as big
 * as its host still leaves Den's API and its neighbours a core's share.
 */
export function cpuCeiling(vcpus: number, hostCores = availableParallelism()): number {
  return Math.max(0.5, Math.min(vcpus, hostCores - 0.5));
}

/** QEMU's own memory beside the guest's (TCG's translation cache, device and I/O buffers). */
export const QEMU_OVERHEAD_MB = 384;

/**
 * A VM's memory ceiling: its guest RAM twice, plus QEMU's overhead. Twice, because the host
 * charges a VM for the page cache it faults in as well as for its own pages: a VM restored
 * from a template maps the template's RAM file (page cache, read as the guest runs or a
 * snapshot copies it) and holds a copy of every page the guest wrote, and its disk I/O goes
 * through the page cache too. At guest RAM + overhead, a busy VM's snapshot thrashes against
 * the limit and the kernel's OOM killer may take its QEMU.
 */
export function memoryLimitMb(guestMb: number): number {
  return 2 * guestMb + QEMU_OVERHEAD_MB;
}
/** Threads a QEMU may have (vCPUs, I/O workers); it cannot fork (seccomp). */
export const QEMU_PIDS_MAX = 512;
const PERIOD_US = 100_000;

/**
 * A host cgroup per VM: a CPU weight by its vCPUs and a ceiling of that many cores, memory
 * up to `memoryLimitMb` of its guest RAM, and a bound on threads. cgroup v1 (a hierarchy
 * per controller, as on these machines) and v2 (the unified hierarchy of most servers).
 * `root` is the cgroup mount (tests point it at a temporary dir).
 */
export class VmCgroups {
  private constructor(readonly root: string, readonly version: 1 | 2) {}

  /** The host's cgroups, or undefined where they cannot be written (no cgroup fs, no root). */
  static detect(root = "/sys/fs/cgroup"): VmCgroups | undefined {
    if (existsSync(join(root, "cgroup.controllers"))) return new VmCgroups(root, 2);
    if (["cpu", "memory", "pids"].every((c) => existsSync(join(root, c, "cgroup.procs")))) return new VmCgroups(root, 1);
    return undefined;
  }

  static at(root: string, version: 1 | 2): VmCgroups {
    return new VmCgroups(root, version);
  }

  /** The cgroup dirs of one VM: per controller on v1, one on v2. */
  dirs(instance: string, vm: string): Record<string, string> {
    const rel = join("den", instance, vm);
    return this.version === 2
      ? { unified: join(this.root, rel) }
      : { cpu: join(this.root, "cpu", rel), memory: join(this.root, "memory", rel), pids: join(this.root, "pids", rel) };
  }

  /** Creates the VM's cgroup with its limits and moves `pid` (all its threads) into it. */
  place(instance: string, vm: string, pid: number, limits: VmLimits): void {
    const d = this.dirs(instance, vm);
    const memory = memoryLimitMb(limits.memoryMb) * 1024 * 1024;
    const quota = Math.round((limits.cpuMax ?? limits.vcpus) * PERIOD_US);
    if (this.version === 2) {
      this.enableControllers(join("den", instance, vm));
      mkdirSync(d.unified!, { recursive: true });
      write(d.unified!, "cpu.weight", String(Math.min(10_000, 100 * limits.vcpus)));
      write(d.unified!, "cpu.max", `${quota} ${PERIOD_US}`);
      write(d.unified!, "memory.max", String(memory));
      write(d.unified!, "pids.max", String(QEMU_PIDS_MAX));
      write(d.unified!, "cgroup.procs", String(pid));
      return;
    }
    for (const dir of Object.values(d)) mkdirSync(dir, { recursive: true });
    write(d.cpu!, "cpu.shares", String(1024 * limits.vcpus));
    write(d.cpu!, "cpu.cfs_period_us", String(PERIOD_US));
    write(d.cpu!, "cpu.cfs_quota_us", String(quota));
    write(d.memory!, "memory.limit_in_bytes", String(memory));
    write(d.pids!, "pids.max", String(QEMU_PIDS_MAX));
    for (const dir of Object.values(d)) write(dir, "cgroup.procs", String(pid));
  }

  /** The VM cgroups of an instance, by VM tag. */
  list(instance: string): string[] {
    const dir = dirname(Object.values(this.dirs(instance, "x"))[0]!);
    try {
      return readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
    } catch {
      return [];
    }
  }

  /** Removes the VM's (empty) cgroup; one whose process is still there stays. */
  remove(instance: string, vm: string): void {
    for (const dir of Object.values(this.dirs(instance, vm))) {
      try {
        rmdirSync(dir);
      } catch {
        // gone already, or a process still in it
      }
    }
  }

  /**
   * Removes the instance's VM cgroups that hold no process (a QEMU killed, or dead on its
   * own), then the instance's own if none is left (place makes it again when needed).
   */
  removeEmpty(instance: string): void {
    for (const vm of this.list(instance)) this.remove(instance, vm);
    for (const dir of Object.values(this.dirs(instance, "x"))) {
      try {
        rmdirSync(dirname(dir));
      } catch {
        // gone already, or VMs still in it
      }
    }
  }

  /** v2: each level down to the VM's must hand the controllers on to its children. */
  private enableControllers(rel: string): void {
    // The root, then every level above the VM's own cgroup (a leaf: it holds the process).
    const parts = rel.split("/").slice(0, -1);
    for (let i = 0; i <= parts.length; i++) {
      const dir = join(this.root, ...parts.slice(0, i));
      mkdirSync(dir, { recursive: true });
      // (a real cgroup dir has the file; a test's directory gets it here)
      if (!existsSync(join(dir, "cgroup.subtree_control"))) writeFileSync(join(dir, "cgroup.subtree_control"), "");
      const have = readFileSync(join(dir, "cgroup.subtree_control"), "utf8").split(/\s+/);
      const missing = ["cpu", "memory", "pids"].filter((c) => !have.includes(c) && !have.includes(`+${c}`));
      if (missing.length) write(dir, "cgroup.subtree_control", missing.map((c) => `+${c}`).join(" "));
    }
  }
}

function write(dir: string, file: string, value: string): void {
  writeFileSync(join(dir, file), value);
}
