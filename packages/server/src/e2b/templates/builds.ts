/**
 * E2B's template builds, in the order the client's `Template.build` makes its calls: the
 * request (a build announced under the template's name, checked as /v1's would be), a link
 * per COPY's files, the start (E2B's plan as Den's, then Templates.startPlanned under the
 * announced id), and the status the client polls (state, log from an offset, reason).
 */
import { DenError, type e2bTemplates } from "@den/protocol";
import type { ControlPlane } from "@den/control-plane";
import { contextName } from "@den/control-plane";
import type { Principal } from "@den/control-plane";
import type { E2bTemplateCatalog } from "./catalog.js";
import { askedShape, e2bStatus, logEntry, reasonOf, sourceOf } from "./mapping.js";
import { DEFAULT_TAG, checkTag, parseName, plainName } from "./names.js";
import { planBuild } from "./steps.js";
import { UPLOAD_LINK_MS, UPLOAD_PATH, type UploadLinks } from "./uploads.js";

/** Log lines one status poll answers at most. */
export const MAX_LOG_PAGE = 1000;

export class E2bTemplateBuilds {
  /** Builds whose start is being handled here now (a second start of the same one is refused). */
  private readonly starting = new Set<string>();

  constructor(private readonly cp: ControlPlane, private readonly catalog: E2bTemplateCatalog, private readonly links: UploadLinks) {}

  /** `POST /v3/templates`: a build of `name` announced (state `waiting`), with its tags (`name:tag` and `tags`; none: `default`) and shape. */
  async request(p: Principal, b: e2bTemplates.TemplateBuildRequestV3): Promise<e2bTemplates.TemplateRequestResponseV3> {
    const raw = b.name ?? b.alias;
    if (!raw) throw new DenError("invalid_argument", "name is required");
    if (b.minFreeDiskMb !== undefined) throw new DenError("invalid_argument", "minFreeDiskMb is not supported: Den sizes a template's disk from its image (or its source template's disk)");
    const { name, tag } = parseName(raw);
    const asked = [...new Set([...(tag ? [tag] : []), ...(b.tags ?? []).map(checkTag)])];
    const tags = asked.length ? asked : [DEFAULT_TAG];
    // The checks its start would fail, made now (the start makes them again); on this surface snapshots share the templates' names.
    await this.cp.builds.checkName(p, name, { snapshots: true });
    const row = await this.cp.builds.announced.announce(p.owner, name, {
      kind: "e2b", tags: tags.join(","), ...(b.cpuCount ? { vcpus: String(b.cpuCount) } : {}), ...(b.memoryMB ? { memory_mb: String(b.memoryMB) } : {}),
    });
    return { templateID: name, buildID: row.id, aliases: [name], names: [name], tags, public: false };
  }

  /**
   * `GET /templates/{templateID}/files/{hash}`: whether the caller has uploaded these files,
   * and a link to upload them (always: the client's `forceUpload` uploads again).
   */
  async fileLink(p: Principal, templateID: string, hash: string, origin: URL): Promise<e2bTemplates.TemplateBuildFileUpload> {
    plainName(templateID);
    contextName(hash);
    const url = new URL(`${UPLOAD_PATH}/${hash}`, origin);
    url.searchParams.set("token", this.links.token(p.owner, hash, this.cp.clock.now() + UPLOAD_LINK_MS));
    return { present: await this.cp.builds.contexts.has(p.owner, hash), url: url.toString() };
  }

  /** `POST /v2/templates/{templateID}/builds/{buildID}`: the announced build starts (or, refused, ends as an error). */
  async start(p: Principal, templateID: string, buildID: string, b: e2bTemplates.TemplateBuildStartV2): Promise<void> {
    const name = plainName(templateID);
    const row = await this.cp.builds.row(buildID);
    if (!row || row.owner !== p.owner || row.name !== name) throw new DenError("not_found", `template build ${JSON.stringify(buildID.slice(0, 64))} of ${name} does not exist`);
    if (row.state !== "waiting" || this.starting.has(buildID)) throw new DenError("invalid_state", `template build ${buildID} has already started (${e2bStatus(row.state)})`);
    this.starting.add(buildID);
    try {
      const { plan, source } = await planBuild(b, askedShape(row), {
        context: async (hash) => ((await this.cp.builds.contexts.has(p.owner, hash)) ? this.cp.builds.contexts.ref(p.owner, hash) : undefined),
        template: (ref) => this.catalog.source(p, ref),
      });
      const described = { ...sourceOf(row), ...source };
      await this.cp.builds.announced.describe(buildID, described);
      const { done } = await this.cp.templates.startPlanned(p, name, plan, described, buildID);
      // Its end is in the row (the client polls the status).
      done.catch(() => undefined);
    } catch (e) {
      await this.cp.builds.announced.fail(buildID, e);
      throw e;
    } finally {
      this.starting.delete(buildID);
    }
  }

  /** `GET /templates/{templateID}/builds/{buildID}/status`: its state, its log from line `offset` (at most `limit`), why it failed. */
  async status(p: Principal, templateID: string, buildID: string, offset: number, limit: number): Promise<e2bTemplates.TemplateBuildInfo> {
    const name = plainName(templateID);
    const row = await this.cp.templates.ownedBuild(p, buildID);
    if (row.name !== name) throw new DenError("not_found", `template build ${JSON.stringify(buildID.slice(0, 64))} of ${name} does not exist`);
    const lines = await this.cp.builds.logLines(buildID, offset, Math.min(limit, MAX_LOG_PAGE));
    const reason = reasonOf(row);
    return { buildID, templateID: name, status: e2bStatus(row.state), logEntries: lines.map(logEntry), logs: lines.map((l) => l.message), ...(reason ? { reason } : {}) };
  }
}
