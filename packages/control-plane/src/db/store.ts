import type { Kysely } from "kysely";
import type { Database } from "./schema.js";
import { CheckpointsRepo } from "./checkpoints.js";
import { EventsRepo } from "./events.js";
import { HostsRepo } from "./hosts.js";
import { JoinTokensRepo } from "./join-tokens.js";
import { KeysRepo } from "./keys.js";
import { MachineCertsRepo } from "./machine-certs.js";
import { OperationsRepo } from "./operations.js";
import { ReplicasRepo } from "./replicas.js";
import { SandboxesRepo } from "./sandboxes.js";
import { StoredSnapshotsRepo } from "./stored-snapshots.js";
import { TemplatesRepo } from "./templates.js";
import { UsageRepo } from "./usage.js";

// The rows are the repositories' common language; importers of the store get them here too.
export * from "./rows.js";

/**
 * The control plane's database: one repository per aggregate, all on the same connection
 * (or transaction: `transaction` hands `fn` a Store whose repositories all write in it).
 * Volumes, webhooks and template builds have repositories of the same shape beside these
 * (`volume-store.ts`, `webhook-store.ts`, `build-store.ts`).
 */
export class Store {
  readonly sandboxes: SandboxesRepo;
  readonly operations: OperationsRepo;
  readonly snapshots: StoredSnapshotsRepo;
  readonly hosts: HostsRepo;
  readonly replicas: ReplicasRepo;
  readonly keys: KeysRepo;
  readonly templates: TemplatesRepo;
  readonly checkpoints: CheckpointsRepo;
  readonly events: EventsRepo;
  readonly usage: UsageRepo;
  readonly joinTokens: JoinTokensRepo;
  readonly machineCerts: MachineCertsRepo;

  constructor(readonly db: Kysely<Database>) {
    this.sandboxes = new SandboxesRepo(db);
    this.operations = new OperationsRepo(db);
    this.snapshots = new StoredSnapshotsRepo(db);
    this.hosts = new HostsRepo(db);
    this.replicas = new ReplicasRepo(db);
    this.keys = new KeysRepo(db);
    this.templates = new TemplatesRepo(db);
    this.checkpoints = new CheckpointsRepo(db);
    this.events = new EventsRepo(db);
    this.usage = new UsageRepo(db);
    this.joinTokens = new JoinTokensRepo(db);
    this.machineCerts = new MachineCertsRepo(db);
  }

  /** Runs `fn` in one transaction: everything it writes through its Store commits together, or nothing does. */
  async transaction<T>(fn: (s: Store) => Promise<T>): Promise<T> {
    if (this.db.isTransaction) return fn(this);
    return this.db.transaction().execute((tx) => fn(new Store(tx)));
  }

  /** A deployment-wide setting, created with `make()` by whoever asks first. */
  async setting(key: string, make: () => string): Promise<string> {
    await this.db.insertInto("settings").values({ key, value: make() }).onConflict((oc) => oc.column("key").doNothing()).execute();
    return (await this.db.selectFrom("settings").select("value").where("key", "=", key).executeTakeFirstOrThrow()).value;
  }
}
