import { DenError, newId, type host } from "@den/protocol";
import { faultPoint } from "@den/store";
import type { CheckpointRow, Principal } from "../db/store.js";
import { pendingStored, refOf } from "../context.js";
import { argsOf, checkpointArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { checkpointArgs as args };

/**
 * A durable checkpoint of a running sandbox (called in its queue; the caller wakes a
 * hibernated one first): cataloged first, uploaded, then committed with the quota checked
 * against what was uploaded.
 */
export async function run(d: Pick<OpDeps, "ctx" | "lifecycle">, p: Principal, id: string, name: string | undefined): Promise<CheckpointRow> {
  const { store, ops, metrics, meter, clock } = d.ctx;
  const row = (await store.sandboxes.get(id))!;
  const host = d.ctx.hosts.of(row);
  if (row.state !== "running") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}`);
  await d.lifecycle.storeQuota(row.owner);
  const stored = pendingStored(d.ctx, newId("snap"), row, "checkpoint");
  const op = ops.newOp("checkpoint", id, "user", { checkpoint: stored.id, key: stored.key, name: name ?? null });
  await ops.begin(row, op, (tx) => tx.snapshots.insert(stored));
  faultPoint("checkpoint-after-intent");
  let c: { pauseMs: number; storedBytes: number; digests?: host.StoredDigests };
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
  const max = d.ctx.config.limits.storedBytesPerOwner;
  await ops.finish(op, id, { result: { checkpoint: cp.id } }, async (tx) => {
    // The quota holds what was actually uploaded, checked with the commit.
    await tx.snapshots.checkQuota(row.owner, c.storedBytes, max);
    await tx.checkpoints.insert(cp);
    await tx.snapshots.complete(cp.id, c.storedBytes, c.digests);
    await ops.event(id, "checkpoint", "user", { checkpoint: cp.id, name: cp.name, pause_ms: cp.pause_ms, stored_bytes: cp.stored_bytes }, tx);
  }).catch(async (e: unknown) => {
    if (!(e instanceof DenError && e.code === "quota_exceeded")) throw e;
    await ops.fail(op, id, e, {}, (tx) => tx.snapshots.release(stored.id, clock.now()));
    throw e;
  });
  faultPoint("checkpoint-after-commit");
  return cp;
}

/** A checkpoint cut short: the VM (maybe frozen mid-snapshot) works on; the half-taken checkpoint is released. */
export const checkpoint: SandboxOp = {
  async settle(d: OpDeps, { op, row, host, rollBack }: Settling): Promise<void> {
    const a = argsOf(op, "checkpoint");
    await host.vms.resume(row.id);
    await rollBack({}, (tx) => tx.snapshots.release(a.checkpoint, d.ctx.clock.now()));
  },
};
