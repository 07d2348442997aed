// needs: one VM
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { RunningServer } from "../src/index.js";
import { client, testServer } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const iso = (ms: number) => new Date(ms).toISOString();

describe("metering", () => {
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  before(async () => {
    server = await testServer({ DEN_METER_INTERVAL_SECONDS: "1", DEN_PRICE_VCPU_SECOND: "0.00001", DEN_PRICE_GIB_SECOND: "0.000002", DEN_PRICE_GB_MONTH: "0.02" });
    api = client(server.url);
  });
  after(async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    await server?.close();
  });

  const usageOf = async (id: string, from: number, to: number) => {
    const r = await api("GET", `/v1/usage?group_by=sandbox&from=${iso(from)}&to=${iso(to)}`);
    assert.equal(r.status, 200, r.text);
    return r.body.groups.find((g: { key: string }) => g.key === id);
  };

  test("seconds per state match the test's own clock; a busy guest's host CPU shows, an idle one's does not", async () => {
    const t0 = Date.now();
    const s = (await api("POST", "/v1/sandboxes", { metadata: { task_id: "metered" } })).body;
    const created = Date.now();
    // 5 s of a busy loop, then 5 quiet seconds.
    await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: "nohup sh -c 'while true; do :; done' >/dev/null 2>&1 & echo $! > /tmp/loop" });
    const busy0 = Date.now();
    await sleep(5_000);
    const busy1 = Date.now();
    await api("POST", `/v1/sandboxes/${s.id}/exec`, { cmd: "kill $(cat /tmp/loop)" });
    await sleep(2_000);
    const idle0 = Date.now();
    await sleep(5_000);
    const idle1 = Date.now();
    // Then warm-hibernated for 4 s, cold for 4 s, running again.
    const h0 = Date.now();
    await api("POST", `/v1/sandboxes/${s.id}/hibernate`, { mode: "warm" });
    const h1 = Date.now();
    await sleep(4_000);
    const c0 = Date.now();
    await api("POST", `/v1/sandboxes/${s.id}/hibernate`, { mode: "cold" });
    const c1 = Date.now();
    await sleep(4_000);
    const w0 = Date.now();
    await api("POST", `/v1/sandboxes/${s.id}/wake`);
    const w1 = Date.now();
    await sleep(1_000);
    const end = Date.now();

    const busy = await usageOf(s.id, busy0, busy1);
    assert.ok(busy.host_cpu_seconds >= 4, `a 5 s busy loop used ${busy.host_cpu_seconds} host CPU-seconds`);
    const idle = await usageOf(s.id, idle0, idle1);
    assert.ok(idle.host_cpu_seconds < 0.5, `5 idle seconds used ${idle.host_cpu_seconds} host CPU-seconds`);

    const all = await usageOf(s.id, t0, end);
    // Each boundary is only as sharp as the call that moved it: within 1 s either way.
    const near = (got: number, lo: number, hi: number, what: string) => assert.ok(got >= lo / 1000 - 1 && got <= hi / 1000 + 1, `${what}: ${got} s, the test measured ${lo / 1000}..${hi / 1000} s`);
    near(all.running_seconds, h0 - created + (end - w1), h1 - t0 + (end - w0), "running");
    near(all.warm_hibernated_seconds, c0 - h1, c1 - h0, "warm-hibernated");
    near(all.cold_hibernated_seconds, w0 - c1, w1 - c0, "cold-hibernated");
    assert.ok(Math.abs(all.vcpu_seconds - all.running_seconds * s.vcpus) < 0.01);
    assert.ok(Math.abs(all.memory_gib_seconds - all.running_seconds * (s.memory_mb / 1024)) < 0.01);
    assert.ok(all.den_cpu_seconds > 0, "snapshotting and compressing for the cold hibernate is Den's work on its behalf");
    assert.ok(all.stored_byte_seconds > 0, "its snapshot sat in the store while cold");
    assert.ok(Math.abs(all.cost.vcpu - all.vcpu_seconds * 0.00001) < 1e-6 && all.cost.total > 0, JSON.stringify(all.cost));

    const byTask = await api("GET", `/v1/usage?group_by=metadata.task_id&from=${iso(t0)}&to=${iso(end)}`);
    const g = byTask.body.groups.find((x: { key: string | null }) => x.key === "metered");
    assert.equal(g.sandboxes, 1);
    assert.equal(g.running_seconds, all.running_seconds);

    // Another owner sees none of it, and may not ask for someone else's.
    const other = client(server.url, (await api("POST", "/v1/keys", { owner: "meter-other" })).body.key);
    assert.deepEqual((await other("GET", `/v1/usage?from=${iso(t0)}&to=${iso(end)}`)).body.groups, []);
    assert.equal((await other("GET", "/v1/usage?owner=admin")).status, 403);
    assert.equal((await api("GET", "/v1/usage?group_by=color")).status, 400);
    assert.equal((await api("GET", `/v1/usage?from=${iso(end)}&to=${iso(t0)}`)).status, 400);
  });
});

describe("admission control", () => {
  test("with room for two 512 MiB sandboxes the third is a 503; cold-hibernating one makes room; a wake on a full host makes room; the first two keep working", async () => {
    const server = await testServer({ DEN_CAPACITY_MEMORY_MB: "1280" });
    const api = client(server.url);
    try {
      const a = (await api("POST", "/v1/sandboxes", {})).body;
      const b = (await api("POST", "/v1/sandboxes", {})).body;
      assert.equal(a.memory_mb, 512);
      await api("POST", `/v1/sandboxes/${a.id}/exec`, { cmd: "echo a-state > /workspace/a" });
      const works = async (id: string, file: string, want: string) => assert.equal((await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: `cat ${file}` })).body.stdout, want);
      const third = await api("POST", "/v1/sandboxes", {});
      assert.equal(third.status, 503, third.text);
      assert.equal(third.body.error.code, "capacity_exhausted");
      assert.match(third.body.error.message, /1024 of 1280 MiB/);
      assert.equal((await api("GET", "/v1/sandboxes")).body.sandboxes.length, 2, "a refused create leaves no record");
      assert.equal((await api("POST", `/v1/sandboxes/${b.id}/fork`, {})).status, 503);
      // Warm-hibernated still holds its memory; cold holds nothing.
      await api("POST", `/v1/sandboxes/${a.id}/hibernate`, { mode: "warm" });
      assert.equal((await api("POST", "/v1/sandboxes", {})).status, 503);
      await api("POST", `/v1/sandboxes/${a.id}/hibernate`, { mode: "cold" });
      const host = (await api("GET", "/v1/host")).body;
      assert.equal(host.used.memory_mb, 512);
      const c = await api("POST", "/v1/sandboxes", {});
      assert.equal(c.status, 201, c.text);
      await works(b.id, "/etc/hostname", (await api("POST", `/v1/sandboxes/${b.id}/exec`, { cmd: "cat /etc/hostname" })).body.stdout);
      // Waking a while the host is full makes room: the least recently active other sandbox
      // (c: b was used after c was created) goes cold, and a wakes with its state.
      const wake = await api("POST", `/v1/sandboxes/${a.id}/exec`, { cmd: "cat /workspace/a" });
      assert.equal(wake.status, 200, wake.text);
      assert.equal(wake.body.stdout, "a-state\n");
      const cNow = (await api("GET", `/v1/sandboxes/${c.body.id}`)).body;
      assert.equal(cNow.state, "hibernated", JSON.stringify(cNow));
      assert.equal(cNow.hibernate_mode, "cold", JSON.stringify(cNow));
      assert.equal((await api("GET", `/v1/sandboxes/${b.id}`)).body.state, "running");
      assert.equal((await api("GET", "/v1/host")).body.used.memory_mb, 1024);
      // New creates are still refused while full.
      assert.equal((await api("POST", "/v1/sandboxes", {})).status, 503);
      await api("DELETE", `/v1/sandboxes/${c.body.id}`);
      await works(a.id, "/workspace/a", "a-state\n");
      await works(b.id, "/workspace/../etc/hostname", (await api("POST", `/v1/sandboxes/${b.id}/exec`, { cmd: "cat /etc/hostname" })).body.stdout);
    } finally {
      for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
      await server.close();
    }
  });
});
