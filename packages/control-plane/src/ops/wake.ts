import { DenError, type HostAgent } from "@den/protocol";
import { faultPoint } from "@den/store";
import type { OperationRow, SandboxRow } from "../db/store.js";
import { hasVm, modeOf, storedRef, type HibernateMode } from "../context.js";
import type { Reason } from "../operations.js";
import { placeWithVolumes, specsOf, volumeMounts } from "../volumes.js";
import { argsOf, wakeArgs } from "./args.js";
import { deadlineAfter, placeStored, type OpDeps, type SandboxOp, type Settling } from "./common.js";
import { toDisk } from "./hibernate.js";

export { wakeArgs as args };

type Deps = Pick<OpDeps, "ctx" | "lifecycle" | "network">;

/** How long a cold wake waits for a host short of memory to make room (the reaper's passes relieve it). */
const WAKE_ROOM_WAIT_MS = 30_000;

/**
 * MiB to free for a wake a host refused (the refusal's details): its charged memory over
 * capacity by what it would add, or its shortfall under the reserve plus a quarter of the
 * guest's RAM (about what a woken sandbox holds, so the wake does not put it short again).
 */
function roomToMake(d: Record<string, unknown>, memoryMb: number): number {
  const n = (k: string) => (typeof d[k] === "number" ? d[k] : undefined);
  const [used, cap, asked, avail, reserve] = [n("used_mb"), n("capacity_mb"), n("requested_mb"), n("available_mb"), n("reserve_mb")];
  if (d.resource === "memory" && used !== undefined && cap !== undefined) return Math.max(1, used + (asked ?? memoryMb) - cap);
  if (d.resource === "memory_pressure" && avail !== undefined && reserve !== undefined) return Math.max(1, reserve - avail) + Math.ceil(memoryMb / 4);
  return memoryMb;
}

// ---- forward (called in the sandbox's queue) ----

/**
 * A wake; a cold one whose host refused it for memory after all (another wake took the room
 * made for it between placement and restore; nothing was restored) is placed again, room
 * made again, until WAKE_ROOM_WAIT_MS is over. `timeoutSeconds`: a deadline that counts only
 * while running starts again at this (else at the one it was made with).
 */
export async function run(d: Deps, id: string, reason: Reason, timeoutSeconds?: number): Promise<SandboxRow> {
  const deadline = performance.now() + WAKE_ROOM_WAIT_MS;
  for (;;) {
    try {
      return await attempt(d, id, reason, deadline, timeoutSeconds);
    } catch (e) {
      const resource = e instanceof DenError && e.code === "capacity_exhausted" ? e.details?.resource : undefined;
      const cold = modeOf((await d.ctx.store.sandboxes.get(id))!) === "cold";
      if (!cold || (resource !== "memory" && resource !== "memory_pressure") || performance.now() > deadline) throw e;
    }
  }
}

/**
 * Wakes a hibernated sandbox by booting it from its disk (E2B's resume with `memory:
 * false`): whatever memory it kept is given up first, by a disk hibernate of its own (a
 * cold one is restored first to have its disk back). Each step is an operation of its own.
 */
export async function runByBoot(d: Deps, id: string, reason: Reason, timeoutSeconds?: number): Promise<SandboxRow> {
  let row = (await d.ctx.store.sandboxes.get(id))!;
  if (row.state !== "hibernated") return run(d, id, reason, timeoutSeconds);
  if (modeOf(row) === "cold") row = await run(d, id, reason);
  if (row.state === "running" || modeOf(row) === "warm") await toDisk(d, row, reason);
  return run(d, id, reason, timeoutSeconds);
}

/**
 * A host for a cold wake. Where no host has the memory for it, the wake waits (up to
 * WAKE_ROOM_WAIT_MS) while its last host's least recently active sandboxes are
 * cold-hibernated, rather than failing: the sandbox being woken is the most recently used
 * one there is.
 */
async function placeForWake(d: Deps, row: SandboxRow, deadline: number, only: string | null, exclude?: string): Promise<HostAgent> {
  for (;;) {
    try {
      return await placeStored(d.ctx, row, row.host_id, undefined, only, exclude);
    } catch (e) {
      // (Details cross the host protocol whole.) Only memory is made room for: a host out of
      // vCPUs or disk says so at once.
      const det = e instanceof DenError && e.code === "capacity_exhausted" ? e.details ?? {} : {};
      if ((det.resource !== "memory_pressure" && det.resource !== "memory") || performance.now() > deadline) throw e;
      // Room on its last host (where its files may still be cached): its least recently active others go cold.
      const home = d.ctx.hosts.has(row.host_id) ? d.ctx.hosts.of(row).instance : undefined;
      const makeRoom = d.lifecycle.makeRoom;
      const waited = home && makeRoom ? await makeRoom(home, roomToMake(det, row.memory_mb), row.id, det.resource === "memory" ? "charged" : "private") : 0;
      if (!waited) await new Promise((r) => setTimeout(r, 250));
    }
  }
}

async function attempt(d: Deps, id: string, reason: Reason, deadline: number, timeoutSeconds?: number): Promise<SandboxRow> {
  const { store, ops, metrics, meter } = d.ctx;
  const row = (await store.sandboxes.get(id))!;
  if (row.state === "running") return row;
  if (row.state !== "hibernated") throw new DenError("invalid_state", `sandbox ${id} is ${row.state}; it cannot be woken`);
  const mode = modeOf(row);
  const snapshot = row.hibernate_snapshot;
  if (mode === "cold" && !snapshot) throw new DenError("sandbox_not_running", `sandbox ${id} has no snapshot to wake from`);
  // A cold wake mounts its volumes again: those it let go of are held again with the intent
  // (a 409 if another sandbox holds one as a writer meanwhile), those it kept come back in their slots.
  const mounts = mode === "cold" ? await volumeMounts(store).mountsOf(id) : [];
  const heldBefore = mounts.filter((m) => m.held === 1).map((m) => m.volume_id);
  const volumeIds = mounts.map((m) => m.volume_id);
  // Warm and disk: on its host (its memory snapshot or its disk is there). Cold: everything
  // is in the store, so any compatible host with room will do, its last one first (the
  // host of its volumes, if it has any: else they are brought where it wakes).
  const host = mode === "cold"
    ? await placeWithVolumes(d.ctx, volumeIds, (only, exclude) => placeForWake(d, row, deadline, only, exclude), id)
    : d.ctx.hosts.of(row);
  const op = { ...ops.newOp("wake", id, reason, { mode, snapshot, host: host.instance, ...(mounts.length ? { held_volumes: heldBefore } : {}) }), host: host.instance };
  // The row names the host before the host is asked: a crash leaves nothing it cannot find.
  await ops.begin(row, op, async (tx) => {
    if (host.instance !== row.host_id) await tx.sandboxes.update(id, { host_id: host.instance });
    if (mounts.length) await volumeMounts(tx).retake(id, d.ctx.clock.now(), host.instance);
  });
  if (mode === "cold") faultPoint("wake-cold-after-intent");
  const t0 = performance.now();
  try {
    await metrics.time("wake", mode, () => meter.work(id, async () => {
      if (mode === "warm") await host.vms.wakeWarm(op.id, id, snapshot);
      // A failed boot leaves it shut down, its disk as it was.
      else if (mode === "disk") await host.vms.wakeDisk(op.id, id);
      else await host.vms.restore(op.id, id, await storedRef(d.ctx, snapshot!), undefined, mounts.length ? specsOf(mounts.map((m) => ({ volumeId: m.volume_id, path: m.path, readOnly: m.read_only === 1 }))) : undefined);
    }));
  } catch (e) {
    // It stays hibernated: its snapshot is untouched, and what it held again is let go of.
    if (mode === "cold") await host.vms.destroy(id).catch(() => undefined);
    await ops.fail(op, id, e, {}, mounts.length ? (tx) => volumeMounts(tx).release(id, heldBefore) : undefined);
    throw e;
  }
  if (mode === "cold") faultPoint("wake-cold-after-restore");
  if (mode === "disk") faultPoint("wake-disk-after-boot");
  return awake(d, op, row, reason, { mode, snapshot }, { ms: Math.round(performance.now() - t0) }, { timeoutSeconds });
}

// ---- the outcome, written once (the forward path and the crash path end the same way) ----

/**
 * Running again: the record (a cold wake's stored copy is released in the same transaction;
 * the garbage collector deletes it later), then a warm snapshot it woke from goes and its
 * network comes back to its policy. `forward`: the forward path's (its new deadline, its
 * fault point, and it does not wait for the warm snapshot's removal).
 */
async function awake(d: Deps, op: OperationRow, row: SandboxRow, reason: Reason, a: { mode: HibernateMode; snapshot: string | null | undefined }, data: Record<string, unknown>, forward?: { timeoutSeconds?: number | undefined }): Promise<SandboxRow> {
  const { ops, clock } = d.ctx;
  const done = await ops.finish(op, row.id, {
    state: "running", reason, patch: { hibernate_snapshot: null, hibernate_mode: null, stored_bytes: null, last_activity_at: clock.now(), ...deadlineAfter(row, "running", clock.now(), 0, forward?.timeoutSeconds) },
    data: { mode: a.mode, ...data },
  }, a.mode === "cold" && a.snapshot ? (tx) => tx.snapshots.release(a.snapshot!, clock.now()) : undefined);
  if (forward) {
    if (a.mode === "cold") faultPoint("wake-cold-after-commit");
    // Not waited for: the woken sandbox needs it no more, and one this misses (a crash) is an
    // unreferenced snapshot the garbage collector's host sweep deletes.
    void d.lifecycle.dropWarm(row);
  } else {
    await d.lifecycle.dropWarm(row);
  }
  await d.network.restore(done);
  return done;
}

// ---- after a crash ----

/** A wake cut short: the record follows the VM (there: running; not: still hibernated, untouched). */
export const wake: SandboxOp = {
  async settle(d: OpDeps, { op, row, host, vm, rollBack }: Settling): Promise<void> {
    const a = argsOf(op, "wake");
    const id = row.id;
    if (hasVm(vm)) {
      // It came back before the stop: the record follows the VM.
      await host.vms.resume(id);
      await awake(d, op, row, op.reason as Reason, a, { recovered: true });
      return;
    }
    // It stays hibernated: its snapshot (or its disk, shut down) was never touched, and the
    // volumes a cold wake held again are let go of (those it kept through its sleep stay held).
    if (a.mode === "cold") await host.vms.destroy(id);
    const held = a.held_volumes;
    await rollBack({}, held ? (tx) => volumeMounts(tx).release(id, held) : undefined);
  },
};
