import { DenError, api } from "@den/protocol";
import { newId } from "@den/runtime";
import type { ServerConfig } from "./config.js";
import type { HostAgent, HostSandboxInfo } from "./host-agent.js";
import { type CheckpointRow, type Principal, type SandboxRow, type Store, networkOf, toApiCheckpoint, toApiSandbox } from "./store.js";
import type { Sandbox as VmSandbox, TemplateInfo } from "@den/runtime";
import { Meter, meteredState } from "./meter.js";
import { usageReport } from "./usage.js";
import { Metrics } from "./metrics.js";
import { NO_NETWORK, NO_REFUSALS, RefusalTracker, effectivePolicy, serializePolicy } from "./network.js";

export function toApiTemplate(t: TemplateInfo, owner: string | null): api.Template {
  return {
    name: t.name, version: t.version, current: t.current, owner, vcpus: t.manifest.vm.vcpus,
    memory_mb: t.manifest.vm.memoryMb, disk_mb: t.manifest.vm.diskMb, created_at: t.manifest.createdAt,
  };
}

/** A source of "now": the real clock, or a test's. */
export interface Clock {
  now(): number;
}
export const systemClock: Clock = { now: () => Date.now() };

type Reason = api.TransitionReason;
export type HibernateMode = "warm" | "cold";

const modeOf = (row: SandboxRow): HibernateMode => (row.hibernate_mode === "cold" ? "cold" : "warm");

/**
 * The control plane: owns the database's view of every sandbox and drives the host
 * agent. Operations on one sandbox run one at a time (a per-sandbox queue), and every
 * transition is written, with its reason, before it is acknowledged.
 */
export class ControlPlane {
  private queues = new Map<string, Promise<unknown>>();
  private activeExecs = new Map<string, number>();
  private cpuSamples = new Map<string, { at: number; cpu: number }>();
  private lastTouch = new Map<string, number>();
  private refusals = new RefusalTracker();
  readonly meter: Meter;
  readonly metrics: Metrics;

  constructor(
    readonly store: Store,
    readonly host: HostAgent,
    readonly config: ServerConfig,
    readonly clock: Clock = systemClock,
  ) {
    this.meter = new Meter(store, host);
    this.metrics = new Metrics(store, host);
    host.onTransfer = (t) => {
      this.log.info(t, `${t.direction} ${t.file}: ${t.bytes}${t.total !== null ? ` of ${t.total}` : ""} bytes`);
      this.event(t.sandbox, "transfer.progress", null, { ...t }).catch(() => undefined);
    };
  }

  /** Where progress of long transfers is logged (the server hands in its logger). */
  log: { info(obj: object, msg: string): void } = { info: () => undefined };

  /** Runs `fn` after every earlier operation on the same sandbox has settled. */
  private serialize<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.queues.get(id) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.queues.set(id, tail);
    void tail.then(() => {
      if (this.queues.get(id) === tail) this.queues.delete(id);
    });
    return next;
  }

  private async event(id: string, type: string, reason: Reason | null, data: Record<string, unknown> = {}): Promise<void> {
    await this.store.addEvent(id, type, reason, data, this.config.limits.eventsPerSandbox);
  }

  private async transition(id: string, state: api.SandboxState, reason: Reason, patch: Partial<SandboxRow> = {}, data: Record<string, unknown> = {}): Promise<SandboxRow> {
    // The usage segment of the state it leaves closes here.
    const before = await this.store.getSandbox(id);
    const meter = before ? await this.meter.roll(before, this.clock.now()) : {};
    const row = await this.store.updateSandbox(id, { ...patch, ...meter, state, state_reason: reason });
    await this.event(id, state, reason, data);
    this.metrics.transition(state, reason);
    return row!;
  }

  /** The caller's sandbox, or 404 (another owner's sandbox does not exist for them). */
  async owned(p: Principal, id: string): Promise<SandboxRow> {
    const row = api.SandboxId.safeParse(id).success ? await this.store.getSandbox(id) : undefined;
    if (!row || row.owner !== p.owner) throw new DenError("sandbox_not_found", `sandbox ${JSON.stringify(id)} does not exist`);
    return row;
  }

  /** A new checkpoint or cold snapshot is refused once the owner's stored bytes reach the quota. */
  private async checkStoreQuota(owner: string): Promise<void> {
    const max = this.config.limits.storedBytesPerOwner;
    const used = await this.store.storedBytes(owner);
    if (used >= max) {
      throw new DenError("quota_exceeded", `owner ${owner} keeps ${used} bytes in the snapshot store, the quota is ${max}; delete checkpoints or destroy hibernated sandboxes first`, { stored_bytes: used, quota_bytes: max });
    }
  }

  private async checkQuota(p: Principal, adding = 1): Promise<void> {
    const max = this.config.limits.sandboxesPerOwner;
    if ((await this.store.countLive(p.owner)) + adding > max) {
      throw new DenError("quota_exceeded", `owner ${p.owner} may have at most ${max} sandboxes; destroy some first`);
    }
  }

  /** A new sandbox's record, before its VM exists (state `creating`). */
  private newRow(p: Principal, id: string, req: Pick<api.CreateSandboxRequest, "persistent" | "ttl_seconds" | "idle_timeout_seconds" | "on_idle" | "metadata" | "env">, template: string, network: api.NetworkPolicy = NO_NETWORK): SandboxRow {
    const persistent = req.persistent ?? false;
    if (req.ttl_seconds === null && !persistent) throw new DenError("invalid_argument", "ttl_seconds: null (no deadline) needs persistent: true");
    const ttl = req.ttl_seconds === undefined ? this.config.defaults.ttlSeconds : req.ttl_seconds;
    const now = this.clock.now();
    return {
      id, owner: p.owner, state: "creating", state_reason: "user", template, template_version: "",
      persistent: persistent ? 1 : 0, ttl_seconds: ttl, expires_at: ttl === null ? null : now + ttl * 1000,
      idle_timeout_seconds: req.idle_timeout_seconds ?? this.config.defaults.idleTimeoutSeconds,
      on_idle: req.on_idle ?? this.config.defaults.onIdle,
      metadata: JSON.stringify(req.metadata ?? {}), env: JSON.stringify(req.env ?? {}),
      vcpus: 0, memory_mb: 0, disk_mb: 0,
      created_at: now, last_activity_at: now, destroyed_at: null, hibernate_snapshot: null, hibernate_mode: null, stored_bytes: null,
      meter_since: now, meter_cpu: null, network: serializePolicy(network),
    };
  }

  /** Records a new sandbox, then makes its VM; a failure leaves it in `error`. */
  private async materialize(row: SandboxRow, make: () => Promise<HostSandboxInfo>, data: Record<string, unknown>): Promise<api.Sandbox> {
    await this.store.insertSandbox(row);
    await this.event(row.id, "creating", "user", data);
    return this.serialize(row.id, async () => {
      try {
        const info = await make();
        const done = await this.transition(row.id, "running", "user", {
          template: info.template, template_version: info.templateVersion, vcpus: info.vcpus, memory_mb: info.memoryMb, disk_mb: info.diskMb,
          last_activity_at: this.clock.now(),
        });
        return toApiSandbox(done);
      } catch (e) {
        await this.transition(row.id, "error", "error", { destroyed_at: this.clock.now() }, { message: (e as Error).message });
        throw e;
      }
    });
  }

  async create(p: Principal, req: api.CreateSandboxRequest): Promise<api.Sandbox> {
    const lim = this.config.limits;
    if ((req.vcpus ?? 0) > lim.vcpusPerSandbox) throw new DenError("invalid_argument", `vcpus: at most ${lim.vcpusPerSandbox} on this server`);
    if ((req.memory_mb ?? 0) > lim.memoryMbPerSandbox) throw new DenError("invalid_argument", `memory_mb: at most ${lim.memoryMbPerSandbox} on this server`);
    if ((req.disk_mb ?? 0) > lim.diskMbPerSandbox) throw new DenError("invalid_argument", `disk_mb: at most ${lim.diskMbPerSandbox} on this server`);
    await this.checkQuota(p);
    await this.checkTemplateAccess(p, req.template ?? this.config.defaults.template);
    // A create the host cannot hold is refused before it leaves a record behind.
    await this.host.checkCreate({ template: req.template ?? this.config.defaults.template, ...(req.vcpus ? { vcpus: req.vcpus } : {}), ...(req.memory_mb ? { memoryMb: req.memory_mb } : {}) });
    const network = effectivePolicy(req.network, this.config.network);
    const row = this.newRow(p, newId("sbx"), req, req.template ?? this.config.defaults.template, network);
    return this.materialize(row, () => this.metrics.time("create", "", () => this.withNetwork(row.id, network, () => this.host.create({
      id: row.id, template: row.template,
      ...(req.vcpus ? { vcpus: req.vcpus } : {}), ...(req.memory_mb ? { memoryMb: req.memory_mb } : {}), ...(req.disk_mb ? { diskMb: req.disk_mb } : {}),
    }))), { template: row.template });
  }

  /** Makes a sandbox's VM, then its network; a network that cannot come up takes the VM with it. */
  private async withNetwork<T>(id: string, policy: api.NetworkPolicy, make: () => Promise<T>): Promise<T> {
    const made = await make();
    if (policy.egress === "none") return made;
    try {
      await this.host.setNetwork(id, policy);
    } catch (e) {
      await this.host.destroy(id).catch(() => undefined);
      throw e;
    }
    return made;
  }

  // ---- network ----

  /**
   * Changes a sandbox's network policy. A running sandbox gets it at once; a hibernated
   * one keeps it for its wake. Written first, so a crash in between converges at start.
   */
  async setNetwork(p: Principal, id: string, req: api.NetworkPolicy): Promise<SandboxRow> {
    const policy = effectivePolicy(req, this.config.network);
    await this.owned(p, id);
    return this.serialize(id, async () => {
      const row = (await this.store.getSandbox(id))!;
      if (row.state !== "running" && row.state !== "hibernated") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}`);
      const updated = await this.store.updateSandbox(id, { network: serializePolicy(policy) });
      if (row.state === "running") {
        await this.flushRefusals(id);
        try {
          await this.host.setNetwork(id, policy);
        } catch (e) {
          await this.store.updateSandbox(id, { network: row.network });
          throw e;
        }
      }
      await this.event(id, "network", "user", { egress: policy.egress });
      return updated!;
    });
  }

  /** A sandbox's policy, whether its network is up, and the attempts it refused. */
  async networkStatus(p: Principal, id: string): Promise<api.NetworkStatus> {
    const row = await this.owned(p, id);
    const refused = row.state === "running" ? await this.host.networkRefusals(id) : undefined;
    return { policy: networkOf(row), active: refused !== undefined, refused: refused ?? NO_REFUSALS };
  }

  /**
   * Writes what each sandbox's network refused since the last pass as one aggregated
   * `network.refused` event: a port scan costs one row per interval, not one per probe.
   */
  async pollRefusals(): Promise<void> {
    for (const id of this.host.running()) await this.flushRefusals(id);
  }

  private async flushRefusals(id: string): Promise<void> {
    const now = await this.host.networkRefusals(id).catch(() => undefined);
    if (!now) {
      this.refusals.forget(id);
      return;
    }
    const d = this.refusals.delta(id, now);
    if (d) await this.event(id, "network.refused", null, { ...d, total: d.private + d.policy + d.limit + d.dns });
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
    const segments = await this.store.segments(from, to, owner);
    for (const row of await this.store.liveSandboxes()) {
      if (owner !== undefined && row.owner !== owner) continue;
      const state = meteredState(row);
      if (!state || row.meter_since === null || row.meter_since >= to) continue;
      segments.push({
        sandbox_id: row.id, owner: row.owner, state, start_ms: row.meter_since, end_ms: Math.max(now, row.meter_since + 1),
        vcpus: row.vcpus, memory_mb: row.memory_mb,
        host_cpu_ms: state === "cold" ? 0 : Math.round(this.meter.openCpu(row) * 1000), den_cpu_ms: Math.round(this.meter.pendingDenCpu(row.id) * 1000),
        stored_bytes: state === "cold" ? Number(row.stored_bytes ?? 0) : 0,
      });
    }
    for (const c of await this.store.allCheckpoints(owner)) {
      segments.push({ sandbox_id: c.sandbox_id, owner: c.owner, state: "checkpoint", start_ms: c.created_at, end_ms: Math.max(now, c.created_at + 1), vcpus: 0, memory_mb: 0, host_cpu_ms: 0, den_cpu_ms: 0, stored_bytes: Number(c.stored_bytes) });
    }
    const rows = new Map((await this.store.sandboxesByIds([...new Set(segments.map((s) => s.sandbox_id))])).map((r) => [r.id, r]));
    const groupBy = q.group_by ?? "sandbox";
    return usageReport({
      segments, from, to, groupBy, prices: this.config.prices,
      sandbox: (id) => {
        const r = rows.get(id);
        return r ? { owner: r.owner, metadata: JSON.parse(r.metadata) as Record<string, string> } : undefined;
      },
    });
  }

  // ---- templates ----

  /** A template made through the API is its owner's alone; the host's own are everyone's; a deleted one, nobody's. */
  private async checkTemplateAccess(p: Principal, spec: string): Promise<void> {
    const row = await this.store.templateRow(spec.split("@")[0]!.split(".")[0]!);
    if (row && (row.deleted_at !== null || (row.owner !== p.owner && !p.admin))) throw new DenError("template_not_found", `template ${JSON.stringify(spec)} does not exist`);
  }

  /** The template versions this principal may use. */
  async listTemplates(p: Principal): Promise<api.Template[]> {
    const rows = await this.store.templateRows();
    const out: api.Template[] = [];
    for (const t of await this.host.templates()) {
      const row = rows.get(t.name.split(".")[0]!);
      if (!row) out.push(toApiTemplate(t, null));
      else if (row.deleted_at === null && (row.owner === p.owner || p.admin)) out.push(toApiTemplate(t, row.owner));
    }
    return out;
  }

  /**
   * Builds a template from a template or checkpoint plus setup commands, run in a sandbox
   * of its own. The name is claimed (durably) for the caller first; the same recipe again
   * returns the version already built.
   */
  async createTemplate(p: Principal, req: api.CreateTemplateRequest): Promise<api.Template> {
    const row = await this.store.templateRow(req.name);
    if (row && row.owner !== p.owner) throw new DenError("already_exists", `template ${req.name} belongs to another owner`);
    if (!row && (await this.host.templates()).some((t) => t.name === req.name)) throw new DenError("already_exists", `template ${req.name} is one of this host's own templates`);
    if ((!row || row.deleted_at !== null) && (await this.store.countTemplates(p.owner)) >= this.config.limits.templatesPerOwner) {
      throw new DenError("quota_exceeded", `owner ${p.owner} may have at most ${this.config.limits.templatesPerOwner} templates`);
    }
    if (req.from_template) await this.checkTemplateAccess(p, req.from_template);
    if (req.from_checkpoint) await this.ownedCheckpoint(p, req.from_checkpoint);
    await this.store.claimTemplate(req.name, p.owner, this.clock.now());
    try {
      const t = await this.host.buildTemplate({
        name: req.name, setup: req.setup ?? [], setupTimeoutSeconds: req.setup_timeout_seconds ?? 600,
        ...(req.from_template ? { fromTemplate: req.from_template } : {}), ...(req.from_checkpoint ? { fromCheckpoint: req.from_checkpoint } : {}),
      });
      return toApiTemplate(t, p.owner);
    } catch (e) {
      // Nothing usable was built: the name goes back to how it was.
      if (!(await this.host.templates()).some((t) => t.name === req.name && t.current)) {
        if (row) await this.store.markTemplateDeleted(req.name, row.deleted_at ?? this.clock.now());
        else await this.store.dropTemplate(req.name);
      }
      throw e;
    }
  }

  /** Deletes a template its owner built; sandboxes and checkpoints made from it keep working. */
  async deleteTemplate(p: Principal, name: string): Promise<void> {
    const row = await this.store.templateRow(name);
    if (!row || row.deleted_at !== null || (row.owner !== p.owner && !p.admin)) {
      if (!row && (await this.host.templates()).some((t) => t.name === name)) {
        throw new DenError("forbidden", `template ${name} is one of this host's own templates (den template build); it is not deleted through the API`);
      }
      throw new DenError("template_not_found", `template ${JSON.stringify(name)} does not exist`);
    }
    await this.store.markTemplateDeleted(name, this.clock.now());
    await this.host.deleteTemplate(name);
  }

  // ---- checkpoints and forks ----

  /** A durable checkpoint of a running sandbox (it wakes first if hibernated). */
  async checkpoint(p: Principal, id: string, name: string | undefined): Promise<api.Checkpoint> {
    await this.guest(id);
    return this.serialize(id, async () => {
      const row = (await this.store.getSandbox(id))!;
      if (row.state !== "running") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}`);
      await this.checkStoreQuota(row.owner);
      const c = await this.metrics.time("checkpoint", "", () => this.meter.work(id, () => this.host.checkpoint(id)));
      const cp: CheckpointRow = {
        id: c.snapshotId, owner: p.owner, sandbox_id: id, name: name ?? null, template: row.template, template_version: row.template_version,
        vcpus: row.vcpus, memory_mb: row.memory_mb, disk_mb: row.disk_mb, pause_ms: Math.round(c.pauseMs), stored_bytes: c.storedBytes,
        created_at: this.clock.now(), network: row.network,
      };
      await this.store.insertCheckpoint(cp);
      await this.event(id, "checkpoint", "user", { checkpoint: cp.id, name: cp.name, pause_ms: cp.pause_ms, stored_bytes: cp.stored_bytes });
      return toApiCheckpoint(cp);
    });
  }

  async ownedCheckpoint(p: Principal, id: string): Promise<CheckpointRow> {
    const row = api.CheckpointId.safeParse(id).success ? await this.store.getCheckpoint(id) : undefined;
    if (!row || row.owner !== p.owner) throw new DenError("snapshot_not_found", `checkpoint ${JSON.stringify(id)} does not exist`);
    return row;
  }

  async deleteCheckpoint(p: Principal, id: string): Promise<void> {
    const row = await this.ownedCheckpoint(p, id);
    // Sandboxes restored from it keep their own copy of its disk: deleting never breaks them.
    await this.host.dropSnapshot(row.id, "cold");
    // Its time in the store stays on the bill.
    await this.store.insertSegment({
      sandbox_id: row.sandbox_id, owner: row.owner, state: "checkpoint", start_ms: row.created_at, end_ms: this.clock.now(),
      vcpus: 0, memory_mb: 0, host_cpu_ms: 0, den_cpu_ms: 0, stored_bytes: Number(row.stored_bytes),
    });
    await this.store.deleteCheckpoint(row.id);
  }

  /** A new, independent sandbox with the checkpoint's state. */
  async restoreCheckpoint(p: Principal, id: string, req: api.RestoreCheckpointRequest): Promise<api.Sandbox> {
    const cp = await this.ownedCheckpoint(p, id);
    await this.checkQuota(p);
    this.host.checkCapacity({ vcpus: cp.vcpus, memoryMb: cp.memory_mb });
    const network = effectivePolicy(req.network ?? networkOf(cp), this.config.network);
    const row = this.newRow(p, newId("sbx"), { ...req, metadata: { ...(req.metadata ?? {}), restored_from: cp.id } }, cp.template, network);
    return this.materialize(row, () => this.metrics.time("restore", "", () => this.withNetwork(row.id, network, () => this.meter.work(row.id, () => this.host.restoreStored(row.id, cp.id)))), { checkpoint: cp.id });
  }

  /**
   * Forks a running sandbox into `count` children with its exact state. Each child has
   * its own id, the parent's TTL counted from its own creation, and the parent's metadata
   * plus `forked_from`.
   */
  async fork(p: Principal, id: string, count: number): Promise<api.Sandbox[]> {
    await this.checkQuota(p, count);
    await this.guest(id);
    return this.serialize(id, async () => {
      const parent = (await this.store.getSandbox(id))!;
      if (parent.state !== "running") throw new DenError("invalid_state", `sandbox ${id} is ${parent.state}`);
      const kids = await this.metrics.time("fork", "", () => this.meter.work(id, () => this.host.fork(id, count)));
      // Each child gets a network of its own with the parent's policy.
      const network = networkOf(parent);
      try {
        if (network.egress !== "none") for (const k of kids) await this.host.setNetwork(k.id, network);
      } catch (e) {
        for (const k of kids) await this.host.destroy(k.id).catch(() => undefined);
        throw e;
      }
      const out: api.Sandbox[] = [];
      for (const k of kids) {
        const settings = {
          persistent: parent.persistent === 1, ttl_seconds: parent.ttl_seconds, idle_timeout_seconds: parent.idle_timeout_seconds,
          on_idle: parent.on_idle as "hibernate" | "destroy",
          metadata: { ...(JSON.parse(parent.metadata) as Record<string, string>), forked_from: id },
          env: JSON.parse(parent.env) as Record<string, string>,
        };
        const row: SandboxRow = {
          ...this.newRow(p, k.id, settings, parent.template, network),
          state: "running", template: k.template, template_version: k.templateVersion, vcpus: k.vcpus, memory_mb: k.memoryMb, disk_mb: k.diskMb,
        };
        await this.store.insertSandbox(row);
        await this.event(k.id, "running", "user", { forked_from: id });
        out.push(toApiSandbox(row));
      }
      await this.event(id, "forked", "user", { children: kids.map((k) => k.id) });
      return out;
    });
  }

  async destroy(id: string, reason: Reason): Promise<SandboxRow> {
    return this.serialize(id, async () => {
      const row = (await this.store.getSandbox(id))!;
      if (row.state === "destroyed") return row;
      // The record goes first: a crash after it leaves a VM the next start destroys, never a lost sandbox.
      const done = await this.transition(id, "destroyed", reason, { destroyed_at: this.clock.now() });
      await this.flushRefusals(id);
      await this.metrics.time("destroy", "", () => this.host.destroy(id));
      if (row.hibernate_snapshot) await this.host.dropSnapshot(row.hibernate_snapshot, modeOf(row));
      this.forget(id);
      return done;
    });
  }

  async hibernate(id: string, reason: Reason, mode: HibernateMode = "warm"): Promise<SandboxRow> {
    return this.serialize(id, async () => {
      const row = (await this.store.getSandbox(id))!;
      if (row.state === "hibernated" && modeOf(row) === mode) return row;
      if (row.state === "hibernated" && mode === "cold") {
        // Warm -> cold: the VM is paused in place; take it down to the store.
        await this.checkStoreQuota(row.owner);
        const t0 = performance.now();
        this.meter.sample(id);
        const snapshot = await this.metrics.time("hibernate", "cold", () => this.meter.work(id, () => this.host.hibernate(id, "cold", row.hibernate_snapshot ?? undefined)));
        return this.hibernated(row, reason, mode, snapshot, t0);
      }
      if (row.state === "hibernated") return row;
      if (row.state !== "running") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; only a running sandbox can hibernate`);
      if (mode === "cold") await this.checkStoreQuota(row.owner);
      await this.flushRefusals(id);
      const t0 = performance.now();
      this.meter.sample(id);
      const snapshot = await this.metrics.time("hibernate", mode, () => this.meter.work(id, () => this.host.hibernate(id, mode)));
      return this.hibernated(row, reason, mode, snapshot, t0);
    });
  }

  private async hibernated(row: SandboxRow, reason: Reason, mode: HibernateMode, snapshot: string, t0: number): Promise<SandboxRow> {
    const stored = mode === "cold" ? await this.host.storedBytes(snapshot) : null;
    return this.transition(row.id, "hibernated", reason, { hibernate_snapshot: snapshot, hibernate_mode: mode, stored_bytes: stored }, {
      mode, snapshot, ms: Math.round(performance.now() - t0),
      ...(stored !== null ? { stored_bytes: stored, memory_bytes: row.memory_mb * 1024 * 1024 } : {}),
    });
  }

  async wake(id: string, reason: Reason): Promise<SandboxRow> {
    return this.serialize(id, () => this.wakeLocked(id, reason));
  }

  private async wakeLocked(id: string, reason: Reason): Promise<SandboxRow> {
    const row = (await this.store.getSandbox(id))!;
    if (row.state === "running") return row;
    if (row.state !== "hibernated") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; it cannot be woken`);
    const t0 = performance.now();
    await this.metrics.time("wake", modeOf(row), () => this.meter.work(id, async () => {
      await this.host.wake(id, row.hibernate_snapshot, modeOf(row));
      if (row.hibernate_snapshot) await this.host.dropSnapshot(row.hibernate_snapshot, modeOf(row));
    }));
    const done = await this.transition(id, "running", reason, { hibernate_snapshot: null, hibernate_mode: null, stored_bytes: null, last_activity_at: this.clock.now() }, { mode: modeOf(row), ms: Math.round(performance.now() - t0) });
    await this.restoreNetwork(done);
    return done;
  }

  /**
   * Brings a woken (or recovered, or adopted) sandbox's network back to its policy. A
   * failure leaves the sandbox running without a network and says so in its events.
   */
  private async restoreNetwork(row: SandboxRow): Promise<void> {
    try {
      await this.host.setNetwork(row.id, networkOf(row));
    } catch (e) {
      await this.event(row.id, "network.error", "error", { message: (e as Error).message });
    }
  }

  async setTimeout(id: string, seconds: number): Promise<SandboxRow> {
    return this.serialize(id, async () => {
      const row = (await this.store.getSandbox(id))!;
      if (row.state === "destroyed") throw new DenError("sandbox_destroyed", `sandbox ${id} has been destroyed`);
      const updated = await this.store.updateSandbox(id, { ttl_seconds: seconds, expires_at: this.clock.now() + seconds * 1000 });
      await this.event(id, "timeout_set", "user", { seconds });
      return updated!;
    });
  }

  /**
   * The guest of a sandbox for exec, file and process calls: a hibernated sandbox is
   * woken first (the call just takes longer); the call counts as activity.
   */
  async guest(id: string): Promise<VmSandbox> {
    let row = (await this.store.getSandbox(id))!;
    if (row.state === "hibernated") row = await this.wake(id, "user");
    if (row.state === "destroyed") throw new DenError("sandbox_destroyed", `sandbox ${id} has been destroyed`);
    if (row.state !== "running") throw new DenError("sandbox_not_running", `sandbox ${id} is ${row.state}`);
    await this.touch(id);
    return this.host.guest(id);
  }

  /** The caller's sandbox and its guest, for the exec, file and process routes. */
  async ownedGuest(p: Principal, id: string): Promise<{ row: SandboxRow; guest: VmSandbox }> {
    const row = await this.owned(p, id);
    return { row, guest: await this.guest(row.id) };
  }

  /** Marks activity (throttled to one write a second per sandbox). */
  async touch(id: string): Promise<void> {
    const now = this.clock.now();
    if (now - (this.lastTouch.get(id) ?? 0) < 1000) return;
    this.lastTouch.set(id, now);
    await this.store.updateSandbox(id, { last_activity_at: now });
  }

  /** Brackets a running exec: a sandbox with an exec in flight is never idle. */
  async withExec<T>(id: string, fn: () => Promise<T>): Promise<T> {
    this.execBegan(id);
    try {
      return await fn();
    } finally {
      await this.execEnded(id);
    }
  }

  private execBegan(id: string): void {
    this.activeExecs.set(id, (this.activeExecs.get(id) ?? 0) + 1);
  }

  private async execEnded(id: string): Promise<void> {
    const n = (this.activeExecs.get(id) ?? 1) - 1;
    if (n) this.activeExecs.set(id, n);
    else this.activeExecs.delete(id);
    await this.touch(id).catch(() => undefined);
  }

  /** Like withExec, for a streamed exec: active until the stream is consumed or dropped. */
  async *withExecStream<T>(id: string, source: AsyncGenerator<T>): AsyncGenerator<T> {
    this.execBegan(id);
    try {
      yield* source;
    } finally {
      await this.execEnded(id);
    }
  }

  async recordExec(id: string, type: "exec.started" | "exec.ended", data: Record<string, unknown>): Promise<void> {
    await this.event(id, type, null, data);
  }

  private forget(id: string): void {
    this.meter.forget(id);
    this.cpuSamples.delete(id);
    this.lastTouch.delete(id);
    this.activeExecs.delete(id);
  }

  /**
   * After a (re)start: make the database and the host agree. VMs the database knows are
   * adopted; running sandboxes whose VM is gone are `lost`; hibernated ones wake from
   * their snapshot later; VMs of destroyed or unknown sandboxes are destroyed.
   */
  async reconcile(): Promise<void> {
    const onHost = new Set(this.host.running());
    const live = await this.store.liveSandboxes();
    const known = new Set(live.map((r) => r.id));
    for (const row of live) {
      if (row.state === "creating") {
        // Nobody got this sandbox back from its create call: drop any half-made VM.
        if (onHost.has(row.id)) await this.host.destroy(row.id);
        await this.transition(row.id, "error", "restart", { destroyed_at: this.clock.now() }, { message: "the server stopped while creating it" });
      } else if (row.state === "running" && !onHost.has(row.id)) {
        await this.transition(row.id, "lost", "host_lost");
      } else if (row.state === "running" && this.host.vmState(row.id) === "paused") {
        // Stopped mid-hibernate: the VM froze but the record says running. Running wins.
        await this.host.resume(row.id);
      } else if ((row.state === "lost" || row.state === "hibernated") && this.host.vmState(row.id) === "running") {
        // Stopped mid-wake (or the VM came back): the VM runs, so the record follows it.
        await this.transition(row.id, "running", "restart", { last_activity_at: this.clock.now(), hibernate_snapshot: null, hibernate_mode: null, stored_bytes: null });
        if (row.hibernate_snapshot) await this.host.dropSnapshot(row.hibernate_snapshot, modeOf(row));
      }
    }
    for (const id of onHost) if (!known.has(id)) await this.host.destroy(id);
    // Networks follow the database (a policy change may have been cut short by the stop).
    for (const row of await this.store.liveSandboxes()) if (row.state === "running" && onHost.has(row.id)) await this.restoreNetwork(row);
    // Snapshots nothing points at: half-done uploads and local copies a crash left behind.
    await this.host.collectSnapshots(await this.store.referencedSnapshots());
  }

  /**
   * Brings a `lost` sandbox (its VM died) back from a checkpoint, keeping its id: the
   * newest checkpoint of it unless one is named.
   */
  async recover(p: Principal, id: string, checkpointId?: string): Promise<SandboxRow> {
    return this.serialize(id, async () => {
      const row = (await this.store.getSandbox(id))!;
      if (row.state !== "lost") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; only a lost sandbox is recovered`);
      const cp = checkpointId ? await this.ownedCheckpoint(p, checkpointId) : (await this.store.listCheckpoints(p.owner, id)).at(-1);
      if (!cp || cp.sandbox_id !== id) throw new DenError("snapshot_not_found", `sandbox ${id} has no checkpoint to recover from`);
      await this.host.destroy(id);
      const info = await this.host.restoreStored(id, cp.id);
      const done = await this.transition(id, "running", "user", {
        template_version: info.templateVersion, vcpus: info.vcpus, memory_mb: info.memoryMb, disk_mb: info.diskMb, last_activity_at: this.clock.now(),
      }, { recovered_from: cp.id, checkpoint_age_seconds: Math.round((this.clock.now() - cp.created_at) / 1000) });
      await this.restoreNetwork(done);
      return done;
    });
  }

  /** The checkpoint a lost sandbox would be recovered from, if any. */
  async recoveryPoint(row: SandboxRow): Promise<{ checkpoint_id: string; created_at: string; age_seconds: number } | null> {
    if (row.state !== "lost") return null;
    const cp = (await this.store.listCheckpoints(row.owner, row.id)).at(-1);
    return cp ? { checkpoint_id: cp.id, created_at: new Date(cp.created_at).toISOString(), age_seconds: Math.round((this.clock.now() - cp.created_at) / 1000) } : null;
  }

  /**
   * A clean stop: cold-hibernate every running and warm-hibernated sandbox, so no VM
   * outlives the server. Those not started before `deadline` stay as they are and are
   * adopted at the next start; nothing is lost either way.
   */
  async hibernateAllCold(deadline: number): Promise<{ done: number; left: number }> {
    let done = 0;
    let left = 0;
    for (const row of await this.store.liveSandboxes()) {
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

  /**
   * One pass of the reapers. TTL: every sandbox past its deadline is destroyed, whatever
   * its state. Idle: a running, non-persistent sandbox with no activity for its idle
   * timeout gets its `on_idle`. Activity = API calls, an exec in flight, or guest CPU above
   * `cpuActiveShare` of a core since the last pass.
   */
  async reap(): Promise<void> {
    const now = this.clock.now();
    for (const row of await this.store.liveSandboxes()) {
      // Metering: a long stretch in one state is closed every interval, so CPU lands near when it was used.
      if (meteredState(row) && row.meter_since !== null && now - row.meter_since >= this.config.meter.intervalMs && !this.queues.has(row.id)) {
        await this.serialize(row.id, async () => {
          const cur = await this.store.getSandbox(row.id);
          if (cur && meteredState(cur) && cur.meter_since === row.meter_since) await this.store.updateSandbox(row.id, await this.meter.roll(cur, this.clock.now()));
        });
      }
      if (row.state === "creating") continue;
      if (row.expires_at !== null && row.expires_at <= now) {
        await this.destroy(row.id, "ttl").catch(() => undefined);
        continue;
      }
      if (row.state === "hibernated" && row.persistent === 0 && modeOf(row) === "warm" && row.state_reason === "idle") {
        // Warm first (instant wake), then cold after a second, longer quiet period (no cost at all).
        const coldAt = row.last_activity_at + (row.idle_timeout_seconds + this.config.defaults.coldAfterSeconds) * 1000;
        if (now >= coldAt) await this.hibernate(row.id, "idle", "cold").catch(() => undefined);
        continue;
      }
      if (row.state !== "running") continue;
      if (!this.host.alive(row.id)) {
        // Its VM died under us: say so (a checkpoint can bring it back: POST .../recover).
        await this.serialize(row.id, async () => {
          const cur = await this.store.getSandbox(row.id);
          if (cur?.state === "running" && !this.host.alive(row.id)) await this.transition(row.id, "lost", "host_lost");
        });
        continue;
      }
      if (this.activeExecs.has(row.id) || this.guestBusy(row.id)) {
        await this.touch(row.id);
        continue;
      }
      if (row.persistent === 1) continue;
      if (now - row.last_activity_at >= row.idle_timeout_seconds * 1000) {
        const act = row.on_idle === "destroy" ? this.destroy(row.id, "idle") : this.hibernate(row.id, "idle");
        await act.catch(() => undefined);
      }
    }
  }

  private guestBusy(id: string): boolean {
    const cpu = this.host.cpuSeconds(id);
    if (cpu === undefined) return false;
    const at = performance.now();
    const prev = this.cpuSamples.get(id);
    this.cpuSamples.set(id, { at, cpu });
    if (!prev || at - prev.at < 200) return false;
    return (cpu - prev.cpu) / ((at - prev.at) / 1000) > this.config.reaper.cpuActiveShare;
  }
}
