// needs: nothing
/**
 * What `den serve` and `den host run` refuse at start, before they open anything: a secret
 * left at a placeholder of deploy/*.env, the retired DEN_HOST_SECRET still set, and
 * DEN_DATABASE_URL's TLS parameters that cannot work (a root certificate that is missing or
 * not a certificate, a mode pg cannot honour).
 */
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { postgresConnection } from "@den/control-plane";
import { isPlaceholderSecret, loadConfig } from "../src/index.js";
import { CLI, hostInstance, hostTlsDir, testCa } from "./helpers.js";

const ROOT = new URL("../../../../", import.meta.url).pathname;
const REAL = "9f2c4e1a7b3d5f608192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";

/** Runs the den CLI until it prints `until` (then stops it) or exits; its output and exit code. */
function den(args: string[], env: Record<string, string>, until?: RegExp): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH!, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    const seen = (b: Buffer) => {
      out += b.toString();
      if (until?.test(out)) c.kill("SIGTERM");
    };
    c.stdout.on("data", seen);
    c.stderr.on("data", seen);
    c.on("exit", (code) => resolve({ code, out }));
  });
}

describe("placeholder secrets", () => {
  test("every secret value deploy/*.env ship is a placeholder, as are change-me / replace-me patterns; real values are not", () => {
    const shipped = readdirSync(join(ROOT, "deploy")).filter((f) => f.endsWith(".env"))
      .flatMap((f) => readFileSync(join(ROOT, "deploy", f), "utf8").split("\n"))
      .map((l) => /^(DEN_API_KEY|AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY)=(.*)$/.exec(l)?.[2]).filter((v): v is string => !!v);
    assert.ok(shipped.length >= 2, `deploy/*.env ship secrets: ${shipped.join(", ")}`);
    // The retired shared secret is in none of them (it would stop the start).
    for (const f of readdirSync(join(ROOT, "deploy"))) assert.doesNotMatch(readFileSync(join(ROOT, "deploy", f), "utf8"), /^\s*(export\s+)?DEN_HOST_SECRET=/m, f);
    for (const v of shipped) assert.ok(isPlaceholderSecret(v), `${v} is refused`);
    for (const v of ["changeme", "please-CHANGE_ME-now", "replace-me", "REPLACEME", "minioadmin"]) assert.ok(isPlaceholderSecret(v), v);
    for (const v of [REAL, "0123456789abcdef0123", "den-prod-key-7d1e"]) assert.equal(isPlaceholderSecret(v), false, v);
  });

  test("loadConfig refuses each secret variable at a placeholder, naming it and how to make a real one; the database password too", () => {
    const base = { DEN_HOST_TRANSPORT: "memory" };
    for (const name of ["DEN_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]) {
      assert.throws(() => loadConfig({ dataDir: "/tmp" }, { ...base, [name]: "CHANGE-ME" }), new RegExp(`^Error: ${name} is a placeholder \\("CHANGE-ME"\\), not a secret: `));
    }
    assert.throws(() => loadConfig({ dataDir: "/tmp" }, { ...base, DEN_API_KEY: "change-me-please" }), /openssl rand -hex 32/);
    assert.throws(() => loadConfig({ dataDir: "/tmp" }, { ...base, DEN_DATABASE_URL: "postgres://den:CHANGE-ME@10.0.0.2:5432/den" }), /DEN_DATABASE_URL's password is a placeholder.*ALTER ROLE den PASSWORD/);
    const ok = loadConfig({ dataDir: "/tmp" }, { ...base, DEN_API_KEY: REAL, DEN_DATABASE_URL: `postgres://den:${REAL}@10.0.0.2:5432/den` });
    assert.equal(ok.apiKey, REAL);
  });

  test("den serve refuses a placeholder with one line naming the variable; a real value starts", async () => {
    const dir = mkdtempSync(join(tmpdir(), "den-start-checks-"));
    try {
      const env = { DEN_DATA_DIR: dir, DEN_HOST_TRANSPORT: "memory", DEN_ENVD_PORT: "off", DEN_PORT: "0" };
      const bad = await den(["serve"], { ...env, DEN_API_KEY: "CHANGE-ME" });
      assert.equal(bad.code, 1, bad.out);
      assert.equal(bad.out.trim(), 'den: DEN_API_KEY is a placeholder ("CHANGE-ME"), not a secret: make one with `openssl rand -hex 32` (or leave DEN_API_KEY unset: the first start prints a key)');
      const good = await den(["serve"], { ...env, DEN_API_KEY: REAL }, /den: listening on http/);
      assert.match(good.out, /den: listening on http/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the retired DEN_HOST_SECRET, and machines without a certificate", () => {
  const MIGRATION = /^den: DEN_HOST_SECRET is retired: machines now link over mutual TLS; remove it and give this machine a certificate \(see docs\/many-machines\.md#moving-a-running-fleet-to-certificates\)$/;

  test("loadConfig: remote hosts with DEN_HOST_SECRET are refused, naming the migration; remote hosts need https:// and an identity or a CA", async () => {
    const ca = { DEN_CA_DIR: (await testCa()).dir };
    assert.throws(() => loadConfig({ hostAgent: "registered", dataDir: "/tmp" }, { ...ca, DEN_HOST_SECRET: REAL }), /DEN_HOST_SECRET is retired.*many-machines\.md#moving-a-running-fleet-to-certificates/);
    assert.throws(() => loadConfig({ hostAgent: "https://10.0.0.1:8788", dataDir: "/tmp" }, {}), /mutual TLS: give this replica its identity \(DEN_TLS_DIR, --tls-dir\), .* \(DEN_CA_DIR\), or a token to join with/);
    assert.throws(() => loadConfig({ hostAgent: "http://10.0.0.1:8788", dataDir: "/tmp" }, ca), /its URL is https:\/\/\.\.\., got http:\/\/10\.0\.0\.1:8788/);
    const ok = loadConfig({ hostAgent: "https://10.0.0.1:8788,registered", dataDir: "/tmp" }, ca);
    assert.deepEqual(ok.hostAgent, { kind: "remote", urls: ["https://10.0.0.1:8788"], registered: true });
    assert.equal(ok.fleet?.port, 8789, "the hosts' listener, on its default port");
  });

  test("den serve (remote hosts) and den host run refuse a DEN_HOST_SECRET still set, with one line pointing to the migration", async () => {
    const dir = mkdtempSync(join(tmpdir(), "den-start-checks-"));
    try {
      const serve = await den(["serve", "--host-agent", "registered"], { DEN_DATA_DIR: dir, DEN_CA_DIR: (await testCa()).dir, DEN_ENVD_PORT: "off", DEN_PORT: "0", DEN_HOST_SECRET: REAL });
      assert.equal(serve.code, 1, serve.out);
      assert.match(serve.out.trim(), MIGRATION);
      const host = await den(["host", "run", "--memory", "--port", "0"], { DEN_DATA_DIR: dir, DEN_HOST_SECRET: REAL });
      assert.equal(host.code, 1, host.out);
      assert.match(host.out.trim(), MIGRATION);
      assert.doesNotMatch(host.out, /\n\s+at /, "no stack trace");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("den host run without an identity says its instance id and the den ca issue that makes one; with it, it serves https", async () => {
    const dir = mkdtempSync(join(tmpdir(), "den-start-checks-"));
    try {
      const instance = hostInstance(dir);
      const none = await den(["host", "run", "--memory", "--port", "0"], { DEN_DATA_DIR: dir });
      assert.equal(none.code, 1, none.out);
      assert.ok(none.out.includes(`this is host ${instance}; on the CA's machine run \`den ca issue --kind host --id ${instance} --out DIR\``), none.out);
      assert.doesNotMatch(none.out, /\n\s+at /, "one line, no stack trace");
      const good = await den(["host", "run", "--memory", "--port", "0"], { DEN_DATA_DIR: dir, DEN_TLS_DIR: await hostTlsDir(instance) }, /host agent .* listening on https/);
      assert.match(good.out, new RegExp(`in-memory host agent ${instance} listening on https://127\\.0\\.0\\.1:\\d+`));
      // A plain http:// address to advertise, or control plane, is refused before anything opens.
      const plain = await den(["host", "run", "--memory", "--port", "0", "--control-plane", "https://127.0.0.1:1", "--advertise", "http://10.0.0.11:8788"], { DEN_DATA_DIR: dir });
      assert.equal(plain.code, 1, plain.out);
      assert.equal(plain.out.trim(), "den: the control plane reaches this host over mutual TLS: --advertise https://..., got http://10.0.0.11:8788");
      const plainCp = await den(["host", "run", "--memory", "--port", "0", "--control-plane", "http://127.0.0.1:8787"], { DEN_DATA_DIR: dir });
      assert.match(plainCp.out.trim(), /^den: the control planes are their hosts' listeners, over mutual TLS: --control-plane https:\/\/HOST:8789$/);
      // Another host's certificate is refused, naming both.
      const other = await den(["host", "run", "--memory", "--port", "0"], { DEN_DATA_DIR: dir, DEN_TLS_DIR: await hostTlsDir("den_someone_else") });
      assert.equal(other.code, 1, other.out);
      assert.match(other.out, new RegExp(`holds the identity of host den_someone_else, not of this host \\(${instance}\\)`));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("DEN_DATABASE_URL's TLS parameters, checked at start", () => {
  const dir = mkdtempSync(join(tmpdir(), "den-pg-params-"));
  const notCert = join(dir, "not-a-cert.pem");
  writeFileSync(notCert, "hello\n");
  after(() => rmSync(dir, { recursive: true, force: true }));
  const url = (q: string) => `postgres://den:${REAL}@db.example:5432/den?${q}`;

  test("a missing or unreadable root certificate is one clear error naming sslrootcert and the path, from loadConfig and from den serve", async () => {
    assert.throws(() => loadConfig({ dataDir: "/tmp" }, { DEN_DATABASE_URL: url("sslmode=verify-full&sslrootcert=/nonexistent/pg-ca.crt") }),
      /^Error: DEN_DATABASE_URL's sslrootcert=\/nonexistent\/pg-ca\.crt cannot be read \(no such file\): it must be a PEM certificate file/);
    assert.throws(() => loadConfig({ dataDir: "/tmp" }, { DEN_DATABASE_URL: url(`sslmode=verify-full&sslrootcert=${dir}`) }), /cannot be read \(a directory\)/);
    assert.throws(() => loadConfig({ dataDir: "/tmp" }, { DEN_DATABASE_URL: url(`sslmode=verify-full&sslrootcert=${notCert}`) }), /sslrootcert=.*not-a-cert\.pem is not a PEM certificate/);
    const r = await den(["serve"], { DEN_DATA_DIR: dir, DEN_HOST_TRANSPORT: "memory", DEN_DATABASE_URL: url("sslmode=verify-full&sslrootcert=/etc/den/nope.crt") });
    assert.equal(r.code, 1, r.out);
    assert.match(r.out.trim(), /^den: DEN_DATABASE_URL's sslrootcert=\/etc\/den\/nope\.crt cannot be read \(no such file\)/);
    assert.doesNotMatch(r.out, /\n\s+at /, "no stack trace");
  });

  test("modes: prefer/allow and unknown ones refused; verify-ca needs a root certificate; sslrootcert=system only with verify-full; sslcert without sslkey refused", () => {
    assert.throws(() => postgresConnection(url("sslmode=prefer")), /sslmode=prefer is not supported \(it would fall back to an unencrypted connection\)/);
    assert.throws(() => postgresConnection(url("sslmode=allow")), /sslmode=allow is not supported/);
    assert.throws(() => postgresConnection(url("sslmode=verify_full")), /sslmode must be one of disable, require, verify-ca, verify-full; got verify_full/);
    assert.throws(() => postgresConnection(url("sslmode=verify-ca")), /verify-ca needs sslrootcert=/);
    assert.throws(() => postgresConnection(url("sslmode=require&sslrootcert=system")), /sslrootcert=system needs sslmode=verify-full/);
    assert.throws(() => postgresConnection(url("sslmode=require&sslcert=/a.crt")), /sslcert and sslkey go together/);
  });

  test("what pg is handed: the TLS parameters taken out of the URL, and options with libpq's meanings", () => {
    assert.deepEqual(postgresConnection(url("")), { connectionString: url("") }, "no TLS parameter: the URL as given");
    const req = postgresConnection(url("sslmode=require&application_name=den"));
    assert.equal(req.connectionString, `postgres://den:${REAL}@db.example:5432/den?application_name=den`);
    assert.deepEqual(req.ssl, { rejectUnauthorized: false });
    assert.deepEqual(postgresConnection(url("sslmode=disable")).ssl, false);
    const full = postgresConnection(url("sslrootcert=system"));
    assert.equal(full.mode, "verify-full", "any TLS parameter without sslmode means verify-full");
    assert.equal(full.ssl && full.ssl.ca, undefined, "system: Node's roots (and NODE_EXTRA_CA_CERTS)");
    assert.equal(typeof (full.ssl && full.ssl.checkServerIdentity), "function");
    assert.equal(full.ssl && full.ssl.rejectUnauthorized, undefined, "checked");
  });
});
