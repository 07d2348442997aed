import { DenError, type api } from "@den/protocol";
import type { CheckpointRow, Principal, SandboxRow, Store } from "./db/store.js";
import { modeOf, type Ctx, type HibernateMode, type Measure } from "./context.js";
import type { NetworkPolicies } from "./network-policy.js";
import type { Reason } from "./operations.js";
import type { Serializer } from "./serializer.js";
import { deadlineAfter } from "./ops/common.js";
import * as createOp from "./ops/create.js";
import * as destroyOp from "./ops/destroy.js";
import * as hibernateOp from "./ops/hibernate.js";
import { V1_TERMS, type NewSandbox, type Terms } from "./ops/new-sandbox.js";
import * as recoverOp from "./ops/recover.js";
import * as restoreOp from "./ops/restore.js";
import * as setTimeoutOp from "./ops/set-timeout.js";
import * as wakeOp from "./ops/wake.js";

/**
 * The sandbox state machine: create, restore, destroy, hibernate, wake, recover, set
 * timeout. Each is an operation (see operations.ts) whose module (ops/<kind>.ts) holds its
 * forward path and its crash path: its intent, with every id it will produce, commits
 * before the host is asked, and nothing the records still point at is removed before the
 * records stop pointing at it. Here: the caller's checks (limits, quotas), each sandbox's
 * operations one at a time (the queue), and the upkeep the operations share.
 */
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

  async create(p: Principal, req: api.CreateSandboxRequest, deadline: Terms = V1_TERMS): Promise<SandboxRow> {
    const lim = this.ctx.config.limits;
    if ((req.vcpus ?? 0) > lim.vcpusPerSandbox) throw new DenError("invalid_argument", `vcpus: at most ${lim.vcpusPerSandbox} on this server`);
    if ((req.memory_mb ?? 0) > lim.memoryMbPerSandbox) throw new DenError("invalid_argument", `memory_mb: at most ${lim.memoryMbPerSandbox} on this server`);
    if ((req.disk_mb ?? 0) > lim.diskMbPerSandbox) throw new DenError("invalid_argument", `disk_mb: at most ${lim.diskMbPerSandbox} on this server`);
    await this.quota(p);
    return this.materialize(await createOp.begin(this.opDeps, p, req, deadline));
  }

  /** A new, independent sandbox with the checkpoint's state. */
  async restore(p: Principal, cp: CheckpointRow, req: api.RestoreCheckpointRequest, deadline: Terms = V1_TERMS): Promise<SandboxRow> {
    await this.quota(p);
    return this.materialize(await restoreOp.begin(this.opDeps, p, cp, req, deadline));
  }

  /** A new sandbox, recorded: its VM is made in its queue (a failure leaves it in `error`). */
  private materialize(s: NewSandbox): Promise<SandboxRow> {
    return this.queue.run(s.row.id, () => createOp.run(this.opDeps, s));
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
    return this.queue.run(id, () => wakeOp.run(this.opDeps, id, reason, timeoutSeconds));
  }

  /** Wakes a hibernated sandbox by booting it from its disk, its memory given up first (see ops/wake.ts). */
  async wakeByBoot(id: string, reason: Reason, timeoutSeconds?: number): Promise<SandboxRow> {
    return this.queue.run(id, () => wakeOp.runByBoot(this.opDeps, id, reason, timeoutSeconds));
  }

  /** A new deadline `seconds` from now (see ops/set-timeout.ts). */
  async setTimeout(id: string, seconds: number, opts: { extendOnly?: boolean } = {}): Promise<SandboxRow> {
    return this.queue.run(id, () => setTimeoutOp.run(this.opDeps, id, seconds, opts));
  }

  /** Brings a `lost` sandbox (its VM died) back from a checkpoint, keeping its id. */
  async recover(id: string, cp: CheckpointRow): Promise<SandboxRow> {
    return this.queue.run(id, () => recoverOp.run(this.opDeps, id, cp));
  }
}
