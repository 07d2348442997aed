// needs: memory host, the e2b client
/**
 * envd goes through the same guests' service as Den's own API (GuestAccess), on the memory
 * host with the real `e2b` client: the processes its Start runs are in the sandbox's events
 * (`exec.started`, `exec.ended`, as /v1's, with `surface: "envd"`), and its long-lived streams
 * (a process's Start and Connect, a directory watch) count against the owner's bounds, which
 * /v1's exec streams share: past the bound the call is refused and nothing starts, and a
 * stream that ends gives its slot back.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, type CommandHandle, type WatchHandle } from "e2b";
import { ADMIN_KEY, client, memoryServer, waitFor, type MemoryServer } from "./helpers.js";

interface Event {
  seq: number;
  type: string;
  data: Record<string, unknown>;
}

describe("envd through the guests' service: exec events and the owner's stream bounds", () => {
  let m: MemoryServer;
  let sbx: Sandbox;
  let api: ReturnType<typeof client>;

  before(async () => {
    // Two exec streams and one follow per owner: small enough to reach.
    m = await memoryServer({ DEN_MAX_STREAMS_PER_OWNER: "2", DEN_MAX_FOLLOWS_PER_OWNER: "1" });
    process.env.E2B_API_URL = m.server.url;
    process.env.E2B_API_KEY = ADMIN_KEY;
    process.env.E2B_SANDBOX_URL = m.server.envdUrl!;
    api = client(m.server.url);
    sbx = await Sandbox.create("base", { timeoutMs: 600_000 });
  });

  after(async () => {
    await Sandbox.kill(sbx?.sandboxId ?? "").catch(() => undefined);
    await m?.close();
  });

  const events = async (): Promise<Event[]> => {
    const r = await api("GET", `/v1/sandboxes/${sbx.sandboxId}/events`);
    assert.equal(r.status, 200, r.text);
    return r.body.events as Event[];
  };

  test("a command run through envd is in the sandbox's events: exec.started with its argv and pid, exec.ended with its exit", async () => {
    const before = (await events()).at(-1)?.seq ?? 0;
    const r = await sbx.commands.run("echo envd-events; exit 3").catch((e: { exitCode?: number; stdout?: string }) => e);
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, "envd-events\n");
    const [started, ended] = await waitFor("the command's two events", async () => {
      const mine = (await events()).filter((e) => e.seq > before && e.type.startsWith("exec."));
      return mine.length >= 2 ? mine : undefined;
    }, 10_000, 100);
    assert.equal(started!.type, "exec.started");
    assert.equal(started!.data.surface, "envd");
    assert.ok(Array.isArray(started!.data.cmd) && (started!.data.cmd as string[]).some((a) => a.includes("echo envd-events")), JSON.stringify(started!.data));
    assert.equal(typeof started!.data.pid, "number");
    assert.equal(ended!.type, "exec.ended");
    assert.deepEqual(ended!.data, { exit_code: 3, signal: null, timed_out: false, surface: "envd", pid: started!.data.pid });
  });

  test("a background command's end is recorded when it exits, its stream long gone", async () => {
    const before = (await events()).at(-1)?.seq ?? 0;
    const h = await sbx.commands.run("sleep 0.3; exit 0", { background: true });
    await h.disconnect();
    const ended = await waitFor("its exec.ended", async () => (await events()).find((e) => e.seq > before && e.type === "exec.ended" && e.data.pid === h.pid), 10_000, 100);
    assert.equal(ended.data.exit_code, 0);
    assert.ok((await events()).some((e) => e.seq > before && e.type === "exec.started" && e.data.pid === h.pid));
  });

  test("process streams past the owner's bound are refused (nothing starts) and succeed again once one ends; /v1's exec streams share the bound", async () => {
    const held: CommandHandle[] = [];
    try {
      for (let i = 0; i < 2; i++) held.push(await sbx.commands.run(`sleep 60; echo held${i}`, { background: true }));
      const listed = (await sbx.commands.list()).length;
      await assert.rejects(sbx.commands.run("echo over"), (e: Error) => {
        assert.match(e.message, /at most 2 exec streams and PTYs at once per owner \(DEN_MAX_STREAMS_PER_OWNER\)/);
        return true;
      });
      assert.equal((await sbx.commands.list()).length, listed, "the refused command never started");
      // Following a running process is a stream too.
      await assert.rejects(sbx.commands.connect(held[0]!.pid), /at most 2 exec streams/);
      // The bound is the owner's, whichever surface holds the streams.
      const v1 = await api("POST", `/v1/sandboxes/${sbx.sandboxId}/exec/stream`, { cmd: "echo v1" });
      assert.equal(v1.status, 429, v1.text);

      // One stream ends (its handle disconnects; the process runs on): its slot is free again.
      await held.shift()!.disconnect();
      const r = await waitFor("a command to start again", async () => sbx.commands.run("echo again").catch(() => undefined), 10_000, 100);
      assert.equal(r.stdout, "again\n");
    } finally {
      for (const h of held) await h.kill().catch(() => undefined);
    }
  });

  test("a directory watch takes one of the owner's follow slots: a second is refused until the first stops", async () => {
    await sbx.files.makeDir("/tmp/watched");
    const first: WatchHandle = await sbx.files.watchDir("/tmp/watched", () => undefined);
    let second: WatchHandle | undefined;
    try {
      await assert.rejects(sbx.files.watchDir("/tmp/watched", () => undefined), /at most 1 event follows and directory watches at once per owner/);
      await first.stop();
      second = await waitFor("a watch to open again", async () => sbx.files.watchDir("/tmp/watched", () => undefined).catch(() => undefined), 10_000, 100);
    } finally {
      await first.stop().catch(() => undefined);
      await second?.stop().catch(() => undefined);
    }
  });
});
