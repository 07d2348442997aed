import { createArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";
import { STOPPED } from "./common.js";

export { createArgs as args };

/** A create (or restore) cut short: nobody got the sandbox back from its call, so none of it is kept. */
export const create: SandboxOp = {
  async settle(d: OpDeps, { row, host, rollBack }: Settling): Promise<void> {
    await host.vms.destroy(row.id);
    await rollBack({ state: "destroyed", patch: { destroyed_at: d.ctx.clock.now() }, data: { message: STOPPED } });
  },
};
