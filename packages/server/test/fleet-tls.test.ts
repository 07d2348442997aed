// needs: memory host, sqlite
/**
 * A fleet over mutual TLS: a control plane (DEN_CA_DIR, registered hosts) with its hosts'
 * listener, host agents (`den host run --memory --join TOKEN`, and one in process) that join
 * with a one-time token and register by their own certificates; what the listener refuses
 * (a used or expired token, one host's certificate speaking for another, another CA's
 * certificate, plain HTTP, a revoked host), and certificates renewed under a sandbox that
 * keeps running.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import https from "node:https";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HostHttp, HttpHostAgent, MemoryHostAgent, Registrar, joinFleet, startHostServer, type RunningHostServer } from "@den/host-agent";
import { type MachineTls, certInfo, identityOf, initCa, issueMachine, readMachineTls } from "@den/pki";
import { host } from "@den/protocol";
import { loadConfig, openStore, startServer, type RunningServer } from "../src/index.js";
import { ADMIN_KEY, CLI, client, exited, freePorts, stopProcess, waitFor } from "./helpers.js";

const TTL_HOURS = 0.004; // 14.4 s: renewed about every 10 s
const tmp = (p: string) => mkdtempSync(join(tmpdir(), p));

describe("a fleet over mutual TLS", () => {
  const dirs: string[] = [];
  const mk = (p: string) => (dirs.push(tmp(p)), dirs.at(-1)!);
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  let fleetUrl: string;
  let storeDir: string;
  let hostA: ChildProcess | undefined;
  let hostADir: string;
  let hostAId: string;
  let hostB: { agent: MemoryHostAgent; server: RunningHostServer; registrar: Registrar; tls: MachineTls } | undefined;
  let err = "";

  before(async () => {
    const caDir = mk("den-ca-");
    await initCa(caDir);
    storeDir = mk("den-store-");
    const [fleetPort] = await freePorts(1);
    const config = loadConfig({ port: "0", dataDir: mk("den-cp-") }, {
      DEN_API_KEY: ADMIN_KEY, DEN_HOST_AGENT_URL: "registered", DEN_CA_DIR: caDir, DEN_CERT_TTL_HOURS: String(TTL_HOURS), DEN_FLEET_PORT: String(fleetPort),
      DEN_ENVD_PORT: "off", DEN_STORE_DIR: storeDir, DEN_REAPER_INTERVAL_MS: "200", DEN_HOST_LEASE_SECONDS: "2", DEN_HOST_LOST_GRACE_SECONDS: "1",
    });
    server = await startServer(config);
    api = client(server.url);
    fleetUrl = server.fleetUrl!;
    assert.match(fleetUrl, /^https:\/\//);
  });
  after(async () => {
    await stopProcess(hostA, "SIGKILL");
    hostB?.registrar.stop();
    await hostB?.server.close();
    hostB?.agent.close();
    await server?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  const token = async (ttl?: number) => {
    const r = await api("POST", "/v1/hosts/tokens", ttl ? { ttl_seconds: ttl } : {});
    assert.equal(r.status, 201, r.text);
    return r.body.token as string;
  };
  const hostEntry = async (id: string) => ((await api("GET", "/v1/hosts")).body.hosts as Array<Record<string, any>>).find((h) => h.id === id);
  /** A raw POST to the hosts' listener with whatever certificate (or none), trusting nothing. */
  const raw = (path: string, body: unknown, cert?: { key: string; cert: string }) => new Promise<{ status: number; body: any }>((resolve, reject) => {
    const req = https.request(new URL(path, fleetUrl), { method: "POST", rejectUnauthorized: false, agent: false, ...(cert ?? {}), headers: { "content-type": "application/json" }, timeout: 10_000 }, (res) => {
      let text = "";
      res.on("data", (c) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
  const heartbeat = (id: string, address = "https://127.0.0.1:1") => ({
    id, address, protocol: host.PROTOCOL_VERSION, kind: { qemuVersion: "0", accelerator: "kvm", cpuModel: "x", arch: "x86_64" },
    capacity: { capacity: { memoryMb: 1024, vcpus: 2, diskReserveMb: 0 }, used: { memoryMb: 0, vcpus: 0, sandboxes: 0 } },
  });

  test("a host joins with a token (den host run --join) and registers over mutual TLS; no secret anywhere", async () => {
    hostADir = mk("den-host-a-");
    const [port] = await freePorts(1);
    const env: NodeJS.ProcessEnv = { ...process.env, DEN_DATA_DIR: hostADir, DEN_STORE_DIR: storeDir, DEN_LOG_LEVEL: "warn", DEN_HOST_HEARTBEAT_MS: "300" };
    delete env.DEN_HOST_SECRET;
    delete env.DEN_CA_DIR;
    hostA = spawn(process.execPath, [CLI, "host", "run", "--memory", "--port", String(port), "--join", await token(), "--control-plane", fleetUrl], { env, stdio: ["ignore", "ignore", "pipe"] });
    hostA.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
    const tlsDir = join(hostADir, "identity");
    const tls = await waitFor("host A's identity", async () => {
      if (exited(hostA!)) throw new Error(`den host run exited: ${err}`);
      try {
        return readMachineTls(tlsDir);
      } catch {
        return undefined;
      }
    });
    assert.equal(statSync(join(tlsDir, "key.pem")).mode & 0o777, 0o600);
    hostAId = identityOf(tls.cert)!.id;
    const entry = await waitFor("host A up", async () => {
      const e = await hostEntry(hostAId);
      return e?.status === "up" ? e : undefined;
    });
    assert.match(entry.url, /^https:\/\/127\.0\.0\.1:/);
    assert.ok(entry.cert_expires_at && Math.abs(Date.parse(entry.cert_expires_at) - certInfo(tls.cert).notAfter) < 20_000, JSON.stringify(entry));
    // The control plane reaches it over TLS: a sandbox on it runs commands.
    const sbx = await api("POST", "/v1/sandboxes", {});
    assert.equal(sbx.status, 201, sbx.text);
    const run = await api("POST", `/v1/sandboxes/${sbx.body.id}/exec`, { cmd: "echo hi" });
    assert.equal(run.status, 200, run.text);
    // The host's own port takes no one without a control plane's certificate of the CA.
    await assert.rejects(fetch(`${entry.url.replace("https", "http")}/host/v1/info`));
    const metrics = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    assert.match(await metrics.text(), new RegExp(`den_host_cert_expiry_days\\{host="${hostAId}"\\} 0\\.000`));
  });

  test("a used token and an expired one are refused; a join checks the CA against the token's pin", async () => {
    const t = await token();
    const first = await joinFleet(fleetUrl, t, "den_joiner1");
    assert.deepEqual(identityOf(first.cert), { kind: "host", id: "den_joiner1" });
    await assert.rejects(joinFleet(fleetUrl, t, "den_joiner2"), /refused the join \(401\): invalid, used or expired join token/);
    const short = await token(1);
    await new Promise((r) => setTimeout(r, 1500));
    await assert.rejects(joinFleet(fleetUrl, short, "den_joiner3"), /refused the join \(401\)/);
    // A token whose pin names another CA: this control plane's CA is not the pinned one, and the token is never sent.
    const other = await initCa(mk("den-other-ca-"));
    const forged = (await token()).replace(/\.[0-9a-f]{16}$/, `.${other.fingerprint.slice(0, 16)}`);
    await assert.rejects(joinFleet(fleetUrl, forged, "den_joiner4"), /CA is not the one the join token names: the token was not sent/);
  });

  test("a join to someone in between (another CA's server, serving its own CA) sends them no token", async () => {
    const other = await initCa(mk("den-mitm-ca-"));
    const fake = await issueMachine(other, { kind: "control-plane", id: "rep_mitm" }, { ttlHours: 1 });
    const seen: string[] = [];
    const mitm = https.createServer({ key: fake.key, cert: fake.cert }, (req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.setHeader("content-type", "application/json");
      res.end(req.url === host.registration.ca.path ? JSON.stringify({ ca: other.certPem }) : "{}");
    });
    await new Promise<void>((r) => mitm.listen(0, "127.0.0.1", r));
    try {
      const port = (mitm.address() as { port: number }).port;
      await assert.rejects(joinFleet(`https://127.0.0.1:${port}`, await token(), "den_joiner5"), /CA is not the one the join token names/);
      assert.deepEqual(seen, [`GET ${host.registration.ca.path}`], "only the CA was asked for: the token never left");
    } finally {
      mitm.close();
    }
  });

  test("host A's certificate in a heartbeat (or drain) for host B is refused; so are another CA's certificate, none, and plain HTTP", async () => {
    const a = readMachineTls(join(hostADir, "identity"));
    const asB = await raw(host.registration.heartbeat.path, heartbeat("den_someone_else"), a);
    assert.equal(asB.status, 403, JSON.stringify(asB.body));
    assert.equal(asB.body.error.code, "forbidden");
    assert.match(asB.body.error.message, new RegExp(`host ${hostAId}'s: it does not speak for host den_someone_else`));
    const drain = await raw(host.registration.drain.path.replace(":id", "den_someone_else"), {}, a);
    assert.equal(drain.status, 403);
    assert.equal(await hostEntry("den_someone_else"), undefined, "no host B was registered");
    // Its own heartbeat over the same raw path is taken (the refusal above is the id's, not the transport's).
    const own = await raw(host.registration.heartbeat.path, heartbeat(hostAId, (await hostEntry(hostAId))!.url), a);
    assert.equal(own.status, 200, JSON.stringify(own.body));
    // http:// addresses are refused: this control plane reaches its hosts over TLS only.
    const plainAddress = await raw(host.registration.heartbeat.path, heartbeat(hostAId, "http://127.0.0.1:1"), a);
    assert.equal(plainAddress.status, 400);

    const other = await initCa(mk("den-other-ca-"));
    const forged = await issueMachine(other, { kind: "host", id: hostAId }, { ttlHours: 1 });
    const foreign = await raw(host.registration.heartbeat.path, heartbeat(hostAId), forged);
    assert.equal(foreign.status, 401, JSON.stringify(foreign.body));
    const none = await raw(host.registration.heartbeat.path, heartbeat(hostAId));
    assert.equal(none.status, 401);
    const renewNone = await raw(host.registration.renew.path, { csr: "x" });
    assert.equal(renewNone.status, 401);
    await assert.rejects(fetch(fleetUrl.replace("https", "http") + host.registration.heartbeat.path, { method: "POST", body: "{}" }));
    // The public API takes no host calls and no joins once the fleet speaks TLS (never the old secret path).
    for (const path of [host.registration.heartbeat.path, host.registration.join.path]) {
      const r = await fetch(server.url + path, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer anything" }, body: JSON.stringify(heartbeat(hostAId)) });
      assert.equal(r.status, 404, path);
    }
  });

  test("a revoked host: refused from then on, no more calls sent to it, its sandbox lost after lease and grace", async () => {
    const agent = await MemoryHostAgent.open({ store: openStore(loadConfig({}, { DEN_STORE_DIR: storeDir })), capacity: { memoryMb: 4096, vcpus: 4, diskReserveMb: 0, memoryReserveMb: 0, memoryOvercommit: 1 } as never });
    const tls = await joinFleet(fleetUrl, await token(), agent.instance);
    const hs = await startHostServer(agent, { tls, port: 0, host: "127.0.0.1" });
    let calls = 0;
    hs.app.server.on("request", () => calls++);
    const registrar = new Registrar(agent, { controlPlanes: [fleetUrl], link: { tls, peer: { kind: "control-plane" } }, address: hs.url, intervalMs: 300 });
    hostB = { agent, server: hs, registrar, tls };
    await registrar.start();
    await waitFor("host B up", async () => ((await hostEntry(agent.instance))?.status === "up" ? true : undefined));
    // Its sandbox: host A is drained for the create, so B takes it.
    assert.equal((await api("POST", `/v1/hosts/${hostAId}/drain`, {})).status, 202);
    const sbx = await api("POST", "/v1/sandboxes", {});
    assert.equal(sbx.status, 201, sbx.text);
    assert.equal((await server.cp.store.sandboxes.get(sbx.body.id))!.host_id, agent.instance);
    assert.equal((await api("POST", `/v1/hosts/${hostAId}/undrain`, {})).status, 204);

    const r = await api("POST", `/v1/hosts/${agent.instance}/revoke`, {});
    assert.equal(r.status, 200, r.text);
    assert.ok(r.body.revoked >= 1);
    const hb = await raw(host.registration.heartbeat.path, heartbeat(agent.instance, hs.url), tls);
    assert.equal(hb.status, 403);
    assert.match(hb.body.error.message, /revoked/);
    const renew = await raw(host.registration.renew.path, { csr: "x".repeat(10) }, tls);
    assert.equal(renew.status, 403);
    const before = calls;
    // Whatever the control plane does now (a host list asks every usable host), nothing goes to B.
    const exec = await api("POST", `/v1/sandboxes/${sbx.body.id}/exec`, { cmd: "echo hi" });
    assert.notEqual(exec.status, 200);
    assert.equal((await hostEntry(agent.instance))!.status, "unreachable");
    await waitFor("its sandbox lost", async () => ((await api("GET", `/v1/sandboxes/${sbx.body.id}`)).body.state === "lost" ? true : undefined), 15_000);
    assert.equal(calls, before, "no call reached the revoked host");
    assert.equal(registrar.state, "up", "its last accepted heartbeat; none since");
    await assert.rejects(joinFleet(fleetUrl, await token(), agent.instance), /revoked/);
  });

  test("certificates are renewed before they expire (host and control plane) while a sandbox keeps running", async () => {
    const sbx = await api("POST", "/v1/sandboxes", {});
    assert.equal(sbx.status, 201, sbx.text);
    assert.equal((await server.cp.store.sandboxes.get(sbx.body.id))!.host_id, hostAId);
    const first = readMachineTls(join(hostADir, "identity"));
    const firstEnd = certInfo(first.cert).notAfter;
    const cpFirst = server.fleetIdentity!.tls.cert;
    // Past the first certificate's expiry, everything still works: both ends renewed.
    await waitFor("the first certificate expired", async () => (Date.now() > firstEnd + 1000 ? true : undefined), 30_000, 500);
    const now = readMachineTls(join(hostADir, "identity"));
    assert.notEqual(now.cert, first.cert, "host A renewed its certificate");
    assert.notEqual(now.key, first.key, "with a new key");
    assert.deepEqual(identityOf(now.cert), { kind: "host", id: hostAId });
    assert.notEqual(server.fleetIdentity!.tls.cert, cpFirst, "the control plane renewed its own");
    const rows = await server.cp.store.machineCerts.ofMachine("host", hostAId);
    assert.ok(rows.length >= 2, `${rows.length} certificates recorded`);
    assert.equal((await hostEntry(hostAId))!.status, "up");
    const run = await api("POST", `/v1/sandboxes/${sbx.body.id}/exec`, { cmd: "echo still" });
    assert.equal(run.status, 200, run.text);
    assert.equal((await api("GET", `/v1/sandboxes/${sbx.body.id}`)).body.state, "running");
    assert.ok(!exited(hostA!), err);
  });

  test("a second replica with no CA joins with a control-plane token through the first (den serve --join --peers), a host takes its calls, and it renews through its peer", async () => {
    const t = await api("POST", "/v1/hosts/tokens", { kind: "control-plane" });
    assert.equal(t.status, 201, t.text);
    const dataDir = mk("den-cp2-");
    const [fleetPort] = await freePorts(1);
    let second = await startServer(loadConfig({ port: "0", dataDir, join: t.body.token, peers: fleetUrl }, {
      DEN_API_KEY: ADMIN_KEY, DEN_HOST_AGENT_URL: "registered", DEN_FLEET_PORT: String(fleetPort), DEN_ENVD_PORT: "off", DEN_STORE_DIR: storeDir,
    }));
    try {
      const id = second.fleetIdentity!;
      assert.equal(id.identity.kind, "control-plane");
      const files = readMachineTls(join(dataDir, "identity"));
      assert.equal(files.cert, id.tls.cert, "its identity is written for the next start (which needs no token)");
      // A host of the deployment takes its calls: the joined certificate is a control plane's of the CA.
      const hostUrl = (await hostEntry(hostAId))!.url as string;
      const link = await HttpHostAgent.connect(hostUrl, { tls: id.tls, peer: { kind: "host", id: hostAId } });
      assert.equal((await link.inventory()).instance, hostAId);
      link.close();
      // Without the CA it renews through its peer (the first replica's renew route).
      const before = id.tls.cert;
      await waitFor("the second replica's renewed certificate", async () => (id.tls.cert !== before ? true : undefined), 30_000, 500);
      assert.deepEqual(identityOf(id.tls.cert), id.identity);
      assert.equal(readMachineTls(join(dataDir, "identity")).cert, id.tls.cert, "the renewal is written too");
      // The next start needs no token: it finds its identity in its data dir.
      await second.close();
      second = await startServer(loadConfig({ port: "0", dataDir }, {
        DEN_API_KEY: ADMIN_KEY, DEN_HOST_AGENT_URL: "registered", DEN_FLEET_PORT: String(fleetPort), DEN_ENVD_PORT: "off", DEN_STORE_DIR: storeDir,
      }));
      assert.equal(second.fleetIdentity!.tls.cert, readMachineTls(join(dataDir, "identity")).cert);
      // A used token is not a second identity: a replica with no files and that token is refused.
      await assert.rejects(startServer(loadConfig({ port: "0", dataDir: mk("den-cp3-"), join: t.body.token, peers: fleetUrl }, {
        DEN_API_KEY: ADMIN_KEY, DEN_HOST_AGENT_URL: "registered", DEN_FLEET_PORT: "0", DEN_ENVD_PORT: "off", DEN_STORE_DIR: storeDir,
      })), /could not join the deployment .*401/);
    } finally {
      await second.close();
    }
  });
});
