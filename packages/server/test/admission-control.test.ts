// needs: memory host
/**
 * Admission control and memory pressure, decided by the control plane from what a host
 * reports, on the in-memory host (its capacity, its available memory and what each VM holds
 * are the test's to set). What they do to real VMs runs on microVMs: memory-pressure.test
 * (a real shortage of host memory, and a host full by its overcommitted promises) and
 * usage.test (the real admission's numbers through a wake); cold.test, the cold
 * hibernations themselves.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { memoryFixture, sandboxCalls, waitFor, type MemoryServer } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stateOf = async (m: MemoryServer, id: string) => {
  const s = (await m.api("GET", `/v1/sandboxes/${id}`)).body;
  return `${s.state}/${s.hibernate_mode ?? "-"}/${s.state_reason}`;
};

describe("a host with room for two sandboxes", () => {
  // The memory host's base template is 512 MiB, as the real one.
  const m = memoryFixture({ DEN_CAPACITY_MEMORY_MB: "1280" });

  test("the third is a 503; warm still holds its memory, cold makes room; a wake on a full host makes room; the first two keep working", async () => {
    const { api } = m;
    const { create, exec } = sandboxCalls(api);
    const a = await create({ persistent: false });
    const b = await create({ persistent: false });
    assert.equal((await api("GET", `/v1/sandboxes/${a}`)).body.memory_mb, 512);
    await exec(a, "echo a-state > /workspace/a");
    await exec(b, "echo b-state > /workspace/b");
    const third = await api("POST", "/v1/sandboxes", {});
    assert.equal(third.status, 503, third.text);
    assert.equal(third.body.error.code, "capacity_exhausted");
    assert.match(third.body.error.message, /1024 of 1280 MiB/);
    assert.equal((await api("GET", "/v1/sandboxes")).body.sandboxes.length, 2, "a refused create leaves no record");
    assert.equal((await api("POST", `/v1/sandboxes/${b}/fork`, {})).status, 503);
    await api("POST", `/v1/sandboxes/${a}/hibernate`, { mode: "warm" });
    assert.equal((await api("POST", "/v1/sandboxes", {})).status, 503, "a warm one holds its memory");
    await api("POST", `/v1/sandboxes/${a}/hibernate`, { mode: "cold" });
    assert.equal((await api("GET", "/v1/host")).body.used.memory_mb, 512);
    const c = await create({ persistent: false });
    await sleep(20);
    await exec(b, "cat /workspace/b");
    // a's exec wakes it on a full host: c, the least recently active other one, goes cold.
    assert.equal(await exec(a, "cat /workspace/a"), "a-state\n");
    assert.equal(await stateOf(m, c), "hibernated/cold/memory_pressure");
    assert.equal((await stateOf(m, b)).split("/")[0], "running");
    assert.equal((await api("GET", "/v1/host")).body.used.memory_mb, 1024);
    assert.equal((await api("POST", "/v1/sandboxes", {})).status, 503, "a create is refused while full, never evicts");
    assert.equal(await exec(b, "cat /workspace/b"), "b-state\n");
    for (const id of [a, b, c]) assert.notEqual((await stateOf(m, id)).split("/")[0], "lost");
  });
});

describe("a host short of memory", () => {
  const m = memoryFixture({ DEN_MEMORY_RESERVE_MB: "1000" });

  test("its least recently active sandboxes go cold first, only as many as cover the shortfall; nothing new is admitted while short; all wake with their state after", async () => {
    const { api, host } = m;
    const { create, exec } = sandboxCalls(api);
    const old = await create();
    const recent = await create();
    const spare = await create();
    // Activity in this order (the reaper orders by the latest activity it saw, to the call).
    for (const [id, what] of [[old, "old"], [recent, "recent"], [spare, "spare"]] as const) {
      await exec(id, `echo ${what}-state > /root/f`);
      await sleep(50);
    }
    const cold = (id: string) => waitFor(`${id} cold-hibernated`, async () => ((await stateOf(m, id)) === "hibernated/cold/memory_pressure" ? true : undefined), 10_000, 50);
    const running = async (ids: string[], why: string) => {
      await sleep(1000);
      for (const id of ids) assert.equal((await stateOf(m, id)).split("/")[0], "running", why);
    };
    // Something else takes memory: 300 MiB short of the reserve, which one 512 MiB sandbox
    // covers (what it frees comes back to the host): the least recently active goes, only it.
    host.setAvailableMemoryMb(700);
    await cold(old);
    await running([recent, spare], "one eviction covered the shortfall");
    // Short again: the next least recently active.
    host.setAvailableMemoryMb(700);
    await cold(recent);
    await running([spare], "the most recently active one is left");
    // Short even with every sandbox cold: the last one goes, and a create is refused, saying why.
    host.setAvailableMemoryMb(100);
    await cold(spare);
    const refused = await api("POST", "/v1/sandboxes", {});
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.body.error.code, "capacity_exhausted");
    assert.match(refused.body.error.message, /short of memory/);
    host.setAvailableMemoryMb(undefined);
    const again = await waitFor("a create admitted again", async () => {
      const r = await api("POST", "/v1/sandboxes", { persistent: true });
      return r.status === 201 ? (r.body.id as string) : undefined;
    }, 10_000, 100);
    assert.ok(again);
    assert.equal(await exec(old, "cat /root/f"), "old-state\n");
    assert.equal(await exec(recent, "cat /root/f"), "recent-state\n");
    assert.equal(await exec(spare, "cat /root/f"), "spare-state\n");
  });
});
