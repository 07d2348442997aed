// needs: one VM
import { test } from "node:test";
import assert from "node:assert/strict";
import { DenError, type HostAgent, type TransferEvent } from "@den/protocol";
import { Runtime } from "@den/runtime";
import { issueMachine, newCa, type MachineTls } from "@den/pki";
import { HostHttp, HttpHostAgent, buildHostServer, startHostServer } from "../src/index.js";

/** The deployment of these tests: a CA made in memory, the host's certificate and a control plane's. */
const ca = await newCa();
const hostTls = await issueMachine(ca, { kind: "host", id: "inst-test" }, { ttlHours: 1 });
const cpTls = await issueMachine(ca, { kind: "control-plane", id: "rep_test" }, { ttlHours: 1 });
const asControlPlane = (tls: MachineTls = cpTls) => ({ tls, peer: { kind: "host" as const } });
const serve = (agent: HostAgent) => startHostServer(agent, { tls: hostTls, port: 0, host: "127.0.0.1" });

/** Calls a test gives, and the rest failing as a bug would. */
function answering(calls: Record<string | symbol, unknown>, where: string): Record<string | symbol, unknown> {
  return new Proxy(calls, {
    get: (t, k) => (k in t ? t[k] : async () => { throw new Error(`unexpected call ${where}${String(k)}`); }),
    set: (t, k, v) => ((t[k] = v), true),
  });
}

type Fake = Partial<Record<Exclude<keyof HostAgent, "vms" | "volumes" | "templates" | "snapshots">, unknown>> & {
  [S in "vms" | "volumes" | "templates" | "snapshots"]?: Partial<Record<keyof HostAgent[S], unknown>>;
};

/** A host agent that answers the few calls a test gives it (by sub-service) and fails the rest as a bug would. */
function fakeAgent(calls: Fake): HostAgent {
  const { vms, volumes, templates, snapshots, ...top } = calls;
  const services = { vms, volumes, templates, snapshots };
  const base: Record<string | symbol, unknown> = { instance: "inst-test", address: "local", onTransfer: undefined, close: () => undefined, ...top };
  for (const [name, given] of Object.entries(services)) base[name] = answering({ ...given }, `${name}.`);
  return answering(base, "") as unknown as HostAgent;
}

test("a request with no verified certificate is a 401 whatever it carries (a bearer token of the retired shared secret too)", async () => {
  // inject() has no TLS socket: what a request that somehow skipped the handshake would look like.
  const app = await buildHostServer(fakeAgent({ inventory: async () => ({ instance: "inst-test", vms: [], snapshots: [] }) }), { tls: hostTls });
  try {
    for (const authorization of [undefined, "Bearer a-long-enough-old-host-secret", "Basic eDp5"]) {
      const r = await app.inject({ method: "GET", url: "/host/v1/inventory", headers: authorization ? { authorization } : {} });
      assert.equal(r.statusCode, 401, `authorization ${authorization}`);
      assert.equal(r.json().error.code, "unauthorized");
    }
    // Unknown routes are no way around it either.
    assert.equal((await app.inject({ method: "GET", url: "/host/v1/nope" })).statusCode, 401);
  } finally {
    await app.close();
  }
});

test("the capacity and CPU routes of before answer from the inventory", async () => {
  const capacity = { capacity: { memoryMb: 1024, vcpus: 4, diskReserveMb: 0 }, used: { vcpus: 1, memoryMb: 256, sandboxes: 1 } };
  const inventory = { instance: "inst-test", vms: [{ id: "sbx_a", state: "running", cpuSeconds: 1.5 }], snapshots: [], capacity };
  const server = await serve(fakeAgent({ inventory: async () => inventory }));
  const http = new HostHttp(server.url, asControlPlane());
  try {
    const get = async (url: string) => (await http.request("GET", url)).json();
    assert.deepEqual(await get("/host/v1/capacity"), capacity);
    assert.deepEqual(await get("/host/v1/vms/sbx_a/cpu"), { cpuSeconds: 1.5 });
    assert.deepEqual(await get("/host/v1/vms/sbx_b/cpu"), { cpuSeconds: null });
  } finally {
    http.close();
    await server.close();
  }
});

test("a DenError thrown by the host comes back to the client as the same DenError; a bug as internal; a bad body as invalid_argument", async () => {
  let transfer: ((t: TransferEvent) => void) | undefined;
  const agent = fakeAgent({
    vms: {
      checkShape: async () => {
        throw new DenError("capacity_exhausted", "this host cannot hold it", { resource: "memory", used_mb: 10, capacity_mb: 8 });
      },
      destroy: async () => {
        throw new Error("ENOENT: a bug, with a path /var/lib/secret");
      },
    },
    templates: { list: async () => [{ name: "base", version: "v1", current: true, vcpus: 1, memory_mb: 512, disk_mb: 2048, created_at: "2026-01-01T00:00:00.000Z" }] },
  });
  const server = await serve(agent);
  transfer = agent.onTransfer;
  const client = await HttpHostAgent.connect(server.url, asControlPlane());
  try {
    assert.equal(client.instance, "inst-test");
    assert.equal(client.address, server.url);
    await assert.rejects(client.vms.checkShape({ vcpus: 1, memoryMb: 512 }), (e: unknown) => {
      assert.ok(e instanceof DenError);
      assert.equal(e.code, "capacity_exhausted");
      assert.equal(e.status, 503);
      assert.equal(e.message, "this host cannot hold it");
      assert.deepEqual(e.details, { resource: "memory", used_mb: 10, capacity_mb: 8 });
      return true;
    });
    await assert.rejects(client.vms.destroy("sbx_x"), (e: unknown) => e instanceof DenError && e.code === "internal" && !e.message.includes("/var/lib"));
    // Ids that could name files outside the host's dirs never reach it.
    await assert.rejects(client.vms.destroy(".."), (e: unknown) => e instanceof DenError && e.code === "invalid_argument");
    assert.deepEqual((await client.templates.list()).map((t) => t.name), ["base"]);

    // Transfer progress reaches the client's onTransfer through the event stream.
    const got = new Promise<TransferEvent>((resolve) => (client.onTransfer = resolve));
    const ev: TransferEvent = { sandbox: "sbx_a", snapshot: "snap_b", direction: "upload", file: "state.bin", bytes: 5, total: 10, done: false };
    for (let i = 0; i < 50 && !(await Promise.race([got.then(() => true), new Promise((r) => setTimeout(() => r(false), 100))])); i++) transfer?.(ev);
    assert.deepEqual(await got, ev);

    // A host's certificate as the caller (the deployment's, not a control plane's): a clear forbidden at connect.
    await assert.rejects(HttpHostAgent.connect(server.url, asControlPlane(await issueMachine(ca, { kind: "host", id: "inst-other" }, { ttlHours: 1 }))), (e: unknown) => e instanceof DenError && e.code === "forbidden");
    // Nobody listening: agent_unavailable, not a raw fetch error.
    await assert.rejects(HttpHostAgent.connect("https://127.0.0.1:9", asControlPlane()), (e: unknown) => e instanceof DenError && e.code === "agent_unavailable");
  } finally {
    client.close();
    await server.close();
  }
});

test("a request body off the protocol is refused before the agent sees it", async () => {
  const server = await serve(fakeAgent({}));
  const http = new HostHttp(server.url, asControlPlane());
  try {
    await assert.rejects(http.request("POST", "/host/v1/collect", { json: { snapshots: {}, pins: [] } }), (e: unknown) => e instanceof DenError && e.code === "invalid_argument" && e.status === 400);
  } finally {
    http.close();
    await server.close();
  }
});

test("the guest over the HTTP hop: exec as a user in every mode, files it owns, xattrs and metrics (a real VM)", async () => {
  const dataDir = process.env.DEN_DATA_DIR;
  if (!dataDir) throw new Error("DEN_DATA_DIR is not set: run the suite with `npm test`");
  const rt = await Runtime.open({ dataDir });
  const sbx = await rt.create({ template: "base" });
  // The runtime's real Sandbox behind the real host routes; the client is HttpGuest.
  const server = await serve(fakeAgent({ guest: (id: string) => rt.get(id) }));
  const client = await HttpHostAgent.connect(server.url, asControlPlane());
  const code = (c: string) => (e: unknown) => e instanceof DenError && e.code === c;
  try {
    const g = client.guest(sbx.id);
    const r = await g.exec("id -un; pwd; umask", { user: "user" });
    assert.equal(r.stdout.toString(), "user\n/home/user\n0022\n");
    assert.equal((await g.exec("id -un; pwd")).stdout.toString(), "root\n/\n", "no user: root, as /v1 always had it");
    const p = await g.execStream(["id", "-u"], { user: "user" });
    let out = "";
    for await (const c of p) out += c.data.toString();
    assert.equal(out, "1000\n");
    const bg = await g.spawn(["sh", "-c", "echo $HOME"], { user: "user" });
    assert.equal((await g.processes.wait(bg.proc, 10_000)).running, false);
    assert.equal(Buffer.from((await g.processes.read(bg.proc, "stdout")).data, "base64").toString(), "/home/user\n");
    await assert.rejects(g.exec("true", { user: "nosuch" }), code("invalid_argument"));
    await assert.rejects(g.exec("true", { user: "u".repeat(33) }), code("invalid_argument"));

    assert.equal(await g.files.write("/home/user/h/f.txt", "hi", { user: "user" }), 2);
    const st = await g.files.stat("/home/user/h/f.txt");
    assert.deepEqual([st.uid, st.gid, st.mode & 0o777], [1000, 1000, 0o644]);
    assert.equal((await g.files.stat("/home/user/h")).uid, 1000);
    await g.files.mkdir("/home/user/m", { user: "user", mode: 0o700 });
    const dm = await g.files.stat("/home/user/m");
    assert.deepEqual([dm.uid, dm.mode & 0o777], [1000, 0o700]);
    await assert.rejects(g.files.mkdir("/home/user/n", { user: "nosuch" }), code("invalid_argument"));

    await g.files.setXattrs("/home/user/h/f.txt", { "user.e2b.a": "1", "user.e2b.b": "zwei ✓" });
    assert.deepEqual(await g.files.getXattrs("/home/user/h/f.txt"), { "user.e2b.a": "1", "user.e2b.b": "zwei ✓" });
    await assert.rejects(g.files.setXattrs("/home/user/h/f.txt", { "trusted.x": "v" }), code("invalid_argument"));
    await assert.rejects(g.files.getXattrs("/home/user/none"), code("file_not_found"));

    const m = await g.metrics();
    assert.equal(m.cpuCount, sbx.info.vcpus);
    assert.ok(m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100);
    assert.ok(m.memTotalBytes > 300 * 1024 * 1024 && m.memUsedBytes > 0 && m.memUsedBytes < m.memTotalBytes);
    assert.ok(m.diskTotalBytes > m.diskUsedBytes && m.diskUsedBytes > 0);
    assert.ok(Math.abs(m.timestampMs - Date.now()) < 10_000);
  } finally {
    client.close();
    await server.close();
    await sbx.destroy();
    rt.close();
  }
});
