import { DenError, api, type HostSandboxInfo } from "@den/protocol";
import type { OperationRow, Principal, SandboxRow } from "../db/store.js";
import type { Ctx } from "../context.js";
import { serializePolicy } from "../network.js";
import { volumeMounts, type ResolvedMounts } from "../volumes.js";
import { vmFields, type OpDeps } from "./common.js";

// What every new sandbox is made of (a create's, a restore's, a fork's children): its
// settings, its terms, its row; and how a create or restore records it and makes its VM.

export type Settings = Pick<api.CreateSandboxRequest, "persistent" | "ttl_seconds" | "idle_timeout_seconds" | "on_idle" | "metadata" | "env"> & {
  /** JSON {cwd?, user?}: the template's defaults for commands (see SandboxesTable.defaults). */
  defaults?: string | null;
};

/** A template's env and command defaults for a new sandbox (an image's ENV, WORKDIR, USER), under what the request gives. */
export async function templateSettings(ctx: Ctx, template: string, req: Settings): Promise<Settings> {
  const row = await ctx.store.templates.row(template.split("@")[0]!.split(".")[0]!);
  if (!row?.run) return req;
  const { run } = JSON.parse(row.run) as { run: api.TemplateRun | null };
  if (!run) return req;
  const defaults = { ...(run.workdir ? { cwd: run.workdir } : {}), ...(run.user ? { user: run.user } : {}) };
  return { ...req, env: { ...run.env, ...req.env }, defaults: Object.keys(defaults).length ? JSON.stringify(defaults) : null };
}

/** A built-in template's other name as the template's own (`code-interpreter`), unless a template of that name exists. */
export async function builtinName(ctx: Ctx, template: string): Promise<string> {
  const [name, version] = template.split("@") as [string, string | undefined];
  const to = api.TEMPLATE_ALIASES[name];
  if (!to || (await ctx.store.templates.row(name))) return template;
  return version === undefined ? to : `${to}@${version}`;
}

/** What the API that made a sandbox settled about it: how its deadline behaves, wake on traffic, public ports (see SandboxesTable); /v1 keeps the defaults. */
export type Terms = Pick<SandboxRow, "deadline_mode" | "on_deadline" | "run_timeout_seconds" | "auto_resume" | "surface" | "public_ports">;
export const V1_TERMS: Terms = { deadline_mode: "ttl", on_deadline: "destroy", run_timeout_seconds: null, auto_resume: 0, surface: "v1", public_ports: 0 };

export const termsOf = (r: Terms): Terms => ({ deadline_mode: r.deadline_mode, on_deadline: r.on_deadline, run_timeout_seconds: r.run_timeout_seconds, auto_resume: r.auto_resume, surface: r.surface, public_ports: r.public_ports });

/** A new sandbox's record, before its VM exists (state `creating`), held by `op` (a create's, a restore's, a fork's). */
export function newRow(ctx: Ctx, p: Principal, id: string, req: Settings, template: string, network: api.NetworkPolicy, op: OperationRow, hostId: string, deadline: Terms = V1_TERMS): SandboxRow {
  const persistent = req.persistent ?? false;
  if (req.ttl_seconds === null && !persistent) throw new DenError("invalid_argument", "ttl_seconds: null (no deadline) needs persistent: true");
  const d = ctx.config.defaults;
  const ttl = req.ttl_seconds === undefined ? d.ttlSeconds : req.ttl_seconds;
  const now = ctx.clock.now();
  return {
    id, owner: p.owner, state: "creating", state_reason: "user", template, template_version: "",
    persistent: persistent ? 1 : 0, ttl_seconds: ttl, expires_at: ttl === null ? null : now + ttl * 1000,
    idle_timeout_seconds: req.idle_timeout_seconds ?? d.idleTimeoutSeconds, on_idle: req.on_idle ?? d.onIdle,
    metadata: JSON.stringify(req.metadata ?? {}), env: JSON.stringify(req.env ?? {}), defaults: req.defaults ?? null,
    vcpus: 0, memory_mb: 0, disk_mb: 0,
    created_at: now, last_activity_at: now, destroyed_at: null, hibernate_snapshot: null, hibernate_mode: null, stored_bytes: null,
    meter_since: now, meter_cpu: null, network: serializePolicy(network),
    generation: 0, op_id: op.id, op_kind: op.kind, op_since: op.created_at, host_id: hostId,
    ...deadline,
  };
}

/** A new sandbox recorded with its operation (a create's or a restore's), and how its VM is made. */
export interface NewSandbox {
  row: SandboxRow;
  op: OperationRow;
  make: () => Promise<HostSandboxInfo>;
}

type Deps = Pick<OpDeps, "ctx">;

/** Records a new sandbox and its operation together (before its queue: nobody has its id yet). */
export async function record(d: Deps, row: SandboxRow, op: OperationRow, make: () => Promise<HostSandboxInfo>, data: Record<string, unknown>, vols?: ResolvedMounts): Promise<NewSandbox> {
  const { store, ops, clock } = d.ctx;
  await store.transaction(async (tx) => {
    // Its volumes are held with its row: of two racing creates, one gets a writer's hold.
    if (vols?.holds.length) await volumeMounts(tx).take(row.id, vols.holds, clock.now(), row.host_id ?? undefined);
    await tx.sandboxes.insert(row, d.ctx.config.limits.sandboxesPerOwner);
    await tx.operations.insert(op);
    await ops.event(row.id, "creating", "user", data, tx);
  });
  ops.holdLocal(row.id);
  return { row, op, make };
}

/** Makes a recorded sandbox's VM (called in the sandbox's queue); a failure leaves it in `error`. */
export async function materialize(d: Deps, { row, op, make }: NewSandbox): Promise<SandboxRow> {
  const { ops, clock } = d.ctx;
  let info: HostSandboxInfo;
  try {
    info = await make();
  } catch (e) {
    await ops.fail(op, row.id, e, { state: "error", reason: "error", patch: { destroyed_at: clock.now() }, data: { message: (e as Error).message } });
    throw e;
  }
  return ops.finish(op, row.id, { state: "running", reason: "user", patch: { ...vmFields(info), last_activity_at: clock.now() }, result: info });
}
