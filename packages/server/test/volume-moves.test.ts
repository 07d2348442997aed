// needs: many VMs
/**
 * A volume moving through the snapshot store, killed at every step. On one host the whole
 * path runs: a drain parks the volume (uploaded, the host's image removed), and a read of
 * its files after the undrain brings it back (downloaded, the stored copy released). The
 * server (`den serve`, its host agent in-process) dies with SIGKILL at each of the move's
 * fault points; after a restart the volume has every byte it had, exactly one copy of it is
 * the volume (the host's image, once it is read back), and the store keeps no copy of it.
 * The fault points run on the in-memory host (volume-moves-memory.test sets
 * DEN_VOLUME_MOVES_HOST=memory: `den serve` on DEN_HOST_TRANSPORT=memory, whose host keeps its
 * volume images on disk as a real one does); the rest here on real microVMs, and the fleet
 * kills a mover on real VMs (fleet.test).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { randomBytes, createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Database from "better-sqlite3";
import { MemoryHostAgent } from "@den/host-agent";
import { ADMIN_KEY, client, dataDir, freePort, sandboxCalls, spawnServer, stopProcess, waitFor } from "./helpers.js";

/** The fault points, on the memory host (see the top); else the rest, on real VMs. */
const MEMORY = process.env.DEN_VOLUME_MOVES_HOST === "memory";
const PORT = await freePort();
/** The move's points, in the order a park then a bring reaches them. */
const POINTS = ["volume-move-after-intent", "volume-move-after-upload", "volume-move-after-park", "volume-move-after-fetch", "volume-move-after-commit"] as const;
/** Points of the bring (the download); the others are the park's. */
const BRING = new Set<string>(["volume-move-after-fetch", "volume-move-after-commit"]);

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;

/** A test of what only real VMs have (an image file on the host, a guest writing random bytes). */
const realOnly = MEMORY ? test.skip : test;

describe("a volume moving through the store survives kill -9 at each step", () => {
  const api = client(`http://127.0.0.1:${PORT}`);
  const dir = mkdtempSync(join(tmpdir(), "den-volmove-"));
  const armFile = join(dir, "armed");
  const hit = join(dir, "hit");
  // The memory host's server has a data dir and store of its own (SQLite: its file is read below).
  const root = MEMORY ? join(dir, "data") : dataDir();
  const memoryEnv: Record<string, string> = MEMORY ? { DEN_HOST_TRANSPORT: "memory", DEN_DATA_DIR: root, DEN_STORE_DIR: join(root, "store"), DEN_DATABASE_URL: "" } : {};
  const env = { DEN_FAULT_POINT_FILE: armFile, DEN_FAULT_MARKER: hit, DEN_STORE_GC_INTERVAL_SECONDS: "1", ...memoryEnv };
  let server: ChildProcess | undefined;
  let hostId = "";
  const start = async () => (server = await spawnServer(PORT, env));
  const arm = (point?: string) => (point ? writeFileSync(armFile, point) : rmSync(armFile, { force: true }));
  const image = (id: string) => join(root, "volumes", id, "volume.qcow2");
  /** Whether the host has volume `id`'s image. */
  const onHost = (id: string) => (MEMORY ? (MemoryHostAgent.readState(root)?.volumes ?? []).includes(id) : existsSync(image(id)));
  /** Snapshot ids in the store whose manifest is a copy of volume `id`. */
  const storedCopies = (id: string) => {
    const out: string[] = [];
    const store = join(root, "store");
    for (const dep of existsSync(store) ? readdirSync(store) : []) {
      const snaps = join(store, dep, "snapshots");
      for (const s of existsSync(snaps) ? readdirSync(snaps) : []) {
        const m = join(snaps, s, "store-manifest.json");
        if (existsSync(m) && (JSON.parse(readFileSync(m, "utf8")) as { snapshot?: { volume?: string } }).snapshot?.volume === id) out.push(s);
      }
    }
    return out;
  };
  const put = async (name: string, path: string, data: Uint8Array) => {
    const r = await api("PUT", `/v1/volumes/${name}/files?path=${encodeURIComponent(path)}`, data, { "content-type": "application/octet-stream" });
    assert.equal(r.status, 200, r.text);
  };
  const read = async (name: string, path: string) => {
    const r = await fetch(`http://127.0.0.1:${PORT}/v1/volumes/${name}/files?path=${encodeURIComponent(path)}`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    return { status: r.status, body: new Uint8Array(await r.arrayBuffer()) };
  };
  const drainLeft = async () => {
    const r = await api("POST", `/v1/hosts/${hostId}/drain`, {});
    assert.equal(r.status, 202, r.text);
    return r.body.left as number;
  };

  before(async () => {
    arm(undefined);
    await start();
    const hosts = (await api("GET", "/v1/hosts")).body.hosts as Array<{ id: string }>;
    assert.equal(hosts.length, 1, JSON.stringify(hosts));
    hostId = hosts[0]!.id;
  });
  after(async () => {
    arm(undefined);
    if (!server || exited(server)) await start();
    await api("POST", `/v1/hosts/${hostId}/undrain`, {});
    for (const v of (await api("GET", "/v1/volumes")).body?.volumes ?? []) if (v.name.startsWith("mv-")) await api("DELETE", `/v1/volumes/${v.name}`);
    await stopProcess(server, "SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [i, point] of MEMORY ? POINTS.entries() : []) {
    test(point, async () => {
      const name = `mv-${i}`;
      const data = randomBytes(3 << 20);
      if (!server || exited(server)) await start();
      const made = await api("POST", "/v1/volumes", { name, size_mb: 64 });
      assert.equal(made.status, 201, made.text);
      const id = made.body.id as string;
      await put(name, "/blob", data);
      rmSync(hit, { force: true });
      const armed = server!;
      const gone = new Promise<void>((r) => (exited(armed) ? r() : armed.once("exit", () => r())));
      if (!BRING.has(point)) arm(point);
      // The drain parks it (in the background: the server dies at a park point).
      await drainLeft().catch(() => undefined);
      if (BRING.has(point)) {
        await waitFor("the volume parked", async () => ((await drainLeft()) === 0 ? true : undefined), 60_000, 500);
        assert.ok(!onHost(id), "parked: its image left the host");
        assert.equal(storedCopies(id).length, 1);
        assert.equal((await api("POST", `/v1/hosts/${hostId}/undrain`, {})).status, 204);
        arm(point);
        // A read brings it back to the host: the server dies on the way.
        await read(name, "/blob").catch(() => undefined);
      }
      await Promise.race([gone, new Promise((_, rej) => setTimeout(() => rej(new Error(`${point}: the server kept running`)), 60_000))]);
      arm(undefined);
      assert.equal(readFileSync(hit, "utf8").trim(), point, "the point was reached");

      await start();
      if (point === "volume-move-after-park") {
        // The park committed, the removal of the host's image never ran: the volumes' sweep
        // removes the image the row no longer names (the store's copy is the volume).
        await waitFor("the image the park left is removed", async () => (onHost(id) ? undefined : true), 30_000, 250);
        assert.equal(storedCopies(id).length, 1, "its stored copy stays");
      }
      assert.equal((await api("POST", `/v1/hosts/${hostId}/undrain`, {})).status, 204);
      // Every byte, wherever the last committed step left it (a read brings it back to the host).
      const back = await read(name, "/blob");
      assert.equal(back.status, 200);
      assert.equal(sha(back.body), sha(data));
      const v = (await api("GET", `/v1/volumes/${name}`)).body;
      assert.equal(v.id, id);
      assert.ok(onHost(id), "on the host again");
      // Its stored copies (the upload of a move that died, the copy it came back from) are collected.
      await waitFor("no copy of it left in the store", async () => (storedCopies(id).length === 0 ? true : undefined), 30_000, 500);
      // Still one volume: writable, and deleted whole.
      await put(name, "/after", Buffer.from("after"));
      assert.equal((await api("DELETE", `/v1/volumes/${name}`)).status, 204);
      assert.ok(!onHost(id) && !existsSync(join(root, "volumes", id)), "its image went with it");
    });
  }

  realOnly("an image on the host that no volume's row names is removed by the sweep; a volume's own stays", async () => {
    if (!server || exited(server)) await start();
    const made = await api("POST", "/v1/volumes", { name: "mv-kept", size_mb: 64 });
    assert.equal(made.status, 201, made.text);
    await put("mv-kept", "/kept", Buffer.from("kept"));
    // As a volume forgotten while its host did not answer would leave it.
    const stray = "vol_" + "abcdefghijklmnop";
    mkdirSync(join(dataDir(), "volumes", stray));
    writeFileSync(image(stray), "not a volume any more");
    await waitFor("the stray image is removed", async () => (existsSync(join(dataDir(), "volumes", stray)) ? undefined : true), 30_000, 250);
    assert.ok(existsSync(image(made.body.id)), "the volume's own image stays");
    const back = await read("mv-kept", "/kept");
    assert.equal(Buffer.from(back.body).toString(), "kept");
    assert.equal((await api("DELETE", "/v1/volumes/mv-kept")).status, 204);
  });

  realOnly("a sandbox whose volume was parked while it was cold wakes with it", async () => {
    if (!server || exited(server)) await start();
    assert.equal((await api("POST", "/v1/volumes", { name: "mv-sbx", size_mb: 64 })).status, 201);
    const { create, exec } = sandboxCalls(api);
    const id = await create({ volumes: [{ name: "mv-sbx", path: "/data" }] });
    const sum = await exec(id, "head -c 5000000 /dev/urandom > /data/blob && sync && sha256sum /data/blob | cut -c1-64");
    // The drain cold-hibernates it, then parks its volume.
    await waitFor("drained", async () => ((await drainLeft()) === 0 ? true : undefined), 120_000, 500);
    const s = (await api("GET", `/v1/sandboxes/${id}`)).body;
    assert.deepEqual([s.state, s.hibernate_mode], ["hibernated", "cold"]);
    assert.equal((await api("POST", `/v1/hosts/${hostId}/undrain`, {})).status, 204);
    assert.equal(await exec(id, "sha256sum /data/blob | cut -c1-64"), sum);
    assert.equal((await api("DELETE", `/v1/sandboxes/${id}`)).status, 200);
    assert.equal((await api("DELETE", "/v1/volumes/mv-sbx")).status, 204);
  });

  realOnly("volumes nothing held for DEN_VOLUME_PARK_IDLE_SECONDS are parked in the store, held ones stay; a wake that comes while its volume is parked waits for it", async () => {
    await stopProcess(server, "SIGTERM");
    server = await spawnServer(PORT, { ...env, DEN_VOLUME_PARK_IDLE_SECONDS: "3" });
    const db = new Database(join(root, "den.db"), { readonly: true, fileMustExist: true });
    const volumeState = (id: string) => (db.prepare("SELECT state FROM volumes WHERE id = ?").get(id) as { state: string } | undefined)?.state;
    let id = "";
    try {
      const idle = await api("POST", "/v1/volumes", { name: "mv-idle", size_mb: 64 });
      assert.equal(idle.status, 201, idle.text);
      const bytes = randomBytes(3 << 20);
      await put("mv-idle", "/blob", bytes);
      const held = await api("POST", "/v1/volumes", { name: "mv-held", size_mb: 128 });
      assert.equal(held.status, 201, held.text);
      const { create, exec } = sandboxCalls(api);
      id = await create({ volumes: [{ name: "mv-held", path: "/data" }] });
      // Enough bytes that its park takes a while (random: they do not compress).
      const sum = await exec(id, "head -c 40000000 /dev/urandom > /data/blob && sync && sha256sum /data/blob | cut -c1-64");

      await waitFor("the idle volume is parked", async () => (!existsSync(image(idle.body.id)) && storedCopies(idle.body.id).length === 1 ? true : undefined), 60_000, 250);
      // Sweeps run every second: the held one has been looked at several times since.
      await sleep(4000);
      assert.ok(existsSync(image(held.body.id)), "a volume a running sandbox holds stays on its host");
      assert.deepEqual(storedCopies(held.body.id), []);
      assert.equal(volumeState(held.body.id), "ready");
      const back = await read("mv-idle", "/blob");
      assert.equal(back.status, 200);
      assert.equal(sha(back.body), sha(bytes), "the parked volume comes back with every byte");

      // Cold, the sandbox lets go of its volume, which is parked 3 s later; its wake (an exec)
      // sent while the park runs waits for it and fetches the volume, rather than a 409.
      let caught = false;
      for (let round = 0; round < 3 && !caught; round++) {
        const h = await api("POST", `/v1/sandboxes/${id}/hibernate`, { mode: "cold" });
        assert.equal(h.status, 200, h.text);
        await waitFor("the volume's park begins", async () => (volumeState(held.body.id) === "moving" ? true : undefined), 60_000, 5);
        const woke = api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "sha256sum /data/blob | cut -c1-64" });
        await sleep(20);
        caught = volumeState(held.body.id) === "moving";
        const r = await woke;
        assert.equal(r.status, 200, r.text);
        assert.equal(r.body.stdout, sum);
      }
      assert.ok(caught, "a wake was sent while the volume was moving");
      assert.ok(existsSync(image(held.body.id)), "the woken sandbox's volume is back on the host");
      await waitFor("the stored copy is collected", async () => (storedCopies(held.body.id).length === 0 ? true : undefined), 30_000, 250);
    } finally {
      db.close();
      if (id) await api("DELETE", `/v1/sandboxes/${id}`);
      for (const name of ["mv-idle", "mv-held"]) await api("DELETE", `/v1/volumes/${name}`);
    }
  });
});
