import { snapshotKey, type ObjectStore } from "@den/store";
import type { ServerConfig } from "./config.js";
import { DenError, type HostAgent, type StoredRef } from "@den/protocol";
import type { HostPool } from "./hosts.js";
import type { Meter } from "./meter.js";
import type { Metrics } from "./metrics.js";
import { digestsOf } from "./db/rows.js";
import type { SandboxRow, Store, StoredSnapshotRow } from "./db/store.js";
import type { Clock, Operations } from "./operations.js";

/** What every control-plane service works with. */
export interface Ctx {
  store: Store;
  /** The host agents, and which one a sandbox lives on. */
  hosts: HostPool;
  /** The snapshot store: hosts write to it, only the garbage collector deletes from it. */
  objects: ObjectStore;
  /** This deployment's id (kept in the database): its objects live under it in the store. */
  deployment: string;
  /** This control-plane replica's id: it owns the operations it begins. */
  replica: string;
  /** Template versions in the shared store (hosts that lack one pull it): SharedTemplates. */
  shared: TemplateShare;
  config: ServerConfig;
  clock: Clock;
  ops: Operations;
  meter: Meter;
  metrics: Metrics;
  log: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void };
}

/** Template versions shared through the store (shared-templates.ts). */
export interface TemplateShare {
  /** Publishes a host's templates to the store, in the background. */
  publishFrom(host: HostAgent): void;
  /** How a host that lacks template `spec` gets it from the store (undefined: none to pull). */
  pullFor(spec: string): Promise<((h: HostAgent) => Promise<void>) | undefined>;
}

/** How an eviction measures what it frees: what sandboxes are charged, or their private memory. */
export type Measure = "charged" | "private";

/** warm: paused in place with a local snapshot; cold: in the snapshot store, no VM; disk: no VM and no memory, its disk kept on its host (a wake boots). */
export type HibernateMode = "warm" | "cold" | "disk";

export const modeOf = (row: Pick<SandboxRow, "hibernate_mode">): HibernateMode => (row.hibernate_mode === "cold" || row.hibernate_mode === "disk" ? row.hibernate_mode : "warm");

/** Whether a host's inventory entry is a VM that exists (not dead, not shut down to its disk). */
export const hasVm = (vm: { state: string } | undefined): boolean => vm?.state === "running" || vm?.state === "paused";

/** A host call whose answer was lost: the host may still be at it. */
export const unanswered = (e: unknown): boolean => e instanceof DenError && (e.code === "agent_unavailable" || e.code === "timeout");

/** A catalog row for a snapshot about to be uploaded (written before the upload starts). */
export function pendingStored(ctx: Ctx, id: string, of: Pick<SandboxRow, "owner" | "template" | "template_version">, kind: "cold" | "checkpoint"): StoredSnapshotRow {
  return {
    id, owner: of.owner, key: snapshotKey(id, ctx.deployment), kind, state: "pending", bytes: null, created_at: ctx.clock.now(), released_at: null,
    template: of.template, template_version: of.template_version, digests: null,
  };
}

/**
 * Where a stored snapshot is, with the digests its upload recorded: the host checks what it
 * downloads against them. A row completed before digests were recorded has none: the host
 * then goes by the store's own manifest (its fields checked), the only case where it does.
 */
export const refOf = (r: Pick<StoredSnapshotRow, "id" | "key" | "digests">): StoredRef => {
  const digests = digestsOf(r.digests);
  return { id: r.id, key: r.key, ...(digests ? { digests } : {}) };
};

/** Where a stored snapshot is: its catalog row (or, for one no row knows, the layout before deployments). */
export async function storedRef(ctx: Ctx, id: string): Promise<StoredRef> {
  const row = await ctx.store.snapshots.get(id);
  return row ? refOf(row) : { id, key: snapshotKey(id) };
}

/** The host a sandbox lives on (by its id; a sandbox with no row is the first host's). */
export async function hostOfId(ctx: Ctx, id: string): Promise<HostAgent> {
  const row = await ctx.store.sandboxes.get(id);
  return ctx.hosts.get(row?.host_id ?? null);
}
