import { checkpointDeleteArgs } from "./args.js";
import type { SandboxOp, Settling } from "./common.js";

export { checkpointDeleteArgs as args };

/** A checkpoint's delete commits with its intent: one left pending deleted nothing, and is rolled back. */
export const checkpointDelete: SandboxOp = {
  async settle(_d, { rollBack }: Settling): Promise<void> {
    await rollBack();
  },
};
