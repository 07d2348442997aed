import { DenError, type host } from "@den/protocol";
import type { SandboxRow } from "./rows.js";
import { Repo } from "./repo.js";

/** Sandboxes: their rows and metadata, owners' live counts, placement. */
export class SandboxesRepo extends Repo {
  /** Sandboxes on a host that hold something there (a VM, a warm snapshot or a disk): not destroyed, lost, errored or cold. */
  async heldOn(hostId: string): Promise<SandboxRow[]> {
    return this.db.selectFrom("sandboxes").selectAll().where("host_id", "=", hostId).where("state", "not in", ["destroyed", "lost", "error"])
      .where((eb) => eb.or([eb("state", "!=", "hibernated"), eb("hibernate_mode", "is", null), eb("hibernate_mode", "!=", "cold")])).execute();
  }

  /**
   * Inserts a sandbox row; with `maxLive`, only while its owner has fewer live sandboxes
   * (counted under a lock on the owner in the same transaction, so concurrent creates and
   * forks through any replica cannot overshoot), else `quota_exceeded`.
   */
  async insert(row: SandboxRow, maxLive?: number): Promise<void> {
    await this.transaction(async (s) => {
      if (maxLive !== undefined) {
        await s.lockOwner(row.owner);
        if ((await s.countLive(row.owner)) >= maxLive) throw new DenError("quota_exceeded", `owner ${row.owner} may have at most ${maxLive} sandboxes; destroy some first`);
      }
      await s.db.insertInto("sandboxes").values(row).execute();
      const meta = Object.entries(JSON.parse(row.metadata) as Record<string, string>);
      if (meta.length) await s.db.insertInto("sandbox_metadata").values(meta.map(([key, value]) => ({ sandbox_id: row.id, key, value }))).execute();
    });
  }

  async get(id: string): Promise<SandboxRow | undefined> {
    return this.db.selectFrom("sandboxes").selectAll().where("id", "=", id).executeTakeFirst();
  }

  async update(id: string, patch: Partial<SandboxRow>): Promise<SandboxRow | undefined> {
    await this.db.updateTable("sandboxes").set(patch).where("id", "=", id).execute();
    return this.get(id);
  }

  /**
   * Compare-and-set: applies `patch` (and bumps the generation) only if the row still has
   * the expected generation and operation; returns the new row, or undefined if it did not.
   */
  async cas(id: string, expect: { generation: number; opId: string | null }, patch: Partial<SandboxRow>): Promise<SandboxRow | undefined> {
    let q = this.db.updateTable("sandboxes").set({ ...patch, generation: expect.generation + 1 }).where("id", "=", id).where("generation", "=", expect.generation);
    q = expect.opId === null ? q.where("op_id", "is", null) : q.where("op_id", "=", expect.opId);
    const r = await q.executeTakeFirst();
    return Number(r.numUpdatedRows) === 1 ? this.get(id) : undefined;
  }

  /** Gives rows recorded before sandboxes had a host (host_id null) to `host`. */
  async assignUnplaced(host: string): Promise<void> {
    await this.db.updateTable("sandboxes").set({ host_id: host }).where("host_id", "is", null).where("state", "!=", "destroyed").execute();
  }

  /** Live sandboxes per host (null: not yet assigned). */
  async countLiveByHost(): Promise<Map<string | null, number>> {
    const rows = await this.db.selectFrom("sandboxes").select(["host_id", (eb) => eb.fn.countAll<number>().as("n")])
      .where("state", "not in", ["destroyed", "error"]).groupBy("host_id").execute();
    return new Map(rows.map((r) => [r.host_id, Number(r.n)]));
  }

  async live(): Promise<SandboxRow[]> {
    return this.db.selectFrom("sandboxes").selectAll().where("state", "!=", "destroyed").execute();
  }

  /** The ids of every sandbox not destroyed (nor failed), of all owners. */
  async liveIds(): Promise<string[]> {
    return (await this.db.selectFrom("sandboxes").select("id").where("state", "not in", ["destroyed", "error"]).execute()).map((r) => r.id);
  }

  async countLive(owner: string): Promise<number> {
    const r = await this.db.selectFrom("sandboxes").select((eb) => eb.fn.countAll<number>().as("n"))
      .where("owner", "=", owner).where("state", "not in", ["destroyed", "error"]).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async list(owner: string, q: { state?: string; metadata?: Record<string, string>; limit: number; cursor?: string }): Promise<SandboxRow[]> {
    let query = this.db.selectFrom("sandboxes").selectAll().where("owner", "=", owner);
    if (q.state) query = query.where("state", "=", q.state);
    else query = query.where("state", "!=", "destroyed");
    for (const [k, v] of Object.entries(q.metadata ?? {})) {
      query = query.where("id", "in", (eb) => eb.selectFrom("sandbox_metadata").select("sandbox_id").where("key", "=", k).where("value", "=", v));
    }
    if (q.cursor) query = query.where("id", ">", q.cursor);
    return query.orderBy("id").limit(q.limit).execute();
  }

  /**
   * A page of an owner's sandboxes newest first (E2B's list; `order: "asc"` oldest first): in
   * `states`, with every metadata pair, of a template, created at or after `since`, after
   * `cursor` (the last row of the previous page: its created_at and id).
   */
  async listNewest(owner: string, q: { states: string[]; metadata: Record<string, string>; template?: string; since?: number; limit: number; cursor?: { createdAt: number; id: string }; order?: "asc" | "desc" }): Promise<SandboxRow[]> {
    let query = this.db.selectFrom("sandboxes").selectAll().where("owner", "=", owner).where("state", "in", q.states);
    for (const [k, v] of Object.entries(q.metadata)) {
      query = query.where("id", "in", (eb) => eb.selectFrom("sandbox_metadata").select("sandbox_id").where("key", "=", k).where("value", "=", v));
    }
    if (q.template !== undefined) query = query.where("template", "=", q.template);
    if (q.since !== undefined) query = query.where("created_at", ">=", q.since);
    const c = q.cursor;
    const asc = q.order === "asc";
    const past = asc ? ">" : "<";
    if (c) query = query.where((eb) => eb.or([eb("created_at", past, c.createdAt), eb.and([eb("created_at", "=", c.createdAt), eb("id", past, c.id)])]));
    return query.orderBy("created_at", asc ? "asc" : "desc").orderBy("id", asc ? "asc" : "desc").limit(q.limit).execute();
  }

  /** How many sandboxes are in each state (destroyed ones included). */
  async countByState(): Promise<Record<string, number>> {
    const rows = await this.db.selectFrom("sandboxes").select(["state", (eb) => eb.fn.countAll<number>().as("n")]).groupBy("state").execute();
    return Object.fromEntries(rows.map((r) => [r.state, Number(r.n)]));
  }

  async byIds(ids: string[]): Promise<SandboxRow[]> {
    const out: SandboxRow[] = [];
    for (let i = 0; i < ids.length; i += 500) out.push(...(await this.db.selectFrom("sandboxes").selectAll().where("id", "in", ids.slice(i, i + 500)).execute()));
    return out;
  }
}
