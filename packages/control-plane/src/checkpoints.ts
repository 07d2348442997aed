import { DenError, api } from "@den/protocol";
import { newId } from "@den/protocol";
import { faultPoint } from "@den/store";
import type { CheckpointRow, Principal } from "./db/store.js";
import { pendingStored, refOf, type Ctx } from "./context.js";
import type { Lifecycle } from "./lifecycle.js";
import type { Serializer } from "./serializer.js";

/** Durable checkpoints: taken into the store (cataloged first), listed, deleted (the garbage collector frees them). */
export class Checkpoints {
  constructor(private readonly ctx: Ctx, private readonly queue: Serializer, private readonly lifecycle: Lifecycle) {}

  /** A durable checkpoint of a running sandbox (the caller wakes a hibernated one first). */
  async take(p: Principal, id: string, name: string | undefined): Promise<CheckpointRow> {
    return this.queue.run(id, async () => {
      const { store, ops, metrics, meter, clock } = this.ctx;
      const row = (await store.sandboxes.get(id))!;
      const host = this.ctx.hosts.of(row);
      if (row.state !== "running") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}`);
      await this.lifecycle.storeQuota(row.owner);
      const stored = pendingStored(this.ctx, newId("snap"), row, "checkpoint");
      const op = ops.newOp("checkpoint", id, "user", { checkpoint: stored.id, key: stored.key, name: name ?? null });
      await ops.begin(row, op, (tx) => tx.snapshots.insert(stored));
      faultPoint("checkpoint-after-intent");
      let c: { pauseMs: number; storedBytes: number };
      try {
        c = await metrics.time("checkpoint", "", () => meter.work(id, () => host.vms.checkpoint(op.id, id, refOf(stored))));
      } catch (e) {
        await ops.fail(op, id, e, {}, (tx) => tx.snapshots.release(stored.id, clock.now()));
        throw e;
      }
      faultPoint("checkpoint-after-upload");
      const cp: CheckpointRow = {
        id: stored.id, owner: p.owner, sandbox_id: id, name: name ?? null, template: row.template, template_version: row.template_version,
        vcpus: row.vcpus, memory_mb: row.memory_mb, disk_mb: row.disk_mb, pause_ms: Math.round(c.pauseMs), stored_bytes: c.storedBytes,
        created_at: clock.now(), network: row.network,
      };
      const max = this.ctx.config.limits.storedBytesPerOwner;
      await ops.finish(op, id, { result: { checkpoint: cp.id } }, async (tx) => {
        // The quota holds what was actually uploaded, checked with the commit.
        await tx.snapshots.checkQuota(row.owner, c.storedBytes, max);
        await tx.checkpoints.insert(cp);
        await tx.snapshots.complete(cp.id, c.storedBytes);
        await ops.event(id, "checkpoint", "user", { checkpoint: cp.id, name: cp.name, pause_ms: cp.pause_ms, stored_bytes: cp.stored_bytes }, tx);
      }).catch(async (e: unknown) => {
        if (!(e instanceof DenError && e.code === "quota_exceeded")) throw e;
        await ops.fail(op, id, e, {}, (tx) => tx.snapshots.release(stored.id, clock.now()));
        throw e;
      });
      faultPoint("checkpoint-after-commit");
      return cp;
    });
  }

  async owned(p: Principal, id: string): Promise<CheckpointRow> {
    const row = api.CheckpointId.safeParse(id).success ? await this.ctx.store.checkpoints.get(id) : undefined;
    if (!row || row.owner !== p.owner) throw new DenError("snapshot_not_found", `checkpoint ${JSON.stringify(id)} does not exist`);
    return row;
  }

  /**
   * Deletes a checkpoint: its row goes and its stored copy is released in one
   * transaction; the garbage collector deletes the objects after the grace period, so a
   * restore reading it right now still finishes. Sandboxes restored from it keep their own
   * copy of its disk.
   */
  async delete(p: Principal, id: string): Promise<void> {
    const { ops, clock } = this.ctx;
    const row = await this.owned(p, id);
    const op = ops.newOp("checkpoint_delete", row.sandbox_id, "user", { checkpoint: row.id });
    await ops.record(op, async (tx) => {
      // Its time in the store stays on the bill.
      await tx.usage.insert({
        sandbox_id: row.sandbox_id, owner: row.owner, state: "checkpoint", start_ms: row.created_at, end_ms: clock.now(),
        vcpus: 0, memory_mb: 0, host_cpu_ms: 0, den_cpu_ms: 0, stored_bytes: Number(row.stored_bytes),
      });
      await tx.checkpoints.delete(row.id);
      await tx.snapshots.release(row.id, clock.now());
      await ops.event(row.sandbox_id, "checkpoint.deleted", "user", { checkpoint: row.id, name: row.name }, tx);
    });
  }
}
