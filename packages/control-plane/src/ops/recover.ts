import { DenError, type HostSandboxInfo } from "@den/protocol";
import type { CheckpointRow, OperationRow, SandboxRow } from "../db/store.js";
import { hasVm, storedRef } from "../context.js";
import type { Outcome } from "../operations.js";
import { volumeMounts } from "../volumes.js";
import { recoverArgs } from "./args.js";
import { placeStored, vmFields, type OpDeps, type SandboxOp, type Settling } from "./common.js";

export { recoverArgs as args };

type Deps = Pick<OpDeps, "ctx" | "network">;

/** Brings a `lost` sandbox (its VM died) back from a checkpoint, keeping its id (called in the sandbox's queue). */
export async function run(d: Deps, id: string, cp: CheckpointRow): Promise<SandboxRow> {
  const { store, ops, clock } = d.ctx;
  const row = (await store.sandboxes.get(id))!;
  if (row.state !== "lost") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; only a lost sandbox is recovered`);
  // Its host may be the one that was lost: any host with the checkpoint's template version and room.
  const host = await placeStored(d.ctx, cp, row.host_id);
  const op = { ...ops.newOp("recover", id, "user", { checkpoint: cp.id, host: host.instance }), host: host.instance };
  await ops.begin(row, op, async (tx) => {
    if (host.instance !== row.host_id) await tx.sandboxes.update(id, { host_id: host.instance });
    // It comes back without volumes (a checkpoint holds none): its mounts, and their holds, go.
    await volumeMounts(tx).drop(id);
  });
  let info: HostSandboxInfo;
  try {
    info = await host.vms.restore(op.id, id, await storedRef(d.ctx, cp.id));
  } catch (e) {
    await ops.fail(op, id, e);
    throw e;
  }
  return running(d, op, id, {
    patch: { ...vmFields(info), template: row.template, last_activity_at: clock.now() },
    data: { recovered_from: cp.id, checkpoint_age_seconds: Math.round((clock.now() - cp.created_at) / 1000) },
  });
}

/** The one ending of a recovery whose VM is up: the record says running, and its network comes back to its policy. */
async function running(d: Deps, op: OperationRow, id: string, out: Pick<Outcome, "patch" | "data">): Promise<SandboxRow> {
  const done = await d.ctx.ops.finish(op, id, { state: "running", reason: "user", ...out });
  await d.network.restore(done);
  return done;
}

/** A recovery from a checkpoint cut short: kept if its VM came up, else the sandbox stays lost. */
export const recover: SandboxOp = {
  async settle(d: OpDeps, { op, row, host, vm, rollBack }: Settling): Promise<void> {
    if (hasVm(vm)) {
      await host.vms.resume(row.id);
      await running(d, op, row.id, { data: { recovered: true } });
      return;
    }
    await host.vms.destroy(row.id);
    await rollBack();
  },
};
