import { PostgresAdapter, sql, type Kysely } from "kysely";
import type { Database } from "./schema.js";

/** A repository: one aggregate's SQL, in portable kysely queries, over the database or a transaction. */
export abstract class Repo {
  constructor(readonly db: Kysely<Database>) {}

  /** Runs `fn` in one transaction (the one this repository is in, if it is), on a repository of the same kind bound to it. */
  protected async transaction<T>(fn: (s: this) => Promise<T>): Promise<T> {
    if (this.db.isTransaction) return fn(this);
    const Same = this.constructor as new (db: Kysely<Database>) => this;
    return this.db.transaction().execute((tx) => fn(new Same(tx)));
  }

  /**
   * Serializes quota checks of one owner until the transaction ends (SQLite runs one write
   * transaction at a time already; Postgres takes an advisory lock on the owner).
   */
  async lockOwner(owner: string): Promise<void> {
    if (this.db.getExecutor().adapter instanceof PostgresAdapter) await sql`SELECT pg_advisory_xact_lock(hashtext(${`owner:${owner}`}))`.execute(this.db);
  }
}
