import { argsOf, checkpointArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { checkpointArgs as args };

/** A checkpoint cut short: the VM (maybe frozen mid-snapshot) works on; the half-taken checkpoint is released. */
export const checkpoint: SandboxOp = {
  async settle(d: OpDeps, { op, row, host, rollBack }: Settling): Promise<void> {
    const a = argsOf(op, "checkpoint");
    await host.vms.resume(row.id);
    await rollBack({}, (tx) => tx.snapshots.release(a.checkpoint, d.ctx.clock.now()));
  },
};
