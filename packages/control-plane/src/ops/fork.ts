import { argsOf, forkArgs } from "./args.js";
import { STOPPED, type OpDeps, type SandboxOp, type Settling } from "./common.js";

export { forkArgs as args };

/** A fork cut short: its children go (from whichever host their rows name), the parent works on. */
export const fork: SandboxOp = {
  async settle(d: OpDeps, { op, row, host, rollBack }: Settling): Promise<void> {
    const { store, hosts, clock } = d.ctx;
    const a = argsOf(op, "fork");
    // Children live on the host their rows name (the parent's, or others for a fork across hosts).
    for (const c of a.children) await hosts.of((await store.sandboxes.get(c)) ?? row).vms.destroy(c);
    await host.vms.resume(row.id);
    await rollBack({}, async (tx) => {
      await d.forks.dropChildren(tx, op, a.children, "restart", STOPPED);
      if (a.via) await tx.snapshots.release(a.via, clock.now());
    });
  },
};
