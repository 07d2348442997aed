import type { SandboxRow, Store } from "./db/store.js";

/** The states a sandbox is billed in; others (creating, lost, error, destroyed) cost nothing. */
export type MeteredState = "running" | "warm" | "cold";

/**
 * A disk hibernation is billed as `cold`: like a cold one it holds no VM, memory or vCPUs
 * (warm holds its memory). Its disk stays on its host, not in the snapshot store, so its
 * segments carry no stored bytes.
 */
export function meteredState(row: Pick<SandboxRow, "state" | "hibernate_mode">): MeteredState | null {
  if (row.state === "running") return "running";
  if (row.state === "hibernated") return row.hibernate_mode === "cold" || row.hibernate_mode === "disk" ? "cold" : "warm";
  return null;
}


/**
 * Meters sandboxes in segments: a sandbox's open segment starts at `meter_since` (in its
 * row, so it survives a restart) and is closed into `usage_segments` at every transition
 * and every `intervalMs`, with the host CPU its QEMU used meanwhile (read from /proc) and
 * the CPU Den spent on its behalf (snapshots, compression, hashing, transfers).
 */
/**
 * How the CPU of host work is measured: the host agent's `withHostWork` (what hosts over
 * HTTP report for the calls made under it) and this process's CPU seconds. The composition
 * gives it (the control plane does not import the host agent); without one, only this
 * process's `cpuUsage` counts.
 */
export interface HostWork {
  run<T>(fn: () => Promise<T>, charge: (reportedSeconds: number) => void): Promise<T>;
  processCpuSeconds(): number;
}

const processOnly: HostWork = {
  async run(fn, charge) {
    try {
      return await fn();
    } finally {
      charge(0);
    }
  },
  processCpuSeconds: () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1e6;
  },
};

export class Meter {
  private denCpu = new Map<string, number>();
  private lastCpu = new Map<string, number>();

  /** `cpuSeconds`: a sandbox's VM's CPU counter, from the host it is on. */
  constructor(
    private readonly cpuSeconds: (id: string) => Promise<number | undefined>,
    private readonly hostWork: HostWork = processOnly,
  ) {}

  /** Reads the VM's CPU counter now: call before an operation that may end the VM. */
  async sample(id: string): Promise<number | undefined> {
    // A host that does not answer (it may be lost) has no reading to give; the segment closes without one.
    const c = await this.cpuSeconds(id).catch(() => undefined);
    if (c !== undefined) this.lastCpu.set(id, c);
    return c;
  }

  /**
   * Runs host work done for `ids` and charges its CPU to them (split evenly): what a host
   * over HTTP reported for the calls, or else (the host in this process) what this
   * process spent meanwhile (compression and hashing on its thread pool included).
   */
  async work<T>(ids: string | string[], fn: () => Promise<T>): Promise<T> {
    const c0 = this.hostWork.processCpuSeconds();
    return this.hostWork.run(fn, (reported) => {
      const spent = reported > 0 ? reported : this.hostWork.processCpuSeconds() - c0;
      const list = typeof ids === "string" ? [ids] : ids;
      const share = spent / Math.max(1, list.length);
      for (const id of list) this.denCpu.set(id, (this.denCpu.get(id) ?? 0) + share);
    });
  }

  /** Den CPU charged to a sandbox and not yet in a closed segment. */
  pendingDenCpu(id: string): number {
    return this.denCpu.get(id) ?? 0;
  }

  /** The VM's CPU since its open segment began (0 without a VM); `live` is a reading just taken. */
  openCpu(row: SandboxRow, live: number | undefined): number {
    const now = live ?? this.lastCpu.get(row.id);
    return now === undefined ? 0 : Math.max(0, now - (row.meter_cpu ?? 0));
  }

  /**
   * Closes `row`'s open segment at `now` (recording it if it is billable) and returns the
   * fields that open the next one. `row` must be the sandbox as it was until now; `store`
   * is the transaction that writes those fields, so a segment is never billed twice; `live`
   * is the VM's CPU counter, read just before (undefined without a VM).
   */
  async roll(row: SandboxRow, now: number, store: Store, live: number | undefined): Promise<Pick<SandboxRow, "meter_since" | "meter_cpu">> {
    const state = meteredState(row);
    if (state && row.meter_since !== null && now > row.meter_since) {
      const den = this.denCpu.get(row.id) ?? 0;
      this.denCpu.delete(row.id);
      await store.usage.insert({
        sandbox_id: row.id, owner: row.owner, state, start_ms: row.meter_since, end_ms: now,
        vcpus: row.vcpus, memory_mb: row.memory_mb,
        host_cpu_ms: state === "cold" ? 0 : Math.round(this.openCpu(row, live) * 1000), den_cpu_ms: Math.round(den * 1000),
        stored_bytes: state === "cold" ? Number(row.stored_bytes ?? 0) : 0,
      });
    }
    if (live === undefined) this.lastCpu.delete(row.id);
    else this.lastCpu.set(row.id, live);
    return { meter_since: now, meter_cpu: live ?? 0 };
  }

  forget(id: string): void {
    this.denCpu.delete(id);
    this.lastCpu.delete(id);
  }
}
