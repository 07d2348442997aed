import type { HostAgent, HostSandboxInfo } from "@den/protocol";
import type { OperationRow, SandboxRow, Store } from "../db/store.js";
import type { Ctx, Measure } from "../context.js";
import type { Outcome } from "../operations.js";

/** What an operation left pending by a dead process is told when it is rolled back. */
export const STOPPED = "the server stopped during this operation";

/**
 * The deadline after a sandbox hibernates or wakes. A `running`-mode deadline (E2B's
 * timeout) stops while it sleeps: hibernated, what is left is the retention limit; a wake
 * starts a new deadline (`timeoutSeconds`, else the one it was made with).
 */
export function deadlineAfter(row: SandboxRow, to: "hibernated" | "running", now: number, retentionSeconds: number, timeoutSeconds?: number): Partial<SandboxRow> {
  if (row.deadline_mode !== "running") return {};
  if (to === "hibernated") return row.state === "running" ? { expires_at: now + retentionSeconds * 1000 } : {};
  const t = timeoutSeconds ?? row.run_timeout_seconds ?? row.ttl_seconds;
  return t === null ? {} : { expires_at: now + t * 1000 };
}

/** A sandbox row's fields its VM settles (what the host made of the request). */
export const vmFields = (i: HostSandboxInfo) => ({ template: i.template, template_version: i.templateVersion, vcpus: i.vcpus, memory_mb: i.memoryMb, disk_mb: i.diskMb });

/**
 * Where a stored snapshot (a checkpoint, a cold sandbox) comes back to life: `origin` (the
 * host it was made on, whose caches may still hold its files) if it is up, open and has
 * room; else any host of the same kind (QEMU version, accelerator, CPU model, arch: what a
 * snapshot needs of the host it is restored on) that has its template version and room.
 */
export async function placeStored(ctx: Ctx, s: Pick<SandboxRow, "template" | "template_version" | "vcpus" | "memory_mb">, origin: string | null, reserved?: Map<string, number>, only?: string | null, exclude?: string): Promise<HostAgent> {
  const kind = origin ? (await ctx.store.hosts.get(origin))?.kind ?? undefined : undefined;
  const template = `${s.template}@${s.template_version}`;
  const pull = await ctx.shared.pullFor(template);
  return ctx.hosts.place({ template, vcpus: s.vcpus, memoryMb: s.memory_mb }, { prefer: origin, ...(kind ? { kind } : {}), ...(reserved ? { reserved } : {}), ...(pull ? { pull } : {}), ...(only ? { only } : {}), ...(exclude ? { exclude } : {}) });
}

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
  /** Cold-hibernates a host's least recently active sandboxes until `needMb` is free (the reaper's; set by the control plane). */
  makeRoom?: (hostId: string, needMb: number, except: string, measure: Measure) => Promise<number>;
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
