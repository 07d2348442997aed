import type { CheckpointRow } from "./rows.js";
import { Repo } from "./repo.js";

/** Durable checkpoints. */
export class CheckpointsRepo extends Repo {
  async all(owner?: string): Promise<CheckpointRow[]> {
    let q = this.db.selectFrom("checkpoints").selectAll();
    if (owner !== undefined) q = q.where("owner", "=", owner);
    return q.execute();
  }

  async insert(row: CheckpointRow): Promise<void> {
    await this.db.insertInto("checkpoints").values(row).execute();
  }

  async get(id: string): Promise<CheckpointRow | undefined> {
    return this.db.selectFrom("checkpoints").selectAll().where("id", "=", id).executeTakeFirst();
  }

  async list(owner: string, sandboxId?: string): Promise<CheckpointRow[]> {
    let q = this.db.selectFrom("checkpoints").selectAll().where("owner", "=", owner);
    if (sandboxId) q = q.where("sandbox_id", "=", sandboxId);
    return q.orderBy("created_at").execute();
  }

  async delete(id: string): Promise<void> {
    await this.db.deleteFrom("checkpoints").where("id", "=", id).execute();
  }
}
