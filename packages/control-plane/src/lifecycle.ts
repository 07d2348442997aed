import { DenError, api } from "@den/protocol";
import { newId } from "@den/protocol";
import { faultPoint } from "@den/store";
import type { HostAgent, HostSandboxInfo } from "@den/protocol";
import { NO_NETWORK, effectivePolicy, serializePolicy } from "./network.js";
import { networkOf, type CheckpointRow, type OperationRow, type Principal, type SandboxRow, type Store } from "./db/store.js";
import { hostOfId, modeOf, pendingStored, refOf, storedRef, type Ctx, type HibernateMode, type Measure } from "./context.js";
import type { NetworkPolicies } from "./network-policy.js";
import type { Reason } from "./operations.js";
import type { Serializer } from "./serializer.js";
import * as destroyOp from "./ops/destroy.js";
import * as hibernateOp from "./ops/hibernate.js";
import { placeWithVolumes, resolveMounts, specsOf, volumeMounts, volumeStore, type ResolvedMounts } from "./volumes.js";

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
async function builtinName(ctx: Ctx, template: string): Promise<string> {
  const [name, version] = template.split("@") as [string, string | undefined];
  const to = api.TEMPLATE_ALIASES[name];
  if (!to || (await ctx.store.templates.row(name))) return template;
  return version === undefined ? to : `${to}@${version}`;
}

/** What the API that made a sandbox settled about it: how its deadline behaves, wake on traffic, public ports (see SandboxesTable); /v1 keeps the defaults. */
export type Terms = Pick<SandboxRow, "deadline_mode" | "on_deadline" | "run_timeout_seconds" | "auto_resume" | "surface" | "public_ports">;
const V1_TERMS: Terms = { deadline_mode: "ttl", on_deadline: "destroy", run_timeout_seconds: null, auto_resume: 0, surface: "v1", public_ports: 0 };
/**
 * The deadline after a sandbox hibernates or wakes. A `running`-mode deadline (E2B's
 * timeout) stops while it sleeps: hibernated, what is left is the retention limit; a wake
 * starts a new deadline (`timeoutSeconds`, else the one it was made with).
 */
export function deadlineAfter(row: SandboxRow, to: "hibernated" | "running", now: number, retentionSeconds: number, timeoutSeconds?: number): Partial<SandboxRow> {
  if (row.deadline_mode !== "running") return {};
  if (to === "hibernated") return row.state === "running" ? { expires_at: now + retentionSeconds * 1000 } : {};
  const t = timeoutSeconds ?? row.run_timeout_seconds ?? row.ttl_seconds;
  return t === null ? {} : { expires_at: now + t * 1000 };
}

export const termsOf = (r: Terms): Terms => ({ deadline_mode: r.deadline_mode, on_deadline: r.on_deadline, run_timeout_seconds: r.run_timeout_seconds, auto_resume: r.auto_resume, surface: r.surface, public_ports: r.public_ports });

export const vmFields = (i: HostSandboxInfo) => ({ template: i.template, template_version: i.templateVersion, vcpus: i.vcpus, memory_mb: i.memoryMb, disk_mb: i.diskMb });

/**
 * The sandbox state machine: create, restore, destroy, hibernate, wake, recover, fork,
 * set timeout. Each is an operation (see operations.ts): its intent, with every id it
 * will produce, commits before the host is asked, and nothing the records still point at
 * is removed before the records stop pointing at it.
 */
/** How long a cold wake waits for a host short of memory to make room (the reaper's passes relieve it). */
const WAKE_ROOM_WAIT_MS = 30_000;

/**
 * MiB to free for a wake a host refused (the refusal's details): its charged memory over
 * capacity by what it would add, or its shortfall under the reserve plus a quarter of the
 * guest's RAM (about what a woken sandbox holds, so the wake does not put it short again).
 */
function roomToMake(d: Record<string, unknown>, memoryMb: number): number {
  const n = (k: string) => (typeof d[k] === "number" ? d[k] : undefined);
  const [used, cap, asked, avail, reserve] = [n("used_mb"), n("capacity_mb"), n("requested_mb"), n("available_mb"), n("reserve_mb")];
  if (d.resource === "memory" && used !== undefined && cap !== undefined) return Math.max(1, used + (asked ?? memoryMb) - cap);
  if (d.resource === "memory_pressure" && avail !== undefined && reserve !== undefined) return Math.max(1, reserve - avail) + Math.ceil(memoryMb / 4);
  return memoryMb;
}

export class Lifecycle {
  constructor(private readonly ctx: Ctx, private readonly queue: Serializer, private readonly network: NetworkPolicies) {}

  /** What the operations' modules (ops/) run with. */
  private get opDeps() {
    return { ctx: this.ctx, lifecycle: this, network: this.network };
  }

  /** Refuses a sandbox (or `adding` of them) over the owner's limit. */
  async quota(p: Principal, adding = 1): Promise<void> {
    const max = this.ctx.config.limits.sandboxesPerOwner;
    if ((await this.ctx.store.sandboxes.countLive(p.owner)) + adding > max) {
      throw new DenError("quota_exceeded", `owner ${p.owner} may have at most ${max} sandboxes; destroy some first`);
    }
  }

  /** A new checkpoint or cold snapshot is refused once the owner's stored bytes reach the quota. */
  async storeQuota(owner: string): Promise<void> {
    const max = this.ctx.config.limits.storedBytesPerOwner;
    const used = await this.ctx.store.snapshots.storedBytes(owner);
    if (used >= max) {
      throw new DenError("quota_exceeded", `owner ${owner} keeps ${used} bytes in the snapshot store, the quota is ${max}; delete checkpoints or destroy hibernated sandboxes first`, { stored_bytes: used, quota_bytes: max });
    }
  }

  /** A new sandbox's record, before its VM exists (state `creating`), held by `op`. */
  /** @internal A new sandbox row (used by forks too). */
  newRow(p: Principal, id: string, req: Settings, template: string, network: api.NetworkPolicy, op: OperationRow, hostId: string, deadline: Terms = V1_TERMS): SandboxRow {
    const persistent = req.persistent ?? false;
    if (req.ttl_seconds === null && !persistent) throw new DenError("invalid_argument", "ttl_seconds: null (no deadline) needs persistent: true");
    const d = this.ctx.config.defaults;
    const ttl = req.ttl_seconds === undefined ? d.ttlSeconds : req.ttl_seconds;
    const now = this.ctx.clock.now();
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

  /** Records a new sandbox and its operation together, then makes its VM; a failure leaves it in `error`. */
  private async materialize(row: SandboxRow, op: OperationRow, make: () => Promise<HostSandboxInfo>, data: Record<string, unknown>, vols?: ResolvedMounts): Promise<SandboxRow> {
    const { store, ops, clock } = this.ctx;
    await store.transaction(async (tx) => {
      // Its volumes are held with its row: of two racing creates, one gets a writer's hold.
      if (vols?.holds.length) await volumeMounts(tx).take(row.id, vols.holds, clock.now(), row.host_id ?? undefined);
      await tx.sandboxes.insert(row, this.ctx.config.limits.sandboxesPerOwner);
      await tx.operations.insert(op);
      await ops.event(row.id, "creating", "user", data, tx);
    });
    ops.holdLocal(row.id);
    return this.queue.run(row.id, async () => {
      let info: HostSandboxInfo;
      try {
        info = await make();
      } catch (e) {
        await ops.fail(op, row.id, e, { state: "error", reason: "error", patch: { destroyed_at: clock.now() }, data: { message: (e as Error).message } });
        throw e;
      }
      return ops.finish(op, row.id, { state: "running", reason: "user", patch: { ...vmFields(info), last_activity_at: clock.now() }, result: info });
    });
  }

  async create(p: Principal, req: api.CreateSandboxRequest, deadline: Terms = V1_TERMS): Promise<SandboxRow> {
    const { config, hosts, ops, metrics } = this.ctx;
    const lim = config.limits;
    if ((req.vcpus ?? 0) > lim.vcpusPerSandbox) throw new DenError("invalid_argument", `vcpus: at most ${lim.vcpusPerSandbox} on this server`);
    if ((req.memory_mb ?? 0) > lim.memoryMbPerSandbox) throw new DenError("invalid_argument", `memory_mb: at most ${lim.memoryMbPerSandbox} on this server`);
    if ((req.disk_mb ?? 0) > lim.diskMbPerSandbox) throw new DenError("invalid_argument", `disk_mb: at most ${lim.diskMbPerSandbox} on this server`);
    await this.quota(p);
    const vols = await resolveMounts(this.ctx, p.owner, req.volumes);
    const template = await builtinName(this.ctx, req.template ?? config.defaults.template);
    const shape = { ...(req.vcpus ? { vcpus: req.vcpus } : {}), ...(req.memory_mb ? { memoryMb: req.memory_mb } : {}) };
    // A create no host can hold is refused before it leaves a record behind.
    const pull = await this.ctx.shared.pullFor(template);
    const host = await placeWithVolumes(this.ctx, vols.holds.map((h) => h.volumeId), (only, exclude) => hosts.place({ template, ...shape }, { ...(pull ? { pull } : {}), only, ...(exclude ? { exclude } : {}) }));
    const network = effectivePolicy(req.network, config.network);
    const id = newId("sbx");
    const op = { ...ops.newOp("create", id, "user", { template, ...shape, ...(req.disk_mb ? { diskMb: req.disk_mb } : {}) }), host: host.instance };
    const row = this.newRow(p, id, await templateSettings(this.ctx, template, req), template, network, op, host.instance, deadline);
    return this.materialize(row, op, () => metrics.time("create", "", () => host.vms.create(op.id, {
      id, template, ...shape, ...(req.disk_mb ? { diskMb: req.disk_mb } : {}), network, ...(vols.holds.length ? { volumes: specsOf(vols.holds) } : {}),
    })), { template }, vols);
  }

  /** A new, independent sandbox with the checkpoint's state. */
  async restore(p: Principal, cp: CheckpointRow, req: api.RestoreCheckpointRequest, deadline: Terms = V1_TERMS): Promise<SandboxRow> {
    const { config, ops, metrics, meter } = this.ctx;
    await this.quota(p);
    // The checkpoint's own mounts are not carried: its volumes are not part of it. It mounts what is named here.
    const vols = await resolveMounts(this.ctx, p.owner, req.volumes);
    // Preferably on the host of the sandbox it was taken from (it surely has the template version); else any that has it and room.
    const origin = (await this.ctx.store.sandboxes.get(cp.sandbox_id))?.host_id ?? null;
    const host = await placeWithVolumes(this.ctx, vols.holds.map((h) => h.volumeId), (only, exclude) => this.placeStored(cp, origin, undefined, only, exclude));
    const network = effectivePolicy(req.network ?? networkOf(cp), config.network);
    const id = newId("sbx");
    const op = { ...ops.newOp("restore", id, "user", { checkpoint: cp.id }), host: host.instance };
    const row = this.newRow(p, id, await templateSettings(this.ctx, cp.template, { ...req, metadata: { ...(req.metadata ?? {}), restored_from: cp.id } }), cp.template, network, op, host.instance, deadline);
    const from = await storedRef(this.ctx, cp.id);
    return this.materialize(row, op, () => metrics.time("restore", "", () => meter.work(id, () => host.vms.restore(op.id, id, from, network, vols.holds.length ? specsOf(vols.holds) : undefined))), { checkpoint: cp.id }, vols);
  }

  /**
   * Where a stored snapshot (a checkpoint, a cold sandbox) comes back to life: `origin` (the
   * host it was made on, whose caches may still hold its files) if it is up, open and has
   * room; else any host of the same kind (QEMU version, accelerator, CPU model, arch: what a
   * snapshot needs of the host it is restored on) that has its template version and room.
   */
  async placeStored(s: Pick<SandboxRow, "template" | "template_version" | "vcpus" | "memory_mb">, origin: string | null, reserved?: Map<string, number>, only?: string | null, exclude?: string): Promise<HostAgent> {
    const kind = origin ? (await this.ctx.store.hosts.get(origin))?.kind ?? undefined : undefined;
    const template = `${s.template}@${s.template_version}`;
    const pull = await this.ctx.shared.pullFor(template);
    return this.ctx.hosts.place({ template, vcpus: s.vcpus, memoryMb: s.memory_mb }, { prefer: origin, ...(kind ? { kind } : {}), ...(reserved ? { reserved } : {}), ...(pull ? { pull } : {}), ...(only ? { only } : {}), ...(exclude ? { exclude } : {}) });
  }

  /**
   * A host for a cold wake. Where no host has the memory for it, the wake waits (up to
   * WAKE_ROOM_WAIT_MS) while its last host's least recently active sandboxes are
   * cold-hibernated, rather than failing: the sandbox being woken is the most recently used
   * one there is.
   */
  private async placeForWake(row: SandboxRow, deadline: number, only: string | null, exclude?: string): Promise<HostAgent> {
    for (;;) {
      try {
        return await this.placeStored(row, row.host_id, undefined, only, exclude);
      } catch (e) {
        // (Details cross the host protocol whole.) Only memory is made room for: a host out of
        // vCPUs or disk says so at once.
        const d = e instanceof DenError && e.code === "capacity_exhausted" ? e.details ?? {} : {};
        if ((d.resource !== "memory_pressure" && d.resource !== "memory") || performance.now() > deadline) throw e;
        // Room on its last host (where its files may still be cached): its least recently active others go cold.
        const home = this.ctx.hosts.has(row.host_id) ? this.ctx.hosts.of(row).instance : undefined;
        const waited = home && this.makeRoom ? await this.makeRoom(home, roomToMake(d, row.memory_mb), row.id, d.resource === "memory" ? "charged" : "private") : 0;
        if (!waited) await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  /** Cold-hibernates a host's least recently active sandboxes until `needMb` is free (the reaper's; set by the control plane). */
  makeRoom?: (hostId: string, needMb: number, except: string, measure: Measure) => Promise<number>;

  async destroy(id: string, reason: Reason): Promise<SandboxRow> {
    return this.queue.run(id, () => destroyOp.run(this.opDeps, id, reason));
  }

  /** A destroyed sandbox's cold snapshot is no longer needed (the garbage collector takes it). */
  async releaseHeld(tx: Store, row: SandboxRow): Promise<void> {
    if (row.hibernate_snapshot && modeOf(row) === "cold") await tx.snapshots.release(row.hibernate_snapshot, this.ctx.clock.now());
  }

  /** Deletes a warm hibernation's local snapshot, once no record points at it. */
  async dropWarm(row: SandboxRow): Promise<void> {
    if (!row.hibernate_snapshot || modeOf(row) !== "warm") return;
    try {
      await this.ctx.hosts.of(row).snapshots.dropLocal(row.hibernate_snapshot);
    } catch (err) {
      this.ctx.log.warn({ err }, `could not delete snapshot ${row.hibernate_snapshot}`);
    }
  }

  async hibernate(id: string, reason: Reason, mode: HibernateMode = "warm"): Promise<SandboxRow> {
    return this.queue.run(id, () => hibernateOp.run(this.opDeps, id, reason, mode));
  }

  /** After a cold hibernate committed: the VM and its local files go (the next start retries a failure). */
  async removeVm(row: Pick<SandboxRow, "id" | "host_id">, warmSnapshot: string | null): Promise<void> {
    const id = row.id;
    try {
      const host = this.ctx.hosts.of(row);
      await host.vms.destroy(id);
      if (warmSnapshot) await host.snapshots.dropLocal(warmSnapshot);
    } catch (err) {
      this.ctx.log.warn({ err }, `cold sandbox ${id}: its VM could not be removed yet`);
    }
  }

  /** The deadline fields of a sandbox that hibernates now. */
  pausedDeadline(row: SandboxRow): Partial<SandboxRow> {
    return deadlineAfter(row, "hibernated", this.ctx.clock.now(), this.ctx.config.defaults.pausedRetentionSeconds);
  }

  /** `timeoutSeconds`: a deadline that counts only while running starts again at this (else at the one it was made with). */
  async wake(id: string, reason: Reason, timeoutSeconds?: number): Promise<SandboxRow> {
    return this.queue.run(id, () => this.wakeNow(id, reason, timeoutSeconds));
  }

  /**
   * Wakes a hibernated sandbox by booting it from its disk (E2B's resume with `memory:
   * false`): whatever memory it kept is given up first, by a disk hibernate of its own (a
   * cold one is restored first to have its disk back). Each step is an operation of its own.
   */
  async wakeByBoot(id: string, reason: Reason, timeoutSeconds?: number): Promise<SandboxRow> {
    return this.queue.run(id, async () => {
      let row = (await this.ctx.store.sandboxes.get(id))!;
      if (row.state !== "hibernated") return this.wakeNow(id, reason, timeoutSeconds);
      if (modeOf(row) === "cold") row = await this.wakeNow(id, reason);
      if (row.state === "running" || modeOf(row) === "warm") await hibernateOp.toDisk(this.opDeps, row, reason);
      return this.wakeNow(id, reason, timeoutSeconds);
    });
  }

  /**
   * A wake; a cold one whose host refused it for memory after all (another wake took the room
   * made for it between placement and restore; nothing was restored) is placed again, room
   * made again, until WAKE_ROOM_WAIT_MS is over.
   */
  private async wakeNow(id: string, reason: Reason, timeoutSeconds?: number): Promise<SandboxRow> {
    const deadline = performance.now() + WAKE_ROOM_WAIT_MS;
    for (;;) {
      try {
        return await this.wakeAttempt(id, reason, deadline, timeoutSeconds);
      } catch (e) {
        const resource = e instanceof DenError && e.code === "capacity_exhausted" ? e.details?.resource : undefined;
        const cold = modeOf((await this.ctx.store.sandboxes.get(id))!) === "cold";
        if (!cold || (resource !== "memory" && resource !== "memory_pressure") || performance.now() > deadline) throw e;
      }
    }
  }

  private async wakeAttempt(id: string, reason: Reason, deadline: number, timeoutSeconds?: number): Promise<SandboxRow> {
    const { store, ops, metrics, meter, clock } = this.ctx;
    const row = (await store.sandboxes.get(id))!;
    if (row.state === "running") return row;
    if (row.state !== "hibernated") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; it cannot be woken`);
    const mode = modeOf(row);
    const snapshot = row.hibernate_snapshot;
    if (mode === "cold" && !snapshot) throw new DenError("sandbox_not_running", `sandbox ${id} has no snapshot to wake from`);
    // A cold wake mounts its volumes again: those it let go of are held again with the intent
    // (a 409 if another sandbox holds one as a writer meanwhile), those it kept come back in their slots.
    const mounts = mode === "cold" ? await volumeMounts(store).mountsOf(id) : [];
    const heldBefore = mounts.filter((m) => m.held === 1).map((m) => m.volume_id);
    const volumeIds = mounts.map((m) => m.volume_id);
    // Warm and disk: on its host (its memory snapshot or its disk is there). Cold: everything
    // is in the store, so any compatible host with room will do, its last one first (the
    // host of its volumes, if it has any: else they are brought where it wakes).
    const host = mode === "cold"
      ? await placeWithVolumes(this.ctx, volumeIds, (only, exclude) => this.placeForWake(row, deadline, only, exclude), id)
      : this.ctx.hosts.of(row);
    const op = { ...ops.newOp("wake", id, reason, { mode, snapshot, host: host.instance, ...(mounts.length ? { held_volumes: heldBefore } : {}) }), host: host.instance };
    // The row names the host before the host is asked: a crash leaves nothing it cannot find.
    await ops.begin(row, op, async (tx) => {
      if (host.instance !== row.host_id) await tx.sandboxes.update(id, { host_id: host.instance });
      if (mounts.length) await volumeMounts(tx).retake(id, this.ctx.clock.now(), host.instance);
    });
    if (mode === "cold") faultPoint("wake-cold-after-intent");
    const t0 = performance.now();
    try {
      await metrics.time("wake", mode, () => meter.work(id, async () => {
        if (mode === "warm") await host.vms.wakeWarm(op.id, id, snapshot);
        // A failed boot leaves it shut down, its disk as it was.
        else if (mode === "disk") await host.vms.wakeDisk(op.id, id);
        else await host.vms.restore(op.id, id, await storedRef(this.ctx, snapshot!), undefined, mounts.length ? specsOf(mounts.map((m) => ({ volumeId: m.volume_id, path: m.path, readOnly: m.read_only === 1 }))) : undefined);
      }));
    } catch (e) {
      // It stays hibernated: its snapshot is untouched, and what it held again is let go of.
      if (mode === "cold") await host.vms.destroy(id).catch(() => undefined);
      await ops.fail(op, id, e, {}, mounts.length ? (tx) => volumeMounts(tx).release(id, heldBefore) : undefined);
      throw e;
    }
    if (mode === "cold") faultPoint("wake-cold-after-restore");
    if (mode === "disk") faultPoint("wake-disk-after-boot");
    // The stored copy is released in the same transaction; the garbage collector deletes it later.
    const done = await ops.finish(op, id, {
      state: "running", reason, patch: { hibernate_snapshot: null, hibernate_mode: null, stored_bytes: null, last_activity_at: clock.now(), ...deadlineAfter(row, "running", clock.now(), 0, timeoutSeconds) },
      data: { mode, ms: Math.round(performance.now() - t0) },
    }, mode === "cold" ? (tx) => tx.snapshots.release(snapshot!, clock.now()) : undefined);
    if (mode === "cold") faultPoint("wake-cold-after-commit");
    // Not waited for: the woken sandbox needs it no more, and one this misses (a crash) is an
    // unreferenced snapshot the garbage collector's host sweep deletes.
    void this.dropWarm(row);
    await this.network.restore(done);
    return done;
  }

  /**
   * A new deadline `seconds` from now. `extendOnly`: never earlier than the one it has (E2B's
   * connect). A sandbox whose deadline counts only while running keeps its retention limit
   * while hibernated: the new timeout applies from its next wake.
   */
  async setTimeout(id: string, seconds: number, opts: { extendOnly?: boolean } = {}): Promise<SandboxRow> {
    return this.queue.run(id, async () => {
      const { store, ops, clock } = this.ctx;
      const row = (await store.sandboxes.get(id))!;
      if (row.state === "destroyed") throw new DenError("sandbox_destroyed", `sandbox ${id} has been destroyed`);
      let expires = clock.now() + seconds * 1000;
      if (opts.extendOnly && row.expires_at !== null && row.expires_at > expires) expires = row.expires_at;
      const asleep = row.deadline_mode === "running" && row.state === "hibernated";
      const patch: Partial<SandboxRow> = asleep ? { run_timeout_seconds: seconds } : { ttl_seconds: seconds, expires_at: expires };
      const op = ops.newOp("set_timeout", id, "user", { seconds, ...(opts.extendOnly ? { extend_only: true } : {}) });
      return ops.atomic(row, op, { patch }, (tx) => ops.event(id, "timeout_set", "user", { seconds }, tx));
    });
  }

  /** Brings a `lost` sandbox (its VM died) back from a checkpoint, keeping its id. */
  async recover(id: string, cp: CheckpointRow): Promise<SandboxRow> {
    return this.queue.run(id, async () => {
      const { store, ops, clock } = this.ctx;
      const row = (await store.sandboxes.get(id))!;
      if (row.state !== "lost") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; only a lost sandbox is recovered`);
      // Its host may be the one that was lost: any host with the checkpoint's template version and room.
      const host = await this.placeStored(cp, row.host_id);
      const op = { ...ops.newOp("recover", id, "user", { checkpoint: cp.id, host: host.instance }), host: host.instance };
      await ops.begin(row, op, async (tx) => {
        if (host.instance !== row.host_id) await tx.sandboxes.update(id, { host_id: host.instance });
        // It comes back without volumes (a checkpoint holds none): its mounts, and their holds, go.
        await volumeMounts(tx).drop(id);
      });
      let info: HostSandboxInfo;
      try {
        info = await host.vms.restore(op.id, id, await storedRef(this.ctx, cp.id));
      } catch (e) {
        await ops.fail(op, id, e);
        throw e;
      }
      const done = await ops.finish(op, id, {
        state: "running", reason: "user", patch: { ...vmFields(info), template: row.template, last_activity_at: clock.now() },
        data: { recovered_from: cp.id, checkpoint_age_seconds: Math.round((clock.now() - cp.created_at) / 1000) },
      });
      await this.network.restore(done);
      return done;
    });
  }
}
