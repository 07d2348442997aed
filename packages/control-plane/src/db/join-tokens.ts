import type { Selectable } from "kysely";
import { Repo } from "./repo.js";
import type { JoinTokensTable } from "./schema.js";

export type JoinTokenRow = Selectable<JoinTokensTable>;

/** One-time join tokens, kept by the hash of their secret (see Enrollment). */
export class JoinTokensRepo extends Repo {
  async create(row: Omit<JoinTokenRow, "used_at" | "used_by">): Promise<void> {
    await this.db.insertInto("join_tokens").values({ ...row, used_at: null, used_by: null }).execute();
  }

  async get(id: string): Promise<JoinTokenRow | undefined> {
    return this.db.selectFrom("join_tokens").selectAll().where("id", "=", id).executeTakeFirst();
  }

  /**
   * Redeems a token for `machineId` if it is unused and unexpired at `now`: one UPDATE whose
   * WHERE says so, so of two replicas redeeming one token at once exactly one changes the row.
   */
  async claim(id: string, machineId: string, now: number): Promise<boolean> {
    const r = await this.db.updateTable("join_tokens").set({ used_at: now, used_by: machineId })
      .where("id", "=", id).where("used_at", "is", null).where("expires_at", ">", now).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Drops tokens that expired before `before` (used or not): they can do nothing any more. */
  async prune(before: number): Promise<number> {
    const r = await this.db.deleteFrom("join_tokens").where("expires_at", "<", before).executeTakeFirst();
    return Number(r.numDeletedRows);
  }
}
