// needs: memory host, no database
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import https from "node:https";
import { DenError } from "@den/protocol";
import { initCa, issueMachine, type MachineTls } from "@den/pki";
import { newId } from "@den/runtime";
import { HttpHostAgent, MemoryHostAgent, startHostServer, type RunningHostServer } from "../src/index.js";

const dir = mkdtempSync(join(tmpdir(), "den-host-tls-"));
let agent: MemoryHostAgent;
let server: RunningHostServer;
let hostTls: MachineTls;
let cpTls: MachineTls;
let ca: Awaited<ReturnType<typeof initCa>>;

before(async () => {
  ca = await initCa(join(dir, "ca"));
  agent = await MemoryHostAgent.open();
  hostTls = await issueMachine(ca, { kind: "host", id: agent.instance }, { ttlHours: 1 });
  cpTls = await issueMachine(ca, { kind: "control-plane", id: "rep_a" }, { ttlHours: 1 });
  server = await startHostServer(agent, { tls: hostTls, port: 0, host: "127.0.0.1" });
});
after(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

const link = (tls: MachineTls, id?: string) => ({ tls, peer: { kind: "host" as const, ...(id ? { id } : {}) } });

/** Rejects with a DenError of `code` whose message matches `re`. */
async function refused(p: Promise<unknown>, code: string, re?: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof DenError, `not a DenError: ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (re) assert.match(e.message, re);
    return true;
  });
}

test("a control plane's certificate reaches the host over mutual TLS: control calls, an exec stream, files and a tunnel", async () => {
  assert.match(server.url, /^https:\/\//);
  const client = await HttpHostAgent.connect(server.url, link(cpTls, agent.instance));
  try {
    assert.equal(client.instance, agent.instance);
    const id = newId("sbx");
    await client.vms.create(newId("op"), { id, template: "base" });
    const g = client.guest(id);
    // An exec stream (a WebSocket over TLS), stdin in, output out.
    const p = await g.execStream("cat", { interactive: true });
    await p.write("over tls\n");
    p.closeStdin();
    let out = "";
    for await (const c of p) out += c.data.toString();
    assert.equal((await p.wait()).exitCode, 0);
    assert.equal(out, "over tls\n");
    // Files both ways.
    await g.files.write("/f", "bytes over tls");
    let read = "";
    for await (const b of g.files.readStream("/f")) read += b.toString();
    assert.equal(read, "bytes over tls");
    // A tunnel (Upgrade over https) to a port in the guest.
    const stop = agent.listen(id, 8080, (sock) => sock.end("hello from the guest"));
    try {
      const sock = await g.tunnel(8080);
      let got = "";
      for await (const b of sock) got += b.toString();
      assert.equal(got, "hello from the guest");
    } finally {
      stop();
    }
  } finally {
    client.close();
  }
});

test("refused: plain HTTP, another CA's certificate, a host's certificate as a caller, a host of another id, and no certificate", async () => {
  // Plain HTTP to the TLS port: the connection fails, nothing is served.
  const plain = await fetch(server.url.replace("https:", "http:") + "/host/v1/info").then((r) => r.status, (e: Error) => e);
  assert.ok(plain instanceof Error || plain === 400, `plain HTTP got ${String(plain)}`);
  // A control plane's certificate from another CA: the handshake fails.
  const other = await initCa(join(dir, "other-ca"));
  const stranger = await issueMachine(other, { kind: "control-plane", id: "rep_a" }, { ttlHours: 1 });
  await refused(HttpHostAgent.connect(server.url, link({ ...stranger, ca: ca.certPem })), "agent_unavailable");
  // A host's certificate (the deployment's, but not a control plane's): 403.
  const otherHost = await issueMachine(ca, { kind: "host", id: "den_other" }, { ttlHours: 1 });
  await refused(HttpHostAgent.connect(server.url, link(otherHost)), "forbidden", /only a control plane's/);
  // The client expects another host's id: it refuses the server.
  await refused(HttpHostAgent.connect(server.url, link(cpTls, "den_someone_else")), "agent_unavailable");
  // A control plane that does not trust this host's CA refuses it.
  await refused(HttpHostAgent.connect(server.url, link({ ...cpTls, ca: other.certPem })), "agent_unavailable");
  // No client certificate at all.
  const none = await new Promise<number | Error>((resolve) => {
    const req = https.get(server.url + "/host/v1/info", { ca: ca.certPem, checkServerIdentity: () => undefined }, (res) => resolve(res.statusCode ?? 0));
    req.on("error", resolve);
  });
  assert.ok(none instanceof Error, `no certificate got ${String(none)}`);
});

test("a host listed by URL (its id not known yet): its certificate must name the instance it says it is", async () => {
  // The right one: learned from /host/v1/info, then pinned.
  const client = await HttpHostAgent.connect(server.url, link(cpTls));
  client.close();
  assert.equal(client.instance, agent.instance);
  // A host that serves another host's certificate (of the same CA): refused at connect, naming both.
  const impostor = await MemoryHostAgent.open();
  const borrowed = await startHostServer(impostor, { tls: hostTls, port: 0, host: "127.0.0.1" });
  try {
    await refused(HttpHostAgent.connect(borrowed.url, link(cpTls)), "forbidden", new RegExp(`says it is ${impostor.instance}.*host ${agent.instance}`));
  } finally {
    await borrowed.close();
  }
});

test("the host server refuses to start without a certificate, and an http:// URL is refused before any call", async () => {
  const { buildHostServer } = await import("../src/index.js");
  await assert.rejects(buildHostServer(agent, {} as never), /only over mutual TLS/);
  await refused(HttpHostAgent.connect(server.url.replace("https:", "http:"), link(cpTls)), "invalid_argument", /https:\/\//);
});

test("a renewed certificate: new connections get it, an exec stream open across the reload goes on", async () => {
  const client = await HttpHostAgent.connect(server.url, link(cpTls, agent.instance));
  try {
    const id = newId("sbx");
    await client.vms.create(newId("op"), { id, template: "base" });
    const p = await client.guest(id).execStream("cat", { interactive: true });
    const renewed = await issueMachine(ca, { kind: "host", id: agent.instance }, { ttlHours: 2 });
    server.reload(renewed);
    const seen = await new Promise<string>((resolve, reject) => {
      const req = https.get(server.url + "/host/v1/info", { key: cpTls.key, cert: cpTls.cert, ca: ca.certPem, checkServerIdentity: () => undefined, agent: false }, (res) => {
        resolve((res.socket as import("node:tls").TLSSocket).getPeerX509Certificate()!.serialNumber.toLowerCase());
        res.resume();
      });
      req.on("error", reject);
    });
    assert.equal(seen, renewed.serial, "a new connection sees the renewed certificate");
    await p.write("still here\n");
    p.closeStdin();
    let out = "";
    for await (const c of p) out += c.data.toString();
    assert.equal(out, "still here\n");
  } finally {
    client.close();
  }
});
