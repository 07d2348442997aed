// needs: many VMs
/**
 * Input floods hold no memory in Den: 128 MiB streamed into a PTY (raw mode) and 256 MiB into a
 * port tunnel, each as fast as the client can send, raise `den serve`'s RSS by less than
 * 64 MiB (the guest's credit and TCP hold the sender back). `den serve` runs as its own
 * process so its RSS is its own.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import http from "node:http";
import type { Duplex } from "node:stream";
import WebSocket from "ws";
import { ADMIN_KEY, client, sandboxCalls, spawnServer, stopProcess, waitFor } from "./helpers.js";

const PORT = 19252;
const TOTAL = 256 * 1024 * 1024;
/**
 * Into the PTY, half of it: the guest's raw-mode reads run at a few MB/s under TCG (27 s for
 * 256 MiB), and twice RSS_GROWTH_MAX still shows a Den that buffered what it was sent.
 */
const PTY_TOTAL = 128 * 1024 * 1024;
const CHUNK = 1024 * 1024;
const RSS_GROWTH_MAX = 64 * 1024 * 1024;

const rss = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;

/** Samples `pid`'s RSS every 50 ms while `work` runs; returns the peak growth over the start. */
async function rssGrowth(pid: number, work: () => Promise<void>): Promise<number> {
  const start = rss(pid);
  let peak = start;
  const timer = setInterval(() => (peak = Math.max(peak, rss(pid))), 50);
  try {
    await work();
  } finally {
    clearInterval(timer);
  }
  return Math.max(peak, rss(pid)) - start;
}

/** Writes `total` bytes to `write` in CHUNK pieces, each once the previous one has gone out. */
async function flood(write: (b: Buffer, done: (e?: Error | null) => void) => void, total = TOTAL): Promise<void> {
  const chunk = Buffer.alloc(CHUNK, 0x61);
  for (let sent = 0; sent < total; sent += CHUNK) await new Promise<void>((resolve, reject) => write(chunk, (e) => (e ? reject(e) : resolve())));
}

describe("input floods", () => {
  let server: ChildProcess;
  const base = `http://127.0.0.1:${PORT}`;
  const api = client(base);
  const { create, exec } = sandboxCalls(api);
  let id: string;

  before(async () => {
    server = await spawnServer(PORT);
    id = await create();
  });
  after(async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    await stopProcess(server, "SIGTERM");
  });

  test("128 MiB into a PTY in raw mode: Den's RSS grows by less than 64 MiB, and the guest got every byte", async () => {
    const ws = new WebSocket(`ws://127.0.0.1:${PORT}/v1/sandboxes/${id}/pty?cmd=${encodeURIComponent("stty raw -echo; echo raw-now; head -c " + PTY_TOTAL + " | wc -c > /root/pty-count; echo counted")}`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    let out = "";
    ws.on("message", (d: Buffer, binary: boolean) => (out += binary ? d.toString() : ""));
    await new Promise((r, j) => (ws.once("open", r), ws.once("error", j)));
    const closed = new Promise((r) => ws.once("close", r));
    // Before raw mode the line discipline would drop what does not fit its 4 KiB line.
    await waitFor("raw mode", async () => (out.includes("raw-now") ? true : undefined), 60_000, 100);
    const growth = await rssGrowth(server.pid!, async () => {
      await flood((b, done) => ws.send(b, { binary: true }, done), PTY_TOTAL);
      await waitFor("the guest counted the bytes", async () => (out.includes("counted") ? true : undefined), 300_000, 200);
    });
    ws.close();
    await closed;
    assert.equal((await exec(id, "cat /root/pty-count")).trim(), String(PTY_TOTAL));
    assert.ok(growth < RSS_GROWTH_MAX, `den serve's RSS grew by ${(growth / 2 ** 20).toFixed(1)} MiB`);
  });

  test("256 MiB into a port tunnel: Den's RSS grows by less than 64 MiB, and the guest's server got every byte", async () => {
    await exec(id, "(setsid python3 -c \"import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', 9100)); s.listen(1); c, _ = s.accept(); n = 0\nwhile True:\n  d = c.recv(1 << 16)\n  if not d: break\n  n += len(d)\nopen('/root/tunnel-count', 'w').write(str(n)); c.sendall(b'done')\" > /dev/null 2>&1 < /dev/null &)");
    await waitFor("port 9100", async () => ((await api("GET", `/v1/sandboxes/${id}/ports`)).body.ports.some((p: { port: number }) => p.port === 9100) ? true : undefined));
    const socket = await new Promise<Duplex>((resolve, reject) => {
      const req = http.request({ host: "127.0.0.1", port: PORT, path: `/v1/sandboxes/${id}/ports/9100`, headers: { authorization: `Bearer ${ADMIN_KEY}`, connection: "Upgrade", upgrade: "den-tcp" } });
      req.on("upgrade", (res, s) => (res.statusCode === 101 ? resolve(s) : reject(new Error(`upgrade: ${res.statusCode}`))));
      req.on("response", (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
      req.on("error", reject);
      req.end();
    });
    let reply = "";
    socket.on("data", (d: Buffer) => (reply += d.toString()));
    const ended = new Promise((r) => socket.once("close", r));
    const growth = await rssGrowth(server.pid!, async () => {
      await flood((b, done) => socket.write(b, done));
      socket.end();
      await ended;
    });
    assert.equal(reply, "done");
    assert.equal((await exec(id, "cat /root/tunnel-count")).trim(), String(TOTAL));
    assert.ok(growth < RSS_GROWTH_MAX, `den serve's RSS grew by ${(growth / 2 ** 20).toFixed(1)} MiB`);
  });
});
