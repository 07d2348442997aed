import { hasVm } from "../context.js";
import { deadlineAfter } from "../lifecycle.js";
import type { Reason } from "../operations.js";
import { volumeMounts } from "../volumes.js";
import { argsOf, wakeArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { wakeArgs as args };

/** A wake cut short: the record follows the VM (there: running; not: still hibernated, untouched). */
export const wake: SandboxOp = {
  async settle(d: OpDeps, { op, row, host, vm, rollBack }: Settling): Promise<void> {
    const { ops, clock } = d.ctx;
    const a = argsOf(op, "wake");
    const id = row.id;
    if (hasVm(vm)) {
      // It came back before the stop: the record follows the VM.
      await host.vms.resume(id);
      const done = await ops.finish(op, id, { state: "running", reason: op.reason as Reason, patch: { hibernate_snapshot: null, hibernate_mode: null, stored_bytes: null, last_activity_at: clock.now(), ...deadlineAfter(row, "running", clock.now(), 0) }, data: { mode: a.mode, recovered: true } },
        a.mode === "cold" && a.snapshot ? (tx) => tx.snapshots.release(a.snapshot!, clock.now()) : undefined);
      await d.lifecycle.dropWarm(row);
      await d.network.restore(done);
      return;
    }
    // It stays hibernated: its snapshot (or its disk, shut down) was never touched, and the
    // volumes a cold wake held again are let go of (those it kept through its sleep stay held).
    if (a.mode === "cold") await host.vms.destroy(id);
    const held = a.held_volumes;
    await rollBack({}, held ? (tx) => volumeMounts(tx).release(id, held) : undefined);
  },
};
