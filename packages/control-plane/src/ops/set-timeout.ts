import { setTimeoutArgs } from "./args.js";
import type { SandboxOp, Settling } from "./common.js";

export { setTimeoutArgs as args };

/** A timeout change commits with its intent (ops.atomic): one left pending changed nothing, and is rolled back. */
export const setTimeout: SandboxOp = {
  async settle(_d, { rollBack }: Settling): Promise<void> {
    await rollBack();
  },
};
