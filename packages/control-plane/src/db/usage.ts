import type { UsageSegmentsTable } from "./schema.js";
import { Repo } from "./repo.js";

/** Metered usage segments. */
export class UsageRepo extends Repo {
  async insert(s: UsageSegmentsTable): Promise<void> {
    await this.db.insertInto("usage_segments").values(s).execute();
  }

  /** Closed segments that overlap [from, to), of one owner or all. */
  async segments(from: number, to: number, owner?: string): Promise<UsageSegmentsTable[]> {
    let q = this.db.selectFrom("usage_segments").selectAll().where("end_ms", ">", from).where("start_ms", "<", to);
    if (owner !== undefined) q = q.where("owner", "=", owner);
    return q.execute();
  }
}
