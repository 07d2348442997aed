import { restoreArgs } from "./args.js";
import type { SandboxOp } from "./common.js";
import { create } from "./create.js";

export { restoreArgs as args };

/** A restore cut short ends as a create does: the sandbox nobody got back is not kept. */
export const restore: SandboxOp = { settle: create.settle };
