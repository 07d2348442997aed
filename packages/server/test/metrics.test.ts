// needs: memory host
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ADMIN_KEY, memoryFixture, waitFor } from "./helpers.js";

type Samples = Map<string, number>;

/**
 * A strict reader of the Prometheus text format (0.0.4): every line is a HELP or TYPE
 * comment or a sample `name{label="value",...} number`; every sample's family has a TYPE.
 * Returns the samples keyed by `name{labels}` as written.
 */
function parsePrometheus(text: string): Samples {
  const samples: Samples = new Map();
  const typed = new Set<string>();
  const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? (-?(?:[0-9.]+(?:e[+-]?\d+)?|Inf|\+Inf|NaN))(?: \d+)?$/;
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const t = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line);
    if (t) {
      typed.add(t[1]!);
      continue;
    }
    if (/^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*$/.test(line)) continue;
    const m = sample.exec(line);
    assert.ok(m, `not Prometheus text: ${JSON.stringify(line)}`);
    const family = m[1]!.replace(/_(bucket|sum|count|total|created)$/, "");
    assert.ok(typed.has(m[1]!) || typed.has(family), `sample without a TYPE: ${line}`);
    samples.set(m[1]! + (m[2] ?? ""), Number(m[3]!.replace("+Inf", "Infinity").replace("Inf", "Infinity")));
  }
  return samples;
}

describe("/metrics, /healthz, /readyz", () => {
  const f = memoryFixture();
  const scrape = async () => {
    const r = await fetch(`${f.server.url}/metrics`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
    return parsePrometheus(await r.text());
  };
  const value = (s: Samples, key: string) => s.get(key) ?? 0;

  test("health and readiness", async () => {
    assert.deepEqual(await (await fetch(`${f.server.url}/healthz`)).json(), { ok: true });
    const ready = await fetch(`${f.server.url}/readyz`);
    assert.equal(ready.status, 200);
    assert.deepEqual(await ready.json(), { ok: true, checks: { database: "ok", template: "ok" } });
  });

  test("metrics need an admin key", async () => {
    assert.equal((await fetch(`${f.server.url}/metrics`)).status, 401);
    const user = await f.api("POST", "/v1/keys", { owner: "metrics-user" });
    assert.equal((await fetch(`${f.server.url}/metrics`, { headers: { authorization: `Bearer ${user.body.key}` } })).status, 403);
  });

  test("parses as Prometheus text; counters and gauges move with operations and reaper actions", async () => {
    const before = await scrape();
    for (const name of ["den_sandboxes", "den_store_bytes", "den_host_memory_mb", "den_host_vcpus", "den_process_cpu_user_seconds_total"]) {
      assert.ok([...before.keys()].some((k) => k === name || k.startsWith(`${name}{`)), `${name} is exported`);
    }
    const created = await f.api("POST", "/v1/sandboxes", { template: "base" });
    assert.equal(created.status, 201);
    const id = created.body.id as string;
    assert.equal((await f.api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "warm" })).status, 200);
    const mid = await scrape();
    assert.equal(value(mid, 'den_sandboxes{state="hibernated"}'), value(before, 'den_sandboxes{state="hibernated"}') + 1);
    assert.equal((await f.api("POST", `/v1/sandboxes/${id}/wake`)).status, 200);
    assert.equal((await f.api("DELETE", `/v1/sandboxes/${id}`)).status, 200);
    // A sandbox the TTL reaper destroys.
    const short = await f.api("POST", "/v1/sandboxes", { template: "base", ttl_seconds: 1 });
    assert.equal(short.status, 201);
    await waitFor("the TTL reaper", async () => ((await f.api("GET", `/v1/sandboxes/${short.body.id}`)).body.state === "destroyed" ? true : undefined), 20_000);

    // The record says destroyed before the VM is gone (crash safety); its timing lands after.
    const destroys = 'den_operation_duration_seconds_count{op="destroy",mode="",outcome="ok"}';
    const after = await waitFor("the reaper's destroy to be timed", async () => {
      const s = await scrape();
      return value(s, destroys) - value(before, destroys) >= 2 ? s : undefined;
    });
    const moved = (key: string, by: number) => assert.equal(value(after, key) - value(before, key), by, key);
    moved('den_operation_duration_seconds_count{op="create",mode="",outcome="ok"}', 2);
    moved('den_operation_duration_seconds_count{op="hibernate",mode="warm",outcome="ok"}', 1);
    moved('den_operation_duration_seconds_count{op="wake",mode="warm",outcome="ok"}', 1);
    moved('den_operation_duration_seconds_count{op="destroy",mode="",outcome="ok"}', 2);
    moved('den_transitions_total{state="hibernated",reason="user"}', 1);
    moved('den_transitions_total{state="destroyed",reason="ttl"}', 1);
    moved('den_reaper_actions_total{action="destroyed",reason="ttl"}', 1);
    moved('den_sandboxes{state="destroyed"}', 2);
    assert.ok(value(after, 'den_operation_duration_seconds_sum{op="create",mode="",outcome="ok"}') > value(before, 'den_operation_duration_seconds_sum{op="create",mode="",outcome="ok"}'));
    assert.ok(value(after, 'den_host_memory_mb{kind="capacity"}') > 0);
  });
});
