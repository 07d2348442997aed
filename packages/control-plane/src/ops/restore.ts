import { newId, type api } from "@den/protocol";
import { networkOf, type CheckpointRow, type Principal } from "../db/store.js";
import { storedRef } from "../context.js";
import { effectivePolicy } from "../network.js";
import { placeWithVolumes, resolveMounts, specsOf } from "../volumes.js";
import { restoreArgs } from "./args.js";
import { placeStored, type OpDeps, type SandboxOp } from "./common.js";
import { create } from "./create.js";
import { materialize, newRow, record, templateSettings, type NewSandbox, type Terms } from "./new-sandbox.js";

export { restoreArgs as args };

type Deps = Pick<OpDeps, "ctx">;

/**
 * A new, independent sandbox with the checkpoint's state: the forward path's first half (the
 * caller checked the quota), placed and recorded with its intent; `run` makes its VM.
 */
export async function begin(d: Deps, p: Principal, cp: CheckpointRow, req: api.RestoreCheckpointRequest, deadline: Terms): Promise<NewSandbox> {
  const { config, ops, metrics, meter } = d.ctx;
  // The checkpoint's own mounts are not carried: its volumes are not part of it. It mounts what is named here.
  const vols = await resolveMounts(d.ctx, p.owner, req.volumes);
  // Preferably on the host of the sandbox it was taken from (it surely has the template version); else any that has it and room.
  const origin = (await d.ctx.store.sandboxes.get(cp.sandbox_id))?.host_id ?? null;
  const host = await placeWithVolumes(d.ctx, vols.holds.map((h) => h.volumeId), (only, exclude) => placeStored(d.ctx, cp, origin, undefined, only, exclude));
  const network = effectivePolicy(req.network ?? networkOf(cp), config.network);
  const id = newId("sbx");
  const op = { ...ops.newOp("restore", id, "user", { checkpoint: cp.id }), host: host.instance };
  const row = newRow(d.ctx, p, id, await templateSettings(d.ctx, cp.template, { ...req, metadata: { ...(req.metadata ?? {}), restored_from: cp.id } }), cp.template, network, op, host.instance, deadline);
  const from = await storedRef(d.ctx, cp.id);
  return record(d, row, op, () => metrics.time("restore", "", () => meter.work(id, () => host.vms.restore(op.id, id, from, network, vols.holds.length ? specsOf(vols.holds) : undefined))), { checkpoint: cp.id }, vols);
}

/** The forward path's second half (called in the sandbox's queue), as a create's. */
export const run = materialize;

/** A restore cut short ends as a create does: the sandbox nobody got back is not kept. */
export const restore: SandboxOp = { settle: create.settle };
