import { DenError, type HostAgent, type HostTemplate, type TemplateBuildSpec, type api } from "@den/protocol";
import { effectivePolicy } from "./network.js";
import { buildStore, type BuildRow } from "./db/build-store.js";
import { contextRef, withinStoredBytes } from "./build-contexts.js";
import { dockerfileSpec, imageSpec, sourceOf } from "./build-plan.js";
import type { Principal, TemplateRow } from "./db/store.js";
import { hostOfId, storedRef, type Ctx } from "./context.js";
import type { Checkpoints } from "./checkpoints.js";
import * as templateBuildOp from "./ops/template-build.js";
import { hostTemplates, toApiTemplate } from "./ops/template-build.js";
import * as templateDeleteOp from "./ops/template-delete.js";

export { toApiTemplate };

/** Templates: the host's own (everyone's) and those owners build through the API (theirs alone). */
export class Templates {
  /** Builds running now, per owner: each runs in a sandbox that counts as one of the owner's. */
  private readonly building = new Map<string, number>();

  constructor(private readonly ctx: Ctx, private readonly checkpoints: Checkpoints) {}

  /** A template made through the API is its owner's alone; the host's own are everyone's; a deleted one, nobody's. */
  async checkAccess(p: Principal, spec: string): Promise<void> {
    const row = await this.ctx.store.templates.row(spec.split("@")[0]!.split(".")[0]!);
    if (row && (row.deleted_at !== null || (row.owner !== p.owner && !p.admin))) throw new DenError("template_not_found", `template ${JSON.stringify(spec)} does not exist`);
  }

  /** The template versions this principal may use. */
  /** A template's row by name, whoever owns it (deleted ones too): E2B's catalog judges access itself. */
  row(name: string): Promise<TemplateRow | undefined> {
    return this.ctx.store.templates.row(name);
  }

  async list(p: Principal): Promise<api.Template[]> {
    const rows = await this.ctx.store.templates.rows();
    const out: api.Template[] = [];
    for (const t of await this.hostTemplates()) {
      const row = rows.get(t.name.split(".")[0]!);
      if (!row) out.push(toApiTemplate(t, null));
      else if (row.deleted_at === null && (row.owner === p.owner || p.admin)) out.push(toApiTemplate(t, row.owner));
    }
    return out;
  }

  /**
   * The template versions on the hosts, each once (a version is the same build everywhere:
   * its id is its recipe's hash); current if it is current on any reachable host.
   */
  hostTemplates(): Promise<HostTemplate[]> {
    return hostTemplates(this.ctx);
  }

  /**
   * Builds a template: from a template or checkpoint plus setup commands, from an image, or
   * from a Dockerfile. The request is checked (quotas, access, the Dockerfile's
   * instructions) before anything starts; then the name is claimed for the caller with the
   * operation's intent and the build row written, and the build runs (`done`), its log
   * kept as the host reports it. The same content again returns the version already built.
   * A failure (or a crash, at the next start) gives the name back as it was.
   */
  async start(p: Principal, req: api.CreateTemplateRequest): Promise<{ build: BuildRow; done: Promise<api.Template> }> {
    const row = await this.admit(p, req.name);
    if (req.from_template) await this.checkAccess(p, req.from_template);
    const fromCheckpoint = req.from_checkpoint ? await this.checkpoints.owned(p, req.from_checkpoint) : undefined;
    const plan = req.dockerfile ? await dockerfileSpec(this.ctx, p.owner, req, (name) => this.usable(p, name))
      : req.from_archive ? { ...imageSpec(req), fromArchive: await contextRef(this.ctx, p.owner, req.from_archive) } : imageSpec(req);
    const spec: TemplateBuildSpec = {
      ...this.baseSpec(req.name), setup: req.setup ?? [], setupTimeoutSeconds: req.setup_timeout_seconds ?? 600,
      ...(req.from_template ? { fromTemplate: req.from_template } : {}),
      ...(fromCheckpoint ? { fromCheckpoint: await storedRef(this.ctx, fromCheckpoint.id) } : {}),
      ...plan,
    };
    // An image or a Dockerfile is built on one host; the others fetch the result from the store when they need it.
    const on = fromCheckpoint ? [await hostOfId(this.ctx, fromCheckpoint.sandbox_id)] : spec.fromImage || spec.fromArchive || spec.steps?.length ? this.ctx.hosts.all.slice(0, 1) : this.ctx.hosts.all;
    const shape = fromCheckpoint ?? (spec.fromImage || spec.fromArchive || req.dockerfile ? { vcpus: req.vcpus ?? 1, memory_mb: req.memory_mb ?? 512 } : undefined);
    return this.begin(p, row, spec, on, sourceOf(req, spec), shape);
  }

  /**
   * Starts a build planned elsewhere (E2B's Template builder: its steps, from an image or a
   * template), under the build id `id` if given (a build announced before it starts).
   */
  async startPlanned(p: Principal, name: string, plan: Partial<TemplateBuildSpec>, source: Record<string, string>, id?: string): Promise<{ build: BuildRow; done: Promise<api.Template> }> {
    const row = await this.admit(p, name);
    if (plan.fromTemplate) await this.checkAccess(p, plan.fromTemplate);
    const spec: TemplateBuildSpec = { ...this.baseSpec(name), setup: [], setupTimeoutSeconds: 600, ...plan };
    const on = this.ctx.hosts.all.slice(0, 1);
    return this.begin(p, row, spec, on, source, { vcpus: plan.vcpus ?? 1, memory_mb: plan.memoryMb ?? 512 }, id);
  }

  /** Whether `name` is a template this principal may build from (theirs, or one of the host's own). */
  async usable(p: Principal, name: string): Promise<boolean> {
    if (!(await this.hostTemplates()).some((t) => t.name === name && t.current)) return false;
    return this.checkAccess(p, name).then(() => true, () => false);
  }

  private baseSpec(name: string): Pick<TemplateBuildSpec, "name" | "ttlSeconds" | "network"> {
    const { config } = this.ctx;
    return { name, ttlSeconds: config.limits.templateBuildSeconds, network: effectivePolicy({ egress: config.network.buildEgress }, config.network) };
  }

  /** The checks every build passes before it starts: the name is the caller's to build, quotas and limits. Returns the name's row. */
  private async admit(p: Principal, name: string): Promise<TemplateRow | undefined> {
    const { store, config } = this.ctx;
    const row = await store.templates.row(name);
    if (row && row.owner !== p.owner) throw new DenError("already_exists", `template ${name} belongs to another owner`);
    if (!row && (await this.hostTemplates()).some((t) => t.name === name)) throw new DenError("already_exists", `template ${name} is one of this host's own templates`);
    if ((!row || row.deleted_at !== null) && (await store.templates.count(p.owner)) >= config.limits.templatesPerOwner) {
      throw new DenError("quota_exceeded", `owner ${p.owner} may have at most ${config.limits.templatesPerOwner} templates`);
    }
    await withinStoredBytes(this.ctx, p.owner);
    if ((await buildStore(store).countBuilding(p.owner)) >= config.limits.buildsPerOwner) {
      throw new DenError("limit_exceeded", `at most ${config.limits.buildsPerOwner} template builds at once per owner (DEN_MAX_BUILDS_PER_OWNER); wait for one to end`);
    }
    // The building sandbox is one of the owner's while it runs (quota), bounded by the
    // build's TTL, and metered as running time under the build's operation id.
    if ((await store.sandboxes.countLive(p.owner)) + (this.building.get(p.owner) ?? 0) >= config.limits.sandboxesPerOwner) {
      throw new DenError("quota_exceeded", `owner ${p.owner} may have at most ${config.limits.sandboxesPerOwner} sandboxes, and a template build runs in one of its own; destroy some first`);
    }
    return row;
  }

  /** Claims the name and writes the build's row with its operation's intent, then runs it (`done`; see ops/template-build.ts). */
  private async begin(
    p: Principal, row: TemplateRow | undefined, spec: TemplateBuildSpec, on: readonly HostAgent[], source: Record<string, string>,
    shape: { vcpus: number; memory_mb: number } | undefined, id?: string,
  ): Promise<{ build: BuildRow; done: Promise<api.Template> }> {
    if (!on.length) throw new DenError("capacity_exhausted", "no host is up to build on");
    this.building.set(p.owner, (this.building.get(p.owner) ?? 0) + 1);
    let begun: Awaited<ReturnType<typeof templateBuildOp.begin>>;
    try {
      begun = await templateBuildOp.begin({ ctx: this.ctx }, p, row, spec, on, source, id);
    } catch (e) {
      this.release(p.owner);
      throw e;
    }
    return { build: begun.build, done: templateBuildOp.run({ ctx: this.ctx }, p, begun.op, spec, on, shape, () => this.release(p.owner)) };
  }

  /** Builds a template and answers when it is done (see `start`). */
  async create(p: Principal, req: api.CreateTemplateRequest): Promise<api.Template & { build_id: string }> {
    const { build, done } = await this.start(p, req);
    return { ...(await done), build_id: build.id };
  }

  private release(owner: string): void {
    this.building.set(owner, (this.building.get(owner) ?? 1) - 1);
    if (!this.building.get(owner)) this.building.delete(owner);
  }

  /** Cancels a build of the caller's that is still running (its host stops it; it ends `cancelled`). */
  async cancel(p: Principal, id: string): Promise<BuildRow> {
    const row = await this.ownedBuild(p, id);
    if (row.state === "building") {
      const host = this.ctx.hosts.all.find((h) => h.instance === row.host_id);
      if (host) await host.templates.cancelBuild(id);
    }
    return row;
  }

  /** A build of the caller's (an admin sees every build). */
  async ownedBuild(p: Principal, id: string): Promise<BuildRow> {
    const row = await buildStore(this.ctx.store).get(id);
    if (!row || (row.owner !== p.owner && !p.admin)) throw new DenError("not_found", `template build ${JSON.stringify(id)} does not exist`);
    return row;
  }

  /** Deletes a template its owner built; sandboxes and checkpoints made from it keep working. */
  async delete(p: Principal, name: string): Promise<void> {
    const { store } = this.ctx;
    const row = await store.templates.row(name);
    if (!row || row.deleted_at !== null || (row.owner !== p.owner && !p.admin)) {
      if (!row && (await this.hostTemplates()).some((t) => t.name === name)) {
        throw new DenError("forbidden", `template ${name} is one of this host's own templates (den template build); it is not deleted through the API`);
      }
      throw new DenError("template_not_found", `template ${JSON.stringify(name)} does not exist`);
    }
    await templateDeleteOp.run({ ctx: this.ctx }, name);
  }
}
