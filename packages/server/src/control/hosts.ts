import { DenError, type HostAgent, type HostCreateSpec, type HostInventory } from "@den/protocol";
import type { SandboxRow } from "../store.js";

/** What a fan-out call got from one host: its answer, or why it had none. */
export type FromHost<T> = { host: HostAgent; ok: true; value: T } | { host: HostAgent; ok: false; error: unknown };

/**
 * The host agents this control plane is given (one in single-node mode; a static list
 * with `--host-agent URL,URL`), by instance id. A sandbox lives on the host its row names
 * (`host_id`); what derives from it (a fork, a warm or cold wake, a restore of one of its
 * checkpoints) goes to the same host, because that host holds its warm snapshot, its
 * copy-on-write parent and the template version its stored snapshots were made from.
 * Only a new sandbox is placed: on the host with the most free memory that can hold it.
 */
export class HostPool {
  private readonly byId: Map<string, HostAgent>;

  constructor(readonly all: readonly HostAgent[]) {
    if (!all.length) throw new Error("a control plane needs at least one host agent");
    this.byId = new Map();
    for (const h of all) {
      if (this.byId.has(h.instance)) throw new Error(`host agent ${h.instance} is given twice (${h.address})`);
      this.byId.set(h.instance, h);
    }
  }

  /** The first host given: rows from before hosts were recorded live there. */
  get first(): HostAgent {
    return this.all[0]!;
  }

  /** A host by instance id (null: the first one). */
  get(instance: string | null): HostAgent {
    if (instance === null) return this.first;
    const h = this.byId.get(instance);
    if (!h) throw new DenError("agent_unavailable", `host ${instance} is not among this control plane's host agents (${[...this.byId.keys()].join(", ")})`);
    return h;
  }

  /** The host a sandbox lives on. */
  of(row: Pick<SandboxRow, "host_id">): HostAgent {
    return this.get(row.host_id);
  }

  has(instance: string | null): boolean {
    return instance === null || this.byId.has(instance);
  }

  /**
   * Where a new sandbox of this spec goes: the host with the most free memory among those
   * that can hold it now; the first host's refusal if none can (the reason a user should see).
   */
  async place(spec: Omit<HostCreateSpec, "id">): Promise<HostAgent> {
    if (this.all.length === 1) {
      await this.first.checkCreate(spec);
      return this.first;
    }
    const fits = await this.each(async (h) => {
      await h.checkCreate(spec);
      const { capacity, used } = await h.capacity();
      return capacity.memoryMb - used.memoryMb;
    });
    const ok = fits.filter((f): f is Extract<FromHost<number>, { ok: true }> => f.ok).sort((a, b) => b.value - a.value);
    if (ok.length) return ok[0]!.host;
    const refusal = fits.find((f) => !f.ok && f.error instanceof DenError && f.error.code !== "agent_unavailable");
    throw (refusal as { error: unknown } | undefined)?.error ?? (fits[0] as { error: unknown }).error;
  }

  /** Calls every host at once; one that fails does not stop the others. */
  each<T>(fn: (h: HostAgent) => Promise<T>): Promise<Array<FromHost<T>>> {
    return Promise.all(this.all.map(async (host): Promise<FromHost<T>> => {
      try {
        return { host, ok: true, value: await fn(host) };
      } catch (error) {
        return { host, ok: false, error };
      }
    }));
  }

  /** Every reachable host's inventory (an unreachable one is left out: its sandboxes are not judged). */
  async inventories(): Promise<Array<{ host: HostAgent; inventory: HostInventory }>> {
    return (await this.each((h) => h.inventory())).flatMap((r) => (r.ok ? [{ host: r.host, inventory: r.value }] : []));
  }

  /** Each VM's CPU seconds on every reachable host. */
  async cpu(): Promise<Map<string, number | undefined>> {
    const out = new Map<string, number | undefined>();
    for (const { inventory } of await this.inventories()) for (const v of inventory.vms) out.set(v.id, v.cpuSeconds ?? undefined);
    return out;
  }
}
