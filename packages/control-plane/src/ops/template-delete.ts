import type { OperationRow } from "../db/store.js";
import { argsOf, templateDeleteArgs } from "./args.js";
import type { DetachedOp, OpDeps } from "./common.js";

export { templateDeleteArgs as args };

type Deps = Pick<OpDeps, "ctx">;

/** Deletes a template (the caller checked it is theirs): the row is marked deleted with the intent, then every host drops it. */
export async function run(d: Deps, name: string): Promise<void> {
  const { ops, clock } = d.ctx;
  const op = ops.newOp("template_delete", null, "user", { name });
  await ops.beginDetached(op, (tx) => tx.templates.markDeleted(name, clock.now()));
  await deleteOnHosts(d, name);
  await ops.settleDetached(op, undefined);
}

/** Retires a template on every host (one that is down is told again by the next start's recovery: the row stays deleted). */
async function deleteOnHosts(d: Deps, name: string): Promise<void> {
  const failed = (await d.ctx.hosts.each((h) => h.templates.delete(name))).find((r) => !r.ok);
  if (failed && !failed.ok) throw failed.error;
}

/** A template's delete cut short goes forward: every host drops it. */
export const templateDelete: DetachedOp = {
  async settle(d: OpDeps, op: OperationRow): Promise<void> {
    await deleteOnHosts(d, argsOf(op, "template_delete").name);
    await d.ctx.ops.settleDetached(op, undefined);
  },
};
