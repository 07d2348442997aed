import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { api } from "@den/protocol";
import type { host } from "@den/protocol";

type CapacityReport = host.CapacityReport;
import type { Store } from "./db/store.js";

/**
 * Den's Prometheus metrics: lifecycle latencies, transitions and reaper actions (counted as
 * they happen), and the state of things (sandboxes by state, store bytes, capacity) read
 * at scrape time, so they never drift from the database.
 */
export class Metrics {
  readonly registry = new Registry();

  /** Seconds per lifecycle operation, by mode (warm/cold) where it has one, and outcome. */
  readonly operations = new Histogram({
    name: "den_operation_duration_seconds", help: "Duration of lifecycle operations",
    labelNames: ["op", "mode", "outcome"] as const, buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180],
    registers: [this.registry],
  });

  readonly transitions = new Counter({
    name: "den_transitions_total", help: "Sandbox state transitions, by the state entered and why",
    labelNames: ["state", "reason"] as const, registers: [this.registry],
  });

  readonly reaperActions = new Counter({
    name: "den_reaper_actions_total", help: "What the TTL and idle reapers did (destroyed, hibernated), by reason",
    labelNames: ["action", "reason"] as const, registers: [this.registry],
  });

  constructor(store: Store, capacityOf: () => Promise<CapacityReport>) {
    collectDefaultMetrics({ register: this.registry, prefix: "den_" });
    const reg = [this.registry];
    new Gauge({
      name: "den_sandboxes", help: "Sandboxes by state (destroyed: all time)", labelNames: ["state"] as const, registers: reg,
      async collect() {
        const counts = await store.sandboxes.countByState();
        for (const s of api.SandboxState.options) this.set({ state: s }, counts[s] ?? 0);
      },
    });
    new Gauge({
      name: "den_store_bytes", help: "Bytes in the snapshot store (cold-hibernated sandboxes and checkpoints)", registers: reg,
      async collect() {
        this.set(await store.snapshots.storedBytes());
      },
    });
    const capacity = (name: string, help: string, pick: (c: CapacityReport) => { capacity: number; used: number }) =>
      new Gauge({
        name, help, labelNames: ["kind"] as const, registers: reg,
        async collect() {
          const v = pick(await capacityOf());
          this.set({ kind: "capacity" }, v.capacity);
          this.set({ kind: "used" }, v.used);
        },
      });
    new Gauge({
      name: "den_host_cert_expiry_days", help: "Days until each host's newest unrevoked certificate of the deployment's CA expires", labelNames: ["host"] as const, registers: reg,
      async collect() {
        this.reset();
        for (const [host, notAfter] of await store.machineCerts.expiries("host")) this.set({ host }, (notAfter - Date.now()) / 86_400_000);
      },
    });
    capacity("den_host_memory_mb", "Guest memory the hosts may hold, and what running and warm sandboxes hold", (c) => ({ capacity: c.capacity.memoryMb, used: c.used.memoryMb }));
    capacity("den_host_vcpus", "vCPUs the hosts may hold, and what running and warm sandboxes hold", (c) => ({ capacity: c.capacity.vcpus, used: c.used.vcpus }));
  }

  /** Times `fn` as operation `op`. */
  async time<T>(op: string, mode: string, fn: () => Promise<T>): Promise<T> {
    const end = this.operations.startTimer({ op, mode });
    try {
      const r = await fn();
      end({ outcome: "ok" });
      return r;
    } catch (e) {
      end({ outcome: "error" });
      throw e;
    }
  }

  /** Counts a transition; those the reapers made (TTL, idle) are reaper actions too. */
  transition(state: string, reason: string): void {
    this.transitions.inc({ state, reason });
    if (reason === "ttl" || reason === "idle") this.reaperActions.inc({ action: state, reason });
  }
}
