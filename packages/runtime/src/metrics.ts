import { DenError, type GuestMetrics, type SysMetrics } from "@den/protocol";
import type { AgentClient } from "./agent-client.js";

const COUNTS = [
  "timestamp_ms", "cpu_count", "cpu_total_ticks", "cpu_busy_ticks", "mem_total_kb", "mem_available_kb", "mem_cache_kb", "disk_total_bytes", "disk_used_bytes",
] as const satisfies ReadonlyArray<keyof SysMetrics>;

/** The previous CPU reading of one sandbox, so each reading is the busy share since the last. */
export class CpuMeter {
  private last = { busy: 0, total: 0 };
  private lastPct = 0;

  /** Percent of all CPUs busy since the previous sample (since boot for the first). */
  sample(busy: number, total: number): number {
    // Counters that went back are another boot (a VM restored elsewhere): count from zero.
    const prev = total >= this.last.total && busy >= this.last.busy ? this.last : { busy: 0, total: 0 };
    const ticks = total - prev.total;
    if (ticks <= 0) return this.lastPct; // not a tick since: the same reading
    this.last = { busy, total };
    this.lastPct = Math.round(Math.min(100, Math.max(0, (100 * (busy - prev.busy)) / ticks)) * 100) / 100;
    return this.lastPct;
  }
}

/** Reads the guest's counters (checked: the guest is not trusted) and turns them into GuestMetrics. */
export async function readMetrics(agent: AgentClient, meter: CpuMeter): Promise<GuestMetrics> {
  agent.requireFeature("sys.metrics", "metrics");
  const m = await agent.request("sys.metrics", {});
  for (const k of COUNTS) {
    if (!Number.isSafeInteger(m[k]) || m[k] < 0) throw new DenError("agent_protocol_error", `sys.metrics: ${k} is not a count (${String(m[k]).slice(0, 32)})`);
  }
  const memTotal = m.mem_total_kb * 1024;
  const memAvailable = Math.min(m.mem_available_kb * 1024, memTotal);
  return {
    timestampMs: m.timestamp_ms,
    cpuCount: Math.max(1, m.cpu_count),
    cpuUsedPct: meter.sample(Math.min(m.cpu_busy_ticks, m.cpu_total_ticks), m.cpu_total_ticks),
    memTotalBytes: memTotal,
    memUsedBytes: memTotal - memAvailable,
    memCacheBytes: Math.min(m.mem_cache_kb * 1024, memTotal),
    diskTotalBytes: m.disk_total_bytes,
    diskUsedBytes: Math.min(m.disk_used_bytes, m.disk_total_bytes),
  };
}
