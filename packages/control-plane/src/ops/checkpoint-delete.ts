import type { CheckpointRow } from "../db/store.js";
import { checkpointDeleteArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { checkpointDeleteArgs as args };

/**
 * Deletes a checkpoint (the caller checked it is theirs): its row goes and its stored copy
 * is released in one transaction, with the operation's intent.
 */
export async function run(d: Pick<OpDeps, "ctx">, row: CheckpointRow): Promise<void> {
  const { ops, clock } = d.ctx;
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

/** A checkpoint's delete commits with its intent: one left pending deleted nothing, and is rolled back. */
export const checkpointDelete: SandboxOp = {
  async settle(_d, { rollBack }: Settling): Promise<void> {
    await rollBack();
  },
};
