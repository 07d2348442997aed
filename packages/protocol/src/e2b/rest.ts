/**
 * The E2B control-plane REST API as the `e2b` npm client (2.x) speaks it: request bodies
 * Den accepts and the answers it gives. Names are E2B's (from the client's own OpenAPI
 * types); fields Den does not act on are accepted and ignored only where the client sends
 * them on every call (`secure`, `mcp`, `iam`), refused otherwise. E2B-API.md says what maps to what.
 */
import { z } from "zod";

/** The envd version Den's envd speaks: the client gates features on it (stdin 0.3.0 ... watch 0.6.4). */
export const ENVD_VERSION = "0.6.4";

const Metadata = z.record(z.string().max(256), z.string().max(4096));
const EnvVars = z.record(z.string().min(1).max(256), z.string().max(32_768));
/** E2B's timeout is whole seconds; Den holds it to its own limits. */
const TimeoutSeconds = z.number().int().min(0).max(30 * 86_400);

export const NetworkConfig = z.object({
  allowOut: z.array(z.string().max(253)).max(256).optional(),
  denyOut: z.array(z.string().max(64)).max(256).optional(),
  /** E2B's default: a sandbox's ports are reachable by anyone with the URL. */
  allowPublicTraffic: z.boolean().optional(),
  maskRequestHost: z.string().max(253).optional(),
});

/** A volume on a sandbox: `volumeMounts` of a create, and of `GET /sandboxes/{id}`. */
export const SandboxVolumeMount = z.object({ name: z.string().min(1).max(64), path: z.string().min(1).max(255) });
export type SandboxVolumeMount = z.infer<typeof SandboxVolumeMount>;

export const NewSandbox = z.object({
  templateID: z.string().min(1).max(128),
  timeout: TimeoutSeconds.optional(),
  metadata: Metadata.optional(),
  envVars: EnvVars.optional(),
  autoPause: z.boolean().optional(),
  /** false: a timeout pause keeps the disk only (the resume boots). */
  autoPauseMemory: z.boolean().optional(),
  autoResume: z.object({ enabled: z.boolean() }).optional(),
  allow_internet_access: z.boolean().optional(),
  network: NetworkConfig.optional(),
  // Sent by clients on every create; meaningless here (envd is always token-guarded, no MCP gateway, no IAM).
  secure: z.boolean().optional(),
  mcp: z.unknown().optional(),
  iam: z.unknown().optional(),
  /** Den volumes to mount read-write (E2B has no read-only mount); names are checked and lower-cased by the service. */
  volumeMounts: z.array(SandboxVolumeMount).max(4).optional(),
});
export type NewSandbox = z.infer<typeof NewSandbox>;

export const ConnectSandbox = z.object({ timeout: TimeoutSeconds.optional(), memory: z.boolean().optional() });
/** The path before `connect` (2.0-2.6 clients): `POST /sandboxes/{id}/resume`. */
export const ResumedSandbox = z.object({ timeout: TimeoutSeconds.optional(), autoPause: z.boolean().optional(), memory: z.boolean().optional() });
export const SetTimeout = z.object({ timeout: TimeoutSeconds });
export const Refresh = z.object({ duration: TimeoutSeconds.optional() });
export const PauseRequest = z.object({ memory: z.boolean().optional() });
export const ForkRequest = z.object({ count: z.number().int().min(1).max(16).optional(), timeout: TimeoutSeconds.optional() });
export const SnapshotRequest = z.object({ name: z.string().min(1).max(128).optional() });
export const NetworkUpdate = z.object({
  allow_internet_access: z.boolean().optional(),
  allowOut: z.array(z.string().max(253)).max(256).optional(),
  denyOut: z.array(z.string().max(64)).max(256).optional(),
});

export const SandboxState = z.enum(["running", "paused"]);
export type SandboxState = z.infer<typeof SandboxState>;

/** What create, connect and fork answer. */
export const Sandbox = z.object({
  sandboxID: z.string(),
  templateID: z.string(),
  clientID: z.string(),
  envdVersion: z.string(),
  envdAccessToken: z.string().optional(),
  trafficAccessToken: z.string().nullable().optional(),
  domain: z.string().nullable().optional(),
  alias: z.string().optional(),
});
export type Sandbox = z.infer<typeof Sandbox>;

export const ListedSandbox = z.object({
  sandboxID: z.string(),
  templateID: z.string(),
  alias: z.string().optional(),
  clientID: z.string(),
  startedAt: z.string(),
  endAt: z.string(),
  state: SandboxState,
  cpuCount: z.number().int(),
  memoryMB: z.number().int(),
  diskSizeMB: z.number().int(),
  envdVersion: z.string(),
  metadata: Metadata.optional(),
});
export type ListedSandbox = z.infer<typeof ListedSandbox>;

export const SandboxDetail = ListedSandbox.extend({
  envdAccessToken: z.string().optional(),
  domain: z.string().nullable().optional(),
  allowInternetAccess: z.boolean().nullable().optional(),
  network: NetworkConfig.optional(),
  lifecycle: z.object({ onTimeout: z.enum(["kill", "pause"]), autoResume: z.boolean() }).optional(),
  volumeMounts: z.array(SandboxVolumeMount).optional(),
});
export type SandboxDetail = z.infer<typeof SandboxDetail>;

export const SandboxMetric = z.object({
  timestamp: z.string(),
  timestampUnix: z.number().int(),
  cpuCount: z.number().int(),
  cpuUsedPct: z.number(),
  memUsed: z.number().int(),
  memTotal: z.number().int(),
  memCache: z.number().int(),
  diskUsed: z.number().int(),
  diskTotal: z.number().int(),
});
export type SandboxMetric = z.infer<typeof SandboxMetric>;

export const SnapshotInfo = z.object({ snapshotID: z.string(), names: z.array(z.string()) });
export type SnapshotInfo = z.infer<typeof SnapshotInfo>;

export const ForkResult = z.object({ sandbox: Sandbox.optional(), error: z.object({ code: z.number().int(), message: z.string() }).optional() });

// ---- volumes (`/volumes`): Den's volumes; `volumeID` is Den's volume id (`vol_...`) ----

/** E2B's names are letters, digits and hyphens; Den's are lower-case, so a name is lower-cased (as E2B does with secret names). */
export const NewVolume = z.object({ name: z.string().min(1).max(63) });
export type NewVolume = z.infer<typeof NewVolume>;

export const Volume = z.object({ volumeID: z.string(), name: z.string() });
export type Volume = z.infer<typeof Volume>;

/**
 * What create and get answer: `token` opens only this volume's content API, and `domain`
 * is always set, so the client's default content URL (`https://api.<domain>`) names Den,
 * never E2B's own domain.
 */
export const VolumeAndToken = Volume.extend({ token: z.string(), domain: z.string().optional() });
export type VolumeAndToken = z.infer<typeof VolumeAndToken>;

/** Every error: the client decides "not found" and "conflict" from `code` in the body, not the status. */
export const ErrorBody = z.object({ code: z.number().int(), message: z.string() });
export type ErrorBody = z.infer<typeof ErrorBody>;

/** Paging: `limit` (1-100, default 100) and `nextToken`; the next page's token comes back in the `x-next-token` header. */
export const PAGE_MAX = 100;
export const NEXT_TOKEN_HEADER = "x-next-token";

export type ConnectSandbox = z.infer<typeof ConnectSandbox>;
export type NetworkUpdate = z.infer<typeof NetworkUpdate>;
export type ForkRequest = z.infer<typeof ForkRequest>;
