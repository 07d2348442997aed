// needs: many VMs
/**
 * A guest whose agent stops answering, against `den serve` as its own process with a short
 * guest deadline (DEN_GUEST_DEADLINE_SECONDS=8): its calls fail with `guest_unresponsive`
 * within the deadline, it never holds up another sandbox or the reaper, and it is reaped at
 * its TTL like any other.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { findInstanceProcesses } from "@den/runtime";
import { client, dataDir, sandboxCalls, spawnServer, stopProcess, waitFor } from "./helpers.js";

const PORT = 19251;
const DEADLINE_S = 8;
/** What a call may take past the deadline (a reconnect's hello, a loaded TCG host). */
const SLACK_MS = 7_000;
const FAKE_AGENT = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "..", "test", "fixtures", "fake-agent.py"));
/** The real agent's pid (PID 1 is init; the exec's own background jobs are in its process group, so they run under setsid). */
const KILL_AGENT = "pgrep -xf den-agent";

// The two cases wait out TTLs side by side in one server (concurrently: half the wall time).
describe("a guest whose agent stops answering", { concurrency: true }, () => {
  let server: ChildProcess;
  const api = client(`http://127.0.0.1:${PORT}`);
  const { create, exec } = sandboxCalls(api);
  const instance = () => readFileSync(join(dataDir(), "instance-id"), "utf8").trim();
  const timed = async <T>(f: () => Promise<T>): Promise<{ ms: number; r: T }> => {
    const t0 = Date.now();
    const r = await f();
    return { ms: Date.now() - t0, r };
  };
  const execTrue = (id: string) => timed(() => api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "true" }));
  /**
   * The agent is stopped or replaced half a second after the exec that arranged it answered; on
   * a loaded TCG host that can take seconds, and until then it answers (200). The first exec
   * it does not answer, timed (polled for up to 20 s).
   */
  const firstUnanswered = (id: string) =>
    waitFor(`an exec of ${id} its agent does not answer`, async () => {
      const e = await execTrue(id);
      return e.r.status === 200 ? undefined : e;
    }, 20_000, 500);
  /**
   * Gives the sandbox a TTL of a few seconds from now (its steps done: a TTL set at create had
   * to outlast the slowest of them on a loaded host, and the test then waited it out), waits
   * until the reaper destroys it, and returns how long after `expires_at` that was.
   */
  const reapedAfter = async (id: string): Promise<number> => {
    const set = await api("POST", `/v1/sandboxes/${id}/timeout`, { seconds: 3 });
    assert.equal(set.status, 200, set.text);
    const expires = Date.parse(set.body.expires_at);
    await waitFor(`${id} reaped at its TTL`, async () => ((await api("GET", `/v1/sandboxes/${id}`)).body.state === "destroyed" ? true : undefined), 180_000, 250);
    const row = (await api("GET", `/v1/sandboxes/${id}`)).body;
    assert.equal(row.state_reason, "ttl");
    assert.equal(findInstanceProcesses(instance()).has(id), false, "its QEMU is gone");
    return Date.now() - expires;
  };

  before(async () => {
    server = await spawnServer(PORT, { DEN_GUEST_DEADLINE_SECONDS: String(DEADLINE_S) });
  });
  after(async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    await stopProcess(server, "SIGTERM");
  });

  test("an agent replaced by one that ignores sys.clock: exec and wake fail within the deadline; a neighbour works and is reaped on time; so is the wedged one", async () => {
    const wedged = await create({ ttl_seconds: 300 });
    const neighbour = await create({ ttl_seconds: 300 });
    const put = await api("PUT", `/v1/sandboxes/${wedged}/files?path=/root/fake-agent.py`, FAKE_AGENT, { "content-type": "application/octet-stream" });
    assert.equal(put.status, 200, put.text);
    assert.equal(await exec(wedged, `(setsid python3 /root/fake-agent.py sys.clock > /root/fake.log 2>&1 < /dev/null &); ` +
      `for i in $(seq 200); do [ -e /run/fake-agent.started ] && break; sleep 0.05; done; ` +
      `setsid sh -c 'sleep 0.5; kill -9 $(${KILL_AGENT})' > /dev/null 2>&1 < /dev/null & echo replaced`), "replaced\n");
    const e = await firstUnanswered(wedged);
    assert.equal(e.r.status, 504, e.r.text);
    assert.equal(e.r.body.error.code, "guest_unresponsive");
    assert.ok(e.ms < DEADLINE_S * 1000 + SLACK_MS, `the exec failed after ${e.ms} ms`);
    assert.equal(await exec(neighbour, "echo alive"), "alive\n", "the neighbour's exec works meanwhile");

    // The fake answers the quiesce, so the pause goes through; the wake's clock sync is never answered.
    const h = await api("POST", `/v1/sandboxes/${wedged}/hibernate`, { mode: "warm" });
    assert.equal(h.status, 200, h.text);
    const w = await timed(() => api("POST", `/v1/sandboxes/${wedged}/wake`));
    assert.equal(w.r.status, 504, w.r.text);
    assert.equal(w.r.body.error.code, "guest_unresponsive");
    assert.match(w.r.body.error.message, /sys\.clock/);
    assert.ok(w.ms < DEADLINE_S * 1000 + SLACK_MS, `the wake failed after ${w.ms} ms`);
    assert.equal(await exec(neighbour, "echo still"), "still\n");

    const events = (await api("GET", `/v1/sandboxes/${wedged}/events`)).body.events as Array<{ type: string }>;
    assert.ok(events.some((ev) => ev.type === "guest.unresponsive"), `its events say so: ${events.map((ev) => ev.type).join(", ")}`);

    const late = await reapedAfter(neighbour);
    assert.ok(late < 5_000, `the neighbour was reaped ${late} ms after its TTL`);
    const wedgedLate = await reapedAfter(wedged);
    assert.ok(wedgedLate < 5_000, `the wedged sandbox was reaped ${wedgedLate} ms after its TTL`);
  });

  test("kill -STOP of the agent: exec fails within the deadline, and again once the connection is dropped; reaped at its TTL", async () => {
    const id = await create({ ttl_seconds: 300 });
    assert.equal(await exec(id, `setsid sh -c 'sleep 0.5; kill -STOP $(${KILL_AGENT})' > /dev/null 2>&1 < /dev/null & echo stopping`), "stopping\n");
    for (let i = 0; i < 2; i++) {
      const e = i === 0 ? await firstUnanswered(id) : await execTrue(id);
      assert.ok([503, 504].includes(e.r.status), e.r.text);
      assert.ok(["guest_unresponsive", "agent_unavailable"].includes(e.r.body.error.code), e.r.text);
      assert.ok(e.ms < DEADLINE_S * 1000 + SLACK_MS + 15_000, `exec ${i + 1} failed after ${e.ms} ms`);
    }
    const late = await reapedAfter(id);
    assert.ok(late < 5_000, `reaped ${late} ms after its TTL`);
  });
});
