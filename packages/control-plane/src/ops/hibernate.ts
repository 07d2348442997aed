import { DenError, newId, type host } from "@den/protocol";
import { faultPoint, readStoredDigests, storedBytes, storedSnapshotComplete } from "@den/store";
import type { OperationRow, SandboxRow } from "../db/store.js";
import { modeOf, pendingStored, refOf, type HibernateMode } from "../context.js";
import type { Reason } from "../operations.js";
import { volumeMounts } from "../volumes.js";
import { argsOf, hibernateArgs } from "./args.js";
import { STOPPED, type OpDeps, type SandboxOp, type Settling } from "./common.js";

export { hibernateArgs as args };

type Deps = Pick<OpDeps, "ctx" | "lifecycle" | "network">;

/** The forward path (called in the sandbox's queue): running, or warm, to `mode`. */
export async function run(d: Deps, id: string, reason: Reason, mode: HibernateMode): Promise<SandboxRow> {
  const row = (await d.ctx.store.sandboxes.get(id))!;
  if (row.state === "hibernated") {
    const now = modeOf(row);
    // Asleep already as asked, or keeping more than asked (warm is any hibernation; a cold one keeps its disk too).
    if (mode === now || mode === "warm" || (mode === "disk" && now === "cold")) return row;
    if (now === "disk") throw new DenError("invalid_state", `sandbox ${id} is hibernated to its disk; moving it to the snapshot store is not supported yet (wake it first)`);
  }
  if (row.state !== "running" && row.state !== "hibernated") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; only a running sandbox can hibernate`);
  if (mode === "cold") return toCold(d, row, reason);
  if (mode === "disk") return toDisk(d, row, reason);
  return toWarm(d, row, reason);
}

// ---- the outcomes, each written once (the forward path and the crash path end the same way) ----

const warmPatch = (d: Deps, row: SandboxRow, snapshot: string): Partial<SandboxRow> => ({ hibernate_snapshot: snapshot, hibernate_mode: "warm", stored_bytes: null, ...d.lifecycle.pausedDeadline(row) });
const coldPatch = (d: Deps, row: SandboxRow, snapshot: string, bytes: number): Partial<SandboxRow> => ({ hibernate_snapshot: snapshot, hibernate_mode: "cold", stored_bytes: bytes, ...d.lifecycle.pausedDeadline(row) });
const diskPatch = (d: Deps, row: SandboxRow): Partial<SandboxRow> => ({ hibernate_snapshot: null, hibernate_mode: "disk", stored_bytes: null, ...d.lifecycle.pausedDeadline(row) });

/** Hibernated to its disk: the record says so, and a warm snapshot it came from goes. */
async function onDisk(d: Deps, op: OperationRow, row: SandboxRow, reason: Reason, data: Record<string, unknown>): Promise<SandboxRow> {
  const done = await d.ctx.ops.finish(op, row.id, { state: "hibernated", reason, patch: diskPatch(d, row), data: { mode: "disk", ...data } });
  await d.lifecycle.dropWarm(row);
  return done;
}

// ---- forward ----

async function toWarm(d: Deps, row: SandboxRow, reason: Reason): Promise<SandboxRow> {
  const { ops, metrics, meter } = d.ctx;
  const host = d.ctx.hosts.of(row);
  const snapshot = newId("snap");
  const op = ops.newOp("hibernate", row.id, reason, { mode: "warm", snapshot });
  await d.network.flush(row.id);
  await meter.sample(row.id);
  await ops.begin(row, op);
  const t0 = performance.now();
  try {
    await metrics.time("hibernate", "warm", () => meter.work(row.id, () => host.vms.hibernateWarm(op.id, row.id, snapshot)));
  } catch (e) {
    await ops.fail(op, row.id, e);
    throw e;
  }
  return ops.finish(op, row.id, { state: "hibernated", reason, patch: warmPatch(d, row, snapshot), data: { mode: "warm", snapshot, ms: Math.round(performance.now() - t0) } });
}

/**
 * Running (or warm) to disk: the guest flushes and its VM shuts down, its disk kept on its
 * host; its memory is given up. Nothing leaves the host, so a crash anywhere leaves the VM
 * or its disk (recovery finishes it forward). From warm, its memory snapshot goes only
 * once the record stops pointing at it.
 */
export async function toDisk(d: Deps, row: SandboxRow, reason: Reason): Promise<SandboxRow> {
  const { ops, metrics, meter } = d.ctx;
  const host = d.ctx.hosts.of(row);
  const fromWarm = row.state === "hibernated" ? row.hibernate_snapshot : null;
  const op = ops.newOp("hibernate", row.id, reason, { mode: "disk", from_warm: fromWarm });
  if (!fromWarm) await d.network.flush(row.id);
  await meter.sample(row.id);
  await ops.begin(row, op);
  faultPoint("hibernate-disk-after-intent");
  const t0 = performance.now();
  try {
    await metrics.time("hibernate", "disk", () => meter.work(row.id, () => host.vms.hibernateDisk(op.id, row.id)));
  } catch (e) {
    await ops.fail(op, row.id, e);
    throw e;
  }
  faultPoint("hibernate-disk-after-stop");
  return onDisk(d, op, row, reason, { ms: Math.round(performance.now() - t0), ...(fromWarm ? { from_warm: fromWarm } : {}) });
}

/**
 * Running (or warm) to cold: upload with the VM paused, commit the record that points at
 * the stored copy, and only then remove the VM. A crash anywhere leaves either the VM
 * (paused, resumed at the next start) or a committed stored copy, never neither.
 */
async function toCold(d: Deps, row: SandboxRow, reason: Reason): Promise<SandboxRow> {
  const { ops, metrics, meter, clock } = d.ctx;
  const host = d.ctx.hosts.of(row);
  await d.lifecycle.storeQuota(row.owner);
  // From warm, the snapshot taken when it paused is the one to store, under its own id.
  const fromWarm = row.state === "hibernated" ? row.hibernate_snapshot : null;
  const stored = pendingStored(d.ctx, fromWarm ?? newId("snap"), row, "cold");
  const op = ops.newOp("hibernate", row.id, reason, { mode: "cold", snapshot: stored.id, key: stored.key, from_warm: fromWarm });
  if (!fromWarm) await d.network.flush(row.id);
  await meter.sample(row.id);
  await ops.begin(row, op, (tx) => tx.snapshots.insert(stored));
  faultPoint("hibernate-cold-after-intent");
  const t0 = performance.now();
  let up: { storedBytes: number; heldVolumes?: string[]; digests?: host.StoredDigests };
  try {
    up = await metrics.time("hibernate", "cold", () => meter.work(row.id, () => host.vms.upload(op.id, row.id, refOf(stored), fromWarm ?? undefined)));
  } catch (e) {
    await ops.fail(op, row.id, e, {}, (tx) => tx.snapshots.release(stored.id, clock.now()));
    // A host that died mid-upload is back with the VM paused (the snapshot stopped it) and
    // nothing to resume it: the reconcile at its return passed over the sandbox while this
    // operation was open. (A host still away: its reconcile when it returns resumes it.)
    if (!fromWarm) await host.vms.resume(row.id).catch(() => undefined);
    throw e;
  }
  faultPoint("hibernate-cold-after-upload");
  const max = d.ctx.config.limits.storedBytesPerOwner;
  const done = await ops.finish(op, row.id, {
    state: "hibernated", reason, patch: coldPatch(d, row, stored.id, up.storedBytes),
    data: { mode: "cold", snapshot: stored.id, ms: Math.round(performance.now() - t0), stored_bytes: up.storedBytes, memory_bytes: row.memory_mb * 1024 * 1024 },
    result: up,
  }, async (tx) => {
    // The quota holds what the upload actually wrote, checked with the commit.
    await tx.snapshots.checkQuota(row.owner, up.storedBytes, max);
    await tx.snapshots.complete(stored.id, up.storedBytes, up.digests);
    // The volumes its guest let go of are free for others while it sleeps (its mounts stay,
    // for the wake); those a process kept files open on stay held by it.
    await volumeMounts(tx).release(row.id, up.heldVolumes ?? []);
  }).catch(async (e: unknown) => {
    if (!(e instanceof DenError && e.code === "quota_exceeded")) throw e;
    // Refused: the record stays as it was, the copy is released, and a VM the upload left
    // paused goes back to work (should this process die first, the next start resumes it).
    await ops.fail(op, row.id, e, {}, (tx) => tx.snapshots.release(stored.id, clock.now()));
    if (!fromWarm) await host.vms.wakeWarm(newId("op"), row.id, null).catch((err: unknown) => d.ctx.log.warn({ err }, `sandbox ${row.id}: not resumed after a refused cold hibernate`));
    throw e;
  });
  faultPoint("hibernate-cold-after-commit");
  await d.lifecycle.removeVm(row, fromWarm);
  faultPoint("hibernate-cold-after-vm-removal");
  return done;
}

// ---- after a crash ----

/** A hibernate cut short: warm and cold go forward if what they made is whole, else back; disk goes forward. */
export const hibernate: SandboxOp = {
  async settle(d: OpDeps, s: Settling): Promise<void> {
    const { op, row, host, rollBack } = s;
    const { ops, objects, clock } = d.ctx;
    const a = argsOf(op, "hibernate");
    const reason = op.reason as Reason;
    if (a.mode === "disk") return settleDisk(d, s, a.from_warm ?? null);
    if (a.mode === "warm") {
      if ((await host.inventory()).snapshots.includes(a.snapshot)) {
        await ops.finish(op, row.id, { state: "hibernated", reason, patch: warmPatch(d, row, a.snapshot), data: { mode: "warm", snapshot: a.snapshot, recovered: true } });
        return;
      }
      await host.vms.resume(row.id);
      await rollBack();
      return;
    }
    if (await storedSnapshotComplete(objects, a.key)) {
      // The stored copy is whole: the hibernate took effect; the VM goes only now.
      const bytes = await storedBytes(objects, a.key);
      // The host's answer (its digests) went with the process that asked: the record is made
      // from the store as it is now, moments after the upload (without one, every later wake
      // would go by the store's word instead).
      const digests = await readStoredDigests(objects, a.key);
      await ops.finish(op, row.id, { state: "hibernated", reason, patch: coldPatch(d, row, a.snapshot, bytes), data: { mode: "cold", snapshot: a.snapshot, stored_bytes: bytes, recovered: true } }, (tx) => tx.snapshots.complete(a.snapshot, bytes, digests));
      await d.lifecycle.removeVm(row, a.from_warm ?? null);
      return;
    }
    // Not whole: the VM (paused for the upload) works on, and the half upload is released.
    if (!a.from_warm) await host.vms.resume(row.id);
    await rollBack({}, (tx) => tx.snapshots.release(a.snapshot, clock.now()));
  },
};

/**
 * A disk hibernate cut short: nothing of it left the host, so it is finished forward (the
 * VM shuts down keeping its disk, unless it already has). Only if that fails now does the
 * sandbox go back to what it was.
 */
async function settleDisk(d: OpDeps, { op, row, host, vm }: Settling, fromWarm: string | null): Promise<void> {
  if (vm?.state !== "off") {
    try {
      await host.vms.hibernateDisk(op.id, row.id);
    } catch (err) {
      d.ctx.log.warn({ err }, `sandbox ${row.id}: an interrupted disk hibernate could not be finished; it is rolled back`);
      if (!fromWarm) await host.vms.resume(row.id);
      await d.ctx.ops.fail(op, row.id, new Error(STOPPED), { reason: "restart" }, undefined, "rolled_back");
      return;
    }
  }
  await onDisk(d, op, row, op.reason as Reason, { recovered: true });
}
