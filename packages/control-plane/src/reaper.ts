import { meteredState } from "./meter.js";
import type { SandboxRow } from "./db/store.js";
import { hasVm, modeOf, type Ctx, type Measure } from "./context.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Serializer } from "./serializer.js";

/** What a host says one VM holds of its memory (admission's charge; private memory where measured). */
type Held = { chargedMb?: number; privateMb?: number };

/** Hibernations a reaper runs at once (each may move a snapshot to the store). */
const MAX_ACTIONS_IN_FLIGHT = 8;
const MAX_DESTROYS_IN_FLIGHT = 32;

/**
 * The TTL and idle reapers, and the meter's interval rolls. TTL: every sandbox past its
 * deadline is destroyed, whatever its state. Idle: a running, non-persistent sandbox with
 * no activity for its idle timeout gets its `on_idle`. Activity = API calls, an exec in
 * flight, or guest CPU above `cpuActiveShare` of a core since the last pass. Each action
 * is an ordinary operation (with its reason), so it is as crash-proof as a user's.
 *
 * A pass starts actions and does not wait for them: a sandbox whose guest is wedged (its
 * hibernate waits out the guest's deadline) holds up only itself, never the next pass or
 * another sandbox's TTL. Actions in flight are bounded (destroys apart: they need no guest
 * and must be on time).
 */
export class Reaper {
  private cpuSamples = new Map<string, { at: number; cpu: number; busy: boolean }>();
  /** Actions started by passes and not yet ended, by sandbox. */
  /** `relief`: a cold hibernation to relieve its host's memory, with what it frees there. */
  private readonly inFlight = new Map<string, { destroy: boolean; relief?: Held; done: Promise<void> }>();

  constructor(
    private readonly ctx: Ctx,
    private readonly queue: Serializer,
    private readonly lifecycle: Lifecycle,
    private readonly activity: { execing(id: string): boolean; touch(id: string): Promise<void>; lastActive(id: string): number | undefined },
  ) {}

  async pass(): Promise<void> {
    const { store, config, clock, hosts } = this.ctx;
    const now = clock.now();
    // What each reachable host holds; the sandboxes of a host that does not answer are not judged this pass.
    const inventories = await hosts.inventories();
    const seen = new Map(inventories.map(({ host, inventory }) => [host.instance, new Map(inventory.vms.map((v) => [v.id, v]))]));
    const live = await store.sandboxes.live();
    for (const { host, inventory } of inventories) if (inventory.capacity.memory) this.relievePressure(host.instance, inventory.capacity.memory, live, seen.get(host.instance)!);
    for (const row of live) {
      if (row.op_id || this.inFlight.has(row.id)) continue;
      const vms = hosts.has(row.host_id) ? seen.get(hosts.of(row).instance) : undefined;
      // Its host does not answer: nothing about it is known this pass (its CPU counter included).
      if (!vms) continue;
      const vm = vms.get(row.id);
      // Metering: a long stretch in one state is closed every interval, so CPU lands near when it was used.
      if (meteredState(row) && row.meter_since !== null && now - row.meter_since >= config.meter.intervalMs && !this.queue.busy(row.id)) await this.roll(row, vm?.cpuSeconds ?? undefined);
      if (row.state === "creating") continue;
      if (row.expires_at !== null && row.expires_at <= now) {
        // E2B's onTimeout: pause hibernates a running sandbox at its deadline (it then keeps only a
        // retention limit): warm, or to its disk only (`hibernate_disk`: keepMemory false).
        const pause = (row.on_deadline === "hibernate" || row.on_deadline === "hibernate_disk") && row.state === "running";
        const mode = row.on_deadline === "hibernate_disk" ? "disk" : "warm";
        this.start(row.id, !pause, () => (pause ? this.lifecycle.hibernate(row.id, "ttl", mode) : this.lifecycle.destroy(row.id, "ttl")));
        continue;
      }
      // A pause through the E2B API is a warm hibernate that goes cold on the same schedule as an idle one.
      // A disk hibernation stays as it is (it holds no VM and no memory already); moving a
      // disk-only sandbox's disk to the store is future work.
      const coldLater = (row.persistent === 0 && row.state_reason === "idle") || row.deadline_mode === "running";
      if (row.state === "hibernated" && modeOf(row) === "warm" && coldLater) {
        // Warm first (instant wake), then cold after a second, longer quiet period (no cost at all).
        const coldAt = row.last_activity_at + (row.idle_timeout_seconds + config.defaults.coldAfterSeconds) * 1000;
        if (now >= coldAt) this.start(row.id, false, () => this.lifecycle.hibernate(row.id, "idle", "cold"));
        continue;
      }
      if (row.state !== "running") continue;
      if (!vm || !hasVm(vm)) {
        await this.markLost(row.id);
        continue;
      }
      if (this.activity.execing(row.id) || this.guestBusy(row.id, vm.cpuSeconds)) {
        await this.activity.touch(row.id);
        continue;
      }
      if (row.persistent === 1) continue;
      if (now - row.last_activity_at >= row.idle_timeout_seconds * 1000) {
        const destroy = row.on_idle === "destroy";
        this.start(row.id, destroy, () => (destroy ? this.lifecycle.destroy(row.id, "idle") : this.lifecycle.hibernate(row.id, "idle")));
      }
    }
  }

  /**
   * A host short of memory (available under its reserve) never waits for the OOM killer to
   * choose: its least recently active sandboxes with a VM are cold-hibernated (state kept;
   * the next call wakes them, on whichever host has room) until what they hold covers the
   * shortfall, counting those already on their way out.
   */
  private relievePressure(hostId: string, memory: { availableMb: number; reserveMb: number }, live: SandboxRow[], vms: Map<string, Held>): void {
    const short = memory.reserveMb - memory.availableMb;
    if (short <= 0) return;
    this.evict({ hostId, needMb: short, measure: "private", live, vms }, `is short of memory (${memory.availableMb} MiB available, ${memory.reserveMb} MiB reserve)`);
  }

  /**
   * Room for a sandbox being woken on a full host (its memory, or the host's reserve, taken):
   * the host's least recently active other sandboxes are cold-hibernated until they free
   * `needMb` (by admission's charge, or of what they hold privately: `measure`), and this
   * resolves once those have gone. The one waking is the most recently used sandbox there
   * is; refusing it would leave it unreachable while idle ones hold memory. Returns how many
   * it waited for (0: none to take).
   */
  async makeRoom(hostId: string, needMb: number, except: string, measure: Measure): Promise<number> {
    const live = await this.ctx.store.sandboxes.live();
    const vms = new Map((await this.ctx.hosts.get(hostId).inventory()).vms.map((v) => [v.id, v]));
    const started = this.evict({ hostId, needMb, measure, live, vms, except }, `has no room to wake ${except}`);
    await Promise.all(started.map((id) => this.inFlight.get(id)?.done));
    return started.length;
  }

  /**
   * Cold-hibernates the least recently active sandboxes with a VM on `hostId` (state kept; the
   * next call wakes them, on whichever host has room) until what they free covers `needMb`,
   * counting those already on their way out. What one frees is what its host says it holds
   * (`vms`): counting every sandbox at its full RAM would take one at a time where many
   * light ones must go. Returns the ones it started.
   */
  private evict(e: { hostId: string; needMb: number; measure: Measure; live: SandboxRow[]; vms: Map<string, Held>; except?: string }, why: string): string[] {
    const { hostId, measure, vms, except } = e;
    const frees = (r: SandboxRow, held = vms.get(r.id)) => (measure === "private" ? held?.privateMb : undefined) ?? held?.chargedMb ?? r.memory_mb;
    let short = e.needMb;
    // (A row of the first host may name none: single-node rows from before hosts had ids.)
    const onHost = e.live.filter((r) => this.ctx.hosts.has(r.host_id) && this.ctx.hosts.of(r).instance === hostId);
    for (const r of onHost) {
      const relief = this.inFlight.get(r.id)?.relief;
      if (relief) short -= frees(r, relief);
    }
    const candidates = onHost
      .filter((r) => r.id !== except && !r.op_id && !this.inFlight.has(r.id) && !this.activity.execing(r.id) && (r.state === "running" || (r.state === "hibernated" && modeOf(r) === "warm")))
      .map((r) => ({ r, at: Math.max(r.last_activity_at, this.activity.lastActive(r.id) ?? 0) }))
      .sort((a, b) => a.at - b.at)
      .map(({ r }) => r);
    const started: string[] = [];
    for (const r of candidates) {
      if (short <= 0) break;
      // Not started: too many in flight (the next pass tries again).
      const held = vms.get(r.id) ?? { chargedMb: r.memory_mb };
      if (!this.start(r.id, false, () => this.lifecycle.hibernate(r.id, "memory_pressure", "cold"), held)) break;
      this.ctx.log.warn({ host: hostId, sandbox: r.id }, `host ${hostId} ${why}: cold-hibernating ${r.id}, its least recently active sandbox`);
      started.push(r.id);
      short -= frees(r, held);
    }
    // Those on their way out already count.
    if (!started.length) for (const r of onHost) if (this.inFlight.get(r.id)?.relief) started.push(r.id);
    return started;
  }

  /** Starts a pass's action on a sandbox, unless too many are in flight (the next pass tries again); whether it started. */
  private start(id: string, destroy: boolean, act: () => Promise<unknown>, relief?: Held): boolean {
    const busy = [...this.inFlight.values()].filter((a) => a.destroy === destroy).length;
    if (busy >= (destroy ? MAX_DESTROYS_IN_FLIGHT : MAX_ACTIONS_IN_FLIGHT)) return false;
    const done = act().then(() => undefined, () => undefined).finally(() => this.inFlight.delete(id));
    this.inFlight.set(id, { destroy, ...(relief ? { relief } : {}), done });
    return true;
  }

  /** Resolves once every action started so far has ended. */
  async settled(): Promise<void> {
    await Promise.all([...this.inFlight.values()].map((a) => a.done));
  }

  /** Closes a long open usage segment (compare-and-set, so it never races an operation). */
  private async roll(row: SandboxRow, live: number | undefined): Promise<void> {
    await this.queue.run(row.id, () => this.ctx.store.transaction(async (tx) => {
      const cur = await tx.sandboxes.get(row.id);
      if (!cur || cur.op_id || !meteredState(cur) || cur.meter_since !== row.meter_since) return;
      await tx.sandboxes.cas(row.id, { generation: cur.generation, opId: null }, await this.ctx.meter.roll(cur, this.ctx.clock.now(), tx, live));
    }));
  }

  /** Its VM died under us: say so (a checkpoint can bring it back: POST .../recover). */
  async markLost(id: string): Promise<void> {
    await this.queue.run(id, async () => {
      const { store, ops, hosts } = this.ctx;
      const cur = await store.sandboxes.get(id);
      if (!cur) return;
      const host = hosts.of(cur);
      const vm = (await host.inventory()).vms.find((v) => v.id === id);
      if (cur?.state !== "running" || cur.op_id || hasVm(vm)) return;
      const op = ops.newOp("destroy", id, "host_lost", { lost: true });
      await ops.begin(cur, op);
      try {
        await host.vms.destroy(id);
      } catch (e) {
        await ops.fail(op, id, e);
        throw e;
      }
      await ops.finish(op, id, { state: "lost", reason: "host_lost" });
      this.forget(id);
    });
  }

  forget(id: string): void {
    this.cpuSamples.delete(id);
  }

  private guestBusy(id: string, cpu: number | null): boolean {
    if (cpu === null) return false;
    const at = performance.now();
    const prev = this.cpuSamples.get(id);
    // Too soon after the last sample to measure a share: the last verdict stands, and the
    // older sample is kept (replacing it each pass, passes under 200 ms apart never judged a
    // guest busy, and an idle timeout reaped a guest using a whole CPU).
    if (prev && at - prev.at < 200) return prev.busy;
    const busy = prev !== undefined && (cpu - prev.cpu) / ((at - prev.at) / 1000) > this.ctx.config.reaper.cpuActiveShare;
    this.cpuSamples.set(id, { at, cpu, busy });
    return busy;
  }
}
