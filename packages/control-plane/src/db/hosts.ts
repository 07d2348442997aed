import type { host } from "@den/protocol";
import type { HostRow } from "./rows.js";
import { Repo } from "./repo.js";

/** Host agents: configured and registered, their heartbeats, leases and loss. */
export class HostsRepo extends Repo {
  async rows(): Promise<HostRow[]> {
    return this.db.selectFrom("hosts").selectAll().where("state", "!=", "removed").orderBy("registered_at").orderBy("id").execute();
  }

  async get(id: string): Promise<HostRow | undefined> {
    return this.db.selectFrom("hosts").selectAll().where("id", "=", id).executeTakeFirst();
  }

  /** Ends a host's lease now (a revoked host): it takes no calls, and is lost after the grace period as a silent one is. */
  async endLease(id: string, at: number): Promise<void> {
    await this.db.updateTable("hosts").set({ lease_until: at }).where("id", "=", id).where("managed", "=", "lease").where("lease_until", ">", at).execute();
  }

  /** A host given by configuration: recorded (no lease), its address kept current. */
  async upsertConfigured(id: string, address: string, at: number): Promise<void> {
    await this.db.insertInto("hosts").values({ id, address, managed: "config", state: "up", kind: null, capacity: null, registered_at: at, heartbeat_at: null, lease_until: null, lost_at: null })
      .onConflict((oc) => oc.column("id").doUpdateSet({ address, managed: "config", state: "up", lease_until: null, lost_at: null })).execute();
  }

  /**
   * A heartbeat: the host's row created or renewed (a removed host stays removed unless it starts anew). Returns
   * the row as it was before, so the caller can tell a host coming back from one that never left.
   */
  async heartbeat(hb: { id: string; address: string; kind: string; capacity: string; starting: boolean }, at: number, leaseUntil: number): Promise<{ before: HostRow | undefined; after: HostRow }> {
    return this.transaction(async (s) => {
      const before = await s.get(hb.id);
      if (!before) {
        await s.db.insertInto("hosts").values({ id: hb.id, address: hb.address, managed: "lease", state: "up", kind: hb.kind, capacity: hb.capacity, registered_at: at, heartbeat_at: at, lease_until: leaseUntil, lost_at: null })
          .onConflict((oc) => oc.column("id").doNothing()).execute();
      } else if (before.state !== "removed" || hb.starting) {
        // A host agent that starts anew takes sandboxes again: after a drain for its stop, or
        // after it was removed (a removed one that merely keeps beating stays out).
        await s.db.updateTable("hosts").set({
          address: hb.address, managed: "lease", kind: hb.kind, capacity: hb.capacity, heartbeat_at: at, lease_until: leaseUntil,
          ...(hb.starting && before.state !== "up" ? { state: "up", lost_at: null } : {}),
        }).where("id", "=", hb.id).execute();
      }
      return { before, after: (await s.get(hb.id))! };
    });
  }

  /** Claims the declaration of a host's loss: true for exactly one caller, once its lease ended before `deadline`. */
  async claimLost(id: string, deadline: number, at: number): Promise<boolean> {
    const r = await this.db.updateTable("hosts").set({ lost_at: at }).where("id", "=", id).where("managed", "=", "lease")
      .where("lost_at", "is", null).where("lease_until", "<", deadline).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Heard from again: its next loss is a new one. True for the one caller that cleared it. */
  async clearLost(id: string): Promise<boolean> {
    const r = await this.db.updateTable("hosts").set({ lost_at: null }).where("id", "=", id).where("lost_at", "is not", null).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async setState(id: string, state: "up" | "draining" | "removed"): Promise<void> {
    await this.db.updateTable("hosts").set({ state }).where("id", "=", id).execute();
  }
}
