import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Channel, FrameDecoder, FrameType, SYNC_MAGIC, encodeData, encodeJson } from "@den/protocol";
import { AgentClient, ExecProcess } from "../src/index.js";
import { capAppendLog } from "../src/console-log.js";
import { isCode } from "./helpers.js";

/**
 * A misbehaving guest on a unix socket: the cases a real guest agent never produces on
 * its own (the real-VM hostile tests hijack the port for the same purpose).
 */
async function fakeGuest(onFrame: (sock: net.Socket, type: FrameType, id: number, body: Record<string, unknown>) => void, preamble?: (sock: net.Socket) => void) {
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
          sock.write(encodeJson(FrameType.Res, f.id, { ok: true, protocol: 1, agent: "fake", boot_id: "x", pid: 1 }));
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

test("a guest that never sends SYNC is dropped after a bounded amount of garbage", async () => {
  const g = await fakeGuest(() => undefined, (sock) => {
    const junk = Buffer.alloc(1 << 20, 0x41);
    let sent = 0;
    const pump = () => {
      while (sent < 40 && sock.write(junk)) sent++;
      if (sent < 40) sock.once("drain", pump);
    };
    pump();
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
