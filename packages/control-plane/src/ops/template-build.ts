import { STOPPED, type DetachedOp, type OpDeps } from "./common.js";
import { templateBuildArgs } from "./args.js";
import type { OperationRow } from "../db/store.js";

export { templateBuildArgs as args };

/** A template build cut short: its build row ends interrupted and the name goes back to what it was. */
export const templateBuild: DetachedOp = {
  async settle(d: OpDeps, op: OperationRow): Promise<void> {
    await d.templates.interrupted(op.id);
    await d.templates.giveBack(op.args, new Error(STOPPED), op);
  },
};
