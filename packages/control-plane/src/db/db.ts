import SQLite from "better-sqlite3";
import pg from "pg";
import { Kysely, Migrator, PostgresDialect, SqliteDialect, type Migration, type MigrationProvider } from "kysely";
import { chmodSync, existsSync } from "node:fs";
import { privateDir } from "@den/protocol";
import { join } from "node:path";
import { migrations } from "./migrations.js";
import { explainConnectError, postgresConnection, redactDatabaseUrl } from "./postgres-tls.js";
import type { Database, DatabaseConfig, Dialect } from "./schema.js";

// The tables are in schema.ts (the migrations read them too); they are this module's to export.
export * from "./schema.js";
export { postgresConnection, redactDatabaseUrl } from "./postgres-tls.js";

/** DEN_DATABASE_URL: unset is SQLite in the data dir; postgres:// (or postgresql://) is Postgres; anything else is refused. */
export function databaseConfig(url: string | undefined): DatabaseConfig {
  if (url === undefined || url === "") return { kind: "sqlite" };
  if (/^postgres(ql)?:\/\//.test(url)) {
    // Its TLS parameters (sslmode, sslrootcert, ...) and their files are checked now, at start.
    postgresConnection(url);
    return { kind: "postgres", url };
  }
  throw new Error(`DEN_DATABASE_URL must be a postgres:// URL (unset it for the embedded SQLite database in the data dir); got ${redactDatabaseUrl(url)}`);
}

class StaticProvider implements MigrationProvider {
  constructor(private readonly dialect: Dialect) {}
  async getMigrations(): Promise<Record<string, Migration>> {
    return migrations(this.dialect);
  }
}

/** Postgres' int8 (counts, epoch ms, bytes) and numeric (sums) as JS numbers, as SQLite gives them: every such value here is far below 2^53. */
const PG_TYPES = { getTypeParser: ((oid: number, format?: string) => (oid === 20 || oid === 1700 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as "text"))) as typeof pg.types.getTypeParser };

/** Prepared statements kept per database, by SQL text (the least recently used go first). */
const KEPT_STATEMENTS = 500;

/**
 * better-sqlite3 as kysely's SQLite dialect sees it, with each statement prepared once:
 * kysely prepares every query anew, and a prepare costs more than most of Den's queries
 * take to run. (Den never streams a query, which would hold a kept statement busy.)
 */
function keptStatements(db: SQLite.Database): { close(): void; prepare(sql: string): SQLite.Statement } {
  const kept = new Map<string, SQLite.Statement>();
  return {
    close: () => db.close(),
    prepare(sql) {
      let st = kept.get(sql);
      if (st) kept.delete(sql);
      else st = db.prepare(sql);
      kept.set(sql, st);
      if (kept.size > KEPT_STATEMENTS) kept.delete(kept.keys().next().value!);
      return st;
    },
  };
}

/** Opens (and migrates) the control plane's database: SQLite in the data dir, or Postgres. */
export async function openDatabase(dataDir: string, config: DatabaseConfig = { kind: "sqlite" }): Promise<Kysely<Database>> {
  let dialect;
  if (config.kind === "postgres") {
    const { connectionString, ssl } = postgresConnection(config.url);
    const pool = new pg.Pool({ connectionString, ...(ssl !== undefined ? { ssl } : {}), max: 10, types: PG_TYPES, connectionTimeoutMillis: 10_000 });
    // An idle client's error (the server restarted) must not crash the process; the pool drops it.
    pool.on("error", () => {});
    dialect = new PostgresDialect({ pool });
  } else {
    privateDir(dataDir);
    const file = join(dataDir, "den.db");
    const sqlite = new SQLite(file);
    sqlite.pragma("journal_mode = WAL");
    sqlite.pragma("synchronous = FULL");
    sqlite.pragma("foreign_keys = ON");
    // Sandboxes' env vars (users' secrets) are in it: its owner's alone, whatever the umask was.
    for (const f of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
    dialect = new SqliteDialect({ database: keptStatements(sqlite) });
  }
  const db = new Kysely<Database>({ dialect });
  try {
    // Replicas starting at once: the migrator holds a lock (an advisory lock on Postgres).
    const { error } = await new Migrator({ db, provider: new StaticProvider(config.kind) }).migrateToLatest();
    if (error) throw error;
  } catch (e) {
    await db.destroy();
    throw config.kind === "postgres" ? explainConnectError(e, config.url) : e;
  }
  return db;
}
