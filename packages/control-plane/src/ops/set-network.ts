import { setNetworkArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { setNetworkArgs as args };

/** A policy change cut short: the policy was written with the intent; networks follow the database at the reconcile. */
export const setNetwork: SandboxOp = {
  async settle(d: OpDeps, { op, row }: Settling): Promise<void> {
    await d.ctx.ops.finish(op, row.id, {});
  },
};
