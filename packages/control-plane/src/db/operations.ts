import type { OperationRow } from "./rows.js";
import { Repo } from "./repo.js";

/** The operations log: intent first, finished once, claimed from a dead replica by one caller. */
export class OperationsRepo extends Repo {
  async insert(op: OperationRow): Promise<void> {
    await this.db.insertInto("operations").values(op).execute();
  }

  async finish(id: string, status: "done" | "failed" | "rolled_back", at: number, result: unknown, error: string | null): Promise<void> {
    await this.db.updateTable("operations").set({ status, finished_at: at, result: result === undefined ? null : JSON.stringify(result), error })
      .where("id", "=", id).where("status", "=", "pending").execute();
  }

  /** Takes a pending operation over from `from` (a replica that is gone, or null): true for exactly one caller. */
  async claim(id: string, from: string | null, to: string): Promise<boolean> {
    let q = this.db.updateTable("operations").set({ owner: to }).where("id", "=", id).where("status", "=", "pending");
    q = from === null ? q.where("owner", "is", null) : q.where("owner", "=", from);
    return Number((await q.executeTakeFirst()).numUpdatedRows) === 1;
  }

  async get(id: string): Promise<OperationRow | undefined> {
    return this.db.selectFrom("operations").selectAll().where("id", "=", id).executeTakeFirst();
  }

  async pending(): Promise<OperationRow[]> {
    return this.db.selectFrom("operations").selectAll().where("status", "=", "pending").orderBy("created_at").execute();
  }

  /** Finished operations older than `before` are history: at most `keep` days of them stay. */
  async prune(before: number): Promise<void> {
    await this.db.deleteFrom("operations").where("status", "!=", "pending").where("finished_at", "<", before).execute();
  }
}
