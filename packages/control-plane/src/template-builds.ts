import type { Readable } from "node:stream";
import { DenError, type api } from "@den/protocol";
import type { Principal } from "./db/store.js";
import { buildStore, toApiBuild, type BuildRow } from "./db/build-store.js";
import { AnnouncedBuilds } from "./announced-builds.js";
import { buildContexts, contextName, putContext, type BuildContexts } from "./build-contexts.js";
import type { Ctx } from "./context.js";
import type { Templates } from "./templates.js";

/**
 * Template builds as the API sees them: started, read, listed, cancelled, their logs, and
 * their build contexts; for E2B's builds too, which are announced before they start
 * (`announced`) and read as rows (their status, the catalog's lists and tags).
 */
export class TemplateBuilds {
  /** Builds announced before they start (E2B's `POST /v3/templates`). */
  readonly announced: AnnouncedBuilds;

  constructor(
    private readonly ctx: Ctx,
    private readonly templates: Templates,
  ) {
    this.announced = new AnnouncedBuilds(ctx);
  }

  /** Starts a build and answers at once; its end is logged (the build's row and log say how it ended). */
  async start(p: Principal, req: api.CreateTemplateRequest): Promise<api.TemplateBuild> {
    const { build, done } = await this.templates.start(p, req);
    done.catch((err: unknown) => this.ctx.log.info({ err, build: build.id }, `template build ${build.id} of ${build.name} failed`));
    return toApiBuild(build);
  }

  async get(p: Principal, id: string): Promise<api.TemplateBuild> {
    return toApiBuild(await this.templates.ownedBuild(p, id));
  }

  async list(p: Principal, name: string | undefined, limit: number): Promise<api.TemplateBuild[]> {
    return (await buildStore(this.ctx.store).list(p.admin ? null : p.owner, name, limit)).map(toApiBuild);
  }

  async cancel(p: Principal, id: string): Promise<api.TemplateBuild> {
    await this.templates.cancel(p, id);
    return toApiBuild(await this.templates.ownedBuild(p, id));
  }

  /** A build's log lines from `from` on (at most `limit`), and whether the build has ended. */
  async logs(p: Principal, id: string, from: number, limit: number): Promise<{ lines: api.TemplateBuildLogLine[]; ended: boolean }> {
    const row = await this.templates.ownedBuild(p, id);
    const lines = await buildStore(this.ctx.store).logs(id, from, limit);
    return {
      lines: lines.map((l) => ({ seq: l.seq, at: new Date(l.at).toISOString(), level: l.level as "info" | "error", message: l.message })),
      ended: row.state !== "building",
    };
  }

  /** A build's row by id, whoever owns it (E2B's start judges the owner and name itself); undefined if none. */
  row(id: string): Promise<BuildRow | undefined> {
    return buildStore(this.ctx.store).get(id);
  }

  /** The rows of the builds the caller sees (an admin: everyone's), newest first (of one template, if `name`). */
  rows(p: Principal, name: string | undefined, limit: number): Promise<BuildRow[]> {
    return buildStore(this.ctx.store).list(p.admin ? null : p.owner, name, limit);
  }

  /** A build's log lines as stored (`at`: epoch ms) from `from` on, at most `limit`; the caller has checked the build is theirs. */
  logLines(id: string, from: number, limit: number): Promise<Array<{ seq: number; at: number; level: string; message: string }>> {
    return buildStore(this.ctx.store).logs(id, from, limit);
  }

  /**
   * The checks a build of `name` would fail at its start that can be made before it (E2B
   * announces a build before starting it; the start makes them again): the name is another
   * owner's, or one of the host's own templates; with `snapshots`, the name of one of the
   * caller's checkpoints (E2B's snapshots and templates share one namespace); the owner's
   * template quota.
   */
  async checkName(p: Principal, name: string, opts: { snapshots?: boolean } = {}): Promise<void> {
    const { store, config } = this.ctx;
    const row = await this.templates.row(name);
    if (row && row.owner !== p.owner) throw new DenError("already_exists", `template ${name} belongs to another owner`);
    if (!row && (await this.templates.hostTemplates()).some((t) => t.name === name)) throw new DenError("already_exists", `template ${name} is one of this host's own templates`);
    if (opts.snapshots && (await store.checkpoints.list(p.owner)).some((c) => c.name === name)) throw new DenError("already_exists", `${name} is the name of one of your snapshots`);
    if ((!row || row.deleted_at !== null) && (await store.templates.count(p.owner)) >= config.limits.templatesPerOwner) {
      throw new DenError("quota_exceeded", `owner ${p.owner} may have at most ${config.limits.templatesPerOwner} templates`);
    }
  }

  /** Build contexts in the object store, owner by owner (E2B's uploads take them by E2B's own names). */
  get contexts(): BuildContexts {
    return buildContexts(this.ctx);
  }

  /** Stores a build context (a tar) of the caller's, named by its sha256 (checked). */
  async uploadContext(p: Principal, digest: string, body: Readable): Promise<api.BuildContext> {
    const name = contextName(digest);
    const { size } = await putContext(this.ctx, p.owner, name, body, this.ctx.config.limits.contextBytes, true);
    return { context: `sha256:${name}`, size };
  }
}
