import type { GuestMetrics, e2bApi } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import type { SandboxRow } from "@den/control-plane";

/** Samples kept per sandbox: an hour at the default interval. */
const KEPT = 720;
/** The most sandboxes sampled in one pass (the rest wait for the next one). */
const PER_PASS = 256;
/** A guest that does not answer in this long is skipped this pass. */
const SAMPLE_MS = 3000;

const toMetric = (m: GuestMetrics): e2bApi.SandboxMetric => ({
  timestamp: new Date(m.timestampMs).toISOString(), timestampUnix: Math.floor(m.timestampMs / 1000),
  cpuCount: m.cpuCount, cpuUsedPct: Math.round(m.cpuUsedPct * 100) / 100,
  memUsed: m.memUsedBytes, memTotal: m.memTotalBytes, memCache: m.memCacheBytes, diskUsed: m.diskUsedBytes, diskTotal: m.diskTotalBytes,
});

/**
 * The series `GET /sandboxes/{id}/metrics` answers from: what each running E2B sandbox's
 * guest reports of its CPU, memory and disk, sampled every pass, the last hour kept in
 * memory (a restart starts the series afresh: it is telemetry, not state).
 */
export class MetricsSeries {
  private series = new Map<string, e2bApi.SandboxMetric[]>();

  constructor(private readonly cp: ControlPlane) {}

  /** One sample of every running sandbox made through the E2B API; sandboxes that are gone are forgotten. */
  async pass(): Promise<void> {
    const live = (await this.cp.store.sandboxes.live()).filter((r) => r.surface === "e2b");
    const ids = new Set(live.map((r) => r.id));
    for (const id of this.series.keys()) if (!ids.has(id)) this.series.delete(id);
    for (const row of live.filter((r) => r.state === "running" && !r.op_id).slice(0, PER_PASS)) await this.sampleRow(row).catch(() => undefined);
  }

  /** Reads the guest now (without waking it or counting as activity) and keeps the reading. */
  async sample(id: string): Promise<e2bApi.SandboxMetric> {
    const row = await this.cp.sandbox(id);
    if (!row || row.state !== "running") throw new Error(`sandbox ${id} is not running`);
    return this.sampleRow(row);
  }

  private async sampleRow(row: SandboxRow): Promise<e2bApi.SandboxMetric> {
    const id = row.id;
    const guest = this.cp.guests.peek(row);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("the guest did not report its metrics in time")), SAMPLE_MS)));
    try {
      const m = toMetric(await Promise.race([guest.metrics(), late]));
      const list = this.series.get(id) ?? [];
      list.push(m);
      if (list.length > KEPT) list.splice(0, list.length - KEPT);
      this.series.set(id, list);
      return m;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Samples between `start` and `end` (unix seconds, inclusive); a running sandbox with none yet is sampled now (a paused one has none). */
  async range(id: string, start?: number, end?: number): Promise<e2bApi.SandboxMetric[]> {
    let list = this.series.get(id) ?? [];
    if (!list.length) {
      const now = await this.sample(id).catch(() => undefined);
      list = now ? [now] : [];
    }
    return list.filter((m) => (start === undefined || m.timestampUnix >= start) && (end === undefined || m.timestampUnix <= end));
  }

  /** The latest sample of each of `ids` that has one. */
  latest(ids: string[]): Record<string, e2bApi.SandboxMetric> {
    const out: Record<string, e2bApi.SandboxMetric> = {};
    for (const id of ids) {
      const m = this.series.get(id)?.at(-1);
      if (m) out[id] = m;
    }
    return out;
  }
}
