// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Channel, FrameDecoder, FrameType, SYNC_MAGIC, encodeData, encodeJson } from "@den/protocol";
import { AgentClient, ExecProcess, GuestFiles } from "../src/index.js";
import { capAppendLog } from "../src/console-log.js";
import { CpuMeter, readMetrics } from "../src/metrics.js";
import { isCode } from "./helpers.js";

/**
 * A misbehaving guest on a unix socket: the cases a real guest agent never produces on
 * its own (the real-VM hostile tests hijack the port for the same purpose).
 */
async function fakeGuest(onFrame: (sock: net.Socket, type: FrameType, id: number, body: Record<string, unknown>) => void, preamble?: (sock: net.Socket) => void, hello: Record<string, unknown> = {}) {
  const dir = mkdtempSync(join(tmpdir(), "den-fake-guest-"));
  const path = join(dir, "agent.sock");
  const sockets = new Set<net.Socket>();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    preamble?.(sock);
    const dec = new FrameDecoder();
    sock.on("data", (d: Buffer) => {
      for (const f of dec.push(d)) {
        const body = f.type === FrameType.Req ? (JSON.parse(f.payload.toString()) as Record<string, unknown>) : {};
        if (body.op === "sys.hello") {
          sock.write(Buffer.concat([SYNC_MAGIC, Buffer.from(String(body.session), "hex")]));
          sock.write(encodeJson(FrameType.Res, f.id, { ok: true, protocol: 1, agent: "fake", boot_id: "x", pid: 1, ...hello }));
        } else onFrame(sock, f.type, f.id, body);
      }
    });
    sock.on("error", () => undefined);
  });
  await new Promise<void>((r) => server.listen(path, r));
  return {
    path,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Writes `chunk` to the host `times` times, as fast as the socket drains. */
function pump(sock: net.Socket, chunk: Buffer, times: number): void {
  let sent = 0;
  const more = () => {
    while (sent < times && sock.write(chunk)) sent++;
    if (sent < times) sock.once("drain", more);
  };
  more();
}

test("a guest that never sends SYNC is dropped after a bounded amount of garbage", async () => {
  const g = await fakeGuest(() => undefined, (sock) => {
    pump(sock, Buffer.alloc(1 << 20, 0x41), 40);
  });
  try {
    await assert.rejects(AgentClient.connect(g.path, 20_000), isCode("agent_protocol_error"));
  } finally {
    g.close();
  }
});

test("a guest sending more than its credit is disconnected", async () => {
  const g = await fakeGuest((sock, type, id, body) => {
    if (body.op !== "exec") return;
    sock.write(encodeJson(FrameType.Res, id, { ok: true, proc: 1, pid: 2 }));
    const window = Number(body.window);
    const chunk = Buffer.alloc(60_000);
    for (let sent = 0; sent <= window; sent += chunk.length) sock.write(encodeData(id, Channel.Stdout, chunk));
  });
  try {
    const agent = await AgentClient.connect(g.path);
    const p = await ExecProcess.start(agent, ["x"]);
    // A reader that takes one chunk and stops: the host grants nothing more.
    await p[Symbol.asyncIterator]().next();
    await assert.rejects(p.wait(), isCode("agent_protocol_error"));
    assert.equal(agent.closed, true);
  } finally {
    g.close();
  }
});

test("replies that are not JSON objects, and frames for unknown ids, cannot hurt the host", async () => {
  const g = await fakeGuest((sock, _type, id) => {
    sock.write(encodeJson(FrameType.Event, 99999, { event: "exit" }));
    sock.write(encodeData(424242, Channel.Stdout, Buffer.alloc(1000)));
    sock.write(Buffer.concat([Buffer.from([0, 0, 0, 9, FrameType.Res]), Buffer.from([0, 0, 0, id]), Buffer.from("[1,2")]));
  });
  try {
    const agent = await AgentClient.connect(g.path);
    await assert.rejects(agent.request("sys.ping", {}), isCode("agent_protocol_error"));
  } finally {
    g.close();
  }
});

test("a guest flooding events nobody asked for is disconnected once past its allowance; a few stray events are fine", async () => {
  const g = await fakeGuest((sock, _type, id, body) => {
    if (body.op === "sys.ping" && body.n === 1) {
      // Stray events (a stream given up on): dropped unread, and within the allowance.
      for (let i = 0; i < 50; i++) sock.write(encodeJson(FrameType.Event, 70000 + i, { event: "exit", code: 0 }));
      sock.write(encodeJson(FrameType.Res, id, { ok: true }));
      return;
    }
    if (body.op !== "sys.ping") return;
    pump(sock, encodeJson(FrameType.Event, 80000, { pad: "x".repeat(1 << 19) }), 64);
  });
  try {
    const agent = await AgentClient.connect(g.path);
    await agent.request("sys.ping", { n: 1 } as never);
    assert.equal(agent.closed, false);
    await assert.rejects(agent.request("sys.ping", { n: 2 } as never), (e: unknown) => isCode("agent_protocol_error")(e) && /never asked for/.test(String(e)));
    assert.equal(agent.closed, true);
  } finally {
    g.close();
  }
});

test("an append-only log is capped in place, keeping its tail", () => {
  const dir = mkdtempSync(join(tmpdir(), "den-log-"));
  try {
    const log = join(dir, "qemu.log");
    writeFileSync(log, "");
    for (let i = 0; i < 40; i++) appendFileSync(log, `line ${i} ${"x".repeat(1000)}\n`);
    capAppendLog(log, 16 * 1024);
    assert.equal(statSync(log).size, 0);
    assert.match(readFileSync(`${log}.1`, "utf8"), /line 39 /);
    capAppendLog(log, 16 * 1024);
    assert.equal(statSync(log).size, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("an old agent (no features in its hello) is never sent a user, and lacks xattrs and metrics clearly", async () => {
  const ops: unknown[] = [];
  const g = await fakeGuest((sock, type, id, body) => {
    if (type !== FrameType.Req) return;
    ops.push(body.op);
    sock.write(encodeJson(FrameType.Res, id, { ok: true }));
  });
  try {
    const agent = await AgentClient.connect(g.path);
    const files = new GuestFiles(async () => agent);
    const old = (e: unknown) => isCode("invalid_state")(e) && /newer guest agent/.test(String(e));
    // It would ignore "user" and run the command as root: refused before anything is sent.
    await assert.rejects(ExecProcess.start(agent, ["id"], { user: "user" }), old);
    await assert.rejects(files.write("/a", "x", { user: "user" }), old);
    await assert.rejects(files.mkdir("/d", { user: "user" }), old);
    await assert.rejects(files.setXattrs("/a", { "user.k": "v" }), old);
    await assert.rejects(files.getXattrs("/a"), old);
    await assert.rejects(readMetrics(agent, new CpuMeter()), old);
    assert.deepEqual(ops, []);
    // What it always did still works.
    await files.mkdir("/d");
    assert.deepEqual(ops, ["file.mkdir"]);
  } finally {
    g.close();
  }
});

test("metrics and xattrs from a hostile agent are checked", async () => {
  let metrics: Record<string, unknown> = {};
  const g = await fakeGuest((sock, type, id, body) => {
    if (body.op === "sys.metrics") sock.write(encodeJson(FrameType.Res, id, { ok: true, ...metrics }));
    if (body.op === "file.getxattrs") sock.write(encodeJson(FrameType.Res, id, { ok: true, attrs: { "user.a": "1", "trusted.b": "2", "user.c": 5, "security.d": "x" } }));
  }, undefined, { features: ["exec.user", "file.owner", "file.xattr", "sys.metrics"] });
  try {
    const agent = await AgentClient.connect(g.path);
    assert.deepEqual(await new GuestFiles(async () => agent).getXattrs("/a"), { "user.a": "1" });
    const good = { timestamp_ms: 1, cpu_count: 2, cpu_total_ticks: 1000, cpu_busy_ticks: 250, mem_total_kb: 1000, mem_available_kb: 600, mem_cache_kb: 100, disk_total_bytes: 10, disk_used_bytes: 4 };
    metrics = good;
    assert.deepEqual(await readMetrics(agent, new CpuMeter()), {
      timestampMs: 1, cpuCount: 2, cpuUsedPct: 25, memTotalBytes: 1024000, memUsedBytes: 409600, memCacheBytes: 102400, diskTotalBytes: 10, diskUsedBytes: 4,
    });
    for (const bad of [{ mem_total_kb: -1 }, { cpu_busy_ticks: 1.5 }, { disk_used_bytes: "4" }, { cpu_count: undefined }]) {
      metrics = { ...good, ...bad };
      await assert.rejects(readMetrics(agent, new CpuMeter()), isCode("agent_protocol_error"), JSON.stringify(bad));
    }
    // Numbers that contradict each other are clamped, never a used above the total.
    metrics = { ...good, cpu_busy_ticks: 5000, mem_available_kb: 5000, disk_used_bytes: 99 };
    const m = await readMetrics(agent, new CpuMeter());
    assert.deepEqual([m.cpuUsedPct, m.memUsedBytes, m.diskUsedBytes], [100, 0, 10]);
  } finally {
    g.close();
  }
});

test("the CPU meter: the busy share since the previous sample, since boot for the first", () => {
  const c = new CpuMeter();
  assert.equal(c.sample(50, 100), 50);
  assert.equal(c.sample(50, 100), 50, "no tick since: the same reading");
  assert.equal(c.sample(150, 200), 100);
  assert.equal(c.sample(150, 300), 0);
  assert.equal(c.sample(151, 303), 33.33);
  assert.equal(c.sample(10, 40), 25, "counters that went back are another boot");
});
