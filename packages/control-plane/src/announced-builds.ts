/**
 * Builds announced before they start: E2B's `POST /v3/templates` gives the client a build id
 * at once, and the build starts only later (`POST /v2/templates/{id}/builds/{buildID}`, after
 * the file uploads). Until then the build is a `template_builds` row in state `waiting`,
 * its `source` holding what was asked (tags, shape), never credentials; the start turns that
 * row into the build (Templates.startPlanned with its id). A start that is refused, or never
 * comes within an hour, ends the row as an error, so it is listed as such and pruned.
 */
import { DenError, newId } from "@den/protocol";
import { buildStore, type BuildRow } from "./db/build-store.js";
import type { Ctx } from "./context.js";

/** An announced build not started within this is given up. */
export const WAITING_MS = 3600_000;
/** Announced builds an owner may have waiting at once. */
export const MAX_WAITING_PER_OWNER = 16;

export class AnnouncedBuilds {
  constructor(private readonly ctx: Ctx) {}

  private get builds() {
    return buildStore(this.ctx.store);
  }

  private now(): number {
    return this.ctx.clock.now();
  }

  /** A new waiting build of `name` for `owner`, after those of theirs that waited too long are given up. */
  async announce(owner: string, name: string, source: Record<string, string>): Promise<BuildRow> {
    await this.giveUpStale(owner);
    if ((await this.builds.countWaiting(owner)) >= MAX_WAITING_PER_OWNER) {
      throw new DenError("limit_exceeded", `at most ${MAX_WAITING_PER_OWNER} template builds may wait to be started per owner; start them (POST /v2/templates/{templateID}/builds/{buildID}) or wait an hour`);
    }
    const row: BuildRow = {
      id: newId("op"), owner, name, state: "waiting", source: JSON.stringify(source), version: null, error: null, host_id: null, created_at: this.now(), finished_at: null,
    };
    await this.builds.insert(row);
    return row;
  }

  /** Adds what the start says (where from, the steps) to a waiting build's source. */
  async describe(id: string, source: Record<string, string>): Promise<void> {
    await this.builds.describeWaiting(id, JSON.stringify(source));
  }

  /** A waiting build that will not start: it ends as an error with `e`'s message. */
  async fail(id: string, e: unknown): Promise<void> {
    const err = e instanceof DenError ? e : new DenError("internal", (e as Error).message);
    await this.builds.endWaiting({ id }, JSON.stringify({ code: err.code, message: err.message }), this.now());
  }

  private async giveUpStale(owner: string): Promise<void> {
    const error = { code: "aborted", message: "the build was never started (POST /v2/templates/{templateID}/builds/{buildID}) within an hour of its request" };
    await this.builds.endWaiting({ owner, before: this.now() - WAITING_MS }, JSON.stringify(error), this.now());
  }
}
