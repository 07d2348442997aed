import { DenError, type HostAgent, type HostTemplate, type TemplateBuildSpec, type api, type host } from "@den/protocol";
import type { Ctx } from "../context.js";
import { buildStore, type BuildRow } from "../db/build-store.js";
import type { OperationRow, Principal, TemplateRow } from "../db/store.js";
import { templateBuildArgs } from "./args.js";
import { STOPPED, type DetachedOp, type OpDeps } from "./common.js";

export { templateBuildArgs as args };

type BuiltTemplate = host.BuiltTemplate;
type Deps = Pick<OpDeps, "ctx">;
type Shape = { vcpus: number; memory_mb: number };

/** How often a running build's log is copied from its host. */
const LOG_POLL_MS = 500;

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

/**
 * The template versions on the hosts, each once (a version is the same build everywhere:
 * its id is its recipe's hash); current if it is current on any reachable host.
 */
export async function hostTemplates(ctx: Ctx): Promise<HostTemplate[]> {
  const seen = new Map<string, HostTemplate>();
  for (const r of await ctx.hosts.each((h) => h.templates.list())) {
    if (!r.ok) continue;
    for (const t of r.value) {
      const k = `${t.name}@${t.version}`;
      const had = seen.get(k);
      seen.set(k, had ? { ...had, current: had.current || t.current } : t);
    }
  }
  return [...seen.values()];
}

// ---- forward ----

/**
 * The forward path's first half (the caller checked the request and counts the build as
 * running): claims the name and writes the build's row with its operation's intent. A build
 * announced before (under `id`) becomes this one.
 */
export async function begin(d: Deps, p: Principal, row: TemplateRow | undefined, spec: TemplateBuildSpec, on: readonly HostAgent[], source: Record<string, string>, id?: string): Promise<{ op: OperationRow; build: BuildRow }> {
  const { ops, clock } = d.ctx;
  const op = { ...ops.newOp("template_build", null, "user", { name: spec.name, previous: row ? { deleted_at: row.deleted_at } : null }), ...(id ? { id } : {}) };
  const build: BuildRow = {
    id: op.id, owner: p.owner, name: spec.name, state: "building", source: JSON.stringify(source), version: null, error: null,
    host_id: on[0]!.instance, created_at: clock.now(), finished_at: null,
  };
  await ops.beginDetached(op, async (tx) => {
    await tx.templates.claim(spec.name, p.owner, clock.now());
    const builds = buildStore(tx);
    // A build announced before (E2B's) becomes this one; otherwise its row is new.
    if (id && (await builds.get(id))) await builds.begin(id, on[0]!.instance);
    else await builds.insert(build);
  });
  return { op, build };
}

/**
 * The build itself, after its intent is durable: hosts build, the log is kept, the row and
 * the name end as the build does. `release`: the build no longer counts as the owner's
 * running one (before it is metered).
 */
export async function run(
  d: Deps, p: Principal, op: OperationRow, spec: TemplateBuildSpec, on: readonly HostAgent[],
  sourceShape: Shape | undefined, release: () => void,
): Promise<api.Template> {
  const { store, ops, clock } = d.ctx;
  const name = spec.name;
  const started = clock.now();
  let shape: Shape | undefined;
  let ended = false;
  const pump = pumpLogs(d, op.id, on[0]!, () => ended);
  try {
    const t = await buildOnHosts(d, op.id, spec, on).finally(() => (ended = true));
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
    shape = sourceShape ?? (await defaultShape(d, spec.fromTemplate));
    const err = e instanceof DenError ? e : new DenError("internal", (e as Error).message);
    await buildStore(store).finish(op.id, {
      state: err.code === "aborted" ? "cancelled" : "error", version: null, finished_at: clock.now(),
      error: JSON.stringify({ code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) }),
    });
    await giveBack(d, op.args, e, op);
    throw e;
  } finally {
    release();
    if (shape) await meterBuild(d, op.id, p.owner, started, shape).catch((e: unknown) => d.ctx.log.warn({ err: e }, `template build ${op.id} was not metered`));
  }
}

/** Copies a build's log from its host into the database as it grows, until the build has ended and the host has no more. */
async function pumpLogs(d: Deps, id: string, host: HostAgent, ended: () => boolean): Promise<void> {
  const builds = buildStore(d.ctx.store);
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

/** The building sandbox's running time, as a usage segment of the owner's (a reused version built nothing). */
async function meterBuild(d: Deps, id: string, owner: string, start: number, shape: Shape): Promise<void> {
  const end = d.ctx.clock.now();
  await d.ctx.store.usage.insert({
    sandbox_id: id, owner, state: "running", start_ms: start, end_ms: Math.max(end, start + 1),
    vcpus: shape.vcpus, memory_mb: shape.memory_mb, host_cpu_ms: 0, den_cpu_ms: 0, stored_bytes: 0,
  });
}

/** The shape a failed build's sandbox had: its source template's. */
async function defaultShape(d: Deps, from: string | undefined): Promise<Shape | undefined> {
  const name = from ?? "base";
  return (await hostTemplates(d.ctx)).find((t) => `${t.name}@${t.version}` === name || (t.name === name && t.current));
}

/**
 * Builds on each of `on` (from a checkpoint: its sandbox's host, which has the template
 * version the checkpoint needs). Built on at least one is a success: a host without the
 * source template, or down, holds no sandbox of the new one (placement skips it).
 */
async function buildOnHosts(d: Deps, op: string, spec: TemplateBuildSpec, on: readonly HostAgent[]): Promise<BuiltTemplate> {
  const built = await Promise.all(on.map(async (h) => {
    try {
      return { ok: true as const, t: await h.templates.build(op, spec) };
    } catch (error) {
      return { ok: false as const, error };
    }
  }));
  const first = built.find((b) => b.ok);
  if (!first) throw (built[0] as { error: unknown }).error;
  for (const [i, b] of built.entries()) if (b.ok) d.ctx.shared.publishFrom(on[i]!);
  for (const [i, b] of built.entries()) if (!b.ok) d.ctx.log.warn({ err: b.error, host: on[i]!.instance }, `template ${spec.name} was not built on host ${on[i]!.instance}`);
  return first.t;
}

// ---- the outcomes, each written once (the forward path and the crash path end the same way) ----

/** After a build that made nothing usable: the name goes back to how it was. */
async function giveBack(d: Deps, args: string, error: unknown, op: OperationRow): Promise<void> {
  const { name, previous } = JSON.parse(args) as { name: string; previous: { deleted_at: number | null } | null };
  const built = (await hostTemplates(d.ctx)).some((t) => t.name === name && t.current);
  await d.ctx.ops.settleDetached(op, built ? undefined : error, async (tx) => {
    if (built) return;
    if (previous) await tx.templates.markDeleted(name, previous.deleted_at ?? d.ctx.clock.now());
    else await tx.templates.drop(name);
  });
}

// ---- after a crash ----

/** A build a restart found unfinished (its operation settled by recovery): it ends as an error. */
async function interrupted(d: Deps, id: string): Promise<void> {
  // A host that is still building it (the control plane died, not the host) stops: nobody waits for its result.
  await d.ctx.hosts.each((h) => h.templates.cancelBuild(id));
  await buildStore(d.ctx.store).finish(id, {
    state: "error", version: null, finished_at: d.ctx.clock.now(),
    error: JSON.stringify({ code: "aborted", message: "the build was interrupted by a restart of Den; start it again" }),
  });
}

/** A template build cut short: its build row ends interrupted and the name goes back to what it was. */
export const templateBuild: DetachedOp = {
  async settle(d: OpDeps, op: OperationRow): Promise<void> {
    await interrupted(d, op.id);
    await giveBack(d, op.args, new Error(STOPPED), op);
  },
};
