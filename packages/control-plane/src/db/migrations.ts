import { sql, type Kysely, type Migration } from "kysely";
import type { Dialect } from "./schema.js";

/**
 * One migration set for both dialects: portable DDL, and where the two differ (an
 * auto-increment key) a branch on `dialect`. Never edit a migration that has shipped.
 */
export const migrations = (dialect: Dialect): Record<string, Migration> => ({
  "001_init": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable("api_keys")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("hash", "varchar(128)", (c) => c.notNull().unique())
        .addColumn("admin", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addColumn("revoked_at", "bigint")
        .execute();
      await db.schema
        .createTable("sandboxes")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("state", "varchar(16)", (c) => c.notNull())
        .addColumn("state_reason", "varchar(16)")
        .addColumn("template", "varchar(64)", (c) => c.notNull())
        .addColumn("template_version", "varchar(16)", (c) => c.notNull())
        .addColumn("persistent", "integer", (c) => c.notNull())
        .addColumn("ttl_seconds", "bigint")
        .addColumn("expires_at", "bigint")
        .addColumn("idle_timeout_seconds", "bigint", (c) => c.notNull())
        .addColumn("on_idle", "varchar(16)", (c) => c.notNull())
        .addColumn("metadata", "text", (c) => c.notNull())
        .addColumn("env", "text", (c) => c.notNull())
        .addColumn("vcpus", "integer", (c) => c.notNull())
        .addColumn("memory_mb", "integer", (c) => c.notNull())
        .addColumn("disk_mb", "integer", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addColumn("last_activity_at", "bigint", (c) => c.notNull())
        .addColumn("destroyed_at", "bigint")
        .addColumn("hibernate_snapshot", "varchar(64)")
        .execute();
      await db.schema.createIndex("sandboxes_owner_state").on("sandboxes").columns(["owner", "state"]).execute();
      await db.schema
        .createTable("sandbox_metadata")
        .addColumn("sandbox_id", "varchar(64)", (c) => c.notNull().references("sandboxes.id").onDelete("cascade"))
        .addColumn("key", "varchar(64)", (c) => c.notNull())
        .addColumn("value", "varchar(512)", (c) => c.notNull())
        .addPrimaryKeyConstraint("sandbox_metadata_pk", ["sandbox_id", "key"])
        .execute();
      await db.schema.createIndex("sandbox_metadata_kv").on("sandbox_metadata").columns(["key", "value"]).execute();
      await db.schema
        .createTable("events")
        .addColumn("seq", dialect === "postgres" ? "serial" : "integer", (c) => (dialect === "postgres" ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn("sandbox_id", "varchar(64)", (c) => c.notNull())
        .addColumn("at", "bigint", (c) => c.notNull())
        .addColumn("type", "varchar(32)", (c) => c.notNull())
        .addColumn("reason", "varchar(16)")
        .addColumn("data", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("events_sandbox_seq").on("events").columns(["sandbox_id", "seq"]).execute();
    },
  },
  "002_hibernate_mode": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema.alterTable("sandboxes").addColumn("hibernate_mode", "varchar(8)").execute();
    },
  },
  "003_checkpoints": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable("checkpoints")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("sandbox_id", "varchar(64)", (c) => c.notNull())
        .addColumn("name", "varchar(128)")
        .addColumn("template", "varchar(64)", (c) => c.notNull())
        .addColumn("template_version", "varchar(16)", (c) => c.notNull())
        .addColumn("vcpus", "integer", (c) => c.notNull())
        .addColumn("memory_mb", "integer", (c) => c.notNull())
        .addColumn("disk_mb", "integer", (c) => c.notNull())
        .addColumn("pause_ms", "integer", (c) => c.notNull())
        .addColumn("stored_bytes", "bigint", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("checkpoints_owner").on("checkpoints").columns(["owner", "created_at"]).execute();
    },
  },
  "004_stored_bytes": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema.alterTable("sandboxes").addColumn("stored_bytes", "bigint").execute();
    },
  },
  "005_templates": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable("templates")
        .addColumn("name", "varchar(64)", (c) => c.primaryKey())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .execute();
    },
  },
  "006_metering": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema.alterTable("sandboxes").addColumn("meter_since", "bigint").execute();
      await db.schema.alterTable("sandboxes").addColumn("meter_cpu", "double precision").execute();
      await db.schema
        .createTable("usage_segments")
        .addColumn("sandbox_id", "varchar(64)", (c) => c.notNull())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("state", "varchar(16)", (c) => c.notNull())
        .addColumn("start_ms", "bigint", (c) => c.notNull())
        .addColumn("end_ms", "bigint", (c) => c.notNull())
        .addColumn("vcpus", "integer", (c) => c.notNull())
        .addColumn("memory_mb", "integer", (c) => c.notNull())
        .addColumn("host_cpu_ms", "bigint", (c) => c.notNull())
        .addColumn("den_cpu_ms", "bigint", (c) => c.notNull())
        .addColumn("stored_bytes", "bigint", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("usage_segments_end").on("usage_segments").columns(["end_ms"]).execute();
      await db.schema.createIndex("usage_segments_owner").on("usage_segments").columns(["owner", "end_ms"]).execute();
    },
  },
  "007_template_deleted": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema.alterTable("templates").addColumn("deleted_at", "bigint").execute();
    },
  },
  "008_network": {
    async up(db: Kysely<unknown>): Promise<void> {
      // JSON of api.NetworkPolicy; null means egress none.
      await db.schema.alterTable("sandboxes").addColumn("network", "text").execute();
      await db.schema.alterTable("checkpoints").addColumn("network", "text").execute();
    },
  },
  "009_operations": {
    async up(db: Kysely<any>): Promise<void> {
      await db.schema.alterTable("sandboxes").addColumn("generation", "integer", (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.alterTable("sandboxes").addColumn("op_id", "varchar(64)").execute();
      await db.schema.alterTable("sandboxes").addColumn("op_kind", "varchar(24)").execute();
      await db.schema.alterTable("sandboxes").addColumn("op_since", "bigint").execute();
      await db.schema
        .createTable("operations")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("sandbox_id", "varchar(64)")
        .addColumn("kind", "varchar(24)", (c) => c.notNull())
        .addColumn("args", "text", (c) => c.notNull())
        .addColumn("status", "varchar(16)", (c) => c.notNull())
        .addColumn("result", "text")
        .addColumn("error", "text")
        .addColumn("reason", "varchar(16)", (c) => c.notNull())
        .addColumn("host", "varchar(64)")
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addColumn("finished_at", "bigint")
        .execute();
      await db.schema.createIndex("operations_status").on("operations").columns(["status", "created_at"]).execute();
      await db.schema.createIndex("operations_sandbox").on("operations").columns(["sandbox_id", "created_at"]).execute();
      await db.schema
        .createTable("stored_snapshots")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("key", "varchar(256)", (c) => c.notNull())
        .addColumn("kind", "varchar(16)", (c) => c.notNull())
        .addColumn("state", "varchar(16)", (c) => c.notNull())
        .addColumn("bytes", "bigint")
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addColumn("released_at", "bigint")
        .execute();
      await db.schema.createIndex("stored_snapshots_state").on("stored_snapshots").columns(["state", "released_at"]).execute();
      await db.schema
        .createTable("settings")
        .addColumn("key", "varchar(64)", (c) => c.primaryKey())
        .addColumn("value", "text", (c) => c.notNull())
        .execute();
      // What an earlier version stored sits in the layout from before deployments had ids.
      const now = Date.now();
      const cold = await db.selectFrom("sandboxes").select(["hibernate_snapshot", "owner", "stored_bytes"])
        .where("state", "=", "hibernated").where("hibernate_mode", "=", "cold").where("hibernate_snapshot", "is not", null).execute();
      for (const r of cold) {
        await db.insertInto("stored_snapshots").values({ id: r.hibernate_snapshot, owner: r.owner, key: `snapshots/${r.hibernate_snapshot}`, kind: "cold", state: "complete", bytes: r.stored_bytes, created_at: now, released_at: null }).execute();
      }
      for (const r of await db.selectFrom("checkpoints").select(["id", "owner", "stored_bytes", "created_at"]).execute()) {
        await db.insertInto("stored_snapshots").values({ id: r.id, owner: r.owner, key: `snapshots/${r.id}`, kind: "checkpoint", state: "complete", bytes: r.stored_bytes, created_at: r.created_at, released_at: null }).execute();
      }
    },
  },
  "010_sandbox_hosts": {
    async up(db: Kysely<any>): Promise<void> {
      // Which host agent holds the sandbox; null (every row before this) means the first one given.
      await db.schema.alterTable("sandboxes").addColumn("host_id", "varchar(64)").execute();
    },
  },
  "011_deadlines": {
    async up(db: Kysely<any>): Promise<void> {
      // How a sandbox's deadline counts: from creation in any state (Den's TTL) or only while
      // it runs (E2B's timeout: paused, it keeps only a retention limit); what happens at it;
      // what a wake restarts it with; whether envd traffic wakes it; which API made it.
      await db.schema.alterTable("sandboxes").addColumn("deadline_mode", "varchar(16)", (c) => c.notNull().defaultTo("ttl")).execute();
      await db.schema.alterTable("sandboxes").addColumn("on_deadline", "varchar(16)", (c) => c.notNull().defaultTo("destroy")).execute();
      await db.schema.alterTable("sandboxes").addColumn("run_timeout_seconds", "integer").execute();
      await db.schema.alterTable("sandboxes").addColumn("auto_resume", "integer", (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.alterTable("sandboxes").addColumn("surface", "varchar(16)", (c) => c.notNull().defaultTo("v1")).execute();
      // E2B's allowPublicTraffic: its ports are served to anyone with the URL, no key.
      await db.schema.alterTable("sandboxes").addColumn("public_ports", "integer", (c) => c.notNull().defaultTo(0)).execute();
      await db.schema.createIndex("sandboxes_owner_created").on("sandboxes").columns(["owner", "created_at"]).execute();
    },
  },
  "012_hosts": {
    async up(db: Kysely<any>): Promise<void> {
      // The host agents of the deployment: those given by configuration (no lease) and those
      // that registered themselves (a lease their heartbeats renew).
      await db.schema
        .createTable("hosts")
        .addColumn("id", "varchar(128)", (c) => c.primaryKey())
        .addColumn("address", "varchar(512)", (c) => c.notNull())
        /** config | lease */
        .addColumn("managed", "varchar(16)", (c) => c.notNull())
        /** up | draining | removed (what the operator said; reachability is the lease's) */
        .addColumn("state", "varchar(16)", (c) => c.notNull())
        .addColumn("kind", "text")
        .addColumn("capacity", "text")
        .addColumn("registered_at", "bigint", (c) => c.notNull())
        .addColumn("heartbeat_at", "bigint")
        .addColumn("lease_until", "bigint")
        /** When its sandboxes were declared lost (its lease and the grace period ran out); null again once it is heard from. */
        .addColumn("lost_at", "bigint")
        .execute();
    },
  },
  "013_replicas": {
    async up(db: Kysely<any>): Promise<void> {
      // Control-plane processes of one deployment, each alive while its lease is renewed.
      await db.schema
        .createTable("replicas")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("started_at", "bigint", (c) => c.notNull())
        .addColumn("heartbeat_at", "bigint", (c) => c.notNull())
        .addColumn("lease_until", "bigint", (c) => c.notNull())
        .execute();
      // Work that must happen in one place at a time (the reaper, the garbage collector, ...): its holder and until when.
      await db.schema
        .createTable("leases")
        .addColumn("name", "varchar(64)", (c) => c.primaryKey())
        .addColumn("holder", "varchar(64)", (c) => c.notNull())
        .addColumn("until", "bigint", (c) => c.notNull())
        .execute();
      // The replica that runs an operation; another settles it once that replica is gone.
      await db.schema.alterTable("operations").addColumn("owner", "varchar(64)").execute();
    },
  },
  "014_template_versions": {
    async up(db: Kysely<any>): Promise<void> {
      // Template versions in the shared store, for hosts that do not have them yet.
      await db.schema
        .createTable("template_versions")
        .addColumn("name", "varchar(64)", (c) => c.notNull())
        .addColumn("version", "varchar(16)", (c) => c.notNull())
        .addColumn("key", "varchar(256)", (c) => c.notNull())
        /** pending | complete */
        .addColumn("state", "varchar(16)", (c) => c.notNull())
        .addColumn("bytes", "bigint")
        /** The host it was uploaded from (its kind is the version's). */
        .addColumn("host_id", "varchar(128)", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addPrimaryKeyConstraint("template_versions_pk", ["name", "version"])
        .execute();
    },
  },
  "015_stored_templates": {
    async up(db: Kysely<any>): Promise<void> {
      // The template version a stored snapshot restores onto: the database's pin on it, which
      // every host follows (hosts no longer hold the only record).
      await db.schema.alterTable("stored_snapshots").addColumn("template", "varchar(64)").execute();
      await db.schema.alterTable("stored_snapshots").addColumn("template_version", "varchar(16)").execute();
      const set = (id: string, r: { template: string; template_version: string }) =>
        db.updateTable("stored_snapshots").set({ template: r.template, template_version: r.template_version }).where("id", "=", id).execute();
      for (const r of await db.selectFrom("sandboxes").select(["hibernate_snapshot", "template", "template_version"]).where("hibernate_snapshot", "is not", null).execute()) await set(r.hibernate_snapshot, r);
      for (const r of await db.selectFrom("checkpoints").select(["id", "template", "template_version"]).execute()) await set(r.id, r);
    },
  },
  "016_webhooks": {
    async up(db: Kysely<any>): Promise<void> {
      await db.schema
        .createTable("webhooks")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("url", "varchar(2048)", (c) => c.notNull())
        .addColumn("events", "text", (c) => c.notNull())
        .addColumn("description", "varchar(256)")
        .addColumn("secret", "varchar(128)", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("webhooks_owner").on("webhooks").column("owner").execute();
      // The outbox: written with the change it tells of; never pruned before it is delivered or given up.
      await db.schema
        .createTable("webhook_deliveries")
        .addColumn("seq", dialect === "postgres" ? "bigserial" : "integer", (c) => (dialect === "postgres" ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn("id", "varchar(64)", (c) => c.notNull().unique())
        .addColumn("message_id", "varchar(64)", (c) => c.notNull())
        .addColumn("webhook_id", "varchar(64)", (c) => c.notNull())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("sandbox_id", "varchar(64)")
        .addColumn("ordering_key", "varchar(64)", (c) => c.notNull())
        .addColumn("type", "varchar(32)", (c) => c.notNull())
        .addColumn("payload", "text", (c) => c.notNull())
        .addColumn("status", "varchar(16)", (c) => c.notNull())
        .addColumn("attempts", "integer", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addColumn("next_attempt_at", "bigint", (c) => c.notNull())
        .addColumn("last_attempt_at", "bigint")
        .addColumn("delivered_at", "bigint")
        .addColumn("response_status", "integer")
        .addColumn("error", "varchar(512)")
        .addColumn("claimed_by", "varchar(64)")
        .addColumn("claimed_until", "bigint")
        .execute();
      await db.schema.createIndex("webhook_deliveries_queue").on("webhook_deliveries").columns(["status", "next_attempt_at"]).execute();
      await db.schema.createIndex("webhook_deliveries_order").on("webhook_deliveries").columns(["webhook_id", "ordering_key", "status", "seq"]).execute();
    },
  },
  "017_volumes": {
    async up(db: Kysely<any>): Promise<void> {
      // Named per-owner volumes: an image on one host, outliving every sandbox that mounts it.
      await db.schema
        .createTable("volumes")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("name", "varchar(64)", (c) => c.notNull())
        .addColumn("size_mb", "integer", (c) => c.notNull())
        /** creating (its image is being made) | ready */
        .addColumn("state", "varchar(16)", (c) => c.notNull())
        /** The host its image is on. */
        .addColumn("host_id", "varchar(128)", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        /** Deleted: its name is free again; the row goes once its image is removed. */
        .addColumn("deleted_at", "bigint")
        .execute();
      // One live volume per owner and name (a deleted one's row may linger until its image is gone).
      await db.schema.createIndex("volumes_owner_name").unique().on("volumes").columns(["owner", "name"]).where(sql.ref("deleted_at"), "is", null).execute();
      // A volume mounted in a sandbox (or held by an internal helper VM: a sandbox id with no row).
      // `held`: it holds the volume now (one writer or many readers); a cold-hibernated sandbox
      // that let it go keeps the row, and takes the hold again at its wake.
      await db.schema
        .createTable("volume_mounts")
        .addColumn("volume_id", "varchar(64)", (c) => c.notNull())
        .addColumn("sandbox_id", "varchar(64)", (c) => c.notNull())
        .addColumn("path", "varchar(255)", (c) => c.notNull())
        .addColumn("read_only", "integer", (c) => c.notNull())
        .addColumn("held", "integer", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addPrimaryKeyConstraint("volume_mounts_pk", ["volume_id", "sandbox_id"])
        .execute();
      await db.schema.createIndex("volume_mounts_sandbox").on("volume_mounts").column("sandbox_id").execute();
    },
  },
  "018_volume_moves": {
    async up(db: Kysely<any>): Promise<void> {
      // A volume moves between hosts through the store. `snapshot_id`: its copy there (a
      // stored_snapshots row of kind `volume`): while pending, an upload from `host_id` is under
      // way and the host's image is still the volume; once complete, the stored copy is (the
      // host's image is removed after). `move_to`: a host a download is under way to (state
      // `moving`); `moved_at`: when the move began (a restart finishes moves of dead processes).
      await db.schema.alterTable("volumes").addColumn("snapshot_id", "varchar(64)").execute();
      await db.schema.alterTable("volumes").addColumn("move_to", "varchar(128)").execute();
      await db.schema.alterTable("volumes").addColumn("moved_at", "bigint").execute();
    },
  },
  "019_volume_move_owner": {
    async up(db: Kysely<any>): Promise<void> {
      // The replica running a volume's move: a restart of another replica leaves it alone
      // while that one's lease holds (null: a move begun before replicas said so).
      await db.schema.alterTable("volumes").addColumn("move_owner", "varchar(64)").execute();
    },
  },
  "020_volume_used_at": {
    async up(db: Kysely<any>): Promise<void> {
      // When something last held the volume (taken, or seen held by the volumes' sweep): one
      // idle for long enough is parked in the store (null: not seen yet; the sweep sets it).
      await db.schema.alterTable("volumes").addColumn("used_at", "bigint").execute();
    },
  },
  "021_template_run": {
    async up(db: Kysely<any>): Promise<void> {
      // How a template's sandboxes run (JSON of api.TemplateRun plus its source: an image's
      // ENV, WORKDIR, USER, start command), set when its build settles; null: as their source.
      await db.schema.alterTable("templates").addColumn("run", "text").execute();
      // A sandbox's defaults from its template (JSON {cwd, user}; null: none), beside its env.
      await db.schema.alterTable("sandboxes").addColumn("defaults", "text").execute();
    },
  },
  "022_template_builds": {
    async up(db: Kysely<any>): Promise<void> {
      // A template build (its id is its operation's): its state (`building`, `ready`,
      // `error`, `cancelled`), what it was built from (never credentials), the version it
      // made, why it failed, and on which host it ran.
      await db.schema
        .createTable("template_builds")
        .addColumn("id", "varchar(64)", (c) => c.primaryKey())
        .addColumn("owner", "varchar(64)", (c) => c.notNull())
        .addColumn("name", "varchar(64)", (c) => c.notNull())
        .addColumn("state", "varchar(16)", (c) => c.notNull())
        .addColumn("source", "text", (c) => c.notNull())
        .addColumn("version", "varchar(32)")
        .addColumn("error", "text")
        .addColumn("host_id", "varchar(128)")
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addColumn("finished_at", "bigint")
        .execute();
      await db.schema.createIndex("template_builds_owner").on("template_builds").columns(["owner", "created_at"]).execute();
      // Its log, line by line as the host reports it (kept after the build, bounded per build).
      await db.schema
        .createTable("template_build_logs")
        .addColumn("build_id", "varchar(64)", (c) => c.notNull())
        .addColumn("seq", "integer", (c) => c.notNull())
        .addColumn("at", "bigint", (c) => c.notNull())
        .addColumn("level", "varchar(8)", (c) => c.notNull())
        .addColumn("message", "text", (c) => c.notNull())
        .addPrimaryKeyConstraint("template_build_logs_pk", ["build_id", "seq"])
        .execute();
    },
  },
  "023_machine_identity": {
    async up(db: Kysely<any>): Promise<void> {
      // One-time join tokens: a machine redeems one (once, before it expires) with a CSR for
      // its certificate. Only the SHA-256 of a token's secret is kept.
      await db.schema
        .createTable("join_tokens")
        .addColumn("id", "varchar(32)", (c) => c.primaryKey())
        .addColumn("secret_hash", "varchar(64)", (c) => c.notNull())
        /** host | control-plane */
        .addColumn("kind", "varchar(16)", (c) => c.notNull())
        .addColumn("created_at", "bigint", (c) => c.notNull())
        .addColumn("expires_at", "bigint", (c) => c.notNull())
        .addColumn("used_at", "bigint")
        .addColumn("used_by", "varchar(128)")
        .addColumn("created_by", "varchar(64)", (c) => c.notNull())
        .execute();
      // Every certificate the CA issued a machine (by a join or a renewal): revocation and
      // the hosts' list read it.
      await db.schema
        .createTable("machine_certs")
        .addColumn("serial", "varchar(64)", (c) => c.primaryKey())
        .addColumn("kind", "varchar(16)", (c) => c.notNull())
        .addColumn("machine_id", "varchar(128)", (c) => c.notNull())
        .addColumn("not_after", "bigint", (c) => c.notNull())
        .addColumn("issued_at", "bigint", (c) => c.notNull())
        .addColumn("revoked_at", "bigint")
        .execute();
      await db.schema.createIndex("machine_certs_machine").on("machine_certs").columns(["kind", "machine_id"]).execute();
    },
  },
  "024_stored_digests": {
    async up(db: Kysely<any>): Promise<void> {
      // What a host uploaded, as it hashed it (JSON of host.StoredDigests: the store manifest's
      // bytes and each object's size and sha256), recorded with the row once the upload is
      // complete: the record a download is checked against, not the store's own copy. Rows
      // from before stay null: their downloads go by the store's manifest (its fields checked).
      await db.schema.alterTable("stored_snapshots").addColumn("digests", "text").execute();
      await db.schema.alterTable("template_versions").addColumn("digests", "text").execute();
    },
  },
});
