// needs: many VMs
/**
 * A disk hibernation through /v1 (`{"mode": "disk"}`): the VM shuts down keeping its disk,
 * a wake boots it from that disk. Then the same against a spawned `den serve` killed with
 * SIGKILL at each of its crash points: after a restart nothing is lost. The crash points run
 * on the in-memory host (disk-hibernate-memory.test sets DEN_DISK_HIBERNATE_HOST=memory:
 * `den serve` on DEN_HOST_TRANSPORT=memory, its VMs and disks kept in its data dir across
 * the kill); here on real microVMs, the one that adopts a VM booted before the kill.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findInstanceProcesses } from "@den/runtime";
import type { RunningServer } from "../src/index.js";
import { client, freePort, spawnServer, stopProcess, testServer, untilWarmSnapshot } from "./helpers.js";

type Api = ReturnType<typeof client>;
// One sandbox here has a network (its policy must come back after the boot): no NAT table on
// this host for it (test.sh fails if one appears outside the network test namespace). The
// in-process runtime and the spawned servers both read this.
process.env.DEN_NET_MASQUERADE = "0";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The crash points on the memory host (see the top); else the rest, on real VMs. */
const MEMORY = process.env.DEN_DISK_HIBERNATE_HOST === "memory";
/** Tests of one kind of host only. */
const realOnly = MEMORY ? describe.skip : describe;
const PROBE = "cat /root/keep.txt; echo; cat /proc/sys/kernel/random/boot_id; pgrep -c -x sleep || true";

/** What a sandbox's guest says: the kept file, its boot id, how many `sleep`s run (an exec wakes a hibernated one). */
async function probe(api: Api, id: string): Promise<{ file: string; boot: string; sleeps: number }> {
  const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: PROBE });
  assert.equal(r.status, 200, r.text);
  const [file, boot, sleeps] = (r.body.stdout as string).trim().split("\n");
  return { file: file!, boot: boot!, sleeps: Number(sleeps) };
}

async function prepare(api: Api, body: Record<string, unknown> = {}): Promise<{ id: string; boot: string }> {
  const c = await api("POST", "/v1/sandboxes", { persistent: true, ttl_seconds: 900, ...body });
  assert.equal(c.status, 201, c.text);
  const id = c.body.id as string;
  const r = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "printf kept > /root/keep.txt; nohup sleep 100000 >/dev/null 2>&1 &" });
  assert.equal(r.status, 200, r.text);
  const p = await probe(api, id);
  assert.deepEqual([p.file, p.sleeps], ["kept", 1]);
  return { id, boot: p.boot };
}

const events = async (api: Api, id: string) =>
  ((await api("GET", `/v1/sandboxes/${id}/events`)).body.events as Array<{ type: string; reason: string | null; data: Record<string, unknown> }>).filter((e) => e.type !== "network.refused");

realOnly("disk hibernation through /v1", () => {
  let server: RunningServer;
  let api: Api;
  before(async () => {
    server = await testServer({ DEN_METER_INTERVAL_SECONDS: "1" });
    api = client(server.url);
  });
  after(async () => {
    for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
    await server?.close();
  });
  const hasQemu = (id: string) => findInstanceProcesses(server.cp.hosts.first!.instance).has(id);
  const usedMb = async () => (await server.cp.hosts.first!.inventory()).capacity.used.memoryMb;

  test("hibernate {mode: disk}: no VM and no memory held; an exec wakes it by a boot: files kept, processes gone, a new boot_id; billed as cold", async () => {
    const { id, boot } = await prepare(api, { network: { egress: "open" } });
    const memoryMb = (await api("GET", `/v1/sandboxes/${id}`)).body.memory_mb as number;
    const before = await usedMb();
    const t0 = Date.now();
    const h = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "disk" });
    assert.equal(h.status, 200, h.text);
    assert.equal(h.body.state, "hibernated");
    assert.equal(h.body.hibernate_mode, "disk");
    assert.equal(h.body.stored_bytes, null);
    assert.equal(hasQemu(id), false, "its QEMU is gone");
    assert.equal(await usedMb(), before - memoryMb, "admission no longer counts its memory");
    const inv = await server.cp.hosts.first!.inventory();
    assert.equal(inv.vms.find((v) => v.id === id)?.state, "off");
    // Asleep already: warm and disk answer it as it is; the store is not for a disk-only one (yet).
    assert.equal((await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "disk" })).body.hibernate_mode, "disk");
    assert.equal((await api("POST", `/v1/sandboxes/${id}/hibernate`, {})).body.hibernate_mode, "disk");
    assert.equal((await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" })).status, 409);
    await sleep(2500);
    const asleepMs = Date.now() - t0;

    const p = await probe(api, id);
    // Until it runs again: a boot on a busy host takes seconds, and it is asleep (billed cold) until then.
    const untilAwakeMs = Date.now() - t0;
    assert.equal(p.file, "kept", "the file survived");
    assert.notEqual(p.boot, boot, "it booted");
    assert.equal(p.sleeps, 0, "its background process is gone");
    assert.equal(hasQemu(id), true);
    const s = (await api("GET", `/v1/sandboxes/${id}`)).body;
    assert.equal(s.state, "running");
    assert.equal(s.hibernate_mode, null);
    assert.equal(s.memory_mb, memoryMb, "same shape");
    // Its network came back with its policy (a fresh guest needs its address set again).
    assert.equal((await api("GET", `/v1/sandboxes/${id}/network`)).body.active, true);
    const route = await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "ip -4 route show default" });
    assert.match(route.body.stdout as string, /default via/);

    const ev = await events(api, id);
    const hib = ev.find((e) => e.type === "hibernated");
    assert.equal(hib?.data.mode, "disk");
    assert.equal(hib?.reason, "user");
    assert.ok(ev.some((e) => e.type === "running" && e.data.mode === "disk"), "the wake says it was from disk");

    // Billed as cold (no memory, no vCPUs, nothing stored): never as warm.
    const usage = (await api("GET", "/v1/usage?group_by=sandbox")).body.groups as Array<Record<string, number | string>>;
    const g = usage.find((u) => u.key === id)!;
    assert.ok(g, JSON.stringify(usage));
    assert.equal(g.warm_hibernated_seconds, 0, JSON.stringify(g));
    assert.ok((g.cold_hibernated_seconds as number) >= asleepMs / 1000 - 1 && (g.cold_hibernated_seconds as number) <= untilAwakeMs / 1000 + 1, `${JSON.stringify(g)}; asleep ${asleepMs} ms, awake again after ${untilAwakeMs} ms`);
    assert.equal(g.stored_byte_seconds, 0);
    assert.ok((g.running_seconds as number) > 0);
  });

  test("from warm: its memory snapshot is dropped, a wake boots", async () => {
    const { id, boot } = await prepare(api);
    const w = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "warm" });
    assert.equal(w.body.hibernate_mode, "warm");
    const snapshot = (await server.cp.store.sandboxes.get(id))!.hibernate_snapshot!;
    await untilWarmSnapshot(server, id);
    assert.ok((await server.cp.hosts.first!.inventory()).snapshots.includes(snapshot));
    const d = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "disk" });
    assert.equal(d.status, 200, d.text);
    assert.equal(d.body.hibernate_mode, "disk");
    assert.equal(hasQemu(id), false);
    assert.equal((await server.cp.hosts.first!.inventory()).snapshots.includes(snapshot), false, "the warm snapshot is gone");
    const hib = (await events(api, id)).filter((e) => e.type === "hibernated").map((e) => e.data.mode);
    assert.deepEqual(hib, ["warm", "disk"]);
    const woke = await api("POST", `/v1/sandboxes/${id}/wake`);
    assert.equal(woke.body.state, "running");
    const p = await probe(api, id);
    assert.deepEqual([p.file, p.sleeps], ["kept", 0]);
    assert.notEqual(p.boot, boot);
  });
});

describe("disk hibernation survives kill -9 of den serve at each crash point", () => {
  let port = 0;
  let api: Api;
  let child: ChildProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), "den-disk-crash-"));
  const marker = join(dir, "hit");

  // The memory host's server: a data dir of its own, on SQLite (as the real one here).
  const memoryEnv: Record<string, string> = MEMORY ? { DEN_HOST_TRANSPORT: "memory", DEN_DATA_DIR: join(dir, "data"), DEN_STORE_DIR: join(dir, "data", "store"), DEN_DATABASE_URL: "" } : {};
  const start = async (env: Record<string, string> = {}) => {
    child = await spawnServer(port, { ...memoryEnv, ...env });
  };
  /** Waits for the armed server to die at its fault point (it must reach it). */
  const died = async (point: string) => {
    const c = child!;
    // Bounded, and the timer never holds the test process.
    if (c.exitCode === null && c.signalCode === null) await Promise.race([new Promise((r) => c.once("exit", r)), new Promise((r) => setTimeout(r, 60_000).unref())]);
    assert.equal(c.signalCode, "SIGKILL", `the server died at ${point}`);
    assert.ok(existsSync(marker), `fault point ${point} was reached`);
    rmSync(marker, { force: true });
    child = undefined;
  };

  /**
   * Restarts the server: recovery settled the sandbox as `state` (its last `event` says
   * so), its file is kept and it booted anew. Then it goes, and the server stops.
   */
  const settledAs = async (id: string, boot: string, state: string, event: string) => {
    await start();
    const s = (await api("GET", `/v1/sandboxes/${id}`)).body;
    assert.equal(s.state, state, JSON.stringify(s));
    assert.equal(s.operation, null);
    const e = (await events(api, id)).filter((x) => x.type === event).at(-1);
    assert.equal(e?.data.recovered, true, "recovery settled it");
    const p = await probe(api, id);
    assert.deepEqual([p.file, p.sleeps], ["kept", 0]);
    assert.notEqual(p.boot, boot);
    await api("DELETE", `/v1/sandboxes/${id}`);
    await stopProcess(child, "SIGTERM");
    child = undefined;
    return s as { hibernate_mode: string | null };
  };

  before(async () => {
    port = await freePort();
    api = client(`http://127.0.0.1:${port}`);
  });
  after(async () => {
    if (child && child.exitCode === null) {
      for (const s of (await api("GET", "/v1/sandboxes?limit=200")).body?.sandboxes ?? []) await api("DELETE", `/v1/sandboxes/${s.id}`);
      await stopProcess(child, "SIGTERM");
    }
    rmSync(dir, { recursive: true, force: true });
  });

  for (const point of MEMORY ? ["hibernate-disk-after-intent", "hibernate-disk-after-stop"] : []) {
    test(`killed at ${point}: after the restart it is hibernated to its disk, its files kept`, async () => {
      await start();
      const { id, boot } = await prepare(api);
      await stopProcess(child, "SIGKILL");
      await start({ DEN_FAULT_POINT: point, DEN_FAULT_MARKER: marker });
      await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "disk" }).catch(() => undefined);
      await died(point);
      // The probe of settledAs wakes it (a boot): it was hibernated to its disk when the server came back.
      assert.equal((await settledAs(id, boot, "hibernated", "hibernated")).hibernate_mode, "disk");
    });
  }

  test("killed at wake-disk-after-boot: after the restart it runs (the booted VM is adopted), files kept", async () => {
    await start();
    const { id, boot } = await prepare(api);
    assert.equal((await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "disk" })).body.hibernate_mode, "disk");
    await stopProcess(child, "SIGKILL");
    await start({ DEN_FAULT_POINT: "wake-disk-after-boot", DEN_FAULT_MARKER: marker });
    await api("POST", `/v1/sandboxes/${id}/wake`).catch(() => undefined);
    await died("wake-disk-after-boot");
    await settledAs(id, boot, "running", "running");
  });
});
