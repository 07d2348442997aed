/**
 * The /v1 HTTP API's bodies, as zod schemas: the server validates with them, the OpenAPI
 * document is generated from them, and the SDK's types are inferred from them.
 * JSON is snake_case. Unknown fields in a request body are an error (strict objects).
 */
import { z } from "zod";

/** Limits every server enforces unless configured otherwise. */
export const API_LIMITS = {
  maxTtlSeconds: 30 * 24 * 3600,
  maxIdleTimeoutSeconds: 7 * 24 * 3600,
  maxMetadataKeys: 32,
  maxMetadataKeyLength: 64,
  maxMetadataValueLength: 512,
  maxEnvVars: 128,
  maxEnvValueLength: 32 * 1024,
  maxCommandLength: 128 * 1024,
  maxArgs: 4096,
  maxExecTimeoutSeconds: 24 * 3600,
  maxStdinBytes: 8 * 1024 * 1024,
  maxPageSize: 200,
  /** A volume's size (MiB): at least this... */
  minVolumeMb: 16,
  /** ...and at most 1 TiB (the size of every VM's volume slot). */
  maxVolumeMb: 1024 * 1024,
  /** Volumes one sandbox mounts (a restore may need as many slots again for its snapshot's own mounts). */
  maxVolumesPerSandbox: 4,
} as const;

export const SandboxId = z.string().regex(/^sbx_[a-z2-7]{16}$/, "not a sandbox id");
/**
 * Other names of Den's built-in templates: `code-interpreter` is the code interpreter's
 * template as E2B's client also knows it (its default is `code-interpreter-v1`). A template
 * of the deployment's own under such a name takes precedence.
 */
export const TEMPLATE_ALIASES: Readonly<Record<string, string>> = { "code-interpreter": "code-interpreter-v1" };

export const TemplateSpec = z
  .string()
  .regex(/^[a-z0-9][a-z0-9._-]{0,62}(@[0-9a-f]{12})?$/, "template must be a name or name@version");

/** Guest paths: absolute, no NUL, bounded. (They name files inside the VM, never on the host.) */
export const GuestPath = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => p.startsWith("/"), "path must be absolute")
  .refine((p) => !p.includes("\0"), "path must not contain NUL");

export const Metadata = z
  .record(z.string().min(1).max(API_LIMITS.maxMetadataKeyLength).regex(/^[A-Za-z0-9_.:-]+$/, "metadata keys are letters, digits, _ . : -"), z.string().max(API_LIMITS.maxMetadataValueLength))
  .refine((m) => Object.keys(m).length <= API_LIMITS.maxMetadataKeys, `at most ${API_LIMITS.maxMetadataKeys} metadata keys`);

export const EnvVars = z
  .record(z.string().min(1).max(256).regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "env names are shell identifiers"), z.string().max(API_LIMITS.maxEnvValueLength))
  .refine((m) => Object.keys(m).length <= API_LIMITS.maxEnvVars, `at most ${API_LIMITS.maxEnvVars} env vars`);

export const SandboxState = z.enum(["creating", "running", "hibernated", "destroyed", "lost", "error"]);
export type SandboxState = z.infer<typeof SandboxState>;

export const TransitionReason = z.enum(["user", "ttl", "idle", "error", "host_lost", "restart", "memory_pressure"]);
export type TransitionReason = z.infer<typeof TransitionReason>;

export const OnIdle = z.enum(["hibernate", "destroy"]);

/** A CIDR, an address, or a domain name (`*.example.com` covers its subdomains). */
const NetworkTarget = z
  .string()
  .min(1)
  .max(253)
  .regex(/^([0-9]{1,3}(\.[0-9]{1,3}){3}(\/[0-9]{1,2})?|(\*\.)?([A-Za-z0-9-]{1,63}\.)*[A-Za-z0-9-]{1,63})$/, "not a CIDR, address or domain name");

/**
 * A sandbox's network. Egress is off unless asked for; private, loopback and link-local
 * ranges and the host itself are refused whatever the policy says.
 */
export const NetworkPolicy = z.strictObject({
  /** `none` (default): no connection leaves the guest. `allowlist`: only `allow`. `open`: all but `deny`. */
  egress: z.enum(["none", "allowlist", "open"]),
  /** allowlist: CIDRs, addresses and domain names the guest may reach (names resolve through Den's DNS). */
  allow: z.array(NetworkTarget).max(256).optional(),
  /** open: CIDRs and addresses refused on top of the always-refused ranges. */
  deny: z.array(NetworkTarget).max(256).optional(),
  /** Connections open at once; the next one is refused. Default and maximum: the server's limit. */
  max_connections: z.number().int().min(1).max(65536).optional(),
  /** Bandwidth each way, in megabits per second. Default and maximum: the server's limit (0 = none). */
  bandwidth_mbps: z.number().int().min(1).max(100_000).optional(),
});
export type NetworkPolicy = z.infer<typeof NetworkPolicy>;

/** Refused connection attempts of a sandbox since its network came up, by why. */
export const NetworkStatus = z.object({
  policy: NetworkPolicy,
  /** Whether its network is up now (a hibernated or egress-none sandbox has none). */
  active: z.boolean(),
  refused: z.object({
    /** Private, loopback, link-local ranges and this machine's addresses. */
    private: z.number().int(),
    /** Not allowed by the policy. */
    policy: z.number().int(),
    /** Over the connection limit. */
    limit: z.number().int(),
    /** DNS names not on the allowlist. */
    dns: z.number().int(),
  }),
});
export type NetworkStatus = z.infer<typeof NetworkStatus>;

// ---- volumes ----

export const VolumeName = z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/, "volume names are 1 to 63 lowercase letters, digits and -, not starting with -");
export const VolumeId = z.string().regex(/^vol_[a-z2-7]{16}$/, "not a volume id");

/** Where the guest may not mount a volume: the system's own directories (the guest agent refuses them too). */
const SYSTEM_DIRS = ["/proc", "/sys", "/dev", "/run", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/usr", "/boot"];

/** A volume's mount point in the guest: absolute, plain segments (no `.` or `..`), not `/`, not a system directory. */
export const VolumeMountPath = z
  .string()
  .min(2)
  .max(255)
  .regex(/^(\/[A-Za-z0-9_@+,.=-]+)+$/, "a mount path is absolute, of letters, digits and _ @ + , . = -, with no trailing /")
  .refine((p) => !p.split("/").some((seg) => seg === "." || seg === ".."), "a mount path has no . or .. segments")
  .refine((p) => !SYSTEM_DIRS.some((d) => p === d || p.startsWith(`${d}/`)), `a volume cannot be mounted at or under ${SYSTEM_DIRS.join(", ")}`);

/** One volume mounted into a sandbox. */
export const VolumeMount = z.strictObject({
  /** The volume's name (one of yours). */
  name: VolumeName,
  /** Where the guest mounts it (made if missing). */
  path: VolumeMountPath,
  /** Default false: one read-write mount at a time, or any number of read-only ones, never both. */
  read_only: z.boolean().optional(),
});
export type VolumeMount = z.infer<typeof VolumeMount>;

const under = (a: string, b: string) => a === b || a.startsWith(`${b}/`);

/** The volumes of one create, restore or fork: each volume once, each mount point its own (none inside another). */
export const VolumeMounts = z
  .array(VolumeMount)
  .max(API_LIMITS.maxVolumesPerSandbox)
  .refine((v) => new Set(v.map((m) => m.name)).size === v.length, "each volume at most once")
  .refine((v) => v.every((a, i) => v.every((b, j) => i === j || !under(a.path, b.path))), "mount paths must be distinct and not inside one another");

export const CreateVolumeRequest = z.strictObject({
  name: VolumeName,
  /** The filesystem's size in MiB (it takes host disk only as it is written). */
  size_mb: z.number().int().min(API_LIMITS.minVolumeMb).max(API_LIMITS.maxVolumeMb),
});
export type CreateVolumeRequest = z.infer<typeof CreateVolumeRequest>;

export const GrowVolumeRequest = z.strictObject({
  /** The new size in MiB: larger than the current one (a volume never shrinks). */
  size_mb: z.number().int().min(API_LIMITS.minVolumeMb).max(API_LIMITS.maxVolumeMb),
});
export type GrowVolumeRequest = z.infer<typeof GrowVolumeRequest>;

export const Volume = z.object({
  id: z.string(),
  name: z.string(),
  size_mb: z.number().int(),
  created_at: z.string(),
  /**
   * Sandboxes (not destroyed) it is mounted in. `held`: the mount holds the volume now (its
   * sandbox runs or is warm-hibernated, or a cold-hibernated sandbox's process kept files
   * open on it); a cold-hibernated sandbox that let it go gets it back at its wake.
   */
  mounts: z.array(z.object({ sandbox_id: z.string(), path: z.string(), read_only: z.boolean(), held: z.boolean() })),
});
export type Volume = z.infer<typeof Volume>;

export const ListVolumesResponse = z.object({ volumes: z.array(Volume) });
export type ListVolumesResponse = z.infer<typeof ListVolumesResponse>;

/** A path inside a volume (from its root) for the volume file routes. */
export const VolumeFilePath = GuestPath.refine((p) => !p.split("/").some((seg) => seg === ".."), "a volume path has no .. segments");

export const CreateSandboxRequest = z.strictObject({
  template: TemplateSpec.optional(),
  persistent: z.boolean().optional(),
  /** Hard deadline from creation; null (with persistent) means none. Default 3600. */
  ttl_seconds: z.number().int().min(1).max(API_LIMITS.maxTtlSeconds).nullable().optional(),
  idle_timeout_seconds: z.number().int().min(1).max(API_LIMITS.maxIdleTimeoutSeconds).optional(),
  on_idle: OnIdle.optional(),
  metadata: Metadata.optional(),
  vcpus: z.number().int().min(1).max(16).optional(),
  memory_mb: z.number().int().min(128).max(65536).optional(),
  disk_mb: z.number().int().min(1024).max(256 * 1024).optional(),
  env: EnvVars.optional(),
  network: NetworkPolicy.optional(),
  /** Volumes to mount; a read-write one another sandbox holds (or a read-only one a writer holds) is a 409 `volume_in_use`. */
  volumes: VolumeMounts.optional(),
});
export type CreateSandboxRequest = z.infer<typeof CreateSandboxRequest>;

export const OperationKind = z.enum([
  "create", "destroy", "hibernate", "wake", "checkpoint", "checkpoint_delete", "restore", "recover", "fork",
  "set_network", "set_timeout", "template_build", "template_delete",
]);
export type OperationKind = z.infer<typeof OperationKind>;

export const SandboxOperation = z.object({ id: z.string(), kind: OperationKind, since: z.string() });
export type SandboxOperation = z.infer<typeof SandboxOperation>;

export const Sandbox = z.object({
  id: SandboxId,
  state: SandboxState,
  state_reason: TransitionReason.nullable(),
  template: z.string(),
  template_version: z.string(),
  persistent: z.boolean(),
  ttl_seconds: z.number().int().nullable(),
  expires_at: z.string().nullable(),
  idle_timeout_seconds: z.number().int(),
  on_idle: OnIdle,
  metadata: z.record(z.string(), z.string()),
  vcpus: z.number().int(),
  memory_mb: z.number().int(),
  disk_mb: z.number().int(),
  created_at: z.string(),
  last_activity_at: z.string(),
  destroyed_at: z.string().nullable(),
  /** How it is hibernated (null unless hibernated): `disk` keeps only its files (a wake boots it). */
  hibernate_mode: z.enum(["warm", "cold", "disk"]).nullable(),
  /** Bytes its snapshot occupies in the store while cold-hibernated (null otherwise): compare with memory_mb. */
  stored_bytes: z.number().int().nullable(),
  network: NetworkPolicy,
  /** The operation in flight on it, if any (its `state` stays the last settled one meanwhile). */
  operation: SandboxOperation.nullable(),
});
export type Sandbox = z.infer<typeof Sandbox>;

export const ListSandboxesResponse = z.object({
  sandboxes: z.array(Sandbox),
  next_cursor: z.string().nullable(),
});
export type ListSandboxesResponse = z.infer<typeof ListSandboxesResponse>;

const CommandFields = {
  /** A shell string, run with bash -c. */
  cmd: z.string().min(1).max(API_LIMITS.maxCommandLength).optional(),
  /** Or an argv array, run directly. */
  argv: z.array(z.string().max(API_LIMITS.maxCommandLength)).min(1).max(API_LIMITS.maxArgs).optional(),
  cwd: GuestPath.optional(),
  env: EnvVars.optional(),
  /** Bytes for stdin, base64. */
  stdin_b64: z.string().max(Math.ceil((API_LIMITS.maxStdinBytes * 4) / 3) + 4).optional(),
  timeout_seconds: z.number().min(0).max(API_LIMITS.maxExecTimeoutSeconds).optional(),
};

export const ExecRequest = z
  .strictObject(CommandFields)
  .refine((r) => (r.cmd === undefined) !== (r.argv === undefined), "give exactly one of cmd and argv");
export type ExecRequest = z.infer<typeof ExecRequest>;

export const ExecResult = z.object({
  stdout: z.string(),
  stderr: z.string(),
  /** The raw bytes, base64, when the output is not valid UTF-8. */
  stdout_b64: z.string().optional(),
  stderr_b64: z.string().optional(),
  exit_code: z.number().int().nullable(),
  signal: z.number().int().nullable(),
  timed_out: z.boolean(),
  duration_ms: z.number(),
});
export type ExecResult = z.infer<typeof ExecResult>;

/** One line of a streamed exec (NDJSON). */
export const ExecStreamLine = z.discriminatedUnion("type", [
  z.object({ type: z.literal("start"), pid: z.number().int() }),
  z.object({ type: z.literal("stdout"), data_b64: z.string() }),
  z.object({ type: z.literal("stderr"), data_b64: z.string() }),
  z.object({ type: z.literal("exit"), exit_code: z.number().int().nullable(), signal: z.number().int().nullable(), timed_out: z.boolean() }),
  z.object({ type: z.literal("error"), error: z.object({ code: z.string(), message: z.string() }) }),
  /** Sent every 15 s of silence so proxies and HTTP clients keep the stream open; ignore it. */
  z.object({ type: z.literal("keepalive") }),
]);
export type ExecStreamLine = z.infer<typeof ExecStreamLine>;

export const StartProcessRequest = z
  .strictObject({ ...CommandFields, buffer_bytes: z.number().int().min(4096).max(8 * 1024 * 1024).optional() })
  .refine((r) => (r.cmd === undefined) !== (r.argv === undefined), "give exactly one of cmd and argv");
export type StartProcessRequest = z.infer<typeof StartProcessRequest>;

export const ProcessInfo = z.object({
  proc: z.number().int(),
  pid: z.number().int(),
  running: z.boolean(),
  exit_code: z.number().int().nullable(),
  signal: z.number().int().nullable(),
  timed_out: z.boolean(),
});
export type ProcessInfo = z.infer<typeof ProcessInfo>;

export const ProcessLogs = z.object({
  data_b64: z.string(),
  offset: z.number().int(),
  next_offset: z.number().int(),
  dropped: z.boolean(),
  eof: z.boolean(),
});
export type ProcessLogs = z.infer<typeof ProcessLogs>;

export const ProcessInputRequest = z.strictObject({
  data_b64: z.string().max(350_000),
  eof: z.boolean().optional(),
});

export const FileStat = z.object({
  path: z.string(),
  type: z.enum(["file", "dir", "symlink", "other"]),
  size: z.number().int(),
  mode: z.number().int(),
  mtime: z.string(),
  target: z.string().optional(),
});
export type FileStat = z.infer<typeof FileStat>;

export const ListFilesResponse = z.object({
  entries: z.array(FileStat),
  truncated: z.boolean(),
});
export type ListFilesResponse = z.infer<typeof ListFilesResponse>;

export const MkdirRequest = z.strictObject({ path: GuestPath, parents: z.boolean().optional() });
export const RenameRequest = z.strictObject({ from: GuestPath, to: GuestPath });

/**
 * warm: paused in place (instant wake). cold: snapshot to the store, VM gone (zero CPU, zero RAM).
 * disk: the VM shuts down keeping only its disk on its host (zero CPU, zero RAM, processes and
 * memory gone); a wake boots it from that disk in a few seconds.
 */
export const HibernateRequest = z.strictObject({ mode: z.enum(["warm", "cold", "disk"]).optional() });
export const TimeoutRequest = z.strictObject({ seconds: z.number().int().min(1).max(API_LIMITS.maxTtlSeconds) });

export const SandboxEvent = z.object({
  seq: z.number().int(),
  sandbox_id: SandboxId,
  at: z.string(),
  type: z.string(),
  reason: TransitionReason.nullable(),
  data: z.record(z.string(), z.unknown()),
});
export type SandboxEvent = z.infer<typeof SandboxEvent>;

/** How a template's sandboxes run by default (an image's ENV, WORKDIR, USER and CMD/ENTRYPOINT, or what a build gave). */
export const TemplateRun = z.object({
  env: z.record(z.string(), z.string()),
  /** The default working directory of commands (null: the user's home). */
  workdir: z.string().nullable(),
  /** The default user of the E2B surface's commands (/v1 runs as root unless a user is given); null: `user`. */
  user: z.string().nullable(),
  /** Started at the build and running in every sandbox (baked after `ready_cmd` passed). */
  start_cmd: z.string().nullable(),
  ready_cmd: z.string().nullable(),
});
export type TemplateRun = z.infer<typeof TemplateRun>;

export const Template = z.object({
  name: z.string(),
  version: z.string(),
  current: z.boolean(),
  /** Who made it with `POST /v1/templates` (only they can use it); null for the host's own templates. */
  owner: z.string().nullable(),
  vcpus: z.number().int(),
  memory_mb: z.number().int(),
  disk_mb: z.number().int(),
  created_at: z.string(),
  /** What it was made from: `recipe base`, `template base@...`, `image registry/repo@sha256:...`, `archive sha256:...`. */
  source: z.string().nullable().optional(),
  /** Null for templates made from a recipe or another template (they run as their source does); absent from servers of before. */
  run: TemplateRun.nullable().optional(),
});
export type Template = z.infer<typeof Template>;

/** An image reference: `[registry/]repository[:tag][@sha256:...]` (checked in full by the host that pulls it). */
export const ImageRef = z.string().min(1).max(512).regex(/^[A-Za-z0-9][A-Za-z0-9._:/@-]*$/, "an image reference is [registry/]repository[:tag][@sha256:digest]");

/** Registry credentials for one build: never stored, logged or echoed. */
export const RegistryCredentials = z.union([
  z.strictObject({ username: z.string().min(1).max(256), password: z.string().min(1).max(4096) }),
  z.strictObject({ token: z.string().min(1).max(8192) }),
]);
export type RegistryCredentials = z.infer<typeof RegistryCredentials>;

export const ImageSource = z.strictObject({ ref: ImageRef, credentials: RegistryCredentials.optional() });
export type ImageSource = z.infer<typeof ImageSource>;

/** Names of templates made through the API: no dots (those name a template's size variants). */
export const TemplateName = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/, "template names are lowercase letters, digits, _ and -");

export const CreateTemplateRequest = z
  .strictObject({
    name: TemplateName,
    /** Start from this template (default `base`)... */
    from_template: TemplateSpec.optional(),
    /** ...or from a checkpoint's exact state. */
    from_checkpoint: z.string().regex(/^snap_[a-z2-7]{16}$/, "not a checkpoint id").optional(),
    /** Shell commands run in order in the building sandbox (no network); each must exit 0. */
    setup: z.array(z.string().min(1).max(65536)).max(64).optional(),
    /** Per setup command (default 600). */
    setup_timeout_seconds: z.number().int().min(1).max(3600).optional(),
    /** ...or from an OCI image in a registry: a reference (`python:3.12`, `host:port/repo@sha256:...`), with credentials if it is private. */
    from_image: z.union([ImageRef, ImageSource]).optional(),
    /** ...or from an image archive (an OCI layout or `docker save` tar, gzip or not) uploaded with PUT /v1/templates/contexts/{digest}: its `sha256:<digest>`. */
    from_archive: z.string().regex(/^sha256:[0-9a-f]{64}$/, "an archive is sha256:<64 hex digits> of an upload").optional(),
    /** Started in the building sandbox and kept running in every sandbox made from the template (default: the image's ENTRYPOINT + CMD). */
    start_cmd: z.string().min(1).max(65536).optional(),
    /** Run until it exits 0 (the build then bakes the snapshot); e.g. `curl -fs localhost:8080`. */
    ready_cmd: z.string().min(1).max(65536).optional(),
    /** How long `ready_cmd` may take to pass (default 120). */
    ready_timeout_seconds: z.number().int().min(1).max(3600).optional(),
    /** The shape of the template's snapshot (image builds; default 1 vCPU, 512 MiB, a disk fitting the image). */
    vcpus: z.number().int().min(1).max(16).optional(),
    memory_mb: z.number().int().min(128).max(65536).optional(),
    disk_mb: z.number().int().min(1024).max(256 * 1024).optional(),
    /** Build again even if the same content was built before (a new version). */
    force: z.boolean().optional(),
    /** ...or from a Dockerfile: its FROM names an image or a template; RUN steps run in a build microVM, each cached. */
    dockerfile: z.string().min(1).max(1024 * 1024).optional(),
    /** The build context COPY takes files from: `sha256:<digest>` of a tar uploaded with PUT /v1/templates/contexts/{digest}. */
    context: z.string().regex(/^sha256:[0-9a-f]{64}$/, "a context is sha256:<64 hex digits>").optional(),
    /** false: answer 202 with the build at once (follow it at /v1/templates/builds/{id}); default: answer when it is done. */
    wait: z.boolean().optional(),
    /** Values for the Dockerfile's ARGs. */
    build_args: z.record(z.string().min(1).max(256).regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string().max(64 * 1024)).optional(),
  })
  .refine((r) => [r.from_template, r.from_checkpoint, r.from_image, r.from_archive, r.dockerfile].filter((x) => x !== undefined).length <= 1, "give at most one of from_template, from_checkpoint, from_image, from_archive and dockerfile")
  .refine((r) => r.dockerfile !== undefined || (r.context === undefined && r.build_args === undefined), "context and build_args go with a dockerfile")
  .refine((r) => r.from_image !== undefined || r.from_archive !== undefined || r.dockerfile !== undefined || (r.start_cmd === undefined && r.ready_cmd === undefined), "start_cmd and ready_cmd need from_image, from_archive or a dockerfile (setup commands' processes are what a template from a template keeps)");

/** `waiting`: announced and not started yet (E2B's builder announces a build, then starts it). */
export const TemplateBuildState = z.enum(["waiting", "building", "ready", "error", "cancelled"]);
export type TemplateBuildState = z.infer<typeof TemplateBuildState>;

/** A template build: what it builds, how it stands, and (once ended) what it made or why it failed. */
export const TemplateBuild = z.object({
  id: z.string(),
  /** The template it builds. */
  name: z.string(),
  state: TemplateBuildState,
  /** What it builds from: `{ kind: "image", ref }`, `{ kind: "dockerfile", from }`, `{ kind: "template", from }`, ... */
  source: z.record(z.string(), z.string()),
  /** The version it made (once ready). */
  version: z.string().nullable(),
  error: z.object({ code: z.string(), message: z.string(), details: z.record(z.string(), z.unknown()).optional() }).nullable(),
  created_at: z.string(),
  finished_at: z.string().nullable(),
});
export type TemplateBuild = z.infer<typeof TemplateBuild>;

/** One line of a build's log (`GET /v1/templates/builds/{id}/logs` streams them as JSON lines). */
export const TemplateBuildLogLine = z.object({ seq: z.number().int(), at: z.string(), level: z.enum(["info", "error"]), message: z.string() });
export type TemplateBuildLogLine = z.infer<typeof TemplateBuildLogLine>;

export const CreateTemplateAccepted = z.object({ build: TemplateBuild });

/** The answer to a context upload. */
export const BuildContext = z.object({ context: z.string(), size: z.number().int() });
export type BuildContext = z.infer<typeof BuildContext>;
export type CreateTemplateRequest = z.infer<typeof CreateTemplateRequest>;

/** The years 1970..9999: ISO 8601's four digits, and far enough inside JS Date's range that `from`'s default (`to` minus a day) is a date too. */
const LAST_INSTANT_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const Instant = z.string().max(64).refine((s) => {
  const t = Date.parse(s);
  return t >= 0 && t <= LAST_INSTANT_MS;
}, "must be an ISO 8601 date-time in the years 1970 to 9999");

export const UsageQuery = z.object({
  /** Start of the period (ISO 8601; default: 24 hours before `to`). */
  from: Instant.optional(),
  /** End of the period (ISO 8601; default: now). */
  to: Instant.optional(),
  /** `sandbox` (default), `owner`, or `metadata.<key>` (e.g. `metadata.task_id`). */
  group_by: z.string().regex(/^(owner|sandbox|metadata\.[A-Za-z0-9_.:-]{1,64})$/, "group_by is owner, sandbox or metadata.<key>").optional(),
  /** Admin only: one owner's usage (default: the caller's own; an admin with none sees everyone's). */
  owner: z.string().max(64).optional(),
});
export type UsageQuery = z.infer<typeof UsageQuery>;

export const UsageCost = z.object({ vcpu: z.number(), memory: z.number(), storage: z.number(), total: z.number() });

export const UsageGroup = z.object({
  /** The owner, sandbox id or metadata value; null for sandboxes without that metadata key. */
  key: z.string().nullable(),
  sandboxes: z.number().int(),
  running_seconds: z.number(),
  warm_hibernated_seconds: z.number(),
  cold_hibernated_seconds: z.number(),
  /** Reserved while running: vCPUs x seconds, and memory GiB x seconds. */
  vcpu_seconds: z.number(),
  memory_gib_seconds: z.number(),
  /** CPU its QEMU processes actually used on the host. */
  host_cpu_seconds: z.number(),
  /** CPU Den spent on its behalf: snapshots, compression, hashing, transfers, helper VMs. */
  den_cpu_seconds: z.number(),
  /** Snapshot store: bytes held x seconds (cold sandboxes and checkpoints), and the same in GB-months (10^9 bytes, 30 days). */
  stored_byte_seconds: z.number(),
  stored_gb_months: z.number(),
  /** From the server's price table; null when it has none. */
  cost: UsageCost.nullable(),
});
export type UsageGroup = z.infer<typeof UsageGroup>;

export const UsageReport = z.object({
  from: z.string(),
  to: z.string(),
  group_by: z.string(),
  prices: z.object({ vcpu_second: z.number(), gib_second: z.number(), gb_month: z.number() }).nullable(),
  groups: z.array(UsageGroup),
});
export type UsageReport = z.infer<typeof UsageReport>;

/** What a host may hold (admission control) and what it holds now: VMs that exist, running or warm-hibernated. */
export const HostCapacity = z.object({
  capacity: z.object({ memory_mb: z.number().int(), vcpus: z.number().int(), disk_reserve_mb: z.number().int() }),
  used: z.object({ memory_mb: z.number().int(), vcpus: z.number().int(), sandboxes: z.number().int() }),
});
export type HostCapacity = z.infer<typeof HostCapacity>;

/**
 * A host agent the control plane places sandboxes on: its instance id, where it is ("local":
 * in the server's process), whether it answers now, its capacity and use (null while it does
 * not answer), and how many live sandboxes the database places on it.
 */
export const HostEntry = z.object({
  id: z.string(), url: z.string(),
  /** Whether it answers now (a registered host: and holds its lease). */
  status: z.enum(["up", "unreachable"]), error: z.string().nullable(),
  /** What the operator said: `draining` takes no new sandbox; `removed` is gone from the list. */
  state: z.enum(["up", "draining", "removed"]),
  /** `config`: given by the server's configuration; `lease`: registered itself and renews a lease. */
  managed: z.enum(["config", "lease"]),
  lease_until: z.string().nullable(),
  /** When its running and warm sandboxes were declared lost (its lease and the grace period ran out). */
  lost_at: z.string().nullable(),
  kind: z.object({ qemuVersion: z.string(), accelerator: z.string(), cpuModel: z.string(), arch: z.string() }).nullable(),
  capacity: HostCapacity.shape.capacity.nullable(), used: HostCapacity.shape.used.nullable(), sandboxes: z.number().int(),
  /** When its newest unrevoked certificate of the deployment's CA expires (null: it has none, say over the legacy secret). */
  cert_expires_at: z.string().nullable(),
});
export type HostEntry = z.infer<typeof HostEntry>;
export const HostList = z.object({ hosts: z.array(HostEntry) });
export type HostList = z.infer<typeof HostList>;

/** What a machine joins the fleet as: a host agent, or a control-plane replica. */
export const MachineKind = z.enum(["host", "control-plane"]);
export type MachineKind = z.infer<typeof MachineKind>;
/** The longest a join token may be valid: a week. */
export const MAX_JOIN_TOKEN_TTL_SECONDS = 7 * 86_400;
/** `POST /v1/hosts/tokens`: a one-time token a machine joins with (`den host run --join TOKEN`); default a host's, valid an hour. */
export const CreateJoinTokenRequest = z.strictObject({
  kind: MachineKind.optional(),
  ttl_seconds: z.number().int().min(1).max(MAX_JOIN_TOKEN_TTL_SECONDS).optional(),
});
export type CreateJoinTokenRequest = z.infer<typeof CreateJoinTokenRequest>;
/** A new join token: its text is shown only in this response (the deployment keeps a hash of its secret). */
export const JoinToken = z.object({ id: z.string(), token: z.string(), kind: MachineKind, expires_at: z.string() });
export type JoinToken = z.infer<typeof JoinToken>;

export const CreateKeyRequest = z.strictObject({
  owner: z.string().min(1).max(64).regex(/^[A-Za-z0-9_.-]+$/, "owner names are letters, digits, _ . -"),
  admin: z.boolean().optional(),
  /**
   * The secret's form: `den` (default) `den_` + 32 base64url characters; `e2b` `e2b_` + 48
   * hex digits, the form E2B's Python client accepts (it refuses keys not matching
   * `^e2b_[0-9a-f]+$`). Both carry 192 random bits and work everywhere.
   */
  format: z.enum(["den", "e2b"]).optional(),
});
export type KeyFormat = NonNullable<z.infer<typeof CreateKeyRequest>["format"]>;
export const ApiKey = z.object({
  id: z.string(),
  owner: z.string(),
  admin: z.boolean(),
  created_at: z.string(),
  revoked_at: z.string().nullable(),
  /** Only in the response to create: the secret, shown once. */
  key: z.string().optional(),
});
export type ApiKey = z.infer<typeof ApiKey>;

export const ErrorBody = z.object({
  error: z.object({ code: z.string(), message: z.string(), details: z.record(z.string(), z.unknown()).optional() }),
});
export type ErrorBody = z.infer<typeof ErrorBody>;

export const CheckpointId = z.string().regex(/^snap_[a-z2-7]{16}$/, "not a checkpoint id");

export const CreateCheckpointRequest = z.strictObject({ name: z.string().min(1).max(128).optional() });

export const Checkpoint = z.object({
  id: z.string(),
  name: z.string().nullable(),
  sandbox_id: z.string(),
  template: z.string(),
  template_version: z.string(),
  vcpus: z.number().int(),
  memory_mb: z.number().int(),
  disk_mb: z.number().int(),
  /** How long the sandbox's VM was paused while its state was copied. */
  pause_ms: z.number(),
  stored_bytes: z.number().int(),
  created_at: z.string(),
});
export type Checkpoint = z.infer<typeof Checkpoint>;

/** A new sandbox from a checkpoint: lifecycle settings as at create (the shape comes from the checkpoint). */
export const RestoreCheckpointRequest = z.strictObject({
  persistent: z.boolean().optional(),
  ttl_seconds: z.number().int().min(1).max(API_LIMITS.maxTtlSeconds).nullable().optional(),
  idle_timeout_seconds: z.number().int().min(1).max(API_LIMITS.maxIdleTimeoutSeconds).optional(),
  on_idle: OnIdle.optional(),
  metadata: Metadata.optional(),
  /** Default: the network policy the sandbox had when the checkpoint was taken. */
  network: NetworkPolicy.optional(),
  /** Volumes to mount. A checkpoint holds none: the volumes its sandbox had are not part of it (their mounts are gone in the restored guest). */
  volumes: VolumeMounts.optional(),
});
export type RestoreCheckpointRequest = z.infer<typeof RestoreCheckpointRequest>;

export const RecoverRequest = z.strictObject({ checkpoint_id: CheckpointId.optional() });
export const RecoveryPoint = z.object({ checkpoint_id: z.string(), created_at: z.string(), age_seconds: z.number().int() });

export const ForkRequest = z.strictObject({
  count: z.number().int().min(1).max(16).optional(),
  /** Volumes every child mounts (the parent's own mounts are not carried over); a read-write one can go to one child only. */
  volumes: VolumeMounts.optional(),
});
export const ForkResponse = z.object({ sandboxes: z.array(Sandbox) });

/** A TCP port listening inside a sandbox. */
export const ListeningPort = z.object({
  port: z.number().int(),
  /** The address it is bound to inside the guest ("0.0.0.0", "::", "127.0.0.1", ...): all are reachable through Den. */
  address: z.string(),
  family: z.union([z.literal(4), z.literal(6)]),
  pid: z.number().int().optional(),
  process: z.string().optional(),
});
export const ListPortsResponse = z.object({
  /** Empty unless the sandbox runs (listing never wakes it). */
  ports: z.array(ListeningPort),
  state: SandboxState,
});
export type ListPortsResponse = z.infer<typeof ListPortsResponse>;

export const CreatePortUrlRequest = z.strictObject({
  port: z.number().int().min(1).max(65535),
  /** How long the URL works. Default 3600; at most the server's limit (7 days unless configured). */
  expires_in_seconds: z.number().int().min(1).optional(),
});
export type CreatePortUrlRequest = z.infer<typeof CreatePortUrlRequest>;

/** A signed URL that opens one port of one sandbox to whoever holds it, until it expires. */
export const PortUrl = z.object({
  port: z.number().int(),
  /**
   * At `/` of the port's own host name (`{port}-sbx-{...}.<domain>`, with `?den_token=...`):
   * the port's own origin, apart from the API's (a guest's page never runs on the API's origin).
   */
  url: z.string(),
  /** The same as `url` (its name before `url` became the port's own origin). */
  vhost_url: z.string(),
  /** Under the API's path (`/v1/sandboxes/{id}/ports/{port}/?den_token=...`): a browser is redirected to `url`. */
  path_url: z.string(),
  /** The token alone: as the `den_token` query parameter or cookie. */
  token: z.string(),
  expires_at: z.string(),
});
export type PortUrl = z.infer<typeof PortUrl>;

// ---- webhooks ----

/**
 * What a webhook can be told. `sandbox.*` and `checkpoint.*` are one sandbox's life, in its
 * order; `sandbox.refused` is an owner's create, restore or fork refused before any sandbox
 * existed (quota or capacity; aggregated: at most one per code a minute, with a count);
 * `network.refused` is aggregated too (the guest's refused connections since the last one).
 */
export const WebhookEventType = z.enum([
  "sandbox.created", "sandbox.hibernated", "sandbox.woken", "sandbox.destroyed", "sandbox.lost", "sandbox.recovered",
  "sandbox.error", "sandbox.forked", "checkpoint.created", "checkpoint.deleted", "network.refused", "sandbox.refused",
]);
export type WebhookEventType = z.infer<typeof WebhookEventType>;

export const WebhookId = z.string().regex(/^wh_[a-z2-7]{16}$/, "not a webhook id");
export const WebhookDeliveryId = z.string().regex(/^whd_[a-z2-7]{16}$/, "not a webhook delivery id");

export const CreateWebhookRequest = z.strictObject({
  /**
   * http or https. The address it resolves to must not be loopback, private, link-local or
   * otherwise internal, unless the operator allows that network (`DEN_WEBHOOK_ALLOW_NETWORKS`);
   * checked now and again at every connect. Redirects are not followed.
   */
  url: z.string().min(1).max(2048),
  /** Default: every event type. */
  events: z.array(WebhookEventType).min(1).max(32).optional(),
  description: z.string().max(256).optional(),
});
export type CreateWebhookRequest = z.infer<typeof CreateWebhookRequest>;

export const Webhook = z.object({
  id: z.string(),
  url: z.string(),
  events: z.array(WebhookEventType),
  description: z.string().nullable(),
  created_at: z.string(),
  /**
   * Only in the response to create: the signing secret (`whsec_` + base64, the Standard
   * Webhooks format), shown once. Each delivery carries `webhook-id`, `webhook-timestamp`
   * and `webhook-signature` (`v1,` + base64 HMAC-SHA256 of `id.timestamp.body`).
   */
  secret: z.string().optional(),
});
export type Webhook = z.infer<typeof Webhook>;

/** The JSON body of one delivery. */
export const WebhookPayload = z.object({
  type: WebhookEventType,
  /** When the event happened (ISO 8601). */
  timestamp: z.string(),
  /**
   * `sandbox_id` (absent for `sandbox.refused`), `reason` where the change has one
   * (`user|ttl|idle|error|host_lost|restart|memory_pressure`), and per type: `mode` of a
   * hibernation or wake, `children` of a fork, `forked_from`/`restored_from` of a created
   * one, `checkpoint` of checkpoint events, `code`/`message`/`count` of a refusal.
   */
  data: z.record(z.string(), z.unknown()),
});
export type WebhookPayload = z.infer<typeof WebhookPayload>;

export const WebhookDelivery = z.object({
  id: z.string(),
  /** The `webhook-id` header: the same for every attempt and redelivery of one event (dedupe on it). */
  message_id: z.string(),
  webhook_id: z.string(),
  type: WebhookEventType,
  sandbox_id: z.string().nullable(),
  /** `pending`: not yet delivered (retried with backoff); `failed`: given up after the retry window. */
  status: z.enum(["pending", "delivered", "failed"]),
  attempts: z.number().int(),
  created_at: z.string(),
  last_attempt_at: z.string().nullable(),
  next_attempt_at: z.string().nullable(),
  delivered_at: z.string().nullable(),
  /** The receiver's HTTP status at the last attempt (null: no response). */
  response_status: z.number().int().nullable(),
  /** Why the last attempt failed. */
  error: z.string().nullable(),
  payload: WebhookPayload,
});
export type WebhookDelivery = z.infer<typeof WebhookDelivery>;

export const ListWebhooksResponse = z.object({ webhooks: z.array(Webhook) });
export const ListWebhookDeliveriesResponse = z.object({
  /** Newest first. */
  deliveries: z.array(WebhookDelivery),
  next_cursor: z.string().nullable(),
});
export type ListWebhookDeliveriesResponse = z.infer<typeof ListWebhookDeliveriesResponse>;

// ---- code interpreter ----

/**
 * The code interpreter's guest port: a sandbox made from `code-interpreter-v1` (or a
 * template built on it) runs a server there that speaks E2B's code-interpreter protocol;
 * /v1's `code/...` routes forward to it.
 */
export const CODE_INTERPRETER_TEMPLATE = "code-interpreter-v1";

/** A language of the code interpreter (`python` unless given; the template's server says which it has). */
export const CodeLanguage = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.+-]{0,31}$/, "a language is a short name such as python, js or bash");

/** A code context's id (the guest's server names them); it travels in URL paths. */
export const CodeContextId = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/, "not a code context id");

export const RunCodeRequest = z
  .strictObject({
    /** The code to run (a cell). Bounded by the request body limit (DEN_MAX_BODY_BYTES, 16 MiB). */
    code: z.string(),
    /** The language of a fresh default context of that language; not with `context_id`. */
    language: CodeLanguage.optional(),
    /** Run in this context (its variables and imports persist between runs); default: the language's default context. */
    context_id: CodeContextId.optional(),
    /** Environment variables for this run only, on top of the sandbox's own. */
    env_vars: EnvVars.optional(),
  })
  .refine((r) => r.context_id === undefined || r.language === undefined, "give context_id or language, not both (a context has its language)");
export type RunCodeRequest = z.infer<typeof RunCodeRequest>;

/**
 * One result of a run (the value of the last expression, or an object the code displayed), in
 * every MIME form the kernel gave: `png`, `jpeg` and `pdf` are base64; `json` and `extra`
 * are JSON values. `is_main_result`: the cell's own value (Out[n]), not a display.
 */
export const CodeResult = z.looseObject({
  is_main_result: z.boolean().optional(),
  text: z.string().optional(),
  html: z.string().optional(),
  markdown: z.string().optional(),
  svg: z.string().optional(),
  png: z.string().optional(),
  jpeg: z.string().optional(),
  pdf: z.string().optional(),
  latex: z.string().optional(),
  json: z.unknown().optional(),
  javascript: z.string().optional(),
  extra: z.unknown().optional(),
});
export type CodeResult = z.infer<typeof CodeResult>;

/** An exception the code raised: its class name, its message, and the formatted traceback. */
export const CodeError = z.object({ name: z.string(), value: z.string(), traceback: z.string() });
export type CodeError = z.infer<typeof CodeError>;

/**
 * One line of `POST /v1/sandboxes/{id}/code/execute` (NDJSON), as the guest's server sends
 * it: `stdout`/`stderr` text as it is printed, `result`s, at most one `error`,
 * `number_of_executions`, then `end_of_execution` last. `unexpected_end_of_execution`: the
 * run ended without its end (the kernel died, or Den lost the guest: then with Den's `error`
 * code). Lines of other types may come; skip them.
 */
export const CodeStreamLine = z.discriminatedUnion("type", [
  z.object({ type: z.literal("stdout"), text: z.string(), timestamp: z.unknown().optional() }),
  z.object({ type: z.literal("stderr"), text: z.string(), timestamp: z.unknown().optional() }),
  CodeResult.extend({ type: z.literal("result") }),
  CodeError.extend({ type: z.literal("error") }),
  z.object({ type: z.literal("number_of_executions"), execution_count: z.number().int() }),
  z.object({ type: z.literal("end_of_execution") }),
  z.object({ type: z.literal("unexpected_end_of_execution"), error: z.object({ code: z.string(), message: z.string() }).optional() }),
  /** Sent every 15 s of silence so proxies and HTTP clients keep the stream open; ignore it. */
  z.object({ type: z.literal("keepalive") }),
]);
export type CodeStreamLine = z.infer<typeof CodeStreamLine>;

export const CreateCodeContextRequest = z.strictObject({
  language: CodeLanguage.optional(),
  /** The context's working directory (default: the server's, /home/user in the template). */
  cwd: GuestPath.optional(),
});
export type CreateCodeContextRequest = z.infer<typeof CreateCodeContextRequest>;

/** A code context: a kernel whose state (variables, imports, cwd) persists between runs. */
export const CodeContext = z.object({ id: z.string(), language: z.string(), cwd: z.string() });
export type CodeContext = z.infer<typeof CodeContext>;

export const ListCodeContextsResponse = z.object({ contexts: z.array(CodeContext) });
export type ListCodeContextsResponse = z.infer<typeof ListCodeContextsResponse>;
