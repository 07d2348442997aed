import { DenError, type api } from "@den/protocol";
import { newId } from "@den/protocol";
import type { Meter } from "./meter.js";
import type { Metrics } from "./metrics.js";
import type { OperationRow, SandboxRow, Store } from "./db/store.js";
import type { Outbox } from "./webhooks/outbox.js";
import { VolumeMounts } from "./db/volume-mounts.js";

export type Reason = api.TransitionReason;

/** A source of "now": the real clock, or a test's. */
export interface Clock {
  now(): number;
}
export const systemClock: Clock = { now: () => Date.now() };

/** How an operation settles a sandbox: its new state (if it changes), fields, and what the event says. */
export interface Outcome {
  state?: api.SandboxState;
  reason?: Reason;
  patch?: Partial<SandboxRow>;
  data?: Record<string, unknown>;
  result?: unknown;
}

/**
 * Operations, intent first. `begin` writes the operation's row and puts the sandbox in
 * its in-between state (`op_id`/`op_kind`) in one transaction, compare-and-set on the
 * sandbox's generation, before anything is asked of a host. `finish` and `fail` settle
 * it in one transaction too: the new state, the usage segment of the state it leaves,
 * its event and the operation's status commit together or not at all. A restart finds
 * every operation still `pending` and finishes or rolls it back (see recovery.ts).
 */
export class Operations {
  /** Who wants to know when a sandbox stops being usable (a stream to its guest, say). */
  private goneWatchers = new Map<string, Set<() => void>>();

  constructor(
    private readonly store: Store,
    private readonly meter: Meter,
    private readonly metrics: Metrics,
    private readonly clock: Clock,
    private readonly eventsCap: number,
    /** The replica this process is: the owner of the operations it begins. */
    private readonly replica: string,
  ) {}

  /** Sandboxes with an operation begun by this process and not yet settled. */
  private readonly local = new Map<string, number>();

  runsHere(id: string): boolean {
    return this.local.has(id);
  }

  /** A sandbox whose operation this process begun outside `begin` (a create's row is written with its operation). */
  holdLocal(id: string): void {
    this.held(id, 1);
  }

  private held(id: string, d: 1 | -1): void {
    const n = (this.local.get(id) ?? 0) + d;
    if (n > 0) this.local.set(id, n);
    else this.local.delete(id);
  }

  /**
   * `cb` runs once when sandbox `id` stops being usable: an operation that takes its VM
   * away (destroy, hibernate) has been begun, or it settled in a state other than running.
   * Returns the unsubscribe.
   */
  onGone(id: string, cb: () => void): () => void {
    let set = this.goneWatchers.get(id);
    if (!set) this.goneWatchers.set(id, (set = new Set()));
    set.add(cb);
    return () => {
      set.delete(cb);
      if (!set.size && this.goneWatchers.get(id) === set) this.goneWatchers.delete(id);
    };
  }

  private gone(id: string): void {
    const set = this.goneWatchers.get(id);
    if (!set) return;
    this.goneWatchers.delete(id);
    for (const cb of set) cb();
  }

  /** A new operation row (not yet written). */
  newOp(kind: api.OperationKind, sandboxId: string | null, reason: Reason, args: Record<string, unknown>): OperationRow {
    return {
      id: newId("op"), sandbox_id: sandboxId, kind, args: JSON.stringify(args), status: "pending", result: null, error: null,
      reason, host: null, created_at: this.clock.now(), finished_at: null, owner: this.replica,
    };
  }

  /** One line per settled change of state and per failed operation (the control plane hands in its logger). */
  log: { info(o: object, m: string): void; warn(o: object, m: string): void } = { info: () => undefined, warn: () => undefined };

  /** Where lifecycle events become webhook deliveries, in the event's transaction (set by the control plane). */
  outbox?: Pick<Outbox, "sandboxEvent">;

  /** Appends an event (in `s`, a transaction, when given); `kind`: the operation it settles. */
  async event(id: string, type: string, reason: Reason | null, data: Record<string, unknown> = {}, s: Store = this.store, kind?: string): Promise<void> {
    // The event and its webhook deliveries commit together.
    await s.transaction(async (tx) => {
      await tx.events.add(id, type, reason, data, this.eventsCap);
      await this.outbox?.sandboxEvent(tx, id, type, reason, data, kind);
    });
  }

  /**
   * Records the intent: the operation row, and `row` taken into it (compare-and-set on
   * its generation; another operation in flight is `operation_in_progress`). `also` writes
   * more in the same transaction (catalog rows of snapshots it will upload, fork children).
   */
  async begin(row: SandboxRow, op: OperationRow, also?: (tx: Store) => Promise<void>): Promise<SandboxRow> {
    if (row.op_id) throw inProgress(row);
    const taken = await this.store.transaction(async (tx) => {
      await tx.operations.insert(op);
      const taken = await tx.sandboxes.cas(row.id, { generation: row.generation, opId: null }, { op_id: op.id, op_kind: op.kind, op_since: op.created_at });
      if (!taken) throw inProgress((await tx.sandboxes.get(row.id)) ?? row);
      await also?.(tx);
      return taken;
    });
    this.held(row.id, 1);
    if (op.kind === "destroy" || op.kind === "hibernate") this.gone(row.id);
    return taken;
  }

  /** An operation that is over as soon as it is written (deleting a checkpoint): its row and its effect, one transaction. */
  async record(op: OperationRow, also: (tx: Store) => Promise<void>): Promise<void> {
    await this.store.transaction(async (tx) => {
      await tx.operations.insert({ ...op, status: "done", finished_at: op.created_at });
      await also(tx);
    });
  }

  /** Marks a detached operation done (or failed), with `also` in the same transaction. */
  async settleDetached(op: OperationRow, error: unknown | undefined, also?: (tx: Store) => Promise<void>): Promise<void> {
    await this.store.transaction(async (tx) => {
      if (error === undefined) await tx.operations.finish(op.id, "done", this.clock.now(), undefined, null);
      else await tx.operations.finish(op.id, "failed", this.clock.now(), undefined, (error instanceof Error ? error.message : String(error)).slice(0, 2000));
      await also?.(tx);
    });
  }

  /** An operation with no sandbox to hold (template builds and deletes). */
  async beginDetached(op: OperationRow, also?: (tx: Store) => Promise<void>): Promise<void> {
    await this.store.transaction(async (tx) => {
      await tx.operations.insert(op);
      await also?.(tx);
    });
  }

  /** Settles a done operation on sandbox `id`: its outcome, segment, event and status in one transaction. */
  async finish(op: OperationRow, id: string, out: Outcome, also?: (tx: Store) => Promise<void>): Promise<SandboxRow> {
    const live = out.state ? await this.meter.sample(id) : undefined;
    const row = await this.store.transaction(async (tx) => {
      const settled = await this.settle(tx, op, id, out, live);
      await tx.operations.finish(op.id, "done", this.clock.now(), out.result, null);
      await also?.(tx);
      return settled;
    });
    this.held(id, -1);
    if (out.state) {
      this.metrics.transition(out.state, out.reason ?? "user");
      const mode = typeof out.data?.mode === "string" ? ` ${out.data.mode}` : "";
      this.log.info({ sandbox: id, op: op.id, kind: op.kind, reason: out.reason ?? "user" }, `sandbox ${id}: ${op.kind}${mode} -> ${out.state} (${out.reason ?? "user"})`);
    }
    if (out.state && out.state !== "running") this.gone(id);
    return row;
  }

  /**
   * Settles a failed (or rolled back) operation: the sandbox leaves its in-between state
   * with `out` (usually no change of state at all), and the operation says why.
   */
  async fail(op: OperationRow, id: string | null, error: unknown, out: Outcome = {}, also?: (tx: Store) => Promise<void>, status: "failed" | "rolled_back" = "failed"): Promise<SandboxRow | undefined> {
    const message = error instanceof Error ? error.message : String(error);
    const live = id && out.state ? await this.meter.sample(id) : undefined;
    const row = await this.store.transaction(async (tx) => {
      const settled = id ? await this.settle(tx, op, id, out, live) : undefined;
      await tx.operations.finish(op.id, status, this.clock.now(), undefined, message.slice(0, 2000));
      if (id && !out.state) await this.event(id, "operation.failed", out.reason ?? null, { operation: op.id, kind: op.kind, message: message.slice(0, 500), ...(status === "rolled_back" ? { rolled_back: true } : {}) }, tx);
      await also?.(tx);
      return settled;
    });
    if (id) this.held(id, -1);
    this.log.warn({ ...(id ? { sandbox: id } : {}), op: op.id, kind: op.kind, ...(out.state ? { state: out.state } : {}) }, `${op.kind}${id ? ` of ${id}` : ""} ${status === "rolled_back" ? "rolled back" : "failed"}: ${message.slice(0, 300)}`);
    if (out.state) this.metrics.transition(out.state, out.reason ?? "error");
    if (id && out.state && out.state !== "running") this.gone(id);
    return row;
  }

  /** A finished operation of its own (set timeout): intent and outcome are one transaction. */
  async atomic(row: SandboxRow, op: OperationRow, out: Outcome, also?: (tx: Store) => Promise<void>): Promise<SandboxRow> {
    if (row.op_id) throw inProgress(row);
    return this.store.transaction(async (tx) => {
      await tx.operations.insert({ ...op, status: "done", finished_at: op.created_at, result: out.result === undefined ? null : JSON.stringify(out.result) });
      const done = await tx.sandboxes.cas(row.id, { generation: row.generation, opId: null }, out.patch ?? {});
      if (!done) throw inProgress((await tx.sandboxes.get(row.id)) ?? row);
      await also?.(tx);
      return done;
    });
  }

  /** Settles one sandbox held by `op` inside the transaction `tx` (fork children settle with their parent). */
  async settle(tx: Store, op: OperationRow, id: string, out: Outcome, live?: number): Promise<SandboxRow> {
    const cur = await tx.sandboxes.get(id);
    if (!cur || cur.op_id !== op.id) throw new DenError("internal", `sandbox ${id} is no longer held by operation ${op.id}`);
    const now = this.clock.now();
    // The usage segment of the state it leaves closes in the same transaction.
    const meter = out.state ? await this.meter.roll(cur, now, tx, live) : {};
    const patch: Partial<SandboxRow> = { ...out.patch, ...meter, op_id: null, op_kind: null, op_since: null };
    if (out.state) Object.assign(patch, { state: out.state, state_reason: out.reason ?? "user" });
    const row = await tx.sandboxes.cas(id, { generation: cur.generation, opId: op.id }, patch);
    if (!row) throw new DenError("internal", `sandbox ${id} changed under operation ${op.id}`);
    // A sandbox that ended holds no volume: every way it ends (a destroy, a failed create,
    // a rolled-back fork child) lets go of its mounts here, in the transaction that ends it
    // (a destroy's, only once its host has destroyed the VM).
    if (out.state === "destroyed" || out.state === "error") await new VolumeMounts(tx).drop(id);
    if (out.state) await this.event(id, out.state, out.reason ?? "user", out.data ?? {}, tx, op.kind);
    return row;
  }
}

export function inProgress(row: SandboxRow): DenError {
  return new DenError("operation_in_progress", `sandbox ${row.id} is busy with another operation (${row.op_kind ?? "unknown"}); try again when it ends`, {
    ...(row.op_kind ? { operation: row.op_kind } : {}),
  });
}

/** The arguments an operation was begun with. */
export function argsOf<T>(op: OperationRow): T {
  return JSON.parse(op.args) as T;
}
