import type { OperationRow, SandboxRow } from "./db/store.js";
import { api, host as hostProtocol, newId, type HostAgent } from "@den/protocol";
import { hasVm, modeOf, type Ctx } from "./context.js";
import type { Lifecycle } from "./lifecycle.js";
import type { NetworkPolicies } from "./network-policy.js";
import { STOPPED } from "./ops/common.js";
import { argsOf, detachedOps, sandboxOps, type OpDeps, type Settling } from "./ops/index.js";


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
    private readonly network: NetworkPolicies,
    /** The reaper's one way of marking a running sandbox whose VM is gone `lost`. */
    private readonly markLost: (id: string) => Promise<void>,
  ) {
    this.startedAt = ctx.clock.now();
  }

  /** What the operations' modules (ops/) settle with. */
  private get deps(): OpDeps {
    return { ctx: this.ctx, lifecycle: this.lifecycle, network: this.network };
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
    const { store, ops, hosts } = this.ctx;
    const row = op.sandbox_id ? await store.sandboxes.get(op.sandbox_id) : undefined;
    if (row && row.op_id === op.id && op.kind === "destroy" && argsOf(op, "destroy").lost && !hosts.has(row.host_id)) {
      // Declared lost with its host: nothing was to be asked of it.
      await ops.finish(op, row.id, { state: "lost", reason: "host_lost" });
      return;
    }
    // A sandbox's operations ran on its host; a template's, on any of them.
    const host = row ? hosts.of(row) : hosts.get(op.host);
    // A host that outlived the control plane may still be at it: the facts count once it is done
    // (a host that does not answer throws here, and the operation is settled on a later pass).
    for (const h of row ? [host] : hosts.all) await h.settled(op.id);
    const kind = api.OperationKind.safeParse(op.kind).data;
    if (kind === "template_build" || kind === "template_delete") return detachedOps[kind].settle(this.deps, op);
    const rollBack: Settling["rollBack"] = (out = {}, also) => ops.fail(op, row && row.op_id === op.id ? row.id : null, new Error(STOPPED), { reason: "restart", ...out }, also, "rolled_back");
    if (!row || row.op_id !== op.id || !kind) {
      // Its sandbox moved on (or never was): the operation has nothing left to hold.
      await rollBack();
      return;
    }
    const vm = (await host.inventory()).vms.find((v) => v.id === row.id);
    await sandboxOps[kind].settle(this.deps, { op, row, host, vm, rollBack });
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
    // (A build's VM is the host's: it may be building now, and the host sweeps its own.)
    for (const id of vms.keys()) if (!known.has(id) && !id.startsWith(`${hostProtocol.BUILD_VM_PREFIX}_`)) await host.vms.destroy(id);
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
      const a = op.kind === "hibernate" ? argsOf(op, "hibernate") : undefined;
      const snapshot = a && a.mode !== "disk" ? a.snapshot : undefined;
      if (snapshot) keep.add(snapshot);
    }
    return keep;
  }
}
