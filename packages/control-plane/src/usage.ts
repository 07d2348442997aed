import { api } from "@den/protocol";
import type { UsageSegmentsTable } from "./db/db.js";

export interface Prices {
  vcpuSecond: number;
  gibSecond: number;
  gbMonth: number;
}

const GB_MONTH_BYTE_SECONDS = 1e9 * 30 * 86_400;

type Totals = Omit<api.UsageGroup, "key" | "cost" | "sandboxes" | "stored_gb_months">;

const zero = (): Totals => ({
  running_seconds: 0, warm_hibernated_seconds: 0, cold_hibernated_seconds: 0, vcpu_seconds: 0, memory_gib_seconds: 0,
  host_cpu_seconds: 0, den_cpu_seconds: 0, stored_byte_seconds: 0,
});

const round = (x: number, digits = 3) => Math.round(x * 10 ** digits) / 10 ** digits;

/**
 * Sums usage segments over [from, to), grouped. A segment that straddles an end counts
 * for the part inside; its CPU is prorated by that part (segments are at most the meter
 * interval long, so that is as fine as the meter).
 */
export function usageReport(opts: {
  segments: UsageSegmentsTable[];
  from: number;
  to: number;
  groupBy: string;
  /** The sandbox's owner and metadata (for grouping). */
  sandbox: (id: string) => { owner: string; metadata: Record<string, string> } | undefined;
  prices: Prices | null;
}): api.UsageReport {
  const groups = new Map<string | null, { t: Totals; ids: Set<string> }>();
  const keyOf = (s: UsageSegmentsTable): string | null => {
    if (opts.groupBy === "owner") return s.owner;
    if (opts.groupBy === "sandbox") return s.sandbox_id;
    return opts.sandbox(s.sandbox_id)?.metadata[opts.groupBy.slice("metadata.".length)] ?? null;
  };
  for (const s of opts.segments) {
    const overlapMs = Math.min(s.end_ms, opts.to) - Math.max(s.start_ms, opts.from);
    if (overlapMs <= 0) continue;
    const part = overlapMs / Math.max(1, s.end_ms - s.start_ms);
    const secs = overlapMs / 1000;
    const key = keyOf(s);
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { t: zero(), ids: new Set() }));
    const t = g.t;
    if (s.state !== "checkpoint") g.ids.add(s.sandbox_id);
    if (s.state === "running") {
      t.running_seconds += secs;
      t.vcpu_seconds += s.vcpus * secs;
      t.memory_gib_seconds += (s.memory_mb / 1024) * secs;
    } else if (s.state === "warm") t.warm_hibernated_seconds += secs;
    else if (s.state === "cold") t.cold_hibernated_seconds += secs;
    t.host_cpu_seconds += (Number(s.host_cpu_ms) / 1000) * part;
    t.den_cpu_seconds += (Number(s.den_cpu_ms) / 1000) * part;
    t.stored_byte_seconds += Number(s.stored_bytes) * secs;
  }
  const p = opts.prices;
  const out: api.UsageGroup[] = [...groups.entries()].map(([key, { t, ids }]) => {
    const gbMonths = t.stored_byte_seconds / GB_MONTH_BYTE_SECONDS;
    const cost = p
      ? { vcpu: t.vcpu_seconds * p.vcpuSecond, memory: t.memory_gib_seconds * p.gibSecond, storage: gbMonths * p.gbMonth }
      : null;
    return {
      key, sandboxes: ids.size,
      ...(Object.fromEntries(Object.entries(t).map(([k, v]) => [k, round(v)])) as Totals),
      stored_gb_months: round(gbMonths, 9),
      cost: cost ? { vcpu: round(cost.vcpu, 6), memory: round(cost.memory, 6), storage: round(cost.storage, 6), total: round(cost.vcpu + cost.memory + cost.storage, 6) } : null,
    };
  });
  out.sort((a, b) => (a.key ?? "").localeCompare(b.key ?? ""));
  return {
    from: new Date(opts.from).toISOString(), to: new Date(opts.to).toISOString(), group_by: opts.groupBy,
    prices: p ? { vcpu_second: p.vcpuSecond, gib_second: p.gibSecond, gb_month: p.gbMonth } : null,
    groups: out,
  };
}
