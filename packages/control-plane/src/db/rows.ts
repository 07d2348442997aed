// The rows the repositories read and write, and their API views.
import type { Selectable } from "kysely";
import { DenError, host, type api } from "@den/protocol";
import { createHash, randomBytes } from "node:crypto";
import { NO_NETWORK } from "../network.js";
import type { CheckpointsTable, HostsTable, TemplateVersionsTable, OperationsTable, SandboxesTable, StoredSnapshotsTable, TemplatesTable } from "./schema.js";

export type SandboxRow = Selectable<SandboxesTable>;
export type OperationRow = Selectable<OperationsTable>;
export type StoredSnapshotRow = Selectable<StoredSnapshotsTable>;
export type CheckpointRow = Selectable<CheckpointsTable>;
export type TemplateRow = Selectable<TemplatesTable>;
export type HostRow = Selectable<HostsTable>;
export type TemplateVersionRow = Selectable<TemplateVersionsTable>;

/** A row's record of what its upload put (null: none recorded), as JSON in its `digests` column. */
export function digestsJson(d: host.StoredDigests | undefined): string | null {
  return d ? JSON.stringify(d) : null;
}

/** A row's `digests` column back (undefined: none recorded, a row from before migration 024). */
export function digestsOf(json: string | null): host.StoredDigests | undefined {
  if (json === null) return undefined;
  const r = host.StoredDigests.safeParse(JSON.parse(json));
  if (!r.success) throw new DenError("internal", "a stored snapshot's recorded digests are unreadable");
  return r.data;
}

export function toApiCheckpoint(r: CheckpointRow): api.Checkpoint {
  return {
    id: r.id, name: r.name, sandbox_id: r.sandbox_id, template: r.template, template_version: r.template_version,
    vcpus: r.vcpus, memory_mb: r.memory_mb, disk_mb: r.disk_mb, pause_ms: r.pause_ms, stored_bytes: Number(r.stored_bytes),
    created_at: new Date(r.created_at).toISOString(),
  };
}

/** The key of an `Authorization: Bearer <key>` header, if it holds one. */
export function bearerKey(header: string | undefined): string | undefined {
  return /^Bearer\s+(\S{1,512})$/.exec(header ?? "")?.[1];
}

/**
 * A new key's secret, 192 random bits: `den_` + base64url, or `e2b_` + hex (the form E2B's
 * Python client insists on, `^e2b_[0-9a-f]+$`). Keys are looked up by their hash, whatever their form.
 */
export function newKeySecret(format: "den" | "e2b" = "den"): string {
  const bits = randomBytes(24);
  return format === "e2b" ? `e2b_${bits.toString("hex")}` : `den_${bits.toString("base64url")}`;
}

export function hashKey(secret: string): string {
  return createHash("sha256").update(secret).digest("hex");
}

export interface Principal {
  keyId: string;
  owner: string;
  admin: boolean;
}

/** A time in ms as ISO 8601 (null stays null). */
export const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** The API's view of a sandbox row. */
export function toApiSandbox(r: SandboxRow): api.Sandbox {
  return {
    id: r.id,
    state: r.state as api.SandboxState,
    state_reason: (r.state_reason as api.TransitionReason | null) ?? null,
    template: r.template,
    template_version: r.template_version,
    persistent: r.persistent === 1,
    ttl_seconds: r.ttl_seconds,
    expires_at: iso(r.expires_at),
    idle_timeout_seconds: r.idle_timeout_seconds,
    on_idle: r.on_idle as "hibernate" | "destroy",
    metadata: JSON.parse(r.metadata) as Record<string, string>,
    vcpus: r.vcpus,
    memory_mb: r.memory_mb,
    disk_mb: r.disk_mb,
    created_at: iso(r.created_at)!,
    last_activity_at: iso(r.last_activity_at)!,
    destroyed_at: iso(r.destroyed_at),
    hibernate_mode: r.state === "hibernated" ? ((r.hibernate_mode as api.Sandbox["hibernate_mode"]) ?? "warm") : null,
    stored_bytes: r.state === "hibernated" && r.stored_bytes !== null ? Number(r.stored_bytes) : null,
    network: networkOf(r),
    operation: r.op_id && r.op_kind && r.op_since !== null ? { id: r.op_id, kind: r.op_kind as api.OperationKind, since: iso(r.op_since)! } : null,
  };
}

/** A row's network policy (null in the database means egress none). */
export function networkOf(r: { network: string | null }): api.NetworkPolicy {
  return r.network ? (JSON.parse(r.network) as api.NetworkPolicy) : NO_NETWORK;
}
