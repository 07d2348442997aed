import { DenError, type HostAgent, type HostTemplate, type TemplateBuildSpec, type api, type host } from "@den/protocol";

type BuiltTemplate = host.BuiltTemplate;

/** How often a running build's log is copied from its host. */
const LOG_POLL_MS = 500;
import { effectivePolicy } from "./network.js";
import { buildStore, type BuildRow } from "./db/build-store.js";
import { contextRef, withinStoredBytes } from "./build-contexts.js";
import { dockerfileSpec, imageSpec, sourceOf } from "./build-plan.js";
import type { Principal, TemplateRow } from "./db/store.js";
import { hostOfId, storedRef, type Ctx } from "./context.js";
import type { Checkpoints } from "./checkpoints.js";

/** A host's template as the API shows it, with who owns it. */
export function toApiTemplate(t: HostTemplate, owner: string | null): api.Template {
  return {
    name: t.name, version: t.version, current: t.current, owner, vcpus: t.vcpus, memory_mb: t.memory_mb, disk_mb: t.disk_mb, created_at: t.created_at,
    source: t.source ?? null, run: t.run ? apiRun(t.run) : null,
  };
}

function apiRun(r: host.TemplateRun): api.TemplateRun {
  return { env: r.env, workdir: r.workdir, user: r.user, start_cmd: r.startCmd, ready_cmd: r.readyCmd };
}

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
  async hostTemplates(): Promise<HostTemplate[]> {
    const seen = new Map<string, HostTemplate>();
    for (const r of await this.ctx.hosts.each((h) => h.templates.list())) {
      if (!r.ok) continue;
      for (const t of r.value) {
        const k = `${t.name}@${t.version}`;
        const had = seen.get(k);
        seen.set(k, had ? { ...had, current: had.current || t.current } : t);
      }
    }
    return [...seen.values()];
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

  /** Claims the name and writes the build's row with its operation's intent, then runs it (`done`). */
  private async begin(
    p: Principal, row: TemplateRow | undefined, spec: TemplateBuildSpec, on: readonly HostAgent[], source: Record<string, string>,
    shape: { vcpus: number; memory_mb: number } | undefined, id?: string,
  ): Promise<{ build: BuildRow; done: Promise<api.Template> }> {
    const { ops, clock } = this.ctx;
    if (!on.length) throw new DenError("capacity_exhausted", "no host is up to build on");
    this.building.set(p.owner, (this.building.get(p.owner) ?? 0) + 1);
    const op = { ...ops.newOp("template_build", null, "user", { name: spec.name, previous: row ? { deleted_at: row.deleted_at } : null }), ...(id ? { id } : {}) };
    const build: BuildRow = {
      id: op.id, owner: p.owner, name: spec.name, state: "building", source: JSON.stringify(source), version: null, error: null,
      host_id: on[0]!.instance, created_at: clock.now(), finished_at: null,
    };
    try {
      await ops.beginDetached(op, async (tx) => {
        await tx.templates.claim(spec.name, p.owner, clock.now());
        const builds = buildStore(tx);
        // A build announced before (E2B's) becomes this one; otherwise its row is new.
        if (id && (await builds.get(id))) await builds.begin(id, on[0]!.instance);
        else await builds.insert(build);
      });
    } catch (e) {
      this.release(p.owner);
      throw e;
    }
    return { build, done: this.run(p, spec.name, op, spec, on, shape) };
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

  /** The build itself, after its intent is durable: hosts build, the log is kept, the row and the name end as the build does. */
  private async run(
    p: Principal, name: string, op: Parameters<Ctx["ops"]["settleDetached"]>[0], spec: TemplateBuildSpec, on: readonly HostAgent[],
    sourceShape: { vcpus: number; memory_mb: number } | undefined,
  ): Promise<api.Template> {
    const { store, ops, clock } = this.ctx;
    const started = clock.now();
    let shape: { vcpus: number; memory_mb: number } | undefined;
    let ended = false;
    const pump = this.pumpLogs(op.id, on[0]!, () => ended);
    try {
      const t = await this.buildOnHosts(op.id, spec, on).finally(() => (ended = true));
      shape = t.reused ? undefined : t;
      await pump;
      await store.transaction(async (tx) => {
        await tx.templates.setRun(name, JSON.stringify({ source: t.source ?? null, run: t.run ? apiRun(t.run) : null }));
        await buildStore(tx).finish(op.id, { state: "ready", version: t.version, error: null, finished_at: clock.now() });
      });
      await ops.settleDetached(op, undefined);
      return toApiTemplate(t, p.owner);
    } catch (e) {
      await pump.catch(() => undefined);
      shape = sourceShape ?? (await this.defaultShape(spec.fromTemplate));
      const err = e instanceof DenError ? e : new DenError("internal", (e as Error).message);
      await buildStore(store).finish(op.id, {
        state: err.code === "aborted" ? "cancelled" : "error", version: null, finished_at: clock.now(),
        error: JSON.stringify({ code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) }),
      });
      await this.giveBack(op.args, e, op);
      throw e;
    } finally {
      this.release(p.owner);
      if (shape) await this.meterBuild(op.id, p.owner, started, shape).catch((e: unknown) => this.ctx.log.warn({ err: e }, `template build ${op.id} was not metered`));
    }
  }

  /** Copies a build's log from its host into the database as it grows, until the build has ended and the host has no more. */
  private async pumpLogs(id: string, host: HostAgent, ended: () => boolean): Promise<void> {
    const builds = buildStore(this.ctx.store);
    let seq = await builds.nextSeq(id);
    let from = 0;
    for (;;) {
      const last = ended();
      const page = await host.templates.buildLog(id, from).catch(() => undefined);
      if (page) {
        if (page.lines.length) seq = await builds.append(id, seq, page.lines);
        from = page.next;
        if (page.lines.length && !page.done) continue;
      }
      if (last || (page?.done && ended())) return;
      await new Promise((r) => setTimeout(r, LOG_POLL_MS));
    }
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

  /** The building sandbox's running time, as a usage segment of the owner's (a reused version built nothing). */
  private async meterBuild(id: string, owner: string, start: number, shape: { vcpus: number; memory_mb: number }): Promise<void> {
    const end = this.ctx.clock.now();
    await this.ctx.store.usage.insert({
      sandbox_id: id, owner, state: "running", start_ms: start, end_ms: Math.max(end, start + 1),
      vcpus: shape.vcpus, memory_mb: shape.memory_mb, host_cpu_ms: 0, den_cpu_ms: 0, stored_bytes: 0,
    });
  }

  /** The shape a failed build's sandbox had: its source template's. */
  private async defaultShape(from: string | undefined): Promise<{ vcpus: number; memory_mb: number } | undefined> {
    const name = from ?? "base";
    return (await this.hostTemplates()).find((t) => `${t.name}@${t.version}` === name || (t.name === name && t.current));
  }

  /**
   * Builds on each of `on` (from a checkpoint: its sandbox's host, which has the template
   * version the checkpoint needs). Built on at least one is a success: a host without the
   * source template, or down, holds no sandbox of the new one (placement skips it).
   */
  private async buildOnHosts(op: string, spec: TemplateBuildSpec, on: readonly HostAgent[]): Promise<BuiltTemplate> {
    const built = await Promise.all(on.map(async (h) => {
      try {
        return { ok: true as const, t: await h.templates.build(op, spec) };
      } catch (error) {
        return { ok: false as const, error };
      }
    }));
    const first = built.find((b) => b.ok);
    if (!first) throw (built[0] as { error: unknown }).error;
    for (const [i, b] of built.entries()) if (b.ok) this.ctx.shared.publishFrom(on[i]!);
    for (const [i, b] of built.entries()) if (!b.ok) this.ctx.log.warn({ err: b.error, host: on[i]!.instance }, `template ${spec.name} was not built on host ${on[i]!.instance}`);
    return first.t;
  }

  /** A build a restart found unfinished (its operation settled by recovery): it ends as an error. */
  async interrupted(id: string): Promise<void> {
    // A host that is still building it (the control plane died, not the host) stops: nobody waits for its result.
    await this.ctx.hosts.each((h) => h.templates.cancelBuild(id));
    await buildStore(this.ctx.store).finish(id, {
      state: "error", version: null, finished_at: this.ctx.clock.now(),
      error: JSON.stringify({ code: "aborted", message: "the build was interrupted by a restart of Den; start it again" }),
    });
  }

  /** After a build that made nothing usable: the name goes back to how it was. */
  async giveBack(args: string, error: unknown, op: Parameters<Ctx["ops"]["settleDetached"]>[0]): Promise<void> {
    const { name, previous } = JSON.parse(args) as { name: string; previous: { deleted_at: number | null } | null };
    const built = (await this.hostTemplates()).some((t) => t.name === name && t.current);
    await this.ctx.ops.settleDetached(op, built ? undefined : error, async (tx) => {
      if (built) return;
      if (previous) await tx.templates.markDeleted(name, previous.deleted_at ?? this.ctx.clock.now());
      else await tx.templates.drop(name);
    });
  }

  /** Deletes a template its owner built; sandboxes and checkpoints made from it keep working. */
  async delete(p: Principal, name: string): Promise<void> {
    const { store, ops, clock } = this.ctx;
    const row = await store.templates.row(name);
    if (!row || row.deleted_at !== null || (row.owner !== p.owner && !p.admin)) {
      if (!row && (await this.hostTemplates()).some((t) => t.name === name)) {
        throw new DenError("forbidden", `template ${name} is one of this host's own templates (den template build); it is not deleted through the API`);
      }
      throw new DenError("template_not_found", `template ${JSON.stringify(name)} does not exist`);
    }
    const op = ops.newOp("template_delete", null, "user", { name });
    await ops.beginDetached(op, (tx) => tx.templates.markDeleted(name, clock.now()));
    await this.deleteOnHosts(name);
    await ops.settleDetached(op, undefined);
  }

  /** Retires a template on every host (one that is down is told again by the next start's recovery: the row stays deleted). */
  async deleteOnHosts(name: string): Promise<void> {
    const failed = (await this.ctx.hosts.each((h) => h.templates.delete(name))).find((r) => !r.ok);
    if (failed && !failed.ok) throw failed.error;
  }
}
