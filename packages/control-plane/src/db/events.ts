import type { api } from "@den/protocol";
import { iso } from "./rows.js";
import { Repo } from "./repo.js";

/** Sandboxes' events, the chatty families capped. */
export class EventsRepo extends Repo {
  /**
   * Appends an event. Exec and transfer-progress events are frequent, so only the newest
   * `cap` of each kind are kept per sandbox; lifecycle events are few and all kept.
   */
  async add(sandboxId: string, type: string, reason: string | null, data: Record<string, unknown>, cap: number): Promise<void> {
    // One transaction: the insert and its prunes are one commit (one fsync of the WAL, not
    // three, each blocking the event loop under better-sqlite3).
    await this.transaction(async (s) => {
      await s.db.insertInto("events").values({ sandbox_id: sandboxId, at: Date.now(), type, reason, data: JSON.stringify(data) }).execute();
      // The chatty families keep their newest `cap` each; everything together keeps
      // four times `cap` (the lifecycle's history outlives a flood of execs).
      const family = ["exec.", "transfer.", "guest.", "network."].find((f) => type.startsWith(f));
      if (family) await s.prune(sandboxId, cap, family);
      await s.prune(sandboxId, cap * 4);
    });
  }

  /** Deletes a sandbox's events (of `family`, or all) older than its newest `keep`. */
  private async prune(sandboxId: string, keep: number, family?: string): Promise<void> {
    let q = this.db.selectFrom("events").select("seq").where("sandbox_id", "=", sandboxId);
    if (family) q = q.where("type", "like", `${family}%`);
    const old = await q.orderBy("seq", "desc").offset(keep).limit(1).executeTakeFirst();
    if (!old) return;
    let d = this.db.deleteFrom("events").where("sandbox_id", "=", sandboxId).where("seq", "<=", old.seq);
    if (family) d = d.where("type", "like", `${family}%`);
    await d.execute();
  }

  async list(sandboxId: string, after: number, limit = 500): Promise<api.SandboxEvent[]> {
    const rows = await this.db.selectFrom("events").selectAll().where("sandbox_id", "=", sandboxId).where("seq", ">", after).orderBy("seq").limit(limit).execute();
    return rows.map((r) => ({ seq: r.seq, sandbox_id: r.sandbox_id, at: iso(r.at)!, type: r.type, reason: (r.reason as api.TransitionReason | null) ?? null, data: JSON.parse(r.data) as Record<string, unknown> }));
  }
}
