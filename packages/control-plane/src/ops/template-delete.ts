import type { OperationRow } from "../db/store.js";
import { argsOf, templateDeleteArgs } from "./args.js";
import type { DetachedOp, OpDeps } from "./common.js";

export { templateDeleteArgs as args };

/** A template's delete cut short goes forward: every host drops it. */
export const templateDelete: DetachedOp = {
  async settle(d: OpDeps, op: OperationRow): Promise<void> {
    await d.templates.deleteOnHosts(argsOf(op, "template_delete").name);
    await d.ctx.ops.settleDetached(op, undefined);
  },
};
