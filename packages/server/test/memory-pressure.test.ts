// needs: one VM
/**
 * A host short of memory: Den cold-hibernates its least recently active sandboxes rather
 * than let the OOM killer choose, refuses new ones while short, and every hibernated one
 * wakes with its state once memory is back. The shortage is real: a process of the test's
 * that holds host memory, with the reserve set just under what the host has free. (A host
 * full of sandboxes, a wake making room: usage.test on microVMs, admission-control.test on
 * the memory host, with the order of evictions.)
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import type { RunningServer } from "../src/server.js";
import { client, sandboxCalls, testServer, waitFor } from "./helpers.js";

const availableMb = () => Number(/^MemAvailable:\s+(\d+) kB/m.exec(readFileSync("/proc/meminfo", "utf8"))![1]) / 1024;
/**
 * The reserve sits this far under what the host had free at the start (room for the test's
 * own sandboxes to grow as they wake); the hog takes twice as much.
 */
const MARGIN_MB = 1000;

describe("memory pressure", () => {
  let server: RunningServer;
  let api: ReturnType<typeof client>;
  let hog: ChildProcess | undefined;

  before(async () => {
    server = await testServer({ DEN_MEMORY_RESERVE_MB: String(Math.floor(availableMb() - MARGIN_MB)) });
    api = client(server.url);
  });
  after(async () => {
    hog?.kill("SIGKILL");
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    await server?.close();
  });

  test("the least recently active sandbox goes cold first; nothing new is admitted while short; all wake with their state after", async () => {
    const { create, exec } = sandboxCalls(api);
    const old = await create();
    const recent = await create();
    assert.equal(await exec(old, "echo old-state > /root/f && cat /root/f"), "old-state\n");
    await new Promise((r) => setTimeout(r, 1100));
    assert.equal(await exec(recent, "echo recent-state > /root/f && cat /root/f"), "recent-state\n");

    // Someone else on the host takes memory: 2 x MARGIN_MB, every page written.
    hog = spawn("python3", ["-c", `import sys, time\nb = b"\\x01" * (${2 * MARGIN_MB} << 20)\nprint("held", flush=True)\ntime.sleep(600)`], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve, reject) => {
      hog!.stdout!.once("data", () => resolve());
      hog!.once("exit", (code) => reject(new Error(`the hog exited (${code})`)));
    });

    const cold = async (id: string) => {
      const s = (await api("GET", `/v1/sandboxes/${id}`)).body;
      return s.state === "hibernated" && s.hibernate_mode === "cold" && s.state_reason === "memory_pressure" ? s : undefined;
    };
    await waitFor("the least recently active sandbox cold-hibernated", () => cold(old), 60_000, 200);
    const c = await api("POST", "/v1/sandboxes", {});
    assert.equal(c.status, 503, c.text);
    assert.equal(c.body.error.code, "capacity_exhausted");
    assert.match(c.body.error.message, /short of memory/, c.text);
    // Still short (a cold old one frees only what it held): the next one goes too, after it.
    await waitFor("the other sandbox cold-hibernated", () => cold(recent), 60_000, 200);
    // When each hibernation began (one pass may start both: they end in either order).
    const hibernationBegan = async (id: string) => {
      const e = ((await api("GET", `/v1/sandboxes/${id}/events`)).body.events as Array<{ type: string; at: string; data: { ms?: number } }>).find((x) => x.type === "hibernated")!;
      return Date.parse(e.at) - (e.data.ms ?? 0);
    };
    assert.ok(await hibernationBegan(old) <= await hibernationBegan(recent), "least recently active first");

    hog.kill("SIGKILL");
    hog = undefined;
    // Memory comes back as the hog's pages are freed; a loaded host may take a while. What it
    // last said is kept for the failure message (a refusal for anything but memory is a bug).
    let refusal = "";
    const again = await waitFor("a create is admitted again", async () => {
      const r = await api("POST", "/v1/sandboxes", { persistent: true });
      if (r.status === 201) return r.body.id as string;
      assert.equal(r.status, 503, r.text);
      refusal = `${r.text}; now ${Math.floor(availableMb())} MiB available`;
      return undefined;
    }, 60_000, 500).catch((e: Error) => { throw new Error(`${e.message}: ${refusal}`); });
    await api("DELETE", `/v1/sandboxes/${again}`);
    assert.equal(await exec(old, "cat /root/f"), "old-state\n");
    assert.equal(await exec(recent, "cat /root/f"), "recent-state\n");
  });
});

describe("a host full by its overcommitted promises", () => {
  let server: RunningServer;
  let api: ReturnType<typeof client>;

  before(async () => {
    // Charged: what a VM holds privately plus a quarter of the rest of its RAM (about 160 MiB
    // for an idle 512 MiB sandbox here, 128 for one being made): five idle ones fit in 900.
    server = await testServer({ DEN_CAPACITY_MEMORY_MB: "900", DEN_MEMORY_OVERCOMMIT: "4", DEN_VM_POOL: "0" });
    api = client(server.url);
  });
  after(async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    await server?.close();
  });

  test("a wake far over capacity cold-hibernates at once as many as it takes, by what each is charged", async () => {
    const { create, exec } = sandboxCalls(api);
    const used = async () => (await api("GET", "/v1/host")).body.used.memory_mb as number;
    const [light1, light2, woken, heavy1, heavy2] = [await create(), await create(), await create(), await create(), await create()];
    for (const [id, n] of [[light1, 1], [light2, 2], [woken, 3]] as const) {
      assert.equal(await exec(id, `echo state-${n} > /root/f && cat /root/f`), `state-${n}\n`);
      await new Promise((r) => setTimeout(r, 1100));
    }
    // Two of them fill 400 MiB each: the host is now charged far past its 900 MiB (the overcommit's promise).
    for (const id of [heavy1, heavy2]) {
      assert.equal(await exec(id, `nohup python3 -c 'import os, time\nb = bytearray(400 << 20)\nfor i in range(0, len(b), 1 << 20): b[i:i + (1 << 20)] = os.urandom(1 << 20)\nopen("/root/held", "w").close()\ntime.sleep(10**6)' >/dev/null 2>&1 & while [ ! -e /root/held ]; do sleep 0.2; done; echo held`), "held\n");
    }
    assert.equal((await api("POST", `/v1/sandboxes/${woken}/hibernate`, { mode: "cold" })).status, 200);
    const before = await used();
    assert.ok(before + 128 - 900 > 512, `charged ${before} MiB with it cold: its wake needs more than its own RAM freed`);

    // Its exec wakes it: the lights (least recently active, ~160 MiB each) do not free enough,
    // so a heavy one goes too — all started together, none waiting for another to finish.
    assert.equal(await exec(woken, "cat /root/f"), "state-3\n");
    const hibernation = async (id: string) => {
      const s = (await api("GET", `/v1/sandboxes/${id}`)).body;
      if (s.state !== "hibernated" || s.state_reason !== "memory_pressure") return undefined;
      const e = ((await api("GET", `/v1/sandboxes/${id}/events`)).body.events as Array<{ type: string; at: string; data: { ms?: number } }>).reverse().find((x) => x.type === "hibernated")!;
      return { began: Date.parse(e.at) - (e.data.ms ?? 0), ended: Date.parse(e.at) };
    };
    const evicted = (await Promise.all([light1, light2, heavy1, heavy2].map(hibernation))).filter((h) => h !== undefined);
    assert.ok(evicted.length >= 3, `${evicted.length} cold-hibernated to make room`);
    assert.ok(Math.max(...evicted.map((h) => h.began)) < Math.min(...evicted.map((h) => h.ended)), `started together: ${JSON.stringify(evicted)}`);
    assert.equal(await exec(light1, "cat /root/f"), "state-1\n");
    assert.equal(await exec(light2, "cat /root/f"), "state-2\n");
    for (const id of [heavy1, heavy2]) assert.equal(await exec(id, "test -e /root/held && echo ok"), "ok\n");
  });
});
