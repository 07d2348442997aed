import { DenError, newId, type HostAgent, type HostSandboxInfo } from "@den/protocol";
import { faultPoint } from "@den/store";
import { networkOf, type OperationRow, type Principal, type SandboxRow, type Store } from "../db/store.js";
import { pendingStored, refOf } from "../context.js";
import { NO_NETWORK } from "../network.js";
import type { Reason } from "../operations.js";
import { VolumeMoves } from "./volume-move.js";
import { specsOf, volumeMounts, type ResolvedMounts } from "../volumes.js";
import { argsOf, forkArgs } from "./args.js";
import { STOPPED, placeStored, vmFields, type OpDeps, type SandboxOp, type Settling } from "./common.js";
import { newRow, termsOf, type Settings, type Terms } from "./new-sandbox.js";

export { forkArgs as args };

type Deps = Pick<OpDeps, "ctx">;

/**
 * Forks a running sandbox into `count` children with its exact state (called in the
 * parent's queue; the caller checked the quota and resolved `vols`, what each child mounts).
 * On its host they share its memory and disk copy-on-write; when its host has no room,
 * through the store onto others. The children's rows (ids chosen here) are written with the
 * intent; each child has the parent's TTL counted from its own creation (or `ttlSeconds`),
 * and the parent's metadata plus `forked_from`.
 */
export async function run(d: Deps, p: Principal, id: string, count: number, vols: ResolvedMounts, ttlSeconds?: number): Promise<SandboxRow[]> {
  const { store, ops, metrics, meter, clock } = d.ctx;
  const parent = (await store.sandboxes.get(id))!;
  // Children share the parent's memory and disk copy-on-write: they live on its host, if it has room.
  const host = d.ctx.hosts.of(parent);
  if (parent.state !== "running") throw new DenError("invalid_state", `sandbox ${id} is ${parent.state}`);
  const ids = Array.from({ length: count }, () => newId("sbx"));
  const network = networkOf(parent);
  const elsewhere = await forkTargets(d, parent, ids);
  if (elsewhere && vols.holds.length) throw new DenError("capacity_exhausted", `the host of sandbox ${id} has no room for ${count} more, and children mounting volumes cannot go elsewhere (a volume lives on one host)`);
  // The children run on the parent's host: volumes parked in the store or on another host (nothing mounting them) come there first.
  if (vols.holds.length && vols.host !== host.instance) await new VolumeMoves(d.ctx).bring(vols.holds.map((h) => h.volumeId), host);
  if (elsewhere) return forkElsewhere(d, p, parent, ids, elsewhere, ttlSeconds);
  const op = ops.newOp("fork", id, "user", { children: ids });
  await ops.begin(parent, op, async (tx) => {
    for (const c of ids) {
      await volumeMounts(tx).take(c, vols.holds, clock.now(), host.instance);
      await tx.sandboxes.insert(newRow(d.ctx, p, c, forkSettings(parent, ttlSeconds), parent.template, network, op, host.instance, forkTerms(parent, ttlSeconds)), d.ctx.config.limits.sandboxesPerOwner);
      await ops.event(c, "creating", "user", { forked_from: id }, tx);
    }
  });
  faultPoint("fork-after-intent");
  let kids: HostSandboxInfo[];
  try {
    kids = await metrics.time("fork", "", () => meter.work(id, () => host.vms.fork(op.id, id, ids, network.egress === "none" ? NO_NETWORK : network, vols.holds.length ? specsOf(vols.holds) : undefined)));
  } catch (e) {
    await ops.fail(op, id, e, {}, (tx) => dropChildren(d, tx, op, ids, "error", (e as Error).message));
    throw e;
  }
  faultPoint("fork-after-children");
  let out: SandboxRow[] = [];
  await ops.finish(op, id, { result: { children: ids } }, async (tx) => {
    out = await born(d, tx, op, id, ids, kids, () => ({ forked_from: id }));
  });
  faultPoint("fork-after-commit");
  return out;
}

/**
 * Where fork children go when the parent's host has no room for them: each on a host
 * placed like a restore of the parent's state (undefined: the parent's host has room).
 */
async function forkTargets(d: Deps, parent: SandboxRow, ids: string[]): Promise<Map<string, HostAgent> | undefined> {
  const host = d.ctx.hosts.of(parent);
  try {
    await host.vms.checkShape({ vcpus: parent.vcpus * ids.length, memoryMb: parent.memory_mb * ids.length });
    return undefined;
  } catch (e) {
    if (!(e instanceof DenError && e.code === "capacity_exhausted") || d.ctx.hosts.all.length < 2) throw e;
  }
  const out = new Map<string, HostAgent>();
  const reserved = new Map<string, number>([[host.instance, Number.MAX_SAFE_INTEGER]]);
  for (const c of ids) {
    const h = await placeStored(d.ctx, parent, parent.host_id, reserved);
    out.set(c, h);
    reserved.set(h.instance, (reserved.get(h.instance) ?? 0) + parent.memory_mb);
  }
  return out;
}

/**
 * A fork across hosts: the parent's state goes to the store (a snapshot of its own, the
 * parent keeps running), each child is restored from it on its host, and the snapshot is
 * released with the commit. Intent first, as every fork: the children's rows (naming
 * their hosts) and the snapshot's catalog row are written before any host is asked.
 */
async function forkElsewhere(d: Deps, p: Principal, parent: SandboxRow, ids: string[], targets: Map<string, HostAgent>, ttlSeconds?: number): Promise<SandboxRow[]> {
  const { ops, metrics, meter, clock } = d.ctx;
  const host = d.ctx.hosts.of(parent);
  const network = networkOf(parent);
  const stored = pendingStored(d.ctx, newId("snap"), parent, "checkpoint");
  const op = ops.newOp("fork", parent.id, "user", { children: ids, via: stored.id });
  await ops.begin(parent, op, async (tx) => {
    await tx.snapshots.insert(stored);
    for (const c of ids) {
      await tx.sandboxes.insert(newRow(d.ctx, p, c, forkSettings(parent, ttlSeconds), parent.template, network, op, targets.get(c)!.instance, forkTerms(parent, ttlSeconds)), d.ctx.config.limits.sandboxesPerOwner);
      await d.ctx.ops.event(c, "creating", "user", { forked_from: parent.id }, tx);
    }
  });
  let kids: HostSandboxInfo[];
  try {
    kids = await metrics.time("fork", "", () => meter.work(parent.id, async () => {
      const made = await host.vms.checkpoint(op.id, parent.id, refOf(stored));
      // The children's hosts check the copy against what the parent's host said it put.
      const from = { ...refOf(stored), ...(made.digests ? { digests: made.digests } : {}) };
      // Each child's restore has an operation key of its own (a host answers a repeated key with its first answer).
      return Promise.all(ids.map((c, i) => targets.get(c)!.vms.restore(`${op.id}.${i}`, c, from, network.egress === "none" ? NO_NETWORK : network)));
    }));
  } catch (e) {
    for (const c of ids) await targets.get(c)!.vms.destroy(c).catch(() => undefined);
    await ops.fail(op, parent.id, e, {}, async (tx) => {
      await dropChildren(d, tx, op, ids, "error", (e as Error).message);
      await tx.snapshots.release(stored.id, clock.now());
    });
    throw e;
  }
  let out: SandboxRow[] = [];
  await ops.finish(op, parent.id, { result: { children: ids } }, async (tx) => {
    out = await born(d, tx, op, parent.id, ids, kids, (c) => ({ forked_from: parent.id, host: targets.get(c)!.instance }));
    await tx.snapshots.release(stored.id, clock.now());
  });
  return out;
}

function forkSettings(parent: SandboxRow, ttlSeconds?: number): Settings {
  return {
    persistent: parent.persistent === 1, ttl_seconds: ttlSeconds ?? parent.ttl_seconds, idle_timeout_seconds: parent.idle_timeout_seconds,
    on_idle: parent.on_idle as "hibernate" | "destroy",
    metadata: { ...(JSON.parse(parent.metadata) as Record<string, string>), forked_from: parent.id },
    env: JSON.parse(parent.env) as Record<string, string>,
    defaults: parent.defaults,
  };
}

function forkTerms(parent: SandboxRow, ttlSeconds?: number): Terms {
  return { ...termsOf(parent), ...(ttlSeconds !== undefined && parent.deadline_mode === "running" ? { run_timeout_seconds: ttlSeconds } : {}) };
}

// ---- the outcomes, each written once ----

/** Fork children made: each running with what its VM settled, and the parent's `forked` event (in the commit's transaction). */
async function born(d: Deps, tx: Store, op: OperationRow, parentId: string, ids: string[], kids: HostSandboxInfo[], data: (c: string) => Record<string, unknown>): Promise<SandboxRow[]> {
  const { ops, clock } = d.ctx;
  const out: SandboxRow[] = [];
  for (const [i, c] of ids.entries()) {
    out.push(await ops.settle(tx, op, c, { state: "running", reason: "user", patch: { ...vmFields(kids[i]!), last_activity_at: clock.now() }, data: data(c) }));
  }
  await ops.event(parentId, "forked", "user", { children: ids }, tx);
  return out;
}

/** Fork children that never came to be (the fork failed, or was cut short): destroyed, with why. */
async function dropChildren(d: Deps, tx: Store, op: OperationRow, ids: string[], reason: Reason, message: string): Promise<void> {
  for (const c of ids) {
    const row = await tx.sandboxes.get(c);
    if (row?.op_id === op.id) await d.ctx.ops.settle(tx, op, c, { state: "destroyed", reason, patch: { destroyed_at: d.ctx.clock.now() }, data: { message } });
  }
}

// ---- after a crash ----

/** A fork cut short: its children go (from whichever host their rows name), the parent works on. */
export const fork: SandboxOp = {
  async settle(d: OpDeps, { op, row, host, rollBack }: Settling): Promise<void> {
    const { store, hosts, clock } = d.ctx;
    const a = argsOf(op, "fork");
    // Children live on the host their rows name (the parent's, or others for a fork across hosts).
    for (const c of a.children) await hosts.of((await store.sandboxes.get(c)) ?? row).vms.destroy(c);
    await host.vms.resume(row.id);
    await rollBack({}, async (tx) => {
      await dropChildren(d, tx, op, a.children, "restart", STOPPED);
      if (a.via) await tx.snapshots.release(a.via, clock.now());
    });
  },
};
