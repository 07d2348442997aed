// needs: memory host, Postgres server binaries (a TLS server of its own: scripts/with-postgres.sh --tls)
/**
 * DEN_DATABASE_URL over TLS against a real Postgres (ssl=on, TCP over TLS only, a certificate
 * for `localhost` alone signed by a throwaway CA): verify-full with that CA starts a control
 * plane that serves; another CA, or a host the certificate does not name (127.0.0.1), is
 * refused with a message that says which; verify-ca and require mean what libpq's docs say.
 * The server is this file's own, whatever DEN_DATABASE_URL the suite's pass set.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { MemoryHostAgent } from "@den/host-agent";
import { openDatabase } from "@den/control-plane";
import { sql } from "kysely";
import { loadConfig, openStore, startServer } from "../src/index.js";
import { ADMIN_KEY, client } from "./helpers.js";

const ROOT = new URL("../../../../", import.meta.url).pathname;
const pgBins = existsSync("/usr/lib/postgresql") && readdirSync("/usr/lib/postgresql").some((v) => existsSync(`/usr/lib/postgresql/${v}/bin/initdb`));

/** startServer must fail: a server that started anyway is closed, so the file still ends. */
async function startFails(config: ReturnType<typeof loadConfig>, host: MemoryHostAgent): Promise<Error> {
  let server;
  try {
    server = await startServer(config, { host });
  } catch (e) {
    return e as Error;
  }
  await server.close();
  assert.fail("the control plane started");
}

/** The URL with its host and sslrootcert swapped, its mode set. */
function variant(url: string, change: { host?: string; rootcert?: string | null; mode?: string }): string {
  const u = new URL(url);
  if (change.host) u.hostname = change.host;
  if (change.rootcert === null) u.searchParams.delete("sslrootcert");
  else if (change.rootcert) u.searchParams.set("sslrootcert", change.rootcert);
  if (change.mode) u.searchParams.set("sslmode", change.mode);
  return u.toString();
}

describe("Postgres over TLS (DEN_DATABASE_URL with sslmode)", { skip: !pgBins && "no Postgres server binaries (scripts/install-deps.sh postgresql)" }, () => {
  let pgProc: ChildProcess;
  let url = "";
  let dir = "";
  let otherCa = "";

  before(async () => {
    // The throwaway server lives as long as this child's stdin is open.
    pgProc = spawn("bash", [join(ROOT, "scripts/with-postgres.sh"), "--tls", "sh", "-c", 'echo "$DEN_DATABASE_URL"; cat >/dev/null'], { stdio: ["pipe", "pipe", "inherit"] });
    const first = await new Promise<string>((resolve, reject) => {
      createInterface({ input: pgProc.stdout! }).once("line", resolve);
      pgProc.once("exit", (code) => reject(new Error(`with-postgres.sh --tls exited (${code}) before its server was up`)));
    });
    url = first.trim();
    assert.match(url, /^postgres:\/\/den@localhost:\d+\/den\?sslmode=verify-full&sslrootcert=/);
    dir = mkdtempSync(join(tmpdir(), "den-pg-tls-"));
    // Another CA, with the same name as the right one: only its key tells them apart.
    otherCa = join(dir, "other-ca.crt");
    execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=den test Postgres CA",
      "-keyout", join(dir, "other-ca.key"), "-out", otherCa], { stdio: "ignore" });
  });

  after(async () => {
    if (pgProc && pgProc.exitCode === null) {
      const exited = new Promise((r) => pgProc.once("exit", r));
      pgProc.stdin!.end();
      await exited;
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test("verify-full with the CA that signed the server's certificate: the control plane starts, serves a request, and its connections are TLS", async () => {
    const data = mkdtempSync(join(dir, "cp-"));
    const config = loadConfig({ port: "0", dataDir: data }, { DEN_API_KEY: ADMIN_KEY, DEN_DATABASE_URL: url, DEN_HOST_TRANSPORT: "memory", DEN_ENVD_PORT: "off" });
    const host = await MemoryHostAgent.open({ store: openStore(config), capacity: config.capacity });
    const server = await startServer(config, { host });
    try {
      const r = await client(server.url)("GET", "/v1/sandboxes");
      assert.equal(r.status, 200);
    } finally {
      await server.close();
      await host.close();
    }
    const db = await openDatabase(data, config.database);
    try {
      const { rows } = await sql<{ ssl: boolean }>`SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`.execute(db);
      assert.deepEqual(rows, [{ ssl: true }]);
    } finally {
      await db.destroy();
    }
  });

  test("verify-full with another CA: the start fails saying the certificate is not signed by the CA DEN_DATABASE_URL trusts", async () => {
    const data = mkdtempSync(join(dir, "cp-"));
    const config = loadConfig({ port: "0", dataDir: data }, { DEN_API_KEY: ADMIN_KEY, DEN_DATABASE_URL: variant(url, { rootcert: otherCa }), DEN_HOST_TRANSPORT: "memory", DEN_ENVD_PORT: "off" });
    const host = await MemoryHostAgent.open({ store: openStore(config), capacity: config.capacity });
    try {
      const e = await startFails(config, host);
      {
        assert.match(e.message, /could not connect to Postgres at postgres:\/\/den@localhost:\d+\/den: the server's certificate is not signed by the CA DEN_DATABASE_URL trusts/);
        assert.match(e.message, /SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT/);
      }
    } finally {
      await host.close();
    }
  });

  test("verify-full to 127.0.0.1, a host the certificate (DNS:localhost) does not name: refused, the host name check said", async () => {
    const data = mkdtempSync(join(dir, "cp-"));
    const config = loadConfig({ port: "0", dataDir: data }, { DEN_API_KEY: ADMIN_KEY, DEN_DATABASE_URL: variant(url, { host: "127.0.0.1" }), DEN_HOST_TRANSPORT: "memory", DEN_ENVD_PORT: "off" });
    const host = await MemoryHostAgent.open({ store: openStore(config), capacity: config.capacity });
    try {
      const e = await startFails(config, host);
      {
        assert.match(e.message, /the server's certificate does not name the host of DEN_DATABASE_URL \(sslmode=verify-full checks it\)/);
        assert.match(e.message, /127\.0\.0\.1/);
        assert.match(e.message, /ERR_TLS_CERT_ALTNAME_INVALID/);
      }
    } finally {
      await host.close();
    }
  });

  test("libpq's meanings: verify-ca checks the CA but not the name; require encrypts without checking (with sslrootcert, as verify-ca); disable is plain text, which this server refuses", async () => {
    const open = (u: string) => openDatabase(mkdtempSync(join(dir, "db-")), { kind: "postgres", url: u }).then((db) => db.destroy());
    await open(variant(url, { host: "127.0.0.1", mode: "verify-ca" }));
    await assert.rejects(open(variant(url, { host: "127.0.0.1", mode: "verify-ca", rootcert: otherCa })), /not signed by the CA DEN_DATABASE_URL trusts/);
    await open(variant(url, { host: "127.0.0.1", mode: "require", rootcert: null }));
    await assert.rejects(open(variant(url, { mode: "require", rootcert: otherCa })), /not signed by the CA DEN_DATABASE_URL trusts/);
    await assert.rejects(open(variant(url, { mode: "disable", rootcert: null })), /no pg_hba\.conf entry .* no encryption/);
  });
});
