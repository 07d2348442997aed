/**
 * The SDK's camelCase views of the wire bodies, and the explicit mappers from the snake_case
 * wire types (inferred from the zod schemas of `@den/protocol`'s `api` namespace, so a change
 * in the contract breaks the build here rather than at run time). Timestamps become `Date`s.
 */
import type { api } from "@den/protocol";

/** The type a zod schema accepts as input (what a request body may contain). */
export type WireInput<S extends { _input: unknown }> = S["_input"];

/**
 * A sandbox's lifecycle state: `creating`, `running`, `hibernated`, `destroyed`, `lost` or `error`.
 *
 * @example
 * ```ts
 * const alive = (s: SandboxState) => s === "running" || s === "hibernated";
 * ```
 */
export type SandboxState = api.SandboxState;
/**
 * Why a sandbox last changed state: `user`, `ttl`, `idle`, `error`, `host_lost`, `restart` or `memory_pressure` (its host ran short of memory: it was cold-hibernated, and wakes on its next use).
 *
 * @example
 * ```ts
 * if (sbx.state === "destroyed" && sbx.info.stateReason === "ttl") console.log("expired");
 * ```
 */
export type TransitionReason = api.TransitionReason;
/**
 * What happens when a sandbox has been idle for `idleTimeoutSeconds`: `hibernate` or `destroy`.
 *
 * @example
 * ```ts
 * const onIdle: OnIdle = "hibernate";
 * ```
 */
export type OnIdle = SandboxInfo["onIdle"];

/**
 * What the API knows about a sandbox (the `Sandbox` body, camelCased).
 *
 * @example
 * ```ts
 * const info: SandboxInfo = await sbx.refresh();
 * console.log(info.state, info.expiresAt?.toISOString());
 * ```
 */
export interface SandboxInfo {
  id: string;
  state: SandboxState;
  stateReason: TransitionReason | null;
  template: string;
  templateVersion: string;
  persistent: boolean;
  ttlSeconds: number | null;
  expiresAt: Date | null;
  idleTimeoutSeconds: number;
  onIdle: api.Sandbox["on_idle"];
  metadata: Record<string, string>;
  vcpus: number;
  memoryMb: number;
  diskMb: number;
  createdAt: Date;
  lastActivityAt: Date;
  destroyedAt: Date | null;
  /** How it is hibernated: "warm" (paused in place), "cold" (in the snapshot store) or "disk" (its files only; a wake boots it); null unless hibernated. */
  hibernateMode: "warm" | "cold" | "disk" | null;
  /** Bytes its snapshot occupies in the store while cold-hibernated (compare with `memoryMb`); null otherwise. */
  storedBytes: number | null;
  /** The operation in flight on it (its `state` stays the last settled one meanwhile), or null. */
  operation: { id: string; kind: api.OperationKind; since: Date } | null;
  /** Its network policy (egress `none` unless one was set). */
  network: NetworkPolicy;
}

/**
 * A sandbox's network. Egress is off by default; private, loopback and link-local ranges
 * and the Den host itself are refused whatever the policy says.
 *
 * @example
 * ```ts
 * const policy: NetworkPolicy = { egress: "allowlist", allow: ["pypi.org", "*.pythonhosted.org", "198.51.100.0/24"] };
 * ```
 */
export interface NetworkPolicy {
  /** `none`: nothing leaves the guest. `allowlist`: only `allow`. `open`: all but `deny`. */
  egress: "none" | "allowlist" | "open";
  /** Domain names (`*.example.com` for subdomains), addresses and CIDRs (allowlist). */
  allow?: string[];
  /** Addresses and CIDRs refused on top of the always-refused ranges (open). */
  deny?: string[];
  /** Connections open at once (the server's limit by default). */
  maxConnections?: number;
  /** Bandwidth each way in Mbit/s (the server's limit by default). */
  bandwidthMbps?: number;
}

/**
 * What {@link Sandbox.networkStatus} returns.
 *
 * @example
 * ```ts
 * const st: NetworkStatus = await sbx.networkStatus();
 * if (st.refused.private > 0) console.log("it tried to reach a private address");
 * ```
 */
export interface NetworkStatus {
  policy: NetworkPolicy;
  /** Whether its network is up now. */
  active: boolean;
  /** Refused attempts since its network came up: private ranges and the host, the policy, the connection limit, DNS names. */
  refused: { private: number; policy: number; limit: number; dns: number };
}

/** Maps a {@link NetworkPolicy} to the wire's snake_case. */
export function toWireNetwork(p: NetworkPolicy): api.NetworkPolicy {
  const w: api.NetworkPolicy = { egress: p.egress };
  if (p.allow !== undefined) w.allow = p.allow;
  if (p.deny !== undefined) w.deny = p.deny;
  if (p.maxConnections !== undefined) w.max_connections = p.maxConnections;
  if (p.bandwidthMbps !== undefined) w.bandwidth_mbps = p.bandwidthMbps;
  return w;
}

/** Maps the wire's network policy to {@link NetworkPolicy}. */
export function toNetworkPolicy(w: api.NetworkPolicy): NetworkPolicy {
  const p: NetworkPolicy = { egress: w.egress };
  if (w.allow !== undefined) p.allow = w.allow;
  if (w.deny !== undefined) p.deny = w.deny;
  if (w.max_connections !== undefined) p.maxConnections = w.max_connections;
  if (w.bandwidth_mbps !== undefined) p.bandwidthMbps = w.bandwidth_mbps;
  return p;
}

/** Maps the wire `Sandbox` to {@link SandboxInfo}. */
export function toSandboxInfo(w: api.Sandbox): SandboxInfo {
  return {
    id: w.id,
    state: w.state,
    stateReason: w.state_reason,
    template: w.template,
    templateVersion: w.template_version,
    persistent: w.persistent,
    ttlSeconds: w.ttl_seconds,
    expiresAt: date(w.expires_at),
    idleTimeoutSeconds: w.idle_timeout_seconds,
    onIdle: w.on_idle,
    metadata: w.metadata,
    vcpus: w.vcpus,
    memoryMb: w.memory_mb,
    diskMb: w.disk_mb,
    createdAt: new Date(w.created_at),
    lastActivityAt: new Date(w.last_activity_at),
    destroyedAt: date(w.destroyed_at),
    hibernateMode: w.hibernate_mode,
    storedBytes: w.stored_bytes,
    network: toNetworkPolicy(w.network),
    operation: w.operation ? { id: w.operation.id, kind: w.operation.kind, since: new Date(w.operation.since) } : null,
  };
}

/**
 * A background process's status (the `ProcessInfo` body, camelCased).
 *
 * @example
 * ```ts
 * const st: ProcessStatus = await proc.wait();
 * if (!st.running) console.log("exited with", st.exitCode);
 * ```
 */
export interface ProcessStatus {
  /** The process handle id, unique within the sandbox. */
  proc: number;
  /** The guest PID. */
  pid: number;
  running: boolean;
  exitCode: number | null;
  /** The signal that ended it, if any. */
  signal: number | null;
  timedOut: boolean;
}

/** Maps the wire `ProcessInfo` to {@link ProcessStatus}. */
export function toProcessStatus(w: api.ProcessInfo): ProcessStatus {
  return { proc: w.proc, pid: w.pid, running: w.running, exitCode: w.exit_code, signal: w.signal, timedOut: w.timed_out };
}

/**
 * A file's metadata (the `FileStat` body).
 *
 * @example
 * ```ts
 * const st: FileInfo = await sbx.filesystem.stat("/etc/hostname");
 * console.log(st.type, st.size, st.mtime);
 * ```
 */
export interface FileInfo {
  path: string;
  type: api.FileStat["type"];
  size: number;
  /** Unix mode bits. */
  mode: number;
  mtime: Date;
  /** A symlink's target. */
  target?: string;
}

/** Maps the wire `FileStat` to {@link FileInfo}. */
export function toFileInfo(w: api.FileStat): FileInfo {
  const out: FileInfo = { path: w.path, type: w.type, size: w.size, mode: w.mode, mtime: new Date(w.mtime) };
  if (w.target !== undefined) out.target = w.target;
  return out;
}

/**
 * One entry of a sandbox's event log (the `SandboxEvent` body, camelCased).
 *
 * @example
 * ```ts
 * for (const ev of await sbx.events()) console.log(ev.seq, ev.type, ev.reason);
 * ```
 */
export interface SandboxEvent {
  /** Position in the sandbox's log; pass it as `after` to resume. */
  seq: number;
  sandboxId: string;
  at: Date;
  type: string;
  reason: TransitionReason | null;
  data: Record<string, unknown>;
}

/** Maps the wire `SandboxEvent` to {@link SandboxEvent}. */
export function toSandboxEvent(w: api.SandboxEvent): SandboxEvent {
  return { seq: w.seq, sandboxId: w.sandbox_id, at: new Date(w.at), type: w.type, reason: w.reason, data: w.data };
}

/**
 * A template version (the `Template` body, camelCased).
 *
 * @example
 * ```ts
 * const current = (await Templates.list()).filter((t) => t.current);
 * ```
 */
export interface TemplateInfo {
  name: string;
  version: string;
  /** Whether `name` alone resolves to this version. */
  current: boolean;
  /** Who built it through the API (only they can use it); null for the server's own templates. */
  owner: string | null;
  vcpus: number;
  memoryMb: number;
  diskMb: number;
  createdAt: Date;
  /** What it was made from: `recipe base`, `template base@...`, `image registry/repo@sha256:...`. */
  source: string | null;
  /** How its sandboxes run by default (an image's ENV, WORKDIR, USER and start command); null: as their source. */
  run: TemplateRun | null;
}

/** A template's defaults for its sandboxes (see {@link TemplateInfo.run}). */
export interface TemplateRun {
  env: Record<string, string>;
  workdir: string | null;
  user: string | null;
  startCmd: string | null;
  readyCmd: string | null;
}

/** Maps the wire `Template` to {@link TemplateInfo}. */
export function toTemplateInfo(w: api.Template): TemplateInfo {
  return {
    name: w.name, version: w.version, current: w.current, owner: w.owner, vcpus: w.vcpus, memoryMb: w.memory_mb, diskMb: w.disk_mb, createdAt: new Date(w.created_at),
    source: w.source ?? null,
    run: w.run ? { env: w.run.env, workdir: w.run.workdir, user: w.run.user, startCmd: w.run.start_cmd, readyCmd: w.run.ready_cmd } : null,
  };
}

/** Where a template build stands: `building`, then `ready`, `error` or `cancelled`. */
export type TemplateBuildState = api.TemplateBuildState;

/**
 * A template build (the `TemplateBuild` body, camelCased): what it builds, how it stands, and
 * once it has ended what it made (`version`) or why it failed (`error`).
 *
 * @example
 * ```ts
 * const b = await Templates.build("op_...");
 * if (b.state === "ready") console.log(`${b.name}@${b.version}`);
 * else if (b.error) console.error(b.error.code, b.error.message);
 * ```
 */
export interface TemplateBuild {
  id: string;
  /** The template it builds. */
  name: string;
  state: TemplateBuildState;
  /** What it builds from: `{ kind: "image", ref }`, `{ kind: "dockerfile", from }`, `{ kind: "template", from }`, ... */
  source: Record<string, string>;
  /** The version it made (once `ready`). */
  version: string | null;
  /** Why it failed (`error`), or `aborted` (`cancelled`); `details` as the API error's (e.g. a failed RUN's `stdout`/`stderr`). */
  error: { code: string; message: string; details?: Record<string, unknown> } | null;
  createdAt: Date;
  finishedAt: Date | null;
}

/** Maps the wire `TemplateBuild` to {@link TemplateBuild}. */
export function toTemplateBuild(w: api.TemplateBuild): TemplateBuild {
  return {
    id: w.id, name: w.name, state: w.state, source: w.source, version: w.version, error: w.error,
    createdAt: new Date(w.created_at), finishedAt: date(w.finished_at),
  };
}

/**
 * One line of a build's log (see {@link Templates.buildLogs}); `seq` counts from 0, so
 * `offset: line.seq + 1` resumes after it.
 *
 * @example
 * ```ts
 * for await (const l of Templates.buildLogs(id, { follow: true })) console.log(l.at.toISOString(), l.message);
 * ```
 */
export interface TemplateBuildLogLine {
  seq: number;
  at: Date;
  level: "info" | "error";
  message: string;
}

/** Maps the wire `TemplateBuildLogLine` to {@link TemplateBuildLogLine}. */
export function toTemplateBuildLogLine(w: api.TemplateBuildLogLine): TemplateBuildLogLine {
  return { seq: w.seq, at: new Date(w.at), level: w.level, message: w.message };
}

/**
 * An uploaded build context (the answer to {@link Templates.uploadContext}): `context` is the
 * `sha256:<hex>` to pass as a Dockerfile build's `context`.
 *
 * @example
 * ```ts
 * const { context, size } = await Templates.uploadContext(tarBytes);
 * ```
 */
export interface BuildContextInfo {
  context: string;
  size: number;
}

/**
 * An API key (the `ApiKey` body, camelCased). `key`, the secret, is only in the answer to
 * {@link Keys.create}.
 *
 * @example
 * ```ts
 * const k: ApiKeyInfo = await Keys.create({ owner: "ci" });
 * console.log(k.id, k.key);
 * ```
 */
export interface ApiKeyInfo {
  id: string;
  owner: string;
  admin: boolean;
  createdAt: Date;
  revokedAt: Date | null;
  key?: string;
}

/** Maps the wire `ApiKey` to {@link ApiKeyInfo}. */
export function toApiKeyInfo(w: api.ApiKey): ApiKeyInfo {
  const out: ApiKeyInfo = { id: w.id, owner: w.owner, admin: w.admin, createdAt: new Date(w.created_at), revokedAt: date(w.revoked_at) };
  if (w.key !== undefined) out.key = w.key;
  return out;
}

/**
 * What a webhook can be told: `sandbox.created`, `sandbox.hibernated`, `sandbox.woken`,
 * `sandbox.destroyed`, `sandbox.lost`, `sandbox.recovered`, `sandbox.error`, `sandbox.forked`,
 * `checkpoint.created`, `checkpoint.deleted`, `network.refused` or `sandbox.refused`.
 *
 * @example
 * ```ts
 * const events: WebhookEventType[] = ["sandbox.created", "sandbox.destroyed"];
 * ```
 */
export type WebhookEventType = api.WebhookEventType;

/**
 * Where a webhook delivery stands: `pending` (not delivered yet; retried with backoff),
 * `delivered`, or `failed` (given up after the retry window).
 *
 * @example
 * ```ts
 * const { deliveries } = await Webhooks.deliveries(hook.id, { status: "failed" satisfies WebhookDeliveryStatus });
 * ```
 */
export type WebhookDeliveryStatus = api.WebhookDelivery["status"];

/**
 * The JSON body a webhook receives (as sent on the wire: `type`, an ISO 8601 `timestamp`, and
 * the event's `data`, e.g. `sandbox_id` and `reason`).
 *
 * @example
 * ```ts
 * const payload = new Webhook(secret).verify(body, headers) as WebhookPayload; // npm "standardwebhooks"
 * if (payload.type === "sandbox.destroyed") console.log(payload.data.sandbox_id, payload.data.reason);
 * ```
 */
export type WebhookPayload = api.WebhookPayload;

/**
 * A webhook (the `Webhook` body, camelCased). `secret`, the signing secret (`whsec_...`), is
 * only in the answer to {@link Webhooks.create}.
 *
 * @example
 * ```ts
 * const hook: WebhookInfo = await Webhooks.create({ url: "https://example.com/den" });
 * console.log(hook.id, hook.events, hook.secret);
 * ```
 */
export interface WebhookInfo {
  id: string;
  url: string;
  events: WebhookEventType[];
  description: string | null;
  createdAt: Date;
  secret?: string;
}

/** Maps the wire `Webhook` to {@link WebhookInfo}. */
export function toWebhookInfo(w: api.Webhook): WebhookInfo {
  const out: WebhookInfo = { id: w.id, url: w.url, events: w.events, description: w.description, createdAt: new Date(w.created_at) };
  if (w.secret !== undefined) out.secret = w.secret;
  return out;
}

/**
 * One delivery of an event to a webhook (the `WebhookDelivery` body, camelCased).
 * `messageId` is the `webhook-id` header the receiver sees: the same for every attempt and
 * redelivery of one event, so receivers dedupe on it.
 *
 * @example
 * ```ts
 * const { deliveries } = await Webhooks.deliveries(hook.id, { status: "failed" });
 * for (const d of deliveries) console.log(d.id, d.type, d.attempts, d.responseStatus, d.error);
 * ```
 */
export interface WebhookDeliveryInfo {
  id: string;
  messageId: string;
  webhookId: string;
  type: WebhookEventType;
  /** Null for events of no one sandbox (`sandbox.refused`). */
  sandboxId: string | null;
  status: WebhookDeliveryStatus;
  attempts: number;
  createdAt: Date;
  lastAttemptAt: Date | null;
  nextAttemptAt: Date | null;
  deliveredAt: Date | null;
  /** The receiver's HTTP status at the last attempt (null: no response). */
  responseStatus: number | null;
  /** Why the last attempt failed. */
  error: string | null;
  payload: WebhookPayload;
}

/** Maps the wire `WebhookDelivery` to {@link WebhookDeliveryInfo}. */
export function toWebhookDeliveryInfo(w: api.WebhookDelivery): WebhookDeliveryInfo {
  return {
    id: w.id, messageId: w.message_id, webhookId: w.webhook_id, type: w.type, sandboxId: w.sandbox_id, status: w.status,
    attempts: w.attempts, createdAt: new Date(w.created_at), lastAttemptAt: date(w.last_attempt_at), nextAttemptAt: date(w.next_attempt_at),
    deliveredAt: date(w.delivered_at), responseStatus: w.response_status, error: w.error, payload: w.payload,
  };
}

function date(s: string | null): Date | null {
  return s === null ? null : new Date(s);
}

/**
 * A volume mounted into a sandbox at create, restore or fork: the volume's name, where the
 * guest mounts it, and whether read-only (default read-write: one writer or many readers,
 * never both; a conflicting mount is a {@link ConflictError} `volume_in_use`).
 *
 * @example
 * ```ts
 * const mounts: VolumeMount[] = [{ name: "datasets", path: "/data", readOnly: true }, { name: "work", path: "/work" }];
 * ```
 */
export interface VolumeMount {
  name: string;
  path: string;
  readOnly?: boolean;
}

/** Maps {@link VolumeMount}s to the wire's. */
export function toWireMounts(mounts: VolumeMount[]): api.VolumeMount[] {
  return mounts.map((m) => ({ name: m.name, path: m.path, ...(m.readOnly !== undefined ? { read_only: m.readOnly } : {}) }));
}

/**
 * A volume (the `Volume` body, camelCased): its size and the sandboxes (not destroyed) it is
 * mounted in; `held` says whether a mount holds it now (a cold-hibernated sandbox that let
 * it go holds it again at its wake).
 *
 * @example
 * ```ts
 * const v: VolumeInfo = await Volumes.get("work");
 * console.log(v.sizeMb, v.mounts.map((m) => `${m.sandboxId}:${m.path}${m.held ? "" : " (asleep)"}`));
 * ```
 */
export interface VolumeInfo {
  id: string;
  name: string;
  sizeMb: number;
  createdAt: Date;
  mounts: Array<{ sandboxId: string; path: string; readOnly: boolean; held: boolean }>;
}

/** Maps the wire `Volume` to {@link VolumeInfo}. */
export function toVolumeInfo(w: api.Volume): VolumeInfo {
  return {
    id: w.id, name: w.name, sizeMb: w.size_mb, createdAt: new Date(w.created_at),
    mounts: w.mounts.map((m) => ({ sandboxId: m.sandbox_id, path: m.path, readOnly: m.read_only, held: m.held })),
  };
}
