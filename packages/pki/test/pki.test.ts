// needs: nothing
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import type { AddressInfo } from "node:net";
import { DenError } from "@den/protocol";
import {
  type Ca, certInfo, identityOf, initCa, issue, loadCa, newJoinToken, newKeyAndCsr, parseJoinToken, pinMatches, renewAt, tokenMatches, verifyIssuedBy, writeIdentityFiles,
} from "../src/index.js";
import { webcrypto } from "node:crypto";
import { loadX509 } from "../src/x509.js";

const x509 = await loadX509();

const HOUR = 3_600_000;
const dirs: string[] = [];
const tmp = async () => {
  const d = await mkdtemp(join(tmpdir(), "den-pki-"));
  dirs.push(d);
  return d;
};
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
const mode = async (p: string) => (await stat(p)).mode & 0o777;
/** Asserts `p` rejects with a DenError of `code` whose message matches `re`. */
async function refused(p: Promise<unknown>, code: string, re?: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof DenError, `a DenError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (re) assert.match(e.message, re);
    return true;
  });
}

/** A machine's key and a certificate for it from `ca`. */
async function machine(ca: Ca, kind: "host" | "control-plane", id: string, opts: { ttlHours?: number; ips?: string[]; now?: number } = {}) {
  const { keyPem, csrPem } = await newKeyAndCsr({ kind, id });
  const cert = await issue(ca, csrPem, { kind, id }, { ttlHours: opts.ttlHours ?? 24, ...(opts.ips ? { ips: opts.ips } : {}), ...(opts.now !== undefined ? { now: opts.now } : {}) });
  return { keyPem, ...cert };
}

describe("the CA", () => {
  test("initCa makes a CA in a 0700 directory with its key 0600; loadCa reads the same back; a second initCa is refused", async () => {
    const dir = join(await tmp(), "ca");
    const ca = await initCa(dir, { commonName: "Test CA", days: 30 });
    assert.equal(await mode(dir), 0o700);
    assert.equal(await mode(join(dir, "ca.key")), 0o600);
    assert.match(ca.fingerprint, /^[0-9a-f]{64}$/);
    const cert = new X509Certificate(ca.certPem);
    assert.equal(cert.ca, true);
    assert.match(cert.subject, /CN=Test CA/);
    assert.equal(cert.fingerprint256.replaceAll(":", "").toLowerCase(), ca.fingerprint);
    assert.deepEqual(await loadCa(dir), ca);
    await refused(initCa(dir), "already_exists", /ca\.key exists/);
    assert.deepEqual(await loadCa(dir), ca, "the refused init changed nothing");
  });

  test("loadCa refuses a key others may read, naming the file and chmod 600", async () => {
    const dir = await tmp();
    await initCa(dir);
    const key = join(dir, "ca.key");
    await chmod(key, 0o644);
    await refused(loadCa(dir), "invalid_state", new RegExp(`${escape(key)}.*chmod 600 ${escape(key)}`));
    await chmod(key, 0o640);
    await refused(loadCa(dir), "invalid_state", /chmod 600/);
    await chmod(key, 0o600);
    await loadCa(dir);
  });

  test("loadCa refuses a directory without a CA, a certificate that is not a CA's, and a key that is not the certificate's", async () => {
    await refused(loadCa(await tmp()), "ca_not_configured", /den ca init/);
    const ca = await initCa(await tmp());
    const leaf = await machine(ca, "host", "den_leaf");
    const notCa = await tmp();
    await writeFile(join(notCa, "ca.crt"), leaf.certPem);
    await writeFile(join(notCa, "ca.key"), leaf.keyPem, { mode: 0o600 });
    await refused(loadCa(notCa), "invalid_state", /not a CA's certificate/);
    const other = await initCa(await tmp());
    const mixed = await tmp();
    await writeFile(join(mixed, "ca.crt"), ca.certPem);
    await writeFile(join(mixed, "ca.key"), other.keyPem, { mode: 0o600 });
    await refused(loadCa(mixed), "invalid_state", /is not the key of/);
  });

  test("an operator's own CA (RSA here) is loaded and issues certificates that verify against it", async () => {
    const keys = (await webcrypto.subtle.generateKey({ name: "RSASSA-PKCS1-v1_5", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      name: "CN=Operator Root, O=Example", keys: keys as never, signingAlgorithm: { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" }, notBefore: new Date(Date.now() - HOUR), notAfter: new Date(Date.now() + 100 * 24 * HOUR),
      extensions: [new x509.BasicConstraintsExtension(true, undefined, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)],
    });
    const dir = await tmp();
    await writeFile(join(dir, "ca.crt"), cert.toString("pem"));
    const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey("pkcs8", keys.privateKey)).toString("base64");
    await writeFile(join(dir, "ca.key"), `-----BEGIN PRIVATE KEY-----\n${pkcs8.match(/.{1,64}/g)!.join("\n")}\n-----END PRIVATE KEY-----\n`, { mode: 0o600 });
    const ca = await loadCa(dir);
    const host = await machine(ca, "host", "den_rsa");
    assert.ok(verifyIssuedBy(host.certPem, ca));
    assert.deepEqual(identityOf(host.certPem), { kind: "host", id: "den_rsa" });
    assert.match(new X509Certificate(host.certPem).issuer, /CN=Operator Root/);
  });
});

describe("issuing", () => {
  let ca: Ca;
  before(async () => void (ca = await initCa(await tmp())));

  test("the identity comes from the argument, never from the CSR's subject or names", async () => {
    const { csrPem } = await newKeyAndCsr({ kind: "control-plane", id: "someone-else" });
    const csr = new x509.Pkcs10CertificateRequest(csrPem);
    assert.match(csr.subject, /CN=someone-else/, "the CSR claims another machine");
    const out = await issue(ca, csrPem, { kind: "host", id: "den_abc" }, { ttlHours: 24, dnsNames: ["host-1.example"], ips: ["10.0.0.7"] });
    const cert = new X509Certificate(out.certPem);
    assert.deepEqual(identityOf(cert), { kind: "host", id: "den_abc" });
    assert.match(cert.subject, /CN=den_abc/);
    assert.doesNotMatch(cert.subject + cert.subjectAltName, /someone-else/);
    assert.equal(cert.subjectAltName, "URI:urn:den:host:den_abc, DNS:host-1.example, IP Address:10.0.0.7");
    assert.equal(cert.ca, false);
    assert.deepEqual(cert.keyUsage?.sort(), ["1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"], "serverAuth and clientAuth");
    assert.ok(cert.checkIssued(new X509Certificate(ca.certPem)));
    assert.ok(verifyIssuedBy(out.certPem, ca));
    assert.match(out.serial, /^[0-7][0-9a-f]{31}$/);
    assert.equal(certInfo(out.certPem).serial, out.serial);
    await refused(issue(ca, csrPem, { kind: "host", id: "../etc" }, { ttlHours: 1 }), "invalid_argument", /machine id/);
    await refused(issue(ca, csrPem, { kind: "admin" as "host", id: "x" }, { ttlHours: 1 }), "invalid_argument", /kind/);
    await refused(issue(ca, csrPem, { kind: "host", id: "x" }, { ttlHours: 0 }), "invalid_argument");
    await refused(issue(ca, csrPem, { kind: "host", id: "x" }, { ttlHours: 1, dnsNames: ["bad name"] }), "invalid_argument", /DNS name/);
    await refused(issue(ca, csrPem, { kind: "host", id: "x" }, { ttlHours: 1, ips: ["300.1.1.1"] }), "invalid_argument", /IP address/);
  });

  test("a tampered CSR, an oversized one, garbage, and a key that is not P-256 are refused", async () => {
    const { csrPem } = await newKeyAndCsr({ kind: "host", id: "den_aaaa" });
    // Change one letter of the subject the key signed: it still parses, its signature no longer verifies.
    const der = Buffer.from(new x509.Pkcs10CertificateRequest(csrPem).rawData);
    const at = der.indexOf("den_aaaa");
    assert.ok(at > 0);
    der[at + 4] = "b".charCodeAt(0);
    const tampered = x509.PemConverter.encode(der, "CERTIFICATE REQUEST");
    assert.match(new x509.Pkcs10CertificateRequest(tampered).subject, /den_baaa/);
    await refused(issue(ca, tampered, { kind: "host", id: "den_aaaa" }, { ttlHours: 1 }), "invalid_argument", /signature does not verify/);

    const huge = `-----BEGIN CERTIFICATE REQUEST-----\n${"A".repeat(17 * 1024)}\n-----END CERTIFICATE REQUEST-----\n`;
    await refused(issue(ca, huge, { kind: "host", id: "x" }, { ttlHours: 1 }), "payload_too_large");
    await refused(issue(ca, "hello", { kind: "host", id: "x" }, { ttlHours: 1 }), "invalid_argument", /not a PEM/);
    await refused(issue(ca, "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", { kind: "host", id: "x" }, { ttlHours: 1 }), "invalid_argument", /does not parse/);
    await refused(issue(ca, ca.certPem, { kind: "host", id: "x" }, { ttlHours: 1 }), "invalid_argument", /not a PEM certificate signing request/);

    const p384 = (await webcrypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-384" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
    const csr384 = await x509.Pkcs10CertificateRequestGenerator.create({ name: "CN=x", keys: p384 as never, signingAlgorithm: { name: "ECDSA", hash: "SHA-384" } });
    await refused(issue(ca, csr384.toString("pem"), { kind: "host", id: "x" }, { ttlHours: 1 }), "invalid_argument", /not ECDSA P-256/);
  });

  test("a certificate from another CA does not verify, nor one out of its validity period", async () => {
    const other = await initCa(await tmp());
    const foreign = await machine(other, "host", "den_foreign");
    assert.equal(verifyIssuedBy(foreign.certPem, other), true);
    assert.equal(verifyIssuedBy(foreign.certPem, ca), false);
    assert.equal(verifyIssuedBy("not a certificate", ca), false);
    const old = await machine(ca, "host", "den_old", { ttlHours: 1, now: Date.now() - 3 * HOUR });
    assert.equal(verifyIssuedBy(old.certPem, ca), false, "expired an hour ago");
    assert.equal(verifyIssuedBy(old.certPem, ca, Date.now() - 2.5 * HOUR), true, "valid then");
    assert.equal(verifyIssuedBy(old.certPem, ca, Date.now() - 3 * HOUR - 10 * 60_000), false, "not valid yet then (5 minutes' backdating only)");
  });

  test("validity, expiry and renewAt: two thirds of a certificate's life", async () => {
    const now = Date.UTC(2030, 0, 1, 12, 0, 0);
    const ca2 = await initCa(await tmp(), { days: 36_500 });
    const c = await machine(ca2, "control-plane", "rep_1", { ttlHours: 24, now });
    const info = certInfo(c.certPem);
    assert.equal(info.notBefore, now - 5 * 60_000);
    assert.equal(info.notAfter, now + 24 * HOUR);
    assert.equal(c.notAfter, info.notAfter);
    assert.deepEqual(info.identity, { kind: "control-plane", id: "rep_1" });
    assert.equal(info.fingerprint.length, 64);
    assert.equal(renewAt(info.notBefore, info.notAfter), now - 5 * 60_000 + Math.floor(((24 * HOUR + 5 * 60_000) * 2) / 3));
    assert.equal(renewAt(0, 3000), 2000);
    assert.equal(renewAt(1000, 1000), 1000);
    // A certificate never outlives its CA.
    const short = await initCa(await tmp(), { days: 1 });
    const capped = await machine(short, "host", "den_capped", { ttlHours: 100 });
    assert.equal(capped.notAfter, new x509.X509Certificate(short.certPem).notAfter.getTime());
  });

  test("identityOf: both kinds round-trip; no identity in a CA's certificate, garbage, or a certificate naming two", async () => {
    for (const [kind, id] of [["host", "den_x1"], ["control-plane", "rep_abc-DEF_9"]] as const) {
      const m = await machine(ca, kind, id);
      assert.deepEqual(identityOf(m.certPem), { kind, id });
      assert.deepEqual(identityOf(Buffer.from(m.certPem)), { kind, id });
      assert.deepEqual(identityOf(new X509Certificate(m.certPem)), { kind, id });
    }
    assert.equal(identityOf(ca.certPem), undefined);
    assert.equal(identityOf("garbage"), undefined);
    // A certificate made elsewhere naming two machines names none.
    const keys = (await webcrypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
    const two = await x509.X509CertificateGenerator.createSelfSigned({
      name: "CN=two", keys: keys as never, signingAlgorithm: { name: "ECDSA", hash: "SHA-256" },
      extensions: [new x509.SubjectAlternativeNameExtension([{ type: "url", value: "urn:den:host:a" }, { type: "url", value: "urn:den:host:b" }])],
    });
    assert.equal(identityOf(two.toString("pem")), undefined);
  });

  test("writeIdentityFiles: the key 0600, the certificate and CA beside it, in a 0700 directory", async () => {
    const dir = join(await tmp(), "id");
    const m = await machine(ca, "host", "den_files");
    await writeIdentityFiles(dir, { keyPem: m.keyPem, certPem: m.certPem, caPem: ca.certPem });
    assert.equal(await mode(dir), 0o700);
    assert.equal(await mode(join(dir, "key.pem")), 0o600);
    assert.equal(await readFile(join(dir, "cert.pem"), "utf8"), m.certPem);
    assert.equal(await readFile(join(dir, "ca.pem"), "utf8"), ca.certPem);
    // A renewal without a new key leaves the key alone.
    const again = await machine(ca, "host", "den_files");
    await writeIdentityFiles(dir, { certPem: again.certPem, caPem: ca.certPem });
    assert.equal(await readFile(join(dir, "key.pem"), "utf8"), m.keyPem);
    assert.equal(await readFile(join(dir, "cert.pem"), "utf8"), again.certPem);
  });

  test("mutual TLS: a host's server takes a control plane's certificate from the same CA, and refuses another CA's and none", async () => {
    const host = await machine(ca, "host", "den_tls", { ips: ["127.0.0.1"] });
    const cp = await machine(ca, "control-plane", "rep_tls");
    const stranger = await machine(await initCa(await tmp()), "control-plane", "rep_tls");
    const refusedHandshakes: Error[] = [];
    const server = tls.createServer({ key: host.keyPem, cert: host.certPem, ca: [ca.certPem], requestCert: true, rejectUnauthorized: true, minVersion: "TLSv1.3" }, (s) => {
      const peer = identityOf(s.getPeerX509Certificate()!);
      s.end(`${peer?.kind}:${peer?.id}\n`);
    });
    server.on("tlsClientError", (e) => refusedHandshakes.push(e));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as AddressInfo).port;
    const attempt = (client: { key?: string; cert?: string }) =>
      new Promise<{ data: string; error?: Error }>((resolve) => {
        let data = "";
        const s = tls.connect({ port, host: "127.0.0.1", ca: [ca.certPem], ...client });
        s.setEncoding("utf8");
        s.on("data", (d: string) => (data += d));
        s.on("error", (error) => resolve({ data, error }));
        s.on("close", () => resolve({ data }));
      });
    try {
      const ok = await attempt({ key: cp.keyPem, cert: cp.certPem });
      assert.equal(ok.error, undefined);
      assert.equal(ok.data, "control-plane:rep_tls\n", "the server read the client's identity from its verified certificate");
      const foreign = await attempt({ key: stranger.keyPem, cert: stranger.certPem });
      assert.equal(foreign.data, "", "another CA's certificate gets nothing");
      const none = await attempt({});
      assert.equal(none.data, "", "no certificate gets nothing");
      for (let i = 0; i < 50 && refusedHandshakes.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
      assert.equal(refusedHandshakes.length, 2, refusedHandshakes.map((e) => e.message).join("; "));
    } finally {
      server.close();
    }
  });
});

describe("join tokens", () => {
  const fingerprint = "ab".repeat(32);

  test("a token carries its id, its secret and the CA's pin; only the hash of its secret matches it", () => {
    const t = newJoinToken(fingerprint);
    assert.match(t.token, /^den-join\.[a-z2-7]{12}\.[A-Za-z0-9_-]{43}\.abababababababab$/);
    const p = parseJoinToken(t.token)!;
    assert.equal(p.id, t.id);
    assert.equal(p.caPin, fingerprint.slice(0, 16));
    assert.ok(pinMatches(p.caPin, fingerprint));
    assert.ok(!pinMatches(p.caPin, "cd".repeat(32)));
    assert.ok(tokenMatches(p.secret, t.secretHash));
    assert.ok(!t.token.includes(t.secretHash));
    const flipped = p.secret.slice(0, -1) + (p.secret.endsWith("A") ? "B" : "A");
    assert.ok(!tokenMatches(flipped, t.secretHash));
    assert.ok(!tokenMatches(p.secret + "x", t.secretHash));
    assert.ok(!tokenMatches("", t.secretHash));
    assert.ok(!tokenMatches(p.secret, "not a hash"));
    assert.ok(!tokenMatches(p.secret, newJoinToken(fingerprint).secretHash), "another token's hash");
    assert.equal(new Set(Array.from({ length: 200 }, () => newJoinToken(fingerprint).id)).size, 200);
    assert.throws(() => newJoinToken("abc"), DenError);
  });

  test("anything but exactly a token is no token", () => {
    const { token } = newJoinToken(fingerprint);
    const [, id, secret, pin] = token.split(".");
    for (const bad of [
      "", "den-join", `den-join.${id}.${secret}`, `${token}.x`, `${token} `, ` ${token}`, `${token}\n`, token.toUpperCase(), token.replace("den-join", "den-jion"),
      `den-join.${id}x.${secret}.${pin}`, `den-join.${id!.toUpperCase()}.${secret}.${pin}`, `den-join.${id}.${secret}=.${pin}`, `den-join.${id}.${secret}.${pin!.toUpperCase()}`,
      `den-join.${id}.${secret}.${pin}0`, `den-join.${id}.${secret!.slice(1)}.${pin}`, token + "a".repeat(10_000), "x".repeat(1_000_000),
    ]) assert.equal(parseJoinToken(bad), undefined, JSON.stringify(bad.slice(0, 100)));
    for (const notString of [undefined, null, 42, {}, [token]]) assert.equal(parseJoinToken(notString as unknown as string), undefined);
  });
});
