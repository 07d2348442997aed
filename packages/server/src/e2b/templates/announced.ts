/**
 * Builds E2B announces before they start: `POST /v3/templates` gives the client a build id
 * at once, and the build starts only later (`POST /v2/templates/{id}/builds/{buildID}`, after
 * the file uploads). Until then the build is a `template_builds` row in state `waiting`,
 * its `source` holding what was asked (tags, shape), never credentials; the start turns that
 * row into the build (Templates.startPlanned with its id). A start that is refused, or never
 * comes within an hour, ends the row as an error, so it is listed as such and pruned.
 */
import { DenError } from "@den/protocol";
import { newId } from "@den/runtime";
import { buildStore, type BuildRow } from "@den/control-plane";
import type { Store } from "@den/control-plane";

/** An announced build not started within this is given up. */
export const WAITING_MS = 3600_000;
/** Announced builds an owner may have waiting at once. */
export const MAX_WAITING_PER_OWNER = 16;

export class AnnouncedBuilds {
  constructor(private readonly store: Store, private readonly now: () => number) {}

  private get db() {
    return this.store.db;
  }

  /** A new waiting build of `name` for `owner`, after those of theirs that waited too long are given up. */
  async announce(owner: string, name: string, source: Record<string, string>): Promise<BuildRow> {
    await this.giveUpStale(owner);
    const r = await this.db.selectFrom("template_builds").select((eb) => eb.fn.countAll<number>().as("n")).where("owner", "=", owner).where("state", "=", "waiting").executeTakeFirst();
    if (Number(r?.n ?? 0) >= MAX_WAITING_PER_OWNER) {
      throw new DenError("limit_exceeded", `at most ${MAX_WAITING_PER_OWNER} template builds may wait to be started per owner; start them (POST /v2/templates/{templateID}/builds/{buildID}) or wait an hour`);
    }
    const row: BuildRow = {
      id: newId("op"), owner, name, state: "waiting", source: JSON.stringify(source), version: null, error: null, host_id: null, created_at: this.now(), finished_at: null,
    };
    await buildStore(this.store).insert(row);
    return row;
  }

  /** Adds what the start says (where from, the steps) to a waiting build's source. */
  async describe(id: string, source: Record<string, string>): Promise<void> {
    await this.db.updateTable("template_builds").set({ source: JSON.stringify(source) }).where("id", "=", id).where("state", "=", "waiting").execute();
  }

  /** A waiting build that will not start: it ends as an error with `e`'s message. */
  async fail(id: string, e: unknown): Promise<void> {
    const err = e instanceof DenError ? e : new DenError("internal", (e as Error).message);
    await this.end({ id }, { code: err.code, message: err.message });
  }

  private async giveUpStale(owner: string): Promise<void> {
    await this.end({ owner, before: this.now() - WAITING_MS }, { code: "aborted", message: "the build was never started (POST /v2/templates/{templateID}/builds/{buildID}) within an hour of its request" });
  }

  /** Ends the waiting builds `which` selects as errors. */
  private async end(which: { id?: string; owner?: string; before?: number }, error: { code: string; message: string }): Promise<void> {
    let q = this.db.updateTable("template_builds").set({ state: "error", error: JSON.stringify(error), finished_at: this.now() }).where("state", "=", "waiting");
    if (which.id !== undefined) q = q.where("id", "=", which.id);
    if (which.owner !== undefined) q = q.where("owner", "=", which.owner);
    if (which.before !== undefined) q = q.where("created_at", "<", which.before);
    await q.execute();
  }
}
