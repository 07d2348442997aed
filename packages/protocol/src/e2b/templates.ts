/**
 * E2B's template API as the `e2b` npm client (2.51) speaks it: what its `Template` builder
 * sends (`Template.build`: request, file links, start, status polls) and the answers it
 * reads. Names are E2B's (from the client's own OpenAPI types). Unknown fields are dropped;
 * the client-side fields the builder leaks into each step (`forceUpload`, `resolveSymlinks`,
 * `gzip`) are accepted and mean nothing here. E2B-API.md says what maps to what.
 */
import { z } from "zod";

/** A files hash: the sha256 (hex) the client computes over a COPY's sources. */
export const FilesHash = z.string().regex(/^[0-9a-f]{64}$/, "a files hash is 64 lowercase hex digits");

/** `POST /v3/templates`: `name` may carry a tag (`name:tag`); `alias` is the older field for it. */
export const TemplateBuildRequestV3 = z.object({
  name: z.string().min(1).max(256).optional(),
  alias: z.string().min(1).max(256).optional(),
  tags: z.array(z.string().min(1).max(128)).max(16).optional(),
  cpuCount: z.number().int().min(1).max(16).optional(),
  memoryMB: z.number().int().min(128).max(65536).optional(),
  /** Refused when given: Den sizes an image's disk from its unpacked size. */
  minFreeDiskMb: z.number().int().optional(),
  /** Deprecated in E2B; the API key's owner is the team. */
  teamID: z.string().max(128).optional(),
});
export type TemplateBuildRequestV3 = z.infer<typeof TemplateBuildRequestV3>;

export const TemplateRequestResponseV3 = z.object({
  templateID: z.string(),
  buildID: z.string(),
  aliases: z.array(z.string()),
  names: z.array(z.string()),
  tags: z.array(z.string()),
  public: z.boolean(),
});
export type TemplateRequestResponseV3 = z.infer<typeof TemplateRequestResponseV3>;

/** One builder instruction: `RUN [cmd, user?]`, `COPY [src, dest, user, mode]` (+ filesHash), `ENV [k, v, ...]`, `WORKDIR [path]`, `USER [user]`. */
export const TemplateStep = z.object({
  type: z.string().min(1).max(32),
  args: z.array(z.string().max(64 * 1024)).max(1024).optional(),
  filesHash: FilesHash.optional(),
  force: z.boolean().optional(),
  forceUpload: z.boolean().optional(),
  resolveSymlinks: z.boolean().optional(),
  gzip: z.boolean().optional(),
});
export type TemplateStep = z.infer<typeof TemplateStep>;

/**
 * `fromImageRegistry`: E2B's `registry` (username and password) is Den's basic auth; `aws`
 * and `gcp` are refused by the server (their secrets are dropped here, never read).
 */
export const FromImageRegistry = z.object({
  type: z.string().min(1).max(16),
  username: z.string().min(1).max(256).optional(),
  password: z.string().min(1).max(4096).optional(),
});
export type FromImageRegistry = z.infer<typeof FromImageRegistry>;

/** `POST /v2/templates/{templateID}/builds/{buildID}`. */
export const TemplateBuildStartV2 = z.object({
  fromImage: z.string().min(1).max(512).optional(),
  fromTemplate: z.string().min(1).max(256).optional(),
  fromImageRegistry: FromImageRegistry.optional(),
  steps: z.array(TemplateStep).max(512).optional(),
  startCmd: z.string().min(1).max(64 * 1024).optional(),
  readyCmd: z.string().min(1).max(64 * 1024).optional(),
  force: z.boolean().optional(),
});
export type TemplateBuildStartV2 = z.infer<typeof TemplateBuildStartV2>;

/** `GET /templates/{templateID}/files/{hash}`: `url` is where the client PUTs the tar (with `Content-Length`). */
export const TemplateBuildFileUpload = z.object({ present: z.boolean(), url: z.string().optional() });
export type TemplateBuildFileUpload = z.infer<typeof TemplateBuildFileUpload>;

export const LogLevel = z.enum(["debug", "info", "warn", "error"]);
export type LogLevel = z.infer<typeof LogLevel>;

export const BuildLogEntry = z.object({ timestamp: z.string(), level: LogLevel, message: z.string(), step: z.string().optional() });
export type BuildLogEntry = z.infer<typeof BuildLogEntry>;

export const TemplateBuildStatus = z.enum(["building", "waiting", "ready", "error"]);
export type TemplateBuildStatus = z.infer<typeof TemplateBuildStatus>;

/** `step`: the failed step's number (1 = the first instruction), `base` (the source) or `finalize` (start and ready). */
export const BuildStatusReason = z.object({ message: z.string(), step: z.string().optional(), logEntries: z.array(BuildLogEntry).optional() });
export type BuildStatusReason = z.infer<typeof BuildStatusReason>;

/** `GET /templates/{templateID}/builds/{buildID}/status?logsOffset=N&limit=M`. */
export const TemplateBuildInfo = z.object({
  buildID: z.string(),
  templateID: z.string(),
  status: TemplateBuildStatus,
  logEntries: z.array(BuildLogEntry),
  logs: z.array(z.string()),
  reason: BuildStatusReason.optional(),
});
export type TemplateBuildInfo = z.infer<typeof TemplateBuildInfo>;

export const TemplateAliasResponse = z.object({ templateID: z.string(), public: z.boolean() });
export type TemplateAliasResponse = z.infer<typeof TemplateAliasResponse>;

/** One build in `GET /templates/{templateID}`. */
export const TemplateBuild = z.object({
  buildID: z.string(),
  status: TemplateBuildStatus,
  createdAt: z.string(),
  updatedAt: z.string(),
  finishedAt: z.string().optional(),
  cpuCount: z.number().int(),
  memoryMB: z.number().int(),
  envdVersion: z.string().optional(),
});
export type TemplateBuild = z.infer<typeof TemplateBuild>;

export const TemplateWithBuilds = z.object({
  templateID: z.string(),
  aliases: z.array(z.string()),
  names: z.array(z.string()),
  public: z.boolean(),
  createdAt: z.string(),
  updatedAt: z.string(),
  lastSpawnedAt: z.string().nullable(),
  spawnCount: z.number().int(),
  builds: z.array(TemplateBuild),
});
export type TemplateWithBuilds = z.infer<typeof TemplateWithBuilds>;

export const TemplateTag = z.object({ tag: z.string(), buildID: z.string(), createdAt: z.string() });
export type TemplateTag = z.infer<typeof TemplateTag>;
