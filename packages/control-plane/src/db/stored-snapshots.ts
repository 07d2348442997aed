import { DenError, type host } from "@den/protocol";
import { digestsJson, type StoredSnapshotRow } from "./rows.js";
import { Repo } from "./repo.js";

/** The snapshot store's catalog: a row per stored snapshot before its upload starts, released before the collector deletes it; owners' stored bytes. */
export class StoredSnapshotsRepo extends Repo {
  async insert(row: StoredSnapshotRow): Promise<void> {
    await this.db.insertInto("stored_snapshots").values(row).execute();
  }

  async get(id: string): Promise<StoredSnapshotRow | undefined> {
    return this.db.selectFrom("stored_snapshots").selectAll().where("id", "=", id).executeTakeFirst();
  }

  /** Its upload is whole: `digests`, what the host said it put (the record its downloads are checked against). */
  async complete(id: string, bytes: number, digests: host.StoredDigests | undefined): Promise<void> {
    await this.db.updateTable("stored_snapshots").set({ state: "complete", bytes, digests: digestsJson(digests) }).where("id", "=", id).execute();
  }

  /** Nothing needs it any more: the garbage collector deletes its objects after the grace period. */
  async release(id: string, at: number): Promise<void> {
    await this.db.updateTable("stored_snapshots").set({ state: "released", released_at: at }).where("id", "=", id).where("state", "!=", "released").execute();
  }

  async released(before: number): Promise<StoredSnapshotRow[]> {
    return this.db.selectFrom("stored_snapshots").selectAll().where("state", "=", "released").where("released_at", "<=", before).execute();
  }

  async deleteRow(id: string): Promise<void> {
    await this.db.deleteFrom("stored_snapshots").where("id", "=", id).where("state", "=", "released").execute();
  }

  /** Ids of every catalogued snapshot (any state): what the store may hold for this deployment. */
  async ids(): Promise<Set<string>> {
    return new Set((await this.db.selectFrom("stored_snapshots").select("id").execute()).map((r) => r.id));
  }

  /** Every live stored snapshot's pin on its template version (hosts follow these). */
  async templatePins(): Promise<host.TemplatePin[]> {
    const rows = await this.db.selectFrom("stored_snapshots").select(["id", "template", "template_version"]).where("state", "!=", "released").execute();
    return rows.map((r) => (r.template && r.template_version ? { id: r.id, template: { name: r.template, version: r.template_version } } : r.id));
  }

  async liveIds(): Promise<Set<string>> {
    return new Set((await this.db.selectFrom("stored_snapshots").select("id").where("state", "!=", "released").execute()).map((r) => r.id));
  }

  /** In a transaction: refuses `adding` more stored bytes past the owner's quota (what an upload actually wrote). */
  async checkQuota(owner: string, adding: number, max: number): Promise<void> {
    await this.lockOwner(owner);
    const used = await this.storedBytes(owner);
    if (used + adding > max) {
      throw new DenError("quota_exceeded", `owner ${owner} keeps ${used} bytes in the snapshot store; ${adding} more would pass the quota of ${max}: delete checkpoints or destroy hibernated sandboxes first`, { stored_bytes: used, adding_bytes: adding, quota_bytes: max });
    }
  }

  async storedBytes(owner?: string): Promise<number> {
    // A volume's copy (a parked volume) counts against the owner's volume quota, not this one.
    let q = this.db.selectFrom("stored_snapshots").select((eb) => eb.fn.sum<number>("bytes").as("n")).where("state", "!=", "released").where("kind", "!=", "volume");
    if (owner !== undefined) q = q.where("owner", "=", owner);
    return Number((await q.executeTakeFirstOrThrow()).n ?? 0);
  }
}
