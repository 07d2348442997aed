import { DenError, api, inventoryCpuSeconds, type HostAgent, type host } from "@den/protocol";
import { newId } from "@den/protocol";
import type { ObjectStore } from "@den/store";
import type { ServerConfig } from "./config.js";
import { type CheckpointRow, type Principal, type SandboxRow, type Store } from "./db/store.js";
import { Meter, meteredState, type HostWork } from "./meter.js";
import { Keys } from "./keys.js";
import { Activity } from "./activity.js";
import { GuestAccess, type GuestSlots } from "./guest-access.js";
import { TemplateBuilds } from "./template-builds.js";
import { SandboxReads } from "./sandbox-reads.js";
import { usageReport } from "./usage.js";
import { Metrics } from "./metrics.js";
import { Checkpoints } from "./checkpoints.js";
import { hostOfId, modeOf, type Ctx, type HibernateMode } from "./context.js";
import { HostPool } from "./hosts.js";
import { StoreGc } from "./gc.js";
import { Lifecycle } from "./lifecycle.js";
import type { Terms } from "./ops/new-sandbox.js";
import { Forks } from "./forks.js";
import { NetworkPolicies } from "./network-policy.js";
import { Operations, systemClock, type Clock, type Reason } from "./operations.js";
import { Reaper } from "./reaper.js";
import { OwnerSlots } from "./owner-slots.js";
import { Recovery } from "./recovery.js";
import { HostRegistry } from "./registry.js";
import { SharedTemplates } from "./shared-templates.js";
import { Serializer } from "./serializer.js";
import { Templates } from "./templates.js";
import { Webhooks } from "./webhooks/service.js";
import { Volumes } from "./volumes.js";
import { Enrollment } from "./enrollment.js";

export { systemClock, type Clock } from "./operations.js";
export { toApiTemplate } from "./templates.js";
export type { HibernateMode } from "./context.js";

/**
 * The control plane: the only owner of durable state. It composes one service per job
 * (the sandbox state machine, checkpoints, templates, network policy, the reapers,
 * recovery and the store's garbage collector, in control/) over the operations log, and
 * keeps what the API's routes need in one place: ownership checks, the guest of a
 * sandbox (woken first if need be), activity, and usage.
 */
export class ControlPlane {
  private readonly queue = new Serializer();
  readonly meter: Meter;
  readonly metrics: Metrics;
  readonly ops: Operations;
  readonly lifecycle: Lifecycle;
  readonly forks: Forks;
  readonly checkpoints: Checkpoints;
  readonly templates: Templates;
  readonly network: NetworkPolicies;
  readonly reaper: Reaper;
  /** Per-owner bounds on what requests hold open (see OwnerSlots; the guests' own). */
  readonly slots: GuestSlots;
  /** Sandboxes' activity seen here: calls on their guests, execs in flight. */
  readonly activity: Activity;
  /** The way to a sandbox's guest for every surface: wake, activity, exec events, owners' bounds. */
  readonly guests: GuestAccess;
  /** Template builds and their contexts, as the API sees them. */
  readonly builds: TemplateBuilds;
  /** Sandboxes' rows as the surfaces read them. */
  readonly reads: SandboxReads;
  readonly recovery: Recovery;
  readonly gc: StoreGc;
  readonly registry: HostRegistry;
  readonly webhooks: Webhooks;
  readonly volumes: Volumes;
  /** API keys: who a caller is (every surface asks here). */
  readonly keys: Keys;
  /** Machines' identities: join tokens, and certificates from the deployment's CA. */
  readonly enrollment: Enrollment;
  private readonly ctx: Ctx;
  /** When this process started: volume holds of helper VMs older than this are a dead process's. */
  private readonly startedAt: number;
  /** The host agents sandboxes run on, and which one each sandbox is on. */
  readonly hosts: HostPool;

  constructor(
    readonly store: Store,
    hosts: readonly HostAgent[],
    readonly config: ServerConfig,
    objects: ObjectStore,
    deployment: string,
    readonly clock: Clock = systemClock,
    opts: {
      /** A client for a host that registered itself (none: registrations are not taken). */
      connectHost?: (address: string, id: string) => Promise<HostAgent>;
      /** This replica's id (see replica.ts). */
      replica?: string;
      /** How host work's CPU is measured (see Meter). */
      hostWork?: HostWork;
    } = {},
  ) {
    const connectHost = opts.connectHost;
    const replica = opts.replica ?? "rep_local";
    const adopt = (h: HostAgent) => {
      h.onTransfer = (t) => {
        // Every replica follows every host's events: the one running the transfer's operation records it.
        if (!this.ops.runsHere(t.sandbox)) return;
        this.log.info(t, `${t.direction} ${t.file}: ${t.bytes}${t.total !== null ? ` of ${t.total}` : ""} bytes`);
        this.ops.event(t.sandbox, "transfer.progress", null, { ...t }).catch(() => undefined);
      };
    };
    this.hosts = new HostPool(hosts, { store, adopt, now: () => clock.now(), ...(connectHost ? { connect: connectHost } : {}) });
    this.meter = new Meter(async (id) => inventoryCpuSeconds(await (await hostOfId(this.ctx, id)).inventory(), id), opts.hostWork);
    this.metrics = new Metrics(store, () => this.capacity());
    this.ops = new Operations(store, this.meter, this.metrics, clock, config.limits.eventsPerSandbox, replica);
    const log = { info: (o: object, m: string) => this.log.info(o, m), warn: (o: object, m: string) => this.log.warn(o, m) };
    this.ops.log = log;
    this.webhooks = new Webhooks(store, config.webhooks, replica, () => clock.now(), log);
    this.ops.outbox = this.webhooks.outbox;
    const ctx = { store, hosts: this.hosts, objects, deployment, replica, config, clock, ops: this.ops, meter: this.meter, metrics: this.metrics, log } as Omit<Ctx, "shared"> as Ctx;
    ctx.shared = new SharedTemplates(ctx);
    this.ctx = ctx;
    this.network = new NetworkPolicies(this.ctx, this.queue, (p, id) => this.owned(p, id));
    this.lifecycle = new Lifecycle(this.ctx, this.queue, this.network);
    this.forks = new Forks(this.ctx, this.queue, this.lifecycle);
    this.checkpoints = new Checkpoints(this.ctx, this.queue, this.lifecycle);
    this.templates = new Templates(this.ctx, this.checkpoints);
    this.volumes = new Volumes(this.ctx);
    this.keys = new Keys(store);
    this.enrollment = new Enrollment(store, config.ca, clock);
    this.startedAt = clock.now();
    const l = config.limits;
    this.slots = {
      bufferedExecs: new OwnerSlots(l.bufferedExecsPerOwner, "buffered execs", "DEN_MAX_BUFFERED_EXECS_PER_OWNER"),
      streams: new OwnerSlots(l.streamsPerOwner, "exec streams and PTYs", "DEN_MAX_STREAMS_PER_OWNER"),
      follows: new OwnerSlots(l.followsPerOwner, "event follows and directory watches", "DEN_MAX_FOLLOWS_PER_OWNER"),
    };
    this.activity = new Activity(store, clock);
    this.guests = new GuestAccess(this.ctx, this.queue, this.activity, (id, reason, timeout) => this.wake(id, reason, timeout), (p, id) => this.owned(p, id), this.slots);
    this.builds = new TemplateBuilds(this.ctx, this.templates);
    this.reads = new SandboxReads(store);
    const activity = this.activity;
    this.reaper = new Reaper(this.ctx, this.queue, this.lifecycle, { execing: (id) => activity.execing(id), touch: (id) => activity.touch(id), lastActive: (id) => activity.lastActive(id) });
    this.lifecycle.makeRoom = (host, mb, except, measure) => this.reaper.makeRoom(host, mb, except, measure);
    this.recovery = new Recovery(this.ctx, this.lifecycle, this.network, (id) => this.reaper.markLost(id));
    this.gc = new StoreGc(this.ctx);
    this.registry = new HostRegistry(this.ctx, this.queue, this.lifecycle, config.hostLeases, (h) => this.recovery.reconcileHost(h));
  }

  /** What all reachable hosts may hold and hold now, added up. */
  async capacity(): Promise<host.CapacityReport> {
    const sum: host.CapacityReport = { capacity: { vcpus: 0, memoryMb: 0, diskReserveMb: 0 }, used: { vcpus: 0, memoryMb: 0, sandboxes: 0 } };
    for (const r of await this.hosts.each(async (h) => (await h.inventory()).capacity)) {
      if (!r.ok) continue;
      sum.capacity.vcpus += r.value.capacity.vcpus;
      sum.capacity.memoryMb += r.value.capacity.memoryMb;
      sum.capacity.diskReserveMb += r.value.capacity.diskReserveMb;
      sum.used.vcpus += r.value.used.vcpus;
      sum.used.memoryMb += r.value.used.memoryMb;
      sum.used.sandboxes += r.value.used.sandboxes;
    }
    return sum;
  }

  /** Each host agent: where it is, whether it answers (or holds its lease), its capacity and use, and how many sandboxes live on it. */
  async hostList(): Promise<api.HostEntry[]> {
    await this.hosts.refresh();
    const counts = await this.store.sandboxes.countLiveByHost();
    const expiries = await this.store.machineCerts.expiries("host");
    const answers = new Map((await this.hosts.each(async (h) => (await h.inventory()).capacity)).map((r) => [r.host.instance, r]));
    return this.hosts.known().map((row): api.HostEntry => {
      const r = answers.get(row.id);
      const why = this.hosts.unusable(row.id);
      const report = r?.ok ? r.value : row.capacity ? (JSON.parse(row.capacity) as host.CapacityReport) : null;
      return {
        id: row.id, url: row.address, status: r?.ok ? "up" : "unreachable",
        error: r?.ok ? null : r ? (r.error as Error).message : why === "unreachable" ? `no heartbeat since ${new Date(row.heartbeat_at ?? row.registered_at).toISOString()}` : "no client",
        state: row.state as api.HostEntry["state"], managed: row.managed as api.HostEntry["managed"],
        lease_until: row.lease_until === null ? null : new Date(row.lease_until).toISOString(),
        lost_at: row.lost_at === null ? null : new Date(row.lost_at).toISOString(),
        kind: row.kind ? (JSON.parse(row.kind) as api.HostEntry["kind"]) : null,
        capacity: report ? { memory_mb: report.capacity.memoryMb, vcpus: report.capacity.vcpus, disk_reserve_mb: report.capacity.diskReserveMb } : null,
        used: report ? { memory_mb: report.used.memoryMb, vcpus: report.used.vcpus, sandboxes: report.used.sandboxes } : null,
        sandboxes: (counts.get(row.id) ?? 0) + (row.id === this.hosts.first?.instance ? counts.get(null) ?? 0 : 0),
        cert_expires_at: expiries.has(row.id) ? new Date(expiries.get(row.id)!).toISOString() : null,
      };
    });
  }

  get deployment(): string {
    return this.ctx.deployment;
  }

  /** Where progress of long transfers and recovery are logged (the server hands in its logger). */
  log: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void } = { info: () => undefined, warn: () => undefined };

  /** The caller's sandbox, or 404 (another owner's sandbox does not exist for them). */
  async owned(p: Principal, id: string): Promise<SandboxRow> {
    const row = api.SandboxId.safeParse(id).success ? await this.store.sandboxes.get(id) : undefined;
    if (!row || row.owner !== p.owner) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(id)} does not exist`);
    return row;
  }

  /** A deployment-wide setting (a secret, say), made with `make()` by whichever replica asks first. */
  setting(key: string, make: () => string): Promise<string> {
    return this.store.setting(key, make);
  }

  // ---- reads ----

  /**
   * A sandbox by its id, whoever owns it (undefined for an id that is not one): for the
   * surfaces that authenticate by the sandbox's own token (envd, port traffic, signed port URLs).
   */
  async sandbox(id: string): Promise<SandboxRow | undefined> {
    return api.SandboxId.safeParse(id).success ? this.store.sandboxes.get(id) : undefined;
  }

  /** A page of the caller's sandboxes (destroyed ones only when asked by state), oldest id first. */
  async list(p: Principal, q: { state?: string; metadata: Record<string, string>; limit: number; cursor?: string }): Promise<{ rows: SandboxRow[]; next: string | null }> {
    const rows = await this.store.sandboxes.list(p.owner, { ...q, limit: q.limit + 1 });
    const page = rows.slice(0, q.limit);
    return { rows: page, next: rows.length > q.limit ? page[page.length - 1]!.id : null };
  }

  /** A sandbox's events after `after`; `ended` once it is destroyed and nothing is left to read. */
  async events(row: SandboxRow, after: number): Promise<{ events: api.SandboxEvent[]; ended: boolean }> {
    const events = await this.store.events.list(row.id, after);
    const ended = !events.length && (await this.store.sandboxes.get(row.id))?.state === "destroyed";
    return { events, ended };
  }

  /** The caller's checkpoints (of one sandbox, if named), oldest first. */
  listCheckpoints(p: Principal, sandboxId?: string): Promise<CheckpointRow[]> {
    return this.store.checkpoints.list(p.owner, sandboxId);
  }

  // ---- the state machine (lifecycle.ts, its operations in ops/) ----

  async create(p: Principal, req: api.CreateSandboxRequest, terms?: Terms): Promise<SandboxRow> {
    await this.templates.checkAccess(p, req.template ?? this.config.defaults.template);
    return this.refusable(p, "create", () => this.lifecycle.create(p, req, terms));
  }

  destroy(id: string, reason: Reason): Promise<SandboxRow> {
    return this.lifecycle.destroy(id, reason);
  }

  hibernate(id: string, reason: Reason, mode: HibernateMode = "warm"): Promise<SandboxRow> {
    return this.lifecycle.hibernate(id, reason, mode);
  }

  wake(id: string, reason: Reason, timeoutSeconds?: number): Promise<SandboxRow> {
    return this.lifecycle.wake(id, reason, timeoutSeconds);
  }

  /** A wake that boots the sandbox from its disk, its memory given up (E2B's `memory: false`). */
  wakeByBoot(id: string, reason: Reason, timeoutSeconds?: number): Promise<SandboxRow> {
    return this.lifecycle.wakeByBoot(id, reason, timeoutSeconds);
  }

  setTimeout(id: string, seconds: number, opts?: { extendOnly?: boolean }): Promise<SandboxRow> {
    return this.lifecycle.setTimeout(id, seconds, opts);
  }

  /** Forks a running sandbox (woken first if hibernated) into `count` children. */
  async fork(p: Principal, id: string, count: number, ttlSeconds?: number, volumes?: api.VolumeMount[]): Promise<SandboxRow[]> {
    await this.guests.reach(id);
    return this.refusable(p, "fork", () => this.forks.fork(p, id, count, ttlSeconds, volumes));
  }

  async recover(p: Principal, id: string, checkpointId?: string): Promise<SandboxRow> {
    const cp = checkpointId ? await this.checkpoints.owned(p, checkpointId) : (await this.store.checkpoints.list(p.owner, id)).at(-1);
    if (!cp || cp.sandbox_id !== id) {
      const row = await this.owned(p, id);
      if (row.state !== "lost") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; only a lost sandbox is recovered`);
      throw new DenError("snapshot_not_found", `sandbox ${id} has no checkpoint to recover from`);
    }
    return this.lifecycle.recover(id, cp);
  }

  /** The checkpoint a lost sandbox would be recovered from, if any. */
  async recoveryPoint(row: SandboxRow): Promise<{ checkpoint_id: string; created_at: string; age_seconds: number } | null> {
    if (row.state !== "lost") return null;
    const cp = (await this.store.checkpoints.list(row.owner, row.id)).at(-1);
    return cp ? { checkpoint_id: cp.id, created_at: new Date(cp.created_at).toISOString(), age_seconds: Math.round((this.clock.now() - cp.created_at) / 1000) } : null;
  }

  /** Runs a create, restore or fork; a refusal for quota or capacity (no sandbox exists yet) is told to the owner's webhooks. */
  private async refusable<T>(p: Principal, operation: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      if (e instanceof DenError && (e.code === "quota_exceeded" || e.code === "capacity_exhausted")) this.webhooks.refused(p.owner, e, operation);
      throw e;
    }
  }

  // ---- checkpoints and templates ----

  /** A durable checkpoint of a running sandbox (it wakes first if hibernated). */
  async checkpoint(p: Principal, id: string, name: string | undefined): Promise<CheckpointRow> {
    await this.guests.reach(id);
    return this.checkpoints.take(p, id, name);
  }

  async restoreCheckpoint(p: Principal, id: string, req: api.RestoreCheckpointRequest, terms?: Terms): Promise<SandboxRow> {
    const cp = await this.checkpoints.owned(p, id);
    return this.refusable(p, "restore", () => this.lifecycle.restore(p, cp, req, terms));
  }

  // ---- usage ----

  /**
   * Usage over a period: closed segments plus the open ones up to now (running sandboxes,
   * hibernated ones, live checkpoints), grouped by owner, sandbox or a metadata key.
   */
  async usage(p: Principal, q: api.UsageQuery): Promise<api.UsageReport> {
    const now = this.clock.now();
    const to = q.to !== undefined ? Date.parse(q.to) : now;
    const from = q.from !== undefined ? Date.parse(q.from) : to - 86_400_000;
    if (!(from < to)) throw new DenError("invalid_argument", "from must be before to");
    if (q.owner !== undefined && !p.admin) throw new DenError("forbidden", "only an admin key reads another owner's usage");
    // An admin without `owner` sees every owner; anyone else sees their own.
    const owner = q.owner ?? (p.admin ? undefined : p.owner);
    const segments = await this.store.usage.segments(from, to, owner);
    const cpu = await this.hosts.cpu();
    for (const row of await this.store.sandboxes.live()) {
      if (owner !== undefined && row.owner !== owner) continue;
      const state = meteredState(row);
      if (!state || row.meter_since === null || row.meter_since >= to) continue;
      segments.push({
        sandbox_id: row.id, owner: row.owner, state, start_ms: row.meter_since, end_ms: Math.max(now, row.meter_since + 1),
        vcpus: row.vcpus, memory_mb: row.memory_mb,
        host_cpu_ms: state === "cold" ? 0 : Math.round(this.meter.openCpu(row, cpu.get(row.id)) * 1000), den_cpu_ms: Math.round(this.meter.pendingDenCpu(row.id) * 1000),
        stored_bytes: state === "cold" ? Number(row.stored_bytes ?? 0) : 0,
      });
    }
    for (const c of await this.store.checkpoints.all(owner)) {
      segments.push({ sandbox_id: c.sandbox_id, owner: c.owner, state: "checkpoint", start_ms: c.created_at, end_ms: Math.max(now, c.created_at + 1), vcpus: 0, memory_mb: 0, host_cpu_ms: 0, den_cpu_ms: 0, stored_bytes: Number(c.stored_bytes) });
    }
    const rows = new Map((await this.store.sandboxes.byIds([...new Set(segments.map((s) => s.sandbox_id))])).map((r) => [r.id, r]));
    const groupBy = q.group_by ?? "sandbox";
    return usageReport({
      segments, from, to, groupBy, prices: this.config.prices,
      sandbox: (id) => {
        const r = rows.get(id);
        return r ? { owner: r.owner, metadata: JSON.parse(r.metadata) as Record<string, string> } : undefined;
      },
    });
  }

  // ---- passes ----

  /** After a (re)start: finish or roll back what was in flight, make host and database agree, collect garbage. */
  async reconcile(): Promise<void> {
    await this.recovery.run();
    // After the reconcile destroyed VMs no row knows (helpers among them): their holds go.
    await this.volumes.sweep(this.startedAt);
    await this.gc.collect();
  }

  /** Work replicas that are gone left: volumes' moves (their operations are the recovery's). */
  settleOrphanMoves(): Promise<void> {
    return this.volumes.settleAbandonedMoves(this.startedAt);
  }

  reap(): Promise<void> {
    return this.reaper.pass();
  }

  /**
   * A clean stop: cold-hibernate every running and warm-hibernated sandbox, so no VM
   * outlives the server. Those not started before `deadline` stay as they are and are
   * adopted at the next start; nothing is lost either way.
   */
  async hibernateAllCold(deadline: number): Promise<{ done: number; left: number }> {
    let done = 0;
    let left = 0;
    for (const row of await this.store.sandboxes.live()) {
      if (row.state !== "running" && !(row.state === "hibernated" && modeOf(row) === "warm")) continue;
      if (Date.now() >= deadline) {
        left++;
        continue;
      }
      try {
        await this.hibernate(row.id, "restart", "cold");
        done++;
      } catch {
        left++;
      }
    }
    return { done, left };
  }
}

/** A new deployment id (kept in the database; its objects live under it in the store). */
export const newDeploymentId = (): string => newId("dep");
