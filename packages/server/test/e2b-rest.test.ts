// needs: memory host, the e2b client
/**
 * The E2B control-plane API's mapping onto Den's, driven by the real `e2b` npm client
 * (pinned) against a real server on the in-memory host, configured the way a user would:
 * E2B_API_URL and E2B_API_KEY. Covers create, info, list and paging, timeouts (checked by
 * polling), pause and connect, kill, the older clients' paths, and the errors the client
 * turns into its own types. What needs a guest (fork, snapshots, ports, metrics, a pause to
 * disk) runs against real microVMs in e2b/api.test.ts, and envd and the seeds' loops there too.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { AuthenticationError, Sandbox, SandboxNotFoundError } from "e2b";
import type { RunningServer } from "../src/index.js";
import { ADMIN_KEY, client, memoryServer, waitFor, type MemoryServer } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("the E2B control-plane API through the e2b client, on the memory host", () => {
  let m: MemoryServer;
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  const made: string[] = [];

  before(async () => {
    // 25 sandboxes at once, paused ones holding their place on the host (a pause is warm).
    m = await memoryServer({ DEN_MAX_SANDBOXES_PER_OWNER: "40", DEN_CAPACITY_VCPUS: "40" });
    server = m.server;
    api = m.api;
    process.env.E2B_API_URL = server.url;
    process.env.E2B_API_KEY = ADMIN_KEY;
  });

  after(async () => {
    for (const id of made) await Sandbox.kill(id).catch(() => undefined);
    await m?.close();
  });

  const create = async (opts: Parameters<typeof Sandbox.create>[1] = {}) => {
    const sbx = await Sandbox.create("base", opts);
    made.push(sbx.sandboxId);
    return sbx;
  };

  test("create, info, timeout, pause, connect and kill; unknown ids are not found", async () => {
    const t0 = Date.now();
    const sbx = await create({ metadata: { suite: "e2b", n: "1" }, timeoutMs: 120_000 });
    const info = await Sandbox.getInfo(sbx.sandboxId);
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, "base");
    assert.equal(info.state, "running");
    assert.deepEqual(info.metadata, { suite: "e2b", n: "1" });
    assert.ok(info.cpuCount >= 1 && info.memoryMB >= 128, JSON.stringify(info));
    assert.ok(Math.abs(info.endAt.getTime() - (t0 + 120_000)) < 15_000, `endAt ${info.endAt.toISOString()} is about 120 s after create`);
    assert.ok(sbx.getHost(8080).startsWith(`8080-${sbx.sandboxId}.`), sbx.getHost(8080));

    // The deadline moves with setTimeout; a connect with a shorter timeout never brings it in.
    await Sandbox.setTimeout(sbx.sandboxId, 600_000);
    const later = (await Sandbox.getInfo(sbx.sandboxId)).endAt.getTime();
    assert.ok(later > t0 + 500_000, "setTimeout moved endAt out");
    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 });
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).endAt.getTime(), later, "a shorter connect timeout left endAt alone");

    // Pause is a hibernate: a second pause is refused (false), connect resumes.
    assert.equal(await Sandbox.pause(sbx.sandboxId), true);
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, "paused");
    assert.equal(await Sandbox.pause(sbx.sandboxId), false);
    const den = await api("GET", `/v1/sandboxes/${sbx.sandboxId}`);
    assert.equal(den.body.state, "hibernated", "the same sandbox through /v1");
    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 });
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, "running");

    assert.equal(await Sandbox.kill(sbx.sandboxId), true);
    assert.equal(await Sandbox.kill(sbx.sandboxId), false, "a killed sandbox is not found");
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError);
    await assert.rejects(Sandbox.connect("sbx_aaaaaaaaaaaaaaaa"), SandboxNotFoundError);
    await assert.rejects(Sandbox.getInfo("not-an-id"), SandboxNotFoundError);
    await assert.rejects(Sandbox.create("base", { apiKey: "den_wrong_key" }), AuthenticationError);
    const bad = await fetch(`${server.url}/v2/sandboxes/${"x".repeat(10)}/connect`, { method: "POST", headers: { "x-api-key": ADMIN_KEY, "content-type": "application/json" }, body: "{}" });
    assert.equal(bad.status, 404);
    assert.deepEqual(await bad.json(), { code: 404, message: `sandbox "${"x".repeat(10)}" does not exist` }, "errors are E2B's {code, message}");
  });

  test("a 5 s timeout kills at 5 s, not before; a 3 s one with onTimeout pause pauses and keeps the sandbox", async () => {
    const state = async (id: string) => (await Sandbox.getInfo(id).catch((e: unknown) => (e instanceof SandboxNotFoundError ? undefined : Promise.reject(e))))?.state;
    // The deadline counts from the create call's answer at the latest: time from just before it.
    const t0 = Date.now();
    const paused = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: "pause" } });
    const t1 = Date.now();
    const killed = await create({ timeoutMs: 5_000 });
    const made = Date.now();
    // Its deadline is 5 s from the moment its row was written, somewhere between the call (t1) and
    // the answer (made): not gone before t1 + 5 s, gone by made + 7 s.
    let pausedAfter: number | undefined;
    while (Date.now() - t1 < 4_800) {
      assert.equal(await state(killed.sandboxId), "running", `not gone before 5 s (${Date.now() - t1} ms after its create began)`);
      if (pausedAfter === undefined && (await state(paused.sandboxId)) === "paused") pausedAfter = Date.now() - t1;
      await sleep(150);
    }
    // The 3 s one (answered at t1) reads paused within 5 s of its create's answer.
    while (pausedAfter === undefined && Date.now() - t1 <= 5_000) {
      if ((await state(paused.sandboxId)) === "paused") pausedAfter = Date.now() - t1;
      else await sleep(100);
    }
    assert.ok(pausedAfter !== undefined && pausedAfter >= 3_000 - (t1 - t0) && pausedAfter <= 5_000, `paused ${pausedAfter} ms after its create answered`);
    await waitFor("the 5 s sandbox gone", async () => ((await state(killed.sandboxId)) === undefined ? true : undefined), Math.max(500, 7_000 - (Date.now() - made)), 200);
    assert.ok(Date.now() - made <= 7_300, `gone by 7 s (${Date.now() - made} ms after its create answered)`);
    await waitFor("the 3 s sandbox paused", async () => ((await state(paused.sandboxId)) === "paused" ? true : undefined), Math.max(500, 5_000 - (Date.now() - t1)), 200);
    const info = await Sandbox.getInfo(paused.sandboxId);
    assert.deepEqual(info.lifecycle, { onTimeout: "pause", autoResume: false });
    // Paused, it keeps no deadline: still there well after its timeout (checked again at the end of the next test).
    pausedAtTimeout = { id: paused.sandboxId, since: t0 };
  });

  let pausedAtTimeout: { id: string; since: number } | undefined;

  test("paging through 25 sandboxes 10 at a time, most of them paused, newest first; filters by metadata and state", async () => {
    const ids: string[] = [];
    let lastFiveFrom = 0;
    for (let i = 0; i < 25; i++) {
      if (i === 20) lastFiveFrom = Date.now();
      ids.push((await create({ metadata: { page: "yes", i: String(i) }, timeoutMs: 600_000 })).sandboxId);
    }
    for (const id of ids.slice(0, 20)) assert.equal(await Sandbox.pause(id), true);
    const seen: string[] = [];
    const pager = Sandbox.list({ query: { metadata: { page: "yes" } }, limit: 10 });
    const sizes: number[] = [];
    while (pager.hasNext) {
      const items = await pager.nextItems();
      sizes.push(items.length);
      seen.push(...items.map((s) => s.sandboxId));
    }
    assert.deepEqual(sizes, [10, 10, 5]);
    assert.deepEqual(seen, [...ids].reverse(), "every one once, newest first");
    // order=asc: by start time across the whole set, oldest first (paged the same way); desc is the default.
    const ascending: string[] = [];
    const up = Sandbox.list({ query: { metadata: { page: "yes" } }, limit: 10, order: "asc" });
    while (up.hasNext) ascending.push(...(await up.nextItems()).map((s) => s.sandboxId));
    assert.deepEqual(ascending, ids, "order=asc: oldest first");
    assert.deepEqual((await Sandbox.list({ query: { metadata: { page: "yes" } }, limit: 3, order: "desc" }).nextItems()).map((s) => s.sandboxId), [...ids].reverse().slice(0, 3));
    const badOrder = await fetch(`${server.url}/v2/sandboxes?order=sideways`, { headers: { "x-api-key": ADMIN_KEY } });
    assert.equal(badOrder.status, 400, "another order is refused");
    assert.equal(((await badOrder.json()) as { code: number }).code, 400);
    const running = await Sandbox.list({ query: { metadata: { page: "yes" }, state: ["running"] } }).nextItems();
    assert.deepEqual(running.map((s) => s.sandboxId).sort(), ids.slice(20).sort());
    const paused = await Sandbox.list({ query: { metadata: { page: "yes" }, state: ["paused"] }, limit: 100 }).nextItems();
    assert.equal(paused.length, 20);
    assert.ok(paused.every((s) => s.state === "paused"));
    const recent = await Sandbox.list({ query: { metadata: { page: "yes" }, startedAfter: new Date(lastFiveFrom) } }).nextItems();
    assert.deepEqual(recent.map((s) => s.sandboxId), ids.slice(20).reverse(), "startedAfter");
    assert.equal((await Sandbox.list({ query: { metadata: { page: "yes" }, template: "base" }, limit: 100 }).nextItems()).length, 25, "template base");
    assert.equal((await Sandbox.list({ query: { metadata: { page: "yes" }, template: "other" } }).nextItems()).length, 0, "another template");
    assert.equal((await Sandbox.list({ query: { metadata: { i: "7" } } }).nextItems()).map((s) => s.sandboxId).join(), ids[7], "a second metadata key");
    for (const id of ids) assert.equal(await Sandbox.kill(id), true);

    // The sandbox paused at its 3 s timeout is still there, 30 s on.
    assert.ok(pausedAtTimeout, "the timeout test ran first");
    const wait = 30_000 - (Date.now() - pausedAtTimeout.since);
    if (wait > 0) await sleep(wait);
    assert.equal((await Sandbox.getInfo(pausedAtTimeout.id)).state, "paused", "still paused at 30 s");
  });

  test("the same operations through /v1 and the E2B API are recorded alike in events and usage", async () => {
    const viaE2b = (await create({ timeoutMs: 600_000 })).sandboxId;
    await Sandbox.pause(viaE2b);
    await Sandbox.connect(viaE2b, { timeoutMs: 600_000 });
    await Sandbox.kill(viaE2b);
    // E2B's default network is open egress: the /v1 twin asks for the same.
    const v1 = await api("POST", "/v1/sandboxes", { persistent: true, ttl_seconds: 600, network: { egress: "open" } });
    assert.equal(v1.status, 201, v1.text);
    const viaV1 = v1.body.id as string;
    await api("POST", `/v1/sandboxes/${viaV1}/hibernate`, { mode: "warm" });
    await api("POST", `/v1/sandboxes/${viaV1}/wake`);
    await api("DELETE", `/v1/sandboxes/${viaV1}`);
    const shape = async (id: string) => ((await api("GET", `/v1/sandboxes/${id}/events`)).body.events as Array<{ type: string; reason: string | null; data: Record<string, unknown> }>)
      // What its network refused meanwhile is telemetry, not an operation.
      .filter((e) => e.type !== "network.refused").map((e) => `${e.type}/${e.reason}/${String(e.data.mode ?? "")}`);
    assert.deepEqual(await shape(viaE2b), await shape(viaV1));
    const usage = (await api("GET", "/v1/usage?group_by=sandbox")).body.groups as Array<{ key: string; running_seconds: number; warm_hibernated_seconds: number }>;
    for (const id of [viaE2b, viaV1]) {
      const g = usage.find((u) => u.key === id);
      assert.ok(g && g.running_seconds > 0 && g.warm_hibernated_seconds > 0, `${id}: ${JSON.stringify(g)}`);
    }
  });

  test("the paths of older 2.x clients: POST /sandboxes, /sandboxes/{id}/connect and /resume, GET /sandboxes, refreshes", async () => {
    const raw = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(server.url + path, { method, headers: { "x-api-key": ADMIN_KEY, ...(body !== undefined ? { "content-type": "application/json" } : {}) }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
      const text = await r.text();
      return { status: r.status, body: text ? JSON.parse(text) : undefined };
    };
    const made1 = await raw("POST", "/sandboxes", { templateID: "base", timeout: 300, metadata: { old: "client" } });
    assert.equal(made1.status, 201, JSON.stringify(made1.body));
    const id = made1.body.sandboxID as string;
    made.push(id);
    assert.equal(made1.body.envdVersion, "0.6.4");
    assert.ok(typeof made1.body.envdAccessToken === "string");
    assert.ok(((await raw("GET", "/sandboxes?metadata=old%3Dclient")).body as Array<{ sandboxID: string }>).some((s) => s.sandboxID === id), "GET /sandboxes lists it");
    assert.equal((await raw("POST", `/sandboxes/${id}/resume`, { timeout: 60 })).status, 409, "resume of a running sandbox is a conflict");
    assert.equal((await raw("POST", `/sandboxes/${id}/refreshes`, { duration: 900 })).status, 204);
    assert.ok(Date.parse((await raw("GET", `/sandboxes/${id}`)).body.endAt) > Date.now() + 800_000, "refreshes moved endAt out");
    assert.equal((await raw("POST", `/sandboxes/${id}/pause`)).status, 204);
    const resumed = await raw("POST", `/sandboxes/${id}/resume`, { timeout: 60 });
    assert.equal(resumed.status, 201, JSON.stringify(resumed.body));
    assert.equal(resumed.body.envdAccessToken, made1.body.envdAccessToken, "the same token again");
    const again = await raw("POST", `/sandboxes/${id}/connect`, { timeout: 60 });
    assert.equal(again.status, 200, "connect to a running sandbox");
    assert.equal((await raw("DELETE", `/sandboxes/${id}`)).status, 204);
    const bad = await raw("POST", "/sandboxes", { templateID: "base", timeout: -1 });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 400, "a bad body is E2B's 400");
    assert.equal((await raw("POST", "/sandboxes", { templateID: "no-such-template" })).body.code, 404);
  });
});
