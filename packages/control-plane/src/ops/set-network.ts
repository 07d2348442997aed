import { DenError, type api } from "@den/protocol";
import type { SandboxRow } from "../db/store.js";
import { serializePolicy } from "../network.js";
import { setNetworkArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { setNetworkArgs as args };

/**
 * Changes a sandbox's network policy (called in its queue). A running sandbox gets it at
 * once; a hibernated one keeps it for its wake. The policy is written with the intent, so a
 * crash in between converges at start (networks follow the database).
 */
export async function run(d: Pick<OpDeps, "ctx" | "network">, id: string, policy: api.NetworkPolicy): Promise<SandboxRow> {
  const { ops, store } = d.ctx;
  const row = (await store.sandboxes.get(id))!;
  if (row.state !== "running" && row.state !== "hibernated") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}`);
  const op = ops.newOp("set_network", id, "user", { policy });
  await ops.begin(row, op, (tx) => tx.sandboxes.update(id, { network: serializePolicy(policy) }).then(() => undefined));
  if (row.state === "running") {
    await d.network.flush(id);
    try {
      await d.ctx.hosts.of(row).vms.setNetwork(id, policy);
    } catch (e) {
      await ops.fail(op, id, e, { patch: { network: row.network } });
      throw e;
    }
  }
  return ops.finish(op, id, {}, (tx) => ops.event(id, "network", "user", { egress: policy.egress }, tx));
}

/** A policy change cut short: the policy was written with the intent; networks follow the database at the reconcile. */
export const setNetwork: SandboxOp = {
  async settle(d: OpDeps, { op, row }: Settling): Promise<void> {
    await d.ctx.ops.finish(op, row.id, {});
  },
};
