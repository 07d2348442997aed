/**
 * The E2B envd API Den serves (E2B-ENVD.md): the `process.Process` and `filesystem.Filesystem`
 * Connect services in proto3 JSON, as the `e2b` client sends and reads them. Field names are
 * the descriptors' json names (lowerCamel), checked against the descriptors the `e2b` package
 * ships (packages/server/test/envd-protos.test.ts). int64 travels as a string, bytes as
 * base64, enums by name, Timestamps as RFC 3339. Requests are parsed loosely (proto3 JSON
 * readers ignore nothing they know and tolerate defaults left out); replies are built here.
 */
import { z } from "zod";

/** Bounds every request is held to before it reaches a guest. */
export const ENVD_LIMITS = {
  maxPath: 4096,
  maxArgs: 4096,
  maxArgBytes: 128 * 1024,
  maxEnvs: 256,
  maxEnvValue: 32 * 1024,
  /** One SendInput's bytes (decoded). */
  maxInputBytes: 1024 * 1024,
  maxTag: 256,
} as const;

const Path = z.string().max(ENVD_LIMITS.maxPath);
const Bytes = z.string().max(Math.ceil((ENVD_LIMITS.maxInputBytes * 4) / 3) + 4).regex(/^[A-Za-z0-9+/_-]*={0,2}$/, "not base64");
/** uint32 in proto3 JSON: a number, or a decimal string. */
const Uint32 = z.union([z.number(), z.string().regex(/^\d{1,10}$/)]).transform(Number).pipe(z.number().int().min(0).max(0xffffffff));

// ---- process.Process ----

export const Signal = z.enum(["SIGNAL_UNSPECIFIED", "SIGNAL_SIGTERM", "SIGNAL_SIGKILL"]);
export type Signal = z.infer<typeof Signal>;
/** Enums may also arrive by number. */
const SignalIn = z.union([Signal, z.literal(0), z.literal(15), z.literal(9)]).transform((s): Signal => (s === 15 ? "SIGNAL_SIGTERM" : s === 9 ? "SIGNAL_SIGKILL" : s === 0 ? "SIGNAL_UNSPECIFIED" : s));

export const PtySize = z.object({ cols: Uint32.pipe(z.number().min(1).max(1000)), rows: Uint32.pipe(z.number().min(1).max(1000)) });
export const Pty = z.object({ size: PtySize });

export const ProcessConfig = z.object({
  cmd: z.string().min(1).max(ENVD_LIMITS.maxArgBytes),
  args: z.array(z.string().max(ENVD_LIMITS.maxArgBytes)).max(ENVD_LIMITS.maxArgs).optional(),
  envs: z.record(z.string().min(1).max(256), z.string().max(ENVD_LIMITS.maxEnvValue)).refine((e) => Object.keys(e).length <= ENVD_LIMITS.maxEnvs, `at most ${ENVD_LIMITS.maxEnvs} envs`).optional(),
  cwd: Path.optional(),
});
export type ProcessConfig = z.infer<typeof ProcessConfig>;

/** A oneof: `pid` or `tag`. */
export const ProcessSelector = z.object({ pid: Uint32.optional(), tag: z.string().max(ENVD_LIMITS.maxTag).optional() })
  .refine((s) => s.pid !== undefined || s.tag !== undefined, "process selector needs a pid or a tag");
export type ProcessSelector = z.infer<typeof ProcessSelector>;

export const StartRequest = z.object({
  process: ProcessConfig,
  pty: Pty.optional(),
  tag: z.string().max(ENVD_LIMITS.maxTag).optional(),
  stdin: z.boolean().optional(),
});
export type StartRequest = z.infer<typeof StartRequest>;

export const ConnectRequest = z.object({ process: ProcessSelector });
export const ListRequest = z.object({});
/** A oneof: `stdin` or `pty` bytes. */
export const ProcessInput = z.object({ stdin: Bytes.optional(), pty: Bytes.optional() });
export const SendInputRequest = z.object({ process: ProcessSelector, input: ProcessInput });
export const SendSignalRequest = z.object({ process: ProcessSelector, signal: SignalIn });
export const CloseStdinRequest = z.object({ process: ProcessSelector });
export const UpdateRequest = z.object({ process: ProcessSelector, pty: Pty.optional() });

/** ProcessEvent (oneof `event`), as Den sends it inside StartResponse/ConnectResponse `{event}`. */
export type ProcessEvent =
  | { start: { pid: number } }
  | { data: { stdout: string } | { stderr: string } | { pty: string } }
  | { end: { exitCode: number; exited: boolean; status: string; error?: string } }
  | { keepalive: Record<string, never> };
export interface ProcessEventResponse { event: ProcessEvent }

export interface ProcessInfo {
  config: { cmd: string; args: string[]; envs: Record<string, string>; cwd?: string };
  pid: number;
  tag?: string;
}
export interface ListResponse { processes: ProcessInfo[] }

// ---- filesystem.Filesystem ----

export const FileType = z.enum(["FILE_TYPE_UNSPECIFIED", "FILE_TYPE_FILE", "FILE_TYPE_DIRECTORY", "FILE_TYPE_SYMLINK"]);
export type FileType = z.infer<typeof FileType>;
export const EventType = z.enum(["EVENT_TYPE_UNSPECIFIED", "EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE", "EVENT_TYPE_REMOVE", "EVENT_TYPE_RENAME", "EVENT_TYPE_CHMOD"]);
export type EventType = z.infer<typeof EventType>;

export interface EntryInfo {
  name: string;
  type: FileType;
  path: string;
  /** int64: a decimal string. */
  size: string;
  /** Permission bits (`st_mode & 0o777` plus setuid/setgid/sticky). */
  mode: number;
  /** Go's `FileMode.String()`, as envd reports it: `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`. */
  permissions: string;
  owner: string;
  group: string;
  /** google.protobuf.Timestamp in JSON: RFC 3339. */
  modifiedTime: string;
  symlinkTarget?: string;
  /** From the file's `user.e2b.*` extended attributes, the prefix stripped. */
  metadata?: Record<string, string>;
}

export const StatRequest = z.object({ path: Path });
export const MakeDirRequest = z.object({ path: Path });
export const RemoveRequest = z.object({ path: Path });
export const MoveRequest = z.object({ source: Path, destination: Path });
export const ListDirRequest = z.object({ path: Path, depth: Uint32.optional() });
export const WatchDirRequest = z.object({ path: Path, recursive: z.boolean().optional(), includeEntry: z.boolean().optional(), allowNetworkMounts: z.boolean().optional() });
export type WatchDirRequest = z.infer<typeof WatchDirRequest>;
export const CreateWatcherRequest = WatchDirRequest;
export const WatcherIdRequest = z.object({ watcherId: z.string().min(1).max(128) });

export interface FilesystemEvent { name: string; type: EventType; entry?: EntryInfo }
export type WatchDirResponse = { start: Record<string, never> } | { filesystem: FilesystemEvent } | { keepalive: Record<string, never> };
export interface EntryResponse { entry: EntryInfo }
export interface ListDirResponse { entries: EntryInfo[] }
export interface CreateWatcherResponse { watcherId: string }
export interface GetWatcherEventsResponse { events: FilesystemEvent[] }

// ---- the plain HTTP part ----

/** `POST /files` answers one of these per written file. */
export interface WrittenFile { name: string; type: "file"; path: string; metadata?: Record<string, string> }
/** envd's REST error body: the HTTP status as a number, and a message. */
export interface HttpError { code: number; message: string }

/** The Connect error codes Den sends. */
export const ConnectCode = z.enum([
  "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists", "permission_denied",
  "resource_exhausted", "failed_precondition", "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
]);
export type ConnectCode = z.infer<typeof ConnectCode>;

/** The HTTP status of a unary error, per the Connect protocol. */
export const CONNECT_HTTP_STATUS: Record<ConnectCode, number> = {
  canceled: 499, unknown: 500, invalid_argument: 400, deadline_exceeded: 504, not_found: 404, already_exists: 409,
  permission_denied: 403, resource_exhausted: 429, failed_precondition: 400, aborted: 409, out_of_range: 400,
  unimplemented: 501, internal: 500, unavailable: 503, data_loss: 500, unauthenticated: 401,
};

/** Each service's methods: `POST /<service>/<method>`. */
export const SERVICES = {
  "process.Process": { unary: ["List", "SendInput", "SendSignal", "CloseStdin", "Update"], stream: ["Start", "Connect"] },
  "filesystem.Filesystem": { unary: ["Stat", "MakeDir", "Move", "ListDir", "Remove", "CreateWatcher", "GetWatcherEvents", "RemoveWatcher"], stream: ["WatchDir"] },
} as const;

/** The envd version Den's envd answers as: everything the client gates on up to it is implemented. */
export const ENVD_VERSION = "0.6.4";
