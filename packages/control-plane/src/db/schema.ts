import type { Generated } from "kysely";

/** Times are epoch milliseconds (bigint columns), so the same SQL runs on SQLite and Postgres. */
export interface ApiKeysTable {
  id: string;
  owner: string;
  hash: string;
  admin: number;
  created_at: number;
  revoked_at: number | null;
}

export interface SandboxesTable {
  id: string;
  owner: string;
  state: string;
  state_reason: string | null;
  template: string;
  template_version: string;
  persistent: number;
  ttl_seconds: number | null;
  expires_at: number | null;
  idle_timeout_seconds: number;
  on_idle: string;
  metadata: string;
  env: string;
  /** JSON {cwd?, user?}: its template's defaults for commands (null: none). */
  defaults: string | null;
  vcpus: number;
  memory_mb: number;
  disk_mb: number;
  created_at: number;
  last_activity_at: number;
  destroyed_at: number | null;
  hibernate_snapshot: string | null;
  hibernate_mode: string | null;
  stored_bytes: number | null;
  /** Metering: when its open usage segment began, and its VM's CPU counter then. */
  meter_since: number | null;
  meter_cpu: number | null;
  /** JSON of its api.NetworkPolicy; null: egress none. */
  network: string | null;
  /** Bumped by every committed change of state: the compare-and-set token. */
  generation: number;
  /** The operation in flight on it (its in-between state), if any. */
  op_id: string | null;
  op_kind: string | null;
  op_since: number | null;
  /** The host agent (instance id) its VM and local snapshots are on; null: the first host (rows from before hosts were recorded). */
  host_id: string | null;
  /** `ttl`: expires_at counts from creation in every state (Den). `running`: it counts only while running; hibernated, it is the retention limit (E2B's timeout). */
  deadline_mode: string;
  /** At expires_at while running: `destroy`, `hibernate` (E2B's onTimeout: pause) or `hibernate_disk` (that pause with keepMemory: false). */
  on_deadline: string;
  /** `running` mode: the deadline a wake starts (seconds from the wake). */
  run_timeout_seconds: number | null;
  /** 1: a hibernated sandbox wakes on envd traffic (E2B's autoResume). */
  auto_resume: number;
  /** The API that made it: `v1` or `e2b`. */
  surface: string;
  /** 1: its ports are served without a key (E2B's allowPublicTraffic, its default). */
  public_ports: number;
}

/**
 * Every mutating operation, written (with the sandbox's in-between state) before the host
 * is asked, so a restart can finish or roll back what was in flight.
 */
export interface OperationsTable {
  id: string;
  sandbox_id: string | null;
  kind: string;
  /** JSON: what it was asked, including every id the control plane picked for it. */
  args: string;
  /** pending | done | failed | rolled_back */
  status: string;
  result: string | null;
  error: string | null;
  reason: string;
  host: string | null;
  created_at: number;
  finished_at: number | null;
  /** The control-plane replica running it (null: recorded before replicas had ids). */
  owner: string | null;
}

/**
 * The catalog of snapshots in the object store. A row is written (pending) before its
 * upload starts, so nothing in the store is ever unaccounted for; objects are deleted
 * only by the garbage collector, once their row has been `released` for a grace period.
 */
export interface StoredSnapshotsTable {
  id: string;
  owner: string;
  /** Its key prefix in the store (see snapshotKey). */
  key: string;
  /** cold | checkpoint */
  kind: string;
  /** pending | complete | released */
  state: string;
  bytes: number | null;
  created_at: number;
  released_at: number | null;
  /** The template version it restores onto (null: cataloged before migration 015 and not found). */
  template: string | null;
  template_version: string | null;
  /** JSON of host.StoredDigests, what its upload put (null: pending, or completed before migration 024). */
  digests: string | null;
}

/** Deployment-wide settings (the deployment id, ...), shared by every process of one deployment. */
export interface SettingsTable {
  key: string;
  value: string;
}

/** One closed stretch of a sandbox's (or a deleted checkpoint's) life, as billed. */
export interface UsageSegmentsTable {
  sandbox_id: string;
  owner: string;
  /** running | warm | cold | checkpoint */
  state: string;
  start_ms: number;
  end_ms: number;
  vcpus: number;
  memory_mb: number;
  host_cpu_ms: number;
  den_cpu_ms: number;
  stored_bytes: number;
}

export interface SandboxMetadataTable {
  sandbox_id: string;
  key: string;
  value: string;
}

export interface EventsTable {
  seq: Generated<number>;
  sandbox_id: string;
  at: number;
  type: string;
  reason: string | null;
  data: string;
}

export interface CheckpointsTable {
  id: string;
  owner: string;
  sandbox_id: string;
  name: string | null;
  template: string;
  template_version: string;
  vcpus: number;
  memory_mb: number;
  disk_mb: number;
  pause_ms: number;
  stored_bytes: number;
  created_at: number;
  /** The sandbox's network policy when it was taken (JSON), the default of its restores. */
  network: string | null;
}

/** Templates made through the API, and who owns them (the host's own templates have no row). */
export interface TemplatesTable {
  name: string;
  owner: string;
  created_at: number;
  /** Deleted by its owner: it resolves for nobody (versions in use stay on the host), and the name stays theirs. */
  deleted_at: number | null;
  /** JSON {source, run: api.TemplateRun} of its last build (null: runs as its source does). */
  run: string | null;
}

/** A template build (see migration 022). */
export interface TemplateBuildsTable {
  id: string;
  owner: string;
  name: string;
  state: string;
  /** JSON: what it was built from (`image`, `dockerfile`, `template`, ...), never credentials. */
  source: string;
  version: string | null;
  /** JSON {code, message, details} of its failure. */
  error: string | null;
  host_id: string | null;
  created_at: number;
  finished_at: number | null;
}

export interface TemplateBuildLogsTable {
  build_id: string;
  seq: number;
  at: number;
  level: string;
  message: string;
}

/** A host agent of the deployment (see migration 012). */
export interface HostsTable {
  id: string;
  address: string;
  managed: string;
  state: string;
  /** JSON of host.HostKind. */
  kind: string | null;
  /** JSON of host.CapacityReport, as of its last heartbeat. */
  capacity: string | null;
  registered_at: number;
  heartbeat_at: number | null;
  lease_until: number | null;
  lost_at: number | null;
}

export interface ReplicasTable {
  id: string;
  started_at: number;
  heartbeat_at: number;
  lease_until: number;
}

export interface LeasesTable {
  name: string;
  holder: string;
  until: number;
}

/** A template version in the shared store (migration 014). */
export interface TemplateVersionsTable {
  name: string;
  version: string;
  key: string;
  state: string;
  bytes: number | null;
  host_id: string;
  created_at: number;
  /** JSON of host.StoredDigests, what its publish put (null: pending, or completed before migration 024). */
  digests: string | null;
}

/** An owner's webhook (migration 016). */
export interface WebhooksTable {
  id: string;
  owner: string;
  url: string;
  /** JSON array of event types. */
  events: string;
  description: string | null;
  /** `whsec_` + base64: the key deliveries are signed with. */
  secret: string;
  created_at: number;
}

/** The outbox: one row per event per webhook, written in the transaction of the change it tells of (migration 016). */
export interface WebhookDeliveriesTable {
  seq: Generated<number>;
  id: string;
  message_id: string;
  webhook_id: string;
  owner: string;
  sandbox_id: string | null;
  /** Deliveries with one key go out in `seq` order, one at a time (the sandbox, or the owner for owner events). */
  ordering_key: string;
  type: string;
  /** The JSON body, exactly as signed and sent. */
  payload: string;
  /** pending | delivered | failed */
  status: string;
  attempts: number;
  created_at: number;
  next_attempt_at: number;
  last_attempt_at: number | null;
  delivered_at: number | null;
  response_status: number | null;
  error: string | null;
  /** The replica sending it now, until when (so two replicas never send one delivery at once). */
  claimed_by: string | null;
  claimed_until: number | null;
}

/** A named volume of an owner (migration 017). */
export interface VolumesTable {
  id: string;
  owner: string;
  name: string;
  size_mb: number;
  /** creating | ready | moving (between hosts, through the store: nothing may mount it) */
  state: string;
  /** The host its image is on (unless its stored copy, `snapshot_id`, is complete: then the host it was parked from). */
  host_id: string;
  created_at: number;
  deleted_at: number | null;
  /** Its copy in the store (migration 018): pending while uploading, complete once it is the volume. */
  snapshot_id: string | null;
  /** A host a download of it is under way to. */
  move_to: string | null;
  moved_at: number | null;
  /** The replica running the move (another settles it only once that one's lease has run out). */
  move_owner: string | null;
  /** When something last held it, to the volumes' sweep's pass (migration 020); null: not seen since. */
  used_at: number | null;
}

/** A volume mounted in a sandbox, or held by a helper VM (migration 017). */
export interface VolumeMountsTable {
  volume_id: string;
  sandbox_id: string;
  path: string;
  read_only: number;
  /** 1: it holds the volume now (counts against other mounts). */
  held: number;
  created_at: number;
}

/** A one-time join token (migration 023): only the hash of its secret is kept. */
export interface JoinTokensTable {
  id: string;
  /** SHA-256 of the token's secret, hex. */
  secret_hash: string;
  /** host | control-plane: what the machine that redeems it becomes. */
  kind: string;
  created_at: number;
  expires_at: number;
  /** When it was redeemed (once), and the machine id it was redeemed for. */
  used_at: number | null;
  used_by: string | null;
  /** The admin key that made it. */
  created_by: string;
}

/** A certificate the deployment's CA issued to a machine (migration 023), for revocation and expiry. */
export interface MachineCertsTable {
  /** Its serial number, lowercase hex. */
  serial: string;
  kind: string;
  machine_id: string;
  not_after: number;
  issued_at: number;
  revoked_at: number | null;
}

export interface Database {
  join_tokens: JoinTokensTable;
  machine_certs: MachineCertsTable;
  volumes: VolumesTable;
  volume_mounts: VolumeMountsTable;
  webhooks: WebhooksTable;
  webhook_deliveries: WebhookDeliveriesTable;
  template_versions: TemplateVersionsTable;
  replicas: ReplicasTable;
  leases: LeasesTable;
  hosts: HostsTable;
  operations: OperationsTable;
  stored_snapshots: StoredSnapshotsTable;
  settings: SettingsTable;
  usage_segments: UsageSegmentsTable;
  templates: TemplatesTable;
  template_builds: TemplateBuildsTable;
  template_build_logs: TemplateBuildLogsTable;
  checkpoints: CheckpointsTable;
  api_keys: ApiKeysTable;
  sandboxes: SandboxesTable;
  sandbox_metadata: SandboxMetadataTable;
  events: EventsTable;
}

/** Where the control plane's database is: SQLite in the data dir (embedded, the default) or a Postgres server (DEN_DATABASE_URL). */
export type DatabaseConfig = { kind: "sqlite" } | { kind: "postgres"; url: string };
export type Dialect = DatabaseConfig["kind"];
