import { DenError, type HostAgent, type HostCreateSpec, type HostInventory } from "@den/protocol";
import type { HostRow, SandboxRow, Store } from "./db/store.js";

/** What a fan-out call got from one host: its answer, or why it had none. */
export type FromHost<T> = { host: HostAgent; ok: true; value: T } | { host: HostAgent; ok: false; error: unknown };

/** Why a host cannot be used now, or null if it can. */
export type Unusable = null | "unreachable" | "removed";

/**
 * The deployment's host agents, by instance id, as the database records them (the `hosts`
 * table): those given by configuration (the in-process host of single-node mode, or a
 * `--host-agent URL` list), and those that registered themselves (`den host run
 * --control-plane URL`) and hold a lease their heartbeats renew. A registered host whose
 * lease ran out is unreachable: it takes no new sandbox, its own are not judged, and calls
 * for them are `agent_unavailable`.
 *
 * A sandbox lives on the host its row names (`host_id`); what derives from it (a fork, a
 * warm wake, a restore of one of its checkpoints) goes to the same host while it is up.
 * A new sandbox is placed on the host with the most free memory that can hold it.
 */
export class HostPool {
  private readonly clients = new Map<string, HostAgent>();
  private readonly connecting = new Map<string, Promise<void>>();
  private rows = new Map<string, HostRow>();
  private readonly configured: HostAgent[];

  constructor(
    configured: readonly HostAgent[],
    private readonly opts: {
      store?: Store;
      /** A client for a registered host (HttpHostAgent.connect over mutual TLS, pinned to its id). */
      connect?: (address: string, id: string) => Promise<HostAgent>;
      /** Called once for every client this pool makes or is given (the control plane follows its events). */
      adopt?: (h: HostAgent) => void;
      now?: () => number;
    } = {},
  ) {
    this.configured = [...configured];
    for (const h of configured) {
      if (this.clients.has(h.instance)) throw new Error(`host agent ${h.instance} is given twice (${h.address})`);
      this.clients.set(h.instance, h);
      opts.adopt?.(h);
    }
  }

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  /** Records the configured hosts and loads the registered ones (at start). */
  async open(): Promise<void> {
    const store = this.opts.store;
    if (store) for (const h of this.configured) await store.hosts.upsertConfigured(h.instance, h.address, this.now());
    await this.refresh();
  }

  /** Reloads the hosts table and connects to registered hosts it has no client for yet. */
  async refresh(): Promise<void> {
    if (!this.opts.store) return;
    this.rows = new Map((await this.opts.store.hosts.rows()).map((r) => [r.id, r]));
    const pending: Promise<void>[] = [];
    for (const r of this.rows.values()) {
      if (r.managed !== "lease" || this.unusable(r.id) !== null) continue;
      const c = this.clients.get(r.id);
      if (c && c.address === r.address) continue;
      pending.push(this.connectTo(r));
    }
    await Promise.all(pending);
  }

  private connectTo(r: HostRow): Promise<void> {
    const key = `${r.id} ${r.address}`;
    let p = this.connecting.get(key);
    if (!p && this.opts.connect) {
      p = this.opts.connect(r.address, r.id).then((agent) => {
        if (agent.instance !== r.id) {
          agent.close();
          throw new Error(`the host agent at ${r.address} is ${agent.instance}, not ${r.id}`);
        }
        const prev = this.clients.get(r.id);
        // The same host anew (this replica's certificate was renewed): calls still using the old client get a minute to finish.
        if (prev && prev.address === r.address) setTimeout(() => prev.close(), 60_000).unref();
        else prev?.close();
        this.clients.set(r.id, agent);
        this.opts.adopt?.(agent);
      }).catch(() => undefined).finally(() => this.connecting.delete(key));
      this.connecting.set(key, p);
    }
    return p ?? Promise.resolve();
  }

  /** Lets go of a registered host's client (revoked or removed: nothing more is sent to it, its event stream ends). */
  drop(id: string): void {
    if (this.configured.some((h) => h.instance === id)) return;
    this.clients.get(id)?.close();
    this.clients.delete(id);
  }

  /** This replica's certificate was renewed: new clients for the registered hosts (calls in flight on the old ones run on). */
  async reconnect(): Promise<void> {
    await Promise.all([...this.rows.values()].filter((r) => r.managed === "lease" && this.unusable(r.id) === null).map((r) => this.connectTo(r)));
  }

  /** Why a host cannot take calls now (null: it can). A configured host is always tried. */
  unusable(id: string): Unusable {
    const r = this.rows.get(id);
    if (!r) return this.configured.some((h) => h.instance === id) ? null : "removed";
    if (r.state === "removed") return "removed";
    if (r.managed === "lease" && (r.lease_until ?? 0) <= this.now()) return "unreachable";
    return null;
  }

  /** Hosts that take calls now (with a client). */
  get all(): HostAgent[] {
    return [...this.clients.values()].filter((h) => this.unusable(h.instance) === null);
  }

  /** The first configured host: rows from before hosts were recorded live there. */
  get first(): HostAgent | undefined {
    return this.configured[0];
  }

  /**
   * Every host the database knows (for the host list), usable or not: the configured ones in
   * the order given, then registered ones oldest first. A configured host of an earlier
   * configuration is not one.
   */
  known(): HostRow[] {
    const given = this.configured.flatMap((h) => this.rows.get(h.instance) ?? []);
    return [...given, ...[...this.rows.values()].filter((r) => r.managed === "lease")];
  }

  /** A host by instance id (null: the first configured one). */
  get(instance: string | null): HostAgent {
    const id = instance ?? this.first?.instance;
    if (id === undefined) throw new DenError("agent_unavailable", "this sandbox's host is not recorded and no host agent is configured");
    const why = this.unusable(id);
    const h = this.clients.get(id);
    if (why === "unreachable") {
      const r = this.rows.get(id)!;
      throw new DenError("agent_unavailable", `host ${id} (${r.address}) has not renewed its lease for ${Math.round((this.now() - (r.heartbeat_at ?? r.registered_at)) / 1000)} s`);
    }
    if (why === "removed" || !h) throw new DenError("agent_unavailable", `host ${id} is not among this deployment's reachable host agents (${this.all.map((x) => x.instance).join(", ") || "none"})`);
    return h;
  }

  /** The host a sandbox lives on. */
  of(row: Pick<SandboxRow, "host_id">): HostAgent {
    return this.get(row.host_id);
  }

  /** Whether a sandbox's host takes calls now. */
  has(instance: string | null): boolean {
    const id = instance ?? this.first?.instance;
    return id !== undefined && this.clients.has(id) && this.unusable(id) === null;
  }

  /** Whether a host takes new sandboxes (up, not draining). */
  takesNew(h: HostAgent): boolean {
    return this.rows.get(h.instance)?.state !== "draining";
  }

  /**
   * Where a new sandbox of this spec goes: `prefer` if it can hold it, else the host with
   * the most free memory among those that can hold it now (draining hosts and `exclude`
   * left out); the most telling refusal if none can.
   */
  async place(spec: Omit<HostCreateSpec, "id">, opts: {
    prefer?: string | null; exclude?: string; reserved?: Map<string, number>; kind?: string;
    /** The template is in the shared store: a host that lacks it may be chosen, and pulls it first. */
    pull?: (h: HostAgent) => Promise<void>;
    /** This host or none (where the sandbox's volumes are: a volume's image lives on one host). */
    only?: string | null;
  } = {}): Promise<HostAgent> {
    const pulls = new Set<string>();
    const check = async (h: HostAgent) => {
      try {
        await h.vms.checkCreate(spec);
      } catch (e) {
        if (!(opts.pull && e instanceof DenError && e.code === "template_not_found")) throw e;
        pulls.add(h.instance);
      }
    };
    const chosen = async (h: HostAgent) => {
      if (pulls.has(h.instance)) await opts.pull!(h);
      return h;
    };
    // `kind` (a HostKind's JSON): only hosts of that kind (a host of unknown kind, configured, is tried).
    const fit = (h: HostAgent) => this.takesNew(h) && h.instance !== opts.exclude && (opts.kind === undefined || (this.rows.get(h.instance)?.kind ?? opts.kind) === opts.kind)
      && (!opts.only || h.instance === opts.only);
    let candidates = this.all.filter(fit);
    if (!candidates.length) {
      // A host may have registered through another replica a moment ago.
      await this.refresh();
      candidates = this.all.filter(fit);
    }
    if (!candidates.length) {
      if (opts.only) throw new DenError("capacity_exhausted", `the host of its volumes (${opts.only}) cannot take a sandbox now${opts.kind ? ` (or is not of the kind its snapshot was made on)` : ""}`);
      throw new DenError("capacity_exhausted", opts.kind ? `no host agent of the kind this snapshot was made on (${opts.kind}) can take it now` : "no host agent can take a sandbox now (none is up and open)");
    }
    const preferred = opts.reserved?.size ? undefined : candidates.find((h) => h.instance === opts.prefer);
    if (preferred) {
      try {
        await check(preferred);
        return await chosen(preferred);
      } catch {
        /* any other */
      }
    }
    if (candidates.length === 1 && !opts.reserved?.size) {
      await check(candidates[0]!);
      return chosen(candidates[0]!);
    }
    // `reserved`: memory already promised on a host by this placement's earlier picks (a fork's other children).
    const fits = await this.over(candidates, async (h) => {
      await check(h);
      const { capacity, used } = (await h.inventory()).capacity;
      const free = capacity.memoryMb - used.memoryMb - (opts.reserved?.get(h.instance) ?? 0);
      if (free < (spec.memoryMb ?? 0)) throw new DenError("capacity_exhausted", `host ${h.instance} has room now, but not beside the other sandboxes placed there with it`);
      return free;
    });
    const ok = fits.filter((f): f is Extract<FromHost<number>, { ok: true }> => f.ok).sort((a, b) => b.value - a.value);
    if (ok.length) return chosen(ok[0]!.host);
    const refusal = fits.find((f) => !f.ok && f.error instanceof DenError && f.error.code !== "agent_unavailable");
    throw (refusal as { error: unknown } | undefined)?.error ?? (fits[0] as { error: unknown }).error;
  }

  /** Calls every usable host at once; one that fails does not stop the others. */
  each<T>(fn: (h: HostAgent) => Promise<T>): Promise<Array<FromHost<T>>> {
    return this.over(this.all, fn);
  }

  private over<T>(hosts: HostAgent[], fn: (h: HostAgent) => Promise<T>): Promise<Array<FromHost<T>>> {
    return Promise.all(hosts.map(async (host): Promise<FromHost<T>> => {
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

  close(): void {
    for (const [id, h] of this.clients) if (!this.configured.includes(h)) {
      h.close();
      this.clients.delete(id);
    }
  }
}
