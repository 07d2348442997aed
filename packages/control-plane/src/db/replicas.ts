
import { Repo } from "./repo.js";

/** Control-plane replicas and their leases on once-only work. */
export class ReplicasRepo extends Repo {
  async renew(id: string, at: number, until: number): Promise<void> {
    await this.db.insertInto("replicas").values({ id, started_at: at, heartbeat_at: at, lease_until: until })
      .onConflict((oc) => oc.column("id").doUpdateSet({ heartbeat_at: at, lease_until: until })).execute();
  }

  /** Ids of replicas whose lease runs at `now`. */
  async live(now: number): Promise<Set<string>> {
    return new Set((await this.db.selectFrom("replicas").select("id").where("lease_until", ">", now).execute()).map((r) => r.id));
  }

  /** A clean stop: its lease and its work leases end now, so another replica takes over at once. */
  async retire(id: string): Promise<void> {
    await this.db.updateTable("replicas").set({ lease_until: 0 }).where("id", "=", id).execute();
    await this.db.updateTable("leases").set({ until: 0 }).where("holder", "=", id).execute();
  }

  /** Takes (or keeps) the lease on a kind of work: true if `holder` holds it until `until`. */
  async claimLease(name: string, holder: string, now: number, until: number): Promise<boolean> {
    await this.db.insertInto("leases").values({ name, holder, until: 0 }).onConflict((oc) => oc.column("name").doNothing()).execute();
    const r = await this.db.updateTable("leases").set({ holder, until }).where("name", "=", name)
      .where((eb) => eb.or([eb("holder", "=", holder), eb("until", "<=", now)])).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }
}
