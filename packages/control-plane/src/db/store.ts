import { NO_NETWORK } from "../network.js";
import { createHash, randomBytes } from "node:crypto";
import { PostgresAdapter, sql, type Kysely, type Selectable } from "kysely";
import { DenError, type api, type host } from "@den/protocol";
import type { CheckpointsTable, Database, HostsTable, TemplateVersionsTable, OperationsTable, SandboxesTable, StoredSnapshotsTable, TemplatesTable, UsageSegmentsTable } from "./db.js";

export type SandboxRow = Selectable<SandboxesTable>;
export type OperationRow = Selectable<OperationsTable>;
export type StoredSnapshotRow = Selectable<StoredSnapshotsTable>;
export type CheckpointRow = Selectable<CheckpointsTable>;
export type TemplateRow = Selectable<TemplatesTable>;
export type HostRow = Selectable<HostsTable>;
export type TemplateVersionRow = Selectable<TemplateVersionsTable>;

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

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

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

/** All SQL lives here, in portable kysely queries. */
export class Store {
  constructor(readonly db: Kysely<Database>) {}

  /** Runs `fn` in one transaction: everything it writes through its Store commits together, or nothing does. */
  async transaction<T>(fn: (s: Store) => Promise<T>): Promise<T> {
    if (this.db.isTransaction) return fn(this);
    return this.db.transaction().execute((tx) => fn(new Store(tx)));
  }

  // ---- settings ----

  /** A deployment-wide setting, created with `make()` by whoever asks first. */
  async setting(key: string, make: () => string): Promise<string> {
    await this.db.insertInto("settings").values({ key, value: make() }).onConflict((oc) => oc.column("key").doNothing()).execute();
    return (await this.db.selectFrom("settings").select("value").where("key", "=", key).executeTakeFirstOrThrow()).value;
  }

  // ---- operations ----

  async insertOperation(op: OperationRow): Promise<void> {
    await this.db.insertInto("operations").values(op).execute();
  }

  async finishOperation(id: string, status: "done" | "failed" | "rolled_back", at: number, result: unknown, error: string | null): Promise<void> {
    await this.db.updateTable("operations").set({ status, finished_at: at, result: result === undefined ? null : JSON.stringify(result), error })
      .where("id", "=", id).where("status", "=", "pending").execute();
  }

  /** Takes a pending operation over from `from` (a replica that is gone, or null): true for exactly one caller. */
  async claimOperation(id: string, from: string | null, to: string): Promise<boolean> {
    let q = this.db.updateTable("operations").set({ owner: to }).where("id", "=", id).where("status", "=", "pending");
    q = from === null ? q.where("owner", "is", null) : q.where("owner", "=", from);
    return Number((await q.executeTakeFirst()).numUpdatedRows) === 1;
  }

  async getOperation(id: string): Promise<OperationRow | undefined> {
    return this.db.selectFrom("operations").selectAll().where("id", "=", id).executeTakeFirst();
  }

  async pendingOperations(): Promise<OperationRow[]> {
    return this.db.selectFrom("operations").selectAll().where("status", "=", "pending").orderBy("created_at").execute();
  }

  /** Finished operations older than `before` are history: at most `keep` days of them stay. */
  async pruneOperations(before: number): Promise<void> {
    await this.db.deleteFrom("operations").where("status", "!=", "pending").where("finished_at", "<", before).execute();
  }

  // ---- stored snapshots (the store's catalog) ----

  async insertStoredSnapshot(row: StoredSnapshotRow): Promise<void> {
    await this.db.insertInto("stored_snapshots").values(row).execute();
  }

  async getStoredSnapshot(id: string): Promise<StoredSnapshotRow | undefined> {
    return this.db.selectFrom("stored_snapshots").selectAll().where("id", "=", id).executeTakeFirst();
  }

  async completeStoredSnapshot(id: string, bytes: number): Promise<void> {
    await this.db.updateTable("stored_snapshots").set({ state: "complete", bytes }).where("id", "=", id).execute();
  }

  /** Nothing needs it any more: the garbage collector deletes its objects after the grace period. */
  async releaseStoredSnapshot(id: string, at: number): Promise<void> {
    await this.db.updateTable("stored_snapshots").set({ state: "released", released_at: at }).where("id", "=", id).where("state", "!=", "released").execute();
  }

  async releasedStoredSnapshots(before: number): Promise<StoredSnapshotRow[]> {
    return this.db.selectFrom("stored_snapshots").selectAll().where("state", "=", "released").where("released_at", "<=", before).execute();
  }

  async deleteStoredSnapshotRow(id: string): Promise<void> {
    await this.db.deleteFrom("stored_snapshots").where("id", "=", id).where("state", "=", "released").execute();
  }

  /** Ids of every catalogued snapshot (any state): what the store may hold for this deployment. */
  async storedSnapshotIds(): Promise<Set<string>> {
    return new Set((await this.db.selectFrom("stored_snapshots").select("id").execute()).map((r) => r.id));
  }

  /** Stored snapshots something still needs (pending or complete): their template pins stay. */
  /** Every live stored snapshot's pin on its template version (hosts follow these). */
  async templatePins(): Promise<host.TemplatePin[]> {
    const rows = await this.db.selectFrom("stored_snapshots").select(["id", "template", "template_version"]).where("state", "!=", "released").execute();
    return rows.map((r) => (r.template && r.template_version ? { id: r.id, template: { name: r.template, version: r.template_version } } : r.id));
  }

  async liveStoredSnapshotIds(): Promise<Set<string>> {
    return new Set((await this.db.selectFrom("stored_snapshots").select("id").where("state", "!=", "released").execute()).map((r) => r.id));
  }

  // ---- replicas and leases ----

  async renewReplica(id: string, at: number, until: number): Promise<void> {
    await this.db.insertInto("replicas").values({ id, started_at: at, heartbeat_at: at, lease_until: until })
      .onConflict((oc) => oc.column("id").doUpdateSet({ heartbeat_at: at, lease_until: until })).execute();
  }

  /** Ids of replicas whose lease runs at `now`. */
  async liveReplicas(now: number): Promise<Set<string>> {
    return new Set((await this.db.selectFrom("replicas").select("id").where("lease_until", ">", now).execute()).map((r) => r.id));
  }

  /** A clean stop: its lease and its work leases end now, so another replica takes over at once. */
  async retireReplica(id: string): Promise<void> {
    await this.db.updateTable("replicas").set({ lease_until: 0 }).where("id", "=", id).execute();
    await this.db.updateTable("leases").set({ until: 0 }).where("holder", "=", id).execute();
  }

  /** Takes (or keeps) the lease on a kind of work: true if `holder` holds it until `until`. */
  async claimLease(name: string, holder: string, now: number, until: number): Promise<boolean> {
    await this.db.insertInto("leases").values({ name, holder, until: 0 }).onConflict((oc) => oc.column("name").doNothing()).execute();
    const r = await this.db.updateTable("leases").set({ holder, until }).where("name", "=", name)
      .where((eb) => eb.or([eb("holder", "=", holder), eb("until", "<=", now)])).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  // ---- template versions in the shared store ----

  /** Claims the upload of a template version: true for the one caller that gets to do it. */
  async claimTemplateVersion(row: TemplateVersionRow): Promise<boolean> {
    const r = await this.db.insertInto("template_versions").values(row).onConflict((oc) => oc.columns(["name", "version"]).doNothing()).executeTakeFirst();
    return Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
  }

  async completeTemplateVersion(name: string, version: string, bytes: number): Promise<void> {
    await this.db.updateTable("template_versions").set({ state: "complete", bytes }).where("name", "=", name).where("version", "=", version).execute();
  }

  /** Gives up a claim whose upload failed (or a copy that is gone), so it is made again. */
  async dropTemplateVersion(name: string, version: string, state = "pending"): Promise<void> {
    await this.db.deleteFrom("template_versions").where("name", "=", name).where("version", "=", version).where("state", "=", state).execute();
  }

  /** `name@version` of every template version a sandboxes row that is not destroyed was made from (it may still go to the store and wake elsewhere). */
  async sandboxTemplateVersions(): Promise<Set<string>> {
    const rows = await this.db.selectFrom("sandboxes").select(["template", "template_version"]).distinct().where("state", "!=", "destroyed").execute();
    return new Set(rows.map((r) => `${r.template}@${r.template_version}`));
  }

  async templateVersions(): Promise<TemplateVersionRow[]> {
    return this.db.selectFrom("template_versions").selectAll().orderBy("created_at").execute();
  }

  // ---- hosts ----

  async hostRows(): Promise<HostRow[]> {
    return this.db.selectFrom("hosts").selectAll().where("state", "!=", "removed").orderBy("registered_at").orderBy("id").execute();
  }

  async getHost(id: string): Promise<HostRow | undefined> {
    return this.db.selectFrom("hosts").selectAll().where("id", "=", id).executeTakeFirst();
  }

  /** A host given by configuration: recorded (no lease), its address kept current. */
  async upsertConfigHost(id: string, address: string, at: number): Promise<void> {
    await this.db.insertInto("hosts").values({ id, address, managed: "config", state: "up", kind: null, capacity: null, registered_at: at, heartbeat_at: null, lease_until: null, lost_at: null })
      .onConflict((oc) => oc.column("id").doUpdateSet({ address, managed: "config", state: "up", lease_until: null, lost_at: null })).execute();
  }

  /**
   * A heartbeat: the host's row created or renewed (a removed host stays removed unless it starts anew). Returns
   * the row as it was before, so the caller can tell a host coming back from one that never left.
   */
  async heartbeat(hb: { id: string; address: string; kind: string; capacity: string; starting: boolean }, at: number, leaseUntil: number): Promise<{ before: HostRow | undefined; after: HostRow }> {
    return this.transaction(async (s) => {
      const before = await s.getHost(hb.id);
      if (!before) {
        await s.db.insertInto("hosts").values({ id: hb.id, address: hb.address, managed: "lease", state: "up", kind: hb.kind, capacity: hb.capacity, registered_at: at, heartbeat_at: at, lease_until: leaseUntil, lost_at: null })
          .onConflict((oc) => oc.column("id").doNothing()).execute();
      } else if (before.state !== "removed" || hb.starting) {
        // A host agent that starts anew takes sandboxes again: after a drain for its stop, or
        // after it was removed (a removed one that merely keeps beating stays out).
        await s.db.updateTable("hosts").set({
          address: hb.address, managed: "lease", kind: hb.kind, capacity: hb.capacity, heartbeat_at: at, lease_until: leaseUntil,
          ...(hb.starting && before.state !== "up" ? { state: "up", lost_at: null } : {}),
        }).where("id", "=", hb.id).execute();
      }
      return { before, after: (await s.getHost(hb.id))! };
    });
  }

  /** Claims the declaration of a host's loss: true for exactly one caller, once its lease ended before `deadline`. */
  async claimHostLost(id: string, deadline: number, at: number): Promise<boolean> {
    const r = await this.db.updateTable("hosts").set({ lost_at: at }).where("id", "=", id).where("managed", "=", "lease")
      .where("lost_at", "is", null).where("lease_until", "<", deadline).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Heard from again: its next loss is a new one. True for the one caller that cleared it. */
  async clearHostLost(id: string): Promise<boolean> {
    const r = await this.db.updateTable("hosts").set({ lost_at: null }).where("id", "=", id).where("lost_at", "is not", null).executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  async setHostState(id: string, state: "up" | "draining" | "removed"): Promise<void> {
    await this.db.updateTable("hosts").set({ state }).where("id", "=", id).execute();
  }

  /** Sandboxes on a host that hold something there (a VM, a warm snapshot or a disk): not destroyed, lost, errored or cold. */
  async sandboxesHeldOn(hostId: string): Promise<SandboxRow[]> {
    return this.db.selectFrom("sandboxes").selectAll().where("host_id", "=", hostId).where("state", "not in", ["destroyed", "lost", "error"])
      .where((eb) => eb.or([eb("state", "!=", "hibernated"), eb("hibernate_mode", "is", null), eb("hibernate_mode", "!=", "cold")])).execute();
  }

  // ---- keys ----

  async createKey(owner: string, admin: boolean, secret = newKeySecret()): Promise<{ id: string; secret: string }> {
    const id = `key_${randomBytes(8).toString("hex")}`;
    await this.db.insertInto("api_keys").values({ id, owner, hash: hashKey(secret), admin: admin ? 1 : 0, created_at: Date.now(), revoked_at: null }).execute();
    return { id, secret };
  }

  /**
   * Creates the first admin key if the deployment has no key and none was ever made this
   * way; returns its secret to the one process that made it (replicas may start at once:
   * the claim is a settings row, so only one of them wins).
   */
  async firstAdminKey(): Promise<string | undefined> {
    if ((await this.countKeys()) > 0) return undefined;
    const secret = newKeySecret();
    return this.transaction(async (s) => {
      const claim = await s.db.insertInto("settings").values({ key: "first_admin_key", value: hashKey(secret) }).onConflict((oc) => oc.column("key").doNothing()).executeTakeFirst();
      if (Number(claim.numInsertedOrUpdatedRows ?? 0) !== 1) return undefined;
      await s.createKey("admin", true, secret);
      return secret;
    });
  }

  async findKey(secret: string): Promise<Principal | undefined> {
    const row = await this.db.selectFrom("api_keys").selectAll().where("hash", "=", hashKey(secret)).where("revoked_at", "is", null).executeTakeFirst();
    return row ? { keyId: row.id, owner: row.owner, admin: row.admin === 1 } : undefined;
  }

  async hasKeyHash(secret: string): Promise<boolean> {
    return (await this.db.selectFrom("api_keys").select("id").where("hash", "=", hashKey(secret)).executeTakeFirst()) !== undefined;
  }

  async countKeys(): Promise<number> {
    const r = await this.db.selectFrom("api_keys").select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async listKeys(): Promise<api.ApiKey[]> {
    const rows = await this.db.selectFrom("api_keys").selectAll().orderBy("created_at").execute();
    return rows.map((r) => ({ id: r.id, owner: r.owner, admin: r.admin === 1, created_at: iso(r.created_at)!, revoked_at: iso(r.revoked_at) }));
  }

  async revokeKey(id: string): Promise<api.ApiKey | undefined> {
    await this.db.updateTable("api_keys").set({ revoked_at: Date.now() }).where("id", "=", id).where("revoked_at", "is", null).execute();
    return (await this.listKeys()).find((k) => k.id === id);
  }

  // ---- sandboxes ----

  /**
   * Inserts a sandbox row; with `maxLive`, only while its owner has fewer live sandboxes
   * (counted under a lock on the owner in the same transaction, so concurrent creates and
   * forks through any replica cannot overshoot), else `quota_exceeded`.
   */
  async insertSandbox(row: SandboxRow, maxLive?: number): Promise<void> {
    await this.transaction(async (s) => {
      if (maxLive !== undefined) {
        await s.lockOwner(row.owner);
        if ((await s.countLive(row.owner)) >= maxLive) throw new DenError("quota_exceeded", `owner ${row.owner} may have at most ${maxLive} sandboxes; destroy some first`);
      }
      await s.db.insertInto("sandboxes").values(row).execute();
      const meta = Object.entries(JSON.parse(row.metadata) as Record<string, string>);
      if (meta.length) await s.db.insertInto("sandbox_metadata").values(meta.map(([key, value]) => ({ sandbox_id: row.id, key, value }))).execute();
    });
  }

  async getSandbox(id: string): Promise<SandboxRow | undefined> {
    return this.db.selectFrom("sandboxes").selectAll().where("id", "=", id).executeTakeFirst();
  }

  async updateSandbox(id: string, patch: Partial<SandboxRow>): Promise<SandboxRow | undefined> {
    await this.db.updateTable("sandboxes").set(patch).where("id", "=", id).execute();
    return this.getSandbox(id);
  }

  /**
   * Compare-and-set: applies `patch` (and bumps the generation) only if the row still has
   * the expected generation and operation; returns the new row, or undefined if it did not.
   */
  async casSandbox(id: string, expect: { generation: number; opId: string | null }, patch: Partial<SandboxRow>): Promise<SandboxRow | undefined> {
    let q = this.db.updateTable("sandboxes").set({ ...patch, generation: expect.generation + 1 }).where("id", "=", id).where("generation", "=", expect.generation);
    q = expect.opId === null ? q.where("op_id", "is", null) : q.where("op_id", "=", expect.opId);
    const r = await q.executeTakeFirst();
    return Number(r.numUpdatedRows) === 1 ? this.getSandbox(id) : undefined;
  }

  /** Sandboxes that are not destroyed (what the host must hold or be able to restore). */
  /** Gives rows recorded before sandboxes had a host (host_id null) to `host`. */
  async assignUnplacedSandboxes(host: string): Promise<void> {
    await this.db.updateTable("sandboxes").set({ host_id: host }).where("host_id", "is", null).where("state", "!=", "destroyed").execute();
  }

  /** Live sandboxes per host (null: not yet assigned). */
  async countLiveByHost(): Promise<Map<string | null, number>> {
    const rows = await this.db.selectFrom("sandboxes").select(["host_id", (eb) => eb.fn.countAll<number>().as("n")])
      .where("state", "not in", ["destroyed", "error"]).groupBy("host_id").execute();
    return new Map(rows.map((r) => [r.host_id, Number(r.n)]));
  }

  async liveSandboxes(): Promise<SandboxRow[]> {
    return this.db.selectFrom("sandboxes").selectAll().where("state", "!=", "destroyed").execute();
  }

  /** The ids of every sandbox not destroyed (nor failed), of all owners. */
  async liveSandboxIds(): Promise<string[]> {
    return (await this.db.selectFrom("sandboxes").select("id").where("state", "not in", ["destroyed", "error"]).execute()).map((r) => r.id);
  }

  async countLive(owner: string): Promise<number> {
    const r = await this.db.selectFrom("sandboxes").select((eb) => eb.fn.countAll<number>().as("n"))
      .where("owner", "=", owner).where("state", "not in", ["destroyed", "error"]).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  async listSandboxes(owner: string, q: { state?: string; metadata?: Record<string, string>; limit: number; cursor?: string }): Promise<SandboxRow[]> {
    let query = this.db.selectFrom("sandboxes").selectAll().where("owner", "=", owner);
    if (q.state) query = query.where("state", "=", q.state);
    else query = query.where("state", "!=", "destroyed");
    for (const [k, v] of Object.entries(q.metadata ?? {})) {
      query = query.where("id", "in", (eb) => eb.selectFrom("sandbox_metadata").select("sandbox_id").where("key", "=", k).where("value", "=", v));
    }
    if (q.cursor) query = query.where("id", ">", q.cursor);
    return query.orderBy("id").limit(q.limit).execute();
  }

  /**
   * A page of an owner's sandboxes newest first (E2B's list; `order: "asc"` oldest first): in
   * `states`, with every metadata pair, of a template, created at or after `since`, after
   * `cursor` (the last row of the previous page: its created_at and id).
   */
  async listSandboxesNewest(owner: string, q: { states: string[]; metadata: Record<string, string>; template?: string; since?: number; limit: number; cursor?: { createdAt: number; id: string }; order?: "asc" | "desc" }): Promise<SandboxRow[]> {
    let query = this.db.selectFrom("sandboxes").selectAll().where("owner", "=", owner).where("state", "in", q.states);
    for (const [k, v] of Object.entries(q.metadata)) {
      query = query.where("id", "in", (eb) => eb.selectFrom("sandbox_metadata").select("sandbox_id").where("key", "=", k).where("value", "=", v));
    }
    if (q.template !== undefined) query = query.where("template", "=", q.template);
    if (q.since !== undefined) query = query.where("created_at", ">=", q.since);
    const c = q.cursor;
    const asc = q.order === "asc";
    const past = asc ? ">" : "<";
    if (c) query = query.where((eb) => eb.or([eb("created_at", past, c.createdAt), eb.and([eb("created_at", "=", c.createdAt), eb("id", past, c.id)])]));
    return query.orderBy("created_at", asc ? "asc" : "desc").orderBy("id", asc ? "asc" : "desc").limit(q.limit).execute();
  }

  /** Bytes in the snapshot store that something still needs (cold sandboxes', checkpoints'), of one owner or of all. */
  /**
   * Serializes quota checks of one owner until the transaction ends (SQLite runs one write
   * transaction at a time already; Postgres takes an advisory lock on the owner).
   */
  async lockOwner(owner: string): Promise<void> {
    if (this.db.getExecutor().adapter instanceof PostgresAdapter) await sql`SELECT pg_advisory_xact_lock(hashtext(${`owner:${owner}`}))`.execute(this.db);
  }

  /** In a transaction: refuses `adding` more stored bytes past the owner's quota (what an upload actually wrote). */
  async checkStoredQuota(owner: string, adding: number, max: number): Promise<void> {
    await this.lockOwner(owner);
    const used = await this.storedBytes(owner);
    if (used + adding > max) {
      throw new DenError("quota_exceeded", `owner ${owner} keeps ${used} bytes in the snapshot store; ${adding} more would pass the quota of ${max}: delete checkpoints or destroy hibernated sandboxes first`, { stored_bytes: used, adding_bytes: adding, quota_bytes: max });
    }
  }

  async storedBytes(owner?: string): Promise<number> {
    // A volume's copy (a parked volume) counts against the owner's volume quota, not this one.
    let q = this.db.selectFrom("stored_snapshots").select((eb) => eb.fn.sum<number>("bytes").as("n")).where("state", "!=", "released").where("kind", "!=", "volume");
    if (owner !== undefined) q = q.where("owner", "=", owner);
    return Number((await q.executeTakeFirstOrThrow()).n ?? 0);
  }

  /** How many sandboxes are in each state (destroyed ones included). */
  async countByState(): Promise<Record<string, number>> {
    const rows = await this.db.selectFrom("sandboxes").select(["state", (eb) => eb.fn.countAll<number>().as("n")]).groupBy("state").execute();
    return Object.fromEntries(rows.map((r) => [r.state, Number(r.n)]));
  }

  // ---- usage ----

  async insertSegment(s: UsageSegmentsTable): Promise<void> {
    await this.db.insertInto("usage_segments").values(s).execute();
  }

  /** Closed segments that overlap [from, to), of one owner or all. */
  async segments(from: number, to: number, owner?: string): Promise<UsageSegmentsTable[]> {
    let q = this.db.selectFrom("usage_segments").selectAll().where("end_ms", ">", from).where("start_ms", "<", to);
    if (owner !== undefined) q = q.where("owner", "=", owner);
    return q.execute();
  }

  async allCheckpoints(owner?: string): Promise<CheckpointRow[]> {
    let q = this.db.selectFrom("checkpoints").selectAll();
    if (owner !== undefined) q = q.where("owner", "=", owner);
    return q.execute();
  }

  async sandboxesByIds(ids: string[]): Promise<SandboxRow[]> {
    const out: SandboxRow[] = [];
    for (let i = 0; i < ids.length; i += 500) out.push(...(await this.db.selectFrom("sandboxes").selectAll().where("id", "in", ids.slice(i, i + 500)).execute()));
    return out;
  }

  // ---- templates ----

  async templateRows(): Promise<Map<string, TemplateRow>> {
    const rows = await this.db.selectFrom("templates").selectAll().execute();
    return new Map(rows.map((r) => [r.name, r]));
  }

  async templateRow(name: string): Promise<TemplateRow | undefined> {
    return this.db.selectFrom("templates").selectAll().where("name", "=", name).executeTakeFirst();
  }

  /** Claims a name for an owner (or takes back their deleted one). */
  async claimTemplate(name: string, owner: string, at: number): Promise<void> {
    await this.db.insertInto("templates").values({ name, owner, created_at: at, deleted_at: null, run: null })
      .onConflict((oc) => oc.column("name").doUpdateSet({ deleted_at: null })).execute();
  }

  /** Records how a template's sandboxes run (its latest build's source and defaults). */
  async setTemplateRun(name: string, run: string | null): Promise<void> {
    await this.db.updateTable("templates").set({ run }).where("name", "=", name).execute();
  }

  async markTemplateDeleted(name: string, at: number): Promise<void> {
    await this.db.updateTable("templates").set({ deleted_at: at }).where("name", "=", name).execute();
  }

  async dropTemplate(name: string): Promise<void> {
    await this.db.deleteFrom("templates").where("name", "=", name).execute();
  }

  async countTemplates(owner: string): Promise<number> {
    const r = await this.db.selectFrom("templates").select((eb) => eb.fn.countAll<number>().as("n")).where("owner", "=", owner).where("deleted_at", "is", null).executeTakeFirstOrThrow();
    return Number(r.n);
  }

  // ---- checkpoints ----

  async insertCheckpoint(row: CheckpointRow): Promise<void> {
    await this.db.insertInto("checkpoints").values(row).execute();
  }

  async getCheckpoint(id: string): Promise<CheckpointRow | undefined> {
    return this.db.selectFrom("checkpoints").selectAll().where("id", "=", id).executeTakeFirst();
  }

  async listCheckpoints(owner: string, sandboxId?: string): Promise<CheckpointRow[]> {
    let q = this.db.selectFrom("checkpoints").selectAll().where("owner", "=", owner);
    if (sandboxId) q = q.where("sandbox_id", "=", sandboxId);
    return q.orderBy("created_at").execute();
  }

  async deleteCheckpoint(id: string): Promise<void> {
    await this.db.deleteFrom("checkpoints").where("id", "=", id).execute();
  }

  // ---- events ----

  /**
   * Appends an event. Exec and transfer-progress events are frequent, so only the newest
   * `cap` of each kind are kept per sandbox; lifecycle events are few and all kept.
   */
  async addEvent(sandboxId: string, type: string, reason: string | null, data: Record<string, unknown>, cap: number): Promise<void> {
    // One transaction: the insert and its prunes are one commit (one fsync of the WAL, not
    // three, each blocking the event loop under better-sqlite3).
    await this.transaction(async (s) => {
      await s.db.insertInto("events").values({ sandbox_id: sandboxId, at: Date.now(), type, reason, data: JSON.stringify(data) }).execute();
      // The chatty families keep their newest `cap` each; everything together keeps
      // four times `cap` (the lifecycle's history outlives a flood of execs).
      const family = ["exec.", "transfer.", "guest.", "network."].find((f) => type.startsWith(f));
      if (family) await s.pruneEvents(sandboxId, cap, family);
      await s.pruneEvents(sandboxId, cap * 4);
    });
  }

  /** Deletes a sandbox's events (of `family`, or all) older than its newest `keep`. */
  private async pruneEvents(sandboxId: string, keep: number, family?: string): Promise<void> {
    let q = this.db.selectFrom("events").select("seq").where("sandbox_id", "=", sandboxId);
    if (family) q = q.where("type", "like", `${family}%`);
    const old = await q.orderBy("seq", "desc").offset(keep).limit(1).executeTakeFirst();
    if (!old) return;
    let d = this.db.deleteFrom("events").where("sandbox_id", "=", sandboxId).where("seq", "<=", old.seq);
    if (family) d = d.where("type", "like", `${family}%`);
    await d.execute();
  }

  async events(sandboxId: string, after: number, limit = 500): Promise<api.SandboxEvent[]> {
    const rows = await this.db.selectFrom("events").selectAll().where("sandbox_id", "=", sandboxId).where("seq", ">", after).orderBy("seq").limit(limit).execute();
    return rows.map((r) => ({ seq: r.seq, sandbox_id: r.sandbox_id, at: iso(r.at)!, type: r.type, reason: (r.reason as api.TransitionReason | null) ?? null, data: JSON.parse(r.data) as Record<string, unknown> }));
  }
}
