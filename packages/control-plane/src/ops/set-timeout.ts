import { DenError } from "@den/protocol";
import type { SandboxRow } from "../db/store.js";
import { setTimeoutArgs } from "./args.js";
import type { OpDeps, SandboxOp, Settling } from "./common.js";

export { setTimeoutArgs as args };

/**
 * A new deadline `seconds` from now (called in the sandbox's queue). `extendOnly`: never
 * earlier than the one it has (E2B's connect). A sandbox whose deadline counts only while
 * running keeps its retention limit while hibernated: the new timeout applies from its next wake.
 */
export async function run(d: Pick<OpDeps, "ctx">, id: string, seconds: number, opts: { extendOnly?: boolean }): Promise<SandboxRow> {
  const { store, ops, clock } = d.ctx;
  const row = (await store.sandboxes.get(id))!;
  if (row.state === "destroyed") throw new DenError("sandbox_destroyed", `sandbox ${id} has been destroyed`);
  let expires = clock.now() + seconds * 1000;
  if (opts.extendOnly && row.expires_at !== null && row.expires_at > expires) expires = row.expires_at;
  const asleep = row.deadline_mode === "running" && row.state === "hibernated";
  const patch: Partial<SandboxRow> = asleep ? { run_timeout_seconds: seconds } : { ttl_seconds: seconds, expires_at: expires };
  const op = ops.newOp("set_timeout", id, "user", { seconds, ...(opts.extendOnly ? { extend_only: true } : {}) });
  return ops.atomic(row, op, { patch }, (tx) => ops.event(id, "timeout_set", "user", { seconds }, tx));
}

/** A timeout change commits with its intent (ops.atomic): one left pending changed nothing, and is rolled back. */
export const setTimeout: SandboxOp = {
  async settle(_d, { rollBack }: Settling): Promise<void> {
    await rollBack();
  },
};
