// needs: memory host, the e2b client
/**
 * E2B's port traffic on the envd listener (`E2b-Sandbox-Id` + `E2b-Sandbox-Port`, as
 * `@e2b/code-interpreter` >= 2.7 sends it): forwarded through the port proxy to a test HTTP
 * server the in-memory guest's port is joined to, streamed, authorized as E2B's ports are,
 * with the sandbox's env for the code port; envd's `GET /envs`; and `e2b_` keys, which the
 * Python `e2b` client insists on.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import type { Duplex } from "node:stream";
import { Sandbox } from "e2b";
import { Sandbox as CodeSandbox, TimeoutError } from "@e2b/code-interpreter";
import { envdHttpServer } from "../src/e2b/envd/listener.js";
import { parseSandboxEnvHeader } from "../src/ports/code-port.js";
import { ADMIN_KEY, memoryServer, type MemoryServer } from "./helpers.js";

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One HTTP request (any Host header, raw control of headers), its whole answer. */
function request(base: string, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(path, base), { method, headers, agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on("data", (c: Buffer) => parts.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("E2B's port traffic on the envd listener, on the memory host", () => {
  let m: MemoryServer;
  let envd: string;
  let guestHttp: http.Server;
  let guestPort = 0;
  const seen: Seen[] = [];
  /** Set by the streaming route: the rest of its answer waits for it. */
  let releaseStream: (() => void) | undefined;
  let otherKey = "";

  before(async () => {
    m = await memoryServer();
    envd = m.server.envdUrl!;
    guestHttp = http.createServer((req, res) => {
      const parts: Buffer[] = [];
      req.on("data", (c: Buffer) => parts.push(c));
      req.on("end", () => {
        seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(parts).toString("utf8") });
        if (req.url!.split("?")[0] === "/execute") {
          // The code interpreter's answer: a line now, the rest a moment later.
          const line = (o: unknown) => res.write(`${JSON.stringify(o)}\n`);
          res.writeHead(200, { "content-type": "application/x-ndjson" });
          line({ type: "stdout", text: "working\n", timestamp: new Date().toISOString() });
          setTimeout(() => {
            line({ type: "result", text: "42", is_main_result: true });
            line({ type: "number_of_executions", execution_count: 1 });
            res.end(`${JSON.stringify({ type: "end_of_execution" })}\n`);
          }, 400);
          return;
        }
        if (req.url === "/stream") {
          res.writeHead(200, { "content-type": "application/x-ndjson" });
          res.write(`${JSON.stringify({ type: "stdout", text: "first" })}\n`);
          releaseStream = () => res.end(`${JSON.stringify({ type: "end_of_execution" })}\n`);
          return;
        }
        res.writeHead(200, { "content-type": "application/json", "x-guest": "yes" }).end(JSON.stringify({ ok: true, url: req.url }));
      });
    });
    guestHttp.on("upgrade", (req, socket: Duplex) => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: "" });
      socket.write("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n");
      socket.on("data", (d: Buffer) => socket.write(`echo:${d}`));
      // As a WebSocket server does: the client gone, the connection ends.
      socket.on("end", () => socket.end());
    });
    await new Promise<void>((r) => guestHttp.listen(0, "127.0.0.1", r));
    guestPort = (guestHttp.address() as net.AddressInfo).port;
    const other = await m.api("POST", "/v1/keys", { owner: "someone-else" });
    otherKey = other.body.key as string;
  });

  after(async () => {
    for (const c of bridged) c.destroy();
    guestHttp?.closeAllConnections();
    guestHttp?.close();
    await m?.close();
  });

  /** The test server's ends of the guest's connections (an upgraded one outlives its server's close). */
  const bridged = new Set<net.Socket>();
  /** The guest's port joined to the test's HTTP server (a tunnel per connection). */
  const serve = (id: string, port: number) => m.host.listen(id, port, (socket) => {
    const c = net.connect(guestPort, "127.0.0.1");
    bridged.add(c);
    c.on("close", () => bridged.delete(c));
    socket.pipe(c);
    c.pipe(socket);
    c.on("error", () => socket.destroy());
    socket.on("error", () => c.destroy());
    socket.on("close", () => c.destroy());
  });

  /** A sandbox made through E2B's REST API. */
  const create = async (body: Record<string, unknown> = {}, key = ADMIN_KEY) => {
    const r = await request(m.server.url, "POST", "/v2/sandboxes", { "x-api-key": key, "content-type": "application/json" }, JSON.stringify({ templateID: "base", ...body }));
    assert.equal(r.status, 201, r.body);
    return JSON.parse(r.body) as { sandboxID: string; envdAccessToken: string; trafficAccessToken: string | null };
  };

  const last = () => seen[seen.length - 1]!;

  test("a request naming port 49999 reaches the guest's server: method, path, query, body, headers, the sandbox's env; no credentials", async () => {
    const sbx = await create({ envVars: { GREETING: "hi", PATH_EXTRA: "/opt/x" } });
    serve(sbx.sandboxID, 49999);
    const forged = Buffer.from(JSON.stringify({ GREETING: "forged" })).toString("base64");
    const r = await request(envd, "POST", "/run?source=ci&x=1", {
      "content-type": "application/json", "e2b-sandbox-id": sbx.sandboxID, "e2b-sandbox-port": "49999",
      "x-access-token": sbx.envdAccessToken, "x-api-key": ADMIN_KEY, "x-custom": "kept", "x-den-sandbox-env": forged,
    }, JSON.stringify({ code: "print(1)" }));
    assert.equal(r.status, 200, r.body);
    assert.equal(r.headers["x-guest"], "yes");
    assert.deepEqual(JSON.parse(r.body), { ok: true, url: "/run?source=ci&x=1" });
    const s = last();
    assert.equal(s.method, "POST");
    assert.equal(s.url, "/run?source=ci&x=1");
    assert.equal(s.body, JSON.stringify({ code: "print(1)" }));
    assert.equal(s.headers["x-custom"], "kept");
    assert.equal(s.headers["content-type"], "application/json");
    assert.deepEqual(parseSandboxEnvHeader(String(s.headers["x-den-sandbox-env"])), { GREETING: "hi", PATH_EXTRA: "/opt/x" }, "Den's env header, not the client's");
    for (const h of ["x-access-token", "x-api-key", "authorization", "e2b-sandbox-id", "e2b-sandbox-port", "e2b-traffic-access-token"]) assert.equal(s.headers[h], undefined, `${h} is not forwarded`);

    // A Den key in Authorization opens it too and stays out of the guest.
    const withKey = await request(envd, "GET", "/contexts", { "e2b-sandbox-id": sbx.sandboxID, "e2b-sandbox-port": "49999", authorization: `Bearer ${ADMIN_KEY}` });
    assert.equal(withKey.status, 200, withKey.body);
    assert.equal(last().headers.authorization, undefined);

    // Another port: forwarded as it is, no env header.
    serve(sbx.sandboxID, 8080);
    const other = await request(envd, "GET", "/app", { "e2b-sandbox-id": sbx.sandboxID, "e2b-sandbox-port": "8080", "x-den-sandbox-env": "client's" });
    assert.equal(other.status, 200, other.body);
    assert.equal(last().url, "/app");
    assert.equal(last().headers["x-den-sandbox-env"], "client's");

    // envd's own port is envd's.
    const health = await request(envd, "GET", "/health", { "e2b-sandbox-id": sbx.sandboxID, "e2b-sandbox-port": "49983", "x-access-token": sbx.envdAccessToken });
    assert.equal(health.status, 204);
    const bad = await request(envd, "GET", "/", { "e2b-sandbox-id": sbx.sandboxID, "e2b-sandbox-port": "http" });
    assert.equal(bad.status, 400);

    // The older clients' form, https://49999-<id>.<domain>: the port proxy's virtual host on the API's port.
    const host = `49999-${sbx.sandboxID}.localhost`;
    const vhost = await request(m.server.url, "GET", "/health?y=2", { host });
    assert.equal(vhost.status, 200, vhost.body);
    assert.equal(last().url, "/health?y=2");
    assert.equal((await request(m.server.url, "POST", "/execute", { host })).status, 401, "running code there takes the envd token too");
    assert.equal((await request(m.server.url, "POST", "/execute", { host, "x-access-token": sbx.envdAccessToken })).status, 200);
  });

  test("the answer streams: its first line arrives while the guest is still writing", async () => {
    const sbx = await create();
    serve(sbx.sandboxID, 49999);
    const first = await new Promise<{ line: string; res: http.IncomingMessage; rest: Promise<string> }>((resolve, reject) => {
      const req = http.request(new URL("/stream", envd), { method: "POST", agent: false, headers: { "e2b-sandbox-id": sbx.sandboxID, "e2b-sandbox-port": "49999" } }, (res) => {
        let buf = "";
        let done = false;
        let endResolve: (s: string) => void;
        const rest = new Promise<string>((r) => (endResolve = r));
        res.setEncoding("utf8");
        res.on("data", (c: string) => {
          buf += c;
          if (!done && buf.includes("\n")) {
            done = true;
            resolve({ line: buf.slice(0, buf.indexOf("\n")), res, rest });
          }
        });
        res.on("end", () => endResolve(buf));
      });
      req.on("error", reject);
      req.end("{}");
    });
    assert.deepEqual(JSON.parse(first.line), { type: "stdout", text: "first" });
    assert.ok(!first.res.complete, "the answer has not ended yet");
    assert.ok(releaseStream, "the guest is still writing");
    releaseStream!();
    const all = await first.rest;
    assert.deepEqual(all.trim().split("\n").map((l) => JSON.parse(l).type), ["stdout", "end_of_execution"]);
  });

  test("the listener's timeouts let a quiet answer last (no request timeout, no socket timeout, keep-alive past 60 s)", () => {
    const s = envdHttpServer(() => undefined);
    assert.equal(s.requestTimeout, 0);
    assert.equal(s.timeout, 0);
    assert.ok(s.keepAliveTimeout > 60_000);
  });

  test("a WebSocket-style upgrade is spliced to the port", async () => {
    const sbx = await create();
    serve(sbx.sandboxID, 6080);
    const u = new URL(envd);
    const socket = net.connect(Number(u.port), u.hostname);
    let got = "";
    socket.setEncoding("utf8");
    socket.on("data", (d: string) => (got += d));
    socket.write(`GET /ws HTTP/1.1\r\nHost: ${u.host}\r\nConnection: Upgrade\r\nUpgrade: echo\r\nE2b-Sandbox-Id: ${sbx.sandboxID}\r\nE2b-Sandbox-Port: 6080\r\n\r\n`);
    const until = async (s: string) => {
      for (let i = 0; i < 100 && !got.includes(s); i++) await new Promise((r) => setTimeout(r, 20));
      assert.ok(got.includes(s), got);
    };
    await until("101 Switching Protocols");
    socket.write("ping");
    await until("echo:ping");
    socket.destroy();
    assert.equal(last().url, "/ws");
    assert.equal(last().headers["e2b-sandbox-id"], undefined);
  });

  test("refusals: a closed port 502, an unknown or another owner's sandbox 404, a non-public one without its token 401", async () => {
    const pub = await create();
    const closed = await request(envd, "GET", "/", { "e2b-sandbox-id": pub.sandboxID, "e2b-sandbox-port": "49999" });
    assert.equal(closed.status, 502);
    assert.match(String(closed.headers["content-type"]), /^text\/plain/);
    assert.match(closed.body, /nothing listens on port 49999/);

    // Running code takes the envd token even where the ports are public (the client sends it on /execute).
    serve(pub.sandboxID, 49999);
    const ph = { "e2b-sandbox-id": pub.sandboxID, "e2b-sandbox-port": "49999" };
    assert.equal((await request(envd, "POST", "/execute", ph)).status, 401, "no envd token: no code runs");
    assert.equal((await request(envd, "POST", "/execute", { ...ph, "x-access-token": "wrong" })).status, 401);
    assert.equal((await request(envd, "POST", "/execute", { ...ph, "x-access-token": pub.envdAccessToken })).status, 200);
    assert.equal((await request(envd, "POST", "/execute", { ...ph, "x-api-key": ADMIN_KEY })).status, 200, "or the owner's key");
    assert.equal((await request(envd, "GET", "/contexts", ph)).status, 200, "the context calls are public ports' traffic");

    const unknown = await request(envd, "GET", "/", { "e2b-sandbox-id": "sbx_aaaaaaaaaaaaaaaa", "e2b-sandbox-port": "49999" });
    assert.equal(unknown.status, 404);
    assert.equal((await request(envd, "GET", "/", { "e2b-sandbox-id": "nope", "e2b-sandbox-port": "49999" })).status, 404);
    assert.equal((await request(envd, "GET", "/", { "e2b-sandbox-port": "49999" })).status, 404);

    const priv = await create({ network: { allowPublicTraffic: false } });
    assert.ok(priv.trafficAccessToken, "a non-public sandbox has a traffic token");
    serve(priv.sandboxID, 49999);
    const h = { "e2b-sandbox-id": priv.sandboxID, "e2b-sandbox-port": "49999" };
    const none = await request(envd, "GET", "/contexts", h);
    assert.equal(none.status, 401);
    assert.equal((await request(envd, "GET", "/contexts", { ...h, "e2b-traffic-access-token": "wrong" })).status, 401);
    assert.equal((await request(envd, "GET", "/contexts", { ...h, "x-access-token": priv.envdAccessToken })).status, 401, "the envd token is not a traffic token");
    const ok = await request(envd, "GET", "/contexts", { ...h, "e2b-traffic-access-token": priv.trafficAccessToken! });
    assert.equal(ok.status, 200, ok.body);
    assert.equal(last().headers["e2b-traffic-access-token"], undefined, "the traffic token stays out of the guest");
    assert.equal((await request(envd, "GET", "/contexts", { ...h, "x-api-key": ADMIN_KEY })).status, 200, "the owner's key");
    assert.equal((await request(envd, "GET", "/contexts", { ...h, "x-api-key": otherKey })).status, 404, "another owner's key finds no such sandbox");
    assert.equal((await request(envd, "GET", "/contexts", { ...h, authorization: `Bearer ${otherKey}` })).status, 404);
  });

  test("a paused sandbox: woken by its traffic with autoResume, else 502", async () => {
    const auto = await create({ autoPause: true, autoResume: { enabled: true } });
    serve(auto.sandboxID, 49999);
    const still = await create();
    serve(still.sandboxID, 49999);
    for (const s of [auto, still]) assert.equal((await request(m.server.url, "POST", `/sandboxes/${s.sandboxID}/pause`, { "x-api-key": ADMIN_KEY })).status, 204);
    const paused = await request(envd, "GET", "/health", { "e2b-sandbox-id": still.sandboxID, "e2b-sandbox-port": "49999" });
    assert.equal(paused.status, 502);
    const woken = await request(envd, "GET", "/health", { "e2b-sandbox-id": auto.sandboxID, "e2b-sandbox-port": "49999" });
    assert.equal(woken.status, 200, woken.body);
    assert.equal((await m.api("GET", `/v1/sandboxes/${auto.sandboxID}`)).body.state, "running");
  });

  test("@e2b/code-interpreter's runCode: to port 49999 through the envd listener, its output as it comes; a closed port is its TimeoutError", async () => {
    const sbx = await CodeSandbox.create("base", { apiKey: ADMIN_KEY, apiUrl: m.server.url, sandboxUrl: envd, envs: { FROM_SANDBOX: "yes" } });
    try {
      // (No request timeout: the client leaves its timer running when the answer is an error.)
      await assert.rejects(sbx.runCode("1", { requestTimeoutMs: 0 }), TimeoutError, "nothing listens yet: 502");
      serve(sbx.sandboxId, 49999);
      const t0 = Date.now();
      let firstAfter = -1;
      const run = await sbx.runCode("6*7", { onStdout: () => void (firstAfter = Date.now() - t0) });
      const total = Date.now() - t0;
      assert.deepEqual(run.logs.stdout, ["working\n"]);
      assert.equal(run.text, "42");
      assert.equal(run.executionCount, 1);
      assert.ok(firstAfter >= 0 && firstAfter < total - 200, `the first line (${firstAfter} ms) came before the rest (${total} ms)`);
      const s = last();
      assert.equal(s.url.split("?")[0], "/execute");
      assert.equal(JSON.parse(s.body).code, "6*7");
      assert.deepEqual(parseSandboxEnvHeader(String(s.headers["x-den-sandbox-env"])), { FROM_SANDBOX: "yes" });
      assert.equal(s.headers["x-access-token"], undefined);
    } finally {
      await sbx.kill();
    }
  });

  test("GET /envs: the sandbox's env vars, behind envd's credentials", async () => {
    const sbx = await create({ envVars: { A: "1", B: "two" } });
    const r = await request(envd, "GET", "/envs", { "e2b-sandbox-id": sbx.sandboxID, "x-access-token": sbx.envdAccessToken });
    assert.equal(r.status, 200, r.body);
    assert.deepEqual(JSON.parse(r.body), { A: "1", B: "two" });
    assert.equal((await request(envd, "GET", "/envs", { "e2b-sandbox-id": sbx.sandboxID })).status, 401);
  });

  test("e2b_ keys: minted by /v1/keys with format e2b, accepted on /v1, E2B's REST and by the e2b client", async () => {
    const created = await m.api("POST", "/v1/keys", { owner: "py-agents", format: "e2b" });
    assert.equal(created.status, 201, created.text);
    const key = created.body.key as string;
    assert.match(key, /^e2b_[0-9a-f]{48}$/);
    assert.match((await m.api("POST", "/v1/keys", { owner: "py-agents" })).body.key, /^den_[A-Za-z0-9_-]{32}$/, "den_ stays the default");
    assert.equal((await m.api("POST", "/v1/keys", { owner: "py-agents", format: "other" })).status, 400);

    const v1 = await fetch(`${m.server.url}/v1/sandboxes`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(v1.status, 200);
    const rest = await fetch(`${m.server.url}/v2/sandboxes`, { headers: { "x-api-key": key } });
    assert.equal(rest.status, 200);
    assert.deepEqual(await rest.json(), []);

    const sbx = await Sandbox.create("base", { apiKey: key, apiUrl: m.server.url, sandboxUrl: envd });
    try {
      const mine = await fetch(`${m.server.url}/v1/sandboxes/${sbx.sandboxId}`, { headers: { authorization: `Bearer ${key}` } });
      assert.equal(mine.status, 200, "the key's owner's sandbox");
      const theirs = await fetch(`${m.server.url}/v1/sandboxes/${sbx.sandboxId}`, { headers: { authorization: `Bearer ${otherKey}` } });
      assert.equal(theirs.status, 404, "not another owner's");
      await sbx.files.write("/tmp/hello.txt", "hi");
      assert.equal(await sbx.files.read("/tmp/hello.txt"), "hi", "envd takes the sandbox's token as ever");
    } finally {
      await sbx.kill();
    }
  });
});
