/**
 * The TypeScript SDK of Den: long-running microVM sandboxes for AI agents.
 *
 * @example
 * ```ts
 * import { Sandbox } from "@den/sdk";
 *
 * await using sbx = await Sandbox.create({ template: "base" }); // DEN_API_URL, DEN_API_KEY
 * const { stdout } = await sbx.exec("uname -a");
 * ```
 *
 * @packageDocumentation
 */
import "./polyfill.js";

export { Sandbox, type CreateSandboxOptions, type ConnectOptions, type ListSandboxesOptions, type EventsOptions } from "./sandbox.js";
export {
  ExecStream,
  type Command,
  type CommandOptions,
  type ExecOptions,
  type BackgroundExecOptions,
  type ExecResult,
  type ExecChunk,
  type ExecExit,
} from "./exec.js";
export {
  CodeContexts,
  CODE_MAX_LINE_BYTES,
  type CodeContext,
  type CreateCodeContextOptions,
  type Execution,
  type ExecutionError,
  type ExecutionResult,
  type RunCodeOptions,
} from "./code.js";
export { Process, Processes, type LogsOptions, type ProcessLogs, type WaitOptions } from "./processes.js";
export { Filesystem, type ListFilesResult } from "./filesystem.js";
export {
  Templates,
  type CreateTemplateSpec,
  type UploadContextOptions,
  type ListBuildsOptions,
  type BuildLogsOptions,
  type ContextBody,
} from "./templates.js";
export { Keys, type CreateKeyOptions } from "./keys.js";
export {
  Webhooks,
  WEBHOOK_EVENT_TYPES,
  type CreateWebhookOptions,
  type WebhookDeliveriesOptions,
  type AllWebhookDeliveriesOptions,
  type WebhookDeliveriesPage,
} from "./webhooks.js";
export { Hosts, type HostInfo, type JoinTokenInfo } from "./hosts.js";
export { Volumes, type CreateVolumeOptions } from "./volumes.js";
export { Usage, type UsageGroup, type UsageReport, type UsageOptions } from "./usage.js";
export { DenClient, DEFAULT_API_URL, type DenClientOptions, type RequestOptions } from "./client.js";
export { readNdjson, DEFAULT_MAX_LINE_BYTES, type NdjsonOptions } from "./ndjson.js";
export {
  DenApiError,
  DenConfigError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  SandboxNotFoundError,
  FileNotFoundError,
  ProcessNotFoundError,
  TemplateNotFoundError,
  InvalidArgumentError,
  InvalidStateError,
  ConflictError,
  QuotaExceededError,
  PayloadTooLargeError,
  TimeoutError,
  UnavailableError,
  InvalidResponseError,
  apiError,
  errorFromResponse,
} from "./errors.js";
export type {
  SandboxInfo,
  SandboxState,
  TransitionReason,
  OnIdle,
  ProcessStatus,
  FileInfo,
  SandboxEvent,
  TemplateInfo,
  TemplateRun,
  TemplateBuild,
  TemplateBuildState,
  TemplateBuildLogLine,
  BuildContextInfo,
  ApiKeyInfo,
  WebhookInfo,
  WebhookDeliveryInfo,
  WebhookDeliveryStatus,
  WebhookEventType,
  WebhookPayload,
  NetworkPolicy,
  NetworkStatus,
  VolumeInfo,
  VolumeMount,
} from "./types.js";
export type { ListeningPort, PortUrl, PortUrlOptions } from "./ports.js";
export { Pty, type PtyOptions } from "./pty.js";
export { Checkpoints, type CheckpointInfo } from "./checkpoints.js";
