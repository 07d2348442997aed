import { DenError, host, type HostAgent } from "@den/protocol";
import type { SandboxRow } from "./db/store.js";
import { modeOf, type Ctx } from "./context.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Serializer } from "./serializer.js";
import { VolumeMoves } from "./ops/volume-move.js";
import { volumeStore } from "./volumes.js";

export interface RegistryConfig {
  /** How long a heartbeat's lease lasts. */
  leaseMs: number;
  /** After the lease ran out, how long before the host's running and warm sandboxes are declared lost. */
  graceMs: number;
}

/**
 * Hosts that register themselves: heartbeats (each renews the host's lease), the loss of a
 * host that stopped renewing (past the grace period its running, warm and disk-hibernated
 * sandboxes are `lost` with reason `host_lost`; cold ones are in the store and untouched),
 * its return (reconciled against the database, which wins: VMs of sandboxes that were
 * declared lost or moved are destroyed), drains and removals. Every decision that must be
 * made once is a compare-and-set on the host's row, so any number of replicas can run this.
 */
export class HostRegistry {
  private draining = new Map<string, Promise<void>>();
  /** Silence counts only while this process listens: after a control-plane outage every host gets a full lease and grace to be heard from. */
  private readonly startedAt: number;

  constructor(
    private readonly ctx: Ctx,
    private readonly queue: Serializer,
    private readonly lifecycle: Lifecycle,
    private readonly config: RegistryConfig,
    /** Makes a host that is heard from again agree with the database. */
    private readonly reconcile: (h: HostAgent) => Promise<void>,
  ) {
    this.startedAt = ctx.clock.now();
  }

  async heartbeat(hb: host.Heartbeat): Promise<host.HeartbeatReply> {
    const { store, clock, hosts, log } = this.ctx;
    if (hb.protocol !== host.PROTOCOL_VERSION) throw new DenError("agent_protocol_error", `host ${hb.id} speaks protocol ${hb.protocol}, this control plane ${host.PROTOCOL_VERSION}`);
    // A revoked host is gone for good: its lease is never renewed again (whatever link it comes over).
    if (await store.machineCerts.revoked("host", hb.id)) throw new DenError("forbidden", `host ${hb.id} was revoked`);
    const now = clock.now();
    const { before, after } = await store.hosts.heartbeat({ id: hb.id, address: hb.address, kind: JSON.stringify(hb.kind), capacity: JSON.stringify(hb.capacity), starting: hb.starting === true }, now, now + this.config.leaseMs);
    if (after.state === "removed") return { leaseMs: this.config.leaseMs, state: "removed" };
    const back = !before || hb.starting === true || (before.lease_until ?? 0) <= now || before.address !== hb.address || before.lost_at !== null;
    if (back) {
      await hosts.refresh();
      if (before) log.info({ host: hb.id, address: hb.address }, `host ${hb.id} is back: reconciling it against the database`);
      // Reconciling is idempotent, so whichever replica hears the host first does it; a host back
      // within its grace needs it too (its VMs may be fenced), and a new one has its templates published.
      if (before?.lost_at !== null && before?.lost_at !== undefined) await store.hosts.clearLost(hb.id);
      void this.reconcileSoon(hb.id);
    }
    return { leaseMs: this.config.leaseMs, state: after.state as host.HeartbeatReply["state"] };
  }

  private async reconcileSoon(id: string): Promise<void> {
    try {
      await this.reconcile(this.ctx.hosts.get(id));
    } catch (err) {
      this.ctx.log.warn({ err, host: id }, `host ${id} could not be reconciled; the next heartbeat after its lease tries again`);
    }
  }

  /**
   * One pass over registered hosts: those whose lease ran out more than the grace period ago
   * have their sandboxes declared lost (sandboxes busy with an operation are left to it: it
   * fails against the unreachable host, and a later pass takes them).
   */
  async sweep(): Promise<void> {
    // The host view is refreshed every second by every replica (server.ts): no reload here.
    const { store, clock, hosts, log } = this.ctx;
    const now = clock.now();
    if (now - this.startedAt < this.config.leaseMs + this.config.graceMs) return;
    for (const r of hosts.known()) {
      if (r.managed !== "lease" || r.lease_until === null || r.lease_until + this.config.graceMs > now) continue;
      if (await store.hosts.claimLost(r.id, now - this.config.graceMs, now)) log.warn({ host: r.id }, `host ${r.id} (${r.address}) missed its lease and the grace period: its running and warm sandboxes are lost`);
      for (const row of await store.sandboxes.heldOn(r.id)) {
        if (row.op_id) continue;
        await this.declareLost(row.id).catch((err: unknown) => log.warn({ err, sandbox: row.id }, "could not mark a sandbox of a lost host lost"));
      }
    }
  }

  /** What still holds something on a host (a VM, a warm snapshot, a disk). */
  private held(id: string): Promise<SandboxRow[]> {
    return this.ctx.store.sandboxes.heldOn(id);
  }

  /**
   * Drain: the host takes no new sandbox, each of its running, warm- and disk-hibernated
   * sandboxes is cold-hibernated so it can wake on another host, and then its volumes are
   * parked in the store (so a sandbox that mounts one wakes elsewhere). Returns how many
   * sandboxes and volumes are left on it now (the drain goes on in the background; asking
   * again reports progress).
   */
  async drain(id: string): Promise<number> {
    const { store } = this.ctx;
    const row = await store.hosts.get(id);
    if (!row || row.state === "removed") throw new DenError("not_found", `host ${id} is not registered`);
    if (row.state !== "draining") await store.hosts.setState(id, "draining");
    await this.ctx.hosts.refresh();
    if (!this.draining.has(id)) {
      const run = this.drainOnce(id).finally(() => this.draining.delete(id));
      this.draining.set(id, run);
    }
    return (await this.held(id)).length + (await volumeStore(store).onHost(id)).length;
  }

  private async drainOnce(id: string): Promise<void> {
    for (const row of await this.held(id)) {
      try {
        if (row.op_id) continue;
        if (row.state === "hibernated" && modeOf(row) === "disk") await this.lifecycle.wake(row.id, "restart");
        await this.lifecycle.hibernate(row.id, "restart", "cold");
      } catch (err) {
        this.ctx.log.warn({ err, sandbox: row.id, host: id }, "drain: a sandbox could not be cold-hibernated; the next drain call tries again");
      }
    }
    await new VolumeMoves(this.ctx).parkAll(id);
  }

  /** Ends a drain: the host takes new sandboxes again. */
  async undrain(id: string): Promise<void> {
    const row = await this.ctx.store.hosts.get(id);
    if (!row || row.state === "removed") throw new DenError("not_found", `host ${id} is not registered`);
    await this.ctx.store.hosts.setState(id, "up");
    await this.ctx.hosts.refresh();
  }

  /** Takes a host out for good: only once nothing lives on it (drain it first; a lost host's sandboxes hold nothing). */
  async remove(id: string): Promise<void> {
    const row = await this.ctx.store.hosts.get(id);
    if (!row || row.state === "removed") throw new DenError("not_found", `host ${id} is not registered`);
    const held = await this.held(id);
    if (held.length) throw new DenError("invalid_state", `host ${id} still holds ${held.length} sandbox(es) (${held.slice(0, 5).map((r) => r.id).join(", ")}): drain it first`);
    const vols = await volumeStore(this.ctx.store).onHost(id);
    if (vols.length) throw new DenError("invalid_state", `host ${id} still has ${vols.length} volume(s) (${vols.slice(0, 5).map((v) => v.id).join(", ")}): drain it first (that parks them in the store)`);
    await this.ctx.store.hosts.setState(id, "removed");
    // Removed is for good: its certificates are revoked too (a new host joins under a new id).
    await this.ctx.store.machineCerts.revoke("host", id, this.ctx.clock.now());
    this.ctx.hosts.drop(id);
    await this.ctx.hosts.refresh();
  }

  /**
   * Revokes a host: its certificates are refused from now on (heartbeats, renewals), its lease
   * ends now so no call goes to it, and after the grace period its sandboxes are lost and
   * recoverable elsewhere, as a silent host's are. Returns how many certificates it revoked.
   */
  async revoke(id: string): Promise<number> {
    const { store, clock } = this.ctx;
    const row = await store.hosts.get(id);
    const n = await store.machineCerts.revoke("host", id, clock.now());
    if (!row && n === 0) throw new DenError("not_found", `host ${id} is not registered and has no certificate`);
    if (row) await store.hosts.endLease(id, clock.now());
    this.ctx.hosts.drop(id);
    await this.ctx.hosts.refresh();
    this.ctx.log.warn({ host: id }, `host ${id} was revoked (${n} certificate(s)): no more calls go to it`);
    return n;
  }

  /**
   * A sandbox of a lost host: `lost` (reason `host_lost`), recoverable from its newest
   * checkpoint onto another host. Nothing is asked of its host (it does not answer); its VM,
   * if the host comes back, is destroyed by the reconcile then.
   */
  private async declareLost(id: string): Promise<void> {
    await this.queue.run(id, async () => {
      const { store, ops } = this.ctx;
      const cur = await store.sandboxes.get(id);
      if (!cur || cur.op_id || cur.state === "destroyed" || cur.state === "lost" || cur.state === "error") return;
      if (cur.state === "hibernated" && modeOf(cur) === "cold") return;
      const op = ops.newOp("destroy", id, "host_lost", { lost: true, host: cur.host_id });
      await ops.begin(cur, op);
      await ops.finish(op, id, { state: "lost", reason: "host_lost", data: { host: cur.host_id } });
    });
  }
}
