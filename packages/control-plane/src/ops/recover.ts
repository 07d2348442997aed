import { hasVm } from "../context.js";
import { recoverArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { recoverArgs as args };

/** A recovery from a checkpoint cut short: kept if its VM came up, else the sandbox stays lost. */
export const recover: SandboxOp = {
  async settle(d: OpDeps, { op, row, host, vm, rollBack }: Settling): Promise<void> {
    if (hasVm(vm)) {
      await host.vms.resume(row.id);
      const done = await d.ctx.ops.finish(op, row.id, { state: "running", reason: "user", data: { recovered: true } });
      await d.network.restore(done);
      return;
    }
    await host.vms.destroy(row.id);
    await rollBack();
  },
};
