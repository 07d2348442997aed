// needs: nothing
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import type { AddressInfo } from "node:net";
import { clientTlsOptions, initCa, issueMachine, loadCa, newCa, peerIdentity, peerSerial, readMachineTls, serverTlsOptions, verifyIssuedBy, writeIdentityFiles, type MachineTls } from "../src/index.js";

const dirs: string[] = [];
const tmp = async () => {
  const d = await mkdtemp(join(tmpdir(), "den-pki-tls-"));
  dirs.push(d);
  return d;
};
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

/** A server with `server`'s identity answering each connection with who the peer is, and a client of `client`'s expecting `expect`. */
async function handshake(server: MachineTls, client: Partial<MachineTls> & { ca: string }, expect: Parameters<typeof clientTlsOptions>[1], optionalClient = false) {
  const srv = tls.createServer(serverTlsOptions(server, { optionalClient }), (s) => {
    const peer = peerIdentity(s);
    s.end(peer ? `${peer.kind}:${peer.id}:${peerSerial(s)}` : "anonymous");
  });
  srv.on("tlsClientError", () => undefined);
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const opts = client.key ? clientTlsOptions(client as MachineTls, expect) : { ...clientTlsOptions({ ...server, ca: client.ca }, expect), key: undefined, cert: undefined };
    return await new Promise<{ data: string; error?: string }>((resolve) => {
      let data = "";
      const s = tls.connect({ ...opts, port: (srv.address() as AddressInfo).port, host: "127.0.0.1" });
      s.setEncoding("utf8");
      s.on("data", (d: string) => (data += d));
      s.on("error", (e) => resolve({ data, error: e.message }));
      s.on("close", () => resolve({ data }));
    });
  } finally {
    srv.close();
  }
}

test("a link between machines: each end checks the other's CA and the identity its certificate names", async () => {
  const ca = await initCa(await tmp());
  const host = await issueMachine(ca, { kind: "host", id: "den_a" }, { ttlHours: 1 });
  const hostB = await issueMachine(ca, { kind: "host", id: "den_b" }, { ttlHours: 1 });
  const cp = await issueMachine(ca, { kind: "control-plane", id: "rep_1" }, { ttlHours: 1 });
  const stranger = await issueMachine(await initCa(await tmp()), { kind: "control-plane", id: "rep_1" }, { ttlHours: 1 });

  const ok = await handshake(host, cp, { kind: "host", id: "den_a" });
  assert.equal(ok.error, undefined);
  assert.equal(ok.data, `control-plane:rep_1:${cp.serial}`, "the server reads the client's identity and serial from its verified certificate");

  const wrongId = await handshake(hostB, cp, { kind: "host", id: "den_a" });
  assert.match(wrongId.error ?? "", /the peer is host den_b, expected host den_a/, "a client refuses a server of another id");
  const wrongKind = await handshake(cp, host, { kind: "host" });
  assert.match(wrongKind.error ?? "", /expected host/, "a client refuses a server of another kind");
  const foreign = await handshake(host, { ...stranger, ca: ca.certPem }, { kind: "host" });
  assert.equal(foreign.data, "", "another CA's client certificate gets nothing");
  const untrusted = await handshake(stranger, { ...cp }, { kind: "control-plane" });
  assert.ok(untrusted.error, "a client refuses a server whose certificate another CA issued");
  const none = await handshake(host, { ca: host.ca }, { kind: "host" });
  assert.equal(none.data, "", "no client certificate gets nothing");
  const optional = await handshake(host, { ca: host.ca }, { kind: "host" }, true);
  assert.equal(optional.data, "anonymous", "where a client certificate is optional, no certificate is no identity");
  const optionalForeign = await handshake(host, { ...stranger, ca: ca.certPem }, { kind: "host" }, true);
  assert.equal(optionalForeign.data, "anonymous", "nor is another CA's");
});

test("readMachineTls reads what writeIdentityFiles wrote, and refuses a key others may read", async () => {
  const ca = await initCa(await tmp());
  const m = await issueMachine(ca, { kind: "host", id: "den_files" }, { ttlHours: 1 });
  const dir = join(await tmp(), "id");
  await writeIdentityFiles(dir, { keyPem: m.key, certPem: m.cert, caPem: m.ca });
  assert.deepEqual(readMachineTls(dir), { key: m.key, cert: m.cert, ca: m.ca });
  await chmod(join(dir, "key.pem"), 0o644);
  assert.throws(() => readMachineTls(dir), /may be read by others/);
  assert.throws(() => readMachineTls(join(dir, "missing")), /no machine identity in .*join the deployment first/);
});

test("newCa makes a CA in memory that issues as initCa's does", async () => {
  const ca = await newCa({ commonName: "Mem CA", days: 2 });
  assert.match(ca.fingerprint, /^[0-9a-f]{64}$/);
  const host = await issueMachine(ca, { kind: "host", id: "den_mem" }, { ttlHours: 1 });
  const cp = await issueMachine(ca, { kind: "control-plane", id: "rep_mem" }, { ttlHours: 1 });
  assert.ok(verifyIssuedBy(host.cert, ca));
  assert.equal((await handshake(host, cp, { kind: "host", id: "den_mem" })).data, `control-plane:rep_mem:${cp.serial}`);
  await assert.rejects(newCa({ days: 0 }), /1 to 36500 days/);
});

test("CA rotation: a bundle (new CA first, then the old) in ca.crt and ca.pem: loadCa signs with the first, and machines of either CA link", async () => {
  const old = await initCa(await tmp());
  const fresh = await newCa({ commonName: "Den deployment CA 2" });
  const bundle = fresh.certPem + old.certPem;
  // The control plane's CA dir during the rotation: the bundle, and the new CA's key.
  const dir = await tmp();
  await writeFile(join(dir, "ca.crt"), bundle);
  await writeFile(join(dir, "ca.key"), fresh.keyPem, { mode: 0o600 });
  const loaded = await loadCa(dir);
  assert.equal(loaded.fingerprint, fresh.fingerprint, "the first certificate is the CA that signs (and that a join token pins)");
  assert.equal(loaded.certPem, bundle, "machines get the whole bundle as their ca.pem");
  const cp = await issueMachine(loaded, { kind: "control-plane", id: "rep_new" }, { ttlHours: 1 });
  assert.ok(verifyIssuedBy(cp.cert, { certPem: bundle }), "issued by the new CA, verified against the bundle");
  assert.ok(!verifyIssuedBy(cp.cert, old), "not by the old one");
  // A host still on its old CA's certificate, trusting the bundle, and the new control plane: both ways.
  const oldHost = await issueMachine(old, { kind: "host", id: "den_old" }, { ttlHours: 1 });
  const ok = await handshake({ ...oldHost, ca: bundle }, cp, { kind: "host", id: "den_old" });
  assert.equal(ok.error, undefined);
  assert.equal(ok.data, `control-plane:rep_new:${cp.serial}`);
  // A host that trusts the old CA alone refuses the new control plane: hosts take the bundle first.
  const stale = await handshake(cp, { ...oldHost }, { kind: "control-plane" });
  assert.ok(stale.error, "an old-only ca.pem does not trust the new CA's certificate");
});
