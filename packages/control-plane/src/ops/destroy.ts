import type { OperationRow, SandboxRow } from "../db/store.js";
import type { Reason } from "../operations.js";
import { argsOf, destroyArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { destroyArgs as args };

type Deps = Pick<OpDeps, "ctx" | "lifecycle" | "network">;

/** The forward path: intent, the VM goes, then the record (called in the sandbox's queue). */
export async function run(d: Deps, id: string, reason: Reason): Promise<SandboxRow> {
  const { store, ops, hosts, metrics } = d.ctx;
  const row = (await store.sandboxes.get(id))!;
  if (row.state === "destroyed") return row;
  const host = hosts.of(row);
  const op = ops.newOp("destroy", id, reason, {});
  // The intent goes first: a crash after it finishes the destroy at the next start.
  await ops.begin(row, op);
  await d.network.flush(id);
  try {
    await metrics.time("destroy", "", () => host.vms.destroy(id));
  } catch (e) {
    // The VM is still there: the sandbox stays as it was, and a retry destroys it.
    await ops.fail(op, id, e);
    throw e;
  }
  const done = await destroyed(d, op, row, reason);
  d.ctx.meter.forget(id);
  return done;
}

/** The one ending of a destroy whose VM is gone: the record, what it held released, a warm snapshot dropped. */
async function destroyed(d: Deps, op: OperationRow, row: SandboxRow, reason: Reason): Promise<SandboxRow> {
  const done = await d.ctx.ops.finish(op, row.id, { state: "destroyed", reason, patch: { destroyed_at: d.ctx.clock.now() } }, (tx) => d.lifecycle.releaseHeld(tx, row));
  await d.lifecycle.dropWarm(row);
  return done;
}

/** A destroy cut short goes forward: the VM goes, then the record (a host's loss ends it `lost`). */
export const destroy: SandboxOp = {
  async settle(d: OpDeps, { op, row, host }: Settling): Promise<void> {
    await host.vms.destroy(row.id);
    if (argsOf(op, "destroy").lost === true) await d.ctx.ops.finish(op, row.id, { state: "lost", reason: "host_lost" });
    else await destroyed(d, op, row, op.reason as Reason);
  },
};
