import type { Readable } from "node:stream";
import type { api } from "@den/protocol";
import type { Principal } from "./db/store.js";
import { buildStore, toApiBuild } from "./db/build-store.js";
import { buildContexts, contextName, putContext, type BuildContexts } from "./build-contexts.js";
import type { Ctx } from "./context.js";
import type { Templates } from "./templates.js";

/** Template builds as the API sees them: started, read, listed, cancelled, their logs, and their build contexts. */
export class TemplateBuilds {
  constructor(
    private readonly ctx: Ctx,
    private readonly templates: Templates,
  ) {}

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
