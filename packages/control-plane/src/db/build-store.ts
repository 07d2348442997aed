import type { Selectable } from "kysely";
import type { api } from "@den/protocol";
import type { TemplateBuildsTable } from "./db.js";
import type { Store } from "./store.js";

export type BuildRow = Selectable<TemplateBuildsTable>;

/** A build keeps at most this many log lines (its last one then says so). */
export const MAX_LOG_LINES = 20_000;

/** A build row as the API shows it. */
export function toApiBuild(r: BuildRow): api.TemplateBuild {
  return {
    id: r.id, name: r.name, state: r.state as api.TemplateBuildState, source: JSON.parse(r.source) as Record<string, string>, version: r.version,
    error: r.error ? (JSON.parse(r.error) as api.TemplateBuild["error"]) : null,
    created_at: new Date(r.created_at).toISOString(), finished_at: r.finished_at === null ? null : new Date(r.finished_at).toISOString(),
  };
}

/** Template builds and their logs (in `s`'s transaction, when it is one). */
export class BuildStore {
  constructor(private readonly s: Store) {}

  private get db() {
    return this.s.db;
  }

  async insert(row: BuildRow): Promise<void> {
    await this.db.insertInto("template_builds").values(row).execute();
  }

  async get(id: string): Promise<BuildRow | undefined> {
    return this.db.selectFrom("template_builds").selectAll().where("id", "=", id).executeTakeFirst();
  }

  /** An owner's builds, newest first (of one template, if `name`). */
  async list(owner: string | null, name: string | undefined, limit: number): Promise<BuildRow[]> {
    let q = this.db.selectFrom("template_builds").selectAll();
    if (owner !== null) q = q.where("owner", "=", owner);
    if (name !== undefined) q = q.where("name", "=", name);
    return q.orderBy("created_at", "desc").orderBy("id", "desc").limit(limit).execute();
  }

  async countBuilding(owner: string): Promise<number> {
    const r = await this.db.selectFrom("template_builds").select((eb) => eb.fn.countAll<number>().as("n")).where("owner", "=", owner).where("state", "=", "building").executeTakeFirst();
    return Number(r?.n ?? 0);
  }

  /** Ends a build that is still building (a second end, e.g. recovery after a finish, changes nothing). */
  async finish(id: string, patch: Pick<BuildRow, "state" | "version" | "error" | "finished_at">): Promise<void> {
    await this.db.updateTable("template_builds").set(patch).where("id", "=", id).where("state", "=", "building").execute();
  }

  /** An owner's builds announced and not started (`waiting`). */
  async countWaiting(owner: string): Promise<number> {
    const r = await this.db.selectFrom("template_builds").select((eb) => eb.fn.countAll<number>().as("n")).where("owner", "=", owner).where("state", "=", "waiting").executeTakeFirst();
    return Number(r?.n ?? 0);
  }

  /** A waiting build's source (what its start added to what was asked); a started one keeps its own. */
  async describeWaiting(id: string, source: string): Promise<void> {
    await this.db.updateTable("template_builds").set({ source }).where("id", "=", id).where("state", "=", "waiting").execute();
  }

  /** Ends the waiting builds `which` selects (one by id, an owner's, those announced before a time) as errors. */
  async endWaiting(which: { id?: string; owner?: string; before?: number }, error: string, now: number): Promise<void> {
    let q = this.db.updateTable("template_builds").set({ state: "error", error, finished_at: now }).where("state", "=", "waiting");
    if (which.id !== undefined) q = q.where("id", "=", which.id);
    if (which.owner !== undefined) q = q.where("owner", "=", which.owner);
    if (which.before !== undefined) q = q.where("created_at", "<", which.before);
    await q.execute();
  }

  /** A build announced before it started (`waiting`) begins on `host`. */
  async begin(id: string, host: string): Promise<void> {
    await this.db.updateTable("template_builds").set({ state: "building", host_id: host }).where("id", "=", id).where("state", "=", "waiting").execute();
  }

  async setHost(id: string, host: string): Promise<void> {
    await this.db.updateTable("template_builds").set({ host_id: host }).where("id", "=", id).execute();
  }

  /** Builds still building (a restart ends those whose operation it settled). */
  async building(): Promise<BuildRow[]> {
    return this.db.selectFrom("template_builds").selectAll().where("state", "=", "building").execute();
  }

  /** The next line number of a build's log. */
  async nextSeq(id: string): Promise<number> {
    const r = await this.db.selectFrom("template_build_logs").select((eb) => eb.fn.max<number>("seq").as("m")).where("build_id", "=", id).executeTakeFirst();
    return r?.m === null || r?.m === undefined ? 0 : Number(r.m) + 1;
  }

  /** Appends lines from `seq` on (up to the cap: the line at the cap says the rest was dropped). Returns the next seq. */
  async append(id: string, seq: number, lines: Array<{ at: number; level: string; message: string }>): Promise<number> {
    const rows: Array<{ build_id: string; seq: number; at: number; level: string; message: string }> = [];
    for (const l of lines) {
      if (seq > MAX_LOG_LINES) break;
      const last = seq === MAX_LOG_LINES;
      rows.push({ build_id: id, seq, at: l.at, level: last ? "error" : l.level, message: last ? `(the log is longer than ${MAX_LOG_LINES} lines; the rest is not kept)` : l.message });
      seq++;
    }
    if (rows.length) await this.db.insertInto("template_build_logs").values(rows).onConflict((oc) => oc.columns(["build_id", "seq"]).doNothing()).execute();
    return seq;
  }

  async logs(id: string, from: number, limit: number): Promise<Array<{ seq: number; at: number; level: string; message: string }>> {
    return this.db.selectFrom("template_build_logs").select(["seq", "at", "level", "message"]).where("build_id", "=", id).where("seq", ">=", from).orderBy("seq").limit(limit).execute();
  }

  /** Drops builds (and their logs) that ended before `before`. */
  async prune(before: number): Promise<void> {
    const old = await this.db.selectFrom("template_builds").select("id").where("finished_at", "<", before).limit(1000).execute();
    if (!old.length) return;
    const ids = old.map((r) => r.id);
    await this.db.deleteFrom("template_build_logs").where("build_id", "in", ids).execute();
    await this.db.deleteFrom("template_builds").where("id", "in", ids).execute();
  }
}

export const buildStore = (s: Store) => new BuildStore(s);
