// needs: memory host
/**
 * The TTL and idle reapers on the test's own clock (ManualClock drives the control plane and
 * the in-memory host alike): each deadline is hit exactly, in milliseconds of real time.
 * What they do to a real VM (hibernate, destroy) is tested on microVMs in api.test,
 * cold.test and restart.test (a TTL across a crash).
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ManualClock } from "@den/host-agent";
import { memoryFixture, waitFor } from "./helpers.js";

/** Long enough for a few reaper passes (every 100 ms in memory servers) and the replica's lease renewal (2 s). */
const PASSES_MS = 3000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("reapers, on the test's clock", () => {
  const clock = new ManualClock(Date.now());
  const f = memoryFixture({ DEN_COLD_AFTER_SECONDS: "600" }, { clock });
  const state = async (id: string) => (await f.api("GET", `/v1/sandboxes/${id}`)).body as { state: string; state_reason: string; hibernate_mode: string | null };
  const create = async (body: Record<string, unknown>) => {
    const r = await f.api("POST", "/v1/sandboxes", body);
    assert.equal(r.status, 201, r.text);
    return r.body.id as string;
  };
  const until = (what: string, id: string, want: (s: Awaited<ReturnType<typeof state>>) => boolean) =>
    waitFor(what, async () => {
      const s = await state(id);
      return want(s) ? s : undefined;
    }, 10_000, 50);

  test("TTL: destroyed at its deadline and not a moment before, persistent or not; /timeout moves it", async () => {
    const plain = await create({ ttl_seconds: 60 });
    const kept = await create({ ttl_seconds: 60, persistent: true });
    const moved = await create({ ttl_seconds: 60 });
    assert.equal((await f.api("POST", `/v1/sandboxes/${moved}/timeout`, { seconds: 3600 })).status, 200);
    clock.advance(59_000);
    await sleep(PASSES_MS);
    for (const id of [plain, kept, moved]) assert.equal((await state(id)).state, "running", "not before its deadline");
    clock.advance(1_500);
    for (const id of [plain, kept]) assert.equal((await until("the TTL", id, (s) => s.state === "destroyed")).state_reason, "ttl");
    assert.equal((await state(moved)).state, "running", "its deadline was moved out");
    clock.advance(3600_000);
    await until("the moved TTL", moved, (s) => s.state === "destroyed");
  });

  test("idle: a non-persistent one is reaped at its idle timeout, a persistent one kept, a busy guest is not idle", async () => {
    const idle = await create({ idle_timeout_seconds: 300, on_idle: "destroy" });
    const persistent = await create({ idle_timeout_seconds: 300, persistent: true, on_idle: "destroy" });
    const busy = await create({ idle_timeout_seconds: 300, on_idle: "destroy" });
    // Its only activity: a guest using a whole CPU (no exec open, no API calls). The clock
    // moves in steps a pass apart, as time does: the reaper judges a guest busy by the CPU it
    // used between two of its samples, which a jump over the whole timeout would not show.
    f.host.setCpuLoad(busy, 1);
    const step = async (ms: number) => {
      clock.advance(ms);
      await sleep(350);
    };
    for (let i = 0; i < 4; i++) await step(60_000);
    await step(59_000);
    assert.equal((await state(idle)).state, "running", "not before its idle timeout");
    await step(2_000);
    assert.equal((await until("the idle reaper", idle, (s) => s.state === "destroyed")).state_reason, "idle");
    // Well past its idle timeout, the busy one runs on, and the persistent one.
    for (let i = 0; i < 6; i++) await step(60_000);
    assert.equal((await state(busy)).state, "running", "a busy guest is not idle");
    assert.equal((await state(persistent)).state, "running", "persistent: never idle-reaped");
    // Once quiet, its idle timeout counts from its last busy moment.
    f.host.setCpuLoad(busy, 0);
    await sleep(PASSES_MS);
    clock.advance(299_000);
    await sleep(PASSES_MS);
    assert.equal((await state(busy)).state, "running", "idle for less than its timeout since it stopped");
    clock.advance(2_000);
    assert.equal((await until("the idle reaper", busy, (s) => s.state === "destroyed")).state_reason, "idle");
    assert.equal((await state(persistent)).state, "running");
  });

  test("idle with the default on_idle: warm at the idle timeout, then cold after a second quiet period; a wake finds its files", async () => {
    const id = await create({ idle_timeout_seconds: 120 });
    assert.equal((await f.api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "echo saved > /tmp/s" })).status, 200);
    clock.advance(121_000);
    const warm = await until("warm", id, (s) => s.state === "hibernated");
    assert.deepEqual([warm.state_reason, warm.hibernate_mode], ["idle", "warm"]);
    clock.advance(500_000);
    await sleep(PASSES_MS);
    assert.equal((await state(id)).hibernate_mode, "warm", "not cold before idle timeout + DEN_COLD_AFTER_SECONDS");
    clock.advance(101_000);
    const cold = await until("cold", id, (s) => s.hibernate_mode === "cold");
    assert.equal(cold.state_reason, "idle");
    const r = await f.api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "cat /tmp/s" });
    assert.equal(r.body.stdout, "saved\n", r.text);
    assert.equal((await state(id)).state, "running");
  });
});
