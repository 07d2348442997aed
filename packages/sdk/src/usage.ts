/** Metered usage: what sandboxes held and used, and what it costs. */
import { api } from "@den/protocol";
import { DenClient, type DenClientOptions, type RequestOptions } from "./client.js";

/**
 * One group of a usage report (camelCased `UsageGroup`): an owner, a sandbox, or a
 * metadata value, depending on `groupBy`.
 *
 * @example
 * ```ts
 * const [g] = (await Usage.get({ groupBy: "metadata.task_id" })).groups;
 * console.log(g.key, g.runningSeconds, g.hostCpuSeconds, g.cost?.total);
 * ```
 */
export interface UsageGroup {
  key: string | null;
  sandboxes: number;
  runningSeconds: number;
  warmHibernatedSeconds: number;
  coldHibernatedSeconds: number;
  vcpuSeconds: number;
  memoryGibSeconds: number;
  hostCpuSeconds: number;
  denCpuSeconds: number;
  storedByteSeconds: number;
  storedGbMonths: number;
  cost: { vcpu: number; memory: number; storage: number; total: number } | null;
}

/**
 * A usage report for a period.
 *
 * @example
 * ```ts
 * const r: UsageReport = await Usage.get({ from: new Date(Date.now() - 3600_000) });
 * ```
 */
export interface UsageReport {
  from: Date;
  to: Date;
  groupBy: string;
  prices: { vcpuSecond: number; gibSecond: number; gbMonth: number } | null;
  groups: UsageGroup[];
}

/**
 * Options of {@link Usage.get}.
 *
 * @example
 * ```ts
 * const opts: UsageOptions = { groupBy: "owner", from: new Date("2026-11-01") };
 * ```
 */
export interface UsageOptions extends DenClientOptions, RequestOptions {
  /** Start of the period (default: 24 hours before `to`). */
  from?: Date;
  /** End of the period (default: now). */
  to?: Date;
  /** `"sandbox"` (default), `"owner"`, or `"metadata.<key>"`. */
  groupBy?: string;
  /** Admin keys only: one owner's usage. */
  owner?: string;
}

function toGroup(g: api.UsageGroup): UsageGroup {
  return {
    key: g.key, sandboxes: g.sandboxes, runningSeconds: g.running_seconds, warmHibernatedSeconds: g.warm_hibernated_seconds,
    coldHibernatedSeconds: g.cold_hibernated_seconds, vcpuSeconds: g.vcpu_seconds, memoryGibSeconds: g.memory_gib_seconds,
    hostCpuSeconds: g.host_cpu_seconds, denCpuSeconds: g.den_cpu_seconds, storedByteSeconds: g.stored_byte_seconds,
    storedGbMonths: g.stored_gb_months, cost: g.cost,
  };
}

/**
 * The server's metering: seconds running, warm- and cold-hibernated; vCPU- and
 * GiB-seconds reserved while running; host CPU its VMs used and CPU Den spent for them;
 * bytes kept in the snapshot store; and a cost where the server has a price table.
 *
 * @example
 * ```ts
 * const report = await Usage.get({ groupBy: "metadata.task_id" });
 * for (const g of report.groups) console.log(g.key, g.runningSeconds.toFixed(0), "s running");
 * ```
 */
export const Usage = {
  /**
   * Usage over a period, grouped.
   *
   * @example
   * ```ts
   * const today = await Usage.get({ from: new Date(new Date().setHours(0, 0, 0, 0)), groupBy: "owner" });
   * ```
   */
  async get(opts: UsageOptions = {}): Promise<UsageReport> {
    const client = new DenClient(opts);
    const q = new URLSearchParams();
    if (opts.from) q.set("from", opts.from.toISOString());
    if (opts.to) q.set("to", opts.to.toISOString());
    if (opts.groupBy) q.set("group_by", opts.groupBy);
    if (opts.owner) q.set("owner", opts.owner);
    const qs = q.toString() ? `?${q}` : "";
    const r = await client.json({ method: "GET", path: `/v1/usage${qs}`, signal: opts.signal }, api.UsageReport.parse);
    return {
      from: new Date(r.from), to: new Date(r.to), groupBy: r.group_by,
      prices: r.prices ? { vcpuSecond: r.prices.vcpu_second, gibSecond: r.prices.gib_second, gbMonth: r.prices.gb_month } : null,
      groups: r.groups.map(toGroup),
    };
  },
};
