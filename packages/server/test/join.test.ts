// needs: memory host
/**
 * Machines joining the fleet: an admin's one-time join token, redeemed with a CSR at
 * /internal/v1/join for a certificate of the deployment's CA (DEN_CA_DIR) bound to the
 * machine's id; once only, before it expires, and never a 5xx for a token that will not do.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ManualClock } from "@den/host-agent";
import { Enrollment, systemClock } from "@den/control-plane";
import { type Ca, certInfo, identityOf, initCa, newKeyAndCsr, newJoinToken, verifyIssuedBy } from "@den/pki";
import { ADMIN_KEY, client, memoryFixture, runCli } from "./helpers.js";

const JOIN = "/internal/v1/join";
const REFUSED = "invalid, used or expired join token";
const HOUR = 3_600_000;

describe("join tokens and /internal/v1/join", () => {
  const caDir = mkdtempSync(join(tmpdir(), "den-ca-"));
  let ca: Ca;
  // Before the fixture's own before(): the server loads the CA as it starts.
  before(async () => void (ca = await initCa(caDir)));
  after(() => rmSync(caDir, { recursive: true, force: true }));
  const clock = new ManualClock(Date.now());
  const f = memoryFixture({ DEN_CA_DIR: caDir, DEN_CERT_TTL_HOURS: "2" }, { clock });

  const token = async (body: Record<string, unknown> = {}) => {
    const r = await f.api("POST", "/v1/hosts/tokens", body);
    assert.equal(r.status, 201, r.text);
    return r.body as { id: string; token: string; kind: string; expires_at: string };
  };
  const csr = async (id = "someone-else") => (await newKeyAndCsr({ kind: "control-plane", id })).csrPem;
  const redeem = async (body: Record<string, unknown>) => {
    const r = await fetch(f.server.url + JOIN, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await r.text();
    let parsed: any;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: r.status, body: parsed, text };
  };

  test("an admin makes a token (a host's, for an hour, by default); an owner's key may not; bounds are the schema's", async () => {
    const t = await token();
    assert.match(t.token, new RegExp(`^den-join\\.${t.id}\\.[A-Za-z0-9_-]{43}\\.${ca.fingerprint.slice(0, 16)}$`));
    assert.equal(t.kind, "host");
    assert.equal(Date.parse(t.expires_at), clock.now() + HOUR);
    const row = (await f.server.cp.store.joinTokens.get(t.id))!;
    assert.ok(row.secret_hash.length === 64 && !t.token.includes(row.secret_hash), "only the secret's hash is kept");
    assert.match(row.created_by, /^key_/);
    const cp = await token({ kind: "control-plane", ttl_seconds: 120 });
    assert.equal(cp.kind, "control-plane");
    assert.equal(Date.parse(cp.expires_at), clock.now() + 120_000);

    const owner = await f.api("POST", "/v1/keys", { owner: "not-an-admin" });
    assert.equal(owner.status, 201, owner.text);
    const theirs = await client(f.server.url, owner.body.key)("POST", "/v1/hosts/tokens", {});
    assert.equal(theirs.status, 403, theirs.text);
    assert.equal(theirs.body.error.code, "forbidden");
    const anonymous = await fetch(`${f.server.url}/v1/hosts/tokens`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    assert.equal(anonymous.status, 401);
    for (const bad of [{ ttl_seconds: 0 }, { ttl_seconds: 8 * 86_400 }, { ttl_seconds: 1.5 }, { kind: "admin" }, { extra: true }]) {
      const r = await f.api("POST", "/v1/hosts/tokens", bad);
      assert.equal(r.status, 400, `${JSON.stringify(bad)}: ${r.text}`);
    }
  });

  test("den hosts token create prints a token (--kind, --ttl), and --json its fields", async () => {
    const env = { DEN_API_URL: f.server.url, DEN_API_KEY: ADMIN_KEY };
    const r = await runCli(["hosts", "token", "create", "--kind", "control-plane", "--ttl", "600"], env);
    assert.equal(r.code, 0, r.err);
    const [, id] = r.out.trim().split(".");
    assert.match(r.out, /^den-join\.[a-z2-7]{12}\.[A-Za-z0-9_-]{43}\.[0-9a-f]{16}\n$/);
    assert.match(r.err, /once/);
    const row = (await f.server.cp.store.joinTokens.get(id!))!;
    assert.equal(row.kind, "control-plane");
    assert.equal(row.expires_at - row.created_at, 600_000);
    const j = await runCli(["hosts", "token", "create", "--json"], env);
    assert.equal(j.code, 0, j.err);
    const parsed = JSON.parse(j.out) as { kind: string; token: string; expiresAt: string };
    assert.equal(parsed.kind, "host");
    assert.equal(Date.parse(parsed.expiresAt), clock.now() + HOUR);
    const bad = await runCli(["hosts", "token", "create", "--ttl", "0"], env);
    assert.equal(bad.code, 1);
  });

  test("a machine redeems a token with a CSR: a certificate of the CA naming the machine id it gave (whatever the CSR says), recorded; once only", async () => {
    const t = await token();
    const r = await redeem({ token: t.token, csr: await csr(), machine_id: "den_joined1" });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.body.ca, ca.certPem);
    assert.ok(verifyIssuedBy(r.body.certificate, ca), "the certificate verifies against the CA");
    assert.deepEqual(identityOf(r.body.certificate), { kind: "host", id: "den_joined1" });
    const info = certInfo(r.body.certificate);
    assert.equal(info.serial, r.body.serial);
    assert.equal(Date.parse(r.body.not_after), info.notAfter);
    assert.ok(Math.abs(info.notAfter - Date.now() - 2 * HOUR) < 60_000, "DEN_CERT_TTL_HOURS=2");
    const recorded = (await f.server.cp.store.machineCerts.get(r.body.serial))!;
    assert.equal(recorded.kind, "host");
    assert.equal(recorded.machine_id, "den_joined1");
    assert.equal(recorded.not_after, info.notAfter);
    assert.equal((await f.server.cp.store.joinTokens.get(t.id))!.used_by, "den_joined1");

    const again = await redeem({ token: t.token, csr: await csr(), machine_id: "den_joined2" });
    assert.equal(again.status, 401, again.text);
    assert.equal(again.body.error.message, REFUSED);

    const cpToken = await token({ kind: "control-plane" });
    const replica = await redeem({ token: cpToken.token, csr: await csr(), machine_id: "rep_joined" });
    assert.equal(replica.status, 200, replica.text);
    assert.deepEqual(identityOf(replica.body.certificate), { kind: "control-plane", id: "rep_joined" });
  });

  test("a CSR that does not verify is refused without using the token up", async () => {
    const t = await token();
    const good = await csr();
    const tampered = good.replace(/(\n[A-Za-z0-9+/]{10})([A-Za-z0-9+/])/, (_m, a: string, c: string) => a + (c === "A" ? "B" : "A"));
    for (const bad of ["not a csr", tampered, ca.certPem]) {
      const r = await redeem({ token: t.token, csr: bad, machine_id: "den_badcsr" });
      assert.equal(r.status, 400, r.text);
    }
    assert.equal((await f.server.cp.store.joinTokens.get(t.id))!.used_at, null);
    assert.equal((await redeem({ token: t.token, csr: good, machine_id: "den_badcsr" })).status, 200);
  });

  test("an expired token is refused like an unknown one", async () => {
    const t = await token({ ttl_seconds: 60 });
    clock.advance(61_000);
    const r = await redeem({ token: t.token, csr: await csr(), machine_id: "den_late" });
    assert.equal(r.status, 401, r.text);
    assert.equal(r.body.error.message, REFUSED);
  });

  test("tokens that will not do are all a 4xx, the same 401 when they are token-shaped", async () => {
    const t = await token();
    const [, id, secret, pin] = t.token.split(".");
    const other = newJoinToken("cd".repeat(32));
    const wrongSecret = `den-join.${id}.${secret!.slice(0, -1)}${secret!.endsWith("A") ? "B" : "A"}.${pin}`;
    const body = { csr: await csr(), machine_id: "den_malformed" };
    for (const bad of ["x", "den-join...", wrongSecret, other.token, `den-join.${other.id}.${secret}.${pin}`, `${t.token}\n`, t.token.toUpperCase()]) {
      const r = await redeem({ ...body, token: bad });
      assert.equal(r.status, 401, `${JSON.stringify(bad)}: ${r.text}`);
      assert.equal(r.body.error.message, REFUSED);
    }
    for (const bad of [{ ...body, token: "x".repeat(300) }, { ...body, token: "" }, { ...body, token: 42 }, { csr: body.csr, machine_id: "den_m" }, { ...body, token: t.token, machine_id: "../etc" },
      { ...body, token: t.token, machine_id: "x".repeat(129) }, { ...body, token: t.token, csr: "A".repeat(17 * 1024) }]) {
      const r = await redeem(bad);
      assert.equal(r.status, 400, `${JSON.stringify(bad).slice(0, 120)}: ${r.text}`);
    }
    const broken = await fetch(f.server.url + JOIN, { method: "POST", headers: { "content-type": "application/json" }, body: "{not json" });
    assert.equal(broken.status, 400);
    assert.equal((await f.server.cp.store.joinTokens.get(t.id))!.used_at, null, "none of them used the token");
  });

  test("redeems of one token at once: exactly one certificate", async () => {
    const t = await token();
    const csrs = await Promise.all(Array.from({ length: 6 }, () => csr()));
    const results = await Promise.all(csrs.map((c, i) => redeem({ token: t.token, csr: c, machine_id: `den_race${i}` })));
    const won = results.flatMap((r, i) => (r.status === 200 ? [i] : []));
    assert.equal(won.length, 1, results.map((r) => `${r.status} ${r.text.slice(0, 80)}`).join("\n"));
    for (const r of results) if (r.status !== 200) assert.equal(r.status, 401, r.text);
    assert.equal((await f.server.cp.store.joinTokens.get(t.id))!.used_by, `den_race${won[0]}`);
    let recorded = 0;
    for (let i = 0; i < 6; i++) recorded += (await f.server.cp.store.machineCerts.ofMachine("host", `den_race${i}`)).length;
    assert.equal(recorded, 1);
    // The claim itself, raced with no certificate-making between: one UPDATE wins.
    const t2 = await token();
    const claims = await Promise.all(Array.from({ length: 8 }, (_, i) => f.server.cp.store.joinTokens.claim(t2.id, `den_claim${i}`, clock.now())));
    assert.equal(claims.filter(Boolean).length, 1);
  });

  test("renewal: a new certificate for the same identity, until the machine is revoked", async () => {
    const { enrollment, store } = f.server.cp;
    const renewed = await enrollment.renew({ kind: "host", id: "den_joined1" }, await csr());
    assert.ok(verifyIssuedBy(renewed.certPem, ca));
    assert.deepEqual(identityOf(renewed.certPem), { kind: "host", id: "den_joined1" });
    assert.equal((await store.machineCerts.ofMachine("host", "den_joined1")).length, 2);
    assert.equal(await store.machineCerts.revoke("host", "den_joined1", clock.now()), 2);
    await assert.rejects(enrollment.renew({ kind: "host", id: "den_joined1" }, await csr()), { code: "forbidden" });
    const t = await token();
    const rejoin = await redeem({ token: t.token, csr: await csr(), machine_id: "den_joined1" });
    assert.equal(rejoin.status, 403, rejoin.text);
    await assert.rejects(enrollment.renew({ kind: "host", id: "../x" }, await csr()), { code: "invalid_argument" });
  });

  test("a CA key others may read is refused, naming chmod 600", async () => {
    const open = mkdtempSync(join(tmpdir(), "den-ca-open-"));
    try {
      copyFileSync(join(caDir, "ca.crt"), join(open, "ca.crt"));
      copyFileSync(join(caDir, "ca.key"), join(open, "ca.key"));
      chmodSync(join(open, "ca.key"), 0o644);
      const e = new Enrollment(f.server.cp.store, { dir: open, certTtlHours: 1 }, systemClock);
      await assert.rejects(e.createToken({ keyId: "key_x", owner: "admin", admin: true }), /chmod 600/);
    } finally {
      rmSync(open, { recursive: true, force: true });
    }
  });
});

describe("a deployment without a CA", () => {
  const f = memoryFixture();

  test("makes no join tokens and redeems none: 409 ca_not_configured, naming DEN_CA_DIR", async () => {
    const r = await f.api("POST", "/v1/hosts/tokens", {});
    assert.equal(r.status, 409, r.text);
    assert.equal(r.body.error.code, "ca_not_configured");
    assert.match(r.body.error.message, /DEN_CA_DIR/);
    const { csrPem } = await newKeyAndCsr({ kind: "host", id: "den_x" });
    const j = await fetch(f.server.url + JOIN, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token: newJoinToken("ab".repeat(32)).token, csr: csrPem, machine_id: "den_x" }) });
    assert.equal(j.status, 409);
    assert.equal(((await j.json()) as { error: { code: string } }).error.code, "ca_not_configured");
  });
});
