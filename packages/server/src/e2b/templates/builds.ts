/**
 * E2B's template builds, in the order the client's `Template.build` makes its calls: the
 * request (a build announced under the template's name, checked as /v1's would be), a link
 * per COPY's files, the start (E2B's plan as Den's, then Templates.startPlanned under the
 * announced id), and the status the client polls (state, log from an offset, reason).
 */
import { DenError, type e2bTemplates } from "@den/protocol";
import { buildStore } from "@den/control-plane";
import type { ControlPlane } from "@den/control-plane";
import { contextName } from "@den/control-plane";
import type { Principal } from "@den/control-plane";
import { AnnouncedBuilds } from "./announced.js";
import type { E2bTemplateCatalog } from "./catalog.js";
import { askedShape, e2bStatus, logEntry, reasonOf, sourceOf } from "./mapping.js";
import { DEFAULT_TAG, checkTag, parseName, plainName } from "./names.js";
import { planBuild } from "./steps.js";
import { UPLOAD_LINK_MS, UPLOAD_PATH, type UploadLinks } from "./uploads.js";

/** Log lines one status poll answers at most. */
export const MAX_LOG_PAGE = 1000;

export class E2bTemplateBuilds {
  private readonly announced: AnnouncedBuilds;
  /** Builds whose start is being handled here now (a second start of the same one is refused). */
  private readonly starting = new Set<string>();

  constructor(private readonly cp: ControlPlane, private readonly catalog: E2bTemplateCatalog, private readonly links: UploadLinks) {
    this.announced = new AnnouncedBuilds(cp.store, () => cp.clock.now());
  }

  /** `POST /v3/templates`: a build of `name` announced (state `waiting`), with its tags (`name:tag` and `tags`; none: `default`) and shape. */
  async request(p: Principal, b: e2bTemplates.TemplateBuildRequestV3): Promise<e2bTemplates.TemplateRequestResponseV3> {
    const raw = b.name ?? b.alias;
    if (!raw) throw new DenError("invalid_argument", "name is required");
    if (b.minFreeDiskMb !== undefined) throw new DenError("invalid_argument", "minFreeDiskMb is not supported: Den sizes a template's disk from its image (or its source template's disk)");
    const { name, tag } = parseName(raw);
    const asked = [...new Set([...(tag ? [tag] : []), ...(b.tags ?? []).map(checkTag)])];
    const tags = asked.length ? asked : [DEFAULT_TAG];
    await this.checkName(p, name);
    const row = await this.announced.announce(p.owner, name, {
      kind: "e2b", tags: tags.join(","), ...(b.cpuCount ? { vcpus: String(b.cpuCount) } : {}), ...(b.memoryMB ? { memory_mb: String(b.memoryMB) } : {}),
    });
    return { templateID: name, buildID: row.id, aliases: [name], names: [name], tags, public: false };
  }

  /** The checks a build of `name` would fail at its start, made at its request (the start makes them again). */
  private async checkName(p: Principal, name: string): Promise<void> {
    const { store, config } = this.cp;
    const row = await store.templates.row(name);
    if (row && row.owner !== p.owner) throw new DenError("already_exists", `template ${name} belongs to another owner`);
    if (!row && (await this.cp.templates.hostTemplates()).some((t) => t.name === name)) throw new DenError("already_exists", `template ${name} is one of this host's own templates`);
    // E2B's snapshots and templates share one namespace; on this surface, so do Den's.
    if ((await this.cp.listCheckpoints(p)).some((c) => c.name === name)) throw new DenError("already_exists", `${name} is the name of one of your snapshots`);
    if ((!row || row.deleted_at !== null) && (await store.templates.count(p.owner)) >= config.limits.templatesPerOwner) {
      throw new DenError("quota_exceeded", `owner ${p.owner} may have at most ${config.limits.templatesPerOwner} templates`);
    }
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
    const row = await buildStore(this.cp.store).get(buildID);
    if (!row || row.owner !== p.owner || row.name !== name) throw new DenError("not_found", `template build ${JSON.stringify(buildID.slice(0, 64))} of ${name} does not exist`);
    if (row.state !== "waiting" || this.starting.has(buildID)) throw new DenError("invalid_state", `template build ${buildID} has already started (${e2bStatus(row.state)})`);
    this.starting.add(buildID);
    try {
      const { plan, source } = await planBuild(b, askedShape(row), {
        context: async (hash) => ((await this.cp.builds.contexts.has(p.owner, hash)) ? this.cp.builds.contexts.ref(p.owner, hash) : undefined),
        template: (ref) => this.catalog.source(p, ref),
      });
      const described = { ...sourceOf(row), ...source };
      await this.announced.describe(buildID, described);
      const { done } = await this.cp.templates.startPlanned(p, name, plan, described, buildID);
      // Its end is in the row (the client polls the status).
      done.catch(() => undefined);
    } catch (e) {
      await this.announced.fail(buildID, e);
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
    const lines = await buildStore(this.cp.store).logs(buildID, offset, Math.min(limit, MAX_LOG_PAGE));
    const reason = reasonOf(row);
    return { buildID, templateID: name, status: e2bStatus(row.state), logEntries: lines.map(logEntry), logs: lines.map((l) => l.message), ...(reason ? { reason } : {}) };
  }
}
