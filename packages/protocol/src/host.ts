/**
 * The host-agent protocol: what the control plane asks of a machine that runs sandboxes,
 * as zod schemas (the wire) and TypeScript interfaces (the seam). In single-node mode the
 * interface is called in-process; over HTTP (`/host/v1`, HOST-PROTOCOL.md) every request
 * and response is checked against these schemas, so what crosses is JSON and nothing else.
 *
 * Field names are the interface's own (camelCase), so neither side translates; templates
 * use the /v1 names, since they are shown to users as they are.
 */
import type { Duplex } from "node:stream";
import { z } from "zod";
import { API_LIMITS, NetworkPolicy, NetworkStatus, VolumeMountPath } from "./api.js";
import type { DirEntry, FileStat, ListeningPort, ProcInfo, ProcReadReply, ProcWaitReply, PtySize } from "./messages.js";

/** The protocol's version: a client refuses a host that speaks another. */
export const PROTOCOL_VERSION = 1;

/** Sandbox, snapshot, operation and template ids: the control plane picks them all. */
/** No leading dot: an id names files on the host, and ".." must never be one. */
const Id = z.string().min(1).max(128).regex(/^[A-Za-z0-9_@-][A-Za-z0-9_.@-]*$/, "ids are letters, digits, _ . @ - (not starting with a dot)");
export { Id as HostId };
const Count = z.number().int().min(0);
const Positive = z.number().int().min(1);

// ---- the data of control calls ----

/** The size and sha256 of one object's bytes as they are stored (compressed). */
export const ObjectDigest = z.object({ size: z.number().int().min(0).max(2 ** 50), sha256: z.string().regex(/^[0-9a-f]{64}$/) });
export type ObjectDigest = z.infer<typeof ObjectDigest>;

/**
 * What a host uploaded to the store, as it hashed the bytes on their way (never read back
 * from the store): its manifest (`store-manifest.json`, the exact bytes) and each file's
 * object by the file's name. The control plane records them with the snapshot's or template
 * version's row, and hands them back with every download: the host checks the bytes it gets
 * against them before it parses or uses any of them (the store's manifest is only a copy).
 */
export const StoredDigests = z.object({
  manifest: ObjectDigest,
  files: z.record(z.string().regex(/^[a-z0-9][a-z0-9._-]{0,63}$/, "a stored file's name"), ObjectDigest)
    .refine((f) => Object.keys(f).length <= 16, "at most 16 files"),
});
export type StoredDigests = z.infer<typeof StoredDigests>;

/**
 * A snapshot in the object store: its id and the key prefix the control plane chose for it;
 * `digests`, what its upload recorded (absent for a copy made before digests were recorded,
 * or on the way to an upload: the host then has only the store's own manifest to go by).
 */
export const StoredRef = z.object({ id: Id, key: z.string().min(1).max(1024), digests: StoredDigests.optional() });
export type StoredRef = z.infer<typeof StoredRef>;

/** What one VM holds while it exists (running or warm-hibernated); a cold or disk-hibernated one holds nothing. */
/** What a VM takes of its host; `diskMb`, the most its disk may grow to, where the caller knows it. */
export const Shape = z.object({ vcpus: Positive, memoryMb: Positive, diskMb: Positive.optional() });
export type Shape = z.infer<typeof Shape>;

/** How much a host may hand out. */
export const Capacity = z.object({
  /** Guest memory, summed over every VM (overcommitted only with `DEN_MEMORY_OVERCOMMIT`). */
  memoryMb: Count,
  /** vCPUs, summed over every VM (an agent's sandbox idles most of the time, so this may exceed the cores). */
  vcpus: Count,
  /** A new VM is refused while the data dir's filesystem has less free space than this. */
  diskReserveMb: Count,
  /** Host memory (MemAvailable) that must stay available: under it nothing new is admitted and the control plane relieves the host. */
  memoryReserveMb: Count.optional(),
  /** How many times over guest RAM a VM has not made its own may be promised (1: never). */
  memoryOvercommit: z.number().min(1).optional(),
});
export type Capacity = z.infer<typeof Capacity>;

export const CapacityReport = z.object({
  capacity: Capacity,
  used: z.object({ vcpus: Count, memoryMb: Count, sandboxes: Count }),
  /** The host's memory as the kernel sees it: below the reserve, the control plane cold-hibernates its least recently active sandboxes (older hosts do not say). */
  memory: z.object({ availableMb: Count, reserveMb: Count }).optional(),
});
export type CapacityReport = z.infer<typeof CapacityReport>;

/**
 * A volume to put in a VM: the volume's id (its image is on this host, made by
 * `createVolume`), where the guest mounts it, and whether read-only (enforced by QEMU).
 */
export const VolumeSpec = z.object({ volume: Id, path: VolumeMountPath, readOnly: z.boolean() });
export type VolumeSpec = z.infer<typeof VolumeSpec>;
const VolumeSpecs = z.array(VolumeSpec).max(API_LIMITS.maxVolumesPerSandbox);

export const CreateSpec = z.object({
  id: Id,
  /** `name` or `name@version`. */
  template: z.string().min(1).max(200),
  vcpus: Positive.optional(),
  memoryMb: Positive.optional(),
  diskMb: Positive.optional(),
  /** Brought up with the VM; a network that cannot come up takes the VM with it. */
  network: NetworkPolicy.optional(),
  volumes: VolumeSpecs.optional(),
});
export type HostCreateSpec = z.infer<typeof CreateSpec>;
export const CheckCreateSpec = CreateSpec.omit({ id: true });

/** A template made from a sandbox: a source (template or stored checkpoint) plus setup commands. */
/** How a template's sandboxes run by default (see api.TemplateRun). */
export const TemplateRun = z.object({
  env: z.record(z.string(), z.string()),
  workdir: z.string().nullable(),
  user: z.string().nullable(),
  startCmd: z.string().nullable(),
  readyCmd: z.string().nullable(),
});
export type TemplateRun = z.infer<typeof TemplateRun>;

const StepEnv = z.record(z.string().min(1).max(256), z.string().max(64 * 1024));

/** One step of a build (a Dockerfile's, or E2B's Template builder's), run in the building VM in order. */
export const BuildStep = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("RUN"), cmd: z.string().min(1).max(64 * 1024).optional(), argv: z.array(z.string().max(64 * 1024)).min(1).max(1024).optional(),
    /** Env of this step only (a Dockerfile's ARG values). */
    env: StepEnv.optional(), user: z.string().min(1).max(64).optional(), force: z.boolean().optional(),
  }),
  z.object({
    type: z.literal("COPY"), src: z.array(z.string().min(1).max(4096)).min(1).max(64), dest: z.string().min(1).max(4096),
    chown: z.string().min(1).max(128).optional(), chmod: z.string().regex(/^[0-7]{3,4}$/).optional(), extract: z.boolean().optional(),
    /** The build context (a tar) in the object store, and its sha256, checked before it is read. */
    context: z.object({ key: z.string().min(1).max(1024), sha256: z.string().regex(/^[0-9a-f]{64}$/) }),
    force: z.boolean().optional(),
  }),
  z.object({ type: z.literal("ENV"), env: StepEnv }),
  z.object({ type: z.literal("WORKDIR"), path: z.string().min(1).max(4096) }),
  z.object({ type: z.literal("USER"), user: z.string().min(1).max(64) }),
]);
export type BuildStep = z.infer<typeof BuildStep>;

export const TemplateBuildSpec = z.object({
  name: z.string().min(1).max(64),
  fromTemplate: z.string().min(1).max(200).optional(),
  fromCheckpoint: StoredRef.optional(),
  /** An OCI image to pull (credentials are for this pull only: never written down). */
  fromImage: z.object({ ref: z.string().min(1).max(512), auth: z.union([
    z.object({ username: z.string().min(1).max(256), password: z.string().min(1).max(4096) }),
    z.object({ token: z.string().min(1).max(8192) }),
  ]).optional() }).optional(),
  /** Steps after the source (image or template), before the start command; each step's result is cached on the host. */
  steps: z.array(BuildStep).max(512).optional(),
  /** Or an image archive (an OCI layout or `docker save` tar) the owner uploaded, checked by its digest. */
  fromArchive: z.object({ key: z.string().min(1).max(1024), sha256: z.string().regex(/^[0-9a-f]{64}$/) }).optional(),
  startCmd: z.string().max(64 * 1024).optional(),
  /** Or the start command as an argv (a Dockerfile's exec-form CMD: no shell needed). */
  startArgv: z.array(z.string().max(64 * 1024)).min(1).max(1024).optional(),
  readyCmd: z.string().max(64 * 1024).optional(),
  readyTimeoutSeconds: Positive.optional(),
  vcpus: Positive.optional(),
  memoryMb: Positive.optional(),
  diskMb: Positive.optional(),
  /** A new version even if the same content was built before. */
  force: z.boolean().optional(),
  /** The network of the build's VMs (RUN steps fetch packages; the deployment's build egress). */
  network: NetworkPolicy.optional(),
  setup: z.array(z.string().max(64 * 1024)).max(256),
  setupTimeoutSeconds: Positive,
  /** The whole build's deadline (its TTL): its sandbox is destroyed past it, whatever it is doing. */
  ttlSeconds: Positive.optional(),
});
export type TemplateBuildSpec = z.infer<typeof TemplateBuildSpec>;

export const SandboxInfo = z.object({ template: z.string(), templateVersion: z.string(), vcpus: Positive, memoryMb: Positive, diskMb: Positive });
export type HostSandboxInfo = z.infer<typeof SandboxInfo>;

/** Progress of one object of a snapshot moving to or from the store. */
export const TransferEvent = z.object({
  sandbox: z.string(),
  snapshot: z.string(),
  direction: z.enum(["upload", "download"]),
  file: z.string(),
  bytes: Count,
  total: Count.nullable(),
  done: z.boolean(),
});
export type TransferEvent = z.infer<typeof TransferEvent>;

/** What a snapshot taken on a host needs of the host it is restored on (the placement filter). */
export const HostKind = z.object({
  qemuVersion: z.string().max(64),
  accelerator: z.enum(["kvm", "tcg"]),
  cpuModel: z.string().max(64),
  arch: z.string().max(32),
});
export type HostKind = z.infer<typeof HostKind>;

/** What a host holds now, in one call. */
export const Inventory = z.object({
  instance: z.string(),
  /**
   * `stopped`: its VM died (or never came up). `off`: shut down on purpose with its disk
   * kept (a disk hibernation): it holds no VM, no memory and no vCPUs, only its disk.
   */
  vms: z.array(z.object({
    id: z.string(), state: z.enum(["running", "paused", "stopped", "off"]), cpuSeconds: z.number().nullable(),
    /** MiB this VM is charged against the host's memory now (admission's measure; absent: it holds none). */
    chargedMb: z.number().optional(),
    /** MiB it holds privately (anon + shmem PSS), where the host measures it (with a memory overcommit). */
    privateMb: z.number().optional(),
  })),
  /** Complete local snapshots (warm hibernations). */
  snapshots: z.array(z.string()),
  /** What it may hold and holds now. */
  capacity: CapacityReport,
  /** What a snapshot made there needs of the host it is restored on (hosts of before do not say). */
  kind: HostKind.optional(),
});
export type HostInventory = z.infer<typeof Inventory>;

/**
 * A volume image on a host, with its file's inode: a fetch that replaces an image makes a
 * new one, so `dropVolumeImage` removes only the file seen here.
 */
export const VolumeImage = z.object({ id: Id, inode: Count });
export type VolumeImage = z.infer<typeof VolumeImage>;

/**
 * A stored snapshot's hold on the template version it restores onto, as the control
 * plane's database records it (a bare id: a snapshot from before the record, kept only
 * where its host already pins it).
 */
export const TemplatePin = z.union([Id, z.object({ id: Id, template: z.object({ name: Id, version: Id }) })]);
export type TemplatePin = z.infer<typeof TemplatePin>;

/** A template version on a host, without where it lives there. */
export const Template = z.object({
  name: z.string(),
  version: z.string(),
  current: z.boolean(),
  vcpus: Positive,
  memory_mb: Positive,
  disk_mb: Positive,
  created_at: z.string(),
  /** What it was made from (see api.Template.source); absent on hosts of before. */
  source: z.string().nullable().optional(),
  run: TemplateRun.nullable().optional(),
});
export type HostTemplate = z.infer<typeof Template>;
export const BuiltTemplate = Template.extend({ reused: z.boolean() });

/** A line of a build's log: what it did, each step's output. */
export const BuildLogLine = z.object({ at: z.number(), level: z.enum(["info", "error"]), message: z.string().max(16 * 1024) });
export type BuildLogLine = z.infer<typeof BuildLogLine>;
/** A build's log lines from `from` on; `next` is where the next read starts; `done` once the build has ended (or the host never saw it). */
export const BuildLogPage = z.object({ lines: z.array(BuildLogLine).max(10_000), next: Count, done: z.boolean() });
export type BuildLogPage = z.infer<typeof BuildLogPage>;
export type BuiltTemplate = z.infer<typeof BuiltTemplate>;

export const Refusals = NetworkStatus.shape.refused;
export type Refusals = z.infer<typeof Refusals>;

// ---- the control routes: one table both sides are built from ----

export const Ok = z.object({});
const OpBody = { op: Id };

/** Who the host is (the client asks once, at connect). */
export const HostInfo = z.object({ protocol: z.number().int(), instance: z.string() });
export type HostInfo = z.infer<typeof HostInfo>;

interface RouteDef {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** `:name` segments are filled from the call's arguments. */
  path: string;
  body?: z.ZodType;
  response: z.ZodType;
}

const route = <const R extends RouteDef>(r: R): R => r;

/**
 * Every control call of `HostAgent` as a route. `op` is the operation id: asking again with
 * the same one returns (or joins) the first answer.
 */
export const control = {
  info: route({ method: "GET", path: "/host/v1/info", response: HostInfo }),
  create: route({ method: "POST", path: "/host/v1/vms", body: z.object({ ...OpBody, spec: CreateSpec }), response: SandboxInfo }),
  restore: route({ method: "POST", path: "/host/v1/vms/:id/restore", body: z.object({ ...OpBody, snapshot: StoredRef, network: NetworkPolicy.optional(), volumes: VolumeSpecs.optional() }), response: SandboxInfo }),
  destroy: route({ method: "DELETE", path: "/host/v1/vms/:id", response: Ok }),
  hibernateWarm: route({ method: "POST", path: "/host/v1/vms/:id/hibernate-warm", body: z.object({ ...OpBody, snapshotId: Id }), response: Ok }),
  upload: route({ method: "POST", path: "/host/v1/vms/:id/upload", body: z.object({ ...OpBody, to: StoredRef, fromWarm: Id.optional() }), response: z.object({ storedBytes: Count, heldVolumes: z.array(Id).max(64).optional(), digests: StoredDigests.optional() }) }),
  wakeWarm: route({ method: "POST", path: "/host/v1/vms/:id/wake-warm", body: z.object({ ...OpBody, snapshotId: Id.nullable() }), response: Ok }),
  hibernateDisk: route({ method: "POST", path: "/host/v1/vms/:id/hibernate-disk", body: z.object(OpBody), response: Ok }),
  wakeDisk: route({ method: "POST", path: "/host/v1/vms/:id/wake-disk", body: z.object(OpBody), response: Ok }),
  checkpoint: route({ method: "POST", path: "/host/v1/vms/:id/checkpoint", body: z.object({ ...OpBody, to: StoredRef }), response: z.object({ pauseMs: z.number().min(0), storedBytes: Count, digests: StoredDigests.optional() }) }),
  fork: route({ method: "POST", path: "/host/v1/vms/:id/fork", body: z.object({ ...OpBody, children: z.array(Id).min(1).max(64), network: NetworkPolicy.optional(), volumes: VolumeSpecs.optional() }), response: z.object({ children: z.array(SandboxInfo) }) }),
  resume: route({ method: "POST", path: "/host/v1/vms/:id/resume", response: Ok }),
  /** Kept for control planes of before (answered from the inventory, which this client asks instead). */
  cpuSeconds: route({ method: "GET", path: "/host/v1/vms/:id/cpu", response: z.object({ cpuSeconds: z.number().nullable() }) }),
  setNetwork: route({ method: "PUT", path: "/host/v1/vms/:id/network", body: z.object({ policy: NetworkPolicy }), response: Ok }),
  networkRefusals: route({ method: "GET", path: "/host/v1/vms/:id/network/refusals", response: z.object({ refused: Refusals.nullable() }) }),
  dropLocalSnapshot: route({ method: "DELETE", path: "/host/v1/snapshots/:snapshotId", response: Ok }),
  unpin: route({ method: "DELETE", path: "/host/v1/pins/:snapshotId", response: Ok }),
  collectLocal: route({ method: "POST", path: "/host/v1/collect", body: z.object({ snapshots: z.array(Id).max(1_000_000), pins: z.array(TemplatePin).max(1_000_000) }), response: Ok }),
  settled: route({ method: "GET", path: "/host/v1/ops/:op/settled", response: Ok }),
  inventory: route({ method: "GET", path: "/host/v1/inventory", response: Inventory }),
  checkCreate: route({ method: "POST", path: "/host/v1/admission/create", body: z.object({ spec: CheckCreateSpec }), response: Ok }),
  checkShape: route({ method: "POST", path: "/host/v1/admission/shape", body: z.object({ shape: Shape }), response: Ok }),
  /** Kept for control planes of before (answered from the inventory, which this client asks instead). */
  capacity: route({ method: "GET", path: "/host/v1/capacity", response: CapacityReport }),
  templates: route({ method: "GET", path: "/host/v1/templates", response: z.object({ templates: z.array(Template) }) }),
  deleteTemplate: route({ method: "DELETE", path: "/host/v1/templates/:name", response: Ok }),
  buildTemplate: route({ method: "POST", path: "/host/v1/templates/builds", body: z.object({ ...OpBody, spec: TemplateBuildSpec }), response: BuiltTemplate }),
  buildLog: route({ method: "POST", path: "/host/v1/templates/builds/:op/log", body: z.object({ from: Count }), response: BuildLogPage }),
  cancelBuild: route({ method: "POST", path: "/host/v1/templates/builds/:op/cancel", response: Ok }),
  publishTemplate: route({ method: "POST", path: "/host/v1/templates/:name/:version/publish", body: z.object({ ...OpBody, key: StoredRef.shape.key }), response: z.object({ storedBytes: Count, digests: StoredDigests.optional() }) }),
  createVolume: route({ method: "POST", path: "/host/v1/volumes", body: z.object({ ...OpBody, id: Id, sizeMb: z.number().int().min(API_LIMITS.minVolumeMb).max(API_LIMITS.maxVolumeMb) }), response: Ok }),
  deleteVolume: route({ method: "DELETE", path: "/host/v1/volumes/:id", response: Ok }),
  growVolume: route({ method: "POST", path: "/host/v1/volumes/:id/grow", body: z.object({ ...OpBody, sizeMb: z.number().int().min(API_LIMITS.minVolumeMb).max(API_LIMITS.maxVolumeMb), helper: Id }), response: Ok }),
  parkVolume: route({ method: "POST", path: "/host/v1/volumes/:id/park", body: z.object({ ...OpBody, to: StoredRef }), response: z.object({ storedBytes: Count, digests: StoredDigests.optional() }) }),
  fetchVolume: route({ method: "POST", path: "/host/v1/volumes/:id/fetch", body: z.object({ ...OpBody, from: StoredRef }), response: Ok }),
  volumeImages: route({ method: "GET", path: "/host/v1/volume-images", response: z.object({ images: z.array(VolumeImage) }) }),
  dropVolumeImage: route({ method: "POST", path: "/host/v1/volumes/:id/drop", body: z.object({ inode: Count }), response: z.object({ dropped: z.boolean() }) }),
  fetchTemplate: route({ method: "POST", path: "/host/v1/templates/:name/:version/fetch", body: z.object({ ...OpBody, key: StoredRef.shape.key, current: z.boolean(), digests: StoredDigests.optional() }), response: Ok }),
} as const;
export type ControlRoutes = typeof control;

// ---- registration: the host agent calls the control plane ----


/**
 * `den host run --control-plane URL`: every few seconds the host says who and where it is,
 * what kind of machine, and what it may hold and holds; the answer is its lease. A host
 * that cannot renew before the lease runs out pauses its VMs (it may have been declared
 * lost and its sandboxes recovered elsewhere), and the control plane reconciles it against
 * the database when it is heard from again.
 */
export const Heartbeat = z.object({
  id: Id,
  /** Where the control plane reaches its /host/v1 (http(s)://host:port). */
  address: z.string().min(1).max(512).regex(/^https?:\/\/[^/\s]+$/, "an http(s)://host:port base URL"),
  protocol: z.number().int(),
  kind: HostKind,
  capacity: CapacityReport,
  /** The first heartbeat of this host agent process: a host drained for its stop takes sandboxes again. */
  starting: z.boolean().optional(),
});
export type Heartbeat = z.infer<typeof Heartbeat>;

/**
 * `den host run --join TOKEN`: a machine made its key pair itself and sends a CSR of it with
 * the token (single use) and its id; it gets a certificate for that id from the deployment's
 * CA, and the CA's certificate (check it against the token's pin before trusting it). The
 * names are the /v1 API's (snake_case): it is the one call a machine makes before it has an
 * identity.
 */
export const JoinRequest = z.object({
  token: z.string().min(1).max(256),
  csr: z.string().min(1).max(16 * 1024),
  machine_id: z.string().min(1).max(128).regex(/^[A-Za-z0-9_-]+$/, "a machine id is letters, digits, _ and -"),
});
export type JoinRequest = z.infer<typeof JoinRequest>;
/** Its certificate and the CA's (PEM), and when the certificate expires (ISO 8601). */
export const JoinReply = z.object({ certificate: z.string(), ca: z.string(), serial: z.string(), not_after: z.string() });
export type JoinReply = z.infer<typeof JoinReply>;

/** A machine's renewal, over its verified certificate (the fleet listener): a CSR of its (new) key; the reply is a JoinReply. */
export const RenewRequest = z.object({ csr: z.string().min(1).max(16 * 1024) });
export type RenewRequest = z.infer<typeof RenewRequest>;

/** `removed`: the operator took it out (it must not run sandboxes); `draining`: no new sandboxes, its own go cold. */
export const HostState = z.enum(["up", "draining", "removed"]);
export const HeartbeatReply = z.object({ leaseMs: Positive, state: HostState });
export type HeartbeatReply = z.infer<typeof HeartbeatReply>;

/**
 * A template build's VM on a host is named `bld_...`: the host's own, not a sandbox. The host
 * destroys what a build of its last run left (at its start) and its running builds' when they
 * end; a control plane's reconcile leaves them alone (destroying one killed a build in flight).
 */
export const BUILD_VM_PREFIX = "bld";

/** The deployment's CA certificate (PEM), for a joining machine to check against its token's pin before it sends the token. */
export const CaReply = z.object({ ca: z.string().min(1).max(64 * 1024) });
export type CaReply = z.infer<typeof CaReply>;

export const registration = {
  /** Unauthenticated and harmless (a CA certificate is public): the joining machine trusts it only if its token's pin names it. */
  ca: route({ method: "GET", path: "/internal/v1/ca", response: CaReply }),
  heartbeat: route({ method: "POST", path: "/internal/v1/hosts/heartbeat", body: Heartbeat, response: HeartbeatReply }),
  /** Its own stop: drain (its sandboxes go cold, to wake on another host); the reply says how many are left. */
  drain: route({ method: "POST", path: "/internal/v1/hosts/:id/drain", body: z.object({}), response: z.object({ left: Count }) }),
  /** A machine's first call, with no key but a one-time join token: a certificate for the key of its CSR (see JoinRequest). */
  join: route({ method: "POST", path: "/internal/v1/join", body: JoinRequest, response: JoinReply }),
  /** A machine with a certificate renews it (same identity, refused once revoked): mutual TLS only. */
  renew: route({ method: "POST", path: "/internal/v1/renew", body: RenewRequest, response: JoinReply }),
} as const;

/** `GET /host/v1/events`: NDJSON, one of these a line (a ping every few seconds keeps the stream honest). */
export const HostEvent = z.discriminatedUnion("type", [
  z.object({ type: z.literal("transfer"), transfer: TransferEvent }),
  z.object({ type: z.literal("ping") }),
]);
export type HostEvent = z.infer<typeof HostEvent>;

/** A thrown DenError on the wire: its code, message and details, with the code's HTTP status. */
export const ErrorBody = z.object({ error: z.object({ code: z.string(), message: z.string(), details: z.record(z.string(), z.unknown()).optional() }) });

// ---- the control seam ----

/**
 * A sandbox's VM on a host: its lifecycle (create, hibernations and wakes, stored snapshots
 * in and out, forks), its admission and its network.
 */
export interface HostVms {
  create(op: string, spec: HostCreateSpec): Promise<HostSandboxInfo>;
  /**
   * A sandbox `id` from a stored snapshot (a checkpoint, a cold sandbox's wake, a lost
   * sandbox's recovery); any VM of that id goes first. `volumes` are mounted; the
   * snapshot's own mounts come back only on a wake of the same sandbox (volumes it held).
   * With `snapshot.digests`, its manifest and objects are checked against them before any
   * of it is parsed or loaded: a mismatch is `snapshot_corrupt`, and nothing is left of the try.
   */
  restore(op: string, id: string, snapshot: StoredRef, network?: NetworkPolicy, volumes?: VolumeSpec[]): Promise<HostSandboxInfo>;
  /** Throws `capacity_exhausted` if a create of this spec would not fit now (checked again by `create`). */
  checkCreate(spec: Omit<HostCreateSpec, "id">): Promise<void>;
  /** Throws `capacity_exhausted` if a VM of this shape would not fit now. */
  checkShape(shape: Shape): Promise<void>;
  /** Removes the VM and every local file of it; nothing to do if it has none. */
  destroy(id: string): Promise<void>;
  /** Warm: snapshot `snapshotId` kept on this host, the VM paused in place. */
  hibernateWarm(op: string, id: string, snapshotId: string): Promise<void>;
  /**
   * Cold, the first half: the VM's snapshot (or its warm snapshot `fromWarm`) goes to the
   * store under `to`; the VM stays paused (or absent) for the control plane to destroy once
   * it has committed. On failure the VM runs again (from running) and nothing is left.
   * The guest lets go of its volumes first; `heldVolumes`: those it could not (a process
   * kept files open on them), still mounted in the stored snapshot.
   */
  upload(op: string, id: string, to: StoredRef, fromWarm?: string): Promise<{ storedBytes: number; heldVolumes?: string[]; digests?: StoredDigests }>;
  /** Warm wake: resume in place, or restore from its local snapshot if the VM died. */
  wakeWarm(op: string, id: string, snapshotId: string | null): Promise<void>;
  /**
   * Disk: the guest flushes its filesystems and the VM shuts down, its disk kept on this
   * host (the inventory shows it `off`); from warm (paused) it runs just long enough to
   * flush. On failure it stays as it was.
   */
  hibernateDisk(op: string, id: string): Promise<void>;
  /** Boots an `off` sandbox again from its disk (fresh memory, same id and shape); a running one is left as it is. */
  wakeDisk(op: string, id: string): Promise<void>;
  /** A durable checkpoint in the store under `to`; the sandbox keeps running. */
  checkpoint(op: string, id: string, to: StoredRef): Promise<{ pauseMs: number; storedBytes: number; digests?: StoredDigests }>;
  /** Forks a running sandbox into children with the given ids (each gets `network` and mounts `volumes`; the parent's mounts are not theirs). */
  fork(op: string, id: string, children: string[], network?: NetworkPolicy, volumes?: VolumeSpec[]): Promise<HostSandboxInfo[]>;
  /** Unfreezes a VM frozen by an operation that did not finish. */
  resume(id: string): Promise<void>;
  /**
   * Gives a running sandbox this network policy (`none` takes its network away). Takes
   * effect at once; a no-op if it already has exactly this policy.
   */
  setNetwork(id: string, policy: NetworkPolicy): Promise<void>;
  /** Refused connection attempts since its network came up; undefined if it has none here. */
  networkRefusals(id: string): Promise<Refusals | undefined>;
}

/** Volume images on a host: made, grown, moved through the store, swept. */
export interface HostVolumes {
  /** Makes volume `id`'s image (an empty ext4 of `sizeMb`) on this host; one already there is kept. */
  create(op: string, id: string, sizeMb: number): Promise<void>;
  /** Removes volume `id`'s image from this host (nothing if it has none). */
  delete(id: string): Promise<void>;
  /**
   * Grows volume `id`'s filesystem to `sizeMb`, in a helper VM `helper` that mounts it
   * read-write (the image is never parsed on the host); the control plane holds the volume
   * for `helper` meanwhile.
   */
  grow(op: string, id: string, sizeMb: number, helper: string): Promise<void>;
  /**
   * Copies volume `id`'s image into the store under `to` (a stored snapshot of one file,
   * its manifest last), for another host to fetch; the image here is left as it is (the
   * control plane deletes it once the stored copy is the one its row names). Nothing may
   * mount it meanwhile: the control plane holds it as moving.
   */
  park(op: string, id: string, to: StoredRef): Promise<{ storedBytes: number; digests?: StoredDigests }>;
  /** Makes volume `id`'s image on this host the stored copy at `from` (verified; whole or not at all: one already here is replaced). */
  fetch(op: string, id: string, from: StoredRef): Promise<void>;
  /**
   * The volume images on this host (apart from the inventory, which the reapers ask for
   * often: only the volumes' sweep needs these, and each costs a stat).
   */
  images(): Promise<VolumeImage[]>;
  /**
   * Removes volume `id`'s image from this host if it is still the file `images` listed
   * (`inode`) and no VM here has it in a slot: an image the control plane found the volume's
   * row no longer names (its move away from here could not remove it). Whether it went.
   */
  dropImage(id: string, inode: number): Promise<boolean>;
}

/** The host's template cache: its versions, builds, and copies to and from the store. */
export interface HostTemplates {
  list(): Promise<HostTemplate[]>;
  /** Retires a template and its size variants (versions in use stay until nothing uses them). */
  delete(name: string): Promise<void>;
  /** Builds (or finds, if the same recipe was built before) a template version and makes it current. */
  build(op: string, spec: TemplateBuildSpec): Promise<BuiltTemplate>;
  /** The log of build `op` from line `from` on (kept a while after it ends). */
  buildLog(op: string, from: number): Promise<BuildLogPage>;
  /** Cancels build `op` if it is running here: it ends as `aborted`, its VMs gone. */
  cancelBuild(op: string): Promise<void>;
  /**
   * Uploads a local template version to the store under `key`, with the digests of what it
   * uploaded (a copy already there is replaced: its digests would be the store's word, not this host's).
   */
  publish(op: string, name: string, version: string, key: string): Promise<{ storedBytes: number; digests?: StoredDigests }>;
  /**
   * Makes a template version from the store local: its manifest and every object checked
   * against `digests` (the control plane's record of its upload) before they are read, each
   * field of its manifest checked, then installed (the current version of its name too, if
   * `current`). Nothing if it is here already.
   */
  fetch(op: string, name: string, version: string, key: string, current: boolean, digests?: StoredDigests): Promise<void>;
}

/** The host's local snapshots (warm hibernations') and the template pins stored snapshots hold. */
export interface HostSnapshots {
  /** Deletes a local snapshot (a warm hibernation's), if it is there. */
  dropLocal(snapshotId: string): Promise<void>;
  /** Lets go of the template version a stored snapshot needed (it is gone from the store). */
  unpin(snapshotId: string): Promise<void>;
  /**
   * Local snapshots not in `snapshots` are deleted; the host's template pins become `pins`
   * (the database's records: missing ones are written, others dropped).
   */
  collect(snapshots: string[], pins: TemplatePin[]): Promise<void>;
}

/**
 * What the control plane asks of the machine that runs sandboxes, by sub-service. In
 * single-node mode it is this process (LocalHostAgent). The control plane picks every id
 * (sandboxes, snapshots, fork children) and records its intent before it asks; every
 * mutating call carries the operation's id, and asking again with the same id returns the
 * first answer. No call removes something the control plane's records may still need: a
 * cold hibernate leaves the VM paused until the control plane has committed and destroys it.
 */
export interface HostAgent {
  readonly instance: string;
  /** Where the control plane reaches it: "local" (this process) or its base URL. */
  readonly address: string;
  readonly vms: HostVms;
  readonly volumes: HostVolumes;
  readonly templates: HostTemplates;
  readonly snapshots: HostSnapshots;
  /**
   * Everything the host says of itself, in one call: every VM (its state, CPU seconds and
   * memory charge), its local snapshots, what it may hold and holds now, and its kind.
   */
  inventory(): Promise<HostInventory>;
  /**
   * Resolves once operation `op` is no longer running on this host (at once if it never
   * ran here): a restarted control plane waits for what a surviving host is still doing
   * before it decides from the facts.
   */
  settled(op: string): Promise<void>;
  /** The guest side of a sandbox: exec, files, processes, tunnels (no call is made until one is used). */
  guest(id: string): HostGuest;
  /** Called as snapshots move to and from the store (over HTTP: fed from `GET /host/v1/events`). */
  onTransfer: ((t: TransferEvent) => void) | undefined;
  /** Lets go of the host; what it returns (if anything) resolves once what it held on the machine is gone (a pool's QEMUs, empty cgroups). */
  close(): void | Promise<void>;
}

/** A VM's CPU seconds as an inventory shows them (undefined: no VM of that id there). */
export function inventoryCpuSeconds(inv: HostInventory, id: string): number | undefined {
  return inv.vms.find((v) => v.id === id)?.cpuSeconds ?? undefined;
}

// ---- the data plane: the guest of one sandbox ----

export type GuestCommand = string | string[];

export interface GuestExecOptions {
  /** Working directory inside the guest (default `/`). */
  cwd?: string;
  env?: Record<string, string>;
  /** Bytes given to the command's stdin, then EOF. */
  stdin?: Buffer | string;
  /** Kill the whole process tree after this many milliseconds. */
  timeoutMs?: number;
  /** Run on a pseudo-terminal of this size (stdout carries the terminal's output). */
  pty?: PtySize;
  /** Keep stdin open for `write()`. */
  interactive?: boolean;
  /** Buffered exec only: the most output kept per stream before the command is killed (the runtime's default: 64 MiB). */
  maxOutputBytes?: number;
  /**
   * The guest user to run as (a name in the guest's /etc/passwd): its uid, gid and groups,
   * `HOME`, `USER`, `LOGNAME`, and its home as the default working directory. Default: root
   * (what /v1 has always done).
   */
  user?: string;
}

/** Who owns what a file call creates: a guest user (its uid and gid); default root. */
export interface GuestFileOwner {
  user?: string;
}

/** What the guest says of its own use (E2B's metrics): read inside the VM. */
export interface GuestMetrics {
  /** Unix ms when it was read (the guest's clock). */
  timestampMs: number;
  cpuCount: number;
  /** CPU busy since the previous reading (or since boot, for the first), percent of all CPUs. */
  cpuUsedPct: number;
  memTotalBytes: number;
  /** Total minus available. */
  memUsedBytes: number;
  /** Page cache and buffers. */
  memCacheBytes: number;
  /** Of the root filesystem. */
  diskTotalBytes: number;
  diskUsedBytes: number;
}

export interface GuestExit {
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
}

export interface GuestExecResult extends GuestExit {
  stdout: Buffer;
  stderr: Buffer;
}

export interface GuestChunk {
  stream: "stdout" | "stderr";
  data: Buffer;
}

/** A running streamed exec: read its output by async iteration, at the reader's pace. */
export interface GuestExecProcess extends AsyncIterable<GuestChunk> {
  readonly proc: number;
  readonly pid: number;
  /** Resolves when it has exited; without a reader its output is dropped so it can finish. */
  wait(): Promise<GuestExit>;
  write(data: Buffer | string): Promise<void>;
  closeStdin(): void;
  resize(rows: number, cols: number): Promise<void>;
  signal(signal: number): Promise<void>;
  /** Kills the whole process tree. */
  kill(): Promise<void>;
}

export type GuestFileSource = Buffer | string | Uint8Array | AsyncIterable<Uint8Array>;

/**
 * Exactly what the API's routes and the port proxy use of a sandbox's guest. The runtime's
 * `Sandbox` is one (single-node mode: no hop at all); `HttpGuest` is one over `/host/v1`.
 */
export interface HostGuest {
  exec(command: GuestCommand, opts?: GuestExecOptions): Promise<GuestExecResult>;
  execStream(command: GuestCommand, opts?: GuestExecOptions): Promise<GuestExecProcess>;
  /** A background process; its output is kept in ring buffers in the guest. */
  spawn(command: GuestCommand, opts?: GuestExecOptions & { bufferBytes?: number }): Promise<{ proc: number; pid: number }>;
  readonly processes: {
    list(): Promise<ProcInfo[]>;
    read(proc: number, channel: "stdout" | "stderr", offset?: number, max?: number): Promise<ProcReadReply>;
    wait(proc: number, timeoutMs?: number): Promise<ProcWaitReply>;
    write(proc: number, data: Buffer | string, eof?: boolean): Promise<void>;
    signal(proc: number, signal: number): Promise<void>;
    kill(proc: number): Promise<void>;
  };
  readonly files: {
    readStream(path: string, opts?: { offset?: number; length?: number }): AsyncGenerator<Buffer>;
    /** `user`: the file (and any parent it makes) is owned by that guest user. */
    write(path: string, data: GuestFileSource, opts?: { mode?: number; parents?: boolean } & GuestFileOwner): Promise<number>;
    stat(path: string): Promise<FileStat>;
    list(path: string): Promise<{ entries: DirEntry[]; truncated: boolean }>;
    mkdir(path: string, opts?: { parents?: boolean; mode?: number } & GuestFileOwner): Promise<void>;
    remove(path: string, opts?: { recursive?: boolean }): Promise<void>;
    rename(from: string, to: string): Promise<void>;
    /** Sets extended attributes (`name` with its namespace, e.g. `user.e2b.k`); values are UTF-8. */
    setXattrs(path: string, attrs: Record<string, string>): Promise<void>;
    /** The `user.*` extended attributes of a file (none: `{}`). */
    getXattrs(path: string): Promise<Record<string, string>>;
  };
  /** CPU, memory and disk as the guest sees them. */
  metrics(): Promise<GuestMetrics>;
  /** A TCP connection to `port` on the guest's loopback (works with no sandbox network). */
  tunnel(port: number): Promise<Duplex>;
  listeningPorts(): Promise<ListeningPort[]>;
}

// ---- the data plane's wire ----

export const GuestPath = z.string().min(1).max(4096);
/** A guest user's name (the guest agent checks it against its /etc/passwd). */
export const GuestUser = z.string().min(1).max(32);
export const ExecOptionsWire = z.object({
  user: GuestUser.optional(),
  cwd: z.string().max(4096).optional(),
  env: z.record(z.string(), z.string()).optional(),
  stdin_b64: z.string().optional(),
  timeoutMs: z.number().min(0).optional(),
  pty: z.object({ rows: z.number().int().min(1).max(1000), cols: z.number().int().min(1).max(1000) }).optional(),
  interactive: z.boolean().optional(),
  maxOutputBytes: Positive.optional(),
  bufferBytes: Positive.optional(),
});
export const ExecRequest = z.object({ command: z.union([z.string().min(1), z.array(z.string()).min(1)]), options: ExecOptionsWire });
export type ExecRequest = z.infer<typeof ExecRequest>;
const ExitWire = { exitCode: z.number().int().nullable(), signal: z.number().int().nullable(), timedOut: z.boolean() };
export const ExecResultWire = z.object({ stdout_b64: z.string(), stderr_b64: z.string(), ...ExitWire });
export const Spawned = z.object({ proc: z.number().int(), pid: z.number().int() });

const ProcInfoWire = z.object({
  proc: z.number().int(), pid: z.number().int(), argv: z.array(z.string()).optional(), cmd: z.string().optional(),
  mode: z.enum(["stream", "buffer"]), running: z.boolean(), exit_code: z.number().int().nullable(), signal: z.number().int().nullable(),
  timed_out: z.boolean(), started_ms: z.number(),
});
export const ProcList = z.object({ processes: z.array(ProcInfoWire) });
export const ProcRead = z.object({ data: z.string(), offset: Count, next_offset: Count, dropped: z.boolean(), eof: z.boolean() });
export const ProcWait = z.union([
  z.object({ running: z.literal(true) }),
  z.object({ running: z.literal(false), exit_code: z.number().int().nullable(), signal: z.number().int().nullable(), timed_out: z.boolean() }),
]);
export const ProcInput = z.object({ data_b64: z.string(), eof: z.boolean() });
export const ProcSignal = z.object({ signal: z.number().int().min(1).max(64) });
const FileType = z.enum(["file", "dir", "symlink", "other"]);
export const FileStatWire = z.object({ type: FileType, size: z.number(), mode: z.number().int(), mtime_ms: z.number(), uid: z.number().int(), gid: z.number().int(), target: z.string().optional() });
export const FileList = z.object({ entries: z.array(z.object({ name: z.string(), type: FileType, size: z.number(), mode: z.number().int(), mtime_ms: z.number() })), truncated: z.boolean() });
export const Written = z.object({ bytes: Count });
export const Mkdir = z.object({ path: GuestPath, parents: z.boolean().optional(), mode: z.number().int().min(0).max(0o7777).optional(), user: GuestUser.optional() });
/** `user.*` attributes: at most 128 a call, names of at most 255 bytes, values of at most 64 KiB (the guest agent's bounds). */
const Xattrs = z.record(z.string().min(1).max(255), z.string().max(65536)).refine((a) => Object.keys(a).length <= 128, "at most 128 attributes");
export const SetXattrs = z.object({ path: GuestPath, attrs: Xattrs });
export const XattrsWire = z.object({ attrs: Xattrs });
export const MetricsWire = z.object({
  timestampMs: z.number(), cpuCount: z.number().int().min(1), cpuUsedPct: z.number().min(0).max(100),
  memTotalBytes: Count, memUsedBytes: Count, memCacheBytes: Count, diskTotalBytes: Count, diskUsedBytes: Count,
});
export const Rename = z.object({ from: GuestPath, to: GuestPath });
export const Ports = z.object({ ports: z.array(z.object({ port: z.number().int(), address: z.string(), family: z.union([z.literal(4), z.literal(6)]), pid: z.number().int().optional(), process: z.string().optional() })) });

/**
 * `GET /host/v1/sandboxes/:id/exec/ws` (a WebSocket): the client's first message is an
 * ExecRequest (text). Then binary messages are `[channel byte, ...bytes]` (0 stdin from the
 * client; 1 stdout, 2 stderr from the host) and text messages are JSON control.
 */
export const ExecChannel = { stdin: 0, stdout: 1, stderr: 2 } as const;
export const ExecClientMessage = z.discriminatedUnion("type", [
  z.object({ type: z.literal("close_stdin") }),
  z.object({ type: z.literal("resize"), id: Count, rows: z.number().int().min(1).max(1000), cols: z.number().int().min(1).max(1000) }),
  z.object({ type: z.literal("signal"), id: Count, signal: z.number().int().min(1).max(64) }),
  z.object({ type: z.literal("kill"), id: Count }),
]);
export type ExecClientMessage = z.infer<typeof ExecClientMessage>;
export const ExecServerMessage = z.discriminatedUnion("type", [
  z.object({ type: z.literal("started"), proc: z.number().int(), pid: z.number().int() }),
  /** The answer to a control message of the same id. */
  z.object({ type: z.literal("ack"), id: Count, error: ErrorBody.shape.error.optional() }),
  z.object({ type: z.literal("exit"), ...ExitWire }),
  z.object({ type: z.literal("error"), error: ErrorBody.shape.error }),
]);
export type ExecServerMessage = z.infer<typeof ExecServerMessage>;

/** The tunnel route: an `Upgrade: den-tcp` GET, then raw bytes both ways. */
export const tunnelPath = (id: string, port: number): string => `/host/v1/sandboxes/${encodeURIComponent(id)}/tunnel/${port}`;
