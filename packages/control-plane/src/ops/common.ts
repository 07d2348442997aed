import type { HostAgent } from "@den/protocol";
import type { OperationRow, SandboxRow, Store } from "../db/store.js";
import type { Ctx } from "../context.js";
import type { Outcome, Reason } from "../operations.js";

/** What an operation left pending by a dead process is told when it is rolled back. */
export const STOPPED = "the server stopped during this operation";

// What an operation's module needs of the services, by shape (the services import the
// modules they dispatch to; the modules import no service back).

/** The sandbox upkeep every ending shares (Lifecycle's). */
export interface Upkeep {
  /** The deadline fields of a sandbox that hibernates now. */
  pausedDeadline(row: SandboxRow): Partial<SandboxRow>;
  /** Deletes a warm hibernation's local snapshot, once no record points at it. */
  dropWarm(row: SandboxRow): Promise<void>;
  /** A destroyed sandbox's cold snapshot is no longer needed. */
  releaseHeld(tx: Store, row: SandboxRow): Promise<void>;
  /** After a cold hibernate committed: the VM and its local files go. */
  removeVm(row: Pick<SandboxRow, "id" | "host_id">, warmSnapshot: string | null): Promise<void>;
  /** Refuses a new stored snapshot to an owner at the quota. */
  storeQuota(owner: string): Promise<void>;
}

/** Sandbox networks (NetworkPolicies'). */
export interface Networks {
  flush(id: string): Promise<void>;
  restore(row: SandboxRow): Promise<void>;
}

/** The services an operation's module works with. */
export interface OpDeps {
  ctx: Ctx;
  lifecycle: Upkeep;
  network: Networks;
  forks: { dropChildren(tx: Store, op: OperationRow, ids: string[], reason: Reason, message: string): Promise<void> };
  templates: {
    interrupted(id: string): Promise<void>;
    giveBack(args: string, error: unknown, op: OperationRow): Promise<void>;
    deleteOnHosts(name: string): Promise<void>;
  };
}

/** An operation on a sandbox that a dead process left pending, with the facts recovery found. */
export interface Settling {
  op: OperationRow;
  /** Its sandbox, still held by this operation. */
  row: SandboxRow;
  /** The host it ran on (done with anything it was still at for this operation). */
  host: HostAgent;
  /** The sandbox's VM on that host, as its inventory has it now. */
  vm: { state: string } | undefined;
  /** Rolls the operation back: the sandbox as it was (or as `out` says), `also` in the same transaction. */
  rollBack(out?: Outcome, also?: (tx: Store) => Promise<void>): Promise<unknown>;
}

/** An operation on a sandbox: how a crash in the middle of it is settled (run forward from the facts, or rolled back). */
export interface SandboxOp {
  settle(d: OpDeps, s: Settling): Promise<void>;
}

/** An operation on no sandbox (a template's), settled from its row alone. */
export interface DetachedOp {
  settle(d: OpDeps, op: OperationRow): Promise<void>;
}
