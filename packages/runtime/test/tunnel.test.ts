// needs: one VM
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import http from "node:http";
import type { Duplex } from "node:stream";
import type { AgentClient, Sandbox } from "../src/index.js";
import { isCode, sandboxFixture } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A GET over a fresh tunnel (HTTP/1.0 server: the response ends with the connection). */
async function get(sbx: Sandbox, port: number, path: string): Promise<{ status: number; body: Buffer; sock: Duplex }> {
  const sock = await sbx.tunnel(port);
  return new Promise((resolve, reject) => {
    const req = http.request({ path, createConnection: () => sock as never }, (res) => {
      const parts: Buffer[] = [];
      res.on("data", (d: Buffer) => parts.push(d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts), sock }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

async function waitForPort(sbx: Sandbox, port: number, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = (await sbx.listeningPorts()).find((p) => p.port === port);
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`nothing listens on guest port ${port} after ${timeoutMs} ms`);
    await sleep(100);
  }
}

/** Open fds of the guest agent, and streams its host client still tracks. */
async function leakState(sbx: Sandbox): Promise<{ agentFds: number; hostStreams: number }> {
  const agent = await sbx.agent();
  const r = await sbx.exec(`ls /proc/${agent.hello.pid}/fd | wc -l`);
  return { agentFds: Number(r.stdout.toString().trim()), hostStreams: (agent as unknown as { streams: Map<number, unknown> }).streams.size };
}

/** Sends `data` through an echo tunnel and returns what came back. */
async function echo(sock: Duplex, data: Buffer): Promise<Buffer> {
  const parts: Buffer[] = [];
  const done = new Promise<void>((resolve, reject) => {
    sock.on("data", (d: Buffer) => parts.push(d));
    sock.on("end", resolve);
    sock.on("error", reject);
  });
  for (let off = 0; off < data.length; off += 100_000) {
    if (!sock.write(data.subarray(off, off + 100_000))) await new Promise((r) => sock.once("drain", r));
  }
  sock.end();
  await done;
  return Buffer.concat(parts);
}

const ECHO_SERVER = `import socketserver
class H(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            b = self.request.recv(65536)
            if not b:
                break
            self.request.sendall(b)
        self.request.shutdown(1)
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", 9000), H).serve_forever()
`;

describe("tunnel", () => {
  const f = sandboxFixture();
  const big = randomBytes(2 * 1024 * 1024);
  let baseline: { agentFds: number; hostStreams: number };

  test("HTTP to python's http.server in the guest; a 2 MB file byte-identical", async () => {
    await f.sbx.files.write("/workspace/www/index.html", "hello from the guest\n");
    await f.sbx.files.write("/workspace/www/big.bin", big);
    await f.sbx.files.write("/workspace/echo.py", ECHO_SERVER);
    await f.sbx.spawn("exec python3 -m http.server 8000", { cwd: "/workspace/www" });
    await f.sbx.spawn("exec python3 /workspace/echo.py");
    const entry = await waitForPort(f.sbx, 8000);
    assert.equal(entry.process, "python3");
    assert.ok(entry.pid && entry.pid > 1);
    await waitForPort(f.sbx, 9000);
    // The agent holds the servers' output pipes: count from here.
    baseline = await leakState(f.sbx);

    const index = await get(f.sbx, 8000, "/index.html");
    assert.equal(index.status, 200);
    assert.equal(index.body.toString(), "hello from the guest\n");
    const file = await get(f.sbx, 8000, "/big.bin");
    assert.equal(file.status, 200);
    assert.equal(file.body.length, big.length);
    assert.ok(file.body.equals(big), "2 MB body differs");
  });

  test("4 MB echoed both ways through flow control", async () => {
    const data = randomBytes(4 * 1024 * 1024);
    const back = await echo(await f.sbx.tunnel(9000), data);
    assert.equal(back.length, data.length);
    assert.equal(createHash("sha256").update(back).digest("hex"), createHash("sha256").update(data).digest("hex"));
  });

  test("a port nobody listens on is connection_refused; bad ports and non-loopback hosts are invalid_argument", async () => {
    await assert.rejects(f.sbx.tunnel(8001), isCode("connection_refused"));
    await assert.rejects(f.sbx.tunnel(0), isCode("invalid_argument"));
    await assert.rejects(f.sbx.tunnel(65536), isCode("invalid_argument"));
    await assert.rejects(f.sbx.tunnel(8000, { host: "10.0.2.2" }), isCode("invalid_argument"));
  });

  test("several tunnels at once", async () => {
    const results = await Promise.all(Array.from({ length: 6 }, () => get(f.sbx, 8000, "/big.bin")));
    for (const r of results) assert.ok(r.body.equals(big));
    const payloads = Array.from({ length: 4 }, () => randomBytes(512 * 1024));
    const echoed = await Promise.all(payloads.map(async (p) => echo(await f.sbx.tunnel(9000), p)));
    echoed.forEach((b, i) => assert.ok(b.equals(payloads[i]!), `echo ${i} differs`));
  });

  test("a reader that gives up resets its tunnel; the server keeps serving", async () => {
    const sock = await f.sbx.tunnel(8000);
    sock.write("GET /big.bin HTTP/1.0\r\n\r\n");
    await new Promise<void>((resolve) => sock.once("data", () => resolve()));
    sock.destroy();
    const again = await get(f.sbx, 8000, "/index.html");
    assert.equal(again.body.toString(), "hello from the guest\n");
  });

  test("after a warm hibernate and wake: an open tunnel carries on, new ones connect", async () => {
    const open = await f.sbx.tunnel(9000);
    const first = new Promise<Buffer>((r) => open.once("data", r));
    open.write("before ");
    assert.equal((await first).toString(), "before ");
    const snap = await f.rt.snapshot(f.sbx.id, { keepRunning: false });
    try {
      assert.equal(f.sbx.state, "paused");
      await sleep(500);
      await f.sbx.resume();
      const back = await echo(open, Buffer.from("after"));
      assert.equal(back.toString(), "after");
      const r = await get(f.sbx, 8000, "/big.bin");
      assert.ok(r.body.equals(big));
    } finally {
      await f.rt.deleteSnapshot(snap.id);
    }
  });

  test("nothing leaks: the agent's fds and the host's streams are back to where they were", async () => {
    let now = await leakState(f.sbx);
    // Tunnels close asynchronously (the guest's last frame, then release): give them a moment.
    for (let i = 0; i < 50 && (now.agentFds !== baseline.agentFds || now.hostStreams !== baseline.hostStreams); i++) {
      await sleep(100);
      now = await leakState(f.sbx);
    }
    assert.deepEqual(now, baseline);
    const agent: AgentClient = await f.sbx.agent();
    assert.equal(agent.closed, false);
    assert.equal(f.sbx.agentProtocolErrors, 0);
  });
});
