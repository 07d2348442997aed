import { storedBytes, storedSnapshotComplete } from "@den/store";
import type { OperationRow, SandboxRow } from "./db/store.js";
import type { HostAgent } from "@den/protocol";
import { newId } from "@den/protocol";
import { hasVm, modeOf, type Ctx } from "./context.js";
import { deadlineAfter, type Lifecycle } from "./lifecycle.js";
import type { Forks } from "./forks.js";
import type { NetworkPolicies } from "./network-policy.js";
import { argsOf, type Reason } from "./operations.js";
import type { Templates } from "./templates.js";
import { volumeMounts, volumeStore } from "./volumes.js";

const STOPPED = "the server stopped during this operation";

/**
 * After a (re)start: every operation still pending is finished or rolled back from the
 * facts (is the VM there, is the stored copy complete), then the database and the host
 * are made to agree. Nothing here deletes a stored object: it only releases rows for the
 * garbage collector.
 */
export class Recovery {
  /** Operations begun before this start belong to no one here: any still pending is settled by retry(). */
  private readonly startedAt: number;

  constructor(
    private readonly ctx: Ctx,
    private readonly lifecycle: Lifecycle,
    private readonly forks: Forks,
    private readonly network: NetworkPolicies,
    private readonly templates: Templates,
    /** The reaper's one way of marking a running sandbox whose VM is gone `lost`. */
    private readonly markLost: (id: string) => Promise<void>,
  ) {
    this.startedAt = ctx.clock.now();
  }

  async run(): Promise<void> {
    // Rows from before hosts were recorded are the first host's: said so once, so a reordered list cannot move them.
    await this.ctx.hosts.open();
    const first = this.ctx.hosts.first;
    if (first) await this.ctx.store.sandboxes.assignUnplaced(first.instance);
    await this.retry();
    await this.reconcile();
  }

  /**
   * Settles every operation left pending by an earlier process of this replica, or by a
   * replica that is gone (its lease ran out): each is claimed first (compare-and-set on its
   * owner), so exactly one replica settles it. One that fails now is tried again next time.
   */
  async retry(opts: { othersOnly?: boolean } = {}): Promise<void> {
    const { store, replica } = this.ctx;
    let alive: Set<string> | undefined;
    for (const op of await store.operations.pending()) {
      const mine = op.owner === replica || op.owner === null;
      if (mine && (opts.othersOnly || op.created_at >= this.startedAt)) continue;
      if (!mine) {
        alive ??= await store.replicas.live(this.ctx.clock.now());
        if (alive.has(op.owner!)) continue;
        if (!(await store.operations.claim(op.id, op.owner, replica))) continue;
        this.ctx.log.warn({ op: op.id, kind: op.kind, from: op.owner }, `replica ${op.owner} is gone: settling its operation ${op.id} (${op.kind})`);
      }
      try {
        await this.settle(op);
      } catch (err) {
        this.ctx.log.warn({ err, op: op.id, kind: op.kind }, "could not settle an interrupted operation; it is tried again later");
      }
    }
  }

  private async settle(op: OperationRow): Promise<void> {
    const { store, ops, hosts, clock, objects } = this.ctx;
    const row = op.sandbox_id ? await store.sandboxes.get(op.sandbox_id) : undefined;
    if (row && row.op_id === op.id && op.kind === "destroy" && argsOf<{ lost?: boolean }>(op).lost && !hosts.has(row.host_id)) {
      // Declared lost with its host: nothing was to be asked of it.
      await ops.finish(op, row.id, { state: "lost", reason: "host_lost" });
      return;
    }
    // A sandbox's operations ran on its host; a template's, on any of them.
    const host = row ? hosts.of(row) : hosts.get(op.host);
    // A host that outlived the control plane may still be at it: the facts count once it is done
    // (a host that does not answer throws here, and the operation is settled on a later pass).
    for (const h of row ? [host] : hosts.all) await h.settled(op.id);
    const rollBack = (out = {}, also?: Parameters<typeof ops.fail>[4]) => ops.fail(op, row && row.op_id === op.id ? row.id : null, new Error(STOPPED), { reason: "restart", ...out }, also, "rolled_back");
    if (op.kind === "template_build") {
      await this.templates.interrupted(op.id);
      return this.templates.giveBack(op.args, new Error(STOPPED), op);
    }
    if (op.kind === "template_delete") {
      await this.templates.deleteOnHosts(argsOf<{ name: string }>(op).name);
      return ops.settleDetached(op, undefined);
    }
    if (!row || row.op_id !== op.id) {
      // Its sandbox moved on (or never was): the operation has nothing left to hold.
      await rollBack();
      return;
    }
    const id = row.id;
    const vm = (await host.inventory()).vms.find((v) => v.id === id);
    switch (op.kind) {
      case "create":
      case "restore": {
        // Nobody got this sandbox back from its call: none of it is kept.
        await host.vms.destroy(id);
        await rollBack({ state: "destroyed", patch: { destroyed_at: clock.now() }, data: { message: STOPPED } });
        return;
      }
      case "destroy": {
        await host.vms.destroy(id);
        const lost = argsOf<{ lost?: boolean }>(op).lost === true;
        await ops.finish(op, id, lost ? { state: "lost", reason: "host_lost" } : { state: "destroyed", reason: op.reason as Reason, patch: { destroyed_at: clock.now() } }, lost ? undefined : (tx) => this.lifecycle.releaseHeld(tx, row));
        if (!lost) await this.lifecycle.dropWarm(row);
        return;
      }
      case "hibernate": {
        const a = argsOf<{ mode: "warm" | "cold" | "disk"; snapshot: string; key?: string; from_warm?: string | null }>(op);
        if (a.mode === "disk") return this.settleDisk(op, row, vm);
        if (a.mode === "warm") {
          if ((await host.inventory()).snapshots.includes(a.snapshot)) {
            await ops.finish(op, id, { state: "hibernated", reason: op.reason as Reason, patch: { hibernate_snapshot: a.snapshot, hibernate_mode: "warm", stored_bytes: null, ...this.lifecycle.pausedDeadline(row) }, data: { mode: "warm", snapshot: a.snapshot, recovered: true } });
            return;
          }
          await host.vms.resume(id);
          await rollBack();
          return;
        }
        if (await storedSnapshotComplete(objects, a.key!)) {
          // The stored copy is whole: the hibernate took effect; the VM goes only now.
          const bytes = await storedBytes(objects, a.key!);
          await ops.finish(op, id, { state: "hibernated", reason: op.reason as Reason, patch: { hibernate_snapshot: a.snapshot, hibernate_mode: "cold", stored_bytes: bytes, ...this.lifecycle.pausedDeadline(row) }, data: { mode: "cold", snapshot: a.snapshot, stored_bytes: bytes, recovered: true } }, (tx) => tx.snapshots.complete(a.snapshot, bytes));
          await this.lifecycle.removeVm(row, a.from_warm ?? null);
          return;
        }
        // Not whole: the VM (paused for the upload) works on, and the half upload is released.
        if (!a.from_warm) await host.vms.resume(id);
        await rollBack({}, (tx) => tx.snapshots.release(a.snapshot, clock.now()));
        return;
      }
      case "wake": {
        const a = argsOf<{ mode: "warm" | "cold" | "disk"; snapshot: string | null; held_volumes?: string[] }>(op);
        if (hasVm(vm)) {
          // It came back before the stop: the record follows the VM.
          await host.vms.resume(id);
          const done = await ops.finish(op, id, { state: "running", reason: op.reason as Reason, patch: { hibernate_snapshot: null, hibernate_mode: null, stored_bytes: null, last_activity_at: clock.now(), ...deadlineAfter(row, "running", clock.now(), 0) }, data: { mode: a.mode, recovered: true } },
            a.mode === "cold" && a.snapshot ? (tx) => tx.snapshots.release(a.snapshot!, clock.now()) : undefined);
          await this.lifecycle.dropWarm(row);
          await this.network.restore(done);
          return;
        }
        // It stays hibernated: its snapshot (or its disk, shut down) was never touched, and the
        // volumes a cold wake held again are let go of (those it kept through its sleep stay held).
        if (a.mode === "cold") await host.vms.destroy(id);
        await rollBack({}, a.held_volumes ? (tx) => volumeMounts(tx).release(id, a.held_volumes!) : undefined);
        return;
      }
      case "recover": {
        if (hasVm(vm)) {
          await host.vms.resume(id);
          const done = await ops.finish(op, id, { state: "running", reason: "user", data: { recovered: true } });
          await this.network.restore(done);
          return;
        }
        await host.vms.destroy(id);
        await rollBack();
        return;
      }
      case "checkpoint": {
        // The VM may be frozen mid-snapshot; the half-taken checkpoint is released.
        const a = argsOf<{ checkpoint: string }>(op);
        await host.vms.resume(id);
        await rollBack({}, (tx) => tx.snapshots.release(a.checkpoint, clock.now()));
        return;
      }
      case "fork": {
        // Children live on the host their rows name (the parent's, or others for a fork across hosts).
        const a = argsOf<{ children: string[]; via?: string }>(op);
        for (const c of a.children) await hosts.of((await store.sandboxes.get(c)) ?? row).vms.destroy(c);
        await host.vms.resume(id);
        await rollBack({}, async (tx) => {
          await this.forks.dropChildren(tx, op, a.children, "restart", STOPPED);
          if (a.via) await tx.snapshots.release(a.via, clock.now());
        });
        return;
      }
      case "set_network":
        // The policy was written with the intent; networks follow the database below.
        await ops.finish(op, id, {});
        return;
      default:
        await rollBack();
    }
  }

  /**
   * A disk hibernate cut short: nothing of it left the host, so it is finished forward (the
   * VM shuts down keeping its disk, unless it already has). Only if that fails now does the
   * sandbox go back to what it was.
   */
  private async settleDisk(op: OperationRow, row: SandboxRow, vm: { state: string } | undefined): Promise<void> {
    const { ops } = this.ctx;
    const host = this.ctx.hosts.of(row);
    const fromWarm = argsOf<{ from_warm?: string | null }>(op).from_warm ?? null;
    if (vm?.state !== "off") {
      try {
        await host.vms.hibernateDisk(op.id, row.id);
      } catch (err) {
        this.ctx.log.warn({ err }, `sandbox ${row.id}: an interrupted disk hibernate could not be finished; it is rolled back`);
        if (!fromWarm) await host.vms.resume(row.id);
        await ops.fail(op, row.id, new Error(STOPPED), { reason: "restart" }, undefined, "rolled_back");
        return;
      }
    }
    await ops.finish(op, row.id, { state: "hibernated", reason: op.reason as Reason, patch: this.lifecycle.diskPatch(row), data: { mode: "disk", recovered: true } });
    await this.lifecycle.dropWarm(row);
  }

  /**
   * Make the database and the host agree. VMs the database knows are adopted; running
   * sandboxes whose VM is gone are `lost`; a cold sandbox's VM that outlived its commit
   * goes; VMs of destroyed or unknown sandboxes are destroyed.
   */
  private async reconcile(): Promise<void> {
    const { hosts } = this.ctx;
    for (const r of await hosts.each((h) => this.reconcileHost(h))) {
      // Its sandboxes stay as the database has them until it answers (the reaper judges them then).
      if (!r.ok) this.ctx.log.warn({ err: r.error, host: r.host.instance }, `host ${r.host.instance} (${r.host.address}) could not be reconciled`);
    }
  }

  /** Makes one host agree with the database (at start, and when a registered host is heard from again). */
  async reconcileHost(host: HostAgent): Promise<void> {
    const { store, hosts } = this.ctx;
    // Its template versions go to the shared store (in the background) whatever the rest finds.
    this.ctx.shared.publishFrom(host);
    const inv = await host.inventory();
    const vms = new Map(inv.vms.map((v) => [v.id, v]));
    const mine = (r: SandboxRow) => hosts.has(r.host_id) && hosts.of(r) === host;
    const live = (await store.sandboxes.live()).filter(mine);
    const known = new Set(live.map((r) => r.id));
    for (const row of live) {
      if (row.op_id) continue;
      const vm = vms.get(row.id);
      if ((row.state === "lost" || row.state === "error") && vm) {
        // Declared lost while its host was away (it may run elsewhere now): the database wins.
        await host.vms.destroy(row.id);
      } else if (row.state === "running" && !hasVm(vm)) {
        await this.markLost(row.id);
      } else if (row.state === "running" && vm?.state === "paused") {
        // Frozen by an operation of an earlier version that never finished: running wins.
        await host.vms.resume(row.id);
      } else if (row.state === "hibernated" && modeOf(row) === "cold" && vm) {
        await this.lifecycle.removeVm(row, null);
      } else if (row.state === "hibernated" && modeOf(row) === "disk" && hasVm(vm)) {
        // A boot that outlived the wake that gave up on it (a host slower than its caller): off again, disk kept.
        await host.vms.hibernateDisk(newId("op"), row.id).catch((err: unknown) => this.ctx.log.warn({ err }, `sandbox ${row.id}: its VM runs though it is hibernated to its disk`));
      }
    }
    for (const id of vms.keys()) if (!known.has(id)) await host.vms.destroy(id);
    // Networks follow the database (a policy change may have been cut short by the stop).
    for (const row of (await store.sandboxes.live()).filter(mine)) if (row.state === "running" && vms.has(row.id)) await this.network.restore(row);
    // Every host keeps what any record needs (a superset costs a small file per stored
    // snapshot and cannot drop another's pin); the pins are the database's.
    await host.snapshots.collect([...(await this.keep(await store.sandboxes.live()))], await store.snapshots.templatePins());
  }

  /** Local snapshots something still needs: warm hibernations', and those a warm hibernate in flight (on any replica) is taking. */
  private async keep(live: SandboxRow[]): Promise<Set<string>> {
    const keep = new Set(live.filter((r) => r.state === "hibernated" && modeOf(r) === "warm" && r.hibernate_snapshot).map((r) => r.hibernate_snapshot!));
    for (const op of await this.ctx.store.operations.pending()) {
      const snapshot = op.kind === "hibernate" ? argsOf<{ snapshot?: string }>(op).snapshot : undefined;
      if (snapshot) keep.add(snapshot);
    }
    return keep;
  }
}
