// needs: nothing
/** `den ca init` and `den ca issue`: the built CLI, on directories of the test's own. */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { X509Certificate, createPrivateKey } from "node:crypto";
import { chmod, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { certInfo, identityOf, loadCa, verifyIssuedBy } from "@den/pki";

const CLI = join(dirname(fileURLToPath(import.meta.url)), "..", "src", "bin.js");

function den(args: string[], env: Record<string, string | undefined> = {}): Promise<{ code: number; out: string; err: string }> {
  const base: Record<string, string | undefined> = { ...process.env, DEN_CA_DIR: undefined, DEN_CERT_TTL_HOURS: undefined, ...env };
  const clean = Object.fromEntries(Object.entries(base).filter((e): e is [string, string] => e[1] !== undefined));
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [CLI, ...args], { env: clean, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    c.stdout.on("data", (d: Buffer) => (out += d));
    c.stderr.on("data", (d: Buffer) => (err += d));
    c.on("close", (code) => resolve({ code: code ?? -1, out, err }));
  });
}

const mode = async (p: string) => (await stat(p)).mode & 0o777;
const root = await mkdtemp(join(tmpdir(), "den-ca-cli-"));
after(() => rm(root, { recursive: true, force: true }));

test("den ca init: a CA in --dir or DEN_CA_DIR, key 0600 in a 0700 directory, its fingerprint on stdout; never twice; neither given is a clear refusal", async () => {
  const none = await den(["ca", "init"]);
  assert.equal(none.code, 1);
  assert.equal(none.err, "den: den ca init needs the CA's directory: --dir DIR or DEN_CA_DIR\n");

  const dir = join(root, "ca");
  const made = await den(["ca", "init", "--dir", dir]);
  assert.equal(made.code, 0, made.err);
  const ca = await loadCa(dir);
  assert.equal(made.out, `${ca.fingerprint}\n`);
  assert.equal(await mode(dir), 0o700);
  assert.equal(await mode(join(dir, "ca.key")), 0o600);
  assert.equal(new X509Certificate(ca.certPem).ca, true);

  const twice = await den(["ca", "init", "--dir", dir]);
  assert.equal(twice.code, 1);
  assert.match(twice.err, /^den: already_exists: .*ca\.key exists/);
  assert.equal((await loadCa(dir)).fingerprint, ca.fingerprint, "the CA is untouched");

  const fromEnv = join(root, "env-ca");
  const viaEnv = await den(["ca", "init", "--days", "30", "--name", "Staging CA"], { DEN_CA_DIR: fromEnv });
  assert.equal(viaEnv.code, 0, viaEnv.err);
  const staged = new X509Certificate((await loadCa(fromEnv)).certPem);
  assert.match(staged.subject, /CN=Staging CA/);
  assert.ok(Date.parse(staged.validTo) - Date.now() < 31 * 86_400_000);
});

test("den ca issue: key.pem (0600), cert.pem and ca.pem in --out; the certificate is the CA's, for the identity asked, and for the key beside it", async () => {
  const dir = join(root, "issuing-ca");
  assert.equal((await den(["ca", "init", "--dir", dir])).code, 0);
  const out = join(root, "rep-1");
  const r = await den(["ca", "issue", "--dir", dir, "--kind", "control-plane", "--id", "rep_1", "--out", out, "--ttl-hours", "5", "--dns", "cp1.internal", "--ip", "10.1.2.3"]);
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out, `${out}\n`);
  assert.equal(await mode(out), 0o700);
  assert.equal(await mode(join(out, "key.pem")), 0o600);
  const [key, cert, caPem] = await Promise.all(["key.pem", "cert.pem", "ca.pem"].map((f) => readFile(join(out, f), "utf8")));
  const ca = await loadCa(dir);
  assert.equal(caPem, ca.certPem);
  assert.ok(verifyIssuedBy(cert!, ca), "the certificate verifies against the CA");
  assert.ok(new X509Certificate(cert!).checkPrivateKey(createPrivateKey(key!)), "key.pem is the certificate's key");
  assert.deepEqual(identityOf(cert!), { kind: "control-plane", id: "rep_1" });
  assert.match(new X509Certificate(cert!).subjectAltName!, /DNS:cp1\.internal, IP Address:10\.1\.2\.3/);
  const info = certInfo(cert!);
  assert.ok(Math.abs(info.notAfter - Date.now() - 5 * 3_600_000) < 60_000, "--ttl-hours 5");

  const again = await den(["ca", "issue", "--dir", dir, "--kind", "control-plane", "--id", "rep_1", "--out", out]);
  assert.equal(again.code, 1);
  assert.match(again.err, /key\.pem exists \(--force replaces it\)/);
  assert.equal(await readFile(join(out, "cert.pem"), "utf8"), cert, "untouched");
  const forced = await den(["ca", "issue", "--kind", "host", "--id", "den_h1", "--out", out, "--force"], { DEN_CA_DIR: dir, DEN_CERT_TTL_HOURS: "2" });
  assert.equal(forced.code, 0, forced.err);
  const replaced = await readFile(join(out, "cert.pem"), "utf8");
  assert.deepEqual(identityOf(replaced), { kind: "host", id: "den_h1" });
  assert.ok(Math.abs(certInfo(replaced).notAfter - Date.now() - 2 * 3_600_000) < 60_000, "DEN_CERT_TTL_HOURS=2");

  const badKind = await den(["ca", "issue", "--dir", dir, "--kind", "admin", "--id", "x", "--out", join(root, "x")]);
  assert.notEqual(badKind.code, 0);
  assert.match(badKind.err, /--kind.*admin.*(host|choices)/s);
  const badId = await den(["ca", "issue", "--dir", dir, "--kind", "host", "--id", "../etc", "--out", join(root, "y")]);
  assert.equal(badId.code, 1);
  assert.match(badId.err, /^den: invalid_argument: a machine id/);
  const noDir = await den(["ca", "issue", "--kind", "host", "--id", "x", "--out", join(root, "z")]);
  assert.equal(noDir.code, 1);
  assert.match(noDir.err, /--dir DIR or DEN_CA_DIR/);

  await chmod(join(dir, "ca.key"), 0o644);
  const open = await den(["ca", "issue", "--dir", dir, "--kind", "host", "--id", "den_h2", "--out", join(root, "h2")]);
  assert.equal(open.code, 1);
  assert.match(open.err, /chmod 600/);
});
