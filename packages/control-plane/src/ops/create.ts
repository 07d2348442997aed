import { newId, type api } from "@den/protocol";
import type { Principal } from "../db/store.js";
import { effectivePolicy } from "../network.js";
import { placeWithVolumes, resolveMounts, specsOf } from "../volumes.js";
import { createArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";
import { STOPPED } from "./common.js";
import { builtinName, materialize, newRow, record, templateSettings, type NewSandbox, type Terms } from "./new-sandbox.js";

export { createArgs as args };

type Deps = Pick<OpDeps, "ctx">;

/**
 * The forward path's first half (the caller checked the limits and the quota): placed, then
 * recorded with its intent. The second half, `run`, makes its VM in the sandbox's queue.
 */
export async function begin(d: Deps, p: Principal, req: api.CreateSandboxRequest, deadline: Terms): Promise<NewSandbox> {
  const { config, hosts, ops, metrics } = d.ctx;
  const vols = await resolveMounts(d.ctx, p.owner, req.volumes);
  const template = await builtinName(d.ctx, req.template ?? config.defaults.template);
  const shape = { ...(req.vcpus ? { vcpus: req.vcpus } : {}), ...(req.memory_mb ? { memoryMb: req.memory_mb } : {}) };
  // A create no host can hold is refused before it leaves a record behind.
  const pull = await d.ctx.shared.pullFor(template);
  const host = await placeWithVolumes(d.ctx, vols.holds.map((h) => h.volumeId), (only, exclude) => hosts.place({ template, ...shape }, { ...(pull ? { pull } : {}), only, ...(exclude ? { exclude } : {}) }));
  const network = effectivePolicy(req.network, config.network);
  const id = newId("sbx");
  const op = { ...ops.newOp("create", id, "user", { template, ...shape, ...(req.disk_mb ? { diskMb: req.disk_mb } : {}) }), host: host.instance };
  const row = newRow(d.ctx, p, id, await templateSettings(d.ctx, template, req), template, network, op, host.instance, deadline);
  return record(d, row, op, () => metrics.time("create", "", () => host.vms.create(op.id, {
    id, template, ...shape, ...(req.disk_mb ? { diskMb: req.disk_mb } : {}), network, ...(vols.holds.length ? { volumes: specsOf(vols.holds) } : {}),
  })), { template }, vols);
}

/** The forward path's second half (called in the sandbox's queue): its VM is made, or it ends in `error`. */
export const run = materialize;

/** A create (or restore) cut short: nobody got the sandbox back from its call, so none of it is kept. */
export const create: SandboxOp = {
  async settle(d: OpDeps, { row, host, rollBack }: Settling): Promise<void> {
    await host.vms.destroy(row.id);
    await rollBack({ state: "destroyed", patch: { destroyed_at: d.ctx.clock.now() }, data: { message: STOPPED } });
  },
};
